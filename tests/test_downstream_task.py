"""The downstream task of the papers' protocol (tools/scripts/downstream_task.py),
built from Debian's fortunes package (skipped cleanly without it): 8 classes of
at least 400 examples, train / validation / test split by hash and disjoint,
no validation or test text in the pretraining corpus, the same files on a
second build, a bag-of-words baseline well above the majority class; and its
--check refusing a leak into pretraining, a label outside the classes and a
text in two splits, each by name (the study itself is mhe compare --task cls:
tests/test_compare.py). The pair
task (does B continue A?) from the same splits: balanced labels, each half
from an entry of its own split, the same files on a second build, the word
overlap baseline above the majority; --check refusing a half from another
split and a label outside 0/1.""" 
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish, skip, tmpdir  # noqa: E402

SCRIPT = os.path.join(REPO, "tools", "scripts", "downstream_task.py")


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    if not os.path.isdir("/usr/share/games/fortunes"):
        return skip("test_downstream_task.py", "no /usr/share/games/fortunes (apt-get install fortunes)")
    d = tmpdir("mhe_downstream_")
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    rc, out, err = run(a)
    check(rc == 0, "build: rc %d %s %s" % (rc, out, err))
    if rc != 0:
        return finish()
    meta = json.load(open(os.path.join(a, "task.json")))
    k = len(meta["classes"])
    totals = [sum(meta["counts"][s][c] for s in ("train", "valid", "test")) for c in range(k)]
    check(k >= 6 and min(totals) >= 400, "at least 6 classes of at least 400 examples: %s" % totals)
    n = {s: sum(meta["counts"][s]) for s in ("train", "valid", "test")}
    check(0.07 < n["test"] / sum(n.values()) < 0.13 and 0.07 < n["valid"] / sum(n.values()) < 0.13,
          "about a tenth each to validation and test: %s" % n)
    rows = {s: [l.rstrip("\n").split("\t", 1) for l in open(os.path.join(a, s + ".tsv"), encoding="utf-8")]
            for s in ("train", "valid", "test")}
    texts = {s: {t for _, t in r} for s, r in rows.items()}
    check(not (texts["train"] & texts["test"]) and not (texts["train"] & texts["valid"]) and not (texts["valid"] & texts["test"]),
          "the splits share no text")
    pre = {" ".join(l.split()) for l in open(os.path.join(a, "pretrain.txt"), encoding="utf-8")}
    check(not (pre & (texts["valid"] | texts["test"])) and len(pre & texts["train"]) > 0.9 * len(texts["train"]),
          "pretraining holds the train texts, no validation or test text")
    base = meta["baselines_test"]
    bow, maj = base["bag of words (naive Bayes)"], base["majority"]
    check(bow["accuracy"] > maj["accuracy"] + 0.2 and bow["macro_f1"] > maj["macro_f1"] + 0.2,
          "the bag of words beats the majority class by far: %s vs %s" % (bow, maj))
    rc, _, err = run(b)
    same = all(open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read()
               for f in ("train.tsv", "valid.tsv", "test.tsv", "pretrain.txt"))
    check(rc == 0 and same, "a second build writes the same files: %s" % err)
    rc, out, _ = run("--check", a)
    check(rc == 0 and "check out" in out, "--check of the built task: %s" % out)
    pairs(d, a, b, rows)

    # bad input: a leak, a label outside the classes, a text in two splits
    leak = os.path.join(d, "leak.txt")
    with open(leak, "w", encoding="utf-8") as f:
        f.write(open(os.path.join(a, "pretrain.txt"), encoding="utf-8").read() + rows["test"][3][1] + "\n")
    rc, _, err = run("--check", a, leak)
    check(rc == 1 and "leak into pretraining" in err and "leak.txt line" in err, "a test text in pretraining: %s" % err.strip())
    c = os.path.join(d, "c")
    shutil.copytree(a, c)
    with open(os.path.join(c, "valid.tsv"), "a", encoding="utf-8") as f:
        f.write("%d\tan example of a class the task does not have\n" % k)
    rc, _, err = run("--check", c)
    check(rc == 1 and "label %d is not one of the %d classes" % (k, k) in err and "valid.tsv line" in err,
          "a label outside the classes: %s" % err.strip())
    shutil.rmtree(c)
    shutil.copytree(a, c)
    with open(os.path.join(c, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("%s\t%s\n" % tuple(rows["test"][0]))
    rc, _, err = run("--check", c)
    check(rc == 1 and "in both" in err, "a test text in the train split: %s" % err.strip())
    return finish()


def pairs(d, a, b, rows):
    """the pair task: files, balance, provenance, baselines, refusals"""
    meta = json.load(open(os.path.join(a, "pairs", "task.json")))
    n = {s: sum(meta["counts"][s]) for s in ("train", "valid", "test")}
    pos = sum(meta["counts"][s][1] for s in n) / max(1, sum(n.values()))
    check(meta["classes"] == ["other", "continues"] and n["test"] > 400 and 0.4 < pos < 0.6,
          "pairs: two classes, over 400 test pairs, balanced: %s, %.3f continue" % (n, pos))
    lines = open(os.path.join(a, "pairs", "test.tsv"), encoding="utf-8").read().splitlines()
    whole = {t for _, t in rows["test"]}
    cont = [l.split("\t") for l in lines if l.startswith("1\t")]
    other = [l.split("\t") for l in lines if l.startswith("0\t")]
    check(all(len(p) == 3 for p in cont + other) and all(p[1] + " " + p[2] in whole for p in cont)
          and not any(p[1] + " " + p[2] in whole for p in other),
          "pairs: a continuing pair is its test entry cut in two, another pair is no entry")
    same = all(open(os.path.join(a, "pairs", f), "rb").read() == open(os.path.join(b, "pairs", f), "rb").read()
               for f in ("train.tsv", "valid.tsv", "test.tsv"))
    check(same, "pairs: a second build writes the same files")
    base = meta["baselines_test"]
    bow, maj = base["bag of words (word overlap)"], base["majority"]
    check(bow["accuracy"] > maj["accuracy"] + 0.05, "pairs: the word overlap beats the majority class: %s vs %s" % (bow, maj))
    c = os.path.join(d, "p")
    shutil.copytree(a, c)
    train_pair = open(os.path.join(a, "pairs", "train.tsv"), encoding="utf-8").readline()
    with open(os.path.join(c, "pairs", "test.tsv"), "a", encoding="utf-8") as f:
        f.write(train_pair)
    rc, _, err = run("--check", c)
    check(rc == 1 and "pairs/test.tsv line" in err and "not half of a test entry" in err,
          "pairs: a train pair among the test pairs is refused: %s" % err.strip())
    shutil.rmtree(c)
    shutil.copytree(a, c)
    with open(os.path.join(c, "pairs", "valid.tsv"), "a", encoding="utf-8") as f:
        f.write("2" + train_pair[1:])
    rc, _, err = run("--check", c)
    check(rc == 1 and "label 0 or 1" in err and "valid.tsv line %d" % (n["valid"] + 1) in err,
          "pairs: a label outside 0/1 is refused by line: %s" % err.strip())
    shutil.rmtree(c)


if __name__ == "__main__":
    sys.exit(main())
