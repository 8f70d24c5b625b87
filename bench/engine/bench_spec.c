/* bench_spec.c: benchmark of speculative decoding through the
 * public engine API only.
 *
 * usage: bin/bench_spec MODEL [-t THREADS] [--seed S] [--spec-k K] [--fixed-k]
 *          [--workloads DIR [--draft DRAFT.gguf] [--proposers off,ngram,suffix,draft]
 *             [--concurrency 1,4,16] [--n-prompts N] [--prompt-tokens P] [--gen G]
 *             [--edit-snippet S] [--edit-gen G] [--repeat-prompts M] [--reps R]
 *             [--show-prompts]]
 *          [--replay ALPHAS --ks KS [--replay-prompt P] [--replay-gen G]]
 *
 * --workloads DIR: DIR holds heldout.txt, the held-out split written by
 *   tools/train/corpus.py (files joined with "# ==== file: PATH ====" lines).
 *   For each concurrency C, each workload and each proposer (off first: its
 *   outputs are the reference) a fresh engine (max_seqs = C, spec_k K,
 *   adaptive planner on unless --fixed-k, prefix cache on) runs the
 *   workload's requests greedily with C in flight (ignore_eos, so every
 *   proposer generates the same number of tokens). Workloads:
 *   completion  N prompts: a file's marker line + ~P tokens of text cut at a
 *               line boundary, from the file start or a later def/class line,
 *               round-robin over the files; G tokens each.
 *   editing     N prompts: marker + a ~S-token snippet (default 320, at most
 *               4/5 of n_ctx - edit-gen: 204 on a 512-position model) starting at a
 *               def/class line, then "# the same code, with NAME renamed to
 *               NAME2" and the snippet's first lines with that identifier
 *               renamed: the natural continuation copies the rest of the
 *               snippet (with the rename). Generates min(edit-gen, n_ctx -
 *               prompt) tokens, so the request fits the model's context.
 *   repeated    M completion-style prompts (other positions than the
 *               completion ones), submitted as a round, then the same M again
 *               after the first round finished; reported together and per round.
 *   Reports tokens/s (generated tokens / wall time of the workload), mean
 *   TPOT (sp_request_stats.tpot_ms), acceptance rate (accepted / drafted),
 *   mean acceptance length ((accepted + steps) / steps) and the speedup of
 *   tokens/s over off at the same C. Every proposer's tokens must equal
 *   off's, request by request: a mismatch is reported and the exit status is 1.
 *   --reps R keeps the fastest of R runs per cell (each checked).
 * --replay ALPHAS --ks KS: a P-token (64) prompt of seeded random token ids
 *   is run greedily with spec off and its G (96) output tokens recorded; then,
 *   for each ALPHA and k, the same request with a request-level proposer
 *   (sp_request_params.propose) that proposes the recorded continuation,
 *   each token replaced by a wrong one with probability 1-ALPHA (seeded),
 *   spec_adaptive off and spec_k = k, so k tokens are proposed per step
 *   (fewer only at the end of the request). Speedup = decode tokens/s
 *   (1000 / TPOT) over the off run's; off runs are repeated before each
 *   ALPHA and at the end, and each ALPHA is compared with the mean of the two
 *   off runs around it. Ideal tokens per verification step =
 *   (1 - ALPHA^(k+1)) / (1 - ALPHA); reported next to the measured mean
 *   acceptance length and as speedup / ideal. speedup / measured mean
 *   acceptance length separates the engine's efficiency from the luck of the
 *   seeded draw (about +-8% on the length at ALPHA 0.8, k 4, 96 tokens).
 *
 * Prints Markdown tables and, last, one JSON line with every number. Progress
 * goes to stderr. Exit status 1 on any engine error or output mismatch, 2 on
 * bad arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "common.h"
#include "kernels/kernels.h"
#include "specula.h"

/* ---- helpers ---------------------------------------------------------------- */

/* parses "a,b,c" into up to cap doubles in (0,1); returns the count or -1 */
static int parse_alphas(const char *s, double *out, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || !(v > 0 && v < 1) || n == cap) return -1;
        out[n++] = v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

/* a growable string */
typedef struct {
    char *s;
    size_t n, cap;
} str;
static void str_add(str *b, const char *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        if (!b->s) die("out of memory", NULL);
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void str_cat(str *b, const char *p) { str_add(b, p, strlen(p)); }

/* JSON output: one growable string */
static str js;
static void jsf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void jsf(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n >= (int)sizeof(buf)) n = sizeof(buf) - 1;
    str_add(&js, buf, (size_t)n);
}

/* ---- running a set of requests ------------------------------------------------ */

/* Runs requests [0, n) as run_requests does, into n fresh entries of q that
 * keep their output tokens (free with free_reqs). */
static double run_spec(sp_engine *e, const prompt_t *prompts, int n, int conc,
                       const sp_request_params *tmpl, req *q) {
    for (int i = 0; i < n; i++) {
        memset(&q[i], 0, sizeof(q[i]));
        q[i].cap_out = prompts[i].gen;
        q[i].out = xmalloc(sizeof(sp_token) * (size_t)prompts[i].gen);
    }
    return run_requests(e, prompts, n, conc, tmpl, q);
}

static void free_reqs(req *q, int n) {
    for (int i = 0; i < n; i++) free(q[i].out);
    free(q);
}

/* Sums over requests [from, to) */
typedef struct {
    int n;
    int64_t gen, steps, drafted, accepted;
    double wall_s, tps, tpot_ms, acc_rate, acc_len;
} agg;

static agg aggregate(const req *q, int from, int to, double wall) {
    agg a;
    memset(&a, 0, sizeof(a));
    a.n = to - from;
    double tpot = 0;
    for (int i = from; i < to; i++) {
        a.gen += q[i].n_out;
        a.steps += q[i].st.spec_steps;
        a.drafted += q[i].st.spec_drafted;
        a.accepted += q[i].st.spec_accepted;
        tpot += q[i].st.tpot_ms;
    }
    a.wall_s = wall;
    a.tps = wall > 0 ? (double)a.gen / wall : NAN;
    a.tpot_ms = a.n ? tpot / a.n : NAN;
    a.acc_rate = a.drafted ? (double)a.accepted / (double)a.drafted : NAN;
    a.acc_len = a.steps ? (double)(a.accepted + a.steps) / (double)a.steps : NAN;
    return a;
}

/* ---- the held-out corpus ------------------------------------------------------- */

typedef struct {
    const char *marker; /* the "# ==== file: PATH ====\n" line */
    size_t marker_len;
    const char *body;   /* the file's text */
    size_t len;
    const char *path;   /* NUL-terminated copy */
    size_t *anchors;    /* body offsets of line starts usable as prompt starts */
    int n_anchors;
    size_t *defs;       /* ... of def/class lines, for snippets */
    int n_defs;
} hfile;

static const char MARK[] = "# ==== file: ";

static bool starts_def(const char *p, const char *end) {
    static const char *kw[] = {"def ", "class ", "    def ", "async def ", "    async def "};
    for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++) {
        size_t l = strlen(kw[i]);
        if ((size_t)(end - p) > l && !memcmp(p, kw[i], l)) return true;
    }
    return false;
}

/* Splits heldout.txt into files; anchors: the file start, then def/class
 * lines at least SPACING bytes after the previous anchor. */
static hfile *load_heldout(const char *path, int *n_files, char **keep) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open the held-out corpus (run tools/train/corpus.py --out DIR)", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0) die("empty held-out corpus", path);
    char *t = xmalloc((size_t)sz + 1);
    if (fread(t, 1, (size_t)sz, f) != (size_t)sz) die("cannot read", path);
    fclose(f);
    t[sz] = 0;
    *keep = t;
    const size_t SPACING = 2000;
    int cap = 16, n = 0;
    hfile *fs = xcalloc((size_t)cap, sizeof(hfile));
    const char *p = t, *end = t + sz;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl + 1 : end;
        if ((size_t)(le - p) > sizeof(MARK) && !memcmp(p, MARK, sizeof(MARK) - 1)) {
            if (n == cap) {
                fs = realloc(fs, sizeof(hfile) * (size_t)(cap *= 2));
                if (!fs) die("out of memory", NULL);
            }
            hfile *h = &fs[n++];
            memset(h, 0, sizeof(*h));
            h->marker = p;
            h->marker_len = (size_t)(le - p);
            h->body = le;
            const char *ps = p + sizeof(MARK) - 1, *pe = le - 1;
            while (pe > ps && (pe[-1] == '=' || pe[-1] == ' ')) pe--;
            char *pp = xmalloc((size_t)(pe - ps) + 1);
            memcpy(pp, ps, (size_t)(pe - ps));
            pp[pe - ps] = 0;
            h->path = pp;
        } else if (n > 0) {
            hfile *h = &fs[n - 1];
            h->len = (size_t)(le - h->body);
        }
        p = le;
    }
    if (n == 0) die("no \"# ==== file: PATH ====\" lines in the held-out corpus", path);
    for (int i = 0; i < n; i++) {
        hfile *h = &fs[i];
        int ca = 8, cd = 8;
        h->anchors = xmalloc(sizeof(size_t) * (size_t)ca);
        h->defs = xmalloc(sizeof(size_t) * (size_t)cd);
        h->anchors[h->n_anchors++] = 0;
        size_t last_a = 0, last_d = 0;
        bool any_d = false;
        for (size_t o = 0; o < h->len;) {
            const char *q = h->body + o, *e = h->body + h->len;
            const char *nl = memchr(q, '\n', (size_t)(e - q));
            size_t next = nl ? (size_t)(nl + 1 - h->body) : h->len;
            if (starts_def(q, e)) {
                if (o >= last_a + SPACING) {
                    if (h->n_anchors == ca) h->anchors = realloc(h->anchors, sizeof(size_t) * (size_t)(ca *= 2));
                    if (!h->anchors) die("out of memory", NULL);
                    h->anchors[h->n_anchors++] = last_a = o;
                }
                if (!any_d || o >= last_d + SPACING) {
                    if (h->n_defs == cd) h->defs = realloc(h->defs, sizeof(size_t) * (size_t)(cd *= 2));
                    if (!h->defs) die("out of memory", NULL);
                    h->defs[h->n_defs++] = last_d = o;
                    any_d = true;
                }
            }
            o = next;
        }
    }
    *n_files = n;
    return fs;
}

static const sp_vocab *g_vocab;
static bool g_show; /* --show-prompts: print the first prompt of each workload on stderr */
static sp_token *g_tokbuf;
static int g_tokcap;

static int ntok(const char *s, size_t len, bool add_special) {
    for (;;) {
        int r = sp_tokenize(g_vocab, s, len, g_tokbuf, g_tokcap, add_special, false);
        if (r >= 0) return r;
        if (r == SP_TOKENIZE_FAILED) die("out of memory while tokenizing", NULL);
        if (-r > INT32_MAX - 64) die("text too long to tokenize", NULL);
        g_tokcap = -r + 64;
        g_tokbuf = realloc(g_tokbuf, sizeof(sp_token) * (size_t)g_tokcap);
        if (!g_tokbuf) die("out of memory", NULL);
    }
}

/* Offset after the whole lines from body[start] that hold about target
 * tokens (line by line tokenization; at least one line). */
static size_t cut_lines(const hfile *h, size_t start, int target, int *got) {
    size_t o = start;
    int t = 0;
    while (o < h->len && t < target) {
        const char *q = h->body + o;
        const char *nl = memchr(q, '\n', h->len - o);
        size_t next = nl ? (size_t)(nl + 1 - h->body) : h->len;
        t += ntok(q, next - o, false);
        o = next;
    }
    *got = t;
    return o;
}

static prompt_t tokenize_prompt(const char *text, size_t len, int32_t gen) {
    int n = ntok(text, len, true);
    prompt_t p;
    p.toks = xmalloc(sizeof(sp_token) * (size_t)n);
    memcpy(p.toks, g_tokbuf, sizeof(sp_token) * (size_t)n);
    p.n = n;
    p.gen = gen;
    return p;
}

/* The k-th (anchor) position in round-robin order over files: j-th anchor of
 * each file that has one, for j = 0, 1, ... Wraps around. */
static void pick(const hfile *fs, int nf, bool defs, int k, int *fi, size_t *off) {
    int total = 0;
    for (int i = 0; i < nf; i++) total += defs ? fs[i].n_defs : fs[i].n_anchors;
    if (total == 0) die("the held-out corpus has no def/class lines to take snippets from", NULL);
    k %= total;
    for (int j = 0;; j++)
        for (int i = 0; i < nf; i++) {
            int na = defs ? fs[i].n_defs : fs[i].n_anchors;
            if (j >= na) continue;
            if (k-- == 0) {
                *fi = i;
                *off = defs ? fs[i].defs[j] : fs[i].anchors[j];
                return;
            }
        }
}

/* Completion-style prompt number k: marker + ~target tokens from an anchor. */
static prompt_t completion_prompt(const hfile *fs, int nf, int k, int target, int gen) {
    int fi, got = 0;
    size_t off;
    /* skip anchors with too little text after them (e.g. a tiny file) */
    for (int tries = 0;; tries++) {
        pick(fs, nf, false, k + tries, &fi, &off);
        size_t end = cut_lines(&fs[fi], off, target, &got);
        if (got >= target / 2 || tries > 64) {
            str b = {0};
            str_add(&b, fs[fi].marker, fs[fi].marker_len);
            str_add(&b, fs[fi].body + off, end - off);
            if (g_show && k == 0) fprintf(stderr, "---- completion prompt 0 ----\n%s---- end ----\n", b.s);
            prompt_t p = tokenize_prompt(b.s, b.n, gen);
            free(b.s);
            return p;
        }
    }
}

static bool is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

/* Editing prompt number k: marker + snippet, a comment, and the snippet's
 * first lines with the defined name renamed. gen = min(edit_gen, n_ctx - prompt). */
static prompt_t edit_prompt(const hfile *fs, int nf, int k, int snippet, int edit_gen, int n_ctx,
                            char *name_out, size_t name_cap) {
    int fi, got = 0;
    size_t off, end = 0;
    for (int tries = 0;; tries++) {
        pick(fs, nf, true, k + tries, &fi, &off);
        end = cut_lines(&fs[fi], off, snippet, &got);
        if (got >= snippet / 2 || tries > 64) break;
    }
    const hfile *h = &fs[fi];
    const char *s = h->body + off;
    size_t slen = end - off;
    /* the defined name: after "def " / "class " on the first line */
    const char *q = s;
    while (*q == ' ') q++;
    if (!strncmp(q, "async ", 6)) q += 6;
    q += !strncmp(q, "def ", 4) ? 4 : !strncmp(q, "class ", 6) ? 6 : 0;
    size_t nl = 0;
    while (is_ident(q[nl]) && nl < 64) nl++;
    char name[80] = "", nname[96] = "";
    memcpy(name, q, nl);
    name[nl] = 0;
    snprintf(nname, sizeof(nname), "%s2", name);
    snprintf(name_out, name_cap, "%s", name);
    /* the head: whole lines holding about an eighth of the snippet (>= 2 lines) */
    int head_t = 0, lines = 0;
    size_t ho = 0;
    while (ho < slen && (head_t < snippet / 8 || lines < 2)) {
        const char *e = memchr(s + ho, '\n', slen - ho);
        size_t next = e ? (size_t)(e + 1 - s) : slen;
        head_t += ntok(s + ho, next - ho, false);
        ho = next;
        lines++;
    }
    if (ho >= slen) ho = slen / 2; /* never the whole snippet */
    str b = {0};
    str_add(&b, h->marker, h->marker_len);
    str_add(&b, s, slen);
    if (slen && s[slen - 1] != '\n') str_cat(&b, "\n");
    str_cat(&b, "\n");
    if (nl) {
        str_cat(&b, "# the same code, with ");
        str_cat(&b, name);
        str_cat(&b, " renamed to ");
        str_cat(&b, nname);
        str_cat(&b, "\n");
    } else {
        str_cat(&b, "# the same code again\n");
    }
    /* head with whole-word renames */
    for (size_t i = 0; i < ho;) {
        if (nl && !strncmp(s + i, name, nl) && i + nl <= ho && (i == 0 || !is_ident(s[i - 1])) &&
            (i + nl == ho || !is_ident(s[i + nl]))) {
            str_cat(&b, nname);
            i += nl;
        } else {
            str_add(&b, s + i, 1);
            i++;
        }
    }
    if (g_show && k == 0) fprintf(stderr, "---- editing prompt 0 ----\n%s---- end ----\n", b.s);
    prompt_t p = tokenize_prompt(b.s, b.n, 1);
    free(b.s);
    int32_t gen = SP_MIN(edit_gen, n_ctx - p.n);
    if (gen < SP_MIN(8, edit_gen)) die("--edit-snippet too long for the model's context", NULL);
    p.gen = gen;
    return p;
}

/* ---- workloads ------------------------------------------------------------------ */

enum { W_COMPLETION, W_EDITING, W_REPEATED, N_W };
static const char *W_NAME[N_W] = {"completion", "editing", "repeated"};

typedef struct {
    bool ran, skipped;
    agg all, r1, r2; /* r1/r2: repeated rounds (all = both) */
    bool identical;
    int mismatches;
    uint64_t planned_zero;
    /* where the engine's time went (engine counters over the cell) */
    uint64_t eng_steps;
    double draft_ms, verify_ms, cost_scale, cost_attn, dcost_1, dcost_scale;
    req *q;          /* kept for off (the reference) */
    int nq;
} cell;

typedef struct {
    const sp_model *m, *draft;
    int threads, spec_k, reps;
    bool adaptive;
} wl_cfg;

/* Runs one workload with one proposer at concurrency c; fills R (q kept). */
static void run_cell(const wl_cfg *cfg, sp_spec_mode mode, int c, int w, const prompt_t *P, int n,
                     cell *R) {
    const sp_model_info *h = sp_model_get_info(cfg->m);
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = cfg->threads;
    ep.max_seqs = c;
    ep.spec = mode;
    ep.spec_k = cfg->spec_k;
    ep.spec_adaptive = cfg->adaptive;
    if (mode == SP_SPEC_DRAFT) ep.draft = cfg->draft;
    sp_request_params rp = base_params();
    for (int rep = 0; rep < cfg->reps; rep++) {
        sp_engine *e = make_engine(cfg->m, ep);
        uint64_t warm_rng = 0xa11ce;
        warmup(e, h->n_vocab, &warm_rng);
        sp_engine_stats s0, s1;
        sp_engine_get_stats(e, &s0);
        int nq = w == W_REPEATED ? 2 * n : n;
        req *q = xcalloc((size_t)nq, sizeof(req));
        cell r;
        memset(&r, 0, sizeof(r));
        if (w == W_REPEATED) {
            double w1 = run_spec(e, P, n, c, &rp, q);
            double w2 = run_spec(e, P, n, c, &rp, q + n);
            for (int i = 0; i < n; i++) q[n + i].idx = n + i;
            r.r1 = aggregate(q, 0, n, w1);
            r.r2 = aggregate(q, n, 2 * n, w2);
            r.all = aggregate(q, 0, 2 * n, w1 + w2);
        } else {
            double wall = run_spec(e, P, n, c, &rp, q);
            r.all = aggregate(q, 0, n, wall);
        }
        sp_engine_get_stats(e, &s1);
        r.planned_zero = s1.spec_planned_zero - s0.spec_planned_zero;
        r.eng_steps = s1.steps - s0.steps;
        r.draft_ms = s1.draft_ms - s0.draft_ms;
        r.verify_ms = s1.verify_ms - s0.verify_ms;
        r.cost_scale = s1.cost_scale;
        r.cost_attn = s1.cost_attn_ms_per_1k;
        r.dcost_1 = s1.draft_cost_ms_1;
        r.dcost_scale = s1.draft_cost_scale;
        char err[512];
        if (sp_engine_check(e, err, sizeof(err))) die("engine invariant check", err);
        sp_engine_free(e);
        r.q = q;
        r.nq = nq;
        r.ran = true;
        fprintf(stderr, "%s C=%d %s rep %d: %.2f tokens/s, acceptance %.3f, length %.2f\n",
                W_NAME[w], c, sp_spec_mode_str(mode), rep, r.all.tps, r.all.acc_rate, r.all.acc_len);
        if (!R->ran || r.all.tps > R->all.tps) {
            if (R->q) free_reqs(R->q, R->nq);
            *R = r;
        } else {
            free_reqs(q, nq);
        }
    }
}

/* Compares R's outputs with the reference's; returns mismatching requests. */
static int compare(const cell *ref, const cell *R, const char *what) {
    int bad = 0;
    for (int i = 0; i < R->nq; i++) {
        const req *a = &ref->q[i], *b = &R->q[i];
        int j = 0;
        while (j < a->n_out && j < b->n_out && a->out[j] == b->out[j]) j++;
        if (j < a->n_out || j < b->n_out) {
            if (bad < 3)
                fprintf(stderr, "bench_spec: MISMATCH %s request %d: first difference at output token "
                                "%d (off: %d tokens, this: %d tokens)\n",
                        what, i, j, a->n_out, b->n_out);
            bad++;
        }
    }
    return bad;
}

static void json_agg(const char *name, const agg *a) {
    jsf("\"%s\": {\"requests\": %d, \"gen_tokens\": %lld, \"wall_s\": %.4f, \"tps\": %.3f, "
        "\"tpot_ms\": %.4f, \"steps\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
        "\"acceptance\": %.4f, \"acc_len\": %.4f}",
        name, a->n, (long long)a->gen, a->wall_s, a->tps, a->tpot_ms, (long long)a->steps,
        (long long)a->drafted, (long long)a->accepted, isnan(a->acc_rate) ? 0 : a->acc_rate,
        isnan(a->acc_len) ? 0 : a->acc_len);
}

static void fmt_rate(char *b, size_t n, double v) {
    if (isnan(v)) snprintf(b, n, "-");
    else snprintf(b, n, "%.3f", v);
}
static void fmt_len(char *b, size_t n, double v) {
    if (isnan(v)) snprintf(b, n, "-");
    else snprintf(b, n, "%.2f", v);
}

static int bench_workloads(const wl_cfg *cfg, const char *dir, const int *modes, int n_modes,
                           const int *concs, int n_concs, int n_prompts, int prompt_tokens, int gen,
                           int snippet, int edit_gen, int n_repeat) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/heldout.txt", dir);
    char *keep;
    int nf;
    hfile *fs = load_heldout(path, &nf, &keep);
    const sp_model_info *h = sp_model_get_info(cfg->m);
    g_vocab = sp_model_get_vocab(cfg->m);
    sp_engine_params dp = sp_engine_default_params();
    int32_t n_ctx = dp.n_ctx > 0 ? dp.n_ctx : SP_MIN(h->n_ctx_train > 0 ? h->n_ctx_train : 2048, 8192);
    /* default snippet: 320 tokens, less where the context cannot hold it and
     * edit-gen tokens (the bundled pair has 512 positions) */
    const bool snippet_auto = snippet <= 0;
    if (snippet_auto) snippet = SP_MAX(16, SP_MIN(320, (n_ctx - edit_gen) * 4 / 5));

    prompt_t *W[N_W];
    int WN[N_W] = {n_prompts, n_prompts, n_repeat};
    char names[64][80];
    W[W_COMPLETION] = xmalloc(sizeof(prompt_t) * (size_t)n_prompts);
    W[W_EDITING] = xmalloc(sizeof(prompt_t) * (size_t)n_prompts);
    W[W_REPEATED] = xmalloc(sizeof(prompt_t) * (size_t)n_repeat);
    for (int i = 0; i < n_prompts; i++) {
        W[W_COMPLETION][i] = completion_prompt(fs, nf, i, prompt_tokens, gen);
        W[W_EDITING][i] = edit_prompt(fs, nf, i, snippet, edit_gen, n_ctx, names[i % 64], sizeof(names[0]));
    }
    for (int i = 0; i < n_repeat; i++) W[W_REPEATED][i] = completion_prompt(fs, nf, n_prompts + i, prompt_tokens, gen);
    for (int w = 0; w < N_W; w++)
        for (int i = 0; i < WN[w]; i++)
            if (W[w][i].n + W[w][i].gen > n_ctx)
                die("a workload request does not fit the model's context (use smaller --prompt-tokens / --gen)", NULL);

    printf("\n### workloads from %s (%d held-out files), greedy, spec_k %d, planner %s, "
           "%d rep%s per cell (fastest kept)\n\n",
           path, nf, cfg->spec_k, cfg->adaptive ? "adaptive" : "off (fixed k)", cfg->reps,
           cfg->reps > 1 ? "s" : "");
    printf("editing snippets: about %d tokens%s\n\n", snippet,
           snippet_auto ? " (default: 320, at most 4/5 of n_ctx - edit-gen)" : "");
    printf("| workload | requests | mean prompt tokens | generated tokens per request |\n|---|---|---|---|\n");
    jsf(", \"workloads\": {\"corpus\": \"%s\", \"files\": %d, \"spec_k\": %d, \"adaptive\": %s, "
        "\"reps\": %d, \"n_ctx\": %d, \"edit_snippet\": %d, \"prompts\": {",
        path, nf, cfg->spec_k, cfg->adaptive ? "true" : "false", cfg->reps, n_ctx, snippet);
    for (int w = 0; w < N_W; w++) {
        double mp = 0, mg = 0;
        int gmin = 1 << 30, gmax = 0;
        for (int i = 0; i < WN[w]; i++) {
            mp += W[w][i].n, mg += W[w][i].gen;
            gmin = SP_MIN(gmin, W[w][i].gen), gmax = SP_MAX(gmax, W[w][i].gen);
        }
        mp /= WN[w], mg /= WN[w];
        char g[64];
        if (gmin == gmax) snprintf(g, sizeof(g), "%d", gmin);
        else snprintf(g, sizeof(g), "%.1f (%d..%d)", mg, gmin, gmax);
        printf("| %s | %d%s | %.1f | %s |\n", W_NAME[w], WN[w], w == W_REPEATED ? " x 2 rounds" : "",
               mp, g);
        jsf("%s\"%s\": {\"n\": %d, \"mean_prompt_tokens\": %.2f, \"mean_gen_tokens\": %.2f}",
            w ? ", " : "", W_NAME[w], WN[w], mp, mg);
    }
    jsf("}, \"cells\": [");
    fflush(stdout);

    { /* warm up the process (weights, allocator, threads) before the first timed cell */
        sp_engine_params ep = sp_engine_default_params();
        ep.n_threads = cfg->threads;
        ep.max_seqs = 4;
        sp_engine *e = make_engine(cfg->m, ep);
        int nw = SP_MIN(4, WN[W_COMPLETION]);
        req *q = xcalloc((size_t)nw, sizeof(req));
        sp_request_params rp = base_params();
        run_spec(e, W[W_COMPLETION], nw, nw, &rp, q);
        free_reqs(q, nw);
        sp_engine_free(e);
    }
    int total_bad = 0;
    cell *res = xcalloc((size_t)(n_concs * N_W * n_modes), sizeof(cell));
#define CELL(ci, w, mi) res[((ci) * N_W + (w)) * n_modes + (mi)]
    for (int ci = 0; ci < n_concs; ci++)
        for (int w = 0; w < N_W; w++)
            for (int mi = 0; mi < n_modes; mi++) {
                cell *R = &CELL(ci, w, mi);
                if (modes[mi] == SP_SPEC_DRAFT && !cfg->draft) {
                    R->skipped = true;
                    continue;
                }
                run_cell(cfg, (sp_spec_mode)modes[mi], concs[ci], w, W[w], WN[w], R);
                R->identical = true;
                if (mi > 0) {
                    char what[128];
                    snprintf(what, sizeof(what), "%s C=%d %s vs off", W_NAME[w], concs[ci],
                             sp_spec_mode_str((sp_spec_mode)modes[mi]));
                    R->mismatches = compare(&CELL(ci, w, 0), R, what);
                    R->identical = R->mismatches == 0;
                    total_bad += R->mismatches;
                }
            }

    for (int w = 0; w < N_W; w++) {
        if (w == W_REPEATED) {
            printf("\n### %s: %d prompts x 2 rounds (round 2 after round 1 finished)\n\n", W_NAME[w], WN[w]);
            printf("| C | proposer | tokens/s (both) | speedup | round 2 tokens/s | round 2 speedup | "
                   "mean TPOT r1 / r2 | acceptance r1 / r2 | mean acc. length r1 / r2 | identical |\n");
            printf("|---|---|---|---|---|---|---|---|---|---|\n");
        } else {
            printf("\n### %s: %d prompts\n\n", W_NAME[w], WN[w]);
            printf("| C | proposer | tokens/s | speedup vs off | mean TPOT | acceptance | "
                   "mean acc. length | identical |\n");
            printf("|---|---|---|---|---|---|---|---|\n");
        }
        for (int ci = 0; ci < n_concs; ci++)
            for (int mi = 0; mi < n_modes; mi++) {
                const cell *R = &CELL(ci, w, mi), *O = &CELL(ci, w, 0);
                const char *pn = sp_spec_mode_str((sp_spec_mode)modes[mi]);
                if (R->skipped) {
                    printf("| %d | %s | (skipped: no --draft) |%s\n", concs[ci], pn,
                           w == W_REPEATED ? " | | | | | | | |" : " | | | | | |");
                    continue;
                }
                char a1[32], a2[32], l1[32], l2[32];
                char id[32];
                snprintf(id, sizeof(id), "%s", mi == 0 ? "(reference)" : R->identical ? "yes" : "**NO**");
                if (w == W_REPEATED) {
                    fmt_rate(a1, sizeof(a1), R->r1.acc_rate), fmt_rate(a2, sizeof(a2), R->r2.acc_rate);
                    fmt_len(l1, sizeof(l1), R->r1.acc_len), fmt_len(l2, sizeof(l2), R->r2.acc_len);
                    printf("| %d | %s | %.2f | %.2fx | %.2f | %.2fx | %.2f / %.2f ms | %s / %s | %s / %s | %s |\n",
                           concs[ci], pn, R->all.tps, R->all.tps / O->all.tps, R->r2.tps,
                           R->r2.tps / O->r2.tps, R->r1.tpot_ms, R->r2.tpot_ms, a1, a2, l1, l2, id);
                } else {
                    fmt_rate(a1, sizeof(a1), R->all.acc_rate);
                    fmt_len(l1, sizeof(l1), R->all.acc_len);
                    printf("| %d | %s | %.2f | %.2fx | %.2f ms | %s | %s | %s |\n", concs[ci], pn,
                           R->all.tps, R->all.tps / O->all.tps, R->all.tpot_ms, a1, l1, id);
                }
            }
    }
    bool first = true;
    for (int ci = 0; ci < n_concs; ci++)
        for (int w = 0; w < N_W; w++)
            for (int mi = 0; mi < n_modes; mi++) {
                const cell *R = &CELL(ci, w, mi), *O = &CELL(ci, w, 0);
                if (R->skipped) continue;
                jsf("%s{\"workload\": \"%s\", \"c\": %d, \"proposer\": \"%s\", \"speedup\": %.4f, ",
                    first ? "" : ", ", W_NAME[w], concs[ci], sp_spec_mode_str((sp_spec_mode)modes[mi]),
                    R->all.tps / O->all.tps);
                first = false;
                json_agg("all", &R->all);
                if (w == W_REPEATED) {
                    jsf(", \"round2_speedup\": %.4f, ", R->r2.tps / O->r2.tps);
                    json_agg("round1", &R->r1);
                    jsf(", ");
                    json_agg("round2", &R->r2);
                }
                jsf(", \"planned_zero_steps\": %llu, \"engine_steps\": %llu, \"draft_ms\": %.1f, "
                    "\"verify_ms\": %.1f, \"cost_scale\": %.3f, \"cost_attn_ms_per_1k\": %.4f, "
                    "\"draft_cost_ms_1\": %.4f, \"draft_cost_scale\": %.3f, "
                    "\"identical\": %s, \"mismatched_requests\": %d}",
                    (unsigned long long)R->planned_zero, (unsigned long long)R->eng_steps, R->draft_ms,
                    R->verify_ms, R->cost_scale, R->cost_attn, R->dcost_1, R->dcost_scale,
                    R->identical ? "true" : "false",
                    R->mismatches);
            }
    jsf("], \"mismatched_requests\": %d}", total_bad);
    if (total_bad)
        printf("\n**ERROR: %d request outputs differ from spec off (greedy decoding must be "
               "identical)**\n",
               total_bad);
    fflush(stdout);
    for (int i = 0; i < n_concs * N_W * n_modes; i++)
        if (res[i].q) free_reqs(res[i].q, res[i].nq);
    free(res);
#undef CELL
    for (int w = 0; w < N_W; w++) {
        for (int i = 0; i < WN[w]; i++) free(W[w][i].toks);
        free(W[w]);
    }
    for (int i = 0; i < nf; i++) {
        free((void *)fs[i].path);
        free(fs[i].anchors);
        free(fs[i].defs);
    }
    free(fs);
    free(keep);
    return total_bad;
}

/* ---- replay ---------------------------------------------------------------------- */

typedef struct {
    const sp_token *rec; /* prompt + recorded output */
    int32_t n_rec;
    double alpha;
    uint64_t rng;
    int32_t n_vocab;
    bool diverged;
    int64_t proposed, wrong;
} replay_user;

static int32_t replay_propose(const sp_token *toks, int32_t n, int32_t k, sp_token *out, void *user) {
    replay_user *u = user;
    if (n > u->n_rec || u->diverged) return 0;
    if (memcmp(toks, u->rec, sizeof(sp_token) * (size_t)n)) {
        u->diverged = true; /* the sequence left the recorded one: propose nothing */
        return 0;
    }
    int32_t g = 0;
    for (; g < k && n + g < u->n_rec; g++) {
        sp_token t = u->rec[n + g];
        double x = (double)(splitmix(&u->rng) >> 11) * (1.0 / 9007199254740992.0);
        if (x >= u->alpha) {
            sp_token w = rand_tok_from(&u->rng, u->n_vocab);
            if (w == t) w = w + 1 < u->n_vocab ? w + 1 : 3;
            t = w;
            u->wrong++;
        }
        out[g] = t;
    }
    u->proposed += g;
    return g;
}

typedef struct {
    double alpha;
    int k;
    double tpot_ms, tps, off_tps, speedup, ideal, ratio, acc_len, acc_rate, eff;
    int64_t steps, drafted, accepted, gen;
    bool identical, diverged;
} replay_res;

static int bench_replay(const sp_model *m, int threads, const double *alphas, int n_a, const int *ks,
                        int n_k, int plen, int gen) {
    const sp_model_info *h = sp_model_get_info(m);
    int kmax = 1;
    for (int i = 0; i < n_k; i++) kmax = SP_MAX(kmax, ks[i]);
    sp_engine_params ep = sp_engine_default_params();
    ep.n_threads = threads;
    ep.max_seqs = 1;
    ep.spec = SP_SPEC_OFF;
    ep.spec_adaptive = false;
    ep.spec_k = kmax;
    ep.n_ctx = round_up(plen + gen + SP_SPEC_K_MAX, 16);
    if (h->n_ctx_train > 0 && ep.n_ctx > h->n_ctx_train && plen + gen <= h->n_ctx_train) ep.n_ctx = plen + gen;
    sp_engine *e = make_engine(m, ep);
    uint64_t warm_rng = 0xa11ce;
    warmup(e, h->n_vocab, &warm_rng);

    prompt_t P;
    P.toks = xmalloc(sizeof(sp_token) * (size_t)plen);
    for (int i = 0; i < plen; i++) P.toks[i] = rand_tok(h->n_vocab);
    if (P.toks[0] == h->n_vocab - 1) P.toks[0] = 3;
    P.n = plen;
    P.gen = gen;
    sp_request_params rp = base_params();

    /* off runs: before each ALPHA and at the end */
    double *off_tps = xcalloc((size_t)n_a + 1, sizeof(double));
    sp_token *rec = xmalloc(sizeof(sp_token) * (size_t)(plen + gen));
    memcpy(rec, P.toks, sizeof(sp_token) * (size_t)plen);
    int32_t n_rec = 0;
    int bad = 0;
    replay_res *R = xcalloc((size_t)(n_a * n_k), sizeof(replay_res));
    for (int ai = 0; ai <= n_a; ai++) {
        req *q = xcalloc(1, sizeof(req));
        rp.propose = NULL;
        rp.spec = SP_SPEC_OFF;
        rp.spec_k = 0;
        run_spec(e, &P, 1, 1, &rp, q);
        off_tps[ai] = 1000.0 / q->st.tpot_ms;
        if (ai == 0) {
            memcpy(rec + plen, q->out, sizeof(sp_token) * (size_t)q->n_out);
            n_rec = plen + q->n_out;
        } else if (plen + q->n_out != n_rec || memcmp(rec + plen, q->out, sizeof(sp_token) * (size_t)q->n_out)) {
            fprintf(stderr, "bench_spec: MISMATCH: off run %d differs from off run 0\n", ai);
            bad++;
        }
        fprintf(stderr, "replay off run %d: TPOT %.2f ms (%.2f tokens/s), %d tokens\n", ai, q->st.tpot_ms,
                off_tps[ai], q->n_out);
        free_reqs(q, 1);
        if (ai == n_a) break;
        for (int ki = 0; ki < n_k; ki++) {
            replay_res *r = &R[ai * n_k + ki];
            replay_user u = {rec, n_rec, alphas[ai], 0, h->n_vocab, false, 0, 0};
            /* the draw depends on the seed, ALPHA and k only (not on the lists' order) */
            u.rng = rng_state ^ ((uint64_t)llround(alphas[ai] * 1e6) * 0x100000001b3ull) ^ ((uint64_t)ks[ki] << 40);
            q = xcalloc(1, sizeof(req));
            rp.propose = replay_propose;
            rp.propose_user = &u;
            rp.spec = SP_SPEC_DEFAULT;
            rp.spec_k = ks[ki];
            run_spec(e, &P, 1, 1, &rp, q);
            r->alpha = alphas[ai];
            r->k = ks[ki];
            r->tpot_ms = q->st.tpot_ms;
            r->tps = 1000.0 / q->st.tpot_ms;
            r->steps = q->st.spec_steps;
            r->drafted = q->st.spec_drafted;
            r->accepted = q->st.spec_accepted;
            r->gen = q->n_out;
            r->acc_len = r->steps ? (double)(r->accepted + r->steps) / (double)r->steps : NAN;
            r->acc_rate = r->drafted ? (double)r->accepted / (double)r->drafted : NAN;
            r->ideal = (1 - pow(r->alpha, r->k + 1)) / (1 - r->alpha);
            r->identical = plen + q->n_out == n_rec &&
                           !memcmp(rec + plen, q->out, sizeof(sp_token) * (size_t)q->n_out);
            r->diverged = u.diverged;
            if (!r->identical) {
                fprintf(stderr, "bench_spec: MISMATCH: replay alpha %.2f k %d output differs from spec off\n",
                        r->alpha, r->k);
                bad++;
            }
            fprintf(stderr, "replay alpha %.2f k %d: TPOT %.2f ms, %lld steps, acc. length %.2f (ideal %.2f)\n",
                    r->alpha, r->k, r->tpot_ms, (long long)r->steps, r->acc_len, r->ideal);
            free_reqs(q, 1);
        }
    }
    sp_engine_free(e);
    for (int ai = 0; ai < n_a; ai++)
        for (int ki = 0; ki < n_k; ki++) {
            replay_res *r = &R[ai * n_k + ki];
            r->off_tps = 0.5 * (off_tps[ai] + off_tps[ai + 1]);
            r->speedup = r->tps / r->off_tps;
            r->ratio = r->speedup / r->ideal;
            r->eff = r->speedup / r->acc_len; /* without the luck of the draw */
        }

    printf("\n### replay: %d-token random prompt, %d greedy tokens, recorded continuation proposed "
           "with per-token accuracy ALPHA, k fixed (planner off)\n\n",
           plen, n_rec - plen);
    printf("| metric | value |\n|---|---|\n");
    printf("| off runs, decode tokens/s (1000 / TPOT) |");
    for (int ai = 0; ai <= n_a; ai++) printf(" %.2f", off_tps[ai]);
    printf(" |\n\n");
    printf("| ALPHA | k | decode tokens/s | off tokens/s | measured speedup | ideal tokens/step | "
           "speedup / ideal | mean acc. length (ideal) | speedup / mean acc. length | acceptance | "
           "steps | identical |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    jsf(", \"replay\": {\"prompt\": %d, \"gen\": %d, \"off_tps\": [", plen, n_rec - plen);
    for (int ai = 0; ai <= n_a; ai++) jsf("%s%.3f", ai ? ", " : "", off_tps[ai]);
    jsf("], \"runs\": [");
    const replay_res *target = NULL;
    for (int i = 0; i < n_a * n_k; i++) {
        const replay_res *r = &R[i];
        char al[32], ac[32];
        fmt_len(al, sizeof(al), r->acc_len);
        fmt_rate(ac, sizeof(ac), r->acc_rate);
        printf("| %.2f | %d | %.2f | %.2f | %.2fx | %.2f | %.1f%% | %s (%.2f) | %.1f%% | %s | %lld | %s |\n",
               r->alpha, r->k, r->tps, r->off_tps, r->speedup, r->ideal, 100 * r->ratio, al, r->ideal,
               100 * r->eff, ac, (long long)r->steps, r->identical ? "yes" : "**NO**");
        jsf("%s{\"alpha\": %.3f, \"k\": %d, \"tpot_ms\": %.4f, \"tps\": %.3f, \"off_tps\": %.3f, "
            "\"speedup\": %.4f, \"ideal\": %.4f, \"ratio\": %.4f, \"efficiency\": %.4f, \"acc_len\": %.4f, "
            "\"acceptance\": %.4f, \"steps\": %lld, \"drafted\": %lld, \"accepted\": %lld, "
            "\"gen\": %lld, \"identical\": %s}",
            i ? ", " : "", r->alpha, r->k, r->tpot_ms, r->tps, r->off_tps, r->speedup, r->ideal,
            r->ratio, isnan(r->eff) ? 0 : r->eff, isnan(r->acc_len) ? 0 : r->acc_len, isnan(r->acc_rate) ? 0 : r->acc_rate,
            (long long)r->steps, (long long)r->drafted, (long long)r->accepted, (long long)r->gen,
            r->identical ? "true" : "false");
        if (fabs(r->alpha - 0.8) < 1e-9 && r->k == 4) target = r;
    }
    jsf("]");
    if (target) {
        printf("\nALPHA 0.8, k 4: %.2fx measured vs %.2f ideal = %.1f%% of ideal (target >= 80%%: %s); "
               "measured mean acceptance length %.2f, so %.1f%% of what this draw allowed\n",
               target->speedup, target->ideal, 100 * target->ratio, target->ratio >= 0.8 ? "met" : "NOT met",
               target->acc_len, 100 * target->eff);
        jsf(", \"alpha08_k4_ratio\": %.4f, \"alpha08_k4_met\": %s", target->ratio,
            target->ratio >= 0.8 ? "true" : "false");
    }
    jsf(", \"mismatches\": %d}", bad);
    if (bad) printf("\n**ERROR: %d replay outputs differ from spec off**\n", bad);
    fflush(stdout);
    free(R);
    free(off_tps);
    free(rec);
    free(P.toks);
    return bad;
}

/* ---- main ------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f, "usage: bench_spec MODEL [-t THREADS] [--seed S] [--spec-k K] [--fixed-k]\n"
               "         [--workloads DIR [--draft DRAFT.gguf] [--proposers off,ngram,suffix,draft]\n"
               "            [--concurrency 1,4,16] [--n-prompts N] [--prompt-tokens P] [--gen G]\n"
               "            [--edit-snippet S] [--edit-gen G] [--repeat-prompts M] [--reps R]\n"
               "            [--show-prompts]]\n"
               "         [--replay ALPHAS --ks KS [--replay-prompt P] [--replay-gen G]]\n");
}

int main(int argc, char **argv) {
    bench_prog = "bench_spec";
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *path = argv[1], *dir = NULL, *draft_path = NULL;
    int threads = 2, spec_k = 4, reps = 1;
    bool fixed_k = false;
    int concs[32] = {1, 4, 16}, n_concs = 3;
    int modes[4] = {SP_SPEC_OFF, SP_SPEC_NGRAM, SP_SPEC_SUFFIX, SP_SPEC_DRAFT}, n_modes = 4;
    int n_prompts = 16, prompt_tokens = 200, gen = 128, snippet = 0, edit_gen = 256, n_repeat = 8;
    double alphas[16];
    int n_a = 0, ks[16], n_k = 0, rplen = 64, rgen = 96;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--fixed-k")) {
            fixed_k = true;
            continue;
        }
        if (!strcmp(a, "--show-prompts")) {
            g_show = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool bad = false;
        if (!v) bad = true;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) bad = (threads = atoi(v)) < 1;
        else if (!strcmp(a, "--seed")) rng_state = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--spec-k")) bad = (spec_k = atoi(v)) < 1 || spec_k > SP_SPEC_K_MAX;
        else if (!strcmp(a, "--workloads")) dir = v;
        else if (!strcmp(a, "--draft")) draft_path = v;
        else if (!strcmp(a, "--concurrency")) bad = (n_concs = parse_ints(v, concs, 32)) < 1;
        else if (!strcmp(a, "--n-prompts")) bad = (n_prompts = atoi(v)) < 1 || n_prompts > 4096;
        else if (!strcmp(a, "--prompt-tokens")) bad = (prompt_tokens = atoi(v)) < 1;
        else if (!strcmp(a, "--gen")) bad = (gen = atoi(v)) < 2;
        else if (!strcmp(a, "--edit-snippet")) bad = (snippet = atoi(v)) < 8;
        else if (!strcmp(a, "--edit-gen")) bad = (edit_gen = atoi(v)) < 2;
        else if (!strcmp(a, "--repeat-prompts")) bad = (n_repeat = atoi(v)) < 1 || n_repeat > 4096;
        else if (!strcmp(a, "--reps")) bad = (reps = atoi(v)) < 1 || reps > 16;
        else if (!strcmp(a, "--replay")) bad = (n_a = parse_alphas(v, alphas, 16)) < 1;
        else if (!strcmp(a, "--ks")) {
            bad = (n_k = parse_ints(v, ks, 16)) < 1;
            for (int j = 0; !bad && j < n_k; j++) bad = ks[j] > SP_SPEC_K_MAX;
        } else if (!strcmp(a, "--replay-prompt")) bad = (rplen = atoi(v)) < 1;
        else if (!strcmp(a, "--replay-gen")) bad = (rgen = atoi(v)) < 2;
        else if (!strcmp(a, "--proposers")) {
            n_modes = 0;
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *t = strtok(buf, ","); t && !bad; t = strtok(NULL, ",")) {
                int md = sp_spec_mode_parse(t);
                if (md < 0 || n_modes == 4) bad = true;
                else modes[n_modes++] = md;
            }
            bad = bad || n_modes == 0 || modes[0] != SP_SPEC_OFF;
            if (bad) fprintf(stderr, "bench_spec: --proposers must start with off (the reference)\n");
        } else bad = true;
        if (bad) {
            fprintf(stderr, "bench_spec: bad option %s%s%s\n", a, v ? " " : "", v ? v : "");
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!dir && !n_a) {
        fprintf(stderr, "bench_spec: choose at least one of --workloads, --replay\n");
        usage(stderr);
        return 2;
    }
    if (n_a && !n_k) n_k = 3, ks[0] = 2, ks[1] = 4, ks[2] = 8;
    for (int i = 0; i < n_concs; i++)
        if (concs[i] > 1024) {
            fprintf(stderr, "bench_spec: concurrency above 1024\n");
            return 2;
        }

    if (dir) { /* fail before loading anything */
        char hp[4096];
        snprintf(hp, sizeof(hp), "%s/heldout.txt", dir);
        FILE *f = fopen(hp, "rb");
        if (!f) die("cannot open the held-out corpus (run tools/train/corpus.py --out DIR)", hp);
        fclose(f);
    }
    const char *level = kernels_init();
    char err[512];
    double t0 = time_s();
    sp_model *m = sp_model_load(path, sp_model_default_params(), err, sizeof(err));
    if (!m) die("loading the model", err);
    const double load_s = time_s() - t0;
    const sp_model_info *h = sp_model_get_info(m);
    if (h->n_vocab < 64) die("the model's vocabulary is too small", NULL);
    sp_model *draft = NULL;
    if (draft_path && dir) {
        draft = sp_model_load(draft_path, sp_model_default_params(), err, sizeof(err));
        if (!draft) die("loading the draft model", err);
    }

    printf("## speculative decoding benchmark: %s\n\n", path);
    printf("| metric | value |\n|---|---|\n");
    printf("| model | %s (%s, %.1f MiB of weights, %d layers, n_embd %d, %d/%d heads, "
           "n_ctx_train %d) |\n",
           path, h->arch, h->weight_bytes / 1048576.0, h->n_layer, h->n_embd, h->n_head,
           h->n_head_kv, h->n_ctx_train);
    if (draft) {
        const sp_model_info *d = sp_model_get_info(draft);
        printf("| draft | %s (%s, %.1f MiB of weights, %d layers, n_embd %d) |\n", draft_path, d->arch,
               d->weight_bytes / 1048576.0, d->n_layer, d->n_embd);
    }
    printf("| kernels / threads | %s / %d |\n", level, threads);
    printf("| load | %.0f ms |\n", load_s * 1e3);
    fflush(stdout);
    jsf("{\"model\": \"%s\", \"draft\": ", path);
    if (draft) jsf("\"%s\"", draft_path);
    else jsf("null");
    jsf(", \"threads\": %d, \"kernels\": \"%s\"", threads, level);

    int bad = 0;
    if (n_a) bad += bench_replay(m, threads, alphas, n_a, ks, n_k, rplen, rgen);
    if (dir) {
        wl_cfg cfg = {m, draft, threads, spec_k, reps, !fixed_k};
        bad += bench_workloads(&cfg, dir, modes, n_modes, concs, n_concs, n_prompts, prompt_tokens, gen,
                               snippet, edit_gen, n_repeat);
    }
    jsf("}");
    printf("%s\n", js.s);
    free(js.s);
    free(g_tokbuf);
    if (draft) sp_model_free(draft);
    sp_model_free(m);
    if (bad) {
        fprintf(stderr, "bench_spec: %d outputs differ from spec off\n", bad);
        return 1;
    }
    return 0;
}
