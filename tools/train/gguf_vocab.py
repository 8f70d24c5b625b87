#!/usr/bin/python3
"""Write a vocabulary-only GGUF (llama-type tokenizer) from a SentencePiece model.

    tools/train/gguf_vocab.py [--model build/tok/spm.model] [--out build/tok/vocab.gguf]

Keys as in llama.cpp's ggml-vocab-llama-spm.gguf: general.architecture =
"llama", general.name, tokenizer.ggml.model = "llama", tokenizer.ggml.pre =
"default", tokens (strings, SentencePiece pieces with U+2581 for space),
scores (f32), token_type (i32: NORMAL=1 UNKNOWN=2 CONTROL=3 USER_DEFINED=4
UNUSED=5 BYTE=6), bos/eos/unknown_token_id (u32), add_bos_token = false (the models are trained on raw
windows of the token stream, never after a BOS, so prompts must not get one),
add_eos_token = false, add_space_prefix = false (the tokenizer is trained with
add_dummy_prefix=False; see tokenizer.py).  tokenizer_kv() is reused by the
model exporter.
"""
import argparse
import os
import sys

import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def token_type(sp, i):
    if sp.is_unknown(i):
        return UNKNOWN
    if sp.is_control(i):
        return CONTROL
    if sp.is_byte(i):
        return BYTE
    if sp.is_unused(i):
        return UNUSED
    return NORMAL  # (no user-defined symbols in this tokenizer)


def tokenizer_kv(model_file):
    sp = spm.SentencePieceProcessor(model_file=model_file)
    n = sp.get_piece_size()
    # (USER_DEFINED cannot be told from NORMAL without protobuf; this
    # tokenizer has no user-defined symbols, see tokenizer.py)
    types = [token_type(sp, i) for i in range(n)]
    # SentencePiece's add_dummy_prefix, observed: does "x" encode with U+2581?
    add_prefix = sp.encode("x", out_type=str)[0].startswith("\u2581")
    return [
        ("tokenizer.ggml.model", "llama"),
        ("tokenizer.ggml.pre", "default"),
        ("tokenizer.ggml.tokens", gguf.ARRAY, gguf.Arr(gguf.STRING, [sp.id_to_piece(i) for i in range(n)])),
        ("tokenizer.ggml.scores", gguf.ARRAY, gguf.Arr(gguf.FLOAT32, [sp.get_score(i) for i in range(n)])),
        ("tokenizer.ggml.token_type", gguf.ARRAY, gguf.Arr(gguf.INT32, types)),
        ("tokenizer.ggml.bos_token_id", gguf.UINT32, sp.bos_id()),
        ("tokenizer.ggml.eos_token_id", gguf.UINT32, sp.eos_id()),
        ("tokenizer.ggml.unknown_token_id", gguf.UINT32, sp.unk_id()),
        ("tokenizer.ggml.add_bos_token", gguf.BOOL, False),
        ("tokenizer.ggml.add_eos_token", gguf.BOOL, False),
        ("tokenizer.ggml.add_space_prefix", gguf.BOOL, add_prefix),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="build/tok/spm.model")
    ap.add_argument("--out", default="build/tok/vocab.gguf")
    ap.add_argument("--name", default="specula-pystdlib-spm4096")
    a = ap.parse_args()
    kv = [("general.architecture", "llama"), ("general.name", a.name)] + tokenizer_kv(a.model)
    gguf.write(a.out, kv)
    print("wrote %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
