// Decode attention per format on one KV head group (cache-resident pages): ctx tokens, head_dim, GQA 3.
// items_per_second counts cached tokens. For KV read from memory use `tqserve bench attention`.
#include <benchmark/benchmark.h>

#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {
namespace {

void BM_DecodeAttention(benchmark::State& state) {
  const KvFormat format = kFormatTable[state.range(0)].format;
  const int ctx = static_cast<int>(state.range(1));
  const int d = static_cast<int>(state.range(2));
  const int gqa = 3;
  auto codec = KvCodec::Create(format, d);
  if (!codec.ok()) {
    state.SkipWithError(codec.status().ToString().c_str());
    return;
  }
  Rng rng(1);
  const size_t page_bytes = (*codec)->layout().page_bytes;
  const int pages = (ctx + kPageTokens - 1) / kPageTokens;
  std::vector<uint8_t> pool(2 * page_bytes * pages);
  std::vector<float> x(static_cast<size_t>(kPageTokens) * d);
  std::vector<KvPageRef> refs;
  for (int p = 0; p < 2 * pages; ++p) {
    for (float& v : x) v = static_cast<float>(rng.Gaussian());
    const int n = std::min(kPageTokens, ctx - (p % pages) * kPageTokens);
    Status s = (*codec)->EncodePage(x.data(), n, std::span<uint8_t>(pool.data() + p * page_bytes, page_bytes));
    s.IgnoreError();
  }
  for (int p = 0; p < pages; ++p) {
    const int n = std::min(kPageTokens, ctx - p * kPageTokens);
    refs.push_back({pool.data() + p * page_bytes, pool.data() + (pages + p) * page_bytes, format, format, n});
  }
  std::vector<float> q(static_cast<size_t>(gqa) * d), out(q.size());
  for (float& v : q) v = static_cast<float>(rng.Gaussian());
  for (auto _ : state) {
    Status s = DecodeAttention(refs, d, q.data(), gqa, {}, out.data(), nullptr);
    benchmark::DoNotOptimize(out.data());
    s.IgnoreError();
  }
  state.SetItemsProcessed(state.iterations() * ctx);
  state.SetLabel(std::string(kFormatTable[state.range(0)].name));
}

BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({benchmark::CreateDenseRange(0, kFormatTable.size() - 1, 1), {1024, 8192}, {64, 128}});

}  // namespace
}  // namespace tq::kernels
