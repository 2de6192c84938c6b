// Dot products of weight rows with f32 activation rows for MUL_MAT / MUL_MAT_ID, in units of
// 32 weights: a Q4_0/Q8_0 block, a Q4_K sub-block, two Q6_K groups, or 32 plain elements.
// Quantized weights meet activations already rounded to the CPU's activation format
// (mul_mat_act.comp), so the products match the CPU's integer dot products up to summation
// order. Needs common.glsl.

// sum over the unit's elements of a * b, where b points at the unit's first activation.
float unit_dot(uint type, uint64_t row, uint u, uint64_t b, uint K) {
  if (type == T_Q4_0) {
    const uint64_t blk = row + uint64_t(u) * 18u;
    float s = 0.0;
    for (uint j = 0u; j < 16u; ++j) {
      const uint q = load_u8(blk + 2u + j);
      s += (float(q & 0xFu) - 8.0) * F32s(b).v[j] + (float(q >> 4) - 8.0) * F32s(b).v[j + 16u];
    }
    return load_f16(blk) * s;
  }
  if (type == T_Q8_0) {
    const uint64_t blk = row + uint64_t(u) * 34u;
    float s = 0.0;
    for (uint j = 0u; j < 32u; ++j) s += float(load_i8(blk + 2u + j)) * F32s(b).v[j];
    return load_f16(blk) * s;
  }
  if (type == T_Q4_K) {
    const uint64_t blk = row + uint64_t(u / 8u) * 144u;
    const uint sub = u % 8u;
    uint sc, m;
    q4k_scale_min(blk + 4u, sub, sc, m);
    const uint64_t qs = blk + 16u + 32u * (sub / 2u);
    const uint shift = (sub & 1u) * 4u;
    float s = 0.0, sb = 0.0;
    for (uint j = 0u; j < 32u; ++j) {
      const float x = F32s(b).v[j];
      s += float((load_u8(qs + j) >> shift) & 0xFu) * x;
      sb += x;
    }
    return load_f16(blk) * float(sc) * s - load_f16(blk + 2u) * float(m) * sb;
  }
  if (type == T_Q6_K) {
    const uint64_t blk = row + uint64_t(u / 8u) * 210u;
    const uint e0 = (u % 8u) * 32u;
    const uint h = e0 / 128u, quarter = (e0 % 128u) / 32u;
    const uint64_t qlp = blk + 64u * h + ((quarter & 1u) != 0u ? 32u : 0u);
    const uint64_t qhp = blk + 128u + 32u * h;
    const uint lo_shift = quarter < 2u ? 0u : 4u;
    const uint hi_shift = 2u * quarter;
    float s0 = 0.0, s1 = 0.0;
    for (uint l = 0u; l < 32u; ++l) {
      const int q = int(((load_u8(qlp + l) >> lo_shift) & 0xFu) |
                        (((load_u8(qhp + l) >> hi_shift) & 3u) << 4)) - 32;
      const float p = float(q) * F32s(b).v[l];
      if (l < 16u) s0 += p; else s1 += p;
    }
    const uint64_t scp = blk + 192u + 8u * h + 2u * quarter;
    return load_f16(blk + 208u) * (float(load_i8(scp)) * s0 + float(load_i8(scp + 1u)) * s1);
  }
  // Plain weights: up to 32 elements, the last unit of a row may be shorter.
  const uint k0 = u * 32u;
  const uint n = min(32u, K - k0);
  float s = 0.0;
  if (type == T_F32) {
    for (uint j = 0u; j < n; ++j) s += F32s(row).v[k0 + j] * F32s(b).v[j];
  } else if (type == T_F16) {
    for (uint j = 0u; j < n; ++j) s += f16_to_f32(uint(U16s(row).v[k0 + j])) * F32s(b).v[j];
  } else {
    for (uint j = 0u; j < n; ++j) s += bf16_to_f32(uint(U16s(row).v[k0 + j])) * F32s(b).v[j];
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
