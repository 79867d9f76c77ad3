#include "engine/kv/page_record.h"

#include <array>
#include <cstring>
#include <tuple>
#include <utility>

namespace tq::engine {
namespace {

template <typename T>
void Put(std::span<uint8_t> out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}

template <typename T>
T Get(std::span<const uint8_t> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

template <typename T>  // HeadTransform or const HeadTransform
auto Parts(T& t) {
  return std::array{&t.v_scale, &t.k_mean, &t.k_scale, &t.k_rope_mean, &t.k_sink, &t.v_sink};
}
static_assert(std::tuple_size_v<decltype(Parts(std::declval<HeadTransform&>()))> == kTransformParts);

}  // namespace

uint32_t RecordBytes(uint32_t floats, uint16_t version) {
  const uint32_t align = version == kRecordVersion16 ? 16 : 64;
  return (kRecordHeaderBytes + 4 * kTransformParts + 4 * floats + align - 1) / align * align;
}

uint32_t TransformFloats(const HeadTransform& t) {
  uint32_t n = 0;
  for (const auto* p : Parts(t)) n += static_cast<uint32_t>(p->size());
  return n;
}

void EncodeRecord(const PageRecord& r, std::span<uint8_t> out) {
  const auto parts = Parts(r.transform);
  const uint32_t n = TransformFloats(r.transform);
  const uint32_t bytes = RecordBytes(n);
  std::memset(out.data(), 0, bytes);
  Put<uint32_t>(out, 0, kRecordMagic);
  Put<uint16_t>(out, 4, kRecordVersion);
  Put<uint16_t>(out, 6, static_cast<uint16_t>(bytes));
  Put<uint64_t>(out, 8, r.layout_fingerprint);
  Put<uint64_t>(out, 16, r.prefix_hash);
  Put<uint32_t>(out, 24, r.page_index);
  Put<uint16_t>(out, 28, static_cast<uint16_t>(r.layer));
  Put<uint16_t>(out, 30, static_cast<uint16_t>(r.kv_head));
  Put<uint8_t>(out, 32, static_cast<uint8_t>(r.cls));
  Put<uint8_t>(out, 33, static_cast<uint8_t>(r.k));
  Put<uint8_t>(out, 34, static_cast<uint8_t>(r.v));
  Put<uint32_t>(out, 36, n);
  Put<uint64_t>(out, 40, r.parent_hash);
  size_t at = kRecordHeaderBytes;
  for (const auto* p : parts) {
    Put<uint32_t>(out, at, static_cast<uint32_t>(p->size()));
    at += 4;
  }
  for (const auto* p : parts) {
    if (!p->empty()) std::memcpy(out.data() + at, p->data(), 4 * p->size());
    at += 4 * p->size();
  }
}

StatusOr<PageRecord> DecodeRecord(std::span<const uint8_t> in, uint32_t* record_bytes) {
  if (in.size() < kRecordHeaderBytes || Get<uint32_t>(in, 0) != kRecordMagic) {
    return DataLossError("KV page record: bad magic");
  }
  const uint16_t version = Get<uint16_t>(in, 4);
  if (version != kRecordVersion && version != kRecordVersion16) {
    return DataLossError("KV page record: version " + std::to_string(version) + " is not " +
                         std::to_string(kRecordVersion16) + " or " + std::to_string(kRecordVersion));
  }
  const uint32_t n = Get<uint32_t>(in, 36);
  const uint32_t bytes = Get<uint16_t>(in, 6);
  if (n > kTransformParts * 4096 || bytes != RecordBytes(n, version) || bytes > in.size()) {
    return DataLossError("KV page record: bad length");
  }
  const uint8_t cls = Get<uint8_t>(in, 32);
  if (cls > 2) return DataLossError("KV page record: bad class");
  PageRecord r;
  r.layout_fingerprint = Get<uint64_t>(in, 8);
  r.prefix_hash = Get<uint64_t>(in, 16);
  r.page_index = Get<uint32_t>(in, 24);
  r.parent_hash = Get<uint64_t>(in, 40);
  r.layer = Get<uint16_t>(in, 28);
  r.kv_head = Get<uint16_t>(in, 30);
  r.cls = static_cast<PrecisionClass>(cls);
  // Format bytes come from disk: only ids of the format table become formats.
  auto k = kernels::FormatFromId(Get<uint8_t>(in, 33));
  auto v = kernels::FormatFromId(Get<uint8_t>(in, 34));
  if (!k.ok() || !v.ok()) return DataLossError("KV page record: unknown K or V format id");
  r.k = *k;
  r.v = *v;
  const auto parts = Parts(r.transform);
  size_t at = kRecordHeaderBytes, total = 0;
  uint32_t counts[kTransformParts];
  for (uint32_t& c : counts) {
    c = Get<uint32_t>(in, at);
    at += 4;
    total += c;
  }
  if (total != n) return DataLossError("KV page record: bad transform lengths");
  for (uint32_t i = 0; i < kTransformParts; ++i) {
    parts[i]->resize(counts[i]);
    if (counts[i] > 0) std::memcpy(parts[i]->data(), in.data() + at, 4 * counts[i]);
    at += 4 * counts[i];
  }
  *record_bytes = bytes;
  return r;
}

}  // namespace tq::engine
