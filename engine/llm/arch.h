// Model architectures as one table: what differs between the LLaMA-family variants tqserve runs.
#pragma once

#include <string_view>

#include "common/status.h"

namespace tq::engine {

// How RoPE pairs the dimensions of a head: kAdjacent rotates (x[2i], x[2i+1]) (GGUF llama: the converter permutes
// Q/K rows for this); kHalves rotates (x[i], x[i + n_rot/2]) (GPT-NeoX style: qwen2, gemma).
enum class RopeStyle { kAdjacent, kHalves };

// The feed-forward's gate activation: silu(gate) * up (SwiGLU) or gelu_tanh(gate) * up (GeGLU).
enum class FfnActivation { kSilu, kGeluTanh };

struct ArchInfo {
  std::string_view name;  // general.architecture
  RopeStyle rope;
  bool qkv_bias = false;          // attn_q/k/v have bias tensors
  bool embed_scale = false;       // the token embedding is multiplied by sqrt(n_embd)
  bool qk_norm = false;           // per-head RMSNorm of q and k (attn_q_norm, attn_k_norm) before RoPE
  bool post_norms = false;        // RMSNorm of the attention and FFN outputs before the residual adds
                                  // (post_attention_norm, post_ffw_norm)
  FfnActivation ffn = FfnActivation::kSilu;
  bool fused_gate_up = false;     // ffn_up holds the gate rows then the up rows ([2 n_ff, n_embd]), no ffn_gate
                                  // (Phi-3); attn_qkv (q, k, v rows stacked) is accepted for every architecture
  // Sliding-window attention (when the file gives {arch}.attention.sliding_window): in every run of
  // `swa_period` layers the last is global and the others attend to the window only; 0: every layer global.
  int swa_period = 0;
  float rope_base_local = 0.0f;   // RoPE base of the sliding-window layers; 0: the file's rope.freq_base
  // Gemma's 27B models scale q.k by 1 / sqrt(n_embd / n_heads) (their query_pre_attn_scalar), the others by
  // 1 / sqrt(head_dim); GGUF does not record it, so a model with this many layers is taken for the 27B (as
  // llama.cpp decides). 0: always 1 / sqrt(head_dim).
  int wide_query_layers = 0;
};

// The row for `name` (e.g. "llama", "mistral", "qwen2"), or unimplemented naming the architecture and the list.
StatusOr<const ArchInfo*> FindArch(std::string_view name);

}  // namespace tq::engine
