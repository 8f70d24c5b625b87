#!/bin/bash
# Teacher-forces llama.cpp on the reference records with the prompt fed in
# ubatches of each size given (0: the whole prompt in one decode), then
# compares with ../shared/reference/generations.jsonl. Measurement only:
# llama.cpp is built outside this tree and nothing of it comes into it.
#   LCPP=/path/to/llama.cpp (source, built with cmake into $LCPP/build)
#   WORK=/tmp/lcpp (outputs)   REF=../shared/reference
# usage: bench/peers/llamacpp_batching/run.sh 0 1 2 32
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${LCPP:?set LCPP to a llama.cpp source tree built with cmake into \$LCPP/build}"
export WORK=${WORK:-/tmp/lcpp} REF=$(cd "${REF:-$here/../../../../shared/reference}" && pwd)
mkdir -p "$WORK/data" "$WORK/out"
g++ -O2 -std=c++17 "$here/tf.cpp" -I "$LCPP/include" -I "$LCPP/ggml/include" -L "$LCPP/build/bin" \
    -lllama -lggml -lggml-base -Wl,-rpath,"$LCPP/build/bin" -o "$WORK/tf"
python3 "$here/mkrecords.py"
for ub in "$@"; do
    for m in ref-llama-spm-f16 ref-llama-spm-q8_0 ref-qwen2-gpt2-q4_0 ref-llama-spm-q4_k_m; do
        "$WORK/tf" "$REF/models/$m.gguf" "$WORK/data/$m.txt" "$ub" "$WORK/out/$m.ub$ub.jsonl" 2>"$WORK/out/$m.ub$ub.log"
    done
done
python3 "$here/compare.py" $(for ub in "$@"; do printf 'ub%s ' "$ub"; done)
