#!/usr/bin/env python3
"""The fidelity study's corpus: every plain-text fortune file of Debian's
`fortunes` package (apt-get install fortunes), sorted by name, entries split on
`%` lines, each entry kept with its `%` line, every 10th entry (the 10th, 20th,
...) to validation. Package 1:1.99.1-7.3 gives 2,314,000 train and 262,676
validation bytes.

    python3 tools/scripts/fortunes_corpus.py OUT_DIR     -> OUT_DIR/train.txt, OUT_DIR/valid.txt
"""
import os
import re
import sys

SRC = "/usr/share/games/fortunes"


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: fortunes_corpus.py OUT_DIR\n")
        return 2
    if not os.path.isdir(SRC):
        sys.stderr.write("fortunes_corpus: %s is missing (apt-get install fortunes)\n" % SRC)
        return 1
    names = sorted(f for f in os.listdir(SRC)
                   if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(SRC, f)))
    entries = []
    for name in names:
        with open(os.path.join(SRC, name), "rb") as f:
            entries += [e + b"%\n" for e in re.split(rb"^%\n", f.read(), flags=re.M) if e.strip()]
    os.makedirs(argv[1], exist_ok=True)
    for fname, keep in (("train.txt", lambda i: i % 10 != 9), ("valid.txt", lambda i: i % 10 == 9)):
        path = os.path.join(argv[1], fname)
        with open(path + ".tmp", "wb") as f:
            f.write(b"".join(e for i, e in enumerate(entries) if keep(i)))
        os.replace(path + ".tmp", path)
        print("%s: %d bytes" % (path, os.path.getsize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
