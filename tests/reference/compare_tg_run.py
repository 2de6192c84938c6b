#!/usr/bin/python3
"""Compares tensorgrid's `tg-run` with the PyTorch float32 reference (llama_torch.py).

    /usr/bin/python3 compare_tg_run.py --tg-run PATH --model MODEL.gguf \
        [--prompt "Once upon a time"] [--n 64] [--top 5] [--tol 1e-4] \
        [--tie-tol 0] [--expect-prompt-tokens 1,403,...] [--extra-args "..."]

Runs
    PATH -m MODEL -p PROMPT -n N --temp 0 --json --top-logits K [extra args]
whose stdout is ONE JSON object
    {"prompt_tokens": [...], "tokens": [...], "text": "...",
     "top_logits": [[id, logit], ...], "timings": {...}}
(top_logits: top K at the first generated position = the last prompt position),
then llama_torch.py on tg-run's prompt_tokens, and checks:
  * the top-K ids are the same set as torch's top K (an id may be exchanged at
    the K-th place only when the two logits are within --tol), listed in an
    order consistent with torch's logits (up to --tol);
  * each top-K logit is within --tol of torch's logit for that same id;
  * the N greedy tokens are identical.  With --tie-tol T > 0 a divergence is
    accepted at a position where torch's best logit exceeds the logit of
    tg-run's token by at most T (a near-tie, reported); later tokens are then
    checked against torch's argmax on tg-run's own prefix (teacher forced),
    with the same allowance.
  * tg-run may stop early only at the end-of-sequence token.

Exit status: 0 match, 1 mismatch or error, 77 skipped (torch or numpy not
importable, model file missing) -- the reason is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def log(msg=""):
    print(msg, flush=True)


def fail(msg):
    log("FAIL: " + msg)
    return 1


def parse_json_object(text):
    """The JSON object in `text`: the whole output, or else its last line that parses."""
    t = text.strip()
    lines = [line.strip() for line in reversed(t.splitlines())]
    for candidate in [t] + [line for line in lines if line.startswith("{")]:
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _int_list(v, what):
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError("%s is not a list of integers: %r" % (what, v))
    return v


def _pairs(v, what):
    if not isinstance(v, list):
        raise ValueError("%s is not a list: %r" % (what, v))
    out = []
    for p in v:
        if isinstance(p, dict) and "id" in p and "logit" in p:  # tolerate {"id":..,"logit":..}
            p = [p["id"], p["logit"]]
        if (not isinstance(p, (list, tuple)) or len(p) != 2 or not isinstance(p[0], int)
                or not isinstance(p[1], (int, float))):
            raise ValueError("%s entry is not [id, logit]: %r" % (what, p))
        out.append((int(p[0]), float(p[1])))
    return out


def _tail(s, n=2000):
    s = s or ""
    return s if len(s) <= n else "..." + s[-n:]


def check_top(tg_top, torch_top, torch_for, tol):
    """Returns (ok, max_abs_diff, lines)."""
    lines = []
    ok = True
    tg_ids = [i for i, _ in tg_top]
    torch_ids = [i for i, _ in torch_top]
    if len(set(tg_ids)) != len(tg_ids):
        return False, float("nan"), ["tg-run top_logits has duplicate ids: %s" % tg_ids]
    if len(tg_ids) != len(torch_ids):
        return False, float("nan"), ["tg-run gave %d top logits, expected %d" % (len(tg_ids), len(torch_ids))]
    tl = dict(torch_for)
    torch_rank = {i: r for r, i in enumerate(torch_ids)}
    lines.append("  rank      id       tg-run        torch         diff  torch-rank")
    max_diff = 0.0
    for r, (i, lg) in enumerate(tg_top):
        d = lg - tl[i]
        max_diff = max(max_diff, abs(d))
        flag = "" if abs(d) <= tol else "   <-- beyond tol"
        lines.append("  %4d  %6d  %11.6f  %11.6f  %+11.3e  %s%s"
                     % (r, i, lg, tl[i], d, torch_rank.get(i, "-"), flag))
        if abs(d) > tol:
            ok = False
    lines.append("  max |tg-run - torch| over the top %d: %.3e (tol %.1e)" % (len(tg_ids), max_diff, tol))
    # same set, up to exchanges at the K-th place among logits within tol
    extra = [i for i in tg_ids if i not in torch_rank]
    missing = [i for i in torch_ids if i not in set(tg_ids)]
    if extra or missing:
        kth = torch_top[-1][1]
        tg_min = min(tl[i] for i in tg_ids)
        miss_l = dict(torch_top)
        boundary = all(tl[i] >= kth - tol for i in extra) and all(miss_l[i] <= tg_min + tol for i in missing)
        if boundary:
            lines.append("  note: top-%d sets differ only at the boundary within tol: tg-run has %s, torch has %s"
                         % (len(tg_ids), extra, missing))
        else:
            ok = False
            lines.append("  top-%d id sets differ: only in tg-run %s (torch logits %s), only in torch %s (torch logits %s)"
                         % (len(tg_ids), extra, [round(tl[i], 6) for i in extra],
                            missing, [round(miss_l[i], 6) for i in missing]))
    # order consistent with torch's logits (up to tol)
    for a in range(len(tg_ids)):
        for b in range(a + 1, len(tg_ids)):
            ia, ib = tg_ids[a], tg_ids[b]
            if tl[ia] < tl[ib] - tol:
                ok = False
                lines.append("  order: tg-run ranks %d (torch %.6f) above %d (torch %.6f), beyond tol"
                             % (ia, tl[ia], ib, tl[ib]))
    return ok, max_diff, lines


def check_tokens(tg_toks, torch_toks, forced, n, tie_tol, eos):
    """Returns (ok, lines)."""
    lines = []
    if len(tg_toks) > n:
        return False, ["  tg-run generated %d tokens, more than -n %d" % (len(tg_toks), n)]
    if len(tg_toks) < n:
        stopped = (tg_toks and tg_toks[-1] == eos) or \
                  (len(tg_toks) < len(torch_toks) and torch_toks[len(tg_toks)] == eos)
        if not stopped:
            return False, ["  tg-run generated %d tokens, expected %d (and it did not stop at eos %s)"
                           % (len(tg_toks), n, eos)]
        lines.append("  note: tg-run stopped at the end-of-sequence token after %d tokens" % len(tg_toks))
    first = next((p for p, (a, b) in enumerate(zip(tg_toks, torch_toks)) if a != b), None)
    if first is None:
        lines.append("  greedy tokens: all %d identical" % len(tg_toks))
        return True, lines
    f = forced[first] if forced and first < len(forced) else None
    lines.append("  first differing token at position %d: tg-run %d, torch %d"
                 % (first, tg_toks[first], torch_toks[first]))
    lines.append("    tg-run: %s" % tg_toks)
    lines.append("    torch : %s" % torch_toks)
    if f is None:
        return False, lines
    gap = f["max_logit"] - f["logit"]
    lines.append("    torch at that position: best %d (%.7f), second %d (%.7f); tg-run's %d has %.7f (gap %.3e)"
                 % (f["argmax"], f["max_logit"], f["second"][0], f["second"][1], f["token"], f["logit"], gap))
    if tie_tol <= 0 and gap > 0:
        lines.append("    not a tie (--tie-tol 0: greedy tokens must be identical)")
        return False, lines
    if gap > tie_tol:
        lines.append("    not a near-tie: gap %.3e > --tie-tol %.1e" % (gap, tie_tol))
        return False, lines
    lines.append("    accepted as a near-tie (gap %.3e <= --tie-tol %.1e); checking the rest teacher-forced"
                 % (gap, tie_tol))
    ok = True
    ties = 1
    for f in forced[first + 1:len(tg_toks)]:
        g = f["max_logit"] - f["logit"]
        if f["argmax"] == f["token"] or g <= 0:
            continue
        if g <= tie_tol:
            ties += 1
            lines.append("    position %d: near-tie again (tg-run %d, torch best %d, gap %.3e)"
                         % (f["pos"], f["token"], f["argmax"], g))
            continue
        ok = False
        lines.append("    position %d: tg-run %d (torch %.7f) is not torch's argmax %d (%.7f) on tg-run's prefix, gap %.3e"
                     % (f["pos"], f["token"], f["logit"], f["argmax"], f["max_logit"], g))
        break
    if ok:
        lines.append("  greedy tokens: match up to %d accepted near-tie(s)" % ties)
    return ok, lines


def run_json(name, cmd, timeout):
    """Runs cmd and returns (the JSON object it printed, None) or (None, the error)."""
    log("%s: %s" % (name, " ".join(shlex.quote(c) for c in cmd)))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "%s timed out after %.0f s" % (name, timeout)
    if p.returncode != 0:
        log("%s stderr:\n%s" % (name, _tail(p.stderr)))
        return None, "%s exited with status %d" % (name, p.returncode)
    obj = parse_json_object(p.stdout)
    if obj is None:
        log("%s stdout:\n%s" % (name, _tail(p.stdout)))
        return None, "no JSON object in %s's output" % name
    return obj, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tie-tol", type=float, default=0.0,
                    help="accept a greedy divergence where torch's top logit beats tg-run's token by <= this")
    ap.add_argument("--expect-prompt-tokens", default="",
                    help="also require tg-run's prompt_tokens to equal these ids")
    ap.add_argument("--extra-args", default="", help="more tg-run arguments (shell-quoted string)")
    ap.add_argument("--timeout", type=float, default=250.0, help="seconds for each of the two runs")
    ap.add_argument("--python", default=sys.executable, help="interpreter for llama_torch.py")
    a = ap.parse_args(argv)

    # -- skips --
    try:
        import numpy  # noqa: F401  pylint: disable=unused-import
        import torch  # noqa: F401  pylint: disable=unused-import
    except Exception as e:  # ImportError, or a broken install
        log("SKIP: torch/numpy not importable by %s: %s" % (sys.executable, e))
        return SKIP
    if not os.path.isfile(a.model):
        log("SKIP: model file not found: %s" % a.model)
        return SKIP
    if not (os.path.isfile(a.tg_run) and os.access(a.tg_run, os.X_OK)):
        return fail("tg-run not found or not executable: %s" % a.tg_run)

    # -- tg-run --
    cmd = [a.tg_run, "-m", a.model, "-p", a.prompt, "-n", str(a.n), "--temp", "0",
           "--json", "--top-logits", str(a.top)] + shlex.split(a.extra_args)
    tg, err = run_json("tg-run", cmd, a.timeout)
    if err:
        return fail(err)
    try:
        prompt_tokens = _int_list(tg.get("prompt_tokens"), "prompt_tokens")
        tg_toks = _int_list(tg.get("tokens"), "tokens")
        tg_top = _pairs(tg.get("top_logits"), "top_logits")
    except ValueError as e:
        return fail("tg-run JSON: %s" % e)
    if not prompt_tokens:
        return fail("tg-run reported an empty prompt_tokens")
    log("prompt_tokens: %s" % prompt_tokens)
    if "text" in tg:
        log("tg-run text: %r" % tg["text"])
    if isinstance(tg.get("timings"), dict):
        log("tg-run timings: %s" % json.dumps(tg["timings"]))

    ok = True
    if a.expect_prompt_tokens:
        exp = [int(x) for x in a.expect_prompt_tokens.split(",") if x.strip()]
        if prompt_tokens != exp:
            ok = False
            log("FAIL: tg-run tokenized the prompt to %s, expected %s" % (prompt_tokens, exp))
        else:
            log("prompt tokenization: as expected")

    # -- torch reference --
    ref_cmd = [a.python, os.path.join(HERE, "llama_torch.py"), a.model,
               "--tokens", ",".join(map(str, prompt_tokens)), "--n-gen", str(a.n), "--top", str(a.top)]
    if tg_top:
        ref_cmd += ["--logits-for", ",".join(str(i) for i, _ in tg_top)]
    if tg_toks:
        ref_cmd += ["--force-tokens", ",".join(map(str, tg_toks))]
    ref, err = run_json("llama_torch.py", ref_cmd, a.timeout)
    if err:
        return fail(err)
    torch_top = _pairs(ref["top_logits"], "torch top_logits")
    torch_for = _pairs(ref.get("logits_for", []), "torch logits_for")
    torch_toks = ref["tokens"]
    forced = ref.get("forced", [])
    eos = (ref.get("info") or {}).get("eos_token_id")

    # -- checks --
    log("")
    log("top-%d logits at the last prompt position:" % a.top)
    if not tg_top:
        ok = False
        log("FAIL: tg-run reported no top_logits")
        max_diff = float("nan")
    else:
        top_ok, max_diff, lines = check_top(tg_top, torch_top, torch_for, a.tol)
        for line in lines:
            log(line)
        ok &= top_ok
    log("")
    log("greedy continuation (%d tokens):" % a.n)
    tok_ok, lines = check_tokens(tg_toks, torch_toks, forced, a.n, a.tie_tol, eos)
    for line in lines:
        log(line)
    ok &= tok_ok
    log("")
    if ok:
        ties = "" if not any("near-tie" in l for l in lines) else " (with accepted near-ties, see above)"
        log("PASS: max top-%d logit difference %.3e <= %.1e; greedy tokens match%s"
            % (a.top, max_diff, a.tol, ties))
        return 0
    log("FAIL: tg-run disagrees with the torch reference (max top-%d logit difference %.3e, tol %.1e)"
        % (a.top, max_diff, a.tol))
    return 1


if __name__ == "__main__":
    sys.exit(main())
