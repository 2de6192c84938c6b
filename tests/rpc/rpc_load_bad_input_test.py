#!/usr/bin/env python3
"""Bad input on the model-loading paths, with real processes on loopback: each gets a clear
message or a fallback to uploading, never a crash or wrong weights.

  rpc_load_bad_input_test.py --tg-run PATH --rpc-server PATH --tg-gguf PATH --model MODEL

1. A .tghash sidecar cut short, and one written for another file: tg-run warns (naming the
   sidecar and the problem), hashes instead, and gives local -sm none's tokens.
2. A --model-dir that does not exist, is a file, or cannot be listed: rpc-server exits
   non-zero at once with one line naming it.
3. The server's copy of the model shrinks while a client loads from it, or before (a client
   without a sidecar, then one with a sidecar, whose pieces go in FillPieces calls): the
   client still gets local -sm none's tokens and the server keeps serving.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402

failures = []


def fail(msg):
    print(f"FAIL: {msg}")
    failures.append(msg)


def sidecars(a, env, d, want):
    model = os.path.join(d, "model.gguf")
    shutil.copyfile(a.model, model)
    other = os.path.join(d, "other.gguf")
    data = bytearray(open(a.model, "rb").read())
    data[-1] ^= 1  # another file: same header, one weight byte different... and another size:
    open(other, "wb").write(bytes(data) + b"\0" * 32)
    for path in (model, other):
        r = subprocess.run([a.tg_gguf, "hash", path], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"tg-gguf hash {path}: {r.stderr}")
            return
        print(r.stdout.strip())
    good = open(model + ".tghash", "rb").read()
    cases = [("valid sidecar", good, None),
             ("truncated sidecar", good[:len(good) // 2], "truncated"),
             ("sidecar of another file", open(other + ".tghash", "rb").read(), "another file")]
    cache = os.path.join(d, "cache")
    with Cluster(a.rpc_server, n=1, devices=1, extra=["--cache", cache]) as c:
        for name, sidecar, warning in cases:
            open(model + ".tghash", "wb").write(sidecar)
            shutil.rmtree(cache, ignore_errors=True)
            r = subprocess.run([a.tg_run, "-m", model, "-n", "24", "--temp", "0", "--json", "-t",
                                "1", "--rpc", c.endpoints[0]], capture_output=True, text=True,
                               env=env)
            warned = [l for l in r.stderr.splitlines() if "warning" in l]
            print(f"{name}: exit {r.returncode}, warnings {warned}")
            if r.returncode != 0 or json.loads(r.stdout)["tokens"] != want:
                fail(f"{name}: want local -sm none's tokens: {r.stderr[-800:]}")
            if warning is None and warned:
                fail(f"{name}: no warning expected")
            if warning is not None and not any(warning in l and ".tghash" in l for l in warned):
                fail(f"{name}: want a warning naming the sidecar and '{warning}'")


def unreadable_dirs(a, d):
    plain = os.path.join(d, "plain-file")
    open(plain, "w").write("x")
    bad = [(os.path.join(d, "missing"), "No such file"), (plain, "is not a directory")]
    if os.geteuid() != 0:  # root lists any directory.
        locked = os.path.join(d, "locked")
        os.mkdir(locked, 0)
        bad.append((locked, "cannot list it"))
    for path, why in bad:
        t0 = time.time()
        try:
            r = subprocess.run([a.rpc_server, "-p", "0", "--model-dir", path], capture_output=True,
                               text=True, timeout=30)
        except subprocess.TimeoutExpired:
            fail(f"--model-dir {path}: rpc-server kept running")
            continue
        lines = r.stderr.strip().splitlines()
        print(f"--model-dir {path}: exit {r.returncode} in {time.time() - t0:.2f} s: {lines}")
        if r.returncode == 0 or len(lines) != 1 or path not in lines[0] or why not in lines[0]:
            fail(f"--model-dir {path}: want a non-zero exit and one line naming it and '{why}'")


def shrinking_file(a, env, d):
    # A model large enough (25 MB) that its load lasts long enough to cut the file under it.
    model = os.path.join(d, "synth.gguf")
    r = subprocess.run([a.tg_gguf, "synth", model, "--dims", "288,768,6,6,6,32000", "--type",
                        "q8_0"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"tg-gguf synth: {r.stderr}")
        return
    common = [a.tg_run, "-m", model, "-n", "8", "--temp", "0", "--json", "-t", "1"]
    want = json.loads(subprocess.run(common, capture_output=True, text=True, env=env).stdout)
    models = os.path.join(d, "models")
    os.makedirs(models)
    served = os.path.join(models, "model.gguf")
    size = os.path.getsize(model)
    # Without a sidecar the client asks for each piece in an Upload call of its own; with one
    # it offers them all in a few FillPieces calls, and what those could not fill is uploaded.
    cases = [(when, False) for when in ("while the server reads it", "before the client comes")]
    cases += [(when, True) for when, _ in cases]
    for when, sidecar in cases:
        if sidecar and not os.path.exists(model + ".tghash"):
            r = subprocess.run([a.tg_gguf, "hash", model], capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"tg-gguf hash {model}: {r.stderr}")
                return
        when_label = when + (", client with a sidecar" if sidecar else "")
        # A load that ends before the cut (a sidecar's few calls are quick) tests nothing: again.
        for attempt in range(3):
            shutil.copyfile(model, served)
            with Cluster(a.rpc_server, n=1, devices=1, extra=["--model-dir", models]) as c:
                deadline = time.time() + 60
                while c.metrics(0).get("tg_model_dir_files", 0) < 1 and time.time() < deadline:
                    time.sleep(0.02)
                if when.startswith("before"):
                    os.truncate(served, size // 2)
                p = subprocess.Popen(common + ["--rpc", c.endpoints[0]], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
                if when.startswith("while"):
                    while p.poll() is None and \
                            c.metrics(0).get("tg_model_file_bytes_total", 0) == 0:
                        time.sleep(0.001)
                    for keep in (size * 3 // 4, size // 2, size // 8):
                        os.truncate(served, keep)
                out, err = p.communicate(timeout=120)
                m = c.metrics(0)
                fills = m.get('tg_upload_calls_total{call="fill_pieces"}', 0)
                print(f"file shrinks {when_label}: exit {p.returncode}; server: uploaded "
                      f"{m.get('tg_upload_bytes_total'):.0f}, read from its file "
                      f"{m.get('tg_model_file_bytes_total'):.0f} bytes; FillPieces calls "
                      f"{fills:.0f}")
                if m.get("tg_upload_bytes_total", 0) == 0 and attempt < 2:
                    print("  the load ended before the cut; again")
                    continue
                if p.returncode != 0 or json.loads(out)["tokens"] != want["tokens"]:
                    fail(f"file shrinks {when_label}: want local -sm none's tokens: {err[-800:]}")
                if c.servers[0].proc.poll() is not None:
                    fail(f"rpc-server died: {c.servers[0].read_log()}")
                    return
                if "changed on disk" not in c.servers[0].read_log():
                    fail(f"file shrinks {when_label}: the server log should say the file "
                         "changed on disk")
                if (fills > 0) != sidecar:
                    fail(f"file shrinks {when_label}: want FillPieces calls only with a sidecar")
                break

def main():
    a = model_test_args([("--tg-gguf", dict(required=True))])
    if model_missing(a.model):
        return SKIP
    env = local_env()
    base = subprocess.run([a.tg_run, "-m", a.model, "-n", "24", "--temp", "0", "--json", "-t",
                           "1"], capture_output=True, text=True, env=env)
    want = json.loads(base.stdout)["tokens"]
    with tempfile.TemporaryDirectory(prefix="tg-bad-input-") as d:
        for name in ("sidecars", "dirs", "shrink"):
            os.makedirs(os.path.join(d, name))
        sidecars(a, env, os.path.join(d, "sidecars"), want)
        unreadable_dirs(a, os.path.join(d, "dirs"))
        shrinking_file(a, env, os.path.join(d, "shrink"))
    print("PASS" if not failures else f"{len(failures)} failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
