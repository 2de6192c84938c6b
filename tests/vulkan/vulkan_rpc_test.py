#!/usr/bin/env python3
"""rpc-server -d Vulkan0 on loopback serves its Vulkan device; tg-run on that remote device
must give the local CPU's greedy tokens and top-K logits within --tol.

  vulkan_rpc_test.py --tg-run PATH --rpc-server PATH --model MODEL [--n 64] [--tol 1e-4]
                     [--kv-type f32]

Exit 0 pass, 1 mismatch, 77 skipped (model missing, or no Vulkan device on the server).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rpc"))
from rpc_cluster import SKIP, Server, model_missing, model_test_args  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "split"))
import compare_split  # noqa: E402


def run(tg_run, model, n, kv_type, extra):
    # One local CPU device, and no local Vulkan device: the remote one is the one under test.
    env = {k: v for k, v in os.environ.items() if k not in ("TG_CPU_DEVICES", "TG_VULKAN_CPU")}
    return compare_split.run(tg_run, model, n, 5, kv_type, extra, env)


def main():
    a = model_test_args([("--n", {"type": int, "default": 64}),
                         ("--tol", {"type": float, "default": 1e-4}),
                         ("--kv-type", {"default": "f32"})])
    if model_missing(a.model):
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tg-vk-rpc-") as workdir:
        try:
            # devices=1 serves "-d 0"; the later -d names the Vulkan device instead.
            server = Server(a.rpc_server, 1, ["-d", "Vulkan0"], workdir, 0)
        except RuntimeError as e:
            if "no device named 'Vulkan0'" in str(e):
                print("skipped: the server has no Vulkan device")
                return SKIP
            raise
        try:
            remote = run(a.tg_run, a.model, a.n, a.kv_type,
                         ["--rpc", server.endpoint, "--device", f"RPC[{server.endpoint}]/0"])
        finally:
            log = server.read_log()
            server.stop()
    local = run(a.tg_run, a.model, a.n, a.kv_type, ["--device", "CPU"])
    if remote is None or local is None:
        print(log)
        return 1
    if "devices=Vulkan0" not in log:  # rpc-server's "listening" log line.
        print(f"FAIL: the server does not serve Vulkan0:\n{log}")
        return 1
    ok = compare_split.runs_match(local, remote, a.tol, 5, "the CPU", "the remote run",
                                  "rpc-server -d Vulkan0")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
