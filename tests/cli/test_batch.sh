#!/usr/bin/env bash
# test_batch.sh: `specula batch` end to end: results come back one JSON line
# per request in input order whatever the concurrency; greedy and seeded
# output do not depend on concurrency or on the prefix cache; later requests
# that share a prefix (and salt) report cached tokens; the engine's counters
# reconcile; bad files are refused with a message naming the line.
# Prints "RESULT <passed> <failed>" like the C tests.
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
model=$ref/models/ref-llama-spm-q8_0.gguf

python3 - "$tmp/in.jsonl" <<'PY'
import json, sys
doc = "".join("line %d: the quick brown fox jumps over the lazy dog\n" % i for i in range(12))
reqs = []
for i in range(8):
    r = {"id": "r%d" % i, "prompt": doc + "question %d:" % i, "max_tokens": 12, "temperature": 0}
    if i % 2: r.update(temperature=0.8, seed=1000 + i)
    if i in (5, 6): r["cache_salt"] = "tenant-x"
    if i == 7: r["stop"] = ["\n", "zzz"]
    reqs.append(r)
reqs.append({"id": 99, "prompt": "short", "max_tokens": 3, "temperature": 0})
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in reqs))
PY

run() { # name, extra options...
    local name=$1; shift
    "$bin" batch -m "$model" -f "$tmp/in.jsonl" -t 2 --stats "$@" >"$tmp/$name.jsonl" 2>"$tmp/$name.err"
}
if run c1 --concurrency 1 && run c4 --concurrency 4 && run off --concurrency 4 --no-prefix-cache \
   && run small --concurrency 8 --max-seqs 3 --max-batch-tokens 32 -c 256 --kv-mem 500K; then
    ok "batch runs at concurrency 1, 4, without the cache and in a small pool"
else
    fail "batch" "$(tail -n 3 "$tmp"/*.err)"
fi

python3 - "$tmp" <<'PY' && ok "results in input order; identical across concurrency, cache and pool size; cached tokens and counters reconcile" || fail "batch results" "see above"
import json, sys
d = sys.argv[1]
res = {n: [json.loads(l) for l in open("%s/%s.jsonl" % (d, n))] for n in ("c1", "c4", "off", "small")}
st = {n: json.loads(open("%s/%s.err" % (d, n)).read().strip().splitlines()[-1]) for n in res}
ids = ["r%d" % i for i in range(8)] + [99]
bad = 0
def err(msg):
    global bad
    bad += 1
    print("  " + msg)
for n, rs in res.items():
    if [r["id"] for r in rs] != ids: err("%s: ids out of order: %s" % (n, [r["id"] for r in rs]))
    for r in rs:
        for k in ("tokens", "text", "finish_reason", "prompt_tokens", "cached_tokens", "queue_ms",
                  "prefill_ms", "ttft_ms", "decode_ms"):
            if k not in r: err("%s: %s lacks %s" % (n, r["id"], k))
for n in ("c4", "off", "small"):
    for a, b in zip(res["c1"], res[n]):
        if a["tokens"] != b["tokens"] or a["text"] != b["text"]:
            err("%s differs from c1 for %s" % (n, a["id"]))
c1 = res["c1"]
if any(r["cached_tokens"] for r in res["off"]): err("cache off but cached tokens reported")
if c1[0]["cached_tokens"] != 0: err("first request hit the cache")
for i in (1, 2, 3, 4):
    if c1[i]["cached_tokens"] < 64: err("r%d cached only %d" % (i, c1[i]["cached_tokens"]))
if c1[5]["cached_tokens"] != 0: err("first salted request hit unsalted blocks")
if c1[6]["cached_tokens"] < 64: err("second salted request did not hit")
if c1[7]["finish_reason"] == "stop" and "\n" in c1[7]["text"]: err("stop string emitted")
for r in c1:
    if r["finish_reason"] not in ("stop", "length"): err("finish %s" % r["finish_reason"])
    if len(r["tokens"]) > 12: err("too many tokens")
for n, s in st.items():
    if s["cache_query_tokens"] and s["cache_query_tokens"] != s["prompt_tokens"]:
        err("%s: queried %d of %d" % (n, s["cache_query_tokens"], s["prompt_tokens"]))
    if s["prefill_tokens"] + s["cache_hit_tokens"] != s["prompt_tokens"]:
        err("%s: prefill %d + hits %d != prompt %d" % (n, s["prefill_tokens"], s["cache_hit_tokens"], s["prompt_tokens"]))
    if s["blocks_in_use"] != 0: err("%s: %d blocks in use at the end" % (n, s["blocks_in_use"]))
    if sum(s["h_tokens_hist"]) != 9: err("%s: histogram %s" % (n, s["h_tokens_hist"]))
if sum(r["cached_tokens"] for r in c1) != st["c1"]["cache_hit_tokens"]: err("hit counter")
if st["small"]["preemptions"] == 0 and st["small"]["evictions_pressure"] == 0:
    err("the small pool applied no pressure")
sys.exit(1 if bad else 0)
PY

# bad input: a message naming the problem, a non-zero exit, no crash
expect_fail() { # name, stdin-file content, pattern, extra args
    local name=$1 content=$2 pat=$3; shift 3
    printf '%s' "$content" > "$tmp/bad.jsonl"
    "$bin" batch -m "$model" -f "$tmp/bad.jsonl" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q -- "$pat" "$tmp/bad.err" "$tmp/bad.out"; then ok "refuses: $name"
    else fail "refuses: $name" "rc $rc: $(cat "$tmp/bad.err" "$tmp/bad.out" | head -c 300)"; fi
}
expect_fail "invalid JSON" $'{"prompt": "a"}\n{"prompt": \n' "line 2"
expect_fail "prompt not a string" '{"prompt": 5}' '"prompt" must be a string'
expect_fail "max_tokens 0" '{"prompt": "a", "max_tokens": 0}' "max_tokens"
expect_fail "temperature out of range" '{"prompt": "a", "temperature": 9}' "temperature"
expect_fail "stop not strings" '{"prompt": "a", "stop": [1]}' "stop"
expect_fail "request beyond the context" '{"id": 1, "prompt": "a", "max_tokens": 5000}' "exceeds the context" -c 256
expect_fail "kv-mem too small" '{"prompt": "a"}' "kv-mem" --kv-mem 1K
expect_fail "unknown option" '{"prompt": "a"}' "unknown option" --bogus
"$bin" batch -m "$model" >"$tmp/o" 2>"$tmp/e"; rc=$?
if [ $rc -eq 2 ] && grep -q -- "-f FILE" "$tmp/e"; then ok "refuses: no input file"; else fail "no input file" "rc $rc"; fi

finish
