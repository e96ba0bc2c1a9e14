"""No silent substitution (issue 28, item 3): a value the mhe tool cannot honour is refused
with a message naming it, never replaced by another and never ignored. Each case checks
the exit status, the words of the message and that no output was written; then that the
honourable neighbour of each value still works (the refusal is not a blanket one).
Needs only python3 and build/mhe."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import TINY, expect, run, setup, tensors  # noqa: E402


def meta(path):
    import json
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def q8_groups(d, model):
    """--group G on 16- and 64-wide rows (d_model 16, d_ff 64): a G that does not divide every
    row is refused; one that does gives exactly G weights per scale everywhere"""
    out = os.path.join(d, "q8.safetensors")
    for g in (3, 5, 7, 12, 24, 32, 48, 64, 100, 1000):
        expect(["export", "--model", model, "--out", out, "--quant", "q8", "--group", g], 1,
               ["--group %d" % g, "does not divide", "-wide rows of", "0 for one scale per row"],
               "export --group %d on 16-wide rows" % g, keep=[model], absent=[out])
    for g in (0, 1, 2, 4, 8, 16):
        code, o, e = run("export", "--model", model, "--out", out, "--quant", "q8", "--group", g)
        check(code == 0, "export --group %d: %s" % (g, e))
        check(meta(out).get("quant.group") == str(g), "metadata quant.group is %d: %r" % (g, meta(out).get("quant.group")))
        for name, (dtype, shape, _) in tensors(out).items():
            if name.endswith("_scale"):
                w = tensors(out)[name[:-6]][1]
                want = 1 if g == 0 else w[1] // g
                check(shape == [w[0], want], "%s: %s scales per row for group %d (got %s)" % (name, want, g, shape))
        os.remove(out)
    # the default 32 does not divide these 16-wide rows: said, and the file says per row
    code, o, e = run("export", "--model", model, "--out", out, "--quant", "q8")
    check(code == 0 and "one scale per row" in o and meta(out).get("quant.group") == "0",
          "default group on 16-wide rows: one scale per row, said and in the metadata (%r, %r)" % (o, meta(out).get("quant.group")))


def resume_settings(d, text, ckpt):
    """an invalid train setting saved in a checkpoint is named, not replaced by the default"""
    import json
    import struct
    with open(ckpt, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    cases = [("seq_len", "0"), ("seq_len", "abc"), ("batch", "-3"), ("lr", "nan"), ("schedule", "sometimes"),
             ("beta2", "1.5"), ("log_every", "0"), ("mlm_prob", "7"), ("eval_batches", "0")]
    for key, value in cases:
        h = json.loads(json.dumps(head))
        h["__metadata__"]["train." + key] = value
        hb = json.dumps(h, separators=(",", ":")).encode()
        hb += b" " * (-len(hb) % 8)
        bad = os.path.join(d, "bad_%s.safetensors" % key)
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
        out = os.path.join(d, "resumed.safetensors")
        expect(["train", "--data", text, "--resume", bad, "--out", out, "--steps", 4], 1,
               ["--resume", bad, "train.%s='%s'" % (key, value), "'%s'" % key], "resume with train.%s=%s saved" % (key, value),
               keep=[bad, text], absent=[out])
        # a flag given now does not make the file good: still refused, naming the saved field
        good = {"seq_len": "8", "batch": "2", "lr": "0.001", "schedule": "cosine", "beta2": "0.95", "log_every": "1",
                "mlm_prob": "0.15", "eval_batches": "2"}[key]
        expect(["train", "--data", text, "--resume", bad, "--out", out, "--steps", 4, "--" + key, good], 1,
               ["train.%s='%s'" % (key, value)], "resume with train.%s=%s saved and --%s given" % (key, value, key),
               keep=[bad, text], absent=[out])


def indicators(d, text, model):
    for prefix in ("", "sub/", d + "/", "./"):
        expect(["eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2, "--indicators", prefix], 1,
               ["--indicators", "needs a file name"], "--indicators %r" % prefix,
               keep=[model, text, ".csv", ".svg", "_maps.svg", "sub/.csv"], absent=[os.path.join(d, ".csv"), os.path.join(d, ".svg")])
    pre = os.path.join(d, "ind")
    code, o, e = run("eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2, "--indicators", pre)
    check(code == 0 and os.path.exists(pre + ".csv"), "--indicators %s works: %s" % (pre, e))


def ignored_flags(d, text, model, ckpt):
    """flags the command would not use, and values that would be cut to fit"""
    out = os.path.join(d, "out.safetensors")
    ev = ["eval", "--model", model, "--data", text, "--batch", 2]
    cases = [
        (ev + ["--seq_len", 17], 1, ["--seq_len 17", "max_seq_len 16"]),
        (ev + ["--seq_len", 1000], 1, ["--seq_len 1000", "max_seq_len 16"]),
        (ev + ["--src_len", 4], 1, ["--src_len", "arch=decoder"]),
        (ev + ["--seq_len", 8, "--map-len", 4], 2, ["--map-len", "without --indicators"]),
        (ev + ["--seq_len", 8, "--indicators", os.path.join(d, "i"), "--map-len", 9], 1, ["--map-len 9", "seq_len 8"]),
        (ev + ["--seq_len", 8, "--sr_prob", 0.2], 2, ["--sr_prob", "without --task sr"]),
        (ev + ["--seq_len", 8, "--task", "cls", "--stride", 2], 2, ["--stride", "--task cls or sr"]),
        (ev + ["--seq_len", 8, "--task", "cls", "--indicators", os.path.join(d, "i")], 2, ["--indicators", "--task cls or sr"]),
        (ev + ["--seq_len", 8, "--tf32", 1], 2, ["--tf32", "--device cuda"]),
        (["generate", "--model", model, "--source", "abc", "--n", 3], 1, ["--source", "decoder"]),
        (["generate", "--model", model, "--n", 3, "--tf32", 0], 2, ["--tf32", "--device cuda"]),
        (ev + ["--seq_len", 8, "--precision", "bf16"], 2, ["--precision", "--device cuda"]),
        (ev + ["--seq_len", 8, "--precision", "fp16"], 2, ["--precision", "fp32|tf32|bf16"]),
        (ev + ["--seq_len", 8, "--device", "cuda", "--precision", "bf16", "--tf32", 1], 2, ["--tf32 1", "--precision bf16", "disagree"]),
        (["export", "--model", model, "--out", out, "--name", "weights"], 2, ["--name", "FILE.h"]),
        (["init", "--out", out, "--data", text] + TINY, 2, ["--data", "word vocabulary"]),
        (["init", "--out", out, "--words", 1, "--embedding", "hash-add", "--token_head", "sr"] + TINY, 2, ["--words 1", "hash embedding"]),
    ]
    for args, rc, words in cases:
        expect(args, rc, words, " ".join(str(a) for a in args[:1] + args[3:]), keep=[model, text, ckpt],
               absent=[out, os.path.join(d, "i.csv")])
    # their honourable neighbours
    for args in (ev + ["--seq_len", 16], ev + ["--seq_len", 8, "--indicators", os.path.join(d, "j"), "--map-len", 8],
                 ["generate", "--model", model, "--n", 3], ["export", "--model", model, "--out", out + ".h", "--name", "weights"]):
        code, o, e = run(*args)
        check(code == 0, "%s: %s" % (" ".join(str(a) for a in args), e[-200:]))
    # a model whose max_seq_len is below the default seq_len: the default window shrinks to it (not a value given)
    code, o, e = run(*ev)
    check(code == 0 and "perplexity" in o, "eval with the default seq_len on a max_seq_len 16 model: %s" % e)


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_substitution.py", why)
    d = tmpdir("mhe_cli_subst_")
    text, model, ckpt = setup(d)
    q8_groups(d, model)
    resume_settings(d, text, ckpt)
    indicators(d, text, model)
    ignored_flags(d, text, model, ckpt)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
