/* tokenize.c: sp_tokenize and sp_tokenize_bounded (special-token
 * partition, then SPM or BPE on the text between special tokens) and the
 * streaming detokenizer. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

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

/* Whether [off, off + len) lies wholly inside one of the sorted, disjoint
 * spans. */
static bool in_span(const sp_span *sp, size_t n, size_t off, size_t len) {
    size_t lo = 0, hi = n; /* the last span starting at or before off */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sp[mid].off <= off) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && off + len <= sp[lo - 1].off + sp[lo - 1].len;
}

/* Whether special token id may be recognized only inside o's spans. */
static bool markup_only(const sp_vocab *v, const sp_tok_opts *o, int32_t id) {
    if (v->attr[id] & (SP_ATTR_CONTROL | SP_ATTR_UNKNOWN)) return true;
    for (int i = 0; i < o->n_markup_ids; i++)
        if (o->markup_ids[i] == id) return true;
    return false;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest text
 * first, every raw fragment is split around each occurrence of its text.
 * Without parse_special only USER_DEFINED tokens are matched (CONTROL and
 * UNKNOWN text stays plain text); with spans, those and the markup ids
 * match only inside a span (an occurrence elsewhere stays text, and the
 * search goes on from its next byte). LSTRIP/RSTRIP tokens swallow the
 * ASCII white space next to them. Stops early once more than limit special
 * tokens were found (each is a token), with *n_found set to their number;
 * else *n_found is 0. */
static bool partition(const sp_vocab *v, const char *text, size_t len, const sp_tok_opts *o,
                      size_t limit, fragvec *frags, size_t *n_found) {
    fragvec next = {0};
    *n_found = 0;
    if (len > 0 && !frag_push(frags, -1, 0, len)) return false;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        uint16_t attr = v->attr[id];
        bool only_in_spans = false;
        if (o->spans) only_in_spans = markup_only(v, o, id);
        else if (!o->parse_special && (attr & (SP_ATTR_CONTROL | SP_ATTR_UNKNOWN))) continue;
        const char *t = v->text + v->text_off[id];
        size_t tl = v->text_len[id];
        bool any = false;
        for (size_t i = 0; i < frags->n && !any; i++)
            any = frags->v[i].tok < 0 && memmem(text + frags->v[i].off, frags->v[i].len, t, tl);
        if (!any) continue;
        next.n = 0;
        size_t n_tok = 0;
        for (size_t i = 0; i < frags->n; i++) {
            frag f = frags->v[i];
            if (f.tok >= 0) {
                if (!frag_push(&next, f.tok, 0, 0)) goto fail;
                n_tok++;
                continue;
            }
            /* raw text [off, end) is still to place; the search resumes at s */
            size_t off = f.off, end = f.off + f.len, s = off;
            for (;;) {
                const char *m = s < end ? memmem(text + s, end - s, t, tl) : NULL;
                if (!m) {
                    if (end > off && !frag_push(&next, -1, off, end - off)) goto fail;
                    break;
                }
                size_t mo = (size_t)(m - text);
                if (only_in_spans && !in_span(o->spans, o->n_spans, mo, tl)) {
                    s = mo + 1; /* text here: overlapping occurrences are still found */
                    continue;
                }
                size_t ln = mo - off;
                if (attr & SP_ATTR_LSTRIP)
                    while (ln > 0 && c_space(text[off + ln - 1])) ln--;
                if (ln > 0 && !frag_push(&next, -1, off, ln)) goto fail;
                if (!frag_push(&next, id, 0, 0)) goto fail;
                n_tok++;
                size_t ro = mo + tl;
                if (attr & SP_ATTR_RSTRIP)
                    while (ro < end && c_space(text[ro])) ro++;
                off = s = ro;
                if (off == end) break;
            }
        }
        fragvec tmp = *frags;
        *frags = next;
        next = tmp;
        if (n_tok > limit) {
            *n_found = n_tok;
            break;
        }
    }
    free(next.v);
    return true;
fail:
    free(next.v);
    return false;
}

/* SPM text is cut into chunks of about this many bytes where no merge can
 * cross (see pair_bits), so that tokenizing stops within one chunk of the
 * limit and the merge heap stays small. The text is escaped SPM_CHUNK bytes
 * at a time. */
#define SPM_CHUNK 2048
size_t tok_spm_cut_after = SPM_CHUNK;

typedef struct {
    char *p;
    size_t n, cap;
} bytes;

/* Appends raw bytes text[*ri..] to b, spaces escaped as U+2581, until b
 * holds at least want bytes or the text ends. */
static bool spm_fill(bytes *b, const char *text, size_t len, size_t *ri, size_t want) {
    while (b->n < want && *ri < len) {
        if (b->cap - b->n < 3) {
            size_t nc = b->cap ? b->cap * 2 : 2 * SPM_CHUNK + 8;
            char *np = realloc(b->p, nc);
            if (!np) return false;
            b->p = np;
            b->cap = nc;
        }
        char c = text[(*ri)++];
        if (c == ' ') {
            memcpy(b->p + b->n, "\xe2\x96\x81", 3);
            b->n += 3;
        } else {
            b->p[b->n++] = c;
        }
    }
    return true;
}

/* One raw SPM fragment: the space prefix when asked, spaces as U+2581,
 * then llama.cpp's merge loop, run chunk by chunk; stops after the chunk
 * that takes toks past limit. The same tokens as one merge loop over the
 * whole fragment: a cut is only made between two symbols that no token's
 * text holds side by side, so no merge could have joined them, and each
 * side's merges happen in the same relative order. */
static bool spm_fragment(const sp_vocab *v, const char *text, size_t len, bool prefix,
                         tok_ivec *toks, size_t limit, bytes *b) {
    size_t ri = 0;
    b->n = 0;
    if (prefix) {
        if (!spm_fill(b, " ", 1, &ri, 1)) return false;
        ri = 0;
    }
    while (ri < len || b->n > 0) {
        /* find the cut: walk whole symbols (cut by lead byte, as the merge
         * loop does) from the chunk's start */
        size_t p = 0, prev = 0, cut = 0;
        for (;;) {
            if (p >= b->n) {
                if (ri == len) {
                    cut = b->n;
                    break;
                }
                if (!spm_fill(b, text, len, &ri, b->n + SPM_CHUNK)) return false;
                continue;
            }
            size_t sl = tok_utf8_lead_len((unsigned char)b->p[p]);
            if (p + sl > b->n) {
                if (ri < len) { /* the symbol is not all here yet */
                    if (!spm_fill(b, text, len, &ri, b->n + SPM_CHUNK)) return false;
                    continue;
                }
                sl = b->n - p; /* truncated at the end of the text */
            }
            if (p >= tok_spm_cut_after &&
                !tok_pair_may_merge(v, b->p + prev, p - prev, b->p + p, sl)) {
                cut = p;
                break;
            }
            prev = p;
            p += sl;
        }
        if (!tok_spm_encode(v, b->p, cut, toks)) return false;
        memmove(b->p, b->p + cut, b->n - cut);
        b->n -= cut;
        if (toks->n > limit) break;
    }
    return true;
}

/* ASCII white space in text[len] (what LSTRIP/RSTRIP can swallow). */
static size_t count_spaces(const char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += c_space(text[i]);
    return n;
}

/* The tokens of text into *toks (appended; the caller frees toks->v).
 * limit: stop once past it (SIZE_MAX: never); *least is then a lower bound
 * of the count, > limit, and toks incomplete; else 0. false if memory ran
 * out. */
static bool tokenize(const sp_vocab *v, const char *text, size_t len, const sp_tok_opts *o,
                     size_t limit, tok_ivec *toks, size_t *least) {
    fragvec frags = {0};
    bytes buf = {0};
    bool ok = false;
    if (!text) len = 0;
    if (!partition(v, text, len, o, limit, &frags, least)) goto done;
    if (*least) {
        ok = true;
        goto done;
    }
    if (o->add_special && v->add_bos && v->bos >= 0 && !tok_ivec_push(toks, v->bos)) goto done;
    /* SPM: a raw fragment at the start or after a special token gets the
     * space prefix */
    bool prev_special = true;
    for (size_t i = 0; i < frags.n && toks->n <= limit; i++) {
        frag f = frags.v[i];
        if (f.tok >= 0) {
            if (!tok_ivec_push(toks, f.tok)) goto done;
            prev_special = true;
        } else if (v->kind == SP_VOCAB_SPM) {
            if (!spm_fragment(v, text + f.off, f.len, v->add_space_prefix && prev_special, toks,
                              limit, &buf))
                goto done;
            prev_special = false;
        } else if (!tok_bpe_encode(v, text + f.off, f.len, toks, limit)) {
            goto done;
        }
    }
    if (o->add_special && v->add_eos && v->eos >= 0 && !tok_ivec_push(toks, v->eos)) goto done;
    *least = toks->n > limit ? toks->n : 0;
    ok = true;
done:
    free(frags.v);
    free(buf.p);
    return ok;
}

int sp_tokenize(const sp_vocab *v, const char *text, size_t len, int32_t *out, int n_max,
                bool add_special, bool parse_special) {
    sp_tok_opts o = {.add_special = add_special, .parse_special = parse_special};
    tok_ivec toks = {0};
    size_t least;
    int ret = INT_MIN;
    if (!tokenize(v, text, len, &o, SIZE_MAX, &toks, &least) || toks.n > (size_t)INT_MAX)
        goto done;
    if ((size_t)(n_max < 0 ? 0 : n_max) < toks.n || (!out && toks.n)) {
        ret = -(int)toks.n;
    } else {
        if (toks.n) memcpy(out, toks.v, toks.n * sizeof(int32_t));
        ret = (int)toks.n;
    }
done:
    free(toks.v);
    return ret;
}

int sp_tokenize_bounded(const sp_vocab *v, const char *text, size_t len, int n_max,
                        const sp_tok_opts *o, int32_t **out) {
    static const sp_tok_opts plain = {0};
    if (!o) o = &plain;
    if (!text) len = 0;
    if (n_max < 0) n_max = 0;
    *out = NULL;
    /* by length alone: every token stands for at most max_token_bytes
     * bytes, white space that a special token swallows aside */
    if (v->max_token_bytes) {
        size_t eff = len;
        if (v->has_strip && len > (size_t)n_max * v->max_token_bytes)
            eff -= count_spaces(text, len);
        if (eff > (size_t)n_max * v->max_token_bytes) {
            size_t least = (eff - 1) / v->max_token_bytes + 1;
            return least > (size_t)INT_MAX ? -INT_MAX : -(int)least;
        }
    }
    tok_ivec toks = {0};
    size_t least;
    if (!tokenize(v, text, len, o, (size_t)n_max, &toks, &least)) {
        free(toks.v);
        return INT_MIN;
    }
    if (least) {
        free(toks.v);
        return least > (size_t)INT_MAX ? -INT_MAX : -(int)least;
    }
    if (!toks.v && !(toks.v = malloc(sizeof(int32_t)))) return INT_MIN; /* 0 tokens */
    *out = toks.v;
    return (int)toks.n;
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
