"""The mhe tool on bad input: every mistake gives one clear message and a
non-zero exit, and no checkpoint already on disk is damaged. Also the happy
path: init -> train (with resume) -> eval -> generate -> inspect, and --help
for every command. Needs only python3 and build/mhe."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, finish, mhe_missing, run_mhe, skip, tmpdir  # noqa: E402


def run(*args):
    return run_mhe(*args, timeout=600)


def expect_error(args, words, what):
    rc, out, err = run(*args)
    ok = rc != 0 and "mhe:" in err and all(w in err for w in words) and "Segmentation" not in err
    check(ok, "%s: rc %d, stderr %r" % (what, rc, err.strip()[-300:]))


def words_cli(d, small, tc, text, cls_tr, cls_va):
    """Word models: S+R pre-training, eval, fine-tuning with a new head, the hash
    command, the grad word format, and every refusal."""
    sr = os.path.join(d, "sr.safetensors")
    vt = os.path.join(d, "valid_words.txt")
    with open(vt, "w") as f:
        f.write("Grace be unto you, and peace.\n\nWalking zebras!\n" * 10)
    hp = ["--embedding", "hash-pool", "--hash", "lsh", "--lsh_dim", 500, "--hash_bits", 40, "--hash_chunk", 6]
    rc, out, err = run("train", "--task", "sr", *hp, *small, "--data", text, "--valid", vt, "--out", sr,
                       "--steps", 4, "--batch", 2, "--seq_len", 16, "--eval_every", 2, "--log_every", 1)
    check(rc == 0 and "arch=encoder" in out and "token_head=sr" in out and "val S+R loss" in out and "MCC" in out
          and "embedding parameters: " in out and os.path.exists(sr), "S+R training: %s %s" % (out[-400:], err))
    rc, out, err = run("train", "--task", "sr", "--resume", sr, "--data", text, "--out", sr, "--steps", 6, "--eval_every", 0)
    check(rc == 0, "S+R resume: %s" % err)
    rc, out, err = run("eval", "--task", "sr", "--model", sr, "--data", vt, "--seq_len", 16, "--batch", 2)
    check(rc == 0 and "S+R loss" in out and "accuracy" in out, "S+R eval: %s %s" % (out, err))
    # a word never seen in training embeds; case folds; the bits are the model's own
    rc, out, err = run("hash", "--model", sr, "Zebra zebra, quantum")
    lines = out.splitlines()
    check(rc == 0 and len(lines) == 4 and lines[0].split("\t")[0] == "zebra" and lines[0].split("\t")[1] == lines[1].split("\t")[1]
          and lines[0].split("\t")[1].startswith("bits ") and len(lines[0].split(" ")[-1]) == 10, "hash: %r %s" % (out, err))
    expect_error(["hash", "--model", os.path.join(d, "m.safetensors"), "the"], ["byte tokens"], "hash on a byte model")
    expect_error(["generate", "--model", sr], ["decoder"], "generate from a hash encoder")
    dec = os.path.join(d, "hdec.st")
    rc, out, err = run("init", "--embedding", "hash-add", "--hash_bits", 16, "--token_head", "sr", *small, "--out", dec)
    check(rc == 0, "hash-embedding decoder: %s" % err)
    expect_error(["generate", "--model", dec], ["nothing to generate", "vocabulary"], "generate from a hash decoder")
    expect_error(["eval", "--model", dec, "--data", text], ["S+R head"], "LM eval of an S+R model")
    expect_error(["train", "--model", dec, "--data", text, "--out", os.path.join(d, "y.st")] + tc, ["token_head=sr", "--task sr"], "LM training of an S+R model")
    # fine-tuning: the pre-trained model gets a new classification head, words as tokens
    ft = os.path.join(d, "ft.safetensors")
    rc, out, err = run("train", "--task", "cls", "--model", sr, "--data", cls_tr, "--valid", cls_va, "--out", ft,
                       "--steps", 4, "--batch", 4, "--seq_len", 16, "--eval_every", 2, "--log_every", 1)
    check(rc == 0 and "new classification head of 3 classes" in out and "(word tokens)" in out and "accuracy" in out, "fine-tune: %s %s" % (out[-300:], err))
    rc, out, err = run("eval", "--task", "cls", "--model", ft, "--data", cls_va, "--seq_len", 16)
    check(rc == 0 and "(2 examples)" in out, "fine-tuned eval: %s %s" % (out, err))
    # the word vocabulary baseline
    voc = os.path.join(d, "voc.st")
    rc, out, err = run("train", "--task", "sr", "--words", 1, "--vocab_size", 30, *small, "--data", text, "--out", voc, *tc)
    check(rc == 0 and "word vocabulary: the 9 most frequent of 9 word types" in out, "vocab S+R: %s %s" % (out[-300:], err))
    rc, out, err = run("hash", "--model", voc, "god zebra")
    check(rc == 0 and "god\tid " in out and "zebra\tid 1" in out, "vocab hash: unseen word is <unk>: %r" % out)
    expect_error(["train", "--task", "sr", "--model", os.path.join(d, "m.safetensors"), "--data", text, "--out", voc] + tc,
                 ["byte tokens"], "S+R on a byte model")
    # config refusals and word-state needs
    expect_error(["init", "--embedding", "hash-proj", "--out", os.path.join(d, "z.st")], ["token_head=sr"], "hash embedding with an LM head")
    expect_error(["init", "--embedding", "hash-pool", "--token_head", "sr", "--hash_chunk", 30, "--out", os.path.join(d, "z.st")],
                 ["hash_chunk"], "k > 24")
    expect_error(["init", "--embedding", "hash-emb", "--token_head", "sr", "--hash_buckets", 0, "--out", os.path.join(d, "z.st")],
                 ["hash_buckets"], "N = 0")
    expect_error(["init", "--embedding", "hash-pool", "--hash", "lsh", "--lsh_features", "table", "--token_head", "sr", "--out",
                  os.path.join(d, "z.st")], ["--data"], "n-gram table without a corpus")
    expect_error(["train", "--task", "sr", *hp, "--token_head", "sr", "--data", os.path.join(d, "empty.txt"), "--out", sr] + tc,
                 ["no word"], "S+R on an empty corpus")
    # grad on word models: `LABELS | TEXT`
    g = os.path.join(d, "g.txt")
    with open(g, "w") as f:
        f.write("0 1 2 -1 . | In the beginning,\n2 0 0 1 0 | </s> <s> and God <unk>\n")
    rc, out, err = run("grad", "--model", sr, "--tokens", g, "--out", os.path.join(d, "gw.st"))
    check(rc == 0 and "2 x 5 word tokens" in out, "word grad: %s %s" % (out, err))
    for body, words, what in [("0 1 2 | In the beginning,\n", ["3 labels for 4 words"], "label count"),
                              ("0 1 5 | In the beginning\n", ["target 5"], "S+R label 3+"),
                              ("0 . 1 | In the\n", ["padding"], "padding in the middle"),
                              ("0 1 In the\n", ["LABELS | TEXT"], "no bar"),
                              ("0 1 | a b\n0 1 2 | a b c\n", ["line 2"], "ragged lines")]:
        with open(g, "w") as f:
            f.write(body)
        expect_error(["grad", "--model", sr, "--tokens", g, "--out", os.path.join(d, "gw.st")], words, "word grad: " + what)


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli.py", why)
    d = tmpdir("mhe_cli_")
    model = os.path.join(d, "m.safetensors")
    ckpt = os.path.join(d, "ck.safetensors")
    text = os.path.join(d, "t.txt")
    with open(text, "w") as f:
        f.write("In the beginning God created the heaven and the earth. " * 40)
    small = ["--d_model", 32, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 32]
    for cmd in ["init", "train", "eval", "generate", "grad", "inspect", "hash", "reparam"]:
        rc, out, err = run(cmd, "--help")
        check(rc == 0 and "usage: mhe " + cmd in out, "%s --help" % cmd)

    rc, out, err = run("init", *small, "--out", model)
    check(rc == 0 and os.path.exists(model), "init: %s" % err)
    # a build without CUDA refuses --device cuda wherever it is a flag, before any work
    for args in (["train", "--data", text, "--model", model, "--out", ckpt], ["eval", "--model", model, "--data", text],
                 ["generate", "--model", model]):
        expect_error(args + ["--device", "cuda"], ["built without CUDA"], "%s --device cuda in a build without CUDA" % args[0])
    check(not os.path.exists(ckpt), "nothing written by a refused --device cuda")
    # bad configs
    expect_error(["init", "--d_model", 0, "--out", model], ["d_model"], "zero d_model")
    expect_error(["init", "--d_model", 30, "--n_heads", 4, "--out", model], ["divisible"], "indivisible heads")
    expect_error(["init", "--attn", "nope", "--out", model], ["nope"], "unknown attention kind")
    expect_error(["init", "--colour", "red", "--out", model], ["colour"], "unknown flag")
    cfgf = os.path.join(d, "bad.cfg")
    with open(cfgf, "w") as f:
        f.write("d_model=64\nn_heads=four\n")
    expect_error(["init", "--config", cfgf, "--out", model], ["n_heads", "line 2"], "bad config file")
    # corpus problems
    tc = ["--steps", 4, "--batch", 2, "--seq_len", 16, "--eval_every", 0, "--log_every", 1]
    expect_error(["train", "--data", os.path.join(d, "missing.txt"), "--model", model, "--out", ckpt] + tc, ["missing.txt"], "missing corpus")
    empty = os.path.join(d, "empty.txt")
    open(empty, "w").close()
    expect_error(["train", "--data", empty, "--model", model, "--out", ckpt] + tc, ["empty"], "empty corpus")
    binf = os.path.join(d, "bin.txt")
    with open(binf, "wb") as f:
        f.write(b"abc\0def" * 10)
    expect_error(["train", "--data", binf, "--model", model, "--out", ckpt] + tc, ["NUL"], "binary corpus")
    # training, resume
    rc, out, err = run("train", "--data", text, "--valid", text, "--model", model, "--out", ckpt, *tc)
    check(rc == 0 and "step" in out and "peak memory" in out and os.path.exists(ckpt), "train: %s %s" % (out[-300:], err))
    rc, out, err = run("train", "--data", text, "--resume", ckpt, "--out", ckpt, "--steps", 6, "--batch", 2, "--seq_len", 16, "--eval_every", 0)
    check(rc == 0 and "resumed" in out, "resume: %s" % err)
    good = open(ckpt, "rb").read()
    # a corrupt or truncated checkpoint is rejected, and the good one is not touched by a failed run
    trunc = os.path.join(d, "trunc.safetensors")
    for cut in [0, 5, 8, 100, len(good) // 2, len(good) - 1]:
        with open(trunc, "wb") as f:
            f.write(good[:cut])
        expect_error(["eval", "--model", trunc, "--data", text], [], "truncated checkpoint at %d" % cut)
    expect_error(["train", "--data", text, "--resume", trunc, "--out", ckpt] + tc, [], "resume from a truncated checkpoint")
    check(open(ckpt, "rb").read() == good, "existing checkpoint unchanged after failed runs")
    expect_error(["train", "--data", text, "--model", model, "--out", ckpt, "--lr", "1e9"] + tc, ["lr"], "lr out of range")
    # a model whose weights hold a NaN: training stops with a message and writes nothing
    import struct
    raw = bytearray(open(model, "rb").read())
    hlen = struct.unpack("<Q", bytes(raw[:8]))[0]
    raw[8 + hlen:8 + hlen + 4] = struct.pack("<f", float("nan"))
    nanm = os.path.join(d, "nan_model.safetensors")
    open(nanm, "wb").write(bytes(raw))
    nanout = os.path.join(d, "nan_out.safetensors")
    expect_error(["train", "--data", text, "--model", nanm, "--out", nanout] + tc, ["non-finite"], "NaN loss")
    check(not os.path.exists(nanout), "nothing written after a NaN loss")
    # eval, generate, grad, inspect
    rc, out, err = run("eval", "--model", ckpt, "--data", text, "--seq_len", 16, "--batch", 2)
    check(rc == 0 and "perplexity" in out, "eval: %s" % err)
    rc, out, err = run("generate", "--model", ckpt, "--prompt", "In the", "--n", 10)
    check(rc == 0 and out.startswith("In the") and "KV cache" in err, "generate: %s" % err)
    tok = os.path.join(d, "tok.txt")
    with open(tok, "w") as f:
        f.write("1 2 3\n4 5\n")
    expect_error(["grad", "--model", model, "--tokens", tok, "--out", os.path.join(d, "g.st")], ["line 2"], "ragged token file")
    with open(tok, "w") as f:
        f.write("1 2 999\n")
    expect_error(["grad", "--model", model, "--tokens", tok, "--out", os.path.join(d, "g.st")], ["999"], "token outside vocabulary")
    # reparam: mha -> collab. Exact at D~ = n d_h (the same eval loss), compressed below it;
    # bad input writes nothing
    rp = os.path.join(d, "collab.safetensors")
    rc, out0, err = run("eval", "--model", ckpt, "--data", text, "--seq_len", 16, "--batch", 2)
    rc, out, err = run("reparam", "--model", ckpt, "--out", rp, "--dim", 32)
    check(rc == 0 and "exact" in out and os.path.exists(rp), "reparam exact: %s %s" % (out, err))
    rc, out1, err = run("eval", "--model", rp, "--data", text, "--seq_len", 16, "--batch", 2)
    l0, l1 = (float(o.split()[1]) if o.startswith("loss") else -1 for o in (out0, out1))
    check(rc == 0 and l0 > 0 and abs(l1 - l0) <= 1e-4 * l0, "reparam at D~ = n d_h keeps the loss: %s vs %s" % (out1.strip(), out0.strip()))
    rc, out, err = run("inspect", rp)
    check(rc == 0 and re.search(r"meta attn +=  ?collab\n", out) and re.search(r"meta collab_dim +=  ?32\n", out) and
          "layers.0.attn.content_bias.weight" in out, "reparam output is collab: %s" % out[:400])
    rc, out, err = run("reparam", "--model", ckpt, "--out", rp, "--dim", 12, "--init", "random", "--seed", 3)
    check(rc == 0 and "relative error" in out and "ALS sweeps" in out and "converted 1 sublayers in" in out, "reparam D~ 12: %s %s" % (out, err))
    gone = os.path.join(d, "never.safetensors")
    expect_error(["reparam", "--model", ckpt, "--out", gone, "--dim", 0], ["--dim", "[1,"], "reparam D~ = 0")
    expect_error(["reparam", "--model", ckpt, "--out", gone, "--dim", 12, "--max_iter", 1, "--tol", 0], ["did not converge", "layers.0.attn", "nothing written"],
                 "reparam that does not converge")
    expect_error(["reparam", "--model", ckpt, "--out", gone, "--dim", 12, "--init", "hosvd"], ["--init"], "reparam unknown init")
    expect_error(["reparam", "--model", ckpt, "--out", gone], ["--dim"], "reparam without --dim")
    mul = os.path.join(d, "mul.safetensors")
    run("init", *small, "--attn", "mhe-mul", "--out", mul)
    expect_error(["reparam", "--model", mul, "--out", gone, "--dim", 8], ["no mha layer"], "reparam of a model without mha layers")
    check(not os.path.exists(gone), "nothing written by a failed reparam")
    # an encoder trains with masked LM and cannot be decoded token by token
    enc = os.path.join(d, "enc.safetensors")
    rc, out, err = run("train", "--arch", "encoder", "--attn", "mhe-mul", *small, "--data", text, "--valid", text, "--out", enc, *tc)
    check(rc == 0 and "val loss" not in err and os.path.exists(enc), "encoder training: %s" % err)
    expect_error(["generate", "--model", enc, "--n", 5], ["decoder"], "generate from an encoder")
    expect_error(["init", "--n_classes", 3, "--out", os.path.join(d, "x.st")], ["n_classes"], "classification head on a decoder")
    # sequence classification from `label<TAB>text` lines, with resume and eval
    cls_tr, cls_va, clsm = os.path.join(d, "c.tsv"), os.path.join(d, "cv.tsv"), os.path.join(d, "cls.safetensors")
    with open(cls_tr, "w") as f:
        for i in range(40):
            f.write("%d\t%s\n" % (i % 3, ["and God said", "grace be unto you", "the king of Judah"][i % 3]))
    with open(cls_va, "w") as f:
        f.write("0\tand God said\n2\tthe king of Judah\n")
    rc, out, err = run("train", "--task", "cls", "--arch", "encoder", *small, "--data", cls_tr, "--valid", cls_va,
                       "--out", clsm, "--steps", 4, "--batch", 4, "--seq_len", 16, "--eval_every", 2, "--log_every", 1)
    check(rc == 0 and "3 classes" in out and "accuracy" in out and "MCC" in out and os.path.exists(clsm), "cls training: %s %s" % (out[-300:], err))
    rc, out, err = run("train", "--task", "cls", "--resume", clsm, "--data", cls_tr, "--out", clsm, "--steps", 6, "--eval_every", 0)
    check(rc == 0, "cls resume: %s" % err)
    rc, out, err = run("eval", "--task", "cls", "--model", clsm, "--data", cls_va, "--seq_len", 16)
    check(rc == 0 and "accuracy" in out and "(2 examples)" in out, "cls eval: %s %s" % (out, err))
    badtsv = os.path.join(d, "bad.tsv")
    with open(badtsv, "w") as f:
        f.write("0\tfine\nnot a label\tx\n")
    expect_error(["train", "--task", "cls", "--arch", "encoder", "--data", badtsv, "--out", clsm] + tc, ["line 2"], "bad label line")
    expect_error(["train", "--task", "cls", "--data", cls_tr, "--out", os.path.join(d, "y.st")] + tc, ["classification head"], "cls on a decoder")
    expect_error(["train", "--task", "sort", "--data", cls_tr, "--out", os.path.join(d, "y.st")] + tc, ["--task"], "unknown task")
    # encoder-decoder: train (continuation), eval, generate from a source
    s2s = os.path.join(d, "s2s.safetensors")
    rc, out, err = run("train", "--arch", "encdec", "--enc_layers", 1, "--cross_attn", "mhe-mul", *small, "--data", text,
                       "--valid", text, "--out", s2s, "--src_len", 12, *tc)
    check(rc == 0 and os.path.exists(s2s), "encdec training: %s" % err)
    rc, out, err = run("eval", "--model", s2s, "--data", text, "--src_len", 12, "--seq_len", 16, "--batch", 2)
    check(rc == 0 and "perplexity" in out, "encdec eval: %s" % err)
    rc, out, err = run("generate", "--model", s2s, "--source", "In the beginning", "--prompt", "G", "--n", 8)
    check(rc == 0 and out.startswith("G") and "cross-attention cache" in err, "encdec generate: %s" % err)
    expect_error(["generate", "--model", s2s, "--n", 5], ["--source"], "encdec generate without a source")
    expect_error(["init", "--arch", "encdec", "--out", os.path.join(d, "z.st")], ["enc_layers"], "encdec without an encoder")
    with open(tok, "w") as f:
        f.write("1 2 3 | 4 5 6\n7 8 . | 9 10 .\n")
    rc, out, err = run("grad", "--model", s2s, "--tokens", tok, "--out", os.path.join(d, "g2.st"))
    check(rc == 0 and "2 x 2 tokens" in out, "encdec grad with padding: %s %s" % (out, err))
    with open(tok, "w") as f:
        f.write("1 2 3 4\n")
    expect_error(["grad", "--model", s2s, "--tokens", tok, "--out", os.path.join(d, "g.st")], ["SOURCE"], "encdec grad without a source")
    with open(tok, "w") as f:
        f.write("1 . 3 4\n")
    expect_error(["grad", "--model", model, "--tokens", tok, "--out", os.path.join(d, "g.st")], ["padding"], "padding before an id")
    words_cli(d, small, tc, text, cls_tr, cls_va)
    rc, out, err = run("inspect", ckpt)
    check(rc == 0 and "optim.m.tok_emb.weight" in out and "format" in out, "inspect: %s" % err)
    expect_error(["inspect", text], [], "inspect a text file")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
