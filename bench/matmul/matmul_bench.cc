// Google Benchmark of MatMulRows per weight type. Counters: MAC/s (multiply-adds of the product) and weight
// bytes/s (summed over threads).
//   MatMulRows/TYPE/BATCH   one thread, a [rows, cols] matrix that stays in cache, batch 1 (decode) to 1024
//   MatMulStream/TYPE       batch 1 over 16 matrices of a 1B model's FFN shape (150 MB or more per thread, so every
//                           byte comes from DRAM, as in a real decode step); 1 and 2 threads, each its own matrices
//   ReadStream              the same bytes summed as uint64: the memory bandwidth a decode step could reach
//
//   [TQ_BENCH_SIMD=AVX2] bench_matmul [--benchmark_filter=Q4_1]
// TQ_BENCH_SIMD limits dispatch to one Highway target this CPU supports (its name: AVX2, AVX3, AVX3_DL, ...), to
// measure what a CPU without the wider ones runs.
#include <benchmark/benchmark.h>

#include <hwy/targets.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/weights/weight_ref.h"

namespace tq::kernels {
namespace {

// SmolLM2-135M's FFN down projection: 576 rows of 1536 (a multiple of every block size).
constexpr int64_t kRows = 576, kCols = 1536;

void BM_MatMulRows(benchmark::State& state, WeightType type) {
  const int64_t batch = state.range(0);
  const int64_t row_bytes = static_cast<int64_t>(*WeightBytes(type, kCols));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(kCols), x(batch * kCols), y(batch * kRows);
  std::vector<uint8_t> w(kRows * row_bytes);
  for (int64_t r = 0; r < kRows; ++r) {
    for (float& v : row) v = normal(rng);
    QuantizeRowRef(type, row.data(), w.data() + r * row_bytes, kCols);
  }
  for (float& v : x) v = normal(rng);
  MatMulArgs a;
  a.type = type;
  a.w = w.data();
  a.row_bytes = row_bytes;
  a.cols = kCols;
  a.x = x.data();
  a.batch = batch;
  a.y = y.data();
  a.y_stride = kRows;
  std::vector<uint8_t> acts(MatMulActivationBytes(a)), scratch(MatMulScratchBytes(a));
  for (auto _ : state) {
    PrepareActivations(a, 0, batch, acts.data());
    MatMulRows(a, acts.data(), 0, kRows, scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["MAC/s"] = benchmark::Counter(iters * kRows * kCols * batch, benchmark::Counter::kIsRate);
  state.counters["wbytes/s"] = benchmark::Counter(iters * kRows * row_bytes, benchmark::Counter::kIsRate);
}

// Streaming shape: Llama-3.2-1B's FFN up projection, 16 matrices per thread.
constexpr int64_t kStreamRows = 8192, kStreamCols = 2048, kStreamMatrices = 16;

// Weights of `type` for benchmark thread `thread`: kStreamMatrices matrices, rows quantized from seeded normals
// (one row pattern repeated, so setup stays fast; the bytes still come from DRAM). Built once, kept.
const std::vector<uint8_t>& StreamWeights(WeightType type, int thread) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::unique_ptr<std::vector<uint8_t>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[{static_cast<int>(type), thread}];
  if (!slot) {
    const int64_t row_bytes = static_cast<int64_t>(*WeightBytes(type, kStreamCols));
    std::mt19937 rng(7 + thread);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> row(kStreamCols);
    std::vector<uint8_t> pattern(64 * row_bytes);
    for (int64_t r = 0; r < 64; ++r) {
      for (float& v : row) v = normal(rng);
      QuantizeRowRef(type, row.data(), pattern.data() + r * row_bytes, kStreamCols);
    }
    slot = std::make_unique<std::vector<uint8_t>>(kStreamMatrices * kStreamRows * row_bytes);
    for (size_t off = 0; off < slot->size(); off += pattern.size()) {
      std::copy_n(pattern.begin(), std::min(pattern.size(), slot->size() - off), slot->begin() + off);
    }
  }
  return *slot;
}

void BM_MatMulStream(benchmark::State& state, WeightType type) {
  const int64_t row_bytes = static_cast<int64_t>(*WeightBytes(type, kStreamCols));
  const std::vector<uint8_t>& w = StreamWeights(type, state.thread_index());
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kStreamCols), y(kStreamRows);
  for (float& v : x) v = normal(rng);
  MatMulArgs a;
  a.type = type;
  a.row_bytes = row_bytes;
  a.cols = kStreamCols;
  a.x = x.data();
  a.y = y.data();
  a.y_stride = kStreamRows;
  std::vector<uint8_t> acts(MatMulActivationBytes(a)), scratch(MatMulScratchBytes(a));
  for (auto _ : state) {
    for (int64_t m = 0; m < kStreamMatrices; ++m) {
      a.w = w.data() + m * kStreamRows * row_bytes;
      PrepareActivations(a, 0, 1, acts.data());
      MatMulRows(a, acts.data(), 0, kStreamRows, scratch.data());
      benchmark::DoNotOptimize(y.data());
    }
  }
  const double iters = static_cast<double>(state.iterations()) * kStreamMatrices;
  state.counters["MAC/s"] = benchmark::Counter(iters * kStreamRows * kStreamCols, benchmark::Counter::kIsRate);
  state.counters["wbytes/s"] = benchmark::Counter(iters * kStreamRows * row_bytes, benchmark::Counter::kIsRate);
}

void BM_ReadStream(benchmark::State& state) {
  const std::vector<uint8_t>& w = StreamWeights(WeightType::kQ4_K, state.thread_index());
  const auto* p = reinterpret_cast<const uint64_t*>(w.data());
  const size_t n = w.size() / 8;
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) sum += p[i];
    benchmark::DoNotOptimize(sum);
  }
  state.counters["wbytes/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(w.size()),
                         benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  if (const char* want = std::getenv("TQ_BENCH_SIMD")) {
    bool found = false;
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      if (std::string(hwy::TargetName(target)) == want) {
        hwy::SetSupportedTargetsForTest(target);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "bench_matmul: TQ_BENCH_SIMD=%s is not a target this CPU supports\n", want);
      std::exit(2);
    }
  }
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ5_0, WeightType::kQ4_K,
                          WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kF16, WeightType::kBF16,
                          WeightType::kF32}) {
    const std::string name = "MatMulRows/" + std::string(WeightTypeName(type));
    benchmark::RegisterBenchmark(name.c_str(), BM_MatMulRows, type)
        ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(32)->Arg(128)->Arg(1024);
  }
  for (WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_K, WeightType::kQ6_K}) {
    const std::string name = "MatMulStream/" + std::string(WeightTypeName(type));
    benchmark::RegisterBenchmark(name.c_str(), BM_MatMulStream, type)->Threads(1)->Threads(2)->UseRealTime();
  }
  benchmark::RegisterBenchmark("ReadStream", BM_ReadStream)->Threads(1)->Threads(2)->UseRealTime();
  return true;
}();

}  // namespace
}  // namespace tq::kernels
