#!/usr/bin/env python3
"""soak.py: `specula serve` under a bounded mixed load, then an audit.

For --seconds (or --minutes), --clients threads send /v1/completions
requests over loopback, each one drawn at random: prompt length (short,
long, or a shared document plus a distinct question), cache salt (none or
one of three tenants), speculative method (off, ngram, suffix, draft),
sampling (greedy, or temperature with a seed), streaming or not, and
max_tokens. A tenth of the streams are abandoned mid-way (the client closes
the socket: the server must cancel them). The server runs with a KV pool of
a few contexts for 8 sequences, so eviction and preemption happen all the
time.

Afterwards it checks, and exits 1 on any failure:
  - the server never died and answered every request with 200 (or 429/503
    with Retry-After when full);
  - every response is well formed: JSON, SSE chunks ending with [DONE],
    finish_reason stop/length, usage with cached_tokens;
  - greedy outputs equal the same prompt run alone afterwards (spec off,
    no salt, one at a time), for up to --verify distinct prompts;
  - every KV block goes back: in_use 0 and no request active once idle;
  - /metrics reconciles with what the clients saw: finished requests ==
    accepted requests, and the stop/length ones at least the completed ones;
    completion tokens >= the tokens of the completed responses;
  - the server's resident memory grew by less than --rss-growth-mb between
    the end of the first quarter and the end;
  - the server exits 0 on SIGTERM with no sanitizer report in its stderr
    (run it with an ASan build's binary for a leak check).

Standard library only. Loopback only.
"""
import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from harness import SAN_RE, Server, asan_quarantine_mb, metrics, request  # noqa: E402

FAIL = []


def fail(msg):
    FAIL.append(msg)
    print("FAIL " + msg, flush=True)


def load_texts(root):
    """Held-out code to cut prompts from: build/corpus/heldout.txt when it
    exists, else a few standard-library files."""
    p = os.path.join(root, "build/corpus/heldout.txt")
    if os.path.exists(p):
        return open(p, encoding="utf-8", errors="replace").read()
    out = []
    for name in ("textwrap.py", "shlex.py", "fnmatch.py", "glob.py", "bisect.py", "heapq.py"):
        f = os.path.join("/usr/lib/python3.11", name)
        if os.path.exists(f):
            out.append(open(f, encoding="utf-8", errors="replace").read())
    return "\n".join(out) or ("def f(x):\n    return x + 1\n" * 200)


def rss_kb(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def complete(srv, body, abandon_after=None):
    """One request. Returns (status, result dict or None, error text).
    result: text, finish_reason, usage; 'abandoned' when the client closed
    the stream on purpose."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    try:
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            data = r.read().decode("utf-8", "replace")
            if r.status in (429, 503) and r.getheader("Retry-After") is None:
                return r.status, None, "%d without Retry-After" % r.status
            try:
                j = json.loads(data)
                if not isinstance(j.get("error"), dict) or "message" not in j["error"]:
                    return r.status, None, "error without an OpenAI error object: " + data[:200]
            except ValueError:
                return r.status, None, "error body is not JSON: " + data[:200]
            return r.status, {"error": j["error"]["message"]}, None
        if not body.get("stream"):
            j = json.loads(r.read())
            ch = j["choices"][0]
            return 200, {"text": ch["text"], "finish_reason": ch["finish_reason"],
                         "usage": j["usage"]}, None
        text, finish, usage, chunks, done = [], None, None, 0, False
        buf = b""
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line:
                continue
            if not line.startswith(b"data: "):
                return 200, None, "SSE line without 'data: ': %r" % line[:100]
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            chunks += 1
            if j.get("choices"):
                ch = j["choices"][0]
                text.append(ch.get("text", ""))
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
            if j.get("usage"):
                usage = j["usage"]
            if abandon_after is not None and chunks >= abandon_after:
                return 200, {"abandoned": True}, None
        if not done:
            return 200, None, "stream ended without [DONE]"
        return 200, {"text": "".join(text), "finish_reason": finish, "usage": usage}, None
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("SPECULA_BIN", "bin/specula"))
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-requests", type=int, default=100000)
    ap.add_argument("--verify", type=int, default=24, help="greedy prompts re-run alone")
    ap.add_argument("--rss-growth-mb", type=float, default=24.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--kv-mem", default="12M")
    ap.add_argument("--log-dir", default=None, help="where the server's log goes (default: a temp dir)")
    a = ap.parse_args()
    duration = a.seconds if a.seconds is not None else a.minutes * 60
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    texts = load_texts(root)
    rnd = random.Random(a.seed)
    docs = []
    for i in range(4):  # shared documents, ~200-300 tokens each
        o = rnd.randrange(0, max(1, len(texts) - 1200))
        docs.append(texts[o:o + 900])

    def make_prompt(r):
        kind = r.random()
        if kind < 0.4:  # shared document + distinct question
            return r.choice(docs) + "\n# question %d: what does the code above do?\n" % r.randrange(1000)
        o = r.randrange(0, max(1, len(texts) - 1200))
        n = r.choice([20, 80, 300, 600]) if kind < 0.9 else 800
        return texts[o:o + n]

    # an ASan build: its quarantine capped and allowed for (harness.py)
    quarantine = asan_quarantine_mb(a.bin)
    rss_bound = a.rss_growth_mb + quarantine
    tmp = a.log_dir or tempfile.mkdtemp(prefix="specula-soak-")
    args = ["-c", "512", "--max-seqs", "8", "--kv-mem", a.kv_mem, "--max-queue", "64"]
    draft = os.path.join(root, "models/specula-code-draft-f16.gguf")
    if os.path.exists(draft):  # requests may ask for any method
        args += ["--draft", draft, "--spec", "off"]  # loaded, not the default (--draft alone turns it on)
    try:
        srv = Server("soak", a.bin, args, tmp, threads=a.threads)
    except RuntimeError as e:
        raise SystemExit(str(e))
    log = srv.log
    model = json.loads(request(srv.port, "GET", "/v1/models")[2])["data"][0]["id"]
    print("soak: server on port %d, %s for %.0f s with %d clients (log %s)" %
          (srv.port, a.bin, duration, a.clients, log), flush=True)

    lock = threading.Lock()
    stats = {"sent": 0, "ok": 0, "rejected": 0, "abandoned": 0, "errors": 0, "tokens": 0}
    greedy = {}  # (prompt, max_tokens) -> text
    t_end = time.time() + duration
    rss = []

    def sampler():
        t_q = time.time() + duration / 4
        while time.time() < t_end:
            v = rss_kb(srv.p.pid)
            if v:
                rss.append((time.time(), v, time.time() >= t_q))
            time.sleep(1.0)

    def client(cid):
        r = random.Random(a.seed * 1000 + cid)
        while time.time() < t_end:
            with lock:
                if stats["sent"] >= a.max_requests:
                    return
                stats["sent"] += 1
            prompt = make_prompt(r)
            is_greedy = r.random() < 0.6
            body = {"model": model, "prompt": prompt, "max_tokens": r.choice([1, 8, 32, 64]),
                    "stream": r.random() < 0.7}
            if is_greedy:
                body["temperature"] = 0
            else:
                body.update(temperature=r.choice([0.7, 1.0]), seed=r.randrange(1 << 30),
                            top_p=r.choice([1.0, 0.9]))
            salt = r.choice([None, None, "tenant-a", "tenant-b", "tenant-c"])
            if salt:
                body["cache_salt"] = salt
            method = r.choice(["off", "ngram", "suffix", "draft"] if os.path.exists(draft) else
                              ["off", "ngram", "suffix"])
            body["speculative"] = {"method": method, "k": r.choice([1, 4, 8])}
            if body["stream"]:
                body["stream_options"] = {"include_usage": True}
            abandon = r.randrange(1, 4) if body["stream"] and body["max_tokens"] >= 32 and r.random() < 0.1 else None
            try:
                st, res, err = complete(srv, body, abandon)
            except (OSError, ValueError, http.client.HTTPException) as e:
                st, res, err = None, None, "%s: %s" % (type(e).__name__, e)
            with lock:
                if err:
                    stats["errors"] += 1
                    fail("client %d: %s" % (cid, err))
                elif st in (429, 503):
                    stats["rejected"] += 1
                elif st != 200:
                    stats["errors"] += 1
                    fail("client %d: HTTP %s for a valid request: %s" % (cid, st, res and res.get("error")))
                elif res.get("abandoned"):
                    stats["abandoned"] += 1
                else:
                    stats["ok"] += 1
                    u = res["usage"]
                    if not u or "prompt_tokens_details" not in u or \
                            "cached_tokens" not in u["prompt_tokens_details"]:
                        fail("usage without prompt_tokens_details.cached_tokens: %r" % (u,))
                        continue
                    if res["finish_reason"] not in ("stop", "length"):
                        fail("finish_reason %r" % res["finish_reason"])
                    stats["tokens"] += u["completion_tokens"]
                    if is_greedy and len(greedy) < 4 * a.verify:
                        key = (prompt, body["max_tokens"])
                        if key in greedy and greedy[key] != res["text"]:
                            fail("greedy output differs between two soak runs of one prompt")
                        greedy[key] = res["text"]

    th = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    ts = threading.Thread(target=sampler)
    ts.start()
    for t in th:
        t.start()
    for t in th:
        t.join()
    ts.join()
    print("soak: %(sent)d sent, %(ok)d completed, %(abandoned)d abandoned, %(rejected)d rejected, "
          "%(errors)d errors, %(tokens)d tokens" % stats, flush=True)
    if srv.p.poll() is not None:
        fail("server died (exit %s)" % srv.p.returncode)
        print(srv.text()[-3000:])
        return 1

    # idle: every request finished, every block back
    deadline = time.time() + 30
    while True:
        m = metrics(srv.port)[1]
        active = m.get("specula_requests_active", -1)
        in_use = m.get('specula_kv_blocks{state="in_use"}', -1)
        if (active == 0 and in_use == 0) or time.time() > deadline:
            break
        time.sleep(0.2)
    if active != 0 or in_use != 0:
        fail("not idle 30 s after the load: %s requests active, %s KV blocks in use" % (active, in_use))
    fin = {k: v for k, v in m.items() if k.startswith("specula_requests_finished_total")}
    n_fin = sum(fin.values())
    n_normal = sum(v for k, v in fin.items() if 'reason="stop"' in k or 'reason="length"' in k)
    accepted = stats["ok"] + stats["abandoned"]
    if n_fin != accepted:
        fail("/metrics finished %d requests, the clients had %d accepted" % (n_fin, accepted))
    if n_normal < stats["ok"]:
        fail("/metrics: %d stop/length finishes < %d completed responses" % (n_normal, stats["ok"]))
    if m.get("specula_completion_tokens_total", 0) < stats["tokens"]:
        fail("/metrics completion tokens %d < %d seen by clients" %
             (m.get("specula_completion_tokens_total", 0), stats["tokens"]))
    print("soak: metrics %s; preemptions %d, evictions %d, spec drafts %d" % (
        json.dumps({k.split("{")[1][:-1] if "{" in k else k: v for k, v in fin.items()}),
        m.get("specula_preemptions_total", 0), m.get('specula_kv_evictions_total{cause="pressure"}', 0),
        m.get("specula_spec_drafts_total", 0)), flush=True)

    # greedy outputs against the same prompts run alone
    checked = 0
    for (prompt, mt), text in list(greedy.items())[:a.verify]:
        st, res, err = complete(srv, {"model": model, "prompt": prompt, "max_tokens": mt,
                                      "temperature": 0, "speculative": {"method": "off"}})
        if st != 200 or err or res["text"] != text:
            fail("greedy output under load differs from the prompt run alone (max_tokens %d)" % mt)
        checked += 1
    print("soak: %d greedy outputs equal the prompt run alone" % checked, flush=True)

    late = [v for (_, v, q) in rss if q]
    if late:
        growth = (late[-1] - late[0]) / 1024.0
        print("soak: RSS %.1f MB after the first quarter, %.1f MB at the end (%+.1f MB)" %
              (late[0] / 1024.0, late[-1] / 1024.0, growth), flush=True)
        if growth > rss_bound:
            fail("RSS grew by %.1f MB (bound %.1f%s)" %
                 (growth, rss_bound, ", ASan's quarantine included" if quarantine else ""))

    rc = srv.stop()  # SIGTERM, killed after 30 s
    out = srv.text()
    if rc != 0:
        fail("server exit status %s after SIGTERM (-9: killed after 30 s)" % rc)
    if SAN_RE.search(out):
        fail("sanitizer report in the server's output:\n" + out[-4000:])
    if stats["ok"] == 0:
        fail("no request completed")
    print("soak: %s" % ("FAILED (%d)" % len(FAIL) if FAIL else "passed"), flush=True)
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
