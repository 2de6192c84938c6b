#!/usr/bin/env python3
"""Hostile peer traffic: the server-to-server mailboxes and the peer calls' authentication.

--case push_flood    two servers with a token and --session-mem-limit 64M; an attacker opens a
                     session on server B, grants itself a buffer and floods B's push mailbox
                     with 64 PeerDelivers of 8 MiB (a raw client with the token). The pieces
                     are charged to the attacker's own session: most are refused
                     RESOURCE_EXHAUSTED naming the numbers, tg_peer_mailbox_bytes stays within
                     its limit and B's RSS within budget. An honest tg-run beside gives the local
                     run's tokens (see below).
                     When the attacker's session closes, every counter of both servers is
                     back to its baseline within 5 s. Then a session on A pushes pieces
                     (PeerPush) into a grant of a session on B that never awaits them and
                     ends while B's session stays: B drops them within 5 s (the sender's end
                     notice), while an honest run beside gets its own pieces.
--case reduce_flood  the same with 128 PeerReduces of 4 MiB (the all-reduce mailbox). Then a
                     session on A runs an all-reduce with B (AllReduce, A sending its pieces
                     into a grant of a session on B that never takes part) and ends while B's
                     session stays: B drops those pieces within 5 s (the same end notice,
                     which covers the all-reduce mailbox), while an honest run beside gets
                     its own pieces.
--case peer_auth     a server with a token refuses PeerDeliver, PeerReduce, PeerReduceStream and
                     PeerCopy without it (UNAUTHENTICATED); one with --peers 10.9.9.9 refuses
                     them from 127.0.0.1 even with the token (PERMISSION_DENIED); two servers
                     sharing a token still serve tg-run -sm layer and -sm tensor (the peer
                     calls between them carry the token).

Beside each attack an honest tg-run in the three configurations (hostile.Honest: one device,
-sm layer and -sm tensor over both servers: its layer boundary is a push into B's mailbox,
its partial sums go through the all-reduce mailbox): the local tokens, within 2x the slower
calm run.

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
from hostile import MIB, Failures, proc_stats, start_server  # noqa: E402

SESSION_LIMIT = 64 * MIB
# What the server may grow by while the attacker's pieces are held: its session's limit, and
# room for gRPC's buffers of the messages in flight.
RSS_SLACK = 160 * MIB
DRAIN_SECONDS = 5


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


def attacker_grant(session):
    code, msg, handle = session.alloc(0, 64)
    if code != 0:
        raise RuntimeError(f"attacker alloc: {code} {msg}")
    code, msg, grant = session.grant(handle)
    if code != 0:
        raise RuntimeError(f"attacker grant: {code} {msg}")
    return grant


# The pace of the flood that goes on beside the honest runs: the attacker's client shares
# this machine's 2 cores with the server and the honest client, so an unpaced flood (Python
# building 8 MiB messages as fast as it can) would measure the machine, not the server. 20
# pieces a second (80 to 160 MiB/s, all refused) keeps the attacker's share full and the
# server parsing and refusing.
FLOOD_PACE_S = 0.05


def flood(client, grant, kind, stop=None):
    """The attack's calls on `client` (with the token): {code name: count} and one refusal's
    message. With `stop` (an Event), the calls go on, FLOOD_PACE_S apart, until it is set."""
    pb = hostile.pb
    codes, refusal = {}, ""
    if kind == "push":
        calls, size = 64, 8 * MIB
    else:
        calls, size = 128, 4 * MIB
    data = b"\xa5" * size
    i = 0
    while i < calls or (stop is not None and not stop.is_set()):
        i += 1
        if stop is not None:
            time.sleep(FLOOD_PACE_S)
        try:
            if kind == "push":
                req = pb.PeerDeliverRequest(pieces=[pb.DeliveredPiece(grant=grant, tag=i,
                                                                      data=data)])
                client.stub.PeerDeliver(req, metadata=client.metadata, timeout=30)
            else:
                req = pb.PeerReduceRequest(grant=grant, collective=1000 + i % calls, step=0, part=0,
                                           from_rank=1, data=data)
                client.stub.PeerReduce(req, metadata=client.metadata, timeout=30)
            codes["OK"] = codes.get("OK", 0) + 1
        except hostile.grpc.RpcError as e:
            codes[code_of(e)] = codes.get(code_of(e), 0) + 1
            refusal = refusal or e.details()
    return codes, refusal


SENDER_PIECES, SENDER_PIECE_BYTES = 4, 4 * MIB


def sender_ends(fail, servers, secret, honest, baselines):
    """A session on A pushes pieces (PeerPush, A delivering to B) into a grant of a session on
    B that never awaits them, then ends while B's session stays: B drops those pieces (their
    charge to B's session goes back) within 5 s, while an honest run beside it gets all its
    own pieces."""
    pb = hostile.pb
    a, b = servers
    with hostile.Client(a.endpoint, secret) as ca, hostile.Client(b.endpoint, secret) as cb, \
            cb.session() as receiver:
        grant = attacker_grant(receiver)
        before = mailbox_bytes(b)
        sender = ca.session()
        code, msg, handle = sender.alloc(0, SENDER_PIECE_BYTES)
        fail.check(code == 0, f"sender alloc: {code} {msg}")
        for tag in range(1, SENDER_PIECES + 1):
            r = sender.call(pb.SessionRequest(peer_push=pb.PeerPush(
                endpoint=b.endpoint, pieces=[pb.PushPiece(buffer=handle, offset=0,
                                                          size=SENDER_PIECE_BYTES, grant=grant,
                                                          tag=tag)])))
            fail.check(r.code == 0, f"peer_push {tag} from A to B: {r.code} {r.message}")
        held = mailbox_bytes(b)
        print(f"a session on A pushed {SENDER_PIECES} x {SENDER_PIECE_BYTES} bytes nobody "
              f"awaits into B's mailbox: {before:.0f} -> {held:.0f} bytes")
        fail.check(held >= before + SENDER_PIECES * SENDER_PIECE_BYTES,
                   "the pushed pieces are not in B's mailbox: the drop below proves nothing")
        sender_leaves(fail, sender, b, before, honest, baselines[0], "pushes")
    fail.check(baselines[1].restored(), "B's counters not back to their baseline within 5 s of "
                                        "the receiving session ending")
    waiter_goes(fail, servers, secret, baselines[1])


def sender_leaves(fail, sender, b, before, honest, baseline_a, what):
    """Closes the sending session on A with an honest run beside it: B's mailbox must be back
    to `before` within DRAIN_SECONDS (B's receiving session still open), and A at its
    baseline."""
    beside = threading.Thread(target=honest.beside, args=(fail, f"the end of a session's {what}"))
    beside.start()
    t0 = time.time()
    sender.close()
    drained = hostile.wait_for(lambda: mailbox_bytes(b) <= before, DRAIN_SECONDS)
    took = time.time() - t0
    beside.join(180)
    print(f"B's mailbox {mailbox_bytes(b):.0f} bytes {took:.2f} s after the session that sent "
          f"its {what} ended (B's session still open)")
    fail.check(drained, f"the {what} the ended session sent still fill B's mailbox after "
                        f"{DRAIN_SECONDS} s: {mailbox_bytes(b):.0f} bytes")
    fail.check(baseline_a.restored(), "A's counters not back to their baseline within 5 s of the "
                                      f"session that sent {what} ending")


def waiter_goes(fail, servers, secret, baseline):
    """A session on B waits in an AwaitPush for a piece its live source A never sends, and its
    client goes away: the session ends within 5 s, its wait given up (the piece wait is a
    minute, kept for a source still computing), and B is back at its baseline."""
    pb = hostile.pb
    a, b = servers
    with hostile.Client(b.endpoint, secret) as cb:
        waiter = cb.session()
        code, msg, handle = waiter.alloc(0, 64)
        fail.check(code == 0, f"waiter alloc: {code} {msg}")
        code, msg, _ = waiter.grant(handle)
        fail.check(code == 0, f"waiter grant: {code} {msg}")
        waiter.send(pb.SessionRequest(await_push=pb.AwaitPush(
            endpoint=a.endpoint, tag=0x5EED, dst_buffer=handle, dst_offset=0, size=64)))
        time.sleep(1)  # the await is waiting on B now.
        waiter.cancel()
        fail.check(baseline.restored(), "a session waiting in an AwaitPush for a live source "
                                        "held B past 5 s after its client went")


# The all-reduce a session on A sends into B's mailbox: REDUCE_ELEMENTS f32 values, which go
# as REDUCE_PARTS pieces of 4 MiB (tg::rpc::kChunkBytes).
REDUCE_PARTS = 4
REDUCE_ELEMENTS = REDUCE_PARTS * 4 * MIB // 4
# The step of a two-rank butterfly in which rank 0 sends to rank 1 and takes rank 1's pieces
# (server/allreduce_schedule.cc: step 0 is the fold of ranks past a power of two).
BUTTERFLY_STEP = 1


def reduce_sender_ends(fail, servers, secret, honest, baselines):
    """A session on A runs an all-reduce over A (rank 0) and B (rank 1), naming a grant of a
    session on B that never takes part: A's pieces wait in B's mailbox (the pieces A waits for
    are put in A's mailbox by this client, as B would send them). The session on A then ends
    while B's stays: B drops those pieces (their charge to B's session goes back) within 5 s,
    while an honest run beside it gets all its own pieces."""
    pb = hostile.pb
    a, b = servers
    size = REDUCE_ELEMENTS * 4
    with hostile.Client(a.endpoint, secret) as ca, hostile.Client(b.endpoint, secret) as cb, \
            cb.session() as receiver:
        grant_b = attacker_grant(receiver)
        before = mailbox_bytes(b)
        sender = ca.session()
        code, msg, handle = sender.alloc(0, size)
        fail.check(code == 0, f"sender alloc: {code} {msg}")
        code, msg, grant_a = sender.grant(handle)
        fail.check(code == 0, f"sender grant: {code} {msg}")
        collective = 77
        for part in range(REDUCE_PARTS):
            ca.stub.PeerReduce(pb.PeerReduceRequest(
                grant=grant_a, collective=collective, step=BUTTERFLY_STEP, part=part, from_rank=1,
                data=b"\0" * (size // REDUCE_PARTS)), metadata=ca.metadata, timeout=30)
        r = sender.call(pb.SessionRequest(all_reduce=pb.AllReduce(
            collective=collective,
            servers=[pb.CollectiveServer(endpoint=a.endpoint, grant=grant_a),
                     pb.CollectiveServer(endpoint=b.endpoint, grant=grant_b)],
            rank=0, tensors=[pb.CollectiveTensor(device=0, buffer=handle, offset=0)],
            count=REDUCE_ELEMENTS, device=0, algorithm=pb.AllReduce.BUTTERFLY)))
        fail.check(r.code == 0, f"all_reduce from A into B: {r.code} {r.message}")
        # The pieces go over A's stream to B in the background.
        hostile.wait_for(lambda: mailbox_bytes(b) >= before + size, DRAIN_SECONDS)
        held = mailbox_bytes(b)
        print(f"a session on A sent an all-reduce of {size} bytes nobody takes into B's "
              f"mailbox: {before:.0f} -> {held:.0f} bytes")
        fail.check(held >= before + size,
                   "the all-reduce's pieces are not in B's mailbox: the drop below proves nothing")
        sender_leaves(fail, sender, b, before, honest, baselines[0], "all-reduce pieces")
    fail.check(baselines[1].restored(), "B's counters not back to their baseline within 5 s of "
                                        "the receiving session ending")


def check_flood(args, fail, kind):
    with tempfile.TemporaryDirectory(prefix=f"tg-peer-{kind}-") as workdir:
        token = token_file(workdir)
        flags = ["--auth-token-file", token, "--session-mem-limit", str(SESSION_LIMIT)]
        servers = [start_server(args, workdir, i, extra=flags) for i in range(2)]
        try:
            b = servers[1]
            honest = hostile.Honest(args, b, servers[0], token)
            honest.calm(fail)
            baselines = [hostile.Baseline(s_) for s_ in servers]
            before_peer = peer_bytes(servers)
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
                # The attack goes on beside the honest runs, whose own pieces (the layer
                # boundary's push, the all-reduce's partial sums) go through B's mailbox too.
                stop = threading.Event()
                more = threading.Thread(target=flood, args=(client, grant, kind, stop),
                                        daemon=True)
                more.start()
                honest.beside(fail, f"the {kind} flood")
                stop.set()
                more.join(120)
                if peer_bytes(servers) <= before_peer:
                    fail("-sm layer/tensor moved no bytes server to server: the test tests "
                         "nothing")
                if mailbox_bytes(b) == 0:
                    fail("the attacker's pieces left the mailbox while its session lived: the "
                         "drop below proves nothing")
            # The attacker's pieces go with its session (their grant is revoked), and with
            # them their charge; the honest runs' pieces were all taken.
            for base in baselines:
                fail.check(base.restored(DRAIN_SECONDS),
                           f"{base.srv.endpoint}: counters not back to their baseline within "
                           f"{DRAIN_SECONDS} s of the attacker's session closing")
            if kind == "push":
                sender_ends(fail, servers, read_token(token), honest, baselines)
            else:
                reduce_sender_ends(fail, servers, read_token(token), honest, baselines)
            honest.calm(fail)
            honest.check(fail)
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
            # The honest runs go over servers[0] (and servers[1]) with the shared token.
            honest = hostile.Honest(args, servers[0], servers[1], token)
            honest.calm(fail)
            for server, label in [(servers[0], "default --peers"), (fenced, "--peers 10.9.9.9")]:
                base = hostile.Baseline(server)
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
                        # Two servers sharing a token serve -sm layer and -sm tensor beside
                        # the attacker (the peer calls between them carry the token).
                        before = peer_bytes(servers)
                        honest.beside(fail, "refused peer calls")
                        if peer_bytes(servers) <= before:
                            fail("-sm layer/tensor: no bytes went server to server")
                fail.check(base.restored(), f"{label}: counters not back to their baseline "
                                            f"within 5 s of the attacker's session closing")
            if "peer call refused" not in fenced.read_log():
                fail("the refusals are not logged")
            honest.calm(fail)
            honest.check(fail)
        finally:
            for s_ in servers + [fenced]:
                s_.stop()


def main():
    args = hostile.parse_args([("--case", {"required": True,
                                            "choices": ["push_flood", "reduce_flood",
                                                        "peer_auth"]})])
    fail = Failures()
    if args.case == "push_flood":
        check_flood(args, fail, "push")
    elif args.case == "reduce_flood":
        check_flood(args, fail, "reduce")
    else:
        check_peer_auth(args, fail)
    if fail.count == 0:
        print(f"PASS: {args.case}")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
