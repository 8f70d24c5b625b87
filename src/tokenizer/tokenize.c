/* tokenize.c: sp_tokenize (special-token partition, then SPM or BPE on the
 * text between special tokens) and the streaming detokenizer. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* A piece of the input: a special token, or raw text [off, off + len). */
typedef struct {
    int32_t tok; /* -1 for raw text */
    size_t off, len;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} fragvec;

static bool frag_push(fragvec *f, int32_t tok, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag *nv = realloc(f->v, nc * sizeof(*nv));
        if (!nv) return false;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = (frag){tok, off, len};
    return true;
}

/* C-locale isspace, which llama.cpp's strip rules use */
static bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* llama.cpp's tokenizer_st_partition: for each special token, longest text
 * first, every raw fragment is split around each occurrence of its text.
 * Without parse_special only USER_DEFINED tokens are matched (CONTROL and
 * UNKNOWN text stays plain text). LSTRIP/RSTRIP tokens swallow the ASCII
 * white space next to them. */
static bool partition(const sp_vocab *v, const char *text, size_t len, bool parse_special,
                      fragvec *frags) {
    fragvec next = {0};
    if (len > 0 && !frag_push(frags, -1, 0, len)) return false;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        uint16_t attr = v->attr[id];
        if (!parse_special && (attr & (SP_ATTR_CONTROL | SP_ATTR_UNKNOWN))) continue;
        const char *t = v->text + v->text_off[id];
        size_t tl = v->text_len[id];
        bool any = false;
        for (size_t i = 0; i < frags->n && !any; i++)
            any = frags->v[i].tok < 0 && memmem(text + frags->v[i].off, frags->v[i].len, t, tl);
        if (!any) continue;
        next.n = 0;
        for (size_t i = 0; i < frags->n; i++) {
            frag f = frags->v[i];
            if (f.tok >= 0) {
                if (!frag_push(&next, f.tok, 0, 0)) goto fail;
                continue;
            }
            size_t off = f.off, n = f.len;
            for (;;) {
                const char *m = memmem(text + off, n, t, tl);
                if (!m) {
                    if (n > 0 && !frag_push(&next, -1, off, n)) goto fail;
                    break;
                }
                size_t mo = (size_t)(m - text);
                size_t ln = mo - off;
                if (attr & SP_ATTR_LSTRIP)
                    while (ln > 0 && c_space(text[off + ln - 1])) ln--;
                if (ln > 0 && !frag_push(&next, -1, off, ln)) goto fail;
                if (!frag_push(&next, id, 0, 0)) goto fail;
                size_t ro = mo + tl, rn = off + n - ro;
                if (attr & SP_ATTR_RSTRIP)
                    while (rn > 0 && c_space(text[ro])) ro++, rn--;
                off = ro;
                n = rn;
                if (n == 0) break;
            }
        }
        fragvec tmp = *frags;
        *frags = next;
        next = tmp;
    }
    free(next.v);
    return true;
fail:
    free(next.v);
    return false;
}

int sp_tokenize(const sp_vocab *v, const char *text, size_t len, int32_t *out, int n_max,
                bool add_special, bool parse_special) {
    fragvec frags = {0};
    sp_tok_ivec toks = {0};
    char *buf = NULL;
    int ret = INT_MIN;
    if (!text) len = 0;
    if (!partition(v, text, len, parse_special, &frags)) goto done;

    if (add_special && v->add_bos && v->bos >= 0 && !sp_tok_ivec_push(&toks, v->bos)) goto done;
    if (v->kind == SP_VOCAB_SPM) {
        /* a raw fragment at the start or after a special token gets the
         * space prefix; spaces become U+2581 */
        bool prev_special = true;
        size_t cap = 0;
        for (size_t i = 0; i < frags.n; i++) {
            frag f = frags.v[i];
            if (f.tok >= 0) {
                if (!sp_tok_ivec_push(&toks, f.tok)) goto done;
                prev_special = true;
                continue;
            }
            size_t need = 3 * (f.len + 1);
            if (need > cap) {
                char *nb = realloc(buf, need);
                if (!nb) goto done;
                buf = nb;
                cap = need;
            }
            size_t o = 0;
            if (v->add_space_prefix && prev_special) {
                memcpy(buf, "\xe2\x96\x81", 3);
                o = 3;
            }
            for (size_t j = 0; j < f.len; j++) {
                char c = text[f.off + j];
                if (c == ' ') {
                    memcpy(buf + o, "\xe2\x96\x81", 3);
                    o += 3;
                } else {
                    buf[o++] = c;
                }
            }
            if (!sp_tok_spm_encode(v, buf, o, &toks)) goto done;
            prev_special = false;
        }
    } else {
        for (size_t i = 0; i < frags.n; i++) {
            frag f = frags.v[i];
            if (f.tok >= 0) {
                if (!sp_tok_ivec_push(&toks, f.tok)) goto done;
            } else if (!sp_tok_bpe_encode(v, text + f.off, f.len, &toks)) {
                goto done;
            }
        }
    }
    if (add_special && v->add_eos && v->eos >= 0 && !sp_tok_ivec_push(&toks, v->eos)) goto done;

    if (toks.n > (size_t)INT_MAX) goto done;
    if ((size_t)(n_max < 0 ? 0 : n_max) < toks.n || (!out && toks.n)) {
        ret = -(int)toks.n;
    } else {
        if (toks.n) memcpy(out, toks.v, toks.n * sizeof(int32_t));
        ret = (int)toks.n;
    }
done:
    free(frags.v);
    free(toks.v);
    free(buf);
    return ret;
}

/* ------------------------------------------------------------ detokenizer */

/* Length of the UTF-8 sequence led by c and the range its second byte must
 * be in (which excludes overlong forms, surrogates and > U+10FFFF); 0 for a
 * byte that cannot start a character. */
static int seq_len(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xbf;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c == 0xe0) *lo = 0xa0;
    if (c == 0xed) *hi = 0x9f;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c == 0xf0) *lo = 0x90;
    if (c == 0xf4) *hi = 0x8f;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

/* Scans b[0, n): writes the bytes ready to emit into out (when non-NULL),
 * returns their count, and sets *keep to the length of the incomplete but
 * still valid sequence at the end that must wait for more bytes. */
static size_t scan(const unsigned char *b, size_t n, char *out, size_t *keep) {
    size_t o = 0, i = 0;
    *keep = 0;
    while (i < n) {
        unsigned char lo, hi;
        int k = seq_len(b[i], &lo, &hi);
        bool bad = k == 0;
        if (!bad) {
            for (int j = 1; j < k; j++) {
                if (i + (size_t)j >= n) { /* runs out: wait, it may complete */
                    *keep = n - i;
                    return o;
                }
                unsigned char c = b[i + (size_t)j];
                if (j == 1 ? (c < lo || c > hi) : (c & 0xc0) != 0x80) {
                    bad = true;
                    break;
                }
            }
        }
        if (bad) { /* this byte can never be part of a character */
            if (out) memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        if (out) memcpy(out + o, b + i, (size_t)k);
        o += (size_t)k;
        i += (size_t)k;
    }
    return o;
}

int sp_detok_push(const sp_vocab *v, sp_detok *d, int32_t tok, char *out, int cap) {
    int plen = sp_token_to_piece(v, tok, NULL, 0, false);
    if (plen < 0) plen = -plen;
    size_t n = (size_t)d->n_pend + (size_t)plen;
    unsigned char small[256];
    unsigned char *b = n <= sizeof(small) ? small : malloc(n);
    if (!b) return INT_MIN;
    memcpy(b, d->pend, (size_t)d->n_pend);
    if (plen) sp_token_to_piece(v, tok, (char *)b + d->n_pend, plen, false);
    size_t keep;
    size_t need = scan(b, n, NULL, &keep);
    int ret;
    if (cap < 1 || need + 1 > (size_t)cap) {
        ret = need + 1 > (size_t)INT_MAX ? INT_MIN : -(int)(need + 1);
    } else {
        scan(b, n, out, &keep);
        out[need] = 0;
        memcpy(d->pend, b + n - keep, keep);
        d->n_pend = (int)keep;
        ret = (int)need;
    }
    if (b != small) free(b);
    return ret;
}

int sp_detok_flush(sp_detok *d, char *out, int cap) {
    int need = 3 * d->n_pend;
    if (cap < need + 1) return -(need + 1);
    for (int i = 0; i < d->n_pend; i++) memcpy(out + 3 * i, "\xef\xbf\xbd", 3);
    out[need] = 0;
    d->n_pend = 0;
    return need;
}
