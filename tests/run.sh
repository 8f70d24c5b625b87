#!/usr/bin/env bash
# Runs every test in $1 (default build/tests) and sums their RESULT lines
# into "N passed, N failed, N skipped". Exit status is non-zero when anything
# failed.
#
# Each test prints one line per check ("ok   NAME", "FAIL NAME...", or
# "SKIP NAME: why") and ends with "RESULT <passed> <failed> [<skipped>]" (a
# missing third number is 0). On top of what the tests report, each of these
# counts as one failure:
#   - a test that exits without a RESULT line, or non-zero with no failure;
#   - a test that runs past its timeout (killed, with its process group);
#   - a file named test_* in the directory that is not executable;
#   - a test whose check count (passed + failed + skipped) differs from its
#     line in tests/expected_counts (fewer: a check disappeared; more: update
#     the file; a test that skipped as a whole, "RESULT 0 0 N", has no count
#     to compare), a test that has no line there, and a line whose test is not
#     in the directory (set SPECULA_TEST_SUBSET=1 when running a chosen subset
#     on purpose, as `make tsan` does).
# Skips are printed and counted, never passed. With SPECULA_NO_SKIP=1 (CI)
# every skip is also a failure, except one the hardware forces: a check of a
# kernel level this CPU lacks ("SKIP CASE: this CPU cannot run the LEVEL
# kernels", e.g. avx512 on an AVX2-only machine), which no setup can
# install. Those are counted apart in the summary, and a known failure
# (below) that such a line reports as skipped is neither known nor missing.
#
# Known failures: tests/known_failures lists "TEST CASE" pairs, each with the
# reason it fails (docs/correctness.md explains them). A FAIL line of a listed case is printed as it is and
# counted as a known failure rather than a failure; a listed case that
# passes, or that the test no longer reports, is a failure (the list only
# shrinks: remove the line in the commit that fixes it). The summary line
# says how many there were.
#
# Environment: SPECULA_EXPECTED_COUNTS (default: expected_counts next to this
# script), SPECULA_TEST_TIMEOUT (seconds for tests without their own timeout
# in that file; default 300), SPECULA_TIMEOUT_SCALE (multiplies every
# timeout, e.g. 4 for sanitizer builds; default 1).
set -u
dir=${1:-build/tests}
here=$(cd "$(dirname "$0")" && pwd)
# the Python drivers import tests/lib/harness.py wherever they live
export PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}"
counts=${SPECULA_EXPECTED_COUNTS:-$here/expected_counts}
default_timeout=${SPECULA_TEST_TIMEOUT:-300}
scale=${SPECULA_TIMEOUT_SCALE:-1}
no_skip=${SPECULA_NO_SKIP:-0}
subset=${SPECULA_TEST_SUBSET:-0}
# SPECULA_TEST_EXCLUDE="a.sh b": tests of the directory this run leaves out
known_file=${SPECULA_KNOWN_FAILURES:-$here/known_failures}
passed=0; failed=0; skipped=0; known=0; cpu_skipped=0

declare -A want_count want_timeout
if [ -r "$counts" ]; then
    while read -r name n t _; do
        case "$name" in ''|'#'*) continue ;; esac
        want_count[$name]=$n
        want_timeout[$name]=${t:-$default_timeout}
    done <"$counts"
else
    echo "FAIL run.sh: cannot read $counts (expected check counts per test)"
    failed=$((failed + 1))
fi

problem() { echo "FAIL $1"; failed=$((failed + 1)); }
cpu_skip=': this CPU cannot run the '

declare -A known_cases  # "TEST<TAB>CASE" -> 1
if [ -r "$known_file" ]; then
    while IFS= read -r line; do
        case "$line" in ''|'#'*) continue ;; esac
        line=${line%%#*}
        line=$(printf '%s' "$line" | sed 's/[[:space:]]*$//')
        tname=${line%% *}
        cname=${line#* }
        cname=$(printf '%s' "$cname" | sed 's/^[[:space:]]*//')
        [ -n "$cname" ] && known_cases["$tname"$'\t'"$cname"]=1
    done <"$known_file"
fi

# known_adjust NAME OUTPUT: sets kf (listed cases that failed) and reports
# listed cases that passed or were not reported
known_adjust() {
    local tname=$1 out=$2 key cname
    kf=0
    for key in "${!known_cases[@]}"; do
        [ "${key%%$'\t'*}" = "$tname" ] || continue
        cname=${key#*$'\t'}
        if printf '%s\n' "$out" | grep -qF -x -e "FAIL $cname" || \
           printf '%s\n' "$out" | grep -qF -e "FAIL $cname (" -e "FAIL $cname: "; then
            kf=$((kf + 1))
        elif printf '%s\n' "$out" | grep -qF -e "SKIP $cname$cpu_skip"; then
            : # a level this CPU lacks: the case did not run here
        elif printf '%s\n' "$out" | grep -qF -x -e "ok   $cname"; then
            problem "$tname: known failure '$cname' now passes: remove it from $known_file"
        else
            problem "$tname: known failure '$cname' was not reported (renamed? remove or update it in $known_file)"
        fi
    done
}

seen=()
for t in "$dir"/test_*; do
    [ -e "$t" ] || continue
    name=$(basename "$t")
    case "$name" in *.c|*.o|*.d|*.py|*.log) continue ;; esac
    if [ ! -x "$t" ]; then
        problem "$name is not executable (chmod +x it or remove it from $dir)"
        continue
    fi
    seen+=("$name")
    case " ${SPECULA_TEST_EXCLUDE:-} " in *" $name "*)
        # a build that leaves a test out on purpose (make asan: the cluster
        # test drives HAProxy, whose routing a sanitizer build adds nothing
        # to, at 8x the time): said, and neither a pass nor a skip
        echo "== $name: not run in this build (SPECULA_TEST_EXCLUDE)"
        continue ;;
    esac
    limit=${want_timeout[$name]:-$default_timeout}
    limit=$(awk -v a="$limit" -v b="$scale" 'BEGIN { printf "%d", a * b + 0.5 }')
    echo "== $name"
    start=$(date +%s)
    # timeout signals the test's whole process group (servers it started too)
    out=$(timeout -k 10 "$limit" "$t" 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    printf '%s\n' "$out" | grep -v '^RESULT '
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        problem "$name timed out after ${limit}s (its checks are not counted)"
        continue
    fi
    res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
    if [ -z "$res" ]; then
        problem "$name exited with status $rc and no result"
        continue
    fi
    set -- $res
    p=${2:-0}; f=${3:-0}; s=${4:-0}
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        problem "$name exited with status $rc"
    fi
    known_adjust "$name" "$out"
    if [ "$kf" -gt 0 ]; then
        echo "   ($name: $kf of its $f failure(s) are known, listed in $known_file)"
    fi
    passed=$((passed + p)); failed=$((failed + f - kf)); skipped=$((skipped + s)); known=$((known + kf))
    hs=$(printf '%s\n' "$out" | grep '^SKIP ' | grep -c -F -e "$cpu_skip")
    hs=$(( hs > s ? s : hs ))
    cpu_skipped=$((cpu_skipped + hs))
    if [ "$s" -gt "$hs" ] && [ "$no_skip" = 1 ]; then
        problem "$name skipped $((s - hs)) check(s) and SPECULA_NO_SKIP=1: $(printf '%s\n' "$out" | grep '^SKIP ' | grep -v -F -e "$cpu_skip" | head -n 3 | tr '\n' ' ')"
    fi
    total=$((p + f + s))
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -gt 0 ]; then
        : # the whole test was skipped (it says why): counted as skipped, no count to compare
    elif [ -z "${want_count[$name]:-}" ]; then
        problem "$name has no line in $counts (it reported $total checks)"
    elif [ "$total" -lt "${want_count[$name]}" ]; then
        problem "$name reported $total checks, expected ${want_count[$name]} (a check disappeared)"
    elif [ "$total" -gt "${want_count[$name]}" ]; then
        problem "$name reported $total checks, expected ${want_count[$name]} (update $counts)"
    fi
    echo "   ($name: $p passed, $f failed, $s skipped in ${secs}s)"
done
if [ "$subset" != 1 ]; then
    for name in "${!want_count[@]}"; do
        found=0
        for s in "${seen[@]}"; do [ "$s" = "$name" ] && found=1 && break; done
        [ "$found" = 1 ] || problem "$name is listed in $counts but not in $dir"
    done
fi
if [ "$cpu_skipped" -gt 0 ]; then
    echo "($cpu_skipped of the skipped checks are kernel levels this CPU cannot run)"
fi
if [ "$known" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped, $known known failures ($known_file)"
else
    echo "$passed passed, $failed failed, $skipped skipped"
fi
[ "$failed" -eq 0 ]
