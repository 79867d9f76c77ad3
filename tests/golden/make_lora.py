#!/usr/bin/env python3
"""Writes a seeded LoRA adapter (llama.cpp's GGUF format) for a base GGUF, for golden, API and benchmark tests of
adapters. Standard library only (CI runs it).

  make_lora.py BASE.gguf OUT.gguf [--rank 8] [--alpha 16] [--seed 1] [--type f32|f16] [--scale 1.0]
                                  [--targets attn_q,attn_v,ffn_up,output] [--arch NAME] [--truncate BYTES]

For each layer and target matrix NAME [rows, cols] of the base it writes NAME.lora_a ([rank, cols], GGUF dims
[cols, rank]) and NAME.lora_b ([rows, rank]), entries uniform in +-scale * sqrt(3 / cols) and +-sqrt(3 / rank), so
that B (A x) is of the order of W x: the adapter visibly changes greedy output. general.type "adapter",
adapter.type "lora", adapter.lora.alpha ALPHA, general.architecture the base's (or --arch, to make a wrong one).
--truncate cuts the file to BYTES (a damaged file for the error tests).
"""
import argparse
import math
import os
import random
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_arch_variant import Reader, gguf_string, read_metadata  # noqa: E402

F32, F16 = 0, 1


def read_base(path):
    """(metadata {key: scalar or string}, {tensor name: dims})."""
    with open(path, "rb") as f:
        r = Reader(f.read())
    if r.take(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    r.unpack("<I")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    _, meta = read_metadata(r, n_kv)
    dims = {}
    for _ in range(n_tensors):
        name = r.string()
        dims[name] = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
        r.unpack("<I")
        r.unpack("<Q")
    return meta, dims


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--type", choices=["f32", "f16"], default="f32")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--targets", default="attn_q,attn_v,ffn_up,output")
    ap.add_argument("--arch", default="")
    ap.add_argument("--truncate", type=int, default=0)
    a = ap.parse_args()
    if not os.path.exists(a.base):
        print(f"make_lora: {a.base} is absent", file=sys.stderr)
        return 1
    meta, dims = read_base(a.base)
    arch = meta["general.architecture"]
    targets = [t for t in a.targets.split(",") if t]
    names = [n for n in dims if n == "output.weight" and "output" in targets]
    names += [n for n in dims if n.startswith("blk.") and n.endswith(".weight") and n.split(".")[2] in targets]
    rng = random.Random(a.seed)
    ttype = F16 if a.type == "f16" else F32
    fmt = "e" if ttype == F16 else "f"

    def values(n, bound):
        return struct.pack(f"<{n}{fmt}", *(rng.uniform(-bound, bound) for _ in range(n)))

    tensors = []  # (name, dims ne0 first, bytes)
    for name in sorted(names):
        cols, rows = dims[name][0], dims[name][1]
        tensors.append((name + ".lora_a", [cols, a.rank], values(cols * a.rank, a.scale * math.sqrt(3 / cols))))
        tensors.append((name + ".lora_b", [a.rank, rows], values(a.rank * rows, math.sqrt(3 / a.rank))))

    kvs = [("general.architecture", 8, gguf_string(a.arch or arch)), ("general.type", 8, gguf_string("adapter")),
           ("adapter.type", 8, gguf_string("lora")), ("adapter.lora.alpha", 6, struct.pack("<f", a.alpha)),
           ("general.alignment", 4, struct.pack("<I", 32))]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, raw in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + raw
    offset, data = 0, bytearray()
    for name, d, body in tensors:
        out += gguf_string(name) + struct.pack("<I", len(d)) + b"".join(struct.pack("<Q", x) for x in d)
        out += struct.pack("<IQ", ttype, len(data))
        data += body + b"\0" * ((-len(body)) % 32)
    out += b"\0" * ((-len(out)) % 32) + data
    if a.truncate:
        out = out[:a.truncate]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".tmp", "wb") as f:
        f.write(out)
    os.replace(a.out + ".tmp", a.out)
    print(f"make_lora: wrote {a.out} ({len(tensors) // 2} matrices, rank {a.rank}, {len(out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
