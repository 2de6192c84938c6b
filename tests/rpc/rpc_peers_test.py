#!/usr/bin/env python3
"""Outbound peer connections are a privilege: rpc-server --peers.

  rpc_peers_test.py --rpc-server PATH --client PATH(rpc_peer_pull_client)

A PeerPull makes a server connect where its client says. Checks, with real rpc-server
processes and plain TCP listeners on loopback:
- a server with --peers 127.0.0.1:PORT_OF_A pulls from A (the bytes arrive), and a PeerPull
  at a listener's port (by address or as localhost) gets PERMISSION_DENIED while the
  listener sees no connection;
- a server with the default list refuses a documentation address (203.0.113.9) at once, and
  a closed loopback port and a listener that is not a gRPC server come back as exactly
  "peer unreachable: ENDPOINT", nothing of the transport's error;
- a malformed --peers stops rpc-server with a message naming the entry.
Exit 0 pass, 1 fail.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import Server, free_port  # noqa: E402

# How long a listener is watched for a connection that must not come.
QUIET_S = 1.5
# Words of gRPC's and the OS's connection errors that must not reach the client.
TRANSPORT_WORDS = ["refused", "reset", "socket", "connect", "http", "preface", "handshake",
                   "tcp", "ssl", "errno"]


class Listener:
    """A plain TCP port that counts connections and answers each with an HTTP/1 error."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.connections += 1
            try:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                pass
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def pull(client, server, peer, *flags):
    """(code, message, data line or None, seconds) of one PeerPull through rpc_peer_pull_client."""
    t = time.time()
    p = subprocess.run([client, server, peer] + list(flags), capture_output=True, text=True,
                       timeout=60)
    took = time.time() - t
    if p.returncode not in (0, 1) or not p.stdout:
        return ("NO_ANSWER", p.stderr.strip(), None, took)
    lines = p.stdout.strip().splitlines()
    code, _, message = lines[0].partition(": ")
    # The client names the server it talked to ("rpc-server HOST:PORT: "); the rest is the
    # server's own message.
    if message.startswith(f"rpc-server {server}: "):
        message = message[len(f"rpc-server {server}: "):]
    return (code, message, lines[1] if len(lines) > 1 else None, took)


class Checker:
    def __init__(self):
        self.ok = True

    def check(self, cond, what):
        print(f"{'ok  ' if cond else 'FAIL'} {what}")
        self.ok &= bool(cond)


def check_unlisted(client, c, server, listener, label, hint, peers):
    """A pull (or collective) from `server` naming each of `peers`, none of them in its
    --peers, is PERMISSION_DENIED naming the peer (and `hint`, when given), and the listener
    behind them sees no connection."""
    for peer in peers:
        code, msg, _, _ = pull(client, server.endpoint, peer)
        c.check(code == "PERMISSION_DENIED" and peer in msg and (hint is None or hint in msg),
                f"{label} {peer}: {code}: {msg}")
    time.sleep(QUIET_S)
    c.check(listener.connections == 0,
            f"the unlisted listener saw {listener.connections} connections")
    if not c.ok:
        print(f"--- server log:\n{server.read_log()}")


def check_listed(a, c, workdir):
    """--peers 127.0.0.1:PORT_OF_A: A is reachable, a listener is not."""
    listener = Listener()
    src = Server(a.rpc_server, 1, [], workdir, 0)
    dst = Server(a.rpc_server, 1, ["--peers", f"127.0.0.1:{src.port}"], workdir, 1)
    try:
        code, msg, data, _ = pull(a.client, dst.endpoint, src.endpoint, "--grant-from",
                                  src.endpoint)
        c.check(code == "OK" and data == "data: same",
                f"listed peer {src.endpoint}: {code} {msg} {data}")
        check_unlisted(a.client, c, dst, listener, "unlisted", "--peers",
                       [f"127.0.0.1:{listener.port}", f"localhost:{listener.port}",
                        f"[::1]:{listener.port}"])
    finally:
        for s in (src, dst):
            s.stop()
        listener.close()


def check_default(a, c, workdir):
    """Default list: loopback only; failures say only 'peer unreachable'."""
    listener = Listener()
    server = Server(a.rpc_server, 1, [], workdir, 2)
    try:
        code, msg, _, took = pull(a.client, server.endpoint, "203.0.113.9:50052")
        c.check(code == "PERMISSION_DENIED" and took < 5,
                f"default list, 203.0.113.9:50052: {code} in {took:.1f} s: {msg}")
        closed = f"127.0.0.1:{free_port()}"
        for peer, label in [(closed, "closed loopback port"),
                             (f"127.0.0.1:{listener.port}", "plain TCP listener")]:
            code, msg, _, _ = pull(a.client, server.endpoint, peer)
            clean = not any(w in msg.lower() for w in TRANSPORT_WORDS)
            c.check(code == "UNAVAILABLE" and msg == f"peer unreachable: {peer}" and clean,
                    f"{label} {peer}: {code}: {msg}")
        c.check(listener.connections > 0,
                f"the allowed listener was reached ({listener.connections} connections)")
        log = server.read_log()
        c.check("peer unreachable" in log, "the server logs the transport's details")
    finally:
        server.stop()
        listener.close()


def check_bad_flags(a, c):
    for flags, words in [(["--peers", "10.0.0.0/40"], "--peers entry '10.0.0.0/40'"),
                         (["--peers", "db,,cache"], "empty entry"),
                         (["--peer-tls-cert", "x.pem", "--peer-tls-key", "x.key"],
                          "--peer-tls-ca")]:
        r = subprocess.run([a.rpc_server, "-p", "0"] + flags, capture_output=True, text=True,
                           timeout=30)
        c.check(r.returncode != 0 and words in r.stderr,
                f"rpc-server {' '.join(flags)}: exit {r.returncode}: {r.stderr.strip()[-200:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rpc-server", required=True)
    ap.add_argument("--client", required=True)
    a = ap.parse_args()
    c = Checker()
    with tempfile.TemporaryDirectory(prefix="tg-peers-") as workdir:
        check_listed(a, c, workdir)
        check_default(a, c, workdir)
    check_bad_flags(a, c)
    return 0 if c.ok else 1


if __name__ == "__main__":
    sys.exit(main())
