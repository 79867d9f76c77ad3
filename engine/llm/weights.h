// The tensors of a LLaMA-family model, bound to the mapped GGUF file and checked against the hyperparameters.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/llm/hparams.h"
#include "engine/model/gguf.h"

namespace tq::engine {

// A 1-D or 2-D weight: [rows, cols] with rows contiguous (GGUF dims[0] = cols). Data points into the mapping.
struct Weight {
  kernels::WeightType type = kernels::WeightType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;

  bool present() const { return data != nullptr; }
};

struct LayerWeights {
  Weight attn_norm;        // [n_embd] f32
  Weight wq, wk, wv, wo;   // [n_heads*head_dim, n_embd], [n_kv*head_dim, n_embd] x2, [n_embd, n_heads*head_dim]
  Weight bq, bk, bv;       // biases (qwen2), absent otherwise
  Weight ffn_norm;         // [n_embd] f32
  Weight w_gate, w_up;     // [n_ff, n_embd]
  Weight w_down;           // [n_embd, n_ff]
  Weight q_norm, k_norm;   // [head_dim] f32, per-head RMSNorm gains (ArchInfo::qk_norm), absent otherwise
  Weight post_attn_norm;   // [n_embd] f32, norm of the attention output (ArchInfo::post_norms), absent otherwise
  Weight post_ffn_norm;    // [n_embd] f32, norm of the FFN output (ArchInfo::post_norms), absent otherwise
};

struct ModelWeights {
  Weight token_embd;   // [vocab, n_embd]
  Weight output_norm;  // [n_embd]
  Weight output;       // [vocab, n_embd]; the token embedding when the model ties them
  Weight rope_freqs;   // [n_rot / 2] f32, divisors of the RoPE angles (Llama 3.1 scaling), absent otherwise
  std::vector<LayerWeights> layers;
  uint64_t total_bytes = 0;
};

// Binds every tensor; a missing tensor, a wrong shape or an unsupported type is an error naming the tensor.
StatusOr<ModelWeights> BindWeights(const GgufFile& gguf, const HParams& hp);

}  // namespace tq::engine
