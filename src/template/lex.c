/* lex.c: the Jinja lexer: template text into data and tag tokens, with
 * jinja2's whitespace rules as HF configures them (trim_blocks,
 * lstrip_blocks, `-`/`+` modifiers, keep_trailing_newline off, newlines
 * normalized to \n), raw blocks, comments, and Python-style literals. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/jinja_internal.h"

static jtok *lx_push(jlexer *lx, int type, int line);

void jinja_lex_fail(jlexer *lx, int line, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jtok *t = lx_push(lx, TK_ERROR, line);
    t->s = jinja_strndup(lx->a, msg, strlen(msg));
    t->len = strlen(msg);
    longjmp(lx->stop, 1);
}

static jtok *lx_push(jlexer *lx, int type, int line) {
    if (lx->n == lx->cap) {
        size_t nc = lx->cap ? lx->cap * 2 : 256;
        jtok *t = jinja_alloc(lx->a, nc * sizeof(jtok));
        if (lx->n) memcpy(t, lx->toks, lx->n * sizeof(jtok));
        lx->toks = t;
        lx->cap = nc;
    }
    jtok *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof(*t));
    t->type = (uint8_t)type;
    t->line = line;
    return t;
}

static bool lx_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f);
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static void lx_data(jlexer *lx, const char *s, size_t n, int line) {
    if (!n) return;
    jtok *t = lx_push(lx, TK_DATA, line);
    t->s = s;
    t->len = n;
}

/* Applies the whitespace control before a tag to text[*n]: '-' strips all
 * white space; otherwise lstrip_blocks (not for {{ ) strips spaces and tabs
 * between the line start and the tag. */
static void lx_lstrip(const char *text, size_t *n, char sign, bool is_var, bool line_starting) {
    if (sign == '-') {
        while (*n && lx_space(text[*n - 1])) (*n)--;
    } else if (sign != '+' && !is_var) {
        size_t l = *n;
        while (l && text[l - 1] != '\n') l--;
        if (l > 0 || line_starting) {
            for (size_t i = l; i < *n; i++)
                if (text[i] != ' ' && text[i] != '\t') return;
            *n = l;
        }
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decodes a string literal's body s[n] (Python unicode-escape). */
static void lx_string(jlexer *lx, jtok *t, const char *s, size_t n, int line) {
    char *o = jinja_alloc(lx->a, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[k++] = s[i]; continue; }
        char c = s[++i];
        switch (c) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int want = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int d = 0; d < want; d++) {
                int h = i + 1 < n ? hexval(s[i + 1]) : -1;
                if (h < 0) jinja_lex_fail(lx, line, "truncated \\%c escape in a string", c);
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (cp > 0x10ffff) jinja_lex_fail(lx, line, "illegal Unicode character in a string");
            if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd;
            k += put_utf8(o + k, cp);
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                uint32_t cp = (uint32_t)(c - '0');
                for (int d = 0; d < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(s[++i] - '0');
                k += put_utf8(o + k, cp);
            } else if (c == 'N') {
                jinja_lex_fail(lx, line, "\\N{...} escapes are not supported");
            } else {
                o[k++] = '\\';
                o[k++] = c;
            }
        }
    }
    o[k] = 0;
    t->s = o;
    t->len = k;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* digits with single underscores between them: (\d+_)*\d+ ; returns the end */
static size_t scan_digits(const char *s, size_t i, size_t n) {
    if (i >= n || !is_digit(s[i])) return i;
    while (i < n) {
        while (i < n && is_digit(s[i])) i++;
        if (i + 1 < n && s[i] == '_' && is_digit(s[i + 1])) i++;
        else break;
    }
    return i;
}

static const char *const lx_ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                     "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".",
                                     ":", "|", ",", ";", NULL};

/* Lexes the inside of a tag from *pi to its end; returns the index after
 * the end delimiter (and the whitespace it removes). */
static size_t lx_tag(jlexer *lx, const char *s, size_t n, size_t i, int *line, bool is_var,
                     bool *line_starting) {
    int depth = 0;
    int start_line = *line;
    while (1) {
        if (i >= n) jinja_lex_fail(lx, start_line, is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%%}'");
        /* the end delimiter, outside brackets */
        if (depth == 0) {
            char e = is_var ? '}' : '%';
            size_t j = i;
            char sign = 0;
            if ((s[j] == '-' || (!is_var && s[j] == '+')) && j + 2 < n && s[j + 1] == e &&
                s[j + 2] == '}') {
                sign = s[j];
                j++;
            }
            if (j + 1 < n && s[j] == e && s[j + 1] == '}') {
                j += 2;
                lx_push(lx, is_var ? TK_VAR_END : TK_BLOCK_END, *line);
                if (sign == '-') {
                    while (j < n && lx_space(s[j])) { if (s[j] == '\n') (*line)++; j++; }
                } else if (sign != '+' && !is_var && j < n && s[j] == '\n') {
                    j++;
                    (*line)++;
                }
                *line_starting = s[j - 1] == '\n';
                return j;
            }
        }
        char c = s[i];
        if (lx_space(c)) {
            if (c == '\n') (*line)++;
            i++;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\' && j + 1 < n) j++;
                j++;
            }
            if (j >= n) jinja_lex_fail(lx, *line, "unexpected end of string");
            jtok *t = lx_push(lx, TK_STRING, *line);
            lx_string(lx, t, s + i + 1, j - i - 1, *line);
            *line += count_nl(s + i, j - i);
            i = j + 1;
            continue;
        }
        if (c == '0' && i + 2 < n && strchr("xXoObB", s[i + 1]) && hexval(s[i + 2]) >= 0) {
            int base = (s[i + 1] | 0x20) == 'x' ? 16 : (s[i + 1] | 0x20) == 'o' ? 8 : 2;
            size_t j = i + 2;
            int64_t v = 0;
            while (j < n && (s[j] == '_' || (hexval(s[j]) >= 0 && hexval(s[j]) < base))) {
                if (s[j] != '_') {
                    if (v > (INT64_MAX - hexval(s[j])) / base) jinja_lex_fail(lx, *line, "integer literal too large");
                    v = v * base + hexval(s[j]);
                }
                j++;
            }
            jtok *t = lx_push(lx, TK_INT, *line);
            t->i = v;
            i = j;
            continue;
        }
        if (is_digit(c)) {
            size_t j = scan_digits(s, i, n);
            bool fl = false;
            if (!(i > 0 && s[i - 1] == '.')) {
                size_t k = j;
                if (k + 1 < n && s[k] == '.' && is_digit(s[k + 1])) { k = scan_digits(s, k + 1, n); fl = true; }
                if (k < n && (s[k] == 'e' || s[k] == 'E')) {
                    size_t m = k + 1;
                    if (m < n && (s[m] == '+' || s[m] == '-')) m++;
                    size_t e = scan_digits(s, m, n);
                    if (e > m) { k = e; fl = true; }
                }
                if (fl) j = k;
            }
            char buf[128];
            size_t bl = 0;
            for (size_t k = i; k < j && bl < sizeof(buf) - 1; k++)
                if (s[k] != '_') buf[bl++] = s[k];
            buf[bl] = 0;
            if (fl) {
                jtok *t = lx_push(lx, TK_FLOAT, *line);
                t->f = strtod(buf, NULL);
            } else {
                jtok *t = lx_push(lx, TK_INT, *line);
                int64_t v = 0;
                for (size_t k = 0; k < bl; k++) {
                    int d = buf[k] - '0';
                    if (v > (INT64_MAX - d) / 10) jinja_lex_fail(lx, *line, "integer literal too large");
                    v = v * 10 + d;
                }
                t->i = v;
            }
            i = j;
            continue;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t j = i;
            while (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') || s[j] == '_' || is_digit(s[j]))) j++;
            jtok *t = lx_push(lx, TK_NAME, *line);
            t->s = jinja_strndup(lx->a, s + i, j - i);
            t->len = j - i;
            i = j;
            continue;
        }
        const char *op = NULL;
        for (int k = 0; lx_ops[k]; k++) {
            size_t l = strlen(lx_ops[k]);
            if (i + l <= n && !memcmp(s + i, lx_ops[k], l)) { op = lx_ops[k]; break; }
        }
        if (!op) jinja_lex_fail(lx, *line, "unexpected char '%c'", (c >= 32 && c < 127) ? c : '?');
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') depth++;
        if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
            if (depth == 0) jinja_lex_fail(lx, *line, "unexpected '%s'", op);
            depth--;
        }
        jtok *t = lx_push(lx, TK_OP, *line);
        t->s = op;
        t->len = strlen(op);
        i += t->len;
    }
}

/* At s[i] == "{%": is it a raw tag? Returns the index after it, or 0. */
static size_t lx_is_tagword(const char *s, size_t n, size_t i, const char *word, char *sign,
                            char *endsign) {
    size_t j = i + 2;
    *sign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
    while (j < n && lx_space(s[j])) j++;
    size_t wl = strlen(word);
    if (j + wl > n || memcmp(s + j, word, wl)) return 0;
    j += wl;
    if (j < n && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') || s[j] == '_' || is_digit(s[j]))) return 0;
    while (j < n && lx_space(s[j])) j++;
    *endsign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+')) *endsign = s[j++];
    if (j + 1 < n && s[j] == '%' && s[j + 1] == '}') return j + 2;
    return 0;
}

void jinja_lex(jlexer *lx, const char *src0, size_t len0) {
    if (setjmp(lx->stop)) return; /* a TK_ERROR ends the tokens */
    /* newlines normalized; one trailing newline dropped */
    char *s = jinja_alloc(lx->a, len0 + 1);
    size_t n = 0;
    for (size_t i = 0; i < len0; i++) {
        if (src0[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len0 && src0[i + 1] == '\n') i++;
        } else {
            s[n++] = src0[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;

    size_t i = 0;
    int line = 1;
    bool line_starting = true;
    while (i < n) {
        /* the next tag start */
        size_t j = i;
        const char *hit = NULL;
        while (j + 1 < n) {
            hit = s[j] == '{' ? strchr("{%#", s[j + 1]) : NULL;
            if (hit && *hit) break;
            hit = NULL;
            j++;
        }
        if (!hit) {
            lx_data(lx, s + i, n - i, line);
            break;
        }
        char kind = *hit;
        char sign = 0;
        if (j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+')) sign = s[j + 2];
        size_t tl = j - i;
        char rsign = 0, rend = 0;
        size_t raw_end = kind == '%' ? lx_is_tagword(s, n, j, "raw", &rsign, &rend) : 0;
        lx_lstrip(s + i, &tl, sign, kind == '{', line_starting);
        lx_data(lx, s + i, tl, line);
        line += count_nl(s + i, j - i);
        size_t k = j + 2 + (sign ? 1 : 0);
        if (raw_end) {
            int raw_line = line;
            line += count_nl(s + j, raw_end - j);
            k = raw_end;
            if (rend == '-') while (k < n && lx_space(s[k])) { if (s[k] == '\n') line++; k++; }
            /* find {% endraw %} */
            size_t m = k, e = 0;
            char es = 0, ee = 0;
            for (; m + 1 < n; m++)
                if (s[m] == '{' && s[m + 1] == '%' && (e = lx_is_tagword(s, n, m, "endraw", &es, &ee))) break;
            if (!e) jinja_lex_fail(lx, raw_line, "missing end of raw directive");
            size_t rl = m - k;
            lx_lstrip(s + k, &rl, es, false, s[k - 1] == '\n');
            lx_data(lx, s + k, rl, line);
            line += count_nl(s + k, e - k);
            if (ee == '-') while (e < n && lx_space(s[e])) { if (s[e] == '\n') line++; e++; }
            else if (ee != '+' && e < n && s[e] == '\n') { e++; line++; }
            line_starting = s[e - 1] == '\n';
            i = e;
            continue;
        }
        if (kind == '#') {
            size_t m = k;
            while (m + 1 < n && !(s[m] == '#' && s[m + 1] == '}')) m++;
            if (m + 1 >= n) jinja_lex_fail(lx, line, "missing end of comment tag");
            char es = m > k && (s[m - 1] == '-' || s[m - 1] == '+') ? s[m - 1] : 0;
            line += count_nl(s + k, m - k);
            m += 2;
            if (es == '-') while (m < n && lx_space(s[m])) { if (s[m] == '\n') line++; m++; }
            else if (es != '+' && m < n && s[m] == '\n') { m++; line++; }
            line_starting = s[m - 1] == '\n';
            i = m;
            continue;
        }
        lx_push(lx, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, line);
        i = lx_tag(lx, s, n, k, &line, kind == '{', &line_starting);
    }
    lx_push(lx, TK_EOF, line);
}
