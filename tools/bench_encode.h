// `tqserve bench encode`: the cost of encoding one token's K and V for every KV head of a model shape, per KV
// format, scalar reference against the SIMD encoder, and its share of a decode step of the model, all
// measured in one run.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tq::cli {

// Adds the `encode` subcommand to `bench` and returns the function that runs it.
std::function<int()> AddBenchEncode(CLI::App* bench, CLI::App** subcommand);

}  // namespace tq::cli
