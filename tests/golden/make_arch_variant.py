#!/usr/bin/env python3
"""Rewrites a llama GGUF as another architecture of the same shape, for golden tests of architecture rows that no
small published file covers here. Standard library only (CI runs it).

  make_arch_variant.py IN.gguf OUT.gguf --arch qwen2|qwen3|phi3|llama3|gemma2 [--seed 1] [--bias-scale 0.5]
                       [--attn-softcap 1.0] [--final-softcap 4.0]

qwen2: the `llama.*` keys become `qwen2.*`, general.architecture becomes "qwen2", and every layer gains
attn_q.bias, attn_k.bias and attn_v.bias (F32, uniform in [-scale, scale] from a seeded generator, so the file is
the same on every machine). The weights are untouched: llama.cpp and tqserve then run the same numbers through
qwen2's forward pass (RoPE on halves, biases), which is all a golden test needs; the text it writes is not meant
to be good.

qwen3: as qwen2 (keys renamed, RoPE on halves), no biases; every layer gains attn_q_norm.weight and
attn_k_norm.weight (F32 [head_dim], seeded gains in [0.5, 1.5]): Qwen3's per-head RMSNorm of q and k.

phi3: keys renamed; each layer's attn_q/k/v become one attn_qkv.weight (their rows stacked) and ffn_gate/ffn_up one
ffn_up.weight (gate rows first), as Phi-3 files hold them (F32 sources only).

gemma2: keys renamed; every layer gains post_attention_norm.weight and post_ffw_norm.weight (F32 [n_embd], seeded
gains in [0.5, 1.5]); output.weight goes (Gemma ties the output to the embedding) and token_embd.weight (F32) is
divided by sqrt(n_embd), which Gemma multiplies the embedding by, so that the model keeps its own scale and writes
varied text. The metadata gains a sliding window of 8 tokens (so that the even, sliding layers differ from global
ones within a short prompt), attn_logit_softcapping 1.0 and final_logit_softcapping 4.0 (small enough to bend this
model's scores; Gemma 2's own are 50 and 30; --attn-softcap / --final-softcap change them, 0 leaves the key out).
GeGLU and RoPE on halves need no new tensor.

llama3: still a llama file, with Llama 3.1's RoPE scaling: a rope_freqs.weight tensor (F32, [n_rot / 2]) whose
entries divide the RoPE angles, computed by Llama 3.1's formula (factor 8, low 1, high 4) with an original context
of 64 tokens instead of 8192, so that on this small model most frequencies are scaled within a short prompt.

Exit 1 on a missing or malformed file.
"""
import argparse
import os
import random
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "models"))
from make_shape import llama3_rope_factors  # noqa: E402  (one formula for the shape files and the golden variant)

# GGUF value types: id -> struct format of a scalar (8 string, 9 array are handled apart).
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
F32 = 0  # ggml type id of F32 tensors


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated at byte {self.pos}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        return self.take(self.unpack("<Q")).decode("utf-8")

    def skip_value(self, vtype):
        if vtype in SCALARS:
            self.take(struct.calcsize(SCALARS[vtype]))
        elif vtype == 8:
            self.take(self.unpack("<Q"))
        elif vtype == 9:
            inner, n = self.unpack("<I"), self.unpack("<Q")
            for _ in range(n):
                self.skip_value(inner)
        else:
            raise ValueError(f"unknown value type {vtype} at byte {self.pos}")


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def read_metadata(r, n_kv):
    """The n_kv metadata entries at r: ([key, type, raw value bytes] in file order, {key: scalar or string})."""
    kvs, meta = [], {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.unpack("<I")
        start = r.pos
        r.skip_value(vtype)
        raw = r.data[start:r.pos]
        if vtype in SCALARS:
            meta[key] = struct.unpack(SCALARS[vtype], raw)[0]
        elif vtype == 8:
            meta[key] = raw[8:].decode("utf-8")
        kvs.append([key, vtype, raw])
    return kvs, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--arch", choices=["qwen2", "qwen3", "phi3", "llama3", "gemma2"], required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bias-scale", type=float, default=0.5)
    ap.add_argument("--attn-softcap", type=float, default=1.0)
    ap.add_argument("--final-softcap", type=float, default=4.0)
    a = ap.parse_args()
    if not os.path.exists(a.src):
        print(f"make_arch_variant: {a.src} is absent", file=sys.stderr)
        return 1
    with open(a.src, "rb") as f:
        r = Reader(f.read())
    if r.take(4) != b"GGUF":
        raise ValueError("not a GGUF file")
    version = r.unpack("<I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (2 or 3 expected)")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")

    kvs, meta = read_metadata(r, n_kv)
    alignment = meta.get("general.alignment", 32)
    if meta.get("general.architecture") != "llama":
        raise ValueError(f"architecture {meta.get('general.architecture')!r} (llama expected)")

    infos = []  # [name, dims, type, offset]
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
        infos.append([name, dims, r.unpack("<I"), r.unpack("<Q")])
    data_start = (r.pos + alignment - 1) // alignment * alignment
    data = r.data[data_start:]
    # [name, dims, type, bytes]: each tensor's bytes up to the next one's offset (padding included).
    ends = sorted(i[3] for i in infos)[1:] + [len(data)]
    by_offset = dict(zip(sorted(i[3] for i in infos), ends))
    tensors = [[n, d, t, data[o:by_offset[o]]] for n, d, t, o in infos]

    n_layers = meta["llama.block_count"]
    n_embd = meta["llama.embedding_length"]
    n_heads = meta["llama.attention.head_count"]
    head_dim = n_embd // n_heads
    n_kv_dim = meta.get("llama.attention.head_count_kv", n_heads) * head_dim
    rng = random.Random(a.seed)

    def f32_tensor(name, values):
        tensors.append([name, [len(values)], F32, struct.pack(f"<{len(values)}f", *values)])

    if a.arch == "llama3":
        n_rot = meta.get("llama.rope.dimension_count", head_dim)
        f32_tensor("rope_freqs.weight",
                   llama3_rope_factors(n_rot, meta.get("llama.rope.freq_base", 10000.0), 8.0, 1.0, 4.0, 64))
        return write(a, version, kvs, tensors, alignment)

    # The new metadata: same values under the new architecture's names.
    for kv in kvs:
        if kv[0] == "general.architecture":
            kv[2] = gguf_string(a.arch)
        elif kv[0].startswith("llama."):
            kv[0] = a.arch + kv[0][len("llama"):]

    if a.arch == "qwen2":  # biases: [n_embd] for q, [n_kv_heads * head_dim] for k and v
        for layer in range(n_layers):
            for part, n in (("q", n_embd), ("k", n_kv_dim), ("v", n_kv_dim)):
                f32_tensor(f"blk.{layer}.attn_{part}.bias", [rng.uniform(-a.bias_scale, a.bias_scale) for _ in range(n)])
    elif a.arch == "qwen3":  # per-head RMSNorm gains of q and k: [head_dim] each
        for layer in range(n_layers):
            for part in ("q", "k"):
                f32_tensor(f"blk.{layer}.attn_{part}_norm.weight", [rng.uniform(0.5, 1.5) for _ in range(head_dim)])
    elif a.arch == "gemma2":  # post norms, sliding window, soft caps; the output is the embedding (no output.weight)
        tensors[:] = [t for t in tensors if t[0] != "output.weight"]
        for t in tensors:  # Gemma multiplies the embedding by sqrt(n_embd): stored divided, the model sees its own
            if t[0] == "token_embd.weight" and t[2] == F32:
                n = len(t[3]) // 4
                t[3] = struct.pack(f"<{n}f", *(x / n_embd ** 0.5 for x in struct.unpack(f"<{n}f", t[3])))
        for layer in range(n_layers):
            for part in ("post_attention_norm", "post_ffw_norm"):
                f32_tensor(f"blk.{layer}.{part}.weight", [rng.uniform(0.5, 1.5) for _ in range(n_embd)])
        kvs.append(["gemma2.attention.sliding_window", 4, struct.pack("<I", 8)])
        for key, cap in (("attn", a.attn_softcap), ("final", a.final_softcap)):
            if cap > 0:
                kvs.append([f"gemma2.{key}_logit_softcapping", 6, struct.pack("<f", cap)])
    elif a.arch == "phi3":  # fused attn_qkv (q, k, v rows) and ffn_up (gate rows, then up rows)
        named = {t[0]: t for t in tensors}

        def fuse(new_name, parts):
            srcs = [named.pop(p) for p in parts]
            if any(t[2] != F32 for t in srcs):
                raise ValueError(f"{parts}: only F32 tensors can be fused here")
            cols = srcs[0][1][0]
            rows = sum(t[1][1] for t in srcs)
            body = b"".join(t[3][:4 * t[1][0] * t[1][1]] for t in srcs)
            named[new_name] = [new_name, [cols, rows], F32, body]

        for layer in range(n_layers):
            p = f"blk.{layer}."
            fuse(p + "attn_qkv.weight", [p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"])
            fuse(p + "ffn_up.weight", [p + "ffn_gate.weight", p + "ffn_up.weight"])
        tensors[:] = list(named.values())
    return write(a, version, kvs, tensors, alignment)


def write(a, version, kvs, tensors, alignment):
    """The file: header, metadata, tensor infos, then the tensors' bytes, each at an aligned offset."""
    data, offsets = bytearray(), []
    for _, _, _, body in tensors:
        data.extend(b"\0" * ((-len(data)) % alignment))
        offsets.append(len(data))
        data.extend(body)
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, vtype, raw in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + raw
    for (name, dims, ttype, _), offset in zip(tensors, offsets):
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
    out.extend(b"\0" * ((-len(out)) % alignment))
    out += data
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
    os.replace(tmp, a.out)  # never a half-written file under the final name
    print(f"make_arch_variant: wrote {a.out} ({a.arch}, {len(tensors)} tensors, {len(out)} bytes)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, KeyError, struct.error) as e:
        print(f"make_arch_variant: {e}", file=sys.stderr)
        sys.exit(1)
