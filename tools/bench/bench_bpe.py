#!/usr/bin/env python3
"""Byte-level BPE and WordPiece encoding speed: mhe (build/bench_bpe,
mhe_bpe_encode and mhe_bpe_encode_threads) against the Hugging Face
tokenizers package, in one run, on the same tokenizer.json and the same text.

    python3 tools/bench/bench_bpe.py [--model bpe,wordpiece,gpt2] [--threads 1,2] [--mb 4] [--repeats 5] [--markdown]

Tokenizers, each trained by tokenizers:
  bpe        a byte-level BPE of 8,000 tokens with GPT-2's pre-tokenisation and
             the full byte alphabet, on the repository's docs/*.md and
             examples/data/train.txt
  wordpiece  BertWordPieceTokenizer, uncased (as bert-base-uncased), 8,000
             tokens, on the same text
  gpt2       GPT-2's size: 50,257 tokens (256 bytes, 50,000 merges,
             <|endoftext|>), on local text (--corpus-mb megabytes of this
             Python's standard library, the text files of /usr/share/doc and
             the repository's docs and corpora); trained once and kept in
             build/bench/ (half a minute on two cores; --retrain trains it again)
The text is examples/data/valid.txt and the docs, repeated to --mb megabytes.

On one thread mhe_bpe_encode of the whole text is timed against tokenizers'
encode of it as one string (RAYON_NUM_THREADS=1); on N threads
mhe_bpe_encode_threads of the whole text (cut at lines, the same ids) against
encode_batch of the text's lines on N threads (RAYON_NUM_THREADS=N, its own
process), which is how tokenizers uses N cores; encode_batch on one thread is
shown too. Each figure is the best of --repeats timed runs after an untimed
one. mhe's ids of the whole text (build/mhe tokenize encode) are compared with
tokenizers' encode. Prints MB/s, the ratios, the CPU's name, the threads and
the load average: on a shared machine the numbers are only indicative.
Needs `make build/bench_bpe build/mhe` and `pip install tokenizers`."""
import argparse
import glob
import gzip
import json
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, "build", "bench")
GPT2_VOCAB, GPT2_MERGES = 50257, 50000

# run in a process of its own, RAYON_NUM_THREADS set before tokenizers starts its pool
TIMER = r'''
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
repeats, what = int(sys.argv[3]), sys.argv[4]
lines = text.splitlines(keepends=True)
def run():
    if what == "encode":
        tok.encode(text, add_special_tokens=False)
    else:
        tok.encode_batch(lines, add_special_tokens=False)
best = 1e30
for r in range(-1, repeats):
    t0 = time.perf_counter()
    run()
    t = time.perf_counter() - t0
    if r >= 0:
        best = min(best, t)
print(len(text.encode()) / best / 1e6, len(lines))
'''


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def local_corpus(limit):
    """[paths] of local text, in a fixed order, up to limit bytes: the stdlib's .py files, /usr/share/doc's
    text (gzip'd or not), the repository's docs and corpora"""
    files = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + sorted(glob.glob(os.path.join(ROOT, "examples", "data", "*.txt")))
    stdlib = sysconfig.get_paths()["stdlib"]
    for d, _, names in sorted(os.walk(stdlib)):
        if "site-packages" in d or "dist-packages" in d:
            continue
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".py")]
    for d, _, names in sorted(os.walk("/usr/share/doc")):
        files += [os.path.join(d, n) for n in sorted(names)]
    out, total = [], 0
    for p in files:
        try:
            raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
            raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        if b"\0" in raw or not raw:
            continue
        out.append(raw)
        total += len(raw)
        if total >= limit:
            break
    return out, total


def gpt2_size(a):
    """the cached tokenizer.json of GPT-2's size, trained here on local text when missing"""
    path = os.path.join(CACHE, "gpt2-%d.json" % GPT2_VOCAB)
    if os.path.exists(path) and not a.retrain:
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    import time
    texts, total = local_corpus(int(a.corpus_mb * 1e6))
    print("training a byte-level BPE of %d tokens on %.1f MB of local text (%d files)" % (GPT2_VOCAB, total / 1e6, len(texts)),
          flush=True)
    t0 = time.time()
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator((t.decode("utf-8") for t in texts), trainers.BpeTrainer(
        vocab_size=GPT2_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"],
        show_progress=False))
    os.makedirs(CACHE, exist_ok=True)
    tk.save(path)
    merges = len(json.load(open(path, encoding="utf-8"))["model"]["merges"])
    print("trained in %.0f s: %d tokens, %d merges -> %s" % (time.time() - t0, tk.get_vocab_size(), merges, path), flush=True)
    return path


def tokenizer(model, a, d):
    """the path of the tokenizer.json of model"""
    if model == "gpt2":
        return gpt2_size(a)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    train = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "examples", "data", "train.txt")]
    path = os.path.join(d, "%s.json" % model)
    if model == "bpe":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        tk.train(train, trainers.BpeTrainer(vocab_size=a.vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                            special_tokens=["<|endoftext|>"], show_progress=False))
        tk.save(path)
    else:
        from tokenizers import BertWordPieceTokenizer
        wp = BertWordPieceTokenizer(lowercase=True)
        wp.train(train, vocab_size=a.vocab, show_progress=False)
        wp.save(path)
    return path


def hf_speed(tj, tx, repeats, what, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([sys.executable, "-c", TIMER, tj, tx, str(repeats), what], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit("bench_bpe: tokenizers %s: %s" % (what, p.stderr.strip()[-400:]))
    mb, lines = p.stdout.split()
    return float(mb), int(lines)


def mhe_speed(a, tj, tx, threads):
    p = subprocess.run([a.bin, tj, tx, str(a.repeats), str(threads)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("bench_bpe: %s" % p.stderr.strip())
    return float(p.stdout.split()[0])


def bench(model, a, d, text, tx):
    from tokenizers import Tokenizer
    import tokenizers
    tj = tokenizer(model, a, d)
    tk = Tokenizer.from_file(tj)
    want = tk.encode(text, add_special_tokens=False).ids
    q = subprocess.run([os.path.join(ROOT, "build", "mhe"), "tokenize", "encode", "--tokenizer", tj, "--data", tx, "--threads", "1"],
                       capture_output=True, text=True)
    same = q.returncode == 0 and [int(x) for x in q.stdout.split()] == want
    for n in a.threads:   # the threaded path too
        if n > 1 and same:
            q = subprocess.run([os.path.join(ROOT, "build", "mhe"), "tokenize", "encode", "--tokenizer", tj, "--data", tx, "--threads", str(n)],
                               capture_output=True, text=True)
            same = q.returncode == 0 and [int(x) for x in q.stdout.split()] == want
    rows = []
    hf1, lines = hf_speed(tj, tx, a.repeats, "encode", 1)
    m1 = mhe_speed(a, tj, tx, 1)
    rows.append((1, "encode (one string)", hf1, m1))
    for n in a.threads:
        hf, _ = hf_speed(tj, tx, a.repeats, "batch", n)
        m = m1 if n == 1 else mhe_speed(a, tj, tx, n)
        rows.append((n, "encode_batch (%d lines)" % lines, hf, m))
    if model == "gpt2":
        name = "byte-level BPE of GPT-2's size, %d tokens (%d merges)" % (tk.get_vocab_size(), len(json.load(open(tj))["model"]["merges"]))
    else:
        name = ("byte-level BPE, %d tokens" if model == "bpe" else "WordPiece (uncased BERT), %d tokens") % tk.get_vocab_size()
    print("\n%s; text %.2f MB, %d ids (%.2f bytes an id); tokenizers %s; ids equal: %s" % (
        name, len(text.encode()) / 1e6, len(want), len(text.encode()) / max(1, len(want)), tokenizers.__version__,
        "yes" if same else "NO (build/mhe and tokenizers disagree)"))
    print("threads  tokenizers                       MB/s   mhe MB/s   mhe / tokenizers")
    for n, what, hf, m in rows:
        print("%7d  %-30s %7.2f   %8.2f   %6.2f" % (n, what, hf, m, m / hf))
    return name, same, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bpe,wordpiece,gpt2", help="comma-separated: bpe, wordpiece, gpt2")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts for encode_batch and mhe")
    ap.add_argument("--vocab", type=int, default=8000, help="bpe and wordpiece")
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--corpus-mb", type=float, default=40.0, help="gpt2: local text to train on")
    ap.add_argument("--retrain", action="store_true", help="gpt2: train again, not the cached file")
    ap.add_argument("--markdown", action="store_true", help="also print the results as a markdown table")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bench_bpe"))
    a = ap.parse_args()
    a.threads = [int(x) for x in a.threads.split(",")]
    models = a.model.split(",")
    try:
        import tokenizers  # noqa: F401
    except ImportError as e:
        print("bench_bpe: %s (pip install tokenizers)" % e)
        return 1
    for b in (a.bin, os.path.join(ROOT, "build", "mhe")):
        if not os.access(b, os.X_OK):
            print("bench_bpe: no %s (make build/bench_bpe build/mhe)" % b)
            return 1
    base = open(os.path.join(ROOT, "examples", "data", "valid.txt"), encoding="utf-8", errors="replace").read()
    base += "".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))))
    data = (base * (int(a.mb * 1e6 / len(base.encode())) + 1)).encode()[: int(a.mb * 1e6)]
    text = data.decode("utf-8", errors="ignore")
    results, ok = [], True
    with tempfile.TemporaryDirectory() as d:
        tx = os.path.join(d, "text.txt")
        with open(tx, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        for m in models:
            name, same, rows = bench(m, a, d, text, tx)
            results.append((name, rows))
            ok = ok and same
    machine = "%s, %d logical CPUs; load average %s" % (cpu_name(), os.cpu_count() or 0, " ".join("%.2f" % x for x in os.getloadavg()))
    print("\nCPU: %s (a loaded machine makes these indicative only)" % machine)
    if a.markdown:
        import tokenizers
        print("\n| tokenizer | threads | `tokenizers` %s | its MB/s | mhe MB/s | mhe / `tokenizers` |" % tokenizers.__version__)
        print("|---|---|---|---|---|---|")
        for name, rows in results:
            for n, what, hf, m in rows:
                call = "`encode`, one string" if what.startswith("encode (") else "`encode_batch` of lines"
                print("| %s | %d | %s | %.2f | %.2f | %.1f |" % (name, n, call, hf, m, m / hf))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
