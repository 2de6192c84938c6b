#!/usr/bin/env python3
"""Figures for the GPU check's speed lines (scripts/gpu-check.sh). Python standard library only.

  speed_report.py figures CSV                 tg-bench or llama-bench CSV (-o csv): prints
                                              "pp512 <t/s>" and "tg128 <t/s>", one per line
  speed_report.py bytes-per-token INFO        `tg-gguf info` output: the weight bytes one
                                              generated token reads (every matrix, one row of
                                              the token embedding)
  speed_report.py compare NAME OURS PEER MIN  "PASS|FAIL NAME: tensorgrid X t/s vs llama.cpp Y
                                              t/s (Z%, bar MIN%)"; MIN "-": no bar (INFO);
                                              PEER "-": no peer figure (INFO)
  speed_report.py roofline NAME TS BYTES GBS PCT
                                              "PASS|FAIL NAME: X GB/s of weights read (= BYTES
                                              per token x TS t/s) vs PCT% of GBS GB/s copy"
  speed_report.py overhead NAME TENSOR NONE MAX
                                              "PASS|FAIL NAME: -sm tensor X t/s vs -sm none Y
                                              (cost Z%, bar MAX%)"

Exit status 0 always for figures/bytes-per-token; the verdict lines are for gpu-check.sh.
"""
import csv
import re
import sys


def figures(path):
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            n_prompt = int(row.get("n_prompt") or 0)
            n_gen = int(row.get("n_gen") or 0)
            ts = float(row["avg_ts"])
            if n_prompt > 0 and n_gen == 0:
                print(f"pp{n_prompt} {ts:.2f}")
            elif n_gen > 0 and n_prompt == 0:
                print(f"tg{n_gen} {ts:.2f}")


TENSOR_LINE = re.compile(r"^\s+(\S+)\s+(\S+)\s+\[([0-9, ]+)\]\s+(\d+)\s+(\d+)\s*$")


def bytes_per_token(path):
    total = 0
    with open(path) as f:
        for line in f:
            m = TENSOR_LINE.match(line)
            if not m:
                continue
            name, size = m.group(1), int(m.group(5))
            dims = [int(d) for d in m.group(3).split(",")]
            if name == "token_embd.weight":
                size //= dims[-1]  # one row per token.
            total += size
    print(total)


def verdict(ok, name, detail):
    """ok: True, False, or None for a figure without a bar (INFO)."""
    word = "INFO" if ok is None else "PASS" if ok else "FAIL"
    print(f"{word} {name}: {detail}")


def compare(name, ours, peer, min_pct):
    ours = float(ours)
    barred = min_pct not in ("-", "")
    if peer in ("-", ""):
        verdict(None, name, f"tensorgrid {ours:.1f} t/s (no llama.cpp figure)")
        return
    peer = float(peer)
    pct = 100.0 * ours / peer if peer > 0 else 0.0
    bar = f", bar {float(min_pct):.0f}%" if barred else ""
    verdict(pct >= float(min_pct) if barred else None, name,
            f"tensorgrid {ours:.1f} t/s vs llama.cpp {peer:.1f} t/s ({pct:.0f}%{bar})")


def roofline(name, ts, bytes_tok, copy_gbs, pct):
    gbs = float(ts) * float(bytes_tok) / 1e9
    bar = float(copy_gbs) * float(pct) / 100.0
    verdict(gbs >= bar, name,
            f"{gbs:.0f} GB/s of weights read ({float(bytes_tok) / 1e6:.0f} MB/token x {float(ts):.1f} "
            f"t/s) vs {float(pct):.0f}% of the {float(copy_gbs):.0f} GB/s copy bandwidth ({bar:.0f})")


def overhead(name, tensor, none, max_pct):
    tensor, none = float(tensor), float(none)
    cost = 100.0 * (1.0 - tensor / none) if none > 0 else 100.0
    verdict(cost < float(max_pct), name,
            f"-sm tensor {tensor:.1f} t/s vs -sm none {none:.1f} t/s (cost {cost:.0f}%, bar "
            f"{float(max_pct):.0f}%)")


def main(argv):
    cmds = {"figures": (figures, 1), "bytes-per-token": (bytes_per_token, 1),
            "compare": (compare, 4), "roofline": (roofline, 5), "overhead": (overhead, 4)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    cmds[argv[1]][0](*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
