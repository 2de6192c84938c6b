#!/usr/bin/env python3
"""One tenant cannot starve the host: rpc-server's default memory limits, on real processes.

  mem_limit_test.py --tg-run PATH --rpc-server PATH --model MODEL --hog PATH

1. An rpc-server with default flags. Its listening line gives --session-mem-limit and
   --mem-reserve; both must equal the documented defaults, computed here from the host's
   memory (reserve: a tenth of it within 1..8 GiB, at most half; a session: half of the rest).
2. While tg-run generates over --rpc, mem_hog_client (a second session) takes 512 MiB and
   then asks for more than the rest of its share: RESOURCE_EXHAUSTED naming the limit and
   --session-mem-limit. A small request afterwards still succeeds (the session lives on), and
   tg-run's tokens equal local -sm none's, as do those of a tg-run started while the hog
   still holds its memory. When the hog leaves, the server holds no buffer.
3. A server with --mem-reserve above the host's memory (and no session limit) refuses the
   model's buffers with an error naming --mem-reserve, and keeps running.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultnet import Generation, client_env, local_tokens, tg_run_cmd  # noqa: E402
from rpc_cluster import SKIP, Cluster, model_missing, model_test_args  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
HOLD = [256 * MIB, 256 * MIB]  # what the hog really takes (Alloc clears it: resident).
N_TOKENS = 2000                # long enough that the hog's refusal lands mid-generation.


def documented_defaults():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    reserve = min(max(total // 10, GIB), 8 * GIB)
    reserve = min(reserve, total // 2)
    return reserve, max((total - reserve) // 2, 1)


def listening_fields(log):
    m = re.search(r"listening on \S+ (.*)", log)
    return dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}


def read_until(proc, last):
    """The lines proc prints up to and including `last` (or until it exits)."""
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == last:
            break
    return lines


def wait_idle(c, timeout=10):
    m = c.metrics(0)
    deadline = time.time() + timeout
    while (m.get("tg_buffers") or m.get("tg_sessions_active")) and time.time() < deadline:
        time.sleep(0.1)
        m = c.metrics(0)
    return m


def check_session_limit(a, want_long, want_short, ok):
    want_reserve, want_limit = documented_defaults()
    with Cluster(a.rpc_server, n=1, devices=1) as c:
        fields = listening_fields(c.servers[0].read_log())
        limit, reserve = int(fields.get("session_mem_limit", -1)), int(fields.get("mem_reserve", -1))
        print(f"defaults: session_mem_limit {limit} ({limit / GIB:.2f} GiB), mem_reserve {reserve} "
              f"({reserve / GIB:.2f} GiB); documented: {want_limit}, {want_reserve}")
        if (limit, reserve) != (want_limit, want_reserve):
            print("FAIL: the defaults differ from the documented ones")
            return False  # and asking for "more than the share" would mean nothing.
        over = limit - sum(HOLD) + 1  # one byte past the share, counting what it holds.
        hog = subprocess.Popen([a.hog, c.endpoints[0]] + [str(s) for s in HOLD] +
                               ["wait", str(over), str(64 * MIB)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        lines = read_until(hog, "waiting")
        # The model's session starts once the hog holds its memory, and is mid-generation
        # when the hog asks for more than its share.
        run = Generation(tg_run_cmd(a.tg_run, a.model, N_TOKENS, ["-c", "4096", "--rpc", c.endpoints[0]]))
        deadline = time.time() + 30
        while c.metrics(0).get("tg_compute_total", 0) < 10 and time.time() < deadline:
            time.sleep(0.01)
        hog.stdin.write("go\n")
        hog.stdin.flush()
        lines += read_until(hog, "holding")
        generating_during_refusal = run.proc.poll() is None
        print("hog: " + " | ".join(l[:240] for l in lines))
        second = subprocess.run(tg_run_cmd(a.tg_run, a.model, 64, ["--rpc", c.endpoints[0]]),
                                capture_output=True, text=True, env=client_env())
        rc, took = run.finish(120)
        hog.stdin.close()
        hog.wait(30)
        lines = [l for l in lines if l != "waiting"]
        expected = [f"alloc {s}: OK" for s in HOLD]
        if lines[:2] != expected or len(lines) < 5:
            print(f"FAIL: the hog should get {expected}, then answers to two more requests")
            ok = False
        else:
            refusal = lines[2]
            if not (refusal.startswith(f"alloc {over}: RESOURCE_EXHAUSTED") and str(limit) in refusal
                    and "--session-mem-limit" in refusal):
                print("FAIL: the request past the share should be RESOURCE_EXHAUSTED naming the "
                      "limit and --session-mem-limit")
                ok = False
            if lines[3] != f"alloc {64 * MIB}: OK":
                print("FAIL: after a refusal the session should still allocate what fits")
                ok = False
        print(f"tg-run beside the hog: exit {rc} in {took:.2f} s, still generating when the hog "
              f"was refused: {generating_during_refusal}")
        if not generating_during_refusal:
            print("FAIL: tg-run had finished before the hog's refusal: nothing was shown")
            ok = False
        if rc != 0 or json.loads(run.stdout)["tokens"] != want_long:
            print(f"FAIL: the model's session was affected: {run.error_line()}")
            ok = False
        if second.returncode != 0 or json.loads(second.stdout)["tokens"] != want_short:
            print(f"FAIL: a session started while the hog held its memory: {second.stderr[-800:]}")
            ok = False
        m = wait_idle(c)
        print(f"after the hog left: {m.get('tg_buffers')} buffers, {m.get('tg_buffer_bytes')} bytes")
        if m.get("tg_buffers") != 0 or m.get("tg_buffer_bytes") != 0:
            print("FAIL: buffers held after every session closed")
            ok = False
    return ok


def check_reserve(a, ok):
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with Cluster(a.rpc_server, n=1, devices=1, extra=["--mem-reserve", str(total + 1), "--session-mem-limit", "0"]) as c:
        r = subprocess.run(tg_run_cmd(a.tg_run, a.model, 16, ["--rpc", c.endpoints[0]]),
                           capture_output=True, text=True, env=client_env(), timeout=120)
        err = [l for l in r.stderr.splitlines() if "error" in l][-1:]
        print(f"--mem-reserve {total + 1}: tg-run exit {r.returncode}: {err}")
        if r.returncode == 0 or not err or "--mem-reserve" not in err[0]:
            print("FAIL: the reserve should refuse the model's buffers, naming --mem-reserve")
            ok = False
        if c.servers[0].proc.poll() is not None:
            print("FAIL: the server died")
            ok = False
        elif wait_idle(c).get("tg_buffers") != 0:
            print("FAIL: buffers held after the refused session left")
            ok = False
    return ok


def main():
    a = model_test_args([("--hog", dict(required=True))])
    if model_missing(a.model):
        return SKIP
    want_long, _ = local_tokens(a.tg_run, a.model, N_TOKENS, ["-c", "4096"])
    want_short, _ = local_tokens(a.tg_run, a.model, 64)
    ok = check_session_limit(a, want_long, want_short, True)
    ok = check_reserve(a, ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
