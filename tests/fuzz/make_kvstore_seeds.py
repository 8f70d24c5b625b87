#!/usr/bin/env python3
"""make_kvstore_seeds.py: seeds for fuzz_kvstore (tests/fuzz/corpus/kvstore):
small disk-tier stores (512-byte pages) in the format src/kv/disk_tier.c
writes, with rows whose checksums are right (disk_sum, ported below),
one with a wrong checksum, one of another layout, and an older format.
Block layout: block size 4, one layer, kv_dim 4, F16 (64 bytes of K/V);
block b has hash bytes b*32+j, tokens b*4+j, K/V bytes (b+i) & 255;
the model fingerprint is bytes 0..31. Usage: make_kvstore_seeds.py OUTDIR"""
import os
import sqlite3
import struct
import sys

M = (1 << 64) - 1
P1, P2, P3, P4 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def lane(acc, w):
    return (rotl((acc + w * P2) & M, 31) * P1) & M


def disk_sum(seed, data):
    n, p = len(data), 0
    a, b, c, d = (seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M
    if n >= 32:
        while n - p >= 32:
            w = struct.unpack_from("<4Q", data, p)
            a, b, c, d = lane(a, w[0]), lane(b, w[1]), lane(c, w[2]), lane(d, w[3])
            p += 32
        h = (rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18)) & M
    else:
        h = (seed + P3) & M
    h = (h + n) & M
    while n - p >= 8:
        h = (rotl(h ^ lane(0, struct.unpack_from("<Q", data, p)[0]), 27) * P1 + P4) & M
        p += 8
    last = int.from_bytes(data[p:] + bytes(8 - (n - p)), "little")
    h = (rotl(h ^ ((last * P1) & M), 23) * P2 + P3) & M
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


def row(b, version=2, kv_type=1, bs=4, n_layer=1, kv_dim=4, bad=False):
    fp = bytes(range(32))
    h = bytes((b * 32 + j) & 255 for j in range(32))
    tokens = struct.pack("<4i", *[b * 4 + j for j in range(4)])
    kv = bytes((b + i) & 255 for i in range(64))
    head = struct.pack("<5i", version, kv_type, bs, n_layer, kv_dim) + fp + h
    s = disk_sum(disk_sum(disk_sum(0x5350454355, head), tokens), kv)
    if bad:
        s ^= 1
    if s >= 1 << 63:
        s -= 1 << 64
    return (h, fp, kv_type, bs, n_layer, kv_dim, version, tokens, s, kv)


SCHEMA = """
CREATE TABLE meta(k TEXT PRIMARY KEY, v);
CREATE TABLE blocks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL, fp BLOB NOT NULL,
  kv_type INTEGER NOT NULL, block_size INTEGER NOT NULL, n_layer INTEGER NOT NULL,
  kv_dim INTEGER NOT NULL, version INTEGER NOT NULL, tokens BLOB NOT NULL,
  sum INTEGER NOT NULL, kv BLOB NOT NULL);
CREATE UNIQUE INDEX blocks_key ON blocks(hash, fp, kv_type, block_size, n_layer, kv_dim);
CREATE TABLE lru(id INTEGER PRIMARY KEY, used INTEGER NOT NULL);
CREATE INDEX lru_used ON lru(used);
"""


def store(path, rows, fmt=2):
    if os.path.exists(path):
        os.remove(path)
    c = sqlite3.connect(path)
    c.execute("PRAGMA page_size = 512")
    c.executescript(SCHEMA)
    c.execute("INSERT INTO meta VALUES('format', ?)", (fmt,))
    c.executemany("INSERT INTO blocks(hash, fp, kv_type, block_size, n_layer, kv_dim, version, "
                  "tokens, sum, kv) VALUES(?,?,?,?,?,?,?,?,?,?)", rows)
    c.execute("INSERT INTO lru(id, used) SELECT id, id FROM blocks")
    c.commit()
    c.close()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    store(os.path.join(out, "good"), [row(b) for b in range(4)])
    store(os.path.join(out, "bad_sum"), [row(0), row(1, bad=True)])
    store(os.path.join(out, "other_layout"), [row(0, kv_type=0), row(1, bs=8)])
    store(os.path.join(out, "older_format"), [row(0)], fmt=0)
    store(os.path.join(out, "empty"), [])


if __name__ == "__main__":
    main()
