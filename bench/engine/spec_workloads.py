#!/usr/bin/env python3
"""bench/engine/spec_workloads.py: the default speculation (auto) against
--spec off and against each proposer forced by hand, on three workloads, at
concurrency 1, 4 and 16 (BENCHMARKS.md, "Auto, the default").

Workloads, built from the held-out files of build/corpus/heldout.txt
(tools/train/corpus.py), every prompt rendered by `specula template` with the
model's own chat template where it is a conversation:

  code     a completion: a file's marker line and ~PROMPT characters of the
           file up to a def/class line (the line included); --gen tokens.
  chat     a conversation: a system message, the user asking for a function,
           the assistant's earlier answer (the function's text from the file),
           and the user asking for it again with type hints; --gen tokens.
  summary  a long document: the user sends ~DOC characters of a held-out file
           and asks for a summary of it; --gen tokens.

For each concurrency C and workload, `specula batch --concurrency C
--max-seqs C --stats` runs the same greedy requests with each method, the
methods' order rotated every round and each cell's fastest of --reps kept.
"auto" runs with no --spec flag at all (the default). Every method's tokens
must equal off's, request by request; a difference is reported and the exit
status is 1.

Reported per cell: tokens/s (generated tokens / the batch's wall time, first
submit to last answer), at C = 1 also decode tokens/s (generated tokens / the
requests' summed decode time: without prefill and start-up), the ratio to off
and, for auto, to the best proposer forced by hand; drafted / accepted by each
proposer (the per-request "by" figures summed), and for auto the tokens it
drafted with proposers it then set aside (exploration: a proposer's drafted
tokens in requests where it drafted less than a quarter of the request's
total).

usage: bench/engine/spec_workloads.py [--bin bin/specula] [--model M]
         [--draft D] [--corpus build/corpus] [--concurrency 1,4,16]
         [--workloads code,chat,summary] [--methods off,ngram,suffix,draft,auto]
         [--rounds 2] [--reps 1] [--gen 128] [--threads 2] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_floor import load_files  # noqa: E402  (the held-out files, shared with the floor bench)

N_PROMPTS = {1: 8, 4: 16, 16: 32}
PROPOSERS = ("ngram", "suffix", "draft")


def ntokens(a, text):
    p = subprocess.run([a.bin, "tokenize", "-m", a.model, "-f", "-"], input=text,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("spec_workloads: tokenize failed: " + p.stderr[-500:])
    return p.stdout.count(",") + 1


def render(a, messages):
    req = json.dumps({"messages": messages, "add_generation_prompt": True})
    p = subprocess.run([a.bin, "template", "-m", a.model, "--input", "-", "--now", "2026-01-01"],
                       input=req, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("spec_workloads: template failed: " + p.stderr[-500:])
    return p.stdout


def anchors(body):
    """Offsets of the def/class lines of a file (top level or in a class)."""
    out, off = [], 0
    for line in body.splitlines(keepends=True):
        s = line.lstrip()
        if s.startswith(("def ", "class ", "async def ")):
            out.append(off)
        off += len(line)
    return out


def cut_to_line(text, n):
    """text[:~n] ending at a line boundary (at least one line)."""
    if len(text) <= n:
        return text
    nl = text.rfind("\n", 0, n)
    return text[:nl + 1] if nl > 0 else text[:text.find("\n") + 1 or len(text)]


def snippet_at(body, off, chars):
    """The def/class at off and what follows, ~chars, cut at a line."""
    return cut_to_line(body[off:], chars)


def build(a, workload, n):
    files = load_files(a.corpus)
    spots = [(m, b, o) for (m, b) in files for o in anchors(b) if o > 200]
    if not spots:
        sys.exit("spec_workloads: no def/class lines in the held-out files")
    step = max(1, len(spots) // (n * 3 + 1))
    out, i = [], 0
    budget = a.n_ctx - a.gen
    while len(out) < n and i < len(spots) * 4:
        marker, body, off = spots[(i * step + i // len(spots)) % len(spots)]
        i += 1
        if workload == "code":
            line_end = body.find("\n", off) + 1
            start = max(0, off - a.prompt_chars)
            start = body.rfind("\n", 0, start) + 1 if start else 0
            prompt = marker + body[start:line_end]
        elif workload == "chat":
            snip = snippet_at(body, off, a.snippet_chars)
            name = snip.lstrip().split("(")[0].split(":")[0].split()[-1]
            mod = marker.split("file:")[-1].strip(" =\n")
            prompt = render(a, [
                {"role": "system", "content": "A Python coding assistant. Answer with code."},
                {"role": "user", "content": "Write %s, as %s does." % (name, mod)},
                {"role": "assistant", "content": snip},
                {"role": "user", "content": "Write %s again, the same code with type hints "
                                            "on its arguments." % name}])
        else:
            doc = cut_to_line(body[off:], a.doc_chars)
            prompt = render(a, [
                {"role": "user", "content": "Summarize this document in a few lines.\n\n" + doc}])
        if ntokens(a, prompt) > budget:
            continue
        out.append({"id": "%s-%d" % (workload, len(out)), "prompt": prompt,
                    "max_tokens": a.gen, "temperature": 0})
    if len(out) < n:
        sys.exit("spec_workloads: only %d %s prompts fit %d tokens" % (len(out), workload, budget))
    return out


def run_batch(a, path, c, method):
    cmd = [a.bin, "batch", "-m", a.model, "-f", path, "--concurrency", str(c),
           "--max-seqs", str(c), "-t", str(a.threads), "--stats"]
    if method != "auto":  # auto: no --spec flag at all, the default
        cmd += ["--spec", method]
    if method == "draft":
        cmd += ["--draft", a.draft]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("spec_workloads: %s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    toks, dec, by, explore = {}, 0.0, {}, 0
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        toks[r["id"]] = r["tokens"]
        dec += r["decode_ms"]
        rb = r["spec"].get("by", {})
        total = sum(v["drafted"] for v in rb.values())
        for k, v in rb.items():
            d = by.setdefault(k, [0, 0])
            d[0] += v["drafted"]
            d[1] += v["accepted"]
            if v["drafted"] * 4 < total:
                explore += v["drafted"] - v["accepted"]
    st = next((json.loads(l) for l in p.stderr.splitlines() if l.startswith('{"wall_ms"')), None)
    if st is None:
        sys.exit("spec_workloads: no statistics from " + " ".join(cmd))
    gen = sum(len(t) for t in toks.values())
    return toks, {"tps": gen * 1000.0 / st["wall_ms"], "dtps": gen * 1000.0 / dec if dec else 0,
                  "by": by, "explore_rejected": explore}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin/specula")
    ap.add_argument("--model", default="models/specula-code-target-f16.gguf")
    ap.add_argument("--draft", default="models/specula-code-draft-f16.gguf")
    ap.add_argument("--corpus", default="build/corpus/heldout.txt")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--workloads", default="code,chat,summary")
    ap.add_argument("--methods", default="off,ngram,suffix,draft,auto")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=512, help="the model's context (the bundled pair: 512)")
    ap.add_argument("--prompt-chars", type=int, default=1000)
    ap.add_argument("--snippet-chars", type=int, default=700)
    ap.add_argument("--doc-chars", type=int, default=1100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.path.isdir(a.corpus):
        a.corpus = os.path.join(a.corpus, "heldout.txt")
    methods = a.methods.split(",")
    if methods[0] != "off":
        sys.exit("spec_workloads: --methods must start with off (the reference)")
    results, bad = [], 0
    tmp = tempfile.mkdtemp(prefix="spec_workloads.")
    for c in [int(x) for x in a.concurrency.split(",")]:
        for w in a.workloads.split(","):
            reqs = build(a, w, N_PROMPTS.get(c, 2 * c))
            path = os.path.join(tmp, "%s-%d.jsonl" % (w, c))
            with open(path, "w") as f:
                for r in reqs:
                    f.write(json.dumps(r) + "\n")
            best, ref = {}, None
            for rnd in range(a.rounds):
                order = methods[rnd % len(methods):] + methods[:rnd % len(methods)]
                for m in order:
                    for _ in range(a.reps):
                        toks, s = run_batch(a, path, c, m)
                        if m == "off" and ref is None:
                            ref = toks
                        elif ref is not None and m != "off":
                            diff = [k for k in ref if ref[k] != toks.get(k)]
                            if diff:
                                print("MISMATCH %s C=%d %s: %d requests differ from off (%s)"
                                      % (w, c, m, len(diff), diff[0]), file=sys.stderr)
                                bad += 1
                        if m not in best or s["tps"] > best[m]["tps"]:
                            best[m] = s
            off = best["off"]
            hand = max((best[m]["tps"] for m in PROPOSERS if m in best), default=0)
            dhand = max((best[m]["dtps"] for m in PROPOSERS if m in best), default=0)
            for m in methods:
                s = best[m]
                row = {"workload": w, "c": c, "method": m, "requests": len(reqs),
                       "tps": round(s["tps"], 1), "ratio": round(s["tps"] / off["tps"], 3),
                       "by": s["by"], "explore_rejected": s["explore_rejected"]}
                if c == 1:
                    row["decode_tps"] = round(s["dtps"], 1)
                    row["decode_ratio"] = round(s["dtps"] / off["dtps"], 3)
                if m == "auto" and hand:
                    row["of_best_hand"] = round(s["tps"] / hand, 3)
                    if c == 1:
                        row["decode_of_best_hand"] = round(s["dtps"] / dhand, 3)
                results.append(row)
                print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    print("%d mismatches" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
