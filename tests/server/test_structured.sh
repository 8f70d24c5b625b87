#!/usr/bin/env bash
# test_structured.sh: structured output end to end (tests/server/structured.py):
# a table of 49 JSON Schemas and GBNF grammars whose outputs must parse and
# validate, greedy and sampled, speculation off and on (n-gram, draft),
# on the bundled model (SentencePiece) and on a random-weight model with
# GPT-2's byte-level BPE vocabulary; speculative greedy output equals plain
# greedy output; chat, streaming, "length" for a grammar longer than
# max_tokens, a 400 for an impossible grammar.
# Prints "RESULT <passed> <failed>".
set -u
bin=${SPECULA_BIN:-bin/specula}
mk=${SPECULA_MKMODEL:-bin/mkmodel}
dir=${SPECULA_TESTS_DIR:-tests/server}
out=$(timeout 840 /usr/bin/python3 "$dir/structured.py" --bin "$bin" --mkmodel "$mk" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^RESULT '
res=$(printf '%s\n' "$out" | grep '^RESULT ' | tail -n 1)
if [ -z "$res" ]; then
    echo "FAIL structured.py: no result (exit status $rc)"
    echo "RESULT 0 1"; exit 1
fi
echo "$res"
[ $rc -eq 0 ]
