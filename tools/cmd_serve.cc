// `tqserve serve`: loads the configuration (file, TQ_* environment, flags) and runs the daemon.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "common/logging.h"
#include "config/loader.h"
#include "tools/commands.h"
#include "server/daemon.h"

namespace tq::cli {
namespace {

struct ServeArgs {
  std::string config_file;
  bool print_config = false;
  // One slot per option-table row, filled by CLI11 when the flag is given.
  std::vector<std::string> values;
  std::vector<CLI::Option*> flags;
};

int RunServe(ServeArgs& args, const config::Loader& table_owner) {
  config::Loader loader;
  config::Sources sources;
  sources.file = args.config_file;
  sources.env = config::ProcessEnvironment();
  // Flags in table order; CLI11 keeps the last occurrence of a repeated flag.
  for (size_t i = 0; i < args.flags.size(); ++i) {
    if (args.flags[i]->count() > 0) {
      sources.flags.emplace_back(table_owner.options()[i].flag, args.values[i]);
    }
  }
  if (Status s = loader.Load(sources); !s.ok()) {
    std::fprintf(stderr, "tqserve: configuration error: %s\n", s.message().c_str());
    return kExitUsage;
  }
  if (args.print_config) {
    std::fputs(loader.ToYaml().c_str(), stdout);
    return kExitOk;
  }
  const config::Config& cfg = loader.config();
  LogOptions log_options;
  log_options.level = cfg.log.level;
  log_options.format = cfg.log.format == "json" ? LogFormat::kJson : LogFormat::kText;
  if (Status s = InitLogging(log_options); !s.ok()) {
    std::fprintf(stderr, "tqserve: %s\n", s.ToString().c_str());
    return kExitUsage;
  }
  return server::RunDaemon(cfg);
}

}  // namespace

Command AddServeCommand(CLI::App& parent) {
  // The table is built once here only to declare flags and help; RunServe loads into a fresh one.
  static const config::Loader table;
  static ServeArgs args;
  CLI::App* app = parent.add_subcommand("serve", "Run the inference server (HTTP + gRPC)");
  app->add_option("--config", args.config_file, "YAML configuration file (also TQ_CONFIG)");
  app->add_flag("--print-config", args.print_config, "Print the effective configuration as YAML and exit");
  args.values.resize(table.options().size());
  for (size_t i = 0; i < table.options().size(); ++i) {
    const config::Option& o = table.options()[i];
    const std::string help = o.help + " [" + o.name + ", env " + o.env + ", default " + o.field->Get() + "; " +
                             o.field->Allowed() + "]";
    args.flags.push_back(app->add_option("--" + o.flag, args.values[i], help)
                             ->type_name(std::string(o.field->TypeName()) == "int" ? "INT" : "VALUE"));
  }
  return {app, [] { return RunServe(args, table); }};
}

}  // namespace tq::cli
