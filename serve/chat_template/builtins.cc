#include "serve/chat_template/builtins.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tg::chat_template {
namespace {

// Qwen2.5 / Hermes style ChatML.
constexpr absl::string_view kChatml = R"JINJA({%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)JINJA";

// Llama 3.x without tools.
constexpr absl::string_view kLlama3 = R"JINJA({{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)JINJA";

// Mistral v7-tekken (Mistral-Small 3.x): [SYSTEM_PROMPT] and [INST] without spaces.
constexpr absl::string_view kMistral = R"JINJA({{- bos_token }}
{%- for message in messages %}
    {%- if message['role'] == 'system' %}
        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
    {%- elif message['role'] == 'user' %}
        {{- '[INST]' + message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only system, user and assistant roles are supported!') }}
    {%- endif %}
{%- endfor %}
)JINJA";

// Gemma 2/3: the system prompt goes in front of the first user turn; the assistant is "model".
constexpr absl::string_view kGemma = R"JINJA({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") + message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
)JINJA";

// Phi-3 / Phi-3.5.
constexpr absl::string_view kPhi3 = R"JINJA({% for message in messages %}
    {%- if message['role'] == 'system' and message['content'] %}
        {{- '<|system|>\n' + message['content'] + '<|end|>\n' }}
    {%- elif message['role'] == 'user' %}
        {{- '<|user|>\n' + message['content'] + '<|end|>\n' }}
    {%- elif message['role'] == 'assistant' %}
        {{- '<|assistant|>\n' + message['content'] + '<|end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>\n' }}
{%- else %}
    {{- eos_token }}
{%- endif %}
)JINJA";

constexpr std::pair<absl::string_view, absl::string_view> kBuiltins[] = {{"chatml", kChatml},
                                                                         {"llama3", kLlama3},
                                                                         {"mistral", kMistral},
                                                                         {"gemma", kGemma},
                                                                         {"phi3", kPhi3}};

}  // namespace

absl::StatusOr<std::string> BuiltinTemplateSource(absl::string_view name) {
  for (const auto& [n, source] : kBuiltins) {
    if (n == name) return std::string(source);
  }
  return absl::NotFoundError(absl::StrCat("no built-in chat template '", name, "' (known: ",
                                          absl::StrJoin(BuiltinTemplateNames(), ", "), ")"));
}

std::vector<std::string> BuiltinTemplateNames() {
  std::vector<std::string> names;
  for (const auto& [n, source] : kBuiltins) names.emplace_back(n);
  return names;
}

}  // namespace tg::chat_template
