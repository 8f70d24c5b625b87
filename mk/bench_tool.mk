# `specula bench` (src/cli/bench_*.c, cmd_bench.c): the serving benchmark.
# It speaks HTTP through libcurl, so bin/specula links it; the commit the
# binary was built from goes into the reproducibility contract.

$(BIN)/specula: LDLIBS += -lcurl

BENCH_GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
$(BUILD)/src/cli/bench_contract.o: override CFLAGS += -DBENCH_GIT_COMMIT='"$(BENCH_GIT_COMMIT)"'

# The harness's unit tests link the pieces that need no network.
BENCH_TOOL_TEST_OBJ := $(BUILD)/src/cli/bench_sse.o $(BUILD)/src/cli/bench_stats.o \
                       $(BUILD)/src/cli/bench_workload.o $(BUILD)/src/cli/bench_report.o \
                       $(BUILD)/src/cli/bench_loadgen.o $(BUILD)/src/cli/bench_cluster.o
$(BUILD)/tests/test_bench_tool: tests/test_bench_tool.c tests/test.h $(BENCH_TOOL_TEST_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(BENCH_TOOL_TEST_OBJ) $(LIB) -o $@ $(LDFLAGS) $(LDLIBS) -lcjson -lcurl
