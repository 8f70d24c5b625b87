#!/usr/bin/python3
"""Checks of the training pipeline against the engine (run by tests/reference/test_train.sh).

    tools/train/roundtrip.py [--bin bin/specula] [--vocab V.gguf] [--models models]
        [--src /usr/lib/python3.11] [--only corpus,export,shipped]

corpus   corpus.py into a temp dir: the held-out module list is the documented
         one, no held-out file is in the train list, no two kept files are
         byte-identical.
export   seeded random train.Llama models (GQA, tied and untied, init scaled
         up so the distributions are peaked), exported as F32 GGUF with the
         tokenizer keys of a llama-tokenizer GGUF (--vocab, else the first of
         models/*.gguf, build/tok/vocab.gguf,
         $SPECULA_REF_DIR/vocab/ggml-vocab-llama-spm.gguf; the model's vocab
         size is that file's token count), read back with export.load_gguf
         (weights must be bit-identical), then run by the engine (--kv f32
         --temp 0 --logprobs 8 --json) on a few prompts: every reported top
         logprob must match PyTorch's float64 log-softmax within 1e-3 and the
         greedy ids must agree.
shipped  models/*-target*.gguf and *-draft*.gguf (F16; missing ones are a failure): the same
         comparison with tolerance 2e-2 (the engine rounds activations to f16
         for F16 weights, as llama.cpp does); the greedy id must agree where
         PyTorch's margin over the runner-up exceeds the tolerance.
train    train.py on random tokens (tiny preset, ctx 32, 6 steps): a run cut
         at step 3 and continued with --resume logs the straight run's losses
         exactly, --accum 2 agrees within 1e-3; --teacher distillation runs,
         and its KL term is 0 for a model against itself.
Prints one "ok"/"FAIL"/"SKIP" line per check and "RESULT <passed> <failed>
<skipped>" (tests/run.sh counts a skip as skipped, never as passed, and CI
fails on any skip). The corpus check is skipped when the Python source tree
(--src) is absent; the shipped models are part of the repository, so their
absence is a failure.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export  # noqa: E402
import gguf  # noqa: E402
from train import Llama  # noqa: E402

HELDOUT = "_threading_local cmd collections json logging modulefinder nturl2path operator queue struct".split()
PROMPTS = ["def add(a, b):\n    return", "import os\nimport sys\n\n", "class Queue:\n    \"\"\""]
RESULTS = [0, 0, 0]  # passed, failed, skipped


def report(ok, name, msg):
    print("%s %s: %s" % ("ok  " if ok else "FAIL", name, msg), flush=True)
    RESULTS[0 if ok else 1] += 1


def skip(name, why):
    print("SKIP %s: %s" % (name, why), flush=True)
    RESULTS[2] += 1


def check_corpus(src):
    if not os.path.isdir(src):
        return skip("corpus", "%s not found (pass --src)" % src)
    sys.path.insert(0, HERE)
    import corpus
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, os.path.join(HERE, "corpus.py"), "--src", src, "--out", tmp],
                           capture_output=True, text=True)
        if r.returncode:
            return report(False, "corpus", "corpus.py failed: " + r.stderr[-500:])
        rd = lambda f: open(os.path.join(tmp, f), encoding="utf-8").read().split()  # noqa: E731
        mods, train, held = rd("heldout_modules.txt"), rd("files_train.txt"), rd("files_heldout.txt")
    errs = []
    if mods != HELDOUT:
        errs.append("held-out modules %s, documented %s" % (" ".join(mods), " ".join(HELDOUT)))
    if set(train) & set(held):
        errs.append("files in both splits: %s" % sorted(set(train) & set(held))[:5])
    bad = [f for f in train if corpus.module_of(f) in HELDOUT]
    if bad:
        errs.append("train files of held-out modules: %s" % bad[:5])
    bad = [f for f in held if corpus.module_of(f) not in HELDOUT]
    if bad:
        errs.append("held-out files of other modules: %s" % bad[:5])
    seen = {}
    for f in train + held:
        h = hashlib.sha256(open(os.path.join(src, f), "rb").read()).digest()
        if h in seen:
            errs.append("%s and %s are byte-identical" % (seen[h], f))
        seen[h] = f
    report(not errs, "corpus", "; ".join(errs[:5]) if errs else "%d train + %d held-out files, "
           "held-out modules as documented, no overlap, no duplicates" % (len(train), len(held)))


def run_engine(binary, model, prompt, n, tmp):
    r = subprocess.run([binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                        "--ignore-eos", "--json", "--logprobs", "8", "--kv", "f32", "-t", "1"],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("engine failed (%d): %s" % (r.returncode, r.stderr.strip()[-500:]))
    return json.loads(r.stdout)


@torch.no_grad()
def compare(model, run, tol, strict_greedy):
    """Largest |logprob error| over the run's steps and a list of problems."""
    seq = run["prompt_tokens"] + run["tokens"]
    m = model.double()
    lp = torch.log_softmax(m(torch.tensor([seq]))[0], -1)
    n_p, worst, bad = len(run["prompt_tokens"]), 0.0, []
    for s, st in enumerate(run["steps"]):
        row = lp[n_p - 1 + s]
        for tid, got in st["top"]:
            e = abs(row[tid].item() - got)
            worst = max(worst, e)
            if e > tol:
                bad.append("step %d token %d: engine %.6f vs torch %.6f" % (s, tid, got, row[tid].item()))
        top2 = torch.topk(row, 2)
        margin = (top2.values[0] - top2.values[1]).item()
        if st["id"] != top2.indices[0].item() and (strict_greedy or margin > tol):
            bad.append("step %d: engine greedy %d vs torch %d (margin %.2e)" % (
                s, st["id"], top2.indices[0].item(), margin))
    return worst, bad


def pick_vocab(arg, models_dir):
    if arg:
        return arg
    for f in sorted(glob.glob(os.path.join(models_dir, "*.gguf"))):
        try:
            if gguf.read_kv(f).get("tokenizer.ggml.model") == "llama":
                return f
        except Exception:  # noqa: BLE001
            pass
    ref = os.environ.get("SPECULA_REF_DIR", os.path.join(ROOT, "..", "shared", "reference"))
    for f in (os.path.join(ROOT, "build", "tok", "vocab.gguf"),
              os.path.join(ref, "vocab", "ggml-vocab-llama-spm.gguf")):
        if os.path.exists(f):
            return f
    return None


def check_export(binary, vocab):
    if not vocab:
        return report(False, "export", "no llama-tokenizer GGUF found for the tokenizer keys")
    n_vocab = len(gguf.read_kv(vocab)["tokenizer.ggml.tokens"])
    with tempfile.TemporaryDirectory() as tmp:
        for tied, seed in ((True, 11), (False, 12)):
            name = "export-%s-f32" % ("tied" if tied else "untied")
            c = dict(dim=64, n_layer=2, n_head=4, n_head_kv=2, ffn=176, vocab=n_vocab, ctx=128,
                     eps=1e-5, rope_base=10000.0, tied=tied)
            torch.manual_seed(seed)
            model = Llama(c)
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if p.dim() == 1:  # norms: away from 1 so that a dropped norm shows
                        p.copy_(1 + 0.2 * torch.randn_like(p))
                    else:
                        p.normal_(0.0, 0.5 if n.startswith(("tok_emb", "head")) else 0.15)
            path = os.path.join(tmp, name + ".gguf")
            try:
                export.export(model, c, path, vocab, "f32", name, "round-trip test model")
                back = export.load_gguf(path)
                sd0, sd1 = model.state_dict(), back.state_dict()
                diff = [k for k in sd0 if not torch.equal(sd0[k], sd1[k])]
                if diff or back.c != c:
                    report(False, name, "load_gguf differs: %s %s" % (diff[:3], back.c))
                    continue
                worst, bad, peak = 0.0, [], []
                for p in PROMPTS:
                    run = run_engine(binary, path, p, 8, tmp)
                    w, b = compare(model, run, 1e-3, True)
                    worst, bad = max(worst, w), bad + b
                    peak += [st["top"][0][1] for st in run["steps"]]
                report(not bad, name, "%s max |logprob error| %.2e over %d prompts (top-1 logprob "
                       "%.2f..%.2f)" % ("; ".join(bad[:4]) + ";" if bad else "", worst, len(PROMPTS),
                                        min(peak), max(peak)))
            except (RuntimeError, SystemExit, Exception) as e:  # noqa: BLE001
                report(False, name, "%s: %s" % (type(e).__name__, e))


def check_shipped(binary, models_dir):
    files = sorted(set(glob.glob(os.path.join(models_dir, "*-target*.gguf")) +
                       glob.glob(os.path.join(models_dir, "*-draft*.gguf"))))
    if not files:
        return report(False, "shipped", "no %s/*-target*.gguf or *-draft*.gguf (the repository ships them)"
                      % models_dir)
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            name = os.path.basename(f)
            try:
                model = export.load_gguf(f)
                worst, bad = 0.0, []
                for p in PROMPTS:
                    run = run_engine(binary, f, p, 8, tmp)
                    w, b = compare(model, run, 2e-2, False)
                    worst, bad = max(worst, w), bad + b
                report(not bad, name, "%s max |logprob error| %.2e over %d prompts" % (
                    "; ".join(bad[:4]) + ";" if bad else "", worst, len(PROMPTS)))
            except (RuntimeError, SystemExit, Exception) as e:  # noqa: BLE001
                report(False, name, "%s: %s" % (type(e).__name__, e))


def check_train(tmp):
    """train.py's long-run machinery on random tokens (tiny preset, a few
    seconds): a run cut at step 3 and resumed from its checkpoint logs the
    same losses as one straight run; --accum 2 the same to float rounding;
    --teacher distillation runs and its KL term is 0 for a model against itself;
    a run cut at step 3 whose ckpt.pt is gone continues from its --carry file
    (same rows up to the cut, the learning rate re-warmed after it) and a
    finished stage comes back from its carry file as model.pt."""
    import csv
    import train
    g = torch.Generator().manual_seed(7)
    for split, n in (("train", 20000), ("heldout", 3000)):
        torch.save(torch.randint(0, 4096, (n,), generator=g, dtype=torch.int16),
                   os.path.join(tmp, split + ".tok.pt"))
    base = [sys.executable, os.path.join(HERE, "train.py"), "--preset", "tiny", "--ctx", "32",
            "--batch", "4", "--steps", "6", "--warmup", "2", "--log-every", "1", "--eval-every", "3",
            "--threads", "1", "--cache-dir", tmp, "--tokenizer", os.path.join(tmp, "none.model")]

    def run(name, *extra):
        out = os.path.join(tmp, name)
        r = subprocess.run(base + ["--out", out] + list(extra), capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("train.py %s: %s" % (" ".join(extra), r.stderr[-300:]))
        with open(os.path.join(out, "loss.csv"), newline="") as fh:
            return [(r[0], r[2], r[3]) for r in list(csv.reader(fh))[1:]]
    before = RESULTS[0] + RESULTS[1]
    try:
        full = run("full")
        run("cut", "--stop-step", "3")
        cut = run("cut", "--resume")
        acc = run("acc", "--accum", "2")
        close = all(abs(float(x[1]) - float(y[1])) < 1e-3 for x, y in zip(full, acc))
        report(cut == full and len(full) == 6 and close, "train_resume",
               "cut at 3 + --resume %s the straight run's 6 losses; --accum 2 %s" % (
                   "equals" if cut == full else "differs from (%s vs %s)" % (cut, full),
                   "agrees" if close else "differs: %s vs %s" % (acc, full)))
        carry = os.path.join(tmp, "carry.pt")
        run("carry", "--stop-step", "3", "--carry", carry)
        os.remove(os.path.join(tmp, "carry", "ckpt.pt"))
        cr = run("carry", "--resume", "--carry", carry, "--carry-warmup", "2")
        with open(os.path.join(tmp, "carry", "loss.csv"), newline="") as fh:
            lr_c = [float(r[4]) for r in list(csv.reader(fh))[1:]]
        with open(os.path.join(tmp, "full", "loss.csv"), newline="") as fh:
            lr_f = [float(r[4]) for r in list(csv.reader(fh))[1:]]
        back = run("carry_done", "--resume", "--carry", carry)
        m_back = torch.load(os.path.join(tmp, "carry_done", "model.pt"))["state_dict"]
        m_run = torch.load(os.path.join(tmp, "carry", "model.pt"))["state_dict"]
        # matrices come back rounded to f16; norms (1-D) exactly, as the GGUF keeps them in f32
        same_w = all(torch.equal(m_back[k], m_run[k].half().float() if m_run[k].dim() > 1 else m_run[k])
                     for k in m_run)
        report(len(cr) == 6 and cr[:3] == full[:3] and all(math.isfinite(float(r[1])) for r in cr)
               and abs(lr_c[3] / (lr_f[3] / 2) - 1) < 1e-2 and lr_c[4] == lr_f[4] and back == cr and same_w,
               "train_carry", "cut at 3, ckpt.pt removed, resumed from the carry file: %d rows, "
               "first 3 %s, lr at step 4 %.3g (straight run %.3g), finished stage back as "
               "model.pt %s" % (len(cr), "equal" if cr[:3] == full[:3] else "differ",
                                lr_c[3], lr_f[3], "with f16 matrices and f32 norms" if same_w else "DIFFERENT"))
        kd = run("kd", "--teacher", os.path.join(tmp, "full", "model.pt"), "--kd-alpha", "0.5",
                 "--kd-temp", "2")
        m = train.load_model(os.path.join(tmp, "full", "model.pt"))
        with torch.no_grad():
            lg = m(torch.randint(0, 4096, (2, 16), generator=g))
        self_kl = train.kd_loss(lg, lg, 2.0).item()
        other_kl = train.kd_loss(lg, lg.flip(-1), 2.0).item()
        report(len(kd) == 6 and all(math.isfinite(float(r[1])) for r in kd) and abs(self_kl) < 1e-6
               and other_kl > 0.01, "train_distill",
               "6 distilled steps, losses %s; KL(self) %.1e, KL(other) %.3f" % (
                   [r[1] for r in kd], self_kl, other_kl))
    except (RuntimeError, OSError, ValueError) as e:
        # one line for each check not yet reported, so the count stays fixed
        for name in ("train_resume", "train_carry", "train_distill")[RESULTS[0] + RESULTS[1] - before:]:
            report(False, name, "%s: %s" % (type(e).__name__, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("SPECULA_BIN", "bin/specula"))
    ap.add_argument("--vocab", default=None)
    ap.add_argument("--models", default=os.path.join(ROOT, "models"))
    ap.add_argument("--src", default="/usr/lib/python3.11")
    ap.add_argument("--only", default="corpus,export,shipped,train")
    a = ap.parse_args()
    torch.set_num_threads(1)
    only = a.only.split(",")
    if "corpus" in only:
        check_corpus(a.src)
    if "export" in only:
        check_export(a.bin, pick_vocab(a.vocab, a.models))
    if "shipped" in only:
        check_shipped(a.bin, a.models)
    if "train" in only:
        with tempfile.TemporaryDirectory() as tmp:
            check_train(tmp)
    print("RESULT %d %d %d" % tuple(RESULTS))
    sys.exit(1 if RESULTS[1] else 0)


if __name__ == "__main__":
    main()
