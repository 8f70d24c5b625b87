#!/usr/bin/env bash
# test_fields.sh: every request field of /v1/completions and
# /v1/chat/completions does what the "Request fields" table of docs/server.md says
# (tests/server/fields.py): honored fields change the output as documented
# (logit_bias bans and forces tokens, and speculative output still equals
# plain output with a bias set), fields with no effect change nothing,
# refused and unknown fields get a 400 naming them.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
dir=${SPECULA_TESTS_DIR:-tests/server}
doc=${SPECULA_SERVER_DOC:-docs/server.md}
run_driver fields.py 540 /usr/bin/python3 "$dir/fields.py" --bin "$bin" --doc "$doc"
