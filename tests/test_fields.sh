#!/usr/bin/env bash
# test_fields.sh: every request field of /v1/completions and
# /v1/chat/completions does what README.md's "Request fields" table says
# (tests/fields.py): honored fields change the output as documented
# (logit_bias bans and forces tokens, and speculative output still equals
# plain output with a bias set), fields with no effect change nothing,
# refused and unknown fields get a 400 naming them.
# Prints "RESULT <passed> <failed>".
set -u
bin=${SPECULA_BIN:-bin/specula}
dir=${SPECULA_TESTS_DIR:-tests}
readme=${SPECULA_README:-README.md}
out=$(timeout 540 /usr/bin/python3 "$dir/fields.py" --bin "$bin" --readme "$readme" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL fields.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
