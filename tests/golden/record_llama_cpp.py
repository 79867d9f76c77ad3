#!/usr/bin/env python3
"""Records reference greedy continuations from llama.cpp (through llama-cpp-python) for tqserve's golden tests.

Usage (the venv with llama-cpp-python; see tests/golden/README.md):
  ~/.cache/tqserve/llama-venv/bin/python tests/golden/record_llama_cpp.py MODEL.gguf OUT.json "prompt" ...
  LORA=ADAPTER.gguf[:SCALE] ... (the same, with a LoRA adapter applied)

For each prompt it stores llama.cpp's token ids of the prompt (with BOS as the model's metadata says) and the
first N greedily chosen next tokens (temperature 0, no penalties), plus llama.cpp's version.
"""
import json
import os
import sys

import llama_cpp

N_PREDICT = 32


def main():
    model, out, prompts = sys.argv[1], sys.argv[2], sys.argv[3:]
    lora = os.environ.get("LORA", "")
    lora_path, _, lora_scale = lora.partition(":")
    extra = {"lora_path": lora_path, "lora_scale": float(lora_scale or 1.0)} if lora else {}
    llm = llama_cpp.Llama(model_path=model, n_ctx=512, n_threads=1, n_batch=512, verbose=False, seed=0, logits_all=True,
                          **extra)
    cases = []
    for text in prompts:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(ids)
        generated = []
        for _ in range(N_PREDICT):
            logits = llm.scores[llm.n_tokens - 1]
            tok = int(max(range(len(logits)), key=lambda i: logits[i]))
            generated.append(tok)
            if tok == llm.token_eos():
                break
            llm.eval([tok])
        cases.append({"prompt": text, "prompt_ids": ids, "greedy_ids": generated})
    doc = {"model": model.rsplit("/", 1)[-1], "reference": "llama.cpp via llama-cpp-python " + llama_cpp.__version__,
           "n_predict": N_PREDICT, "cases": cases}
    if lora:
        doc["lora"] = {"file": lora_path.rsplit("/", 1)[-1], "scale": extra["lora_scale"]}
    with open(out, "w") as f:
        json.dump(doc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
