#!/usr/bin/env bash
# test_templates.sh: `specula template` (sp_chat_apply_template, the Jinja
# interpreter of src/template) renders real chat templates byte for byte as
# Hugging Face's apply_chat_template does. Every template of
# tests/template/templates/ is rendered on every request of
# tests/template/fixtures/ by both specula and ref_render.py (Python jinja2,
# set up as transformers sets it up), with the same strftime_now clock.
# One check per template: it passes when every fixture gives identical bytes
# or both renderers refuse it (raise_exception, a type error, an undefined
# name: the template's own checks, e.g. "System role not supported"). A
# mismatch names the fixture and the first differing byte with a little
# context on both sides; a crash or a sanitizer report is a mismatch. The
# last line before RESULT counts identical renders. Skips every check when
# Python's jinja2 is missing (deps.txt, group test).
# Prints "RESULT <passed> <failed> <skipped>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"

dir=${SPECULA_TEMPLATE_DIR:-tests/template}
now=2025-06-15T12:34:56
templates=("$dir"/templates/*.jinja)
fixtures=("$dir"/fixtures/*.json)
name_of() { local b=${1##*/}; echo "${b%.*}"; }

if [ ! -e "${templates[0]}" ] || [ ! -e "${fixtures[0]}" ]; then
    fail "template_data" "no templates or fixtures under $dir (run from the repository root)"
    finish
fi
if ! python3 -c 'import jinja2' 2>/dev/null; then
    for t in "${templates[@]}"; do skip "template[$(name_of "$t")]" "python3-jinja2 is not installed (./setup.sh test)"; done
    finish
fi

if ! "$bin" template --help >/dev/null 2>&1; then
    for t in "${templates[@]}"; do fail "template[$(name_of "$t")]" "$bin has no working template command"; done
    finish
fi

mkdir -p "$tmp/ref"
refok=1
python3 "$dir/ref_render.py" --now "$now" --batch "$tmp/ref" "${templates[@]}" -- "${fixtures[@]}" \
    >"$tmp/ref.log" 2>&1 || refok=0

# the first differing byte of two files, with context from both
first_diff() { # A(specula) B(reference)
    python3 - "$1" "$2" <<'PY'
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
lo = max(0, i - 40)
def ctx(s):  # as text where it is UTF-8, the differing byte marked with a bar
    return repr(s[lo:i].decode("utf-8", "replace") + "|" + s[i:i + 40].decode("utf-8", "replace"))
print("first difference at byte %d (specula %d bytes, reference %d): specula %s vs reference %s"
      % (i, len(a), len(b), ctx(a), ctx(b)))
PY
}

total=0; identical=0; both_refused=0; differ=0
for t in "${templates[@]}"; do
    tn=$(name_of "$t")
    if [ $refok -eq 0 ]; then
        fail "template[$tn]" "the reference renderer failed: $(head -c 300 "$tmp/ref.log")"
        continue
    fi
    bad=""; nbad=0
    for f in "${fixtures[@]}"; do
        fn=$(name_of "$f")
        total=$((total + 1))
        "$bin" template --template "$t" --input "$f" --now "$now" >"$tmp/c.out" 2>"$tmp/c.err"; rc=$?
        ref_out="$tmp/ref/${tn}__$fn.out"; ref_err="$tmp/ref/${tn}__$fn.err"
        why=""
        if sanitizer "$tmp/c.err"; then
            why="sanitizer report: $(grep -E -A 8 "$SAN_RE" "$tmp/c.err" | head -c 600)"
        elif [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
            why="specula exited $rc: $(head -c 300 "$tmp/c.err")"
        elif [ -e "$ref_out" ] && [ $rc -eq 0 ]; then
            if cmp -s "$tmp/c.out" "$ref_out"; then identical=$((identical + 1)); continue; fi
            why=$(first_diff "$tmp/c.out" "$ref_out")
        elif [ -e "$ref_err" ] && [ $rc -eq 1 ]; then
            both_refused=$((both_refused + 1)); continue
        elif [ -e "$ref_err" ]; then
            why="the reference refuses ($(head -c 200 "$ref_err" | tr '\n' ' ')) but specula renders $(wc -c <"$tmp/c.out") bytes"
        elif [ -e "$ref_out" ]; then
            why="specula refuses ($(head -c 300 "$tmp/c.err" | tr '\n' ' ')) but the reference renders $(wc -c <"$ref_out") bytes"
        else
            why="the reference gave no result"
        fi
        differ=$((differ + 1)); nbad=$((nbad + 1))
        [ $nbad -le 3 ] && bad="$bad
    [$fn] $why"
    done
    if [ $nbad -eq 0 ]; then ok "template[$tn]"
    else fail "template[$tn]" "$nbad of ${#fixtures[@]} fixtures differ:$bad"; fi
done
echo "renders: $identical identical, $both_refused refused by both, $differ differ, of $total ($((${#templates[@]})) templates x ${#fixtures[@]} fixtures)"
finish
