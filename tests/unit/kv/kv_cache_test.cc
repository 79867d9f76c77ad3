// SequenceKv: paged KV formats against the exact f32 rows, on synthetic keys and values.
#include "engine/kv/kv_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "kernels/formats/page.h"
#include "tests/unit/storage/storage_test_util.h"

namespace tq::engine {
namespace {

HParams SmallModel() {
  HParams hp;
  hp.n_layers = 2;
  hp.n_kv_heads = 2;
  hp.head_dim = 64;
  hp.n_heads = 4;
  return hp;
}

// Gemma-style: six layers, layers 0-4 attend to the last 256 positions, layer 5 to all.
HParams GemmaStyleModel() {
  HParams hp = SmallModel();
  hp.arch = FindArch("gemma3").value();
  hp.n_layers = 6;
  hp.n_rot = hp.head_dim;
  hp.sliding_window = 256;
  return hp;
}

// Relative error of `paged` attention against `exact` (same positions stored) over every layer and KV head, for
// queries q: [rows][group][head_dim] at positions first_pos...
double AttentionError(const SequenceKv& paged, const SequenceKv& exact, const HParams& hp, const std::vector<float>& q,
                      int rows, int group, int first_pos) {
  std::vector<float> a(q.size()), b(q.size());
  double err = 0, ref = 0;
  for (int l = 0; l < hp.n_layers; ++l) {
    for (int h = 0; h < hp.n_kv_heads; ++h) {
      EXPECT_TRUE(paged.Attend(l, h, q.data(), rows, group, first_pos, a.data(), nullptr, nullptr).ok());
      EXPECT_TRUE(exact.Attend(l, h, q.data(), rows, group, first_pos, b.data(), nullptr, nullptr).ok());
      for (size_t i = 0; i < a.size(); ++i) {
        err += (a[i] - b[i]) * (a[i] - b[i]);
        ref += b[i] * b[i];
      }
    }
  }
  return std::sqrt(err / ref);
}

// Appends n positions to a paged cache (layout from `spec`, tiers `tiers`) and to an exact f32 one, row pos from
// fill(pos, k, v) (k and v [n_kv_heads * head_dim]), then draws queries [rows][2][head_dim] = q_scale * g(rng) and
// returns AttentionError for the last `rows` positions.
double PagedVsExactError(const HParams& hp, const KvSpec& spec, int n, int rows, float q_scale, std::mt19937_64& rng,
                         std::normal_distribution<float>& g,
                         const std::function<void(int, std::vector<float>&, std::vector<float>&)>& fill,
                         const KvStoreOptions& tiers = {}) {
  auto layout = KvLayout::Create(hp, spec);
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  auto store = KvPageStore::Open(tiers, (*layout)->class_page_bytes());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  SequenceKv paged(*layout, n, store->get()), exact(hp, n);
  const int group = 2, row = hp.n_kv_heads * hp.head_dim;
  std::vector<float> k(row), v(row);
  for (int pos = 0; pos < n; ++pos) {
    fill(pos, k, v);
    for (int l = 0; l < hp.n_layers; ++l) {
      EXPECT_TRUE(paged.Append(l, pos, k.data(), v.data()).ok());
      EXPECT_TRUE(exact.Append(l, pos, k.data(), v.data()).ok());
    }
  }
  std::vector<float> q(static_cast<size_t>(rows) * group * hp.head_dim);
  for (float& x : q) x = q_scale * g(rng);
  return AttentionError(paged, exact, hp, q, rows, group, n - rows);
}

// Fills `n` positions of both caches with the same random K/V (with a large per-channel offset, as real keys
// have) and returns the relative error of the paged attention output against the f32 one, for the last
// `rows` positions.
double RelativeError(const std::string& k_fmt, const std::string& v_fmt, int n, int rows, uint64_t seed,
                     const KvStoreOptions& tiers = {}) {
  const HParams hp = SmallModel();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> offset(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim);
  for (float& o : offset) o = 3.0f * g(rng);
  return PagedVsExactError(
      hp, {k_fmt, v_fmt, 0}, n, rows, 0.3f, rng, g,
      [&](int, std::vector<float>& k, std::vector<float>& v) {
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = offset[i] + g(rng);
          v[i] = -offset[i] + g(rng);
        }
      },
      tiers);
}

// RoPE(x, pos) of one head, either style.
std::vector<float> Rotate(const KeyRope& rope, const std::vector<float>& x, int pos) {
  std::vector<float> y = x;
  const int half = rope.n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const int a = rope.style == RopeStyle::kAdjacent ? 2 * i : i;
    const int b = rope.style == RopeStyle::kAdjacent ? 2 * i + 1 : i + half;
    const double ang = pos * std::pow(static_cast<double>(rope.base), -2.0 * i / rope.n_rot);
    y[a] = static_cast<float>(x[a] * std::cos(ang) - x[b] * std::sin(ang));
    y[b] = static_cast<float>(x[a] * std::sin(ang) + x[b] * std::cos(ang));
  }
  return y;
}

// Queries that read a few channels: given them at Append, the key scale (FixTransform) spends the code's precision
// on those channels, and the attention error falls well below the keys-only rule's on the same data.
TEST(SequenceKvTest, QueryAwareKeyScaleLowersTheError) {
  const HParams hp = SmallModel();
  const int n = 300, rows = 8, group = hp.n_heads / hp.n_kv_heads;
  const int row = hp.n_kv_heads * hp.head_dim, q_row = hp.n_heads * hp.head_dim;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  // Query channel i has sd 3 for i % 8 == 0, else 0.1; keys are isotropic.
  auto draw_q = [&](float* q, int count) {
    for (int j = 0; j < count; ++j) q[j] = (j % hp.head_dim) % 8 == 0 ? 3.0f * g(rng) : 0.1f * g(rng);
  };
  auto layout = KvLayout::Create(hp, {"tq3", "f16", 0});
  KvSpec keys_spec{"tq3", "f16", 0};
  keys_spec.key_scale = "keys";
  auto keys_layout = KvLayout::Create(hp, keys_spec);
  ASSERT_TRUE(layout.ok() && keys_layout.ok()) << layout.status().ToString();
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  // kv.key_scale = keys: the queries Append is given are not used.
  SequenceKv aware(*layout, n, store->get()), plain(*layout, n, store->get()), exact(hp, n);
  SequenceKv keys_only(*keys_layout, n, store->get());
  std::vector<float> k(row), v(row), q(q_row);
  for (int pos = 0; pos < n; ++pos) {
    for (float& x : k) x = g(rng);
    for (float& x : v) x = g(rng);
    draw_q(q.data(), q_row);
    for (int l = 0; l < hp.n_layers; ++l) {
      ASSERT_TRUE(aware.Append(l, pos, k.data(), v.data(), q.data(), hp.n_heads).ok());
      ASSERT_TRUE(plain.Append(l, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(keys_only.Append(l, pos, k.data(), v.data(), q.data(), hp.n_heads).ok());
      ASSERT_TRUE(exact.Append(l, pos, k.data(), v.data()).ok());
    }
  }
  std::vector<float> queries(static_cast<size_t>(rows) * group * hp.head_dim);
  draw_q(queries.data(), static_cast<int>(queries.size()));
  const double e_aware = AttentionError(aware, exact, hp, queries, rows, group, n - rows);
  const double e_plain = AttentionError(plain, exact, hp, queries, rows, group, n - rows);
  EXPECT_LT(e_aware, 0.7 * e_plain) << "aware " << e_aware << " keys-only " << e_plain;
  EXPECT_DOUBLE_EQ(AttentionError(keys_only, exact, hp, queries, rows, group, n - rows), e_plain);
  KvSpec bad{"tq3", "f16", 0};
  bad.key_scale = "values";
  EXPECT_EQ(KvLayout::Create(hp, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(KeyOffsetsTest, PreRopeMeanUndoesRopeAndRotatedMeanAveragesIt) {
  const int d = 64;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> pre(d);
  for (float& x : pre) x = g(rng);
  // n_rot < head_dim: channels past n_rot are not rotated.
  for (const KeyRope rope : {KeyRope{64, RopeStyle::kAdjacent, 10000.0f}, KeyRope{48, RopeStyle::kHalves, 1e6f},
                             KeyRope{0, RopeStyle::kAdjacent, 10000.0f}}) {
    const int first = 256, n = 128;
    std::vector<float> rows;
    for (int t = 0; t < n; ++t) {
      const std::vector<float> r = Rotate(rope, pre, first + t);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    const std::vector<float> got = PreRopeMean(rope, rows.data(), n, 1, first, d);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(got[i], pre[i], 1e-4) << "n_rot " << rope.n_rot << " channel " << i;
    std::vector<float> mean(d), want(d, 0.0f);
    RotatedMean(rope, pre, first, n, d, mean.data());
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < d; ++i) want[i] += rows[static_cast<size_t>(t) * d + i] / n;
    }
    for (int i = 0; i < d; ++i) EXPECT_NEAR(mean[i], want[i], 1e-4) << "n_rot " << rope.n_rot << " channel " << i;
  }
}

TEST(SequenceKvTest, F16PagesMatchF32) {
  EXPECT_LT(RelativeError("f16", "f16", 300, 5, 1), 2e-3);
}

// Gemma 2's score cap reaches the page kernels (after the key offsets' score biases) and the plain f32 rows alike:
// f16 pages with the cap match f32 rows with it, for decode and prefill rows, and the cap changes the output.
TEST(SequenceKvTest, SoftcapOnPagesMatchesPlainRows) {
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"f16", "f16", 0});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const int n = 300, rows = 3, group = 2, row = hp.n_kv_heads * hp.head_dim;
  SequenceKv paged(*layout, n, store->get()), exact(hp, n);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> offset(row), k(row), v(row);
  for (float& o : offset) o = 3.0f * g(rng);  // keys with a per-channel offset, as real keys have
  for (int pos = 0; pos < n; ++pos) {
    for (int i = 0; i < row; ++i) {
      k[i] = offset[i] + g(rng);
      v[i] = g(rng);
    }
    for (int l = 0; l < hp.n_layers; ++l) {
      ASSERT_TRUE(paged.Append(l, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(exact.Append(l, pos, k.data(), v.data()).ok());
    }
  }
  std::vector<float> q(static_cast<size_t>(rows) * group * hp.head_dim);
  for (float& x : q) x = 0.5f * g(rng);
  auto diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err += (a[i] - b[i]) * (a[i] - b[i]);
      ref += b[i] * b[i];
    }
    return std::sqrt(err / ref);
  };
  std::vector<float> a(q.size()), b(q.size()), c(q.size());
  for (int l = 0; l < hp.n_layers; ++l) {
    for (int h = 0; h < hp.n_kv_heads; ++h) {
      ASSERT_TRUE(paged.Attend(l, h, q.data(), rows, group, n - rows, a.data(), nullptr, nullptr, 0, 1.5f).ok());
      ASSERT_TRUE(exact.Attend(l, h, q.data(), rows, group, n - rows, b.data(), nullptr, nullptr, 0, 1.5f).ok());
      ASSERT_TRUE(exact.Attend(l, h, q.data(), rows, group, n - rows, c.data(), nullptr, nullptr, 0, 0.0f).ok());
      EXPECT_LT(diff(a, b), 2e-3) << "layer " << l << " head " << h;
      EXPECT_GT(diff(c, b), 0.05) << "layer " << l << " head " << h << ": the cap changes nothing here";
    }
  }
}

// Pages no tier has room for stay in the sequence (overflow) and attention reads them as it reads stored ones.
// Before, the store took the page's bytes even when it refused it: the overflow copy was empty and attention
// failed with "KV page 0 is not in the store" (found by bench decode beyond the tier budgets).
TEST(SequenceKvTest, PagesOverTheBudgetsStayInTheSequence) {
  KvStoreOptions none;  // room for a couple of pages: most go over the budgets
  none.hot_bytes = 64 << 10;
  none.warm_bytes = 64 << 10;
  EXPECT_LT(RelativeError("f16", "f16", 300, 5, 1, none), 2e-3);
  EXPECT_LT(RelativeError("tq4", "tq4", 300, 5, 2, none), RelativeError("tq4", "tq4", 300, 5, 2) * 1.0001);
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"f16", "f16", 0});
  ASSERT_TRUE(layout.ok());
  auto store = KvPageStore::Open(none, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  SequenceKv kv(*layout, 300, store->get());
  std::vector<float> row(static_cast<size_t>(hp.n_kv_heads) * hp.head_dim, 0.5f);
  for (int pos = 0; pos < 300; ++pos) {
    for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(kv.Append(l, pos, row.data(), row.data()).ok());
  }
  const uint64_t page = (*layout)->class_page_bytes()[0];
  EXPECT_GT(kv.overflow_bytes(), page * hp.n_layers * hp.n_kv_heads);  // over half of the 2 pages per head
  EXPECT_EQ(kv.overflow_bytes() % page, 0u);
  EXPECT_TRUE(kv.fault().ok());
}

TEST(SequenceKvTest, CompressedPagesAreCloseAndOrdered) {
  const double e8 = RelativeError("tq8", "tq8", 300, 5, 2);
  const double e4 = RelativeError("tq4", "tq4", 300, 5, 2);
  const double e3 = RelativeError("tq3", "tq3", 300, 5, 2);
  EXPECT_LT(e8, 0.02);
  EXPECT_LT(e4, 0.15);
  EXPECT_LT(e8, e4);
  EXPECT_LT(e4, e3);
}

TEST(SequenceKvTest, PartialPagesAndPrefillRows) {
  // 1, 127, 128, 129 and 257 positions: empty, partial and full pages; several rows attend causally.
  for (int n : {1, 127, 128, 129, 257}) {
    EXPECT_LT(RelativeError("f16", "f16", n, std::min(n, 7), 3), 2e-3) << n;
    EXPECT_LT(RelativeError("tq8", "int8", n, std::min(n, 7), 3), 0.05) << n;
  }
}

// Keys as a llama layer makes them: RoPE(bias) + noise, where the pre-RoPE bias is `bias_scale` times a fixed random
// vector in the slow pairs (i >= 20 of 32: at most 0.4 radians per page, as real keys' large channels are), so
// one mean for the whole head leaves most of it in later pages; and token 0's key is `sink_scale` times longer
// than the others (an attention sink). Returns the relative error of tq4 attention against f32 for the last rows.
double RopeKeysError(float bias_scale, float sink_scale) {
  HParams hp = SmallModel();
  hp.arch = FindArch("llama").value();
  hp.n_rot = hp.head_dim;
  hp.rope_base = 10000.0f;
  const int d = hp.head_dim;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const KeyRope rope{d, RopeStyle::kAdjacent, 10000.0f};
  std::vector<std::vector<float>> bias(hp.n_kv_heads, std::vector<float>(d, 0.0f));  // per head, pre-RoPE
  for (std::vector<float>& b : bias) {
    for (int c = 0; c < d; ++c) {
      const float x = g(rng);  // drawn for every channel, kept for pairs 20..31
      b[c] = c >= 40 ? bias_scale * x : 0.0f;
    }
  }
  return PagedVsExactError(hp, {"tq4", "f16", 0}, 400, 4, 0.4f, rng, g,
                           [&](int pos, std::vector<float>& k, std::vector<float>& v) {
                             for (size_t i = 0; i < k.size(); ++i) {
                               k[i] = g(rng) * (pos == 0 ? sink_scale : 1.0f);
                               v[i] = g(rng);
                             }
                             for (int h = 0; h < hp.n_kv_heads; ++h) {
                               const std::vector<float> rotated = Rotate(rope, bias[h], pos);
                               for (int c = 0; c < d; ++c) k[h * d + c] += rotated[c];
                             }
                           });
}

TEST(SequenceKvTest, RotatingKeyBiasAndSinkCostNoAccuracy) {
  // Per-page key offsets take the RoPE-rotated bias out of the codes, and token 0 is corrected exactly, so tq4
  // attention is about as accurate with a large rotating bias and a long sink key as without either.
  const double plain = RopeKeysError(0.0f, 1.0f);
  const double biased = RopeKeysError(20.0f, 1.0f);  // without the offsets: 1.7x plain
  const double sink = RopeKeysError(0.0f, 12.0f);  // without the sink correction: 5x plain
  EXPECT_LT(plain, 0.1);
  EXPECT_LT(biased, 1.3 * plain) << plain;
  EXPECT_LT(sink, 1.3 * plain) << plain;
}

TEST(SequenceKvTest, PrefillComputesWhatDecodeComputes) {
  // Decode sees its own page exact (the f16 tail); prefill, whose pages fill before it attends, sees them through
  // the exact copies the pass keeps. Same inputs, one pass of 300 rows (and chunks of 200 + 100) against 300 decode
  // steps: equal up to rounding. Without the copies the prefill rows in full pages would read their own page coded
  // (relative error about that of tq4).
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq3", 0});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  const int n = 300, group = 2, d = hp.head_dim, row = hp.n_kv_heads * d;
  std::mt19937_64 rng(21);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(n) * row), values(keys.size()), q(static_cast<size_t>(n) * group * d);
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = 2.0f * std::sin(0.1f * static_cast<float>(i % row)) + g(rng);
    values[i] = g(rng);
  }
  for (float& x : q) x = 0.5f * g(rng);
  const size_t q_row = static_cast<size_t>(group) * d;
  // out: [layer][kv_head][n][group][d]
  auto run = [&](const std::vector<int>& chunks) {
    SequenceKv kv(*layout, n, store->get());
    std::vector<float> out(static_cast<size_t>(hp.n_layers) * hp.n_kv_heads * n * q_row);
    int first = 0;
    for (int len : chunks) {
      for (int l = 0; l < hp.n_layers; ++l) {
        for (int p = first; p < first + len; ++p) {
          EXPECT_TRUE(kv.Append(l, p, keys.data() + static_cast<size_t>(p) * row, values.data() + p * row).ok());
        }
        for (int h = 0; h < hp.n_kv_heads; ++h) {
          float* o = out.data() + ((static_cast<size_t>(l) * hp.n_kv_heads + h) * n + first) * q_row;
          EXPECT_TRUE(kv.Attend(l, h, q.data() + first * q_row, len, group, first, o, nullptr, nullptr).ok());
        }
        kv.FinishLayerPass(l);
      }
      first += len;
    }
    EXPECT_EQ(kv.full_pages(), 2);
    return out;
  };
  const std::vector<float> decode = run(std::vector<int>(n, 1));
  for (const std::vector<int>& chunks : {std::vector<int>{n}, std::vector<int>{200, 100}}) {
    const std::vector<float> prefill = run(chunks);
    // [first page, later pages]: decode reads the first page's tail before the head's transform exists (raw f16),
    // prefill its copy in the transform's domain, so those rows agree to f16 rounding only.
    double err[2] = {0, 0}, ref[2] = {0, 0};
    for (size_t i = 0; i < decode.size(); ++i) {
      const int later = static_cast<int>((i / q_row) % n) >= kernels::kPageTokens ? 1 : 0;
      err[later] += (prefill[i] - decode[i]) * (prefill[i] - decode[i]);
      ref[later] += decode[i] * decode[i];
    }
    EXPECT_LT(std::sqrt(err[0] / ref[0]), 2e-3) << chunks.size() << " chunks";
    EXPECT_LT(std::sqrt(err[1] / ref[1]), 1e-5) << chunks.size() << " chunks";
  }
}

TEST(SequenceKvTest, ExactCopiesLastOnlyUntilDropped) {
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok());
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  SequenceKv kv(*layout, 512, store->get());
  std::vector<float> x(hp.n_kv_heads * hp.head_dim, 0.5f);
  for (int p = 0; p < 256; ++p) {
    for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(kv.Append(l, p, x.data(), x.data()).ok());
  }
  const uint64_t with_copies = kv.bytes();
  kv.FinishLayerPass(0);
  const uint64_t one_layer = kv.bytes();
  kv.FinishLayerPass(1);
  const uint64_t none = kv.bytes();
  // Per layer: 2 pages x 2 heads x K and V f16 pages.
  const uint64_t copy_bytes = 2 * 2 * 2 * static_cast<uint64_t>(kernels::PageBytes(kernels::KvFormat::kF16, hp.head_dim).value());
  EXPECT_EQ(with_copies - one_layer, copy_bytes);
  EXPECT_EQ(one_layer - none, copy_bytes);
  kv.FinishLayerPass(7);  // no such layer: nothing happens
  EXPECT_EQ(kv.bytes(), none);
}

TEST(SequenceKvTest, PagesCarryTheirSequenceAndItsDiskStreams) {
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok());
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  SequenceKv a(*layout, 512, store->get()), b(*layout, 512, store->get());
  EXPECT_NE(Raw(a.id()), 0u);
  EXPECT_NE(a.id(), b.id());
  a.set_owner("req-a");
  std::vector<float> x(hp.n_kv_heads * hp.head_dim, 0.5f);
  for (int p = 0; p < 128; ++p) {
    for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(a.Append(l, p, x.data(), x.data()).ok());
  }
  const std::vector<PageId> ids = a.PageIdsAt(0);
  ASSERT_EQ(ids.size(), static_cast<size_t>(hp.n_layers * hp.n_kv_heads));
  for (int l = 0; l < hp.n_layers; ++l) {
    for (int h = 0; h < hp.n_kv_heads; ++h) {
      const PageInfo* info = (*store)->Info(ids[static_cast<size_t>(l) * hp.n_kv_heads + h]);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(info->sequence, a.id());
      EXPECT_EQ(info->owner, "req-a");
      EXPECT_EQ(info->stream, StreamOf(a.id(), l, h));
    }
  }
  EXPECT_NE(StreamOf(a.id(), 0, 0), StreamOf(b.id(), 0, 0));
}

TEST(SequenceKvTest, AttachPrefixReusesPagesAndRefusesMalformedTransforms) {
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok());
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  auto source_kv = std::make_unique<SequenceKv>(*layout, 512, store->get());
  SequenceKv& source = *source_kv;
  std::mt19937_64 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(hp.n_kv_heads * hp.head_dim), v(k.size());
  for (int p = 0; p < 128; ++p) {
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = 1.0f + g(rng);
      v[i] = g(rng);
    }
    for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(source.Append(l, p, k.data(), v.data()).ok());
  }
  ASSERT_EQ(source.full_pages(), 1);
  PrefixEntry entry;
  entry.pages = source.PageIdsAt(0);
  entry.transforms = source.Transforms();
  ASSERT_FALSE(entry.transforms[0].k_mean.empty());  // tq4 keys: a key transform to corrupt
  auto stored_pages = [&] {
    uint64_t n = 0;
    for (const KvTierUsage& t : (*store)->Stats().tiers) n += t.pages;
    return n;
  };
  ASSERT_EQ(stored_pages(), static_cast<uint64_t>(hp.n_layers * hp.n_kv_heads));

  auto attach = [&](const PrefixEntry& e) {
    SequenceKv kv(*layout, 512, store->get());
    const std::vector<const PrefixEntry*> one{&e};
    const Status s = kv.AttachPrefix(one);
    EXPECT_EQ(kv.n_tokens(), s.ok() ? 128 : 0);
    EXPECT_EQ(kv.full_pages(), s.ok() ? 1 : 0);
    return s;
  };
  EXPECT_TRUE(attach(entry).ok());
  // Pages that do not fit the head size (read back from disk, or another model's): a page a byte short, one of
  // another format's size, and an id the store does not hold.
  const PageInfo tq4_info{.k = kernels::KvFormat::kTq4, .v = kernels::KvFormat::kTq4};
  const uint32_t length = (*store)->PageLength(entry.pages[0]);
  auto short_page = (*store)->Store(PrecisionClass::kHot, std::vector<uint8_t>(length - 1), tq4_info);
  ASSERT_TRUE(short_page.ok());
  PageInfo f16_info = tq4_info;
  f16_info.k = f16_info.v = kernels::KvFormat::kF16;
  auto mislabelled = (*store)->Store(PrecisionClass::kHot, std::vector<uint8_t>(length), f16_info);
  ASSERT_TRUE(mislabelled.ok());
  for (int bad = 0; bad < 7; ++bad) {
    PrefixEntry e = entry;
    switch (bad) {
      case 0: e.transforms[1].k_mean.pop_back(); break;                   // a channel short
      case 1: e.transforms[2].v_sink.push_back(0.0f); break;              // a channel long
      case 2: e.transforms.pop_back(); break;                             // a head short
      case 3: e.pages.push_back(e.pages.back()); break;                    // a head too many
      case 4: e.pages[1] = *short_page; break;                             // a page a byte short
      case 5: e.pages[1] = *mislabelled; break;                            // f16 formats on tq4 bytes
      case 6: e.pages[1] = PageId{999999}; break;                                 // not in the store
    }
    const Status s = attach(e);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << bad << ": " << s.ToString();
  }
  PrefixEntry offsets_alone = entry;
  offsets_alone.transforms[0].k_mean.clear();
  offsets_alone.transforms[0].k_scale.clear();
  EXPECT_EQ(attach(offsets_alone).code(), StatusCode::kDataLoss);
  // Every attached sequence let its references go and a refused prefix took none: the pages go with the source.
  (*store)->Release(*short_page);
  (*store)->Release(*mislabelled);
  source_kv.reset();
  EXPECT_EQ(stored_pages(), 0u);
}

TEST(SequenceKvTest, SlidingWindowLayersReleasePagesThatLeftTheWindow) {
  // Gemma-style: layers 0-4 attend to the last 256 positions, layer 5 to all. Decode-like passes of one position;
  // attention stays that of an exact cache with the same window, while the sliding layers keep only the pages a
  // later query can still see (released one pass late).
  HParams hp = GemmaStyleModel();
  auto layout = KvLayout::Create(hp, {"f16", "f16", 0});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ((*layout)->layer(0).window, 256);
  EXPECT_EQ((*layout)->layer(5).window, 0);
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  const int n = 1000, group = 2, d = hp.head_dim, row = hp.n_kv_heads * d;
  SequenceKv kv(*layout, n, store->get()), exact(hp, n);
  std::mt19937_64 rng(8);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> k(row), v(row), q(static_cast<size_t>(group) * d), a(q.size()), b(q.size());
  double err = 0, ref = 0;
  for (int pos = 0; pos < n; ++pos) {
    for (int i = 0; i < row; ++i) {
      k[i] = g(rng);
      v[i] = g(rng);
    }
    for (float& x : q) x = 0.5f * g(rng);
    for (int l = 0; l < hp.n_layers; ++l) {
      ASSERT_TRUE(kv.Append(l, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(exact.Append(l, pos, k.data(), v.data()).ok());
      const int window = (*layout)->layer(l).window;
      for (int h = 0; h < hp.n_kv_heads; ++h) {
        ASSERT_TRUE(kv.Attend(l, h, q.data(), 1, group, pos, a.data(), nullptr, nullptr, window).ok()) << pos;
        ASSERT_TRUE(exact.Attend(l, h, q.data(), 1, group, pos, b.data(), nullptr, nullptr, window).ok());
        for (size_t i = 0; i < a.size(); ++i) {
          err += (a[i] - b[i]) * (a[i] - b[i]);
          ref += b[i] * b[i];
        }
      }
      kv.FinishLayerPass(l);
    }
  }
  EXPECT_LT(std::sqrt(err / ref), 2e-3);
  // 999 positions: 7 full pages per head. Later queries see positions >= 999 - 255 = 744 (page 5 on), and the
  // release runs one pass late (from 998 - 255 = 743: page 5 on too), so pages 0-4 of every sliding head are gone.
  const std::vector<PageId> first = kv.PageIdsAt(0), last = kv.PageIdsAt(6), kept = kv.PageIdsAt(5);
  for (int l = 0; l < hp.n_layers; ++l) {
    for (int h = 0; h < hp.n_kv_heads; ++h) {
      const size_t slot = static_cast<size_t>(l) * hp.n_kv_heads + h;
      EXPECT_EQ(first[slot] == kNoPage, l != 5) << "layer " << l;
      EXPECT_NE(kept[slot], kNoPage) << "layer " << l;
      EXPECT_NE(last[slot], kNoPage) << "layer " << l;
    }
  }
  uint64_t stored = 0;
  for (const KvTierUsage& t : (*store)->Stats().tiers) stored += t.pages;
  EXPECT_EQ(stored, static_cast<uint64_t>(hp.n_kv_heads) * (5 * 2 + 7));  // sliding: pages 5, 6; global: 0-6
  const uint64_t page_bytes = 2 * kernels::PageBytes(kernels::KvFormat::kF16, d).value();
  EXPECT_EQ(kv.bytes_by_class()[0], stored * page_bytes + static_cast<uint64_t>(hp.n_layers) * hp.n_kv_heads *
                                                                 page_bytes);  // + the f16 tails
  // Attention that would need a released page is an error, not a read of freed memory.
  EXPECT_EQ(kv.Attend(0, 0, q.data(), 1, group, n - 1, a.data(), nullptr, nullptr, 0).code(), StatusCode::kInternal);
  EXPECT_TRUE(kv.fault().ok());
}

TEST(SequenceKvTest, PagesForTokensBoundsWhatSlidingLayersHold) {
  // Admission reserves PagesForTokens for a whole prompt. Fed in passes of `chunk` positions, the store must never
  // hold more pages than that bound at any moment; and for a prompt much longer than the window the bound must be
  // well under one page per 128 positions in every layer (what admission reserved before windows were counted).
  HParams hp = GemmaStyleModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (const int chunk : {1, 100, 200, 512}) {
    auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
    ASSERT_TRUE(store.ok());
    const int n = 3000, row = hp.n_kv_heads * hp.head_dim;
    SequenceKv kv(*layout, n, store->get());
    std::mt19937_64 rng(9);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> k(static_cast<size_t>(chunk) * row), v(k.size());
    uint64_t peak = 0;
    for (int first = 0; first < n; first += chunk) {
      const int rows = std::min(chunk, n - first);
      for (float& x : k) x = g(rng);
      for (float& x : v) x = g(rng);
      for (int l = 0; l < hp.n_layers; ++l) {
        for (int r = 0; r < rows; ++r) {
          ASSERT_TRUE(kv.Append(l, first + r, &k[static_cast<size_t>(r) * row], &v[static_cast<size_t>(r) * row]).ok());
          uint64_t held = 0;
          for (const KvTierUsage& t : (*store)->Stats().tiers) held += t.pages;
          peak = std::max(peak, held);
        }
        kv.FinishLayerPass(l);
      }
    }
    const auto bound = PagesForTokens(**layout, 0, n, chunk);
    const uint64_t reserved = bound[0] + bound[1] + bound[2];
    const uint64_t every_page = static_cast<uint64_t>(n / kernels::kPageTokens) * hp.n_layers * hp.n_kv_heads;
    EXPECT_LE(peak, reserved) << "chunk " << chunk;
    EXPECT_LT(reserved, every_page * 6 / 10) << "chunk " << chunk;
    EXPECT_EQ(PagesForTokens(**layout, 0, 200, chunk), PagesForTokens(**layout, 0, 200, 0)) << "short: every page";
  }
  // Global layers (and every layer of a model without windows) count every page they fill.
  hp.sliding_window = 0;
  auto global = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(global.ok());
  const auto all = PagesForTokens(**global, 100, 3000, 512);
  EXPECT_EQ(all[0] + all[1] + all[2], static_cast<uint64_t>(3100 / 128 - 100 / 128) * hp.n_layers * hp.n_kv_heads);
}

// Keys whose power sits in 16 scattered channels (not the first 16, the untrained outlier set), values plain;
// relative error of the last rows' attention for K format `k_fmt` (V f16).
double OutlierKeysError(const std::string& k_fmt) {
  const HParams hp = SmallModel();
  const int d = hp.head_dim;
  std::mt19937_64 rng(12);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> gain(d, 1.0f);
  for (int c = 3; c < d; c += 4) gain[c] = 6.0f;  // channels 3, 7, ..., 63
  return PagedVsExactError(hp, {k_fmt, "f16", 0}, 300, 4, 0.1f, rng, g,
                           [&](int, std::vector<float>& k, std::vector<float>& v) {
                             for (size_t i = 0; i < k.size(); ++i) {
                               k[i] = gain[i % d] * g(rng);
                               v[i] = g(rng);
                             }
                           });
}

TEST(SequenceKvTest, OutlierFormatsCalibrateTheirChannelsPerHead) {
  // Each head trains its tq3.5 outlier set on its first page, so the 16 strong channels get the extra bit:
  // clearly better than tq3 (with the default set, channels 0-15, it measured no better).
  const double tq3 = OutlierKeysError("tq3");
  const double tq35 = OutlierKeysError("tq3.5");
  const double tq4 = OutlierKeysError("tq4");
  EXPECT_LT(tq35, 0.85 * tq3) << "tq3 " << tq3;
  EXPECT_GT(tq35, tq4);
}

TEST(SequenceKvTest, AppendOutOfOrderOrPastContextIsAnError) {
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, {"tq4", "tq4", 0});
  ASSERT_TRUE(layout.ok());
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  SequenceKv kv(*layout, 2, store->get());
  std::vector<float> x(hp.n_kv_heads * hp.head_dim, 1.0f);
  EXPECT_EQ(kv.Append(0, 1, x.data(), x.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(kv.Append(0, 0, x.data(), x.data()).ok());
  EXPECT_TRUE(kv.Append(0, 1, x.data(), x.data()).ok());
  EXPECT_EQ(kv.Append(0, 2, x.data(), x.data()).code(), StatusCode::kOutOfRange);
}

TEST(SequenceKvTest, DemotionReencodesPagesDownAndKeepsAttentionClose) {
  const HParams hp = SmallModel();
  HeadProfile profile;
  profile.n_layers = hp.n_layers;
  profile.n_kv_heads = hp.n_kv_heads;
  profile.score = {4, 3, 2, 1};
  const std::string path = ::testing::TempDir() + "/demote_profile.json";
  ASSERT_TRUE(SaveHeadProfile(profile, path).ok());
  KvSpec spec;
  spec.preset = "longdoc";  // on 4 heads: 0 HOT, 2 ACTIVE (int8), 2 SPARSE (tq4)
  spec.profile_path = path;
  auto layout = KvLayout::Create(hp, spec);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_TRUE((*layout)->adaptable());
  auto store = KvPageStore::Open({}, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok());
  SequenceKv kv(*layout, 512, store->get()), exact(hp, 512);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int d = hp.head_dim, row = hp.n_kv_heads * d, n = 300;
  std::vector<float> k(row), v(row);
  for (int pos = 0; pos < n; ++pos) {
    for (int i = 0; i < row; ++i) {
      k[i] = g(rng);
      v[i] = g(rng);
    }
    for (int l = 0; l < hp.n_layers; ++l) {
      ASSERT_TRUE(kv.Append(l, pos, k.data(), v.data()).ok());
      ASSERT_TRUE(exact.Append(l, pos, k.data(), v.data()).ok());
    }
  }
  auto error = [&] {
    std::vector<float> q(2 * d);
    std::mt19937_64 qr(3);
    for (float& x : q) x = 0.3f * g(qr);
    return AttentionError(kv, exact, hp, q, 1, 2, n - 1);
  };
  const double before_err = error();
  const auto before = kv.bytes_by_class();
  ASSERT_GT(before[1], 0u);  // ACTIVE pages exist
  kv.SetLayout((*layout)->WithClasses(std::vector<PrecisionClass>(4, PrecisionClass::kSparse)));
  for (int l = 0; l < hp.n_layers; ++l) {
    for (int h = 0; h < hp.n_kv_heads; ++h) ASSERT_TRUE(kv.Demote(l, h).ok());
  }
  const auto after = kv.bytes_by_class();
  EXPECT_EQ(after[1], 0u);
  EXPECT_LT(after[2], before[1] + before[2]);  // int8 pages became tq4: fewer bytes
  const double after_err = error();
  EXPECT_GT(after_err, before_err);  // precision went down, as it should
  EXPECT_LT(after_err, 0.15);
  EXPECT_EQ((*store)->Stats().tiers[1].pages, 2u * 4);  // 2 full pages x 4 heads, all SPARSE now (warm tier)
  // The tail keeps filling in the new formats.
  for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(kv.Append(l, n, k.data(), v.data()).ok());
}

// Read-ahead remembers the pages the cold cache took (SequenceKv::HeadPages::prefetched) and asks only for
// newer ones while nothing left the cache; once pages were evicted it asks for them again, so attention still
// finds them read ahead (no synchronous misses).
TEST(SequenceKvTest, ReadAheadAsksAgainForPagesTheCacheDropped) {
  storage::testing::TempDir dir;
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, KvSpec{.preset = "uniform:tq4"});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const uint64_t page = (*layout)->class_page_bytes()[2] + 4096;  // a page and its record, at most
  KvStoreOptions tiers;
  tiers.head_dim = static_cast<uint32_t>(hp.head_dim);
  tiers.cold_dir = dir.path();
  tiers.cold_cache_bytes = 10 * page;  // 16 pages in all (2 layers x 2 heads x 4): not all fit
  auto store = KvPageStore::Open(tiers, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr int kTokens = 4 * kernels::kPageTokens;
  SequenceKv kv(*layout, kTokens + 1, store->get());
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g;
  std::vector<float> k(hp.n_kv_heads * hp.head_dim), v(k.size());
  for (int pos = 0; pos < kTokens; ++pos) {
    for (float& x : k) x = g(rng);
    for (float& x : v) x = g(rng);
    for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(kv.Append(l, pos, k.data(), v.data()).ok());
  }
  (*store)->FlushCold();
  ASSERT_GT((*store)->cold_removals(), 0u);  // the first pages were evicted as the later ones were written
  std::vector<PageId> layer0;                // ids of layer 0's pages
  for (int p = 0; p < 4; ++p) {
    const std::vector<PageId> ids = kv.PageIdsAt(p);
    for (int h = 0; h < hp.n_kv_heads; ++h) layer0.push_back(ids[h]);
  }
  auto settle = [&] {  // the reads started by read-ahead land
    for (PageId id : layer0) ASSERT_TRUE((*store)->Pin(id).ok());
  };
  const KvPageStore::PrefetchResult first = kv.PrefetchLayer(0, 0, UINT64_MAX);
  EXPECT_TRUE(first.complete);
  EXPECT_GT(first.bytes, 0u);
  settle();
  // Nothing left the cache since: the same answer, no new reads.
  const uint64_t reads = (*store)->Stats().cold_cache.read_ios;
  const uint64_t removals = (*store)->cold_removals();
  const KvPageStore::PrefetchResult again = kv.PrefetchLayer(0, 0, UINT64_MAX);
  EXPECT_EQ(again.bytes, first.bytes);
  EXPECT_EQ((*store)->Stats().cold_cache.read_ios, reads);
  // Layer 1 pushes layer 0's pages out; read-ahead of layer 0 then reads them again and attention hits.
  kv.PrefetchLayer(1, 0, UINT64_MAX);
  for (int p = 0; p < 4; ++p) {
    const std::vector<PageId> ids = kv.PageIdsAt(p);
    for (int h = 0; h < hp.n_kv_heads; ++h) ASSERT_TRUE((*store)->Pin(ids[hp.n_kv_heads + h]).ok());
  }
  ASSERT_GT((*store)->cold_removals(), removals);
  const ColdCacheStats before = (*store)->Stats().cold_cache;
  const KvPageStore::PrefetchResult third = kv.PrefetchLayer(0, 0, UINT64_MAX);
  EXPECT_EQ(third.bytes, first.bytes);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  settle();
  const ColdCacheStats after = (*store)->Stats().cold_cache;
  EXPECT_GT(after.read_ios, before.read_ios);
  EXPECT_EQ(after.misses, before.misses);
}

// Attention keeps a head's cold pages pinned from one step to the next while the cold cache loses nothing
// (HeadPages::ColdHolds): a step with its pages held visits the cache for none of them and computes the same
// output; once the cache's eviction is blocked by pinned pages, the next step lets go of them and the cache
// shrinks back to its capacity.
TEST(SequenceKvTest, AttentionHoldsColdPagesUntilTheCacheNeedsThem) {
  storage::testing::TempDir dir;
  const HParams hp = SmallModel();
  auto layout = KvLayout::Create(hp, KvSpec{.preset = "uniform:tq4"});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const uint64_t page = (*layout)->class_page_bytes()[2] + 4096;  // a page and its record, at most
  KvStoreOptions tiers;
  tiers.head_dim = static_cast<uint32_t>(hp.head_dim);
  tiers.cold_dir = dir.path();
  tiers.cold_cache_bytes = 20 * page;  // a sequence of 16 pages (2 layers x 2 heads x 4) fits, two do not
  auto store = KvPageStore::Open(tiers, (*layout)->class_page_bytes());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  constexpr int kTokens = 4 * kernels::kPageTokens;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g;
  std::vector<float> k(hp.n_kv_heads * hp.head_dim), v(k.size());
  auto fill = [&](SequenceKv& seq, int from, int to) {
    for (int pos = from; pos < to; ++pos) {
      for (float& x : k) x = g(rng);
      for (float& x : v) x = g(rng);
      for (int l = 0; l < hp.n_layers; ++l) ASSERT_TRUE(seq.Append(l, pos, k.data(), v.data()).ok());
    }
    (*store)->FlushCold();
  };
  // Another sequence's pages first: the writes of the first push 4 of them out (the cache keeps what was
  // written last), and the first sequence's 16 stay.
  SequenceKv other(*layout, kTokens + kernels::kPageTokens + 1, store->get());
  fill(other, 0, kTokens);
  SequenceKv kv(*layout, kTokens + 1, store->get());
  fill(kv, 0, kTokens);
  const int group = hp.n_heads / hp.n_kv_heads;
  std::vector<float> q(static_cast<size_t>(group) * hp.head_dim);
  for (float& x : q) x = g(rng);
  auto step = [&] {  // a decode step's attention: every head's output
    std::vector<float> o(q.size() * hp.n_layers * hp.n_kv_heads);
    for (int l = 0; l < hp.n_layers; ++l) {
      for (int h = 0; h < hp.n_kv_heads; ++h) {
        float* out = o.data() + (l * hp.n_kv_heads + h) * q.size();
        EXPECT_TRUE(kv.Attend(l, h, q.data(), 1, group, kTokens - 1, out, nullptr, nullptr).ok());
      }
    }
    return o;
  };
  auto hits = [&] { return (*store)->Stats().cold_cache.prefetch_hits; };
  uint64_t h0 = hits();
  const std::vector<float> first = step();  // pinned, let go after (nothing known yet)
  EXPECT_EQ(hits() - h0, 16u);
  h0 = hits();
  const std::vector<float> second = step();  // nothing left the cache since the step before: pinned, held
  EXPECT_EQ(hits() - h0, 16u);
  h0 = hits();
  const uint64_t held0 = (*store)->Stats().cold_held;
  const std::vector<float> third = step();  // held: no visit of the cache
  EXPECT_EQ(hits() - h0, 0u);
  EXPECT_EQ((*store)->Stats().cold_held - held0, 16u);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, third);
  EXPECT_EQ((*store)->Stats().cold_cache.misses, 0u);

  // The other sequence's pages, pinned by a reader beside the held ones (its 4 pages not cached read back),
  // overfill the cache: eviction is blocked, takes nothing, and says so through the epoch.
  const uint64_t removals = (*store)->cold_removals(), epoch = (*store)->cold_hold_epoch();
  std::vector<PageId> other_ids;
  for (int p = 0; p < 4; ++p) {
    for (PageId id : other.PageIdsAt(p)) other_ids.push_back(id);
  }
  std::vector<PinnedPage> reader(other_ids.size());
  ASSERT_TRUE((*store)->PinMany(other_ids, reader).ok());
  ASSERT_GT((*store)->Stats().cold_cache.cached_bytes, tiers.cold_cache_bytes);
  EXPECT_EQ((*store)->cold_removals(), removals);
  EXPECT_NE((*store)->cold_hold_epoch(), epoch);
  reader.clear();
  h0 = hits();
  EXPECT_EQ(step(), first);  // the epoch moved: pinned again, let go after
  EXPECT_EQ(hits() - h0, 16u);
  fill(other, kTokens,
       kTokens + kernels::kPageTokens);  // pages written: eviction runs and reaches the capacity
  EXPECT_LE((*store)->Stats().cold_cache.cached_bytes, tiers.cold_cache_bytes);
}

TEST(KvLayoutTest, FormatsAndBoundaryLayers) {
  HParams hp = SmallModel();
  hp.n_layers = 6;
  auto layout = KvLayout::Create(hp, {"tq4", "tq3", 2});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ((*layout)->head(0, 0).k, kernels::KvFormat::kF16);
  EXPECT_EQ((*layout)->head(2, 0).k, kernels::KvFormat::kTq4);
  EXPECT_EQ((*layout)->head(3, 0).v, kernels::KvFormat::kTq3);
  EXPECT_EQ((*layout)->head(5, 0).v, kernels::KvFormat::kF16);
  EXPECT_FALSE(KvLayout::Create(hp, {"tq9", "tq4", 0}).ok());
  EXPECT_FALSE(KvLayout::Create(hp, {"f32", "tq4", 0}).ok());
  EXPECT_FALSE(KvLayout::Create(hp, {"tq4", "tq4", 4}).ok());
  hp.head_dim = 8;  // below the page kernels' minimum: auto falls back to f32, a named format is an error
  EXPECT_TRUE((*KvLayout::Create(hp, {"auto", "auto", 0}))->layer(0).plain);
  EXPECT_FALSE(KvLayout::Create(hp, {"f16", "f16", 0}).ok());
}

}  // namespace
}  // namespace tq::engine
