#!/usr/bin/env bash
# A/B kernel speed of two tg-ops builds (e.g. main's and a branch's), for checking that a
# refactor of a kernel left it as fast: ROUNDS interleaved rounds (A then B each round, so a
# burst of load from elsewhere hits both alike) of `tg-ops perf -o OP` on one CPU device,
# then each case's median us/run per build and B/A. Prints the load average next to it:
# figures taken under load are not final.
#   bash scripts/bench_kernels_ab.sh A_TG_OPS B_TG_OPS [ROUNDS=5] OP...
# e.g. build main's tg-ops, copy it to /tmp/tg-ops-main, then
#   bash scripts/bench_kernels_ab.sh /tmp/tg-ops-main build/release/tools/tg-ops/tg-ops 7 \
#     MUL_MAT SOFT_MAX FLASH_ATTN_EXT
set -euo pipefail
a=$1
b=$2
rounds=${3:-5}
shift 3
ops=("$@")
[ ${#ops[@]} -gt 0 ] || ops=(MUL_MAT)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load before: $(uptime)"
for ((r = 0; r < rounds; ++r)); do
  for op in "${ops[@]}"; do
    for side in A B; do
      bin=$a
      [ "$side" = B ] && bin=$b
      # Rows: op, case (several words), device, us/run, GFLOP/s, GB/s.
      "$bin" perf -b CPU -sm none -o "$op" 2>/dev/null | awk -v s="$side" '
        $NF ~ /^[0-9.]+$/ && $1 != "op" {
          us = $(NF - 2); c = $2; for (i = 3; i <= NF - 4; ++i) c = c " " $i
          print s "\t" $1 " " c "\t" us }' >>"$out/rows"
    done
  done
done
echo "load after:  $(uptime)"
python3 - "$out/rows" "$rounds" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    side, case, us = line.rstrip("\n").split("\t")
    if case not in t: order.append(case)
    t[case][side].append(float(us))
print(f"median us/run over {sys.argv[2]} interleaved rounds")
print(f"{'case':52} {'A':>10} {'B':>10} {'B/A':>6}")
for case in order:
    a = statistics.median(t[case]["A"]); b = statistics.median(t[case]["B"])
    print(f"{case:52} {a:10.1f} {b:10.1f} {b / a:6.3f}")
PY
