"""Streams and work under hostile and heavy load (issue 37): what a stalled, header-less or
over-large request holds on a real rpc-server.

  --case stalled_streams    8 rounds of (alloc 120 MiB, an Upload that sends its header and
                            stops or a Download never read, FreeBuffer, close the session)
                            under --session-mem-limit 128M --max-sessions 4: RSS back near
                            its baseline after each round (slack: one 120 MiB buffer the
                            recycler keeps for the next session, + 64 MiB), 0 sessions, 0
                            buffers, the stalled calls ended; then an honest tg-run.
  --case headerless_uploads 5000 Upload streams that never send a header, on 4 channels:
                            server threads within +32 of baseline, an honest tg-run right
                            beside them within 2x its normal time (+1 s), and every stream
                            ended DEADLINE_EXCEEDED by --stream-idle-timeout.
  --case graph_bombs        a Compute with a 1e6-tensor graph refused before parsing (RSS
                            +<100 MB); 32 distinct graphs under --session-mem-limit 8M kept
                            within it (evicted or refused, RSS bounded); a Batch of 6e6
                            commands refused (RSS +<100 MB); a Batch of 100 slow Computes
                            stops within ~1 s of its client cancelling (server CPU idle).
Each case runs an honest tg-run beside the attack (hostile.Honest: one device, -sm layer and
-sm tensor with a partner server; the local tokens within 2x the slower calm run) and wants
every counter back to its baseline within 5 s of the attacker leaving (hostile.Baseline).
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import MIB, Failures, proc_stats, start_server, wait_for  # noqa: E402

F32 = 0
OP_MUL_MAT = 3
CANCELLED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 1, 3, 4, 8


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):
    """A length-delimited field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def rss(srv):
    return proc_stats(srv.proc.pid)["rss"]


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def leaf(i, buffer, ne=(1, 1, 1, 1), offset=0):
    pb = hostile.pb
    nb = [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]]
    return pb.TensorDesc(id=i, type=F32, ne=list(ne), nb=nb, buffer=buffer, offset=offset)


def leaves_graph(n, buffer):
    """GraphDesc bytes of n one-element F32 leaves in `buffer` (a valid graph, no nodes),
    built from one tensor's bytes with the id replaced, fast enough for 1e6."""
    rest = leaf(1, buffer).SerializeToString()[2:]  # without "id = 1" (08 01).
    return b"".join(field(1, b"\x08" + varint(i) + rest) for i in range(1, n + 1))


def compute_request(request_id, graph_key, graph_bytes):
    pb = hostile.pb
    compute = pb.Compute(device=0, graph_key=graph_key).SerializeToString()
    if graph_bytes is not None:
        compute += field(3, graph_bytes)
    return b"\x08" + varint(request_id) + field(9, compute)


# ---------------------------------------------------------------------------------------------

def stalled_streams(args, work, fail):
    srv = start_server(args, work, extra=["--session-mem-limit", "128M", "--max-sessions", "4",
                                          "--stream-idle-timeout", "5"])
    partner = start_server(args, work, index=1)
    try:
        honest = hostile.Honest(args, srv, partner)
        honest.calm(fail)
        baseline = hostile.Baseline(srv)
        with hostile.Client(srv.endpoint) as c:
            c.hello()
            base = rss(srv)
            slack = 120 * MIB + 64 * MIB
            pb = hostile.pb
            for rnd in range(8):
                s = c.session()
                code, msg, handle = s.alloc(0, 120 * MIB)
                if code != 0:
                    fail(f"round {rnd}: alloc refused: {code} {msg}")
                    s.close()
                    continue
                # Fill the buffer so that its pages are resident (what a stalled stream pins).
                s.call(pb.SessionRequest(clear_buffer=pb.ClearBuffer(buffer=handle, value=7)))
                ended = {}
                if rnd % 2 == 0:
                    stop = threading.Event()
                    header = pb.UploadMessage(header=pb.UploadHeader(
                        session_id=s.id, buffer=handle, offset=0, size=120 * MIB))

                    def frames():
                        yield header.SerializeToString()
                        stop.wait(60)
                    call = c.raw_stream_stream("Upload")(frames(), metadata=c.metadata)
                    first = next(call)  # the server asks for the bytes: the stream is live.
                    if not pb.UploadReply.FromString(first).send:
                        fail(f"round {rnd}: upload not asked to send")
                else:
                    stop = None
                    call = c.stub.Download(pb.DownloadRequest(
                        session_id=s.id, range=pb.Range(buffer=handle, offset=0,
                                                        size=120 * MIB)), metadata=c.metadata)
                    time.sleep(0.5)  # the server writes until flow control stops it.

                if rnd < 2:  # an honest client beside a stalled upload, then a download.
                    honest.beside(fail, f"a stalled {'upload' if rnd == 0 else 'download'}")

                def drain(call=call, ended=ended):
                    try:
                        for _ in call:
                            pass
                        ended["code"] = 0
                    except hostile.grpc.RpcError as e:
                        ended["code"] = e.code().value[0]
                t0 = time.time()
                code, msg = s.free(handle)
                if code != 0:
                    fail(f"round {rnd}: free failed: {code} {msg}")
                s.close()
                closed = time.time() - t0
                threading.Thread(target=drain, daemon=True).start()
                restored = baseline.restored()
                now = rss(srv)
                kind = "upload" if rnd % 2 == 0 else "download"
                print(f"round {rnd} ({kind}): rss {now / MIB:.0f} MiB (base {base / MIB:.0f}), "
                      f"free+close {closed:.2f} s")
                if not restored:
                    fail(f"round {rnd}: counters not back to their baseline within 5 s of the "
                         f"session closing")
                if now > base + slack:
                    fail(f"round {rnd} ({kind}): rss {now / MIB:.0f} MiB > baseline "
                         f"{base / MIB:.0f} + {slack / MIB:.0f} MiB: the stalled stream pins "
                         f"the freed buffer")
                # The stalled stream itself ended once its session did (CANCELLED), or at the
                # latest by the idle timeout.
                if not wait_for(lambda: "code" in ended, 8):
                    fail(f"round {rnd} ({kind}): the stalled call did not end")
                elif ended["code"] not in (CANCELLED, DEADLINE_EXCEEDED, 9):
                    fail(f"round {rnd} ({kind}): the stalled call ended with {ended['code']}")
                if stop is not None:
                    stop.set()
            if srv.proc.poll() is not None:
                fail("server died")
            honest.calm(fail)
            honest.check(fail)
    finally:
        srv.stop()
        partner.stop()


def headerless_uploads(args, work, fail):
    import asyncio  # noqa: PLC0415
    n, channels, idle = 5000, 4, 5
    srv = start_server(args, work, extra=["--stream-idle-timeout", str(idle)])
    partner = start_server(args, work, index=1)
    try:
        honest = hostile.Honest(args, srv, partner)
        honest.calm(fail)
        baseline = hostile.Baseline(srv)
        base = baseline.values["threads"]
        codes = {}
        opened, done = threading.Event(), threading.Event()
        release = None

        async def attack():
            nonlocal release
            release = asyncio.Event()
            chans = [hostile.grpc.aio.insecure_channel(srv.endpoint) for _ in range(channels)]
            calls = []

            async def never():
                await release.wait()
                if False:  # noqa: SIM108 - an async generator that yields nothing
                    yield b""
            for i in range(n):
                call = chans[i % channels].stream_stream(
                    "/tensorgrid.v1.TensorGrid/Upload", request_serializer=lambda b: b,
                    response_deserializer=lambda b: b)(never())
                calls.append(call)
            for ch in chans:
                await ch.channel_ready()
            # Initial metadata goes out as each call starts; give them a moment to land.
            await asyncio.sleep(2)
            opened.set()

            async def status(call):
                try:
                    return (await call.code()).value[0]
                except Exception:  # noqa: BLE001
                    return -1
            results = await asyncio.wait_for(asyncio.gather(*(status(c) for c in calls)),
                                             idle * 3 + 30)
            for r in results:
                codes[r] = codes.get(r, 0) + 1
            print(f"attack streams all ended {time.time() - t0:.1f} s after the attack began")
            done.set()  # the loop's leftovers (the blocked request iterators) may linger.
            release.set()
            for ch in chans:
                await ch.close(grace=0)

        t = threading.Thread(target=lambda: asyncio.run(attack()), daemon=True)
        t0 = time.time()
        t.start()
        if not opened.wait(60):
            fail("the attack streams did not open in 60 s")
            return
        threads = proc_stats(srv.proc.pid)["threads"]
        opened_after = time.time() - t0
        honest.beside(fail, f"{n} header-less uploads")
        threads = max(threads, proc_stats(srv.proc.pid)["threads"])
        print(f"threads: baseline {base}, under {n} header-less uploads {threads}; attack "
              f"opened in {opened_after:.1f} s")
        if threads > base + 32:
            fail(f"server threads {threads} > baseline {base} + 32 under {n} header-less "
                 f"uploads")
        done.wait(idle * 3 + 40)
        print(f"attack streams ended with codes {codes} (4 = DEADLINE_EXCEEDED)")
        if codes.get(DEADLINE_EXCEEDED, 0) != n:
            fail(f"not every header-less stream was dropped by the idle timeout: {codes}")
        fail.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                        "attack's streams ending")
        honest.calm(fail)
        honest.check(fail)
        if srv.proc.poll() is not None:
            fail("server died")
    finally:
        srv.stop()
        partner.stop()


def graph_bombs(args, work, fail):
    pb = hostile.pb
    srv = start_server(args, work, extra=["--session-mem-limit", "8M"])
    partner = start_server(args, work, index=2)
    try:
        honest = hostile.Honest(args, srv, partner)
        honest.calm(fail)
        baseline = hostile.Baseline(srv)
        with hostile.Client(srv.endpoint) as c:
            c.hello()
            s = c.session()
            alloc = pb.SessionRequest(id=1, alloc_buffer=pb.AllocBuffer(device=0, size=4096))
            handle = s.call_raw(alloc.SerializeToString()).alloc_buffer.buffer
            base = rss(srv)

            # 1. One graph of 1e6 tensors.
            bomb = compute_request(2, 0xB0B, leaves_graph(1_000_000, handle))
            r = s.call_raw(bomb)
            grown = rss(srv) - base
            print(f"1e6-tensor graph ({len(bomb) / MIB:.0f} MiB): code {r.code} "
                  f"'{r.message}', rss +{grown / MIB:.0f} MiB")
            if (r.code != INVALID_ARGUMENT or "65536" not in r.message
                    or "1000000" not in r.message):
                fail(f"1e6-tensor graph not refused with its count and limit: {r.code} "
                     f"{r.message}")
            if grown > 100 * MIB:
                fail(f"refusing a 1e6-tensor graph grew rss by {grown / MIB:.0f} MiB")

            # 2. 32 distinct graphs under an 8 MiB session limit: 4000 tensors each fit
            # (and evict older ones); 60000 each do not (refused before decoding).
            codes = {}
            for k in range(32):
                r = s.call_raw(compute_request(10 + k, 0x1000 + k, leaves_graph(4000, handle)))
                codes[r.code] = codes.get(r.code, 0) + 1
            first = s.call_raw(compute_request(50, 0x1000, None))
            last = s.call_raw(compute_request(51, 0x1000 + 31, None))
            print(f"32 graphs of 4000 tensors: codes {codes}; first still cached: "
                  f"{first.code == 0}, last: {last.code == 0}")
            if codes.get(0, 0) != 32:
                fail(f"graphs that fit the session limit were refused: {codes}")
            if first.code == 0:
                fail("32 graphs of ~2 MB each all kept under an 8 MiB session limit")
            if last.code != 0:
                fail(f"the newest graph was not cached: {last.code} {last.message}")
            codes = {}
            big_base = rss(srv)
            for k in range(32):
                r = s.call_raw(compute_request(100 + k, 0x2000 + k, leaves_graph(60000, handle)))
                codes[r.code] = codes.get(r.code, 0) + 1
                if k == 0:
                    print(f"60000-tensor graph: {r.code} '{r.message}'")
            grown = rss(srv) - big_base
            print(f"32 graphs of 60000 tensors: codes {codes}, rss +{grown / MIB:.0f} MiB")
            if codes.get(RESOURCE_EXHAUSTED, 0) != 32:
                fail(f"graphs over the 8 MiB session limit were not refused: {codes}")
            if grown > 100 * MIB:
                fail(f"32 refused graphs grew rss by {grown / MIB:.0f} MiB")
            honest.beside(fail, "a session holding its share of cached graphs")

            # 3. A batch of 6,000,000 commands (cache_stats, id 1): 36 MB on the wire.
            command = field(1, b"\x08\x01" + field(12, b""))
            batch = b"\x08" + varint(200) + field(13, command * 6_000_000)
            base = rss(srv)
            r = s.call_raw(batch)
            grown = rss(srv) - base
            print(f"batch of 6e6 commands ({len(batch) / MIB:.0f} MiB): code {r.code} "
                  f"'{r.message}', rss +{grown / MIB:.0f} MiB")
            if (r.code != INVALID_ARGUMENT or "4096" not in r.message
                    or "6000000" not in r.message or "several batches" not in r.message):
                fail(f"batch of 6e6 commands not refused with the cap: {r.code} {r.message}")
            if grown > 100 * MIB:
                fail(f"refusing a 6e6-command batch grew rss by {grown / MIB:.0f} MiB")
            ok = s.call_raw(pb.SessionRequest(id=201, cache_stats=pb.CacheStats())
                            .SerializeToString())
            if ok.code != 0:
                fail(f"the session is unusable after the refusals: {ok.code} {ok.message}")
            s.close()
        fail.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                        "graph-bomb session closing")
        honest.calm(fail)
        honest.check(fail)

        # 4. A batch of 100 slow Computes, cancelled by its client after 1.5 s: once the
        # cancel settled, an honest client gets the server back at its normal speed.
        srv.stop()
        srv = start_server(args, work, index=1, extra=["--session-mem-limit", "0"])
        honest = hostile.Honest(args, srv, partner)
        honest.calm(fail)
        baseline = hostile.Baseline(srv)
        with hostile.Client(srv.endpoint) as c:
            s = c.session()
            k = 2560
            bufs = [s.alloc(0, k * k * 4)[2] for _ in range(3)]
            a = leaf(1, bufs[0], (k, k, 1, 1))
            b = leaf(2, bufs[1], (k, k, 1, 1))
            out = leaf(3, bufs[2], (k, k, 1, 1))
            out.op, out.src[:] = OP_MUL_MAT, [1, 2]
            graph = pb.GraphDesc(tensors=[a, b, out], nodes=[3])
            one = s.call(pb.SessionRequest(compute=pb.Compute(device=0, graph_key=7,
                                                              graph=graph)))
            if one.code != 0:
                fail(f"the slow graph does not run: {one.code} {one.message}")
                return
            print(f"one slow compute: {one.compute.compute_us / 1e6:.2f} s")
            batch = pb.SessionRequest(batch=pb.Batch(commands=[
                pb.SessionRequest(id=1000 + i, compute=pb.Compute(device=0, graph_key=7))
                for i in range(100)]))
            s.send(batch)
            time.sleep(1.5)
            s.cancel()
            time.sleep(1.0 + one.compute.compute_us / 1e6)  # one command may finish.
            c0 = cpu_seconds(srv.proc.pid)
            time.sleep(1.0)
            busy = cpu_seconds(srv.proc.pid) - c0
            print(f"server CPU in the 1 s window after the cancel settled: {busy:.2f} s")
            if busy > 0.2:
                fail(f"the cancelled batch kept running: {busy:.2f} s of CPU in 1 s")
            fail.check(baseline.restored(), "counters not back to their baseline within 5 s of "
                                            "the cancelled session ending")
            honest.beside(fail, "a cancelled batch of 100 slow computes")
            honest.calm(fail)
            honest.check(fail)
            if srv.proc.poll() is not None:
                fail("server died")
    finally:
        srv.stop()
        partner.stop()


CASES = {"stalled_streams": stalled_streams, "headerless_uploads": headerless_uploads,
         "graph_bombs": graph_bombs}


def main():
    args = hostile.parse_args([("--case", {"required": True, "choices": sorted(CASES)})])
    failures = Failures()
    with tempfile.TemporaryDirectory() as work:
        CASES[args.case](args, work, failures)
    return failures.exit_code()


if __name__ == "__main__":
    sys.exit(main())
