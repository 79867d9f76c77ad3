// Turns a stream of token pieces (raw bytes, possibly parts of UTF-8 sequences) into text chunks that are safe
// to send: whole UTF-8 code points only, stop strings cut out, and text that might still become a stop string
// held back until it cannot.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/utf8.h"

namespace tq::engine {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop_strings);

  // Adds the bytes of one token. Returns the text that may be sent now (possibly empty). After a stop string
  // is seen, stopped() is true and the text before it has been returned; nothing after it ever is.
  std::string Push(std::string_view piece);

  // End of generation: returns whatever was held back (incomplete UTF-8 at the very end is replaced by U+FFFD).
  std::string Flush();

  bool stopped() const { return stopped_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  std::string pending_;  // received, not yet returned
  bool stopped_ = false;
  std::string matched_stop_;
};

using tq::CompleteUtf8Prefix;
using tq::IsValidUtf8;

}  // namespace tq::engine
