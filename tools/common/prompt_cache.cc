#include "tools/common/prompt_cache.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cli/flag_file.h"
#include "core/status_macros.h"
#include "models/sequence_state.h"

namespace tg {

absl::StatusOr<PromptCacheHit> RestorePromptCache(
    const std::string& path, FailoverSession& session, absl::Span<const int32_t> prompt,
    bool logits_suffice, const std::function<void(const std::string&)>& warn) {
  if (!std::filesystem::exists(path)) return PromptCacheHit{};  // none yet: this run makes it.
  TG_ASSIGN_OR_RETURN(const std::string bytes, ReadFlagFile(path, "--prompt-cache"));
  absl::StatusOr<SequenceState> state =
      DecodeSequenceState(session.model(), session.session().cache(), bytes);
  if (!state.ok()) {
    warn(absl::StrCat("--prompt-cache ", path, " not used: ", state.status().message()));
    return PromptCacheHit{};
  }
  PromptCacheHit hit;
  hit.reused = SharedPrefix(state->tokens, prompt);
  const bool whole = hit.reused == static_cast<int64_t>(prompt.size()) &&
                     hit.reused == static_cast<int64_t>(state->tokens.size()) &&
                     !state->logits.empty() && logits_suffice;
  if (!whole && hit.reused == static_cast<int64_t>(prompt.size())) --hit.reused;
  if (hit.reused <= 0) return PromptCacheHit{};
  TG_RETURN_IF_ERROR(session.RestoreState(*state, hit.reused));
  if (whole) hit.logits = std::move(state->logits);
  return hit;
}

absl::Status SavePromptCache(const std::string& path, FailoverSession& session,
                             absl::Span<const float> logits) {
  TG_ASSIGN_OR_RETURN(SequenceState state, session.session().CaptureState(logits));
  const std::string bytes = EncodeSequenceState(session.model(), session.session().cache(), state);
  const std::string tmp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out)
      return absl::UnavailableError(absl::StrCat("--prompt-cache: cannot write '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("--prompt-cache: cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace tg
