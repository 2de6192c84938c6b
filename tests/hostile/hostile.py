"""What every hostile test uses: a real rpc-server (optionally inside a memory cgroup the test
creates), a raw gRPC client that speaks tensorgrid.v1 as an attacker would, the server's
counters from /proc and /metrics, and an honest tg-run beside the attack.

    with Cgroup(1 << 30) as cg:                      # skip (77) where cgroups are read-only
        srv = start_server(args, extra=["--session-mem-limit", "0"], prefix=cg.prefix)
        with Client(srv.endpoint) as c, c.session() as s:
            code, msg, handle = s.alloc(0, 1536 << 20)
        proc_stats(srv.proc.pid)                     # {"rss": bytes, "threads": n}

    honest = Honest(args, srv, partner)              # the issue's three configurations
    honest.calm(f)                                   # their times without the attack
    baseline = Baseline(srv)                         # the counters before the attacker
    ...the attack, with honest.beside(f, "the flood") while it holds what it took...
    f.check(baseline.restored(), "...")              # within 5 s of the attacker leaving
    honest.calm(f); honest.check(f)                  # within 2x of the slower calm run

The Python stubs (tensorgrid_pb2, tensorgrid_pb2_grpc) are generated at build time by protoc
with grpc_python_plugin into the folder given as --stubs.
"""
import argparse
import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "rpc"))
from rpc_cluster import SKIP, Failures, Server, local_env  # noqa: E402,F401

MIB = 1 << 20
GIB = 1 << 30

pb = None
pb_grpc = None
grpc = None


def parse_args(extra=None):
    """--tg-run, --rpc-server, --model, --stubs (the generated Python stubs) plus `extra`
    (a list of (flag, add_argument kwargs)); imports grpc and the stubs, or exits 77 saying
    what is missing."""
    global pb, pb_grpc, grpc
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--rpc-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--stubs", required=True)
    for flag, kwargs in extra or []:
        ap.add_argument(flag, **kwargs)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: model {args.model} not found")
        sys.exit(SKIP)
    try:
        import grpc as grpc_module  # noqa: PLC0415
    except ImportError:
        print("skipped: python3-grpcio is not installed (scripts/install-deps.sh --test)")
        sys.exit(SKIP)
    sys.path.insert(0, args.stubs)
    from tensorgrid.v1 import tensorgrid_pb2, tensorgrid_pb2_grpc  # noqa: PLC0415
    grpc, pb, pb_grpc = grpc_module, tensorgrid_pb2, tensorgrid_pb2_grpc
    return args


# ---------------------------------------------------------------------------------------------
# Memory cgroups.

class CgroupUnavailable(RuntimeError):
    pass


class Cgroup:
    """A memory cgroup of `limit` bytes, v2 where the unified hierarchy has the memory
    controller, else v1. `prefix` runs a command inside it. Processes left in it are killed
    on exit. Raises CgroupUnavailable (with the reason) where none can be made; skip_unless()
    turns that into exit 77."""

    _count = 0

    def __init__(self, limit):
        self.limit = limit
        self.path = None
        self.version = None

    def __enter__(self):
        Cgroup._count += 1
        name = f"tg-hostile-{os.getpid()}-{Cgroup._count}"
        unified = "/sys/fs/cgroup"
        if not os.path.exists(os.path.join(unified, "cgroup.controllers")):
            unified = "/sys/fs/cgroup/unified"
        ctrl = os.path.join(unified, "cgroup.controllers")
        errors = []
        if os.path.exists(ctrl) and "memory" in open(ctrl).read().split():
            try:
                self.path = os.path.join(unified, name)
                os.mkdir(self.path)
                with open(os.path.join(self.path, "memory.max"), "w") as f:
                    f.write(str(self.limit))
                with open(os.path.join(self.path, "memory.swap.max"), "w") as f:
                    f.write("0")
                self.version = 2
            except OSError as e:
                errors.append(f"v2 {self.path}: {e}")
                self._remove()
        if self.version is None:
            v1 = "/sys/fs/cgroup/memory"
            try:
                self.path = os.path.join(v1, name)
                os.mkdir(self.path)
                with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
                    f.write(str(self.limit))
                try:  # no swap: what passes the limit is killed, not swapped out.
                    with open(os.path.join(self.path, "memory.memsw.limit_in_bytes"), "w") as f:
                        f.write(str(self.limit))
                except OSError:
                    pass
                self.version = 1
            except OSError as e:
                errors.append(f"v1 {self.path}: {e}")
                self._remove()
                raise CgroupUnavailable("; ".join(errors))
        return self

    @property
    def prefix(self):
        """sh that moves itself into the cgroup, then execs the command."""
        procs = os.path.join(self.path, "cgroup.procs")
        return ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]

    def oom_kills(self):
        """How many processes the kernel killed in this cgroup for memory."""
        try:
            if self.version == 2:
                for line in open(os.path.join(self.path, "memory.events")):
                    k, v = line.split()
                    if k == "oom_kill":
                        return int(v)
            else:
                for line in open(os.path.join(self.path, "memory.oom_control")):
                    k, v = line.split()
                    if k == "oom_kill":
                        return int(v)
        except OSError:
            pass
        return 0

    def _remove(self):
        if self.path and os.path.isdir(self.path):
            try:
                for pid in open(os.path.join(self.path, "cgroup.procs")).read().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
            except OSError:
                pass
            for _ in range(50):
                try:
                    os.rmdir(self.path)
                    break
                except OSError:
                    time.sleep(0.1)
        self.path = None

    def __exit__(self, *exc):
        self._remove()


def skip_unless_cgroup(limit):
    """A Cgroup of `limit` bytes entered, or exit 77 with the reason."""
    try:
        return Cgroup(limit).__enter__()
    except CgroupUnavailable as e:
        print(f"skipped: cannot make a memory cgroup ({e})")
        sys.exit(SKIP)


# ---------------------------------------------------------------------------------------------
# Servers and their counters.

def start_server(args, workdir, index=0, devices=1, extra=(), prefix=(), threads=1):
    """An rpc-server (tests/rpc/rpc_cluster.Server: port file, metrics port) serving `devices`
    CPU devices, started under `prefix` (e.g. a Cgroup's)."""
    return Server(args.rpc_server, devices, list(extra), workdir, index, threads=threads,
                  prefix=prefix)


def proc_stats(pid):
    """{"rss": bytes resident, "threads": count} of a running process, from /proc."""
    out = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            out["rss"] = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            out["threads"] = int(line.split()[1])
    return out


# What a session's end must give back (issue 37: "every counter back to its baseline within
# 5 s"): the server's gauges of what sessions hold (server/metrics.cc) and its thread count.
BASELINE_GAUGES = ("tg_sessions_active", "tg_buffers", "tg_buffer_bytes", "tg_mem_held_bytes",
                   "tg_peer_mailbox_bytes")
# Threads the server may keep above its baseline once an attack is over. gRPC's synchronous
# server grows its pool for a burst of concurrent calls and lets the extra threads go as they
# fall idle; a baseline taken before any client called keeps the thread that served the first
# calls. Measured over every case here: +2 at most (+0 where the baseline followed a warm-up
# run). A thread per stalled stream, or per attacker call, is far above it.
THREAD_SLACK = 3
RESTORE_SECONDS = 5


class Baseline:
    """A snapshot of one server's BASELINE_GAUGES and thread count, taken once no session is
    open (after a warm-up run, so that gRPC's pool has its usual threads).
    restored(timeout) waits until every gauge equals its baseline again and the threads are
    within THREAD_SLACK of theirs, printing what still differed when it gives up."""

    def __init__(self, srv):
        self.srv = srv
        # A client that just exited (a warm-up tg-run) may still have its session open on
        # the server for a moment: the baseline is the server with none.
        wait_for(lambda: self.srv.metrics().get("tg_sessions_active", 0) == 0, 10)
        self.values = self.read()
        print(f"baseline of {srv.endpoint}: {self._format(self.values)}")

    def read(self):
        m = self.srv.metrics()
        values = {g: m.get(g, 0.0) for g in BASELINE_GAUGES}
        values["threads"] = proc_stats(self.srv.proc.pid)["threads"]
        return values

    @staticmethod
    def _format(values):
        return ", ".join(f"{k} {v:.0f}" for k, v in values.items())

    def differences(self, now):
        """["name baseline -> now"] of what is not back."""
        out = []
        for k, base in self.values.items():
            v = now[k]
            bad = v > base + THREAD_SLACK if k == "threads" else v != base
            if bad:
                out.append(f"{k} {base:.0f} -> {v:.0f}")
        return out

    def restored(self, timeout=RESTORE_SECONDS):
        """True when every counter is back within `timeout` s (printing how long it took), else
        False (printing what differed)."""
        t0 = time.time()
        diff = []
        while True:
            if self.srv.proc.poll() is not None:
                print(f"{self.srv.endpoint}: the server died")
                return False
            now = self.read()
            diff = self.differences(now)
            if not diff:
                print(f"{self.srv.endpoint}: back to baseline in {time.time() - t0:.2f} s "
                      f"(threads {self.values['threads']} -> {now['threads']})")
                return True
            if time.time() - t0 >= timeout:
                print(f"{self.srv.endpoint}: not back to baseline after {timeout} s: "
                      f"{'; '.join(diff)}")
                return False
            time.sleep(0.1)


def wait_for(predicate, timeout, interval=0.1):
    """Polls predicate() until it is truthy (returned) or `timeout` s pass (its last value)."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value or time.time() >= deadline:
            return value
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------
# A raw client.

class Client:
    """One gRPC channel to a server, with the bearer token when given."""

    def __init__(self, endpoint, token=None):
        self.endpoint = endpoint
        self.metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel = grpc.insecure_channel(
            endpoint, options=[("grpc.max_send_message_length", 64 * MIB),
                               ("grpc.max_receive_message_length", 64 * MIB)])
        self.stub = pb_grpc.TensorGridStub(self.channel)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.channel.close()

    def hello(self):
        """The HelloReply. The version and op table come from the server's own refusal of a
        first Hello without them (its message names both), as any client may learn them."""
        import re  # noqa: PLC0415
        try:
            return self.stub.Hello(pb.HelloRequest(), metadata=self.metadata, timeout=30)
        except grpc.RpcError as e:
            m = re.search(r"server speaks version (\d+) with op table ([0-9a-f]+)",
                          e.details() or "")
            if not m:
                raise
        return self.stub.Hello(pb.HelloRequest(protocol_version=int(m.group(1)),
                                               op_table_fingerprint=int(m.group(2), 16)),
                               metadata=self.metadata, timeout=30)

    def session(self):
        return SessionStream(self)

    def raw_stream_stream(self, method):
        """A stream-stream call of bytes in, bytes out (Upload's raw frames)."""
        return self.channel.stream_stream(f"/tensorgrid.v1.TensorGrid/{method}",
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)


class SessionStream:
    """An open Session stream: call(request) sends one SessionRequest and returns its reply;
    call_raw(bytes) sends one already serialized (a message too large for the client to build
    as objects, or one no client would build). close() (or leaving the with block) ends the
    session."""

    _CLOSE = object()

    def __init__(self, client):
        self.requests = queue.Queue()
        self.next_id = 1
        session = client.channel.stream_stream(
            "/tensorgrid.v1.TensorGrid/Session",
            request_serializer=lambda r: r if isinstance(r, bytes) else r.SerializeToString(),
            response_deserializer=pb.SessionReply.FromString)
        self.call_ = session(self._iter(), metadata=client.metadata)
        first = next(self.call_)
        if first.code != 0:
            raise RuntimeError(f"session refused: {first.code} {first.message}")
        self.id = first.started.session_id

    def _iter(self):
        while True:
            item = self.requests.get()
            if item is self._CLOSE:
                return
            yield item

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.requests.put(self._CLOSE)
        try:
            for _ in self.call_:
                pass
        except Exception:  # noqa: BLE001 - the stream may end with any status
            pass

    def cancel(self):
        self.call_.cancel()

    def send(self, request):
        """Sends without waiting; returns the request id."""
        if request.id == 0:
            request.id = self.next_id
            self.next_id += 1
        self.requests.put(request)
        return request.id

    def reply(self, timeout=60):
        """The next reply (a gRPC error ends the stream: raised)."""
        result = {}

        def read():
            try:
                result["r"] = next(self.call_)
            except Exception as e:  # noqa: BLE001
                result["e"] = e
        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise TimeoutError(f"no reply in {timeout} s")
        if "e" in result:
            raise result["e"]
        return result["r"]

    def call(self, request, timeout=60):
        self.send(request)
        return self.reply(timeout)

    def call_raw(self, data, timeout=60):
        """Sends serialized SessionRequest bytes as they are; returns the reply."""
        self.requests.put(data)
        return self.reply(timeout)

    def alloc(self, device, size, timeout=60):
        """(code, message, handle)."""
        r = self.call(pb.SessionRequest(alloc_buffer=pb.AllocBuffer(device=device, size=size)),
                      timeout)
        return r.code, r.message, r.alloc_buffer.buffer

    def free(self, handle):
        r = self.call(pb.SessionRequest(free_buffer=pb.FreeBuffer(buffer=handle)))
        return r.code, r.message

    def grant(self, handle):
        r = self.call(pb.SessionRequest(grant_peer_read=pb.GrantPeerRead(buffer=handle)))
        return r.code, r.message, r.grant.grant


# Two tenants of a server, each with its own token (rpc-server --client-tokens): the attacks
# run as one, the honest clients as the other.
CLIENT_TOKENS = {"attacker": "attacker-token-0123456789abcdef",
                 "honest": "honest-token-0123456789abcdef"}


def write_client_tokens(workdir):
    """(the --client-tokens file of CLIENT_TOKENS, a --rpc-token-file holding the honest
    client's token), both in `workdir`."""
    tokens_file = os.path.join(workdir, "clients.txt")
    with open(tokens_file, "w") as out:
        out.write("".join(f"{name} {token}\n" for name, token in CLIENT_TOKENS.items()))
    honest_token = os.path.join(workdir, "honest.token")
    with open(honest_token, "w") as out:
        out.write(CLIENT_TOKENS["honest"] + "\n")
    return tokens_file, honest_token


# ---------------------------------------------------------------------------------------------
# An honest client beside the attack.

def tg_run(args, rpc=(), split="none", extra=(), n=32, timeout=300):
    """Greedy tg-run of `n` tokens (F32 KV, one thread) with `-sm split` over the `rpc`
    endpoints' devices (or the local CPU): (tokens, seconds, output), tokens None when it
    failed. Compare tokens with tg_run(args) (local)."""
    import json  # noqa: PLC0415
    cmd = [args.tg_run, "-m", args.model, "-p", "Once upon a time", "-n", str(n), "--temp", "0",
           "--kv-type", "f32", "-t", "1", "--json", "-sm", split]
    cmd += (["--rpc", ",".join(rpc)] if rpc else []) + list(extra)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=local_env(), timeout=timeout)
    dt = time.time() - t0
    if p.returncode != 0:
        return None, dt, p.stderr
    try:
        return json.loads(p.stdout)["tokens"], dt, p.stderr
    except (ValueError, KeyError):
        return None, dt, p.stdout[-2000:] + p.stderr


# The configurations issue 37 names for the honest run beside an attack: one device (the
# attacked server's), and -sm layer and -sm tensor over two servers (the attacked one and a
# partner; the attacked one second, so that it receives the layer boundary's push).
HONEST_CONFIGS = ("single", "layer", "tensor")
# 128 tokens: long enough (0.15 to 0.8 s here) that a run's time is mostly its work, not the
# start of a process.
HONEST_TOKENS = 128
# Added to twice the calm time: what the start of one tg-run process varies by on a shared
# 2-core machine (measured: up to ~0.2 s between calm runs of the same configuration).
HONEST_SLACK_S = 0.3


class Honest:
    """An honest tg-run beside an attack, in each of HONEST_CONFIGS, against the local run's
    tokens. calm(f) runs each without the attack (call it before the attack and again after
    the attacker left: the limit is judged against the slower, as the machine's load drifts);
    beside(f, what) runs each while the attack holds; check(f) asserts that every run gave the
    local tokens and every run beside took at most 2x the slower calm run (+HONEST_SLACK_S).
    `partner` None: only "single". `token`: a --rpc-token-file for servers that want one."""

    def __init__(self, args, target, partner=None, token=None, configs=HONEST_CONFIGS,
                 n=HONEST_TOKENS):
        self.args, self.target, self.partner, self.n = args, target, partner, n
        self.extra = ["--rpc-token-file", token] if token else []
        self.configs = [c for c in configs if c == "single" or partner is not None]
        self.want, _, out = tg_run(args, n=n)
        if self.want is None:
            raise RuntimeError(f"the local run failed: {out[-1500:]}")
        self.calm_s = {c: [] for c in self.configs}
        self.beside_s = {c: [] for c in self.configs}

    def _run(self, f, config, what):
        if config == "single":
            rpc, split = [self.target.endpoint], "none"
        else:
            rpc, split = [self.partner.endpoint, self.target.endpoint], config
        tokens, took, out = tg_run(self.args, rpc=rpc, split=split, extra=self.extra, n=self.n,
                                   timeout=180)
        f.check(tokens == self.want, f"honest tg-run ({config}) {what}: not the local tokens: "
                                     f"{'failed' if tokens is None else tokens[:8]}: {out[-800:]}")
        return took

    def calm(self, f):
        for c in self.configs:
            self.calm_s[c].append(self._run(f, c, "without the attack"))

    def beside(self, f, what):
        for c in self.configs:
            took = self._run(f, c, f"beside {what}")
            self.beside_s[c].append(took)
            print(f"honest tg-run ({c}) beside {what}: {took:.2f} s")

    def check(self, f):
        for c in self.configs:
            if not self.calm_s[c] or not self.beside_s[c]:
                f(f"honest tg-run ({c}): no calm or no run beside the attack")
                continue
            calm = max(self.calm_s[c])
            limit = 2 * calm + HONEST_SLACK_S
            worst = max(self.beside_s[c])
            print(f"honest tg-run ({c}): calm {', '.join(f'{t:.2f}' for t in self.calm_s[c])} s, "
                  f"beside the attack at most {worst:.2f} s (limit {limit:.2f} s)")
            f.check(worst <= limit, f"honest tg-run ({c}) took {worst:.2f} s beside the attack, "
                                    f"more than 2x the calm {calm:.2f} s (+{HONEST_SLACK_S} s)")


def settle(f, srv, baseline, honest, leaving):
    """What every attack case checks once the attacker has gone (`leaving` says how): the
    server alive, every counter back at its baseline within RESTORE_SECONDS, and the honest
    runs, calm again, within their bound."""
    f.check(srv.proc.poll() is None, "the server died")
    f.check(baseline.restored(), f"counters not back to their baseline within "
                                 f"{RESTORE_SECONDS} s of {leaving}")
    honest.calm(f)
    honest.check(f)
