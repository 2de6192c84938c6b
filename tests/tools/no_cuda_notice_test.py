#!/usr/bin/env python3
"""A host with no NVIDIA driver at all is the normal CPU host: tg-run, tg-bench and
rpc-server say nothing about CUDA there unless asked (tg-run -v; rpc-server --log-level debug),
and then in one line that names the missing driver, not a version problem.

  no_cuda_notice_test.py --tg-run BIN --tg-bench BIN --rpc-server BIN --cuda ON|OFF

--cuda: whether the build has the CUDA backend (the -v line is checked only then). Skipped
(exit 77) where libcuda.so.1 loads. TG_CUDA_QUIET is removed from every run's environment.
One line per check, then "N passed, M failed".
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

SKIP = 77


def driver_installed():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def stderr_of(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, p.stderr


def server_stderr(binary, extra, env):
    """Starts rpc-server on a free loopback port, waits until it serves, stops it."""
    with tempfile.TemporaryDirectory() as work:
        port_file = os.path.join(work, "port")
        log = open(os.path.join(work, "log"), "w+")
        p = subprocess.Popen([binary, "-p", "0", "--port-file", port_file, "-d", "CPU"] + extra,
                             stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.time() + 30
            while time.time() < deadline and p.poll() is None and not (
                    os.path.exists(port_file) and os.path.getsize(port_file) > 0):
                time.sleep(0.05)
        finally:
            p.terminate()
            p.wait(timeout=30)
        log.seek(0)
        return log.read()


def main():
    ap = argparse.ArgumentParser()
    for flag in ("--tg-run", "--tg-bench", "--rpc-server", "--cuda"):
        ap.add_argument(flag, required=True)
    a = ap.parse_args()
    if driver_installed():
        print("skipped: libcuda.so.1 loads here (an NVIDIA driver is installed)")
        return SKIP
    env = {k: v for k, v in os.environ.items() if k != "TG_CUDA_QUIET"}
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    for name, cmd in (("tg-run", [a.tg_run, "--list-devices"]),
                      ("tg-bench", [a.tg_bench, "--list-devices"])):
        rc, err = stderr_of(cmd, env)
        check(rc == 0 and "CUDA" not in err, f"{name} --list-devices: exit {rc}, no CUDA line "
              f"(stderr: {err.strip()[:200]!r})")
    log = server_stderr(a.rpc_server, [], env)
    check("CUDA" not in log, f"rpc-server: no CUDA line (log: {log.strip()[:300]!r})")
    if a.cuda.upper() in ("ON", "1", "TRUE"):
        rc, err = stderr_of([a.tg_run, "-v", "--list-devices"], env)
        lines = [l for l in err.splitlines() if "CUDA" in l]
        check(rc == 0 and len(lines) == 1 and "no NVIDIA driver is installed" in lines[0],
              f"tg-run -v: one line naming the missing driver ({lines})")
        log = server_stderr(a.rpc_server, ["--log-level", "debug"], env)
        check("no NVIDIA driver is installed" in log, "rpc-server --log-level debug names it")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
