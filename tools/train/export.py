#!/usr/bin/python3
"""Export a train.py checkpoint to a GGUF v3 llama-architecture model.

    tools/train/export.py CHECKPOINT.pt OUT.gguf [--vocab build/tok/vocab.gguf]
        [--type f16|f32] [--name NAME] [--description TEXT] [--license PSF-2.0]
        [--context-length N]

Metadata as llama.cpp's convert_hf_to_gguf.py writes it for LLaMA:
general.architecture = "llama", general.name, general.license,
general.description, general.file_type (1 = mostly F16, 0 = all F32), the
llama.* hyperparameters (context_length, embedding_length, block_count,
feed_forward_length, attention.head_count, attention.head_count_kv,
attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
vocab_size), every tokenizer.* key of the vocabulary GGUF, copied with
its type (any llama-tokenizer GGUF whose token count equals the model's
vocab size will do; gguf_vocab.py writes ours), and tokenizer.chat_template
(chat_template.jinja beside this file).

Tensors (llama.cpp's names; GGUF dims are innermost first, so a torch
Linear weight of shape (out, in) has dims [in, out]):
    token_embd.weight                 [dim, vocab]
    blk.N.attn_norm.weight            [dim]            (always F32)
    blk.N.attn_q/attn_k/attn_v.weight [dim, n_head(_kv) * head_dim]
    blk.N.attn_output.weight          [n_head * head_dim, dim]
    blk.N.ffn_norm.weight             [dim]            (always F32)
    blk.N.ffn_gate/ffn_up.weight      [dim, ffn]
    blk.N.ffn_down.weight             [ffn, dim]
    output_norm.weight                [dim]            (always F32)
    output.weight                     [dim, vocab]     (only when untied)
train.py trains RoPE in llama.cpp's NORM (adjacent pair) layout, so Q and K
are written as they are (no permutation).

load_gguf(path) reads such a file (F32 or F16 weights) back into a
train.Llama in float32; evaluate.py and roundtrip.py use it.
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf  # noqa: E402
from train import Llama  # noqa: E402

# train.Llama state_dict name -> GGUF name ("{}" = layer index)
LAYER_MAP = {
    "attn_norm.weight": "attn_norm.weight",
    "wq.weight": "attn_q.weight",
    "wk.weight": "attn_k.weight",
    "wv.weight": "attn_v.weight",
    "wo.weight": "attn_output.weight",
    "ffn_norm.weight": "ffn_norm.weight",
    "w_gate.weight": "ffn_gate.weight",
    "w_up.weight": "ffn_up.weight",
    "w_down.weight": "ffn_down.weight",
}
TOP_MAP = {"tok_emb.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
           "head.weight": "output.weight"}

DEFAULT_DESCRIPTION = (
    "Small llama-architecture model trained from scratch by Specula's tools/train on the "
    "Python 3.11 standard library source (PSF-licensed code), so the weights are "
    "distributed under the PSF License 2.0.")


def gguf_name(sd_name):
    if sd_name in TOP_MAP:
        return TOP_MAP[sd_name]
    parts = sd_name.split(".", 2)  # layers.N.rest
    if parts[0] == "layers" and parts[2] in LAYER_MAP:
        return "blk.%s.%s" % (parts[1], LAYER_MAP[parts[2]])
    raise KeyError("no GGUF name for %s" % sd_name)


def torch_name(gname):
    inv = {v: k for k, v in TOP_MAP.items()}
    if gname in inv:
        return inv[gname]
    parts = gname.split(".", 2)  # blk.N.rest
    invl = {v: k for k, v in LAYER_MAP.items()}
    if parts[0] == "blk" and parts[2] in invl:
        return "layers.%s.%s" % (parts[1], invl[parts[2]])
    raise KeyError("unexpected tensor %s" % gname)


def tokenizer_kv(vocab_path, n_vocab):
    """The tokenizer.* keys of a GGUF, typed, checked against the model's vocab size."""
    kv, _ = gguf.read(vocab_path)
    tok = [item for item in kv if item[0].startswith("tokenizer.")]
    d = {k: v for k, _, v in tok}
    if d.get("tokenizer.ggml.model") != "llama":
        raise SystemExit("%s: tokenizer.ggml.model is %r, expected 'llama'" % (
            vocab_path, d.get("tokenizer.ggml.model")))
    n = len(d["tokenizer.ggml.tokens"].values)
    if n != n_vocab:
        raise SystemExit("%s has %d tokens but the model's vocab is %d" % (vocab_path, n, n_vocab))
    return tok


# The chat template of Specula's code models (the "code" family's, which
# src/chat/builtin.c holds too): the conversation as a Python file.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template.jinja")) as _fh:
    CHAT_TEMPLATE = _fh.read()


def export(model_or_sd, c, out, vocab, ftype="f16", name="specula", description=None,
           license="PSF-2.0", context_length=None):
    """Write model weights (a train.Llama or its state_dict) with config c to out."""
    sd = model_or_sd.state_dict() if hasattr(model_or_sd, "state_dict") else model_or_sd
    f16 = ftype == "f16"
    hd = c["dim"] // c["n_head"]
    kv = [
        ("general.architecture", "llama"),
        ("general.name", name),
        ("general.license", license),
        ("general.description", description or DEFAULT_DESCRIPTION),
        ("general.file_type", gguf.UINT32, 1 if f16 else 0),
        ("llama.context_length", gguf.UINT32, int(context_length or c["ctx"])),
        ("llama.embedding_length", gguf.UINT32, c["dim"]),
        ("llama.block_count", gguf.UINT32, c["n_layer"]),
        ("llama.feed_forward_length", gguf.UINT32, c["ffn"]),
        ("llama.attention.head_count", gguf.UINT32, c["n_head"]),
        ("llama.attention.head_count_kv", gguf.UINT32, c["n_head_kv"]),
        ("llama.attention.layer_norm_rms_epsilon", gguf.FLOAT32, float(c["eps"])),
        ("llama.rope.freq_base", gguf.FLOAT32, float(c["rope_base"])),
        ("llama.rope.dimension_count", gguf.UINT32, hd),
        ("llama.vocab_size", gguf.UINT32, c["vocab"]),
    ] + [x for x in tokenizer_kv(vocab, c["vocab"]) if x[0] != "tokenizer.chat_template"] + [
        ("tokenizer.chat_template", CHAT_TEMPLATE)]

    def order(n):  # llama.cpp's order: token_embd, blk.0.., ..., output_norm, output
        g = gguf_name(n)
        if g.startswith("blk."):
            return (1, int(g.split(".")[1]), list(LAYER_MAP.values()).index(g.split(".", 2)[2]))
        return ({"token_embd.weight": 0, "output_norm.weight": 2, "output.weight": 3}[g], 0, 0)

    tensors = []
    for n in sorted(sd, key=order):
        t = sd[n].detach().to(torch.float32).cpu()
        if c["tied"] and n == "head.weight":
            continue
        is_norm = t.dim() == 1
        gt = gguf.GGML_F16 if (f16 and not is_norm) else gguf.GGML_F32
        a = t.numpy().astype("<f2" if gt == gguf.GGML_F16 else "<f4")
        tensors.append((gguf_name(n), gt, list(reversed(t.shape)), a.tobytes()))
    gguf.write(out, kv, tensors)
    return out


def load_gguf(path, ctx=None):
    """A train.Llama (float32, eval mode) with the weights of a llama GGUF (F32/F16).
    ctx sets the RoPE table length (default: llama.context_length)."""
    kv, tensors = gguf.read(path)
    d = {k: v for k, _, v in kv}
    if d.get("general.architecture") != "llama":
        raise SystemExit("%s: architecture %r, expected llama" % (path, d.get("general.architecture")))
    g = lambda k, dflt=None: d.get("llama." + k, dflt)  # noqa: E731
    f32 = lambda v: float(str(np.float32(v)))  # the shortest decimal of an f32 key: 1e-05  # noqa: E731
    n_vocab = tensors["token_embd.weight"][1][1]
    c = dict(dim=g("embedding_length"), n_layer=g("block_count"), n_head=g("attention.head_count"),
             n_head_kv=g("attention.head_count_kv", g("attention.head_count")),
             ffn=g("feed_forward_length"), vocab=n_vocab, ctx=int(ctx or g("context_length", 2048)),
             eps=f32(g("attention.layer_norm_rms_epsilon", 1e-5)),
             rope_base=f32(g("rope.freq_base", 10000.0)), tied="output.weight" not in tensors)
    model = Llama(c)
    sd = {}
    for name, (gt, dims, data) in tensors.items():
        if gt not in (gguf.GGML_F32, gguf.GGML_F16):
            raise SystemExit("%s: tensor %s has type %d (only F32/F16 supported)" % (path, name, gt))
        a = np.frombuffer(data, dtype="<f4" if gt == gguf.GGML_F32 else "<f2")
        sd[torch_name(name)] = torch.from_numpy(a.astype(np.float32).reshape(list(reversed(dims))))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or [m for m in missing if m != "head.weight" or not c["tied"]]:
        raise SystemExit("%s: missing %s, unexpected %s" % (path, missing, unexpected))
    model.eval()
    model.meta = d
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--vocab", default="build/tok/vocab.gguf")
    ap.add_argument("--type", choices=("f16", "f32"), default="f16")
    ap.add_argument("--name", default=None)
    ap.add_argument("--description", default=None)
    ap.add_argument("--license", default="PSF-2.0")
    ap.add_argument("--context-length", type=int, default=None,
                    help="llama.context_length (default: the training context)")
    a = ap.parse_args()
    ck = torch.load(a.checkpoint, map_location="cpu")
    c = ck["config"]
    name = a.name or os.path.splitext(os.path.basename(a.out))[0]
    export(ck["state_dict"], c, a.out, a.vocab, a.type, name, a.description, a.license,
           a.context_length)
    n = sum(v.numel() for k, v in ck["state_dict"].items() if not (c["tied"] and k == "head.weight"))
    print("wrote %s: %s, %d parameters, %s, %d layers, dim %d" % (
        a.out, a.type.upper(), n, "tied" if c["tied"] else "untied", c["n_layer"], c["dim"]),
        file=sys.stderr)


if __name__ == "__main__":
    main()
