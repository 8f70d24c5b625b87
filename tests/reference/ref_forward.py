#!/usr/bin/python3
"""ref_forward.py: an independent float64 forward pass in NumPy for llama,
qwen2, qwen3, gemma3, phi3 and smollm3 GGUF files with F32, F16, BF16, Q8_0,
Q4_0, Q4_K or Q6_K weights (dequantized from ggml's block layouts, then
computed in float64), written from the architectures' definitions rather than
from Specula's C code. Used by test_independent.sh to check head layouts, GQA,
RoPE variants (NORM/NEOX, partial rotation, llama3 and LongRoPE factors,
linear scaling, none at all), biases, q/k norms, sandwich norms, sliding
windows and tied heads on models that tools/mkmodel generates.

usage: ref_forward.py MODEL.gguf RUN.json TOL [emulate] [--ctx N]
  --ctx N: the context size (per sequence) of the run; needed for a model
  with LongRoPE factors (phi3's rope_factors_short/long: short when N is at
  most rope.scaling.original_context_length, else long).
  RUN.json is the output of `specula run --json --logprobs K` on MODEL. For
  every generated step, the log-probabilities of the listed top tokens must
  be within TOL of the reference's, and the greedy token must be the
  reference's argmax wherever its margin over the runner-up exceeds TOL.
  Exit status 0 when all agree; prints the largest error. A run with no
  steps, or a step with no top tokens, compared nothing and fails. With
  `emulate`, matrix products round their inputs as the engine does (see
  matmul()), the run should use an f32 KV store (--kv f32), and in addition
  the median step must agree to 1e-5.
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
        a = dequantize(data, base + o, typ, int(np.prod(ne)), name)
        tensors[name] = a.astype(np.float64).reshape(list(reversed(ne)))  # [ne1][ne0]
        TYPES[name] = typ
    return kv, tensors


# --- optional emulation of the engine's activation rounding ----------------
# With EMULATE set, each matrix product first quantizes its input the way a
# llama.cpp-style CPU engine does for the weight's type (f16 for F16, bf16 for
# BF16, Q8_0 blocks for Q8_0/Q4_0, Q8_K blocks for Q4_K/Q6_K), so that the
# comparison isolates everything else (layouts, head mapping, RoPE, norms) at
# float precision. The rules are written from ggml's documented x86 paths.
TYPES = {}
EMULATE = False


def _q8_0(h):
    x = h.astype(np.float32).reshape(h.shape[0], -1, 32)
    amax = np.abs(x).max(axis=2, keepdims=True)
    idd = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, 1), 0).astype(np.float32)
    q = np.round(x * idd)  # round half to even, as _mm256_round_ps
    d = (amax / np.float32(127)).astype(np.float16).astype(np.float32)
    return (q * d).reshape(h.shape).astype(np.float64)


def _q8_k(h):
    x = h.astype(np.float32).reshape(h.shape[0], -1, 256)
    i = np.abs(x).argmax(axis=2)[..., None]
    mx = np.take_along_axis(x, i, axis=2)
    isc = np.where(mx != 0, np.float32(-127) / np.where(mx != 0, mx, 1), 0).astype(np.float32)
    q = np.minimum(127, np.round(isc * x))
    d = np.where(isc != 0, np.float32(1) / np.where(isc != 0, isc, 1), 0).astype(np.float32)
    return (q * d).reshape(h.shape).astype(np.float64)


def _bf16(h):
    u = h.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


_ACT = {0: lambda h: h, 1: lambda h: h.astype(np.float16).astype(np.float64), 30: _bf16,
        8: _q8_0, 2: _q8_0, 12: _q8_k, 14: _q8_k}


def matmul(h, T, name):
    w = T[name]
    if EMULATE:
        h = _ACT[TYPES[name]](h)
    return h @ w.T


# Block layouts of the quantized GGUF types (ggml's): elements per block and
# the block as a NumPy structured dtype. Blocks run along ne0, so a tensor is
# one flat run of blocks. Values are computed in float32 with the same
# operations, in the same order, as ggml's dequantize_row_* (so they match it
# bit for bit), then widened to float64 by the caller.
F16 = "<f2"
BLOCKS = {
    8: (32, np.dtype([("d", F16), ("qs", "i1", 32)])),                      # Q8_0
    2: (32, np.dtype([("d", F16), ("qs", "u1", 16)])),                      # Q4_0
    12: (256, np.dtype([("d", F16), ("dmin", F16), ("sc", "u1", 12), ("qs", "u1", 128)])),  # Q4_K
    14: (256, np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("sc", "i1", 16), ("d", F16)])),  # Q6_K
}


def dequantize(data, off, typ, n, name="tensor"):
    """n elements of GGUF type typ at byte offset off of data, as float32."""
    f32 = np.float32
    if typ == 0:
        return np.frombuffer(data, dtype="<f4", count=n, offset=off)
    if typ == 1:
        return np.frombuffer(data, dtype=F16, count=n, offset=off).astype(f32)
    if typ == 30:  # BF16: the top half of an f32
        u = np.frombuffer(data, dtype="<u2", count=n, offset=off).astype(np.uint32) << 16
        return u.view(f32)
    if typ not in BLOCKS:
        raise SystemExit(f"{name}: type {typ} not handled by the reference")
    qk, bt = BLOCKS[typ]
    if n % qk:
        raise SystemExit(f"{name}: {n} elements is not a whole number of type-{typ} blocks")
    b = np.frombuffer(data, dtype=bt, count=n // qk, offset=off)
    d = b["d"].astype(f32)[:, None]
    if typ == 8:  # Q8_0: q * d
        y = b["qs"].astype(f32) * d
    elif typ == 2:  # Q4_0: element j = low nibble of byte j, j + 16 = its high nibble
        qs = b["qs"]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32) - 8
        y = q.astype(f32) * d
    elif typ == 12:  # Q4_K: 8 sub-blocks of 32, each with a 6-bit scale and min
        sc = b["sc"]
        lo, mid, hi = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
        # sub-block j < 4: scale = sc[j] & 63, min = sc[j+4] & 63; j >= 4: the
        # low/high nibble of sc[j+4] plus the top 2 bits of sc[j-4] / sc[j].
        scales = np.concatenate([lo & 63, (hi & 0xF) | ((lo >> 6) << 4)], axis=1)
        mins = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
        d1 = d * scales.astype(f32)                       # [nb, 8]
        m1 = b["dmin"].astype(f32)[:, None] * mins.astype(f32)
        # 32-byte group c holds sub-block 2c in its low nibbles, 2c+1 in its high
        qs = b["qs"].reshape(-1, 4, 1, 32)
        q = np.concatenate([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)
        y = d1[:, :, None] * q.astype(f32) - m1[:, :, None]
    else:  # Q6_K: 16 sub-blocks of 16 with int8 scales; 6-bit quants - 32
        ql = b["ql"].reshape(-1, 2, 1, 64)   # per 128 elements: 64 bytes of ql
        qh = b["qh"].reshape(-1, 2, 1, 32)   # and 32 bytes of qh
        # quarter r (32 elements) of a 128-run: low 4 bits from ql[(r&1)*32 + l]
        # (low nibble for r < 2, high for r >= 2), high 2 bits from qh[l] >> 2r
        low = np.concatenate([ql[..., :32] & 0xF, ql[..., 32:] & 0xF,
                              ql[..., :32] >> 4, ql[..., 32:] >> 4], axis=2)
        high = (qh >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)) & 3
        q = (low | (high << 4)).astype(np.int32).reshape(-1, 256) - 32
        s = d * b["sc"].astype(f32)                       # [nb, 16]
        y = np.repeat(s, 16, axis=1) * q.astype(f32)
    return y.astype(f32).reshape(-1)


def rope(x, pos, base, scale, factors, neox, n_rot=None, mscale=1.0):
    # x: [n_heads, D]; rotates the first n_rot dims of each head (all when
    # None): pairs (i, i + n_rot/2) for NEOX, (2i, 2i+1) otherwise, by
    # pos * scale * base^(-2i/n_rot) / factors[i]; cos and sin are multiplied
    # by mscale (LongRoPE's attn_factor); the other dims pass unchanged
    D = x.shape[-1] if n_rot is None else n_rot
    i = np.arange(D // 2)
    inv = base ** (-2.0 * i / D)
    if factors is not None:
        inv = inv / factors[: D // 2]
    ang = pos * inv * scale
    c, s = np.cos(ang) * mscale, np.sin(ang) * mscale
    y = x.copy()
    if neox:
        a, b = x[:, : D // 2], x[:, D // 2:D]
        y[:, : D // 2] = a * c - b * s
        y[:, D // 2:D] = a * s + b * c
    else:
        a, b = x[:, 0:D:2], x[:, 1:D:2]
        y[:, 0:D:2] = a * c - b * s
        y[:, 1:D:2] = a * s + b * c
    return y


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(kv, T, tokens, n_ctx=None):
    """Log-softmax of the logits at every position of tokens."""
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{arch}.{k}", d)
    E, L, H = g("embedding_length"), g("block_count"), g("attention.head_count")
    Hk = g("attention.head_count_kv", H)
    Dk = g("attention.key_length", E // H)
    Dv = g("attention.value_length", E // H)
    n_rot = g("rope.dimension_count", Dk)
    eps = g("attention.layer_norm_rms_epsilon", 1e-5)
    base = g("rope.freq_base", 10000.0)
    scale = 1.0
    if g("rope.scaling.type") == "linear":
        scale = 1.0 / g("rope.scaling.factor", 1.0)
    neox = arch in ("qwen2", "qwen3", "gemma3", "phi3")
    mscale = g("rope.scaling.attn_factor", 1.0)
    factors = T.get("rope_freqs.weight")
    if "rope_factors_short.weight" in T:
        # LongRoPE: short factors while the context fits the original one
        if n_ctx is None:
            raise SystemExit("this model has LongRoPE factors: give the run's context size (--ctx N)")
        orig = g("rope.scaling.original_context_length", g("context_length"))
        factors = T["rope_factors_long.weight" if n_ctx > orig else "rope_factors_short.weight"]
    # sliding layers: gemma3's but every 6th (RoPE base 10000, unscaled, and
    # the window), every layer of phi3 when it has a window
    n_swa = g("attention.sliding_window", 0) or 0
    if arch == "gemma3":
        sliding = lambda l: (l + 1) % 6 != 0
    elif arch == "phi3":
        sliding = lambda l: n_swa > 0
    else:
        sliding = lambda l: False
    # smollm3: no RoPE at all on every 4th layer
    use_rope = (lambda l: (l + 1) % 4 != 0) if arch == "smollm3" else (lambda l: True)
    kq_scale = 1.0 / np.sqrt(Dk)
    if arch == "gemma3" and L == 62:  # the 27B: query_pre_attn_scalar = n_embd / n_head
        kq_scale = 1.0 / np.sqrt(E // H)
    emb = T["token_embd.weight"]

    def norm(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    n = len(tokens)
    x = emb[tokens]  # [n, E]
    if arch == "gemma3":
        x = x * np.sqrt(E)
    pos = np.arange(n)
    causal = pos[:, None] >= pos[None, :]
    for l in range(L):
        p = lambda s: T[f"blk.{l}.{s}"]
        has = lambda s: f"blk.{l}.{s}" in T
        h = norm(x, p("attn_norm.weight"))
        mm = lambda a, nm: matmul(a, T, f"blk.{l}.{nm}")
        if has("attn_qkv.weight"):  # fused: q rows, then k, then v
            qkv = mm(h, "attn_qkv.weight")
            q, k, v = np.split(qkv, [H * Dk, H * Dk + Hk * Dk], axis=1)
        else:
            q, k, v = mm(h, "attn_q.weight"), mm(h, "attn_k.weight"), mm(h, "attn_v.weight")
        if has("attn_q.bias"):
            q, k, v = q + p("attn_q.bias"), k + p("attn_k.bias"), v + p("attn_v.bias")
        q, k, v = q.reshape(n, H, Dk), k.reshape(n, Hk, Dk), v.reshape(n, Hk, Dv)
        if has("attn_q_norm.weight"):  # per-head RMSNorm before RoPE
            q, k = norm(q, p("attn_q_norm.weight")), norm(k, p("attn_k_norm.weight"))
        swa = sliding(l)
        b_l, s_l = (10000.0, 1.0) if arch == "gemma3" and swa else (base, scale)
        if use_rope(l):
            q = np.stack([rope(q[t], t, b_l, s_l, factors, neox, n_rot, mscale) for t in range(n)])
            k = np.stack([rope(k[t], t, b_l, s_l, factors, neox, n_rot, mscale) for t in range(n)])
        # a key more than n_swa - 1 positions back is out of the window
        allowed = causal & (pos[:, None] - pos[None, :] < n_swa) if swa and n_swa > 0 else causal
        mask = np.where(allowed, 0.0, -np.inf)
        att = np.zeros((n, H, Dv))
        for hd in range(H):
            kh, vh = k[:, hd // (H // Hk)], v[:, hd // (H // Hk)]
            s = q[:, hd] @ kh.T * kq_scale + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            att[:, hd] = (s / s.sum(axis=1, keepdims=True)) @ vh
        a = mm(att.reshape(n, H * Dv), "attn_output.weight")
        if has("post_attention_norm.weight"):
            a = norm(a, p("post_attention_norm.weight"))
        x = x + a
        h = norm(x, p("ffn_norm.weight"))
        if has("ffn_gate.weight"):
            gt, up = mm(h, "ffn_gate.weight"), mm(h, "ffn_up.weight")
        else:  # fused: the gate's F outputs, then the up's
            gt, up = np.split(mm(h, "ffn_up.weight"), 2, axis=1)
        act = gelu_tanh(gt) if arch == "gemma3" else gt / (1 + np.exp(-gt))
        f = mm(act * up, "ffn_down.weight")
        if has("post_ffw_norm.weight"):
            f = norm(f, p("post_ffw_norm.weight"))
        x = x + f
    logits = matmul(norm(x, T["output_norm.weight"]), T, "output.weight" if "output.weight" in T else "token_embd.weight")
    m = logits.max(axis=1, keepdims=True)
    return logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))


if __name__ == "__main__":
    args, n_ctx = [], None
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--ctx":
            n_ctx = int(next(it))
        else:
            args.append(a)
    EMULATE = len(args) > 3 and args[3] == "emulate"
    kv, T = read_gguf(args[0])
    run = json.load(open(args[1]))
    tol = float(args[2])
    seq = run["prompt_tokens"] + run["tokens"]
    lp = forward(kv, T, seq, n_ctx)
    n_p = len(run["prompt_tokens"])
    worst, bad, per_step = 0.0, [], []
    if not run["steps"] or not run["prompt_tokens"]:
        bad.append(f"nothing compared: {len(run['prompt_tokens'])} prompt tokens, {len(run['steps'])} steps")
    for s, st in enumerate(run["steps"]):
        if not st["top"]:
            bad.append(f"step {s}: no top tokens to compare")
        row = lp[n_p - 1 + s]
        step_err = 0.0
        for tid, got in st["top"]:
            e = abs(row[tid] - got)
            worst = max(worst, e)
            step_err = max(step_err, e)
            if e > tol:
                bad.append(f"step {s} token {tid}: {got:.6f} vs reference {row[tid]:.6f}")
        per_step.append(step_err)
        order = np.argsort(-row)
        if row[order[0]] - row[order[1]] > tol and st["id"] != order[0]:
            bad.append(f"step {s}: greedy {st['id']} vs reference {order[0]}")
    med = float(np.median(per_step)) if per_step else 0.0
    if EMULATE and med > 1e-5:
        # with the engine's rounding emulated, the typical step must agree to
        # float precision (measured: at most 1.4e-6); only a rare 1-ulp
        # rounding flip (which then carries into later steps through the KV
        # state) may reach the tolerance
        bad.append(f"median step error {med:.2e} exceeds 1e-5 with rounding emulated")
    print(f"max |logprob error| {worst:.2e}, median {med:.1e} over {len(run['steps'])} steps")
    for b in bad[:10]:
        print("  " + b)
    sys.exit(1 if bad else 0)
