"""Inputs that are not what they seem, for `mhe import` and every command that reads or
writes a tokenizer: each file the import reads (config.json, model.safetensors,
tokenizer.json) and each --tokenizer as a dangling symlink, a symlink to itself, a loop of
two, a FIFO (refused, never waited on), a directory, a character device, a symlink to a
FIFO: refused by name (an absent tokenizer.json alone means "no tokenizer"); an output that
is one of the inputs (by path, symlink, hard link) refused with nothing changed; output
errors that name the path given, never a temporary name; the tokenize actions refusing the
flags they would ignore; --added without a limit short of --vocab; a --config vocab_size
checked against the tokenizer as the flag is; ids read as --ids reads them; import '' and
--mask-token on a GPT-2. Needs build/mhe only (the import cases use tests/fixtures/hf)."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import expect, run, state  # noqa: E402

GPT2 = os.path.join(REPO, "tests", "fixtures", "hf", "tf-5.24.0", "gpt2")
BERT = os.path.join(REPO, "tests", "fixtures", "hf", "tf-5.24.0", "bert-mlm")
TIMEOUT = 20   # a command waiting on a FIFO would pass it: a run past it counts as status -999


def oddities(d, target_ok):
    """(name, make(path)) for each kind of path that is not a regular file; make plants it at path"""
    def dangling(p):
        os.symlink(os.path.join(d, "nowhere", "x"), p)

    def selfloop(p):
        os.symlink(os.path.basename(p), p)

    def loop2(p):
        q = p + ".other"
        os.symlink(os.path.basename(q), p)
        os.symlink(os.path.basename(p), q)

    def fifo(p):
        os.mkfifo(p)

    def directory(p):
        os.mkdir(p)

    def chardev(p):
        os.symlink("/dev/null", p)

    def link_fifo(p):
        os.mkfifo(p + ".fifo")
        os.symlink(os.path.basename(p) + ".fifo", p)

    def link_dir(p):
        os.symlink(d, p)

    return [("a dangling symlink", dangling, "does not exist"), ("a symlink to itself", selfloop, "symlink loop"),
            ("a loop of two symlinks", loop2, "symlink loop"), ("a FIFO", fifo, "a FIFO"), ("a directory", directory, "directory"),
            ("a symlink to /dev/null", chardev, "character device"), ("a symlink to a FIFO", link_fifo, "a FIFO"),
            ("a symlink to a directory", link_dir, "directory")]


def import_inputs(d):
    """each file of the import directory replaced by each oddity"""
    n = 0
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        for what, make, word in oddities(d, False):
            n += 1
            src = os.path.join(d, "imp%d" % n)
            shutil.copytree(GPT2, src)
            p = os.path.join(src, name)
            os.remove(p)
            make(p)
            out = os.path.join(d, "imp%d.safetensors" % n)
            expect(["import", src, "-o", out], 1, [p, word, "nothing written"], "import with %s as %s" % (what, name),
                   absent=[out], timeout=TIMEOUT)
    # a symlink to the real file is followed; no tokenizer.json at all is no tokenizer
    src = os.path.join(d, "implinks")
    os.mkdir(src)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        os.symlink(os.path.join(GPT2, name), os.path.join(src, name))
    rc, _, err = run("import", src, "-o", src + ".safetensors")
    check(rc == 0 and "tokenizer.json attached" in err, "an import directory of symlinks to the files: %s" % err.strip())
    os.remove(os.path.join(src, "tokenizer.json"))
    rc, _, err = run("import", src, "-o", src + "2.safetensors")
    check(rc == 0 and "no tokenizer.json" in err, "no tokenizer.json at all: the model takes ids: %s" % err.strip())


def import_outputs(d):
    """the output is one of the files read, by path, symlink or hard link; errors name the path given"""
    src = os.path.join(d, "impout")
    shutil.copytree(GPT2, src)
    files = [os.path.join(src, f) for f in ("config.json", "model.safetensors", "tokenizer.json")]
    for f in files:
        expect(["import", src, "-o", f], 1, ["the output %s is the input" % f], "import -o %s" % os.path.basename(f), keep=files)
        link = os.path.join(d, "link-" + os.path.basename(f))
        os.symlink(f, link)
        expect(["import", src, "-o", link], 1, ["the output %s is the input" % link], "import -o a symlink to %s" % os.path.basename(f),
               keep=files + [link])
        hard = os.path.join(d, "hard-" + os.path.basename(f))
        os.link(f, hard)
        expect(["import", src, "-o", hard], 1, ["the output %s is the input" % hard], "import -o a hard link to %s" % os.path.basename(f),
               keep=files + [hard])
    rel = os.path.join(src, ".", "model.safetensors")
    expect(["import", src, "-o", rel], 1, ["is the input"], "import -o DIR/./model.safetensors", keep=files)
    for out in (os.path.join(d, "no-such-dir", "m.safetensors"), os.path.join(d, "no", "deeper", "m.safetensors")):
        _, err = expect(["import", src, "-o", out], 1, [out], "import -o into a missing directory", absent=[out])
        check(".tmp." not in err, "the message names %s, not a temporary name: %s" % (out, err.strip()))
    dangling = os.path.join(d, "out-dangling")
    os.symlink(os.path.join(d, "no-such-dir", "x.safetensors"), dangling)
    _, err = expect(["import", src, "-o", dangling], 1, [dangling, "a symlink to"], "import -o a symlink into a missing directory")
    check(".tmp." not in err, "the message names the symlink given: %s" % err.strip())
    expect(["import", "", "-o", os.path.join(d, "e.safetensors")], 2, ["''"], "import ''", absent=[os.path.join(d, "e.safetensors")])
    out = os.path.join(d, "mask.safetensors")
    expect(["import", src, "-o", out, "--mask-token", 5], 1, ["--mask-token", "decoder"], "import --mask-token on a GPT-2", absent=[out])
    expect(["import", BERT, "-o", out, "--mask-token", 300], 1, ["mask_token"], "import --mask-token past the vocabulary", absent=[out])


def tokenizer_files(d):
    """a byte-level BPE of mhe's text form, a tokenizer.json, a corpus"""
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("the cat sat on the mat; the dog sat on the log. " * 40)
    tok = os.path.join(d, "tok.txt")
    rc, _, err = run("tokenize", "train", "--data", corpus, "--vocab", 300, "--out", tok)
    check(rc == 0, "tokenize train: %s" % err)
    return corpus, tok, os.path.join(GPT2, "tokenizer.json")


def tokenizer_inputs(d, corpus, tok):
    """--tokenizer as each oddity, for every command that reads one"""
    ids = os.path.join(d, "ids.txt")
    with open(ids, "w") as f:
        f.write("1 2 3\n")
    n = 0
    for what, make, word in oddities(d, False):
        n += 1
        p = os.path.join(d, "odd%d" % n)
        make(p)
        out = os.path.join(d, "odd%d.out" % n)
        for args in (["init", "--tokenizer", p, "--out", out, "--n_layers", 1, "--d_model", 8, "--n_heads", 1],
                     ["train", "--tokenizer", p, "--data", corpus, "--out", out, "--steps", 1, "--n_layers", 1, "--d_model", 8,
                      "--n_heads", 1, "--seq_len", 8, "--batch", 1],
                     ["tokenize", "encode", "--tokenizer", p, "--data", corpus],
                     ["tokenize", "decode", "--tokenizer", p, "--data", ids],
                     ["tokenize", "convert", "--tokenizer", p, "--out", out]):
            expect(args, 1, [p, word], "%s %s --tokenizer %s" % (args[0], args[1] if args[0] == "tokenize" else "", what),
                   absent=[out], timeout=TIMEOUT)
    # --data of tokenize as a FIFO: refused, not waited on
    fifo = os.path.join(d, "data.fifo")
    os.mkfifo(fifo)
    expect(["tokenize", "encode", "--tokenizer", tok, "--data", fifo], 1, [fifo, "a FIFO"], "tokenize encode --data FIFO", timeout=TIMEOUT)
    expect(["tokenize", "train", "--data", fifo, "--vocab", 300, "--out", os.path.join(d, "t.out")], 1, [fifo, "a FIFO"],
           "tokenize train --data FIFO", timeout=TIMEOUT)


def tokenizer_outputs(d, corpus, tok, hf):
    """--out equal to --tokenizer (or --data) by path, symlink and hard link: refused, the input unchanged"""
    work = os.path.join(d, "same")
    os.mkdir(work)
    for src in (tok, hf):
        t = os.path.join(work, os.path.basename(src))
        shutil.copyfile(src, t)
        link = t + ".link"
        os.symlink(os.path.basename(t), link)
        hard = t + ".hard"
        os.link(t, hard)
        for out in (t, link, hard):
            for args in (["init", "--tokenizer", t, "--out", out, "--n_layers", 1, "--d_model", 8, "--n_heads", 1],
                         ["train", "--tokenizer", t, "--data", corpus, "--out", out, "--steps", 1, "--n_layers", 1, "--d_model", 8,
                          "--n_heads", 1, "--seq_len", 8, "--batch", 1],
                         ["tokenize", "convert", "--tokenizer", t, "--out", out]):
                expect(args, 1, ["the output %s is the input --tokenizer" % out], "%s --out %s of --tokenizer %s"
                       % (" ".join(args[:2]), os.path.basename(out), os.path.basename(t)), keep=[t, link, hard])
    c = os.path.join(work, "corpus.txt")
    shutil.copyfile(corpus, c)
    os.symlink("corpus.txt", c + ".link")
    for out in (c, c + ".link"):
        expect(["tokenize", "train", "--data", c, "--vocab", 300, "--out", out], 1, ["is the input --data"],
               "tokenize train --out its --data (%s)" % os.path.basename(out), keep=[c])
    # output errors name the path given
    for args in (["tokenize", "train", "--data", corpus, "--vocab", 300, "--out"], ["tokenize", "convert", "--tokenizer", tok, "--out"],
                 ["init", "--n_layers", 1, "--d_model", 8, "--n_heads", 1, "--out"]):
        out = os.path.join(d, "missing-dir", "x.out")
        _, err = expect(args + [out], 1, [out], "%s into a missing directory" % " ".join(args[:2]), absent=[out])
        check(".tmp." not in err, "%s: the message names %s, not a temporary name: %s" % (" ".join(args[:2]), out, err.strip()))


def tokenize_flags(d, corpus, tok):
    """each flag an action would not read is a usage error naming it"""
    ids = os.path.join(d, "ids2.txt")
    with open(ids, "w") as f:
        f.write("1 2\n")
    out = os.path.join(d, "flags.out")
    base = {"train": ["--data", corpus, "--vocab", 300, "--out", out], "convert": ["--tokenizer", tok, "--out", out],
            "encode": ["--data", corpus, "--tokenizer", tok], "decode": ["--data", ids, "--tokenizer", tok]}
    extra = {"vocab": ["--vocab", 400], "split": ["--split", "none"], "added": ["--added", "<x>"], "special": ["--special"],
             "tokenizer": ["--tokenizer", tok], "model": ["--model", os.path.join(d, "m.safetensors")], "out": ["--out", out],
             "data": ["--data", corpus]}
    takes = {"train": {"data", "vocab", "split", "added", "out"}, "convert": {"tokenizer", "out"},
             "encode": {"data", "tokenizer", "model", "special"}, "decode": {"data", "tokenizer", "model"}}
    for act, args in base.items():
        for flag, fa in extra.items():
            if flag in takes[act] or flag in args[::2]:
                continue
            expect(["tokenize", act] + args + fa, 2, ["tokenize %s does not use --%s" % (act, flag)], "tokenize %s --%s" % (act, flag),
                   absent=[out])


def added_tokens(d, corpus):
    """--added keeps every name; past --vocab it is refused, never cut"""
    for n, vocab, ok in ((300, 1000, True), (256, 600, True), (745, 1000, False), (1, 256, False), (744, 1000, True)):
        out = os.path.join(d, "added%d_%d.txt" % (n, vocab))
        names = " ".join("<t%d>" % i for i in range(n))
        rc, o, err = run("tokenize", "train", "--data", corpus, "--vocab", vocab, "--added", names, "--out", out)
        if ok:
            check(rc == 0 and "%d added" % n in o, "--added with %d names, --vocab %d: all kept: rc %d %s %s" % (n, vocab, rc, o.strip(), err.strip()))
            if rc == 0:
                enc = os.path.join(d, "enc.txt")
                with open(enc, "w") as f:
                    f.write("<t%d>" % (n - 1))
                rc2, o2, _ = run("tokenize", "encode", "--tokenizer", out, "--data", enc)
                check(rc2 == 0 and len(o2.split()) == 1, "the last added name is one token: %r" % o2)
        else:
            check(rc == 1 and "--added" in err and not os.path.exists(out), "--added with %d names past --vocab %d refused: rc %d %s" % (n, vocab, rc, err.strip()))


def vocab_agreement(d, corpus, tok):
    """vocab_size from --config is checked against the tokenizer as the flag is"""
    for v, ok in ((256, False), (299, False), (301, False), (300, True)):
        cfg = os.path.join(d, "v%d.cfg" % v)
        with open(cfg, "w") as f:
            f.write("vocab_size=%d\nd_model=8\nn_heads=1\nn_layers=1\n" % v)
        for how, args in (("--config", ["--config", cfg]), ("the flag", ["--vocab_size", v, "--d_model", 8, "--n_heads", 1, "--n_layers", 1])):
            out = os.path.join(d, "v%d.safetensors" % v)
            if os.path.exists(out):
                os.remove(out)
            rc, _, err = run("init", "--tokenizer", tok, "--out", out, *args)
            if ok:
                check(rc == 0, "vocab_size %d by %s with a 300-token tokenizer: %s" % (v, how, err.strip()))
            else:
                check(rc == 1 and "vocab_size %d" % v in err and "300 tokens" in err and not os.path.exists(out),
                      "vocab_size %d by %s against a 300-token tokenizer is refused, not replaced: rc %d %s" % (v, how, rc, err.strip()))


def id_parsing(d, tok):
    """tokenize decode reads ids as --ids does: any number of digits, the same messages"""
    cases = [("0000000104", True, ""), ("00000000000000000001 2", True, ""), ("1\r\n2\r\n", True, ""), ("\ufeff1 2", True, ""),
             ("  \n\t ", True, ""), ("299", True, ""), ("300", False, "300 (id 1) is outside"), ("1 99999999999999999999", False, "(id 2) is outside"),
             ("-1", False, "-1 (id 1) is outside"), ("1 -0000000002", False, "(id 2) is outside"), ("+5", False, "'+5' (id 1) is not a number"),
             ("1e3", False, "'1e3' (id 1) is not a number"), ("0x10", False, "'0x10' (id 1) is not a number"),
             ("1 2 3,", False, "'3,' (id 3) is not a number"), ("12abc", False, "is not a number"), ("-", False, "'-' (id 1) is not a number")]
    for i, (text, ok, word) in enumerate(cases):
        p = os.path.join(d, "dec%d.txt" % i)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        rc, o, err = run("tokenize", "decode", "--tokenizer", tok, "--data", p)
        if ok:
            check(rc == 0, "decode %r: rc %d %s" % (text, rc, err.strip()))
        else:
            check(rc == 1 and word in err and p in err, "decode %r: want %r naming the file, got rc %d %s" % (text, word, rc, err.strip()))
    rc, o, err = run("logits", "--model", os.path.join(d, "m8.safetensors"), "--ids", "00000000065 66")
    check(rc == 0, "--ids with leading zeros: %s" % err.strip())


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_inputs.py", why)
    if not hasattr(os, "mkfifo"):
        return skip("test_cli_inputs.py", "no FIFOs on this system")
    d = tmpdir("mhe_inputs_")
    rc, _, err = run("init", "--n_layers", 1, "--d_model", 8, "--n_heads", 1, "--max_seq_len", 8, "--out", os.path.join(d, "m8.safetensors"))
    check(rc == 0, "init: %s" % err)
    corpus, tok, hf = tokenizer_files(d)
    import_inputs(d)
    import_outputs(d)
    tokenizer_inputs(d, corpus, tok)
    tokenizer_outputs(d, corpus, tok, hf)
    tokenize_flags(d, corpus, tok)
    added_tokens(d, corpus)
    vocab_agreement(d, corpus, hf)
    id_parsing(d, hf)
    check(state(tok) is not None, "the tokenizer is still there")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
