// mem_hog_client: one greedy tenant for mem_limit_test.py. Opens one session on a running
// rpc-server, asks for a buffer of each SIZE in turn on device 0 (sizes in bytes; the word
// "wait" instead waits for a line on stdin, so the test picks the moment of what follows),
// prints one line per request, then holds what it got until its stdin closes and exits,
// closing the session.
//
//   mem_hog_client HOST:PORT SIZE|wait... < control
//
// A line: "alloc SIZE: OK" or "alloc SIZE: <CODE>: <message>"; "waiting" before a wait,
// "holding" at the end. Exit 0 once every request has been answered (refusals included:
// judging them is the test's job), 1 when the server cannot be reached.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "client/connection.h"
#include "server/server_testing.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mem_hog_client HOST:PORT SIZE...\n");
    return 2;
  }
  constexpr uint64_t kWait = 0;  // a zero-byte buffer is never worth asking for.
  std::vector<uint64_t> sizes;
  for (int i = 2; i < argc; ++i) {
    uint64_t size = 0;
    if (std::string(argv[i]) != "wait" && (!absl::SimpleAtoi(argv[i], &size) || size == 0)) {
      std::fprintf(stderr, "mem_hog_client: '%s' is not a size in bytes\n", argv[i]);
      return 2;
    }
    sizes.push_back(size);
  }
  tg::rpc::ClientOptions options;
  options.progress = false;
  absl::StatusOr<std::unique_ptr<tg::rpc::Connection>> c =
      tg::rpc::Connection::Open(argv[1], options);
  if (!c.ok()) {
    std::fprintf(stderr, "mem_hog_client: %s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  char byte;
  for (uint64_t size : sizes) {
    if (size == kWait) {
      std::printf("waiting\n");
      std::fflush(stdout);
      while (read(STDIN_FILENO, &byte, 1) > 0 && byte != '\n') {
      }
      continue;
    }
    auto r = (*c)->Call(tg::server::testing::AllocRequest(0, 0, size));
    if (r.ok()) {
      std::printf("alloc %llu: OK\n", static_cast<unsigned long long>(size));
    } else {
      std::printf("alloc %llu: %s: %s\n", static_cast<unsigned long long>(size),
                  absl::StatusCodeToString(r.status().code()).c_str(),
                  std::string(r.status().message()).c_str());
    }
    std::fflush(stdout);
  }
  std::printf("holding\n");
  std::fflush(stdout);
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}
