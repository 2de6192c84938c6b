// Dot products of weight rows with activation rows for MUL_MAT / MUL_MAT_ID, in units of 32
// weights: a Q4_0/Q8_0 block, a Q4_K sub-block, two Q6_K groups, or 32 plain elements.
// Quantized weights meet activations packed by mul_mat_act.comp (act_unit.glsl): the sums
// over a unit are integers, exactly the CPU's, scaled once. Plain weights meet f32 rows.
// Weights are loaded 16 or 32 bits at a time (blocks are only 2-byte aligned): memory
// instructions, not bytes, are what CPU-like devices pay for. Needs common.glsl and
// act_unit.glsl, and GL_EXT_control_flow_attributes.

// Four weight bytes at a 2-byte aligned address.
uint load_u8x4_a2(uint64_t a) { return uint(U16s(a).v[0]) | (uint(U16s(a).v[1]) << 16); }

int idot4(ivec4 a, ivec4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// A quantized weight unit in registers: 32 small integers and how to scale their sums with
// an activation unit a: da * (d0 * q[0..3].a + d1 * q[4..7].a + dmin * sum(a)).
struct WUnit {
  ivec4 q[8];
  float d0, d1, dmin;
};

WUnit load_wunit(uint type, uint64_t row, uint u) {
  WUnit wu;
  if (type == T_Q8_0) {
    const uint64_t blk = row + uint64_t(u) * 34u;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) wu.q[w] = unpack_i8x4(load_u8x4_a2(blk + 2u + 4u * w));
    wu.d0 = wu.d1 = load_f16(blk);
    wu.dmin = 0.0;
  } else if (type == T_Q4_0) {
    const uint64_t blk = row + uint64_t(u) * 18u;
    [[unroll]] for (uint w = 0u; w < 4u; ++w) {
      const uint q = load_u8x4_a2(blk + 2u + 4u * w);
      wu.q[w] = ivec4(unpack_u8x4(q & 0x0F0F0F0Fu));
      wu.q[w + 4u] = ivec4(unpack_u8x4((q >> 4) & 0x0F0F0F0Fu));
    }
    wu.d0 = wu.d1 = load_f16(blk);
    wu.dmin = -8.0 * wu.d0;
  } else if (type == T_Q4_K) {
    const uint64_t blk = row + uint64_t(u / 8u) * 144u;
    const uint sub = u % 8u;
    uint sc, m;
    q4k_scale_min(blk + 4u, sub, sc, m);
    const uint64_t qs = blk + 16u + 32u * (sub / 2u);
    const uint shift = (sub & 1u) * 4u;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) {
      wu.q[w] = ivec4(unpack_u8x4((U32s(qs).v[w] >> shift) & 0x0F0F0F0Fu));
    }
    wu.d0 = wu.d1 = load_f16(blk) * float(sc);
    wu.dmin = -(load_f16(blk + 2u) * float(m));
  } else {  // T_Q6_K
    const uint64_t blk = row + uint64_t(u / 8u) * 210u;
    const uint e0 = (u % 8u) * 32u;
    const uint h = e0 / 128u, quarter = (e0 % 128u) / 32u;
    const uint64_t qlp = blk + 64u * h + ((quarter & 1u) != 0u ? 32u : 0u);
    const uint64_t qhp = blk + 128u + 32u * h;
    const uint lo_shift = quarter < 2u ? 0u : 4u;
    const uint hi_shift = 2u * quarter;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) {
      const uint lo = (load_u8x4_a2(qlp + 4u * w) >> lo_shift) & 0x0F0F0F0Fu;
      const uint hi = ((load_u8x4_a2(qhp + 4u * w) >> hi_shift) & 0x03030303u) << 4;
      wu.q[w] = ivec4(unpack_u8x4(lo | hi)) - 32;
    }
    const uint64_t scp = blk + 192u + 8u * h + 2u * quarter;
    const float d = load_f16(blk + 208u);
    wu.d0 = d * float(load_i8(scp));
    wu.d1 = d * float(load_i8(scp + 1u));
    wu.dmin = 0.0;
  }
  return wu;
}

// The dot of a weight unit with the activation unit at `au`.
float wunit_dot(WUnit wu, uint64_t au) {
  int s0 = 0, s1 = 0;
  [[unroll]] for (uint w = 0u; w < 4u; ++w) s0 += idot4(wu.q[w], unpack_i8x4(U32s(au).v[w]));
  [[unroll]] for (uint w = 4u; w < 8u; ++w) s1 += idot4(wu.q[w], unpack_i8x4(U32s(au).v[w]));
  const float da = F32s(au).v[8];
  const float asum = float(I32s(au).v[9]);
  return da * (wu.d0 * float(s0) + wu.d1 * float(s1) + wu.dmin * asum);
}

// The dot of a weight unit with an activation unit already in registers.
float wunit_dot_words(WUnit wu, uint a[10]) {
  int s0 = 0, s1 = 0;
  [[unroll]] for (uint w = 0u; w < 4u; ++w) s0 += idot4(wu.q[w], unpack_i8x4(a[w]));
  [[unroll]] for (uint w = 4u; w < 8u; ++w) s1 += idot4(wu.q[w], unpack_i8x4(a[w]));
  return uintBitsToFloat(a[8]) * (wu.d0 * float(s0) + wu.d1 * float(s1) + wu.dmin * float(int(a[9])));
}

// The dot of quantized weight unit u of `row` with the activation unit at `au`.
float unit_dot_q(uint type, uint64_t row, uint u, uint64_t au) {
  return wunit_dot(load_wunit(type, row, u), au);
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

// Element k of weight row `row` (k < K), dequantized.
float weight_elem(uint type, uint64_t row, uint k) {
  if (type == T_F32) return F32s(row).v[k];
  if (type == T_F16) return f16_to_f32(uint(U16s(row).v[k]));
  if (type == T_BF16) return bf16_to_f32(uint(U16s(row).v[k]));
  const uint bs = block_size(type);
  return dequant(type, row + uint64_t(k / bs) * block_bytes(type), k % bs);
}

// Activation k (k < K) of a row of activation units at `row`, dequantized.
float act_elem(uint64_t row, uint k) {
  const uint64_t au = row + uint64_t(k / 32u) * kActUnitBytes;
  const uint w = U32s(au).v[(k % 32u) / 4u];
  return float(int(w << (24u - 8u * (k % 4u))) >> 24) * F32s(au).v[8];
}
