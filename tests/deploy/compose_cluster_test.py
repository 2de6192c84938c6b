#!/usr/bin/env python3
"""The compose cluster of deploy/, built and run for real (ctest label "deploy").

Starts a dockerd of its own, builds the CPU image from the repository
(deploy/docker/build-image.sh cpu), starts deploy/compose with two rpc-servers (TLS, a
certificate each, one token), the way docs/deployment.md does, and checks that:
  - the image is under 150 MB, runs as a non-root user, holds no compiler, no key, token or
    certificate, no setuid/setgid program, and has a HEALTHCHECK; both servers turn healthy
    through it;
  - each server container can read its own private key and no other server's (every file
    holding a private key it can reach, compared with the host's keys);
  - tg-run in the client container gives the greedy tokens of a local run of the build tree's
    tg-run, with -sm layer and with -sm tensor, computing on both servers;
  - every server's /metrics answers with the token and refuses a scrape without it;
  - a client without the token is refused;
  - a models folder that is missing or empty stops the client with a message;
  - scaled from 2 to 4 the guide's way (gen-secrets.sh -n 4, then up -d), servers 1 and 2
    are neither recreated nor unhealthy, and all four are healthy 60 s after scaling; the
    client finds all four by name and runs on them;
  - gen-secrets.sh --rotate, then the servers restarted one at a time, as it prints: every
    server healthy throughout, each then serving its new certificate;
  - stopping one server container makes a running client fail, naming that server, within 5 s.
Then it tears everything down: compose down -v, the containers, networks and volumes left in
its daemon, the dockerd (by pid), its exec root and socket (docker_env.py: the daemon's data
root with the image and build cache is kept for the next run).

Exit 0 pass, 1 fail, 77 skipped with the reason printed (not root, no docker.io/
docker-compose, a dockerd that cannot start, no base image, no model).
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
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
SCALED_HEALTHY_S = 60  # every server healthy this long after scaling 2 -> 4


class Cluster:
    """docker-compose on deploy/compose plus the servers file of gen-secrets.sh, with this
    test's image, secrets and model folder."""

    def __init__(self, dockerd, src, secrets, models):
        self.d = dockerd
        self.src = src
        self.secrets = secrets
        self.file = os.path.join(src, "deploy", "compose", "docker-compose.yml")
        self.servers_file = os.path.join(secrets, "docker-compose.servers.yml")
        self.env = dict(dockerd.env, TG_IMAGE=IMAGE, TG_MODELS_DIR=models)

    def gen_secrets(self, *args):
        p = subprocess.run(["bash", os.path.join(self.src, "deploy/compose/gen-secrets.sh"),
                            "-o", self.secrets] + list(args), capture_output=True, text=True)
        if p.returncode != 0:
            raise Fail(f"gen-secrets.sh {' '.join(args)}: {p.stderr}")
        return p.stderr

    def token(self):
        return open(os.path.join(self.secrets, "token")).read().strip()

    def cmd(self, *args):
        return ["docker-compose", "-p", PROJECT, "-f", self.file, "-f", self.servers_file] + \
            list(args)

    def run(self, *args, check=True, timeout=300, env=None):
        p = subprocess.run(self.cmd(*args), env=dict(self.env, **(env or {})),
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise Fail(f"docker-compose {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def client(self, *args, env=(), check=True, timeout=300, compose_env=None):
        extra = [x for k, v in env for x in ("-e", f"{k}={v}")]
        return self.run("run", "--rm", *extra, "client", *args, check=check, timeout=timeout,
                        env=compose_env)

    def containers(self):
        """Running rpc-server containers, in server order: [(service, ip, health, id)]."""
        p = self.d.run(["ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}"])
        out = []
        for cid in p.stdout.split():
            info = json.loads(self.d.run(["inspect", cid]).stdout)[0]
            service = info["Config"]["Labels"].get("com.docker.compose.service", "")
            if not re.fullmatch(r"rpc-server-\d+", service):
                continue
            ip = next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"]
            health = info["State"].get("Health", {}).get("Status", "none")
            out.append((service, ip, health, info["Id"]))
        return sorted(out, key=lambda s: int(s[0].rsplit("-", 1)[1]))

    def servers(self):
        return [(name, ip, health) for name, ip, health, _ in self.containers()]

    def wait_healthy(self, n, timeout=90):
        """The guide's wait: every server's HEALTHCHECK status (docker inspect) is healthy."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.servers()
            if len(s) == n and all(h == "healthy" for _, _, h in s):
                return [(name, ip) for name, ip, _ in s]
            time.sleep(1)
        raise Fail(f"{n} healthy rpc-servers expected within {timeout} s, have {self.servers()}")


def metrics(ip, token):
    req = urllib.request.Request(f"http://{ip}:9090/metrics",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
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
        before = [metrics(ip, c.token()).get("tg_compute_total", 0) for _, ip in servers]
        p = c.client("tg-run", "-m", f"/models/{model_name}", "-p", PROMPT, "-n", str(N_TOKENS),
                     "--temp", "0", "--json", "-sm", sm)
        got = tokens(p.stdout, f"-sm {sm} in the client container")
        if got != want:
            raise Fail(f"-sm {sm} through the cluster: tokens differ from the local run\n"
                       f"  local:   {want}\n  cluster: {got}")
        after = [metrics(ip, c.token()).get("tg_compute_total", 0) for _, ip in servers]
        idle = [n for (n, _), b, a in zip(servers, before, after) if a <= b]
        if idle:
            raise Fail(f"-sm {sm}: {idle} computed nothing (tg_compute_total unchanged)")
        log(f"-sm {sm}: the {len(want)} greedy tokens of the local run, computed on "
            f"{len(servers)} servers")


def check_metrics(c, servers):
    for name, ip in servers:
        try:
            urllib.request.urlopen(f"http://{ip}:9090/metrics", timeout=5)
            raise Fail(f"{name} /metrics answered a scrape without the token")
        except urllib.error.HTTPError as e:
            if e.code != 401:
                raise Fail(f"{name} /metrics without the token: HTTP {e.code}, 401 expected")
        m = metrics(ip, c.token())
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


def check_own_key(c):
    """Each server container reaches its own private key and no other server's."""
    host = {}
    for name in os.listdir(os.path.join(c.secrets, "servers")):
        data = open(os.path.join(c.secrets, "servers", name, "tls.key"), "rb").read()
        host[hashlib.sha256(data).hexdigest()] = name
    # Every file holding a private key the container's user can read, outside /proc and /sys.
    probe = ("find / \\( -path /proc -o -path /sys \\) -prune -o -type f -size -64k -print "
             "2>/dev/null | while read -r f; do grep -qs 'PRIVATE KEY' \"$f\" && "
             "sha256sum \"$f\"; done; true")
    for service, _, _, cid in c.containers():
        p = c.d.run(["exec", cid, "/bin/sh", "-c", probe], timeout=120)
        seen = {}
        for line in p.stdout.splitlines():
            digest, path = line.split(None, 1)
            seen[path] = host.get(digest, "not a server key")
        if sorted(set(seen.values())) != [service]:
            raise Fail(f"{service} can read these keys: {seen}; its own alone expected")
        # And the other servers' keys are not there to be opened at all.
        others = [n for n in host.values() if n != service]
        p = c.d.run(["exec", cid, "/bin/sh", "-c",
                     "cat /run/secrets/tensorgrid/tls/tls.key >/dev/null && "
                     + " && ".join(f"! ls -d /run/secrets/*/{o} /run/secrets/*/*/{o} 2>/dev/null"
                                   for o in others)], check=False)
        if p.returncode != 0:
            raise Fail(f"{service}: reading its own key, or the absence of {others}: "
                       f"{p.stdout}{p.stderr}")
        log(f"{service}: reads {list(seen)} (its own key), none of {others}")


def check_models_folder(c, model_name):
    """A models folder that is missing, or empty, stops the client with a message."""
    missing = os.path.join(c.secrets, "no-such-models")
    p = c.client("tg-run", "-m", f"/models/{model_name}", "-n", "1", check=False,
                 compose_env={"TG_MODELS_DIR": missing})
    if p.returncode == 0 or "no-such-models" not in p.stdout + p.stderr:
        raise Fail(f"TG_MODELS_DIR={missing} (missing): exit {p.returncode}, "
                   f"not an error naming it:\n{p.stdout}{p.stderr}")
    empty = os.path.join(c.secrets, "empty-models")
    os.makedirs(empty, exist_ok=True)
    p = c.client("tg-run", "-m", f"/models/{model_name}", "-n", "1", check=False,
                 compose_env={"TG_MODELS_DIR": empty})
    if p.returncode == 0 or "TG_MODELS_DIR" not in p.stdout + p.stderr:
        raise Fail(f"an empty TG_MODELS_DIR: exit {p.returncode}:\n{p.stdout}{p.stderr}")
    log("models folder missing: compose refuses; empty: the client says where the model goes")


def check_scaling(c, model_name, want):
    """The guide's step: certificates for 4 (servers 1, 2 keep theirs), then up -d."""
    before = {name: cid for name, _, _, cid in c.containers()}
    c.gen_secrets("-n", "4")
    c.run("up", "-d")
    t0 = time.monotonic()
    bad = []
    while time.monotonic() - t0 < SCALED_HEALTHY_S:
        s = c.containers()
        for name, _, health, cid in s:
            if name in before and (health != "healthy" or cid != before[name]):
                bad.append((round(time.monotonic() - t0), name, health,
                            "recreated" if cid != before[name] else "same container"))
        if time.monotonic() - t0 > 45 and not (len(s) == 4 and
                                                all(h == "healthy" for _, _, h, _ in s)):
            bad.append((round(time.monotonic() - t0), "not 4 healthy", [x[:3] for x in s]))
        if bad:
            raise Fail(f"scaling 2 -> 4: {bad}")
        time.sleep(2)
    servers = c.wait_healthy(4, timeout=1)
    log(f"scaled 2 -> 4: servers 1-2 healthy and untouched, all 4 healthy "
        f"{SCALED_HEALTHY_S} s after scaling")
    listed = c.client("rpc-list").stdout.strip().split(",")
    expect = [f"{name}:50052" for name, _ in servers]
    if listed != expect:
        raise Fail(f"scaled to 4: the client found {listed}, the servers are {expect}")
    p = c.client("tg-run", "-m", f"/models/{model_name}", "-p", PROMPT, "-n", "16", "--temp", "0",
                 "--json", "-sm", "layer")
    if tokens(p.stdout, "4 servers") != want[:16]:
        raise Fail("-sm layer over 4 servers: tokens differ from the local run")
    log(f"scaled to 4: the client found {listed} and ran on them")
    return servers


def check_rotation(c):
    """--rotate, then the servers restarted one at a time as it prints: healthy throughout."""
    out = c.gen_secrets("-n", "4", "--rotate")
    if "one at a time" not in out:
        raise Fail(f"gen-secrets.sh --rotate does not say how to restart:\n{out}")
    time.sleep(35)  # past 3 health intervals: the running servers keep their old files
    s = c.servers()
    if not all(h == "healthy" for _, _, h in s):
        raise Fail(f"after --rotate, before any restart: {s}")
    for name, _, _ in s:
        c.run("restart", name)
        deadline = time.monotonic() + 60
        while dict((n, h) for n, _, h in c.servers()).get(name) != "healthy":
            if time.monotonic() > deadline:
                raise Fail(f"{name} not healthy 60 s after its restart: {c.servers()}")
            time.sleep(1)
        others = [(n, h) for n, _, h in c.servers() if n != name and h != "healthy"]
        if others:
            raise Fail(f"restarting {name}: {others} unhealthy")
    # Healthy means the health probe, pinned to the new tls.crt, saw it served.
    log("--rotate: servers restarted one at a time, each healthy on its new certificate")
    return c.wait_healthy(4)


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
    while not all(metrics(ip, c.token()).get("tg_sessions_active", 0) >= 1 for _, ip in servers):
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
    # The models folder as the guide makes it: the model copied in.
    models = os.path.join(scratch, "models")
    os.makedirs(models)
    shutil.copy(a.model, models)
    c = Cluster(d, a.src, os.path.join(scratch, "secrets"), models)
    model_name = os.path.basename(a.model)
    try:
        ensure_base_image(d, a.src)
        build_image(d, a.src, scratch, "deploy/docker/cpu.Dockerfile", IMAGE)
        check_runtime_image(d, IMAGE, MAX_IMAGE_BYTES)
        c.gen_secrets("-n", "2")
        with Phase("compose up, 2 rpc-servers healthy"):
            c.run("config", "-q")
            c.run("up", "-d")
            servers = c.wait_healthy(2)
        check_own_key(c)
        want = local_tokens(a.tg_run, a.model)
        with Phase("tg-run through the cluster"):
            check_split_runs(c, servers, model_name, want)
        check_metrics(c, servers)
        check_token_required(c, model_name)
        check_models_folder(c, model_name)
        with Phase("scaling 2 -> 4"):
            servers = check_scaling(c, model_name, want)
        check_own_key(c)
        with Phase("rotation"):
            servers = check_rotation(c)
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
