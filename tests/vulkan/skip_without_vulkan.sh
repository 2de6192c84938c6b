#!/bin/sh
# Runs "$@" when the build's registry has a Vulkan0 device, else exits 77 (ctest's skip) with
# the reason. Usage: skip_without_vulkan.sh TG_OPS_BINARY ARGS... (the first argument must be
# tg-ops, which lists the devices).
ops="$1"
if ! "$ops" support 2>/dev/null | head -1 | grep -q "Vulkan0"; then
  echo "skipped: no Vulkan device (install mesa-vulkan-drivers for lavapipe; tests set TG_VULKAN_CPU=1)"
  exit 77
fi
exec "$@"
