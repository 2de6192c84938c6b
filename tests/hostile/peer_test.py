#!/usr/bin/env python3
"""Hostile peer traffic: the server-to-server mailboxes and the peer calls' authentication.

--case push_flood    two servers with a token and --session-mem-limit 64M; an attacker opens a
                     session on server B, grants itself a buffer and floods B's push mailbox
                     with 64 PeerDelivers of 8 MiB (a raw client with the token). The pieces
                     are charged to the attacker's own session: most are refused
                     RESOURCE_EXHAUSTED naming the numbers, tg_peer_mailbox_bytes stays within
                     its limit and B's RSS within budget. An honest tg-run -sm layer over both
                     servers (their layer boundary is a server-to-server push) meanwhile gives
                     the local run's tokens, within 2x the time of a run without the attack.
                     When the attacker's session closes, the mailbox is empty within 5 s.
--case reduce_flood  the same with 128 PeerReduces of 4 MiB (the all-reduce mailbox) and an
                     honest tg-run -sm tensor over both servers (its partial sums are
                     all-reduced server to server): the right tokens, no hang.
--case peer_auth     a server with a token refuses PeerDeliver, PeerReduce, PeerReduceStream and
                     PeerCopy without it (UNAUTHENTICATED); one with --peers 10.9.9.9 refuses
                     them from 127.0.0.1 even with the token (PERMISSION_DENIED); two servers
                     sharing a token still serve tg-run -sm layer and -sm tensor (the peer
                     calls between them carry the token).

Each case fails on a server whose peer mailboxes are shared and uncharged or whose peer calls
need no token.
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import MIB, Failures, proc_stats, start_server, tg_run, wait_for  # noqa: E402

SESSION_LIMIT = 64 * MIB
# What the server may grow by while the attacker's pieces are held: its session's limit, and
# room for gRPC's buffers of the messages in flight.
RSS_SLACK = 160 * MIB
DRAIN_SECONDS = 5
HONEST_TOKENS = 24


def token_file(workdir):
    path = os.path.join(workdir, "token")
    with open(path, "w") as f:
        f.write(f"peer-test-{os.getpid()}-{time.time_ns()}\n")
    return path


def read_token(path):
    return open(path).read().strip()


def code_of(e):
    return e.code().name if hasattr(e, "code") else type(e).__name__


def mailbox_bytes(server):
    return server.metrics().get("tg_peer_mailbox_bytes", 0.0)


def peer_bytes(servers):
    return sum(s.metrics().get("tg_peer_copy_bytes_total", 0.0) for s in servers)


def honest(args, servers, split, token):
    """tg-run over the servers' devices: (tokens, seconds, output)."""
    return tg_run(args, rpc=[s.endpoint for s in servers], split=split, n=HONEST_TOKENS,
                  extra=["--rpc-token-file", token], timeout=180)


def attacker_grant(session):
    code, msg, handle = session.alloc(0, 64)
    if code != 0:
        raise RuntimeError(f"attacker alloc: {code} {msg}")
    code, msg, grant = session.grant(handle)
    if code != 0:
        raise RuntimeError(f"attacker grant: {code} {msg}")
    return grant


def flood(client, grant, kind):
    """The attack's calls on `client` (with the token): {code name: count} and one refusal's
    message."""
    pb = hostile.pb
    codes, refusal = {}, ""
    if kind == "push":
        calls, size = 64, 8 * MIB
    else:
        calls, size = 128, 4 * MIB
    data = b"\xa5" * size
    for i in range(calls):
        try:
            if kind == "push":
                req = pb.PeerDeliverRequest(pieces=[pb.DeliveredPiece(grant=grant, tag=i + 1,
                                                                      data=data)])
                client.stub.PeerDeliver(req, metadata=client.metadata, timeout=30)
            else:
                req = pb.PeerReduceRequest(grant=grant, collective=1000 + i, step=0, part=0,
                                           from_rank=1, data=data)
                client.stub.PeerReduce(req, metadata=client.metadata, timeout=30)
            codes["OK"] = codes.get("OK", 0) + 1
        except hostile.grpc.RpcError as e:
            codes[code_of(e)] = codes.get(code_of(e), 0) + 1
            refusal = refusal or e.details()
    return codes, refusal


def check_flood(args, fail, kind, split):
    with tempfile.TemporaryDirectory(prefix=f"tg-peer-{kind}-") as workdir:
        token = token_file(workdir)
        flags = ["--auth-token-file", token, "--session-mem-limit", str(SESSION_LIMIT)]
        servers = [start_server(args, workdir, i, extra=flags) for i in range(2)]
        try:
            want, _, out = tg_run(args, n=HONEST_TOKENS)
            if want is None:
                fail(f"the local run failed: {out[-1500:]}")
                return
            got, calm, out = honest(args, servers, split, token)
            if got != want:
                fail(f"-sm {split} without the attack: {got} != {want}: {out[-1500:]}")
                return
            before_peer = peer_bytes(servers)
            b = servers[1]
            rss0 = proc_stats(b.proc.pid)["rss"]
            with hostile.Client(b.endpoint, read_token(token)) as client, client.session() as s:
                grant = attacker_grant(s)
                codes, refusal = flood(client, grant, kind)
                held = mailbox_bytes(b)
                rss = proc_stats(b.proc.pid)["rss"]
                print(f"{kind} flood: {codes}; mailbox {held / MIB:.0f} MiB; B's RSS "
                      f"{rss0 / MIB:.0f} -> {rss / MIB:.0f} MiB; refusal: {refusal}")
                if codes.get("RESOURCE_EXHAUSTED", 0) == 0:
                    fail(f"the {kind} flood was never refused: {codes}")
                elif not all(w in refusal for w in ("peer_", "bytes", str(SESSION_LIMIT))):
                    fail(f"the refusal does not name the numbers and the limit: {refusal}")
                if not 0 < held <= SESSION_LIMIT:
                    fail(f"tg_peer_mailbox_bytes during the attack: {held} (0 < x <= "
                         f"{SESSION_LIMIT})")
                if rss - rss0 > SESSION_LIMIT + RSS_SLACK:
                    fail(f"B's RSS grew by {(rss - rss0) / MIB:.0f} MiB under the attack")
                # The attack goes on beside the honest run.
                more = threading.Thread(target=flood, args=(client, grant, kind), daemon=True)
                more.start()
                got, dt, out = honest(args, servers, split, token)
                more.join(120)
                print(f"-sm {split}: {calm:.1f} s alone, {dt:.1f} s under the attack")
                if got != want:
                    fail(f"-sm {split} under the attack: {got} != {want}: {out[-1500:]}")
                elif dt > 2 * calm + 1:
                    fail(f"-sm {split} under the attack took {dt:.1f} s, more than 2x the "
                         f"{calm:.1f} s without")
                if peer_bytes(servers) <= before_peer:
                    fail(f"-sm {split} moved no bytes server to server: the test tests nothing")
            t0 = time.time()
            drained = wait_for(lambda: mailbox_bytes(b) == 0, DRAIN_SECONDS + 1)
            took = time.time() - t0
            if not drained or took > DRAIN_SECONDS:
                fail(f"after the attacker's session closed, tg_peer_mailbox_bytes is "
                     f"{mailbox_bytes(b)} after {took:.1f} s")
            else:
                print(f"mailbox empty {took:.1f} s after the attacker's session closed")
            for s_ in servers:
                if s_.proc.poll() is not None:
                    fail(f"{s_.endpoint} died: {s_.read_log()}")
        finally:
            for s_ in servers:
                s_.stop()


def expect_code(fail, what, want, call):
    try:
        call()
        fail(f"{what}: accepted, want {want}")
    except hostile.grpc.RpcError as e:
        if code_of(e) != want:
            fail(f"{what}: {code_of(e)} {e.details()}, want {want}")
        else:
            print(f"{what}: {want} ({e.details()})")


def peer_calls(client, grant, metadata):
    """Each peer call once, as (name, thunk)."""
    pb = hostile.pb

    def copy():
        for _ in client.stub.PeerCopy(pb.PeerCopyRequest(grant=grant, size=4), metadata=metadata,
                                      timeout=10):
            pass

    def stream():
        piece = pb.PeerReduceRequest(grant=grant, collective=7, data=b"\0" * 16, from_rank=1)
        for _ in client.stub.PeerReduceStream(iter([piece]), metadata=metadata, timeout=10):
            pass

    return [
        ("PeerDeliver", lambda: client.stub.PeerDeliver(
            pb.PeerDeliverRequest(pieces=[pb.DeliveredPiece(grant=grant, tag=1, data=b"abcd")]),
            metadata=metadata, timeout=10)),
        ("PeerReduce", lambda: client.stub.PeerReduce(
            pb.PeerReduceRequest(grant=grant, collective=9, data=b"\0" * 16, from_rank=1),
            metadata=metadata, timeout=10)),
        ("PeerReduceStream", stream),
        ("PeerCopy", copy),
    ]


def check_peer_auth(args, fail):
    with tempfile.TemporaryDirectory(prefix="tg-peer-auth-") as workdir:
        token = token_file(workdir)
        secret = read_token(token)
        servers = [start_server(args, workdir, i, extra=["--auth-token-file", token])
                   for i in range(2)]
        fenced = start_server(args, workdir, 2,
                              extra=["--auth-token-file", token, "--peers", "10.9.9.9"])
        try:
            for server, label in [(servers[0], "default --peers"), (fenced, "--peers 10.9.9.9")]:
                with hostile.Client(server.endpoint, secret) as c, c.session() as s:
                    grant = attacker_grant(s)
                    for name, call in peer_calls(c, grant, []):
                        expect_code(fail, f"{label}: {name} without the token", "UNAUTHENTICATED",
                                    call)
                    wrong = [("authorization", "Bearer not-the-token")]
                    for name, call in peer_calls(c, grant, wrong)[:1]:
                        expect_code(fail, f"{label}: {name} with a wrong token",
                                    "PERMISSION_DENIED", call)
                    if server is fenced:
                        for name, call in peer_calls(c, grant, c.metadata):
                            expect_code(fail, f"{label}: {name} with the token from 127.0.0.1",
                                        "PERMISSION_DENIED", call)
                    else:
                        try:  # the token from an allowed address: taken.
                            peer_calls(c, grant, c.metadata)[0][1]()
                        except hostile.grpc.RpcError as e:
                            fail(f"{label}: PeerDeliver with the token: {code_of(e)} "
                                 f"{e.details()}")
            if "peer call refused" not in fenced.read_log():
                fail("the refusals are not logged")
            want, _, out = tg_run(args, n=HONEST_TOKENS)
            if want is None:
                fail(f"the local run failed: {out[-1500:]}")
                return
            for split in ("layer", "tensor"):
                before = peer_bytes(servers)
                got, dt, out = honest(args, servers, split, token)
                if got != want:
                    fail(f"-sm {split} over two servers sharing a token: {got} != {want}: "
                         f"{out[-1500:]}")
                elif peer_bytes(servers) <= before:
                    fail(f"-sm {split}: no bytes went server to server")
                else:
                    print(f"-sm {split} over two servers sharing a token: the local tokens in "
                          f"{dt:.1f} s")
        finally:
            for s_ in servers + [fenced]:
                s_.stop()


def main():
    args = hostile.parse_args([("--case", {"required": True,
                                            "choices": ["push_flood", "reduce_flood",
                                                        "peer_auth"]})])
    fail = Failures()
    if args.case == "push_flood":
        check_flood(args, fail, "push", "layer")
    elif args.case == "reduce_flood":
        check_flood(args, fail, "reduce", "tensor")
    else:
        check_peer_auth(args, fail)
    if fail.count == 0:
        print(f"PASS: {args.case}")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
