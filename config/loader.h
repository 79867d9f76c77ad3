// Loads the effective configuration: defaults (the table's, then the entry point's), then a YAML file, then TQ_* environment variables, then flags.
// Every source is checked against the option table: an unknown option, a wrong type or a value out of range is an
// invalid_argument Status whose message names the option, the source and what is allowed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "config/option.h"

namespace tq::config {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

struct Sources {
  // An entry point's own defaults (option name -> text), applied before the other sources; a tool keeps one f16
  // KV format where the daemon's default is the compressed preset. Unknown names are an error.
  KeyValues defaults;
  std::string file;  // YAML config file; empty = none (TQ_CONFIG in `env` names one too)
  KeyValues env;     // the process environment; only TQ_* names (and HOME, for "~") are read
  KeyValues flags;   // flag name without dashes ("http-port") -> text, in command-line order
};

// Environment variables starting with TQ_ that are not options: TQ_CONFIG (the config file) and TQ_TEST_* (tests).
bool IsReservedEnv(std::string_view name);

// Snapshot of the process environment, for Sources::env.
KeyValues ProcessEnvironment();

class Loader {
 public:
  Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Applies the sources in order. On error the configuration is left partly applied; do not use it.
  Status Load(const Sources& sources);

  const Config& config() const { return config_; }
  const std::vector<Option>& options() const { return options_; }

  // The effective configuration as YAML that Load() accepts back, each value commented with its source.
  std::string ToYaml() const;

 private:
  Option* FindByName(std::string_view name);
  Status LoadFile(const std::string& path);
  Status LoadEnv(const KeyValues& env);
  Status LoadFlags(const KeyValues& flags);
  Status Finish(const KeyValues& env);

  Config config_;
  std::vector<Option> options_;
};

}  // namespace tq::config
