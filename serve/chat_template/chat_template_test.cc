#include "serve/chat_template/chat_template.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tg::chat_template {
namespace {

using Json = nlohmann::ordered_json;

std::string Render(absl::string_view source, const Json& context = Json::object()) {
  auto t = ChatTemplate::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 6;
  now.tm_mday = 26;
  auto out = (*t)->Render(context, RenderOptions{now});
  if (!out.ok()) return "RENDER ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(ChatTemplate, TextAndExpressions) {
  EXPECT_EQ(Render("a {{ 1 + 2 }} b"), "a 3 b");
  EXPECT_EQ(Render("{{ 'x' ~ 1 ~ none }}"), "x1None");
  EXPECT_EQ(Render("{{ [1, 'a', none, true, 2.0] }}"), "[1, 'a', None, True, 2.0]");
  EXPECT_EQ(Render("{{ {'k': \"it's\"} }}"), "{'k': \"it's\"}");
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
            "3 -4 2 3.5 1024");
  EXPECT_EQ(Render("{{ 1e16 }} {{ 0.00001 }} {{ 0.1 + 0.2 }}"), "1e+16 1e-05 0.30000000000000004");
  EXPECT_EQ(Render("{{ 'a\\tb\\u00e9' }}"), "a\tbé");
  EXPECT_EQ(Render("{{ missing }}|{{ missing is defined }}"), "|False");
}

TEST(ChatTemplate, CommentsAndWhitespaceControl) {
  EXPECT_EQ(Render("a{# note #}b"), "ab");
  EXPECT_EQ(Render("  {% if true %}\n  x\n  {% endif %}\ny\n"), "  x\ny");
  EXPECT_EQ(Render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(Render("a\n  {%- if true -%}\n  b  {%- endif %}"), "ab");
  EXPECT_EQ(Render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(Render("{{ 'x' }}\n"), "x");  // one trailing newline of the source is dropped.
}

TEST(ChatTemplate, ForLoops) {
  Json ctx = Json::parse(R"({"xs": ["a", "b", "c"], "d": {"k": 1, "j": 2}})");
  EXPECT_EQ(
      Render("{% for x in xs %}{{ loop.index }}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}",
             ctx),
      "1a,2b,3c");
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ "
                   "loop.length }} {% endfor %}",
                   ctx),
            "03True3 12False3 21False3 ");
  EXPECT_EQ(Render("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{% endfor %}", ctx),
            "1a2c");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx), "k=1;j=2;");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
}

TEST(ChatTemplate, SetScopingAndNamespace) {
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
            "51");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% "
                   "endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(Render("{% set b %}hi {{ 1 }}{% endset %}[{{ b }}]"), "[hi 1]");
  EXPECT_EQ(Render("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
}

TEST(ChatTemplate, MacrosAndCall) {
  EXPECT_EQ(
      Render("{% macro f(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}"),
      "[1d][12]");
  EXPECT_EQ(
      Render("{% macro box() %}<{{ caller() }}>{% endmacro %}{% call box() %}in{% endcall %}"),
      "<in>");
}

TEST(ChatTemplate, TestsAndAccess) {
  Json ctx = Json::parse(R"({"m": {"role": "user"}, "xs": [1, 2, 3]})");
  EXPECT_EQ(
      Render("{{ m.role }}{{ m['role'] }}{{ m.nope }}|{{ xs[-1] }}{{ xs[1:] }}{{ xs[::-1] }}", ctx),
      "useruser|3[2, 3][3, 2, 1]");
  EXPECT_EQ(Render("{{ m is mapping }}{{ xs is iterable }}{{ 's' is string }}{{ 3 is odd }}"
                   "{{ m.role is equalto 'user' }}{{ none is none }}{{ true is number }}{{ true is "
                   "integer }}",
                   ctx),
            "TrueTrueTrueTrueTrueTrueTrueFalse");
  EXPECT_EQ(
      Render("{{ 'a' if xs else 'b' }}{{ 'x' in 'xyz' }}{{ 4 not in xs }}{{ 1 < 2 < 3 }}", ctx),
      "aTrueTrueTrue");
}

TEST(ChatTemplate, MethodsAndFilters) {
  EXPECT_EQ(Render("{{ ' a '.strip() }}|{{ 'a b'.split() }}|{{ 'ab'.startswith('a') }}|{{ "
                   "'{}-{}'.format(1, 2) }}"),
            "a|['a', 'b']|True|1-2");
  EXPECT_EQ(Render("{{ {'a': 'é', 'b': [1, 2.5]}|tojson }}"), "{\"a\": \"é\", \"b\": [1, 2.5]}");
  EXPECT_EQ(Render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Render("{{ '<b>'|tojson }}"), "\"<b>\"");
  EXPECT_EQ(
      Render(
          "{{ [1, 2]|join('-') }} {{ x|default('d') }} {{ 'hi'|length }} {{ [3, 1]|sort|first }}"),
      "1-2 d 2 1");
  EXPECT_EQ(
      Render(
          "{{ [{'r': 'u'}, {'r': 'a'}]|selectattr('r', 'equalto', 'u')|map(attribute='r')|list }}"),
      "['u']");
  EXPECT_EQ(
      Render("{{ 'hello world'|title }} {{ 2.5|round }} {{ '3'|int + 1 }} {{ 'a\nb'|indent(2) }}"),
      "Hello World 2.0 4 a\n  b");
  EXPECT_EQ(Render("{{ strftime_now('%Y-%m-%d') }}"), "2024-07-26");
}

TEST(ChatTemplate, ParseErrorsNameTheConstructAndLine) {
  EXPECT_EQ(Render("line1\n{{ x | frobnicate }}"),
            "PARSE ERROR: line 2: unknown filter 'frobnicate'");
  EXPECT_EQ(Render("\n\n{% if x %}open"),
            "PARSE ERROR: line 3: unclosed {% if %} (expected {% endif %})");
  EXPECT_EQ(Render("{% include 'x' %}"),
            "PARSE ERROR: line 1: unsupported statement {% include %}");
  EXPECT_EQ(Render("{{ x is frob }}"), "PARSE ERROR: line 1: unknown test 'frob'");
  EXPECT_EQ(Render("{{ x.pop() }}"), "PARSE ERROR: line 1: unsupported method 'pop'");
  EXPECT_EQ(Render("{{ cycler(1) }}"), "PARSE ERROR: line 1: unknown function 'cycler'");
  EXPECT_EQ(Render("{{ 'abc }}"), "PARSE ERROR: line 1: unterminated string literal");
  EXPECT_EQ(Render("{{ x "), "PARSE ERROR: line 1: unclosed expression {{ ... }}");
}

TEST(ChatTemplate, RuntimeErrors) {
  EXPECT_EQ(Render("{{ raise_exception('no system role') }}"), "RENDER ERROR: no system role");
  EXPECT_EQ(Render("\n{{ 'a' + 1 }}"),
            "RENDER ERROR: line 2: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(Render("{{ x.y }}"), "RENDER ERROR: line 1: 'x' is undefined");
}

TEST(ChatTemplate, Builtins) {
  Json ctx = Json::parse(R"({"messages": [{"role": "user", "content": "Hi"}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  EXPECT_EQ(Render(*ChatTemplate::BuiltinSource("chatml"), ctx),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Render(*ChatTemplate::BuiltinSource("llama3"), ctx),
            "<s><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(Render(*ChatTemplate::BuiltinSource("mistral"), ctx), "<s>[INST]Hi[/INST]");
  EXPECT_EQ(Render(*ChatTemplate::BuiltinSource("gemma"), ctx),
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(Render(*ChatTemplate::BuiltinSource("phi3"), ctx),
            "<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(ChatTemplate::BuiltinNames().size(), 5u);
  EXPECT_FALSE(ChatTemplate::BuiltinSource("nope").ok());
}

}  // namespace
}  // namespace tg::chat_template
