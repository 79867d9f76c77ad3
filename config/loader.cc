#include "config/loader.h"

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <filesystem>
#include <map>

#include "config/option_table.h"

extern char** environ;

namespace tq::config {
namespace {

Status OptionError(const Option& option, std::string_view where, const Status& cause) {
  return InvalidArgumentError("option " + option.name + " (" + std::string(where) + "): " + cause.message());
}

// Walks a YAML map, collecting dotted leaf names. Leaves must be scalars (or null = leave the default).
Status Flatten(const YAML::Node& node, const std::string& prefix, const std::string& path,
               std::vector<std::pair<std::string, YAML::Node>>* out) {
  if (!node.IsMap()) {
    return InvalidArgumentError("config file " + path + ": " + (prefix.empty() ? "top level" : prefix) +
                                " must be a map of options");
  }
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (entry.second.IsMap()) {
      TQ_RETURN_IF_ERROR(Flatten(entry.second, name, path, out));
    } else {
      out->emplace_back(name, entry.second);
    }
  }
  return Status::Ok();
}

std::string KnownSections(const std::vector<Option>& options) {
  std::string out;
  std::string last;
  for (const Option& o : options) {
    const std::string section = o.name.substr(0, o.name.find('.'));
    if (section != last) out += (out.empty() ? "" : ", ") + section;
    last = section;
  }
  return out;
}

}  // namespace

bool IsReservedEnv(std::string_view name) { return name == "TQ_CONFIG" || name.starts_with("TQ_TEST_"); }

KeyValues ProcessEnvironment() {
  KeyValues env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

Loader::Loader() : options_(BuildOptionTable(&config_)) {}

Option* Loader::FindByName(std::string_view name) {
  for (Option& o : options_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

Status Loader::Load(const Sources& sources) {
  for (Option& o : options_) {
    o.field->Reset();
    o.source = Source::kDefault;
  }
  for (const auto& [name, value] : sources.defaults) {
    Option* option = FindByName(name);
    if (option == nullptr) return InvalidArgumentError("unknown option '" + name + "' in an entry point's defaults");
    if (Status s = option->field->Set(value); !s.ok()) return OptionError(*option, "the defaults", s);
  }
  std::string file = sources.file;
  if (file.empty()) {
    for (const auto& [name, value] : sources.env) {
      if (name == "TQ_CONFIG") file = value;
    }
  }
  if (!file.empty()) TQ_RETURN_IF_ERROR(LoadFile(file));
  TQ_RETURN_IF_ERROR(LoadEnv(sources.env));
  TQ_RETURN_IF_ERROR(LoadFlags(sources.flags));
  return Finish(sources.env);
}

Status Loader::LoadFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("config file " + path + " does not exist or is not a regular file");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("config file " + path + " is not valid YAML: " + e.what());
  }
  if (root.IsNull()) return Status::Ok();  // an empty file changes nothing
  std::vector<std::pair<std::string, YAML::Node>> leaves;
  TQ_RETURN_IF_ERROR(Flatten(root, "", path, &leaves));
  for (const auto& [name, node] : leaves) {
    Option* option = FindByName(name);
    if (option == nullptr) {
      return InvalidArgumentError("unknown option '" + name + "' in config file " + path +
                                  " (sections: " + KnownSections(options_) +
                                  "; `tqserve serve --help` lists every option)");
    }
    if (node.IsNull()) continue;
    if (!node.IsScalar()) {
      return OptionError(*option, "config file " + path,
                         InvalidArgumentError("expected " + option->field->Allowed() + ", got a list or map"));
    }
    if (Status s = option->field->Set(node.Scalar()); !s.ok()) {
      return OptionError(*option, "config file " + path, s);
    }
    option->source = Source::kFile;
  }
  return Status::Ok();
}

Status Loader::LoadEnv(const KeyValues& env) {
  for (const auto& [name, value] : env) {
    if (!name.starts_with("TQ_") || IsReservedEnv(name)) continue;
    Option* option = nullptr;
    for (Option& o : options_) {
      if (o.env == name) option = &o;
    }
    if (option == nullptr) {
      return InvalidArgumentError("unknown option in environment variable " + name +
                                  " (TQ_* variables name options, e.g. TQ_SERVER_HTTP_PORT; "
                                  "`tqserve serve --help` lists them)");
    }
    if (Status s = option->field->Set(value); !s.ok()) return OptionError(*option, "environment " + name, s);
    option->source = Source::kEnv;
  }
  return Status::Ok();
}

Status Loader::LoadFlags(const KeyValues& flags) {
  for (const auto& [flag, value] : flags) {
    Option* option = nullptr;
    for (Option& o : options_) {
      if (o.flag == flag) option = &o;
    }
    if (option == nullptr) return InvalidArgumentError("unknown option --" + flag);
    if (Status s = option->field->Set(value); !s.ok()) return OptionError(*option, "flag --" + flag, s);
    option->source = Source::kFlag;
  }
  return Status::Ok();
}

Status Loader::Finish(const KeyValues& env) {
  // "~" at the start of a path means $HOME; without HOME the path stays as written and fails where it is used.
  std::string home;
  for (const auto& [name, value] : env) {
    if (name == "HOME") home = value;
  }
  if (config_.kv.cold_dir == "auto") {
    // Without HOME there is no default cache directory: no cold tier (the start-up line says so).
    config_.kv.cold_dir = home.empty() ? "" : "~/.cache/tqserve/kv";
    config_.kv.cold_dir_optional = true;
  }
  for (std::string* path :
       {&config_.model.dir, &config_.model.path, &config_.kv.cold_dir, &config_.server.api_key_file}) {
    if (path->starts_with("~/") && !home.empty()) *path = home + path->substr(1);
  }
  return Status::Ok();
}

std::string Loader::ToYaml() const {
  std::string out = "# effective tqserve configuration; each value is followed by its source\n";
  std::string section;
  for (const Option& o : options_) {
    const size_t dot = o.name.find('.');
    const std::string this_section = o.name.substr(0, dot);
    if (this_section != section) {
      section = this_section;
      out += section + ":\n";
    }
    std::string value = o.field->Quoted() ? nlohmann::json(o.field->Get()).dump() : o.field->Get();
    std::string note = std::string(SourceName(o.source));
    if (o.secret && !o.field->Get().empty()) {
      // Never printed; read back, the placeholder is a key no client holds, so nothing opens up.
      value = "\"<redacted>\"";
      note += ", redacted";
    }
    out += "  " + o.name.substr(dot + 1) + ": " + value + "  # " + note + "\n";
  }
  return out;
}

}  // namespace tq::config
