#include "engine/runner/text_stream.h"

#include <algorithm>

#include "common/utf8.h"

namespace tq::engine {

TextStream::TextStream(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (s.empty()) continue;
    max_stop_ = std::max(max_stop_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string TextStream::Push(std::string_view piece) {
  if (stopped_) return "";
  pending_.append(piece);
  // Earliest stop string occurrence wins.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at < first) {
      first = at;
      matched_stop_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back a tail that is a proper prefix of some stop string.
  size_t hold_from = pending_.size();
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, pending_.size()); len > 0; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold_from = std::min(hold_from, pending_.size() - len);
        break;
      }
    }
  }
  const size_t send = CompleteUtf8Prefix(std::string_view(pending_).substr(0, hold_from));
  std::string out = pending_.substr(0, send);
  pending_.erase(0, send);
  return out;
}

std::string TextStream::Flush() {
  if (stopped_) return "";
  std::string out;
  const size_t complete = CompleteUtf8Prefix(pending_);
  out = pending_.substr(0, complete);
  if (complete < pending_.size()) out += "\xEF\xBF\xBD";  // U+FFFD for a cut-off code point
  pending_.clear();
  return out;
}

}  // namespace tq::engine
