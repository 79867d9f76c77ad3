// The record in front of every KV page the cold tier holds: what the page is, so a restart can rebuild the
// prefix cache from the cold files alone (the cold store's own header already carries the page id and a
// CRC32C over record + page, checked on every read).
//
// Layout (little-endian, kRecordHeaderBytes bytes, then kTransformParts u32 counts of v_scale, k_mean,
// k_scale, k_rope_mean, k_sink, v_sink and their floats, padded to 64 bytes (version 4; version 3, still
// read, padded to 16): the page after it starts on a cache line of its 64-byte aligned buffer, as the RAM
// tiers' pages do):
//   u32 magic 'TQKR' | u16 version | u16 record_bytes | u64 layout_fingerprint | u64 prefix_hash |
//   u32 page_index | u16 layer | u16 kv_head | u8 class | u8 k_format | u8 v_format | u8 0 |
//   u32 float_count | u64 parent_hash
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv/page_info.h"
#include "engine/kv/precision.h"
#include "kernels/formats/format.h"

namespace tq::engine {

inline constexpr uint32_t kRecordMagic = 0x524B5154;  // "TQKR"
inline constexpr uint16_t kRecordVersion = 4;
inline constexpr uint16_t kRecordVersion16 = 3;  // padded to 16 bytes; read, no longer written
inline constexpr uint32_t kTransformParts = 6;  // float vectors of a HeadTransform
inline constexpr uint32_t kRecordHeaderBytes = 48;

struct PageRecord {
  uint64_t layout_fingerprint = 0;  // model and KV layout the page belongs to
  uint64_t prefix_hash = 0;         // chain hash of the tokens through this page; 0 = not reusable
  uint64_t parent_hash = 0;         // the previous page's chain hash (the fingerprint for page 0)
  uint32_t page_index = 0;          // pages before it in its sequence
  int layer = 0;
  int kv_head = 0;
  PrecisionClass cls = PrecisionClass::kHot;
  kernels::KvFormat k = kernels::KvFormat::kF16;
  kernels::KvFormat v = kernels::KvFormat::kF16;
  HeadTransform transform;  // page 0 of a head: what its sequence fixed; else empty
};

// Bytes a record with `floats` transform floats takes (a multiple of 64; `version` 3: of 16).
uint32_t RecordBytes(uint32_t floats, uint16_t version = kRecordVersion);
// Floats of a transform's kTransformParts vectors together.
uint32_t TransformFloats(const HeadTransform& t);
// Writes the record into the first RecordBytes() bytes of `out`.
void EncodeRecord(const PageRecord& record, std::span<uint8_t> out);
// Parses a record; data_loss for a bad magic, version, length, class or format id. *record_bytes gets its size.
StatusOr<PageRecord> DecodeRecord(std::span<const uint8_t> in, uint32_t* record_bytes);

}  // namespace tq::engine
