/* test_jinja.c: the sandboxed Jinja interpreter (src/template/): a table of
 * templates with the output Python jinja2 3.1 renders for them in Hugging
 * Face's environment (trim_blocks, lstrip_blocks, loopcontrols, HF's
 * tojson, raise_exception, strftime_now at a fixed clock), byte for byte,
 * by group (expressions, statements, whitespace control, filters,
 * tests and methods, runtime errors, syntax errors); then the content mask,
 * the limits (steps, output, depth, parser nesting, memory) and the API's
 * edges. The expected outputs were produced by jinja2 itself; a row whose
 * jinja2 render fails expects an error (and, for raise_exception, its
 * message). */
#include <cjson/cJSON.h>

#include "template/jinja.h"
#include "test.h"

typedef struct {
    const char *group, *tmpl, *ctx, *want;
    const char *err_has; /* runtime error rows: a substring of the message ("" any) */
    int kind;            /* 0 renders want, 1 syntax error, 2 runtime error */
} jrow;

static const jrow rows[] = {
    {"expr", "{{ 1 + 2 * 3 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "7", NULL, 0},
    {"expr", "{{ (1 + 2) * 3 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "9", NULL, 0},
    {"expr", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "3 -4 2 -2 3.5 2.0", NULL, 0},
    {"expr", "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 3 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "1024 0.5 8.0", NULL, 0},
    {"expr", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789.125 }} {{ -0.0 }} {{ 1.5e300 * 10 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "1.0 0.30000000000000004 1e-05 1e+16 123456789.125 -0.0 1.5e+301", NULL, 0},
    {"expr", "{{ 'a' ~ 1 ~ none ~ true ~ 2.5 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "a1NoneTrue2.5", NULL, 0},
    {"expr", "{{ 'ab' * 3 }}{{ [1] * 2 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "ababab[1, 1]", NULL, 0},
    {"expr", "{{ 'x' + 'y' }}{{ [1] + [2] }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "xy[1, 2]", NULL, 0},
    {"expr", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "True False True True True", NULL, 0},
    {"expr", "{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1] }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "True True True True", NULL, 0},
    {"expr", "{{ none or 'x' }} {{ 0 and 1 }} {{ 1 and 'y' }} {{ not none }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "x 0 y True", NULL, 0},
    {"expr", "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 }}|", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "yes||", NULL, 0},
    {"expr", "{{ [1, 'a', none, true, 1.5] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "[1, 'a', None, True, 1.5] {'a': 1, 'b': [2]} (1,) (1, 2) ()", NULL, 0},
    {"expr", "{{ \"it's\" }} {{ ['it\\'s', \"q\\\"\", 'a\\nb', 'é'] }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "it's [\"it's\", 'q\"', 'a\\nb', 'é']", NULL, 0},
    {"expr", "{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4][::2] }} {{ 'héllo'[1] }} {{ 'héllo'[1:3] }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "bcd fedcba ef [1, 3] é él", NULL, 0},
    {"expr", "{{ x.a.b }} {{ x['a']['b'] }} {{ x.l[0] }} {{ x.l[-1] }} {{ x.l[5] }}|{{ x.missing }}|", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "B B 1 3 ||", NULL, 0},
    {"expr", "{{ 'a\\tb\\x41\\u00e9' }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "a\tbAé", NULL, 0},
    {"expr", "{{ 1_000 + 0x10 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "1016", NULL, 0},
    {"expr", "{{ -x.n }} {{ +3 }} {{ - 2 ** 2 }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "-5 3 4", NULL, 0},
    {"expr", "{{ 'abc' 'def' }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "abcdef", NULL, 0},
    {"expr", "{{ x.n|abs }} {{ -1.5|abs }}", "{\"x\":{\"a\":{\"b\":\"B\"},\"l\":[1,2,3],\"n\":5}}", "5 1.5", NULL, 0},
    {"stmt", "{% for i in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|", NULL, 0},
    {"stmt", "{% for i in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a','b') }};{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "-2-a;1-3-b;2--a;", NULL, 0},
    {"stmt", "{% for i in [1,2,3,4] if i is even %}{{ i }}{{ loop.length }}{% else %}none{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "2242", NULL, 0},
    {"stmt", "{% for i in [] %}x{% else %}empty{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "empty", NULL, 0},
    {"stmt", "{% for k, v in {'a':1,'b':2}.items() %}{{ k }}={{ v }};{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "a=1;b=2;", NULL, 0},
    {"stmt", "{% for k in {'a':1,'b':2} %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "ab[h][é]", NULL, 0},
    {"stmt", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "0134", NULL, 0},
    {"stmt", "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "12121", NULL, 0},
    {"stmt", "{% set ns = namespace(c=0, s='') %}{% for i in [1,2,3] %}{% set ns.c = ns.c + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.c }} {{ ns.s }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "6 123", NULL, 0},
    {"stmt", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{% set c, d = t %}{{ c }}{{ d }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "1234", NULL, 0},
    {"stmt", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "[inner 2]", NULL, 0},
    {"stmt", "{% set x | upper %}abc{% endset %}{{ x }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "ABC", NULL, 0},
    {"stmt", "{% macro m(a, b=2, c='c') %}{{ a }}{{ b }}{{ c }}{{ varargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c='z') }}|{{ m(1,2,3,4) }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "12c()|13c()|12z()|123(4,)", NULL, 0},
    {"stmt", "{% macro r(n) %}{% if n > 0 %}{{ n }}{{ r(n - 1) }}{% endif %}{% endmacro %}{{ r(5) }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "54321", NULL, 0},
    {"stmt", "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "<body>", NULL, 0},
    {"stmt", "{% macro w(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) w(4) %}got {{ v }}{% endcall %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "<got 8>", NULL, 0},
    {"stmt", "{% filter upper %}hello {{ 'x' }}{% endfilter %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "HELLO X", NULL, 0},
    {"stmt", "{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}{% if none %}x{% else %}y{% endif %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "by", NULL, 0},
    {"stmt", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "3", NULL, 0},
    {"stmt", "{% generation %}gen {{ 1 }}{% endgeneration %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "gen 1", NULL, 0},
    {"stmt", "{% raw %}{{ not rendered }}{% endraw %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "{{ not rendered }}", NULL, 0},
    {"stmt", "{% print 'p', 1 %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "p1", NULL, 0},
    {"stmt", "{% for a, b in [[1,2],[3,4]] %}{{ a * b }},{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "2,12,", NULL, 0},
    {"stmt", "{% for m in messages %}{% for n in messages %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "12341;12342;12343;12344;", NULL, 0},
    {"stmt", "{% set d = dict(a=1, b='x') %}{{ d.a }}{{ d['b'] }}{{ d|length }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "1x2", NULL, 0},
    {"stmt", "{% set c = cycler('a','b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "abab", NULL, 0},
    {"stmt", "{% set j = joiner('|') %}{% for i in [1,2,3] %}{{ j() }}{{ i }}{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "1|2|3", NULL, 0},
    {"stmt", "{% for i in [1,1,2] %}{% if loop.changed(i) %}{{ i }}{% endif %}{% endfor %}", "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U1\"},{\"role\":\"assistant\",\"content\":\"A1\"},{\"role\":\"user\",\"content\":\"U2\"}]}", "12", NULL, 0},
    {"ws", "a\n  {% if true %}\n  b\n  {% endif %}\nc\n", "{}", "a\n  b\nc", NULL, 0},
    {"ws", "a  {%- if true -%}  b  {%- endif -%}  c", "{}", "abc", NULL, 0},
    {"ws", "a\n  {%+ if true %}b{% endif +%}\nc", "{}", "a\n  b\nc", NULL, 0},
    {"ws", "{{- ' x ' -}}\n|\n  {{ 'y' }}  \n", "{}", " x |\n  y  ", NULL, 0},
    {"ws", "x {# comment #} y\n  {# line comment #}\nz", "{}", "x  y\nz", NULL, 0},
    {"ws", "x\n{#- trim -#}\ny", "{}", "xy", NULL, 0},
    {"ws", "  {% for i in [1,2] %}\n    {{ i }}\n  {% endfor %}\n", "{}", "    1\n    2\n", NULL, 0},
    {"ws", "line1\r\nline2\r\n{% if 1 %}\r\nx\r\n{% endif %}\r\n", "{}", "line1\nline2\nx\n", NULL, 0},
    {"ws", "{% raw -%}  a  {%- endraw %}", "{}", "a", NULL, 0},
    {"ws", "{%- raw %} {{ x }} {% endraw -%} z", "{}", " {{ x }} z", NULL, 0},
    {"ws", "trailing\n\n", "{}", "trailing\n", NULL, 0},
    {"ws", "a{% if 1 %}\n\nb{% endif %}", "{}", "a\nb", NULL, 0},
    {"ws", "\t{% set x = 1 %}\n{{ x }}", "{}", "1", NULL, 0},
    {"ws", "{{ 'a' }}\n{{ 'b' }}\n", "{}", "a\nb", NULL, 0},
    {"filter", "{{ '  hi  '|trim }}|{{ 'xxhixx'|trim('x') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "hi|hi", NULL, 0},
    {"filter", "{{ 'abc'|length }} {{ [1,2]|count }} {{ {'a':1}|length }} {{ 'héllo'|length }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "3 2 1 5", NULL, 0},
    {"filter", "{{ 3|string }}{{ [1]|string }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "3[1]", NULL, 0},
    {"filter", "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "43 4 0 7 3 26", NULL, 0},
    {"filter", "{{ '1.5'|float }} {{ 'x'|float }} {{ 2|float }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "1.5 0.0 2.0", NULL, 0},
    {"filter", "{{ 'Hello World'|lower }} {{ 'hi'|upper }} {{ \"hello they're-x (a\"|title }} {{ 'hELLO'|capitalize }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "hello world HI Hello They're-X (A Hello", NULL, 0},
    {"filter", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "bbb bba -a-b-c-", NULL, 0},
    {"filter", "{{ ['a','b']|join(', ') }} {{ [1,2]|join }} {{ users|join(',', attribute='name') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "a, b 12 Al,Bo,Cy", NULL, 0},
    {"filter", "{{ [1,2,3]|first }} {{ [1,2,3]|last }} {{ 'abc'|first }} {{ []|first }}|", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "1 3 a |", NULL, 0},
    {"filter", "{{ 'ab'|list }} {{ {'a':1}|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "['a', 'b'] ['a']", NULL, 0},
    {"filter", "{{ x|default('d') }} {{ none|default('d') }} {{ none|default('d', true) }} {{ ''|d('e', true) }} {{ 0|default(5) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "{'b': [1, 2.5, 'é\\n', None, True], 'a': {}, 'c': []} None d e 0", NULL, 0},
    {"filter", "{{ users|selectattr('age', 'gt', 20)|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|join }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "['Al', 'Cy'] BoCy", NULL, 0},
    {"filter", "{{ users|selectattr('role', 'equalto', 'x')|list|length }} {{ users|selectattr('nick', 'defined')|list|length }} {{ users|selectattr('nick', 'undefined')|list|length }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "0 1 2", NULL, 0},
    {"filter", "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ [0,1,'',none,'a']|select|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[1, 3] [1, 3] [1, 'a']", NULL, 0},
    {"filter", "{{ ['a','b']|map('upper')|list }} {{ users|map(attribute='nick', default='\?')|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "['A', 'B'] ['al', '\?', '\?']", NULL, 0},
    {"filter", "{{ {'b':1,'a':2}|items|list }} {{ {'b':1,'a':2}|dictsort }} {{ {'b':1,'a':2}|dictsort(by='value') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [('b', 1), ('a', 2)]", NULL, 0},
    {"filter", "{{ [3,1,2]|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ ['b','A','c']|sort }} {{ ['b','A','c']|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] ['A', 'b', 'c'] BoCyAl", NULL, 0},
    {"filter", "{{ [1,2,1,3]|unique|list }} {{ ['a','A']|unique|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[1, 2, 3] ['a']", NULL, 0},
    {"filter", "{{ [1,2,3]|reverse|list }} {{ 'abc'|reverse }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[3, 2, 1] cba", NULL, 0},
    {"filter", "{{ [1,2,3]|sum }} {{ users|sum(attribute='age') }} {{ [1.5,2]|sum }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "6 75 3.5", NULL, 0},
    {"filter", "{{ [3,1,2]|min }} {{ [3,1,2]|max }} {{ ['b','A']|min }} {{ users|max(attribute='age') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "1 3 A {'name': 'Al', 'age': 30, 'admin': True, 'nick': 'al'}", NULL, 0},
    {"filter", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 3|round }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "2.0 4.0 2.67 3.0 2.0 3", NULL, 0},
    {"filter", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n> y", NULL, 0},
    {"filter", "{{ 'one two  three'|wordcount }} {{ 'ab'|center(6) }}| {{ 'abc'|center(8) }}|", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "3   ab  |   abc   |", NULL, 0},
    {"filter", "{{ 'hello world foo bar'|truncate(12) }} {{ 'hello world foo bar'|truncate(12, true) }} {{ 'short'|truncate(3, leeway=0) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "hello... hello wor... ...", NULL, 0},
    {"filter", "{{ [1,2,3,4,5]|batch(2)|list }} {{ [1,2,3,4,5]|batch(2, 0)|list }} {{ [1,2,3,4,5]|slice(2)|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "[[1, 2], [3, 4], [5]] [[1, 2], [3, 4], [5, 0]] [[1, 2, 3], [4, 5]]", NULL, 0},
    {"filter", "{{ '<a href=\"x\">&</a>'|e }} {{ '<b>'|escape }} {{ '<i>x</i>  y'|striptags }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "&lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; &lt;b&gt; x y", NULL, 0},
    {"filter", "{{ '%s-%d-%05.2f-%x'|format('a', 3, 2.5, 255) }} {{ '%(a)s'|format(a=1) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "a-3-02.50-ff 1", NULL, 0},
    {"filter", "{{ x|tojson }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "{\"b\": [1, 2.5, \"é\\n\", null, true], \"a\": {}, \"c\": []}", NULL, 0},
    {"filter", "{{ x|tojson(indent=2) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\\n\",\n    null,\n    true\n  ],\n  \"a\": {},\n  \"c\": []\n}", NULL, 0},
    {"filter", "{{ x|tojson(separators=(',', ':'), sort_keys=true) }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "{\"a\":{},\"b\":[1,2.5,\"é\\n\",null,true],\"c\":[]}", NULL, 0},
    {"filter", "{{ 'é\"\\n\\u0001'|tojson }} {{ 'é'|tojson(ensure_ascii=true) }} {{ none|tojson }} {{ 1.0|tojson }} {{ [1e20, -0.5]|tojson }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "\"é\\\"\\n\\u0001\" \"\\u00e9\" null 1.0 [1e+20, -0.5]", NULL, 0},
    {"filter", "{{ {1: 'a', true: 'b', none: 'c'}|tojson }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "{\"1\": \"b\", \"null\": \"c\"}", NULL, 0},
    {"filter", "{{ users|map(attribute='name')|tojson }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", NULL, "", 2},
    {"filter", "{{ users|selectattr('x')|length }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", NULL, "", 2},
    {"filter", "{{ {'a':1}|attr('items') is callable }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "True", NULL, 0},
    {"filter", "{{ '<b>'|safe + '<i>' }} {{ '<b>' + '<i>'|safe }} {{ '<b>'|safe ~ '<i>' }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "<b>&lt;i&gt; &lt;b&gt;<i> <b><i>", NULL, 0},
    {"filter", "{{ [1,2]|map('string')|join('+') }} {{ users|map(attribute='age')|map('string')|list }}", "{\"x\":{\"b\":[1,2.5,\"é\\n\",null,true],\"a\":{},\"c\":[]},\"users\":[{\"name\":\"Al\",\"age\":30,\"admin\":true,\"nick\":\"al\"},{\"name\":\"Bo\",\"age\":20,\"admin\":false},{\"name\":\"Cy\",\"age\":25,\"admin\":false}]}", "1+2 ['30', '20', '25']", NULL, 0},
    {"test", "{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is not none }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "True False True True True", NULL, 0},
    {"test", "{{ 's' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} {{ [] is sequence }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is integer }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "True True True True True True True True False", NULL, 0},
    {"test", "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "True False True True True True False", NULL, 0},
    {"test", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'x' is in 'xyz' }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 2 is gt 1 }} {{ 2 is ne 2 }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "True True True True False True False", NULL, 0},
    {"test", "{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "True True a b|axx|xxa", NULL, 0},
    {"test", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a b c'.rsplit(None, 1) }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c'] ['a b', 'c']", NULL, 0},
    {"test", "{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ \"they're\".title() }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "HELLO hello Hello World Hello They'Re", NULL, 0},
    {"test", "{{ 'aXbXc'.replace('X', '-') }} {{ 'aXbXc'.replace('X', '-', 1) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'hello'.index('e') }} {{ 'hello'.count('l') }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "a-b-c a-bXc 2 3 -1 2 1 2", NULL, 0},
    {"test", "{{ '-'.join(['a','b']) }} {{ '{} and {}'.format(1, 'x') }} {{ '{1}{0}'.format('a','b') }} {{ '{n}!'.format(n=3) }} {{ '{{}}{}'.format(1) }} {{ '{:>5}|{:<4}|{:^5}|{:.2f}|{:03d}'.format('a','b','c',3.14159,7) }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "a-b 1 and x ba 3! {}1     a|b   |  c  |3.14|007", NULL, 0},
    {"test", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ '  '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ 'a1'.isalnum() }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "['a', 'b', 'c'] True True True True True True", NULL, 0},
    {"test", "{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "[('a', 1), ('b', 2)] ['a', 'b'] [1, 2] 1 None 9", NULL, 0},
    {"test", "{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'a=b'.partition('=') }} {{ '5'.zfill(3) }} {{ 'x'.ljust(3) }}|", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "bc ab ('a', '=', 'b') 005 x  |", NULL, 0},
    {"test", "{{ [1,2,2].count(2) }} {{ [1,2].index(2) }} {{ '%s=%s' % ('a', 1) }} {{ '%d%%' % 50 }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "2 1 a=1 50%", NULL, 0},
    {"test", "{{ strftime_now('%Y-%m-%d %H:%M') }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "2023-11-14 22:13", NULL, 0},
    {"test", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "[0, 1, 2] [1, 3, 5] [5, 3, 1]", NULL, 0},
    {"test", "{{ namespace(a=1).a }} {{ x.keys is defined }}", "{\"x\":1,\"d\":{\"a\":1,\"b\":2}}", "1 False", NULL, 0},
    {"error", "{{ raise_exception('bad thing') }}", "{\"x\":1}", NULL, "bad thing", 2},
    {"error", "{{ y.z }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ y + 1 }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 1 < 'a' }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ [1].append(2) }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{% set l = [] %}{{ l.append(1) }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ {}.update({}) }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ none|tojson }}{{ y|tojson }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{% for x in none %}{% endfor %}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 1 / 0 }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 1 // 0 }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ range(100001)|length }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 'a'|length + none }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{% set x = 1 %}{% set x.a = 2 %}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ y() }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 1() }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ [1, 2]|map(attribute='a')|tojson }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ [1]|selectattr('a', 'nosuchtest')|list }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ 'x'|nosuchfilter }}", "{\"x\":1}", NULL, "", 1},
    {"error", "{% if 1 %}{{ '%d' % 'x' }}{% endif %}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ (1,2)|first }}{{ [1]|map(attribute='x')|length }}", "{\"x\":1}", NULL, "", 2},
    {"error", "{{ [[1]]|unique|list }}", "{\"x\":1}", NULL, "", 2},
    {"parse", "{% include 'x' %}", "{}", NULL, "",1},
    {"parse", "{% extends 'x' %}", "{}", NULL, "",1},
    {"parse", "{% import 'x' as y %}", "{}", NULL, "",1},
    {"parse", "{% from 'x' import y %}", "{}", NULL, "",1},
    {"parse", "{% if %}", "{}", NULL, "", 1},
    {"parse", "{% for %}", "{}", NULL, "", 1},
    {"parse", "{% endfor %}", "{}", NULL, "", 1},
    {"parse", "{{ 1 + }}", "{}", NULL, "", 1},
    {"parse", "{% if 1 %}", "{}", NULL, "", 1},
    {"parse", "{{ 'unclosed }}", "{}", NULL, "", 1},
    {"parse", "{% for x in y %}{% endif %}", "{}", NULL, "", 1},
    {"parse", "{{ a b }}", "{}", NULL, "", 1},
    {"parse", "{% macro m(a=1, b) %}{% endmacro %}", "{}", NULL, "", 1},
    {"parse", "{% break %}", "{}", NULL, "", 1},
    {"parse", "{% do x %}", "{}", NULL, "", 1},
    {"parse", "{{ x | }}", "{}", NULL, "", 1},
    {"parse", "{# unclosed", "{}", NULL, "", 1},
    {"parse", "{{ (1 }}", "{}", NULL, "", 1},
    {"parse", "{% set %}", "{}", NULL, "", 1},
    {"parse", "{{ 1 is == 1 }}", "{}", NULL, "", 1},
    {"parse", "{{ 'a b'|split }}", "{}", NULL, "", 1},
    {"parse", "{% if x %}{{ 'a'|split }}{% endif %}", "{}", "", NULL, 0},
    {"parse", "{{ x|nf if 0 else 1 }}", "{}", "1", NULL, 0},
    {"parse", "{% for i in [1] %}{{ i|nf2 }}{% endfor %}", "{}", NULL, "", 1},
    {"parse", "{{ x is nt }}", "{}", NULL, "", 1},
};

#define NOW 1700000000

static int render(const char *tmpl, const char *ctxs, const char *const *markup, const jinja_limits *lim,
                  char **out, size_t *len, unsigned char **mask, char *err, size_t errlen) {
    jinja_tmpl *t = jinja_parse(tmpl, strlen(tmpl), err, errlen);
    if (!t) return 1;
    cJSON *ctx = cJSON_Parse(ctxs);
    int rc = jinja_render(t, ctx, markup, lim, out, len, mask, err, errlen);
    cJSON_Delete(ctx);
    jinja_free(t);
    return rc ? 2 : 0;
}

static void group(const char *g) {
    jinja_limits lim = {.now = NOW};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const jrow *r = &rows[i];
        if (strcmp(r->group, g)) continue;
        char err[512] = "", *out = NULL;
        size_t len = 0;
        int rc = render(r->tmpl, r->ctx, NULL, &lim, &out, &len, NULL, err, sizeof(err));
        if (r->kind == 0)
            CHECK(rc == 0 && len == strlen(r->want) && !memcmp(out, r->want, len), "%s\n  got  %s\n  want %s",
                  r->tmpl, rc ? err : out, r->want);
        else
            CHECK(rc == r->kind && !strncmp(err, "line ", 5) && (!r->err_has || strstr(err, r->err_has)),
                  "%s: rc %d (want %d) err '%s' out '%s'", r->tmpl, rc, r->kind, err, rc ? "" : out);
        free(out);
    }
}

/* renders and checks the output and its mask ('c' content, 'm' markup) */
static void mask_is(const char *tmpl, const char *ctx, const char *want, const char *want_mask) {
    static const char *const markup[] = {"bos_token", "eos_token", NULL};
    jinja_limits lim = {.now = NOW};
    char err[256], *out = NULL;
    size_t len = 0;
    unsigned char *mask = NULL;
    int rc = render(tmpl, ctx, markup, &lim, &out, &len, &mask, err, sizeof(err));
    CHECK(rc == 0 && len == strlen(want) && !memcmp(out, want, len), "%s: got %s", tmpl, rc ? err : out);
    if (rc == 0 && len == strlen(want_mask)) {
        char got[512] = "";
        for (size_t i = 0; i < len && i < sizeof(got) - 1; i++) got[i] = mask[i] ? 'c' : 'm';
        CHECK(!strcmp(got, want_mask), "%s: mask %s want %s", tmpl, got, want_mask);
    } else {
        CHECK(0, "%s: no mask to compare", tmpl);
    }
    free(out);
    free(mask);
}

static void content_mask(void) {
    const char *ctx = "{\"m\":{\"role\":\"user\",\"content\":\" <|im_start|>x \"},\"bos_token\":\"<s>\",\"n\":7,\"b\":true}";
    mask_is("<|im_start|>{{ m.role }}\n{{ m.content }}", ctx, "<|im_start|>user\n <|im_start|>x ",
            "mmmmmmmmmmmmccccmccccccccccccccc");
    mask_is("{{ bos_token }}{{ m.content|trim }}|", ctx, "<s><|im_start|>x|", "mmmcccccccccccccm");
    mask_is("{{ ('[' ~ m.role ~ ']')|upper }}{{ m.role[1:3] }}", ctx, "[USER]se", "cccccccc");
    mask_is("{{ n }}{{ 7 }}{{ b }}{{ n + 1 }}", ctx, "77True8", "cmccccm");
    mask_is("{{ m|tojson }}{{ 'a'|tojson }}", ctx, "{\"role\": \"user\", \"content\": \" <|im_start|>x \"}\"a\"",
            "ccccccccccccccccccccccccccccccccccccccccccccccmmm");
    mask_is("{% set ns = namespace(s='<') %}{% set ns.s = ns.s ~ m.role ~ '>' %}{{ ns.s }}", ctx, "<user>", "mccccm");
    mask_is("{{ ['<', m.role]|join('|') }}{{ '%s!' % m.role }}", ctx, "<|useruser!", "mmccccccccm");
    mask_is("{% macro w(x) %}<{{ x }}>{% endmacro %}{{ w(m.role) }}", ctx, "<user>", "mccccm");
}

static void limits(void) {
    char err[256], *out = NULL;
    size_t len;
    jinja_limits lim = {.max_steps = 1000};
    int rc = render("{% for i in range(100000) %}{{ i }}{% endfor %}", "{}", NULL, &lim, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_steps"), "steps: %d %s", rc, err);
    free(out), out = NULL;
    jinja_limits lo = {.max_output = 100};
    rc = render("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", "{}", NULL, &lo, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_output"), "output: %d %s", rc, err);
    free(out), out = NULL;
    rc = render("{{ 'a' * 10**9 }}", "{}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_output"), "repeat: %d %s", rc, err);
    free(out), out = NULL;
    rc = render("{% set ns = namespace(s='aaaaaaaaaaaaaaaa') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "{}", NULL,
                NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_output"), "doubling: %d %s", rc, err);
    free(out), out = NULL;
    jinja_limits ld = {.max_depth = 10};
    rc = render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "{}", NULL, &ld, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_depth"), "recursion: %d %s", rc, err);
    free(out), out = NULL;
    rc = render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "{}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_depth"), "recursion default: %d %s", rc, err);
    free(out), out = NULL;
    /* deep nesting in the source: parser bound, no stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (size_t i = 0; i < n / 2; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (size_t i = 0; i < n / 2; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    CHECK(!jinja_parse(deep, strlen(deep), err, sizeof(err)) && strstr(err, "nested"), "parens: %s", err);
    strcpy(deep, "{{ 1");
    k = 4;
    for (size_t i = 0; i < 30000; i++) deep[k++] = '+', deep[k++] = '1';
    strcpy(deep + k, " }}");
    rc = render(deep, "{}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_depth"), "long chain: %d %s", rc, err);
    free(out), out = NULL;
    k = 0;
    for (size_t i = 0; i < 5000; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    deep[k] = 0;
    CHECK(!jinja_parse(deep, k, err, sizeof(err)) && strstr(err, "nested"), "ifs: %s", err);
    free(deep);
    /* a cycle through a namespace */
    rc = render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "{}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "max_depth"), "cycle: %d %s", rc, err);
    free(out), out = NULL;
}

static void api_edges(void) {
    char err[256], *out = NULL;
    size_t len = 99;
    unsigned char *mask = NULL;
    jinja_tmpl *t = jinja_parse("", 0, err, sizeof(err));
    REQUIRE(t, "empty template: %s", err);
    CHECK(jinja_render(t, NULL, NULL, NULL, &out, &len, &mask, err, sizeof(err)) == 0 && out && len == 0 && !out[0],
          "empty render");
    free(out);
    free(mask);
    jinja_free(t);
    jinja_free(NULL);
    int rc = render("a\n{{ x }}\n{{ raise_exception('stop ' ~ x) }}", "{\"x\":\"here\"}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "line 3") && strstr(err, "stop here"), "raise: %s", err);
    rc = render("a\n\n{% if x %}\n{{ x.y.z }}{% endif %}", "{\"x\":1}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 2 && strstr(err, "line 4"), "undefined line: %s", err);
    rc = render("{{ 'a' }}\n{% for %}", "{}", NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 1 && strstr(err, "line 2"), "syntax line: %s", err);
    /* embedded NUL bytes and invalid UTF-8 pass through */
    t = jinja_parse("a\0b{{ x }}", 10, err, sizeof(err));
    REQUIRE(t, "NUL template: %s", err);
    cJSON *ctx = cJSON_Parse("{\"x\":\"\\u00e9\"}");
    rc = jinja_render(t, ctx, NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 0 && len == 5 && !memcmp(out, "a\0b\xc3\xa9", 5), "NUL render");
    free(out);
    cJSON_Delete(ctx);
    jinja_free(t);
}

/* a chat template as models ship them, with tools and tool calls */
static void chat_template(void) {
    const char *tmpl =
        "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
        "{{- '# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}"
        "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}\n"
        "{%- for message in messages %}\n"
        "  {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\n"
        "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
        "  {%- elif message.role == 'assistant' %}\n"
        "    {{- '<|im_start|>' + message.role }}{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}\n"
        "    {%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}\n"
        "      {{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}\n"
        "    {%- endfor %}\n"
        "    {{- '<|im_end|>\\n' }}\n"
        "  {%- elif message.role == 'tool' %}\n"
        "    {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}\n"
        "    {{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}\n"
        "    {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
        "  {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n";
    const char *ctx =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]},"
        "{\"role\":\"tool\",\"content\":\"R\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"add_generation_prompt\":true}";
    const char *want =
        "<|im_start|>system\nS\n\n# Tools\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n</tools><|im_end|>\n"
        "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
    char err[256], *out = NULL;
    size_t len;
    int rc = render(tmpl, ctx, NULL, NULL, &out, &len, NULL, err, sizeof(err));
    CHECK(rc == 0 && !strcmp(out, want), "got %s", rc ? err : out);
    free(out);
}

int main(void) {
    static const char *const groups[] = {"expr", "stmt", "ws", "filter", "test", "error", "parse"};
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) RUN_NAMED(group, groups[i], groups[i]);
    RUN(content_mask);
    RUN(limits);
    RUN(api_edges);
    RUN(chat_template);
    TEST_END();
}
