#!/usr/bin/env bash
# Runs every test binary in $1 (default build/tests) and sums their RESULT
# lines into "N passed, N failed". A binary that dies without a RESULT line
# counts as one failed case. Exit status is non-zero when anything failed.
dir=${1:-build/tests}
passed=0; failed=0
for t in "$dir"/test_*; do
    [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^RESULT '
    res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    if [ -z "$res" ]; then
        echo "FAIL $(basename "$t") exited with status $rc and no result"
        failed=$((failed + 1)); continue
    fi
    set -- $res
    passed=$((passed + $2)); failed=$((failed + $3))
    if [ "$rc" -ne 0 ] && [ "$3" -eq 0 ]; then
        echo "FAIL $(basename "$t") exited with status $rc"; failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
