// tqserve: the daemon and its tools. One binary, one subcommand per job (serve, formats, ...).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "common/build_info.h"
#include "common/logging.h"
#include "kernels/cpu/simd.h"
#include "tools/commands.h"

namespace {

std::string VersionText() {
  const tq::BuildInfo& info = tq::GetBuildInfo();
  std::string simd;
  for (const std::string& name : tq::kernels::CompiledSimdTargets()) {
    if (!simd.empty()) simd += ' ';
    simd += name;
  }
  std::string text = "tqserve " + std::string(info.version) + "\n";
  text += "commit:     " + std::string(info.commit) + "\n";
  text += "build type: " + std::string(info.build_type) + "\n";
  text += "compiler:   " + std::string(info.compiler) + "\n";
  text += "simd:       " + simd + " (active: " + tq::kernels::ActiveSimdTarget() + ")";
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  // Every subcommand logs to stderr (spdlog's own default is stdout, which would mix log lines into the JSON that
  // `eval`, `bench` and `formats` print there); `serve` installs its configured logger over this one.
  if (tq::Status s = tq::InitLogging(tq::LogOptions{}); !s.ok()) {
    std::fprintf(stderr, "tqserve: %s\n", s.ToString().c_str());
    return 1;
  }
  CLI::App app{"tqserve: an LLM inference server with a TurboQuant-compressed, tiered KV cache"};
  app.set_version_flag("--version", VersionText());
  app.require_subcommand(1);
  std::string simd = "auto";
  app.add_option("--simd", simd,
                 "cap the CPU kernels' SIMD target (auto, or one of the names --version lists, e.g. AVX2)")
      ->capture_default_str();

  // One row per subcommand; each lives in tools/cmd_<name>.cc.
  std::vector<tq::cli::Command> commands = {
      tq::cli::AddServeCommand(app),
      tq::cli::AddGenerateCommand(app),
      tq::cli::AddEvalCommand(app),
      tq::cli::AddCalibrateCommand(app),
      tq::cli::AddFormatsCommand(app),
      tq::cli::AddBenchCommand(app),
      tq::cli::AddInspectCommand(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return tq::cli::kExitUsage;
  }
  if (tq::Status s = tq::kernels::LimitSimdTarget(simd); !s.ok()) {
    std::fprintf(stderr, "tqserve: --simd: %s\n", s.ToString().c_str());
    return tq::cli::kExitUsage;
  }
  for (const tq::cli::Command& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  std::fprintf(stderr, "tqserve: no subcommand given (see --help)\n");
  return tq::cli::kExitUsage;
}
