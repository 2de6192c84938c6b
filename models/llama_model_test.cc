// LlamaModel's weight loading: on a CPU (whose buffer type takes host memory) the weights of
// stories260K are used where they lie in the mapped file with --mmap on (their data points into
// the mapping, nothing is loaded) and decode as copied weights do (a meta device over one CPU,
// which copies every weight into its own buffers, is the reference; and --mmap off); the load
// callbacks see the copies.
#include "models/llama_model.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/host_memory.h"
#include "models/llama_session.h"
#include "models/shared_model_path.h"

namespace tg {
namespace {

bool InMapping(const LlamaModel& m, const Tensor* t) {
  const absl::Span<const uint8_t> bytes = m.file().bytes();
  const auto* p = static_cast<const uint8_t*>(t->data);
  return p >= bytes.data() && p + t->NumBytes() <= bytes.data() + bytes.size();
}

std::vector<int32_t> Greedy(const LlamaModel& m) {
  SessionOptions so;
  so.n_ctx = 64;
  absl::StatusOr<std::unique_ptr<LlamaSession>> s = LlamaSession::Create(m, so);
  EXPECT_TRUE(s.ok()) << s.status();
  std::vector<int32_t> out;
  absl::StatusOr<int32_t> first = (*s)->DecodeGreedy({1, 403, 152});
  EXPECT_TRUE(first.ok()) << first.status();
  absl::Status st = (*s)->GenerateGreedy(*first, 8, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(LlamaModelLoadTest, CpuWeightsStayInTheMappingAndDecodeAsCopies) {
  const std::string path = DemoModelPath();
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " not found";
  cpu::CpuDevice cpu("CPU", "cpu", 1);
  LoadOptions lo;
  lo.device = &cpu;
  lo.mapping = WeightMapping::kInPlace;
  size_t loaded = 0;  // copied into a device buffer.
  size_t in_place = 0;
  lo.loaded = [&](absl::Span<const LoadStats> stats, double) {
    for (const LoadStats& s : stats) {
      loaded += s.bytes - s.mapped;
      in_place += s.mapped;
    }
  };
  absl::StatusOr<std::unique_ptr<LlamaModel>> mapped = LlamaModel::Load(path, lo);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(loaded, 0u);  // stories260K's tensors are all 32-byte aligned: none copied.
  EXPECT_EQ(in_place, (*mapped)->weight_bytes());  // and the report still counts them.
  EXPECT_TRUE(InMapping(**mapped, (*mapped)->tok_embd()));
  for (const LlamaLayer& l : (*mapped)->layers()) {
    EXPECT_TRUE(InMapping(**mapped, l.wq));
    EXPECT_TRUE(InMapping(**mapped, l.ffn_down));
    EXPECT_TRUE(InMapping(**mapped, l.attn_norm));
  }

  LoadOptions copy;
  copy.plan = DevicePlan{SplitMode::kTensor, {&cpu}, {1.0f}};
  loaded = in_place = 0;
  copy.loaded = lo.loaded;
  absl::StatusOr<std::unique_ptr<LlamaModel>> copied = LlamaModel::Load(path, copy);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(loaded, (*copied)->weight_bytes());
  EXPECT_EQ(in_place, 0u);
  EXPECT_FALSE(InMapping(**copied, (*copied)->layers()[0].wq));
  EXPECT_EQ(Greedy(**mapped), Greedy(**copied));

  LoadOptions off = lo;  // --mmap off: the same CPU, every weight copied into its buffers.
  off.mapping = WeightMapping::kCopy;
  loaded = in_place = 0;
  absl::StatusOr<std::unique_ptr<LlamaModel>> own = LlamaModel::Load(path, off);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(loaded, (*own)->weight_bytes());
  EXPECT_EQ(in_place, 0u);
  EXPECT_FALSE(InMapping(**own, (*own)->tok_embd()));
  for (const LlamaLayer& l : (*own)->layers()) {
    EXPECT_FALSE(InMapping(**own, l.wq));
    EXPECT_FALSE(InMapping(**own, l.ffn_down));
  }
  EXPECT_EQ(Greedy(**own), Greedy(**mapped));
}

// --mmap auto copies only where that buys 2 MiB pages, and never weights that would take more
// than half of the memory left.
TEST(LlamaModelLoadTest, AutoMappingCopiesOnlyWhatFitsOntoHugePages) {
  EXPECT_TRUE(KeepsWeightsInPlace(WeightMapping::kInPlace, 1));
  EXPECT_FALSE(KeepsWeightsInPlace(WeightMapping::kCopy, uint64_t{1} << 50));
  EXPECT_TRUE(KeepsWeightsInPlace(WeightMapping::kAuto, uint64_t{1} << 50));  // a PiB.
  EXPECT_TRUE(KeepsWeightsInPlace(WeightMapping::kAuto, HostMemoryAvailable() / 4 * 3));
  EXPECT_EQ(KeepsWeightsInPlace(WeightMapping::kAuto, 1 << 20), !TransparentHugePagesUsable());
}

}  // namespace
}  // namespace tg
