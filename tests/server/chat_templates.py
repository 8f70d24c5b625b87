#!/usr/bin/python3
"""`specula serve` with chat templates run as written: the model's own by
default (the bundled model's file carries one), a Jinja file named by
--chat-template, POST /apply-template, reasoning_content from a template
that thinks (plain, streamed, and in the Responses API), chat_template_kwargs,
a template's raise_exception as a 400 naming the line, and a
--chat-template that does not load as a refusal to start.

Cross-checks: /apply-template equals `specula template` on the same
request, and Python jinja2 (tests/template/ref_render.py, set up as
transformers' apply_chat_template) renders the same bytes.
Prints check lines and "RESULT <passed> <failed>"."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, request  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "template", "ref_render.py")

# ChatML whose generation prompt opens a <think> block (as DeepSeek-R1's
# does), with a guard that raises, a kwarg and strftime_now
THINKING = """{%- for m in messages -%}
{%- if 'forbidden' in m.content -%}{{ raise_exception('no forbidden words, please') }}{%- endif -%}
{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if greeting is defined -%}{{- '<|im_start|>system\\n' + greeting + ' (' + strftime_now('%Y') + ')<|im_end|>\\n' -}}{%- endif -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}
"""


def post(port, path, body):
    st, _, raw = request(port, "POST", path, json.dumps(body).encode(), timeout=120)
    try:
        return st, json.loads(raw)
    except ValueError:
        return st, raw.decode("utf-8", "replace")


def stream(port, path, body):
    """The data events' JSON of a streamed request."""
    st, _, raw = request(port, "POST", path, json.dumps(dict(body, stream=True)).encode(), timeout=120)
    evs = [json.loads(line[6:]) for line in raw.decode().splitlines()
           if line.startswith("data: {")]
    return st, evs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--model", default="models/specula-code-target-f16.gguf")
    a = ap.parse_args()
    t = Tally()
    tmp = tempfile.mkdtemp()
    conv = {"messages": [{"role": "system", "content": "You write Python."},
                         {"role": "user", "content": "a function that adds\ntwo numbers"},
                         {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
                         {"role": "user", "content": "now subtract"}]}
    srv = Server("own", a.bin, ["-m", a.model], tmp)
    try:
        # the model's own template, by default
        st, d = post(srv.port, "/apply-template", conv)
        prompt = d.get("prompt") if st == 200 and isinstance(d, dict) else None
        t.report("/apply-template: the model's own template renders the conversation",
                 None if prompt and prompt.startswith("# ==== file: chat.py ====\n") and
                 "# now subtract\n" in prompt else "HTTP %d %r" % (st, str(d)[:300]))
        req = os.path.join(tmp, "conv.json")
        json.dump(conv, open(req, "w"))
        cli = subprocess.run([a.bin, "template", "-m", a.model, "--input", req], capture_output=True)
        t.report("/apply-template equals `specula template -m MODEL`",
                 None if cli.returncode == 0 and cli.stdout.decode() == prompt else
                 "exit %d: %r vs %r" % (cli.returncode, cli.stdout[:200], (prompt or "")[:200]))
        ref = subprocess.run([sys.executable, REF, "tools/train/chat_template.jinja", req], capture_output=True)
        t.report("Python jinja2 renders the same bytes",
                 None if ref.returncode == 0 and ref.stdout.decode() == prompt else
                 "exit %d %r: %r" % (ref.returncode, ref.stderr[-300:], ref.stdout[:200]))
        st, d = post(srv.port, "/v1/chat/completions", dict(conv, max_tokens=48, temperature=0))
        c = d["choices"][0] if st == 200 else {}
        t.report("chat works with the model's template; the turn ends before '# ===='",
                 None if st == 200 and isinstance(c["message"]["content"], str) and
                 "# ====" not in c["message"]["content"] and c["finish_reason"] in ("stop", "length")
                 else "HTTP %d %r" % (st, str(d)[:300]))
        st, d = post(srv.port, "/apply-template", {"messages": "nope"})
        t.report("/apply-template: a bad body is a 400 naming messages",
                 None if st == 400 and d["error"]["param"] == "messages" else "HTTP %d %r" % (st, str(d)[:200]))
    finally:
        rc = srv.stop()
        t.report("server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(srv.text()) else "exit %s: %s" % (rc, srv.text()[-400:]))

    path = os.path.join(tmp, "thinking.jinja")
    open(path, "w").write(THINKING)
    srv = Server("thinking", a.bin, ["-m", a.model, "--chat-template", path], tmp)
    try:
        body = {"messages": [{"role": "user", "content": "def add(a, b):"}], "max_tokens": 24, "temperature": 0}
        st, d = post(srv.port, "/v1/chat/completions", body)
        m = d["choices"][0]["message"] if st == 200 else {}
        reason = m.get("reasoning_content")
        t.report("a template that opens <think>: the output is reasoning_content, not content",
                 None if st == 200 and isinstance(reason, str) and reason and m.get("content") == "" else
                 "HTTP %d %r" % (st, str(d)[:300]))
        st, evs = stream(srv.port, "/v1/chat/completions", body)
        r = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in evs if e.get("choices"))
        c = "".join(e["choices"][0]["delta"].get("content", "") or "" for e in evs if e.get("choices"))
        t.report("streamed: reasoning_content deltas join into the same reasoning, no content",
                 None if st == 200 and r == reason and c == "" else "HTTP %d %r / %r vs %r" % (st, r[:80], c[:80],
                                                                                         (reason or "")[:80]))
        st, d = post(srv.port, "/v1/responses", {"input": "def add(a, b):", "max_output_tokens": 24,
                                                  "temperature": 0})
        out = d.get("output", []) if st == 200 else []
        t.report("the Responses API: a reasoning item with the same text",
                 None if out and out[0]["type"] == "reasoning" and
                 out[0]["content"][0]["text"] == reason else "HTTP %d %r" % (st, str(d)[:300]))
        st, d = post(srv.port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "a forbidden word"}]})
        e = d.get("error", {}) if isinstance(d, dict) else {}
        t.report("raise_exception: a 400 with its message and the template's line",
                 None if st == 400 and "no forbidden words, please" in e.get("message", "") and
                 "line 2" in e.get("message", "") else "HTTP %d %r" % (st, str(d)[:300]))
        st, d = post(srv.port, "/apply-template", {"messages": body["messages"],
                                                   "chat_template_kwargs": {"greeting": "hello"}})
        p = d.get("prompt", "") if st == 200 else ""
        t.report("chat_template_kwargs reach the template (and strftime_now runs)",
                 None if "<|im_start|>system\nhello (20" in p else "HTTP %d %r" % (st, str(d)[:300]))
    finally:
        rc = srv.stop()
        t.report("thinking server exits cleanly, no sanitizer report",
                 None if rc == 0 and not SAN_RE.search(srv.text()) else "exit %s: %s" % (rc, srv.text()[-400:]))

    bad = os.path.join(tmp, "bad.jinja")
    open(bad, "w").write("{% for m in messages %}\n{{ m.content }")
    for label, arg, want in (("a template that does not compile", bad, "line 2"),
                             ("a missing file", os.path.join(tmp, "none.jinja"), "none.jinja"),
                             ("an unknown name", "wizard", "neither")):
        p = subprocess.run([a.bin, "serve", "--port", "0", "-t", "1", "-m", a.model, "--chat-template", arg],
                           capture_output=True, timeout=60)
        err = p.stderr.decode("utf-8", "replace")
        t.report("--chat-template with %s: serve refuses to start, saying why" % label,
                 None if p.returncode != 0 and want in err and not SAN_RE.search(err) else
                 "exit %d: %s" % (p.returncode, err[-300:]))
    shutil.rmtree(tmp, ignore_errors=True)
    return t.result()


if __name__ == "__main__":
    sys.exit(main())
