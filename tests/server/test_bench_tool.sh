#!/usr/bin/env bash
# test_bench_tool.sh: `specula bench` end to end. Against a live `specula
# serve` on loopback (the bundled model): the client's request and token
# counts equal the server's GET /metrics deltas taken around the run (by
# curl here, independently of the tool), the JSON report has its metrics and
# contract, the Markdown report and its SVG plots are written; speculative
# counters reconcile with --spec suffix; --serve starts and stops its own
# server; a fake server that answers errors, garbage or closes mid-stream
# costs only those requests (no crash), and the contract of a server that
# does not describe itself claims nothing it did not check; an unreachable
# URL fails at once; vLLM's option names work; --endpoint chat benchmarks
# chat completions; bad command lines exit 2.
# Prints "RESULT <passed> <failed>" ("RESULT 0 0 1" and a SKIP line when the
# model is missing).
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
model=${SPECULA_BENCH_MODEL:-models/specula-code-target-f16.gguf}

if [ ! -r "$model" ]; then
    # counted as skipped by tests/run.sh (a failure in CI: SPECULA_NO_SKIP=1)
    echo "SKIP test_bench_tool.sh: no model at $model (set SPECULA_BENCH_MODEL)"; echo "RESULT 0 0 1"; exit 0
fi

# serve_model NAME ARGS...: serve (tests/lib/lib.sh) with $model
serve_model() { serve "$1" -m "$model" "${@:2}"; }

# ---- counters reconcile with the server's /metrics ------------------------
if serve_model main; then
    curl -s "$URL/metrics" >"$tmp/m0"
    "$bin" bench --base-url "$URL" --workload shared-prefix --num-requests 6 --concurrency 2 \
        --warmup 0 --no-isolation --slo ttft=5s,tpot=1s --json "$tmp/r.json" --md "$tmp/r.md" \
        >"$tmp/out" 2>"$tmp/err"
    rc=$?
    curl -s "$URL/metrics" >"$tmp/m1"
    # the server's context: by default the model's trained one (specula info)
    ctx=$("$bin" info -m "$model" 2>/dev/null | grep -o 'n_ctx_train [0-9]*' | head -n 1 | cut -d' ' -f2)
    if [ $rc -eq 0 ] && python3 - "$tmp/r.json" "$tmp/m0" "$tmp/m1" "${ctx:-0}" <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
def prom(path):
    out = {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        name, val = line.rsplit(" ", 1)
        base = name.split("{")[0]
        out[base] = out.get(base, 0) + float(val)
    return out
a, b = prom(sys.argv[2]), prom(sys.argv[3])
d = lambda k: b.get(k, 0) - a.get(k, 0)
run = r["metrics"]["runs"][0]
assert run["requests_ok"] == 6 == d("specula_requests_finished_total"), (run["requests_ok"], d("specula_requests_finished_total"))
assert run["prompt_tokens"] == d("specula_prompt_tokens_total"), (run["prompt_tokens"], d("specula_prompt_tokens_total"))
assert run["output_tokens"] == d("specula_completion_tokens_total")
assert run["cached_tokens"] == d("specula_cached_prompt_tokens_total") > 0
assert run["server_counters"]["reconciled"] is True, run["server_counters"]
assert run["server_counters"]["specula_prefill_tokens_total"] == d("specula_prefill_tokens_total")
# the shared prefix was computed once: most of the prompt came from the cache
assert run["h_tokens_mean"] > 0.5 and run["warm_requests"] >= 4, run
for k in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p99_ms",
          "output_tokens_per_s", "requests_per_s", "goodput_req_per_s"):
    assert isinstance(run[k], (int, float)) and run[k] > 0, (k, run[k])
assert run["ttft_ms"]["p50"] <= run["ttft_ms"]["p90"] <= run["ttft_ms"]["p99"]
assert len(run["h_tokens_hist"]) == 11 and sum(run["h_tokens_hist"]) == 6
c = r["contract"]
for k in ("bench_tool", "endpoint", "cpu_model", "cores", "memcpy_gb_per_s", "workload_params", "prompt_tokens",
          "output_tokens", "prefix_sharing", "load", "sampling", "warmup_requests", "repetitions"):
    assert c.get(k) not in (None, ""), k
assert c["configs"][0]["max_model_len"] == int(sys.argv[4]) > 0, (c["configs"][0]["max_model_len"], sys.argv[4])
# a Specula server says what it is; the tool's own commit is not passed off as its engine's
cfg = c["configs"][0]
assert cfg["engine"].startswith("specula ") and "not reported" in cfg["engine"], cfg["engine"]
assert cfg["kv_type"] == "f16" and cfg["kv_block_size"] == 16, cfg
assert c["endpoint"] == "/v1/completions"
PY
        ok "shared-prefix: requests, prompt/output/cached tokens equal the /metrics deltas; JSON report"
    else
        fail "reconcile with /metrics" "rc $rc: $(tail -n 5 "$tmp/err") $(tail -n 5 "$tmp/out")"
    fi
    if grep -q "reproducibility contract" "$tmp/out" && grep -q "model sha256" "$tmp/r.md" \
        && [ -s "$tmp/r-cdf-ttft.svg" ] && [ -s "$tmp/r-ttft-cold-warm.svg" ] \
        && grep -q "<svg" "$tmp/r-cdf-ttft.svg" && grep -q "r-cdf-ttft.svg" "$tmp/r.md"; then
        ok "terminal and Markdown reports carry the contract; SVG plots written"
    else
        fail "reports" "$(ls "$tmp")"
    fi
    # multi-turn and a Poisson rate, with a JSONL file workload too
    printf '{"prompt": "def add(a, b):", "max_tokens": 8}\n{"prompt": "import os\\n", "max_tokens": 4, "temperature": 0.7, "seed": 3}\n' >"$tmp/p.jsonl"
    if "$bin" bench --base-url "$URL" --workload multi-turn --num-requests 6 --turns 3 --rate 20 \
            --warmup 1 --json "$tmp/mt.json" >/dev/null 2>"$tmp/err" \
        && "$bin" bench --base-url "$URL" --workload "file:$tmp/p.jsonl" --concurrency 2 \
            --warmup 0 --json "$tmp/f.json" >/dev/null 2>>"$tmp/err" \
        && python3 - "$tmp/mt.json" "$tmp/f.json" <<'PY'; then
import json, sys
mt = json.load(open(sys.argv[1]))["metrics"]["runs"][0]
f = json.load(open(sys.argv[2]))["metrics"]["runs"][0]
assert mt["requests_ok"] == 6 and mt["server_counters"]["reconciled"], mt
# later turns resend the history: the server found it cached
assert mt["cached_tokens"] > 0 and mt["prefix_sharing"] > 0.3, (mt["cached_tokens"], mt["prefix_sharing"])
assert f["requests_ok"] == 2 and f["output_tokens"] <= 12 and f["server_counters"]["reconciled"], f
PY
        ok "multi-turn at a Poisson rate and a file: workload run and reconcile"
    else
        fail "multi-turn / file" "$(tail -n 5 "$tmp/err")"
    fi
fi

# vLLM's option names (--num-prompts, --max-concurrency, --request-rate) are
# the same options as Specula's own
if [ -n "${URL:-}" ] && "$bin" bench --base-url "$URL" --workload code-complete --num-prompts 3 \
        --max-concurrency 1 --request-rate 50 --warmup 0 --json "$tmp/al.json" >/dev/null 2>"$tmp/err" \
    && python3 - "$tmp/al.json" <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
run = r["metrics"]["runs"][0]
assert run["requests"] == 3 and run["requests_ok"] == 3, run
assert run["concurrency"] == 1 and run["rate"] == 50, (run["concurrency"], run["rate"])
assert r["contract"]["load"].startswith("open loop, 50 requests/s") and "capped" in r["contract"]["load"], r["contract"]["load"]
PY
    ok "vLLM's --num-prompts, --max-concurrency, --request-rate are accepted as aliases"
else
    fail "vLLM option aliases" "$(tail -n 5 "$tmp/err")"
fi

# ---- --endpoint chat: chat completions, multi-turn with the answers ---------------
if serve_model chat --chat-template chatml; then
    if "$bin" bench --base-url "$URL" --endpoint chat --workload multi-turn --num-requests 4 \
            --turns 2 --concurrency 2 --output-tokens 8 --warmup 0 --json "$tmp/ch.json" \
            >"$tmp/out" 2>"$tmp/err" \
        && python3 - "$tmp/ch.json" "$tmp/chat.log" <<'PY'; then
import json, sys
r = json.load(open(sys.argv[1]))
run = r["metrics"]["runs"][0]
assert r["contract"]["endpoint"] == "/v1/chat/completions", r["contract"]["endpoint"]
assert run["requests_ok"] == 4 and run["server_counters"]["reconciled"], run
# the second turn resends the first and its answer as messages: found in the cache
assert run["cached_tokens"] > 0 and run["output_tokens"] > 0, run
PY
        ok "--endpoint chat: chat completions, second turns reuse the rendered first (cached)"
    else
        fail "--endpoint chat" "$(tail -n 5 "$tmp/err") $(tail -n 5 "$tmp/out")"
    fi
fi

# ---- speculative counters: --spec suffix ----------------------------------
# --spec-fixed-k: drafting by construction, not by the planner's timing
if serve_model spec --spec suffix --spec-fixed-k; then
    if "$bin" bench --base-url "$URL" --workload code-edit --num-requests 4 --concurrency 2 \
            --warmup 0 --json "$tmp/s.json" >/dev/null 2>"$tmp/err" \
        && python3 - "$tmp/s.json" 2>>"$tmp/err" <<'PY'; then
import json, sys
run = json.load(open(sys.argv[1]))["metrics"]["runs"][0]
sc = run["server_counters"]
assert run["requests_ok"] == 4 and sc["reconciled"], sc
assert run["spec_drafted"] == sc["specula_spec_draft_tokens_total"] > 0, (run["spec_drafted"], sc)
assert run["spec_accepted"] == sc["specula_spec_accepted_tokens_total"]
assert 0 < run["acceptance_rate"] <= 1 and run["mean_acceptance_length"] >= 1, run
PY
        ok "--spec suffix: drafted/accepted tokens reconcile; acceptance reported"
    else
        fail "spec counters" "$(tail -n 5 "$tmp/err")"
    fi
fi

# ---- --serve: the tool starts and stops its own server ----------------------
"$bin" bench --serve "-t 1 -m $model" --workload long-output --num-requests 2 --output-tokens 8 \
    --warmup 0 --json "$tmp/sv.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && python3 - "$tmp/sv.json" "$model" <<'PY' && ! pgrep -f "^specula serve --port 0 -t 1 -m $model\$" >/dev/null; then
import hashlib, json, sys
r = json.load(open(sys.argv[1]))
cfg = r["contract"]["configs"][0]
assert cfg["model_sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(), cfg
assert cfg["prefix_cache"].startswith("on") and cfg["kv_type"] == "f16" and cfg["kv_block_size"] == 16
assert r["metrics"]["runs"][0]["requests_ok"] == 2
PY
    ok "--serve: starts a server, hashes its model into the contract, stops it"
else
    fail "--serve" "rc $rc: $(tail -n 5 "$tmp/err")"
fi

# ---- a broken server costs only its requests ----------------------------------
cat >"$tmp/fake.py" <<'PY'
import socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = sys.argv[1]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if mode == "error":
            b = b'{"error": {"message": "overloaded", "type": "server_error"}}'
            self.send_response(500); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
            return
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close"); self.end_headers()
        if mode == "garbage":
            self.wfile.write(b"data: {\"choices\": [{\"text\": \"x\"}]}\n\ndata: \x00\xffnot json\n\n")
        elif mode == "close":
            self.wfile.write(b"data: {\"choices\": [{\"text\": \"partial\"}]}\n\n")
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
for mode in error garbage close; do
    python3 "$tmp/fake.py" $mode >"$tmp/fake.port" 2>/dev/null &
    pids+=("$!")
    for _ in $(seq 1 "$(polls 100)"); do [ -s "$tmp/fake.port" ] && break; sleep 0.05; done
    port=$(head -n 1 "$tmp/fake.port")
    "$bin" bench --base-url "http://127.0.0.1:$port" --workload code-complete --num-requests 3 \
        --concurrency 2 --warmup 1 --timeout 10 --json "$tmp/fk.json" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "3 of 3 requests failed" "$tmp/out" \
        && python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["metrics"]["runs"][0]; assert r["requests_ok"]==0 and r["first_error"], r' "$tmp/fk.json"; then
        ok "a server that answers $mode: requests fail with a reason, exit 1, no crash ($(grep -o 'first: .*' "$tmp/out" | head -c 60))"
    else
        fail "fake server $mode" "rc $rc: $(tail -n 3 "$tmp/out") $(tail -n 3 "$tmp/err")"
    fi
    [ $mode = error ] && cp "$tmp/out" "$tmp/fake-error.out"
    kill "${pids[-1]}" 2>/dev/null
    : >"$tmp/fake.port"
done
# a server that does not describe itself: the contract does not guess
if grep -q "^KV:             not reported by the server$" "$tmp/fake-error.out" \
    && grep -q "^engine:         not reported by the server$" "$tmp/fake-error.out" \
    && grep -q "salts: a fresh cache_salt per measured run (sent; whether the server honors it is not known)" "$tmp/fake-error.out" \
    && grep -q "^bench tool:     specula " "$tmp/fake-error.out" \
    && grep -q "^served as:      not reported by the server (max_model_len not reported)$" "$tmp/fake-error.out" \
    && ! grep -q "?" <(grep -E "^(KV|engine|served as):" "$tmp/fake-error.out"); then
    ok "contract of an unknown server: KV type, engine and cache_salt use not claimed"
else
    fail "contract claims" "$(grep -E '^(KV|engine|prefix cache|bench tool|served as)' "$tmp/fake-error.out")"
fi
# nothing listening at all: fails at once with the reason, and no report of nothing
t0=$(date +%s)
"$bin" bench --base-url http://127.0.0.1:9 --workload code-complete --num-requests 2 --warmup 0 \
    --json "$tmp/none.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
t1=$(date +%s)
if [ $rc -eq 1 ] && grep -q "cannot reach http://127.0.0.1:9" "$tmp/err" && [ ! -s "$tmp/out" ] \
    && [ ! -e "$tmp/none.json" ] && ! grep -qi "nan" "$tmp/err" && [ $((t1 - t0)) -le 5 ]; then
    ok "no server: exit 1 at once with the reason, no report"
else fail "no server" "rc $rc in $((t1 - t0)) s: $(tail -n 3 "$tmp/out") $(tail -n 3 "$tmp/err")"; fi

# ---- bad command lines ---------------------------------------------------------
bad=0
for args in "" "--workload nope" "--workload long-output --concurrency 0" \
            "--workload long-output --rate -1" "--workload long-output --slo ttft=fast" \
            "--workload long-output --base-url ftp://x" "--workload long-output --frobnicate" \
            "--workload long-output --base-url http://a --base-url http://b" \
            "--workload long-output --compare --base-url http://a" \
            "--workload long-output --rate 2 --sweep-concurrency 1,2" "--workload long-output --seed" \
            "--workload long-output --endpoint embeddings"; do
    # shellcheck disable=SC2086
    "$bin" bench $args >/dev/null 2>"$tmp/err"; rc=$?
    if [ $rc -ne 2 ] || [ ! -s "$tmp/err" ]; then bad=1; echo "  '$args': rc $rc"; fi
done
[ $bad -eq 0 ] && ok "bad command lines: exit 2 with a message" || fail "bad command lines" "see above"

finish
