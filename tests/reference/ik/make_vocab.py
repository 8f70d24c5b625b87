#!/usr/bin/env python3
"""Vocabulary-only GGUF files for the tokenizer tests, written the way
ik_llama.cpp's convert_hf_to_gguf.py writes them, from tokenizer sources kept
in public repositories (no transformers/sentencepiece needed; gguf-py only).

  PYTHONPATH=$IK/gguf-py python3 make_vocab.py KIND OUT.gguf SOURCES...

KIND and SOURCES:
  qwen3        VOCAB_JSON MERGES_TXT   Qwen2/2.5/3 byte-level BPE (vocab.json +
                                       merges.txt, identical across Qwen2..3)
                                       + the Qwen3 added tokens 151643..151668
                                       (tokenizer_config.json of Qwen3), padded to
                                       151936 with [PADn]; pre 'qwen2'
  smollm3      LLAMA3_TIKTOKEN         Llama 3 tiktoken ranks (128000) + 256
                                       special tokens; pre 'smaug-bpe' (what the
                                       converter writes for SmolLM3-3B)
  llama-bpe    LLAMA3_TIKTOKEN         the same ranks as Meta-Llama-3-8B; pre
                                       'llama-bpe' (only to validate the merges
                                       reconstruction against ik's llama-bpe vectors)
  phi-4-mini   O200K_TIKTOKEN          o200k_base ranks (199998) + the Phi-4-mini
                                       special tokens, padded to 200064; pre 'gpt-4o'

For the tiktoken sources the merges are recovered from the ranks exactly as
transformers' TikTokenConverter (convert_slow_tokenizer.py) does when it makes
a tokenizer.json: for every token, every split into two tokens whose
concatenation is the token, ordered by (rank of the token, rank of the left
part, rank of the right part). For Llama 3 this gives the 280147 merges of
Meta's tokenizer.json (checked below).
"""
import json
import sys

import gguf

TT = gguf.TokenType


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


B2U = bytes_to_unicode()


def tok_str(b: bytes) -> str:
    return "".join(B2U[x] for x in b)


def load_tiktoken(path):
    import base64
    ranks = {}
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            t, r = line.split()
            ranks[base64.b64decode(t)] = int(r)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks not contiguous"
    return ranks


def tiktoken_merges(ranks):
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        local = []
        for i in range(1, len(token)):
            l, r = token[:i], token[i:]
            if l in ranks and r in ranks:
                local.append((l, r, rank))
        local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2])
    return [tok_str(l) + " " + tok_str(r) for l, r, _ in merges]


def looks_special(t):
    return (t.startswith("<|") and t.endswith("|>")) or t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") \
        or (t.startswith("<unused") and t.endswith(">"))


def write(out, arch, name, hparams, model, pre, tokens, types, merges=None, scores=None,
          special=None, add_bos=None, add_eos=None):
    w = gguf.GGUFWriter(out, arch)
    w.add_name(name)
    for k, v in hparams.items():
        getattr(w, "add_" + k)(v)
    w.add_file_type(1)  # as the converter's vocab-only output (F16)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if scores is not None:
        w.add_token_scores(scores)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    for k, v in (special or {}).items():
        getattr(w, "add_%s_token_id" % k)(v)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# tokenizer_config.json "added_tokens_decoder" of Qwen3 (Qwen3-4B), id -> (content, special)
QWEN3_ADDED = [
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True), (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True), (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False), (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False), (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False), (151666, "</tool_response>", False),
    (151667, "<think>", False), (151668, "</think>", False),
]


def make_qwen3(out, vocab_json, merges_txt):
    with open(vocab_json, encoding="utf-8") as f:
        vocab = json.load(f)
    n_vocab = 151936
    rev = {i: t for t, i in vocab.items()}
    assert len(rev) == 151643 and max(rev) == 151642
    added = {i: (t, sp) for i, t, sp in QWEN3_ADDED}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in added:
            t, sp = added[i]
            tokens.append(t)
            types.append(TT.CONTROL if sp or looks_special(t) else TT.USER_DEFINED)
        elif i in rev:
            tokens.append(rev[i])
            types.append(TT.NORMAL)
        else:
            tokens.append("[PAD%d]" % i)
            types.append(TT.UNUSED)
    merges = []
    with open(merges_txt, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line or line.startswith("#version"):
                continue
            merges.append(line)
    assert len(merges) == 151387, len(merges)
    hp = {  # Qwen3-4B (config.json): only informative in a vocab-only file
        "context_length": 262144, "embedding_length": 2560, "feed_forward_length": 9728,
        "block_count": 36, "head_count": 32, "head_count_kv": 8,
        "rope_freq_base": 5000000.0, "layer_norm_rms_eps": 1e-6,
        "key_length": 128, "value_length": 128,
    }
    # bos from config.json (151643), eos/pad from tokenizer_config.json,
    # add_bos_token false (tokenizer_config.json of Qwen3)
    write(out, "qwen3", "Qwen3 (vocab only)", hp, "gpt2", "qwen2", tokens, types, merges,
          special={"bos": 151643, "eos": 151645, "pad": 151643}, add_bos=False)


LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                  "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                  "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]  # Llama 3.1/3.2 (HF)
LLAMA3_0_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                    "<|reserved_special_token_3|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|reserved_special_token_4|>", "<|eot_id|>"]  # Meta-Llama-3-8B


def llama3_specials(named):
    out = list(named)
    k = sum(1 for t in named if t.startswith("<|reserved_special_token_"))
    while len(out) < 256:
        out.append("<|reserved_special_token_%d|>" % k)
        k += 1
    return out


def make_llama3_like(out, tiktoken_path, kind):
    ranks = load_tiktoken(tiktoken_path)
    assert len(ranks) == 128000
    base = [None] * len(ranks)
    for b, r in ranks.items():
        base[r] = tok_str(b)
    merges = tiktoken_merges(ranks)
    assert len(merges) == 280147, len(merges)
    if kind == "smollm3":
        sp = llama3_specials(LLAMA3_SPECIAL)
        sp[11], sp[12] = "<|im_start|>", "<|im_end|>"  # SmolLM3's chat tokens (eos 128012)
        hp = {  # SmolLM3-3B
            "context_length": 65536, "embedding_length": 2048, "feed_forward_length": 11008,
            "block_count": 36, "head_count": 16, "head_count_kv": 4,
            "rope_freq_base": 5000000.0, "layer_norm_rms_eps": 1e-6, "rope_dimension_count": 128,
        }
        tokens = base + sp
        types = [TT.NORMAL] * len(base) + [TT.CONTROL] * 256
        write(out, "smollm3", "SmolLM3 (vocab only)", hp, "gpt2", "smaug-bpe", tokens, types,
              merges, special={"eos": 128012, "pad": 128012, "bos": 128000})
    else:
        sp = llama3_specials(LLAMA3_0_SPECIAL)
        hp = {"context_length": 8192, "embedding_length": 4096, "feed_forward_length": 14336,
              "block_count": 32, "head_count": 32, "head_count_kv": 8,
              "rope_freq_base": 500000.0, "layer_norm_rms_eps": 1e-5, "rope_dimension_count": 128}
        tokens = base + sp
        types = [TT.NORMAL] * len(base) + [TT.CONTROL] * 256
        write(out, "llama", "Meta-Llama-3-8B (vocab only)", hp, "gpt2", "llama-bpe", tokens, types,
              merges, special={"bos": 128000, "eos": 128001})


# Phi-4-mini-instruct: o200k_base + its added tokens
PHI4MINI_ADDED = {199999: "<|endoftext|>", 200018: "<|endofprompt|>", 200019: "<|assistant|>",
                  200020: "<|end|>", 200021: "<|user|>", 200022: "<|system|>", 200023: "<|tool|>",
                  200024: "<|/tool|>", 200025: "<|tool_call|>", 200026: "<|/tool_call|>",
                  200027: "<|tool_response|>", 200028: "<|tag|>"}


def make_phi4mini(out, tiktoken_path):
    ranks = load_tiktoken(tiktoken_path)
    assert len(ranks) == 199998
    n_vocab = 200064
    rev = {r: tok_str(b) for b, r in ranks.items()}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in PHI4MINI_ADDED:
            tokens.append(PHI4MINI_ADDED[i])
            types.append(TT.CONTROL)
        elif i in rev:
            tokens.append(rev[i])
            types.append(TT.NORMAL)
        else:
            tokens.append("[PAD%d]" % i)
            types.append(TT.UNUSED)
    merges = tiktoken_merges(ranks)
    hp = {  # Phi-4-mini-instruct
        "context_length": 131072, "embedding_length": 3072, "feed_forward_length": 8192,
        "block_count": 32, "head_count": 24, "head_count_kv": 8,
        "rope_freq_base": 10000.0, "layer_norm_rms_eps": 1e-5, "rope_dimension_count": 96,
    }
    write(out, "phi3", "Phi-4-mini (vocab only)", hp, "gpt2", "gpt-4o", tokens, types, merges,
          special={"bos": 199999, "eos": 199999, "pad": 199999}, add_bos=False, add_eos=False)
    print("phi-4-mini: %d merges" % len(merges), file=sys.stderr)


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    kind, out, srcs = sys.argv[1], sys.argv[2], sys.argv[3:]
    if kind == "qwen3":
        make_qwen3(out, *srcs)
    elif kind in ("smollm3", "llama-bpe"):
        make_llama3_like(out, srcs[0], kind)
    elif kind == "phi-4-mini":
        make_phi4mini(out, srcs[0])
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main()
