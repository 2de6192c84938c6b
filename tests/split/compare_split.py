#!/usr/bin/env python3
"""Runs tg-run once with -sm none and once with split arguments, and compares.

  compare_split.py --tg-run PATH --model MODEL --devices N [--n 64] [--tol 1e-4]
                   [--kv-type f32] [--sample "--temp 0.8 --seed 7"] -- -sm layer -ts 3,1

Both runs use TG_CPU_DEVICES=N, greedy decoding, --kv-type (default f32) and --json. Passes
when the greedy tokens are identical and every top-K logit is within --tol. With --sample,
both runs draw their tokens on the device with those flags instead (SAMPLE), and the drawn
tokens must be identical. Exit 0 pass, 1 mismatch, 77 skipped (model missing).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def run(tg_run, model, n, top, kv_type, extra, env):
    """tg-run's --json result (greedy unless `extra` samples), or None after a FAIL line."""
    cmd = [tg_run, "-m", model, "-n", str(n), "--temp", "0", "--json", "--top-logits", str(top),
           "--kv-type", kv_type] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
        return None
    return json.loads(p.stdout)


def top_logits_within(base, other, tol, base_name, other_name):
    """(ok, worst |difference|) of other's top logits against base's; a FAIL line for each id
    base's top list lacks and for a difference above tol."""
    base_top = {int(i): v for i, v in base["top_logits"]}
    worst = 0.0
    ok = True
    for i, v in other["top_logits"]:
        if int(i) not in base_top:
            print(f"FAIL: id {i} in {other_name} but not in {base_name}")
            ok = False
            continue
        worst = max(worst, abs(v - base_top[int(i)]))
    if worst > tol:
        print(f"FAIL: top logits differ by {worst:.3e} > {tol:.1e}")
        ok = False
    return ok, worst


def runs_match(base, other, tol, top, base_name, other_name, label):
    """True when `other` drew base's tokens and its top logits are within tol of base's, with a
    FAIL line for each difference; then a summary line starting with `label`."""
    ok, worst = top_logits_within(base, other, tol, f"{base_name}'s top-{top}",
                                  f"{other_name}'s top-{top}")
    same = base["tokens"] == other["tokens"]
    if not same:
        first = next(i for i, (x, y) in enumerate(zip(base["tokens"] + [None],
                                                      other["tokens"] + [None])) if x != y)
        print(f"FAIL: tokens differ at {first}: {base_name} {base['tokens'][first:first + 4]}, "
              f"{other_name} {other['tokens'][first:first + 4]}")
        ok = False
    print(f"{label}: max top-{top} |diff| {worst:.2e}, {len(other['tokens'])} tokens "
          f"{'identical' if same else 'DIFFER'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--devices", type=int, required=True)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--kv-type", default="f32")
    ap.add_argument("--sample", default="", help="sampling flags for both runs")
    ap.add_argument("split_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    sample = shlex.split(a.sample)  # after --temp 0, so they win.
    extra = [x for x in a.split_args if x != "--"] + sample
    if not os.path.exists(a.model):
        print(f"skipped: model {a.model} not found")
        return 77
    env = dict(os.environ, TG_CPU_DEVICES=str(a.devices))
    base = run(a.tg_run, a.model, a.n, a.top, a.kv_type,
               (["-sm", "none", "--device", "CPU0"] if a.devices > 1 else ["-sm", "none"])
               + sample, env)
    split = run(a.tg_run, a.model, a.n, a.top, a.kv_type, extra, env)
    if base is None or split is None:
        return 1
    ok = runs_match(base, split, a.tol, a.top, "-sm none", "the split run",
                    f"{' '.join(extra)} on {a.devices} devices")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
