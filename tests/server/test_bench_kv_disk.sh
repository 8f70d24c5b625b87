#!/usr/bin/env bash
# test_bench_kv_disk.sh: the disk tier's benchmark scripts (bench/kv_disk/)
# still run, at toy sizes, on the bundled target: each exits 0 and prints
# its JSON with the fields BENCHMARKS.md's tables ("The prefix cache's disk
# tier") are read from, and the counters mean what the tables say (the tier
# brings the working set's hit rate back to unlimited RAM's; the restart is
# served from disk). Scripts run only by hand break unnoticed (a moved
# import, documents past -c 512); this keeps them running.
# Prints "RESULT <passed> <failed> <skipped>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
model=${SPECULA_MODEL:-models/specula-code-target-f16.gguf}
py=/usr/bin/python3
check() { # NAME JSON-FILE PYTHON-ASSERTIONS (d is the object)
    local msg
    if msg=$($py -c "import json, sys
d = json.load(open(sys.argv[1]))
$3" "$2" 2>&1); then ok "$1"; else fail "$1" "$(printf '%s' "$msg" | tail -n 1)"; fi
}

# 16 documents of ~150 tokens, 40 requests: their KV is 4x --kv-mem, which
# must still hold one 512-position context (the smallest working set)
if timeout 300 $py bench/kv_disk/working_set.py "$bin" "$model" 16 50 40 > "$tmp/ws.json" 2> "$tmp/ws.err"; then
    check working_set "$tmp/ws.json" '
for k in ("unlimited", "ram_only", "with_disk"):
    assert d[k]["prefill_tokens"] > 0 and 0 <= d[k]["h_tokens"] <= 1, k
assert d["with_disk"]["disk_hit_tokens"] > 0, "nothing restored from disk"
assert d["h_ratio_disk_vs_unlimited"] > d["h_ratio_ram_only_vs_unlimited"], "the tier added no hits"'
else
    fail working_set "exit status $?: $(tail -n 1 "$tmp/ws.err")"
fi

# 4 distinct prompts of 20 words x 4 tokens, alternating between two servers
if timeout 300 $py bench/kv_disk/no_reuse.py "$bin" "$model" 4 20 4 > "$tmp/nr.json" 2> "$tmp/nr.err"; then
    check no_reuse "$tmp/nr.json" '
assert d["tok_s_off"] > 0 and d["tok_s_on"] > 0
assert d["disk_writes"] > 0, "the tier wrote nothing"
assert d["cpu_s_on"] > 0 and d["cpu_s_off"] > 0'
else
    fail no_reuse "exit status $?: $(tail -n 1 "$tmp/nr.err")"
fi

# a 64-token shared prefix, served from disk after a restart
if timeout 300 $py bench/kv_disk/restart_warm.py "$bin" "$model" 64 > "$tmp/rw.json" 2> "$tmp/rw.err"; then
    check restart_warm "$tmp/rw.json" '
assert d["cold"]["cached"] == 0 and d["ram_hit"]["cached"] > 0
assert d["restart_warm"]["cached_disk"] > 0, "the restart was not served from disk"
assert d["restored_blocks"] > 0'
else
    fail restart_warm "exit status $?: $(tail -n 1 "$tmp/rw.err")"
fi
finish
