// What the two FLASH_ATTN kernels (flash_attn.comp, flash_attn_decode.comp) share: their push
// constants (FlashAttnPC in vk_op_attention.cc), the query element as the scores use it, the
// mask and the output row. Include after common.glsl, with K_F16 declared.

layout(push_constant) uniform PC {
  uint64_t q, k, v, m, d;
  uint q_nb1, q_nb2, q_nb3, m_nb1;
  uint k_nb1, k_nb2, k_nb3, m_type;
  uint v_nb1, v_nb2, v_nb3, n_kv;
  uint n_q, H, H_kv, B;
  float scale;
} pc;

float neg_inf() { return uintBitsToFloat(0xff800000u); }

bool is_neg_inf(float x) { return isinf(x) && x < 0.0; }

// Element c of a query row; with F16 K the scores are f16 x f16 products (docs/ops.md).
float q_elem(uint64_t qrow, uint c) {
  const float x = F32s(qrow).v[c];
  return K_F16 != 0u ? f16_to_f32(f32_to_f16(x)) : x;
}

// The mask's entry for key j of a mask row (0 without a mask).
float mask_at(uint64_t mrow, uint j) {
  if (pc.m == 0ul) return 0.0;
  return pc.m_type == T_F16 ? f16_to_f32(uint(U16s(mrow).v[j])) : F32s(mrow).v[j];
}

// The output row of query i of head h, batch b: dst is [Dv, H, n_q, B], contiguous.
uint64_t dst_row(uint h, uint i, uint b, uint head_v) {
  return pc.d + (uint64_t(h) + uint64_t(pc.H) * (uint64_t(i) + uint64_t(pc.n_q) * b)) * head_v * 4u;
}
