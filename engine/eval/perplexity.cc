#include "engine/eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace tq::engine {
namespace {

using Clock = std::chrono::steady_clock;

struct Prepared {
  std::vector<int32_t> tokens;
  int chunks = 0;
};

StatusOr<Prepared> Prepare(const Model& model, const Tokenizer& tok, const std::string& text, const EvalOptions& o) {
  if (o.ctx < 4) return InvalidArgumentError("ctx must be at least 4");
  if (o.ctx > model.hparams().n_ctx_train) {
    return InvalidArgumentError("ctx " + std::to_string(o.ctx) + " exceeds the model's trained context " +
                                std::to_string(model.hparams().n_ctx_train));
  }
  if (o.chunks < 0) return InvalidArgumentError("chunks must be >= 0");
  Prepared p;
  p.tokens = tok.Encode(text, {.add_special = true});
  const int available = static_cast<int>(p.tokens.size() / o.ctx);
  if (available == 0) {
    return InvalidArgumentError("the text has " + std::to_string(p.tokens.size()) + " tokens, fewer than one chunk of " +
                                std::to_string(o.ctx));
  }
  p.chunks = o.chunks > 0 ? std::min(o.chunks, available) : available;
  return p;
}

// Runs chunk `c` and returns log-softmax rows [ctx - 1 - first][vocab] for positions first .. ctx-2.
StatusOr<std::vector<float>> RunChunk(const Model& model, const Tokenizer& tok, const Prepared& p, int c, int ctx,
                                      std::shared_ptr<const KvLayout> layout, KvPageStore& store, ThreadPool& pool,
                                      uint64_t* kv_bytes, std::array<uint64_t, 3>* by_tier = nullptr) {
  const int first = ctx / 2;
  SequenceKv kv(std::move(layout), ctx, &store);
  std::vector<BatchToken> batch(ctx);
  for (int j = 0; j < ctx; ++j) {
    int32_t t = p.tokens[static_cast<size_t>(c) * ctx + j];
    if (j == 0 && tok.add_bos() && tok.bos() >= 0) t = tok.bos();
    batch[j] = {t, j, &kv, j >= first && j < ctx - 1};
  }
  std::vector<float> logits;
  TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
  *kv_bytes = kv.bytes();
  if (by_tier != nullptr) {
    // Full pages where the store put them; the sequence's own tail pages and f32 rows are RAM: hot.
    const KvStoreStats st = store.Stats();
    uint64_t in_tiers = 0, held = 0;
    for (int t = 0; t < kKvTiers; ++t) {
      (*by_tier)[t] = st.tiers[t].bytes;
      in_tiers += st.tiers[t].bytes;
    }
    for (uint64_t b : kv.bytes_by_class()) held += b;
    (*by_tier)[0] += held > in_tiers ? held - in_tiers : 0;
  }
  const int V = model.hparams().vocab_size;
  const int rows = ctx - 1 - first;
  LogSoftmaxRows(logits.data(), rows, V, pool);
  return logits;
}

struct NllAccumulator {
  double sum = 0, sum2 = 0;
  int64_t n = 0;
  void Add(double nll) {
    sum += nll;
    sum2 += nll * nll;
    ++n;
  }
  double Ppl() const { return n ? std::exp(sum / n) : 0; }
  // Standard error of the PPL estimate (delta method over per-token NLL).
  double PplStderr() const {
    if (n < 2) return 0;
    const double mean = sum / n;
    const double var = std::max(0.0, sum2 / n - mean * mean);
    return Ppl() * std::sqrt(var / (n - 1));
  }
};

void Finish(const NllAccumulator& acc, int chunks, int ctx, double seconds, const KvLayout& layout, uint64_t bytes,
            PplResult* r) {
  r->ppl = acc.Ppl();
  r->ppl_stderr = acc.PplStderr();
  r->tokens = acc.n;
  r->chunks = chunks;
  r->seconds = seconds;
  r->tokens_per_second = seconds > 0 ? static_cast<double>(chunks) * ctx / seconds : 0;
  r->kv_bits_per_value = layout.bits_per_value();
  r->kv_page_bits_per_value = layout.page_bits_per_value();
  r->kv_bytes = bytes;
}

}  // namespace

StatusOr<PplResult> Perplexity(const Model& model, const Tokenizer& tok, const std::string& text,
                               const EvalOptions& o, ThreadPool& pool, const EvalProgress& progress) {
  TQ_ASSIGN_OR_RETURN(Prepared p, Prepare(model, tok, text, o));
  TQ_ASSIGN_OR_RETURN(auto layout, KvLayout::Create(model.hparams(), o.kv));
  TQ_ASSIGN_OR_RETURN(auto store, KvPageStore::Open(o.store, layout->class_page_bytes()));
  const int first = o.ctx / 2, V = model.hparams().vocab_size;
  NllAccumulator acc;
  uint64_t kv_bytes = 0;
  std::array<uint64_t, 3> by_class{};
  const auto t0 = Clock::now();
  for (int c = 0; c < p.chunks; ++c) {
    TQ_ASSIGN_OR_RETURN(std::vector<float> lp,
                        RunChunk(model, tok, p, c, o.ctx, layout, *store, pool, &kv_bytes, &by_class));
    for (int j = first; j < o.ctx - 1; ++j) {
      const int32_t next = p.tokens[static_cast<size_t>(c) * o.ctx + j + 1];
      acc.Add(-lp[static_cast<size_t>(j - first) * V + next]);
    }
    if (progress) progress(c + 1, p.chunks, acc.Ppl());
  }
  PplResult r;
  Finish(acc, p.chunks, o.ctx, std::chrono::duration<double>(Clock::now() - t0).count(), *layout, kv_bytes, &r);
  r.bytes_by_tier = by_class;
  r.heads_by_class = layout->class_heads();
  return r;
}

StatusOr<KldResult> KlDivergence(const Model& model, const Tokenizer& tok, const std::string& text,
                                 const EvalOptions& o, ThreadPool& pool, const EvalProgress& progress) {
  TQ_ASSIGN_OR_RETURN(Prepared p, Prepare(model, tok, text, o));
  TQ_ASSIGN_OR_RETURN(auto test_layout, KvLayout::Create(model.hparams(), o.kv));
  TQ_ASSIGN_OR_RETURN(auto ref_layout, KvLayout::Create(model.hparams(), o.ref_kv));
  TQ_ASSIGN_OR_RETURN(auto test_store, KvPageStore::Open(o.store, test_layout->class_page_bytes()));
  TQ_ASSIGN_OR_RETURN(auto ref_store, KvPageStore::Open(KvStoreOptions{}, ref_layout->class_page_bytes()));
  const int first = o.ctx / 2, V = model.hparams().vocab_size;
  NllAccumulator test_acc, ref_acc;
  std::vector<double> klds;
  int64_t same = 0;
  uint64_t test_bytes = 0, ref_bytes = 0;
  std::array<uint64_t, 3> test_by_class{};
  double test_seconds = 0, ref_seconds = 0;
  for (int c = 0; c < p.chunks; ++c) {
    auto t0 = Clock::now();
    TQ_ASSIGN_OR_RETURN(std::vector<float> ref, RunChunk(model, tok, p, c, o.ctx, ref_layout, *ref_store, pool, &ref_bytes));
    auto t1 = Clock::now();
    TQ_ASSIGN_OR_RETURN(std::vector<float> test,
                        RunChunk(model, tok, p, c, o.ctx, test_layout, *test_store, pool, &test_bytes, &test_by_class));
    auto t2 = Clock::now();
    ref_seconds += std::chrono::duration<double>(t1 - t0).count();
    test_seconds += std::chrono::duration<double>(t2 - t1).count();
    for (int j = first; j < o.ctx - 1; ++j) {
      const float* a = ref.data() + static_cast<size_t>(j - first) * V;
      const float* b = test.data() + static_cast<size_t>(j - first) * V;
      klds.push_back(KlDivergenceRow(a, b, V));
      same += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
      const int32_t next = p.tokens[static_cast<size_t>(c) * o.ctx + j + 1];
      ref_acc.Add(-a[next]);
      test_acc.Add(-b[next]);
    }
    if (progress) progress(c + 1, p.chunks, test_acc.Ppl());
  }
  KldResult r;
  Finish(test_acc, p.chunks, o.ctx, test_seconds, *test_layout, test_bytes, &r.test);
  Finish(ref_acc, p.chunks, o.ctx, ref_seconds, *ref_layout, ref_bytes, &r.ref);
  r.test.bytes_by_tier = test_by_class;
  r.test.heads_by_class = test_layout->class_heads();
  double sum = 0;
  for (double k : klds) sum += k;
  r.kld_mean = klds.empty() ? 0 : sum / klds.size();
  std::sort(klds.begin(), klds.end());
  if (!klds.empty()) {
    r.kld_median = klds[klds.size() / 2];
    r.kld_p99 = klds[std::min(klds.size() - 1, static_cast<size_t>(0.99 * klds.size()))];
  }
  r.same_top = klds.empty() ? 0 : static_cast<double>(same) / klds.size();
  return r;
}

void LogSoftmaxRows(float* logits, int64_t rows, int vocab, ThreadPool& pool) {
  pool.ParallelFor(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = logits + r * vocab;
      const float m = *std::max_element(row, row + vocab);
      double sum = 0;
      for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - m);
      const float lse = m + static_cast<float>(std::log(sum));
      for (int i = 0; i < vocab; ++i) row[i] -= lse;
    }
  });
}

double KlDivergenceRow(const float* a, const float* b, int vocab) {
  double kl = 0;
  for (int i = 0; i < vocab; ++i) kl += std::exp(static_cast<double>(a[i])) * (a[i] - b[i]);
  return std::max(0.0, kl);
}

}  // namespace tq::engine
