#!/usr/bin/env python3
"""Clang's thread-safety analysis over the product's sources (label "static").

  check_thread_safety.py --compile-commands build/compile_commands.json --source ROOT
                         [--clang clang++] [--jobs N] [--self-test]

GCC has no -Wthread-safety, so the ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED
annotations the code carries are checked here: every product .cc file of the build (not
tests/, bench/ or *_test.cc) is parsed by clang with -fsyntax-only -Wthread-safety
-Werror=thread-safety and the build's own flags (less GCC-only ones), all other warnings off,
when it or a project header it includes names a mutex or an annotation. -fsyntax-only does
no code generation, so this costs a fraction of a build. A file clang
cannot parse for another reason fails the check too (its message is printed).

--self-test first shows that the check catches a violation: a scratch file that writes a
guarded field without its lock must fail, and the same file with the lock must pass.
Exit 0 clean, 1 a violation, 77 (skip) where clang is not installed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
CHECK_FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
# Flags of the GCC build that clang does not take or that only matter for code generation.
DROP_PREFIXES = ("-march", "-mtune", "-O", "-fno-fat-lto", "-flto", "-fuse-linker-plugin")


def clang_command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip_next = False
    for a in args[1:]:
        if skip_next:
            skip_next = False
            continue
        if a in ("-o", "-c"):
            skip_next = True
            continue
        if a.startswith(DROP_PREFIXES) or a == entry["file"]:
            continue
        out.append(a)
    return out + CHECK_FLAGS + [entry["file"]]


def product_sources(entries, source):
    root = os.path.realpath(source) + os.sep
    out = []
    for e in entries:
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if not f.startswith(root) or not f.endswith(".cc"):
            continue
        rel = f[len(root):]
        if rel.startswith(("tests/", "bench/", "build/")) or rel.endswith("_test.cc"):
            continue
        out.append(dict(e, file=f))
    return out


# A file can break the analysis only where it or a project header it includes (directly or
# not) names a mutex or an annotation: the others are not parsed, which halves the check.
MARKERS = ("ABSL_GUARDED_BY", "ABSL_PT_GUARDED_BY", "ABSL_EXCLUSIVE_LOCKS_REQUIRED",
           "ABSL_SHARED_LOCKS_REQUIRED", "ABSL_LOCKS_EXCLUDED", "absl::Mutex", "Mutex mu",
           "core/mutex.h", "absl/synchronization/mutex.h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def touches_locks(path, source, memo):
    """True when `path` or a project header it includes names a mutex or an annotation."""
    if path in memo:
        return memo[path]
    memo[path] = False  # include cycles end here.
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return False
    hit = any(m in text for m in MARKERS)
    if not hit:
        for inc in INCLUDE.findall(text):
            header = os.path.join(source, inc)
            if os.path.exists(header) and touches_locks(header, source, memo):
                hit = True
                break
    memo[path] = hit
    return hit


def check(entry, clang):
    p = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                       capture_output=True, text=True)
    return entry["file"], p.returncode, p.stderr


SELF_TEST = """
#include "absl/base/thread_annotations.h"
#include "core/mutex.h"
class Counter {
 public:
  void Add() { %s ++n_; }
 private:
  tg::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
int main() { Counter c; c.Add(); }
"""


def self_test(template_entry, clang, source):
    with tempfile.TemporaryDirectory(prefix="tg-tsa-") as d:
        results = []
        for lock in ("", "tg::MutexLock lock(&mu_);"):
            path = os.path.join(d, "self_test.cc")
            with open(path, "w") as f:
                f.write(SELF_TEST % lock)
            entry = dict(template_entry, file=path)
            entry.pop("output", None)
            cmd = clang_command(entry, clang) + ["-I", source]
            results.append(subprocess.run(cmd, cwd=template_entry["directory"],
                                          capture_output=True, text=True))
    unlocked, locked = results
    if unlocked.returncode == 0 or "requires holding mutex" not in unlocked.stderr:
        print("FAIL self-test: an unguarded write to a guarded field was not caught:\n"
              + unlocked.stderr[-2000:])
        return False
    if locked.returncode != 0:
        print("FAIL self-test: the locked write was refused:\n" + locked.stderr[-2000:])
        return False
    print("self-test: an unguarded write is caught, the locked one passes")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile-commands", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--clang", default="clang++")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    clang = shutil.which(a.clang)
    if clang is None:
        print(f"skipped: {a.clang} not found (Debian's clang package; scripts/install-deps.sh "
              "--test installs it)")
        return SKIP
    entries = product_sources(json.load(open(a.compile_commands)), a.source)
    if not entries:
        print(f"FAIL: no product sources in {a.compile_commands}")
        return 1
    memo = {}
    all_sources = len(entries)
    entries = [e for e in entries if touches_locks(e["file"], a.source, memo)]
    if a.self_test and not self_test(entries[0], clang, a.source):
        return 1
    t0 = time.time()
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for path, rc, err in ex.map(lambda e: check(e, clang), entries):
            if rc != 0:
                failed += 1
                print(f"FAIL {os.path.relpath(path, a.source)}:\n{err.rstrip()}\n")
    print(f"{len(entries)} of {all_sources} product sources use locks: checked in "
          f"{time.time() - t0:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
