#include "tools/model_args.h"

#include <filesystem>
#include <stdexcept>
#include <fstream>
#include <sstream>

#include "config/loader.h"
#include "server/engine_config.h"

namespace tq::cli {

namespace {

// Where the tools' defaults differ from the daemon's: one KV format for every head (f16 where the head size
// allows) and no cold tier, so that a tool's figures do not depend on a preset or a disk unless asked.
const std::vector<std::pair<std::string, std::string>> kToolDefaults = {{"kv.preset", ""}, {"kv.cold_dir", ""}};

// The kv.* rows that ModelArgs carries (KvSpec and KvStoreOptions); the others configure the engine loop.
bool KvSpecOrStoreRow(std::string_view name) {
  static const char* const kRows[] = {
      "kv.k_format",  "kv.v_format",   "kv.boundary_layers", "kv.preset",         "kv.profile",
      "kv.hot_format", "kv.active_format", "kv.sparse_format", "kv.hot_bytes",     "kv.warm_bytes",
      "kv.warm_lock", "kv.cold_dir",   "kv.cold_bytes",      "kv.cold_cache_bytes", "kv.io_backend",
      "kv.io_depth",  "kv.direct_io",  "kv.key_scale"};
  for (const char* row : kRows) {
    if (name == row) return true;
  }
  return false;
}

bool Wanted(std::string_view name, ModelFlags which) {
  if (name == "model.path" || name == "model.dir" || name == "engine.threads") return true;
  switch (which) {
    case ModelFlags::kModel: return false;
    case ModelFlags::kKv: return KvSpecOrStoreRow(name);
    case ModelFlags::kEngine: return name.starts_with("kv.") || name.starts_with("engine.") || name == "model.lora";
  }
  return false;
}

}  // namespace

void AddModelFlags(CLI::App* app, ModelArgs* args, ModelFlags which,
                   std::vector<std::pair<std::string, std::string>> defaults) {
  struct Bound {
    std::vector<std::string> values;     // one slot per bound row
    std::vector<CLI::Option*> options;
    std::vector<std::string> flags;      // the rows' flag names, without dashes
    config::KeyValues defaults;
  };
  auto bound = std::make_shared<Bound>();
  bound->defaults = kToolDefaults;
  bound->defaults.insert(bound->defaults.end(), defaults.begin(), defaults.end());
  // The table's rows with this tool's defaults: names, help and the defaults shown; each parse loads afresh.
  config::Loader shown;
  if (Status s = shown.Load({.defaults = bound->defaults}); !s.ok()) {
    throw std::logic_error("tool defaults: " + s.message());
  }
  bound->values.reserve(shown.options().size());  // CLI11 keeps pointers to the strings: no reallocation
  for (const config::Option& o : shown.options()) {
    if (!Wanted(o.name, which)) continue;
    std::string names = "--" + o.flag;
    if (o.flag == "model") names += ",-m";
    if (o.flag == "threads") names += ",-t";
    std::string value_now = o.field->Get();
    if (value_now.empty()) value_now = "\"\"";
    const std::string help =
        o.help + " [" + o.name + ", env " + o.env + ", default " + value_now + "; " + o.field->Allowed() + "]";
    bound->values.emplace_back();
    bound->flags.push_back(o.flag);
    bound->options.push_back(app->add_option(names, bound->values.back(), help)
                                 ->type_name(std::string(o.field->TypeName()) == "int" ? "INT" : "VALUE"));
  }
  app->parse_complete_callback([args, bound] {
    config::Sources sources;
    sources.defaults = bound->defaults;
    sources.env = config::ProcessEnvironment();
    for (size_t i = 0; i < bound->options.size(); ++i) {
      if (bound->options[i]->count() > 0) sources.flags.emplace_back(bound->flags[i], bound->values[i]);
    }
    config::Loader loader;
    if (Status s = loader.Load(sources); !s.ok()) throw CLI::ValidationError(s.message());
    const config::Config& cfg = loader.config();
    const auto options = server::ToEngineOptions(cfg, "");
    if (!options.ok()) throw CLI::ValidationError(options.status().message());
    const engine::EngineOptions& eo = *options;
    args->model = cfg.model.path;
    args->threads = eo.threads;
    args->kv = eo.kv;
    args->store = eo.kv_store;
    args->config = cfg;
  });
}

StatusOr<std::string> ResolveModelPath(const ModelArgs& a) { return server::ResolveModelPath(a.config); }

StatusOr<LoadedInputs> LoadModelAndText(const ModelArgs& args, const std::string& text_file) {
  LoadedInputs in;
  TQ_ASSIGN_OR_RETURN(in.model_path, ResolveModelPath(args));
  std::ifstream file(text_file, std::ios::binary);
  if (!file) return NotFoundError("cannot read " + text_file);
  std::stringstream text;
  text << file.rdbuf();
  in.text = text.str();
  TQ_ASSIGN_OR_RETURN(in.model, engine::Model::Open(in.model_path));
  TQ_ASSIGN_OR_RETURN(in.tokenizer, engine::Tokenizer::FromGguf(in.model->gguf()));
  return in;
}

uint64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // kB
  }
  return 0;
}

}  // namespace tq::cli
