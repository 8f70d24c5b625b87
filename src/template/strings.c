/* strings.c: Python str methods and operators over jstr: case mapping
 * (ASCII), strip/split/replace/find with Python's whitespace and
 * code-point indexes, join, str.format, printf-style %, splitlines.
 * Substrings keep their content mask; transformed text is content if any
 * input byte was. Work is charged as steps by size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_str.h"

const char jinja_missing_tag[] = "<missing>";

uint32_t jinja_cp_at(const char *p, size_t n, size_t i, size_t *next) {
    size_t e = jinja_utf8_next(p, n, i);
    *next = e;
    const unsigned char *u = (const unsigned char *)p + i;
    switch (e - i) {
    case 1: return u[0];
    case 2: return ((uint32_t)(u[0] & 0x1f) << 6) | (u[1] & 0x3f);
    case 3: return ((uint32_t)(u[0] & 0x0f) << 12) | ((uint32_t)(u[1] & 0x3f) << 6) | (u[2] & 0x3f);
    default: return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3f) << 12) | ((uint32_t)(u[2] & 0x3f) << 6) | (u[3] & 0x3f);
    }
}

bool jinja_cp_space(uint32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

int64_t jinja_cp_index(jstr *s, size_t off) {
    if (jstr_is_ascii(s)) return (int64_t)off;
    int64_t k = 0;
    for (size_t i = 0; i < off; i = jinja_utf8_next(s->p, s->len, i)) k++;
    return k;
}

static size_t cp_to_byte(jstr *s, int64_t cp) {
    if (jstr_is_ascii(s)) return (size_t)cp;
    size_t i = 0;
    for (int64_t k = 0; k < cp && i < s->len; k++) i = jinja_utf8_next(s->p, s->len, i);
    return i;
}

static void charge(jrt *r, size_t n) { jinja_step(r, n / 4096); }

static jstr *mkstr_like(jrt *r, jbuf *b, int any_content) { return jb_finish_mk(r, b, any_content); }

jstr *jinja_str_case(jrt *r, jstr *s, int mode) {
    jbuf b = {0};
    jb_init(r, &b, s->len);
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        bool lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
        char o = c;
        switch (mode) {
        case 0: if (up) o = (char)(c + 32); break;
        case 1: if (lo) o = (char)(c - 32); break;
        case 2: /* str.title */
            if (lo && !prev_cased) o = (char)(c - 32);
            else if (up && prev_cased) o = (char)(c + 32);
            break;
        case 3: /* capitalize */
            if (first && lo) o = (char)(c - 32);
            else if (!first && up) o = (char)(c + 32);
            break;
        case 4: /* jinja's title: words start after [-\s({\[<] */
            if (first) { if (lo) o = (char)(c - 32); }
            else if (up) o = (char)(c + 32);
            break;
        case 5: if (lo) o = (char)(c - 32); else if (up) o = (char)(c + 32); break;
        }
        if (mode == 4) {
            unsigned char uc = (unsigned char)c;
            first = uc == '-' || uc == '(' || uc == '{' || uc == '[' || uc == '<' || uc == ' ' ||
                    (uc >= 9 && uc <= 13) || (uc >= 0x1c && uc <= 0x1f);
        } else {
            first = false;
        }
        bool cased = lo || up || (unsigned char)c >= 0x80;
        if (mode == 2) prev_cased = ((unsigned char)c >= 0x80 && (unsigned char)c < 0xc0) ? prev_cased : cased;
        jb_addc(r, &b, o, 0);
    }
    charge(r, s->len);
    return mkstr_like(r, &b, jstr_mk_of(s));
}

bool jinja_str_case_test(jstr *s, bool lower) {
    bool cased = false;
    for (size_t i = 0; i < s->len; i++) {
        char c = s->p[i];
        if (lower ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z')) return false;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cased = true;
    }
    return cased;
}

static bool in_chars(jstr *chars, uint32_t cp) {
    if (!chars) return jinja_cp_space(cp);
    for (size_t i = 0; i < chars->len;) {
        size_t e;
        if (jinja_cp_at(chars->p, chars->len, i, &e) == cp) return true;
        i = e;
    }
    return false;
}

jstr *jinja_str_strip(jrt *r, jstr *s, jstr *chars, bool left, bool right) {
    size_t a = 0, b = s->len;
    if (left)
        while (a < b) {
            size_t e;
            uint32_t cp = jinja_cp_at(s->p, s->len, a, &e);
            if (!in_chars(chars, cp)) break;
            a = e;
        }
    if (right)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s->p[st] & 0xc0) == 0x80 && b - st < 4) st--;
            size_t e;
            uint32_t cp = jinja_cp_at(s->p, s->len, st, &e);
            if (e != b) { st = b - 1; cp = (unsigned char)s->p[st]; }
            if (!in_chars(chars, cp)) break;
            b = st;
        }
    charge(r, s->len);
    if (a == 0 && b == s->len) return s;
    return jstr_sub(r, s, a, b);
}

jv jinja_str_split(jrt *r, jstr *s, jstr *sep, int64_t maxsplit, bool from_right) {
    jlist *l = jlist_new(r, 0);
    charge(r, s->len);
    if (sep && !sep->len) jinja_fail(r, "empty separator");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!sep) {
        /* runs of white space; leading/trailing ignored */
        if (!from_right) {
            size_t i = 0;
            int64_t k = 0;
            while (i < s->len) {
                size_t e;
                while (i < s->len && jinja_cp_space(jinja_cp_at(s->p, s->len, i, &e))) i = e;
                if (i >= s->len) break;
                if (k == maxsplit) {
                    size_t end = s->len;
                    while (end > i) {
                        size_t st = end - 1;
                        if (!jinja_cp_space((unsigned char)s->p[st]) || (unsigned char)s->p[st] >= 0x80) break;
                        end = st;
                    }
                    jlist_push(r, l, jv_strv(jstr_sub(r, s, i, end)));
                    break;
                }
                size_t st = i;
                while (i < s->len && !jinja_cp_space(jinja_cp_at(s->p, s->len, i, &e))) i = e;
                jlist_push(r, l, jv_strv(jstr_sub(r, s, st, i)));
                k++;
            }
            return jv_listv(l);
        }
        /* rsplit(None, n): split from the right */
        jlist *tmp = jlist_new(r, 0);
        size_t end = s->len;
        int64_t k = 0;
        while (end > 0) {
            while (end > 0 && jinja_cp_space((unsigned char)s->p[end - 1])) end--;
            if (!end) break;
            if (k == maxsplit) {
                size_t st = 0;
                while (st < end && jinja_cp_space((unsigned char)s->p[st])) st++;
                jlist_push(r, tmp, jv_strv(jstr_sub(r, s, st, end)));
                break;
            }
            size_t st = end;
            while (st > 0 && !jinja_cp_space((unsigned char)s->p[st - 1])) st--;
            jlist_push(r, tmp, jv_strv(jstr_sub(r, s, st, end)));
            end = st;
            k++;
        }
        for (size_t i = tmp->n; i-- > 0;) jlist_push(r, l, tmp->v[i]);
        return jv_listv(l);
    }
    if (!from_right) {
        size_t i = 0;
        int64_t k = 0;
        while (1) {
            const char *hit = k < maxsplit ? memmem(s->p + i, s->len - i, sep->p, sep->len) : NULL;
            if (!hit) {
                jlist_push(r, l, jv_strv(jstr_sub(r, s, i, s->len)));
                break;
            }
            size_t h = (size_t)(hit - s->p);
            jlist_push(r, l, jv_strv(jstr_sub(r, s, i, h)));
            i = h + sep->len;
            k++;
        }
        return jv_listv(l);
    }
    jlist *tmp = jlist_new(r, 0);
    size_t end = s->len;
    int64_t k = 0;
    while (1) {
        size_t h = (size_t)-1;
        if (k < maxsplit && end >= sep->len)
            for (size_t p = end - sep->len + 1; p-- > 0;)
                if (!memcmp(s->p + p, sep->p, sep->len)) { h = p; break; }
        if (h == (size_t)-1) {
            jlist_push(r, tmp, jv_strv(jstr_sub(r, s, 0, end)));
            break;
        }
        jlist_push(r, tmp, jv_strv(jstr_sub(r, s, h + sep->len, end)));
        end = h;
        k++;
    }
    for (size_t i = tmp->n; i-- > 0;) jlist_push(r, l, tmp->v[i]);
    return jv_listv(l);
}

jstr *jinja_str_replace(jrt *r, jstr *s, jstr *old, jstr *nw, int64_t count) {
    jbuf b = {0};
    jb_init(r, &b, s->len);
    int any = jstr_mk_of(s) || jstr_mk_of(old) || jstr_mk_of(nw);
    if (count < 0) count = INT64_MAX;
    if (!old->len) {
        /* inserts nw between code points and at both ends */
        int64_t k = 0;
        size_t i = 0;
        while (1) {
            if (k < count) { jb_add(r, &b, nw->p, nw->len, 0); k++; }
            if (i >= s->len) break;
            size_t e = jinja_utf8_next(s->p, s->len, i);
            jb_add(r, &b, s->p + i, e - i, 0);
            i = e;
            charge(r, nw->len);
        }
    } else {
        size_t i = 0;
        int64_t k = 0;
        while (i < s->len) {
            const char *hit = k < count ? memmem(s->p + i, s->len - i, old->p, old->len) : NULL;
            if (!hit) break;
            size_t h = (size_t)(hit - s->p);
            jb_add(r, &b, s->p + i, h - i, 0);
            jb_add(r, &b, nw->p, nw->len, 0);
            i = h + old->len;
            k++;
        }
        jb_add(r, &b, s->p + i, s->len - i, 0);
    }
    charge(r, b.len + s->len);
    return mkstr_like(r, &b, any);
}

jstr *jinja_join(jrt *r, jstr *sep, jlist *items) {
    jbuf b = {0};
    jb_init(r, &b, 64);
    for (size_t i = 0; i < items->n; i++) {
        if (i) jb_adds(r, &b, sep);
        jb_adds(r, &b, jv_tostr(r, items->v[i]));
    }
    jinja_step(r, items->n / 64 + b.len / 4096);
    return jb_finish(r, &b);
}

jv jinja_splitlines(jrt *r, jstr *s, bool keepends) {
    jlist *l = jlist_new(r, 0);
    size_t i = 0, st = 0;
    while (i < s->len) {
        size_t e;
        uint32_t cp = jinja_cp_at(s->p, s->len, i, &e);
        bool br = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
                  cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!br) { i = e; continue; }
        size_t brend = e;
        if (cp == '\r' && brend < s->len && s->p[brend] == '\n') brend++;
        jlist_push(r, l, jv_strv(jstr_sub(r, s, st, keepends ? brend : i)));
        i = st = brend;
    }
    if (st < s->len) jlist_push(r, l, jv_strv(jstr_sub(r, s, st, s->len)));
    charge(r, s->len);
    return jv_listv(l);
}

/* ---- formatting ---- */

static void pad_add(jrt *r, jbuf *b, jstr *v, char fill, char align, int64_t width, bool numeric) {
    int64_t n = (int64_t)jstr_cplen(v);
    int64_t pad = width > n ? width - n : 0;
    if (pad > (int64_t)r->max_output) jinja_fail(r, "max_output exceeded (format width)");
    if (!align) align = numeric ? '>' : '<';
    int64_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0, right = pad - left;
    for (int64_t i = 0; i < left; i++) jb_addc(r, b, fill, 0);
    jb_adds(r, b, v);
    for (int64_t i = 0; i < right; i++) jb_addc(r, b, fill, 0);
}

static jstr *num_to_str(jrt *r, jv v, char type, int prec, bool plus) {
    char tmp[512];
    double f = v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
    switch (type) {
    case 'd': case 'i': case 'u':
        if (v.t == JV_FLOAT) {
            if (!isfinite(f)) jinja_fail(r, "cannot convert float to integer");
            snprintf(tmp, sizeof(tmp), plus ? "%+lld" : "%lld", (long long)trunc(f));
        } else snprintf(tmp, sizeof(tmp), plus ? "%+lld" : "%lld", (long long)(v.t == JV_INT ? v.u.i : v.u.b));
        break;
    case 'x': case 'X': case 'o':
        if (v.t == JV_FLOAT) jinja_fail(r, "%%%c format: an integer is required, not float", type);
        snprintf(tmp, sizeof(tmp), type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", (long long)(v.t == JV_INT ? v.u.i : v.u.b));
        break;
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        char fmt[16];
        snprintf(fmt, sizeof(fmt), "%%%s.%d%c", plus ? "+" : "", prec < 0 ? 6 : prec > 100 ? 100 : prec, type);
        snprintf(tmp, sizeof(tmp), fmt, f);
        break;
    }
    default:
        jinja_fail(r, "unsupported format character '%c'", type);
    }
    return jstr_new(r, tmp, strlen(tmp), v.content);
}

jv jinja_str_mod(jrt *r, jstr *fmt, jv args) {
    jbuf b = {0};
    jb_init(r, &b, fmt->len + 16);
    jlist *al = NULL;
    jdict *ad = args.t == JV_DICT ? args.u.d : NULL;
    if (args.t == JV_LIST && args.tuple) al = args.u.l;
    else {
        al = jlist_new(r, 1);
        al->v[al->n++] = args;
    }
    size_t ai = 0;
    bool used_dict = false;
    for (size_t i = 0; i < fmt->len; i++) {
        char c = fmt->p[i];
        if (c != '%') {
            if (fmt->mk == JM_MIXED) jb_addmask(r, &b, fmt->p + i, 1, fmt->mask + i);
            else jb_addc(r, &b, c, fmt->mk);
            continue;
        }
        if (++i >= fmt->len) jinja_fail(r, "incomplete format");
        jv v;
        bool have = false;
        if (fmt->p[i] == '(') {
            size_t e = i + 1;
            while (e < fmt->len && fmt->p[e] != ')') e++;
            if (e >= fmt->len || !ad) jinja_fail(r, "format requires a mapping");
            jv *p = jdict_get(ad, jv_strn(r, fmt->p + i + 1, e - i - 1, 0));
            if (!p) jinja_fail(r, "format key '%.*s' missing", (int)(e - i - 1), fmt->p + i + 1);
            v = *p;
            have = used_dict = true;
            i = e + 1;
        }
        bool minus = false, plus = false, zero = false;
        while (i < fmt->len && strchr("-+ 0#", fmt->p[i])) {
            if (fmt->p[i] == '-') minus = true;
            if (fmt->p[i] == '+') plus = true;
            if (fmt->p[i] == '0') zero = true;
            i++;
        }
        int64_t width = 0;
        int prec = -1;
        while (i < fmt->len && fmt->p[i] >= '0' && fmt->p[i] <= '9') width = width * 10 + (fmt->p[i++] - '0'), width = width > 100000 ? 100000 : width;
        if (i < fmt->len && fmt->p[i] == '.') {
            prec = 0;
            i++;
            while (i < fmt->len && fmt->p[i] >= '0' && fmt->p[i] <= '9') prec = prec * 10 + (fmt->p[i++] - '0'), prec = prec > 1000 ? 1000 : prec;
        }
        if (i >= fmt->len) jinja_fail(r, "incomplete format");
        char t = fmt->p[i];
        if (t == '%') { jb_addc(r, &b, '%', 0); continue; }
        if (!have) {
            if (ai >= al->n) jinja_fail(r, "not enough arguments for format string");
            v = al->v[ai++];
        }
        jstr *s;
        if (t == 's' || t == 'r' || t == 'a') {
            if (t == 's') s = jv_tostr(r, v);
            else {
                jbuf rb = {0};
                jb_init(r, &rb, 16);
                jv_repr(r, &rb, v, jv_is_content(v));
                s = jb_finish(r, &rb);
            }
            if (prec >= 0 && (size_t)prec < jstr_cplen(s)) s = jv_slice(r, jv_strv(s), jv_int(0), jv_int(prec), jv_none()).u.s;
        } else {
            if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL) jinja_fail(r, "%%%c format: a real number is required, not %s", t, jv_typename(v));
            s = num_to_str(r, v, t, prec, plus);
        }
        pad_add(r, &b, s, zero && !minus && t != 's' ? '0' : ' ', minus ? '<' : '>', width, true);
    }
    if (!used_dict && !ad && ai < al->n) jinja_fail(r, "not all arguments converted during string formatting");
    charge(r, b.len);
    return jv_strv(jb_finish(r, &b));
}

static jv format_value(jrt *r, jv *args, int nargs, const char **kwn, jv *kwv, int nkw, const char *f, size_t n, int *autoi) {
    if (!n) {
        if (*autoi < 0) jinja_fail(r, "cannot switch from manual field specification to automatic field numbering");
        if (*autoi >= nargs) jinja_fail(r, "Replacement index %d out of range for positional args tuple", *autoi);
        return args[(*autoi)++];
    }
    if (f[0] >= '0' && f[0] <= '9') {
        int64_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (f[i] < '0' || f[i] > '9') jinja_fail(r, "unsupported format field");
            k = k * 10 + (f[i] - '0');
            if (k > 1000000) break;
        }
        if (*autoi > 0) jinja_fail(r, "cannot switch from automatic field numbering to manual field specification");
        *autoi = -1;
        if (k >= nargs) jinja_fail(r, "Replacement index %lld out of range for positional args tuple", (long long)k);
        return args[k];
    }
    for (int i = 0; i < nkw; i++)
        if (strlen(kwn[i]) == n && !memcmp(kwn[i], f, n)) return kwv[i];
    jinja_fail(r, "format: missing key '%.*s'", (int)(n > 60 ? 60 : n), f);
}

static jv str_format(jrt *r, jstr *fmt, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    jbuf b = {0};
    jb_init(r, &b, fmt->len + 16);
    int autoi = 0;
    for (size_t i = 0; i < fmt->len; i++) {
        char c = fmt->p[i];
        if ((c == '{' || c == '}') && i + 1 < fmt->len && fmt->p[i + 1] == c) {
            jb_addc(r, &b, c, fmt->mk == JM_MIXED ? fmt->mask[i] : fmt->mk);
            i++;
            continue;
        }
        if (c == '}') jinja_fail(r, "Single '}' encountered in format string");
        if (c != '{') {
            jb_addc(r, &b, c, fmt->mk == JM_MIXED ? fmt->mask[i] : fmt->mk);
            continue;
        }
        size_t e = i + 1;
        while (e < fmt->len && fmt->p[e] != '}') e++;
        if (e >= fmt->len) jinja_fail(r, "Single '{' encountered in format string");
        const char *f = fmt->p + i + 1;
        size_t fl = e - i - 1;
        const char *conv = memchr(f, '!', fl), *spec = memchr(f, ':', fl);
        size_t namel = conv ? (size_t)(conv - f) : spec ? (size_t)(spec - f) : fl;
        jv v = format_value(r, args, nargs, kwn, kwv, nkw, f, namel, &autoi);
        jstr *s;
        if (conv && conv[1] == 'r') {
            jbuf rb = {0};
            jb_init(r, &rb, 16);
            jv_repr(r, &rb, v, jv_is_content(v));
            s = jb_finish(r, &rb);
        } else {
            s = NULL;
        }
        if (spec && (size_t)(spec - f) + 1 < fl) {
            const char *sp = spec + 1;
            size_t sl = fl - (size_t)(sp - f);
            char fill = ' ', align = 0, type = 0;
            size_t k = 0;
            if (sl >= 2 && strchr("<>^=", sp[1])) { fill = sp[0]; align = sp[1]; k = 2; }
            else if (sl >= 1 && strchr("<>^=", sp[0])) { align = sp[0]; k = 1; }
            bool plus = false;
            if (k < sl && sp[k] == '+') { plus = true; k++; }
            if (k < sl && sp[k] == '0' && !align) { fill = '0'; align = '='; k++; }
            int64_t width = 0;
            int prec = -1;
            while (k < sl && sp[k] >= '0' && sp[k] <= '9') width = width * 10 + (sp[k++] - '0'), width = width > 100000 ? 100000 : width;
            if (k < sl && sp[k] == '.') {
                prec = 0;
                k++;
                while (k < sl && sp[k] >= '0' && sp[k] <= '9') prec = prec * 10 + (sp[k++] - '0'), prec = prec > 1000 ? 1000 : prec;
            }
            if (k < sl) type = sp[k++];
            if (k != sl) jinja_fail(r, "Invalid format specifier");
            bool numeric = v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
            if (!s) {
                if (type && type != 's') {
                    if (!numeric) jinja_fail(r, "Unknown format code '%c' for object of type '%s'", type, jv_typename(v));
                    s = num_to_str(r, v, type, prec, plus);
                } else if (numeric && prec >= 0 && v.t == JV_FLOAT) {
                    s = num_to_str(r, v, 'g', prec, plus);
                } else {
                    s = jv_tostr(r, v);
                    if (prec >= 0 && !numeric && (size_t)prec < jstr_cplen(s)) s = jv_slice(r, jv_strv(s), jv_int(0), jv_int(prec), jv_none()).u.s;
                }
            }
            pad_add(r, &b, s, fill, align == '=' ? '>' : align, width, numeric);
        } else {
            if (!s) s = jv_tostr(r, v);
            jb_adds(r, &b, s);
        }
        i = e;
    }
    charge(r, b.len);
    return jv_strv(jb_finish(r, &b));
}

/* ---- methods ---- */

static int64_t int_arg(jrt *r, jv v, int64_t dflt) {
    if (!JS_GIVEN(v)) return dflt;
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    jinja_fail(r, "'%s' object cannot be interpreted as an integer", jv_typename(v));
}

static jstr *str_arg(jrt *r, jv v, const char *what) {
    if (v.t != JV_STR) jinja_fail(r, "%s must be str, not %s", what, jv_typename(v));
    return v.u.s;
}

static bool match_at(jstr *s, jstr *p, size_t at) { return at + p->len <= s->len && !memcmp(s->p + at, p->p, p->len); }

jv jinja_str_method(jrt *r, jstr *s, const char *name, jv *args, int nargs, const char **kwn, jv *kwv, int nkw) {
    jv a0 = jinja_kwarg(kwn, kwv, nkw, "\x01", args, nargs, 0);
    jv a1 = jinja_kwarg(kwn, kwv, nkw, "\x01", args, nargs, 1);
    if (!strcmp(name, "upper")) return jv_strv(jinja_str_case(r, s, 1));
    if (!strcmp(name, "lower") || !strcmp(name, "casefold")) return jv_strv(jinja_str_case(r, s, 0));
    if (!strcmp(name, "title")) return jv_strv(jinja_str_case(r, s, 2));
    if (!strcmp(name, "capitalize")) return jv_strv(jinja_str_case(r, s, 3));
    if (!strcmp(name, "swapcase")) return jv_strv(jinja_str_case(r, s, 5));
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        jv c = jinja_kwarg(kwn, kwv, nkw, "chars", args, nargs, 0);
        jstr *chars = JS_GIVEN(c) ? str_arg(r, c, "strip arg") : NULL;
        return jv_strv(jinja_str_strip(r, s, chars, name[0] != 'r', name[0] != 'l'));
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (JS_IS_MISSING(a0)) jinja_fail(r, "%s takes at least 1 argument", name);
        size_t st = cp_to_byte(s, int_arg(r, a1, 0) < 0 ? 0 : int_arg(r, a1, 0));
        jlist *alts;
        if (a0.t == JV_LIST && a0.tuple) alts = a0.u.l;
        else {
            alts = jlist_new(r, 1);
            alts->v[alts->n++] = jv_strv(str_arg(r, a0, "startswith first arg"));
        }
        for (size_t i = 0; i < alts->n; i++) {
            jstr *p = str_arg(r, alts->v[i], "tuple for startswith");
            if (name[0] == 's' ? match_at(s, p, st) : (p->len <= s->len - (st > s->len ? s->len : st) && match_at(s, p, s->len - p->len)))
                return jv_bool(1);
        }
        return jv_bool(0);
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = jinja_kwarg(kwn, kwv, nkw, "sep", args, nargs, 0);
        jv mx = jinja_kwarg(kwn, kwv, nkw, "maxsplit", args, nargs, 1);
        return jinja_str_split(r, s, JS_GIVEN(sep) ? str_arg(r, sep, "separator") : NULL, int_arg(r, mx, -1), name[0] == 'r');
    }
    if (!strcmp(name, "replace")) {
        jv cnt = jinja_kwarg(kwn, kwv, nkw, "count", args, nargs, 2);
        return jv_strv(jinja_str_replace(r, s, str_arg(r, a0, "replace arg 1"), str_arg(r, a1, "replace arg 2"), int_arg(r, cnt, -1)));
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") || !strcmp(name, "rindex") || !strcmp(name, "count")) {
        jstr *sub = str_arg(r, a0, "substring");
        int64_t ncp = (int64_t)jstr_cplen(s);
        int64_t st = int_arg(r, a1, 0), en = int_arg(r, nargs > 2 ? args[2] : jv_none(), ncp);
        if (st < 0) st += ncp;
        if (st < 0) st = 0;
        if (en < 0) en += ncp;
        if (en > ncp) en = ncp;
        charge(r, s->len);
        size_t bs = cp_to_byte(s, st), be = en < st ? bs : cp_to_byte(s, en);
        if (!strcmp(name, "count")) {
            if (en < st) return jv_int(0);
            if (!sub->len) return jv_int(en - st + 1);
            int64_t c = 0;
            for (size_t i = bs; i + sub->len <= be;) {
                const char *h = memmem(s->p + i, be - i, sub->p, sub->len);
                if (!h) break;
                c++;
                i = (size_t)(h - s->p) + sub->len;
            }
            return jv_int(c);
        }
        int64_t found = -1;
        if (en >= st && be - bs >= sub->len) {
            if (name[0] != 'r') {
                const char *h = memmem(s->p + bs, be - bs, sub->p, sub->len);
                if (h) found = jinja_cp_index(s, (size_t)(h - s->p));
            } else {
                for (size_t p = be - sub->len + 1; p-- > bs;)
                    if (!memcmp(s->p + p, sub->p, sub->len)) { found = jinja_cp_index(s, p); break; }
            }
        }
        if (found < 0 && strstr(name, "index")) jinja_fail(r, "substring not found");
        return jv_int(found);
    }
    if (!strcmp(name, "join")) {
        jlist *items;
        jinja_iter(r, a0, &items);
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].t != JV_STR) jinja_fail(r, "sequence item %zu: expected str instance, %s found", i, jv_typename(items->v[i]));
        return jv_strv(jinja_join(r, s, items));
    }
    if (!strcmp(name, "format")) return str_format(r, s, args, nargs, kwn, kwv, nkw);
    if (!strcmp(name, "splitlines")) {
        jv ke = jinja_kwarg(kwn, kwv, nkw, "keepends", args, nargs, 0);
        return jinja_splitlines(r, s, JS_GIVEN(ke) && jv_truthy(ke));
    }
    if (!strncmp(name, "is", 2)) {
        bool ok = s->len > 0, cased = false, prev_cased = false, title_ok = true;
        charge(r, s->len);
        for (size_t i = 0; i < s->len;) {
            size_t e;
            uint32_t c = jinja_cp_at(s->p, s->len, i, &e);
            bool d = c >= '0' && c <= '9', lo = c >= 'a' && c <= 'z', up = c >= 'A' && c <= 'Z';
            bool alpha = lo || up || c >= 0x80;
            if (!strcmp(name, "isdigit") || !strcmp(name, "isnumeric") || !strcmp(name, "isdecimal")) ok &= d;
            else if (!strcmp(name, "isalpha")) ok &= alpha && !jinja_cp_space(c);
            else if (!strcmp(name, "isalnum")) ok &= (alpha || d) && !jinja_cp_space(c);
            else if (!strcmp(name, "isspace")) ok &= jinja_cp_space(c);
            else if (!strcmp(name, "isupper")) { if (lo) ok = false; cased |= up; }
            else if (!strcmp(name, "islower")) { if (up) ok = false; cased |= lo; }
            else if (!strcmp(name, "istitle")) {
                if (up) { if (prev_cased) title_ok = false; cased = true; }
                else if (lo) { if (!prev_cased) title_ok = false; cased = true; }
                prev_cased = up || lo;
            }
            i = e;
        }
        if (!strcmp(name, "isupper") || !strcmp(name, "islower")) ok = ok && cased;
        if (!strcmp(name, "istitle")) ok = title_ok && cased;
        return jv_bool(ok);
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        jstr *p = str_arg(r, a0, name);
        if (name[6] == 'p' && match_at(s, p, 0)) return jv_strv(jstr_sub(r, s, p->len, s->len));
        if (name[6] == 's' && p->len && p->len <= s->len && match_at(s, p, s->len - p->len)) return jv_strv(jstr_sub(r, s, 0, s->len - p->len));
        return jv_strv(s);
    }
    if (!strcmp(name, "center") || !strcmp(name, "ljust") || !strcmp(name, "rjust") || !strcmp(name, "zfill")) {
        int64_t w = int_arg(r, a0, 0);
        char fill = name[0] == 'z' ? '0' : ' ';
        if (name[0] != 'z' && a1.t == JV_STR && a1.u.s->len == 1) fill = a1.u.s->p[0];
        jbuf b = {0};
        jb_init(r, &b, s->len + 8);
        int64_t n = (int64_t)jstr_cplen(s);
        if (name[0] == 'c' && w > n) {
            /* Python: left = pad/2 + (pad & w & 1) */
            int64_t pad = w - n, left = pad / 2 + (pad & w & 1);
            if (pad > (int64_t)r->max_output) jinja_fail(r, "max_output exceeded (center width)");
            for (int64_t i = 0; i < left; i++) jb_addc(r, &b, fill, 0);
            jb_adds(r, &b, s);
            for (int64_t i = 0; i < pad - left; i++) jb_addc(r, &b, fill, 0);
        } else {
            pad_add(r, &b, s, fill, name[0] == 'l' ? '<' : name[0] == 'c' ? '^' : '>', w, false);
        }
        return jv_strv(jb_finish(r, &b));
    }
    if (!strcmp(name, "partition") || !strcmp(name, "rpartition")) {
        jstr *sep = str_arg(r, a0, "separator");
        if (!sep->len) jinja_fail(r, "empty separator");
        jv parts = jinja_str_split(r, s, sep, 1, name[0] == 'r');
        jlist *l = jlist_new(r, 3);
        jlist *p = parts.u.l;
        if (p->n == 2) {
            l->v[0] = p->v[0];
            l->v[1] = jv_strv(sep);
            l->v[2] = p->v[1];
        } else if (name[0] == 'r') {
            l->v[0] = jv_strn(r, "", 0, 0);
            l->v[1] = jv_strn(r, "", 0, 0);
            l->v[2] = jv_strv(s);
        } else {
            l->v[0] = jv_strv(s);
            l->v[1] = jv_strn(r, "", 0, 0);
            l->v[2] = jv_strn(r, "", 0, 0);
        }
        l->n = 3;
        jv v = jv_listv(l);
        v.tuple = 1;
        return v;
    }
    if (!strcmp(name, "expandtabs")) return jv_strv(jinja_str_replace(r, s, jstr_new(r, "\t", 1, 0), jstr_new(r, "        ", 8, 0), -1));
    jinja_fail(r, "'str' object has no attribute '%s'", name);
}
