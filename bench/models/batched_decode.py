#!/usr/bin/env python3
"""Batched decode against llama.cpp: B sequences decoding together, one token each per step, as a server's step
runs them, on the same GGUF file and threads; the median of the repetitions and their range on both sides.

  python3 bench/models/batched_decode.py --model M.gguf [--batches 1,2,4,8] [--prompt 64] [--decode 32]
      [--reps 5] [--threads 2] [--llama-batched-bench B] [--json OUT]

Ours: `bench_model_speed M THREADS PROMPT DECODE 1 f16 B` (build/bench/matmul; f16 KV, B sequences each prefilled
with PROMPT tokens, then DECODE steps of B tokens). llama.cpp: `llama-batched-bench -npp PROMPT -ntg DECODE
-npl B -fa off` (f16 KV; flash attention off is its faster setting on this class of CPU, docs/models.md), its
S_TG column (B * DECODE tokens over the generation time). One process per repetition on both sides, alternating,
so that machine noise hits both alike. scripts/build-llama-server.sh builds llama-batched-bench.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ours(args, batch):
    cmd = [args.bench_model_speed, args.model, str(args.threads), str(args.prompt), str(args.decode), "1", "f16",
           str(batch)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["decode_tok_s"]


def theirs(args, batch):
    cmd = [args.llama_batched_bench, "-m", args.model, "-t", str(args.threads), "-tb", str(args.threads),
           "-c", str(batch * (args.prompt + args.decode) + 64), "-npp", str(args.prompt), "-ntg", str(args.decode),
           "-npl", str(batch), "-fa", "off"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and re.fullmatch(r"\d+", cells[2] or "") and int(cells[2]) == batch:
            return float(cells[7])
    raise RuntimeError("no S_TG row for B=%d in llama-batched-bench's output:\n%s" % (batch, out[-2000:]))


def spread(v):
    return "%.2f [%.2f-%.2f]" % (statistics.median(v), min(v), max(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench-model-speed", default=os.path.join(ROOT, "build/bench/matmul/bench_model_speed"))
    ap.add_argument("--llama-batched-bench", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not args.llama_batched_bench:
        server = subprocess.run(["bash", os.path.join(ROOT, "scripts/build-llama-server.sh")], check=True,
                                capture_output=True, text=True).stdout.strip()
        args.llama_batched_bench = os.path.join(os.path.dirname(server), "llama-batched-bench")
    for path in (args.model, args.bench_model_speed, args.llama_batched_bench):
        if not os.path.exists(path):
            print("batched_decode: %s is absent" % path, file=sys.stderr)
            return 1
    batches = [int(b) for b in args.batches.split(",") if b]
    rows = {}
    for b in batches:
        o, t = [], []
        for rep in range(args.reps):
            o.append(ours(args, b))
            t.append(theirs(args, b))
            print("B=%d rep %d: tqserve %.2f  llama.cpp %.2f" % (b, rep + 1, o[-1], t[-1]), flush=True)
        rows[b] = (o, t)
    print()
    print("%s, %d threads, f16 KV, prompt %d, %d decode steps, median of %d [min-max], decode tok/s (all sequences)"
          % (os.path.basename(args.model), args.threads, args.prompt, args.decode, args.reps))
    print("| batch | llama.cpp | tqserve | ratio |")
    print("|---|---|---|---|")
    for b, (o, t) in rows.items():
        print("| %d | %s | %s | %.2fx |" % (b, spread(t), spread(o), statistics.median(o) / statistics.median(t)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": {str(b): {"tqserve": o, "llama.cpp": t}
                                                    for b, (o, t) in rows.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
