"""The generated tables are current: tools/scripts/reading_guide.py, which makes the
kind table (README.md) and the reading guide (docs/kinds.md) from mhe.h,
finds every function it names, and both files hold what it makes now; the
tables are counted row by row: the kind table has one row per kind of mhe.h's
enum, the tests table of docs/testing.md names every tests/test_*.c and
test_*.py once, the CUDA kernel table of docs/cuda.md (written by `make docs`
where nvcc is installed) one row per kernel of tools/scripts/cuda_budget.txt, with its
budgets. `make docs` renews them all. Needs only python3."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish  # noqa: E402


def block(path, start, end):
    """the text of a file between two markers ('' when they are missing)"""
    text = open(os.path.join(REPO, path), encoding="utf-8").read()
    if start not in text or end not in text:
        return ""
    return text[text.index(start):text.index(end)]


def section(path, heading):
    """a Markdown section: from its heading line to the next heading of the same or a higher level"""
    text = open(os.path.join(REPO, path), encoding="utf-8").read()
    level = heading.split(" ")[0]
    at = text.find("\n" + heading + "\n")
    if at < 0:
        return ""
    rest = text[at + len(heading) + 2:]
    nxt = re.search(r"^#{1,%d} " % len(level), rest, re.M)
    return rest[:nxt.start()] if nxt else rest


def main():
    script = os.path.join(REPO, "tools", "scripts", "reading_guide.py")
    made = subprocess.run([sys.executable, script], capture_output=True, text=True)
    check(made.returncode == 0, "reading_guide.py finds every function it names: %s" % made.stderr.strip())

    # the kind table: one row per kind of mhe.h's enum (MHE_ATTN_MHA .. before MHE_ATTN_KIND_COUNT)
    header = open(os.path.join(REPO, "mhe.h")).read()
    enum = header[header.index("MHE_ATTN_MHA = 0"):header.index("MHE_ATTN_KIND_COUNT")]
    n_kinds = len(re.findall(r"^\s*MHE_ATTN_\w+", enum, re.M))
    table = block("README.md", "<!-- kinds-table:start -->", "<!-- kinds-table:end -->")
    kinds = re.findall(r"^\| `([a-z-]+)` \|", table, re.M)
    check(n_kinds == 17 and len(kinds) == n_kinds and len(set(kinds)) == n_kinds,
          "README.md's kind table has one row per kind: %d rows, %d kinds in mhe.h" % (len(kinds), n_kinds))
    facts = block("docs/kinds.md", "<!-- kind-facts:start -->", "<!-- kind-facts:end -->")
    fact_kinds = re.findall(r"^\| `([a-z-]+)` \|", facts, re.M)
    check(fact_kinds == kinds, "docs/kinds.md's kind facts have the kind table's rows: %d rows" % len(fact_kinds))
    guide = block("docs/kinds.md", "<!-- reading-guide:start -->", "<!-- reading-guide:end -->")
    check(guide.count("\n| ") >= 20, "docs/kinds.md holds the reading guide (%d table rows)" % guide.count("\n| "))

    # the tests table: one row per test program and script
    tests_table = section("docs/testing.md", "## What each test checks")
    rows = re.findall(r"^\| `([^|]+)` \|", tests_table, re.M)
    named = [n.strip() for row in rows for n in row.replace("`", "").split(",")]
    tests = sorted(os.path.splitext(f)[0] if f.endswith(".c") else f
                   for f in os.listdir(os.path.join(REPO, "tests"))
                   if re.match(r"(test_\w+\.(c|py)|torch_crosscheck\.py)$", f))
    check(tests and sorted(named) == tests,
          "docs/testing.md's tests table names each test once: missing %s, extra or repeated %s" % (
              sorted(set(tests) - set(named)), sorted(n for n in set(named) if named.count(n) != 1 or n not in tests)))

    # the CUDA kernel table: one row per kernel of the budget, its budgets as the file has them
    budget = {}
    for line in open(os.path.join(REPO, "tools", "scripts", "cuda_budget.txt"), encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if line:
            name, arch, regs, _ = line.rsplit(None, 3)
            budget.setdefault(name, {})[arch] = regs
    cuda = block("docs/cuda.md", "<!-- cuda-kernels:start -->", "<!-- cuda-kernels:end -->")
    head = re.search(r"^\| kernel \| (.*) \| static shared bytes", cuda, re.M)
    archs = re.findall(r"(sm_\d+) registers", head.group(1)) if head else []
    shown = {}
    for name, cells in re.findall(r"^\| `([^`]+)` \| (.*) \|$", cuda, re.M):
        shown[name] = dict(zip(archs, re.findall(r"\((\d+|-)\)", cells)))
    check(shown and sorted(shown) == sorted(budget) and len(re.findall(r"^\| `", cuda, re.M)) == len(budget),
          "docs/cuda.md's kernel table has one row per kernel of tools/scripts/cuda_budget.txt: missing %s, extra %s" % (
              sorted(set(budget) - set(shown)), sorted(set(shown) - set(budget))))
    drift = sorted(n for n in budget if n in shown and shown[n] != budget[n])
    check(not drift, "docs/cuda.md's kernel table shows the budgets of tools/scripts/cuda_budget.txt: differ %s" % drift)

    stale = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    check(stale.returncode == 0, "the generated tables are current: %s" % stale.stdout.strip())

    # the GPU results and the README's GPU paragraph: written from docs/gpu/'s last real run
    gpu = subprocess.run([sys.executable, os.path.join(REPO, "tools", "scripts", "gpu_results.py"), "--check"],
                         capture_output=True, text=True)
    check(gpu.returncode == 0, "docs/cuda.md's GPU results and the README's claim are current: %s" % gpu.stderr.strip())
    claim = block("README.md", "<!-- gpu-claim:start -->", "<!-- gpu-claim:end -->")
    results = block("docs/cuda.md", "<!-- gpu-check:start -->", "<!-- gpu-check:end -->")
    head = re.search(r"NVIDIA (.+?), commit (\S+)", results)
    check(head and head.group(1) in claim and head.group(2) in claim and "| step | status |" in results,
          "the README's claim names the GPU and commit of docs/cuda.md's results: %s" % (head and head.groups(),))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
