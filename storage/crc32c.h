// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every cold-tier page.
// Uses the SSE4.2 crc32 instruction where the CPU has it, a table otherwise; both give the same value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tq::storage {

// Extends `crc` (the value returned for the bytes before, 0 for none) over `data`.
// Crc32c("123456789") == 0xE3069283.
uint32_t Crc32c(std::span<const std::byte> data, uint32_t crc = 0);

// The table version, kept as the reference the fast path is tested against.
uint32_t Crc32cPortable(std::span<const std::byte> data, uint32_t crc = 0);

}  // namespace tq::storage
