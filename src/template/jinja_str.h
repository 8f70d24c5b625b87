/* jinja_str.h: Python string operations over jstr (with content masks),
 * shared by the methods (methods.c) and the filters (filters.c). */
#ifndef SP_TEMPLATE_JINJA_STR_H
#define SP_TEMPLATE_JINJA_STR_H

#include "template/jinja_internal.h"

extern const char jinja_missing_tag[];
#define JS_MISSING jinja_missing_tag
#define JS_IS_MISSING(v) ((v).t == JV_UNDEF && (v).u.uname == JS_MISSING)
/* an argument given and not None */
#define JS_GIVEN(v) (!JS_IS_MISSING(v) && (v).t != JV_NONE)

jstr *jinja_html_escape(jrt *r, jstr *s); /* a Markup string; s itself when already one */
jv jinja_binop_in(jrt *r, jv needle, jv hay);
jv jinja_str_method(jrt *r, jstr *s, const char *name, jv *args, int nargs, const char **kwn, jv *kwv, int nkw);
bool jinja_str_case_test(jstr *s, bool lower);
jstr *jinja_str_case(jrt *r, jstr *s, int mode); /* 0 lower, 1 upper, 2 title (str.title), 3 capitalize, 4 jinja title, 5 swapcase */
jstr *jinja_str_strip(jrt *r, jstr *s, jstr *chars, bool left, bool right);
jv jinja_str_split(jrt *r, jstr *s, jstr *sep, int64_t maxsplit, bool from_right);
jstr *jinja_str_replace(jrt *r, jstr *s, jstr *old, jstr *nw, int64_t count);
jv jinja_str_mod(jrt *r, jstr *fmt, jv args);
jv jinja_splitlines(jrt *r, jstr *s, bool keepends);
int64_t jinja_cp_index(jstr *s, size_t byte_off);
jstr *jinja_join(jrt *r, jstr *sep, jlist *items);
bool jinja_cp_space(uint32_t cp);
uint32_t jinja_cp_at(const char *p, size_t n, size_t i, size_t *next);

#endif
