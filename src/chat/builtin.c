/* builtin.c: the chat templates of the families Specula names
 * (--chat-template chatml, llama3, llama2, mistral, phi3, gemma, code), written
 * in Jinja and rendered like any model's own template. Each writes tools, an
 * assistant's tool calls and tool results in its family's markup (chat.h);
 * BOS is not written (the tokenizer adds it). */
#include <string.h>

#include "chat/chat.h"

/* Pieces several templates share, as C strings joined into each. */
#define ARGS \
    "{%- macro args(a) -%}{%- if a is string -%}{{- a if a else '{}' -}}{%- else -%}{{- a | tojson -}}{%- endif -%}{%- endmacro -%}\n"
#define ROLE_CHECK \
    "{%- if m.role not in ['system', 'developer', 'user', 'assistant', 'tool'] -%}{{- raise_exception('unsupported role ' + m.role) -}}{%- endif -%}\n"
#define SYS0 \
    "{%- set sys0 = messages and messages[0].role in ['system', 'developer'] -%}\n"
#define CONTENT \
    "{%- set c = m.content if m.content is string else '' -%}\n"
#define CALLS \
    "{%- for tc in m.tool_calls or [] -%}{%- set f = tc.function if tc.function is defined else tc -%}\n"
#define FOLD \
    "{%- set sys = (messages[0].content if messages[0].content is string else '') if sys0 else '' -%}\n" \
    "{%- set first = 1 if sys0 else 0 -%}\n"
#define OTHER_TOOLS \
    "{%- macro tools_block() -%}\n" \
    "{{- '# Tools\\n\\nYou may call one of these functions. To call one, answer with only a JSON object {\"name\": <the function\\'s name>, \"arguments\": <its arguments>}.\\n' -}}\n" \
    "{%- for t in tools -%}{{- '\\n' -}}{{- t | tojson -}}{%- endfor -%}\n" \
    "{%- endmacro -%}\n"
#define JSON_CALL \
    "{{- '\\n' if not loop.first else '' -}}{{- '{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}{{- args(f.arguments) -}}{{- '}' -}}\n"

/* chatml closes an empty <think> block after the assistant's opening when
 * enable_thinking is false (chat_template_kwargs), as Qwen3's template
 * does. */
static const char chatml[] =
    "{#- ChatML (Qwen 2.5, Hermes): tools in the system turn, calls in <tool_call>, results in <tool_response> inside a user turn -#}\n"
    "{%- macro tools_block() -%}\n"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' -}}\n"
    "{%- for t in tools -%}{{- '\\n' -}}{{- t | tojson -}}{%- endfor -%}\n"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call>' -}}\n"
    "{%- endmacro -%}\n"
    ARGS
    SYS0
    "{%- if tools and not sys0 -%}{{- '<|im_start|>system\\n' -}}{{- tools_block() -}}{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    CONTENT
    ROLE_CHECK
    "{%- if m.role == 'tool' -%}\n"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}\n"
    "{{- '\\n<tool_response>\\n' -}}{{- c -}}{{- '\\n</tool_response>' -}}\n"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}\n"
    "{%- else -%}\n"
    "{{- '<|im_start|>' -}}{{- 'system' if m.role == 'developer' else m.role -}}\n"
    "{%- if not m.tool_calls or c -%}{{- '\\n' -}}{%- endif -%}\n"
    "{{- c -}}\n"
    "{%- if loop.first and m.role in ['system', 'developer'] and tools -%}{%- if c -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}\n"
    CALLS
    "{{- '\\n<tool_call>\\n{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}{{- args(f.arguments) -}}{{- '}\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}\n"
    "{%- endif -%}\n";

static const char llama3[] =
    "{#- Llama 3 (3.1 JSON tool calling): tools at the head of the first user message, a call as {\"name\", \"parameters\"}, a result in an ipython turn; content trimmed -#}\n"
    "{%- macro tools_block() -%}\n"
    "{{- 'Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\\n\\nRespond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\\n\\n' -}}\n"
    "{%- for t in tools -%}{{- t | tojson -}}{{- '\\n\\n' -}}{%- endfor -%}\n"
    "{%- endmacro -%}\n"
    ARGS
    "{%- set ns = namespace(first_user=-1) -%}\n"
    "{%- for m in messages -%}{%- if m.role == 'user' and ns.first_user < 0 -%}{%- set ns.first_user = loop.index0 -%}{%- endif -%}{%- endfor -%}\n"
    SYS0
    "{%- if tools and ns.first_user < 0 and not sys0 -%}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}{{- tools_block() -}}{{- '<|eot_id|>' -}}{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    ROLE_CHECK
    "{%- set c = (m.content if m.content is string else '') | trim -%}\n"
    "{%- set rn = 'ipython' if m.role == 'tool' else 'system' if m.role in ['system', 'developer'] else m.role -%}\n"
    "{{- '<|start_header_id|>' -}}{{- rn -}}{{- '<|end_header_id|>\\n\\n' -}}\n"
    "{%- if tools and loop.index0 == ns.first_user -%}{{- tools_block() -}}{%- endif -%}\n"
    "{%- if loop.first and m.role in ['system', 'developer'] -%}\n"
    "{{- c -}}{%- if tools and ns.first_user < 0 -%}{%- if c -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}\n"
    "{%- elif m.role == 'assistant' and m.tool_calls -%}\n"
    "{%- for tc in m.tool_calls -%}{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- '\\n' if not loop.first else '' -}}{{- '{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"parameters\": ' -}}{{- args(f.arguments) -}}{{- '}' -}}\n"
    "{%- endfor -%}\n"
    "{%- else -%}{{- c -}}\n"
    "{%- endif -%}\n"
    "{{- '<|eot_id|>' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}\n";

static const char llama2[] =
    "{#- Llama 2: [INST] turns, the system text (and the tools) in <<SYS>> inside the first -#}\n"
    OTHER_TOOLS
    ARGS
    "{%- macro sys_text(s) -%}{{- s -}}{%- if tools -%}{%- if s -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}{%- endmacro -%}\n"
    SYS0
    FOLD
    "{%- set fold = sys0 or tools -%}\n"
    "{%- for m in messages[first:] -%}\n"
    ROLE_CHECK
    CONTENT
    "{%- if m.role == 'assistant' -%}\n"
    "{{- ' ' -}}{{- c -}}{%- if m.tool_calls and c -%}{{- '\\n' -}}{%- endif -%}\n"
    CALLS
    JSON_CALL
    "{%- endfor -%}\n"
    "{{- ' </s>' -}}\n"
    "{%- else -%}\n"
    "{%- if not loop.first -%}{{- '<s>' -}}{%- endif -%}\n"
    "{{- '[INST] ' -}}\n"
    "{%- if fold and loop.first and m.role == 'user' -%}{{- '<<SYS>>\\n' -}}{{- sys_text(sys) -}}{{- '\\n<</SYS>>\\n\\n' -}}{%- endif -%}\n"
    "{%- if m.role == 'tool' -%}{{- '<tool_response>\\n' -}}{{- c -}}{{- '\\n</tool_response>' -}}{%- else -%}{{- c -}}{%- endif -%}\n"
    "{{- ' [/INST]' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if fold and messages | length == first -%}{{- '[INST] <<SYS>>\\n' -}}{{- sys_text(sys) -}}{{- '\\n<</SYS>>\\n\\n [/INST]' -}}{%- endif -%}\n";

static const char mistral[] =
    "{#- Mistral (v0.3 tool calling): [AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] and [TOOL_RESULTS]; the system text folded into the first user turn -#}\n"
    ARGS
    "{%- macro tools_block() -%}{{- '[AVAILABLE_TOOLS] [' -}}{%- for t in tools -%}{{- ', ' if not loop.first else '' -}}{{- t | tojson -}}{%- endfor -%}{{- '][/AVAILABLE_TOOLS]' -}}{%- endmacro -%}\n"
    "{%- set ns = namespace(last_user=-1) -%}\n"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}\n"
    "{%- macro sys_text(s) -%}{{- s -}}{%- if tools and ns.last_user < 0 -%}{%- if s -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}{%- endmacro -%}\n"
    SYS0
    FOLD
    "{%- set fold = sys0 or (tools and ns.last_user < 0) -%}\n"
    "{%- for m in messages[first:] -%}\n"
    ROLE_CHECK
    CONTENT
    "{%- if m.role == 'tool' -%}\n"
    "{{- '[TOOL_RESULTS] {\"content\": ' -}}{{- c -}}{%- if m.tool_call_id -%}{{- ', \"call_id\": ' -}}{{- m.tool_call_id | tojson -}}{%- endif -%}{{- '}[/TOOL_RESULTS]' -}}\n"
    "{%- elif m.role == 'assistant' -%}\n"
    "{{- c -}}{%- if m.tool_calls and c -%}{{- '\\n' -}}{%- endif -%}\n"
    CALLS
    "{{- ', {\"name\": ' if not loop.first else '[TOOL_CALLS] [{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}{{- args(f.arguments) -}}\n"
    "{%- if tc.id -%}{{- ', \"id\": ' -}}{{- tc.id | tojson -}}{%- endif -%}{{- '}' -}}\n"
    "{%- endfor -%}\n"
    "{%- if m.tool_calls -%}{{- ']' -}}{%- endif -%}\n"
    "{{- '</s>' -}}\n"
    "{%- else -%}\n"
    "{%- if tools and loop.index0 + first == ns.last_user -%}{{- tools_block() -}}{%- endif -%}\n"
    "{{- '[INST] ' -}}\n"
    "{%- if fold and loop.first and m.role == 'user' -%}{{- sys_text(sys) -}}{{- '\\n\\n' -}}{%- endif -%}\n"
    "{{- c -}}{{- ' [/INST]' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if fold and messages | length == first -%}{{- '[INST] ' -}}{{- sys_text(sys) -}}{{- ' [/INST]' -}}{%- endif -%}\n";

static const char phi3[] =
    "{#- Phi-3: <|role|> turns; tools (no markup of its own) in the system text, a call as {\"name\", \"arguments\"}, a result in <tool_response> in a user turn -#}\n"
    OTHER_TOOLS
    ARGS
    SYS0
    "{%- if tools and not sys0 -%}{{- '<|system|>\\n' -}}{{- tools_block() -}}{{- '<|end|>\\n' -}}{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    ROLE_CHECK
    CONTENT
    "{{- '<|' -}}{{- 'system' if m.role in ['system', 'developer'] else 'assistant' if m.role == 'assistant' else 'user' -}}{{- '|>\\n' -}}\n"
    "{%- if loop.first and m.role in ['system', 'developer'] -%}\n"
    "{{- c -}}{%- if tools -%}{%- if c -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}\n"
    "{%- elif m.role == 'tool' -%}{{- '<tool_response>\\n' -}}{{- c -}}{{- '\\n</tool_response>' -}}\n"
    "{%- else -%}\n"
    "{{- c -}}{%- if m.tool_calls and c -%}{{- '\\n' -}}{%- endif -%}\n"
    CALLS
    JSON_CALL
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}\n";

static const char gemma[] =
    "{#- Gemma: user and model turns; the system text (and the tools) folded into the first user turn -#}\n"
    OTHER_TOOLS
    ARGS
    "{%- macro sys_text(s) -%}{{- s -}}{%- if tools -%}{%- if s -%}{{- '\\n\\n' -}}{%- endif -%}{{- tools_block() -}}{%- endif -%}{%- endmacro -%}\n"
    SYS0
    FOLD
    "{%- set fold = sys0 or tools -%}\n"
    "{%- for m in messages[first:] -%}\n"
    ROLE_CHECK
    CONTENT
    "{{- '<start_of_turn>' -}}{{- 'model' if m.role == 'assistant' else 'user' -}}{{- '\\n' -}}\n"
    "{%- if fold and loop.first and m.role == 'user' -%}{{- sys_text(sys) -}}{{- '\\n\\n' -}}{%- endif -%}\n"
    "{%- if m.role == 'tool' -%}{{- '<tool_response>\\n' -}}{{- c -}}{{- '\\n</tool_response>' -}}\n"
    "{%- else -%}\n"
    "{{- c -}}{%- if m.tool_calls and c -%}{{- '\\n' -}}{%- endif -%}\n"
    CALLS
    JSON_CALL
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<end_of_turn>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if fold and messages | length == first -%}{{- '<start_of_turn>user\\n' -}}{{- sys_text(sys) -}}{{- '<end_of_turn>\\n' -}}{%- endif -%}\n"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}\n";

static const char code[] =
    "{#- The bundled code models' chat: the conversation as a Python file, as they were trained on files. The system text is the module's docstring, a user's turn a comment, the assistant's turn the code that follows; a turn ends where a file would (\"# ====\"). Tools are listed in the docstring, a call written as {\"name\", \"arguments\"}, a result as a comment. -#}\n"
    "{%- macro comment(s) -%}{{- '# ' -}}{{- s | replace('\\n', '\\n# ') -}}{{- '\\n' -}}{%- endmacro -%}\n"
    "{{- '# ==== file: chat.py ====\\n' -}}\n"
    SYS0
    "{%- if sys0 or tools -%}\n"
    "{{- '\"\"\"' -}}{%- if sys0 -%}{{- messages[0].content if messages[0].content is string else '' -}}{%- endif -%}\n"
    "{%- if tools -%}{{- '\\n\\nTools: to call one, answer with only a JSON object {\"name\": <the function\\'s name>, \"arguments\": <its arguments>}.\\n' -}}\n"
    "{%- for t in tools -%}{{- '\\n' -}}{{- t | tojson -}}{%- endfor -%}{%- endif -%}\n"
    "{{- '\\n\"\"\"\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- for m in messages[1 if sys0 else 0:] -%}\n"
    ROLE_CHECK
    CONTENT
    "{%- if m.role == 'assistant' -%}\n"
    "{{- c -}}{%- if m.tool_calls and c -%}{{- '\\n' -}}{%- endif -%}\n"
    CALLS
    "{{- '\\n' if not loop.first else '' -}}{{- '{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}{{- f.arguments if f.arguments is string else f.arguments | tojson -}}{{- '}' -}}\n"
    "{%- endfor -%}\n"
    "{{- '\\n# ====\\n' -}}\n"
    "{%- elif m.role == 'tool' -%}{{- '# result:\\n' -}}{{- comment(c) -}}\n"
    "{%- else -%}{{- comment(c) -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

const char *chat_builtin_source(chat_tmpl t) {
    static const char *const src[CHAT_N] = {[CHAT_CHATML] = chatml, [CHAT_LLAMA3] = llama3,
                                            [CHAT_LLAMA2] = llama2, [CHAT_MISTRAL] = mistral,
                                            [CHAT_PHI3] = phi3,     [CHAT_GEMMA] = gemma,
                                            [CHAT_CODE] = code};
    return t > CHAT_NONE && t < CHAT_N ? src[t] : NULL;
}
