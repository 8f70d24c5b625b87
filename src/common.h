/* common.h: small helpers shared by every part of the library.
 *
 * Nothing here allocates. The fp16/bf16 conversions are bit-exact with the
 * IEEE rules GGUF files and llama.cpp use (round to nearest even).
 */
#ifndef SP_COMMON_H
#define SP_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An invariant that stays checked in release builds: a violated invariant is
 * a bug in Specula, and continuing would compute garbage silently. */
#define SP_ASSERT(c)                                                           \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "specula: invariant failed at %s:%d: %s\n",       \
                    __FILE__, __LINE__, #c);                                   \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define SP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SP_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Writes a formatted message into err[errlen] (if err is non-NULL). Library
 * functions report failure this way and return NULL or a negative status. */
static inline void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

typedef uint16_t f16_t;  /* IEEE binary16 bits */
typedef uint16_t bf16_t; /* bfloat16 bits */

static inline float f16_to_f32(f16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalize */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline f16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (f16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (f16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (f16_t)sign; /* < 2^-25: rounds to 0 */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (f16_t)(sign | r);
    }
    uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
    uint32_t rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (f16_t)(sign | r);
}

static inline float bf16_to_f32(bf16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline bf16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (bf16_t)((x >> 16) | 64); /* quiet nan */
    return (bf16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* Monotonic clock in seconds. */
double time_s(void);
static inline double time_ms(void) { return time_s() * 1e3; }

/* SplitMix64 (Steele, Lea, Flood 2014): advances *x by the golden-ratio
 * increment and returns the next output; seeds the samplers' xoshiro state,
 * the model builder's weights and the benchmarks' workloads. */
#define SP_GOLDEN64 0x9E3779B97F4A7C15ull
static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += SP_GOLDEN64);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Byte length (1..4) of the valid UTF-8 character at s[0..n) (n >= 1): 0 if it is
 * truncated, malformed, overlong, a surrogate or above U+10FFFF. */
int utf8_len(const unsigned char *s, size_t n);

/* Parses a whole decimal integer in [lo, hi] / a finite decimal number (a
 * command-line value); false on garbage, trailing text or out of range. */
bool parse_long(const char *s, long lo, long hi, long *out);
bool parse_double(const char *s, double *out);

#endif
