#!/usr/bin/env python3
"""Memory attacks on a real rpc-server: it judges its memory by its container (memory cgroup)
and holds all sessions together to one budget, so a client asking for more gets an error,
never the server an OOM kill.

  memory_test.py --tg-run PATH --rpc-server PATH --model MODEL --stubs DIR --case CASE

alloc_past_budget   1 GiB cgroup, default flags: Hello reports at most 1 GiB; AllocBuffer of
                    1.5 GiB is RESOURCE_EXHAUSTED naming the server budget and --mem-budget;
                    64 MiB pieces granted until refused (most of the 512 MiB budget) and
                    written stay resident with no OOM kill; the server lives and tg-run over it
                    gives local's tokens.
sessions_in_cgroup  1.5 GiB cgroup, --mem-reserve 200M (budget 1336 MiB): 8 sessions each take
                    200 MiB and write all of it (resident: RSS checked); the first six get it,
                    the 7th and 8th are refused naming the budget; no OOM kill.
model_too_big       --mem-budget 512K, below what the model needs: tg-run fails with an error
                    naming the server's endpoint, the bytes asked and the budget; the server
                    lives.
model_too_big_for_pod  a synthetic ~320 MB model (tg-gguf synth, in the test's temp dir)
                    against a server in a 256 MiB cgroup with default flags (its budget from
                    the cgroup alone): tg-run fails naming the server (host:port), the bytes
                    asked and the budget; no OOM kill, the server lives and serves a model
                    that fits.
zero_byte_buffers   300000 AllocBuffer of 0 bytes in one session (batches of 4096): 65536
                    granted, the rest refused naming the count, the cap and
                    --max-buffers-per-session; RSS bounded; all freed when the session ends.
client_share        --mem-budget 1G, --session-mem-limit 512M, --client-mem-limit 512M and two
                    clients' own tokens (--client-tokens): an attacker's four sessions take
                    64 MiB pieces until refused and hold 512 MiB in all (each refusal names the
                    client and --client-mem-limit); the other client still gets 448 MiB.
Every case with an attacker session runs an honest tg-run beside it (hostile.Honest: one
device, -sm layer and -sm tensor with a partner server outside the cgroup; the local tokens,
within 2x the slower calm run) and, once the attacker's sessions end, wants every counter back
to its baseline within 5 s (hostile.Baseline: sessions, buffers, bytes, mailbox, threads).
Exit 0 pass, 1 fail, 77 skipped (no model, no grpcio, no writable memory cgroup).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile  # noqa: E402
from hostile import GIB, MIB, Client, Failures, proc_stats, start_server  # noqa: E402

RESOURCE_EXHAUSTED = 8


def budget_refusal(msg):
    return "server memory budget" in msg and "--mem-budget" in msg


def alloc_past_budget(args, f, workdir):
    with hostile.skip_unless_cgroup(GIB) as cg:
        srv = start_server(args, workdir, prefix=cg.prefix)
        partner = start_server(args, workdir, index=1)  # outside the cgroup.
        try:
            honest = hostile.Honest(args, srv, partner)
            honest.calm(f)
            baseline = hostile.Baseline(srv)
            with Client(srv.endpoint) as c:
                hello = c.hello()
                dev = hello.devices[0]
                print(f"Hello: {dev.name} memory_total {dev.memory_total} memory_free "
                      f"{dev.memory_free}")
                f.check(0 < dev.memory_total <= GIB,
                        f"Hello's memory_total {dev.memory_total} is not within the 1 GiB cgroup")
                f.check(dev.memory_free <= dev.memory_total, "memory_free above memory_total")
                m = srv.metrics()
                budget = m.get("tg_mem_budget_bytes", 0)
                print(f"tg_mem_budget_bytes {budget:.0f}")
                f.check(0 < budget < GIB, f"the default budget {budget} is not below the cgroup")
                with c.session() as s:
                    code, msg, _ = s.alloc(0, 1536 * MIB)
                    print(f"AllocBuffer 1.5 GiB: {code} {msg}")
                    f.check(code == RESOURCE_EXHAUSTED and budget_refusal(msg)
                            and str(1536 * MIB) in msg,
                            "1.5 GiB should be RESOURCE_EXHAUSTED naming the budget, the bytes "
                            "asked and --mem-budget")
                # Two sessions (each may take half the budget) take 64 MiB at a time and
                # write it until refused: whatever the server grants, the cgroup holds beside
                # the server's own memory, with no OOM kill.
                rss0 = proc_stats(srv.proc.pid)["rss"]
                granted, codes = 0, set()
                with c.session() as s1, c.session() as s2:
                    for s in [s1, s2] * 5:
                        code, msg, h = s.alloc(0, 64 * MIB)
                        if code != 0:
                            codes.add(code)
                            continue
                        granted += 64 * MIB
                        r = s.call(hostile.pb.SessionRequest(memset=hostile.pb.MemsetRange(
                            range=hostile.pb.Range(buffer=h, offset=0, size=64 * MIB),
                            value=0xA5)))
                        f.check(r.code == 0, f"memset: {r.message}")
                    rss = proc_stats(srv.proc.pid)["rss"]
                    print(f"{granted / MIB:.0f} MiB granted and written until refused "
                          f"({sorted(codes)}): RSS {rss0 / MIB:.0f} -> {rss / MIB:.0f} MiB, "
                          f"cgroup OOM kills {cg.oom_kills()}")
                    f.check(granted >= 384 * MIB, "most of the 512 MiB budget should be granted")
                    f.check(codes == {RESOURCE_EXHAUSTED}, "the refusals should be "
                            "RESOURCE_EXHAUSTED")
                    f.check(rss >= rss0 + granted * 0.95, "the granted memory is not resident")
                    # What the attackers left of the budget serves an honest client.
                    honest.beside(f, "two sessions holding the budget")
            f.check(srv.proc.poll() is None, "the server died")
            f.check(cg.oom_kills() == 0, f"{cg.oom_kills()} OOM kills in the cgroup")
            f.check(baseline.restored(), "counters not back to their baseline within 5 s of the "
                                         "attackers' sessions closing")
            honest.calm(f)
            honest.check(f)
            f.check(srv.proc.poll() is None and cg.oom_kills() == 0, "the server died after all")
        finally:
            srv.stop()
            partner.stop()


def sessions_in_cgroup(args, f, workdir):
    with hostile.skip_unless_cgroup(1536 * MIB) as cg:
        srv = start_server(args, workdir, prefix=cg.prefix, extra=["--mem-reserve", "200M"])
        partner = start_server(args, workdir, index=1)  # outside the cgroup.
        sessions = []
        try:
            honest = hostile.Honest(args, srv, partner)
            honest.calm(f)
            baseline = hostile.Baseline(srv)
            rss0 = proc_stats(srv.proc.pid)["rss"]
            print(f"tg_mem_budget_bytes {srv.metrics().get('tg_mem_budget_bytes', 0):.0f}, "
                  f"RSS {rss0 / MIB:.0f} MiB")
            with Client(srv.endpoint) as c:
                results = []
                for i in range(8):
                    s = c.session()
                    sessions.append(s)
                    code, msg, h = s.alloc(0, 200 * MIB)
                    if code == 0:
                        # Every byte written: whatever was granted is really resident.
                        r = s.call(hostile.pb.SessionRequest(memset=hostile.pb.MemsetRange(
                            range=hostile.pb.Range(buffer=h, offset=0, size=200 * MIB),
                            value=0x5A)))
                        f.check(r.code == 0, f"memset of session {i + 1}'s buffer: {r.message}")
                    results.append(code)
                    print(f"session {i + 1}: AllocBuffer 200 MiB: {code} {msg[:200]}")
                    if i >= 6:
                        f.check(code == RESOURCE_EXHAUSTED and budget_refusal(msg),
                                f"session {i + 1} should be refused naming the budget")
                f.check(results[:6] == [0] * 6, f"the first six should get 200 MiB: {results}")
                rss = proc_stats(srv.proc.pid)["rss"]
                print(f"RSS with six sessions' buffers written: {rss / MIB:.0f} MiB")
                f.check(rss >= rss0 + 6 * 200 * MIB * 0.95,
                        "the granted memory is not resident: the test proves nothing")
                f.check(srv.proc.poll() is None, "the server died")
                f.check(cg.oom_kills() == 0, f"{cg.oom_kills()} OOM kills in the cgroup")
                honest.beside(f, "six sessions of 200 MiB")
                for s in sessions:
                    s.close()
                sessions = []
                f.check(baseline.restored(), "counters not back to their baseline within 5 s "
                                             "of the sessions closing")
                honest.calm(f)
                honest.check(f)
                f.check(srv.proc.poll() is None and cg.oom_kills() == 0, "the server died")
        finally:
            for s in sessions:
                s.close()
            srv.stop()
            partner.stop()


def model_too_big(args, f, workdir):
    srv = start_server(args, workdir, extra=["--mem-budget", "512K"])
    try:
        baseline = hostile.Baseline(srv)
        tokens, _, err = hostile.tg_run(args, rpc=[srv.endpoint])
        line = next((l for l in err.splitlines() if "budget" in l), err[-600:])
        print(f"tg-run with --mem-budget 512K: {'OK' if tokens else 'failed'}: {line}")
        f.check(tokens is None, "tg-run should fail: the model does not fit the budget")
        f.check(srv.endpoint in line, "the error should name the server's endpoint")
        f.check(str(512 << 10) in line and "asked" in line and "--mem-budget" in line,
                "the error should name the bytes asked, the budget and --mem-budget")
        f.check(srv.proc.poll() is None, "the server died")
        f.check(baseline.restored(), "counters not back to their baseline within 5 s of tg-run "
                                     "leaving")
    finally:
        srv.stop()


# A model bigger than the pod: a synthetic F32 llama of ~320 MB (5 layers of 1024 x 2816, a
# vocabulary of 8000; tg-gguf writes it in a few seconds) against a server in a 256 MiB
# memory cgroup with default flags, whose budget comes from the cgroup alone.
POD_LIMIT = 256 * MIB
BIG_MODEL_DIMS = "1024,2816,5,8,8,8000"


def model_too_big_for_pod(args, f, workdir):
    tg_gguf = args.tg_gguf or os.path.join(os.path.dirname(os.path.dirname(args.tg_run)),
                                           "tg-gguf", "tg-gguf")
    if not os.access(tg_gguf, os.X_OK):
        f(f"{tg_gguf} (to write the big model) not found: pass --tg-gguf")
        return
    big = os.path.join(workdir, "too-big.gguf")
    p = subprocess.run([tg_gguf, "synth", big, "--dims", BIG_MODEL_DIMS, "--type", "f32",
                        "--threads", "2"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        f(f"tg-gguf synth failed: {p.stderr[-800:]}")
        return
    size = os.path.getsize(big)
    print(f"{big}: {size / MIB:.0f} MiB, in a {POD_LIMIT / MIB:.0f} MiB cgroup")
    f.check(size > POD_LIMIT, "the model should be bigger than the cgroup")
    with hostile.skip_unless_cgroup(POD_LIMIT) as cg:
        srv = start_server(args, workdir, prefix=cg.prefix)  # default flags: no --mem-budget.
        try:
            budget = int(srv.metrics().get("tg_mem_budget_bytes", 0))
            print(f"tg_mem_budget_bytes {budget} (from the cgroup alone)")
            f.check(0 < budget < POD_LIMIT, f"the budget {budget} should come from the cgroup")
            baseline = hostile.Baseline(srv)
            big_args = argparse.Namespace(**dict(vars(args), model=big))
            tokens, took, err = hostile.tg_run(big_args, rpc=[srv.endpoint], n=4)
            line = next((l for l in err.splitlines() if "budget" in l), err[-600:])
            print(f"tg-run of the big model: {'OK' if tokens else 'failed'} in {took:.1f} s: "
                  f"{line}")
            f.check(tokens is None, "tg-run should fail: the model does not fit the pod")
            f.check(srv.endpoint in line, "the error should name the server (host:port)")
            f.check(str(budget) in line, f"the error should name the budget {budget}")
            asked = re.search(r"(\d+) asked", line)
            f.check(asked is not None and size * 0.9 <= int(asked.group(1)) <= size,
                    f"the error should name the bytes asked (the model's weights, about {size})")
            f.check(srv.proc.poll() is None, "the server died")
            f.check(cg.oom_kills() == 0, f"{cg.oom_kills()} OOM kills in the cgroup")
            f.check(baseline.restored(), "counters not back to their baseline within 5 s of "
                                         "tg-run leaving")
            # The server still serves a model that fits.
            want, _, _ = hostile.tg_run(args)
            got, _, err = hostile.tg_run(args, rpc=[srv.endpoint])
            f.check(got is not None and got == want,
                    f"tg-run of a model that fits, after the refusal: {err[-800:]}")
            f.check(srv.proc.poll() is None and cg.oom_kills() == 0, "the server died after all")
        finally:
            srv.stop()


def zero_byte_buffers(args, f, workdir):
    total, per_batch, cap = 300000, 4096, 65536
    srv = start_server(args, workdir)
    partner = start_server(args, workdir, index=1)
    try:
        honest = hostile.Honest(args, srv, partner)
        honest.calm(f)
        baseline = hostile.Baseline(srv)
        rss0 = proc_stats(srv.proc.pid)["rss"]
        ok = refused = 0
        refusal = ""
        with Client(srv.endpoint) as c, c.session() as s:
            alloc = hostile.pb.SessionRequest(alloc_buffer=hostile.pb.AllocBuffer(device=0, size=0))
            t0 = time.time()
            sent = 0
            while sent < total:
                n = min(per_batch, total - sent)
                batch = hostile.pb.SessionRequest(batch=hostile.pb.Batch(commands=[alloc] * n))
                for i, cmd in enumerate(batch.batch.commands):
                    cmd.id = sent + i + 1
                s.send(batch)
                got = 0
                while got < n:
                    r = s.reply(120)
                    replies = r.batch.replies if r.HasField("batch") else [r]
                    for rep in replies:
                        if rep.code == 0:
                            ok += 1
                        else:
                            refused += 1
                            refusal = refusal or rep.message
                    got += len(replies)
                sent += n
            rss = proc_stats(srv.proc.pid)["rss"]
            m = srv.metrics()
            print(f"{total} zero-byte AllocBuffers in {time.time() - t0:.1f} s: {ok} granted, "
                  f"{refused} refused ({refusal}); RSS {rss0 / MIB:.0f} -> {rss / MIB:.0f} MiB, "
                  f"tg_buffers {m.get('tg_buffers')}, tg_mem_held_bytes "
                  f"{m.get('tg_mem_held_bytes')}")
            f.check(ok == cap and refused == total - cap, f"{cap} should be granted, the rest not")
            f.check(str(cap) in refusal and "--max-buffers-per-session" in refusal,
                    "the refusal should name the count, the cap and --max-buffers-per-session")
            # Each granted buffer is charged its bookkeeping; that charge must be honest.
            per_buffer = (rss - rss0) / max(ok, 1)
            print(f"resident per buffer: {per_buffer:.0f} bytes")
            f.check(rss - rss0 < 256 * MIB, "RSS grew without bound")
            f.check(m.get("tg_mem_held_bytes", 0) >= per_buffer * ok * 0.5,
                    "the buffers' bookkeeping is charged far below what it costs")
            honest.beside(f, f"a session holding {ok} buffers")
        hostile.settle(f, srv, baseline, honest, "the session ending")
    finally:
        srv.stop()
        partner.stop()


def client_share(args, f, workdir):
    """One client's sessions together, within --client-mem-limit: an attacker that opens four
    sessions, each taking 64 MiB pieces up to its --session-mem-limit, gets its client limit
    (512 MiB) in all, not the server's 1 GiB budget; the other client still gets its own share,
    and its tg-runs beside the attack are right and on time."""
    tokens_file, honest_token = hostile.write_client_tokens(workdir)
    flags = ["--mem-budget", "1G", "--session-mem-limit", "512M", "--client-tokens", tokens_file,
             "--client-mem-limit", "512M"]
    srv = start_server(args, workdir, extra=flags)
    partner = start_server(args, workdir, index=1, extra=flags)
    try:
        honest = hostile.Honest(args, srv, partner, token=honest_token)
        honest.calm(f)
        baseline = hostile.Baseline(srv)
        with Client(srv.endpoint, hostile.CLIENT_TOKENS["attacker"]) as c:
            sessions = [c.session() for _ in range(4)]
            granted, refusals = 0, []
            for s in sessions:
                for _ in range(16):
                    code, msg, _ = s.alloc(0, 64 * MIB)
                    if code != 0:
                        refusals.append((code, msg))
                        break
                    granted += 64 * MIB
            print(f"attacker, 4 sessions: {granted / MIB:.0f} MiB granted; first refusal: "
                  f"{refusals[0] if refusals else None}")
            f.check(granted == 512 * MIB, f"the attacker's sessions hold {granted / MIB:.0f} MiB "
                                          "together, not its 512 MiB client limit")
            f.check(len(refusals) == 4 and all(
                code == RESOURCE_EXHAUSTED and "client attacker" in msg
                and "--client-mem-limit" in msg for code, msg in refusals),
                "each session's refusal should be RESOURCE_EXHAUSTED naming the client and "
                "--client-mem-limit")
            # The other client's share is whole: 448 MiB in one session beside the attack.
            with Client(srv.endpoint, hostile.CLIENT_TOKENS["honest"]) as h, h.session() as hs:
                code, msg, _ = hs.alloc(0, 448 * MIB)
                print(f"the honest client's 448 MiB beside the attack: {code} {msg}")
                f.check(code == 0, f"the honest client was refused its share: {msg}")
            honest.beside(f, "a client holding its whole share in four sessions")
            for s in sessions:
                s.close()
        hostile.settle(f, srv, baseline, honest, "the attacker's sessions closing")
    finally:
        srv.stop()
        partner.stop()


CASES = {
    "alloc_past_budget": alloc_past_budget,
    "sessions_in_cgroup": sessions_in_cgroup,
    "model_too_big": model_too_big,
    "model_too_big_for_pod": model_too_big_for_pod,
    "zero_byte_buffers": zero_byte_buffers,
    "client_share": client_share,
}


def main():
    args = hostile.parse_args([("--case", dict(required=True, choices=sorted(CASES))),
                               ("--tg-gguf", dict(default=None, help="tg-gguf, for the big "
                                                  "model of model_too_big_for_pod"))])
    f = Failures()
    with tempfile.TemporaryDirectory(prefix="tg-hostile-mem-") as workdir:
        CASES[args.case](args, f, workdir)
    return f.exit_code()


if __name__ == "__main__":
    sys.exit(main())
