#!/usr/bin/env python3
"""llama.cpp's tokenizer tests against tg-gguf tokenize: its source tree's vocabulary files
(models/ggml-vocab-*.gguf) with their inputs (.inp, texts separated by a marker line) and the
exact ids llama.cpp gives them (.out, add_special and parse_special off).

  vocab_test.py --tg-gguf BIN --work DIR

The tree is cloned from the llama.cpp peer's git bundle (../shared/peer/llama-cpp-peer.sh
setup) into DIR on first use; skipped (exit 77, the reason printed) without it or git. Every
vocabulary whose tokenizer tensorgrid supports must give llama.cpp's ids for every input, and
these must be among them: llama-spm, llama-bpe, qwen2, qwen35, gpt-2, phi-3, mpt, falcon,
starcoder, refact, command-r, deepseek-llm, deepseek-coder (issue 39's list), gemma-4. One it
does not support (bert-bge: WordPiece; nomic-bert-moe: t5, Unigram) must fail at load naming
the tokenizer or pre-tokenizer. "N passed, M failed" at the end.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
MARKER = "\n__ggml_vocab_test__\n"
MUST_SUPPORT = {"llama-spm", "llama-bpe", "qwen2", "qwen35", "gpt-2", "phi-3", "mpt", "falcon",
                "starcoder", "refact", "command-r", "deepseek-llm", "deepseek-coder", "gemma-4"}
BUNDLE = os.path.join(os.path.expanduser("~"), ".cache", "tensorgrid-peer", "main", "package",
                      "llama", "gitRelease.bundle")


def models_dir(work):
    clone = os.path.join(work, "llama-src")
    if os.path.isdir(os.path.join(clone, "models")):
        return os.path.join(clone, "models")
    if not os.path.exists(BUNDLE):
        print(f"skipped: no llama.cpp bundle at {BUNDLE} (llama-cpp-peer.sh setup makes it)")
        return None
    if shutil.which("git") is None:
        print("skipped: git is needed to clone the llama.cpp bundle")
        return None
    subprocess.run(["git", "-c", "advice.detachedHead=false", "clone", "-q", BUNDLE, clone],
                   check=True)
    return os.path.join(clone, "models")


def tokenize(binary, vocab, text):
    with tempfile.NamedTemporaryFile("wb", delete=False) as t:
        t.write(text.encode("utf-8"))
    try:
        p = subprocess.run([binary, "tokenize", vocab, "-f", t.name, "--no-add-special"],
                           capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(t.name)
    return p.returncode, p.stdout.split(), p.stderr.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tg-gguf", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    d = models_dir(a.work)
    if d is None:
        return SKIP
    passed = failed = 0
    supported = set()
    for f in sorted(os.listdir(d)):
        path = os.path.join(d, f)
        if not (f.startswith("ggml-vocab-") and f.endswith(".gguf") and
                os.path.exists(path + ".inp") and os.path.exists(path + ".out")):
            continue
        name = f[len("ggml-vocab-"):-len(".gguf")]
        with open(path + ".inp", encoding="utf-8") as inp, open(path + ".out") as out:
            texts, wants = inp.read().split(MARKER), out.read().split("\n")
        rc, _, err = tokenize(a.tg_gguf, path, "x")
        if rc != 0:
            ok = "unsupported" in err and ("tokenizer.ggml.pre" in err or
                                           "tokenizer.ggml.model" in err)
            print(f"{'ok  ' if ok else 'FAIL'} {name:18s} refused at load: {err[:110]}")
            passed, failed = passed + ok, failed + (not ok)
            continue
        supported.add(name)
        wrong = []
        for i, (text, want) in enumerate(zip(texts, wants)):
            rc, got, err = tokenize(a.tg_gguf, path, text)
            if rc != 0 or got != want.split():
                wrong.append(f"#{i} {text[:24]!r}: {got[:6] if rc == 0 else err[:60]} "
                             f"want {want.split()[:6]}")
        n = min(len(texts), len(wants))
        print(f"{'ok  ' if not wrong else 'FAIL'} {name:18s} {n - len(wrong)}/{n} texts as "
              f"llama.cpp {'; '.join(wrong[:2])}")
        passed, failed = passed + (not wrong), failed + bool(wrong)
    missing = MUST_SUPPORT - supported
    print(f"{'ok  ' if not missing else 'FAIL'} supported: {', '.join(sorted(supported))}"
          f"{'; missing ' + ', '.join(sorted(missing)) if missing else ''}")
    passed, failed = passed + (not missing), failed + bool(missing)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
