"""Non-finite numbers in models and checkpoints (docs/reliability.md, Non-finite
values). Every mhe command that uses a model's weights refuses one with a NaN or
infinite weight at load, naming the file, the tensor and the element, and writes
nothing (not only the commands that compute a loss: generate, export, reparam,
hash too). A checkpoint whose AdamW moments are not finite is not resumed. A
state with a non-finite weight or moment is never saved: the run stops and the
last good checkpoint stays as it was. Each case checks the exit status, the
message, and that no input or earlier output changed. Needs only python3 and
build/mhe."""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import build_dir, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from clikit import STEPS, TINY, expect, plant, run, setup, state  # noqa: E402


def bad_weights(d, text, model):
    out = os.path.join(d, "out.safetensors")
    tok = os.path.join(d, "tok.txt")
    with open(tok, "w") as f:
        f.write("1 2 3 4\n")
    for name, index, value, word in (("layers.0.attn.wq.bias", 3, float("nan"), "nan"), ("tok_emb.weight", 100, float("inf"), "inf"),
                                     ("ln_f.weight", 0, float("-inf"), "-inf")):
        bad = os.path.join(d, "bad_%s.safetensors" % name)
        plant(model, bad, name, value, index)
        words = [bad, "non-finite weight", name, "element %d" % index, word]
        keep = [bad, text, tok]
        for args in (["generate", "--model", bad, "--prompt", "ab", "--n", 4],
                     ["export", "--model", bad, "--out", out],
                     ["export", "--model", bad, "--out", out + ".h"],
                     ["reparam", "--model", bad, "--out", out, "--dim", 8],
                     ["eval", "--model", bad, "--data", text, "--seq_len", 8, "--batch", 2],
                     ["grad", "--model", bad, "--tokens", tok, "--out", out],
                     ["train", "--data", text, "--model", bad, "--out", out] + STEPS):
            o, e = expect(args, 1, words, "%s of a model with %s %s[%d]" % (args[0], word, name, index), keep=keep, absent=[out, out + ".h"])
            if args[0] == "generate":
                check(o == "", "generate prints no text from a non-finite model: %r" % o[:60])
    # a word model: hash uses the weights' config only, but its embedding comes from them too
    words_model = os.path.join(d, "words.safetensors")
    code, o, e = run("init", "--embedding", "hash-add", "--hash_bits", 16, "--token_head", "sr", *TINY, "--out", words_model)
    check(code == 0, "word model: %s" % e)
    bad = os.path.join(d, "bad_words.safetensors")
    plant(words_model, bad, "layers.0.attn.wq.weight", float("nan"), 7)
    expect(["hash", "--model", bad, "the beginning"], 1, ["non-finite weight", "layers.0.attn.wq.weight", "element 7"],
           "hash with a NaN weight", keep=[bad])
    code, o, e = run("hash", "--model", words_model, "the beginning")
    check(code == 0 and o.count("\n") == 2, "hash of the finite word model still works: %s" % e)


def bad_checkpoints(d, text, ckpt):
    # a NaN weight in a trainer checkpoint: --resume refuses it before anything
    bad = os.path.join(d, "bad_ckpt.safetensors")
    plant(ckpt, bad, "layers.0.mlp.fc1.weight", float("nan"), 11)
    expect(["train", "--data", text, "--resume", bad, "--out", bad, "--steps", 5], 1, ["non-finite weight", "layers.0.mlp.fc1.weight", "element 11"],
           "resume of a checkpoint with a NaN weight", keep=[bad, text])
    # infinite AdamW moments: the weights are fine (eval works), resuming is refused
    for which in ("m", "v"):
        bad = os.path.join(d, "bad_moment_%s.safetensors" % which)
        name = "optim.%s.layers.0.mlp.fc2.weight" % which
        plant(ckpt, bad, name, float("inf"), 5)
        expect(["train", "--data", text, "--resume", bad, "--out", bad, "--steps", 5], 1, [name, "element 5", "not finite", "not resumed"],
               "resume with an infinite optim.%s" % which, keep=[bad, text])
        code, o, e = run("eval", "--model", bad, "--data", text, "--seq_len", 8, "--batch", 2)
        check(code == 0 and "perplexity" in o, "eval of a checkpoint with bad moments but finite weights works: %s" % e)


def never_saved(d, text, ckpt):
    """A run whose AdamW second moment overflows: a token embedding of 1e20 gives gradients of
    ~1e20, whose squares are infinite in float; unclipped (--clip 0) the step itself succeeds.
    The save after it must refuse, keeping the last good checkpoint, and the run must stop."""
    # -ffast-math assumes finite values: there the overflow shows earlier, as a non-finite loss
    # that stops the run before any save; either way nothing non-finite reaches the disk
    fast = "fast" in os.path.basename(build_dir())
    for extra in (["--steps", 8, "--save_every", 1], ["--steps", 3]):
        run_ck = os.path.join(d, "diverging.safetensors")
        plant(ckpt, run_ck, "tok_emb.weight", 1e20, ord("e") * 16)
        words = ["not saved", "non-finite optimizer state optim.v", "is inf", "left unchanged"]
        out, err = expect(["train", "--data", text, "--resume", run_ck, "--out", run_ck, "--clip", 0] + extra, 1,
                          [] if fast else words, "diverging run %s" % extra, keep=[run_ck, text])
        if fast:
            check(all(w in err for w in words) or "non-finite value" in err,
                  "diverging run %s (fast-math): the save refused or the run stopped at a non-finite loss: %r" % (extra, err[-300:]))
        check("wrote" not in out, "the diverging run does not say it wrote: %r" % out[-200:])
    # a second output of the same run (save_every) over a good file of another run: kept too
    good = os.path.join(d, "good.safetensors")
    shutil.copy(ckpt, good)
    before = state(good)
    src = os.path.join(d, "diverging2.safetensors")
    plant(ckpt, src, "tok_emb.weight", 1e20, ord("e") * 16)
    out, err = expect(["train", "--data", text, "--resume", src, "--out", good, "--steps", 8, "--clip", 0, "--save_every", 1], 1,
                      [] if fast else ["not saved"], "a diverging run never replaces another good file", keep=[src, text])
    check("not saved" in err or (fast and "non-finite value" in err), "a diverging run stops unsaved: %r" % err[-300:])
    check(state(good) == before, "the good file is unchanged")


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_nonfinite.py", why)
    d = tmpdir("mhe_cli_nonfinite_")
    text, model, ckpt = setup(d)
    bad_weights(d, text, model)
    bad_checkpoints(d, text, ckpt)
    never_saved(d, text, ckpt)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
