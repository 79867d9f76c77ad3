#include "server/cli/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
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
  // K=V format each, or a preset (code, longdoc, chat, auto: need --kv-profile; uniform:FMT).
  std::vector<std::string> formats = {"f16", "int8", "tq4", "tq3"};
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
  // Each configuration runs with its pages in RAM and, when --kv-cold-dir is given, again with SPARSE pages on
  // disk behind the cold cache; columns in that order.
  const bool cold = !a.model.store.cold_dir.empty();
  std::vector<std::string> columns;
  for (const auto& f : a.formats) {
    columns.push_back(f);
    if (cold) columns.push_back(f + "@cold");
  }
  std::vector<std::vector<double>> tps(columns.size(), std::vector<double>(contexts.size()));
  for (size_t col = 0; col < columns.size(); ++col) {
    const std::string& name = a.formats[cold ? col / 2 : col];
    const bool on_disk = cold && col % 2 == 1;
    engine::KvSpec spec = a.model.kv;
    if (name.rfind("uniform:", 0) == 0 || engine::FindPreset(name).ok()) {
      spec.preset = name;
    } else {
      spec.k_format = spec.v_format = name;
    }
    auto layout = engine::KvLayout::Create((*model)->hparams(), spec);
    if (!layout.ok()) {
      std::fprintf(stderr, "tqserve bench decode: %s\n", layout.status().ToString().c_str());
      return kExitUsage;
    }
    engine::KvStoreOptions tiers = a.model.store;
    if (!on_disk) tiers.cold_dir.clear();
    auto store = engine::KvPageStore::Open(tiers, (*layout)->class_page_bytes());
    if (!store.ok()) {
      std::fprintf(stderr, "tqserve bench decode: %s\n", store.status().ToString().c_str());
      return kExitUsage;
    }
    engine::SequenceKv kv(*layout, contexts.back() + a.steps + 1, store->get());
    std::mt19937 rng(1234);  // the same tokens for every configuration
    for (size_t c = 0; c < contexts.size(); ++c) {
      if (Status s = Prefill(**model, kv, contexts[c], rng, pool); !s.ok()) {
        std::fprintf(stderr, "tqserve bench decode: %s\n", s.ToString().c_str());
        return kExitFailure;
      }
      (*store)->FlushCold();  // the prefill's writes are on disk before the clock starts
      const engine::ColdCacheStats before = (*store)->Stats().cold_cache;
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
      tps[col][c] = a.steps / std::chrono::duration<double>(Clock::now() - t0).count();
      const engine::KvStoreStats st = (*store)->Stats();
      const engine::ColdCacheStats& cc = st.cold_cache;
      // The decoded tokens stay; the next context continues from here (its prefill tops up the difference).
      std::fprintf(stderr, "%s at %d: %.1f tok/s\n", columns[col].c_str(), contexts[c], tps[col][c]);
      rows.push_back({{"config", columns[col]}, {"format", name}, {"cold", on_disk}, {"ctx", contexts[c]},
                      {"tokens_per_second", tps[col][c]}, {"kv_bits_per_value", (*layout)->bits_per_value()},
                      {"kv_bytes", kv.bytes()},
                      {"bytes_by_tier", {{"hot", st.tiers[0].bytes}, {"warm", st.tiers[1].bytes},
                                         {"cold", st.tiers[2].bytes}}},
                      {"cold_cache_hits", cc.prefetch_hits - before.prefetch_hits},
                      {"cold_cache_late", cc.prefetch_late - before.prefetch_late},
                      {"cold_cache_misses", cc.misses - before.misses},
                      {"cold_stall_seconds", static_cast<double>(cc.stall_ns - before.stall_ns) * 1e-9}});
    }
  }
  for (auto& r : rows) {
    const size_t c = std::find(contexts.begin(), contexts.end(), r["ctx"].get<int>()) - contexts.begin();
    r["ratio_vs_first"] = r["tokens_per_second"].get<double>() / tps[0][c];
  }
  if (cold) {  // each cold column against the same configuration in RAM
    for (auto& r : rows) {
      if (!r["cold"].get<bool>()) continue;
      const size_t c = std::find(contexts.begin(), contexts.end(), r["ctx"].get<int>()) - contexts.begin();
      const size_t f = std::find(a.formats.begin(), a.formats.end(), r["format"].get<std::string>()) - a.formats.begin();
      r["ratio_vs_ram"] = r["tokens_per_second"].get<double>() / tps[2 * f][c];
    }
  }
  if (a.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return kExitOk;
  }
  std::printf("decode tok/s (%d steps after filling the context, %d threads; ratio to %s%s)\n%-8s", a.steps,
              pool.size(), a.formats[0].c_str(), cold ? "; @cold: ratio to the same configuration in RAM" : "",
              "ctx");
  for (const auto& f : columns) std::printf(" %18s", f.c_str());
  for (size_t c = 0; c < contexts.size(); ++c) {
    std::printf("\n%-8d", contexts[c]);
    for (size_t col = 0; col < columns.size(); ++col) {
      const bool on_disk = cold && col % 2 == 1;
      const double ref = on_disk ? tps[col - 1][c] : tps[0][c];
      std::printf(" %10.1f (%4.2fx)", tps[col][c], tps[col][c] / ref);
    }
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
  app->add_option("--formats", args->formats,
                  "KV formats (K = V) or presets (code, longdoc, chat, auto with --kv-profile; uniform:FMT); the "
                  "first is the reference. With --kv-cold-dir each runs in RAM and with its SPARSE pages on disk")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--steps", args->steps, "Decode steps timed per context")->check(CLI::Range(1, 100000));
  app->add_flag("--json", args->json, "Print a JSON list");
  *subcommand = app;
  return [args] { return Run(*args); };
}

}  // namespace tq::cli
