"""The downstream task of the papers' protocol (tools/scripts/downstream_task.py),
built from Debian's fortunes package (skipped cleanly without it): 8 classes of
at least 400 examples, train / validation / test split by hash and disjoint,
no validation or test text in the pretraining corpus, the same files on a
second build, a bag-of-words baseline well above the majority class; and its
--check refusing a leak into pretraining, a label outside the classes and a
text in two splits, each by name. Then the study (tools/scripts/downstream_study.py)
at its tiny scale: the table, PRR and the verdicts written; a second run reuses
every finished run; a run stopped after pretraining resumes from its pretrained
model; a run of other settings and a task with a leak are refused by name; the
subword variant (--subwords) trains its tokenizer and reports apart; a run
whose pretraining or fine-tuning was stopped is resumed (mhe train --resume)
and a finished one kept. The pair
task (does B continue A?) from the same splits: balanced labels, each half
from an entry of its own split, the same files on a second build, the word
overlap baseline above the majority; --check refusing a half from another
split and a label outside 0/1; the study's --task pairs reusing the pretrained
encoders, and refusing a pretrained model of other settings.""" 
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, check, finish, skip, tmpdir  # noqa: E402

SCRIPT = os.path.join(REPO, "tools", "scripts", "downstream_task.py")
STUDY = os.path.join(REPO, "tools", "scripts", "downstream_study.py")


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
    study(d, a)
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


def study(d, task):
    if not os.access(MHE, os.X_OK):
        print("SKIP the study: no %s" % MHE)
        return
    out = os.path.join(d, "study")
    os.makedirs(out)
    shutil.copytree(task, os.path.join(out, "task"))
    args = [sys.executable, STUDY, "--out", out, "--scale", "tiny", "--kinds", "mha,sha,mhe-mul", "--mhe", MHE,
            "--seeds", "2", "--threads", "1"]
    p = subprocess.run(args, capture_output=True, text=True)
    md = os.path.join(out, "downstream.md")
    body = open(md, encoding="utf-8").read() if os.path.exists(md) else ""
    check(p.returncode == 0 and "| mhe-mul |" in body and "PRR vs MHA" in body and
          body.count("\n- ") >= 4 and os.path.exists(os.path.join(out, "downstream.svg")),
          "the study writes the table, the claims and the plot: rc %d %s" % (p.returncode, (p.stderr + p.stdout)[-400:]))
    res = json.load(open(os.path.join(out, "downstream.json"))) if p.returncode == 0 else {"rows": []}
    row = {r["kind"]: r for r in res["rows"]}
    check(set(row) == {"mha", "sha", "mhe-mul"} and all(len(r["acc"]) == 2 and all(0 <= x <= 1 for x in r["acc"]) for r in row.values())
          and row.get("mhe-mul", {}).get("attention_params", 1) < row.get("mha", {}).get("attention_params", 0),
          "every kind with two seeds' accuracies, mhe-mul's attention smaller than mha's")
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.count("(reused)") == 6, "a second study reuses the six finished runs: %s" % p.stdout[-300:])
    run_dir = os.path.join(out, "runs", "sha-s2")
    pre = os.path.join(run_dir, "pretrain.safetensors")
    stamp = os.path.getmtime(pre)
    os.remove(os.path.join(run_dir, "result.json"))
    os.remove(os.path.join(run_dir, "finetune.safetensors"))
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.count("(reused)") == 5 and os.path.getmtime(pre) == stamp and
          os.path.exists(os.path.join(run_dir, "result.json")),
          "a run stopped after pretraining resumes from its pretrained model: %s" % p.stdout[-300:])
    # a run whose pretraining and fine-tuning may have been stopped (no pretrain.json, no result): both resumed,
    # mhe says "nothing to train" of finished ones, and the run ends with the same result from the same files
    stopped = os.path.join(out, "runs", "mha-s2")
    before = json.load(open(os.path.join(stopped, "result.json")))
    files = {n: os.path.getmtime(os.path.join(stopped, n)) for n in ("pretrain.safetensors", "finetune.safetensors")}
    os.remove(os.path.join(stopped, "result.json"))
    os.remove(os.path.join(stopped, "pretrain.json"))
    p = subprocess.run(args, capture_output=True, text=True)
    after = json.load(open(os.path.join(stopped, "result.json"))) if p.returncode == 0 else {}
    check(p.returncode == 0 and after.get("accuracy") == before["accuracy"] and os.path.exists(os.path.join(stopped, "pretrain.json"))
          and all(os.path.getmtime(os.path.join(stopped, n)) == t for n, t in files.items())
          and sum(l.startswith("$ ") and " train --resume " in l for l in open(os.path.join(stopped, "log.txt"))) == 2,
          "a run with no record of its pretraining resumes both steps and keeps the finished files: %s %s %s" % (
              before["accuracy"], after.get("accuracy"), (p.stderr + p.stdout)[-300:]))
    stamps = {r: os.path.getmtime(os.path.join(out, "runs", r, "pretrain.safetensors")) for r in os.listdir(os.path.join(out, "runs"))}
    p = subprocess.run(args + ["--task", "pairs"], capture_output=True, text=True)
    body = open(os.path.join(out, "downstream-pairs.md"), encoding="utf-8").read() if p.returncode == 0 else ""
    check(p.returncode == 0 and "| mhe-mul |" in body and "does text B continue text A" in body and
          all(os.path.getmtime(os.path.join(out, "runs", r, "pretrain.safetensors")) == t for r, t in stamps.items()) and
          all(os.path.exists(os.path.join(out, "runs", r, "result-pairs.json")) for r in stamps),
          "--task pairs fine-tunes the same pretrained encoders and reports apart: %s" % (p.stderr + p.stdout)[-300:])
    pj = os.path.join(out, "runs", "mha-s1", "pretrain.json")
    saved = open(pj).read()
    with open(pj, "w") as f:
        f.write(saved.replace('"steps": %d' % 6, '"steps": 7', 1))
    os.remove(os.path.join(out, "runs", "mha-s1", "result-pairs.json"))
    p = subprocess.run(args + ["--task", "pairs"], capture_output=True, text=True)
    check(p.returncode == 1 and "pretrained with other settings" in p.stderr and "mha-s1" in p.stderr,
          "a pretrained model of other settings is refused: %s" % p.stderr.strip())
    with open(pj, "w") as f:
        f.write(saved)
    r = json.load(open(os.path.join(run_dir, "result.json")))
    r["settings"]["pre"]["steps"] += 1
    json.dump(r, open(os.path.join(run_dir, "result.json"), "w"))
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 1 and "other settings" in p.stderr and "sha-s2" in p.stderr, "a run of other settings is refused: %s" % p.stderr.strip())
    p = subprocess.run(args[:-4] + ["--seeds", "1", "--threads", "1", "--subwords", "300"], capture_output=True, text=True)
    sub = os.path.join(out, "downstream-bpe300.json")
    rows = {r["kind"]: r for r in json.load(open(sub))["rows"]} if p.returncode == 0 and os.path.exists(sub) else {}
    check(p.returncode == 0 and set(rows) == {"mha", "sha", "mhe-mul"} and os.path.exists(os.path.join(out, "task", "bpe-300.tok"))
          and rows["mha"]["total_params"] == row["mha"]["total_params"] + 44 * 32,
          "the subword study: its own tokenizer (300 tokens: 44 embedding rows more than bytes), runs and report: %s"
          % (p.stderr + p.stdout)[-300:])
    with open(os.path.join(out, "task", "pretrain.txt"), "a", encoding="utf-8") as f:
        f.write(open(os.path.join(out, "task", "test.tsv"), encoding="utf-8").readline().split("\t", 1)[1])
    p = subprocess.run(args, capture_output=True, text=True)
    check(p.returncode == 1 and "leak into pretraining" in p.stderr, "a task whose pretraining holds a test text is refused: %s" % p.stderr.strip())


if __name__ == "__main__":
    sys.exit(main())
