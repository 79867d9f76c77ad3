// Hyperparameters of a GGUF model, read from its metadata ("{arch}.block_count", ...).
#pragma once

#include <string>

#include "common/status.h"
#include "engine/llm/arch.h"
#include "engine/model/gguf.h"

namespace tq::engine {

struct HParams {
  const ArchInfo* arch = nullptr;
  std::string name;           // general.name, or the file's base name
  int n_layers = 0;
  int n_embd = 0;             // model width
  int n_ff = 0;               // feed-forward width
  int n_heads = 0;            // query heads
  int n_kv_heads = 0;         // key/value heads (GQA: n_heads is a multiple)
  int head_dim = 0;           // per head; attention.key_length or n_embd / n_heads
  int n_rot = 0;              // RoPE dimensions per head (rope.dimension_count or head_dim)
  int n_ctx_train = 0;        // trained context length
  int vocab_size = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  int sliding_window = 0;        // {arch}.attention.sliding_window; 0: none
  float logit_softcap = 0.0f;    // {arch}.final_logit_softcapping: logits = c * tanh(logits / c); 0: none
  float attn_softcap = 0.0f;     // {arch}.attn_logit_softcapping: scores = c * tanh(scores / c); 0: none
  float attn_scale = 0.0f;       // the softmax scale of q.k (ArchInfo::wide_query_layers); 0: 1 / sqrt(head_dim)
  int pooling_type = -1;         // {arch}.pooling_type (0 none, 1 mean, 2 cls, 3 last); -1: absent

  // Whether layer l attends to the sliding window only (see ArchInfo::swa_period).
  bool IsSlidingLayer(int l) const {
    return sliding_window > 0 && arch->swa_period > 0 && l % arch->swa_period != arch->swa_period - 1;
  }
  float RopeBase(int l) const {
    return IsSlidingLayer(l) && arch->rope_base_local > 0 ? arch->rope_base_local : rope_base;
  }
};

// Reads and checks the hyperparameters; errors name the key.
StatusOr<HParams> ReadHParams(const GgufFile& gguf);

}  // namespace tq::engine
