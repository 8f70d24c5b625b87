/* schema.c: JSON Schema -> GBNF. */
#include <stdlib.h>
#include "common.h"
#include "specula.h"
char *sp_json_schema_to_gbnf(const char *s, size_t len, char *err, size_t errlen) {
    sp_seterr(err, errlen, "todo");
    return NULL;
}
const char *sp_json_object_gbnf(void) { return ""; }
