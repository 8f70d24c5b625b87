#!/usr/bin/env bash
# test_cli.sh: the command-line front end, end to end: `run --json` gives
# the reference's greedy tokens, `tokenize` its prompt tokens, `info`
# describes models, `run --chat` holds a conversation (templated, the history
# from the prefix cache), `template` renders a request with a Jinja chat
# template exactly, and bad input gives a message and a non-zero exit.
# A sanitizer report (AddressSanitizer, UBSan, LeakSanitizer, ThreadSanitizer:
# SAN_RE in tests/lib/lib.sh, as in tests/lib/harness.py) on any stderr is a failure, even
# where the exit status alone would pass (a refusal exits 1, and so does a
# sanitizer abort under `make asan`). Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"

q8=$ref/models/ref-llama-spm-q8_0.gguf
# The reference record whose first greedy steps are the most clear-cut (top-1
# ahead of top-2 by more than 1.5 nats): the random-weight reference models
# amplify 1-ulp summation-order differences, so only steps with a wide margin
# are expected to agree token for token (see tests/reference/test_reference.c).
python3 - "$ref/generations.jsonl" "$tmp" <<'PY'
import json, sys
best = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    m = [s["top"][0][1] - s["top"][1][1] for s in r["steps"]]
    n = next((i for i, x in enumerate(m) if x < 1.5), len(m))
    if best is None or n > best[0]:
        best = (n, r)
n, r = best
open(sys.argv[2] + "/model.txt", "w").write(r["model"])
open(sys.argv[2] + "/prompt.txt", "w").write(r["prompt"])
open(sys.argv[2] + "/n.txt", "w").write(str(n))
open(sys.argv[2] + "/expect_prompt.txt", "w").write(json.dumps(r["prompt_tokens"]))
open(sys.argv[2] + "/expect_tokens.txt", "w").write(json.dumps(r["tokens"][:n]))
PY
rm_model=$ref/models/$(cat "$tmp/model.txt").gguf
n=$(cat "$tmp/n.txt")

if "$bin" run -m "$rm_model" -f "$tmp/prompt.txt" -n "$n" --temp 0 --ignore-eos --json --logprobs 3 -t 2 >"$tmp/run.json" 2>"$tmp/run.err"; then
    python3 - "$tmp" "$n" <<'PY' && ok "run --json greedy tokens match the reference ($n clear-cut steps of $(cat "$tmp/model.txt"))" || fail "run --json" "tokens differ"
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
out = json.load(open(d + "/run.json"))
assert out["prompt_tokens"] == json.load(open(d + "/expect_prompt.txt")), out["prompt_tokens"]
assert out["tokens"] == json.load(open(d + "/expect_tokens.txt")), out["tokens"]
assert len(out["steps"]) == n and all(len(s["top"]) == 3 for s in out["steps"])
assert all(s["top"][0][1] >= s["top"][1][1] for s in out["steps"])
assert out["timings"]["decode_tokens_per_s"] > 0 and isinstance(out["text"], str)
PY
else
    fail "run --json" "exit status $?: $(cat "$tmp/run.err")"
fi

if "$bin" run -m "$q8" -p "Once upon a time" -n 8 --temp 0.8 --seed 7 -t 2 >"$tmp/a.txt" 2>"$tmp/a.err" &&
   "$bin" run -m "$q8" -p "Once upon a time" -n 8 --temp 0.8 --seed 7 -t 2 >"$tmp/b.txt" 2>"$tmp/b.err" &&
   cmp -s "$tmp/a.txt" "$tmp/b.txt"; then
    ok "run with a seed is reproducible"
else
    fail "run --seed" "two runs differ or failed"
fi

got=$("$bin" tokenize -m "$rm_model" -f "$tmp/prompt.txt" 2>"$tmp/tok1.err")
want=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$tmp/expect_prompt.txt")
[ "$got" = "$want" ] && ok "tokenize -f gives the reference prompt tokens" || fail "tokenize" "$got vs $want"
got=$("$bin" tokenize -m "$q8" --no-bos "Hello world" 2>"$tmp/tok2.err")
[ "$got" = "[15043, 3186]" ] && ok "tokenize --no-bos" || fail "tokenize --no-bos" "$got"

if "$bin" info -m "$ref/models/ref-qwen2-gpt2-q4_0.gguf" >"$tmp/info.txt" 2>"$tmp/info.err" &&
   grep -q "qwen2" "$tmp/info.txt" && grep -q "q4_0" "$tmp/info.txt" && grep -q "n_head 4, n_head_kv 2" "$tmp/info.txt"; then
    ok "info describes the qwen2 model"
else
    fail "info" "$(cat "$tmp/info.txt")"
fi

# every command that loads a model takes it the same three ways: -m FILE,
# --model FILE, or FILE alone (tokenize: -m and --model; its plain argument
# is the text)
q4=$ref/models/ref-qwen2-gpt2-q4_0.gguf
for flag in -m --model ""; do
    form="${flag:+$flag }$q4"
    # shellcheck disable=SC2086 # the form is split on purpose
    if "$bin" info $form >"$tmp/form.txt" 2>"$tmp/form.err" && grep -q "n_head 4, n_head_kv 2" "$tmp/form.txt" &&
       "$bin" batch $form -f /dev/null >/dev/null 2>"$tmp/form_b.err" &&
       "$bin" run $form -p "Hello" -n 2 --temp 0 -c 64 >/dev/null 2>"$tmp/form_r.err"; then
        ok "info, batch and run take the model as ${flag:-a plain argument}"
    else
        fail "model given as ${flag:-a plain argument}" "$(head -c 300 "$tmp/form.err" "$tmp/form_b.err" "$tmp/form_r.err")"
    fi
done
got=$("$bin" tokenize --model "$q8" --no-bos "Hello world" 2>"$tmp/tok3.err")
[ "$got" = "[15043, 3186]" ] && ok "tokenize --model" || fail "tokenize --model" "$got $(head -c 200 "$tmp/tok3.err")"

# other engines' option names (docs/cli.md):
# the same greedy output as Specula's own spelling, and the notes they imply
tgt=models/specula-code-target-f16.gguf
drf=models/specula-code-draft-f16.gguf
"$bin" run -m "$tgt" -p "def add(a, b):" -n 12 --temp 0 -c 256 -t 2 --max-seqs 2 >"$tmp/own.txt" 2>"$tmp/own.err"
if "$bin" run "$tgt" -p "def add(a, b):" -n 12 --temp 0 --ctx-size 256 --threads 2 -np 2 >"$tmp/alias1.txt" 2>"$tmp/alias1.err" &&
   "$bin" run --model "$tgt" -p "def add(a, b):" -n 12 --temp 0 --max-model-len 256 --max-num-seqs 2 >"$tmp/alias2.txt" 2>"$tmp/alias2.err" &&
   [ -s "$tmp/own.txt" ] && cmp -s "$tmp/own.txt" "$tmp/alias1.txt" && cmp -s "$tmp/own.txt" "$tmp/alias2.txt"; then
    ok "llama-server / vLLM option names and a positional model give the same output"
else
    fail "option aliases" "$(head -c 300 "$tmp/alias1.err" "$tmp/alias2.err")"
fi
if printf 'def add(a, b):' | "$bin" run -m "$tgt" -f - -n 12 --temp 0 -c 256 -t 2 >"$tmp/stdin.txt" 2>"$tmp/stdin.err" &&
   cmp -s "$tmp/own.txt" "$tmp/stdin.txt"; then
    ok "run -f - reads the prompt from standard input"
else
    fail "run -f -" "$(head -c 300 "$tmp/stdin.err")"
fi
# the bundled target's trained context, as `specula info` reads it from the
# GGUF; twice that is past it
tr=$("$bin" info -m "$tgt" 2>/dev/null | grep -o 'n_ctx_train [0-9]*' | head -n 1 | cut -d' ' -f2)
wide=$((2 * ${tr:-0}))
if [ "${tr:-0}" -gt 0 ] && "$bin" run -m "$tgt" -p "x = " -n 4 --temp 0 -c "$wide" >/dev/null 2>"$tmp/ctxwarn.err" &&
   grep -q "past the $tr the model was trained on" "$tmp/ctxwarn.err" &&
   "$bin" run -m "$tgt" -p "x = " -n 4 --temp 0 -c "$tr" >/dev/null 2>"$tmp/ctxok.err" &&
   ! grep -q "trained on" "$tmp/ctxok.err"; then
    ok "a context past the trained one is warned about, and only then"
else
    fail "context warning (n_ctx_train ${tr:-unknown})" "$(head -c 300 "$tmp/ctxwarn.err" "$tmp/ctxok.err")"
fi
# batch and serve warn the same way; /v1/models reports the configured
# context beside the trained one
printf '{"prompt": "x = ", "max_tokens": 2, "temperature": 0}\n' >"$tmp/ctx.jsonl"
if "$bin" batch -m "$tgt" -f "$tmp/ctx.jsonl" -t 1 -c "$wide" >/dev/null 2>"$tmp/bctxwarn.err" &&
   grep -q "specula batch: warning: -c $wide is past the $tr the model was trained on" "$tmp/bctxwarn.err" &&
   grep -q "degrades" "$tmp/bctxwarn.err" &&
   "$bin" batch -m "$tgt" -f "$tmp/ctx.jsonl" -t 1 -c "$tr" >/dev/null 2>"$tmp/bctxok.err" &&
   ! grep -q "trained on" "$tmp/bctxok.err"; then
    ok "batch warns about a context past the trained one, and only then"
else
    fail "batch context warning" "$(head -c 300 "$tmp/bctxwarn.err" "$tmp/bctxok.err")"
fi
models_ctx() { # NAME PATH: the fields of $URL/PATH's model entry -> "context_length n_ctx_train"
    curl -s "$URL$2" | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d["data"][0] if "data" in d else d
print(d["context_length"], d["n_ctx_train"], d["max_model_len"])'
}
if start_server ctxwide -m "$tgt" -c "$wide" --served-model-name wide &&
   grep -q "specula serve: warning: -c $wide is past the $tr the model was trained on" "$tmp/ctxwide.log" &&
   [ "$(models_ctx wide /v1/models)" = "$wide $tr $wide" ] &&
   [ "$(models_ctx wide /v1/models/wide)" = "$wide $tr $wide" ] &&
   kill "$PID" && start_server ctxfit -m "$tgt" -c "$tr" &&
   ! grep -q "trained on" "$tmp/ctxfit.log" &&
   [ "$(models_ctx fit /v1/models)" = "$tr $tr $tr" ]; then
    ok "serve warns about -c past the trained context, only then; /v1/models reports both"
else
    fail "serve context warning and /v1/models" "$(head -c 400 "$tmp/ctxwide.log" "$tmp/ctxfit.log" 2>&1)"
fi
kill "$PID" 2>/dev/null
# --spec-fixed-k: drafting happens by construction, not by the planner's
# timing (under ASan it may judge that drafting does not pay)
if "$bin" run -m "$tgt" -p "def add(a, b):" -n 24 --temp 0 -md "$drf" --spec-fixed-k --json -t 2 >"$tmp/md.json" 2>"$tmp/md.err" &&
   grep -q "draft speculation on" "$tmp/md.err" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["spec"]["drafted"] > 0, d["spec"]' "$tmp/md.json"; then
    ok "-md without --spec turns draft speculation on, and says so"
else
    fail "-md" "$(head -c 300 "$tmp/md.err")"
fi
# a cold start is not final: with a prompt far longer than the draft's
# catch-up window, the adaptive planner (no --spec-fixed-k) still probes the
# draft, measures it and drafts; the output is the plain one. Whether
# drafting can pay at all is measured: under a sanitizer (a timeout scale
# over 1), a draft pass costs nearly a target pass and the probe is rightly
# skipped, so there only the output is checked
python3 -c 'import sys; sys.stdout.write(open(sys.argv[1]).read()[:1500])' src/grammar/either.c >"$tmp/long.py"
if "$bin" run -m "$tgt" -f "$tmp/long.py" -n 96 --temp 0 --spec draft --json -t 2 >"$tmp/cold.json" 2>"$tmp/cold.err" &&
   "$bin" run -m "$tgt" -f "$tmp/long.py" -n 96 --temp 0 --spec off --json -t 2 >"$tmp/cold0.json" 2>>"$tmp/cold.err" &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); o=json.load(open(sys.argv[2]));
assert d["spec"]["drafted"] > 0 or sys.argv[3] != "1", d["spec"]; assert d["text"] == o["text"], (d["text"], o["text"])' \
       "$tmp/cold.json" "$tmp/cold0.json" "${SPECULA_TIMEOUT_SCALE:-1}"; then
    ok "--spec draft from a cold start with a long prompt: the draft is probed and drafts; the same output"
else
    fail "draft cold start" "$(head -c 300 "$tmp/cold.err") $(head -c 300 "$tmp/cold.json")"
fi
if ! "$bin" run -m "$q8" -p hi -n 4 --spec draft >/dev/null 2>"$tmp/bd.err" &&
   grep -q "the draft was the bundled default" "$tmp/bd.err" && grep -q -- "--draft MODEL" "$tmp/bd.err"; then
    ok "the bundled draft with another target: the error names it and the way out"
else
    fail "bundled draft" "$(head -c 300 "$tmp/bd.err")"
fi

# The tokenizer has nothing to do with the architecture: `tokenize`
# works on every reference vocabulary, gpt-neox and baichuan included (not
# run by this build): three strings of each, exactly the reference's ids
# (no BOS, no special-token parsing, as the .out files were made).
python3 - "$ref/vocab" "$tmp" <<'PY'
import glob, os, sys
SEP = "\n__ggml_vocab_test__\n"
n = 0
with open(sys.argv[2] + "/vocab_cases.txt", "w") as lst:
    for g in sorted(glob.glob(sys.argv[1] + "/*.gguf")):
        strs = open(g + ".inp", encoding="utf-8", newline="").read().split(SEP)[:-1]
        outs = open(g + ".out").read().split("\n")
        idx = [i for i in range(len(strs)) if strs[i]]
        for i in (idx[len(idx) // 4], idx[len(idx) // 2], idx[-1]):
            f = "%s/vocab_%d.txt" % (sys.argv[2], n)
            open(f, "w", encoding="utf-8", newline="").write(strs[i])
            want = "[" + ", ".join(outs[i].split()) + "]"
            lst.write("%s\t%s\t%s\n" % (g, f, want))
            n += 1
PY
vbad=""; vn=0
while IFS=$'\t' read -r vf tf want; do
    got=$("$bin" tokenize -m "$vf" --no-bos --no-parse-special -f "$tf" 2>"$tmp/vtok.err")
    vn=$((vn + 1))
    [ "$got" = "$want" ] || vbad="$vbad $(basename "$vf") $(basename "$tf"): got ${got:0:120} $(head -c 200 "$tmp/vtok.err"), want ${want:0:120};"
done <"$tmp/vocab_cases.txt"
if [ "$vn" -ge 15 ] && [ -z "$vbad" ]; then ok "tokenize matches the reference on every vocabulary, any architecture ($vn strings)"
else fail "tokenize on the reference vocabularies" "$vn strings:$vbad"; fi

neox=$ref/vocab/ggml-vocab-gpt-neox.gguf
if "$bin" info -m "$neox" >"$tmp/info2.txt" 2>"$tmp/info2.err" &&
   grep -q "^architecture: *gptneox (not supported" "$tmp/info2.txt" &&
   grep -q "^tokenizer: *gpt2 (byte-level BPE), 50432 tokens" "$tmp/info2.txt" &&
   grep -q "^cannot run: .*architecture 'gptneox' is not supported" "$tmp/info2.txt"; then
    ok "info describes a file of an architecture it cannot run, and says so"
else
    fail "info on gpt-neox" "$(cat "$tmp/info2.txt" "$tmp/info2.err")"
fi
if "$bin" info -v -m "$ref/vocab/ggml-vocab-baichuan.gguf" >"$tmp/info3.txt" 2>"$tmp/info3.err" &&
   grep -q '^  general.architecture  *"baichuan"' "$tmp/info3.txt" &&
   grep -q '^  tokenizer.ggml.tokens  *\[string x 64000' "$tmp/info3.txt" &&
   grep -q "^tensors:" "$tmp/info3.txt"; then
    ok "info -v lists the metadata of a file it cannot run"
else
    fail "info -v on baichuan" "$(head -c 1500 "$tmp/info3.txt") $(cat "$tmp/info3.err")"
fi
"$bin" run -m "$neox" -p hi >"$tmp/run2.out" 2>"$tmp/run2.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "architecture 'gptneox' is not supported (supported: " "$tmp/run2.err"; then
    ok "run refuses an architecture it cannot run, by name"
else
    fail "run on gpt-neox" "exit $rc: $(head -c 300 "$tmp/run2.err")"
fi
timeout 60 "$bin" serve --port 0 -t 1 -m "$neox" >"$tmp/serve2.out" 2>"$tmp/serve2.err"; rc=$?
if [ $rc -eq 1 ] && grep -q "architecture 'gptneox' is not supported (supported: " "$tmp/serve2.err"; then
    ok "serve refuses an architecture it cannot run, by name"
else
    fail "serve on gpt-neox" "exit $rc: $(head -c 300 "$tmp/serve2.err")"
fi
# run --chat: two user turns piped in give two answers; the second turn's
# prompt (the whole conversation, rendered again) finds the first in the
# prefix cache. A template named here; the model's own without one; a
# model without a template refused.
printf 'def add(a, b):\nnow subtract\n' | "$bin" run -m "$tgt" --chat --chat-template chatml \
    --system "You write Python." -n 8 --temp 0 -t 2 --verbose >"$tmp/chat.txt" 2>"$tmp/chat.err"
rc=$?
if [ $rc -eq 0 ] && python3 - "$tmp/chat.txt" "$tmp/chat.err" <<'PY'; then
import re, sys
out = open(sys.argv[1], encoding="utf-8", errors="replace").read()
err = open(sys.argv[2]).read()
turns = re.findall(r"turn (\d+): prompt (\d+) tokens, (\d+) cached, (\d+) generated", err)
assert "chat template chatml" in err, err
assert [t[0] for t in turns] == ["1", "2"], err
(_, p1, c1, g1), (_, p2, c2, g2) = [tuple(map(int, t)) for t in turns]
assert g1 > 0 and g2 > 0 and out.count("\n") >= 2, (g1, g2, out)
assert p2 > p1 and int(c2) > 0, ("second turn reuses the first from the cache", p1, p2, c2)
assert "> " not in err  # the prompt is only for a terminal
PY
    ok "run --chat: two piped turns, two answers; the second prompt reuses the first from the cache"
else
    fail "run --chat" "exit $rc: $(head -c 600 "$tmp/chat.err")"
fi
if printf 'hello\n/exit\nnot read\n' | "$bin" run -m "$tgt" --chat --chat-template chatml -n 4 --temp 0 -t 2 \
        --verbose >/dev/null 2>"$tmp/chatx.err" &&
   [ "$(grep -c 'generated' "$tmp/chatx.err")" = 1 ]; then
    ok "run --chat: /exit ends the conversation"
else
    fail "run --chat /exit" "$(head -c 300 "$tmp/chatx.err")"
fi
if printf 'a function that adds two numbers\n' | "$bin" run -m "$tgt" --chat -n 8 --temp 0 -t 2 --verbose \
        >"$tmp/chatm.out" 2>"$tmp/chatm.err" && grep -q "chat template model" "$tmp/chatm.err" &&
   grep -q "generated" "$tmp/chatm.err"; then
    ok "run --chat: the bundled model's own template, without --chat-template"
else
    fail "run --chat with the model's template" "$(head -c 300 "$tmp/chatm.err")"
fi
echo hi | "$bin" run -m "$q8" --chat -n 4 -t 2 >"$tmp/chatn.out" 2>"$tmp/chatn.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "no chat template" "$tmp/chatn.err" && grep -q -- "--chat-template NAME" "$tmp/chatn.err" \
   && [ ! -s "$tmp/chatn.out" ]; then
    ok "run --chat refuses a model without a chat template, naming --chat-template"
else
    fail "run --chat without a template" "exit $rc: $(head -c 300 "$tmp/chatn.err")"
fi

# `specula template`: a chat request rendered by a Jinja chat template, the
# bytes exactly (tests/template/ compares published templates with Python
# jinja2; here the command line itself). A template of the common
# constructs, the BOS/EOS text from -m's vocabulary, chat_template_kwargs
# and a null content as variables, strftime_now from --now.
printf '%s' '{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}
{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}{{ strftime_now("%d %b %Y") }}|{{ enable_thinking }}|{{ messages[1].content is none }}' >"$tmp/t.jinja"
printf '%s' '{"messages": [{"role": "user", "content": "héllo 你好"}, {"role": "assistant", "content": null}], "chat_template_kwargs": {"enable_thinking": false}}' >"$tmp/t.json"
printf '%s' '<s>[user]héllo 你好</s>
[assistant]None</s>
[assistant]29 Feb 2024|False|True' >"$tmp/t.want"
if "$bin" template -m "$q8" --template "$tmp/t.jinja" --input "$tmp/t.json" --now 2024-02-29T23:59:59 >"$tmp/t.out" 2>"$tmp/t.err" &&
   cmp -s "$tmp/t.out" "$tmp/t.want"; then
    ok "template renders a request byte for byte (--template, the model's BOS/EOS, --now)"
else
    fail "template rendering" "$(head -c 300 "$tmp/t.out") | $(head -c 300 "$tmp/t.err")"
fi
# -m alone renders the model's own tokenizer.chat_template (a vocabulary-only
# file of the fuzz corpus carries one), the request from standard input
tplm=tests/fuzz/corpus/gguf/tiny_bpe_qwen2.gguf
if printf '%s' '{"messages": [{"role": "user", "content": "hi"}]}' |
       "$bin" template -m "$tplm" --input - >"$tmp/tm.out" 2>"$tmp/tm.err" &&
   [ "$(od -An -c "$tmp/tm.out" | tr -s ' \n' ' ')" = "$(printf '<|im_start|>user\nhi<|im_end|>\n' | od -An -c | tr -s ' \n' ' ')" ]; then
    ok "template -m renders the model's chat template on a request from standard input"
else
    fail "template -m" "$(head -c 300 "$tmp/tm.out") | $(head -c 300 "$tmp/tm.err")"
fi
printf '%s' '{% for m in messages %}
{{ m.content }}
{% if %}{% endif %}{% endfor %}' >"$tmp/syntax.jinja"
"$bin" template --template "$tmp/syntax.jinja" --input "$tmp/t.json" >"$tmp/ts.out" 2>"$tmp/ts.err"; rc=$?
if [ $rc -eq 1 ] && grep -qF "$tmp/syntax.jinja: line 3" "$tmp/ts.err" && [ ! -s "$tmp/ts.out" ]; then
    ok "template: a syntax error exits 1 naming the file and the line"
else
    fail "template syntax error" "exit $rc: $(head -c 300 "$tmp/ts.err")"
fi
printf '%s' '{% for m in messages %}
{% if m.role == "assistant" %}{{ raise_exception("Only user roles, please!") }}{% endif %}{% endfor %}' >"$tmp/raise.jinja"
"$bin" template --template "$tmp/raise.jinja" --input "$tmp/t.json" >"$tmp/tr.out" 2>"$tmp/tr.err"; rc=$?
if [ $rc -eq 1 ] && grep -qF "$tmp/raise.jinja: line 2" "$tmp/tr.err" && grep -qF "Only user roles, please!" "$tmp/tr.err" &&
   [ ! -s "$tmp/tr.out" ]; then
    ok "template: raise_exception exits 1 with its message and the line"
else
    fail "template raise_exception" "exit $rc: $(head -c 300 "$tmp/tr.err")"
fi
tbad=""
for args in "--input $tmp/t.json" "--template $tmp/t.jinja" "--template $tmp/t.jinja --input $tmp/t.json --now 2024-02-30" \
            "--template $tmp/t.jinja --input $tmp/t.json --bogus" "--template $tmp/t.jinja --input"; do
    # shellcheck disable=SC2086 # the arguments are split on purpose
    "$bin" template $args >/dev/null 2>"$tmp/tu.err"; rc=$?
    [ $rc -eq 2 ] && [ -s "$tmp/tu.err" ] || tbad="$tbad [$args] exit $rc: $(head -c 150 "$tmp/tu.err");"
done
[ -z "$tbad" ] && ok "template: usage errors exit 2 with a message" || fail "template usage errors" "$tbad"
printf '%s' '{"messages": [' >"$tmp/badreq.json"
tbad=""
while IFS='|' read -r want args; do
    # shellcheck disable=SC2086 # the arguments are split on purpose
    "$bin" template $args >"$tmp/tf.out" 2>"$tmp/tf.err"; rc=$?
    { [ $rc -eq 1 ] && grep -qF -- "$want" "$tmp/tf.err" && [ ! -s "$tmp/tf.out" ]; } ||
        tbad="$tbad [$args] exit $rc: $(head -c 150 "$tmp/tf.err");"
done <<EOF2
/nonexistent.jinja|--template /nonexistent.jinja --input $tmp/t.json
/nonexistent.json|--template $tmp/t.jinja --input /nonexistent.json
$tmp/badreq.json: the request is not valid JSON|--template $tmp/t.jinja --input $tmp/badreq.json
no chat template|-m $q8 --input $tmp/t.json
/nonexistent.gguf|-m /nonexistent.gguf --input $tmp/t.json
EOF2
[ -z "$tbad" ] && ok "template: a missing file, a bad request, a model without a template exit 1 naming them" ||
    fail "template failures" "$tbad"

# bad input: a message on stderr and a non-zero exit, never a crash
printf 'GGUF\x03\x00\x00\x00garbage' >"$tmp/bad.gguf"
head -c 5000 "$q8" >"$tmp/trunc.gguf"
while IFS='|' read -r name args; do
    eval "set -- $args"
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    if sanitizer "$tmp/err" "$tmp/out"; then
        fail "refuses: $name" "exit $rc with a sanitizer report: $(grep -E -A 12 "$SAN_RE" "$tmp/err" "$tmp/out" | head -c 1500)"
    elif [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ -s "$tmp/err" ]; then ok "refuses: $name"
    else fail "refuses: $name" "exit $rc, stderr: $(head -c 200 "$tmp/err")"; fi
done <<EOF2
missing model file|run -m /nonexistent.gguf -p hi
corrupt model file|run -m $tmp/bad.gguf -p hi
truncated model file|info -m $tmp/trunc.gguf
truncated model file 2|run -m $tmp/trunc.gguf -p hi
unknown command|frobnicate
unknown option|run -m $q8 -p hi --bogus
missing option value|run -m $q8 -p
bad number|run -m $q8 -p hi -n abc
negative temperature|run -m $q8 -p hi --temp -1
top-p out of range|run -m $q8 -p hi --top-p 2
no prompt|run -m $q8
both prompt and file|run -m $q8 -p hi -f $tmp/prompt.txt
missing prompt file|run -m $q8 -f /nonexistent.txt
context too small|run -m $q8 -p hi -n 100 -c 10
tokenize without text|tokenize -m $q8
unknown chat template|run -m $q8 --chat --chat-template nope
chat with a prompt|run -m $q8 --chat -p hi
system without chat|run -m $q8 -p hi --system x
EOF2

# the runs above that were judged by their output or exit status alone
if sanitizer "$tmp"/*.err; then
    fail "sanitizer" "$(grep -E -A 12 "$SAN_RE" "$tmp"/*.err | head -c 1500)"
else
    ok "no sanitizer report on the stderr of the runs above"
fi

finish
