#!/usr/bin/env python3
"""Reference ids and pre-tokenizer splits from Hugging Face `tokenizers` (PyPI), independent of our code.

  /tmp/ggufenv/bin/pip install gguf==0.19.0 numpy tokenizers==0.23.3
  /tmp/ggufenv/bin/python tests/unit/engine/testdata/make_tokenizer_golden.py \
      ~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/tokenizer/ggml-vocab-gpt-2.gguf.inp \
      tests/unit/engine/testdata

Writes, for the strings of the .inp file (same separator):
  smollm2.out       SmolLM2's ids: BPE over the GGUF's vocabulary and merges, pre-tokenized as SmolLM2's
                    tokenizer.json does (Digits(individual) then ByteLevel with the GPT-2 regex), no BOS.
  pre_llama3.out    Llama 3's pre-tokenizer words, and pre_qwen2.out Qwen2's: each line the words' UTF-8 byte
                    lengths, from the regex run by tokenizers' Split(isolated).
"""
import sys

import gguf
from tokenizers import Regex, Tokenizer, models, pre_tokenizers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")


def strings(path):
    text = open(path, encoding="utf-8", newline="").read()
    parts = text.split("\n__ggml_vocab_test__\n")
    return [p for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def main():
    model_path, inp, out_dir = sys.argv[1:4]
    reader = gguf.GGUFReader(model_path)
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    cases = strings(inp)
    with open(f"{out_dir}/smollm2.out", "w") as out:
        for s in cases:
            out.write(" ".join(str(i) for i in tok.encode(s, add_special_tokens=False).ids) + "\n")
    for name, pattern in (("llama3", LLAMA3), ("qwen2", QWEN2)):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
        with open(f"{out_dir}/pre_{name}.out", "w") as out:
            for s in cases:
                words = [w for w, _ in split.pre_tokenize_str(s)]
                assert "".join(words) == s
                out.write(" ".join(str(len(w.encode("utf-8"))) for w in words) + "\n")


main()
