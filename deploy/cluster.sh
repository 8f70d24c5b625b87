#!/usr/bin/env bash
# cluster.sh: N `specula serve` replicas on loopback behind HAProxy, routed
# by prefix affinity (deploy/haproxy.cfg.in, deploy/specula_route.lua).
#
#   deploy/cluster.sh start --replicas N --port P [--policy prefix|roundrobin]
#                     [--host ADDR] [--key-bytes B] [--balance-factor F]
#                     [--stats] [--state-dir DIR] [-- SERVE ARGS...]
#       starts N replicas (`specula serve --port 0 SERVE ARGS`, so each takes
#       a free loopback port) and HAProxy on ADDR:P (default 127.0.0.1);
#       waits until every replica is healthy and HAProxy sees them all up,
#       then prints the cluster's URL and each replica's URL. If anything
#       fails to start, everything already started is stopped and it exits 1.
#       API keys: `--api-key-file FILE` in SERVE ARGS is passed on; keys given
#       as `--api-key KEY` there are moved into a private file in the state
#       directory, so that no replica shows them in the process list (this
#       script's own command line does, while it runs: prefer the file).
#       --stats: HAProxy's statistics page at /haproxy/stats, with user
#       `specula` and a generated password (the state directory's
#       stats.secret), from loopback only; off by default.
#   deploy/cluster.sh stop --port P        stops HAProxy and every replica
#   deploy/cluster.sh status --port P      each process, its URL and health
#   deploy/cluster.sh restart-replica --port P --replica I
#       starts replica I again (on its port, with the same arguments) after
#       it died or was stopped; HAProxy's health check puts it back.
#   deploy/cluster.sh stop-replica --port P --replica I [--kill]
#       stops replica I (SIGTERM: it drains; --kill: SIGKILL)
#
# State (pids, ports, logs, API keys, the generated haproxy.cfg, HAProxy's
# sockets) lives in a directory only this user can enter (0700, files 0600):
# --state-dir DIR (created, or, when it exists, used only if it is this
# user's, mode 0700 and not a symbolic link), by default
# $XDG_RUNTIME_DIR/specula-cluster-P, or without XDG_RUNTIME_DIR a fresh
# ${TMPDIR:-/tmp}/specula-cluster-P.XXXXXXXXXX (found again by the other
# commands). `stop` and the others signal only processes that this cluster
# started: the PID's start time and a random token in its environment must
# match what `start` recorded.
# Environment: SPECULA_BIN (default bin/specula, else specula on PATH),
# HAPROXY (default haproxy).
set -u
# Everything written here is private: the state holds API keys and the stats
# password, the logs hold request lines. noclobber: a redirection never
# replaces a file that exists (nor follows a symbolic link to one); files are
# removed first where they are rewritten (put, below).
umask 077
set -C
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${SPECULA_BIN:-}
if [ -z "$bin" ]; then
    if [ -x "$root/bin/specula" ]; then bin=$root/bin/specula; else bin=$(command -v specula || true); fi
fi
haproxy=${HAPROXY:-haproxy}
uid=$(id -u)

die() { echo "cluster.sh: $*" >&2; exit 1; }
usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

cmd=${1:-}; [ -n "$cmd" ] || usage 2
shift
replicas=0; port=""; policy=prefix; host=127.0.0.1; key_bytes=512; factor=125
state=""; replica=""; kill_hard=0; stats=0; serve_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --replicas) replicas=${2:-}; shift 2 ;;
        --port) port=${2:-}; shift 2 ;;
        --policy) policy=${2:-}; shift 2 ;;
        --host) host=${2:-}; shift 2 ;;
        --key-bytes) key_bytes=${2:-}; shift 2 ;;
        --balance-factor) factor=${2:-}; shift 2 ;;
        --state-dir) state=${2:-}; [ -n "$state" ] || die "--state-dir needs a directory"; shift 2 ;;
        --replica) replica=${2:-}; shift 2 ;;
        --kill) kill_hard=1; shift ;;
        --stats) stats=1; shift ;;
        -h|--help) usage 0 ;;
        --) shift; serve_args=("$@"); break ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case "$port" in ''|*[!0-9]*) die "--port P is required (a number)" ;; esac

# ---- the state directory ----------------------------------------------------

# private_dir DIR: DIR is a directory, not a symbolic link, owned by this
# user, mode 0700: nobody else can add, replace or read a file in it
private_dir() {
    [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ "$(stat -c %a -- "$1")" = 700 ]
}
# safe_path DIR (canonical, no symbolic links): nobody else can rename or
# replace DIR or a directory above it: each is owned by root or this user
# and is not writable by group or others, unless sticky (as /tmp is)
safe_path() {
    local d=$1 u m
    while :; do
        read -r u m < <(stat -c '%u %a' -- "$d" 2>/dev/null) || return 1
        [ "$u" = 0 ] || [ "$u" = "$uid" ] || return 1
        (( (8#$m & 8#022) == 0 || (8#$m & 8#1000) != 0 )) || return 1
        [ "$d" = / ] && return 0
        d=$(dirname -- "$d")
    done
}
# canonical DIR: DIR's absolute path without symbolic links (it must exist)
canonical() { (cd -P -- "$1" 2>/dev/null && pwd -P); }
# the paths go into haproxy.cfg unquoted, and into sed replacements
plain_path() {
    case "$1" in *[!A-Za-z0-9._/+-]*) die "$2 '$1' has characters other than A-Z a-z 0-9 . _ / + -" ;; esac
}

# check_state DIR WHAT: DIR is private and safely placed, or die
check_state() {
    private_dir "$1" ||
        die "refusing $2 $1: it must be a directory of this user's with mode 0700, not a symbolic link"
    local c
    if ! c=$(canonical "$1") || ! safe_path "$c"; then
        die "refusing $2 $1: a directory above it can be changed by another user"
    fi
}

# make_state DIR: creates DIR (mode 0700) for `start`, or checks an existing one
make_state() {
    local parent name
    parent=$(dirname -- "$1"); name=$(basename -- "$1")
    case "$name" in .|..|/) die "--state-dir $1: name a directory" ;; esac
    if [ -e "$1" ] || [ -L "$1" ]; then check_state "$1" "--state-dir"; return; fi
    mkdir -p -- "$parent" || die "cannot create $parent"
    parent=$(canonical "$parent") || die "cannot enter $parent"
    safe_path "$parent" || die "refusing --state-dir $1: $parent (or a directory above it) can be changed by another user"
    mkdir -m 700 -- "$parent/$name" || die "cannot create $1"
}

# the fresh default directories of port P (no XDG_RUNTIME_DIR) that are ours
tmp_base=${TMPDIR:-/tmp}
own_tmp_states() {
    local d
    for d in "$tmp_base/specula-cluster-$port".??????????; do
        private_dir "$d" && [ -f "$d/token" ] && printf '%s\n' "$d"
    done
}

if [ -n "$state" ]; then
    plain_path "$state" "--state-dir"
    [ "$cmd" = start ] && make_state "$state"
elif [ -n "${XDG_RUNTIME_DIR:-}" ]; then
    # private to this user by the XDG specification (and checked)
    if ! xdg=$(canonical "$XDG_RUNTIME_DIR") || ! private_dir "$xdg" || ! safe_path "$xdg"; then
        die "XDG_RUNTIME_DIR ($XDG_RUNTIME_DIR) is not a private directory of this user's"
    fi
    state=$xdg/specula-cluster-$port
    [ "$cmd" = start ] && make_state "$state"
else
    mapfile -t found < <(own_tmp_states)
    if [ "$cmd" = start ]; then
        if ! base=$(canonical "$tmp_base") || ! safe_path "$base"; then
            die "TMPDIR ($tmp_base) can be changed by another user: give --state-dir"
        fi
        stale=("${found[@]}")
        state=$(mktemp -d "$base/specula-cluster-$port.XXXXXXXXXX") || die "cannot create a directory in $base"
    else
        [ "${#found[@]}" -gt 0 ] || die "no cluster state for port $port in $tmp_base (give --state-dir)"
        [ "${#found[@]}" -eq 1 ] || die "several cluster states for port $port: ${found[*]} (give --state-dir)"
        state=${found[0]}
    fi
fi
[ -e "$state" ] || [ "$cmd" = start ] || die "no cluster state in $state"
check_state "$state" "state directory"
state=$(canonical "$state")
plain_path "$state" "the state directory"
plain_path "$here" "the deploy directory"

# put FILE TEXT: FILE holds TEXT and a newline, created anew (0600)
put() { rm -f -- "$1" && printf '%s\n' "$2" >"$1"; }

# ---- processes: only those this run started ---------------------------------

# proc_start PID: the process's start time (clock ticks after boot): with the
# PID it names one process, as a PID used again later starts later
proc_start() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }
# a zombie (killed, not reaped yet: the replicas outlive this script, so
# their parent is whatever adopted them) counts as dead
alive() {
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    local st
    st=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)
    [ "$st" != Z ]
}
# the run's token: every process `start` starts has SPECULA_CLUSTER_TOKEN=it
# in its environment, which only its owner can read (/proc/PID/environ)
token=$(cat "$state/token" 2>/dev/null || true)
# ours PID START: PID is a live process that this cluster started: its start
# time is START and the run's token is in its environment
ours() {
    local pid=$1 start=${2:-} e
    [ -n "$token" ] && [[ $pid =~ ^[1-9][0-9]*$ ]] && alive "$pid" || return 1
    [ -n "$start" ] && [ "$(proc_start "$pid")" = "$start" ] || return 1
    local -a env=()
    mapfile -d '' -t env 2>/dev/null <"/proc/$pid/environ" || return 1
    for e in "${env[@]}"; do [ "$e" = "SPECULA_CLUSTER_TOKEN=$token" ] && return 0; done
    return 1
}
# proc NAME: "PID START" from NAME.pid, checked: prints the PID when it is a
# live process of ours, nothing when it is gone; says so when the PID is
# alive but not ours (another process has it now, or the file was changed)
proc() {
    local f=$state/$1.pid pid start
    [ -f "$f" ] && [ ! -L "$f" ] || return 0
    read -r pid start <"$f" || return 0
    if ours "$pid" "$start"; then echo "$pid"
    elif [[ ${pid:-} =~ ^[1-9][0-9]*$ ]] && alive "$pid"; then
        echo "cluster.sh: pid $pid in $f is not a process this cluster started: left alone" >&2
    fi
}
# runs [DIR TOKEN]: a process of the cluster in DIR (default: this one) is alive
runs() {
    local state=${1:-$state} token=${2:-$token} f n
    for f in "$state"/*.pid; do
        [ -e "$f" ] || continue
        n=${f##*/}
        [ -n "$(proc "${n%.pid}")" ] && return 0
    done
    return 1
}
# record NAME PID: NAME.pid and started.pids (every process `start` or
# `restart-replica` started here; the tests check them) say "PID START"
record() {
    local line; line="$1 $(proc_start "$1")"
    put "$state/$2.pid" "$line"
    printf '%s\n' "$line" >>"$state/started.pids"
}

http_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true; }

# stop_pid PID: SIGTERM, then SIGKILL after 15 s (a replica drains first);
# PID comes from proc (checked)
stop_pid() {
    local p=${1:-} i
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
    local i=$1 p=${2:-0} log pid u
    log=$state/replica-$i.log
    local -a args=()
    mapfile -d '' -t args <"$state/serve.args"
    rm -f -- "$log"
    SPECULA_CLUSTER_TOKEN=$token "$bin" serve --host 127.0.0.1 --port "$p" "${args[@]}" </dev/null >"$log" 2>&1 &
    pid=$!
    record "$pid" "replica-$i"
    rurl=""
    for _ in $(seq 1 600); do
        u=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | head -n 1)
        [ -n "$u" ] && { rurl=${u#listening on }; break; }
        alive "$pid" || break
        sleep 0.05
    done
    if [ -z "$rurl" ]; then
        echo "cluster.sh: replica $i did not start: $(tail -n 5 "$log")" >&2
        return 1
    fi
    put "$state/replica-$i.port" "${rurl##*:}"
    for _ in $(seq 1 1200); do
        [ "$(http_code "$rurl/health")" = 200 ] && return 0
        alive "$pid" || break
        sleep 0.1
    done
    echo "cluster.sh: replica $i ($rurl) did not become healthy: $(tail -n 5 "$log")" >&2
    return 1
}

stop_all() {
    local f n p
    local -a ps=()
    stop_pid "$(proc haproxy)"
    for f in "$state"/replica-*.pid; do
        [ -e "$f" ] || continue
        n=${f##*/}; p=$(proc "${n%.pid}")
        [ -n "$p" ] || continue
        ps+=("$p")
        kill -TERM "$p" 2>/dev/null   # all drain at once
    done
    for p in "${ps[@]}"; do stop_pid "$p"; done
    rm -f -- "$state"/*.pid "$state/admin.sock" "$state/stats.sock"
}

# backend server states from HAProxy's CSV statistics, read on the UNIX
# socket in the state directory: "name status" lines
proxy_states() {
    curl -s -m 2 --unix-socket "$state/stats.sock" "http://localhost/;csv" 2>/dev/null |
        awk -F, '$1 == "replicas" && $2 != "BACKEND" { print $2, $18 }'
}

case "$cmd" in
start)
    case "$replicas" in ''|*[!0-9]*|0) die "--replicas N (N >= 1) is required" ;; esac
    case "$policy" in prefix|roundrobin) ;; *) die "--policy is prefix or roundrobin" ;; esac
    case "$key_bytes" in ''|*[!0-9]*|0) die "--key-bytes must be a positive number" ;; esac
    case "$factor" in ''|*[!0-9]*) die "--balance-factor must be a number (0: off, >100: bound)" ;; esac
    [ -x "${bin:-}" ] || die "no specula binary (build it, or set SPECULA_BIN)"
    command -v "$haproxy" >/dev/null || die "haproxy is not installed (Debian: apt-get install haproxy)"
    # a previous run in this directory must be stopped first
    runs && die "a cluster already runs from $state (deploy/cluster.sh stop --port $port --state-dir $state)"
    # earlier default directories of this port: stopped ones are removed
    for d in "${stale[@]+"${stale[@]}"}"; do
        if runs "$d" "$(cat "$d/token")"; then
            rmdir -- "$state"
            die "a cluster already runs on port $port from $d (deploy/cluster.sh stop --port $port)"
        fi
        rm -rf -- "$d"
    done
    rm -f -- "$state"/replica-* "$state"/*.pid "$state"/{started.pids,serve.args,api-keys,policy,token} \
        "$state"/{stats.secret,haproxy.cfg,haproxy.log,admin.sock,stats.sock}
    token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    [ "${#token}" = 32 ] || die "cannot read /dev/urandom"
    put "$state/token" "$token"
    : >"$state/started.pids"
    # API keys reach the replicas in a file, never on their command lines
    keys=(); args=(); keyfile=0
    while [ ${#serve_args[@]} -gt 0 ]; do
        case "${serve_args[0]}" in
            --api-key) [ ${#serve_args[@]} -ge 2 ] || die "--api-key needs a value"
                       keys+=("${serve_args[1]}"); serve_args=("${serve_args[@]:2}") ;;
            --api-key-file) keyfile=1; args+=("${serve_args[0]}"); serve_args=("${serve_args[@]:1}") ;;
            *) args+=("${serve_args[0]}"); serve_args=("${serve_args[@]:1}") ;;
        esac
    done
    if [ ${#keys[@]} -gt 0 ]; then
        [ "$keyfile" = 0 ] || die "give the API keys as --api-key or in --api-key-file, not both"
        rm -f -- "$state/api-keys"
        printf '%s\n' "${keys[@]}" >"$state/api-keys"
        args+=(--api-key-file "$state/api-keys")
    fi
    rm -f -- "$state/serve.args"
    : >"$state/serve.args"
    [ ${#args[@]} -eq 0 ] || printf '%s\0' "${args[@]}" >>"$state/serve.args"
    put "$state/policy" "$policy"
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
    # the public statistics page: only when asked for, and only with the
    # password (a loopback source is no proof of who is asking: a local
    # TLS terminator or another local user is loopback too)
    stats_cfg="    # no statistics page (cluster.sh --stats adds one, with a password)"
    # The password reaches HAProxy in its environment (private to this
    # user, as /proc/PID/environ is), not on a command line nor in the
    # configuration file.
    secret=""
    if [ "$stats" = 1 ]; then
        secret=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')
        [ "${#secret}" = 36 ] || { stop_all; die "cannot read /dev/urandom"; }
        put "$state/stats.secret" "$secret"
        stats_cfg="    stats enable\n    stats uri /haproxy/stats\n    stats refresh 5s\n"
        stats_cfg+="    stats auth \"specula:\${SPECULA_STATS_SECRET}\"\n"
        stats_cfg+="    http-request deny if { path_beg /haproxy/ } !{ src 127.0.0.0/8 ::1 }"
    fi
    case "$host" in *:*) bind="[$host]:$port" ;; *) bind="$host:$port" ;; esac
    wait_bytes=$(( key_bytes * 2 + 2048 ))
    [ "$wait_bytes" -gt 60000 ] && wait_bytes=60000
    rm -f -- "$state/haproxy.cfg"
    sed -e "s|@LUA_PATH@|$here/specula_route.lua|" -e "s|@STATE_DIR@|$state|g" \
        -e "s|@BIND@|$bind|" -e "s|@KEY_BYTES@|$key_bytes|g" -e "s|@WAIT_BYTES@|$wait_bytes|g" \
        -e "s|@BALANCE_FACTOR@|$factor|g" -e "s|@BALANCE@|$bal|" -e "s|^@STATS@\$|$stats_cfg|" \
        "$here/haproxy.cfg.in" | awk -v s="$servers" '$0 == "@SERVERS@" { printf "%s", s; next } { print }' \
        >"$state/haproxy.cfg"
    rm -f -- "$state/haproxy.log"
    SPECULA_STATS_SECRET=$secret "$haproxy" -c -f "$state/haproxy.cfg" >"$state/haproxy.log" 2>&1 ||
        { echo "cluster.sh: bad HAProxy configuration: $(cat "$state/haproxy.log")" >&2; stop_all; exit 1; }
    rm -f -- "$state/haproxy.log"
    SPECULA_CLUSTER_TOKEN=$token SPECULA_STATS_SECRET=$secret "$haproxy" -db -f "$state/haproxy.cfg" </dev/null >"$state/haproxy.log" 2>&1 &
    hp=$!
    record "$hp" haproxy
    # HAProxy is ready when its /health answers and it has checked every replica up
    ok=0
    for _ in $(seq 1 200); do
        if ! alive "$hp"; then break; fi
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
    [ "$stats" = 1 ] &&
        echo "stats: http://$shost:$port/haproxy/stats (from loopback; user specula, password in $state/stats.secret)"
    for i in $(seq 1 "$replicas"); do
        echo "replica r$i: http://127.0.0.1:$(cat "$state/replica-$i.port") (pid $(proc "replica-$i"))"
    done
    ;;
stop)
    stop_all
    echo "cluster on port $port stopped"
    ;;
status)
    rc=0
    hp=$(proc haproxy)
    if [ -n "$hp" ]; then
        echo "haproxy: pid $hp, http://127.0.0.1:$port, policy $(cat "$state/policy" 2>/dev/null), /health $(http_code "http://127.0.0.1:$port/health")"
    else
        echo "haproxy: not running"; rc=1
    fi
    declare -A pstate=()
    while read -r n s; do [ -n "$n" ] && pstate[$n]=$s; done < <(proxy_states)
    for f in "$state"/replica-*.port; do
        [ -e "$f" ] || continue
        i=${f##*/replica-}; i=${i%.port}
        p=$(cat "$f"); pid=$(proc "replica-$i")
        if [ -n "$pid" ]; then r="pid $pid, /health $(http_code "http://127.0.0.1:$p/health")"
        else r="not running"; rc=1; fi
        echo "replica r$i: http://127.0.0.1:$p, $r, haproxy: ${pstate[r$i]:-?}"
    done
    exit $rc
    ;;
restart-replica|stop-replica)
    case "$replica" in ''|*[!0-9]*) die "--replica I is required" ;; esac
    [ -f "$state/replica-$replica.port" ] || die "no replica $replica in $state"
    [ -n "$token" ] || die "no token in $state: not a cluster's state"
    pid=$(proc "replica-$replica")
    if [ "$cmd" = stop-replica ]; then
        if [ -z "$pid" ]; then exit 0
        elif [ "$kill_hard" = 1 ]; then kill -KILL "$pid" 2>/dev/null
        else stop_pid "$pid"; fi
        exit 0
    fi
    [ -z "$pid" ] || die "replica $replica is running (pid $pid)"
    start_replica "$replica" "$(cat "$state/replica-$replica.port")" || {
        stop_pid "$(proc "replica-$replica")"; exit 1; }
    echo "replica r$replica: $rurl (pid $(proc "replica-$replica"))"
    ;;
*) usage 2 ;;
esac
