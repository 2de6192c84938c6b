// MUL_MAT activations quantized as the CPU does, packed in 32-value units (act_unit.glsl):
// QuantizeBlockQ8_0 per 32 values (Q4_0 and Q8_0 weights), QuantizeBlockQ8_K per 256 (Q4_K
// and Q6_K weights). Value k of the row being quantized is act_in(k), which the including
// shader defines before this file: mul_mat_act.comp reads it from memory, rms_norm.comp from
// the row it computed (RMS_NORM x MUL, whose result a product multiplies next). Needs
// common.glsl.
#include "act_unit.glsl"

// Packs 32 quants q (each in [-128, 127]) with scale d into unit `u` of the row at `row`.
void store_unit(uint64_t row, uint u, int q[32], float d) {
  const uint64_t at = row + uint64_t(u) * kActUnitBytes;
  int sum = 0;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    const uint word = (uint(q[4u * w]) & 0xFFu) | ((uint(q[4u * w + 1u]) & 0xFFu) << 8) |
                      ((uint(q[4u * w + 2u]) & 0xFFu) << 16) | ((uint(q[4u * w + 3u]) & 0xFFu) << 24);
    U32s(at).v[w] = word;
    sum += q[4u * w] + q[4u * w + 1u] + q[4u * w + 2u] + q[4u * w + 3u];
  }
  F32s(at).v[8] = d;
  I32s(at).v[9] = sum;
}

// QuantizeBlockQ8_0 of values [k0, k0 + 32) into unit k0 / 32 of the row at dst_row.
void quantize_act_q8_0(uint64_t dst_row, uint k0) {
  float x[32];
  float amax = 0.0;
  [[unroll]] for (uint j = 0u; j < 32u; ++j) {
    x[j] = act_in(k0 + j);
    amax = amax > abs(x[j]) ? amax : abs(x[j]);
  }
  const float d = div_rn(amax, 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  int q[32];
  [[unroll]] for (uint j = 0u; j < 32u; ++j) {
    precise float v = x[j] * id;
    q[j] = (int(round_away(v)) << 24) >> 24;
  }
  store_unit(dst_row, k0 / 32u, q, f16_to_f32(f32_to_f16(d)));
}

// QuantizeBlockQ8_K of values [k0, k0 + 256) into units k0 / 32 .. k0 / 32 + 7.
void quantize_act_q8_k(uint64_t dst_row, uint k0) {
  float mx = 0.0, amax = 0.0;
  for (uint j = 0u; j < 256u; ++j) {
    const float x = act_in(k0 + j);
    if (abs(x) > amax) {
      amax = abs(x);
      mx = x;
    }
  }
  const float iscale = amax == 0.0 ? 0.0 : div_rn(-127.0, mx);
  const float d = amax == 0.0 ? 0.0 : div_rn(1.0, iscale);
  for (uint u = 0u; u < 8u; ++u) {
    int q[32];
    [[unroll]] for (uint j = 0u; j < 32u; ++j) {
      precise float v = iscale * act_in(k0 + 32u * u + j);
      q[j] = min(127, nearest_int(v));
    }
    store_unit(dst_row, k0 / 32u + u, q, d);
  }
}
