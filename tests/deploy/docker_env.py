"""What the container tests of tests/deploy share: a dockerd of their own, the base image, image
builds, and the checks every runtime image must pass.

The daemon's data root (images and the BuildKit cache, ccache included) is kept between runs
in TG_DEPLOY_CACHE (default ~/.cache/tensorgrid-deploy), one run at a time (a lock file);
its exec root, socket and log live in a scratch folder that is removed afterwards. It runs
without a default bridge (--bridge=none, builds use --network host) and with its own address
pool (TG_DEPLOY_ADDRESS_POOL), so it does not clash with another dockerd on the host.
"""

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

SKIP = 77
DOCKER = "/usr/bin/docker"
BASE_IMAGE = "debian:bookworm-slim"
ADDRESS_POOL = os.environ.get("TG_DEPLOY_ADDRESS_POOL", "10.213.0.0/16")
# What a run leaves of the BuildKit cache: enough for the ccache of every image.
BUILD_CACHE_KEEP = "8GB"


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


def check_prerequisites(*tools):
    if os.geteuid() != 0:
        raise Skip("not root: this test starts its own dockerd")
    if not os.path.exists(DOCKER):
        raise Skip(f"{DOCKER} not installed (apt-get install docker.io)")
    for tool in ("dockerd",) + tools:
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            raise Skip(f"{tool} not installed (apt-get install docker.io docker-compose)")


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
            for _ in range(150):
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
        while time.monotonic() < deadline and self.proc.poll() is None:
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

    def clean(self):
        """Removes every container, volume and network: this daemon holds only the test's."""
        left = self.run(["ps", "-aq"], check=False).stdout.split()
        if left:
            self.run(["rm", "-f", "-v"] + left, check=False)
        for what in ("volume", "network", "image"):
            self.run([what, "prune", "-f"], check=False)  # images: the untagged old builds
        self.run(["builder", "prune", "-f", "--keep-storage", BUILD_CACHE_KEEP], check=False)
        containers = self.run(["ps", "-aq"], check=False).stdout.split()
        volumes = self.run(["volume", "ls", "-q"], check=False).stdout.split()
        networks = [n for n in self.run(["network", "ls", "--format", "{{.Name}}"],
                                        check=False).stdout.split() if n not in ("host", "none")]
        log(f"teardown: {len(containers)} containers, {len(volumes)} volumes, "
            f"{len(networks)} networks left")
        if containers or volumes or networks:
            raise Fail(f"left behind: {containers} {volumes} {networks}")

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
        with contextlib.suppress(OSError):
            os.unlink(self.stale_pid)

    def running(self):
        return self.proc is not None and self.proc.poll() is None


@contextlib.contextmanager
def session():
    """Yields a started Dockerd and its scratch folder; afterwards cleans it, stops it, and
    removes the scratch folder (also when the body fails)."""
    cache = os.environ.get("TG_DEPLOY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "tensorgrid-deploy"))
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one run per data root
        scratch = tempfile.mkdtemp(prefix="tgd.", dir="/tmp")  # short: unix socket paths
        d = Dockerd(cache, scratch)
        try:
            d.start()
            yield d, scratch
        finally:
            try:
                if d.running():
                    d.clean()
            finally:
                d.stop()
                shutil.rmtree(scratch, ignore_errors=True)


def ensure_base_image(d, src, cuda=False):
    """debian:bookworm-slim (and with cuda, tensorgrid/cuda-local:*): pulled, else made."""
    wanted = [BASE_IMAGE] + (["tensorgrid/cuda-local:devel", "tensorgrid/cuda-local:runtime"]
                             if cuda else [])
    if all(d.run(["image", "inspect", i], check=False).returncode == 0 for i in wanted):
        return
    if not cuda and d.run(["pull", BASE_IMAGE], check=False, timeout=300).returncode == 0:
        return
    if shutil.which("debootstrap") is None:
        raise Skip(f"no {BASE_IMAGE}: Docker Hub unreachable and debootstrap missing")
    with Phase("make-base-images.sh" + (" --cuda" if cuda else "")):
        p = subprocess.run(["bash", os.path.join(src, "deploy/docker/make-base-images.sh")] +
                           (["--cuda"] if cuda else []),
                           env=dict(d.env, DOCKER=DOCKER), capture_output=True, text=True)
    if p.returncode != 0:
        raise Skip(f"cannot make the base images (no registry, no mirror?):\n{p.stderr[-1500:]}")


def build_image(d, src, scratch, dockerfile, tag, build_args=()):
    log_path = os.path.join(scratch, f"build-{os.path.basename(dockerfile)}.log")
    args = [x for kv in build_args for x in ("--build-arg", kv)]
    backend = os.path.basename(dockerfile).split(".")[0]
    with Phase(f"docker build {dockerfile}"), open(log_path, "w") as out:
        # deploy/docker/build-image.sh, as docs/deployment.md builds: BuildKit, else the
        # classic builder (its choice is the log's first line). --network host: this daemon
        # has no default bridge for RUN steps. BuildKit logs plain progress to a file.
        env = dict(d.env, DOCKER=DOCKER)
        env.pop("DOCKER_BUILDKIT", None)
        p = subprocess.run(["bash", os.path.join(src, "deploy/docker/build-image.sh"), backend,
                            "--network", "host", "-t", tag] + args,
                           env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if p.returncode != 0:
        raise Fail(f"{dockerfile} failed to build:\n{open(log_path).read()[-4000:]}")
    for line in open(log_path):
        if "build.sh:" in line or "build-image:" in line or re.search(r"(Hits|Misses):", line):
            log(line.strip())


def check_runtime_image(d, image, max_bytes=None):
    """Non-root, a grpc.health HEALTHCHECK, no compiler, no key, token or certificate, no
    setuid or setgid program."""
    info = json.loads(d.run(["image", "inspect", image]).stdout)[0]
    size = info["Size"]
    log(f"image {image}: {size / 1e6:.1f} MB")
    if max_bytes is not None and size >= max_bytes:
        raise Fail(f"{image} is {size / 1e6:.1f} MB, the limit is {max_bytes / 1e6:.0f} MB")
    user = info["Config"].get("User", "")
    if user.split(":")[0] in ("", "0", "root"):
        raise Fail(f"{image} runs as '{user or 'root'}', not as a non-root user")
    health = (info["Config"].get("Healthcheck") or {}).get("Test", [])
    if "health" not in " ".join(health):
        raise Fail(f"{image} has no grpc.health HEALTHCHECK: {health}")
    probe = ("for c in cc gcc g++ c++ clang nvcc cpp as ld; do command -v $c && exit 3; done; "
             "find / -xdev \\( -name '*.key' -o -name '*.pem' -o -name '*.crt' -o -name token "
             "\\) -type f 2>/dev/null | grep -Ev '^/(proc|etc/ssl|usr/share/ca-certificates|usr/lib/ssl)/' "
             "|| true")  # the public CA bundle of a base image is no secret
    p = d.run(["run", "--rm", "--entrypoint", "/bin/bash", image, "-c", probe], check=False)
    if p.returncode == 3:
        raise Fail(f"{image} holds a compiler: {p.stdout.strip()}")
    if p.stdout.strip():
        raise Fail(f"{image} holds key or certificate files:\n{p.stdout}")
    p = d.run(["run", "--rm", "--user", "0", "--entrypoint", "/bin/sh", image, "-c",
               "find / -xdev -perm /6000 -type f 2>/dev/null; true"])
    if p.stdout.strip():
        raise Fail(f"{image} holds setuid/setgid programs:\n{p.stdout}")
    log(f"image {image}: no setuid/setgid program")
    return info


def run_test(body):
    """Runs body(), the whole test: the exit code ctest reads (0 pass, 1 fail, SKIP with the
    reason printed), and the total time."""
    t_start = time.monotonic()
    try:
        body()
    except Skip as e:
        print(f"skipped: {e}")
        return SKIP
    except Fail as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        log(f"total {time.monotonic() - t_start:.1f} s")
    print("PASS")
    return 0
