#!/usr/bin/env bash
# The main job on the default model: installs, builds, fetches SmolLM2-135M-Instruct, then serves it:
# OpenAI-compatible HTTP on :8080 and gRPC on :50051 until SIGTERM or Ctrl-C (which drain in-flight requests).
# Extra arguments go to `tqserve serve`, e.g. scripts/run.sh --http-port 8081 --kv-k ... (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=$(scripts/fetch-model.sh)
build/tqserve --version
echo "serving $model; try:"
echo "  curl -s localhost:8080/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'"
exec build/tqserve serve --model "$model" "$@"
