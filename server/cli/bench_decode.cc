#include "server/cli/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/llm/model.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace tq::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct DecodeArgs {
  ModelArgs model;
  std::vector<int> contexts = {512, 2048, 4096};
  std::vector<std::string> formats = {"f16", "int8", "tq4", "tq3"};  // K=V format each
  int steps = 16;
  bool json = false;
};

// Fills `kv` from its current length to `target` positions with random tokens, 256 per forward pass.
Status Prefill(const engine::Model& model, engine::SequenceKv& kv, int target, std::mt19937& rng,
               engine::ThreadPool& pool) {
  std::uniform_int_distribution<int32_t> token(1, model.hparams().vocab_size - 1);
  std::vector<float> logits;
  while (kv.n_tokens() < target) {
    std::vector<engine::BatchToken> batch;
    for (int p = kv.n_tokens(); p < std::min(target, kv.n_tokens() + 256); ++p) {
      batch.push_back({token(rng), p, &kv, false});
    }
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DecodeStep> MeasureDecodeStep(const ModelArgs& args, const std::string& kv_format, int ctx,
                                       int steps) {
  TQ_ASSIGN_OR_RETURN(std::string path, ResolveModelPath(args));
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Open(path));
  engine::ThreadPool pool(args.threads);
  engine::KvSpec spec = args.kv;
  spec.k_format = spec.v_format = kv_format;
  TQ_ASSIGN_OR_RETURN(auto layout, engine::KvLayout::Create(model->hparams(), spec));
  engine::SequenceKv kv(layout, ctx + steps + 1);
  std::mt19937 rng(1234);
  TQ_RETURN_IF_ERROR(Prefill(*model, kv, ctx, rng, pool));
  std::vector<float> logits;
  int32_t next = 1;
  DecodeStep result;
  result.seconds = std::numeric_limits<double>::infinity();
  for (int step = 0; step < steps; ++step) {
    const auto t0 = Clock::now();
    engine::BatchToken t{next, kv.n_tokens(), &kv, true};
    TQ_RETURN_IF_ERROR(model->Forward({&t, 1}, pool, &logits));
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    result.seconds = std::min(result.seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  result.threads = pool.size();
  result.n_layers = model->hparams().n_layers;
  result.n_kv_heads = model->hparams().n_kv_heads;
  result.head_dim = model->hparams().head_dim;
  return result;
}

namespace {

int Run(const DecodeArgs& a) {
  auto path = ResolveModelPath(a.model);
  if (!path.ok()) {
    std::fprintf(stderr, "tqserve bench decode: %s\n", path.status().ToString().c_str());
    return kExitFailure;
  }
  auto model = engine::Model::Open(*path);
  if (!model.ok()) {
    std::fprintf(stderr, "tqserve bench decode: %s\n", model.status().ToString().c_str());
    return kExitFailure;
  }
  std::vector<int> contexts = a.contexts;
  std::sort(contexts.begin(), contexts.end());
  engine::ThreadPool pool(a.model.threads);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::vector<double>> tps(a.formats.size(), std::vector<double>(contexts.size()));
  for (size_t f = 0; f < a.formats.size(); ++f) {
    engine::KvSpec spec = a.model.kv;
    spec.k_format = spec.v_format = a.formats[f];
    auto layout = engine::KvLayout::Create((*model)->hparams(), spec);
    if (!layout.ok()) {
      std::fprintf(stderr, "tqserve bench decode: %s\n", layout.status().ToString().c_str());
      return kExitUsage;
    }
    engine::SequenceKv kv(*layout, contexts.back() + a.steps + 1);
    std::mt19937 rng(1234);  // the same tokens for every format
    for (size_t c = 0; c < contexts.size(); ++c) {
      if (Status s = Prefill(**model, kv, contexts[c], rng, pool); !s.ok()) {
        std::fprintf(stderr, "tqserve bench decode: %s\n", s.ToString().c_str());
        return kExitFailure;
      }
      std::vector<float> logits;
      int32_t next = 1;
      const auto t0 = Clock::now();
      for (int step = 0; step < a.steps; ++step) {
        engine::BatchToken t{next, kv.n_tokens(), &kv, true};
        if (Status s = (*model)->Forward({&t, 1}, pool, &logits); !s.ok()) {
          std::fprintf(stderr, "tqserve bench decode: %s\n", s.ToString().c_str());
          return kExitFailure;
        }
        next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      tps[f][c] = a.steps / std::chrono::duration<double>(Clock::now() - t0).count();
      // The decoded tokens stay; the next context continues from here (its prefill tops up the difference).
      std::fprintf(stderr, "%s at %d: %.1f tok/s\n", a.formats[f].c_str(), contexts[c], tps[f][c]);
      rows.push_back({{"format", a.formats[f]}, {"ctx", contexts[c]}, {"tokens_per_second", tps[f][c]},
                      {"kv_bits_per_value", (*layout)->bits_per_value()}, {"kv_bytes", kv.bytes()}});
    }
  }
  for (auto& r : rows) {
    const size_t c = std::find(contexts.begin(), contexts.end(), r["ctx"].get<int>()) - contexts.begin();
    r["ratio_vs_first"] = r["tokens_per_second"].get<double>() / tps[0][c];
  }
  if (a.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return kExitOk;
  }
  std::printf("decode tok/s (%d steps after filling the context, %d threads; ratio to %s)\n%-8s", a.steps,
              pool.size(), a.formats[0].c_str(), "ctx");
  for (const auto& f : a.formats) std::printf(" %16s", f.c_str());
  for (size_t c = 0; c < contexts.size(); ++c) {
    std::printf("\n%-8d", contexts[c]);
    for (size_t f = 0; f < a.formats.size(); ++f) std::printf(" %8.1f (%4.2fx)", tps[f][c], tps[f][c] / tps[0][c]);
  }
  std::printf("\n");
  return kExitOk;
}

}  // namespace

std::function<int()> AddBenchDecode(CLI::App* bench, CLI::App** subcommand) {
  auto args = std::make_shared<DecodeArgs>();
  CLI::App* app = bench->add_subcommand("decode", "Model decode speed against context length per KV format");
  AddModelFlags(app, &args->model);
  app->add_option("--ctx", args->contexts, "Context lengths")->delimiter(',')->capture_default_str();
  app->add_option("--formats", args->formats, "KV formats (K = V), the first is the reference")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--steps", args->steps, "Decode steps timed per context")->check(CLI::Range(1, 100000));
  app->add_flag("--json", args->json, "Print a JSON list");
  *subcommand = app;
  return [args] { return Run(*args); };
}

}  // namespace tq::cli
