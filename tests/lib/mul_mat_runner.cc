#include "tests/lib/mul_mat_runner.h"

#include <cmath>
#include <cstdint>
#include <thread>

#include "backends/cpu/kernels/kernels.h"
#include "core/spin_barrier.h"
#include "gtest/gtest.h"

namespace tg::testing {

void RunMulMatKernel(Tensor* dst, int nth, cpu::KernelError* error, bool weights_from_memory) {
  const bool id = dst->op == Op::kMulMatId;
  const size_t wsize = id ? cpu::MulMatIdWorkSize(dst, nth) : cpu::MulMatWorkSize(dst, nth);
  std::vector<uint8_t> work(wsize + 1);
  Barrier barrier(nth);
  cpu::StealingRanges ranges(nth);
  std::vector<std::thread> threads;
  for (int t = 0; t < nth; ++t) {
    threads.emplace_back([&, t] {
      cpu::ComputeParams p;
      p.ith = t;
      p.nth = nth;
      p.wdata = work.data() + 1;  // misaligned on purpose.
      p.wsize = wsize;
      p.barrier = nth > 1 ? &barrier : nullptr;
      p.ranges = nth > 1 ? &ranges : nullptr;
      p.error = error;
      p.weights_from_memory = weights_from_memory;
      if (id) {
        cpu::ComputeMulMatId(p, dst);
      } else {
        cpu::ComputeMulMat(p, dst);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<float> RunMulMat(Tensor* a, Tensor* b, int nth, bool weights_from_memory) {
  Tensor dst;
  dst.type = DType::kF32;
  dst.ne[0] = a->ne[1], dst.ne[1] = b->ne[1], dst.ne[2] = b->ne[2], dst.ne[3] = b->ne[3];
  SetContiguousStrides(&dst);
  std::vector<float> out(dst.NumElements(), NAN);
  dst.data = out.data();
  dst.op = Op::kMulMat;
  dst.src[0] = a;
  dst.src[1] = b;
  cpu::KernelError error;
  RunMulMatKernel(&dst, nth, &error, weights_from_memory);
  EXPECT_FALSE(error.set.load()) << error.message;
  return out;
}

}  // namespace tg::testing
