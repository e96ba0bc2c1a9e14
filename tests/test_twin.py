"""The PyTorch twin (tools/python/mhe_torch.py) against build/mhe:

- round trips: a checkpoint made by `mhe init` or `mhe train` (decoder, post-norm hybrid,
  encoder-decoder with Admin, a word model with the S+R head), loaded by the twin and saved
  again, is byte for byte the same file (tensors, metadata, word state), and `mhe eval` gives the same loss
  on both files; `mhe train --resume` continues from the twin's file exactly as from mhe's;
- lockstep: from one `mhe init` file, a few steps of the twin's trainer (mhe's batches,
  schedule, clipping, AdamW) end at the weights `mhe train` ends at, for --task lm (two
  decoders), sr (a hash-emb word model) and cls (byte examples);
- a model the twin builds with mhe's init and saves is byte for byte `mhe init`'s file (a
  -ffast-math build: within float32 rounding);
- the classification loss equals `mhe eval --task cls`;
- refusals: a checkpoint with an unknown attention kind, an unknown tensor, a missing tensor
  or a misshapen one is refused with a CheckpointError naming it.
Skips when PyTorch is missing (the twin needs it)."""
import json
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, check, finish, mhe_missing, skip, tmpdir, torch_missing  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402


def twin():
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch
    return mhe_torch


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def eval_line(model, data, *extra):
    rc, out, err = run("eval", "--model", model, "--data", data, "--seq_len", 16, "--batch", 4, "--batches", 4, *extra)
    return out.strip() if rc == 0 else "rc %d: %s" % (rc, err.strip())


def same_file_content(mt, a, b, tag):
    """tensors (bit for bit) and metadata of two checkpoints"""
    ta, ma, _ = mt.read_safetensors(a)
    tb, mb, _ = mt.read_safetensors(b)
    check(sorted(ta) == sorted(tb), "%s: tensor names differ: %s" % (tag, sorted(set(ta) ^ set(tb))[:5]))
    bad = [k for k in ta if k in tb and (ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape
                                         or ta[k].tobytes() != tb[k].tobytes())]
    check(not bad, "%s: tensors differ after the round trip: %s" % (tag, bad[:5]))
    check(ma == mb, "%s: metadata differs: %s" % (tag, sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))))


def round_trips(mt, d, data):
    cases = [
        ("decoder-mhe-mul", ["--attn", "mha,mhe-mul", "--n_layers", 2]),
        ("post-rms-hybrid", ["--attn", "gqa,mhe-add,collab", "--n_layers", 3, "--norm_position", "post",
                             "--norm", "rmsnorm", "--bias", 0, "--tie_embeddings", 0]),
        ("encdec-admin", ["--arch", "encdec", "--enc_layers", 1, "--n_layers", 1, "--norm_position", "post",
                          "--admin", 1, "--cross_attn", "mhe-mul", "--src_len", 8]),
    ]
    for name, flags in cases:
        base = ["--d_model", 24, "--n_heads", 4, "--max_seq_len", 16] + flags
        init = os.path.join(d, name + "_init.safetensors")
        ck = os.path.join(d, name + ".safetensors")
        rc, _, err = run("init", "--seed", 3, "--out", init, *[a for a in base if a not in ("--src_len", 8)])
        if not check(rc == 0, "%s: mhe init rc %d: %s" % (name, rc, err)):
            continue
        rc, _, err = run("train", "--model", init, "--data", data, "--out", ck, "--seq_len", 16, "--batch", 4,
                         "--steps", 6, "--eval_every", 0, "--quiet", *(["--src_len", 8] if "--src_len" in flags else []))
        if not check(rc == 0, "%s: mhe train rc %d: %s" % (name, rc, err)):
            continue
        for src, label in ((init, "init"), (ck, "trainer")):
            out = os.path.join(d, "%s_%s_twin.safetensors" % (name, label))
            model, cfg, opt = mt.load_checkpoint(src)
            check((opt is not None) == (label == "trainer"), "%s [%s]: optimizer state %s" % (name, label, opt))
            mt.save_checkpoint(out, model, cfg, opt)
            same_file_content(mt, src, out, "%s [%s]" % (name, label))
            with open(src, "rb") as f1, open(out, "rb") as f2:
                check(f1.read() == f2.read(), "%s [%s]: the twin's file is not byte for byte mhe's" % (name, label))
            extra = ["--src_len", 8] if "encdec" in name else []
            a, b = eval_line(src, data, *extra), eval_line(out, data, *extra)
            check(a == b and a.startswith("loss"), "%s [%s]: mhe eval gives %r on mhe's file, %r on the twin's"
                  % (name, label, a, b))
            with open(data, "rb") as f:
                mine = mt.evaluate(model, list(f.read()), 4, 16, 4, 8 if extra else 0)
            check(a.startswith("loss") and abs(float(a.split()[1]) - mine) <= 6e-5,
                  "%s [%s]: the twin's evaluate gives %.5f, mhe eval %r" % (name, label, mine, a))
        # the twin's trainer checkpoint resumes as mhe's own does
        outs = []
        for src in (ck, os.path.join(d, name + "_trainer_twin.safetensors")):
            res = src + ".resumed"
            rc, out, err = run("train", "--resume", src, "--data", data, "--out", res, "--steps", 9, "--eval_every", 0,
                               "--log_every", 1)
            outs.append(re.findall(r"loss [0-9.]+", out) if rc == 0 else ["rc %d: %s" % (rc, err)])
        check(outs[0] == outs[1] and outs[0], "%s: train --resume differs: mhe's file %s, the twin's %s"
              % (name, outs[0], outs[1]))


def fresh(mt, d):
    """a model the twin builds and initialises itself (mhe's xoshiro256** init in memory
    order) and saves is byte for byte the file `mhe init` writes for the same config and seed"""
    for flags in (["--attn", "mhe-add,collab,gqa", "--n_layers", 3, "--bias", 0],
                  ["--arch", "encdec", "--enc_layers", 1, "--n_layers", 1, "--norm_position", "post", "--admin", 1,
                   "--norm", "rmsnorm", "--collab_mix_std", 0, "--cross_attn", "collab", "--head_init_std", "0.3",
                   "--init_residual", "scaled"]):
        want = os.path.join(d, "fresh_mhe.safetensors")
        got = os.path.join(d, "fresh_twin.safetensors")
        base = ["--d_model", 16, "--n_heads", 4, "--max_seq_len", 8] + flags
        rc, _, err = run("init", "--seed", 11, "--out", want, *base)
        if not check(rc == 0, "fresh %s: mhe init rc %d: %s" % (flags, rc, err)):
            continue
        cfg = {str(k)[2:]: str(v) for k, v in zip(base[::2], base[1::2])}
        mt.save_checkpoint(got, mt.MheModel(cfg, seed=11))
        with open(want, "rb") as f1, open(got, "rb") as f2:
            same = f1.read() == f2.read()
        if not same:
            # a -ffast-math build rounds init_std / sqrt(branches) by an ulp (a reciprocal
            # square root): the same header, and every weight within float32 rounding
            ta, ma, oa = mt.read_safetensors(want)
            tb, mb, ob = mt.read_safetensors(got)
            same = ma == mb and oa == ob and all(
                ta[k].shape == tb[k].shape and float(abs(ta[k].astype("f8") - tb[k]).max()) <= 1e-6 * float(abs(ta[k]).max())
                for k in oa)
        check(same, "fresh %s: the twin's init + save differs from mhe init's file" % flags)


def skipped(mt, d, data):
    """eval --skip (thesis Table 4.1): the non-mha layers' self-attention is the identity"""
    for pos in ("pre", "post"):
        path = os.path.join(d, "skip_%s.safetensors" % pos)
        rc, _, err = run("init", "--seed", 2, "--out", path, "--d_model", 24, "--n_heads", 4, "--n_layers", 3,
                         "--max_seq_len", 16, "--attn", "mha,taylor,mhe-mul", "--norm_position", pos)
        if not check(rc == 0, "skip: mhe init rc %d: %s" % (rc, err)):
            continue
        a = eval_line(path, data, "--skip")
        model, _, _ = mt.load_checkpoint(path)
        model.skip_attn = {1, 2}
        with open(data, "rb") as f:
            mine = mt.evaluate(model, list(f.read()), 4, 16, 4)
        got = re.search(r"^loss ([0-9.]+)", a, re.M)
        check(got and abs(float(got.group(1)) - mine) <= 6e-5, "skip %s: the twin gives %.5f, mhe eval --skip %r"
              % (pos, mine, a))


def words(mt, d, data):
    init = os.path.join(d, "words.safetensors")
    rc, _, err = run("init", "--seed", 2, "--out", init, "--data", data, "--words", 1, "--arch", "encoder",
                     "--token_head", "sr", "--vocab_size", 60, "--d_model", 24, "--n_heads", 4, "--n_layers", 1,
                     "--max_seq_len", 16)
    if not check(rc == 0, "words: mhe init rc %d: %s" % (rc, err)):
        return
    out = os.path.join(d, "words_twin.safetensors")
    model, cfg, _ = mt.load_checkpoint(init, mt.torch.float64)
    check(set(model.extra_i32) == {"vocab.words"}, "words: word state %s" % sorted(model.extra_i32))
    mt.save_checkpoint(out, model, cfg)
    same_file_content(mt, init, out, "words")
    a, b = (eval_line(p, data, "--task", "sr") for p in (init, out))
    check(a == b and "S+R loss" in a, "words: mhe eval --task sr gives %r and %r" % (a, b))


def classify(mt, d):
    """the classification loss (mean-pooled real tokens, cls_head) against `mhe eval --task cls`
    on examples shorter and longer than seq_len"""
    tsv = os.path.join(d, "cls.tsv")
    rows = []
    with open(os.path.join(REPO, "examples", "data", "fortunes_test.tsv"), "rb") as f:
        for line in f.read().split(b"\n")[:40:3]:
            lab, text = line.split(b"\t", 1)
            rows.append((int(lab) % 3, text[:30]))
    with open(tsv, "wb") as f:
        f.write(b"".join(b"%d\t%s\n" % (lab, text) for lab, text in rows))
    path = os.path.join(d, "cls.safetensors")
    rc, _, err = run("init", "--seed", 4, "--out", path, "--arch", "encoder", "--n_classes", 3, "--d_model", 24,
                     "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 32, "--norm_position", "post", "--attn", "mhe-mul,mha")
    if not check(rc == 0, "cls: mhe init rc %d: %s" % (rc, err)):
        return
    rc, out, err = run("eval", "--model", path, "--data", tsv, "--task", "cls", "--seq_len", 24, "--batch", 4)
    got = re.search(r"loss ([0-9.]+)", out)
    if not check(rc == 0 and got, "cls: mhe eval --task cls rc %d: %s %s" % (rc, out, err)):
        return
    model, _, _ = mt.load_checkpoint(path, mt.torch.float64)
    T = 24
    tok = [list(t[:T]) + [0] * (T - len(t[:T])) for _, t in rows]
    with mt.torch.no_grad():
        loss = float(model(mt.torch.tensor(tok), lengths=[min(len(t), T) for _, t in rows],
                           labels=[lab for lab, _ in rows]))
    check(abs(loss - float(got.group(1))) <= 6e-5, "cls: the twin's loss %.6f, mhe eval %s" % (loss, got.group(1)))
    # the same encoder's masked-LM loss over the text (mhe eval's fixed masks)
    a = eval_line(path, tsv)
    with open(tsv, "rb") as f:
        mine = mt.evaluate(model, list(f.read()), 4, 16, 4)
    check(a.startswith("loss") and abs(float(a.split()[1]) - mine) <= 6e-5,
          "encoder: the twin's evaluate gives %.5f, mhe eval %r" % (mine, a))


def lockstep(mt, d, data):
    """a decoder and an encoder-decoder: 12 steps of the twin's trainer against mhe train's"""
    text = list(open(data, "rb").read())
    for name, flags in (("mha-mhemul", ["--attn", "mha,mhe-mul"]),
                        ("post-gqa-skv", ["--attn", "gqa,skv", "--norm_position", "post", "--activation", "silu"])):
        init, ck = os.path.join(d, name + "_l0.safetensors"), os.path.join(d, name + "_l12.safetensors")
        rc, _, err = run("init", "--seed", 9, "--out", init, "--d_model", 24, "--n_heads", 4, "--n_layers", 2,
                         "--max_seq_len", 16, *flags)
        train = {"steps": 12, "batch": 3, "seq_len": 16, "warmup": 4, "lr": "0.01", "min_lr": "0.001",
                 "weight_decay": "0.5", "clip": "0.5", "eval_every": 0}
        if rc == 0:
            rc, _, err = run("train", "--model", init, "--data", data, "--out", ck, "--quiet",
                             *[x for k, v in train.items() for x in ("--" + k, v)])
        if not check(rc == 0, "lockstep %s: mhe rc %d: %s" % (name, rc, err)):
            continue
        model, _, _ = mt.load_checkpoint(init)
        opt = mt.AdamWState(model, train)
        for _ in range(12):
            b = mt.lm_batch(model, opt, text)
            mt.train_step(model, opt, b["tokens"], b["targets"])
        want, _, opt_c = mt.load_checkpoint(ck)
        check(opt.rng == opt_c.rng and opt.step == opt_c.step,
              "lockstep %s: rng/step %s/%d, mhe %s/%d" % (name, opt.rng, opt.step, opt_c.rng, opt_c.step))
        # wk.bias gets a gradient that is exactly zero in exact arithmetic (q.b_k is constant
        # along a row of scores, which softmax ignores): both sides hold rounding noise, which
        # AdamW turns into full-size steps of arbitrary sign, so it is not compared
        names = [n for n in model.names if not n.endswith(".wk.bias")]
        worst, wname = 0.0, "-"
        for n in names:
            a, w = model.param(n).detach(), want.param(n).detach()
            e = float((a - w).abs().max() / w.abs().max().clamp(min=1e-6))
            if e > worst:
                worst, wname = e, n
        # float32 GEMMs sum in another order, and AdamW's first step is lr g / (|g| + eps): for
        # the few entries with |g| ~ eps that rounding is visible (1 % of a step here); a wrong
        # decay set, bias correction or eps placement moves weights by far more; the next steps
        # see slightly different weights, so the moments drift apart too (4e-4 after 12 steps)
        check(worst <= 2e-3, "lockstep %s: after 12 steps the weights differ: %s rel %.3g" % (name, wname, worst))
        for which, mine, theirs in (("m", opt.m, opt_c.m), ("v", opt.v, opt_c.v)):
            e = max(float((mine[n] - theirs[n]).abs().max() / theirs[n].abs().max().clamp(min=1e-30)) for n in names)
            check(e <= 2e-3, "lockstep %s: AdamW moment %s differs: rel %.3g" % (name, which, e))
        tw = os.path.join(d, name + "_twin12.safetensors")
        mt.save_checkpoint(tw, model, None, opt)
        la, lb = (eval_line(p, data) for p in (ck, tw))
        va, vb = (float(x.split()[1]) if x.startswith("loss") else float("nan") for x in (la, lb))
        check(abs(va - vb) <= 1e-4 * abs(va), "lockstep %s: mhe eval after 12 steps: mhe %r, twin %r" % (name, la, lb))


def lockstep_tasks(mt, d):
    """--task sr (a hash-emb word model: md5 features, Shuffle+Random batches) and --task cls
    (byte examples): 8 steps of the twin against mhe train, loss by loss and the weights"""
    words = os.path.join(d, "words.txt")
    pool = [b"alpha", b"beta", b"gamma", b"delta", b"eps", b"zeta", b"eta", b"theta", b"iota", b"kappa", b"mu"]
    with open(words, "wb") as f:
        f.write(b"".join(b" ".join(pool[(7 * i + 3 * j) % len(pool)] for j in range(3 + i % 9)) + b"\n" for i in range(200)))
    tsv = os.path.join(d, "lock.tsv")
    with open(os.path.join(REPO, "examples", "data", "fortunes_train.tsv"), "rb") as f:
        lines = f.read().split(b"\n")[:50]
    with open(tsv, "wb") as f:
        f.write(b"".join(ln[:60] + b"\n" for ln in lines))
    common = ["--arch", "encoder", "--d_model", 24, "--n_heads", 4, "--n_layers", 2, "--max_seq_len", 16]
    train = {"steps": 8, "batch": 4, "seq_len": 16, "warmup": 3, "lr": "0.003", "eval_every": 0, "log_every": 1,
             "sr_prob": "0.3"}
    for task, flags, data in (("sr", ["--token_head", "sr", "--embedding", "hash-emb", "--hash_buckets", 64], words),
                              ("cls", ["--n_classes", 4, "--attn", "mhe-mul"], tsv)):
        init, out = os.path.join(d, task + "_0.safetensors"), os.path.join(d, task + "_8.safetensors")
        rc, _, err = run("init", "--seed", 3, "--out", init, *(common + flags))
        if rc == 0:
            rc, log, err = run("train", "--task", task, "--model", init, "--data", data, "--out", out,
                               *[x for k, v in train.items() for x in ("--" + k, v)])
        if not check(rc == 0, "lockstep --task %s: mhe rc %d: %s" % (task, rc, err)):
            continue
        want = [float(x) for x in re.findall(r"step +\d+.*?loss ([0-9.]+)", log)][:8]
        model, _, _ = mt.load_checkpoint(init)
        opt = mt.AdamWState(model, train)
        with open(data, "rb") as f:
            text = f.read()
        got = []
        if task == "sr":
            toks, types = mt.read_words(text)
            feats = mt.word_feats(model, types)
            for _ in range(8):
                b = mt.sr_batch(model, opt, toks, len(types))
                got.append(mt.train_step(model, opt, b["tokens"], b["targets"], feats=feats)[0])
        else:
            examples = mt.read_text_set(text)
            for _ in range(8):
                b = mt.cls_batch(model, opt, examples)
                got.append(mt.train_step(model, opt, b["tokens"], lengths=b["lengths"], labels=b["labels"])[0])
        check(len(want) == 8 and all(abs(a - b) <= 1e-4 * a + 6e-5 for a, b in zip(want, got)),
              "lockstep --task %s: mhe's losses %s, the twin's %s" % (task, want, [round(x, 4) for x in got]))
        ref, _, opt_c = mt.load_checkpoint(out)
        worst = max(float((model.param(n) - ref.param(n)).abs().max() / ref.param(n).abs().max().clamp(min=1e-6))
                    for n in model.names if not n.endswith(".wk.bias"))
        check(opt.rng == opt_c.rng and worst <= 2e-3, "lockstep --task %s: rng equal %s, weights rel %.3g"
              % (task, opt.rng == opt_c.rng, worst))


def refusals(mt, d):
    src = os.path.join(d, "ok.safetensors")
    rc, _, err = run("init", "--seed", 1, "--out", src, "--d_model", 16, "--n_heads", 2, "--n_layers", 2,
                     "--max_seq_len", 8, "--attn", "mhe-add")
    if not check(rc == 0, "refusals: mhe init rc %d: %s" % (rc, err)):
        return
    tensors, meta, order = mt.read_safetensors(src)

    def variant(tag, want, meta_edit=None, tensor_edit=None):
        t, m = dict(tensors), dict(meta)
        if meta_edit:
            m.update(meta_edit)
        if tensor_edit:
            tensor_edit(t)
        path = os.path.join(d, tag + ".safetensors")
        mt.write_safetensors(path, list(t.items()), m)
        try:
            mt.load_checkpoint(path)
            msg = None
        except mt.CheckpointError as e:
            msg = str(e)
        check(msg is not None and all(w in msg for w in want),
              "refusal %s: want a CheckpointError naming %s, got %r" % (tag, want, msg))
        return path

    variant("unknown-kind", ["mhe-pow", "attn"], {"attn": "mha,mhe-pow"})
    variant("unknown-tensor", ["layers.0.attn.bogus"], tensor_edit=lambda t: t.update({"layers.0.attn.bogus": t["layers.0.attn.eq"]}))
    variant("missing-tensor", ["layers.1.attn.ek"], tensor_edit=lambda t: t.pop("layers.1.attn.ek"))
    variant("wrong-shape", ["layers.0.mlp.fc1.weight", "[16, 64]"],
            tensor_edit=lambda t: t.update({"layers.0.mlp.fc1.weight": t["layers.0.mlp.fc1.weight"].T.copy()}))
    variant("not-mhe", ["format"], {"format": "gguf"})
    variant("unknown-config-key", ["rope_theta"], {"rope_theta": "10000"})
    variant("bad-geometry", ["kv_groups 3", "n_heads 2"], {"attn": "gqa,mhe-add", "kv_groups": "3"})
    m = dict(meta)
    m.pop("n_heads")
    p = os.path.join(d, "missing-config.safetensors")
    mt.write_safetensors(p, list(tensors.items()), m)
    try:
        mt.load_checkpoint(p)
        msg = None
    except mt.CheckpointError as e:
        msg = str(e)
    check(msg is not None and "n_heads" in msg, "refusal missing-config: got %r" % msg)
    # the refusal from the command line: a clear message, exit status 1
    bad = variant("cli-unknown-kind", ["mhe-pow"], {"attn": "mhe-pow"})
    import subprocess
    p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "python", "mhe_torch.py"), "roundtrip", "--model", bad,
                        "--out", bad + ".out"], capture_output=True, text=True)
    check(p.returncode == 1 and "mhe-pow" in p.stderr and not os.path.exists(bad + ".out"),
          "mhe_torch.py roundtrip on an unknown kind: rc %d, %r" % (p.returncode, p.stderr[-300:]))


def main():
    why = torch_missing() or mhe_missing()
    if why:
        return skip("test_twin", why)
    mt = twin()
    mt.torch.set_num_threads(1)
    d = tmpdir("mhe_twin_")
    data = os.path.join(d, "corpus.txt")
    text = b""
    for doc in ("README.md", os.path.join("docs", "kinds.md")):   # 30 KB of prose
        with open(os.path.join(REPO, doc), "rb") as f:
            text += f.read(30000 - len(text))
    with open(data, "wb") as f:
        f.write(bytes(b for b in text if 32 <= b < 127 or b == 10))   # plain ASCII text
    refusals(mt, d)
    round_trips(mt, d, data)
    fresh(mt, d)
    skipped(mt, d, data)
    words(mt, d, data)
    classify(mt, d)
    lockstep(mt, d, data)
    lockstep_tasks(mt, d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
