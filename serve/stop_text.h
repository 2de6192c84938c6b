// StopText: turns generated token pieces into the text a client is sent, as OpenAI's `stop`
// wants it: a stop string may span tokens and is never sent, not even in part, so text that
// could still become the start of one is held back until it cannot; so are the bytes of a
// UTF-8 character cut between tokens. Once a stop string appears, the text before it is the
// rest of the output. Not thread-safe: one request's.
#ifndef TENSORGRID_SERVE_STOP_TEXT_H_
#define TENSORGRID_SERVE_STOP_TEXT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tg::serve {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);

  // Adds a token's piece; returns the text that is now safe to send (may be empty).
  std::string Add(absl::string_view piece);
  // At the end of generation: the text held back (nothing after a stop string).
  std::string Flush();
  // A stop string appeared: generation should end.
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // received, not sent.
  bool stopped_ = false;
};

// Bytes at the end of `text` that begin a UTF-8 character not yet complete (0 to 3).
size_t IncompleteUtf8Tail(absl::string_view text);

}  // namespace tg::serve

#endif  // TENSORGRID_SERVE_STOP_TEXT_H_
