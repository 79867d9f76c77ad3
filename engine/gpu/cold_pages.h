// The cold tier of the GPU path: the page pairs (K page then V page, one payload of pair_bytes) of the cold
// (layer, KV head) pairs, in a storage::ColdStore on NVMe (io_uring where the kernel has it), written from
// and read into host buffers the caller owns. GpuModel hands it pinned buffers, so a read lands where the
// copy engine takes it from and goes to the GPU by one cudaMemcpyAsync.
//
// Reads go in two sets (GpuModel: the cold pages of one layer, alternating layers, so one layer's reads are
// in flight while the previous layer computes): StartReads submits a set, FinishReads waits for every read of
// that set and checks each (a page's checksum is verified by the store before its bytes reach the buffer). No
// host or CUDA type beyond the store: it builds and is tested without CUDA. Engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "storage/cold_store.h"

namespace tq::gpu {

class ColdPages {
 public:
  // Opens the store in options.cold_dir after removing the cold files found there: pages of an earlier
  // process belong to sequences that no longer exist.
  static StatusOr<std::unique_ptr<ColdPages>> Open(const storage::ColdStoreOptions& options);

  struct Put {
    std::span<const std::byte> payload;
    uint64_t stream = 0;  // pages of one stream (a sequence's (layer, KV head)) lie one after another on
                          // disk, so a layer's reads of them merge
  };
  // Stores each payload under a new id and returns the ids, in order. On an error (disk full:
  // ResourceExhausted; I/O) nothing of this call stays stored.
  StatusOr<std::vector<uint64_t>> Write(std::span<const Put> puts);
  // Removes pages (ids from Write; unknown ids are ignored).
  void Erase(std::span<const uint64_t> ids);

  // Submits the reads of `ids` into `dests` (one buffer of at least `bytes` each) as set `set` (0 or 1),
  // which must have no reads pending. The buffers must stay valid until FinishReads(set).
  Status StartReads(int set, std::span<const uint64_t> ids, std::span<uint8_t* const> dests, size_t bytes);
  // Waits for every read of the set; the first failed one's Status (DataLoss for a corrupt or short page,
  // NotFound, an I/O error) names the page.
  Status FinishReads(int set);

  // Pages of `payload_bytes` the store can still take.
  uint64_t free_pages(uint32_t payload_bytes) const;
  const storage::ColdStore& store() const { return *store_; }

 private:
  explicit ColdPages(std::unique_ptr<storage::ColdStore> store) : store_(std::move(store)) {}

  std::unique_ptr<storage::ColdStore> store_;
  uint64_t next_id_ = 1;
  size_t pending_[2] = {0, 0};  // reads of each set not yet returned
  Status failed_[2];            // the first failed read of each set since its StartReads
  std::vector<storage::ColdStore::ReadResult> results_;
};

}  // namespace tq::gpu
