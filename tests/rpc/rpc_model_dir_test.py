#!/usr/bin/env python3
"""rpc-server --model-dir with real processes on loopback.

  rpc_model_dir_test.py --tg-run PATH --rpc-server PATH --model MODEL

1. The server's --model-dir holds a copy of the model: tg-run over --rpc gives local
   -sm none's tokens and no weight byte is uploaded (tg_upload_bytes_total stays 0,
   tg_model_file_bytes_total counts every weight byte; tg-run's load report says the same).
2. The copy has one byte changed in one tensor: that piece is uploaded (exactly its bytes),
   the rest read from disk, and the tokens are still local -sm none's.
3. The directory holds only a symlink pointing out of it: it is not indexed (a log line says
   so) and everything is uploaded.
Exit 0 pass, 1 fail, 77 skipped (model missing).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_extents import piece_of, tensor_extents  # noqa: E402
from rpc_cluster import SKIP, Cluster, local_env, model_missing, model_test_args  # noqa: E402


def wait_indexed(c, files, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if c.metrics(0).get("tg_model_dir_files", 0) >= files and \
                "index ready" in c.servers[0].read_log():
            return True
        time.sleep(0.05)
    return False


class Run:
    def __init__(self, a, env):
        self.a, self.env, self.ok = a, env, True
        self.common = ["-m", a.model, "-n", "24", "--temp", "0", "--json", "-t", "1"]
        base = subprocess.run([a.tg_run] + self.common, capture_output=True, text=True, env=env)
        self.want = json.loads(base.stdout)["tokens"]
        self.weight_bytes = sum(size for _, _, size in tensor_extents(a.model)[1])

    def fail(self, msg):
        print(f"FAIL: {msg}")
        self.ok = False

    def remote(self, c):
        r = subprocess.run([self.a.tg_run] + self.common + ["--rpc", c.endpoints[0]],
                           capture_output=True, text=True, env=self.env)
        if r.returncode != 0:
            self.fail(f"tg-run over --rpc: {r.stderr[-1500:]}")
            return None
        out = json.loads(r.stdout)
        if out["tokens"] != self.want:
            self.fail("tokens differ from local -sm none")
        return out

    def case(self, name, model_dir, want_sent, want_files, log_has=None):
        with Cluster(self.a.rpc_server, n=1, devices=1, extra=["--model-dir", model_dir]) as c:
            if not wait_indexed(c, want_files):
                self.fail(f"{name}: the index never became ready: {c.servers[0].read_log()}")
                return
            out = self.remote(c)
            m = c.metrics(0)
            sent, read = m.get("tg_upload_bytes_total"), m.get("tg_model_file_bytes_total")
            load = out["load"]["devices"][0] if out else {}
            print(f"{name}: uploaded {sent:.0f} bytes, read from the server's file {read:.0f} "
                  f"bytes (of {self.weight_bytes}); tg-run says sent {load.get('sent')}, "
                  f"from file {load.get('from_file')}")
            if sent != want_sent or read != self.weight_bytes - want_sent:
                self.fail(f"{name}: want {want_sent} bytes uploaded and the rest read from disk")
            if load and (load["sent"] != want_sent or load["from_file"] != read):
                self.fail(f"{name}: tg-run's load report disagrees with the server's metrics")
            if log_has and log_has not in c.servers[0].read_log():
                self.fail(f"{name}: the server log should say '{log_has}'")


def main():
    a = model_test_args()
    if model_missing(a.model):
        return SKIP
    run = Run(a, local_env())
    with tempfile.TemporaryDirectory(prefix="tg-model-dir-") as d:
        same = os.path.join(d, "same")
        os.makedirs(same)
        shutil.copyfile(a.model, os.path.join(same, "model.gguf"))
        run.case("same file", same, want_sent=0, want_files=1)

        changed = os.path.join(d, "changed")
        os.makedirs(changed)
        data = bytearray(open(a.model, "rb").read())
        name, off, size = tensor_extents(a.model)[1][3]
        at = off + size // 2
        data[at] ^= 0x20
        open(os.path.join(changed, "model.gguf"), "wb").write(data)
        piece = piece_of(tensor_extents(a.model)[1], at)
        print(f"changed byte {at} in tensor {name}: its piece is {piece[1]} bytes")
        run.case("one byte changed", changed, want_sent=piece[1], want_files=1)

        link = os.path.join(d, "link")
        os.makedirs(link)
        os.symlink(os.path.abspath(a.model), os.path.join(link, "model.gguf"))
        run.case("symlink out of the dir", link, want_sent=run.weight_bytes, want_files=0,
                 log_has="resolves outside its --model-dir")
    return 0 if run.ok else 1


if __name__ == "__main__":
    sys.exit(main())
