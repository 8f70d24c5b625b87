/* types.c: the traits of every GGML type id GGUF files may carry.
 *
 * Block sizes and bytes are GGML's (ggml-common.h, Feb 2025), so a GGUF
 * reader can validate the size of any valid tensor even when this build has
 * no kernels for its type (supported == false). Ids that GGML retired
 * (4, 5: Q4_2/Q4_3; 31..33, 36..38: the interleaved Q4_0/IQ4_NL variants
 * replaced by run-time repacking) have no traits.
 */
#include "kernels/kernels.h"

#define T_(id, nm, blk, bytes, sup, vdt) [id] = {nm, blk, bytes, sup, vdt}

static const type_traits TYPE_TRAITS[SP_TYPE_COUNT] = {
    T_(SP_TYPE_F32, "f32", 1, 4, true, SP_TYPE_F32),
    T_(SP_TYPE_F16, "f16", 1, 2, true, SP_TYPE_F16),
    T_(SP_TYPE_Q4_0, "q4_0", 32, 18, true, SP_TYPE_Q8_0),
    T_(3, "q4_1", 32, 20, false, 9),               /* d, m (f16), 16 nibble bytes; dots with q8_1 */
    T_(SP_TYPE_Q5_0, "q5_0", 32, 22, true, SP_TYPE_Q8_0),
    T_(SP_TYPE_Q5_1, "q5_1", 32, 24, true, SP_TYPE_Q8_0), /* Q8_0 activations here, not ggml's Q8_1 */
    T_(SP_TYPE_Q8_0, "q8_0", 32, 34, true, SP_TYPE_Q8_0),
    T_(9, "q8_1", 32, 36, false, 9),               /* d, s (f16), qs[32] */
    T_(10, "q2_K", 256, 84, false, SP_TYPE_Q8_K),  /* scales[16], qs[64], d, dmin */
    T_(11, "q3_K", 256, 110, false, SP_TYPE_Q8_K), /* hmask[32], qs[64], scales[12], d */
    T_(SP_TYPE_Q4_K, "q4_K", 256, 144, true, SP_TYPE_Q8_K),
    T_(13, "q5_K", 256, 176, false, SP_TYPE_Q8_K), /* d, dmin, scales[12], qh[32], qs[128] */
    T_(SP_TYPE_Q6_K, "q6_K", 256, 210, true, SP_TYPE_Q8_K),
    /* activation-only: quantize_row / dequantize_row work on it */
    T_(SP_TYPE_Q8_K, "q8_K", 256, 292, false, SP_TYPE_Q8_K),
    T_(16, "iq2_xxs", 256, 66, false, SP_TYPE_Q8_K),
    T_(17, "iq2_xs", 256, 74, false, SP_TYPE_Q8_K),
    T_(18, "iq3_xxs", 256, 98, false, SP_TYPE_Q8_K),
    T_(19, "iq1_s", 256, 50, false, SP_TYPE_Q8_K),
    T_(20, "iq4_nl", 32, 18, false, SP_TYPE_Q8_0),
    T_(21, "iq3_s", 256, 110, false, SP_TYPE_Q8_K),
    T_(22, "iq2_s", 256, 82, false, SP_TYPE_Q8_K),
    T_(23, "iq4_xs", 256, 136, false, SP_TYPE_Q8_K),
    T_(24, "i8", 1, 1, false, 24),
    T_(25, "i16", 1, 2, false, 25),
    T_(26, "i32", 1, 4, false, 26),
    T_(27, "i64", 1, 8, false, 27),
    T_(28, "f64", 1, 8, false, 28),
    T_(29, "iq1_m", 256, 56, false, SP_TYPE_Q8_K),
    T_(SP_TYPE_BF16, "bf16", 1, 2, true, SP_TYPE_BF16),
    T_(34, "tq1_0", 256, 54, false, SP_TYPE_Q8_K),
    T_(35, "tq2_0", 256, 66, false, SP_TYPE_Q8_K),
};

const type_traits *type_info(int type) {
    if (type < 0 || type >= SP_TYPE_COUNT) return NULL;
    const type_traits *t = &TYPE_TRAITS[type];
    return t->name ? t : NULL;
}

size_t row_size(tensor_type t, int64_t n) {
    const type_traits *tt = type_info((int)t);
    if (!tt || n < 0 || n % tt->blck != 0) return 0;
    return (size_t)(n / tt->blck) * tt->block_bytes;
}
