#!/usr/bin/env python3
"""The `openai` npm package, the client applications use, against tg-server (stories260K,
--chat-template chatml): completions and chat, whole and streamed, and the model list.

  openai_client_test.py --tg-server BIN --tg-run BIN --model MODEL

The client (openai@4) is installed once with npm into ~/.cache/tensorgrid/npm-openai; the
test is skipped, saying why, where node or npm is missing or the install fails. The texts must
be tg-run's greedy continuation (completions) and the completion of the prompt the template
renders (chat, from the server's /apply-template and /v1/completions). "N passed, M failed".
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import Server, parse_args, tg_run  # noqa: E402

SKIP = 77
PROMPT = "Once upon a time"


def openai_module():
    """The folder holding node_modules/openai, installed on first use; None (said) if not."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("skipped: node and npm are needed for the openai client")
        return None
    prefix = os.path.join(os.path.expanduser("~"), ".cache", "tensorgrid", "npm-openai")
    if not os.path.isdir(os.path.join(prefix, "node_modules", "openai")):
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund",
                            "--silent", "openai@4"], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(f"skipped: npm install openai@4 failed: {p.stderr.strip()[-300:]}")
            return None
    return prefix


def main():
    a = parse_args()
    module = openai_module()
    if module is None:
        return SKIP
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    s = Server(a.tg_server, a.model, ["--chat-template", "chatml"])
    try:
        rendered = json.loads(s.post("/apply-template", {
            "messages": [{"role": "user", "content": PROMPT}]})[1])["prompt"]
        chat_want = json.loads(s.post("/v1/completions", {
            "prompt": rendered, "max_tokens": 16, "temperature": 0})[1])["choices"][0]["text"]
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openai_client.js")
        p = subprocess.run(["node", script, module, str(s.port), os.path.basename(a.model),
                            PROMPT], capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(f"FAIL: the client exited {p.returncode}: {p.stderr.strip()[-1000:]}")
            return 1
        got = json.loads(p.stdout)
    finally:
        s.stop()
    want = tg_run(a.tg_run, a.model, PROMPT, 24, ["--temp", "0"])
    check(got["completion"] == want and got["finish_reason"] == "length",
          f"completions.create: tg-run's text {got['completion'][:40]!r}")
    check(got["usage"]["completion_tokens"] == 24, f"usage {got['usage']}")
    check(got["completion_stream"] == want, "completions.create(stream): the same text")
    check(got["chat"] == chat_want and got["chat_role"] == "assistant",
          f"chat.completions.create: the rendered prompt's completion {got['chat'][:40]!r}")
    check(got["chat_stream"] == chat_want, "chat.completions.create(stream): the same text")
    check(got["models"] == [os.path.basename(a.model)], f"models.list: {got['models']}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
