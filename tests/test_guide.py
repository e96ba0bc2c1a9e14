"""The README's reading guide is current: tools/reading_guide.py, which
makes it from mhe.h, finds every function it names and gives the same line
ranges and kind table as README.md holds. Needs only python3."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish  # noqa: E402


def main():
    script = os.path.join(REPO, "tools", "reading_guide.py")
    made = subprocess.run([sys.executable, script], capture_output=True, text=True)
    check(made.returncode == 0, "reading_guide.py finds every function it names: %s" % made.stderr.strip())
    check("| `mhe-mul` |" in made.stdout and "| `linear` |" in made.stdout, "the kind table has every kind")
    stale = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True)
    check(stale.returncode == 0, "README.md's reading guide is current: %s" % stale.stdout.strip())
    return finish()


if __name__ == "__main__":
    sys.exit(main())
