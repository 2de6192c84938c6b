#!/usr/bin/env python3
"""Soak: many client sessions over time, random faults, and the servers' resources watched.

  soak.py --tg-run PATH --rpc-server PATH --model MODEL [--seconds S] [--clients 16]
          [--servers 3] [--seed N] [--csv FILE]

rpc-servers (2 CPU devices each, with a --cache) in network namespaces (faultnet.py). 16
client threads run tg-run over --rpc back to back, each run a new session: one device of one
server, -sm tensor over one server's two devices, or -sm layer across two servers; 16 to 64
greedy tokens from one of three prompts, every token checked against local -sm none.
Meanwhile one fault at a time, at random: kill -9 and a restart (not server 0, so that one
process lives through the whole run), SIGSTOP then SIGCONT, a link that drops every packet,
packet loss, delay (tc netem, else delayq.py on NFQUEUE), a read-only cache.

Every --sample seconds a line: runs so far (right, wrong, failed during a fault, failed
otherwise) and each server's RSS, open descriptors, threads, buffers and sessions held.
Every --quiet-every seconds a quiet point: clients finish their run and wait, faults are
off; each server must then hold no session and no buffer, and its RSS and descriptors are
recorded, with glibc's own account of its heap (--heap: bytes in use by live objects, which a
leak grows, against bytes held from the system; malloc_stats() called through gdb).

Fails on: a wrong token, a server that died without being killed, a client run that hung
(ran past its deadline), buffers held at a quiet point, a run failing with no fault on its
servers, or a server process whose RSS or descriptors grow more than --growth percent after
its warm-up (--warmup s of its life, default a quarter of the run): the median of the first
third of its quiet points against that of the last third, since single readings swing with
what the allocator keeps (descriptors other than peer channels: more than --growth
percent and more than FD_SLACK). Length: --seconds, default TG_SOAK_SECONDS or 1200.
Exit 0 pass, 1 fail, 77 skipped (no namespaces, model missing).
"""
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultnet  # noqa: E402
from faultnet import Net, client_env, local_tokens, tg_run_cmd  # noqa: E402
from rpc_cluster import SKIP, model_test_args  # noqa: E402

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park"]
N_CHOICES = [16, 32, 64]
RUN_DEADLINE_S = 120  # a client run longer than this hangs (the longest fault lasts 15 s).
GRACE_S = 6           # a run failing this long after a fault ended still counts as hit by it
                      # (detection takes up to 4 s, a connection attempt into a fault longer).
MIB = 1 << 20
MIN_QUIET = 6         # quiet points past warm-up needed to judge a process's growth.
FD_SLACK = 1          # descriptors a process may gain past --growth: at ~10, 5% is less than
                      # one, and one comes and goes with a client's socket not yet closed; a
                      # leak grows with the sessions served (thousands). Peer channels (0..2
                      # per peer, with the faults) are not counted (Net.peer_sockets).


def median(values):
    return statistics.median(list(values))


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.right = self.wrong = self.fault_err = self.other_err = self.hangs = 0
        self.errors = {}  # first error lines, by kind, for the report.
        self.wrong_examples = []

    def add(self, kind, line=""):
        with self.lock:
            setattr(self, kind, getattr(self, kind) + 1)
            if line and kind != "right":
                self.errors.setdefault(kind, []).append(line)

    def row(self):
        with self.lock:
            return self.right, self.wrong, self.fault_err, self.other_err, self.hangs


class Soak:
    def __init__(self, a, net, refs):
        self.a, self.net, self.refs = a, net, refs
        self.rng = random.Random(a.seed)
        self.stats = Stats()
        self.stop = threading.Event()
        self.pause = threading.Event()
        self.busy = [False] * a.clients
        self.faults = []  # (server, kind, start, end)
        self.fault_lock = threading.Lock()
        self.killed_pids = set()
        self.crashes = []
        self.quiet = []   # (t, [(pid, rss, fds, buffers, sessions, threads, anon, heap)] per
                          # server); heap: (arenas, system bytes, in use bytes) or None.
        self.t0 = time.time()
        self.started = {net.pid(i): 0.0 for i in range(net.n)}  # pid -> start, s since t0.

    # -- clients --
    def pick(self, rng):
        n_servers = self.net.n
        kind = rng.choice(["single", "single", "tensor", "layer"] if n_servers > 1 else ["single", "tensor"])
        if kind == "layer":
            servers = rng.sample(range(n_servers), 2)
            devices = sum((self.net.remote_devices(s) for s in servers), [])
            extra = ["-sm", "layer"]
        else:
            servers = [rng.randrange(n_servers)]
            devices = self.net.remote_devices(servers[0])
            if kind == "single":
                devices = [rng.choice(devices)]
                extra = []
            else:
                extra = ["-sm", "tensor"]
        eps = [self.net.endpoints[s] for s in servers]
        return servers, ["--rpc", ",".join(eps), "--device", ",".join(devices)] + extra

    def hit_by_fault(self, servers, start, end):
        """The kind of a fault on one of `servers` during [start, end] (with GRACE_S), or None."""
        with self.fault_lock:
            for s, kind, f_start, f_end in self.faults:
                f_end = time.time() if f_end is None else f_end
                if s in servers and f_start <= end and start <= f_end + GRACE_S:
                    return kind
        return None

    def client(self, idx):
        rng = random.Random(self.a.seed * 1000 + idx)
        while not self.stop.is_set():
            self.busy[idx] = True  # before looking at pause: quiet_point waits for busy ones.
            if self.pause.is_set():
                self.busy[idx] = False
                time.sleep(0.05)
                continue
            servers, extra = self.pick(rng)
            prompt, n = rng.choice(PROMPTS), rng.choice(N_CHOICES)
            cmd = tg_run_cmd(self.a.tg_run, self.a.model, n, ["-p", prompt] + extra + self.net.client_flags)
            start = time.time()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, env=client_env(),
                                   timeout=RUN_DEADLINE_S)
                end = time.time()
                if r.returncode == 0:
                    try:
                        tokens = json.loads(r.stdout)["tokens"]
                    except (ValueError, KeyError):
                        tokens = None
                    if tokens == self.refs[prompt][:n]:
                        self.stats.add("right")
                    else:
                        self.stats.add("wrong", f"{' '.join(extra)} -p {prompt!r} -n {n}: {tokens}")
                else:
                    lines = [l for l in r.stderr.splitlines() if l.strip() and "CUDA" not in l]
                    line = f"{lines[-1] if lines else ''} [{' '.join(extra[:2])}]"
                    fault = self.hit_by_fault(servers, start, end)
                    self.stats.add("fault_err" if fault else "other_err",
                                   f"{fault or '-'} t={start - self.t0:.0f}s {line}")
            except subprocess.TimeoutExpired:
                self.stats.add("hangs", f"t={start - self.t0:.0f}s {' '.join(extra)}")
            self.busy[idx] = False

    # -- faults --
    def fault_kinds(self):
        kinds = ["kill", "stop", "readonly"]
        if self.net.link_faults_ok:
            kinds += ["down", "loss"]
        if self.net.delay_ok:
            kinds.append("delay")
        if self.a.faults is not None:
            kinds = [k for k in kinds if k in self.a.faults.split(",")]
        return kinds

    def inject(self):
        rng = self.rng
        kind = rng.choice(self.fault_kinds())
        s = rng.randrange(1, self.net.n) if kind == "kill" else rng.randrange(self.net.n)
        entry = [s, kind, time.time(), None]
        with self.fault_lock:
            self.faults.append(entry)
        if kind == "kill":
            self.killed_pids.add(self.net.pid(s))
            self.net.kill(s)
            time.sleep(rng.uniform(0.5, 3))
            self.net.restart(s)
            self.started[self.net.pid(s)] = time.time() - self.t0
        elif kind == "stop":
            self.net.stop(s)
            time.sleep(rng.uniform(1, 6))
            self.net.cont(s)
        elif kind == "down":
            self.net.link(s).down()
            time.sleep(rng.uniform(1, 8))
            self.net.link(s).up()
        elif kind == "loss":
            self.net.link(s).loss(rng.choice([1, 2, 5]))
            time.sleep(rng.uniform(5, 15))
            self.net.link(s).clear()
        elif kind == "delay":
            self.net.link(s).netem(delay_ms=rng.choice([10, 25, 50]), jitter_ms=5)
            time.sleep(rng.uniform(5, 15))
            self.net.link(s).clear()
        elif kind == "readonly":
            self.net.readonly_cache(s)
            time.sleep(rng.uniform(5, 15))
            self.net.writable_cache(s)
        with self.fault_lock:
            entry[3] = time.time()

    def check_crashes(self):
        for i in range(self.net.n):
            proc = self.net.servers[i].proc
            if proc.poll() is not None and proc.pid not in self.killed_pids:
                self.crashes.append(f"server {i} (pid {proc.pid}) exited {proc.returncode}: "
                                    f"{self.net.log(i)[-1500:]}")
                self.killed_pids.add(proc.pid)
                self.net.restart(i)
                self.started[self.net.pid(i)] = time.time() - self.t0

    # -- observation --
    def server_row(self, i, timeout=2):
        """(rss, fds, buffers, buffer bytes, sessions, threads, anon); metrics None when the
        server does not answer (stopped, link down); None when the process is gone."""
        try:
            rss, fds, threads = self.net.rss(i), self.net.fds(i), self.net.thread_count(i)
            anon = self.net.rss_anon(i)
        except OSError:
            return None
        try:
            m = self.net.metrics(i, timeout)
            return (rss, fds, m.get("tg_buffers"), m.get("tg_buffer_bytes"),
                    m.get("tg_sessions_active"), threads, anon)
        except OSError:
            return rss, fds, None, None, None, threads, anon

    def sample_line(self, tag="sample"):
        right, wrong, ferr, oerr, hangs = self.stats.row()
        parts = [f"{tag} t={time.time() - self.t0:6.0f}s runs right {right} wrong {wrong} "
                 f"failed(fault) {ferr} failed(other) {oerr} hung {hangs}"]
        for i in range(self.net.n):
            row = self.server_row(i)
            if row is None:
                parts.append(f"s{i} down")
                continue
            rss, fds, bufs, bbytes, sess, threads, anon = row
            fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
            parts.append(f"s{i} pid {self.net.pid(i)} rss {rss / MIB:.1f}M (anon {anon / MIB:.1f}M) "
                         f"fd {fds} thr {threads} "
                         f"buffers {fmt(bufs)} ({'-' if bbytes is None else f'{bbytes / MIB:.1f}M'}) "
                         f"sessions {fmt(sess)}")
        line = " | ".join(parts)
        print(line, flush=True)
        if self.a.csv:
            with open(self.a.csv, "a") as f:
                f.write(line + "\n")

    def quiet_point(self):
        """Clients finish and wait; every server must drop to no session and no buffer.
        Records each server's (pid, rss, fds); False when something stays held."""
        self.pause.set()
        deadline = time.time() + RUN_DEADLINE_S + 10
        while any(self.busy) and time.time() < deadline:
            time.sleep(0.05)
        ok = True
        rows = []
        peer_counts = []
        for i in range(self.net.n):
            held = None
            end = time.time() + 30
            while time.time() < end:
                row = self.server_row(i, timeout=5)
                if row and row[2] == 0 and row[4] == 0:
                    held = None
                    break
                held = row
                time.sleep(0.2)
            if held is not None:
                print(f"FAIL: quiet point: server {i} still holds {held}")
                ok = False
            row = self.server_row(i, timeout=5)
            # Descriptors judged: all but the peer channels, which come and go with the faults.
            peers = self.net.peer_sockets(i) if row else 0
            rows.append((self.net.pid(i), row[0], row[1] - peers, row[2], row[4], row[5], row[6])
                        if row else None)
            peer_counts.append(peers)
        heaps = self.heaps() if self.a.heap else [None] * self.net.n
        rows = [r + (h,) if r else None for r, h in zip(rows, heaps)]
        self.quiet.append((time.time() - self.t0, rows))
        self.sample_line("quiet ")
        print("peers  " + " | ".join(f"s{i} {n} peer sockets" for i, n in enumerate(peer_counts)))
        print("heap   " + " | ".join(
            f"s{i} " + ("-" if h is None else f"{h[2] / MIB:.1f}M in use of {h[1] / MIB:.1f}M, "
                                                 f"{h[0]} arenas")
            for i, h in enumerate(heaps)), flush=True)
        self.pause.clear()
        return ok

    def heaps(self):
        """Each server's glibc heap (Net.heap), read in parallel: gdb stops each for a moment."""
        out = [None] * self.net.n

        def one(i):
            if self.net.alive(i):
                out[i] = self.net.heap(i)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(self.net.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def growth(self):
        """Per server process with at least MIN_QUIET quiet points past its own warm-up:
        (server, pid, points, rss first, rss last, fds first, fds last, anon first, anon
        last), each the median over the first or the last third of those points. Single
        readings swing by +-10 MiB with what glibc's arenas happen to keep (RssAnon moves,
        RssFile does not; see docs/reliability.md): a median sees through that, while a leak,
        which grows with the sessions served, moves the whole last third up."""
        out = []
        for i in range(self.net.n):
            by_pid = {}
            for t, rows in self.quiet:
                row = rows[i]
                if row and t - self.started.get(row[0], 0.0) >= self.a.warmup:
                    by_pid.setdefault(row[0], []).append(row)
            for pid, rows in by_pid.items():
                if len(rows) < MIN_QUIET:
                    continue
                third = len(rows) // 3
                first, last = rows[:third], rows[-third:]
                heap = lambda part, k: (median(r[7][k] for r in part)  # noqa: E731
                                        if all(r[7] for r in part) else None)
                out.append((i, pid, len(rows), median(r[1] for r in first),
                             median(r[1] for r in last), median(r[2] for r in first),
                             median(r[2] for r in last), median(r[6] for r in first),
                             median(r[6] for r in last), heap(first, 2), heap(last, 2),
                             heap(first, 1), heap(last, 1)))
        return out


def main():
    a = model_test_args([
        ("--seconds", dict(type=float, default=float(os.environ.get("TG_SOAK_SECONDS", 1200)))),
        ("--clients", dict(type=int, default=16)), ("--servers", dict(type=int, default=3)),
        ("--sample", dict(type=float, default=10)), ("--quiet-every", dict(type=float, default=None, help="default: --seconds / 10, at most 30")),
        ("--fault-gap", dict(type=float, default=6, help="mean seconds between faults")),
        ("--warmup", dict(type=float, default=None, help="default: a quarter of --seconds")),
        ("--growth", dict(type=float, default=5)), ("--seed", dict(type=int, default=20)),
        ("--csv", dict(default=None)),
        ("--heap", dict(type=int, default=1, help="1: at each quiet point, glibc's heap of "
                        "each server (malloc_stats through gdb, where gdb exists)")),
        ("--faults", dict(default=None, help="comma-separated subset of kill,stop,down,loss,"
                          "delay,readonly; 'none' for none"))])
    if a.warmup is None:
        a.warmup = a.seconds / 4
    if a.quiet_every is None:
        a.quiet_every = min(30.0, a.seconds / 10)
    if faultnet.cannot_run(a.model):
        return SKIP
    refs = {p: local_tokens(a.tg_run, a.model, max(N_CHOICES), ["-p", p])[0] for p in PROMPTS}
    with Net(a.rpc_server, n=a.servers, devices=2, cache=True) as net:
        soak = Soak(a, net, refs)
        print(f"soak: {a.seconds:.0f} s, {a.clients} clients, {a.servers} servers "
              f"{net.endpoints}, faults {soak.fault_kinds()} (netem: {net.netem_ok}, delayq: {net.nfq_ok}, nft or netem: {net.link_faults_ok}), "
              f"warm-up {a.warmup:.0f} s, seed {a.seed}", flush=True)
        threads = [threading.Thread(target=soak.client, args=(i,), daemon=True) for i in range(a.clients)]
        for t in threads:
            t.start()
        ok = True
        next_sample, next_quiet = a.sample, a.quiet_every
        while time.time() - soak.t0 < a.seconds:
            time.sleep(min(soak.rng.expovariate(1 / a.fault_gap), a.sample))
            if time.time() - soak.t0 >= a.seconds:
                break
            if soak.fault_kinds():
                soak.inject()
            soak.check_crashes()
            now = time.time() - soak.t0
            if now >= next_quiet:
                ok = soak.quiet_point() and ok
                next_quiet = now + a.quiet_every
                next_sample = now + a.sample
            elif now >= next_sample:
                soak.sample_line()
                next_sample = now + a.sample
        soak.stop.set()
        for t in threads:
            t.join(RUN_DEADLINE_S + 10)
        soak.check_crashes()
        ok = soak.quiet_point() and ok
        return report(a, soak, ok)


def report(a, soak, ok):
    right, wrong, ferr, oerr, hangs = soak.stats.row()
    kinds = {}
    for _, kind, _, _ in soak.faults:
        kinds[kind] = kinds.get(kind, 0) + 1
    print("\n=== soak summary")
    print(f"duration {time.time() - soak.t0:.0f} s, {a.clients} clients, {a.servers} servers; "
          f"client runs (one session per server each): {right + wrong + ferr + oerr + hangs}")
    print(f"right {right}, wrong {wrong}, failed during a fault {ferr}, failed otherwise {oerr}, "
          f"hung {hangs}")
    print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    for kind in ["wrong", "other_err", "hangs"]:
        for line in soak.stats.errors.get(kind, [])[:5]:
            print(f"  {kind}: {line}")
    by_cause = {}
    for line in soak.stats.errors.get("fault_err", []):
        fault = line.split()[0]
        cause = line.rsplit(" [", 1)[0].rsplit(": ", 1)[-1].strip()[:50]
        by_cause[(fault, cause)] = by_cause.get((fault, cause), 0) + 1
    print("runs failed during a fault, by fault and cause: " + "; ".join(
        f"{v}x {f}: {c}" for (f, c), v in sorted(by_cause.items(), key=lambda kv: -kv[1])))
    for c in soak.crashes:
        print(f"CRASH: {c}")
    growth_ok = True
    judged = soak.growth()
    for i, pid, points, rss0, rss1, fd0, fd1, anon0, anon1, use0, use1, sys0, sys1 in judged:
        g_rss, g_fd = (rss1 - rss0) / rss0 * 100, (fd1 - fd0) / fd0 * 100
        fds_ok = g_fd <= a.growth or fd1 - fd0 <= FD_SLACK
        verdict = "ok" if g_rss <= a.growth and fds_ok else "GROWS"
        heap = "" if use0 is None else (f"; heap in use {use0 / MIB:.2f} -> {use1 / MIB:.2f} MiB "
                                        f"of {sys0 / MIB:.1f} -> {sys1 / MIB:.1f} MiB held")
        print(f"server {i} pid {pid}, {points} quiet points after warm-up, median of the first "
              f"third -> of the last: RSS {rss0 / MIB:.1f} -> {rss1 / MIB:.1f} MiB ({g_rss:+.1f}%; "
              f"anon {anon0 / MIB:.1f} -> {anon1 / MIB:.1f}), fds {fd0:.0f} -> {fd1:.0f} "
              f"({g_fd:+.1f}%){heap}: {verdict}")
        growth_ok = growth_ok and verdict == "ok"
    last = soak.quiet[-1][1] if soak.quiet else []
    print("after the last session: " + ", ".join(
        f"s{i} buffers {r[3]:.0f} sessions {r[4]:.0f}" if r and r[3] is not None else f"s{i} ?"
        for i, r in enumerate(last)))
    checks = [(wrong == 0, "wrong tokens"), (not soak.crashes, "server crashes"),
              (hangs == 0, "hung client runs"), (oerr == 0, "runs failed with no fault"),
              (growth_ok, f"growth above {a.growth}% after warm-up"),
              (bool(judged), f"no server process had {MIN_QUIET} quiet points after warm-up"),
              (ok, "buffers held at a quiet point")]
    failed = [what for good, what in checks if not good]
    print("PASS" if not failed else "FAIL: " + ", ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
