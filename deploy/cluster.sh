#!/usr/bin/env bash
# cluster.sh: N `specula serve` replicas on loopback behind HAProxy, routed
# by prefix affinity (deploy/haproxy.cfg.in, deploy/specula_route.lua).
#
#   deploy/cluster.sh start --replicas N --port P [--policy prefix|roundrobin]
#                     [--host ADDR] [--key-bytes B] [--balance-factor F]
#                     [--state-dir DIR] [-- SERVE ARGS...]
#       starts N replicas (`specula serve --port 0 SERVE ARGS`, so each takes
#       a free loopback port) and HAProxy on ADDR:P (default 127.0.0.1);
#       waits until every replica is healthy and HAProxy sees them all up,
#       then prints the cluster's URL and each replica's URL. If anything
#       fails to start, everything already started is stopped and it exits 1.
#   deploy/cluster.sh stop --port P        stops HAProxy and every replica
#   deploy/cluster.sh status --port P      each process, its URL and health
#   deploy/cluster.sh restart-replica --port P --replica I
#       starts replica I again (on its port, with the same arguments) after
#       it died or was stopped; HAProxy's health check puts it back.
#   deploy/cluster.sh stop-replica --port P --replica I [--kill]
#       stops replica I (SIGTERM: it drains; --kill: SIGKILL)
#
# State (pids, ports, logs, the generated haproxy.cfg, HAProxy's admin
# socket, started.pids: every process it ever started there) lives in --state-dir, default ${TMPDIR:-/tmp}/specula-cluster-P.
# Environment: SPECULA_BIN (default bin/specula, else specula on PATH),
# HAPROXY (default haproxy).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SPECULA_BIN:-}
if [ -z "$bin" ]; then
    if [ -x "$root/bin/specula" ]; then bin=$root/bin/specula; else bin=$(command -v specula || true); fi
fi
haproxy=${HAPROXY:-haproxy}

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

cmd=${1:-}; [ -n "$cmd" ] || usage 2
shift
replicas=0; port=""; policy=prefix; host=127.0.0.1; key_bytes=512; factor=125
state=""; replica=""; kill_hard=0; serve_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) replicas=${2:-}; shift 2 ;;
        --port) port=${2:-}; shift 2 ;;
        --policy) policy=${2:-}; shift 2 ;;
        --host) host=${2:-}; shift 2 ;;
        --key-bytes) key_bytes=${2:-}; shift 2 ;;
        --balance-factor) factor=${2:-}; shift 2 ;;
        --state-dir) state=${2:-}; shift 2 ;;
        --replica) replica=${2:-}; shift 2 ;;
        --kill) kill_hard=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; serve_args=("$@"); break ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case "$port" in ''|*[!0-9]*) die "--port P is required (a number)" ;; esac
[ -n "$state" ] || state=${TMPDIR:-/tmp}/specula-cluster-$port

# a zombie (killed, not reaped yet: the replicas outlive this script, so
# their parent is whatever adopted them) counts as dead
alive() {
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    local st
    st=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)
    [ "$st" != Z ]
}
http_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true; }

# stop_pid PID: SIGTERM, then SIGKILL after 15 s (a replica drains first)
stop_pid() {
    local p=$1 i
    alive "$p" || return 0
    kill -TERM "$p" 2>/dev/null
    for i in $(seq 1 150); do alive "$p" || return 0; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    for i in $(seq 1 20); do alive "$p" || return 0; sleep 0.1; done
}

# start_replica I [PORT]: starts replica I in the background; waits for its
# URL in its log (sets rurl) and for /health 200. Returns non-zero (and
# prints why) when it exits or does not become healthy in 120 s.
start_replica() {
    local i=$1 p=${2:-0} log pid u k
    log=$state/replica-$i.log
    local -a args=()
    mapfile -d '' -t args <"$state/serve.args"
    : >"$log"
    "$bin" serve --host 127.0.0.1 --port "$p" "${args[@]}" </dev/null >>"$log" 2>&1 &
    pid=$!
    echo "$pid" >"$state/replica-$i.pid"
    echo "$pid" >>"$state/started.pids"   # every process ever started here (tests check them)
    rurl=""
    for k in $(seq 1 600); do
        u=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | head -n 1)
        [ -n "$u" ] && { rurl=${u#listening on }; break; }
        alive "$pid" || break
        sleep 0.05
    done
    if [ -z "$rurl" ]; then
        echo "cluster.sh: replica $i did not start: $(tail -n 5 "$log")" >&2
        return 1
    fi
    echo "${rurl##*:}" >"$state/replica-$i.port"
    for k in $(seq 1 1200); do
        [ "$(http_code "$rurl/health")" = 200 ] && return 0
        alive "$pid" || break
        sleep 0.1
    done
    echo "cluster.sh: replica $i ($rurl) did not become healthy: $(tail -n 5 "$log")" >&2
    return 1
}

stop_all() {
    local f
    [ -f "$state/haproxy.pid" ] && stop_pid "$(cat "$state/haproxy.pid")"
    for f in "$state"/replica-*.pid; do
        [ -e "$f" ] || continue
        kill -TERM "$(cat "$f")" 2>/dev/null   # all drain at once
    done
    for f in "$state"/replica-*.pid; do
        [ -e "$f" ] || continue
        stop_pid "$(cat "$f")"
    done
    rm -f "$state"/*.pid "$state/admin.sock"
}

# backend server states from HAProxy's CSV statistics: "name status" lines
proxy_states() {
    curl -s -m 2 "http://127.0.0.1:$port/haproxy/stats;csv" 2>/dev/null |
        awk -F, '$1 == "replicas" && $2 != "BACKEND" { print $2, $18 }'
}

case "$cmd" in
start)
    case "$replicas" in ''|*[!0-9]*|0) die "--replicas N (N >= 1) is required" ;; esac
    case "$policy" in prefix|roundrobin) ;; *) die "--policy is prefix or roundrobin" ;; esac
    case "$key_bytes" in ''|*[!0-9]*|0) die "--key-bytes must be a positive number" ;; esac
    case "$factor" in ''|*[!0-9]*) die "--balance-factor must be a number (0: off, >100: bound)" ;; esac
    [ -n "$bin" ] && [ -x "$bin" ] || die "no specula binary (build it, or set SPECULA_BIN)"
    command -v "$haproxy" >/dev/null || die "haproxy is not installed (Debian: apt-get install haproxy)"
    if [ -f "$state/haproxy.pid" ] && alive "$(cat "$state/haproxy.pid")"; then
        die "a cluster already runs on port $port (deploy/cluster.sh stop --port $port)"
    fi
    mkdir -p "$state" || die "cannot create $state"
    rm -f "$state"/replica-* "$state/started.pids"
    printf '%s\0' "${serve_args[@]}" >"$state/serve.args"
    echo "$policy" >"$state/policy"
    # from here on, a failure stops whatever was started
    trap 'stop_all; exit 1' INT TERM
    servers=""
    for i in $(seq 1 "$replicas"); do
        start_replica "$i" || { stop_all; exit 1; }
        servers+="    server r$i 127.0.0.1:$(cat "$state/replica-$i.port") id $i weight 100"$'\n'
    done
    if [ "$policy" = prefix ]; then
        bal="balance hash var(txn.specula_key)\n    hash-type consistent\n    hash-balance-factor $factor"
    else
        bal="balance roundrobin"
    fi
    case "$host" in *:*) bind="[$host]:$port" ;; *) bind="$host:$port" ;; esac
    wait_bytes=$(( key_bytes * 2 + 2048 ))
    [ "$wait_bytes" -gt 60000 ] && wait_bytes=60000
    sed -e "s|@LUA_PATH@|$here/specula_route.lua|" -e "s|@STATE_DIR@|$state|" \
        -e "s|@BIND@|$bind|" -e "s|@KEY_BYTES@|$key_bytes|g" -e "s|@WAIT_BYTES@|$wait_bytes|g" \
        -e "s|@BALANCE_FACTOR@|$factor|g" -e "s|@BALANCE@|$bal|" \
        "$here/haproxy.cfg.in" | awk -v s="$servers" '$0 == "@SERVERS@" { printf "%s", s; next } { print }' \
        >"$state/haproxy.cfg"
    "$haproxy" -c -q -f "$state/haproxy.cfg" >"$state/haproxy.log" 2>&1 ||
        { echo "cluster.sh: bad HAProxy configuration: $(cat "$state/haproxy.log")" >&2; stop_all; exit 1; }
    "$haproxy" -db -f "$state/haproxy.cfg" </dev/null >"$state/haproxy.log" 2>&1 &
    echo $! >"$state/haproxy.pid"
    echo $! >>"$state/started.pids"
    # HAProxy is ready when its /health answers and it has checked every replica up
    ok=0
    for _ in $(seq 1 200); do
        if ! alive "$(cat "$state/haproxy.pid")"; then break; fi
        if [ "$(http_code "http://127.0.0.1:$port/health")" = 200 ] &&
           [ "$(proxy_states | grep -c ' UP$')" -eq "$replicas" ]; then ok=1; break; fi
        sleep 0.1
    done
    if [ "$ok" != 1 ]; then
        echo "cluster.sh: HAProxy did not come up with $replicas replicas: $(tail -n 5 "$state/haproxy.log")" >&2
        stop_all; exit 1
    fi
    trap - INT TERM
    shost=$host; case "$host" in 0.0.0.0|::) shost=127.0.0.1 ;; *:*) shost="[$host]" ;; esac
    echo "cluster: http://$shost:$port ($replicas replicas, policy $policy, state $state)"
    for i in $(seq 1 "$replicas"); do
        echo "replica r$i: http://127.0.0.1:$(cat "$state/replica-$i.port") (pid $(cat "$state/replica-$i.pid"))"
    done
    ;;
stop)
    [ -d "$state" ] || die "no cluster state in $state"
    stop_all
    echo "cluster on port $port stopped"
    ;;
status)
    [ -d "$state" ] || die "no cluster state in $state"
    rc=0
    hp=$(cat "$state/haproxy.pid" 2>/dev/null)
    if alive "$hp"; then
        echo "haproxy: pid $hp, http://127.0.0.1:$port, policy $(cat "$state/policy" 2>/dev/null), /health $(http_code "http://127.0.0.1:$port/health")"
    else
        echo "haproxy: not running"; rc=1
    fi
    declare -A pstate=()
    while read -r n s; do [ -n "$n" ] && pstate[$n]=$s; done < <(proxy_states)
    for f in "$state"/replica-*.port; do
        [ -e "$f" ] || continue
        i=${f##*/replica-}; i=${i%.port}
        p=$(cat "$f"); pid=$(cat "$state/replica-$i.pid" 2>/dev/null)
        if alive "$pid"; then r="pid $pid, /health $(http_code "http://127.0.0.1:$p/health")"
        else r="not running"; rc=1; fi
        echo "replica r$i: http://127.0.0.1:$p, $r, haproxy: ${pstate[r$i]:-?}"
    done
    exit $rc
    ;;
restart-replica|stop-replica)
    case "$replica" in ''|*[!0-9]*) die "--replica I is required" ;; esac
    [ -f "$state/replica-$replica.port" ] || die "no replica $replica in $state"
    pid=$(cat "$state/replica-$replica.pid" 2>/dev/null)
    if [ "$cmd" = stop-replica ]; then
        if [ "$kill_hard" = 1 ]; then kill -KILL "$pid" 2>/dev/null; else stop_pid "$pid"; fi
        exit 0
    fi
    alive "$pid" && die "replica $replica is running (pid $pid)"
    start_replica "$replica" "$(cat "$state/replica-$replica.port")" || {
        stop_pid "$(cat "$state/replica-$replica.pid")"; exit 1; }
    echo "replica r$replica: $rurl (pid $(cat "$state/replica-$replica.pid"))"
    ;;
*) usage 2 ;;
esac
