"""The check kit the Python test scripts share: the Python side of tests/test.h.

Not a test itself: tests/run.sh runs tests/*.py, and this file lives in tests/lib/.
A script in tests/ imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
    import mhetest  # noqa: E402

and then counts with check(), ends with `return finish()` (the line
"RESULT: N passed, N failed[, N skipped]" that tests/run.sh adds up, and the
exit status), or says why it cannot run with `return skip(NAME, REASON)`.
"""
import atexit
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_path(path):
    """path as given when absolute, else under the repository root"""
    return path if os.path.isabs(path) else os.path.join(REPO, path)


def build_dir():
    """The build directory under test, as tests/run.sh names it: $MHE_TEST_BUILD, default build."""
    return os.environ.get("MHE_TEST_BUILD") or "build"


def mhe_bin():
    """The mhe binary (or a wrapper, e.g. one that runs it under qemu): $MHE_BIN, default
    BUILD/mhe as in tests/run.sh; a relative path is taken from the repository root."""
    return repo_path(os.environ.get("MHE_BIN") or os.path.join(build_dir(), "mhe"))


MHE = mhe_bin()


def mhe_missing():
    """Why the mhe binary cannot be run, or None when it can."""
    if os.path.isfile(MHE) and os.access(MHE, os.X_OK):
        return None
    return "no mhe binary at %s (build it with make, or set MHE_BIN)" % MHE


def torch_missing():
    """Why PyTorch and numpy cannot be imported here, or None when they can."""
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        return "PyTorch/numpy not available to %s (%s)" % (sys.executable, e)
    return None


def hf_python():
    """An interpreter that imports torch, transformers, tokenizers and safetensors: this one,
    else $MHE_HF_PYTHON (CI's virtual environment over Debian's torch); None when neither does."""
    for py in [sys.executable] + ([os.environ["MHE_HF_PYTHON"]] if os.environ.get("MHE_HF_PYTHON") else []):
        p = subprocess.run([py, "-c", "import torch, transformers, tokenizers, safetensors"], capture_output=True)
        if p.returncode == 0:
            return py
    return None


class Results:
    """Pass and fail counts. check() counts one of each kind and prints "FAIL what" for a
    failure; quiet ones only keep their lines (in .lines)."""

    def __init__(self, quiet=False):
        self.passed = self.failed = self.skipped = 0
        self.quiet = quiet
        self.lines = []

    def say(self, msg):
        self.lines.append(msg)
        if not self.quiet:
            print(msg, flush=True)

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.say("FAIL " + str(what))
        return ok

    def finish(self):
        """Prints the RESULT line; returns the exit status (1 if anything failed)."""
        line = "RESULT: %d passed, %d failed" % (self.passed, self.failed)
        if self.skipped:
            line += ", %d skipped" % self.skipped
        print(line, flush=True)
        return 1 if self.failed else 0


# the counts of a script that keeps one set
RESULTS = Results()
check = RESULTS.check
finish = RESULTS.finish


def skip(name, reason):
    """The whole script cannot run: says why, counts one skip, exit status 0."""
    print("SKIP %s: %s" % (name, reason))
    print("RESULT: 0 passed, 0 failed, 1 skipped", flush=True)
    return 0


def run_mhe(*args, cwd=None, timeout=300):
    """Runs the mhe binary with args (any values, made strings): (exit status, stdout, stderr)."""
    p = subprocess.run([MHE] + [str(a) for a in args], capture_output=True, text=True, errors="replace",
                       timeout=timeout, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def tmpdir(prefix):
    """A fresh directory, removed when the script exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return d


def rel_err(got, want, floor):
    """|got - want| / max(|want|, floor)"""
    return abs(got - want) / max(abs(want), floor)


def csv_blocks(text):
    """The CSV stream of `mhe params --format csv`: blocks of '# title', a header, rows and
    '# note: ...' lines, as {title before any ':': {"title", "header", "rows" (dicts), "notes"}}."""
    blocks = {}
    cur = None
    for row in csv.reader(io.StringIO(text)):
        if not row or not any(row):
            continue
        line = ",".join(row)
        if line.startswith("# note: "):
            if cur is not None:
                cur["notes"].append(line[8:])
        elif line.startswith("# "):
            cur = {"title": line[2:], "header": None, "rows": [], "notes": []}
            blocks[line[2:].split(":")[0]] = cur
        elif cur["header"] is None:
            cur["header"] = row
        else:
            cur["rows"].append(dict(zip(cur["header"], row)))
    return blocks


def mhe_logits(model, ids, task="lm", types=None):
    """`mhe logits` of one sequence of ids: a list of rows of floats, None (and the error printed) on failure"""
    extra = ["--types", " ".join(map(str, types))] if types else []
    rc, out, err = run_mhe("logits", "--model", model, "--ids", " ".join(map(str, ids)), "--task", task, *extra)
    if rc != 0:
        print("mhe logits: " + err)
        return None
    return [[float(x) for x in line.split()] for line in out.strip().split("\n")]


def max_diff(a, b):
    """largest absolute difference of two tables of rows; inf when missing or of other shapes"""
    if a is None or len(a) != len(b) or any(len(r) != len(s) for r, s in zip(a, b)):
        return float("inf")
    return max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s))
