#!/usr/bin/env bash
# test_bad_inputs.sh: the table of bad inputs (tests/bad_inputs.json, run by
# tests/bad_inputs.py): broken HTTP, wrong content types, invalid UTF-8,
# deep or huge JSON, wrong types, out-of-range sampling values, empty and
# oversized prompts, token ids outside the vocabulary, long stop lists,
# max_tokens <= 0, unknown models, missing or wrong API keys, too many
# concurrent requests, and broken model files (info and serve). Each row
# must get its expected answer and a normal request after it must succeed.
# Prints "RESULT <passed> <failed>".
set -u
bin=${SPECULA_BIN:-bin/specula}
dir=${SPECULA_TESTS_DIR:-tests}
small=${SPECULA_SMALL_MODEL:-models/specula-code-draft-f16.gguf}
args=(--bin "$bin" --small-model "$small" --table "$dir/bad_inputs.json")
[ -n "${SPECULA_MODEL:-}" ] && args+=(--model "$SPECULA_MODEL")
out=$(timeout 300 /usr/bin/python3 "$dir/bad_inputs.py" "${args[@]}" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL bad_inputs.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
