// ProbeHealth and HealthPort against a real rpc-server started in-process (RpcServer) on
// loopback, plaintext and TLS, with certificates made by the openssl command line tool.
#include "server/health_probe.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/protocol.h"
#include "server/rpc_server.h"
#include "tensorgrid/v1/tensorgrid.grpc.pb.h"
#include "tests/lib/test_util.h"

namespace tg::server {
namespace {

namespace fs = std::filesystem;

// One probe whose status has `code`; a failure shows that probe's status (not a second one's).
::testing::AssertionResult ProbeGives(const HealthProbeOptions& o, absl::StatusCode code) {
  const absl::Status s = ProbeHealth(o);
  if (s.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "probe of " << o.target << ": " << s;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A scratch folder with a CA and certificates signed by it, made with the openssl tool.
class CertDir {
 public:
  CertDir() : dir_(fs::temp_directory_path() / absl::StrCat("tg_health_probe_", getpid())) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~CertDir() { fs::remove_all(dir_); }

  bool MakeCa(const std::string& name) {
    return Run(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=", name,
                            " -keyout ", name, ".key -out ", name, ".crt"));
  }
  // A server certificate for `san` (e.g. "DNS:rpc-server-1" or "IP:127.0.0.1") signed by `ca`.
  bool MakeLeaf(const std::string& name, const std::string& san, const std::string& ca) {
    return Run(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=", name, " -keyout ",
                            name, ".key -out ", name, ".csr")) &&
           WriteExt(name, san) &&
           Run(absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca, ".crt -CAkey ", ca,
                            ".key -CAcreateserial -days 2 -extfile ", name, ".ext -out ", name,
                            ".crt"));
  }
  std::string Pem(const std::string& file) const { return Slurp(dir_ / file); }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

 private:
  bool WriteExt(const std::string& name, const std::string& san) const {
    std::ofstream out(dir_ / (name + ".ext"));
    out << "subjectAltName=" << san << "\n";
    return static_cast<bool>(out.flush());
  }
  bool Run(const std::string& cmd) const {
    return std::system(
               absl::StrCat("cd ", dir_.string(), " && ", cmd, " >/dev/null 2>&1").c_str()) == 0;
  }
  fs::path dir_;
};

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

class HealthProbeTest : public ::testing::Test {
 protected:
  std::unique_ptr<RpcServer> StartServer(const std::string& cert = "", const std::string& key = "",
                                         const std::string& token = "") {
    ServerConfig c;
    c.port = 0;
    c.devices = {testing::CpuDevice()};
    c.tls_cert_pem = cert;
    c.tls_key_pem = key;
    c.auth_token = token;
    config_ = c;
    absl::StatusOr<std::unique_ptr<RpcServer>> s = RpcServer::Start(c);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // A TLS server with the certificate and key `leaf` of `certs`.
  std::unique_ptr<RpcServer> StartTlsServer(const CertDir& certs, const std::string& leaf,
                                            const std::string& token = "") {
    return StartServer(certs.Pem(leaf + ".crt"), certs.Pem(leaf + ".key"), token);
  }
  ServerConfig config_;
};

// The TLS cases: a scratch CA "ca" made with the openssl tool (skipped without it).
class TlsHealthProbeTest : public HealthProbeTest {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) GTEST_SKIP() << "openssl not installed";
    ASSERT_TRUE(certs_.MakeCa("ca"));
  }
  CertDir certs_;
};

HealthProbeOptions ProbeOf(const RpcServer& server) {
  HealthProbeOptions o;
  o.target = server.address();
  return o;
}

TEST_F(HealthProbeTest, PlaintextServerIsServingUntilItStops) {
  std::unique_ptr<RpcServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  HealthProbeOptions o = ProbeOf(*server);
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kOk));
  server->Shutdown(0);
  const absl::Status gone = ProbeHealth(o);
  EXPECT_TRUE(absl::IsUnavailable(gone)) << gone;
  EXPECT_NE(gone.message().find(o.target), std::string::npos) << gone;
}

TEST_F(TlsHealthProbeTest, TlsProbePinsTheServersOwnCertificate) {
  // No name the probe could check: only the pin can accept it.
  ASSERT_TRUE(certs_.MakeLeaf("mine", "DNS:rpc-server-1", "ca"));
  ASSERT_TRUE(certs_.MakeLeaf("other", "DNS:rpc-server-2", "ca"));
  std::unique_ptr<RpcServer> server = StartTlsServer(certs_, "mine");
  ASSERT_NE(server, nullptr);
  HealthProbeOptions o = ProbeOf(*server);
  o.pinned_cert_pem = certs_.Pem("mine.crt");
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kOk));
  // The same CA's certificate for another server is not this server.
  o.pinned_cert_pem = certs_.Pem("other.crt");
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kUnavailable));
  // Plaintext against TLS fails; so does the CA when the target's name is not in the cert.
  o.pinned_cert_pem.clear();
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kUnavailable));
  o.ca_pem = certs_.Pem("ca.crt");
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kUnavailable));
  o.pinned_cert_pem = "not a certificate";
  o.ca_pem.clear();
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kInvalidArgument));
}

TEST_F(TlsHealthProbeTest, TlsProbeVerifiesAgainstTheCa) {
  ASSERT_TRUE(certs_.MakeCa("stranger"));
  ASSERT_TRUE(certs_.MakeLeaf("loopback", "IP:127.0.0.1", "ca"));
  std::unique_ptr<RpcServer> server = StartTlsServer(certs_, "loopback");
  ASSERT_NE(server, nullptr);
  HealthProbeOptions o = ProbeOf(*server);
  o.ca_pem = certs_.Pem("ca.crt");
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kOk));
  o.ca_pem = certs_.Pem("stranger.crt");
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kUnavailable));
}

TEST_F(TlsHealthProbeTest, HealthPortAnswersForTheTlsMainPortInPlaintext) {
  ASSERT_TRUE(certs_.MakeLeaf("mine", "DNS:rpc-server-0.rpc-server", "ca"));
  std::unique_ptr<RpcServer> server = StartTlsServer(certs_, "mine", "s3cret");
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<HealthPort>> port =
      HealthPort::Start("127.0.0.1", 0, ProbeOptionsFor(config_, server->port()));
  ASSERT_TRUE(port.ok()) << port.status();
  HealthProbeOptions o;  // what the kubelet does: plaintext, no token.
  o.target = absl::StrCat("127.0.0.1:", (*port)->port());
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kOk));
  // The main port's own answer for a service it does not know comes through.
  o.service = "no.such.Service";
  EXPECT_TRUE(ProbeGives(o, absl::StatusCode::kNotFound));
  o.service.clear();

  // Health only: the tensorgrid service is not reachable through the plaintext port.
  std::shared_ptr<grpc::Channel> ch =
      grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials());
  auto stub = ::tensorgrid::v1::TensorGrid::NewStub(ch);
  grpc::ClientContext ctx;
  ::tensorgrid::v1::HelloRequest hello;
  ::tensorgrid::v1::HelloReply reply;
  EXPECT_EQ(stub->Hello(&ctx, hello, &reply).error_code(), grpc::StatusCode::UNIMPLEMENTED);

  server->Shutdown(0);
  // Answers are reused for a second (no self-dial per check): the next one is fresh.
  absl::SleepFor(absl::Milliseconds(1100));
  const absl::Status down = ProbeHealth(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(down)) << down;
  EXPECT_NE(down.message().find("NOT_SERVING"), std::string::npos) << down;
}

// A flood of checks on the health port does not make the server dial itself per check: the
// main port's answer is reused for a second, and concurrent checks share one probe.
TEST_F(HealthProbeTest, HealthPortChecksShareOneProbeASecond) {
  std::unique_ptr<RpcServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<HealthPort>> port =
      HealthPort::Start("127.0.0.1", 0, ProbeOptionsFor(config_, server->port()));
  ASSERT_TRUE(port.ok()) << port.status();
  HealthProbeOptions o;
  o.target = absl::StrCat("127.0.0.1:", (*port)->port());
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  std::atomic<int> serving{0};
  absl::Mutex mu;
  std::string first_error;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        const absl::Status s = ProbeHealth(o);
        serving += s.ok() ? 1 : 0;
        absl::MutexLock lock(&mu);
        if (!s.ok() && first_error.empty()) first_error = s.ToString();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(serving.load(), 80) << first_error;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // One probe per second elapsed (and one to begin with), not 80.
  EXPECT_LE((*port)->probes(), static_cast<uint64_t>(seconds) + 2) << seconds << " s";
}

// gRPC server reflection lists every method to anyone who connects (no token): off unless
// asked for (--reflection).
TEST_F(HealthProbeTest, ReflectionIsOffUnlessAskedFor) {
  for (bool on : {false, true}) {
    ServerConfig c;
    c.port = 0;
    c.devices = {testing::CpuDevice()};
    c.reflection = on;
    absl::StatusOr<std::unique_ptr<RpcServer>> server = RpcServer::Start(c);
    ASSERT_TRUE(server.ok()) << server.status();
    std::shared_ptr<grpc::Channel> ch =
        grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
    grpc::internal::RpcMethod method(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        grpc::internal::RpcMethod::BIDI_STREAMING, ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> call(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            ch.get(), method, &ctx));
    // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
    const std::string request("\x3a\x00", 2);
    grpc::Slice slice(request);
    call->Write(grpc::ByteBuffer(&slice, 1));
    call->WritesDone();
    grpc::ByteBuffer response;
    const bool answered = call->Read(&response);
    while (call->Read(&response)) {
    }
    const grpc::Status st = call->Finish();
    if (on) {
      EXPECT_TRUE(answered);
      EXPECT_TRUE(st.ok()) << st.error_message();
    } else {
      EXPECT_FALSE(answered);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << st.error_message();
    }
  }
}

TEST_F(HealthProbeTest, ProbeOptionsForAWildcardBindUseLoopback) {
  ServerConfig c;
  c.host = "0.0.0.0";
  c.tls_cert_pem = "CERT";
  c.auth_token = "tok";
  HealthProbeOptions o = ProbeOptionsFor(c, 50052);
  EXPECT_EQ(o.target, "127.0.0.1:50052");
  EXPECT_EQ(o.pinned_cert_pem, "CERT");
  EXPECT_EQ(o.token, "tok");
  c.host = "10.1.2.3";
  EXPECT_EQ(ProbeOptionsFor(c, 7).target, "10.1.2.3:7");
}

TEST_F(HealthProbeTest, HealthPortRefusesAPortOutOfRange) {
  absl::StatusOr<std::unique_ptr<HealthPort>> port = HealthPort::Start("127.0.0.1", 70000, {});
  EXPECT_TRUE(absl::IsInvalidArgument(port.status())) << port.status();
  EXPECT_NE(port.status().message().find("70000"), std::string::npos);
}

TEST(ProbeTargetTest, ParsesHostAndPort) {
  EXPECT_EQ(*ProbeTarget("50052"), "127.0.0.1:50052");
  EXPECT_EQ(*ProbeTarget("rpc-server-1:9"), "rpc-server-1:9");
  EXPECT_EQ(*ProbeTarget("[::1]:50052"), "[::1]:50052");
  for (const char* bad : {"", "abc", "host:", ":1", "0", "65536", "::1:5", "h:-1"}) {
    absl::StatusOr<std::string> t = ProbeTarget(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << "'" << bad << "' gave " << t.status();
  }
}

TEST_F(TlsHealthProbeTest, RunHealthProbeExitCodes) {
  ASSERT_TRUE(certs_.MakeLeaf("mine", "DNS:rpc-server-1", "ca"));
  std::unique_ptr<RpcServer> server = StartTlsServer(certs_, "mine");
  ASSERT_NE(server, nullptr);
  const std::string port = std::to_string(server->port());
  EXPECT_EQ(RunHealthProbe(port, certs_.Path("mine.crt"), "", ""), 0);
  EXPECT_EQ(RunHealthProbe(port, "", "", ""), 1);  // plaintext against TLS.
  EXPECT_EQ(RunHealthProbe(port, certs_.Path("missing.crt"), "", ""), 1);
  EXPECT_EQ(RunHealthProbe("nonsense", certs_.Path("mine.crt"), "", ""), 1);
  server->Shutdown(0);
  EXPECT_EQ(RunHealthProbe(port, certs_.Path("mine.crt"), "", ""), 1);
}

}  // namespace
}  // namespace tg::server
