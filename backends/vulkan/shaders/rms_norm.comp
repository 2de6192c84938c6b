#version 460
// RMS_NORM: one workgroup per row, dst = x / sqrt(mean(x^2) + eps) of the row x of a. Fused
// (vk_fusion.h), the kernel also
//  - when b is given, takes x = a + b, the ADD before the norm (a residual sum), and writes x
//    to sum (each invocation rereads only the elements it wrote, so sum may take a's place);
//  - when w is given, writes dw = dst * w, the MUL by the norm's weight row after it;
//  - when qformat is nonzero, writes at q the activations of the MUL_MAT that multiplies the
//    result next, quantized for its weights (1: Q8_0 units, 2: Q8_K; quantize_act.glsl), so
//    that the product needs no mul_mat_act dispatch. The row's results are kept in shared
//    memory for that (ROW_CAP >= ne0), since a unit's values come from several invocations.
#include "common.glsl"
#include "reduce.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ROW_CAP = 1;

shared float row_s[ROW_CAP];  // with qformat: the row's results, as written.

layout(push_constant) uniform PC {
  uint64_t a, d, w, dw;
  uint a_nb0, a_nb1, a_nb2, a_nb3;  // b, when given, has a's shape and strides.
  uint ne0, ne1, ne2, ne3;
  float eps;
  uint qformat;
  uint64_t q, b, sum;
} pc;

uint64_t src;   // the row of a,
uint64_t bsrc;  // of b,
float scale;    // and its 1 / rms.

// Element k of the row the norm reads.
float x_at(uint k) {
  const float x = load_f32(src + uint64_t(k) * pc.a_nb0);
  if (pc.b == 0ul) return x;
  precise float s = x + load_f32(bsrc + uint64_t(k) * pc.a_nb0);
  return s;
}

// Value k of the result the product multiplies (dw, or dst without w).
float act_in(uint k) { return row_s[k]; }
#include "quantize_act.glsl"

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  const uint i1 = row % pc.ne1, i2 = (row / pc.ne1) % pc.ne2, i3 = row / (pc.ne1 * pc.ne2);
  const uint64_t offset =
      uint64_t(i1) * pc.a_nb1 + uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3;
  src = pc.a + offset;
  bsrc = pc.b + offset;
  const uint64_t sum_row = pc.sum + uint64_t(row) * pc.ne0 * 4u;
  float s = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    const float x = x_at(k);
    if (pc.b != 0ul) F32s(sum_row).v[k] = x;
    s += x * x;
  }
  s = workgroup_sum(s);
  scale = 1.0 / sqrt(s / float(pc.ne0) + pc.eps);
  const uint64_t dst = pc.d + uint64_t(row) * pc.ne0 * 4u;
  for (uint k = gl_LocalInvocationID.x; k < pc.ne0; k += gl_WorkGroupSize.x) {
    // This invocation's own element of sum: a may be gone under it.
    const float x = pc.b != 0ul ? F32s(sum_row).v[k] : load_f32(src + uint64_t(k) * pc.a_nb0);
    precise float y = x * scale;
    F32s(dst).v[k] = y;  // first: the MUL's result may take the norm's place.
    float result = y;
    if (pc.w != 0ul) {
      precise float v = y * F32s(pc.w).v[k];
      F32s(pc.dw + uint64_t(row) * pc.ne0 * 4u).v[k] = v;
      result = v;
    }
    if (pc.qformat != 0u) row_s[k] = result;
  }
  if (pc.qformat == 0u) return;
  memoryBarrierShared();
  barrier();
  const uint block = pc.qformat == 1u ? 32u : 256u;
  const uint64_t q_row = pc.q + uint64_t(row) * (pc.ne0 / 32u) * kActUnitBytes;
  for (uint k0 = gl_LocalInvocationID.x * block; k0 < pc.ne0; k0 += gl_WorkGroupSize.x * block) {
    if (pc.qformat == 1u) {
      quantize_act_q8_0(q_row, k0);
    } else {
      quantize_act_q8_k(q_row, k0);
    }
  }
}
