#!/usr/bin/env bash
# Builds the GPU checks here and packs them for a GPU machine that has the NVIDIA driver but not this project's
# libraries: the binaries and every shared library they load that is not part of the C runtime go into .gpu/
# (bin/, lib/), to be run there by scripts/gpu-check.sh. Usage: scripts/gpu-pack.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
targets=(kernels_cuda_test tq_gpu_attention_bench)
[ -f engine/gpu/gpu_model.h ] && targets+=(gpu_model_test gpu_engine_test tq_gpu_decode_bench tqserve)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
for t in "${targets[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "gpu-pack: $t was not built" >&2; exit 1; }
  cp "$bin" .gpu/bin/
  strip .gpu/bin/"$t"
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      *) cp -L "$lib" .gpu/lib/ ;;
    esac
  done
done
du -sh .gpu
