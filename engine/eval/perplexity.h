// Quality evaluation of a model with a KV configuration, by llama.cpp's perplexity method so the numbers compare:
// the text is tokenized once; chunk i is tokens [i*ctx, (i+1)*ctx) with its first token replaced by BOS (when the
// model adds one); each chunk runs from an empty KV cache, and positions [ctx/2, ctx-1) are scored: the model's
// log-probability of the next token. PPL = exp(mean negative log-likelihood).
// KLD compares a test KV configuration with a reference one on the same chunks, token by token.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"
#include "engine/llm/thread_pool.h"
#include "engine/tokenizer/tokenizer.h"

namespace tq::engine {

struct EvalOptions {
  int ctx = 512;      // tokens per chunk
  int chunks = 0;     // 0 = every whole chunk of the text
  KvSpec kv;          // the configuration under test
  KvSpec ref_kv;      // KLD only: the reference
  KvStoreOptions store;  // tiers the pages go to (bytes_by_tier reports where they went)
};

struct PplResult {
  double ppl = 0;
  double ppl_stderr = 0;
  int64_t tokens = 0;          // scored tokens
  int chunks = 0;
  double kv_bits_per_value = 0;
  double kv_page_bits_per_value = 0;  // every byte of a full page counted (the header too)
  uint64_t kv_bytes = 0;       // KV held at the end of a chunk (ctx tokens)
  // Page bytes in each tier [hot, warm, cold] at the end of a chunk, as the page store placed them (tail pages
  // and f32 rows, held by the sequence in RAM, count as hot).
  std::array<uint64_t, 3> bytes_by_tier{};
  std::array<int, 3> heads_by_class{};
  double seconds = 0;
  double tokens_per_second = 0;  // chunk tokens evaluated per second
};

struct KldResult {
  PplResult test;
  PplResult ref;
  double kld_mean = 0, kld_median = 0, kld_p99 = 0;  // KL(ref || test) per scored token, nats
  double same_top = 0;                              // share of scored tokens with the same argmax
};

// Rows of logits [rows][vocab] become log-probabilities (log-softmax, f64 sums), rows split over the pool.
void LogSoftmaxRows(float* logits, int64_t rows, int vocab, ThreadPool& pool);
// KL(a || b) in nats of two log-probability rows [vocab], clamped at 0 (rounding can make it slightly negative).
double KlDivergenceRow(const float* a, const float* b, int vocab);

// progress(chunk_done, chunks_total, running ppl).
using EvalProgress = std::function<void(int, int, double)>;

StatusOr<PplResult> Perplexity(const Model& model, const Tokenizer& tokenizer, const std::string& text,
                               const EvalOptions& options, ThreadPool& pool, const EvalProgress& progress);

StatusOr<KldResult> KlDivergence(const Model& model, const Tokenizer& tokenizer, const std::string& text,
                                 const EvalOptions& options, ThreadPool& pool, const EvalProgress& progress);

}  // namespace tq::engine
