// Warp-level tensor-core products with the fragment layouts of mmq_tile.h: an m16n8k16
// int8 product (s32 accumulators) and an m16n8k16 f16 product (f32 accumulators). sm_80 and
// newer run one mma instruction; sm_75 runs its two halves (m8n8k16 int8 on rows 0..7 and
// 8..15; m16n8k8 f16 on K 0..7 and 8..15), which the unit tests show are the same fragments.
// Older GPUs have no such instructions: the host never picks these kernels there
// (cuda_support.h), and the code traps if it were reached. Device-only.
#ifndef TENSORGRID_BACKENDS_CUDA_MMA_CUH_
#define TENSORGRID_BACKENDS_CUDA_MMA_CUH_

#include <cstdint>

namespace tg::cuda {

// c[0..3] += A (16 x 16 int8: registers a0 rows 0..7, a1 rows 8..15) * B (16 x 8 int8).
__device__ __forceinline__ void MmaS8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+r"(c[0]), "+r"(c[1])
               : "r"(a0), "r"(b));
  asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+r"(c[2]), "+r"(c[3])
               : "r"(a1), "r"(b));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// c[0..3] += A (16 x 16 f16, registers a[0..3]) * B (16 x 8 f16, registers b0 K 0..7, b1 8..15).
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[2]), "r"(a[3]), "r"(b1));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Two f16 values (lo: the lower column or K index) in one register.
__device__ __forceinline__ uint32_t PackHalves(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

}  // namespace tg::cuda

#endif  // TENSORGRID_BACKENDS_CUDA_MMA_CUH_
