#!/usr/bin/python3
"""The draft's acceptance through the engine, at a fixed k, on held-back
code-completion prompts: the acceptance figures of models/README.md
("Results", through the engine).

    tools/train/engine_acceptance.py [--bin bin/specula] [--model T.gguf]
        [--draft D.gguf] [--corpus build/corpus] [--prompts 32] [--gen 96]
        [--ks 1,2,3,4,5,6,8] [--threads 2] [--json OUT]

Prompts are bench/engine/spec_floor.py's (a held-out file's marker line and
~800 characters from its top or a later def/class line, round-robin over the
held-out files of tools/train/corpus.py), so the numbers here and the speed
table there describe the same text.  For each k, `specula batch --spec draft
--spec-fixed-k --spec-k K` runs every prompt greedily, one at a time, and
reports what the engine counted: acceptance rate = accepted / drafted, mean
acceptance length = (accepted + verification steps) / verification steps.
Greedy speculation is exact, so every k must give --spec off's tokens; a
difference is reported and the exit status is 1.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "engine"))
from spec_floor import load_files, make_prompts  # noqa: E402


def run(a, path, spec, k=None):
    cmd = [a.bin, "batch", "-m", a.model, "-f", path, "--concurrency", "1", "-t", str(a.threads),
           "--spec", spec, "--stats"]
    if spec == "draft":
        cmd += ["--draft", a.draft, "--spec-fixed-k", "--spec-k", str(k)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("engine_acceptance: %s failed (exit %d): %s" % (" ".join(cmd), p.returncode,
                                                                p.stderr[-2000:]))
    toks = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            toks[r["id"]] = r["tokens"]
    stats = next((json.loads(l) for l in p.stderr.splitlines() if l.startswith('{"wall_ms"')), None)
    if stats is None:
        sys.exit("engine_acceptance: no statistics from %s" % " ".join(cmd))
    return toks, stats


def main():
    root = os.path.join(HERE, "..", "..")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(root, "bin", "specula"))
    ap.add_argument("--model", default=os.path.join(root, "models", "specula-code-target-f16.gguf"))
    ap.add_argument("--draft", default=os.path.join(root, "models", "specula-code-draft-f16.gguf"))
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--prompt-chars", type=int, default=800)
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--ks", default="1,2,3,4,5,6,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    files = load_files(os.path.join(a.corpus, "heldout.txt"))
    path = os.path.join(tempfile.mkdtemp(prefix="engine_acceptance."), "prompts.jsonl")
    with open(path, "w") as f:
        for i, p in enumerate(make_prompts(files, a.prompts, a.prompt_chars)):
            f.write(json.dumps({"id": "p%d" % i, "prompt": p, "max_tokens": a.gen,
                                "temperature": 0}) + "\n")
    off, _ = run(a, path, "off")
    rows, bad = [], 0
    for k in [int(x) for x in a.ks.split(",")]:
        toks, st = run(a, path, "draft", k)
        diff = [i for i in off if off[i] != toks.get(i)]
        bad += len(diff)
        steps, drafted, accepted = st["spec_steps"], st["spec_drafted"], st["spec_accepted"]
        row = dict(k=k, steps=steps, drafted=drafted, accepted=accepted,
                   acceptance_rate=accepted / max(1, drafted),
                   mean_acceptance_length=(accepted + steps) / max(1, steps), mismatched=len(diff))
        rows.append(row)
        print("k=%d: acceptance rate %.3f (%d / %d drafted), mean acceptance length %.2f over %d "
              "verification steps%s" % (k, row["acceptance_rate"], accepted, drafted,
                                        row["mean_acceptance_length"], steps,
                                        "; %d requests differ from --spec off" % len(diff) if diff else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(model=a.model, draft=a.draft, prompts=a.prompts, gen=a.gen, rows=rows), f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
