#!/usr/bin/env python3
"""The low-bit KV frontier (issue 38): bits per value against KL divergence, on a text that tuned nothing.

Every configuration runs `tqserve eval kld` against f16 KV on two texts: the calibration text (WikiText-2, which
earlier sessions measured and chose defaults on) and the evaluation text (Jane Austen's Persuasion,
tests/data/austen, which no choice was made on). Rows: page bits per value (every byte of a full page counted:
header, norms, scales, codes; averaged over K and V), KLD and delta perplexity per text and context, and, with
--niah, needles found in a Persuasion haystack at 4096 and 8000 tokens next to f16's (a chat question for a chat
model, a sentence to complete for a base model: `eval niah --style auto`). The report names the
evaluation text's figures; the calibration text's are there to show nothing was fitted to it.

  bench/quality/frontier.py [--tqserve build/tqserve] [--threads 2] [--configs tq3c/tq2c,tq3/tq2,...]
      [--models smollm2,gemma3] [--ctx 512:8,4096:2] [--niah] [--quick] [--json]

A configuration is K/V formats ("tq3c/tq2c"), one format for both ("tq4"), or "preset:NAME" (a --kv-preset
value), then optionally more KV flags after spaces ("tq3/tq2 --kv-key-scale keys", "preset:default --kv-sparse
tq3c/tq2c"). --quick: 2 chunks at 512, 1 at 4096, needles at 4096 only, 1 per
depth (a smoke run, not the table).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CALIBRATION_TEXT = os.path.join(ROOT, "tests", "data", "wikitext-2-raw", "wiki.test.raw")
EVALUATION_TEXT = os.path.join(ROOT, "tests", "data", "austen", "persuasion.txt")
MODELS = os.path.expanduser(os.environ.get("TQ_MODEL_DIR", "~/.cache/tqserve/models"))
MODEL_FILES = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3": "gemma-3-270m-q4_k_m.gguf"}
# The formats alone and in K/V pairs, fp16-norm rows next to their compact (8-bit norm) rows.
CONFIGS = ["f16", "tq4", "tq3", "tq4/tq2", "tq3/tq2", "tq3c/tq2c", "tq4c/tq2c", "tq3c", "tq2.5", "tq2c"]


def config_flags(config):
    first, *more = config.split()
    if first.startswith("preset:"):
        return ["--kv-preset", first[len("preset:"):], *more]
    k, _, v = first.partition("/")
    return ["--kv-k", k, "--kv-v", v or k, *more]


def run_json(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"frontier: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    out = done.stdout
    return json.loads(out[out.index("{"):])


def kld(a, model, text, ctx, chunks, config):
    r = run_json([a.tqserve, "eval", "kld", "-m", model, "-f", text, "--ctx", str(ctx), "--chunks", str(chunks),
                  "-t", str(a.threads), *config_flags(config), "--json"])
    return {"kld": r["kld_mean"], "kld_p99": r["kld_p99"], "dppl": r["delta_ppl_percent"],
            "page_bits": r["page_bits_per_value"], "bits": r["bits_per_value"]}


def niah(a, model, config, length):
    trials = "1" if a.quick else str(a.niah_trials)
    r = run_json([a.tqserve, "eval", "niah", "-m", model, "-f", EVALUATION_TEXT, "--lengths", str(length),
                  "--depths", "0,0.25,0.5,0.75,1", "--trials", trials, "-t", str(a.threads),
                  *config_flags(config), "--json"])
    return {"found": sum(c["found"] for c in r["cells"]), "trials": sum(c["trials"] for c in r["cells"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tqserve", default=os.path.join(ROOT, "build", "tqserve"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated configurations")
    ap.add_argument("--models", default="smollm2", help="comma-separated: smollm2, gemma3")
    ap.add_argument("--ctx", default="512:8,4096:2", help="comma-separated CTX:CHUNKS")
    ap.add_argument("--texts", default="evaluation,calibration", help="comma-separated: evaluation, calibration")
    ap.add_argument("--niah", action="store_true",
                    help="needles at 4096 and 8000 tokens (each model, Persuasion haystack; 8000: SmolLM2's "
                         "context is 8192 with the answer)")
    ap.add_argument("--niah-trials", type=int, default=3, help="needles per depth (5 depths)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    texts = {"evaluation": EVALUATION_TEXT, "calibration": CALIBRATION_TEXT}
    ctxs = [tuple(int(x) for x in c.split(":")) for c in a.ctx.split(",") if c]
    if a.quick:
        ctxs = [(c, 2 if c <= 512 else 1) for c, _ in ctxs]
    models = {}
    for name in a.models.split(","):
        path = os.path.join(MODELS, MODEL_FILES[name])
        if not os.path.exists(path):
            sys.exit(f"frontier: {path} is absent (scripts/fetch-model.sh{' --gemma3' if name == 'gemma3' else ''})")
        models[name] = path
    lengths = [4096] if a.quick else [4096, 8000]
    rows = []
    for config in [c for c in a.configs.split(",") if c]:
        row = {"config": config, "cells": {}, "niah": {}, "page_bits": {}}
        for name, path in models.items():
            for text in a.texts.split(","):
                for ctx, chunks in ctxs:
                    if config == "f16":
                        continue  # the reference itself
                    cell = kld(a, path, texts[text], ctx, chunks, config)
                    row["cells"][f"{name} {text} {ctx}"] = cell
                    row["page_bits"][name] = cell["page_bits"]
        if a.niah:
            for name, path in models.items():
                for length in lengths:
                    row["niah"][f"{name} {length}"] = niah(a, path, config, length)
        rows.append(row)
        print(f"done {config}: " + " ".join(f"{k} {c['kld']:.4f} {c['dppl']:+.2f}%" for k, c in row["cells"].items())
              + " " + " ".join(f"niah@{n} {r['found']}/{r['trials']}" for n, r in row["niah"].items()),
              file=sys.stderr)
    if a.json:
        print(json.dumps({"quick": a.quick, "rows": rows}, indent=1))
        return 0
    keys = list(dict.fromkeys(k for r in rows for k in r["cells"]))
    needle_keys = list(dict.fromkeys(k for r in rows for k in r["niah"]))
    # Page bits and the ratio to f16 per model (head sizes differ), "/"-separated in --models order.
    print("| config | page bits/value | x f16 | " + " | ".join(f"KLD / dPPL {k}" for k in keys) +
          "".join(f" | needles {k}" for k in needle_keys) + " |")
    print("|---|---|---|" + "---|" * (len(keys) + len(needle_keys)))
    for r in rows:
        bits = [r["page_bits"].get(name) for name in models]
        bits_cell = " / ".join(f"{b:.3f}" if b else "16" for b in bits)
        ratio_cell = " / ".join(f"{16.0 / b:.2f}" if b else "1" for b in bits)
        cells = [f"{r['cells'][k]['kld']:.4f} / {r['cells'][k]['dppl']:+.2f}%" if k in r["cells"] else "ref"
                 for k in keys]
        needles = [f"{r['niah'][k]['found']}/{r['niah'][k]['trials']}" if k in r["niah"] else "-" for k in needle_keys]
        print(f"| {r['config']} | {bits_cell} | {ratio_cell} | " + " | ".join(cells + needles) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
