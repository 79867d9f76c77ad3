#!/usr/bin/env python3
"""How much the encoder's choice of codes can gain on the exact coordinate law, before writing it in C++.

For a uniform random unit vector u in d dimensions, TurboQuant codes each coordinate with the Lloyd-Max quantizer of
the law (1 - t^2)^((d-3)/2) and stores ||y|| / ||c|| (norm correction), so the error of a vector is
2 - 2 cos(u, c). This prints that error, averaged over random vectors, for
  nearest  the nearest centroid per coordinate (the paper's quantizer),
  greedy   a coordinate-descent pass on cos(u, c), moving one coordinate at a time to its other neighbour centroid,
  scales   the codes of s * u for each s of the encoder's scale list, the best cosine kept (kCodeScales).
Usage: bench/quality/scale_search_theory.py [--dims 64,128] [--vectors 20000]   (needs numpy; the report's venv
has it: ~/.cache/tqserve/report-venv/bin/python)
"""
import argparse

import numpy as np

SCALES = [1.0, 0.8, 0.9, 1.1, 1.2, 1.3]  # kernels/formats/codebook.h, kCodeScales


def lloyd_max(bits, d, iters=300):
    t = np.linspace(-1, 1, 400001)
    w = (1 - t ** 2) ** ((d - 3) / 2)
    w /= w.sum()
    c = np.linspace(-2.5, 2.5, 2 ** bits) / np.sqrt(d)
    for _ in range(iters):
        idx = np.searchsorted((c[1:] + c[:-1]) / 2, t)
        c = np.bincount(idx, t * w, 2 ** bits) / np.maximum(np.bincount(idx, w, 2 ** bits), 1e-30)
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--vectors", type=int, default=20000)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    print("d  bits  nearest   greedy(3 sweeps)     scales")
    for d in (int(x) for x in a.dims.split(",")):
        for bits in (2, 3, 4):
            c = lloyd_max(bits, d)
            bounds = (c[1:] + c[:-1]) / 2
            x = rng.standard_normal((a.vectors, d))
            u = x / np.linalg.norm(x, axis=1, keepdims=True)
            cos = lambda codes: (u * c[codes]).sum(1) / np.linalg.norm(c[codes], axis=1)
            idx = np.searchsorted(bounds, u)
            nearest = np.mean(2 - 2 * cos(idx))
            # greedy: dot and squared norm updated as one coordinate moves to its other neighbour
            g = idx.copy()
            dot, nn = (u * c[g]).sum(1), (c[g] ** 2).sum(1)
            for _ in range(3):
                for i in range(d):
                    cur = g[:, i]
                    alt = np.where(u[:, i] > c[cur], np.minimum(cur + 1, len(c) - 1), np.maximum(cur - 1, 0))
                    ndot, nnn = dot + u[:, i] * (c[alt] - c[cur]), nn + c[alt] ** 2 - c[cur] ** 2
                    better = ndot / np.sqrt(nnn) > dot / np.sqrt(nn)
                    g[:, i] = np.where(better, alt, cur)
                    dot, nn = np.where(better, ndot, dot), np.where(better, nnn, nn)
            greedy = np.mean(2 - 2 * dot / np.sqrt(nn))
            best = np.full(a.vectors, -np.inf)
            for s in SCALES:
                best = np.maximum(best, cos(np.searchsorted(bounds, s * u)))
            scales = np.mean(2 - 2 * best)
            print(f"{d:<3} {bits:>3}  {nearest:.5f}  {greedy:.5f} ({100 * (greedy / nearest - 1):+.1f}%)  "
                  f"{scales:.5f} ({100 * (scales / nearest - 1):+.1f}%)")


if __name__ == "__main__":
    main()
