#!/usr/bin/env bash
# Exports build/train/{target,draft}/model.pt to the bundled GGUF files and
# measures them (the second half of `make models`; also run on its own
# after training).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
desc="A code-completion model for Python, trained by the Specula project on the Python 3.11 standard library (PSF-2.0 licensed source, Debian 12's /usr/lib/python3.11, held-out modules excluded). Weights under the same PSF-2.0 terms."
$py tools/train/export.py build/train/target_cool/model.pt models/specula-code-target-f16.gguf \
    --vocab build/tok/vocab.gguf --type f16 --name "specula-code-target" --context-length 512 \
    --description "$desc Target of the default speculative-decoding pair."
$py tools/train/export.py build/train/draft/model.pt models/specula-code-draft-f16.gguf \
    --vocab build/tok/vocab.gguf --type f16 --name "specula-code-draft" --context-length 512 \
    --description "$desc Draft of the default speculative-decoding pair (1/8 of the target's parameters)."
$py tools/train/plot_loss.py models/loss.png build/train/target/loss.csv:target \
    build/train/target_cool/loss.csv:target-cooldown build/train/draft/loss.csv:draft --title "Specula default pair: training loss"
$py tools/train/evaluate.py --target models/specula-code-target-f16.gguf \
    --draft models/specula-code-draft-f16.gguf --heldout build/corpus/heldout.txt \
    --tokenizer build/tok/spm.model --json build/train/eval.json | tee build/train/eval.txt
