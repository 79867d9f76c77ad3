#!/usr/bin/env python3
"""Writes a GGUF with a real model's architecture, shapes and metadata and seeded random weights, for speed runs at
real sizes (no real 1B-8B file is reachable from these machines, and speed does not depend on the weights' values).
Standard library only, so that tests can run it; a 1B file takes seconds, an 8B Q4_K_M (4.6 GiB) about a minute.

  make_shape.py --shape llama-3.2-1b --type q4_k_m --out M.gguf [--seed 1] [--layers N]
               [--tokenizer-from SMOLLM2.gguf | GEMMA3.gguf]   (default: the ones fetch-model.sh keeps)

Shapes (from the published configs): llama-3.2-1b (tied output, rope scaling llama3 x32), llama-3.1-8b (GQA 8,
rope scaling llama3 x8), qwen2.5-1.5b (q/k/v biases, tied), gemma-3-1b (QK norm, post norms, sliding window 512,
GeGLU, tied). --layers keeps the widths and cuts the depth (tests use 2).

Types: f16, q8_0 (every matrix Q8_0) and q4_k_m, which follows llama.cpp's Q4_K_M recipe: Q4_K, with Q6_K for the
output matrix (the token embedding when the output is tied), and for attn_v and ffn_down in the first and last
eighth of the layers and every third layer between; a matrix whose row is not a whole number of 256-blocks falls
back to Q5_0 (for Q4_K) or Q8_0 (for Q6_K), as llama.cpp does (Gemma 3 1B's 1152-wide rows).

Weights: every block is valid. Codes are uniform random bytes; each block's scales are the same, chosen so that a
matrix with C columns has entries of mean 0 and standard deviation about 1/sqrt(C): a unit-scale input gives a
unit-scale output, and with RMS norms in every layer activations stay finite over any decode length. Norm gains are
1, biases uniform in [-0.1, 0.1]. F16 entries have a random sign and mantissa and one exponent per matrix.

Tokenizer: the whole tokenizer.* metadata of a real file (SmolLM2's byte-level BPE for the Llama and Qwen shapes,
Gemma 3's SentencePiece for Gemma), its token list padded with unused tokens ("<unused_N>", type 5) to the shape's
vocabulary, so text prompts tokenize the same in both engines.
"""
import argparse
import math
import os
import random
import struct
import sys

HOME_MODELS = os.path.expanduser(os.environ.get("TQ_MODELS_DIR", "~/.cache/tqserve/models"))
SMOLLM2 = os.path.join(HOME_MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(HOME_MODELS, "gemma-3-270m-q4_k_m.gguf")

# name: arch, layers, embd, ff, heads, kv_heads, head_dim, vocab, ctx, rope_base, eps, tied, extra
SHAPES = {
    "llama-3.2-1b": ("llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, 500000.0, 1e-5, True,
                     {"llama3_rope": (32.0, 1.0, 4.0, 8192)}),
    "llama-3.1-8b": ("llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, 500000.0, 1e-5, False,
                     {"llama3_rope": (8.0, 1.0, 4.0, 8192)}),
    "qwen2.5-1.5b": ("qwen2", 28, 1536, 8960, 12, 2, 128, 151936, 32768, 1000000.0, 1e-6, True, {}),
    "gemma-3-1b": ("gemma3", 26, 1152, 6912, 4, 1, 256, 262144, 32768, 1000000.0, 1e-6, True,
                   {"sliding_window": 512}),
}

# ggml tensor type ids and (block elements, block bytes).
F32, F16, Q5_0, Q8_0, Q4_K, Q6_K = 0, 1, 6, 8, 12, 14
BLOCK = {F32: (1, 4), F16: (1, 2), Q5_0: (32, 22), Q8_0: (32, 34), Q4_K: (256, 144), Q6_K: (256, 210)}
FILE_TYPE = {"f16": 1, "q8_0": 7, "q4_k_m": 15}  # general.file_type (llama_ftype)
FALLBACK = {Q4_K: Q5_0, Q6_K: Q8_0}

# GGUF metadata value types.
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?",
              U64: "<Q", I64: "<q", F64: "<d"}
ALIGN = 32
TOKEN_UNUSED = 5


class Reader:
    """The metadata section of a GGUF file: key -> (value type, value), arrays as (inner type, list)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read(64 << 20)  # the metadata of the template files is well under 64 MiB
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated metadata")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self, vtype):
        if vtype in SCALAR_FMT:
            return self.unpack(SCALAR_FMT[vtype])
        if vtype == STRING:
            return self.take(self.unpack("<Q")).decode("utf-8", errors="surrogatepass")
        if vtype == ARRAY:
            inner, n = self.unpack("<I"), self.unpack("<Q")
            if inner in SCALAR_FMT:
                fmt = SCALAR_FMT[inner]
                size = struct.calcsize(fmt)
                return inner, list(struct.unpack(f"<{n}{fmt[1]}", self.take(n * size)))
            return inner, [self.value(inner) for _ in range(n)]
        raise ValueError(f"unknown metadata type {vtype}")

    def metadata(self):
        if self.take(4) != b"GGUF":
            raise ValueError("not a GGUF file")
        if self.unpack("<I") not in (2, 3):
            raise ValueError("GGUF version 2 or 3 expected")
        self.unpack("<Q")
        out = {}
        for _ in range(self.unpack("<Q")):
            key = self.take(self.unpack("<Q")).decode("utf-8")
            vtype = self.unpack("<I")
            out[key] = (vtype, self.value(vtype))
        return out


class Writer:
    """Metadata entries and tensors, then one file: header, infos, aligned data written tensor by tensor."""

    def __init__(self):
        self.kvs = bytearray()
        self.n_kv = 0
        self.tensors = []  # (name, dims ne0 first, type, make_bytes)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8", errors="surrogatepass")
        return struct.pack("<Q", len(b)) + b

    def _value(self, vtype, v):
        if vtype in SCALAR_FMT:
            return struct.pack(SCALAR_FMT[vtype], v)
        if vtype == STRING:
            return self._str(v)
        inner, items = v
        head = struct.pack("<IQ", inner, len(items))
        if inner in SCALAR_FMT:
            return head + struct.pack(f"<{len(items)}{SCALAR_FMT[inner][1]}", *items)
        return head + b"".join(self._value(inner, x) for x in items)

    def kv(self, key, vtype, v):
        self.kvs += self._str(key) + struct.pack("<I", vtype) + self._value(vtype, v)
        self.n_kv += 1

    def tensor(self, name, dims, ttype, make_bytes):
        self.tensors.append((name, dims, ttype, make_bytes))

    def write(self, path):
        infos = bytearray()
        offset = 0
        for name, dims, ttype, _ in self.tensors:
            infos += self._str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            infos += struct.pack("<IQ", ttype, offset)
            offset += -(-tensor_bytes(dims, ttype) // ALIGN) * ALIGN
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), self.n_kv) + bytes(self.kvs) + bytes(infos)
        tmp = path + ".tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(head + b"\0" * ((-len(head)) % ALIGN))
                for name, dims, ttype, make in self.tensors:
                    data = make()
                    if len(data) != tensor_bytes(dims, ttype):
                        raise AssertionError(f"{name}: {len(data)} bytes, {tensor_bytes(dims, ttype)} expected")
                    f.write(data)
                    f.write(b"\0" * ((-len(data)) % ALIGN))
            os.replace(tmp, path)  # never a half-written file under the final name
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return offset


def tensor_bytes(dims, ttype):
    n = math.prod(dims)
    elems, size = BLOCK[ttype]
    assert n % elems == 0
    return n // elems * size


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def random_bytes(rng, n):
    """n seeded random bytes (getrandbits takes under 2^31 bits at a time)."""
    chunk = 64 << 20
    return bytearray().join(rng.randbytes(min(chunk, n - i)) for i in range(0, n, chunk))


def blocks(n_blocks, header, header_at, block_bytes, rng):
    """n_blocks blocks of block_bytes random bytes, each with the same `header` bytes at offset header_at."""
    buf = random_bytes(rng, n_blocks * block_bytes)
    for i, b in enumerate(header):
        buf[header_at + i::block_bytes] = bytes([b]) * n_blocks
    return buf


def q4_k_scales(sc, m):
    """The 12 packed bytes of eight 6-bit scales sc[8] and mins m[8] (llama.cpp's get_scale_min_k4 inverted)."""
    q = [0] * 12
    for j in range(4):
        q[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6)
        q[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6)
        q[j + 8] = (sc[j + 4] & 15) | ((m[j + 4] & 15) << 4)
    return bytes(q)


def random_matrix(rows, cols, ttype, rng):
    """Bytes of a [rows, cols] matrix of type ttype, entries of mean ~0 and standard deviation ~1/sqrt(cols)."""
    sigma = 1.0 / math.sqrt(cols)
    n = rows * cols
    if ttype == F16:
        # |x| uniform in [a, 2a) (RMS 1.53a) with a = 2^e near sigma / 1.53; sign and mantissa random.
        e = max(-14, min(15, round(math.log2(sigma / 1.53))))
        table = bytes((r & 0x80) | ((e + 15) << 2) | (r & 3) for r in range(256))
        buf = random_bytes(rng, 2 * n)
        buf[1::2] = bytes(buf[1::2]).translate(table)
        return buf
    if ttype == Q8_0:  # d:f16, q:int8[32]; x = d*q, q uniform in [-128, 127] (sd 73.9)
        return blocks(n // 32, struct.pack("<H", f16_bits(sigma / 73.9)), 0, 34, rng)
    if ttype == Q5_0:  # d:f16, qh:u8[4], qs:u8[16]; x = d*(q - 16), q uniform in [0, 31] (sd 9.23)
        return blocks(n // 32, struct.pack("<H", f16_bits(sigma / 9.23)), 0, 22, rng)
    if ttype == Q4_K:  # d, dmin:f16, scales:u8[12], qs:u8[128]; x = d*sc*q - dmin*m; sc = m = 32, dmin = 7.5 d
        d = sigma / (32 * 4.61)
        header = struct.pack("<HH", f16_bits(d), f16_bits(7.5 * d)) + q4_k_scales([32] * 8, [32] * 8)
        return blocks(n // 256, header, 0, 144, rng)
    if ttype == Q6_K:  # ql:u8[128], qh:u8[64], scales:i8[16], d:f16; x = d*scale*(q - 32), q in [0, 63] (sd 18.5)
        header = bytes([16] * 16) + struct.pack("<H", f16_bits(sigma / (16 * 18.5)))
        return blocks(n // 256, header, 192, 210, rng)
    raise ValueError(f"type {ttype}")


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def matrix_type(kind, cols, layer, n_layers, wtype):
    """The ggml type of one matrix under the file type (kind: embd, output, attn_v, ffn_down or other)."""
    if wtype == "f16":
        return F16
    if wtype == "q8_0":
        return Q8_0
    t = Q4_K
    if kind == "output" or (kind in ("attn_v", "ffn_down") and use_more_bits(layer, n_layers)):
        t = Q6_K
    return FALLBACK[t] if cols % 256 else t


def llama3_rope_factors(n_rot, base, scale, low, high, original_ctx):
    """rope_freqs.weight: per frequency pair, the divisor of its angle (Llama 3.1's long-context scaling)."""
    low_wavelen, high_wavelen = original_ctx / low, original_ctx / high
    out = []
    for i in range(n_rot // 2):
        wavelen = 2 * math.pi * base ** (2 * i / n_rot)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(scale)
        else:
            smooth = (original_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / scale + smooth))
    return out


def copy_tokenizer(w, template_path, vocab):
    meta = Reader(template_path).metadata()
    tokens = meta["tokenizer.ggml.tokens"][1][1]
    if len(tokens) > vocab:
        raise ValueError(f"{template_path} has {len(tokens)} tokens, more than the shape's {vocab}")
    pad = vocab - len(tokens)
    for key, (vtype, value) in meta.items():
        if not key.startswith("tokenizer."):
            continue
        if key == "tokenizer.ggml.tokens":
            value = (value[0], value[1] + [f"<unused_{i}>" for i in range(pad)])
        elif key == "tokenizer.ggml.token_type":
            value = (value[0], value[1] + [TOKEN_UNUSED] * pad)
        elif key == "tokenizer.ggml.scores":
            value = (value[0], value[1] + [-1e9] * pad)
        w.kv(key, vtype, value)


def build(shape, wtype, seed, layers, tokenizer_path):
    arch, n_layers, embd, ff, heads, kv_heads, hd, vocab, ctx, base, eps, tied, extra = SHAPES[shape]
    n_layers = layers or n_layers
    rng = random.Random(seed)
    w = Writer()
    w.kv("general.architecture", STRING, arch)
    w.kv("general.name", STRING, f"synthetic {shape} ({wtype}, seed {seed})")
    w.kv("general.file_type", U32, FILE_TYPE[wtype])
    w.kv("general.alignment", U32, ALIGN)
    for key, vtype, v in [
        ("context_length", U32, ctx), ("embedding_length", U32, embd), ("block_count", U32, n_layers),
        ("feed_forward_length", U32, ff), ("attention.head_count", U32, heads),
        ("attention.head_count_kv", U32, kv_heads), ("attention.key_length", U32, hd),
        ("attention.value_length", U32, hd), ("rope.dimension_count", U32, hd), ("rope.freq_base", F32V, base),
        ("attention.layer_norm_rms_epsilon", F32V, eps), ("vocab_size", U32, vocab),
    ]:
        w.kv(f"{arch}.{key}", vtype, v)
    if "sliding_window" in extra:
        w.kv(f"{arch}.attention.sliding_window", U32, extra["sliding_window"])
    copy_tokenizer(w, tokenizer_path, vocab)

    def mat(name, rows, cols, kind, layer=0):
        t = matrix_type(kind, cols, layer, n_layers, wtype)
        sub = random.Random(rng.getrandbits(64))  # each tensor its own stream: same bytes whatever the order
        w.tensor(name, [cols, rows], t, lambda: random_matrix(rows, cols, t, sub))

    def f32(name, values):
        data = struct.pack(f"<{len(values)}f", *values)
        w.tensor(name, [len(values)], F32, lambda: data)

    def gain(name, n):
        f32(name, [1.0] * n)

    mat("token_embd.weight", vocab, embd, "output" if tied else "embd")
    gain("output_norm.weight", embd)
    if not tied:
        mat("output.weight", vocab, embd, "output")
    if "llama3_rope" in extra:
        f32("rope_freqs.weight", llama3_rope_factors(hd, base, *extra["llama3_rope"]))
    for l in range(n_layers):
        p = f"blk.{l}."
        gain(p + "attn_norm.weight", embd)
        mat(p + "attn_q.weight", heads * hd, embd, "attn_q", l)
        mat(p + "attn_k.weight", kv_heads * hd, embd, "attn_k", l)
        mat(p + "attn_v.weight", kv_heads * hd, embd, "attn_v", l)
        mat(p + "attn_output.weight", embd, heads * hd, "attn_output", l)
        if arch == "qwen2":
            for part, n in (("q", heads * hd), ("k", kv_heads * hd), ("v", kv_heads * hd)):
                f32(p + f"attn_{part}.bias", [rng.uniform(-0.1, 0.1) for _ in range(n)])
        if arch == "gemma3":
            gain(p + "attn_q_norm.weight", hd)
            gain(p + "attn_k_norm.weight", hd)
            gain(p + "post_attention_norm.weight", embd)
            gain(p + "post_ffw_norm.weight", embd)
        gain(p + "ffn_norm.weight", embd)
        mat(p + "ffn_gate.weight", ff, embd, "ffn_gate", l)
        mat(p + "ffn_up.weight", ff, embd, "ffn_up", l)
        mat(p + "ffn_down.weight", embd, ff, "ffn_down", l)
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--type", default="q4_k_m", choices=sorted(FILE_TYPE))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0, help="cut the depth to N layers (0: the shape's own)")
    ap.add_argument("--tokenizer-from", default="", help="GGUF whose tokenizer.* metadata to copy")
    a = ap.parse_args()
    tok = a.tokenizer_from or (GEMMA3 if SHAPES[a.shape][0] == "gemma3" else SMOLLM2)
    if not os.path.exists(tok):
        print(f"make_shape: tokenizer template {tok} is absent (scripts/fetch-model.sh fetches it)", file=sys.stderr)
        return 1
    if a.layers < 0:
        print("make_shape: --layers must be >= 0", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    w = build(a.shape, a.type, a.seed, a.layers, tok)
    size = w.write(a.out)
    print(f"make_shape: wrote {a.out} ({a.shape}, {a.type}, {len(w.tensors)} tensors, {size / 2**30:.2f} GiB of "
          f"weights)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
