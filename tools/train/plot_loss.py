#!/usr/bin/python3
"""Plot train.py loss curves to a PNG with no third-party libraries.

    tools/train/plot_loss.py OUT.png RUN/loss.csv:LABEL [RUN2/loss.csv:LABEL2@LABEL ...]
        [--x tokens|step] [--width 800] [--height 500] [--title TEXT]

LABEL2@LABEL marks a run that continues an earlier one (train.py --init):
its x starts where that run's last row ended and advances by its own
tokens (or steps) per step, since the logged token counts of a phase at
another context or batch (step offset x this phase's batch x ctx) are not
the tokens the model saw.

For each run: train loss as a thin line in a light shade of the run's color,
held-out loss (the rows that have one) as a thick line with square markers
in the full color.  x is training tokens (default) or steps.  Axes with tick
marks and labels, and a legend, drawn with a built-in 5x7 bitmap font
(upper case, digits and a little punctuation; text is upper-cased).  The
pixels are rasterized into an RGB buffer here and written as a PNG (8-bit
RGB, filter 0 on every row) with zlib and struct: signature, IHDR, IDAT,
IEND, each chunk with its CRC-32.
"""
import argparse
import csv
import math
import struct
import sys
import zlib

# 5x7 glyphs, one int per row, bit 4 = leftmost column
FONT = {
    "0": (14, 17, 19, 21, 25, 17, 14), "1": (4, 12, 4, 4, 4, 4, 14), "2": (14, 17, 1, 2, 4, 8, 31),
    "3": (31, 2, 4, 2, 1, 17, 14), "4": (2, 6, 10, 18, 31, 2, 2), "5": (31, 16, 30, 1, 1, 17, 14),
    "6": (6, 8, 16, 30, 17, 17, 14), "7": (31, 1, 2, 4, 8, 8, 8), "8": (14, 17, 17, 14, 17, 17, 14),
    "9": (14, 17, 17, 15, 1, 2, 12),
    "A": (14, 17, 17, 31, 17, 17, 17), "B": (30, 17, 17, 30, 17, 17, 30), "C": (14, 17, 16, 16, 16, 17, 14),
    "D": (28, 18, 17, 17, 17, 18, 28), "E": (31, 16, 16, 30, 16, 16, 31), "F": (31, 16, 16, 30, 16, 16, 16),
    "G": (14, 17, 16, 23, 17, 17, 15), "H": (17, 17, 17, 31, 17, 17, 17), "I": (14, 4, 4, 4, 4, 4, 14),
    "J": (7, 2, 2, 2, 2, 18, 12), "K": (17, 18, 20, 24, 20, 18, 17), "L": (16, 16, 16, 16, 16, 16, 31),
    "M": (17, 27, 21, 21, 17, 17, 17), "N": (17, 17, 25, 21, 19, 17, 17), "O": (14, 17, 17, 17, 17, 17, 14),
    "P": (30, 17, 17, 30, 16, 16, 16), "Q": (14, 17, 17, 17, 21, 18, 13), "R": (30, 17, 17, 30, 20, 18, 17),
    "S": (15, 16, 16, 14, 1, 1, 30), "T": (31, 4, 4, 4, 4, 4, 4), "U": (17, 17, 17, 17, 17, 17, 14),
    "V": (17, 17, 17, 17, 17, 10, 4), "W": (17, 17, 17, 21, 21, 21, 10), "X": (17, 17, 10, 4, 10, 17, 17),
    "Y": (17, 17, 10, 4, 4, 4, 4), "Z": (31, 1, 2, 4, 8, 16, 31),
    ".": (0, 0, 0, 0, 0, 12, 12), "-": (0, 0, 0, 31, 0, 0, 0), ":": (0, 12, 12, 0, 12, 12, 0),
    "(": (2, 4, 8, 8, 8, 4, 2), ")": (8, 4, 2, 2, 2, 4, 8), "/": (0, 1, 2, 4, 8, 16, 0),
    ",": (0, 0, 0, 0, 12, 4, 8), "_": (0, 0, 0, 0, 0, 0, 31), "=": (0, 0, 31, 0, 31, 0, 0),
    "+": (0, 4, 4, 31, 4, 4, 0), "%": (24, 25, 2, 4, 8, 19, 3), " ": (0,) * 7,
}
COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (23, 190, 207),
          (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34)]
BLACK, GREY, WHITE = (0, 0, 0), (225, 225, 225), (255, 255, 255)


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(WHITE * (w * h))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = 3 * (y * self.w + x)
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.set(x, y, c)

    def line(self, x0, y0, x1, y1, c, width=1):
        """Bresenham, each pixel stamped as a width x width square."""
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, r = dx + dy, width // 2
        while True:
            if width == 1:
                self.set(x0, y0, c)
            else:
                self.rect(x0 - r, y0 - r, x0 - r + width - 1, y0 - r + width - 1, c)
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def text(self, x, y, s, c=BLACK, scale=2):
        """Draw s with its top-left corner at (x, y); returns the width in pixels."""
        for k, ch in enumerate(s.upper()):
            g = FONT.get(ch, FONT[" "])
            for row, bits in enumerate(g):
                for col in range(5):
                    if bits >> (4 - col) & 1:
                        bx, by = x + (6 * k + col) * scale, y + row * scale
                        self.rect(bx, by, bx + scale - 1, by + scale - 1, c)
        return text_width(s, scale)

    def png(self):
        raw = b"".join(b"\0" + bytes(self.px[3 * y * self.w:3 * (y + 1) * self.w]) for y in range(self.h))

        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(s, scale=2):
    return (6 * len(s) - 1) * scale if s else 0


def nice_ticks(lo, hi, n=6):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    t = math.ceil(lo / step - 1e-9) * step
    out = []
    while t <= hi + 1e-9 * step:
        out.append(round(t, 10))
        t += step
    return out, step


def fmt(v, step):
    """A tick label: K/M/G suffixes, as many decimals as the tick step needs."""
    if v == 0:
        return "0"
    a = max(abs(v), abs(step))
    suf = ""
    for div, sf in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if a >= div * (10 if sf == "K" else 1):
            v, step, suf = v / div, step / div, sf
            break
    dec = next(d for d in range(6) if abs(round(step, d) - step) <= 1e-9 * abs(step) or d == 5)
    return ("%.*f" % (dec, v)) + suf


def read_run(path, xcol):
    tr, ho = [], []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            x = float(row[xcol])
            if row.get("train_loss"):
                tr.append((x, float(row["train_loss"])))
            if row.get("heldout_loss"):
                ho.append((x, float(row["heldout_loss"])))
    return tr, ho


def plot(out, runs, xcol="tokens", W=800, H=500, title=None):
    cv = Canvas(W, H)
    L, R, T, B = 70, 20, 50, 60  # margins
    pts = [p for _, tr, ho in runs for p in tr + ho]
    if not pts:
        raise SystemExit("no loss rows to plot")
    x0, x1 = 0.0, max(p[0] for p in pts)
    ylo, yhi = min(p[1] for p in pts), max(p[1] for p in pts)
    pad = 0.04 * (yhi - ylo or 1)
    yt, ys = nice_ticks(ylo - pad, yhi + pad)
    xt, xs = nice_ticks(x0, x1 or 1)
    y0, y1 = min(yt[0], ylo - pad), max(yt[-1], yhi + pad)
    x1 = max(xt[-1], x1 or 1)
    px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)  # noqa: E731
    py = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)  # noqa: E731
    # grid, axes, ticks, tick labels
    for t in yt:
        cv.line(L + 1, py(t), W - R, py(t), GREY)
        cv.line(L - 6, py(t), L, py(t), BLACK)
        s = fmt(t, ys)
        cv.text(L - 10 - text_width(s), int(py(t)) - 7, s)
    for t in xt:
        cv.line(px(t), T, px(t), H - B - 1, GREY)
        cv.line(px(t), H - B, px(t), H - B + 6, BLACK)
        s = fmt(t, xs)
        cv.text(min(W - 2 - text_width(s), int(px(t)) - text_width(s) // 2), H - B + 11, s)
    cv.line(L, T, L, H - B, BLACK)
    cv.line(L, H - B, W - R, H - B, BLACK)
    xl = "training tokens" if xcol == "tokens" else "steps"
    cv.text((L + W - R - text_width(xl)) // 2, H - 22, xl)
    cv.text(8, T - 22, "loss (nats/token)")
    ttl = title or "loss vs " + xl
    cv.text((W - text_width(ttl)) // 2, 10, ttl)
    # curves; the legend names each run once (thin: train, thick: held-out)
    legend = [("thin: train, thick: held-out", None)]
    for i, (label, tr, ho) in enumerate(runs):
        c = COLORS[i % len(COLORS)]
        light = tuple(int(v + (255 - v) * 0.55) for v in c)
        for (a, b), (d, e) in zip(tr, tr[1:]):
            cv.line(px(a), py(b), px(d), py(e), light, 1)
        for (a, b), (d, e) in zip(ho, ho[1:]):
            cv.line(px(a), py(b), px(d), py(e), c, 3)
        for a, b in ho:
            cv.rect(int(px(a)) - 3, int(py(b)) - 3, int(px(a)) + 3, int(py(b)) + 3, c)
        legend.append((label, c))
    # legend box, top right
    lw = max(text_width(s) for s, _ in legend) + 44
    lx, ly = W - R - lw - 8, T + 8
    cv.rect(lx, ly, lx + lw, ly + 8 + 20 * len(legend), WHITE)
    for x_, y_, xx, yy in ((lx, ly, lx + lw, ly), (lx, ly + 8 + 20 * len(legend), lx + lw, ly + 8 + 20 * len(legend)),
                           (lx, ly, lx, ly + 8 + 20 * len(legend)), (lx + lw, ly, lx + lw, ly + 8 + 20 * len(legend))):
        cv.line(x_, y_, xx, yy, BLACK)
    for j, (s, c) in enumerate(legend):
        yy = ly + 8 + 20 * j + 7
        if c is None:  # the key line
            cv.text(lx + 8, yy - 7, s)
            continue
        cv.line(lx + 8, yy, lx + 30, yy, c, 3)
        cv.rect(lx + 16, yy - 3, lx + 22, yy + 3, c)
        cv.text(lx + 36, yy - 7, s)
    with open(out, "wb") as fh:
        fh.write(cv.png())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="loss.csv[:LABEL]")
    ap.add_argument("--x", choices=("tokens", "step"), default="tokens")
    ap.add_argument("--width", type=int, default=800)
    ap.add_argument("--height", type=int, default=500)
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    runs, ends = [], {}
    for spec in a.runs:
        path, _, label = spec.partition(":")
        label, _, after = label.partition("@")
        tr, ho = read_run(path, a.x)
        if after:
            if after not in ends:
                raise SystemExit("%s: continues %r, which is not an earlier run" % (spec, after))
            steps = read_run(path, "step")
            rows = sorted(steps[0] + steps[1])
            xs = sorted(tr + ho)
            s0 = rows[0][0] - 1 if rows else 0  # the step offset: the first logged step is offset + 1
            per = xs[0][0] / rows[0][0] if rows and rows[0][0] else 1.0  # x per step (batch x ctx)
            shift = lambda pts: [(ends[after] + (st - s0) * per, y) for (st, y) in pts]  # noqa: E731
            tr, ho = shift(steps[0]), shift(steps[1])
        pts = tr + ho
        ends[label or path] = max((x for x, _ in pts), default=0.0)
        runs.append((label or path, tr, ho))
    plot(a.out, runs, a.x, a.width, a.height, a.title)
    print("wrote %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
