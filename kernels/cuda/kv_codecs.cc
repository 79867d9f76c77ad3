#include "kernels/cuda/kv_codecs.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/formats/codebook.h"

namespace tq::gpu {
namespace {

using kernels::CodeDomain;
using kernels::CodeSegment;
using kernels::FormatKind;
using kernels::KvCodec;

template <typename T>
StatusOr<DeviceBuffer> Upload(const std::vector<T>& v) {
  TQ_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(sizeof(T) * std::max<size_t>(v.size(), 1)));
  if (!v.empty()) {
    TQ_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.get(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  }
  return b;
}

// A [d][d] with column j = transform(e_j): q' = A q for a linear transform of [d] vectors.
std::vector<float> DenseMatrix(int d, const std::function<void(const float*, float*)>& transform) {
  std::vector<float> a(static_cast<size_t>(d) * d), e(d), col(d);
  for (int j = 0; j < d; ++j) {
    std::fill(e.begin(), e.end(), 0.0f);
    e[j] = 1.0f;
    transform(e.data(), col.data());
    for (int i = 0; i < d; ++i) a[static_cast<size_t>(i) * d + j] = col[i];
  }
  return a;
}

}  // namespace

StatusOr<int> DeviceCodecs::Add(const KvCodec& in) {
  if (kernels::HasPageScale(in.format())) {
    return UnimplementedError("KV format " + std::string(kernels::FormatName(in.format())) +
                              ": 8-bit norms are not in the CUDA kernels yet (use its fp16-norm row on a GPU)");
  }
  // The process-wide cached codec with the same identity: it outlives this object.
  kernels::PageHeader header;
  header.format = static_cast<uint8_t>(in.format());
  header.head_dim = static_cast<uint16_t>(in.head_dim());
  header.seed = kernels::IsRotated(in.format()) ? in.seed() : 0;
  header.outlier_mask = in.outlier_mask();
  TQ_ASSIGN_OR_RETURN(const KvCodec* codec, KvCodec::ForHeader(header));
  for (size_t i = 0; i < codecs_.size(); ++i) {
    if (codecs_[i] == codec) return static_cast<int>(i);
  }
  const kernels::CodeLayout& layout = codec->layout();
  const int d = layout.head_dim;
  if (layout.segments.size() > static_cast<size_t>(kMaxSegments)) return InternalError("too many segments");
  GpuCodec g;
  const FormatKind kind = kernels::GetFormatInfo(layout.format).kind;
  g.kind = kind == FormatKind::kFloat16 ? GpuKind::kF16 : kind == FormatKind::kInt8 ? GpuKind::kInt8 : GpuKind::kTq;
  g.format = static_cast<int32_t>(layout.format);
  g.head_dim = d;
  g.norms = layout.norms;
  g.num_segments = static_cast<int32_t>(layout.segments.size());
  g.group_bytes = static_cast<int32_t>(layout.group_bytes);
  g.norms_offset = static_cast<int32_t>(layout.norms_offset);
  g.codes_offset = static_cast<int32_t>(layout.codes_offset);
  g.page_bytes = static_cast<int32_t>(layout.page_bytes);
  g.seed = header.seed;
  std::memcpy(g.outlier_mask, codec->outlier_mask().data(), sizeof(g.outlier_mask));
  static_assert(kernels::kCodeScales.size() <= sizeof(g.code_scales) / sizeof(float));
  if (codec->scale_search()) {
    g.num_code_scales = static_cast<int32_t>(kernels::kCodeScales.size());
    g.scale_search_max_bits = kernels::kScaleSearchMaxBits;
    std::copy(kernels::kCodeScales.begin(), kernels::kCodeScales.end(), g.code_scales);
  }

  std::vector<float> tables, boundaries, signs;
  std::vector<int32_t> perms;
  bool has_sketch = false;
  for (size_t s = 0; s < layout.segments.size(); ++s) {
    const CodeSegment& seg = layout.segments[s];
    GpuSegment& gs = g.seg[s];
    gs.first = seg.first;
    gs.dims = seg.dims;
    gs.bits = seg.bits;
    gs.norm_slot = seg.norm_slot;
    gs.slot = seg.domain == CodeDomain::kSketch ? 1 : 0;
    gs.group_offset = static_cast<int32_t>(seg.group_offset);
    g.total_dims += seg.dims;
    gs.table_offset = static_cast<int32_t>(tables.size());
    const std::vector<float>& table = codec->SegmentTable(static_cast<int>(s));
    tables.insert(tables.end(), table.begin(), table.end());
    gs.bound_offset = static_cast<int32_t>(boundaries.size());
    gs.param_offset = static_cast<int32_t>(signs.size());
    if (seg.domain == CodeDomain::kRotated) {
      const kernels::encode_internal::SegmentTables& et = codec->EncodeTables(static_cast<int>(s));
      boundaries.insert(boundaries.end(), et.boundaries.begin(), et.boundaries.end());
      gs.rounds = et.rotation.rounds;
      for (int r = 0; r < et.rotation.rounds; ++r) {
        signs.insert(signs.end(), et.rotation.signs[r].begin(), et.rotation.signs[r].end());
        if (et.rotation.rounds > 1) {
          perms.insert(perms.end(), et.rotation.perms[r].begin(), et.rotation.perms[r].end());
        } else {
          perms.insert(perms.end(), seg.dims, 0);  // keeps signs and perms at the same offsets
        }
      }
    }
    if (seg.domain == CodeDomain::kSketch) has_sketch = true;
  }

  std::vector<DeviceBuffer> held;
  auto keep = [&](DeviceBuffer b) -> void* {
    held.push_back(std::move(b));
    return held.back().get();
  };
  TQ_ASSIGN_OR_RETURN(DeviceBuffer tb, Upload(tables));
  g.tables = static_cast<const float*>(keep(std::move(tb)));
  TQ_ASSIGN_OR_RETURN(DeviceBuffer bb, Upload(boundaries));
  g.boundaries = static_cast<const float*>(keep(std::move(bb)));
  TQ_ASSIGN_OR_RETURN(DeviceBuffer sb, Upload(signs));
  g.signs = static_cast<const float*>(keep(std::move(sb)));
  TQ_ASSIGN_OR_RETURN(DeviceBuffer pb, Upload(perms));
  g.perms = static_cast<const int32_t*>(keep(std::move(pb)));
  if (!codec->channel_order().empty()) {
    std::vector<int32_t> order(codec->channel_order().begin(), codec->channel_order().end());
    TQ_ASSIGN_OR_RETURN(DeviceBuffer ob, Upload(order));
    g.channel_order = static_cast<const int32_t*>(keep(std::move(ob)));
  }
  if (has_sketch) {
    TQ_ASSIGN_OR_RETURN(DeviceBuffer kb, Upload(codec->sketch()));
    g.sketch = static_cast<const float*>(keep(std::move(kb)));
  }
  if (kernels::IsRotated(layout.format)) {
    std::vector<float> rot = DenseMatrix(d, [&](const float* x, float* y) { codec->ToRotated(x, y); });
    TQ_ASSIGN_OR_RETURN(DeviceBuffer rb, Upload(rot));
    g.domain[0] = static_cast<const float*>(keep(std::move(rb)));
    if (has_sketch) {
      std::vector<float> sk = DenseMatrix(d, [&](const float* x, float* y) {
        std::vector<float> r(d);
        codec->ToRotated(x, r.data());
        codec->ToSketch(r.data(), y);
      });
      TQ_ASSIGN_OR_RETURN(DeviceBuffer kb2, Upload(sk));
      g.domain[1] = static_cast<const float*>(keep(std::move(kb2)));
    }
  }

  host_.push_back(g);
  codecs_.push_back(codec);
  for (DeviceBuffer& b : held) storage_.push_back(std::move(b));
  TQ_RETURN_IF_ERROR(table_.Reserve(sizeof(GpuCodec) * host_.size()));
  TQ_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(table_.get(), host_.data(), sizeof(GpuCodec) * host_.size(), cudaMemcpyHostToDevice));
  return static_cast<int>(host_.size() - 1);
}

}  // namespace tq::gpu
