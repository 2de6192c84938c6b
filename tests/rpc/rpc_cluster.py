"""Starts real rpc-server processes on loopback for the end-to-end RPC tests.

    with Cluster(rpc_server, n=2, devices=2) as c:
        c.endpoints          # ["127.0.0.1:41235", ...]
        c.metrics(0)         # {"tg_buffers": 0.0, ...} scraped from server 0's /metrics
        c.kill(0)            # SIGKILL, for the failure tests

Each server runs with TG_CPU_DEVICES=<devices> and -d CPU0,CPU1,... (by name: on a GPU host
index 0 is the first GPU), binds port 0 and reports the
port through --port-file, so tests never collide on ports.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests.


def model_test_args(extra=None):
    """The arguments every model test takes (--tg-run, --rpc-server, --model) plus `extra`,
    a list of (flag, add_argument kwargs)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--rpc-server", required=True)
    ap.add_argument("--model", required=True)
    for flag, kwargs in extra or []:
        ap.add_argument(flag, **kwargs)
    return ap.parse_args()


def model_missing(path):
    """True (after saying so) when the test model is absent: the test is skipped."""
    if os.path.exists(path):
        return False
    print(f"skipped: model {path} not found")
    return True


def openssl_missing():
    """True (after saying so) when openssl, which makes the TLS tests' keys, is not installed:
    the test is skipped."""
    if shutil.which("openssl") is not None:
        return False
    print("skipped: openssl not installed")
    return True


class Failures:
    """A test's failures: fail(what) prints "FAIL: what"; fail.check(ok, what) does so unless
    ok (and returns ok); exit_code() is 0 when there was none, else 1."""

    def __init__(self):
        self.count = 0

    def __call__(self, what):
        print(f"FAIL: {what}")
        self.count += 1

    def check(self, ok, what):
        if not ok:
            self(what)
        return ok

    def exit_code(self):
        return 1 if self.count else 0


def local_env():
    """The environment of a client run: one local CPU device whatever the caller set."""
    return {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}



def exit_after(p, kill, timeout=10):
    """Calls kill() (a server dies under a running client p), then reads p's output to its
    end: (p's stderr, seconds from the kill to its exit), or None when p still runs after
    `timeout` s (then it is killed: a hang)."""
    t0 = time.time()
    kill()
    try:
        p.stdout.read()
        err = p.stderr.read().decode()
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return None
    return err, time.time() - t0

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One rpc-server process. host, port, metrics_port and prefix serve tests/faults: a
    server bound to its network namespace's address (prefix ["ip", "netns", "exec", NS]),
    restarted on the same port and metrics port. The log is appended to across restarts."""

    def __init__(self, binary, devices, extra, workdir, index, threads=1, host="127.0.0.1",
                 port=0, metrics_port=None, prefix=()):
        self.host = host
        self.port_file = os.path.join(workdir, f"port{index}")
        self.log_path = os.path.join(workdir, f"server{index}.log")
        self.log = open(self.log_path, "a")
        # A metrics port picked here is free when picked, but a test beside this one may bind
        # it before the server does: then the server exits saying so, and another is picked.
        for attempt in range(3):
            try:
                self._start(binary, devices, extra, threads, host, port,
                            metrics_port or free_port(), prefix)
                return
            except RuntimeError as e:
                if metrics_port or attempt == 2 or "cannot serve metrics on" not in str(e):
                    raise

    def _start(self, binary, devices, extra, threads, host, port, metrics_port, prefix):
        self.metrics_port = metrics_port
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        env = dict(os.environ, TG_CPU_DEVICES=str(devices))
        cmd = list(prefix) + [binary] + ([] if host == "127.0.0.1" else ["-H", host]) + [
               "-p", str(port), "--port-file", self.port_file, "-d",
               "CPU" if devices == 1 else ",".join(f"CPU{i}" for i in range(devices)), "-t", str(threads),
               "--metrics-port", str(self.metrics_port)] + (
               # /metrics binds loopback unless told: scrapes here go to `host`.
               [] if host == "127.0.0.1" else ["--metrics-host", host]) + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-server exited {self.proc.returncode}: {self.read_log()}")
            if os.path.exists(self.port_file):
                text = open(self.port_file).read().strip()
                if text:
                    self.port = int(text)
                    self.endpoint = f"{host}:{self.port}"
                    return
            time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError(f"rpc-server did not start in 30 s: {self.read_log()}")

    def read_log(self):
        self.log.flush()
        return open(self.log_path).read()[-4000:]

    def metrics(self, timeout=10):
        """The server's Prometheus gauges and counters, summed over labels, and each labelled
        one also under its name with the labels (`tg_upload_calls_total{call="upload"}`)."""
        text = urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}/metrics",
                                      timeout=timeout).read().decode()
        values = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
            if m and not line.startswith("#"):
                values[m.group(1)] = values.get(m.group(1), 0.0) + float(m.group(3))
                if m.group(2):
                    values[m.group(1) + m.group(2)] = float(m.group(3))
        return values

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Cluster:
    def __init__(self, binary, n=2, devices=2, extra=(), workdir=None):
        self.binary, self.n, self.devices, self.extra = binary, n, devices, extra
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="tg-rpc-")
        self.workdir = workdir or self._tmp.name
        self.servers = []

    def __enter__(self):
        try:
            for i in range(self.n):
                self.servers.append(Server(self.binary, self.devices, self.extra, self.workdir, i))
        except Exception:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for s in self.servers:
            s.stop()
        if self._tmp:
            self._tmp.cleanup()

    @property
    def endpoints(self):
        return [s.endpoint for s in self.servers]

    def metrics(self, i):
        return self.servers[i].metrics()

    def kill(self, i):
        self.servers[i].proc.send_signal(signal.SIGKILL)
        self.servers[i].proc.wait()

    def remote_devices(self, i):
        return [f"RPC[{self.servers[i].endpoint}]/{d}" for d in range(self.devices)]
