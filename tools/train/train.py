#!/usr/bin/python3
"""Train a small llama-architecture model on the tokenized corpus (CPU, PyTorch).

    tools/train/train.py --preset target|draft|tiny [--steps N] [--out DIR]
        [--threads 2] [--seed 1234] [--ctx 256] [--batch 16] [--lr 3e-3]

Architecture = llama.cpp's LLM_ARCH_LLAMA, so the weights export to GGUF
as they are:
  token embedding -> n_layer x [x += attn(rmsnorm(x)); x += ffn(rmsnorm(x))]
  -> rmsnorm -> output head (tied to the embedding unless --untied).
  attn: q/k/v/o linear, no bias; GQA when n_head_kv < n_head; RoPE in
    llama.cpp's NORM layout (rope type 0): pairs of ADJACENT dims (2i, 2i+1)
    rotate by pos * base^(-2i/head_dim).  Trained in this layout, the Q/K
    weights need no permutation on export (HF checkpoints use the NEOX/half
    split and are permuted by convert_hf_to_gguf; we never are).
  ffn: SwiGLU, down(silu(gate(x)) * up(x)).
  rmsnorm: x * rsqrt(mean(x^2) + eps) * w, eps 1e-5.
Deterministic for a given seed and thread count: torch.manual_seed; batches
are random windows drawn from a seeded generator.  Logs step, tokens seen,
train loss, lr and seconds to OUT/loss.csv; evaluates held-out loss every
--eval-every steps; saves OUT/model.pt (state dict + config).

Long runs:
  --accum N      each step's --batch windows run as N micro-batches whose
                 gradients add up (the same windows and, up to float order,
                 the same step as --accum 1): a 2048-token batch fits in memory.
  --resume       continue from OUT/ckpt.pt, the latest checkpoint (weights,
                 AdamW state, step, both RNG states: the batch generator's
                 state is the data position), written atomically every
                 --save-every steps and every --save-every-seconds (300);
                 loss.csv is cut back to that step and appended to.  A run
                 that already finished exits at once, so a script can re-run
                 every stage after a cut.
  --teacher P    distillation: P is a train.py checkpoint (.pt) or a GGUF
                 (export.load_gguf); loss = (1 - a) * CE(data) + a * t^2 *
                 KL(teacher_t || student_t), softmax at temperature t
                 (--kd-temp), a = --kd-alpha.  The teacher runs in eval mode
                 under no_grad.
  --init P       (phase 2) may change --ctx: only the RoPE table depends on it.
  --onpolicy F   a file of the target's own greedy continuations
                 (tools/train/onpolicy.py); --onpolicy-frac of each batch's
                 rows are drawn from it instead of the corpus: random
                 sequences packed end to end into --ctx + 1 tokens, scored
                 with the same loss (their continuation tokens are the
                 target's argmax, so CE there is hard-label distillation).
"""
import argparse
import csv
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    # ~11.2M parameters (tied embedding 1.31M + 8 x 1.24M)
    "target": dict(dim=320, n_layer=8, n_head=5, n_head_kv=5, ffn=864),
    # ~1.33M parameters (<= 1/8 of target)
    "draft": dict(dim=128, n_layer=4, n_head=2, n_head_kv=2, ffn=352),
    "tiny": dict(dim=64, n_layer=2, n_head=2, n_head_kv=1, ffn=176),
}


LOSS_HEADER = ["step", "tokens", "train_loss", "heldout_loss", "lr", "seconds"]  # loss.csv


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, ctx, base):
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]  # (T, hd/2)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    """x: (B, H, T, hd); NORM layout: rotate (x[2i], x[2i+1])."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["dim"], c["dim"] // c["n_head"]
        self.nh, self.nkv, self.hd = c["n_head"], c["n_head_kv"], hd
        self.attn_norm = RMSNorm(d, c["eps"])
        self.wq = nn.Linear(d, self.nh * hd, bias=False)
        self.wk = nn.Linear(d, self.nkv * hd, bias=False)
        self.wv = nn.Linear(d, self.nkv * hd, bias=False)
        self.wo = nn.Linear(self.nh * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, c["eps"])
        self.w_gate = nn.Linear(d, c["ffn"], bias=False)
        self.w_up = nn.Linear(d, c["ffn"], bias=False)
        self.w_down = nn.Linear(c["ffn"], d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.nkv != self.nh:
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
        # the scale on q (T x hd) rather than on the scores (T x T), and the
        # causal mask filled in place: at T = 2048 every pass over the scores
        # costs as much as a small matmul
        att = (q * (1.0 / math.sqrt(self.hd))) @ k.transpose(-2, -1)
        y = att.masked_fill_(mask, float("-inf")).softmax(-1) @ v
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.norm = RMSNorm(c["dim"], c["eps"])
        self.head = None if c["tied"] else nn.Linear(c["dim"], c["vocab"], bias=False)
        cos, sin = rope_tables(c["dim"] // c["n_head"], c["ctx"], c["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for n, p in self.named_parameters():  # GPT-2 style scaled residual init
            if n.endswith("wo.weight") or n.endswith("w_down.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        T = idx.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # True: a future position
        x = self.tok_emb(idx)
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T], mask)
        x = self.norm(x)
        return x @ self.tok_emb.weight.t() if self.head is None else self.head(x)


def load_tokens(corpus, split, model_file, cache_dir):
    """Token ids of corpus/SPLIT.txt (no BOS), cached as int16 (vocab < 32768).
    A cache without its tokenizer model is used as it is (tests write one)."""
    cache = os.path.join(cache_dir, split + ".tok.pt")
    if os.path.exists(cache) and (not os.path.exists(model_file) or
                                  os.path.getmtime(cache) >= os.path.getmtime(model_file)):
        return torch.load(cache).long()
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_file)
    with open(os.path.join(corpus, split + ".txt"), encoding="utf-8", newline="") as fh:
        ids = sp.encode(fh.read())
    t = torch.tensor(ids, dtype=torch.int16)
    os.makedirs(cache_dir, exist_ok=True)
    torch.save(t, cache)
    return t.long()


def batch(data, B, T, gen, onpolicy=None, frac=0.0):
    """B windows of T + 1 tokens as (inputs, next tokens).  With onpolicy
    (an (n, L) tensor of sequences), round(B * frac) of the rows are random
    sequences from it packed end to end and cut to T + 1 (unrelated
    sequences share a window as the corpus's files do)."""
    n_on = round(B * frac) if onpolicy is not None else 0
    ix = torch.randint(0, len(data) - T - 1, (B - n_on,), generator=gen)
    rows = [data[i:i + T + 1] for i in ix.tolist()]
    if n_on:
        per = -(-(T + 1) // onpolicy.shape[1])
        pick = torch.randint(0, onpolicy.shape[0], (n_on, per), generator=gen)
        rows += [onpolicy[r].reshape(-1)[:T + 1] for r in pick]
    x = torch.stack(rows)
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, data, T, n_windows=32):
    """Mean loss over n_windows evenly spaced, non-overlapping windows, run a
    few at a time (at T = 2048 the attention scores of all 32 at once would
    take gigabytes)."""
    model.eval()
    step = max(T + 1, (len(data) - T - 1) // n_windows)
    starts = list(range(0, len(data) - T - 1, step))[:n_windows]
    per = max(1, 8192 // T)
    total = 0.0
    for i in range(0, len(starts), per):
        x = torch.stack([data[s:s + T + 1] for s in starts[i:i + per]])
        logits = model(x[:, :-1])
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                 reduction="sum").item()
    model.train()
    return total / (len(starts) * T)


def same_shape(a, b):
    """Configs that differ at most in ctx (the RoPE table length, not a weight)."""
    return {k: v for k, v in a.items() if k != "ctx"} == {k: v for k, v in b.items() if k != "ctx"}


def load_model(path, ctx=None):
    """A Llama from a train.py checkpoint (.pt: model.pt or ckpt.pt) or a GGUF
    (export.load_gguf), with RoPE tables for ctx positions (default: its own)."""
    if path.endswith(".gguf"):
        from export import load_gguf  # export imports this module: import late
        return load_gguf(path, ctx=ctx)
    ck = torch.load(path)
    c = dict(ck["config"], ctx=ctx or ck["config"]["ctx"])
    m = Llama(c)
    m.load_state_dict(ck["state_dict"] if "state_dict" in ck else ck["model"])
    return m


def kd_loss(student_logits, teacher_logits, temp):
    """t^2 * KL(softmax(teacher/t) || softmax(student/t)), mean over positions
    (the t^2 keeps the gradient's scale independent of t, as in Hinton et al.)."""
    V = student_logits.shape[-1]
    s = F.log_softmax(student_logits.reshape(-1, V) / temp, -1)
    t = F.log_softmax(teacher_logits.reshape(-1, V) / temp, -1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean") * temp * temp


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=PRESETS, default="tiny")
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--tokenizer", default="build/tok/spm.model")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cache-dir", default="build/train",
                    help="where the token caches SPLIT.tok.pt live")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--save-every", type=int, default=100,
                    help="checkpoint OUT/model.pt every N steps (a killed run keeps its last one)")
    ap.add_argument("--init", default=None,
                    help="start from this checkpoint's weights (a fresh optimizer): a second "
                         "phase, e.g. a learning-rate cooldown after a run cut short")
    ap.add_argument("--step-offset", type=int, default=0,
                    help="steps done before (--init): logged steps and tokens continue from there")
    ap.add_argument("--stop-step", type=int, default=0,
                    help="end after this step although the schedule spans --steps (replays "
                         "a run that --max-seconds cut short, deterministically)")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="safety stop: end early (and say so in config.json) past this wall time")
    ap.add_argument("--accum", type=int, default=1,
                    help="split each step's --batch windows into N micro-batches (gradient "
                         "accumulation: same step, less memory)")
    ap.add_argument("--resume", action="store_true",
                    help="continue from OUT/ckpt.pt when it exists (else start fresh)")
    ap.add_argument("--save-every-seconds", type=float, default=300,
                    help="also checkpoint OUT/ckpt.pt this often (0: only every --save-every steps)")
    ap.add_argument("--carry", default=None,
                    help="also keep a small carry-over file here (f16 weights, data position, "
                         "loss rows: ~2 bytes a parameter, meant to be committed) at every "
                         "checkpoint; --resume without OUT/ckpt.pt continues from it with a fresh "
                         "optimizer, re-warmed over --carry-warmup steps")
    ap.add_argument("--carry-warmup", type=int, default=20,
                    help="steps over which the learning rate ramps back up after a carry resume")
    ap.add_argument("--teacher", default=None,
                    help="distill from this model (.pt checkpoint or .gguf)")
    ap.add_argument("--kd-alpha", type=float, default=0.5,
                    help="weight of the distillation term (1 - it weighs the data loss)")
    ap.add_argument("--kd-temp", type=float, default=1.0, help="softmax temperature for distillation")
    ap.add_argument("--onpolicy", default=None,
                    help="the target's greedy continuations (tools/train/onpolicy.py) mixed into each batch")
    ap.add_argument("--onpolicy-frac", type=float, default=0.5,
                    help="the share of each batch's rows drawn from --onpolicy")
    a = ap.parse_args()
    if a.batch % a.accum:
        sys.exit("--batch %d is not a multiple of --accum %d" % (a.batch, a.accum))
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = a.out or os.path.join("build/train", a.preset)
    os.makedirs(out, exist_ok=True)
    ckpt_path = os.path.join(out, "ckpt.pt")
    ck = torch.load(ckpt_path) if a.resume and os.path.exists(ckpt_path) else None
    carried = None
    if not ck and a.resume and a.carry and os.path.exists(a.carry):
        carried = torch.load(a.carry)
        ck = dict(carried, model={k: v.float() for k, v in carried["model"].items()})
    if ck and ck["step"] >= min(a.steps, a.stop_step or a.steps):
        if carried and not os.path.exists(os.path.join(out, "model.pt")):
            # a finished stage brought back from its carry file: the next
            # stage's --init and --teacher read OUT/model.pt
            torch.save({"config": ck["config"], "state_dict": ck["model"],
                        "progress": dict(steps_done=ck["step"], seconds=round(ck["seconds"], 1),
                                         stopped_early=False, from_carry=a.carry)},
                       os.path.join(out, "model.pt"))
            with open(os.path.join(out, "loss.csv"), "w", newline="") as fh:
                csv.writer(fh).writerows([LOSS_HEADER] + carried["loss_rows"])
        print("%s: already done (step %d)" % (out, ck["step"]), file=sys.stderr)
        return
    train = load_tokens(a.corpus, "train", a.tokenizer, a.cache_dir)
    held = load_tokens(a.corpus, "heldout", a.tokenizer, a.cache_dir)
    c = dict(PRESETS[a.preset], vocab=4096, ctx=a.ctx, eps=1e-5, rope_base=10000.0,
             tied=not a.untied)
    model = Llama(c)
    if a.init and not ck:
        ini = torch.load(a.init)
        if not same_shape(ini["config"], c):
            sys.exit("--init: checkpoint config %s differs from %s" % (ini["config"], c))
        model.load_state_dict(ini["state_dict"])
    teacher = None
    if a.teacher:
        teacher = load_model(a.teacher, ctx=a.ctx)
        teacher.eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
        if teacher.c["vocab"] != c["vocab"]:
            sys.exit("--teacher: vocab %d, student %d" % (teacher.c["vocab"], c["vocab"]))
    onpolicy = None
    if a.onpolicy:
        if not 0.0 < a.onpolicy_frac <= 1.0:
            sys.exit("--onpolicy-frac must be in (0, 1]")
        onpolicy = torch.load(a.onpolicy)["ids"].long()
        if int(onpolicy.max()) >= c["vocab"] or int(onpolicy.min()) < 0:
            sys.exit("--onpolicy: %s has token ids outside the vocabulary" % a.onpolicy)
        print("on-policy rows: %d sequences of %d tokens, %g of each batch" % (
            onpolicy.shape[0], onpolicy.shape[1], a.onpolicy_frac), file=sys.stderr)
    n_params = sum(p.numel() for p in model.parameters())
    print("preset %s: %d parameters, %d train / %d held-out tokens%s" % (
        a.preset, n_params, len(train), len(held),
        ", teacher %s (alpha %g, T %g)" % (a.teacher, a.kd_alpha, a.kd_temp) if teacher else ""),
        file=sys.stderr)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    start, secs0 = 1, 0.0
    if ck:
        if not same_shape(ck["config"], c) or ck["config"]["ctx"] != c["ctx"]:
            sys.exit("--resume: %s has config %s, not %s" % (ckpt_path, ck["config"], c))
        model.load_state_dict(ck["model"])
        if not carried:
            opt.load_state_dict(ck["opt"])
        gen.set_state(ck["gen_state"])
        torch.set_rng_state(ck["torch_rng"])
        start, secs0 = ck["step"] + 1, ck["seconds"]
        print("resuming %s at step %d (%.0f s done)%s" % (
            a.carry if carried else ckpt_path, start, secs0,
            ", fresh optimizer re-warmed over %d steps" % a.carry_warmup if carried else ""),
            file=sys.stderr)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(dict(c, n_params=n_params, args=vars(a)), fh, indent=1)
    log_path = os.path.join(out, "loss.csv")
    rows = []
    if carried:
        rows = carried["loss_rows"]
    elif ck and os.path.exists(log_path):  # rows past the checkpoint are redone
        with open(log_path, newline="") as fh:
            rows = [r for r in list(csv.reader(fh))[1:] if int(r[0]) <= ck["step"] + a.step_offset]
    log = open(log_path, "w", newline="")
    w = csv.writer(log)
    w.writerows([LOSS_HEADER] + rows)
    done_rows = list(rows)  # what the carry file keeps of the curve
    t0 = time.time() - secs0
    last_save = time.time()
    for step in range(start, a.steps + 1):
        if step <= a.warmup:
            lr = a.lr * step / a.warmup
        else:
            frac = (step - a.warmup) / max(1, a.steps - a.warmup)
            lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
        if carried and step - start < a.carry_warmup:  # Adam's moments start from zero again
            lr *= (step - start + 1) / a.carry_warmup
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train, a.batch, a.ctx, gen, onpolicy, a.onpolicy_frac)
        opt.zero_grad(set_to_none=True)
        loss_sum = ce_sum = 0.0
        mb = a.batch // a.accum
        for i in range(0, a.batch, mb):
            logits = model(x[i:i + mb])
            ce = F.cross_entropy(logits.reshape(-1, c["vocab"]), y[i:i + mb].reshape(-1))
            loss = ce
            if teacher is not None:
                with torch.no_grad():
                    tl = teacher(x[i:i + mb])
                loss = (1 - a.kd_alpha) * ce + a.kd_alpha * kd_loss(logits, tl, a.kd_temp)
            (loss / a.accum).backward()
            loss_sum += loss.item() / a.accum
            ce_sum += ce.item() / a.accum
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ev = evaluate(model, held, a.ctx) if step % a.eval_every == 0 or step == a.steps else ""
        if step % a.log_every == 0 or ev != "" or step == start:
            dt = time.time() - t0
            # train_loss is the data cross-entropy (comparable with and without a teacher)
            row = [step + a.step_offset, (step + a.step_offset) * a.batch * a.ctx,
                   "%.4f" % ce_sum, ev and "%.4f" % ev, "%.3g" % lr, "%.1f" % dt]
            w.writerow(row)
            done_rows.append([str(v) for v in row])
            log.flush()
            print("step %d loss %.4f%s%s lr %.3g  %.0f tok/s" % (
                step, ce_sum, " (with kd %.4f)" % loss_sum if teacher is not None else "",
                ev and " heldout %.4f" % ev, lr, (step - start + 1) * a.batch * a.ctx /
                max(1e-9, dt - secs0)), file=sys.stderr)
        stop = (a.max_seconds and time.time() - t0 > a.max_seconds) or step == a.stop_step
        timed = a.save_every_seconds and time.time() - last_save >= a.save_every_seconds
        if step % a.save_every == 0 or step == a.steps or stop or timed:
            progress = dict(steps_done=step, seconds=round(time.time() - t0, 1),
                            stopped_early=bool(stop and step < a.steps))
            save(model, c, out, progress)
            save_ckpt(ckpt_path, dict(config=c, model=model.state_dict(), opt=opt.state_dict(),
                                      gen_state=gen.get_state(), torch_rng=torch.get_rng_state(),
                                      step=step, seconds=time.time() - t0, args=vars(a)))
            if a.carry:
                os.makedirs(os.path.dirname(os.path.abspath(a.carry)), exist_ok=True)
                save_ckpt(a.carry, dict(config=c, model={k: v.half() if v.dim() > 1 else v.clone()  # norms stay f32,
                                               for k, v in model.state_dict().items()},  # as the GGUF has them
                                        gen_state=gen.get_state(), torch_rng=torch.get_rng_state(),
                                        step=step, seconds=time.time() - t0, loss_rows=done_rows))
            last_save = time.time()
        if stop:
            print("stopped early at step %d (--max-seconds or --stop-step)" % step, file=sys.stderr)
            break
    log.close()


def save_ckpt(path, state):
    """The resume checkpoint, atomically (a kill mid-write keeps the previous one)."""
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def save(model, c, out, progress):
    """Write model.pt atomically (a kill mid-write leaves the previous checkpoint)."""
    tmp = os.path.join(out, "model.pt.tmp")
    torch.save({"config": c, "state_dict": model.state_dict(), "progress": progress}, tmp)
    os.replace(tmp, os.path.join(out, "model.pt"))
    with open(os.path.join(out, "progress.json"), "w") as fh:
        json.dump(progress, fh)


if __name__ == "__main__":
    main()
