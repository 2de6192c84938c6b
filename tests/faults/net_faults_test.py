#!/usr/bin/env python3
"""Network and process faults against rpc-servers in their own network namespaces.

  net_faults_test.py --tg-run PATH --rpc-server PATH --model MODEL --case CASE

Every case compares tg-run over --rpc with local -sm none (greedy tokens identical) and
prints RESULT lines with what the system did and how long it took (docs/reliability.md).

  slow_link       50 ms +- 10 ms delay and 1% loss each way on both servers' links (netem),
                  -sm layer across the two servers (client and PeerCopy traffic): the 64
                  tokens are right. Where tc netem is missing, delayq.py on iptables
                  NFQUEUE delays and drops instead; skips where neither exists.
  lossy_link      1% random loss each way on both links (netem, else nftables), -sm layer
                  across the two servers: the 64 tokens are right.
  link_down       the server's link drops every packet for 30 s mid-generation: tg-run exits
                  non-zero within 5 s naming the server; once the link is back the server
                  has closed the session, holds no buffer and serves the next client.
  link_down_failover
                  -sm layer over two servers with --rpc-failover; server 1's link drops
                  every packet (for 30 s) once generation is under way: tg-run reports it
                  lost (one line, within the keepalive deadline) and finishes on server 0
                  with the greedy text of local -sm none.
  sigstop         SIGSTOP mid-generation: tg-run exits non-zero within 5 s naming the
                  server; after SIGCONT the server frees the session and serves again.
  kill            kill -9 of the second of two servers (-sm layer) mid-generation: tg-run
                  exits non-zero within 5 s naming it; the first server frees the session;
                  restarted on the same address and cache, it uploads nothing and the split
                  run is right again.
  readonly_cache  the server's --cache made read-only while a generation runs: it finishes
                  right; a new model's weights still upload (the store fails with a logged
                  warning); writable again, they are stored; read-only again, served from it.
Exit 0 pass, 1 fail, 77 skipped (no namespaces, no netem where needed, or model missing).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultnet  # noqa: E402
from faultnet import Generation, Net, client_env, local_tokens, tg_run_cmd  # noqa: E402
from rpc_cluster import SKIP, model_test_args  # noqa: E402

DETECT_S = 5.0       # the bound for noticing a dead or stalled server.
LINK_DOWN_S = 30.0   # the outage.
RECOVERY_S = 5.0     # reloading a 1 MiB model and rebuilding its KV cache, on a loaded host.
LONG = ["-n", "4000", "-c", "4096"]  # a generation that outlasts the fault's detection.
RUN_TIMEOUT_S = 90.0  # a 64-token run takes seconds; well inside ctest's TIMEOUT (240 s).
STARTED_CHARS = 200  # stdout bytes that show generation is under way (prompt + a few tokens).


class Case:
    def __init__(self, a):
        self.a = a
        self.ok = True

    def fail(self, msg):
        print(f"FAIL: {msg}")
        self.ok = False

    def result(self, msg):
        print(f"RESULT {self.a.case}: {msg}")

    def run_json(self, net, endpoints_extra, n=64, model=True):
        """tg-run --json over the net; (tokens or None, seconds, error line)."""
        cmd = tg_run_cmd(self.a.tg_run, self.a.model if model else None, n,
                         endpoints_extra + net.client_flags)
        start = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=client_env(),
                               timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            # Say where it hung before ctest's own timeout kills the test silently.
            print(f"tg-run did not finish in {RUN_TIMEOUT_S:.0f} s; its stderr:\n"
                  f"{(e.stderr or b'').decode(errors='replace')[-2000:]}")
            for i in range(net.n):
                if net.alive(i):
                    print(f"--- server {i} log (tail):\n{net.log(i)[-2000:]}")
            return None, time.time() - start, [f"tg-run hung for {RUN_TIMEOUT_S:.0f} s"]
        took = time.time() - start
        if r.returncode != 0:
            return None, took, r.stderr.strip().splitlines()[-1:] or [""]
        return json.loads(r.stdout)["tokens"], took, ""

    def generate_then(self, net, rpc_extra, fault, culprit):
        """Starts a long streaming generation, calls fault() once it is under way and times
        how long tg-run takes to exit. Checks: non-zero exit, within DETECT_S, the last error
        line naming the culprit endpoint. Returns the seconds."""
        g = Generation(tg_run_cmd(self.a.tg_run, self.a.model, None,
                                  LONG + rpc_extra + net.client_flags, json_out=False))
        if not g.wait_output(STARTED_CHARS, 60):
            g.finish(5)
            self.fail(f"generation did not start: {g.error_line()}")
            return None
        t0 = time.time()
        fault()
        rc, _ = g.finish(60)
        took = g.end - t0
        line = g.error_line()
        self.result(f"tg-run exit {rc} {took:.2f} s after the fault: {line!r}")
        if rc == 0:
            self.fail("tg-run finished as if nothing happened (was the fault too late?)")
        elif rc is None:
            self.fail("tg-run still ran 60 s after the fault")
        if took > DETECT_S:
            self.fail(f"noticed after {took:.2f} s, want <= {DETECT_S} s")
        if culprit not in line:
            self.fail(f"the error should name {culprit}")
        return took

    def wait_released(self, net, i, timeout):
        """Seconds until server i has no session and no buffer; None after timeout."""
        start = time.time()
        while time.time() - start < timeout:
            try:
                m = net.metrics(i)
                if m.get("tg_sessions_active") == 0 and m.get("tg_buffers") == 0:
                    return time.time() - start
            except OSError:
                pass
            time.sleep(0.1)
        return None

    def check_serves(self, net, rpc_extra, want, label):
        tokens, took, err = self.run_json(net, rpc_extra)
        self.result(f"{label}: {'right tokens' if tokens == want else 'WRONG'} in {took:.2f} s {err}")
        if tokens != want:
            self.fail(f"{label}: {err or 'tokens differ from local -sm none'}")


def layer_over(net):
    return ["--rpc", ",".join(net.endpoints), "-sm", "layer", "--device",
            ",".join(sum((net.remote_devices(i) for i in range(net.n)), []))]


def slow_or_lossy(c, want, shape):
    with Net(c.a.rpc_server, n=2) as net:
        extra = layer_over(net)
        base, base_s, err = c.run_json(net, extra)
        if base != want:
            c.fail(f"the clean link already fails: {err}")
            return
        for i in range(net.n):
            shape(net.link(i))
        state = net.link(0).state
        tokens, took, err = c.run_json(net, extra)
        c.result(f"{state} on both links, -sm layer over 2 servers: "
                 f"{'right tokens' if tokens == want else 'WRONG'} in {took:.2f} s "
                 f"(clean link {base_s:.2f} s) {err}")
        if tokens != want:
            c.fail(err or "tokens differ from local -sm none")
        for i in range(net.n):
            net.link(i).clear()
        if c.wait_released(net, 0, 10) is None or c.wait_released(net, 1, 10) is None:
            c.fail("buffers still held after the client left")


def case_slow_link(c, want):
    reason = faultnet.delay_missing()
    if reason:
        print(f"skipped: {reason}")
        return SKIP
    slow_or_lossy(c, want, lambda link: link.netem(delay_ms=50, jitter_ms=10, loss_pct=1))


def case_lossy_link(c, want):
    if faultnet.netem_missing() and faultnet.nft_missing():
        print(f"skipped: neither tc netem nor nftables: {faultnet.nft_missing()}")
        return SKIP
    slow_or_lossy(c, want, lambda link: link.loss(1))


def case_link_down(c, want):
    if faultnet.netem_missing() and faultnet.nft_missing():
        print(f"skipped: neither tc netem nor nftables: {faultnet.nft_missing()}")
        return SKIP
    with Net(c.a.rpc_server, n=1) as net:
        ep = net.endpoints[0]
        down_at = []

        def fault():
            down_at.append(time.time())
            net.link(0).down()
        c.generate_then(net, ["--rpc", ep], fault, ep)
        # The server's side: its keepalive (rpc_server.cc) may notice the silent client.
        closed = net.wait_log(0, "session closed", LINK_DOWN_S - (time.time() - down_at[0]))
        if closed is not None:
            closed = time.time() - down_at[0]
        state = net.link(0).state
        time.sleep(max(0.0, LINK_DOWN_S - (time.time() - down_at[0])))
        net.link(0).up()
        after = c.wait_released(net, 0, 60)
        c.result(f"{state} for {LINK_DOWN_S:.0f} s: the server closed the session "
                 + (f"{closed:.1f} s into the outage" if closed is not None
                    else "only after the link came back")
                 + (f"; no session or buffer {after:.1f} s after the link came back"
                    if after is not None else ""))
        if after is None:
            c.fail("the server still holds the lost client's session 60 s after the link came back")
        c.check_serves(net, ["--rpc", ep], want, "next client after the outage")


def case_link_down_failover(c, want):
    if faultnet.netem_missing() and faultnet.nft_missing():
        print(f"skipped: neither tc netem nor nftables: {faultnet.nft_missing()}")
        return SKIP
    n, kill_after = 400, 20
    _, want_text = local_tokens(c.a.tg_run, c.a.model, n, ["-c", "4096"])
    _, head = local_tokens(c.a.tg_run, c.a.model, kill_after, ["-c", "4096"])
    prompt = "Once upon a time"  # tg-run's default, echoed first on stdout.
    with Net(c.a.rpc_server, n=2) as net:
        g = Generation(tg_run_cmd(c.a.tg_run, c.a.model, n, ["-c", "4096", "--rpc-failover"]
                                  + layer_over(net) + net.client_flags, json_out=False))
        if not g.wait_output(len(prompt) + len(head), 60):
            g.finish(5)
            c.fail(f"generation did not start: {g.error_line()}")
            return
        t0 = time.time()
        net.link(1).down()
        while (" lost at token " not in g.stderr and g.proc.poll() is None
               and time.time() - t0 < LINK_DOWN_S):
            time.sleep(0.02)
        reported = time.time() - t0
        rc, _ = g.finish(LINK_DOWN_S + 60)
        took = g.end - t0
        lines = [l for l in g.stderr.splitlines() if " lost at token " in l]
        c.result(f"{net.link(1).state} on server 1's link, -sm layer over 2 servers with "
                 f"--rpc-failover: recovered {reported:.2f} s after the fault, tg-run exit {rc} "
                 f"{took:.2f} s after it; {lines[:1]}")
        if reported > DETECT_S + RECOVERY_S:
            c.fail(f"want the loss reported and recovered within {DETECT_S + RECOVERY_S} s")
        net.link(1).up()
        if rc != 0:
            c.fail(f"tg-run failed: {g.error_line()}")
        if len(lines) != 1 or net.endpoints[1] not in lines[0]:
            c.fail("want one line reporting server 1 lost")
        if g.stdout != prompt + want_text:
            c.fail("the text differs from local -sm none's")
        else:
            c.result("the greedy text equals local -sm none's")


def case_sigstop(c, want):
    with Net(c.a.rpc_server, n=1) as net:
        ep = net.endpoints[0]
        stopped = []

        def fault():
            stopped.append(time.time())
            net.stop(0)
        c.generate_then(net, ["--rpc", ep], fault, ep)
        time.sleep(max(0.0, 10 - (time.time() - stopped[0])))  # stays stopped 10 s in all.
        net.cont(0)
        after = c.wait_released(net, 0, 30)
        c.result("SIGSTOP for 10 s, then SIGCONT: "
                 + (f"no session or buffer {after:.1f} s later" if after is not None else "STILL HOLDS"))
        if after is None:
            c.fail("the server still holds the session after SIGCONT")
        c.check_serves(net, ["--rpc", ep], want, "next client after SIGCONT")


def case_kill(c, want):
    with Net(c.a.rpc_server, n=2, cache=True) as net:
        # A fixed split: by free memory the restarted server could get other layers than
        # before, whose weights its cache never saw.
        extra = layer_over(net) + ["-ts", "1,1"]
        c.check_serves(net, extra, want, "before the kill")
        c.generate_then(net, extra, lambda: net.kill(1), net.endpoints[1])
        freed = c.wait_released(net, 0, 30)
        c.result("the surviving server "
                 + (f"freed the session {freed:.2f} s after tg-run exited" if freed is not None
                    else "STILL HOLDS the session"))
        if freed is None:
            c.fail("the surviving server keeps the dead client's buffers")
        t0 = time.time()
        net.restart(1)
        c.result(f"restarted on {net.endpoints[1]} in {time.time() - t0:.2f} s")
        c.check_serves(net, extra, want, "split run after the restart")
        m = net.metrics(1)
        c.result(f"restarted server: uploaded {m.get('tg_upload_bytes_total'):.0f} bytes, "
                 f"cache hits {m.get('tg_cache_hit_bytes_total'):.0f} bytes")
        if m.get("tg_upload_bytes_total") != 0 or not m.get("tg_cache_hit_bytes_total"):
            c.fail("the restarted server should take every weight from its cache")


def case_readonly_cache(c, want):
    synth_want, _ = local_tokens(c.a.tg_run, None, 32)
    with Net(c.a.rpc_server, n=1, cache=True) as net:
        ep = ["--rpc", net.endpoints[0]]
        long_want, _ = local_tokens(c.a.tg_run, c.a.model, 2000, ["-c", "4096"])
        g = Generation(tg_run_cmd(c.a.tg_run, c.a.model, 2000, ["-c", "4096"] + ep + net.client_flags))
        deadline = time.time() + 60
        while net.metrics(0).get("tg_compute_total", 0) < 10 and time.time() < deadline:
            time.sleep(0.01)
        net.readonly_cache(0)
        if g.proc.poll() is not None:
            c.fail("the generation was over before the cache went read-only")
        log_start = net.log_size(0)
        cached_before = net.metrics(0).get("tg_cache_bytes")

        def synth(label):
            tokens, took, err = c.run_json(net, ep, n=32, model=False)
            m = net.metrics(0)
            c.result(f"{label}: {'right tokens' if tokens == synth_want else 'WRONG'} in {took:.2f} s; "
                     f"cache {m.get('tg_cache_bytes'):.0f} bytes, uploaded "
                     f"{m.get('tg_upload_bytes_total'):.0f}, hits {m.get('tg_cache_hit_bytes_total'):.0f} {err}")
            if tokens != synth_want:
                c.fail(f"{label}: {err or 'tokens differ'}")
            return m
        m = synth("read-only cache, new weights")
        rc, _ = g.finish(120)
        if rc != 0 or json.loads(g.stdout)["tokens"] != long_want:
            c.fail(f"the generation running when the cache went read-only: {g.error_line()}")
        else:
            c.result("the generation running when the cache went read-only finished with the right tokens")
        with open(net.servers[0].log_path, errors="replace") as f:
            f.seek(log_start)
            log = f.read()
        warnings = [l for l in log.splitlines() if "cache store failed" in l]
        c.result(f"{len(warnings)} 'cache store failed' warnings, e.g. {warnings[:1]}")
        if not warnings or "Read-only file system" not in warnings[0]:
            c.fail("the failed stores should be logged with the reason")
        if m.get("tg_cache_bytes") != cached_before:
            c.fail("nothing should have been stored in a read-only cache")
        net.writable_cache(0)
        m = synth("writable again")
        stored = m.get("tg_cache_bytes")
        if not stored > cached_before:
            c.fail("the new weights should have been stored once the cache was writable")
        net.readonly_cache(0)
        uploaded = m.get("tg_upload_bytes_total")
        m = synth("read-only again, weights cached")
        if m.get("tg_upload_bytes_total") != uploaded:
            c.fail("weights in the cache should not be uploaded again")
        if net.servers[0].proc.poll() is not None:
            c.fail("the server died")


CASES = {"slow_link": case_slow_link, "lossy_link": case_lossy_link, "link_down": case_link_down,
         "link_down_failover": case_link_down_failover,
         "sigstop": case_sigstop, "kill": case_kill, "readonly_cache": case_readonly_cache}


def main():
    a = model_test_args([("--case", dict(choices=sorted(CASES), required=True))])
    if faultnet.cannot_run(a.model):
        return SKIP
    want, _ = local_tokens(a.tg_run, a.model, 64)
    c = Case(a)
    if CASES[a.case](c, want) == SKIP:
        return SKIP
    print("PASS" if c.ok else "FAILED")
    return 0 if c.ok else 1


if __name__ == "__main__":
    sys.exit(main())
