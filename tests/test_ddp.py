"""`python3 tools/python/mhe_torch.py train` under torchrun (DDP on gloo, loopback) against one process
and against build/mhe:

- 2 processes over a global batch of 8 equal 1 process over the same batch: every step's loss
  to 1e-5 relative and the weights after 10 steps to 1e-5 (absolute; the key biases, whose
  exact gradient is zero, to the learning rate), for a decoder LM (from
  `mhe init`) and for a masked-LM encoder (a new model from --config), where the two ranks
  hold different numbers of targets (checked);
- the distributed run's checkpoint is taken by `mhe eval` (the twin's evaluate's loss to 1e-4
  relative), `mhe generate`, `mhe train --resume` and `mhe export --quant q8`;
- `mhe train` 4 steps, the twin's `train --resume` 4 more, `mhe train --resume` 4 more: every
  step's loss is that of one uninterrupted `mhe train` of 12 steps, and so are the weights;
- bad input, one line and a nonzero exit, no checkpoint: a world size not dividing the batch,
  a checkpoint with an attention kind the twin lacks, a duplicated config key, --amp fp16
  without CUDA, --fsdp on PyTorch 1; a rank that dies mid-run: the other rank says which rank
  noticed at which step, no OUT.tmp is left and OUT is the complete save before the death.

MHE_TEST_BUILD other than `build` (sanitizer, fast-math, 32-bit, qemu runs): the cheap
bad-input checks only. Skips when PyTorch or torch.distributed with gloo is missing.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mhetest  # noqa: E402
from mhetest import REPO, RESULTS, check, finish, run_mhe, skip, tmpdir  # noqa: E402

TWIN = os.path.join(REPO, "tools", "python", "mhe_torch.py")
CORPUS = os.path.join(REPO, "examples", "data", "valid.txt")
TRAIN = ["--set", "batch=8", "--set", "seq_len=32", "--set", "lr=3e-3", "--set", "warmup=2", "--set", "log_every=1",
         "--threads", "1"]


def env():
    e = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    e.pop("MHE_TORCH_TEST_EXIT", None)
    return e


def twin(*args, extra_env=None, world=None):
    """the twin's train in one process (world: pretend to be rank 0 of that many, no process group)"""
    e = env()
    if world:
        e.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    e.update(extra_env or {})
    p = subprocess.run([sys.executable, TWIN, "train"] + [str(a) for a in args], capture_output=True, text=True,
                       env=e, timeout=600)
    return p.returncode, p.stdout, p.stderr


def torchrun(*args, extra_env=None):
    """the twin's train in 2 processes under torchrun --standalone (no fixed port)"""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is None:
        # Debian's PyTorch 1.13 under Python 3.11: its Std.from_str("0") finds no member (a Python
        # 3.11 enum change), so torchrun's defaults fail; a mapping for a rank that does not exist works
        launcher += ["--redirects", "9:1", "--tee", "9:1"]
    e = env()
    e.update(extra_env or {})
    p = subprocess.run(launcher + [TWIN, "train"] + [str(a) for a in args], capture_output=True, text=True,
                       env=e, timeout=900)
    return p.returncode, p.stdout, p.stderr


def losses(out):
    return [float(x) for x in re.findall(r"step +\d+/\d+ +loss ([0-9.]+)", out)]


def one_line_error(rc, err, want, what):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    check(rc != 0 and len(lines) == 1 and want in lines[0] and "Traceback" not in err,
          "%s: one line naming it (rc %d): %r" % (what, rc, err[-600:]))


def max_diff(mt, a, b):
    """the largest weight difference, over all tensors but the key biases (their exact gradient
    is zero: both sides hold rounding noise there, which AdamW's m / sqrt(v) turns into steps of
    up to lr), and the key biases' own, bounded by the learning rate"""
    ma, _, oa = mt.load_checkpoint(a)
    mb, _, ob = mt.load_checkpoint(b)
    diff = [(float((ma.param(n) - mb.param(n)).abs().max()), n) for n in ma.names]
    kb = max([x for x, n in diff if n.endswith("wk.bias")] + [0.0])
    check(kb <= 3e-3, "key biases of %s and %s differ by %.1e, more than the learning rate" % (a, b, kb))
    return max(x for x in diff if not x[1].endswith("wk.bias")), oa, ob


def same_run(mt, tag, single, dist, a, b):
    """one process and two processes: the same loss per step, the same weights"""
    rc1, out1, err1 = single
    rc2, out2, err2 = dist
    if not check(rc1 == 0 and rc2 == 0, "%s: runs: %s / %s" % (tag, err1[-400:], err2[-800:])):
        return
    l1, l2 = losses(out1), losses(out2)
    rel = max(abs(x - y) / abs(x) for x, y in zip(l1, l2)) if l1 and len(l1) == len(l2) else 1.0
    check(len(l1) == 10 and rel <= 1e-5, "%s: 2 processes log 1 process's loss at every step (%d/%d steps, worst "
          "relative difference %.1e)" % (tag, len(l1), len(l2), rel))
    (w, n), oa, ob = max_diff(mt, a, b)
    print("%s: losses %s ... %s, worst relative difference %.1e; weights differ by %.1e at most (%s)"
          % (tag, l1[0], l1[-1], rel, w, n))
    check(w <= 1e-5 and oa.step == ob.step == 10 and oa.rng == ob.rng,
          "%s: the same weights after 10 steps (max abs diff %.2e in %s), step %d/%d, batch RNG equal %s"
          % (tag, w, n, oa.step, ob.step, oa.rng == ob.rng))
    check(l1[-1] < l1[0], "%s: the loss falls (%.4f -> %.4f)" % (tag, l1[0], l1[-1]))


def decoder(mt, d):
    m0, s1, d1 = (os.path.join(d, x) for x in ("dec0.safetensors", "dec_1p.safetensors", "dec_2p.safetensors"))
    rc, _, err = run_mhe("init", "--d_model", 32, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32,
                         "--attn", "mhe-mul", "--seed", 3, "--out", m0)
    if not check(rc == 0, "mhe init: %s" % err):
        return None
    common = ["--model", m0, "--data", CORPUS, "--steps", 10] + TRAIN
    same_run(mt, "decoder LM", twin(*common, "--out", s1), torchrun(*common, "--out", d1), s1, d1)
    return d1


def encoder(mt, d):
    cfg, s1, d1 = (os.path.join(d, x) for x in ("enc.cfg", "enc_1p.safetensors", "enc_2p.safetensors"))
    with open(cfg, "w") as f:
        f.write("# a masked-LM encoder\narch = encoder\nd_model=32\nn_heads=4\nn_layers=2  # two blocks\n"
                "max_seq_len=32\nattn=mha,mhe-add\n\n")
    # the two halves of a masked-LM batch hold different numbers of targets: the case the
    # global-count scaling of the DDP loss exists for
    model = mt.MheModel({"arch": "encoder", "d_model": 32, "n_heads": 4, "n_layers": 2, "max_seq_len": 32})
    opt = mt.AdamWState(model, {"batch": 8, "seq_len": 32, "seed": 1337})
    data = mt.read_corpus(CORPUS)
    uneven = 0
    for _ in range(10):
        t = mt.lm_batch(model, opt, data)["targets"]
        uneven += int((t[:4] != -1).sum()) != int((t[4:] != -1).sum())
    check(uneven >= 5, "encoder: the ranks' target counts differ in %d of 10 steps" % uneven)
    common = ["--config", cfg, "--data", CORPUS, "--steps", 10] + TRAIN
    same_run(mt, "encoder masked LM", twin(*common, "--out", s1), torchrun(*common, "--out", d1), s1, d1)


def back_to_mhe(mt, d, ck):
    """the distributed run's checkpoint in build/mhe"""
    rc, out, err = run_mhe("eval", "--model", ck, "--data", CORPUS, "--seq_len", 32, "--batch", 8, "--batches", 4)
    got = re.findall(r"loss ([0-9.]+)", out)
    model, _, _ = mt.load_checkpoint(ck)
    want = mt.evaluate(model, mt.read_corpus(CORPUS), batch=8, seq_len=32, max_batches=4)
    ok = rc == 0 and got and abs(float(got[0]) - want) <= 1e-4 * want
    check(ok, "mhe eval on the distributed checkpoint: %s, the twin's evaluate %.6f (%s)" % (got, want, err.strip()))
    rc, out, err = run_mhe("generate", "--model", ck, "--prompt", "The ", "--n", 20, "--seed", 1)
    check(rc == 0 and out.startswith("The ") and len(out) >= 24, "mhe generate on it: rc %d %r %s" % (rc, out, err))
    rc, out, err = run_mhe("train", "--resume", ck, "--data", CORPUS, "--out", os.path.join(d, "more.safetensors"),
                           "--steps", 12, "--quiet")
    _, _, more = mt.load_checkpoint(os.path.join(d, "more.safetensors")) if rc == 0 else (0, 0, None)
    check(rc == 0 and more.step == 12, "mhe train --resume continues it to step 12: rc %d %s" % (rc, err.strip()))
    q8 = os.path.join(d, "q8.safetensors")
    rc, out, err = run_mhe("export", "--model", ck, "--out", q8, "--quant", "q8")
    check(rc == 0 and os.path.getsize(q8) > 0, "mhe export --quant q8 on it: rc %d %s" % (rc, err.strip()))


def resume_chain(mt, d):
    """mhe -> twin -> mhe, 4 steps each, against one uninterrupted mhe run of 12"""
    m0, a1, a2, a3, ref = (os.path.join(d, "ch%s.safetensors" % x) for x in ("0", "1", "2", "3", "_ref"))
    run_mhe("init", "--d_model", 32, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32, "--seed", 5, "--out", m0)
    # a constant schedule after warm-up: the learning rate does not depend on --steps
    t = ["--data", CORPUS, "--batch", 8, "--seq_len", 32, "--lr", "3e-3", "--warmup", 2, "--schedule", "constant",
         "--log_every", 1, "--eval_every", 0, "--threads", 1]
    rc0, ref_out, err0 = run_mhe("train", "--model", m0, "--out", ref, "--steps", 12, *t)
    rc1, out1, err1 = run_mhe("train", "--model", m0, "--out", a1, "--steps", 4, *t)
    rc2, out2, err2 = twin("--resume", a1, "--data", CORPUS, "--out", a2, "--steps", 8, "--threads", 1)
    rc3, out3, err3 = run_mhe("train", "--resume", a2, "--out", a3, "--steps", 12, *t)
    if not check(rc0 == rc1 == rc2 == rc3 == 0, "resume chain: %s %s %s %s" % (err0, err1, err2[-500:], err3)):
        return
    want = [float(x) for x in re.findall(r"step +\d+/\d+ +loss ([0-9.]+)", ref_out)]
    got = [float(x) for x in re.findall(r"step +\d+/\d+ +loss ([0-9.]+)", out1 + out2 + out3)]
    rel = max(abs(x - y) / x for x, y in zip(want, got)) if len(want) == len(got) == 12 else 1.0
    print("resume chain mhe -> twin -> mhe: 12 steps, worst relative loss difference %.1e" % rel)
    check(rel <= 1e-4, "resume chain: the losses of mhe/twin/mhe are one uninterrupted run's: %s vs %s" % (got, want))
    (w, n), oa, ob = max_diff(mt, a3, ref)
    check(w <= 1e-5 and oa.step == ob.step == 12 and oa.rng == ob.rng,
          "resume chain: final weights differ by %.2e (%s), steps %d/%d, RNG equal %s" % (w, n, oa.step, ob.step,
                                                                                        oa.rng == ob.rng))


def bad_input(mt, d):
    """the cheap refusals: one process, no process group"""
    import torch
    m0 = os.path.join(d, "bad0.safetensors")
    out = os.path.join(d, "bad_out.safetensors")
    run_mhe("init", "--d_model", 16, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 16, "--seed", 1, "--out", m0)
    base = ["--model", m0, "--data", CORPUS, "--out", out, "--steps", 2, "--set", "seq_len=16"]
    # rank 0 of two (torchrun's variables): refused before any process group is formed
    rc, _, err = twin(*base, "--set", "batch=3", world=2)
    one_line_error(rc, err, "batch 3 is not divisible by the world size 2", "world size 2, batch 3")
    # an attention kind the twin does not know: the metadata of a real checkpoint edited
    with open(m0, "rb") as f:
        raw = f.read()
    bogus = os.path.join(d, "bogus.safetensors")
    with open(bogus, "wb") as f:
        f.write(raw.replace(b'"attn":"mha"', b'"attn":"zzz"'))
    rc, _, err = twin("--model", bogus, "--data", CORPUS, "--out", out, "--steps", 2)
    one_line_error(rc, err, "unknown attention kind 'zzz'", "a checkpoint of a kind the twin lacks")
    cfg = os.path.join(d, "dup.cfg")
    with open(cfg, "w") as f:
        f.write("d_model=16\nn_heads=2\nd_model=32\n")
    rc, _, err = twin("--config", cfg, "--data", CORPUS, "--out", out, "--steps", 2)
    one_line_error(rc, err, "line 3: key 'd_model' was already set on line 1", "a config key set twice")
    if not torch.cuda.is_available():
        rc, _, err = twin(*base, "--amp", "fp16")
        one_line_error(rc, err, "--amp fp16 needs a CUDA device", "--amp fp16 without CUDA")
    if int(torch.__version__.split(".")[0]) < 2:
        rc, _, err = twin(*base, "--fsdp")
        one_line_error(rc, err, "--fsdp needs PyTorch 2", "--fsdp on PyTorch %s" % torch.__version__)
    check(not os.path.exists(out) and not os.path.exists(out + ".tmp"), "no checkpoint written by a refused run")


def dead_rank(mt, d, m0):
    """rank 1 exits at step 5 of 8; saves every 2 steps"""
    out = os.path.join(d, "dies.safetensors")
    rc, so, err = torchrun("--model", m0, "--data", CORPUS, "--out", out, "--steps", 8, "--save_every", 2,
                           "--timeout", 60, *TRAIN, extra_env={"MHE_TORCH_TEST_EXIT": "1:5"})
    said = re.findall(r"mhe_torch: rank 0 (noticed at step 5|stopped by SIGTERM at step 5)[^\n]*", err)
    check(rc != 0 and said, "a dead rank: rc %d, rank 0 says which rank noticed at which step: %r" % (rc, err[-800:]))
    check(not re.search(r"Traceback[^\n]*\n(  File[^\n]*\n[^\n]*\n)*  File \"[^\"]*mhe_torch.py", err),
          "a dead rank: no traceback from the twin")
    check(not os.path.exists(out + ".tmp"), "a dead rank: no %s.tmp left" % out)
    _, _, opt = mt.load_checkpoint(out) if os.path.exists(out) else (0, 0, None)
    check(opt is not None and opt.step == 4, "a dead rank: OUT is the complete save of step 4: %s"
          % (opt.step if opt else "absent"))


def main():
    why = mhetest.torch_missing() or mhetest.mhe_missing()
    if not why:
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            why = "torch.distributed with the gloo backend is not available"
    if why:
        return skip("test_ddp", why)
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch as mt
    d = tmpdir("mhe_ddp_")
    bad_input(mt, d)
    if mhetest.build_dir() != "build":
        print("SKIP test_ddp: distributed runs only in the default build")
        RESULTS.skipped += 1
        return finish()
    ck = decoder(mt, d)
    encoder(mt, d)
    if ck:
        back_to_mhe(mt, d, ck)
        dead_rank(mt, d, os.path.join(d, "dec0.safetensors"))
    resume_chain(mt, d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
