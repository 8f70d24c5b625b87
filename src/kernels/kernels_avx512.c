/* kernels_avx512.c: AVX-512 F/BW/VL/DQ + VNNI level.
 *
 * Quantized matmul: "one lane per block" layout.
 *   _mm512_dpbusd_epi32 adds, in each of 16 int32 lanes, 4 products u8 * s8.
 *   If every lane of every vector of a dot belongs to one quantization block
 *   (32 weights for Q8_0/Q4_0/Q4_K sub-blocks, 16 for Q6_K), the int32 lanes
 *   end up holding whole block sums after E/4 dpbusd, and one cvt + one FMA
 *   per 16 blocks applies the per-block scales: 11 vector ops per 512 MACs of
 *   Q8_0 against ~4 ops per 64 MACs when a vector spans two blocks.
 *   GGUF stores blocks one after the other, so each group of 16 blocks of a
 *   weight row is transposed in registers (4x4 dword transposes within
 *   128-bit lanes + one two-source permute) right after it is loaded, and
 *   that transposed group is used for every token of the tile (1..8 tokens).
 *   The activations are converted once per matmul into the same transposed
 *   layout (scratch), with per-lane scales and the correction terms below.
 *
 *   dpbusd needs one unsigned operand:
 *     Q8_0 weights: w ^ 0x80 = w + 128 (u8); the lane starts at
 *                   -128 * sum(x of the lane's block) so the sum is exact;
 *     Q4_0 weights: the nibble q (u8); start at -8 * sum(x);
 *     Q4_K weights: the nibble q; the min term is applied in f32
 *                   (dmin * m) * (d_x * sum(x)) as ggml does;
 *     Q6_K weights: the 6-bit q (u8); start at -32 * bsum (Q8_K's own sums).
 *   Integer sums per block are exact, so results differ from the reference
 *   only by f32 summation order.
 *
 * Scratch layouts (per token, per group of 16 lanes; every vector 64 bytes):
 *   Q8_0/Q4_0 (512 values): v[8] int8 (v[s] lane j = x[32j+4s..32j+4s+3]),
 *                           init int32[16], dx f32[16]            = 640 B
 *   Q4_K (512 values = 2 super-blocks): v[8] as above, dx f32[16]
 *                           (d of the super-block, /16 in odd lanes), xm f32[16]
 *                           (d * sum of the sub-block's 32 values) = 640 B
 *   Q6_K (256 values): v[4] int8 (v[s] lane g = x[16g+4s..]),
 *                           init int32[16], dx f32[16]            = 384 B
 *   F32/F16/BF16: f32 values (rounded through f16/bf16), 16 per group.
 *
 * Cost per group of 512 weights and row, single core, data in L2 (TSC
 * cycles at 2.3 GHz; bench/kernels/kbench.c has the whole-model numbers):
 *   Q8_0: ~35-50 to unpack + ~11 per token;  Q4_K: ~20 + ~5.7 per token
 *   (k = 2048: 25.5 at 1 token, 48 at 5; dpbusd, 8 per token and group,
 *   issue on port 0 only there, so a token costs at least 8 core cycles).
 * A core streams ~12.5 GB/s from memory, i.e. ~100 cycles per 544 bytes of
 * Q8_0 and ~53 per 288 bytes of Q4_K, so decode is memory-bound and a few
 * extra tokens cost little: the point of the layout.
 * On AMD Zen 5 (family 26, ~3.5 GHz) dpbusd issues 2 per cycle with a
 * latency of ~4, even with its activations as memory operands and 5 chains
 * 8 deep (40 of them in 21 cycles, hand-written loop); the same loop with
 * the Q4_K unpack and the per-token float steps takes 30, the packed Q4_K
 * tile ~47 at 5 tokens (`bin/tilebench q4_K 5`: 27 us for 512 x 2048), and
 * one core streams ~39 GB/s (BENCHMARKS.md, "Kernels"). dpbusd shares its two
 * pipes with every float multiply and FMA (not with cvt): 16 dpbusd take
 * 8 cycles, with 8 FMAs beside them 12 (docs/kernels.md, "What bounds a
 * 5-token verification").
 *
 * Load-time repacking (matmul_pack; model.c repack_weights): Q8_0, Q4_0,
 * Q4_K and Q6_K rows are packed once into what the transposes make of them
 * (layouts: "Packed layouts" in q8_avx512.c, and qk_avx512.c; as many bytes
 * per row as the file's), so a pass loads W[] almost directly; decode and
 * verification (tile_kc) walk each row's K ranges one after another, so
 * every weight row streams in one piece.
 *
 * Float matmul (F16/BF16): up to 16 f32 FMA accumulators, 4 rows x up to 4
 * tokens or 2 rows x 5..8 tokens; each weight vector is converted
 * (f16/bf16 -> f32) once and used by all tokens. F32 weights follow ggml's
 * order instead (f32_finish): 4 accumulators per (row, token).
 *
 * Files: this one holds the level's table (kernel_ops_avx512) and the
 * dispatch of load-time packing; act_avx512.c the Q8_K quantizer and the
 * conversions into the transposed scratch; float_avx512.c the F32, F16 and
 * BF16 kernels; q8_avx512.c the Q8_0 and Q4_0 kernels and qk_avx512.c the
 * Q4_K and Q6_K ones (each with its packing); simd_avx512.h what they
 * share (prefetch, transposes, the tiles' common parts).
 */

#include "kernels/simd_avx512.h"

/* Bytes of a packed row of k weights of type t (layouts: q8_avx512.c,
 * qk_avx512.c). */
size_t avx512_packed_row_size(tensor_type t, int64_t k) {
    const int64_t whole = k / 32 / 16, tail = k / 32 % 16; /* the tail group is compact */
    return t == SP_TYPE_Q8_0 ? (size_t)whole * PACKED_GB_Q8_0 + (size_t)tail * 34
         : t == SP_TYPE_Q4_0 ? (size_t)whole * PACKED_GB_Q4_0 + (size_t)tail * 18
         : t == SP_TYPE_Q5_0 ? (size_t)whole * PACKED_GB_Q5_0 + (size_t)tail * 22
         : t == SP_TYPE_Q4_K ? (size_t)(k / SP_QK_K / 2) * 288 + (size_t)(k / SP_QK_K % 2) * 144
         : t == SP_TYPE_Q6_K ? (size_t)(k / SP_QK_K) * PACKED_GB_Q6_K : 0;
}

static void pack_rows(tensor_type t, const void *src, void *dst, int64_t n_rows, int64_t k) {
    if (t == SP_TYPE_Q4_K) {
        avx512_pack_rows_q4_K(src, dst, n_rows, k);
        return;
    }
    if (t == SP_TYPE_Q6_K) {
        avx512_pack_rows_q6_K(src, dst, n_rows, k);
        return;
    }
    if (t == SP_TYPE_Q5_0) {
        avx512_pack_rows_q5_0(src, dst, n_rows, k);
        return;
    }
    avx512_pack_rows_q8(t, src, dst, n_rows, k);
}

const kernel_ops kernel_ops_avx512 = {
    .name = "avx512",
    .vec_dot = {
        [SP_TYPE_F32] = avx512_vec_dot_f32,
        [SP_TYPE_F16] = avx512_vec_dot_f16,
        [SP_TYPE_BF16] = avx512_vec_dot_bf16,
        [SP_TYPE_Q8_0] = avx2_vec_dot_q8_0,
        [SP_TYPE_Q4_0] = avx2_vec_dot_q4_0,
        [SP_TYPE_Q5_0] = avx2_vec_dot_q5_0,
        [SP_TYPE_Q5_1] = avx2_vec_dot_q5_1,
        [SP_TYPE_Q4_K] = avx2_vec_dot_q4_K,
        [SP_TYPE_Q6_K] = avx2_vec_dot_q6_K,
    },
    .quantize = {
        [SP_TYPE_F32] = ref_quantize_f32,
        [SP_TYPE_F16] = avx512_quantize_f16,
        [SP_TYPE_BF16] = ref_quantize_bf16,
        [SP_TYPE_Q8_0] = avx2_quantize_q8_0,
        [SP_TYPE_Q8_K] = avx512_quantize_q8_K,
    },
    .mm = {
        [SP_TYPE_F32] = &avx512_mm_f32,
        [SP_TYPE_F16] = &avx512_mm_f16,
        [SP_TYPE_BF16] = &avx512_mm_bf16,
        [SP_TYPE_Q8_0] = &avx512_mm_q8_0,
        [SP_TYPE_Q4_0] = &avx512_mm_q4_0,
        [SP_TYPE_Q5_0] = &avx512_mm_q5_0,
        [SP_TYPE_Q5_1] = &avx2_mm_q5_1,
        [SP_TYPE_Q4_K] = &avx512_mm_q4_K,
        [SP_TYPE_Q6_K] = &avx512_mm_q6_K,
    },
    .mm_packed = {
        [SP_TYPE_Q8_0] = &avx512_mm_q8_0p,
        [SP_TYPE_Q4_0] = &avx512_mm_q4_0p,
        [SP_TYPE_Q5_0] = &avx512_mm_q5_0p,
        [SP_TYPE_Q4_K] = &avx512_mm_q4_Kp,
        [SP_TYPE_Q6_K] = &avx512_mm_q6_Kp,
    },
    .packed_row_size = avx512_packed_row_size,
    .pack_rows = pack_rows,
    .no_twin = 1,
};
