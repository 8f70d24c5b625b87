# The soak test: `make soak` runs tests/soak/soak.py against
# bin/specula for SOAK_SECONDS (default 300) with SOAK_CLIENTS streaming
# clients; `make soak-asan` runs a shorter one against the ASan+UBSan build
# (make asan's flags), whose LeakSanitizer report at the server's SIGTERM
# exit fails it. Its RSS bound adds ASan's quarantine (soak.py caps it).
SOAK_SECONDS ?= 300
SOAK_CLIENTS ?= 16
SOAK_ASAN_SECONDS ?= 60

soak: $(BIN)/specula
	/usr/bin/python3 tests/soak/soak.py --bin $(BIN)/specula --seconds $(SOAK_SECONDS) \
	  --clients $(SOAK_CLIENTS)

soak-asan:
	$(MAKE) $(ASAN_VARS) build-asan/bin/specula
	ASAN_OPTIONS=detect_leaks=1 /usr/bin/python3 tests/soak/soak.py --bin build-asan/bin/specula \
	  --seconds $(SOAK_ASAN_SECONDS) --clients 8

.PHONY: soak soak-asan

# The server under ThreadSanitizer: the HTTP threads, the engine thread and
# its callbacks, cancellation from disconnects, all at once.
SOAK_TSAN_SECONDS ?= 30
soak-tsan:
	$(MAKE) $(TSAN_VARS) build-tsan/bin/specula
	TSAN_OPTIONS=halt_on_error=1 /usr/bin/python3 tests/soak/soak.py --bin build-tsan/bin/specula \
	  --seconds $(SOAK_TSAN_SECONDS) --clients 8 --verify 8 --rss-growth-mb 256

.PHONY: soak-tsan
