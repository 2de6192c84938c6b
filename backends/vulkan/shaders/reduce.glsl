// Workgroup-wide sums and maxima: within a subgroup by subgroup arithmetic, then across the
// workgroup's subgroups through shared memory. Every invocation must call them (uniform
// control flow); workgroups of at most 32 subgroups.
shared float reduce_scratch[32];

// Each subgroup's result v into reduce_scratch[gl_SubgroupID] (one invocation writes it), for
// the whole workgroup to read once this returns.
void share_subgroup_results(float v) {
  barrier();
  if (subgroupElect()) reduce_scratch[gl_SubgroupID] = v;
  barrier();
}

float workgroup_sum(float v) {
  v = subgroupAdd(v);
  if (gl_NumSubgroups == 1u) return v;
  share_subgroup_results(v);
  float t = 0.0;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t += reduce_scratch[i];
  return t;
}

float workgroup_max(float v) {
  v = subgroupMax(v);
  if (gl_NumSubgroups == 1u) return v;
  share_subgroup_results(v);
  float t = reduce_scratch[0];
  for (uint i = 1u; i < gl_NumSubgroups; ++i) t = max(t, reduce_scratch[i]);
  return t;
}
