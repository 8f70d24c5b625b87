/* common.js: what the page and the dashboard share: the theme, the API key
 * (held in this page's memory only: never stored, never in a URL) and
 * same-origin requests that carry it. */
'use strict';
const Specula = (() => {
  const $ = (id) => document.getElementById(id);

  function initTheme() {
    const saved = localStorage.getItem('specula-theme');
    if (saved === 'dark' || saved === 'light') document.documentElement.classList.add(saved);
    const b = $('theme');
    if (!b) return;
    b.addEventListener('click', () => {
      const root = document.documentElement;
      const dark = root.classList.contains('dark') ||
        (!root.classList.contains('light') && matchMedia('(prefers-color-scheme: dark)').matches);
      root.classList.remove('dark', 'light');
      root.classList.add(dark ? 'light' : 'dark');
      localStorage.setItem('specula-theme', dark ? 'light' : 'dark');
      document.dispatchEvent(new Event('specula-theme'));
    });
  }

  /* the key typed into the page's key field */
  function key() {
    const k = $('api_key');
    return k && k.value.trim() ? k.value.trim() : '';
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const k = key();
    if (k) h.Authorization = 'Bearer ' + k;
    return h;
  }

  /* fetch with the key; throws Error(message) for a non-2xx answer, with
   * the server's error message when it sent one */
  async function api(path, opts) {
    opts = opts || {};
    const r = await fetch(path, Object.assign({}, opts, {
      headers: headers(opts.headers), cache: 'no-store', credentials: 'omit'
    }));
    if (!r.ok) {
      let msg = 'HTTP ' + r.status, code = null;
      try {
        const j = await r.json();
        if (j && j.error && j.error.message) msg += ': ' + j.error.message;
        if (j && j.error) code = j.error.code;
      } catch (e) { /* not JSON */ }
      const err = new Error(msg);
      err.status = r.status;
      err.code = code;
      throw err;
    }
    return r;
  }

  function fmt(x, digits) {
    if (x === null || x === undefined || !isFinite(x)) return '–';
    const a = Math.abs(x);
    if (digits === undefined) digits = a >= 100 ? 0 : a >= 10 ? 1 : 2;
    return x.toFixed(digits);
  }
  function pct(x) { return x === null || x === undefined || !isFinite(x) ? '–' : (100 * x).toFixed(1) + '%'; }

  document.addEventListener('DOMContentLoaded', initTheme);
  return { $, api, headers, key, fmt, pct };
})();
