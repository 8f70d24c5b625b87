/* main.c: `specula` entry point and subcommand dispatch. Only this front
 * end prints usage and exits; the library reports errors as values. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common.h"
#include "loadgen/loadgen.h"

/* The bundled pair is found beside the binary (bin/../models) or under the
 * working directory; SPECULA_MODEL overrides both. */
static const char *find_model(const char *env, const char *file, const char *fallback) {
    static char buf[2][4096];
    static int which;
    const char *e = getenv(env);
    if (e && *e) return e;
    char *b = buf[which++ & 1];
    char exe[4000];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(b, sizeof(buf[0]), "%s/../models/%s", exe, file);
            if (access(b, R_OK) == 0) return b;
        }
    }
    snprintf(b, sizeof(buf[0]), "models/%s", file);
    if (access(b, R_OK) == 0) return b;
    if (fallback && access(fallback, R_OK) == 0) return fallback;
    return NULL;
}

const char *cli_default_model(void) {
    return find_model("SPECULA_MODEL", CLI_DEFAULT_TARGET,
                      "../shared/reference/models/ref-llama-spm-q8_0.gguf");
}

const char *cli_default_draft(void) {
    return find_model("SPECULA_DRAFT_MODEL", CLI_DEFAULT_DRAFT, NULL);
}

char *cli_read_file(const char *path, size_t *len) {
    const bool std_in = !strcmp(path, "-"); /* "-f -": the prompt from a pipe */
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "specula: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    if (!std_in) fclose(f);
    if (!buf || bad) {
        fprintf(stderr, "specula: cannot read %s\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

void cli_json_str(FILE *f, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '\r') {
            fputs("\\r", f);
        } else if (c == '\t') {
            fputs("\\t", f);
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
        } else if (c >= 0x80) {
            int l = utf8_len(u + i, n - i);
            if (l == 0) {
                fputs("\xef\xbf\xbd", f); /* U+FFFD */
                i++;
                continue;
            }
            fwrite(u + i, 1, (size_t)l, f);
            i += (size_t)l;
            continue;
        } else {
            fputc((int)c, f);
        }
        i++;
    }
    fputc('"', f);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: specula <command> [options]\n"
            "\n"
            "commands:\n"
            "  run       generate text from a prompt (streams it; --json for details)\n"
            "  batch     run the requests of a JSONL file through one engine\n"
            "  tokenize  print the token ids of a text as a JSON array\n"
            "  template  render a chat request with a model's Jinja chat template\n"
            "  info      describe a model file\n"
            "  serve     OpenAI-compatible HTTP server\n"
            "  bench     serving benchmark against OpenAI-compatible servers\n"
            "\n"
            "`specula <command> --help` lists a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "batch")) return cmd_batch(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return bench_main(argc - 1, argv + 1, &(bench_defaults){cli_default_model(), cli_default_draft()});
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("specula %s\n", SPECULA_VERSION);
        return 0;
    }
    fprintf(stderr, "specula: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
