/* kernels_avx2.c: AVX2 + FMA + F16C level (built with -mavx2 -mfma -mf16c).
 *
 * Quantized products use the natural GGUF layouts for the weights (matrices
 * of 8-row multiples aside: packed at load, 8 rows to a vector) and, for the
 * activations, their vec_dot_type blocks in vec_dot, and in the matmul
 * tiles of Q8_0, Q4_K and Q6_K the same values converted once per matmul
 * into an aligned scratch of the tile's own (Q8A_*, Q8KA_*, Q8KB_*,
 * Q8KC_*: simd_avx2.h); _mm256_maddubs_epi16 multiplies u8 by s8 and adds
 * pairs into s16 with saturation; every use stays inside s16:
 *   Q8_0 x Q8_0: |w| * sign(x, w)       <= 2 * 127 * 127 = 32258
 *   Q4_0 x Q8_0: |q-8| * sign(x, q-8)   <= 2 * 8 * 127
 *   Q4_K x Q8_K: q (0..15) * x          <= 2 * 15 * 128 (8 such pairs
 *                                          summed in the packed Q4_K tile)
 *   Q6_K x Q8_K: q (0..63) * x          <= 2 * 63 * 127 = 16002 (4 such
 *                                          pairs summed with wrap-around in
 *                                          the packed Q6_K tile: see there)
 * Per block (or super-block) the integer sums are exact, then scaled in f32.
 *
 * Matmul tiles: one weight row at a time against up to 8 tokens (4 for the
 * float and 8-row Q4_0 tiles); each weight block is loaded and unpacked
 * once and used for every token of the tile.
 * This level is the fallback for CPUs without AVX-512 VNNI; the avx512 level
 * is the fast one.
 *
 * Order: this level (and kernels_ref.c, lane by lane) sums every dot as
 * llama.cpp's CPU backend does for a prompt (ggml's AVX2 quantized dots,
 * its repacked Q4_0 kernel for 8-row multiples, tinyBLAS for F16/BF16):
 * the integer lanes hold the same sums as ggml's, scales are applied with
 * the same FMAs and lanes are added in the same order, and K is never cut
 * into ranges (whole_k), so on the random-weight reference models, where a
 * single rounding can flip an activation's quantization, its tokens are
 * llama.cpp's (tests/reference/test_reference.c). The exception: Q8_0,
 * Q4_K and Q6_K matrices of 8-row multiples (all of a model's, in
 * practice) sum each block's or super-block's integers whole and then
 * apply its scales, one FMA per row ("the row-sum order": q8_avx2.c,
 * qk_avx2.c), packed at load: on TinyLlama's shape (bin/bench, Zen 3) it
 * gives Q8_0 prefill 115 tokens/s against ggml's order's 70 and a 5-token
 * verification 49-50 ms against 81-83, Q4_K_M prefill 186-192 against 114
 * and its verification 32 ms against 50. Their plain-C twin is
 * matmul_ref_level("avx2"); on the random Q8_0 reference model 3 records
 * flip at llama.cpp margins of 0.01-0.27 nats (tests/known_failures). The
 * avx512 level keeps a faster order of its own for every type
 * (kernels_avx512.c).
 *
 * Files: this one holds the level's table (kernel_ops_avx2) and the
 * load-time packing; act_avx2.c the activation quantizers and the
 * conversions into the tiles' scratch; float_avx2.c the F32, F16 and BF16
 * kernels; q8_avx2.c the Q8_0 and Q4_0 kernels and qk_avx2.c the Q4_K and
 * Q6_K ones (each with its packed layouts); simd_avx2.h what they share.
 */

#include "kernels/simd_avx2.h"

/* Load-time repacking at this level: Q8_0, Q4_0, Q4_K and Q6_K matrices of
 * 8-row multiples (kernel_ops.packed_rows_multiple), each block of 8
 * rows into one packed block (put: row i's share; the layouts are at the
 * types' kernels, q8_avx2.c and qk_avx2.c). */
static const struct {
    int64_t qk;    /* weights per block */
    size_t bytes;  /* a file block */
    size_t packed; /* a packed block of 8 rows */
    void (*put)(const void *blk, uint8_t *o, int i);
} PACK8[SP_TYPE_COUNT] = {
    [SP_TYPE_Q8_0] = {32, sizeof(block_q8_0), Q8P8_BLOCK, avx2_put_q8_0},
    [SP_TYPE_Q4_0] = {32, sizeof(block_q4_0), Q4_0R8_WBLOCK, avx2_put_q4_0},
    [SP_TYPE_Q4_K] = {256, sizeof(block_q4_K), Q4KP8_BLOCK, avx2_put_q4_K},
    [SP_TYPE_Q6_K] = {256, sizeof(block_q6_K), Q6KP8_BLOCK, avx2_put_q6_K},
};

static size_t packed_row_size_avx2(tensor_type t, int64_t k) {
    SP_ASSERT(PACK8[t].put);
    return (size_t)(k / PACK8[t].qk) * (PACK8[t].packed / 8);
}

static void pack_rows_avx2(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k) {
    SP_ASSERT(PACK8[t].put && n_rows % 8 == 0);
    const int64_t nb = k / PACK8[t].qk;
    const size_t rs = (size_t)nb * PACK8[t].bytes;
    for (int64_t r = 0; r < n_rows; r += 8) {
        const uint8_t *g = (const uint8_t *)src + r * rs;
        uint8_t *o = (uint8_t *)dst + r * packed_row_size_avx2(t, k);
        for (int64_t b = 0; b < nb; b++, o += PACK8[t].packed)
            for (int i = 0; i < 8; i++) PACK8[t].put(g + i * rs + b * PACK8[t].bytes, o, i);
    }
}

const kernel_ops kernel_ops_avx2 = {
    .name = "avx2",
    .vec_dot = {
        [SP_TYPE_F32] = avx2_vec_dot_f32,
        [SP_TYPE_F16] = avx2_vec_dot_f16,
        [SP_TYPE_BF16] = avx2_vec_dot_bf16,
        [SP_TYPE_Q8_0] = avx2_vec_dot_q8_0,
        [SP_TYPE_Q4_0] = avx2_vec_dot_q4_0,
        [SP_TYPE_Q5_0] = avx2_vec_dot_q5_0,
        [SP_TYPE_Q5_1] = avx2_vec_dot_q5_1,
        [SP_TYPE_Q4_K] = avx2_vec_dot_q4_K,
        [SP_TYPE_Q6_K] = avx2_vec_dot_q6_K,
    },
    .quantize = {
        [SP_TYPE_F32] = ref_quantize_f32,
        [SP_TYPE_F16] = avx2_quantize_f16,
        [SP_TYPE_BF16] = ref_quantize_bf16,
        [SP_TYPE_Q8_0] = avx2_quantize_q8_0,
        [SP_TYPE_Q8_K] = avx2_quantize_q8_K,
    },
    .mm = {
        [SP_TYPE_F32] = &avx2_mm_f32,
        [SP_TYPE_F16] = &avx2_mm_f16,
        [SP_TYPE_BF16] = &avx2_mm_bf16,
        [SP_TYPE_Q8_0] = &avx2_mm_q8_0,
        [SP_TYPE_Q4_0] = &avx2_mm_q4_0,
        [SP_TYPE_Q5_0] = &avx2_mm_q5_0,
        [SP_TYPE_Q5_1] = &avx2_mm_q5_1,
        [SP_TYPE_Q4_K] = &avx2_mm_q4_K,
        [SP_TYPE_Q6_K] = &avx2_mm_q6_K,
    },
    .mm_rows8 = {
        [SP_TYPE_Q8_0] = &avx2_mm_q8_0r8,
        [SP_TYPE_Q4_0] = &avx2_mm_q4_0r8,
        [SP_TYPE_Q4_K] = &avx2_mm_q4_Krs,
        [SP_TYPE_Q6_K] = &avx2_mm_q6_Krs,
    },
    .mm_packed = {
        [SP_TYPE_Q8_0] = &avx2_mm_q8_0p8,
        [SP_TYPE_Q4_0] = &avx2_mm_q4_0p8,
        [SP_TYPE_Q4_K] = &avx2_mm_q4_Kp8,
        [SP_TYPE_Q6_K] = &avx2_mm_q6_Kp8,
    },
    .packed_row_size = packed_row_size_avx2,
    .pack_rows = pack_rows_avx2,
    .packed_rows_multiple = 8,
    .twin_rows8 = {
        [SP_TYPE_Q8_0] = &ref_mm_q8_0_rows8,
        [SP_TYPE_Q4_K] = &ref_mm_q4_K_rows8,
        [SP_TYPE_Q6_K] = &ref_mm_q6_K_rows8,
    },
};
