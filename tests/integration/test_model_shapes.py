"""bench/models/make_shape.py: files with real architectures' shapes and metadata load and decode in tqserve, and
a file whose metadata disagrees with its tensors is refused with the tensor named. One layer of each shape keeps
the files small (the widths, vocabularies and tensor types are the real ones)."""
import json
import os
import struct
import subprocess
import sys

import pytest

from conftest import BIN, ROOT

MAKE_SHAPE = ROOT / "bench" / "models" / "make_shape.py"
sys.path.insert(0, str(MAKE_SHAPE.parent))
import make_shape  # noqa: E402


def make(tmp_path, shape, wtype="q4_k_m", layers=1):
    out = tmp_path / f"{shape}-{wtype}.gguf"
    subprocess.run([sys.executable, str(MAKE_SHAPE), "--shape", shape, "--type", wtype, "--layers", str(layers),
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    return out


def inspect(path):
    r = subprocess.run([str(BIN), "inspect", "-m", str(path), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def generate(path, *extra):
    return subprocess.run([str(BIN), "generate", "-m", str(path), "-t", "2", "--ctx-size", "256", "-p",
                           "The capital of France is", "-n", "6", "--temp", "0", "--ignore-eos", *extra],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("shape", sorted(make_shape.SHAPES))
def test_shape_loads_and_decodes(tmp_path, shape):
    arch, _, embd, ff, heads, kv_heads, hd, vocab, *_ = make_shape.SHAPES[shape]
    path = make(tmp_path, shape)
    info = inspect(path)
    text = json.dumps(info)
    assert arch in text
    for value in (embd, ff, vocab):
        assert str(value) in text, f"{value} not in {text[:2000]}"
    r = generate(path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() != "", "no text generated"


def test_q4_k_m_recipe_follows_llama_cpp():
    # Q6_K for the tied output and for attn_v / ffn_down in the outer eighths and every third layer between;
    # rows that are not whole 256-blocks fall back (Gemma 3 1B's 1152 columns).
    n = 16
    more = [l for l in range(n) if make_shape.use_more_bits(l, n)]
    assert more == [0, 1, 4, 7, 10, 13, 14, 15]
    assert make_shape.matrix_type("output", 2048, 0, n, "q4_k_m") == make_shape.Q6_K
    assert make_shape.matrix_type("attn_v", 2048, 4, n, "q4_k_m") == make_shape.Q6_K
    assert make_shape.matrix_type("attn_v", 2048, 5, n, "q4_k_m") == make_shape.Q4_K
    assert make_shape.matrix_type("attn_q", 1152, 5, n, "q4_k_m") == make_shape.Q5_0
    assert make_shape.matrix_type("output", 1152, 0, n, "q4_k_m") == make_shape.Q8_0
    assert make_shape.matrix_type("ffn_up", 2048, 3, n, "q8_0") == make_shape.Q8_0


def test_llama3_rope_factors_follow_the_published_formula():
    # Llama 3.1 8B: head_dim 128, base 500000, factor 8, low 1, high 4, original context 8192.
    f = make_shape.llama3_rope_factors(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    assert len(f) == 64
    assert f[0] == 1.0 and f[-1] == 8.0  # high frequencies untouched, low ones divided by the factor
    assert all(1.0 <= x <= 8.0 for x in f) and f == sorted(f)
    assert any(1.0 < x < 8.0 for x in f)  # the smooth band between


@pytest.mark.parametrize("wtype", ["f16", "q8_0"])
def test_other_weight_types_decode(tmp_path, wtype):
    path = make(tmp_path, "qwen2.5-1.5b", wtype)
    r = generate(path)
    assert r.returncode == 0, r.stderr


def patch_u32(path, key, value):
    """Rewrites the u32 metadata value of `key` in place."""
    data = bytearray(path.read_bytes())
    k = key.encode()
    at = data.find(struct.pack("<Q", len(k)) + k)
    assert at > 0, key
    typ = at + 8 + len(k)
    assert struct.unpack_from("<I", data, typ)[0] == make_shape.U32
    struct.pack_into("<I", data, typ + 4, value)
    path.write_bytes(bytes(data))


def test_shapes_that_disagree_with_metadata_are_refused(tmp_path):
    path = make(tmp_path, "llama-3.2-1b")
    patch_u32(path, "llama.feed_forward_length", 4096)
    r = generate(path)
    assert r.returncode != 0
    assert "blk.0.ffn_gate.weight" in r.stderr and "[8192, 2048]" in r.stderr and "[4096, 2048]" in r.stderr, r.stderr


def test_missing_tokenizer_template_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, str(MAKE_SHAPE), "--shape", "llama-3.2-1b", "--out", str(tmp_path / "x.gguf"),
                        "--tokenizer-from", str(tmp_path / "absent.gguf")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "absent.gguf is absent" in r.stderr
    assert not os.path.exists(tmp_path / "x.gguf")
