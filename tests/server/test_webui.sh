#!/usr/bin/env bash
# test_webui.sh: the web page (GET /) and the dashboard (GET /dashboard).
# Over HTTP: both pages and their assets are served from the binary with a
# strict Content-Security-Policy, anything but GET is a 405, the pages are
# public while /metrics keeps its key, --no-webui turns them off; the
# metrics added for the dashboard reconcile (by method, planner k, H_tokens). In a real
# browser (Debian's chromium, headless, driven by tests/node/webui.mjs through
# puppeteer-core): no console error, a typed prompt streams and the text
# grows, Stop cancels the request on the server (its KV blocks come back),
# the figures under an answer, a shared-prefix run shows cached tokens and
# the dashboard's hit rate and acceptance agree with /metrics, chat mode
# with a chat template and an API key, the dark theme, a phone-sized
# screen; screenshots of both pages at desktop and phone sizes go to
# $SPECULA_WEBUI_SHOTS (default build/webui-shots).
#
# Without chromium (or SPECULA_CHROMIUM naming no browser) every browser
# check is a SKIP (counted, never passed);
# without node or puppeteer-core ('npm ci' in tests/node) each is a FAIL.
# Prints "ok NAME" / "FAIL NAME" / "SKIP NAME" and "RESULT <passed> <failed> <skipped>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
chat_model=$ref/models/ref-llama-spm-q8_0.gguf
nodedir=${SPECULA_NODE_DIR:-tests/node}
shots=${SPECULA_WEBUI_SHOTS:-build/webui-shots}

# the browser checks tests/node/webui.mjs makes, in its order
browser_checks=(
    "the page loads with no console error"
    "a typed prompt streams an answer that grows over time"
    "figures under the answer (prompt, cached, TTFT, tokens/s)"
    "Stop cancels the request on the server and its KV blocks come back"
    "shared-prefix run: the second answer reports cached tokens (Ctrl+Enter sends)"
    "the dark theme switches the colours"
    "the dashboard loads with no console error and polls /metrics"
    "the dashboard shows a non-zero hit rate and acceptance figures that agree with /metrics"
    "both pages fit a phone screen (no horizontal scrolling)"
    "without the API key the page says so; with it, chat mode streams an answer"
    "the dashboard needs the metrics key and works with it"
    "screenshots saved (desktop and phone, both pages)"
)

# head_of URL: status line and headers in $tmp/h, body in $tmp/b
head_of() { curl -s -D "$tmp/h" -o "$tmp/b" "$@"; }
csp_ok() {
    local csp
    csp=$(grep -i '^content-security-policy:' "$tmp/h" | tr -d '\r')
    [[ "$csp" == *"default-src 'self'"* && "$csp" == *"script-src 'self'"* && "$csp" != *unsafe* ]]
}

# ---- the code model: pages over HTTP -------------------------------------
# --spec-fixed-k: the page's speculation figures exist by construction (the
# adaptive planner may choose k = 0 when passes are slow, e.g. under ASan)
if ! start_server code --spec ngram --spec-fixed-k; then
    fail "server with the bundled model" "$START_ERR"
    finish
fi
CODE=$URL

head_of "$CODE/"
if head -n 1 "$tmp/h" | grep -q ' 200' && grep -qi '^content-type: text/html' "$tmp/h" && csp_ok &&
   grep -q '<script src="/webui/app.js"' "$tmp/b" && ! grep -q '<script>' "$tmp/b"; then
    ok "GET / serves the page with a strict CSP and no inline script"
else
    fail "GET /" "$(head -c 400 "$tmp/h")"
fi
head_of "$CODE/dashboard"
if head -n 1 "$tmp/h" | grep -q ' 200' && csp_ok && grep -q '/webui/dash.js' "$tmp/b"; then
    ok "GET /dashboard serves the dashboard with a strict CSP"
else
    fail "GET /dashboard" "$(head -c 400 "$tmp/h")"
fi
bad=""
for a in style.css:text/css common.js:text/javascript app.js:text/javascript dash.js:text/javascript \
         icon.svg:image/svg+xml; do
    f=${a%%:*}; t=${a#*:}
    got=$(curl -s -o /dev/null -w '%{http_code} %{content_type}' "$CODE/webui/$f")
    [[ "$got" == "200 $t"* ]] || bad="$bad $f($got)"
done
got=$(curl -s -o /dev/null -w '%{http_code}' "$CODE/webui/missing.js")
[ "$got" = 404 ] || bad="$bad missing.js($got)"
[ -z "$bad" ] && ok "the assets come from the binary with their types (404 for another /webui/ path)" ||
    fail "assets" "$bad"
p=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x "$CODE/")
d=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$CODE/dashboard")
[ "$p" = 405 ] && [ "$d" = 405 ] && ok "POST / and DELETE /dashboard answer 405" || fail "methods" "POST $p, DELETE $d"

# ---- the chat model with an API key ---------------------------------------
KEY=webui-test-key
if start_server chat -m "$chat_model" --chat-template chatml --served-model-name ref --api-key "$KEY"; then
    CHAT=$URL
    pg=$(curl -s -o /dev/null -w '%{http_code}' "$CHAT/")
    mt=$(curl -s -o /dev/null -w '%{http_code}' "$CHAT/metrics")
    mk=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$CHAT/metrics")
    [ "$pg" = 200 ] && [ "$mt" = 401 ] && [ "$mk" = 200 ] &&
        ok "with --api-key the page is public while /metrics (the dashboard's data) needs the key" ||
        fail "keys" "page $pg, /metrics $mt without key, $mk with"
else
    CHAT=""
    fail "server with a chat template" "$START_ERR"
fi

# ---- --no-webui -----------------------------------------------------------
if start_server off --no-webui; then
    a=$(curl -s -o /dev/null -w '%{http_code}' "$URL/")
    b=$(curl -s -o /dev/null -w '%{http_code}' "$URL/dashboard")
    c=$(curl -s -o /dev/null -w '%{http_code}' "$URL/webui/app.js")
    h=$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")
    [ "$a$b$c" = 404404404 ] && [ "$h" = 200 ] && ok "--no-webui: /, /dashboard and /webui/ answer 404" ||
        fail "--no-webui" "/ $a, /dashboard $b, /webui/app.js $c, /health $h"
    kill "$PID"
else
    fail "--no-webui" "the server $START_ERR"
fi

# ---- in the browser -------------------------------------------------------
# SPECULA_CHROMIUM: the browser to drive (default: chromium on the PATH)
chromium=${SPECULA_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium" ] || [ ! -x "$chromium" ]; then
    for c in "${browser_checks[@]}"; do
        skip "$c" "chromium is not installed (apt-get install chromium)${chromium:+: no $chromium}"
    done
elif ! command -v node >/dev/null || [ ! -d "$nodedir/node_modules/puppeteer-core" ]; then
    for c in "${browser_checks[@]}"; do fail "$c" "node or puppeteer-core is missing: run 'npm ci' in $nodedir"; done
elif [ -z "$CHAT" ]; then
    for c in "${browser_checks[@]}"; do fail "$c" "a server did not start"; done
else
    rm -rf "$shots"; mkdir -p "$shots"
    timeout 400 node "$nodedir/webui.mjs" "$chromium" "$shots" "$CODE" "$CHAT" "$KEY" >"$tmp/node.out" 2>&1
    grep -E '^(ok|FAIL)' "$tmp/node.out"
    res=$(grep '^WEBUI ' "$tmp/node.out" | tail -n 1)
    if [ -z "$res" ]; then
        fail "browser driver" "no result: $(tail -n 8 "$tmp/node.out")"
    else
        set -- $res; passed=$((passed + $2)); failed=$((failed + $3))
        n=$(( $2 + $3 ))
        [ "$n" -eq "${#browser_checks[@]}" ] ||
            fail "browser driver" "reported $n checks, not ${#browser_checks[@]}: $(grep -v '^ok' "$tmp/node.out" | tail -n 5)"
    fi
    [ -d "$shots" ] && echo "  screenshots: $shots"
fi

# ---- the dashboard's metrics reconcile ----------------------------------------
# (the code server speculates with ngram only: every verification is ngram's)
for i in 1 2; do
    curl -s -o /dev/null "$CODE/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n", "max_tokens": 64, "temperature": 0}'
done
if curl -s "$CODE/metrics" >"$tmp/m" && python3 - "$tmp/m" <<'PY'
import sys
m = {}
for line in open(sys.argv[1]):
    if line.strip() and not line.startswith("#"):
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
bad = []
for by, total in (("steps", "specula_spec_drafts_total"), ("draft_tokens", "specula_spec_draft_tokens_total"),
                  ("accepted_tokens", "specula_spec_accepted_tokens_total")):
    s = sum(m['specula_spec_method_%s_total{method="%s"}' % (by, x)] for x in ("ngram", "suffix", "draft"))
    n = m['specula_spec_method_%s_total{method="ngram"}' % by]
    if not (s == n == m[total] > 0): bad.append("%s: methods %g, ngram %g, total %g" % (by, s, n, m[total]))
if m["specula_spec_planned_k_sum_total"] != m["specula_spec_draft_tokens_total"]:
    bad.append("planned k sum %g != drafted %g" % (m["specula_spec_planned_k_sum_total"], m["specula_spec_draft_tokens_total"]))
if not m["specula_spec_plans_total"] >= m["specula_spec_drafts_total"] + m["specula_spec_planned_zero_total"]:
    bad.append("plans %g < verifications + k=0 decisions" % m["specula_spec_plans_total"])
if not 0 <= m["specula_spec_planned_k"] <= 16: bad.append("planned k %g" % m["specula_spec_planned_k"])
h = [m['specula_prefix_cache_h_tokens_total{bucket="%s"}' % b]
     for b in ("0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1")]
if sum(h) < 2 or sum(h[1:]) < 1: bad.append("H_tokens buckets %s" % h)
if bad: print("  " + "; ".join(bad)); sys.exit(1)
PY
then
    ok "/metrics: speculation by method sums to the totals, the planner's k, H_tokens buckets"
else
    fail "dashboard metrics" "see above"
fi

finish
