"""harness.py: what the Python test drivers share (tests/server/bad_inputs.py,
fields.py, isolation.py, faults.py, tests/soak/soak.py): a `specula serve` child on a free
loopback port, HTTP requests, /metrics, and the ok / FAIL / RESULT lines
tests/run.sh sums. Standard library only."""
import http.client
import os
import re
import subprocess
import threading
import time

# waits are as much longer under a sanitizer as tests/run.sh's limits are
SCALE = float(os.environ.get("SPECULA_TIMEOUT_SCALE") or 1)
SAN_RE = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|WARNING: ThreadSanitizer")


def asan_quarantine_mb(binary, cap=16):
    """0 for a build without AddressSanitizer. ASan keeps freed memory in a
    quarantine (256 MB by default) to catch use after free, so an ASan
    process's RSS grows with what it has freed, not with what it holds: for
    an ASan BINARY this caps the quarantine of the processes started from now
    on (ASAN_OPTIONS, unless it sets a size already) and returns the cap in
    MB, which a bound on RSS growth then allows for. LeakSanitizer checks
    leaks at exit there, more precisely than any RSS bound."""
    with open(binary, "rb") as f:
        if b"__asan_init" not in f.read():
            return 0
    opts = os.environ.get("ASAN_OPTIONS", "")
    m = re.search(r"quarantine_size_mb=(\d+)", opts)
    if m:
        return int(m.group(1))
    os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "quarantine_size_mb=%d" % cap
    return cap


class Tally:
    """One "ok   NAME" or "FAIL NAME: why" line per check, then RESULT."""

    def __init__(self):
        self.passed = self.failed = 0

    def report(self, name, err):
        if err:
            self.failed += 1
            print("FAIL %s: %s" % (name, err), flush=True)
        else:
            self.passed += 1
            print("ok   %s" % name, flush=True)

    def result(self):
        """Prints the RESULT line; the exit status for main."""
        print("RESULT %d %d" % (self.passed, self.failed), flush=True)
        return 1 if self.failed else 0


class Server:
    """`BINARY serve --port 0 -t THREADS ARGS`, logging to TMP/NAME.log; the
    constructor returns once /health says 200 (RuntimeError otherwise)."""

    def __init__(self, name, binary, args, tmp, threads=1):
        self.name, self.log = name, os.path.join(tmp, name + ".log")
        self.f = open(self.log, "wb")
        self.p = subprocess.Popen([binary, "serve", "--port", "0", "-t", str(threads)] + args,
                                  stdout=self.f, stderr=subprocess.STDOUT)
        self.port, self.headers = None, {}
        deadline = time.monotonic() + 60 * SCALE
        while time.monotonic() < deadline and self.port is None:
            m = re.search(rb"http://127\.0\.0\.1:(\d+)", open(self.log, "rb").read())
            if m:
                self.port = int(m.group(1))
            elif self.p.poll() is not None:
                break
            else:
                time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("server %s did not start: %s" % (name, self.text()))
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server %s is not healthy: %s" % (name, self.text()))

    def text(self):
        return open(self.log, "rb").read().decode("utf-8", "replace")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.f.close()
        return self.p.returncode

    def kill(self):
        """At the end of a driver, whatever happened: a server still running is
        killed (no drain) and reaped."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def request(port, method, path, body=None, headers=None, timeout=60, chunked=False):
    """(status, headers dict (lower-case), body bytes)"""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        if chunked:
            c.request(method, path, (body[i:i + 65536] for i in range(0, len(body), 65536)),
                      headers or {}, encode_chunked=True)
        else:
            c.request(method, path, body, headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def metrics(port, headers=None):
    st, _, body = request(port, "GET", "/metrics", headers=headers, timeout=30)
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return st, out


def wait_idle(port, headers=None, limit=30):
    deadline = time.monotonic() + limit * SCALE
    while time.monotonic() < deadline:
        st, m = metrics(port, headers)
        if st == 200 and m.get("specula_requests_active") == 0:
            return True
        time.sleep(0.05)
    return False


def broken_json_baseline(port, path, body, n=1, headers=None, method="POST"):
    """Seconds the server takes, now, to refuse `body` with its last byte
    broken (a 400 invalid_json found only after the whole body is received
    and parsed), sent n times at once: the transfer and parsing of that much
    JSON under whatever load the machine has at this moment. A time bound on
    a big request is then judged on the work beyond this baseline, measured
    in the same run, so a busy machine slows both sides and the bound keeps
    its meaning. None if any of them is not a 400."""
    body = body.rstrip()
    assert body.endswith(b"}")
    broken = body[:-1] + b"]"
    hdrs = dict(headers or {}, **{"Content-Type": "application/json"})
    res = []
    def one():
        try:
            res.append(request(port, method, path, broken, hdrs, timeout=60)[0])
        except Exception:
            res.append(0)
    t0 = time.monotonic()
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts: t.start()
    for t in ts: t.join(90)
    dt = time.monotonic() - t0
    return dt if res == [400] * n else None
