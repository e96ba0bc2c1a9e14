"""examples/compare_attention, quickly: a tiny multi-seed run of four kinds writes a
Markdown table with a mean ± std row per kind and the three verdicts, and a valid SVG;
--bpe N runs the same on subwords (its own vocabulary, per-token perplexity, bits per
byte near the byte run's scale); bad flag values exit 2 naming the flag; a missing corpus
fails with a message.
Runs the example built in $MHE_TEST_BUILD/examples (skips when that build has none)."""
import os
import re
import subprocess
import sys
import xml.dom.minidom

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, build_dir, check, finish, repo_path, skip, tmpdir  # noqa: E402

NAME = "test_compare.py"
EXAMPLE = repo_path(os.path.join(build_dir(), "examples", "compare_attention"))
# foreign binaries (aarch64 under qemu) go through the runner, as in tests/run.sh
RUNNER = os.environ.get("MHE_TEST_RUNNER", "").split()
KINDS = ["mha", "sha", "mhe-add", "mhe-mul"]
# the brief's tiny budget; --eval_batches 8 keeps the validation pass short (the
# default scores the whole text, several seconds for 8 models here)
TINY = ["--steps", "3", "--seeds", "2", "--d_model", "32", "--heads", "4", "--layers", "1",
        "--seq_len", "16", "--batch", "4", "--kinds", ",".join(KINDS), "--eval_batches", "8", "--threads", "1"]


def run(args, cwd=REPO):
    p = subprocess.run(RUNNER + [EXAMPLE] + args, capture_output=True, text=True, errors="replace",
                       timeout=120, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def tiny_run(out):
    prefix = os.path.join(out, "cmp")
    rc, stdout, err = run(TINY + ["--out", prefix])
    check(rc == 0, "tiny run exit %d: %s" % (rc, err.strip()))
    if rc != 0:
        return
    md = open(prefix + ".md", encoding="utf-8").read()
    for kind in KINDS:
        row = re.search(r"^\| %s \| \d+ \| \d+ \| [0-9.]+ ± [0-9.]+ \| [0-9.]+–[0-9.]+ \|" % re.escape(kind), md, re.M)
        check(row is not None, "no '%s' row with mean ± std and min–max in the Markdown" % kind)
    for tag in ("(a) mha and sha separate: ", "(b) MHE-MUL keeps 75–99 % of MHA's performance", "(c) MUL ahead of ADD: "):
        line = [ln for ln in md.splitlines() if ln.startswith("- Verdict " + tag)]
        check(len(line) == 1, "verdict line '%s' missing from the Markdown" % tag)
        check(("Verdict " + tag) in stdout, "verdict line '%s' missing from stdout" % tag)
        if line:
            check(re.search(r": (holds|does not hold|not separated|cannot tell)", line[0]) is not None,
                  "verdict says neither holds nor not: %s" % line[0])
    check(not os.path.exists(prefix + ".md.tmp") and not os.path.exists(prefix + ".svg.tmp"), "temporary files left")
    try:
        doc = xml.dom.minidom.parse(prefix + ".svg")
        texts = " ".join(t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild)
        check(all(k in texts for k in KINDS), "SVG does not label every kind: %s" % texts)
        # the white background and one bar per kind
        check(len(doc.getElementsByTagName("rect")) == 1 + len(KINDS), "SVG bars: want one per kind")
    except Exception as e:  # noqa: BLE001 - any parse error is the failure
        check(False, "SVG does not parse: %s" % e)


def subwords(out):
    prefix = os.path.join(out, "bpe")
    rc, stdout, err = run(TINY + ["--bpe", "300", "--out", prefix])
    check(rc == 0 and "byte-level BPE of 300 tokens" in stdout, "--bpe 300: exit %d %s" % (rc, err.strip()))
    if rc != 0:
        return
    md = open(prefix + ".md", encoding="utf-8").read()
    rows = re.findall(r"^\| (mha|sha|mhe-add|mhe-mul) \| \d+ \| (\d+) \| ([0-9.]+) ± [0-9.]+ \| [0-9.]+–[0-9.]+ \| ([0-9.]+) ± ", md, re.M)
    check(len(rows) == 4 and "tokens: byte-level BPE" in md, "a row per kind and the tokens named: %s" % md[-300:])
    # untrained-ish models: per-token perplexity near the vocabulary, and bits per byte
    # = log2(per-token ppl) / bytes per token, so below log2(300) = 8.2
    check(all(100 < float(p) < 400 and 2 < float(b) < 8.3 for _, _, p, b in rows),
          "per-token perplexity near the 300-token vocabulary and bits per byte below log2(300): %s" % rows)
    rc, _, err = run(TINY + ["--bpe", "256", "--out", prefix])
    check(rc == 2 and "--bpe" in err, "--bpe 256 (no merge, no subword) refused: %d %s" % (rc, err.strip()))


def bad_input(out):
    for flag, value in (("--steps", "3x"), ("--seeds", "0"), ("--lr", "nan"), ("--kinds", "mha,nope")):
        rc, _, err = run([flag, value, "--out", os.path.join(out, "bad")])
        check(rc == 2 and flag in err and value in err, "%s %s: exit %d, stderr %r" % (flag, value, rc, err))
    # run elsewhere, the bundled corpus is not found: a message and a non-zero exit
    rc, _, err = run(TINY + ["--out", os.path.join(out, "nocorpus")], cwd=out)
    check(rc != 0 and "train.txt" in err, "missing corpus: exit %d, stderr %r" % (rc, err))


def main():
    if not (os.path.isfile(EXAMPLE) and os.access(EXAMPLE, os.X_OK)):
        return skip(NAME, "no %s (this build has no examples; `make` builds them)" % EXAMPLE)
    out = tmpdir("mhe_compare_")
    tiny_run(out)
    subwords(out)
    bad_input(out)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
