/* cmd_template.c: `specula template`: a chat request rendered by a Jinja
 * chat template (the model's, or one from a file), exactly as Hugging
 * Face's apply_chat_template renders it (sp_chat_apply_template). */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static void tmpl_usage(FILE *f) {
    fprintf(f, "usage: specula template (-m MODEL | --template FILE) --input REQUEST.json [--now DATE]\n"
               "  -m MODEL         GGUF model: its tokenizer.chat_template, and the text of its\n"
               "                   BOS/EOS tokens for bos_token/eos_token; also --model MODEL\n"
               "  --template FILE  the Jinja template to render (with -m: this one, the model's\n"
               "                   BOS/EOS text)\n"
               "  --input FILE     the request, a JSON object: messages, tools, add_generation_prompt,\n"
               "                   bos_token, eos_token, chat_template_kwargs, other variables\n"
               "                   (\"-\": standard input)\n"
               "  --now DATE       strftime_now's clock, UTC: YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS\n"
               "                   (default: the current time)\n"
               "Prints the rendered prompt exactly, with nothing added.\n");
}

/* YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, UTC, to Unix seconds; false if s is
 * neither or not a real date. */
static bool parse_now(const char *s, int64_t *out) {
    struct tm tm = {0};
    const char *end = strptime(s, "%Y-%m-%d", &tm);
    if (end && *end == 'T') end = strptime(end + 1, "%H:%M:%S", &tm);
    if (!end || *end || strlen(s) < 10) return false;
    struct tm check = tm;
    time_t t = timegm(&tm);
    /* timegm normalizes 2025-02-30 to March 2: refuse what it moved */
    if (t == (time_t)-1 || tm.tm_mday != check.tm_mday || tm.tm_mon != check.tm_mon ||
        tm.tm_hour != check.tm_hour || tm.tm_min != check.tm_min || tm.tm_sec != check.tm_sec)
        return false;
    *out = (int64_t)t;
    return true;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *input = NULL;
    int64_t now = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = cli_alias(argv[i]);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tmpl_usage(stdout);
            return 0;
        }
        bool valued = !strcmp(a, "-m") || !strcmp(a, "--template") || !strcmp(a, "--input") ||
                      !strcmp(a, "--now");
        if (!valued) {
            fprintf(stderr, "specula template: unknown option '%s'\n", a);
            tmpl_usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "specula template: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m")) {
            model = v;
        } else if (!strcmp(a, "--template")) {
            tfile = v;
        } else if (!strcmp(a, "--input")) {
            input = v;
        } else if (!parse_now(v, &now)) {
            fprintf(stderr, "specula template: --now wants YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS (UTC), not '%s'\n", v);
            return 2;
        }
    }
    if (!model && !tfile) {
        fprintf(stderr, "specula template: give a model (-m MODEL) or a template (--template FILE)\n");
        tmpl_usage(stderr);
        return 2;
    }
    if (!input) {
        fprintf(stderr, "specula template: give the request with --input FILE (\"-\": standard input)\n");
        return 2;
    }
    char err[1024];
    size_t len = 0, tlen = 0;
    char *tmpl = NULL, *req = NULL, *out = NULL;
    sp_model *m = NULL;
    int rc = 1;
    if (tfile) {
        tmpl = cli_read_file(tfile, &tlen);
        if (!tmpl) goto done;
        if (memchr(tmpl, 0, tlen)) {
            fprintf(stderr, "specula template: %s: the template holds a NUL byte\n", tfile);
            goto done;
        }
    }
    req = cli_read_file(input, &len);
    if (!req) goto done;
    if (model) {
        sp_model_params mp = sp_model_default_params();
        mp.meta_only = true; /* the metadata and, when there is one, the vocabulary */
        m = sp_model_load(model, mp, err, sizeof(err));
        if (!m) {
            fprintf(stderr, "specula template: %s\n", err);
            goto done;
        }
    }
    out = sp_chat_apply_template(m, tmpl, req, len, now, err, sizeof(err));
    if (!out) {
        /* name where the problem is: the request, or the template (its file,
         * or the model's metadata) */
        const char *where = !strncmp(err, "the request", 11) ? (strcmp(input, "-") ? input : "standard input")
                            : !strncmp(err, "line ", 5)      ? (tfile ? tfile : model)
                                                             : NULL;
        if (where && !tfile && where == model)
            fprintf(stderr, "specula template: %s (tokenizer.chat_template): %s\n", where, err);
        else if (where)
            fprintf(stderr, "specula template: %s: %s\n", where, err);
        else
            fprintf(stderr, "specula template: %s%s%s\n", model ? model : "", model ? ": " : "", err);
        goto done;
    }
    size_t n = strlen(out);
    if (fwrite(out, 1, n, stdout) != n || fflush(stdout) != 0) {
        fprintf(stderr, "specula template: cannot write the output\n");
        goto done;
    }
    rc = 0;
done:
    free(out);
    free(req);
    free(tmpl);
    if (m) sp_model_free(m);
    return rc;
}
