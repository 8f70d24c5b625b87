/* unicode.h: the code point classes, UTF-8 handling and GPT-2 byte mapping
 * the tokenizer needs, with llama.cpp's conventions (internal header).
 *
 * llama.cpp decodes UTF-8 leniently (overlong forms and 4-byte leads up to
 * 0xF7 are accepted; an invalid byte becomes U+FFFD and decoding resumes at
 * the next byte) and classifies code points with its own table. Splitting
 * text where llama.cpp splits it requires reproducing both exactly.
 */
#ifndef SP_TOK_UNICODE_H
#define SP_TOK_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Class bits (one general-category class per assigned code point). */
#define SP_UCP_UNDEF 0x001   /* unassigned (Cn), or beyond U+10FFFF */
#define SP_UCP_NUMBER 0x002  /* \p{N} */
#define SP_UCP_LETTER 0x004  /* \p{L} */
#define SP_UCP_SEP 0x008     /* \p{Z} */
#define SP_UCP_MARK 0x010    /* \p{M} */
#define SP_UCP_PUNCT 0x020   /* \p{P} */
#define SP_UCP_SYMBOL 0x040  /* \p{S} */
#define SP_UCP_CONTROL 0x080 /* \p{C} except Cn */
#define SP_UCP_SPACE 0x100   /* \s (Unicode White_Space) */
#define SP_UCP_CATEGORY 0x0ff

typedef struct {
    uint32_t start; /* the run ends where the next entry starts */
    uint16_t flags;
} tok_ucp_range;

extern const tok_ucp_range tok_ucp_ranges[];
extern const int tok_ucp_n_ranges;

#define SP_UNICODE_MAX 0x110000u

/* Class bits of cp (SP_UCP_UNDEF for cp >= 0x110000). */
uint16_t tok_ucp_flags(uint32_t cp);

/* Byte length llama.cpp assigns to a character from its first byte alone
 * (by the high nibble: 0x0-0xB -> 1, 0xC-0xD -> 2, 0xE -> 3, 0xF -> 4). */
static inline size_t tok_utf8_lead_len(unsigned char c) {
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

/* Decodes one code point at s[*off] (*off < n) the way llama.cpp does and
 * advances *off; an invalid sequence yields U+FFFD and advances one byte. */
uint32_t tok_utf8_decode(const char *s, size_t n, size_t *off);

/* Encodes cp (code points above U+10FFFF, which llama.cpp cannot encode,
 * become U+FFFD). Returns the byte count (1..4). */
int tok_utf8_encode(uint32_t cp, char out[4]);

/* GPT-2 bytes_to_unicode: the code point standing for byte b. */
uint32_t tok_byte_to_ucp(uint8_t b);
/* Inverse of tok_byte_to_ucp: the byte, or -1 if cp stands for none. */
int tok_ucp_to_byte(uint32_t cp);

#endif
