#!/usr/bin/env python3
"""Writes a LLaMA-architecture GGUF with random weights and the shapes of a real model, for GPU checks and speed
runs on machines where the real file cannot go (the random weights make its text meaningless; the work per token
is the real model's). Needs numpy only.

    synthetic_gguf.py --shape smollm2-135m --out model.gguf [--seed 1]

Weights are F16 (norm gains F32), N(0, 1/cols) so that activations keep unit scale through the layers.
"""
import argparse
import struct

import numpy as np

SHAPES = {
    # name: layers, embd, ff, heads, kv_heads, head_dim, vocab, ctx
    "smollm2-135m": (30, 576, 1536, 9, 3, 64, 49152, 8192),
    "llama-1b": (16, 2048, 8192, 32, 8, 64, 128256, 131072),
    "tiny": (2, 128, 256, 4, 2, 32, 512, 4096),
}

GGUF_U32, GGUF_F32, GGUF_STRING, GGUF_ARRAY = 4, 6, 8, 9
TYPE_F32, TYPE_F16 = 0, 1
ALIGN = 32



def vocab_tokens(vocab):
    """<unk>, <s>, </s>, the SentencePiece space and single letters and digits (so a text prompt such as
    "hello world" tokenizes), then placeholders <tN>."""
    spelled = ["<unk>", "<s>", "</s>", "\u2581"] + list("abcdefghijklmnopqrstuvwxyz0123456789")
    return spelled + [f"<t{i}>" for i in range(len(spelled), vocab)]

def put_str(out, s):
    b = s.encode()
    out += struct.pack("<Q", len(b)) + b


def kv_u32(out, k, v):
    put_str(out, k)
    out += struct.pack("<II", GGUF_U32, v)


def kv_f32(out, k, v):
    put_str(out, k)
    out += struct.pack("<If", GGUF_F32, v)


def kv_str(out, k, v):
    put_str(out, k)
    out += struct.pack("<I", GGUF_STRING)
    put_str(out, v)


def kv_str_array(out, k, items):
    put_str(out, k)
    out += struct.pack("<IIQ", GGUF_ARRAY, GGUF_STRING, len(items))
    for s in items:
        put_str(out, s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    layers, embd, ff, heads, kv_heads, head_dim, vocab, ctx = SHAPES[a.shape]
    rng = np.random.default_rng(a.seed)

    tensors = []  # (name, rows, cols, type, array)

    def mat(name, rows, cols):
        w = (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float16)
        tensors.append((name, rows, cols, TYPE_F16, w))

    def gain(name, n):
        tensors.append((name, 1, n, TYPE_F32, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)))

    emb = rng.standard_normal((vocab, embd), dtype=np.float32).astype(np.float16)
    tensors.append(("token_embd.weight", vocab, embd, TYPE_F16, emb))
    gain("output_norm.weight", embd)
    for l in range(layers):
        p = f"blk.{l}."
        gain(p + "attn_norm.weight", embd)
        mat(p + "attn_q.weight", heads * head_dim, embd)
        mat(p + "attn_k.weight", kv_heads * head_dim, embd)
        mat(p + "attn_v.weight", kv_heads * head_dim, embd)
        mat(p + "attn_output.weight", embd, heads * head_dim)
        gain(p + "ffn_norm.weight", embd)
        mat(p + "ffn_gate.weight", ff, embd)
        mat(p + "ffn_up.weight", ff, embd)
        mat(p + "ffn_down.weight", embd, ff)

    kvs = bytearray()
    n_kv = 0
    for fn, k, v in [
        (kv_str, "general.architecture", "llama"),
        (kv_str, "general.name", f"synthetic-{a.shape}"),
        (kv_u32, "llama.block_count", layers),
        (kv_u32, "llama.embedding_length", embd),
        (kv_u32, "llama.feed_forward_length", ff),
        (kv_u32, "llama.attention.head_count", heads),
        (kv_u32, "llama.attention.head_count_kv", kv_heads),
        (kv_u32, "llama.context_length", ctx),
        (kv_f32, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        (kv_f32, "llama.rope.freq_base", 100000.0),
        (kv_str, "tokenizer.ggml.model", "llama"),
        (kv_str_array, "tokenizer.ggml.tokens", vocab_tokens(vocab)),
    ]:
        fn(kvs, k, v)
        n_kv += 1

    infos = bytearray()
    offset = 0
    for name, rows, cols, typ, arr in tensors:
        put_str(infos, name)
        if rows == 1:
            infos += struct.pack("<IQ", 1, cols)
        else:
            infos += struct.pack("<IQQ", 2, cols, rows)
        infos += struct.pack("<IQ", typ, offset)
        offset += (arr.nbytes + ALIGN - 1) // ALIGN * ALIGN

    with open(a.out, "wb") as f:
        head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv) + bytes(kvs) + bytes(infos)
        f.write(head)
        f.write(b"\0" * ((-len(head)) % ALIGN))
        for _, _, _, _, arr in tensors:
            b = arr.tobytes()
            f.write(b)
            f.write(b"\0" * ((-len(b)) % ALIGN))
    print(f"{a.out}: {a.shape}, {sum(t[4].size for t in tensors) / 1e6:.1f} M parameters")


if __name__ == "__main__":
    main()
