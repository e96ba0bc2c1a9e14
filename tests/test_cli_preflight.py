"""Preflight, the task in the checkpoint, and config files with a byte-order mark
(README, Reliability: preflight). Everything `mhe train` can know before step 1
is checked before step 1, with the file and field named and nothing written:
the training and validation data of every task (lm on a decoder, a masked-LM
encoder and an encoder-decoder, cls, sr) against one window at the configured
lengths (each boundary both ways), labels the head cannot take, output paths,
and every setting a --resume checkpoint saved. The checkpoint records the task:
--resume continues it, another --task is refused, an older file without it is
taken as its head says (and says so). A UTF-8 byte-order mark starts a config
file harmlessly; anywhere else, or a UTF-16 one, it is refused by name. Needs
only python3 and build/mhe."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import expect, run  # noqa: E402

SMALL = ["--d_model", 16, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 32]
HASH = ["--embedding", "hash-pool", "--hash_bits", 24, "--hash_chunk", 6]


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def edit_meta(src, dst, changes):
    """copies checkpoint src to dst with metadata keys set (a value None removes the key)"""
    with open(src, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.setdefault("__metadata__", {})
    for k, v in changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def meta(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]).get("__metadata__", {})


def corpus(d):
    text = write(os.path.join(d, "text.txt"), "In the beginning God created the heaven and the earth. " * 40)
    tsv = write(os.path.join(d, "cls.tsv"), "".join("%d\tsome text number %d here\n" % (i % 3, i) for i in range(40)))
    return text, tsv


def short_data(d, text, tsv):
    """a file one token short of a window is refused before step 1, naming the flag and the file; one
    of exactly a window trains"""
    T, Ts = 16, 8
    run_ = ["--seq_len", T, "--batch", 2, "--steps", 300, "--eval_every", 300, "--log_every", 1]
    # (task name, model and task flags, the tokens a window needs, how a file of n tokens reads)
    kinds = [
        ("lm decoder", ["--task", "lm"], T + 1, lambda n: "x" * n),
        ("lm encoder (masked LM)", ["--arch", "encoder"], T, lambda n: "x" * n),
        ("lm encdec", ["--arch", "encdec", "--enc_layers", 1, "--src_len", Ts], Ts + T, lambda n: "x" * n),
        ("sr", ["--task", "sr"] + HASH, T, lambda n: " ".join(["word"] * (n - 1)) + "\n"),   # a line ends with a separator token
    ]
    for name, flags, need, make in kinds:
        train_data = tsv if name == "cls" else text
        for which in ("--valid", "--data"):
            short = write(os.path.join(d, "short.txt"), make(need - 1))
            out = os.path.join(d, "never.st")
            data = ["--data", train_data, "--valid", short] if which == "--valid" else ["--data", short]
            o, _ = expect(["train", *flags, *SMALL, *run_, *data, "--out", out], 1, [which, short, str(need - 1), "needs %d" % need],
                          "%s: %s one token short of a window" % (name, which), keep=[short, train_data], absent=[out])
            check("step " not in o, "%s: %s refused before step 1: %r" % (name, which, o[-200:]))
            exact = write(os.path.join(d, "exact.txt"), make(need))
            data = ["--data", train_data, "--valid", exact] if which == "--valid" else ["--data", exact]
            rc, o, err = run("train", *flags, *SMALL, "--seq_len", T, "--batch", 2, "--steps", 2, "--eval_every", 1, *data, "--out", out)
            check(rc == 0, "%s: %s of exactly one window trains: %s" % (name, which, err[-300:]))
            if os.path.exists(out):
                os.remove(out)
    # cls: labels the head cannot take, in either file; a model that has a head of 3 classes
    cls3 = os.path.join(d, "cls3.st")
    rc, _, err = run("train", "--task", "cls", "--arch", "encoder", *SMALL, "--data", tsv, "--out", cls3, "--steps", 2, "--seq_len", 16,
                     "--eval_every", 0)
    check(rc == 0, "cls: a 3-class model: %s" % err)
    wide = write(os.path.join(d, "wide.tsv"), "0\ta\n7\tb\n")
    for which, data in (("--valid", ["--data", tsv, "--valid", wide]), ("--data", ["--data", wide])):
        out = os.path.join(d, "never.st")
        expect(["train", "--task", "cls", "--model", cls3, *data, "--out", out, "--steps", 300, "--seq_len", 16, "--eval_every", 300],
               1, [which, wide, "labels up to 7", "n_classes 3"], "cls: %s with a label the head has not" % which,
               keep=[wide, cls3], absent=[out])


def outputs(d, text):
    """outputs that cannot be written are refused before the data is read"""
    missing = os.path.join(d, "no_such_dir", "out.st")
    expect(["train", *SMALL, "--data", text, "--out", missing, "--steps", 2], 1, [missing], "train --out in a missing directory",
           keep=[text], absent=[missing])
    # a regular file where a directory should be: refused for root too
    notdir = write(os.path.join(d, "plainfile"), "x")
    for flag in ("--out", "--dump-batches"):
        bad = os.path.join(notdir, "out.bin")
        args = ["--out", bad] if flag == "--out" else ["--out", os.path.join(d, "ok2.st"), "--dump-batches", bad]
        o, _ = expect(["train", *SMALL, "--data", text, "--steps", 2, *args], 1, [bad], "train %s under a regular file" % flag,
                      keep=[text, notdir], absent=[os.path.join(d, "ok2.st")])
        check("step " not in o, "train %s under a regular file: refused before step 1" % flag)
    ro = os.path.join(d, "ro")
    os.mkdir(ro)
    os.chmod(ro, 0o555)
    if os.access(ro, os.W_OK):   # root writes anyway: nothing to check there
        print("SKIP the read-only directory case: this user writes to a mode 555 directory")
    else:
        out = os.path.join(ro, "out.st")
        expect(["train", *SMALL, "--data", text, "--out", out, "--steps", 2], 1, [out], "train --out in a read-only directory",
               keep=[text], absent=[out])
        dump = os.path.join(ro, "dump.bin")
        ok = os.path.join(d, "ok.st")
        expect(["train", *SMALL, "--data", text, "--out", ok, "--steps", 2, "--dump-batches", dump], 1, [dump],
               "train --dump-batches in a read-only directory", keep=[text], absent=[dump, ok])
    os.chmod(ro, 0o755)


def saved_settings(d, text):
    """every saved train setting of a --resume file is checked before any data is read, named by its key"""
    ck = os.path.join(d, "lm.st")
    rc, _, err = run("train", *SMALL, "--data", text, "--out", ck, "--steps", 2, "--seq_len", 16, "--batch", 2, "--eval_every", 0)
    if not check(rc == 0, "an lm checkpoint: %s" % err):
        return
    bad = os.path.join(d, "bad.st")
    out = os.path.join(d, "resumed.st")
    for key, value, words in (("train.seq_len", "0", ["train.seq_len", "0"]), ("train.lr", "nan", ["train.lr", "nan"]),
                              ("train.schedule", "sideways", ["train.schedule", "sideways"]), ("train.batch", "two", ["train.batch", "two"]),
                              ("train.eps", "0", ["train.eps"]), ("train.mlm_prob", "2", ["train.mlm_prob"]),
                              ("train.min_lr", "5", ["min_lr", "lr", "saved"]), ("task", "poetry", ["task", "poetry"])):
        edit_meta(ck, bad, {key: value})
        o, _ = expect(["train", "--resume", bad, "--data", text, "--out", out, "--steps", 300], 1, [bad] + words,
                      "resume with the saved %s=%s" % (key, value), keep=[bad, text], absent=[out])
        check("step " not in o, "resume with the saved %s=%s: refused before step 1" % (key, value))
    # a flag given now overrides a saved setting, but a corrupt one is refused all the same
    edit_meta(ck, bad, {"train.lr": "nan"})
    expect(["train", "--resume", bad, "--data", text, "--out", out, "--steps", 300, "--lr", "0.001"], 1, [bad, "train.lr", "nan"],
           "resume with a corrupt saved lr and --lr given", keep=[bad, text], absent=[out])
    edit_meta(ck, bad, {"train.min_lr": "5"})
    rc, _, err = run("train", "--resume", bad, "--data", text, "--out", out, "--steps", 4, "--min_lr", "0")
    check(rc == 0, "resume with a saved min_lr above lr and --min_lr 0 given: %s" % err)


def task_saved(d, text, tsv):
    """--resume continues the saved task; another --task is refused; an older file is taken as its head says"""
    words = write(os.path.join(d, "words.txt"), "alpha beta gamma delta epsilon zeta eta theta\n" * 30)
    cks = {}
    for task, flags, data in (("lm", [], text), ("cls", ["--arch", "encoder"], tsv), ("sr", HASH, words),
                              ("lm-encoder", ["--arch", "encoder"], text)):
        ck = os.path.join(d, "task_%s.st" % task)
        t = task.split("-")[0]
        rc, out, err = run("train", "--task", t, *flags, *SMALL, "--data", data, "--out", ck, "--steps", 2, "--seq_len", 16, "--eval_every", 0)
        if not check(rc == 0 and meta(ck).get("task") == t, "--task %s: the checkpoint records it: rc %d, %s %s" % (task, rc, meta(ck).get("task") if rc == 0 else "", err)):
            continue
        cks[task] = (ck, data)
        # resumed without --task: the saved task goes on (a cls model as an MLM would have failed or lost its head)
        res = os.path.join(d, "res_%s.st" % task)
        rc, out, err = run("train", "--resume", ck, "--data", data, "--out", res, "--steps", 4)
        check(rc == 0 and meta(res).get("task") == t and meta(res).get("step") == "4", "--task %s resumed without --task: %s" % (task, err[-300:]))
        mark = {"lm": "train tokens,", "cls": "training examples", "sr": "train word tokens"}[t]
        check(mark in out, "--task %s resumed as %s: %r" % (task, t, [ln for ln in out.splitlines() if ln.startswith("data:")]))
        # the same --task again is fine; any other is refused, naming both
        rc, _, err = run("train", "--resume", ck, "--task", t, "--data", data, "--out", res, "--steps", 5)
        check(rc == 0, "--task %s resumed with --task %s: %s" % (task, t, err[-300:]))
        for other in ("lm", "cls", "sr"):
            if other != t:
                expect(["train", "--resume", ck, "--task", other, "--data", data, "--out", ck, "--steps", 9], 1,
                       ["--task %s" % other, "--task %s run" % t, ck, "refused"], "a --task %s checkpoint resumed as --task %s" % (t, other),
                       keep=[ck, data])
    # a file from before the task was saved: its head says, and the note says what was assumed
    for task, want in (("cls", "cls"), ("sr", "sr"), ("lm", "lm"), ("lm-encoder", "lm")):
        if task not in cks:
            continue
        ck, data = cks[task]
        old = os.path.join(d, "old_%s.st" % task)
        edit_meta(ck, old, {"task": None})
        res = os.path.join(d, "oldres_%s.st" % task)
        rc, out, err = run("train", "--resume", old, "--data", data, "--out", res, "--steps", 4)
        check(rc == 0 and "does not record its task" in err and "--task %s" % want in err and meta(res).get("task") == want,
              "an older %s checkpoint resumed: rc %d, %r" % (task, rc, err[-300:]))
        if task == "lm":   # --task given for an older file is taken as it is
            rc, out, err = run("train", "--resume", old, "--task", "lm", "--data", data, "--out", res, "--steps", 4)
            check(rc == 0 and "does not record" not in err, "an older lm checkpoint with --task lm: %s" % err[-300:])


def bom(d, text):
    """a UTF-8 BOM starts a config file harmlessly; in the middle, or a UTF-16 BOM, is refused by name"""
    body = "d_model=16\nn_heads=2\nn_layers=1\nmax_seq_len=32\n"
    plain = os.path.join(d, "plain.st")
    rc, _, err = run("init", "--config", write(os.path.join(d, "plain.cfg"), body), "--out", plain)
    check(rc == 0, "init from a plain config: %s" % err)
    for name, data in (("BOM", b"\xef\xbb\xbf" + body.encode()), ("BOM and CRLF", b"\xef\xbb\xbf" + body.replace("\n", "\r\n").encode()),
                       ("BOM and a comment first", b"\xef\xbb\xbf# a model\n" + body.encode())):
        cfg = write(os.path.join(d, "bom.cfg"), data)
        out = os.path.join(d, "bom.st")
        rc, _, err = run("init", "--config", cfg, "--out", out)
        with open(plain, "rb") as f, open(out, "rb") if rc == 0 else open(plain, "rb") as g:
            same = rc == 0 and f.read() == g.read()
        check(same, "init from a config with a %s: the same model as without (rc %d %s)" % (name, rc, err))
    only = write(os.path.join(d, "only.cfg"), b"\xef\xbb\xbf")
    rc, _, err = run("init", "--config", only, "--out", os.path.join(d, "only.st"))
    check(rc == 0, "a config of a BOM alone is an empty config: %s" % err)
    ck = os.path.join(d, "bomtrain.st")
    rc, _, err = run("train", "--config", write(os.path.join(d, "bom.cfg"), b"\xef\xbb\xbf" + body.encode()), "--data", text, "--out", ck,
                     "--steps", 2, "--seq_len", 16, "--eval_every", 0)
    check(rc == 0 and meta(ck).get("d_model") == "16", "train --config with a BOM: %s" % err)
    lines = body.splitlines()
    for name, data, line in (("line 2", "\n".join(lines[:1] + ["\ufeff" + lines[1]] + lines[2:]), 2),
                             ("in a value", "d_model=1\ufeff6\n", 1),
                             ("a second BOM at the start", "\ufeff\ufeff" + body, 1),
                             ("the last line", body + "\ufeff\n", 5)):
        cfg = write(os.path.join(d, "mid.cfg"), data.encode("utf-8") if not data.startswith("\ufeff\ufeff") else b"\xef\xbb\xbf" + data[1:].encode())
        out = os.path.join(d, "mid.st")
        expect(["init", "--config", cfg, "--out", out], 1, [cfg, "line %d" % line, "byte-order mark"], "a BOM %s of a config" % name,
               keep=[cfg], absent=[out])
    for name, data in (("UTF-16 LE", b"\xff\xfe" + body.encode("utf-16-le")), ("UTF-16 BE", b"\xfe\xff" + body.encode("utf-16-be"))):
        cfg = write(os.path.join(d, "u16.cfg"), data)
        out = os.path.join(d, "u16.st")
        expect(["init", "--config", cfg, "--out", out], 1, [cfg], "a %s config" % name, keep=[cfg], absent=[out])


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_preflight.py", why)
    d = tmpdir("mhe_cli_preflight_")
    text, tsv = corpus(d)
    short_data(d, text, tsv)
    outputs(d, text)
    saved_settings(d, text)
    task_saved(d, text, tsv)
    bom(d, text)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
