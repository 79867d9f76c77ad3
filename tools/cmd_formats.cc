// `tqserve formats`: the KV format table, and with --measure the quality of each format on Gaussian data.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/formats/format.h"
#include "bench/lib/format_measure.h"
#include "tools/commands.h"

namespace tq::cli {

namespace {

struct FormatsFlags {
  bool measure = false;
  bool json = false;
  int dim = 128;
  int vectors = 20000;
  uint64_t seed = 1;
};

int RunFormats(const FormatsFlags& flags) {
  using kernels::kFormatTable;
  nlohmann::json list = nlohmann::json::array();
  if (!flags.json) {
    std::printf("%-6s %14s %16s  %s\n", "name", "bits_per_value", "bytes_per_vector",
                flags.measure ? "mse      ip_err   mse_nearest" : "what");
  }
  for (const kernels::FormatInfo& info : kFormatTable) {
    const bool coded = kernels::IsPaged(info.format);  // f32 is kept in plain rows: any head_dim takes it
    if (Status s = kernels::CheckSupported(info.format, flags.dim); coded && !s.ok()) {
      std::fprintf(stderr, "tqserve formats: %s\n", s.ToString().c_str());
      return kExitUsage;
    }
    nlohmann::json row;
    row["name"] = std::string(info.name);
    row["bits_per_value"] = kernels::BitsPerValue(info.format, flags.dim);
    row["bytes_per_vector"] = kernels::BytesPerVector(info.format, flags.dim);
    if (flags.measure && !coded) {
      // Nothing is encoded, so there is no error to measure; the row says so instead of printing zeros.
      row["coded"] = false;
      if (!flags.json) {
        std::printf("%-6s %14.4f %16.2f  not coded (plain f32 rows): exact\n", std::string(info.name).c_str(),
                    kernels::BitsPerValue(info.format, flags.dim), kernels::BytesPerVector(info.format, flags.dim));
      }
    } else if (flags.measure) {
      row["coded"] = true;
      StatusOr<kernels::FormatQuality> q = kernels::MeasureFormat(info.format, flags.dim, flags.vectors, flags.seed);
      if (!q.ok()) {
        std::fprintf(stderr, "tqserve formats: %s\n", q.status().ToString().c_str());
        return kExitFailure;
      }
      row["mse"] = q->mse;
      row["mse_nearest"] = q->mse_nearest;
      row["ip_err"] = q->ip_err;
      row["ip_bias"] = q->ip_bias;
      if (!flags.json) {
        std::printf("%-6s %14.4f %16.2f  %.5f  %.5f  %.5f\n", std::string(info.name).c_str(),
                    kernels::BitsPerValue(info.format, flags.dim),
                    kernels::BytesPerVector(info.format, flags.dim), q->mse, q->ip_err, q->mse_nearest);
      }
    } else {
      row["what"] = std::string(info.what);
      if (!flags.json) {
        std::printf("%-6s %14.4f %16.2f  %s\n", std::string(info.name).c_str(),
                    kernels::BitsPerValue(info.format, flags.dim), kernels::BytesPerVector(info.format, flags.dim),
                    std::string(info.what).c_str());
      }
    }
    list.push_back(row);
  }
  if (flags.json) std::printf("%s\n", list.dump(2).c_str());
  return kExitOk;
}

}  // namespace

Command AddFormatsCommand(CLI::App& parent) {
  auto flags = std::make_shared<FormatsFlags>();
  CLI::App* app = parent.add_subcommand("formats", "List the KV cache formats; --measure their quality");
  app->add_flag("--measure", flags->measure, "Encode and decode random Gaussian vectors; print mse and ip_err");
  app->add_flag("--json", flags->json, "Print a JSON list");
  app->add_option("--dim", flags->dim, "Head dimension")->check(CLI::Range(16, 256))->capture_default_str();
  app->add_option("--vectors", flags->vectors, "Vectors per format for --measure")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  app->add_option("--seed", flags->seed, "Seed of the random data")->capture_default_str();
  return Command{app, [flags] { return RunFormats(*flags); }};
}

}  // namespace tq::cli
