// `tqserve bench decode`: end-to-end decode speed of the model against context length, per KV configuration,
// all measured in one run so the ratios to f16 compare like with like.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "common/status.h"
#include "tools/model_args.h"

namespace tq::cli {

struct DecodeStep {
  double seconds = 0.0;  // wall time of one decode step (one token through the whole model), best of the steps
  int threads = 0;
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Opens the model of `args`, fills a sequence to `ctx` tokens with K = V = `kv_format`, and times `steps` decode
// steps after it; the fastest step counts (the least disturbed by other load on a shared machine).
StatusOr<DecodeStep> MeasureDecodeStep(const ModelArgs& args, const std::string& kv_format, int ctx, int steps);

// Adds the `decode` subcommand to `bench` and returns the function that runs it.
std::function<int()> AddBenchDecode(CLI::App* bench, CLI::App** subcommand);

}  // namespace tq::cli
