#!/usr/bin/env bash
# `make bench`: builds TinyLlama-1.1B-shaped models (n_embd 2048, 22 layers,
# 32 heads / 4 KV heads, n_ff 5632, 32000-token Llama vocabulary) in Q8_0
# and Q4_K with bin/mkmodel, then measures them with bin/bench on 2 threads.
# Models are cached in bench/out/ (about 1.8 GB); delete it to rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
vocab=${SPECULA_REF_DIR:-../shared/reference}/vocab/ggml-vocab-llama-spm.gguf
shape=(--arch llama --n-embd 2048 --n-layer 22 --n-head 32 --n-head-kv 4 --n-ff 5632 --ctx 2048 --seed 1)
for t in q8_0 q4_k; do
    f=$out/tinyllama-shape-$t.gguf
    if [ ! -s "$f" ]; then
        echo "building $f"
        bin/mkmodel -o "$f.tmp" --vocab-from "$vocab" --type "$t" "${shape[@]}" --name "tinyllama-shape-$t"
        mv "$f.tmp" "$f"
    fi
done
threads=${BENCH_THREADS:-2}
for t in q8_0 q4_k; do
    echo
    echo "## tinyllama-shape-$t, $threads threads"
    echo
    echo "| metric | value |"
    echo "|---|---|"
    bin/bench "$out/tinyllama-shape-$t.gguf" "$threads" 128 32 | tee "$out/bench-$t.txt" | grep '^|'
    tail -n 1 "$out/bench-$t.txt" > "$out/bench-$t.json"
done
