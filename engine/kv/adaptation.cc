#include "engine/kv/adaptation.h"

#include <algorithm>
#include <numeric>

namespace tq::engine {

HeadActivity::HeadActivity(int n_layers, int n_kv_heads)
    : n_(static_cast<size_t>(n_layers) * n_kv_heads),
      n_kv_heads_(n_kv_heads),
      scored_(new std::atomic<int64_t>[n_]),
      skipped_(new std::atomic<int64_t>[n_]) {
  for (size_t i = 0; i < n_; ++i) {
    scored_[i] = 0;
    skipped_[i] = 0;
  }
}

void HeadActivity::Add(int layer, int kv_head, int64_t scored, int64_t skipped) {
  const size_t i = static_cast<size_t>(layer) * n_kv_heads_ + kv_head;
  scored_[i].fetch_add(scored, std::memory_order_relaxed);
  skipped_[i].fetch_add(skipped, std::memory_order_relaxed);
}

void HeadActivity::Take(std::vector<int64_t>* scored, std::vector<int64_t>* skipped) {
  scored->assign(n_, 0);
  skipped->assign(n_, 0);
  for (size_t i = 0; i < n_; ++i) {
    (*scored)[i] = scored_[i].exchange(0, std::memory_order_relaxed);
    (*skipped)[i] = skipped_[i].exchange(0, std::memory_order_relaxed);
  }
}

OnlineAdapter::OnlineAdapter(int /*n_layers*/, int n_kv_heads, std::vector<PrecisionClass> classes,
                             AdaptationOptions options)
    : n_kv_heads_(n_kv_heads),
      classes_(std::move(classes)),
      options_(options),
      scored_sum_(classes_.size(), 0),
      skipped_sum_(classes_.size(), 0),
      wanted_(classes_.size(), 0) {}

void OnlineAdapter::EndStep(const std::vector<int64_t>& scored, const std::vector<int64_t>& skipped) {
  scored_window_.push_back(scored);
  skipped_window_.push_back(skipped);
  for (size_t i = 0; i < scored_sum_.size(); ++i) {
    scored_sum_[i] += scored[i];
    skipped_sum_[i] += skipped[i];
  }
  while (static_cast<int>(scored_window_.size()) > options_.window) {
    for (size_t i = 0; i < scored_sum_.size(); ++i) {
      scored_sum_[i] -= scored_window_.front()[i];
      skipped_sum_[i] -= skipped_window_.front()[i];
    }
    scored_window_.pop_front();
    skipped_window_.pop_front();
  }
  ++steps_since_decision_;
}

std::vector<double> OnlineAdapter::Scores() const {
  std::vector<double> out(scored_sum_.size(), -1.0);
  for (size_t i = 0; i < out.size(); ++i) {
    if (scored_sum_[i] > 0) out[i] = static_cast<double>(skipped_sum_[i]) / static_cast<double>(scored_sum_[i]);
  }
  return out;
}

std::vector<ClassChange> OnlineAdapter::Decide() {
  std::vector<ClassChange> out;
  if (static_cast<int>(scored_window_.size()) < options_.window || steps_since_decision_ < options_.every) {
    return out;
  }
  steps_since_decision_ = 0;
  const std::vector<double> score = Scores();
  // Movable heads (ACTIVE or SPARSE) that attended in the window, most concentrated first.
  std::vector<size_t> movable;
  int n_active = 0;
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i] == PrecisionClass::kHot) continue;
    if (classes_[i] == PrecisionClass::kActive) ++n_active;
    if (score[i] >= 0) movable.push_back(i);
  }
  if (movable.empty() || n_active == 0 || n_active == static_cast<int>(movable.size())) return out;
  std::stable_sort(movable.begin(), movable.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
  const int margin =
      options_.margin > 0 ? options_.margin : std::max(1, static_cast<int>(movable.size()) / 10);
  std::vector<int> want(classes_.size(), 0);
  std::vector<size_t> up, down;  // candidates, best first
  for (int r = 0; r < static_cast<int>(movable.size()); ++r) {
    const size_t i = movable[r];
    if (classes_[i] == PrecisionClass::kSparse && r < n_active - margin) want[i] = +1;
    if (classes_[i] == PrecisionClass::kActive && r >= n_active + margin) want[i] = -1;
    // A move is made only when it was wanted at the previous decision too.
    if (want[i] == +1 && wanted_[i] == +1) up.push_back(i);
    if (want[i] == -1 && wanted_[i] == -1) down.push_back(i);
  }
  std::reverse(down.begin(), down.end());  // least concentrated first
  wanted_ = want;
  const size_t pairs = std::min({up.size(), down.size(), static_cast<size_t>(options_.max_moves)});
  for (size_t p = 0; p < pairs; ++p) {
    for (const auto& [i, to] : {std::pair{up[p], PrecisionClass::kActive}, std::pair{down[p], PrecisionClass::kSparse}}) {
      out.push_back({static_cast<int>(i) / n_kv_heads_, static_cast<int>(i) % n_kv_heads_, classes_[i], to});
      classes_[i] = to;
      wanted_[i] = 0;
    }
  }
  moves_ += out.size();
  return out;
}

}  // namespace tq::engine
