#!/usr/bin/env python3
"""bench/engine/spec_floor.py: speculation against --spec off, at every load:
the table of the floor (speculation never below 0.97x of off; BENCHMARKS.md,
"Never below no speculation").

For each concurrency C and each round, `specula batch` runs the same greedy
completion prompts with --spec off and with each method, the order rotated
every round (so that neither side is always first while the machine drifts),
each method run --reps times in a round, interleaved, keeping its fastest
(this machine moves a 2-15 s run by 10-25% between identical runs, almost
always slower: once in 45 runs one came out 10% faster than all others, and
its round's cells, the A/A control's too, fell to 0.87-0.89x), and each method is compared with off in its own round:

  CPU ratio   off's cpu_ms / the method's cpu_ms   (all threads, first submit
              to last answer: the steadier figure on a shared machine)
  wall ratio  off's wall_ms / the method's wall_ms
  decode      (C=1 only) off's summed per-request decode_ms / the method's:
              decode time alone, without prefill and start-up

Every method's tokens must equal off's, request by request (greedy decoding
is exact); a difference is reported and the exit status is 1.

The method "off2" is --spec off run again, compared with off like any
method (an A/A control, on by default): its range is what this machine does
to two identical runs, the spread a method's cell must be read against.
The "lowest CPU ratio" line gives the lowest over the real methods and the
control's, side by side.

usage: bench/engine/spec_floor.py [--bin bin/specula] [--model M] [--draft D]
         [--corpus build/corpus] [--concurrency 1,4,16,64] [--rounds 3] [--reps 2]
         [--methods off2,ngram,suffix,draft] [--gen 96] [--prompt-chars 800]
         [--threads 2] [--json OUT]
A method "draft-k3" (any proposer, any N) runs at a fixed k, without the
planner and the guard.

Prompts: held-out files of build/corpus/heldout.txt (tools/train/corpus.py),
each prompt a file's marker line plus ~prompt-chars characters cut at a line
boundary, starting at the file's top or at a later def/class line, round-robin
over the files: 8 prompts at C=1, 16 at 4, 32 at 16 and 128 at 64 (BENCHMARKS.md,
"Never below no speculation"), 4C at another C.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

N_PROMPTS = {1: 8, 4: 16, 16: 32, 64: 128}


def load_files(path):
    files, cur, name = [], [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# ==== file: "):
                if name is not None:
                    files.append((name, "".join(cur)))
                name, cur = line, []
            else:
                cur.append(line)
    if name is not None:
        files.append((name, "".join(cur)))
    return files


def make_prompts(files, n, chars):
    """n prompts: round-robin over files, each time from the next def/class line."""
    anchors = []
    for name, text in files:
        lines = text.splitlines(keepends=True)
        starts, pos = [0], 0
        for ln in lines:
            if pos > 0 and (ln.startswith("def ") or ln.startswith("class ") or
                            ln.startswith("    def ")):
                starts.append(pos)
            pos += len(ln)
        anchors.append((name, text, starts))
    out, i = [], 0
    while len(out) < n:
        name, text, starts = anchors[i % len(anchors)]
        k = (i // len(anchors)) % len(starts)
        s = starts[k]
        end = text.find("\n", s + chars)
        body = text[s:end + 1 if end >= 0 else len(text)]
        if len(body) >= chars // 2:
            out.append(name + body)
        i += 1
        if i > 100 * n:
            sys.exit("spec_floor: the corpus is too small for %d prompts" % n)
    return out


def run_batch(a, prompts_path, c, method):
    # "draft-kN" (or ngram-kN, suffix-kN): that proposer at a fixed k of N,
    # without the planner or the guard, to show what they choose against
    spec, _, fixed = method.partition("-k")
    cmd = [a.bin, "batch", "-m", a.model, "-f", prompts_path, "--concurrency", str(c),
           "--max-seqs", str(max(c, 1)), "-t", str(a.threads), "--spec",
           "off" if spec == "off2" else spec, "--stats"]
    if fixed:
        cmd += ["--spec-fixed-k", "--spec-k", fixed]
    if spec == "draft":
        cmd += ["--draft", a.draft]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("spec_floor: %s failed (exit %d): %s" % (" ".join(cmd), p.returncode,
                                                          p.stderr[-2000:]))
    toks, decode_ms = {}, 0.0
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            toks[r["id"]] = r["tokens"]
            decode_ms += r["decode_ms"]
    stats = None
    for line in p.stderr.splitlines():
        if line.startswith('{"wall_ms"'):
            stats = json.loads(line)
    if stats is None:
        sys.exit("spec_floor: no statistics from %s" % " ".join(cmd))
    stats["decode_ms"] = decode_ms  # the requests' decode phases, summed
    return toks, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--model", default="models/specula-code-target-f16.gguf")
    ap.add_argument("--draft", default="models/specula-code-draft-f16.gguf")
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--methods", default="off2,ngram,suffix,draft")
    ap.add_argument("--gen", type=int, default=96)
    ap.add_argument("--prompt-chars", type=int, default=800)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    concs = [int(x) for x in a.concurrency.split(",")]
    methods = a.methods.split(",")
    files = load_files(os.path.join(a.corpus, "heldout.txt"))
    tmp = tempfile.mkdtemp(prefix="spec_floor.")
    cells, bad, runs = {}, 0, []
    for c in concs:
        n = N_PROMPTS.get(c, 4 * c)
        path = os.path.join(tmp, "c%d.jsonl" % c)
        with open(path, "w") as f:
            for i, p in enumerate(make_prompts(files, n, a.prompt_chars)):
                f.write(json.dumps({"id": "p%d" % i, "prompt": p, "max_tokens": a.gen,
                                    "temperature": 0}) + "\n")
        order = ["off"] + methods
        for r in range(a.rounds):
            k = r % len(order)
            rot = order[k:] + order[:k]
            got = {}
            for rep in range(a.reps):  # interleaved; each method keeps its fastest
                for m in rot:
                    t, st = run_batch(a, path, c, m)
                    print("C=%d round %d rep %d %-6s cpu %8.1f ms  wall %8.1f ms  drafted %d "
                          "accepted %d guard-off steps %d" %
                          (c, r + 1, rep + 1, m, st["cpu_ms"], st["wall_ms"], st["spec_drafted"],
                           st["spec_accepted"], st["guard_off_steps"]), file=sys.stderr, flush=True)
                    runs.append({"c": c, "round": r + 1, "rep": rep + 1, "method": m,
                                 "position": rot.index(m), **st})
                    if m in got:
                        if got[m][0] != t:
                            bad += 1
                            print("spec_floor: %s at C=%d gave different tokens in two runs" % (m, c),
                                  file=sys.stderr)
                        best = dict(got[m][1])
                        best["cpu_ms"] = min(best["cpu_ms"], st["cpu_ms"])
                        best["wall_ms"] = min(best["wall_ms"], st["wall_ms"])
                        best["decode_ms"] = min(best["decode_ms"], st["decode_ms"])
                        got[m] = (t, best)
                    else:
                        got[m] = (t, st)
            off_t, off_s = got["off"]
            for m in methods:
                t, s = got[m]
                diff = [i for i in off_t if off_t[i] != t.get(i)]
                if diff:
                    bad += len(diff)
                    print("spec_floor: MISMATCH C=%d round %d %s: %d requests differ from off "
                          "(first %s)" % (c, r + 1, m, len(diff), diff[0]), file=sys.stderr)
                cell = cells.setdefault((c, m), {"cpu": [], "wall": [], "decode": [],
                                                 "drafted": 0, "accepted": 0})
                cell["decode"].append(off_s["decode_ms"] / s["decode_ms"])
                cell["cpu"].append(off_s["cpu_ms"] / s["cpu_ms"])
                cell["wall"].append(off_s["wall_ms"] / s["wall_ms"])
                cell["drafted"] += s["spec_drafted"]
                cell["accepted"] += s["spec_accepted"]

    def rng(v):
        return "%.2f-%.2fx (median %.2f)" % (min(v), max(v), statistics.median(v))

    print("\n%s, %d threads, %d rounds (best of %d runs each), %d greedy tokens per prompt; "
          "ratio = off / method, per round\n" % (os.path.basename(a.model), a.threads, a.rounds,
                                                  a.reps, a.gen))
    print("| C | prompts | " + " | ".join("%s CPU | %s wall" % (m, m) for m in methods) + " |")
    print("|---|---|" + "---|---|" * len(methods))
    floor, aa_floor = 1e9, 1e9
    for c in concs:
        row = "| %d | %d | " % (c, N_PROMPTS.get(c, 4 * c))
        for m in methods:
            cl = cells[(c, m)]
            row += "%s | %s | " % (rng(cl["cpu"]), rng(cl["wall"]))
            if m == "off2":
                aa_floor = min(aa_floor, min(cl["cpu"]))
            else:
                floor = min(floor, min(cl["cpu"]))
        print(row.rstrip())
    if 1 in concs:  # one request at a time: its decode phase is the decode time alone
        print("\nC=1, decode time only (the requests' decode_ms summed; prefill excluded): " +
              ", ".join("%s %s" % (m, rng(cells[(1, m)]["decode"])) for m in methods))
    print("\ndrafted / accepted tokens over all rounds:")
    for c in concs:
        print("  C=%d: " % c + ", ".join("%s %d/%d" % (m, cells[(c, m)]["drafted"],
                                                      cells[(c, m)]["accepted"]) for m in methods))
    print("\nlowest CPU ratio: %.3f (A/A control off2: %s); outputs identical to off: %s" %
          (floor, "%.3f" % aa_floor if aa_floor < 1e9 else "not run",
           "yes" if bad == 0 else "NO (%d requests differ)" % bad))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "draft": a.draft, "threads": a.threads,
                       "rounds": a.rounds, "reps": a.reps, "runs": runs,
                       "cells": [{"c": c, "method": m, **v} for (c, m), v in cells.items()],
                       "mismatched_requests": bad}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
