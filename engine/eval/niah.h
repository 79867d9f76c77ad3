// Needle in a haystack: a model reads filler text of a given length with one "needle" sentence placed at a
// given depth, then is asked for the needle's secret number: a chat model by a question in its chat template, a
// base model (no template) by a sentence it completes with the number. Accuracy per (context length, depth) tells how well
// a KV configuration keeps what is far back in the context.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"
#include "engine/runner/chat_template.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

struct NiahOptions {
  std::vector<int> lengths = {512, 1024, 2048};     // prompt tokens (approximately)
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};  // where the needle goes, 0 = start, 1 = end
  int trials = 3;                                   // needles per cell, each with its own random number
  uint64_t seed = 1;
  KvSpec kv;
  // Called after every trial: trials done, trials in all, needles found so far. May be empty.
  std::function<void(int, int, int)> progress;
};

struct NiahCell {
  int length = 0;         // target prompt tokens
  int prompt_tokens = 0;  // actual prompt tokens of the last trial
  double depth = 0;
  int found = 0;
  int trials = 0;
  std::string last_answer;  // the model's answer in the last trial
};

struct NiahResult {
  std::vector<NiahCell> cells;  // lengths x depths, length-major
  double accuracy = 0;          // over all trials
  double seconds = 0;
};

// chat: the model's template, or null for the completion prompt (text, then "In the text above, the secret number
// is", which the model continues).
StatusOr<NiahResult> NeedleInAHaystack(const Model& model, const Tokenizer& tokenizer, const ChatTemplate* chat,
                                       const std::string& haystack, const NiahOptions& options, ThreadPool& pool);

}  // namespace tq::engine
