#!/usr/bin/env bash
# test_kv_disk.sh: the prefix cache's disk tier through `specula serve`
# (tests/server/kv_disk.py): greedy output identical with the tier on and off and
# across a server restart (served from disk), kill -9 during writes then a
# restart, a second server on one DIR refused, a tiny --kv-disk-size, DIR
# and file modes, the /metrics series by tier.
# Prints "RESULT <passed> <failed>".
set -u
dir=${SPECULA_TESTS_DIR:-tests/server}
[ -f "$dir/kv_disk.py" ] || dir=tests/server
out=$(timeout 500 /usr/bin/python3 "$dir/kv_disk.py" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL kv_disk.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
