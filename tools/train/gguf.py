"""Minimal GGUF v3 reader/writer (metadata + optional F32/F16 tensors), from the spec.

Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then
n_kv of (string key, u32 type, value), then n_tensors of (string name,
u32 n_dims, u64 dims[n_dims] (innermost first), u32 ggml type, u64 offset
into the data section), padding to general.alignment (32), the data section
(each tensor's offset a multiple of the alignment).  A string is u64 length +
UTF-8 bytes (no NUL); an array is u32 element type + u64 count + elements.
"""
import struct

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_FMT = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
        FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32


class Arr:
    """An array value: Arr(elem_type, [values])."""

    def __init__(self, etype, values):
        self.etype, self.values = etype, list(values)


def _str(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _val(vtype, v):
    if vtype == STRING:
        return _str(v)
    if vtype == ARRAY:
        if v.etype in _FMT:  # pack numeric arrays in one go
            return struct.pack("<IQ", v.etype, len(v.values)) + struct.pack(
                "<%d%s" % (len(v.values), _FMT[v.etype][1]), *v.values)
        return struct.pack("<IQ", v.etype, len(v.values)) + b"".join(_val(v.etype, x) for x in v.values)
    return struct.pack(_FMT[vtype], v)


def _infer(v):
    if isinstance(v, Arr):
        return ARRAY
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return UINT32 if 0 <= v < 2**32 else INT64
    if isinstance(v, float):
        return FLOAT32
    return STRING


def write(path, kv, tensors=()):
    """kv: list of (key, value) or (key, type, value); tensors: list of
    (name, ggml_type, dims innermost-first, raw bytes)."""
    out = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for item in kv:
        key, vtype, v = item if len(item) == 3 else (item[0], _infer(item[1]), item[1])
        out += [_str(key), struct.pack("<I", vtype), _val(vtype, v)]
    off = 0
    for name, gtype, dims, data in tensors:
        out += [_str(name), struct.pack("<I", len(dims)), struct.pack("<%dQ" % len(dims), *dims),
                struct.pack("<IQ", gtype, off)]
        off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
    head = b"".join(out)
    head += b"\0" * (-len(head) % ALIGN)
    with open(path, "wb") as fh:
        fh.write(head)
        for _, _, _, data in tensors:
            fh.write(data)
            fh.write(b"\0" * (-len(data) % ALIGN))


def read_kv(path):
    """The metadata of a GGUF file as {key: value} (arrays as Python lists)."""
    kv, _ = read(path)
    return {k: (v.values if isinstance(v, Arr) else v) for k, _, v in kv}


def read(path):
    """The whole file: (kv, tensors). kv is a list of (key, type, value) in file
    order with arrays as Arr, so that it can be passed back to write();
    tensors is {name: (ggml_type, dims innermost-first, raw bytes)}."""
    with open(path, "rb") as fh:
        b = fh.read()
    assert b[:4] == b"GGUF", "%s: not a GGUF file" % path
    ver, nt, nkv = struct.unpack_from("<IQQ", b, 4)
    assert ver in (2, 3), "%s: GGUF version %d" % (path, ver)
    p = 24

    def rd(t):
        nonlocal p
        if t == STRING:
            (n,) = struct.unpack_from("<Q", b, p)
            p += 8 + n
            return b[p - n:p].decode("utf-8", "replace")
        if t == ARRAY:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            if et in _FMT:
                f = _FMT[et][1]
                vals = list(struct.unpack_from("<%d%s" % (n, f), b, p))
                p += n * struct.calcsize("<" + f)
                return Arr(et, vals)
            return Arr(et, [rd(et) for _ in range(n)])
        (v,) = struct.unpack_from(_FMT[t], b, p)
        p += struct.calcsize(_FMT[t])
        return v

    kv = []
    for _ in range(nkv):
        k = rd(STRING)
        (t,) = struct.unpack_from("<I", b, p)
        p += 4
        kv.append((k, t, rd(t)))
    infos = []
    for _ in range(nt):
        name = rd(STRING)
        (nd,) = struct.unpack_from("<I", b, p)
        dims = list(struct.unpack_from("<%dQ" % nd, b, p + 4))
        gtype, off = struct.unpack_from("<IQ", b, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        infos.append((name, gtype, dims, off))
    align = dict((k, v) for k, _, v in kv).get("general.alignment", ALIGN)
    base = (p + align - 1) // align * align
    esize = {GGML_F32: 4, GGML_F16: 2}
    tensors = {}
    for name, gtype, dims, off in infos:
        n = 1
        for d in dims:
            n *= d
        size = n * esize[gtype] if gtype in esize else 0  # other types: no data read
        tensors[name] = (gtype, dims, b[base + off:base + off + size])
    return kv, tensors
