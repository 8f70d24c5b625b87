"""sse_long.py: the first data chunks of a stream that cannot end soon.

The server coalesces a stream's text into one chunk when the reader falls
behind the engine (a loaded machine can put every token of a short stream
into one), so a check on how a stream comes in pieces needs a stream still
running while it reads: ignore_eos and the whole context (seconds of
decoding). The client leaves after `n` chunks that carry text.
"""
import http.client
import json
import urllib.parse


def first_text_chunks(url, n):
    """The first n chunks with text of a streamed completion at url (the
    server's base URL), each parsed; asserts the stream is SSE, that none of
    them ends it, and that it did not end before n pieces."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        c.request("GET", "/v1/models")
        n_ctx = json.loads(c.getresponse().read())["data"][0]["context_length"]
        c.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": n_ctx - 16,
                  "ignore_eos": True, "temperature": 0, "stream": True}), {"Content-Type": "application/json"})
        resp = c.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream"), \
            (resp.status, resp.read()[:300])
        got = []
        while len(got) < n:
            line = resp.fp.readline()
            assert line, "the stream ended after %d pieces of text" % len(got)
            if line.startswith(b"data: {"):
                ch = json.loads(line[6:])
                assert ch["choices"][0]["finish_reason"] is None, ch
                if ch["choices"][0]["text"]:
                    got.append(ch)
        return got
    finally:
        c.close()
