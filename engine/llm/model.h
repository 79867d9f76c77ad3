// A LLaMA-family model on the CPU: the GGUF file, its hyperparameters and weights, and the batched forward pass.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/llm/hparams.h"
#include "engine/kv/kv_cache.h"
#include "engine/llm/thread_pool.h"
#include "engine/llm/weights.h"
#include "engine/model/gguf.h"

namespace tq::engine {

// One token of a forward batch: it attends to positions [0, pos] of its sequence's KV.
class LoraAdapter;

struct BatchToken {
  int32_t token = 0;
  int pos = 0;              // position in the sequence; KV rows [0, pos) must be filled already or in this batch
  SequenceKv* kv = nullptr;
  bool want_logits = false;
  bool want_hidden = false;  // its final hidden state (after the output norm) goes into Forward's `hidden`
  const LoraAdapter* lora = nullptr;  // the adapter this token's sequence runs under; null: the base model
};

// The residual stream at the input of every layer of one Forward: x, [n_layers][batch][n_embd] f32.
struct LayerInputs {
  std::vector<float> x;
};

// For passes that differ from an earlier pass over the same batch only from some layer on (calibrate --method
// sensitivity changes one head's KV format per pass): `record` gets the inputs of layers [first_layer, n_layers);
// with `resume` (recorded by a pass over the same batch, with the same KV in layers below first_layer) the pass
// starts at first_layer from its recorded input, bit for bit as a whole pass would, and the sequences get K/V of
// layers [first_layer, n_layers) only.
struct ForwardLayers {
  LayerInputs* record = nullptr;
  const LayerInputs* resume = nullptr;
  int first_layer = 0;
};

class Model {
 public:
  static StatusOr<std::unique_ptr<Model>> Open(const std::string& path);

  const HParams& hparams() const { return hp_; }
  const GgufFile& gguf() const { return *gguf_; }
  uint64_t weight_bytes() const { return weights_.total_bytes; }
  const ModelWeights& weights() const { return weights_; }

  // Runs the batch through the model, writing K/V of every token into its sequence and, for each token with
  // want_logits, vocab_size logits into `logits` (in batch order, rows of vocab_size floats).
  // Tokens of one sequence must come in increasing position order. Errors: a token id outside the vocabulary,
  // a position outside the sequence's context.
  // A KV read fault (a cold page that cannot be read back) does not stop the pass: every sequence's K/V is
  // appended and the logits are filled, the faulted sequences have kv->fault() set (their logits are garbage),
  // and the result is data_loss. The caller recomputes those sequences (SequenceKv::Reset) and may use the others.
  // With `hidden`, each token with want_hidden gets its final hidden state, normed as the logits' input, as one
  // row of n_embd floats (in batch order).
  // With `layers`, the pass may record the residual stream at each layer's input, or start at a later layer from
  // such a record (ForwardLayers).
  Status Forward(std::span<const BatchToken> batch, ThreadPool& pool, std::vector<float>* logits,
                 std::vector<float>* hidden = nullptr, const ForwardLayers& layers = {}) const;

 private:
  Model() = default;

  std::unique_ptr<GgufFile> gguf_;
  HParams hp_;
  ModelWeights weights_;
};

}  // namespace tq::engine
