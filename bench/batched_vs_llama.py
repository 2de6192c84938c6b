#!/usr/bin/env python3
"""tg-bench --parallel against llama.cpp's llama-batched-bench: aggregate generation t/s.

For docs/benchmarks.md ("Many sequences"). For each mode (local, or the
model's layers split with -sm layer over two rpc-servers on loopback) and model, ROUNDS
interleaved rounds, each: tg-bench -p 0 -n TG --parallel 1,2,4,8 -r REPS (N sequences
decoding together from an empty cache; t/s is N * TG / time, after one warm-up repetition),
then llama-batched-bench -npp 0 -ntg TG -npl 1,2,4,8 (the same: N sequences from position
0, S_TG = N * TG / time). Same GGUF, threads and context: llama.cpp gets -c equal to what
tg-bench sizes its cache to for the largest N, (TG) * N + 16. Both read random tokens' next
token each step: llama-batched-bench copies every sequence's logits to the host each step;
tg-bench reads the logits at N = 1 and only the device's pick (4 bytes a sequence) above 1,
as tg-server does. Over rpc-servers each system uses its own rpc-server (-t RPC_THREADS
each), and the client -t CLIENT_THREADS.

Printed: every round's figures as they come, then per (mode, model, N) the median of each,
tg/llama of the medians, the range of the per-round ratios, and N / N=1 for both.

llama.cpp as docs/benchmarks.md measured it: the peer package's source (the git bundle
main/package/llama/gitRelease.bundle under ~/.cache/tensorgrid-peer, which
shared/peer/llama-cpp-peer.sh sets up) cloned outside the repository and built for the CPU:
  git clone BUNDLE SRC && cmake -S SRC -B BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DGGML_RPC=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
  cmake --build BUILD -j2 --target llama-batched-bench llama-server ggml-rpc-server
(v0.5.0 has no LLAMA_CURL option; its rpc-server target is ggml-rpc-server.) The models:
  tg-gguf synth S15M_Q8 --dims 288,768,6,6,6,32000 --type q8_0       # the 15M shape
  tg-gguf synth Q4_0_2048 --dims 2048,5632,8,32,4,32000 --type q4_0  # 260 MiB, memory-bound

Usage (from the repository root, build/release built):
  python3 bench/batched_vs_llama.py --llama-bin BUILD/bin --model S15M_Q8:128 \
      --model Q4_0_2048:64 --rounds 5 [--threads 1 --modes local]
(MODEL:TG, the generated tokens per sequence for that model.)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench_util import Procs, free_port, load, print_table, wait_port  # noqa: E402

TG_BENCH = "build/release/tools/tg-bench/tg-bench"
TG_RPC = "build/release/server/rpc-server"


def run(argv, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run(argv, capture_output=True, text=True, env=e)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p.stdout, p.stderr


def tg_round(a, model, tg, ns, extra, threads):
    out, _ = run([TG_BENCH, "-m", model, "-p", "0", "-n", str(tg), "--parallel",
                  ",".join(map(str, ns)), "-r", str(a.reps), "-t", str(threads), "-o", "json",
                  "--no-split-probe"] + extra)
    recs = json.loads(out)
    return {int(r.get("n_parallel", 1)): float(r["avg_ts"]) for r in recs}


def llama_round(a, model, tg, ns, extra, threads):
    ctx = tg * max(ns) + 16
    _, err = run([os.path.join(a.llama_bin, "llama-batched-bench"), "-m", model, "-c", str(ctx),
                  "-npp", "0", "-ntg", str(tg), "-npl", ",".join(map(str, ns)), "-t",
                  str(threads), "-tb", str(threads), "--output-format", "jsonl"] + extra,
                 env={"LD_LIBRARY_PATH": a.llama_bin})
    res = {}
    for line in err.splitlines() + _.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            d = json.loads(re.sub(r":\s*-?nan", ": null", line))  # speed_pp of -npp 0
            res[int(d["pl"])] = float(d["speed_tg"])
    if sorted(res) != sorted(ns):
        raise RuntimeError(f"llama-batched-bench gave N = {sorted(res)}, wanted {ns}:\n{err[-2000:]}")
    return res


def llama_round_retried(a, model, tg, ns, extra, threads):
    # Once in about 40 runs over rpc-servers the last record was missing from an otherwise
    # successful run (exit 0, nothing on stderr): run it again, and say so.
    try:
        return llama_round(a, model, tg, ns, extra, threads)
    except RuntimeError as e:
        print(f"# llama-batched-bench run again: {str(e).splitlines()[0]}", flush=True)
        return llama_round(a, model, tg, ns, extra, threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True)
    ap.add_argument("--model", action="append", required=True, help="MODEL.gguf:TG (repeatable)")
    ap.add_argument("--parallel", default="1,2,4,8")
    ap.add_argument("--modes", default="local,rpc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1, help="tg-bench -r (after its warm-up)")
    ap.add_argument("--threads", type=int, default=2, help="-t locally")
    ap.add_argument("--rpc-threads", type=int, default=1, help="-t of each rpc-server")
    ap.add_argument("--rpc-client-threads", type=int, default=1, help="-t of the client over rpc")
    a = ap.parse_args()
    ns = [int(x) for x in a.parallel.split(",")]
    print(f"# load {load()}; {a.rounds} rounds; tg-bench -r {a.reps}; -t {a.threads} local; "
          f"rpc: servers -t {a.rpc_threads}, client -t {a.rpc_client_threads}", flush=True)
    summary = []
    for mode in a.modes.split(","):
        procs = Procs(subprocess.DEVNULL)
        try:
            tg_extra, ll_extra, threads = [], [], a.threads
            if mode == "rpc":
                threads = a.rpc_client_threads
                tg_eps, ll_eps = [], []
                for _ in range(2):
                    p = free_port()
                    procs.start([TG_RPC, "-p", str(p), "-t", str(a.rpc_threads)])
                    wait_port(p)
                    tg_eps.append(f"127.0.0.1:{p}")
                    p = free_port()
                    procs.start([os.path.join(a.llama_bin, "ggml-rpc-server"), "-p", str(p),
                                 "-t", str(a.rpc_threads)], env={"LD_LIBRARY_PATH": a.llama_bin})
                    wait_port(p)
                    ll_eps.append(f"127.0.0.1:{p}")
                tg_extra = ["--rpc", ",".join(tg_eps), "-sm", "layer", "--device",
                            ",".join(f"RPC[{e}]/0" for e in tg_eps)]
                ll_extra = ["--rpc", ",".join(ll_eps), "-sm", "layer", "-ngl", "99"]
            for spec in a.model:
                model, tg = spec.rsplit(":", 1)
                tg = int(tg)
                name = os.path.basename(model)
                rows = {"tg": [], "llama": []}
                for r in range(a.rounds):
                    t = tg_round(a, model, tg, ns, tg_extra, threads)
                    l = llama_round_retried(a, model, tg, ns, ll_extra, threads)
                    rows["tg"].append(t)
                    rows["llama"].append(l)
                    print(f"{mode} {name} tg{tg} round {r + 1} (load {load()}): " +
                          "  ".join(f"N={n} {t[n]:.1f}/{l[n]:.1f}" for n in ns), flush=True)
                for n in ns:
                    mt = statistics.median(x[n] for x in rows["tg"])
                    ml = statistics.median(x[n] for x in rows["llama"])
                    rr = [x[n] / y[n] for x, y in zip(rows["tg"], rows["llama"])]
                    m1t = statistics.median(x[ns[0]] for x in rows["tg"])
                    m1l = statistics.median(x[ns[0]] for x in rows["llama"])
                    summary.append(f"{mode} | {name} | {tg} | {n} | {mt:.1f} | {ml:.1f} | "
                                   f"{mt / ml:.2f}x ({min(rr):.2f}-{max(rr):.2f}) | "
                                   f"{mt / m1t:.2f}x | {ml / m1l:.2f}x")
        finally:
            procs.stop()
    print_table(["mode", "model", "tg", "N", "tg-bench t/s", "llama-batched-bench t/s",
                 "tg/llama (per-round range)", "tg N/N1", "llama N/N1"], 2, summary)


if __name__ == "__main__":
    sys.exit(main())
