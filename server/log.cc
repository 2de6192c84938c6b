#include "server/log.h"

#include <atomic>
#include <iterator>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace tg::server {
namespace {

constexpr absl::string_view kLevelNames[] = {"error", "warn", "info", "debug"};

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

absl::Mutex g_output_mu(absl::kConstInit);
std::FILE* g_output ABSL_GUARDED_BY(g_output_mu) = nullptr;  // nullptr: stderr.

bool IsControl(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// Appends `text` with control characters (and, in quoted values, '"' and '\\') escaped.
void AppendEscaped(absl::string_view text, bool quoted, std::string* out) {
  for (char c : text) {
    if (c == '\n') {
      out->append("\\n");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (IsControl(c)) {
      absl::StrAppendFormat(out, "\\x%02x", static_cast<unsigned char>(c));
    } else if (quoted && (c == '"' || c == '\\')) {
      out->push_back('\\');
      out->push_back(c);
    } else {
      out->push_back(c);
    }
  }
}

bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    if (c == ' ' || c == '"' || c == '=' || IsControl(c)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (int i = 0; i < static_cast<int>(std::size(kLevelNames)); ++i) {
    if (name == kLevelNames[i]) return static_cast<LogLevel>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("log level '", name, "' is not one of error, warn, info, debug"));
}

absl::string_view LogLevelName(LogLevel level) { return kLevelNames[static_cast<int>(level)]; }

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

std::FILE* SetLogOutput(std::FILE* out) {
  absl::MutexLock lock(&g_output_mu);
  std::FILE* previous = g_output == nullptr ? stderr : g_output;
  g_output = out;
  return previous;
}

std::string FormatLogLine(absl::string_view component, LogLevel level, absl::string_view message,
                          absl::Span<const LogField> fields) {
  std::string line = absl::StrCat(component, ": ");
  if (level != LogLevel::kInfo) absl::StrAppend(&line, LogLevelName(level), ": ");
  AppendEscaped(message, /*quoted=*/false, &line);
  for (const LogField& f : fields) {
    line.push_back(' ');
    AppendEscaped(f.key(), /*quoted=*/false, &line);
    line.push_back('=');
    if (NeedsQuotes(f.value())) {
      line.push_back('"');
      AppendEscaped(f.value(), /*quoted=*/true, &line);
      line.push_back('"');
    } else {
      line.append(f.value());
    }
  }
  return line;
}

void Logger::Write(LogLevel level, absl::string_view message,
                   absl::Span<const LogField> fields) const {
  if (!LogEnabled(level)) return;
  std::string line = FormatLogLine(component_, level, message, fields);
  line.push_back('\n');
  absl::MutexLock lock(&g_output_mu);
  std::FILE* out = g_output == nullptr ? stderr : g_output;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace tg::server
