"""`mhe import` and mhe's tokenizers against transformers and tokenizers, with no Python
package: tests/fixtures/hf/tf-VERSION/ holds tiny random GPT-2 and BERT models saved by
that transformers version, their tokenizer.json files and reference.json (what
transformers and tokenizers computed on them: tools/scripts/make_hf_fixtures.py, which
records the versions). Each model is imported and held to the reference: logits (1e-4),
GPT-2's loss and greedy tokens, BERT's masked-LM logits with token types, the classifier's
logits and eval loss, the ids of random multi-script texts, GPT-2's decoding. The configs
each transformers version writes (configs/, save_pretrained's and every key) import with
the fixtures' weights; a key that changes the model is refused by name, a generate()
setting is named in the note. Where torch, transformers and tokenizers are importable
(this interpreter, or $MHE_HF_PYTHON), the script regenerates the fixtures into a
temporary directory with the installed versions and checks those too ("live")."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import MHE, REPO, RESULTS, check, finish, hf_python, max_diff, mhe_logits, mhe_missing, skip, tmpdir  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402

TOL = 1e-4
FIXTURES = os.path.join(REPO, "tests", "fixtures", "hf")
WORST = {}   # the largest difference per quantity, printed at the end


def worst(what, d):
    WORST[what] = max(WORST.get(what, 0.0), d)


def model_dir(src, dst, config=None):
    """a copy of the Hugging Face directory src (config.json replaced by config when given)"""
    shutil.copytree(src, dst)
    if config:
        shutil.copyfile(config, os.path.join(dst, "config.json"))
    return dst


def imported(d, src, name):
    out = os.path.join(d, name + ".safetensors")
    rc, _, err = run("import", src, "-o", out)
    if not check(rc == 0 and "tokenizer.json attached" in err, "import %s: rc %d %s" % (src, rc, err.strip()[-300:])):
        return None
    return out


def write(d, name, text):
    p = os.path.join(d, name)
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return p


def ids_of(model, d, text, special=False):
    p = write(d, "text.txt", text)
    rc, o, err = run("tokenize", "encode", "--model", model, "--data", p, *(["--special"] if special else []))
    return [int(x) for x in o.split()] if rc == 0 else "rc %d: %s" % (rc, err.strip())


def check_rows(what, got, want):
    """got: every row of mhe logits; want: {position: row}"""
    if got is None:
        return check(False, "%s: no logits" % what)
    d = max(max_diff([got[int(t)]], [row]) if int(t) < len(got) else float("inf") for t, row in want.items())
    worst("logits", d)
    return check(d < TOL, "%s: logits differ from transformers' by %g" % (what, d))


def tokenizer_checks(tag, model, d, ref, special):
    bad = [(i, t, ids_of(model, d, t, special), want) for i, (t, want) in enumerate(zip(ref["texts"], ref["text_ids"]))]
    bad = [b for b in bad if b[2] != b[3]]
    check(not bad, "%s: %d of %d random texts encode differently, first %r: mhe %s, tokenizers %s"
          % (tag, len(bad), len(ref["texts"]), bad[0][1] if bad else "", bad[0][2] if bad else "", bad[0][3] if bad else ""))


def gpt2_checks(tag, src, d, ref):
    out = imported(d, src, "gpt2")
    if not out:
        return
    check_rows(tag + " GPT-2", mhe_logits(out, ref["ids"]), ref["logits"])
    rc, o, err = run("generate", "--model", out, "--ids", " ".join(map(str, ref["ids"])), "--n", len(ref["greedy"]) - len(ref["ids"]),
                     "--temperature", 0)
    got = [int(x) for x in o.split()] if rc == 0 else err.strip()
    check(got == ref["greedy"], "%s: greedy ids: mhe %s, transformers %s" % (tag, got, ref["greedy"]))
    rc, o, err = run("generate", "--model", out, "--prompt", ref["prompt"], "--n", len(ref["greedy"]) - len(ref["ids"]), "--temperature", 0)
    check(rc == 0 and o.rstrip("\n") == ref["greedy_text"], "%s: greedy text: mhe %r, transformers %r %s" % (tag, o, ref["greedy_text"], err.strip()))
    # the eval loss over one window of exactly the reference's tokens
    lids = ref["loss_ids"]
    check(ids_of(out, d, ref["loss_text"]) == lids, "%s: the loss text encodes to the reference's ids" % tag)
    data = write(d, "loss.txt", ref["loss_text"])
    rc, o, err = run("eval", "--model", out, "--data", data, "--seq_len", len(lids) - 1, "--batch", 1, "--batches", 1)
    m = re.search(r"loss ([0-9.]+)", o) if rc == 0 else None
    dl = abs(float(m.group(1)) - ref["loss"]) if m else float("inf")
    check(dl < TOL, "%s: eval loss: mhe %s, transformers %.6f %s" % (tag, m.group(1) if m else None, ref["loss"], (o + err).strip()[-200:]))
    # the loss to 6 decimals: mhe grad over the same T+1 ids
    tokens = write(d, "loss.ids", " ".join(map(str, lids)) + "\n")
    rc, o, err = run("grad", "--model", out, "--tokens", tokens, "--out", os.path.join(d, "grad.safetensors"))
    m = re.search(r"loss ([0-9.]+)", o) if rc == 0 else None
    dl = abs(float(m.group(1)) - ref["loss"]) if m else float("inf")
    worst("GPT-2 loss", dl)
    check(dl < 1e-5, "%s: the loss (mhe grad): mhe %s, transformers %.7f %s" % (tag, m.group(1) if m else None, ref["loss"], err.strip()[-200:]))
    tokenizer_checks(tag + " GPT-2 BPE", out, d, ref, False)
    bad = 0
    for i, (t, ids) in enumerate(zip(ref["texts"], ref["text_ids"])):
        p = write(d, "ids.txt", " ".join(map(str, ids)))
        r = subprocess.run([MHE, "tokenize", "decode", "--model", out, "--data", p], capture_output=True)
        bad += not (r.returncode == 0 and r.stdout == ref["decoded"].get(str(i), t).encode("utf-8"))
    check(bad == 0, "%s: %d texts decode differently from tokenizers" % (tag, bad))


def bert_mlm_checks(tag, src, d, ref):
    out = imported(d, src, "bertmlm")
    if not out:
        return
    check_rows(tag + " BERT MLM", mhe_logits(out, ref["ids"], types=ref["types"]), ref["logits"])
    tokenizer_checks(tag + " WordPiece", out, d, ref, True)
    rc, o, err = run("import", src, "-o", os.path.join(d, "bm.safetensors"), "--mask-token", ref["mask_token"])
    check(rc == 0 and " mask_token=%d " % ref["mask_token"] in o, "%s: --mask-token %d is stored: %s" % (tag, ref["mask_token"], err.strip()))


def bert_cls_checks(tag, src, d, ref):
    out = imported(d, src, "bertcls")
    if not out:
        return
    dmax = 0.0
    for row, ids, types, want in zip(ref["rows"], ref["ids"], ref["types"], ref["logits"]):
        got = mhe_logits(out, ids, "cls", types)
        dmax = max(dmax, max_diff(got, [want]))
        if len(row) == 2:
            check(ids_of(out, d, row[1], True) == ids, "%s: %r encodes to the reference ids" % (tag, row[1]))
    worst("logits", dmax)
    check(dmax < TOL, "%s BERT classifier: logits differ by %g" % (tag, dmax))
    data = write(d, "cls.txt", "".join("\t".join(map(str, r)) + "\n" for r in ref["rows"]))
    rc, o, err = run("eval", "--task", "cls", "--model", out, "--data", data, "--seq_len", 32)
    m = re.search(r"loss ([0-9.]+)", o) if rc == 0 else None
    dl = abs(float(m.group(1)) - ref["loss"]) if m else float("inf")
    worst("BERT classifier eval loss", dl)
    check(dl < 2e-4, "%s: eval --task cls loss: mhe %s, transformers %.6f %s" % (tag, m.group(1) if m else None, ref["loss"], err.strip()[-200:]))


def fixture_checks(top, d):
    tag = os.path.basename(top)
    with open(os.path.join(top, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    w = os.path.join(d, tag)
    os.makedirs(w)
    gpt2_checks(tag, os.path.join(top, "gpt2"), w, ref["gpt2"])
    bert_mlm_checks(tag, os.path.join(top, "bert-mlm"), w, ref["bert-mlm"])
    bert_cls_checks(tag, os.path.join(top, "bert-cls"), w, ref["bert-cls"])
    for name in ("gpt2", "bert-mlm", "bert-cls"):
        for f in os.listdir(os.path.join(top, name)):
            check(f in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"), "%s/%s: an unexpected file %s" % (tag, name, f))


def config_checks(tops, d):
    """every config of configs/ (each version's save_pretrained and full dump) imports with a
    model fixture's weights; the generate() settings of the 4.x dumps are defaults (no note)"""
    weights = {"gpt2": os.path.join(tops[0], "gpt2"), "bert": os.path.join(tops[0], "bert-mlm")}
    n = 0
    for cfg in sorted(glob.glob(os.path.join(FIXTURES, "tf-*", "configs", "*.json"))):
        tag = "%s/%s" % (cfg.split(os.sep)[-3], os.path.basename(cfg))
        kind = os.path.basename(cfg).split("_")[0].split(".")[0]
        src = model_dir(weights[kind], os.path.join(d, "cfg%d" % n), cfg)
        n += 1
        out = src + ".safetensors"
        rc, _, err = run("import", src, "-o", out)
        check(rc == 0 and "generate() settings" not in err, "%s imports: rc %d %s" % (tag, rc, err.strip()[-300:]))
    check(n >= 16, "configs of at least 4 transformers versions: %d files" % n)
    return n


def edited(src, dst, **changes):
    shutil.copytree(src, dst)
    p = os.path.join(dst, "config.json")
    with open(p) as f:
        c = json.load(f)
    c.update(changes)
    with open(p, "w") as f:
        json.dump(c, f)
    return dst


def key_checks(top, d):
    """keys across versions: accepted in any value where they leave the computation alone,
    refused by name where they change it"""
    g, b = os.path.join(top, "gpt2"), os.path.join(top, "bert-mlm")
    k = [0]

    def imp(src, **changes):
        k[0] += 1
        dst = edited(src, os.path.join(d, "key%d" % k[0]), **changes)
        out = dst + ".safetensors"
        rc, _, err = run("import", dst, "-o", out)
        return rc, err, os.path.exists(out)

    inert = {"dtype": "bfloat16", "torch_dtype": "float16", "use_bfloat16": True, "torchscript": True, "tf_legacy_loss": True,
             "_attn_implementation_autoset": True, "_attn_implementation": "sdpa", "attn_implementation": "eager",
             "output_attentions": True, "output_hidden_states": True, "return_dict": False, "chunk_size_feed_forward": 4,
             "is_encoder_decoder": False, "tie_encoder_decoder": False, "pruned_heads": {}, "cross_attention_hidden_size": None,
             "problem_type": "regression", "_commit_hash": "abc", "xla_device": False, "architectures": ["X"],
             "transformers_version": "9.9.9", "_name_or_path": "a/b", "task_specific_params": {"x": {"y": 1}}}
    for src in (g, b):
        for key, val in inert.items():
            rc, err, wrote = imp(src, **{key: val})
            check(rc == 0 and wrote, "%s: %s = %r is accepted: %s" % (os.path.basename(src), key, val, err.strip()[-200:]))
    changes = {"is_encoder_decoder": True, "tie_encoder_decoder": True, "pruned_heads": {"0": [1]},
               "cross_attention_hidden_size": 16, "add_cross_attention": True, "rotary_dim": 8,
               "scale_attn_by_inverse_layer_idx": True, "scale_attn_weights": False, "activation_function": "gelu_fast",
               "some_new_setting": 1}
    for key, val in changes.items():
        rc, err, wrote = imp(g, **{key: val})
        check(rc == 1 and not wrote and "'%s'" % key in err,
              "gpt2: %s = %r is refused by name, nothing written: rc %d %s" % (key, val, rc, err.strip()[-200:]))
    for key, val in {"is_decoder": True, "position_embedding_type": "relative_key", "pruned_heads": {"1": [0]},
                     "is_encoder_decoder": True, "hidden_act": "gelu_fast", "unknown_key": None}.items():
        rc, err, wrote = imp(b, **{key: val})
        check(rc == 1 and not wrote and "'%s'" % key in err, "bert: %s = %r is refused by name: rc %d %s" % (key, val, rc, err.strip()[-200:]))
    # generate() settings: any value, the ones off their defaults named in the note
    rc, err, wrote = imp(g, temperature=0.7, top_k=50, max_length=128, do_sample=True, num_beams=1)
    note = err[err.find("generate() settings"):]
    check(rc == 0 and wrote and all(s in note for s in ("temperature", "max_length", "do_sample")) and "top_k" not in note
          and "num_beams" not in note, "generate() settings off their defaults are named, the defaults not: %s" % err.strip())
    # a UTF-8 byte-order mark before config.json's text is skipped; UTF-16 and a BOM elsewhere refused
    with open(os.path.join(g, "config.json"), "rb") as f:
        body = f.read()
    for i, (data, ok, needle) in enumerate(((b"\xef\xbb\xbf" + body, True, ""), (b"\xef\xbb\xbf\r\n" + body, True, ""),
                                            (b"\xef\xbb\xbf\xef\xbb\xbf" + body, False, "may hold one, at byte 3"),
                                            (body[:1] + b"\xef\xbb\xbf" + body[1:], False, "byte-order mark (EF BB BF); only the file's first bytes may hold one, at byte 1"),
                                            (b"\xff\xfe" + body.decode().encode("utf-16-le"), False, "UTF-16"),
                                            (b"\xfe\xff" + body.decode().encode("utf-16-be"), False, "UTF-16"))):
        dst = model_dir(g, os.path.join(d, "bom%d" % i))
        with open(os.path.join(dst, "config.json"), "wb") as f:
            f.write(data)
        rc, _, err = run("import", dst, "-o", dst + ".safetensors")
        check((rc == 0) == ok and needle in err, "config.json with a BOM (case %d): rc %d %s" % (i, rc, err.strip()[-200:]))


def live(d):
    """the fixtures regenerated with the installed transformers and tokenizers, when there are"""
    py = hf_python()
    if not py:
        print("SKIP the live comparison: torch, transformers, tokenizers and safetensors are not importable by %s%s"
              % (sys.executable, "" if os.environ.get("MHE_HF_PYTHON") else " (set MHE_HF_PYTHON to an interpreter that has them)"))
        RESULTS.skipped += 1
        return
    out = os.path.join(d, "live")
    p = subprocess.run([py, os.path.join(REPO, "tools", "scripts", "make_hf_fixtures.py"), "--out", out], capture_output=True, text=True,
                       timeout=600)
    if not check(p.returncode == 0, "make_hf_fixtures.py under %s: %s" % (py, p.stderr.strip()[-500:])):
        return
    print(p.stdout.strip())
    for top in sorted(glob.glob(os.path.join(out, "tf-*"))):
        fixture_checks(top, os.path.join(d, "live-checks"))


def main():
    why = mhe_missing()
    if why:
        return skip("test_hf_fixtures.py", why)
    tops = sorted(t for t in glob.glob(os.path.join(FIXTURES, "tf-*")) if os.path.exists(os.path.join(t, "reference.json")))
    if not check(len(tops) >= 2, "model fixtures of two transformers versions: %s" % tops):
        return finish()
    d = tmpdir("mhe_hf_")
    for top in tops:
        fixture_checks(top, d)
    config_checks(tops, d)
    key_checks(tops[-1], d)
    live(d)
    print("largest differences: " + ", ".join("%s %.2g" % kv for kv in sorted(WORST.items())))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
