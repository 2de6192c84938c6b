// Differential test: renders templates with our engine and with the reference,
// render_reference.py (python3-jinja2 set up as transformers does), and compares byte for
// byte. The corpus: templates of our own that exercise every construct, the built-ins, and
// real model templates from llama.cpp's models/templates (test data read at run time: taken
// from $TG_CHAT_TEMPLATES_DIR, or cloned from the llama.cpp peer's git bundle into the build
// folder). Skips with the reason when python3-jinja2, the bundle or git is missing.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "serve/chat_template/chat_template.h"

namespace tg::chat_template {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// The real templates compared (llama.cpp's models/templates file names).
const char* const kModelTemplates[] = {"meta-llama-Llama-3.1-8B-Instruct.jinja",
                                       "meta-llama-Llama-3.2-3B-Instruct.jinja",
                                       "meta-llama-Llama-3.3-70B-Instruct.jinja",
                                       "Qwen-Qwen2.5-7B-Instruct.jinja",
                                       "Qwen-Qwen3-0.6B.jinja",
                                       "Qwen-QwQ-32B.jinja",
                                       "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                       "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                                       "google-gemma-2-2b-it.jinja",
                                       "microsoft-Phi-3.5-mini-instruct.jinja",
                                       "openai-gpt-oss-120b.jinja",
                                       "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
                                       "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                       "ibm-granite-granite-3.3-2B-Instruct.jinja",
                                       "HuggingFaceTB-SmolLM3-3B.jinja"};

// Templates of our own, one or a few constructs each, rendered with ConstructContext().
const char* const kConstructTemplates[] = {
    "plain text\n  {{ 'expr' }}  \n{# comment #}\n  {% if true %}\n  lstripped\n  {% endif "
    "%}\nend\n",
    "{%- if x -%}  a  {%- endif -%}  b {{- ' c ' -}} d {%+ if true +%} e {% endif %}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first "
    "}}/{{ loop.last }}/{{ loop.length }}:{{ m.role }} {% endfor %}",
    "{% for m in messages if m.role == 'user' %}{{ loop.index }}{{ m.content }}{% else %}none{% "
    "endfor %}",
    "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}|{% for k, v in obj.items() %}{{ k }}={{ v "
    "}};{% endfor %}",
    "{% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break "
    "%}{% endif %}{{ x }}{% endfor %}",
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
    "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}",
    "{% set ns = namespace(total=0, seen=false) %}{% for i in range(5) %}{% set ns.total = "
    "ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }}",
    "{% set block %}hello {{ name }}{% endset %}[{{ block }}]",
    "{% macro greet(who, punct='!') %}Hi {{ who }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ "
    "greet('b', '?') }} {{ greet(who='c', punct='.') }}",
    "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}",
    "{{ 'a\\tb\\n' ~ \"q'\" ~ '\\u00e9\\x41' }} {{ 42 }} {{ -3.5 }} {{ 1e3 }} {{ true }} {{ True "
    "}} {{ none }} {{ None }} {{ [1, 'a', none, 2.0] }} {{ {'k': 'v', 'n': [1]} }}",
    "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 "
    "% 3 }} {{ 2 ** 8 }} {{ 'ab' * 2 }} {{ 1 + 2.5 }} {{ 'x' ~ 1 ~ none }}",
    "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' == 'a' }} {{ 1 != 1.0 }} {{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} "
    "{{ 3 not in [1, 2] }} {{ 'role' in obj }}",
    "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 'a' if n > 1 else 'b' }} {{ 'c' if "
    "false }}|",
    "{{ x is defined }} {{ n is defined }} {{ x is undefined }} {{ none is none }} {{ 's' is "
    "string }} {{ 1 is number }} {{ 1.5 is integer }} {{ obj is mapping }} {{ messages is iterable "
    "}} {{ 's' is sequence }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ 'a' is "
    "equalto 'a' }} {{ 3 is eq 3 }} {{ 3 is odd }} {{ 4 is even }} {{ obj is not none }}",
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ obj.missing }}|{{ messages[-1].role }} "
    "{{ messages[1:] | length }} {{ 'hello'[::-1] }} {{ [1,2,3,4][1:3] }} {{ 'hello'[1:] }} {{ "
    "[1,2,3][::2] }}",
    "{{ ' x '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a b  c'.split() }}|{{ 'a,b'.split(',') "
    "}}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() "
    "}}|{{ 'aXa'.replace('a', 'b') }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}|{{ "
    "'{} and {}'.format(1, 'x') }}",
    "{% for k in obj.keys() %}{{ k }},{% endfor %}{% for v in obj.values() %}{{ v }},{% endfor "
    "%}{{ obj.get('role') }}{{ obj.get('nope', 'dflt') }}{{ obj.get('nope') }}",
    "{{ '  t  '|trim }}|{{ obj|tojson }}|{{ obj|tojson(indent=2) }}|{{ messages|length }}|{{ "
    "'héllo'|length }}|{{ [3,1,2]|first }}{{ [3,1,2]|last }}|{{ [1,2,3]|join(', ') }}|{{ "
    "x|default('d') }}{{ ''|d('e', true) }}",
    "{{ 'Hello World'|lower }} {{ 'hello'|upper }} {{ 'hello big-world'|title }} {{ "
    "'hello'|capitalize }} {{ 'aaa'|replace('a', 'b', 2) }} {{ obj|items|list }} {{ 'abc'|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ "
    "messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ "
    "messages|map(attribute='content')|first }}",
    "{{ 42|string }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ -3|abs }} {{ "
    "2.567|round(2) }} {{ 2.5|round }} {{ [1,2,3]|reverse|list }} {{ ['b','A','c']|sort }} {{ "
    "[1,2,1,3]|unique|list }} {{ 'a\\nb\\n\\nc'|indent(2) }} {{ 'x'|safe }} {{ '<a&b>'|e }}",
    "{{ {'b': 1, 'a': [1, 2.5, 'é', none, true]}|tojson }} {{ 'quote\"back\\\\slash\\nnl'|tojson "
    "}} {{ [] | tojson(indent=4) }} {{ {'a': {'b': []}}|tojson(indent=2) }}",
    "{{ strftime_now('%Y-%m-%d %d %B %b') }}",
    "{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% "
    "endif %}ok",
    "{% for m in messages %}{% if loop.first %}{% set first = m.role %}{% endif %}{{ first }}.{% "
    "endfor %}",
    "{{ messages|map(attribute='role')|unique|list }} {{ range(3)|list }} {{ range(1, 7, 2)|list "
    "}} {{ [1,2,3]|sum }} {{ [4,1,9]|max }} {{ dict(a=1) }}",
    "  {%- for m in messages %}\n    <{{ m.role }}>\n  {% endfor -%}\n  tail  \n",
    "{% raw %}{{ not rendered }}{% endraw %} {{ (1, 2) }} {{ 'a' 'b' }} {{ 1_000 }}",
    "{% filter upper %}shout {{ name }}{% endfilter %} {{ obj|dictsort }} {{ "
    "obj|dictsort(by='key', reverse=true) }} {{ none|selectattr('x')|list }} {{ "
    "none|map('upper')|list }}",
};

Json ConstructContext() {
  return Json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi \"there\" — é"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": "Bye"}], "obj": {"role": "user", "n": 1.5, "list": [1, 2]},
      "n": 4, "name": "Ann", "add_generation_prompt": true, "bos_token": "<s>"})");
}

// Conversations for the model templates.
std::vector<Json> Conversations() {
  const char* kMessages[] = {R"([{"role": "user", "content": "Hello!"}])",
                             R"([{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is 2+2?"}])",
                             R"([{"role": "system", "content": "You are terse."},
          {"role": "user", "content": "Name a colour."},
          {"role": "assistant", "content": "Blue."},
          {"role": "user", "content": "Another one?"}])",
                             R"([{"role": "user", "content": "Write \"hi\" in French."},
          {"role": "assistant", "content": "Salut — « bonjour » !"},
          {"role": "user", "content": "And in Japanese?\nOne word."},
          {"role": "assistant", "content": "こんにちは"}])",
                             R"([{"role": "user", "content": "  padded question  "},
          {"role": "assistant", "content": "  padded answer\n"},
          {"role": "user", "content": "ok"}])",
                             R"([{"role": "system", "content": "Be nice."},
          {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello, how can I help?"}])"};
  std::vector<Json> out;
  for (size_t i = 0; i < std::size(kMessages); ++i) {
    Json ctx = Json::object();
    ctx["messages"] = Json::parse(kMessages[i]);
    ctx["add_generation_prompt"] = i % 3 != 2 && i != 5;
    ctx["bos_token"] = "<|bos|>";
    ctx["eos_token"] = "<|eos|>";
    if (i % 2 == 1) ctx["tools"] = nullptr;
    out.push_back(std::move(ctx));
  }
  return out;
}

std::tm FixedNow() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 12;
  std::time_t secs = timegm(&t);
  gmtime_r(&secs, &t);  // fills in the weekday and the day of the year.
  return t;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The templates folder, or "" with the reason in *why.
std::string FindTemplatesDir(std::string* why) {
  if (const char* dir = std::getenv("TG_CHAT_TEMPLATES_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  const char* home = std::getenv("HOME");
  fs::path bundle =
      fs::path(home ? home : "") / ".cache/tensorgrid-peer/main/package/llama/gitRelease.bundle";
  const char* work = std::getenv("TG_CHAT_TEMPLATE_WORK_DIR");
  fs::path clone = fs::path(work ? work : fs::temp_directory_path().string()) / "llama-src";
  if (fs::exists(clone / "models/templates")) return (clone / "models/templates").string();
  if (!fs::exists(bundle)) {
    *why = "no llama.cpp bundle at " + bundle.string() +
           " (run: bash $TG_SHARED_DIR/peer/llama-cpp-peer.sh setup) and no TG_CHAT_TEMPLATES_DIR";
    return "";
  }
  if (std::system("git --version > /dev/null 2>&1") != 0) {
    *why = "git is not installed (needed to clone " + bundle.string() + ")";
    return "";
  }
  std::string cmd = "git -c advice.detachedHead=false clone -q '" + bundle.string() + "' '" +
                    clone.string() + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(clone / "models/templates")) {
    *why = "cloning " + bundle.string() + " failed";
    return "";
  }
  return (clone / "models/templates").string();
}

struct Case {
  std::string label;
  std::string source;
  Json context;
};

// Renders all cases with the reference in one python3 process.
Json RenderReference(const std::vector<Case>& cases, std::string* why) {
  const char* script = std::getenv("TG_CHAT_TEMPLATE_SCRIPT");
  if (script == nullptr) {
    *why = "TG_CHAT_TEMPLATE_SCRIPT is not set (run through ctest)";
    return Json();
  }
  if (std::system("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
    *why = "python3 with jinja2 is not installed (apt-get install python3-jinja2)";
    return Json();
  }
  Json request = {{"now", "2024-07-26T12:00:00"}, {"cases", Json::array()}};
  for (const Case& c : cases)
    request["cases"].push_back({{"template", c.source}, {"context", c.context}});
  fs::path dir = fs::temp_directory_path() / ("tg_chat_template_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "request.json") << request.dump();
  std::string cmd = "python3 '" + std::string(script) + "' < '" + (dir / "request.json").string() +
                    "' > '" + (dir / "response.json").string() + "'";
  int rc = std::system(cmd.c_str());
  Json response = rc == 0 ? Json::parse(ReadFile(dir / "response.json")) : Json();
  fs::remove_all(dir);
  if (rc != 0) *why = "the reference script failed";
  return response;
}

// Compares one case; returns "" on agreement, else what differs.
std::string Compare(const Case& c, const Json& reference) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> t = ChatTemplate::Parse(c.source);
  if (!t.ok() && !reference["ok"].get<bool>()) return "";  // e.g. list.append, refused by both.
  if (!t.ok()) return "Parse: " + std::string(t.status().message());
  RenderOptions options;
  options.now = FixedNow();
  absl::StatusOr<std::string> ours = (*t)->Render(c.context, options);
  if (!reference["ok"].get<bool>()) {
    std::string err = reference["error"].get<std::string>();
    if (ours.ok()) return "reference failed (" + err + ") but we rendered";
    if (err.rfind("TemplateError: ", 0) == 0 && err.substr(15) != ours.status().message()) {
      return "raise_exception message differs: " + err + " vs " +
             std::string(ours.status().message());
    }
    return "";
  }
  if (!ours.ok()) return "Render: " + std::string(ours.status().message());
  std::string want = reference["text"].get<std::string>();
  if (*ours == want) return "";
  size_t at = 0;
  while (at < want.size() && at < ours->size() && want[at] == (*ours)[at]) ++at;
  return "differs at byte " + std::to_string(at) + ": want «" + want.substr(at, 60) + "» got «" +
         ours->substr(at, 60) + "»";
}

void RunCases(const std::vector<Case>& cases) {
  std::string why;
  Json reference = RenderReference(cases, &why);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_EQ(reference.size(), cases.size());
  struct Counts {
    int passed = 0, total = 0, raised = 0;
  };
  std::map<std::string, Counts> per_label;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string diff = Compare(cases[i], reference[i]);
    Counts& counts = per_label[cases[i].label];
    int& passed = counts.passed;
    int& total = counts.total;
    ++total;
    counts.raised += !reference[i]["ok"].get<bool>();
    if (diff.empty()) {
      ++passed;
    } else {
      ADD_FAILURE() << cases[i].label << " case " << total << ": " << diff;
    }
  }
  for (const auto& [label, counts] : per_label) {
    std::printf("%-50s %d/%d %s (%d of them raise on both sides)\n", label.c_str(), counts.passed,
                counts.total, counts.passed == counts.total ? "pass" : "FAIL", counts.raised);
  }
}

TEST(ChatTemplateReference, OwnConstructTemplates) {
  std::vector<Case> cases;
  for (size_t i = 0; i < std::size(kConstructTemplates); ++i) {
    Json ctx = ConstructContext();
    cases.push_back({"construct #" + std::to_string(i), kConstructTemplates[i], ctx});
    ctx["messages"].erase(0);  // without the system message too.
    ctx.erase("n");
    cases.push_back({"construct #" + std::to_string(i), kConstructTemplates[i], ctx});
  }
  RunCases(cases);
}

TEST(ChatTemplateReference, Builtins) {
  std::vector<Case> cases;
  for (const std::string& name : ChatTemplate::BuiltinNames()) {
    absl::StatusOr<std::string> source = ChatTemplate::BuiltinSource(name);
    ASSERT_TRUE(source.ok());
    for (const Json& ctx : Conversations()) cases.push_back({"builtin " + name, *source, ctx});
  }
  RunCases(cases);
}

TEST(ChatTemplateReference, ModelTemplates) {
  std::string why;
  std::string dir = FindTemplatesDir(&why);
  if (dir.empty()) GTEST_SKIP() << why;
  std::vector<Case> cases;
  std::vector<std::string> names(std::begin(kModelTemplates), std::end(kModelTemplates));
  if (std::getenv("TG_CHAT_TEMPLATES_ALL") != nullptr) {  // every template there, for a survey.
    names.clear();
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() == ".jinja") names.push_back(entry.path().filename().string());
    }
  }
  for (const std::string& name : names) {
    fs::path path = fs::path(dir) / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    std::string source = ReadFile(path);
    for (const Json& ctx : Conversations()) cases.push_back({name, source, ctx});
  }
  RunCases(cases);
}

}  // namespace
}  // namespace tg::chat_template
