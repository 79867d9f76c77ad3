#include "tools/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/llm/model.h"
#include "tools/commands.h"
#include "tools/model_args.h"

namespace tq::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct DecodeArgs {
  ModelArgs model;
  std::vector<int> contexts = {512, 2048, 4096};
  // K=V format each, or a preset (code, longdoc, chat, auto: need --kv-profile; uniform:FMT).
  std::vector<std::string> formats = {"f16", "int8", "tq4", "tq3"};
  int steps = 16;
  int rounds = 3;
  int prompt = 0;  // > 0: also the prompt-processing speed of a PROMPT-token prompt into an empty sequence
  bool cold_only = false;  // with a cold dir: only the configurations with their SPARSE pages on disk
  std::string fill = "prefill";  // how the context is filled: prefill (the forward pass) or random (K/V rows)
  bool json = false;
};

// One configuration under test: its layout, its tiers and its sequence.
struct Column {
  std::string name;
  std::string format;
  bool on_disk = false;
  std::shared_ptr<const engine::KvLayout> layout;
  std::unique_ptr<engine::KvPageStore> store;
  std::unique_ptr<engine::SequenceKv> kv;
  int32_t next = 1;  // the token its next decode step feeds
  std::vector<double> rounds;  // tok/s of each round at the current context
  double seconds = 0;  // timed decode steps at the current context, all rounds
};

// The median of a non-empty list (the mean of the middle two for an even count), as llama-bench's samples allow.
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Appends the tokens [kv.n_tokens(), target) of `tokens` to the sequence, 256 per forward pass.
Status Prefill(const engine::Model& model, engine::SequenceKv& kv, const std::vector<int32_t>& tokens, int target,
               engine::ThreadPool& pool) {
  std::vector<float> logits;
  while (kv.n_tokens() < target) {
    std::vector<engine::BatchToken> batch;
    for (int p = kv.n_tokens(); p < std::min(target, kv.n_tokens() + 256); ++p) {
      batch.push_back({tokens[p], p, &kv, false});
    }
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
  }
  return Status::Ok();
}

// Fills positions [kv.n_tokens(), target) of every layer with seeded random K and V rows, in passes of 256 positions
// as a prefill would store them (encoded pages, FinishLayerPass per layer), without the forward pass: deep
// contexts (100k+ tokens of an 8B model) in a minute instead of hours. Decode after it costs what it costs after a
// prefill (the kernels' work does not depend on the values).
void FillRandom(const engine::HParams& hp, engine::SequenceKv& kv, int target, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t width = int64_t{hp.n_kv_heads} * hp.head_dim;
  // A pool of N(0, 1) rows, drawn from at random: generating every value of a 128k-token context would take
  // minutes by itself.
  constexpr int kPool = 4096;
  std::vector<float> pool(kPool * width);
  for (float& x : pool) x = normal(rng);
  while (kv.n_tokens() < target) {
    const int begin = kv.n_tokens(), end = std::min(target, begin + 256);
    for (int l = 0; l < hp.n_layers; ++l) {
      for (int p = begin; p < end; ++p) {
        const float* k = pool.data() + (rng() % kPool) * width;
        const float* v = pool.data() + (rng() % kPool) * width;
        if (Status s = kv.Append(l, p, k, v); !s.ok()) {
          std::fprintf(stderr, "tqserve bench decode: %s\n", s.ToString().c_str());
          std::exit(kExitFailure);
        }
      }
      kv.FinishLayerPass(l);
    }
    kv.set_n_tokens(end);
    if (!kv.fault().ok()) {  // a page the tiers could not take
      std::fprintf(stderr, "tqserve bench decode: %d tokens do not fit the KV tiers' budgets (--kv-hot-bytes, "
                   "--kv-warm-bytes, --kv-cold-dir): %s\n", end, kv.fault().ToString().c_str());
      std::exit(kExitFailure);
    }
  }
}

// Prompt processing as llama-bench's pp test: `rounds` times, a fresh sequence takes `prompt` tokens in one
// forward pass (logits of the last only); tok/s of each round.
StatusOr<std::vector<double>> MeasurePrompt(const engine::Model& model, const Column& c,
                                            const std::vector<int32_t>& tokens, int prompt, int rounds,
                                            engine::ThreadPool& pool) {
  std::vector<double> out;
  std::vector<float> logits;
  for (int r = 0; r < rounds; ++r) {
    engine::SequenceKv kv(c.layout, prompt + 1, c.store.get());
    std::vector<engine::BatchToken> batch;
    for (int p = 0; p < prompt; ++p) batch.push_back({tokens[p], p, &kv, p == prompt - 1});
    const auto t0 = Clock::now();
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
    out.push_back(prompt / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return out;
}

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "tqserve bench decode: %s\n", s.ToString().c_str());
  return code;
}

int Run(const DecodeArgs& a) {
  auto path = ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status(), kExitFailure);
  auto model = engine::Model::Open(*path);
  if (!model.ok()) return Fail(model.status(), kExitFailure);
  std::vector<int> contexts = a.contexts;
  std::sort(contexts.begin(), contexts.end());
  engine::ThreadPool pool(a.model.threads);
  const int capacity =
      std::max(contexts.back() + a.rounds * a.steps * static_cast<int>(contexts.size()), a.prompt) + 1;
  // The same random tokens for every configuration.
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(1, (*model)->hparams().vocab_size - 1);
  std::vector<int32_t> tokens(capacity);
  for (int32_t& t : tokens) t = token(rng);

  // Each configuration runs with its pages in RAM and, when --kv-cold-dir is given, again with its SPARSE pages on
  // disk behind the cold cache (a directory of its own under --kv-cold-dir); all live at once, and the decode
  // rounds alternate between them so that machine noise hits every column alike.
  const bool cold = !a.model.store.cold_dir.empty();
  if (a.cold_only && !cold) return Fail(InvalidArgumentError("--cold-only needs --kv-cold-dir"), kExitUsage);
  std::vector<Column> cols;
  for (const std::string& f : a.formats) {
    for (int disk = a.cold_only ? 1 : 0; disk < (cold ? 2 : 1); ++disk) {
      Column c;
      c.format = f;
      c.on_disk = disk == 1;
      c.name = c.on_disk ? f + "@cold" : f;
      engine::KvSpec spec = a.model.kv;
      if (f.rfind("uniform:", 0) == 0 || engine::FindPreset(f).ok()) {
        spec.preset = f;
      } else {
        spec.k_format = spec.v_format = f;
      }
      auto layout = engine::KvLayout::Create((*model)->hparams(), spec);
      if (!layout.ok()) return Fail(layout.status(), kExitUsage);
      c.layout = *layout;
      engine::KvStoreOptions tiers = a.model.store;
      tiers.cold_dir = c.on_disk ? a.model.store.cold_dir + "/" + std::to_string(cols.size()) : "";
      auto store = engine::KvPageStore::Open(tiers, c.layout->class_page_bytes());
      if (!store.ok()) return Fail(store.status(), kExitUsage);
      c.store = std::move(*store);
      c.kv = std::make_unique<engine::SequenceKv>(c.layout, capacity, c.store.get());
      cols.push_back(std::move(c));
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  if (a.prompt > 0) {
    for (Column& c : cols) {
      auto rounds = MeasurePrompt(**model, c, tokens, a.prompt, a.rounds, pool);
      if (!rounds.ok()) return Fail(rounds.status(), kExitFailure);
      const double median = Median(*rounds);
      std::fprintf(stderr, "%s: prompt of %d at %.1f tok/s\n", c.name.c_str(), a.prompt, median);
      rows.push_back({{"config", c.name},
                      {"format", c.format},
                      {"cold", c.on_disk},
                      {"phase", "prompt"},
                      {"prompt", a.prompt},
                      {"tokens_per_second", median},
                      {"tokens_per_second_min", *std::min_element(rounds->begin(), rounds->end())},
                      {"tokens_per_second_max", *std::max_element(rounds->begin(), rounds->end())},
                      {"rounds_tokens_per_second", *rounds}});
    }
  }
  std::vector<std::vector<double>> tps(cols.size(), std::vector<double>(contexts.size()));
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    std::vector<engine::ColdCacheStats> before(cols.size());
    std::vector<uint64_t> before_read(cols.size()), before_held(cols.size());
    for (size_t k = 0; k < cols.size(); ++k) {
      Column& c = cols[k];
      if (a.fill == "random") {
        FillRandom((*model)->hparams(), *c.kv, contexts[ci], 1234 + static_cast<uint32_t>(k));
      } else if (Status s = Prefill(**model, *c.kv, tokens, contexts[ci], pool); !s.ok()) {
        return Fail(s, kExitFailure);
      }
      c.store->FlushCold();  // the prefill's writes are on disk before the clock starts
      const engine::KvStoreStats st = c.store->Stats();
      before[k] = st.cold_cache;
      before_read[k] = st.tiers[2].io.read_bytes;
      before_held[k] = st.cold_held;
      c.rounds.clear();
      c.seconds = 0;
    }
    std::vector<float> logits;
    for (int r = 0; r < a.rounds; ++r) {
      for (Column& c : cols) {
        const auto t0 = Clock::now();
        for (int step = 0; step < a.steps; ++step) {
          engine::BatchToken t{c.next, c.kv->n_tokens(), c.kv.get(), true};
          if (Status s = (*model)->Forward({&t, 1}, pool, &logits); !s.ok()) return Fail(s, kExitFailure);
          c.next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        }
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        c.rounds.push_back(a.steps / seconds);
        c.seconds += seconds;
      }
    }
    for (size_t k = 0; k < cols.size(); ++k) {
      Column& c = cols[k];
      const double median = Median(c.rounds);
      tps[k][ci] = median;
      const engine::KvStoreStats st = c.store->Stats();
      const engine::ColdCacheStats& cc = st.cold_cache;
      const uint64_t read_bytes = st.tiers[2].io.read_bytes - before_read[k];
      const uint64_t read_ios = cc.read_ios - before[k].read_ios;
      const double steps = static_cast<double>(a.steps) * a.rounds;
      if (c.on_disk && read_ios > 0) {
        // What the disk delivered while the timed steps ran: the bound on tok/s when every step reads this much.
        std::fprintf(stderr, "%s at %d: %.1f tok/s; read %.1f MB a step from disk in %.0f KiB I/Os, %.0f MB/s\n",
                     c.name.c_str(), contexts[ci], median, static_cast<double>(read_bytes) / steps / 1e6,
                     static_cast<double>(read_bytes) / static_cast<double>(read_ios) / 1024,
                     static_cast<double>(read_bytes) / c.seconds / 1e6);
      } else {
        std::fprintf(stderr, "%s at %d: %.1f tok/s\n", c.name.c_str(), contexts[ci], median);
      }
      rows.push_back(
          {{"config", c.name},
           {"format", c.format},
           {"cold", c.on_disk},
           {"phase", "decode"},
           {"ctx", contexts[ci]},
           {"tokens_per_second", median},
           {"tokens_per_second_min", *std::min_element(c.rounds.begin(), c.rounds.end())},
           {"tokens_per_second_max", *std::max_element(c.rounds.begin(), c.rounds.end())},
           {"rounds_tokens_per_second", c.rounds},
           {"kv_bits_per_value", c.layout->bits_per_value()},
           {"kv_bytes", c.kv->bytes()},
           {"bytes_by_tier",
            {{"hot", st.tiers[0].bytes}, {"warm", st.tiers[1].bytes}, {"cold", st.tiers[2].bytes}}},
           {"cold_cache_bytes", a.model.store.cold_cache_bytes},
           {"cold_cache_hits", cc.prefetch_hits - before[k].prefetch_hits},
           {"cold_held", st.cold_held - before_held[k]},
           {"cold_cache_late", cc.prefetch_late - before[k].prefetch_late},
           {"cold_cache_misses", cc.misses - before[k].misses},
           {"cold_stall_seconds", static_cast<double>(cc.stall_ns - before[k].stall_ns) * 1e-9},
           {"cold_read_ios", read_ios},
           {"cold_read_bytes", read_bytes},
           {"timed_steps", a.steps * a.rounds},
           {"cold_read_bytes_per_second", c.seconds > 0 ? static_cast<double>(read_bytes) / c.seconds : 0.0},
           {"ratio_vs_first", median / tps[0][ci]}});
      if (c.on_disk && !a.cold_only) rows.back()["ratio_vs_ram"] = median / tps[k - 1][ci];
    }
  }
  if (a.json) {
    std::printf("%s\n", rows.dump(1).c_str());
    return kExitOk;
  }
  std::printf("decode tok/s (median of %d rounds of %d steps after filling the context, %d threads; ratio to %s%s)\n%-8s",
              a.rounds, a.steps, pool.size(), a.formats[0].c_str(),
              cold && !a.cold_only ? "; @cold: ratio to the same configuration in RAM" : "", "ctx");
  for (const Column& c : cols) std::printf(" %18s", c.name.c_str());
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    std::printf("\n%-8d", contexts[ci]);
    for (size_t k = 0; k < cols.size(); ++k) {
      const double ref = cols[k].on_disk && !a.cold_only ? tps[k - 1][ci] : tps[0][ci];
      std::printf(" %10.1f (%4.2fx)", tps[k][ci], tps[k][ci] / ref);
    }
  }
  std::printf("\n");
  for (const nlohmann::json& row : rows) {
    if (row["phase"] != "prompt") continue;
    std::printf("prompt of %d, %s: %.1f tok/s (median of %d; %.1f to %.1f)\n", a.prompt,
                row["config"].get<std::string>().c_str(), row["tokens_per_second"].get<double>(), a.rounds,
                row["tokens_per_second_min"].get<double>(), row["tokens_per_second_max"].get<double>());
  }
  return kExitOk;
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
  TQ_ASSIGN_OR_RETURN(auto store, engine::KvPageStore::Open(engine::KvStoreOptions{}, layout->class_page_bytes()));
  engine::SequenceKv kv(layout, ctx + steps + 1, store.get());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(1, model->hparams().vocab_size - 1);
  std::vector<int32_t> tokens(ctx);
  for (int32_t& t : tokens) t = token(rng);
  TQ_RETURN_IF_ERROR(Prefill(*model, kv, tokens, ctx, pool));
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

std::function<int()> AddBenchDecode(CLI::App* bench, CLI::App** subcommand) {
  auto args = std::make_shared<DecodeArgs>();
  CLI::App* app = bench->add_subcommand("decode", "Model decode speed against context length per KV format");
  AddModelFlags(app, &args->model);
  app->add_option("--ctx", args->contexts, "Context lengths (tokens filled before the timed decode steps)")
      ->delimiter(',')
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  app->add_flag("--cold-only", args->cold_only,
               "With --kv-cold-dir: run only the configurations with their SPARSE pages on disk (peak RSS is theirs)");
  app->add_option("--fill", args->fill,
                  "How the context is filled before the timed steps: prefill (the forward pass over random tokens) or "
                  "random (seeded random K/V rows stored as a prefill stores them, no forward pass: deep contexts "
                  "in minutes)")
      ->check(CLI::IsMember({"prefill", "random"}))
      ->capture_default_str();
  app->add_option("--prompt", args->prompt,
                  "Also time a prompt of N tokens into an empty sequence, one forward pass, per round (0: no)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--formats", args->formats,
                  "KV formats (K = V) or presets (code, longdoc, chat, auto with --kv-profile; uniform:FMT); the "
                  "first is the reference. With --kv-cold-dir each runs in RAM and with its SPARSE pages on disk")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--steps", args->steps, "Decode steps per round")->check(CLI::Range(1, 100000));
  app->add_option("--rounds", args->rounds,
                  "Rounds alternating between the configurations; the median counts (JSON also has min and max)")
      ->check(CLI::Range(1, 1000));
  app->add_flag("--json", args->json, "Print a JSON list");
  *subcommand = app;
  return [args] { return Run(*args); };
}

}  // namespace tq::cli
