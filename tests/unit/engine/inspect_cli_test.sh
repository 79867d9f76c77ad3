#!/usr/bin/env bash
# Black-box checks of `tqserve inspect`: text and JSON on stories260K, exit 1 with a message naming the problem on
# a truncated or non-GGUF file, exit 2 without --model. stories260K ships in tests/data.
# Usage: inspect_cli_test.sh path/to/tqserve   (run from the repository root)
set -euo pipefail
source "$(dirname "$0")/../../integration/lib.sh"
bin=$1
model=tests/data/models/stories260K.gguf
[ -f "$model" ] || { echo "FAIL: $model is absent (it ships in tests/data; run from the repository root)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

expect_rc 0 "inspect stories260K" -- "$bin" inspect --model "$model"
expect_out "architecture  llama" "architecture"
expect_out "layers 5  embedding 64  ffn 172  heads 8  kv_heads 4  head_dim 8" "hyperparameters"
expect_out "F32         48 tensors" "tensor types"
expect_out "tokenizer     llama" "tokenizer"
expect_out "chat template none" "chat template"

expect_rc 0 "inspect --json" -- "$bin" inspect --model "$model" --json
if python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert d["hparams"]["layers"] == 5; assert d["tensors"]["by_type"]["F32"]["count"] == 48; assert d["tokenizer"]["tokens"] == 512' "$out"; then
  pass "json fields"
else
  fail "json fields: $out"
fi

expect_rc 0 "inspect --metadata" -- "$bin" inspect --model "$model" --metadata
expect_out "llama.rope.dimension_count" "metadata listing"

head -c 3000 "$model" > "$tmp/truncated.gguf"
expect_rc 1 "truncated file" -- "$bin" inspect --model "$tmp/truncated.gguf"
expect_out "tokenizer.ggml.tokens" "error names the key"

echo "not a model" > "$tmp/text.gguf"
expect_rc 1 "not a GGUF file" -- "$bin" inspect --model "$tmp/text.gguf"
expect_out "not a GGUF file" "error says so"

expect_rc 1 "missing file" -- "$bin" inspect --model "$tmp/nope.gguf"
expect_out "not_found" "not found"

expect_rc 2 "no --model" -- "$bin" inspect
finish
