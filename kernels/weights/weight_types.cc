#include "kernels/weights/weight_types.h"

#include <array>
#include <string>

namespace tq::kernels {
namespace {

using T = WeightType;

// Sizes are the GGUF block layouts (see docs/models.md for the supported ones).
constexpr std::array<WeightTypeInfo, 32> kWeightTypes = {{
    {T::kF32, "F32", 1, 4, true},
    {T::kF16, "F16", 1, 2, true},
    {T::kQ4_0, "Q4_0", 32, 18, true},
    {T::kQ4_1, "Q4_1", 32, 20, true},
    {T::kQ5_0, "Q5_0", 32, 22, true},
    {T::kQ5_1, "Q5_1", 32, 24, true},
    {T::kQ8_0, "Q8_0", 32, 34, true},
    {T::kQ8_1, "Q8_1", 32, 40, false},
    {T::kQ2_K, "Q2_K", kQkK, 84, false},
    {T::kQ3_K, "Q3_K", kQkK, 110, false},
    {T::kQ4_K, "Q4_K", kQkK, 144, true},
    {T::kQ5_K, "Q5_K", kQkK, 176, true},
    {T::kQ6_K, "Q6_K", kQkK, 210, true},
    {T::kQ8_K, "Q8_K", kQkK, 292, false},
    {T::kIQ2_XXS, "IQ2_XXS", kQkK, 66, false},
    {T::kIQ2_XS, "IQ2_XS", kQkK, 74, false},
    {T::kIQ3_XXS, "IQ3_XXS", kQkK, 98, false},
    {T::kIQ1_S, "IQ1_S", kQkK, 50, false},
    {T::kIQ4_NL, "IQ4_NL", 32, 18, false},
    {T::kIQ3_S, "IQ3_S", kQkK, 110, false},
    {T::kIQ2_S, "IQ2_S", kQkK, 82, false},
    {T::kIQ4_XS, "IQ4_XS", kQkK, 136, false},
    {T::kI8, "I8", 1, 1, false},
    {T::kI16, "I16", 1, 2, false},
    {T::kI32, "I32", 1, 4, false},
    {T::kI64, "I64", 1, 8, false},
    {T::kF64, "F64", 1, 8, false},
    {T::kIQ1_M, "IQ1_M", kQkK, 56, false},
    {T::kBF16, "BF16", 1, 2, true},
    {T::kTQ1_0, "TQ1_0", kQkK, 54, false},
    {T::kTQ2_0, "TQ2_0", kQkK, 66, false},
    {T::kMXFP4, "MXFP4", 32, 17, false},
}};

}  // namespace

std::span<const WeightTypeInfo> AllWeightTypes() {
  return kWeightTypes;
}

const WeightTypeInfo* FindWeightType(uint32_t id) {
  for (const WeightTypeInfo& info : kWeightTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const WeightTypeInfo& GetWeightTypeInfo(WeightType type) {
  const WeightTypeInfo* info = FindWeightType(static_cast<uint32_t>(type));
  assert(info != nullptr && "every WeightType enumerator has a table row");
  return *info;
}

StatusOr<uint64_t> WeightBytes(WeightType type, int64_t n) {
  const WeightTypeInfo& info = GetWeightTypeInfo(type);
  if (n < 0 || n % info.block_size != 0) {
    return InvalidArgumentError(std::to_string(n) + " elements of type " + std::string(info.name) +
                                " are not a whole number of " + std::to_string(info.block_size) +
                                "-element blocks");
  }
  return static_cast<uint64_t>(n / info.block_size) * static_cast<uint64_t>(info.block_bytes);
}

Status CheckWeightTypeSupported(WeightType type, std::string_view tensor_name) {
  const WeightTypeInfo& info = GetWeightTypeInfo(type);
  if (info.supported) return Status::Ok();
  return UnimplementedError(
      "tensor '" + std::string(tensor_name) + "' has type " + std::string(info.name) +
      ", which tqserve does not support (supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 "
      "Q4_K Q5_K Q6_K)");
}

}  // namespace tq::kernels
