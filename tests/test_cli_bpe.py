"""Byte-level BPE through the tool (mhe tokenize; init/train --tokenizer; eval
and generate with a checkpoint's tokenizer), against the Hugging Face
`tokenizers` package where it is installed (the comparison is skipped, with a
SKIP line, without it; the rest needs only python3 and build/mhe).

  - mhe's own BPE: decode(encode(x)) = x on random bytes (invalid UTF-8, NUL);
    encode --threads 3 gives the ids of one thread on 300 KB of lines
  - tokenizers trains byte-level BPEs on the repository's docs; mhe reads their
    tokenizer.json ("a b" merges, [a, b] merges rewritten from them, add_prefix_space,
    an alphabet of only the bytes seen) and gives the same ids as tokenizer.encode
    on held-out docs and on unusual text (emoji, CJK, combining marks, numbers,
    contractions, runs of spaces and newlines, Unicode spaces); convert writes
    mhe's form, which encodes the same
  - every task trains with --tokenizer; the checkpoint carries it, eval and
    generate use it
  - bad input: a truncated tokenizer file, repeated and out-of-range merges, a
    checkpoint whose tokenizer.md5 does not match, vocab_size against the tokenizer,
    --tokenizer with a loaded model or a word model: a clear error, nothing written
(mhe.h's Unicode class table, every code point: tests/test_unicode.py)"""
import glob
import json
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, RESULTS, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import expect, run  # noqa: E402

SMALL = ["--d_model", 16, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 32, "--batch", 2, "--seq_len", 16, "--steps", 2, "--quiet"]

UNUSUAL = [
    "Hello world! It's a test, isn't it? We'll see; they're here, I've been, you'd know, I'M LOUD. I'm fine; 'tis y'all's.",
    "emoji \U0001F389\U0001F44D\U0001F3FD and flags \U0001F1EB\U0001F1F7 zwj \U0001F468\u200D\U0001F469\u200D\U0001F467",
    "\u4e16\u754c \u4f60\u597d\uff0c\u4e16\u754c\uff01 \u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4",
    "combining e\u0301 a\u0308 n\u0303 \u1e9b\u0323 and precomposed \u00e9\u00e4\u00f1",
    "numbers 3.14159 1,000,000 42nd \u0661\u0662\u0663 \u00bd \u2167 \uff11\uff12",
    "spaces   three, tab\there, \n\n\nnewlines\r\n and trailing   \n   ",
    "unicode spaces a\u00a0b\u3000c\u2003d\u0085e \x1c\x1d f\u200bg",
    "  leading spaces and 'quotes' \"double\" `back` 's 't 're",
    "punctuation!!! ??? ... --- *** ((nested)) [brackets] {braces} <tags> @#$%^&",
    "code: for (i = 0; i < n; i++) { x[i] += y[i] * 2; } // comment",
]


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def mhe_bytes(*args):
    """(exit status, stdout bytes, stderr text)"""
    p = subprocess.run([MHE] + [str(a) for a in args], capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def mhe_ids(tok, path):
    code, out, err = run("tokenize", "encode", "--tokenizer", tok, "--data", path)
    if code != 0:
        return None, err
    return [int(x) for x in out.split()], err


def own_bpe(d):
    """mhe's BPE: trained, then a round trip of random bytes"""
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "wb") as f:
        for p in sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))[:4]:
            f.write(open(p, "rb").read())
    tok = os.path.join(d, "own.tok")
    code, out, err = run("tokenize", "train", "--data", corpus, "--vocab", 600, "--out", tok, "--added", "<eos> <mask>")
    check(code == 0 and "600 tokens" in out, "tokenize train: %r %r" % (out, err))
    rng = random.Random(7)
    ok = True
    for trial in range(6):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
        if trial % 2:
            data += "x<eos>y caf\u00e9 \xff\xfe".encode("latin-1", "replace")
        src = write(os.path.join(d, "rand.bin"), data)
        ids, err = mhe_ids(tok, src)
        if ids is None:
            ok = False
            break
        write(os.path.join(d, "rand.ids"), " ".join(map(str, ids)))
        code, back, err = mhe_bytes("tokenize", "decode", "--tokenizer", tok, "--data", os.path.join(d, "rand.ids"))
        ok = ok and code == 0 and back == data and all(0 <= i < 600 for i in ids)
    check(ok, "decode(encode(x)) = x on random bytes with mhe's BPE")
    threads(d, tok, rng)
    return corpus, tok


def threads(d, tok, rng):
    """encode --threads: the text cut at lines, the same ids as one thread"""
    parts = ["the", " cat", "\n", "\n\n\n", "\r\n", "  ", "\t", "<eos>", "\u3000", "caf\u00e9", "<mask>\n", " \n ", "it's", "\xff"]
    data = write(os.path.join(d, "long.txt"), "".join(rng.choice(parts) for _ in range(150000)).encode("utf-8", "surrogateescape"))
    code, one, err = run("tokenize", "encode", "--tokenizer", tok, "--data", data, "--threads", 1)
    check(code == 0 and len(one.split()) > 50000, "encode --threads 1 of %d bytes: %s" % (os.path.getsize(data), err.strip()))
    code, many, err = run("tokenize", "encode", "--tokenizer", tok, "--data", data, "--threads", 3)
    if code != 0 and "without OpenMP" in err:
        print("SKIP encode --threads 3: %s" % err.strip())
        RESULTS.skipped += 1
    else:
        check(code == 0 and many == one, "encode --threads 3: the ids of one thread (%d and %d ids) %s" % (len(many.split()), len(one.split()), err.strip()))
    expect(["tokenize", "decode", "--tokenizer", tok, "--data", data, "--threads", 1], 2, ["does not use --threads"], "decode --threads")


def hf_compare(d):
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as e:
        print("SKIP the tokenizers comparison: %s (pip install tokenizers)" % e)
        return 1
    docs = sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    train, held = docs[:-3], docs[-3:]
    variants = [
        ("alphabet", dict(add_prefix_space=False), True, 1500),
        ("prefix-space, seen bytes only", dict(add_prefix_space=True), False, 800),
    ]
    texts = [open(p, encoding="utf-8").read() for p in held] + UNUSUAL + ["the model; he model; bring the mhe m zqxjing<sep>the<sep>"]
    for name, pre, alphabet, vocab in variants:
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(**pre)
        tk.decoder = decoders.ByteLevel()
        kw = dict(vocab_size=vocab, special_tokens=["<|endoftext|>", "<pad>"], show_progress=False)
        if alphabet:
            kw["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
        tk.train(train, trainers.BpeTrainer(**kw))
        if alphabet:   # added tokens in both passes: special ("normalized": false) and not (true), in the vocabulary or not
            tk.add_special_tokens(["he m", "<sep>"])
            tk.add_tokens(["the", "ing", "zqxj"])
        path = os.path.join(d, "tokenizer.json")
        tk.save(path)
        if alphabet:
            tk.save(os.path.join(d, "full_keep.json"))
            full_tk = tk
        forms = [("'a b' merges", path)]
        j = json.load(open(path, encoding="utf-8"))
        if j["model"]["merges"] and isinstance(j["model"]["merges"][0], str):
            j["model"]["merges"] = [m.split(" ") for m in j["model"]["merges"]]
            pairs = os.path.join(d, "pairs.json")
            json.dump(j, open(pairs, "w", encoding="utf-8"), ensure_ascii=False)
            forms.append(("[a, b] merges", pairs))
        conv = os.path.join(d, "conv%d.tok" % alphabet)
        code, out, err = run("tokenize", "convert", "--tokenizer", path, "--out", conv)
        check(code == 0, "%s: convert: %s" % (name, err))
        forms.append(("converted to mhe's form", conv))
        for form, tpath in forms:
            bad = []
            for k, text in enumerate(texts + ["<|endoftext|>".join(UNUSUAL[:3])]):
                src = write(os.path.join(d, "held.txt"), text)
                want = tk.encode(text).ids
                got, err = mhe_ids(tpath, src)
                if got != want:
                    bad.append((k, err[-200:], (got or [])[:12], want[:12]))
            check(not bad, "%s, %s: the ids of tokenizers on %d texts; differing: %r" % (name, form, len(texts) + 1, bad[:2]))
    # invalid UTF-8 (tokenizers takes only str): mhe's ids decode to the same bytes
    data = "valid \u00e9 ".encode() + b"\xff\xfe\xc3 \xe4\xb8 \xf0\x9f\x8e" + "\U0001F389".encode() + b"\x00\x80 end"
    src = write(os.path.join(d, "inv.bin"), data)
    full, full_json = os.path.join(d, "conv1.tok"), os.path.join(d, "full.json")
    os.rename(os.path.join(d, "full_keep.json"), full_json)
    ids, err = mhe_ids(full, src)
    ok = ids is not None
    if ok:
        write(os.path.join(d, "inv.ids"), " ".join(map(str, ids)))
        code, back, err = mhe_bytes("tokenize", "decode", "--tokenizer", full_json, "--data", os.path.join(d, "inv.ids"))
        ok = code == 0 and back == data
        # and tokenizers decodes the ids of the valid part to the same text
        vt = "valid \u00e9 \U0001F389 end"
        vids, _ = mhe_ids(full_json, write(os.path.join(d, "v.txt"), vt))
        ok = ok and full_tk.decode(vids) == vt
    check(ok, "invalid UTF-8 through a tokenizer.json vocabulary: decode(encode(x)) = x")
    return 0


def models_with_tokenizer(d, corpus, tok):
    held = write(os.path.join(d, "held.txt"), "the model reads tokens; it's a test of 12 things.\n" * 20)
    cls = write(os.path.join(d, "cls.tsv"), "".join("%d\tsome text number %d here\n" % (i % 2, i) for i in range(20)))
    lm = os.path.join(d, "lm.safetensors")
    code, out, err = run("train", "--data", corpus, "--tokenizer", tok, "--out", lm, *SMALL)
    check(code == 0, "train lm --tokenizer: %s" % err)
    code, out, err = run("eval", "--model", lm, "--data", held, "--batches", 1)
    check(code == 0 and "bits/token" in out, "eval reads the checkpoint's tokenizer: %r %s" % (out, err))
    code, out, err = mhe_bytes("generate", "--model", lm, "--prompt", "the model", "--n", 4, "--temperature", 0)
    check(code == 0 and out.startswith(b"the model"), "generate: the prompt through the tokenizer and back: %r %s" % (out[:40], err))
    code, out, err = run("tokenize", "encode", "--model", lm, "--data", held)
    code2, out2, _ = run("tokenize", "encode", "--tokenizer", tok, "--data", held)
    check(code == 0 and out == out2, "tokenize encode --model: the checkpoint's tokenizer is the file's")
    for arch, extra in (("encoder", []), ("encdec", ["--enc_layers", 1, "--src_len", 8])):
        out_p = os.path.join(d, arch + ".safetensors")
        code, out, err = run("train", "--data", corpus, "--tokenizer", tok, "--out", out_p, "--arch", arch, *(SMALL + extra))
        check(code == 0, "train %s --tokenizer: %s" % (arch, err))
    code, out, err = mhe_bytes("generate", "--model", os.path.join(d, "encdec.safetensors"), "--source", "the model reads", "--n", 3)
    check(code == 0, "generate from an encoder-decoder with a tokenizer: %s" % err)
    cm = os.path.join(d, "cls.safetensors")
    code, out, err = run("train", "--task", "cls", "--data", cls, "--tokenizer", tok, "--out", cm, "--arch", "encoder", *SMALL)
    check(code == 0, "train --task cls --tokenizer: %s" % err)
    code, out, err = run("eval", "--task", "cls", "--model", cm, "--data", cls)
    check(code == 0 and "accuracy" in out, "eval --task cls with the tokenizer: %s" % err)
    ft = os.path.join(d, "ft.safetensors")
    code, out, err = run("train", "--task", "cls", "--model", os.path.join(d, "encoder.safetensors"), "--data", cls, "--out", ft,
                         "--steps", 2, "--batch", 2, "--seq_len", 16, "--quiet")
    code2, out2, _ = run("inspect", ft)
    check(code == 0 and "bpe.tokenizer" in out2, "fine-tuning keeps the tokenizer: %s" % err)
    return lm


def bad_input(d, corpus, tok, lm):
    text = open(tok, "rb").read()
    trunc = write(os.path.join(d, "trunc.tok"), text[: len(text) // 2])
    out = os.path.join(d, "never.safetensors")
    expect(["tokenize", "encode", "--tokenizer", trunc, "--data", corpus], 1, ["trunc.tok", "truncated"], "a truncated tokenizer")
    expect(["train", "--data", corpus, "--tokenizer", trunc, "--out", out] + SMALL, 1, ["truncated"], "train with a truncated tokenizer",
           absent=[out])
    lines = text.decode().split("\n")
    m = lines.index(next(x for x in lines if x.startswith("merges ")))
    dup = list(lines)
    dup[m + 2] = dup[m + 1]
    dup_p = write(os.path.join(d, "dup.tok"), "\n".join(dup))
    expect(["tokenize", "encode", "--tokenizer", dup_p, "--data", corpus], 1, ["merge 1 repeats merge 0"], "a repeated merge")
    oor = list(lines)
    oor[m + 1] = "1 2 99999"
    oor_p = write(os.path.join(d, "oor.tok"), "\n".join(oor))
    expect(["tokenize", "encode", "--tokenizer", oor_p, "--data", corpus], 1, ["merge 0", "ids in 0..599"], "an out-of-range merge")
    hf = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b", "a b"]}, "pre_tokenizer": {"type": "ByteLevel"}}
    hf_p = write(os.path.join(d, "dup.json"), json.dumps(hf))
    expect(["tokenize", "convert", "--tokenizer", hf_p, "--out", out], 1, ["model.merges", "repeats"], "tokenizer.json with a repeated merge",
           absent=[out])
    hf["model"]["merges"] = ["a c"]
    write(hf_p, json.dumps(hf))
    expect(["tokenize", "convert", "--tokenizer", hf_p, "--out", out], 1, ["model.merges[0]", "'c' is not in model.vocab"],
           "tokenizer.json with a merge of an unknown token", absent=[out])
    write(hf_p, json.dumps(hf)[:-9])
    expect(["tokenize", "convert", "--tokenizer", hf_p, "--out", out], 1, ["tokenizer.json", "end of file"], "a truncated tokenizer.json",
           absent=[out])
    # the checkpoint's tokenizer.md5 against its tensor
    raw = open(lm, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head["__metadata__"]["tokenizer.md5"] = "0" * 32
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    bad = write(os.path.join(d, "badmd5.safetensors"), struct.pack("<Q", len(h)) + h + raw[8 + n:])
    expect(["eval", "--model", bad, "--data", corpus, "--batches", 1], 1, ["bpe.tokenizer", "tokenizer.md5", "MD5"],
           "a tokenizer that does not match the checkpoint's MD5")
    expect(["train", "--data", corpus, "--tokenizer", tok, "--vocab_size", 300, "--out", out] + SMALL, 1,
           ["vocab_size 300", "600 tokens"], "vocab_size against the tokenizer", absent=[out])
    expect(["train", "--data", corpus, "--model", lm, "--tokenizer", tok, "--out", out, "--steps", 1], 2, ["--tokenizer", "brings its own"],
           "--tokenizer with a loaded model", absent=[out])
    expect(["train", "--data", corpus, "--tokenizer", tok, "--embedding", "hash-emb", "--out", out] + SMALL, 1, ["word model"],
           "--tokenizer with a word model", absent=[out])
    expect(["train", "--task", "sr", "--data", corpus, "--tokenizer", tok, "--out", out] + SMALL, 1, ["word model"],
           "--tokenizer with --task sr", absent=[out])
    ids = write(os.path.join(d, "bad.ids"), "1 2 600")
    expect(["tokenize", "decode", "--tokenizer", tok, "--data", ids], 1, ["bad.ids: 600 (id 3) is outside the tokenizer's ids [0, 600)"], "decode of an id outside the vocabulary")


def byte_text_guard(d, corpus):
    """text into a model whose vocabulary is far past the bytes and which has no tokenizer (an
    imported GPT-2 without its tokenizer.json): refused by every command that reads text, never
    read as ids 0..255 of it; token ids still work, and a byte model with a [MASK] id does not trip it"""
    big = os.path.join(d, "v1000.safetensors")
    code, _, err = run("init", "--out", big, "--vocab_size", 1000, "--d_model", 16, "--n_heads", 2, "--n_layers", 1,
                       "--max_seq_len", 32)
    check(code == 0, "init of a 1000-id model without a tokenizer: %s" % err[-200:])
    out = os.path.join(d, "never2.safetensors")
    words = ["1000 token ids", "no tokenizer", "refused"]
    expect(["train", "--model", big, "--data", corpus, "--out", out, "--steps", 1, "--quiet"], 1, words,
           "train: byte text into a 1000-id model", keep=[big], absent=[out])
    expect(["train", "--data", corpus, "--vocab_size", 1000, "--out", out] + SMALL, 1, words,
           "train: a new 1000-id model on byte text", absent=[out])
    expect(["eval", "--model", big, "--data", corpus], 1, words, "eval: byte text into a 1000-id model")
    sets = write(os.path.join(d, "sets.txt"), "1\tgood\n0\tbad\n1\tfine\n0\tpoor\n")
    _, err = expect(["eval", "--task", "cls", "--model", big, "--data", sets], 1, words, "eval --task cls: byte text sets")
    check(err.count("mhe: ") == 1, "eval --task cls: the refusal is the one message, nothing evaluated after it: %r" % err)
    expect(["generate", "--model", big, "--prompt", "hello", "--n", 3], 1, words, "generate: a text prompt")
    code, out_ids, err = run("generate", "--model", big, "--ids", "5 6", "--n", 3)
    got = out_ids.split()[:5] if code == 0 else []
    check(code == 0 and len(got) == 5 and got[:2] == ["5", "6"] and all(0 <= int(x) < 1000 for x in got),
          "generate --ids into a 1000-id model: %r %s" % (out_ids[:80], err[-200:]))
    mlm = os.path.join(d, "mlm257.safetensors")
    code, _, err = run("train", "--task", "lm", "--arch", "encoder", "--data", corpus, "--out", mlm, *SMALL)
    check(code == 0, "a byte encoder (masked LM: a [MASK] id past the bytes) still reads text: %s" % err[-300:])


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_bpe.py", why)
    d = tmpdir("mhe_bpe_")
    corpus, tok = own_bpe(d)
    lm = models_with_tokenizer(d, corpus, tok)
    bad_input(d, corpus, tok, lm)
    byte_text_guard(d, corpus)
    RESULTS.skipped += hf_compare(d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
