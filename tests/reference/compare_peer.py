#!/usr/bin/env python3
"""Compares tensorgrid's tg-run with llama.cpp (the peer harness) on the same GGUF file.

Both run the model on the CPU with their default F16 KV cache (or, with --kv-f32, F32):
  tg-run -m MODEL -p PROMPT -n N --temp 0 --json --top-logits K
  peer_harness generate MODEL PROMPT N K
Checks: identical prompt tokens; the top-K ids of the first generated position agree and
each logit is within --tol of the peer's (with --range-tol, within that fraction of tg-run's
full logit range instead: for quantized models, whose activations both sides round
differently); with --check-tokens, the N greedy tokens are identical.
Exit codes: 0 pass, 1 mismatch, 77 skipped (a tool or the model is missing).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

SKIP = 77


def parse_peer(text):
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("prompt_tokens", "tokens"):
            out[key] = [int(x) for x in rest.split()]
        elif key == "top_logits":
            vals = rest.split()
            out[key] = [(int(vals[i]), float(vals[i + 1])) for i in range(0, len(vals), 2)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--peer", required=True, help="peer_harness binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--tol", type=float, default=2e-3)
    ap.add_argument("--range-tol", type=float, default=0.0)
    ap.add_argument("--check-tokens", action="store_true")
    ap.add_argument("--extra-args", default="")
    ap.add_argument("--kv-f32", action="store_true",
                    help="F32 KV cache on both sides (exact attention), else both default F16")
    a = ap.parse_args()
    for path, what in ((a.model, "model"), (a.peer, "peer harness"), (a.tg_run, "tg-run")):
        if not os.path.exists(path):
            print(f"skipped: {what} {path} not found")
            return SKIP
    cmd = [a.tg_run, "-m", a.model, "-p", a.prompt, "-n", str(a.n), "--temp", "0", "--json",
           "--top-logits", str(a.top)] + shlex.split(a.extra_args)
    if a.kv_f32:
        cmd += ["--kv-type", "f32"]
    # Random-weight models generate arbitrary bytes: undecodable ones become U+FFFD.
    ours = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     errors="replace").stdout)
    env = dict(os.environ, TG_PEER_THREADS=os.environ.get("TG_PEER_THREADS", "1"),
               TG_PEER_KV_F32="1" if a.kv_f32 else "0")
    peer_out = subprocess.run([a.peer, "generate", a.model, a.prompt, str(a.n), str(a.top)],
                              check=True, capture_output=True, text=True, env=env,
                              errors="replace").stdout
    peer = parse_peer(peer_out)
    ok = True
    if ours["prompt_tokens"] != peer.get("prompt_tokens"):
        print(f"FAIL prompt tokens: tg-run {ours['prompt_tokens']} peer {peer.get('prompt_tokens')}")
        ok = False
    tol = a.tol
    if a.range_tol > 0:
        lo, hi = ours["logit_range"]
        tol = a.range_tol * (hi - lo)
    peer_top = dict(peer["top_logits"])
    ours_top = {int(i): float(v) for i, v in ours["top_logits"]}
    worst = 0.0
    for tok, logit in peer["top_logits"]:
        if tok not in ours_top:
            # Allowed only when it ties with our K-th logit within tolerance.
            kth = min(ours_top.values())
            if abs(logit - kth) > tol:
                print(f"FAIL: peer top-{a.top} id {tok} ({logit:.5f}) missing from tg-run's top {sorted(ours_top)}")
                ok = False
            continue
        diff = abs(ours_top[tok] - logit)
        worst = max(worst, diff)
        if diff > tol:
            print(f"FAIL: id {tok}: tg-run {ours_top[tok]:.6f} peer {logit:.6f} |diff| {diff:.2e} > {tol:.2e}")
            ok = False
    print(f"top-{a.top}: max |tg-run - peer| = {worst:.3e} (tolerance {tol:.3e})")
    print("tg-run:", [(i, round(v, 5)) for i, v in ours["top_logits"]])
    print("peer:  ", [(i, round(v, 5)) for i, v in peer["top_logits"]])
    if a.check_tokens:
        if ours["tokens"] != peer.get("tokens"):
            first = next((i for i, (x, y) in enumerate(zip(ours["tokens"], peer["tokens"])) if x != y),
                         min(len(ours["tokens"]), len(peer["tokens"])))
            print(f"FAIL: greedy tokens differ at position {first}: tg-run {ours['tokens'][first:first+5]} "
                  f"peer {peer['tokens'][first:first+5]}")
            ok = False
        else:
            print(f"greedy tokens identical ({len(ours['tokens'])}): {ours['text']!r}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
