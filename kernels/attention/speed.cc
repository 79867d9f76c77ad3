#include "kernels/attention/speed.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/page.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

constexpr int kDistinctHeads = 4;  // encoded heads; the rest of the working set are copies

struct HeadPages {
  std::vector<KvPageRef> refs;
};

}  // namespace

double MeasureReadBandwidth(size_t bytes) {
  const size_t words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  for (size_t i = 0; i < words; ++i) buffer[i] = i;
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto start = Clock::now();
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= words; i += 4) {
      a += buffer[i];
      b += buffer[i + 1];
      c += buffer[i + 2];
      d += buffer[i + 3];
    }
    sink = sink + a + b + c + d;
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / Seconds(start, Clock::now()) / 1e9);
  }
  return best;
}

StatusOr<SpeedReport> MeasureAttentionSpeed(const SpeedOptions& options) {
  if (options.ctx < 1 || options.gqa < 1 || options.working_set_mib < 1) {
    return InvalidArgumentError("bench attention: ctx, gqa and working set must be positive");
  }
  std::vector<KvFormat> formats = options.formats;
  if (formats.empty()) {
    for (const FormatInfo& info : kFormatTable) formats.push_back(info.format);
  }
  formats.erase(std::remove(formats.begin(), formats.end(), KvFormat::kF16), formats.end());
  formats.insert(formats.begin(), KvFormat::kF16);
  const int d = options.head_dim;
  const int pages_per_head = (options.ctx + kPageTokens - 1) / kPageTokens;
  TQ_ASSIGN_OR_RETURN(size_t f16_page, PageBytes(KvFormat::kF16, d));
  const double f16_head_bytes = 2.0 * f16_page * pages_per_head;
  SpeedReport report;
  report.heads = std::max(1, static_cast<int>(options.working_set_mib * 1048576.0 / f16_head_bytes));
  report.memory_read_gbps = MeasureReadBandwidth(static_cast<size_t>(options.working_set_mib) << 20);

  Rng rng(2024);
  std::vector<float> q(static_cast<size_t>(options.gqa) * d), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.Gaussian());
  std::vector<float> kv(static_cast<size_t>(kPageTokens) * d);
  for (KvFormat format : formats) {
    TQ_RETURN_IF_ERROR(CheckSupported(format, d));
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> k_codec, KvCodec::Create(format, d, 1));
    TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> v_codec, KvCodec::Create(format, d, 2));
    const size_t page_bytes = k_codec->layout().page_bytes;
    const size_t head_bytes = 2 * page_bytes * pages_per_head;
    // Pool: heads one after another, each K pages then V pages; 64-byte aligned pages.
    std::vector<uint8_t> pool(head_bytes * report.heads + 64);
    uint8_t* base = pool.data() + (64 - reinterpret_cast<uintptr_t>(pool.data()) % 64) % 64;
    AttentionSpeed speed;
    speed.format = format;
    speed.bytes_per_token = 2.0 * page_bytes / kPageTokens;
    double encode_seconds = 0.0;
    int64_t encoded = 0;
    for (int h = 0; h < std::min(report.heads, kDistinctHeads); ++h) {
      for (int p = 0; p < 2 * pages_per_head; ++p) {
        const int n = std::min(kPageTokens, options.ctx - (p % pages_per_head) * kPageTokens);
        for (float& x : kv) x = static_cast<float>(rng.Gaussian());
        const KvCodec& codec = p < pages_per_head ? *k_codec : *v_codec;
        const auto start = Clock::now();
        TQ_RETURN_IF_ERROR(codec.EncodePage(kv.data(), n, std::span<uint8_t>(base + h * head_bytes + p * page_bytes,
                                                                             page_bytes)));
        encode_seconds += Seconds(start, Clock::now());
        encoded += n;
      }
    }
    speed.encode_ns_per_vector = encode_seconds * 1e9 / encoded;
    for (int h = kDistinctHeads; h < report.heads; ++h) {
      std::memcpy(base + h * head_bytes, base + (h % kDistinctHeads) * head_bytes, head_bytes);
    }
    std::vector<HeadPages> heads(report.heads);
    for (int h = 0; h < report.heads; ++h) {
      for (int p = 0; p < pages_per_head; ++p) {
        const int n = std::min(kPageTokens, options.ctx - p * kPageTokens);
        const uint8_t* k = base + h * head_bytes + p * page_bytes;
        heads[h].refs.push_back({k, k + pages_per_head * page_bytes, format, format, n});
      }
    }
    auto run = [&](int head) -> Status {
      return DecodeAttention(heads[head].refs, d, q.data(), options.gqa, {}, out.data(), nullptr);
    };
    // Cold: cycle through all heads.
    TQ_RETURN_IF_ERROR(run(0));
    int64_t calls = 0;
    auto start = Clock::now();
    double elapsed = 0.0;
    while (elapsed < options.min_seconds) {
      for (int h = 0; h < report.heads; ++h) TQ_RETURN_IF_ERROR(run(h));
      calls += report.heads;
      elapsed = Seconds(start, Clock::now());
    }
    speed.ns_per_token = elapsed * 1e9 / (static_cast<double>(calls) * options.ctx);
    // Hot: one head again and again.
    calls = 0;
    start = Clock::now();
    elapsed = 0.0;
    while (elapsed < options.min_seconds / 3) {
      for (int i = 0; i < 16; ++i) TQ_RETURN_IF_ERROR(run(0));
      calls += 16;
      elapsed = Seconds(start, Clock::now());
    }
    speed.hot_ns_per_token = elapsed * 1e9 / (static_cast<double>(calls) * options.ctx);
    speed.kv_read_gbps = speed.bytes_per_token / speed.ns_per_token;
    report.formats.push_back(speed);
  }
  for (AttentionSpeed& s : report.formats) s.ratio_vs_f16 = report.formats[0].ns_per_token / s.ns_per_token;
  return report;
}

}  // namespace tq::kernels
