# Writes $WORK/data/<model>.txt in the format tf expects.
import json, collections, os
by = collections.OrderedDict()
for l in open(os.environ.get('REF', '../shared/reference') + '/generations.jsonl'):
    r = json.loads(l)
    by.setdefault(r['model'], []).append(r)
for m, rs in by.items():
    with open(os.environ.get('WORK', '/tmp/lcpp') + f'/data/{m}.txt', 'w') as f:
        for r in rs:
            f.write(f"{m}/{r['prompt_id']}\n")
            f.write(' '.join(map(str, r['prompt_tokens'])) + '\n')
            f.write(' '.join(map(str, r['tokens'])) + '\n')
            for st in r['steps']:
                f.write(' '.join(str(t[0]) for t in st['top']) + '\n')
print(list(by))
