#!/usr/bin/env python3
"""tg-server under concurrent and sustained load and clients that leave (stories260K, real
processes):

  server_load_test.py --tg-server BIN --tg-run BIN --model MODEL [--requests N]

- 16 concurrent streaming clients against --parallel 8, 8 greedy and 8 sampled at 0.8 with
  fixed seeds, 48 tokens each: every stream complete (a finish_reason, then [DONE]) and its
  text equal to the same request's streamed alone, 3 rounds. The server runs --kv-type f32:
  with the default f16 cache a sequence's logits depend on the other sequences batched with
  it (f16 rounding of attention values magnifies the float noise of a different summation
  order), and about one round in six has a stream that differs from its answer alone.
- burst: 64 clients connect at the same moment, each asking a short completion: all answered.
- soak: N (1000) requests, 16 at a time, against --parallel 8 with a chat template: greedy
  completions whole and streamed, chat completions, streams whose client closes the socket
  after the first event, and bad bodies. Every answer is checked (the greedy texts equal the
  request's answer alone, a bad body gets a 400 error JSON). VmRSS and Threads of the server
  process are read from /proc after every 100 requests (between batches, when none is in
  flight); after the warm-up (the first 200) RSS must stay within +10% (RSS_SLACK) of the
  warm-up value and the thread count within +4 (THREAD_SLACK). At the end the server runs
  nothing, queues nothing and holds no KV cell, and still answers.
- a client gone mid-stream frees its slot: with --parallel 1, one stream decoding 8000
  tokens (seconds) and a second request queued behind it, the first client closes its
  socket; the queued request's first token must come within its own time-to-first-token
  alone plus STEPS_ALLOWED decode steps (the step time measured on this machine from a
  normal request) plus DETECT_SLACK_S for the HTTP layer to see the closed socket. Without
  the slot freed it would wait for the abandoned request's seconds.
One line per check, then "N passed, M failed".
"""
import argparse
import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import PROMPTS, Server  # noqa: E402

SOAK_BATCH = 100          # requests between two /proc samples.
SOAK_CONCURRENCY = 16     # clients at once (twice --parallel: half of them queue).
WARMUP = 200              # requests before the reference sample.
RSS_SLACK = 0.10          # RSS may grow this fraction over the warm-up value (allocator noise).
THREAD_SLACK = 4          # threads may grow by this many over the warm-up value.
SOAK_TOKENS = 8           # max_tokens of the soak's requests: short, so 1000 take seconds.
STEPS_ALLOWED = 5         # decode steps the queued request may wait after the slot frees.
DETECT_SLACK_S = 0.10     # for the server to see the closed socket and wake its threads.
LONG_TOKENS = 8000        # the abandoned request's max_tokens (about 3 s of decoding).
CONCURRENT_ROUNDS = 3     # rounds of 16 concurrent streams.
BURST = 64                # clients that connect at the same moment.


def proc_stats(pid):
    """{"rss": bytes resident, "threads": count} of a running process, from /proc."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
    return out


def post(port, path, body=None, raw=None):
    """One POST on a fresh connection: (status, parsed JSON body or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read()
        try:
            return r.status, json.loads(text)
        except ValueError:
            return r.status, None
    finally:
        conn.close()


def sse_request(port, path, body):
    """The raw HTTP/1.1 bytes of a streaming POST."""
    data = json.dumps(dict(body, stream=True)).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


class RawStream:
    """A streaming request on a raw socket: when its first event came; closable mid-stream."""

    def __init__(self, port, body, path="/v1/completions"):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sent = time.monotonic()
        self.sock.sendall(sse_request(port, path, body))
        self.buf = b""
        self.first = None  # time.monotonic() of the first `data: {` event.

    def wait_first_event(self):
        while b"data: {" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"stream ended before its first event: {self.buf[:300]!r}")
            self.buf += chunk
        self.first = time.monotonic()
        return self

    def read_all(self):
        """The rest of the answer; the concatenated texts of its events, whether it ended in
        a finish_reason and `data: [DONE]`."""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        self.sock.close()
        return events_text(self.buf)

    def close(self):
        self.sock.close()


def events_text(raw):
    """(text, finished) of a server-sent-event stream's bytes (chunked framing and all)."""
    text, finish, done = "", None, False
    for line in raw.split(b"\n"):
        line = line.strip()
        if line == b"data: [DONE]":
            done = True
        elif line.startswith(b"data: {"):
            choice = json.loads(line[6:])["choices"][0]
            text += choice.get("text", choice.get("delta", {}).get("content", ""))
            finish = choice.get("finish_reason") or finish
    return text, finish is not None and done


def stream_text(port, body, path="/v1/completions"):
    return RawStream(port, body, path).read_all()


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        out = {}
        for line in conn.getresponse().read().decode().splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, value = line.split()
                out[name] = float(value)
        return out
    finally:
        conn.close()


def concurrent_streams(a, check):
    s = Server(a.tg_server, a.model, ["--parallel", "8", "--kv-type", "f32"])
    try:
        bodies = [{"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 48,
                   **({"temperature": 0} if i < 8 else {"temperature": 0.8, "seed": 100 + i})}
                  for i in range(16)]
        alone = [stream_text(s.port, b) for b in bodies]
        wrong = []
        for round_ in range(CONCURRENT_ROUNDS):
            results = {}

            def client(i):
                results[i] = stream_text(s.port, bodies[i])
            threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wrong += [(round_, i, results.get(i), alone[i][0]) for i in range(16)
                      if results.get(i) != alone[i] or not results[i][1]]
        check(not wrong and all(finished for _, finished in alone),
              f"16 concurrent streams against --parallel 8 (8 greedy, 8 seeded at 0.8), "
              f"{CONCURRENT_ROUNDS} rounds: each complete and equal to its answer alone "
              f"(wrong: {wrong[:3]})")
    finally:
        s.stop()


def burst(a, check):
    """BURST clients connect at the same moment (a barrier) and each asks one short completion:
    every one must be answered. A listen backlog of 5 (cpp-httplib's default) had the kernel
    reset most of 64 such connections before the server accepted them."""
    s = Server(a.tg_server, a.model, ["--parallel", "8"])
    try:
        gate = threading.Barrier(BURST)
        answers = [None] * BURST

        def client(i):
            gate.wait()
            try:
                answers[i] = post(s.port, "/v1/completions",
                                  {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 4,
                                   "temperature": 0})[0]
            except OSError as e:
                answers[i] = repr(e)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(BURST)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [a_ for a_ in answers if a_ != 200]
        check(not failed, f"{BURST} clients connecting at once: every one answered 200 "
                          f"({len(failed)} not: {failed[:3]})")
    finally:
        s.stop()


def soak(a, check):
    s = Server(a.tg_server, a.model, ["--parallel", "8", "--chat-template", "chatml"])
    try:
        port = s.port

        def greedy(p):
            return {"prompt": p, "max_tokens": SOAK_TOKENS, "temperature": 0}

        def chat(p):
            return {"messages": [{"role": "user", "content": p}], "max_tokens": SOAK_TOKENS,
                    "temperature": 0}
        alone = {p: post(port, "/v1/completions", greedy(p))[1]["choices"][0]["text"]
                 for p in PROMPTS}
        chat_alone = {p: post(port, "/v1/chat/completions", chat(p))[1]["choices"][0]
                      ["message"]["content"] for p in PROMPTS}
        bad_bodies = [b"{bad", b'{"prompt": 5}', b'{"prompt": "x", "max_tokens": -3}',
                      b"[1, 2]", b'{"prompt": "x", "temperature": "hot"}']

        def one(i):
            """Request i of the soak: None when its answer is right, else what was wrong."""
            p = PROMPTS[i % len(PROMPTS)]
            kind = i % 5
            if kind == 0:
                status, body = post(port, "/v1/completions", greedy(p))
                got = body["choices"][0]["text"] if status == 200 else f"HTTP {status} {body}"
                return None if got == alone[p] else f"whole {p!r}: {got!r} != {alone[p]!r}"
            if kind == 1:
                text, finished = stream_text(port, greedy(p))
                return (None if text == alone[p] and finished else
                        f"stream {p!r}: {text!r} finished={finished}")
            if kind == 2:
                status, body = post(port, "/v1/chat/completions", chat(p))
                got = (body["choices"][0]["message"]["content"] if status == 200 else
                       f"HTTP {status} {body}")
                return None if got == chat_alone[p] else f"chat {p!r}: {got!r}"
            if kind == 3:  # gone after the first event; max_tokens long enough to be mid-stream.
                RawStream(port, dict(greedy(p), max_tokens=400)).wait_first_event().close()
                return None
            status, body = post(port, "/v1/completions", raw=bad_bodies[(i // 5) % len(bad_bodies)])
            ok = status == 400 and isinstance(body, dict) and "message" in body.get("error", {})
            return None if ok else f"bad body {i}: HTTP {status} {body}"

        errors, samples = [], []
        start = time.monotonic()
        for first in range(0, a.requests, SOAK_BATCH):
            ids = list(range(first, min(first + SOAK_BATCH, a.requests)))
            lock = threading.Lock()

            def worker():
                while True:
                    with lock:
                        if not ids:
                            return
                        i = ids.pop()
                    try:
                        wrong = one(i)
                    except Exception as e:  # noqa: BLE001 (any failure is the test's to report)
                        wrong = f"request {i}: {type(e).__name__}: {e}"
                    if wrong:
                        with lock:
                            errors.append(wrong)
            threads = [threading.Thread(target=worker) for _ in range(SOAK_CONCURRENCY)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            samples.append((first + SOAK_BATCH, proc_stats(s.proc.pid)))
        took = time.monotonic() - start
        check(not errors, f"soak: {a.requests} requests in {took:.1f} s, 16 at a time, every "
                          f"answer right ({len(errors)} wrong: {errors[:3]})")
        print("     after  RSS(MiB) threads")
        for n, st in samples:
            print(f"     {n:5d}  {st['rss'] / 2**20:8.1f} {st['threads']:7d}")
        ref = next((st for n, st in samples if n >= WARMUP), samples[-1])
        later = [st for n, st in samples if n > WARMUP]
        rss_max = max([st["rss"] for st in later] or [ref["rss"]])
        thr_max = max([st["threads"] for st in later] or [ref["threads"]])
        check(rss_max <= ref["rss"] * (1 + RSS_SLACK),
              f"RSS flat after the warm-up: {ref['rss'] / 2**20:.1f} MiB at {WARMUP}, at most "
              f"{rss_max / 2**20:.1f} MiB after (allowed +{RSS_SLACK:.0%})")
        check(thr_max <= ref["threads"] + THREAD_SLACK,
              f"threads flat after the warm-up: {ref['threads']} at {WARMUP}, at most {thr_max} "
              f"after (allowed +{THREAD_SLACK})")
        # The abandoned streams' slots and cells were given back (the gauges follow the
        # decode thread's steps: give it a moment).
        deadline = time.monotonic() + 5
        m = metrics(port)
        while time.monotonic() < deadline and (m["tg_server_running"] or m["tg_server_queued"] or
                                                m["tg_server_kv_cells_used"]):
            time.sleep(0.05)
            m = metrics(port)
        check(m["tg_server_running"] == 0 and m["tg_server_queued"] == 0 and
              m["tg_server_kv_cells_used"] == 0,
              f"idle after the soak: running {m['tg_server_running']:.0f}, queued "
              f"{m['tg_server_queued']:.0f}, KV cells used {m['tg_server_kv_cells_used']:.0f}")
        status, body = post(port, "/v1/completions", greedy(PROMPTS[0]))
        check(status == 200 and body["choices"][0]["text"] == alone[PROMPTS[0]],
              "still serving after the soak")
    finally:
        s.stop()


def abandoned_slot(a, check):
    s = Server(a.tg_server, a.model, ["--parallel", "1", "-c", str(LONG_TOKENS + 192)])
    try:
        port = s.port
        queued_body = {"prompt": PROMPTS[2], "max_tokens": 8, "temperature": 0}
        # This machine's decode step and the queued request's time to its first token alone.
        n = 256
        r = RawStream(port, {"prompt": PROMPTS[0], "max_tokens": n, "temperature": 0})
        r.wait_first_event()
        text, _ = r.read_all()
        step = (time.monotonic() - r.first) / (n - 1)
        ttfts = []
        for _ in range(5):
            q = RawStream(port, queued_body).wait_first_event()
            ttfts.append(q.first - q.sent)
            want, _ = q.read_all()
        ttft = sorted(ttfts)[len(ttfts) // 2]
        bound = ttft + STEPS_ALLOWED * step + DETECT_SLACK_S

        long = RawStream(port, {"prompt": PROMPTS[0], "max_tokens": LONG_TOKENS,
                                "temperature": 0}).wait_first_event()
        queued = RawStream(port, queued_body)
        deadline = time.monotonic() + 10
        while metrics(port)["tg_server_queued"] < 1 and time.monotonic() < deadline:
            time.sleep(0.002)
        m = metrics(port)
        check(m["tg_server_queued"] == 1 and m["tg_server_running"] == 1,
              f"a second request queued behind the decoding one (queued "
              f"{m['tg_server_queued']:.0f}, running {m['tg_server_running']:.0f})")
        closed = time.monotonic()
        long.close()
        queued.wait_first_event()
        waited = queued.first - closed
        got, finished = queued.read_all()
        check(waited <= bound and got == want and finished,
              f"a client gone mid-stream frees its slot: the queued request's first token "
              f"{waited * 1000:.1f} ms after the close (allowed {bound * 1000:.1f} ms: alone "
              f"{ttft * 1000:.1f} ms + {STEPS_ALLOWED} steps of {step * 1000:.2f} ms + "
              f"{DETECT_SLACK_S * 1000:.0f} ms; the abandoned request had ~{LONG_TOKENS} "
              f"tokens to go), answer {'right' if got == want else repr(got)}")
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-server", required=True)
    ap.add_argument("--tg-run", required=True)  # taken as by every server test; not used.
    ap.add_argument("--model", required=True)
    ap.add_argument("--tg-gguf", default=None)  # as above.
    ap.add_argument("--requests", type=int, default=1000)
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: model {a.model} not found")
        return 77
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        passed, failed = passed + ok, failed + (not ok)

    started = time.monotonic()
    concurrent_streams(a, check)
    burst(a, check)
    soak(a, check)
    abandoned_slot(a, check)
    print(f"{passed} passed, {failed} failed ({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
