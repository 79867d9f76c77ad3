#include "engine/eval/calibrate.h"

#include <algorithm>

namespace tq::engine {

StatusOr<HeadProfile> Calibrate(const Model& model, const Tokenizer& tok, const std::string& text, int ctx,
                                int chunks, ThreadPool& pool) {
  const HParams& hp = model.hparams();
  if (ctx < 32 || ctx > hp.n_ctx_train) {
    return InvalidArgumentError("ctx must be in [32, " + std::to_string(hp.n_ctx_train) + "]");
  }
  const std::vector<int32_t> tokens = tok.Encode(text, {.add_special = false});
  const int available = static_cast<int>(tokens.size() / ctx);
  if (available == 0) return InvalidArgumentError("the text is shorter than one chunk of " + std::to_string(ctx));
  const int n = chunks > 0 ? std::min(chunks, available) : available;
  ConcentrationStats stats(hp.n_layers, hp.n_kv_heads);
  std::vector<float> logits;
  for (int c = 0; c < n; ++c) {
    SequenceKv kv(hp, ctx);
    kv.set_concentration_stats(&stats);
    std::vector<BatchToken> batch;
    for (int j = 0; j < ctx; ++j) {
      int32_t t = tokens[static_cast<size_t>(c) * ctx + j];
      if (j == 0 && tok.add_bos() && tok.bos() >= 0) t = tok.bos();
      batch.push_back({t, j, &kv, false});
    }
    TQ_RETURN_IF_ERROR(model.Forward(batch, pool, &logits));
  }
  return stats.ToProfile(hp.name);
}

}  // namespace tq::engine
