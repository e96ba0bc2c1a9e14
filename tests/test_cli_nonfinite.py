"""Non-finite numbers in models and checkpoints (docs/reliability.md, Non-finite
values). Every mhe command that uses a model's weights refuses one with a NaN or
infinite weight at load, naming the file, the tensor and the element, and writes
nothing (not only the commands that compute a loss: generate, export, reparam,
hash too). A checkpoint whose AdamW moments are not finite is not resumed. A
state with a non-finite weight or moment is never saved: the run stops and the
last good checkpoint stays as it was. Weights that are finite but overflow in the
forward pass (a gain of 3e38) make generate (float32 and q8 exports), eval, grad,
train and reparam stop with the first layer that went non-finite named and nothing
written (generate prints no text). Each case checks the exit status, the message,
and that no input or earlier output changed. Needs only python3 and build/mhe."""
import re
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mhetest  # noqa: E402
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


def runtime_overflow(d, text):
    """finite weights whose products overflow: every command that runs the model stops at the
    first non-finite activation, names it, and writes nothing (generate prints nothing)"""
    model = os.path.join(d, "two_layers.safetensors")
    code, o, e = run("init", "--d_model", 16, "--n_heads", 2, "--n_layers", 2, "--max_seq_len", 16, "--out", model)
    check(code == 0, "two-layer model: %s" % e)
    tok = os.path.join(d, "tok2.txt")
    with open(tok, "w") as f:
        f.write("1 2 3 4 5 6\n7 8 9 10 11 12\n")
    out, q8 = os.path.join(d, "out2.safetensors"), os.path.join(d, "q8.safetensors")
    where_any = re.compile(r"(layer \d+ \([a-zA-Z -]+\)|the final norm|the embedding|the output head \(logits\)) produced (nan|inf|-inf)")
    cases = [("ln_f.weight", 0, 3e38, "the final norm produced"), ("ln_f.weight", 5, -3e38, "the final norm produced"),
             ("layers.0.norm1.weight", 0, 3e38, "layer 0 ("), ("layers.1.norm2.weight", 3, 3e38, "layer 1 (norm before the MLP)"),
             ("layers.0.mlp.fc1.weight", 0, 3e38, "layer 0 ("), ("layers.1.mlp.fc1.weight", 40, -3e38, "layer 1 ("),
             ("layers.0.attn.wq.weight", 0, 3e38, "layer 0 ("), ("layers.1.attn.wv.weight", 2, -3e38, "layer 1 (")]
    for name, index, value, place in cases:
        bad = os.path.join(d, "overflow.safetensors")
        plant(model, bad, name, value, index)
        what = "%s[%d] = %g" % (name, index, value)
        code, o, e = run("export", "--model", bad, "--out", q8, "--quant", "q8", "--group", 8)
        check(code == 0, "%s: the weights are finite, the q8 export is written: %s" % (what, e))
        runs = [["generate", "--model", bad, "--prompt", "In the", "--n", 8],
                ["generate", "--model", q8, "--prompt", "In the", "--n", 8],
                ["generate", "--model", bad, "--prompt", "In", "--n", 12, "--temperature", 0],
                ["eval", "--model", bad, "--data", text, "--seq_len", 8, "--batch", 2],
                ["eval", "--model", q8, "--data", text, "--seq_len", 8, "--batch", 2],
                ["eval", "--model", bad, "--data", text, "--seq_len", 8, "--batch", 2, "--stride", 4],
                ["grad", "--model", bad, "--tokens", tok, "--out", out],
                ["train", "--data", text, "--model", bad, "--out", out] + STEPS]
        for args in runs:
            label = "%s with %s%s" % (args[0], what, " (q8)" if q8 in args else "")
            if args[0] == "generate":   # stderr starts with the KV-cache sizes: its last line is the error
                code, o, e = run(*args)
                last = e.strip().splitlines()[-1] if e.strip() else ""
                check(code == 1 and last.startswith("mhe: ") and place in last and "nothing written" in last,
                      "%s: rc 1 and one line naming %r: rc %d, %r" % (label, place, code, last))
                check(o == "", "%s prints no text (no NUL bytes): %r" % (label, o[:40]))
            else:
                o, e = expect(args, 1, [place], label, keep=[bad, text, tok, q8], absent=[out])
            check(where_any.search(e) is not None, "%s: the message names where: %r" % (label, e[-200:]))
            if args[0] == "train":
                check("step 0" in e and "wrote" not in o, "train with %s stops at its first step unsaved" % what)
        # reparam: the decomposition of overflowing W_Q W_K^T products is refused, nothing written
        if ".attn.wq" in name:
            expect(["reparam", "--model", bad, "--out", out, "--dim", 8], 1, ["non-finite", "nothing written"], "reparam with %s" % what,
                   keep=[bad], absent=[out])
        os.remove(q8)
    # the same model unpoisoned: every command works (the checks cost nothing on the way)
    for args in (["generate", "--model", model, "--prompt", "In the", "--n", 8], ["eval", "--model", model, "--data", text, "--seq_len", 8, "--batch", 2],
                 ["grad", "--model", model, "--tokens", tok, "--out", out]):
        code, o, e = run(*args)
        check(code == 0, "%s of the finite model: %s" % (args[0], e[-200:]))


def main():
    why = mhe_missing()
    if why:
        return skip("test_cli_nonfinite.py", why)
    d = tmpdir("mhe_cli_nonfinite_")
    text, model, ckpt = setup(d)
    bad_weights(d, text, model)
    bad_checkpoints(d, text, ckpt)
    never_saved(d, text, ckpt)
    if "fast" in os.path.basename(build_dir()):
        # -ffinite-math-only folds the forward pass's NaN handling away: there an overflow may
        # come out as finite garbage, which no check can tell (docs/reliability.md, fast-math)
        print("SKIP forward-pass overflow cases: a -ffast-math build does not flag non-finite activations")
        mhetest.RESULTS.skipped += 1
    else:
        runtime_overflow(d, text)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
