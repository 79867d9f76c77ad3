#!/usr/bin/env python3
"""llama.cpp decode tok/s against context length per KV type, through llama-cpp-python: the peer of
`tqserve bench decode` (same model, threads, contexts, steps and rounds; the median round counts on both sides).
Prints a JSON list.

For each context the KV cache is filled with random token ids (fixed seed) in batches of 256, then ROUNDS rounds of
STEPS single-token evaluations are timed. Quantized V needs flash attention in llama.cpp; it is on for every type so
that the types differ only in the KV storage.

  $LLAMA_VENV/bin/python bench/report/llama_decode.py --model M.gguf --threads 2 --ctx 512,2048 --formats f16,q8_0
  python3 bench/report/llama_decode.py --llama-bench LLAMA_BENCH --model M.gguf ...   (llama.cpp's own benchmark)

With --llama-bench each (format, context) is one `llama-bench -p 0 -n STEPS -d CTX -ctk FMT -ctv FMT -fa 1
-r ROUNDS` run (its depth prompt fills the cache first; the median of its per-round samples counts),
with llama.cpp's worker threads spinning as they do by default. Through llama-cpp-python under
OMP_WAIT_POLICY=PASSIVE (what the report used before 2026-12-01) its threads sleep at every barrier, which
measured a third below llama-bench on SmolLM2 with 2 threads.
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import time


BITS = {"f16": 16, "q8_0": 8.5, "q5_0": 5.5, "q4_1": 5, "q4_0": 4.5, "iq4_nl": 4.5}


def run_llama_bench(a):
    contexts = sorted(int(c) for c in a.ctx.split(","))
    rows = []
    for fmt in a.formats.split(","):
        for ctx in contexts:
            out = subprocess.run([a.llama_bench, "-m", a.model, "-t", str(a.threads), "-p", "0", "-n", str(a.steps),
                                  "-d", str(ctx), "-ctk", fmt, "-ctv", fmt, "-fa", "1", "-r", str(a.rounds),
                                  "-o", "json"], check=True, capture_output=True, text=True).stdout
            tg = next(r for r in json.loads(out) if r["n_gen"] == a.steps)
            median = statistics.median(tg["samples_ts"])
            rows.append({"engine": "llama.cpp", "format": fmt, "ctx": ctx, "tokens_per_second": median,
                         "tokens_per_second_min": min(tg["samples_ts"]), "tokens_per_second_max": max(tg["samples_ts"]),
                         "kv_bits_per_value": BITS[fmt], "by": "llama-bench"})
            print(f"llama.cpp {fmt} at {ctx}: {median:.1f} tok/s (llama-bench, median)", file=sys.stderr)
    ref = {r["ctx"]: r["tokens_per_second"] for r in rows if r["format"] == a.formats.split(",")[0]}
    for r in rows:
        r["ratio_vs_first"] = r["tokens_per_second"] / ref[r["ctx"]]
    print(json.dumps(rows, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", default="512,1024,2048")
    ap.add_argument("--formats", default="f16,q8_0,q4_0")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--llama-bench", default="", help="llama-bench binary; empty: llama-cpp-python")
    a = ap.parse_args()
    if a.llama_bench:
        return run_llama_bench(a)
    import llama_cpp

    types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
             "q5_0": llama_cpp.GGML_TYPE_Q5_0, "q4_1": llama_cpp.GGML_TYPE_Q4_1,
             "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL}
    contexts = sorted(int(c) for c in a.ctx.split(","))
    capacity = contexts[-1] + a.rounds * a.steps * len(contexts) + 8
    rows = []
    for fmt in a.formats.split(","):
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=capacity, n_batch=256, n_ubatch=256, n_threads=a.threads,
                              n_threads_batch=a.threads, logits_all=False, verbose=False, type_k=types[fmt],
                              type_v=types[fmt], flash_attn=True)
        rng = random.Random(1234)
        vocab = llm.n_vocab()
        llm.reset()
        for ctx in contexts:
            fill = [rng.randrange(1, vocab) for _ in range(ctx - llm.n_tokens)]
            for i in range(0, len(fill), 256):
                llm.eval(fill[i:i + 256])
            rounds = []
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                for _ in range(a.steps):
                    llm.eval([rng.randrange(1, vocab)])
                rounds.append(a.steps / (time.perf_counter() - t0))
            median = statistics.median(rounds)
            rows.append({"engine": "llama.cpp", "format": fmt, "ctx": ctx, "tokens_per_second": median,
                         "tokens_per_second_min": min(rounds), "tokens_per_second_max": max(rounds),
                         "kv_bits_per_value": BITS[fmt]})
            print(f"llama.cpp {fmt} at {ctx}: {median:.1f} tok/s (median)", file=sys.stderr)
        del llm
    ref = {r["ctx"]: r["tokens_per_second"] for r in rows if r["format"] == a.formats.split(",")[0]}
    for r in rows:
        r["ratio_vs_first"] = r["tokens_per_second"] / ref[r["ctx"]]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
