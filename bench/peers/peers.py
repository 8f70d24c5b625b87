#!/usr/bin/env python3
"""bench/peers/peers.py: the parser and the tables of bench/peers/run.sh.

  peers.py parse specula|llama FILE   one run: "pp TPS CORES", "tg TPS CORES"
                                      (CORES: CPU s / wall s of the phase,
                                      Specula only; "-" for llama-bench)
  peers.py round RESULTS.tsv R        the ratios of round R, one line a row
  peers.py summary RESULTS.tsv OUT.json   medians and spreads (Markdown) + JSON

RESULTS.tsv (written by run.sh): round, model, engine, phase, tokens/s, cores
busy in the phase (Specula only), wall s of the run, the percent of all CPU
time other processes took during the run, tries.
Every ratio is taken inside one round (this machine's memory bandwidth moves
between runs); a round's ratios are then summarized by their median and their
range over the rounds. ik_llama.cpp runs with and without -rtr; its best
setting per model and phase is the one with the higher median tokens/s, and
the summary's Specula / ik ratios are against that setting, round by round.
Nothing is printed for an engine or a phase that was not measured.
"""
import json
import os
import statistics
import sys

PHASES = ("pp", "tg")
PHASE_NAME = {"pp": "prefill", "tg": "decode"}
# the targets: Specula / ik's best, per phase
TARGET = {"pp": 1.10, "tg": 1.05}
ENGINES = ("specula", "specula-avx2", "specula2", "ik", "ik-rtr", "llama")
LABEL = {"specula": "Specula", "specula-avx2": "Specula AVX2", "specula2": "Specula #2", "ik": "ik",
         "ik-rtr": "ik -rtr 1", "llama": "llama.cpp"}
OURS = ("specula", "specula-avx2", "specula2")


def die(msg):
    sys.exit("peers.py: " + msg)


def parse(kind, path):
    """tokens/s of pp and tg from bin/bench --pp-tg or from llama-bench -o json"""
    text = open(path).read()
    got = {}
    if kind == "specula":
        lines = [l for l in text.splitlines() if l.startswith("{")]
        if len(lines) != 1:
            die(f"{path}: expected one JSON line from bin/bench --pp-tg")
        j = json.loads(lines[0])
        got = {"pp": j["pp_tps"], "tg": j["tg_tps"]}
        # a build from before the CPU fields has none: "-"
        cores = {ph: f"{j[ph + '_cpu_s'] / j[ph + '_s']:.2f}" for ph in PHASES
                 if j.get(ph + "_s", 0) > 0 and ph + "_cpu_s" in j}
    elif kind == "llama":
        cores = {}
        start = text.find("[")
        if start < 0:
            die(f"{path}: no JSON array (llama-bench -o json)")
        for t in json.loads(text[start:]):
            if t["n_prompt"] > 0 and t["n_gen"] == 0:
                got["pp"] = t["avg_ts"]
            elif t["n_gen"] > 0 and t["n_prompt"] == 0:
                got["tg"] = t["avg_ts"]
    else:
        die(f"unknown kind {kind}")
    for ph in PHASES:
        if ph not in got or not got[ph] > 0:
            die(f"{path}: no {ph} tokens/s")
        print(f"{ph}\t{got[ph]:.3f}\t{cores.get(ph, '-')}")


def load(path):
    """{(model, phase): {engine: {round: tps}}}, the models in file order,
    the (model, engine, round) runs other processes took more than
    BENCH_QUIET_PCT percent of the CPUs during, and {(model, phase): {engine:
    {round: cores busy}}} where measured"""
    data, models, disturbed, cores = {}, [], set(), {}
    quiet = float(os.environ.get("BENCH_QUIET_PCT", "10"))
    for line in open(path):
        if not line.strip() or line.startswith("round\t"):
            continue
        r, model, engine, phase, tps, cpu, _wall, others, _tries = line.rstrip("\n").split("\t")
        if model not in models:
            models.append(model)
        data.setdefault((model, phase), {}).setdefault(engine, {})[int(r)] = float(tps)
        if cpu != "-":
            cores.setdefault((model, phase), {}).setdefault(engine, {})[int(r)] = float(cpu)
        if float(others) > quiet:
            disturbed.add((model, engine, int(r)))
    return data, models, disturbed, cores


def present(data):
    return [e for e in ENGINES if any(e in v for v in data.values())]


def fmt_tps(x):
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def round_table(path, r):
    data, models, disturbed, _ = load(path)
    engines = present(data)
    peers = [p for p in ("ik", "ik-rtr", "llama") if p in engines]
    ours = [e for e in ("specula", "specula-avx2") if e in engines]
    short = {"specula": "Sp", "specula-avx2": "AVX2"}
    head = ["model", "phase"] + [LABEL[e] for e in engines]
    head += [f"{short[o]}/{LABEL[p]}" for o in ours for p in peers]
    two = "specula2" in engines and "specula" in engines
    if two:
        head.append("#2/Sp")
    rows = []
    for m in models:
        for ph in PHASES:
            d = data.get((m, ph), {})
            row = [m, PHASE_NAME[ph]]
            row += [fmt_tps(d[e][r]) + ("!" if (m, e, r) in disturbed else "") if r in d.get(e, {}) else "-"
                    for e in engines]
            for o in ours:
                for p in peers:
                    ok = r in d.get(o, {}) and r in d.get(p, {})
                    row.append(f"{d[o][r] / d[p][r]:.2f}x" if ok else "-")
            if two:
                ok = r in d.get("specula2", {}) and r in d.get("specula", {})
                row.append(f"{d['specula2'][r] / d['specula'][r]:.2f}x" if ok else "-")
            rows.append(row)
    width = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(str(x).rjust(w) if i > 1 else str(x).ljust(w) for i, (x, w) in enumerate(zip(row, width))))
    if any(k[2] == r for k in disturbed):
        print(f"!: other processes took more than {os.environ.get('BENCH_QUIET_PCT', '10')}% of the CPUs during that run")


def spread(xs):
    return f"{statistics.median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"


def tps_cell(by_round):
    xs = list(by_round.values())
    return f"{fmt_tps(statistics.median(xs))} ({fmt_tps(min(xs))}-{fmt_tps(max(xs))})"


def ratios(a, b):
    return [a[r] / b[r] for r in sorted(a) if r in b]


def summary(path, out_json):
    data, models, _, cores = load(path)
    engines = present(data)
    has_ik = "ik" in engines or "ik-rtr" in engines
    has_llama = "llama" in engines
    n_rounds = len({r for v in data.values() for e in v.values() for r in e})
    head = ["model", "phase", "Specula", "Specula AVX2"]
    has_two = "specula2" in engines
    if has_two:
        head += ["Specula #2", "#2 / Specula"]
    if has_ik:
        head += ["ik, no -rtr", "ik, -rtr 1", "Specula / ik best", "AVX2 / ik best", "target"]
    if has_llama:
        head += ["llama.cpp", "Specula / llama.cpp", "AVX2 / llama.cpp"]
    print(f"tokens/s: median over {n_rounds} rounds (min-max); ratios: median of the per-round "
          "ratios (min-max). ik best: its setting with the higher median, marked *.\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    js = []
    for m in models:
        for ph in PHASES:
            d = data.get((m, ph), {})
            if "specula" not in d:
                continue
            row = [m, PHASE_NAME[ph], tps_cell(d["specula"])]
            row.append(tps_cell(d["specula-avx2"]) if "specula-avx2" in d else "-")
            rec = {"model": m, "phase": ph, "rounds": n_rounds,
                   "tps_median": {e: statistics.median(d[e].values()) for e in d}}
            if has_two:
                xs = ratios(d["specula2"], d["specula"]) if "specula2" in d else []
                row += [tps_cell(d["specula2"]) if "specula2" in d else "-", spread(xs) if xs else "-"]
                if xs:
                    rec["specula2_over_specula"] = {"median": statistics.median(xs), "min": min(xs),
                                                    "max": max(xs)}
            c = cores.get((m, ph), {})
            if c:
                rec["cores_median"] = {e: statistics.median(c[e].values()) for e in c}
            if has_ik:
                ik = [e for e in ("ik", "ik-rtr") if e in d]
                best = max(ik, key=lambda e: statistics.median(d[e].values())) if ik else None
                for e in ("ik", "ik-rtr"):
                    row.append((tps_cell(d[e]) + (" *" if e == best else "")) if e in d else "-")
                for o in ("specula", "specula-avx2"):
                    xs = ratios(d[o], d[best]) if best and o in d else []
                    row.append(spread(xs) if xs else "-")
                    if xs:
                        rec[f"{o}_over_ik"] = {"best": best, "median": statistics.median(xs),
                                               "min": min(xs), "max": max(xs)}
                xs = ratios(d["specula"], d[best]) if best else []
                met = xs and statistics.median(xs) >= TARGET[ph]
                row.append(f"{TARGET[ph]:.2f}x: {'met' if met else 'not met'}" if xs else "-")
            if has_llama:
                row.append(tps_cell(d["llama"]) if "llama" in d else "-")
                for o in ("specula", "specula-avx2"):
                    xs = ratios(d[o], d["llama"]) if o in d and "llama" in d else []
                    row.append(spread(xs) if xs else "-")
                    if xs:
                        rec[f"{o}_over_llama"] = {"median": statistics.median(xs), "min": min(xs),
                                                  "max": max(xs)}
            print("| " + " | ".join(row) + " |")
            js.append(rec)
    cpu_engines = [e for e in OURS if any(e in v for v in cores.values())]
    if cpu_engines:
        print(f"\nSpecula's CPU use per phase: cores busy (CPU s / wall s, all threads), median over "
              f"the rounds (min-max); {os.environ.get('BENCH_THREADS', '2')} threads at most. A pool "
              "that waits by spinning shows up here, not in tokens/s.\n")
        print("| model | phase | " + " | ".join(LABEL[e] for e in cpu_engines) + " |")
        print("|" + "---|" * (2 + len(cpu_engines)))
        for m in models:
            for ph in PHASES:
                c = cores.get((m, ph), {})
                if not c:
                    continue
                cells = []
                for e in cpu_engines:
                    xs = list(c.get(e, {}).values())
                    cells.append(f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "-")
                print(f"| {m} | {PHASE_NAME[ph]} | " + " | ".join(cells) + " |")
    with open(out_json, "w") as f:
        json.dump(js, f, indent=1)
        f.write("\n")


def main(argv):
    if len(argv) == 4 and argv[1] == "parse":
        parse(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "round":
        round_table(argv[2], int(argv[3]))
    elif len(argv) == 4 and argv[1] == "summary":
        summary(argv[2], argv[3])
    else:
        die("usage: peers.py parse specula|llama FILE | round RESULTS R | summary RESULTS OUT.json")


if __name__ == "__main__":
    main(sys.argv)
