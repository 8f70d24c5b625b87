/* cli.h: shared pieces of the command-line front end. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "specula.h"

/* The model used when -m is not given: the bundled default if present,
 * else a reference model beside the checkout. */
const char *cli_default_model(void);
/* Reads a whole file byte for byte; NULL with a message on stderr. */
char *cli_read_file(const char *path, size_t *len);
/* Writes s[n] as a JSON string literal (escaped; invalid UTF-8 bytes become
 * U+FFFD so the output is always valid JSON). */
void cli_json_str(FILE *f, const char *s, size_t n);
/* Parses an integer / float option value; false on garbage or out of range. */
bool cli_int(const char *s, long lo, long hi, long *out);
bool cli_float(const char *s, double *out);

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);

#endif
