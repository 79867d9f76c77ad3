#include "engine/runner/model_check.h"

#include <algorithm>
#include <span>

#include "storage/crc32c.h"

namespace tq::engine {

uint32_t ModelChecksum(const GgufFile& file, const LoadProgress& progress) {
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  const std::span<const uint8_t> bytes = file.bytes();
  uint32_t crc = 0;
  for (uint64_t done = 0; done < bytes.size();) {
    const uint64_t n = std::min<uint64_t>(kPiece, bytes.size() - done);
    crc = storage::Crc32c(std::as_bytes(bytes.subspan(done, n)), crc);
    done += n;
    if (progress) progress(done, bytes.size());
  }
  if (bytes.empty() && progress) progress(0, 0);
  return crc;
}

}  // namespace tq::engine
