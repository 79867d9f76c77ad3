#!/usr/bin/env python3
"""tqserve vs llama.cpp: prompt processing and decode tok/s on the same GGUF model, same threads, one run.

  python3 bench/matmul/vs_llama.py --llama-bench LLAMA_BENCH [--model M] [--threads 2]
                                   [--bin build/bench/matmul/bench_model_speed] [--prompt 128] [--decode 32] [--reps 5]
  LLAMA_PY=/root/.cache/tqserve/llama-venv/bin/python  (any Python with llama-cpp-python)
  $LLAMA_PY bench/matmul/vs_llama.py [same options, no --llama-bench]

With --llama-bench (llama.cpp's own benchmark, built by scripts/build-llama-server.sh beside llama-server) each
llama.cpp repetition is one `llama-bench -p PROMPT -n DECODE -r 1` run: pp PROMPT, then tg DECODE from an empty
context, its worker threads spinning between operations as llama.cpp runs by default. Without it llama.cpp runs
through llama-cpp-python in this process; with OMP_WAIT_POLICY=PASSIVE in the environment its threads sleep at
every barrier, which measured 63 against llama-bench's 94 decode tok/s here (SmolLM2, 2 threads): prefer
--llama-bench for the decode figure.

Both sides: a fresh context, one evaluation of PROMPT token ids 1..PROMPT (a batch of PROMPT tokens, logits of
the last), then DECODE single-token evaluations. The repetitions alternate between the two engines so that
machine noise hits both alike; the table shows the best and the median repetition of each, and tqserve / llama.cpp.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_MODEL = os.path.expanduser("~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def llama_rep(llm, prompt, decode):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(list(range(1, prompt + 1)))
    t1 = time.perf_counter()
    for i in range(decode):
        llm.eval([5 + i])
    t2 = time.perf_counter()
    return prompt / (t1 - t0), decode / (t2 - t1)


def llama_bench_rep(args):
    out = subprocess.run([args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", str(args.prompt),
                          "-n", str(args.decode), "-r", "1", "-o", "json"],
                         check=True, capture_output=True, text=True).stdout
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == args.prompt and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] == args.decode and r["n_prompt"] == 0)
    return pp, tg


def tq_rep(args):
    out = subprocess.run([args.bin, args.model, str(args.threads), str(args.prompt), str(args.decode), "1"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["prefill_tok_s"], r["decode_tok_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bin", default="build/bench/matmul/bench_model_speed")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--decode", type=int, default=32)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--llama-bench", default="", help="llama.cpp's llama-bench binary (else llama-cpp-python)")
    p.add_argument("--json", action="store_true", help="also print a JSON object on the last line")
    args = p.parse_args()
    if args.llama_bench:
        llama = lambda: llama_bench_rep(args)
        how = "llama-bench"
    else:
        try:
            from llama_cpp import Llama
        except ImportError:
            sys.exit("llama_cpp is not importable from %s; run this with the llama venv's python, or give "
                     "--llama-bench" % sys.executable)
        llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=512,
                    n_batch=512, logits_all=False, verbose=False)
        llama_rep(llm, args.prompt, 4)  # warm-up: page in the weights
        llama = lambda: llama_rep(llm, args.prompt, args.decode)
        how = "llama-cpp-python, OMP_WAIT_POLICY=%s" % os.environ.get("OMP_WAIT_POLICY", "unset")
    tq_rep(args)
    res = {"tqserve": [], "llama.cpp": []}
    for _ in range(args.reps):
        res["tqserve"].append(tq_rep(args))
        res["llama.cpp"].append(llama())
    print("model %s, %d threads, prompt %d tokens, decode %d tokens, %d reps (best / median tok/s); llama.cpp by %s"
          % (os.path.basename(args.model), args.threads, args.prompt, args.decode, args.reps, how))
    print("%-10s %22s %22s" % ("", "prefill", "decode"))
    summary = {}
    for name, reps in res.items():
        pp = [r[0] for r in reps]
        tg = [r[1] for r in reps]
        summary[name] = (max(pp), statistics.median(pp), max(tg), statistics.median(tg))
        print("%-10s %10.1f / %9.1f %10.1f / %9.1f" % ((name,) + summary[name]))
    t, l = summary["tqserve"], summary["llama.cpp"]
    print("%-10s %10.2fx / %8.2fx %10.2fx / %8.2fx   (targets: prefill >= 0.8x, decode >= 0.9x)"
          % ("ratio", t[0] / l[0], t[1] / l[1], t[2] / l[2], t[3] / l[3]))
    if args.json:
        print(json.dumps({"llama_by": how, "threads": args.threads, "prompt": args.prompt, "decode": args.decode,
                          "reps": args.reps, "tqserve": res["tqserve"], "llama.cpp": res["llama.cpp"],
                          "ratio_best": [t[0] / l[0], t[2] / l[2]], "ratio_median": [t[1] / l[1], t[3] / l[3]]}))


if __name__ == "__main__":
    main()
