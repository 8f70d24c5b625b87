/* cli.h: shared pieces of the command-line front end. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "specula.h"

/* The bundled default pair (models/, see models/README.md). */
#define CLI_DEFAULT_TARGET "specula-code-target-f16.gguf"
#define CLI_DEFAULT_DRAFT "specula-code-draft-f16.gguf"
/* The model used when -m is not given: $SPECULA_MODEL, else the bundled
 * target beside the binary or under ./models, else a reference model beside
 * the checkout. NULL if none exists. */
const char *cli_default_model(void);
/* The bundled draft ($SPECULA_DRAFT_MODEL overrides), or NULL. */
const char *cli_default_draft(void);
/* Reads a whole file byte for byte ("-": standard input); NULL with a
 * message on stderr. */
char *cli_read_file(const char *path, size_t *len);
/* Writes s[n] as a JSON string literal (escaped; invalid UTF-8 bytes become
 * U+FFFD so the output is always valid JSON). */
void cli_json_str(FILE *f, const char *s, size_t n);

/* Engine options shared by run and batch (usage text in cli_engine_usage).
 * Returns how many arguments a/v consumed (1 or 2), 0 if a is not an
 * engine option, -1 after printing an error. */
extern const char *cli_engine_usage;
typedef struct {
    sp_engine_params p;
    const char *model; /* the target's path (the command sets it before cli_engine_open) */
    const char *draft_path;
    sp_model *draft;   /* loaded by cli_engine_open */
    bool spec_set;     /* --spec was given (else --draft turns draft speculation on) */
    bool draft_default;/* the draft is the bundled default, not the user's choice */
} cli_engine;
/* The canonical spelling of an option that other engines spell otherwise
 * (--model, --ctx-size, --max-model-len, --threads, -np, --max-num-seqs, -md,
 * --model-draft, --draft-max) for run, batch and serve; a itself when it
 * is not an alias. */
const char *cli_alias(const char *a);
int cli_engine_opt(const char *cmd, const char *a, const char *v, cli_engine *ce);
/* The commands' engine settings before their options: the library's
 * defaults, with speculation auto (the library's default is off). */
cli_engine cli_engine_default(void);
/* Loads the draft model when one is needed or given; -1 after a message. */
int cli_engine_open(cli_engine *ce);
void cli_engine_close(cli_engine *ce);
/* Prints why sp_engine_create failed (err), and, when the draft was the
 * bundled default, which draft that was and how to choose another. 1. */
int cli_engine_create_failed(const cli_engine *ce, const char *cmd, const char *err);
/* Warns on stderr when n_ctx goes past what the model was trained on. */
void cli_warn_ctx(const char *cmd, const sp_model *m, int32_t n_ctx);
/* Writes "spec": {...} (steps, drafted, accepted, acceptance_rate,
 * mean_acceptance_length, accepted_per_position) for a request. */
void cli_print_spec(FILE *f, const sp_request_stats *st);

int cmd_run(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
