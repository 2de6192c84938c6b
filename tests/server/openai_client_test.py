#!/usr/bin/env python3
"""Real clients against tg-server: the `openai` npm package applications use (on Node) and
curl, for completions and chat, whole and streamed, greedy and with a seed, on stories260K
(--chat-template chatml) and on a synthetic Q8_0 model whose GGUF carries its own chat
template (tg-gguf synth --chat-template; the server is given no template flag).

  openai_client_test.py --tg-server BIN --tg-run BIN --model MODEL --tg-gguf BIN

Every text must be tg-run's with the same sampling (--temp 0, or --temp 0.8 -s 7):
completions tg-run's continuation of the prompt, chat tg-run's continuation of the prompt
the template renders, which /apply-template must give as written out here. The npm client
(openai@4) is installed once with npm into ~/.cache/tensorgrid/npm-openai; each client is
skipped, saying why, where node/npm (or the install) or curl is missing, and the whole test
(77) when both are. One line per check, then "N passed, M failed".
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import Checks, Server, model_missing, parse_args, tg_run  # noqa: E402

SKIP = 77
PROMPT = "Once upon a time"
# (request fields, the tg-run flags that sample the same way)
SAMPLINGS = [({"temperature": 0}, ["--temp", "0"]),
             ({"temperature": 0.8, "seed": 7}, ["--temp", "0.8", "-s", "7"])]
# ChatML as a model's GGUF would carry it.
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
RENDERED = f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n"


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


def npm_client(module, port, model, sampling):
    """openai_client.js's texts, or an error string."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openai_client.js")
    p = subprocess.run(["node", script, module, str(port), model, PROMPT, json.dumps(sampling)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return f"the client exited {p.returncode}: {p.stderr.strip()[-600:]}"
    return json.loads(p.stdout)


def curl_client(port, model, sampling):
    """The same four requests as openai_client.js, by curl; the texts, or an error string."""
    def post(path, body):
        p = subprocess.run(["curl", "-sS", "--max-time", "120", "-H",
                            "Content-Type: application/json", "-d", json.dumps(body),
                            f"http://127.0.0.1:{port}{path}"],
                           capture_output=True, text=True, timeout=150)
        if p.returncode != 0:
            raise RuntimeError(f"curl exited {p.returncode}: {p.stderr.strip()}")
        if not body.get("stream"):
            return json.loads(p.stdout)
        return [json.loads(line[6:]) for line in p.stdout.splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"]

    messages = [{"role": "user", "content": PROMPT}]
    completion = dict(model=model, prompt=PROMPT, max_tokens=24, **sampling)
    chat = dict(model=model, messages=messages, max_tokens=16, **sampling)
    try:
        out = {}
        c = post("/v1/completions", completion)
        out["completion"] = c["choices"][0]["text"]
        out["completion_stream"] = "".join(
            e["choices"][0]["text"] for e in post("/v1/completions", dict(completion, stream=True))
            if e.get("choices"))
        c = post("/v1/chat/completions", chat)
        out["chat"] = c["choices"][0]["message"]["content"]
        out["chat_role"] = c["choices"][0]["message"]["role"]
        out["chat_stream"] = "".join(
            e["choices"][0]["delta"].get("content", "")
            for e in post("/v1/chat/completions", dict(chat, stream=True)) if e.get("choices"))
        return out
    except (RuntimeError, KeyError, IndexError, ValueError) as e:
        return f"curl: {e}"


def main():
    a = parse_args()
    if model_missing(a.model):
        return SKIP
    module = openai_module()
    have_curl = shutil.which("curl") is not None
    if not have_curl:
        print("skipped: curl is needed for the curl client")
    if module is None and not have_curl:
        return SKIP
    check = Checks()
    with tempfile.TemporaryDirectory(prefix="tg-clients-") as tmp:
        template = os.path.join(tmp, "chatml.jinja")
        with open(template, "w") as f:
            f.write(CHATML)
        synth = os.path.join(tmp, "synth-chat.gguf")
        subprocess.run([a.tg_gguf, "synth", synth, "--dims", "64,128,2,4,2,600", "--type", "q8_0",
                        "--threads", "1", "--chat-template", template],
                       check=True, capture_output=True)
        for model, flags in ((a.model, ["--chat-template", "chatml"]), (synth, [])):
            name = os.path.basename(model)
            s = Server(a.tg_server, model, flags)
            try:
                status, body = s.post("/apply-template",
                                      {"messages": [{"role": "user", "content": PROMPT}]})
                rendered = json.loads(body).get("prompt") if status == 200 else body
                check(rendered == RENDERED, f"{name}: /apply-template renders ChatML {rendered!r}")
                for fields, run_flags in SAMPLINGS:
                    want = tg_run(a.tg_run, model, PROMPT, 24, run_flags)
                    chat_want = tg_run(a.tg_run, model, RENDERED, 16, run_flags)
                    what = f"{name} {json.dumps(fields)}"
                    clients = []
                    if module is not None:
                        clients.append(("openai npm", npm_client(module, s.port, name, fields)))
                    if have_curl:
                        clients.append(("curl", curl_client(s.port, name, fields)))
                    for client, got in clients:
                        if isinstance(got, str):
                            check(False, f"{what} {client}: {got}")
                            continue
                        check(got["completion"] == want,
                              f"{what} {client} completion: tg-run's text {got['completion'][:40]!r}")
                        check(got["completion_stream"] == want,
                              f"{what} {client} completion streamed: the same text")
                        check(got["chat"] == chat_want and got["chat_role"] == "assistant",
                              f"{what} {client} chat: tg-run's continuation of the rendered "
                              f"prompt {got['chat'][:40]!r}")
                        check(got["chat_stream"] == chat_want,
                              f"{what} {client} chat streamed: the same text")
                        if client == "openai npm":
                            check(got["models"] == [name], f"{what} models.list: {got['models']}")
                            if fields["temperature"] == 0:
                                check(got["usage"]["completion_tokens"] == 24 and
                                      got["finish_reason"] == "length",
                                      f"{what} usage {got['usage']}, {got['finish_reason']}")
            finally:
                s.stop()
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
