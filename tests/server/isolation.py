#!/usr/bin/env python3
"""isolation.py: prefix-cache isolation between tenants, by cache_salt and
by API key. A ~400-token prompt of code the model never saw is warmed by
tenant A; tenant B then sends the same prompt, interleaved with A:

  per round i: A cold (a fresh tenant of A's), B, A again (warm)

B must get cached_tokens == 0 every time and A's repeat > 0; and the TTFT
distributions must agree: B's median TTFT (the server's ttft_ms) is not
below A's cold median by more than a generous margin, while A's warm median
is clearly below it. Two servers: one without keys (tenants are salts: A
uses salt "a<i>", B "b<i>"), one with two --api-key keys (A and B send the
SAME cache_salt "x<i>"; only the key differs). Medians of ROUNDS samples
each, ratios with wide margins, so a loaded machine does not make it flaky;
the cached_tokens assertions are exact.

Then the same isolation for what speculative decoding learns (the suffix
store of earlier outputs, which must not leak one tenant's outputs to
another). Two identical
servers with two keys and --spec-fixed-k (k is what the proposer has, so
the counts are deterministic): "attacked", where tenant A sends a prompt
and gets its greedy continuation, and "control", where A never does. Tenant
B sends the same requests to both: A's prompt plus the first half of that
continuation, with "speculative": {"method": "suffix"}. B's output, steps,
drafted and accepted tokens must be identical on both servers, round after
round (with the same cache_salt under both keys, and with none), so B
cannot tell whether A sent the prompt (nor by timing: the work is the
same). A itself, sending that probe, drafts its own continuation: accepted
tokens well above B's (the feature still works within a tenant).
Prints "ok"/"FAIL" lines and "RESULT <passed> <failed>". Standard library only.
"""
import json
import os
import statistics
import sys
import shutil
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, request  # noqa: E402

ROUNDS = 10      # rounds per scenario at most ...
MIN_ROUNDS = 5   # ... and at least; more only while a scenario is under BUDGET_S
BUDGET_S = 20
# held-out code (written for this test, not from the training set)
CODE = '''
class RingLedger:
    """A fixed-size ledger of sensor readings with a rolling checksum."""

    def __init__(self, capacity, seed=0x5EED):
        self.capacity = int(capacity)
        self.slots = [None] * self.capacity
        self.head = 0
        self.count = 0
        self.digest = seed

    def push(self, stamp, value):
        old = self.slots[self.head]
        if old is not None:
            self.digest ^= hash((old[0], round(old[1], 3))) & 0xFFFFFFFF
        self.slots[self.head] = (stamp, value)
        self.digest ^= hash((stamp, round(value, 3))) & 0xFFFFFFFF
        self.head = (self.head + 1) % self.capacity
        self.count = min(self.count + 1, self.capacity)

    def window(self, since):
        out = []
        for k in range(self.count):
            stamp, value = self.slots[(self.head - 1 - k) % self.capacity]
            if stamp < since:
                break
            out.append(value)
        return out[::-1]

    def drift(self, since, tolerance=0.25):
        values = self.window(since)
        if len(values) < 3:
            return 0.0
        mid = sorted(values)[len(values) // 2]
        spread = max(abs(v - mid) for v in values)
        return 0.0 if spread <= tolerance else (values[-1] - values[0]) / spread


def reconcile(ledgers, since, quorum=2):
    """Readings that at least `quorum` ledgers agree on, per stamp."""
    votes = {}
    for ledger in ledgers:
        for k in range(ledger.count):
            stamp, value = ledger.slots[(ledger.head - 1 - k) % ledger.capacity]
            if stamp >= since:
                votes.setdefault((stamp, round(value, 1)), set()).add(id(ledger))
    agreed = sorted(key for key, who in votes.items() if len(who) >= quorum)
    return [value for _, value in agreed]
'''

# prompts for the suffix-store probe: distinct per round, so that one
# round's outputs say nothing about the next
PROBE_PROMPTS = [
    'def audit_patient_4471(record):\n    """Flag the record for early-onset review."""\n',
    "class Ledger:\n    def settle(self, account, amount):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    for name in argv[1:]:\n        if os.path.isdir(name):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
    "        self.items.append(item)\n\n    def pop(self):\n",
    "def parse_header(line):\n    key, _, value = line.partition(':')\n",
    "def median(values):\n    ordered = sorted(values)\n",
]


def completion(srv, key, prompt, max_tokens, salt=None, spec=None):
    """(text, usage, specula) of a greedy completion; RuntimeError unless 200."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if salt is not None:
        body["cache_salt"] = salt
    if spec is not None:
        body["speculative"] = spec
    hdrs = {"Content-Type": "application/json"}
    if key:
        hdrs["Authorization"] = "Bearer " + key
    st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(body).encode(), hdrs,
                       timeout=120)
    if st != 200:
        raise RuntimeError("HTTP %d: %s" % (st, b[:200]))
    d = json.loads(b)
    return d["choices"][0]["text"], d["usage"], d["specula"]


def suffix_probe(report, scout, attacked, control):
    """The cross-tenant attack on the suffix store, see the docstring."""
    spec = {"method": "suffix", "k": 8}
    gen, half = 32, 16
    rows, same_acc, b_acc = [], 0, 0
    try:
        for i, prompt in enumerate(PROBE_PROMPTS):
            salt = "s%d" % i if i % 2 == 0 else None  # same cache_salt under both keys, or none
            # the model's continuation of A's prompt, from a server A never used
            cont = completion(scout, None, prompt, gen, salt="scout")[0]
            probe = prompt + cont[:len(cont) // 2]
            a_text = completion(attacked, "key-alpha", prompt, gen, salt)[0]
            if a_text != cont:
                raise RuntimeError("round %d: A's greedy output differs from the scout's" % i)
            b_text, bu, b = completion(attacked, "key-beta", probe, half, salt, spec)
            c_text, _, c = completion(control, "key-beta", probe, half, salt, spec)
            _, _, a = completion(attacked, "key-alpha", probe, half, salt, spec)
            rows.append((i, salt, b_text == c_text, b["spec"], c["spec"], a["spec"],
                         bu["prompt_tokens_details"]["cached_tokens"], b["decode_ms"], c["decode_ms"]))
            same_acc += a["spec"]["accepted"]
            b_acc += b["spec"]["accepted"]
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        report("suffix store: the probe ran", "request failed: %r" % e)
        return
    keys = ("steps", "drafted", "accepted")
    for i, salt, same_text, b, c, a, cached, bms, cms in rows:
        print("     round %d (%s): B after A %d/%d drafted/accepted, B where A never ran %d/%d, "
              "A's own probe %d/%d; B decode %.1f ms vs %.1f ms"
              % (i, "cache_salt %s" % salt if salt else "no cache_salt", b["drafted"], b["accepted"],
                 c["drafted"], c["accepted"], a["drafted"], a["accepted"], bms, cms), flush=True)
    bad = ["round %d: %s vs %s" % (i, [b[k] for k in keys], [c[k] for k in keys])
           for i, _, same_text, b, c, _, _, _, _ in rows
           if not same_text or any(b[k] != c[k] for k in keys)]
    report("suffix store: B's probe of A's prompt + half its output drafts and accepts exactly what it "
           "does where A never sent it (%d rounds, keys only and keys + the same cache_salt)" % len(rows),
           "; ".join(bad) if bad else None)
    report("suffix store: B's probe hits none of A's prefix cache",
           None if all(r[6] == 0 for r in rows) else "cached tokens %s" % [r[6] for r in rows])
    report("suffix store: A's own probe drafts from A's output (accepted %d vs B's %d over %d rounds)"
           % (same_acc, b_acc, len(rows)),
           None if same_acc >= b_acc + len(rows) else "A accepted %d, B %d" % (same_acc, b_acc))


def main():
    binary = os.environ.get("SPECULA_BIN", "bin/specula")
    model = os.environ.get("SPECULA_MODEL")
    tally = Tally()
    report = tally.report

    tmp = tempfile.mkdtemp(prefix="specula-iso-")
    servers = []
    try:
        common = ["-c", "512", "--max-seqs", "4"] + (["-m", model] if model else [])
        plain = Server("salts", binary, common, tmp)
        servers.append(plain)
        keyed = Server("keys", binary, common + ["--api-key", "key-alpha", "--api-key", "key-beta"], tmp)
        servers.append(keyed)
        spec_args = common + ["--api-key", "key-alpha", "--api-key", "key-beta", "--spec-fixed-k"]
        attacked = Server("suffix-attacked", binary, spec_args, tmp)
        servers.append(attacked)
        control = Server("suffix-control", binary, spec_args, tmp)
        servers.append(control)

        # the prompt: the held-out code cut to at most 420 tokens
        text = CODE
        for _ in range(8):
            st, _, b = request(plain.port, "POST", "/tokenize", json.dumps({"prompt": text}).encode())
            n = json.loads(b)["count"]
            if n <= 420:
                break
            text = text[:len(text) * 400 // n]
        if not 300 <= n <= 420:
            report("prompt length", "the prompt has %d tokens (want 300..420)" % n)
            return 1
        # a slow build (sanitizers) gets a shorter prompt: measure one cold request
        body = {"prompt": text, "max_tokens": 1, "temperature": 0, "cache_salt": "calibrate"}
        t0 = time.monotonic()
        request(plain.port, "POST", "/v1/completions", json.dumps(body).encode(), timeout=120)
        if time.monotonic() - t0 > 1.0:
            text = text[:len(text) * 150 // n]
            n = json.loads(request(plain.port, "POST", "/tokenize", json.dumps({"prompt": text}).encode())[2])["count"]
            print("     slow build (%.1f s for one cold request): a shorter prompt" % (time.monotonic() - t0))
        print("     the shared prompt has %d tokens" % n, flush=True)

        def gen(srv, key, salt):
            body = {"prompt": text, "max_tokens": 1, "temperature": 0}
            if salt is not None:
                body["cache_salt"] = salt
            hdrs = {"Content-Type": "application/json"}
            if key:
                hdrs["Authorization"] = "Bearer " + key
            st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(body).encode(), hdrs)
            d = json.loads(b)
            if st != 200:
                raise RuntimeError("HTTP %d: %s" % (st, b[:200]))
            return d["usage"]["prompt_tokens_details"]["cached_tokens"], d["specula"]["ttft_ms"]

        def scenario(name, srv, a_key, b_key, a_salt, b_salt):
            cold, warm, other = [], [], []
            t0 = time.monotonic()
            try:
                for i in range(ROUNDS):
                    if i >= MIN_ROUNDS and time.monotonic() - t0 > BUDGET_S:
                        break
                    cold.append(gen(srv, a_key, a_salt(i)))
                    other.append(gen(srv, b_key, b_salt(i)))
                    warm.append(gen(srv, a_key, a_salt(i)))
            except Exception as e:
                report(name, "request failed: %r" % e)
                return
            med = lambda xs: statistics.median(t for _, t in xs)
            mc, mw, mo = med(cold), med(warm), med(other)
            print("     %s: median TTFT ms: A cold %.1f, A warm %.1f, B %.1f; cached: A warm %s, B %s"
                  % (name, mc, mw, mo, sorted({c for c, _ in warm}), sorted({c for c, _ in other})),
                  flush=True)
            bad = [c for c, _ in other if c != 0] + [c for c, _ in cold if c != 0]
            report("%s: B never hits A's warm prefix (cached_tokens 0 in %d requests)" % (name, len(other)),
                   "cached tokens %s" % [c for c, _ in other] if bad else None)
            low = [c for c, _ in warm if c < n // 2]
            report("%s: A's own repeats hit (cached_tokens >= %d in %d requests)" % (name, n // 2, len(warm)),
                   "cached tokens %s" % [c for c, _ in warm] if low else None)
            # timing: generous margins, medians of ROUNDS samples
            report("%s: A warm median TTFT < 0.6 x A cold median" % name,
                   None if mw < 0.6 * mc else "warm %.1f ms, cold %.1f ms" % (mw, mc))
            report("%s: B median TTFT >= 0.6 x A cold median (no advantage from A's cache)" % name,
                   None if mo >= 0.6 * mc else "B %.1f ms, A cold %.1f ms" % (mo, mc))

        # the same tenant without a salt hits; another salt does not
        gen(plain, None, None)
        c_same = gen(plain, None, None)[0]
        c_salt = gen(plain, None, "fresh-salt")[0]
        report("no salt twice hits (%d cached); a salt then does not (%d)" % (c_same, c_salt),
               None if c_same > 0 and c_salt == 0 else "cached %d then %d" % (c_same, c_salt))
        scenario("salts", plain, None, None, lambda i: "a%d" % i, lambda i: "b%d" % i)
        scenario("api keys, same cache_salt", keyed, "key-alpha", "key-beta",
                 lambda i: "x%d" % i, lambda i: "x%d" % i)
        # a key's tenants: no salt, key A warms; key B without salt misses
        gen(keyed, "key-alpha", None)
        ca = gen(keyed, "key-alpha", None)[0]
        cb = gen(keyed, "key-beta", None)[0]
        report("api keys without salt: A repeat hits (%d), B misses (%d)" % (ca, cb),
               None if ca > 0 and cb == 0 else "A %d, B %d" % (ca, cb))
        suffix_probe(report, plain, attacked, control)
        for srv in servers:
            rc = srv.stop()
            err = "exit status %s" % rc if rc != 0 else None
            if not err and SAN_RE.search(srv.text()):
                err = "sanitizer report: " + srv.text()[-1500:]
            report("server %s exits cleanly, no sanitizer report" % srv.name, err)
    except RuntimeError as e:
        report("servers", str(e))
    finally:
        for srv in servers:
            srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.result()


if __name__ == "__main__":
    sys.exit(main())
