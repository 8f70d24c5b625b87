#!/usr/bin/python3
"""The target's own greedy continuations of training-corpus prompts: on-policy
data for distilling the draft.

    tools/train/onpolicy.py --target T.pt|T.gguf --out FILE.pt
        [--n 4096] [--prompt-len 256] [--gen 128] [--batch 64] [--seed 77]
        [--corpus build/corpus] [--tokenizer build/tok/spm.model]
        [--cache-dir build/train] [--threads 2] [--engine bin/specula]

Why: a greedy speculative decoder asks the draft for the target's argmax in
contexts that end in the target's own output, not in human-written code.
Training the draft on human text (or on the target's soft labels over human
text, as draft1/draft2 do) teaches it the data; what acceptance needs is the
target's greedy behaviour on its own continuations: its repetitions, its
habits, where it stops a line.  So: draw --n windows of --prompt-len tokens
at random offsets of the training split (never the held-out files), let the
target continue each greedily for --gen tokens (KV-cached, --batch at a
time), and keep prompt + continuation.  In a continuation every next token
IS the target's argmax, so plain cross-entropy on these rows is hard-label
distillation there (DistillSpec's on-policy data, Zhou et al. 2023), at the
cost of the draft's own forward and backward pass only: no teacher pass.

--engine BIN: the continuations come from `BIN batch` (greedy, 64 at a
time) instead of PyTorch: the C engine is several times faster (PyTorch's
KV-cached loop re-concatenates its cache every token).  The prompt goes in
as text (the window decoded), and a row is that text's SentencePiece
encoding (the engine's own tokenization, tools/train/check_tokenizer.py)
followed by the engine's tokens; a window that does not encode back to
--prompt-len tokens, or a continuation that stopped early, is dropped (and
reported).  The engine reads the prompt after BOS, as it serves it, and
the row leaves BOS out, as train.py's windows do: the target's argmax
differs at a few positions, measured below.

Output: a torch file {ids: int16 (n, prompt_len + gen), prompt_len, gen,
target, seed} that train.py --onpolicy reads.  Deterministic for a given
seed and thread count.  Its rate on a Zen 5 (2 threads): see
tools/train/README.md, "Speed and memory".
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train import load_model, load_tokens  # noqa: E402
from evaluate import greedy  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=77)
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--tokenizer", default="build/tok/spm.model")
    ap.add_argument("--cache-dir", default="build/train")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default=None, help="generate with this specula binary (batch)")
    a = ap.parse_args()
    if a.n < 1 or a.prompt_len < 1 or a.gen < 1 or a.batch < 1:
        sys.exit("onpolicy.py: --n, --prompt-len, --gen and --batch must be positive")
    torch.set_num_threads(a.threads)
    train = load_tokens(a.corpus, "train", a.tokenizer, a.cache_dir)
    L = a.prompt_len + a.gen
    if a.engine:
        return with_engine(a, train, L)
    model = load_model(a.target, ctx=L + 1)
    model.eval()
    gen = torch.Generator().manual_seed(a.seed)
    starts = torch.randint(0, len(train) - a.prompt_len - 1, (a.n,), generator=gen)
    out = torch.empty(a.n, L, dtype=torch.int16)
    t0 = time.time()
    with torch.no_grad():
        for i in range(0, a.n, a.batch):
            s = starts[i:i + a.batch].tolist()
            P = torch.stack([train[j:j + a.prompt_len] for j in s])
            G = greedy(model, P, a.gen)
            out[i:i + len(s)] = torch.cat([P, G], 1).to(torch.int16)
            done = i + len(s)
            print("%d / %d sequences, %.0f generated tokens/s" % (
                done, a.n, done * a.gen / max(1e-9, time.time() - t0)), file=sys.stderr)
    tmp = a.out + ".tmp"
    torch.save(dict(ids=out, prompt_len=a.prompt_len, gen=a.gen, target=a.target, seed=a.seed), tmp)
    os.replace(tmp, a.out)
    print("wrote %s: %d sequences of %d + %d tokens (%.0f s)" % (
        a.out, a.n, a.prompt_len, a.gen, time.time() - t0), file=sys.stderr)


def with_engine(a, train, L):
    import json
    import subprocess
    import tempfile
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    gen = torch.Generator().manual_seed(a.seed)
    # a little more than --n: some rows are dropped (see the docstring)
    m = a.n + a.n // 8
    starts = torch.randint(0, len(train) - a.prompt_len - 1, (m,), generator=gen).tolist()
    texts = [sp.decode(train[j:j + a.prompt_len].tolist()) for j in starts]
    tmp = tempfile.mkdtemp(prefix="onpolicy.")
    path = os.path.join(tmp, "prompts.jsonl")
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "prompt": t, "max_tokens": a.gen, "temperature": 0}) + "\n")
    t0 = time.time()
    p = subprocess.run([a.engine, "batch", "-m", a.target, "-f", path, "--concurrency", "64",
                        "--max-seqs", "64", "-t", str(a.threads)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("onpolicy.py: %s batch failed: %s" % (a.engine, p.stderr[-2000:]))
    rows, short = [], 0
    for line in p.stdout.splitlines():
        r = json.loads(line)
        ids = sp.encode(texts[int(r["id"])])
        if len(ids) != a.prompt_len or len(r["tokens"]) < a.gen:
            short += 1
            continue
        rows.append(ids + r["tokens"][:a.gen])
    if len(rows) < a.n:
        sys.exit("onpolicy.py: only %d usable rows of %d (%d dropped)" % (len(rows), m, short))
    out = torch.tensor(rows[:a.n], dtype=torch.int16)
    tmpf = a.out + ".tmp"
    torch.save(dict(ids=out, prompt_len=a.prompt_len, gen=a.gen, target=a.target, seed=a.seed,
                    engine=a.engine), tmpf)
    os.replace(tmpf, a.out)
    print("wrote %s: %d sequences of %d + %d tokens from %s (%d dropped, %.0f s, %.0f generated "
          "tokens/s)" % (a.out, a.n, a.prompt_len, a.gen, a.engine, short, time.time() - t0,
                         len(rows) * a.gen / max(1e-9, time.time() - t0)), file=sys.stderr)


if __name__ == "__main__":
    main()
