"""mhe and its PyTorch twin (tools/python/mhe_torch.py) train in lockstep.

For every attention kind, a tiny model made by `mhe init` is trained by
`mhe train --model M --dump-batches D`; the twin loads the same M, replays the
batches of D with the train settings D records and mhe's optimizer step, and
every step's loss must agree with the loss mhe recorded to 1e-3 relative (in
float32; the twin's arithmetic order differs, so the two drift apart only by
rounding). Then the twin's final weights must be mhe's final checkpoint's to
1e-4 in relative L2 norm (all tensors but the key biases, whose exact gradient
is zero: rounding noise on both sides that AdamW amplifies), and strided perplexity (mhe eval --stride) must
equal the twin's own computation of it. Bad input: a dump replayed on another
model, or with another corpus, is refused with a message naming the mismatch.

    python3 tests/test_lockstep.py [--steps N] [--only KIND]

The default (make test) is 12 steps per kind; --steps 200 is the long check
docs/twin.md reports (about a minute per kind on two cores).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mhetest  # noqa: E402
from mhetest import REPO, check, finish, run_mhe, skip, tmpdir  # noqa: E402

# every kind, in the model role it trains in: (kind, extra model flags)
KINDS = [
    ("mha", []), ("sha", []), ("mqa", []), ("gqa", ["--kv_groups", "2"]), ("skv", []), ("el-att", []),
    ("mhe-add", []), ("mhe-mul", []), ("collab", []), ("mlp", []), ("taylor", []), ("nonapprox", []),
    ("rndemb-qk", []), ("fixedseq-qk", ["--fixed_seq", "the quick brown fox"]), ("staticemb-qk", []),
    ("fnet", ["--arch", "encoder"]), ("linear", ["--arch", "encoder"]),
]
# the other shapes the trainer takes: an encoder (masked LM), post-norm with Admin, RMSNorm/SiLU
# without biases, an encoder-decoder continuing a text
VARIANTS = [
    ("mhe-mul encoder", "mhe-mul", ["--arch", "encoder"]),
    ("mha post-norm admin gelu-erf", "mha", ["--norm_position", "post", "--admin", "1", "--activation", "gelu-erf"]),
    ("mhe-add rmsnorm silu nobias untied", "mhe-add",
     ["--norm", "rmsnorm", "--activation", "silu", "--bias", "0", "--tie_embeddings", "0"]),
    ("encdec mhe-mul/mha", "mha", ["--arch", "encdec", "--enc_layers", "1", "--enc_attn", "mhe-mul",
                                   "--cross_attn", "mhe-mul"]),
]
TOL = 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--only")
    ap.add_argument("--lr", default="1e-3")
    a = ap.parse_args()
    why = mhetest.torch_missing() or mhetest.mhe_missing()
    if why:
        return skip("test_lockstep", why)
    import torch
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch as tw
    torch.set_num_threads(1)
    work = tmpdir("mhe_lockstep_")
    corpus = os.path.join(REPO, "examples", "data", "valid.txt")
    other = os.path.join(work, "other.txt")
    with open(other, "w") as f:
        f.write("another corpus entirely, " * 40)
    cases = [(k, k, x) for k, x in KINDS] + VARIANTS
    if mhetest.build_dir() != "build" and not a.only:
        # the sanitizer, fast-math, 32-bit and emulated builds: the kinds with their own cores
        # (the kernels those builds change), not all seventeen again
        cases = [c for c in cases if c[0] in ("mha", "mhe-add", "mhe-mul", "collab", "encdec mhe-mul/mha")]
    for tag, kind, extra in cases:
        if a.only and a.only != tag and a.only != kind:
            continue
        name = tag.replace(" ", "_").replace("/", "-")
        m0, m1, dump = (os.path.join(work, name + s) for s in ("_0.safetensors", "_1.safetensors", ".batches"))
        T = 16
        rc, _, err = run_mhe("init", "--d_model", 32, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32,
                             "--attn", kind, "--seed", 3, "--out", m0, *extra)
        if not check(rc == 0, "%s: mhe init: %s" % (tag, err.strip())):
            continue
        # a high learning rate and no warm-up so the weights move far in few steps
        rc, _, err = run_mhe("train", "--model", m0, "--data", corpus, "--out", m1, "--steps", a.steps, "--batch", 4,
                             "--seq_len", T, "--src_len", 8, "--lr", a.lr, "--min_lr", "1e-4", "--warmup", 2,
                             "--seed", 11, "--dump-batches", dump, "--quiet", "--threads", 1)
        if not check(rc == 0 and os.path.exists(dump), "%s: mhe train --dump-batches: %s" % (tag, err.strip())):
            continue
        ours, theirs, model, _ = tw.replay(m0, dump, corpus_path=corpus)
        rel = abs(ours - theirs) / abs(theirs)
        print("%-36s %d steps, worst relative loss difference %.2e" % (tag, len(ours), rel.max()))
        check(len(ours) == a.steps and rel.max() <= TOL,
              "%s: %d steps in lockstep, worst relative loss difference %.2e at step %d (twin %.6f, mhe %.6f)"
              % (tag, len(ours), rel.max(), rel.argmax() + 1, ours[rel.argmax()], theirs[rel.argmax()]))
        check(theirs[-1] < theirs[0] or a.steps < 10, "%s: the loss falls (%.4f -> %.4f)" % (tag, theirs[0], theirs[-1]))
        final, _, _ = tw.load_checkpoint(m1)
        # ||twin - mhe|| / ||mhe|| over all weights but the key biases, whose gradient is zero in
        # exact arithmetic (softmax ignores a per-query constant): both sides hold rounding noise
        # there, which AdamW's m / sqrt(v) turns into whole lr-sized steps
        num = den = 0.0
        for n in model.names:
            if not n.endswith("wk.bias"):
                num += float((final.param(n) - model.param(n)).double().pow(2).sum())
                den += float(final.param(n).double().pow(2).sum())
        drift = (num / den) ** 0.5
        # float32 rounding differences grow with the steps (1.2e-4 for mha after 200)
        wtol = 1e-4 * max(1.0, (a.steps / 12.0) ** 0.5)
        check(drift <= wtol, "%s: the twin's final weights are mhe's (relative L2 difference %.2e, bound %.1e)"
              % (tag, drift, wtol))
        if tag == "mhe-mul":
            strided(tw, m1, corpus, T)
            refusals(tw, m0, dump, corpus, other, work)
            curve(tw, ours, theirs, work)
    return finish()


def curve(tw, ours, theirs, work):
    """replay --curve: the CSV holds every step's two losses, the SVG a line per series"""
    import xml.etree.ElementTree as ET
    prefix = os.path.join(work, "curve")
    tw.write_curve(prefix, ours, theirs, "a <test> & its curve")
    with open(prefix + ".csv") as f:
        rows = [ln.split(",") for ln in f.read().split()[1:]]
    check(len(rows) == len(ours) and all(abs(float(r[1]) - o) <= 1e-6 * abs(o) and abs(float(r[2]) - t) <= 1e-6 * abs(t)
                                         for r, o, t in zip(rows, ours, theirs)),
          "replay --curve: the CSV holds each step's twin and mhe loss (%d rows)" % len(rows))
    lines = ET.parse(prefix + ".svg").getroot().findall("{http://www.w3.org/2000/svg}polyline")
    check(len(lines) == 3 and all(len(pl.get("points").split()) == len(ours) for pl in lines),
          "replay --curve: the SVG parses and draws mhe, the twin and their difference, a point per step")


def strided(tw, model_path, corpus, T):
    """mhe eval --stride S equals the twin's strided perplexity"""
    model, _, _ = tw.load_checkpoint(model_path, tw.torch.float64)
    data = tw.read_corpus(corpus)[:3000]
    part = os.path.join(os.path.dirname(model_path), "part.txt")
    with open(part, "wb") as f:
        f.write(bytes(int(x) for x in data))
    for s in (1, 5, T):
        rc, out, err = run_mhe("eval", "--model", model_path, "--data", part, "--seq_len", T, "--stride", s)
        want, count = tw.strided_loss(model, data, T, s, batch=8)
        got = [ln for ln in out.splitlines() if ln.startswith("loss ")]
        ok = rc == 0 and got and abs(float(got[0].split()[1]) - want) <= 1e-4
        check(ok, "stride %d: mhe eval --stride %s, twin %.4f over %d bytes (%s)" % (s, got, want, count, err.strip()))
        check(("%d bytes scored" % (len(data) - 1)) in out, "stride %d scores every byte after the first: %s" % (s, out))


def refusals(tw, m0, dump, corpus, other, work):
    """a dump of another model or corpus is refused, naming the mismatch"""
    wide = os.path.join(work, "wide.safetensors")
    run_mhe("init", "--d_model", 48, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32, "--attn", "mhe-mul",
            "--out", wide)
    for model, data, want in ((wide, None, "d_model=32 there, d_model=48"), (m0, other, "another corpus")):
        try:
            tw.replay(model, dump, corpus_path=data)
            check(False, "replaying %s on %s, %s: not refused" % (dump, model, data))
        except tw.CheckpointError as e:
            check(want in str(e), "refused with a message naming the mismatch ('%s'): %s" % (want, e))
    with open(dump, "rb") as f:
        raw = f.read()
    cut = os.path.join(work, "cut.batches")
    with open(cut, "wb") as f:
        f.write(raw[:-7])
    try:
        tw.replay(m0, cut)
        check(False, "a truncated dump is refused")
    except tw.CheckpointError as e:
        check("truncated" in str(e), "a truncated dump is refused: %s" % e)


if __name__ == "__main__":
    sys.exit(main())
