#!/usr/bin/env bash
# test_repo.sh: the repository keeps the shape its contributors rely on.
#   - no development history (issue numbers, review findings) in
#     the user docs, the contributor docs, the sources, the tests, the
#     benchmarks and the build: that lives in git history;
#   - README.md stays a short user's page and BENCHMARKS.md current results;
#   - every relative link in the Markdown docs resolves;
#   - the folders of src/ depend on each other without a circle;
#   - sp_ names only the public API (include/specula.h): an internal
#     function carries its module's prefix;
#   - no source file under src/ grows past 1,000 lines.
# Runs from the repository root. Prints "RESULT <passed> <failed>".
. "${SPECULA_TESTS_LIB:-tests/lib}/lib.sh"

if [ ! -f include/specula.h ] || [ ! -d src ]; then
    fail "repository" "run from the repository root"
    finish
fi

# ---- no development history ------------------------------------------------
# The word issue or issues followed by a number (with or without "#"),
# except the verb followed by "per" (an instruction that issues N per
# cycle), or the word finding followed by a number.
history_re='\b[Ii]ssues? #?[0-9]+\b(?! per\b)|\b[Ff]inding [0-9]+\b'
files_of() { # git-tracked files under the given paths, this test excluded
    git ls-files -- "$@" 2>/dev/null | grep -v -e '^tests/repo/test_repo.sh$' -e node_modules/ || true
}
check_history() { # NAME PATH...
    local name=$1 hits
    shift
    hits=$(files_of "$@" | while read -r f; do
        [ -f "$f" ] && grep -HnP "$history_re" "$f" 2>/dev/null
    done | head -n 5)
    if [ -z "$hits" ]; then ok "no_history[$name]"; else fail "no_history[$name]" "$hits"; fi
}
if git rev-parse --git-dir >/dev/null 2>&1; then
    check_history user_docs README.md SECURITY.md 'docs/*.md' models/README.md
    check_history contributor_docs ARCHITECTURE.md BENCHMARKS.md tests/README.md \
        bench/README.md mk/README tests/fuzz/README.md 'bench/*README*' 'tools/*README*'
    check_history sources src include
    check_history tests tests
    check_history bench_tools bench tools
    check_history build Makefile mk .ci deploy setup.sh deps.txt
else
    for n in user_docs contributor_docs sources tests bench_tools build; do
        skip "no_history[$n]" "not a git checkout"
    done
fi

# ---- short pages --------------------------------------------------------------
lines_at_most() { # NAME FILE MAX
    local n
    n=$(wc -l <"$2")
    if [ "$n" -le "$3" ]; then ok "$1"; else fail "$1" "$2 has $n lines (at most $3)"; fi
}
lines_at_most readme_short README.md 400
lines_at_most benchmarks_short BENCHMARKS.md 600

# ---- links, layers, names, sizes (Python: standard library only) -----------
/usr/bin/python3 - >"$tmp/py.out" 2>&1 <<'PY'
import glob, os, re, sys

def report(name, problems):
    if problems:
        print("FAIL %s: %s" % (name, "; ".join(problems[:5])))
    else:
        print("ok   %s" % name)

# every relative link of the Markdown docs resolves
docs = ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md", "SECURITY.md"] + sorted(glob.glob("docs/*.md"))
bad = []
for d in docs:
    if not os.path.exists(d):
        bad.append("%s is missing" % d)
        continue
    text = re.sub(r"```.*?```", "", open(d, encoding="utf-8").read(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(d), target.split("#")[0]))
        if not os.path.exists(path):
            bad.append("%s links to %s" % (d, target))
report("doc_links_resolve", bad)

# the folders of src/ include each other without a circle
inc = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/[^"]+"', re.M)
edges = {}
for f in glob.glob("src/*/*.[ch]"):
    a = f.split("/")[1]
    for b in inc.findall(open(f, encoding="utf-8", errors="replace").read()):
        if b != a and os.path.isdir("src/" + b):
            edges.setdefault(a, set()).add(b)
cycles, state = [], {}
def visit(n, path):
    state[n] = 1
    for m in sorted(edges.get(n, ())):
        if state.get(m) == 1:
            cycles.append(" -> ".join(path[path.index(m):] + [m]) if m in path else n + " -> " + m)
        elif not state.get(m):
            visit(m, path + [m])
    state[n] = 2
for n in sorted(edges):
    if not state.get(n):
        visit(n, [n])
report("layers_acyclic", cycles)

# sp_ is the public API's prefix only
public = set(re.findall(r"\b(sp_[a-z0-9_]+)\b", open("include/specula.h").read()))
defined = set()
for f in glob.glob("src/**/*.[ch]", recursive=True):
    text = open(f, encoding="utf-8", errors="replace").read()
    defined |= set(re.findall(r"^[A-Za-z_][\w \*]*?\b(sp_[a-z0-9_]+)\s*\(", text, re.M))
    defined |= set(re.findall(r"\}\s*(sp_[a-z0-9_]+)\s*;", text))
report("sp_prefix_public_only", sorted("%s is not in specula.h" % n for n in defined - public))

# no source file past 1,000 lines
big = []
for f in sorted(glob.glob("src/**/*.[ch]", recursive=True)):
    n = sum(1 for _ in open(f, encoding="utf-8", errors="replace"))
    if n > 1000:
        big.append("%s: %d lines" % (f, n))
report("source_files_under_1000_lines", big)
PY
cat "$tmp/py.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/py.out")))
failed=$((failed + $(grep -c '^FAIL ' "$tmp/py.out")))
[ "$(grep -cE '^(ok |FAIL )' "$tmp/py.out")" -eq 4 ] || fail "repo_checks_ran" "$(tail -n 5 "$tmp/py.out")"
finish
