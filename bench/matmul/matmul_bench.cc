// Google Benchmark of MatMulRows per weight type: one thread, a [rows, cols] matrix that stays in cache, batch 1
// (decode) to 128 (prefill). Counters: MAC/s (multiply-adds of the product) and weight bytes/s.
//
//   bench_matmul [--benchmark_filter=Q4_1]
#include <benchmark/benchmark.h>

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

const bool kRegistered = [] {
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ5_0, WeightType::kQ4_K,
                          WeightType::kQ5_K, WeightType::kQ6_K, WeightType::kF16, WeightType::kBF16,
                          WeightType::kF32}) {
    const std::string name = "MatMulRows/" + std::string(WeightTypeName(type));
    benchmark::RegisterBenchmark(name.c_str(), BM_MatMulRows, type)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(32)->Arg(128)->Arg(1024);
  }
  return true;
}();

}  // namespace
}  // namespace tq::kernels
