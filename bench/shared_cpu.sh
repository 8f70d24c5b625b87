#!/bin/bash
# bench/shared_cpu.sh [MODEL]: decode tokens/s with 1 and 2 threads, alone
# and with one busy process beside it (`yes > /dev/null`), for each binary
# in $BINS (default bin/specula), alternated within each round so that the
# machine's drift hits them alike. ROUNDS (3) and N (200 tokens) as given.
# BINS="OLD NEW" compares two builds (two thread pools, say) on the same
# machine at the same time.
set -u
M=${1:-models/specula-code-target-f16.gguf}
BINS=${BINS:-bin/specula}
ROUNDS=${ROUNDS:-3}
N=${N:-200}
run() { "$1" run -m "$M" -p "def fibonacci(n):" -n "$N" --temp 0 --ignore-eos -t "$2" -c 256 2>&1 >/dev/null |
        grep -o "decode [0-9]* tokens at [0-9.]*" | awk '{print $5}'; }
for round in $(seq "$ROUNDS"); do
    for busy in 0 1; do
        yp=""
        if [ "$busy" = 1 ]; then yes >/dev/null & yp=$!; sleep 0.5; fi
        for t in 1 2; do
            line="round $round busy=$busy threads=$t"
            for b in $BINS; do line="$line $(basename "$(dirname "$(dirname "$b")")")/$(basename "$b")=$(run "$b" "$t")"; done
            echo "$line"
        done
        [ -n "$yp" ] && { kill "$yp"; wait "$yp" 2>/dev/null; }
    done
done
