// Dot products of weight rows with activation rows for MUL_MAT / MUL_MAT_ID, in units of 32
// weights (dequant.glsl's units of the quantized types, or 32 plain elements).
// Quantized weights meet activations packed by mul_mat_act.comp (act_unit.glsl): the sums
// over a unit are integers, exactly the CPU's, scaled once. Plain weights meet f32 rows.
// Weights are loaded 16 or 32 bits at a time: memory instructions, not bytes, are what
// CPU-like devices pay for. Needs common.glsl and act_unit.glsl.

int idot4(ivec4 a, ivec4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// The sum of the first 16 quants of an activation unit whose words 0..3 are a0..a3.
int act_half_sum(uint a0, uint a1, uint a2, uint a3) {
  const ivec4 s = unpack_i8x4(a0) + unpack_i8x4(a1) + unpack_i8x4(a2) + unpack_i8x4(a3);
  return s.x + s.y + s.z + s.w;
}

// The dot of a weight unit of `type` with an activation unit in registers (act_unit.glsl's
// 10 words): da * (d0 * q[0..15].a + d1 * q[16..31].a + the offsets times the sums of a).
float wunit_dot_words(uint type, WUnit wu, uint a[10]) {
  int s0 = 0, s1 = 0;
  [[unroll]] for (uint w = 0u; w < 4u; ++w) s0 += idot4(wu.q[w], unpack_i8x4(a[w]));
  [[unroll]] for (uint w = 4u; w < 8u; ++w) s1 += idot4(wu.q[w], unpack_i8x4(a[w]));
  float s = wu.d0 * float(s0) + wu.d1 * float(s1);
  const int asum = int(a[9]);
  if (offset_per_half(type)) {  // Q2_K: a min per 16 weights.
    const int asum0 = act_half_sum(a[0], a[1], a[2], a[3]);
    s += wu.m0 * float(asum0) + wu.m1 * float(asum - asum0);
  } else if (has_offset(type)) {
    s += wu.m0 * float(asum);
  }
  return uintBitsToFloat(a[8]) * s;
}

// The dot of quantized weight unit u of `row` with the activation unit at `au`.
float unit_dot_q(uint type, uint64_t row, uint u, uint64_t au) {
  uint a[10];
  [[unroll]] for (uint w = 0u; w < 10u; ++w) a[w] = U32s(au).v[w];
  return wunit_dot_words(type, load_wunit(type, row, u), a);
}

// The dot of plain weight unit u of `row` (elements 32u.. of K) with f32 activations at `b`
// (the unit's first one).
float unit_dot_f(uint type, uint64_t row, uint u, uint64_t b, uint K) {
  const uint k0 = u * 32u;
  float s = 0.0;
  if (k0 + 32u <= K) {
    if (type == T_F32) {
      [[unroll]] for (uint j = 0u; j < 32u; ++j) s += F32s(row).v[k0 + j] * F32s(b).v[j];
    } else if ((K & 1u) == 0u && (uint(row) & 3u) == 0u) {  // two halves per word.
      [[unroll]] for (uint j = 0u; j < 32u; j += 2u) {
        const uint w = U32s(row).v[(k0 + j) / 2u];
        const vec2 x = type == T_F16 ? unpackHalf2x16(w)
                                     : vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
        s += x.x * F32s(b).v[j] + x.y * F32s(b).v[j + 1u];
      }
    } else {
      [[unroll]] for (uint j = 0u; j < 32u; ++j) {
        const uint h = uint(U16s(row).v[k0 + j]);
        s += (type == T_F16 ? f16_to_f32(h) : bf16_to_f32(h)) * F32s(b).v[j];
      }
    }
    return s;
  }
  // The row's last, shorter unit.
  for (uint j = 0u; k0 + j < K; ++j) {
    float x;
    if (type == T_F32) x = F32s(row).v[k0 + j];
    else if (type == T_F16) x = f16_to_f32(uint(U16s(row).v[k0 + j]));
    else x = bf16_to_f32(uint(U16s(row).v[k0 + j]));
    s += x * F32s(b).v[j];
  }
  return s;
}

// Plain weight unit u of `row` as f32 (zeros past K).
void load_funit(uint type, uint64_t row, uint u, uint K, out float x[32]) {
  const uint k0 = u * 32u;
  if (k0 + 32u <= K && type == T_F32) {
    [[unroll]] for (uint j = 0u; j < 32u; ++j) x[j] = F32s(row).v[k0 + j];
  } else if (k0 + 32u <= K && (K & 1u) == 0u && (uint(row) & 3u) == 0u) {
    [[unroll]] for (uint j = 0u; j < 32u; j += 2u) {
      const uint w = U32s(row).v[(k0 + j) / 2u];
      const vec2 v = type == T_F16 ? unpackHalf2x16(w)
                                   : vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
      x[j] = v.x;
      x[j + 1u] = v.y;
    }
  } else {
    for (uint j = 0u; j < 32u; ++j) {
      const uint k = k0 + j;
      x[j] = 0.0;
      if (k >= K) continue;
      if (type == T_F32) x[j] = F32s(row).v[k];
      else if (type == T_F16) x[j] = f16_to_f32(uint(U16s(row).v[k]));
      else x[j] = bf16_to_f32(uint(U16s(row).v[k]));
    }
  }
}

// The dot of a plain weight unit with f32 activations at `b` (n of them valid).
float funit_dot(float x[32], uint64_t b, uint n) {
  float s = 0.0;
  if (n >= 32u) {
    [[unroll]] for (uint j = 0u; j < 32u; ++j) s += x[j] * F32s(b).v[j];
  } else {
    for (uint j = 0u; j < n; ++j) s += x[j] * F32s(b).v[j];
  }
  return s;
}

// Element k of plain weight row `row` (k < K).
float weight_elem(uint type, uint64_t row, uint k) {
  if (type == T_F32) return F32s(row).v[k];
  if (type == T_F16) return f16_to_f32(uint(U16s(row).v[k]));
  return bf16_to_f32(uint(U16s(row).v[k]));
}

// Activation k (k < K) of a row of activation units at `row`, dequantized.
float act_elem(uint64_t row, uint k) {
  const uint64_t au = row + uint64_t(k / 32u) * kActUnitBytes;
  const uint w = U32s(au).v[(k % 32u) / 4u];
  return float(int(w << (24u - 8u * (k % 4u))) >> 24) * F32s(au).v[8];
}
