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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd)) + mask
        y = att.softmax(-1) @ v
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
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.tok_emb(idx)
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T], mask)
        x = self.norm(x)
        return x @ self.tok_emb.weight.t() if self.head is None else self.head(x)


def load_tokens(corpus, split, model_file, cache_dir):
    """Token ids of corpus/SPLIT.txt (no BOS), cached as int16 (vocab < 32768)."""
    cache = os.path.join(cache_dir, split + ".tok.pt")
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(model_file):
        return torch.load(cache).long()
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_file)
    with open(os.path.join(corpus, split + ".txt"), encoding="utf-8", newline="") as fh:
        ids = sp.encode(fh.read())
    t = torch.tensor(ids, dtype=torch.int16)
    os.makedirs(cache_dir, exist_ok=True)
    torch.save(t, cache)
    return t.long()


def batch(data, B, T, gen):
    ix = torch.randint(0, len(data) - T - 1, (B,), generator=gen)
    x = torch.stack([data[i:i + T + 1] for i in ix.tolist()])
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, data, T, n_windows=32):
    """Mean loss over n_windows evenly spaced, non-overlapping windows."""
    model.eval()
    step = max(T + 1, (len(data) - T - 1) // n_windows)
    starts = list(range(0, len(data) - T - 1, step))[:n_windows]
    x = torch.stack([data[s:s + T + 1] for s in starts])
    logits = model(x[:, :-1])
    model.train()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=PRESETS, default="tiny")
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--tokenizer", default="build/tok/spm.model")
    ap.add_argument("--out", default=None)
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = a.out or os.path.join("build/train", a.preset)
    os.makedirs(out, exist_ok=True)
    train = load_tokens(a.corpus, "train", a.tokenizer, "build/train")
    held = load_tokens(a.corpus, "heldout", a.tokenizer, "build/train")
    c = dict(PRESETS[a.preset], vocab=4096, ctx=a.ctx, eps=1e-5, rope_base=10000.0,
             tied=not a.untied)
    model = Llama(c)
    if a.init:
        ck = torch.load(a.init)
        if ck["config"] != c:
            sys.exit("--init: checkpoint config %s differs from %s" % (ck["config"], c))
        model.load_state_dict(ck["state_dict"])
    n_params = sum(p.numel() for p in model.parameters())
    print("preset %s: %d parameters, %d train / %d held-out tokens" % (
        a.preset, n_params, len(train), len(held)), file=sys.stderr)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(dict(c, n_params=n_params, args=vars(a)), fh, indent=1)
    log = open(os.path.join(out, "loss.csv"), "w", newline="")
    w = csv.writer(log)
    w.writerow(["step", "tokens", "train_loss", "heldout_loss", "lr", "seconds"])
    t0 = time.time()
    for step in range(1, a.steps + 1):
        if step <= a.warmup:
            lr = a.lr * step / a.warmup
        else:
            frac = (step - a.warmup) / max(1, a.steps - a.warmup)
            lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train, a.batch, a.ctx, gen)
        loss = F.cross_entropy(model(x).reshape(-1, c["vocab"]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ev = evaluate(model, held, a.ctx) if step % a.eval_every == 0 or step == a.steps else ""
        if step % a.log_every == 0 or ev != "" or step == 1:
            dt = time.time() - t0
            w.writerow([step + a.step_offset, (step + a.step_offset) * a.batch * a.ctx,
                        "%.4f" % loss.item(), ev and "%.4f" % ev,
                        "%.3g" % lr, "%.1f" % dt])
            log.flush()
            print("step %d loss %.4f%s lr %.3g  %.0f tok/s" % (
                step, loss.item(), ev and " heldout %.4f" % ev, lr, step * a.batch * a.ctx / dt),
                file=sys.stderr)
        stop = (a.max_seconds and time.time() - t0 > a.max_seconds) or step == a.stop_step
        if step % a.save_every == 0 or step == a.steps or stop:
            save(model, c, out, dict(steps_done=step, seconds=round(time.time() - t0, 1),
                                     stopped_early=bool(stop and step < a.steps)))
        if stop:
            print("stopped early at step %d (--max-seconds)" % step, file=sys.stderr)
            break
    log.close()


def save(model, c, out, progress):
    """Write model.pt atomically (a kill mid-write leaves the previous checkpoint)."""
    tmp = os.path.join(out, "model.pt.tmp")
    torch.save({"config": c, "state_dict": model.state_dict(), "progress": progress}, tmp)
    os.replace(tmp, os.path.join(out, "model.pt"))
    with open(os.path.join(out, "progress.json"), "w") as fh:
        json.dump(progress, fh)


if __name__ == "__main__":
    main()
