#!/usr/bin/env bash
# test_cluster.sh: replicas of the bundled model behind HAProxy
# (deploy/cluster.sh, deploy/haproxy.cfg.in, deploy/specula_route.lua), on
# loopback, measured with `specula bench --workload multi-tenant
# --metrics-url ...`:
#   launcher   a replica that fails to start leaves no process behind;
#              `stop` leaves none either
#   state      the state directory is private (0700, files 0600): an
#              explicit one that is a link, not 0700 or another user's is
#              refused; the default one is fresh (XDG_RUNTIME_DIR, else
#              mktemp), never a planted /tmp path; `stop` signals only the
#              processes the run started
#   keys       API keys reach the replicas in a 0600 file, never on a
#              command line
#   stats      HAProxy's statistics page is off unless --stats, and then
#              needs the generated password
#   retries    a request that kills its replica is not replayed onto the
#              next one (only connection failures are retried)
#   affinity   cluster-wide H_tokens with --policy prefix >= 2x round robin
#              and >= 0.8x one server given the same requests; the replicas'
#              summed counters reconcile with the client's
#   bounded    a hot document (Zipf 1.5), replicas without the prefix cache
#              (so a request costs the same everywhere): no replica takes
#              more than 1.3x the mean share of requests with
#              hash-balance-factor 125; without the bound (factor 0) the same
#              requests do overload one (so the check has teeth)
#   tenants    one tenant's prefix never yields cached tokens to another API
#              key or cache_salt, through the proxy or on the replica itself
#   failover   a replica killed mid-run: the requests sent after succeed
#              (a refused connection is retried elsewhere), those it was
#              running get 502 (not replayed), streams on the dead replica
#              end without [DONE] (an incomplete chunked transfer), the
#              others complete; after a restart the replica serves again
#   ring       3 -> 4 replicas moves about a quarter of the keys, all of them
#              to the new replica (measured on 96 keys)
# The state, stats and retries checks run replicas that are a small Python
# stand-in for `specula serve` (fake_replica.py below), which can die of a
# request on purpose. Needs Debian's haproxy (2.6, with Lua): without it
# every check is SKIPped (counted by tests/run.sh). Prints
# "RESULT <passed> <failed> <skipped>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
cluster=deploy/cluster.sh
CHECKS=("launcher: a replica that fails to start leaves no process behind"
        "affinity: prefix H_tokens >= 2x round robin"
        "affinity: prefix H_tokens >= 0.8x one server"
        "affinity: the replicas' summed /metrics reconcile with the client"
        "bounded load: hot document, no replica above 1.3x the mean share"
        "bounded load: without the bound the same requests overload one replica"
        "tenants: another API key gets no cached tokens (proxy and replica)"
        "tenants: another cache_salt gets none; the same tenant does"
        "failover: requests sent after the kill succeed; those it was running get 502"
        "failover: streams on the killed replica end without [DONE], others complete"
        "failover: the replica rejoins after a restart"
        "ring: 3 -> 4 replicas moves about a quarter of the keys, all to the new one"
        "launcher: stop leaves no process behind"
        "state: an existing --state-dir that is a link, not 0700 or another user's is refused"
        "state: the default directory is fresh and private, never a planted /tmp path"
        "state: with XDG_RUNTIME_DIR the default directory is under it"
        "state: stop leaves alone a process the run did not start"
        "stats: no statistics page by default"
        "stats: --stats serves it only with the generated password"
        "retries: a request that kills its replica is not replayed onto another"
        "retries: a refused connection is still retried on another replica"
        "keys: no API key on a replica's command line or in serve.args; a 0600 key file"
        "state: the state directory is 0700 and every file in it 0600"
        "keys: specula serve refuses an --api-key-file that others can read")
if ! command -v haproxy >/dev/null 2>&1; then
    for c in "${CHECKS[@]}"; do skip "$c" "haproxy is not installed (apt-get install haproxy)"; done
    finish
fi
if [ ! -x "$bin" ]; then
    echo "FAIL test_cluster: $bin not found (set SPECULA_BIN)"; echo "RESULT 0 1 0"; exit 1
fi
export SPECULA_BIN=$bin
started=()
test_cleanup() {
    for d in "${started[@]}"; do "$cluster" stop --port 0 --state-dir "$d" >/dev/null 2>&1; done
}
trap "exit 1" INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# how many processes the launcher started from state directory $1 still run
leftovers() {
    local n=0 p
    [ -f "$1/started.pids" ] || { echo 0; return; }
    while read -r p _; do
        kill -0 "$p" 2>/dev/null || continue
        # a zombie (killed, not reaped by whoever adopted it) is not running
        awk '{ sub(/^.*\) /, ""); exit $1 == "Z" }' "/proc/$p/stat" 2>/dev/null && n=$((n + 1))
    done <"$1/started.pids"
    echo "$n"
}

# start NAME ARGS...: a cluster on a free port; sets PORT, DIR, URL, MURL
# (the replicas' URLs, comma-separated); non-zero when it did not start
start() {
    local name=$1; shift
    DIR=$tmp/$name; PORT=$(free_port)
    started+=("$DIR")
    "$cluster" start --port "$PORT" --state-dir "$DIR" "$@" >"$tmp/$name.out" 2>&1 || {
        echo "  cluster $name did not start: $(tail -n 5 "$tmp/$name.out")"; return 1; }
    URL=http://127.0.0.1:$PORT
    MURL=$(grep -o '^replica r[0-9]*: http://[0-9.:]*' "$tmp/$name.out" | awk '{print $3}' | paste -sd, -)
}
stop() { "$cluster" stop --port "$PORT" --state-dir "$DIR" >/dev/null 2>&1; }

KEY_A=cluster-test-key-a; KEY_B=cluster-test-key-b
# every replica: 1 thread, 512 positions per request (the workload's longest
# is ~300), 20 MiB of KV (128 blocks of 16 positions, about 7 documents),
# two tenants by API key (and /metrics open to read them)
SERVE=(-t 1 -c 512 --kv-mem 20M --api-key "$KEY_A" --api-key "$KEY_B" --metrics-public)
# the multi-tenant workload: 8 tenants (cache_salt) x 12 documents of ~256
# tokens, Zipf(0.5), a ~24-token question each, 96 requests one at a time:
# the (tenant, document) pairs fit neither one replica's cache nor, with
# round robin, each replica's (every replica sees all of them), while prefix
# affinity gives each replica a third. The fresh replicas are cold, so no
# per-run salt (--no-isolation): routing and caching are the same each run.
WORK=(--workload multi-tenant --num-requests 96 --tenants 8 --documents 12 --zipf 0.5
      --concurrency 1 --warmup 0 --no-isolation --no-progress --api-key "$KEY_A"
      --metrics-period 0)

# bench NAME ARGS...: `specula bench` against $URL with $MURL; $tmp/NAME.json
bench() {
    local name=$1; shift
    "$bin" bench --base-url "$URL" --metrics-url "$MURL" --json "$tmp/$name.json" "$@" \
        >"$tmp/$name.txt" 2>&1 || { echo "  bench $name failed: $(tail -n 5 "$tmp/$name.txt")"; return 1; }
}
# val NAME KEY: a number from a bench JSON report's run
val() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["metrics"]["runs"][0]; v=r
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$tmp/$1.json" "$2" 2>/dev/null || echo nan
}
ge() { python3 -c 'import sys; a,b,f=map(float,sys.argv[1:]); sys.exit(0 if a>=f*b else 1)' "$1" "$2" "${3:-1}"; }

# ---- launcher: a failed start cleans up -------------------------------------
port=$(free_port)
if ! "$cluster" start --replicas 3 --port "$port" --state-dir "$tmp/bad" -- -m "$tmp/missing.gguf" \
        >"$tmp/bad.out" 2>&1 && [ "$(leftovers "$tmp/bad")" = 0 ]; then
    ok "${CHECKS[0]}"
else
    fail "${CHECKS[0]}" "$(cat "$tmp/bad.out")"
fi

# ---- state, stats, retries: clusters of stand-in replicas --------------------
# fake_replica.py: what cluster.sh needs of `specula serve` (the "listening
# on" line, /health); POST answers 200, except that a body holding "poison"
# kills the replica before it answers (a request that crashes its replica).
# Each POST received is a line "PID PATH" in $FAKE_RECORD.
cat >"$tmp/fake_replica.py" <<'PY'
import http.server, json, os, sys
args = sys.argv[1:]
port = int(args[args.index("--port") + 1]) if "--port" in args else 0
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def do_GET(self):
        if self.path == "/health": self.reply(200, {"status": "ok"})
        else: self.reply(404, {"error": "not found"})
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(os.environ["FAKE_RECORD"], "a") as f: f.write("%d %s\n" % (os.getpid(), self.path))
        if b"poison" in body: os._exit(1)
        self.reply(200, {"pid": os.getpid()})
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
print("specula serve: listening on http://127.0.0.1:%d" % s.server_address[1], file=sys.stderr, flush=True)
s.serve_forever()
PY
printf '#!/bin/sh\nexec %s %s "$@"\n' "$(command -v python3)" "$tmp/fake_replica.py" >"$tmp/fake-specula"
chmod +x "$tmp/fake-specula"
export FAKE_RECORD=$tmp/fake.record
: >"$FAKE_RECORD"
# fake ARGS...: cluster.sh with the stand-in replicas
fake() { SPECULA_BIN=$tmp/fake-specula "$cluster" "$@"; }
mode() { stat -c %a "$1" 2>/dev/null; }
# a process that no cluster started, for the PID files an attacker plants
sleep 600 & decoy=$!; pids+=("$decoy")
decoy_start=$(awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$decoy/stat")
echo original >"$tmp/victim"

# an explicit --state-dir that exists: a symbolic link, a directory others
# can enter, another user's (when this runs as root): start and stop refuse
# each, write nothing through it and signal nothing it names
mkdir -m 700 "$tmp/target"; ln -s "$tmp/target" "$tmp/link"
mkdir -m 755 "$tmp/open"; echo "$decoy" >"$tmp/open/haproxy.pid"; ln -s "$tmp/victim" "$tmp/open/serve.args"
bad_dirs=("$tmp/link" "$tmp/open")
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -m 700 "$tmp/others"; chown nobody "$tmp/others"; bad_dirs+=("$tmp/others")
fi
why=""
for d in "${bad_dirs[@]}"; do
    port=$(free_port)
    if fake start --replicas 1 --port "$port" --state-dir "$d" >"$tmp/refused.out" 2>&1; then
        started+=("$d"); why+=" start accepted $d;"
    elif ! grep -q 'refusing' "$tmp/refused.out"; then why+=" start on $d: $(tail -n 1 "$tmp/refused.out");"; fi
    fake stop --port "$port" --state-dir "$d" >/dev/null 2>&1 && why+=" stop accepted $d;"
done
[ -z "$(ls -A "$tmp/target")" ] || why+=" files written in the link's target;"
[ "$(cat "$tmp/victim")" = original ] || why+=" written through a link;"
[ "$(ls -A "$tmp/open" | tr '\n' ' ')" = "haproxy.pid serve.args " ] || why+=" files written in $tmp/open;"
kill -0 "$decoy" 2>/dev/null || why+=" the planted PID was killed;"
if [ -z "$why" ]; then ok "${CHECKS[13]}"; else fail "${CHECKS[13]}" "$why"; fi

# no --state-dir, no XDG_RUNTIME_DIR: the directory is a fresh one from
# mktemp under TMPDIR, whatever a local user planted at the predictable path
# (links to a victim file, a PID); `stop --port` finds it again
mkdir -m 1777 "$tmp/pub"; port=$(free_port); planted=$tmp/pub/specula-cluster-$port
mkdir -m 777 "$planted"
for f in serve.args haproxy.cfg haproxy.log replica-1.log started.pids; do ln -s "$tmp/victim" "$planted/$f"; done
echo "$decoy" >"$planted/haproxy.pid"; echo "$decoy" >"$planted/replica-1.pid"
why=""
if env -u XDG_RUNTIME_DIR TMPDIR="$tmp/pub" SPECULA_BIN="$tmp/fake-specula" \
        "$cluster" start --replicas 1 --port "$port" >"$tmp/default.out" 2>&1; then
    d=$(sed -n 's/^cluster: .*, state \(.*\))$/\1/p' "$tmp/default.out"); started+=("$d")
    case "$d" in "$tmp/pub/specula-cluster-$port".??????????) ;; *) why+=" state in '$d';" ;; esac
    [ "$(mode "$d")" = 700 ] || why+=" $d is $(mode "$d");"
    env -u XDG_RUNTIME_DIR TMPDIR="$tmp/pub" "$cluster" stop --port "$port" >"$tmp/default.stop" 2>&1 ||
        why+=" stop: $(cat "$tmp/default.stop");"
    [ "$(leftovers "$d")" = 0 ] || why+=" stop left processes;"
else
    why+=" start failed: $(tail -n 3 "$tmp/default.out");"
fi
[ "$(cat "$tmp/victim")" = original ] || why+=" written through a planted link;"
[ "$(ls -A "$planted" | wc -l)" = 7 ] || why+=" the planted directory changed: $(ls -A "$planted" | tr '\n' ' ');"
kill -0 "$decoy" 2>/dev/null || why+=" the planted PID was killed;"
if [ -z "$why" ]; then ok "${CHECKS[14]}"; else fail "${CHECKS[14]}" "$why"; fi

# XDG_RUNTIME_DIR (private to its user) holds the default directory
mkdir -m 700 "$tmp/xdg"; port=$(free_port); d=$tmp/xdg/specula-cluster-$port; why=""
if XDG_RUNTIME_DIR=$tmp/xdg fake start --replicas 1 --port "$port" >"$tmp/xdg.out" 2>&1; then
    started+=("$d")
    grep -q "state $d)" "$tmp/xdg.out" || why+=" $(head -n 1 "$tmp/xdg.out");"
    [ "$(mode "$d")" = 700 ] || why+=" $d is $(mode "$d");"
    XDG_RUNTIME_DIR=$tmp/xdg "$cluster" stop --port "$port" >/dev/null 2>&1 || why+=" stop failed;"
    [ "$(leftovers "$d")" = 0 ] || why+=" stop left processes;"
else
    why+=" start failed: $(tail -n 3 "$tmp/xdg.out")"
fi
if [ -z "$why" ]; then ok "${CHECKS[15]}"; else fail "${CHECKS[15]}" "$why"; fi

# a cluster whose replica-2.pid is rewritten to name the decoy (its real
# start time: only the run's token tells it apart): stop leaves it alone
port=$(free_port); d=$tmp/planted-pid; why=""; r2=""
if fake start --replicas 2 --port "$port" --state-dir "$d" >"$tmp/pp.out" 2>&1; then
    started+=("$d")
    read -r r2 _ <"$d/replica-2.pid"
    rm -f "$d/replica-2.pid"; echo "$decoy $decoy_start" >"$d/replica-2.pid"
    fake stop --port "$port" --state-dir "$d" >"$tmp/pp.stop" 2>&1
    kill -0 "$decoy" 2>/dev/null || why+=" the decoy was killed;"
    grep -q "pid $decoy .*left alone" "$tmp/pp.stop" || why+=" stop said: $(cat "$tmp/pp.stop");"
    kill "$r2" 2>/dev/null   # the real replica 2, whose record was overwritten
else
    why+=" start failed: $(tail -n 3 "$tmp/pp.out")"
fi
if [ -z "$why" ]; then ok "${CHECKS[16]}"; else fail "${CHECKS[16]}" "$why"; fi

# stats: nothing at /haproxy/stats by default (the request reaches a
# replica: 404 from the stand-in); with --stats, 401 without the password
# or with a wrong one, 200 with the one in stats.secret (0600), which is in
# neither haproxy.cfg nor a command line
port=$(free_port); d=$tmp/stats-off; why=""
if fake start --replicas 1 --port "$port" --state-dir "$d" >"$tmp/soff.out" 2>&1; then
    started+=("$d")
    c=$(curl -s -o "$tmp/soff.body" -w '%{http_code}' "http://127.0.0.1:$port/haproxy/stats;csv")
    { [ "$c" = 200 ] || grep -q pxname "$tmp/soff.body"; } && why="GET /haproxy/stats;csv: $c $(head -c 200 "$tmp/soff.body")"
    fake stop --port "$port" --state-dir "$d" >/dev/null 2>&1
else
    why="start failed: $(tail -n 3 "$tmp/soff.out")"
fi
if [ -z "$why" ]; then ok "${CHECKS[17]}"; else fail "${CHECKS[17]}" "$why"; fi
port=$(free_port); d=$tmp/stats-on; why=""
if fake start --replicas 1 --port "$port" --state-dir "$d" --stats >"$tmp/son.out" 2>&1; then
    started+=("$d")
    su=http://127.0.0.1:$port/haproxy/stats\;csv
    secret=$(cat "$d/stats.secret")
    c0=$(curl -s -o /dev/null -w '%{http_code}' "$su")
    c1=$(curl -s -o /dev/null -w '%{http_code}' -u specula:wrong "$su")
    c2=$(curl -s -o "$tmp/son.body" -w '%{http_code}' -K - <<<"user = \"specula:$secret\"" "$su")
    [ "$c0 $c1 $c2" = "401 401 200" ] && grep -q pxname "$tmp/son.body" || why+=" none/wrong/right: $c0 $c1 $c2;"
    [ "${#secret}" -ge 32 ] && [ "$(mode "$d/stats.secret")" = 600 ] || why+=" stats.secret: ${#secret} chars, mode $(mode "$d/stats.secret");"
    grep -qF "$secret" "$d/haproxy.cfg" && why+=" the password is in haproxy.cfg;"
    fake stop --port "$port" --state-dir "$d" >/dev/null 2>&1
else
    why="start failed: $(tail -n 3 "$tmp/son.out")"
fi
if [ -z "$why" ]; then ok "${CHECKS[18]}"; else fail "${CHECKS[18]}" "$why"; fi

# retries: 3 replicas, round robin; a request that kills the replica it
# reaches must cost that replica only (the client gets 502); then one
# replica is killed from outside and the next requests, one of which HAProxy
# may still send there, all succeed (connection refused: retried elsewhere)
port=$(free_port); d=$tmp/retries; why=""; why2=""
if fake start --replicas 3 --policy roundrobin --port "$port" --state-dir "$d" >"$tmp/rt.out" 2>&1; then
    started+=("$d")
    : >"$FAKE_RECORD"
    c=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
        -d '{"prompt": "poison", "max_tokens": 1}' "http://127.0.0.1:$port/v1/completions")
    sleep 0.5
    hit=$(wc -l <"$FAKE_RECORD")
    down=$(fake status --port "$port" --state-dir "$d" | grep -c '^replica.*not running')
    echo "  a request that kills its replica: client got $c, replicas that received it: $hit, replicas dead: $down of 3"
    [ "$c" = 502 ] && [ "$hit" = 1 ] && [ "$down" = 1 ] || why="status $c, received by $hit replicas, $down of 3 dead"
    # the replicas still up: kill one more, then 4 requests at once
    live=$(fake status --port "$port" --state-dir "$d" | sed -n 's/^replica r\([0-9]\): .*pid.*/\1/p' | head -n 1)
    fake stop-replica --port "$port" --state-dir "$d" --replica "$live" --kill
    codes=$(for i in 1 2 3 4; do curl -s -o /dev/null -w '%{http_code} ' -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"after $i\", \"max_tokens\": 1}" "http://127.0.0.1:$port/v1/completions"; done)
    echo "  after a replica was killed: $codes"
    [ "$codes" = "200 200 200 200 " ] || why2="statuses $codes"
    fake stop --port "$port" --state-dir "$d" >/dev/null 2>&1
else
    why="start failed: $(tail -n 3 "$tmp/rt.out")"; why2=$why
fi
if [ -z "$why" ]; then ok "${CHECKS[19]}"; else fail "${CHECKS[19]}" "$why"; fi
if [ -z "$why2" ]; then ok "${CHECKS[20]}"; else fail "${CHECKS[20]}" "$why2"; fi

# ---- affinity: one server, round robin, prefix ------------------------------
h_single=nan; h_rr=nan; h_prefix=nan
if start single --replicas 1 -- "${SERVE[@]}" && bench single "${WORK[@]}"; then
    h_single=$(val single srv_h_tokens)
fi
stop
if start rr --replicas 3 --policy roundrobin -- "${SERVE[@]}" && bench rr "${WORK[@]}"; then
    h_rr=$(val rr srv_h_tokens)
fi
stop
prefix_up=0
if start prefix --replicas 3 --policy prefix -- "${SERVE[@]}" && bench prefix "${WORK[@]}"; then
    h_prefix=$(val prefix srv_h_tokens); prefix_up=1
fi
P_PORT=$PORT; P_DIR=$DIR; P_URL=$URL; P_MURL=$MURL
echo "  H_tokens: one server $h_single, round robin $h_rr, prefix $h_prefix; prefill positions:" \
     "$(val single srv_prefill_tokens) / $(val rr srv_prefill_tokens) / $(val prefix srv_prefill_tokens);" \
     "requests per replica (prefix): $(val prefix replica_requests)"
if ge "$h_prefix" "$h_rr" 2; then ok "${CHECKS[1]} ($h_prefix vs $h_rr)"
else fail "${CHECKS[1]}" "prefix $h_prefix, round robin $h_rr"; fi
if ge "$h_prefix" "$h_single" 0.8; then ok "${CHECKS[2]} ($h_prefix vs $h_single)"
else fail "${CHECKS[2]}" "prefix $h_prefix, one server $h_single"; fi
if grep -q 'server counters: requests, prompt/completion/cached tokens.* equal' "$tmp/prefix.txt" &&
   [ "$(val prefix replicas)" = 3 ] && [ "$(val prefix requests_ok)" = 96 ]; then
    ok "${CHECKS[3]}"
else
    fail "${CHECKS[3]}" "$(grep -e 'server counters' -e failed "$tmp/prefix.txt")"
fi

# ---- tenants, through the proxy and on the replica --------------------------------
# complete KEY SALT [URL]: prints "replica cached_tokens" of a 1-token completion of $doc
doc=$(python3 -c 'print("".join("def tenant_%d(x):\n    return x * %d + 1\n" % (i, i) for i in range(16)))')
complete() {
    local body
    body=$(python3 -c 'import json,sys; d={"prompt": sys.argv[1], "max_tokens": 1, "temperature": 0}
if sys.argv[2]: d["cache_salt"] = sys.argv[2]
print(json.dumps(d))' "$doc" "$2")
    curl -s -D "$tmp/hdr" -o "$tmp/body" -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
        --data-binary "$body" "${3:-$P_URL}/v1/completions"
    printf '%s %s\n' "$(grep -i '^x-specula-replica:' "$tmp/hdr" | awk '{print $2}' | tr -d '\r' | grep . || echo -)" \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens_details"]["cached_tokens"])' "$tmp/body" 2>/dev/null || echo err)"
}
if [ "$prefix_up" = 1 ]; then
    # tenant A twice through the proxy: the second finds A's prefix on $ra;
    # then tenant B on that replica itself (before B has cached anything
    # anywhere), B with a salt through the proxy, A with another salt on
    # $ra: none may find A's blocks; A again on $ra does
    read -r ra ca1 < <(complete "$KEY_A" "")
    read -r _ ca2 < <(complete "$KEY_A" "")
    rurl=$(echo "$P_MURL" | tr , '\n' | sed -n "${ra#r}p")
    read -r _ cbr < <(complete "$KEY_B" "" "$rurl")
    read -r rb cb < <(complete "$KEY_B" "b-salt")
    read -r _ cs < <(complete "$KEY_A" "other-salt" "$rurl")
    read -r _ ca3 < <(complete "$KEY_A" "" "$rurl")
    echo "  tenant A on $ra: cached $ca1 then $ca2; tenant B: $cbr (on $ra), $cb (salted, proxy to $rb); A with another salt: $cs; A again on $ra: $ca3"
    if [ "$cb" = 0 ] && [ "$cbr" = 0 ]; then ok "${CHECKS[6]}"
    else fail "${CHECKS[6]}" "tenant B got $cbr (on $ra) / $cb (proxy) cached tokens"; fi
    if [ "$cs" = 0 ] && [ "${ca2:-0}" != err ] && [ "${ca2:-0}" -gt 0 ] && [ "${ca3:-0}" != err ] && [ "${ca3:-0}" -gt 0 ]; then
        ok "${CHECKS[7]}"
    else fail "${CHECKS[7]}" "other salt $cs; same tenant $ca2 / $ca3"; fi
else
    fail "${CHECKS[6]}" "no prefix cluster"; fail "${CHECKS[7]}" "no prefix cluster"
fi

# ---- keys and file modes, on the prefix cluster ------------------------------------
# neither key on a replica's command line (what `ps` shows every local user)
# nor in serve.args; they are in the 0600 api-keys file, and they work
if [ "$prefix_up" = 1 ]; then
    why=""; keyfile=$(cd -P "$P_DIR" && pwd -P)/api-keys
    for f in "$P_DIR"/replica-*.pid; do
        read -r p _ <"$f"
        tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -e "$KEY_A" -e "$KEY_B" && why+=" a key on $p's command line;"
        tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- "--api-key-file $keyfile" || why+=" $p has no --api-key-file;"
    done
    grep -q -e "$KEY_A" -e "$KEY_B" "$P_DIR/serve.args" && why+=" a key in serve.args;"
    [ "$(mode "$P_DIR/api-keys")" = 600 ] || why+=" api-keys is $(mode "$P_DIR/api-keys");"
    c=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer wrong" "$P_URL/v1/models")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY_B" "$P_URL/v1/models")
    [ "$c $c2" = "401 200" ] || why+=" a wrong key got $c, KEY_B $c2;"
    if [ -z "$why" ]; then ok "${CHECKS[21]}"; else fail "${CHECKS[21]}" "$why"; fi
    # every file (logs, keys, pids, HAProxy's sockets) 0600, the directory 0700
    loose=$(find "$P_DIR" -mindepth 1 ! -perm 600 -printf '%p %m\n')
    if [ "$(mode "$P_DIR")" = 700 ] && [ -z "$loose" ]; then ok "${CHECKS[22]}"
    else fail "${CHECKS[22]}" "$P_DIR is $(mode "$P_DIR"); $loose"; fi
else
    fail "${CHECKS[21]}" "no prefix cluster"; fail "${CHECKS[22]}" "no prefix cluster"
fi

# a key file with mode 0644: refused before anything starts, saying why
printf '%s\n' "$KEY_A" >"$tmp/keys-644"; chmod 644 "$tmp/keys-644"
"$bin" serve --port 0 --api-key-file "$tmp/keys-644" >"$tmp/keys-644.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q 'readable or writable by group or others' "$tmp/keys-644.out"; then ok "${CHECKS[23]}"
else fail "${CHECKS[23]}" "exit $rc: $(head -c 300 "$tmp/keys-644.out")"; fi

# ---- failover: kill replica r1 mid-run -----------------------------------------
cat >"$tmp/failover.py" <<'PY'
# 9 streams and 18 plain requests through the proxy; once every stream has
# sent a few chunks (the plain ones are generating too), kills the replica
# and sends 9 more plain requests; one JSON line per request
import http.client, json, os, signal, sys, threading, time
port, key, pidfile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out, lock, started = [], threading.Lock(), threading.Semaphore(0)
def one(i, stream):
    rec = {"i": i, "stream": stream, "status": None, "replica": None, "done": False, "chunks": 0, "error": None}
    body = {"prompt": "# request %d\ndef f%d(x):\n" % (i, i),
            "max_tokens": 300 if stream else 120 if i < 100 else 32,
            "temperature": 0, "ignore_eos": True, "stream": stream}
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/completions", json.dumps(body),
                  {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        r = c.getresponse()
        rec["status"], rec["replica"] = r.status, r.getheader("X-Specula-Replica")
        if not stream:
            d = json.loads(r.read())
            rec["done"] = r.status == 200 and d["usage"]["completion_tokens"] > 0
        else:
            # read1: a chunked body cut short raises IncompleteRead (what
            # curl reports as "(18) transfer closed with outstanding read
            # data remaining"); readline would return b"" as at a clean end
            buf = b""
            while True:
                data = r.read1(65536)
                if not data: break
                buf += data
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    if ev.startswith(b"data: [DONE]"): rec["done"] = True
                    elif ev.startswith(b"data: "):
                        rec["chunks"] += 1
                        if rec["chunks"] == 3: started.release()
    except Exception as e:
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    with lock: out.append(rec)
ts = [threading.Thread(target=one, args=(i, i % 3 == 0)) for i in range(27)]
for t in ts: t.start()
t0 = time.time()
for _ in range(9): started.acquire(timeout=max(0.1, 60 - (time.time() - t0)))
os.kill(int(open(pidfile).read().split()[0]), signal.SIGKILL)
more = [threading.Thread(target=one, args=(100 + i, False)) for i in range(9)]
for t in more: t.start(); time.sleep(0.05)
for t in ts + more: t.join()
for r in sorted(out, key=lambda r: r["i"]): print(json.dumps(r))
PY
fo_ok=0
if [ "$prefix_up" = 1 ]; then
    timeout 200 python3 "$tmp/failover.py" "$P_PORT" "$KEY_A" "$P_DIR/replica-1.pid" >"$tmp/failover.jsonl" 2>"$tmp/failover.err" && fo_ok=1
fi
if [ "$fo_ok" = 1 ]; then
    retries=$(curl -s --unix-socket "$P_DIR/stats.sock" "http://localhost/;csv" | awk -F, '$1 == "replicas" && $2 == "r1" { print $16 + $17 }')
    python3 - "$tmp/failover.jsonl" "$retries" <<'PY' >"$tmp/failover.sum"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
# plain requests sent before the kill: those r1 was running get HAProxy's
# 502 (a request that reached a replica is never replayed), the others 200;
# sent after the kill: all 200 (a refused connection is retried elsewhere)
plain = [r for r in recs if not r["stream"]]
before = [r for r in plain if r["i"] < 100]
after = [r for r in plain if r["i"] >= 100]
streams = [r for r in recs if r["stream"]]
dead = [r for r in streams if r["replica"] == "r1"]
live = [r for r in streams if r["replica"] != "r1"]
ok = lambda r: r["status"] == 200 and r["done"]
n502 = len([r for r in before if r["status"] == 502])
bad_plain = [r for r in before if not (ok(r) or r["status"] == 502)] + [r for r in after if not ok(r)]
bad_live = [r for r in live if not ok(r)]
bad_dead = [r for r in dead if r["done"] or not r["error"]]  # must end with an error
print("plain %d (failed %d: %d with 502 from the killed replica), streams on r1 %d (completed %d), "
      "streams elsewhere %d (failed %d), HAProxy retries + redispatches on r1: %s" % (
          len(plain), len(bad_plain) + n502, n502, len(dead), len(bad_dead), len(live), len(bad_live),
          sys.argv[2]))
print("A" if not bad_plain and len(before) == 18 and len(after) == 9 else "a", json.dumps(bad_plain[:2]))
print("B" if dead and not bad_dead and not bad_live else "b", json.dumps((bad_dead + bad_live)[:2]))
for r in dead[:2]: print("  stream on r1: %d chunks, then: %s" % (r["chunks"], r["error"] or "a clean end without [DONE]"))
PY
    head -n 1 "$tmp/failover.sum" | sed 's/^/  /'; sed -n '4,$p' "$tmp/failover.sum"
    if grep -q '^A' "$tmp/failover.sum"; then ok "${CHECKS[8]}"
    else fail "${CHECKS[8]}" "$(grep '^a' "$tmp/failover.sum")"; fi
    if grep -q '^B' "$tmp/failover.sum"; then ok "${CHECKS[9]}"
    else fail "${CHECKS[9]}" "$(grep '^b' "$tmp/failover.sum")"; fi
else
    fail "${CHECKS[8]}" "the failover client did not run: $(tail -n 3 "$tmp/failover.err" 2>/dev/null)"
    fail "${CHECKS[9]}" "the failover client did not run"
fi
# rejoin: restart r1; HAProxy checks it up; some key lands on it again
rejoined=0
if [ "$prefix_up" = 1 ] && "$cluster" restart-replica --port "$P_PORT" --state-dir "$P_DIR" --replica 1 >"$tmp/restart.out" 2>&1; then
    for _ in $(seq 1 50); do
        "$cluster" status --port "$P_PORT" --state-dir "$P_DIR" | grep -q '^replica r1:.*haproxy: UP' && break
        sleep 0.2
    done
    for i in $(seq 1 30); do
        r=$(curl -s -D - -o /dev/null -H "Authorization: Bearer $KEY_A" \
            -d "{\"prompt\": \"rejoin $i\", \"max_tokens\": 1}" "$P_URL/v1/completions" |
            grep -i '^x-specula-replica:' | awk '{print $2}' | tr -d '\r')
        [ "$r" = r1 ] && { rejoined=$i; break; }
    done
fi
if [ "$rejoined" != 0 ]; then ok "${CHECKS[10]} (the ${rejoined}th key tried went to r1)"
else fail "${CHECKS[10]}" "$(cat "$tmp/restart.out" 2>/dev/null; "$cluster" status --port "$P_PORT" --state-dir "$P_DIR")"; fi
PORT=$P_PORT; DIR=$P_DIR; stop

# ---- bounded load: a hot document ----------------------------------------------
# One tenant, 4 documents, Zipf(1.5): the first document is most of the
# requests. The replicas run without the prefix cache here, so a request
# costs the same wherever it runs and a replica's share of the requests
# follows its share of the requests in flight, which is what the bound
# limits (with the cache, the replica holding the hot document answers
# faster and finishes more than its share in flight: 1.22-1.41 measured).
# The same requests without the bound (factor 0) must overload one replica,
# or the check would prove nothing (documents shorter than the 512-byte key
# would not: the key would reach into each request's own question).
HOT=(--workload multi-tenant --num-requests 96 --tenants 1 --documents 4 --zipf 1.5 --seed 7
     --prefix-tokens 256 --output-tokens 96 --ignore-eos --concurrency 12 --warmup 0
     --no-progress --api-key "$KEY_A" --metrics-period 0)
imb=nan; imb0=nan
if start bounded --replicas 3 --policy prefix -- "${SERVE[@]}" --no-prefix-cache && bench bounded "${HOT[@]}"; then
    imb=$(val bounded replica_imbalance)
fi
stop
if start nobound --replicas 3 --policy prefix --balance-factor 0 -- "${SERVE[@]}" --no-prefix-cache && bench nobound "${HOT[@]}"; then
    imb0=$(val nobound replica_imbalance)
fi
stop
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 1.3 else 1)' "$imb"; then
    ok "${CHECKS[4]} (largest / mean $imb, requests $(val bounded replica_requests))"
else
    fail "${CHECKS[4]}" "largest share / mean $imb, requests $(val bounded replica_requests)"
fi
if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 1.3 else 1)' "$imb0"; then
    ok "${CHECKS[5]} (largest / mean $imb0, requests $(val nobound replica_requests))"
else
    fail "${CHECKS[5]}" "largest share / mean $imb0: the hot workload is not hot enough to test the bound"
fi

# ---- ring stability: 3 -> 4 replicas ------------------------------------------------------
# four replicas, the fourth stopped (HAProxy takes it off the ring): the
# replica of each of 96 keys; then the fourth back: the replicas again
route() { # prints one replica name per key
    for i in $(seq 1 96); do
        curl -s -D - -o /dev/null -H "Authorization: Bearer $KEY_A" \
            -d "{\"prompt\": \"ring key $i\", \"max_tokens\": 1}" "$URL/v1/completions" |
            grep -i '^x-specula-replica:' | awk '{print $2}' | tr -d '\r'
    done
}
moved=""
if start ring --replicas 4 --policy prefix -- "${SERVE[@]}"; then
    "$cluster" stop-replica --port "$PORT" --state-dir "$DIR" --replica 4
    for _ in $(seq 1 50); do
        "$cluster" status --port "$PORT" --state-dir "$DIR" | grep -q '^replica r4:.*haproxy: DOWN' && break
        sleep 0.2
    done
    route >"$tmp/ring3"
    "$cluster" restart-replica --port "$PORT" --state-dir "$DIR" --replica 4 >/dev/null
    for _ in $(seq 1 50); do
        "$cluster" status --port "$PORT" --state-dir "$DIR" | grep -q '^replica r4:.*haproxy: UP' && break
        sleep 0.2
    done
    route >"$tmp/ring4"
    moved=$(paste -d' ' "$tmp/ring3" "$tmp/ring4" | awk '
        NF == 2 { n++; if ($1 != $2) { m++; if ($2 != "r4") bad++ } ; if ($1 == "r4") bad++ }
        END { printf "%d %d %d", n, m, bad + 0 }')
fi
read -r nk nm nbad <<<"${moved:-0 0 1}"
echo "  ring: $nm of $nk keys moved from 3 to 4 replicas ($(python3 -c "print('%.0f%%' % (100.0 * $nm / max($nk, 1)))")), $nbad not to the new replica"
if [ "$nk" = 96 ] && [ "$nbad" = 0 ] && [ "$nm" -ge 12 ] && [ "$nm" -le 38 ]; then ok "${CHECKS[11]} ($nm of 96)"
else fail "${CHECKS[11]}" "$nm of $nk keys moved, $nbad of them elsewhere than r4 (expected ~24, all to r4)"; fi

# ---- stop leaves nothing ----------------------------------------------------------
stop
n=0; for d in "${started[@]}"; do n=$((n + $(leftovers "$d"))); done
if [ "$n" = 0 ]; then ok "${CHECKS[12]}"; else fail "${CHECKS[12]}" "$n processes left"; fi

finish
