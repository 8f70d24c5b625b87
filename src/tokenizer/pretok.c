/* pretok.c: the BPE pre-tokenizer, splitting text into words with the
 * regexes llama.cpp associates with tokenizer.ggml.pre.
 *
 * Token-for-token parity with llama.cpp needs its exact splitting
 * procedure, not just the same regexes:
 *   - the GPT-2 and Llama-3 regexes are run by hand-written splitters that
 *     classify code points with llama.cpp's Unicode table (unicode_data.c);
 *   - any other regex that uses \p{N}/\p{L}/\p{P}/\p{M}/\p{S} runs on a
 *     "collapsed" text with one byte per code point (ASCII kept, non-ASCII
 *     white space -> 0x0B, non-ASCII letters -> 0xD2, numbers -> 0xD1, ...)
 *     against a rewritten regex whose \p{X} became the matching bytes, with
 *     ASCII-only \s; llama.cpp does this with std::regex, we with PCRE2 in
 *     8-bit non-UTF mode;
 *   - the remaining regexes (literal non-ASCII ranges, no \p) match code
 *     points directly, non-ASCII white space again replaced by 0x0B and \s
 *     ASCII-only (std::wregex in the C locale); PCRE2 in UTF mode, no UCP.
 * Each regex splits every piece the previous ones produced; text between
 * matches stays a piece of its own.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/unicode.h"

/* ---------------------------------------------------------------- regexes */

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_LLAMA3                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* The original (?i:...) form, which std::regex cannot parse; llama.cpp runs
 * it with the Llama-3 splitter too. */
#define RX_LLAMA3_I                                                                            \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2                                                                          \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RX_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

static const char *const rx_default[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"};
static const char *const rx_llama3[] = {RX_LLAMA3};
/* Non-ASCII code points are written as \\x{...} escapes so that the source
 * is ASCII: several characters of the DeepSeek class (e.g. U+1F7D, U+2126,
 * U+212A) have canonical equivalents that an editor's normalization would
 * silently substitute. */
static const char *const rx_deepseek_llm[] = {
    "[\r\n]",
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}"
    "\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}"
    "\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}"
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}"
    "\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}"
    "\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
    "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    RX_CJK,
    "\\p{N}+",
};
static const char *const rx_deepseek3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const rx_deepseek_coder[] = {
    "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_CJK, "\\p{N}"};
static const char *const rx_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"};
static const char *const rx_starcoder[] = {"\\p{N}", RX_GPT2};
static const char *const rx_gpt2[] = {RX_GPT2};
static const char *const rx_qwen2[] = {RX_QWEN2};
static const char *const rx_bloom[] = {RX_BLOOM};
static const char *const rx_viking[] = {RX_BLOOM, "\\p{N}"};
static const char *const rx_tekken[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
static const char *const rx_chameleon[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    RX_GPT2,
};
static const char *const rx_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RX_CONTRACTIONS "?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RX_CONTRACTIONS "?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

#define RXS(a) a, (int)(sizeof(a) / sizeof(a[0]))
enum { F_IGNORE_MERGES = 1, F_ADD_BOS = 2, F_NO_BOS = 4 };

/* tokenizer.ggml.pre names llama.cpp (February 2025) knows, with the regex
 * lists of their pre-tokenizer type; "gpt2", "phi" and "gpt-4o" are extra
 * spellings accepted here. */
static const struct {
    const char *name;
    const char *const *regexes;
    int n;
    int flags;
} pre_table[] = {
    {"default", RXS(rx_default), 0},
    {"llama3", RXS(rx_llama3), F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-v3", RXS(rx_llama3), F_IGNORE_MERGES | F_ADD_BOS},
    {"llama-bpe", RXS(rx_llama3), F_IGNORE_MERGES | F_ADD_BOS},
    {"falcon3", RXS(rx_llama3), F_IGNORE_MERGES | F_ADD_BOS},
    {"dbrx", RXS(rx_llama3), 0},
    {"smaug-bpe", RXS(rx_llama3), 0},
    {"chatglm-bpe", RXS(rx_llama3), F_NO_BOS},
    {"deepseek-llm", RXS(rx_deepseek_llm), 0},
    {"deepseek-v3", RXS(rx_deepseek3), 0},
    {"deepseek-coder", RXS(rx_deepseek_coder), 0},
    {"falcon", RXS(rx_falcon), 0},
    {"starcoder", RXS(rx_starcoder), 0},
    {"refact", RXS(rx_starcoder), 0},
    {"command-r", RXS(rx_starcoder), 0},
    {"smollm", RXS(rx_starcoder), 0},
    {"codeshell", RXS(rx_starcoder), 0},
    {"exaone", RXS(rx_starcoder), 0},
    {"minerva-7b", RXS(rx_starcoder), 0},
    {"gpt-2", RXS(rx_gpt2), 0},
    {"gpt2", RXS(rx_gpt2), 0},
    {"phi-2", RXS(rx_gpt2), 0},
    {"phi", RXS(rx_gpt2), 0},
    {"jina-es", RXS(rx_gpt2), 0},
    {"jina-de", RXS(rx_gpt2), 0},
    {"gigachat", RXS(rx_gpt2), 0},
    {"jina-v1-en", RXS(rx_gpt2), 0},
    {"jina-v2-es", RXS(rx_gpt2), 0},
    {"jina-v2-de", RXS(rx_gpt2), 0},
    {"jina-v2-code", RXS(rx_gpt2), 0},
    {"roberta-bpe", RXS(rx_gpt2), 0},
    {"mpt", RXS(rx_gpt2), 0},
    {"olmo", RXS(rx_gpt2), 0},
    {"jais", RXS(rx_gpt2), 0},
    {"qwen2", RXS(rx_qwen2), 0},
    {"stablelm2", RXS(rx_qwen2), 0},
    {"megrez", RXS(rx_qwen2), 0},
    {"poro-chat", RXS(rx_bloom), 0},
    {"bloom", RXS(rx_bloom), 0},
    {"gpt3-finnish", RXS(rx_bloom), 0},
    {"viking", RXS(rx_viking), 0},
    {"tekken", RXS(rx_tekken), F_IGNORE_MERGES | F_ADD_BOS},
    {"chameleon", RXS(rx_chameleon), F_ADD_BOS},
    {"gpt-4o", RXS(rx_gpt4o), 0},
};

bool tok_pretok_lookup(const char *name, pretok_info *info) {
    for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++) {
        if (strcmp(pre_table[i].name, name) != 0) continue;
        info->regexes = pre_table[i].regexes;
        info->n_regexes = pre_table[i].n;
        info->ignore_merges = pre_table[i].flags & F_IGNORE_MERGES;
        info->add_bos = pre_table[i].flags & F_ADD_BOS;
        info->no_bos = pre_table[i].flags & F_NO_BOS;
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ compilation */

enum { RX_KIND_GPT2, RX_KIND_LLAMA3, RX_KIND_COLLAPSED, RX_KIND_CODEPOINTS };

typedef struct {
    int kind;
    pcre2_code *code; /* COLLAPSED / CODEPOINTS */
} pretok_rx;

struct pretokenizer {
    int n;
    pretok_rx rx[8];
    bool need_collapsed, need_codepoints;
    uint32_t max_capture; /* largest capture count, for match data */
};

/* Unicode classes llama.cpp rewrites for the collapsed text: the byte that
 * stands for the class's non-ASCII members, then its ASCII members. */
static const struct {
    const char *pat;
    char byte;
    const char *ascii;
} ucat[] = {
    {"\\p{N}", (char)0xD1, "0-9"},
    {"\\p{L}", (char)0xD2, "A-Za-z"},
    {"\\p{P}", (char)0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", (char)0xD4, ""},
    {"\\p{S}", (char)0xD5, "\\$\\+<->^`\\|"},
};
#define N_UCAT (int)(sizeof(ucat) / sizeof(ucat[0]))

static char collapse_byte(uint32_t cp) {
    if (cp < 128) return (char)cp;
    uint16_t f = tok_ucp_flags(cp);
    if (f & SP_UCP_SPACE) return 0x0B;
    switch (f & SP_UCP_CATEGORY) {
    case SP_UCP_NUMBER: return (char)0xD1;
    case SP_UCP_LETTER: return (char)0xD2;
    case SP_UCP_PUNCT: return (char)0xD3;
    case SP_UCP_MARK: return (char)0xD4;
    case SP_UCP_SYMBOL: return (char)0xD5;
    default: return (char)0xD0;
    }
}

static bool uses_ucat(const char *re) {
    for (int i = 0; i < N_UCAT; i++)
        if (strstr(re, ucat[i].pat)) return true;
    return false;
}

/* The collapsed form of re, by llama.cpp's rewriting rules (including its
 * bracket tracking, which only looks one character back for a backslash).
 * Caller frees. */
static char *collapse_regex(const char *re) {
    size_t n = strlen(re);
    char *out = malloc(n * 16 + 1); /* each \p{X} (5 chars) grows to < 32 */
    if (!out) return NULL;
    size_t o = 0;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            out[o++] = '[';
            inside = true;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            out[o++] = ']';
            inside = false;
            continue;
        }
        if (re[i] == '\\' && i + 4 < n && re[i + 1] == 'p' && re[i + 2] == '{' && re[i + 4] == '}') {
            int k = -1;
            for (int j = 0; j < N_UCAT; j++)
                if (strncmp(re + i, ucat[j].pat, 5) == 0) k = j;
            if (k >= 0) {
                if (!inside) out[o++] = '[';
                out[o++] = ucat[k].byte;
                size_t al = strlen(ucat[k].ascii);
                memcpy(out + o, ucat[k].ascii, al);
                o += al;
                if (!inside) out[o++] = ']';
                i += 4;
                continue;
            }
        }
        out[o++] = re[i];
    }
    out[o] = 0;
    return out;
}

static pcre2_code *compile(const char *pat, uint32_t opts, const char *orig, char *err,
                           size_t errlen) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &ec, &eo, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        seterr(err, errlen, "pre-tokenizer regex '%s': %s at offset %zu", orig, (char *)msg,
                  (size_t)eo);
        return NULL;
    }
    /* JIT is an optimization only: matching falls back to the interpreter */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return code;
}

pretokenizer *tok_pretok_create(const char *const *regexes, int n, char *err, size_t errlen) {
    pretokenizer *p = calloc(1, sizeof(*p));
    if (!p) {
        seterr(err, errlen, "out of memory");
        return NULL;
    }
    if (n < 1 || n > (int)(sizeof(p->rx) / sizeof(p->rx[0]))) {
        seterr(err, errlen, "pre-tokenizer: bad regex count %d", n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        const char *re = regexes[i];
        pretok_rx *rx = &p->rx[p->n++];
        /* llama.cpp picks its hand-written splitters by the exact regex text */
        if (strcmp(re, RX_GPT2) == 0) {
            rx->kind = RX_KIND_GPT2;
        } else if (strcmp(re, RX_LLAMA3) == 0 || strcmp(re, RX_LLAMA3_I) == 0) {
            rx->kind = RX_KIND_LLAMA3;
        } else if (uses_ucat(re)) {
            for (const unsigned char *s = (const unsigned char *)re; *s; s++) {
                if (*s >= 0x80) {
                    seterr(err, errlen,
                              "pre-tokenizer regex '%s' mixes unicode categories and non-ASCII "
                              "characters (not supported)", re);
                    goto fail;
                }
            }
            char *c = collapse_regex(re);
            if (!c) {
                seterr(err, errlen, "out of memory");
                goto fail;
            }
            rx->kind = RX_KIND_COLLAPSED;
            rx->code = compile(c, PCRE2_DOLLAR_ENDONLY, re, err, errlen);
            free(c);
            if (!rx->code) goto fail;
            p->need_collapsed = true;
        } else {
            rx->kind = RX_KIND_CODEPOINTS;
            rx->code = compile(re, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, re, err, errlen);
            if (!rx->code) goto fail;
            p->need_codepoints = true;
        }
        if (rx->code) {
            uint32_t cc = 0;
            pcre2_pattern_info(rx->code, PCRE2_INFO_CAPTURECOUNT, &cc);
            if (cc > p->max_capture) p->max_capture = cc;
        }
    }
    return p;
fail:
    tok_pretok_free(p);
    return NULL;
}

void tok_pretok_free(pretokenizer *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        if (p->rx[i].code) pcre2_code_free(p->rx[i].code);
    free(p);
}

/* ---------------------------------------------------------------- splitting */

/* Piece lengths (in code points), in order. */
typedef struct {
    size_t *v;
    size_t n, cap;
} seglist;

static bool seg_push(seglist *s, size_t len) {
    if (len == 0) return true;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        size_t *nv = realloc(s->v, nc * sizeof(*nv));
        if (!nv) return false;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = len;
    return true;
}

#define OOR 0xFFFFFFFFu

/* State of a hand-written splitter over the piece [ini, end). */
typedef struct {
    const uint32_t *cp;
    const uint16_t *fl; /* class bits of each code point */
    size_t ini, end, prev;
    seglist *out;
    bool ok;
} csplit;

static inline uint32_t cs_cpt(const csplit *s, size_t pos) {
    return pos >= s->ini && pos < s->end ? s->cp[pos] : OOR;
}
static inline uint16_t cs_flags(const csplit *s, size_t pos) {
    return pos >= s->ini && pos < s->end ? s->fl[pos] : 0;
}
/* Ends the current word at end; returns its length. */
static inline size_t cs_add(csplit *s, size_t end) {
    size_t len = end - s->prev;
    if (!seg_push(s->out, len)) s->ok = false;
    s->prev = end;
    return len;
}

#define WS SP_UCP_SPACE
#define LET SP_UCP_LETTER
#define NUM SP_UCP_NUMBER

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S), as
 * llama.cpp's unicode_regex_split_custom_gpt2 runs it. */
static void split_gpt2(csplit *s) {
    for (size_t pos = s->ini; pos < s->end;) {
        uint32_t c = cs_cpt(s, pos);
        uint16_t f = cs_flags(s, pos);
        if (c == '\'' && pos + 1 < s->end) {
            uint32_t n1 = cs_cpt(s, pos + 1);
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                pos += cs_add(s, pos + 2);
                continue;
            }
            if (pos + 2 < s->end) {
                uint32_t n2 = cs_cpt(s, pos + 2);
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += cs_add(s, pos + 3);
                    continue;
                }
            }
        }
        uint16_t f2 = c == ' ' ? cs_flags(s, pos + 1) : f;
        if (f2 & LET) {
            pos += c == ' ';
            while (f2 & LET) f2 = cs_flags(s, ++pos);
            cs_add(s, pos);
            continue;
        }
        if (f2 & NUM) {
            pos += c == ' ';
            while (f2 & NUM) f2 = cs_flags(s, ++pos);
            cs_add(s, pos);
            continue;
        }
        if (!(f2 & (WS | LET | NUM)) && f2) {
            pos += c == ' ';
            while (!(f2 & (WS | LET | NUM)) && f2) f2 = cs_flags(s, ++pos);
            cs_add(s, pos);
            continue;
        }
        size_t nws = 0;
        while (cs_flags(s, pos + nws) & WS) nws++;
        if (nws > 1 && cs_cpt(s, pos + nws) != OOR) { /* \s+(?!\S): leave one */
            pos += nws - 1;
            cs_add(s, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            cs_add(s, pos);
            continue;
        }
        cs_add(s, ++pos); /* no match: a piece of its own */
    }
}

static inline uint32_t ascii_lower(uint32_t c) {
    /* no code point outside ASCII lowercases to one of the contraction
     * letters, so ASCII folding is what llama.cpp's unicode_tolower gives */
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The Llama-3 regex, as llama.cpp's unicode_regex_split_custom_llama3 runs
 * it. */
static void split_llama3(csplit *s) {
    for (size_t pos = s->ini; pos < s->end;) {
        uint32_t c = cs_cpt(s, pos);
        uint16_t f = cs_flags(s, pos);
        if (c == '\'' && pos + 1 < s->end) {
            uint32_t n1 = ascii_lower(cs_cpt(s, pos + 1));
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                pos += cs_add(s, pos + 2);
                continue;
            }
            if (pos + 2 < s->end) {
                uint32_t n2 = ascii_lower(cs_cpt(s, pos + 2));
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += cs_add(s, pos + 3);
                    continue;
                }
            }
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c == '\r' || c == '\n' || (f & NUM))) {
            if ((f & LET) || (cs_flags(s, pos + 1) & LET)) {
                pos++;
                while (cs_flags(s, pos) & LET) pos++;
                cs_add(s, pos);
                continue;
            }
        }
        /* \p{N}{1,3} */
        if (f & NUM) {
            size_t ini = pos;
            while (cs_flags(s, pos) & NUM) {
                if (++pos - ini >= 3) {
                    cs_add(s, pos);
                    ini = pos;
                }
            }
            cs_add(s, pos);
            continue;
        }
        /* <space>?[^\s\p{L}\p{N}]+[\r\n]* (the test of the first code point's
         * own flags, not the next one's, is llama.cpp's) */
        uint16_t f2 = c == ' ' ? cs_flags(s, pos + 1) : f;
        if (!(f2 & (WS | LET | NUM)) && f) {
            pos += c == ' ';
            while (!(f2 & (WS | LET | NUM)) && f2) f2 = cs_flags(s, ++pos);
            uint32_t c2 = cs_cpt(s, pos);
            while (c2 == '\r' || c2 == '\n') c2 = cs_cpt(s, ++pos);
            cs_add(s, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (cs_flags(s, pos + nws) & WS) {
            uint32_t c2 = cs_cpt(s, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            cs_add(s, pos);
            continue;
        }
        if (nws > 1 && cs_cpt(s, pos + nws) != OOR) { /* \s+(?!\S) */
            pos += nws - 1;
            cs_add(s, pos);
            continue;
        }
        if (nws > 0) { /* \s+ */
            pos += nws;
            cs_add(s, pos);
            continue;
        }
        cs_add(s, ++pos);
    }
}

/* Text prepared once per split call. */
typedef struct {
    uint32_t *cp; /* code points */
    uint16_t *fl; /* their class bits */
    size_t n;
    char *collapsed;  /* [n], for COLLAPSED regexes */
    char *u8;         /* UTF-8 of the code points (white space folded), for CODEPOINTS */
    size_t *u8_off;   /* [n + 1] byte offset of code point i in u8 */
    size_t *u8_cp;    /* [bytes + 1] code point index at a byte offset */
    pcre2_match_data *md;
} ptext;

/* Runs a PCRE2 regex over the piece [ini, ini + len) and appends the pieces
 * it leaves: each match, and each stretch between matches. */
static bool split_pcre(const pretok_rx *rx, ptext *t, size_t ini, size_t len, seglist *out) {
    const char *subj;
    size_t slen, base = 0;
    bool cps = rx->kind == RX_KIND_CODEPOINTS;
    if (cps) {
        base = t->u8_off[ini];
        subj = t->u8 + base;
        slen = t->u8_off[ini + len] - base;
    } else {
        subj = t->collapsed + ini;
        slen = len;
    }
    /* positions below are byte offsets into subj; in code points they are
     * u8_cp[base + pos] - ini (or the same number for collapsed text) */
#define TO_CP(pos) (cps ? t->u8_cp[base + (pos)] - ini : (pos))
    size_t pos = 0, last = 0;
    uint32_t opts = cps ? PCRE2_NO_UTF_CHECK : 0;
    uint32_t extra = 0;
    while (pos <= slen) {
        int rc = pcre2_match(rx->code, (PCRE2_SPTR)subj, slen, pos, opts | extra, t->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(rx->code, (PCRE2_SPTR)subj, slen, pos, opts | extra | PCRE2_NO_JIT,
                             t->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH && extra) {
            /* no non-empty match where an empty one was: step one character
             * on, as std::regex_iterator does */
            extra = 0;
            pos++;
            if (cps)
                while (pos < slen && ((unsigned char)subj[pos] & 0xc0) == 0x80) pos++;
            continue;
        }
        if (rc < 0) break; /* no (further) match, or a resource limit: the rest stays one piece */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last && !seg_push(out, TO_CP(ms) - TO_CP(last))) return false;
        if (me > ms && !seg_push(out, TO_CP(me) - TO_CP(ms))) return false;
        last = me;
        pos = me;
        extra = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    }
    if (last < slen && !seg_push(out, len - TO_CP(last))) return false;
#undef TO_CP
    return true;
}

void tok_words_free(tok_words *w) {
    free(w->buf);
    free(w->end);
    memset(w, 0, sizeof(*w));
}

static bool words_reserve(tok_words *w, size_t add_bytes) {
    if (w->len + add_bytes > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 256;
        while (nc < w->len + add_bytes) nc *= 2;
        char *nb = realloc(w->buf, nc);
        if (!nb) return false;
        w->buf = nb;
        w->cap = nc;
    }
    if (w->n == w->ncap) {
        size_t nc = w->ncap ? w->ncap * 2 : 64;
        size_t *ne = realloc(w->end, nc * sizeof(*ne));
        if (!ne) return false;
        w->end = ne;
        w->ncap = nc;
    }
    return true;
}

bool tok_pretok_split(const pretokenizer *p, const char *text, size_t len, tok_words *out) {
    bool ok = false;
    ptext t = {0};
    seglist a = {0}, b = {0};
    out->len = 0;
    out->n = 0;

    t.cp = malloc((len + 1) * sizeof(*t.cp));
    t.fl = malloc((len + 1) * sizeof(*t.fl));
    if (!t.cp || !t.fl) goto done;
    for (size_t off = 0; off < len;) {
        uint32_t c = tok_utf8_decode(text, len, &off);
        t.fl[t.n] = tok_ucp_flags(c);
        t.cp[t.n++] = c;
    }
    if (p->need_collapsed) {
        t.collapsed = malloc(t.n + 1);
        if (!t.collapsed) goto done;
        for (size_t i = 0; i < t.n; i++) t.collapsed[i] = collapse_byte(t.cp[i]);
    }
    if (p->need_codepoints) {
        t.u8 = malloc(t.n * 4 + 1);
        t.u8_off = malloc((t.n + 1) * sizeof(size_t));
        t.u8_cp = malloc((t.n * 4 + 1) * sizeof(size_t));
        if (!t.u8 || !t.u8_off || !t.u8_cp) goto done;
        size_t o = 0;
        for (size_t i = 0; i < t.n; i++) {
            uint32_t c = t.cp[i];
            if (c > 0x7f && (t.fl[i] & SP_UCP_SPACE)) c = 0x0B;
            /* code points UTF-8 cannot carry (surrogates, > U+10FFFF) */
            if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD;
            t.u8_off[i] = o;
            int k = tok_utf8_encode(c, t.u8 + o);
            for (int j = 0; j < k; j++) t.u8_cp[o + j] = i;
            o += (size_t)k;
        }
        t.u8_off[t.n] = o;
        t.u8_cp[o] = t.n;
    }
    if (p->need_collapsed || p->need_codepoints) {
        t.md = pcre2_match_data_create(p->max_capture + 1, NULL);
        if (!t.md) goto done;
    }

    if (!seg_push(&a, t.n)) goto done;
    for (int r = 0; r < p->n; r++) {
        const pretok_rx *rx = &p->rx[r];
        b.n = 0;
        size_t start = 0;
        for (size_t i = 0; i < a.n; i++) {
            size_t plen = a.v[i];
            if (rx->kind == RX_KIND_GPT2 || rx->kind == RX_KIND_LLAMA3) {
                csplit s = {t.cp, t.fl, start, start + plen, start, &b, true};
                if (rx->kind == RX_KIND_GPT2) split_gpt2(&s);
                else split_llama3(&s);
                if (!s.ok) goto done;
            } else if (!split_pcre(rx, &t, start, plen, &b)) {
                goto done;
            }
            start += plen;
        }
        seglist tmp = a;
        a = b;
        b = tmp;
    }

    /* words: the code points in UTF-8, each byte then as its GPT-2 code point */
    size_t start = 0;
    for (size_t i = 0; i < a.n; i++) {
        if (!words_reserve(out, a.v[i] * 8)) goto done;
        for (size_t j = start; j < start + a.v[i]; j++) {
            char u[4];
            int k = tok_utf8_encode(t.cp[j], u);
            for (int m = 0; m < k; m++)
                out->len += (size_t)tok_utf8_encode(tok_byte_to_ucp((uint8_t)u[m]),
                                                       out->buf + out->len);
        }
        out->end[out->n++] = out->len;
        start += a.v[i];
    }
    ok = true;
done:
    free(t.cp);
    free(t.fl);
    free(t.collapsed);
    free(t.u8);
    free(t.u8_off);
    free(t.u8_cp);
    if (t.md) pcre2_match_data_free(t.md);
    free(a.v);
    free(b.v);
    return ok;
}
