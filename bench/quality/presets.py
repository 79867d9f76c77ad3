#!/usr/bin/env python3
"""Quality and size of every KV preset and uniform format, side by side in one run (issue 5's table).

Calibrates one head profile per --methods entry (unless --profile-METHOD is given) on chunks of the text held out
from the evaluated ones (the calibration starts after the first --chunks chunks), then runs `tqserve eval kld`
against f16 KV for each configuration on the same chunks; the ranked presets run once per profile. Prints delta
PPL, KLD, bits per value, KV bytes per token and the share of page bytes in each tier as the page store placed
them (eval's bytes_by_tier): the ranked presets run with a cold tier in a temporary directory (--kv-cold-dir), so
their SPARSE pages are on disk; the uniform configurations run without one, all in RAM (their pages count as
SPARSE, which without a cold tier lives in the warm tier).

  bench/quality/presets.py --tqserve build/tqserve --file tests/data/wikitext-2-raw/wiki.test.raw \
      --ctx 512 --chunks 8 --threads 2 --methods concentration,sensitivity
"""
import argparse
import json
import os
import shutil
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


def ranked(flags):
    return "--kv-preset" in flags and not flags[flags.index("--kv-preset") + 1].startswith("uniform")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tqserve", default="build/tqserve")
    ap.add_argument("--model", default="")
    ap.add_argument("--file", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--methods", default="concentration",
                    help="comma-separated calibration methods; the ranked presets run once per method")
    ap.add_argument("--profile-concentration", default="", help="use this profile instead of calibrating")
    ap.add_argument("--profile-sensitivity", default="", help="use this profile instead of calibrating")
    ap.add_argument("--calib-ctx", type=int, default=512, help="tokens per calibration chunk")
    ap.add_argument("--calib-chunks", type=int, default=0, help="calibration chunks (0 = the method's default)")
    ap.add_argument("--configs", default="", help="comma-separated config names to run (default: all)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    common = ["--file", a.file, "--threads", str(a.threads)] + (["--model", a.model] if a.model else [])
    configs = CONFIGS
    if a.configs:
        wanted = [c.strip() for c in a.configs.split(",")]
        configs = [c for c in CONFIGS if c[0] in wanted]
        missing = set(wanted) - {c[0] for c in configs}
        if missing:
            sys.exit(f"unknown configs: {sorted(missing)}")
    methods = [m for m in a.methods.split(",") if m]
    tmp = tempfile.mkdtemp(prefix="tq-presets-")
    try:
        profiles = {}
        if any(ranked(f) for _, f in configs):
            for m in methods:
                given = getattr(a, f"profile_{m}", "")
                if given:
                    profiles[m] = given
                    continue
                # Calibration chunks of --calib-ctx tokens start after the evaluated text.
                skip = (a.ctx * a.chunks + a.calib_ctx - 1) // a.calib_ctx
                profiles[m] = os.path.join(tmp, f"{m}.json")
                cmd = [a.tqserve, "calibrate", *common, "--method", m, "--ctx", str(a.calib_ctx),
                       "--skip-chunks", str(skip), "-o", profiles[m]]
                if a.calib_chunks:
                    cmd += ["--chunks", str(a.calib_chunks)]
                subprocess.run(cmd, check=True, stdout=sys.stderr)
        cold = os.path.join(tmp, "cold")
        os.makedirs(cold)
        rows = []
        for name, flags in configs:
            for m in (methods if ranked(flags) else [""]):
                cmd = [a.tqserve, "eval", "kld", *common, "--ctx", str(a.ctx), "--chunks", str(a.chunks), "--json",
                       *flags]
                if m:
                    cmd += ["--kv-profile", profiles[m], "--kv-cold-dir", cold]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                # The JSON object starts at the first line that opens one (log lines may come first).
                r = json.loads(out[out.index("\n{") + 1:] if not out.startswith("{") else out)
                tiers = r["bytes_by_tier"]
                total = sum(tiers.values()) or 1
                rows.append({"config": name, "profile": m, "ppl": r["ppl"], "ref_ppl": r["ref"]["ppl"],
                             "delta_ppl_percent": r["delta_ppl_percent"], "kld_mean": r["kld_mean"],
                             "kld_p99": r["kld_p99"], "same_top": r["same_top"],
                             "bits_per_value": r["bits_per_value"], "kv_bytes_per_token": total / a.ctx,
                             "tier_share": {k: v / total for k, v in tiers.items()},
                             "heads_by_class": r["heads_by_class"],
                             # 2k-token sequences whose RAM (hot + warm) bytes fit in 256 MiB; cold bytes are on
                             # disk.
                             "seqs_2k_in_256mib": int((256 << 20) // max(1.0, (tiers["hot"] + tiers["warm"]) /
                                                                             a.ctx * 2048))})
                t = rows[-1]["tier_share"]
                print(f"done {name} [{m or '-'}]: dPPL {r['delta_ppl_percent']:+.2f}% KLD {r['kld_mean']:.5f} "
                      f"hot/warm/cold {100 * t['hot']:.1f}/{100 * t['warm']:.1f}/{100 * t['cold']:.1f}%",
                      file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"ctx {a.ctx}, {a.chunks} chunks, {a.threads} threads, reference: f16 KV (ppl {rows[0]['ref_ppl']:.4f})")
    print(f"{'config':30} {'profile':13} {'bits':>6} {'dPPL':>8} {'KLD':>9} {'KLD p99':>8} {'same top':>8} "
          f"{'B/token':>9} {'hot/warm/cold bytes':>20} {'2k seqs/256MiB':>14}")
    for r in rows:
        t = r["tier_share"]
        print(f"{r['config']:30} {r['profile'] or '-':13} {r['bits_per_value']:6.2f} {r['delta_ppl_percent']:+7.2f}% "
              f"{r['kld_mean']:9.5f} {r['kld_p99']:8.4f} {100 * r['same_top']:7.2f}% {r['kv_bytes_per_token']:9.0f} "
              f"{100 * t['hot']:6.1f}/{100 * t['warm']:5.1f}/{100 * t['cold']:5.1f}% {r['seqs_2k_in_256mib']:14d}")


if __name__ == "__main__":
    main()
