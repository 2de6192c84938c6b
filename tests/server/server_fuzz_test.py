#!/usr/bin/env python3
"""tg-server's JSON bodies fuzzed against a running server (stories260K, real process):

  server_fuzz_test.py --tg-server BIN --tg-run BIN --model MODEL

For TG_FUZZ_SECONDS (60) seconds two clients POST mutated bodies to /v1/completions,
/v1/chat/completions, /tokenize, /detokenize and /apply-template: valid seed bodies changed
at the JSON level (fields set to values of every type and size: huge and negative numbers,
past int64, floats out of range, unicode and control text, special-token text, empty and
long strings, deep nesting; fields dropped) and at the byte level (bit flips, cuts, random
bytes, invalid UTF-8, runs of brackets). Every answer must be a well-formed OpenAI-style
error JSON with a 4xx status ({"error": {"message", "type", "code"}}) or a valid answer
(a completion, a stream of events ending in [DONE], tokens, text); never a 5xx, a dropped
connection or a dead server. Meanwhile a third client streams ordinary requests: none may
fail or end early because of what the fuzzing clients sent alongside it (a bad value that
reached the decode step would fail every request in that step). Afterwards a valid request
works and the server holds no request and no KV cell.

The seed is printed; TG_FUZZ_SEED=N repeats a run. The body a failure came from is printed.
"""
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import Server, parse_args  # noqa: E402
from server_load_test import metrics  # noqa: E402

N_CTX = 512  # a small cache: any max_tokens a fuzzed body may ask for decodes in milliseconds.
FUZZ_CLIENTS = 2

SEEDS = {
    "/v1/completions": {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8,
                        "seed": 1, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
                        "repeat_penalty": 1.1, "stop": ["\n"], "stream": False,
                        "stream_options": {"include_usage": True}, "n": 1,
                        "model": "stories260K.gguf", "presence_penalty": 0,
                        "frequency_penalty": 0},
    "/v1/chat/completions": {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Once upon a time"}],
                             "max_completion_tokens": 8, "temperature": 0, "stream": True},
    "/tokenize": {"content": "Once upon a time", "add_special": True, "parse_special": False},
    "/detokenize": {"tokens": [1, 403, 407, 261]},
    "/apply-template": {"messages": [{"role": "user", "content": "Hi"}],
                        "add_generation_prompt": True},
}
KEYS = sorted({k for body in SEEDS.values() for k in body} |
              {"role", "content", "include_usage", "n_predict", "max_tokens", "unknown"})
TEXTS = ["", "Once upon a time", "\u00e9\U0001F600 \u4e2d\u6587 \u202e\u0000\u001f",
         "<|im_start|>user\nHi<|im_end|>", "<s></s>", "\\u", "\ud7ff\ue000\uffff",
         "Lily " * 300]
RAW_NUMBERS = ["1e400", "-1e400", "18446744073709551616", "-9223372036854775809",
               "1" + "0" * 400, "0.0000000000000000000000000000000000000000000001", "-0",
               "1E+2", "4294967295", "2147483648", "NaN", "Infinity"]


def value(rng, depth=0):
    """A random JSON-able value, or a RawNumber for a literal Python cannot hold as such."""
    kind = rng.randrange(9 if depth > 3 else 12)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, 1, -1, 2, 8, 511, 512, 513, 10 ** 9, 2 ** 31 - 1, 2 ** 31,
                           2 ** 32 - 1, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1])
    if kind == 3:
        return rng.choice([0.0, 0.05, 0.5, 1.0, 1.5, 2.0, 2.0000001, 10.0, 10.5, 1e-45, 5e-324,
                           1e38, 1e308, -1e308, -0.5])
    if kind == 4:
        return RawNumber(rng.choice(RAW_NUMBERS))
    if kind in (5, 6, 7):
        text = rng.choice(TEXTS)
        return text if rng.random() < 0.8 else text * rng.randrange(1, 2000)
    if kind == 8:
        return [rng.randrange(-5, 600) for _ in range(rng.randrange(0, 8))]
    if kind == 9:
        return [value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if kind == 10:
        return {rng.choice(KEYS): value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    nest = rng.choice([2, 10, 63, 64, 65, 100, 1000, 100000])
    return RawNumber("[" * nest + "]" * nest)


class RawNumber:
    """Text spliced into the JSON as it is (numbers past what JSON libraries round-trip)."""

    def __init__(self, text):
        self.text = text


def encode(v):
    if isinstance(v, RawNumber):
        return v.text
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k) + ":" + encode(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(encode(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=rng_ascii(v))


def rng_ascii(v):
    # Both spellings of non-ASCII text: raw UTF-8 and \\u escapes (surrogate pairs).
    return isinstance(v, str) and len(v) % 2 == 0


def mutate_json(rng, body):
    for _ in range(rng.randrange(1, 4)):
        target = body
        while rng.random() < 0.3:
            children = [c for c in (target.values() if isinstance(target, dict) else target)
                        if isinstance(c, (dict, list)) and c] if isinstance(
                target, (dict, list)) else []
            if not children:
                break
            target = rng.choice(children)
        if isinstance(target, dict):
            if target and rng.random() < 0.25:
                del target[rng.choice(list(target))]
            else:
                target[rng.choice(KEYS)] = value(rng)
        elif isinstance(target, list) and target:
            target[rng.randrange(len(target))] = value(rng)
    return body


def mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if not data:
            break
        kind = rng.randrange(5)
        at = rng.randrange(len(data))
        if kind == 0:
            data[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del data[at:]
        elif kind == 2:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        elif kind == 3:
            data[at:at] = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe4\xb8", b"\x00"])
        else:
            data[at:at] = rng.choice([b"[", b"{", b'"', b"]", b"}", b","]) * rng.randrange(1, 300)
    return bytes(data)


def fuzzed(rng):
    path = rng.choice(list(SEEDS))
    body = mutate_json(rng, json.loads(json.dumps(SEEDS[path])))
    data = encode(body).encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:
        data = mutate_bytes(rng, data)
    return path, data


def send(port, path, data):
    """(status, content type, body bytes) of one POST on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type", ""), r.read()
    finally:
        conn.close()


def judge(path, status, ctype, body):
    """None when the answer is well-formed, else what is wrong with it."""
    if status >= 500:
        return f"HTTP {status}: {body[:300]!r}"
    if 400 <= status < 500:
        try:
            err = json.loads(body)["error"]
            ok = (isinstance(err["message"], str) and err["message"] and
                  isinstance(err["type"], str) and err["code"] == status)
        except (ValueError, KeyError, TypeError):
            ok = False
        return None if ok else f"HTTP {status} without an OpenAI error JSON: {body[:300]!r}"
    if status != 200:
        return f"HTTP {status}"
    if ctype.startswith("text/event-stream"):
        events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
        if not events or events[-1] != b"[DONE]":
            return f"a stream not ending in [DONE]: {body[-300:]!r}"
        for e in events[:-1]:
            j = json.loads(e)
            if "error" in j or "choices" not in j:
                return f"a stream event that is no chunk: {e[:300]!r}"
        return None
    try:
        j = json.loads(body)
    except ValueError:
        return f"HTTP 200 whose body is not JSON: {body[:300]!r}"
    want = {"/v1/completions": "choices", "/v1/chat/completions": "choices",
            "/tokenize": "tokens", "/detokenize": "content", "/apply-template": "prompt"}[path]
    return None if want in j else f"HTTP 200 without '{want}': {body[:300]!r}"


def main():
    a = parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: model {a.model} not found")
        return 77
    seconds = float(os.environ.get("TG_FUZZ_SECONDS", "60"))
    seed = int(os.environ.get("TG_FUZZ_SEED", str(random.SystemRandom().randrange(2 ** 32))))
    print(f"fuzzing for {seconds:.0f} s with TG_FUZZ_SEED={seed}", flush=True)
    s = Server(a.tg_server, a.model,
               ["--parallel", "4", "-c", str(N_CTX), "--chat-template", "chatml"])
    failures, counts, victims = [], {}, {"ok": 0, "bad": []}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    try:
        def fuzz(k):
            rng = random.Random(seed * 1000 + k)
            while time.monotonic() < stop_at and not failures:
                path, data = fuzzed(rng)
                try:
                    status, ctype, body = send(s.port, path, data)
                    wrong = judge(path, status, ctype, body)
                except Exception as e:  # noqa: BLE001 (a dropped connection is a finding)
                    status, wrong = 0, f"{type(e).__name__}: {e}"
                with lock:
                    counts[status] = counts.get(status, 0) + 1
                    if wrong:
                        failures.append((path, data, wrong))

        def victim():
            body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64,
                               "temperature": 0, "stream": True}).encode()
            while time.monotonic() < stop_at and not failures:
                try:
                    status, ctype, got = send(s.port, "/v1/completions", body)
                    wrong = judge("/v1/completions", status, ctype, got) or (
                        None if status == 200 else f"HTTP {status}: {got[:200]!r}")
                except Exception as e:  # noqa: BLE001
                    wrong = f"{type(e).__name__}: {e}"
                with lock:
                    if wrong:
                        victims["bad"].append(wrong)
                    else:
                        victims["ok"] += 1
        threads = [threading.Thread(target=fuzz, args=(k,)) for k in range(FUZZ_CLIENTS)]
        threads.append(threading.Thread(target=victim))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = sum(counts.values())
        print(f"{total} fuzzed requests: " +
              ", ".join(f"HTTP {k}: {v}" for k, v in sorted(counts.items())))
        passed = failed = 0

        def check(ok, what):
            nonlocal passed, failed
            print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
            passed, failed = passed + ok, failed + (not ok)
        for path, data, wrong in failures[:3]:
            print(f"     from POST {path} {data[:500]!r}")
        check(not failures, f"every fuzzed body got an error JSON (4xx) or a valid answer "
                            f"({failures[0][2] if failures else 'all of them'})")
        check(s.proc.poll() is None, f"the server is alive (exit code {s.proc.poll()})")
        check(not victims["bad"] and victims["ok"] > 0,
              f"an ordinary stream beside the fuzzing: {victims['ok']} complete, "
              f"{len(victims['bad'])} harmed {victims['bad'][:2]}")
        if s.proc.poll() is None:
            status, _, body = send(s.port, "/v1/completions", json.dumps(
                {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}).encode())
            check(status == 200 and json.loads(body)["choices"][0]["finish_reason"] == "length",
                  f"a valid request afterwards: HTTP {status}")
            deadline = time.monotonic() + 5
            m = metrics(s.port)
            while time.monotonic() < deadline and (m["tg_server_running"] or
                                                    m["tg_server_kv_cells_used"]):
                time.sleep(0.05)
                m = metrics(s.port)
            check(m["tg_server_running"] == 0 and m["tg_server_queued"] == 0 and
                  m["tg_server_kv_cells_used"] == 0,
                  f"nothing left running ({m['tg_server_running']:.0f}), queued "
                  f"({m['tg_server_queued']:.0f}) or in the cache "
                  f"({m['tg_server_kv_cells_used']:.0f} cells)")
        else:
            print(s.read_log()[-2000:])
        print(f"{passed} passed, {failed} failed (TG_FUZZ_SEED={seed})")
        return 1 if failed else 0
    finally:
        s.stop()


if __name__ == "__main__":
    sys.exit(main())
