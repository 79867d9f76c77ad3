// `tqserve bench attention`: decode-attention speed per KV format, all formats in one run.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/lib/attention_speed.h"
#include "kernels/cpu/simd.h"
#include "kernels/formats/format.h"
#include "tools/bench_decode.h"
#include "tools/bench_encode.h"
#include "tools/commands.h"

namespace tq::cli {

namespace {

struct BenchFlags {
  kernels::SpeedOptions speed;
  std::vector<std::string> formats;
  bool json = false;
};

// The speed targets of the KV formats (docs/formats.md), stated for the default model's shape at 8k context:
// tq4 at least 1.5x faster than f16 and tq3 at least 1.7x, both measured in this run.
void PrintSpeedTargets(const kernels::SpeedOptions& options, const kernels::SpeedReport& report) {
  if (options.ctx != 8192 || options.head_dim != 64 || options.gqa != 3) return;
  const struct {
    kernels::KvFormat format;
    double ratio;
  } kTargets[] = {{kernels::KvFormat::kTq4, 1.5}, {kernels::KvFormat::kTq3, 1.7}};
  for (const auto& target : kTargets) {
    for (const kernels::AttentionSpeed& s : report.formats) {
      if (s.format != target.format) continue;
      std::printf("target: %s at least %.1fx f16: %.2fx, %s\n",
                  std::string(kernels::FormatName(s.format)).c_str(), target.ratio, s.ratio_vs_f16,
                  s.ratio_vs_f16 >= target.ratio ? "met" : "NOT met");
    }
  }
}

int RunBenchAttention(BenchFlags& flags) {
  for (const std::string& name : flags.formats) {
    StatusOr<kernels::KvFormat> format = kernels::FormatFromName(name);
    if (!format.ok()) {
      std::fprintf(stderr, "tqserve bench attention: %s\n", format.status().ToString().c_str());
      return kExitUsage;
    }
    flags.speed.formats.push_back(*format);
  }
  StatusOr<kernels::SpeedReport> report = kernels::MeasureAttentionSpeed(flags.speed);
  if (!report.ok()) {
    std::fprintf(stderr, "tqserve bench attention: %s\n", report.status().ToString().c_str());
    return report.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  // Encode cost of one token's K and V for every KV head of the default model (30 layers x 3 KV heads).
  constexpr int kModelVectors = 30 * 3 * 2;
  const std::string simd_target = kernels::ActiveSimdTarget();
  nlohmann::json list = nlohmann::json::array();
  for (const kernels::AttentionSpeed& s : report->formats) {
    nlohmann::json row;
    row["format"] = std::string(kernels::FormatName(s.format));
    row["ns_per_token"] = s.ns_per_token;
    row["ratio_vs_f16"] = s.ratio_vs_f16;
    row["hot_ns_per_token"] = s.hot_ns_per_token;
    row["bytes_per_token"] = s.bytes_per_token;
    row["kv_read_gbps"] = s.kv_read_gbps;
    row["memory_read_gbps"] = report->memory_read_gbps;
    row["threads"] = report->threads;
    row["simd_target"] = simd_target;
    row["encode_ns_per_vector"] = s.encode_ns_per_vector;
    row["encode_us_per_model_token"] = s.encode_ns_per_vector * kModelVectors / 1e3;
    list.push_back(row);
  }
  if (flags.json) {
    std::printf("%s\n", list.dump(2).c_str());
    return kExitOk;
  }
  std::printf(
      "decode attention, ctx %d, head_dim %d, gqa %d, %d KV heads cycled by %d thread%s, SIMD target %s; "
      "memory read %.1f GB/s\n",
      flags.speed.ctx, flags.speed.head_dim, flags.speed.gqa, report->heads, report->threads,
      report->threads == 1 ? "" : "s", simd_target.c_str(), report->memory_read_gbps);
  std::printf("%-6s %12s %9s %12s %10s %9s %16s\n", "format", "ns/token", "x f16", "hot ns/tok", "B/token", "GB/s",
              "encode us/token*");
  for (const kernels::AttentionSpeed& s : report->formats) {
    std::printf("%-6s %12.3f %9.2f %12.3f %10.1f %9.1f %16.1f\n", std::string(kernels::FormatName(s.format)).c_str(),
                s.ns_per_token, s.ratio_vs_f16, s.hot_ns_per_token, s.bytes_per_token, s.kv_read_gbps,
                s.encode_ns_per_vector * kModelVectors / 1e3);
  }
  std::printf("* encode of one token's K and V for all 30 x 3 KV heads of the default model (SIMD encoder; "
              "`tqserve bench encode` compares it with the reference)\n");
  PrintSpeedTargets(flags.speed, *report);
  return kExitOk;
}

}  // namespace

Command AddBenchCommand(CLI::App& parent) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* app = parent.add_subcommand("bench", "Kernel benchmarks");
  app->require_subcommand(1);
  CLI::App* attention = app->add_subcommand("attention", "Decode attention speed per KV format");
  attention->add_option("--ctx", flags->speed.ctx, "Cached tokens per KV head")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  attention->add_option("--dim", flags->speed.head_dim, "Head dimension")->check(CLI::Range(16, 256))
      ->capture_default_str();
  attention->add_option("--gqa", flags->speed.gqa, "Query heads per KV head")->check(CLI::Range(1, 64))
      ->capture_default_str();
  attention->add_option("--working-set-mib", flags->speed.working_set_mib,
                        "f16 KV bytes cycled through (above the last-level cache)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  attention->add_option("--min-seconds", flags->speed.min_seconds, "Time per format")->capture_default_str();
  attention->add_option("--rounds", flags->speed.rounds, "Rounds per format, alternating with f16; best round counts")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  attention
      ->add_option("--threads,-t", flags->speed.threads,
                   "Threads reading KV at once, each its own heads (times are then the machine's)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  attention->add_option("--formats", flags->formats, "Formats to measure (default: all; f16 always)");
  attention->add_flag("--json", flags->json, "Print a JSON list");
  CLI::App* decode = nullptr;
  std::function<int()> run_decode = AddBenchDecode(app, &decode);
  CLI::App* encode = nullptr;
  std::function<int()> run_encode = AddBenchEncode(app, &encode);
  return Command{app, [flags, decode, run_decode, encode, run_encode] {
                   if (decode->parsed()) return run_decode();
                   if (encode->parsed()) return run_encode();
                   return RunBenchAttention(*flags);
                 }};
}

}  // namespace tq::cli
