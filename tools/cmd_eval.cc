// `tqserve eval ppl|kld`: perplexity of a KV configuration on a text file by llama.cpp's method, and its KL
// divergence against a reference configuration on the same chunks.
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/eval/niah.h"
#include "engine/eval/perplexity.h"
#include "engine/kv/kv_cache.h"
#include "tools/commands.h"
#include "tools/model_args.h"
#include "common/progress.h"

namespace tq::cli {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string file;
  int ctx = 512;
  int chunks = 0;
  bool json = false;
  std::string ref_k = "f16", ref_v = "f16";
  std::string dump_rows;  // kld: file of every coded page's rows, rotated (DumpRowsTo)
};

// Writes every row a coded KV format encodes to `path`, as records of int32 layer, kv head, side (0 = K, 1 = V),
// head_dim, then f32 y[head_dim]: the row in the codec's rotated domain (KvCodec::ToRotated), not normalized.
// Rows of a page come in position order, a page at a time per (layer, head, side). Returns a closer that removes
// the observer and closes the file (call it after the last sequence is gone).
StatusOr<std::function<Status()>> DumpRowsTo(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return InvalidArgumentError("cannot write --dump-rows file " + path);
  auto mu = std::make_shared<std::mutex>();
  engine::SetPageRowsObserver([f, mu](int layer, int head, int kv, const kernels::KvCodec& codec, const float* rows,
                                      int n) {
    const int d = codec.head_dim();
    std::vector<float> y(static_cast<size_t>(d));
    const int32_t header[4] = {layer, head, kv, d};
    std::lock_guard<std::mutex> lock(*mu);
    for (int t = 0; t < n; ++t) {
      codec.ToRotated(rows + static_cast<size_t>(t) * d, y.data());
      std::fwrite(header, sizeof header, 1, f);
      std::fwrite(y.data(), sizeof(float), y.size(), f);
    }
  });
  return std::function<Status()>([f, path] {
    engine::SetPageRowsObserver(nullptr);
    const bool failed = std::ferror(f) != 0;
    if (std::fclose(f) != 0 || failed) return InternalError("writing --dump-rows file " + path + " failed");
    return Status::Ok();
  });
}

nlohmann::json PplJson(const engine::PplResult& r) {
  return {{"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"tokens", r.tokens}, {"chunks", r.chunks},
          {"kv_bits_per_value", r.kv_bits_per_value}, {"kv_bytes", r.kv_bytes}, {"seconds", r.seconds},
          {"tokens_per_second", r.tokens_per_second},
          {"bits_per_value", r.kv_bits_per_value}, {"page_bits_per_value", r.kv_page_bits_per_value},
          {"bytes_by_tier", {{"hot", r.bytes_by_tier[0]}, {"warm", r.bytes_by_tier[1]}, {"cold", r.bytes_by_tier[2]}}},
          {"heads_by_class",
           {{"hot", r.heads_by_class[0]}, {"active", r.heads_by_class[1]}, {"sparse", r.heads_by_class[2]}}}};
}

int Run(const EvalArgs& a, bool kld) {
  auto in = LoadModelAndText(a.model, a.file);
  if (!in.ok()) {
    std::fprintf(stderr, "tqserve eval: %s\n", in.status().ToString().c_str());
    return kExitFailure;
  }
  const std::string* path = &in->model_path;
  const std::string& text = in->text;
  engine::Model* const model = in->model.get();
  engine::Tokenizer* const tok = in->tokenizer.get();
  engine::ThreadPool pool(a.model.threads);
  engine::EvalOptions o;
  o.ctx = a.ctx;
  o.chunks = a.chunks;
  o.kv = a.model.kv;
  o.store = a.model.store;
  o.ref_kv.k_format = a.ref_k;
  o.ref_kv.v_format = a.ref_v;
  ProgressLine line(kld ? "kld: chunk" : "ppl: chunk");
  auto progress = [&line](int done, int total, double ppl) {
    char detail[32];
    std::snprintf(detail, sizeof detail, "ppl %.4f", ppl);
    line.Update(done, total, detail);
  };
  nlohmann::json out{{"model", *path}, {"file", a.file}, {"ctx", a.ctx}, {"threads", pool.size()},
                     {"kv_k", a.model.kv.k_format}, {"kv_v", a.model.kv.v_format},
                     {"kv_boundary_layers", a.model.kv.boundary_layers}, {"kv_preset", a.model.kv.preset}};
  if (!kld) {
    auto r = engine::Perplexity(*model, *tok, text, o, pool, progress);
    if (!r.ok()) {
      std::fprintf(stderr, "tqserve eval ppl: %s\n", r.status().ToString().c_str());
      return kExitFailure;
    }
    out.update(PplJson(*r));
    out["peak_rss_bytes"] = PeakRssBytes();
    if (a.json) {
      std::printf("%s\n", out.dump(1).c_str());
    } else {
      std::printf("ppl %.4f +/- %.4f over %lld tokens (%d chunks of %d), KV %.2f bits per value, %.1f tok/s\n",
                  r->ppl, r->ppl_stderr, static_cast<long long>(r->tokens), r->chunks, a.ctx, r->kv_bits_per_value,
                  r->tokens_per_second);
    }
    return kExitOk;
  }
  std::function<Status()> close_dump;
  if (!a.dump_rows.empty()) {
    auto closer = DumpRowsTo(a.dump_rows);
    if (!closer.ok()) {
      std::fprintf(stderr, "tqserve eval kld: %s\n", closer.status().ToString().c_str());
      return kExitFailure;
    }
    close_dump = std::move(*closer);
  }
  auto r = engine::KlDivergence(*model, *tok, text, o, pool, progress);
  if (close_dump) {
    if (Status closed = close_dump(); !closed.ok() && r.ok()) r = closed;
  }
  if (!r.ok()) {
    std::fprintf(stderr, "tqserve eval kld: %s\n", r.status().ToString().c_str());
    return kExitFailure;
  }
  out.update(PplJson(r->test));
  out["ref"] = PplJson(r->ref);
  out["ref_kv_k"] = a.ref_k;
  out["ref_kv_v"] = a.ref_v;
  out["kld_mean"] = r->kld_mean;
  out["kld_median"] = r->kld_median;
  out["kld_p99"] = r->kld_p99;
  out["same_top"] = r->same_top;
  out["delta_ppl_percent"] = r->ref.ppl > 0 ? 100.0 * (r->test.ppl / r->ref.ppl - 1.0) : 0.0;
  out["peak_rss_bytes"] = PeakRssBytes();
  if (a.json) {
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf("ppl %.4f vs %.4f (%+.3f%%), KLD mean %.6f median %.6f p99 %.6f, same top %.2f%%\n", r->test.ppl,
                r->ref.ppl, out["delta_ppl_percent"].get<double>(), r->kld_mean, r->kld_median, r->kld_p99,
                100 * r->same_top);
  }
  return kExitOk;
}

struct NiahArgs {
  ModelArgs model;
  std::string file;
  std::vector<int> lengths = {512, 1024, 2048};
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int trials = 3;
  uint64_t seed = 1;
  std::string style = "auto";  // chat, completion, or auto (chat when the model has a template)
  bool json = false;
};

int RunNiah(const NiahArgs& a) {
  auto in = LoadModelAndText(a.model, a.file);
  if (!in.ok()) {
    std::fprintf(stderr, "tqserve eval niah: %s\n", in.status().ToString().c_str());
    return kExitFailure;
  }
  const std::string* path = &in->model_path;
  engine::Model* const model = in->model.get();
  auto tmpl_text = model->gguf().GetStringOr("tokenizer.chat_template", "");
  if (!tmpl_text.ok()) {
    std::fprintf(stderr, "tqserve eval niah: %s\n", tmpl_text.status().ToString().c_str());
    return kExitFailure;
  }
  // auto: a model without a template (a base model) gets the completion prompt.
  const bool completion = a.style == "completion" || (a.style == "auto" && tmpl_text->empty());
  StatusOr<engine::ChatTemplate> chat = engine::ChatTemplate{};
  if (!completion) chat = engine::DetectChatTemplate(*tmpl_text);
  if (!chat.ok()) {
    std::fprintf(stderr, "tqserve eval niah: %s\n", chat.status().ToString().c_str());
    return kExitFailure;
  }
  engine::ThreadPool pool(a.model.threads);
  engine::NiahOptions o;
  o.lengths = a.lengths;
  o.depths = a.depths;
  o.trials = a.trials;
  o.seed = a.seed;
  o.kv = a.model.kv;
  ProgressLine line("niah: needle");
  o.progress = [&line](int done, int total, int found) {
    line.Update(done, total, "found " + std::to_string(found));
  };
  auto r = engine::NeedleInAHaystack(*model, *in->tokenizer, completion ? nullptr : &*chat, in->text, o, pool);
  if (!r.ok()) {
    std::fprintf(stderr, "tqserve eval niah: %s\n", r.status().ToString().c_str());
    return kExitFailure;
  }
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& c : r->cells) {
    cells.push_back({{"length", c.length}, {"prompt_tokens", c.prompt_tokens}, {"depth", c.depth},
                     {"found", c.found}, {"trials", c.trials}, {"accuracy", double(c.found) / c.trials},
                     {"last_answer", c.last_answer}});
  }
  nlohmann::json out{{"model", *path}, {"kv_k", a.model.kv.k_format}, {"kv_v", a.model.kv.v_format},
                     {"kv_boundary_layers", a.model.kv.boundary_layers}, {"kv_preset", a.model.kv.preset},
                     {"style", completion ? "completion" : "chat"}, {"accuracy", r->accuracy},
                     {"seconds", r->seconds}, {"cells", cells}};
  if (a.json) {
    std::printf("%s\n", out.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::printf("needle accuracy %.1f%% (rows: length, columns: depth)\n%8s", 100 * r->accuracy, "");
  for (double d : a.depths) std::printf(" %6.2f", d);
  for (size_t i = 0; i < r->cells.size(); ++i) {
    if (i % a.depths.size() == 0) std::printf("\n%8d", r->cells[i].length);
    std::printf(" %5.0f%%", 100.0 * r->cells[i].found / r->cells[i].trials);
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace

Command AddEvalCommand(CLI::App& parent) {
  static EvalArgs ppl_args, kld_args;
  CLI::App* app = parent.add_subcommand("eval", "Evaluate quality: perplexity, KL divergence, needle in a haystack");
  app->require_subcommand(1);
  CLI::App* ppl = app->add_subcommand("ppl", "Perplexity on a text file (llama.cpp's method)");
  CLI::App* kld = app->add_subcommand("kld", "KL divergence of a KV configuration against a reference");
  for (auto [sub, args] : {std::pair{ppl, &ppl_args}, std::pair{kld, &kld_args}}) {
    AddModelFlags(sub, &args->model);
    sub->add_option("--file,-f", args->file, "Text file (e.g. wikitext-2-raw/wiki.test.raw)")->required();
    sub->add_option("--ctx,-c", args->ctx, "Tokens per chunk")->check(CLI::Range(4, 1 << 20));
    sub->add_option("--chunks", args->chunks, "Chunks to evaluate (0 = all)")->check(CLI::Range(0, 1 << 24));
    sub->add_flag("--json", args->json, "Print one JSON object");
  }
  static NiahArgs niah_args;
  CLI::App* niah = app->add_subcommand("niah", "Needle-in-a-haystack retrieval accuracy");
  AddModelFlags(niah, &niah_args.model);
  niah->add_option("--file,-f", niah_args.file, "Haystack text file")->required();
  niah->add_option("--lengths", niah_args.lengths, "Prompt lengths in tokens")->delimiter(',');
  niah->add_option("--depths", niah_args.depths, "Needle depths in [0, 1]")->delimiter(',');
  niah->add_option("--trials", niah_args.trials, "Needles per cell")->check(CLI::Range(1, 1000));
  niah->add_option("--seed", niah_args.seed, "Seed of the needles and filler offsets");
  niah->add_option("--style", niah_args.style,
                   "chat (a question in the model's chat template), completion (the text, then a sentence the model "
                   "completes with the number; for base models) or auto (chat where the model has a template)")
      ->check(CLI::IsMember({"auto", "chat", "completion"}));
  niah->add_flag("--json", niah_args.json, "Print one JSON object");
  kld->add_option("--ref-kv-k", kld_args.ref_k, "Reference K format (default f16)");
  kld->add_option("--ref-kv-v", kld_args.ref_v, "Reference V format (default f16)");
  kld->add_option("--dump-rows", kld_args.dump_rows,
                  "Write the rows every coded KV page receives, rotated, to this file (records of int32 layer, head, "
                  "side 0=K 1=V, head_dim, then f32[head_dim]; the reference's too when it is coded); for "
                  "bench/quality/kv_law.py");
  return {app, [ppl, kld, niah] {
            if (niah->parsed()) return RunNiah(niah_args);
            return ppl->parsed() ? Run(ppl_args, false) : Run(kld_args, true);
          }};
}

}  // namespace tq::cli
