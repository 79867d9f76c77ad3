// libFuzzer target: DecodeRecord (engine/kv/page_record.h) on arbitrary bytes, as a restart reads cold pages back.
// A record that decodes must encode again to the same fields (and decode to them once more); any crash, sanitizer
// report or mismatch is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "engine/kv/page_record.h"

namespace {

// Bitwise: a NaN read back must be the same NaN.
bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool Same(const tq::engine::PageRecord& a, const tq::engine::PageRecord& b) {
  const auto& s = a.transform;
  const auto& t = b.transform;
  return a.layout_fingerprint == b.layout_fingerprint && a.prefix_hash == b.prefix_hash &&
         a.parent_hash == b.parent_hash && a.page_index == b.page_index && a.layer == b.layer &&
         a.kv_head == b.kv_head && a.cls == b.cls && a.k == b.k && a.v == b.v && Same(s.v_scale, t.v_scale) &&
         Same(s.k_mean, t.k_mean) && Same(s.k_scale, t.k_scale) && Same(s.k_rope_mean, t.k_rope_mean) &&
         Same(s.k_sink, t.k_sink) && Same(s.v_sink, t.v_sink);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t bytes = 0;
  auto record = tq::engine::DecodeRecord(std::span<const uint8_t>(data, size), &bytes);
  if (!record.ok()) return 0;
  if (bytes > size) std::abort();  // a record never claims bytes it was not given
  std::vector<uint8_t> again(tq::engine::RecordBytes(tq::engine::TransformFloats(record->transform)));
  tq::engine::EncodeRecord(*record, again);
  uint32_t again_bytes = 0;
  auto round = tq::engine::DecodeRecord(again, &again_bytes);
  if (!round.ok() || again_bytes != again.size() || !Same(*record, *round)) std::abort();
  return 0;
}
