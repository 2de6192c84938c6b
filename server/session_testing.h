// SessionEnvTest: the gtest fixture of the in-process Session tests. Its env_ serves sessions
// on two CPU devices and counts into the fixture's own metrics and grant table; a test builds
// its sessions from env_ (changed first where it needs more). Not thread-safe: one test's
// fixture, used from that test's thread.
#ifndef TENSORGRID_SERVER_SESSION_TESTING_H_
#define TENSORGRID_SERVER_SESSION_TESTING_H_

#include "gtest/gtest.h"
#include "server/grant_table.h"
#include "server/metrics.h"
#include "server/server_testing.h"
#include "server/session.h"

namespace tg::server::testing {

class SessionEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.devices = TwoCpuDevices();
    ASSERT_EQ(env_.devices.size(), 2u);
    env_.metrics = &metrics_;
    env_.grants = &grants_;
  }

  Metrics metrics_;
  GrantTable grants_;
  SessionEnv env_;
};

}  // namespace tg::server::testing

#endif  // TENSORGRID_SERVER_SESSION_TESTING_H_
