// The identity of a model file's bytes, for the prefix cache's fingerprint: cold pages written under one model are
// never served to another of the same shape (a fine-tune, another quantization of equal size).
#pragma once

#include <cstdint>

#include "engine/model/gguf.h"
#include "engine/options.h"

namespace tq::engine {

// CRC32C of the whole GGUF file (metadata and weights), read through its mapping in 64 MiB pieces; `progress`
// (may be empty) after each. Reading every byte also faults the weights in, as the first forward pass would.
// About 10 GB/s from the page cache on one core; a cold read runs at the disk's speed.
uint32_t ModelChecksum(const GgufFile& file, const LoadProgress& progress);

}  // namespace tq::engine
