#include "engine/runner/text_stream.h"

#include <algorithm>

namespace tq::engine {
namespace {

// Expected length of a sequence from its lead byte; 0 for a continuation or invalid lead byte.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t CompleteUtf8Prefix(std::string_view bytes) {
  // Look back at most 3 bytes for the lead byte of a final incomplete sequence.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(bytes[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = SequenceLength(c);
    if (len > static_cast<int>(back)) return n - back;  // lead byte whose sequence is not complete yet
    return n;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = SequenceLength(c);
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : (c & (0xFF >> (len + 1)));
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

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
