# Everything under bench/ (bench/README.md is the map):
#   make bench         bench/run.sh: decode and prefill (bin/bench,
#                      bench/model/), the serving engine and speculative
#                      decoding (bin/bench_engine, bin/bench_spec,
#                      bench/engine/), then the HTTP server (bench/server/)
#   make bench-server  bench/server/run.sh alone
#   make kbench        bin/kbench, the kernels' microbenchmark (bench/kernels/)
#   make tilebench     bin/tilebench, one tile shape in cache (bench/kernels/)
#   make floorbench    bin/floorbench, the AVX2 Q4_K tile against the floor
#                      of its instruction stream, and what that leaves of a
#                      5-token pass over a 1-token step (bench/kernels/)
#   make template-bench  bin/template_bench and bench/template/run.sh: a chat
#                      template's parse and render, per request and per turn
#   make bench-peers   bench/peers/run.sh: Specula beside ik_llama.cpp and
#                      llama.cpp (IK_BENCH, LLAMA_BENCH: their llama-bench)

# ---- bench/model, bench/engine: engine-core programs ----------------------
$(BIN)/bench: $(BUILD)/bench/model/bench.o $(BUILD)/bench/model/membw_avx2.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BIN)/bench_engine: $(BUILD)/bench/engine/bench_engine.o $(BUILD)/bench/engine/bench_util.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BIN)/bench_spec: $(BUILD)/bench/engine/bench_spec.o $(BUILD)/bench/engine/bench_util.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)

$(BIN)/bench_grammar: $(BUILD)/bench/engine/bench_grammar.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS) -lcjson

# ---- bench/template: a chat template's parse and render (not run by `make
# bench`): bench/template/run.sh over a 50-message conversation
$(BIN)/template_bench: $(BUILD)/bench/template/template_bench.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS) -lcjson
template-bench: $(BIN)/template_bench
	bench/template/run.sh

# ---- bench/kernels: the kernels' microbenchmark (not run by `make bench`) --
$(BIN)/kbench: $(BUILD)/bench/kernels/kbench.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)
kbench: $(BIN)/kbench
# one tile shape in cache, compute-bound: builds compared alternately
$(BIN)/tilebench: $(BUILD)/bench/kernels/tilebench.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)
tilebench: $(BIN)/tilebench
# the instruction floor (floor_avx2.c gets the AVX2 flags by its name)
$(BIN)/floorbench: $(BUILD)/bench/kernels/floorbench.o $(BUILD)/bench/kernels/floor_avx2.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS)
floorbench: $(BIN)/floorbench

# ---- bench/server: wrk against /v1/completions at 1, 8 and 32 connections,
# and the server's delivery overhead measured by bin/bench_server_stream
# against `serve --stamp-chunks`. Needs wrk (Debian package `wrk`) for the
# first part.
$(BIN)/bench_server_stream: bench/server/stream_client.c
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -lpthread

bench-server: $(BIN)/specula $(BIN)/bench_server_stream
	SPECULA_BIN=$(BIN)/specula BENCH_SERVER_CLIENT=$(BIN)/bench_server_stream bench/server/run.sh

# `make bench` runs bench/server/run.sh last (see bench/run.sh)
bench: $(BIN)/bench $(BIN)/bench_engine $(BIN)/bench_spec $(BIN)/bench_grammar $(BIN)/mkmodel \
       $(BIN)/specula $(BIN)/bench_server_stream
	bench/run.sh

# ---- bench/peers: Specula, ik_llama.cpp and llama.cpp in interleaved rounds
# on the same files (not run by `make bench`; the peers are built outside the
# tree, see bench/peers/README.md)
bench-peers: $(BIN)/bench $(BIN)/mkmodel
	bench/peers/run.sh

.PHONY: bench bench-server kbench tilebench floorbench bench-peers template-bench
