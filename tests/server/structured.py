"""structured.py: structured output against a live server (tests/server/test_structured.sh).

A table of JSON Schemas (response_format json_schema) and GBNF grammars
(the grammar extension), each run four ways on the bundled model: greedy
and sampled, speculation off and on (n-gram and the draft model, fixed k so
that proposals are verified by construction). Every schema and grammar of
the table but the recursive ones (RECURSIVE) is bounded (strings have
maxLength, arrays maxItems, ...) and max_tokens is above its longest output
in tokens, so every output must end with finish_reason "stop", parse, and
validate (a recursive one may also run to max_tokens, as a small model
nesting forever does: "length" then, any "stop" must validate): a JSON Schema check of the
subset written here (independent of the server's compiler), a regular
expression for each grammar. Greedy output with speculation must equal
greedy output without it, byte for byte. Then: a chat request, a streamed
one, a grammar that cannot finish within max_tokens ("length"), an
impossible grammar (a clear 400), jump-forward (tokens the grammar forces, proposed and accepted), tool calls
(required, named, and auto on the llama3 template: tool_calls whose
arguments validate against the function's parameters, streamed piecewise
as OpenAI does and equal to the whole answer, identical with speculation),
and the speculation metrics.
Standard library only."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, request  # noqa: E402

S = lambda n: {"type": "string", "maxLength": n}  # noqa: E731
I = lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": hi}  # noqa: E731

SCHEMAS = [
    ("boolean", {"type": "boolean"}),
    ("null", {"type": "null"}),
    ("integer", {"type": "integer"}),
    ("number", {"type": "number"}),
    ("short string", S(12)),
    ("string 3..8", {"type": "string", "minLength": 3, "maxLength": 8}),
    ("empty string", S(0)),
    ("enum", {"enum": ["red", "green", "blue"]}),
    ("const", {"const": "fixed"}),
    ("integer 1..100", I(1, 100)),
    ("negative range", I(-50, -10)),
    ("integer >= 0", {"type": "integer", "minimum": 0}),
    ("exclusive bounds", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}),
    ("number >= 0", {"type": "number", "minimum": 0}),
    ("array of integers", {"type": "array", "items": {"type": "integer"}, "maxItems": 5}),
    ("array 2..4 booleans", {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4}),
    ("array of 3 enums", {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 3, "maxItems": 3}),
    ("person", {"type": "object", "properties": {"name": S(10), "age": I(0, 120)},
                "required": ["name", "age"], "additionalProperties": False}),
    ("all optional", {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"},
                                                       "c": I(0, 9)}}),
    ("nested object", {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "id": I(1, 1000), "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3}},
            "required": ["id", "tags"]}}, "required": ["user"]}),
    ("anyOf", {"anyOf": [S(5), I(0, 9), {"type": "null"}]}),
    ("oneOf", {"oneOf": [{"type": "boolean"}, {"const": 42}]}),
    ("type list", {"type": ["boolean", "null"]}),
    ("linked list ($ref)", {"$defs": {"node": {"type": "object", "properties": {
        "v": I(0, 9), "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
        "required": ["v", "next"]}}, "$ref": "#/$defs/node"}),
    ("expression tree ($ref)", {"$defs": {"e": {"anyOf": [I(0, 9), {
        "type": "array", "items": {"$ref": "#/$defs/e"}, "minItems": 1, "maxItems": 2}]}},
        "$ref": "#/$defs/e"}),
    ("definitions", {"definitions": {"pt": {"type": "object", "properties": {"x": I(0, 9), "y": I(0, 9)},
                                            "required": ["x", "y"]}},
                     "type": "array", "items": {"$ref": "#/definitions/pt"}, "maxItems": 3}),
    ("unicode enum", {"enum": ["\u4e2d\u6587", "caf\u00e9", "na\u00efve"]}),
    ("unicode const", {"const": "\u00fcn\u00efc\u00f6d\u00e9 \u2713"}),
    ("array of objects", {"type": "array", "items": {"type": "object", "properties": {"x": I(0, 9)},
                                                     "required": ["x"]}, "minItems": 1, "maxItems": 3}),
    ("empty object only", {"type": "object", "additionalProperties": False}),
    ("const array", {"type": "object", "properties": {"k": {"const": [1, "a", None]}}, "required": ["k"]}),
    ("mixed enum", {"enum": [True, 1.5, "x", None, {"a": 1}]}),
    ("escaped keys", {"type": "object", "properties": {"we\"ird\\key": {"type": "boolean"},
                                                       "\u043a\u043b\u044e\u0447": {"type": "null"}},
                      "required": ["we\"ird\\key", "\u043a\u043b\u044e\u0447"]}),
    ("nested arrays", {"type": "array", "items": {"type": "array", "items": {"type": "boolean"},
                                                  "maxItems": 2}, "maxItems": 2}),
    ("required between optionals", {"type": "object", "properties": {
        "a": I(0, 9), "b": {"type": "boolean"}, "c": S(4)}, "required": ["b"]}),
    ("annotations", {"title": "id", "description": "an id", "type": "object",
                     "properties": {"id": {"type": "string", "format": "uuid", "maxLength": 36}},
                     "required": ["id"], "$schema": "https://json-schema.org/draft/2020-12/schema"}),
    ("tool arguments", {"type": "object", "properties": {
        "city": S(20), "unit": {"enum": ["celsius", "fahrenheit"]}, "days": I(1, 7)},
        "required": ["city", "unit"], "additionalProperties": False}),
    ("pattern code", {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"}),
    ("pattern alternation", {"type": "string", "pattern": "^(yes|no|maybe)( [0-9]{1,2})?$"}),
    ("pattern escapes", {"type": "object", "properties": {"path": {
        "type": "string", "pattern": "^[a-z]{1,6}(\\\\[a-z]{1,6}){0,2}\"?$", "maxLength": 21}},
        "required": ["path"]}),
]

GRAMMARS = [
    ("phone", 'root ::= [0-9]{3} "-" [0-9]{4}', r"[0-9]{3}-[0-9]{4}"),
    ("yes or no", 'root ::= ("yes" | "no") "."', r"(yes|no)\."),
    ("word list", 'root ::= [a-z]{1,10} ("," [a-z]{1,10}){0,3}', r"[a-z]{1,10}(,[a-z]{1,10}){0,3}"),
    ("expression", 'root ::= "(" [0-9] ([+*] [0-9]){0,4} ")"', r"\([0-9]([+*][0-9]){0,4}\)"),
    ("name", 'root ::= [A-Z] [a-z]{2,6} " " [A-Z] [a-z]{2,6}', r"[A-Z][a-z]{2,6} [A-Z][a-z]{2,6}"),
    ("tags", 'root ::= "<" tag ">" [^<>]{0,10} "</" tag ">"\ntag ::= "a" | "b"', r"<(a|b)>[^<>]{0,10}</(a|b)>"),
    ("cjk", 'root ::= [\\u4e00-\\u9fff]{1,4}', "[\u4e00-\u9fff]{1,4}"),
    ("repeat", 'root ::= "x"{2,5} "y"?', r"x{2,5}y?"),
    ("python call", 'root ::= ident "(" (ident ("," " "? ident){0,2})? ")"\nident ::= [a-z_] [a-z0-9_]{0,7}',
     r"[a-z_][a-z0-9_]{0,7}\(([a-z_][a-z0-9_]{0,7}(, ?[a-z_][a-z0-9_]{0,7}){0,2})?\)"),
]

RECURSIVE = {"linked list ($ref)", "expression tree ($ref)"}

MODES = [  # name, extra request fields, greedy
    ("greedy", {"temperature": 0}, True),
    ("greedy+ngram", {"temperature": 0, "speculative": {"method": "ngram", "k": 4}}, True),
    ("sampled", {"temperature": 0.9, "seed": 11}, False),
    ("sampled+draft", {"temperature": 0.9, "seed": 11, "speculative": {"method": "draft", "k": 4}}, False),
]
PROMPT = "# the answer as JSON\nresult = "
MAX_TOKENS = 200


# ---- a validator for the schema subset (independent of src/grammar) ----

def resolve(root, ref):
    if ref == "#":
        return root
    _, where, name = ref.split("/", 2)
    return root[where][name]


def is_type(v, t):
    return {"object": lambda: isinstance(v, dict), "array": lambda: isinstance(v, list),
            "string": lambda: isinstance(v, str), "boolean": lambda: isinstance(v, bool),
            "null": lambda: v is None,
            "integer": lambda: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda: isinstance(v, (int, float)) and not isinstance(v, bool)}[t]()


def valid(v, s, root):
    """None when v satisfies s, else why not."""
    if s is True or s == {}:
        return None
    if "$ref" in s:
        return valid(v, resolve(root, s["$ref"]), root)
    if "anyOf" in s:
        return None if any(valid(v, x, root) is None for x in s["anyOf"]) else "no anyOf branch"
    if "oneOf" in s:
        n = sum(valid(v, x, root) is None for x in s["oneOf"])
        return None if n == 1 else "%d oneOf branches" % n
    if "const" in s and not (v == s["const"] and type(v) is type(s["const"])):
        return "not the const"
    if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
        return "not in the enum"
    t = s.get("type")
    if t is not None and not any(is_type(v, x) for x in (t if isinstance(t, list) else [t])):
        return "not of type %s" % t
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", 1 << 30):
            return "length %d" % len(v)
        if "pattern" in s and not re.search(s["pattern"], v):
            return "%r does not match the pattern %s" % (v, s["pattern"])
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if ("minimum" in s and v < s["minimum"]) or ("maximum" in s and v > s["maximum"]) or \
           ("exclusiveMinimum" in s and v <= s["exclusiveMinimum"]) or \
           ("exclusiveMaximum" in s and v >= s["exclusiveMaximum"]):
            return "%r out of bounds" % v
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30):
            return "%d items" % len(v)
        for x in v:
            w = valid(x, s.get("items", {}), root)
            if w:
                return "item: " + w
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                return "missing %r" % k
        for k, x in v.items():
            if k in props:
                w = valid(x, props[k], root)
            elif s.get("additionalProperties", True) is False:
                w = "extra property %r" % k
            else:
                ap = s.get("additionalProperties", True)
                w = valid(x, ap if isinstance(ap, dict) else {}, root)
            if w:
                return "%r: %s" % (k, w)
    return None


def post(port, path, body):
    st, _, raw = request(port, "POST", path, json.dumps(body).encode(), timeout=300)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, raw.decode("utf-8", "replace")


DRAFTED = {}  # mode -> tokens drafted over the table
FORCED = {}  # mode -> accepted tokens the grammar forced (jump-forward)


def run_case(port, name, extra, check):
    """Runs one table row in every mode; one report per mode."""
    out = []
    for mode, fields, greedy in MODES:
        body = dict({"prompt": PROMPT, "max_tokens": MAX_TOKENS}, **fields, **extra)
        st, d = post(port, "/v1/completions", body)
        err = None
        text = None
        if st != 200:
            err = "HTTP %d %s" % (st, str(d)[:300])
        else:
            c = d["choices"][0]
            text = c["text"]
            if c["finish_reason"] == "stop":
                err = check(text)
            elif not (c["finish_reason"] == "length" and name in RECURSIVE):
                err = "finish_reason %s: %r" % (c["finish_reason"], text[:200])
            DRAFTED[mode] = DRAFTED.get(mode, 0) + d["specula"]["spec"]["drafted"]
            FORCED[mode] = FORCED.get(mode, 0) + d["specula"]["spec"]["grammar_forced"]
        if not err and greedy and out and out[0][1] is not None and text != out[0][1]:
            err = "speculative greedy output %r differs from plain %r" % (text, out[0][1])
        out.append((mode, text, err))
    return out


def schema_check(schema):
    def check(text):
        try:
            v = json.loads(text)
        except ValueError as e:
            return "does not parse (%s): %r" % (e, text[:200])
        w = valid(v, schema, schema)
        return None if w is None else "%s: %r" % (w, text[:200])
    return check


def grammar_check(rx):
    def check(text):
        return None if re.fullmatch(rx, text) else "%r does not match %s" % (text[:200], rx)
    return check


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--model", default="models/specula-code-target-f16.gguf")
    ap.add_argument("--draft", default="models/specula-code-draft-f16.gguf")
    ap.add_argument("--mkmodel", default="bin/mkmodel")
    ap.add_argument("--bpe-vocab", default=os.path.join(
        os.environ.get("SPECULA_REF_DIR", "../shared/reference"), "vocab", "ggml-vocab-gpt-2.gguf"))
    a = ap.parse_args()
    t = Tally()
    tmp = tempfile.mkdtemp()
    rows = []
    srv = Server("structured", a.bin, ["-m", a.model, "--draft", a.draft, "--spec", "off", "--spec-fixed-k",
                                       "--chat-template", "chatml"], tmp, threads=2)
    port = srv.port
    try:
        rows = [(n, {"response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": s,
                                                                                "strict": True}}},
                 schema_check(s)) for n, s in SCHEMAS]
        rows += [(n, {"grammar": g}, grammar_check(rx)) for n, g, rx in GRAMMARS]
        for name, extra, check in rows:
            for mode, text, err in run_case(port, name, extra, check):
                t.report("%s [%s]%s" % (name, mode, "" if err else ": %r" % text[:60]), err)
        for mode, fields, _ in MODES:  # proposals were verified (and cut where the grammar refused them)
            if "speculative" in fields:
                t.report("%s: the table's requests drafted (%d tokens)" % (mode, DRAFTED.get(mode, 0)),
                         None if DRAFTED.get(mode, 0) > 0 else "nothing drafted")
        for mode, _, _ in MODES:  # jump-forward: with every proposer, and without speculation
            n = FORCED.get(mode, 0)
            t.report("%s: tokens the grammar forced were proposed and accepted (%d)" % (mode, n),
                     None if n > 0 else "no jump-forward")
        # chat, json_schema
        st, d = post(port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "a JSON object please"}], "max_tokens": 120,
            "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {
                "name": "t", "schema": SCHEMAS[17][1]}}})
        err = "HTTP %d %s" % (st, str(d)[:300]) if st != 200 else None
        if not err:
            c = d["choices"][0]
            err = schema_check(SCHEMAS[17][1])(c["message"]["content"]) if c["finish_reason"] == "stop" \
                else "finish_reason %s" % c["finish_reason"]
        t.report("chat: json_schema output validates", err)
        # streamed: the deltas join into a valid document
        st, _, raw = request(port, "POST", "/v1/completions", json.dumps({
            "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMAS[19][1]}}}
        ).encode(), timeout=300)
        parts, fin = [], None
        for line in raw.decode().splitlines():
            if line.startswith("data: {"):
                ch = json.loads(line[6:])["choices"]
                if ch:
                    parts.append(ch[0].get("text", ""))
                    fin = ch[0].get("finish_reason") or fin
        err = "HTTP %d" % st if st != 200 else \
            ("finish_reason %s" % fin if fin != "stop" else schema_check(SCHEMAS[19][1])("".join(parts)))
        t.report("stream: the deltas join into a valid document", err)
        tools_checks(port, t)
        either_checks(port, t)
        # a grammar that cannot finish within max_tokens: "length", the output a prefix
        st, d = post(port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 12, "temperature": 0,
                                               "grammar": 'root ::= "ab"{200} "c"'})
        c = d["choices"][0] if st == 200 else {}
        t.report("a grammar longer than max_tokens ends with length",
                 None if st == 200 and c["finish_reason"] == "length" and ("ab" * 200).startswith(c["text"])
                 and d["usage"]["completion_tokens"] == 12 else "HTTP %d %s" % (st, str(d)[:300]))
        # impossible: no token fits the first position
        st, d = post(port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 4,
                                               "grammar": "root ::= [^\\x00-\\U0010FFFF]"})
        e = d.get("error", {}) if isinstance(d, dict) else {}
        t.report("an impossible grammar is a clear 400",
                 None if st == 400 and e.get("param") == "grammar" and "no token" in e.get("message", "")
                 else "HTTP %d %s" % (st, str(d)[:300]))
        # json_object: an object (complete, or cut by max_tokens)
        st, d = post(port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 60, "temperature": 0.7,
                                               "seed": 5, "response_format": {"type": "json_object"}})
        c = d["choices"][0] if st == 200 else {}
        err = "HTTP %d" % st if st != 200 else None
        if not err and c["finish_reason"] == "stop":
            try:
                err = None if isinstance(json.loads(c["text"]), dict) else "not an object"
            except ValueError as ex:
                err = "does not parse: %s %r" % (ex, c["text"])
        elif not err:
            err = None if c["text"].startswith("{") else "not an object: %r" % c["text"]
        t.report("json_object: an object", err)
    finally:
        rc = srv.stop()
        log = srv.text()
        t.report("server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(log) else "exit %s: %s" % (rc, log[-500:]))
    try:
        auto_checks(a, t, tmp)
        bpe_table(a, t, tmp, rows)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return t.result()


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMAS[36][1]}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": I(0, 99), "b": I(0, 99)}, "required": ["a", "b"]}}}]
# short ones for the llama3 server (its prompt must leave room in a 512-token context)
AUTO_TOOLS = [{"type": "function", "function": {"name": "mul", "parameters": {
                  "type": "object", "properties": {"a": I(0, 9), "b": I(0, 9)}, "required": ["a", "b"]}}},
              {"type": "function", "function": {"name": "neg", "parameters": {
                  "type": "object", "properties": {"x": I(0, 9)}, "required": ["x"]}}}]
PARAMS = {x["function"]["name"]: x["function"]["parameters"] for x in TOOLS + AUTO_TOOLS}


def stream_chat(port, body):
    """A streamed chat answer put together as the openai clients do: (content,
    calls [{"id", "name", "arguments", "pieces"}], finish_reason, why not
    OpenAI-shaped). A call's first chunk carries index, id, type, function.name
    and arguments ""; the chunks after it only argument fragments."""
    st, _, raw = request(port, "POST", "/v1/chat/completions", json.dumps(dict(body, stream=True)).encode(),
                         timeout=300)
    if st != 200:
        return None, [], None, "HTTP %d %s" % (st, raw[:300])
    content, calls, fin, err = None, [], None, None
    for line in raw.decode().splitlines():
        ch = json.loads(line[6:])["choices"] if line.startswith("data: {") else None
        if not ch:
            continue
        d = ch[0]["delta"]
        if d.get("content"):
            content = (content or "") + d["content"]
        for tc in d.get("tool_calls") or []:
            f = tc.get("function", {})
            if tc.get("index") == len(calls):
                if not (tc.get("id", "").startswith("call_") and tc.get("type") == "function" and f.get("name")
                        and f.get("arguments") == ""):
                    err = err or "the first chunk of call %d: %r" % (len(calls), tc)
                calls.append({"id": tc.get("id"), "name": f.get("name"), "arguments": "", "pieces": 0})
            elif tc.get("index") == len(calls) - 1 and set(tc) == {"index", "function"} and set(f) == {"arguments"}:
                calls[-1]["arguments"] += f["arguments"]
                calls[-1]["pieces"] += 1
            else:
                err = err or "a tool_calls chunk out of order: %r" % tc
        fin = ch[0].get("finish_reason") or fin
    return content, calls, fin, err


def whole_call(port, body, want=None):
    """The non-streamed answer's one call (name, arguments), or why not."""
    st, d = post(port, "/v1/chat/completions", body)
    if st != 200:
        return None, "HTTP %d %s" % (st, str(d)[:300])
    c = d["choices"][0]
    calls = c["message"].get("tool_calls") or []
    if c["message"].get("content") is not None:
        return None, "content beside tool_calls: %r" % c["message"]["content"]
    if c["finish_reason"] != "tool_calls" or len(calls) != 1:
        return None, "finish_reason %s, calls %s" % (c["finish_reason"], calls)
    f = calls[0]["function"]
    if f["name"] not in PARAMS or (want and f["name"] != want) or not calls[0]["id"].startswith("call_"):
        return None, "call %r" % calls[0]
    err = schema_check(PARAMS[f["name"]])(f["arguments"])
    return (None, err) if err else ((f["name"], f["arguments"]), None)


def stream_matches(port, body, call):
    """The same request streamed: piecewise, and the same call."""
    content, calls, fin, err = stream_chat(port, body)
    if err:
        return err
    if fin != "tool_calls" or content is not None or len(calls) != 1:
        return "finish_reason %s, content %r, calls %s" % (fin, content, calls)
    if (calls[0]["name"], calls[0]["arguments"]) != call:
        return "streamed %r, whole %r" % (calls[0], call)
    return None if calls[0]["pieces"] > 1 else "the arguments came in %d piece(s)" % calls[0]["pieces"]


def tools_checks(port, t):
    """tool_choice required and named (chatml: <tool_call> markup): tool_calls
    whose arguments validate; streamed, the call comes piecewise and equals
    the whole answer's."""
    for label, choice in (("required", "required"), ("named", {"type": "function", "function": {"name": "add"}})):
        body = {"messages": [{"role": "user", "content": "weather in Paris?"}], "max_tokens": 100,
                "temperature": 0.8, "seed": 3, "tools": TOOLS, "tool_choice": choice,
                "speculative": {"method": "ngram", "k": 4}}
        call, err = whole_call(port, body, "add" if isinstance(choice, dict) else None)
        t.report("tools: %s call: tool_calls whose arguments validate" % label, err)
        t.report("tools: %s call streamed: piecewise deltas, the same call" % label,
                 stream_matches(port, body, call) if call else "no call to compare")
    # a tool without arguments (parameters absent, or an object with no
    # properties) is called with {}, as OpenAI means it, not with any object
    for label, fn in (("absent", {"name": "now"}),
                      ("empty object", {"name": "now", "parameters": {"type": "object", "properties": {}}})):
        body = {"messages": [{"role": "user", "content": "what time is it?"}], "max_tokens": 60,
                "temperature": 0.8, "seed": 5, "tools": [{"type": "function", "function": fn}],
                "tool_choice": {"type": "function", "function": {"name": "now"}}}
        st, d = post(port, "/v1/chat/completions", body)
        calls = d["choices"][0]["message"].get("tool_calls") or [] if st == 200 else []
        args = calls[0]["function"]["arguments"] if len(calls) == 1 else None
        try:
            empty = args is not None and json.loads(args) == {}
        except ValueError:
            empty = False
        t.report("tools: a tool without arguments (parameters %s) is called with {}" % label,
                 None if empty else "HTTP %d, %r" % (st, str(d)[:300]))


def either_checks(port, t):
    """tool_choice auto under response_format (chatml): the output is either
    a call from its start or an answer in the format, never plain text. A
    logit bias on the first token of "<tool_call>" (which no JSON answer
    starts with) makes it a call; without it the greedy answer is whichever
    the model prefers, and must be one or the other. Each is the same with
    n-gram speculation."""
    st, _, raw = request(port, "POST", "/tokenize", json.dumps(
        {"prompt": "<tool_call>", "add_special": False}).encode())
    first = json.loads(raw)["tokens"][0] if st == 200 else None
    fmt = SCHEMAS[17][1]
    base = {"messages": [{"role": "user", "content": "add 2 and 3, or describe it"}], "max_tokens": 120,
            "temperature": 0, "tools": TOOLS, "tool_choice": "auto",
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": fmt}}}
    for label, extra in (("biased to call", {"logit_bias": {str(first): 100}}), ("unbiased", {})):
        body = dict(base, **extra)
        outs = []
        for spec in (None, {"method": "ngram", "k": 4}):
            st, d = post(port, "/v1/chat/completions", dict(body, speculative=spec) if spec else body)
            if st != 200:
                outs.append(("HTTP %d %s" % (st, str(d)[:300]),))
                continue
            c = d["choices"][0]
            m, calls = c["message"], c["message"].get("tool_calls") or []
            if calls:
                f = calls[0]["function"]
                err = None if c["finish_reason"] == "tool_calls" and m.get("content") is None and \
                    f["name"] in PARAMS else "finish %s, %r" % (c["finish_reason"], m)
                err = err or schema_check(PARAMS[f["name"]])(f["arguments"])
                outs.append(("call", f["name"], f["arguments"], err))
            else:
                err = schema_check(fmt)(m["content"]) if c["finish_reason"] == "stop" else \
                    "finish_reason %s" % c["finish_reason"]
                outs.append(("answer", m["content"], err))
        err = next((o[-1] for o in outs if o[-1]), None)
        if not err and label == "biased to call" and outs[0][0] != "call":
            err = "an answer, not a call: %r" % (outs[0],)
        t.report("auto + response_format (%s): a valid call or an answer in the format" % label, err)
        t.report("auto + response_format (%s): the same with n-gram speculation" % label,
                 None if outs[0] == outs[1] else "%r vs %r" % tuple(outs))
    # llama-server's form: response_format json_object with a schema
    st, d = post(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "a JSON object please"}], "max_tokens": 120,
        "temperature": 0, "response_format": {"type": "json_object", "schema": fmt}})
    c = d["choices"][0] if st == 200 else {}
    t.report("response_format json_object with a schema: output validates",
             ("HTTP %d %s" % (st, str(d)[:300])) if st != 200 else
             schema_check(fmt)(c["message"]["content"]) if c["finish_reason"] == "stop"
             else "finish_reason %s" % c["finish_reason"])


def auto_checks(a, t, tmp):
    """tool_choice auto on the llama3 template (a call is {"name", "parameters"}
    at the start of the answer): the model starts its answer with the
    trigger when logit biases spell it ({ " name ": in turn, each dropping out
    once used under repeat_penalty 10; the user message is long enough that
    none of them is in the prompt's penalty window); from the trigger on the
    output is a valid call, returned as tool_calls, identical with n-gram
    speculation (greedy and seeded sampling), and streamed piecewise; without
    the biases the answer is text."""
    srv = Server("structured-llama3", a.bin, ["-m", a.model, "--spec", "off", "--spec-fixed-k",
                                              "--chat-template", "llama3"], tmp, threads=2)
    try:
        st, _, raw = request(srv.port, "POST", "/tokenize", json.dumps(
            {"prompt": '{"name":', "add_special": False}).encode())
        ids = json.loads(raw)["tokens"] if st == 200 else []
        if len(set(ids)) != 4:
            t.report("auto: the trigger's tokens", "'{\"name\":' is %r, not 4 distinct tokens" % ids)
            return
        base = {"messages": [{"role": "user", "content": "what is the weather like in Paris today " * 9}],
                "max_tokens": 50, "tools": AUTO_TOOLS}
        biased = dict(base, logit_bias={str(x): b for x, b in zip(ids, (100, 80, 60, 40))}, repeat_penalty=10)
        for mode, extra in (("greedy", {"temperature": 0}), ("sampled", {"temperature": 0.8, "seed": 3})):
            body = dict(biased, **extra)
            call, err = whole_call(srv.port, body)
            t.report("auto [%s]: the trigger starts a call: tool_calls whose arguments validate" % mode, err)
            spec, err2 = whole_call(srv.port, dict(body, speculative={"method": "ngram", "k": 4}))
            t.report("auto [%s]: the same call with n-gram speculation" % mode,
                     err2 or (None if spec == call else "%r vs %r" % (spec, call)))
            t.report("auto [%s]: streamed piecewise, the same call" % mode,
                     stream_matches(srv.port, body, call) if call else "no call to compare")
        st, d = post(srv.port, "/v1/chat/completions", dict(base, temperature=0))
        c = d["choices"][0] if st == 200 else {}
        t.report("auto: without the trigger the answer is text",
                 None if st == 200 and isinstance(c["message"]["content"], str) and
                 not c["message"].get("tool_calls") and c["finish_reason"] != "tool_calls"
                 else "HTTP %d %s" % (st, str(d)[:300]))
    finally:
        rc = srv.stop()
        log = srv.text()
        t.report("llama3 server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(log) else "exit %s: %s" % (rc, log[-500:]))


def bpe_table(a, t, tmp, rows):
    """The same table on GPT-2's byte-level BPE vocabulary: a small model
    with random weights (bin/mkmodel), whose unconstrained output is noise,
    so everything that parses is the grammar's doing. Greedy, greedy with
    n-gram speculation (equal to it), sampled."""
    path = os.path.join(tmp, "bpe.gguf")
    r = subprocess.run([a.mkmodel, "-o", path, "--vocab-from", a.bpe_vocab, "--n-embd", "64", "--n-layer", "2",
                        "--n-head", "4", "--n-head-kv", "2", "--n-ff", "128", "--ctx", "512", "--threads", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode:
        t.report("BPE: mkmodel", r.stdout.decode()[-300:])
        return
    srv = Server("structured-bpe", a.bin, ["-m", path, "--spec", "off", "--spec-fixed-k"], tmp, threads=2)
    global MODES
    saved, MODES = MODES, MODES[:3]
    try:
        for name, extra, check in rows:
            for mode, text, err in run_case(srv.port, name, extra, check):
                t.report("BPE %s [%s]%s" % (name, mode, "" if err else ": %r" % text[:60]), err)
    finally:
        MODES = saved
        rc = srv.stop()
        log = srv.text()
        t.report("BPE server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(log) else "exit %s: %s" % (rc, log[-500:]))


if __name__ == "__main__":
    sys.exit(main())
