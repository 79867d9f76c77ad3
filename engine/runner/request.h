// What a front end hands the engine and what the engine streams back. Plain structs: no gRPC or HTTP types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/grammar/constraint.h"
#include "engine/llm/sampler.h"

namespace tq::engine {

enum class FinishReason {
  kNone,      // not finished
  kStop,      // end-of-generation token, stop string or stop token
  kLength,    // max_tokens or the context length
  kAborted,   // Abort() or the client went away
  kShutdown,  // the server drained past its timeout
  kError,     // see GenerateEvent::error
};

std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", "abort", "shutdown", "error"

struct GenerateRequest {
  std::string id;                   // unique among live requests; Abort() names it
  std::vector<int32_t> prompt;      // token ids, at least one
  SamplingParams sampling;
  int max_tokens = 0;               // 0 = until the context is full
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<int32_t> stop_tokens;
  bool ignore_eos = false;
  bool logprobs = false;
  int top_logprobs = 0;             // [0, 20]
  int priority = 0;                 // higher is admitted first; FCFS among equals
  // Structured output (EngineApi::CompileConstraint): every generated token keeps the output a valid prefix of
  // the constraint's language, and the output ends (kStop) when it is complete. Null = free text.
  std::shared_ptr<const CompiledConstraint> constraint;
  // Prefix-cache namespace: requests share cached KV pages only with requests of the same salt (OpenAI's
  // cache_salt; a tenant's key). Part of the pages' names, so it holds across restarts. "" = the shared space.
  std::string cache_salt;
  // The LoRA adapter (EngineApi::LoadLora, or EngineOptions::loras) the request runs under; "" = the base model.
  // Its KV pages and prefix-cache entries are its own: never shared with the base or another adapter.
  std::string lora;
  // An embedding instead of generated text: the prompt's final hidden states pooled as the model's metadata says
  // (mean unless {arch}.pooling_type says last (3) or first (2)), L2-normalized, in the final event. No tokens are
  // generated and the prefix cache is not read (every position's state is needed).
  bool embed = false;
};

struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0.0f;                 // set when logprobs were asked for
  std::vector<TokenLogprob> top;        // top_logprobs entries
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_prompt_tokens = 0;
};

struct Timings {
  double queue_seconds = 0;
  double time_to_first_token_seconds = 0;
  double total_seconds = 0;
  double prompt_tokens_per_second = 0;
  double generated_tokens_per_second = 0;
};

// One step's news for one request. The last event has `final` set, a finish reason and usage.
struct GenerateEvent {
  std::vector<GeneratedToken> tokens;  // tokens generated since the previous event
  std::string text;                    // text that may be sent now (whole UTF-8 code points, stops removed)
  bool final = false;
  FinishReason finish_reason = FinishReason::kNone;
  Status error;                        // non-OK only with kError
  std::vector<float> embedding;        // final event of an embed request: [n_embd], unit length
  Usage usage;
  Timings timings;
};

// Called on the engine thread; must return quickly (queue the event, do not do I/O that can block).
using EventSink = std::function<void(GenerateEvent&&)>;

}  // namespace tq::engine
