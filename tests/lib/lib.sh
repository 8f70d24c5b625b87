# tests/lib/lib.sh: what the shell tests share. Sourced, from the repository
# root (where `make test` runs them):
#
#   . "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
#
# It sets:
#   bin, mk, ref   bin/specula, bin/mkmodel and ../shared/reference, or
#                  SPECULA_BIN, SPECULA_MKMODEL, SPECULA_REF_DIR
#   tmp            a fresh temporary folder, removed at exit
#   pids           processes to kill (then reap) at exit: add with pids+=(PID)
# and gives:
#   ok NAME, fail NAME WHY, skip NAME WHY   one check each: prints "ok   NAME",
#                  "FAIL NAME: WHY" or "SKIP NAME: WHY" and counts it
#   finish         prints "RESULT <passed> <failed> <skipped>" (what
#                  tests/run.sh sums) and exits non-zero if anything failed
#   start_server NAME ARGS...   `$bin serve --port 0 -t 1 ARGS` with its log
#                  in $tmp/NAME.log; waits for its port and for /health 200;
#                  sets URL and PID. Counts nothing: on failure it returns 1
#                  with START_ERR ("did not start: LOG" or "is not healthy:
#                  LOG") and START_WHAT ("starts" or "becomes healthy")
#   serve NAME ARGS...   start_server, and a server that does not come up is
#                  a failed check ("server NAME starts" / "... becomes healthy")
#   sanitizer FILE...    true when any file holds a sanitizer report (SAN_RE,
#                  the pattern of tests/lib/harness.py)
#   run_driver LABEL TIMEOUT_S CMD...   runs a driver that prints check lines
#                  and a RESULT line itself (the Python tests), passes them
#                  on and exits with its outcome; no RESULT line is one
#                  failure. TIMEOUT_S 0: no time limit.
#   polls N        N times SPECULA_TIMEOUT_SCALE (an integer; 1 when unset):
#                  the number of rounds of a wait loop, so that a wait is as
#                  much longer under a sanitizer as tests/run.sh's limits are
# A test that must clean up more at exit defines test_cleanup before it exits.
set -u
bin=${SPECULA_BIN:-bin/specula}
mk=${SPECULA_MKMODEL:-bin/mkmodel}
ref=${SPECULA_REF_DIR:-../shared/reference}
passed=0; failed=0; skipped=0
ok()   { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }
finish() {
    echo "RESULT $passed $failed $skipped"
    [ "$failed" -eq 0 ]
    exit
}

SAN_RE='ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|WARNING: ThreadSanitizer'
sanitizer() { grep -qE "$SAN_RE" "$@" 2>/dev/null; }
polls() { echo $(($1 * ${SPECULA_TIMEOUT_SCALE:-1})); }

tmp=$(mktemp -d)
pids=()
_lib_cleanup() {
    if declare -F test_cleanup >/dev/null; then test_cleanup; fi
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap _lib_cleanup EXIT

start_server() {
    local name=$1; shift
    "$bin" serve --port 0 -t 1 "$@" >"$tmp/$name.log" 2>&1 &
    PID=$!; pids+=("$PID")
    URL=""
    START_ERR=""; START_WHAT=""
    for _ in $(seq 1 "$(polls 200)"); do
        URL=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/$name.log" | head -n 1)
        [ -n "$URL" ] && break
        sleep 0.05
    done
    if [ -z "$URL" ]; then
        START_WHAT=starts; START_ERR="did not start: $(cat "$tmp/$name.log")"
        return 1
    fi
    for _ in $(seq 1 "$(polls 400)"); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && return 0
        sleep 0.05
    done
    START_WHAT="becomes healthy"; START_ERR="is not healthy: $(cat "$tmp/$name.log")"
    return 1
}

serve() {
    start_server "$@" && return 0
    fail "server $1 $START_WHAT" "$(cat "$tmp/$1.log")"
    return 1
}

run_driver() {
    local label=$1 limit=$2 out res rc
    shift 2
    out=$(timeout "$limit" "$@" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^RESULT '
    res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    if [ -z "$res" ]; then
        echo "FAIL $label: no result (exit status $rc)"
        echo "RESULT 0 1"; exit 1
    fi
    echo "$res"
    set -- $res
    [ "$rc" -eq 0 ] && [ "${3:-0}" -eq 0 ]
    exit
}
