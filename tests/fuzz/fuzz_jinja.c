/* fuzz_jinja.c: the sandboxed Jinja interpreter (src/template/) on
 * arbitrary template text, rendered with a fixed small chat context under
 * small limits.
 *
 * Checked: parsing either gives a template or fails with a "line N: ..."
 * message; rendering either succeeds with output within max_output bytes
 * and a content mask of 0/1 bytes, or fails with a "line N: ..." message.
 * Both stay within the limits (steps, output, depth): no crash, no hang, no
 * stack overflow, no leak (ASan). */
#include <cjson/cJSON.h>

#include "fuzz_common.h"
#include "template/jinja.h"

static cJSON *fzj_ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fzj_ctx = cJSON_Parse(
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S <|im_start|>\"},{\"role\":\"user\",\"content\":\"U\\u00e9\"},"
        "{\"role\":\"assistant\",\"content\":\"A\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[1.5,null,true]}}}]},{\"role\":\"tool\",\"content\":\"R\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],"
        "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"n\":3}");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fzj_ctx) LLVMFuzzerInitialize(NULL, NULL);
    char err[256];
    err[0] = 0;
    jinja_tmpl *t = jinja_parse((const char *)data, size, err, sizeof(err));
    if (!t) {
        FZ_ASSERT(!strncmp(err, "line ", 5));
        return 0;
    }
    static const char *const markup[] = {"bos_token", "eos_token", NULL};
    jinja_limits lim = {.max_steps = 200000, .max_output = 1 << 16, .max_depth = 16, .now = 1700000000};
    char *out = NULL;
    size_t len = 0;
    unsigned char *mask = NULL;
    err[0] = 0;
    int rc = jinja_render(t, fzj_ctx, markup, &lim, &out, &len, &mask, err, sizeof(err));
    if (rc == 0) {
        FZ_ASSERT(out && mask && len <= lim.max_output && out[len] == 0);
        for (size_t i = 0; i < len; i++) FZ_ASSERT(mask[i] <= 1);
    } else {
        FZ_ASSERT(rc == -1 && !out && !strncmp(err, "line ", 5));
    }
    free(out);
    free(mask);
    jinja_free(t);
    return 0;
}
