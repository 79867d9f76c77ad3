#!/usr/bin/env python3
"""SentencePiece reference ids for GGUF "llama" vocabularies, from the `sentencepiece` package (PyPI): a BPE
ModelProto is built from the GGUF's tokens, scores and token types (identity normalization, dummy prefix,
whitespace escaped, byte fallback), then used to encode text.

  /tmp/ggufenv/bin/pip install gguf==0.19.0 numpy sentencepiece==0.2.3 protobuf
  /tmp/ggufenv/bin/python tests/unit/engine/testdata/spm_reference.py   (from the repository root)

Prints, for the LLaMA SentencePiece test vocabulary and stories260K: the token count and FNV-1a-64 hash of the ids
of ../shared/data/wikitext-2-raw/wiki.test.raw, and the number of llama.cpp test strings whose ids agree with the
.out file (the LLaMA vocabulary only). Used by tokenizer_test.cc.
"""
import gguf
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

SHARED = "../shared/"
TYPES = {1: pb.ModelProto.SentencePiece.NORMAL, 2: pb.ModelProto.SentencePiece.UNKNOWN,
         3: pb.ModelProto.SentencePiece.CONTROL, 4: pb.ModelProto.SentencePiece.USER_DEFINED,
         5: pb.ModelProto.SentencePiece.UNUSED, 6: pb.ModelProto.SentencePiece.BYTE}


def processor(path):
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    scores = [float(r.fields["tokenizer.ggml.scores"].parts[i][0]) for i in r.fields["tokenizer.ggml.scores"].data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = t, s, TYPES[ty]
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def fnv(ids):
    h = 1469598103934665603
    for i in ids:
        h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


wiki = open(SHARED + "data/wikitext-2-raw/wiki.test.raw", encoding="utf-8", newline="").read()
for path in ["data/tokenizer/ggml-vocab-llama-spm.gguf", "models/stories260K.gguf"]:
    sp = processor(SHARED + path)
    ids = sp.encode(wiki)
    print(path, "wiki tokens", len(ids), "fnv %016x" % fnv(ids))
    if "vocab" in path:
        inp = open(SHARED + path + ".inp", encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n")
        out = open(SHARED + path + ".out").read().split("\n")
        same = sum(1 for s, o in zip(inp[:-1], out[:-1]) if " ".join(map(str, sp.encode(s))) == o.strip())
        print(path, "llama.cpp vectors agreeing:", same, "of", len(out) - 1)
