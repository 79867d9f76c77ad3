#include "server/cli/model_args.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/loader.h"

namespace tq::cli {

void AddModelFlags(CLI::App* app, ModelArgs* a) {
  app->add_option("--model,-m", a->model, "GGUF model (default: SmolLM2-135M-Instruct.Q4_1.gguf in model.dir)");
  app->add_option("--threads,-t", a->threads, "Threads (0 = one per core)")->check(CLI::Range(0, 1024));
  app->add_option("--kv-k", a->kv.k_format, "K format: auto, f32 or a `tqserve formats` name");
  app->add_option("--kv-v", a->kv.v_format, "V format: auto, f32 or a `tqserve formats` name");
  app->add_option("--kv-boundary-layers", a->kv.boundary_layers,
                  "Keep the first and last N layers at f16")->check(CLI::Range(0, 512));
  app->add_option("--kv-preset", a->kv.preset,
                  "Precision classes per head: default, code, longdoc, chat, auto, HOT:ACTIVE:SPARSE, uniform:FMT");
  app->add_option("--kv-profile", a->kv.profile_path, "Head profile JSON from `tqserve calibrate`");
  app->add_option("--kv-hot", a->kv.hot_format, "Format of HOT heads (FMT or KFMT/VFMT; default f16)");
  app->add_option("--kv-active", a->kv.active_format, "Format of ACTIVE heads (default auto: the preset's)");
  app->add_option("--kv-sparse", a->kv.sparse_format, "Format of SPARSE heads (default auto: the preset's)");
  engine::KvStoreOptions& st = a->store;
  app->add_option("--kv-hot-bytes", st.hot_bytes, "Hot tier budget (e.g. 2GiB; 0 = none)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--kv-warm-bytes", st.warm_bytes, "Warm tier budget (0 = none)")->transform(CLI::AsSizeValue(false));
  app->add_option("--kv-cold-dir", st.cold_dir, "Cold tier directory (SPARSE heads' pages on disk); empty = none");
  app->add_option("--kv-cold-bytes", st.cold_bytes, "Cold tier budget on disk")->transform(CLI::AsSizeValue(false));
  app->add_option("--kv-cold-cache-bytes", st.cold_cache_bytes, "RAM cache of cold pages")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--kv-io-backend", st.io_backend, "Cold tier I/O: auto, io_uring or pread")
      ->check(CLI::IsMember({"auto", "io_uring", "pread"}));
  app->add_option("--kv-io-depth", st.io_depth, "Cold reads and writes in flight")->check(CLI::Range(1, 4096));
}

StatusOr<std::string> ResolveModelPath(const ModelArgs& a) {
  std::string path = a.model;
  if (path.empty()) {
    config::Loader loader;
    TQ_RETURN_IF_ERROR(loader.Load({.env = config::ProcessEnvironment()}));
    path = loader.config().model.dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return NotFoundError("model file " + path + " does not exist" +
                         (a.model.empty() ? " (fetch the default model with scripts/fetch-model.sh)" : ""));
  }
  return path;
}

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
