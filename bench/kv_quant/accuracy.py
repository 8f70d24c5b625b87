#!/usr/bin/env python3
"""bench/kv_quant/accuracy.py: what a q8_0 KV cache costs in accuracy, against
the same engine's f16 KV cache, beside what ik_llama.cpp's own q8_0 cache
costs against its f16 one (the yardstick) (BENCHMARKS.md, "A q8_0 KV cache").

For each prompt, greedy generation of N tokens with the top-8
log-probabilities at every step, once with an f16 and once with a q8_0 KV
cache; the error is the mean |difference| of the f16 run's top-4 tokens'
log-probabilities over the steps before the two runs' greedy tokens first
differ (the quantized-types metric of ../shared/reference/trained/README.md).
ik_llama.cpp runs through tests/reference/ik/ik_ref (make_golden.sh builds
it) with flash attention on in both of its runs (its q8_0 cache needs it).

usage: bench/kv_quant/accuracy.py [--bin bin/specula] [--ik-ref build/ik/ik_ref]
         [--model ../shared/reference/trained/ref-ot-f32.gguf]
         [--prompts ../shared/reference/trained/prompts.jsonl] [-n 48] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys


def specula(a, prompt, kv):
    p = subprocess.run([a.bin, "run", "-m", a.model, "-p", prompt, "-n", str(a.n), "--temp", "0", "--json",
                        "--logprobs", "8", "--kv", kv, "--spec", "off", "-t", "2", "--ignore-eos"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("accuracy: specula failed: " + p.stderr[-800:])
    return json.loads(p.stdout)["steps"]


def ik(a, prompts_path, kv):
    p = subprocess.run([a.ik_ref, "-m", a.model, "-p", prompts_path, "-n", str(a.n), "-k", "8", "--kv", kv,
                        "--fa", "1", "-t", "2"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("accuracy: ik_ref failed: " + p.stderr[-800:])
    return {r["prompt_id"]: r["steps"] for r in map(json.loads, p.stdout.splitlines()) if r}


def compare(ref, other):
    """(sum of |diff|, values, steps compared, max |diff|) over the steps
    before the greedy tokens first differ."""
    tot, cnt, steps, mx = 0.0, 0, 0, 0.0
    for s, o in zip(ref, other):
        lp = dict((t, l) for t, l in o["top"])
        for t, l in s["top"][:4]:
            if t in lp:
                d = abs(l - lp[t])
                tot, cnt, mx = tot + d, cnt + 1, max(mx, d)
        steps += 1
        if s["id"] != o["id"]:
            break
    return tot, cnt, steps, mx


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--ik-ref", default="build/ik/ik_ref")
    ap.add_argument("--model", default="../shared/reference/trained/ref-ot-f32.gguf")
    ap.add_argument("--prompts", default="../shared/reference/trained/prompts.jsonl")
    ap.add_argument("-n", type=int, default=48)
    ap.add_argument("--json")
    a = ap.parse_args()
    prompts = [json.loads(l) for l in open(a.prompts) if l.strip()]
    res = {}
    acc = [0.0, 0, 0, 0.0]
    for pr in prompts:
        t, c, s, m = compare(specula(a, pr["prompt"], "f16"), specula(a, pr["prompt"], "q8_0"))
        acc = [acc[0] + t, acc[1] + c, acc[2] + s, max(acc[3], m)]
    res["specula"] = {"mean_abs_logprob_err": acc[0] / max(acc[1], 1), "steps": acc[2], "max": acc[3]}
    if os.path.exists(a.ik_ref):
        f16, q8 = ik(a, a.prompts, "f16"), ik(a, a.prompts, "q8_0")
        acc = [0.0, 0, 0, 0.0]
        for pid in f16:
            t, c, s, m = compare(f16[pid], q8[pid])
            acc = [acc[0] + t, acc[1] + c, acc[2] + s, max(acc[3], m)]
        res["ik_llama.cpp"] = {"mean_abs_logprob_err": acc[0] / max(acc[1], 1), "steps": acc[2], "max": acc[3]}
    for k, v in res.items():
        print("%-13s q8_0 vs f16 KV: mean |logprob error| %.5f over %d steps (max %.4f)"
              % (k, v["mean_abs_logprob_err"], v["steps"], v["max"]))
    if "ik_llama.cpp" in res:
        print("ratio (Specula / ik_llama.cpp): %.3f" % (res["specula"]["mean_abs_logprob_err"] /
                                                     max(res["ik_llama.cpp"]["mean_abs_logprob_err"], 1e-12)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
