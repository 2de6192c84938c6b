#!/usr/bin/env python3
"""tg-run --prompt-cache FILE (llama.cpp's flag): the prompt's state is saved after its first
run; a second run with the same prompt decodes no prompt token and prints the same text; a
longer prompt that starts with the saved one reuses it; a state saved on one device restores
under a tensor split over two; a damaged file is ignored with a warning. Greedy tokens are
always those of a run without the cache (the independent path).

  prompt_cache_test.py TG_RUN MODEL

One line per check, then "N passed, M failed".
"""
import json
import os
import subprocess
import sys
import tempfile

PROMPT = "Once upon a time, there was a little girl"
LONGER = PROMPT + " named Lily. She loved"


def tg_run(binary, model, prompt, extra, devices=1):
    env = {k: v for k, v in os.environ.items() if k != "TG_CPU_DEVICES"}
    if devices > 1:
        env["TG_CPU_DEVICES"] = str(devices)
    cmd = [binary, "-m", model, "-p", prompt, "-n", "24", "--temp", "0", "--json", "-t", "1"]
    p = subprocess.run(cmd + extra, capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd + extra)} exited {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout), p.stderr


def main():
    binary, model = sys.argv[1], sys.argv[2]
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        passed, failed = passed + ok, failed + (not ok)

    with tempfile.TemporaryDirectory() as work:
        cache = os.path.join(work, "prompt.cache")
        plain, _ = tg_run(binary, model, PROMPT, [])
        first, _ = tg_run(binary, model, PROMPT, ["--prompt-cache", cache])
        n = len(first["prompt_tokens"])
        check(first["timings"]["prompt_reused"] == 0 and os.path.exists(cache),
              f"first run: nothing reused, {cache} written")
        check(first["tokens"] == plain["tokens"], "first run: the tokens of a run without it")
        second, _ = tg_run(binary, model, PROMPT, ["--prompt-cache", cache])
        check(second["timings"]["prompt_reused"] == n,
              f"second run: {second['timings']['prompt_reused']} of {n} prompt tokens reused")
        check(second["tokens"] == plain["tokens"] and second["text"] == plain["text"],
              "second run: the same text")
        longer_plain, _ = tg_run(binary, model, LONGER, [])
        longer, _ = tg_run(binary, model, LONGER, ["--prompt-cache", cache])
        check(longer["timings"]["prompt_reused"] == n and longer["tokens"] == longer_plain["tokens"],
              f"a longer prompt reuses the saved {n} tokens "
              f"({longer['timings']['prompt_reused']}) and gives its own tokens")
        again, _ = tg_run(binary, model, PROMPT, ["--prompt-cache", cache])  # the file holds LONGER now.
        check(again["timings"]["prompt_reused"] == n - 1 and again["tokens"] == plain["tokens"],
              "a shorter prompt reuses all but its last token and decodes that")
        tg_run(binary, model, PROMPT, ["--prompt-cache", cache])  # saves PROMPT again.
        split, _ = tg_run(binary, model, PROMPT, ["--prompt-cache", cache, "-sm", "tensor"],
                          devices=2)
        check(split["timings"]["prompt_reused"] == n and split["tokens"] == plain["tokens"],
              "saved on one device, restored under -sm tensor over two: the same tokens")
        with open(cache, "r+b") as f:
            f.truncate(os.path.getsize(cache) - 7)
        damaged, err = tg_run(binary, model, PROMPT, ["--prompt-cache", cache])
        check(damaged["timings"]["prompt_reused"] == 0 and "truncated or damaged" in err and
              damaged["tokens"] == plain["tokens"],
              f"a truncated file: a warning ({err.strip()[:90]!r}), decoded as without it")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
