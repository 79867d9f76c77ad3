// Decode speed of the GPU forward pass (engine/gpu/gpu_model.h) per KV format at long contexts: the sequence
// is filled with synthetic KV (GpuModel::FillSynthetic), then single-token decode steps are timed with CUDA
// events, the whole step and its attention calls alone. Prints a table (and JSON with --json); without a GPU
// it prints the reason and "skipped: no GPU" and exits 0.
//
//   tq_gpu_decode_bench --model M.gguf --ctx 8192,32768 --formats f16,int8,tq4 --steps 32 --warm-fraction 0
//                       [--cold-fraction F --cold-dir DIR]  (that fraction of the heads' pages on disk)
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/gpu/gpu_model.h"
#include "engine/llm/model.h"

namespace {

using tq::gpu::GpuModel;
using tq::gpu::GpuModelOptions;

struct Row {
  int ctx = 0;
  std::string format;
  double tok_s = 0, step_ms = 0, attn_ms = 0, kv_bytes = 0, hbm_bytes = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string DefaultModel() {
  if (const char* env = std::getenv("TQ_MODEL")) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/tqserve/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// "f16" -> K and V f16; "tq4/f16" -> K tq4, V f16.
void SplitFormat(const std::string& f, GpuModelOptions& o) {
  const size_t slash = f.find('/');
  o.k_format = f.substr(0, slash);
  o.v_format = slash == std::string::npos ? f : f.substr(slash + 1);
}

// One format at every context. Returns false (after printing) on an error.
struct Tiers {
  double warm_fraction = 0.0;
  double cold_fraction = 0.0;
  std::string cold_dir;
};

bool RunFormat(const tq::engine::Model& cpu, const std::string& format, const std::vector<int>& ctxs,
               int steps, const Tiers& tiers, std::vector<Row>* rows) {
  GpuModelOptions o;
  SplitFormat(format, o);
  o.warm_heads_fraction = tiers.warm_fraction;
  o.cold_heads_fraction = tiers.cold_fraction;
  o.cold.cold_dir = tiers.cold_dir;
  o.cold.capacity_bytes = uint64_t{64} << 30;
  o.time_attention = true;
  constexpr int kWarmup = 3;
  o.max_tokens = *std::max_element(ctxs.begin(), ctxs.end()) + kWarmup + steps + 1;
  auto model = GpuModel::Create(cpu, o);
  if (!model.ok()) {
    std::fprintf(stderr, "%s: %s\n", format.c_str(), model.status().ToString().c_str());
    return false;
  }
  GpuModel& gm = **model;
  auto start = tq::gpu::Event::Create(true), stop = tq::gpu::Event::Create(true);
  if (!start.ok() || !stop.ok()) {
    std::fprintf(stderr, "events: %s\n", (start.ok() ? stop.status() : start.status()).ToString().c_str());
    return false;
  }
  for (int ctx : ctxs) {
    auto seq = gm.NewSequence();
    tq::Status s = seq.ok() ? gm.FillSynthetic(**seq, ctx, 0x5eed + ctx) : seq.status();
    std::vector<double> step_ms, attn_ms;
    std::vector<float> logits;
    for (int i = 0; s.ok() && i < kWarmup + steps; ++i) {
      const int32_t token = 1 + i % 100;  // any tokens: the cost does not depend on them
      s = tq::gpu::CudaStatus(cudaEventRecord(start->get(), gm.stream()), "cudaEventRecord");
      if (s.ok()) s = gm.Forward(**seq, {&token, 1}, (*seq)->n_tokens(), true, &logits);
      if (s.ok()) s = tq::gpu::CudaStatus(cudaEventRecord(stop->get(), gm.stream()), "cudaEventRecord");
      if (s.ok()) s = tq::gpu::CudaStatus(cudaEventSynchronize(stop->get()), "cudaEventSynchronize");
      if (!s.ok() || i < kWarmup) continue;
      auto ms = tq::gpu::ElapsedMs(*start, *stop);
      if (!ms.ok()) {
        s = ms.status();
        break;
      }
      step_ms.push_back(*ms);
      attn_ms.push_back(gm.last_attention_ms());
    }
    if (!s.ok()) {
      std::fprintf(stderr, "%s at %d tokens: %s\n", format.c_str(), ctx, s.ToString().c_str());
      return false;
    }
    Row r;
    r.ctx = ctx;
    r.format = format;
    r.step_ms = Median(step_ms);
    r.tok_s = r.step_ms > 0 ? 1000.0 / r.step_ms : 0;
    r.attn_ms = Median(attn_ms);
    r.kv_bytes = gm.kv_bytes_per_token();
    r.hbm_bytes = gm.hot_kv_bytes_per_token();
    rows->push_back(r);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode speed of the GPU forward pass per KV format"};
  std::string model_path = DefaultModel(), json_path;
  std::vector<int> ctxs = {8192, 32768};
  std::vector<std::string> formats = {"f16", "int8", "tq4"};
  int steps = 32;
  Tiers tiers;
  app.add_option("--model", model_path, "GGUF model (default: $TQ_MODEL or the SmolLM2-135M Q4_1 cache path)");
  app.add_option("--ctx", ctxs, "context lengths, comma-separated")->delimiter(',');
  app.add_option("--formats", formats, "KV formats (FMT or KFMT/VFMT), comma-separated")->delimiter(',');
  app.add_option("--steps", steps, "timed decode steps per (context, format)")->check(CLI::Range(1, 100000));
  app.add_option("--warm-fraction", tiers.warm_fraction,
                 "fraction of (layer, KV head) pairs in the warm tier")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cold-fraction", tiers.cold_fraction,
                 "fraction of (layer, KV head) pairs on disk (--cold-dir)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--cold-dir", tiers.cold_dir, "directory of the cold pages' files (removed and rewritten)");
  app.add_option("--json", json_path, "also write the table as JSON here");
  CLI11_PARSE(app, argc, argv);

  auto dev = tq::gpu::ProbeDevice();
  if (!dev.ok()) {
    std::printf("%s\nskipped: no GPU\n", dev.status().ToString().c_str());
    return 0;
  }
  std::printf("GPU: %s (sm_%d%d, %d SMs, %.1f GiB), driver %d, runtime %d\n", dev->name.c_str(), dev->sm_major,
              dev->sm_minor, dev->multiprocessors, dev->total_bytes / 1073741824.0, dev->driver_version,
              dev->runtime_version);
  auto cpu = tq::engine::Model::Open(model_path);
  if (!cpu.ok()) {
    std::fprintf(stderr, "%s: %s\n", model_path.c_str(), cpu.status().ToString().c_str());
    return 1;
  }
  const tq::engine::HParams& hp = (*cpu)->hparams();
  std::printf(
      "model: %s (%d layers, %d KV heads, head_dim %d), %d timed steps, warm fraction %.2f, cold %.2f\n",
      hp.name.c_str(), hp.n_layers, hp.n_kv_heads, hp.head_dim, steps, tiers.warm_fraction,
      tiers.cold_fraction);

  std::vector<Row> rows;
  for (const std::string& f : formats) {
    if (!RunFormat(**cpu, f, ctxs, steps, tiers, &rows)) return 1;
  }
  auto f16_of = [&](int ctx) -> const Row* {
    for (const Row& r : rows) {
      if (r.ctx == ctx && r.format == "f16") return &r;
    }
    return nullptr;
  };
  std::printf("\n%7s %-10s %10s %9s %12s %12s %12s %10s %10s %10s\n", "ctx", "format", "tok/s", "ms/tok",
              "attn ms/tok", "KV B/tok", "HBM B/tok", "tok/s x", "attn x", "bytes x");
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    const Row* base = f16_of(r.ctx);
    const double tok_x = base && base->tok_s > 0 ? r.tok_s / base->tok_s : 0;
    const double attn_x = base && r.attn_ms > 0 ? base->attn_ms / r.attn_ms : 0;  // speed-up of attention
    const double bytes_x = base && r.kv_bytes > 0 ? base->kv_bytes / r.kv_bytes : 0;  // compression
    std::printf("%7d %-10s %10.1f %9.3f %12.3f %12.1f %12.1f %10.2f %10.2f %10.2f\n", r.ctx, r.format.c_str(),
                r.tok_s, r.step_ms, r.attn_ms, r.kv_bytes, r.hbm_bytes, tok_x, attn_x, bytes_x);
    out.push_back({{"ctx", r.ctx}, {"format", r.format}, {"tok_per_s", r.tok_s}, {"ms_per_token", r.step_ms},
                   {"attention_ms_per_token", r.attn_ms}, {"kv_bytes_per_token", r.kv_bytes},
                   {"hbm_kv_bytes_per_token", r.hbm_bytes}, {"tok_per_s_vs_f16", tok_x},
                   {"attention_speedup_vs_f16", attn_x}, {"compression_vs_f16", bytes_x}});
  }
  std::printf("(x columns: tok/s over f16's, f16's attention ms over this one's, f16's bytes over this one's)\n");
  if (!json_path.empty()) {
    nlohmann::json doc = {{"gpu", dev->name},
                          {"model", hp.name},
                          {"steps", steps},
                          {"warm_fraction", tiers.warm_fraction},
                          {"cold_fraction", tiers.cold_fraction},
                          {"rows", out}};
    std::ofstream(json_path) << doc.dump(2) << "\n";
  }
  return 0;
}
