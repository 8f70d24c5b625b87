# Sourced by bench/run.sh and bench/peers/run.sh (from the repository root):
# the benchmarks' models, random weights made by bin/mkmodel, built once into
# bench/out/ and reused while the file exists (delete it to rebuild).
#   tinyllama: the TinyLlama-1.1B shape (n_embd 2048, 22 layers, 32 heads /
#              4 KV heads, n_ff 5632) with the 32000-token Llama vocabulary
#   qwen2:     the Qwen2-1.5B shape (n_embd 1536, 28 layers, 12 heads / 2 KV
#              heads, n_ff 8960, q/k/v biases, tied output, RoPE base 1e6)
#              with the 102400-token deepseek-llm vocabulary
bench_vocab_dir=${SPECULA_REF_DIR:-../shared/reference}/vocab
bench_shape_tinyllama=(--arch llama --n-embd 2048 --n-layer 22 --n-head 32 --n-head-kv 4 --n-ff 5632
                       --ctx 2048 --seed 1 --vocab-from "$bench_vocab_dir/ggml-vocab-llama-spm.gguf")
bench_shape_qwen2=(--arch qwen2 --n-embd 1536 --n-layer 28 --n-head 12 --n-head-kv 2 --n-ff 8960
                   --tied --rope-base 1000000 --eps 1e-6 --ctx 2048 --seed 1
                   --vocab-from "$bench_vocab_dir/ggml-vocab-deepseek-llm.gguf")

# bench_model SHAPE TYPE: prints bench/out/SHAPE-shape-TYPE.gguf, building it
# first when it does not exist (mkmodel's output goes to stderr).
bench_model() {
    local -n shape_args=bench_shape_$1
    local f=bench/out/$1-shape-$2.gguf
    if [ ! -s "$f" ]; then
        mkdir -p bench/out
        echo "building $f" >&2
        bin/mkmodel -o "$f.tmp" --type "$2" "${shape_args[@]}" --name "$1-shape-$2" >&2
        mv "$f.tmp" "$f"
    fi
    echo "$f"
}
