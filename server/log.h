// Log: rpc-server's log lines. Each is one line on stderr, starting with the component, then
// the level unless it is info, the message and key=value fields carrying the numbers a user
// needs, e.g.
//   rpc-server: session opened id=3f2a9c01 peer=127.0.0.1:5432 sessions=2
//   rpc-server: warn: cache store failed digest=ab12... error="blob cache: cannot write ..."
// Lines below the process-wide level (rpc-server --log-level, default info) are dropped.
// Thread-safe: the level is atomic and each line goes out in one write under a mutex, so
// lines of concurrent threads never interleave.
#ifndef TENSORGRID_SERVER_LOG_H_
#define TENSORGRID_SERVER_LOG_H_

#include <cstdio>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tg::server {

// Most severe first: a level lets through itself and everything above it.
enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn", "info", "debug"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
absl::string_view LogLevelName(LogLevel level);

// The process-wide level (default info).
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Whether a line at `level` would be written: lets a caller skip building costly fields.
bool LogEnabled(LogLevel level);

// Where lines go (default stderr); returns the previous destination. Tests capture with it.
std::FILE* SetLogOutput(std::FILE* out);

// One key=value pair. The value is formatted at once (anything absl::StrCat takes).
class LogField {
 public:
  LogField(absl::string_view key, const absl::AlphaNum& value) : key_(key), value_(value.Piece()) {}
  absl::string_view key() const { return key_; }
  const std::string& value() const { return value_; }

 private:
  absl::string_view key_;
  std::string value_;
};

// The line without its newline. Newlines and other control characters in the message become
// escapes, so one call is always one line; a value that is empty or holds a space, a quote,
// '=' or a control character is written in double quotes with \" \\ \n \t \xNN escapes.
std::string FormatLogLine(absl::string_view component, LogLevel level, absl::string_view message,
                          absl::Span<const LogField> fields);

// A component's log: Logger("rpc-server").Info("session opened", {{"id", id}}).
class Logger {
 public:
  constexpr explicit Logger(absl::string_view component) : component_(component) {}

  void Error(absl::string_view message, std::initializer_list<LogField> fields = {}) const {
    Write(LogLevel::kError, message, fields);
  }
  void Warn(absl::string_view message, std::initializer_list<LogField> fields = {}) const {
    Write(LogLevel::kWarn, message, fields);
  }
  void Info(absl::string_view message, std::initializer_list<LogField> fields = {}) const {
    Write(LogLevel::kInfo, message, fields);
  }
  void Debug(absl::string_view message, std::initializer_list<LogField> fields = {}) const {
    Write(LogLevel::kDebug, message, fields);
  }
  // Formats and writes the line when `level` is enabled.
  void Write(LogLevel level, absl::string_view message, absl::Span<const LogField> fields) const;

 private:
  absl::string_view component_;
};

// Every rpc-server line starts with the binary's name, as its startup and error lines did.
inline constexpr Logger kServerLog("rpc-server");

}  // namespace tg::server

#endif  // TENSORGRID_SERVER_LOG_H_
