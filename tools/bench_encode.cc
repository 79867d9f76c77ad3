#include "tools/bench_encode.h"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/simd.h"
#include "bench/lib/encode_speed.h"
#include "kernels/formats/format.h"
#include "tools/bench_decode.h"
#include "tools/commands.h"
#include "tools/model_args.h"

namespace tq::cli {
namespace {

struct EncodeArgs {
  ModelArgs model;
  int layers = 0;    // 0: the model's, or 30 without one
  int kv_heads = 0;  // 0: the model's, or 3 without one
  std::vector<int> dims = {64, 128};
  std::vector<std::string> formats;  // empty: all
  double min_seconds = 0.25;         // per encoder, format and head_dim
  int decode_ctx = 512;              // 0: no decode step
  int decode_steps = 16;
  std::string decode_format = "f16";
  bool json = false;
};

int Run(const EncodeArgs& a) {
  std::vector<kernels::KvFormat> formats;
  if (a.formats.empty()) {
    for (const kernels::FormatInfo& info : kernels::kFormatTable) {
      if (kernels::IsPaged(info.format)) formats.push_back(info.format);  // f32 is plain rows, not coded
    }
  }
  for (const std::string& name : a.formats) {
    StatusOr<kernels::KvFormat> format = kernels::FormatFromName(name);
    if (!format.ok()) {
      std::fprintf(stderr, "tqserve bench encode: %s\n", format.status().ToString().c_str());
      return kExitUsage;
    }
    formats.push_back(*format);
  }
  // The decode step first: it gives the model's shape. Without a model the ratio is left out.
  DecodeStep step;
  std::string step_note = "no decode step measured (--decode-ctx 0)";
  if (a.decode_ctx > 0) {
    StatusOr<DecodeStep> measured = MeasureDecodeStep(a.model, a.decode_format, a.decode_ctx, a.decode_steps);
    if (measured.ok()) {
      step = *measured;
      char line[256];
      std::snprintf(line, sizeof line,
                    "decode step at ctx %d, %s KV, %d threads: %.3f ms, best of %d steps (%d layers x %d KV "
                    "heads, head_dim %d)",
                    a.decode_ctx, a.decode_format.c_str(), step.threads, step.seconds * 1e3, a.decode_steps,
                    step.n_layers, step.n_kv_heads, step.head_dim);
      step_note = line;
    } else {
      step_note = "no decode step: " + measured.status().ToString();
    }
  }
  const int layers = a.layers > 0 ? a.layers : step.n_layers > 0 ? step.n_layers : 30;
  const int kv_heads = a.kv_heads > 0 ? a.kv_heads : step.n_kv_heads > 0 ? step.n_kv_heads : 3;
  const int vectors = layers * kv_heads * 2;  // K and V of every KV head, per token
  nlohmann::json rows = nlohmann::json::array();
  for (int d : a.dims) {
    for (kernels::KvFormat format : formats) {
      if (!kernels::CheckSupported(format, d).ok()) continue;
      StatusOr<kernels::EncodeSpeed> speed = kernels::MeasureEncodeSpeed(format, d, a.min_seconds);
      if (!speed.ok()) {
        std::fprintf(stderr, "tqserve bench encode: %s\n", speed.status().ToString().c_str());
        return kExitFailure;
      }
      nlohmann::json row;
      row["format"] = std::string(kernels::FormatName(format));
      row["head_dim"] = d;
      row["vectors_per_token"] = vectors;
      row["reference_ns_per_vector"] = speed->reference_ns_per_vector;
      row["simd_ns_per_vector"] = speed->simd_ns_per_vector;
      row["reference_us_per_token"] = speed->reference_ns_per_vector * vectors / 1e3;
      row["simd_us_per_token"] = speed->simd_ns_per_vector * vectors / 1e3;
      row["speedup"] = speed->reference_ns_per_vector / speed->simd_ns_per_vector;
      if (step.seconds > 0) {
        row["decode_step_ms"] = step.seconds * 1e3;
        row["reference_pct_of_step"] = speed->reference_ns_per_vector * vectors / (step.seconds * 1e9) * 100;
        row["simd_pct_of_step"] = speed->simd_ns_per_vector * vectors / (step.seconds * 1e9) * 100;
      }
      row["simd_target"] = kernels::ActiveSimdTarget();
      rows.push_back(row);
    }
  }
  if (a.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return kExitOk;
  }
  std::printf(
      "encode of one token's K and V for all %d layers x %d KV heads (%d vectors); 1 thread, SIMD target %s,"
      " best of 5 rounds (thread CPU time)\n%s\n",
      layers, kv_heads, vectors, kernels::ActiveSimdTarget().c_str(), step_note.c_str());
  std::printf("%-6s %4s %12s %12s %8s %11s %11s\n", "format", "dim", "ref us/tok", "simd us/tok", "speedup",
              "ref %step", "simd %step");
  for (const auto& r : rows) {
    std::printf("%-6s %4d %12.1f %12.2f %7.1fx", r["format"].get<std::string>().c_str(),
                r["head_dim"].get<int>(), r["reference_us_per_token"].get<double>(),
                r["simd_us_per_token"].get<double>(), r["speedup"].get<double>());
    if (r.contains("decode_step_ms")) {
      std::printf(" %10.2f%% %10.3f%%", r["reference_pct_of_step"].get<double>(),
                  r["simd_pct_of_step"].get<double>());
    }
    std::printf("\n");
  }
  if (step.seconds > 0) {
    std::printf(
        "%%step: share of the measured decode step (head_dim %d); rows at another head_dim keep the same "
        "layer x head count\n",
        step.head_dim);
  }
  return kExitOk;
}

}  // namespace

std::function<int()> AddBenchEncode(CLI::App* bench, CLI::App** subcommand) {
  auto args = std::make_shared<EncodeArgs>();
  CLI::App* app =
      bench->add_subcommand("encode", "KV encode cost per token for a model's heads, scalar vs SIMD");
  AddModelFlags(app, &args->model);
  app->add_option("--layers", args->layers, "Layers (default: the model's, else 30)")
      ->check(CLI::Range(0, 1024));
  app->add_option("--kv-heads", args->kv_heads, "KV heads per layer (default: the model's, else 3)")
      ->check(CLI::Range(0, 1024));
  app->add_option("--dims", args->dims, "Head dimensions")->delimiter(',')->capture_default_str();
  app->add_option("--formats", args->formats, "Formats (default: all)")->delimiter(',');
  app->add_option("--min-seconds", args->min_seconds, "Time per encoder, format and head_dim")
      ->capture_default_str();
  app->add_option("--decode-ctx", args->decode_ctx, "Context of the decode step measured (0: none)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_option("--decode-steps", args->decode_steps, "Decode steps timed")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--decode-format", args->decode_format, "KV format (K = V) of the decode step")
      ->capture_default_str();
  app->add_flag("--json", args->json, "Print a JSON list");
  *subcommand = app;
  return [args] { return Run(*args); };
}

}  // namespace tq::cli
