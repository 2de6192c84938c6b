// copy_bandwidth [DEVICE] [MiB]: the memory roofline of a CUDA device, as GB/s of a device-
// to-device copy through the backend (CudaStream::CopyTensorAsync): bytes read plus bytes
// written per second, the best of several runs. Exit 0 with one result line, 77 (skipped)
// when the device is not there, 1 on an error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backends/register_builtin.h"
#include "core/context.h"
#include "core/registry.h"

namespace {

constexpr int kSkipped = 77;
constexpr int kRuns = 10;
constexpr int64_t kDefaultMiB = 1024;

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "copy_bandwidth: %s: %s\n", what.c_str(), std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "CUDA0";
  int64_t mib = argc > 2 ? std::atoll(argv[2]) : kDefaultMiB;
  if (absl::Status s = tg::RegisterBuiltinBackends(); !s.ok()) return Fail("register", s);
  absl::StatusOr<tg::Device*> dev = tg::Registry::Get().FindDevice(name);
  if (!dev.ok()) {
    std::printf("skipped: %s\n", std::string(dev.status().message()).c_str());
    return kSkipped;
  }
  // Two buffers of at most a quarter of the free memory each.
  mib = std::max<int64_t>(1, std::min<int64_t>(mib, (*dev)->memory().free / 4 / (1 << 20)));
  tg::Context ctx;
  const int64_t n = mib * (1 << 20) / 4;
  tg::Tensor* src = *ctx.NewTensor(tg::DType::kF32, {n});
  tg::Tensor* dst = *ctx.NewTensor(tg::DType::kF32, {n});
  std::unique_ptr<tg::Buffer> bufs[2];
  tg::Tensor* ts[2] = {src, dst};
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<tg::Buffer>> b =
        (*dev)->default_buffer_type()->Allocate(src->NumBytes());
    if (!b.ok()) return Fail("allocate", b.status());
    bufs[i] = std::move(*b);
    if (absl::Status s = tg::PlaceTensor(bufs[i].get(), ts[i], 0); !s.ok()) return Fail("place", s);
  }
  if (absl::Status s = bufs[0]->Clear(1); !s.ok()) return Fail("clear", s);
  absl::StatusOr<std::unique_ptr<tg::Stream>> stream = (*dev)->CreateStream();
  if (!stream.ok()) return Fail("stream", stream.status());
  double best_s = 1e30;
  for (int r = 0; r <= kRuns; ++r) {  // run 0 warms up.
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = (*stream)->CopyTensorAsync(src, dst); !s.ok()) return Fail("copy", s);
    if (absl::Status s = (*stream)->Synchronize(); !s.ok()) return Fail("synchronize", s);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best_s = std::min(best_s, secs);
  }
  const double bytes = 2.0 * static_cast<double>(src->NumBytes());
  std::printf("%s device-to-device copy of %lld MiB: %.1f GB/s (read + write, best of %d)\n",
              name.c_str(), static_cast<long long>(mib), bytes / best_s / 1e9, kRuns);
  return 0;
}
