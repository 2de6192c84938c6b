"""Fault-injection harness: rpc-servers in their own network namespaces, faults on demand.

    reason = faultnet.unavailable()           # None, or why namespaces cannot be used here
    with faultnet.Net(rpc_server, n=3, devices=2, cache=True) as net:
        net.endpoints                         # ["10.77.K.10:50052", ...]
        net.client_flags                      # --rpc-tls-ca/--rpc-token-file for tg-run
        net.remote_devices(i)                 # ["RPC[10.77.K.10:50052]/0", ...]
        net.link(i).netem(delay_ms=50, jitter_ms=10, loss_pct=1)   # sch_netem, else delayq.py
        net.link(i).loss(1)                   # netem, else nftables (random drop)
        net.link(i).down(); net.link(i).up()  # every packet dropped, and back
        net.link(i).clear()
        net.kill(i); net.restart(i)           # SIGKILL; a new process, same address and port
        net.stop(i); net.cont(i)              # SIGSTOP / SIGCONT
        net.readonly_cache(i)                 # the server's --cache DIR read-only from now on
        net.rss(i), net.fds(i), net.metrics(i)
        g = Generation(cmd); g.wait_output(n_chars); g.finish()   # a streaming tg-run

Topology (K: this run's number, 1..250, unique among live runs on the host):

    root netns (client) -- tgfKc/c -- [tgfK-hub: bridge br0] -- sI/eth0 -- [tgfK-sI: server I]
       10.77.K.1                                                           10.77.K.(10+I)

The bridge lives in its own namespace, so the host's firewall (e.g. Docker's FORWARD DROP
with br_netfilter) never sees the traffic; only one veth end (tgfKc) appears in the root
namespace. Server I's link is the veth sI<->eth0: faults go on both of its ends, so they hit
the client's traffic and the server-to-server (PeerCopy) traffic alike.

Each server listens on its namespace's address with TLS and a bearer token (rpc-server refuses
a non-loopback bind without both unless --insecure, and a real deployment would use both), on
the same port every time, so a restarted server is where clients and peers expect it.

Cleanup: Net.__exit__, atexit and SIGTERM/SIGINT handlers remove what a run made; a run that
died without cleaning (SIGKILL) leaves /run/tg-faults/K with its pid, and the next run sweeps
the namespaces and processes of every K whose owner is gone (also: faultnet.py --sweep).
Not thread-safe: one thread drives a Net (the soak's client threads only read endpoints).
"""
import atexit
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rpc"))
from rpc_cluster import SKIP, Server  # noqa: E402,F401  (SKIP re-exported for the tests)

STATE_DIR = "/run/tg-faults"
SUBNET = "10.77"
PORT = 50052         # every server uses it: each has its own namespace.
METRICS_PORT = 9464  # likewise.
FIRST_HOST = 10      # server I is 10.77.K.(FIRST_HOST + I); the client is 10.77.K.1.
MAX_SERVERS = 200
DELAYQ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delayq.py")
NFQUEUE_NUM = 0      # one queue per server namespace: each namespace has its own queues.


def sh(*cmd, check=True):
    """Runs a command; raises with its stderr when check and it fails."""
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def unavailable():
    """None when this host lets us make network namespaces and veth pairs; otherwise a
    sentence saying why not (the tests print it and exit SKIP)."""
    if os.geteuid() != 0:
        return "network namespaces need root (run ctest as root, or in a VM/container with CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    for tool in ["ip", "tc", "nsenter", "openssl"]:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2, util-linux, openssl)"
    name = f"tgfprobe{os.getpid()}"
    try:
        r = sh("ip", "netns", "add", name, check=False)
        if r.returncode != 0:
            return f"ip netns add is not allowed here: {r.stderr.strip()}"
        r = sh("ip", "-n", name, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
               check=False)
        if r.returncode != 0:
            return f"cannot create a veth pair: {r.stderr.strip()}"
        r = sh("ip", "-n", name, "link", "add", "name", "br0", "type", "bridge", check=False)
        if r.returncode != 0:
            return f"cannot create a bridge: {r.stderr.strip()}"
    finally:
        sh("ip", "netns", "del", name, check=False)
    return None


def nft_missing():
    """None when nftables' bridge family works (the link faults without netem); else why."""
    if shutil.which("nft") is None:
        return "nft is not installed"
    name = f"tgfprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", name)
        r = sh("ip", "netns", "exec", name, "nft", "add", "table", "bridge", "probe", check=False)
        return None if r.returncode == 0 else f"nftables bridge family: {r.stderr.strip()}"
    finally:
        sh("ip", "netns", "del", name, check=False)


def nfqueue_missing():
    """None when iptables' NFQUEUE target and nfnetlink_queue work (delayq.py's delay and
    loss, where netem is missing); else why not."""
    if shutil.which("iptables") is None:
        return "iptables is not installed"
    name = f"tgfprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", name)
        r = sh("ip", "netns", "exec", name, "iptables", "-A", "OUTPUT", "-o", "lo", "-j", "NFQUEUE",
               "--queue-num", "0", "--queue-bypass", check=False)
        if r.returncode != 0:
            return f"iptables NFQUEUE target: {r.stderr.strip()}"
        r = sh("ip", "netns", "exec", name, sys.executable, DELAYQ, "--queue", "0", "--probe",
               check=False)
        return None if r.returncode == 0 else f"nfnetlink_queue: {r.stderr.strip()[-300:]}"
    finally:
        sh("ip", "netns", "del", name, check=False)


def delay_missing():
    """None when links can be delayed here (tc netem, else delayq.py on NFQUEUE); else why."""
    netem = netem_missing()
    if netem is None:
        return None
    nfq = nfqueue_missing()
    return None if nfq is None else f"{netem}; and no NFQUEUE fallback: {nfq}"


def netem_missing():
    """None when tc's netem qdisc works (kernel sch_netem); else why not."""
    name = f"tgfprobe{os.getpid()}"
    try:
        sh("ip", "netns", "add", name)
        sh("ip", "-n", name, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb")
        r = sh("tc", "-n", name, "qdisc", "add", "dev", "va", "root", "netem", "delay", "1ms",
               check=False)
        if r.returncode != 0:
            return f"tc netem is not available (kernel module sch_netem): {r.stderr.strip()}"
        return None
    finally:
        sh("ip", "netns", "del", name, check=False)


# --- run numbers, leftovers --------------------------------------------------------------

def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _netns_names():
    r = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _remove_run(k):
    """Kills the processes in run K's namespaces and deletes them (the veths go with them)."""
    prefix = f"tgf{k}-"
    for ns in _netns_names():
        if not ns.startswith(prefix):
            continue
        pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "del", f"tgf{k}c", check=False)


def sweep():
    """Removes what runs whose owner process is gone left behind. Returns their numbers."""
    os.makedirs(STATE_DIR, exist_ok=True)
    swept = []
    owned = {}
    for entry in os.listdir(STATE_DIR):
        if entry.isdigit():
            try:
                owned[int(entry)] = int(open(os.path.join(STATE_DIR, entry)).read().split()[0])
            except (OSError, ValueError, IndexError):
                owned[int(entry)] = 0
    live_runs = {k for k, pid in owned.items() if pid and _pid_alive(pid)}
    leftovers = {int(m.group(1)) for ns in _netns_names() if (m := re.match(r"tgf(\d+)-", ns))}
    for k in sorted((leftovers | set(owned)) - live_runs):
        _remove_run(k)
        try:
            os.remove(os.path.join(STATE_DIR, str(k)))
        except FileNotFoundError:
            pass
        swept.append(k)
    return swept


def _claim_run_number():
    """Sweeps leftovers and claims a free K (its /24 unused on this host) under a lock."""
    os.makedirs(STATE_DIR, exist_ok=True)
    with open(os.path.join(STATE_DIR, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        swept = sweep()
        if swept:
            print(f"faultnet: swept leftovers of runs {swept}")
        used = sh("ip", "-4", "addr", check=False).stdout + sh("ip", "-4", "route", check=False).stdout
        for k in range(1, 251):
            if os.path.exists(os.path.join(STATE_DIR, str(k))) or f"{SUBNET}.{k}." in used:
                continue
            with open(os.path.join(STATE_DIR, str(k)), "w") as f:
                f.write(f"{os.getpid()}\n")
            return k
    raise RuntimeError(f"no free run number under {STATE_DIR}")


# --- links -------------------------------------------------------------------------------

class Link:
    """One link: the two veth ends that tc shapes (egress each, so both directions), and the
    bridge port in the hub that nftables filters when netem is missing (bridge family: it
    sees every frame to and from the port, the client's and the peers' alike). One fault at
    a time: each call replaces the last."""

    def __init__(self, tc_ends, hub, port, netem_ok, nfq_ok=False):
        self.tc_ends, self.hub, self.port, self.netem_ok = tc_ends, hub, port, netem_ok
        self.nfq_ok = nfq_ok
        self.delayq = None  # the delayq.py process while its fault is on.
        self.state = "clear"

    @staticmethod
    def _ns_args(ns):
        return ["-n", ns] if ns else []

    def _tc(self, *args):
        for ns, dev in self.tc_ends:
            sh("tc", *self._ns_args(ns), "qdisc", "replace", "dev", dev, "root", *args)

    def _table(self):
        return f"tgfault_{self.port}"

    def _nft(self, statement):
        """statement: nft applied to every frame bridged in or out of the port."""
        script = (f"table bridge {self._table()} {{\n"
                  f"  chain faults {{ type filter hook forward priority 0; policy accept;\n"
                  f"    iifname \"{self.port}\" {statement}\n"
                  f"    oifname \"{self.port}\" {statement}\n  }}\n}}\n")
        r = subprocess.run(["ip", "netns", "exec", self.hub, "nft", "-f", "-"], input=script,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nft in {self.hub}: {r.stderr.strip()}")

    def clear(self):
        for ns, dev in self.tc_ends:
            sh("tc", *self._ns_args(ns), "qdisc", "del", "dev", dev, "root", check=False)
        if self.delayq is not None:
            ns = self.tc_ends[0][0]
            for chain in ["INPUT", "OUTPUT"]:
                sh("ip", "netns", "exec", ns, "iptables", "-F", chain, check=False)
            self.delayq.terminate()
            try:
                self.delayq.wait(5)
            except subprocess.TimeoutExpired:
                self.delayq.kill()
                self.delayq.wait()
            self.delayq = None
        if shutil.which("nft"):
            sh("ip", "netns", "exec", self.hub, "nft", "delete", "table", "bridge", self._table(),
               check=False)
        self.state = "clear"

    def netem(self, delay_ms=0, jitter_ms=0, loss_pct=0.0):
        """netem on both ends: each direction gets delay_ms (+- jitter_ms, normal) and loss."""
        if not self.netem_ok:
            self._nfqueue(delay_ms, jitter_ms, loss_pct)
            return
        self.clear()
        args = ["netem"]
        if delay_ms:
            args += ["delay", f"{delay_ms}ms"]
            if jitter_ms:
                args += [f"{jitter_ms}ms", "distribution", "normal"]
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        self._tc(*args)
        self.state = " ".join(args)

    def _nfqueue(self, delay_ms, jitter_ms, loss_pct):
        """netem's delay and loss where the kernel has no netem: delayq.py in the server's
        namespace, fed every packet of its eth0 both ways by iptables NFQUEUE. The rules
        come after delayq is bound, and --queue-bypass lets packets through should it die."""
        ns, dev = self.tc_ends[0]
        if not self.nfq_ok or not ns:
            raise NetemMissing("neither tc netem (kernel sch_netem) nor iptables NFQUEUE on a "
                               "server link is available here")
        self.clear()
        args = ["--queue", str(NFQUEUE_NUM), "--delay-ms", str(delay_ms), "--jitter-ms",
                str(jitter_ms), "--loss-pct", str(loss_pct)]
        self.delayq = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, DELAYQ] + args,
                                       stdout=subprocess.PIPE, text=True)
        if self.delayq.stdout.readline().strip() != "ready":
            self.delayq.wait()
            self.delayq = None
            raise RuntimeError(f"delayq.py did not start in {ns}")
        for chain, way in [("INPUT", "-i"), ("OUTPUT", "-o")]:
            sh("ip", "netns", "exec", ns, "iptables", "-A", chain, way, dev, "-j", "NFQUEUE",
               "--queue-num", str(NFQUEUE_NUM), "--queue-bypass")
        self.state = (f"nfqueue delay {delay_ms}ms +-{jitter_ms}ms loss {loss_pct}% "
                      "(delayq.py: no netem here)")

    def loss(self, pct):
        """Random loss of pct percent each way: netem where it exists, else nftables."""
        if self.netem_ok:
            self.netem(loss_pct=pct)
            return
        self.clear()
        self._nft(f"numgen random mod 10000 < {int(round(pct * 100))} drop")
        self.state = f"nft loss {pct}%"

    def down(self):
        """Every frame dropped silently: the link 'drops to zero' while the carrier stays up,
        as when a switch or a router in between fails. netem loss 100% where it exists, else
        an nftables drop."""
        self.clear()
        if self.netem_ok:
            self._tc("netem", "loss", "100%")
            self.state = "netem loss 100%"
        else:
            self._nft("drop")
            self.state = "nft drop"

    def up(self):
        self.clear()


class NetemMissing(RuntimeError):
    pass


# --- PKI ---------------------------------------------------------------------------------

def make_pki(d, ips):
    """A CA, a server certificate for every ip, a token. EC keys: fast to make."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-days", "2", "-subj", "/CN=tensorgrid faults CA", "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
            "/CN=tensorgrid faults server", "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=" + ",".join(f"IP:{ip}" for ip in ips) + "\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem")
    with open(os.path.join(d, "token"), "w") as f:
        f.write(f"faults-token-{os.getpid()}-{time.time_ns()}\n")


# --- the namespaced cluster ----------------------------------------------------------------

_live_nets = []


def _cleanup_all():
    for net in list(_live_nets):
        net.close()


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)


class Net:
    def __init__(self, rpc_server, n=2, devices=1, threads=1, cache=False, extra=()):
        if n > MAX_SERVERS:
            raise ValueError(f"n={n} servers: at most {MAX_SERVERS}")
        self.rpc_server, self.n, self.devices, self.threads = rpc_server, n, devices, threads
        self.use_cache, self.extra = cache, list(extra)
        self.k = None
        self.servers = []
        self._ro_mounts = {}

    # -- setup / teardown --
    def __enter__(self):
        _live_nets.append(self)
        atexit.register(_cleanup_all)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(sig, _on_signal)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _setup(self):
        self.k = _claim_run_number()
        self.tmp = tempfile.mkdtemp(prefix=f"tg-faults-{self.k}-")
        self.hub = f"tgf{self.k}-hub"
        self.client_ip = f"{SUBNET}.{self.k}.1"
        self.ips = [f"{SUBNET}.{self.k}.{FIRST_HOST + i}" for i in range(self.n)]
        make_pki(self.tmp, self.ips)
        self.netem_ok = netem_missing() is None
        self.nfq_ok = not self.netem_ok and nfqueue_missing() is None
        self.delay_ok = self.netem_ok or self.nfq_ok
        # A link's loss and outage: netem, else nftables on the bridge port.
        self.link_faults_ok = self.netem_ok or nft_missing() is None
        sh("ip", "netns", "add", self.hub)
        sh("ip", "-n", self.hub, "link", "set", "lo", "up")
        sh("ip", "-n", self.hub, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        # The client's end in the root namespace.
        cdev = f"tgf{self.k}c"
        sh("ip", "link", "add", "name", cdev, "type", "veth", "peer", "name", "c", "netns", self.hub)
        sh("ip", "-n", self.hub, "link", "set", "c", "master", "br0", "up")
        sh("ip", "addr", "add", f"{self.client_ip}/24", "dev", cdev)
        sh("ip", "link", "set", cdev, "up")
        self.client_link = Link([("", cdev), (self.hub, "c")], self.hub, "c", self.netem_ok)
        self.links = []
        for i in range(self.n):
            ns = self.ns(i)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.hub, "link", "add", "name", f"s{i}", "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            sh("ip", "-n", self.hub, "link", "set", f"s{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ips[i]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            self.links.append(Link([(ns, "eth0"), (self.hub, f"s{i}")], self.hub, f"s{i}",
                                   self.netem_ok, self.nfq_ok))
        self.caches = []
        for i in range(self.n):
            cache = os.path.join(self.tmp, f"cache{i}")
            os.makedirs(cache)
            self.caches.append(cache)
            self.servers.append(self._start(i))

    def ns(self, i):
        return f"tgf{self.k}-s{i}"

    def server_flags(self, i):
        p = lambda name: os.path.join(self.tmp, name)  # noqa: E731
        # --peers: the servers reach each other on this run's /24 (the default is loopback).
        flags = ["--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                 "--auth-token-file", p("token"), "--peer-tls-ca", p("ca.pem"),
                 "--peers", f"{SUBNET}.{self.k}.0/24"]
        if self.use_cache:
            flags += ["--cache", self.caches[i]]
        return flags + self.extra

    def _start(self, i):
        return Server(self.rpc_server, self.devices, self.server_flags(i), self.tmp, i,
                      threads=self.threads, host=self.ips[i], port=PORT, metrics_port=METRICS_PORT,
                      prefix=["ip", "netns", "exec", self.ns(i)])

    def close(self):
        if self.k is None:
            return
        for link in getattr(self, "links", []):
            if link.delayq is not None:
                link.clear()
        for s in self.servers:
            if s is None:
                continue
            try:
                s.proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            s.stop()
        _remove_run(self.k)
        try:
            os.remove(os.path.join(STATE_DIR, str(self.k)))
        except FileNotFoundError:
            pass
        if getattr(self, "tmp", None):
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self in _live_nets:
            _live_nets.remove(self)
        self.k = None

    # -- what clients need --
    @property
    def endpoints(self):
        return [f"{ip}:{PORT}" for ip in self.ips]

    @property
    def client_flags(self):
        return ["--rpc-tls-ca", os.path.join(self.tmp, "ca.pem"),
                "--rpc-token-file", os.path.join(self.tmp, "token")]

    def token_file(self):
        return os.path.join(self.tmp, "token")

    def remote_devices(self, i):
        return [f"RPC[{self.endpoints[i]}]/{d}" for d in range(self.devices)]

    def link(self, i):
        return self.links[i]

    # -- process faults --
    def pid(self, i):
        return self.servers[i].proc.pid

    def alive(self, i):
        return self.servers[i].proc.poll() is None

    def kill(self, i):
        self.servers[i].proc.send_signal(signal.SIGKILL)
        self.servers[i].proc.wait()

    def stop(self, i):
        os.kill(self.pid(i), signal.SIGSTOP)

    def cont(self, i):
        os.kill(self.pid(i), signal.SIGCONT)

    def restart(self, i):
        """A fresh process on the same address, port and cache (killing the old one)."""
        if self.alive(i):
            self.cont(i)
            self.kill(i)
        self.servers[i].log.close()
        self._ro_mounts.pop(i, None)  # a new process has a new mount namespace.
        self.servers[i] = None
        self.servers[i] = self._start(i)
        return self.servers[i]

    def readonly_cache(self, i):
        """Makes server i's cache directory read-only for that process from now on: a
        read-only bind mount inside its own mount namespace (ip netns exec gave it one), so
        nothing outside changes and it goes away with the process. chmod would not do: the
        server runs as root."""
        if not self.use_cache:
            raise ValueError("Net(cache=True) gives the servers a cache")
        d = self.caches[i]
        pid = str(self.pid(i))
        sh("nsenter", "-t", pid, "-m", "--", "mount", "--bind", d, d)
        sh("nsenter", "-t", pid, "-m", "--", "mount", "-o", "remount,bind,ro", d)
        self._ro_mounts[i] = d

    def writable_cache(self, i):
        """Undoes readonly_cache. Lazily: a cache file the server has open at that moment
        (a blob it is reading) would make a plain umount fail with "target is busy"; the
        file keeps the read-only mount until it is closed, every later open sees the
        writable directory."""
        d = self._ro_mounts.pop(i)
        sh("nsenter", "-t", str(self.pid(i)), "-m", "--", "umount", "--lazy", d)

    # -- observations --
    def metrics(self, i, timeout=10):
        return self.servers[i].metrics(timeout)

    def _status(self, i, field):
        """A number from server i's /proc/PID/status (kB fields in bytes)."""
        with open(f"/proc/{self.pid(i)}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[2:] == ["kB"] else 1)
        return 0

    def rss(self, i):
        """Resident bytes of server i (VmRSS)."""
        return self._status(i, "VmRSS")

    def rss_anon(self, i):
        """Anonymous resident bytes of server i (RssAnon: heap, stacks; what a leak grows).
        VmRSS also counts file pages (the binary, libraries), which come and go with the
        host's page cache."""
        return self._status(i, "RssAnon")

    def thread_count(self, i):
        return self._status(i, "Threads")

    def fds(self, i):
        return len(os.listdir(f"/proc/{self.pid(i)}/fd"))

    def peer_sockets(self, i):
        """TCP sockets of server i whose other end is another server: the peer channels of
        PeerCopy, either way. Their number follows which peers pulled or were pulled from
        lately and whether a killed peer's connection has timed out yet (0..2 per peer)."""
        r = subprocess.run(["ip", "netns", "exec", self.ns(i), "ss", "-tanpH"],
                           capture_output=True, text=True)
        others = {ip for j, ip in enumerate(self.ips) if j != i}
        n = 0
        for line in r.stdout.splitlines():
            f = line.split()
            if len(f) >= 6 and f"pid={self.pid(i)}," in line:
                remote = f[4].rsplit(":", 1)[0].replace("[::ffff:", "").rstrip("]")
                n += remote in others
        return n

    def heap(self, i, timeout=30):
        """glibc's own account of server i's heap: (arenas, bytes the arenas and mmapped
        chunks hold from the system, bytes of them in use), from malloc_stats() called in
        the process by gdb (which stops it for a moment; it prints to the server's log).
        None where gdb is missing or the call fails. In use is what live objects hold, so a
        leak grows it; system minus in use is free memory the allocator keeps (fragmentation)."""
        if shutil.which("gdb") is None:
            return None
        path = self.servers[i].log_path
        self.servers[i].log.flush()
        start = os.path.getsize(path)
        try:
            subprocess.run(["gdb", "-p", str(self.pid(i)), "-batch", "-ex",
                            "call (void)malloc_stats()"], capture_output=True, timeout=timeout)
        except (subprocess.TimeoutExpired, OSError):
            return None
        with open(path, errors="replace") as f:
            f.seek(start)
            text = f.read()
        m = re.search(r"Total \(incl. mmap\):\s*system bytes\s*=\s*(\d+)\s*in use bytes\s*=\s*(\d+)",
                      text)
        if not m:
            return None
        return len(re.findall(r"^Arena \d+:", text, re.M)), int(m.group(1)), int(m.group(2))

    def log(self, i):
        return self.servers[i].read_log()

    def log_size(self, i):
        return os.path.getsize(self.servers[i].log_path)

    def wait_log(self, i, text, timeout, since=0):
        """Seconds until server i's log (from byte `since`) holds text; None at timeout."""
        start = time.time()
        while True:
            self.servers[i].log.flush()
            with open(self.servers[i].log_path, errors="replace") as f:
                f.seek(since)
                if text in f.read():
                    return time.time() - start
            if time.time() - start >= timeout:
                return None
            time.sleep(0.05)


# --- clients -------------------------------------------------------------------------------

def cannot_run(model):
    """A reason to skip (printed) when the model is missing or namespaces are not allowed
    here; None when the fault tests can run."""
    if not os.path.exists(model):
        reason = f"model {model} not found"
    else:
        reason = unavailable()
    if reason:
        print(f"skipped: {reason}")
    return reason


def client_env():
    """A client run's environment: one local CPU device whatever the caller set."""
    return {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}


class Generation:
    """A tg-run (or any client) started now, its stdout and stderr read as they come, so a
    test can act at a point of the output (token k: the local run's text of k tokens) and
    time how long the client takes to notice a fault."""

    def __init__(self, cmd, env=None):
        self.cmd = cmd
        self.start = time.time()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env or client_env())
        self.out, self.err = bytearray(), bytearray()
        self._cv = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True)]
        for t in self._readers:
            t.start()
        self.end = None

    def _read(self, pipe, into):
        while True:
            chunk = os.read(pipe.fileno(), 65536)
            with self._cv:
                if not chunk:
                    self._cv.notify_all()
                    return
                into += chunk
                self._cv.notify_all()

    def wait_output(self, n_chars, timeout):
        """True once stdout holds n_chars bytes; False at timeout or when the client ended."""
        deadline = time.time() + timeout
        with self._cv:
            while len(self.out) < n_chars:
                left = deadline - time.time()
                if left <= 0 or self.proc.poll() is not None:
                    return len(self.out) >= n_chars
                self._cv.wait(min(left, 0.05))
        return True

    def finish(self, timeout):
        """Waits up to timeout s; kills a client still running then. Returns (rc or None
        when killed, seconds from start to exit)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.end = time.time()
        for t in self._readers:
            t.join(5)
        return rc, self.end - self.start

    @property
    def stdout(self):
        return self.out.decode(errors="replace")

    @property
    def stderr(self):
        return self.err.decode(errors="replace")

    def error_line(self):
        """The client's last stderr line that is not progress noise."""
        lines = [l for l in self.stderr.splitlines()
                 if l.strip() and not l.startswith("upload ") and "CUDA unavailable" not in l]
        return lines[-1] if lines else ""


def tg_run_cmd(tg_run, model, n, extra=(), json_out=True):
    """The greedy tg-run command every fault test runs (f32 KV cache: logits comparable).
    model None: tg-run's synthetic demo model; n None: give -n in extra."""
    cmd = [tg_run] + (["-m", model] if model else []) + (["-n", str(n)] if n else [])
    cmd += ["--temp", "0", "--kv-type", "f32", "-t", "1"]
    return cmd + (["--json"] if json_out else []) + list(extra)


def local_tokens(tg_run, model, n, extra=()):
    """The local -sm none run's greedy tokens and text: the reference of every fault test."""
    r = subprocess.run(tg_run_cmd(tg_run, model, n, ["-sm", "none"] + list(extra)),
                       capture_output=True, text=True, env=client_env(), timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"local tg-run failed: {r.stderr[-1500:]}")
    out = json.loads(r.stdout)
    return out["tokens"], out["text"]


if __name__ == "__main__":
    if sys.argv[1:] == ["--sweep"]:
        print(f"swept runs: {sweep()}")
    elif sys.argv[1:] == ["--check"]:
        print(unavailable() or "namespaces: ok", "|", netem_missing() or "netem: ok", "|",
              nfqueue_missing() or "NFQUEUE (delayq.py): ok")
    else:
        print("usage: faultnet.py --sweep | --check")
