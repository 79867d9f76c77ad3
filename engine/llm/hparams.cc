#include "engine/llm/hparams.h"

#include <cmath>

namespace tq::engine {
namespace {

StatusOr<int> GetPositive(const GgufFile& g, const std::string& key, int max) {
  TQ_ASSIGN_OR_RETURN(uint64_t v, g.GetUint(key));
  if (v == 0 || v > static_cast<uint64_t>(max)) {
    return InvalidArgumentError("metadata " + key + " = " + std::to_string(v) + " is out of range [1, " +
                                std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

StatusOr<HParams> ReadHParams(const GgufFile& g) {
  HParams h;
  TQ_ASSIGN_OR_RETURN(std::string_view arch_name, g.GetString("general.architecture"));
  TQ_ASSIGN_OR_RETURN(h.arch, FindArch(arch_name));
  const std::string a(arch_name);
  TQ_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  h.name = std::string(name);
  TQ_ASSIGN_OR_RETURN(h.n_layers, GetPositive(g, a + ".block_count", 1024));
  TQ_ASSIGN_OR_RETURN(h.n_embd, GetPositive(g, a + ".embedding_length", 1 << 16));
  TQ_ASSIGN_OR_RETURN(h.n_ff, GetPositive(g, a + ".feed_forward_length", 1 << 18));
  TQ_ASSIGN_OR_RETURN(h.n_heads, GetPositive(g, a + ".attention.head_count", 1024));
  if (g.Find(a + ".attention.head_count_kv") != nullptr) {
    TQ_ASSIGN_OR_RETURN(h.n_kv_heads, GetPositive(g, a + ".attention.head_count_kv", 1024));
  } else {
    h.n_kv_heads = h.n_heads;
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    return InvalidArgumentError(a + ".attention.head_count (" + std::to_string(h.n_heads) +
                                ") is not a multiple of " + a + ".attention.head_count_kv (" +
                                std::to_string(h.n_kv_heads) + ")");
  }
  if (g.Find(a + ".attention.key_length") != nullptr) {
    TQ_ASSIGN_OR_RETURN(h.head_dim, GetPositive(g, a + ".attention.key_length", 1024));
  } else {
    if (h.n_embd % h.n_heads != 0) {
      return InvalidArgumentError(a + ".embedding_length is not a multiple of " + a + ".attention.head_count");
    }
    h.head_dim = h.n_embd / h.n_heads;
  }
  if (h.head_dim % 2 != 0) return InvalidArgumentError("head dimension " + std::to_string(h.head_dim) + " is odd");
  TQ_ASSIGN_OR_RETURN(uint64_t n_rot, g.GetUintOr(a + ".rope.dimension_count", h.head_dim));
  if (n_rot == 0 || n_rot > static_cast<uint64_t>(h.head_dim) || n_rot % 2 != 0) {
    return InvalidArgumentError(a + ".rope.dimension_count = " + std::to_string(n_rot) +
                                " must be even and at most the head dimension " + std::to_string(h.head_dim));
  }
  h.n_rot = static_cast<int>(n_rot);
  TQ_ASSIGN_OR_RETURN(h.n_ctx_train, GetPositive(g, a + ".context_length", 1 << 24));
  TQ_ASSIGN_OR_RETURN(double eps, g.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
  if (!(eps > 0 && eps < 1)) return InvalidArgumentError(a + ".attention.layer_norm_rms_epsilon out of (0, 1)");
  h.rms_eps = static_cast<float>(eps);
  TQ_ASSIGN_OR_RETURN(double base, g.GetFloatOr(a + ".rope.freq_base", 10000.0));
  if (!(base > 1)) return InvalidArgumentError(a + ".rope.freq_base must be > 1");
  h.rope_base = static_cast<float>(base);
  if (g.Find(a + ".attention.sliding_window") != nullptr) {
    TQ_ASSIGN_OR_RETURN(h.sliding_window, GetPositive(g, a + ".attention.sliding_window", 1 << 24));
  }
  TQ_ASSIGN_OR_RETURN(double softcap, g.GetFloatOr(a + ".final_logit_softcapping", 0.0));
  if (softcap < 0) return InvalidArgumentError(a + ".final_logit_softcapping must not be negative");
  h.logit_softcap = static_cast<float>(softcap);
  TQ_ASSIGN_OR_RETURN(double attn_softcap, g.GetFloatOr(a + ".attn_logit_softcapping", 0.0));
  if (!(attn_softcap >= 0 && attn_softcap < 1e30)) {
    return InvalidArgumentError(a + ".attn_logit_softcapping must be a finite number >= 0");
  }
  h.attn_softcap = static_cast<float>(attn_softcap);
  if (h.arch->wide_query_layers > 0 && h.n_layers == h.arch->wide_query_layers) {
    h.attn_scale = 1.0f / std::sqrt(static_cast<float>(h.n_embd) / static_cast<float>(h.n_heads));
  }
  TQ_ASSIGN_OR_RETURN(const uint64_t pooling, g.GetUintOr(a + ".pooling_type", uint64_t{1} << 32));
  if (pooling != uint64_t{1} << 32) {
    if (pooling > 3) return InvalidArgumentError(a + ".pooling_type must be 0 to 3");
    h.pooling_type = static_cast<int>(pooling);
  }
  TQ_ASSIGN_OR_RETURN(auto tokens, g.GetStringArray("tokenizer.ggml.tokens"));
  h.vocab_size = static_cast<int>(tokens.size());
  if (h.vocab_size == 0) return InvalidArgumentError("tokenizer.ggml.tokens is empty");
  return h;
}

}  // namespace tq::engine
