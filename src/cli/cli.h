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
/* Reads a whole file byte for byte; NULL with a message on stderr. */
char *cli_read_file(const char *path, size_t *len);
/* Writes s[n] as a JSON string literal (escaped; invalid UTF-8 bytes become
 * U+FFFD so the output is always valid JSON). */
void cli_json_str(FILE *f, const char *s, size_t n);
/* Parses an integer / float option value; false on garbage or out of range. */
bool cli_int(const char *s, long lo, long hi, long *out);
bool cli_float(const char *s, double *out);

/* Engine options shared by run and batch (usage text in cli_engine_usage).
 * Returns how many arguments a/v consumed (1 or 2), 0 if a is not an
 * engine option, -1 after printing an error. */
extern const char *cli_engine_usage;
typedef struct {
    sp_engine_params p;
    const char *draft_path;
    sp_model *draft;   /* loaded by cli_engine_open */
} cli_engine;
int cli_engine_opt(const char *cmd, const char *a, const char *v, cli_engine *ce);
/* Loads the draft model when one is needed or given; -1 after a message. */
int cli_engine_open(cli_engine *ce);
void cli_engine_close(cli_engine *ce);
/* Writes "spec": {...} (steps, drafted, accepted, acceptance_rate,
 * mean_acceptance_length, accepted_per_position) for a request. */
void cli_print_spec(FILE *f, const sp_request_stats *st);

int cmd_run(int argc, char **argv);
int cmd_batch(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
