// Tests of server/log: the line format (component, level, escaping and quoting of fields),
// level names, level filtering, and whole lines from concurrent threads.
#include "server/log.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/log_capture.h"

namespace tg::server {
namespace {

using testing::LogCapture;

TEST(LogTest, InfoLineIsComponentMessageAndFields) {
  EXPECT_EQ(FormatLogLine("rpc-server", LogLevel::kInfo, "session opened",
                          {{"id", "3f2a"}, {"peer", "127.0.0.1:5432"}, {"sessions", 2}}),
            "rpc-server: session opened id=3f2a peer=127.0.0.1:5432 sessions=2");
  EXPECT_EQ(FormatLogLine("rpc-server", LogLevel::kInfo, "listening on 127.0.0.1:50052", {}),
            "rpc-server: listening on 127.0.0.1:50052");
}

TEST(LogTest, OtherLevelsAreNamedAfterTheComponent) {
  EXPECT_EQ(FormatLogLine("c", LogLevel::kError, "m", {}), "c: error: m");
  EXPECT_EQ(FormatLogLine("c", LogLevel::kWarn, "m", {}), "c: warn: m");
  EXPECT_EQ(FormatLogLine("c", LogLevel::kDebug, "m", {}), "c: debug: m");
}

TEST(LogTest, ValuesAreQuotedWhenTheyWouldBreakTheLine) {
  EXPECT_EQ(FormatLogLine("c", LogLevel::kInfo, "m",
                          {{"empty", ""},
                           {"space", "a b"},
                           {"eq", "k=v"},
                           {"quote", "say \"hi\" \\o/"},
                           {"nl", "one\ntwo\tthree\x01"},
                           {"big", UINT64_MAX},
                           {"neg", -7},
                           {"frac", 0.5}}),
            "c: m empty=\"\" space=\"a b\" eq=\"k=v\" quote=\"say \\\"hi\\\" \\\\o/\" "
            "nl=\"one\\ntwo\\tthree\\x01\" big=18446744073709551615 neg=-7 frac=0.5");
}

TEST(LogTest, MessageNewlinesAreEscaped) {
  const std::string line = FormatLogLine("c", LogLevel::kWarn, "first\nsecond\r", {});
  EXPECT_EQ(line, "c: warn: first\\nsecond\\x0d");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(LogTest, LevelNames) {
  for (LogLevel level : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug}) {
    absl::StatusOr<LogLevel> parsed = ParseLogLevel(LogLevelName(level));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, level);
  }
  EXPECT_EQ(LogLevelName(LogLevel::kWarn), "warn");
  absl::StatusOr<LogLevel> bad = ParseLogLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'verbose'"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("debug"), std::string::npos) << bad.status();
}

TEST(LogTest, LevelFiltersLines) {
  LogCapture capture;
  const Logger log("t");
  const auto all = [&] {
    log.Error("e", {{"n", 1}});
    log.Warn("w");
    log.Info("i");
    log.Debug("d");
  };
  SetLogLevel(LogLevel::kWarn);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  all();
  SetLogLevel(LogLevel::kError);
  all();
  SetLogLevel(LogLevel::kDebug);
  all();
  SetLogLevel(LogLevel::kInfo);
  all();
  EXPECT_EQ(capture.Lines(),
            (std::vector<std::string>{"t: error: e n=1", "t: warn: w",  // warn
                                      "t: error: e n=1",                // error
                                      "t: error: e n=1", "t: warn: w", "t: i", "t: debug: d",
                                      "t: error: e n=1", "t: warn: w", "t: i"}));  // info
}

TEST(LogTest, ConcurrentLinesStayWhole) {
  constexpr int kThreads = 8;
  constexpr int kLinesPerThread = 400;
  LogCapture capture;
  SetLogLevel(LogLevel::kInfo);
  // Long values: a line far larger than a pipe's atomic write would tear without the mutex.
  const std::string payload(6000, 'x');
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kLinesPerThread; ++i) {
        kServerLog.Info("line", {{"thread", t}, {"i", i}, {"payload", payload}});
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_EQ(capture.Text().back(), '\n');
  std::vector<std::string> lines = capture.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  std::vector<int> next(kThreads, 0);  // each thread's lines arrive whole and in its order.
  for (const std::string& line : lines) {
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "rpc-server: line thread=%d i=%d", &t, &i), 2) << line;
    ASSERT_TRUE(t >= 0 && t < kThreads) << line;
    EXPECT_EQ(i, next[t]++);
    EXPECT_EQ(line, absl::StrCat("rpc-server: line thread=", t, " i=", i, " payload=", payload));
  }
}

}  // namespace
}  // namespace tg::server
