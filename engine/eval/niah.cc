#include "engine/eval/niah.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace tq::engine {
namespace {

constexpr int kAnswerTokens = 32;  // digits are single tokens in many vocabularies
constexpr int kPrefillChunk = 512;

// Greedy continuation of `prompt`, up to kAnswerTokens or an end-of-generation token.
StatusOr<std::string> Answer(const Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                             std::shared_ptr<const KvLayout> layout, ThreadPool& pool) {
  TQ_ASSIGN_OR_RETURN(auto store, KvPageStore::Open(KvStoreOptions{}, layout->class_page_bytes()));
  SequenceKv kv(std::move(layout), static_cast<int>(prompt.size()) + kAnswerTokens + 1, store.get());
  std::vector<float> logits;
  for (size_t start = 0; start < prompt.size(); start += kPrefillChunk) {
    const size_t end = std::min(prompt.size(), start + kPrefillChunk);
    std::vector<BatchToken> batch;
    for (size_t i = start; i < end; ++i) batch.push_back({prompt[i], static_cast<int>(i), &kv, i + 1 == prompt.size()});
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
  }
  std::vector<int32_t> out;
  int pos = static_cast<int>(prompt.size());
  for (int step = 0; step < kAnswerTokens; ++step) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.IsEndOfGeneration(next)) break;
    out.push_back(next);
    BatchToken t{next, pos++, &kv, true};
    TQ_RETURN_IF_ERROR(model.Forward({&t, 1}, pool, &logits));
  }
  return tok.Decode(out);
}

}  // namespace

StatusOr<NiahResult> NeedleInAHaystack(const Model& model, const Tokenizer& tok, const ChatTemplate* chat,
                                       const std::string& haystack, const NiahOptions& o, ThreadPool& pool) {
  if (o.trials < 1) return InvalidArgumentError("trials must be >= 1");
  TQ_ASSIGN_OR_RETURN(auto layout, KvLayout::Create(model.hparams(), o.kv));
  const std::vector<int32_t> filler = tok.Encode(haystack, {.add_special = false});
  const std::string question =
      chat != nullptr
          ? "\n\nQuestion: What is the secret number mentioned in the text above? Answer with the number only."
          : "\n\nIn the text above, the secret number is";
  // The prompt around `text`: the chat template's user turn, or the text itself then the sentence to complete.
  auto render = [&](const std::string& text) -> StatusOr<std::string> {
    if (chat == nullptr) return text + question;
    return RenderChat(*chat, {{"user", text + question}});
  };
  std::mt19937_64 rng(o.seed);
  NiahResult result;
  int found_total = 0, trials_total = 0;
  const int trials_all = static_cast<int>(o.lengths.size() * o.depths.size()) * o.trials;
  const auto t0 = std::chrono::steady_clock::now();
  for (int length : o.lengths) {
    for (double depth : o.depths) {
      if (depth < 0 || depth > 1) return InvalidArgumentError("depths must be in [0, 1]");
      NiahCell cell{length, 0, depth, 0, 0, ""};
      for (int trial = 0; trial < o.trials; ++trial) {
        const std::string secret = std::to_string(100000 + rng() % 900000);
        const std::string needle = " The secret number is " + secret + ". ";
        // Token budget for the filler: the target minus everything else.
        TQ_ASSIGN_OR_RETURN(std::string empty, render(needle));
        const int overhead = static_cast<int>(tok.Encode(empty, {.add_special = true, .parse_special = true}).size());
        const int budget = length - overhead;
        if (budget < 16) return InvalidArgumentError("length " + std::to_string(length) + " is too short");
        if (static_cast<size_t>(budget) > filler.size()) {
          return InvalidArgumentError("the haystack file has " + std::to_string(filler.size()) +
                                      " tokens; length " + std::to_string(length) + " needs " + std::to_string(budget));
        }
        // A different stretch of filler per trial.
        const size_t offset = filler.size() > static_cast<size_t>(budget) ? rng() % (filler.size() - budget) : 0;
        const int at = static_cast<int>(depth * budget);
        const std::vector<int32_t> before(filler.begin() + offset, filler.begin() + offset + at);
        const std::vector<int32_t> after(filler.begin() + offset + at, filler.begin() + offset + budget);
        const std::string text = tok.Decode(before) + needle + tok.Decode(after);
        TQ_ASSIGN_OR_RETURN(std::string rendered, render(text));
        const std::vector<int32_t> prompt = tok.Encode(rendered, {.add_special = true, .parse_special = true});
        if (static_cast<int>(prompt.size()) + kAnswerTokens > model.hparams().n_ctx_train) {
          return InvalidArgumentError("length " + std::to_string(length) + " exceeds the model's context");
        }
        TQ_ASSIGN_OR_RETURN(std::string answer, Answer(model, tok, prompt, layout, pool));
        cell.prompt_tokens = static_cast<int>(prompt.size());
        cell.last_answer = answer;
        ++cell.trials;
        if (answer.find(secret) != std::string::npos) ++cell.found;
        if (o.progress) o.progress(trials_total + cell.trials, trials_all, found_total + cell.found);
      }
      found_total += cell.found;
      trials_total += cell.trials;
      result.cells.push_back(cell);
    }
  }
  result.accuracy = trials_total ? static_cast<double>(found_total) / trials_total : 0;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace tq::engine
