#!/usr/bin/env bash
# The main job from a fresh checkout: installs dependencies, builds the release preset and
# generates text with tg-run. Without arguments it uses a synthetic demo model (a stories15M
# -shape llama in Q8_0, generated once under build/release/models); any arguments go to
# tg-run, e.g.: bash scripts/run.sh -m /path/to/model.gguf -p "The capital of France is" -n 32
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
exec ./build/release/tools/tg-run/tg-run "$@"
