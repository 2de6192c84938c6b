#!/usr/bin/env python3
"""tg-server's log-probabilities against a real process on loopback, stories260K:

  server_logprobs_test.py --tg-server BIN --tg-run BIN --model MODEL

- /v1/completions, temperature 0, logprobs 5: the tokens add up to the text, which equals the
  text without logprobs (and tg-run's); each token's logprob is the largest of its
  top_logprobs (greedy), every value <= 0, at most 5 alternatives, text_offset the bytes
  before it; n_probs 5 gives the same; logprobs 0 gives empty alternatives;
- streamed (completions with logprobs 3, chat with logprobs + top_logprobs 3): each chunk's
  tokens are exactly its text, all of them the streamed text, the same values as whole;
- a stop string that begins inside a token: the entries cover exactly the text returned
  (the cut token keeps the part before the stop string), whole and streamed;
- a seeded sampled completion gives the same text with and without logprobs;
- logprobs 21, logprobs "x", top_logprobs 21 and chat's top_logprobs without logprobs: 400
  with an OpenAI-style error, the server still serving.
One line per check, then "N passed, M failed".
"""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import Checks, Server, model_missing, parse_args, tg_run  # noqa: E402

PROMPT = "Once upon a time"
N = 32


def sse(server, path, body):
    """The JSON events of a streamed POST (without the final [DONE])."""
    req = urllib.request.Request(f"{server.url}{path}", method="POST",
                                 data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
    return events


def close(a, b, tol=1e-3):
    """Equal (token, value) lists, values within tol: a prompt reused from the cache gives its
    first token's logits from a different batch shape, equal to float rounding."""
    return len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) <= tol
                                    for x, y in zip(a, b))


def post(server, path, body):
    status, text = server.post(path, body)
    return status, (json.loads(text) if text.startswith("{") else {})


def completion_stream(events):
    """(text, entries as (token, logprob), every chunk's tokens == its text)."""
    text, entries, exact = "", [], True
    for e in events:
        c = e["choices"][0]
        lp = c.get("logprobs")
        if lp is None:
            exact = exact and c["text"] == ""
            continue
        exact = exact and "".join(lp["tokens"]) == c["text"] and \
            lp["text_offset"][:1] in ([], [len(text.encode())])
        text += c["text"]
        entries += list(zip(lp["tokens"], lp["token_logprobs"]))
    return text, entries, exact


def chat_stream(events):
    """(text, entries, every chunk's entries' bytes == its content's)."""
    text, entries, exact = "", [], True
    for e in events:
        c = e["choices"][0]
        content = c["delta"].get("content", "")
        got = (c.get("logprobs") or {}).get("content") or []
        exact = exact and b"".join(bytes(x["bytes"]) for x in got) == content.encode()
        text += content
        entries += got
    return text, entries, exact


def main():
    a = parse_args()
    if model_missing(a.model):
        return 77
    check = Checks()
    s = Server(a.tg_server, a.model, ["--parallel", "4", "--chat-template", "chatml"])
    try:
        greedy = {"prompt": PROMPT, "max_tokens": N, "temperature": 0}
        status, plain = post(s, "/v1/completions", greedy)
        text = plain["choices"][0]["text"] if status == 200 else ""
        check(status == 200 and plain["choices"][0]["logprobs"] is None,
              "without logprobs: choices[0].logprobs is null")
        want = tg_run(a.tg_run, a.model, PROMPT, N, ["--temp", "0"])
        status, j = post(s, "/v1/completions", dict(greedy, logprobs=5))
        c = j["choices"][0] if status == 200 else {"text": "", "logprobs": None}
        lp = c["logprobs"] or {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                               "text_offset": []}
        check(c["text"] == text == want, f"logprobs 5: the text without them (tg-run's): "
              f"{c['text'][:40]!r}")
        check("".join(lp["tokens"]) == c["text"] and
              len(lp["tokens"]) == j.get("usage", {}).get("completion_tokens"),
              f"logprobs 5: {len(lp['tokens'])} tokens add up to the text, one per token")
        greedy_max = all(abs(t - max(top.values())) < 1e-6 and 1 <= len(top) <= 5
                         for t, top in zip(lp["token_logprobs"], lp["top_logprobs"]))
        check(greedy_max and len(lp["top_logprobs"]) == len(lp["tokens"]) > 0,
              "logprobs 5: each token_logprob is the largest of its top_logprobs (greedy)")
        values = lp["token_logprobs"] + [v for top in lp["top_logprobs"] for v in top.values()]
        check(all(v <= 0 for v in values) and min(values, default=0) > -1e4,
              f"logprobs 5: every value in (-1e4, 0]: min {min(values, default=0):.3f}")
        offsets = [len("".join(lp["tokens"][:i]).encode()) for i in range(len(lp["tokens"]))]
        check(lp["text_offset"] == offsets, "logprobs 5: text_offset counts the bytes before")
        status, n_probs = post(s, "/v1/completions", dict(greedy, n_probs=5))
        nlp = n_probs["choices"][0]["logprobs"] if status == 200 else {}
        check(status == 200 and nlp["tokens"] == lp["tokens"] and
              close(list(zip(nlp["tokens"], nlp["token_logprobs"])),
                    list(zip(lp["tokens"], lp["token_logprobs"]))) and
              [list(t) for t in nlp["top_logprobs"]] == [list(t) for t in lp["top_logprobs"]],
              "n_probs 5 (llama-server's name) gives logprobs 5's")
        status, zero = post(s, "/v1/completions", dict(greedy, logprobs=0))
        zlp = zero["choices"][0]["logprobs"] if status == 200 else {}
        check(status == 200 and close(list(zip(zlp["tokens"], zlp["token_logprobs"])),
                                      list(zip(lp["tokens"], lp["token_logprobs"]))) and
              all(t == {} for t in zlp["top_logprobs"]),
              "logprobs 0: the tokens' own values, no alternatives")

        events = sse(s, "/v1/completions", dict(greedy, logprobs=3))
        streamed, entries, exact = completion_stream(events)
        check(streamed == text and exact and
              close(entries, list(zip(lp["tokens"], lp["token_logprobs"]))),
              f"streamed logprobs 3: {len(events)} chunks, each chunk's tokens its text, "
              "the values of the whole answer")

        # A stop string that begins inside a token (its second byte on) and spans the next.
        toks = lp["tokens"]
        k = next((i for i in range(2, len(toks) - 1) if len(toks[i]) >= 2 and
                  (toks[i][1:] + toks[i + 1][:1]) in text), None)
        if k is None:
            check(False, f"no token of two bytes to cut in {toks}")
        else:
            stop = toks[k][1:] + toks[k + 1][:1]
            expect = text.split(stop)[0]
            status, j = post(s, "/v1/completions", dict(greedy, logprobs=2, stop=[stop]))
            c = j["choices"][0] if status == 200 else {"text": None, "logprobs": None}
            got = c["logprobs"] or {"tokens": [], "token_logprobs": []}
            check(c["text"] == expect and "".join(got["tokens"]) == expect and
                  # the values of the same tokens unstopped (the cut one its first part).
                  close(list(enumerate(got["token_logprobs"])),
                        list(enumerate(lp["token_logprobs"]))[:len(got["tokens"])]) and
                  all(lp["tokens"][i].startswith(t) for i, t in enumerate(got["tokens"])),
                  f"stop {stop!r}: the entries cover exactly the text {expect[-20:]!r} "
                  f"(the last token {got['tokens'][-1:]!r})")
            streamed, entries, exact = completion_stream(
                sse(s, "/v1/completions", dict(greedy, logprobs=2, stop=[stop])))
            check(streamed == expect and exact and "".join(t for t, _ in entries) == expect,
                  f"stop {stop!r} streamed: the entries cover exactly the text streamed")
            messages = [{"role": "user", "content": PROMPT}]
            chat_text = json.loads(s.post("/v1/chat/completions", {
                "messages": messages, "max_tokens": N, "temperature": 0})[1]
            )["choices"][0]["message"]["content"]
            cut = chat_text[len(chat_text) // 2:][:3]
            if cut:
                streamed, got, exact = chat_stream(sse(s, "/v1/chat/completions", {
                    "messages": messages, "max_tokens": N, "temperature": 0, "stop": [cut],
                    "logprobs": True}))
                check(streamed == chat_text.split(cut)[0] and exact and
                      b"".join(bytes(x["bytes"]) for x in got) == streamed.encode(),
                      f"chat stop {cut!r} streamed: the entries cover exactly the text")

        # Chat, streamed, logprobs + top_logprobs 3.
        messages = [{"role": "system", "content": "You tell stories."},
                    {"role": "user", "content": PROMPT}]
        chat = {"messages": messages, "max_tokens": N, "temperature": 0}
        status, whole = post(s, "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3))
        wc = whole["choices"][0] if status == 200 else {"message": {"content": None},
                                                        "logprobs": None}
        content = (wc["logprobs"] or {}).get("content", [])
        status, bare = post(s, "/v1/chat/completions", chat)
        check(wc["message"]["content"] == bare["choices"][0]["message"]["content"] and
              "".join(e["token"] for e in content) == wc["message"]["content"],
              "chat logprobs: the text without them, the entries' tokens add up to it")
        check(content and all(len(e["top_logprobs"]) == 3 and
                              e["logprob"] == e["top_logprobs"][0]["logprob"] and
                              bytes(e["bytes"]) == e["token"].encode() and e["logprob"] <= 0
                              for e in content),
              "chat logprobs: 3 alternatives each, the token the likeliest, bytes its UTF-8")
        streamed, got, exact = chat_stream(
            sse(s, "/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3)))
        check(streamed == wc["message"]["content"] and exact and
              close([(e["token"], e["logprob"]) for e in got],
                    [(e["token"], e["logprob"]) for e in content]) and
              [[t["token"] for t in e["top_logprobs"]] for e in got] ==
              [[t["token"] for t in e["top_logprobs"]] for e in content],
              f"chat streamed: each chunk's entries are its content, {len(got)} entries in all")

        # Sampling is unchanged by asking for logprobs.
        sampled = {"prompt": PROMPT, "max_tokens": N, "temperature": 0.8, "seed": 7}
        status, with_lp = post(s, "/v1/completions", dict(sampled, logprobs=2))
        _, without = post(s, "/v1/completions", sampled)
        wl = with_lp["choices"][0]["logprobs"] if status == 200 else None
        check(status == 200 and with_lp["choices"][0]["text"] == without["choices"][0]["text"]
              and "".join(wl["tokens"]) == without["choices"][0]["text"] and
              all(t <= max(top.values()) + 1e-6
                  for t, top in zip(wl["token_logprobs"], wl["top_logprobs"])),
              "sampled (seed 7): the same text with logprobs 2, each value at most the top's")

        for path, body, what in [
                ("/v1/completions", {"prompt": PROMPT, "logprobs": 21}, "logprobs 21"),
                ("/v1/completions", {"prompt": PROMPT, "logprobs": "x"}, "logprobs \"x\""),
                ("/v1/completions", {"prompt": PROMPT, "n_probs": -1}, "n_probs -1"),
                ("/v1/chat/completions", {"messages": messages, "logprobs": True,
                                          "top_logprobs": 21}, "chat top_logprobs 21"),
                ("/v1/chat/completions", {"messages": messages, "top_logprobs": 2},
                 "chat top_logprobs without logprobs")]:
            status, j = post(s, path, body)
            err = j.get("error", {})
            check(status == 400 and err.get("type") == "invalid_request_error" and
                  "message" in err, f"{what}: HTTP {status} {err.get('message')!r}")
        status, again = post(s, "/v1/completions", greedy)
        check(status == 200 and again["choices"][0]["text"] == text,
              "still serving after the errors")
    finally:
        s.stop()
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
