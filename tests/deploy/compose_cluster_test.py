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
its daemon, the dockerd (by pid), its exec root and socket.

The daemon's data root (images and the BuildKit cache, ccache included) is kept between runs
in TG_DEPLOY_CACHE (default ~/.cache/tensorgrid-deploy), so a second run builds from cache.
Without Docker Hub the base image is made with deploy/docker/make-base-images.sh.

Exit 0 pass, 1 fail, 77 skipped with the reason printed (not root, no docker.io/
docker-compose, a dockerd that cannot start, no base image, no model).
"""

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SKIP = 77
DOCKER = "/usr/bin/docker"
PROJECT = "tgdeploytest"
IMAGE = "tensorgrid/cpu:deploy-test"
BASE_IMAGE = "debian:bookworm-slim"
MAX_IMAGE_BYTES = 150_000_000
FAIL_WITHIN_S = 5.0
PROMPT = "Once upon a time"
N_TOKENS = 64
# Addresses for the networks of this daemon (no default bridge: it would clash with another
# dockerd's docker0).
ADDRESS_POOL = os.environ.get("TG_DEPLOY_ADDRESS_POOL", "10.213.0.0/16")


class Skip(Exception):
    pass


class Fail(Exception):
    pass


def log(msg):
    print(f"deploy: {msg}", flush=True)


class Phase:
    """Prints how long a step took (the figures in docs/deployment.md come from these lines)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t0 = time.monotonic()
        log(f"{self.name} ...")

    def __exit__(self, *exc):
        log(f"{self.name}: {time.monotonic() - self.t0:.1f} s")


class Dockerd:
    """A dockerd of this test's own: data root in the cache, the rest in a scratch folder."""

    def __init__(self, cache, scratch):
        self.data_root = os.path.join(cache, "docker")
        self.exec_root = os.path.join(scratch, "exec")
        self.sock = os.path.join(scratch, "docker.sock")
        self.log_path = os.path.join(scratch, "dockerd.log")
        self.stale_pid = os.path.join(cache, "dockerd.pid")
        self.proc = None
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}", DOCKER_BUILDKIT="1")

    def stop_stale(self):
        """A run killed by a timeout leaves its dockerd on the data root: stop it by its pid."""
        try:
            pid = int(open(self.stale_pid).read())
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except (OSError, ValueError):
            return
        if "dockerd" in cmdline and self.data_root in cmdline:
            log(f"stopping the dockerd (pid {pid}) an interrupted run left")
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                time.sleep(0.2)

    def start(self):
        self.stop_stale()
        os.makedirs(self.data_root, exist_ok=True)
        cmd = [shutil.which("dockerd") or "/usr/sbin/dockerd", "--data-root", self.data_root,
               "--exec-root", self.exec_root, "-H", f"unix://{self.sock}",
               "--pidfile", os.path.join(os.path.dirname(self.sock), "dockerd.pid"),
               "--bridge=none", "--default-address-pool", f"base={ADDRESS_POOL},size=24"]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        with open(self.stale_pid, "w") as f:
            f.write(str(self.proc.pid))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.run(["info"], check=False).returncode == 0:
                log(f"dockerd pid {self.proc.pid}, data root {self.data_root}")
                return
            time.sleep(0.3)
        tail = open(self.log_path).read()[-1500:]
        raise Skip(f"dockerd does not start here (needs root, cgroups, overlayfs):\n{tail}")

    def run(self, args, check=True, timeout=600, **kw):
        p = subprocess.run([DOCKER] + args, env=self.env, capture_output=True, text=True,
                           timeout=timeout, **kw)
        if check and p.returncode != 0:
            raise Fail(f"docker {' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        return p

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        log(f"dockerd pid {self.proc.pid} stopped (exit {self.proc.returncode})")
        try:
            os.unlink(self.stale_pid)
        except OSError:
            pass


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


def ensure_base_image(d, src):
    if d.run(["image", "inspect", BASE_IMAGE], check=False).returncode == 0:
        return
    if d.run(["pull", BASE_IMAGE], check=False, timeout=300).returncode == 0:
        return
    if shutil.which("debootstrap") is None:
        raise Skip(f"no {BASE_IMAGE}: Docker Hub unreachable and debootstrap missing")
    with Phase(f"make {BASE_IMAGE} (Docker Hub unreachable)"):
        p = subprocess.run(["bash", os.path.join(src, "deploy/docker/make-base-images.sh")],
                           env=dict(d.env, DOCKER=DOCKER), capture_output=True, text=True)
    if p.returncode != 0:
        raise Skip(f"cannot make {BASE_IMAGE} (no registry, no mirror?):\n{p.stderr[-1500:]}")


def build_image(d, src, scratch):
    log_path = os.path.join(scratch, "build.log")
    with Phase("docker build deploy/docker/cpu.Dockerfile"), open(log_path, "w") as out:
        # --network host: this daemon has no default bridge for RUN steps.
        p = subprocess.run([DOCKER, "build", "--network", "host", "--progress", "plain", "-f",
                            os.path.join(src, "deploy/docker/cpu.Dockerfile"), "-t", IMAGE, src],
                           env=d.env, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if p.returncode != 0:
        raise Fail(f"image build failed:\n{open(log_path).read()[-4000:]}")
    for line in open(log_path):
        if "build.sh:" in line or re.search(r"cache (hits|misses)|Hits:|Misses:", line):
            log(line.strip())


def check_image(d):
    info = json.loads(d.run(["image", "inspect", IMAGE]).stdout)[0]
    size = info["Size"]
    log(f"image {IMAGE}: {size / 1e6:.1f} MB")
    if size >= MAX_IMAGE_BYTES:
        raise Fail(f"the CPU runtime image is {size / 1e6:.1f} MB, the limit is "
                   f"{MAX_IMAGE_BYTES / 1e6:.0f} MB")
    user = info["Config"].get("User", "")
    if user.split(":")[0] in ("", "0", "root"):
        raise Fail(f"the image runs as '{user or 'root'}', not as a non-root user")
    health = (info["Config"].get("Healthcheck") or {}).get("Test", [])
    if "health" not in " ".join(health):
        raise Fail(f"the image has no grpc.health HEALTHCHECK: {health}")
    # No compiler, and no secret material baked in (keys, tokens, certificates).
    probe = ("for c in cc gcc g++ c++ clang cpp as ld; do command -v $c && exit 3; done; "
             "find / -xdev \\( -name '*.key' -o -name '*.pem' -o -name '*.crt' -o -name token "
             "\\) -type f 2>/dev/null | grep -v '^/proc' || true")
    p = d.run(["run", "--rm", "--entrypoint", "/bin/bash", IMAGE, "-c", probe], check=False)
    if p.returncode == 3:
        raise Fail(f"the runtime image holds a compiler: {p.stdout.strip()}")
    if p.stdout.strip():
        raise Fail(f"the runtime image holds key or certificate files:\n{p.stdout}")


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


def teardown(c, d):
    if d.proc is None or d.proc.poll() is not None:
        return
    try:
        c.run("down", "-v", "--remove-orphans", "-t", "2", check=False, timeout=120)
        # compose run --rm containers of a failed step, and anything else left in this
        # private daemon: it holds nothing but this test's objects.
        left = d.run(["ps", "-aq"], check=False).stdout.split()
        if left:
            d.run(["rm", "-f", "-v"] + left, check=False)
        d.run(["volume", "prune", "-f"], check=False)
        d.run(["network", "prune", "-f"], check=False)
        containers = d.run(["ps", "-aq"], check=False).stdout.split()
        volumes = d.run(["volume", "ls", "-q"], check=False).stdout.split()
        networks = [n for n in d.run(["network", "ls", "--format", "{{.Name}}"],
                                     check=False).stdout.split() if n not in ("host", "none")]
        log(f"teardown: {len(containers)} containers, {len(volumes)} volumes, "
            f"{len(networks)} networks left")
    finally:
        d.stop()


def check_prerequisites(a):
    if os.geteuid() != 0:
        raise Skip("not root: this test starts its own dockerd")
    for tool in ("dockerd", "docker-compose"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            raise Skip(f"{tool} not installed (apt-get install docker.io docker-compose)")
    if not os.path.exists(DOCKER):
        raise Skip(f"{DOCKER} not installed (apt-get install docker.io)")
    if not os.path.exists(a.model):
        raise Skip(f"model {a.model} missing")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--tg-run", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    a.model = os.path.abspath(a.model)
    t_start = time.monotonic()
    try:
        check_prerequisites(a)
    except Skip as e:
        print(f"skipped: {e}")
        return SKIP
    cache = os.environ.get("TG_DEPLOY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "tensorgrid-deploy"))
    os.makedirs(cache, exist_ok=True)
    lock = open(os.path.join(cache, "lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one run per data root
    scratch = tempfile.mkdtemp(prefix="tgd.", dir="/tmp")  # short: unix socket paths
    d = Dockerd(cache, scratch)
    c = Cluster(d, a.src, os.path.join(scratch, "secrets"), os.path.dirname(a.model))
    model_name = os.path.basename(a.model)
    try:
        d.start()
        ensure_base_image(d, a.src)
        build_image(d, a.src, scratch)
        check_image(d)
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
    except Skip as e:
        print(f"skipped: {e}")
        return SKIP
    except Fail as e:
        print(f"FAIL: {e}")
        print(open(d.log_path).read()[-1500:] if os.path.exists(d.log_path) else "")
        return 1
    finally:
        teardown(c, d)
        shutil.rmtree(scratch, ignore_errors=True)
        log(f"total {time.monotonic() - t_start:.1f} s")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
