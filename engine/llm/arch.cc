#include "engine/llm/arch.h"

#include <string>

namespace tq::engine {
namespace {

// Gemma 2: embeddings scaled by sqrt(n_embd), post-attention and post-FFN norms, GeGLU, sliding-window and global
// layers alternating (even layers sliding), attention scores and final logits soft-capped (the file's
// attn_logit_softcapping and final_logit_softcapping), tied output.
// Gemma 3: as Gemma 2 with QK norm instead of score capping, and five sliding-window layers (RoPE base 10000)
// then one global layer (the file's base). Gemma GGUF norm weights already hold Gemma's (1 + w).
constexpr ArchInfo kArchs[] = {
    {.name = "llama", .rope = RopeStyle::kAdjacent},
    {.name = "mistral", .rope = RopeStyle::kAdjacent},
    {.name = "qwen2", .rope = RopeStyle::kHalves, .qkv_bias = true},
    // Qwen 3: per-head RMSNorm of q and k before RoPE, no biases.
    {.name = "qwen3", .rope = RopeStyle::kHalves, .qk_norm = true},
    // Phi-3: fused attn_qkv and gate+up (ffn_up [2 n_ff, n_embd]); llama.cpp runs it without sliding windows.
    {.name = "phi3", .rope = RopeStyle::kHalves, .fused_gate_up = true},
    {.name = "gemma2",
     .rope = RopeStyle::kHalves,
     .embed_scale = true,
     .post_norms = true,
     .ffn = FfnActivation::kGeluTanh,
     .swa_period = 2,
     .wide_query_layers = 46},
    {.name = "gemma3",
     .rope = RopeStyle::kHalves,
     .embed_scale = true,
     .qk_norm = true,
     .post_norms = true,
     .ffn = FfnActivation::kGeluTanh,
     .swa_period = 6,
     .rope_base_local = 10000.0f,
     .wide_query_layers = 62},
};

}  // namespace

StatusOr<const ArchInfo*> FindArch(std::string_view name) {
  std::string known;
  for (const ArchInfo& arch : kArchs) {
    if (arch.name == name) return &arch;
    known += (known.empty() ? "" : ", ") + std::string(arch.name);
  }
  return UnimplementedError("architecture '" + std::string(name) + "' is not supported (supported: " + known + ")");
}

}  // namespace tq::engine
