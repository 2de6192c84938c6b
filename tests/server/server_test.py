#!/usr/bin/env python3
"""tg-server against real HTTP clients (urllib) on loopback, stories260K:

  server_test.py --tg-server BIN --tg-run BIN --model MODEL

- /v1/completions with temperature 0, and with a seed at 0.8, gives tg-run's text for the
  same prompt and settings (the independent path: one sequence, LlamaSession);
- the same streamed as server-sent events: the deltas add up to the text, then a finish
  chunk, the usage chunk when asked, and `data: [DONE]`; `stop` strings end the text;
- bad input gets an OpenAI-style error and the server keeps serving: malformed JSON, wrong
  types, max_tokens negative and past the context, a too-long prompt, an unknown model, a
  100 MB body (413), and (--api-key-file) a missing or wrong key (401);
- /health, /v1/models, /tokenize + /detokenize, /metrics.
(16 concurrent streams, a client gone mid-stream, 1000 requests' RSS and threads:
server_load_test.py; fuzzed bodies: server_fuzz_test.py.)
One line per check, then "N passed, M failed".
"""
import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went", "One day, a big",
           "The sun was", "Tom had a red", "In the park", "Sue wanted to"]


class Server:
    def __init__(self, binary, model, extra, tls_ca=None):
        """tls_ca: the CA file that signed the --ssl-cert in `extra`, or an ssl.SSLContext
        (HTTPS then)."""
        self.scheme = "https" if tls_ca else "http"
        self.context = (tls_ca if isinstance(tls_ca, ssl.SSLContext) or not tls_ca else
                        ssl.create_default_context(cafile=tls_ca))
        self.work = tempfile.mkdtemp()
        port_file = os.path.join(self.work, "port")
        self.log = open(os.path.join(self.work, "log"), "w+")
        env = {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}
        self.proc = subprocess.Popen([binary, "-m", model, "--port", "0", "--port-file", port_file,
                                      "-t", "1"] + extra, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
                self.port = int(open(port_file).read())
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"tg-server exited: {self.read_log()}")
            time.sleep(0.05)
        while self.get("/health")[0] != 200:
            if time.time() > deadline:
                raise RuntimeError("tg-server never became healthy")
            time.sleep(0.05)

    @property
    def url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def read_log(self):
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None, raw=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        # JSON as OpenAI clients send it (a form-encoded body has a smaller size limit).
        req = urllib.request.Request(f"{self.url}{path}", data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120, context=self.context) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path, headers=None):
        try:
            return self.request("GET", path, headers=headers)
        except (urllib.error.URLError, ConnectionError):
            return 0, ""

    def post(self, path, body, headers=None):
        return self.request("POST", path, body, headers)

    def stream(self, body):
        """POSTs a streaming completion; the data lines' JSON (and the final '[DONE]')."""
        req = urllib.request.Request(f"{self.url}/v1/completions",
                                     data=json.dumps(dict(body, stream=True)).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(req, timeout=120, context=self.context) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: "):
                    payload = line[len("data: "):]
                    events.append(payload if payload == "[DONE]" else json.loads(payload))
        return events

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def tg_run(binary, model, prompt, n, extra):
    env = {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}
    p = subprocess.run([binary, "-m", model, "-p", prompt, "-n", str(n), "--json", "-t", "1"] +
                       extra, capture_output=True, text=True, env=env, timeout=120)
    return json.loads(p.stdout)["text"]


def parse_args():
    """The arguments every server test takes: --tg-server, --tg-run, --model, and --tg-gguf
    (for the tests that write a model)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-server", required=True)
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tg-gguf", default=None)
    return ap.parse_args()


class Checks:
    """One "ok"/"FAIL" line per check(ok, what), counted; summary() prints "N passed, M
    failed" and returns the exit code (1 when any failed)."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        self.passed += bool(ok)
        self.failed += not ok

    def summary(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def model_missing(model):
    """True, after saying so, when the test model is absent (the test then exits 77)."""
    if os.path.exists(model):
        return False
    print(f"skipped: model {model} not found")
    return True


def main():
    a = parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: model {a.model} not found")
        return 77
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    def text_of(status_body):
        status, body = status_body
        return json.loads(body)["choices"][0]["text"] if status == 200 else f"HTTP {status} {body}"

    s = Server(a.tg_server, a.model, ["--parallel", "8"])
    try:
        greedy = {"prompt": PROMPTS[0], "max_tokens": 32, "temperature": 0}
        got = text_of(s.post("/v1/completions", greedy))
        want = tg_run(a.tg_run, a.model, PROMPTS[0], 32, ["--temp", "0"])
        check(got == want, f"greedy completion = tg-run's: {got[:50]!r}")
        sampled = text_of(s.post("/v1/completions", {"prompt": PROMPTS[1], "max_tokens": 32,
                                                     "temperature": 0.8, "seed": 7}))
        want = tg_run(a.tg_run, a.model, PROMPTS[1], 32, ["--temp", "0.8", "--seed", "7"])
        check(sampled == want, f"seeded sampled completion = tg-run --seed 7's: {sampled[:50]!r}")
        events = s.stream(dict(greedy, stream_options={"include_usage": True}))
        deltas = "".join(e["choices"][0]["text"] for e in events[:-2] if e != "[DONE]")
        check(deltas == got and events[-1] == "[DONE]" and
              events[-2]["usage"]["completion_tokens"] == 32 and
              events[-3]["choices"][0]["finish_reason"] == "length",
              f"streamed: {len(events)} events add up to the text, usage, [DONE]")
        stopped = text_of(s.post("/v1/completions", dict(greedy, stop=["Lily"])))
        check(stopped == got.split("Lily")[0], f"stop string ends the text: {stopped!r}")

        # Errors: the server answers each and keeps serving.
        for body, raw, code, what in [
                (None, b"{bad", 400, "malformed JSON"),
                ({"prompt": 5}, None, 400, "a prompt that is no string"),
                ({"prompt": "x", "max_tokens": -1}, None, 400, "negative max_tokens"),
                ({"prompt": "x", "max_tokens": 10 ** 9}, None, 400, "huge max_tokens"),
                ({"prompt": "x", "temperature": "hot"}, None, 400, "temperature not a number"),
                ({"prompt": "once " * 5000, "max_tokens": 4}, None, 400, "too long a prompt"),
                ({"prompt": "x", "model": "gpt-9"}, None, 404, "an unknown model"),
                (None, b"x" * (100 << 20), 413, "a 100 MB body")]:
            status, text = s.request("POST", "/v1/completions", body, raw=raw)
            err = json.loads(text).get("error", {}) if text.startswith("{") else {}
            check(status == code and "message" in err,
                  f"{what}: HTTP {status} {err.get('message', text[:60])!r}")
        check(text_of(s.post("/v1/completions", greedy)) == got, "still serving after the errors")
        status, health = s.get("/health")
        check(status == 200 and json.loads(health)["status"] == "ok", "/health: ok")
        status, models = s.get("/v1/models")
        check(json.loads(models)["data"][0]["id"] == os.path.basename(a.model), "/v1/models")
        toks = json.loads(s.post("/tokenize", {"content": PROMPTS[0]})[1])["tokens"]
        back = json.loads(s.post("/detokenize", {"tokens": toks})[1])["content"]
        check(back.strip() == PROMPTS[0], f"/tokenize + /detokenize: {toks} -> {back!r}")
        metrics = s.get("/metrics")[1]
        check('tg_server_requests_total{status="400"}' in metrics and
              "tg_server_generated_tokens_total" in metrics, "/metrics counts requests and tokens")
    finally:
        s.stop()

    # Chat through a built-in template: the completion of the rendered prompt; streamed too.
    s = Server(a.tg_server, a.model, ["--chat-template", "chatml"])
    try:
        messages = [{"role": "system", "content": "You tell stories."},
                    {"role": "user", "content": "Once upon a time"}]
        status, body = s.post("/apply-template", {"messages": messages})
        prompt = json.loads(body).get("prompt", "")
        check(status == 200 and prompt.startswith("<|im_start|>system\nYou tell stories.") and
              prompt.endswith("<|im_start|>assistant\n"), f"/apply-template: {prompt!r}")
        want = text_of(s.post("/v1/completions", {"prompt": prompt, "max_tokens": 16,
                                                  "temperature": 0}))
        status, body = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 16,
                                                       "temperature": 0})
        reply = json.loads(body)["choices"][0]["message"] if status == 200 else {}
        check(reply.get("role") == "assistant" and reply.get("content") == want,
              f"chat completion = the rendered prompt's completion: {reply.get('content')!r}")
        req = urllib.request.Request(
            f"http://127.0.0.1:{s.port}/v1/chat/completions", method="POST",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"messages": messages, "max_tokens": 16, "temperature": 0,
                             "stream": True}).encode())
        deltas = []
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.decode().strip()
                if line.startswith("data: {"):
                    deltas.append(json.loads(line[6:])["choices"][0]["delta"].get("content", ""))
        check("".join(deltas) == want, "chat streamed as chat.completion.chunk deltas")
    finally:
        s.stop()
    bad = os.path.join(tempfile.mkdtemp(), "bad.jinja")
    with open(bad, "w") as f:
        f.write("{% for m in messages %}\n{{ m.content | frobnicate }}{% endfor %}")
    p = subprocess.run([a.tg_server, "-m", a.model, "--port", "0", "--chat-template-file", bad],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and "frobnicate" in p.stderr and "line 2" in p.stderr,
          f"a template with an unknown filter fails at start-up: {p.stderr.strip()[-120:]!r}")

    # API key.
    key_file = os.path.join(tempfile.mkdtemp(), "key")
    with open(key_file, "w") as f:
        f.write("s3cret\n")
    s = Server(a.tg_server, a.model, ["--api-key-file", key_file])
    try:
        none = s.post("/v1/completions", greedy)[0]
        wrong = s.post("/v1/completions", greedy, {"Authorization": "Bearer nope"})[0]
        right = s.post("/v1/completions", greedy, {"Authorization": "Bearer s3cret"})[0]
        check(none == 401 and wrong == 401 and right == 200,
              f"API key: none {none}, wrong {wrong}, right {right}")
    finally:
        s.stop()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
