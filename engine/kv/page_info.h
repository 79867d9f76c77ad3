// What a KV page is (its owner, head, formats and prefix-chain place) and how its bytes are held while read:
// the types the page store, its tiers and the page record share.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/formats/format.h"

namespace tq::engine {

// A page's id in the page store: unique for the store's life (and across restarts for pages the cold tier keeps).
// 0 is never a page. std::hash covers it (an enumeration).
enum class PageId : uint64_t {};
inline constexpr uint64_t Raw(PageId id) { return static_cast<uint64_t>(id); }
inline constexpr PageId kNoPage{};

// A sequence's id (SequenceKv::id): unique in the process, never 0. Its pages' disk stream is derived from it.
enum class SequenceId : uint64_t {};
inline constexpr uint64_t Raw(SequenceId id) { return static_cast<uint64_t>(id); }
// A new SequenceId (any thread): the CPU's SequenceKv and the GPU path's sequences take theirs from one counter.
inline SequenceId NextSequenceId() {
  static std::atomic<uint64_t> next{1};
  return SequenceId{next.fetch_add(1, std::memory_order_relaxed)};
}
// The disk stream of one (sequence, layer, KV head): pages of one stream lie next to each other in the cold tier.
// Layers < 2^20, KV heads < 2^12.
inline constexpr uint64_t StreamOf(SequenceId seq, int layer, int kv_head) {
  return Raw(seq) << 32 | static_cast<uint64_t>(layer) << 12 | static_cast<uint64_t>(kv_head);
}

// Allocates on 64-byte boundaries: a cold page's buffer holds its record (a multiple of 64 bytes,
// page_record.h) and then the page, so the kernels read the page from cache-line aligned bytes as from the
// RAM tiers' slots. Measured: `bench attention`'s pages offset by 16 bytes (malloc's alignment) decode 5%
// slower cold.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};
using PageBuffer = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;
using PageBytes = std::shared_ptr<const PageBuffer>;

// A page's bytes while attention reads them: a pointer into a RAM arena, or into cached cold bytes that `hold`
// keeps alive.
struct PinnedPage {
  const uint8_t* data = nullptr;
  PageBytes hold;
};

// What a sequence fixes for each (layer, KV head) when the head's first page fills (docs/kv.md): stored values
// are v / v_scale; stored keys are (k - k_mean) / k_scale, and the query is multiplied by k_scale. Each is
// [head_dim], or empty when not used.
struct HeadTransform {
  std::vector<float> v_scale, k_mean, k_scale;  // [head_dim] each, or empty
  std::vector<float> k_rope_mean;  // [head_dim]: the keys' pre-RoPE mean (per-page key offsets), or empty
  std::vector<float> k_sink;       // [head_dim]: token 0's key minus what page 0 codes for it, or empty
  std::vector<float> v_sink;       // [head_dim]: the same for its value, in the stored space (v / v_scale)
};

// Whose page it is, for the event log, logs and the cold tier's page records.
struct PageInfo {
  std::string owner;  // the request id ("" outside the engine)
  int layer = -1;
  int kv_head = -1;
  uint64_t stream = 0;  // StreamOf(sequence, layer, kv_head); 0 for pages no sequence wrote (recovered ones)
  kernels::KvFormat k = kernels::KvFormat::kF16;
  kernels::KvFormat v = kernels::KvFormat::kF16;
  uint64_t prefix_hash = 0;    // chain hash of the tokens through this page (prefix cache); 0 = unknown
  uint64_t parent_hash = 0;    // the previous page's chain hash
  uint32_t page_index = 0;     // pages before it in its sequence
  HeadTransform transform;     // page 0 only: the head's transform (prefix cache)
  SequenceId sequence{};       // the sequence that wrote it; 0 when recovered from an earlier run
};

}  // namespace tq::engine
