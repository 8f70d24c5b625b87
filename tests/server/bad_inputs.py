#!/usr/bin/env python3
"""bad_inputs.py: runs the table of bad inputs (tests/server/bad_inputs.json) against
`specula serve` and `specula info` / `specula serve` on broken model files.

Every HTTP row is sent (raw sockets for broken HTTP, http.client otherwise),
its answer is checked against the row's expectation (status, error.type,
error.param, error.code, Retry-After), and after EVERY row a normal small
completion must succeed: the server keeps serving. Model-file rows craft a
broken GGUF from a real one and expect a message and an exit status in
1..127 (>= 128 is a crash), within a timeout. A row may also bound the
answer's wall time ("max_s") and the server's peak RSS growth while it ran
("max_rss_growth_mb"), run on the "big" server (--max-body 8M) for bodies
beyond the main server's 1 MiB, expect a status of every answer of a burst,
or bound usage.prompt_tokens ("prompt_tokens_min"); model rows may set
metadata ("kv:KEY=TYPE:VALUE;..."). At the end the servers must
still be alive, /metrics must answer, and their stderr must hold no
sanitizer report. Prints "ok   ID" / "FAIL ID: why" per row and
"RESULT <passed> <failed>". Standard library only.

usage: bad_inputs.py --bin BIN --model MODEL --small-model GGUF [--table T] [--only ID,...]
"""
import argparse
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from harness import SAN_RE, Server, Tally, asan_quarantine_mb, broken_json_baseline, metrics, request, wait_idle  # noqa: E402,F401
CHECK_BODY = {"prompt": "def f(x):", "max_tokens": 2, "temperature": 0}
KEYS = ("tenant-a-key", "tenant-b-key")
METRICS_KEY = "metrics-key"


# ---- raw sockets ------------------------------------------------------------

def raw_exchange(port, data, shut_wr=False, timeout=30):
    """Sends bytes on a fresh socket; returns the status code of the first
    response (0: the server closed the connection without answering)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if data:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered early and closed: read what it said
        if shut_wr or not data:
            s.shutdown(socket.SHUT_WR)
        buf = b""
        while b"\r\n" not in buf:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", buf)
        return int(m.group(1)) if m else 0
    finally:
        s.close()


# ---- generated request bodies and raw requests ---------------------------

def gen_body(spec):
    name, _, arg = spec.partition(":")
    n = int(arg) if arg else 0
    if name == "deep_array":
        return b"[" * n + b"]" * n
    if name == "deep_object":
        return b'{"a": ' * n + b"1" + b"}" * n
    if name == "deep_field":
        return b'{"prompt": "a", "user": ' + b"[" * n + b"]" * n + b"}"
    if name == "huge_body":
        return b'{"prompt": "' + b"a" * n + b'"}'
    if name == "many_keys":
        d = {"k%d" % i: i for i in range(n)}
        d.update(CHECK_BODY)
        return json.dumps(d).encode()
    if name == "many_ids":
        return json.dumps({"prompt": [100 + i % 3000 for i in range(n)], "max_tokens": 2}).encode()
    if name == "huge_prompt":
        return json.dumps({"prompt": ("def f(x): return x\n" * (n // 19 + 1))[:n], "max_tokens": 2}).encode()
    if name == "huge_chat":
        return json.dumps({"messages": [{"role": "user", "content": "hello " * (n // 6)}]}).encode()
    if name == "huge_tokenize":
        return json.dumps({"prompt": ("import os\n" * (n // 10 + 1))[:n]}).encode()
    if name == "detok_many":
        return json.dumps({"tokens": [3 + i % 4000 for i in range(n)]}).encode()
    if name == "many_stops":
        return json.dumps({"prompt": "a", "stop": ["s%d" % i for i in range(n)]}).encode()
    if name == "long_stop":
        return json.dumps(dict(CHECK_BODY, stop=["z" * n])).encode()
    if name == "long_model":
        return json.dumps(dict(CHECK_BODY, model="m" * n)).encode()
    if name == "many_bias":  # distinct keys: every token id, then leading zeros (the same ids again)
        keys, w = [], 1
        while len(keys) < n:
            keys += ["%0*d" % (w, i) for i in range(4000) if len("%d" % i) <= w]
            w += 1
        return json.dumps(dict(CHECK_BODY, logit_bias={k: 0 for k in keys[:n]})).encode()
    if name == "big_grammar":  # a chain of rules each referring to the next, n bytes or so
        rules, i, size = ["root ::= r0"], 0, 12
        while size < n:
            rules.append('r%d ::= r%d "b"' % (i, i + 1))
            size += len(rules[-1]) + 1
            i += 1
        rules.append('r%d ::= "a"' % i)
        return json.dumps(dict(CHECK_BODY, grammar="\n".join(rules))).encode()
    if name == "utf16_json":
        return json.dumps(CHECK_BODY).encode("utf-16")
    raise ValueError("unknown body generator " + spec)


def gen_raw(spec):
    name, _, arg = spec.partition(":")
    n = int(arg) if arg else 0
    if name == "long_header":
        return b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * n + b"\r\n\r\n"
    if name == "many_headers":
        return b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(n)) + b"\r\n"
    if name == "long_url":
        return b"GET /health?" + b"a" * n + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    if name in ("big_body", "big_body_expect"):
        body = b'{"prompt": "' + b"a" * n + b'"}'
        return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                (b"Expect: 100-continue\r\n" if name == "big_body_expect" else b"") +
                b"Content-Length: %d\r\n\r\n" % len(body) + (b"" if name == "big_body_expect" else body))
    if name == "chunked_ok":
        body = json.dumps(CHECK_BODY).encode()
        return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    raise ValueError("unknown raw generator " + spec)


def row_body(row):
    if "json" in row:
        return json.dumps(row["json"]).encode()
    if "body" in row:
        return row["body"].encode("latin-1")  # U+00XX is byte XX
    if "body_gen" in row:
        return gen_body(row["body_gen"])
    return None


# ---- checking one HTTP row --------------------------------------------------

def check_error(status, hdrs, body, exp):
    if status != exp["status"]:
        return "HTTP %d (want %d): %r" % (status, exp["status"], body[:200])
    if status == 200:
        return None
    try:
        e = json.loads(body)["error"]
    except Exception:
        return "the body is not an OpenAI error object: %r" % body[:200]
    if not (set(e) >= {"message", "type", "param", "code"}) or not e["message"]:
        return "incomplete error object: %r" % e
    for k in ("type", "param", "code"):
        if k in exp and e[k] != exp[k]:
            return "error.%s %r (want %r): %s" % (k, e[k], exp[k], e["message"])
    if exp.get("retry_after") and "retry-after" not in hdrs:
        return "no Retry-After header"
    return None


def hold_streams(port, n, headers):
    """Opens n long streams and waits until the server counts them active."""
    socks = []
    body = json.dumps({"prompt": "def main():", "max_tokens": 400, "temperature": 0,
                       "stream": True}).encode()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        hdr = "".join("%s: %s\r\n" % kv for kv in headers.items())
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                  hdr.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        socks.append(s)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if metrics(port, headers)[1].get("specula_requests_active", 0) >= n:
            return socks, None
        time.sleep(0.02)
    return socks, "the %d streams never became active together" % n


# an ASan build's quarantine, capped before the servers start (harness.py)
RSS_SLACK_MB = 0


def peak_rss_kb(pid):
    """The process's peak resident set (VmHWM) in KiB, 0 if unknown."""
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_http_row(row, srv):
    """run_http_one, then the row's bounds on time and memory."""
    exp = row["expect"]
    hwm0 = peak_rss_kb(srv.p.pid)  # before the baseline too: its peak counts, never hides the row's
    base = 0.0
    if "max_s" in exp and "body_gen" in row:  # the bound is on the work beyond parsing the body
        base = broken_json_baseline(srv.port, row["path"], row_body(row), exp.get("burst", 1),
                                    row.get("headers"), row.get("method", "POST"))
    if base is None:
        return "the same body with its last byte broken was not refused as invalid JSON"
    t0 = time.monotonic()
    err = run_http_one(row, srv)
    dt, grown = time.monotonic() - t0, (peak_rss_kb(srv.p.pid) - hwm0) / 1024
    if not err and "max_s" in exp and dt > exp["max_s"] + base:
        err = "answered in %.2f s (at most %.2f s beyond the %.2f s the same body takes to be refused " \
              "as broken JSON)" % (dt, exp["max_s"], base)
    bound = exp.get("max_rss_growth_mb", 0) + RSS_SLACK_MB
    if not err and "max_rss_growth_mb" in exp and grown > bound:
        err = "peak RSS grew by %.0f MiB (at most %d%s)" % (
            grown, bound, ", ASan's quarantine included" if RSS_SLACK_MB else "")
    return err


def run_http_one(row, srv):
    exp = row["expect"]
    hdrs = dict(row.get("headers", {}))  # the row's own: no API key unless it gives one
    if "raw" in row or "raw_gen" in row:
        data = row["raw"].encode("latin-1") if "raw" in row else gen_raw(row["raw_gen"])
        got = raw_exchange(srv.port, data, row.get("shut_wr", False))
        want = exp["status"]
        return None if got in want else "status %d (want one of %s; 0 = closed without answer)" % (got, want)
    method = row.get("method", "POST")
    body = row_body(row)
    if body is not None and "Content-Type" not in hdrs:
        hdrs["Content-Type"] = "application/json"
    if "burst" in exp:
        n, res = exp["burst"], []
        def one():
            try:
                res.append(request(srv.port, method, row["path"], body, hdrs, timeout=60))
            except Exception as e:
                res.append((0, {}, repr(e).encode()))
        ts = [threading.Thread(target=one) for _ in range(n)]
        for t in ts: t.start()
        for t in ts: t.join(90)
        if "status" in exp:  # every answer must be this one
            bad = [(r[0], check_error(r[0], r[1], r[2], exp)) for r in res]
            bad = [b for b in bad if b[1]]
            return "%d answers, unexpected: %r" % (len(res), bad[:3]) if len(res) != n or bad else None
        bad = [r for r in res if not (r[0] == 200 or (r[0] == 429 and not check_error(r[0], r[1], r[2],
               {"status": 429, "type": "rate_limit_exceeded", "retry_after": True})))]
        if len(res) != n or bad:
            return "%d answers, unexpected: %r" % (len(res), [(r[0], r[2][:100]) for r in bad][:3])
        if not any(r[0] == 200 for r in res):
            return "no request of the burst succeeded"
        return None
    socks = []
    try:
        if row.get("hold_streams"):
            socks, err = hold_streams(srv.port, row["hold_streams"], srv.headers)
            if err:
                return err
        st, rh, data = request(srv.port, method, row["path"], body, hdrs, chunked=row.get("chunked", False))
        err = check_error(st, rh, data, exp)
        if not err and "prompt_tokens_min" in exp:
            got = json.loads(data)["usage"]["prompt_tokens"]
            if got < exp["prompt_tokens_min"]:
                err = "usage.prompt_tokens %d (at least %d)" % (got, exp["prompt_tokens_min"])
        return err
    finally:
        for s in socks:
            s.close()
        if socks and not wait_idle(srv.port, srv.headers):
            return "the held streams were not cancelled after their clients left"


def check_serving(srv):
    try:
        st, _, data = request(srv.port, "POST", "/v1/completions", json.dumps(CHECK_BODY).encode(),
                              dict(srv.headers, **{"Content-Type": "application/json"}), timeout=60)
        d = json.loads(data)
        if st != 200 or d["choices"][0]["finish_reason"] not in ("stop", "length"):
            return "HTTP %d: %r" % (st, data[:200])
    except Exception as e:
        return "no answer: %r" % e
    if srv.p.poll() is not None:
        return "the server exited with status %s" % srv.p.returncode
    return None


# ---- broken model files ---------------------------------------------------

def gguf_layout(b):
    """Offsets of the header fields, the KV entries and the tensor infos."""
    off = 24
    _, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    def string(o):
        n = struct.unpack_from("<Q", b, o)[0]
        return b[o + 8:o + 8 + n].decode(), o + 8 + n
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def value(t, o):
        if t in sizes: return o + sizes[t]
        if t == 8: return string(o)[1]
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et in sizes: return o + n * sizes[et]
        for _ in range(n): o = value(et, o)
        return o
    kvs = []
    for _ in range(n_kv):
        start = off
        key, off = string(off)
        t = struct.unpack_from("<I", b, off)[0]
        kvs.append({"key": key, "off": start, "type_off": off, "vtype": t, "val_off": off + 4})
        off = value(t, off + 4)
    kv_end = off
    tis = []
    for _ in range(n_t):
        start = off
        name, off = string(off)
        nd = struct.unpack_from("<I", b, off)[0]
        ti = {"name": name, "off": start, "nd_off": off, "ne_off": off + 4, "n_dims": nd}
        off += 4 + 8 * nd
        ti["type_off"], ti["offset_off"] = off, off + 4
        off += 12
        tis.append(ti)
    return {"n_tensors": n_t, "n_kv": n_kv, "kvs": kvs, "kv_end": kv_end, "tis": tis, "ti_end": off}


KV_TYPES = {"u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "f64": (12, "<d"), "str": (8, None)}


def set_kvs(base, spec):
    """The GGUF base with metadata set or added: spec is "KEY=TYPE:VALUE"
    items joined by ';' (TYPE u32, i32, f32, f64 or str; VALUE in Python's
    float()/int() syntax, so inf and nan work). The file is rebuilt: header,
    metadata, tensor infos, then the data section at the alignment (offsets
    in the tensor infos are relative to it, so they stay valid)."""
    b = bytes(base)
    L = gguf_layout(b)
    align = 32
    kvs = {k["key"]: b[k["off"]:(L["kvs"][i + 1]["off"] if i + 1 < len(L["kvs"]) else L["kv_end"])]
           for i, k in enumerate(L["kvs"])}
    for k in L["kvs"]:
        if k["key"] == "general.alignment":
            align = struct.unpack_from("<I", b, k["val_off"])[0]
    for item in spec.split(";"):
        key, _, tv = item.partition("=")
        t, _, val = tv.partition(":")
        code, fmt = KV_TYPES[t]
        if t == "str":
            v = struct.pack("<Q", len(val.encode())) + val.encode()
        else:
            v = struct.pack(fmt, float(val) if t[0] == "f" else int(val))
        kvs[key] = struct.pack("<Q", len(key.encode())) + key.encode() + struct.pack("<I", code) + v
    data_off = (L["ti_end"] + align - 1) // align * align
    head = b[:4] + struct.pack("<IQQ", struct.unpack_from("<I", b, 4)[0], L["n_tensors"], len(kvs))
    meta = head + b"".join(kvs.values()) + b[L["kv_end"]:L["ti_end"]]
    return meta + b"\0" * ((-len(meta)) % align) + b[data_off:]


def make_model(spec, base, path):
    """Writes the broken file named by spec; returns the path to run on."""
    if spec.startswith("kv:"):
        with open(path, "wb") as f:
            f.write(set_kvs(base, spec[3:]))
        return path
    b = bytearray(base)
    L = gguf_layout(bytes(b))
    put = lambda fmt, off, v: struct.pack_into(fmt, b, off, v)
    kv = lambda key: next(k for k in L["kvs"] if k["key"] == key)
    ti = lambda i: L["tis"][i]
    if spec == "empty": b = b""
    elif spec == "cut3": b = b[:3]
    elif spec == "cut_header": b = b[:24]
    elif spec == "cut_kv": b = b[:(24 + L["kv_end"]) // 2]
    elif spec == "cut_tinfo": b = b[:(L["kv_end"] + L["ti_end"]) // 2]
    elif spec == "cut_data": b = b[:(L["ti_end"] + len(b)) // 2]
    elif spec == "cut_last_byte": b = b[:-1]
    elif spec == "magic": b[:4] = b"GGUX"
    elif spec == "magic_ggml": b[:4] = b"lmgg"
    elif spec == "version1": put("<I", 4, 1)
    elif spec == "version99": put("<I", 4, 99)
    elif spec == "n_tensors_huge": put("<Q", 8, (1 << 63) - 1)
    elif spec == "n_tensors_plus1": put("<Q", 8, L["n_tensors"] + 1)
    elif spec == "n_kv_huge": put("<Q", 16, 1 << 40)
    elif spec == "key_len_huge": put("<Q", L["kvs"][0]["off"], 1 << 60)
    elif spec == "bad_vtype": put("<I", L["kvs"][0]["type_off"], 99)
    elif spec == "array_huge": put("<Q", kv("tokenizer.ggml.tokens")["val_off"] + 4, 1 << 50)
    elif spec == "n_dims_100": put("<I", ti(0)["nd_off"], 100)
    elif spec == "ne_huge": put("<Q", ti(0)["ne_off"], 1 << 62)
    elif spec == "ne_zero": put("<Q", ti(0)["ne_off"], 0)
    elif spec == "ne_product_overflow":
        put("<Q", ti(0)["ne_off"], 1 << 40)
        if ti(0)["n_dims"] > 1: put("<Q", ti(0)["ne_off"] + 8, 1 << 40)
    elif spec == "offset_past_end": put("<Q", ti(len(L["tis"]) - 1)["offset_off"], len(b))
    elif spec == "offset_huge": put("<Q", ti(0)["offset_off"], (1 << 64) - 32)
    elif spec == "offset_misaligned":
        o = ti(1)["offset_off"]; put("<Q", o, struct.unpack_from("<Q", b, o)[0] + 1)
    elif spec == "type_999": put("<I", ti(0)["type_off"], 999)
    elif spec == "type_removed": put("<I", ti(0)["type_off"], 4)  # Q4_2, dropped from ggml
    elif spec == "dup_tensor_name":
        a = next(t for t in L["tis"] if t["name"].endswith("attn_q.weight"))
        c = next(t for t in L["tis"] if t["name"] == a["name"].replace("attn_q", "attn_k"))
        b[c["off"] + 8:c["off"] + 8 + len(c["name"])] = a["name"].encode()
    elif spec == "missing_tensor":  # rename a needed tensor to something unknown
        t = next(t for t in L["tis"] if t["name"].endswith("ffn_up.weight"))
        b[t["off"] + 8:t["off"] + 8 + len(t["name"])] = t["name"].replace("ffn_up", "ffn_xx").encode()
    elif spec == "directory":
        os.makedirs(path, exist_ok=True); return path
    elif spec == "missing": return path + ".does-not-exist"
    elif spec == "text": b = b"this is not a model\n" * 100
    else: raise ValueError("unknown model generator " + spec)
    with open(path, "wb") as f:
        f.write(bytes(b))
    return path


def run_model_row(row, binary, base, tmp):
    exp = row["expect"]
    path = make_model(row["model_gen"], base, os.path.join(tmp, row["id"] + ".gguf"))
    for cmd in (["info", "-m", path], ["serve", "--port", "0", "-t", "1", "-m", path]):
        try:
            p = subprocess.run([binary] + cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        except subprocess.TimeoutExpired:
            return "%s: no exit within 30 s" % cmd[0]
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        if SAN_RE.search(out):
            return "%s: sanitizer report: %s" % (cmd[0], out[-800:])
        if p.returncode < 0 or p.returncode >= 128:
            return "%s: crashed (status %d): %s" % (cmd[0], p.returncode, out[-300:])
        if p.returncode == 0:
            return "%s: exit status 0 for a broken model: %s" % (cmd[0], out[-300:])
        if exp["msg"].lower() not in out.lower():
            return "%s: message lacks %r: %s" % (cmd[0], exp["msg"], out.strip()[-300:])
    return None


# ---- main -----------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("SPECULA_BIN", "bin/specula"))
    ap.add_argument("--model", default=None, help="model to serve (default: the bundled one)")
    ap.add_argument("--small-model", default="models/specula-code-draft-f16.gguf",
                    help="a valid GGUF to corrupt for the model-file rows")
    ap.add_argument("--table", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_inputs.json"))
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    rows = json.load(open(a.table))
    if a.only:
        keep = set(a.only.split(","))
        rows = [r for r in rows if r["id"] in keep or r["cat"] in keep]
    tally = Tally()
    report = tally.report
    tmp = tempfile.mkdtemp(prefix="specula-bad-")
    global RSS_SLACK_MB
    RSS_SLACK_MB = asan_quarantine_mb(a.bin)
    servers = {}
    try:
        margs = ["-m", a.model] if a.model else []
        # --spec off: no draft is loaded, so a request for draft speculation is refused
        small = ["-c", "512", "--max-seqs", "4", "--max-queue", "4", "--max-body", "1M", "--spec", "off"] + margs
        if any(r.get("server", "main") == "main" and r["cat"] != "model_file" for r in rows):
            servers["main"] = Server("main", a.bin, small + ["--chat-template", "chatml"], tmp)
        if any(r.get("server") == "big" for r in rows):  # bodies up to 8 MiB, 8 at once
            servers["big"] = Server("big", a.bin, small + ["--chat-template", "chatml", "--max-body", "8M",
                                                           "--max-body-total", "80M", "--max-queue", "16"], tmp)
        if any(r.get("server") == "auth" for r in rows):
            # with several keys /metrics is closed unless it has its own key
            servers["auth"] = Server("auth", a.bin, small + ["--api-key", KEYS[0], "--api-key", KEYS[1],
                                                            "--metrics-key", METRICS_KEY], tmp)
            servers["auth"].headers = {"Authorization": "Bearer " + KEYS[0]}
            servers["auth"].metrics_headers = {"Authorization": "Bearer " + METRICS_KEY}
        base = open(a.small_model, "rb").read()
        for row in rows:
            if row["cat"] == "model_file":
                try:
                    report(row["id"], run_model_row(row, a.bin, base, tmp))
                except Exception as e:
                    report(row["id"], "driver error %r" % e)
                continue
            srv = servers[row.get("server", "main")]
            try:
                err = run_http_row(row, srv)
            except Exception as e:
                err = "driver error %r" % e
            after = check_serving(srv)
            if after:
                err = (err + "; " if err else "") + "the next normal request failed: " + after
            report(row["id"] + " (" + row["desc"] + ")", err)
        for name, srv in servers.items():
            err = None
            try:
                mh = getattr(srv, "metrics_headers", srv.headers)
                # idle first (a request's blocks go back when it ends), then
                # read the block count again: it must be 0, and it must be there
                idle = wait_idle(srv.port, mh)
                st, m = metrics(srv.port, mh)
                in_use = m.get('specula_kv_blocks{state="in_use"}')
                if st != 200 or not idle:
                    err = "/metrics: HTTP %d, active %s" % (st, m.get("specula_requests_active"))
                elif in_use is None:
                    err = "/metrics has no specula_kv_blocks{state=\"in_use\"}"
                elif in_use != 0:
                    err = "%d KV blocks still in use with no request active" % in_use
            except Exception as e:
                err = "/metrics failed: %r" % e
            rc = srv.stop()
            if not err and rc != 0:
                err = "exit status %s on SIGTERM" % rc
            if not err and SAN_RE.search(srv.text()):
                err = "sanitizer report: " + srv.text()[-1500:]
            report("server %s alive at the end, /metrics idle, clean exit, no sanitizer report" % name, err)
    except RuntimeError as e:
        report("servers start", str(e))
    finally:
        for srv in servers.values():
            srv.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.result()


if __name__ == "__main__":
    sys.exit(main())
