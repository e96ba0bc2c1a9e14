#!/usr/bin/env python3
"""Byte-level BPE or WordPiece encoding speed: mhe (build/bench_bpe,
mhe_bpe_encode) against the Hugging Face tokenizers package, in one run, on the
same tokenizer.json and the same text.

    python3 tools/bench/bench_bpe.py [--model bpe|wordpiece] [--vocab 8000] [--mb 4] [--repeats 5]

The tokenizer is trained here by tokenizers (bpe: a byte-level BPE with GPT-2's
pre-tokenisation, the full byte alphabet; wordpiece: BertWordPieceTokenizer,
uncased, as bert-base-uncased) on the repository's docs/*.md and
examples/data/train.txt; the text is examples/data/valid.txt and the docs,
repeated to --mb megabytes. Both sides encode the whole text as one string on
one thread (tokenizers' encode of a single sequence; RAYON_NUM_THREADS=1), the
best of --repeats timed runs after an untimed one; tokenizers also encodes the
text's lines in one encode_batch call (its usual use, one thread). mhe's ids of
the whole text are compared with tokenizers'. Prints MB/s of each, their ratio, the CPU's name and
the load average: on a shared machine the numbers are only indicative.
Needs `make build/bench_bpe` and `pip install tokenizers`."""
import argparse
import glob
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("bpe", "wordpiece"), default="bpe")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench_bpe"))
    a = ap.parse_args()
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    try:
        import tokenizers
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        print("bench_bpe: %s (pip install tokenizers)" % e)
        return 1
    if not os.access(a.bin, os.X_OK):
        print("bench_bpe: no %s (make build/bench_bpe)" % a.bin)
        return 1
    train = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "examples", "data", "train.txt")]
    if a.model == "bpe":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.train(train, trainers.BpeTrainer(vocab_size=a.vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            special_tokens=["<|endoftext|>"], show_progress=False))
    else:
        from tokenizers import BertWordPieceTokenizer
        wp = BertWordPieceTokenizer(lowercase=True)
        wp.train(train, vocab_size=a.vocab, show_progress=False)
        with tempfile.TemporaryDirectory() as d:
            wp.save(os.path.join(d, "t.json"))
            tk = Tokenizer.from_file(os.path.join(d, "t.json"))
    base = open(os.path.join(ROOT, "examples", "data", "valid.txt"), encoding="utf-8", errors="replace").read()
    base += "".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))
    text = (base * (int(a.mb * 1e6 / len(base.encode())) + 1))
    data = text.encode()[: int(a.mb * 1e6)]
    text = data.decode("utf-8", errors="ignore")
    data = text.encode()
    with tempfile.TemporaryDirectory() as d:
        tj, tx = os.path.join(d, "tokenizer.json"), os.path.join(d, "text.txt")
        tk.save(tj)
        open(tx, "wb").write(data)
        want = tk.encode(text, add_special_tokens=False).ids
        best = 1e30
        for r in range(a.repeats):
            t0 = time.perf_counter()
            tk.encode(text, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        hf = len(data) / best / 1e6
        lines = text.splitlines(keepends=True)   # the usual use: many short texts, one call
        tk.encode_batch(lines[:1000])
        best = 1e30
        for r in range(a.repeats):
            t0 = time.perf_counter()
            tk.encode_batch(lines, add_special_tokens=False)
            best = min(best, time.perf_counter() - t0)
        hf_lines = len(data) / best / 1e6
        p = subprocess.run([a.bin, tj, tx, str(a.repeats)], capture_output=True, text=True)
        if p.returncode != 0:
            print("bench_bpe: %s" % p.stderr.strip())
            return 1
        mb, n_ids, n_bytes, secs = p.stdout.split()
        mhe = float(mb)
        # the same ids, or the timing means nothing
        ids_file = os.path.join(d, "ids")
        q = subprocess.run([os.path.join(ROOT, "build", "mhe"), "tokenize", "encode", "--tokenizer", tj, "--data", tx],
                           capture_output=True, text=True)
        same = q.returncode == 0 and [int(x) for x in q.stdout.split()] == want
        del ids_file
    print("%s; text: %.2f MB (%d ids, %.2f bytes per id); vocabulary %d; tokenizers %s" % (
          "byte-level BPE" if a.model == "bpe" else "WordPiece (uncased BERT)", len(data) / 1e6, len(want),
          len(data) / max(1, len(want)), tk.get_vocab_size(), tokenizers.__version__))
    print("ids equal: %s" % ("yes" if same else "NO (mhe build/mhe and tokenizers disagree)"))
    print("tokenizers encode, the text as one string:   %8.2f MB/s" % hf)
    print("tokenizers encode_batch of its %6d lines:   %8.2f MB/s (one thread)" % (len(lines), hf_lines))
    print("mhe_bpe_encode, the text as one string:      %8.2f MB/s" % mhe)
    print("ratio mhe / tokenizers: %.2f (one string), %.2f (lines)" % (mhe / hf, mhe / hf_lines))
    print("CPU: %s, %d logical CPUs; load average %s (a loaded machine makes these indicative only)" % (
        cpu_name(), os.cpu_count() or 0, " ".join("%.2f" % x for x in os.getloadavg())))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
