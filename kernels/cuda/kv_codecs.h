// DeviceCodecs: the KV formats a GPU holds pages of, uploaded once (code tables, Lloyd-Max boundaries, Hadamard
// parameters, QJL projection, and each code domain as a dense [head_dim][head_dim] matrix for the queries and the
// outputs). Codec indices are stable for the life of the object; the kernels take them per page.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/codec_desc.h"
#include "kernels/cuda/runtime.h"
#include "kernels/formats/codec.h"

namespace tq::gpu {

class DeviceCodecs {
 public:
  // The codec's index: uploaded on the first call for this codec (same format, head_dim, seed, outlier set),
  // the existing index after. Not thread-safe.
  StatusOr<int> Add(const kernels::KvCodec& codec);

  int size() const { return static_cast<int>(host_.size()); }
  // Host copy of the descriptor (its pointers are device pointers).
  const GpuCodec& desc(int index) const { return host_[index]; }
  const kernels::KvCodec& codec(int index) const { return *codecs_[index]; }
  // Device array of every descriptor, [size()].
  const GpuCodec* device_table() const { return table_.as<GpuCodec>(); }

 private:
  std::vector<GpuCodec> host_;
  std::vector<const kernels::KvCodec*> codecs_;
  std::vector<DeviceBuffer> storage_;  // tables, params, matrices of every codec
  DeviceBuffer table_;
};

}  // namespace tq::gpu
