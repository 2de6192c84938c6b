#version 460
// ADD, MUL, DIV (b broadcast), SCALE, SILU, SWIGLU, SWIGLU_OAI: one invocation per element of
// the contiguous F32 result; the sources are read through their strides.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, b, d;
  uint ne0, ne1, ne2, ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint b_ne0, b_ne1, b_ne2, b_ne3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint op;
  float p0, p1;
  uint n;
} pc;

const uint OP_ADD = 0u, OP_MUL = 1u, OP_SCALE = 2u, OP_SILU = 3u, OP_SWIGLU = 4u, OP_DIV = 5u,
           OP_SWIGLU_OAI = 6u;

float silu(float x) { return x / (1.0 + exp(-x)); }

// gpt-oss's clamped SwiGLU (docs/ops.md): p0 is alpha, p1 the limit.
float swiglu_oai(float gate, float up) {
  const float x = min(gate, pc.p1);
  const float y = clamp(up, -pc.p1, pc.p1);
  return x / (1.0 + exp(-pc.p0 * x)) * (y + 1.0);
}

void main() {
  const uint idx = flat_group() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  if (idx >= pc.n) return;
  const uint i0 = idx % pc.ne0;
  uint r = idx / pc.ne0;
  const uint i1 = r % pc.ne1;
  r /= pc.ne1;
  const uint i2 = r % pc.ne2;
  const uint i3 = r / pc.ne2;
  const float x = load_f32(pc.a + uint64_t(i0) * pc.a_nb0 + uint64_t(i1) * pc.a_nb1 +
                           uint64_t(i2) * pc.a_nb2 + uint64_t(i3) * pc.a_nb3);
  float y;
  if (pc.op == OP_SCALE) {
    y = x * pc.p0 + pc.p1;
  } else if (pc.op == OP_SILU) {
    y = silu(x);
  } else {
    const float b = load_f32(pc.b + uint64_t(i0 % pc.b_ne0) * pc.b_nb0 +
                             uint64_t(i1 % pc.b_ne1) * pc.b_nb1 +
                             uint64_t(i2 % pc.b_ne2) * pc.b_nb2 +
                             uint64_t(i3 % pc.b_ne3) * pc.b_nb3);
    switch (pc.op) {
      case OP_ADD: y = x + b; break;
      case OP_MUL: y = x * b; break;
      case OP_DIV: y = div_ieee(x, b); break;
      case OP_SWIGLU_OAI: y = swiglu_oai(x, b); break;
      default: y = silu(x) * b; break;
    }
  }
  F32s(pc.d).v[idx] = y;
}
