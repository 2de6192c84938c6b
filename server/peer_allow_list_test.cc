// Tests of server/peer_allow_list: --peers parsing, which endpoints it lets a server connect
// to (and the address it dials), which callers it takes peer calls from, and the default of
// loopback only.
#include "server/peer_allow_list.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>

#include <initializer_list>
#include <string>

#include "gtest/gtest.h"

namespace tg::server {
namespace {

constexpr char kList[] = "10.1.2.3/16, 192.168.5.7:9000,DB,cache:50052,[::1]:7000,fd00::/8";

PeerAllowList List(const char* text) {
  absl::StatusOr<PeerAllowList> l = PeerAllowList::Parse(text);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *l : PeerAllowList();
}

// The address Check dials for `endpoint`, or the status code's name when refused.
std::string Dial(const PeerAllowList& l, const char* endpoint) {
  absl::StatusOr<PeerTarget> t = l.Check(endpoint);
  if (!t.ok()) return absl::StatusCodeToString(t.status().code());
  return t->address;
}

// Expects Check to let each of `endpoints` through, dialling it as given.
void ExpectDialledAsGiven(const PeerAllowList& l, std::initializer_list<const char*> endpoints) {
  for (const char* endpoint : endpoints) EXPECT_EQ(Dial(l, endpoint), endpoint);
}

// Expects Check to refuse each of `endpoints` as not allowed.
void ExpectDenied(const PeerAllowList& l, std::initializer_list<const char*> endpoints) {
  for (const char* endpoint : endpoints) {
    EXPECT_EQ(Dial(l, endpoint), "PERMISSION_DENIED") << endpoint;
  }
}

TEST(PeerAllowListTest, ParsesAndNormalizes) {
  EXPECT_EQ(List(kList).ToString(),
            "10.1.0.0/16,192.168.5.7:9000,[::1]:7000,fd00::/8,db,cache:50052");
  EXPECT_EQ(List("none").ToString(), "none");
  EXPECT_EQ(List("::1,0.0.0.0/0").ToString(), "::1,0.0.0.0/0");
}

TEST(PeerAllowListTest, MalformedEntriesNameThemselves) {
  for (const char* bad : {"", "a,,b", "10.0.0.0/33", "::1/129", "1.2.3.4/x", "host:0", "host:65536",
                          "host:", "bad host", "h@st", "[::1", "[::1]x", "[::1]:"}) {
    absl::StatusOr<PeerAllowList> l = PeerAllowList::Parse(bad);
    ASSERT_FALSE(l.ok()) << "'" << bad << "' parsed as " << l->ToString();
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(l.status().message().find("--peers"), std::string::npos) << l.status();
  }
}

TEST(PeerAllowListTest, AddressesInsideRangesAndPortsThatMatch) {
  const PeerAllowList l = List(kList);
  ExpectDialledAsGiven(l, {"10.1.255.3:80", "192.168.5.7:9000", "[::1]:7000", "[fdff:1::5]:1"});
  ExpectDenied(l, {"10.2.0.1:80", "10.0.255.255:80", "192.168.5.7:9001", "192.168.5.8:9000",
                   "[::1]:7001", "[fe00::5]:1", "127.0.0.1:7000"});
  // An IPv4 address spelled as IPv6 is the IPv4 address.
  EXPECT_EQ(Dial(l, "[::ffff:10.1.9.9]:80"), "10.1.9.9:80");
  ExpectDenied(l, {"[::ffff:10.9.9.9]:80"});
}

TEST(PeerAllowListTest, NamesMatchAsGivenWithTheirPort) {
  const PeerAllowList l = List(kList);
  ExpectDialledAsGiven(l, {"db:1234", "Db:1", "cache:50052"});
  ExpectDenied(l, {"cache:50053", "db.evil.example:1234"});
  absl::StatusOr<PeerTarget> t = l.Check("db:1234");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->server_name, "");
}

TEST(PeerAllowListTest, NamesResolveIntoRangesAndKeepTheirNameForTls) {
  const PeerAllowList l = List("127.0.0.0/8,::1");
  absl::StatusOr<PeerTarget> t = l.Check("localhost:5");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->address == "127.0.0.1:5" || t->address == "[::1]:5") << t->address;
  EXPECT_EQ(t->server_name, "localhost");
  ExpectDenied(l, {"no-such-host.invalid:5"});
  ExpectDenied(List("10.0.0.0/8"), {"localhost:5"});
}

TEST(PeerAllowListTest, RefusalsSayWhyAndMalformedEndpointsAreInvalid) {
  const PeerAllowList l = List("none");
  absl::StatusOr<PeerTarget> t = l.Check("127.0.0.1:80");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(t.status().message().find("127.0.0.1:80"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("--peers"), std::string::npos) << t.status();
  for (const char* bad : {"127.0.0.1", "127.0.0.1:x", ":80", "[::1]", "a:b:c"}) {
    EXPECT_EQ(List("0.0.0.0/0,::/0").Check(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

// The first IPv4 address of an interface that is up and not loopback, with its prefix.
bool OwnIpv4(in_addr* addr, int* prefix) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_netmask == nullptr || i->ifa_addr->sa_family != AF_INET ||
        (i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    *addr = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    *prefix = __builtin_popcount(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr);
    found = *prefix > 0 && *prefix < 32;
  }
  freeifaddrs(list);
  return found;
}

TEST(PeerAllowListTest, DefaultIsLoopbackOnly) {
  const PeerAllowList l = PeerAllowList::Default();
  EXPECT_EQ(l.ToString(), "127.0.0.0/8,::1");
  ExpectDialledAsGiven(l, {"127.0.0.1:50052", "127.9.9.9:1", "[::1]:50052"});
  // TEST-NET-3 (RFC 5737): documentation only, never a real subnet of a test machine.
  ExpectDenied(l, {"203.0.113.9:50052"});
  in_addr own;
  int prefix = 0;
  if (!OwnIpv4(&own, &prefix)) GTEST_SKIP() << "no IPv4 interface besides loopback";
  // Another host of the same subnet is no peer unless --peers names it.
  const uint32_t host = ntohl(own.s_addr) ^ 1u;
  char text[INET_ADDRSTRLEN];
  in_addr neighbour = {htonl(host)};
  inet_ntop(AF_INET, &neighbour, text, sizeof(text));
  const std::string endpoint = std::string(text) + ":50052";
  EXPECT_EQ(Dial(l, endpoint.c_str()), "PERMISSION_DENIED") << l.ToString();
  EXPECT_EQ(l.CheckCaller(endpoint).code(), absl::StatusCode::kPermissionDenied);
}

TEST(PeerAllowListTest, CallersAreCheckedByAddressWhateverTheirPort) {
  const PeerAllowList l = List("10.1.2.3/16,192.168.5.7:9000,localhost,fd00::/8");
  for (const char* ok : {"10.1.200.4:40000", "192.168.5.7:51234", "127.0.0.1:5", "[fd00::9]:80",
                         "10.1.0.1", "[::ffff:10.1.9.9]:7"}) {
    EXPECT_TRUE(l.CheckCaller(ok).ok()) << ok << ": " << l.CheckCaller(ok);
  }
  for (const char* bad :
       {"10.2.0.1:40000", "192.168.5.8:9000", "[fe80::1]:80", "unix:/tmp/s", "", "localhost:80"}) {
    const absl::Status s = l.CheckCaller(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << bad;
    EXPECT_NE(s.message().find("--peers"), std::string::npos) << s;
  }
  EXPECT_EQ(PeerAllowList::Default().CheckCaller("10.9.9.9:1").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(PeerAllowList::Default().CheckCaller("[::1]:1").ok());
  EXPECT_EQ(List("none").CheckCaller("127.0.0.1:1").code(), absl::StatusCode::kPermissionDenied);
}

TEST(PeerAllowListTest, ANameAllowsWhatItResolvesToUnderAnyName) {
  // A service's name (localhost here) covers its replicas' own names and addresses.
  EXPECT_EQ(Dial(List("localhost"), "127.0.0.1:50052"), "127.0.0.1:50052");
  EXPECT_EQ(Dial(List("localhost:7"), "127.0.0.1:8"), "PERMISSION_DENIED");
  EXPECT_EQ(Dial(List("localhost"), "127.0.0.2:50052"), "PERMISSION_DENIED");
}

}  // namespace
}  // namespace tg::server
