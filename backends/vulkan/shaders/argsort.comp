#version 460
// ARGSORT and TOP_K: one workgroup per row. Each element's key ranks it by value in the
// requested order (TOP_K: descending), NaN last, then by index (rank_keys.glsl); the row's keys
// (or, for TOP_K of a row longer than kSortCap, at least its k largest: sort_rows.glsl's
// gather_top) are sorted in shared memory and the first k indices written to the contiguous
// result (ARGSORT: k is the row length).
// SupportsNode keeps ARGSORT rows and TOP_K's k within kSortCap.
#include "common.glsl"
#include "rank_keys.glsl"

layout(local_size_x_id = 0) in;

layout(push_constant) uniform PC {
  uint64_t a, d;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ne0, ne1, ne2, ne3;
  uint descending, k;
} pc;

uint64_t row_src;

uvec2 row_key(uint i) {
  uint bits = U32s(row_src + uint64_t(i) * pc.a_nb0).v[0];
  if (pc.descending == 0u) bits ^= 0x80000000u;  // ascending: rank -x (NaN stays NaN).
  return index_key(float_rank(bits), i);
}

#include "sort_rows.glsl"

void main() {
  const uint row = flat_group();
  if (row >= pc.ne1 * pc.ne2 * pc.ne3) return;
  row_src = row_address(pc.a, row, pc.ne1, pc.ne2, pc.a_nb1, pc.a_nb2, pc.a_nb3);
  sort_desc(gather_top(pc.ne0, pc.k));
  const uint64_t dst = pc.d + uint64_t(row) * pc.k * 4u;
  for (uint j = gl_LocalInvocationID.x; j < pc.k; j += gl_WorkGroupSize.x) {
    I32s(dst).v[j] = int(key_index(sort_keys[j]));
  }
}
