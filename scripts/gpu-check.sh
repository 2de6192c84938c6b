#!/usr/bin/env bash
# The GPU check, run from a bundle made by scripts/gpu-bundle.sh on a machine with an NVIDIA
# GPU: no network, no package manager, no compiler. Prints one line per check,
#   PASS|FAIL|SKIP <check>: <detail>
# then a summary line; exit 0 when nothing failed. Details of each check go to
# <bundle>/logs/. About 5 minutes on a 16-core machine. See docs/gpu.md.
#
#   bash gpu-check.sh            (from the bundle folder, or any folder)
#
# TG_GPU_CHECK_DEVICE (default CUDA0) and TG_GPU_CHECK_BASE (default CPU) name the device under
# test and the yardstick: TG_CPU_DEVICES=2 TG_GPU_CHECK_DEVICE=CPU1 TG_GPU_CHECK_BASE=CPU0
# TG_GPU_CHECK_RPC_DEVICE='RPC' runs the whole script without a GPU, to check the script.
#
# CUDA itself comes from the machine: libcuda from the driver, cuBLAS (the major version in
# MANIFEST) from $CUDA_HOME, /usr/local/cuda*, the Python environment's nvidia-* packages or
# the loader's cache, whichever has it.
set -uo pipefail
dev=${TG_GPU_CHECK_DEVICE:-CUDA0}
base=${TG_GPU_CHECK_BASE:-CPU}
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
logs=$here/logs
work=$(mktemp -d /tmp/tg-gpu-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$logs"
passed=0 failed=0 skipped=0
t_start=$(date +%s)

report() {  # verdict name detail
  printf '%s %s: %s\n' "$1" "$2" "$3"
  case $1 in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
}

# --- the machine's CUDA libraries -------------------------------------------------------------
cublas=$(awk '$1 == "needs_cublas" {print $2}' "$here/MANIFEST" 2>/dev/null)
cublas=${cublas:-libcublas.so.13}
find_lib_dirs() {  # directories holding $1
  local dirs=("${CUDA_HOME:-/nonexistent}/lib64" /usr/local/cuda/lib64 /usr/local/cuda-*/lib64
              /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" >/dev/null || continue
    while read -r d; do dirs+=("$d"/nvidia/*/lib); done < <("$py" -c \
      'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null)
  done
  local d
  for d in "${dirs[@]}"; do [ -e "$d/$1" ] && echo "$d"; done | awk '!seen[$0]++'
  ldconfig -p 2>/dev/null | awk -v lib="$1" '$1 == lib {print $NF}' | xargs -r -n1 dirname
}
cuda_dirs=$(find_lib_dirs "$cublas" | head -1)
# cuBLAS needs libcublasLt beside it (same folder for the toolkit, a sibling package for pip).
lt_dir=$(find_lib_dirs "${cublas/libcublas/libcublasLt}" | head -1)
export LD_LIBRARY_PATH="$here/lib${cuda_dirs:+:$cuda_dirs}${lt_dir:+:$lt_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The machine's C++ runtime unless it is too old for the bundle: then the bundle's copy.
if ! "$bin/tg-gguf" --help >/dev/null 2>&1; then
  export LD_LIBRARY_PATH="$here/lib/fallback:$LD_LIBRARY_PATH"
fi
export PYTHONDONTWRITEBYTECODE=1

# --- environment --------------------------------------------------------------------------------
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
need_glibc=$(awk '$1 == "needs_glibc" {print $2}' "$here/MANIFEST" 2>/dev/null)
have_glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9]*\.[0-9]*$')
echo "gpu-check: $(tr '\n' ' ' <"$here/MANIFEST" 2>/dev/null)"
echo "gpu-check: GPU ${gpu:-unknown (no nvidia-smi)}; glibc ${have_glibc:-?} (bundle needs ${need_glibc:-?}); $cublas from ${cuda_dirs:-nowhere}"
if ! "$bin/tg-run" --list-devices >"$logs/devices.txt" 2>&1; then
  report FAIL devices "tg-run does not start: $(tail -1 "$logs/devices.txt")"
  echo "gpu-check: 0 passed, 1 failed (the bundle cannot run here; see $logs/devices.txt)"
  exit 1
fi
if ! grep -q "^ *$dev " "$logs/devices.txt"; then
  report FAIL devices "no $dev: $(grep -i cuda "$logs/devices.txt" | tail -1)"
  echo "gpu-check: 0 passed, 1 failed"
  exit 1
fi
report PASS devices "$(grep -E "^ *($dev|CUDA)" "$logs/devices.txt" | sort -u | sed 's/^ *//' | paste -sd ';' -)"
[ -n "$cuda_dirs" ] || report FAIL cublas "$cublas not found: GEMM-sized products use the matrix-vector kernel"

# --- checks -------------------------------------------------------------------------------------
run_check() {  # name command...: PASS/FAIL/SKIP from the exit code (77 = skip), last line as detail
  local name=$1
  shift
  local log="$logs/$name.txt" t0=$(date +%s) rc
  "$@" >"$log" 2>&1
  rc=$?
  local detail
  detail="$(grep -v '^\s*$' "$log" | tail -1 | sed -E 's/^(PASS|FAIL|SKIP) [^:]*: //') ($(( $(date +%s) - t0 )) s)"
  grep -q '^\[  PASSED  \] 0 tests' "$log" && [ "$rc" -eq 0 ] && rc=77  # a gtest that only skipped.
  case $rc in 0) report PASS "$name" "$detail" ;; 77) report SKIP "$name" "$detail" ;; *) report FAIL "$name" "$detail" ;; esac
}

compare() {  # name model compare_devices.py-args...
  local name=$1 model=$2
  shift 2
  run_check "$name" python3 "$here/compare_devices.py" --tg-run "$bin/tg-run" --model "$model" \
    --require "$dev" --label "$name" "$@"
}

run_check "tg_ops_${dev,,}" python3 "$here/run_if_device.py" --tg-run "$bin/tg-run" --device "$dev" \
  --expect '[1-9][0-9]* passed, 0 failed' -- "$bin/tg-ops" test -b "$dev"
run_check "tg_ops_meta_${dev,,}_${base,,}" python3 "$here/run_if_device.py" --tg-run "$bin/tg-run" \
  --device "$dev" --expect '[1-9][0-9]* passed, 0 failed' -- "$bin/tg-ops" test -sm tensor --device "$dev,$base"
run_check cuda_gpu_test "$bin/cuda_gpu_test" --gtest_brief=1

# Models: stories260K and the stories15M shape with random weights in four types.
models=("$here/models/stories260K.gguf")
for type in f32 q8_0 q4_0 q4_k; do
  m=$work/synth15m-$type.gguf
  if "$bin/tg-gguf" synth "$m" --dims 288,768,6,6,6,32000 --type "$type" >"$logs/synth-$type.txt" 2>&1; then
    models+=("$m")
  else
    report FAIL "synth_$type" "$(tail -1 "$logs/synth-$type.txt")"
  fi
done
long_prompt="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends every day."
for m in "${models[@]}"; do
  tag=$(basename "$m" .gguf)
  # Short prompt (matrix-vector path) with an F32 cache: the CPU's tokens and logits.
  compare "${tag}_${dev,,}" "$m" --base "--device $base" --test "--device $dev" --kv-type f32 --tol 1e-3
  # A long prompt (cuBLAS GEMMs, F16 cache): the CPU's tokens.
  compare "${tag}_${dev,,}_long_f16kv" "$m" --base "--device $base" --test "--device $dev" \
    --kv-type f16 --tokens-only --prompt "$long_prompt"
done
for m in "$here/models/stories260K.gguf" "$work/synth15m-f32.gguf"; do
  tag=$(basename "$m" .gguf)
  compare "${tag}_sm_layer" "$m" --base "--device $base" --test "-sm layer --device $dev,$base" --tol 1e-3
  compare "${tag}_sm_tensor" "$m" --base "--device $base" --test "-sm tensor --device $dev,$base" --tol 1e-3
done
# rpc-server on its default devices (-d 0 is the first GPU) on loopback, used by tg-run.
compare rpc_server_d0 "$here/models/stories260K.gguf" --base "--device $base" \
  --rpc-server "$bin/rpc-server" --serve "-d 0" --test "--rpc {rpc} --device RPC[{rpc}]/0" --tol 1e-3 \
  --expect-device "${TG_GPU_CHECK_RPC_DEVICE:-RPC.*compute capability}"

# Speed: pp512/tg128 on CUDA0 (and the CPU for scale), and the memory roofline.
for type in q4_0 q8_0; do
  m=$work/synth15m-$type.gguf
  [ -f "$m" ] || continue
  for d in "$dev" "$base"; do
    if "$bin/tg-bench" -m "$m" -p 512 -n 128 -r 3 --device "$d" >"$logs/bench-$type-$d.txt" 2>&1; then
      rows=$(grep -E '^\|.*\| (pp|tg)[0-9]+ \|' "$logs/bench-$type-$d.txt" |
        awk -F'|' '{gsub(/^ +| +$/, "", $9); gsub(/^ +| +$/, "", $10); print $9 " " $10 " t/s"}' |
        paste -sd ',' -)
      report PASS "bench_${type}_$d" "${rows:-$(tail -1 "$logs/bench-$type-$d.txt")}"
    else
      report FAIL "bench_${type}_$d" "$(tail -1 "$logs/bench-$type-$d.txt")"
    fi
  done
done
run_check copy_bandwidth "$bin/copy_bandwidth" "$dev" 1024

echo "gpu-check: $passed passed, $failed failed, $skipped skipped in $(( $(date +%s) - t_start )) s (logs: $logs)"
[ "$failed" -eq 0 ]
