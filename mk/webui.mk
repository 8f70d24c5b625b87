# The web page and dashboard (src/server/webui.c) embed src/server/webui/*
# with .incbin, which the compiler's dependency files do not see: the object
# is rebuilt when any asset changes.
WEBUI_ASSETS := $(wildcard src/server/webui/*)
$(BUILD)/src/server/webui.o: $(WEBUI_ASSETS)
