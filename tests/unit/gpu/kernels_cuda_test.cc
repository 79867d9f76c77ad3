// The CUDA KV kernels against the CPU scalar reference: the page encoder byte for byte (every format, power-of-two
// and other head dims, partial pages, trained outlier sets), and paged attention (mixed K/V formats per page, GQA
// groups, f32 tail rows, causal prefill limits) against a double-precision attention over the decoded pages and
// against DecodeAttentionReference. Every test skips with the reason where there is no GPU; the argument checks
// that need no device run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/cuda/kv_kernels.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"

namespace tq::gpu {
namespace {

using kernels::KvCodec;
using kernels::KvFormat;
using kernels::kPageTokens;

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    StatusOr<DeviceInfo> info = ProbeDevice();                         \
    if (!info.ok()) { GTEST_SKIP() << "no GPU: " << info.status().message(); } \
  } while (0)

#define ASSERT_OK(expr)                                    \
  do {                                                     \
    const ::tq::Status _s = (expr);                        \
    ASSERT_TRUE(_s.ok()) << #expr << ": " << _s.message(); \
  } while (0)

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  StatusOr<DeviceBuffer> b = DeviceBuffer::Allocate(sizeof(T) * std::max<size_t>(v.size(), 1));
  EXPECT_TRUE(b.ok());
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpy(b->get(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return std::move(*b);
}

template <typename T>
std::vector<T> ToHost(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), b.get(), sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

std::vector<float> Gaussian(size_t n, uint64_t seed, float scale = 1.0f) {
  kernels::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = scale * static_cast<float>(rng.Gaussian());
  return v;
}

const KvFormat kAllFormats[] = {KvFormat::kF16,   KvFormat::kInt8,  KvFormat::kTq2,  KvFormat::kTq3, KvFormat::kTq4,
                                KvFormat::kTq8,   KvFormat::kTq2_5, KvFormat::kTq3_5, KvFormat::kTq3p,
                                KvFormat::kTq4p};

// Encodes `pages` pages of n tokens on the GPU and with the reference, under `rule`; the bytes must be equal.
void CheckEncode(const KvCodec& codec, int n, int pages, uint64_t seed,
                 kernels::NormRule rule = kernels::NormRule::kLength) {
  const int d = codec.head_dim();
  const size_t page_bytes = codec.layout().page_bytes;
  const int64_t stride = static_cast<int64_t>(kPageTokens) * d;
  std::vector<float> x = Gaussian(static_cast<size_t>(stride) * pages, seed, 0.7f);
  DeviceCodecs codecs;
  StatusOr<int> index = codecs.Add(codec);
  ASSERT_TRUE(index.ok()) << index.status().message();
  DeviceBuffer dx = ToDevice(x);
  StatusOr<DeviceBuffer> dpages = DeviceBuffer::Allocate(page_bytes * pages);
  ASSERT_TRUE(dpages.ok());
  ASSERT_EQ(cudaMemset(dpages->get(), 0xAB, page_bytes * pages), cudaSuccess);  // poison: every byte is written
  std::vector<uint8_t*> ptrs(pages);
  for (int p = 0; p < pages; ++p) ptrs[p] = dpages->as<uint8_t>() + page_bytes * p;
  DeviceBuffer dptrs = ToDevice(ptrs);
  ASSERT_OK(
      EncodePages(codecs, *index, dx.as<float>(), stride, n, dptrs.as<uint8_t*>(), pages, nullptr, nullptr, rule));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> got = ToHost<uint8_t>(*dpages, page_bytes * pages);
  for (int p = 0; p < pages; ++p) {
    std::vector<uint8_t> want(page_bytes);
    ASSERT_OK(codec.EncodePageReference(x.data() + stride * p, n, want, rule));
    size_t diff = 0, first = page_bytes;
    for (size_t i = 0; i < page_bytes; ++i) {
      if (got[page_bytes * p + i] != want[i]) {
        ++diff;
        first = std::min(first, i);
      }
    }
    EXPECT_EQ(diff, 0u) << kernels::FormatName(codec.format()) << " d=" << d << " n=" << n << " page " << p << ": "
                        << diff << " bytes differ, first at " << first;
  }
}

TEST(CudaEncode, EveryFormatMatchesTheReferenceBytes) {
  SKIP_WITHOUT_GPU();
  for (KvFormat f : kAllFormats) {
    for (int d : {64, 128, 96}) {
      auto codec = KvCodec::Create(f, d, 0x1234 + d);
      ASSERT_TRUE(codec.ok());
      CheckEncode(**codec, kPageTokens, 3, 7 + d);
      CheckEncode(**codec, 37, 2, 9 + d);
      CheckEncode(**codec, kPageTokens, 2, 13 + d, kernels::NormRule::kInnerProduct);
    }
  }
}

TEST(CudaEncode, TrainedOutlierSetMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  const int d = 128;
  std::vector<float> x = Gaussian(static_cast<size_t>(256) * d, 5);
  for (int t = 0; t < 256; ++t) {
    for (int c : {3, 17, 40, 41, 90, 127}) x[static_cast<size_t>(t) * d + c] *= 9.0f;
  }
  for (KvFormat f : {KvFormat::kTq2_5, KvFormat::kTq3_5}) {
    auto codec = KvCodec::Create(f, d, 99);
    ASSERT_TRUE(codec.ok());
    ASSERT_OK((*codec)->Train(x.data(), 256));
    CheckEncode(**codec, kPageTokens, 2, 11);
  }
}

TEST(CudaEncode, Int8NonFiniteInputIsReported) {
  SKIP_WITHOUT_GPU();
  auto codec = KvCodec::Create(KvFormat::kInt8, 64);
  ASSERT_TRUE(codec.ok());
  DeviceCodecs codecs;
  StatusOr<int> index = codecs.Add(**codec);
  ASSERT_TRUE(index.ok());
  std::vector<float> x = Gaussian(static_cast<size_t>(kPageTokens) * 64, 3);
  x[100] = NAN;
  DeviceBuffer dx = ToDevice(x);
  StatusOr<DeviceBuffer> page = DeviceBuffer::Allocate((*codec)->layout().page_bytes);
  ASSERT_TRUE(page.ok());
  std::vector<uint8_t*> ptrs = {page->as<uint8_t>()};
  DeviceBuffer dptrs = ToDevice(ptrs);
  DeviceBuffer bad = ToDevice(std::vector<int>{0});
  ASSERT_OK(EncodePages(codecs, *index, dx.as<float>(), 0, kPageTokens, dptrs.as<uint8_t*>(), 1, bad.as<int>(),
                        nullptr));
  EXPECT_EQ(ToHost<int>(bad, 1)[0], 1);
}

// A KV head's cache: host pages (for the references) and the same pages on the device.
struct Cache {
  int d = 0;
  std::vector<std::vector<uint8_t>> k_pages, v_pages;
  std::vector<KvFormat> k_formats, v_formats;
  std::vector<int> lengths;
  std::vector<float> k_rows, v_rows;  // [tokens][d]: what the pages decode to, then the tail rows
  std::vector<float> tail_k, tail_v;  // [tail][d]
  std::vector<DeviceBuffer> held;
  std::vector<GpuPage> table;

  Cache(int dim, const std::vector<std::pair<KvFormat, KvFormat>>& formats, const std::vector<int>& lens, int tail,
        DeviceCodecs& codecs, uint64_t seed)
      : d(dim), lengths(lens) {
    for (size_t p = 0; p < formats.size(); ++p) {
      const int n = lens[p];
      std::vector<float> k = Gaussian(static_cast<size_t>(n) * d, seed + 2 * p, 1.3f);
      std::vector<float> v = Gaussian(static_cast<size_t>(n) * d, seed + 2 * p + 1);
      auto kc = KvCodec::Create(formats[p].first, d, 77);
      auto vc = KvCodec::Create(formats[p].second, d, 78);
      EXPECT_TRUE(kc.ok() && vc.ok());
      k_pages.emplace_back((*kc)->layout().page_bytes);
      v_pages.emplace_back((*vc)->layout().page_bytes);
      EXPECT_TRUE((*kc)->EncodePage(k.data(), n, k_pages.back()).ok());
      EXPECT_TRUE((*vc)->EncodePage(v.data(), n, v_pages.back()).ok());
      std::vector<float> kd(k.size()), vd(v.size());
      EXPECT_TRUE((*kc)->DecodePage(k_pages.back(), kd.data()).ok());
      EXPECT_TRUE((*vc)->DecodePage(v_pages.back(), vd.data()).ok());
      k_rows.insert(k_rows.end(), kd.begin(), kd.end());
      v_rows.insert(v_rows.end(), vd.begin(), vd.end());
      k_formats.push_back(formats[p].first);
      v_formats.push_back(formats[p].second);
      GpuPage g;
      g.k_codec = *codecs.Add(**kc);
      g.v_codec = *codecs.Add(**vc);
      g.num_tokens = n;
      held.push_back(ToDevice(k_pages.back()));
      g.k = held.back().as<uint8_t>();
      held.push_back(ToDevice(v_pages.back()));
      g.v = held.back().as<uint8_t>();
      table.push_back(g);
    }
    tail_k = Gaussian(static_cast<size_t>(tail) * d, seed + 1000, 1.3f);
    tail_v = Gaussian(static_cast<size_t>(tail) * d, seed + 1001);
    k_rows.insert(k_rows.end(), tail_k.begin(), tail_k.end());
    v_rows.insert(v_rows.end(), tail_v.begin(), tail_v.end());
  }
  int tail() const { return static_cast<int>(tail_k.size()) / d; }
  int total() const { return static_cast<int>(k_rows.size()) / d; }
};

// Double-precision attention of q [group][d] over the first `limit` rows.
std::vector<float> Reference(const Cache& c, const float* q, int group, int limit) {
  const int d = c.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<float> out(static_cast<size_t>(group) * d);
  for (int g = 0; g < group; ++g) {
    std::vector<double> s(limit);
    double m = -1e300;
    for (int t = 0; t < limit; ++t) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double{q[g * d + i]} * c.k_rows[static_cast<size_t>(t) * d + i];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    double l = 0;
    std::vector<double> o(d, 0.0);
    for (int t = 0; t < limit; ++t) {
      const double p = std::exp(s[t] - m);
      l += p;
      for (int i = 0; i < d; ++i) o[i] += p * c.v_rows[static_cast<size_t>(t) * d + i];
    }
    for (int i = 0; i < d; ++i) out[static_cast<size_t>(g) * d + i] = limit > 0 ? static_cast<float>(o[i] / l) : 0.0f;
  }
  return out;
}

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Runs one GPU call with one query per limit (all over the whole cache) and checks each against Reference.
void CheckAttention(Cache& cache, DeviceCodecs& codecs, int group, const std::vector<int>& limits, uint64_t seed,
                    const std::string& what) {
  const int d = cache.d;
  const size_t qn = static_cast<size_t>(group) * d;
  std::vector<float> q = Gaussian(qn * limits.size(), seed);
  DeviceBuffer dq = ToDevice(q);
  DeviceBuffer dtk = ToDevice(cache.tail_k), dtv = ToDevice(cache.tail_v);
  StatusOr<DeviceBuffer> dout = DeviceBuffer::Allocate(sizeof(float) * qn * limits.size());
  ASSERT_TRUE(dout.ok());
  ASSERT_EQ(cudaMemset(dout->get(), 0xFF, sizeof(float) * qn * limits.size()), cudaSuccess);  // NaN poison
  std::vector<GpuQuery> queries;
  for (size_t i = 0; i < limits.size(); ++i) {
    GpuQuery gq;
    gq.q = dq.as<float>() + qn * i;
    gq.out = dout->as<float>() + qn * i;
    gq.first_page = 0;
    gq.num_pages = static_cast<int>(cache.table.size());
    gq.tail_k = dtk.as<float>();
    gq.tail_v = dtv.as<float>();
    gq.tail_tokens = cache.tail();
    gq.limit = limits[i];
    queries.push_back(gq);
  }
  PagedAttention attention;
  ASSERT_OK(attention.Run(codecs, cache.table, queries, d, group, 0.0f, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got = ToHost<float>(*dout, qn * limits.size());
  for (size_t i = 0; i < limits.size(); ++i) {
    std::vector<float> g(got.begin() + qn * i, got.begin() + qn * (i + 1));
    std::vector<float> want = Reference(cache, q.data() + qn * i, group, std::min(limits[i], cache.total()));
    EXPECT_LT(RelError(g, want), 2e-5) << what << ": query " << i << " limit " << limits[i];
  }
}

TEST(CudaAttention, MixedFormatsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  for (int d : {64, 128, 96}) {
    DeviceCodecs codecs;
    Cache cache(d,
                {{KvFormat::kF16, KvFormat::kF16},
                 {KvFormat::kTq4, KvFormat::kTq4},
                 {KvFormat::kInt8, KvFormat::kTq3},
                 {KvFormat::kTq3_5, KvFormat::kInt8},
                 {KvFormat::kTq4p, KvFormat::kTq2_5},
                 {KvFormat::kTq8, KvFormat::kTq3p},
                 {KvFormat::kTq2, KvFormat::kF16}},
                {128, 128, 128, 128, 128, 128, 77}, 45, codecs, 100 + d);
    for (int group : {1, 3, 4, 8}) {
      CheckAttention(cache, codecs, group, {1 << 30}, 300 + group, "d=" + std::to_string(d) + " group " +
                                                                        std::to_string(group));
    }
  }
}

TEST(CudaAttention, CausalLimitsCutPagesAndTail) {
  SKIP_WITHOUT_GPU();
  DeviceCodecs codecs;
  Cache cache(64, {{KvFormat::kTq4, KvFormat::kTq4}, {KvFormat::kTq3, KvFormat::kInt8}, {KvFormat::kF16, KvFormat::kTq4}},
              {128, 128, 128}, 100, codecs, 17);
  CheckAttention(cache, codecs, 3, {1, 2, 127, 128, 129, 200, 256, 300, 384, 385, 450, 484, 10000}, 21, "prefill");
}

TEST(CudaAttention, LongContextAgreesWithTheCpuReferenceKernel) {
  SKIP_WITHOUT_GPU();
  // 64 pages (8192 tokens) of tq4 K and V: the GPU against DecodeAttentionReference (no value skipping).
  const int d = 64, group = 3, pages = 64;
  DeviceCodecs codecs;
  Cache cache(d, std::vector<std::pair<KvFormat, KvFormat>>(pages, {KvFormat::kTq4, KvFormat::kTq4}),
              std::vector<int>(pages, 128), 0, codecs, 31);
  std::vector<kernels::KvPageRef> refs;
  for (int p = 0; p < pages; ++p) {
    refs.push_back({cache.k_pages[p].data(), cache.v_pages[p].data(), KvFormat::kTq4, KvFormat::kTq4, 128});
  }
  std::vector<float> q = Gaussian(static_cast<size_t>(group) * d, 41, 2.0f);
  std::vector<float> want(q.size());
  kernels::AttentionOptions options;
  options.skip_threshold = 0.0f;
  ASSERT_OK(kernels::DecodeAttentionReference(refs, d, q.data(), group, options, want.data(), nullptr));
  DeviceBuffer dq = ToDevice(q);
  StatusOr<DeviceBuffer> dout = DeviceBuffer::Allocate(sizeof(float) * q.size());
  ASSERT_TRUE(dout.ok());
  GpuQuery gq;
  gq.q = dq.as<float>();
  gq.out = dout->as<float>();
  gq.num_pages = pages;
  gq.limit = pages * 128;
  PagedAttention attention;
  ASSERT_OK(attention.Run(codecs, cache.table, {&gq, 1}, d, group, 0.0f, nullptr));
  EXPECT_EQ(attention.last_blocks(), pages);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_LT(RelError(ToHost<float>(*dout, q.size()), want), 2e-5);
}

// Argument errors come back before any device work: these run with or without a GPU.
TEST(CudaAttention, BadCallsAreInvalidArgument) {
  DeviceCodecs codecs;
  GpuQuery q;
  q.num_pages = 2;
  q.limit = 10;
  PagedAttention attention;
  std::vector<GpuPage> none;
  EXPECT_EQ(attention.Run(codecs, none, {&q, 1}, 64, 3, 0.0f, nullptr).code(), StatusCode::kInvalidArgument);
  GpuQuery ok;
  EXPECT_EQ(attention.Run(codecs, none, {&ok, 1}, 64, kMaxGroup + 1, 0.0f, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(attention.Run(codecs, none, {&ok, 1}, 60, 3, 0.0f, nullptr).code(), StatusCode::kInvalidArgument);
  std::vector<GpuPage> bad(1);
  bad[0].k_codec = 5;
  q.num_pages = 1;
  EXPECT_EQ(attention.Run(codecs, bad, {&q, 1}, 64, 3, 0.0f, nullptr).code(), StatusCode::kInvalidArgument);
  GpuQuery tail;
  tail.tail_tokens = 200;
  EXPECT_EQ(attention.Run(codecs, none, {&tail, 1}, 64, 3, 0.0f, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePages(codecs, 0, nullptr, 0, 10, nullptr, 1, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(CudaDevice, ProbeSaysWhyWhenThereIsNoGpu) {
  StatusOr<DeviceInfo> info = ProbeDevice();
  if (info.ok()) {
    EXPECT_GT(info->count, 0);
    EXPECT_FALSE(info->name.empty());
    EXPECT_GT(info->total_bytes, 0u);
    std::printf("GPU: %s, sm_%d%d, %d SMs, %.1f GiB\n", info->name.c_str(), info->sm_major, info->sm_minor,
                info->multiprocessors, info->total_bytes / 1073741824.0);
  } else {
    EXPECT_EQ(info.status().code(), StatusCode::kUnavailable);
    EXPECT_FALSE(info.status().message().empty());
  }
}

}  // namespace
}  // namespace tq::gpu
