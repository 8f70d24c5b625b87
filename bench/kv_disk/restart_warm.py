#!/usr/bin/env python3
"""restart_warm.py: TTFT of a request whose long shared prefix comes from the
disk tier after a server restart, against a cold request and a RAM hit.

  restart_warm.py BINARY MODEL PREFIX_TOKENS [THREADS]

1. server with --kv-disk DIR (empty): request A (prefix + tail 0): cold
2. same server: request B (prefix + tail 1): RAM hit
3. server stopped (graceful), started again on DIR: request C (prefix + tail
   2): served from disk (restart-warm)
4. a server without the tier, fresh: request D (prefix + tail 3): cold again
   (the tier's write cost is not in the cold number of step 1 either: writes
   are in the background)
Then no reuse: N distinct prompts, sequentially, tier on and off: tokens/s.
TTFT is the server's own (specula.ttft_ms). One JSON object on stdout."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lib"))
from harness import Server, metrics, request  # noqa: E402

WORDS = ("river stone lantern copper meadow signal harbor velvet orbit cedar maple quartz "
         "ember falcon tundra prism canyon willow saffron glacier beacon thistle cobalt").split()


def text(n_words, seed):
    s, out = seed, []
    for _ in range(n_words):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(WORDS[(s >> 33) % len(WORDS)])
    return " ".join(out)


def complete(srv, prompt, max_tokens=1):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    st, _, b = request(srv.port, "POST", "/v1/completions", json.dumps(body).encode(),
                       {"Content-Type": "application/json"}, timeout=900)
    if st != 200:
        raise RuntimeError("status %d: %s" % (st, b[:200]))
    d = json.loads(b)
    return {"ttft_ms": d["specula"]["ttft_ms"], "prompt_tokens": d["usage"]["prompt_tokens"],
            "cached": d["usage"]["prompt_tokens_details"]["cached_tokens"],
            "cached_disk": d["specula"]["cached_tokens_disk"], "text": d["choices"][0]["text"]}


def main():
    binary, model, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    tmp = tempfile.mkdtemp(prefix="specula-kvdisk-bench-")
    tier = os.path.join(tmp, "tier")
    common = ["-m", model, "-c", "2048", "--max-seqs", "2"]
    out = {"prefix_tokens_wanted": want}
    try:
        s = Server("a", binary, common + ["--kv-disk", tier], tmp, threads)
        n_words = want
        for _ in range(6):  # fit the prefix to `want` tokens
            st, _, b = request(s.port, "POST", "/tokenize", json.dumps({"prompt": text(n_words, 1)}).encode())
            n = json.loads(b)["count"]
            if abs(n - want) <= 8:
                break
            n_words = max(1, n_words * want // n)
        prefix = text(n_words, 1)
        tails = [" question %d: what comes next?" % i for i in range(4)]
        out["cold"] = complete(s, prefix + tails[0])
        out["ram_hit"] = complete(s, prefix + tails[1])
        time.sleep(1)
        _, m = metrics(s.port)
        out["written_blocks"] = m.get("specula_kv_disk_writes_total")
        s.stop()
        t0 = time.monotonic()
        s = Server("b", binary, common + ["--kv-disk", tier], tmp, threads)
        out["restart_s"] = time.monotonic() - t0
        out["restart_warm"] = complete(s, prefix + tails[2])
        _, m = metrics(s.port)
        out["restored_blocks"] = m.get("specula_kv_disk_restored_blocks_total")
        out["restore_s"] = m.get("specula_kv_disk_restore_seconds_total")
        out["declined"] = m.get("specula_kv_disk_restores_declined_total")
        s.stop()
        s = Server("c", binary, common, tmp, threads)
        out["cold_no_tier"] = complete(s, prefix + tails[3])
        s.stop()
        out["restart_warm_over_cold"] = out["restart_warm"]["ttft_ms"] / out["cold_no_tier"]["ttft_ms"]
        out["ram_hit_over_cold"] = out["ram_hit"]["ttft_ms"] / out["cold"]["ttft_ms"]
        # no reuse: distinct prompts (~200 tokens each, 8 output tokens), tier on vs off
        nr = int(os.environ.get("NO_REUSE_N", "6"))
        for name, extra in (("off", []), ("on", ["--kv-disk", os.path.join(tmp, "tier2")])):
            s = Server("nr-" + name, binary, common + extra, tmp, threads)
            complete(s, text(50, 999), 2)  # warm-up
            t0 = time.monotonic()
            toks = 0
            for i in range(nr):
                r = complete(s, text(200, 100 + i), 8)
                toks += r["prompt_tokens"] + 8
            out["no_reuse_tok_s_" + name] = toks / (time.monotonic() - t0)
            s.stop()
        out["no_reuse_on_over_off"] = out["no_reuse_tok_s_on"] / out["no_reuse_tok_s_off"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
