#!/usr/bin/env python3
"""kv_disk.py: the prefix cache's disk tier (--kv-disk) through `specula
serve`. Prompts share a long prefix (~300 tokens of held-out code) with
different tails:

  off        a server without the tier: the reference greedy outputs
  on         a server with --kv-disk DIR: the same outputs; the tier takes
             writes; DIR is 0700 and its files 0600; a second server on DIR
             is refused with a message naming the lock
  restart    the server stopped and started again on DIR: the same outputs,
             served from disk (usage cached_tokens > 0, specula
             cached_tokens_disk > 0, the /metrics series by tier)
  kill -9    a server writing many blocks is killed mid-write; the next one
             on that DIR opens the store without setting it aside, serves
             the same outputs and restores from it
  tiny cap   --kv-disk-size 1K: every write is skipped, outputs unchanged
  changed    a copy of the model with one byte changed in the middle of
             blk.0.attn_k (where a sampled fingerprint does not look) on
             the restarted DIR: none of the other model's blocks is used
  untrusted  a DIR others can reach is refused, named and left as it was
             (never chmod'ed); a planted kv.sqlite-wal others can read, held
             open by its planter, is refused
Prints "ok"/"FAIL" lines and "RESULT <passed> <failed>". Standard library only.
"""
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, metrics, request  # noqa: E402

PREFIX = '''
def schedule_rounds(teams, rounds=None, seed=7):
    """Round-robin pairings for a league of teams, home and away balanced."""
    teams = list(teams)
    if len(teams) % 2:
        teams.append(None)
    n = len(teams)
    rounds = rounds or n - 1
    fixed, rest = teams[0], teams[1:]
    out = []
    for r in range(rounds):
        pairs = [(fixed, rest[-1])] if r % 2 == 0 else [(rest[-1], fixed)]
        for k in range(n // 2 - 1):
            a, b = rest[k], rest[-2 - k]
            pairs.append((a, b) if (r + k) % 2 else (b, a))
        out.append([p for p in pairs if None not in p])
        rest = rest[-1:] + rest[:-1]
    return out


class Standings:
    def __init__(self, teams):
        self.rows = {t: {"played": 0, "won": 0, "drawn": 0, "lost": 0, "points": 0} for t in teams}

    def record(self, home, away, hg, ag):
        for team, gf, ga in ((home, hg, ag), (away, ag, hg)):
            row = self.rows[team]
            row["played"] += 1
            if gf > ga:
                row["won"] += 1
                row["points"] += 3
'''
TAILS = ["    def table(self):\n", "    def leader(self):\n", "def main(argv):\n"]


def complete(srv, prompt, max_tokens=16):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(body).encode(),
                       {"Content-Type": "application/json"}, timeout=300)
    if st != 200:
        raise RuntimeError("status %d: %s" % (st, b[:200]))
    d = json.loads(b)
    return (d["choices"][0]["text"], d["usage"]["prompt_tokens_details"]["cached_tokens"],
            d["specula"].get("cached_tokens_disk"))


def tensor_span(path, name):
    """File offset and size (up to the next tensor) of tensor name's data."""
    b = open(path, "rb").read()
    _, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(o):
        n = struct.unpack_from("<Q", b, o)[0]
        return b[o + 8:o + 8 + n].decode(), o + 8 + n

    def value(t, o):
        if t in sizes:
            return o + sizes[t]
        if t == 8:
            return string(o)[1]
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et in sizes:
            return o + n * sizes[et]
        for _ in range(n):
            o = value(et, o)
        return o
    off, align, infos = 24, 32, {}
    for _ in range(n_kv):
        key, off = string(off)
        t = struct.unpack_from("<I", b, off)[0]
        if key == "general.alignment":
            align = struct.unpack_from("<I", b, off + 4)[0]
        off = value(t, off + 4)
    for _ in range(n_t):
        nm, off = string(off)
        nd = struct.unpack_from("<I", b, off)[0]
        off += 4 + 8 * nd
        infos[nm] = struct.unpack_from("<Q", b, off + 4)[0]
        off += 12
    data = (off + align - 1) // align * align
    ends = sorted(infos.values()) + [len(b) - data]
    start = infos[name]
    return data + start, min(e for e in ends if e > start) - start


def refused(binary, args, tmp):
    """Exit status and output of a server that should refuse to start (one
    still running after 60 s is stopped: status 0, "it started")."""
    try:
        p = subprocess.run([binary, "serve", "--port", "0", "-t", "1"] + args,
                           capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 0, "it started"
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def wait_writes(srv, want, limit=60):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        _, m = metrics(srv.port)
        if m.get("specula_kv_disk_writes_total", 0) >= want:
            return m
        time.sleep(0.1)
    return metrics(srv.port)[1]


def main():
    binary = os.environ.get("SPECULA_BIN", "bin/specula")
    model = os.environ.get("SPECULA_MODEL")
    tally = Tally()
    report = tally.report
    tmp = tempfile.mkdtemp(prefix="specula-kvdisk-")
    dir1, dir2 = os.path.join(tmp, "tier1"), os.path.join(tmp, "tier2")
    base = ["-c", "512", "--max-seqs", "4"]
    common = base + (["-m", model] if model else [])
    servers = []

    def start(name, extra):
        s = Server(name, binary, common + extra, tmp)
        servers.append(s)
        return s

    try:
        prompts = [PREFIX + t for t in TAILS]
        off = start("off", [])
        ref = [complete(off, p)[0] for p in prompts]
        # the kill -9 workload: 12 documents of distinct prefixes
        docs = ["# document %d\n" % i + PREFIX.replace("teams", "clubs%d" % i) for i in range(12)]
        ref_docs = [complete(off, d, 4)[0] for d in docs]
        off.stop()

        on = start("on", ["--kv-disk", dir1])
        got = [complete(on, p) for p in prompts]
        report("tier on: greedy outputs identical to tier off",
               None if [g[0] for g in got] == ref else "outputs differ: %r vs %r" % (got, ref))
        m = wait_writes(on, 10)
        report("tier on: blocks written in the background (%d)" % m.get("specula_kv_disk_writes_total", 0),
               None if m.get("specula_kv_disk_writes_total", 0) >= 10 and m.get("specula_kv_disk_blocks", 0) >= 10
               else "metrics: %r" % {k: v for k, v in m.items() if "disk" in k})
        modes = {"DIR": stat.S_IMODE(os.stat(dir1).st_mode)}
        for f in os.listdir(dir1):
            modes[f] = stat.S_IMODE(os.stat(os.path.join(dir1, f)).st_mode)
        report("DIR is 0700 and its files 0600",
               None if modes["DIR"] == 0o700 and all(v == 0o600 for k, v in modes.items() if k != "DIR")
               and "kv.sqlite" in modes else "modes: %r" % {k: oct(v) for k, v in modes.items()})
        p2 = subprocess.run([binary, "serve", "--port", "0", "-t", "1"] + common + ["--kv-disk", dir1],
                            capture_output=True, timeout=60)
        msg = (p2.stdout + p2.stderr).decode("utf-8", "replace")
        report("a second server on the same DIR is refused with a clear message",
               None if p2.returncode != 0 and "in use by another process" in msg else
               "exit %d: %s" % (p2.returncode, msg[-300:]))
        on.stop()

        again = start("restart", ["--kv-disk", dir1])
        got = [complete(again, p) for p in prompts]
        report("restart: greedy outputs identical", None if [g[0] for g in got] == ref else
               "outputs differ: %r vs %r" % ([g[0] for g in got], ref))
        first = got[0]
        report("restart: the first request is served from disk (cached %d, from disk %s)" % first[1:],
               None if first[1] >= 256 and first[2] == first[1] else "usage %r" % (first[1:],))
        _, m = metrics(again.port)
        need = ["specula_prefix_cache_tier_hit_tokens_total{tier=\"disk\"}",
                "specula_prefix_cache_tier_hit_tokens_total{tier=\"ram\"}",
                "specula_kv_disk_restored_blocks_total", "specula_kv_disk_restore_seconds_total",
                "specula_kv_disk_restores_declined_total", "specula_kv_disk_bytes",
                "specula_kv_disk_writes_skipped_total{reason=\"queue_full\"}",
                "specula_kv_disk_evictions_total{cause=\"lru_cap\"}", "specula_prefix_cache_hits_total",
                "specula_cached_prompt_tokens_total"]
        missing = [k for k in need if k not in m]
        report("restart: /metrics splits hit tokens by tier and counts restores",
               None if not missing and m[need[0]] == first[2] and m[need[2]] >= first[2] // 16
               and m[need[3]] > 0 else "missing %r; %r" % (missing, {k: m.get(k) for k in need}))
        again.stop()

        # a model one byte apart, in the middle of blk.0.attn_k, on that DIR
        changed = os.path.join(tmp, "changed.gguf")
        shutil.copyfile(model or "models/specula-code-target-f16.gguf", changed)
        at, size = tensor_span(changed, "blk.0.attn_k.weight")
        with open(changed, "r+b") as f:
            f.seek(at + size // 2)
            c = f.read(1)
            f.seek(at + size // 2)
            f.write(bytes([c[0] ^ 1]))
        other = start("changed", base + ["-m", changed, "--kv-disk", dir1])
        got = complete(other, prompts[0])
        report("a model one byte apart (mid blk.0.attn_k) reuses none of the other's blocks (cached %d, from disk %s)"
               % got[1:], None if got[1] == 0 and not got[2] else "usage %r" % (got[1:],))
        other.stop()

        # DIR and its files must be the server's own
        loose = os.path.join(tmp, "loose")
        os.mkdir(loose, 0o700)
        os.chmod(loose, 0o755)
        rc, msg = refused(binary, common + ["--kv-disk", loose], tmp)
        report("a DIR others can reach (0755) is refused, named, and left as it was",
               None if rc != 0 and loose in msg and "chmod 700" in msg
               and stat.S_IMODE(os.stat(loose).st_mode) == 0o755
               else "exit %d, mode %o: %s" % (rc, stat.S_IMODE(os.stat(loose).st_mode), msg[-300:]))
        planted = os.path.join(tmp, "planted")
        os.mkdir(planted, 0o700)
        wal = os.path.join(planted, "kv.sqlite-wal")
        fd = os.open(wal, os.O_CREAT | os.O_RDWR, 0o644)
        os.fchmod(fd, 0o644)
        try:  # the planter keeps it open
            rc, msg = refused(binary, common + ["--kv-disk", planted], tmp)
        finally:
            os.close(fd)
        report("a planted kv.sqlite-wal others can read is refused, named",
               None if rc != 0 and wal in msg and "group or others" in msg
               else "exit %d: %s" % (rc, msg[-300:]))

        # kill -9 in the middle of heavy writing
        w = start("writer", ["--kv-disk", dir2])
        done = []

        def send(d):
            try:
                complete(w, d, 4)
                done.append(d)
            except Exception:  # noqa: BLE001 (killed under it)
                pass
        threads = [threading.Thread(target=send, args=(d,)) for d in docs]
        for t in threads:
            t.start()
        # kill once blocks are on disk (the writer is asynchronous: on a
        # loaded machine six answered requests could precede any write),
        # with requests still arriving when there are
        m = {}
        while any(t.is_alive() for t in threads):
            _, m = metrics(w.port)
            if m.get("specula_kv_disk_writes_total", 0) >= 8 and len(done) >= 2:
                break
            time.sleep(0.01)
        else:
            m = wait_writes(w, 8)
        w.p.send_signal(signal.SIGKILL)
        for t in threads:
            t.join()
        w.p.wait()
        w.f.close()
        report("kill -9 while writing (%d blocks written, %d requests done when killed)" % (m.get("specula_kv_disk_writes_total", 0), len(done)),
               None if w.p.returncode == -signal.SIGKILL else "exit %r" % w.p.returncode)
        after = start("after-kill", ["--kv-disk", dir2])
        res = [complete(after, d, 4) for d in docs]
        log = after.text()
        report("after kill -9: the store opens without being set aside, outputs identical, restores (%d tokens)"
               % sum(r[2] or 0 for r in res),
               None if [r[0] for r in res] == ref_docs and "set aside" not in log and "--kv-disk" not in log
               and sum(r[2] or 0 for r in res) > 0 else "log %r, outputs %r vs %r" % ([l for l in log.splitlines() if "warn" in l or "aside" in l][:3], [r[0] for r in res], ref_docs))
        after.stop()

        tiny = start("tiny", ["--kv-disk", os.path.join(tmp, "tier3"), "--kv-disk-size", "1K"])
        got = [complete(tiny, p)[0] for p in prompts]
        _, m = metrics(tiny.port)
        skipped = m.get("specula_kv_disk_writes_skipped_total{reason=\"cap\"}", 0)
        report("--kv-disk-size 1K: serves the same outputs, every write skipped (%d)" % skipped,
               None if got == ref and skipped > 0 and m.get("specula_kv_disk_writes_total") == 0
               else "outputs %r, metrics %r" % (got, {k: v for k, v in m.items() if "disk" in k}))
        tiny.stop()
        bad = [s.name for s in servers if SAN_RE.search(s.text())]
        report("no sanitizer reports", None if not bad else "in %r" % bad)
    except Exception as e:  # noqa: BLE001
        report("kv_disk", "%s: %s" % (type(e).__name__, e))
    finally:
        for s in servers:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.result()


if __name__ == "__main__":
    sys.exit(main())
