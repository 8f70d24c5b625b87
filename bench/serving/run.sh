#!/usr/bin/env bash
# bench/serving/run.sh: the serving benchmarks of BENCHMARKS.md. For each
# model and each case (A shared-prefix, B long-output, C saturate) it runs
# `specula bench --compare` twice, each pair on fresh `specula serve`
# children: off vs prefix cache, and speculation (suffix) alone vs both
# optimizations together. Writes bench/serving/results/<model>-<case>-<pair>.{json,md}
# and SVG plots, then bench/serving/results/summary.md (one table per case,
# every configuration side by side with its ratio to "off"; cases of a
# model not run this time are kept from an earlier run).
#   bench/serving/run.sh [bundled] [tinyllama]     (default: both)
set -eu
bin=${SPECULA_BIN:-bin/specula}
out=${OUT:-bench/serving/results}
mkdir -p "$out"
models=${*:-bundled tinyllama}
threads=${THREADS:-2}

run_pair() { # model tag case workload opts -- args...
    local mfile=$1 tag=$2 case=$3 pair=$4 la=$5 a=$6 lb=$7 b=$8; shift 8
    echo "== $tag $case $pair" >&2
    "$bin" bench --compare \
        --serve "-t $threads -m $mfile $a" --label "$la" \
        --serve "-t $threads -m $mfile $b" --label "$lb" \
        "$@" --json "$out/$tag-$case-$pair.json" --md "$out/$tag-$case-$pair.md" --no-progress \
        >"$out/$tag-$case-$pair.txt"
}

for m in $models; do
    if [ "$m" = bundled ]; then
        mf=models/specula-code-target-f16.gguf
        A="--workload shared-prefix --num-requests 16 --concurrency 4 --repeat 2"
        B="--workload long-output --num-requests 8 --concurrency 2 --repeat 2"
        C="--workload saturate --num-requests 64 --repeat 2"
    else
        mf=bench/out/tinyllama-shape-q8_0.gguf
        A="--workload shared-prefix --num-requests 4 --concurrency 2 --prefix-tokens 384 --output-tokens 16 --warmup 1"
        B="--workload long-output --num-requests 2 --concurrency 1 --prompt-tokens 32 --output-tokens 48 --warmup 1"
        C="--workload saturate --num-requests 8 --prompt-tokens 64 --output-tokens 16 --warmup 1"
    fi
    for c in A B C; do
        eval "args=\$$c"
        # shellcheck disable=SC2086
        run_pair "$mf" "$m" "$c" cache off "--no-prefix-cache" cache "" $args
        # shellcheck disable=SC2086
        run_pair "$mf" "$m" "$c" spec spec "--no-prefix-cache --spec suffix" both "--spec suffix" $args
    done
done

/usr/bin/python3 - "$out" bundled tinyllama <<'PY'
import json, sys, os
out, models = sys.argv[1], sys.argv[2:]
rows = [("output_tokens_per_s", "output tokens/s"), ("requests_per_s", "requests/s"),
        ("ttft_p50_ms", "TTFT p50 (ms)"), ("ttft_p99_ms", "TTFT p99 (ms)"),
        ("ttft_cold_p50_ms", "TTFT cold p50 (ms)"), ("ttft_warm_p50_ms", "TTFT warm p50 (ms)"),
        ("tpot_p50_ms", "TPOT p50 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"),
        ("itl_p99_ms", "ITL p99 (ms)"), ("e2e_p50_ms", "E2E p50 (ms)"),
        ("h_tokens_mean", "H_tokens (cached / prompt)"),
        ("acceptance_rate", "acceptance rate"), ("mean_acceptance_length", "mean acceptance length"),
        ("srv_prefill_tokens", "prompt positions computed"), ("srv_prefill_fraction", "... / prompt tokens"),
        ("srv_steps", "engine steps"), ("srv_steps_per_token", "engine steps / generated token"),
        ("srv_preemptions", "preemptions"), ("kv_peak_in_use", "KV in use, peak fraction")]
def fmt(v):
    if v is None: return "-"
    if abs(v) >= 100: return "%.0f" % v
    if abs(v) >= 10: return "%.1f" % v
    return "%.2f" % v if abs(v) >= 1 else "%.3f" % v
with open(os.path.join(out, "summary.md"), "w") as f:
    for m in models:
        for c, name in (("A", "shared-prefix"), ("B", "long-output"), ("C", "saturate")):
            runs = {}
            for pair in ("cache", "spec"):
                p = os.path.join(out, "%s-%s-%s.json" % (m, c, pair))
                if not os.path.exists(p): continue
                for r in json.load(open(p))["metrics"]["runs"]:
                    runs[r["label"]] = r
            order = [k for k in ("off", "cache", "spec", "both") if k in runs]
            if not order: continue
            f.write("#### %s, case %s (%s)\n\n| metric | %s |\n|---|%s\n" % (m, c, name,
                    " | ".join(order), "---|" * len(order)))
            for key, label in rows:
                vals = [runs[k].get(key) for k in order]
                if all(v is None for v in vals): continue
                base = vals[0]
                cells = []
                for v in vals:
                    s = fmt(v)
                    if v is not None and base not in (None, 0) and v is not base:
                        s += " (%.2fx)" % (v / base)
                    cells.append(s)
                f.write("| %s | %s |\n" % (label, " | ".join(cells)))
            ok = all(runs[k]["server_counters"]["reconciled"] for k in order)
            f.write("\nrequests ok: %s; client sums %s the servers' /metrics.\n\n" % (
                ", ".join("%s %d/%d" % (k, runs[k]["requests_ok"], runs[k]["requests"]) for k in order),
                "equal" if ok else "DO NOT equal"))
PY
echo "wrote $out/summary.md" >&2
