#!/usr/bin/env python3
"""-sm tensor over rpc-servers: the all-reduce runs among the servers, not through the client.

  rpc_allreduce_test.py --tg-run PATH --rpc-server PATH --model MODEL --client PATH
                        (rpc_allreduce_client) --case tokens|kill|peers|mtls|netns

tokens  2 servers x 2 devices (TG_CPU_DEVICES=2, -d CPU0,CPU1): -sm tensor gives local
        -sm none's 64 greedy tokens and F32-KV top-5 logits within 1e-4; the client's
        all-reduce bytes (tg-run --json "rpc") are 0 while the servers ran the all-reduces and
        exchanged bytes (tg_peer_copy_bytes_total); TG_RPC_ALLREDUCE=client (staged through the
        client) gives the same tokens with its bytes counted, so the count can fail.
three   3 servers x 1 device, where the decode all-reduces take one direct step: -sm tensor
        gives local -sm none's tokens and logits, on the servers, each server taking its
        peers' bytes.
kill    a server killed (SIGKILL) while the all-reduces run every step: tg-run exits non-zero
        within 5 s, its last line naming the killed server.
peers   an all-reduce naming a listener outside --peers as the other server: PERMISSION_DENIED
        naming it, and the listener sees no connection.
mtls    servers that require client certificates: with --peer-tls-cert/--peer-tls-key of
        their CA -sm tensor gives the local tokens through the servers; without a peer
        certificate, or with one of another CA, the peers refuse each other and tg-run fails
        with "peer unreachable".
netns   tokens and 0 client bytes with each server in its own network namespace and address
        (tests/faults/faultnet.py); skipped with the reason where namespaces are not allowed.
Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "faults"))
from rpc_cluster import (SKIP, Cluster, Server, exit_after, local_env,  # noqa: E402
                         model_missing, model_test_args, openssl_missing)
from rpc_peers_test import Checker, Listener, check_unlisted  # noqa: E402
from rpc_split_test import compare, tg_run  # noqa: E402

N_TOKENS = 64
TOL = 1e-4


def tensor_run(a, endpoints, devices, extra=(), env=None):
    args = ["--rpc", ",".join(endpoints), "-sm", "tensor", "--device", ",".join(devices)]
    return tg_run(a.tg_run, a.model, N_TOKENS, args + list(extra), env)


def check_on_servers(c, out, label):
    rpc = out["rpc"]
    c.check(rpc["allreduce_client_bytes"] == 0 and rpc["allreduce_on_servers"] > 0,
            f"{label}: {rpc['allreduce_on_servers']} all-reduces on the servers, "
            f"{rpc['allreduce_client_bytes']} bytes through the client")


def case_tokens(a, c, base):
    env = local_env()
    with Cluster(a.rpc_server, n=2, devices=2) as cl:
        devices = cl.remote_devices(0) + cl.remote_devices(1)
        out = tensor_run(a, cl.endpoints, devices, env=env)
        c.check(out is not None and compare(base, out, TOL, "servers' all-reduce"),
                "-sm tensor over 2 servers x 2 devices matches -sm none")
        if out is not None:
            check_on_servers(c, out, "servers' all-reduce")
        peer = sum(cl.metrics(i).get("tg_peer_copy_bytes_total", 0) for i in range(2))
        c.check(peer > 0, f"bytes between the servers: {peer:.0f}")
        staged = tensor_run(a, cl.endpoints, devices, env=dict(env, TG_RPC_ALLREDUCE="client"))
        c.check(staged is not None and compare(base, staged, TOL, "staged through the client"),
                "TG_RPC_ALLREDUCE=client matches -sm none")
        if staged is not None:
            rpc = staged["rpc"]
            c.check(rpc["allreduce_client_bytes"] > 0 and rpc["allreduce_on_servers"] == 0,
                    f"staged: {rpc['allreduce_staged']} all-reduces, "
                    f"{rpc['allreduce_client_bytes']} bytes through the client")
        if not c.ok:
            for s in cl.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")


def case_three(a, c, base):
    with Cluster(a.rpc_server, n=3, devices=1) as cl:
        devices = [d for i in range(3) for d in cl.remote_devices(i)]
        out = tensor_run(a, cl.endpoints, devices, env=local_env())
        c.check(out is not None and compare(base, out, TOL, "three servers' direct all-reduce"),
                "-sm tensor over 3 servers matches -sm none")
        if out is not None:
            check_on_servers(c, out, "three servers' all-reduce")
        peer = [cl.metrics(i).get("tg_peer_copy_bytes_total", 0) for i in range(3)]
        c.check(all(p > 0 for p in peer), f"bytes into each server from its peers: {peer}")
        if not c.ok:
            for s in cl.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")


def case_kill(a, c):
    env = local_env()
    with Cluster(a.rpc_server, n=2, devices=2) as cl:
        devices = cl.remote_devices(0) + cl.remote_devices(1)
        cmd = [a.tg_run, "-m", a.model, "-n", "4000", "-c", "4096", "--temp", "0", "-t", "1",
               "--rpc", ",".join(cl.endpoints), "-sm", "tensor", "--device", ",".join(devices)]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        first = p.stdout.read(24)  # generation (an all-reduce per layer and step) runs.
        if p.poll() is not None:
            c.check(False, f"tg-run ended before the kill: {p.stderr.read().decode()[-1500:]}")
            return
        ended = exit_after(p, lambda: cl.kill(1))
        if ended is None:
            c.check(False, "tg-run hangs after a server died mid-collective")
            return
        err, took = ended
        lines = [l for l in err.splitlines() if l.strip()]
        c.check(p.returncode != 0 and took <= 5,
                f"tg-run exited {p.returncode} {took:.2f} s after the kill (output {first!r})")
        c.check(lines and cl.endpoints[1] in lines[-1], f"last line names the killed server: "
                f"{lines[-1:]!r}")


def case_peers(a, c, workdir):
    listener = Listener()
    other = f"127.0.0.1:{listener.port + 1 if listener.port < 65535 else 1}"
    server = Server(a.rpc_server, 1, ["--peers", other], workdir, 0)
    try:
        check_unlisted(a.client, c, server, listener, "all-reduce naming unlisted", None,
                       [f"127.0.0.1:{listener.port}", f"localhost:{listener.port}"])
    finally:
        server.stop()
        listener.close()


def case_mtls(a, c, base, workdir):
    from rpc_peer_tls_test import peer_tls_flags
    f = peer_tls_flags(workdir)
    client = f["tg_run"]
    env = local_env()
    for k, (label, peer_flags, works) in enumerate([
            ("CA-signed peer certificates", f["good"], True),
            ("no peer certificate", f["peer_ca"], False),
            ("peer certificates of another CA", f["rogue"], False)]):
        servers = []
        try:
            for i in range(2):
                servers.append(Server(a.rpc_server, 2, f["mtls"] + peer_flags, workdir,
                                      10 + 2 * k + i))
            endpoints = [s.endpoint for s in servers]
            devices = [f"RPC[{e}]/{d}" for e in endpoints for d in range(2)]
            cmd = [a.tg_run, "-m", a.model, "-n", "16", "--temp", "0", "--json", "-t", "1",
                   "--kv-type", "f32", "--rpc", ",".join(endpoints), "-sm", "tensor",
                   "--device", ",".join(devices)] + client
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
            if works:
                out = json.loads(r.stdout) if r.returncode == 0 else None
                c.check(out is not None and out["tokens"] == base["tokens"][:16],
                        f"{label}: exit {r.returncode}, tokens "
                        f"{'identical' if out and out['tokens'] == base['tokens'][:16] else 'DIFFER'}"
                        f" {r.stderr.strip()[-300:]}")
                if out is not None:
                    check_on_servers(c, out, label)
            else:
                last = (r.stderr.strip().splitlines() or [""])[-1]
                c.check(r.returncode != 0 and "peer unreachable" in last,
                        f"{label}: refused: exit {r.returncode}: {last}")
        finally:
            for s in servers:
                s.stop()


def case_netns(a, c, base):
    import faultnet
    why = faultnet.unavailable()
    if why is not None:
        print(f"skipped: {why}")
        return SKIP
    env = local_env()
    with faultnet.Net(a.rpc_server, n=2, devices=2) as net:
        devices = net.remote_devices(0) + net.remote_devices(1)
        out = tensor_run(a, net.endpoints, devices, net.client_flags, env)
        c.check(out is not None and compare(base, out, TOL, "servers in their own namespaces"),
                f"-sm tensor over {','.join(net.endpoints)} matches -sm none")
        if out is not None:
            check_on_servers(c, out, "namespaces")
        if not c.ok:
            for s in net.servers:
                print(f"--- {s.endpoint} log:\n{s.read_log()}")
    return None


def main():
    a = model_test_args([("--client", dict(required=True)),
                         ("--case", dict(required=True,
                                         choices=["tokens", "three", "kill", "peers", "mtls",
                                                  "netns"]))])
    if model_missing(a.model):
        return SKIP
    if a.case == "mtls" and openssl_missing():
        return SKIP
    c = Checker()
    base = None
    if a.case in ("tokens", "three", "mtls", "netns"):
        base = tg_run(a.tg_run, a.model, N_TOKENS, ["-sm", "none"], local_env())
        if base is None:
            return 1
    with tempfile.TemporaryDirectory(prefix="tg-allreduce-") as d:
        if a.case == "tokens":
            case_tokens(a, c, base)
        elif a.case == "three":
            case_three(a, c, base)
        elif a.case == "kill":
            case_kill(a, c)
        elif a.case == "peers":
            case_peers(a, c, d)
        elif a.case == "mtls":
            case_mtls(a, c, base, d)
        elif case_netns(a, c, base) == SKIP:
            return SKIP
    return 0 if c.ok else 1


if __name__ == "__main__":
    sys.exit(main())
