#!/usr/bin/env python3
"""deploy/compose/gen-secrets.sh, run for real with openssl (ctest label "deploy"; no docker).

  - re-running it with more servers (-n 2, then -n 4, as docs/deployment.md scales) leaves
    the CA, the token and the first servers' keys and certificates byte-identical, and
    issues the new servers' only;
  - every server has a folder of its own holding its key and certificate and nothing else,
    the certificate naming the server and verifying against the CA; as root, the key is the
    servers' uid's (10001) alone;
  - --rotate re-issues the keys and certificates (the CA and token stay) and moves the old
    folders to retired/ (the running servers' mounts), printing how to restart one at a time;
  - --days N: a certificate valid N days (openssl x509 -enddate); 365 by default;
  - a certificate expiring within 30 days is warned about; one the CA does not sign is an
    error, as is a lost CA with servers present;
  - the old single-folder layout (tls/<name>.crt/.key) is carried over byte-identical;
  - --k8s and --host name their servers as the manifests and docs expect.
Exit 0 pass, 1 fail, 77 skipped (openssl missing).
"""

import argparse
import datetime
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docker_env import SKIP, Fail  # noqa: E402


def gen(src, out, *args, ok=True):
    p = subprocess.run(["bash", os.path.join(src, "deploy/compose/gen-secrets.sh"), "-o", out] +
                       list(args), capture_output=True, text=True, timeout=120)
    if ok and p.returncode != 0:
        raise Fail(f"gen-secrets.sh {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    if not ok and p.returncode == 0:
        raise Fail(f"gen-secrets.sh {' '.join(args)} succeeded; it should have refused:\n"
                   f"{p.stderr}")
    return p.stderr


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def snapshot(out):
    """{relative path: sha256} of every file under out, but the compose file."""
    snap = {}
    for root, _, files in os.walk(out):
        for f in files:
            path = os.path.join(root, f)
            snap[os.path.relpath(path, out)] = digest(path)
    return snap


def openssl(*args):
    p = subprocess.run(["openssl"] + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        raise Fail(f"openssl {' '.join(args)}: {p.stderr}")
    return p.stdout


def end_date(cert):
    text = openssl("x509", "-in", cert, "-noout", "-enddate").strip().split("=", 1)[1]
    return datetime.datetime.strptime(text.replace("  ", " "), "%b %d %H:%M:%S %Y %Z").replace(
        tzinfo=datetime.timezone.utc)


def check_days(cert, days):
    left = (end_date(cert) - datetime.datetime.now(datetime.timezone.utc)).total_seconds() / 86400
    if abs(left - days) > 1:
        raise Fail(f"{cert}: valid {left:.1f} more days, {days} expected")
    return left


def check_server(out, name):
    d = os.path.join(out, "servers", name)
    files = sorted(os.listdir(d))
    if files != ["tls.crt", "tls.key"]:
        raise Fail(f"servers/{name} holds {files}: its certificate and key only expected")
    crt = os.path.join(d, "tls.crt")
    openssl("verify", "-CAfile", os.path.join(out, "ca.crt"), crt)
    subject = openssl("x509", "-in", crt, "-noout", "-subject")
    if f"CN = {name}" not in subject and f"CN={name}" not in subject:
        raise Fail(f"servers/{name}/tls.crt is for {subject.strip()}")
    # The key is the certificate's.
    pub_crt = openssl("x509", "-in", crt, "-noout", "-pubkey")
    pub_key = openssl("pkey", "-in", os.path.join(d, "tls.key"), "-pubout")
    if pub_crt != pub_key:
        raise Fail(f"servers/{name}: tls.key does not belong to tls.crt")
    if os.geteuid() == 0:
        st = os.stat(os.path.join(d, "tls.key"))
        if (st.st_uid, st.st_mode & 0o777) != (10001, 0o440):
            raise Fail(f"servers/{name}/tls.key: uid {st.st_uid} mode {st.st_mode & 0o777:o}; "
                       "uid 10001 mode 440 expected")
        st = os.stat(d)
        if (st.st_gid, st.st_mode & 0o007) != (10001, 0):
            raise Fail(f"servers/{name}: gid {st.st_gid} mode {st.st_mode & 0o777:o}; only "
                       "root and group 10001 may enter")
    return openssl("x509", "-in", crt, "-noout", "-ext", "subjectAltName")


def check_scaling(src, out):
    gen(src, out, "-n", "2")
    first = snapshot(out)
    for name in ("rpc-server-1", "rpc-server-2"):
        san = check_server(out, name)
        if f"DNS:{name}," not in san.replace(" ", ""):
            raise Fail(f"{name}'s certificate does not name {name}: {san}")
    check_days(os.path.join(out, "servers/rpc-server-1/tls.crt"), 365)
    compose2 = open(os.path.join(out, "docker-compose.servers.yml")).read()
    err = gen(src, out, "-n", "4")
    second = snapshot(out)
    changed = [p for p, h in first.items() if second.get(p) != h and
               p != "docker-compose.servers.yml"]
    if changed:
        raise Fail(f"gen-secrets.sh -n 4 after -n 2 changed {changed}: the running servers "
                   "would no longer match their pinned certificates")
    new = sorted(p for p in second if p not in first)
    if new != ["servers/rpc-server-3/tls.crt", "servers/rpc-server-3/tls.key",
               "servers/rpc-server-4/tls.crt", "servers/rpc-server-4/tls.key"]:
        raise Fail(f"-n 4 after -n 2 added {new}")
    for name in ("rpc-server-3", "rpc-server-4"):
        check_server(out, name)
    if "2 kept" not in err:
        raise Fail(f"-n 4 after -n 2 does not say it kept two:\n{err}")
    # The compose definitions of servers 1 and 2 are the same text: compose leaves them running.
    compose4 = open(os.path.join(out, "docker-compose.servers.yml")).read()
    block = compose2.split("  rpc-server-3:")[0].split("services:", 1)[1].split("  client:")[0]
    if block not in compose4:
        raise Fail("docker-compose.servers.yml: servers 1 and 2 are defined differently after -n 4")
    print("gen-secrets: -n 4 after -n 2: CA, token, servers 1-2 byte-identical; 3-4 issued")
    return second


def check_rotate(src, out, before):
    err = gen(src, out, "-n", "4", "--rotate", "--days", "30")
    after = snapshot(out)
    for f in ("ca.crt", "ca.key", "token"):
        if after[f] != before[f]:
            raise Fail(f"--rotate changed {f}")
    for i in range(1, 5):
        for f in ("tls.crt", "tls.key"):
            p = f"servers/rpc-server-{i}/{f}"
            if after[p] == before[p]:
                raise Fail(f"--rotate left {p} as it was")
        check_server(out, f"rpc-server-{i}")
        left = check_days(os.path.join(out, f"servers/rpc-server-{i}/tls.crt"), 30)
    retired = sorted(os.listdir(os.path.join(out, "retired")))
    if len(retired) != 4:
        raise Fail(f"--rotate retired {retired}: the four old folders expected")
    old = {p.split("/", 2)[2]: h for p, h in after.items() if p.startswith("retired/")}
    for i in range(1, 5):
        name = f"rpc-server-{i}"
        r = next(x for x in retired if x.startswith(name + "."))
        if after[f"retired/{r}/tls.key"] != before[f"servers/{name}/tls.key"]:
            raise Fail(f"retired/{r} is not {name}'s old folder")
    del old
    if "one at a time" not in err or "docker-compose restart" not in err:
        raise Fail(f"--rotate does not say how to restart the servers one at a time:\n{err}")
    print(f"gen-secrets: --rotate --days 30: 4 new keys and certificates valid {left:.1f} days, "
          "CA and token kept, old folders in retired/")
    # Renewal is announced: a certificate close to its end is warned about on the next run.
    gen(src, out, "-n", "5", "--days", "10")
    err = gen(src, out, "-n", "5")
    if "rpc-server-5/tls.crt expires within 30 days" not in err:
        raise Fail(f"a certificate valid 10 days is not warned about:\n{err}")
    print("gen-secrets: a certificate expiring within 30 days is warned about")


def check_refusals(src, tmp):
    out = os.path.join(tmp, "lost-ca")
    gen(src, out, "-n", "1")
    os.unlink(os.path.join(out, "ca.key"))
    gen(src, out, "-n", "2", ok=False)
    # A certificate of another CA is not kept silently.
    out2 = os.path.join(tmp, "other-ca")
    gen(src, out2, "-n", "1")
    shutil.copyfile(os.path.join(out, "servers/rpc-server-1/tls.crt"),
                    os.path.join(out2, "servers/rpc-server-1/tls.crt"))
    gen(src, out2, "-n", "1", ok=False)
    gen(src, out2, "-n", "1", "--days", "0", ok=False)
    print("gen-secrets: refuses a lost CA, a foreign certificate and --days 0")


def check_old_layout(src, tmp):
    out = os.path.join(tmp, "old")
    gen(src, out, "-n", "2")
    # The layout before per-server folders: tls/ca.crt and tls/<name>.crt/.key together.
    os.makedirs(os.path.join(out, "tls"))
    shutil.move(os.path.join(out, "ca.crt"), os.path.join(out, "tls/ca.crt"))
    for i in (1, 2):
        for f in ("crt", "key"):
            shutil.move(os.path.join(out, f"servers/rpc-server-{i}/tls.{f}"),
                        os.path.join(out, f"tls/rpc-server-{i}.{f}"))
        os.rmdir(os.path.join(out, f"servers/rpc-server-{i}"))
    old = snapshot(out)
    gen(src, out, "-n", "2")
    new = snapshot(out)
    for i in (1, 2):
        for f in ("crt", "key"):
            if new[f"servers/rpc-server-{i}/tls.{f}"] != old[f"tls/rpc-server-{i}.{f}"]:
                raise Fail(f"the old tls/rpc-server-{i}.{f} was not carried over as is")
    if new["ca.crt"] != old["tls/ca.crt"]:
        raise Fail("the old tls/ca.crt was not carried over")
    print("gen-secrets: the old tls/ layout carried over byte-identical")


def check_names(src, tmp):
    out = os.path.join(tmp, "k8s")
    err = gen(src, out, "--k8s", "-n", "2", "--namespace", "tg")
    san = check_server(out, "rpc-server-1")
    if "DNS:rpc-server-1.rpc-server.tg.svc" not in san.replace(" ", ""):
        raise Fail(f"--k8s: rpc-server-1's certificate: {san}")
    if os.path.exists(os.path.join(out, "docker-compose.servers.yml")):
        raise Fail("--k8s wrote a compose file")
    if "--from-file=rpc-server-1.key=" not in err:
        raise Fail(f"--k8s does not print the Secret's files:\n{err}")
    gen(src, out, "--host", "10.0.0.7")
    san = check_server(out, "10.0.0.7")
    if "IPAddress:10.0.0.7" not in san.replace(" ", ""):
        raise Fail(f"--host 10.0.0.7: {san}")
    print("gen-secrets: --k8s and --host name their servers")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    a = ap.parse_args()
    if shutil.which("openssl") is None:
        print("skipped: openssl not installed")
        return SKIP
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "secrets")
            before = check_scaling(a.src, out)
            check_rotate(a.src, out, before)
            check_refusals(a.src, tmp)
            check_old_layout(a.src, tmp)
            check_names(a.src, tmp)
    except Fail as e:
        print(f"FAIL: {e}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
