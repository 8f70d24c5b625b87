#!/usr/bin/env python3
"""fields.py: every request field of /v1/completions and /v1/chat/completions
does what docs/server.md's "Request fields" table says (the table is the code's:
test_chat checks them equal). For each row and endpoint:

  honored    a request with the field changes the output as documented
             (a check per field below: temperature samples, top_k 1 is
             greedy, stop cuts, logit_bias bans and forces, ignore_eos
             runs past a forced end-of-sequence token, ...);
  no effect  accepted, and the output equals the same request without it;
  refused    400 naming the field (error.param), while the value that asks
             for nothing (n 1, echo false, tools [], ...) is accepted and
             changes nothing;
  -          not a field of that endpoint: 400 naming it, as an unknown
             field (a misspelt one too).

Every row must have its check here, and every check its row. logit_bias
also keeps speculative decoding exact: with the greedy output's first token
banned, the output changes, and ngram, suffix and draft-model speculation
give exactly the output speculation off gives (the proposers do draft
here: the model repeats the code it was shown).

usage: fields.py --bin BIN [--model GGUF] [--draft GGUF] [--doc docs/server.md]
(the model: the bundled trained target, whose output repeats the code it
was shown, so that penalties and speculation have something to act on)
Prints "ok"/"FAIL" lines and "RESULT <passed> <failed>". Standard library only."""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, request  # noqa: E402

EPS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
PROMPT = "import os\n\n\ndef read_config(path):\n"
REPEAT = "def add(a, b):\n    return a + b\n\n\n" * 3  # the model repeats it: speculation drafts
EOS = 2  # the bundled models' end of sequence (specula info: eos 2)
port = None


def doc_rows(path):
    text = open(path).read()
    m = re.search(r"<!-- request-fields:begin -->\n(.*?)<!-- request-fields:end -->", text, re.S)
    if not m:
        raise SystemExit(path + " has no request-fields block")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 6 or not cells[0].startswith("`"):
            continue
        rows.append({"name": cells[0].strip("`"), "completions": cells[3], "chat": cells[4]})
    return rows


def base(ep, **kw):
    b = {"prompt": PROMPT} if ep == "completions" else \
        {"messages": [{"role": "user", "content": PROMPT}]}
    b.update({"max_tokens": 8, "temperature": 0})
    for k, v in kw.items():
        if v is None:
            b.pop(k, None)
        else:
            b[k] = v
    return b


def post(ep, body, path=None):
    st, _, raw = request(port, "POST", path or EPS[ep], json.dumps(body).encode(), timeout=120)
    if body.get("stream") and st == 200:
        return st, raw.decode()
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, {"raw": raw[:200]}


def text(ep, d):
    c = d["choices"][0]
    return c["text"] if ep == "completions" else c["message"]["content"]


def gen(ep, **kw):
    """200 and the generation's (text, response), else an AssertionError."""
    st, d = post(ep, base(ep, **kw))
    assert st == 200, "HTTP %d: %s" % (st, str(d)[:300])
    return text(ep, d), d


def refused(ep, name, value, **kw):
    st, d = post(ep, base(ep, **{name: value}, **kw))
    e = d.get("error") if isinstance(d, dict) else None
    assert st == 400 and e and e.get("param") == name, \
        "%s=%r: HTTP %d %s (want 400 naming it)" % (name, value, st, str(d)[:200])
    return e


# ---- checks of honored fields: each asserts the documented change ----------

def c_model(ep):
    assert gen(ep, model="ref")[0] == gen(ep)[0]
    st, d = post(ep, base(ep, model="not-this-one"))
    assert st == 404 and d["error"]["param"] == "model", (st, d)


def c_prompt(ep):
    assert gen(ep, prompt="def fibonacci(n):")[0] != gen(ep)[0], "another prompt, the same text"
    ids = json.loads(request(port, "POST", "/tokenize", json.dumps({"prompt": PROMPT}).encode())[2])["tokens"]
    assert gen(ep, prompt=ids)[0] == gen(ep)[0], "token ids of the prompt give another text"


def c_messages(ep):
    other = [{"role": "system", "content": "You write code."}, {"role": "user", "content": "def f(x):"}]
    assert gen(ep, messages=other)[0] != gen(ep)[0], "other messages, the same text"


def c_max_tokens(ep):
    _, d = gen(ep, max_tokens=3, ignore_eos=True)
    assert d["usage"]["completion_tokens"] == 3 and d["choices"][0]["finish_reason"] == "length", d["usage"]


def c_max_completion_tokens(ep):
    _, d = gen(ep, max_tokens=8, max_completion_tokens=2, ignore_eos=True)
    assert d["usage"]["completion_tokens"] == 2, d["usage"]


def c_temperature(ep):
    g = gen(ep, max_tokens=16)[0]
    assert gen(ep, max_tokens=16, temperature=2, seed=1)[0] != g, "temperature 2 gave the greedy text"


def c_top_p(ep):  # a tiny nucleus keeps only the most likely token: greedy
    assert gen(ep, max_tokens=16, temperature=2, seed=1, top_p=1e-6)[0] == gen(ep, max_tokens=16)[0]


def c_top_k(ep):
    assert gen(ep, max_tokens=16, temperature=2, seed=1, top_k=1)[0] == gen(ep, max_tokens=16)[0]


def c_min_p(ep):
    assert gen(ep, max_tokens=16, temperature=2, seed=1, min_p=1)[0] == gen(ep, max_tokens=16)[0]


def penalty(name, value):
    def c(ep):
        kw = dict(max_tokens=24, ignore_eos=True)
        kw["prompt" if ep == "completions" else "messages"] = REPEAT if ep == "completions" else \
            [{"role": "user", "content": REPEAT}]
        assert gen(ep, **kw, **{name: value})[0] != gen(ep, **kw)[0], "%s %g changed nothing" % (name, value)
    return c


def c_seed(ep):
    a = gen(ep, max_tokens=16, temperature=1, seed=11)[0]
    assert gen(ep, max_tokens=16, temperature=1, seed=11)[0] == a, "the same seed, another text"
    assert gen(ep, max_tokens=16, temperature=1, seed=12)[0] != a, "another seed, the same text"


def c_stop(ep):
    g = gen(ep, max_tokens=16, ignore_eos=True)[0]
    assert len(g) > 6, g
    cut = g[3:6]
    t, d = gen(ep, max_tokens=16, ignore_eos=True, stop=["zzzz", cut])
    assert t == g[:g.index(cut)] and d["choices"][0]["finish_reason"] == "stop", (g, cut, t)


def sse(ep, raw):
    out, chunks = "", []
    for ev in raw.split("\n\n"):
        if ev.startswith("data: {"):
            c = json.loads(ev[6:])
            chunks.append(c)
            for ch in c["choices"]:
                out += ch["text"] if ep == "completions" else ch["delta"].get("content", "")
    assert raw.endswith("data: [DONE]\n\n"), raw[-100:]
    return out, chunks


def c_stream(ep):
    st, raw = post(ep, base(ep, stream=True))
    assert st == 200, raw
    assert sse(ep, raw)[0] == gen(ep)[0], "the stream's text differs"


def c_stream_options(ep):
    st, raw = post(ep, base(ep, stream=True, stream_options={"include_usage": True}))
    assert st == 200 and sse(ep, raw)[1][-1]["usage"]["completion_tokens"] >= 1, raw[-300:]
    st, raw = post(ep, base(ep, stream=True))
    assert "usage" not in sse(ep, raw)[1][-1], "a usage chunk without include_usage"
    refused(ep, "stream_options", {"include_usage": True})  # needs stream
    refused(ep, "stream_options", {"include_usagee": True}, stream=True)


def c_logprobs_cmpl(ep):
    _, d = gen(ep, logprobs=2)
    lp = d["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == d["usage"]["completion_tokens"] and all(len(t) == 2 for t in lp["top_logprobs"]), lp
    assert gen(ep)[1]["choices"][0]["logprobs"] is None


def c_logprobs_chat(ep):
    _, d = gen(ep, logprobs=True)
    lp = d["choices"][0]["logprobs"]["content"]
    assert len(lp) == d["usage"]["completion_tokens"] and all(x["top_logprobs"] == [] for x in lp), lp
    assert gen(ep)[1]["choices"][0]["logprobs"] is None


def c_top_logprobs(ep):
    _, d = gen(ep, logprobs=True, top_logprobs=3)
    assert all(len(x["top_logprobs"]) == 3 for x in d["choices"][0]["logprobs"]["content"]), d
    refused(ep, "top_logprobs", 3, logprobs=None)


def first_token(ep, n_vocab, **kw):
    """The id of the first token greedy decoding emits, by bisection with
    logit_bias bans (16 requests): banning a set changes the first token
    exactly when the set holds it."""
    g = gen(ep, max_tokens=1, **kw)[0]
    lo, hi = 0, n_vocab
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if gen(ep, max_tokens=1, logit_bias={str(i): -100 for i in range(lo, mid)}, **kw)[0] != g:
            hi = mid
        else:
            lo = mid
    return lo


def vocab_size():
    st, _, raw = request(port, "POST", "/detokenize", json.dumps({"tokens": [10 ** 9]}).encode())
    return int(re.search(r"\(0\.\.(\d+)\)", json.loads(raw)["error"]["message"]).group(1)) + 1


def c_logit_bias(ep):
    n_vocab = vocab_size()
    kw = dict(max_tokens=32, ignore_eos=True)
    kw["prompt" if ep == "completions" else "messages"] = REPEAT if ep == "completions" else \
        [{"role": "user", "content": REPEAT}]
    g = gen(ep, **kw)[0]
    t = first_token(ep, n_vocab, **{k: v for k, v in kw.items() if k != "max_tokens"})
    ban = {str(t): -100}
    off = gen(ep, logit_bias=ban, speculative={"method": "off"}, **kw)[0]
    assert off != g, "banning the first token (%d) changed nothing" % t
    for method in ("ngram", "suffix", "draft"):
        on, d = gen(ep, logit_bias=ban, speculative={"method": method, "k": 4}, **kw)
        assert on == off, "%s speculation with the bias: %r != %r" % (method, on, off)
        # the draft model's k adapts (it may choose to draft little); the
        # proposers draft whatever repeats, which this output does
        assert method == "draft" or d["specula"]["spec"]["drafted"] > 0, \
            "%s drafted nothing: the check is void" % method
    # +100 forces a token
    ids = json.loads(request(port, "POST", "/tokenize", json.dumps({"prompt": " banana", "add_special": False}).encode())[2])["tokens"]
    x = ids[-1]
    piece = json.loads(request(port, "POST", "/detokenize", json.dumps({"tokens": [x]}).encode())[2])["content"]
    forced = gen(ep, max_tokens=3, logit_bias={str(x): 100}, ignore_eos=True)[0]
    assert piece.strip() and forced.replace(" ", "") == piece.strip() * 3, (piece, forced)
    # validated: type, keys, range
    for bad in ("bad", [1], {"x": 1}, {"-1": 1}, {str(n_vocab): 1}, {"13": 101}, {"13": "a"}, {"1.5": 1}):
        refused(ep, "logit_bias", bad)


def c_ignore_eos(ep):
    force_eos = {str(EOS): 100}
    _, d = gen(ep, max_tokens=6, logit_bias=force_eos)
    assert d["choices"][0]["finish_reason"] == "stop" and d["usage"]["completion_tokens"] <= 1, d["usage"]
    _, d = gen(ep, max_tokens=6, logit_bias=force_eos, ignore_eos=True)
    assert d["choices"][0]["finish_reason"] == "length" and d["usage"]["completion_tokens"] == 6, d["usage"]


def c_response_format(ep):
    # text: no constraint; json_object: an object; json_schema: what the schema allows
    assert gen(ep, response_format={"type": "text"})[0] == gen(ep)[0]
    t, d = gen(ep, max_tokens=60, response_format={"type": "json_object"})
    assert t.startswith("{"), t
    if d["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(t), dict), t
    schema = {"type": "object", "properties": {"ok": {"enum": [True]}, "n": {"const": 7}},
              "required": ["ok", "n"], "additionalProperties": False}
    t, d = gen(ep, max_tokens=30, response_format={"type": "json_schema",
                                                   "json_schema": {"name": "s", "schema": schema, "strict": True}})
    assert d["choices"][0]["finish_reason"] == "stop" and json.loads(t) == {"ok": True, "n": 7}, (t, d["choices"])
    e = refused(ep, "response_format", {"type": "json_schema",
                                        "json_schema": {"name": "s", "schema": {"not": {}}}})
    assert e["code"] == "unsupported_parameter" and "'not'" in e["message"], e


def c_grammar(ep):
    t, d = gen(ep, max_tokens=8, grammar='root ::= "a" [0-9] "b"')
    assert len(t) == 3 and t[0] == "a" and t[1].isdigit() and t[2] == "b" and \
        d["choices"][0]["finish_reason"] == "stop", (t, d["choices"])
    e = refused(ep, "grammar", "root ::= [0-9")
    assert e["code"] == "invalid_value" and "unterminated" in e["message"], e


TOOLS = [{"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"]}}}]


def c_tools(ep):
    # offered but not required (auto): free text, and the prompt changed (the tools are listed)
    _, d = gen(ep, tools=TOOLS)
    assert "tool_calls" not in d["choices"][0]["message"], d["choices"][0]
    assert d["usage"]["prompt_tokens"] > gen(ep)[1]["usage"]["prompt_tokens"], d["usage"]
    refused(ep, "tools", [{"type": "function", "function": {"name": "bad name!"}}])


def c_tool_choice(ep):
    _, d = gen(ep, max_tokens=40, tools=TOOLS, tool_choice="required")
    c = d["choices"][0]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None, c
    call = c["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "pick" and \
        json.loads(call["function"]["arguments"])["n"] in (1, 2), call
    _, d = gen(ep, max_tokens=40, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "pick"}})
    assert d["choices"][0]["finish_reason"] == "tool_calls", d["choices"][0]
    assert gen(ep, tools=TOOLS, tool_choice="none")[0] == gen(ep)[0]  # none: no tools offered
    refused(ep, "tool_choice", "required")  # no tools
    refused(ep, "tool_choice", {"type": "function", "function": {"name": "other"}}, tools=TOOLS)


def c_parallel_tool_calls(ep):
    # false (the default): one call, the grammar ends after it; true: it may go on to a second
    kw = dict(max_tokens=60, tools=TOOLS, tool_choice="required")
    _, d = gen(ep, parallel_tool_calls=False, **kw)
    c = d["choices"][0]
    assert c["finish_reason"] == "tool_calls" and len(c["message"]["tool_calls"]) == 1, c
    assert gen(ep, **kw)[1]["choices"][0]["message"]["tool_calls"][0]["function"] == \
        c["message"]["tool_calls"][0]["function"], "the default is not false"
    _, d = gen(ep, parallel_tool_calls=True, **kw)
    m = d["choices"][0]
    assert m["message"]["tool_calls"][0]["function"] == c["message"]["tool_calls"][0]["function"] and \
        (len(m["message"]["tool_calls"]) > 1 or m["finish_reason"] == "length"), m


def c_cache_salt(ep):
    long_ = dict(max_tokens=1)
    long_["prompt" if ep == "completions" else "messages"] = (PROMPT + REPEAT) * 2 if ep == "completions" \
        else [{"role": "user", "content": (PROMPT + REPEAT) * 2}]
    gen(ep, cache_salt="salt-a-" + ep, **long_)
    _, d = gen(ep, cache_salt="salt-a-" + ep, **long_)
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "the same salt hit nothing"
    _, d = gen(ep, cache_salt="salt-b-" + ep, **long_)
    assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "another salt hit the cache"
    refused(ep, "cache_salt", "s" * 501)


def c_chat_template_kwargs(ep):
    """The template's own variables: the chatml template closes an empty
    <think> block when enable_thinking is false (as Qwen3's does)."""
    _, plain = gen(ep, max_tokens=1)
    _, off = gen(ep, max_tokens=1, chat_template_kwargs={"enable_thinking": False})
    _, on = gen(ep, max_tokens=1, chat_template_kwargs={"enable_thinking": True})
    n = lambda d: d["usage"]["prompt_tokens"]  # noqa: E731
    assert n(off) > n(plain) == n(on), "prompt tokens: plain %d, off %d, on %d" % (n(plain), n(off), n(on))
    refused(ep, "chat_template_kwargs", ["enable_thinking"])


def c_speculative(ep):
    kw = dict(max_tokens=32, ignore_eos=True)
    kw["prompt" if ep == "completions" else "messages"] = REPEAT if ep == "completions" else \
        [{"role": "user", "content": REPEAT}]
    off, d0 = gen(ep, speculative={"method": "off"}, **kw)
    on, d1 = gen(ep, speculative={"method": "ngram", "k": 4}, **kw)
    assert on == off and d0["specula"]["spec"]["drafted"] == 0 and d1["specula"]["spec"]["drafted"] > 0, \
        (d0["specula"]["spec"], d1["specula"]["spec"])
    refused(ep, "speculative", {"method": "ngram", "kk": 4})


HONORED = {
    "model": c_model, "prompt": c_prompt, "messages": c_messages, "max_tokens": c_max_tokens,
    "max_completion_tokens": c_max_completion_tokens, "temperature": c_temperature,
    "top_p": c_top_p, "presence_penalty": penalty("presence_penalty", 2),
    "frequency_penalty": penalty("frequency_penalty", 2), "seed": c_seed, "stop": c_stop,
    "stream": c_stream, "stream_options": c_stream_options, "top_logprobs": c_top_logprobs,
    "logit_bias": c_logit_bias, "top_k": c_top_k, "min_p": c_min_p,
    "repeat_penalty": penalty("repeat_penalty", 5), "ignore_eos": c_ignore_eos,
    "cache_salt": c_cache_salt, "speculative": c_speculative,
    "chat_template_kwargs": c_chat_template_kwargs,
    "response_format": c_response_format, "grammar": c_grammar,
    "tools": c_tools, "tool_choice": c_tool_choice, "parallel_tool_calls": c_parallel_tool_calls,
}
NO_EFFECT = {
    "user": "user-1", "metadata": {"k": "v"}, "store": True, "service_tier": "auto",
    "prompt_cache_key": "key", "safety_identifier": "id-1",
    "prediction": {"type": "content", "content": "x"},
}
# refused: (a value that asks for something, the value that asks for nothing or None)
REFUSED = {
    "n": (2, 1), "best_of": (2, 1), "echo": (True, False), "suffix": ("x", ""),
    "functions": ([{"name": "f"}], []),
    "function_call": ({"name": "f"}, "auto"), "modalities": (["text", "audio"], ["text"]),
    "audio": ({"voice": "alloy", "format": "wav"}, None), "reasoning_effort": ("high", None),
    "verbosity": ("low", None), "web_search_options": ({}, None),
}
SAMPLE = dict(NO_EFFECT, prompt="x", messages=[{"role": "user", "content": "x"}], top_logprobs=2,
              tools=TOOLS, tool_choice="none",
              logprobs=1, **{k: v[0] for k, v in REFUSED.items()})


def check(ep, row):
    name, sup = row["name"], row[ep]
    if sup == "honored":
        if name == "logprobs":
            return (c_logprobs_cmpl if ep == "completions" else c_logprobs_chat)(ep)
        return HONORED[name](ep)
    if sup == "no effect":
        assert gen(ep, **{name: NO_EFFECT[name]})[0] == gen(ep)[0], "%s changed the output" % name
        return
    if sup == "refused":
        bad, neutral = REFUSED[name]
        e = refused(ep, name, bad)
        assert e["code"] == "unsupported_parameter", e
        if neutral is not None:
            assert gen(ep, **{name: neutral})[0] == gen(ep)[0], "%s=%r changed the output" % (name, neutral)
        return
    assert sup == "-", sup
    body = base(ep)
    body[name] = SAMPLE.get(name, 1)
    if name in ("prompt", "messages"):  # the other endpoint's input: this one's is still given
        pass
    st, d = post(ep, body)
    assert st == 400 and d["error"]["param"] == name and d["error"]["code"] == "unknown_parameter", (st, d)


def main():
    global port
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--model", default="models/specula-code-target-f16.gguf")
    ap.add_argument("--draft", default="models/specula-code-draft-f16.gguf")
    ap.add_argument("--doc", default="docs/server.md")
    a = ap.parse_args()
    t = Tally()
    rows = doc_rows(a.doc)
    names = {r["name"] for r in rows}
    known = set(HONORED) | set(NO_EFFECT) | set(REFUSED) | {"logprobs"}
    t.report("the documented table and this test list the same fields",
             None if names == known else "only in the doc: %s; only here: %s" %
             (sorted(names - known), sorted(known - names)))
    tmp = tempfile.mkdtemp()
    # the draft is loaded for requests that ask for it ("speculative":
    # {"method": "draft"}); --spec off keeps the server's default plain
    # (--draft alone turns draft speculation on, as llama.cpp's -md does)
    # --spec-fixed-k: a request that asks for speculation proposes k tokens
    # every step, so "it drafted" holds by construction (the adaptive
    # planner may choose k = 0 when passes are slow, e.g. under ASan)
    srv = Server("fields", a.bin, ["-m", a.model, "--draft", a.draft, "--spec", "off", "--spec-fixed-k",
                                   "--chat-template", "chatml", "--served-model-name", "ref"], tmp)
    port = srv.port
    try:
        for ep in EPS:
            for row in rows:
                if row[ep] == "-" and row["name"] == "logprobs":
                    continue  # the other row of logprobs is this endpoint's
                try:
                    check(ep, row)
                    err = None
                except AssertionError as e:
                    err = str(e)[:600] or "assertion failed"
                t.report("%s %s: %s" % (ep, row["name"], row[ep]), err)
            for name, want in (("max_token", None), ("temperture", None)):
                st, d = post(ep, dict(base(ep), **{name: 1}))
                err = None if st == 400 and d["error"]["param"] == name and name in d["error"]["message"] \
                    else "HTTP %d %s" % (st, str(d)[:200])
                t.report("%s: a misspelt field (%s) is refused, naming it" % (ep, name), err)
    finally:
        rc = srv.stop()
        log = srv.text()
        t.report("server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(log) else "exit %s: %s" % (rc, log[-500:]))
        shutil.rmtree(tmp, ignore_errors=True)
    return t.result()


if __name__ == "__main__":
    sys.exit(main())
