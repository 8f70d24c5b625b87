#!/usr/bin/env bash
# bench.sh: the scale-out table of BENCHMARKS.md ("Scale-out"): the
# multi-tenant workload against 1, 2 and 4 replicas behind HAProxy, prefix
# affinity and round robin, one fresh cluster per row; prints a Markdown
# table (H_tokens and prefill positions from the replicas' /metrics summed,
# TTFT p50/p99, throughput, imbalance) and keeps each report in --out DIR
# (default: a fresh ${TMPDIR:-/tmp}/specula-scaleout.XXXXXXXXXX, named on
# stderr).
#
#   deploy/bench.sh [--replicas "1 2 4"] [--policies "prefix roundrobin"]
#                   [--balance-factor F] [--out DIR] [-- BENCH ARGS...]
#
# Serve arguments: $SERVE_ARGS (default "-t 1 --kv-mem 20M"). Bench
# arguments after -- replace the default workload.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SPECULA_BIN:-$root/bin/specula}
export SPECULA_BIN=$bin
replicas="1 2 4"; policies="prefix roundrobin"; factor=125; out=""
work=(--workload multi-tenant --num-requests 96 --tenants 4 --documents 8 --zipf 0.5
      --concurrency 4 --warmup 0 --no-isolation --metrics-period 0)
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) replicas=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --policies) policies=$2; shift 2 ;;
        --balance-factor) factor=$2; shift 2 ;;
        --) shift; work=("$@"); break ;;
        *) echo "bench.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
read -r -a serve <<<"${SERVE_ARGS:--t 1 --kv-mem 20M}"
# not a fixed name in a shared /tmp: another user could have put links there
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/specula-scaleout.XXXXXXXXXX") || exit 1
    echo "bench.sh: reports in $out" >&2
fi
mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
trap '"$here/cluster.sh" stop --port "$port" --state-dir "$out/state" >/dev/null 2>&1' EXIT
echo "| replicas | policy | H_tokens | prefill positions computed | cached tokens | TTFT p50 (ms) | TTFT p99 (ms) | req/s | output tok/s | requests per replica | imbalance |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for n in $replicas; do
    for policy in $policies; do
        [ "$n" = 1 ] && [ "$policy" = roundrobin ] && continue
        name=$n-$policy-$factor
        "$here/cluster.sh" start --replicas "$n" --port "$port" --policy "$policy" --balance-factor "$factor" \
            --state-dir "$out/state" -- "${serve[@]}" >"$out/$name.cluster" 2>&1 ||
            { echo "bench.sh: cluster $name did not start: $(tail -n 3 "$out/$name.cluster")" >&2; exit 1; }
        murl=$(grep -o '^replica r[0-9]*: http://[0-9.:]*' "$out/$name.cluster" | awk '{print $3}' | paste -sd, -)
        "$bin" bench --base-url "http://127.0.0.1:$port" --metrics-url "$murl" --no-progress \
            --json "$out/$name.json" "${work[@]}" >"$out/$name.txt" 2>&1 ||
            echo "bench.sh: bench $name failed: $(tail -n 3 "$out/$name.txt")" >&2
        "$here/cluster.sh" stop --port "$port" --state-dir "$out/state" >/dev/null 2>&1
        python3 - "$out/$name.json" "$n" "$([ "$n" = 1 ] && echo '(one server)' || { [ "$policy" = prefix ] && echo "prefix, factor $factor" || echo "$policy"; })" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["metrics"]["runs"][0]
f = lambda v, d=0: "-" if v is None else ("%.*f" % (d, v))
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
    sys.argv[2], sys.argv[3], f(r["srv_h_tokens"], 3), f(r["srv_prefill_tokens"]), f(r["srv_cached_tokens"]),
    f(r["ttft_p50_ms"]), f(r["ttft_p99_ms"]), f(r["requests_per_s"], 2), f(r["output_tokens_per_s"], 1),
    " / ".join("%d" % x for x in r.get("replica_requests", [])), f(r.get("replica_imbalance"), 2)))
PY
    done
done
