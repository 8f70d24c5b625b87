#!/usr/bin/python3
"""ref_forward.py: an independent float64 forward pass in NumPy for llama
and qwen2 GGUF files with F32/F16 weights, written from the architecture's
definition rather than from Specula's C code. Used by test_independent.sh to
check head layouts, GQA, RoPE variants, biases and tied heads on models that
tools/mkmodel generates.

usage: ref_forward.py MODEL.gguf RUN.json TOL
  RUN.json is the output of `specula run --json --logprobs K` on MODEL. For
  every generated step, the log-probabilities of the listed top tokens must
  be within TOL of the reference's, and the greedy token must be the
  reference's argmax wherever its margin over the runner-up exceeds TOL.
  Exit status 0 when all agree; prints the largest error.
"""
import json
import struct
import sys

import numpy as np

VT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read_gguf(path):
    data = open(path, "rb").read()
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = data[off:off + n].decode("utf-8", "replace")
        off += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(VT[t])

    assert data[:4] == b"GGUF"
    off = 4
    take("I")
    n_t, n_kv = take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        infos.append((name, ne, take("I"), take("Q")))
    align = kv.get("general.alignment", 32)
    base = (off + align - 1) // align * align
    tensors = {}
    for name, ne, typ, o in infos:
        n = int(np.prod(ne))
        dt = {0: np.float32, 1: np.float16}.get(typ)
        if dt is None:
            raise SystemExit(f"{name}: type {typ} not handled by the reference")
        a = np.frombuffer(data, dtype=dt, count=n, offset=base + o).astype(np.float64)
        tensors[name] = a.reshape(list(reversed(ne)))  # numpy order: [ne1][ne0]
    return kv, tensors


def rope(x, pos, base, scale, factors, neox):
    # x: [n_heads, D]
    D = x.shape[-1]
    i = np.arange(D // 2)
    inv = base ** (-2.0 * i / D)
    if factors is not None:
        inv = inv / factors
    ang = pos * inv * scale
    c, s = np.cos(ang), np.sin(ang)
    y = x.copy()
    if neox:
        a, b = x[:, : D // 2], x[:, D // 2:]
        y[:, : D // 2] = a * c - b * s
        y[:, D // 2:] = a * s + b * c
    else:
        a, b = x[:, 0::2], x[:, 1::2]
        y[:, 0::2] = a * c - b * s
        y[:, 1::2] = a * s + b * c
    return y


def forward(kv, T, tokens):
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{arch}.{k}", d)
    E, L, H = g("embedding_length"), g("block_count"), g("attention.head_count")
    Hk = g("attention.head_count_kv", H)
    D = E // H
    eps = g("attention.layer_norm_rms_epsilon", 1e-5)
    base = g("rope.freq_base", 10000.0)
    scale = 1.0
    if g("rope.scaling.type") == "linear":
        scale = 1.0 / g("rope.scaling.factor", 1.0)
    neox = arch == "qwen2"
    factors = T.get("rope_freqs.weight")
    emb = T["token_embd.weight"]
    out_w = T.get("output.weight", emb)

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    n = len(tokens)
    x = emb[tokens]  # [n, E]
    for l in range(L):
        p = lambda s: T[f"blk.{l}.{s}"]
        h = norm(x, p("attn_norm.weight"))
        q, k, v = h @ p("attn_q.weight").T, h @ p("attn_k.weight").T, h @ p("attn_v.weight").T
        if f"blk.{l}.attn_q.bias" in T:
            q, k, v = q + p("attn_q.bias"), k + p("attn_k.bias"), v + p("attn_v.bias")
        q = np.stack([rope(q[t].reshape(H, D), t, base, scale, factors, neox) for t in range(n)])
        k = np.stack([rope(k[t].reshape(Hk, D), t, base, scale, factors, neox) for t in range(n)])
        v = v.reshape(n, Hk, D)
        att = np.zeros((n, H, D))
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for hd in range(H):
            kh, vh = k[:, hd // (H // Hk)], v[:, hd // (H // Hk)]
            s = q[:, hd] @ kh.T / np.sqrt(D) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            att[:, hd] = (s / s.sum(axis=1, keepdims=True)) @ vh
        x = x + att.reshape(n, H * D) @ p("attn_output.weight").T
        h = norm(x, p("ffn_norm.weight"))
        gt, up = h @ p("ffn_gate.weight").T, h @ p("ffn_up.weight").T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ p("ffn_down.weight").T
    logits = norm(x, T["output_norm.weight"]) @ out_w.T
    m = logits.max(axis=1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))


if __name__ == "__main__":
    kv, T = read_gguf(sys.argv[1])
    run = json.load(open(sys.argv[2]))
    tol = float(sys.argv[3])
    seq = run["prompt_tokens"] + run["tokens"]
    lp = forward(kv, T, seq)
    n_p = len(run["prompt_tokens"])
    worst, bad = 0.0, []
    for s, st in enumerate(run["steps"]):
        row = lp[n_p - 1 + s]
        for tid, got in st["top"]:
            e = abs(row[tid] - got)
            worst = max(worst, e)
            if e > tol:
                bad.append(f"step {s} token {tid}: {got:.6f} vs reference {row[tid]:.6f}")
        order = np.argsort(-row)
        if row[order[0]] - row[order[1]] > tol and st["id"] != order[0]:
            bad.append(f"step {s}: greedy {st['id']} vs reference {order[0]}")
    print(f"max |logprob error| {worst:.2e} over {len(run['steps'])} steps")
    for b in bad[:10]:
        print("  " + b)
    sys.exit(1 if bad else 0)
