#!/usr/bin/env python3
"""The compose cluster of deploy/compose, rendered and checked without a Docker engine
(ctest label "deploy"): what compose_cluster_test.py cannot check where no dockerd runs.

Secrets from gen-secrets.sh -n 3, the configuration rendered by `docker-compose config`
(compose 1), else `docker compose config` (compose 2), else read with PyYAML and merged the
way compose merges these two files. Then:
  - every server rpc-server-<i> mounts exactly one folder holding a private key, its own
    (servers/rpc-server-<i>, whose certificate names it), and no other file or folder it
    mounts holds a key; the client mounts no key at all;
  - every bind mount is read-only and in the long syntax (a missing source is an error, not
    an empty folder); the servers run read-only, with no capability, no-new-privileges, and
    publish no port on the host (metrics included);
  - the image's entrypoint, run (dry) with each server's environment and its mounts mapped
    to the host, serves that server's certificate and key, asks for the token on /metrics
    (--metrics-host 0.0.0.0 --metrics-token-file <the token>) and its health check pins it;
  - the client's --rpc list (the entrypoint's, from its environment) is rpc-server-1..3, each
    a service of the file and the name in that server's certificate;
  - the models folder defaults to deploy/compose/models; a client told to load a model that
    is not in its folder stops with where to put it;
  - gen-secrets.sh -n 4 afterwards leaves the configuration of servers 1..3 unchanged
    (compose 1's config hash, else the rendered service), so `up -d` leaves them running.
Exit 0 pass, 1 fail, 77 skipped (openssl or python3-yaml missing).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docker_env import SKIP, Fail  # noqa: E402

try:
    import yaml
except ImportError:
    yaml = None


def compose_cmd():
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def render(src, secrets, env_extra=None):
    """The merged configuration: (services dict, renderer name)."""
    base = os.path.join(src, "deploy/compose/docker-compose.yml")
    servers = os.path.join(secrets, "docker-compose.servers.yml")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TG_", "COMPOSE_", "DOCKER_"))}
    env.update(env_extra or {})
    cmd = compose_cmd()
    if cmd:
        p = subprocess.run(cmd + ["-f", base, "-f", servers, "--profile", "client", "config"],
                           capture_output=True, text=True, env=env, timeout=60)
        if p.returncode != 0:
            raise Fail(f"{' '.join(cmd)} config: exit {p.returncode}\n{p.stderr}")
        return yaml.safe_load(p.stdout)["services"], " ".join(cmd)
    # No compose here: the two files merged as compose does for these keys (environment and
    # volumes by target), with ${VAR:-default} interpolated.
    def interp(text):
        return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: env.get(m.group(1), m.group(2)),
                      text).replace("$$", "$")
    a = yaml.safe_load(interp(open(base).read()))["services"]
    b = yaml.safe_load(interp(open(servers).read()))["services"]
    for name, svc in b.items():
        if name not in a:
            a[name] = svc
            continue
        t = a[name]
        t.setdefault("environment", {}).update(svc.get("environment", {}))
        vols = {v["target"] if isinstance(v, dict) else v.split(":")[1]: v
                for v in t.get("volumes", []) + svc.get("volumes", [])}
        t["volumes"] = list(vols.values())
        for k, v in svc.items():
            if k not in ("environment", "volumes"):
                t[k] = v
    for svc in a.values():
        for v in svc.get("volumes", []):
            if isinstance(v, dict) and v.get("type") == "bind" and v["source"].startswith("."):
                v["source"] = os.path.normpath(os.path.join(os.path.dirname(base), v["source"]))
    return a, "PyYAML (no docker-compose or docker compose here)"


def holds_key(path):
    """The files under path (a file or a folder) that hold a private key."""
    found = []
    paths = [path] if os.path.isfile(path) else [
        os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
    for p in paths:
        try:
            if b"PRIVATE KEY" in open(p, "rb").read():
                found.append(p)
        except OSError:
            pass
    return found


def binds(name, svc):
    out = []
    for v in svc.get("volumes", []):
        if isinstance(v, str):
            if ":" in v:
                raise Fail(f"{name}: bind mount {v} in the short syntax: a missing source would "
                           "be created as an empty folder")
            continue  # an anonymous volume
        if v.get("type") != "bind":
            continue
        if not v.get("read_only"):
            raise Fail(f"{name}: bind mount {v['source']} -> {v['target']} is writable")
        out.append(v)
    return out


def entrypoint(src, env, *args):
    clean = {"PATH": os.environ["PATH"], "TG_ENTRYPOINT_DRY_RUN": "1"}
    clean.update({k: str(v) for k, v in env.items() if v is not None})
    return subprocess.run(["bash", os.path.join(src, "deploy/docker/tg-entrypoint.sh")] +
                          list(args), env=clean, capture_output=True, text=True)


def host_path(svc, path):
    """The host path of a container path, through the service's bind mounts."""
    for v in binds("", svc):
        t = v["target"].rstrip("/")
        if path == t or path.startswith(t + "/"):
            return v["source"] + path[len(t):]
    raise Fail(f"{path} is on no bind mount")


def check_server(src, secrets, name, svc):
    for key, want in (("read_only", True), ("cap_drop", ["ALL"])):
        if svc.get(key) != want:
            raise Fail(f"{name}: {key} is {svc.get(key)}, {want} expected")
    if not any("no-new-privileges" in o for o in svc.get("security_opt", [])):
        raise Fail(f"{name}: no no-new-privileges")
    if svc.get("ports"):
        raise Fail(f"{name}: publishes {svc['ports']} on the host")
    own = os.path.join(secrets, "servers", name)
    keys = {v["source"]: holds_key(v["source"]) for v in binds(name, svc)}
    with_keys = {s: k for s, k in keys.items() if k}
    if list(with_keys) != [own] or with_keys[own] != [os.path.join(own, "tls.key")]:
        raise Fail(f"{name} mounts these keys: {with_keys}; its own ({own}/tls.key) alone "
                   "expected")
    env = svc["environment"]
    host_env = dict(env)
    for k in ("TG_TLS_DIR", "TG_CA_FILE", "TG_TOKEN_FILE", "TG_METRICS_TOKEN_FILE"):
        if k not in env:
            raise Fail(f"{name}: no {k} in its environment")
        host_env[k] = host_path(svc, env[k])
    if host_env["TG_TLS_DIR"] != own:
        raise Fail(f"{name}: TG_TLS_DIR is {host_env['TG_TLS_DIR']} on the host, not {own}")
    p = entrypoint(src, host_env, "rpc-server")
    if p.returncode != 0:
        raise Fail(f"{name}: tg-entrypoint rpc-server: {p.stderr}")
    run = p.stdout.split()
    flag = {run[j]: run[j + 1] for j in range(len(run) - 1) if run[j].startswith("--")}
    token = host_env["TG_TOKEN_FILE"]
    want = {"--tls-cert": f"{own}/tls.crt", "--tls-key": f"{own}/tls.key",
            "--auth-token-file": token, "--metrics-host": "0.0.0.0",
            "--metrics-token-file": token, "--peer-tls-ca": host_env["TG_CA_FILE"]}
    wrong = {k: flag.get(k) for k, v in want.items() if flag.get(k) != v}
    if wrong:
        raise Fail(f"{name} runs as {p.stdout.strip()}; wrong: {wrong} (want {want})")
    p = entrypoint(src, host_env, "health")
    if f"--tls-cert {own}/tls.crt" not in p.stdout:
        raise Fail(f"{name}: the health check does not pin its certificate: {p.stdout}{p.stderr}")
    return flag["--tls-cert"]


def check(src, tmp):
    secrets = os.path.join(tmp, "secrets")
    gs = os.path.join(src, "deploy/compose/gen-secrets.sh")
    subprocess.run(["bash", gs, "-n", "3", "-o", secrets], check=True, capture_output=True)
    services, how = render(src, secrets)
    print(f"compose: rendered by {how}")
    names = sorted((n for n in services if n.startswith("rpc-server-")),
                   key=lambda n: int(n.rsplit("-", 1)[1]))
    if names != ["rpc-server-1", "rpc-server-2", "rpc-server-3"]:
        raise Fail(f"gen-secrets.sh -n 3: servers {names}")
    for name in names:
        cert = check_server(src, secrets, name, services[name])
        san = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-ext", "subjectAltName"],
                             capture_output=True, text=True).stdout.replace(" ", "")
        if f"DNS:{name}," not in san:
            raise Fail(f"{name}'s certificate does not name {name}: {san}")
    print(f"compose: {', '.join(names)} each mount their own key alone, read-only; metrics "
          "behind the token; nothing published")

    client = services["client"]
    keys = {v["source"]: holds_key(v["source"]) for v in binds("client", client)}
    if any(keys.values()):
        raise Fail(f"the client mounts keys: {keys}")
    env = dict(client["environment"], TG_RPC_WAIT="0")
    p = entrypoint(src, env, "rpc-list")
    listed = p.stdout.strip().split(",")
    if listed != [f"{n}:50052" for n in names]:
        raise Fail(f"the client reaches {listed}, the servers are {names}")
    models = next((v for v in binds("client", client) if v["target"] == "/models"), None)
    want = os.path.join(os.path.realpath(src), "deploy/compose/models")
    if models is None or os.path.realpath(models["source"]) != want:
        raise Fail(f"the client's /models is {models}, not {want} by default")
    services2, _ = render(src, secrets, {"TG_MODELS_DIR": tmp})
    if next(v for v in binds("client", services2["client"]) if v["target"] == "/models")[
            "source"] != tmp:
        raise Fail("TG_MODELS_DIR does not move the client's /models")
    empty = os.path.join(tmp, "models")
    os.makedirs(empty)
    p = entrypoint(src, env, "tg-run", "-m", f"{empty}/stories260K.gguf", "-p", "x")
    if p.returncode == 0 or "TG_MODELS_DIR" not in p.stderr:
        raise Fail(f"tg-run on an empty models folder: exit {p.returncode}, {p.stderr}")
    print(f"compose: client reaches {','.join(listed)}, mounts no key; models from "
          f"deploy/compose/models; an empty folder: {p.stderr.strip()[:90]}...")

    # Scaling as the guide does: the first servers' configuration does not change. Compose 1's
    # config hash (what `up` compares to recreate a container) needs a daemon; without one,
    # the rendered services are compared.
    def hashes():
        cmd = compose_cmd()
        if not cmd or cmd[0] != "docker-compose":
            return None
        p = subprocess.run(["docker-compose", "-f",
                            os.path.join(src, "deploy/compose/docker-compose.yml"), "-f",
                            os.path.join(secrets, "docker-compose.servers.yml"), "config",
                            "--hash=*"], capture_output=True, text=True)
        return dict(line.split() for line in p.stdout.splitlines()) if p.returncode == 0 else None
    before = hashes()
    subprocess.run(["bash", gs, "-n", "4", "-o", secrets], check=True, capture_output=True)
    after = hashes()
    what = "compose config hashes"
    if before is None or after is None:
        before = services
        after, _ = render(src, secrets)
        what = "rendered services"
    changed = [n for n in names if before[n] != after.get(n)]
    if changed or "rpc-server-4" not in after:
        raise Fail(f"gen-secrets.sh -n 4 after -n 3: {changed} changed ({what}); "
                   f"services now {sorted(after)}")
    print(f"compose: -n 4 after -n 3 adds rpc-server-4; servers 1-3 unchanged ({what})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    a = ap.parse_args()
    if shutil.which("openssl") is None:
        print("skipped: openssl not installed")
        return SKIP
    if yaml is None:
        print("skipped: python3-yaml not installed")
        return SKIP
    try:
        with tempfile.TemporaryDirectory() as tmp:
            check(os.path.abspath(a.src), tmp)
    except Fail as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
