#!/usr/bin/env bash
# bench/server/run.sh (`make bench-server`): the HTTP server under load, on
# the bundled model (models/specula-code-target-f16.gguf), -t 2.
#
# 1. Throughput and latency: wrk (Debian package `wrk`) POSTs one fixed
#    non-streaming /v1/completions body (a short code prompt, max_tokens 32,
#    temperature 0) over 1, 8 and 32 connections for BENCH_SERVER_SECONDS
#    each; completions.lua counts non-2xx answers apart, so errors cannot
#    pass for requests/s. Without wrk this part is skipped.
# 2. The server's own overhead: a server started with --stamp-chunks stamps
#    each streamed chunk with the CLOCK_MONOTONIC time at which the engine's
#    callback handed it the chunk's token(s); bin/bench_server_stream
#    (stream_client.c) streams the same prompt (max_tokens 64) over 1, 8 and
#    32 concurrent streams and takes arrival - emit for every chunk.
#
# Prints Markdown tables and writes bench/out/server.json (and the raw
# outputs, bench/out/server-*.json). Environment: BENCH_SERVER_SECONDS
# (default 10) per run, BENCH_SERVER_CONNS (default "1 8 32"), BENCH_THREADS
# (engine threads, default 2), SPECULA_BIN, BENCH_SERVER_CLIENT,
# BENCH_SERVER_MODEL. Exits 1 when any request failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${SPECULA_BIN:-bin/specula}
client=${BENCH_SERVER_CLIENT:-bin/bench_server_stream}
model=${BENCH_SERVER_MODEL:-models/specula-code-target-f16.gguf}
secs=${BENCH_SERVER_SECONDS:-10}
conns=${BENCH_SERVER_CONNS:-1 8 32}
threads=${BENCH_THREADS:-2}
out=bench/out
mkdir -p "$out"
# up to date when called from bench/run.sh (whose `make bench` builds neither)
if [ -z "${SPECULA_BIN:-}${BENCH_SERVER_CLIENT:-}" ]; then
    make -s "$bin" "$client"
fi
if [ ! -s "$model" ]; then
    echo "(skipped the server benchmark: $model does not exist)"
    exit 0
fi
tmp=$(mktemp -d)
pid=""
stop_server() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        pid=""
    fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT

prompt='def fibonacci(n):\n'
printf '{"prompt": "%s", "max_tokens": 32, "temperature": 0}' "$prompt" >"$tmp/plain.json"
printf '{"prompt": "%s", "max_tokens": 64, "temperature": 0, "stream": true}' "$prompt" >"$tmp/stream.json"

# start_server NAME ARGS...: on a free loopback port; sets pid and port
start_server() {
    local name=$1
    shift
    "$bin" serve --port 0 -m "$model" -t "$threads" "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 1 200); do
        port=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/$name.log" | head -n 1 | cut -d: -f3 || true)
        [ -n "$port" ] && break
        sleep 0.05
    done
    for _ in $(seq 1 600); do
        if [ -n "$port" ] &&
           [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench/server/run.sh: the server did not become healthy:" >&2
    cat "$tmp/$name.log" >&2
    exit 1
}

failed=0
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 1. wrk: requests/s and latency -------------------------------------------
have_wrk=1
command -v wrk >/dev/null || have_wrk=0
if [ "$have_wrk" = 1 ]; then
    start_server wrk
    url=http://127.0.0.1:$port/v1/completions
    # warm-up; its usage says how many tokens one request generates
    for _ in 1 2 3; do
        curl -s -o "$tmp/warm.json" -H 'Content-Type: application/json' \
            --data-binary @"$tmp/plain.json" "$url"
    done
    cp "$tmp/warm.json" "$out/server-sample-response.json"
    for c in $conns; do
        t=$((c < 2 ? c : 2)) # two cores: wrk's threads share them with the server
        echo "wrk: $c connections, ${secs}s" >&2
        BENCH_BODY_FILE=$tmp/plain.json wrk -t "$t" -c "$c" -d "${secs}s" --timeout 60s --latency \
            -s bench/server/completions.lua "$url" >"$tmp/wrk-$c.txt" 2>"$tmp/wrk-$c.err" || failed=1
        grep '^{' "$tmp/wrk-$c.txt" | tail -n 1 >"$out/server-wrk-c$c.json" || failed=1
        [ -s "$out/server-wrk-c$c.json" ] || { cat "$tmp/wrk-$c.txt" "$tmp/wrk-$c.err" >&2; failed=1; }
    done
    stop_server
else
    echo "(wrk is not installed: skipped requests/s and latency; ./setup.sh bench installs it)" >&2
fi

# ---- 2. the server's own overhead ----------------------------------------------
start_server stamp --stamp-chunks
for c in $conns; do
    echo "overhead: $c streams, ${secs}s" >&2
    "$client" "$port" "$c" "$secs" "$tmp/stream.json" >"$out/server-overhead-c$c.json" || failed=1
done
stop_server

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/env python3 - "$out" "$have_wrk" "$conns" "$secs" "$threads" "$load_before" "$load_after" \
    "$model" <<'PY' || failed=1
import json, os, sys
out, have_wrk, conns, secs, threads, lb, la, model = sys.argv[1:]
conns = [int(c) for c in conns.split()]
def load(p):
    p = os.path.join(out, p)
    try:
        with open(p) as f: return json.loads(f.read())
    except (OSError, ValueError): return None
res = {"model": model, "engine_threads": int(threads), "seconds_per_run": float(secs),
       "cores": os.cpu_count(), "loadavg_before": lb, "loadavg_after": la,
       "wrk": {}, "overhead": {}}
bad = False
sample = load("server-sample-response.json")
toks = sample["usage"]["completion_tokens"] if sample else None
res["completion_tokens_per_request"] = toks
if have_wrk == "1":
    print("\n## server: /v1/completions under wrk (%s, -t %s, %s s per run)\n" % (os.path.basename(model), threads, secs))
    print("| connections | requests/s (2xx) | tokens/s | p50 latency | p99 latency | errors |")
    print("|---|---|---|---|---|---|")
    for c in conns:
        w = load("server-wrk-c%d.json" % c)
        res["wrk"][str(c)] = w
        if not w: print("| %d | (failed) | | | | |" % c); bad = True; continue
        errs = w["bad"] + sum(w["socket_errors"].values())
        bad |= errs > 0
        print("| %d | %.2f | %s | %.1f ms | %.1f ms | %d |" % (
            c, w["ok_per_s"], "%.0f" % (w["ok_per_s"] * toks) if toks else "?",
            w["latency_us"]["p50"] / 1e3, w["latency_us"]["p99"] / 1e3, errs))
print("\n## server: overhead, engine callback to client receipt (streamed, max_tokens 64)\n")
print("| streams | chunks | p50 | p90 | p99 | callback to formatted p50 / p99 | formatted to received p50 / p99 | callback after the step's first p50 / p99 | events per chunk |")
print("|---|---|---|---|---|---|---|---|---|")
for c in conns:
    o = load("server-overhead-c%d.json" % c)
    res["overhead"][str(c)] = o
    if not o: print("| %d | (failed) | | | | | | | |" % c); bad = True; continue
    bad |= o["errors"] > 0
    t, b, w = o["arrival_minus_emit_us"], o["built_minus_emit_us"], o["arrival_minus_built_us"]
    sp = o["emit_minus_step_first_emit_us"]
    print("| %d | %d | %d us | %d us | %d us | %d / %d us | %d / %d us | %d / %d us | %.3f |" % (
        c, o["chunks"], t["p50"], t["p90"], t["p99"], b["p50"], b["p99"], w["p50"], w["p99"],
        sp["p50"], sp["p99"], o["events_per_chunk"]))
print("\n(load average before / after: %s / %s on %s cores)" % (lb, la, os.cpu_count()))
with open(os.path.join(out, "server.json"), "w") as f:
    json.dump(res, f, indent=1)
    f.write("\n")
sys.exit(1 if bad else 0)
PY
if [ "$failed" != 0 ]; then
    echo
    echo "**the server benchmark had failed requests or runs (see bench/out/server-*.json)**"
fi
exit "$failed"
