/* jinja.h: a sandboxed Jinja interpreter for chat templates. It renders what
 * Hugging Face's apply_chat_template renders with Python jinja2
 * (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
 * HF's tojson, raise_exception and strftime_now), byte for byte, and marks
 * which output bytes came from the context (content) and which from the
 * template (markup). No I/O: include/import/extends are parse errors.
 * Every render is bounded in steps, output, nesting and memory. */
#ifndef SP_TEMPLATE_JINJA_H
#define SP_TEMPLATE_JINJA_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

typedef struct jinja_tmpl jinja_tmpl;

/* Parses template text src[len]. NULL + err ("line N: message") on a syntax
 * error, a construct not supported, or out of memory. */
jinja_tmpl *jinja_parse(const char *src, size_t len, char *err, size_t errlen);
void jinja_free(jinja_tmpl *t);

typedef struct {
    uint64_t max_steps; /* evaluation steps (each node evaluated / loop iteration counts 1); 0 = default 10,000,000 */
    size_t max_output;  /* output bytes; 0 = default 16 MiB */
    int max_depth;      /* nesting of macro calls / recursion / expression depth; 0 = default 64 */
    int64_t now;        /* strftime_now's clock, Unix seconds UTC; 0 = time(NULL) */
} jinja_limits;

/* Renders t with the context ctx, a cJSON object (top-level keys become
 * global variables). String values that come from ctx are content unless
 * their top-level key is listed in markup_keys (NULL-terminated, may be
 * NULL); template literals are markup. Returns 0 with *out a malloc'd
 * NUL-terminated string of *out_len bytes and, when content_mask is not
 * NULL, *content_mask a malloc'd array of *out_len bytes (1: the byte came
 * from content, 0: from markup). Returns -1 with err ("line N: message") on
 * a runtime error: raise_exception(msg), an undefined operation, a type
 * error, or a limit exceeded (the message names the limit). lim may be
 * NULL (defaults). */
int jinja_render(const jinja_tmpl *t, const struct cJSON *ctx, const char *const *markup_keys,
                 const jinja_limits *lim, char **out, size_t *out_len,
                 unsigned char **content_mask, char *err, size_t errlen);

/* Keeps in each number node of root (cJSON's parse of text[len]) the
 * number's JSON text, as its valuestring (cJSON frees it), so that the
 * context reads numbers as Python's json does: "1.0" a float, a large
 * integer exact. 0, or -1 (out of memory, or root is not text's parse;
 * the numbers kept so far stay). */
int jinja_json_keep_numbers(struct cJSON *root, const char *text, size_t len);

#endif
