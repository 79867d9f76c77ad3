// `tqserve bench decode`: end-to-end decode speed of the model against context length, per KV configuration,
// all measured in one run so the ratios to f16 compare like with like.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tq::cli {

// Adds the `decode` subcommand to `bench` and returns the function that runs it.
std::function<int()> AddBenchDecode(CLI::App* bench, CLI::App** subcommand);

}  // namespace tq::cli
