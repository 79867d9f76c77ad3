#include "storage/page_format.h"

#include <cassert>
#include <cstring>
#include <string>

#include "storage/crc32c.h"
#include "storage/io_queue.h"

namespace tq::storage {
namespace {

template <typename T>
uint32_t HeaderCrc(T header) {
  header.checksum = 0;
  return Crc32c(std::as_bytes(std::span(&header, 1)));
}

}  // namespace

uint32_t PageIoBytes(uint32_t payload_bytes) {
  return static_cast<uint32_t>(AlignUp(uint64_t{kPageHeaderBytes} + payload_bytes, kIoAlignment));
}

uint32_t SlotsFor(uint32_t payload_bytes, uint32_t slot_bytes) {
  return static_cast<uint32_t>((uint64_t{PageIoBytes(payload_bytes)} + slot_bytes - 1) / slot_bytes);
}

uint32_t EncodePage(uint64_t page_id, uint64_t sequence, std::span<const std::byte> payload,
                    std::span<std::byte> out) {
  const auto length = static_cast<uint32_t>(payload.size());
  const uint32_t total = PageIoBytes(length);
  assert(out.size() >= total);
  PageHeader h;
  h.page_id = page_id;
  h.sequence = sequence;
  h.length = length;
  uint32_t crc = HeaderCrc(h);
  crc = Crc32c(payload, crc);
  h.checksum = crc;
  std::memcpy(out.data(), &h, sizeof(h));
  if (length > 0) std::memcpy(out.data() + kPageHeaderBytes, payload.data(), length);
  std::memset(out.data() + kPageHeaderBytes + length, 0, total - kPageHeaderBytes - length);
  return crc;
}

StatusOr<PageHeader> DecodePage(std::span<const std::byte> in, uint32_t max_payload) {
  if (in.size() < kPageHeaderBytes) return DataLossError("page shorter than its header");
  PageHeader h;
  std::memcpy(&h, in.data(), sizeof(h));
  if (h.magic == 0) return NotFoundError("empty slot");
  if (h.magic != kPageMagic) return DataLossError("bad page magic");
  if (h.version != kFormatVersion || h.header_bytes != kPageHeaderBytes) {
    return DataLossError("unknown page version " + std::to_string(h.version));
  }
  if (h.length > max_payload || uint64_t{kPageHeaderBytes} + h.length > in.size()) {
    return DataLossError("page length " + std::to_string(h.length) + " out of range");
  }
  uint32_t crc = Crc32c(in.subspan(kPageHeaderBytes, h.length), HeaderCrc(h));
  if (crc != h.checksum) return DataLossError("page " + std::to_string(h.page_id) + " checksum mismatch");
  return h;
}

void EncodeFileHeader(uint32_t slot_bytes, uint32_t extent_slots, uint32_t file_index, std::span<std::byte> out) {
  assert(out.size() >= sizeof(FileHeader));
  FileHeader h;
  h.slot_bytes = slot_bytes;
  h.extent_slots = extent_slots;
  h.file_index = file_index;
  h.checksum = HeaderCrc(h);
  std::memset(out.data(), 0, out.size());
  std::memcpy(out.data(), &h, sizeof(h));
}

StatusOr<FileHeader> DecodeFileHeader(std::span<const std::byte> in) {
  if (in.size() < sizeof(FileHeader)) return DataLossError("file header truncated");
  FileHeader h;
  std::memcpy(&h, in.data(), sizeof(h));
  if (h.magic == 0) return NotFoundError("new file");
  if (h.magic != kFileMagic) return DataLossError("not a tqserve cold file");
  if (HeaderCrc(h) != h.checksum) return DataLossError("file header checksum mismatch");
  if (h.version != kFormatVersion) {
    return FailedPreconditionError("cold file format version " + std::to_string(h.version) + ", this build uses " +
                                   std::to_string(kFormatVersion));
  }
  return h;
}

}  // namespace tq::storage
