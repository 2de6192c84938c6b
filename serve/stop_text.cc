#include "serve/stop_text.h"

#include <algorithm>
#include <utility>

namespace tg::serve {

size_t IncompleteUtf8Tail(absl::string_view text) {
  // Look back over at most 3 continuation bytes for the lead byte of the last character.
  for (size_t back = 1; back <= std::min<size_t>(4, text.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte.
    const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : 4;
    return need > back ? back : 0;
  }
  return 0;
}

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopText::Add(absl::string_view piece) {
  if (stopped_) return "";
  pending_.append(piece.data(), piece.size());
  size_t cut = pending_.size();
  for (const std::string& stop : stops_) {
    if (size_t at = pending_.find(stop); at != std::string::npos && at < cut) {
      cut = at;
      stopped_ = true;
    }
  }
  if (stopped_) {
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a prefix of some stop string, and a cut character.
  size_t hold = IncompleteUtf8Tail(pending_);
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, pending_.size()); n > hold; --n) {
      if (absl::string_view(pending_).substr(pending_.size() - n) ==
          absl::string_view(stop).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopText::Flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace tg::serve
