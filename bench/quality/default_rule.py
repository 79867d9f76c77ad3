#!/usr/bin/env python3
"""The rule that chooses the default KV configuration, measured (issue 33; docs/kv.md "The default").

Rule: among the candidate configurations, the default is the one with the fewest bits per value that
  (1) keeps perplexity within +0.5% of f16 KV on every row of the quality suite:
      SmolLM2 on WikiText-2 at ctx 512 (8 chunks) and ctx 4096 (2 chunks), Gemma 3 270M at ctx 1024 (4 chunks), and
  (2) retrieves as many needles as f16 KV (`tqserve eval niah`, SmolLM2, lengths 512-4096, 5 depths, 3 needles each).
Every candidate needs no profile (the default must run on any model without a calibration step). The candidates
are fixed here, not tuned on the suite; the script only measures and applies the rule.

  bench/quality/default_rule.py [--tqserve build/tqserve] [--threads 2] [--candidates uniform:int8/tq4,...]
      [--quick] [--json]

--quick: 2 chunks at 512, 1 at 4096, 1 Gemma chunk, NIAH lengths 512 and 1024 with 1 needle (a smoke run, not the
rule). Prints one table row per candidate and the chosen configuration; exit 0 when one passes, 1 when none does.
"""
import argparse
import json
import os
import subprocess
import sys

# A candidate is a --kv-preset value, optionally followed by more KV flags. "default" is the shipped default
# (engine/kv/precision.h kDefaultPreset: heads ranked by depth, no profile), measured like any other.
CANDIDATES = ["uniform:tq4", "uniform:int8/tq4", "default --kv-sparse int8/tq4", "default", "uniform:int8"]
MODELS = os.path.expanduser(os.environ.get("TQ_MODEL_DIR", "~/.cache/tqserve/models"))
SMOLLM2 = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf")
TEXT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "wikitext-2-raw", "wiki.test.raw")
MAX_DPPL_PERCENT = 0.5


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def kld(a, model, ctx, chunks, preset):
    r = run_json([a.tqserve, "eval", "kld", "-m", model, "-f", a.text, "--ctx", str(ctx), "--chunks", str(chunks),
                  "-t", str(a.threads), "--kv-preset", *preset.split(), "--json"])
    return {"dppl": r["delta_ppl_percent"], "kld": r["kld_mean"], "bits": r["bits_per_value"]}


def niah(a, preset):
    lengths, trials = ("512,1024", "1") if a.quick else ("512,1024,2048,4096", "3")
    r = run_json([a.tqserve, "eval", "niah", "-m", SMOLLM2, "-f", a.text, "--lengths", lengths, "--depths",
                  "0,0.25,0.5,0.75,1", "--trials", trials, "-t", str(a.threads), "--kv-preset", *preset.split(),
                  "--json"])
    return r["accuracy"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tqserve", default="build/tqserve")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--candidates", default=",".join(CANDIDATES), help="comma-separated candidates")
    ap.add_argument("--f16-niah", type=float, default=None,
                    help="f16's needle accuracy from an earlier run of this script (skips measuring it again)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    suite = [("smollm2 ctx512", SMOLLM2, 512, 2 if a.quick else 8),
             ("smollm2 ctx4096", SMOLLM2, 4096, 1 if a.quick else 2),
             ("gemma3 ctx1024", GEMMA3, 1024, 1 if a.quick else 4)]
    for path in (SMOLLM2, GEMMA3):
        if not os.path.exists(path):
            sys.exit(f"default_rule: {path} is absent (scripts/fetch-model.sh [--gemma3])")
    ref_niah = a.f16_niah if a.f16_niah is not None else niah(a, "uniform:f16")
    print(f"f16 needle accuracy {100 * ref_niah:.2f}%", file=sys.stderr)
    rows = []
    for preset in [c for c in a.candidates.split(",") if c]:
        row = {"config": preset, "suite": {}}
        for name, model, ctx, chunks in suite:
            row["suite"][name] = kld(a, model, ctx, chunks, preset)
        row["bits"] = row["suite"]["smollm2 ctx512"]["bits"]
        row["niah"] = niah(a, preset)
        row["passes"] = (all(r["dppl"] <= MAX_DPPL_PERCENT for r in row["suite"].values()) and
                         row["niah"] >= ref_niah)
        rows.append(row)
        print(f"done {preset}: bits {row['bits']:.2f} " +
              " ".join(f"{n} {r['dppl']:+.2f}%" for n, r in row["suite"].items()) +
              f" niah {100 * row['niah']:.2f}% -> {'pass' if row['passes'] else 'fail'}", file=sys.stderr)
    passing = sorted((r for r in rows if r["passes"]), key=lambda r: r["bits"])
    chosen = passing[0]["config"] if passing else None
    if a.json:
        print(json.dumps({"quick": a.quick, "f16_niah": ref_niah, "max_dppl_percent": MAX_DPPL_PERCENT,
                          "rows": rows, "chosen": chosen}, indent=1))
        return 0 if chosen else 1
    names = [n for n, *_ in suite]
    print(f"rule: fewest bits with dPPL <= +{MAX_DPPL_PERCENT}% on every row and needle accuracy = f16's "
          f"({100 * ref_niah:.2f}%){' [quick: not the rule]' if a.quick else ''}")
    print("| config | bits/value | " + " | ".join(f"dPPL {n}" for n in names) + " | needle | passes |")
    print("|---|---|" + "---|" * len(names) + "---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['bits']:.2f} | " +
              " | ".join(f"{r['suite'][n]['dppl']:+.2f}% (KLD {r['suite'][n]['kld']:.4f})" for n in names) +
              f" | {100 * r['niah']:.2f}% | {'yes' if r['passes'] else 'no'} |")
    print(f"chosen: {chosen or 'none passes'}")
    return 0 if chosen else 1


if __name__ == "__main__":
    sys.exit(main())
