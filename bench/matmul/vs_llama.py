#!/usr/bin/env python3
"""tqserve vs llama.cpp: prompt processing and decode tok/s on the same GGUF model, same threads, one run.

  LLAMA_PY=/root/.cache/tqserve/llama-venv/bin/python  (any Python with llama-cpp-python)
  $LLAMA_PY bench/matmul/vs_llama.py [--model M] [--threads 2] [--bin build/bench/matmul/bench_model_speed]
                                     [--prompt 128] [--decode 32] [--reps 5]

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
    args = p.parse_args()
    try:
        from llama_cpp import Llama
    except ImportError:
        sys.exit("llama_cpp is not importable from %s; run this with the llama venv's python" % sys.executable)
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=512,
                n_batch=512, logits_all=False, verbose=False)
    llama_rep(llm, args.prompt, 4)  # warm-up: page in the weights
    tq_rep(args)
    res = {"tqserve": [], "llama.cpp": []}
    for _ in range(args.reps):
        res["tqserve"].append(tq_rep(args))
        res["llama.cpp"].append(llama_rep(llm, args.prompt, args.decode))
    print("model %s, %d threads, prompt %d tokens, decode %d tokens, %d reps (best / median tok/s)"
          % (os.path.basename(args.model), args.threads, args.prompt, args.decode, args.reps))
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


if __name__ == "__main__":
    main()
