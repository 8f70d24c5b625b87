/* fuzz_sse.c: what the server writes into response bodies and SSE events
 * from untrusted bytes: JSON string escaping (sb_json_str), UTF-8
 * sanitizing, error objects, and streamed text deltas as the streaming
 * detokenizer produces them.
 *
 * The SSE chunk builder itself (oai_reply_chunk, src/server/openai_reply.c)
 * puts text into events only through sb_json_str, which is what is fuzzed
 * here, inside an event of the same shape.
 *
 * Input: byte 0 picks the mode: bit 0 clear: the rest is text (a model's
 * output can be any bytes); set: the rest is token ids (2 bytes each) of
 * the vocabulary in bit 1, streamed as deltas.
 *
 * Checked: each event is one "data: ...\n\n" line with no other line break
 * (a raw newline would split the event), its JSON parses, and the string
 * it carries is exactly the input with invalid UTF-8 replaced by U+FFFD
 * (compared up to the first NUL, where cJSON's strings stop). */
#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "server/openai.h"
#include "sbuf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_load_vocabs();
    return 0;
}

/* One event carrying text[n] as the server's chunks carry text deltas;
 * checks it as described above. */
static void fzs_event(const char *text, size_t n) {
    sbuf b = {0};
    sb_str(&b, "data: {\"id\": \"cmpl-0\", \"choices\": [{\"index\": 0, \"delta\": {\"content\": ");
    sb_json_str(&b, text, n);
    sb_printf(&b, "}, \"finish_reason\": %s}]}\n\n", n ? "null" : "\"stop\"");
    FZ_ASSERT(!b.oom && b.p);
    FZ_ASSERT(b.len >= 8 && !memcmp(b.p, "data: ", 6) && !memcmp(b.p + b.len - 2, "\n\n", 2));
    const char *json = b.p + 6;
    size_t jl = b.len - 8;
    FZ_ASSERT(!memchr(json, '\n', jl) && !memchr(json, '\r', jl));
    FZ_ASSERT(!memchr(b.p, 0, b.len)); /* a NUL would cut the body short */
    FZ_ASSERT(fz_valid_utf8(json, jl));
    cJSON *j = cJSON_ParseWithLength(json, jl);
    FZ_ASSERT(j);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "delta"),
                                                      "content");
    FZ_ASSERT(cJSON_IsString(s));
    char *want = utf8_sanitize(text, n);
    FZ_ASSERT(want);
    FZ_ASSERT(!strcmp(s->valuestring, want));
    free(want);
    cJSON_Delete(j);
    sb_free(&b);
}

static void fzs_text(const char *text, size_t n) {
    char *san = utf8_sanitize(text, n);
    FZ_ASSERT(san);
    size_t sl = strlen(san);
    FZ_ASSERT(sl <= 3 * n);
    /* NULs pass through sanitizing: check validity up to the first */
    FZ_ASSERT(fz_valid_utf8(san, sl));
    if (fz_valid_utf8(text, n)) FZ_ASSERT(sl == strnlen(text, n) && !memcmp(san, text, sl));
    free(san);
    fzs_event(text, n);

    /* an error object built from the text (oai_seterr truncates it) */
    oai_error e;
    oai_seterr(&e, 500, "server_error", NULL, NULL, "%.*s", (int)(n > 4096 ? 4096 : n), text);
    sbuf b = {0};
    sb_str(&b, "data: ");
    oai_error_json(&e, &b);
    sb_str(&b, "\n\n");
    FZ_ASSERT(!b.oom && !memchr(b.p + 6, '\n', b.len - 8));
    cJSON *j = cJSON_ParseWithLength(b.p + 6, b.len - 8);
    FZ_ASSERT(j && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "error")));
    cJSON_Delete(j);
    sb_free(&b);
}

/* Streams ids[n] through the detokenizer, one event per non-empty delta,
 * then the flush, as stream_build does. */
static void fzs_stream(const sp_vocab *v, const uint8_t *p, size_t n) {
    int32_t nv = sp_vocab_n_tokens(v);
    char buf[4096];
    sp_detok d;
    sp_detok_init(&d);
    for (size_t i = 0; i + 1 < n; i += 2) {
        int32_t id = (int32_t)(((uint32_t)p[i] | (uint32_t)p[i + 1] << 8) % (uint32_t)nv);
        int k = sp_detok_push(v, &d, id, buf, sizeof(buf));
        FZ_ASSERT(k >= 0);
        if (k > 0) fzs_event(buf, (size_t)k);
    }
    int k = sp_detok_flush(&d, buf, sizeof(buf));
    FZ_ASSERT(k >= 0);
    fzs_event(buf, (size_t)k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_load_vocabs();
    if (size < 1) return 0;
    uint8_t mode = data[0];
    if (!(mode & 1)) {
        fzs_text((const char *)data + 1, size - 1);
        return 0;
    }
    const sp_vocab *v = fz_vocabs[(mode >> 1) & 1];
    if (!v) v = fz_vocabs[!((mode >> 1) & 1)];
    if (v) fzs_stream(v, data + 1, size - 1);
    return 0;
}
