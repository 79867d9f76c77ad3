// Subcommands of the `tqserve` binary. Each Add*Command adds one CLI11 subcommand to `parent` and returns the
// function that runs it (returning the process exit code) when the user chose it. main.cc lists them in one table.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tq::cli {

struct Command {
  CLI::App* app = nullptr;    // the CLI11 subcommand
  std::function<int()> run;   // runs after a successful parse; returns the exit code
};

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;       // a runtime error (model fails to load, I/O error, ...)
inline constexpr int kExitUsage = 2;         // bad flags or configuration

Command AddServeCommand(CLI::App& parent);
Command AddGenerateCommand(CLI::App& parent);
Command AddEvalCommand(CLI::App& parent);
Command AddCalibrateCommand(CLI::App& parent);
Command AddFormatsCommand(CLI::App& parent);
Command AddBenchCommand(CLI::App& parent);
Command AddInspectCommand(CLI::App& parent);

}  // namespace tq::cli
