// Model architectures as one table: what differs between the LLaMA-family variants tqserve runs.
#pragma once

#include <string_view>

#include "common/status.h"

namespace tq::engine {

// How RoPE pairs the dimensions of a head: kAdjacent rotates (x[2i], x[2i+1]) (GGUF llama: the converter permutes
// Q/K rows for this); kHalves rotates (x[i], x[i + n_rot/2]) (GPT-NeoX style: qwen2, gemma).
enum class RopeStyle { kAdjacent, kHalves };

struct ArchInfo {
  std::string_view name;  // general.architecture
  RopeStyle rope;
  bool qkv_bias;          // attn_q/k/v have bias tensors
};

// The row for `name` (e.g. "llama", "mistral", "qwen2"), or unimplemented naming the architecture and the list.
StatusOr<const ArchInfo*> FindArch(std::string_view name);

}  // namespace tq::engine
