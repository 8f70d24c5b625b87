#!/usr/bin/env bash
# test_soak.sh: a short run of the soak test (tests/soak/soak.py): 20 s of
# mixed streaming load with abandoned streams, tenants, every speculative
# method and a KV pool small enough to evict and preempt, then the audit
# (well-formed answers, greedy == alone, every block back, /metrics
# reconciles, clean SIGTERM exit). `make soak` runs it for minutes.
# Prints "RESULT <passed> <failed>".
bin=${SPECULA_BIN:-bin/specula}
if /usr/bin/python3 tests/soak/soak.py --bin "$bin" --seconds "${SOAK_SECONDS:-20}" --clients 8 \
    --verify 12; then
    echo "ok   soak"
    echo "RESULT 1 0"
else
    echo "FAIL soak"
    echo "RESULT 0 1"
fi
