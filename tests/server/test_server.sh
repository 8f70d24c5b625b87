#!/usr/bin/env bash
# test_server.sh: `specula serve` end to end on loopback with the reference
# model: every endpoint and error answer; SSE streaming; 32 concurrent
# streaming clients whose greedy outputs equal the same prompts run one by
# one; /metrics reconciles with the requests made; API keys (401, tenant
# cache isolation), the queue limit (429 + Retry-After), a missing chat
# template (400), /health 503 while loading; the official OpenAI Node client
# (tests/node/test.mjs: completions, chat, streaming, cached tokens and
# salts, abort mid-stream); --stamp-chunks off by default and well-formed
# when on. Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
model=$ref/models/ref-llama-spm-q8_0.gguf
nodedir=${SPECULA_NODE_DIR:-tests/node}

# req NAME METHOD PATH BODY EXPECTED_CODE [curl args...]: body in $tmp/out;
# returns non-zero (and prints why) when the status is not EXPECTED_CODE.
# Every check below is "if ...; then ok ...; else fail ...; fi" (or
# "... && ok ... || fail ...", where ok cannot fail), so that it always
# counts as one ok or one FAIL.
req() {
    local name=$1 method=$2 path=$3 body=$4 want=$5; shift 5
    local code
    if [ "$method" = GET ]; then
        code=$(curl -s -o "$tmp/out" -w '%{http_code}' "$@" "$URL$path")
    else
        code=$(curl -s -o "$tmp/out" -w '%{http_code}' -H 'Content-Type: application/json' \
               --data-binary "$body" "$@" "$URL$path")
    fi
    if [ "$code" = "$want" ]; then return 0; fi
    # the caller counts the check (ok or fail); this says why it failed
    echo "  $name: HTTP $code (want $want): $(head -c 300 "$tmp/out")"
    return 1
}

# an OpenAI error object with the given type (and param, if given)
is_error() { # type [param]
    python3 - "$tmp/out" "$1" "${2:-}" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert set(e) >= {"message", "type", "param", "code"}, e
assert e["type"] == sys.argv[2], e
assert not sys.argv[3] or e["param"] == sys.argv[3], e
PY
}

# ---- /health answers 503 while the model loads --------------------------
mkfifo "$tmp/slow.gguf"
"$bin" serve --port 0 -t 1 -m "$tmp/slow.gguf" >"$tmp/slow.log" 2>&1 &
slow=$!; pids+=("$slow")
for _ in $(seq 1 "$(polls 200)"); do
    URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/slow.log" | head -n 1); [ -n "$URL" ] && break; sleep 0.05
done
h=$(curl -s -o "$tmp/out" -w '%{http_code}' "$URL/health")
c=$(curl -s -o /dev/null -w '%{http_code}' -d '{"prompt": "a"}' "$URL/v1/completions")
# opening the FIFO for writing and closing it makes the load fail: the server exits
timeout 10 sh -c 'exec 3>"$1"' sh "$tmp/slow.gguf"
wait "$slow"; rc=$?
if [ "$h" = 503 ] && grep -q loading "$tmp/out" && [ "$c" = 503 ] && [ $rc -ne 0 ]; then
    ok "listens before loading: /health 503, completions 503; a failed load exits $rc"
else
    fail "health while loading" "health $h, completions $c, rc $rc: $(cat "$tmp/slow.log")"
fi

# ---- the main server -----------------------------------------------------
# --spec-fixed-k: a request that asks for speculation proposes k tokens every
# step, so "it drafted" is true by construction (the adaptive planner may
# choose k = 0 when measured passes are slow, e.g. on a loaded machine)
serve main -m "$model" --chat-template chatml --max-body 1M --served-model-name ref --spec-fixed-k || finish
main=$PID

if req "GET /v1/models" GET /v1/models "" 200 && python3 -c '
import json,sys; d=json.load(open(sys.argv[1])); assert d["object"]=="list" and d["data"][0]["id"]=="ref", d
i=d["data"][0]["specula"]; assert i["model_file"]=="ref-llama-spm-q8_0.gguf" and i["spec"] in ("auto","off","ngram","suffix","draft") \
    and i["kv_block_size"]>0 and isinstance(i["prefix_cache"],bool), i' "$tmp/out" \
    && req "GET /v1/models/ref" GET /v1/models/ref "" 200 && req "GET /v1/models/x" GET /v1/models/x "" 404 \
    && is_error invalid_request_error model; then
    ok "/v1/models lists the served name and its configuration; unknown model 404"
else
    fail "/v1/models" "$(head -c 300 "$tmp/out")"
fi
# the configured context (max_model_len, context_length) beside the trained one
# (n_ctx_train, as `specula info` reads it from the GGUF), in both forms
train_ctx=$("$bin" info -m "$model" 2>/dev/null | grep -o 'n_ctx_train [0-9]*' | head -n 1 | cut -d' ' -f2)
if [ -n "$train_ctx" ] && req "GET /v1/models" GET /v1/models "" 200 && python3 -c '
import json,sys; m=json.load(open(sys.argv[1]))["data"][0]
assert m["context_length"]==m["max_model_len"]==m["specula"]["n_ctx"]>0 and m["n_ctx_train"]==int(sys.argv[2]), m' \
    "$tmp/out" "$train_ctx" && req "GET /v1/models/ref" GET /v1/models/ref "" 200 && python3 -c '
import json,sys; m=json.load(open(sys.argv[1]))
assert m["context_length"]==m["max_model_len"]>0 and m["n_ctx_train"]==int(sys.argv[2]), m' "$tmp/out" "$train_ctx"; then
    ok "/v1/models and /v1/models/ref report the configured context and the trained one ($train_ctx)"
else
    fail "/v1/models context fields" "n_ctx_train '$train_ctx': $(head -c 300 "$tmp/out")"
fi

req "completion" POST /v1/completions '{"model": "ref", "prompt": "Hello world", "max_tokens": 6, "temperature": 0, "logprobs": 2, "stop": ["zzzz"]}' 200 \
    && python3 - "$tmp/out" <<'PY' && ok "POST /v1/completions: OpenAI shape, usage, logprobs, specula extension" || fail "completion shape" "$(head -c 400 "$tmp/out")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["object"] == "text_completion" and d["model"] == "ref" and d["id"].startswith("cmpl-")
c = d["choices"][0]
assert c["index"] == 0 and isinstance(c["text"], str) and c["finish_reason"] in ("stop", "length")
lp = c["logprobs"]
assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == d["usage"]["completion_tokens"]
assert all(len(t) <= 2 for t in lp["top_logprobs"])
u = d["usage"]
assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and "cached_tokens" in u["prompt_tokens_details"]
s = d["specula"]
assert {"queue_ms", "prefill_ms", "ttft_ms", "decode_ms"} <= set(s) and {"drafted", "accepted", "acceptance_rate", "mean_acceptance_length"} <= set(s["spec"])
PY

if req "token-id prompt" POST /v1/completions '{"prompt": [1, 15043, 3186], "max_tokens": 3, "temperature": 0}' 200 \
    && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["usage"]["prompt_tokens"]==3, d' "$tmp/out"; then
    ok "a prompt of token ids is accepted (3 prompt tokens)"
else
    fail "token-id prompt" "$(head -c 300 "$tmp/out")"
fi

if req "chat" POST /v1/chat/completions '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 4, "temperature": 0}' 200 \
    && python3 -c '
import json,sys; d=json.load(open(sys.argv[1])); m=d["choices"][0]["message"]
assert d["object"]=="chat.completion" and m["role"]=="assistant" and isinstance(m["content"],str), d' "$tmp/out"; then
    ok "POST /v1/chat/completions with the chatml template"
else
    fail "chat" "$(head -c 300 "$tmp/out")"
fi

if req "tokenize" POST /tokenize '{"prompt": "Hello world"}' 200 && cp "$tmp/out" "$tmp/tok" \
    && toks=$(python3 -c 'import json,sys; print(json.dumps({"tokens": json.load(open(sys.argv[1]))["tokens"]}))' "$tmp/tok") \
    && req "detokenize" POST /detokenize "$toks" 200 \
    && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["prompt"].strip()=="Hello world", d' "$tmp/out" \
    && req "tokenize content" POST /tokenize '{"content": "Hello world", "add_special": false}' 200 \
    && python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["tokens"]; b=json.load(open(sys.argv[2]))["tokens"]; assert a==b[1:], (a,b)' "$tmp/out" "$tmp/tok"; then
    ok "/tokenize and /detokenize round trip"
else
    fail "tokenize round trip" "$(head -c 300 "$tmp/out")"
fi

# streaming through curl: SSE framing, [DONE], the usage chunk
curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" \
    -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}' >"$tmp/sse"
python3 - "$tmp/sse" "$URL" <<'PY' && ok "SSE stream: data chunks, final usage chunk, data: [DONE]; a long stream comes in pieces" || fail "SSE stream" "$(head -c 600 "$tmp/sse")"
import json, sys
raw = open(sys.argv[1]).read()
events = raw.split("\n\n")
assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
chunks = [json.loads(e[6:]) for e in events[:-2]]
assert all(e.startswith("data: ") for e in events[:-1])
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 8
assert chunks[-2]["choices"][0]["finish_reason"] == "length"
assert any(c["choices"] and c["choices"][0]["text"] for c in chunks)
assert "specula_timing" not in raw  # only with --stamp-chunks
# the pieces, on a stream that cannot end soon (tests/server/sse_long.py)
sys.path.insert(0, "tests/server")
from sse_long import first_text_chunks
first_text_chunks(sys.argv[2], 2)
PY

# sampling: a seed repeats, no seed varies; a stop string ends the text
python3 - "$URL" <<'PY' && ok "seeded sampling repeats (streamed or not), unseeded varies; stop strings cut with finish_reason stop" || fail "sampling" "see above"
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
def post(body):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(body))
    r = c.getresponse(); raw = r.read()
    assert r.status == 200, raw
    if not body.get("stream"): return json.loads(raw)["choices"][0]
    text, fin = "", None
    for ev in raw.decode().split("\n\n"):
        if ev.startswith("data: {"):
            for ch in json.loads(ev[6:])["choices"]:
                text += ch["text"]; fin = ch["finish_reason"] or fin
    return {"text": text, "finish_reason": fin}
p = {"prompt": "Tell me a story about", "max_tokens": 16, "temperature": 1.0, "top_p": 0.9, "top_k": 50,
     "min_p": 0.01, "presence_penalty": 0.5, "frequency_penalty": 0.5}
a = post(dict(p, seed=7)); b = post(dict(p, seed=7, stream=True)); c = post(p); d = post(p)
bad = 0
if a["text"] != b["text"]: bad = 1; print("  seeded: %r != %r" % (a["text"], b["text"]))
if c["text"] == d["text"]: bad = 1; print("  unseeded runs are equal: %r" % c["text"])
g = post({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0})["text"]
if len(g) > 6:
    cut = g[3:6]
    h = post({"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "stop": ["zzzz", cut]})
    want = g[:g.index(cut)]
    if h["text"] != want or h["finish_reason"] != "stop":
        bad = 1; print("  stop %r: %r (%s), want %r" % (cut, h["text"], h["finish_reason"], want))
sys.exit(bad)
PY

# speculative decoding per request: greedy output is that of plain decoding
python3 - "$URL" <<'PY' && ok "per-request speculative (off, ngram, suffix, auto): same greedy text; /metrics counts drafts" || fail "speculative" "see above"
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
def post(body):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", sys.argv[2] if len(sys.argv) > 2 else "/v1/completions", json.dumps(body))
    r = c.getresponse(); d = json.loads(r.read())
    assert r.status == 200, d
    return d
def drafts():
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("GET", "/metrics")
    for l in c.getresponse().read().decode().splitlines():
        if l.startswith("specula_spec_draft_tokens_total "): return float(l.split()[1])
p = "one two three four one two three four one two three four one two three four"
before = drafts()
out = {m: post({"prompt": p, "max_tokens": 24, "temperature": 0, "speculative": {"method": m, "k": 4}}) for m in ("off", "ngram", "suffix", "auto")}
texts = {m: d["choices"][0]["text"] for m, d in out.items()}
bad = len(set(texts.values())) != 1
if bad: print("  texts differ:", texts)
drafted = sum(out[m]["specula"]["spec"]["drafted"] for m in ("ngram", "suffix", "auto"))
if drafted <= 0 or out["off"]["specula"]["spec"]["drafted"]: bad = True; print("  drafted:", {m: d["specula"]["spec"] for m, d in out.items()})
if drafts() - before != drafted: bad = True; print("  metrics drafts %s != %s" % (drafts() - before, drafted))
sys.exit(1 if bad else 0)
PY

# ---- errors ----------------------------------------------------------------
long=$(python3 -c 'print({"prompt": list(range(100, 2148))}.__repr__().replace("'"'"'", "\""))')
head -c 1200000 /dev/zero | tr '\0' 'a' >"$tmp/big"
errs=0
experr() { # name path body code type [param]
    local name=$1 path=$2 body=$3 code=$4 type=$5 param=${6:-}
    if req "error: $name" POST "$path" "$body" "$code" && is_error "$type" "$param"; then :; else
        errs=$((errs + 1)); echo "  ($name) $(head -c 300 "$tmp/out")"; fi
}
experr "malformed JSON" /v1/completions '{"prompt": ' 400 invalid_request_error
experr "not an object" /v1/completions '[1, 2]' 400 invalid_request_error
experr "prompt missing" /v1/completions '{"max_tokens": 3}' 400 invalid_request_error prompt
experr "prompt wrong type" /v1/completions '{"prompt": {"a": 1}}' 400 invalid_request_error prompt
experr "max_tokens wrong type" /v1/completions '{"prompt": "a", "max_tokens": "3"}' 400 invalid_request_error max_tokens
experr "max_tokens 0" /v1/completions '{"prompt": "a", "max_tokens": 0}' 400 invalid_request_error max_tokens
experr "temperature out of range" /v1/completions '{"prompt": "a", "temperature": 2.5}' 400 invalid_request_error temperature
experr "top_p 0" /v1/completions '{"prompt": "a", "top_p": 0}' 400 invalid_request_error top_p
experr "logprobs 21" /v1/completions '{"prompt": "a", "logprobs": 21}' 400 invalid_request_error logprobs
experr "stop not strings" /v1/completions '{"prompt": "a", "stop": [1]}' 400 invalid_request_error stop
experr "n = 2" /v1/completions '{"prompt": "a", "n": 2}' 400 invalid_request_error n
experr "token outside the vocabulary" /v1/completions '{"prompt": [1, 32000]}' 400 invalid_request_error prompt
experr "bad speculative method" /v1/completions '{"prompt": "a", "speculative": {"method": "magic"}}' 400 invalid_request_error speculative
experr "prompt longer than the context" /v1/completions "$long" 400 invalid_request_error prompt
experr "prompt + max_tokens beyond the context" /v1/completions '{"prompt": "a", "max_tokens": 5000}' 400 invalid_request_error max_tokens
experr "unknown model" /v1/completions '{"model": "gpt-9", "prompt": "a"}' 404 invalid_request_error model
experr "messages missing" /v1/chat/completions '{"model": "ref"}' 400 invalid_request_error messages
experr "bad role" /v1/chat/completions '{"messages": [{"role": "wizard", "content": "x"}]}' 400 invalid_request_error messages
experr "detokenize bad ids" /detokenize '{"tokens": [1, -5]}' 400 invalid_request_error tokens
experr "unknown endpoint" /v1/embeddings '{}' 404 invalid_request_error
if req "error: body too large" POST /v1/completions "@$tmp/big" 413 && is_error invalid_request_error; then :; else errs=$((errs + 1)); fi
[ $errs -eq 0 ] && ok "every error answers an OpenAI error object with the right status (400, 404, 413)" \
    || fail "errors" "$errs wrong"
if req "still serving" POST /v1/completions '{"prompt": "still there?", "max_tokens": 2}' 200; then
    ok "the server keeps serving after errors"
else
    fail "still serving" "see above"
fi

# ---- 32 concurrent streaming clients = one by one; /metrics reconciles ---
python3 - "$URL" <<'PY' && ok "32 concurrent streaming clients match one-by-one greedy outputs; /metrics reconciles" || fail "concurrency / metrics" "see above"
import http.client, json, sys, threading, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
types = {}  # metric name -> its # TYPE
def metrics():
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    m = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m
def run(prompt, stream):
    body = {"prompt": prompt, "max_tokens": 10, "temperature": 0}
    if stream: body.update(stream=True, stream_options={"include_usage": True})
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.status
    if not stream:
        d = json.loads(r.read())
        return d["choices"][0]["text"], d["usage"]
    text, usage, buf = "", None, b""
    while True:
        line = r.fp.readline()
        if not line: break
        line = line.strip()
        if not line.startswith(b"data: "): continue
        if line == b"data: [DONE]": break
        ch = json.loads(line[6:])
        if ch.get("usage"): usage = ch["usage"]
        for c_ in ch["choices"]: text += c_["text"]
    return text, usage
pre = "A long shared preamble that fills a few KV blocks, so that repeats hit the prefix cache. " * 2
prompts = [pre + "Prompt number %d: the %s of the matter is" % (i, ["heart", "crux", "root", "core"][i % 4]) for i in range(32)]
before = metrics()
seq = [run(p, False) for p in prompts]
res = [None] * 32
def worker(i):
    try: res[i] = run(prompts[i], True)
    except Exception as e: res[i] = ("ERROR %r" % e, None)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
for t in ts: t.start()
for t in ts: t.join()
after = metrics()
bad = 0
for i in range(32):
    if res[i][0] != seq[i][0]:
        bad += 1; print("  prompt %d: concurrent %r != sequential %r" % (i, res[i][0], seq[i][0]))
d = lambda k: after.get(k, 0) - before.get(k, 0)
usages = [u for _, u in seq] + [u for _, u in res]
if any(u is None for u in usages): bad += 1; print("  a stream had no usage chunk")
else:
    checks = {
        'specula_http_requests_total{endpoint="/v1/completions",code="200"}': 64,
        "specula_prompt_tokens_total": sum(u["prompt_tokens"] for u in usages),
        "specula_completion_tokens_total": sum(u["completion_tokens"] for u in usages),
        "specula_cached_prompt_tokens_total": sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages),
        "specula_time_to_first_token_seconds_count": 64,
        "specula_e2e_request_latency_seconds_count": 64,
        'specula_time_to_first_token_seconds_bucket{le="+Inf"}': 64,
        'specula_requests_finished_total{reason="length"}': sum(1 for u in usages if u["completion_tokens"] == 10),
        "specula_engine_requests_submitted_total": 64,
        "specula_prefix_cache_hits_total": sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages),
        "specula_decode_tokens_total": sum(u["completion_tokens"] for u in usages),
    }
    for k, want in checks.items():
        if d(k) != want: bad += 1; print("  %s grew by %s, expected %s" % (k, d(k), want))
    if d("specula_inter_token_latency_seconds_count") < 64: bad += 1; print("  too few ITL samples")
    if d("specula_prefix_cache_hits_total") <= 0: bad += 1; print("  the shared prefixes never hit the cache")
    if after['specula_kv_blocks{state="in_use"}'] != 0: bad += 1; print("  blocks still in use")
    tot = sum(after['specula_kv_blocks{state="%s"}' % s] for s in ("free", "cached", "in_use"))
    if tot != after["specula_kv_blocks_capacity"]: bad += 1; print("  block states do not add up")
    if after["specula_kv_usage_ratio"] != 0: bad += 1; print("  KV usage ratio not 0 with nothing running")
    if not types or any(n.endswith("_total") and types.get(n) != "counter" for n in set(k.split("{")[0] for k in after)):
        bad += 1; print("  a metric ending in _total is not a counter:", {n: types.get(n) for n in types if n.endswith("_total") and types[n] != "counter"})
    if after["specula_requests_active"] != 0: bad += 1; print("  requests still active")
sys.exit(1 if bad else 0)
PY

# ---- the official OpenAI Node client -------------------------------------
if ! command -v node >/dev/null; then
    fail "node test" "node is not installed (./setup.sh test installs it)"
elif [ ! -d "$nodedir/node_modules/openai" ]; then
    fail "node test" "the openai package is missing: run 'npm ci' in $nodedir (./setup.sh test does)"
else
    node "$nodedir/test.mjs" "$URL" ref >"$tmp/node.out" 2>&1
    grep -E '^(ok|FAIL)' "$tmp/node.out"
    res=$(grep '^NODE ' "$tmp/node.out" | tail -n 1)
    if [ -z "$res" ]; then fail "node test" "no result: $(tail -n 5 "$tmp/node.out")"
    else set -- $res; passed=$((passed + $2)); failed=$((failed + $3)); fi
fi

# CORS is off by default: no preflight answer, no Access-Control-* headers
curl -s -i -X OPTIONS -H "Origin: https://app.example" -H "Access-Control-Request-Method: POST" \
    "$URL/v1/completions" >"$tmp/nocors_pre" 2>/dev/null
curl -s -i -H "Origin: https://app.example" "$URL/v1/models" >"$tmp/nocors_get" 2>/dev/null

kill -TERM "$main"; wait "$main"; rc=$?
[ $rc -eq 0 ] && grep -q stopping "$tmp/main.log" && ok "stops cleanly on SIGTERM" || fail "SIGTERM" "rc $rc"

# ---- API keys (tenants), the queue limit, no chat template ----------------
# (with several API keys /metrics needs --metrics-key: MK below)
serve keys -m "$model" --api-key key-one --api-key key-two --metrics-key metrics-key --max-queue 1 || finish
keys=$PID
MK=(-H 'Authorization: Bearer metrics-key')
body='{"prompt": "hi", "max_tokens": 2}'
if req "no key" POST /v1/completions "$body" 401 && is_error authentication_error \
   && req "wrong key" POST /v1/completions "$body" 401 -H 'Authorization: Bearer key-three' \
   && req "wrong key (prefix)" POST /v1/completions "$body" 401 -H 'Authorization: Bearer key-on' \
   && req "models without key" GET /v1/models "" 401 \
   && req "key one" POST /v1/completions "$body" 200 -H 'Authorization: Bearer key-one' \
   && req "key two" GET /v1/models "" 200 -H 'Authorization: Bearer key-two' \
   && req "health needs no key" GET /health "" 200; then
    ok "API keys: 401 without or with a wrong key, 200 with either key"
else
    fail "API keys" "$(head -c 300 "$tmp/out")"
fi
if req "no chat template" POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}' 400 \
    -H 'Authorization: Bearer key-one' && is_error invalid_request_error messages \
    && grep -q "chat template" "$tmp/out"; then
    ok "a model without a chat template: chat 400, completions work"
else
    fail "no chat template" "$(head -c 300 "$tmp/out")"
fi

python3 - "$URL" <<'PY' && ok "tenants: each key's prefix cache is its own; cache_salt splits further" || fail "tenant isolation" "see above"
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
doc = "".join("line %d: all work and no play makes jack a dull boy\n" % i for i in range(16))
def cached(key, tail, salt=None):
    b = {"prompt": doc + tail, "max_tokens": 1, "temperature": 0}
    if salt: b["cache_salt"] = salt
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(b), {"Authorization": "Bearer " + key})
    r = c.getresponse(); d = json.loads(r.read())
    assert r.status == 200, d
    return d["usage"]["prompt_tokens_details"]["cached_tokens"]
got = [cached("key-one", "a"), cached("key-one", "b"), cached("key-two", "c"), cached("key-two", "d"),
       cached("key-one", "e", "s"), cached("key-two", "f", "s"), cached("key-one", "g", "s")]
ok = got[0] == 0 and got[1] > 64 and got[2] == 0 and got[3] > 64 and got[4] == 0 and got[5] == 0 and got[6] > 64
if not ok: print("  cached tokens:", got)
sys.exit(0 if ok else 1)
PY

# the queue limit: one long stream in flight, the next request gets 429
curl -sN -H 'Authorization: Bearer key-one' "$URL/v1/completions" \
    -d '{"prompt": "Count:", "max_tokens": 1500, "temperature": 0, "stream": true}' >/dev/null &
bg=$!
for _ in $(seq 1 "$(polls 250)"); do
    curl -s "${MK[@]}" "$URL/metrics" | grep -q '^specula_requests_active 1' && break; sleep 0.02
done
code=$(curl -s -D "$tmp/hdr" -o "$tmp/out" -w '%{http_code}' -H 'Authorization: Bearer key-two' \
       "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": 1}')
kill "$bg" 2>/dev/null; wait "$bg" 2>/dev/null
if [ "$code" = 429 ] && grep -qi '^retry-after:' "$tmp/hdr" && is_error rate_limit_exceeded; then
    ok "over --max-queue: 429 with Retry-After"
else
    fail "429" "HTTP $code: $(cat "$tmp/out")"
fi
for _ in $(seq 1 "$(polls 100)"); do
    curl -s "${MK[@]}" "$URL/metrics" | grep -q '^specula_requests_active 0' && break; sleep 0.05
done
curl -s "${MK[@]}" "$URL/metrics" >"$tmp/m"
if grep -q '^specula_requests_active 0' "$tmp/m" && grep -q '^specula_kv_blocks{state="in_use"} 0' "$tmp/m" \
   && grep -q '^specula_client_disconnects_total 1' "$tmp/m" \
   && req "after 429" POST /v1/completions "$body" 200 -H 'Authorization: Bearer key-two'; then
    ok "a client that disconnects mid-stream is cancelled; its blocks return; serving goes on"
else
    fail "disconnect" "$(grep -E 'active|in_use|disconnect' "$tmp/m")"
fi

kill -TERM "$keys"; wait "$keys"; rc=$?
[ $rc -eq 0 ] && ok "the keys server exits 0 on SIGTERM" || fail "keys server exit" "rc $rc"

# ---- --stamp-chunks (bench/server/run.sh): off by default (above) --------
if serve stamp -m "$model" --stamp-chunks; then
    curl -sN -H 'Content-Type: application/json' "$URL/v1/completions" \
        -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": true}' >"$tmp/sse"
    req "stamped plain" POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 4}' 200 \
    && python3 - "$tmp/sse" "$tmp/out" "$URL" <<'PY' && ok "--stamp-chunks: each text chunk carries specula_timing (CLOCK_MONOTONIC us, emit <= built <= now)" || fail "--stamp-chunks" "$(head -c 600 "$tmp/sse")"
import json, sys, time
now = time.monotonic_ns() // 1000  # CLOCK_MONOTONIC, as the server's stamps
events = open(sys.argv[1]).read().split("\n\n")
assert events[-2] == "data: [DONE]", events[-3:]
chunks = [json.loads(e[6:]) for e in events[:-2]]
stamped = [c for c in chunks if "specula_timing" in c]
assert all(c["choices"][0]["finish_reason"] is None for c in stamped)
assert all(c["choices"][0]["text"] for c in stamped)
assert "specula_timing" not in chunks[-1] and len(stamped) == len(chunks) - 1, chunks
assert sum(c["specula_timing"]["events"] for c in stamped) >= len(stamped) >= 1
# a loaded machine can coalesce all 8 tokens into one chunk: the order of
# stamps across chunks is checked on a stream that cannot end soon
sys.path.insert(0, "tests/server")
from sse_long import first_text_chunks
long_ = first_text_chunks(sys.argv[3], 3)
now = time.monotonic_ns() // 1000
prev = 0
for c in stamped + [None] + long_:
    if c is None:
        prev = 0
        continue
    t = c["specula_timing"]
    assert set(t) == {"emit_us", "events", "built_us"} and all(type(v) is int for v in t.values()), t
    assert prev <= t["emit_us"] <= t["built_us"] <= now and now - t["emit_us"] < 60e6, (t, now)
    prev = t["emit_us"]
assert "specula_timing" not in open(sys.argv[2]).read()  # not on plain responses
PY
    kill -TERM "$PID"; wait "$PID"; rc=$?
    [ $rc -eq 0 ] && ok "the --stamp-chunks server exits 0 on SIGTERM" || fail "stamp server exit" "rc $rc"
fi

# ---- --cors-origin: browsers of one origin may call the API ---------------
if serve cors -m "$model" --cors-origin https://app.example --api-key cors-key --log-format json; then
    H='Authorization: Bearer cors-key'
    curl -s -i -X OPTIONS -H "Origin: https://app.example" -H "Access-Control-Request-Method: POST" \
        -H "Access-Control-Request-Headers: authorization, content-type" "$URL/v1/completions" >"$tmp/cors_pre"
    curl -s -i -H "Origin: https://app.example" -H "$H" "$URL/v1/models" >"$tmp/cors_get"
    curl -s -i -H "Origin: https://evil.example" -H "$H" "$URL/v1/models" >"$tmp/cors_other"
    curl -s -i -H "$H" "$URL/v1/models" >"$tmp/cors_none"
    curl -sN -i -H "Origin: https://app.example" -H "$H" "$URL/v1/completions" \
        -d '{"prompt": "a", "max_tokens": 2, "stream": true}' >"$tmp/cors_sse"
    python3 - "$tmp" <<'PY' && ok "--cors-origin: preflight 204 before auth, Access-Control-Allow-Origin for that origin only (plain and streamed); off by default" || fail "--cors-origin" "see above"
import sys
d = sys.argv[1]
def head(name):
    lines = open(d + "/" + name, "rb").read().split(b"\r\n\r\n")[0].decode().split("\r\n")
    return int(lines[0].split()[1]), {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
bad = []
code, h = head("cors_pre")
if code != 204 or h.get("access-control-allow-origin") != "https://app.example" or "POST" not in h.get("access-control-allow-methods", "") \
        or "authorization" not in h.get("access-control-allow-headers", "").lower(): bad.append(("preflight", code, h))
for name in ("cors_get", "cors_sse"):
    code, h = head(name)
    if code != 200 or h.get("access-control-allow-origin") != "https://app.example" or h.get("vary") != "Origin": bad.append((name, code, h))
for name in ("cors_other", "cors_none"):
    code, h = head(name)
    if code != 200 or "access-control-allow-origin" in h: bad.append((name, code, h))
code, h = head("nocors_pre")
if code != 405 or "access-control-allow-origin" in h: bad.append(("off: preflight", code, h))
code, h = head("nocors_get")
if code != 200 or "access-control-allow-origin" in h: bad.append(("off: get", code, h))
for b in bad: print("  ", b)
sys.exit(1 if bad else 0)
PY
    kill -TERM "$PID"; wait "$PID" 2>/dev/null
else
    fail "--cors-origin" "the server with --cors-origin did not start"
fi

# ---- the request log: one line per generation request, tenants hashed ----
python3 - "$tmp" <<'PY' && ok "request log: a line per request (id, hashed tenant, status, tokens, TTFT, duration, finish), never the key; --log-format json" || fail "request log" "see above"
import json, re, sys
d = sys.argv[1]
bad = []
main = [l for l in open(d + "/main.log", errors="replace") if l.startswith("specula: request ")]
ok200 = [l for l in main if " status=200 " in l and re.search(r"id=(cmpl|chatcmpl)-\w+ tenant=- .* prompt=\d+ cached=\d+ generated=\d+ ttft_ms=[\d.]+ duration_ms=[\d.]+ finish=(stop|length)", l)]
if len(ok200) < 64: bad.append(("main: 200 lines", len(ok200), main[:3]))
if not any(" status=400 " in l and "finish=refused" in l for l in main): bad.append("main: no refused line")
keys = open(d + "/keys.log", errors="replace").read()
if "key-one" in keys or "key-two" in keys: bad.append("keys: a key is in the log")
if not re.search(r"request id=\S+ tenant=[0-9a-f]{12} status=200", keys): bad.append("keys: no hashed tenant")
lines = [json.loads(l) for l in open(d + "/cors.log", errors="replace") if l.startswith("{")]
reqs = [o for o in lines if o.get("event") == "request"]
want = {"id", "tenant", "status", "prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "duration_ms", "finish_reason"}
if not reqs or any(set(o) - {"event"} != want for o in reqs): bad.append(("json", reqs[:2]))
for b in bad: print("  ", b)
sys.exit(1 if bad else 0)
PY

# ---- a draft model (--spec draft) ------------------------------------------
draft=$ref/models/ref-llama-spm-f16.gguf
if serve draft -m "$model" --spec draft --draft "$draft" --spec-fixed-k --spec-k 4 --served-model-name ref; then
    python3 - "$URL" <<'PY' && ok "--spec draft: same greedy text as without speculation, drafts verified" || fail "--spec draft" "see above"
import http.client, json, sys, urllib.parse
url = urllib.parse.urlparse(sys.argv[1])
def post(body):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(body))
    r = c.getresponse(); d = json.loads(r.read())
    assert r.status == 200, d
    return d
p = "The history of the city begins"
off = post({"prompt": p, "max_tokens": 20, "temperature": 0, "speculative": {"method": "off"}})
dr = post({"prompt": p, "max_tokens": 20, "temperature": 0, "model": "ref"})
bad = off["choices"][0]["text"] != dr["choices"][0]["text"]
if bad: print("  %r != %r" % (off["choices"][0]["text"], dr["choices"][0]["text"]))
s = dr["specula"]["spec"]
if s["drafted"] <= 0: bad = True; print("  spec:", s)  # (the reference pair rarely agrees)
sys.exit(1 if bad else 0)
PY
    kill -TERM "$PID"; wait "$PID"; rc=$?
    [ $rc -eq 0 ] && ok "the --spec draft server exits 0 on SIGTERM" || fail "draft server exit" "rc $rc"
fi
if sanitizer "$tmp"/*.log; then
    fail "sanitizer" "$(grep -hE -A 20 'Sanitizer|runtime error' "$tmp"/*.log | head -n 60)"
else
    ok "no sanitizer report in any server's log"
fi

finish
