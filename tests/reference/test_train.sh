#!/usr/bin/env bash
# test_train.sh: the training pipeline (tools/train) against the engine, via
# tools/train/roundtrip.py:
#   corpus   corpus.py's split: the documented held-out modules, no held-out
#            file in the train list, no byte-identical files kept twice;
#   export   seeded random models (GQA, tied and untied) exported to F32 GGUF
#            by export.py: the engine's top-8 logprobs for a few prompts
#            match PyTorch's within 1e-3 and the greedy ids agree;
#   shipped  models/*-target*.gguf and *-draft*.gguf (F16; missing is a failure), to
#            2e-2 (the engine rounds activations to f16 for F16 weights).
# Needs Debian's python3-torch and python3-numpy: a missing one is a failure.
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
py=tools/train/roundtrip.py
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "FAIL test_train: /usr/bin/python3 cannot import torch and numpy (install python3-torch)"
    echo "RESULT 0 1"; exit 1
fi
if [ ! -x "$bin" ]; then
    echo "FAIL test_train: engine binary $bin not found (set SPECULA_BIN)"
    echo "RESULT 0 1"; exit 1
fi
OMP_NUM_THREADS=1 run_driver roundtrip.py 0 /usr/bin/python3 "$py" --bin "$bin"
