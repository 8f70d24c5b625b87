/* workload.c: the benchmark's workloads, generated from a seed over
 * the held-out split of the Python standard library (the files the bundled
 * models never trained on, so completions are not recitations).
 *
 * Lengths are measured in tokens of the given vocabulary (the served
 * model's, when the tool can load it) and cut at line boundaries; without a
 * vocabulary a token is taken as 4 bytes and the report's lengths come from
 * the server's usage instead. Every choice goes through one splitmix64
 * stream, so the same seed, corpus and vocabulary give byte-identical
 * prompts on any machine. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loadgen/loadgen.h"
#include "common.h"

const char *const bench_workload_names[] = {"shared-prefix", "long-output", "saturate",
                                            "multi-turn",    "code-complete", "code-edit",
                                            "multi-tenant",  NULL};

bool bench_workload_known(const char *name) {
    if (!strncmp(name, "file:", 5)) return name[5] != 0;
    for (int i = 0; bench_workload_names[i]; i++)
        if (!strcmp(name, bench_workload_names[i])) return true;
    return false;
}

uint64_t bench_rng(uint64_t *s) { return splitmix64(s); }

double bench_rng_uniform(uint64_t *s) { return (double)(bench_rng(s) >> 11) * 0x1.0p-53; }

/* ---- the held-out corpus ------------------------------------------------------ */

#define MARKER_PRE "# ==== file: "
#define MARKER_POST " ====\n"

bool bench_corpus_held_out(const char *module) {
    unsigned char d[32];
    SHA256((const unsigned char *)module, strlen(module), d);
    uint32_t h = (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
    return (double)h < 0.05 * 4294967296.0;
}

typedef struct {
    char **v;
    size_t n, cap;
} strvec;

static int sv_push(strvec *s, char *x) {
    if (!x) return -1;
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        char **nv = realloc(s->v, c * sizeof(char *));
        if (!nv) {
            free(x);
            return -1;
        }
        s->v = nv;
        s->cap = c;
    }
    s->v[s->n++] = x;
    return 0;
}

static void sv_free(strvec *s) {
    for (size_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b); /* bytewise, as corpus.py sorts */
}

static bool skip_dir(const char *d) {
    return !strcmp(d, "test") || !strcmp(d, "tests") || !strcmp(d, "idle_test") ||
           !strcmp(d, "site-packages") || !strcmp(d, "dist-packages") || !strcmp(d, "__pycache__");
}

/* Every *.py under root/rel (rel "" for root), as relative paths. */
static int walk(const char *root, const char *rel, strvec *out) {
    char path[4096];
    snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(path);
    if (!d) return 0; /* unreadable directories are skipped, as os.walk does */
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        char sub[4096], full[8192];
        snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(full, sizeof(full), "%s/%s", root, sub);
        struct stat st;
        if (stat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            if (!skip_dir(e->d_name)) rc = walk(root, sub, out);
        } else {
            size_t n = strlen(e->d_name);
            if (n > 3 && !strcmp(e->d_name + n - 3, ".py")) rc = sv_push(out, strdup(sub));
        }
    }
    closedir(d);
    return rc;
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int l = utf8_len((const unsigned char *)s + i, n - i);
        if (l <= 0) return false;
        i += (size_t)l;
    }
    return true;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, 65536, f);
        n += r;
        if (r < 65536) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Rebuilds heldout.txt's text from a Python library directory, by the rules
 * of tools/train/corpus.py (held-out modules, skipped directories, UTF-8
 * only, duplicates by content once, a final newline added). Duplicates are
 * looked for among held-out files only: a held-out file identical to a
 * training file that sorts before it would differ, which no stdlib file is. */
char *bench_corpus_from_src(const char *src, size_t *len, char *err, size_t errlen) {
    strvec files = {0};
    char *out = NULL;
    size_t n = 0, cap = 0;
    unsigned char (*seen)[32] = NULL;
    size_t n_seen = 0;
    if (walk(src, "", &files)) {
        seterr(err, errlen, "out of memory listing %s", src);
        goto fail;
    }
    if (files.n == 0) {
        seterr(err, errlen, "no Python files under %s", src);
        goto fail;
    }
    qsort(files.v, files.n, sizeof(char *), cmp_str);
    seen = malloc(files.n * sizeof(*seen));
    if (!seen) goto oom;
    for (size_t i = 0; i < files.n; i++) {
        const char *rel = files.v[i];
        char mod[512];
        const char *slash = strchr(rel, '/');
        size_t ml = slash ? (size_t)(slash - rel) : strlen(rel);
        if (!slash && ml > 3) ml -= 3; /* "heapq.py" -> "heapq" */
        if (ml >= sizeof(mod)) continue;
        memcpy(mod, rel, ml);
        mod[ml] = 0;
        if (!bench_corpus_held_out(mod)) continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", src, rel);
        size_t fl;
        char *text = slurp(path, &fl);
        if (!text) continue;
        unsigned char d[32];
        SHA256((const unsigned char *)text, fl, d);
        bool dup = false;
        for (size_t j = 0; j < n_seen && !dup; j++) dup = !memcmp(seen[j], d, 32);
        if (dup || fl == 0 || !valid_utf8(text, fl)) {
            if (!dup) memcpy(seen[n_seen++], d, 32);
            free(text);
            continue;
        }
        memcpy(seen[n_seen++], d, 32);
        size_t need = n + strlen(MARKER_PRE) + strlen(rel) + strlen(MARKER_POST) + fl + 2;
        if (need > cap) {
            cap = need * 2;
            char *nb = realloc(out, cap);
            if (!nb) {
                free(text);
                goto oom;
            }
            out = nb;
        }
        n += (size_t)sprintf(out + n, MARKER_PRE "%s" MARKER_POST, rel);
        memcpy(out + n, text, fl);
        n += fl;
        if (text[fl - 1] != '\n') out[n++] = '\n';
        out[n] = 0;
        free(text);
    }
    if (!out) {
        seterr(err, errlen, "no held-out files under %s", src);
        goto fail;
    }
    free(seen);
    sv_free(&files);
    *len = n;
    return out;
oom:
    seterr(err, errlen, "out of memory reading %s", src);
fail:
    free(out);
    free(seen);
    sv_free(&files);
    return NULL;
}

char *bench_corpus_load(const char *path, size_t *len, char *err, size_t errlen) {
    if (path) {
        char *t = slurp(path, len);
        if (!t) seterr(err, errlen, "cannot read the corpus %s: %s", path, strerror(errno));
        return t;
    }
    const char *env = getenv("SPECULA_CORPUS");
    const char *cands[] = {env && *env ? env : NULL, "build/corpus/heldout.txt"};
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
        if (!cands[i]) continue;
        char *t = slurp(cands[i], len);
        if (t) return t;
    }
    return bench_corpus_from_src("/usr/lib/python3.11", len, err, errlen);
}

/* ---- pieces of the corpus ------------------------------------------------------ */

typedef struct {
    const char *rel;   /* marker path (not NUL-terminated; rel_len) */
    size_t rel_len;
    const char *text;
    size_t len;
} cfile;

typedef struct {
    int32_t file;
    size_t off;        /* start of a def/class line within the file text */
} anchor;

typedef struct {
    cfile *files;
    int32_t n_files;
    anchor *anchors;
    int32_t n_anchors;
    const sp_vocab *vocab;
    int32_t *tokbuf;
    int tokcap;
} corpus;

static void corpus_free(corpus *c) {
    free(c->files);
    free(c->anchors);
    free(c->tokbuf);
}

static int corpus_index(corpus *c, const char *t, size_t n, char *err, size_t errlen) {
    size_t mlen = strlen(MARKER_PRE);
    int32_t cap = 0, acap = 0;
    for (size_t i = 0; i < n;) {
        const char *eol = memchr(t + i, '\n', n - i);
        size_t le = eol ? (size_t)(eol - t) + 1 : n;
        if (le - i > mlen && !memcmp(t + i, MARKER_PRE, mlen)) {
            if (c->n_files == cap) {
                cap = cap ? cap * 2 : 32;
                cfile *nf = realloc(c->files, (size_t)cap * sizeof(cfile));
                if (!nf) goto oom;
                c->files = nf;
            }
            cfile *f = &c->files[c->n_files++];
            f->rel = t + i + mlen;
            size_t rl = le - i - mlen;
            size_t post = strlen(MARKER_POST);
            f->rel_len = rl >= post ? rl - post : rl;
            f->text = t + le;
            f->len = 0;
        } else if (c->n_files) {
            cfile *f = &c->files[c->n_files - 1];
            f->len = le - (size_t)(f->text - t);
            const char *l = t + i;
            size_t ll = le - i;
            while (ll && *l == ' ') l++, ll--;
            if ((ll > 4 && !memcmp(l, "def ", 4)) || (ll > 6 && !memcmp(l, "class ", 6))) {
                if (c->n_anchors == acap) {
                    acap = acap ? acap * 2 : 256;
                    anchor *na = realloc(c->anchors, (size_t)acap * sizeof(anchor));
                    if (!na) goto oom;
                    c->anchors = na;
                }
                c->anchors[c->n_anchors++] = (anchor){c->n_files - 1, i - (size_t)(f->text - t)};
            }
        }
        i = le;
    }
    if (c->n_files == 0 || c->n_anchors == 0) {
        seterr(err, errlen, "the corpus has no \"%s\" file markers or no def/class lines",
                  MARKER_PRE);
        return -1;
    }
    return 0;
oom:
    seterr(err, errlen, "out of memory indexing the corpus");
    return -1;
}

/* Tokens of s[n] without BOS (or about n / 4 without a vocabulary). */
static int32_t count_tokens(corpus *c, const char *s, size_t n) {
    if (!c->vocab) return (int32_t)((n + 3) / 4);
    int k = sp_tokenize(c->vocab, s, n, c->tokbuf, c->tokcap, false, false);
    if (k >= 0) return k;
    if (k == SP_TOKENIZE_FAILED) return (int32_t)((n + 3) / 4); /* not a count */
    int need = -k;
    int32_t *nb = realloc(c->tokbuf, (size_t)need * sizeof(int32_t));
    if (!nb) return (int32_t)((n + 3) / 4);
    c->tokbuf = nb;
    c->tokcap = need;
    k = sp_tokenize(c->vocab, s, n, c->tokbuf, c->tokcap, false, false);
    return k >= 0 ? k : (int32_t)((n + 3) / 4);
}

/* The longest prefix of s[n] ending at a line end with at most ntok tokens
 * (at least one line, even if longer, so a piece is never empty). Binary
 * search over line ends: token counts grow with the prefix. */
static size_t cut_tokens(corpus *c, const char *s, size_t n, int32_t ntok) {
    size_t *ends = NULL, n_ends = 0, cap = 0;
    size_t bytes_max = (size_t)ntok * 16 + 64; /* no line end past this can fit */
    for (size_t i = 0; i < n && i < bytes_max; i++) {
        if (s[i] != '\n') continue;
        if (n_ends == cap) {
            cap = cap ? cap * 2 : 64;
            size_t *ne = realloc(ends, cap * sizeof(size_t));
            if (!ne) break;
            ends = ne;
        }
        ends[n_ends++] = i + 1;
    }
    if (n_ends == 0) {
        free(ends);
        return n < bytes_max ? n : bytes_max;
    }
    size_t lo = 0, hi = n_ends; /* answer: largest idx in [0, n_ends) that fits, else 0 */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (count_tokens(c, s, ends[mid]) <= ntok) lo = mid;
        else hi = mid;
    }
    size_t r = ends[lo];
    free(ends);
    return r;
}

/* A growable string. */
typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} gstr;

static void gs_add(gstr *g, const char *s, size_t n) {
    if (g->oom) return;
    if (g->n + n + 1 > g->cap) {
        size_t c = (g->n + n + 1) * 2;
        char *np = realloc(g->p, c);
        if (!np) {
            g->oom = true;
            return;
        }
        g->p = np;
        g->cap = c;
    }
    memcpy(g->p + g->n, s, n);
    g->n += n;
    g->p[g->n] = 0;
}

static void gs_str(gstr *g, const char *s) { gs_add(g, s, strlen(s)); }

static void gs_printf(gstr *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gs_printf(gstr *g, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (k > 0) gs_add(g, buf, (size_t)k < sizeof(buf) ? (size_t)k : sizeof(buf) - 1);
}

static void gs_marker(gstr *g, const cfile *f) {
    gs_str(g, MARKER_PRE);
    gs_add(g, f->rel, f->rel_len);
    gs_str(g, MARKER_POST);
}

/* ~ntok tokens of code starting at anchor a (cut at a line end). */
static void gs_snippet(gstr *g, corpus *c, const anchor *a, int32_t ntok) {
    const cfile *f = &c->files[a->file];
    const char *s = f->text + a->off;
    size_t n = f->len - a->off;
    gs_add(g, s, cut_tokens(c, s, n, ntok));
}

static const anchor *pick(corpus *c, uint64_t *rng) {
    return &c->anchors[bench_rng(rng) % (uint64_t)c->n_anchors];
}

static int add_item(bench_workload *w, int32_t *cap, gstr *g, int32_t max_tokens, int32_t conv,
                    int32_t turn, const char *salt) {
    if (g->oom) return -1;
    if (w->n == *cap) {
        int32_t c = *cap ? *cap * 2 : 64;
        bench_item *ni = realloc(w->items, (size_t)c * sizeof(bench_item));
        if (!ni) return -1;
        w->items = ni;
        *cap = c;
    }
    bench_item *it = &w->items[w->n];
    memset(it, 0, sizeof(*it));
    it->prompt = g->p ? g->p : strdup("");
    g->p = NULL;
    g->n = g->cap = 0;
    it->max_tokens = max_tokens < 1 ? 1 : max_tokens;
    it->conv = conv;
    it->turn = turn;
    if (salt && !(it->salt = strdup(salt))) {
        free(it->prompt);
        return -1;
    }
    if (!it->prompt) return -1;
    w->n++;
    return 0;
}

/* Whole-word replacement of name by name2 in s[n] (for code-edit). */
static void gs_renamed(gstr *g, const char *s, size_t n, const char *name, const char *name2) {
    size_t nl = strlen(name);
    for (size_t i = 0; i < n;) {
        bool word_start = i == 0 || !(s[i - 1] == '_' || (s[i - 1] >= '0' && s[i - 1] <= '9') ||
                                      ((s[i - 1] | 32) >= 'a' && (s[i - 1] | 32) <= 'z'));
        if (word_start && i + nl <= n && !memcmp(s + i, name, nl)) {
            char e = i + nl < n ? s[i + nl] : ' ';
            if (!(e == '_' || (e >= '0' && e <= '9') || ((e | 32) >= 'a' && (e | 32) <= 'z'))) {
                gs_str(g, name2);
                i += nl;
                continue;
            }
        }
        gs_add(g, s + i, 1);
        i++;
    }
}

static int32_t dflt(int32_t v, int32_t d) { return v > 0 ? v : d; }

/* Clamps so prompt + output fits the server's context (with a margin for
 * BOS and tokenizer differences: the vocabulary may not be the server's). */
static void fit(int32_t max_len, int32_t *prompt, int32_t *out) {
    if (max_len <= 0) return;
    int32_t room = max_len - 8 - max_len / 16;
    if (*prompt + *out <= room) return;
    if (*out > room / 2) *out = room / 2;
    if (*prompt > room - *out) *prompt = room - *out;
    if (*prompt < 8) *prompt = 8;
}

static int file_workload(const bench_workload_opts *o, bench_workload *w, char *err,
                         size_t errlen) {
    const char *path = o->name + 5;
    char *data = slurp(path, &(size_t){0});
    if (!data) {
        seterr(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    int32_t cap = 0, lineno = 0;
    int rc = -1;
    gstr g = {0};
    for (char *line = data, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "max_tokens");
        if (!cJSON_IsObject(j) || !cJSON_IsString(p) ||
            (mt && (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1 << 24))) {
            seterr(err, errlen, "%s:%d: want a JSON object with a string \"prompt\" and an "
                      "optional integer \"max_tokens\" >= 1", path, lineno);
            cJSON_Delete(j);
            goto done;
        }
        gs_str(&g, p->valuestring);
        int32_t m = mt ? (int32_t)mt->valuedouble : dflt(o->output_tokens, 128);
        /* what the line sets beyond prompt/max_tokens travels as is */
        cJSON_DeleteItemFromObjectCaseSensitive(j, "prompt");
        cJSON_DeleteItemFromObjectCaseSensitive(j, "max_tokens");
        cJSON_DeleteItemFromObjectCaseSensitive(j, "stream");
        cJSON_DeleteItemFromObjectCaseSensitive(j, "stream_options");
        char *extra = cJSON_GetArraySize(j) ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        if (add_item(w, &cap, &g, m, -1, 0, o->salt)) {
            free(extra);
            seterr(err, errlen, "out of memory");
            goto done;
        }
        w->items[w->n - 1].extra = extra;
    }
    if (w->n == 0) {
        seterr(err, errlen, "%s has no requests", path);
        goto done;
    }
    /* --num-requests: the first N lines, cycling when the file is shorter */
    if (o->n > 0 && o->n != w->n) {
        int32_t have = w->n;
        for (int32_t i = have; i < o->n; i++) {
            const bench_item *src = &w->items[i % have];
            gs_str(&g, src->prompt);
            if (add_item(w, &cap, &g, src->max_tokens, -1, 0, o->salt)) {
                seterr(err, errlen, "out of memory");
                goto done;
            }
            if (src->extra) w->items[w->n - 1].extra = strdup(src->extra);
        }
        while (w->n > o->n) {
            bench_item *it = &w->items[--w->n];
            free(it->prompt);
            free(it->salt);
            free(it->extra);
        }
    }
    snprintf(w->params, sizeof(w->params), "file %s, %d requests", path, w->n);
    rc = 0;
done:
    free(g.p);
    free(data);
    if (rc) bench_workload_free(w);
    return rc;
}

int bench_workload_make(const bench_workload_opts *o, const char *text, size_t text_len,
                        bench_workload *w, char *err, size_t errlen) {
    memset(w, 0, sizeof(*w));
    w->name = o->name;
    w->default_concurrency = 4;
    if (!bench_workload_known(o->name)) {
        seterr(err, errlen, "unknown workload '%s'", o->name);
        return -1;
    }
    if (!strncmp(o->name, "file:", 5)) return file_workload(o, w, err, errlen);
    corpus c = {.vocab = o->vocab};
    gstr g = {0};
    int32_t cap = 0;
    uint64_t rng = o->seed ^ 0x5bd1e9955bd1e995ull;
    int32_t M = o->max_model_len;
    const char *nm = o->name;
    if (corpus_index(&c, text, text_len, err, errlen)) goto fail;
    if (!strcmp(nm, "shared-prefix")) {
        /* One long common prefix (a system prompt, then a held-out module),
         * then a short distinct suffix per request: a def line from
         * elsewhere to complete. Requests cycle over n_prefixes documents. */
        int32_t n = dflt(o->n, 16), out = dflt(o->output_tokens, 32), suffix = 24;
        int32_t P = dflt(o->prefix_tokens, 1536), np = dflt(o->n_prefixes, 1);
        int32_t pp = P + suffix;
        fit(M, &pp, &out);
        P = pp - suffix;
        if (P < 16) P = 16;
        char **prefix = calloc((size_t)np, sizeof(char *));
        if (!prefix) goto oom;
        for (int32_t d = 0; d < np; d++) {
            const cfile *f = &c.files[bench_rng(&rng) % (uint64_t)c.n_files];
            gstr h = {0};
            gs_str(&h, "# You are a careful Python assistant. Read the module below, then "
                       "complete the code that follows it in the same style.\n");
            gs_marker(&h, f);
            int32_t used = count_tokens(&c, h.p ? h.p : "", h.n);
            gs_add(&h, f->text, cut_tokens(&c, f->text, f->len, P - used > 8 ? P - used : 8));
            prefix[d] = h.p;
            if (h.oom) {
                for (int32_t k = 0; k <= d; k++) free(prefix[k]);
                free(prefix);
                goto oom;
            }
        }
        int rc = 0;
        for (int32_t i = 0; i < n && !rc; i++) {
            gs_str(&g, prefix[i % np]);
            gs_printf(&g, "# ---- task %d ----\n", i);
            const anchor *a = pick(&c, &rng);
            gs_snippet(&g, &c, a, suffix - 6 > 4 ? suffix - 6 : 4);
            rc = add_item(w, &cap, &g, out, -1, 0, o->salt);
        }
        for (int32_t d = 0; d < np; d++) free(prefix[d]);
        free(prefix);
        if (rc) goto oom;
        snprintf(w->params, sizeof(w->params),
                 "%d requests, %d shared prefix(es) of ~%d tokens + ~%d-token distinct suffix, "
                 "max_tokens %d", n, np, P, suffix, out);
    } else if (!strcmp(nm, "multi-tenant")) {
        /* T tenants (each its own cache_salt, "tenant-K") reading D shared
         * documents with Zipf popularity: each request is a document (a
         * held-out module, from its first line) then a short distinct
         * question (a def line from elsewhere to complete). The same
         * document under two tenants must not share cached blocks; under
         * one tenant, a prefix-affinity router sends it where it is cached. */
        int32_t n = dflt(o->n, 64), out = dflt(o->output_tokens, 16), q = dflt(o->prompt_tokens, 24);
        int32_t P = dflt(o->prefix_tokens, 256), T = dflt(o->tenants, 4), D = dflt(o->documents, 8);
        double s = o->zipf > 0 ? o->zipf : o->zipf < 0 ? 0 : 1.0;
        int32_t pp = P + q;
        fit(M, &pp, &out);
        P = pp - q > 16 ? pp - q : 16;
        char **doc = calloc((size_t)D, sizeof(char *));
        double *cdf = calloc((size_t)D, sizeof(double));
        if (!doc || !cdf) {
            free(doc);
            free(cdf);
            goto oom;
        }
        double tot = 0;
        for (int32_t d = 0; d < D; d++) cdf[d] = tot += 1.0 / pow(d + 1, s);
        int rc = 0;
        for (int32_t d = 0; d < D && !rc; d++) {
            /* a module long enough to fill the document (a short one would
             * leave the question where a router reads the document) */
            const cfile *f = &c.files[bench_rng(&rng) % (uint64_t)c.n_files];
            for (int k = 0; k < 1000 && cut_tokens(&c, f->text, f->len, P) >= f->len; k++)
                f = &c.files[bench_rng(&rng) % (uint64_t)c.n_files];
            gstr h = {0};
            gs_marker(&h, f);
            int32_t used = count_tokens(&c, h.p ? h.p : "", h.n);
            gs_add(&h, f->text, cut_tokens(&c, f->text, f->len, P - used > 8 ? P - used : 8));
            doc[d] = h.p;
            rc = h.oom || !h.p;
        }
        for (int32_t i = 0; i < n && !rc; i++) {
            int32_t t = (int32_t)(bench_rng(&rng) % (uint64_t)T);
            double u = bench_rng_uniform(&rng) * tot;
            int32_t d = 0;
            while (d < D - 1 && cdf[d] < u) d++;
            gs_str(&g, doc[d]);
            gs_printf(&g, "\n# ---- question %d: complete this ----\n", i);
            gs_snippet(&g, &c, pick(&c, &rng), q - 8 > 4 ? q - 8 : 4);
            char salt[160];
            if (o->salt) snprintf(salt, sizeof(salt), "%s/tenant-%d", o->salt, t);
            else snprintf(salt, sizeof(salt), "tenant-%d", t);
            rc = add_item(w, &cap, &g, out, -1, 0, salt);
        }
        for (int32_t d = 0; d < D; d++) free(doc[d]);
        free(doc);
        free(cdf);
        if (rc) goto oom;
        snprintf(w->params, sizeof(w->params),
                 "%d requests, %d tenants (cache_salt tenant-K), %d documents of ~%d tokens with "
                 "Zipf(%g) popularity + ~%d-token question, max_tokens %d", n, T, D, P, s, q, out);
    } else if (!strcmp(nm, "long-output") || !strcmp(nm, "saturate") ||
               !strcmp(nm, "code-complete")) {
        /* distinct prompts from def/class lines: a file's marker, then code */
        bool lo = !strcmp(nm, "long-output"), sat = !strcmp(nm, "saturate");
        int32_t n = dflt(o->n, sat ? 64 : 16);
        int32_t P = dflt(o->prompt_tokens, lo ? 48 : sat ? 128 : 192);
        int32_t out = dflt(o->output_tokens, lo ? 384 : sat ? 64 : 64);
        fit(M, &P, &out);
        for (int32_t i = 0; i < n; i++) {
            const anchor *a = pick(&c, &rng);
            gs_marker(&g, &c.files[a->file]);
            int32_t used = count_tokens(&c, g.p ? g.p : "", g.n);
            gs_snippet(&g, &c, a, P - used > 4 ? P - used : 4);
            if (add_item(w, &cap, &g, out, -1, 0, o->salt)) goto oom;
        }
        if (sat) w->default_concurrency = n;
        snprintf(w->params, sizeof(w->params), "%d requests, distinct ~%d-token prompts, "
                 "max_tokens %d%s", n, P, out, sat ? ", all at once" : "");
    } else if (!strcmp(nm, "code-edit")) {
        /* a snippet, then the instruction to rewrite it with its defined name
         * renamed and the first line of the rewrite: the natural continuation
         * copies the rest (what n-gram and suffix proposers exploit) */
        int32_t n = dflt(o->n, 16), S = dflt(o->prompt_tokens, 160);
        int32_t out = dflt(o->output_tokens, S + 16);
        int32_t total = 2 * S + 32;
        fit(M, &total, &out);
        if (total < 2 * S + 32) S = (total - 32) / 2 > 8 ? (total - 32) / 2 : 8;
        for (int32_t i = 0; i < n; i++) {
            const anchor *a = pick(&c, &rng);
            const cfile *f = &c.files[a->file];
            const char *s = f->text + a->off;
            size_t sl = cut_tokens(&c, s, f->len - a->off, S);
            const char *nmp = s;
            while (*nmp == ' ') nmp++;
            nmp += *nmp == 'd' ? 4 : 6; /* "def " / "class " */
            size_t idl = 0;
            while (nmp[idl] == '_' || (nmp[idl] >= '0' && nmp[idl] <= '9') ||
                   ((nmp[idl] | 32) >= 'a' && (nmp[idl] | 32) <= 'z'))
                idl++;
            char name[128], name2[160];
            snprintf(name, sizeof(name), "%.*s", (int)(idl < 100 ? idl : 100), nmp);
            snprintf(name2, sizeof(name2), "%s_v%d", name, (int)(bench_rng(&rng) % 9) + 2);
            gs_marker(&g, f);
            gs_add(&g, s, sl);
            gs_printf(&g, "# The same code again, with %s renamed to %s:\n", name, name2);
            const char *eol = memchr(s, '\n', sl);
            size_t first = eol ? (size_t)(eol - s) + 1 : sl;
            gs_renamed(&g, s, first, name, name2);
            if (add_item(w, &cap, &g, out, -1, 0, o->salt)) goto oom;
        }
        snprintf(w->params, sizeof(w->params), "%d requests, ~%d-token snippet + its renamed "
                 "first line, max_tokens %d", n, S, out);
    } else if (!strcmp(nm, "multi-turn")) {
        /* conversations: each turn adds a snippet and asks to continue; the
         * load generator sends turn t+1 after turn t answered, with the
         * whole history (earlier turns and answers) in front */
        int32_t turns = dflt(o->turns, 4), n = dflt(o->n, 16);
        int32_t convs = (n + turns - 1) / turns;
        int32_t S = dflt(o->prompt_tokens, 64), out = dflt(o->output_tokens, 48);
        if (M > 0) {
            int32_t per = (M - 16 - M / 16) / turns;
            if (S + out > per) {
                out = SP_MIN(out, per / 2);
                S = per - out;
            }
        }
        for (int32_t t = 0; t < turns; t++)
            for (int32_t k = 0; k < convs; k++) {
                const anchor *a = pick(&c, &rng);
                if (t == 0) gs_marker(&g, &c.files[a->file]);
                else gs_printf(&g, "\n# ---- turn %d: continue with this ----\n", t + 1);
                gs_snippet(&g, &c, a, S);
                if (add_item(w, &cap, &g, out, k, t, o->salt)) goto oom;
            }
        w->n_convs = convs;
        snprintf(w->params, sizeof(w->params), "%d conversations x %d turns, ~%d new tokens and "
                 "max_tokens %d per turn; history resent each turn", convs, turns, S, out);
    }
    corpus_free(&c);
    return 0;
oom:
    seterr(err, errlen, "out of memory generating the workload");
fail:
    free(g.p);
    corpus_free(&c);
    bench_workload_free(w);
    return -1;
}

void bench_workload_free(bench_workload *w) {
    for (int32_t i = 0; i < w->n; i++) {
        free(w->items[i].prompt);
        free(w->items[i].salt);
        free(w->items[i].extra);
    }
    free(w->items);
    memset(w, 0, sizeof(*w));
}
