#!/usr/bin/env bash
# The container image's stand-in for scripts/python-env.sh, beside scripts/fetch-model.sh in /opt/tqserve/scripts:
# fetch-model.sh needs only pip, which the venv made at image build time has; the test packages of
# scripts/requirements.txt are not installed in the image.
set -euo pipefail
venv=${TQSERVE_VENV:-/opt/tqserve/venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "python-env: $venv is missing (an image built with BAKE_MODEL=1 has no Python and cannot fetch models)" >&2
  exit 3
fi
echo "$venv"
