#!/usr/bin/env bash
# `make models`: re-creates the bundled default model pair from this
# machine's own files, with nothing downloaded:
#   corpus (Python 3.11 standard library, held-out modules split off) ->
#   SentencePiece BPE tokenizer (4096) -> vocabulary GGUF ->
#   target (11.2M parameters) and draft (1.3M) trained with PyTorch on the
#   CPU -> F16 GGUF export -> held-out perplexity and draft acceptance ->
#   loss-curve PNG and sample completions.
# Every step is seeded. Needs python3-torch, python3-sentencepiece,
# libopenblas0-pthread (PyTorch is ~15x slower without it) and bin/specula.
# About two hours on 2 cores; the numbers in models/README.md came from the
# run described there. Set TARGET_STEPS / DRAFT_STEPS to change the budget.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
TARGET_STEPS=${TARGET_STEPS:-560}
DRAFT_STEPS=${DRAFT_STEPS:-600}
TARGET_MAX_S=${TARGET_MAX_S:-6000}
DRAFT_MAX_S=${DRAFT_MAX_S:-1500}
mkdir -p build/train models

$py tools/train/corpus.py --out build/corpus
$py tools/train/tokenizer.py --corpus build/corpus/train.txt --out build/tok/spm
$py tools/train/gguf_vocab.py --model build/tok/spm.model --out build/tok/vocab.gguf

$py tools/train/train.py --preset target --steps "$TARGET_STEPS" --ctx 512 --batch 8 \
    --max-seconds "$TARGET_MAX_S" --eval-every 70 --out build/train/target 2>&1 | tee build/train/target.log
$py tools/train/train.py --preset draft --steps "$DRAFT_STEPS" --ctx 512 --batch 8 \
    --max-seconds "$DRAFT_MAX_S" --eval-every 100 --out build/train/draft 2>&1 | tee build/train/draft.log

tools/train/export_pair.sh
