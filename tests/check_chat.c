/*
 * check_chat.c - chat template detection and the one-turn chat_format()
 * (engine/chat.c); check_chat_render.c tests whole conversations.
 *
 * GOLDEN VALUES.  Every expected prompt below was produced by llama.cpp's
 * own implementation, not by chat.c: a throw-away program linked against
 * the libllama.so of the llama.cpp build in /work/peer/llama.cpp (source
 * src/llama-chat.cpp, commit c392e509) called
 *
 *	llama_chat_apply_template(tmpl, msgs, n, true, buf, size)
 *
 * with tmpl = the format's name and msgs = the optional system message
 * and the user message of each entry of msg_cases[], and printed the
 * result as a C literal.  The phi3 and phi4 goldens came the same way from
 * llm_chat_apply_template() of src/llama-chat.cpp at the same commit
 * (c392e5094deaf2d1a7c18683214f007fad3fe42b), compiled on its own with a
 * throw-away main().  The same program also ran llama.cpp on the full
 * text of each real template in real_templates[]: on every template that
 * chat_detect() gives a format, llama.cpp's output equals its output for
 * that format's name, with one exception, by design (chat.c's opening
 * comment): llama.cpp takes the HuggingFaceH4 Zephyr template for
 * "glmedge" ("<|system|>\nS<|user|>\nU<|assistant|>", no turn ends), while
 * chat.c gives it zephyr.
 *
 * The template texts are public model metadata (tokenizer.chat_template
 * of the named models, as their tokenizer_config.json has it; the four
 * Mistral ones, Phi-3-small and a few others as llama.cpp's
 * tests/test-chat-template.cpp carries them, and those marked "llama.cpp
 * models/templates" as that folder holds them at c392e509).  One is
 * written here, marked "written".  The GGUF fixtures' own templates are
 * read from the files.
 */
#include "chat.h"
#include "gguf.h"
#include "lib/fixtures.h"
#include "lib/suite.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- real templates ---------------------------------------------------- */

struct real_template {
	const char *model;
	enum chat_kind kind;	/* what chat_detect() must say */
	const char *text;
};

static const struct real_template real_templates[] = {
	{ "teknium/OpenHermes-2.5-Mistral-7B",
	    CHAT_CHATML,
	    "{% for message in messages %}{{'<|im_start|>' + message["
	    "'role'] + '\\n' + message['content'] + '<|im_end|>' + '\\"
	    "n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_s"
	    "tart|>assistant\\n' }}{% endif %}" },
	{ "Qwen/Qwen2-7B-Instruct",
	    CHAT_CHATML,
	    "{% for message in messages %}{% if loop.first and messag"
	    "es[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou "
	    "are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|"
	    "im_start|>' + message['role'] + '\n' + message['content'"
	    "] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generatio"
	    "n_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}" },
	{ "written: <<SYS>> without strip() or bos_token",
	    CHAT_LLAMA2_SYS,
	    "{% for m in messages %}{% if m['role'] == 'system' %}{{ "
	    "'[INST] <<SYS>>\\n' + m['content'] + '\\n<</SYS>>\\n\\n'"
	    " }}{% elif m['role'] == 'user' %}{{ m['content'] + ' [/I"
	    "NST]' }}{% endif %}{% endfor %}" },
	{ "TheBloke/FusionNet_34Bx2_MoE-AWQ",
	    CHAT_LLAMA2_SYS_BOS,
	    "{%- for idx in range(0, messages|length) -%}\n{%- if mes"
	    "sages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{"
	    "- bos_token + '[INST] ' + messages[idx]['content'] + ' ["
	    "/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] "
	    "+ ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['"
	    "role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + message"
	    "s[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif me"
	    "ssages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messa"
	    "ges[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n"
	    "{% endfor %}" },
	{ "bofenghuang/vigogne-2-70b-chat",
	    CHAT_LLAMA2_SYS_STRIP,
	    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{"
	    "% set loop_messages = messages[1:] %}{% set system_messa"
	    "ge = messages[0]['content'] %}{% elif true == true and n"
	    "ot '<<SYS>>' in messages[0]['content'] %}{% set loop_mes"
	    "sages = messages %}{% set system_message = 'Vous êtes Vi"
	    "gogne, un assistant IA créé par Zaion Lab. Vous suivez e"
	    "xtrêmement bien les instructions. Aidez autant que vous "
	    "le pouvez.' %}{% else %}{% set loop_messages = messages "
	    "%}{% set system_message = false %}{% endif %}{% for mess"
	    "age in loop_messages %}{% if (message['role'] == 'user')"
	    " != (loop.index0 % 2 == 0) %}{{ raise_exception('Convers"
	    "ation roles must alternate user/assistant/user/assistant"
	    "/...') }}{% endif %}{% if loop.index0 == 0 and system_me"
	    "ssage != false %}{% set content = '<<SYS>>\\n' + system_"
	    "message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% "
	    "else %}{% set content = message['content'] %}{% endif %}"
	    "{% if message['role'] == 'user' %}{{ '[INST] ' + content"
	    ".strip() + ' [/INST]' }}{% elif message['role'] == 'syst"
	    "em' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\"
	    "n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' ' "
	    " + content.strip() + ' ' + eos_token }}{% endif %}{% end"
	    "for %}" },
	{ "meta-llama/Llama-2-7b-chat-hf",
	    CHAT_LLAMA2_SYS_STRIP,
	    "{% if messages[0]['role'] == 'system' %}{% set loop_mess"
	    "ages = messages[1:] %}{% set system_message = messages[0"
	    "]['content'] %}{% else %}{% set loop_messages = messages"
	    " %}{% set system_message = false %}{% endif %}{% for mes"
	    "sage in loop_messages %}{% if (message['role'] == 'user'"
	    ") != (loop.index0 % 2 == 0) %}{{ raise_exception('Conver"
	    "sation roles must alternate user/assistant/user/assistan"
	    "t/...') }}{% endif %}{% if loop.index0 == 0 and system_m"
	    "essage != false %}{% set content = '<<SYS>>\\n' + system"
	    "_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{%"
	    " else %}{% set content = message['content'] %}{% endif %"
	    "}{% if message['role'] == 'user' %}{{ bos_token + '[INST"
	    "] ' + content.strip() + ' [/INST]' }}{% elif message['ro"
	    "le'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
	    "eos_token }}{% endif %}{% endfor %}" },
	{ "mistralai/Mistral-7B-Instruct-v0.2 (before v1)",
	    CHAT_MISTRAL,
	    "{{ bos_token }}{% for message in messages %}{% if (messa"
	    "ge['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ rai"
	    "se_exception('Conversation roles must alternate user/ass"
	    "istant/user/assistant/...') }}{% endif %}{% if message['"
	    "role'] == 'user' %}{{ '[INST] ' + message['content'] + '"
	    " [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
	    "message['content'] + eos_token}}{% else %}{{ raise_excep"
	    "tion('Only user and assistant roles are supported!') }}{"
	    "% endif %}{% endfor %}" },
	{ "mistralai/Mistral-7B-Instruct-v0.1",
	    CHAT_MISTRAL,
	    "{{ bos_token }}{% for message in messages %}{% if (messa"
	    "ge['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ rai"
	    "se_exception('Conversation roles must alternate user/ass"
	    "istant/user/assistant/...') }}{% endif %}{% if message['"
	    "role'] == 'user' %}{{ '[INST] ' + message['content'] + '"
	    " [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
	    "message['content'] + eos_token + ' ' }}{% else %}{{ rais"
	    "e_exception('Only user and assistant roles are supported"
	    "!') }}{% endif %}{% endfor %}" },
	{ "mistralai/Mistral-7B-Instruct-v0.2 (v1, system message)",
	    CHAT_MISTRAL_V1,
	    "{%- if messages[0]['role'] == 'system' %}\n    {%- set s"
	    "ystem_message = messages[0]['content'] %}\n    {%- set l"
	    "oop_messages = messages[1:] %}\n{%- else %}\n    {%- set"
	    " loop_messages = messages %}\n{%- endif %}\n\n{{- bos_to"
	    "ken }}\n{%- for message in loop_messages %}\n    {%- if "
	    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
	    "\n        {{- raise_exception('After the optional system"
	    " message, conversation roles must alternate user/assista"
	    "nt/user/assistant/...') }}\n    {%- endif %}\n    {%- if"
	    " message['role'] == 'user' %}\n        {%- if loop.first"
	    " and system_message is defined %}\n            {{- ' [IN"
	    "ST] ' + system_message + '\\n\\n' + message['content'] +"
	    " ' [/INST]' }}\n        {%- else %}\n            {{- ' ["
	    "INST] ' + message['content'] + ' [/INST]' }}\n        {%"
	    "- endif %}\n    {%- elif message['role'] == 'assistant' "
	    "%}\n        {{- ' ' + message['content'] + eos_token}}\n"
	    "    {%- else %}\n        {{- raise_exception('Only user "
	    "and assistant roles are supported, with the exception of"
	    " an initial optional system message!') }}\n    {%- endif"
	    " %}\n{%- endfor %}\n" },
	{ "mistralai/Mistral-Large-Instruct-2407 (v3)",
	    CHAT_MISTRAL_V3,
	    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- s"
	    "et system_message = messages[0][\"content\"] %}\n    {%-"
	    " set loop_messages = messages[1:] %}\n{%- else %}\n    {"
	    "%- set loop_messages = messages %}\n{%- endif %}\n{%- if"
	    " not tools is defined %}\n    {%- set tools = none %}\n{"
	    "%- endif %}\n{%- set user_messages = loop_messages | sel"
	    "ectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#"
	    "- This block checks for alternating user/assistant messa"
	    "ges, skipping tool calling messages #}\n{%- set ns = nam"
	    "espace() %}\n{%- set ns.index = 0 %}\n{%- for message in"
	    " loop_messages %}\n    {%- if not (message.role == \"too"
	    "l\" or message.role == \"tool_results\" or (message.tool"
	    "_calls is defined and message.tool_calls is not none)) %"
	    "}\n        {%- if (message[\"role\"] == \"user\") != (ns"
	    ".index % 2 == 0) %}\n            {{- raise_exception(\"A"
	    "fter the optional system message, conversation roles mus"
	    "t alternate user/assistant/user/assistant/...\") }}\n   "
	    "     {%- endif %}\n        {%- set ns.index = ns.index +"
	    " 1 %}\n    {%- endif %}\n{%- endfor %}\n\n{{- bos_token "
	    "}}\n{%- for message in loop_messages %}\n    {%- if mess"
	    "age[\"role\"] == \"user\" %}\n        {%- if tools is no"
	    "t none and (message == user_messages[-1]) %}\n          "
	    "  {{- \"[AVAILABLE_TOOLS] [\" }}\n            {%- for to"
	    "ol in tools %}\n                {%- set tool = tool.func"
	    "tion %}\n                {{- '{\"type\": \"function\", \""
	    "function\": {' }}\n                {%- for key, val in t"
	    "ool.items() if key != \"return\" %}\n                   "
	    " {%- if val is string %}\n                        {{- '\""
	    "' + key + '\": \"' + val + '\"' }}\n                    "
	    "{%- else %}\n                        {{- '\"' + key + '\""
	    ": ' + val|tojson }}\n                    {%- endif %}\n "
	    "                   {%- if not loop.last %}\n            "
	    "            {{- \", \" }}\n                    {%- endif"
	    " %}\n                {%- endfor %}\n                {{- "
	    "\"}}\" }}\n                {%- if not loop.last %}\n    "
	    "                {{- \", \" }}\n                {%- else "
	    "%}\n                    {{- \"]\" }}\n                {%"
	    "- endif %}\n            {%- endfor %}\n            {{- \""
	    "[/AVAILABLE_TOOLS]\" }}\n            {%- endif %}\n     "
	    "   {%- if loop.last and system_message is defined %}\n  "
	    "          {{- \"[INST] \" + system_message + \"\\n\\n\" "
	    "+ message[\"content\"] + \"[/INST]\" }}\n        {%- els"
	    "e %}\n            {{- \"[INST] \" + message[\"content\"]"
	    " + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif me"
	    "ssage.tool_calls is defined and message.tool_calls is no"
	    "t none %}\n        {{- \"[TOOL_CALLS] [\" }}\n        {%"
	    "- for tool_call in message.tool_calls %}\n            {%"
	    "- set out = tool_call.function|tojson %}\n            {{"
	    "- out[:-1] }}\n            {%- if not tool_call.id is de"
	    "fined or tool_call.id|length != 9 %}\n                {{"
	    "- raise_exception(\"Tool call IDs should be alphanumeric"
	    " strings with length 9!\") }}\n            {%- endif %}\n"
	    "            {{- ', \"id\": \"' + tool_call.id + '\"}' }}"
	    "\n            {%- if not loop.last %}\n                {"
	    "{- \", \" }}\n            {%- else %}\n                {"
	    "{- \"]\" + eos_token }}\n            {%- endif %}\n     "
	    "   {%- endfor %}\n    {%- elif message[\"role\"] == \"as"
	    "sistant\" %}\n        {{- \" \" + message[\"content\"]|t"
	    "rim + eos_token}}\n    {%- elif message[\"role\"] == \"t"
	    "ool_results\" or message[\"role\"] == \"tool\" %}\n     "
	    "   {%- if message.content is defined and message.content"
	    ".content is defined %}\n            {%- set content = me"
	    "ssage.content.content %}\n        {%- else %}\n         "
	    "   {%- set content = message.content %}\n        {%- end"
	    "if %}\n        {{- '[TOOL_RESULTS] {\"content\": ' + con"
	    "tent|string + \", \" }}\n        {%- if not message.tool"
	    "_call_id is defined or message.tool_call_id|length != 9 "
	    "%}\n            {{- raise_exception(\"Tool call IDs shou"
	    "ld be alphanumeric strings with length 9!\") }}\n       "
	    " {%- endif %}\n        {{- '\"call_id\": \"' + message.t"
	    "ool_call_id + '\"}[/TOOL_RESULTS]' }}\n    {%- else %}\n"
	    "        {{- raise_exception(\"Only user and assistant ro"
	    "les are supported, with the exception of an initial opti"
	    "onal system message!\") }}\n    {%- endif %}\n{%- endfor"
	    " %}\n" },
	{ "mistralai/Mistral-Nemo-Instruct-2407 (v3-tekken)",
	    CHAT_MISTRAL_V3_TEKKEN,
	    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- s"
	    "et system_message = messages[0][\"content\"] %}\n    {%-"
	    " set loop_messages = messages[1:] %}\n{%- else %}\n    {"
	    "%- set loop_messages = messages %}\n{%- endif %}\n{%- if"
	    " not tools is defined %}\n    {%- set tools = none %}\n{"
	    "%- endif %}\n{%- set user_messages = loop_messages | sel"
	    "ectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#"
	    "- This block checks for alternating user/assistant messa"
	    "ges, skipping tool calling messages #}\n{%- set ns = nam"
	    "espace() %}\n{%- set ns.index = 0 %}\n{%- for message in"
	    " loop_messages %}\n    {%- if not (message.role == \"too"
	    "l\" or message.role == \"tool_results\" or (message.tool"
	    "_calls is defined and message.tool_calls is not none)) %"
	    "}\n        {%- if (message[\"role\"] == \"user\") != (ns"
	    ".index % 2 == 0) %}\n            {{- raise_exception(\"A"
	    "fter the optional system message, conversation roles mus"
	    "t alternate user/assistant/user/assistant/...\") }}\n   "
	    "     {%- endif %}\n        {%- set ns.index = ns.index +"
	    " 1 %}\n    {%- endif %}\n{%- endfor %}\n\n{{- bos_token "
	    "}}\n{%- for message in loop_messages %}\n    {%- if mess"
	    "age[\"role\"] == \"user\" %}\n        {%- if tools is no"
	    "t none and (message == user_messages[-1]) %}\n          "
	    "  {{- \"[AVAILABLE_TOOLS][\" }}\n            {%- for too"
	    "l in tools %}\n                {%- set tool = tool.funct"
	    "ion %}\n                {{- '{\"type\": \"function\", \""
	    "function\": {' }}\n                {%- for key, val in t"
	    "ool.items() if key != \"return\" %}\n                   "
	    " {%- if val is string %}\n                        {{- '\""
	    "' + key + '\": \"' + val + '\"' }}\n                    "
	    "{%- else %}\n                        {{- '\"' + key + '\""
	    ": ' + val|tojson }}\n                    {%- endif %}\n "
	    "                   {%- if not loop.last %}\n            "
	    "            {{- \", \" }}\n                    {%- endif"
	    " %}\n                {%- endfor %}\n                {{- "
	    "\"}}\" }}\n                {%- if not loop.last %}\n    "
	    "                {{- \", \" }}\n                {%- else "
	    "%}\n                    {{- \"]\" }}\n                {%"
	    "- endif %}\n            {%- endfor %}\n            {{- \""
	    "[/AVAILABLE_TOOLS]\" }}\n            {%- endif %}\n     "
	    "   {%- if loop.last and system_message is defined %}\n  "
	    "          {{- \"[INST]\" + system_message + \"\\n\\n\" +"
	    " message[\"content\"] + \"[/INST]\" }}\n        {%- else"
	    " %}\n            {{- \"[INST]\" + message[\"content\"] +"
	    " \"[/INST]\" }}\n        {%- endif %}\n    {%- elif (mes"
	    "sage.tool_calls is defined and message.tool_calls is not"
	    " none) %}\n        {{- \"[TOOL_CALLS][\" }}\n        {%-"
	    " for tool_call in message.tool_calls %}\n            {%-"
	    " set out = tool_call.function|tojson %}\n            {{-"
	    " out[:-1] }}\n            {%- if not tool_call.id is def"
	    "ined or tool_call.id|length != 9 %}\n                {{-"
	    " raise_exception(\"Tool call IDs should be alphanumeric "
	    "strings with length 9!\") }}\n            {%- endif %}\n"
	    "            {{- ', \"id\": \"' + tool_call.id + '\"}' }}"
	    "\n            {%- if not loop.last %}\n                {"
	    "{- \", \" }}\n            {%- else %}\n                {"
	    "{- \"]\" + eos_token }}\n            {%- endif %}\n     "
	    "   {%- endfor %}\n    {%- elif message[\"role\"] == \"as"
	    "sistant\" %}\n        {{- message[\"content\"] + eos_tok"
	    "en}}\n    {%- elif message[\"role\"] == \"tool_results\""
	    " or message[\"role\"] == \"tool\" %}\n        {%- if mes"
	    "sage.content is defined and message.content.content is d"
	    "efined %}\n            {%- set content = message.content"
	    ".content %}\n        {%- else %}\n            {%- set co"
	    "ntent = message.content %}\n        {%- endif %}\n      "
	    "  {{- '[TOOL_RESULTS]{\"content\": ' + content|string + "
	    "\", \" }}\n        {%- if not message.tool_call_id is de"
	    "fined or message.tool_call_id|length != 9 %}\n          "
	    "  {{- raise_exception(\"Tool call IDs should be alphanum"
	    "eric strings with length 9!\") }}\n        {%- endif %}\n"
	    "        {{- '\"call_id\": \"' + message.tool_call_id + '"
	    "\"}[/TOOL_RESULTS]' }}\n    {%- else %}\n        {{- rai"
	    "se_exception(\"Only user and assistant roles are support"
	    "ed, with the exception of an initial optional system mes"
	    "sage!\") }}\n    {%- endif %}\n{%- endfor %}\n" },
	{ "mistralai/Mistral-Large-Instruct-2411 (v7)",
	    CHAT_MISTRAL_V7,
	    "{{ bos_token }}{% for message in messages %}{% if messag"
	    "e['role'] == 'user' %}{{ '[INST] ' + message['content'] "
	    "+ '[/INST]' }}{% elif message['role'] == 'system' %}{{ '"
	    "[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMP"
	    "T]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
	    "message['content'] + eos_token }}{% else %}{{ raise_exce"
	    "ption('Only user, system and assistant roles are support"
	    "ed!') }}{% endif %}{% endfor %}" },
	{ "HuggingFaceH4/zephyr-7b-beta, TinyLlama/TinyLlama-1.1B-Chat-v1.0",
	    CHAT_ZEPHYR,
	    "{% for message in messages %}\n{% if message['role'] == "
	    "'user' %}\n{{ '<|user|>\n' + message['content'] + eos_to"
	    "ken }}\n{% elif message['role'] == 'system' %}\n{{ '<|sy"
	    "stem|>\n' + message['content'] + eos_token }}\n{% elif m"
	    "essage['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  "
	    "+ message['content'] + eos_token }}\n{% endif %}\n{% if "
	    "loop.last and add_generation_prompt %}\n{{ '<|assistant|"
	    ">' }}\n{% endif %}\n{% endfor %}" },
	{ "google/gemma-7b-it",
	    CHAT_GEMMA,
	    "{% if messages[0]['role'] == 'system' %}{{ raise_excepti"
	    "on('System role not supported') }}{% endif %}{% for mess"
	    "age in messages %}{% if (message['role'] == 'user') != ("
	    "loop.index0 % 2 == 0) %}{{ raise_exception('Conversation"
	    " roles must alternate user/assistant/user/assistant/...'"
	    ") }}{% endif %}{% if (message['role'] == 'assistant') %}"
	    "{% set role = 'model' %}{% else %}{% set role = message["
	    "'role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n'"
	    " + message['content'] | trim + '<end_of_turn>\\n' }}{% e"
	    "ndfor %}{% if add_generation_prompt %}{{'<start_of_turn>"
	    "model\\n'}}{% endif %}" },
	{ "google/gemma-2-9b-it",
	    CHAT_GEMMA,
	    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{"
	    "{ raise_exception('System role not supported') }}{% endi"
	    "f %}{% for message in messages %}{% if (message['role'] "
	    "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exceptio"
	    "n('Conversation roles must alternate user/assistant/user"
	    "/assistant/...') }}{% endif %}{% if (message['role'] == "
	    "'assistant') %}{% set role = 'model' %}{% else %}{% set "
	    "role = message['role'] %}{% endif %}{{ '<start_of_turn>'"
	    " + role + '\n' + message['content'] | trim + '<end_of_tu"
	    "rn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<s"
	    "tart_of_turn>model\n'}}{% endif %}" },
	{ "meta-llama/Meta-Llama-3-8B-Instruct",
	    CHAT_LLAMA3,
	    "{% set loop_messages = messages %}{% for message in loop"
	    "_messages %}{% set content = '<|start_header_id|>' + mes"
	    "sage['role'] + '<|end_header_id|>\n\n'+ message['content"
	    "'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% s"
	    "et content = bos_token + content %}{% endif %}{{ content"
	    " }}{% endfor %}{% if add_generation_prompt %}{{ '<|start"
	    "_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %"
	    "}" },
	{ "mlabonne/AlphaMonarch-7B",
	    CHAT_UNKNOWN,
	    "{% for message in messages %}{{bos_token + message['role"
	    "'] + '\\n' + message['content'] + eos_token + '\\n'}}{% "
	    "endfor %}{% if add_generation_prompt %}{{ bos_token + 'a"
	    "ssistant\\n' }}{% endif %}" },
	{ "OrionStarAI/Orion-14B-Chat",
	    CHAT_UNKNOWN,
	    "{% for message in messages %}{% if loop.first %}{{ bos_t"
	    "oken }}{% endif %}{% if message['role'] == 'user' %}{{ '"
	    "Human: ' + message['content'] + '\\n\\nAssistant: ' + eo"
	    "s_token }}{% elif message['role'] == 'assistant' %}{{ me"
	    "ssage['content'] + eos_token }}{% endif %}{% endfor %}" },
	{ "deepseek-ai/deepseek-coder-33b-instruct",
	    CHAT_UNKNOWN,
	    "{% if not add_generation_prompt is defined %}\n{% set ad"
	    "d_generation_prompt = false %}\n{% endif %}\n{%- set ns "
	    "= namespace(found=false) -%}\n{%- for message in message"
	    "s -%}\n    {%- if message['role'] == 'system' -%}\n     "
	    "   {%- set ns.found = true -%}\n    {%- endif -%}\n{%- e"
	    "ndfor -%}\n{{bos_token}}{%- if not ns.found -%}\n{{'You "
	    "are an AI programming assistant, utilizing the Deepseek "
	    "Coder model, developed by Deepseek Company, and you only"
	    " answer questions related to computer science. For polit"
	    "ically sensitive questions, security and privacy issues,"
	    " and other non-computer science questions, you will refu"
	    "se to answer\\n'}}\n{%- endif %}\n{%- for message in mes"
	    "sages %}\n    {%- if message['role'] == 'system' %}\n{{ "
	    "message['content'] }}\n    {%- else %}\n        {%- if m"
	    "essage['role'] == 'user' %}\n{{'### Instruction:\\n' + m"
	    "essage['content'] + '\\n'}}\n        {%- else %}\n{{'###"
	    " Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n"
	    "        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{"
	    "% if add_generation_prompt %}\n{{'### Response:'}}\n{% e"
	    "ndif %}" },
	{ "CohereForAI/c4ai-command-r-plus",
	    CHAT_UNKNOWN,
	    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{"
	    "% set loop_messages = messages[1:] %}{% set system_messa"
	    "ge = messages[0]['content'] %}{% elif false == true %}{%"
	    " set loop_messages = messages %}{% set system_message = "
	    "'You are Command-R, a brilliant, sophisticated, AI-assis"
	    "tant trained to assist human users by providing thorough"
	    " responses. You are trained by Cohere.' %}{% else %}{% s"
	    "et loop_messages = messages %}{% set system_message = fa"
	    "lse %}{% endif %}{% if system_message != false %}{{ '<|S"
	    "TART_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message +"
	    " '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in "
	    "loop_messages %}{% if (message['role'] == 'user') != (lo"
	    "op.index0 % 2 == 0) %}{{ raise_exception('Conversation r"
	    "oles must alternate user/assistant/user/assistant/...') "
	    "}}{% endif %}{% set content = message['content'] %}{% if"
	    " message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|>"
	    "<|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN"
	    "|>' }}{% elif message['role'] == 'assistant' %}{{ '<|STA"
	    "RT_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() "
	    "+ '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}{% if"
	    " add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CH"
	    "ATBOT_TOKEN|>' }}{% endif %}" },
	{ "microsoft/Phi-3-mini-4k-instruct",
	    CHAT_PHI3,
	    "{{ bos_token }}{% for message in messages %}{% if (messa"
	    "ge['role'] == 'user') %}{{'<|user|>' + '\n' + message['c"
	    "ontent'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{%"
	    " elif (message['role'] == 'assistant') %}{{message['cont"
	    "ent'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}" },
	{ "THUDM/glm-edge",
	    CHAT_UNKNOWN,
	    "{% for item in messages %}{% if item['role'] == 'system'"
	    " %}<|system|>\n{{ item['content'] }}{% elif item['role']"
	    " == 'user' %}<|user|>\n{{ item['content'] }}{% elif item"
	    "['role'] == 'assistant' %}<|assistant|>\n{{ item['conten"
	    "t'] }}{% endif %}{% endfor %}<|assistant|>" },
	{ "microsoft/phi-4",
	    CHAT_PHI4,
	    "{% for message in messages %}{% if (message['role'] == '"
	    "system') %}{{'<|im_start|>system<|im_sep|>' + message['c"
	    "ontent'] + '<|im_end|>'}}{% elif (message['role'] == 'us"
	    "er') %}{{'<|im_start|>user<|im_sep|>' + message['content"
	    "'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% eli"
	    "f (message['role'] == 'assistant') %}{{message['content'"
	    "] + '<|im_end|>'}}{% endif %}{% endfor %}" },
	{ "microsoft/Phi-3-small-8k-instruct",
	    CHAT_PHI3,
	    "{{ bos_token }}{% for message in messages %}{{'<|' + mess"
	    "age['role'] + '|>' + '\n' + message['content'] + '<|end|>"
	    "\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|ass"
	    "istant|>\n' }}{% else %}{{ eos_token }}{% endif %}" },
	{ "microsoft/Phi-3.5-mini-instruct (llama.cpp models/templates)",
	    CHAT_PHI3,
	    "{% for message in messages %}{% if message['role'] == 'sy"
	    "stem' and message['content'] %}{{'<|system|>\n' + message"
	    "['content'] + '<|end|>\n'}}{% elif message['role'] == 'us"
	    "er' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
	    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>"
	    "\n' + message['content'] + '<|end|>\n'}}{% endif %}{% end"
	    "for %}{% if add_generation_prompt %}{{ '<|assistant|>\n' "
	    "}}{% else %}{{ eos_token }}{% endif %}" },
	{ "google/gemma-2-2b-it (llama.cpp models/templates)",
	    CHAT_GEMMA,
	    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{"
	    " raise_exception('System role not supported') }}{% endif "
	    "%}{% for message in messages %}{% if (message['role'] == "
	    "'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('C"
	    "onversation roles must alternate user/assistant/user/assi"
	    "stant/...') }}{% endif %}{% if (message['role'] == 'assis"
	    "tant') %}{% set role = 'model' %}{% else %}{% set role = "
	    "message['role'] %}{% endif %}{{ '<start_of_turn>' + role "
	    "+ '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
	    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_tu"
	    "rn>model\n'}}{% endif %}" },
	{ "Qwen/Qwen2.5-7B-Instruct (llama.cpp models/templates)",
	    CHAT_CHATML,
	    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    "
	    "{%- if messages[0]['role'] == 'system' %}\n        {{- me"
	    "ssages[0]['content'] }}\n    {%- else %}\n        {{- 'Yo"
	    "u are Qwen, created by Alibaba Cloud. You are a helpful a"
	    "ssistant.' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools"
	    "\\n\\nYou may call one or more functions to assist with t"
	    "he user query.\\n\\nYou are provided with function signat"
	    "ures within <tools></tools> XML tags:\\n<tools>\" }}\n   "
	    " {%- for tool in tools %}\n        {{- \"\\n\" }}\n      "
	    "  {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n<"
	    "/tools>\\n\\nFor each function call, return a json object"
	    " with function name and arguments within <tool_call></too"
	    "l_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <functio"
	    "n-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_"
	    "call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages"
	    "[0]['role'] == 'system' %}\n        {{- '<|im_start|>syst"
	    "em\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n   "
	    " {%- else %}\n        {{- '<|im_start|>system\\nYou are Q"
	    "wen, created by Alibaba Cloud. You are a helpful assistan"
	    "t.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- "
	    "for message in messages %}\n    {%- if (message.role == "
	    "\"user\") or (message.role == \"system\" and not loop.fir"
	    "st) or (message.role == \"assistant\" and not message.too"
	    "l_calls) %}\n        {{- '<|im_start|>' + message.role + "
	    "'\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%"
	    "- elif message.role == \"assistant\" %}\n        {{- '<|i"
	    "m_start|>' + message.role }}\n        {%- if message.cont"
	    "ent %}\n            {{- '\\n' + message.content }}\n     "
	    "   {%- endif %}\n        {%- for tool_call in message.too"
	    "l_calls %}\n            {%- if tool_call.function is defi"
	    "ned %}\n                {%- set tool_call = tool_call.fun"
	    "ction %}\n            {%- endif %}\n            {{- '\\n<"
	    "tool_call>\\n{\"name\": \"' }}\n            {{- tool_call"
	    ".name }}\n            {{- '\", \"arguments\": ' }}\n     "
	    "       {{- tool_call.arguments | tojson }}\n            {"
	    "{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        "
	    "{{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"to"
	    "ol\" %}\n        {%- if (loop.index0 == 0) or (messages[l"
	    "oop.index0 - 1].role != \"tool\") %}\n            {{- '<|"
	    "im_start|>user' }}\n        {%- endif %}\n        {{- '\\"
	    "n<tool_response>\\n' }}\n        {{- message.content }}\n"
	    "        {{- '\\n</tool_response>' }}\n        {%- if loop"
	    ".last or (messages[loop.index0 + 1].role != \"tool\") %}"
	    "\n            {{- '<|im_end|>\\n' }}\n        {%- endif %"
	    "}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation"
	    "_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- en"
	    "dif %}\n" },
	{ "meta-llama/Llama-3.1-8B-Instruct (llama.cpp models/templates)",
	    CHAT_LLAMA3,
	    "{{- bos_token }}\n{%- if custom_tools is defined %}\n    "
	    "{%- set tools = custom_tools %}\n{%- endif %}\n{%- if not"
	    " tools_in_user_message is defined %}\n    {%- set tools_i"
	    "n_user_message = true %}\n{%- endif %}\n{%- if not date_s"
	    "tring is defined %}\n    {%- set date_string = \"26 Jul 2"
	    "024\" %}\n{%- endif %}\n{%- if not tools is defined %}\n "
	    "   {%- set tools = none %}\n{%- endif %}\n\n{#- This bloc"
	    "k extracts the system message, so we can slot it into the"
	    " right place. #}\n{%- if messages[0]['role'] == 'system' "
	    "%}\n    {%- set system_message = messages[0]['content']|t"
	    "rim %}\n    {%- set messages = messages[1:] %}\n{%- else "
	    "%}\n    {%- set system_message = \"\" %}\n{%- endif %}\n"
	    "\n{#- System message + builtin tools #}\n{{- \"<|start_he"
	    "ader_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if built"
	    "in_tools is defined or tools is not none %}\n    {{- \"En"
	    "vironment: ipython\\n\" }}\n{%- endif %}\n{%- if builtin_"
	    "tools is defined %}\n    {{- \"Tools: \" + builtin_tools "
	    "| reject('equalto', 'code_interpreter') | join(\", \") + "
	    "\"\\n\\n\"}}\n{%- endif %}\n{{- \"Cutting Knowledge Date:"
	    " December 2023\\n\" }}\n{{- \"Today Date: \" + date_strin"
	    "g + \"\\n\\n\" }}\n{%- if tools is not none and not tools"
	    "_in_user_message %}\n    {{- \"You have access to the fol"
	    "lowing functions. To call a function, please respond with"
	    " JSON for a function call.\" }}\n    {{- 'Respond in the "
	    "format {\"name\": function name, \"parameters\": dictiona"
	    "ry of argument name and its value}.' }}\n    {{- \"Do not"
	    " use variables.\\n\\n\" }}\n    {%- for t in tools %}\n  "
	    "      {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\""
	    " }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message "
	    "}}\n{{- \"<|eot_id|>\" }}\n\n{#- Custom tools are passed "
	    "in a user message with some extra guidance #}\n{%- if too"
	    "ls_in_user_message and not tools is none %}\n    {#- Extr"
	    "act the first user message so we can plug it in here #}\n"
	    "    {%- if messages | length != 0 %}\n        {%- set fir"
	    "st_user_message = messages[0]['content']|trim %}\n       "
	    " {%- set messages = messages[1:] %}\n    {%- else %}\n   "
	    "     {{- raise_exception(\"Cannot put tools in the first "
	    "user message when there's no first user message!\") }}\n{"
	    "%- endif %}\n    {{- '<|start_header_id|>user<|end_header"
	    "_id|>\\n\\n' -}}\n    {{- \"Given the following functions"
	    ", please respond with a JSON for a function call \" }}\n "
	    "   {{- \"with its proper arguments that best answers the "
	    "given prompt.\\n\\n\" }}\n    {{- 'Respond in the format "
	    "{\"name\": function name, \"parameters\": dictionary of a"
	    "rgument name and its value}.' }}\n    {{- \"Do not use va"
	    "riables.\\n\\n\" }}\n    {%- for t in tools %}\n        {"
	    "{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n  "
	    "  {%- endfor %}\n    {{- first_user_message + \"<|eot_id|"
	    ">\"}}\n{%- endif %}\n\n{%- for message in messages %}\n  "
	    "  {%- if not (message.role == 'ipython' or message.role ="
	    "= 'tool' or 'tool_calls' in message) %}\n        {{- '<|s"
	    "tart_header_id|>' + message['role'] + '<|end_header_id|>"
	    "\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n   "
	    " {%- elif 'tool_calls' in message %}\n        {%- if not "
	    "message.tool_calls|length == 1 %}\n            {{- raise_"
	    "exception(\"This model only supports single tool-calls at"
	    " once!\") }}\n        {%- endif %}\n        {%- set tool_"
	    "call = message.tool_calls[0].function %}\n        {%- if "
	    "builtin_tools is defined and tool_call.name in builtin_to"
	    "ols %}\n            {{- '<|start_header_id|>assistant<|en"
	    "d_header_id|>\\n\\n' -}}\n            {{- \"<|python_tag|"
	    ">\" + tool_call.name + \".call(\" }}\n            {%- for"
	    " arg_name, arg_val in tool_call.arguments | items %}\n   "
	    "             {{- arg_name + '=\"' + arg_val + '\"' }}\n  "
	    "              {%- if not loop.last %}\n                  "
	    "  {{- \", \" }}\n                {%- endif %}\n          "
	    "      {%- endfor %}\n            {{- \")\" }}\n        {%"
	    "- else  %}\n            {{- '<|start_header_id|>assistant"
	    "<|end_header_id|>\\n\\n' -}}\n            {{- '{\"name\":"
	    " \"' + tool_call.name + '\", ' }}\n            {{- '\"par"
	    "ameters\": ' }}\n            {{- tool_call.arguments | to"
	    "json }}\n            {{- \"}\" }}\n        {%- endif %}\n"
	    "        {%- if builtin_tools is defined %}\n            {"
	    "#- This means we're in ipython mode #}\n            {{- "
	    "\"<|eom_id|>\" }}\n        {%- else %}\n            {{- "
	    "\"<|eot_id|>\" }}\n        {%- endif %}\n    {%- elif mes"
	    "sage.role == \"tool\" or message.role == \"ipython\" %}\n"
	    "        {{- \"<|start_header_id|>ipython<|end_header_id|>"
	    "\\n\\n\" }}\n        {%- if message.content is mapping or"
	    " message.content is iterable %}\n            {{- message."
	    "content | tojson }}\n        {%- else %}\n            {{-"
	    " message.content }}\n        {%- endif %}\n        {{- \""
	    "<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n{%- if "
	    "add_generation_prompt %}\n    {{- '<|start_header_id|>ass"
	    "istant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n" },
};

#define N_REAL	(sizeof(real_templates) / sizeof(real_templates[0]))

START_TEST(test_detect_real)
{
	const struct real_template *t = &real_templates[_i];
	enum chat_kind k = chat_detect(t->text, strlen(t->text));

	ck_assert_msg(k == t->kind, "%s: detected \"%s\", expected \"%s\"",
	    t->model, chat_name(k), chat_name(t->kind));
}
END_TEST
SUITE_LOOP("detect", test_detect_real, 0, (int)N_REAL);

/* Each family's template is found in the text whatever surrounds it. */
START_TEST(test_detect_embedded)
{
	const struct real_template *t = &real_templates[_i];
	size_t n = strlen(t->text), pad = 100;
	char *buf = malloc(n + 2 * pad);

	ck_assert_ptr_nonnull(buf);
	memset(buf, 'x', pad);
	memcpy(buf + pad, t->text, n);
	memset(buf + pad + n, 'y', pad);
	/* A NUL byte inside the text ends nothing: lengths rule. */
	buf[pad / 2] = '\0';
	ck_assert_int_eq(chat_detect(buf, n + 2 * pad), t->kind);
	free(buf);
}
END_TEST
SUITE_LOOP("detect", test_detect_embedded, 0, (int)N_REAL);

/*
 * The fixture models' own tokenizer.chat_template (CHAT_UNKNOWN: the file
 * has none).  Their texts are Phi-3-mini's and a Qwen ChatML template, on
 * which llama.cpp's llm_chat_detect_template() says phi3 and chatml.
 */
static const struct {
	const char *file;
	enum chat_kind kind;
} fixture_templates[] = {
	{ "arch/arch-phi3-F16.gguf", CHAT_PHI3 },
	{ "vocab/ggml-vocab-phi-3.gguf", CHAT_PHI3 },
	{ "arch/arch-qwen3-F16.gguf", CHAT_CHATML },
	{ "vocab/ggml-vocab-qwen2.gguf", CHAT_CHATML },
	{ "arch/arch-qwen2-F16.gguf", CHAT_UNKNOWN },
	{ "arch/arch-llama31-F16.gguf", CHAT_UNKNOWN },
	{ "arch/arch-gemma-F16.gguf", CHAT_UNKNOWN },
	{ "arch/arch-gemma2-F16.gguf", CHAT_UNKNOWN },
	{ "arch/arch-gemma3-F16.gguf", CHAT_UNKNOWN },
	{ "vocab/ggml-vocab-llama-bpe.gguf", CHAT_UNKNOWN },
};

#define N_FIXTURE_TMPL \
	(sizeof(fixture_templates) / sizeof(fixture_templates[0]))

START_TEST(test_detect_fixtures)
{
	const char *rel = fixture_templates[_i].file;
	char *path = fx_path(rel);
	struct gguf_file *f = NULL;
	struct gguf_str tmpl = { 0, NULL };
	struct cp_err e = { 0 };
	int rc;

	ck_assert_msg(path != NULL, "fixture %s missing", rel);
	ck_assert_msg(gguf_open(path, &f, &e) == 0, "%s", e.msg);
	rc = gguf_get_str(f, "tokenizer.chat_template", &tmpl, &e);
	if (fixture_templates[_i].kind == CHAT_UNKNOWN) {
		ck_assert_int_eq(rc, -ENOENT);
	} else {
		ck_assert_msg(rc == 0, "%s: %s", rel, e.msg);
		ck_assert_msg(chat_detect(tmpl.ptr, (size_t)tmpl.len) ==
		    fixture_templates[_i].kind, "%s: detected \"%s\"", rel,
		    chat_name(chat_detect(tmpl.ptr, (size_t)tmpl.len)));
	}
	gguf_close(f);
	free(path);
}
END_TEST
SUITE_LOOP("fixtures", test_detect_fixtures, 0, (int)N_FIXTURE_TMPL);

static bool
fixtures_present(void)
{
	char *p = fx_path(fixture_templates[0].file);
	bool ok = p != NULL;

	free(p);
	return ok;
}

/* ---- formats ----------------------------------------------------------- */

struct msg_case {
	const char *system;	/* NULL: no system message */
	const char *user;
};

static const struct msg_case msg_cases[] = {
	{ "You are a helpful assistant", "Hello" },
	{ NULL, "  Who are you?\n" },
	{ " \tBe brief.\n", "Hi\n" },
	{ "", "x" },
	{ "\n\n", " a b " },
};

struct golden {
	enum chat_kind kind;
	int msgs;		/* index in msg_cases[] */
	const char *prompt;	/* llama_chat_apply_template()'s output */
};

static const struct golden goldens[] = {
	{ CHAT_CHATML, 0,
	    "<|im_start|>system\nYou are a helpful assistant<|im_"
	    "end|>\n<|im_start|>user\n"
	    "Hello<|im_end|>\n<|im_start|>assistant\n" },
	{ CHAT_CHATML, 1,
	    "<|im_start|>user\n  Who are you?\n"
	    "<|im_end|>\n<|im_start|>assistant\n" },
	{ CHAT_CHATML, 2,
	    "<|im_start|>system\n \tBe brief.\n"
	    "<|im_end|>\n<|im_start|>user\n"
	    "Hi\n<|im_end|>\n<|im_start|>assistant\n" },
	{ CHAT_CHATML, 3,
	    "<|im_start|>system\n<|im_end|>\n"
	    "<|im_start|>user\nx<|im_end|>\n"
	    "<|im_start|>assistant\n" },
	{ CHAT_CHATML, 4,
	    "<|im_start|>system\n\n\n"
	    "<|im_end|>\n<|im_start|>user\n"
	    " a b <|im_end|>\n<|im_start|>assistant\n" },
	{ CHAT_LLAMA2, 0,
	    "[INST] You are a helpful assistant\n"
	    "Hello [/INST]" },
	{ CHAT_LLAMA2, 1,
	    "[INST]   Who are you?\n [/INST]" },
	{ CHAT_LLAMA2, 2,
	    "[INST]  \tBe brief.\n\nHi\n"
	    " [/INST]" },
	{ CHAT_LLAMA2, 3,
	    "[INST] \nx [/INST]" },
	{ CHAT_LLAMA2, 4,
	    "[INST] \n\n\n a b  [/INST]" },
	{ CHAT_LLAMA2_SYS, 0,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n"
	    "<</SYS>>\n\nHello [/INST]" },
	{ CHAT_LLAMA2_SYS, 1,
	    "[INST]   Who are you?\n [/INST]" },
	{ CHAT_LLAMA2_SYS, 2,
	    "[INST] <<SYS>>\n \tBe brief.\n"
	    "\n<</SYS>>\n\nHi\n [/INST]" },
	{ CHAT_LLAMA2_SYS, 3,
	    "[INST] <<SYS>>\n\n<</SYS>>\n"
	    "\nx [/INST]" },
	{ CHAT_LLAMA2_SYS, 4,
	    "[INST] <<SYS>>\n\n\n\n<</SYS>>\n"
	    "\n a b  [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 0,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n"
	    "<</SYS>>\n\nHello [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 1,
	    "[INST]   Who are you?\n [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 2,
	    "[INST] <<SYS>>\n \tBe brief.\n"
	    "\n<</SYS>>\n\nHi\n [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 3,
	    "[INST] <<SYS>>\n\n<</SYS>>\n"
	    "\nx [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 4,
	    "[INST] <<SYS>>\n\n\n\n<</SYS>>\n"
	    "\n a b  [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 0,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n"
	    "<</SYS>>\n\nHello [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 1,
	    "[INST] Who are you? [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 2,
	    "[INST] <<SYS>>\nBe brief.\n"
	    "<</SYS>>\n\nHi [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 3,
	    "[INST] <<SYS>>\n\n<</SYS>>\n"
	    "\nx [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 4,
	    "[INST] <<SYS>>\n\n<</SYS>>\n"
	    "\na b [/INST]" },
	{ CHAT_MISTRAL, 0,
	    "[INST] You are a helpful assistant\n"
	    "Hello [/INST]" },
	{ CHAT_MISTRAL, 1,
	    "[INST]   Who are you?\n [/INST]" },
	{ CHAT_MISTRAL, 2,
	    "[INST]  \tBe brief.\n\nHi\n"
	    " [/INST]" },
	{ CHAT_MISTRAL, 3,
	    "[INST] \nx [/INST]" },
	{ CHAT_MISTRAL, 4,
	    "[INST] \n\n\n a b  [/INST]" },
	{ CHAT_MISTRAL_V1, 0,
	    " [INST] You are a helpful assistant\n"
	    "\nHello [/INST]" },
	{ CHAT_MISTRAL_V1, 1,
	    " [INST]   Who are you?\n"
	    " [/INST]" },
	{ CHAT_MISTRAL_V1, 2,
	    " [INST]  \tBe brief.\n\n"
	    "\nHi\n [/INST]" },
	{ CHAT_MISTRAL_V1, 3,
	    " [INST] \n\nx [/INST]" },
	{ CHAT_MISTRAL_V1, 4,
	    " [INST] \n\n\n\n a b  [/INST]" },
	{ CHAT_MISTRAL_V3, 0,
	    "[INST] You are a helpful assistant\n"
	    "\nHello[/INST]" },
	{ CHAT_MISTRAL_V3, 1,
	    "[INST]   Who are you?\n[/INST]" },
	{ CHAT_MISTRAL_V3, 2,
	    "[INST]  \tBe brief.\n\n\n"
	    "Hi\n[/INST]" },
	{ CHAT_MISTRAL_V3, 3,
	    "[INST] \n\nx[/INST]" },
	{ CHAT_MISTRAL_V3, 4,
	    "[INST] \n\n\n\n a b [/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 0,
	    "[INST]You are a helpful assistant\n"
	    "\nHello[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 1,
	    "[INST]  Who are you?\n[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 2,
	    "[INST] \tBe brief.\n\n\n"
	    "Hi\n[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 3,
	    "[INST]\n\nx[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 4,
	    "[INST]\n\n\n\n a b [/INST]" },
	{ CHAT_MISTRAL_V7, 0,
	    "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_"
	    "PROMPT][INST] Hello[/INST]" },
	{ CHAT_MISTRAL_V7, 1,
	    "[INST]   Who are you?\n[/INST]" },
	{ CHAT_MISTRAL_V7, 2,
	    "[SYSTEM_PROMPT]  \tBe brief.\n"
	    "[/SYSTEM_PROMPT][INST] Hi\n"
	    "[/INST]" },
	{ CHAT_MISTRAL_V7, 3,
	    "[SYSTEM_PROMPT] [/SYSTEM_PROMPT][INST] x[/INST]" },
	{ CHAT_MISTRAL_V7, 4,
	    "[SYSTEM_PROMPT] \n\n[/SYSTEM_PROMPT][INST]  a b [/IN"
	    "ST]" },
	{ CHAT_ZEPHYR, 0,
	    "<|system|>\nYou are a helpful assistant<|endoftext|>"
	    "\n<|user|>\nHello<|endoftext|>\n"
	    "<|assistant|>\n" },
	{ CHAT_ZEPHYR, 1,
	    "<|user|>\n  Who are you?\n"
	    "<|endoftext|>\n<|assistant|>\n" },
	{ CHAT_ZEPHYR, 2,
	    "<|system|>\n \tBe brief.\n"
	    "<|endoftext|>\n<|user|>\n"
	    "Hi\n<|endoftext|>\n<|assistant|>\n" },
	{ CHAT_ZEPHYR, 3,
	    "<|system|>\n<|endoftext|>\n"
	    "<|user|>\nx<|endoftext|>\n"
	    "<|assistant|>\n" },
	{ CHAT_ZEPHYR, 4,
	    "<|system|>\n\n\n<|endoftext|>\n"
	    "<|user|>\n a b <|endoftext|>\n"
	    "<|assistant|>\n" },
	{ CHAT_GEMMA, 0,
	    "<start_of_turn>user\nYou are a helpful assistant\n"
	    "\nHello<end_of_turn>\n<start_of_turn>model\n" },
	{ CHAT_GEMMA, 1,
	    "<start_of_turn>user\nWho are you?<end_of_turn>\n"
	    "<start_of_turn>model\n" },
	{ CHAT_GEMMA, 2,
	    "<start_of_turn>user\nBe brief.\n"
	    "\nHi<end_of_turn>\n<start_of_turn>model\n" },
	{ CHAT_GEMMA, 3,
	    "<start_of_turn>user\nx<end_of_turn>\n"
	    "<start_of_turn>model\n" },
	{ CHAT_GEMMA, 4,
	    "<start_of_turn>user\na b<end_of_turn>\n"
	    "<start_of_turn>model\n" },
	{ CHAT_LLAMA3, 0,
	    "<|start_header_id|>system<|end_header_id|>\n"
	    "\nYou are a helpful assistant<|eot_id|><|start_heade"
	    "r_id|>user<|end_header_id|>\n"
	    "\nHello<|eot_id|><|start_header_id|>assistant<|end_h"
	    "eader_id|>\n\n" },
	{ CHAT_LLAMA3, 1,
	    "<|start_header_id|>user<|end_header_id|>\n"
	    "\nWho are you?<|eot_id|><|start_header_id|>assistant"
	    "<|end_header_id|>\n\n" },
	{ CHAT_LLAMA3, 2,
	    "<|start_header_id|>system<|end_header_id|>\n"
	    "\nBe brief.<|eot_id|><|start_header_id|>user<|end_he"
	    "ader_id|>\n\nHi<|eot_id|><|start_header_id|>assistan"
	    "t<|end_header_id|>\n\n" },
	{ CHAT_LLAMA3, 3,
	    "<|start_header_id|>system<|end_header_id|>\n"
	    "\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
	    "\n\nx<|eot_id|><|start_header_id|>assistant<|end_hea"
	    "der_id|>\n\n" },
	{ CHAT_LLAMA3, 4,
	    "<|start_header_id|>system<|end_header_id|>\n"
	    "\n<|eot_id|><|start_header_id|>user<|end_header_id|>"
	    "\n\na b<|eot_id|><|start_header_id|>assistant<|end_h"
	    "eader_id|>\n\n" },
	{ CHAT_PHI3, 0,
	    "<|system|>\nYou are a helpful assistant<|end|>\n"
	    "<|user|>\nHello<|end|>\n<|assistant|>\n" },
	{ CHAT_PHI3, 1,
	    "<|user|>\n  Who are you?\n<|end|>\n<|assistant|>\n" },
	{ CHAT_PHI3, 2,
	    "<|system|>\n \tBe brief.\n<|end|>\n<|user|>\n"
	    "Hi\n<|end|>\n<|assistant|>\n" },
	{ CHAT_PHI3, 3,
	    "<|system|>\n<|end|>\n<|user|>\nx<|end|>\n"
	    "<|assistant|>\n" },
	{ CHAT_PHI3, 4,
	    "<|system|>\n\n\n<|end|>\n<|user|>\n a b <|end|>\n"
	    "<|assistant|>\n" },
	{ CHAT_PHI4, 0,
	    "<|im_start|>system<|im_sep|>You are a helpful assistan"
	    "t<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|"
	    "im_start|>assistant<|im_sep|>" },
	{ CHAT_PHI4, 1,
	    "<|im_start|>user<|im_sep|>  Who are you?\n"
	    "<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ CHAT_PHI4, 2,
	    "<|im_start|>system<|im_sep|> \tBe brief.\n"
	    "<|im_end|><|im_start|>user<|im_sep|>Hi\n"
	    "<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ CHAT_PHI4, 3,
	    "<|im_start|>system<|im_sep|><|im_end|><|im_start|>user"
	    "<|im_sep|>x<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ CHAT_PHI4, 4,
	    "<|im_start|>system<|im_sep|>\n\n<|im_end|><|im_start|>"
	    "user<|im_sep|> a b <|im_end|><|im_start|>assistant<|im"
	    "_sep|>" },
};

#define N_GOLDEN	(sizeof(goldens) / sizeof(goldens[0]))

static int64_t
format_case(enum chat_kind k, const struct msg_case *m, char *buf,
    size_t size)
{
	return chat_format(k, m->system, m->system ? strlen(m->system) : 0,
	    m->user, strlen(m->user), buf, size);
}

START_TEST(test_format_golden)
{
	const struct golden *g = &goldens[_i];
	const struct msg_case *m = &msg_cases[g->msgs];
	char buf[1024];
	int64_t n;

	memset(buf, '#', sizeof(buf));
	n = format_case(g->kind, m, buf, sizeof(buf));
	ck_assert_int_eq(n, (int64_t)strlen(g->prompt));
	ck_assert_str_eq(buf, g->prompt);
}
END_TEST
SUITE_LOOP("format", test_format_golden, 0, (int)N_GOLDEN);

/* Every kind has goldens for every message case. */
START_TEST(test_format_golden_complete)
{
	int seen[CHAT_KIND_COUNT][5];
	size_t i;
	int k, c;

	ck_assert_uint_eq(sizeof(msg_cases) / sizeof(msg_cases[0]), 5);
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < N_GOLDEN; i++)
		seen[goldens[i].kind][goldens[i].msgs]++;
	for (k = CHAT_UNKNOWN + 1; k < CHAT_KIND_COUNT; k++)
		for (c = 0; c < 5; c++)
			ck_assert_msg(seen[k][c] == 1, "%s case %d: %d goldens",
			    chat_name((enum chat_kind)k), c, seen[k][c]);
}
END_TEST
SUITE_TEST("format", test_format_golden_complete);

/* Message bytes are copied as they are, NUL bytes included. */
START_TEST(test_format_bytes)
{
	static const char user[] = { 'a', '\0', 'b', '\xff' };
	static const char want[] = "<|im_start|>user\na\0b\xff<|im_end|>\n"
	    "<|im_start|>assistant\n";
	char buf[128];
	int64_t n;

	n = chat_format(CHAT_CHATML, NULL, 0, user, sizeof(user), buf,
	    sizeof(buf));
	ck_assert_int_eq(n, (int64_t)sizeof(want) - 1);
	ck_assert_int_eq(memcmp(buf, want, sizeof(want)), 0);

	/* A NULL user message is an empty one. */
	n = chat_format(CHAT_LLAMA3, NULL, 0, NULL, 0, buf, sizeof(buf));
	ck_assert_str_eq(buf, "<|start_header_id|>user<|end_header_id|>\n\n"
	    "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
	ck_assert_int_eq(n, (int64_t)strlen(buf));
	/* Only length counts: the text after system_len is not read. */
	n = chat_format(CHAT_CHATML, "sys!!!", 3, "u", 1, buf, sizeof(buf));
	ck_assert_str_eq(buf, "<|im_start|>system\nsys<|im_end|>\n"
	    "<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST
SUITE_TEST("format", test_format_bytes);

START_TEST(test_format_errors)
{
	char buf[16] = "untouched";

	ck_assert_int_eq(chat_format(CHAT_UNKNOWN, NULL, 0, "u", 1, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_int_eq(chat_format(CHAT_KIND_COUNT, NULL, 0, "u", 1, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_int_eq(chat_format((enum chat_kind)-1, NULL, 0, "u", 1, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_str_eq(buf, "untouched");
	/* Lengths whose sum cannot be returned: refused before any read. */
	ck_assert_int_eq(chat_format(CHAT_CHATML, "s", SIZE_MAX, "u", 1, NULL,
	    0), -EOVERFLOW);
	ck_assert_int_eq(chat_format(CHAT_GEMMA, NULL, 0, "u",
	    (size_t)INT64_MAX, NULL, 0), -EOVERFLOW);
}
END_TEST
SUITE_TEST("format", test_format_errors);

/* ---- names and detection edges ------------------------------------------ */

START_TEST(test_names)
{
	static const char *const want[CHAT_KIND_COUNT] = {
		"", "chatml", "llama2", "llama2-sys", "llama2-sys-bos",
		"llama2-sys-strip", "mistral", "mistral-v1", "mistral-v3",
		"mistral-v3-tekken", "mistral-v7", "zephyr", "gemma", "llama3",
		"phi3", "phi4",
	};
	int k;

	for (k = 0; k < CHAT_KIND_COUNT; k++) {
		const char *n = chat_name((enum chat_kind)k);

		ck_assert_str_eq(n, want[k]);
		ck_assert_uint_le(strlen(n), CHAT_NAME_MAX);
		ck_assert_int_eq(chat_from_name(n), k);
		/* A name is also a template text that names its format. */
		ck_assert_int_eq(chat_detect(n, strlen(n)), k);
	}
	ck_assert_str_eq(chat_name(CHAT_KIND_COUNT), "");
	ck_assert_str_eq(chat_name((enum chat_kind)-5), "");
	ck_assert_int_eq(chat_from_name(NULL), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_from_name("falcon3"), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_from_name("ChatML"), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_from_name("chatml "), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_from_name("llama"), CHAT_UNKNOWN);
}
END_TEST
SUITE_TEST("detect", test_names);

START_TEST(test_detect_edges)
{
	static const char chatml_nul[] = "\0{{'<|im_start|>' }}";

	ck_assert_int_eq(chat_detect(NULL, 0), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect(NULL, 10), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("<|im_start|>", 0), CHAT_UNKNOWN);
	/* Only len bytes are looked at. */
	ck_assert_int_eq(chat_detect("<|im_start|>", 11), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("<|im_start|>", 12), CHAT_CHATML);
	ck_assert_int_eq(chat_detect("chatml", 5), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect(chatml_nul, sizeof(chatml_nul) - 1),
	    CHAT_CHATML);
	/* Names are exact; names of formats missing here are unknown. */
	ck_assert_int_eq(chat_detect("phi3 ", 5), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("glmedge", 7), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("llama3 ", 7), CHAT_UNKNOWN);
	/* Text starting "mistral": Mistral's first format, as in llama.cpp. */
	ck_assert_int_eq(chat_detect("mistral-instruct", 16), CHAT_MISTRAL);
	/* ChatML is tested first: a ChatML text quoting [INST] stays ChatML. */
	ck_assert_int_eq(chat_detect("<|im_start|>[INST]<start_of_turn>", 33),
	    CHAT_CHATML);
	ck_assert_int_eq(chat_detect("<|im_start|><|im_sep|>", 22),
	    CHAT_PHI4);
	/* Llama 3 markers lose to earlier formats missing here (vicuna). */
	ck_assert_int_eq(chat_detect("<|start_header_id|><|end_header_id|>"
	    "USER: ASSISTANT: ", 53), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("<|start_header_id|>", 19), CHAT_UNKNOWN);
	/* Zephyr by its end-of-text marker, and by eos_token-closed turns. */
	ck_assert_int_eq(chat_detect("<|user|>\n<|endoftext|>", 22),
	    CHAT_ZEPHYR);
	ck_assert_int_eq(chat_detect("<|user|><|assistant|>eos_token", 30),
	    CHAT_ZEPHYR);
	ck_assert_int_eq(chat_detect("<|user|><|assistant|></s>eos_token", 34),
	    CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("<|user|><|assistant|>", 21),
	    CHAT_UNKNOWN);
	/* Phi-3's <|end|> is tested before Zephyr's markers. */
	ck_assert_int_eq(chat_detect("<|user|><|assistant|><|end|>"
	    "<|endoftext|>eos_token", 50), CHAT_PHI3);
	ck_assert_int_eq(chat_detect("<|end|><|assistant|>", 20), CHAT_PHI3);
	ck_assert_int_eq(chat_detect("<|end|><|user|>", 15), CHAT_UNKNOWN);
	ck_assert_int_eq(chat_detect("{{ random jinja }}", 18), CHAT_UNKNOWN);
}
END_TEST
SUITE_TEST("detect", test_detect_edges);

int
main(void)
{
	bool fixtures = fixtures_present();

	if (!fixtures)
		suite_case_skip("fixtures");
	return suite_main_some(suite_registered("chat"), fixtures,
	    "check_chat: no fixtures in %s (CP_FIXTURES): the models' own templates were not "
	    "checked\n", fx_dir());
}
