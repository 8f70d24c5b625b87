/* app.js: the playground (GET /). Completion mode sends the prompt as is
 * (what a code model is best at); chat mode keeps the conversation and
 * sends it as messages (a model without a chat template falls back to
 * completion mode). Answers stream (SSE over fetch);
 * Stop aborts the request, which cancels it on the server. */
'use strict';
(() => {
  const { $, api, fmt, pct } = Specula;
  const history = [];  // chat mode: {role, content}
  let running = null;  // {ctrl, msg}

  function num(id, int) {
    const v = $(id).value.trim();
    if (v === '') return undefined;
    const x = int ? parseInt(v, 10) : parseFloat(v);
    return isFinite(x) ? x : undefined;
  }

  function params() {
    const p = { stream: true, stream_options: { include_usage: true } };
    const mt = num('max_tokens', true); if (mt !== undefined) p.max_tokens = mt;
    const t = num('temperature'); if (t !== undefined) p.temperature = t;
    const tp = num('top_p'); if (tp !== undefined) p.top_p = tp;
    const sd = num('seed', true); if (sd !== undefined) p.seed = sd;
    const stops = $('stop').value.split('\n').filter((s) => s.length)
      .map((s) => s.replace(/\\n/g, '\n').replace(/\\t/g, '\t'));
    if (stops.length) p.stop = stops.slice(0, 4);
    const m = $('spec_method').value, k = num('spec_k', true);
    if (m || k !== undefined) {
      p.speculative = {};
      if (m) p.speculative.method = m;
      if (k !== undefined) p.speculative.k = k;
    }
    const salt = $('cache_salt').value;
    if (salt) p.cache_salt = salt;
    return p;
  }

  /* A message box in the log; returns its parts. */
  function addMsg(role, label) {
    const box = document.createElement('article');
    box.className = 'msg ' + role;
    const who = document.createElement('div');
    who.className = 'who';
    who.textContent = label;
    const body = document.createElement('div');
    body.className = 'body';
    box.append(who, body);
    $('log').append(box);
    box.scrollIntoView({ block: 'end' });
    return { box, body };
  }

  /* Chat text with ``` fences shown as code blocks (built as DOM nodes:
   * the model's text is never parsed as HTML). */
  function renderChat(el, text) {
    el.replaceChildren();
    const parts = text.split('```');
    parts.forEach((part, i) => {
      if (i % 2 === 0) {
        const segs = part.split('`');
        segs.forEach((seg, j) => {
          if (j % 2 === 1 && j < segs.length - 1) {
            const c = document.createElement('code');
            c.textContent = seg;
            el.append(c);
          } else {
            el.append(document.createTextNode(j % 2 === 1 ? '`' + seg : seg));
          }
        });
      } else {
        const nl = part.indexOf('\n');
        const lang = nl > 0 ? part.slice(0, nl).trim() : '';
        const pre = document.createElement('pre');
        const code = document.createElement('code');
        if (lang && /^[\w+-]+$/.test(lang)) code.className = 'language-' + lang;
        code.textContent = nl >= 0 ? part.slice(nl + 1) : part;
        pre.append(code);
        el.append(pre);
      }
    });
  }

  /* Completion mode: the prompt (muted) and the completion, as code. */
  function renderCompletion(el, prompt, text) {
    el.replaceChildren();
    const pre = document.createElement('pre');
    const code = document.createElement('code');
    const p = document.createElement('span');
    p.className = 'prompt-echo';
    p.textContent = prompt;
    const out = document.createElement('span');
    out.className = 'completion';
    out.textContent = text;
    code.append(p, out);
    pre.append(code);
    el.append(pre);
  }

  function showStats(box, s) {
    if (!$('show_stats').checked) return;
    const d = document.createElement('div');
    d.className = 'stats';
    const item = (k, v, name) => {
      const span = document.createElement('span');
      span.dataset.stat = name;
      span.append(k + ' ');
      const b = document.createElement('b');
      b.textContent = v;
      span.append(b);
      d.append(span);
    };
    item('prompt', s.prompt_tokens ?? '–', 'prompt_tokens');
    item('cached', s.cached_tokens ?? '–', 'cached_tokens');
    item('generated', s.completion_tokens ?? '–', 'completion_tokens');
    item('TTFT', s.ttft_ms !== undefined ? fmt(s.ttft_ms) + ' ms' : '–', 'ttft');
    item('tokens/s', fmt(s.tps), 'tps');
    if (s.spec && s.spec.steps > 0) {
      item('acceptance', pct(s.spec.acceptance_rate), 'acceptance');
      item('tokens/step', fmt(s.spec.mean_acceptance_length), 'tokens_per_step');
      /* which proposers drafted (auto picks per step): the most first */
      const by = Object.entries(s.spec.by || {}).sort((x, y) => y[1].drafted - x[1].drafted);
      if (by.length) item('proposer', by.map(([m, c]) => m + ' ' + pct(c.drafted ? c.accepted / c.drafted : 0)).join(', '), 'proposer');
    } else {
      item('speculation', 'none', 'acceptance');
    }
    if (s.finish) item('finish', s.finish, 'finish');
    box.append(d);
  }

  function setRunning(on) {
    $('send').disabled = on;
    $('stop_btn').disabled = !on;
  }

  async function send() {
    if (running) return;
    const text = $('prompt').value;
    if (!text.trim()) { $('prompt').focus(); return; }
    const chat = $('mode').value === 'chat';
    const body = params();
    let path;
    if (chat) {
      history.push({ role: 'user', content: text });
      body.messages = history.slice();
      path = '/v1/chat/completions';
      const u = addMsg('user', 'you');
      u.body.textContent = text;
      $('prompt').value = '';
    } else {
      body.prompt = text;
      path = '/v1/completions';
    }
    const m = addMsg('assistant', chat ? 'assistant' : 'completion');
    m.box.classList.add('running');
    m.box.dataset.state = 'running';
    const ctrl = new AbortController();
    running = { ctrl, msg: m };
    setRunning(true);
    const t0 = performance.now();
    let out = '', tFirst = null, ext = null, usage = null, finish = null;
    const draw = () => chat ? renderChat(m.body, out) : renderCompletion(m.body, text, out);
    draw();
    try {
      const r = await api(path, {
        method: 'POST', body: JSON.stringify(body), signal: ctrl.signal,
        headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' }
      });
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of ev.split('\n')) {
            if (!line.startsWith('data:')) continue;
            const data = line.slice(5).trim();
            if (data === '[DONE]') continue;
            const j = JSON.parse(data);
            if (j.error) throw new Error(j.error.message || 'server error');
            if (j.usage) usage = j.usage;
            if (j.specula) ext = j.specula;
            const c = j.choices && j.choices[0];
            if (!c) continue;
            const piece = chat ? (c.delta && c.delta.content) || '' : c.text || '';
            if (piece) {
              if (tFirst === null) tFirst = performance.now();
              out += piece;
              draw();
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      }
      m.box.dataset.state = 'done';
      if (chat) history.push({ role: 'assistant', content: out });
      const s = {
        prompt_tokens: usage && usage.prompt_tokens,
        cached_tokens: usage && usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens,
        completion_tokens: usage && usage.completion_tokens,
        ttft_ms: ext ? ext.ttft_ms : tFirst !== null ? tFirst - t0 : undefined,
        spec: ext && ext.spec, finish
      };
      const n = s.completion_tokens;
      if (ext && n > 1 && ext.decode_ms > 0) s.tps = (n - 1) / (ext.decode_ms / 1000);
      else if (n && tFirst !== null) s.tps = n / ((performance.now() - t0) / 1000);
      showStats(m.box, s);
    } catch (e) {
      const err = document.createElement('div');
      err.className = 'err';
      if (e.name === 'AbortError') {
        m.box.dataset.state = 'stopped';
        err.textContent = 'stopped';
        if (chat && out) history.push({ role: 'assistant', content: out });
      } else {
        m.box.dataset.state = 'error';
        err.textContent = e.message;
        if (chat) history.pop();
        if (e.status === 401) $('settings-box').open = true;
        if (e.code === 'no_chat_template') { /* this model takes completions only */
          $('mode').value = 'completion';
          history.length = 0;
        }
      }
      m.box.append(err);
    } finally {
      m.box.classList.remove('running');
      running = null;
      setRunning(false);
      m.box.scrollIntoView({ block: 'end' });
    }
  }

  function stop() { if (running) running.ctrl.abort(); }

  async function loadModel() {
    try {
      const r = await api('/v1/models');
      const j = await r.json();
      const d = j.data && j.data[0];
      if (!d) return;
      $('model').textContent = d.id;
      const sp = d.specula;
      if (sp) $('model').title = 'speculation: ' + sp.spec + ', k ' + sp.spec_k +
        (sp.draft_file ? ', draft ' + sp.draft_file : '') + '; context ' + sp.n_ctx;
    } catch (e) {
      $('model').textContent = e.status === 401 ? 'API key needed (Settings)' : 'server: ' + e.message;
      if (e.status === 401) $('settings-box').open = true;
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('form').addEventListener('submit', (e) => { e.preventDefault(); send(); });
    $('stop_btn').addEventListener('click', stop);
    $('clear').addEventListener('click', () => { history.length = 0; $('log').replaceChildren(); });
    $('mode').addEventListener('change', () => {
      $('prompt').placeholder = $('mode').value === 'chat' ? 'Ask something…' : 'def fibonacci(n):';
    });
    $('api_key').addEventListener('change', loadModel);
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); }
      else if (e.key === 'Escape' && running) { e.preventDefault(); stop(); }
    });
    if (matchMedia('(max-width: 640px)').matches) $('settings-box').open = false;
    loadModel();
  });
})();
