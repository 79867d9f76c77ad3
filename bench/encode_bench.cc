// Encode cost per format: one page of 128 Gaussian vectors per iteration, with the SIMD encoder
// (BM_EncodePage) and the scalar reference (BM_EncodePageReference). items_per_second counts vectors.
// `tqserve bench encode` prints both per model token, side by side, with the share of a decode step.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {
namespace {

template <bool kReference>
void EncodePageBench(benchmark::State& state) {
  const KvFormat format = kFormatTable[state.range(0)].format;
  const int d = static_cast<int>(state.range(1));
  auto codec = KvCodec::Create(format, d);
  if (!codec.ok()) {
    state.SkipWithError(codec.status().ToString().c_str());
    return;
  }
  Rng rng(1);
  std::vector<float> x(static_cast<size_t>(kPageTokens) * d);
  for (float& v : x) v = static_cast<float>(rng.Gaussian());
  std::vector<uint8_t> page((*codec)->layout().page_bytes);
  for (auto _ : state) {
    Status s = kReference ? (*codec)->EncodePageReference(x.data(), kPageTokens, page)
                          : (*codec)->EncodePage(x.data(), kPageTokens, page);
    benchmark::DoNotOptimize(page.data());
    s.IgnoreError();
  }
  state.SetItemsProcessed(state.iterations() * kPageTokens);
  state.SetLabel(std::string(kFormatTable[state.range(0)].name));
}

void BM_EncodePage(benchmark::State& state) {
  EncodePageBench<false>(state);
}
void BM_EncodePageReference(benchmark::State& state) {
  EncodePageBench<true>(state);
}

BENCHMARK(BM_EncodePage)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kFormatTable.size() - 1, 1), {64, 128}});
BENCHMARK(BM_EncodePageReference)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kFormatTable.size() - 1, 1), {64, 128}});

}  // namespace
}  // namespace tq::kernels
