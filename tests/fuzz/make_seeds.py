#!/usr/bin/env python3
"""Writes the fuzz seed corpora into tests/fuzz/corpus/<target>/.

Run from the project root: python3 tests/fuzz/make_seeds.py. The output is
committed; rerun only to change the seeds. Each seed is small (< 64 KB).
The GGUF seeds are built here byte by byte (tiny SentencePiece and BPE
vocabularies, every value type, tensors, alignment) so they do not depend
on any other file; two more are the first bytes of the reference
vocabularies when ../shared/reference is there.
"""
import json
import os
import struct

OUT = "tests/fuzz/corpus"
REF = os.environ.get("SPECULA_REF_DIR", "../shared/reference")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    assert len(data) < 65536, name
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- GGUF ------------------------------------------------------------------
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gval(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gval(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, type, dims, data bytes)]."""
    h = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        h += gstr(k) + struct.pack("<I", t) + gval(t, v)
    off, data = 0, b""
    for name, tt, dims, raw in tensors:
        h += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        h += struct.pack("<IQ", tt, off)
        pad = (-len(raw)) % align
        data += raw + b"\0" * pad
        off += len(raw) + pad
    h += b"\0" * ((-len(h)) % align)
    return h + data


def f32s(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def spm_vocab(extra_kvs=()):
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    words = ["\u2581", "\u2581H", "ello", "\u2581the", "e", "l", "o", "\u2581w", "orld", "\u2581\u2581",
             "\u4f60", "\u597d", "\u2581\u0417", "\u0434", "ра", "\u2581a", "b", "ab", "\u2581ab", "<|im_end|>"]
    toks += words
    types += [1] * (len(words) - 1) + [3]
    scores = [0.0] * 259 + [-float(i) for i in range(len(words))]
    return [
        ("general.architecture", STR, "llama"),
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, toks)),
        ("tokenizer.ggml.scores", ARR, (F32, scores)),
        ("tokenizer.ggml.token_type", ARR, (I32, types)),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.ggml.unknown_token_id", U32, 0),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
    ] + list(extra_kvs)


def byte_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_vocab(pre, specials):
    bu = byte_unicode()
    toks = [bu[b] for b in range(256)]
    merges = ["\u0120 t", "h e", "\u0120t he", "l l", "o r", "\u0120 w", "\u0120w or", "e l", "el l", "ell o",
              "1 2", "12 3", "\u0120 \u0120"]
    for m in merges:
        toks.append(m.replace(" ", ""))
    toks += specials
    types = [1] * (len(toks) - len(specials)) + [3] * len(specials)
    return [
        ("general.architecture", STR, "qwen2" if pre == "qwen2" else "gpt2"),
        ("tokenizer.ggml.model", STR, "gpt2"),
        ("tokenizer.ggml.pre", STR, pre),
        ("tokenizer.ggml.tokens", ARR, (STR, toks)),
        ("tokenizer.ggml.token_type", ARR, (I32, types)),
        ("tokenizer.ggml.merges", ARR, (STR, merges)),
        ("tokenizer.ggml.bos_token_id", U32, len(toks) - len(specials)),
        ("tokenizer.ggml.eos_token_id", U32, len(toks) - 1),
    ]


def gguf_seeds():
    put("gguf", "empty_v3.gguf", gguf([]))
    put("gguf", "empty_v2.gguf", gguf([], version=2))
    allt = [("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 60000), ("i16", I16, -300),
            ("u32", U32, 4000000000), ("i32", I32, -7), ("f32", F32, 1.5), ("bool", BOOL, True),
            ("str", STR, "h\u00e9llo\n"), ("u64", U64, 2**63), ("i64", I64, -2**40), ("f64", F64, 0.25),
            ("arr.i32", ARR, (I32, [1, 2, 3])), ("arr.str", ARR, (STR, ["a", "", "\u4f60"])),
            ("arr.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"])])), ("arr.empty", ARR, (F32, [])),
            ("general.alignment", U32, 64)]
    put("gguf", "all_types.gguf", gguf(allt, align=64))
    tensors = [("tok_embd.weight", 0, [4, 2], f32s(*range(8))),          # F32
               ("norm.weight", 1, [8], struct.pack("<8e", *[1.0] * 8)),  # F16
               ("q8.weight", 8, [32, 1], struct.pack("<e", 0.5) + bytes(range(32)))]  # Q8_0
    put("gguf", "tensors.gguf", gguf([("general.architecture", STR, "llama")], tensors))
    put("gguf", "tiny_spm.gguf", gguf(spm_vocab(), tensors[:1]))
    put("gguf", "tiny_spm_v2.gguf", gguf(spm_vocab([("tokenizer.ggml.add_space_prefix", BOOL, False)]),
                                         version=2))
    put("gguf", "tiny_bpe_gpt2.gguf", gguf(bpe_vocab("gpt-2", ["<|endoftext|>"])))
    put("gguf", "tiny_bpe_qwen2.gguf", gguf(bpe_vocab("qwen2", ["<|im_start|>", "<|im_end|>"]) + [
        ("tokenizer.chat_template", STR, "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                                         "{{ m.content }}<|im_end|>\n{% endfor %}")]))
    put("gguf", "tiny_bpe_llama3.gguf", gguf(bpe_vocab("llama-bpe", ["<|begin_of_text|>", "<|eot_id|>"])))
    for name, n in (("ggml-vocab-llama-spm.gguf", 4096), ("ggml-vocab-gpt-2.gguf", 8192)):
        p = os.path.join(REF, "vocab", name)
        if os.path.exists(p):
            with open(p, "rb") as f:
                put("gguf", "head_of_" + name, f.read(n))


# ---- tokenizer -------------------------------------------------------------
TEXTS = [
    "Hello world", " Hello world", "Hello World!", "  leading spaces\tand\ttabs\r\n",
    "The quick brown fox jumps over the lazy dog. 1234567890",
    "int main(void) { return printf(\"%d\\n\", 42); }\n",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",                        # Chinese
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",  # Russian
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",  # Arabic
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",  # Hindi
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",                # Korean
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c \u30ab\u30bf\u30ab\u30ca",  # Japanese
    "\u1f10\u03bd \u1f00\u03c1\u03c7\u1fc7 \u1f26\u03bd \u1f41 \u03bb\u03cc\u03b3\u03bf\u03c2",  # Greek
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 flags \U0001f1fa\U0001f1f8",
    "<s>[INST] hi [/INST]</s><|endoftext|><|im_start|>user\nhi<|im_end|>",
    "   \n\n\n   ", "", "a", "\u2581already\u2581spm", "don't you're I'LL we've",
    "3.14159 1e-10 0x1F 1,000,000", "\t\t\tdef f(x):\n\t\t\t\treturn x**2\n",
]
BAD = [b"\xff\xfe\x00bad", b"\xc3\x28 \xe2\x82 \xf0\x9f\x98", b"\xed\xa0\x80 surrogate",
       b"\xf4\x90\x80\x80 too big", b"\xc0\xaf overlong", b"\x00\x01\x02\x7f\x1b[0m"]


def tokenizer_seeds():
    i = 0
    for t in TEXTS:
        for mode in (0, 1, 2 | 4, 3 | 4 | 8 | 16):
            put("tokenizer", "text_%02d_m%02d" % (i, mode), bytes([mode]) + t.encode())
        i += 1
    for j, b in enumerate(BAD):
        put("tokenizer", "bad_%d_spm" % j, bytes([8]) + b)
        put("tokenizer", "bad_%d_bpe" % j, bytes([9]) + b)
    put("tokenizer", "ids_spm", bytes([8]) + struct.pack("<8i", 1, 2, 3, 100, 259, 31999, 5000, 29871))
    put("tokenizer", "ids_bpe", bytes([9]) + struct.pack("<8i", 50256, 220, 198, 0, 255, 1000, 25, 30))


# ---- requests ----------------------------------------------------------------
def request_seeds():
    comp = [
        {"prompt": "Once upon a time"},
        {"model": "specula", "prompt": "def f(x):", "max_tokens": 32, "temperature": 0, "seed": 7},
        {"prompt": [1, 2, 3, 4], "max_tokens": 8, "logprobs": 5, "stop": ["\n", "END"]},
        {"prompt": [[10, 20, 30]], "stream": True, "stream_options": {"include_usage": True}},
        {"prompt": ["just one"], "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 1.5,
         "frequency_penalty": -0.5, "n": 1, "best_of": 1, "echo": False, "user": "u1",
         "cache_salt": "tenant", "speculative": {"method": "ngram", "k": 4}},
        {"prompt": "x", "max_completion_tokens": 5, "stop": "stop", "speculative": {"method": "off"}},
        {"prompt": "x", "temperature": 3},
        {"prompt": 5}, {"prompt": []}, {"prompt": [1.5]}, {"prompt": [-1]},
    ]
    chat = [
        {"messages": [{"role": "user", "content": "Hello!"}]},
        {"model": "specula", "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "part 1 "}, {"type": "text", "text": "part 2"}]}],
         "max_tokens": 16, "logprobs": True, "top_logprobs": 3, "stream": True},
        {"messages": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "\u4f60\u597d"},
                      {"role": "assistant", "content": None}], "stop": ["<|im_end|>"]},
        {"messages": [{"role": "system", "content": "only system"}]},
        {"messages": [{"role": "tool", "content": "x"}]},
        {"messages": []},
    ]
    for i, r in enumerate(comp):
        put("request", "completions_%02d.json" % i, b"\x00" + json.dumps(r).encode())
    for i, r in enumerate(chat):
        for tm in range(7):
            if i > 1 and tm > 1:
                continue
            put("request", "chat_%02d_t%d.json" % (i, tm), bytes([1 | tm << 2]) + json.dumps(r).encode())
    put("request", "chat_bpe.json", bytes([1 | 1 << 2 | 1 << 5]) + json.dumps(chat[1]).encode())
    tools = {"messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22C"},
        {"role": "user", "content": "and Rome?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z][a-z]+$"}},
            "required": ["city"]}}}], "tool_choice": "auto", "parallel_tool_calls": True}
    for tm in range(7):  # tools in every family's markup, auto (lazy) and required
        put("request", "chat_tools_t%d.json" % tm, bytes([1 | tm << 2]) + json.dumps(tools).encode())
    put("request", "chat_tools_required.json", bytes([1 | 1 << 2]) + json.dumps(dict(tools, tool_choice="required")).encode())
    tok = [{"prompt": "Hello world"}, {"content": "\u4f60\u597d <s>", "add_special": False},
           {"prompt": "x", "add_special": "yes"}]
    for i, r in enumerate(tok):
        put("request", "tokenize_%d.json" % i, b"\x02" + json.dumps(r).encode())
        put("request", "tokenize_%d_bpe.json" % i, bytes([2 | 1 << 5]) + json.dumps(r).encode())
    detok = [{"tokens": [1, 15043, 3186]}, {"tokens": [31999, 0, 2, 259, 260]}, {"tokens": []},
             {"tokens": [1.5]}, {"tokens": "abc"}]
    for i, r in enumerate(detok):
        put("request", "detokenize_%d.json" % i, b"\x03" + json.dumps(r).encode())
    put("request", "detokenize_bpe.json", bytes([3 | 1 << 5]) + json.dumps({"tokens": [15496, 995, 50256]}).encode())
    put("request", "not_json", b"\x00{\"prompt\": \"unterminated")
    put("request", "deep_json", b"\x01" + b"[" * 200 + b"]" * 200)


# ---- chat templates ------------------------------------------------------------
def chat_seeds():
    tmpls = [
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "{% set loop_messages = messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}",
        "{{ bos_token }}{% for message in messages %}{{ '[INST] <<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}{% endfor %}",
        "{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}",
        "{% for message in messages %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% endfor %}",
        "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' }}{% endfor %}",
        "no template here", "chatml", "llama3", "gemma",
    ]
    for i, t in enumerate(tmpls):
        put("chat", "detect_%02d" % i, b"\x00" + t.encode())
    sep = b"\xff"
    convs = [
        [(0, "You are helpful."), (2, "Hello"), (3, "Hi!"), (2, "How are you?")],
        [(1, "developer rules"), (2, "  padded\n\t ")],
        [(0, "only a system prompt")],
        [(2, "\u4f60\u597d"), (3 | 0x80, ""), (2, "again %s %d %n")],
        [(4, "unknown role")],
        [(3, "assistant first"), (0, "late system"), (2, "x" * 600)],
    ]
    for i, c in enumerate(convs):
        body = sep.join(bytes([r]) + t.encode() for r, t in c)
        for tm in range(7):
            put("chat", "render_%02d_t%d" % (i, tm), bytes([1 | tm << 1]) + body)


# ---- SSE / JSON text --------------------------------------------------------------
def sse_seeds():
    texts = [b"plain text", b"quote \" backslash \\ slash / newline \n cr \r tab \t",
             b"ctrl \x00\x01\x1f\x7f end", "\u4f60\u597d \U0001f600 \u2028\u2029".encode(),
             b"bad \xff\xfe \xc3\x28 \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98", b"data: [DONE]\n\n",
             b"}\"}]}\n\ndata: {", b""]
    for i, t in enumerate(texts):
        put("sse", "text_%02d" % i, b"\x00" + t)
    put("sse", "stream_spm", b"\x01" + struct.pack("<12H", 1, 15043, 3186, 29871, 232, 192, 163, 2, 0,
                                                   259, 500, 31999 % 65536))
    put("sse", "stream_bpe", b"\x03" + struct.pack("<8H", 15496, 995, 50256, 447, 247, 220, 198, 0))


if __name__ == "__main__":
    gguf_seeds()
    tokenizer_seeds()
    request_seeds()
    chat_seeds()
    sse_seeds()
