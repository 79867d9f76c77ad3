// `tqserve calibrate`: writes a head-importance profile (JSON) for the KV presets from sample text, by
// attention concentration (one pass per chunk) or by measured sensitivity (one pass per chunk and KV head).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/eval/calibrate.h"
#include "tools/commands.h"
#include "tools/model_args.h"
#include "common/progress.h"

namespace tq::cli {
namespace {

struct CalibrateArgs {
  ModelArgs model;
  std::string file;
  std::string out;
  std::string method = "concentration";
  int ctx = 512;
  int chunks = -1;  // -1: the method's default (concentration 8, sensitivity 2)
  int skip_chunks = 0;
  std::string sparse_format = "tq4";
  std::string baseline_format = "int8";
};

int Run(const CalibrateArgs& a) {
  auto in = LoadModelAndText(a.model, a.file);
  if (!in.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", in.status().ToString().c_str());
    return kExitFailure;
  }
  auto method = engine::ParseCalibrationMethod(a.method);
  if (!method.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", method.status().ToString().c_str());
    return kExitFailure;
  }
  engine::CalibrateOptions o;
  o.method = *method;
  o.ctx = a.ctx;
  o.chunks = a.chunks >= 0 ? a.chunks : (o.method == engine::CalibrationMethod::kSensitivity ? 2 : 8);
  o.skip_chunks = a.skip_chunks;
  o.format = a.sparse_format;
  o.baseline_format = a.baseline_format == "none" ? "" : a.baseline_format;
  engine::ThreadPool pool(a.model.threads);
  ProgressLine line(o.method == engine::CalibrationMethod::kSensitivity ? "calibrate: head" : "calibrate: chunk");
  const auto progress = [&line](const engine::SensitivityStep& s) {
    char detail[96];
    std::snprintf(detail, sizeof detail, "layer %d, KV head %d, KLD %.5f - %.5f", s.layer, s.kv_head, s.kld,
                  s.baseline);
    line.Update(s.done, s.total, detail);
  };
  const auto chunk_progress = [&line](int done, int total) { line.Update(done, total); };
  auto profile = engine::Calibrate(*in->model, *in->tokenizer, in->text, o, pool, progress, chunk_progress);
  if (!profile.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", profile.status().ToString().c_str());
    return kExitFailure;
  }
  if (Status s = engine::SaveHeadProfile(*profile, a.out); !s.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", s.ToString().c_str());
    return kExitFailure;
  }
  const auto [lo, hi] = std::minmax_element(profile->score.begin(), profile->score.end());
  if (profile->method == "sensitivity") {
    std::printf(
        "wrote %s: %d layers x %d KV heads, KLD of one head in %s%s%s: %.5f to %.5f nats over %lld tokens\n",
        a.out.c_str(), profile->n_layers, profile->n_kv_heads, profile->format.c_str(),
        profile->baseline_format.empty() ? "" : " less in ", profile->baseline_format.c_str(), *lo, *hi,
        static_cast<long long>(profile->queries));
  } else {
    std::printf("wrote %s: %d layers x %d KV heads, concentration %.3f to %.3f over %lld queries\n",
                a.out.c_str(), profile->n_layers, profile->n_kv_heads, *lo, *hi,
                static_cast<long long>(profile->queries));
  }
  return kExitOk;
}

}  // namespace

Command AddCalibrateCommand(CLI::App& parent) {
  static CalibrateArgs args;
  CLI::App* app = parent.add_subcommand("calibrate", "Write a head-importance profile for the KV presets");
  AddModelFlags(app, &args.model, ModelFlags::kModel);
  app->add_option("--file,-f", args.file, "Sample text")->required();
  app->add_option("-o,--output", args.out, "Profile JSON to write")->required();
  app->add_option("--ctx", args.ctx, "Tokens per chunk")->check(CLI::Range(32, 1 << 20));
  app->add_option("--chunks", args.chunks, "Chunks (0 = all; default 8 for concentration, 2 for sensitivity)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--skip-chunks", args.skip_chunks,
                  "Whole chunks of the text to skip first (hold out an evaluation's chunks)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option(
         "--method", args.method,
         "concentration (attention statistics, one pass per chunk) or sensitivity (KLD of each KV head "
         "alone in the SPARSE format, one pass per chunk and head)")
      ->check(CLI::IsMember({"concentration", "sensitivity"}));
  app->add_option("--kv-sparse", args.sparse_format,
                  "sensitivity: the format each head is measured in (default tq4)");
  app->add_option("--kv-active", args.baseline_format,
                  "sensitivity: the format whose damage is subtracted (default int8; none = raw KLD)");
  return {app, [] { return Run(args); }};
}

}  // namespace tq::cli
