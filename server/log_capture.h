// LogCapture (tests only): sends rpc-server's log lines into a temporary file for its
// lifetime and hands them back; restores the previous destination and level when destroyed.
// Not thread-safe itself (the logging threads are: see server/log.h).
#ifndef TENSORGRID_SERVER_LOG_CAPTURE_H_
#define TENSORGRID_SERVER_LOG_CAPTURE_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "server/log.h"

namespace tg::server::testing {

class LogCapture {
 public:
  LogCapture() : file_(std::tmpfile()), previous_(SetLogOutput(file_)), level_(GetLogLevel()) {}
  ~LogCapture() {
    SetLogOutput(previous_);
    SetLogLevel(level_);
    std::fclose(file_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything written so far, byte for byte.
  std::string Text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), file_)) > 0;) text.append(buf, n);
    return text;
  }
  // The lines written so far, without their newlines (an unterminated last line included).
  std::vector<std::string> Lines() {
    const std::string text = Text();
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    if (lines.back().empty()) lines.pop_back();
    return lines;
  }

 private:
  std::FILE* file_;
  std::FILE* previous_;
  LogLevel level_;
};

}  // namespace tg::server::testing

#endif  // TENSORGRID_SERVER_LOG_CAPTURE_H_
