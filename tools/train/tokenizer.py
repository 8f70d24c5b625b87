#!/usr/bin/python3
"""Train the project's SentencePiece BPE tokenizer on the training split.

    tools/train/tokenizer.py [--corpus build/corpus/train.txt] [--out build/tok/spm]

Writes OUT.model and OUT.vocab.  Needs Debian's python3-sentencepiece
(run with /usr/bin/python3).

Settings and why:
  model_type=bpe, vocab_size=4096, byte_fallback=True: BPE with 4096 tokens;
    every byte that no piece covers becomes one <0xNN> token, so nothing is
    <unk>.
  normalization_rule_name=identity, remove_extra_whitespaces=False: the text
    the model sees is exactly the source (spaces are still escaped as U+2581,
    which both SentencePiece and the engine undo on decode).
  add_dummy_prefix=False, and the GGUF says tokenizer.ggml.add_space_prefix =
    false: llama.cpp's SPM path (and the engine's) prepends U+2581 to the text
    when add_space_prefix is true, SentencePiece when add_dummy_prefix is; for
    code a phantom leading space would change the first token of every prompt
    and make "decode(encode(x)) == x" false, so both are off.
  allow_whitespace_only_pieces=True: runs of spaces (indentation) become
    pieces like U+2581 x4 / x8 instead of one token per space.
  split_digits=True: no multi-digit pieces (numbers spelled digit by digit).
  character_coverage=0.9999: the rarest characters (a few non-ASCII letters
    in comments) are left to byte fallback instead of taking vocab slots.
  Training sentences are the corpus's lines without their "\n" (SentencePiece
    trains line by line), so "\n" is never part of a learned piece: it is the
    byte token <0x0A>, one token per newline.  Empty lines are skipped.
  unk=0 <unk>, bos=1 <s>, eos=2 </s>, no pad: the llama layout.
  No user_defined_symbols: llama.cpp matches USER_DEFINED tokens against the
    raw (unescaped) text before SPM, so a whitespace symbol stored as U+2581s
    would never match there, and SentencePiece and the engine would disagree.
All input lines are used (no sampling), and SentencePiece's BPE trainer is
deterministic for a fixed input, so the model is reproducible.
"""
import argparse
import os
import sys

import sentencepiece as spm

SETTINGS = dict(
    model_type="bpe",
    vocab_size=4096,
    byte_fallback=True,
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    add_dummy_prefix=False,
    allow_whitespace_only_pieces=True,
    split_digits=True,
    split_by_whitespace=True,
    character_coverage=0.9999,
    unk_id=0,
    bos_id=1,
    eos_id=2,
    pad_id=-1,
    max_sentence_length=1 << 14,
    input_sentence_size=0,
    shuffle_input_sentence=False,
    num_threads=2,
)


def lines(path):
    with open(path, encoding="utf-8", newline="") as fh:
        for line in fh:
            line = line[:-1] if line.endswith("\n") else line
            if line:
                yield line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="build/corpus/train.txt")
    ap.add_argument("--out", default="build/tok/spm", help="model prefix")
    ap.add_argument("--vocab-size", type=int, default=SETTINGS["vocab_size"])
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    settings = dict(SETTINGS, vocab_size=a.vocab_size)
    spm.SentencePieceTrainer.train(sentence_iterator=lines(a.corpus), model_prefix=a.out,
                                   minloglevel=1, **settings)
    sp = spm.SentencePieceProcessor(model_file=a.out + ".model")
    print("trained %s.model: %d pieces" % (a.out, sp.get_piece_size()), file=sys.stderr)


if __name__ == "__main__":
    main()
