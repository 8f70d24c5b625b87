# Specula build. `make` builds bin/specula, bin/mkmodel and the static
# library; `make test` builds and runs every test; `make asan` runs the same
# tests under AddressSanitizer + UBSan; `make bench` runs the benchmarks.

CC      ?= cc
BUILD   ?= build
BIN     ?= bin
OPT     ?= -O2
SAN     ?=
CFLAGS  ?=
override CFLAGS += -std=c11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE \
           -fno-math-errno -Iinclude -Isrc $(SAN)
override LDFLAGS += $(SAN)
LDLIBS  += -lpcre2-8 -lcrypto -lsqlite3 -lpthread -lm
# SIMD variants: files named *_avx2.c / *_avx512.c get their ISA flags; all
# other code is built for baseline x86-64 and dispatches at run time.
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
# added to the SIMD files only (make asan sets it; see there)
SIMD_SAN ?=
# added to the kernel files only, every level (make tsan sets it; see there)
KERNELS_SAN ?=
$(patsubst %.c,$(BUILD)/%.o,src/kernels/kernels_ref.c $(wildcard src/kernels/*_avx2.c src/kernels/*_avx512.c)): override CFLAGS += $(KERNELS_SAN)

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/loadgen/*' | sort)
CLI_SRC  := $(wildcard src/cli/*.c src/loadgen/*.c)
# Tests live in tests/<kind>/ (tests/README.md); each builds to
# $(BUILD)/tests/<name>, one flat folder that tests/run.sh runs. A test_*.c or
# test_*.sh file in any tests/ subfolder (or tests/ itself) is found here.
TEST_DIRS := tests/ $(sort $(dir $(wildcard tests/*/test_*.c tests/*/test_*.sh)))
TEST_SRC := $(foreach d,$(TEST_DIRS),$(wildcard $(d)test_*.c))
TEST_SH  := $(foreach d,$(TEST_DIRS),$(wildcard $(d)test_*.sh))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libspecula.a
TESTS    := $(addprefix $(BUILD)/tests/,$(basename $(notdir $(TEST_SRC))))

all: $(BIN)/specula $(BIN)/mkmodel

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) $(SIMD_SAN) -MMD -MP -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) $(SIMD_SAN) -MMD -MP -c $< -o $@
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN)/specula: $(CLI_OBJ) $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS) -lcjson -lmicrohttpd

# src/loadgen/ (`specula bench`) speaks HTTP through libcurl, so bin/specula
# links it; the commit the binary was built from goes into the
# reproducibility contract.
$(BIN)/specula: LDLIBS += -lcurl

BENCH_GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
$(BUILD)/src/loadgen/contract.o: override CFLAGS += -DBENCH_GIT_COMMIT='"$(BENCH_GIT_COMMIT)"'

# The load generator's unit tests (test_bench_tool) link the pieces that
# need no network.
BENCH_TOOL_TEST_OBJ := $(patsubst %,$(BUILD)/src/loadgen/%.o,sse stats workload result report plot loadgen cluster)
$(BUILD)/tests/test_bench_tool: $(BENCH_TOOL_TEST_OBJ)
$(BUILD)/tests/test_bench_tool: TEST_OBJ = $(BENCH_TOOL_TEST_OBJ)
$(BUILD)/tests/test_bench_tool: TEST_LDLIBS = -lcurl

$(BIN)/mkmodel: $(BUILD)/tools/mkmodel.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

# One rule per tests/ folder: C tests see tests/lib/ (test.h) and their own
# folder; TEST_CFLAGS / TEST_LDLIBS add to one test (target-specific, as
# mk/bench.mk does for test_bench_tool). Shell tests are copied.
define test_rules
$$(BUILD)/tests/%: $(1)%.c $$(wildcard tests/lib/*.h $(1)*.h) $$(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) -Itests/lib -I$(1) $$(TEST_CFLAGS) $$< $$(TEST_OBJ) $$(LIB) -o $$@ $$(LDFLAGS) $$(LDLIBS) -lcjson $$(TEST_LDLIBS)
$$(BUILD)/tests/%.sh: $(1)%.sh
	@mkdir -p $$(dir $$@)
	cp $$< $$@
endef
$(foreach d,$(TEST_DIRS),$(eval $(call test_rules,$(d))))

tests: $(TESTS) $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SH))) $(BIN)/specula $(BIN)/mkmodel

# `make test` first runs ./setup.sh build test, which installs what the build
# and the tests need when something is missing (deps.txt; apt-get, npm ci in
# tests/node) and changes nothing otherwise; then it builds and runs them.
test:
	./setup.sh build test
	$(MAKE) --no-print-directory tests
	SPECULA_BIN=$(BIN)/specula SPECULA_MKMODEL=$(BIN)/mkmodel tests/run.sh $(BUILD)/tests

# Sanitizer build: separate objects and binaries, same tests, except three
# whose time goes to something other than our C code: the cluster test
# (HAProxy in front of three replicas: 15 minutes under ASan, and the server
# code it runs is what test_server and the others cover), the soak test
# (make soak-asan runs the same soak.py against this build, longer) and
# test_train.sh (PyTorch training; the F32 and F16 models it exports load
# and run under ASan in test_reference_trained and test_independent.sh).
# The SIMD files (kernels, attention) keep arrays of vector accumulators:
# use-after-scope instrumentation sends them through memory, poisoned and
# unpoisoned every iteration, which made the F16 matmul some 20x slower than
# its own bounds checks do; those files are built without it (every load
# and store is still checked). -O2: the optimized code is what ships.
# Measured on test_seeded (load ~4 on 2 cores): -O1 365 s, -O2 205 s, -O2
# without use-after-scope 52 s; without sanitizers 13 s.
# The same variables build build-asan/ wherever it is built (soak-asan,
# mk/soak.mk): make does not track flags, so a second set would mix objects.
ASAN_EXCLUDE = test_cluster.sh test_soak.sh test_train.sh
ASAN_VARS = BUILD=build-asan BIN=build-asan/bin OPT=-O2 SIMD_SAN=-fno-sanitize-address-use-after-scope \
  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
asan:
	SPECULA_TIMEOUT_SCALE=$${SPECULA_TIMEOUT_SCALE:-3} SPECULA_TEST_EXCLUDE="$(ASAN_EXCLUDE)" \
	  $(MAKE) $(ASAN_VARS) test

# ThreadSanitizer build of the multithreaded code (thread pool, matmul, the
# forward pass, the engine thread and its callers, the KV pool it drives);
# the single-threaded tests gain nothing from it. -O2, as make asan.
# The kernel files (kernels_ref.c, src/kernels/*_avx2.c, *_avx512.c) are
# built without TSan's instrumentation. A kernel only reads its inputs and
# writes what its caller handed it, and the callers (matmul.c, dispatch.c,
# instrumented) declare those ranges to TSan around every call
# (src/kernels/tsan.h), so a race between chunks, between the conversion
# and the tiles, or on a KV row is still caught, at every level.
# Instrumented, the scalar loops were 225 of test_forward's 260 s, and the
# SIMD ones (each 32-byte load a range check) took test_spec_engine past
# 2,400 s on a Zen 3; 161-196 s now.
# The same variables build build-tsan/ wherever it is built (soak-tsan).
TSAN_TESTS = test_kernels test_forward test_engine test_kv test_spec_engine
TSAN_VARS = BUILD=build-tsan BIN=build-tsan/bin OPT=-O2 SAN="-fsanitize=thread" KERNELS_SAN=-fno-sanitize=thread
tsan:
	$(MAKE) $(TSAN_VARS) $(TSAN_TESTS:%=build-tsan/tests/%)
	rm -rf build-tsan/run && mkdir -p build-tsan/run && \
	  for t in $(TSAN_TESTS); do ln -s ../tests/$$t build-tsan/run/$$t; done
	TSAN_OPTIONS=halt_on_error=1 SPECULA_TEST_SUBSET=1 SPECULA_TIMEOUT_SCALE=$${SPECULA_TIMEOUT_SCALE:-4} \
	  tests/run.sh build-tsan/run

# Re-creates the bundled model pair (about two hours; not part of CI).
models: $(BIN)/specula
	./setup.sh train
	tools/train/make_models.sh

clean:
	rm -rf build build-asan build-tsan bin

.PHONY: all test tests asan tsan models clean
.SECONDARY:
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)

# Per-concern rules (the benchmarks, fuzzing, the soak test, ...) live in
# mk/*.mk beside this file.
-include $(sort $(wildcard mk/*.mk))
