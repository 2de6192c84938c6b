#!/usr/bin/env bash
# The main job from a fresh checkout: installs dependencies, builds the release preset and
# runs every op on every device against the reference (`tg-ops test`).
# Extra arguments go to tg-ops, e.g.: bash scripts/run.sh -o MUL_MAT
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
exec ./build/release/tools/tg-ops/tg-ops test "$@"
