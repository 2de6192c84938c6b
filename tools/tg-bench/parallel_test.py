#!/usr/bin/env python3
"""tg-bench --parallel: every row of every output format says how many sequences ran at once,
and the rate is the aggregate (N sequences' tokens over the same time).

  parallel_test.py TG_BENCH MODEL

Runs `--parallel 1,3 -p 8 -n 4 -r 1 --greedy` over two virtual CPU devices split by layers
(the batch session through the scheduler) and checks the JSON records (n_parallel, pp and tg
rows for each N, positive rates whose samples are N * tokens / time), the CSV column and the
markdown test names. Exit 0 pass, 1 fail.
"""
import csv
import io
import json
import subprocess
import sys


def run(binary, model, fmt):
    cmd = [binary, "-m", model, "-p", "8", "-n", "4", "-r", "1", "--greedy", "-t", "1",
           "--parallel", "1,3", "-sm", "layer", "--device", "CPU0,CPU1", "--no-split-probe",
           "-o", fmt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout


def main():
    binary, model = sys.argv[1], sys.argv[2]
    failures = []
    records = json.loads(run(binary, model, "json"))
    seen = sorted((r["n_parallel"], r["n_prompt"], r["n_gen"]) for r in records)
    if seen != [(1, 0, 4), (1, 8, 0), (3, 0, 4), (3, 8, 0)]:
        failures.append(f"json rows {seen}")
    for r in records:
        tokens = (r["n_prompt"] + r["n_gen"]) * r["n_parallel"]
        want = tokens * 1e9 / r["samples_ns"][0]
        if not r["avg_ts"] > 0 or abs(r["samples_ts"][0] - want) > 1e-6 * want:
            failures.append(f"json rate {r['samples_ts'][0]} for {tokens} tokens, want {want}")
    rows = list(csv.DictReader(io.StringIO(run(binary, model, "csv"))))
    if sorted(int(r["n_parallel"]) for r in rows) != [1, 1, 3, 3]:
        failures.append("csv n_parallel column")
    md = run(binary, model, "md")
    for name in ("| pp8 |", "| tg4 greedy |", "| pp8 x3 |", "| tg4 greedy x3 |"):
        if name not in md:
            failures.append(f"markdown lacks {name}")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"{len(records) + 2 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
