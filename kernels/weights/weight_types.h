// The weight (tensor element) types of GGUF files: one table of portable facts per type.
//
// Ids are the GGUF file's tensor type ids and never change. Every type a GGUF file may name is listed so that
// the reader can size and bounds-check any tensor; `supported` says whether tqserve has kernels for it
// (a scalar reference dequantize and dot in weight_ref.h). A tensor of an unsupported type is a Status error
// naming the tensor (CheckWeightTypeSupported), never a crash.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace tq::kernels {

enum class WeightType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct WeightTypeInfo {
  WeightType type;
  std::string_view name;  // stable name as GGUF tools print it: "F32", "Q4_K", ...
  int32_t block_size;     // elements per block (1 for plain types)
  int32_t block_bytes;    // bytes per block
  bool supported;         // tqserve has reference (and fast) kernels for it
};

// Elements per K-quant super-block.
inline constexpr int kQkK = 256;

// All known types, in id order.
std::span<const WeightTypeInfo> AllWeightTypes();

// The row of a known id, or nullptr for an id this build does not know.
const WeightTypeInfo* FindWeightType(uint32_t id);

// The row of a known type (every enumerator has one).
const WeightTypeInfo& GetWeightTypeInfo(WeightType type);

inline std::string_view WeightTypeName(WeightType type) {
  return GetWeightTypeInfo(type).name;
}

// Bytes of `n` consecutive elements; InvalidArgument when n is negative or not a multiple of the block size.
StatusOr<uint64_t> WeightBytes(WeightType type, int64_t n);

// OK when tqserve has kernels for `type`; otherwise Unimplemented "tensor 'NAME' has type Q2_K, which ...".
Status CheckWeightTypeSupported(WeightType type, std::string_view tensor_name);

}  // namespace tq::kernels
