#!/usr/bin/env python3
"""The command-line conventions every tool keeps (README.md, "Tools"):

  - `--help` and `-h`, on every tool and every subcommand, print the usage on stdout, write
    nothing on stderr and exit 0;
  - a usage error (unknown flag, missing or bad value, stray argument, unknown subcommand)
    exits 2 and names what is wrong on stderr; a runtime error (an unreadable file, a bad
    combination found after parsing) exits 1;
  - a usage lists every value of a flag that takes one of a few (-sm, --arch, --kv-type, ...);
  - README.md's rpc-server synopsis names every flag rpc-server accepts.

  cli_conventions_test.py --tg-run BIN --tg-bench BIN --tg-gguf BIN --tg-ops BIN
                          --rpc-server BIN --readme README.md

Nothing loads a model or binds a port: every run stops at its arguments. One line per check,
then "N passed, M failed"; exit 0 only when M is 0.
"""
import argparse
import os
import re
import subprocess
import sys

# Each run stops at its arguments, so it takes milliseconds; this only bounds a tool that
# wrongly went on to serve or generate.
RUN_TIMEOUT_S = 20
# How far after a flag's name its values must appear in the usage (its help line).
VALUE_WINDOW = 160

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        return ok


def run(cmd):
    """(exit code, stdout, stderr); exit code None when the run timed out."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        return None, out, err


def label(cmd):
    return " ".join([os.path.basename(cmd[0])] + cmd[1:])


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def check_help(c, cmd, words):
    """--help and -h: a usage naming `words` on stdout, exit 0, nothing on stderr. The --help
    text."""
    text = ""
    for flag in ("--help", "-h"):
        rc, out, err = run(cmd + [flag])
        ok = (rc == EXIT_OK and "usage:" in out and all(w in out for w in words) and
              not err.strip())
        c.check(ok, f"{label(cmd + [flag])}: exit {rc} (want 0), usage naming "
                    f"{' '.join(words)} on stdout: {'yes' if ok or 'usage:' in out else 'no'}, "
                    f"stderr {'empty' if not err.strip() else repr(last_line(err))}")
        if flag == "--help":
            text = out
    return text


def check_exit(c, cmd, want, needle):
    """`cmd` exits `want` and says `needle` on stderr."""
    rc, _, err = run(cmd)
    c.check(rc == want and needle in err,
            f"{label(cmd)}: exit {rc} (want {want}), stderr {last_line(err)!r}")


def check_values(c, where, usage, flag, values):
    """Some mention of `flag` in `usage` is followed, within its help, by every value."""
    for m in re.finditer(re.escape(flag) + r"(?![\w-])", usage):
        window = usage[m.end():m.end() + VALUE_WINDOW]
        if all(re.search(r"(?<![\w-])" + re.escape(v) + r"(?![\w-])", window) for v in values):
            c.check(True, f"{where} usage lists {flag} {'|'.join(values)}")
            return
    c.check(False, f"{where} usage lists {flag} {'|'.join(values)}")


def usage_flags(usage):
    """The flags of an ArgParser usage: one [short, long] per option line."""
    flags = []
    for line in usage.splitlines():
        m = re.match(r"  (?:(-[\w-]+), )?(--[\w-]+)", line)
        if m:
            flags.append([n for n in m.groups() if n])
    return flags


def readme_rpc_server_synopsis(path):
    """The README's `rpc-server [...]` bullet, up to the closing backquote."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^- `rpc-server (.*?)`", text, re.S | re.M)
    return m.group(1) if m else ""


def main():
    ap = argparse.ArgumentParser()
    for tool in ("tg-run", "tg-bench", "tg-gguf", "tg-ops", "rpc-server"):
        ap.add_argument(f"--{tool}", required=True)
    ap.add_argument("--tg-server", help="checked too when given (built with cpp-httplib)")
    ap.add_argument("--readme", required=True)
    a = ap.parse_args()
    os.environ.setdefault("TG_CUDA_QUIET", "1")
    bins = {"tg-run": a.tg_run, "tg-bench": a.tg_bench, "tg-gguf": a.tg_gguf,
            "tg-ops": a.tg_ops, "rpc-server": a.rpc_server}
    commands = {"tg-run": [[]], "tg-bench": [[]], "rpc-server": [[]],
                "tg-gguf": [[], ["info"], ["synth"], ["hash"], ["tokenize"]],
                "tg-ops": [[], ["test"], ["perf"], ["support"]]}
    if a.tg_server:
        bins["tg-server"] = a.tg_server
        commands["tg-server"] = [[]]
    c = Checks()
    usages = {}
    for tool, subs in commands.items():
        for sub in subs:
            cmd = [bins[tool]] + sub
            usages[" ".join([tool] + sub)] = check_help(c, cmd, [tool] + sub)
            check_exit(c, cmd + ["--no-such-flag"], EXIT_USAGE, "--no-such-flag")

    run_, bench, gguf, ops, server = (bins[t] for t in
                                      ("tg-run", "tg-bench", "tg-gguf", "tg-ops", "rpc-server"))
    # Other usage errors: exit 2 wherever the tool finds them.
    for cmd, needle in [
        ([run_, "stray"], "stray"), ([run_, "-n"], "-n"), ([run_, "-n", "x"], "-n"),
        ([run_, "-sm", "diagonal"], "diagonal"), ([run_, "--kv-type", "q8_0"], "q8_0"),
        ([bench, "stray"], "stray"), ([bench, "-o", "xml"], "xml"),
        ([bench, "-sm", "diagonal"], "diagonal"), ([bench, "-p", "x"], "-p"),
        ([gguf, "frob"], "frob"), ([gguf, "--no-such-flag"], "--no-such-flag"),
        ([gguf, "info"], "info"), ([gguf, "info", "a", "b"], "info"),
        ([gguf, "synth", "out.gguf", "--dims"], "--dims"),
        ([gguf, "synth", "out.gguf", "--dims", "64,128,2,4,2,300", "--type", "f32",
          "--arch", "gpt-4"], "gpt-4"),
        ([ops, "frob"], "frob"), ([ops, "test", "stray"], "stray"), ([ops, "test", "-o"], "-o"),
        ([server, "stray"], "stray"), ([server, "--port"], "--port"),
        ([server, "--port", "x"], "--port"), ([server, "--model-dir"], "--model-dir"),
        ([server, "--log-level", "loud"], "loud"),
    ]:
        check_exit(c, cmd, EXIT_USAGE, needle)
    # Runtime errors stay 1 (none of these gets as far as reading a model or binding a port).
    for cmd, needle in [
        ([gguf, "info", "/nonexistent/x.gguf"], "/nonexistent/x.gguf"),
        ([server, "--port", "70000"], "70000"),
        ([server, "--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"],
         "/nonexistent/c.pem"),
    ]:
        check_exit(c, cmd, EXIT_RUNTIME, needle)

    # Flags that take one of a few values list them all.
    for where, flag, values in [
        ("tg-run", "-sm", ["none", "layer", "tensor"]),
        ("tg-run", "--kv-type", ["f16", "f32"]),
        ("tg-bench", "-sm", ["none", "layer", "tensor"]),
        ("tg-bench", "-o", ["md", "csv", "json"]),
        ("tg-gguf", "--arch", ["llama", "qwen3moe", "mixtral", "gpt-oss"]),
        ("tg-gguf synth", "--arch", ["llama", "qwen3moe", "mixtral", "gpt-oss"]),
        ("tg-gguf synth", "T:", ["f32", "f16", "q8_0", "q4_0", "q5_0", "q5_1", "q2_k", "q3_k",
                                 "q4_k", "q5_k", "iq4_nl", "iq4_xs", "mxfp4", "q4_k_m",
                                 "q5_k_m"]),
        ("tg-ops", "-sm", ["none", "tensor"]),
        ("tg-ops test", "-sm", ["none", "tensor"]),
        ("rpc-server", "--log-level", ["error", "warn", "info", "debug"]),
        ("rpc-server", "--session-mem-limit", ["auto"]),
        ("rpc-server", "--mem-reserve", ["auto"]),
    ]:
        check_values(c, where, usages[where], flag, values)
    for where in ("tg-gguf", "tg-gguf synth"):
        c.check("--arch llama|qwen3moe|mixtral|gpt-oss" in usages[where],
                f"{where} usage has '--arch llama|qwen3moe|mixtral|gpt-oss'")

    # README.md's synopsis of rpc-server names every flag its --help lists.
    synopsis = readme_rpc_server_synopsis(a.readme)
    c.check(bool(synopsis), f"{a.readme} has an rpc-server synopsis")
    for names in usage_flags(usages["rpc-server"]):
        c.check(any(re.search(r"(?<![\w-])" + re.escape(n) + r"(?![\w-])", synopsis)
                    for n in names),
                f"README rpc-server synopsis names {' or '.join(names)}")

    print(f"{c.passed} passed, {c.failed} failed")
    return 0 if c.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
