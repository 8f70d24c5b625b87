/* mode.c: the names of the speculative methods (public API), apart from the
 * engine so that request parsing can use them without linking it. */
#include <string.h>

#include "specula.h"

const char *sp_spec_mode_str(sp_spec_mode m) {
    switch (m) {
    case SP_SPEC_OFF: return "off";
    case SP_SPEC_NGRAM: return "ngram";
    case SP_SPEC_SUFFIX: return "suffix";
    case SP_SPEC_DRAFT: return "draft";
    case SP_SPEC_AUTO: return "auto";
    default: return "default";
    }
}

int sp_spec_mode_parse(const char *s) {
    static const char *names[] = {"off", "ngram", "suffix", "draft", "auto"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) return i;
    return -2;
}
