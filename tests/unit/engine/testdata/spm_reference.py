#!/usr/bin/env python3
"""SentencePiece reference ids for GGUF "llama" vocabularies, from the `sentencepiece` package (PyPI): a BPE
ModelProto is built from the GGUF's tokens, scores and token types (identity normalization, dummy prefix,
whitespace escaped, byte fallback), then used to encode text.

  /tmp/ggufenv/bin/pip install gguf==0.19.0 numpy sentencepiece==0.2.3 protobuf
  /tmp/ggufenv/bin/python tests/unit/engine/testdata/spm_reference.py   (from the repository root)

Prints, for the LLaMA SentencePiece test vocabulary, stories260K and (when present in ~/.cache/tqserve/models)
Gemma 3 270M: the token count and FNV-1a-64 hash of the ids of tests/data/wikitext-2-raw/wiki.test.raw, and
the number of llama.cpp test strings whose ids agree with the .out file (the LLaMA vocabulary only). For Gemma it
also writes tests/unit/engine/testdata/gemma3.out (ids of the test strings). Gemma's vocabulary has user-defined
tokens of raw whitespace ("\n\n", "  "); as in llama.cpp and Hugging Face tokenizers they are split out of the raw
text first (longest first), and sentencepiece encodes the rest. Used by tokenizer_test.cc.
"""
import os

import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

SHARED = "tests/data/"
TYPES = {1: pb.ModelProto.SentencePiece.NORMAL, 2: pb.ModelProto.SentencePiece.UNKNOWN,
         3: pb.ModelProto.SentencePiece.CONTROL, 4: pb.ModelProto.SentencePiece.USER_DEFINED,
         5: pb.ModelProto.SentencePiece.UNUSED, 6: pb.ModelProto.SentencePiece.BYTE}


def processor(path, dummy_prefix=True):
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    scores = [float(r.fields["tokenizer.ggml.scores"].parts[i][0]) for i in r.fields["tokenizer.ggml.scores"].data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = dummy_prefix
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, TYPES[ty]
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    user_defined = sorted((i for i, ty in enumerate(types) if ty == 4), key=lambda i: -len(tokens[i].encode()))

    def encode(text):
        frags = [(text, None)]
        for i in user_defined:
            nxt = []
            for s, tok in frags:
                if tok is not None:
                    nxt.append((s, tok))
                    continue
                parts = s.split(tokens[i])
                for k, p in enumerate(parts):
                    if p:
                        nxt.append((p, None))
                    if k + 1 < len(parts):
                        nxt.append(("", i))
            frags = nxt
        ids = []
        for s, tok in frags:
            ids.extend([tok] if tok is not None else sp.encode(s))
        return ids

    return encode


def fnv(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


wiki = open(SHARED + "wikitext-2-raw/wiki.test.raw", encoding="utf-8", newline="").read()
for path in ["tokenizer/ggml-vocab-llama-spm.gguf", "models/stories260K.gguf"]:
    encode = processor(SHARED + path)
    ids = encode(wiki)
    print(path, "wiki tokens", len(ids), "fnv %016x" % fnv(ids))
    if "vocab" in path:
        inp = open(SHARED + path + ".inp", encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n")
        out = open(SHARED + path + ".out").read().split("\n")
        same = sum(1 for s, o in zip(inp[:-1], out[:-1]) if " ".join(map(str, encode(s))) == o.strip())
        print(path, "llama.cpp vectors agreeing:", same, "of", len(out) - 1)

gemma = os.path.expanduser("~/.cache/tqserve/models/gemma-3-270m-q4_k_m.gguf")
if os.path.exists(gemma):
    encode = processor(gemma, dummy_prefix=False)
    ids = encode(wiki)
    print("gemma-3-270m wiki tokens", len(ids), "fnv %016x" % fnv(ids))
    inp = open(SHARED + "tokenizer/ggml-vocab-gpt-2.gguf.inp", encoding="utf-8", newline="").read()
    with open("tests/unit/engine/testdata/gemma3.out", "w") as out:
        for s in inp.split("\n__ggml_vocab_test__\n")[:-1]:
            out.write(" ".join(map(str, encode(s))) + "\n")
