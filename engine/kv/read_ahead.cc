#include "engine/kv/read_ahead.h"

#include <algorithm>
#include <utility>

namespace tq::engine {

ColdReadAhead::ColdReadAhead(int n_layers, uint64_t budget_bytes, Issue issue)
    : n_layers_(n_layers),
      budget_(budget_bytes),
      issue_(std::move(issue)),
      taken_(2 * static_cast<size_t>(n_layers), 0),
      whole_(2 * static_cast<size_t>(n_layers), false) {}

bool ColdReadAhead::Take(int i, uint64_t limit) {
  if (whole_[i]) return true;  // nothing left of it to request
  const KvPageStore::PrefetchResult r = issue_(i, limit);
  if (r.bytes > taken_[i]) {
    ahead_bytes_ += r.bytes - taken_[i];
    taken_[i] = r.bytes;
  }
  whole_[i] = r.complete;
  return r.complete;
}

void ColdReadAhead::BeforeLayer(int layer) {
  if (budget_ == 0) return;
  if (layer >= 0) {
    Take(layer, UINT64_MAX);  // the layer about to be attended, whatever the budget
    next_ = std::max(next_, layer + 1);
  }
  while (next_ < 2 * n_layers_ && ahead_bytes_ < budget_) {
    if (next_ >= n_layers_ && next_ - n_layers_ >= layer) break;  // that layer is still to come in this step
    if (!Take(next_, taken_[next_] + (budget_ - ahead_bytes_))) break;  // the rest before the next layer
    ++next_;
  }
}

void ColdReadAhead::AfterLayer(int layer) {
  if (budget_ == 0) return;
  ahead_bytes_ -= std::min(ahead_bytes_, taken_[layer]);
}

}  // namespace tq::engine
