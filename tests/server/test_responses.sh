#!/usr/bin/env bash
# test_responses.sh: what today's clients send, end to end. POST
# /v1/responses (the Responses API, stateless) through the official OpenAI
# Node client's responses.create (plain, streamed, the stream helper) and
# the AI SDK's default OpenAI provider (tests/node/responses.mjs: text,
# typed events, function tools and their outputs as items, text.format
# json_schema, cached tokens, refusals); zod 4 schemas through the OpenAI
# client's helpers, the AI SDK's chat provider and LangChain's ChatOpenAI
# (tests/node/clients.mjs); here the same authentication as the chat
# endpoint and the server's clean exit.
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
model=${SPECULA_MODEL:-models/specula-code-target-f16.gguf}
nodedir=${SPECULA_NODE_DIR:-tests/node}
passed=0; failed=0; skipped=0

serve main -m "$model" --chat-template chatml --api-key key-one --served-model-name ref || finish
main=$PID
code=$(curl -s -o "$tmp/noauth" -w '%{http_code}' "$URL/v1/responses" -d '{"input": "hi"}')
[ "$code" = 401 ] && grep -q authentication_error "$tmp/noauth" \
    && ok "/v1/responses without the API key: 401 before the body is read" \
    || fail "/v1/responses without the API key" "HTTP $code $(cat "$tmp/noauth")"

if ! command -v node >/dev/null; then
    fail "node responses test" "node is not installed (./setup.sh test installs it)"
elif [ ! -d "$nodedir/node_modules/ai" ] || [ ! -d "$nodedir/node_modules/@langchain/openai" ]; then
    fail "node responses test" "the ai or @langchain/openai package is missing: run 'npm ci' in $nodedir (./setup.sh test does)"
else
    for driver in responses clients; do
        timeout "$((600 * ${SPECULA_TIMEOUT_SCALE:-1}))" node "$nodedir/$driver.mjs" "$URL" ref key-one >"$tmp/node.out" 2>&1
        grep -E '^(ok|FAIL)' "$tmp/node.out"
        res=$(grep '^NODE ' "$tmp/node.out" | tail -n 1)
        if [ -z "$res" ]; then fail "node $driver test" "no result: $(tail -n 5 "$tmp/node.out")"
        else set -- $res; passed=$((passed + $2)); failed=$((failed + $3)); fi
    done
fi

kill -TERM "$main"; wait "$main"; rc=$?
[ $rc -eq 0 ] && ! sanitizer "$tmp/main.log" && ok "server exits cleanly, no sanitizer report" \
    || fail "server exit" "rc $rc: $(tail -n 5 "$tmp/main.log")"
finish
