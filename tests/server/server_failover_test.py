#!/usr/bin/env python3
"""tg-server --rpc-failover against real processes on loopback, stories260K:

  server_failover_test.py --tg-server BIN --tg-run BIN --model MODEL   (TG_RPC_SERVER_BIN set)

- the reference: a tg-server on the local CPU (no rpc-server, no kill) answers 4 greedy
  completions of N tokens; tg-run's text for the first prompt is checked against it too;
- failover: tg-server --rpc-failover -sm layer over 3 rpc-servers (one CPU device each), the
  same 4 completions streamed at once; rpc-server 1 (the middle layers) is killed with -9 as
  soon as every stream has had a few chunks (each still mid-stream, checked). Every stream
  completes, its text equal to the reference's (nothing twice, nothing lost); stderr has one
  recovery line naming the killed server, the plan left (servers 0 and 2) and "4 requests
  continue"; /metrics tg_server_failovers_total is 1; a new request afterwards gets the
  reference's text;
- off: the same without --rpc-failover: every stream ends with an error event naming the
  killed server, tg_server_failovers_total is 0, the server keeps serving (/health 200), and a
  new request fails (5xx: 503, the server is unavailable) naming the killed server, since the
  plan still holds its layers;
- last: --rpc-failover over one rpc-server, killed the same way: no device is left, so every
  stream ends with an error saying so and naming it, and so does a new request; /health 200.
Skipped (77, saying why) without the model or the rpc-server binary.
One line per check, then "N passed, M failed".
"""
import json
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rpc"))
from server_test import Checks, Server, model_missing, parse_args, tg_run  # noqa: E402
from rpc_cluster import Cluster  # noqa: E402

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went", "One day, a big"]
N = 400            # tokens each: the demo model is fast, so the streams must be long.
KILL_CHUNKS = 2    # chunks every stream has had before the kill.
CTX = ["-c", "2048", "--parallel", "4"]
RECOVERY_RE = re.compile(r"tg-server: rpc-server (\S+) lost at step (\d+) \((.*)\); recovered in "
                         r"([0-9.]+) s, now on (.*), (\d+) requests continue$", re.M)


def counter(server, name):
    m = re.search(rf"^{name} (\d+)$", server.get("/metrics")[1], re.M)
    return int(m.group(1)) if m else -1


class Stream(threading.Thread):
    """One streamed greedy completion, read as it comes: its text, chunks, error, [DONE]."""

    def __init__(self, server, prompt, cond):
        super().__init__(daemon=True)
        self.server, self.prompt, self.cond = server, prompt, cond
        self.text, self.chunks, self.error, self.done, self.exc = "", 0, None, False, None

    def run(self):
        body = {"prompt": self.prompt, "max_tokens": N, "temperature": 0, "stream": True}
        req = urllib.request.Request(f"{self.server.url}/v1/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                for line in r:
                    line = line.decode().strip()
                    if not line.startswith("data: "):
                        continue
                    payload = line[len("data: "):]
                    if payload == "[DONE]":
                        break
                    event = json.loads(payload)
                    with self.cond:
                        if "error" in event:
                            self.error = event["error"].get("message", str(event))
                        else:
                            self.text += event["choices"][0].get("text", "")
                            self.chunks += 1
                        self.cond.notify_all()
        except Exception as e:  # noqa: BLE001 -- reported as a failed check.
            self.exc = repr(e)
        with self.cond:
            self.done = True
            self.cond.notify_all()


def streams_with_kill(server, cluster, victim, check, label):
    """Starts the 4 streams, kills `victim` once each has KILL_CHUNKS chunks, and waits for
    them; the streams."""
    cond = threading.Condition()
    streams = [Stream(server, p, cond) for p in PROMPTS]
    for s in streams:
        s.start()
    with cond:
        cond.wait_for(lambda: all(s.chunks >= KILL_CHUNKS or s.done for s in streams), 60)
        mid = all(s.chunks >= KILL_CHUNKS and not s.done for s in streams)
        cluster.kill(victim)
        at_kill = [len(s.text) for s in streams]
    check(mid, f"{label}: rpc-server {victim} killed with every stream mid-way "
               f"(chars so far {at_kill})")
    for s in streams:
        s.join(120)
    check(all(s.done and s.exc is None for s in streams),
          f"{label}: every stream ended: {[s.exc for s in streams if s.exc]}")
    return streams


def main():
    a = parse_args()
    if model_missing(a.model):
        return 77
    rpc_server = os.environ.get("TG_RPC_SERVER_BIN", "")
    if not os.path.exists(rpc_server):
        print(f"skipped: rpc-server binary {rpc_server!r} not found (set TG_RPC_SERVER_BIN)")
        return 77
    check = Checks()

    ref = Server(a.tg_server, a.model, CTX)
    try:
        want = []
        for p in PROMPTS:
            status, body = ref.post("/v1/completions", {"prompt": p, "max_tokens": N,
                                                        "temperature": 0})
            want.append(json.loads(body)["choices"][0]["text"] if status == 200 else
                        f"HTTP {status} {body}")
    finally:
        ref.stop()
    check(want[0] == tg_run(a.tg_run, a.model, PROMPTS[0], N, ["--temp", "0"]),
          f"reference: the local server's text is tg-run's ({len(want[0])} chars)")

    for label in ("failover", "off", "last"):
        failover = label != "off"
        n = 1 if label == "last" else 3
        victim = n // 2
        with Cluster(rpc_server, n=n, devices=1) as c:
            devs = sum((c.remote_devices(i) for i in range(n)), [])
            extra = CTX + ["-sm", "layer" if n > 1 else "none", "--rpc", ",".join(c.endpoints),
                           "--device", ",".join(devs)] + (["--rpc-failover"] if failover else [])
            s = Server(a.tg_server, a.model, extra)
            try:
                streams = streams_with_kill(s, c, victim, check, label)
                lost = c.endpoints[victim]
                log = s.read_log()
                lines = RECOVERY_RE.findall(log)
                if label == "last":
                    gone = "no other device is left"
                    check(all(st.error is not None and lost in st.error and gone in st.error
                              for st in streams),
                          f"{label}: every stream ends with an error naming {lost} and saying "
                          f"{gone!r}: {[st.error for st in streams]}")
                    status, body = s.post("/v1/completions", {"prompt": PROMPTS[2],
                                                              "max_tokens": 8, "temperature": 0})
                    check(status >= 500 and gone in body and s.get("/health")[0] == 200,
                          f"{label}: a new request fails the same way, /health 200: "
                          f"{status} {body[:200]}")
                    check(not lines and counter(s, "tg_server_failovers_total") == 0,
                          f"{label}: no recovery line, tg_server_failovers_total 0")
                elif failover:
                    for i, st in enumerate(streams):
                        check(st.error is None and st.text == want[i],
                              f"{label}: stream {i} completes with the reference's text "
                              f"({len(st.text)} vs {len(want[i])} chars, error {st.error})")
                    check(len(lines) == 1 and lines[0][0] == lost and lines[0][5] == "4" and
                          lost not in lines[0][4] and c.endpoints[0] in lines[0][4] and
                          c.endpoints[2] in lines[0][4],
                          f"{label}: one recovery line naming {lost}, the plan left and 4 "
                          f"requests: {lines or log[-1500:]}")
                    check(counter(s, "tg_server_failovers_total") == 1,
                          f"{label}: tg_server_failovers_total 1")
                    status, body = s.post("/v1/completions", {"prompt": PROMPTS[2],
                                                              "max_tokens": N, "temperature": 0})
                    got = json.loads(body)["choices"][0]["text"] if status == 200 else body
                    check(got == want[2], f"{label}: a new request gets the reference's text")
                else:
                    check(all(st.error is not None and lost in st.error for st in streams),
                          f"{label}: every stream ends with an error naming {lost}: "
                          f"{[st.error for st in streams]}")
                    check(not lines and counter(s, "tg_server_failovers_total") == 0,
                          f"{label}: no recovery line, tg_server_failovers_total 0")
                    check(s.get("/health")[0] == 200 and s.proc.poll() is None,
                          f"{label}: the server keeps serving (/health 200)")
                    status, body = s.post("/v1/completions", {"prompt": PROMPTS[2],
                                                              "max_tokens": 8, "temperature": 0})
                    check(status >= 500 and lost in body,
                          f"{label}: a new request fails naming {lost}: {status} {body[:200]}")
            finally:
                s.stop()
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
