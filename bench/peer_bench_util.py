"""What the peer benchmarks (batched_vs_llama.py, serve_vs_llama_server.py) share: free
loopback ports, the processes they start and stop, waiting for a process to listen, the load
average printed beside every figure (the machine is shared: ratios from interleaved rounds
are what count), and the closing Markdown table."""
import os
import signal
import socket
import subprocess
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=60.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Procs:
    """Processes started by this script, stopped (SIGTERM, then SIGKILL) by stop()."""

    def __init__(self, log):
        self.procs = []
        self.log = log

    def start(self, argv, env=None):
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.Popen(argv, stdout=self.log, stderr=self.log, env=e,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self):
        # The HTTP server first, then its rpc-servers (llama-server still talks to them
        # while it exits).
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def print_table(header, text_columns, rows):
    """The load after the run, then a Markdown table: `header` names the columns, the first
    `text_columns` left-aligned, the rest right; each row is its cells joined by " | "."""
    print(f"\n# load after: {load()}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * text_columns + "---:|" * (len(header) - text_columns))
    for line in rows:
        print(f"| {line} |")
