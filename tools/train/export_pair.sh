#!/usr/bin/env bash
# Exports build/train/{target,draft}/model.pt to the bundled GGUF files and
# measures them (the second half of `make models`; also run on its own
# after training).
# The environment chooses the run (defaults: the v1 pair, SCHEDULE=v1, 512):
#   TARGET_PT, DRAFT_PT  the checkpoints; CTX_TRAIN  llama.context_length and
#   the evaluation window; LOSS_RUNS  "CSV:LABEL ..." for the loss plot;
#   EVAL_OUT  where eval.json / eval.txt go; MODELS_OUT  where the GGUF files
#   and loss.png go (default models/; a smoke test writes elsewhere);
#   EVAL_ARGS  more evaluate.py options (a smoke test: --max-tokens 4096 ...).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
TARGET_PT=${TARGET_PT:-build/train/target_cool/model.pt}
DRAFT_PT=${DRAFT_PT:-build/train/draft/model.pt}
CTX_TRAIN=${CTX_TRAIN:-512}
LOSS_RUNS=${LOSS_RUNS:-build/train/target/loss.csv:target build/train/target_cool/loss.csv:target-cooldown build/train/draft/loss.csv:draft}
EVAL_OUT=${EVAL_OUT:-build/train/eval}
MODELS_OUT=${MODELS_OUT:-models}
mkdir -p "$MODELS_OUT"
desc="A code-completion model for Python, trained by the Specula project on the Python 3.11 standard library (PSF-2.0 licensed source, Debian 12's /usr/lib/python3.11, held-out modules excluded). Weights under the same PSF-2.0 terms."
$py tools/train/export.py "$TARGET_PT" "$MODELS_OUT/specula-code-target-f16.gguf" \
    --vocab build/tok/vocab.gguf --type f16 --name "specula-code-target" --context-length "$CTX_TRAIN" \
    --description "$desc Target of the default speculative-decoding pair."
$py tools/train/export.py "$DRAFT_PT" "$MODELS_OUT/specula-code-draft-f16.gguf" \
    --vocab build/tok/vocab.gguf --type f16 --name "specula-code-draft" --context-length "$CTX_TRAIN" \
    --description "$desc Draft of the default speculative-decoding pair (1/8 of the target's parameters)."
# shellcheck disable=SC2086  # LOSS_RUNS and EVAL_ARGS are lists
$py tools/train/plot_loss.py "$MODELS_OUT/loss.png" $LOSS_RUNS --height 560 --title "Specula default pair: training loss"
$py tools/train/evaluate.py --target "$MODELS_OUT/specula-code-target-f16.gguf" \
    --draft "$MODELS_OUT/specula-code-draft-f16.gguf" --heldout build/corpus/heldout.txt \
    --tokenizer build/tok/spm.model --ctx "$CTX_TRAIN" ${EVAL_ARGS:-} --json "$EVAL_OUT.json" | tee "$EVAL_OUT.txt"
