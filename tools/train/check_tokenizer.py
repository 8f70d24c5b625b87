#!/usr/bin/python3
"""Check that the engine's tokenizer agrees with SentencePiece on our vocabulary.

    tools/train/check_tokenizer.py [--model build/tok/spm.model]
        [--vocab build/tok/vocab.gguf] [--corpus build/corpus] [--every 5]
        [--detok PATH]

For every held-out file, every N-th training file and a set of edge cases
(leading/trailing/only spaces, tabs, form feeds, CRLF, rare and astral
characters, control-token text), compares
  * `specula tokenize -m VOCAB --no-bos --no-parse-special -f FILE` with
    SentencePiece's encode(text) (and, without --no-bos, with [bos] + that),
  * SentencePiece's decode(engine ids) with the text (round trip),
  * optionally the engine's own detokenization (a helper that prints the
    concatenated sp_token_to_piece() of ids read from stdin) with the text.
Prints the agreement rate and the first difference of each mismatch.
Exit status 1 on any mismatch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import sentencepiece as spm

MARK = "# ==== file: "

EDGE = {
    "empty": "",
    "one_space": " ",
    "spaces_only": "        ",
    "leading_space": " x = 1\n",
    "leading_spaces": "    return x\n",
    "trailing_spaces": "x = 1   \n",
    "tabs": "\tif x:\n\t\treturn\ty\n",
    "formfeed": "\x0c\ndef f():\n    pass\n",
    "crlf": "a = 1\r\nb = 2\r\n",
    "blank_lines": "\n\n\n    \n\n",
    "non_ascii": "s = 'Grüße – “ok” … 日本語'\n",
    "astral": "emoji = '\U0001F600\U0001F40D'\n",
    "control_text": "x = '<s>' + '</s>' + '<unk>' + '<0x0A>'\n",
    "digits": "n = 1234567890 + 0x1F + 3.14e-10\n",
    "u2581": "a\u2581b \u2581\u2581 c\n",
    "nul": "a\x00b\n",
    "long_indent": " " * 37 + "x\n",
}


def files_from(path):
    """Split a corpus file back into (relpath, text) by its marker lines."""
    out, cur, name = [], [], None
    with open(path, encoding="utf-8", newline="") as fh:
        for line in fh:
            if line.startswith(MARK):
                if name is not None:
                    out.append((name, "".join(cur)))
                name, cur = line[len(MARK):].rsplit(" ====", 1)[0], []
            else:
                cur.append(line)
    if name is not None:
        out.append((name, "".join(cur)))
    return out


def engine(specula, vocab, path, bos):
    cmd = [specula, "tokenize", "-m", vocab, "--no-parse-special", "-f", path]
    if not bos:
        cmd.insert(4, "--no-bos")
    r = subprocess.run(cmd, capture_output=True, check=True)
    return json.loads(r.stdout)


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="build/tok/spm.model")
    ap.add_argument("--vocab", default="build/tok/vocab.gguf")
    ap.add_argument("--corpus", default="build/corpus")
    ap.add_argument("--specula", default="bin/specula")
    ap.add_argument("--every", type=int, default=5, help="check every N-th training file")
    ap.add_argument("--detok", help="engine detokenizer helper (ids on stdin -> bytes)")
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.model)
    cases = [("heldout/" + n, t) for n, t in files_from(os.path.join(a.corpus, "heldout.txt"))]
    cases += [("train/" + n, t) for n, t in files_from(os.path.join(a.corpus, "train.txt"))[::a.every]]
    cases += [("edge/" + n, t) for n, t in EDGE.items()]
    stats = {"cases": 0, "ids": 0, "ids_bos": 0, "sp_roundtrip": 0, "engine_roundtrip": 0,
             "tokens": 0, "bytes": 0}
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in.txt")
        for name, text in cases:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            ref = sp.encode(text)
            got = engine(a.specula, a.vocab, path, False)
            got_bos = engine(a.specula, a.vocab, path, True)
            stats["cases"] += 1
            stats["tokens"] += len(ref)
            stats["bytes"] += len(text.encode("utf-8"))
            ok = got == ref
            stats["ids"] += ok
            stats["ids_bos"] += got_bos == [sp.bos_id()] + ref
            rt = sp.decode(got) == text
            stats["sp_roundtrip"] += rt
            ert = None
            if a.detok:
                r = subprocess.run([a.detok, a.vocab], input=" ".join(map(str, got)).encode(),
                                   capture_output=True, check=True)
                ert = r.stdout == text.encode("utf-8")
                stats["engine_roundtrip"] += ert
            if not ok or not rt or ert is False or got_bos != [sp.bos_id()] + ref:
                i = first_diff(got, ref)
                bad.append("%s: ids %s (engine %d vs sp %d tokens, first diff at %d: engine %s sp %s)"
                           " sp-roundtrip %s engine-roundtrip %s" % (
                               name, "ok" if ok else "DIFFER", len(got), len(ref), i,
                               [sp.id_to_piece(t) for t in got[max(0, i - 3):i + 4]],
                               [sp.id_to_piece(t) for t in ref[max(0, i - 3):i + 4]], rt, ert))
    n = stats["cases"]
    print("cases %d (%d bytes, %d tokens, %.2f bytes/token)" % (
        n, stats["bytes"], stats["tokens"], stats["bytes"] / max(1, stats["tokens"])))
    for k in ("ids", "ids_bos", "sp_roundtrip") + (("engine_roundtrip",) if a.detok else ()):
        print("  %-17s %d/%d agree" % (k, stats[k], n))
    for line in bad:
        print("MISMATCH " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
