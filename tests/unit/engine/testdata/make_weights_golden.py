#!/usr/bin/env python3
"""Writes weights_golden.txt: one random block per weight type and its values, dequantized by the `gguf`
Python package (gguf-py, the GGUF reference tooling), an implementation independent of ours.

  python3 -m venv /tmp/ggufenv && /tmp/ggufenv/bin/pip install gguf==0.19.0 numpy
  /tmp/ggufenv/bin/python tests/unit/engine/testdata/make_weights_golden.py > tests/unit/engine/testdata/weights_golden.txt

Format, per type: a line `TYPE name n_bytes`, a line of the block's bytes in hex, a line of the n values (%.9g).
"""
import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T, GGML_QUANT_SIZES

rng = np.random.default_rng(1234)


def half_bytes(values):
    return np.asarray(values, dtype=np.float16).tobytes()


def block(qtype):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = bytearray(rng.integers(0, 256, size=type_size, dtype=np.uint8).tobytes())
    # Keep the f16 scales finite and moderate, so the values are too.
    scales = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}
    for off in scales.get(qtype, []):
        raw[off:off + 2] = half_bytes(rng.uniform(-0.05, 0.05) if qtype in (T.Q8_0, T.Q4_0, T.Q5_0, T.Q6_K)
                                      else rng.uniform(0.001, 0.05))
    if qtype in (T.F16,):
        raw = bytearray(half_bytes(rng.normal(size=8)))
    if qtype in (T.BF16,):
        raw = bytearray((np.asarray(rng.normal(size=8), dtype=np.float32).view(np.uint32) >> 16)
                        .astype(np.uint16).tobytes())
    if qtype in (T.F32,):
        raw = bytearray(np.asarray(rng.normal(size=8), dtype=np.float32).tobytes())
    return bytes(raw)


for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q5_K, T.Q6_K, T.Q5_0, T.Q5_1]:
    data = block(qtype)
    values = quants.dequantize(np.frombuffer(data, dtype=np.uint8), qtype).reshape(-1)
    print(f"TYPE {qtype.name} {len(data)}")
    print(data.hex())
    print(" ".join(f"{float(v):.9g}" for v in values))
