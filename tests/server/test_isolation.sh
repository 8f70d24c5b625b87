#!/usr/bin/env bash
# test_isolation.sh: prefix-cache isolation between tenants (tests/server/isolation.py):
# with different cache salts, and with different API keys under the same
# salt, tenant A's warm ~400-token prefix gives tenant B no cached tokens and
# no TTFT advantage (medians of 5-10 samples, generous margins), while A's own
# repeats hit and are clearly faster. Then what speculation learns: tenant B
# probing tenant A's prompt plus half its output with suffix speculation
# drafts and accepts exactly what it does on a server where A never sent it
# (6 rounds), while A's own probe drafts from A's output.
# Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"
dir=${SPECULA_TESTS_DIR:-tests/server}
run_driver isolation.py 240 /usr/bin/python3 "$dir/isolation.py"
