"""The README's reading guide is current: tools/reading_guide.py, which
makes it from mhe.h, finds every function it names and gives the same line
ranges and kind table as README.md holds. Needs only python3."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish  # noqa: E402


def main():
    script = os.path.join(REPO, "tools", "reading_guide.py")
    made = subprocess.run([sys.executable, script], capture_output=True, text=True)
    check(made.returncode == 0, "reading_guide.py finds every function it names: %s" % made.stderr.strip())
    # one row per kind of mhe.h's enum (MHE_ATTN_MHA .. before MHE_ATTN_KIND_COUNT)
    header = open(os.path.join(REPO, "mhe.h")).read()
    enum = header[header.index("MHE_ATTN_MHA = 0"):header.index("MHE_ATTN_KIND_COUNT")]
    n_kinds = len(re.findall(r"^\s*MHE_ATTN_\w+", enum, re.M))
    kinds = re.findall(r"^\| `([a-z-]+)` \|", made.stdout, re.M)
    check(n_kinds == 17 and len(kinds) == n_kinds and len(set(kinds)) == n_kinds,
          "the kind table has one row per kind: %d rows, %d kinds in mhe.h" % (len(kinds), n_kinds))
    # the README's tests table: one row per test program and script
    readme = open(os.path.join(REPO, "README.md")).read()
    table = readme[readme.index("\n## Tests\n"):readme.index("\n## Reliability\n")]
    rows = re.findall(r"^\| `([^|]+)` \|", table, re.M)
    named = [n.strip() for row in rows for n in row.replace("`", "").split(",")]
    tests = sorted(os.path.splitext(f)[0] if f.endswith(".c") else f
                   for f in os.listdir(os.path.join(REPO, "tests"))
                   if re.match(r"(test_\w+\.(c|py)|torch_crosscheck\.py)$", f))
    check(sorted(named) == tests, "the README's tests table names each test once: missing %s, extra or repeated %s" % (
        sorted(set(tests) - set(named)), sorted(n for n in set(named) if named.count(n) != 1 or n not in tests)))
    stale = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    check(stale.returncode == 0, "README.md's reading guide is current: %s" % stale.stdout.strip())
    return finish()


if __name__ == "__main__":
    sys.exit(main())
