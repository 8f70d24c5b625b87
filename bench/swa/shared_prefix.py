#!/usr/bin/env python3
"""bench/swa/shared_prefix.py: a shared-prefix workload on a sliding-window
model against the same model with full attention (BENCHMARKS.md, "Sliding
window").

bin/mkmodel writes two Gemma 3 shaped files from the same seed: one whose
sliding layers (five of every six) see a window of --window positions, one
whose window covers the whole context (Specula then runs every layer as
global attention). `specula batch` sends N requests that share a long
document and differ in their last line, C at a time, to each; reported per
model: H_tokens (cached prompt tokens / prompt tokens), the first request's
TTFT, the median TTFT of the others, the KV pool bytes the engine set aside
for --max-seqs C sequences of --ctx positions (`--stats`: kv_bytes_total,
the window pool's share), and whether both models' greedy tokens agree on
requests that fit in one window (they must; past it the models differ).

usage: bench/swa/shared_prefix.py [--bin bin/specula] [--mkmodel bin/mkmodel]
         [--vocab ../shared/reference/vocab/ggml-vocab-llama-spm.gguf]
         [--window 256] [--doc-words 250] [--requests 12] [--concurrency 1]
         [--ctx 4096] [--shape small|gemma3-1b] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SHAPES = {  # n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff
    "small": (512, 12, 8, 4, 64, 1536),
    "gemma3-1b": (1152, 26, 4, 1, 256, 6912),
}


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit("shared_prefix: %s failed (%d): %s" % (" ".join(cmd[:3]), p.returncode, p.stderr[-1500:]))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--mkmodel", default="bin/mkmodel")
    ap.add_argument("--vocab", default="../shared/reference/vocab/ggml-vocab-llama-spm.gguf")
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--doc-words", type=int, default=250)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--shape", default="small", choices=sorted(SHAPES))
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shared_prefix.")
    E, L, H, Hk, D, F = SHAPES[a.shape]
    models = {}
    for name, win in (("sliding", a.window), ("full", 10 * a.ctx)):
        path = os.path.join(tmp, name + ".gguf")
        run([a.mkmodel, "-o", path, "--vocab-from", a.vocab, "--arch", "gemma3", "--type", "f16",
             "--n-embd", str(E), "--n-layer", str(L), "--n-head", str(H), "--n-head-kv", str(Hk),
             "--head-dim", str(D), "--n-ff", str(F), "--tied", "--swa", str(win), "--ctx", str(a.ctx),
             "--seed", "7"])
        models[name] = path
    words = " ".join("item%d is %d;" % (i, (i * 37) % 101) for i in range(a.doc_words))
    prompts = os.path.join(tmp, "prompts.jsonl")
    with open(prompts, "w") as f:
        for i in range(a.requests):
            f.write(json.dumps({"id": "q%d" % i, "prompt": words + "\nQuestion %d: what is item%d?" % (i, i * 7),
                                "max_tokens": a.gen, "temperature": 0}) + "\n")
    out = {}
    for name, path in models.items():
        p = run([a.bin, "batch", "-m", path, "-f", prompts, "--concurrency", str(a.concurrency),
                 "--max-seqs", str(a.concurrency), "-c", str(a.ctx), "-t", "2", "--spec", "off", "--stats"])
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        eng = [json.loads(l) for l in p.stderr.splitlines() if l.startswith("{")]
        st = next((s for s in eng if "kv_bytes_total" in s), {})
        prompt = sum(r["prompt_tokens"] for r in rows)
        cached = sum(r["cached_tokens"] for r in rows)
        out[name] = {
            "prompt_tokens_per_request": rows[0]["prompt_tokens"],
            "h_tokens": round(cached / prompt, 4),
            "ttft_first_ms": round(rows[0]["ttft_ms"], 1),
            "ttft_rest_p50_ms": round(statistics.median(r["ttft_ms"] for r in rows[a.concurrency:]), 2),
            "kv_bytes_total": st.get("kv_bytes_total"),
            "kv_bytes_window": st.get("kv_bytes_window"),
            "window_blocks_total": st.get("window_blocks_total"),
            "tokens": [r["tokens"] for r in rows],
        }
    s, f = out["sliding"], out["full"]
    print(json.dumps({k: v for k, v in s.items() if k != "tokens"}))
    print(json.dumps({k: v for k, v in f.items() if k != "tokens"}))
    print("KV pool, sliding / full: %.3f; H_tokens %.3f / %.3f; TTFT after the first, p50: %.2f / %.2f ms"
          % (s["kv_bytes_total"] / f["kv_bytes_total"], s["h_tokens"], f["h_tokens"],
             s["ttft_rest_p50_ms"], f["ttft_rest_p50_ms"]))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
