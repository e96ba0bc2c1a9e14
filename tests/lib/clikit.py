"""What the test_cli_*.py scripts share: tiny models made once per script, a
checkpoint editor that plants NaN or Inf in a named tensor, and expect(), which
runs the mhe tool and checks the exit status, the message and that the files
it must not touch are as they were (content hash, file type, symlink target).

Not a test itself (tests/run.sh runs tests/*.py only)."""
import glob
import hashlib
import json
import os
import stat
import struct
import subprocess

from mhetest import check, run_mhe

TINY = ["--d_model", 16, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 16]
STEPS = ["--steps", 2, "--batch", 2, "--seq_len", 8, "--eval_every", 0, "--log_every", 1]
TEXT = "In the beginning God created the heaven and the earth. " * 8


def run(*args, timeout=120):
    """(exit status, stdout, stderr); a run past the timeout is killed and counts as status -999"""
    try:
        return run_mhe(*args, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -999, "", "killed after %d s" % timeout


def state(path, depth=0):
    """What path is now: None (absent), ('link', target, state of the target),
    ('fifo'|'chr'|'dir'|'other', mode bits, rdev) or ('file', sha256 of the bytes)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        target = os.path.join(os.path.dirname(path), os.readlink(path))
        return ("link", os.readlink(path), state(target, depth + 1) if depth < 8 else "deep")
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            return ("file", hashlib.sha256(f.read()).hexdigest())
    kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "chr" if stat.S_ISCHR(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"
    return (kind, stat.S_IMODE(st.st_mode), st.st_rdev)


def leftovers(dirs):
    """Temporary files (NAME.tmp.PID.N) a failed or finished write left in dirs."""
    return sorted(p for d in set(dirs) for p in glob.glob(os.path.join(d, "*.tmp.*")))


def expect(args, rc, words, what, keep=(), absent=(), timeout=120):
    """Runs mhe with args; checks the exit status, that stderr starts with "mhe: " and holds
    every word, that every path of keep is unchanged, that no path of absent exists, and that
    no temporary file is left beside them. Returns (stdout, stderr)."""
    keep, absent = list(keep), list(absent)
    before = [state(p) for p in keep]
    code, out, err = run(*args, timeout=timeout)
    errs = err.strip()
    ok = code == rc and errs.startswith("mhe: ") and all(str(w) in errs for w in words)
    check(ok, "%s: want rc %d and %r; got rc %d, stderr %r" % (what, rc, words, code, errs[-400:]))
    for p, b in zip(keep, before):
        check(state(p) == b, "%s: %s unchanged (%r -> %r)" % (what, p, b, state(p)))
    for p in absent:
        check(not os.path.lexists(p), "%s: %s not created" % (what, p))
    left = leftovers(os.path.dirname(os.path.abspath(p)) for p in keep + absent)
    check(not left, "%s: no temporary file left (%r)" % (what, left))
    return out, err


def tensors(path):
    """{name: (dtype, shape, byte offset of its data in the file)} of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], v["shape"], 8 + n + v["data_offsets"][0]) for k, v in head.items() if k != "__metadata__"}


def plant(src, dst, name, value, index=0):
    """Copies checkpoint src to dst with element `index` of tensor `name` set to value (a float)."""
    with open(src, "rb") as f:
        raw = bytearray(f.read())
    dtype, shape, off = tensors(src)[name]
    assert dtype == "F32", dtype
    raw[off + 4 * index:off + 4 * index + 4] = struct.pack("<f", value)
    with open(dst, "wb") as f:
        f.write(bytes(raw))


def setup(d):
    """A text, a tiny decoder model and a trainer checkpoint of it (2 steps) in d."""
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write(TEXT)
    model = os.path.join(d, "model.safetensors")
    ckpt = os.path.join(d, "ckpt.safetensors")
    code, out, err = run("init", *TINY, "--out", model)
    check(code == 0, "setup: init: %s" % err)
    code, out, err = run("train", "--data", text, "--model", model, "--out", ckpt, *STEPS)
    check(code == 0, "setup: train: %s" % err)
    return text, model, ckpt
