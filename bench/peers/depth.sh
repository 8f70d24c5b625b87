#!/usr/bin/env bash
# Decode with context beside ik_llama.cpp: per round and model, ik's
# `llama-bench -gp D,16` (16 tokens after a D-token prompt; its defaults,
# flash attention on) with -rtr 0 and -rtr 1, best of 2 repetitions, then
# Specula's `bin/bench MODEL 2 128 16 --depth D` (best of 7 rounds of 16
# tokens). One line per run; the ratio within a round is the fair figure.
#   IK_BENCH=/tmp/peers/ik-build/bin/llama-bench [D=1900] [ROUNDS=5] [KV=f16|q8_0]
#     [MODELS="tinyllama:q4_k_m tinyllama:q8_0"] bash bench/peers/depth.sh
# KV: both engines' K/V cache type (ik: -ctk/-ctv, flash attention on;
# Specula: --kv); the fill rate of the D positions is printed too.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${IK_BENCH:?IK_BENCH: the path to the llama-bench of ik_llama.cpp, see bench/peers/README.md}"
D=${D:-1900}
ROUNDS=${ROUNDS:-5}
KV=${KV:-f16}
source bench/models.sh
models=()
for mt in ${MODELS:-tinyllama:q4_k_m tinyllama:q8_0}; do models+=("$(bench_model "${mt%%:*}" "${mt##*:}")"); done
for r in $(seq 1 "$ROUNDS"); do
    for M in "${models[@]}"; do
        for rtr in 0 1; do
            v=$("$IK_BENCH" -m "$M" -t 2 -gp "$D,16" -p 0 -n 0 -r 2 -rtr "$rtr" -ctk "$KV" -ctv "$KV" -fa 1 -o json 2>/dev/null |
                python3 -c 'import json,sys; print(max(json.load(sys.stdin)[0]["samples_ts"]))')
            echo "round $r $(basename "$M") ik-rtr$rtr kv $KV tg16@$D $v"
        done
        v=$(bin/bench "$M" 2 128 16 --depth "$D" --kv "$KV" | tail -1 |
            python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["decode_tps"], d["verify_ratio"]["5"], "fill", d["fill_tps"])')
        echo "round $r $(basename "$M") specula kv $KV tg16@$D $v"
    done
done
