// `tqserve generate`: one prompt through the same engine the server uses; streams the text to stdout and ends with
// prompt and generation speed on stderr.
#include <cstdio>

#include "common/progress.h"
#include "engine/runner/engine.h"
#include "tools/commands.h"
#include "tools/model_args.h"
#include "server/engine_config.h"
#include "server/event_channel.h"

namespace tq::cli {
namespace {

struct GenerateArgs {
  ModelArgs model;
  std::string prompt;
  bool chat = false;
  int n = 128;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int64_t seed = -1;
  bool ignore_eos = false;
  std::string adapter;  // LoRA adapter name; "" = the base model
};

int Run(const GenerateArgs& a) {
  auto path = ResolveModelPath(a.model);
  if (!path.ok()) {
    std::fprintf(stderr, "tqserve generate: %s\n", path.status().ToString().c_str());
    return kExitFailure;
  }
  auto options = server::ToEngineOptions(a.model.config, *path);
  if (!options.ok()) {
    std::fprintf(stderr, "tqserve generate: %s\n", options.status().ToString().c_str());
    return kExitUsage;
  }
  engine::EngineOptions eo = std::move(*options);
  ProgressLine load_line("model: MiB checked");
  eo.load_progress = [&load_line](uint64_t done, uint64_t total) {
    load_line.Update(static_cast<int64_t>(done >> 20), static_cast<int64_t>(total >> 20));
  };
  auto eng = engine::Engine::Create(eo);
  if (!eng.ok()) {
    std::fprintf(stderr, "tqserve generate: %s\n", eng.status().ToString().c_str());
    return kExitFailure;
  }
  engine::Engine& e = **eng;
  engine::GenerateRequest r;
  r.id = "generate";
  if (a.chat) {
    auto prompt = e.ChatPrompt({{"user", a.prompt}});
    if (!prompt.ok()) {
      std::fprintf(stderr, "tqserve generate --chat: %s\n", prompt.status().ToString().c_str());
      return kExitFailure;
    }
    r.prompt = std::move(prompt).value();
  } else {
    r.prompt = e.Tokenize(a.prompt, {.add_special = true, .parse_special = false});
  }
  r.max_tokens = a.n;
  r.ignore_eos = a.ignore_eos;
  r.lora = a.adapter;
  r.sampling.temperature = a.temperature;
  r.sampling.top_p = a.top_p;
  r.sampling.top_k = a.top_k;
  r.sampling.min_p = a.min_p;
  r.sampling.repetition_penalty = a.repeat_penalty;
  if (a.seed >= 0) {
    r.sampling.seed = static_cast<uint64_t>(a.seed);
    r.sampling.has_seed = true;
  }
  auto channel = std::make_shared<server::EventChannel>();
  if (Status s = e.Submit(std::move(r), server::EventChannel::SinkFor(channel, 0)); !s.ok()) {
    std::fprintf(stderr, "tqserve generate: %s\n", s.ToString().c_str());
    return kExitUsage;
  }
  if (!a.chat) std::fputs(a.prompt.c_str(), stdout);
  for (;;) {
    auto item = channel->Pop(std::chrono::milliseconds(1000));
    if (!item) continue;
    std::fputs(item->event.text.c_str(), stdout);
    std::fflush(stdout);
    if (!item->event.final) continue;
    const engine::GenerateEvent& f = item->event;
    std::printf("\n");
    std::fprintf(stderr, "\nprompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s | finish: %s | KV %s\n",
                 f.usage.prompt_tokens, f.timings.prompt_tokens_per_second, f.usage.completion_tokens,
                 f.timings.generated_tokens_per_second, std::string(engine::FinishReasonName(f.finish_reason)).c_str(),
                 e.kv_layout()->Describe().c_str());
    return f.finish_reason == engine::FinishReason::kError ? kExitFailure : kExitOk;
  }
}

}  // namespace

Command AddGenerateCommand(CLI::App& parent) {
  static GenerateArgs args;
  CLI::App* app = parent.add_subcommand("generate", "Generate text for one prompt");
  // Every engine and KV option of `serve`; a 4096-token context unless --ctx-size says.
  AddModelFlags(app, &args.model, ModelFlags::kEngine, {{"engine.ctx_size", "4096"}});
  app->add_option("--prompt,-p", args.prompt, "Prompt text")->required();
  app->add_flag("--chat", args.chat, "Wrap the prompt as a user message in the model's chat template");
  app->add_option("-n,--max-tokens", args.n, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  app->add_option("--temp", args.temperature, "Temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-p", args.top_p, "Top-p")->check(CLI::Range(0.0, 1.0));
  app->add_option("--top-k", args.top_k, "Top-k (0 = off)")->check(CLI::Range(0, 1 << 20));
  app->add_option("--min-p", args.min_p, "Min-p")->check(CLI::Range(0.0, 1.0));
  app->add_option("--repeat-penalty", args.repeat_penalty, "Repetition penalty")->check(CLI::Range(0.01, 10.0));
  app->add_option("--seed", args.seed, "Seed (-1 = random)");
  app->add_flag("--ignore-eos", args.ignore_eos, "Keep generating past end-of-sequence tokens");
  app->add_option("--adapter", args.adapter, "Run under this LoRA adapter (one named by --lora)");
  return {app, [] { return Run(args); }};
}

}  // namespace tq::cli
