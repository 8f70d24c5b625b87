// webui.mjs: drives the web page (GET /) and the dashboard (GET /dashboard)
// in headless Chromium through puppeteer-core (tests/server/test_webui.sh starts
// the servers). Prints "ok NAME" / "FAIL NAME: why" per check and ends
// "WEBUI <passed> <failed>".
//
// usage: node webui.mjs CHROMIUM SHOTS_DIR CODE_URL CHAT_URL CHAT_KEY
//   CODE_URL: the bundled code model, --spec ngram, open
//   CHAT_URL: a model with a chat template, --api-key CHAT_KEY
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const [chromium, shots, codeUrl, chatUrl, chatKey] = process.argv.slice(2);
let passed = 0, failed = 0;
const ok = (name) => { console.log('ok   ' + name); passed++; };
const fail = (name, why) => { console.log('FAIL ' + name + ': ' + String(why).replace(/\s+/g, ' ').slice(0, 400)); failed++; };
async function check(name, fn) {
  try {
    const why = await fn();
    if (why === true || why === undefined) ok(name); else fail(name, why);
  } catch (e) { fail(name, e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function metrics(url, key) {
  const r = await fetch(url + '/metrics', { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  if (!r.ok) throw new Error('/metrics: HTTP ' + r.status);
  const m = new Map();
  for (const line of (await r.text()).split('\n')) {
    if (!line || line[0] === '#') continue;
    const sp = line.lastIndexOf(' ');
    m.set(line.slice(0, sp), parseFloat(line.slice(sp + 1)));
  }
  return m;
}
const M = (m, k) => { const v = m.get(k); if (v === undefined) throw new Error('no metric ' + k); return v; };

async function waitFor(what, fn, ms = 30000, every = 100) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error('timed out waiting for ' + what);
    await sleep(every);
  }
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
         '--no-default-browser-check', '--disable-extensions'],
});

/* A page with its console errors, page errors and CSP violations recorded. */
async function open(url, viewport) {
  const page = await browser.newPage();
  await page.setViewport(viewport || { width: 1280, height: 900 });
  page.errors = [];
  page.on('console', (msg) => { if (msg.type() === 'error') page.errors.push('console: ' + msg.text()); });
  page.on('pageerror', (e) => page.errors.push('pageerror: ' + e.message));
  await page.goto(url, { waitUntil: 'networkidle0', timeout: 30000 });
  return page;
}

// the number of finished answers in the log, and the last one's state/text
const lastAnswer = (page) => page.evaluate(() => {
  const all = document.querySelectorAll('#log .msg.assistant');
  const a = all[all.length - 1];
  if (!a) return { n: 0 };
  const stat = (k) => { const e = a.querySelector('[data-stat="' + k + '"] b'); return e ? e.textContent : null; };
  const c = a.querySelector('.completion');
  return { n: all.length, state: a.dataset.state, text: c ? c.textContent : a.querySelector('.body').textContent,
    prompt: stat('prompt_tokens'), cached: stat('cached_tokens'), gen: stat('completion_tokens'),
    ttft: stat('ttft'), tps: stat('tps'), acc: stat('acceptance'), tpstep: stat('tokens_per_step'),
    err: (a.querySelector('.err') || {}).textContent };
});

async function setField(page, id, value) {
  await page.$eval('#' + id, (e, v) => { e.value = v; e.dispatchEvent(new Event('change')); }, value);
}

fs.mkdirSync(shots, { recursive: true });
const codePrompt = 'def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n';

try {
  // ---- the playground on the code model --------------------------------
  const page = await open(codeUrl + '/');
  await check('the page loads with no console error', async () => {
    await waitFor('the model name', () => page.$eval('#model', (e) => e.textContent !== '…'), 10000);
    const name = await page.$eval('#model', (e) => e.textContent);
    if (!/specula|code/.test(name)) return 'model name shown: ' + name;
    return page.errors.length ? page.errors.join('; ') : true;
  });

  await check('a typed prompt streams an answer that grows over time', async () => {
    // sampled (seeded: 200 tokens, no early end) so that the stream lasts a few seconds
    await setField(page, 'max_tokens', '200');
    await setField(page, 'temperature', '1');
    await setField(page, 'seed', '7');
    await page.click('#prompt');
    await page.keyboard.type('import os\n\n\ndef list_files(path):\n');
    // lengths of the answer as the stream goes, recorded in the page
    await page.evaluate(() => {
      window.__lens = [];
      new MutationObserver(() => {
        const c = document.querySelectorAll('#log .completion');
        const last = c[c.length - 1];
        if (last) window.__lens.push(last.textContent.length);
      }).observe(document.getElementById('log'), { childList: true, subtree: true, characterData: true });
    });
    await page.click('#send');
    await waitFor('the answer to finish', async () => (await lastAnswer(page)).state !== 'running', 60000);
    const a = await lastAnswer(page);
    const lens = await page.evaluate(() => window.__lens);
    const distinct = [...new Set(lens.filter((x) => x > 0))];
    if (a.state !== 'done') return 'state ' + a.state + ' ' + a.err;
    if (!a.text.length) return 'empty answer';
    if (distinct.length < 3) return 'the text did not grow in steps: lengths ' + distinct.join(',');
    for (let i = 1; i < distinct.length; i++) if (distinct[i] < distinct[i - 1]) return 'the text shrank';
    return true;
  });

  await check('figures under the answer (prompt, cached, TTFT, tokens/s)', async () => {
    const a = await lastAnswer(page);
    if (!(parseInt(a.prompt, 10) > 0)) return 'prompt tokens ' + a.prompt;
    if (a.cached === null || isNaN(parseInt(a.cached, 10))) return 'cached ' + a.cached;
    if (!/ms$/.test(a.ttft || '')) return 'ttft ' + a.ttft;
    if (!(parseFloat(a.tps) > 0)) return 'tokens/s ' + a.tps;
    if (!(parseInt(a.gen, 10) > 0)) return 'generated ' + a.gen;
    return true;
  });

  await check('Stop cancels the request on the server and its KV blocks come back', async () => {
    const before = await metrics(codeUrl);
    await setField(page, 'max_tokens', '400'); // seeded: 400 tokens, about 5 s
    await setField(page, 'temperature', '1');
    await setField(page, 'seed', '3');
    await setField(page, 'prompt', 'class Parser:\n    def __init__(self, text):\n');
    await page.click('#send');
    await waitFor('text to appear', async () => (await lastAnswer(page)).text.length > 0, 30000, 20);
    await page.click('#stop_btn');
    await waitFor('the page to show stopped', async () => (await lastAnswer(page)).state === 'stopped', 10000, 20);
    const after = await waitFor('the request to end on the server', async () => {
      const m = await metrics(codeUrl);
      return M(m, 'specula_requests_active') === 0 && M(m, 'specula_kv_blocks{state="in_use"}') === 0 ? m : null;
    }, 15000);
    const k = 'specula_requests_finished_total{reason="cancelled"}';
    if (M(after, k) !== M(before, k) + 1) return 'cancelled ' + M(before, k) + ' -> ' + M(after, k);
    const gen = M(after, 'specula_completion_tokens_total') - M(before, 'specula_completion_tokens_total');
    if (gen >= 400) return 'the request ran to the end (' + gen + ' tokens)';
    return true;
  });

  await check('shared-prefix run: the second answer reports cached tokens (Ctrl+Enter sends)', async () => {
    await setField(page, 'temperature', '0');
    await setField(page, 'seed', '');
    await setField(page, 'max_tokens', '48');
    await setField(page, 'spec_method', 'ngram');
    await setField(page, 'spec_k', '4');
    for (let i = 0; i < 2; i++) {
      const n = (await lastAnswer(page)).n;
      await setField(page, 'prompt', codePrompt);
      await page.focus('#prompt');
      await page.keyboard.down('Control');
      await page.keyboard.press('Enter');
      await page.keyboard.up('Control');
      await waitFor('answer ' + (i + 1), async () => {
        const a = await lastAnswer(page);
        return a.n === n + 1 && a.state !== 'running';
      }, 60000);
    }
    const a = await lastAnswer(page);
    if (a.state !== 'done') return 'state ' + a.state + ' ' + a.err;
    if (!(parseInt(a.cached, 10) > 0)) return 'cached tokens ' + a.cached;
    if (!/%$/.test(a.acc || '') || !(parseFloat(a.tpstep) >= 1)) return 'speculation figures ' + a.acc + ' ' + a.tpstep;
    return true;
  });

  await check('the dark theme switches the colours', async () => {
    const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const b0 = await bg();
    await page.click('#theme');
    const b1 = await bg();
    await page.click('#theme');
    return b0 !== b1 && (await bg()) === b0 ? true : 'background ' + b0 + ' -> ' + b1;
  });

  await page.screenshot({ path: path.join(shots, 'playground-desktop.png') });
  // a phone viewport reloads the page: one more answer there, sent with Ctrl+Enter
  await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await waitFor('the reloaded page', () => page.$eval('#model', (e) => e.textContent !== '…'), 10000);
  await setField(page, 'max_tokens', '40');
  await setField(page, 'prompt', 'def fibonacci(n):\n');
  await page.focus('#prompt');
  await page.keyboard.down('Control');
  await page.keyboard.press('Enter');
  await page.keyboard.up('Control');
  await waitFor('the phone answer', async () => { const a = await lastAnswer(page); return a.n === 1 && a.state !== 'running'; }, 60000);
  const fits = (p) => p.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  const pageWidth = await fits(page);
  await page.screenshot({ path: path.join(shots, 'playground-phone.png') });

  // ---- the dashboard on the same server -------------------------------
  const dash = await open(codeUrl + '/dashboard');
  const samples = () => dash.evaluate(() => +(document.body.dataset.samples || 0));
  await check('the dashboard loads with no console error and polls /metrics', async () => {
    await dash.select('#period', '1000');
    await waitFor('three samples', async () => (await samples()) >= 3, 20000);
    return dash.errors.length ? dash.errors.join('; ') : true;
  });
  // traffic while the dashboard watches: shared-prefix completions, two at a time
  const load = async (n) => {
    for (let i = 0; i < n; i++) {
      const r = await fetch(codeUrl + '/v1/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: codePrompt + '    # variant ' + (i % 3) + '\n', max_tokens: 64, temperature: 0,
          speculative: { method: 'ngram', k: 4 } }) });
      await r.text();
    }
  };
  await Promise.all([load(6), load(6)]);
  const s0 = await samples();
  await waitFor('two samples after the traffic', async () => (await samples()) >= s0 + 2, 20000);

  await check('the dashboard shows a non-zero hit rate and acceptance figures that agree with /metrics', async () => {
    const t = await dash.evaluate(() => {
      const v = (id) => parseFloat(document.getElementById('tile_' + id).dataset.value);
      const row = document.querySelector('#t_method tr[data-method="ngram"]');
      return { hit: v('hit'), ttft: v('ttft'), acc: v('acc'), tps: v('tps'), k: v('k'), ngram: row ? parseFloat(row.dataset.acceptance) : NaN,
        hbars: [...document.querySelectorAll('#c_h rect.bar')].filter((r) => parseFloat(r.getAttribute('height')) > 0).length,
        pbars: [...document.querySelectorAll('#c_pos rect.bar')].filter((r) => parseFloat(r.getAttribute('height')) > 0).length };
    });
    const m = await metrics(codeUrl);
    const hit = M(m, 'specula_prefix_cache_hits_total') / M(m, 'specula_prefix_cache_queries_total');
    const steps = M(m, 'specula_spec_drafts_total'), acc = M(m, 'specula_spec_accepted_tokens_total');
    const dr = M(m, 'specula_spec_draft_tokens_total');
    const near = (a, b) => Math.abs(a - b) < 1e-9;
    if (!(t.hit > 0)) return 'hit rate ' + t.hit;
    if (!near(t.hit, hit)) return 'hit rate ' + t.hit + ' vs /metrics ' + hit;
    if (!(steps > 0)) return 'no speculative step in /metrics';
    if (!near(t.acc, acc / dr)) return 'acceptance ' + t.acc + ' vs ' + acc / dr;
    if (!near(t.tps, (acc + steps) / steps)) return 'tokens/step ' + t.tps + ' vs ' + (acc + steps) / steps;
    const nd = M(m, 'specula_spec_method_draft_tokens_total{method="ngram"}');
    const na = M(m, 'specula_spec_method_accepted_tokens_total{method="ngram"}');
    if (!near(t.ngram, na / nd)) return 'ngram acceptance ' + t.ngram + ' vs ' + na / nd;
    if (!isFinite(t.k)) return 'planner k ' + t.k;
    if (!(t.ttft > 0)) return 'TTFT p50 ' + t.ttft;
    if (t.hbars < 2) return 'H_tokens bars ' + t.hbars;
    if (acc > 0 && t.pbars < 1) return 'per-position bars ' + t.pbars;
    return true;
  });
  await dash.screenshot({ path: path.join(shots, 'dashboard-desktop.png'), fullPage: true });
  await dash.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await waitFor('a sample on the phone', () => dash.evaluate(() => +(document.body.dataset.samples || 0) >= 2), 20000);
  await check('both pages fit a phone screen (no horizontal scrolling)', async () => {
    const d = await fits(dash);
    if (pageWidth[0] > pageWidth[1] + 1) return 'page: scroll width ' + pageWidth[0] + ' > ' + pageWidth[1];
    return d[0] <= d[1] + 1 ? true : 'dashboard: scroll width ' + d[0] + ' > ' + d[1];
  });
  await dash.screenshot({ path: path.join(shots, 'dashboard-phone.png') });

  // ---- chat mode and API keys on the model with a template ----------------
  const chat = await open(chatUrl + '/');
  await check('without the API key the page says so; with it, chat mode streams an answer', async () => {
    await waitFor('the model line', () => chat.$eval('#model', (e) => /API key/.test(e.textContent)), 10000);
    const unexpected = chat.errors.filter((e) => !/401/.test(e));
    if (unexpected.length) return unexpected.join('; ');
    await setField(chat, 'api_key', chatKey);
    await waitFor('the model name', () => chat.$eval('#model', (e) => e.textContent === 'ref'), 10000);
    await chat.select('#mode', 'chat');
    await setField(chat, 'max_tokens', '24');
    await chat.click('#prompt');
    await chat.keyboard.type('Hello, who are you?');
    await chat.click('#send');
    await waitFor('the chat answer', async () => {
      const a = await lastAnswer(chat);
      return a.n === 1 && a.state !== 'running';
    }, 60000);
    const a = await lastAnswer(chat);
    if (a.state !== 'done') return 'state ' + a.state + ': ' + a.err;
    const users = await chat.$$eval('#log .msg.user', (e) => e.map((x) => x.textContent));
    if (users.length !== 1 || !/who are you/.test(users[0])) return 'user message ' + users;
    if (!(parseInt(a.gen, 10) > 0)) return 'no tokens';
    return true;
  });

  await check('the dashboard needs the metrics key and works with it', async () => {
    const d = await open(chatUrl + '/dashboard');
    await waitFor('the 401 message', () => d.$eval('#status', (e) => /needs a key/.test(e.textContent)), 10000);
    await setField(d, 'api_key', chatKey);
    await waitFor('a sample', () => d.evaluate(() => +(document.body.dataset.samples || 0) >= 1), 10000);
    const active = await d.$eval('#tile_active', (e) => e.dataset.value);
    await d.close();
    return active === '0' ? true : 'requests in flight ' + active;
  });
  await chat.screenshot({ path: path.join(shots, 'chat-desktop.png') });

  await check('screenshots saved (desktop and phone, both pages)', async () => {
    const want = ['playground-desktop', 'playground-phone', 'dashboard-desktop', 'dashboard-phone', 'chat-desktop'];
    const bad = want.filter((n) => { try { return fs.statSync(path.join(shots, n + '.png')).size < 2000; } catch { return true; } });
    return bad.length ? 'missing: ' + bad.join(', ') : true;
  });
} catch (e) {
  fail('driver', e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
console.log('WEBUI ' + passed + ' ' + failed);
