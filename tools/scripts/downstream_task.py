#!/usr/bin/env python3
"""The downstream task of the papers' protocol (pretrain, fine-tune, PRR),
built from Debian's `fortunes` package (apt-get install fortunes): which file
a quotation comes from, 8 classes

    0 computers  1 definitions  2 men-women  3 people  4 politics  5 science  6 songs-poems  7 work

Each file's entries (split at `%` lines) have their white space squeezed to
single spaces; entries of 20 to 400 bytes are kept, and a text that occurs in
two classes (or twice in one) is dropped everywhere. The split is by hash:
the first 8 hex digits of the text's SHA-256 modulo 10 give test (0),
validation (1) or train (2..9), so an entry keeps its split whatever else the
package holds. The pretraining corpus is every entry of every fortunes file
(the eight and the others, squeezed the same way, 20 bytes or more), one a
line, without any validation or test text: checked by hash.

Writes OUT/train.tsv, valid.tsv, test.tsv (label<TAB>text lines), pretrain.txt
and task.json (the classes, counts, the files' SHA-256, the package version,
and two baselines on the test split: the majority class and a bag of words,
multinomial naive Bayes on lower-cased word unigrams with add-one smoothing,
each as accuracy and macro-F1).

    python3 tools/scripts/downstream_task.py OUT_DIR
    python3 tools/scripts/downstream_task.py --check OUT_DIR [PRETRAIN]
        checks an existing task: every label a class, the splits disjoint, no
        validation or test text in the pretraining corpus (PRETRAIN, default
        OUT_DIR/pretrain.txt); exit 1 with the first problem named"""
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter

SRC = "/usr/share/games/fortunes"
CLASSES = ["computers", "definitions", "men-women", "people", "politics", "science", "songs-poems", "work"]
MIN_BYTES, MAX_BYTES = 20, 400


def squeeze(raw):
    return " ".join(raw.split())


def entries(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    return [squeeze(e) for e in re.split(r"^%\n", text, flags=re.M) if squeeze(e)]


def text_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(text):
    b = int(text_hash(text)[:8], 16) % 10
    return "test" if b == 0 else "valid" if b == 1 else "train"


def words(text):
    return re.findall(r"[a-z0-9']+", text.lower())


def scores(gold, pred, k):
    """accuracy and macro-F1 (the mean over the classes of 2PR/(P+R), 0 for a class never right)"""
    acc = sum(g == p for g, p in zip(gold, pred)) / len(gold)
    f1s = []
    for c in range(k):
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        fp = sum(g != c and p == c for g, p in zip(gold, pred))
        fn = sum(g == c and p != c for g, p in zip(gold, pred))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return acc, sum(f1s) / k


def naive_bayes(train, test, k):
    """multinomial naive Bayes with add-one smoothing: predicted labels of test"""
    counts = [Counter() for _ in range(k)]
    prior = Counter(lab for lab, _ in train)
    for lab, text in train:
        counts[lab].update(words(text))
    vocab = set().union(*counts)
    totals = [sum(c.values()) for c in counts]
    pred = []
    for _, text in test:
        best, arg = -1e300, 0
        for c in range(k):
            s = math.log(prior[c] / len(train)) + sum(math.log((counts[c][w] + 1) / (totals[c] + len(vocab)))
                                                      for w in words(text) if w in vocab)
            if s > best:
                best, arg = s, c
        pred.append(arg)
    return pred


def read_tsv(path, k):
    """label<TAB>text lines; a label outside 0..k-1 or a line without a tab is an error naming the line"""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            lab, tab, text = line.partition("\t")
            if not tab or not lab.isdigit() or not text:
                raise ValueError("%s line %d: expected label<TAB>text" % (path, n))
            if int(lab) >= k:
                raise ValueError("%s line %d: label %s is not one of the %d classes (0..%d)" % (path, n, lab, k, k - 1))
            out.append((int(lab), text))
    return out


def check(out, pretrain=None):
    """the problems of an existing task, as one message, or None"""
    k = len(CLASSES)
    try:
        sets = {s: read_tsv(os.path.join(out, s + ".tsv"), k) for s in ("train", "valid", "test")}
    except (OSError, ValueError) as e:
        return str(e)
    seen = {}
    for s, rows in sets.items():
        for _, text in rows:
            h = text_hash(text)
            if h in seen and seen[h] != s:
                return "a text is in both %s and %s: %.60s" % (seen[h], s, text)
            seen[h] = s
    held = {text_hash(t) for s in ("valid", "test") for _, t in sets[s]}
    pretrain = pretrain or os.path.join(out, "pretrain.txt")
    try:
        with open(pretrain, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if text_hash(squeeze(line)) in held:
                    return "%s line %d is a validation or test text of the task (a leak into pretraining): %.60s" % (
                        pretrain, n, squeeze(line))
    except OSError as e:
        return str(e)
    return None


def build(out):
    if not os.path.isdir(SRC):
        print("downstream_task: %s is missing (apt-get install fortunes)" % SRC, file=sys.stderr)
        return 1
    owner = {}   # text -> class, None when in two classes
    for c, name in enumerate(CLASSES):
        for t in entries(os.path.join(SRC, name)):
            if MIN_BYTES <= len(t.encode()) <= MAX_BYTES:
                owner[t] = None if t in owner else c
    rows = {"train": [], "valid": [], "test": []}
    for t in sorted(owner, key=text_hash):   # an order that depends on the texts only
        if owner[t] is not None:
            rows[split_of(t)].append((owner[t], t))
    held = {text_hash(t) for s in ("valid", "test") for _, t in rows[s]}
    names = sorted(f for f in os.listdir(SRC) if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(SRC, f)))
    pre = [t for name in names for t in entries(os.path.join(SRC, name))
           if len(t.encode()) >= MIN_BYTES and text_hash(t) not in held]
    os.makedirs(out, exist_ok=True)
    files = {}
    for s in ("train", "valid", "test"):
        files[s + ".tsv"] = "".join("%d\t%s\n" % r for r in rows[s])
    files["pretrain.txt"] = "".join(t + "\n" for t in pre)
    for name, body in files.items():
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(body)
        os.replace(tmp, os.path.join(out, name))
    k = len(CLASSES)
    counts = {s: [sum(1 for lab, _ in rows[s] if lab == c) for c in range(k)] for s in rows}
    gold = [lab for lab, _ in rows["test"]]
    major = Counter(lab for lab, _ in rows["train"]).most_common(1)[0][0]
    base = {"majority": scores(gold, [major] * len(gold), k),
            "bag of words (naive Bayes)": scores(gold, naive_bayes(rows["train"], rows["test"], k), k)}
    try:
        ver = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "fortunes"], capture_output=True, text=True).stdout or "unknown"
    except OSError:
        ver = "unknown"
    meta = {"classes": CLASSES, "counts": counts, "pretrain_entries": len(pre), "fortunes_version": ver,
            "sha256": {n: hashlib.sha256(b.encode("utf-8")).hexdigest() for n, b in files.items()},
            "baselines_test": {n: {"accuracy": a, "macro_f1": f} for n, (a, f) in base.items()}}
    with open(os.path.join(out, "task.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print("%s: %d classes; train %d, valid %d, test %d examples (the smallest class: %d in all); pretraining %d entries, "
          "%d bytes" % (out, k, len(rows["train"]), len(rows["valid"]), len(rows["test"]),
                        min(sum(counts[s][c] for s in counts) for c in range(k)), len(pre), len(files["pretrain.txt"].encode())))
    for n, (a, f1) in base.items():
        print("  test baseline %-28s accuracy %.3f  macro-F1 %.3f" % (n, a, f1))
    problem = check(out)
    if problem:
        print("downstream_task: %s" % problem, file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "--check":
        problem = check(argv[2], argv[3] if len(argv) > 3 else None)
        if problem:
            print("downstream_task: %s" % problem, file=sys.stderr)
            return 1
        print("downstream_task: %s: labels, splits and pretraining corpus check out" % argv[2])
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    return build(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
