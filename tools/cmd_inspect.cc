// `tqserve inspect --model M [--json] [--metadata]`: what a GGUF file holds: architecture, hyperparameters,
// tensor types and bytes, tokenizer, chat template. A file that does not parse exits 1 with the Status
// message.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/model/gguf.h"
#include "engine/model/model_info.h"
#include "tools/commands.h"

namespace tq::cli {
namespace {

struct InspectFlags {
  std::string model;
  bool json = false;
  bool metadata = false;
};

std::string Mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

template <typename T>
std::string Opt(const std::optional<T>& v) {
  if (!v) return "-";
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *v);
    return buf;
  } else {
    return std::to_string(*v);
  }
}

template <typename T>
nlohmann::json OptJson(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json ToJson(const engine::ModelInfo& m, const engine::GgufFile& g, bool metadata) {
  nlohmann::json j;
  j["path"] = m.path;
  j["file_bytes"] = m.file_bytes;
  j["gguf_version"] = m.gguf_version;
  j["alignment"] = m.alignment;
  j["architecture"] = m.architecture;
  j["name"] = m.name;
  j["file_type"] = m.file_type;
  j["hparams"] = {{"layers", OptJson(m.layers)},
                  {"embedding", OptJson(m.embedding)},
                  {"feed_forward", OptJson(m.feed_forward)},
                  {"heads", OptJson(m.heads)},
                  {"kv_heads", OptJson(m.kv_heads)},
                  {"head_dim", OptJson(m.head_dim)},
                  {"context", OptJson(m.context)},
                  {"vocab", OptJson(m.vocab)},
                  {"rms_eps", OptJson(m.rms_eps)},
                  {"sliding_window", OptJson(m.sliding_window)},
                  {"rope",
                   {{"dims", OptJson(m.rope_dims)},
                    {"freq_base", OptJson(m.rope_freq_base)},
                    {"scaling", m.rope_scaling},
                    {"scale", OptJson(m.rope_scale)}}}};
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, s] : m.tensor_types) {
    types[name] = {{"count", s.count}, {"bytes", s.bytes}, {"supported", s.supported}};
  }
  j["tensors"] = {{"count", m.tensor_count},
                  {"bytes", m.tensor_bytes},
                  {"parameters", m.parameters},
                  {"by_type", types},
                  {"unsupported", m.unsupported_tensors}};
  j["tokenizer"] = {{"model", m.tokenizer_model},
                    {"pre", m.tokenizer_pre},
                    {"tokens", m.tokenizer_tokens},
                    {"merges", m.tokenizer_merges},
                    {"bos", m.bos},
                    {"bos_text", m.bos_text},
                    {"eos", m.eos},
                    {"eos_text", m.eos_text},
                    {"add_bos", m.add_bos},
                    {"error", m.tokenizer_error}};
  j["chat_template"] = {{"present", m.has_chat_template}, {"bytes", m.chat_template_bytes}};
  if (metadata) {
    nlohmann::json kv = nlohmann::json::object();
    for (const engine::GgufKv& e : g.metadata()) kv[std::string(e.key)] = engine::GgufValueToString(e.value);
    j["metadata"] = kv;
  }
  return j;
}

void PrintText(const engine::ModelInfo& m, const engine::GgufFile& g, bool metadata) {
  std::printf("file          %s (%s, GGUF v%u, alignment %u, %zu metadata keys)\n", m.path.c_str(),
              Mib(m.file_bytes).c_str(), m.gguf_version, m.alignment, m.metadata_count);
  std::printf("architecture  %s%s%s%s\n", m.architecture.empty() ? "-" : m.architecture.c_str(),
              m.name.empty() ? "" : ("  \"" + m.name + "\"").c_str(),
              m.file_type.empty() ? "" : "  file type ", m.file_type.c_str());
  std::printf("layers %s  embedding %s  ffn %s  heads %s  kv_heads %s  head_dim %s\n", Opt(m.layers).c_str(),
              Opt(m.embedding).c_str(), Opt(m.feed_forward).c_str(), Opt(m.heads).c_str(),
              Opt(m.kv_heads).c_str(), Opt(m.head_dim).c_str());
  std::printf("context %s  vocab %s  rms_eps %s  rope dims %s  freq_base %s  scaling %s%s%s\n",
              Opt(m.context).c_str(), Opt(m.vocab).c_str(), Opt(m.rms_eps).c_str(), Opt(m.rope_dims).c_str(),
              Opt(m.rope_freq_base).c_str(), m.rope_scaling.empty() ? "none" : m.rope_scaling.c_str(),
              m.sliding_window ? "  sliding_window " : "",
              m.sliding_window ? Opt(m.sliding_window).c_str() : "");
  std::printf("tensors       %lld, %s, %.1fM parameters\n", static_cast<long long>(m.tensor_count),
              Mib(m.tensor_bytes).c_str(), static_cast<double>(m.parameters) / 1e6);
  for (const auto& [name, s] : m.tensor_types) {
    std::printf("  %-8s %5lld tensors  %12s%s\n", name.c_str(), static_cast<long long>(s.count),
                Mib(s.bytes).c_str(), s.supported ? "" : "  (not supported by tqserve)");
  }
  for (const std::string& t : m.unsupported_tensors) std::printf("  unsupported: %s\n", t.c_str());
  if (m.tokenizer_model.empty()) {
    std::printf("tokenizer     none\n");
  } else {
    std::printf("tokenizer     %s, pre-tokenizer %s, %lld tokens, %lld merges\n", m.tokenizer_model.c_str(),
                m.tokenizer_pre.empty() ? "-" : m.tokenizer_pre.c_str(),
                static_cast<long long>(m.tokenizer_tokens), static_cast<long long>(m.tokenizer_merges));
    if (!m.tokenizer_error.empty()) {
      std::printf("              does not load: %s\n", m.tokenizer_error.c_str());
    } else {
      std::printf("              bos %d %s  eos %d %s  add_bos %s\n", m.bos, m.bos_text.c_str(), m.eos,
                  m.eos_text.c_str(), m.add_bos ? "true" : "false");
    }
  }
  if (m.has_chat_template) {
    std::printf("chat template present (%llu bytes)\n",
                static_cast<unsigned long long>(m.chat_template_bytes));
  } else {
    std::printf("chat template none\n");
  }
  if (metadata) {
    std::printf("metadata\n");
    for (const engine::GgufKv& e : g.metadata()) {
      std::printf("  %-44s %s\n", std::string(e.key).c_str(), engine::GgufValueToString(e.value).c_str());
    }
  }
}

int RunInspect(const InspectFlags& flags) {
  StatusOr<std::unique_ptr<engine::GgufFile>> file = engine::GgufFile::Open(flags.model);
  if (!file.ok()) {
    std::fprintf(stderr, "tqserve inspect: %s\n", file.status().ToString().c_str());
    return kExitFailure;
  }
  StatusOr<engine::ModelInfo> info = engine::InspectModel(**file, flags.model);
  if (!info.ok()) {
    std::fprintf(stderr, "tqserve inspect: %s: %s\n", flags.model.c_str(), info.status().ToString().c_str());
    return kExitFailure;
  }
  if (flags.json) {
    std::printf("%s\n", ToJson(*info, **file, flags.metadata).dump(2).c_str());
  } else {
    PrintText(*info, **file, flags.metadata);
  }
  return kExitOk;
}

}  // namespace

Command AddInspectCommand(CLI::App& parent) {
  auto flags = std::make_shared<InspectFlags>();
  CLI::App* app = parent.add_subcommand("inspect", "Show what a GGUF model file holds");
  app->add_option("--model,-m", flags->model, "Path to a GGUF file")->required();
  app->add_flag("--json", flags->json, "Print one JSON object");
  app->add_flag("--metadata", flags->metadata, "Also list every metadata key and value");
  return {app, [flags] { return RunInspect(*flags); }};
}

}  // namespace tq::cli
