#!/usr/bin/env bash
# test_seeded_server.sh: a seeded request reproduces through `specula serve`
# with speculation on. The same request (temperature 0.8, seed 5; and one
# with top_p 0.9 and seed 11) sent three times to `serve --spec draft` and
# to `serve --spec suffix` (k fixed at 4: they draft by construction, and
# the suffix store holds the earlier answers by the second time) gives the
# text of `serve --spec off`, every time; the speculating servers drafted.
# Without a seed, two requests get different texts (a random seed each).
# Uses the bundled pair (models/); tests/lib/lib.sh counts the checks.
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
models=${SPECULA_MODELS_DIR:-models}

if [ ! -r "$models/specula-code-target-f16.gguf" ] || [ ! -r "$models/specula-code-draft-f16.gguf" ]; then
    skip test_seeded_server "the bundled pair is not in $models"
    finish
fi

stop_server() { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }

# ask NAME: the requests against $URL, answers as JSON lines in $tmp/NAME.json
ask() {
    python3 - "$URL" >"$tmp/$1.json" <<'PY'
import json, sys, urllib.request
url = sys.argv[1]
def post(body):
    r = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=300))
reqs = [
    {"prompt": "def parse_args(argv):\n    parser = ", "max_tokens": 48, "temperature": 0.8, "seed": 5},
    {"prompt": "class Queue:\n    def __init__(self):\n", "max_tokens": 48, "temperature": 0.8,
     "top_p": 0.9, "seed": 11},
]
for rep in range(3):
    for i, b in enumerate(reqs):
        d = post(b)
        print(json.dumps({"req": i, "text": d["choices"][0]["text"],
                          "drafted": d["specula"]["spec"]["drafted"]}))
for i in range(2):  # no seed
    d = post({"prompt": "def main():\n", "max_tokens": 48, "temperature": 0.8})
    print(json.dumps({"req": "noseed", "text": d["choices"][0]["text"], "drafted": 0}))
PY
}

# lib.sh's serve passes -t 1 first; the -t 2 after it is the one that counts
for mode in off draft suffix; do
    if serve "$mode" -t 2 -m "$models/specula-code-target-f16.gguf" --spec "$mode" --spec-k 4 --spec-fixed-k; then
        ask "$mode" || fail "requests to --spec $mode" "$(tail -c 300 "$tmp/$mode.log")"
        stop_server
    fi
done

# check MODE: three times the text of --spec off, for each seeded request
check() {
    python3 - "$tmp/off.json" "$tmp/$1.json" "$1" <<'PY'
import json, sys
def load(p):
    return [json.loads(l) for l in open(p)]
off, got, mode = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
ref = {r["req"]: r["text"] for r in off if r["req"] != "noseed"}
bad = [r for r in got if r["req"] != "noseed" and r["text"] != ref[r["req"]]]
for r in bad: print("  %s, request %s: %r\n    off: %r" % (mode, r["req"], r["text"], ref[r["req"]]))
drafted = sum(r["drafted"] for r in got)
if mode != "off" and drafted <= 0: print("  %s drafted nothing" % mode); bad.append(1)
off_texts = [r["text"] for r in off if r["req"] != "noseed"]
if len(off_texts) != 6 or len(set(off_texts)) != 2: print("  off: the seeded texts", off_texts); bad.append(1)
sys.exit(1 if bad else 0)
PY
}

[ -s "$tmp/off.json" ] && check off && ok "--spec off: three times the same text per seed" \
    || fail "--spec off" "seeded texts differ (or no answers)"
for mode in draft suffix; do
    [ -s "$tmp/off.json" ] && [ -s "$tmp/$mode.json" ] && check "$mode" \
        && ok "--spec $mode: three times the text of --spec off, per seed; it drafted" \
        || fail "--spec $mode" "see above"
done
python3 - "$tmp/off.json" <<'PY' && ok "without a seed: each request its own random seed" || fail "no seed" "two unseeded requests gave one text"
import json, sys
t = [json.loads(l)["text"] for l in open(sys.argv[1]) if json.loads(l)["req"] == "noseed"]
sys.exit(0 if len(t) == 2 and t[0] != t[1] else 1)
PY
finish
