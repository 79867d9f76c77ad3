#!/usr/bin/env python3
"""What the KV codes see (issue 38's levers, measured without a kernel): the law of the rotated coordinates.

Runs `tqserve eval kld --dump-rows` on the calibration text (WikiText-2) and the evaluation text (Persuasion) and,
from the rows each coded page received (rotated, per layer, KV head and side), prints:
  1. codebooks: the squared coding error (1 - cos per unit vector, the encoder's scale search included) with the
     Beta-law Lloyd-Max codebook the formats use, against codebooks trained by Lloyd-Max on the calibration text's
     coordinates (pooled, per layer, per head) and evaluated on the evaluation text; and the coordinates' kurtosis
     (the Beta law of a unit vector in d dimensions: 3 d / (d + 2));
  2. per-coordinate variance: its AM/GM over a head's coordinates, the distortion a per-coordinate scale could
     remove (1.0 = nothing);
  3. a per-head mean: the squared error of coding each row as it is, against coding it minus the mean of its
     sequence's first page (tokens 1-127; token 0, the sink, is kept apart already), a mean attention could add
     back exactly as the keys' offsets are (sum of a page's weights times the mean).
Needs numpy (the report venv of bench/run-report.sh has it). Formats: plain TurboQuant codes (tqN, tqNc), one
width per side; the two-width formats (tq2.5, tq3.5) mix two codebooks in one vector and are refused.

  ~/.cache/tqserve/report-venv/bin/python bench/quality/kv_law.py [--model smollm2|gemma3] [--kv-k tq3c]
      [--kv-v tq2c] [--ctx 512] [--chunks 2]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODELS = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}
TEXTS = {"calibration": os.path.join(ROOT, "tests", "data", "wikitext-2-raw", "wiki.test.raw"),
         "evaluation": os.path.join(ROOT, "tests", "data", "austen", "persuasion.txt")}
SCALES = [1.0, 0.8, 0.9, 1.1, 1.2, 1.3]  # kernels/formats/codebook.h kCodeScales: the encoder's scale search
PAGE = 128


def bits_of(fmt):
    m = re.fullmatch(r"tq([234])c?", fmt)
    if not m:
        sys.exit(f"kv_law: {fmt}: only one-width TurboQuant formats (tq2, tq3, tq4, and their c forms)")
    return int(m.group(1))


def load(path):
    """(header [n][4] int32: layer, head, side, d; rows [n][d] f32)."""
    raw = np.fromfile(path, dtype=np.int32)
    if raw.size == 0:
        sys.exit(f"kv_law: {path} is empty: no page was coded (is the context at least one page, 128 tokens?)")
    d = int(raw[3])
    raw = raw.reshape(-1, 4 + d)
    return raw[:, :4], raw[:, 4:].view(np.float32).astype(np.float64), d


def lloyd(samples, k, init, iters=40):
    c = init.copy()
    for _ in range(iters):
        idx = np.searchsorted((c[1:] + c[:-1]) / 2, samples)
        sums = np.bincount(idx, weights=samples, minlength=k)
        counts = np.bincount(idx, minlength=k)
        c = np.where(counts > 0, sums / np.maximum(counts, 1), c)
    return np.sort(c)


def beta_codebook(d, k, n=4_000_000, seed=0):
    """Lloyd-Max on coordinates of uniform unit vectors in d dimensions, scaled by sqrt(d)."""
    g = np.random.default_rng(seed).standard_normal((n // d + 1, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    x = (g * np.sqrt(d)).ravel()
    return lloyd(x, k, np.quantile(x, (np.arange(k) + 0.5) / k), iters=80)


def unit(y, d):
    return y / np.linalg.norm(y, axis=1, keepdims=True) * np.sqrt(d)


def one_minus_cos(Y, c):
    """Per row: 1 - cos between a unit row (times sqrt(d)) and its best code over the scale search."""
    b = (c[1:] + c[:-1]) / 2
    best = np.full(len(Y), -2.0)
    norm_y = np.linalg.norm(Y, axis=1)
    for s in SCALES:
        q = c[np.searchsorted(b, Y * s)]
        best = np.maximum(best, (q * Y).sum(1) / np.linalg.norm(q, axis=1) / norm_y)
    return 1 - best


def heads(h, side):
    sel = h[:, 2] == side
    return sorted(set(map(tuple, h[sel][:, :2])))


def rows_of(h, y, side, layer=None, head=None):
    sel = h[:, 2] == side
    if layer is not None:
        sel &= h[:, 0] == layer
    if head is not None:
        sel &= h[:, 1] == head
    return y[sel]


def codebooks(cal, ev, d, side, bits):
    (hc, yc), (he, ye) = cal, ev
    k = 2 ** bits
    beta = beta_codebook(d, k)
    uc, ue = unit(yc, d), unit(ye, d)
    pooled = lloyd(rows_of(hc, uc, side).ravel(), k, beta)
    err = {"Beta law": [], "trained, pooled": [], "trained, per layer": [], "trained, per head": []}
    per_layer = {}
    kurt = []
    for layer, head in heads(hc, side):
        E = rows_of(he, ue, side, layer, head)
        if len(E) == 0:
            continue
        if layer not in per_layer:
            per_layer[layer] = lloyd(rows_of(hc, uc, side, layer).ravel(), k, beta)
        C = rows_of(hc, uc, side, layer, head)
        x = C.ravel()
        kurt.append(((x - x.mean()) ** 4).mean() / x.var() ** 2)
        for name, cb in (("Beta law", beta), ("trained, pooled", pooled), ("trained, per layer", per_layer[layer]),
                         ("trained, per head", lloyd(x, k, beta))):
            err[name].append(one_minus_cos(E, cb).mean())
    base = np.mean(err["Beta law"])
    print(f"\n{'K' if side == 0 else 'V'}, {bits}-bit codes, d {d}: mean 1 - cos on the evaluation text")
    print("| codebook | 1 - cos | vs Beta law |\n|---|---|---|")
    for name, v in err.items():
        print(f"| {name} | {np.mean(v):.5f} | {np.mean(v) / base - 1:+.1%} |")
    print(f"coordinate kurtosis per head (calibration): median {np.median(kurt):.3f}, range {min(kurt):.3f}-"
          f"{max(kurt):.3f}; the Beta law's {3 * d / (d + 2):.3f}")
    print("Beta-law codebook:", " ".join(f"{v:.3f}" for v in beta))
    print("trained, pooled:  ", " ".join(f"{v:.3f}" for v in pooled))


def coordinate_variance(cal, ev, d, side):
    (hc, yc), (he, ye) = cal, ev
    uc, ue = unit(yc, d), unit(ye, d)
    gain, left = [], []
    for layer, head in heads(hc, side):
        vc = rows_of(hc, uc, side, layer, head).var(0)
        E = rows_of(he, ue, side, layer, head)
        if len(E) == 0:
            continue
        gain.append(vc.mean() / np.exp(np.log(vc).mean()))
        r = E.var(0) / vc  # what scales set on the calibration text leave on the evaluation text
        left.append(r.mean() / np.exp(np.log(r).mean()))
    print(f"{'K' if side == 0 else 'V'}: per-coordinate variance AM/GM per head, calibration: median "
          f"{np.median(gain):.3f}, max {max(gain):.3f}; evaluation after calibration scales: median "
          f"{np.median(left):.3f}")


def squared_error(X, c, d):
    n = np.linalg.norm(X, axis=1)
    return (n ** 2 * 2 * one_minus_cos(unit(X, d), c)).sum()  # length kept exact: |x - x'|^2 = 2|x|^2 (1 - cos)


def first_page_mean(ev, d, side, bits, ctx):
    he, ye = ev
    cb = beta_codebook(d, 2 ** bits)
    seq = ctx // PAGE * PAGE  # coded rows per sequence and head
    as_is = minus_mean = 0.0
    ratios = []
    for layer, head in heads(he, side):
        X = rows_of(he, ye, side, layer, head)
        a = b = 0.0
        for s0 in range(0, len(X) - seq + 1, seq):
            S = X[s0:s0 + seq]
            a += squared_error(S, cb, d)
            b += squared_error(S - S[1:PAGE].mean(0), cb, d)
        as_is += a
        minus_mean += b
        ratios.append(b / a)
    r = np.array(ratios)
    print(f"{'K' if side == 0 else 'V'}: squared coding error, evaluation text, minus the first page's mean: "
          f"{minus_mean / as_is - 1:+.1%} (per head: median {np.median(r) - 1:+.1%}, best {r.min() - 1:+.1%}, "
          f"worst {r.max() - 1:+.1%})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tqserve", default=os.path.join(ROOT, "build", "tqserve"))
    ap.add_argument("--model", default="smollm2", choices=sorted(MODELS))
    ap.add_argument("--model-dir", default=os.path.expanduser("~/.cache/tqserve/models"))
    ap.add_argument("--kv-k", default="tq3c")
    ap.add_argument("--kv-v", default="tq2c")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    bits = [bits_of(args.kv_k), bits_of(args.kv_v)]
    model = os.path.join(args.model_dir, MODELS[args.model])
    with tempfile.TemporaryDirectory() as tmp:
        dumps = {}
        for name, text in TEXTS.items():
            path = os.path.join(tmp, name + ".bin")
            cmd = [args.tqserve, "eval", "kld", "-m", model, "-f", text, "--ctx", str(args.ctx), "--chunks",
                   str(args.chunks), "-t", str(args.threads), "--kv-k", args.kv_k, "--kv-v", args.kv_v,
                   "--dump-rows", path]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"kv_law: {' '.join(cmd)} failed:\n{out.stderr}")
            print(f"{name}: {out.stdout.strip()}")
            h, y, d = load(path)
            dumps[name] = (h, y)
    print(f"\n{args.model}, K {args.kv_k} / V {args.kv_v}, ctx {args.ctx} x {args.chunks} chunks; calibration "
          f"WikiText-2, evaluation Persuasion")
    for side in (0, 1):
        codebooks(dumps["calibration"], dumps["evaluation"], d, side, bits[side])
    print()
    for side in (0, 1):
        coordinate_variance(dumps["calibration"], dumps["evaluation"], d, side)
    print()
    for side in (0, 1):
        first_page_mean(dumps["evaluation"], d, side, bits[side], args.ctx)


if __name__ == "__main__":
    main()
