// Runs the CPU MUL_MAT / MUL_MAT_ID kernels directly, on several threads the way a CPU stream
// does (a spin barrier, shares of rows taken and stolen in chunks, scratch deliberately
// misaligned), for the kernel tests.
#ifndef TENSORGRID_TESTS_LIB_MUL_MAT_RUNNER_H_
#define TENSORGRID_TESTS_LIB_MUL_MAT_RUNNER_H_

#include <vector>

#include "backends/cpu/compute_params.h"
#include "core/tensor.h"

namespace tg::testing {

// Computes dst (op MUL_MAT or MUL_MAT_ID, sources and memory set) on nth threads; a kernel's
// run-time error lands in `error`. weights_from_memory: as in a graph whose weights exceed
// the last-level cache (ComputeParams::weights_from_memory).
void RunMulMatKernel(Tensor* dst, int nth, cpu::KernelError* error,
                     bool weights_from_memory = false);

// a x b (MUL_MAT) into a fresh f32 result [a.ne[1], b.ne[1], b.ne[2], b.ne[3]] filled with
// NaN beforehand, on nth threads; expects no kernel error. Returns the result's values.
std::vector<float> RunMulMat(Tensor* a, Tensor* b, int nth, bool weights_from_memory = false);

}  // namespace tg::testing

#endif  // TENSORGRID_TESTS_LIB_MUL_MAT_RUNNER_H_
