// The cold tier's on-disk format (docs/storage.md has the picture).
//
// A cold file is a 4 KiB file header followed by fixed-size slots:
//   offset 0                      FileHeader (kFileHeaderBytes, zero padded)
//   offset kFileHeaderBytes + i*S slot i (S = slot_bytes, a multiple of kIoAlignment)
// A page starts at a slot: a PageHeader (kPageHeaderBytes) then `length` payload bytes, zero padded to a
// kIoAlignment multiple; it covers ceil(that / S) consecutive slots, never crossing an extent (extent_slots
// slots). A slot whose first 4 bytes are zero is empty. All integers are little-endian.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "common/status.h"

namespace tq::storage {

static_assert(std::endian::native == std::endian::little, "the cold-tier format is written as host bytes");

inline constexpr uint32_t kPageMagic = 0x47505154;  // "TQPG"
inline constexpr uint32_t kFileMagic = 0x46435154;  // "TQCF"
inline constexpr uint16_t kFormatVersion = 2;  // 2: pages may span slots; files record their extent size
inline constexpr uint32_t kPageHeaderBytes = 64;
inline constexpr uint32_t kFileHeaderBytes = 4096;

struct PageHeader {
  uint32_t magic = kPageMagic;
  uint16_t version = kFormatVersion;
  uint16_t header_bytes = kPageHeaderBytes;
  uint64_t page_id = 0;
  uint64_t sequence =
      0;                // store-wide write number; of two slots with one page id the higher wins at start-up
  uint32_t length = 0;  // payload bytes
  uint32_t checksum = 0;  // CRC32C of the header (with this field 0) followed by the payload
  uint8_t reserved[32] = {};
};
static_assert(sizeof(PageHeader) == kPageHeaderBytes);

struct FileHeader {
  uint32_t magic = kFileMagic;
  uint16_t version = kFormatVersion;
  uint16_t reserved0 = 0;
  uint32_t slot_bytes = 0;    // S above
  uint32_t file_index = 0;    // n in cold-<n>.tqc
  uint32_t checksum = 0;      // CRC32C of this header with this field 0
  uint32_t extent_slots = 0;  // slots per extent: no page crosses a multiple of this (from the file's first slot)
  uint8_t reserved[40] = {};
};
static_assert(sizeof(FileHeader) == 64);

// Bytes one page occupies on disk and in a read: header + payload rounded up to kIoAlignment.
uint32_t PageIoBytes(uint32_t payload_bytes);

// Consecutive slots of `slot_bytes` (> 0) one page of `payload_bytes` spans: ceil(PageIoBytes / slot_bytes).
uint32_t SlotsFor(uint32_t payload_bytes, uint32_t slot_bytes);

// Writes header and payload into `out` (at least PageIoBytes(payload.size()) bytes), zeroing the padding.
// Returns the checksum stored.
uint32_t EncodePage(uint64_t page_id, uint64_t sequence, std::span<const std::byte> payload,
                    std::span<std::byte> out);

// Checks the page at the start of `in` (the bytes read for one slot):
//   not_found  the slot is empty (zero magic);
//   data_loss  wrong magic, version or header size, a length past `max_payload` or past `in`, or a bad
//              checksum.
// On success returns the header; the payload is in[kPageHeaderBytes, kPageHeaderBytes + length).
StatusOr<PageHeader> DecodePage(std::span<const std::byte> in, uint32_t max_payload);

void EncodeFileHeader(uint32_t slot_bytes, uint32_t extent_slots, uint32_t file_index, std::span<std::byte> out);
// not_found for an all-zero (new) header, failed_precondition for another format version, data_loss for a
// damaged one.
StatusOr<FileHeader> DecodeFileHeader(std::span<const std::byte> in);

}  // namespace tq::storage
