#include "engine/eval/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <span>

#include "engine/eval/perplexity.h"
#include "engine/kv/page_store.h"

namespace tq::engine {
namespace {

using Clock = std::chrono::steady_clock;

// The text's tokens as `tqserve eval` takes them and the chunks to calibrate on: chunk i (0-based) is tokens
// [(skip + i) * ctx, (skip + i + 1) * ctx) with its first token replaced by BOS where the model adds one.
struct Chunks {
  std::vector<int32_t> tokens;
  int first = 0;  // skip_chunks
  int count = 0;
};

StatusOr<Chunks> PrepareChunks(const Model& model, const Tokenizer& tok, const std::string& text,
                               const CalibrateOptions& o) {
  const HParams& hp = model.hparams();
  if (o.ctx < 32 || o.ctx > hp.n_ctx_train) {
    return InvalidArgumentError("ctx must be in [32, " + std::to_string(hp.n_ctx_train) + "]");
  }
  if (o.chunks < 0 || o.skip_chunks < 0) return InvalidArgumentError("chunks and skip_chunks must be >= 0");
  Chunks c;
  c.tokens = tok.Encode(text, {.add_special = true});
  const int available = static_cast<int>(c.tokens.size() / o.ctx) - o.skip_chunks;
  if (available <= 0) {
    return InvalidArgumentError("the text has " + std::to_string(c.tokens.size()) + " tokens: no chunk of " +
                                std::to_string(o.ctx) + " after skipping " + std::to_string(o.skip_chunks));
  }
  c.first = o.skip_chunks;
  c.count = o.chunks > 0 ? std::min(o.chunks, available) : available;
  return c;
}

// Batch for chunk i: ctx tokens at positions 0.., logits wanted for positions [ctx/2, ctx-1) when `scored`.
std::vector<BatchToken> ChunkBatch(const Tokenizer& tok, const Chunks& c, int i, int ctx, SequenceKv* kv,
                                   bool scored) {
  std::vector<BatchToken> batch(ctx);
  const size_t at = static_cast<size_t>(c.first + i) * ctx;
  for (int j = 0; j < ctx; ++j) {
    int32_t t = c.tokens[at + j];
    if (j == 0 && tok.add_bos() && tok.bos() >= 0) t = tok.bos();
    batch[j] = {t, j, kv, scored && j >= ctx / 2 && j < ctx - 1};
  }
  return batch;
}

StatusOr<HeadProfile> CalibrateConcentration(const Model& model, const Tokenizer& tok,
                                             const std::string& text, const CalibrateOptions& o,
                                             ThreadPool& pool, const ChunkProgress& progress) {
  const HParams& hp = model.hparams();
  TQ_ASSIGN_OR_RETURN(Chunks chunks, PrepareChunks(model, tok, text, o));
  ConcentrationStats stats(hp.n_layers, hp.n_kv_heads);
  std::vector<float> logits;
  for (int c = 0; c < chunks.count; ++c) {
    SequenceKv kv(hp, o.ctx);
    kv.set_concentration_stats(&stats);
    const std::vector<BatchToken> batch = ChunkBatch(tok, chunks, c, o.ctx, &kv, false);
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
    if (progress) progress(c + 1, chunks.count);
  }
  return stats.ToProfile(hp.name);
}

// Log-softmax of the scored rows [ctx - 1 - ctx/2][vocab] of chunk i under `layout`.
StatusOr<std::vector<float>> ScoredLogProbs(const Model& model, const Tokenizer& tok, const Chunks& chunks,
                                            int i, int ctx, std::shared_ptr<const KvLayout> layout,
                                            KvPageStore& store, ThreadPool& pool,
                                            const ForwardLayers& layers = {}) {
  SequenceKv kv(std::move(layout), ctx, &store);
  const std::vector<BatchToken> batch = ChunkBatch(tok, chunks, i, ctx, &kv, true);
  std::vector<float> logits;
  TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits, nullptr, layers));
  TQ_RETURN_IF_ERROR_CTX(kv.fault(), "chunk " + std::to_string(chunks.first + i));
  const int V = model.hparams().vocab_size;
  const int rows = ctx - 1 - ctx / 2;
  LogSoftmaxRows(logits.data(), rows, V, pool);
  return logits;
}

// A page store for `layout`, reused while the classes' page sizes stay the same.
Status EnsureStore(const KvLayout& layout, std::unique_ptr<KvPageStore>* store,
                   std::array<uint32_t, 3>* sizes) {
  if (*store != nullptr && *sizes == layout.class_page_bytes()) return Status::Ok();
  store->reset();
  *sizes = layout.class_page_bytes();
  TQ_ASSIGN_OR_RETURN(*store, KvPageStore::Open(KvStoreOptions{}, *sizes));
  return Status::Ok();
}

StatusOr<HeadProfile> CalibrateSensitivity(const Model& model, const Tokenizer& tok, const std::string& text,
                                           const CalibrateOptions& o, ThreadPool& pool,
                                           const SensitivityProgress& progress) {
  const HParams& hp = model.hparams();
  if (o.ctx <= kernels::kPageTokens) {
    // A query sees its own page exact (SequenceKv::DropExactCopies), so every scored query of a one-page chunk
    // would read only f16 KV and every head would measure zero.
    return InvalidArgumentError("sensitivity calibration needs --ctx above " + std::to_string(kernels::kPageTokens) +
                                " (one KV page): in a one-page chunk no query reads a compressed page");
  }
  TQ_ASSIGN_OR_RETURN(Chunks chunks, PrepareChunks(model, tok, text, o));
  const int L = hp.n_layers, H = hp.n_kv_heads, V = hp.vocab_size;
  const int rows = o.ctx - 1 - o.ctx / 2;
  const auto t0 = Clock::now();

  KvSpec ref_spec;
  ref_spec.k_format = "f16";
  ref_spec.v_format = "f16";
  TQ_ASSIGN_OR_RETURN(auto ref_layout, KvLayout::Create(hp, ref_spec));
  std::unique_ptr<KvPageStore> store;
  std::array<uint32_t, 3> store_sizes{};
  // The f16 reference rows of every chunk, computed once: [chunks][rows][vocab]; and its layer inputs,
  // [chunks] of [n_layers][ctx][n_embd] floats: a pass with head (l, h) alone compressed starts at layer l, since
  // below it every head holds f16 KV as in the reference (scores agree with whole passes to 1e-18), so the passes
  // run half the layers on average.
  std::vector<std::vector<float>> ref(chunks.count);
  std::vector<LayerInputs> ref_inputs(chunks.count);
  TQ_RETURN_IF_ERROR(EnsureStore(*ref_layout, &store, &store_sizes));
  for (int c = 0; c < chunks.count; ++c) {
    TQ_ASSIGN_OR_RETURN(ref[c], ScoredLogProbs(model, tok, chunks, c, o.ctx, ref_layout, *store, pool,
                                               {.record = &ref_inputs[c]}));
  }

  const std::string dir =
      o.scratch_dir.empty() ? std::filesystem::temp_directory_path().string() : o.scratch_dir;
  const std::string scratch = dir + "/tq-sensitivity-" + std::to_string(getpid()) + ".json";
  // Mean KLD over the chunks with (l, h) alone in `format`.
  const auto measure = [&](int l, int h, const std::string& format) -> StatusOr<double> {
    TQ_ASSIGN_OR_RETURN(KvSpec spec, SingleHeadSpec(L, H, l, h, format, scratch));
    TQ_ASSIGN_OR_RETURN(auto layout, KvLayout::Create(hp, spec));
    TQ_RETURN_IF_ERROR(EnsureStore(*layout, &store, &store_sizes));
    double kld = 0;
    for (int c = 0; c < chunks.count; ++c) {
      TQ_ASSIGN_OR_RETURN(std::vector<float> test,
                          ScoredLogProbs(model, tok, chunks, c, o.ctx, layout, *store, pool,
                                         {.resume = &ref_inputs[c], .first_layer = l}));
      kld += MeanKld(ref[c].data(), test.data(), rows, V, pool);
    }
    return kld / chunks.count;
  };
  HeadProfile profile;
  profile.model = hp.name;
  profile.n_layers = L;
  profile.n_kv_heads = H;
  profile.method = "sensitivity";
  profile.format = o.format;
  profile.baseline_format = o.baseline_format;
  profile.queries = static_cast<int64_t>(chunks.count) * rows;
  profile.kld.assign(static_cast<size_t>(L) * H, 0.0);
  profile.kld_baseline.assign(static_cast<size_t>(L) * H, 0.0);
  profile.score.assign(static_cast<size_t>(L) * H, 0.0);
  Status status = Status::Ok();
  for (int l = 0; l < L && status.ok(); ++l) {
    for (int h = 0; h < H && status.ok(); ++h) {
      status = [&]() -> Status {
        const size_t at = static_cast<size_t>(l) * H + h;
        TQ_ASSIGN_OR_RETURN(profile.kld[at], measure(l, h, o.format));
        if (!o.baseline_format.empty()) {
          TQ_ASSIGN_OR_RETURN(profile.kld_baseline[at], measure(l, h, o.baseline_format));
        }
        profile.score[at] = profile.kld[at] - profile.kld_baseline[at];
        if (progress) {
          progress({l * H + h + 1, L * H, l, h, profile.kld[at], profile.kld_baseline[at],
                    std::chrono::duration<double>(Clock::now() - t0).count()});
        }
        return Status::Ok();
      }();
    }
  }
  std::error_code ignored;
  std::filesystem::remove(scratch, ignored);
  TQ_RETURN_IF_ERROR_CTX(status, "sensitivity calibration");
  return profile;
}

}  // namespace

StatusOr<CalibrationMethod> ParseCalibrationMethod(std::string_view name) {
  if (name == "concentration") return CalibrationMethod::kConcentration;
  if (name == "sensitivity") return CalibrationMethod::kSensitivity;
  return InvalidArgumentError("unknown calibration method '" + std::string(name) +
                              "' (known: concentration, sensitivity)");
}

StatusOr<KvSpec> SingleHeadSpec(int n_layers, int n_kv_heads, int layer, int kv_head,
                                const std::string& format, const std::string& profile_path) {
  if (layer < 0 || layer >= n_layers || kv_head < 0 || kv_head >= n_kv_heads) {
    return InvalidArgumentError("head (" + std::to_string(layer) + ", " + std::to_string(kv_head) +
                                ") is outside " + std::to_string(n_layers) + " x " +
                                std::to_string(n_kv_heads));
  }
  const int n = n_layers * n_kv_heads;
  HeadProfile p;
  p.model = "single-head";
  p.n_layers = n_layers;
  p.n_kv_heads = n_kv_heads;
  p.score.assign(static_cast<size_t>(n), 1.0);
  p.score[static_cast<size_t>(layer) * n_kv_heads + kv_head] = 0.0;
  TQ_RETURN_IF_ERROR(SaveHeadProfile(p, profile_path));
  KvSpec spec;
  spec.preset = std::to_string(n - 1) + ":0:1";
  spec.profile_path = profile_path;
  spec.hot_format = "f16";
  spec.active_format = "f16";
  spec.sparse_format = format;
  return spec;
}

double MeanKld(const float* ref, const float* test, int rows, int vocab, ThreadPool& pool) {
  if (rows <= 0) return 0;
  std::vector<double> part(static_cast<size_t>(pool.size()), 0.0);
  pool.ParallelFor(rows, [&](int64_t begin, int64_t end, int t) {
    double sum = 0;
    for (int64_t r = begin; r < end; ++r) {
      const float* a = ref + r * vocab;
      const float* b = test + r * vocab;
      sum += KlDivergenceRow(a, b, vocab);
    }
    part[static_cast<size_t>(t)] += sum;
  });
  double sum = 0;
  for (double s : part) sum += s;
  return sum / rows;
}

StatusOr<HeadProfile> Calibrate(const Model& model, const Tokenizer& tok, const std::string& text,
                                const CalibrateOptions& o, ThreadPool& pool,
                                const SensitivityProgress& progress, const ChunkProgress& chunk_progress) {
  if (o.method == CalibrationMethod::kSensitivity) {
    return CalibrateSensitivity(model, tok, text, o, pool, progress);
  }
  return CalibrateConcentration(model, tok, text, o, pool, chunk_progress);
}

}  // namespace tq::engine
