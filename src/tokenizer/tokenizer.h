/* tokenizer.h: the library-internal side of the tokenizer: building a
 * vocabulary from an open GGUF file, and freeing it. Everything else about
 * the tokenizer (encoding, decoding, queries, token types, the failure
 * value) is declared once, with its contract, in include/specula.h; the
 * server and the CLI use only that header and reach a vocabulary through
 * sp_model_load (vocab_only for tokenizing alone).
 */
#ifndef SP_TOKENIZER_H
#define SP_TOKENIZER_H

#include <stddef.h>

#include "specula.h"

#include "gguf/gguf.h"

/* Builds the vocabulary from g's tokenizer.* metadata (the architecture is
 * not consulted). The vocabulary copies what it needs: it does not
 * reference g after returning. NULL + err on a missing or invalid tokenizer,
 * or a tokenizer type (tokenizer.ggml.model) or pre-tokenizer
 * (tokenizer.ggml.pre) this build does not implement: the message names it
 * ("unsupported tokenizer model 'X'", "unknown pre-tokenizer type 'X'"). */
sp_vocab *vocab_load(const gguf_file *g, char *err, size_t errlen);
void vocab_free(sp_vocab *v);

#endif
