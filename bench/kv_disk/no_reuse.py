#!/usr/bin/env python3
"""no_reuse.py: every prompt distinct, so the disk tier only costs (writes,
lookups that miss): tokens/s with the tier on vs off. Two servers run side
by side and the requests alternate between them (off, on, off, on, ...),
so both see the same machine load; each request is timed by the client.

  no_reuse.py BINARY MODEL [N_REQUESTS PROMPT_WORDS MAX_TOKENS]
One JSON object on stdout."""
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from harness import Server, metrics, request  # noqa: E402

WORDS = ("river stone lantern copper meadow signal harbor velvet orbit cedar maple quartz "
         "ember falcon tundra prism canyon willow saffron glacier beacon thistle cobalt").split()


def main():
    binary, model = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    words = int(sys.argv[4]) if len(sys.argv) > 4 else 150
    max_tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 16
    rng = random.Random(3)
    tmp = tempfile.mkdtemp(prefix="specula-nr-")
    common = ["-m", model, "-c", "512", "--max-seqs", "2"]
    srv = {"off": Server("off", binary, common, tmp, 2),
           "on": Server("on", binary, common + ["--kv-disk", os.path.join(tmp, "tier")], tmp, 2)}
    secs = {"off": 0.0, "on": 0.0}
    toks = {"off": 0, "on": 0}
    try:
        for i in range(n):
            for name in (("off", "on") if i % 2 == 0 else ("on", "off")):
                prompt = "%s %d: " % (name, i) + " ".join(rng.choice(WORDS) for _ in range(words))
                body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
                t0 = time.monotonic()
                st, _, b = request(srv[name].port, "POST", "/v1/completions", json.dumps(body).encode(),
                                   {"Content-Type": "application/json"}, timeout=300)
                secs[name] += time.monotonic() - t0
                d = json.loads(b)
                toks[name] += d["usage"]["prompt_tokens"] + d["usage"]["completion_tokens"]
        _, m = metrics(srv["on"].port)
        cpu = {}
        for name, sv in srv.items():  # utime + stime of each server process (load-independent work)
            f = open("/proc/%d/stat" % sv.p.pid).read().rsplit(")", 1)[1].split()
            cpu[name] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
            for tid in os.listdir("/proc/%d/task" % sv.p.pid):  # the tier's writer thread alone
                base = "/proc/%d/task/%s/" % (sv.p.pid, tid)
                if open(base + "comm").read().strip() == "kv-disk-writer":
                    f = open(base + "stat").read().rsplit(")", 1)[1].split()
                    cpu["writer"] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        out = {"requests": n, "tok_s_off": toks["off"] / secs["off"], "tok_s_on": toks["on"] / secs["on"],
               "disk_writes": m.get("specula_kv_disk_writes_total"),
               "disk_skipped_queue": m.get('specula_kv_disk_writes_skipped_total{reason="queue_full"}')}
        out["on_over_off"] = out["tok_s_on"] / out["tok_s_off"]
        out["cpu_s_off"], out["cpu_s_on"] = cpu["off"], cpu["on"]
        out["cpu_on_over_off"] = cpu["on"] / cpu["off"]
        out["cpu_s_writer"] = cpu.get("writer")
    finally:
        for s in srv.values():
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
