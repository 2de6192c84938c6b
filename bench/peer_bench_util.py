"""What the peer benchmarks (batched_vs_llama.py, serve_vs_llama_server.py) share: free
loopback ports, waiting for a process to listen, and the load average printed beside every
figure (the machine is shared: ratios from interleaved rounds are what count)."""
import socket
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
