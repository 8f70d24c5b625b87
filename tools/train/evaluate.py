#!/usr/bin/python3
"""Evaluate an exported target/draft pair: held-out perplexity and draft acceptance.

    tools/train/evaluate.py --target T.gguf [--draft D.gguf]
        [--heldout build/corpus/heldout.txt] [--tokenizer build/tok/spm.model]
        [--ctx 512] [--bucket 512] [--prompts 20] [--prompt-len 128] [--gen 64]
        [--k 4] [--seed 1234] [--threads 2] [--bos auto|yes|no] [--json OUT.json]

The models are read from the GGUF files (export.load_gguf), so the numbers
describe the weights that ship (F16 weights are widened to f32 for PyTorch);
a train.py checkpoint (.pt) works too, to follow a run before exporting it.
Without --draft only perplexity is measured.

Perplexity by position (--bucket N, default 512): the same windows' NLL split
by the scored token's position in its window, [0, N), [N, 2N), ...: with
--ctx 2048, positions 1536-2048 against 0-512 show whether the model uses
(or is lost in) the long context.  Acceptance is reported for k = 1..8.

Perplexity: the held-out text is tokenized once (SentencePiece, no BOS) and
cut into non-overlapping windows of --ctx tokens; each window is scored on
every position after its first (ctx - 1 predictions per window; a final
partial window of at least 2 tokens is scored too). Reports mean NLL (nats
per token) and ppl = exp(NLL).  With BOS on, each window is preceded by BOS
(extra context only: the scored tokens are the same).

Acceptance: --prompts prompts are drawn with a fixed seed from the held-out
files (heldout.txt split on its "# ==== file: " lines): a random line start
inside a random file, then the first --prompt-len tokens from there. The
target greedily generates --gen tokens for each (KV-cached, batched); the
draft then reads prompt + generated text in one pass, and match[i] says
whether the draft's argmax for generated position i equals the target's
token.  alpha = mean(match).  Speculative decoding with k greedy proposals
per target pass is simulated on the match vector: each pass accepts the
leading run of matches among the next k positions (a proposal after the
first mismatch is never checked) and commits accepted + 1 tokens (the
target's own token after the accepted ones), so mean acceptance length =
committed tokens / target passes and acceptance rate = accepted / proposed.
Because both models are greedy, this is exactly what a greedy speculative
decoder would accept (up to float rounding differences between engines).

--bos auto (the default) prepends BOS when the vocabulary's
tokenizer.ggml.add_bos_token is true, as the engine does.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train import apply_rope, load_model  # noqa: E402

MARKER = "# ==== file: "


@torch.no_grad()
def perplexity(model, ids, ctx, bos=None, batch=None, bucket=0):
    """Mean NLL over non-overlapping windows of ctx tokens (first of each
    unscored).  With bucket > 0 also the NLL by position in the window:
    buckets [0, bucket), [bucket, 2 bucket), ... of the predicted token's
    position, as a list of dict(start, end, nll, ppl, tokens)."""
    batch = batch or max(1, 4096 // ctx)  # attention scores grow with ctx^2
    wins = [ids[s:s + ctx] for s in range(0, len(ids), ctx)]
    wins = [w for w in wins if len(w) >= 2]
    total, count = 0.0, 0
    nb = (ctx + bucket - 1) // bucket if bucket else 0
    b_sum, b_cnt = [0.0] * nb, [0] * nb
    full = [w for w in wins if len(w) == ctx]
    rest = [w for w in wins if len(w) != ctx]
    groups = [full[i:i + batch] for i in range(0, len(full), batch)] + [[w] for w in rest]
    for g in groups:
        x = torch.tensor(g)
        if bos is not None:
            x = torch.cat([torch.full((x.shape[0], 1), bos), x], 1)
        logits = model(x[:, :-1])
        if bos is not None:
            logits = logits[:, 1:]  # the prediction for the window's first token is not scored
            y = x[:, 2:]
        else:
            y = x[:, 1:]
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                              reduction="none").view(y.shape)
        total += nll.sum().item()
        count += y.numel()
        if nb:
            # y[:, j] is the token at window position j + 1, which belongs to
            # bucket (j + 1) // bucket: columns [b*bucket - 1, (b+1)*bucket - 1)
            per_pos = nll.sum(0)
            for bj in range(nb):
                lo, hi = max(bj * bucket - 1, 0), min((bj + 1) * bucket - 1, per_pos.shape[0])
                if lo < hi:
                    b_sum[bj] += per_pos[lo:hi].sum().item()
                    b_cnt[bj] += (hi - lo) * y.shape[0]
    if not nb:
        return total / count, count
    buckets = [dict(start=i * bucket, end=min((i + 1) * bucket, ctx), nll=b_sum[i] / b_cnt[i],
                    ppl=math.exp(b_sum[i] / b_cnt[i]), tokens=b_cnt[i])
               for i in range(nb) if b_cnt[i]]
    return total / count, count, buckets


@torch.no_grad()
def forward_cached(model, idx, cache, pos):
    """Logits for idx (B, T) at positions pos.. given cache (list of (k, v) per layer)."""
    B, T = idx.shape
    x = model.tok_emb(idx)
    cos, sin = model.cos[pos:pos + T], model.sin[pos:pos + T]
    for li, L in enumerate(model.layers):
        h = L.attn_norm(x)
        q = L.wq(h).view(B, T, L.nh, L.hd).transpose(1, 2)
        k = L.wk(h).view(B, T, L.nkv, L.hd).transpose(1, 2)
        v = L.wv(h).view(B, T, L.nkv, L.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache[li] is not None:
            k = torch.cat([cache[li][0], k], 2)
            v = torch.cat([cache[li][1], v], 2)
        cache[li] = (k, v)
        if L.nkv != L.nh:
            k = k.repeat_interleave(L.nh // L.nkv, dim=1)
            v = v.repeat_interleave(L.nh // L.nkv, dim=1)
        S = k.shape[2]
        mask = torch.full((T, S), float("-inf")).triu(S - T + 1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(L.hd)) + mask
        y = att.softmax(-1) @ v
        x = x + L.wo(y.transpose(1, 2).reshape(B, T, -1))
        h = L.ffn_norm(x)
        x = x + L.w_down(F.silu(L.w_gate(h)) * L.w_up(h))
    x = model.norm(x)
    return x @ model.tok_emb.weight.t() if model.head is None else model.head(x)


@torch.no_grad()
def greedy(model, prompts, n):
    """Greedy continuations (B, n) of equal-length prompts (B, P), KV-cached."""
    cache = [None] * len(model.layers)
    logits = forward_cached(model, prompts, cache, 0)
    out, pos = [], prompts.shape[1]
    nxt = logits[:, -1].argmax(-1)
    for i in range(n):
        out.append(nxt)
        if i + 1 == n:
            break
        logits = forward_cached(model, nxt[:, None], cache, pos)
        pos += 1
        nxt = logits[:, -1].argmax(-1)
    return torch.stack(out, 1)


def simulate(match, k):
    """Greedy speculative decoding with k proposals per pass on one match vector."""
    i, G, acc, prop, passes = 0, len(match), 0, 0, 0
    while i < G:
        m = min(k, G - i)
        a = 0
        while a < m and match[i + a]:
            a += 1
        acc, prop, passes = acc + a, prop + m, passes + 1
        i += a + 1
    return acc, prop, passes, G


def spec_stats(matches, k):
    acc = prop = passes = committed = 0
    for m in matches:
        a, p, s, g = simulate(m, k)
        acc, prop, passes, committed = acc + a, prop + p, passes + s, committed + g
    return dict(k=k, acceptance_rate=acc / max(1, prop), mean_accept_len=committed / max(1, passes),
                accepted=acc, proposed=prop, target_passes=passes, tokens=committed)


def heldout_files(text):
    files = []
    for chunk in text.split(MARKER)[1:]:
        head, _, body = chunk.partition("\n")
        files.append((head.rstrip(" ="), body))
    return files


def pick_prompts(files, sp, n, plen, seed):
    """n prompts of plen tokens, each from a random line start of a random held-out file."""
    rng = random.Random(seed)
    out, tries = [], 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        name, body = files[rng.randrange(len(files))]
        starts = [0] + [i + 1 for i, ch in enumerate(body) if ch == "\n" and i + 1 < len(body)]
        s = starts[rng.randrange(len(starts))]
        ids = sp.encode(body[s:s + 8 * plen])
        if len(ids) >= plen:
            out.append(dict(file=name, char=s, ids=ids[:plen]))
    if len(out) < n:
        raise SystemExit("could only draw %d prompts of %d tokens" % (len(out), plen))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default=None,
                    help="the draft (.gguf or train.py .pt); without it only perplexity")
    ap.add_argument("--heldout", default="build/corpus/heldout.txt")
    ap.add_argument("--tokenizer", default="build/tok/spm.model")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--bucket", type=int, default=512,
                    help="also report perplexity by window position in buckets of N (0: off)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bos", choices=("auto", "yes", "no"), default="auto")
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="score only the first N held-out tokens (0 = all; for quick tests)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer)
    t0 = time.time()
    need = max(a.ctx + 1, a.prompt_len + a.gen + 1)
    models = {"target": load_model(a.target, ctx=need)}
    if a.draft:
        models["draft"] = load_model(a.draft, ctx=need)
    for m in models.values():
        m.eval()
        if not hasattr(m, "meta"):  # a .pt checkpoint: no GGUF metadata
            m.meta = {}
    for nm, m in models.items():
        if m.c["vocab"] != sp.get_piece_size():
            raise SystemExit("%s: vocab %d, tokenizer %d" % (nm, m.c["vocab"], sp.get_piece_size()))
    add_bos = models["target"].meta.get("tokenizer.ggml.add_bos_token", False)
    use_bos = a.bos == "yes" or (a.bos == "auto" and bool(add_bos))
    bos = sp.bos_id() if use_bos else None
    text = open(a.heldout, encoding="utf-8", newline="").read()
    ids = sp.encode(text)
    if a.max_tokens:
        ids = ids[:a.max_tokens]
    res = dict(settings=dict(vars(a), bos_used=use_bos, heldout_tokens=len(ids)))
    for nm, m in models.items():
        nll, n, *rest = perplexity(m, ids, a.ctx, bos, bucket=a.bucket)
        res[nm] = dict(file=a.target if nm == "target" else a.draft, name=m.meta.get("general.name"),
                       params=sum(p.numel() for p in m.parameters()), config=m.c,
                       heldout_nll=nll, heldout_ppl=math.exp(nll), scored_tokens=n)
        print("%s: held-out NLL %.4f, ppl %.3f over %d tokens (%.0fs)" % (
            nm, nll, math.exp(nll), n, time.time() - t0), file=sys.stderr)
        if rest:
            res[nm]["ppl_by_position"] = rest[0]
            print("  by position: " + ", ".join("%d-%d %.2f" % (b["start"], b["end"], b["ppl"])
                                               for b in rest[0]), file=sys.stderr)
    if not a.draft:
        return finish(res, a, t0)
    prompts = pick_prompts(heldout_files(text), sp, a.prompts, a.prompt_len, a.seed)
    P = torch.tensor([([bos] if bos is not None else []) + p["ids"] for p in prompts])
    gen = greedy(models["target"], P, a.gen)
    seq = torch.cat([P, gen], 1)
    with torch.no_grad():
        dl = models["draft"](seq[:, :-1])
    dpred = dl[:, P.shape[1] - 1:].argmax(-1)  # draft's prediction for each generated position
    match = (dpred == gen).tolist()
    alpha = sum(map(sum, match)) / (len(match) * a.gen)
    res["acceptance"] = dict(
        alpha=alpha, prompts=a.prompts, prompt_len=a.prompt_len, gen=a.gen,
        **spec_stats(match, a.k),
        by_k={k: spec_stats(match, k) for k in range(1, 9)},
        prompt_sources=[dict(file=p["file"], char=p["char"]) for p in prompts],
        per_prompt_alpha=[sum(m) / a.gen for m in match])
    acc = res["acceptance"]
    print("draft vs target: alpha %.3f; k=%d: acceptance rate %.3f, mean acceptance length %.2f "
          "tokens/target pass (%.0fs)" % (alpha, a.k, acc["acceptance_rate"], acc["mean_accept_len"],
                                          time.time() - t0), file=sys.stderr)
    print("  acceptance rate by k: " + ", ".join("%d %.3f" % (k, v["acceptance_rate"])
                                                for k, v in acc["by_k"].items()), file=sys.stderr)
    finish(res, a, t0)


def finish(res, a, t0):
    res["seconds"] = round(time.time() - t0, 1)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
    else:
        json.dump({k: v for k, v in res.items() if k != "settings"}, sys.stdout, indent=1, default=str)
        print()


if __name__ == "__main__":
    main()
