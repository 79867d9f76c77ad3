#!/usr/bin/env python3
"""Quality and size of every KV preset and uniform format, side by side in one run (issue 5's table).

Calibrates a head profile on the text (unless --profile is given), then runs `tqserve eval kld` against f16 KV for
each configuration on the same chunks and prints delta PPL, KLD, bits per value, KV bytes per token and the share
of bytes in each tier (by the home tier of each head's class).

  bench/quality/presets.py --tqserve build/tqserve --file ../shared/data/wikitext-2-raw/wiki.test.raw \
      --ctx 512 --chunks 8 --threads 2
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = [
    ("uniform f16", ["--kv-k", "f16", "--kv-v", "f16"]),
    ("uniform int8", ["--kv-preset", "uniform:int8"]),
    ("uniform tq8", ["--kv-preset", "uniform:tq8"]),
    ("uniform tq4", ["--kv-preset", "uniform:tq4"]),
    ("uniform tq3.5", ["--kv-preset", "uniform:tq3.5"]),
    ("uniform tq3", ["--kv-preset", "uniform:tq3"]),
    ("int8-K tq4-V", ["--kv-preset", "uniform:int8/tq4"]),
    ("int8-K tq3-V", ["--kv-preset", "uniform:int8/tq3"]),
    ("code", ["--kv-preset", "code"]),
    ("longdoc", ["--kv-preset", "longdoc"]),
    ("chat", ["--kv-preset", "chat"]),
    ("auto", ["--kv-preset", "auto"]),
    ("longdoc, sparse int8-K/tq4-V", ["--kv-preset", "longdoc", "--kv-sparse", "int8/tq4"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tqserve", default="build/tqserve")
    ap.add_argument("--model", default="")
    ap.add_argument("--file", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", default="")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    common = ["--file", a.file, "--threads", str(a.threads)] + (["--model", a.model] if a.model else [])
    profile = a.profile
    if not profile:
        profile = os.path.join(tempfile.mkdtemp(prefix="tq-profile-"), "profile.json")
        subprocess.run([a.tqserve, "calibrate", *common, "--ctx", str(a.ctx), "--chunks", str(a.chunks), "-o", profile],
                       check=True, stdout=sys.stderr)
    rows = []
    for name, flags in CONFIGS:
        ranked = "--kv-preset" in flags and not flags[flags.index("--kv-preset") + 1].startswith("uniform")
        cmd = [a.tqserve, "eval", "kld", *common, "--ctx", str(a.ctx), "--chunks", str(a.chunks), "--json",
               "--kv-profile", profile, *flags]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        tiers = r["bytes_by_tier"]
        total = sum(tiers.values()) or 1
        rows.append({"config": name, "ppl": r["ppl"], "ref_ppl": r["ref"]["ppl"],
                     "delta_ppl_percent": r["delta_ppl_percent"], "kld_mean": r["kld_mean"],
                     "kld_p99": r["kld_p99"], "same_top": r["same_top"], "bits_per_value": r["bits_per_value"],
                     "kv_bytes_per_token": sum(tiers.values()) / a.ctx,
                     "tier_share": {k: v / total for k, v in tiers.items()}, "heads_by_class": r["heads_by_class"],
                     # 2k-token sequences whose RAM bytes fit in 256 MiB: a ranked preset keeps its SPARSE heads on
                     # the cold tier (disk), so hot + warm count; a uniform configuration is all in RAM.
                     "seqs_2k_in_256mib": int((256 << 20) // max(1.0, (
                         tiers["hot"] + tiers["warm"] if ranked else total) / a.ctx * 2048))})
        print(f"done {name}", file=sys.stderr)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"ctx {a.ctx}, {a.chunks} chunks, {a.threads} threads, reference: f16 KV (ppl {rows[0]['ref_ppl']:.4f})")
    print(f"{'config':30} {'bits':>6} {'dPPL':>8} {'KLD':>9} {'KLD p99':>8} {'same top':>8} {'B/token':>9} "
          f"{'hot/warm/cold bytes':>20} {'2k seqs/256MiB':>14}")
    for r in rows:
        t = r["tier_share"]
        print(f"{r['config']:30} {r['bits_per_value']:6.2f} {r['delta_ppl_percent']:+7.2f}% {r['kld_mean']:9.5f} "
              f"{r['kld_p99']:8.4f} {100 * r['same_top']:7.2f}% {r['kv_bytes_per_token']:9.0f} "
              f"{100 * t['hot']:6.1f}/{100 * t['warm']:5.1f}/{100 * t['cold']:5.1f}% {r['seqs_2k_in_256mib']:14d}")


if __name__ == "__main__":
    main()
