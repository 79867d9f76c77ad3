// Builds small GGUF files in memory for tests and fuzz seeds, including deliberately broken ones (raw values,
// overridden counts, versions and offsets).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/weights/weight_types.h"

namespace tq::engine::testing {

class GgufBuilder {
 public:
  GgufBuilder& AddU8(std::string_view k, uint8_t v) { return Scalar(k, 0, v); }
  GgufBuilder& AddI8(std::string_view k, int8_t v) { return Scalar(k, 1, v); }
  GgufBuilder& AddU16(std::string_view k, uint16_t v) { return Scalar(k, 2, v); }
  GgufBuilder& AddI16(std::string_view k, int16_t v) { return Scalar(k, 3, v); }
  GgufBuilder& AddU32(std::string_view k, uint32_t v) { return Scalar(k, 4, v); }
  GgufBuilder& AddI32(std::string_view k, int32_t v) { return Scalar(k, 5, v); }
  GgufBuilder& AddF32(std::string_view k, float v) { return Scalar(k, 6, v); }
  GgufBuilder& AddBool(std::string_view k, bool v) { return Scalar(k, 7, static_cast<uint8_t>(v)); }
  GgufBuilder& AddU64(std::string_view k, uint64_t v) { return Scalar(k, 10, v); }
  GgufBuilder& AddI64(std::string_view k, int64_t v) { return Scalar(k, 11, v); }
  GgufBuilder& AddF64(std::string_view k, double v) { return Scalar(k, 12, v); }
  GgufBuilder& AddString(std::string_view k, std::string_view v) {
    std::vector<uint8_t> body;
    PutString(body, v);
    return AddRawKv(k, 8, body);
  }
  GgufBuilder& AddStringArray(std::string_view k, const std::vector<std::string>& v) {
    std::vector<uint8_t> body;
    Put<uint32_t>(body, 8);
    Put<uint64_t>(body, v.size());
    for (const std::string& s : v) PutString(body, s);
    return AddRawKv(k, 9, body);
  }
  GgufBuilder& AddF32Array(std::string_view k, const std::vector<float>& v) { return NumArray(k, 6, v); }
  GgufBuilder& AddI32Array(std::string_view k, const std::vector<int32_t>& v) { return NumArray(k, 5, v); }
  // [[1], [2, 3]] as an array of uint8 arrays.
  GgufBuilder& AddNestedArray(std::string_view k) {
    std::vector<uint8_t> body;
    Put<uint32_t>(body, 9);
    Put<uint64_t>(body, 2);
    Put<uint32_t>(body, 0);
    Put<uint64_t>(body, 1);
    Put<uint8_t>(body, 1);
    Put<uint32_t>(body, 0);
    Put<uint64_t>(body, 2);
    Put<uint8_t>(body, 2);
    Put<uint8_t>(body, 3);
    return AddRawKv(k, 9, body);
  }
  // A key with a raw type id and raw value bytes.
  GgufBuilder& AddRawKv(std::string_view k, uint32_t type, const std::vector<uint8_t>& value) {
    PutString(kvs_, k);
    Put<uint32_t>(kvs_, type);
    kvs_.insert(kvs_.end(), value.begin(), value.end());
    ++n_kv_;
    return *this;
  }
  GgufBuilder& SetAlignment(uint32_t a) {
    alignment_ = a;
    return AddU32("general.alignment", a);
  }

  // A tensor of `dims` (dims[0] contiguous); its data is zero bytes, placed at the next aligned offset unless
  // offset_override is given.
  GgufBuilder& AddTensor(std::string_view name, const std::vector<int64_t>& dims, kernels::WeightType type,
                         uint64_t offset_override = UINT64_MAX) {
    PutString(infos_, name);
    Put<uint32_t>(infos_, static_cast<uint32_t>(dims.size()));
    uint64_t n = 1;
    for (int64_t d : dims) {
      Put<uint64_t>(infos_, static_cast<uint64_t>(d));
      n *= static_cast<uint64_t>(d);
    }
    Put<uint32_t>(infos_, static_cast<uint32_t>(type));
    uint64_t bytes = 0;
    if (const kernels::WeightTypeInfo* info = kernels::FindWeightType(static_cast<uint32_t>(type))) {
      bytes = n / static_cast<uint64_t>(info->block_size) * static_cast<uint64_t>(info->block_bytes);
      if (bytes > (1u << 20)) bytes = 0;  // absurd sizes are for error tests; no data for them
    }
    const uint64_t offset = (data_size_ + alignment_ - 1) / alignment_ * alignment_;
    Put<uint64_t>(infos_, offset_override != UINT64_MAX ? offset_override : offset);
    data_size_ = offset + bytes;
    ++n_tensors_;
    return *this;
  }

  void set_version(uint32_t v) { version_ = v; }
  void set_kv_count_override(uint64_t n) { kv_count_override_ = n; }
  void set_tensor_count_override(uint64_t n) { tensor_count_override_ = n; }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    Put<uint32_t>(out, version_);
    Put<uint64_t>(out, tensor_count_override_ != UINT64_MAX ? tensor_count_override_ : n_tensors_);
    Put<uint64_t>(out, kv_count_override_ != UINT64_MAX ? kv_count_override_ : n_kv_);
    out.insert(out.end(), kvs_.begin(), kvs_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    if (n_tensors_ > 0) {
      out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
      out.resize(out.size() + data_size_, 0);
    }
    return out;
  }

 private:
  template <typename T>
  static void Put(std::vector<uint8_t>& out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  static void PutString(std::vector<uint8_t>& out, std::string_view s) {
    Put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  template <typename T>
  GgufBuilder& Scalar(std::string_view k, uint32_t type, T v) {
    std::vector<uint8_t> body;
    Put<T>(body, v);
    return AddRawKv(k, type, body);
  }
  template <typename T>
  GgufBuilder& NumArray(std::string_view k, uint32_t type, const std::vector<T>& v) {
    std::vector<uint8_t> body;
    Put<uint32_t>(body, type);
    Put<uint64_t>(body, v.size());
    for (T x : v) Put<T>(body, x);
    return AddRawKv(k, 9, body);
  }

  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  uint64_t n_kv_ = 0, n_tensors_ = 0, data_size_ = 0;
  uint64_t kv_count_override_ = UINT64_MAX, tensor_count_override_ = UINT64_MAX;
  std::vector<uint8_t> kvs_, infos_;
};

}  // namespace tq::engine::testing
