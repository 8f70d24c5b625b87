#!/usr/bin/env bash
# test_bad_inputs.sh: the table of bad inputs (tests/server/bad_inputs.json, run by
# tests/server/bad_inputs.py): broken HTTP, wrong content types, invalid UTF-8,
# deep or huge JSON, wrong types, out-of-range sampling values, empty and
# oversized prompts, token ids outside the vocabulary, long stop lists,
# max_tokens <= 0, unknown models, missing or wrong API keys, too many
# concurrent requests, and broken model files (info and serve). Each row
# must get its expected answer and a normal request after it must succeed.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
dir=${SPECULA_TESTS_DIR:-tests/server}
small=${SPECULA_SMALL_MODEL:-models/specula-code-draft-f16.gguf}
args=(--bin "$bin" --small-model "$small" --table "$dir/bad_inputs.json")
[ -n "${SPECULA_MODEL:-}" ] && args+=(--model "$SPECULA_MODEL")
run_driver bad_inputs.py 300 /usr/bin/python3 "$dir/bad_inputs.py" "${args[@]}"
