"""The collaborative-attention experiment (Cordonnier et al. 2020) on an imported
BERT: small random BertForSequenceClassification and BertForMaskedLM models made
with `transformers`, imported, `mhe reparam`ed to collaborative heads. At full
rank D~ = n_heads x d_head the logits equal transformers' within 1e-4 (every
BERT piece kept: embedding LayerNorm, token types, the MLM head's transform,
the pooler); the parameter count falls with D~ as eq. 13 counts it; fine-tuning
(`mhe train --task cls`) from a reparametrised model lowers the loss and `mhe
eval` scores it; tools/scripts/collab_bert.py --quick prints the paper's table
shape. Needs torch and transformers (skipped cleanly without them) and build/mhe."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, RESULTS, check, finish, mhe_missing, skip, tmpdir, torch_missing  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402
from mhetest import max_diff, mhe_logits  # noqa: E402

TOL = 1e-4
KW = dict(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=80,
          max_position_embeddings=40, type_vocab_size=2)



def meta(inspect_out, key):
    """a metadata value in `mhe inspect`'s listing"""
    m = re.search(r"^\s+meta %s\s+= (.*)$" % key, inspect_out, re.M)
    return m.group(1).strip() if m else None


def n_params(model):
    """the total parameter count `mhe train` prints for a checkpoint (from its tensor list)"""
    rc, out, err = run("inspect", model)
    n = 0
    for m in re.finditer(r"^\s+(?!optim\.)\S+\s+F32\s+\[([0-9, ]+)\]", out, re.M):
        k = 1
        for d in m.group(1).split(","):
            k *= int(d)
        n += k
    return n if rc == 0 else -1


def reparam(src, out, dim, *extra):
    if os.path.exists(out):
        os.remove(out)
    rc, o, err = run("reparam", "--model", src, "--dim", dim, "--out", out, "--tol", "1e-4", "--max_iter", 3000, *extra)
    check(rc == 0 and os.path.isfile(out), "reparam --dim %d of %s: rc %d %s" % (dim, os.path.basename(src), rc, err.strip()))
    return rc == 0


def perturb(torch, model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


def cls_tests(torch, transformers, d):
    torch.manual_seed(11)
    hc = transformers.BertForSequenceClassification(transformers.BertConfig(num_labels=3, **KW)).eval()
    perturb(torch, hc)
    src = os.path.join(d, "bertc")
    hc.save_pretrained(src, safe_serialization=True)
    imp = os.path.join(d, "bertc.safetensors")
    rc, _, err = run("import", src, "-o", imp)
    check(rc == 0, "import the classifier: %s" % err.strip())
    if rc != 0:
        return
    ids = [int(x) for x in torch.randint(0, 97, (17,))]
    types = [0] * 7 + [1] * 10
    with torch.no_grad():
        want = hc(torch.tensor([ids])).logits.tolist()
        want_t = hc(torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits.tolist()
    C, n, L = KW["hidden_size"], KW["num_attention_heads"], KW["num_hidden_layers"]
    full = os.path.join(d, "c48.safetensors")
    if reparam(imp, full, C):
        diff = max_diff(mhe_logits(full, ids, "cls"), want)
        check(diff < TOL, "collab at full rank D~ = %d: classification logits differ from transformers' by %g" % (C, diff))
        diff = max_diff(mhe_logits(full, ids, "cls", types), want_t)
        check(diff < TOL, "collab at full rank, a pair (token types): logits differ by %g" % diff)
        rc, o, _ = run("inspect", full)
        for key, value in (("emb_norm", "1"), ("type_vocab", "2"), ("cls_pool", "first"), ("attn", "collab"), ("collab_dim", "48")):
            check(meta(o, key) == value, "the reparametrised checkpoint has %s = %s, got %r" % (key, value, meta(o, key)))
    # eq. 13: per layer the concatenated W_Q, W_K and their biases (2 C HD + 2 HD) give way to
    # W~_Q, W~_K, the mixing vectors and the content bias: (2 C + n) D~ + n C
    p0 = n_params(imp)
    prev = None
    for dim in (48, 36, 24, 12):
        out = os.path.join(d, "c%d.safetensors" % dim)
        if dim != 48 and not reparam(imp, out, dim):
            continue
        want_p = p0 - L * (2 * C * C + 2 * C) + L * ((2 * C + n) * dim + n * C)
        got = n_params(out)
        check(got == want_p, "D~ = %d: %d parameters, eq. 13 says %d" % (dim, got, want_p))
        if prev is not None:
            check(got < prev, "the parameter count falls with D~ (%d at D~ = %d, %d before)" % (got, dim, prev))
        prev = got
        if dim < 48:   # a low rank changes the scores: the decomposition is not the identity
            diff = max_diff(mhe_logits(out, ids, "cls"), want)
            check(0 < diff < 10, "D~ = %d: an approximation (logits differ by %g)" % (dim, diff))
    # fine-tuning from D~ = C/2: the loss falls, eval scores it
    data = os.path.join(d, "cls.txt")
    open(data, "w").write("".join("%d\t%s\n" % (i % 3, "ABC"[i % 3] * (3 + i % 5) + "PQR"[i % 3]) for i in range(60)))
    ft = os.path.join(d, "c24ft.safetensors")
    rc, o, err = run("train", "--task", "cls", "--model", os.path.join(d, "c24.safetensors"), "--data", data, "--out", ft,
                     "--steps", 60, "--batch", 8, "--seq_len", 16, "--lr", "3e-3", "--warmup", 5, "--log_every", 10)
    losses = [float(x) for x in re.findall(r"^step\s+\d+/\d+\s+loss ([0-9.]+)", o, re.M)]
    check(rc == 0 and len(losses) == 6, "fine-tuning the collab model: rc %d, %d loss lines %s" % (rc, len(losses), err.strip()[-300:]))
    if len(losses) == 6:
        check(losses[-1] < 0.5 * losses[0], "fine-tuning lowers the loss: %s" % losses)
    rc, o, err = run("eval", "--task", "cls", "--model", ft, "--data", data, "--seq_len", 16)
    m = re.search(r"accuracy ([0-9.]+)", o)
    check(rc == 0 and m and float(m.group(1)) > 0.9, "eval of the fine-tuned collab model: %s %s" % (o.strip(), err.strip()))
    # what cannot be reparametrised is refused by name, nothing written
    bad = os.path.join(d, "bad.safetensors")
    for args, needle in ((["--model", os.path.join(d, "c24.safetensors"), "--dim", 12], "already has collab layers of D~ = 24"),
                         (["--model", imp, "--dim", 0], "--dim")):
        rc, _, err = run("reparam", *args, "--out", bad)
        check(rc != 0 and needle in err and not os.path.exists(bad), "reparam %s: want %r, got rc %d %s" % (args[-1], needle, rc, err.strip()))


def mlm_tests(torch, transformers, d):
    torch.manual_seed(12)
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**KW)).eval()
    perturb(torch, hf)
    src = os.path.join(d, "bertm")
    hf.save_pretrained(src, safe_serialization=True)
    imp = os.path.join(d, "bertm.safetensors")
    rc, _, err = run("import", src, "-o", imp, "--mask-token", 5)
    check(rc == 0, "import the masked LM: %s" % err.strip())
    if rc != 0:
        return
    ids = [int(x) for x in torch.randint(0, 97, (13,))]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].tolist()
    full = os.path.join(d, "m48.safetensors")
    if reparam(imp, full, KW["hidden_size"]):
        diff = max_diff(mhe_logits(full, ids, "lm"), want)
        check(diff < TOL, "collab masked LM at full rank: logits differ from transformers' by %g (MLM head transform, bias)" % diff)
        rc, o, _ = run("inspect", full)
        check(meta(o, "head_transform") == "1" and meta(o, "head_bias") == "1" and meta(o, "mask_token") == "5",
              "the MLM head and [MASK] id are kept")
        # fine-tuning a reparametrised masked LM on a classification task adds a head
        data = os.path.join(d, "cls2.txt")
        open(data, "w").write("".join("%d\t%s\n" % (i % 2, "AB"[i % 2] * (4 + i % 3)) for i in range(20)))
        ft = os.path.join(d, "m48ft.safetensors")
        rc, o, err = run("train", "--task", "cls", "--model", full, "--data", data, "--out", ft, "--steps", 4, "--batch", 4,
                         "--seq_len", 16)
        check(rc == 0 and "a new classification head of 2 classes" in o, "cls fine-tuning of the collab MLM: rc %d %s" % (rc, err.strip()[-300:]))


def script_test(d):
    """tools/scripts/collab_bert.py --quick: the table's rows and what they must satisfy"""
    script = os.path.join(REPO, "tools", "scripts", "collab_bert.py")
    js = os.path.join(d, "table.json")
    p = subprocess.run([sys.executable, script, "--quick", "--work", os.path.join(d, "quick"), "--json", js, "--mhe", MHE,
                        "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    check(p.returncode == 0 and "| collab | 16 |" in p.stdout, "collab_bert.py --quick: rc %d %s" % (p.returncode, (p.stdout + p.stderr)[-800:]))
    if p.returncode != 0:
        return
    rows = json.load(open(js))["rows"]
    check(len(rows) == 3 and [r["dim"] for r in rows] == [32, 32, 16], "the table: the mha row and D~ = 32, 16")
    # full rank: the reparametrised model classifies exactly as the fine-tuned one did
    check(rows[1]["before"] == rows[0]["after"] and abs(rows[1]["before_loss"] - rows[0]["after_loss"]) < 1e-4,
          "D~ = n d_h before fine-tuning scores the mha model's %s (loss %s), got %s (%s)" % (
              rows[0]["after"], rows[0]["after_loss"], rows[1]["before"], rows[1]["before_loss"]))
    check(rows[1]["cp_error"] == 0 and rows[2]["cp_error"] > 0, "the CP error: 0 at full rank, above it at D~ = 16")
    check(rows[2]["attn_params"] < rows[1]["attn_params"] and rows[2]["params"] < rows[1]["params"], "parameters fall with D~")
    check(all(r["ft_loss"] and len(r["ft_loss"]) >= 3 for r in rows), "every fine-tuning logged its loss")


def main():
    why = mhe_missing()
    if why:
        return skip("test_collab_bert.py", why)
    why = torch_missing()
    if why:
        return skip("test_collab_bert.py", why)
    try:
        import torch
        import transformers
    except ImportError as e:
        return skip("test_collab_bert.py", "transformers not available to %s (%s)" % (sys.executable, e))
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    d = tmpdir("mhe_collab_bert_")
    cls_tests(torch, transformers, d)
    mlm_tests(torch, transformers, d)
    script_test(d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
