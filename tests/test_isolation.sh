#!/usr/bin/env bash
# test_isolation.sh: prefix-cache isolation between tenants (tests/isolation.py):
# with different cache salts, and with different API keys under the same
# salt, tenant A's warm ~400-token prefix gives tenant B no cached tokens and
# no TTFT advantage (medians of 5-10 samples, generous margins), while A's own
# repeats hit and are clearly faster. Then what speculation learns: tenant B
# probing tenant A's prompt plus half its output with suffix speculation
# drafts and accepts exactly what it does on a server where A never sent it
# (6 rounds), while A's own probe drafts from A's output.
# Prints "RESULT <passed> <failed>".
set -u
dir=${SPECULA_TESTS_DIR:-tests}
out=$(timeout 240 /usr/bin/python3 "$dir/isolation.py" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL isolation.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
