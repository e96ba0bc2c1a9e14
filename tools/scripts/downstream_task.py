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

A second task of another kind, pair classification, is made from the same
entries into OUT/pairs (the same splits, so the same pretraining corpus serves
both): does text B continue text A? Each entry is cut at a word boundary
between 30 % and 70 % of its length (the boundary chosen by the text's hash)
into A and B. An entry whose hash is odd keeps its own B (label 1, "continues");
the others get the B of another entry of the same split and class, the one
whose B is closest in length (label 0), so neither the topic nor the length of
B tells the answer, only whether the two halves fit. Lines are
label<TAB>A<TAB>B: a byte-level model sees the tab between the two texts as
the separator. Baselines: the majority class, and a bag of words: the overlap
of the two texts' word sets (Jaccard), above a threshold fit on train.

    python3 tools/scripts/downstream_task.py OUT_DIR
    python3 tools/scripts/downstream_task.py --pairs OUT_DIR
        the pair task alone (OUT_DIR/pairs) from an existing task's splits
    python3 tools/scripts/downstream_task.py --check OUT_DIR [PRETRAIN]
        checks an existing task: every label a class, the splits disjoint, no
        validation or test text in the pretraining corpus (PRETRAIN, default
        OUT_DIR/pretrain.txt); where OUT_DIR/pairs exists, the same of the
        pairs (labels 0 and 1, two texts a line, each half from an entry of its
        own split); exit 1 with the first problem named"""
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

PAIR_CLASSES = ["other", "continues"]


def halves(text):
    """A and B: the text cut at the word boundary between 30 % and 70 % of its length that its hash picks"""
    spaces = [i for i, ch in enumerate(text) if ch == " " and 0.3 * len(text) <= i <= 0.7 * len(text)]
    if not spaces:
        return None
    c = spaces[int(text_hash(text)[8:16], 16) % len(spaces)]
    return text[:c], text[c + 1:]


def pair_rows(rows):
    """one split's (label, text) rows as (continues?, A, B) pairs: an odd hash keeps its own B, an even one takes
    the B of another entry of its class, the closest in length"""
    cut = [(lab, t, halves(t)) for lab, t in rows]
    cut = [c for c in cut if c[2]]
    by_class = {}
    for i, (lab, _, _) in enumerate(cut):
        by_class.setdefault(lab, []).append(i)
    out = []
    for i, (lab, t, (a, b)) in enumerate(cut):
        if int(text_hash(t)[16:24], 16) % 2:
            out.append((1, a, b))
            continue
        others = [j for j in by_class[lab] if j != i and cut[j][2][1] != b]
        if others:
            j = min(others, key=lambda j: (abs(len(cut[j][2][1]) - len(b)), text_hash(cut[j][1])))
            out.append((0, a, cut[j][2][1]))
    return out


def overlap(a, b):
    """Jaccard overlap of the two texts' word sets"""
    wa, wb = set(words(a)), set(words(b))
    return len(wa & wb) / len(wa | wb) if wa | wb else 0.0


def overlap_baseline(train, test):
    """label 1 where the overlap reaches the threshold that is most accurate on train"""
    sc = [(overlap(a, b), lab) for lab, a, b in train]
    best, theta = -1, 0.0
    for th in sorted({x for x, _ in sc}) + [2.0]:
        acc = sum((x >= th) == (lab == 1) for x, lab in sc)
        if acc > best:
            best, theta = acc, th
    return [int(overlap(a, b) >= theta) for _, a, b in test]


def read_pairs(path):
    """label<TAB>A<TAB>B lines, label 0 or 1; anything else is an error naming the line"""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3 or parts[0] not in ("0", "1") or not parts[1] or not parts[2]:
                raise ValueError("%s line %d: expected label<TAB>A<TAB>B with label 0 or 1 and two texts" % (path, n))
            out.append((int(parts[0]), parts[1], parts[2]))
    return out


def check_pairs(out):
    """the problems of OUT/pairs against the task's splits, or None: every half comes from an entry of its own split"""
    k = len(CLASSES)
    try:
        sets = {s: read_tsv(os.path.join(out, s + ".tsv"), k) for s in ("train", "valid", "test")}
        pairs = {s: read_pairs(os.path.join(out, "pairs", s + ".tsv")) for s in ("train", "valid", "test")}
    except (OSError, ValueError) as e:
        return str(e)
    for s in pairs:
        cuts = [halves(t) for _, t in sets[s]]
        firsts, seconds = {h[0] for h in cuts if h}, {h[1] for h in cuts if h}
        for n, (_, a, b) in enumerate(pairs[s], 1):
            if a not in firsts or b not in seconds:
                return "pairs/%s.tsv line %d: a text that is not half of a %s entry (a leak across splits?): %.60s" % (
                    s, n, s, a if a not in firsts else b)
    return None


def write_atomic(path, text):
    with open(path + ".tmp", "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def finish_build(base, problem):
    """prints the test baselines and the built task's problem, if any: the exit status"""
    for n, (a, f1) in base.items():
        print("  test baseline %-28s accuracy %.3f  macro-F1 %.3f" % (n, a, f1))
    if problem:
        print("downstream_task: %s" % problem, file=sys.stderr)
        return 1
    return 0


def build_pairs(out):
    """OUT/pairs from the task's splits in OUT"""
    k = len(CLASSES)
    try:
        rows = {s: read_tsv(os.path.join(out, s + ".tsv"), k) for s in ("train", "valid", "test")}
        parent = json.load(open(os.path.join(out, "task.json")))
    except (OSError, ValueError) as e:
        print("downstream_task: %s" % e, file=sys.stderr)
        return 1
    pairs = {s: pair_rows(rows[s]) for s in rows}
    d = os.path.join(out, "pairs")
    os.makedirs(d, exist_ok=True)
    files = {s + ".tsv": "".join("%d\t%s\t%s\n" % r for r in pairs[s]) for s in pairs}
    for name, body in files.items():
        write_atomic(os.path.join(d, name), body)
    gold = [lab for lab, _, _ in pairs["test"]]
    major = Counter(lab for lab, _, _ in pairs["train"]).most_common(1)[0][0]
    base = {"majority": scores(gold, [major] * len(gold), 2),
            "bag of words (word overlap)": scores(gold, overlap_baseline(pairs["train"], pairs["test"]), 2)}
    sha = {n: hashlib.sha256(b.encode("utf-8")).hexdigest() for n, b in files.items()}
    sha["pretrain.txt"] = parent["sha256"]["pretrain.txt"]
    meta = {"classes": PAIR_CLASSES, "counts": {s: [sum(1 for lab, _, _ in pairs[s] if lab == c) for c in range(2)] for s in pairs},
            "pretrain_entries": parent["pretrain_entries"], "fortunes_version": parent["fortunes_version"], "sha256": sha,
            "baselines_test": {n: {"accuracy": a, "macro_f1": f} for n, (a, f) in base.items()}}
    write_atomic(os.path.join(d, "task.json"), json.dumps(meta, indent=1))
    print("%s: does B continue A? train %d, valid %d, test %d pairs (%d continue in all)" % (
        d, len(pairs["train"]), len(pairs["valid"]), len(pairs["test"]), sum(meta["counts"][s][1] for s in pairs)))
    return finish_build(base, check_pairs(out))


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
        write_atomic(os.path.join(out, name), body)
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
    write_atomic(os.path.join(out, "task.json"), json.dumps(meta, indent=1))
    print("%s: %d classes; train %d, valid %d, test %d examples (the smallest class: %d in all); pretraining %d entries, "
          "%d bytes" % (out, k, len(rows["train"]), len(rows["valid"]), len(rows["test"]),
                        min(sum(counts[s][c] for s in counts) for c in range(k)), len(pre), len(files["pretrain.txt"].encode())))
    return finish_build(base, check(out)) or build_pairs(out)


def main(argv):
    if len(argv) >= 3 and argv[1] == "--check":
        problem = check(argv[2], argv[3] if len(argv) > 3 else None)
        if not problem and os.path.isdir(os.path.join(argv[2], "pairs")):
            problem = check_pairs(argv[2])
        if problem:
            print("downstream_task: %s" % problem, file=sys.stderr)
            return 1
        print("downstream_task: %s: labels, splits and pretraining corpus check out" % argv[2])
        return 0
    if len(argv) == 3 and argv[1] == "--pairs":
        return build_pairs(argv[2])
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    return build(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
