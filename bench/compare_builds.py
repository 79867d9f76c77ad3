#!/usr/bin/env python3
"""Two builds of tqserve side by side in one run: a refactor must not make anything slower.

  python3 bench/compare_builds.py --base OLD/tqserve --new build/tqserve [--runs 5] [--ctx 512 4096 8192]
                                  [--formats f16 tq4 default] [--serving]

Decode: `tqserve bench decode --json` of each binary, alternating (base, new, new, base, ...) so that drift of the
machine falls on both alike; per (configuration, context) the median tokens/s of the runs and their range, and
new / base of the medians. Serving (--serving): bench/serving/load.py --quick against each binary's daemon,
alternating, the median output tokens/s and TTFT p50 per concurrency level. Same model, threads and settings on
both sides. Prints tables; --json FILE keeps every run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode_run(binary, args):
    cmd = [binary, "bench", "decode", "--json", "-t", str(args.threads), "--steps", str(args.steps),
           "--rounds", str(args.rounds), "--ctx", *map(str, args.ctx), "--formats", *args.formats]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return {(r["config"], r["ctx"]): r["tokens_per_second"] for r in json.loads(out)}


def serving_run(binary, args):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.join(ROOT, "bench/serving/load.py"), "--quick", "--servers", "tqserve",
           "--threads", str(args.threads), "--tqserve-bin", binary, "--json", path]
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    with open(path) as f:
        levels = json.load(f)["levels"]
    os.unlink(path)
    return {int(c): (v["tqserve"]["output_tok_s"], v["tqserve"]["ttft_p50"]) for c, v in levels.items()}


def spread(values):
    return "%.1f (%.1f-%.1f)" % (statistics.median(values), min(values), max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the tqserve binary before the change")
    p.add_argument("--new", default=os.path.join(ROOT, "build/tqserve"), help="the tqserve binary after it")
    p.add_argument("--runs", type=int, default=5, help="runs of each binary (median and range reported)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, nargs="+", default=[512, 4096, 8192])
    p.add_argument("--formats", nargs="+", default=["f16", "tq4"])
    p.add_argument("--steps", type=int, default=16, help="decode steps per round of `bench decode`")
    p.add_argument("--rounds", type=int, default=2, help="rounds per `bench decode` run (its best counts)")
    p.add_argument("--serving", action="store_true", help="also the quick serving sweep (bench/serving/load.py)")
    p.add_argument("--json", default="", help="write every run here")
    args = p.parse_args()

    binaries = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    decode = {"base": [], "new": []}
    serving = {"base": [], "new": []}
    for i in range(args.runs):
        order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
        for side in order:
            decode[side].append(decode_run(binaries[side], args))
            print("decode run %d/%d: %s" % (i + 1, args.runs, side), file=sys.stderr, flush=True)
        if args.serving:
            for side in order:
                serving[side].append(serving_run(binaries[side], args))
                print("serving run %d/%d: %s" % (i + 1, args.runs, side), file=sys.stderr, flush=True)

    print("Decode tokens/s, median (range) of %d runs, %d threads, `bench decode --steps %d --rounds %d`"
          % (args.runs, args.threads, args.steps, args.rounds))
    print("%-10s %6s %22s %22s %10s" % ("config", "ctx", "base", "new", "new/base"))
    for key in sorted(decode["base"][0], key=lambda k: (args.formats.index(k[0]) if k[0] in args.formats else 99,
                                                        k[1])):
        b = [r[key] for r in decode["base"]]
        n = [r[key] for r in decode["new"]]
        print("%-10s %6d %22s %22s %9.3fx" % (key[0], key[1], spread(b), spread(n),
                                             statistics.median(n) / statistics.median(b)))
    if args.serving:
        print()
        print("Serving (load.py --quick), median (range) of %d runs" % args.runs)
        print("%11s %22s %22s %10s %14s %14s" % ("concurrency", "base tok/s", "new tok/s", "new/base",
                                                  "base TTFT p50", "new TTFT p50"))
        for c in sorted(serving["base"][0]):
            b = [r[c][0] for r in serving["base"]]
            n = [r[c][0] for r in serving["new"]]
            bt = statistics.median(r[c][1] for r in serving["base"]) * 1e3
            nt = statistics.median(r[c][1] for r in serving["new"]) * 1e3
            print("%11d %22s %22s %9.3fx %11.1f ms %11.1f ms" % (c, spread(b), spread(n),
                                                                statistics.median(n) / statistics.median(b), bt, nt))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args),
                       "decode": {s: [{"%s@%d" % k: v for k, v in r.items()} for r in runs]
                                  for s, runs in decode.items()},
                       "serving": serving}, f, indent=1)


if __name__ == "__main__":
    main()
