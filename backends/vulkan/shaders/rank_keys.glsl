// Sort keys of ARGSORT, TOP_K and SAMPLE (sort_rows.glsl): 64-bit keys kept as two words (x
// high, y low), an order-preserving rank of an element's value, then the complement of its
// index, so keys are distinct and a larger key means "comes first" (larger value, then smaller
// index: a stable order). Key 0 means "not a candidate". Two words rather than a uint64_t:
// no 64-bit integer arithmetic, which many GPUs emulate.

// An order-preserving rank of a float's bits: larger numbers rank higher, -0 as +0, NaN 0
// (below -inf's 0x007fffff).
uint float_rank(uint bits) {
  const uint mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0u;
  if (mag == 0u) return 0x80000000u;
  return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}

// The float bits of a rank (-0 comes back as +0); rank not 0.
uint rank_bits(uint rank) { return (rank & 0x80000000u) != 0u ? rank & 0x7fffffffu : ~rank; }

uvec2 index_key(uint rank, uint i) { return uvec2(rank, ~i); }
uint key_index(uvec2 key) { return ~key.y; }
bool is_key(uvec2 key) { return (key.x | key.y) != 0u; }
bool key_greater(uvec2 a, uvec2 b) { return a.x > b.x || (a.x == b.x && a.y > b.y); }
