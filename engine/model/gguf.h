// A GGUF v2/v3 reader over a memory map: header, metadata (every value type, arrays included), tensor infos,
// alignment and data offsets.
//
// File layout (all little-endian):
//   magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//   kv_count x  { key: string | value_type u32 | value }
//   tensor_count x { name: string | n_dims u32 | dims u64[n_dims] | type u32 | offset u64 }
//   padding to `alignment` (key general.alignment, u32 power of two, default 32) | tensor data
// string = u64 length + bytes (no terminator); array value = element type u32 + count u64 + elements.
// A tensor's bytes start at data_offset + offset (offset a multiple of the alignment); dims[0] is the
// contiguous dimension (a row).
//
// Every length, count, type and offset is checked against the file: a truncated, corrupt or unsupported file
// is a Status error that names the key or tensor, never a crash. Views (string_view, data pointers) point
// into the mapped bytes and live as long as the GgufFile.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/model/mapped_file.h"
#include "kernels/weights/weight_types.h"

namespace tq::engine {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array", ...; "unknown" outside the enum.
std::string_view GgufValueTypeName(GgufValueType type);

// One metadata value. Scalars: integers in `u` (unsigned types) or `i` (signed), floats in `f`, bool in `b`,
// string in `str`. Arrays: `elem_type` and `count`; numeric and bool elements stay in the file (`raw`, packed
// little-endian), strings are in `strings`, nested arrays in `arrays`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string_view str;
  GgufValueType elem_type = GgufValueType::kUint8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;

  bool IsInteger() const;
  bool IsArray() const { return type == GgufValueType::kArray; }
  // Element k of a numeric or bool array as a double (precondition: k < count, elements numeric or bool).
  double NumericElement(uint64_t k) const;
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string_view name;
  int n_dims = 0;
  std::array<int64_t, 4> dims = {1, 1, 1, 1};  // dims[0] is contiguous; unused dims are 1
  kernels::WeightType type = kernels::WeightType::kF32;
  uint64_t offset = 0;            // from the start of the data section
  uint64_t bytes = 0;             // size of the data
  const uint8_t* data = nullptr;  // into the mapped file

  int64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
};

class GgufFile {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;

  // Maps and parses the file at `path`.
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  // Parses `bytes`, which the caller keeps alive and unchanged for the life of the result.
  static StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }
  std::span<const uint8_t> bytes() const { return bytes_; }  // the whole file

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Typed getters. Missing key: NotFound naming the key; wrong type or out of range: InvalidArgument naming
  // the key. GetUint accepts any integer type holding a non-negative value, GetFloat any number.
  StatusOr<uint64_t> GetUint(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;
  StatusOr<double> GetFloat(std::string_view key) const;
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::string_view> GetString(std::string_view key) const;
  StatusOr<std::span<const std::string_view>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  // The same with a fallback for a missing key (a present key of the wrong type is still an error).
  StatusOr<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  StatusOr<double> GetFloatOr(std::string_view key, double fallback) const;
  StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;
  StatusOr<std::string_view> GetStringOr(std::string_view key, std::string_view fallback) const;

 private:
  GgufFile() = default;
  Status ParseAll();

  MappedFile file_;  // empty when parsing caller-owned bytes
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Short text of a value for listings: scalars in full, strings quoted and cut at `max_chars`, arrays as
// "[type x count]" followed by their first elements.
std::string GgufValueToString(const GgufValue& value, size_t max_chars = 60);

}  // namespace tq::engine
