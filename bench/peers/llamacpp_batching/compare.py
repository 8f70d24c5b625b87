# Compare tf outputs ($WORK/out/<model>.<mode>.jsonl) with the reference.
# Usage: python3 compare.py [modes...]   (default: ub0 ub1)
import json, sys, glob, collections, os
TIE = 1e-3
modes = sys.argv[1:] or ['ub0', 'ub1']
ref = collections.OrderedDict()
for l in open(os.environ.get('REF', '../shared/reference') + '/generations.jsonl'):
    r = json.loads(l); ref[f"{r['model']}/{r['prompt_id']}"] = r
got = collections.defaultdict(dict)  # (key, mode) -> step -> row
for fn in glob.glob(os.environ.get('OUTDIR', os.environ.get('WORK', '/tmp/lcpp') + '/out') + '/*.jsonl'):
    for l in open(fn):
        d = json.loads(l); got[(d['key'], d['mode'])][d['step']] = d

def margin(top): return top[0][1] - top[1][1]

rows = []; summary = collections.Counter()
for key, r in ref.items():
    steps = r['steps']; n = len(steps)
    tie = next((s for s in range(n) if margin(steps[s]['top']) <= TIE), n)
    line = {'key': key, 'n': n, 'first_tie': tie if tie < n else None}
    for m in modes:
        g = got.get((key, m))
        if not g or len(g) < n:
            line[m] = None; continue
        maxerr = 0.0; maxerr_all = 0.0; fail = None; mism_all = []
        for s in range(n):
            rl = dict((t[0], t[1]) for t in steps[s]['top'])
            gl = dict((t[0], t[1]) for t in g[s]['ref'])
            e = max(abs(rl[i] - gl[i]) for i in rl)
            maxerr_all = max(maxerr_all, e)
            if s < tie: maxerr = max(maxerr, e)
            if g[s]['argmax'] != r['tokens'][s]:
                if margin(steps[s]['top']) > TIE: mism_all.append(s)
                if s < tie and fail is None:
                    my = g[s]['top']
                    fail = {'step': s, 'ref_margin': margin(steps[s]['top']), 'my_margin': my[0][1] - my[1][1],
                            'ref_tok': r['tokens'][s], 'my_tok': g[s]['argmax']}
        line[m] = {'maxerr': maxerr, 'maxerr_all': maxerr_all, 'pass': fail is None, 'fail': fail, 'mism_all': mism_all}
        summary[(m, 'pass' if fail is None else 'FAIL')] += 1
    # direct mode-vs-mode difference (A vs each other mode) on the ref top-8 ids, steps before tie
    if 'ub0' in modes:
        ga = got.get((key, 'ub0'))
        for m in modes:
            if m == 'ub0' or not ga or not got.get((key, m)): continue
            gb = got[(key, m)]
            line[m]['diff_vs_ub0'] = max(abs(a[1] - b[1]) for s in range(min(tie, n)) for a, b in zip(ga[s]['ref'], gb[s]['ref'])) if tie > 0 else 0.0
    rows.append(line)

hdr = f"{'record':34s} {'n':>3s} {'tie@':>4s}"
for m in modes: hdr += f" | {m+' maxerr':>12s} {'pass':>4s} {'fail@ (ref margin / own margin)':>32s}"
print(hdr)
for L in rows:
    s = f"{L['key']:34s} {L['n']:3d} {str(L['first_tie']) if L['first_tie'] is not None else '-':>4s}"
    for m in modes:
        x = L[m]
        if x is None: s += f" | {'(missing)':>12s}"; continue
        f = x['fail']
        fs = f"step {f['step']} ({f['ref_margin']:.4g} / {f['my_margin']:.4g})" if f else ''
        s += f" | {x['maxerr']:12.3e} {'yes' if x['pass'] else 'NO':>4s} {fs:>32s}"
    print(s)
print()
print('teacher-forced extras (all steps, incl. after the first near-tie):')
for L in rows:
    extra = []
    for m in modes:
        x = L[m]
        if x: extra.append(f"{m}: maxerr_all={x['maxerr_all']:.3e} argmax mismatches at non-tie steps={x['mism_all']}" + (f" diff_vs_ub0(before tie)={x['diff_vs_ub0']:.3e}" if 'diff_vs_ub0' in x else ''))
    print(f"  {L['key']}: " + '; '.join(extra))
print()
for m in modes: print(f"{m}: pass {summary[(m,'pass')]}, FAIL {summary[(m,'FAIL')]}")
json.dump(rows, open(os.environ.get('OUTDIR', os.environ.get('WORK', '/tmp/lcpp') + '/out') + '/compare_result.json', 'w'), indent=1)
