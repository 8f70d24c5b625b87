/* block_hash.c: the prefix cache's block identities (block_hash_chain).
 *
 * Block i's hash is SHA-256 over, in this order:
 *   parent      32 bytes: block i-1's hash, or 32 zero bytes for i = 0
 *   tokens      block_size token ids, each as a little-endian int32
 *   extra_len   uint64, little-endian; then the extra_len bytes of extra
 *   salt_len    block 0 only: uint64, little-endian; then the salt bytes
 * The lengths keep (extra, salt) pairs with the same concatenation apart.
 * Since every hash chains its parent, a different salt (block 0) or extra
 * (every block) changes every hash of the chain.
 */
#include "kv/kv_paged.h"

#include <openssl/evp.h>

static void le64(uint8_t out[8], uint64_t x) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(x >> (8 * i));
}

int32_t block_hash_chain(const int32_t *tokens, int32_t n, int32_t block_size,
                            const uint8_t *extra, size_t extra_len,
                            const uint8_t *salt, size_t salt_len, block_digest *out) {
    return block_hash_extend(tokens, n, block_size, extra, extra_len, salt, salt_len, out, 0);
}

int32_t block_hash_extend(const int32_t *tokens, int32_t n, int32_t block_size,
                             const uint8_t *extra, size_t extra_len, const uint8_t *salt,
                             size_t salt_len, block_digest *out, int32_t from) {
    if (n <= 0 || block_size <= 0) return 0;
    int32_t nb = n / block_size;
    if (nb <= from) return nb;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return -1;
    const EVP_MD *md = EVP_sha256();
    static const uint8_t zero[32];
    int32_t done = from;
    for (int32_t b = from; b < nb; b++) {
        uint8_t buf[256]; /* tokens, 64 at a time, as little-endian int32 */
        uint8_t len8[8];
        unsigned int mdlen = 0;
        if (EVP_DigestInit_ex(ctx, md, NULL) != 1) goto fail;
        if (EVP_DigestUpdate(ctx, b == 0 ? zero : out[b - 1].b, 32) != 1) goto fail;
        const int32_t *t = tokens + (size_t)b * block_size;
        for (int32_t i = 0; i < block_size;) {
            int32_t m = SP_MIN(block_size - i, 64);
            for (int32_t j = 0; j < m; j++) {
                uint32_t u = (uint32_t)t[i + j];
                buf[4 * j + 0] = (uint8_t)u;
                buf[4 * j + 1] = (uint8_t)(u >> 8);
                buf[4 * j + 2] = (uint8_t)(u >> 16);
                buf[4 * j + 3] = (uint8_t)(u >> 24);
            }
            if (EVP_DigestUpdate(ctx, buf, (size_t)m * 4) != 1) goto fail;
            i += m;
        }
        le64(len8, extra_len);
        if (EVP_DigestUpdate(ctx, len8, 8) != 1) goto fail;
        if (extra_len && EVP_DigestUpdate(ctx, extra, extra_len) != 1) goto fail;
        if (b == 0) {
            le64(len8, salt_len);
            if (EVP_DigestUpdate(ctx, len8, 8) != 1) goto fail;
            if (salt_len && EVP_DigestUpdate(ctx, salt, salt_len) != 1) goto fail;
        }
        if (EVP_DigestFinal_ex(ctx, out[b].b, &mdlen) != 1 || mdlen != 32) goto fail;
        done++;
    }
    EVP_MD_CTX_free(ctx);
    return done;
fail:
    EVP_MD_CTX_free(ctx);
    return -1;
}
