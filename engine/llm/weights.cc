#include "engine/llm/weights.h"

#include <cmath>
#include <cstring>
#include <string>

namespace tq::engine {
namespace {

std::string Shape(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// Binds tensor `name` of shape [rows, cols] (rows == 1 for vectors). Missing and `optional`: an absent Weight.
StatusOr<Weight> Bind(const GgufFile& g, const std::string& name, int64_t rows, int64_t cols, bool optional,
                      uint64_t* total) {
  const GgufTensorInfo* t = g.FindTensor(name);
  if (t == nullptr) {
    if (optional) return Weight{};
    return NotFoundError("tensor '" + name + "' is missing");
  }
  const int64_t t_rows = t->dims[1] * t->dims[2] * t->dims[3];
  if (t->dims[0] != cols || t_rows != rows) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + Shape(t_rows, t->dims[0]) + ", expected " +
                                Shape(rows, cols));
  }
  TQ_RETURN_IF_ERROR(kernels::CheckWeightTypeSupported(t->type, name));
  TQ_ASSIGN_OR_RETURN(uint64_t row_bytes, kernels::WeightBytes(t->type, cols));
  *total += t->bytes;
  return Weight{t->type, t->data, rows, cols, static_cast<int64_t>(row_bytes)};
}

// Rows [first, first + n) of w, as a weight of its own (fused tensors: attn_qkv, Phi-3's ffn_up).
Weight Rows(const Weight& w, int64_t first, int64_t n) {
  return Weight{w.type, w.data + first * w.row_bytes, n, w.cols, w.row_bytes};
}

Status RequireF32(const Weight& w, const std::string& name) {
  if (w.present() && w.type != kernels::WeightType::kF32) {
    return UnimplementedError("tensor '" + name + "' must be F32, it is " +
                              std::string(kernels::WeightTypeName(w.type)));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelWeights> BindWeights(const GgufFile& g, const HParams& hp) {
  ModelWeights m;
  uint64_t* total = &m.total_bytes;
  const int64_t q_dim = int64_t{hp.n_heads} * hp.head_dim;
  const int64_t kv_dim = int64_t{hp.n_kv_heads} * hp.head_dim;
  TQ_ASSIGN_OR_RETURN(m.token_embd, Bind(g, "token_embd.weight", hp.vocab_size, hp.n_embd, false, total));
  TQ_ASSIGN_OR_RETURN(m.output_norm, Bind(g, "output_norm.weight", 1, hp.n_embd, false, total));
  TQ_RETURN_IF_ERROR(RequireF32(m.output_norm, "output_norm.weight"));
  TQ_ASSIGN_OR_RETURN(m.output, Bind(g, "output.weight", hp.vocab_size, hp.n_embd, true, total));
  if (!m.output.present()) m.output = m.token_embd;  // tied embeddings
  for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (g.FindTensor(name) != nullptr) {
      return UnimplementedError(std::string("tensor '") + name + "': LongRoPE scaling (Phi-3 128k files) is not "
                                "supported; the 4k-context files are");
    }
  }
  TQ_ASSIGN_OR_RETURN(m.rope_freqs, Bind(g, "rope_freqs.weight", 1, hp.n_rot / 2, true, total));
  TQ_RETURN_IF_ERROR(RequireF32(m.rope_freqs, "rope_freqs.weight"));
  if (m.rope_freqs.present()) {
    for (int64_t i = 0; i < m.rope_freqs.cols; ++i) {
      float f;
      std::memcpy(&f, m.rope_freqs.data + i * sizeof(float), sizeof f);
      if (!(f > 0) || !std::isfinite(f)) {
        return InvalidArgumentError("tensor 'rope_freqs.weight' holds " + std::to_string(f) + " at " +
                                    std::to_string(i) + "; RoPE frequency divisors must be finite and > 0");
      }
    }
  }
  m.layers.resize(hp.n_layers);
  for (int l = 0; l < hp.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = m.layers[l];
    TQ_ASSIGN_OR_RETURN(L.attn_norm, Bind(g, p + "attn_norm.weight", 1, hp.n_embd, false, total));
    if (g.FindTensor(p + "attn_qkv.weight") != nullptr) {  // q, k and v rows in one tensor
      TQ_ASSIGN_OR_RETURN(Weight qkv, Bind(g, p + "attn_qkv.weight", q_dim + 2 * kv_dim, hp.n_embd, false, total));
      L.wq = Rows(qkv, 0, q_dim);
      L.wk = Rows(qkv, q_dim, kv_dim);
      L.wv = Rows(qkv, q_dim + kv_dim, kv_dim);
    } else {
      TQ_ASSIGN_OR_RETURN(L.wq, Bind(g, p + "attn_q.weight", q_dim, hp.n_embd, false, total));
      TQ_ASSIGN_OR_RETURN(L.wk, Bind(g, p + "attn_k.weight", kv_dim, hp.n_embd, false, total));
      TQ_ASSIGN_OR_RETURN(L.wv, Bind(g, p + "attn_v.weight", kv_dim, hp.n_embd, false, total));
    }
    TQ_ASSIGN_OR_RETURN(L.wo, Bind(g, p + "attn_output.weight", hp.n_embd, q_dim, false, total));
    const bool bias_required = hp.arch->qkv_bias;
    TQ_ASSIGN_OR_RETURN(L.bq, Bind(g, p + "attn_q.bias", 1, q_dim, !bias_required, total));
    TQ_ASSIGN_OR_RETURN(L.bk, Bind(g, p + "attn_k.bias", 1, kv_dim, !bias_required, total));
    TQ_ASSIGN_OR_RETURN(L.bv, Bind(g, p + "attn_v.bias", 1, kv_dim, !bias_required, total));
    TQ_ASSIGN_OR_RETURN(L.ffn_norm, Bind(g, p + "ffn_norm.weight", 1, hp.n_embd, false, total));
    if (hp.arch->fused_gate_up) {
      TQ_ASSIGN_OR_RETURN(Weight gate_up, Bind(g, p + "ffn_up.weight", 2 * hp.n_ff, hp.n_embd, false, total));
      L.w_gate = Rows(gate_up, 0, hp.n_ff);
      L.w_up = Rows(gate_up, hp.n_ff, hp.n_ff);
    } else {
      TQ_ASSIGN_OR_RETURN(L.w_gate, Bind(g, p + "ffn_gate.weight", hp.n_ff, hp.n_embd, false, total));
      TQ_ASSIGN_OR_RETURN(L.w_up, Bind(g, p + "ffn_up.weight", hp.n_ff, hp.n_embd, false, total));
    }
    TQ_ASSIGN_OR_RETURN(L.w_down, Bind(g, p + "ffn_down.weight", hp.n_embd, hp.n_ff, false, total));
    if (hp.arch->qk_norm) {
      TQ_ASSIGN_OR_RETURN(L.q_norm, Bind(g, p + "attn_q_norm.weight", 1, hp.head_dim, false, total));
      TQ_ASSIGN_OR_RETURN(L.k_norm, Bind(g, p + "attn_k_norm.weight", 1, hp.head_dim, false, total));
    }
    if (hp.arch->post_norms) {
      TQ_ASSIGN_OR_RETURN(L.post_attn_norm, Bind(g, p + "post_attention_norm.weight", 1, hp.n_embd, false, total));
      TQ_ASSIGN_OR_RETURN(L.post_ffn_norm, Bind(g, p + "post_ffw_norm.weight", 1, hp.n_embd, false, total));
    }
    for (const auto& [w, n] : {std::pair{&L.attn_norm, "attn_norm.weight"}, {&L.ffn_norm, "ffn_norm.weight"},
                               {&L.bq, "attn_q.bias"}, {&L.bk, "attn_k.bias"}, {&L.bv, "attn_v.bias"},
                               {&L.q_norm, "attn_q_norm.weight"}, {&L.k_norm, "attn_k_norm.weight"},
                               {&L.post_attn_norm, "post_attention_norm.weight"},
                               {&L.post_ffn_norm, "post_ffw_norm.weight"}}) {
      TQ_RETURN_IF_ERROR(RequireF32(*w, p + n));
    }
  }
  return m;
}

}  // namespace tq::engine
