/* dash.js: the live dashboard (GET /dashboard). It polls /metrics (the
 * Prometheus text; so its data has exactly /metrics' protection, with the
 * key typed into the page) and computes rates, windowed percentiles and
 * ratios here from the differences between successive samples. Charts are
 * SVG drawn by this file. */
'use strict';
(() => {
  const { $, api, fmt, pct } = Specula;
  const SVG = 'http://www.w3.org/2000/svg';
  const samples = [];  // {t (s), m: Map "name{labels}" -> value}
  const points = [];   // per sample: the figures the time charts plot
  let timer = null, paused = false;

  /* ---- Prometheus text ---------------------------------------------- */
  function parse(text) {
    const m = new Map();
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const sp = line.lastIndexOf(' ');
      if (sp < 0) continue;
      const v = parseFloat(line.slice(sp + 1));
      m.set(line.slice(0, sp).trim(), v);
    }
    return m;
  }
  const labelKey = (name, labels) => labels
    ? name + '{' + Object.entries(labels).map(([k, v]) => k + '="' + v + '"').join(',') + '}' : name;
  function get(m, name, labels) {
    const v = m.get(labelKey(name, labels));
    return v === undefined ? NaN : v;
  }
  /* every sample of a metric with one label: [[label value, value]...] */
  function byLabel(m, name, label) {
    const out = [];
    const pre = name + '{' + label + '="';
    for (const [k, v] of m) {
      if (!k.startsWith(pre)) continue;
      const rest = k.slice(pre.length);
      out.push([rest.slice(0, rest.indexOf('"')), v]);
    }
    return out;
  }

  /* the sample at least `secs` before the latest (the oldest we have) */
  function sampleAgo(secs) {
    const last = samples[samples.length - 1];
    let s = samples[0];
    for (const x of samples) if (x.t <= last.t - secs) s = x; else break;
    return s;
  }
  const delta = (a, b, name, labels) => get(b.m, name, labels) - get(a.m, name, labels);

  /* histogram_quantile over the difference of two samples' buckets (a
   * null: since the server started) */
  function quantile(a, b, name, q) {
    const bs = byLabel(b.m, name + '_bucket', 'le').map(([le, v]) =>
      [le === '+Inf' ? Infinity : parseFloat(le), v - (a ? get(a.m, name + '_bucket', { le }) : 0)]);
    bs.sort((x, y) => x[0] - y[0]);
    const total = bs.length ? bs[bs.length - 1][1] : 0;
    if (!(total > 0)) return NaN;
    const rank = q * total;
    let prevLe = 0, prevCum = 0;
    for (const [le, cum] of bs) {
      if (cum >= rank) {
        if (le === Infinity) return prevLe;
        if (cum === prevCum) return le;
        return prevLe + (le - prevLe) * (rank - prevCum) / (cum - prevCum);
      }
      prevLe = le; prevCum = cum;
    }
    return prevLe;
  }

  /* ---- SVG charts --------------------------------------------------- */
  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.append(e);
    return e;
  }
  function frame(svg) {
    const w = Math.max(200, svg.clientWidth || 400), h = Math.max(100, svg.clientHeight || 180);
    svg.replaceChildren();
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    return { w, h, l: 44, r: 8, t: 16, b: 18 };
  }
  function yTicks(svg, f, yMax, yFmt) {
    for (let i = 0; i <= 4; i++) {
      const y = f.t + (f.h - f.t - f.b) * (1 - i / 4);
      el('line', { x1: f.l, x2: f.w - f.r, y1: y, y2: y, class: 'grid' }, svg);
      const tx = el('text', { x: f.l - 4, y: y + 3, 'text-anchor': 'end' }, svg);
      tx.textContent = yFmt(yMax * i / 4);
    }
  }
  function legend(svg, f, series) {
    let x = f.l;
    for (const s of series) {
      el('rect', { x, y: 3, width: 9, height: 9, class: s.cls }, svg);
      const tx = el('text', { x: x + 12, y: 11, class: 'legend' }, svg);
      tx.textContent = s.name;
      x += 20 + 6.2 * s.name.length;
    }
  }
  /* the smallest multiple of 4 (4 grid steps) at least v: integer ticks */
  function niceInt(v) { return Math.max(4, 4 * Math.ceil(v / 4)); }
  /* series: [{name, cls, key, dash}] over points[] (x: time) */
  function lineChart(svg, series, opts) {
    opts = opts || {};
    const f = frame(svg);
    const pts = points;
    let yMax = opts.yMax || 0;
    if (!opts.yMax)
      for (const p of pts) for (const s of series) { const v = p[s.key]; if (isFinite(v) && v > yMax) yMax = v; }
    if (!(yMax > 0)) yMax = 1;
    else if (!opts.yMax) yMax *= 1.1;
    if (opts.int) yMax = niceInt(yMax);
    const yFmt = opts.yFmt || ((v) => fmt(v));
    yTicks(svg, f, yMax, yFmt);
    legend(svg, f, series);
    if (pts.length < 1) return;
    const t1 = pts[pts.length - 1].t, t0 = Math.min(pts[0].t, t1 - 10);
    const X = (t) => f.l + (f.w - f.l - f.r) * (t - t0) / Math.max(1e-9, t1 - t0);
    const Y = (v) => f.t + (f.h - f.t - f.b) * (1 - Math.min(v, yMax) / yMax);
    const tx = el('text', { x: f.l, y: f.h - 4 }, svg);
    tx.textContent = '-' + Math.round(t1 - t0) + ' s';
    const tn = el('text', { x: f.w - f.r, y: f.h - 4, 'text-anchor': 'end' }, svg);
    tn.textContent = 'now';
    for (const s of series) {
      let d = '', pen = false;
      for (const p of pts) {
        const v = p[s.key];
        if (!isFinite(v)) { pen = false; continue; }
        d += (pen ? 'L' : 'M') + X(p.t).toFixed(1) + ' ' + Y(v).toFixed(1);
        pen = true;
      }
      if (d) el('path', { d, class: 'line ' + s.cls + (s.dash ? ' dash' : '') }, svg);
    }
  }
  /* bars: [[label, value]] */
  function barChart(svg, bars, opts) {
    opts = opts || {};
    const f = frame(svg);
    let yMax = opts.yMax || Math.max(0, ...bars.map((b) => b[1]).filter(isFinite)) * 1.1;
    if (!(yMax > 0)) yMax = 1;
    if (opts.int) yMax = niceInt(yMax);
    yTicks(svg, f, yMax, opts.yFmt || ((v) => fmt(v)));
    if (opts.title) { const t = el('text', { x: f.l, y: 11, class: 'legend' }, svg); t.textContent = opts.title; }
    const n = Math.max(1, bars.length), bw = (f.w - f.l - f.r) / n;
    bars.forEach(([label, v], i) => {
      const hgt = isFinite(v) ? (f.h - f.t - f.b) * Math.min(v, yMax) / yMax : 0;
      const r = el('rect', { x: f.l + i * bw + bw * 0.12, y: f.h - f.b - hgt, width: bw * 0.76,
        height: hgt, class: 'bar s0' }, svg);
      const tt = el('title', {}, r);
      tt.textContent = label + ': ' + (opts.yFmt || fmt)(v);
      const tx = el('text', { x: f.l + i * bw + bw / 2, y: f.h - 5, 'text-anchor': 'middle' }, svg);
      tx.textContent = label;
    });
  }

  /* ---- tiles ---------------------------------------------------------- */
  function tile(id, label, value, raw, sub) {
    let t = $('tile_' + id);
    if (!t) {
      t = document.createElement('div');
      t.className = 'tile';
      t.id = 'tile_' + id;
      const k = document.createElement('div'); k.className = 'k'; k.textContent = label;
      const v = document.createElement('div'); v.className = 'v';
      const s = document.createElement('div'); s.className = 's';
      t.append(k, v, s);
      $('tiles').append(t);
    }
    t.children[1].textContent = value;
    t.children[2].textContent = sub || '';
    t.dataset.value = isFinite(raw) ? String(raw) : '';
  }

  const METHODS = ['ngram', 'suffix', 'draft'];

  function update() {
    const b = samples[samples.length - 1], m = b.m;
    const a = samples.length > 1 ? samples[samples.length - 2] : b;
    const W = parseInt($('window').value, 10);
    const w = sampleAgo(W);
    const dt = b.t - a.t;
    const rate = (name) => dt > 0 ? delta(a, b, name) / dt : NaN;
    const ratio = (x, y) => y > 0 ? x / y : NaN;

    const p = { t: b.t };
    p.active = get(m, 'specula_requests_active');
    p.running = get(m, 'specula_requests_running');
    p.waiting = get(m, 'specula_requests_waiting');
    p.gen = rate('specula_decode_tokens_total');
    p.prefill = rate('specula_prefill_tokens_total');
    p.ttft50 = 1e3 * quantile(w, b, 'specula_time_to_first_token_seconds', 0.5);
    p.ttft99 = 1e3 * quantile(w, b, 'specula_time_to_first_token_seconds', 0.99);
    p.tpot50 = 1e3 * quantile(w, b, 'specula_time_per_output_token_seconds', 0.5);
    p.tpot99 = 1e3 * quantile(w, b, 'specula_time_per_output_token_seconds', 0.99);
    p.hit = ratio(delta(a, b, 'specula_prefix_cache_hits_total'), delta(a, b, 'specula_prefix_cache_queries_total'));
    p.free = get(m, 'specula_kv_blocks', { state: 'free' });
    p.cached = get(m, 'specula_kv_blocks', { state: 'cached' });
    p.in_use = get(m, 'specula_kv_blocks', { state: 'in_use' });
    p.ev_pressure = delta(a, b, 'specula_kv_evictions_total', { cause: 'pressure' });
    p.ev_flush = delta(a, b, 'specula_kv_evictions_total', { cause: 'flush' });
    p.preempt = delta(a, b, 'specula_preemptions_total');
    p.acc = ratio(delta(a, b, 'specula_spec_accepted_tokens_total'), delta(a, b, 'specula_spec_draft_tokens_total'));
    p.k = get(m, 'specula_spec_planned_k');
    p.k16 = p.k / 16;
    points.push(p);
    while (points.length && points[0].t < b.t - W) points.shift();

    const hitAll = ratio(get(m, 'specula_prefix_cache_hits_total'), get(m, 'specula_prefix_cache_queries_total'));
    const hitWin = ratio(delta(w, b, 'specula_prefix_cache_hits_total'), delta(w, b, 'specula_prefix_cache_queries_total'));
    const steps = get(m, 'specula_spec_drafts_total'), drafted = get(m, 'specula_spec_draft_tokens_total'),
      accepted = get(m, 'specula_spec_accepted_tokens_total');
    const accAll = ratio(accepted, drafted), tpsAll = ratio(accepted + steps, steps);
    const wSteps = delta(w, b, 'specula_spec_drafts_total');
    const accWin = ratio(delta(w, b, 'specula_spec_accepted_tokens_total'), delta(w, b, 'specula_spec_draft_tokens_total'));
    const tpsWin = ratio(delta(w, b, 'specula_spec_accepted_tokens_total') + wSteps, wSteps);
    const win = W >= 60 ? W / 60 + ' min' : W + ' s';

    tile('active', 'requests in flight', fmt(p.active, 0), p.active, 'running ' + fmt(p.running, 0) + ' · queued ' + fmt(p.waiting, 0));
    tile('gen', 'tokens/s generated', fmt(p.gen), p.gen, 'prefilled ' + fmt(p.prefill) + '/s');
    /* windowed; since the start while the window has seen no request */
    const lat = (id, label, hist, p50, p99) => {
      if (isFinite(p50)) return tile(id, label, fmt(p50) + ' / ' + fmt(p99), p50, 'ms, last ' + win);
      const q50 = 1e3 * quantile(null, b, hist, 0.5), q99 = 1e3 * quantile(null, b, hist, 0.99);
      tile(id, label, fmt(q50) + ' / ' + fmt(q99), q50, 'ms, since start (none in the last ' + win + ')');
    };
    lat('ttft', 'TTFT p50 / p99', 'specula_time_to_first_token_seconds', p.ttft50, p.ttft99);
    lat('tpot', 'TPOT p50 / p99', 'specula_time_per_output_token_seconds', p.tpot50, p.tpot99);
    tile('hit', 'prefix cache hit rate', pct(hitAll), hitAll, 'token-weighted, since start; last ' + win + ' ' + pct(hitWin));
    tile('kv', 'KV blocks in use', fmt(p.in_use, 0), p.in_use,
      'cached ' + fmt(p.cached, 0) + ' · free ' + fmt(p.free, 0) + ' of ' + fmt(get(m, 'specula_kv_blocks_capacity'), 0));
    tile('evict', 'evictions', fmt(get(m, 'specula_kv_evictions_total', { cause: 'pressure' }) +
      get(m, 'specula_kv_evictions_total', { cause: 'flush' }), 0), NaN,
      'pressure ' + fmt(get(m, 'specula_kv_evictions_total', { cause: 'pressure' }), 0) + ' · flush ' +
      fmt(get(m, 'specula_kv_evictions_total', { cause: 'flush' }), 0) + ' · preemptions ' +
      fmt(get(m, 'specula_preemptions_total'), 0));
    tile('acc', 'speculation acceptance', pct(accAll), accAll, 'since start; last ' + win + ' ' + pct(accWin));
    tile('tps', 'tokens per verification step', fmt(tpsAll), tpsAll, 'since start; last ' + win + ' ' + fmt(tpsWin));
    tile('k', 'planner k (latest step)', fmt(p.k, 1), p.k,
      'mean over the window ' + fmt(ratio(delta(w, b, 'specula_spec_planned_k_sum_total'), delta(w, b, 'specula_spec_plans_total')), 1));

    lineChart($('c_req'), [{ name: 'in flight', cls: 's0', key: 'active' }, { name: 'running', cls: 's2', key: 'running' },
      { name: 'queued', cls: 's1', key: 'waiting' }], { int: true, yFmt: (v) => fmt(v, 0) });
    lineChart($('c_tps'), [{ name: 'generated', cls: 's0', key: 'gen' }, { name: 'prefilled', cls: 's1', key: 'prefill' }]);
    lineChart($('c_lat'), [{ name: 'TTFT p50', cls: 's0', key: 'ttft50' }, { name: 'TTFT p99', cls: 's0', key: 'ttft99', dash: true },
      { name: 'TPOT p50', cls: 's1', key: 'tpot50' }, { name: 'TPOT p99', cls: 's1', key: 'tpot99', dash: true }]);
    lineChart($('c_hit'), [{ name: 'hit rate', cls: 's2', key: 'hit' }], { yMax: 1, yFmt: (v) => (100 * v).toFixed(0) + '%' });
    const h = byLabel(m, 'specula_prefix_cache_h_tokens_total', 'bucket');
    barChart($('c_h'), h.map(([l, v]) => [l === '1' ? '=1' : l, v]), { int: true, yFmt: (v) => fmt(v, 0) });
    lineChart($('c_kv'), [{ name: 'in use', cls: 's0', key: 'in_use' }, { name: 'cached', cls: 's2', key: 'cached' },
      { name: 'free', cls: 's5', key: 'free' }], { int: true, yFmt: (v) => fmt(v, 0) });
    lineChart($('c_ev'), [{ name: 'evicted (pressure)', cls: 's1', key: 'ev_pressure' },
      { name: 'evicted (flush)', cls: 's3', key: 'ev_flush' }, { name: 'preemptions', cls: 's4', key: 'preempt' }], { int: true, yFmt: (v) => fmt(v, 0) });
    const pos = byLabel(m, 'specula_spec_accepted_per_position_total', 'position')
      .map(([l, v]) => [String(parseInt(l, 10) + 1), ratio(v, steps)]);
    let last = pos.length; while (last > 1 && !(pos[last - 1][1] > 0)) last--;
    barChart($('c_pos'), pos.slice(0, Math.max(4, last)), { yMax: 1, yFmt: (v) => pct(v),
      title: 'share of verification steps that accepted the token at draft position i' });
    lineChart($('c_spec'), [{ name: 'acceptance (per interval)', cls: 's2', key: 'acc' },
      { name: 'planner k / 16', cls: 's3', key: 'k16' }], { yMax: 1, yFmt: (v) => (100 * v).toFixed(0) + '%' });

    const tb = $('t_method').tBodies[0];
    tb.replaceChildren();
    for (const meth of METHODS) {
      const st = get(m, 'specula_spec_method_steps_total', { method: meth });
      const dr = get(m, 'specula_spec_method_draft_tokens_total', { method: meth });
      const ac = get(m, 'specula_spec_method_accepted_tokens_total', { method: meth });
      const tr = document.createElement('tr');
      tr.dataset.method = meth;
      for (const v of [meth, fmt(st, 0), fmt(dr, 0), fmt(ac, 0), pct(ratio(ac, dr)), fmt(ratio(ac + st, st))]) {
        const td = document.createElement('td');
        td.textContent = v;
        tr.append(td);
      }
      tr.dataset.acceptance = String(ratio(ac, dr));
      tb.append(tr);
    }
  }

  async function poll() {
    timer = null;
    if (paused) return;
    try {
      const r = await api('/metrics');
      const text = await r.text();
      const s = { t: performance.now() / 1000, m: parse(text) };
      samples.push(s);
      const W = parseInt($('window').value, 10);
      while (samples.length > 2 && samples[1].t < s.t - W - 5) samples.shift();
      update();
      $('status').className = 'status muted';
      $('status').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · ' + samples.length + ' samples';
      document.body.dataset.samples = String(samples.length);
    } catch (e) {
      $('status').className = 'status err';
      $('status').textContent = e.status === 401
        ? 'The dashboard reads /metrics, which needs a key: type the metrics key (or the API key) in Key. ' + e.message
        : 'Cannot read /metrics: ' + e.message;
    }
    if (!paused) timer = setTimeout(poll, parseInt($('period').value, 10));
  }

  function redraw() { if (samples.length) { points.pop(); update(); } }

  document.addEventListener('DOMContentLoaded', () => {
    $('pause').addEventListener('click', () => {
      paused = !paused;
      $('pause').textContent = paused ? 'Resume' : 'Pause';
      if (!paused && !timer) poll();
      else if (paused && timer) { clearTimeout(timer); timer = null; }
    });
    $('api_key').addEventListener('change', () => { if (timer) clearTimeout(timer); poll(); });
    let rt = null;
    window.addEventListener('resize', () => { clearTimeout(rt); rt = setTimeout(redraw, 150); });
    poll();
  });
})();
