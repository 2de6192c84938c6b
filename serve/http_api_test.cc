// HttpApi's lifetime: a server torn down right after Start (tg-server failing at start-up,
// e.g. on a bad chat template) stops and joins its listener instead of leaving it in accept().
#include "serve/http_api.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace tg::serve {
namespace {

TEST(HttpApiTest, DestroyedRightAfterStartStopsItsListener) {
  constexpr int kRounds = 200;
  // The rounds run on a thread of their own, so that a listener left in accept() (the
  // destructor never returning) fails here instead of hanging the test program.
  auto outcome = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = outcome->get_future();
  std::thread([outcome] {
    HttpOptions options;
    options.port = 0;
    options.threads = 2;
    for (int i = 0; i < kRounds; ++i) {
      absl::StatusOr<std::unique_ptr<HttpApi>> api = HttpApi::Start(options);
      if (!api.ok()) return outcome->set_value(std::string(api.status().message()));
    }
    outcome->set_value("");
  }).detach();
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    std::fprintf(stderr,
                 "HttpApi's destructor did not return within 60 s of %d starts: its "
                 "listener was left in accept()\n",
                 kRounds);
    std::_Exit(1);
  }
  EXPECT_EQ(result.get(), "");
}

}  // namespace
}  // namespace tg::serve
