#!/usr/bin/env python3
"""tg-server's prompt reuse against a real process on loopback, stories260K:

  server_prompt_cache_test.py --tg-server BIN --tg-run BIN --model MODEL

- a greedy completion, the same prompt again, then a prompt that extends the first with its
  own answer (streamed, with the usage chunk): each text equals tg-run's for its prompt (the
  independent path: nothing cached); usage.prompt_tokens_details.cached_tokens is 0 on the
  first, prompt_tokens - 1 on the second (all but the last prompt token) and at least the
  first prompt's tokens - 1 on the third; /metrics' tg_server_prompt_tokens_cached_total is
  their sum; llama-server's `timings` (the whole response and the stream's last chunk) say
  the same: cache_n the cached tokens, prompt_n the rest, predicted_n the completion's;
- with --no-cache-prompt the same two requests give the same text and report 0 cached.
One line per check, then "N passed, M failed".
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_test import Checks, Server, model_missing, parse_args, tg_run  # noqa: E402

PROMPT = "Once upon a time"
N = 24


def cached_of(usage):
    return usage.get("prompt_tokens_details", {}).get("cached_tokens", -1)


def timings_agree(timings, usage):
    """llama-server's timings match the usage: cache_n, prompt_n and predicted_n, times >= 0."""
    return (timings.get("cache_n") == cached_of(usage) and
            timings.get("prompt_n") == usage.get("prompt_tokens", 0) - cached_of(usage) and
            timings.get("predicted_n") == usage.get("completion_tokens") and
            timings.get("prompt_ms", -1) >= 0 and timings.get("predicted_ms", -1) >= 0)


def counter(server, name):
    m = re.search(rf"^{name} (\d+)$", server.get("/metrics")[1], re.M)
    return int(m.group(1)) if m else -1


def main():
    a = parse_args()
    if model_missing(a.model):
        return 77
    check = Checks()

    def complete(s, prompt):
        status, body = s.post("/v1/completions", {"prompt": prompt, "max_tokens": N,
                                                  "temperature": 0})
        if status != 200:
            return f"HTTP {status} {body}", {}, {}
        j = json.loads(body)
        return j["choices"][0]["text"], j["usage"], j.get("timings", {})

    want = tg_run(a.tg_run, a.model, PROMPT, N, ["--temp", "0"])
    s = Server(a.tg_server, a.model, ["--parallel", "4"])
    try:
        text1, usage1, _ = complete(s, PROMPT)
        check(text1 == want and cached_of(usage1) == 0,
              f"first: tg-run's text, cached {cached_of(usage1)} of {usage1.get('prompt_tokens')}")
        text2, usage2, timings2 = complete(s, PROMPT)
        check(text2 == want and cached_of(usage2) == usage2["prompt_tokens"] - 1,
              f"same prompt again: tg-run's text, cached {cached_of(usage2)} of "
              f"{usage2.get('prompt_tokens')}")
        check(timings_agree(timings2, usage2), f"same prompt again: timings {timings2}")
        longer = PROMPT + text1
        want3 = tg_run(a.tg_run, a.model, longer, N, ["--temp", "0"])
        events = s.stream({"prompt": longer, "max_tokens": N, "temperature": 0,
                           "stream_options": {"include_usage": True}})
        text3 = "".join(e["choices"][0]["text"] for e in events
                        if e != "[DONE]" and e.get("choices"))
        usage3 = next((e["usage"] for e in events if e != "[DONE]" and "usage" in e), {})
        cached3 = cached_of(usage3)
        timings3 = next((e["timings"] for e in events if e != "[DONE]" and "timings" in e and
                         e.get("choices") and e["choices"][0].get("finish_reason")), {})
        check(timings_agree(timings3, usage3), f"extended prompt: the last chunk's timings {timings3}")
        check(text3 == want3 and cached3 >= usage1["prompt_tokens"] - 1 and
              cached3 < usage3.get("prompt_tokens", 0),
              f"extended prompt, streamed: tg-run's text, cached {cached3} of "
              f"{usage3.get('prompt_tokens')} (usage chunk)")
        total = counter(s, "tg_server_prompt_tokens_cached_total")
        check(total == cached_of(usage1) + cached_of(usage2) + cached3,
              f"/metrics tg_server_prompt_tokens_cached_total {total}")
    finally:
        s.stop()

    s = Server(a.tg_server, a.model, ["--no-cache-prompt"])
    try:
        runs = [complete(s, PROMPT) for _ in range(2)]
        check(all(t == want and cached_of(u) == 0 for t, u, _ in runs),
              f"--no-cache-prompt: tg-run's text twice, cached {[cached_of(u) for _, u, _ in runs]}")
        total = counter(s, "tg_server_prompt_tokens_cached_total")
        check(total == 0, f"--no-cache-prompt: /metrics counter {total}")
    finally:
        s.stop()
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
