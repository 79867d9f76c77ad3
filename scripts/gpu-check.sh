#!/usr/bin/env bash
# The GPU checks, run on a GPU machine from what scripts/gpu-pack.sh packed into .gpu/: the gpu-labelled tests
# (CUDA kernels against the CPU reference; the GPU forward pass against the CPU one) and the GPU benchmarks
# (paged attention at 8k and 32k context; end-to-end decode) on a model file with the real model's shapes and
# random weights (bench/gpu/synthetic_gguf.py; the real file may not be reachable there).
# Logs and JSON go to $OUT (default: gpu-results/). Usage: scripts/gpu-check.sh [--quick]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-results}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
reps=30; [ "${1:-}" = "--quick" ] && reps=5
status=0
summary=""
run() {  # run NAME CMD...: the whole log goes to $out/checks.log, its end to stdout; keeps going on failure
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/checks.log"
  local start; start=$(date +%s)
  timeout "${TQ_GPU_STEP_TIMEOUT:-240}" "$@" > "$out/$name.log.tmp" 2>&1
  local rc=$?
  cat "$out/$name.log.tmp" >> "$out/checks.log"
  grep -E "FAILED|Failure|error|ERROR|Expected|Which is|tok/s|ms/tok|GB/s|vs f16|^GPU|^ *[0-9]" "$out/$name.log.tmp" | head -n 60
  rm -f "$out/$name.log.tmp"
  summary+="$name: exit $rc in $(( $(date +%s) - start )) s"$'\n'
  [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 bench/gpu/synthetic_gguf.py --shape smollm2-135m --out /tmp/smollm2-synthetic.gguf
run kernels_cuda_test .gpu/bin/kernels_cuda_test
# Memory errors and shared-memory races in the kernels, on small cases (where compute-sanitizer is there).
if command -v compute-sanitizer > /dev/null; then
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 1 .gpu/bin/kernels_cuda_test \
    --gtest_filter='CudaAttention.CausalLimits*:CudaEncode.Int8*:CudaEncode.Trained*'
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 1 .gpu/bin/kernels_cuda_test \
    --gtest_filter='CudaAttention.CausalLimits*'
fi
if [ -x .gpu/bin/gpu_model_test ]; then
  export TQ_MODEL=/tmp/smollm2-synthetic.gguf
  run gpu_model_test .gpu/bin/gpu_model_test
fi
if [ -x .gpu/bin/gpu_engine_test ]; then
  # The engine on the GPU path: tokens against the CPU engine, batching, a small pool, warm heads, aborts.
  TQ_MODEL=/tmp/smollm2-synthetic.gguf run gpu_engine_test .gpu/bin/gpu_engine_test
fi
if [ -x .gpu/bin/tqserve ]; then
  # The CLI a user runs: one generation on the GPU path.
  run generate_cuda .gpu/bin/tqserve generate --device cuda --kv-k tq4 --kv-v tq4 -m /tmp/smollm2-synthetic.gguf \
    -p "hello world" -n 16 --ctx-size 2048
fi
run attention_bench .gpu/bin/tq_gpu_attention_bench --reps "$reps" --json "$out/attention.json"
if [ -x .gpu/bin/tq_gpu_decode_bench ]; then
  run decode_bench .gpu/bin/tq_gpu_decode_bench --model /tmp/smollm2-synthetic.gguf --ctx 8192,32768 \
    --formats f16,int8,tq4 --steps "$reps" --json "$out/decode.json"
  # The tiers: half the heads' pages in pinned RAM, then a quarter on disk (read a layer ahead each step).
  run decode_bench_tiers .gpu/bin/tq_gpu_decode_bench --model /tmp/smollm2-synthetic.gguf --ctx 8192 \
    --formats tq4 --steps "$reps" --warm-fraction 0.5 --cold-fraction 0.25 --cold-dir /tmp/tq-gpu-cold \
    --json "$out/decode_tiers.json"
fi
# Nsight Compute on one split kernel per KV format (TQ_GPU_PROFILE=1; counters need a runtime that exposes them).
if [ "${TQ_GPU_PROFILE:-0}" = 1 ] && command -v ncu > /dev/null; then
  for f in f16 tq4; do
    run "ncu_$f" ncu --clock-control none --kernel-name regex:SplitKernel --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
      .gpu/bin/tq_gpu_attention_bench --shapes llama-8b --ctx 32768 --formats "$f" --reps 2
  done
fi
echo "== summary"
printf '%s' "$summary"
exit $status
