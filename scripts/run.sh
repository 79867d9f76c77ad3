#!/usr/bin/env bash
# The main job on the default model: installs, builds, fetches SmolLM2-135M-Instruct, then does the most complete
# thing tqserve can do at this commit (see README.md "What works today").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
model=$(scripts/fetch-model.sh)
bin=build/tqserve

echo "== $bin --version"; $bin --version
echo "== effective configuration"; $bin serve --model "$model" --print-config
