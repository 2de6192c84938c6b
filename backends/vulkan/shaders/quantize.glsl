// The reference quantizers of core/quants.cc (ggml's quantize_row_*_ref), ported statement by
// statement: a block's f32 values in qx[] are quantized into the block at a byte address.
// `precise` keeps the compiler from fusing or reordering float operations, which would move
// values across rounding boundaries. Needs common.glsl.

float qx[256];  // the values of the block being quantized (per invocation).

void store_u8(uint64_t a, uint v) { U8s(a).v[0] = uint8_t(v & 0xFFu); }
void store_f16(uint64_t a, float v) { U16s(a).v[0] = uint16_t(f32_to_f16(v)); }

// float -> int8 as ggml's (int8_t) cast compiles on x86 (truncate; out of range: 0x80).
int trunc_to_int8(float v) {
  const int wide = (v > -2147483648.0 && v < 2147483648.0) ? int(v) : int(0x80000000u);
  return (wide << 24) >> 24;
}

void quantize_q8_0(uint64_t b) {
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) amax = amax > abs(qx[j]) ? amax : abs(qx[j]);
  const float d = div_rn(amax, 127.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  store_f16(b, d);
  for (uint j = 0u; j < 32u; ++j) {
    precise float v = qx[j] * id;
    store_u8(b + 2u + j, uint(trunc_to_int8(round_away(v))));
  }
}

void quantize_q4_0(uint64_t b) {
  float amax = 0.0, mx = 0.0;
  for (uint j = 0u; j < 32u; ++j) {
    if (amax < abs(qx[j])) {
      amax = abs(qx[j]);
      mx = qx[j];
    }
  }
  const float d = div_rn(mx, -8.0);
  const float id = d != 0.0 ? div_rn(1.0, d) : 0.0;
  store_f16(b, d);
  for (uint j = 0u; j < 16u; ++j) {
    precise float v0 = qx[j] * id + 8.5;
    precise float v1 = qx[j + 16u] * id + 8.5;
    const uint lo = uint(min(15, trunc_to_int8(v0))) & 0xFFu;
    const uint hi = uint(min(15, trunc_to_int8(v1))) & 0xFFu;
    store_u8(b + 2u + j, lo | (hi << 4));
  }
}

// --- Q4_K ------------------------------------------------------------------------------------

uint ql[256];  // quants of the block being quantized.

// make_qkx2_quants over qx[off, off+32) with weights w[]; returns the scale, neg_min = -min.
float make_qkx2_quants(uint off, in float w[32], out float neg_min) {
  const int nmax = 15;
  float mn = qx[off], mx = qx[off];
  precise float sum_w = w[0];
  precise float sum_x = sum_w * qx[off];
  for (uint i = 1u; i < 32u; ++i) {
    if (qx[off + i] < mn) mn = qx[off + i];
    if (qx[off + i] > mx) mx = qx[off + i];
    sum_w += w[i];
    sum_x += w[i] * qx[off + i];
  }
  if (mn > 0.0) mn = 0.0;
  if (mx == mn) {
    for (uint i = 0u; i < 32u; ++i) ql[off + i] = 0u;
    neg_min = -mn;
    return 0.0;
  }
  precise float iscale = div_rn(float(nmax), mx - mn);
  precise float scale = div_rn(1.0, iscale);
  precise float best_error = 0.0;
  for (uint i = 0u; i < 32u; ++i) {
    const int l = clamp(nearest_int(iscale * (qx[off + i] - mn)), 0, nmax);
    ql[off + i] = uint(l);
    precise float diff = scale * float(l) + mn - qx[off + i];
    diff = diff * diff;
    best_error += w[i] * diff;
  }
  uint cand[32];
  for (int is = 0; is <= 20; ++is) {
    precise float step = -1.0 + 0.1 * float(is) + float(nmax);
    iscale = div_rn(step, mx - mn);
    precise float sum_l = 0.0, sum_l2 = 0.0, sum_xl = 0.0;
    for (uint i = 0u; i < 32u; ++i) {
      const int l = clamp(nearest_int(iscale * (qx[off + i] - mn)), 0, nmax);
      cand[i] = uint(l);
      sum_l += w[i] * float(l);
      sum_l2 += w[i] * float(l) * float(l);
      sum_xl += w[i] * float(l) * qx[off + i];
    }
    precise float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0)) continue;
    precise float num_scale = sum_w * sum_xl - sum_x * sum_l;
    precise float num_min = sum_l2 * sum_x - sum_l * sum_xl;
    precise float this_scale = div_rn(num_scale, det);
    precise float this_min = div_rn(num_min, det);
    if (this_min > 0.0) {
      this_min = 0.0;
      this_scale = div_rn(sum_xl, sum_l2);
    }
    precise float error = 0.0;
    for (uint i = 0u; i < 32u; ++i) {
      precise float diff = this_scale * float(cand[i]) + this_min - qx[off + i];
      diff = diff * diff;
      error += w[i] * diff;
    }
    if (error < best_error) {
      for (uint i = 0u; i < 32u; ++i) ql[off + i] = cand[i];
      best_error = error;
      scale = this_scale;
      mn = this_min;
    }
  }
  neg_min = -mn;
  return scale;
}

uint six_bits(float v) { return min(63u, uint(nearest_int(v)) & 0xFFu); }

void quantize_q4_k(uint64_t b) {
  float scales[8], mins[8];
  for (uint j = 0u; j < 8u; ++j) {
    precise float sum_x2 = 0.0;
    for (uint i = 0u; i < 32u; ++i) sum_x2 += qx[32u * j + i] * qx[32u * j + i];
    precise float av_x = sqrt(div_rn(sum_x2, 32.0));
    float w[32];
    for (uint i = 0u; i < 32u; ++i) w[i] = av_x + abs(qx[32u * j + i]);
    scales[j] = make_qkx2_quants(32u * j, w, mins[j]);
  }
  float max_scale = 0.0, max_min = 0.0;
  for (uint j = 0u; j < 8u; ++j) {
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0 ? div_rn(63.0, max_scale) : 0.0;
  const float inv_min = max_min > 0.0 ? div_rn(63.0, max_min) : 0.0;
  uint packed[12];
  for (uint j = 0u; j < 12u; ++j) packed[j] = 0u;
  uint sc6[8], m6[8];
  for (uint j = 0u; j < 8u; ++j) {
    precise float vs = inv_scale * scales[j];
    precise float vm = inv_min * mins[j];
    sc6[j] = six_bits(vs);
    m6[j] = six_bits(vm);
    if (j < 4u) {
      packed[j] = sc6[j];
      packed[j + 4u] = m6[j];
    } else {
      packed[j + 4u] = (sc6[j] & 0xFu) | ((m6[j] & 0xFu) << 4);
      packed[j - 4u] |= (sc6[j] >> 4) << 6;
      packed[j] |= (m6[j] >> 4) << 6;
    }
  }
  const float dq = div_rn(max_scale, 63.0);
  const float dmq = div_rn(max_min, 63.0);
  const uint d_bits = f32_to_f16(dq), dmin_bits = f32_to_f16(dmq);
  U16s(b).v[0] = uint16_t(d_bits);
  U16s(b + 2u).v[0] = uint16_t(dmin_bits);
  for (uint j = 0u; j < 12u; ++j) store_u8(b + 4u + j, packed[j]);
  const float d_all = f16_to_f32(d_bits), dmin_all = f16_to_f32(dmin_bits);
  for (uint j = 0u; j < 8u; ++j) {
    uint sc, m;
    if (j < 4u) {
      sc = packed[j] & 63u;
      m = packed[j + 4u] & 63u;
    } else {
      sc = (packed[j + 4u] & 0xFu) | ((packed[j - 4u] >> 6) << 4);
      m = (packed[j + 4u] >> 4) | ((packed[j] >> 6) << 4);
    }
    precise float d = d_all * float(sc);
    if (d == 0.0) continue;
    precise float dm = dmin_all * float(m);
    for (uint i = 0u; i < 32u; ++i) {
      precise float num = qx[32u * j + i] + dm;
      const float v = div_rn(num, d);
      ql[32u * j + i] = uint(clamp(nearest_int(v), 0, 15));
    }
  }
  for (uint c = 0u; c < 4u; ++c) {
    for (uint i = 0u; i < 32u; ++i) {
      store_u8(b + 16u + 32u * c + i, ql[64u * c + i] | (ql[64u * c + i + 32u] << 4));
    }
  }
}

// --- Q6_K ------------------------------------------------------------------------------------

// make_qx_quants (rmse_type 1, no weights) over qx[off, off+16); quants +32 into ql[].
float make_qx_quants16(uint off) {
  const int nmax = 32;
  float mx = 0.0, amax = 0.0;
  for (uint i = 0u; i < 16u; ++i) {
    if (abs(qx[off + i]) > amax) {
      amax = abs(qx[off + i]);
      mx = qx[off + i];
    }
  }
  if (amax < 1e-15) {
    for (uint i = 0u; i < 16u; ++i) ql[off + i] = 0u;
    return 0.0;
  }
  precise float iscale = div_rn(-float(nmax), mx);
  precise float sumlx = 0.0, suml2 = 0.0;
  for (uint i = 0u; i < 16u; ++i) {
    const int l = clamp(nearest_int(iscale * qx[off + i]), -nmax, nmax - 1);
    precise float w = qx[off + i] * qx[off + i];
    sumlx += w * qx[off + i] * float(l);
    suml2 += w * float(l) * float(l);
    ql[off + i] = uint(nmax + l);
  }
  precise float scale = suml2 != 0.0 ? div_rn(sumlx, suml2) : 0.0;
  precise float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    precise float step = -(float(nmax) + 0.1 * float(is));
    iscale = div_rn(step, mx);
    sumlx = 0.0;
    suml2 = 0.0;
    for (uint i = 0u; i < 16u; ++i) {
      const int l = clamp(nearest_int(iscale * qx[off + i]), -nmax, nmax - 1);
      precise float w = qx[off + i] * qx[off + i];
      sumlx += w * qx[off + i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0.0 && sumlx * sumlx > best * suml2) {
      for (uint i = 0u; i < 16u; ++i) {
        ql[off + i] = uint(nmax + clamp(nearest_int(iscale * qx[off + i]), -nmax, nmax - 1));
      }
      scale = div_rn(sumlx, suml2);
      best = scale * sumlx;
    }
  }
  return scale;
}

void quantize_q6_k(uint64_t b) {
  float scales[16];
  float max_scale = 0.0, max_abs_scale = 0.0;
  for (uint g = 0u; g < 16u; ++g) {
    scales[g] = make_qx_quants16(16u * g);
    if (abs(scales[g]) > max_abs_scale) {
      max_abs_scale = abs(scales[g]);
      max_scale = scales[g];
    }
  }
  if (max_abs_scale < 1e-15) {
    for (uint i = 0u; i < 210u; ++i) store_u8(b + i, 0u);
    return;
  }
  const float iscale = div_rn(-128.0, max_scale);
  const float dq = div_rn(1.0, iscale);
  const uint d_bits = f32_to_f16(dq);
  U16s(b + 208u).v[0] = uint16_t(d_bits);
  int sc[16];
  for (uint g = 0u; g < 16u; ++g) {
    precise float v = iscale * scales[g];
    sc[g] = min(127, nearest_int(v));
    store_u8(b + 192u + g, uint(sc[g]));
  }
  const float d_all = f16_to_f32(d_bits);
  for (uint g = 0u; g < 16u; ++g) {
    precise float d = d_all * float((sc[g] << 24) >> 24);
    if (d == 0.0) continue;
    for (uint i = 0u; i < 16u; ++i) {
      const float v = div_rn(qx[16u * g + i], d);
      ql[16u * g + i] = uint(clamp(nearest_int(v), -32, 31) + 32);
    }
  }
  for (uint h = 0u; h < 2u; ++h) {
    for (uint i = 0u; i < 32u; ++i) {
      const uint q1 = ql[128u * h + i], q2 = ql[128u * h + i + 32u];
      const uint q3 = ql[128u * h + i + 64u], q4 = ql[128u * h + i + 96u];
      store_u8(b + 64u * h + i, (q1 & 0xFu) | ((q3 & 0xFu) << 4));
      store_u8(b + 64u * h + i + 32u, (q2 & 0xFu) | ((q4 & 0xFu) << 4));
      store_u8(b + 128u + 32u * h + i,
               (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

// Quantizes qx[0, block_size(type)) into the block at b.
void quantize_block(uint type, uint64_t b) {
  switch (type) {
    case T_Q8_0: quantize_q8_0(b); break;
    case T_Q4_0: quantize_q4_0(b); break;
    case T_Q4_K: quantize_q4_k(b); break;
    default: quantize_q6_k(b); break;
  }
}
