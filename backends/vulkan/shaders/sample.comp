#version 460
// SAMPLE: one workgroup per row of logits, the token docs/ops.md draws, as the CPU's
// ComputeSample does: the repetition penalty (the window's distinct ids in a shared table), then
// the candidates ranked by logit, larger first and the smaller id first among equals
// (rank_keys.glsl; NaN and -inf are none, +inf ranks as the largest finite float), the top k of
// them selected and sorted (sort_rows.glsl), their f64 weights exp((l - l_0) / T) in parallel,
// and one invocation walks the top-p prefix, the min-p cut and the draw at the row's Philox
// number in rank order. Temperature <= 0 takes the first largest logit (NaN skipped) instead.
// Needs shaderFloat64 and 21 KiB of shared memory; SupportsNode keeps the candidates within
// kSortCap and the window within kPenaltySlots / 2.
#include "common.glsl"
#include "rank_keys.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t l, pos, recent, d;
  uint l_nb1, l_nb2, l_nb3, ne0;
  uint ne1, ne2, ne3, n_recent;  // n_recent 0: no penalty (none, or repeat_penalty 1).
  float temperature, top_p, min_p, penalty;
  uint top_k, seed_lo, seed_hi;
} pc;

// The window's distinct ids in [0, ne0) (open addressing, -1 empty) and their penalized logits.
const uint kPenaltySlots = 512u;
shared int penalty_ids[kPenaltySlots];
shared float penalty_logits[kPenaltySlots];

uint64_t row_src;

// Fibonacci hashing to the 9 bits of a slot.
uint penalty_slot(uint id) { return (id * 0x9E3779B1u) >> 23; }
uint next_slot(uint s) { return (s + 1u) & (kPenaltySlots - 1u); }

// l / penalty when l > 0, else l * penalty, in correctly rounded f32.
float penalize(float x) {
  const uint bits = floatBitsToUint(x);
  const bool positive = (bits & 0x80000000u) == 0u && bits != 0u && bits <= 0x7f800000u;
  return positive ? div_ieee(x, pc.penalty) : x * pc.penalty;
}

void build_penalties() {
  for (uint s = gl_LocalInvocationID.x; s < kPenaltySlots; s += gl_WorkGroupSize.x) {
    penalty_ids[s] = -1;
  }
  barrier();
  for (uint i = gl_LocalInvocationID.x; i < pc.n_recent; i += gl_WorkGroupSize.x) {
    const int id = I32s(pc.recent).v[i];
    if (id < 0 || uint(id) >= pc.ne0) continue;
    uint s = penalty_slot(uint(id));
    for (uint probe = 0u; probe < kPenaltySlots; ++probe) {
      const int held = atomicCompSwap(penalty_ids[s], -1, id);
      if (held == -1) {
        penalty_logits[s] = penalize(F32s(row_src).v[id]);
        break;
      }
      if (held == id) break;  // a repeat: the first one penalizes it.
      s = next_slot(s);
    }
  }
  barrier();
}

float logit(uint i) {
  if (pc.n_recent != 0u) {
    for (uint s = penalty_slot(i), probe = 0u; probe < kPenaltySlots; ++probe, s = next_slot(s)) {
      const int id = penalty_ids[s];
      if (id == int(i)) return penalty_logits[s];
      if (id < 0) break;
    }
  }
  return F32s(row_src).v[i];
}

uvec2 row_key(uint i) {
  uint bits = floatBitsToUint(logit(i));
  if (pc.temperature > 0.0) {
    if (bits == 0xff800000u) return uvec2(0u);     // -inf: no candidate.
    if (bits == 0x7f800000u) bits = 0x7f7fffffu;  // +inf ranks as the largest finite float.
  }
  const uint rank = float_rank(bits);
  return rank == 0u ? uvec2(0u) : index_key(rank, i);  // NaN: no candidate.
}

#include "sort_rows.glsl"

shared double sample_weights[kSortCap];

// Philox4x32-10 as Random123 specifies it (backends/cpu/kernels/philox.h).
uvec4 philox4x32(uvec4 c, uvec2 k) {
  [[unroll]] for (int r = 0; r < 10; ++r) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k += uvec2(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}

// u in [0, 1): output word 0 and the top 21 bits of word 1, times 2^-53 (every step exact).
double sample_uniform(int position) {
  const uvec4 x = philox4x32(uvec4(uint(position), 0u, 0u, 0u), uvec2(pc.seed_lo, pc.seed_hi));
  return (double(x.x) * 2097152.0LF + double(x.y >> 11)) * (1.0LF / 9007199254740992.0LF);
}

// exp(x) in f64 for x <= 0 (GLSL has no f64 exp): x = k ln2 + r + rl with |r| <= ln2 / 2 (ln2 in
// two parts, the low part's product carried in rl), exp(r) by its Taylor series to r^13 with
// 1 + r kept exact in two parts, times 2^k. Within an ulp of glibc's exp (the CPU's); in a
// simulation of this sequence 1.6 % of results differed from glibc's, by one ulp.
double exp64(double x) {
  if (x < -746.0LF) return 0.0LF;
  const double k = roundEven(x * 1.4426950408889634LF);
  precise double rh = x - k * 0.6931471803691238LF;  // exact: the high part has 21 zero bits.
  precise double rl = -(k * 1.9082149292705877e-10LF);
  precise double r = rh + rl;
  rl = (rh - r) + rl;
  precise double s = 1.6059043836821613e-10LF;
  s = s * r + 2.08767569878681e-09LF;
  s = s * r + 2.505210838544172e-08LF;
  s = s * r + 2.755731922398589e-07LF;
  s = s * r + 2.7557319223985893e-06LF;
  s = s * r + 2.48015873015873e-05LF;
  s = s * r + 0.0001984126984126984LF;
  s = s * r + 0.001388888888888889LF;
  s = s * r + 0.008333333333333333LF;
  s = s * r + 0.041666666666666664LF;
  s = s * r + 0.16666666666666666LF;
  s = s * r + 0.5LF;
  precise double p = (r * r) * s + rl;
  precise double hi = 1.0LF + r;
  precise double lo = (1.0LF - hi) + r;  // 1 + r == hi + lo exactly.
  precise double e = hi + (lo + p);
  return ldexp(e, int(k));
}

// The logit of a candidate's key.
double key_logit(uvec2 key) { return double(uintBitsToFloat(rank_bits(key.x))); }

// Steps 6 to 8 of docs/ops.md over the m sorted candidates and their weights: the top-p
// prefix, the min-p cut, the draw at u; returns the id.
uint draw(uint m, double u) {
  precise double total = 0.0LF;
  for (uint i = 0u; i < m; ++i) total += sample_weights[i];
  uint keep = m;
  if (pc.top_p < 1.0) {
    const double nucleus = double(pc.top_p) * total;
    precise double acc = 0.0LF;
    for (uint i = 0u; i < m; ++i) {
      acc += sample_weights[i];
      if (acc >= nucleus) {
        keep = i + 1u;
        break;
      }
    }
  }
  if (pc.min_p > 0.0) {
    for (uint i = 1u; i < keep; ++i) {
      if (sample_weights[i] < double(pc.min_p)) {
        keep = i;
        break;
      }
    }
  }
  precise double kept = 0.0LF;
  for (uint i = 0u; i < keep; ++i) kept += sample_weights[i];
  const double target = u * kept;
  precise double acc = 0.0LF;
  for (uint i = 0u; i < keep; ++i) {
    acc += sample_weights[i];
    if (acc > target) return key_index(sort_keys[i]);
  }
  return key_index(sort_keys[keep - 1u]);
}

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  row_src = row_address(pc.l, row, pc.ne1, pc.ne2, pc.l_nb1, pc.l_nb2, pc.l_nb3);
  if (pc.n_recent != 0u) build_penalties();
  const bool greedy = pc.temperature <= 0.0;
  const uint want = greedy ? 1u : (pc.top_k != 0u ? min(pc.top_k, pc.ne0) : pc.ne0);
  const uint count = gather_top(pc.ne0, want);
  sort_desc(count);
  const uint m = min(count, want);
  if (greedy || m == 0u) {  // no candidate (every logit NaN, or NaN and -inf): 0.
    if (gl_LocalInvocationID.x == 0u) I32s(pc.d).v[row] = m == 0u ? 0 : int(key_index(sort_keys[0]));
    return;
  }
  const double l0 = key_logit(sort_keys[0]);
  const double temperature = double(pc.temperature);
  for (uint i = gl_LocalInvocationID.x; i < m; i += gl_WorkGroupSize.x) {
    sample_weights[i] = exp64((key_logit(sort_keys[i]) - l0) / temperature);
  }
  barrier();
  if (gl_LocalInvocationID.x == 0u) {
    I32s(pc.d).v[row] = int(draw(m, sample_uniform(I32s(pc.pos).v[row])));
  }
}
