#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a bounded time.
# Usage: scripts/fuzz.sh [seconds per target, default 60] [target ...]   (targets default to all)
# Seeds: the head of ../shared/models/stories260K.gguf and the tokenizer test strings when ../shared is present
# (tokenizer_fuzz needs ../shared and is skipped without it); findings land in
# build-fuzz/findings/<target>/ and make the script exit non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(gguf_fuzz tokenizer_fuzz); fi

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_BUILD_FUZZ=ON \
  -DTQ_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  corpus="build-fuzz/corpus/$t"
  findings="build-fuzz/findings/$t"
  mkdir -p "$corpus" "$findings"
  if [ "$t" = gguf_fuzz ] && [ -f ../shared/models/stories260K.gguf ]; then
    head -c 16384 ../shared/models/stories260K.gguf > "$corpus/stories260K-head.gguf"
    # The same with the tensor count (bytes 8..15) zeroed: a complete vocabulary-only file.
    cp "$corpus/stories260K-head.gguf" "$corpus/stories260K-vocab.gguf"
    dd if=/dev/zero of="$corpus/stories260K-vocab.gguf" bs=1 seek=8 count=8 conv=notrunc status=none
  elif [ "$t" = tokenizer_fuzz ] && [ -f ../shared/data/tokenizer/ggml-vocab-gpt-2.gguf.inp ]; then
    cp ../shared/data/tokenizer/ggml-vocab-gpt-2.gguf.inp "$corpus/vocab-test-strings.txt"
  elif [ "$t" = tokenizer_fuzz ]; then
    echo "fuzz: $t needs ../shared (the tokenizer vocabularies); skipped"
    continue
  else
    echo "fuzz: ../shared is absent; $t starts from an empty corpus"
  fi
  max_len=65536
  if [ "$t" = tokenizer_fuzz ]; then max_len=4096; fi
  bin="$(find build-fuzz -name "$t" -type f -perm -u+x | head -n1)"
  echo "fuzz: $t for ${seconds}s"
  if ! "$bin" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$findings/" -print_final_stats=1 2>"build-fuzz/$t.log"; then
    echo "fuzz: $t FAILED; see build-fuzz/$t.log and $findings/"
    tail -n 30 "build-fuzz/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "build-fuzz/$t.log" | tail -n 2
  fi
done
exit $status
