#!/usr/bin/env python3
"""Hostile-input benchmark for `specula serve`: grammars, schemas and logit_bias.

Starts the server on a free loopback port with two tenants (API keys
"victim" and "attacker"), measures the victim's quiet latency (a 4-token
completion and /health), then lets the attacker send, from several threads,
the worst inputs of each class while the victim keeps measuring. Prints a
table and writes everything to --json. Python 3 standard library only.

    python3 bench/security/grammar_attack.py --bin bin/specula [--seconds 30] [--json out.json]

See bench/security/README.md for how to read the output.
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

VICTIM_KEY = "victim-key-7f3a"
ATTACKER_KEY = "attacker-key-c9d1"
VICTIM_BODY = json.dumps({"prompt": "def add(a, b):", "max_tokens": 4,
                          "temperature": 0}).encode()
CHAT_MESSAGES = [{"role": "user", "content": "Answer."}]

# ----------------------------------------------------------------------------
# HTTP


class Result:
    __slots__ = ("t0", "elapsed", "status", "error", "body")

    def __init__(self, t0, elapsed, status, error, body=b""):
        self.t0, self.elapsed, self.status, self.error, self.body = t0, elapsed, status, error, body


def _err_message(status, data):
    """The first 120 characters of an OpenAI error object's message (or the body)."""
    if status is not None and 200 <= status < 300:
        return ""
    try:
        o = json.loads(data)
        if isinstance(o, dict) and isinstance(o.get("error"), dict):
            return str(o["error"].get("message", ""))[:120]
    except (ValueError, UnicodeDecodeError):
        pass
    return data[:120].decode("utf-8", "replace")


def http_call(port, method, path, body=None, key=None, timeout=60.0):
    """One request on a fresh connection; the time is from connect to the last byte."""
    t0 = time.monotonic()
    conn = None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=max(0.5, timeout))
        headers = {"Connection": "close"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if key:
            headers["Authorization"] = "Bearer " + key
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        el = time.monotonic() - t0
        return Result(t0, el, r.status, _err_message(r.status, data), data)
    except socket.timeout:
        return Result(t0, time.monotonic() - t0, None, "timeout after %.1f s" % timeout)
    except (OSError, http.client.HTTPException) as e:
        return Result(t0, time.monotonic() - t0, None,
                      ("%s: %s" % (type(e).__name__, e))[:120])
    finally:
        if conn is not None:
            conn.close()


# ----------------------------------------------------------------------------
# The server


class Server:
    """`specula serve` on a free loopback port; killed by stop() (always called)."""

    def __init__(self, binary, chat_template, extra, log_dir, tag, rss_limit_kb=0):
        self.binary = binary
        self.log_path = os.path.join(log_dir, "serve-%s.log" % tag)
        args = [binary, "serve", "--host", "127.0.0.1", "--port", "0",
                "--api-key", VICTIM_KEY, "--api-key", ATTACKER_KEY]
        if chat_template and chat_template != "none":
            args += ["--chat-template", chat_template]
        args += extra
        self.args = args
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.port = None
        self.lock = threading.Lock()
        self.rss_peak_kb = 0
        self.hwm_kb = 0
        self.exit = None
        self.died_at = None
        self.rss_limit_kb = rss_limit_kb
        self.killed_at_rss_kb = 0
        self._stop_rss = threading.Event()
        self._rss_thread = threading.Thread(target=self._poll_rss, daemon=True)
        self._rss_thread.start()

    def _poll_rss(self):
        path = "/proc/%d/status" % self.proc.pid
        while not self._stop_rss.is_set():
            try:
                with open(path) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss = int(line.split()[1])
                            self.rss_peak_kb = max(self.rss_peak_kb, rss)
                            if self.rss_limit_kb and rss > self.rss_limit_kb \
                                    and not self.killed_at_rss_kb:
                                self.killed_at_rss_kb = rss  # protect the machine
                                self.proc.kill()
                        elif line.startswith("VmHWM:"):
                            self.hwm_kb = max(self.hwm_kb, int(line.split()[1]))
            except (OSError, ValueError, IndexError):
                pass
            if not self.alive():
                break
            self._stop_rss.wait(0.1)

    def alive(self):
        with self.lock:
            if self.exit is None:
                rc = self.proc.poll()
                if rc is not None:
                    self.exit = rc
                    self.died_at = time.monotonic()
            return self.exit is None

    def exit_desc(self):
        if self.exit is None:
            return "alive"
        if self.killed_at_rss_kb:
            return "killed by this benchmark at %.0f MB RSS (--rss-limit-mb)" % (
                self.killed_at_rss_kb / 1024)
        if self.exit < 0:
            try:
                return "killed by signal %d (%s)" % (-self.exit, signal.Signals(-self.exit).name)
            except ValueError:
                return "killed by signal %d" % -self.exit
        return "exited with status %d" % self.exit

    def log_tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []
        return [l for l in lines if "request id=" not in l][-n:]

    def wait_ready(self, timeout=180.0):
        deadline = time.monotonic() + timeout
        pat = re.compile(r"listening on http://[^:\s]+:(\d+)")
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError("specula serve exited (%s) before listening:\n%s"
                                   % (self.exit_desc(), "\n".join(self.log_tail())))
            if self.port is None:
                try:
                    with open(self.log_path, "rb") as f:
                        m = pat.search(f.read().decode("utf-8", "replace"))
                    if m:
                        self.port = int(m.group(1))
                except OSError:
                    pass
            if self.port is not None:
                r = http_call(self.port, "GET", "/health", timeout=5)
                if r.status == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("specula serve did not answer /health within %.0f s" % timeout)

    def stop(self):
        self.alive()  # records a death that happened before the kill
        was_alive = self.exit is None
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._stop_rss.set()
        self._rss_thread.join(timeout=2)
        self.log.close()
        return was_alive


# ----------------------------------------------------------------------------
# Attack inputs


def cmpl(grammar=None, extra=None):
    o = {"prompt": "x", "max_tokens": 6, "temperature": 0}
    if grammar is not None:
        o["grammar"] = grammar
    if extra:
        o.update(extra)
    return o


def chat(extra):
    o = {"messages": CHAT_MESSAGES, "max_tokens": 6, "temperature": 0}
    o.update(extra)
    return o


def json_schema_rf(schema):
    return {"response_format": {"type": "json_schema",
                                "json_schema": {"name": "a", "strict": True, "schema": schema}}}


def string_schema(pattern):
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}},
            "required": ["s"]}


def tools_req(schema):
    return {"tools": [{"type": "function", "function": {"name": "f", "description": "f",
                                                        "parameters": schema}}],
            "tool_choice": "required",
            "max_tokens": 48}  # the call's markup comes first (forced), then the arguments


# -- nested nullable repetitions: the matcher's expansion recurses once per
#    empty step, a million deep here


NESTED_GBNF = [
    ("review", 'root ::= (("a"?){0,1000}){0,1000}'),
    ("three-deep", 'root ::= ((("a"?){0,100}){0,100}){0,100}'),
    ("star-inside", 'root ::= (("a"*){0,1000}){0,1000}'),
    ("named-rules", 'root ::= x{0,1000}\nx ::= y{0,1000}\ny ::= "a"?'),
    ("two-nullables", 'root ::= (("a"? "b"?){0,1000}){0,1000}'),
]
NESTED_PATTERN = [
    ("review", "^((a?){0,1000}){0,1000}$"),
    ("three-deep", "^(((a?){0,100}){0,100}){0,100}$"),
    ("unanchored", "((a?){0,1000}){0,1000}"),
]


def nested_payloads():
    out = []
    for name, g in NESTED_GBNF:
        out.append(("gbnf " + name, "/v1/completions", cmpl(g)))
    out.append(("chat gbnf review", "/v1/chat/completions", chat({"grammar": NESTED_GBNF[0][1]})))
    for name, p in NESTED_PATTERN:
        out.append(("schema pattern " + name, "/v1/completions",
                    cmpl(extra=json_schema_rf(string_schema(p)))))
    out.append(("chat schema pattern", "/v1/chat/completions",
                chat(json_schema_rf(string_schema(NESTED_PATTERN[0][1])))))
    out.append(("chat tools pattern", "/v1/chat/completions",
                chat(tools_req(string_schema(NESTED_PATTERN[0][1])))))
    return out


# -- large ambiguous GBNF (~7 KB): a state is a set of stacks; make every
#    step fan out over many empty paths (capped expansion), many stacks
#    survive, and the stacks remember the bytes read, so no two nodes of the
#    token trie share a state (the per-state memo never hits)

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def words(rng, n, shared=("a", "ab", "abc", "ba", "de", "in", "re", "st", "th")):
    out = []
    for _ in range(n):
        w = rng.choice(shared) + "".join(rng.choice(LETTERS) for _ in range(rng.randint(0, 4)))
        out.append(w)
    return out


def gbnf_review_shape(seed=1, n_words=150):
    """root ::= x{0,50}, x ::= "a" | "a" "a" | [a-z]* | words sharing prefixes.
    (Past ~160 words the first state has more stacks than the matcher takes
    and the request is refused at once, so this one stays small.)"""
    rng = random.Random(seed)
    return ('root ::= x{0,50}\nx ::= "a" | "a" "a" | [a-z]* | '
            + " | ".join('"%s"' % w for w in words(rng, n_words)) + "\n")


def gbnf_palindrome(target=7000, seed=2, k=8, unique=""):
    """Stacks that remember every byte read (s ::= "a" e s "a" | "b" e s "b" |
    ...: no two token-trie nodes share a state, so the per-state memo never
    hits), and before every byte a chain of k levels of three nullable
    alternatives (3^k empty paths times the ~70 alternatives of s: each step
    runs into the matcher's expansion cap). The first byte is a literal so
    the first state is small (a first state over the caps is refused at
    once); words sharing prefixes fill the rest."""
    rng = random.Random(seed)
    chars = LETTERS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _(),.:=+-*/"
    alts = ["%s e s %s" % (json.dumps(c), json.dumps(c)) for c in chars]
    g = ['root ::= "a" s' + (" # " + unique if unique else ""),
         "s ::= " + " | ".join(alts) + " | e | w s",
         "e ::= f{0,%d}" % k,
         'f ::= "a"? | [a-z]? | [ -~]?']
    text = "\n".join(g) + "\n"
    wl = []
    while len(text) + sum(len(x) + 8 for x in wl) < target:
        wl.append(words(rng, 1)[0])
    text += "w ::= " + " | ".join('"%s" e' % x for x in wl) + "\n"
    return text


def ambiguous_payloads():
    pal = gbnf_palindrome()
    rev = gbnf_review_shape()
    return [
        ("gbnf palindrome+empty paths %d B" % len(pal), "/v1/completions", cmpl(pal)),
        ("gbnf x{0,50} words %d B" % len(rev), "/v1/completions", cmpl(rev)),
        ("chat gbnf palindrome+empty paths", "/v1/chat/completions", chat({"grammar": pal})),
    ]


# -- pathological schema patterns (~2.7 KB)


def pattern_chain(target=2700, seed=4, k=8, reps=60, absorb=True):
    """^(?:X T{0,k}){0,reps}$: X is one of ~26 alternatives of different
    lengths plus words sharing prefixes, T three nullable alternatives, so
    between two items there are 3^k empty paths, each expanding X again (the
    matcher's expansion cap is reached on every byte). absorb: T's
    alternatives take any printable character, else only a, b, c."""
    rng = random.Random(seed)
    if absorb:
        alts = ["%s%s" % (c, "." * i if i < 4 else ".{%d}" % i) for i, c in enumerate(LETTERS)]
        tail = "(?:a?|[a-z]?|[ -~]?)"
    else:
        alts = [c + "[a-m]" * (i % 5) for i, c in enumerate(LETTERS)]
        tail = "(?:a?|b?|c?)"
    ws = []

    def build():
        return "^(?:(?:%s)%s{0,%d}){0,%d}$" % ("|".join(alts + ws), tail, k, reps)

    while len(build()) < target:
        ws.append(words(rng, 1)[0])
    return build()


def regex_payloads():
    pa = pattern_chain(absorb=True)
    pb = pattern_chain(absorb=False, k=9)
    pt = pattern_chain(target=1000, absorb=False, k=9)  # fits the context beside the tool prompt
    n16 = {"max_tokens": 16}  # the first tokens are the forced {"s": "
    return [
        ("schema pattern, absorbing chain %d B" % len(pa), "/v1/completions",
         cmpl(extra=dict(json_schema_rf(string_schema(pa)), **n16))),
        ("schema pattern, literal chain %d B" % len(pb), "/v1/completions",
         cmpl(extra=dict(json_schema_rf(string_schema(pb)), **n16))),
        ("chat schema pattern, literal chain", "/v1/chat/completions",
         chat(dict(json_schema_rf(string_schema(pb)), **n16))),
        ("chat tools pattern %d B" % len(pt), "/v1/chat/completions",
         chat(tools_req(string_schema(pt)))),
    ]


# -- huge grammars (~960 KB, under the 1 MiB cap on 'grammar')


def base_names(n, alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"):
    """n distinct short rule names (never 'root')."""
    out = []
    k = len(alphabet)
    for i in range(n):
        s = ""
        x = i
        while True:
            s = alphabet[x % k] + s
            x //= k
            if not x:
                break
        out.append("q" + s)
    return out


def gbnf_huge_chain(target=960_000, nullable=False, bad_end=False):
    """As many rules as fit (the compiler takes 65,536), written without
    spaces, each starting with a reference to the next one: every name is
    looked up among the rules met so far, and the checks walk the chain one
    recursion level per rule. nullable: each rule may also be empty through
    the next one, so nullability spreads back one rule per pass. bad_end:
    the last line refers to an undefined rule (the answer should be a 400)."""
    names = base_names(66000)
    lines = ["root::=%s" % names[0]]
    size = len(lines[0]) + 1
    i = 0
    while size < target - 100 and i < 65000:
        line = ('%s::=%s|"x"' if nullable else '%s::=%s"x"') % (names[i], names[i + 1])
        lines.append(line)
        size += len(line) + 1
        i += 1
    if bad_end:
        lines.append("%s::=undefined-rule-at-the-very-end" % names[i])
    else:
        lines.append(('%s::="x"|' if nullable else '%s::="x"') % names[i])
    return "\n".join(lines) + "\n"


def huge_payloads():
    chain = gbnf_huge_chain()
    nul = gbnf_huge_chain(nullable=True)
    bad = gbnf_huge_chain(bad_end=True)
    return [
        ("gbnf chain %d KB" % (len(chain) // 1000), "/v1/completions", cmpl(chain)),
        ("gbnf nullable chain %d KB" % (len(nul) // 1000), "/v1/completions", cmpl(nul)),
        ("gbnf chain, bad last line %d KB" % (len(bad) // 1000), "/v1/completions", cmpl(bad)),
        ("chat gbnf chain", "/v1/chat/completions", chat({"grammar": chain})),
    ]


# -- ~1 MB logit_bias objects


def lb_padded(target=1_000_000, n_vocab=4096, bad_end=True):
    """Every distinct key that names a valid token ("7", "07", "007", ... up to
    10 digits: about 30,000), the long ones first, then the rest of the
    megabyte as copies of the last (shortest) one, whose first occurrence is
    30,000 entries in: a duplicate check that looks each key up from the
    start does ~3e9 string comparisons. An invalid key last when bad_end."""
    parts = []
    size = 2
    for width in range(10, 0, -1):
        for v in range(n_vocab):
            s = str(v)
            if len(s) > width:
                break
            item = '"%s":1' % s.rjust(width, "0")
            parts.append(item)
            size += len(item) + 1
    item = parts[-1]
    while size + len(item) + 1 < target - 20:
        parts.append(item)
        size += len(item) + 1
    if bad_end:
        parts.append('"x":1')
    return "{" + ",".join(parts) + "}"


def lb_sequence(target=1_000_000):
    """The keys "0", "1", "2", ... as many as fit (past the vocabulary too)."""
    parts = []
    size = 2
    i = 0
    while size < target:
        item = '"%d":1' % i
        parts.append(item)
        size += len(item) + 1
        i += 1
    return "{" + ",".join(parts) + "}"


def raw_body(prefix_obj, lb_text):
    """A JSON body whose logit_bias is the raw text lb_text (keeps duplicate keys)."""
    s = json.dumps(prefix_obj)
    return (s[:-1] + ', "logit_bias": ' + lb_text + "}").encode()


def logit_bias_payloads():
    pad_bad = lb_padded(bad_end=True)
    pad_ok = lb_padded(bad_end=False)
    seq = lb_sequence()
    return [
        ("padded ids, bad last key %d KB" % (len(pad_bad) // 1000), "/v1/completions",
         raw_body(cmpl(), pad_bad)),
        ("padded ids, all valid %d KB" % (len(pad_ok) // 1000), "/v1/completions",
         raw_body(cmpl(), pad_ok)),
        ('"0".."N" %d KB' % (len(seq) // 1000), "/v1/completions", raw_body(cmpl(), seq)),
        ("chat padded ids, bad last key", "/v1/chat/completions", raw_body(chat({}), pad_bad)),
    ]


# -- many concurrent requests with distinct mid-size grammars (memory)


def gbnf_fanout(k=8, levels=5, unique=""):
    """Stacks that multiply: each of the first `levels` bytes (forced "a"s)
    and every byte after them can be read k ways, each pushing a different
    closing byte, so a state soon holds the matcher's cap of stacks and every
    step of the mask walk interns tens of thousands of new stack nodes, kept
    until the request ends."""
    lines = ["root ::= p0" + (" # " + unique if unique else "")]
    for lv in range(levels):
        nxt = "p%d" % (lv + 1) if lv + 1 < levels else "s"
        lines.append("p%d ::= " % lv + " | ".join('"a" %s "%d"' % (nxt, i) for i in range(k)))
    lines.append("s ::= " + " | ".join('[ -~] s "%d"' % i for i in range(k)) + " | [ -~]")
    return "\n".join(lines) + "\n"


def memory_payloads(n=16):
    """n requests at once, each with its own grammar (a comment makes the text,
    and so the compiled grammar and its masks, differ)."""
    return [("gbnf fan-out, copy %d" % i, "/v1/completions", cmpl(gbnf_fanout(unique="copy %d" % i)))
            for i in range(n)]


CLASSES = {
    # name: (payload builder, attacker threads, description)
    "logit_bias": (logit_bias_payloads, 4, "~1 MB logit_bias objects"),
    "huge_grammar": (huge_payloads, 4, "~960 KB grammars"),
    "ambiguous_gbnf": (ambiguous_payloads, 4, "~7 KB ambiguous GBNF"),
    "regex_pattern": (regex_payloads, 4, "~2.7 KB pathological schema patterns"),
    "memory": (memory_payloads, 16, "16 requests at once, each its own fan-out grammar"),
    "nested_nullable": (nested_payloads, 4, "nested nullable repetitions (crash)"),
}
DEFAULT_ORDER = ["logit_bias", "huge_grammar", "ambiguous_gbnf", "regex_pattern", "memory",
                 "nested_nullable"]


def build_payloads(cls, chat_ok):
    out = []
    for name, path, body in CLASSES[cls][0]():
        if path.endswith("chat/completions") and not chat_ok:
            continue
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        out.append({"class": cls, "name": name, "path": path, "body": data})
    return out


# ----------------------------------------------------------------------------
# Measurement


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(samples):
    el = [s["t"] for s in samples]
    errs = [s for s in samples if s["status"] != 200]
    return {"n": len(samples), "errors": len(errs),
            "timeouts_or_conn_errors": sum(1 for s in errs if s["status"] is None),
            "median": pct(el, 50), "p95": pct(el, 95), "max": max(el) if el else None,
            "first_errors": sorted(set(("%s %s" % (s["status"], s["error"])).strip()
                                       for s in errs))[:5]}


def sample(r, t_origin):
    return {"at": round(r.t0 - t_origin, 3), "t": round(r.elapsed, 4), "status": r.status,
            "error": r.error}


class Prober:
    """The victim: a 4-token completion in a loop and /health in a loop, until stopped."""

    def __init__(self, srv, timeout, t_origin, health_interval=0.1, victim_interval=0.05):
        self.srv, self.timeout, self.t_origin = srv, timeout, t_origin
        self.victim, self.health = [], []
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._loop, args=("POST", "/v1/completions", VICTIM_BODY,
                                                      VICTIM_KEY, self.victim, victim_interval),
                             daemon=True),
            threading.Thread(target=self._loop, args=("GET", "/health", None, None, self.health,
                                                      health_interval), daemon=True)]

    def _loop(self, method, path, body, key, out, interval):
        while not self.stop.is_set():
            r = http_call(self.srv.port, method, path, body, key, self.timeout)
            out.append(sample(r, self.t_origin))
            if r.status is None and not self.srv.alive():
                break
            self.stop.wait(interval)

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self, wait=True):
        self.stop.set()
        if wait:
            for t in self.threads:
                t.join()


def quiet_baseline(srv, n, timeout, t_origin):
    for _ in range(3):  # warm-up, not counted
        http_call(srv.port, "POST", "/v1/completions", VICTIM_BODY, VICTIM_KEY, timeout)
    victim, health = [], []
    for _ in range(n):
        victim.append(sample(http_call(srv.port, "POST", "/v1/completions", VICTIM_BODY,
                                       VICTIM_KEY, timeout), t_origin))
        health.append(sample(http_call(srv.port, "GET", "/health", timeout=timeout), t_origin))
        time.sleep(0.05)
    return victim, health


def attack_record(p, r, t_origin, to, timeout, srv):
    died = False
    if r.status is None:
        time.sleep(0.3)  # a crash closes the connection a moment before the exit is seen
        died = not srv.alive() and srv.died_at is not None and srv.died_at >= r.t0 - 0.5
    return {"class": p["class"], "name": p["name"], "path": p["path"],
            "bytes": len(p["body"]), "at": round(r.t0 - t_origin, 3),
            "t": round(r.elapsed, 3), "status": r.status, "error": r.error,
            "cut_by_phase_end": bool(r.status is None and to < timeout
                                     and r.error.startswith("timeout")),
            "server_died": died}


def run_phase(srv, classes, payloads, threads, seconds, grace, timeout, t_origin, log, gap):
    """Attack for `seconds` while the victim probes; returns the phase's record.
    Attack requests are started until `seconds` have passed and may run
    `grace` seconds past that; the victim probes until the last one ends."""
    records = []
    rec_lock = threading.Lock()
    t_start = time.monotonic()
    end = t_start + seconds
    hard = end + grace
    prober = Prober(srv, timeout, t_origin)
    prober.start()
    time.sleep(0.3)  # a few victim samples before the first attack request

    def attacker(idx):
        i = idx
        while time.monotonic() < end and srv.alive():
            p = payloads[i % len(payloads)]
            i += threads
            left = hard - time.monotonic()
            if left <= 0.5:
                break
            to = min(timeout, left)
            r = http_call(srv.port, "POST", p["path"], p["body"], ATTACKER_KEY, to)
            rec = attack_record(p, r, t_origin, to, timeout, srv)
            with rec_lock:
                records.append(rec)
            log("  attacker %-16s %-40s -> %s in %.2f s %s%s" % (
                p["class"], p["name"][:40], r.status, r.elapsed, (r.error or "")[:60],
                " (server died)" if rec["server_died"] else ""))
            time.sleep(gap)

    ts = [threading.Thread(target=attacker, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # the victim keeps probing for a moment after the last attack answer
    if srv.alive():
        time.sleep(0.5)
    prober.finish()
    alive = srv.alive()
    return {"classes": classes, "threads": threads, "seconds_planned": seconds,
            "seconds": round(time.monotonic() - t_start, 2),
            "victim": prober.victim, "health": prober.health, "attacker": records,
            "server_alive": alive, "server_exit": srv.exit_desc(),
            "server_log_tail": [] if alive else srv.log_tail()}


def sweep(inputs, start_server, timeout, t_origin, log):
    """Each input once, one at a time, on a server restarted after every death
    (the inputs a crash kept from being sent in their phase)."""
    records, servers = [], []
    srv = None
    try:
        for p in inputs:
            if srv is None or not srv.alive():
                if srv is not None:
                    srv.stop()
                srv = start_server()
                servers.append(srv)
            r = http_call(srv.port, "POST", p["path"], p["body"], ATTACKER_KEY, timeout)
            rec = attack_record(p, r, t_origin, timeout, timeout, srv)
            rec["sweep"] = True
            if rec["server_died"]:
                rec["server_exit"] = srv.exit_desc()
            records.append(rec)
            log("  sweep    %-16s %-40s -> %s in %.2f s %s%s" % (
                p["class"], p["name"][:40], r.status, r.elapsed, (r.error or "")[:60],
                " (server %s)" % srv.exit_desc() if rec["server_died"] else ""))
    finally:
        for s in servers:
            s.stop()
    return records


def status_label(r):
    if r["status"] is not None:
        return str(r["status"])
    if r.get("server_died"):
        return "crash" if r.get("sweep") else "down"
    if r.get("cut_by_phase_end"):
        return "cut"
    if r["error"].startswith("timeout"):
        return "timeout"
    return "conn-error"


def summarize_attacker(records):
    by = {}
    for r in records:
        c = by.setdefault(r["class"], {"count": 0, "statuses": {}, "max_t": 0.0,
                                       "by_input": {}})
        c["count"] += 1
        k = status_label(r)
        c["statuses"][k] = c["statuses"].get(k, 0) + 1
        c["max_t"] = max(c["max_t"], r["t"])
        b = c["by_input"].setdefault(r["name"], {"count": 0, "statuses": {}, "max_t": 0.0,
                                                 "error": ""})
        b["count"] += 1
        b["statuses"][k] = b["statuses"].get(k, 0) + 1
        b["max_t"] = max(b["max_t"], r["t"])
        if r["error"] and not b["error"]:
            b["error"] = r["error"][:120]
    return by


def fmt_t(x):
    if x is None:
        return "-"
    return "%.3f" % x if x < 10 else "%.1f" % x


def ratio(a, b):
    if a is None or not b:
        return "-"
    return "%.1fx" % (a / b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="bin/specula", help="the specula binary (default bin/specula)")
    ap.add_argument("--seconds", type=float, default=30.0,
                    help="attack time in all, split evenly between the phases, at least 5 s "
                         "each (default 30)")
    ap.add_argument("--json", help="write the whole record (every sample) here")
    ap.add_argument("--classes", default=",".join(DEFAULT_ORDER),
                    help="comma-separated, run in this order (default: %(default)s)")
    ap.add_argument("--mode", choices=["phased", "mixed"], default="phased",
                    help="phased: one class at a time, a fresh server for each (default); "
                         "mixed: every class at once against one server")
    ap.add_argument("--threads", type=int, default=0,
                    help="attacker threads (default: each class's own, 4-16)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds a victim or attacker request may take (default 60)")
    ap.add_argument("--grace", type=float, default=30.0,
                    help="seconds an attack request started in its phase may run past the "
                         "phase's end (default 30)")
    ap.add_argument("--samples", type=int, default=20, help="quiet samples of each (default 20)")
    ap.add_argument("--chat-template", default="chatml",
                    help="given to serve (the bundled model has none); 'none' leaves out the "
                         "chat inputs")
    ap.add_argument("--budget", type=float, default=1.0,
                    help="seconds within which every attack request must be answered "
                         "(default 1)")
    ap.add_argument("--gap", type=float, default=0.05,
                    help="seconds each attacker thread waits between its requests (default "
                         "0.05: hostile inputs, not a flood of connections)")
    ap.add_argument("--floor", type=float, default=0.05,
                    help="the latency goal is 2x the quiet max but never under this many "
                         "seconds (scheduler noise; default 0.05)")
    ap.add_argument("--rss-limit-mb", type=int, default=8192,
                    help="kill the server (and say so) past this resident size, to protect the "
                         "machine; 0: no limit (default 8192)")
    ap.add_argument("--no-sweep", action="store_true",
                    help="after a crash, do not send each input of the class alone (restarting the "
                         "server after every death) to tell which ones crash it")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra argument for serve, repeatable (--serve-arg=-t --serve-arg=2)")
    ap.add_argument("--label", default="",
                    help="free text kept in the JSON and printed (e.g. the commit measured)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args()

    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    for c in classes:
        if c not in CLASSES:
            ap.error("unknown class '%s' (%s)" % (c, ", ".join(CLASSES)))
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        ap.error("%s is not an executable" % binary)

    def log(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    chat_ok = args.chat_template != "none"
    log("building the attack inputs ...")
    payloads = {c: build_payloads(c, chat_ok) for c in classes}

    if args.mode == "phased":
        per = max(5.0, args.seconds / len(classes))
        phases = [([c], per) for c in classes]
    else:
        phases = [(classes, max(5.0, args.seconds))]
    n_inputs = sum(len(v) for v in payloads.values())
    worst = (sum(s for _, s in phases) + len(phases) * (args.grace + args.timeout + 15)
             + n_inputs * min(args.timeout, 10))
    log("%d phase(s), %.0f s of attack; %.0f s at the very most" % (
        len(phases), sum(s for _, s in phases), worst + 60))

    log_dir = tempfile.mkdtemp(prefix="specula-attack-")
    servers = []
    n_started = [0]
    t_origin = time.monotonic()

    def start_server(warm=True):
        srv = Server(binary, args.chat_template, args.serve_arg, log_dir, str(n_started[0]),
                     args.rss_limit_mb * 1024)
        n_started[0] += 1
        servers.append(srv)
        srv.wait_ready()
        if warm:
            for _ in range(3):
                http_call(srv.port, "POST", "/v1/completions", VICTIM_BODY, VICTIM_KEY,
                          args.timeout)
        return srv

    record = {"bin": binary, "label": args.label, "argv": sys.argv, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "host": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
              "config": {k: getattr(args, k) for k in ("seconds", "classes", "mode", "threads",
                                                       "timeout", "grace", "samples",
                                                       "chat_template", "budget", "floor", "gap",
                                                       "rss_limit_mb",
                                                       "serve_arg")},
              "inputs": {c: [{"name": p["name"], "path": p["path"], "bytes": len(p["body"])}
                             for p in payloads[c]] for c in classes},
              "server_logs": log_dir}

    def on_term(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_term)  # SIGINT too: a background job inherits it ignored
    phase_records = []
    try:
        srv = start_server(warm=False)
        record["serve_args"] = srv.args
        log("server up on port %d; quiet baseline (%d samples each) ..." % (srv.port,
                                                                             args.samples))
        qv, qh = quiet_baseline(srv, args.samples, args.timeout, t_origin)
        record["quiet"] = {"victim": qv, "health": qh, "rss_kb": srv.rss_peak_kb}
        for k, (cls, secs) in enumerate(phases):
            if k > 0:
                srv.stop()
                srv = start_server()
            pl = [p for c in cls for p in payloads[c]]
            if len(cls) > 1:  # mixed: interleave the classes
                pl = [p for grp in zip(*[payloads[c] * 16 for c in cls]) for p in grp]
            threads = args.threads or max(CLASSES[c][1] for c in cls)
            log("phase %d: %s, %d attacker threads, %.0f s" % (k + 1, "+".join(cls), threads,
                                                                 secs))
            ph = run_phase(srv, cls, pl, threads, secs, args.grace, args.timeout, t_origin, log,
                           args.gap)
            ph["rss_peak_kb"] = max(srv.rss_peak_kb, srv.hwm_kb)
            log("  server %s, peak RSS %.0f MB" % (ph["server_exit"], ph["rss_peak_kb"] / 1024))
            if not ph["server_alive"] and not args.no_sweep:
                log("  the server died: each input of the phase alone, restarting after "
                    "every crash")
                srv.stop()
                ph["sweep"] = sweep([p for c in cls for p in payloads[c]],
                                    lambda: start_server(warm=False),
                                    min(args.timeout, 10.0), t_origin, log)
            phase_records.append(ph)
        record["phases"] = phase_records
    except KeyboardInterrupt:
        record["interrupted"] = True
        log("interrupted")
    except RuntimeError as e:  # a server that would not start
        record["error"] = str(e)
        print("grammar_attack: %s" % e, file=sys.stderr)
    finally:
        for s in servers:
            s.stop()
    record["host"]["loadavg_end"] = os.getloadavg()

    if not phase_records:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=1)
        return 2
    record["phases"] = phase_records
    summary, text = summarize(record, classes, args)
    record["summary"] = summary
    record["table"] = text
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
        log("wrote %s" % args.json)
    return 0 if all(g["ok"] for g in summary["goals"].values()) else 1


def summarize(record, classes, args):
    phases = record["phases"]
    q_v, q_h = stats(record["quiet"]["victim"]), stats(record["quiet"]["health"])
    a_v = stats([s for ph in phases for s in ph["victim"]])
    a_h = stats([s for ph in phases for s in ph["health"]])
    att_records = [r for ph in phases for r in ph["attacker"] + ph.get("sweep", [])]
    att = summarize_attacker(att_records)
    peak = max([ph["rss_peak_kb"] for ph in phases] + [record["quiet"]["rss_kb"]])
    deaths = [{"phase": "+".join(ph["classes"]), "exit": ph["server_exit"],
               "inputs": sorted(set(r["name"] for r in ph["attacker"] if r["server_died"]))}
              for ph in phases if not ph["server_alive"]]
    # a crash takes down every request in flight: only the sweep (one input
    # at a time) says which input did it
    crashers = sorted(set("%s: %s" % (r["class"], r["name"]) for r in att_records
                          if r["server_died"] and r.get("sweep")))

    def goal(q, a):
        lim = min(1.0, max(2 * q["max"], args.floor)) if q["max"] else 1.0
        return {"limit_s": round(lim, 4),
                "ok": bool(a["n"] > 0 and a["errors"] == 0 and a["max"] <= lim)}

    bad_att = [r for r in att_records
               if r["status"] is None or r["status"] >= 500 or r["t"] > args.budget]
    summary = {
        "quiet": {"victim": q_v, "health": q_h},
        "under_attack": {"victim": a_v, "health": a_h},
        "phases": [{"classes": ph["classes"], "seconds": ph["seconds"],
                    "victim": stats(ph["victim"]), "health": stats(ph["health"]),
                    "rss_peak_mb": round(ph["rss_peak_kb"] / 1024, 1),
                    "server": ph["server_exit"]} for ph in phases],
        "attacker": att,
        "peak_rss_mb": round(peak / 1024, 1),
        "server_alive": not deaths,
        "server_deaths": deaths,
        "inputs_that_killed_the_server": crashers,
        "goals": {"victim_latency": goal(q_v, a_v), "health_latency": goal(q_h, a_h),
                  "attacker_answered_within_budget": {
                      "budget_s": args.budget, "ok": not bad_att, "violations": len(bad_att)},
                  "server_alive": {"ok": not deaths and not crashers}},
    }

    out = []
    out.append("specula serve under hostile grammars, schemas and logit_bias: %s%s" % (
        record["bin"], " (%s)" % record["label"] if record.get("label") else ""))
    out.append("%d CPUs; load average %.1f at start, %.1f at the end" % (
        record["host"]["cpus"], record["host"]["loadavg_start"][0],
        record["host"]["loadavg_end"][0]))
    out.append("")
    hdr = "%-34s %5s %5s %8s %8s %8s %9s %7s" % ("latency (s)", "n", "err", "median", "p95",
                                                "max", "x median", "x max")
    out.append(hdr)

    def row(label, s, q=None):
        r = "%-34s %5d %5d %8s %8s %8s" % (label[:34], s["n"], s["errors"], fmt_t(s["median"]),
                                          fmt_t(s["p95"]), fmt_t(s["max"]))
        if q:
            r += " %9s %7s" % (ratio(s["median"], q["median"]), ratio(s["max"], q["max"]))
        return r

    out.append(row("victim completion, quiet", q_v))
    out.append(row("/health, quiet", q_h))
    out.append(row("victim completion, under attack", a_v, q_v))
    out.append(row("/health, under attack", a_h, q_h))
    if len(phases) > 1:
        out.append("  by phase (a fresh server each):")
        for ph in summary["phases"]:
            lab = "+".join(ph["classes"])
            out.append(row("  victim   " + lab, ph["victim"], q_v))
            out.append(row("  /health  " + lab, ph["health"], q_h))
    errs = sorted(set(e for s in (a_v, a_h) for e in s["first_errors"]))
    if errs:
        out.append("  victim//health errors: " + "; ".join(errs)[:300])
    out.append("")
    out.append("%-16s %-40s %4s %-22s %7s  %s" % ("attacker class", "input", "n", "answers",
                                                  "max (s)", "first error"))
    for c in classes:
        if c not in att:
            out.append("%-16s %-40s %4d" % (c, "(nothing sent)", 0))
            continue
        a = att[c]
        st = " ".join("%s:%d" % kv for kv in sorted(a["statuses"].items()))
        out.append("%-16s %-40s %4d %-22s %7s" % (c, "(all)", a["count"], st[:22],
                                                  fmt_t(a["max_t"])))
        for name, b in a["by_input"].items():
            st = " ".join("%s:%d" % kv for kv in sorted(b["statuses"].items()))
            out.append("%-16s %-40s %4d %-22s %7s  %s" % ("", name[:40], b["count"], st[:22],
                                                          fmt_t(b["max_t"]), b["error"][:60]))
    out.append("  (answers: an HTTP status; crash: this input alone killed the server (sent "
               "after a death, one at a time); down: the server died while it was in flight; "
               "cut: still unanswered when its phase's grace ran out; timeout; conn-error)")
    out.append("")
    out.append("peak server RSS: %.0f MB (quiet %.0f; by phase: %s)" % (
        peak / 1024, record["quiet"]["rss_kb"] / 1024,
        ", ".join("%s %.0f" % ("+".join(p["classes"]), p["rss_peak_mb"])
                  for p in summary["phases"])))
    for d in deaths:
        out.append("server DIED in phase %s: %s" % (d["phase"], d["exit"]))
    if crashers:
        out.append("inputs that killed it (%d): %s" % (len(crashers), "; ".join(crashers))[:600])
    if not deaths and not crashers:
        out.append("server alive at the end of every phase")
    g = summary["goals"]
    ok = lambda x: "PASS" if x["ok"] else "FAIL"
    out.append("")
    out.append("goals: victim max <= %.3f s (2x quiet max, at least %g s, at most 1 s): %s" % (
        g["victim_latency"]["limit_s"], args.floor, ok(g["victim_latency"])))
    out.append("       /health max <= %.3f s: %s" % (g["health_latency"]["limit_s"],
                                                      ok(g["health_latency"])))
    out.append("       every attack request answered (no 5xx, no timeout) within %.1f s: %s "
               "(%d not)" % (args.budget, ok(g["attacker_answered_within_budget"]),
                             g["attacker_answered_within_budget"]["violations"]))
    out.append("       server never died: %s" % ok(g["server_alive"]))
    return summary, "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
