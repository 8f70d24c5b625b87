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
#
# The default, SCHEDULE=v2, is the schedule of the shipped pair
# (tools/train/make_models_v2.sh: both models at 2,048 tokens, the draft
# distilled from the target and then trained on the target's own greedy
# output; resumable, and each finished stage comes back from its carry file
# in tools/train/carry/, so with those files it takes minutes).
#
# SCHEDULE=v1 is the 512-token schedule of the v1 pair (models/README.md,
# "The v1 pair"), about two and a half hours on 2 cores: the target's
# cosine schedule spans 560 steps but stops at step 326 (--stop-step,
# TARGET_STOP), and a 40-step cooldown from that checkpoint decays the
# learning rate; the draft trains 400 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${SCHEDULE:-v2}" = v2 ]; then exec tools/train/make_models_v2.sh; fi
py=/usr/bin/python3
TARGET_STOP=${TARGET_STOP:-326}
COOL_STEPS=${COOL_STEPS:-40}
DRAFT_STEPS=${DRAFT_STEPS:-400}
mkdir -p build/train models

$py tools/train/corpus.py --out build/corpus
$py tools/train/tokenizer.py --corpus build/corpus/train.txt --out build/tok/spm
$py tools/train/gguf_vocab.py --model build/tok/spm.model --out build/tok/vocab.gguf

$py tools/train/train.py --preset target --steps 560 --stop-step "$TARGET_STOP" --ctx 512 --batch 8 \
    --eval-every 70 --out build/train/target 2>&1 | tee build/train/target.log
cp build/train/target/model.pt build/train/target/model_phase1.pt
$py tools/train/train.py --preset target --steps "$COOL_STEPS" --ctx 512 --batch 8 --lr 1.2e-3 \
    --min-lr-frac 0.1 --warmup 4 --init build/train/target/model_phase1.pt \
    --step-offset "$TARGET_STOP" --eval-every 20 --out build/train/target_cool 2>&1 | tee build/train/target_cool.log
$py tools/train/train.py --preset draft --steps "$DRAFT_STEPS" --ctx 512 --batch 8 \
    --eval-every 100 --out build/train/draft 2>&1 | tee build/train/draft.log

tools/train/export_pair.sh
