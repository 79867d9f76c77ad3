#!/usr/bin/env python3
"""Perplexity of tqserve's KV configurations next to llama.cpp's KV types, same model, text, chunks and threads.

Both use llama.cpp's method (chunks of CTX tokens, BOS first, the second half of each chunk scored). llama.cpp
runs through llama-cpp-python (a venv with it: see tests/golden/README.md). Prints a table and, with --json, a
JSON list.

  bench/quality/ppl_vs_llama.py --tqserve build/tqserve --model M.gguf --file wiki.test.raw --ctx 512 \
      --chunks 8 --threads 2 --tq f16/f16 tq4/tq4 --llama f16/f16 q8_0/q8_0 q4_0/q4_0
"""
import argparse
import json
import math
import subprocess
import sys
import time


def tqserve_ppl(binary, model, text_file, ctx, chunks, threads, k, v, boundary):
    cmd = [binary, "eval", "ppl", "--model", model, "--file", text_file, "--ctx", str(ctx), "--chunks", str(chunks),
           "--threads", str(threads), "--kv-k", k, "--kv-v", v, "--kv-boundary-layers", str(boundary), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {"engine": "tqserve", "kv": f"{k}/{v}" + (f" b{boundary}" if boundary else ""), "ppl": r["ppl"],
            "ppl_stderr": r["ppl_stderr"], "bits_per_value": r["kv_bits_per_value"], "tokens": r["tokens"],
            "seconds": r["seconds"]}


def llama_ppl(model, text_file, ctx, chunks, threads, k, v):
    import llama_cpp
    import numpy as np

    types = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q5_0": llama_cpp.GGML_TYPE_Q5_0,
             "q4_1": llama_cpp.GGML_TYPE_Q4_1, "q4_0": llama_cpp.GGML_TYPE_Q4_0,
             "iq4_nl": llama_cpp.GGML_TYPE_IQ4_NL}
    bits = {"f16": 16, "q8_0": 8.5, "q5_0": 5.5, "q4_1": 5, "q4_0": 4.5, "iq4_nl": 4.5}
    llm = llama_cpp.Llama(model_path=model, n_ctx=ctx, n_batch=ctx, n_ubatch=ctx, n_threads=threads,
                          n_threads_batch=threads, logits_all=True, verbose=False, type_k=types[k], type_v=types[v],
                          flash_attn=(v != "f16"))
    text = open(text_file, "rb").read()
    tokens = llm.tokenize(text, add_bos=True, special=False)
    add_bos = llm._model.add_bos_token() if hasattr(llm._model, "add_bos_token") else True
    n_chunks = min(chunks, len(tokens) // ctx) if chunks > 0 else len(tokens) // ctx
    first = ctx // 2
    nll, nll2, count = 0.0, 0.0, 0
    t0 = time.time()
    for c in range(n_chunks):
        chunk = list(tokens[c * ctx:(c + 1) * ctx])
        if add_bos and llm.token_bos() >= 0:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[first:ctx - 1], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))[:, 0]
        targets = np.asarray(tokens[c * ctx + first + 1:(c + 1) * ctx])
        lp = logits[np.arange(len(targets)), targets] - lse
        nll += float(-lp.sum())
        nll2 += float((lp * lp).sum())
        count += len(targets)
    mean = nll / count
    ppl = math.exp(mean)
    err = ppl * math.sqrt(max(0.0, nll2 / count - mean * mean) / (count - 1))
    return {"engine": "llama.cpp", "kv": f"{k}/{v}", "ppl": ppl, "ppl_stderr": err,
            "bits_per_value": (bits[k] + bits[v]) / 2, "tokens": count, "seconds": time.time() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tqserve", default="build/tqserve")
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tq", nargs="*", default=["f16/f16", "tq8/tq8", "int8/int8", "tq4/tq4", "tq3/tq3"],
                    help="K/V[/boundary layers] for tqserve")
    ap.add_argument("--llama", nargs="*", default=["f16/f16", "q8_0/q8_0", "q4_0/q4_0"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for spec in a.llama:
        k, v = spec.split("/")
        rows.append(llama_ppl(a.model, a.file, a.ctx, a.chunks, a.threads, k, v))
        print(f"done {rows[-1]['engine']} {rows[-1]['kv']}", file=sys.stderr)
    for spec in a.tq:
        parts = spec.split("/")
        rows.append(tqserve_ppl(a.tqserve, a.model, a.file, a.ctx, a.chunks, a.threads, parts[0], parts[1],
                                int(parts[2]) if len(parts) > 2 else 0))
        print(f"done {rows[-1]['engine']} {rows[-1]['kv']}", file=sys.stderr)
    base = {r["engine"]: r["ppl"] for r in rows if r["kv"].startswith("f16/f16")}
    ref = base.get("llama.cpp")
    for r in rows:
        own = base.get(r["engine"])
        r["delta_vs_own_f16_percent"] = 100 * (r["ppl"] / own - 1) if own else None
        r["ratio_vs_llama_f16"] = r["ppl"] / ref if ref else None
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"ctx {a.ctx}, {a.chunks} chunks, {a.threads} threads, {a.model}")
    print(f"{'engine':10} {'K/V':16} {'bits':>6} {'ppl':>9} {'+-':>7} {'vs own f16':>11} {'/ llama f16':>12}")
    for r in rows:
        d = r["delta_vs_own_f16_percent"]
        print(f"{r['engine']:10} {r['kv']:16} {r['bits_per_value']:6.2f} {r['ppl']:9.4f} {r['ppl_stderr']:7.4f} "
              f"{(f'{d:+.2f}%' if d is not None else '-'):>11} {r['ratio_vs_llama_f16'] or 0:12.4f}")


if __name__ == "__main__":
    main()
