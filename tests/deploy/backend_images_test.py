#!/usr/bin/env python3
"""The Vulkan and CUDA images of deploy/docker, built and started for real (ctest label "deploy").

The CUDA image builds the CUDA backend (for one architecture, sm_90, to keep the build short);
the Vulkan backend is not in this branch yet, so that image builds with it off (its default)
and what is checked is the image around it. For each image:
  - it builds from the repository (CUDA: on nvidia/cuda when Docker Hub answers, else on the
    tensorgrid/cuda-local bases make-base-images.sh --cuda makes from this host's toolkit);
  - non-root, a grpc.health HEALTHCHECK, no compiler, no key or certificate;
  - the backend's runtime is in place: the Vulkan loader and Mesa's lavapipe driver; the CUDA
    runtime libraries of the base, and no copy of a CUDA library among the image's own;
  - rpc-server started from it (no GPU here: the CUDA image falls back to the CPU) turns
    healthy through its HEALTHCHECK, and stops on SIGTERM.
Exit 0 pass, 1 fail, 77 skipped with the reason printed (as compose_cluster_test.py; the CUDA
part alone is skipped without a toolkit at /usr/local/cuda and without Docker Hub).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docker_env import (Fail, build_image, check_prerequisites, check_runtime_image,  # noqa: E402
                        ensure_base_image, log, run_test, session)

VULKAN = "tensorgrid/vulkan:deploy-test"
CUDA = "tensorgrid/cuda:deploy-test"


def shell(d, image, script):
    return d.run(["run", "--rm", "--entrypoint", "/bin/bash", image, "-c", script]).stdout


def check_serves(d, image):
    """Started plain (no TLS, loopback health probe), the HEALTHCHECK turns it healthy."""
    name = "tg-" + image.split("/")[1].split(":")[0]
    d.run(["run", "-d", "--name", name, "--health-interval", "1s", "-e", "TG_INSECURE=1", image])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = json.loads(d.run(["inspect", name]).stdout)[0]["State"]
            if state.get("Health", {}).get("Status") == "healthy":
                break
            if not state["Running"]:
                raise Fail(f"{image}: rpc-server exited: {d.run(['logs', name]).stderr[-1500:]}")
            time.sleep(0.5)
        else:
            raise Fail(f"{image}: not healthy within 60 s: {state.get('Health')}")
        d.run(["stop", "-t", "10", name])
        code = json.loads(d.run(["inspect", name]).stdout)[0]["State"]["ExitCode"]
        if code != 0:
            raise Fail(f"{image}: rpc-server exited {code} on SIGTERM")
        log(f"{image}: rpc-server healthy, stopped cleanly: "
            f"{d.run(['logs', name]).stderr.strip().splitlines()[0]}")
    finally:
        d.run(["rm", "-f", name], check=False)


def check_vulkan(d, src, scratch):
    build_image(d, src, scratch, "deploy/docker/vulkan.Dockerfile", VULKAN)
    info = check_runtime_image(d, VULKAN)
    if info["Config"]["Labels"].get("org.tensorgrid.vulkan-backend") != "OFF":
        raise Fail(f"{VULKAN}: labels {info['Config']['Labels']}")
    out = shell(d, VULKAN, "ls /usr/share/vulkan/icd.d; ldconfig -p | grep -o 'libvulkan.so.1'")
    if "lvp_icd" not in out or "libvulkan.so.1" not in out:
        raise Fail(f"{VULKAN}: no Vulkan loader or lavapipe ICD:\n{out}")
    log(f"{VULKAN}: loader and ICDs {' '.join(out.split()[:-1])}")
    check_serves(d, VULKAN)


def check_cuda(d, src, scratch):
    if d.run(["pull", "nvidia/cuda:12.8.1-runtime-ubuntu24.04"], check=False,
             timeout=1800).returncode == 0:
        args = []
    elif os.path.exists("/usr/local/cuda/bin/nvcc"):
        ensure_base_image(d, src, cuda=True)
        args = ["CUDA_BUILD_IMAGE=tensorgrid/cuda-local:devel",
                "CUDA_RUNTIME_IMAGE=tensorgrid/cuda-local:runtime"]
    else:
        log("CUDA image skipped: Docker Hub unreachable and no toolkit at /usr/local/cuda")
        return
    build_image(d, src, scratch, "deploy/docker/cuda.Dockerfile", CUDA,
                args + ["TG_CUDA_ARCHS=90"])
    info = check_runtime_image(d, CUDA)
    if info["Config"]["Labels"].get("org.tensorgrid.cuda-backend") != "ON":
        raise Fail(f"{CUDA}: built without the CUDA backend: {info['Config']['Labels']}")
    out = shell(d, CUDA, "ls /usr/local/lib/tensorgrid; echo ---; ldconfig -p | grep -o 'libcu[a-zA-Z]*\\.so\\.[0-9]*' | sort -u")
    ours, base = out.split("---")
    copied = [lib for lib in ours.split() if lib.startswith(("libcu", "libnccl", "libnv"))]
    if copied:
        raise Fail(f"{CUDA}: CUDA libraries copied into the image instead of the base's: {copied}")
    if "libcudart.so" not in base or "libcublas.so" not in base:
        raise Fail(f"{CUDA}: the runtime base has no CUDA runtime:\n{base}")
    log(f"{CUDA}: CUDA libraries from the base: {' '.join(base.split())}")
    # The backend is in the binaries: without a GPU it says why it is unavailable.
    p = d.run(["run", "--rm", "--entrypoint", "tg-run", CUDA, "--list-devices"], check=False)
    said = [line for line in (p.stdout + p.stderr).splitlines() if "CUDA" in line]
    if not said:
        raise Fail(f"{CUDA}: tg-run --list-devices shows no CUDA backend:\n{p.stdout}{p.stderr}")
    log(f"{CUDA}: {said[0].strip()}")
    check_serves(d, CUDA)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    a = ap.parse_args()

    def body():
        check_prerequisites()
        with session() as (d, scratch):
            ensure_base_image(d, a.src)
            check_vulkan(d, a.src, scratch)
            check_cuda(d, a.src, scratch)

    return run_test(body)


if __name__ == "__main__":
    sys.exit(main())
