// `tqserve calibrate`: writes a head-importance profile (JSON) for the KV presets from attention on sample text.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/eval/calibrate.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace tq::cli {
namespace {

struct CalibrateArgs {
  ModelArgs model;
  std::string file;
  std::string out;
  int ctx = 512;
  int chunks = 8;
};

int Run(const CalibrateArgs& a) {
  auto in = LoadModelAndText(a.model, a.file);
  if (!in.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", in.status().ToString().c_str());
    return kExitFailure;
  }
  engine::ThreadPool pool(a.model.threads);
  auto profile = engine::Calibrate(*in->model, *in->tokenizer, in->text, a.ctx, a.chunks, pool);
  if (!profile.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", profile.status().ToString().c_str());
    return kExitFailure;
  }
  if (Status s = engine::SaveHeadProfile(*profile, a.out); !s.ok()) {
    std::fprintf(stderr, "tqserve calibrate: %s\n", s.ToString().c_str());
    return kExitFailure;
  }
  double lo = 1, hi = 0;
  for (double s : profile->score) {
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  std::printf("wrote %s: %d layers x %d KV heads, concentration %.3f to %.3f over %lld queries\n", a.out.c_str(),
              profile->n_layers, profile->n_kv_heads, lo, hi, static_cast<long long>(profile->queries));
  return kExitOk;
}

}  // namespace

Command AddCalibrateCommand(CLI::App& parent) {
  static CalibrateArgs args;
  CLI::App* app = parent.add_subcommand("calibrate", "Write a head-importance profile for the KV presets");
  app->add_option("--model,-m", args.model.model, "GGUF model (default: the default model)");
  app->add_option("--threads,-t", args.model.threads, "Threads (0 = one per core)")->check(CLI::Range(0, 1024));
  app->add_option("--file,-f", args.file, "Sample text")->required();
  app->add_option("-o,--output", args.out, "Profile JSON to write")->required();
  app->add_option("--ctx", args.ctx, "Tokens per chunk")->check(CLI::Range(32, 1 << 20));
  app->add_option("--chunks", args.chunks, "Chunks (0 = all)")->check(CLI::Range(0, 1 << 20));
  return {app, [] { return Run(args); }};
}

}  // namespace tq::cli
