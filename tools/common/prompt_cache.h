// tg-run --prompt-cache FILE, as llama.cpp's: the prompt's state (models/sequence_state.h) is
// saved after it was decoded, and a later run whose prompt starts with the saved tokens
// restores them instead of decoding them (any split: the file holds the logical KV rows).
// Not thread-safe.
#ifndef TENSORGRID_TOOLS_COMMON_PROMPT_CACHE_H_
#define TENSORGRID_TOOLS_COMMON_PROMPT_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/failover_session.h"

namespace tg {

struct PromptCacheHit {
  int64_t reused = 0;         // prompt tokens restored, not decoded.
  std::vector<float> logits;  // the last prompt token's, when the whole prompt was restored.
};

// Restores into `session` the longest prefix of `prompt` that `path` holds. The whole prompt
// only with `logits_suffice` (the saved last logits give the first pick), else all but its
// last token, which the caller decodes. A missing file is no hit; a file of another model or
// cache type, a truncated or damaged one, is no hit after `warn` says why. Errors: reading
// the file, writing the KV rows.
absl::StatusOr<PromptCacheHit> RestorePromptCache(
    const std::string& path, FailoverSession& session, absl::Span<const int32_t> prompt,
    bool logits_suffice, const std::function<void(const std::string&)>& warn);

// Saves the session's positions and `logits` (the last token's) to `path`, through a
// temporary file renamed over it.
absl::Status SavePromptCache(const std::string& path, FailoverSession& session,
                             absl::Span<const float> logits);

}  // namespace tg

#endif  // TENSORGRID_TOOLS_COMMON_PROMPT_CACHE_H_
