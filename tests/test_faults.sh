#!/usr/bin/env bash
# test_faults.sh: `specula serve` under faults (tests/faults.py): the model
# file missing or unreadable at start; a --kv-mem too small for one request
# (refused at start, not a hang) and a pool of exactly one context under 4
# concurrent requests; SIGTERM with streams in flight (drained or cancelled
# with a clean final event, exit 0 within a bound, new connections refused);
# a client that reads its stream slowly does not stall the others.
# Prints "RESULT <passed> <failed>".
set -u
dir=${SPECULA_TESTS_DIR:-tests}
out=$(timeout 240 /usr/bin/python3 "$dir/faults.py" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL faults.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
