#!/usr/bin/env python3
"""The compose cluster of deploy/, built and run for real (ctest label "deploy").

Starts a dockerd of its own, builds the CPU image from the repository
(deploy/docker/cpu.Dockerfile), starts deploy/compose with two rpc-servers (TLS, a certificate
each, one token) and checks that:
  - the image is under 150 MB, runs as a non-root user, holds no compiler and no key, token or
    certificate, and has a HEALTHCHECK; both servers turn healthy through it;
  - tg-run in the client container gives the greedy tokens of a local run of the build tree's
    tg-run, with -sm layer and with -sm tensor, computing on both servers;
  - every server's /metrics answers;
  - a client without the token is refused;
  - scaled to three replicas, the client finds all three by name and runs on them;
  - stopping one server container makes a running client fail, naming that server, within 5 s.
Then it tears everything down: compose down -v, the containers, networks and volumes left in
its daemon, the dockerd (by pid), its exec root and socket (docker_env.py: the daemon's data
root with the image and build cache is kept for the next run).

Exit 0 pass, 1 fail, 77 skipped with the reason printed (not root, no docker.io/
docker-compose, a dockerd that cannot start, no base image, no model).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docker_env import (Fail, Phase, Skip, build_image, check_prerequisites,  # noqa: E402
                        check_runtime_image, ensure_base_image, log, run_test, session)

PROJECT = "tgdeploytest"
IMAGE = "tensorgrid/cpu:deploy-test"
MAX_IMAGE_BYTES = 150_000_000
FAIL_WITHIN_S = 5.0
PROMPT = "Once upon a time"
N_TOKENS = 64


class Cluster:
    """docker-compose on deploy/compose with this test's image, secrets and model folder."""

    def __init__(self, dockerd, src, secrets, models):
        self.d = dockerd
        self.file = os.path.join(src, "deploy", "compose", "docker-compose.yml")
        self.env = dict(dockerd.env, TG_IMAGE=IMAGE, TG_SECRETS_DIR=secrets, TG_MODELS_DIR=models)

    def cmd(self, *args):
        return ["docker-compose", "-p", PROJECT, "-f", self.file] + list(args)

    def run(self, *args, check=True, timeout=300):
        p = subprocess.run(self.cmd(*args), env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise Fail(f"docker-compose {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def client(self, *args, env=(), check=True, timeout=300):
        extra = [x for k, v in env for x in ("-e", f"{k}={v}")]
        return self.run("run", "--rm", *extra, "client", *args, check=check, timeout=timeout)

    def servers(self):
        """Running rpc-server containers, in replica order: [(name, ip)]."""
        p = self.d.run(["ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}",
                        "--filter", "label=com.docker.compose.service=rpc-server"])
        out = []
        for cid in p.stdout.split():
            info = json.loads(self.d.run(["inspect", cid]).stdout)[0]
            ip = next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"]
            health = info["State"].get("Health", {}).get("Status", "none")
            out.append((info["Name"].lstrip("/"), ip, health))
        return sorted(out, key=lambda s: int(re.search(r"(\d+)$", s[0]).group(1)))

    def wait_healthy(self, n, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.servers()
            if len(s) == n and all(h == "healthy" for _, _, h in s):
                return [(name, ip) for name, ip, _ in s]
            time.sleep(1)
        raise Fail(f"{n} healthy rpc-servers expected within {timeout} s, have {self.servers()}")


def metrics(ip):
    with urllib.request.urlopen(f"http://{ip}:9090/metrics", timeout=5) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(tg_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", text, re.M)}


def tokens(stdout, what):
    try:
        return json.loads(stdout)["tokens"]
    except (ValueError, KeyError) as e:
        raise Fail(f"{what}: no JSON tokens ({e}) in:\n{stdout[-2000:]}")


def local_tokens(tg_run, model):
    p = subprocess.run([tg_run, "-m", model, "-p", PROMPT, "-n", str(N_TOKENS), "--temp", "0",
                        "--json"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Fail(f"local tg-run failed:\n{p.stderr}")
    return tokens(p.stdout, "local tg-run")


def check_split_runs(c, servers, model_name, want):
    for sm in ("layer", "tensor"):
        before = [metrics(ip).get("tg_compute_total", 0) for _, ip in servers]
        p = c.client("tg-run", "-m", f"/models/{model_name}", "-p", PROMPT, "-n", str(N_TOKENS),
                     "--temp", "0", "--json", "-sm", sm)
        got = tokens(p.stdout, f"-sm {sm} in the client container")
        if got != want:
            raise Fail(f"-sm {sm} through the cluster: tokens differ from the local run\n"
                       f"  local:   {want}\n  cluster: {got}")
        after = [metrics(ip).get("tg_compute_total", 0) for _, ip in servers]
        idle = [n for (n, _), b, a in zip(servers, before, after) if a <= b]
        if idle:
            raise Fail(f"-sm {sm}: {idle} computed nothing (tg_compute_total unchanged)")
        log(f"-sm {sm}: the {len(want)} greedy tokens of the local run, computed on "
            f"{len(servers)} servers")


def check_metrics(servers):
    for name, ip in servers:
        m = metrics(ip)
        for key in ("tg_sessions_total", "tg_compute_total", "tg_sessions_active"):
            if key not in m:
                raise Fail(f"{name} /metrics lacks {key}: {sorted(m)[:20]}")
        log(f"{name} /metrics: sessions {m['tg_sessions_total']:.0f}, "
            f"computes {m['tg_compute_total']:.0f}")


def check_token_required(c, model_name):
    p = c.client("tg-run", "-m", f"/models/{model_name}", "-p", PROMPT, "-n", "4", "--temp", "0",
                 "-sm", "layer", env=[("TG_TOKEN_FILE", "")], check=False)
    out = p.stdout + p.stderr
    if p.returncode == 0 or "token" not in out:
        raise Fail(f"a client without the token was not refused (exit {p.returncode}):\n{out}")
    log(f"without the token: refused: {[l for l in out.splitlines() if 'token' in l][0].strip()}")


def check_scaling(c, model_name, want):
    c.run("up", "-d", "--scale", "rpc-server=3")
    servers = c.wait_healthy(3)
    listed = c.client("rpc-list").stdout.strip().split(",")
    expect = [f"{name}:50052" for name, _ in servers]
    if listed != expect:
        raise Fail(f"scaled to 3: the client found {listed}, the replicas are {expect}")
    p = c.client("tg-run", "-m", f"/models/{model_name}", "-p", PROMPT, "-n", "16", "--temp", "0",
                 "--json", "-sm", "layer")
    if tokens(p.stdout, "3 servers") != want[:16]:
        raise Fail("-sm layer over 3 replicas: tokens differ from the local run")
    log(f"scaled to 3 replicas: the client found {listed} and ran on them")
    c.run("up", "-d", "--scale", "rpc-server=2")
    return c.wait_healthy(2)


def check_server_loss(c, d, servers, model_name):
    """A client mid-run; one server container stopped; a clear error within FAIL_WITHIN_S."""
    proc = subprocess.Popen(
        c.cmd("run", "--rm", "client", "tg-bench", "-m", f"/models/{model_name}", "-p", "64",
              "-n", "256", "-r", "1000", "-sm", "layer"),
        env=c.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []

    def reader():
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip()))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not all(metrics(ip).get("tg_sessions_active", 0) >= 1 for _, ip in servers):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise Fail(f"the client never ran on both servers:\n{lines}")
        time.sleep(0.2)
    time.sleep(1.0)  # well into generation
    victim = servers[-1][0]
    t0 = time.monotonic()
    d.run(["stop", victim])
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Fail(f"the client still runs 30 s after {victim} stopped")
    t.join(timeout=5)
    errors = [(ts, l) for ts, l in lines if "error" in l]
    if rc == 0 or not errors:
        raise Fail(f"no error after {victim} stopped (exit {rc}):\n{lines[-10:]}")
    ts, line = errors[0]
    if victim not in line:
        raise Fail(f"the error does not name the stopped server {victim}: {line}")
    took = ts - t0
    if took > FAIL_WITHIN_S:
        raise Fail(f"the client took {took:.1f} s to fail after {victim} stopped "
                   f"(limit {FAIL_WITHIN_S} s): {line}")
    log(f"stopped {victim}: the client failed after {took:.1f} s: {line.strip()}")


def run(a, d, scratch):
    c = Cluster(d, a.src, os.path.join(scratch, "secrets"), os.path.dirname(a.model))
    model_name = os.path.basename(a.model)
    try:
        ensure_base_image(d, a.src)
        build_image(d, a.src, scratch, "deploy/docker/cpu.Dockerfile", IMAGE)
        check_runtime_image(d, IMAGE, MAX_IMAGE_BYTES)
        subprocess.run(["bash", os.path.join(a.src, "deploy/compose/gen-secrets.sh"), "-n", "3",
                        "-p", PROJECT, "-o", os.path.join(scratch, "secrets")],
                       check=True, capture_output=True)
        with Phase("compose up, 2 rpc-servers healthy"):
            c.run("config", "-q")
            c.run("up", "-d", "--scale", "rpc-server=2")
            servers = c.wait_healthy(2)
        want = local_tokens(a.tg_run, a.model)
        with Phase("tg-run through the cluster"):
            check_split_runs(c, servers, model_name, want)
        check_metrics(servers)
        check_token_required(c, model_name)
        with Phase("scaling"):
            servers = check_scaling(c, model_name, want)
        check_server_loss(c, d, servers, model_name)
    finally:
        c.run("down", "-v", "--remove-orphans", "-t", "2", check=False, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    a.model = os.path.abspath(a.model)

    def body():
        check_prerequisites("docker-compose")
        if not os.path.exists(a.model):
            raise Skip(f"model {a.model} missing")
        with session() as (d, scratch):
            run(a, d, scratch)

    return run_test(body)


if __name__ == "__main__":
    sys.exit(main())
