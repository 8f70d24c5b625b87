#!/usr/bin/python3
"""golden_check.py: Specula against golden generations of ik_llama.cpp
(tests/reference/ik/golden/*.jsonl, written by make_golden.sh). Standard
library only; used by tests/reference/test_ik_golden.sh.

usage: golden_check.py GOLDEN.jsonl MODEL.gguf TOL MEAN_TOL [-- RUN OPTIONS...]

For every record of GOLDEN.jsonl, runs `$SPECULA_BIN run -m MODEL.gguf -f -
-n N --temp 0 --ignore-eos --json --logprobs K RUN OPTIONS` on its prompt
(N and K from the record) and compares:
  - prompt_tokens: equal;
  - every step up to the first near-tie of the golden (top-1 minus top-2
    log-probability below TOL; the engines may then pick either token, and
    nothing after that step is comparable): the greedy token equal, and the
    log-probabilities of the golden's top tokens within TOL of Specula's (a
    golden top token missing from Specula's top K must be at most TOL above
    Specula's K-th, and the other way round); the near-tie step's
    log-probabilities are compared too, its token is not;
  - the mean |difference| over all the compared log-probabilities at most
    MEAN_TOL.
Prints one line: the largest and mean differences, steps compared, and the
first near-tie of each record; then the problems, if any (exit status 1).
"""
import json
import os
import subprocess
import sys


def compare(gold, run, tol):
    """Returns (problems, diffs, n_steps, stop) for one record."""
    bad, diffs = [], []
    pid = gold["prompt_id"]
    if run["prompt_tokens"] != gold["prompt_tokens"]:
        return [f"{pid}: prompt tokens {run['prompt_tokens'][:12]}... vs golden "
                f"{gold['prompt_tokens'][:12]}..."], diffs, 0, None
    if len(run["steps"]) < len(gold["steps"]):
        bad.append(f"{pid}: {len(run['steps'])} steps, golden {len(gold['steps'])}")
    n, stop = 0, None
    for s, (g, r) in enumerate(zip(gold["steps"], run["steps"])):
        n += 1
        gt, rt = dict(map(tuple, g["top"])), dict(map(tuple, r["top"]))
        if not gt or not rt:
            bad.append(f"{pid} step {s}: no top tokens")
            break
        glast, rlast = min(gt.values()), min(rt.values())
        for tid, lp in gt.items():
            if tid in rt:
                d = abs(lp - rt[tid])
                diffs.append(d)
                if d > tol:
                    bad.append(f"{pid} step {s} token {tid}: {rt[tid]:.6f} vs golden {lp:.6f}")
            elif lp > rlast + tol:
                bad.append(f"{pid} step {s} token {tid}: golden {lp:.6f}, not in the top {len(rt)} "
                           f"(its last {rlast:.6f})")
        for tid, lp in rt.items():
            if tid not in gt and lp > glast + tol:
                bad.append(f"{pid} step {s} token {tid}: {lp:.6f}, not in the golden top {len(gt)} "
                           f"(its last {glast:.6f})")
        top = sorted(gt.values(), reverse=True)
        if len(top) > 1 and top[0] - top[1] < tol:
            stop = s
            break
        if r["id"] != g["id"]:
            bad.append(f"{pid} step {s}: greedy {r['id']} vs golden {g['id']} "
                       f"(golden margin {top[0] - top[1]:.4f})")
            break
    return bad, diffs, n, stop


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    golden, model, tol, mean_tol = argv[0], argv[1], float(argv[2]), float(argv[3])
    exe = os.environ.get("SPECULA_BIN", "bin/specula")
    bad, diffs, steps, total, stops = [], [], 0, 0, []
    records = [json.loads(l) for l in open(golden, encoding="utf-8") if l.strip()]
    if not records:
        bad.append(f"{golden}: no records")
    for gold in records:
        k = max(len(st["top"]) for st in gold["steps"])
        cmd = [exe, "run", "-m", model, "-f", "-", "-n", str(len(gold["steps"])), "--temp", "0",
               "--ignore-eos", "--json", "--logprobs", str(k)] + extra
        p = subprocess.run(cmd, input=gold["prompt"].encode("utf-8"), capture_output=True)
        if p.returncode != 0:
            bad.append(f"{gold['prompt_id']}: run failed ({p.returncode}): "
                       f"{p.stderr.decode(errors='replace')[-300:]}")
            continue
        b, d, n, stop = compare(gold, json.loads(p.stdout), tol)
        bad += b
        diffs += d
        steps += n
        total += len(gold["steps"])
        stops.append(f"{gold['prompt_id']}@{stop}" if stop is not None else None)
    mx = max(diffs) if diffs else 0.0
    mean = sum(diffs) / len(diffs) if diffs else 0.0
    if not diffs:
        bad.append("nothing compared")
    elif mean > mean_tol:
        bad.append(f"mean |difference| {mean:.2e} exceeds {mean_tol:g}")
    ties = ", ".join(s for s in stops if s)
    print(f"max |logprob difference| {mx:.2e}, mean {mean:.1e}, {steps}/{total} steps compared"
          + (f" (near-ties: {ties})" if ties else ""))
    for x in bad[:10]:
        print("  " + x)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
