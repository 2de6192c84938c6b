#!/usr/bin/env python3
"""tg-server against llama.cpp's llama-server under N concurrent streaming clients.

For docs/benchmarks.md ("Many sequences"). For each mode (local, or the model
split with -sm layer over two rpc-servers on loopback), model and client count N, it runs
ROUNDS interleaved rounds: tg-server, then llama-server, each started afresh with the same
GGUF, threads, context (-c) and --parallel N, never both at once. A round is one server
start: a warm-up wave of N short requests, then WAVES measured waves. A wave is N clients
started together (a barrier), each streaming one /v1/completions request (server-sent
events, plain http.client) of --max-tokens tokens at temperature 0 with "ignore_eos" (llama-
server honours it; tg-server ignores unknown fields, so the generated counts, from the
final chunk's usage or else the chunks with text, are checked and printed: a short count is
flagged). Every prompt starts with a number unique to its request, so neither server can
reuse a cached prompt of an earlier request (both would).

Per wave: aggregate completion t/s = all completion tokens / (last response end - first
request start); time to first token (TTFT) per client = request start to the first chunk
with text. Per round: the median over its waves of the aggregate, and the median TTFT over
all its clients. Printed at the end per (mode, model, N): medians over rounds for each
server, tg/llama ratios of those medians (TTFT: llama/tg, so above 1 means tg-server is
faster), and the range of the per-round ratios.

Usage (from the repository root; build/release built; llama.cpp built as
bench/batched_vs_llama.py's header says, BUILD/bin holding llama-server and ggml-rpc-server;
S15M_Q8 made as said there):
  python3 bench/serve_vs_llama_server.py --llama-bin BUILD/bin \
      --model demo/stories260K.gguf --model S15M_Q8 --rounds 3 [--threads 1 --modes local]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench_util import Procs, free_port, load, print_table, wait_port  # noqa: E402

TG_SERVER = "build/release/tools/tg-server/tg-server"
TG_RPC = "build/release/server/rpc-server"


def wait_health(port, proc, timeout=300.0):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} while loading")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server on port {port} not healthy after {timeout} s")


def start_tg(procs, a, model, n, mode):
    """tg-server (and, for rpc, two tensorgrid rpc-servers); returns the HTTP port."""
    argv = [TG_SERVER, "-m", model, "-c", str(a.ctx), "--parallel", str(n)]
    if mode == "rpc":
        eps = []
        for _ in range(2):
            p = free_port()
            procs.start([TG_RPC, "-p", str(p), "-t", str(a.rpc_threads)])
            wait_port(p)
            eps.append(f"127.0.0.1:{p}")
        argv += ["-t", str(a.rpc_client_threads), "--rpc", ",".join(eps), "-sm", "layer",
                 "--device", ",".join(f"RPC[{e}]/0" for e in eps)]
    else:
        argv += ["-t", str(a.threads)]
    port = free_port()
    proc = procs.start(argv + ["--port", str(port)])
    wait_health(port, proc)
    return port


def start_llama(procs, a, model, n, mode):
    """llama-server (and, for rpc, two llama.cpp rpc-servers); returns the HTTP port."""
    env = {"LD_LIBRARY_PATH": a.llama_bin}
    argv = [os.path.join(a.llama_bin, "llama-server"), "-m", model, "-c", str(a.ctx),
            "--parallel", str(n), "--no-webui"]
    if mode == "rpc":
        eps = []
        for _ in range(2):
            p = free_port()
            procs.start([os.path.join(a.llama_bin, "ggml-rpc-server"), "-p", str(p), "-t",
                         str(a.rpc_threads)], env=env)
            wait_port(p)
            eps.append(f"127.0.0.1:{p}")
        t = a.rpc_client_threads
        argv += ["-t", str(t), "-tb", str(t), "--rpc", ",".join(eps), "-sm", "layer",
                 "-ngl", "99"]
    else:
        argv += ["-t", str(a.threads), "-tb", str(a.threads)]
    port = free_port()
    proc = procs.start(argv + ["--host", "127.0.0.1", "--port", str(port)], env=env)
    wait_health(port, proc)
    return port


def one_request(port, prompt, max_tokens, out):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True},
                       "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
    except OSError as e:
        raise RuntimeError(f"{e} before the response") from e
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    ttft = None
    chunks = 0
    usage = None
    while True:
        try:
            line = r.readline()
        except OSError as e:
            raise RuntimeError(f"{e} after {chunks} chunks") from e
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        d = json.loads(data)
        if d.get("usage"):
            usage = d["usage"].get("completion_tokens")
        ch = d.get("choices") or []
        if ch and ch[0].get("text"):
            chunks += 1
            if ttft is None:
                ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    c.close()
    out.update(t0=t0, t1=t1, ttft=ttft, tokens=usage if usage is not None else chunks,
               chunks=chunks)


def wave(port, n, max_tokens, tag):
    """n clients at once; returns (aggregate t/s, [ttft], [tokens])."""
    outs = [dict() for _ in range(n)]
    errs = []
    bar = threading.Barrier(n)

    def client(i):
        try:
            bar.wait()
            one_request(port, f"{tag * 100 + i}. Once upon a time, there was a little girl"
                        " named Lily.", max_tokens, outs[i])
        except Exception as e:  # reported below, the wave fails
            errs.append(f"client {i}: {e}")

    ths = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if errs:
        raise RuntimeError("; ".join(errs))
    tokens = [o["tokens"] for o in outs]
    span = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    return sum(tokens) / span, [o["ttft"] for o in outs if o["ttft"] is not None], tokens


def run_round(a, server, model, n, mode, log, tag):
    procs = Procs(log)
    try:
        start = start_tg if server == "tg" else start_llama
        port = start(procs, a, model, n, mode)
        wave(port, n, 8, tag)  # warm-up
        tps, ttfts, toks = [], [], []
        for w in range(a.waves):
            try:
                t, tt, k = wave(port, n, a.max_tokens, tag + 1 + w)
            except RuntimeError as e:  # said, and the wave run once more
                print(f"# {server} N={n} {mode}: wave failed: {e}; running it again", flush=True)
                t, tt, k = wave(port, n, a.max_tokens, tag + 1 + w)
            tps.append(t)
            ttfts += tt
            toks += k
        return statistics.median(tps), statistics.median(ttfts), min(toks)
    finally:
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-bin", required=True,
                    help="bin folder of a llama.cpp build (llama-server, ggml-rpc-server)")
    ap.add_argument("--model", action="append", required=True, help="GGUF (repeatable)")
    ap.add_argument("--clients", default="1,4,8,16", help="N: clients and --parallel")
    ap.add_argument("--modes", default="local,rpc", help="local and/or rpc")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--waves", type=int, default=2, help="measured waves per round")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=4096, help="-c of both servers")
    ap.add_argument("--threads", type=int, default=2, help="-t of the servers, local")
    ap.add_argument("--rpc-threads", type=int, default=1, help="-t of each rpc-server")
    ap.add_argument("--rpc-client-threads", type=int, default=1,
                    help="-t of tg-server / llama-server over rpc-servers")
    ap.add_argument("--log", default=None, help="server output (default: a temp file)")
    a = ap.parse_args()
    ns = [int(x) for x in a.clients.split(",")]
    log = open(a.log, "w") if a.log else tempfile.NamedTemporaryFile("w", delete=False,
                                                                   prefix="serve_bench_")
    print(f"# servers' output: {log.name}; load {load()}; {a.rounds} rounds x {a.waves} "
          f"waves of {a.max_tokens} tokens, -c {a.ctx}, -t {a.threads} (rpc: servers -t "
          f"{a.rpc_threads}, client -t {a.rpc_client_threads})", flush=True)
    summary = []
    tag = 1
    for mode in a.modes.split(","):
        for model in a.model:
            name = os.path.basename(model)
            for n in ns:
                res = {"tg": [], "llama": []}
                for r in range(a.rounds):
                    for server in ("tg", "llama"):
                        tps, ttft, mintok = run_round(a, server, model, n, mode, log, tag)
                        tag += 1 + a.waves
                        res[server].append((tps, ttft))
                        short = "" if mintok == a.max_tokens else f" SHORT (min {mintok})"
                        print(f"{mode} {name} N={n} round {r + 1} {server}: {tps:.1f} t/s, "
                              f"TTFT {ttft * 1000:.1f} ms{short} (load {load()})", flush=True)
                med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                       for s, v in res.items()}
                rr = [t[0] / l[0] for t, l in zip(res["tg"], res["llama"])]
                rt = [l[1] / t[1] for t, l in zip(res["tg"], res["llama"])]
                line = (f"{mode} | {name} | {n} | {med['tg'][0]:.1f} | {med['llama'][0]:.1f} | "
                        f"{med['tg'][0] / med['llama'][0]:.2f}x ({min(rr):.2f}-{max(rr):.2f}) | "
                        f"{med['tg'][1] * 1000:.1f} | {med['llama'][1] * 1000:.1f} | "
                        f"{med['llama'][1] / med['tg'][1]:.2f}x ({min(rt):.2f}-{max(rt):.2f})")
                print("median: " + line, flush=True)
                summary.append(line)
    print_table(["mode", "model", "N", "tg t/s", "llama t/s", "tg/llama (per-round range)",
                 "tg TTFT ms", "llama TTFT ms", "llama/tg TTFT (range)"], 2, summary)


if __name__ == "__main__":
    sys.exit(main())
