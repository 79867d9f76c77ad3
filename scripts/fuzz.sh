#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a bounded time.
# Usage: scripts/fuzz.sh [seconds per target, default 60] [target ...]   (targets default to all)
# Seeds: tests/fuzz/corpus/<target>/ (kept in the repo; grpc_request_fuzz's are written by
# tests/fuzz/make_grpc_seeds.py), the head of tests/data/models/stories260K.gguf and the tokenizer test strings
# (tests/data), and the request bodies below. What a run finds new goes to build-fuzz/corpus/<target>/; findings
# land in build-fuzz/findings/<target>/ and make the script exit non-zero. CI runs every target for about a minute
# (scripts/test.sh with CI=true); the long run in docs/security.md is `scripts/fuzz.sh 3600`.
# TQ_FUZZ_SEED=N fixes libFuzzer's seed (CI sets 1, so a CI verdict can be reproduced); unset, each run draws its
# own. Inputs that once crashed a target are seeds too (gguf_fuzz: tests/unit/engine/testdata/fuzz_regressions).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(gguf_fuzz tokenizer_fuzz http_request_fuzz grpc_request_fuzz page_record_fuzz prefix_recovery_fuzz); fi
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/tqserve/ccache}
# Debug info (-g) makes ccache hash paths: relative to the clone and not the build directory, so that a fresh clone
# elsewhere (CI) hits the cache of an earlier build.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTQ_BUILD_FUZZ=ON \
  -DTQ_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  dict=()
  corpus="build-fuzz/corpus/$t"
  findings="build-fuzz/findings/$t"
  mkdir -p "$corpus" "$findings"
  if [ "$t" = gguf_fuzz ] && [ -f tests/data/models/stories260K.gguf ]; then
    head -c 16384 tests/data/models/stories260K.gguf > "$corpus/stories260K-head.gguf"
    # The same with the tensor count (bytes 8..15) zeroed: a complete vocabulary-only file.
    cp "$corpus/stories260K-head.gguf" "$corpus/stories260K-vocab.gguf"
    dd if=/dev/zero of="$corpus/stories260K-vocab.gguf" bs=1 seek=8 count=8 conv=notrunc status=none
  elif [ "$t" = tokenizer_fuzz ] && [ -f tests/data/tokenizer/ggml-vocab-gpt-2.gguf.inp ]; then
    cp tests/data/tokenizer/ggml-vocab-gpt-2.gguf.inp "$corpus/vocab-test-strings.txt"
  elif [ "$t" = http_request_fuzz ] && [ -f tests/data/models/stories260K.gguf ]; then
    # First byte: 0 = completions body, 1 = chat body, 2 = raw HTTP request (see http_request_fuzz.cc).
    printf '\x00{"prompt":"Once upon","max_tokens":8,"n":2,"stop":["."],"logprobs":2,"seed":3}' > "$corpus/completion"
    printf '\x00{"prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"top_p":0.5}' \
      > "$corpus/completion-ids"
    printf '\x01{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"logprobs":true,"top_logprobs":3,"max_completion_tokens":4}' \
      > "$corpus/chat"
    printf '\x01{"messages":[{"role":"user","content":"Hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"array","items":{"enum":[1,"x"]},"maxItems":3},"b":{"anyOf":[{"type":"integer","minimum":0},{"$ref":"#/$defs/s"}]}},"required":["a"],"$defs":{"s":{"type":"string","pattern":"^[a-z]+$"}}}}},"logit_bias":{"5":-100}}' \
      > "$corpus/chat-schema"
    printf '\x01{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"1"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}],"tool_choice":"required","parallel_tool_calls":false,"cache_salt":"t"}' \
      > "$corpus/chat-tools"
    printf '\x02POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 46\r\n\r\n{"messages":[{"role":"user","content":"Hi"}]}\n' \
      > "$corpus/http"
    printf '\x02POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{"prompt":"abc"}\r\n0\r\n\r\n' \
      > "$corpus/http-chunked"
    # The field names and values of the OpenAI bodies, for libFuzzer's -dict.
    printf '%s\n' '"\"model\""' '"\"prompt\""' '"\"messages\""' '"\"role\""' '"\"content\""' '"\"type\""' \
      '"\"text\""' '"\"user\""' '"\"system\""' '"\"assistant\""' '"\"max_tokens\""' '"\"max_completion_tokens\""' \
      '"\"n\""' '"\"stop\""' '"\"seed\""' '"\"stream\""' '"\"stream_options\""' '"\"include_usage\""' \
      '"\"temperature\""' '"\"top_p\""' '"\"top_k\""' '"\"min_p\""' '"\"logprobs\""' '"\"top_logprobs\""' \
      '"\"ignore_eos\""' '"\"presence_penalty\""' '"\"frequency_penalty\""' '"\"repetition_penalty\""' \
      '"null"' '"true"' '"false"' '"1e308"' '"-0"' '"\\u0000"' '"\\ud800"' '"Content-Length: "' \
      '"Transfer-Encoding: chunked\x0d\x0a"' '"\x0d\x0a\x0d\x0a"' > "build-fuzz/$t.dict"
    dict=(-dict="build-fuzz/$t.dict")
  fi
  max_len=65536
  # The tokenizer runs 4 encodes and decodes of two real vocabularies per input: at 4096 bytes that was 41 inputs a
  # second under ASan (docs/security.md). Its merge loop (a priority queue over adjacent pairs) takes the same paths
  # at any length, so short inputs explore as much, many times faster.
  if [ "$t" = tokenizer_fuzz ]; then max_len=256; fi
  if [ "$t" = http_request_fuzz ]; then max_len=4096; fi
  if [ "$t" = prefix_recovery_fuzz ]; then max_len=2048; fi
  bin="$(find build-fuzz -name "$t" -type f -perm -u+x | head -n1)"
  echo "fuzz: $t for ${seconds}s"
  seeds=()
  [ -d "tests/fuzz/corpus/$t" ] && seeds=("tests/fuzz/corpus/$t")
  [ "$t" = gguf_fuzz ] && seeds+=(tests/unit/engine/testdata/fuzz_regressions)
  seed_arg=()
  [ -n "${TQ_FUZZ_SEED:-}" ] && seed_arg=(-seed="$TQ_FUZZ_SEED")
  if ! "$bin" "$corpus" ${seeds[@]+"${seeds[@]}"} -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$findings/" -print_final_stats=1 ${dict[@]+"${dict[@]}"} \
      ${seed_arg[@]+"${seed_arg[@]}"} 2>"build-fuzz/$t.log"; then
    echo "fuzz: $t FAILED; see build-fuzz/$t.log and $findings/"
    tail -n 30 "build-fuzz/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "build-fuzz/$t.log" | tail -n 2
  fi
done
exit $status
