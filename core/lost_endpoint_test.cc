// The lost-endpoint payload: set, read back, absent from other errors whatever their text,
// and kept across a rewording only by KeepIdentity.
#include "core/lost_endpoint.h"

#include <gtest/gtest.h>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace tg {
namespace {

TEST(LostEndpointTest, AMarkedErrorNamesItsEndpointAndKeepsItsCodeAndMessage) {
  const absl::Status s = WithLostEndpoint(absl::UnavailableError("the stream ended"), "h:80");
  EXPECT_EQ(LostEndpoint(s), "h:80");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "the stream ended");
  EXPECT_EQ(s.GetPayload(kLostEndpointTypeUrl), absl::Cord("h:80"));
}

TEST(LostEndpointTest, AMessageThatNamesAServerIsNoLoss) {
  EXPECT_EQ(LostEndpoint(absl::UnavailableError("rpc-server h:80 is gone (read failed): x")),
            std::nullopt);
  EXPECT_EQ(LostEndpoint(absl::UnavailableError("peer unreachable: h:80")), std::nullopt);
  EXPECT_EQ(LostEndpoint(absl::OkStatus()), std::nullopt);
}

TEST(LostEndpointTest, OkAndEmptyEndpointsStayUnmarked) {
  EXPECT_TRUE(WithLostEndpoint(absl::OkStatus(), "h:80").ok());
  EXPECT_EQ(LostEndpoint(WithLostEndpoint(absl::InternalError("x"), "")), std::nullopt);
}

TEST(LostEndpointTest, ALaterMarkReplacesAnEarlierOne) {
  absl::Status s = WithLostEndpoint(absl::UnavailableError("x"), "a:1");
  SetLostEndpoint(s, "b:2");
  EXPECT_EQ(LostEndpoint(s), "b:2");
}

TEST(LostEndpointTest, KeepIdentityCarriesThePayloadsOfTheCauseIntoTheRewording) {
  absl::Status cause = WithLostEndpoint(absl::UnavailableError("gone"), "h:80");
  cause.SetPayload("type.example/other", absl::Cord("v"));
  const absl::Status plain =
      absl::Status(cause.code(), absl::StrCat("split 1 on RPC[h:80]/0: ", cause.message()));
  EXPECT_EQ(LostEndpoint(plain), std::nullopt);  // what KeepIdentity is for.
  const absl::Status kept = KeepIdentity(
      cause, absl::ResourceExhaustedError(absl::StrCat("weights do not fit: ", cause.message())));
  EXPECT_EQ(kept.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(LostEndpoint(kept), "h:80");
  EXPECT_EQ(kept.GetPayload("type.example/other"), absl::Cord("v"));
  // The rewording's own identity wins; an OK rewording stays OK.
  EXPECT_EQ(LostEndpoint(KeepIdentity(cause, WithLostEndpoint(absl::InternalError("y"), "o:1"))),
            "o:1");
  EXPECT_TRUE(KeepIdentity(cause, absl::OkStatus()).ok());
}

}  // namespace
}  // namespace tg
