#!/usr/bin/env python3
"""faults.py: `specula serve` under faults.

- the model file missing or unreadable at start: a message and exit 1..127;
- a KV budget (--kv-mem) too small for one request: refused with a message
  at start, promptly (not a hang); a pool of exactly one context serves 4
  concurrent requests that each need most of it (queued or preempted, never
  stuck) with the same greedy output as one at a time;
- SIGTERM with streams in flight: new connections are refused, the streams
  finish (within --drain-timeout) or end with a final chunk (finish_reason
  "cancelled") and [DONE], a plain request gets its answer or a 503, and
  the server exits 0 within a bound;
- a client that reads its stream slowly (SO_RCVBUF 4096, reading nothing
  for seconds) does not stall other clients, and gets its whole stream
  when it reads.

Every wait is bounded; timing assertions use wide margins. Prints
"ok"/"FAIL" lines and "RESULT <passed> <failed>". Standard library only.
"""
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SAN_RE, Server, Tally, metrics, request  # noqa: E402

BIN = os.environ.get("SPECULA_BIN", "bin/specula")
MODEL = os.environ.get("SPECULA_MODEL")
MARGS = ["-m", MODEL] if MODEL else []
TALLY = Tally()
report = TALLY.report


def run(args, timeout=60):
    """(exit status or None on timeout, output)"""
    try:
        p = subprocess.run([BIN] + args, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return None, ((e.stdout or b"") + (e.stderr or b"")).decode("utf-8", "replace")


def refused(name, args, want, timeout=60):
    """The command exits 1..127 within timeout with `want` in its output."""
    t0 = time.monotonic()
    rc, out = run(args, timeout)
    dt = time.monotonic() - t0
    if rc is None:
        return report(name, "no exit within %d s (a hang): %s" % (timeout, out[-300:]))
    err = None
    if SAN_RE.search(out):
        err = "sanitizer report: " + out[-1000:]
    elif rc == 0 or rc < 0 or rc >= 128:
        err = "exit status %d: %s" % (rc, out[-300:])
    elif want.lower() not in out.lower():
        err = "message lacks %r: %s" % (want, out.strip()[-300:])
    report("%s (exit %s in %.1f s)" % (name, rc, dt), err)
    return out


def open_stream(port, body, rcvbuf=None, timeout=120):
    """A raw socket with a streaming request sent."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def read_all(s, limit=120):
    buf = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        buf += chunk
        if buf.endswith(b"0\r\n\r\n") and b"data: [DONE]" in buf:
            break
    s.close()
    return buf


def sse_summary(raw):
    """(status, events, done, finish_reason, n_text_chunks) of a raw HTTP
    response holding an SSE stream (chunked encoding)."""
    m = re.match(rb"HTTP/1\.1 (\d{3})", raw)
    status = int(m.group(1)) if m else 0
    head, _, body = raw.partition(b"\r\n\r\n")
    # undo the chunked transfer encoding
    data, rest = b"", body
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        try:
            n = int(size.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        data, rest = data + rest[:n], rest[n + 2:]
    events = [e for e in data.decode("utf-8", "replace").split("\n\n") if e]
    finish, chunks, done = None, 0, False
    for e in events:
        if e == "data: [DONE]":
            done = True
            continue
        if not e.startswith("data: "):
            continue
        d = json.loads(e[6:])
        for c in d.get("choices", []):
            chunks += 1
            finish = c.get("finish_reason") or finish
    return status, events, done, finish, chunks


# ---- 1. the model file missing or unreadable ------------------------------

def model_faults(tmp):
    missing = os.path.join(tmp, "no-such-model.gguf")
    refused("serve: model file missing", ["serve", "--port", "0", "-m", missing], "No such file")
    refused("run: model file missing", ["run", "-m", missing, "-p", "x", "-n", "1"], "No such file")
    unreadable = os.path.join(tmp, "unreadable.gguf")
    shutil.copy(MODEL or "models/specula-code-draft-f16.gguf", unreadable)
    os.chmod(unreadable, 0)
    try:
        open(unreadable, "rb").close()
        can_read = True
    except PermissionError:
        can_read = False
    if can_read:
        print("     (running as root: chmod 000 does not stop reads; a directory named like a model "
              "stands in for the unreadable file)", flush=True)
        unreadable = os.path.join(tmp, "dir-model.gguf")
        os.mkdir(unreadable)
        refused("serve: model path unreadable (a directory)", ["serve", "--port", "0", "-m", unreadable],
                "not a regular file")
    else:
        refused("serve: model file unreadable (mode 000)", ["serve", "--port", "0", "-m", unreadable],
                "Permission denied")


# ---- 2. a KV budget too small ----------------------------------------------

def kv_faults(tmp):
    out = refused("serve: --kv-mem 64K, too small for one request: refused at start",
                  ["serve", "--port", "0", "-c", "512", "--kv-mem", "64K"] + MARGS, "--kv-mem", timeout=60)
    m = re.search(r"blocks of (\d+) bytes; one context of \d+ positions needs (\d+)", out or "")
    if not m:
        return report("a pool of one context", "cannot read the block size from: %s" % (out or "")[-300:])
    kv = int(m.group(1)) * int(m.group(2))
    srv = Server("onectx", BIN, ["-c", "512", "--max-seqs", "4", "--kv-mem", str(kv)] + MARGS, tmp)
    try:
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
        prompts = [" ".join(words[(i + k) % len(words)] for k in range(100)) + " %d:" % i for i in range(4)]
        def gen(p):
            st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(
                {"prompt": p, "max_tokens": 120, "temperature": 0}).encode(), timeout=120)
            d = json.loads(b)
            return st, d
        res = [None] * 4
        def worker(i):
            try:
                res[i] = gen(prompts[i])
            except Exception as e:
                res[i] = (0, {"error": repr(e)})
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        t0 = time.monotonic()
        for t in ts: t.start()
        for t in ts: t.join(150)
        dt = time.monotonic() - t0
        err = None
        if any(r is None or r[0] != 200 for r in res):
            err = "answers: %r" % [(r[0], str(r[1])[:150]) if r else None for r in res]
        else:
            alone = [gen(p)[1]["choices"][0]["text"] for p in prompts]
            conc = [r[1]["choices"][0]["text"] for r in res]
            if alone != conc:
                err = "concurrent output differs from one at a time"
        st, mt = metrics(srv.port)
        report("a pool of exactly one context (%d bytes): 4 concurrent requests that each need most "
               "of it all complete (%.1f s, %d preemptions), same output as alone"
               % (kv, dt, mt.get("specula_preemptions_total", 0)), err)
    finally:
        rc = srv.stop()
        if rc != 0 or SAN_RE.search(srv.text()):
            report("one-context server exits cleanly", "exit %s: %s" % (rc, srv.text()[-800:]))


# ---- 3. SIGTERM drains ---------------------------------------------------------

def wait_active(port, n, limit=30):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if metrics(port)[1].get("specula_requests_active", 0) >= n:
            return True
        time.sleep(0.02)
    return False


def sigterm_case(tmp, name, drain, max_tokens, want_finish, plain_want, bound):
    srv = Server(name, BIN, ["-c", "512", "--max-seqs", "4", "--drain-timeout", str(drain)] + MARGS, tmp)
    socks = [open_stream(srv.port, {"prompt": "def main():%d" % i, "max_tokens": max_tokens,
                                    "temperature": 0, "stream": True}) for i in range(3)]
    plain = {}
    def do_plain():
        try:
            st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(
                {"prompt": "import os", "max_tokens": max_tokens, "temperature": 0}).encode(), timeout=120)
            plain["r"] = (st, json.loads(b))
        except Exception as e:
            plain["r"] = (0, repr(e))
    pt = threading.Thread(target=do_plain)
    pt.start()
    results = [None] * 3
    def reader(i):
        results[i] = read_all(socks[i])
    rts = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    for t in rts: t.start()
    err = None
    if not wait_active(srv.port, 4):
        err = "the 4 requests never ran together"
    t0 = time.monotonic()
    srv.p.send_signal(signal.SIGTERM)
    # once the server says it is stopping, new connections are refused
    deadline = time.monotonic() + 10
    while "stopping" not in srv.text() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        c = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        got = c.recv(100)
        c.close()
        new_conn = "answered %r" % got[:40] if got and not got.startswith(b"HTTP/1.1 503") else None
    except OSError:
        new_conn = None  # refused
    try:
        rc = srv.p.wait(bound)
    except subprocess.TimeoutExpired:
        rc = None
    dt = time.monotonic() - t0
    for t in rts: t.join(30)
    pt.join(30)
    srv.stop()
    if rc is None:
        err = "still running %d s after SIGTERM" % bound
    elif rc != 0:
        err = "exit status %d" % rc
    elif new_conn:
        err = "a new connection after SIGTERM was " + new_conn
    if not err:
        for i, raw in enumerate(results):
            st, ev, done, fin, n = sse_summary(raw or b"")
            if st != 200 or not done or fin not in want_finish:
                err = "stream %d: status %d, [DONE] %s, finish_reason %s, last events %r" % (
                    i, st, done, fin, ev[-2:])
                break
    if not err:
        st, d = plain.get("r", (0, "no answer"))
        if st not in plain_want:
            err = "the plain request got %s: %s" % (st, str(d)[:200])
    if not err and SAN_RE.search(srv.text()):
        err = "sanitizer report: " + srv.text()[-1000:]
    report("SIGTERM (--drain-timeout %d) with 3 streams + 1 plain request in flight: exit 0 in %.1f s "
           "(bound %d), new connections refused, streams end with %s and [DONE], plain %s"
           % (drain, dt, bound, "/".join(want_finish), "/".join(map(str, plain_want))), err)


# ---- 4. a slow reader --------------------------------------------------------------

def slow_reader(tmp):
    srv = Server("slow", BIN, ["-c", "512", "--max-seqs", "4"] + MARGS, tmp)
    try:
        body = json.dumps({"prompt": "def handler(event):", "max_tokens": 8, "temperature": 0}).encode()
        def timed():
            t = time.monotonic()
            st, _, b = request(srv.port, "POST", "/v1/completions", body, timeout=60)
            return st, time.monotonic() - t
        base = [timed() for _ in range(8)]
        # the slow client: tiny receive buffer, many bytes per token (logprobs), reads nothing
        slow = open_stream(srv.port, {"prompt": "class Parser:", "max_tokens": 300, "temperature": 0,
                                      "stream": True, "logprobs": 20}, rcvbuf=4096)
        during, t_end = [], time.monotonic() + 6
        while time.monotonic() < t_end or len(during) < 8:
            during.append(timed())
            if len(during) > 100:
                break
        # the slow client's request finishes in the engine although it reads nothing
        deadline, finished = time.monotonic() + 60, False
        while time.monotonic() < deadline:
            if metrics(srv.port)[1].get("specula_requests_active", 1) == 0:
                finished = True
                break
            time.sleep(0.05)
        raw = read_all(slow)
        st, ev, done, fin, n = sse_summary(raw)
        mb, md = statistics.median(t for _, t in base), statistics.median(t for _, t in during)
        err = None
        if any(s != 200 for s, _ in base + during):
            err = "some requests failed: %r" % [s for s, _ in during if s != 200][:5]
        elif md > 4 * mb + 1.0 or max(t for _, t in during) > 20:
            err = "median latency %.3f s while the slow client held its stream (%.3f s before); max %.3f s" % (
                md, mb, max(t for _, t in during))
        elif not finished:
            err = "the slow client's request did not finish in the engine while it read nothing"
        elif st != 200 or not done or fin not in ("length", "stop"):
            err = "the slow client's stream: status %d, [DONE] %s, finish %s" % (st, done, fin)
        report("a client reading nothing (SO_RCVBUF 4096) for its %d KB stream: %d other requests "
               "meanwhile, median %.0f ms (%.0f ms before); it then reads the whole stream"
               % (len(raw) // 1024, len(during), md * 1e3, mb * 1e3), err)
    finally:
        rc = srv.stop()
        if rc != 0 or SAN_RE.search(srv.text()):
            report("slow-reader server exits cleanly", "exit %s: %s" % (rc, srv.text()[-800:]))


def main():
    tmp = tempfile.mkdtemp(prefix="specula-faults-")
    try:
        for f in (lambda: model_faults(tmp), lambda: kv_faults(tmp),
                  lambda: sigterm_case(tmp, "drain", 60, 200, ("length", "stop"), (200,), 90),
                  lambda: sigterm_case(tmp, "cancel", 1, 480, ("cancelled",), (503,), 20),
                  lambda: slow_reader(tmp)):
            t0 = time.monotonic()
            try:
                f()
            except Exception as e:
                report("driver", "%r" % e)
            print("     (%.1f s)" % (time.monotonic() - t0), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TALLY.result()


if __name__ == "__main__":
    sys.exit(main())
