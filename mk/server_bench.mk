# The HTTP server benchmark (bench/server/run.sh): wrk against
# /v1/completions at 1, 8 and 32 connections, and the server's delivery
# overhead measured by bin/bench_server_stream against `serve --stamp-chunks`.
# Needs wrk (Debian package `wrk`) for the first part.

$(BIN)/bench_server_stream: bench/server/stream_client.c
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -lpthread

bench-server: $(BIN)/specula $(BIN)/bench_server_stream
	SPECULA_BIN=$(BIN)/specula BENCH_SERVER_CLIENT=$(BIN)/bench_server_stream bench/server/run.sh

.PHONY: bench-server

# `make bench` runs bench/server/run.sh last (see bench/run.sh)
bench: $(BIN)/specula $(BIN)/bench_server_stream
