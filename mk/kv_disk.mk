# The disk tier's store comparison (bench/kv_disk/): SQLite as the tier
# uses it against LMDB (liblmdb-dev, deps.txt [bench]).
$(BIN)/kv_disk_stores: $(BUILD)/bench/kv_disk/stores.o $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS) $(LDLIBS) -llmdb
