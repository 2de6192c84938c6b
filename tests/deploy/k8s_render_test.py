#!/usr/bin/env python3
"""Renders every kustomize overlay of deploy/k8s with `kubectl kustomize` and checks the objects.

For every overlay (and the optional ServiceMonitor component):
  - a StatefulSet of rpc-servers behind a headless Service named by its serviceName, whose
    selector, like the PodDisruptionBudget's, picks the StatefulSet's pods;
  - native gRPC liveness and readiness probes on the port the server serves grpc.health.v1
    on (TG_HEALTH_PORT) and Prometheus annotations on its metrics port (TG_METRICS_PORT);
  - every container of every pod: non-root, no privilege escalation, read-only root file
    system, all capabilities dropped, requests and limits;
  - the TLS and token files the containers are told to read lie in Secret volumes mounted
    read-only (or, the server's own key, in a memory volume its init container fills from
    one), and no Secret (nor a token in an env value) is part of the manifests;
  - each server reads its own key only: the Secret with every server's key is mounted into
    the init container alone, every other mount of it is restricted to ca.crt, and the
    init container (the image's entrypoint, run here on the Secret as gen-secrets.sh --k8s
    prints it) copies exactly pod i's certificate and key for pod i; the server's command
    then uses them, with /metrics on the pod's address behind the token, health on the
    pod's address for the kubelet;
  - the client Job's --rpc list, as the image's own entrypoint (deploy/docker/tg-entrypoint.sh)
    makes it from the Job's environment, names pod <set>-<i>.<service>:<grpc port> for every
    replica, and the certificates of gen-secrets.sh --k8s cover exactly those names;
  - cuda: nvidia.com/gpu requested and limited alike, and the entrypoint serves that many
    GPUs (-d 0..N-1); re-rendered with 4 GPUs and 3 replicas, both follow.
Then the objects are validated against the Kubernetes API schemas (npm kubernetes-models,
installed once into TG_DEPLOY_CACHE/npm; that part is skipped, with the reason, when npm
cannot reach its registry and nothing is cached).

Exit 0 pass, 1 fail, 77 skipped (kubectl or python3-yaml missing).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
NPM_PACKAGES = ["kubernetes-models@5.1.0", "@kubernetes-models/prometheus-operator@6.0.0"]

try:
    import yaml
except ImportError:
    yaml = None


class Fail(Exception):
    pass


def render(kustomization_dir):
    p = subprocess.run(["kubectl", "kustomize", kustomization_dir], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise Fail(f"kubectl kustomize {kustomization_dir}: {p.stderr}")
    return [o for o in yaml.safe_load_all(p.stdout) if o]


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if len(found) != 1:
        raise Fail(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def containers(pod_spec):
    return pod_spec.get("initContainers", []) + pod_spec["containers"]


def check_security(kind, pod_spec):
    psc = pod_spec.get("securityContext", {})
    for c in containers(pod_spec):
        sc = c.get("securityContext", {})
        where = f"{kind} container {c['name']}"
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True):
            raise Fail(f"{where}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser", 0)) == 0:
            raise Fail(f"{where}: runs as uid 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            raise Fail(f"{where}: allowPrivilegeEscalation is not false")
        if sc.get("readOnlyRootFilesystem") is not True:
            raise Fail(f"{where}: the root file system is writable")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            raise Fail(f"{where}: capabilities are not all dropped")
        res = c.get("resources", {})
        for part in ("requests", "limits"):
            if not {"cpu", "memory"} <= set(res.get(part, {})):
                raise Fail(f"{where}: no cpu/memory {part}")


def tls_init(pod_spec):
    """The init container that copies this pod's key (tg-entrypoint select-tls), or None."""
    found = [c for c in pod_spec.get("initContainers", []) if c.get("args") == ["select-tls"]]
    return found[0] if found else None


def check_secrets(objs, kind, pod_spec):
    """Every file an env variable names under /run/secrets comes from a read-only Secret, or
    from a memory volume that the select-tls init container fills from one."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    init = tls_init(pod_spec)
    for c in containers(pod_spec):
        mounts = c.get("volumeMounts", [])
        for key, value in env_of(c).items():
            if value and re.search(r"token|secret", key, re.I) is None and "/run/secrets" not in value:
                continue
            if value and not value.startswith("/"):
                raise Fail(f"{kind}/{c['name']}: {key} holds a value, not a file path: a secret "
                           "in the manifest")
            if not value:
                continue
            m = [mt for mt in mounts if value == mt["mountPath"] or
                 value.startswith(mt["mountPath"].rstrip("/") + "/")]
            if not m:
                raise Fail(f"{kind}/{c['name']}: {key}={value} is not on a mounted volume")
            vol = volumes[m[0]["name"]]
            # The init container writes the pod's key there; the server reads it.
            filled = init is not None and any(
                mt["name"] == vol["name"] and mt["mountPath"] == env_of(init).get("TG_TLS_DIR")
                for mt in init.get("volumeMounts", []))
            if filled and vol.get("emptyDir", {}).get("medium") != "Memory":
                raise Fail(f"{kind}/{c['name']}: {key}={value}: the key's volume "
                           f"{vol['name']} is not in memory (emptyDir medium: Memory)")
            if "secret" not in vol and not filled:
                raise Fail(f"{kind}/{c['name']}: {key}={value} is on volume {vol['name']}, "
                           "not a Secret")
            if not m[0].get("readOnly") and c is not init:
                raise Fail(f"{kind}/{c['name']}: Secret volume {vol['name']} is mounted writable")
    if any(o["kind"] == "Secret" for o in objs):
        raise Fail("a Secret is part of the manifests: secrets are created out of band")


def check_server(objs, overlay):
    sts = one(objs, "StatefulSet")
    svc = one(objs, "Service", sts["spec"]["serviceName"])
    if svc["spec"].get("clusterIP") != "None":
        raise Fail(f"Service {svc['metadata']['name']} is not headless: no per-pod DNS names")
    pod = sts["spec"]["template"]
    labels = pod["metadata"]["labels"]
    for what, sel in (("Service", svc["spec"]["selector"]),
                      ("StatefulSet", sts["spec"]["selector"]["matchLabels"]),
                      ("PodDisruptionBudget",
                       one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])):
        if not sel or any(labels.get(k) != v for k, v in sel.items()):
            raise Fail(f"{what} selector {sel} does not pick the rpc-server pods {labels}")
    server = next(c for c in pod["spec"]["containers"] if c["name"] == "rpc-server")
    env = env_of(server)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    health = int(env.get("TG_HEALTH_PORT") or 0)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe == "startupProbe" and probe not in server:
            continue
        grpc = server.get(probe, {}).get("grpc")
        if not grpc or grpc.get("port") != health or ports.get("health") != health:
            raise Fail(f"{overlay}: {probe} is not a gRPC probe of the health port "
                       f"(TG_HEALTH_PORT={health}): {server.get(probe)}")
    ann = pod["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") != "true" or \
            int(ann.get("prometheus.io/port", 0)) != int(env.get("TG_METRICS_PORT") or -1) or \
            ports.get("metrics") != int(env["TG_METRICS_PORT"]):
        raise Fail(f"{overlay}: Prometheus annotations {ann} do not match TG_METRICS_PORT")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    if svc_ports["grpc"]["port"] != ports["grpc"]:
        raise Fail(f"{overlay}: the Service's grpc port is not the container's")
    check_security("StatefulSet", pod["spec"])
    check_secrets(objs, "StatefulSet", pod["spec"])
    return sts, svc, server


def check_own_key_only(src, sts, server, overlay):
    """Pod i's server container can read pod i's key and no other."""
    spec = sts["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    init = tls_init(spec)
    if init is None:
        raise Fail(f"{overlay}: no init container runs tg-entrypoint select-tls")
    ienv = {e["name"]: e for e in init.get("env", [])}
    if ienv.get("TG_REPLICA_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get(
            "fieldPath") != "metadata.name":
        raise Fail(f"{overlay}: the select-tls init container's TG_REPLICA_NAME is not the "
                   f"pod's name: {ienv.get('TG_REPLICA_NAME')}")
    # Which Secret holds every key: the one the init container reads from.
    src_dir = ienv["TG_TLS_SOURCE_DIR"]["value"]
    src_mount = next((mt for mt in init["volumeMounts"] if mt["mountPath"] == src_dir), None)
    if src_mount is None or "secret" not in volumes[src_mount["name"]]:
        raise Fail(f"{overlay}: TG_TLS_SOURCE_DIR={src_dir} is not a Secret mount of the init "
                   "container")
    all_keys = volumes[src_mount["name"]]["secret"]["secretName"]
    for c in containers(spec):
        if c is init:
            continue
        for mt in c.get("volumeMounts", []):
            vol = volumes.get(mt["name"], {})  # else a volumeClaimTemplate
            if vol.get("secret", {}).get("secretName") == all_keys:
                items = [i["key"] for i in vol["secret"].get("items", [])]
                if items != ["ca.crt"]:
                    raise Fail(f"{overlay}: container {c['name']} mounts Secret {all_keys} "
                               f"(every server's key) with items {items or 'all'}, not ca.crt "
                               "alone")
            if vol.get("projected"):
                raise Fail(f"{overlay}: container {c['name']} mounts a projected volume "
                           f"{mt['name']}: check it holds no key")
    replicas = sts["spec"]["replicas"]
    name = sts["metadata"]["name"]
    senv = env_of(server)
    with tempfile.TemporaryDirectory() as d:
        # The Secret as gen-secrets.sh says to create it: the files a Secret volume shows.
        p = subprocess.run(["bash", os.path.join(src, "deploy/compose/gen-secrets.sh"), "--k8s",
                            "-n", str(replicas), "-s", sts["spec"]["serviceName"], "-o",
                            os.path.join(d, "out")], check=True, capture_output=True, text=True)
        cmd = next((l for l in p.stderr.splitlines() if f"secret generic {all_keys} " in l), None)
        if cmd is None:
            raise Fail(f"gen-secrets.sh --k8s prints no command for Secret {all_keys}:\n{p.stderr}")
        secret = os.path.join(d, "secret")
        os.makedirs(secret)
        for key, path in re.findall(r"--from-file=([^= ]+)=(\S+)", cmd):
            shutil.copyfile(path, os.path.join(secret, key))
        for i in range(replicas):
            pod = f"{name}-{i}"
            dst = os.path.join(d, f"pod{i}")
            os.makedirs(dst)
            env = {k: e.get("value") for k, e in ienv.items()}
            env.update(TG_REPLICA_NAME=pod, TG_TLS_SOURCE_DIR=secret, TG_TLS_DIR=dst)
            entrypoint(src, env, "select-tls")
            got = sorted(os.listdir(dst))
            if got != ["tls.crt", "tls.key"]:
                raise Fail(f"{overlay}: select-tls for {pod} left {got}, not tls.crt, tls.key")
            for f in got:
                want = os.path.join(d, "out", "servers", pod, f)
                if open(os.path.join(dst, f), "rb").read() != open(want, "rb").read():
                    raise Fail(f"{overlay}: select-tls for {pod}: {f} is not {pod}'s")
            if os.stat(os.path.join(dst, "tls.key")).st_mode & 0o077:
                raise Fail(f"{overlay}: {pod}'s key is readable by others than its owner")
            # The server's command, from the copied files.
            env = dict(senv, TG_TLS_DIR=dst)
            run = entrypoint(src, {k: v for k, v in env.items() if k != "TG_GPU_COUNT"},
                             "rpc-server").split()
            flag = {run[j]: run[j + 1] for j in range(len(run) - 1) if run[j].startswith("--")}
            want = {"--tls-cert": f"{dst}/tls.crt", "--tls-key": f"{dst}/tls.key",
                    "--metrics-host": "0.0.0.0", "--metrics-token-file": senv["TG_TOKEN_FILE"],
                    "--auth-token-file": senv["TG_TOKEN_FILE"], "--health-host": "0.0.0.0",
                    "--peer-tls-ca": senv["TG_CA_FILE"]}
            wrong = {k: flag.get(k) for k, v in want.items() if flag.get(k) != v}
            if wrong:
                raise Fail(f"{overlay}: {pod}'s server runs as {' '.join(run)}; wrong: {wrong}")
    return replicas


def entrypoint(src, env, *args):
    """The image's entrypoint, run here with TG_ENTRYPOINT_DRY_RUN: the command it would run."""
    clean = {"PATH": os.environ["PATH"], "TG_ENTRYPOINT_DRY_RUN": "1"}
    clean.update({k: v for k, v in env.items() if v is not None})
    p = subprocess.run(["bash", os.path.join(src, "deploy/docker/tg-entrypoint.sh")] + list(args),
                       env=clean, capture_output=True, text=True)
    if p.returncode != 0:
        raise Fail(f"tg-entrypoint {' '.join(args)}: {p.stderr}")
    return p.stdout.strip()


def check_client(src, objs, sts, svc, overlay):
    job = one(objs, "Job")
    pod = job["spec"]["template"]["spec"]
    check_security("Job", pod)
    check_secrets(objs, "Job", pod)
    client = next(c for c in pod["containers"] if c["name"] == "client")
    listed = entrypoint(src, env_of(client), "rpc-list").split(",")
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
    want = [f"{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:{port}"
            for i in range(sts["spec"]["replicas"])]
    if listed != want:
        raise Fail(f"{overlay}: the client Job reaches {listed}, the StatefulSet's pods are {want}")
    # The certificates gen-secrets.sh --k8s makes for these pods name what the client dials.
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["bash", os.path.join(src, "deploy/compose/gen-secrets.sh"), "--k8s", "-n",
                        str(sts["spec"]["replicas"]), "-s", svc["metadata"]["name"], "-o", d],
                       check=True, capture_output=True)
        for i, endpoint in enumerate(want):
            pem = os.path.join(d, "servers", f"{sts['metadata']['name']}-{i}", "tls.crt")
            san = subprocess.run(["openssl", "x509", "-in", pem, "-noout", "-ext",
                                  "subjectAltName"], capture_output=True, text=True).stdout
            host = endpoint.rsplit(":", 1)[0]
            if f"DNS:{host}," not in san.replace(" ", "") + ",":
                raise Fail(f"{overlay}: {os.path.basename(pem)} does not name {host}: {san}")
    return listed


def check_gpus(src, server, overlay):
    res = server["resources"]
    n = res.get("limits", {}).get("nvidia.com/gpu")
    if not n or res.get("requests", {}).get("nvidia.com/gpu") != n:
        raise Fail(f"{overlay}: nvidia.com/gpu not requested and limited alike: {res}")
    env = env_of(server)
    if env.get("TG_GPU_COUNT") != str(n):
        raise Fail(f"{overlay}: TG_GPU_COUNT={env.get('TG_GPU_COUNT')} but {n} GPUs are limited")
    env = {k: v for k, v in env.items() if k not in ("TG_TLS_DIR", "TG_CA_FILE")}
    cmd = entrypoint(src, env, "rpc-server").split()
    want = ",".join(str(i) for i in range(int(n)))
    if "-d" not in cmd or cmd[cmd.index("-d") + 1] != want:
        raise Fail(f"{overlay}: {n} GPUs but the server runs as: {' '.join(cmd)}")
    return int(n)


def check_overlay(src, kdir, overlay):
    objs = render(os.path.join(kdir, "overlays", overlay))
    sts, svc, server = check_server(objs, overlay)
    listed = check_client(src, objs, sts, svc, overlay)
    check_own_key_only(src, sts, server, overlay)
    note = ""
    if overlay == "cuda":
        note = f", {check_gpus(src, server, overlay)} GPU(s) per pod"
    elif any(k.startswith("nvidia.com/") for k in server["resources"].get("limits", {})):
        raise Fail(f"{overlay}: asks for NVIDIA GPUs")
    if overlay == "monitoring":
        sm = one(objs, "ServiceMonitor")
        sel = sm["spec"]["selector"]["matchLabels"]
        if any(svc["metadata"]["labels"].get(k) != v for k, v in sel.items()) or \
                sm["spec"]["endpoints"][0]["port"] not in [p["name"] for p in svc["spec"]["ports"]]:
            raise Fail(f"the ServiceMonitor {sm['spec']} does not select the metrics port of "
                       f"Service {svc['metadata']['name']}")
        auth = sm["spec"]["endpoints"][0].get("authorization", {})
        token = env_of(server).get("TG_METRICS_TOKEN_FILE")
        if auth.get("type") != "Bearer" or auth.get("credentials", {}).get("name") != \
                "tensorgrid-token" or not token:
            raise Fail(f"the ServiceMonitor scrapes without the token /metrics asks for "
                       f"(TG_METRICS_TOKEN_FILE={token}): {sm['spec']['endpoints'][0]}")
    print(f"k8s: {overlay}: {len(objs)} objects; client --rpc {','.join(listed)}{note}")
    return objs


def check_resized(src, kdir):
    """Edit the counts where docs/deployment.md says to; the client and the devices follow."""
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "k8s")
        shutil.copytree(kdir, copy)
        cuda = os.path.join(copy, "overlays", "cuda")
        for name, old, new in (("gpus.yaml", "nvidia.com/gpu: 1", "nvidia.com/gpu: 4"),
                               ("kustomization.yaml", "count: 2", "count: 3")):
            path = os.path.join(cuda, name)
            text = open(path).read()
            if old not in text:
                raise Fail(f"overlays/cuda/{name} has no '{old}' to edit")
            open(path, "w").write(text.replace(old, new))
        objs = render(cuda)
        sts, svc, server = check_server(objs, "cuda (resized)")
        listed = check_client(src, objs, sts, svc, "cuda (resized)")
        check_own_key_only(src, sts, server, "cuda (resized)")
        gpus = check_gpus(src, server, "cuda (resized)")
        if len(listed) != 3 or gpus != 4:
            raise Fail(f"resized cuda overlay: {len(listed)} servers, {gpus} GPUs; want 3, 4")
        print("k8s: cuda resized to 3 pods x 4 GPUs: client and -d follow")


def validate_schemas(src, all_objs):
    cache = os.environ.get("TG_DEPLOY_CACHE",
                           os.path.join(os.path.expanduser("~"), ".cache", "tensorgrid-deploy"))
    npm_dir = os.path.join(cache, "npm")
    stamp = os.path.join(npm_dir, "installed")
    want = " ".join(NPM_PACKAGES)
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("k8s: schema validation skipped: node/npm not installed")
        return
    if not os.path.exists(stamp) or open(stamp).read() != want:
        os.makedirs(npm_dir, exist_ok=True)
        p = subprocess.run(["npm", "install", "--prefix", npm_dir, "--no-audit", "--no-fund",
                            "--no-save", "--loglevel=error"] + NPM_PACKAGES,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(f"k8s: schema validation skipped: npm install failed (registry unreachable?): "
                  f"{p.stderr.strip()[-300:]}")
            return
        open(stamp, "w").write(want)
    script = os.path.join(npm_dir, "validate_k8s.mjs")
    shutil.copyfile(os.path.join(src, "tests/deploy/validate_k8s.mjs"), script)
    p = subprocess.run(["node", script], input=json.dumps(all_objs), capture_output=True,
                       text=True, cwd=npm_dir)
    print("\n".join(f"k8s: schema {line}" for line in p.stdout.splitlines()))
    if p.returncode != 0:
        raise Fail(f"schema validation failed:\n{p.stdout}{p.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    a = ap.parse_args()
    if shutil.which("kubectl") is None:
        print("skipped: kubectl not installed (it carries kustomize; not a Debian 12 package)")
        return SKIP
    if yaml is None:
        print("skipped: python3-yaml not installed")
        return SKIP
    kdir = os.path.join(a.src, "deploy", "k8s")
    overlays = sorted(os.listdir(os.path.join(kdir, "overlays")))
    try:
        if not {"cpu", "cuda", "vulkan"} <= set(overlays):
            raise Fail(f"overlays {overlays}: cpu, cuda and vulkan expected")
        all_objs = []
        for overlay in overlays:
            all_objs += check_overlay(a.src, kdir, overlay)
        check_resized(a.src, kdir)
        validate_schemas(a.src, all_objs)
    except Fail as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
