// Prompt-processing and decode speed of the forward pass on a GGUF model, for vs_llama.py.
//
//   bench_model_speed MODEL THREADS [PROMPT_TOKENS=128] [DECODE_TOKENS=32] [REPS=3] [KV=f16] [BATCH=1]
//
// Each repetition starts BATCH fresh sequences: one Forward call over PROMPT_TOKENS tokens each (logits of the last
// one), then DECODE_TOKENS Forward calls of BATCH tokens, one per sequence (greedy): a server's batched decode step.
// prefill_tok_s counts every sequence's prompt, decode_tok_s every sequence's tokens (BATCH per step). KV is the format of every K and V page, as the server
// stores them (its default is f16, as llama.cpp's), or f32 for plain exact rows (no pages). Prints one JSON object
// per repetition: {"prefill_tok_s": F, "decode_tok_s": F}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/kv/page_store.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

int main(int argc, char** argv) {
  using namespace tq::engine;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL THREADS [PROMPT_TOKENS] [DECODE_TOKENS] [REPS] [KV] [BATCH]\n",
                 argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const int prompt = argc > 3 ? std::atoi(argv[3]) : 128;
  const int decode = argc > 4 ? std::atoi(argv[4]) : 32;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 3;
  const std::string kv_format = argc > 6 ? argv[6] : "f16";
  const int n_seq = argc > 7 ? std::atoi(argv[7]) : 1;
  if (threads < 1 || prompt < 1 || decode < 0 || reps < 1 || n_seq < 1) {
    std::fprintf(stderr, "bench_model_speed: THREADS, PROMPT_TOKENS, REPS and BATCH must be >= 1\n");
    return 2;
  }
  auto model = Model::Open(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  const Model& m = **model;
  const int vocab = m.hparams().vocab_size;
  ThreadPool pool(threads);
  std::shared_ptr<const KvLayout> layout;
  std::unique_ptr<KvPageStore> store;
  if (kv_format != "f32") {
    auto l = KvLayout::Create(m.hparams(), {kv_format, kv_format, 0});
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", l.status().ToString().c_str());
      return 1;
    }
    layout = *l;
    auto st = KvPageStore::Open(KvStoreOptions{}, layout->class_page_bytes());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.status().ToString().c_str());
      return 1;
    }
    store = std::move(*st);
  }
  std::vector<float> logits;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::unique_ptr<SequenceKv>> seqs;
    for (int q = 0; q < n_seq; ++q) {
      seqs.push_back(layout ? std::make_unique<SequenceKv>(layout, prompt + decode, store.get())
                            : std::make_unique<SequenceKv>(m.hparams(), prompt + decode));
    }
    std::vector<int> next(n_seq);
    tq::Status s;
    const auto t0 = Clock::now();
    for (int q = 0; q < n_seq && s.ok(); ++q) {
      std::vector<BatchToken> batch;
      for (int i = 0; i < prompt; ++i) batch.push_back({(1 + i + q) % vocab, i, seqs[q].get(), i == prompt - 1});
      s = m.Forward(batch, pool, &logits);
      next[q] = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    const auto t1 = Clock::now();
    std::vector<BatchToken> step(n_seq);
    for (int i = 0; i < decode && s.ok(); ++i) {
      for (int q = 0; q < n_seq; ++q) step[q] = BatchToken{next[q], prompt + i, seqs[q].get(), true};
      s = m.Forward(step, pool, &logits);
      for (int q = 0; q < n_seq && s.ok(); ++q) {
        const float* row = logits.data() + static_cast<size_t>(q) * vocab;
        next[q] = static_cast<int>(std::max_element(row, row + vocab) - row);
      }
    }
    const auto t2 = Clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f}\n", double(n_seq) * prompt / Seconds(t0, t1),
                double(n_seq) * decode / Seconds(t1, t2));
    std::fflush(stdout);
  }
  return 0;
}
