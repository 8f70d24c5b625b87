/* schema.c: JSON Schema -> GBNF (the subset specula.h lists).
 *
 * Each (sub)schema becomes one rule rN; the JSON primitives are fixed rules
 * appended to every grammar (PRIMITIVES). Objects list their properties in
 * the schema's order, required ones first, then each optional one as an
 * optional ", key: value" (with no required property, the first present
 * one has no comma: one alternative per choice of first). A $ref is one
 * rule per target, made once, so recursive schemas are recursive rules.
 *
 * Cost: each subschema is converted once (a $ref target once more at
 * most, whatever the number of references; the types of a "type" array are
 * distinct), so the work is linear in the schema (a "required" list is
 * matched against at most 256 properties), except where a keyword asks for
 * more text than it takes (an integer range: up to MAX_ENUM_INT
 * alternatives). The
 * text made is counted as it is made, and the conversion stops with an
 * error naming MAX_OUT once it would pass it; the compiler's own limits
 * (grammar.h) then bound what the repetitions ({m,n}) expand to. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "grammar/grammar.h"
#include "specula.h"

#define MAX_DEPTH 64
/* The grammar's text at most: as large as a grammar a request may give. */
#define MAX_OUT (1u << 20)
#define MAX_ENUM_INT 1000

/* the JSON value grammar every schema's rules build on (and json_object mode) */
#define JSON_PRIMITIVES \
    "space ::= \" \"?\n" \
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n" \
    "string ::= \"\\\"\" char* \"\\\"\" space\n" \
    "integral-part ::= [0] | [1-9] [0-9]{0,15}\n" \
    "integer ::= \"-\"? integral-part space\n" \
    "number ::= \"-\"? integral-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? space\n" \
    "boolean ::= (\"true\" | \"false\") space\n" \
    "null ::= \"null\" space\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "object ::= \"{\" space (string \":\" space value (\",\" space string \":\" space value)*)? \"}\" space\n" \
    "array ::= \"[\" space (value (\",\" space value)*)? \"]\" space\n"
static const char PRIMITIVES[] = JSON_PRIMITIVES;

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;   /* out of memory: what was appended since is lost */
    bool over;  /* MAX_OUT reached: the same */
} buf;

static void bput(buf *b, const char *s, size_t n) {
    if (b->oom || b->over) return;
    if (b->n + n > MAX_OUT) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void bprintf(buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0) bput(b, tmp, (size_t)SP_MIN(n, (int)sizeof(tmp) - 1));
}

/* A GBNF literal of raw text. */
static void blit(buf *b, const char *s) {
    bput(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            bput(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            bprintf(b, "\\x%02X", c);
        } else {
            bput(b, (const char *)&c, 1);
        }
    }
    bput(b, "\"", 1);
}

typedef struct {
    buf out;
    const cJSON *root;
    int n_rules;
    const char *refs[256];   /* $ref targets made, and their rules */
    int ref_rule[256];
    int n_refs;
    char *err;
    size_t errlen;
    bool failed;
    int status; /* the first failure's: SP_ERR_INVALID, _UNSUPPORTED or _NOMEM */
} conv;

static int vfail(conv *c, int status, const char *fmt, va_list ap) {
    if (!c->failed) {
        char msg[300];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        seterr(c->err, c->errlen, "%s", msg);
        c->status = status;
    }
    c->failed = true;
    return -1;
}

/* The schema is wrong (or over a limit). */
static int fail(conv *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, SP_ERR_INVALID, fmt, ap);
    va_end(ap);
    return -1;
}

/* The schema is valid JSON Schema outside the supported subset. */
static int unsupported(conv *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, SP_ERR_UNSUPPORTED, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(conv *c) {
    c->failed = false; /* out of memory wins over an earlier failure */
    fail(c, "out of memory");
    c->status = SP_ERR_NOMEM;
    return -1;
}

static int gen(conv *c, const cJSON *s, const char *path, int depth);

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "title", "description",
    "default", "examples", "format", "$schema", "$id", "$comment", "strict", "pattern", NULL};

static bool num_of(const cJSON *s, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!cJSON_IsNumber(x)) return false;
    *v = x->valuedouble;
    return true;
}

/* A new rule number; the caller writes "rN ::= ...\n" into a body buffer. */
static int new_rule(conv *c) { return c->n_rules++; }

/* A limit met while writing out: the conversion stops (a schema could
 * otherwise ask for more work than its size, as an enum of integer ranges). */
static void check_out(conv *c, const buf *b) {
    if (b->over)
        fail(c, "the schema's grammar is larger than %u bytes (the limit of a grammar)", MAX_OUT);
    else if (b->oom)
        oom(c);
}

static void emit(conv *c, int id, buf *body) {
    bprintf(&c->out, "r%d ::= ", id);
    bput(&c->out, body->s ? body->s : "", body->n);
    bput(&c->out, "\n", 1);
    check_out(c, body);
    check_out(c, &c->out);
    free(body->s);
}

static const char *prim_name(int code);

/* The rule name of gen's result: rN, or a primitive's name. */
static void rule_name(char out[32], int id) {
    if (id >= 0) snprintf(out, 32, "r%d", id);
    else snprintf(out, 32, "%s", prim_name(id));
}

/* Properties all optional, kept in order: the first present one has no
 * comma. tail[i] ::= ("," space kv[i])? tail[i+1] holds what may follow
 * the first, so the choice of first is one alternative each: n rules of
 * constant size, where writing each alternative's optional rest out would
 * be n^2 / 2 groups (and 256 properties would pass GR_MAX_RULES). */
static void optional_props(conv *c, const int *kv, int n, buf *b) {
    int tail[256];
    for (int i = n - 1; i >= 1; i--) {
        buf t = {0};
        bprintf(&t, "(\",\" space r%d)?", kv[i]);
        if (i + 1 < n) bprintf(&t, " r%d", tail[i + 1]);
        tail[i] = new_rule(c);
        emit(c, tail[i], &t);
    }
    bprintf(b, "(");
    for (int i = 0; i < n; i++) {
        bprintf(b, i ? " | r%d" : "r%d", kv[i]);
        if (i + 1 < n) bprintf(b, " r%d", tail[i + 1]);
    }
    bprintf(b, ")? ");
}

static int gen_object(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' at %s must be an object", path);
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' at %s must be an array", path);
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' at %s must be a boolean or a schema", path);
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (!n) { /* a map: values of additionalProperties' schema (any when absent or true) */
        int v = -7;
        if (cJSON_IsObject(addl)) {
            char p[256];
            snprintf(p, sizeof(p), "%s/additionalProperties", path);
            v = gen(c, addl, p, depth + 1);
            if (c->failed) return -1;
        }
        buf b = {0};
        char val[32];
        rule_name(val, v);
        if (cJSON_IsFalse(addl))
            bprintf(&b, "\"{\" space \"}\" space");
        else
            bprintf(&b, "\"{\" space (string \":\" space %s (\",\" space string \":\" space %s)*)? \"}\" space",
                    val, val);
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    if (n > 256) return fail(c, "more than 256 properties at %s", path);
    int vrule[256];
    bool isreq[256];
    const char *key[256];
    int i = 0, n_req = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char sub[256];
        snprintf(sub, sizeof(sub), "%s/properties/%.64s", path, p->string);
        vrule[i] = gen(c, p, sub, depth + 1);
        if (c->failed) return -1;
        key[i] = p->string;
        isreq[i] = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, p->string)) isreq[i] = true;
        n_req += isreq[i];
        i++;
    }
    /* one rule per "key": value pair */
    int kv[256];
    for (i = 0; i < n; i++) {
        buf b = {0};
        cJSON *k = cJSON_CreateString(key[i]);
        char *ks = k ? cJSON_PrintUnformatted(k) : NULL;
        cJSON_Delete(k);
        if (!ks) return oom(c);
        blit(&b, ks);
        free(ks);
        char vn[32];
        rule_name(vn, vrule[i]);
        bprintf(&b, " space \":\" space %s", vn);
        kv[i] = new_rule(c);
        emit(c, kv[i], &b);
    }
    buf b = {0};
    bprintf(&b, "\"{\" space ");
    if (n_req) {
        bool first = true;
        for (i = 0; i < n; i++)
            if (isreq[i]) {
                bprintf(&b, first ? "r%d " : "\",\" space r%d ", kv[i]);
                first = false;
            }
        for (i = 0; i < n; i++)
            if (!isreq[i]) bprintf(&b, "(\",\" space r%d)? ", kv[i]);
    } else {
        optional_props(c, kv, n, &b);
    }
    bprintf(&b, "\"}\" space");
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_array(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int it = -7;
    if (items) {
        if (!cJSON_IsObject(items) && !cJSON_IsBool(items))
            return (cJSON_IsArray(items) ? unsupported : fail)(
                c, "'items' at %s must be a schema (tuple forms are not supported)", path);
        char p[256];
        snprintf(p, sizeof(p), "%s/items", path);
        it = gen(c, items, p, depth + 1);
        if (c->failed) return -1;
    }
    double mn = 0, mx = -1;
    num_of(s, "minItems", &mn);
    num_of(s, "maxItems", &mx);
    if (mn < 0 || mn > 1000 || mn != floor(mn)) return fail(c, "minItems at %s must be in 0..1000", path);
    if (mx > 1000 || (mx >= 0 && mx != floor(mx))) mx = -1; /* beyond the grammar's repetition limit: unbounded */
    if (mx >= 0 && mx < mn) return fail(c, "maxItems < minItems at %s", path);
    char iv[32];
    rule_name(iv, it);
    buf b = {0};
    bprintf(&b, "\"[\" space ");
    char rep[48];
    if (mx < 0) snprintf(rep, sizeof(rep), "{%d,}", mn > 1 ? (int)mn - 1 : 0);
    else snprintf(rep, sizeof(rep), "{%d,%d}", mn > 1 ? (int)mn - 1 : 0, (int)mx - 1);
    if (mx == 0) {
    } else if (mn == 0) {
        bprintf(&b, "(%s (\",\" space %s)%s)? ", iv, iv, rep);
    } else {
        bprintf(&b, "%s (\",\" space %s)%s ", iv, iv, rep);
    }
    bprintf(&b, "\"]\" space");
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* A string matching a pattern (grammar/regex.c). minLength and maxLength
 * are taken when the pattern bounds the length within them by itself (as
 * "^[A-Z]{3}$" with maxLength 3): the grammar cannot intersect them. */
static int gen_pattern(conv *c, const cJSON *pat, double mn, double mx, const char *path) {
    if (!cJSON_IsString(pat)) return fail(c, "'pattern' at %s must be a string", path);
    sbuf g = {0};
    double lo, hi;
    char err[200];
    const int rc = gr_pattern_gbnf(pat->valuestring, &g, &lo, &hi, err, sizeof(err));
    if (rc) {
        sb_free(&g);
        if (rc == SP_ERR_NOMEM) return oom(c);
        return (rc == SP_ERR_UNSUPPORTED ? unsupported : fail)(c, "%s at %s", err, path[0] ? path : "/");
    }
    if (lo < mn || (mx >= 0 && (hi < 0 || hi > mx))) {
        sb_free(&g);
        return unsupported(c, "unsupported combination of 'pattern' with minLength/maxLength at %s (the "
                    "pattern's own lengths must lie within them)", path[0] ? path : "/");
    }
    buf b = {0};
    bprintf(&b, "\"\\\"\" ");
    bput(&b, g.p, g.len);
    bprintf(&b, " \"\\\"\" space");
    sb_free(&g);
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_string(conv *c, const cJSON *s, const char *path) {
    double mn = 0, mx = -1;
    num_of(s, "minLength", &mn);
    num_of(s, "maxLength", &mx);
    if (mn < 0 || mn > 1000 || mn != floor(mn)) return fail(c, "minLength at %s must be in 0..1000", path);
    if (mx > 1000 || (mx >= 0 && mx != floor(mx))) mx = -1;
    if (mx >= 0 && mx < mn) return fail(c, "maxLength < minLength at %s", path);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    if (pat) return gen_pattern(c, pat, mn, mx, path);
    if (mn == 0 && mx < 0) return -2; /* the primitive */
    buf b = {0};
    if (mx < 0) bprintf(&b, "\"\\\"\" char{%d,} \"\\\"\" space", (int)mn);
    else bprintf(&b, "\"\\\"\" char{%d,%d} \"\\\"\" space", (int)mn, (int)mx);
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_integer(conv *c, const cJSON *s, const char *path) {
    double lo = -INFINITY, hi = INFINITY, v;
    if (num_of(s, "minimum", &v)) lo = ceil(v);
    if (num_of(s, "exclusiveMinimum", &v)) lo = fmax(lo, floor(v) + 1);
    if (num_of(s, "maximum", &v)) hi = floor(v);
    if (num_of(s, "exclusiveMaximum", &v)) hi = fmin(hi, ceil(v) - 1);
    if (lo == -INFINITY && hi == INFINITY) return -3;
    if (lo > hi) return fail(c, "no integer fits the bounds at %s", path);
    buf b = {0};
    if (isfinite(lo) && isfinite(hi) && hi - lo < MAX_ENUM_INT) {
        bprintf(&b, "(");
        for (double x = lo; x <= hi; x++) bprintf(&b, x > lo ? " | \"%.0f\"" : "\"%.0f\"", x);
        bprintf(&b, ") space");
    } else if (lo == 0 && hi == INFINITY) {
        bprintf(&b, "integral-part space");
    } else if (lo == 1 && hi == INFINITY) {
        bprintf(&b, "[1-9] [0-9]{0,15} space");
    } else {
        return unsupported(c, "integer bounds at %s are beyond the supported subset (a range of at most "
                    "%d values, or minimum 0 or 1 alone)", path, MAX_ENUM_INT);
    }
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

static int gen_number(conv *c, const cJSON *s, const char *path) {
    double v, mn = 0;
    const bool has_min = num_of(s, "minimum", &mn);
    if (num_of(s, "maximum", &v) || num_of(s, "exclusiveMinimum", &v) ||
        num_of(s, "exclusiveMaximum", &v) || (has_min && mn != 0))
        return unsupported(c, "number bounds at %s are beyond the supported subset (minimum 0 only; "
                    "use an integer for other bounds)", path);
    if (!has_min) return -4;
    buf b = {0};
    bprintf(&b, "integral-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? space");
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* A rule for one type name, or a negative code for a primitive. */
static int gen_type(conv *c, const cJSON *s, const char *t, const char *path, int depth) {
    if (!strcmp(t, "object")) return gen_object(c, s, path, depth);
    if (!strcmp(t, "array")) return gen_array(c, s, path, depth);
    if (!strcmp(t, "string")) return gen_string(c, s, path);
    if (!strcmp(t, "integer")) return gen_integer(c, s, path);
    if (!strcmp(t, "number")) return gen_number(c, s, path);
    if (!strcmp(t, "boolean")) return -5;
    if (!strcmp(t, "null")) return -6;
    return fail(c, "unknown type '%.40s' at %s", t, path);
}

static const char *prim_name(int code) {
    switch (code) {
    case -2: return "string";
    case -3: return "integer";
    case -4: return "number";
    case -5: return "boolean";
    case -6: return "null";
    default: return "value";
    }
}

static void ref_to(buf *b, int id) {
    char n[32];
    rule_name(n, id);
    bprintf(b, "%s", n);
}

static int gen_ref(conv *c, const char *ref, const char *path, int depth) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], ref)) return c->ref_rule[i];
    const char *name = NULL, *where = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) name = ref + 8, where = "$defs";
    else if (!strncmp(ref, "#/definitions/", 14)) name = ref + 14, where = "definitions";
    else if (!strcmp(ref, "#")) name = "", where = NULL;
    else return unsupported(c, "unsupported $ref '%.80s' at %s (only #, #/$defs/... and #/definitions/...)", ref, path);
    const cJSON *target = where ? cJSON_GetObjectItemCaseSensitive(
                                      cJSON_GetObjectItemCaseSensitive(c->root, where), name)
                                : c->root;
    if (!target) return fail(c, "$ref '%.80s' at %s points nowhere", ref, path);
    if (c->n_refs == 256) return fail(c, "more than 256 $ref targets");
    /* reserve the rule first: the target may refer to itself */
    int id = new_rule(c);
    c->refs[c->n_refs] = ref;
    c->ref_rule[c->n_refs++] = id;
    char p[256];
    snprintf(p, sizeof(p), "%.200s", ref + 1);
    int body = gen(c, target, p, depth + 1);
    if (c->failed) return -1;
    buf b = {0};
    ref_to(&b, body);
    emit(c, id, &b);
    return id;
}

static int gen_alts(conv *c, const cJSON *list, const char *kw, const char *path, int depth) {
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
        return fail(c, "'%s' at %s must be a non-empty array", kw, path);
    int ids[64], n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, list) {
        if (n == 64) return fail(c, "more than 64 alternatives in '%s' at %s", kw, path);
        char p[256];
        snprintf(p, sizeof(p), "%.180s/%s/%d", path, kw, n);
        ids[n] = gen(c, x, p, depth + 1);
        if (c->failed) return -1;
        n++;
    }
    buf b = {0};
    for (int i = 0; i < n; i++) {
        if (i) bprintf(&b, " | ");
        ref_to(&b, ids[i]);
    }
    int id = new_rule(c);
    emit(c, id, &b);
    return id;
}

/* A "type" array: at most 8 names, distinct (as JSON Schema says: a type
 * named twice would convert the subschemas under it twice, and twice again
 * at every level below). Checked before any is converted. */
static bool types_distinct(conv *c, const cJSON *type, const char *path) {
    const cJSON *t, *u;
    int n = 0;
    cJSON_ArrayForEach(t, type) {
        if (!cJSON_IsString(t) || n++ == 8) return fail(c, "'type' at %s must name types", path), false;
        for (u = type->child; u != t; u = u->next)
            if (!strcmp(u->valuestring, t->valuestring))
                return fail(c, "'type' at %s names '%.40s' twice", path[0] ? path : "/", t->valuestring),
                       false;
    }
    return true;
}

static int gen(conv *c, const cJSON *s, const char *path, int depth) {
    if (c->failed) return -1;
    if (depth > MAX_DEPTH) return fail(c, "schema nested deeper than %d at %s", MAX_DEPTH, path);
    if (cJSON_IsTrue(s)) return -7;
    if (!cJSON_IsObject(s)) return fail(c, "the schema at %s must be an object or true", path);
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(k->string, known[i]);
        if (!ok) return unsupported(c, "unsupported keyword '%.60s' at %s", k->string, path[0] ? path : "/");
    }
    const cJSON *x;
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(x)) return fail(c, "$ref at %s must be a string", path);
        return gen_ref(c, x->valuestring, path, depth);
    }
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) return gen_alts(c, x, "anyOf", path, depth);
    if ((x = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) return gen_alts(c, x, "oneOf", path, depth);
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cst || en) {
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)))
            return fail(c, "'enum' at %s must be a non-empty array", path);
        buf b = {0};
        bprintf(&b, "(");
        int i = 0;
        const cJSON *v;
        if (cst) {
            char *t = cJSON_PrintUnformatted(cst);
            if (!t) return oom(c);
            blit(&b, t);
            free(t);
        } else {
            cJSON_ArrayForEach(v, en) {
                char *t = cJSON_PrintUnformatted(v);
                if (!t) return oom(c);
                if (i++) bprintf(&b, " | ");
                blit(&b, t);
                free(t);
            }
        }
        bprintf(&b, ") space");
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) return gen_type(c, s, type->valuestring, path, depth);
    if (cJSON_IsArray(type)) {
        int ids[8], n = 0;
        if (!types_distinct(c, type, path)) return -1;
        const cJSON *t;
        cJSON_ArrayForEach(t, type) {
            ids[n++] = gen_type(c, s, t->valuestring, path, depth);
            if (c->failed) return -1;
        }
        if (!n) return fail(c, "'type' at %s is empty", path);
        buf b = {0};
        for (int i = 0; i < n; i++) {
            if (i) bprintf(&b, " | ");
            ref_to(&b, ids[i]);
        }
        int id = new_rule(c);
        emit(c, id, &b);
        return id;
    }
    if (type) return fail(c, "'type' at %s must be a string or an array", path);
    if (cJSON_GetObjectItemCaseSensitive(s, "pattern"))
        return fail(c, "'pattern' at %s needs \"type\": \"string\" (any other value would pass it)",
                    path[0] ? path : "/");
    if (cJSON_GetObjectItemCaseSensitive(s, "properties")) return gen_object(c, s, path, depth);
    if (cJSON_GetObjectItemCaseSensitive(s, "items")) return gen_array(c, s, path, depth);
    return -7; /* any value */
}

int sp_json_schema_to_gbnf(const char *text, size_t len, char **gbnf, char *err, size_t errlen) {
    *gbnf = NULL;
    if (!text) {
        seterr(err, errlen, "no schema");
        return SP_ERR_INVALID;
    }
    if (!len) len = strlen(text);
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!doc) {
        seterr(err, errlen, "the schema is not valid JSON");
        return SP_ERR_INVALID;
    }
    conv c = {.root = doc, .err = err, .errlen = errlen};
    int top = gen(&c, doc, "", 0);
    char *out = NULL;
    if (!c.failed) {
        buf b = {0};
        bprintf(&b, "root ::= ");
        ref_to(&b, top);
        bprintf(&b, "\n");
        bput(&b, c.out.s ? c.out.s : "", c.out.n);
        bput(&b, PRIMITIVES, sizeof(PRIMITIVES) - 1);
        check_out(&c, &b);
        if (c.failed) {
            free(b.s);
        } else {
            /* a $ref cycle that consumes nothing ({"$ref": "#"}, a -> b -> a)
             * is left recursion: refuse the schema rather than give a grammar
             * that does not compile */
            char gerr[200];
            bool self_ref;
            sp_grammar *g = gr_compile(b.s, b.n, &self_ref, gerr, sizeof(gerr));
            if (g) {
                out = b.s;
            } else {
                c.status = SP_ERR_INVALID;
                seterr(err, errlen, "%s", self_ref
                              ? "the schema refers to itself ($ref) without any value in between"
                              : gerr);
                free(b.s);
            }
            sp_grammar_free(g);
        }
    }
    free(c.out.s);
    cJSON_Delete(doc);
    *gbnf = out;
    return out ? SP_OK : c.status ? c.status : SP_ERR_INVALID;
}

const char *sp_json_object_gbnf(void) {
    static const char g[] = "root ::= object\n" JSON_PRIMITIVES;
    return g;
}
