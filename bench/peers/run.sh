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
#   specula2      $SPECULA2_BENCH --pp-tg when set: another build's bin/bench
#                 (e.g. a commit to compare, built in a git worktree), best
#                 kernels; its tokens/s over this build's, round by round
#   llama         $LLAMA_BENCH -o json
#   ik, ik-rtr    $IK_BENCH -o json, with -rtr 0 and -rtr 1 (run-time
#                 repacking of the weights at load); Specula is judged
#                 against the better of the two per model and phase
# The engines' order turns by one each round, so no engine always runs
# first or last after a model switch. Peers run with their own defaults
# otherwise (ik: flash attention on; llama.cpp b4753: off).
#
# Models (bench/models.sh, cached in bench/out/, random weights): the
# TinyLlama-1.1B shape and the Qwen2-1.5B shape with the 100K-token
# deepseek-llm vocabulary, in Q8_0, Q4_K_M, Q4_0 and Q6_K (bin/mkmodel's
# quantization); and the families, the shapes of Qwen3-0.6B and Qwen3-1.7B
# (Qwen's 152K-token vocabulary) and Gemma-3-1B (the 32K Llama vocabulary in
# place of Gemma's 262K: a smaller output matmul), in Q8_0 and Q4_K_M, made
# from bin/mkmodel's F16 by ik_llama.cpp's llama-quantize ($IK_QUANTIZE, by
# default the llama-quantize beside $IK_BENCH; Gemma's Q4_K_M has Q4_0 and
# Q8_0 where llama-quantize would fall back to Q5_0 and Q6_0, which Specula
# does not read: bench/models.sh says which tensors). Without a llama-quantize
# the default run leaves the families out, with a note. BENCH_PEERS_SHAPES
# takes shape names and the groups "base" (tinyllama qwen2) and "families"
# (qwen3-0.6b qwen3-1.7b gemma3-1b); each shape's default types are in
# bench/models.sh (bench_types_SHAPE).
#
# A shared machine: the peers' threads spin while they wait for each other,
# so another process on a core costs them far more than it costs Specula
# (whose pool works alone when its workers keep stalling): a busy neighbour
# cut ik's decode tenfold in a trial here, Specula's by a third. So every
# run is gated: first the script samples for 1 s how much of all CPU time
# other processes take, and waits while that is above BENCH_QUIET_PCT
# percent (default 10; at most BENCH_QUIET_WAIT_S, default 600 s, per run);
# then it runs, measuring the CPU time other processes took meanwhile (all
# CPU time in /proc/stat minus this script's and its children's); a run
# they took more than BENCH_QUIET_PCT% of is measured again, up to
# BENCH_TRIES times (default 4; the last try is kept, marked "!"). Every
# run's share goes into results.tsv; machine.tsv and the summary have the
# load average, the waits and the repeats per round.
#
# Knobs: BENCH_ROUNDS (4), BENCH_THREADS (2), BENCH_PROMPT (128),
# BENCH_GEN (32), BENCH_PEERS_SHAPES ("base families"), BENCH_PEERS_TYPES
# (every shape's types, in place of each shape's own: "q8_0 q4_k_m q4_0
# q6_k" for base, "q8_0 q4_k_m" for families), IK_QUANTIZE, BENCH_QUIET_PCT
# (100 turns the gate off), BENCH_QUIET_WAIT_S, BENCH_TRIES.
#
# Output, bench/out/peers/: results.tsv (every kept run: tokens/s, cores busy
# in the phase (Specula's CPU s / wall s), wall time, others' share, tries),
# machine.tsv (per round: load average at its
# start and end, seconds waited, runs repeated, others' share of the whole
# round), summary.md and summary.json (medians and spreads), meta/ (each
# engine's first full output: build commit, CPU, settings), logs/ (every
# kept run's output). Each round's tokens/s and ratios are printed when the
# round ends, then the summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/models.sh

rounds=${BENCH_ROUNDS:-4}
threads=${BENCH_THREADS:-2}
n_prompt=${BENCH_PROMPT:-128}
n_gen=${BENCH_GEN:-32}
quiet_pct=${BENCH_QUIET_PCT:-10}
quiet_wait=${BENCH_QUIET_WAIT_S:-600}
tries=${BENCH_TRIES:-4}
export BENCH_QUIET_PCT=$quiet_pct # peers.py marks the runs above it
read -r -a shape_args <<< "${BENCH_PEERS_SHAPES:-base families}"
shapes=()
for s in "${shape_args[@]}"; do
    case $s in
        base) shapes+=(tinyllama qwen2) ;;
        families) shapes+=(qwen3-0.6b qwen3-1.7b gemma3-1b) ;;
        *) shapes+=("$s") ;;
    esac
done
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
if [ -n "${SPECULA2_BENCH:-}" ]; then
    [ -x "$SPECULA2_BENCH" ] || die "SPECULA2_BENCH=$SPECULA2_BENCH is not an executable"
    engines+=(specula2)
fi
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

# the families' quantized files come from ik_llama.cpp's llama-quantize: the
# default run leaves them out when there is none (and none is built yet)
quantizer=${IK_QUANTIZE:-}
[ -n "$quantizer" ] || [ -z "${IK_BENCH:-}" ] || quantizer=$(dirname "$IK_BENCH")/llama-quantize
models=()
for s in "${shapes[@]}"; do
    v=${s//[.-]/_}
    declare -p "bench_shape_$v" > /dev/null 2>&1 || die "unknown shape $s (bench/models.sh)"
    if [ -n "${BENCH_PEERS_TYPES:-}" ]; then
        read -r -a types <<< "$BENCH_PEERS_TYPES"
    else
        declare -n shape_types=bench_types_$v
        types=("${shape_types[@]}")
        unset -n shape_types
    fi
    for t in "${types[@]}"; do
        if [ -z "${BENCH_PEERS_SHAPES:-}" ] && [[ $bench_ik_quantized == *" $s "* ]] &&
            [ ! -s "bench/out/$s-shape-$t.gguf" ] && [ ! -x "$quantizer" ]; then
            echo "note: no llama-quantize (IK_QUANTIZE, or beside IK_BENCH) to make $s $t: left out"
            continue
        fi
        m=$(bench_model "$s" "$t") || die "could not build the $s $t model"
        models+=("$m")
    done
done

rm -rf "$out"
mkdir -p "$out/logs" "$out/meta"
printf 'round\tmodel\tengine\tphase\ttokens_s\tcores\twall_s\tothers_pct\ttries\n' > "$out/results.tsv"
printf 'round\tload_start\tload_end\twaited_s\trepeated\tothers_pct\n' > "$out/machine.tsv"

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
    sleep 1
    others_pct "$a" "$(cpu_ticks)"
}
# wait_quiet: sleeps while other processes take more than quiet_pct% of the
# CPUs (at most quiet_wait s); adds the seconds waited to $waited
wait_quiet() {
    local w=0 busy
    busy=$(sample_others)
    while [ "$busy" -gt "$quiet_pct" ] && [ "$w" -lt "$quiet_wait" ]; do
        sleep 4
        w=$((w + 5))
        busy=$(sample_others)
    done
    [ "$busy" -gt "$quiet_pct" ] && echo "note: other processes still take $busy% of the CPUs after ${w}s: running anyway"
    waited=$((waited + w))
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
        specula2)
            kind=specula
            "$SPECULA2_BENCH" "$model" "$threads" "$n_prompt" "$n_gen" --pp-tg > "$log" 2>&1 || rc=$?
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
    waited=0 repeated=0
    read -r l1 l5 l15 _ < /proc/loadavg
    load_start="$l1 $l5 $l15"
    echo "load average $load_start"
    round_t0=$(cpu_ticks)
    for model in "${models[@]}"; do
        name=$(basename "$model" .gguf)
        name=${name/-shape-/ }
        for ((i = 0; i < n_eng; i++)); do
            engine=${engines[$(((i + r - 1) % n_eng))]}
            log=$out/logs/r$r-$(basename "$model" .gguf)-$engine.txt
            for ((try = 1; try <= tries; try++)); do
                wait_quiet
                a=$(cpu_ticks)
                t0=$(date +%s.%N)
                res=$(run_engine "$engine" "$model" "$log")
                wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
                others=$(others_pct "$a" "$(cpu_ticks)")
                [ "$others" -le "$quiet_pct" ] || [ "$try" = "$tries" ] && break
                echo "$engine on $name: other processes took $others% of the CPUs: measuring again"
                repeated=$((repeated + 1))
            done
            [ -e "$out/meta/$engine.txt" ] || cat "$log" "$log.err" > "$out/meta/$engine.txt" 2> /dev/null || true
            while read -r phase tps cores; do
                printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$engine" "$phase" "$tps" "$cores" \
                    "$wall" "$others" "$try" \
                    >> "$out/results.tsv"
            done <<< "$res"
        done
    done
    during=$(others_pct "$round_t0" "$(cpu_ticks)")
    read -r l1 l5 l15 _ < /proc/loadavg
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$load_start" "$l1 $l5 $l15" "$waited" "$repeated" "$during" >> "$out/machine.tsv"
    echo
    echo "round $r: load average $l1 $l5 $l15 at its end; waited ${waited}s for quiet, $repeated runs measured again;"
    echo "other processes took $during% of all CPU time over the round (waits included)"
    python3 bench/peers/peers.py round "$out/results.tsv" "$r"
done
echo
{
    python3 bench/peers/peers.py summary "$out/results.tsv" "$out/summary.json"
    for e in llama ik; do
        [ -s "$out/meta/$e.txt" ] || continue
        bin=${LLAMA_BENCH:-}   # either peer may be unset (set -u)
        [ "$e" = ik ] && bin=${IK_BENCH:-}
        echo
        echo "$e: $bin, build_commit $(sed -n 's/.*"build_commit": "\([^"]*\)".*/\1/p' "$out/meta/$e.txt" | head -n 1)" \
            "(llama-bench's own field: \"unknown\" when built outside a git checkout)"
    done
    echo
    echo "The machine ($(nproc) CPUs), per round: load average (1, 5, 15 min) at its start and end;"
    echo "seconds waited for other processes to take <= $quiet_pct% of the CPUs; runs measured again;"
    echo "others' share of all CPU time over the round, waits included:"
    echo
    tail -n +2 "$out/machine.tsv" | awk -F '\t' '{ printf "- round %s: load %s -> %s; waited %s s; %s repeated; others %s%%\n", $1, $2, $3, $4, $5, $6 }'
    awk -F '\t' -v q="$quiet_pct" 'NR > 1 && $4 == "pp" { n++; s += $8; if ($8 > q) k++ }
        END { printf "\nOther processes took %.1f%% of the CPUs during the kept runs on average; %d of %d runs kept above %d%% (marked ! in the round tables).\n", s / n, k, n, q }' "$out/results.tsv"
} | tee "$out/summary.md"
echo
echo "bench-peers: written to $out/ (results.tsv, summary.md, summary.json, machine.tsv, meta/, logs/)"
