#!/usr/bin/env bash
# `make bench`: builds TinyLlama-1.1B-shaped models (n_embd 2048, 22 layers,
# 32 heads / 4 KV heads, n_ff 5632, 32000-token Llama vocabulary) in Q8_0
# and Q4_K with bin/mkmodel, then measures them with bin/bench on 2 threads;
# then the serving engine with bin/bench_engine (prefix cache on a shared
# document, continuous batching) on the Q8_0 one, and on the bundled target
# model (models/specula-code-target-f16.gguf) when it exists; then
# speculative decoding with bin/bench_spec (replay on the Q8_0 one, the three
# workloads on the bundled pair when it exists).
# Models are cached in bench/out/ (about 1.8 GB); delete it to rebuild.
# BENCH_ENGINE=0 skips the engine runs, BENCH_SPEC=0 the speculation runs,
# BENCH_SERVER=0 the HTTP server runs.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
source bench/models.sh
for t in q8_0 q4_k; do
    bench_model tinyllama "$t" > /dev/null
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
# attention grows with the context: decode and the verification passes again
# after 1,900 positions (the prefill row stays the 128-token prompt's)
echo
echo "## tinyllama-shape-q4_k at depth 1900, $threads threads"
echo
echo "| metric | value |"
echo "|---|---|"
bin/bench "$out/tinyllama-shape-q4_k.gguf" "$threads" 128 16 --depth 1900 | tee "$out/bench-q4_k-depth.txt" | grep '^|'
tail -n 1 "$out/bench-q4_k-depth.txt" > "$out/bench-q4_k-depth.json"

# The serving engine. Each run writes bench/out/engine-NAME.txt (the
# tables) and engine-NAME.json (its last line). --cold-runs bounds how many
# cache-off (cold) requests are timed: a cold request is the long part.
engine_bench() { # NAME MODEL ARGS...
    local name=$1 model=$2
    shift 2
    echo
    echo "## engine: $name, $threads threads"
    echo
    bin/bench_engine "$model" -t "$threads" "$@" > "$out/engine-$name.txt"
    grep -v '^{' "$out/engine-$name.txt"
    tail -n 1 "$out/engine-$name.txt" > "$out/engine-$name.json"
}
if [ "${BENCH_ENGINE:-1}" != 0 ]; then
    # TinyLlama shape: the shared document (8 requests, one common prefix
    # and a suffix each) scaled to its 2048-token context (1,920 + 128
    # tokens), and batching at 1..64 requests.
    engine_bench tinyllama-shape-q8_0 "$out/tinyllama-shape-q8_0.gguf" \
        --shared-doc 1920,128,8 --cold-runs 3 --batching 32,1,4,16,64
    target=models/specula-code-target-f16.gguf
    if [ -s "$target" ]; then
        engine_bench target-f16 "$target" --shared-doc 7680,512,8 --cold-runs 3 \
            --no-reuse 32,256,32,8 --reps 3 --batching 32,1,4,16,64
    else
        echo
        echo "(skipped the engine benchmark of $target: the file does not exist yet)"
    fi
fi

# Speculative decoding. Each run writes bench/out/spec-NAME.txt (the
# tables) and spec-NAME.json (its last line). bench_spec exits 1 when an
# output differs from spec off (greedy decoding must be identical): the tables
# are still written, and this script exits 1 at the end.
spec_failed=0
spec_bench() { # NAME MODEL ARGS...
    local name=$1 model=$2 rc=0
    shift 2
    echo
    echo "## speculative decoding: $name, $threads threads"
    echo
    bin/bench_spec "$model" -t "$threads" "$@" > "$out/spec-$name.txt" || rc=$?
    grep -v '^{' "$out/spec-$name.txt" || true
    tail -n 1 "$out/spec-$name.txt" > "$out/spec-$name.json"
    if [ "$rc" != 0 ]; then
        echo
        echo "**bench_spec $name failed (exit $rc)**"
        spec_failed=1
    fi
}
if [ "${BENCH_SPEC:-1}" != 0 ]; then
    # Replay: the recorded greedy continuation proposed with per-token accuracy
    # ALPHA, k fixed; measured speedup vs (1 - ALPHA^(k+1)) / (1 - ALPHA).
    spec_bench replay-tinyllama-shape-q8_0 "$out/tinyllama-shape-q8_0.gguf" \
        --replay 0.5,0.7,0.8,0.9 --ks 2,4,8 --replay-prompt 64 --replay-gen 96
    target=models/specula-code-target-f16.gguf
    draft=models/specula-code-draft-f16.gguf
    if [ -s "$target" ] && [ -s "$draft" ]; then
        # the workloads are cut from the held-out split of the training corpus
        [ -s build/corpus/heldout.txt ] || /usr/bin/python3 tools/train/corpus.py --out build/corpus
        spec_bench workloads-code-pair "$target" --draft "$draft" --workloads build/corpus \
            --proposers off,ngram,suffix,draft --concurrency 1,4,16
    else
        echo
        echo "(skipped the speculative workloads: $target or $draft does not exist yet)"
    fi
fi

# Structured output: compile time of a tool schema, mask time per
# token over decode time, constrained vs unconstrained tokens/s and what
# n-gram speculation with jump-forward adds, on the TinyLlama-shaped Q8_0
# model (32,000 tokens), a model of deepseek-llm's 102,400-token vocabulary
# (mkmodel, a small shape: the mask's share is largest where decoding is
# cheap) and the bundled model; BENCH_GRAMMAR=0 skips it.
if [ "${BENCH_GRAMMAR:-1}" != 0 ]; then
    big=$out/grammar-deepseek-llm.gguf
    [ -s "$big" ] || bin/mkmodel -o "$big" --vocab-from "${SPECULA_REF_DIR:-../shared/reference}/vocab/ggml-vocab-deepseek-llm.gguf" \
        --n-embd 512 --n-layer 8 --n-head 8 --n-head-kv 4 --n-ff 1376 --ctx 1024 --type q8_0
    for m in "$out/tinyllama-shape-q8_0.gguf" "$big" models/specula-code-target-f16.gguf; do
        [ -s "$m" ] || continue
        echo
        echo "## structured output: $(basename "$m" .gguf), $threads threads"
        echo
        name=$(basename "$m" .gguf)
        bin/bench_grammar "$m" -t "$threads" -n 4 > "$out/grammar-$name.txt" || spec_failed=1
        grep '^|' "$out/grammar-$name.txt"
        tail -n 1 "$out/grammar-$name.txt" > "$out/grammar-$name.json"
    done
fi

# The HTTP server: wrk against /v1/completions at 1, 8 and 32
# connections, and the delivery overhead per streamed token
# (bench/server/run.sh; BENCH_SERVER=0 skips it).
[ "${BENCH_SERVER:-1}" = 0 ] || bench/server/run.sh || spec_failed=1
exit "$spec_failed"
