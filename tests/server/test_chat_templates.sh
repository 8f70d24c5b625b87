#!/usr/bin/env bash
# test_chat_templates.sh: chat templates in `specula serve`
# (tests/server/chat_templates.py): the model's own template by default,
# --chat-template FILE, POST /apply-template (equal to `specula template`
# and to Python jinja2), reasoning_content from a template that thinks
# (plain, streamed, Responses), chat_template_kwargs, raise_exception as a
# 400 naming the line, and a --chat-template that does not load.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
dir=${SPECULA_TESTS_DIR:-tests/server}
run_driver chat_templates.py 600 /usr/bin/python3 "$dir/chat_templates.py" --bin "$bin"
