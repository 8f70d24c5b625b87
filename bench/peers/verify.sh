#!/usr/bin/env bash
# What a verification pass costs, beside ik_llama.cpp: one pass over 5
# tokens against one token, per engine, in interleaved rounds.
#   ik_llama.cpp: `llama-bench -p 5 -n 16` (-rtr 0 and -rtr 1), best of 3
#     repetitions each: pp5 is one 5-token batch from an empty context, tg16
#     16 single-token steps; pass = 5 / pp5 tokens/s, token = 1 / tg16.
#   Specula: `bin/bench MODEL 2 16 16`: the best of 12 passes of 5 tokens
#     (logits for all 5, as verification needs) and of 1 token, at 16
#     positions of context (JSON: verify_1_ms, verify_ratio["5"]).
# ik's pp5 asks for the last token's logits only, so its pass skips 4 rows
# of the output matrix that Specula's computes: the comparison leans ik's way.
# Per round and model: each engine's pass / token ratio and its pass in ms,
# and Specula's pass over ik's faster pass (< 1: Specula's is faster). A
# ratio within a round is the fair figure (the VM's bandwidth moves).
#   IK_BENCH=/tmp/peers/ik-build/bin/llama-bench [ROUNDS=3] bash bench/peers/verify.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${IK_BENCH:?IK_BENCH: the path to the llama-bench of ik_llama.cpp, see bench/peers/README.md}"
ROUNDS=${ROUNDS:-3}
[ -x bin/bench ] || { echo "verify.sh: bin/bench is missing (make bin/bench)" >&2; exit 1; }
source bench/models.sh
models=("$(bench_model tinyllama q4_k_m)" "$(bench_model tinyllama q8_0)")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for r in $(seq 1 "$ROUNDS"); do
    for M in "${models[@]}"; do
        name=$(basename "$M" .gguf)
        for rtr in 0 1; do
            "$IK_BENCH" -m "$M" -t 2 -p 5 -n 16 -r 3 -rtr "$rtr" -o json 2>/dev/null |
                python3 -c '
import json, sys
d = json.load(sys.stdin)
pp = max(max(x["samples_ts"]) for x in d if x["n_prompt"] == 5)
tg = max(max(x["samples_ts"]) for x in d if x["n_gen"] == 16)
p, t = 5e3 / pp, 1e3 / tg
print(sys.argv[1], sys.argv[2], sys.argv[3], "%.2f %.2f %.3f" % (p, t, p / t))' "$r" "$name" "ik-rtr$rtr" | tee -a "$log"
        done
        bin/bench "$M" 2 16 16 | tail -1 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
t = d["verify_1_ms"]; q = d["verify_ratio"]["5"]
print(sys.argv[1], sys.argv[2], "specula", "%.2f %.2f %.3f" % (t * q, t, q))' "$r" "$name" | tee -a "$log"
    done
done
python3 - "$log" <<'EOF'
import statistics, sys
sys.path.insert(0, "bench/peers")
from peers import spread  # "median x (min-max)", as make bench-peers prints ratios
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, m, e, p, t, q in rows:
    by.setdefault((m, e), []).append((float(p), float(q)))
print("\n| model | engine | 5-token pass, ms (median, range) | pass / token (median, range) |")
print("|---|---|---|---|")
models = sorted({m for _, m, *_ in rows})
for m in models:
    for e in ("ik-rtr0", "ik-rtr1", "specula"):
        v = by.get((m, e))
        if not v:
            continue
        ps, qs = [x[0] for x in v], [x[1] for x in v]
        print("| %s | %s | %.1f (%.1f-%.1f) | %s |" % (
            m, e, statistics.median(ps), min(ps), max(ps), spread(qs)))
print("\n| model | Specula's pass / ik's faster pass, per round | median |")
print("|---|---|---|")
for m in models:
    rs = sorted({r for r, mm, *_ in rows if mm == m}, key=int)
    ratios = []
    for r in rs:
        ik = min(float(p) for rr, mm, e, p, *_ in rows if rr == r and mm == m and e.startswith("ik"))
        sp = [float(p) for rr, mm, e, p, *_ in rows if rr == r and mm == m and e == "specula"][0]
        ratios.append(sp / ik)
    print("| %s | %s | %.2f |" % (m, ", ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
EOF
