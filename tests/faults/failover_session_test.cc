// FailoverSession (models/failover_session.h) against real rpc-server processes on loopback:
// one killed (-9) mid-generation (greedy and sampled), before a prompt or as the consumer
// stops, and the session goes on with the servers left. Its tokens must be those of
// DecodeGreedy (DecodeSample) one step at a time on the local CPU, on a plain LlamaSession
// (no failover, no RPC). The servers' keepalive (2 s) assumes a host that is not starved:
// at a load average of 20+ on 2 cores a load can fail with "keepalive watchdog timeout".
#include "models/failover_session.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/connection.h"
#include "client/remote_buffer.h"
#include "client/remote_device.h"
#include "core/lost_endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/failover_model.h"
#include "models/llama_model.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"
#include "tests/lib/test_util.h"

extern "C" char** environ;

namespace tg {
namespace {

constexpr int kServers = 3;
constexpr int64_t kTokens = 48;  // generated after the prompt's pick: past one 16-cell KV block.
constexpr int64_t kLoseAt = 20;  // tokens out when the server goes.

// One rpc-server process (TG_RPC_SERVER_BIN) exposing one CPU device on a free loopback port.
class ServerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::string& dir, int index) {
    auto p = std::unique_ptr<ServerProcess>(new ServerProcess);
    const std::string port_file = absl::StrCat(dir, "/port", index);
    std::vector<std::string> args = {
        TG_RPC_SERVER_BIN, "-p", "0", "--port-file", port_file, "-d", "CPU", "-t", "1",
        "--metrics-port",  "0"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    p->pid_ = fork();
    if (p->pid_ < 0) return absl::InternalError(absl::StrCat("cannot start ", argv[0]));
    if (p->pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // no server outlives a test killed by its timeout.
      execve(argv[0], argv.data(), environ);
      _exit(127);
    }
    // The port file appears once the server listens.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream f(port_file);
      std::string text;
      int port = 0;
      if (f >> text && absl::SimpleAtoi(text, &port) && port > 0) {
        p->address_ = absl::StrCat("127.0.0.1:", port);
        return p;
      }
      usleep(20000);
    }
    return absl::DeadlineExceededError("rpc-server did not write its port in 30 s");
  }
  ~ServerProcess() { Kill(); }
  // SIGKILL, as a host lost looks to its clients: the connection resets.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  const std::string& address() const { return address_; }

 private:
  ServerProcess() = default;
  pid_t pid_ = 0;
  std::string address_;
};

class FailoverSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = DemoModelPath();
    if (!std::ifstream(path_).good()) GTEST_SKIP() << path_ << " not found";
    cpu_ = testing::CpuDevice();
    ASSERT_NE(cpu_, nullptr);
    char dir[] = "/tmp/tg-failover-session-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    for (int i = 0; i < kServers; ++i) {
      auto server = ServerProcess::Start(dir_, i);
      ASSERT_TRUE(server.ok()) << server.status();
      servers_.push_back(std::move(*server));
      rpc::ClientOptions options;
      options.progress = false;
      auto connection = rpc::Connection::Open(servers_.back()->address(), options);
      ASSERT_TRUE(connection.ok()) << connection.status();
      families_.push_back(std::make_unique<rpc::RemoteFamily>(std::move(*connection)));
      remotes_.push_back(families_.back()->devices().at(0));
    }
  }

  void TearDown() override {
    families_.clear();
    servers_.clear();
    if (!dir_.empty()) {
      for (int i = 0; i < kServers; ++i) unlink(absl::StrCat(dir_, "/port", i).c_str());
      rmdir(dir_.c_str());
    }
  }

  void Lose(int i) { servers_[i]->Kill(); }

  // -sm layer over the first n servers' devices, -ts even.
  LoadOptions Layers(int n) const {
    LoadOptions lo;
    lo.plan.mode = n > 1 ? SplitMode::kLayer : SplitMode::kNone;
    for (int i = 0; i < n; ++i) {
      lo.plan.devices.push_back(remotes_[i]);
      lo.plan.proportions.push_back(1.0f / n);
    }
    return lo;
  }

  static SessionOptions Options() {
    SessionOptions so;
    so.n_ctx = 128;
    so.kv_pad = 16;
    so.kv_type = DType::kF32;
    return so;
  }

  // The prompt's greedy pick, then kTokens DecodeGreedy steps, on the local CPU.
  std::vector<int32_t> Reference() {
    LoadOptions local;
    local.device = cpu_;
    auto model = LlamaModel::Load(path_, local);
    EXPECT_TRUE(model.ok()) << model.status();
    auto session = *LlamaSession::Create(**model, Options());
    std::vector<int32_t> out = {*session->DecodeGreedy(prompt_)};
    for (int64_t i = 0; i < kTokens; ++i) out.push_back(*session->DecodeGreedy({&out.back(), 1}));
    return out;
  }

  std::string Endpoint(int i) const { return servers_[i]->address(); }

  // A session over `model` that records its failovers in events_.
  std::unique_ptr<FailoverSession> RecordingSession(FailoverModel& model) {
    return *FailoverSession::Create(model, Options(),
                                    [this](const FailoverEvent& e) { events_.push_back(e); });
  }

  // A generation callback that appends each token to `got` and loses `server` once `got`
  // holds kLoseAt tokens.
  std::function<bool(int32_t)> AppendLosingAt(std::vector<int32_t>& got, int server) {
    return [this, &got, server](int32_t t) {
      got.push_back(t);
      if (got.size() == kLoseAt) Lose(server);
      return true;
    };
  }

  std::string path_;
  std::string dir_;
  Device* cpu_ = nullptr;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::unique_ptr<rpc::RemoteFamily>> families_;
  std::vector<Device*> remotes_;
  std::vector<FailoverEvent> events_;
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261, 378};
};

// The prompt's pick by ARGMAX over the logits FailoverSession::Decode returns.
int32_t Argmax(absl::Span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST_F(FailoverSessionTest, GreedyGenerationGoesOnWithoutTheLostServer) {
  const std::vector<int32_t> want = Reference();
  auto model = *FailoverModel::Load(path_, Layers(kServers), /*failover=*/true);
  auto session = RecordingSession(*model);
  std::vector<int32_t> got = {Argmax(*session->Decode(prompt_))};
  const absl::Status s = session->GenerateGreedy(got.back(), kTokens, AppendLosingAt(got, 1));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, want);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].server, Endpoint(1));
  EXPECT_THAT(events_[0].plan.devices, ::testing::ElementsAre(remotes_[0], remotes_[2]));
  EXPECT_EQ(events_[0].plan.mode, SplitMode::kLayer);
  EXPECT_EQ(session->failovers(), 1);
  // The cache holds the prompt and every token but the last, as after GenerateGreedy.
  EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()) + kTokens);
}

// SAMPLE's draws depend on the seed and the position, and the repetition penalty's window on
// the tokens the cache holds: rebuilt on the servers left, the draws are the local ones.
TEST_F(FailoverSessionTest, SampledGenerationDrawsTheSameTokens) {
  SamplingParams params;
  params.sample.temperature = 0.9f;
  params.sample.repeat_penalty = 1.3f;
  params.sample.seed = 7;
  LoadOptions local;
  local.device = cpu_;
  auto ref_model = *LlamaModel::Load(path_, local);
  auto ref = *LlamaSession::Create(*ref_model, Options());
  std::vector<int32_t> want = {*ref->DecodeSample(prompt_, params)};
  for (int64_t i = 0; i < kTokens; ++i)
    want.push_back(*ref->DecodeSample({&want.back(), 1}, params));
  auto model = *FailoverModel::Load(path_, Layers(kServers), /*failover=*/true);
  auto session = RecordingSession(*model);
  std::vector<int32_t> got = {*session->DecodeSample(prompt_, params)};
  const absl::Status s = session->Generate(got.back(), kTokens, params, AppendLosingAt(got, 2));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, want);
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].server, Endpoint(2));
}

TEST_F(FailoverSessionTest, ADecodeRunsAgainOnTheServersLeft) {
  const std::vector<int32_t> want = Reference();
  auto model = *FailoverModel::Load(path_, Layers(2), /*failover=*/true);
  auto session = RecordingSession(*model);
  Lose(0);
  std::vector<int32_t> got = {Argmax(*session->Decode(prompt_))};
  for (int64_t i = 0; i < 4; ++i) got.push_back(Argmax(*session->Decode({&got.back(), 1})));
  EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + 5));
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].server, Endpoint(0));
  EXPECT_THAT(events_[0].plan.devices, ::testing::ElementsAre(remotes_[1]));
  EXPECT_EQ(events_[0].plan.mode, SplitMode::kNone);  // one device left.
}

TEST_F(FailoverSessionTest, AStopHandedOverBeforeTheLossIsKept) {
  const std::vector<int32_t> want = Reference();
  auto model = *FailoverModel::Load(path_, Layers(2), /*failover=*/true);
  auto session = *FailoverSession::Create(*model, Options());
  std::vector<int32_t> got = {Argmax(*session->Decode(prompt_))};
  // The server goes as the consumer stops: the steps queued ahead fail, the stop stands.
  ASSERT_TRUE(session
                  ->GenerateGreedy(got.back(), kTokens,
                                   [&](int32_t t) {
                                     got.push_back(t);
                                     if (got.size() < kLoseAt) return true;
                                     Lose(1);
                                     return false;
                                   })
                  .ok());
  ASSERT_EQ(got.size(), kLoseAt);
  EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size() + kLoseAt - 1));
  // And the session goes on from there, on whichever devices it now has.
  ASSERT_TRUE(session
                  ->GenerateGreedy(got.back(), 8,
                                   [&](int32_t t) {
                                     got.push_back(t);
                                     return true;
                                   })
                  .ok());
  EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + kLoseAt + 8));
}

TEST_F(FailoverSessionTest, WithoutFailoverTheErrorNamesTheServer) {
  auto model = *FailoverModel::Load(path_, Layers(2), /*failover=*/false);
  auto session = *FailoverSession::Create(*model, Options());
  std::vector<int32_t> got = {Argmax(*session->Decode(prompt_))};
  const absl::Status s = session->GenerateGreedy(got.back(), kTokens, AppendLosingAt(got, 1));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr(Endpoint(1))) << s;
  EXPECT_EQ(session->failovers(), 0);
}

TEST_F(FailoverSessionTest, NoDeviceLeftIsTheError) {
  auto model = *FailoverModel::Load(path_, Layers(1), /*failover=*/true);
  auto session = *FailoverSession::Create(*model, Options());
  std::vector<int32_t> got = {Argmax(*session->Decode(prompt_))};
  Lose(0);
  const absl::Status s = session->GenerateGreedy(got.back(), kTokens, [](int32_t) { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("no other device is left"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr(Endpoint(0)));
  // The session is gone; later calls say why instead of crashing.
  EXPECT_EQ(session->Decode(prompt_).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(FailoverSessionTest, AnErrorThatNamesNoServerLeavesTheSessionAsItWas) {
  auto model = *FailoverModel::Load(path_, Layers(2), /*failover=*/true);
  auto session = *FailoverSession::Create(*model, Options());
  ASSERT_TRUE(session->Decode(prompt_).ok());
  const int32_t bad = static_cast<int32_t>(model->model().hparams().n_vocab);
  EXPECT_EQ(session->Decode({&bad, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session->failovers(), 0);
  EXPECT_EQ(session->n_past(), static_cast<int64_t>(prompt_.size()));
  EXPECT_TRUE(session->Decode(prompt_).ok());
}

// A server left can still owe a reply that fails because of the lost one (a graph that
// waited on its piece, here a pull from it): that error must not fail the reload there.
TEST_F(FailoverSessionTest, AServerLeftThatStillOwesAnErrorAboutTheLostOneTakesTheReload) {
  auto model = *FailoverModel::Load(path_, Layers(2), /*failover=*/true);
  auto buffer = *remotes_[1]->default_buffer_type()->Allocate(256);
  Lose(0);
  namespace pb = ::tensorgrid::v1;
  pb::SessionRequest pull;
  pull.mutable_peer_pull()->set_endpoint(Endpoint(0));
  pull.mutable_peer_pull()->set_grant("the lost server's grant");
  pull.mutable_peer_pull()->set_size(256);
  pull.mutable_peer_pull()->set_dst_buffer(static_cast<rpc::RemoteBuffer*>(buffer.get())->handle());
  ASSERT_TRUE(families_[1]->connection()->Post(std::move(pull)).ok());
  buffer.reset();
  const absl::StatusOr<FailoverEvent> event = model->Recover(WithLostEndpoint(
      absl::UnavailableError(absl::StrCat("rpc-server ", Endpoint(0), " is gone")), Endpoint(0)));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->server, Endpoint(0));
  EXPECT_THAT(event->plan.devices, ::testing::ElementsAre(remotes_[1]));
  auto session = *FailoverSession::Create(*model, Options());
  const std::vector<int32_t> want = Reference();
  EXPECT_EQ(Argmax(*session->Decode(prompt_)), want[0]);
}

}  // namespace
}  // namespace tg
