/* jinja_json.c: the context (cJSON) into values, and tojson as HF defines
 * it: json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 * sort_keys=...), Python's float repr and key conversions included. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

jv jinja_from_json(jrt *r, const cJSON *j, int mk) {
    jv v = jv_none();
    if (++r->rdepth > JINJA_EVAL_DEPTH_CAP) jinja_fail(r, "max_depth exceeded (context nested too deeply)");
    jinja_step(r, 1);
    if (cJSON_IsBool(j)) {
        v = jv_bool(cJSON_IsTrue(j));
    } else if (cJSON_IsNumber(j)) {
        /* the JSON text, when kept (jinja_json_keep_numbers), says int or
         * float as Python's json reads it: 1.0 is a float, 10**18 exact */
        const char *t = j->valuestring;
        double d = j->valuedouble;
        char *end;
        errno = 0;
        long long ll = t && !strpbrk(t, ".eE") ? strtoll(t, &end, 10) : 0;
        if (t && !strpbrk(t, ".eE") && !errno && !*end) v = jv_int((int64_t)ll);
        else if (!t && d == floor(d) && fabs(d) < 9007199254740992.0) v = jv_int((int64_t)d);
        else v = jv_float(d);
    } else if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        v = jv_strn(r, s, strlen(s), mk);
    } else if (cJSON_IsArray(j)) {
        jlist *l = jlist_new(r, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *c = j->child; c; c = c->next) jlist_push(r, l, jinja_from_json(r, c, mk));
        v = jv_listv(l);
    } else if (cJSON_IsObject(j)) {
        jdict *d = jdict_new(r, 0);
        for (const cJSON *c = j->child; c; c = c->next) {
            const char *k = c->string ? c->string : "";
            jdict_set(r, d, jv_strn(r, k, strlen(k), mk), jinja_from_json(r, c, mk));
        }
        v.t = JV_DICT;
        v.u.d = d;
    }
    if (v.t == JV_NONE || v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT) v.content = (uint8_t)(mk ? 1 : 0);
    r->rdepth--;
    return v;
}

static void json_str(jrt *r, jbuf *b, const char *s, size_t n, bool ensure_ascii) {
    jb_addc(r, b, '"', 0);
    size_t i = 0;
    char tmp[16];
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            switch (c) {
            case '"': jb_add(r, b, "\\\"", 2, 0); break;
            case '\\': jb_add(r, b, "\\\\", 2, 0); break;
            case '\n': jb_add(r, b, "\\n", 2, 0); break;
            case '\r': jb_add(r, b, "\\r", 2, 0); break;
            case '\t': jb_add(r, b, "\\t", 2, 0); break;
            case '\b': jb_add(r, b, "\\b", 2, 0); break;
            case '\f': jb_add(r, b, "\\f", 2, 0); break;
            default:
                if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
                    snprintf(tmp, sizeof(tmp), "\\u%04x", c);
                    jb_add(r, b, tmp, 6, 0);
                } else {
                    jb_addc(r, b, (char)c, 0);
                }
            }
            i++;
            continue;
        }
        size_t e = jinja_utf8_next(s, n, i);
        if (!ensure_ascii) {
            jb_add(r, b, s + i, e - i, 0);
        } else {
            const unsigned char *u = (const unsigned char *)s + i;
            uint32_t cp;
            size_t l = e - i;
            if (l == 1) cp = 0xdc00 | c; /* an undecodable byte */
            else if (l == 2) cp = ((uint32_t)(u[0] & 0x1f) << 6) | (u[1] & 0x3f);
            else if (l == 3) cp = ((uint32_t)(u[0] & 0x0f) << 12) | ((uint32_t)(u[1] & 0x3f) << 6) | (u[2] & 0x3f);
            else cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3f) << 12) | ((uint32_t)(u[2] & 0x3f) << 6) | (u[3] & 0x3f);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof(tmp), "\\u%04x\\u%04x", 0xd800 | (cp >> 10), 0xdc00 | (cp & 0x3ff));
                jb_add(r, b, tmp, 12, 0);
            } else {
                snprintf(tmp, sizeof(tmp), "\\u%04x", cp);
                jb_add(r, b, tmp, 6, 0);
            }
        }
        i = e;
    }
    jb_addc(r, b, '"', 0);
}

static void json_newline(jrt *r, jbuf *b, int indent, int level) {
    jb_addc(r, b, '\n', 0);
    for (int i = 0; i < indent * level; i++) jb_addc(r, b, ' ', 0);
}

static void json_number(jrt *r, jbuf *b, jv v) {
    char tmp[64];
    if (v.t == JV_INT) snprintf(tmp, sizeof(tmp), "%lld", (long long)v.u.i);
    else if (isnan(v.u.f)) snprintf(tmp, sizeof(tmp), "NaN");
    else if (isinf(v.u.f)) snprintf(tmp, sizeof(tmp), v.u.f < 0 ? "-Infinity" : "Infinity");
    else jinja_fmt_float(tmp, sizeof(tmp), v.u.f);
    jb_add(r, b, tmp, strlen(tmp), 0);
}

typedef struct {
    jstr *key;
    size_t idx;
} skey;

static int skey_cmp(const void *a, const void *b) {
    const skey *x = a, *y = b;
    size_t n = x->key->len < y->key->len ? x->key->len : y->key->len;
    int c = memcmp(x->key->p, y->key->p, n);
    if (c) return c;
    return (x->key->len > y->key->len) - (x->key->len < y->key->len);
}

void jinja_tojson(jrt *r, jbuf *b, jv v, int indent, const char *isep, const char *ksep,
                  bool sort_keys, bool ensure_ascii, int level) {
    jinja_step(r, 1);
    switch (v.t) {
    case JV_NONE: jb_add(r, b, "null", 4, 0); return;
    case JV_BOOL: jb_add(r, b, v.u.b ? "true" : "false", v.u.b ? 4 : 5, 0); return;
    case JV_INT: case JV_FLOAT: json_number(r, b, v); return;
    case JV_STR: json_str(r, b, v.u.s->p, v.u.s->len, ensure_ascii); return;
    case JV_LIST: {
        if (v.tuple == 2) jinja_fail(r, "Object of type generator is not JSON serializable");
        if (!v.u.l->n) { jb_add(r, b, "[]", 2, 0); return; }
        if (++r->rdepth > JINJA_EVAL_DEPTH_CAP) jinja_fail(r, "max_depth exceeded (tojson of a value nested too deeply)");
        jb_addc(r, b, '[', 0);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jb_add(r, b, isep, strlen(isep), 0);
            if (indent >= 0) json_newline(r, b, indent, level + 1);
            jinja_tojson(r, b, v.u.l->v[i], indent, isep, ksep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent >= 0) json_newline(r, b, indent, level);
        jb_addc(r, b, ']', 0);
        r->rdepth--;
        return;
    }
    case JV_DICT: {
        jdict *d = v.u.d;
        if (!d->n) { jb_add(r, b, "{}", 2, 0); return; }
        if (++r->rdepth > JINJA_EVAL_DEPTH_CAP) jinja_fail(r, "max_depth exceeded (tojson of a value nested too deeply)");
        skey *keys = jinja_alloc(&r->arena, d->n * sizeof(skey));
        for (size_t i = 0; i < d->n; i++) {
            jv k = d->k[i];
            jstr *ks;
            char tmp[64];
            switch (k.t) {
            case JV_STR: ks = k.u.s; break;
            case JV_NONE: ks = jstr_new(r, "null", 4, 0); break;
            case JV_BOOL: ks = jstr_new(r, k.u.b ? "true" : "false", k.u.b ? 4 : 5, 0); break;
            case JV_INT: case JV_FLOAT: {
                jbuf kb = {0};
                jb_init(r, &kb, 16);
                json_number(r, &kb, k);
                ks = jb_finish(r, &kb);
                break;
            }
            default:
                snprintf(tmp, sizeof(tmp), "keys must be str, int, float, bool or None, not %s", jv_typename(k));
                jinja_fail(r, "%s", tmp);
            }
            keys[i].key = ks;
            keys[i].idx = i;
        }
        if (sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t != JV_STR) jinja_fail(r, "'<' not supported between instances of keys of different types");
            qsort(keys, d->n, sizeof(skey), skey_cmp);
        }
        jb_addc(r, b, '{', 0);
        for (size_t i = 0; i < d->n; i++) {
            if (i) jb_add(r, b, isep, strlen(isep), 0);
            if (indent >= 0) json_newline(r, b, indent, level + 1);
            json_str(r, b, keys[i].key->p, keys[i].key->len, ensure_ascii);
            jb_add(r, b, ksep, strlen(ksep), 0);
            jinja_tojson(r, b, d->v[keys[i].idx], indent, isep, ksep, sort_keys, ensure_ascii, level + 1);
        }
        if (indent >= 0) json_newline(r, b, indent, level);
        jb_addc(r, b, '}', 0);
        r->rdepth--;
        return;
    }
    default:
        jinja_fail(r, "Object of type %s is not JSON serializable", jv_typename(v));
    }
}

/* ---- numbers as their JSON text ---- */

/* The next number token of text from *at (outside strings): its start and
 * length, or false at the end. */
static bool next_number(const char *text, size_t len, size_t *at, size_t *start, size_t *n) {
    size_t i = *at;
    while (i < len) {
        const char c = text[i];
        if (c == '"') { /* a string: up to its unescaped end */
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\') i++;
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            while (j < len && strchr("+-.eE0123456789", text[j])) j++;
            *start = i, *n = j - i, *at = j;
            return true;
        } else {
            i++;
        }
    }
    *at = len;
    return false;
}

int jinja_json_keep_numbers(cJSON *root, const char *text, size_t len) {
    /* the tree in document order (depth first, each node before its
     * children, then its next sibling), matched with the text's numbers.
     * A popped node pushes its next sibling, then its first child: the
     * stack holds at most two entries per level of nesting, which cJSON
     * limits */
    enum { MAX_STACK = 2 * 1100 };
    cJSON *stack[MAX_STACK];
    int top = 0;
    size_t at = 0;
    if (root) stack[top++] = root;
    while (top) {
        cJSON *x = stack[--top];
        if (x != root && x->next) stack[top++] = x->next;
        if (cJSON_IsNumber(x)) {
            size_t s, n;
            if (!next_number(text, len, &at, &s, &n)) return -1;
            if (!x->valuestring && !(x->valuestring = strndup(text + s, n))) return -1;
        } else if (x->child) {
            if (top == MAX_STACK) return -1;
            stack[top++] = x->child;
        }
    }
    return 0;
}
