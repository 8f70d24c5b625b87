/* unicode.c: code point classes, llama.cpp-compatible UTF-8 decoding and
 * the GPT-2 byte <-> code point mapping. */
#include "tokenizer/unicode.h"

uint16_t tok_ucp_flags(uint32_t cp) {
    if (cp >= SP_UNICODE_MAX) return SP_UCP_UNDEF;
    /* binary search for the last range starting at or before cp */
    int lo = 0, hi = tok_ucp_n_ranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tok_ucp_ranges[mid].start <= cp) lo = mid;
        else hi = mid - 1;
    }
    return tok_ucp_ranges[lo].flags;
}

uint32_t tok_utf8_decode(const char *str, size_t n, size_t *off) {
    const unsigned char *s = (const unsigned char *)str + *off;
    size_t left = n - *off;
    unsigned char c = s[0];
    if (!(c & 0x80)) {
        *off += 1;
        return c;
    }
    /* A lead's continuation bytes are checked, but not overlong forms or the
     * range of the result: llama.cpp accepts those. */
    if (!(c & 0x40)) goto bad; /* stray continuation byte */
    if (!(c & 0x20)) {
        if (left < 2 || (s[1] & 0xc0) != 0x80) goto bad;
        *off += 2;
        return ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
    }
    if (!(c & 0x10)) {
        if (left < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) goto bad;
        *off += 3;
        return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    }
    if (!(c & 0x08)) {
        if (left < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
            (s[3] & 0xc0) != 0x80)
            goto bad;
        *off += 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
               ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
    }
bad:
    *off += 1;
    return 0xFFFD;
}

int tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp <= 0x7f) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp <= 0x7ff) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp <= 0xffff) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    if (cp <= 0x10ffff) {
        out[0] = (char)(0xf0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char)(0x80 | (cp & 0x3f));
        return 4;
    }
    return tok_utf8_encode(0xFFFD, out);
}

/* Bytes that are printable Latin-1 stand for themselves; the other 68 are
 * numbered from U+0100 in byte order. */
static int byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t tok_byte_to_ucp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (int c = 0; c < b; c++)
        if (!byte_is_printable(c)) n++;
    return 256 + n;
}

int tok_ucp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = cp - 256;
    for (int c = 0; c < 256; c++) {
        if (byte_is_printable(c)) continue;
        if (n-- == 0) return c;
    }
    return -1;
}
