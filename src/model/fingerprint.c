/* fingerprint.c: what identifies a model, for the prefix cache's keys.
 *
 *   model_fingerprint  sampled: the hyperparameters, one norm, and the
 *                         first and last 4 KiB of every matrix. It costs
 *                         microseconds at every engine start and namespaces
 *                         the RAM prefix cache, which lives and dies with
 *                         one engine on one model; it does not prove that
 *                         two files hold the same weights (a change in the
 *                         middle of a matrix goes unseen).
 *   model_file_hash    SHA-256 of every byte of the file: header,
 *                         metadata and tokenizer, every tensor. The disk
 *                         tier's rows outlive the process and are found by
 *                         whatever model a later server loads, so it keys
 *                         them on this (mixed with the sampled one). It
 *                         reads the whole file, so only engines with
 *                         --kv-disk ask for it, and the tier caches it by
 *                         the file's identity (src/kv/disk_hash.c).
 */
#include <openssl/evp.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "model/model.h"

static void fp_weight(EVP_MD_CTX *h, const model_weight *w) {
    size_t n = row_size(w->type, w->n_in) * (size_t)w->n_out, part = n < 8192 ? n : 4096;
    EVP_DigestUpdate(h, &w->type, sizeof(w->type));
    EVP_DigestUpdate(h, &n, sizeof(n));
    EVP_DigestUpdate(h, w->data, part);
    if (n > part) EVP_DigestUpdate(h, (const char *)w->data + n - part, part);
}

void model_fingerprint(const sp_model *m, uint8_t out[32]) {
    const sp_model_info *i = &m->info;
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    SP_ASSERT(h && EVP_DigestInit_ex(h, EVP_sha256(), NULL) == 1);
    EVP_DigestUpdate(h, i->arch, strlen(i->arch));
    int32_t dims[] = {i->n_vocab, i->n_embd, i->n_layer, i->n_head, i->n_head_kv, i->head_dim,
                      i->n_ff};
    EVP_DigestUpdate(h, dims, sizeof(dims));
    float fl[] = {i->rope_base, i->rope_freq_scale, i->norm_eps};
    EVP_DigestUpdate(h, fl, sizeof(fl));
    fp_weight(h, &m->tok_embd);
    fp_weight(h, &m->output);
    for (int32_t l = 0; m->layers && l < i->n_layer; l++) {
        model_layer *y = &m->layers[l];
        model_weight *ws[MODEL_LAYER_MATS];
        model_layer_mats(y, ws);
        for (int k = 0; k < MODEL_LAYER_MATS; k++)
            if (ws[k]->data) fp_weight(h, ws[k]);
        EVP_DigestUpdate(h, y->attn_norm, (size_t)i->n_embd * sizeof(float));
    }
    unsigned int len = 32;
    EVP_DigestFinal_ex(h, out, &len);
    EVP_MD_CTX_free(h);
}

/* Hashes the mapping the weights are read from, so the hash is of the bytes
 * this process runs on. Reading it maps every page of the file into the
 * process; when the weights were repacked (their file pages released at
 * load) each hashed chunk is released again, so resident memory stays what
 * loading left (a page used again, the token table's, comes back from the
 * page cache with a minor fault). */
int model_file_hash(const sp_model *m, uint8_t out[32]) {
    const uint8_t *p = gguf_file_bytes(m->gguf);
    const size_t n = gguf_file_size(m->gguf), chunk = (size_t)64 << 20;
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    int rc = -1;
    if (!h || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1) goto out;
    for (size_t off = 0; off < n; off += chunk) { /* the mapping and chunk are page-aligned */
        const size_t len = n - off < chunk ? n - off : chunk;
        if (EVP_DigestUpdate(h, p + off, len) != 1) goto out;
        if (m->packed) madvise((void *)(p + off), len, MADV_DONTNEED);
    }
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(h, out, &len) == 1 && len == 32) rc = 0;
out:
    EVP_MD_CTX_free(h);
    return rc;
}
