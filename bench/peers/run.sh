#!/usr/bin/env bash
# `make bench-peers`: Specula beside ik_llama.cpp and llama.cpp, in one run,
# on the same GGUF files and the same threads, in interleaved rounds.
#
#   IK_BENCH=/path/to/ik_llama.cpp/build/bin/llama-bench
#   LLAMA_BENCH=/path/to/llama.cpp/build/bin/llama-bench
#   make bench-peers            (or bench/peers/run.sh from anywhere)
#
# Either peer may be left unset: its columns are skipped, with a note. The
# peers are built outside this tree, for measurement only (bench/peers/README.md).
#
# The workload is llama-bench's `-p 128 -n 32 -r 1`: prefill tokens/s of a
# 128-token prompt (pp), decode tokens/s of 32 single-token steps from an
# empty context (tg). Specula runs it as `bin/bench MODEL T 128 32 --pp-tg`
# (bench/model/bench.c), which does exactly what llama-bench does (one
# warm-up prompt and token, then one timed prompt with only the last token's
# logits, then the timed steps from position 0 with their logits), in the
# same kind of process (load, one context, two timed tests). `specula run`
# would time a chat prompt's length, the sampler and the detokenizer too,
# and its decode starts after the prompt: not the same measurement.
#
# Engines, in every round, one after another on each model:
#   specula       bin/bench --pp-tg, the CPU's best kernels
#   specula-avx2  the same with SPECULA_KERNELS=avx2 (the AVX2 level, forced)
#   llama         $LLAMA_BENCH -o json
#   ik, ik-rtr    $IK_BENCH -o json, with -rtr 0 and -rtr 1 (run-time
#                 repacking of the weights at load); Specula is judged
#                 against the better of the two per model and phase
# The engines' order turns by one each round, so no engine always runs
# first or last after a model switch. Peers run with their own defaults
# otherwise (ik: flash attention on; llama.cpp b4753: off).
#
# Models (bench/models.sh, cached in bench/out/): the TinyLlama-1.1B shape
# and the Qwen2-1.5B shape with the 100K-token deepseek-llm vocabulary, in
# Q8_0, Q4_K_M, Q4_0 and Q6_K.
#
# A shared machine: the peers' threads spin while they wait for each other,
# so another process on a core costs them far more than it costs Specula
# (whose pool works alone when its workers keep stalling). Before each round
# the script samples, for 2 s, how much of the CPUs other processes use, and
# waits (up to BENCH_QUIET_WAIT_S, default 900 s, then runs anyway and says
# so) until that is at most BENCH_QUIET_PCT percent (default 15; 100 turns
# the wait off). During each round it measures the CPU time other processes
# took (all CPU time in /proc/stat minus this script's and its children's):
# both go into machine.tsv and the summary, with the load average.
#
# Knobs: BENCH_ROUNDS (4), BENCH_THREADS (2), BENCH_PROMPT (128),
# BENCH_GEN (32), BENCH_PEERS_SHAPES ("tinyllama qwen2"),
# BENCH_PEERS_TYPES ("q8_0 q4_k_m q4_0 q6_k"), BENCH_QUIET_PCT,
# BENCH_QUIET_WAIT_S.
#
# Output, bench/out/peers/: results.tsv (every run), machine.tsv (per round:
# load average before it, others' CPU share before and during it),
# summary.md and summary.json (medians and spreads), meta/ (each engine's
# first full output: build commit, CPU, settings), logs/ (every run's
# output). Each round's tokens/s and ratios are printed when the round ends,
# then the summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/models.sh

rounds=${BENCH_ROUNDS:-4}
threads=${BENCH_THREADS:-2}
n_prompt=${BENCH_PROMPT:-128}
n_gen=${BENCH_GEN:-32}
quiet_pct=${BENCH_QUIET_PCT:-15}
quiet_wait=${BENCH_QUIET_WAIT_S:-900}
read -r -a shapes <<< "${BENCH_PEERS_SHAPES:-tinyllama qwen2}"
read -r -a types <<< "${BENCH_PEERS_TYPES:-q8_0 q4_k_m q4_0 q6_k}"
out=bench/out/peers

die() {
    echo "bench-peers: $*" >&2
    exit 1
}
for b in bin/bench bin/mkmodel; do
    [ -x "$b" ] || die "$b is missing (make bin/bench bin/mkmodel)"
done
command -v python3 > /dev/null || die "python3 is missing (it parses and tabulates the runs)"

engines=(specula specula-avx2)
if [ -n "${LLAMA_BENCH:-}" ]; then
    [ -x "$LLAMA_BENCH" ] || die "LLAMA_BENCH=$LLAMA_BENCH is not an executable"
    engines+=(llama)
else
    echo "note: LLAMA_BENCH is not set: no llama.cpp columns"
fi
if [ -n "${IK_BENCH:-}" ]; then
    [ -x "$IK_BENCH" ] || die "IK_BENCH=$IK_BENCH is not an executable"
    engines+=(ik ik-rtr)
else
    echo "note: IK_BENCH is not set: no ik_llama.cpp columns"
fi

models=()
for s in "${shapes[@]}"; do
    for t in "${types[@]}"; do
        models+=("$(bench_model "$s" "$t")")
    done
done

rm -rf "$out"
mkdir -p "$out/logs" "$out/meta"
printf 'round\tmodel\tengine\tphase\ttokens_s\twall_s\n' > "$out/results.tsv"
printf 'round\tload1\tload5\tload15\twaited_s\tothers_pct_before\tothers_pct_during\n' > "$out/machine.tsv"

# cpu_ticks: "BUSY TOTAL OURS": busy and all clock ticks of every CPU since
# boot (/proc/stat), and the CPU ticks of this script and its waited-for
# children (/proc/$$/stat utime, stime, cutime, cstime)
cpu_ticks() {
    local cpu us ni sy id io rest st
    read -r cpu us ni sy id io rest < /proc/stat
    read -r -a st < "/proc/$$/stat"
    local irq sirq steal
    read -r irq sirq steal _ <<< "$rest"
    echo "$((us + ni + sy + irq + sirq + steal)) $((us + ni + sy + id + io + irq + sirq + steal))" \
        "$((st[13] + st[14] + st[15] + st[16]))"
}
# others_pct A B: percent of all CPU time between two cpu_ticks samples that
# other processes used
others_pct() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
        d = y[2] - x[2]; o = (y[1] - x[1]) - (y[3] - x[3]); if (o < 0) o = 0;
        printf "%.0f", (d > 0 ? 100 * o / d : 0) }'
}
sample_others() {
    local a
    a=$(cpu_ticks)
    sleep 2
    others_pct "$a" "$(cpu_ticks)"
}

# run_engine ENGINE MODEL LOG: runs one engine's pp and tg on MODEL, its
# whole output in LOG; prints "pp TPS" and "tg TPS".
run_engine() {
    local engine=$1 model=$2 log=$3 kind=llama rc=0
    local common=(-m "$model" -p "$n_prompt" -n "$n_gen" -t "$threads" -r 1 -o json)
    case $engine in
        specula)
            kind=specula
            bin/bench "$model" "$threads" "$n_prompt" "$n_gen" --pp-tg > "$log" 2>&1 || rc=$?
            ;;
        specula-avx2)
            kind=specula
            SPECULA_KERNELS=avx2 bin/bench "$model" "$threads" "$n_prompt" "$n_gen" --pp-tg > "$log" 2>&1 || rc=$?
            grep -q '"kernels": "avx2"' "$log" || die "SPECULA_KERNELS=avx2 was not taken (see $log)"
            ;;
        llama) "$LLAMA_BENCH" "${common[@]}" > "$log" 2> "$log.err" || rc=$? ;;
        ik) "$IK_BENCH" "${common[@]}" -rtr 0 > "$log" 2> "$log.err" || rc=$? ;;
        ik-rtr) "$IK_BENCH" "${common[@]}" -rtr 1 > "$log" 2> "$log.err" || rc=$? ;;
    esac
    if [ "$rc" != 0 ]; then
        tail -n 20 "$log" "$log.err" 2> /dev/null >&2 || true
        die "$engine on $model failed (exit $rc); its output is in $log"
    fi
    python3 bench/peers/peers.py parse "$kind" "$log"
}

echo "bench-peers: ${#models[@]} models, engines: ${engines[*]}, $rounds rounds, $threads threads, pp$n_prompt tg$n_gen"
n_eng=${#engines[@]}
for ((r = 1; r <= rounds; r++)); do
    echo
    echo "== round $r/$rounds"
    waited=0
    busy=$(sample_others)
    while [ "$busy" -gt "$quiet_pct" ] && [ "$waited" -lt "$quiet_wait" ]; do
        [ "$waited" = 0 ] && echo "other processes use $busy% of the CPUs: waiting for <= $quiet_pct% (at most ${quiet_wait}s)"
        sleep 8
        waited=$((waited + 10))
        busy=$(sample_others)
    done
    [ "$busy" -gt "$quiet_pct" ] && echo "note: still $busy% after ${waited}s: running round $r anyway"
    read -r l1 l5 l15 _ < /proc/loadavg
    echo "before round $r: load average $l1 $l5 $l15, other processes $busy% of the CPUs (waited ${waited}s)"
    round_t0=$(cpu_ticks)
    for model in "${models[@]}"; do
        name=$(basename "$model" .gguf)
        name=${name/-shape-/ }
        for ((i = 0; i < n_eng; i++)); do
            engine=${engines[$(((i + r - 1) % n_eng))]}
            log=$out/logs/r$r-$(basename "$model" .gguf)-$engine.txt
            t0=$(date +%s.%N)
            res=$(run_engine "$engine" "$model" "$log")
            wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
            [ -e "$out/meta/$engine.txt" ] || cat "$log" "$log.err" > "$out/meta/$engine.txt" 2> /dev/null || true
            while read -r phase tps; do
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$engine" "$phase" "$tps" "$wall" >> "$out/results.tsv"
            done <<< "$res"
        done
    done
    during=$(others_pct "$round_t0" "$(cpu_ticks)")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$l1" "$l5" "$l15" "$waited" "$busy" "$during" >> "$out/machine.tsv"
    echo
    echo "during round $r: other processes used $during% of the CPUs"
    python3 bench/peers/peers.py round "$out/results.tsv" "$r"
done
echo
{
    python3 bench/peers/peers.py summary "$out/results.tsv" "$out/summary.json"
    for e in llama ik; do
        [ -s "$out/meta/$e.txt" ] || continue
        bin=$LLAMA_BENCH
        [ "$e" = ik ] && bin=$IK_BENCH
        echo
        echo "$e: $bin, build_commit $(sed -n 's/.*"build_commit": "\([^"]*\)".*/\1/p' "$out/meta/$e.txt" | head -n 1)" \
            "(llama-bench's own field: \"unknown\" when built outside a git checkout)"
    done
    echo
    echo "The machine ($(nproc) CPUs), per round: load average (1, 5, 15 min) before it; share of all"
    echo "CPU time other processes used in the 2 s before it and during it:"
    echo
    tail -n +2 "$out/machine.tsv" | awk -F '\t' '{ printf "- round %s: load %s %s %s; others %s%% before, %s%% during\n", $1, $2, $3, $4, $6, $7 }'
} | tee "$out/summary.md"
echo
echo "bench-peers: written to $out/ (results.tsv, summary.md, summary.json, machine.tsv, meta/, logs/)"
