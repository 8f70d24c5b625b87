#!/usr/bin/env bash
# test_faults.sh: `specula serve` under faults (tests/server/faults.py): the model
# file missing or unreadable at start; a --kv-mem too small for one request
# (refused at start, not a hang) and a pool of exactly one context under 4
# concurrent requests; SIGTERM with streams in flight (drained or cancelled
# with a clean final event, exit 0 within a bound, new connections refused);
# a client that reads its stream slowly does not stall the others.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
dir=${SPECULA_TESTS_DIR:-tests/server}
run_driver faults.py 240 /usr/bin/python3 "$dir/faults.py"
