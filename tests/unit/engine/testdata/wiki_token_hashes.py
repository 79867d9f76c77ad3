#!/usr/bin/env python3
"""Token count and FNV-1a-64 hash of the ids of tests/data/wikitext-2-raw/wiki.test.raw, encoded by Hugging Face
tokenizers (BPE over the GGUF vocabulary and merges; SmolLM2: Digits(individual) + ByteLevel; GPT-2: ByteLevel).
Used by tokenizer_test.cc WikiTextMatchesHfTokenizers. Setup as in make_tokenizer_golden.py; run from the repo root."""
import gguf
from tokenizers import Tokenizer, models, pre_tokenizers

def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

def fnv(ids):
    h = 1469598103934665603
    for i in ids:
        h ^= i
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h

text = open('tests/data/wikitext-2-raw/wiki.test.raw', encoding='utf-8', newline='').read()
for path, digits in [(__import__('os').path.expanduser('~/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf'), True),
                     ('tests/data/tokenizer/ggml-vocab-gpt-2.gguf', False)]:
    r = gguf.GGUFReader(path)
    tokens = field_strings(r, 'tokenizer.ggml.tokens')
    merges = [tuple(m.split(' ', 1)) for m in field_strings(r, 'tokenizer.ggml.merges')]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    pts = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if digits:
        pts.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(pts)
    ids = tok.encode(text, add_special_tokens=False).ids
    print(path, len(ids), '%016x' % fnv(ids))
