# Fuzzing (libFuzzer, clang, AddressSanitizer + UBSan): the GGUF reader and
# vocabulary loader, the tokenizer (encode/decode, SPM and BPE), OpenAI
# request parsing and validation (+ /tokenize, /detokenize bodies), chat
# templates, JSON/SSE output of untrusted text, and the disk tier's store
# reader (--kv-disk) on any file. Sources, seed corpora
# and found crashes live in tests/fuzz/ (see tests/fuzz/README.md).
#
#   make fuzz                  each target for FUZZ_TIME seconds (default 60)
#   make fuzz-ci               each target for FUZZ_CI_TIME seconds (default 10)
#   make fuzz-build            just the binaries (build-fuzz/fuzz_*)
#   make fuzz-gguf FUZZ_TIME=600   one target
#
# New inputs go to build-fuzz/corpus/<target>/ (the committed seeds in
# tests/fuzz/corpus/ are only read); crashes to build-fuzz/crashes/<target>/.
# A crash, once fixed, goes into tests/fuzz/regress/<target>/, which
# `make test` replays (tests/fuzz/test_fuzz_regress.c) with the seeds.
# The vocabularies come from $SPECULA_REF_DIR (default ../shared/reference).

FUZZ_CC       ?= clang-14
FUZZ_BUILD    ?= build-fuzz
FUZZ_TIME     ?= 60
FUZZ_CI_TIME  ?= 10
FUZZ_TARGETS  := gguf tokenizer request chat sse grammar grammar_cost kvstore jinja
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# Largest input per target: GGUF seeds are up to 64 KB; text inputs beyond
# a few KB only make each run slower.
FUZZ_MAX_LEN_gguf      = 65536
FUZZ_MAX_LEN_tokenizer = 4096
FUZZ_MAX_LEN_request   = 8192
FUZZ_MAX_LEN_chat      = 4096
FUZZ_MAX_LEN_sse       = 4096
FUZZ_MAX_LEN_grammar   = 4096
# hostile grammars and patterns are a few KB (the cost target hunts them)
FUZZ_MAX_LEN_grammar_cost = 8192
FUZZ_MAX_LEN_kvstore   = 16384
FUZZ_MAX_LEN_jinja     = 4096
FUZZ_FLAGS    ?= -timeout=20 -rss_limit_mb=2048 -print_final_stats=1
FUZZ_ENV      := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The part of the library the targets reach, built into its own tree
# instrumented for coverage and the sanitizers. Not the whole library: the
# kernels do not build with clang 14 (dispatch.c asks __builtin_cpu_supports
# about "f16c", matmul.c passes a non-constant locality to
# __builtin_prefetch), and no target runs them. openai.c's one call outside
# these (sp_spec_mode_parse) is in src/speculate/mode.c.
FUZZ_LIB_SRC  := src/common.c src/gguf/gguf.c src/gguf/gguf_write.c src/kernels/types.c \
                 $(wildcard src/tokenizer/*.c) src/server/openai.c src/server/openai_reply.c \
                 src/server/openai_prompt.c src/server/openai_tools.c \
                 src/chat/chat.c src/chat/chat_tokenize.c src/chat/template.c src/chat/builtin.c \
                 src/engine/status.c src/sbuf.c src/sample/sampler.c src/speculate/mode.c \
                 $(wildcard src/grammar/*.c) src/kv/disk_tier.c src/kv/disk_fs.c src/kv/disk_hash.c \
                 src/kv/kv_paged.c $(wildcard src/template/*.c)
FUZZ_LIB_OBJ  := $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_CFLAGS   := -std=c11 -O1 -g -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE \
                 -fno-math-errno -Iinclude -Isrc $(FUZZ_SAN)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/libspecula_fuzz.a: $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_BUILD)/libspecula_fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_BUILD)/libspecula_fuzz.a -o $@ \
	  -lpcre2-8 -lcrypto -lsqlite3 -lpthread -lm -lcjson

-include $(FUZZ_LIB_OBJ:.o=.d)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

# fuzz-<target>: one target for FUZZ_TIME seconds.
$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/crashes/$*
	$(FUZZ_ENV) $(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_TIME) -max_len=$(FUZZ_MAX_LEN_$*) \
	  $(FUZZ_FLAGS) -artifact_prefix=$(FUZZ_BUILD)/crashes/$*/ \
	  $(if $(wildcard tests/fuzz/$*.dict),-dict=tests/fuzz/$*.dict) \
	  $(FUZZ_BUILD)/corpus/$* tests/fuzz/corpus/$* $(wildcard tests/fuzz/regress/$*)

# Every target in turn; the run fails if any target found something (the
# others still run).
fuzz: fuzz-build
	@fail=; for t in $(FUZZ_TARGETS); do \
	  $(MAKE) --no-print-directory fuzz-$$t FUZZ_TIME=$(FUZZ_TIME) || fail="$$fail $$t"; \
	done; \
	if [ -n "$$fail" ]; then echo "fuzz: failures in:$$fail (inputs in $(FUZZ_BUILD)/crashes/)"; exit 1; fi; \
	echo "fuzz: no failures"

fuzz-ci:
	$(MAKE) --no-print-directory fuzz FUZZ_TIME=$(FUZZ_CI_TIME)

# The regression replay (a normal test) includes the fuzz sources.
$(BUILD)/tests/test_fuzz_regress: $(wildcard tests/fuzz/*.c tests/fuzz/*.h)

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

.PHONY: fuzz fuzz-ci fuzz-build fuzz-clean $(FUZZ_TARGETS:%=fuzz-%)
