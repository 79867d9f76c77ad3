#!/usr/bin/env bash
# Makes (once) the Python virtual environment the scripts and tests use, and prints its path.
# Location: $TQSERVE_VENV, default ~/.cache/tqserve/venv (outside the clone). Packages: scripts/requirements.txt,
# reinstalled only when that file changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${TQSERVE_VENV:-$HOME/.cache/tqserve/venv}
req="$here/requirements.txt"

if [ ! -x "$venv/bin/python" ]; then
  echo "python-env: creating $venv" >&2
  python3 -m venv "$venv" >&2
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: installing $(grep -cv '^\s*#' "$req") packages from scripts/requirements.txt" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv"
