#!/usr/bin/env python3
"""Runs a command only where a device is registered; otherwise says why and skips.

  run_if_device.py --tg-run PATH --device CUDA0 [--expect REGEX] -- COMMAND...

Asks `tg-run --list-devices` whether DEVICE is there (exit 77, skipped, with the reason
when not). Then runs COMMAND, passing its output through; with --expect, the output must
also match REGEX. Exit: COMMAND's status (1 when --expect does not match).
"""
import argparse
import re
import subprocess
import sys


def device_listed(tg_run, device):
    p = subprocess.run([tg_run, "--list-devices"], capture_output=True, text=True)
    names = [line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()]
    reason = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"devices: {', '.join(names)}"
    return device in names, reason


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--expect")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    present, reason = device_listed(a.tg_run, a.device)
    if not present:
        print(f"skipped: no {a.device} ({reason})")
        return 77
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        return p.returncode
    if a.expect and not re.search(a.expect, p.stdout):
        print(f"FAIL: output does not match {a.expect!r}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
