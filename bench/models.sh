# Sourced by bench/run.sh and bench/peers/run.sh (from the repository root):
# the benchmarks' models, random weights made by bin/mkmodel, built once into
# bench/out/ and reused while the file exists (delete it to rebuild).
#   tinyllama: the TinyLlama-1.1B shape (n_embd 2048, 22 layers, 32 heads /
#              4 KV heads, n_ff 5632) with the 32000-token Llama vocabulary
#   qwen2:     the Qwen2-1.5B shape (n_embd 1536, 28 layers, 12 heads / 2 KV
#              heads, n_ff 8960, q/k/v biases, tied output, RoPE base 1e6)
#              with the 102400-token deepseek-llm vocabulary
# The model families' shapes, from the published config.json files (and what
# ik_llama.cpp's hparams switch names them: 28 layers x n_embd 1024 = 0.6B,
# 28 x 2048 = 1.7B; gemma3 26 layers = its "2B" type, the 1B model):
#   qwen3-0.6b: n_embd 1024, 28 layers, 16 heads / 8 KV heads, head_dim 128,
#               n_ff 3072, per-head q/k RMSNorm, tied, RoPE base 1e6, eps 1e-6
#   qwen3-1.7b: n_embd 2048, 28 layers, 16 / 8 heads, head_dim 128, n_ff 6144,
#               tied, RoPE base 1e6, eps 1e-6
#               both with Qwen's own 151936-token vocabulary
#               (tests/data/vocab/ggml-vocab-qwen3.gguf; when that file is
#               missing, the 50257-token GPT-2 one, with a note)
#   gemma3-1b:  n_embd 1152, 26 layers, 4 heads / 1 KV head, head_dim 256,
#               n_ff 6912, 5 sliding-window (512) layers per global one, RoPE
#               base 1e6 (global) / 1e4 (sliding), tied, eps 1e-6; with the
#               32000-token Llama SentencePiece vocabulary: no Gemma 3
#               vocabulary is available here, so its output matmul (and
#               embedding table) is 8x smaller than the real 262144 tokens'
# All at --ctx 2048 (the benchmarks' contexts stay below it). Their F16 file
# is bin/mkmodel's; every other type is made from it by ik_llama.cpp's
# llama-quantize, as a published GGUF would be (Q4_K_M: its mix of Q4_K with
# Q6_K for output/token_embd and some attn_v/ffn_down, and its fallbacks for
# rows that are not a multiple of 256: Gemma 3's 1152-wide rows get Q5_0 for
# Q4_K, Q5_1 for Q5_K and Q8_0 for Q6_K). llama-quantize is $IK_QUANTIZE, by default the
# llama-quantize beside $IK_BENCH; its log is kept as FILE.gguf.log.
bench_vocab_dir=${SPECULA_REF_DIR:-../shared/reference}/vocab
bench_shape_tinyllama=(--arch llama --n-embd 2048 --n-layer 22 --n-head 32 --n-head-kv 4 --n-ff 5632
                       --ctx 2048 --seed 1 --vocab-from "$bench_vocab_dir/ggml-vocab-llama-spm.gguf")
bench_shape_qwen2=(--arch qwen2 --n-embd 1536 --n-layer 28 --n-head 12 --n-head-kv 2 --n-ff 8960
                   --tied --rope-base 1000000 --eps 1e-6 --ctx 2048 --seed 1
                   --vocab-from "$bench_vocab_dir/ggml-vocab-deepseek-llm.gguf")
bench_qwen3_vocab=tests/data/vocab/ggml-vocab-qwen3.gguf
[ -s "$bench_qwen3_vocab" ] || bench_qwen3_vocab=$bench_vocab_dir/ggml-vocab-gpt-2.gguf
bench_shape_qwen3_0_6b=(--arch qwen3 --n-embd 1024 --n-layer 28 --n-head 16 --n-head-kv 8 --head-dim 128
                        --n-ff 3072 --tied --rope-base 1000000 --eps 1e-6 --ctx 2048 --seed 1
                        --vocab-from "$bench_qwen3_vocab")
bench_shape_qwen3_1_7b=(--arch qwen3 --n-embd 2048 --n-layer 28 --n-head 16 --n-head-kv 8 --head-dim 128
                        --n-ff 6144 --tied --rope-base 1000000 --eps 1e-6 --ctx 2048 --seed 1
                        --vocab-from "$bench_qwen3_vocab")
bench_shape_gemma3_1b=(--arch gemma3 --n-embd 1152 --n-layer 26 --n-head 4 --n-head-kv 1 --head-dim 256
                       --n-ff 6912 --swa 512 --tied --rope-base 1000000 --eps 1e-6 --ctx 2048 --seed 1
                       --vocab-from "$bench_vocab_dir/ggml-vocab-llama-spm.gguf")
# Qwen3-30B-A3B's shape (128 experts, 8 per token, experts of 768) with 12
# of its 48 layers: each layer, and so what a pass of k tokens costs beside
# one token's, is the real model's; a quarter of its 30.5B weights (4.4 GB
# in Q4_K_M). Its files are mkmodel's own, Q4_K_M included (an F16 file to
# quantize from would be 15 GB).
bench_shape_qwen3_30b_a3b_l12=(--arch qwen3moe --n-embd 2048 --n-layer 12 --n-head 32 --n-head-kv 4
                               --head-dim 128 --n-ff 6144 --n-expert 128 --n-expert-used 8 --n-ff-exp 768
                               --rope-base 1000000 --eps 1e-6 --ctx 4096 --seed 1
                               --vocab-from "$bench_qwen3_vocab")
# the shapes whose quantized files come from ik_llama.cpp's llama-quantize
bench_ik_quantized=" qwen3-0.6b qwen3-1.7b gemma3-1b "
# llama-quantize's extra arguments for one shape and type (SHAPE_TYPE, the
# shape as in the variables above). Gemma 3's Q4_K_M: where mainline
# llama.cpp falls back from Q5_K to Q5_1 (the attn_v of the layers below),
# ik's llama-quantize writes a type of its own (Q6_0) that only ik reads;
# here they are Q5_1, as in the files people download.
bench_quantize_gemma3_1b_q4_k_m=(--custom-q
    'blk\.(3|4|6|7|9|10|12|13|15|16|18|19|21)\.attn_v\.weight=q5_1')
# each shape's default types in bench/peers/run.sh (BENCH_PEERS_TYPES overrides)
bench_types_tinyllama=(q8_0 q4_k_m q4_0 q6_k)
bench_types_qwen2=(q8_0 q4_k_m q4_0 q6_k)
bench_types_qwen3_0_6b=(q8_0 q4_k_m)
bench_types_qwen3_1_7b=(q8_0 q4_k_m)
bench_types_gemma3_1b=(q8_0 q4_k_m)
bench_types_qwen3_30b_a3b_l12=(q4_k_m)

# bench_model SHAPE TYPE: prints bench/out/SHAPE-shape-TYPE.gguf, building it
# first when it does not exist (mkmodel's and llama-quantize's output goes to
# stderr or FILE.log); returns 1, with a message, when it cannot.
bench_model() {
    local v=${1//[.-]/_} # the shape's name in the variables above
    if ! declare -p "bench_shape_$v" > /dev/null 2>&1; then
        echo "bench_model: unknown shape $1" >&2
        return 1
    fi
    local -n shape_args=bench_shape_$v
    local f=bench/out/$1-shape-$2.gguf
    if [ ! -s "$f" ]; then
        mkdir -p bench/out
        if [[ $bench_ik_quantized == *" $1 "* && $2 != f16 && $2 != f32 ]]; then
            local src q=${IK_QUANTIZE:-}
            src=$(bench_model "$1" f16) || return 1
            [ -n "$q" ] || [ -z "${IK_BENCH:-}" ] || q=$(dirname "$IK_BENCH")/llama-quantize
            if [ -z "$q" ] || [ ! -x "$q" ]; then
                echo "bench_model: $f is made by ik_llama.cpp's llama-quantize:" \
                    "set IK_QUANTIZE (or IK_BENCH, with llama-quantize beside it)" >&2
                return 1
            fi
            local xv=bench_quantize_${v}_${2//[.-]/_} extra=()
            if declare -p "$xv" > /dev/null 2>&1; then
                local -n xr=$xv
                extra=("${xr[@]}")
            fi
            echo "building $f ($q ${extra[*]} ${src##*/} ${2^^})" >&2
            if ! "$q" "${extra[@]}" "$src" "$f.tmp" "${2^^}" > "$f.log" 2>&1; then
                tail -n 20 "$f.log" >&2
                echo "bench_model: llama-quantize failed (log: $f.log)" >&2
                rm -f "$f.tmp"
                return 1
            fi
        else
            echo "building $f" >&2
            [[ $1 == qwen3* && $bench_qwen3_vocab != tests/data/* ]] &&
                echo "note: $bench_qwen3_vocab stands in for the missing Qwen3 vocabulary" >&2
            bin/mkmodel -o "$f.tmp" --type "$2" "${shape_args[@]}" --name "$1-shape-$2" >&2 || return 1
        fi
        mv "$f.tmp" "$f"
    fi
    echo "$f"
}
