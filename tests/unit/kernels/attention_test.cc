// Attention on pages: the scalar reference against a float attention over decoded vectors, and the SIMD kernels
// against the scalar reference on every SIMD target this CPU supports.
#include <gtest/gtest.h>


#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/rng.h"
#include "tests/unit/simd_targets.h"

namespace tq::kernels {
namespace {

// A KV head's cache as pages of given formats; page p holds tokens [p * 128, p * 128 + lengths[p]).
struct TestCache {
  int head_dim = 0;
  std::vector<std::vector<uint8_t>> k_pages, v_pages;
  std::vector<KvPageRef> refs;
  std::vector<float> k_decoded, v_decoded;  // [tokens][head_dim], what the pages decode to

  TestCache(int d, const std::vector<std::pair<KvFormat, KvFormat>>& formats, const std::vector<int>& lengths,
            uint64_t seed, float key_scale = 1.0f)
      : head_dim(d) {
    Rng rng(seed);
    for (size_t p = 0; p < formats.size(); ++p) {
      const int n = lengths[p];
      std::vector<float> k(static_cast<size_t>(n) * d), v(k.size());
      for (float& x : k) x = key_scale * static_cast<float>(rng.Gaussian());
      for (float& x : v) x = static_cast<float>(rng.Gaussian());
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
      k_decoded.insert(k_decoded.end(), kd.begin(), kd.end());
      v_decoded.insert(v_decoded.end(), vd.begin(), vd.end());
    }
    for (size_t p = 0; p < formats.size(); ++p) {
      refs.push_back({k_pages[p].data(), v_pages[p].data(), formats[p].first, formats[p].second, lengths[p]});
    }
  }
};

// Corrections as KvPageRef takes them: score biases per page [num_q] for every token and [num_q] for the page's
// token 0, and a value correction [head_dim] for token 0.
struct Biases {
  std::vector<std::vector<float>> page, first;  // [pages][num_q]
  std::vector<std::vector<float>> value;        // [pages][head_dim]

  Biases(int pages, int num_q, int head_dim, uint64_t seed) {
    Rng rng(seed);
    for (int p = 0; p < pages; ++p) {
      page.emplace_back(num_q);
      first.emplace_back(num_q);
      value.emplace_back(head_dim);
      for (float& b : page.back()) b = static_cast<float>(2.0 * rng.Gaussian());
      for (float& b : first.back()) b = static_cast<float>(3.0 * rng.Gaussian());
      for (float& b : value.back()) b = static_cast<float>(rng.Gaussian());
    }
  }
  void Attach(std::vector<KvPageRef>& refs) const {
    for (size_t p = 0; p < refs.size(); ++p) {
      refs[p].score_bias = page[p].data();
      refs[p].first_bias = first[p].data();
      refs[p].first_value = value[p].data();
    }
  }
};

// Plain float attention over decoded vectors: q [num_q][d] over tokens [first, limit). With `biases`, query
// q_index0 + g gets their scores; softcap > 0 caps each score s (with its biases) at softcap * tanh(s / softcap).
std::vector<float> FloatAttention(const TestCache& cache, const float* q, int num_q, int limit, int first = 0,
                                  const Biases* biases = nullptr, int q_index0 = 0, double softcap = 0.0) {
  const int d = cache.head_dim;
  std::vector<float> out(static_cast<size_t>(num_q) * d, 0.0f);
  for (int g = 0; g < num_q; ++g) {
    std::vector<double> s(limit);
    double m = -1e300;
    for (int t = first; t < limit; ++t) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += static_cast<double>(q[g * d + i]) * cache.k_decoded[t * d + i];
      s[t] = dot / std::sqrt(static_cast<double>(d));
      if (biases != nullptr) {
        const size_t page = t / kPageTokens;  // TestCache pages are full except the last
        s[t] += biases->page[page][q_index0 + g] + (t % kPageTokens == 0 ? biases->first[page][q_index0 + g] : 0.0);
      }
      if (softcap > 0) s[t] = softcap * std::tanh(s[t] / softcap);
      m = std::max(m, s[t]);
    }
    double l = 0;
    std::vector<double> o(d, 0.0);
    for (int t = first; t < limit; ++t) {
      const double p = std::exp(s[t] - m);
      l += p;
      const bool fix = biases != nullptr && t % kPageTokens == 0;
      for (int i = 0; i < d; ++i) {
        o[i] += p * (cache.v_decoded[t * d + i] + (fix ? biases->value[t / kPageTokens][i] : 0.0f));
      }
    }
    for (int i = 0; i < d; ++i) out[g * d + i] = static_cast<float>(o[i] / l);
  }
  return out;
}

std::vector<float> Queries(int n, int d, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> q(static_cast<size_t>(n) * d);
  for (float& x : q) x = static_cast<float>(rng.Gaussian());
  return q;
}

// max |a - b| / max |b|
double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return err / scale;
}

// Runs the reference prefill of q: [rows][group][head_dim] over `cache` and checks each row against FloatAttention
// (causal, options.window, `biases`).
void ExpectPrefillMatchesFloat(const TestCache& cache, const std::vector<float>& q, int rows, int group, int first,
                               const AttentionOptions& options, const Biases* biases, const std::string& what) {
  const int d = cache.head_dim;
  const int total = static_cast<int>(cache.k_decoded.size()) / d;
  std::vector<float> out(q.size());
  ASSERT_TRUE(PrefillAttentionReference(cache.refs, d, q.data(), rows, group, first, options, out.data(), nullptr)
                  .ok());
  for (int r = 0; r < rows; ++r) {
    const int limit = std::min(first + r + 1, total);
    const int from = options.window > 0 ? std::max(0, limit - options.window) : 0;
    std::vector<float> want =
        FloatAttention(cache, q.data() + r * group * d, group, limit, from, biases, r * group, options.softcap);
    std::vector<float> got(out.begin() + r * group * d, out.begin() + (r + 1) * group * d);
    EXPECT_LT(RelErr(got, want), 1e-5) << what << " row " << r;
  }
}

std::vector<int> Lengths(int tokens) {
  std::vector<int> lengths;
  for (; tokens > 0; tokens -= kPageTokens) lengths.push_back(std::min(tokens, kPageTokens));
  return lengths;
}

// Every paged row of the format table, so a new format is covered without editing the tests.
const std::vector<KvFormat> kAll = [] {
  std::vector<KvFormat> all;
  for (const FormatInfo& info : kFormatTable) {
    if (IsPaged(info.format)) all.push_back(info.format);
  }
  return all;
}();

TEST(AttentionReference, MatchesFloatAttentionOverDecodedVectors) {
  for (KvFormat f : kAll) {
    const int d = 64, tokens = 300;
    std::vector<std::pair<KvFormat, KvFormat>> formats(3, {f, f});
    TestCache cache(d, formats, Lengths(tokens), 5);
    const std::vector<float> q = Queries(3, d, 9);
    std::vector<float> out(q.size());
    AttentionOptions options;
    options.skip_threshold = 0.0f;
    ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), 3, options, out.data(), nullptr).ok());
    EXPECT_LT(RelErr(out, FloatAttention(cache, q.data(), 3, tokens)), 1e-5) << FormatName(f);
  }
}

TEST(AttentionReference, MixedFormatsAndPrefillCausalMask) {
  const int d = 96;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kInt8, KvFormat::kTq2_5}, {KvFormat::kF16, KvFormat::kF16},
      {KvFormat::kTq3p, KvFormat::kInt8}};
  std::vector<int> lengths = {128, 128, 128, 50};
  TestCache cache(d, formats, lengths, 6);
  const int rows = 5, group = 2, first = 380;
  const std::vector<float> q = Queries(rows * group, d, 10);
  AttentionOptions options;
  options.skip_threshold = 0.0f;
  ExpectPrefillMatchesFloat(cache, q, rows, group, first, options, nullptr, "mixed");
}

TEST(AttentionReference, SlidingWindowKeepsTheLastTokensOnly) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq4}, {KvFormat::kF16, KvFormat::kInt8}, {KvFormat::kTq3, KvFormat::kF16}};
  std::vector<int> lengths = {128, 128, 90};
  TestCache cache(d, formats, lengths, 16);
  const int total = 346;
  AttentionOptions options;
  options.skip_threshold = 0.0f;
  for (int window : {1, 60, 128, 200, 1000}) {
    options.window = window;
    const int rows = 4, group = 3, first = 300;
    const std::vector<float> q = Queries(rows * group, d, 30 + window);
    ExpectPrefillMatchesFloat(cache, q, rows, group, first, options, nullptr, "window " + std::to_string(window));
    std::vector<float> dec(static_cast<size_t>(group) * d);
    ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), group, options, dec.data(), nullptr).ok());
    EXPECT_LT(RelErr(dec, FloatAttention(cache, q.data(), group, total, std::max(0, total - window))), 1e-5)
        << "decode, window " << window;
  }
}

TEST(AttentionReference, PageAndFirstTokenCorrections) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq4}, {KvFormat::kInt8, KvFormat::kF16}, {KvFormat::kTq3, KvFormat::kTq4}};
  std::vector<int> lengths = {128, 128, 70};
  TestCache cache(d, formats, lengths, 41);
  const int rows = 4, group = 3, first = 320;
  const Biases biases(3, rows * group, d, 42);
  biases.Attach(cache.refs);
  const std::vector<float> q = Queries(rows * group, d, 43);
  AttentionOptions options;
  options.skip_threshold = 0.0f;
  ExpectPrefillMatchesFloat(cache, q, rows, group, first, options, &biases, "corrections");
  // A bias that is the same for every token of every page changes nothing (softmax shift invariance) ...
  std::vector<float> same(rows * group, 5.0f), none(q.size()), shifted(q.size());
  TestCache plain(d, formats, lengths, 41);
  ASSERT_TRUE(PrefillAttentionReference(plain.refs, d, q.data(), rows, group, first, options, none.data(), nullptr)
                  .ok());
  for (KvPageRef& ref : plain.refs) ref.score_bias = same.data();
  ASSERT_TRUE(PrefillAttentionReference(plain.refs, d, q.data(), rows, group, first, options, shifted.data(),
                                        nullptr).ok());
  EXPECT_LT(RelErr(shifted, none), 1e-6);
  // ... and a large first-token bias puts all the weight on token 0.
  std::vector<float> sink(rows * group, 80.0f), pinned(q.size());
  plain.refs[0].first_bias = sink.data();
  ASSERT_TRUE(PrefillAttentionReference(plain.refs, d, q.data(), rows, group, first, options, pinned.data(), nullptr)
                  .ok());
  for (int g = 0; g < rows * group; ++g) {
    for (int i = 0; i < d; ++i) EXPECT_NEAR(pinned[g * d + i], plain.v_decoded[i], 1e-4);
  }
}

// Gemma 2's score capping: each scaled score, with its corrections, becomes cap * tanh(s / cap) before the softmax.
TEST(AttentionReference, SoftcapBendsScoresBeforeTheSoftmax) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq4}, {KvFormat::kInt8, KvFormat::kF16}, {KvFormat::kTq3, KvFormat::kTq4}};
  std::vector<int> lengths = {128, 128, 70};
  TestCache cache(d, formats, lengths, 61, /*key_scale=*/4.0f);  // scores of several units: the cap bends them
  const int rows = 4, group = 3, first = 320;
  const Biases biases(3, rows * group, d, 62);
  biases.Attach(cache.refs);
  const std::vector<float> q = Queries(rows * group, d, 63);
  AttentionOptions options;
  options.skip_threshold = 0.0f;
  for (float cap : {1.0f, 5.0f}) {
    options.softcap = cap;
    options.window = 0;
    ExpectPrefillMatchesFloat(cache, q, rows, group, first, options, &biases, "softcap " + std::to_string(cap));
    options.window = 100;
    ExpectPrefillMatchesFloat(cache, q, rows, group, first, options, &biases, "softcap, window");
  }
  // The cap changes the output (a kernel that ignored it would fail the checks above).
  std::vector<float> capped(q.size()), plain(q.size());
  options.window = 0;
  options.softcap = 1.0f;
  ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), group, options, capped.data(), nullptr).ok());
  options.softcap = 0.0f;
  ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), group, options, plain.data(), nullptr).ok());
  EXPECT_GT(RelErr(std::vector<float>(capped.begin(), capped.begin() + group * d),
                   std::vector<float>(plain.begin(), plain.begin() + group * d)),
            0.05);
  for (float bad : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    options.softcap = bad;
    EXPECT_EQ(DecodeAttentionReference(cache.refs, d, q.data(), group, options, capped.data(), nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeAttention(cache.refs, d, q.data(), group, options, capped.data(), nullptr).code(),
              StatusCode::kInvalidArgument);
  }
}

TEST(AttentionReference, SkipsTinyWeightsAndCountsThem) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats(4, {KvFormat::kTq4, KvFormat::kTq4});
  TestCache cache(d, formats, Lengths(512), 8, /*key_scale=*/6.0f);  // peaked attention
  const std::vector<float> q = Queries(2, d, 3);
  std::vector<float> exact(q.size()), skipped(q.size());
  AttentionOptions none;
  none.skip_threshold = 0.0f;
  AttentionStats s0, s1;
  ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), 2, none, exact.data(), &s0).ok());
  ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), 2, {}, skipped.data(), &s1).ok());
  EXPECT_EQ(s0.skipped, 0);
  EXPECT_EQ(s1.scored, 2 * 512);
  EXPECT_GT(s1.skipped, 100);
  EXPECT_LT(RelErr(skipped, exact), 1e-4);
}

TEST(AttentionReference, BadPagesAreStatusErrors) {
  const int d = 64;
  TestCache cache(d, {{KvFormat::kTq4, KvFormat::kTq4}}, {100}, 1);
  const std::vector<float> q = Queries(1, d, 1);
  std::vector<float> out(d);
  std::vector<KvPageRef> refs = cache.refs;
  refs[0].k_format = KvFormat::kTq3;  // the header says tq4
  EXPECT_FALSE(DecodeAttention(refs, d, q.data(), 1, {}, out.data(), nullptr).ok());
  refs = cache.refs;
  refs[0].num_tokens = 101;
  EXPECT_FALSE(DecodeAttention(refs, d, q.data(), 1, {}, out.data(), nullptr).ok());
  refs = cache.refs;
  cache.k_pages[0][5] ^= 1;  // corrupt header
  EXPECT_EQ(DecodeAttention(refs, d, q.data(), 1, {}, out.data(), nullptr).code(), StatusCode::kDataLoss);
  EXPECT_FALSE(DecodeAttention(refs, 72, q.data(), 1, {}, out.data(), nullptr).ok());
  EXPECT_TRUE(DecodeAttention({}, d, q.data(), 1, {}, out.data(), nullptr).ok());
  EXPECT_EQ(out, std::vector<float>(d, 0.0f));
}

// Pages after the first are checked too (the plan reuses a header's checks only for the same 64 bytes), and a
// page with another rotation seed in the middle of a head's pages gets its own codec.
TEST(AttentionReference, EveryPageHeaderIsCheckedAndAnotherSeedGetsItsCodec) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats(4, {KvFormat::kTq4, KvFormat::kTq4});
  TestCache cache(d, formats, Lengths(512), 3);
  // Page 2's keys re-coded with seed 99 (the others have 77), its decoded keys replaced.
  auto other = KvCodec::Create(KvFormat::kTq4, d, 99);
  ASSERT_TRUE(other.ok());
  Rng rng(4);
  std::vector<float> k(static_cast<size_t>(kPageTokens) * d);
  for (float& x : k) x = static_cast<float>(rng.Gaussian());
  ASSERT_TRUE((*other)->EncodePage(k.data(), kPageTokens, cache.k_pages[2]).ok());
  ASSERT_TRUE((*other)->DecodePage(cache.k_pages[2], cache.k_decoded.data() + 2 * kPageTokens * d).ok());
  const std::vector<float> q = Queries(3, d, 5);
  std::vector<float> out(q.size());
  AttentionOptions exact;
  exact.skip_threshold = 0.0f;
  for (bool simd : {false, true}) {
    const Status s = simd ? DecodeAttention(cache.refs, d, q.data(), 3, exact, out.data(), nullptr)
                          : DecodeAttentionReference(cache.refs, d, q.data(), 3, exact, out.data(), nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_LT(RelErr(out, FloatAttention(cache, q.data(), 3, 512)), 1e-5) << (simd ? "simd" : "reference");
  }
  for (int page : {1, 3}) {
    for (std::vector<std::vector<uint8_t>>* side : {&cache.k_pages, &cache.v_pages}) {
      (*side)[page][20] ^= 4;  // a seed byte: the header checksum no longer matches
      EXPECT_EQ(DecodeAttention(cache.refs, d, q.data(), 3, {}, out.data(), nullptr).code(),
                StatusCode::kDataLoss)
          << "page " << page;
      (*side)[page][20] ^= 4;
    }
  }
  // A later page whose header bytes equal the page before's, listed under another format by the page table.
  std::vector<KvPageRef> refs = cache.refs;
  refs[3].v_format = KvFormat::kTq3;
  EXPECT_FALSE(DecodeAttention(refs, d, q.data(), 3, {}, out.data(), nullptr).ok());
  refs[3].v_format = KvFormat::kTq4;
  refs[3].num_tokens = kPageTokens + 1;  // more tokens than the (memoized) header holds
  EXPECT_EQ(DecodeAttention(refs, d, q.data(), 3, {}, out.data(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(DecodeAttention(cache.refs, d, q.data(), 3, {}, out.data(), nullptr).ok());
}

// ---- SIMD against the scalar reference on every supported target. ----

class AttentionSimd : public tq::testing::SimdTargetTest {};

TEST_P(AttentionSimd, MatchesReferenceForEveryFormatDimAndLength) {
  for (KvFormat f : kAll) {
    for (int d : {64, 128, 256}) {
      for (int tokens : {1, 37, 128, 300}) {
        const std::vector<int> lengths = Lengths(tokens);
        std::vector<std::pair<KvFormat, KvFormat>> formats(lengths.size(), {f, f});
        TestCache cache(d, formats, lengths, tokens + d);
        for (int num_q : {1, 3, 7}) {
          const std::vector<float> q = Queries(num_q, d, num_q);
          std::vector<float> want(q.size()), got(q.size());
          AttentionStats sw, sg;
          ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), num_q, {}, want.data(), &sw).ok());
          ASSERT_TRUE(DecodeAttention(cache.refs, d, q.data(), num_q, {}, got.data(), &sg).ok());
          EXPECT_LT(RelErr(got, want), 1e-5) << hwy::TargetName(GetParam()) << " " << FormatName(f) << " d=" << d
                                             << " tokens=" << tokens << " q=" << num_q;
          EXPECT_EQ(sg.scored, sw.scored);
        }
      }
    }
  }
}

TEST_P(AttentionSimd, MixedPartialPagesPrefillAndSkipping) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kF16, KvFormat::kTq4},  {KvFormat::kTq4, KvFormat::kTq3},   {KvFormat::kTq3, KvFormat::kInt8},
      {KvFormat::kInt8, KvFormat::kF16}, {KvFormat::kTq2_5, KvFormat::kTq3p}, {KvFormat::kTq4p, KvFormat::kTq8},
      {KvFormat::kTq3c, KvFormat::kTq2c}, {KvFormat::kTq4c, KvFormat::kTq3}};
  std::vector<int> lengths = {128, 77, 128, 5, 128, 128, 128, 33};
  TestCache cache(d, formats, lengths, 21, /*key_scale=*/4.0f);
  const int rows = 6, group = 3, first = 700;
  const std::vector<float> q = Queries(rows * group, d, 4);
  std::vector<float> want(q.size()), got(q.size());
  AttentionStats sw, sg;
  ASSERT_TRUE(PrefillAttentionReference(cache.refs, d, q.data(), rows, group, first, {}, want.data(), &sw).ok());
  ASSERT_TRUE(PrefillAttention(cache.refs, d, q.data(), rows, group, first, {}, got.data(), &sg).ok());
  EXPECT_LT(RelErr(got, want), 1e-5) << hwy::TargetName(GetParam());
  EXPECT_EQ(sg.scored, sw.scored);
  EXPECT_GT(sw.skipped, 0);
  // Skip decisions can differ only for weights within float rounding of the threshold.
  EXPECT_NEAR(static_cast<double>(sg.skipped), static_cast<double>(sw.skipped), 2.0 + 1e-3 * sw.skipped);
}

TEST_P(AttentionSimd, SlidingWindowMatchesReference) {
  const int d = 64;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kInt8, KvFormat::kTq4}, {KvFormat::kF16, KvFormat::kF16},
      {KvFormat::kTq3, KvFormat::kInt8}};
  std::vector<int> lengths = {128, 128, 128, 61};
  TestCache cache(d, formats, lengths, 12, /*key_scale=*/2.0f);
  for (int window : {1, 17, 128, 129, 300, 5000}) {
    AttentionOptions options;
    options.window = window;
    const int rows = 7, group = 3, first = 370;
    const std::vector<float> q = Queries(rows * group, d, window);
    std::vector<float> want(q.size()), got(q.size());
    AttentionStats sw, sg;
    ASSERT_TRUE(PrefillAttentionReference(cache.refs, d, q.data(), rows, group, first, options, want.data(), &sw).ok());
    ASSERT_TRUE(PrefillAttention(cache.refs, d, q.data(), rows, group, first, options, got.data(), &sg).ok());
    EXPECT_LT(RelErr(got, want), 1e-5) << hwy::TargetName(GetParam()) << " window " << window;
    EXPECT_EQ(sg.scored, sw.scored) << "window " << window;
    std::vector<float> dw(static_cast<size_t>(group) * d), dg(dw.size());
    ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), group, options, dw.data(), nullptr).ok());
    ASSERT_TRUE(DecodeAttention(cache.refs, d, q.data(), group, options, dg.data(), nullptr).ok());
    EXPECT_LT(RelErr(dg, dw), 1e-5) << hwy::TargetName(GetParam()) << " decode, window " << window;
  }
}

TEST_P(AttentionSimd, CorrectionsMatchReference) {
  const int d = 128;
  std::vector<std::pair<KvFormat, KvFormat>> formats = {
      {KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kF16, KvFormat::kInt8}, {KvFormat::kTq3_5, KvFormat::kTq4}};
  std::vector<int> lengths = {128, 128, 45};
  TestCache cache(d, formats, lengths, 51, /*key_scale=*/2.0f);
  for (int window : {0, 150, 1000}) {
    AttentionOptions options;
    options.window = window;
    options.softcap = window == 1000 ? 2.0f : 0.0f;  // Gemma 2's score capping, with the corrections
    const int rows = 5, group = 4, first = 296;
    const Biases biases(3, rows * group, d, 52 + window);
    biases.Attach(cache.refs);
    const std::vector<float> q = Queries(rows * group, d, 53);
    std::vector<float> want(q.size()), got(q.size());
    ASSERT_TRUE(PrefillAttentionReference(cache.refs, d, q.data(), rows, group, first, options, want.data(), nullptr)
                    .ok());
    ASSERT_TRUE(PrefillAttention(cache.refs, d, q.data(), rows, group, first, options, got.data(), nullptr).ok());
    EXPECT_LT(RelErr(got, want), 1e-5) << hwy::TargetName(GetParam()) << " window " << window;
    std::vector<float> dw(static_cast<size_t>(group) * d), dg(dw.size());
    ASSERT_TRUE(DecodeAttentionReference(cache.refs, d, q.data(), group, options, dw.data(), nullptr).ok());
    ASSERT_TRUE(DecodeAttention(cache.refs, d, q.data(), group, options, dg.data(), nullptr).ok());
    EXPECT_LT(RelErr(dg, dw), 1e-5) << hwy::TargetName(GetParam()) << " decode, window " << window;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, AttentionSimd, ::testing::ValuesIn(tq::testing::SupportedSimdTargets()),
                         tq::testing::SimdTargetName);

}  // namespace
}  // namespace tq::kernels
