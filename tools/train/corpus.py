#!/usr/bin/python3
"""Build the training corpus from the Python 3.11 standard library.

    tools/train/corpus.py [--src /usr/lib/python3.11] [--out build/corpus]

Source: every *.py under SRC (Debian 12's /usr/lib/python3.11, PSF license),
skipping every directory named test, tests or idle_test (so test/,
lib2to3/tests/, idlelib/idle_test/, ...), site-packages, dist-packages and
__pycache__.  Files are read as bytes and must
decode as UTF-8 (the few that do not are skipped and listed on stderr).
Duplicates (same sha256 of the bytes) are kept once: the first in sorted path
order.  Order is deterministic: sorted by relative path (bytewise).

Held-out split (fixed, documented rule): the *top-level module* of a file is
its first path component with a trailing ".py" removed (`json/decoder.py` ->
`json`, `heapq.py` -> `heapq`).  A top-level module is held out iff the first
8 hex digits of sha256(module name, UTF-8) read as an integer are below
0.05 * 2**32, i.e. the lowest 5% of the hash space.  The rule depends only on
the name, so it does not shift when the set of installed files changes.

Outputs in OUT:
    train.txt            training split
    heldout.txt          held-out split
    heldout_modules.txt  held-out top-level modules, one per line, sorted
    files_train.txt / files_heldout.txt   the relative paths in each split

Each file is preceded by one marker line
    # ==== file: RELPATH ====
(a Python comment, so it tokenizes like ordinary code) and its text follows
byte-exact; no whitespace is normalized.  A file that does not end in "\n"
gets one "\n" appended so the next marker starts a line (counted on stderr).
"""
import argparse
import hashlib
import os
import sys

SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
HOLDOUT_FRACTION = 0.05
MARKER = "# ==== file: {} ====\n"


def module_of(rel):
    top = rel.split("/", 1)[0]
    return top[:-3] if top.endswith(".py") and "/" not in rel else top


def held_out(module):
    h = int(hashlib.sha256(module.encode("utf-8")).hexdigest()[:8], 16)
    return h < HOLDOUT_FRACTION * 2**32


def collect(src):
    out = []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for f in files:
            if f.endswith(".py"):
                out.append(os.path.relpath(os.path.join(root, f), src).replace(os.sep, "/"))
    return sorted(out, key=lambda p: p.encode("utf-8"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="/usr/lib/python3.11")
    ap.add_argument("--out", default="build/corpus")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    seen = set()
    split = {"train": [], "heldout": []}
    skipped, dups, nonl = [], 0, 0
    for rel in collect(a.src):
        if rel.startswith("lib2to3/tests/") or rel.startswith("idlelib/idle_test/"):
            continue  # already pruned by SKIP_DIRS; kept explicit for the record
        with open(os.path.join(a.src, rel), "rb") as fh:
            data = fh.read()
        digest = hashlib.sha256(data).digest()
        if digest in seen:
            dups += 1
            continue
        seen.add(digest)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(rel)
            continue
        if not text:
            continue
        if not text.endswith("\n"):
            text += "\n"
            nonl += 1
        split["heldout" if held_out(module_of(rel)) else "train"].append((rel, text))
    for name, files in split.items():
        with open(os.path.join(a.out, name + ".txt"), "w", encoding="utf-8", newline="") as fh:
            for rel, text in files:
                fh.write(MARKER.format(rel))
                fh.write(text)
        with open(os.path.join(a.out, "files_%s.txt" % name), "w", encoding="utf-8") as fh:
            fh.writelines(rel + "\n" for rel, _ in files)
    mods = sorted({module_of(r) for r, _ in split["heldout"]})
    allmods = {module_of(r) for s in split.values() for r, _ in s}
    with open(os.path.join(a.out, "heldout_modules.txt"), "w", encoding="utf-8") as fh:
        fh.writelines(m + "\n" for m in mods)
    nb = {k: sum(len(t.encode("utf-8")) for _, t in v) for k, v in split.items()}
    print("modules: %d total, %d held out (%s)" % (len(allmods), len(mods), " ".join(mods)), file=sys.stderr)
    print("files: train %d (%d bytes), heldout %d (%d bytes); %d duplicates, %d non-UTF-8 skipped %s, "
          "%d without final newline" % (len(split["train"]), nb["train"], len(split["heldout"]),
                                        nb["heldout"], dups, len(skipped), skipped, nonl), file=sys.stderr)


if __name__ == "__main__":
    main()
