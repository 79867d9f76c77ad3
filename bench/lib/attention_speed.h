// Decode-attention speed per KV format, as `tqserve bench attention` prints it.
//
// One decode step of a model reads every KV head's pages once, so the benchmark cycles through enough KV
// heads (copies of a few encoded ones, laid out one after another like a page pool) that the f16 working set
// is `working_set_mib` (default 1 GiB, far above the last-level cache): the numbers are for KV read from
// memory, as at long context. `hot_ns_per_token` repeats one head instead (cache-resident KV: pure compute).
// Times are thread CPU time (a preempted thread's lost time slices do not count); each format is timed in
// `rounds` short rounds alternating with f16 rounds, and each figure is its best round: on a shared machine
// the load changes from second to second, and a ratio of two adjacent best rounds is far steadier than a
// ratio of two measurements taken seconds apart.
//
// `threads` > 1 runs that many threads at once, each through its own share of the heads, as a decode step
// spreads KV heads over the cores: they share the memory bus, so this is the speed where a machine's cores
// together ask more bandwidth than one core can. Times are then the machine's: all threads' tokens over the
// wall-clock interval they ran together (one thread: its CPU time), and the read bandwidth likewise.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/formats/format.h"

namespace tq::kernels {

struct SpeedOptions {
  int ctx = 8192;  // cached tokens per KV head
  int head_dim = 64;
  int gqa = 3;                    // query heads per KV head
  int working_set_mib = 1024;     // f16 bytes cycled through; every format uses the same number of heads
  double min_seconds = 0.3;       // per format and mode (f16: per format it is compared with)
  int rounds = 5;                 // alternating f16 / format rounds
  int threads = 1;                // threads reading KV at once, each its own heads
  std::vector<KvFormat> formats;  // empty: all, f16 first
};

struct AttentionSpeed {
  KvFormat format = KvFormat::kF16;
  double ns_per_token = 0.0;      // decode attention time per cached token for one KV head group (cold KV)
  double hot_ns_per_token = 0.0;  // the same with one head's pages in cache
  double ratio_vs_f16 = 0.0;      // f16 ns_per_token in the rounds beside this format's / this ns_per_token
                                  // (a speed-up: > 1 is faster)
  double bytes_per_token = 0.0;   // K + V page bytes per token (headers and norms included)
  double kv_read_gbps = 0.0;      // bytes_per_token / ns_per_token
  double encode_ns_per_vector = 0.0;  // EncodePage (SIMD) time per vector
};

struct SpeedReport {
  double memory_read_gbps = 0.0;  // plain sequential read of a working-set-sized buffer, same threads
  int heads = 0;                  // KV heads cycled through (all threads together)
  int threads = 1;
  std::vector<AttentionSpeed> formats;
};

StatusOr<SpeedReport> MeasureAttentionSpeed(const SpeedOptions& options);

// GB/s of `threads` threads at once, each summing its share of a `bytes`-byte buffer (best of a few passes;
// one thread's CPU time, or the wall-clock interval of several together).
double MeasureReadBandwidth(size_t bytes, int threads = 1);

}  // namespace tq::kernels
