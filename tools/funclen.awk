# tools/funclen.awk: the length of every C function, for the size bar of
# ARCHITECTURE.md (no function over about 150 lines but tables and flag
# parsing; no file in src/ over about 900):
#   awk -f tools/funclen.awk src/*.c src/*/*.c | sort -rn | head
# Works for this project's style: a definition's signature starts in column 0
# (an identifier, a "(" before any "=" or ";"), its body opens with "{" at
# the end of the signature's last line and closes with "}" in column 0.
# Prints "LINES FILE:LINE NAME".
FNR == 1 { cand = 0; infn = 0 }
!infn && !cand && /^[A-Za-z_][^=;]*\(/ && !/^(typedef|#)/ {
    cand = FNR; name = $0; sub(/\(.*/, "", name); n = split(name, w, /[ \t*]+/); name = w[n]
}
!infn && cand && /;[ \t]*$/ { cand = 0 }
!infn && cand && /\{[ \t]*$/ { start = cand; infn = 1; cand = 0; next }
infn && /^\}/ { printf "%5d %s:%d %s\n", FNR - start + 1, FILENAME, start, name; infn = 0 }
