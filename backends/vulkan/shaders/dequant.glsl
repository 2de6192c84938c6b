// Decoding of every quantized weight type: the one place where the block layouts of
// core/quant_blocks.h are read (GET_ROWS, CPY and every MUL_MAT kernel go through it).
// Weights are decoded in units of 32: a Q4_0/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4 block, a
// Q4_K/Q5_K/IQ4_XS sub-block, two 16-weight groups of Q2_K/Q3_K/Q6_K. A unit is 32 small
// integers q and, per half of 16, a scale d and an offset m: weight j is d * q[j] + m (the
// offset only for types that have one), operation for operation core/quants.cc's
// dequantization, so GET_ROWS is exact and dot products with quantized activations are integer
// sums scaled once. Blocks are only 2-byte aligned (MXFP4's 17-byte blocks 1-byte): words are
// loaded 16 or 8 bits at a time where a type needs it. Included by common.glsl.

const uint T_Q5_0 = 6;
const uint T_Q5_1 = 7;
const uint T_Q2_K = 10;
const uint T_Q3_K = 11;
const uint T_Q5_K = 13;
const uint T_IQ4_NL = 20;
const uint T_IQ4_XS = 23;
const uint T_MXFP4 = 39;

// Weights per block: 256 for the super-block types, 32 for the others.
bool is_super_block(uint t) {
  return t == T_Q2_K || t == T_Q3_K || t == T_Q4_K || t == T_Q5_K || t == T_Q6_K || t == T_IQ4_XS;
}
bool is_quant(uint t) {
  return is_super_block(t) || t == T_Q4_0 || t == T_Q5_0 || t == T_Q5_1 || t == T_Q8_0 ||
         t == T_IQ4_NL || t == T_MXFP4;
}
uint block_size(uint t) { return is_super_block(t) ? 256u : (is_quant(t) ? 32u : 1u); }
uint block_bytes(uint t) {
  switch (t) {
    case T_F32: case T_I32: return 4u;
    case T_F16: case T_BF16: return 2u;
    case T_Q4_0: case T_IQ4_NL: return 18u;
    case T_Q5_0: return 22u;
    case T_Q5_1: return 24u;
    case T_Q8_0: return 34u;
    case T_MXFP4: return 17u;
    case T_Q2_K: return 84u;
    case T_Q3_K: return 110u;
    case T_Q4_K: return 144u;
    case T_Q5_K: return 176u;
    case T_IQ4_XS: return 136u;
    default: return 210u;  // T_Q6_K
  }
}
// Types whose weights carry an offset (a minimum) besides the scale.
bool has_offset(uint t) { return t == T_Q4_K || t == T_Q5_K || t == T_Q5_1 || t == T_Q2_K; }
// Q2_K's offsets differ between the two halves of a unit; the others' are one per unit.
bool offset_per_half(uint t) { return t == T_Q2_K; }

// The 4 signed bytes of a word.
ivec4 unpack_i8x4(uint w) { return ivec4(int(w << 24) >> 24, int(w << 16) >> 24, int(w << 8) >> 24, int(w) >> 24); }
// The 4 unsigned bytes of a word.
uvec4 unpack_u8x4(uint w) { return uvec4(w & 0xFFu, (w >> 8) & 0xFFu, (w >> 16) & 0xFFu, w >> 24); }

// Four bytes at a 2-byte aligned address.
uint load_u8x4_a2(uint64_t a) { return uint(U16s(a).v[0]) | (uint(U16s(a).v[1]) << 16); }
// Four bytes at any address.
uint load_u8x4_a1(uint64_t a) {
  return uint(U8s(a).v[0]) | (uint(U8s(a).v[1]) << 8) | (uint(U8s(a).v[2]) << 16) |
         (uint(U8s(a).v[3]) << 24);
}

// The low 4 bits of b spread to bit 0 of the 4 bytes of a word.
uint spread_bits4(uint b) { return (b & 1u) | ((b & 2u) << 7) | ((b & 4u) << 14) | ((b & 8u) << 21); }

// IQ4_NL / IQ4_XS levels and MXFP4's E2M1 values doubled (core/quant_blocks.h), as 16 signed
// bytes in 4 words, picked by selects: from an indexed constant array instead, the 15M-shape
// IQ4_XS model decoded at 3.7 tokens/s on lavapipe against 12.5 with the selects.
const uvec4 kIQ4NLLevels = uvec4(0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u);
const uvec4 kMXFP4Levels = uvec4(0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu);

// Entry n (< 16) of a table of 16 signed bytes.
int level(uvec4 table, uint n) {
  const uint w = n < 8u ? (n < 4u ? table.x : table.y) : (n < 12u ? table.z : table.w);
  return int(w << (24u - 8u * (n & 3u))) >> 24;
}

// The levels that the 4 nibbles (one per byte, each < 16) of a word index.
ivec4 levels4(uint nibbles, bool mxfp4) {
  const uvec4 t = mxfp4 ? kMXFP4Levels : kIQ4NLLevels;
  const uvec4 n = unpack_u8x4(nibbles);
  return ivec4(level(t, n.x), level(t, n.y), level(t, n.z), level(t, n.w));
}

// Half the scale of an E8M0 exponent, 2^(e - 128), as core/quants.h's E8M0ToFloatHalf.
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); }

// Scale and min of Q4_K / Q5_K sub-block j from the 12 packed bytes at `s`.
void q4k_scale_min(uint64_t s, uint j, out uint sc, out uint m) {
  if (j < 4u) {
    sc = load_u8(s + j) & 63u;
    m = load_u8(s + j + 4u) & 63u;
  } else {
    sc = (load_u8(s + j + 4u) & 0xFu) | ((load_u8(s + j - 4u) >> 6) << 4);
    m = (load_u8(s + j + 4u) >> 4) | ((load_u8(s + j) >> 6) << 4);
  }
}

// Scale of Q3_K group g (16 weights) from the 12 packed bytes at `s`, without its offset.
int q3k_scale(uint64_t s, uint g) {
  const uint low = g < 8u ? (load_u8(s + g) & 0xFu) : (load_u8(s + g - 8u) >> 4);
  const uint high = (load_u8(s + 8u + g % 4u) >> (2u * (g / 4u))) & 3u;
  return int(low | (high << 4)) - 32;
}

// A unit in registers: weight j = d[j / 16] * q[j] + m[j / 16].
struct WUnit {
  ivec4 q[8];
  float d0, d1, m0, m1;
};

// The 32-weight blocks with one f16 scale and nibbles (Q4_0, IQ4_NL, MXFP4: element j in the
// low nibble of byte j, element j + 16 in the high one) or 5-bit quants (Q5_0, Q5_1).
void load_block32(uint type, uint64_t row, uint u, inout WUnit wu) {
  const bool q5 = type == T_Q5_0 || type == T_Q5_1;
  const uint64_t blk = row + uint64_t(u) * block_bytes(type);
  const uint64_t qs = blk + (type == T_Q5_1 ? 8u : (type == T_Q5_0 ? 6u : (type == T_MXFP4 ? 1u : 2u)));
  const uint qh = q5 ? load_u8x4_a2(blk + (type == T_Q5_1 ? 4u : 2u)) : 0u;
  [[unroll]] for (uint w = 0u; w < 4u; ++w) {
    const uint word = type == T_MXFP4 ? load_u8x4_a1(qs + 4u * w) : load_u8x4_a2(qs + 4u * w);
    uint lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
    if (q5) {  // bit j of qh is element j's fifth bit.
      lo |= spread_bits4(qh >> (4u * w)) << 4;
      hi |= spread_bits4(qh >> (16u + 4u * w)) << 4;
    }
    if (type == T_IQ4_NL || type == T_MXFP4) {
      wu.q[w] = levels4(lo, type == T_MXFP4);
      wu.q[w + 4u] = levels4(hi, type == T_MXFP4);
    } else {
      const int zero = type == T_Q4_0 ? 8 : (type == T_Q5_0 ? 16 : 0);
      wu.q[w] = ivec4(unpack_u8x4(lo)) - zero;
      wu.q[w + 4u] = ivec4(unpack_u8x4(hi)) - zero;
    }
  }
  wu.d0 = wu.d1 = type == T_MXFP4 ? e8m0_half(load_u8(blk)) : load_f16(blk);
  if (type == T_Q5_1) wu.m0 = wu.m1 = load_f16(blk + 2u);
}

// Q4_K and Q5_K: sub-block `sub` (32 weights) with a 6-bit scale and min.
void load_q45k(uint type, uint64_t blk, uint sub, inout WUnit wu) {
  const bool q5 = type == T_Q5_K;
  uint sc, m;
  q4k_scale_min(blk + 4u, sub, sc, m);
  const uint64_t qs = blk + (q5 ? 48u : 16u) + 32u * (sub / 2u);
  const uint shift = (sub & 1u) * 4u;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    uint v = (U32s(qs).v[w] >> shift) & 0x0F0F0F0Fu;
    if (q5) v |= ((U32s(blk + 16u).v[w] >> sub) & 0x01010101u) << 4;  // qh bit `sub`.
    wu.q[w] = ivec4(unpack_u8x4(v));
  }
  wu.d0 = wu.d1 = load_f16(blk) * float(sc);
  wu.m0 = wu.m1 = -(load_f16(blk + 2u) * float(m));
}

// Q2_K and Q3_K: 2-bit fields at bits 2 (sub % 4) of qs[32 (sub / 4) ..], Q3_K's third bit
// (set: q >= 0) bit `sub` of hmask[0 .. 31]; a scale per 16 weights (Q2_K also a min).
void load_q23k(uint type, uint64_t blk, uint sub, inout WUnit wu) {
  const bool q3 = type == T_Q3_K;
  const uint64_t qs = blk + (q3 ? 32u : 16u) + 32u * (sub / 4u);
  const uint shift = 2u * (sub % 4u);
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    uint v = (load_u8x4_a2(qs + 4u * w) >> shift) & 0x03030303u;
    if (q3) v |= ((load_u8x4_a2(blk + 4u * w) >> sub) & 0x01010101u) << 2;
    wu.q[w] = ivec4(unpack_u8x4(v)) - (q3 ? 4 : 0);
  }
  if (q3) {
    const float d = load_f16(blk + 108u);
    wu.d0 = d * float(q3k_scale(blk + 96u, 2u * sub));
    wu.d1 = d * float(q3k_scale(blk + 96u, 2u * sub + 1u));
  } else {
    const float d = load_f16(blk + 80u), dmin = load_f16(blk + 82u);
    const uint s0 = load_u8(blk + 2u * sub), s1 = load_u8(blk + 2u * sub + 1u);
    wu.d0 = d * float(s0 & 0xFu);
    wu.d1 = d * float(s1 & 0xFu);
    wu.m0 = -(dmin * float(s0 >> 4));
    wu.m1 = -(dmin * float(s1 >> 4));
  }
}

// IQ4_XS: sub-block `sub` with a 6-bit scale (stored + 32) and IQ4_NL's nibble layout.
void load_iq4xs(uint64_t blk, uint sub, inout WUnit wu) {
  const uint low = (load_u8(blk + 4u + sub / 2u) >> (4u * (sub & 1u))) & 0xFu;
  const uint high = (load_u16(blk + 2u) >> (2u * sub)) & 3u;
  wu.d0 = wu.d1 = load_f16(blk) * float(int(low | (high << 4)) - 32);
  const uint64_t qs = blk + 8u + 16u * sub;
  [[unroll]] for (uint w = 0u; w < 4u; ++w) {
    const uint word = U32s(qs).v[w];
    wu.q[w] = levels4(word & 0x0F0F0F0Fu, false);
    wu.q[w + 4u] = levels4((word >> 4) & 0x0F0F0F0Fu, false);
  }
}

// Q6_K: two 16-weight groups of 4 + 2 bit quants (stored + 32), an int8 scale each.
void load_q6k(uint64_t blk, uint sub, inout WUnit wu) {
  const uint e0 = sub * 32u;
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
}

// Unit u (weights 32u .. 32u + 31) of the quantized row at `row`.
WUnit load_wunit(uint type, uint64_t row, uint u) {
  WUnit wu;
  wu.m0 = wu.m1 = 0.0;
  if (type == T_Q8_0) {
    const uint64_t blk = row + uint64_t(u) * 34u;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) wu.q[w] = unpack_i8x4(load_u8x4_a2(blk + 2u + 4u * w));
    wu.d0 = wu.d1 = load_f16(blk);
  } else if (!is_super_block(type)) {
    load_block32(type, row, u, wu);
  } else {
    const uint64_t blk = row + uint64_t(u / 8u) * block_bytes(type);
    const uint sub = u % 8u;
    if (type == T_Q4_K || type == T_Q5_K) load_q45k(type, blk, sub, wu);
    else if (type == T_Q2_K || type == T_Q3_K) load_q23k(type, blk, sub, wu);
    else if (type == T_IQ4_XS) load_iq4xs(blk, sub, wu);
    else load_q6k(blk, sub, wu);
  }
  return wu;
}

// Weight j (< 32) of a unit of `type`.
float wunit_elem(uint type, WUnit wu, uint j) {
  const float q = float(wu.q[j / 4u][j % 4u]);
  const float d = j < 16u ? wu.d0 : wu.d1;
  if (!has_offset(type)) return d * q;
  return d * q + (j < 16u ? wu.m0 : wu.m1);
}

// Element i of the block at `b` of a quantized type.
float dequant(uint type, uint64_t b, uint i) {
  return wunit_elem(type, load_wunit(type, b, i / 32u), i % 32u);
}

// Element i of a row at `row` whose elements are `nb0` bytes apart (plain) or in blocks.
float load_elem(uint type, uint64_t row, uint i, uint nb0) {
  if (!is_quant(type)) return load_plain(type, row + uint64_t(i) * nb0);
  const uint bs = block_size(type);
  return dequant(type, row + uint64_t(i / bs) * block_bytes(type), i % bs);
}
