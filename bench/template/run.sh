#!/usr/bin/env bash
# bench/template/run.sh: what rendering a chat template costs, per request
# and per turn. The tool-call fixture of tests/template/fixtures/ (a system
# prompt, two tools, a tool call, its result and the answer) is extended to
# a 50-message conversation (the same four-message exchange repeated, then
# a user turn) and rendered with a few real templates of
# tests/template/templates/ by bin/template_bench (sp_chat_apply_template:
# the request's JSON, the template's parse and the render, best of 5 rounds
# of N) and, for scale, by Python jinja2 as transformers renders it (the
# template compiled once, as transformers caches it; ref_render.py).
# Usage: bench/template/run.sh [N] (default 200 renders a round), from the
# repository root (`make template-bench` builds bin/template_bench and runs it).
set -eu
n=${1:-200}
bench=${TEMPLATE_BENCH:-bin/template_bench}
dir=tests/template
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -x "$bench" ] || { echo "run.sh: $bench is missing: make template-bench" >&2; exit 1; }
python3 - "$dir/fixtures/05_tool_calls_object.json" "$out/long.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1], encoding="utf-8"))
m = r["messages"]
system, block, last = m[0], m[1:5], m[5]
msgs = [system]
while len(msgs) + len(block) + 1 <= 50:
    msgs += block
msgs.append(last)
r["messages"] = msgs
json.dump(r, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
print("request: %d messages, %d bytes of JSON" % (len(msgs), len(json.dumps(r, ensure_ascii=False).encode())))
PY
turns=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["messages"]))' "$out/long.json")
printf '%-42s %8s %10s %10s %9s %10s\n' template bytes parse_us render_us us/turn jinja2_us
for t in Qwen-Qwen3-0.6B meta-llama-Llama-3.1-8B-Instruct openai-gpt-oss-120b \
         deepseek-ai-DeepSeek-V3.1 mistralai-Mistral-Nemo-Instruct-2407; do
    f=$dir/templates/$t.jinja
    read -r _ bytes _ parse _ render < <("$bench" "$f" "$out/long.json" "$n")
    py=$(python3 - "$dir" "$f" "$out/long.json" "$n" <<'PY'
import json, sys, time
sys.path.insert(0, sys.argv[1])
import ref_render, datetime
env = ref_render.make_env(datetime.datetime(2025, 6, 15, tzinfo=datetime.timezone.utc))
tmpl = env.from_string(ref_render.read_text(sys.argv[2]))
v = ref_render.variables(json.loads(ref_render.read_text(sys.argv[3])))
n = max(1, int(sys.argv[4]) // 4)
best = min((lambda t0: (sum(len(tmpl.render(**v)) for _ in range(n)), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(3))
print("%.1f" % (best / n * 1e6))
PY
)
    printf '%-42s %8s %10s %10s %9.1f %10s\n' "$t" "$bytes" "$parse" "$render" \
        "$(python3 -c "print($render / $turns)")" "$py"
done
