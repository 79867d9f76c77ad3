// LoRA adapters in llama.cpp's GGUF format: low-rank deltas to some of a base model's matrices, applied at run
// time per sequence (several adapters, and the plain base, may share one batch). Adapter weights are F16 or F32,
// never quantized.
//
// File: general.type "adapter", adapter.type "lora", adapter.lora.alpha (f32; 0 or absent: no alpha scaling),
// general.architecture the base's. For each adapted matrix NAME (blk.N.attn_q.weight, ..., output.weight) two
// tensors: NAME.lora_a [rank, cols] and NAME.lora_b [rows, rank] (shapes as [rows, cols]; GGUF lists cols first),
// where NAME is [rows, cols]. The product W x becomes W x + scale * B (A x) with
// scale = user_scale * alpha / rank (user_scale where alpha is 0), as llama.cpp computes it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/llm/weights.h"
#include "engine/model/gguf.h"

namespace tq::engine {

class ThreadPool;
struct HParams;

// The matrices of a layer an adapter may change.
enum class LoraTarget { kQ, kK, kV, kOut, kGate, kUp, kDown, kCount };

struct LoraPair {
  Weight a;  // [rank, cols of the base matrix]
  Weight b;  // [rows of the base matrix, rank]
  float scale = 0;
  // B transposed to f32, [rank, rows]: the delta is rank vector updates y += (scale * A x)[k] * bt[k] (exact: f16
  // widens to f32 without rounding).
  std::vector<float> bt;
};

class LoraAdapter {
 public:
  // Opens `path` against the base model's shapes. Errors name the file and the problem: not a LoRA adapter, another
  // architecture, a tensor for a matrix the base lacks or of another shape, A and B ranks that differ, a quantized
  // tensor, a truncated file.
  static StatusOr<std::shared_ptr<const LoraAdapter>> Open(const std::string& path, const std::string& name,
                                                           float user_scale, const HParams& hp,
                                                           const ModelWeights& base);

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  float user_scale() const { return user_scale_; }
  int max_rank() const { return max_rank_; }
  // Bytes the adapter holds: its lora_a / lora_b tensors and the f32 copies of B (LoraPair::bt).
  uint64_t bytes() const { return bytes_; }
  int adapted_matrices() const { return adapted_; }
  // CRC32C of the file: part of the KV and prefix-cache keys, so that pages computed with one adapter are never
  // served to another (or to the base).
  uint32_t checksum() const { return checksum_; }

  // The delta of (layer, target), or nullptr where this adapter leaves the matrix alone.
  const LoraPair* Find(int layer, LoraTarget target) const {
    const LoraPair& p = layers_[layer][static_cast<int>(target)];
    return p.a.present() ? &p : nullptr;
  }
  const LoraPair* output() const { return output_.a.present() ? &output_ : nullptr; }

 private:
  LoraAdapter() = default;

  std::string name_, path_;
  float user_scale_ = 1;
  int max_rank_ = 0, adapted_ = 0;
  uint64_t bytes_ = 0;
  uint32_t checksum_ = 0;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::array<LoraPair, static_cast<int>(LoraTarget::kCount)>> layers_;
  LoraPair output_;
};

// The batch rows [of a forward pass] that run under one adapter.
struct LoraGroup {
  const LoraAdapter* adapter = nullptr;
  std::vector<int64_t> rows;
};

// y[r] += scale * B (A x[r]) for each group's rows r where its adapter changes `target` of `layer` (layer -1:
// the output matrix). x: [*, in] rows `x_stride` floats apart; y: [*, out] rows `y_stride` apart.
void ApplyLora(std::span<const LoraGroup> groups, int layer, LoraTarget target, const float* x, int64_t x_stride,
               float* y, int64_t y_stride, ThreadPool& pool);

}  // namespace tq::engine
