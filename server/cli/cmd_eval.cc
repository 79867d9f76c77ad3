// `tqserve eval ppl|kld`: perplexity of a KV configuration on a text file by llama.cpp's method, and its KL
// divergence against a reference configuration on the same chunks.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/eval/perplexity.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace tq::cli {
namespace {

struct EvalArgs {
  ModelArgs model;
  std::string file;
  int ctx = 512;
  int chunks = 0;
  bool json = false;
  std::string ref_k = "f16", ref_v = "f16";
};

nlohmann::json PplJson(const engine::PplResult& r) {
  return {{"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"tokens", r.tokens}, {"chunks", r.chunks},
          {"kv_bits_per_value", r.kv_bits_per_value}, {"kv_bytes", r.kv_bytes}, {"seconds", r.seconds},
          {"tokens_per_second", r.tokens_per_second}};
}

int Run(const EvalArgs& a, bool kld) {
  auto path = ResolveModelPath(a.model);
  if (!path.ok()) {
    std::fprintf(stderr, "tqserve eval: %s\n", path.status().ToString().c_str());
    return kExitFailure;
  }
  std::ifstream in(a.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tqserve eval: cannot read %s\n", a.file.c_str());
    return kExitFailure;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  auto model = engine::Model::Open(*path);
  if (!model.ok()) {
    std::fprintf(stderr, "tqserve eval: %s\n", model.status().ToString().c_str());
    return kExitFailure;
  }
  auto tok = engine::Tokenizer::FromGguf((*model)->gguf());
  if (!tok.ok()) {
    std::fprintf(stderr, "tqserve eval: %s\n", tok.status().ToString().c_str());
    return kExitFailure;
  }
  engine::ThreadPool pool(a.model.threads);
  engine::EvalOptions o;
  o.ctx = a.ctx;
  o.chunks = a.chunks;
  o.kv = a.model.kv;
  o.ref_kv.k_format = a.ref_k;
  o.ref_kv.v_format = a.ref_v;
  auto progress = [](int done, int total, double ppl) {
    std::fprintf(stderr, "\r[%d/%d] ppl %.4f", done, total, ppl);
    if (done == total) std::fprintf(stderr, "\n");
  };
  nlohmann::json out{{"model", *path}, {"file", a.file}, {"ctx", a.ctx}, {"threads", pool.size()},
                     {"kv_k", a.model.kv.k_format}, {"kv_v", a.model.kv.v_format},
                     {"kv_boundary_layers", a.model.kv.boundary_layers}};
  if (!kld) {
    auto r = engine::Perplexity(**model, **tok, buf.str(), o, pool, progress);
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
  auto r = engine::KlDivergence(**model, **tok, buf.str(), o, pool, progress);
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

}  // namespace

Command AddEvalCommand(CLI::App& parent) {
  static EvalArgs ppl_args, kld_args;
  CLI::App* app = parent.add_subcommand("eval", "Evaluate quality: perplexity, KL divergence");
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
  kld->add_option("--ref-kv-k", kld_args.ref_k, "Reference K format (default f16)");
  kld->add_option("--ref-kv-v", kld_args.ref_v, "Reference V format (default f16)");
  return {app, [ppl, kld] { return ppl->parsed() ? Run(ppl_args, false) : Run(kld_args, true); }};
}

}  // namespace tq::cli
