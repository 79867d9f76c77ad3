#include "engine/llm/arch.h"

#include <string>

namespace tq::engine {
namespace {

// Gemma 3: embeddings scaled by sqrt(n_embd), QK norm, post-attention and post-FFN norms, GeGLU, five
// sliding-window layers (RoPE base 10000) then one global layer (the file's base), tied output. Its GGUF norm
// weights already hold Gemma's (1 + w).
constexpr ArchInfo kArchs[] = {
    {.name = "llama", .rope = RopeStyle::kAdjacent},
    {.name = "mistral", .rope = RopeStyle::kAdjacent},
    {.name = "qwen2", .rope = RopeStyle::kHalves, .qkv_bias = true},
    // Qwen 3: per-head RMSNorm of q and k before RoPE, no biases.
    {.name = "qwen3", .rope = RopeStyle::kHalves, .qk_norm = true},
    // Phi-3: fused attn_qkv and gate+up (ffn_up [2 n_ff, n_embd]); llama.cpp runs it without sliding windows.
    {.name = "phi3", .rope = RopeStyle::kHalves, .fused_gate_up = true},
    {.name = "gemma3",
     .rope = RopeStyle::kHalves,
     .embed_scale = true,
     .qk_norm = true,
     .post_norms = true,
     .ffn = FfnActivation::kGeluTanh,
     .swa_period = 6,
     .rope_base_local = 10000.0f},
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
