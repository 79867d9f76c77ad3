// The plan of cold-page read-ahead over a forward step of n_layers layers. Pages are read into the cold cache
// ahead of attention within a budget of bytes (half the cold cache), so that what was read is still cached when
// its layer comes: before layer l is attended, whatever of l the read-ahead left out is requested, then the next
// layers while the budget lasts, the last of them perhaps in part (taken up again before the next layer). Past
// the last layer the plan goes on with the first layers of the next step (the same pages; a new token's are in
// RAM), so a step does not start by waiting for the disk.
//
// Layer indices here run over two steps: i < n_layers is this step's layer i, i >= n_layers the next step's
// layer i - n_layers. The plan knows nothing of sequences or pages: `issue` does the requests.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/kv/page_store.h"

namespace tq::engine {

class ColdReadAhead {
 public:
  // Requests the cold pages of layer index i (< 2 * n_layers), in page order, up to `limit` bytes in all
  // counting from the layer's first page (pages already requested count too, and are not read twice).
  using Issue = std::function<KvPageStore::PrefetchResult(int i, uint64_t limit)>;

  // budget_bytes = 0 turns read-ahead off (no cold tier): every call then does nothing.
  ColdReadAhead(int n_layers, uint64_t budget_bytes, Issue issue);

  void Start() { BeforeLayer(-1); }  // before the step's first layer
  void BeforeLayer(int layer);       // layer (0 <= layer < n_layers) is about to be attended
  void AfterLayer(int layer);        // layer was attended: its bytes leave the budget

  uint64_t ahead_bytes() const { return ahead_bytes_; }  // requested and not yet attended
  int next() const { return next_; }                     // next layer index to read ahead
  uint64_t taken(int i) const { return taken_[i]; }      // bytes of layer index i requested so far
  bool whole(int i) const { return whole_[i]; }          // every page of layer index i requested

 private:
  bool Take(int i, uint64_t limit);  // true when layer index i is then whole

  int n_layers_;
  uint64_t budget_;
  Issue issue_;
  std::vector<uint64_t> taken_;  // [2 * n_layers]
  std::vector<bool> whole_;      // [2 * n_layers]
  int next_ = 0;
  uint64_t ahead_bytes_ = 0;
};

}  // namespace tq::engine
