#!/usr/bin/env bash
# test_soak.sh: a short run of the soak test (tests/soak/soak.py): 20 s of
# mixed streaming load with abandoned streams, tenants, every speculative
# method and a KV pool small enough to evict and preempt, then the audit
# (well-formed answers, greedy == alone, every block back, /metrics
# reconciles, clean SIGTERM exit). `make soak` runs it for minutes.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
if /usr/bin/python3 tests/soak/soak.py --bin "$bin" --seconds "${SOAK_SECONDS:-20}" --clients 8 \
    --verify 12; then
    ok soak
else
    fail soak "see above"
fi
finish
