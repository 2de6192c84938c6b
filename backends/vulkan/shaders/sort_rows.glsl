// The row selection and sort of ARGSORT, TOP_K and SAMPLE (one workgroup per row), over the
// keys of rank_keys.glsl: gather_top collects the m largest keys of a row into shared memory,
// through a radix select (8 bits a pass, from the top) when the row does not fit, and sort_desc
// sorts them with a bitonic network. The including shader defines `uvec2 row_key(uint i)`, the
// key of element i of the row it works on, before it includes this file: with a prototype
// instead, lavapipe (Mesa 22.3) ran the gather's atomics once per lower invocation too (a row
// of 16 gathered 136 keys). Every invocation must call these functions (uniform control flow).

// Keys a workgroup sorts: rows of ARGSORT, k of TOP_K and SAMPLE's candidates (SupportsNode).
const uint kSortCap = 1024u;
const uint kRadixBins = 256u;
const uint kRadixPasses = 8u;

shared uvec2 sort_keys[kSortCap];
shared uint sort_hist[kRadixBins];
shared uint sort_count;  // candidates seen (select), then keys gathered.
shared uint sort_digit;  // the digit of the bin that holds the m-th key, and
shared uint sort_above;  // the candidates in the bins above it.

// The mask of a key's top `bits` bits (0 to 64).
uvec2 top_mask(uint bits) {
  const uint hi = bits >= 32u ? 0xffffffffu : (bits == 0u ? 0u : 0xffffffffu << (32u - bits));
  const uint lo = bits <= 32u ? 0u : 0xffffffffu << (64u - bits);
  return uvec2(hi, lo);
}

// Digit `pass` of a key, from the top: bits 63 - 8 pass down to 56 - 8 pass.
uint key_digit(uvec2 key, uint pass) {
  return ((pass < 4u ? key.x : key.y) >> (24u - 8u * (pass & 3u))) & (kRadixBins - 1u);
}

// Sorts sort_keys[0, count) in descending order (count <= kSortCap), padding to a power of two
// with zero keys, which sort last.
void sort_desc(uint count) {
  uint size = 1u;
  while (size < count) size <<= 1;
  for (uint i = count + gl_LocalInvocationID.x; i < size; i += gl_WorkGroupSize.x) {
    sort_keys[i] = uvec2(0u);
  }
  barrier();
  for (uint k = 2u; k <= size; k <<= 1) {
    for (uint j = k >> 1; j > 0u; j >>= 1) {
      for (uint i = gl_LocalInvocationID.x; i < size; i += gl_WorkGroupSize.x) {
        const uint l = i ^ j;
        if (l <= i) continue;
        const uvec2 x = sort_keys[i], y = sort_keys[l];
        // Blocks with bit k clear sort descending, the others ascending; the last merge
        // (k == size) is all descending.
        if (((i & k) == 0u) == key_greater(y, x)) {
          sort_keys[i] = y;
          sort_keys[l] = x;
        }
      }
      barrier();
    }
  }
}

// Thread 0 finds the digit whose bin holds the rem-th largest key, scanning bins from the top.
void pick_digit(uint rem) {
  if (gl_LocalInvocationID.x == 0u) {
    uint above = 0u;
    uint d = kRadixBins - 1u;
    for (; d > 0u; --d) {
      if (above + sort_hist[d] >= rem) break;
      above += sort_hist[d];
    }
    sort_digit = d;
    sort_above = above;
  }
  barrier();
}

// The keys of the row's n elements whose top `bits` bits are at least `prefix`'s (every
// candidate when bits is 0), into sort_keys in any order; returns how many.
uint gather_keys(uint n, uint bits, uvec2 prefix) {
  const uvec2 mask = top_mask(bits);
  if (gl_LocalInvocationID.x == 0u) sort_count = 0u;
  barrier();
  for (uint i = gl_LocalInvocationID.x; i < n; i += gl_WorkGroupSize.x) {
    const uvec2 key = row_key(i);
    if (is_key(key) && !key_greater(prefix, key & mask)) {
      sort_keys[atomicAdd(sort_count, 1u)] = key;
    }
  }
  barrier();
  return sort_count;
}

// Every invocation's largest key, sorted: the m-th of them (m <= the workgroup size) is a
// bound for the m largest keys of the row, since at least m keys reach it. A zero key when
// fewer than m invocations saw a candidate.
uvec2 lower_bound_key(uint n, uint m) {
  uvec2 best = uvec2(0u);
  for (uint i = gl_LocalInvocationID.x; i < n; i += gl_WorkGroupSize.x) {
    const uvec2 key = row_key(i);
    if (key_greater(key, best)) best = key;
  }
  sort_keys[gl_LocalInvocationID.x] = best;
  sort_desc(gl_WorkGroupSize.x);
  const uvec2 bound = sort_keys[m - 1u];
  barrier();
  return bound;
}

// The row's keys from `bound` up while they fit in sort_keys; returns how many there are (more
// than kSortCap: those gathered are not all of them).
uint gather_from(uint n, uvec2 bound) {
  if (gl_LocalInvocationID.x == 0u) sort_count = 0u;
  barrier();
  for (uint i = gl_LocalInvocationID.x; i < n; i += gl_WorkGroupSize.x) {
    const uvec2 key = row_key(i);
    if (!key_greater(bound, key)) {
      const uint slot = atomicAdd(sort_count, 1u);
      if (slot < kSortCap) sort_keys[slot] = key;
    }
  }
  barrier();
  const uint count = sort_count;
  barrier();
  return count;
}

// Gathers at least the min(m, candidates) largest keys of the row's n elements (m <= kSortCap)
// and at most kSortCap; returns how many. A row of at most kSortCap elements gives all its
// candidates. A longer one is walked twice when m is at most the workgroup size (lower_bound_key,
// then the keys from the bound up, typically little more than m), else, or when more than
// kSortCap keys reach the bound (many keys of few invocations), by the radix select.
uint gather_top(uint n, uint m) {
  if (n <= kSortCap) return gather_keys(n, 0u, uvec2(0u));
  if (m <= gl_WorkGroupSize.x) {
    const uvec2 bound = lower_bound_key(n, m);
    if (is_key(bound)) {
      const uint count = gather_from(n, bound);
      if (count <= kSortCap) return count;
    }
  }
  const uint t = gl_LocalInvocationID.x;
  uvec2 prefix = uvec2(0u);  // the digits chosen so far, in place.
  uint bits = 0u;            // how many top bits they are.
  uint rem = m;              // keys still to take among those that match prefix.
  if (t == 0u) sort_count = 0u;
  for (uint pass = 0u; pass < kRadixPasses; ++pass) {
    for (uint i = t; i < kRadixBins; i += gl_WorkGroupSize.x) sort_hist[i] = 0u;
    barrier();
    const uvec2 mask = top_mask(bits);
    uint seen = 0u;
    for (uint i = t; i < n; i += gl_WorkGroupSize.x) {
      const uvec2 key = row_key(i);
      if (!is_key(key) || (key & mask) != prefix) continue;
      ++seen;
      atomicAdd(sort_hist[key_digit(key, pass)], 1u);
    }
    if (pass == 0u) atomicAdd(sort_count, seen);
    barrier();
    if (pass == 0u) rem = min(m, sort_count);
    if (rem == 0u) return 0u;
    pick_digit(rem);
    const uint d = sort_digit;
    rem -= sort_above;
    if (pass < 4u) {
      prefix.x |= d << (24u - 8u * pass);
    } else {
      prefix.y |= d << (24u - 8u * (pass - 4u));
    }
    bits += 8u;
    const bool done = sort_hist[d] == rem;  // the whole bin is taken (always so by the 8th pass).
    barrier();
    if (done) break;
  }
  return gather_keys(n, bits, prefix);
}
