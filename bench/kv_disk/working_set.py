#!/usr/bin/env python3
"""working_set.py: documents whose KV together is 4x --kv-mem, requested in
a Zipf mix, through `specula batch --concurrency 1` (requests in order):
H_tokens (cached / prompt tokens), prompt tokens computed and TTFT p50 with
the disk tier off, on, and with a RAM budget that holds everything.

  working_set.py BINARY MODEL [N_DOCS DOC_WORDS N_REQUESTS]
One JSON object on stdout."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

WORDS = ("river stone lantern copper meadow signal harbor velvet orbit cedar maple quartz "
         "ember falcon tundra prism canyon willow saffron glacier beacon thistle cobalt").split()


def main():
    binary, model = sys.argv[1], sys.argv[2]
    n_docs = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    # 100 words: ~300 tokens with the bundled models' tokenizer (300 words
    # made ~900, past -c 512: every request failed)
    words = int(sys.argv[4]) if len(sys.argv) > 4 else 100
    n_req = int(sys.argv[5]) if len(sys.argv) > 5 else 160
    rng = random.Random(7)
    docs = ["document %d. " % d + " ".join(rng.choice(WORDS) for _ in range(words)) for d in range(n_docs)]
    weights = [1.0 / (k + 1) for k in range(n_docs)]  # Zipf, s = 1
    tmp = tempfile.mkdtemp(prefix="specula-ws-")
    reqs = []
    for i in range(n_req):
        d = rng.choices(range(n_docs), weights)[0]
        reqs.append({"id": i, "prompt": docs[d] + " question %d:" % i, "max_tokens": 1, "temperature": 0})
    inp = os.path.join(tmp, "in.jsonl")
    open(inp, "w").write("".join(json.dumps(r) + "\n" for r in reqs))
    # the documents' KV: measured from an unlimited run's blocks
    out = {"docs": n_docs, "requests": n_req}
    common = [binary, "batch", "-m", model, "-f", inp, "--concurrency", "1", "--stats", "-c", "512",
              "-t", os.environ.get("THREADS", "2")]

    def run(name, extra):
        p = subprocess.run(common + extra, capture_output=True, text=True, timeout=3600)
        if p.returncode:
            raise RuntimeError(p.stderr[:500])
        rows = [json.loads(l) for l in p.stdout.splitlines()]
        bad = [r["error"] for r in rows if r.get("error")]
        if bad:
            raise RuntimeError("%s: %d requests failed: %s" % (name, len(bad), bad[0]))
        st = json.loads(p.stderr.strip().splitlines()[-1])
        ttft = sorted(r["ttft_ms"] for r in rows)
        out[name] = {"h_tokens": st["cache_hit_tokens"] / st["cache_query_tokens"],
                     "prefill_tokens": st["prefill_tokens"], "ttft_p50_ms": ttft[len(ttft) // 2],
                     "disk_hit_tokens": st.get("cache_hit_tokens_disk", 0),
                     "disk": st.get("disk")}
        return rows, st

    rows, st = run("unlimited", ["--kv-mem", "1G"])
    bb = st["kv_bytes_total"] / st["blocks_total"]
    doc_tokens = max(r["prompt_tokens"] for r in rows)
    ws_bytes = n_docs * (doc_tokens // 16) * bb
    kv_mem = int(ws_bytes / 4)
    out["working_set_bytes"] = ws_bytes
    out["kv_mem"] = kv_mem
    run("ram_only", ["--kv-mem", str(kv_mem)])
    run("with_disk", ["--kv-mem", str(kv_mem), "--kv-disk", os.path.join(tmp, "tier")])
    out["h_ratio_disk_vs_unlimited"] = out["with_disk"]["h_tokens"] / out["unlimited"]["h_tokens"]
    out["h_ratio_ram_only_vs_unlimited"] = out["ram_only"]["h_tokens"] / out["unlimited"]["h_tokens"]
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
