#include "bench/lib/attention_speed.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <latch>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "kernels/attention/attention.h"
#include "kernels/formats/codec.h"
#include "kernels/formats/page.h"
#include "kernels/formats/rng.h"

namespace tq::kernels {

namespace {

// CPU time of the calling thread: time slices lost to other processes on a shared machine do not count.
double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Wall-clock seconds (steady): a machine rate of threads at once needs the time they ran together.
double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs fn(t) for t in [0, n) on n threads at once (t = 0 on the caller's) and returns their results.
template <typename Fn>
auto OnThreads(int n, Fn fn) -> std::vector<decltype(fn(0))> {
  std::vector<std::optional<decltype(fn(0))>> results(n);
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back([&, t] { results[t].emplace(fn(t)); });
  results[0].emplace(fn(0));
  for (std::thread& thread : threads) thread.join();
  std::vector<decltype(fn(0))> out;
  for (auto& result : results) out.push_back(std::move(*result));
  return out;
}

constexpr int kDistinctHeads = 4;  // encoded heads; the rest of the working set are copies

// One format's KV heads, cycled through: a pool of `heads` heads, each K pages then V pages, 64-byte aligned.
struct FormatRun {
  KvFormat format = KvFormat::kF16;
  std::vector<uint8_t> pool;
  std::vector<std::vector<KvPageRef>> heads;
  double bytes_per_token = 0.0;
  double encode_ns_per_vector = 0.0;
};

StatusOr<FormatRun> PrepareFormat(KvFormat format, const SpeedOptions& options, int heads, Rng& rng) {
  const int d = options.head_dim;
  const int pages_per_head = (options.ctx + kPageTokens - 1) / kPageTokens;
  TQ_RETURN_IF_ERROR(CheckSupported(format, d));
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> k_codec, KvCodec::Create(format, d, 1));
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<KvCodec> v_codec, KvCodec::Create(format, d, 2));
  FormatRun run;
  run.format = format;
  const size_t page_bytes = k_codec->layout().page_bytes;
  const size_t head_bytes = 2 * page_bytes * pages_per_head;
  run.pool.resize(head_bytes * heads + 64);
  uint8_t* base = run.pool.data() + (64 - reinterpret_cast<uintptr_t>(run.pool.data()) % 64) % 64;
  run.bytes_per_token = 2.0 * page_bytes / kPageTokens;
  std::vector<float> kv(static_cast<size_t>(kPageTokens) * d);
  double encode_seconds = 0.0;
  int64_t encoded = 0;
  for (int h = 0; h < std::min(heads, kDistinctHeads); ++h) {
    for (int p = 0; p < 2 * pages_per_head; ++p) {
      const int n = std::min(kPageTokens, options.ctx - (p % pages_per_head) * kPageTokens);
      for (float& x : kv) x = static_cast<float>(rng.Gaussian());
      const KvCodec& codec = p < pages_per_head ? *k_codec : *v_codec;
      const double start = ThreadSeconds();
      TQ_RETURN_IF_ERROR(codec.EncodePage(
          kv.data(), n, std::span<uint8_t>(base + h * head_bytes + p * page_bytes, page_bytes)));
      encode_seconds += ThreadSeconds() - start;
      encoded += n;
    }
  }
  run.encode_ns_per_vector = encode_seconds * 1e9 / encoded;
  for (int h = kDistinctHeads; h < heads; ++h) {
    std::memcpy(base + h * head_bytes, base + (h % kDistinctHeads) * head_bytes, head_bytes);
  }
  run.heads.resize(heads);
  for (int h = 0; h < heads; ++h) {
    for (int p = 0; p < pages_per_head; ++p) {
      const int n = std::min(kPageTokens, options.ctx - p * kPageTokens);
      const uint8_t* k = base + h * head_bytes + p * page_bytes;
      run.heads[h].push_back({k, k + pages_per_head * page_bytes, format, format, n});
    }
  }
  return run;
}

// What one thread did in a timed run: calls, its CPU seconds and the wall-clock interval it was timed over.
struct ThreadWork {
  int64_t calls = 0;
  double cpu_seconds = 0.0;
  double wall_start = 0.0, wall_end = 0.0;
};

// Decode attention on one thread: cycling through heads first, first + step, ... (cold) or repeating head
// `first` (hot), whole passes (cold) or 16 calls (hot) until `seconds` of thread CPU time have passed. The
// timing starts when all threads of the run have arrived at `start`.
StatusOr<ThreadWork> TimeThread(const FormatRun& run, const SpeedOptions& options,
                                const std::vector<float>& q, bool hot, double seconds, int first, int step,
                                std::latch& start) {
  std::vector<float> out(q.size());
  auto call = [&](int head) -> Status {
    return DecodeAttention(run.heads[head], options.head_dim, q.data(), options.gqa, {}, out.data(), nullptr);
  };
  const int heads = static_cast<int>(run.heads.size());
  ThreadWork work;
  start.arrive_and_wait();
  work.wall_start = WallSeconds();
  const double cpu_start = ThreadSeconds();
  do {
    if (hot) {
      for (int i = 0; i < 16; ++i) TQ_RETURN_IF_ERROR(call(first));
      work.calls += 16;
    } else {
      for (int h = first; h < heads; h += step, ++work.calls) TQ_RETURN_IF_ERROR(call(h));
    }
    work.cpu_seconds = ThreadSeconds() - cpu_start;
  } while (work.cpu_seconds < seconds);
  work.wall_end = WallSeconds();
  return work;
}

// The machine's decode attention ns per cached token with `options.threads` threads at once. One thread: its
// CPU time (time slices lost to other processes do not count). More: all threads' tokens over the wall-clock
// interval from their common start to the last one's end. Their CPU times' rates added would count a thread
// at the whole memory bus while another was descheduled (a shared VM did that: f16 read "53 GB/s" of 41);
// wall time can only make a round slower, and the best round is the one reported.
StatusOr<double> TimeRun(const FormatRun& run, const SpeedOptions& options, const std::vector<float>& q,
                         bool hot, double seconds) {
  const int n = options.threads;
  std::latch start(n);
  std::vector<StatusOr<ThreadWork>> works =
      OnThreads(n, [&](int t) { return TimeThread(run, options, q, hot, seconds, t, n, start); });
  double tokens = 0.0, first = std::numeric_limits<double>::infinity(), last = 0.0;
  for (StatusOr<ThreadWork>& work : works) {
    TQ_RETURN_IF_ERROR(work.status());
    tokens += static_cast<double>(work->calls) * options.ctx;
    first = std::min(first, work->wall_start);
    last = std::max(last, work->wall_end);
  }
  if (n == 1) return works[0]->cpu_seconds * 1e9 / tokens;
  return (last - first) * 1e9 / tokens;
}

}  // namespace

double MeasureReadBandwidth(size_t bytes, int threads) {
  threads = std::max(1, threads);
  const size_t words = bytes / sizeof(uint64_t) / threads;  // per thread
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words * threads]);
  for (size_t i = 0; i < words * threads; ++i) buffer[i] = i;
  double best = 0.0;
  for (int pass = 0; pass < 4; ++pass) {
    // [cpu seconds, wall start, wall end] per thread; one thread counts its CPU time, more their wall-clock
    // interval together (as TimeRun).
    std::latch start(threads);
    std::vector<std::array<double, 3>> times = OnThreads(threads, [&](int t) {
      const uint64_t* share = buffer.get() + words * t;
      start.arrive_and_wait();
      const double wall = WallSeconds();
      const double cpu = ThreadSeconds();
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (size_t i = 0; i + 4 <= words; i += 4) {
        a += share[i];
        b += share[i + 1];
        c += share[i + 2];
        d += share[i + 3];
      }
      volatile uint64_t sink = a + b + c + d;
      (void)sink;
      return std::array<double, 3>{ThreadSeconds() - cpu, wall, WallSeconds()};
    });
    double first = std::numeric_limits<double>::infinity(), last = 0.0;
    for (const auto& t : times) {
      first = std::min(first, t[1]);
      last = std::max(last, t[2]);
    }
    const double seconds = threads == 1 ? times[0][0] : last - first;
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) * threads / seconds / 1e9);
  }
  return best;
}

StatusOr<SpeedReport> MeasureAttentionSpeed(const SpeedOptions& options) {
  if (options.ctx < 1 || options.gqa < 1 || options.working_set_mib < 1 || options.threads < 1) {
    return InvalidArgumentError("bench attention: ctx, gqa, working set and threads must be positive");
  }
  std::vector<KvFormat> formats = options.formats;
  if (formats.empty()) {
    for (const FormatInfo& info : kFormatTable) {
      if (IsPaged(info.format)) formats.push_back(info.format);  // f32 is plain rows, not pages
    }
  }
  formats.erase(std::remove(formats.begin(), formats.end(), KvFormat::kF16), formats.end());
  formats.insert(formats.begin(), KvFormat::kF16);
  const int d = options.head_dim;
  const int pages_per_head = (options.ctx + kPageTokens - 1) / kPageTokens;
  TQ_ASSIGN_OR_RETURN(size_t f16_page, PageBytes(KvFormat::kF16, d));
  const double f16_head_bytes = 2.0 * f16_page * pages_per_head;
  SpeedReport report;
  // At least one head per thread (a small working set may then be cache-resident: the caller's choice).
  report.heads =
      std::max(options.threads, static_cast<int>(options.working_set_mib * 1048576.0 / f16_head_bytes));
  report.threads = options.threads;
  report.memory_read_gbps =
      MeasureReadBandwidth(static_cast<size_t>(options.working_set_mib) << 20, options.threads);

  Rng rng(2024);
  std::vector<float> q(static_cast<size_t>(options.gqa) * d);
  for (float& x : q) x = static_cast<float>(rng.Gaussian());
  const int rounds = std::max(1, options.rounds);
  const double cold_seconds = options.min_seconds / rounds;
  const double hot_seconds = options.min_seconds / 3 / rounds;
  TQ_ASSIGN_OR_RETURN(FormatRun f16, PrepareFormat(KvFormat::kF16, options, report.heads, rng));
  TQ_RETURN_IF_ERROR(TimeRun(f16, options, q, false, 0.0).status());  // warm-up pass
  constexpr double kNever = std::numeric_limits<double>::infinity();
  AttentionSpeed f16_speed;
  f16_speed.format = KvFormat::kF16;
  f16_speed.bytes_per_token = f16.bytes_per_token;
  f16_speed.encode_ns_per_vector = f16.encode_ns_per_vector;
  f16_speed.ns_per_token = f16_speed.hot_ns_per_token = kNever;
  report.formats.push_back(f16_speed);
  std::vector<double> f16_beside;  // per format: f16's best cold round among the rounds beside it
  f16_beside.push_back(kNever);
  for (size_t f = 0; f < formats.size(); ++f) {
    FormatRun other;
    if (f > 0) {
      TQ_ASSIGN_OR_RETURN(other, PrepareFormat(formats[f], options, report.heads, rng));
      TQ_RETURN_IF_ERROR(TimeRun(other, options, q, false, 0.0).status());
    }
    const FormatRun& run = f > 0 ? other : f16;
    AttentionSpeed speed;
    speed.format = run.format;
    speed.bytes_per_token = run.bytes_per_token;
    speed.encode_ns_per_vector = run.encode_ns_per_vector;
    speed.ns_per_token = speed.hot_ns_per_token = kNever;
    double beside = kNever;
    for (int r = 0; r < rounds; ++r) {
      TQ_ASSIGN_OR_RETURN(double f16_cold, TimeRun(f16, options, q, false, cold_seconds));
      TQ_ASSIGN_OR_RETURN(double f16_hot, TimeRun(f16, options, q, true, hot_seconds));
      beside = std::min(beside, f16_cold);
      report.formats[0].ns_per_token = std::min(report.formats[0].ns_per_token, f16_cold);
      report.formats[0].hot_ns_per_token = std::min(report.formats[0].hot_ns_per_token, f16_hot);
      if (f == 0) continue;
      TQ_ASSIGN_OR_RETURN(double cold, TimeRun(run, options, q, false, cold_seconds));
      TQ_ASSIGN_OR_RETURN(double hot, TimeRun(run, options, q, true, hot_seconds));
      speed.ns_per_token = std::min(speed.ns_per_token, cold);
      speed.hot_ns_per_token = std::min(speed.hot_ns_per_token, hot);
    }
    if (f == 0) {
      f16_beside[0] = beside;
      continue;
    }
    speed.kv_read_gbps = speed.bytes_per_token / speed.ns_per_token;
    f16_beside.push_back(beside);
    report.formats.push_back(speed);
  }
  for (size_t f = 0; f < report.formats.size(); ++f) {
    AttentionSpeed& s = report.formats[f];
    s.ratio_vs_f16 = f == 0 ? 1.0 : f16_beside[f] / s.ns_per_token;
  }
  report.formats[0].kv_read_gbps = report.formats[0].bytes_per_token / report.formats[0].ns_per_token;
  return report;
}

}  // namespace tq::kernels
