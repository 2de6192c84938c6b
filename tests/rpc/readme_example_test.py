#!/usr/bin/env python3
"""README.md's several-machines example, run as written on loopback.

  readme_example_test.py --tg-run PATH --rpc-server PATH --model MODEL [--readme README.md]
                         [--gen-certs scripts/gen-certs.sh]

Reads the sh block after `<!-- several-machines-example -->` in README.md and runs its three
commands (comments dropped, `\\` continuations joined): scripts/gen-certs.sh, rpc-server (once
per host) and tg-run, with only these substitutions:
  host1 -> 127.0.0.1, host2 -> 127.0.0.2; each server's port 50052 -> a free port of its own
  ./build/release/... -> the binaries given; scripts/gen-certs.sh -> the one given
  MODEL.gguf -> --model (-H 0.0.0.0 stays: the servers listen as the README has them)
The server line is written for host1; host2 runs it with host1's names replaced by its own
(as the block's comment says). gen-certs.sh runs in a temporary directory; each server runs in
a directory of its own holding only its HOST.pem, HOST.key, ca.pem and the token, and the
client in one holding only ca.pem and the token (what the block says to copy where). Servers get
TG_CPU_DEVICES=2 (so that `-d 0,1` names two CPU devices on a host without GPUs) and
--port-file to say when they listen; the client has one local CPU device and runs with
-n 16 --temp 0 --json appended.

Checks: the files gen-certs.sh makes (keys and token mode 600); the servers start; the client
line generates local `tg-run -m MODEL -n 16 --temp 0 --json`'s greedy tokens; the client line
without its --rpc-token-file is refused with an error naming a server; gen-certs.sh run again
with one more host keeps ca.pem, ca.key, token and host1's certificate and key byte for byte
and adds the new host, signed by the same CA. The servers are stopped whatever happens.
Exit 0 pass, 1 fail, 77 skipped (model or openssl missing).
"""
import argparse
import ctypes
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from rpc_cluster import SKIP, Failures, free_port, local_env, model_missing, openssl_missing  # noqa: E402

SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
MARKER = "<!-- several-machines-example -->"
# Addresses, not names: a name would go through gRPC's c-ares resolver, which leaks 10 bytes
# per process under LeakSanitizer (the asan preset); 127.0.0.2 is loopback too.
HOSTS = {"host1": "127.0.0.1", "host2": "127.0.0.2"}
README_PORT = "50052"
EXTRA_HOST = "host3.example"  # the host added by the second gen-certs.sh run


def readme_commands(readme):
    """The commands of the sh block after MARKER: a list of argument lists."""
    text = open(readme).read()
    at = text.find(MARKER)
    if at < 0:
        raise ValueError(f"{readme} has no {MARKER}")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, at)
    if not m or text[at + len(MARKER):m.start()].strip():
        raise ValueError(f"no ```sh block right after {MARKER} in {readme}")
    commands, pending = [], ""
    for line in m.group(1).splitlines():
        line = line.rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        args = shlex.split(pending + line, comments=True)
        pending = ""
        if args:
            commands.append(args)
    return commands


def pick(commands, what, test):
    found = [c for c in commands if test(c)]
    if len(found) != 1:
        raise ValueError(f"the README block has {len(found)} {what} lines, not 1: {commands}")
    return found[0]


class Substitute:
    """The substitutions the test makes in the README's commands, and no other."""

    def __init__(self, a, ports):
        self.a, self.ports = a, ports  # ports: {"host1": P1, "host2": P2}

    def __call__(self, args, port=None):
        out = []
        for arg in args:
            if arg.startswith("./build/release/"):
                name = os.path.basename(arg)
                arg = {"rpc-server": self.a.rpc_server, "tg-run": self.a.tg_run}[name]
            elif arg == "scripts/gen-certs.sh":
                arg = self.a.gen_certs
            elif arg == "MODEL.gguf":
                arg = self.a.model
            arg = re.sub(r"\b(host\d+):" + README_PORT + r"\b",
                         lambda m: f"{m.group(1)}:{self.ports[m.group(1)]}", arg)
            if port is not None and arg == README_PORT:
                arg = str(port)
            arg = re.sub(r"\bhost\d+\b", lambda m: HOSTS[m.group(0)], arg)
            out.append(arg)
        return out


def wait_for_port(proc, port_file, log_path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rpc-server exited {proc.returncode}: "
                               f"{open(log_path).read()[-3000:]}")
        if os.path.exists(port_file) and open(port_file).read().strip():
            return int(open(port_file).read())
        time.sleep(0.05)
    raise RuntimeError(f"rpc-server did not listen within {timeout} s: "
                       f"{open(log_path).read()[-3000:]}")


def die_with_parent():
    """In a server, before exec: SIGKILL when this test dies, even by SIGKILL (ctest's
    timeout), so that no server outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def digest_files(d, names):
    return {n: open(os.path.join(d, n), "rb").read() for n in names}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--rpc-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--readme", default=os.path.join(SOURCE, "README.md"))
    ap.add_argument("--gen-certs", default=os.path.join(SOURCE, "scripts", "gen-certs.sh"))
    a = ap.parse_args()
    if model_missing(a.model) or openssl_missing():
        return SKIP
    a.model = os.path.abspath(a.model)
    fail = Failures()

    try:
        commands = readme_commands(a.readme)
        gen = pick(commands, "gen-certs.sh", lambda c: "scripts/gen-certs.sh" in c)
        server = pick(commands, "rpc-server", lambda c: c[0].endswith("/rpc-server"))
        client = pick(commands, "tg-run", lambda c: c[0].endswith("/tg-run"))
    except ValueError as e:
        print(f"FAIL: {e}")
        return 1
    if len(commands) != 3:
        fail(f"the README block has {len(commands)} commands, not 3: {commands}")
    print("README block:\n  " + "\n  ".join(shlex.join(c) for c in commands))

    client_env = local_env()
    want = subprocess.run([a.tg_run, "-m", a.model, "-n", "16", "--temp", "0", "--json"],
                          capture_output=True, text=True, env=client_env, timeout=120)
    if want.returncode != 0:
        print(f"FAIL: the local run exited {want.returncode}: {want.stderr[-2000:]}")
        return 1
    want = json.loads(want.stdout)["tokens"]

    # A SIGTERM (ctest, a user) ends the test through the finally below, which stops the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    procs = []
    with tempfile.TemporaryDirectory(prefix="tg-readme-") as d:
        try:
            # 1. gen-certs.sh, as written.
            sub = Substitute(a, {h: free_port() for h in HOSTS})
            cmd = sub(gen)
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=60)
            print(f"gen-certs.sh: {shlex.join(cmd)}: exit {r.returncode}")
            if r.returncode != 0:
                fail(f"gen-certs.sh failed: {r.stdout[-2000:]}{r.stderr[-2000:]}")
                return fail.exit_code()
            out = os.path.join(d, cmd[cmd.index("-o") + 1]) if "-o" in cmd else os.path.join(d, "certs")
            names = [HOSTS[h] for h in sorted(HOSTS)]
            made = ["ca.pem", "ca.key", "token", "client.pem", "client.key"] + \
                   [f"{n}.{x}" for n in names for x in ("pem", "key")]
            missing = [f for f in made if not os.path.isfile(os.path.join(out, f))]
            loose = [f for f in made if (f.endswith(".key") or f == "token") and
                     os.path.isfile(os.path.join(out, f)) and
                     stat.S_IMODE(os.stat(os.path.join(out, f)).st_mode) != 0o600]
            print(f"gen-certs.sh made {len(made) - len(missing)}/{len(made)} files; "
                  f"not mode 600: {loose or 'none'}")
            if missing or loose:
                fail(f"gen-certs.sh: missing {missing}, keys/token not mode 600: {loose}")
                return fail.exit_code()

            # 2. What the block says to copy where.
            dirs = {}
            for h, n in sorted(HOSTS.items()):
                dirs[h] = os.path.join(d, f"on-{h}")
                os.mkdir(dirs[h])
                for f in [f"{n}.pem", f"{n}.key", "ca.pem", "token"]:
                    shutil.copy2(os.path.join(out, f), dirs[h])
            dirs["client"] = os.path.join(d, "on-client")
            os.mkdir(dirs["client"])
            for f in ["ca.pem", "token"]:
                shutil.copy2(os.path.join(out, f), dirs["client"])

            # 3. The server line on each host (host2's with its own names).
            server_env = dict(os.environ, TG_CPU_DEVICES="2")
            for h in sorted(HOSTS):
                line = [re.sub(r"\bhost1\b", h, x) for x in server]
                cmd = sub(line, port=sub.ports[h])
                port_file = os.path.join(d, f"{h}.port")
                log_path = os.path.join(d, f"{h}.log")
                with open(log_path, "w") as log:
                    p = subprocess.Popen(cmd + ["--port-file", port_file], cwd=dirs[h],
                                         stdout=log, stderr=subprocess.STDOUT, env=server_env,
                                         preexec_fn=die_with_parent)
                procs.append(p)
                try:
                    port = wait_for_port(p, port_file, log_path)
                    print(f"server {h}: {shlex.join(cmd)}: listening on port {port}")
                except RuntimeError as e:
                    fail(f"server {h}: {shlex.join(cmd)}: {e}")
                    return fail.exit_code()

            # 4. The client line, plus -n 16 --temp 0 --json.
            cmd = sub(client) + ["-n", "16", "--temp", "0", "--json"]
            r = subprocess.run(cmd, cwd=dirs["client"], capture_output=True, text=True,
                               env=client_env, timeout=120)
            got = json.loads(r.stdout)["tokens"] if r.returncode == 0 else None
            print(f"client: {shlex.join(cmd)}: exit {r.returncode}, "
                  f"tokens {'= local run' if got == want else got}")
            if got != want:
                fail(f"the client line should give the local tokens {want}; "
                     f"stderr:\n{r.stderr[-3000:]}")

            # 5. Without the token: refused, naming a server.
            i = cmd.index("--rpc-token-file")
            bare = cmd[:i] + cmd[i + 2:]
            supp = os.path.join(HERE, "lsan_refused_tls.supp")
            refused_env = dict(client_env, LSAN_OPTIONS=f"suppressions={supp}:print_suppressions=0")
            r = subprocess.run(bare, cwd=dirs["client"], capture_output=True, text=True,
                               env=refused_env, timeout=120)
            last = r.stderr.strip().splitlines()[-1:] or [""]
            print(f"client without --rpc-token-file: exit {r.returncode}: {last[0][:300]}")
            endpoints = [f"{n}:{sub.ports[h]}" for h, n in HOSTS.items()]
            if r.returncode == 0 or not any(e in last[0] for e in endpoints):
                fail(f"a client without the token should be refused with an error naming a "
                     f"server; stderr:\n{r.stderr[-3000:]}")

            # 6. gen-certs.sh again with one more host: nothing there changes.
            keep = ["ca.pem", "ca.key", "token", "client.pem", "client.key",
                    f"{names[0]}.pem", f"{names[0]}.key"]
            before = digest_files(out, keep)
            cmd = sub(gen) + [EXTRA_HOST]
            r = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=60)
            changed = [f for f, b in before.items()
                       if open(os.path.join(out, f), "rb").read() != b]
            new = os.path.join(out, f"{EXTRA_HOST}.pem")
            verify = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(out, "ca.pem"),
                                     new], capture_output=True, text=True)
            print(f"gen-certs.sh again with {EXTRA_HOST}: exit {r.returncode}; changed: "
                  f"{changed or 'none'}; {EXTRA_HOST}.pem signed by ca.pem: "
                  f"{verify.returncode == 0}")
            if r.returncode != 0 or changed or verify.returncode != 0 or \
                    not os.path.isfile(os.path.join(out, f"{EXTRA_HOST}.key")):
                fail(f"a second gen-certs.sh run must keep {keep} and add {EXTRA_HOST}: "
                     f"{r.stdout[-1500:]}{r.stderr[-1500:]}{verify.stderr[-500:]}")
        finally:
            for p in procs:
                stop(p)
    print("PASS" if fail.count == 0 else f"{fail.count} check(s) failed")
    return fail.exit_code()


if __name__ == "__main__":
    sys.exit(main())
