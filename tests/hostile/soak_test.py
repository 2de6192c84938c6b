#!/usr/bin/env python3
"""Load held: honest tg-run clients beside a rotating set of attacks, for minutes (label
"soak": not in CI; docs/reliability.md has its figures).

  soak_test.py --tg-run T --rpc-server S --model M --stubs DIR [--seconds 600] [--clients 16]

Two rpc-servers (two CPU devices each, one thread) on loopback. `--clients` honest clients
loop over real tg-run processes, each run greedy with F32 KV, in turn `-sm layer` over both
servers, `-sm tensor` over both, and one remote device; every run's tokens must equal the
local run's. Beside them, one attack at a time, changed every --attack-seconds: a memory
grab up to the refusals, 500 Upload streams that never send a header, Downloads never read
with the session closed under them, 50,000 zero-byte buffers, a flood of pushed pieces into
the attacker's own grant, and a graph of 200,000 tensors.

Each server has a budget of 1 GiB (--mem-budget; --session-mem-limit 512M) and two clients of
its own tokens (--client-tokens): the attacks run as one, the honest runs as the other, and
one client's sessions hold 512 MiB at most together (--client-mem-limit 512M). Asserts: 0 wrong
tokens and 0 failed honest runs, both servers alive to the end (0 restarts), each server's
RSS within its budget plus 1 GiB (itself, and freed buffers the recycler keeps for the next
load), and RSS flat: the peak of every rotation of the attacks after minute 2 within 10% (plus
16 MiB) of the first such rotation's peak. (Peaks, not samples: a sample taken while the
memory attack holds its share is not comparable with one taken between attacks.) Prints one JSON line of
figures. TG_SOAK_SECONDS sets the length when --seconds is not given. Exit 0 pass, 1 fail,
77 skip.
"""
import json
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile as h  # noqa: E402


def attack_memory(ep, stop):
    """Sessions that allocate 64 MiB buffers until refused, hold them, then close."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c:
        sessions = []
        try:
            for _ in range(4):
                s = c.session()
                sessions.append(s)
                for _ in range(64):
                    code, _, _ = s.alloc(0, 64 * h.MIB)
                    if code != 0 or stop.is_set():
                        break
            stop.wait(10)
        finally:
            for s in sessions:
                s.close()


def attack_headerless(ep, stop):
    """500 Upload streams that never send a header, held until the attack ends."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c:
        gate = threading.Event()

        def never():
            gate.wait()
            return
            yield  # noqa: unreachable - a generator that sends nothing

        calls = [c.raw_stream_stream("Upload")(never(), metadata=c.metadata) for _ in range(500)]
        stop.wait(15)
        for call in calls:
            call.cancel()
        gate.set()


def attack_stalled_download(ep, stop):
    """Downloads of 64 MiB buffers never read, the session freed and closed under them."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c:
        calls = []
        for _ in range(3):
            s = c.session()
            code, _, handle = s.alloc(0, 64 * h.MIB)
            if code == 0:
                req = h.pb.DownloadRequest(session_id=s.id, range=h.pb.Range(
                    buffer=handle, offset=0, size=64 * h.MIB))
                calls.append(c.stub.Download(req, metadata=c.metadata))
                s.free(handle)
            s.close()
        stop.wait(10)
        for call in calls:
            call.cancel()


def attack_zero_buffers(ep, stop):
    """Batches of zero-byte buffers, 50,000 in all."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c, c.session() as s:
        for _ in range(10):
            batch = h.pb.Batch(commands=[h.pb.SessionRequest(
                id=i + 1, alloc_buffer=h.pb.AllocBuffer(device=0, size=0)) for i in range(5000)])
            try:
                s.call(h.pb.SessionRequest(batch=batch), timeout=60)
            except Exception:  # noqa: BLE001 - a refusal may end the stream
                break
            if stop.is_set():
                break
        stop.wait(5)


def attack_push_flood(ep, stop):
    """PeerDeliver pieces of 8 MiB into the attacker's own grant, 64 of them."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c, c.session() as s:
        code, _, handle = s.alloc(0, 8 * h.MIB)
        if code != 0:
            return
        code, _, grant = s.grant(handle)
        if code != 0:
            return
        data = os.urandom(8 * h.MIB)
        for i in range(64):
            try:
                c.stub.PeerDeliver(h.pb.PeerDeliverRequest(pieces=[h.pb.DeliveredPiece(
                    grant=grant, tag=random.getrandbits(64), data=data)]),
                    metadata=c.metadata, timeout=30)
            except h.grpc.RpcError:
                pass
            if stop.is_set():
                break
        stop.wait(5)


def attack_graph_bomb(ep, stop):
    """A Compute whose graph names 200,000 tensors."""
    with h.Client(ep, h.CLIENT_TOKENS["attacker"]) as c, c.session() as s:
        graph = h.pb.GraphDesc(tensors=[h.pb.TensorDesc(id=i + 1, type=0, ne=[1, 1, 1, 1],
                                                        nb=[4, 4, 4, 4])
                                        for i in range(200000)])
        try:
            s.call(h.pb.SessionRequest(compute=h.pb.Compute(device=0, graph_key=1, graph=graph)),
                   timeout=60)
        except Exception:  # noqa: BLE001
            pass
        stop.wait(5)


# Each server's budget (--mem-budget; a session, and a client's sessions together, half of it):
# the attacker's memory grab gets half, whatever number of sessions it opens, and the honest
# client keeps the other half.
BUDGET = 1 << 30
# Beyond the budget: the server itself (model, code, threads, gRPC buffers) and the memory a
# freed session's buffers leave in the recycler for the next load (at most what the budget let
# them hold; given back within 30 s or as soon as an allocation needs it).
RSS_SLACK = 1 << 30
# RSS is compared from here on, per rotation of the attacks (each server sees each of its
# attacks once a rotation): the peaks of the rotations stay within 10% of the first's.
WARMUP = 120

ATTACKS = [attack_memory, attack_headerless, attack_stalled_download, attack_zero_buffers,
           attack_push_flood, attack_graph_bomb]


def main():
    args = h.parse_args([("--seconds", dict(type=int, default=None)),
                         ("--clients", dict(type=int, default=16)),
                         ("--attack-seconds", dict(type=int, default=20))])
    seconds = args.seconds or int(os.environ.get("TG_SOAK_SECONDS", "600"))
    fail = h.Failures()
    with tempfile.TemporaryDirectory(prefix="tg-soak-") as d:
        tokens_file, honest_token = h.write_client_tokens(d)
        servers = [h.start_server(args, d, index=i, devices=2,
                                  extra=["--mem-budget", str(BUDGET), "--session-mem-limit",
                                         str(BUDGET // 2), "--client-tokens", tokens_file,
                                         "--client-mem-limit", str(BUDGET // 2)])
                   for i in range(2)]
        eps = [s.endpoint for s in servers]
        reference, _, err = h.tg_run(args, n=24)
        if reference is None:
            print(f"FAIL: the local reference run failed: {err[-1500:]}")
            return 1
        as_honest = ["--rpc-token-file", honest_token]
        modes = [("layer", eps, as_honest), ("tensor", eps, as_honest),
                 ("none", eps[:1], ["--device", f"RPC[{eps[0]}]/0"] + as_honest)]
        counts = {"runs": 0, "wrong": 0, "failed": 0, "attacks": 0}
        lock = threading.Lock()
        stop = threading.Event()
        samples = [[] for _ in servers]  # (seconds since start, rss) per server.
        t0 = time.time()

        def honest(k):
            i = k
            while not stop.is_set():
                split, rpc, extra = modes[i % len(modes)]
                i += 1
                tokens, _, out = h.tg_run(args, rpc, split, extra, n=24)
                with lock:
                    counts["runs"] += 1
                    if tokens is None:
                        counts["failed"] += 1
                        if counts["failed"] <= 3:
                            print(f"honest -sm {split} failed: {out[-800:]}")
                    elif tokens != reference:
                        counts["wrong"] += 1

        def attacker():
            n = 0
            while not stop.is_set():
                attack = ATTACKS[n % len(ATTACKS)]
                ep = eps[n % len(eps)]
                n += 1
                ends = threading.Event()
                t = threading.Thread(target=attack, args=(ep, ends), daemon=True)
                t.start()
                stop.wait(args.attack_seconds)
                ends.set()
                t.join(60)
                with lock:
                    counts["attacks"] += 1

        threads = [threading.Thread(target=honest, args=(k,), daemon=True)
                   for k in range(args.clients)] + [threading.Thread(target=attacker,
                                                                     daemon=True)]
        for t in threads:
            t.start()
        while time.time() - t0 < seconds:
            time.sleep(5)
            for j, s in enumerate(servers):
                if s.proc.poll() is not None:
                    fail(f"server {j} exited {s.proc.returncode}: {s.read_log()[-1500:]}")
                    stop.set()
                else:
                    samples[j].append((time.time() - t0, h.proc_stats(s.proc.pid)["rss"]))
            if fail.count:
                break
        stop.set()
        for t in threads:
            t.join(120)
        figures = dict(counts, seconds=round(time.time() - t0), clients=args.clients)
        rotation = args.attack_seconds * len(ATTACKS)  # each server sees each of its attacks.
        for j, ss in enumerate(samples):
            # The peak of each rotation from minute 2 on (the first one is warm-up).
            peaks = {}
            for t, r in ss:
                if t >= WARMUP:
                    k = int((t - WARMUP) // rotation)
                    peaks[k] = max(peaks.get(k, 0), r)
            whole = [peaks[k] for k in sorted(peaks) if (k + 1) * rotation + WARMUP <= seconds]
            if ss:
                top = max(r for _, r in ss)
                figures[f"server{j}_rss_mib_max"] = round(top / h.MIB, 1)
                if top > BUDGET + RSS_SLACK:
                    fail(f"server {j} RSS reached {top / h.MIB:.0f} MiB, past its budget of "
                         f"{BUDGET / h.MIB:.0f} MiB plus {RSS_SLACK / h.MIB:.0f} MiB")
            if len(whole) < 2:
                continue
            figures[f"server{j}_rss_mib_rotation_peaks"] = [round(p / h.MIB) for p in whole]
            if max(whole[1:]) > whole[0] * 1.10 + 16 * h.MIB:
                fail(f"server {j} RSS peaks grew from {whole[0] / h.MIB:.0f} MiB in the rotation "
                     f"after minute 2 to {max(whole[1:]) / h.MIB:.0f} MiB later")
        for s in servers:
            s.stop()
        print(json.dumps(figures))
        if counts["wrong"]:
            fail(f"{counts['wrong']} honest runs gave other tokens than the local run")
        if counts["failed"]:
            fail(f"{counts['failed']} of {counts['runs']} honest runs failed")
        if counts["runs"] == 0:
            fail("no honest run finished")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
