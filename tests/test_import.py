"""`mhe import`: small random GPT-2 and BERT models made with `transformers`,
saved with save_pretrained (safetensors), imported, and held to transformers'
own logits within 1e-4 on the same token ids (`mhe logits`); `mhe generate
--ids` greedy against GPT-2's generate(); an imported model trains; and every
bad input (config.json keys, tensors missing, extra or misshapen, bad JSON) is
refused with the field or tensor named and nothing written; a tokenizer.json
beside the weights is attached (byte-level BPE: text in, text out as the
tokenizers package encodes; WordPiece: a BERT classifier's logits on text equal
transformers' on tokenizer(text)) or refused (broken, another size).
Needs torch and transformers (skipped cleanly without them) and build/mhe."""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import RESULTS, check, finish, mhe_missing, skip, tmpdir, torch_missing  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402
from mhetest import hf_python, max_diff, mhe_logits  # noqa: E402

TOL = 1e-4



def import_ok(src, out, *extra):
    rc, _, err = run("import", src, "-o", out, *extra)
    check(rc == 0 and os.path.isfile(out), "import %s: rc %d %s" % (src, rc, err.strip()))
    return rc == 0


def refused(src, out, needle, what):
    """mhe import fails, names the field or tensor, writes nothing"""
    if os.path.exists(out):
        os.remove(out)
    rc, _, err = run("import", src, "-o", out)
    ok = rc == 1 and needle in err and not os.path.exists(out) and "nothing written" in err
    check(ok, "%s: want a refusal naming %r, got rc %d: %s" % (what, needle, rc, err.strip()))


def edit_config(src, dst, **changes):
    shutil.copytree(src, dst)
    p = os.path.join(dst, "config.json")
    c = json.load(open(p))
    for k, v in changes.items():
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    json.dump(c, open(p, "w"))


def edit_tensors(src, dst, fn):
    """a copy of src whose model.safetensors went through fn(dict of tensors)"""
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, dst)
    p = os.path.join(dst, "model.safetensors")
    t = load_file(p)
    fn(t)
    save_file(t, p, metadata={"format": "pt"})


def perturb(torch, model):
    """transformers starts biases at 0 and norms at 1: move every parameter, so that a
    bias, norm or table mapped wrongly (or not at all) shows in the logits"""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))


def gpt2_tests(torch, transformers, d):
    torch.manual_seed(1)
    cfg = transformers.GPT2Config(vocab_size=101, n_embd=48, n_layer=3, n_head=4, n_positions=40)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    perturb(torch, hf)
    src = os.path.join(d, "gpt2")
    hf.save_pretrained(src, safe_serialization=True)
    out = os.path.join(d, "gpt2.safetensors")
    if not import_ok(src, out):
        return
    ids = [int(x) for x in torch.randint(0, 101, (17,))]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0].tolist()
    diff = max_diff(mhe_logits(out, ids), want)
    check(diff < TOL, "gpt2 logits differ from transformers' by %g" % diff)

    # the hub's gpt2 file: names without "transformer.", the causal-mask buffers of older transformers
    def hub_layout(t):
        for k in list(t):
            t[k[len("transformer."):]] = t.pop(k)
        for n in range(3):
            t["h.%d.attn.bias" % n] = torch.tril(torch.ones(40, 40)).view(1, 1, 40, 40)
            t["h.%d.attn.masked_bias" % n] = torch.tensor(-1e4)
    hub = os.path.join(d, "gpt2hub")
    edit_tensors(src, hub, hub_layout)
    out_hub = os.path.join(d, "gpt2hub.safetensors")
    if import_ok(hub, out_hub):
        diff = max_diff(mhe_logits(out_hub, ids), want)
        check(diff < TOL, "gpt2 in the hub's layout: logits differ by %g" % diff)

    # greedy generation, ids in and ids out, against generate()
    prompt = ids[:5]
    with torch.no_grad():
        g = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0)[0].tolist()
    rc, o, err = run("generate", "--model", out, "--ids", " ".join(map(str, prompt)), "--n", 12, "--temperature", 0)
    got = [int(x) for x in o.split()] if rc == 0 else None
    check(got == g, "gpt2 greedy generate: mhe %s, transformers %s %s" % (got, g, err.strip()[-200:]))

    # an untied LM head (tie_word_embeddings false) and a custom n_inner, relu
    torch.manual_seed(2)
    cfg2 = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=16, n_inner=40,
                                   tie_word_embeddings=False, activation_function="relu", layer_norm_epsilon=1e-6)
    hf2 = transformers.GPT2LMHeadModel(cfg2).eval()
    perturb(torch, hf2)
    src2 = os.path.join(d, "gpt2b")
    hf2.save_pretrained(src2, safe_serialization=True)
    out2 = os.path.join(d, "gpt2b.safetensors")
    if import_ok(src2, out2):
        ids2 = [3, 9, 27, 1, 63, 0, 5]
        with torch.no_grad():
            want2 = hf2(torch.tensor([ids2])).logits[0].tolist()
        diff = max_diff(mhe_logits(out2, ids2), want2)
        check(diff < TOL, "gpt2 (untied head, n_inner, relu) logits differ by %g" % diff)

    # the imported model fine-tunes and evaluates with the CLI (bytes as ids < vocab)
    text = os.path.join(d, "text.txt")
    open(text, "w").write("ABCABDABE " * 40)
    ft = os.path.join(d, "ft.safetensors")
    rc, o, err = run("train", "--model", out, "--data", text, "--out", ft, "--steps", 3, "--batch", 2,
                     "--seq_len", 16, "--quiet")
    check(rc == 0 and os.path.isfile(ft), "train on the imported gpt2: rc %d %s" % (rc, err.strip()[-300:]))
    rc, o, err = run("eval", "--model", out, "--data", text, "--seq_len", 16, "--batches", 2)
    check(rc == 0 and "perplexity" in o, "eval on the imported gpt2: rc %d %s" % (rc, err.strip()[-300:]))

    # bad input, each refused by name
    bad = os.path.join(d, "bad.safetensors")
    k = [0]

    def nd():
        k[0] += 1
        return os.path.join(d, "bad%d" % k[0])

    b = nd()

    edit_config(src, b, activation_function="quick_gelu")
    refused(b, bad, "activation_function", "unsupported activation")
    b = nd()
    edit_config(src, b, scale_attn_by_inverse_layer_idx=True)
    refused(b, bad, "scale_attn_by_inverse_layer_idx", "per-layer attention scale")
    b = nd()
    edit_config(src, b, rotary_dim=16)
    refused(b, bad, "rotary_dim", "an unknown position scheme key")
    b = nd()
    edit_config(src, b, n_embd=50)
    refused(b, bad, "n_embd", "n_embd not a multiple of n_head")
    b = nd()
    edit_config(src, b, n_layer=None)
    refused(b, bad, "'n_layer' is missing", "missing n_layer")
    b = nd()
    edit_config(src, b, n_layer=4)
    refused(b, bad, "transformer.h.3.ln_1.weight", "a layer the file lacks")
    b = nd()
    edit_config(src, b, n_positions=41)
    refused(b, bad, "transformer.wpe.weight", "positions of the wrong shape")
    b = nd()
    edit_config(src, b, model_type="gptj")
    refused(b, bad, "model_type", "another model type")
    b = nd()
    edit_tensors(src, b, lambda t: t.pop("transformer.h.1.attn.c_proj.bias"))
    refused(b, bad, "transformer.h.1.attn.c_proj.bias", "a missing tensor")
    b = nd()
    edit_tensors(src, b, lambda t: t.update({"transformer.h.0.attn.extra": torch.zeros(3)}))
    refused(b, bad, "transformer.h.0.attn.extra", "an extra tensor")
    b = nd()
    edit_tensors(src, b, lambda t: t.update({"transformer.h.0.mlp.c_fc.weight": torch.zeros(192, 48)}))
    refused(b, bad, "transformer.h.0.mlp.c_fc.weight", "a transposed Conv1D weight")
    b = nd()
    edit_tensors(src, b, lambda t: t.update({"lm_head.weight": torch.zeros(101, 48)}))
    refused(b, bad, "lm_head.weight", "a tied head that differs from the embeddings")
    for name, text in (("truncated", '{"model_type": "gpt2", "n_embd": 4'), ("trailing comma", '{"model_type": "gpt2",}'),
                       ("duplicate key", '{"model_type": "gpt2", "model_type": "gpt2"}'),
                       ("comment", '{"model_type": "gpt2" /* c */}'), ("bad escape", '{"model_type": "gp\\x"}'),
                       ("NaN", '{"model_type": "gpt2", "n_embd": NaN}'), ("leading zero", '{"n_embd": 048}'),
                       ("two values", '{} {}')):
        b = nd()
        shutil.copytree(src, b)
        open(os.path.join(b, "config.json"), "w").write(text)
        refused(b, bad, "config.json", "bad JSON (%s)" % name)
    b = nd()
    os.makedirs(b)
    refused(b, bad, "config.json", "no config.json")
    # valid JSON the reader must take: escapes, a surrogate pair, raw UTF-8, exponents, nesting
    b = nd()
    shutil.copytree(src, b)
    c = json.load(open(os.path.join(src, "config.json")))
    text = json.dumps(c)[:-1] + ', "_name_or_path": "caf\\u00e9 \\ud83d\\ude00 \u00fc \\"q\\" \\/", ' \
        '"task_specific_params": {"a": [1, -0.5e-3, 2E+2, true, false, null, {}, []]}, "finetuning_task": null}'
    open(os.path.join(b, "config.json"), "w", encoding="utf-8").write(text)
    rc, _, err = run("import", b, "-o", bad)
    check(rc == 0, "valid JSON with escapes, UTF-8 and nesting is read: %s" % err.strip())
    b = nd()
    shutil.copytree(src, b)
    with open(os.path.join(b, "model.safetensors"), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(b, "model.safetensors")) - 8)
    refused(b, bad, "model.safetensors", "a truncated model.safetensors")


def bert_tests(torch, transformers, d):
    torch.manual_seed(3)
    kw = dict(vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=80,
              max_position_embeddings=40, type_vocab_size=2)
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**kw)).eval()
    perturb(torch, hf)
    src = os.path.join(d, "bert")
    hf.save_pretrained(src, safe_serialization=True)
    out = os.path.join(d, "bert.safetensors")
    ids = [int(x) for x in torch.randint(0, 97, (19,))]
    if import_ok(src, out, "--mask-token", 5):
        with torch.no_grad():
            want = hf(torch.tensor([ids])).logits[0].tolist()
        diff = max_diff(mhe_logits(out, ids), want)
        check(diff < TOL, "bert MLM logits differ from transformers' by %g" % diff)
        # a sentence pair: token types 0 for the first text, 1 for the second
        types = [0] * 8 + [1] * 11
        with torch.no_grad():
            want = hf(torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits[0].tolist()
        diff = max_diff(mhe_logits(out, ids, types=types), want)
        check(diff < TOL, "bert MLM logits with token types (a pair) differ by %g" % diff)
        for types, needle in (([0] * 18 + [2], "outside the token types"), ([0] * 18, "18 types for 19")):
            rc, _, err = run("logits", "--model", out, "--ids", " ".join(map(str, ids)), "--types", " ".join(map(str, types)))
            check(rc == 1 and needle in err, "bad --types: want %r, got rc %d %s" % (needle, rc, err.strip()))
        rc, o, err = run("inspect", out)
        check(rc == 0 and "mask_token" in o and "5" in o, "the --mask-token is in the checkpoint")
        text = os.path.join(d, "btext.txt")
        open(text, "w").write("ABCABDABE " * 40)
        ft = os.path.join(d, "bft.safetensors")
        rc, o, err = run("train", "--model", out, "--data", text, "--out", ft, "--steps", 3, "--batch", 2,
                         "--seq_len", 16, "--quiet")
        check(rc == 0 and os.path.isfile(ft), "masked-LM training of the imported bert: rc %d %s" % (rc, err.strip()[-300:]))
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "python"))
        import mhe_torch
        try:
            mhe_torch.load_checkpoint(out)
            msg = None
        except mhe_torch.CheckpointError as e:
            msg = str(e)
        check(msg is not None and "emb_norm" in msg, "the PyTorch twin refuses the imported BERT by field: %r" % msg)
        rc, o, err = run("generate", "--model", out, "--ids", "1 2")
        check(rc == 1 and "decoder" in err, "generate refuses the imported encoder: %s" % err.strip())

    # a relu BERT with an untied decoder and token types of 1 row
    torch.manual_seed(4)
    kw2 = dict(kw, hidden_act="relu", tie_word_embeddings=False, type_vocab_size=1, layer_norm_eps=1e-5)
    hf2 = transformers.BertForMaskedLM(transformers.BertConfig(**kw2)).eval()
    perturb(torch, hf2)
    src2 = os.path.join(d, "bert2")
    hf2.save_pretrained(src2, safe_serialization=True)
    out2 = os.path.join(d, "bert2.safetensors")
    if import_ok(src2, out2):
        with torch.no_grad():
            want = hf2(torch.tensor([ids])).logits[0].tolist()
        diff = max_diff(mhe_logits(out2, ids), want)
        check(diff < TOL, "bert (relu, untied decoder) logits differ by %g" % diff)

    # sequence classification: the pooler and the classifier
    torch.manual_seed(5)
    hc = transformers.BertForSequenceClassification(transformers.BertConfig(num_labels=3, **kw)).eval()
    perturb(torch, hc)
    srcc = os.path.join(d, "bertc")
    hc.save_pretrained(srcc, safe_serialization=True)
    outc = os.path.join(d, "bertc.safetensors")
    if import_ok(srcc, outc):
        with torch.no_grad():
            want = hc(torch.tensor([ids])).logits.tolist()
        diff = max_diff(mhe_logits(outc, ids, "cls"), want)
        check(diff < TOL, "bert classification logits differ from transformers' by %g" % diff)
        types = [0] * 6 + [1] * 13
        with torch.no_grad():
            want = hc(torch.tensor([ids]), token_type_ids=torch.tensor([types])).logits.tolist()
        diff = max_diff(mhe_logits(outc, ids, "cls", types), want)
        check(diff < TOL, "bert classification of a pair (token types) differs by %g" % diff)
        data = os.path.join(d, "cls.txt")
        open(data, "w").write("".join("%d\t%s\n" % (i % 3, "ABC"[i % 3] * (3 + i % 5)) for i in range(30)))
        ft = os.path.join(d, "bcft.safetensors")
        rc, o, err = run("train", "--task", "cls", "--model", outc, "--data", data, "--out", ft, "--steps", 3,
                         "--batch", 4, "--seq_len", 16, "--quiet")
        check(rc == 0 and os.path.isfile(ft), "fine-tuning the imported classifier: rc %d %s" % (rc, err.strip()[-300:]))
        rc, o, err = run("eval", "--task", "cls", "--model", ft, "--data", data, "--seq_len", 16)
        check(rc == 0 and "acc" in o, "eval --task cls of the fine-tuned import: rc %d %s" % (rc, err.strip()[-300:]))

    # BertForPreTraining (bert-base-uncased's file): refused with the hint, then --drop-nsp; and the
    # hub's converted files keep BERT's TensorFlow names LayerNorm.gamma / .beta
    torch.manual_seed(6)
    hp = transformers.BertForPreTraining(transformers.BertConfig(**kw)).eval()
    perturb(torch, hp)
    srcp = os.path.join(d, "bertpt")
    hp.save_pretrained(srcp, safe_serialization=True)
    outp = os.path.join(d, "bertpt.safetensors")
    rc, _, err = run("import", srcp, "-o", outp)
    check(rc == 1 and "BertForPreTraining" in err and "--drop-nsp" in err and not os.path.exists(outp),
          "a pre-training file is refused, naming the next-sentence head and --drop-nsp: %s" % err.strip())
    with torch.no_grad():
        want = hp(torch.tensor([ids])).prediction_logits[0].tolist()
    if import_ok(srcp, outp, "--drop-nsp"):
        diff = max_diff(mhe_logits(outp, ids), want)
        check(diff < TOL, "BertForPreTraining imported with --drop-nsp: MLM logits differ by %g" % diff)
    tf = os.path.join(d, "berttf")
    edit_tensors(srcp, tf, lambda t: [t.update({k[:-6] + "gamma" if k.endswith("LayerNorm.weight") else k[:-4] + "beta": t.pop(k)})
                                      for k in list(t) if k.endswith(("LayerNorm.weight", "LayerNorm.bias"))])
    outtf = os.path.join(d, "berttf.safetensors")
    if import_ok(tf, outtf, "--drop-nsp"):
        diff = max_diff(mhe_logits(outtf, ids), want)
        check(diff < TOL, "LayerNorm.gamma / .beta names: logits differ by %g" % diff)
    rc, _, err = run("import", srcc, "-o", outp + "x", "--drop-nsp")
    check(rc == 1 and "--drop-nsp" in err, "--drop-nsp on a classifier is refused: %s" % err.strip())

    bad = os.path.join(d, "bbad.safetensors")
    k = [0]

    def nd():
        k[0] += 1
        return os.path.join(d, "bbad%d" % k[0])

    b = nd()

    edit_config(src, b, position_embedding_type="relative_key")
    refused(b, bad, "position_embedding_type", "relative positions")
    b = nd()
    edit_config(src, b, hidden_act="gelu_fast")
    refused(b, bad, "hidden_act", "an unsupported activation")
    b = nd()
    edit_config(src, b, is_decoder=True)
    refused(b, bad, "is_decoder", "a BERT decoder")
    b = nd()
    edit_config(src, b, intermediate_size=81)
    refused(b, bad, "bert.encoder.layer.0.intermediate.dense.weight", "intermediate_size that disagrees with the tensors")
    b = nd()
    edit_config(src, b, type_vocab_size=3)
    refused(b, bad, "bert.embeddings.token_type_embeddings.weight", "type_vocab_size that disagrees")
    b = nd()
    edit_config(src, b, num_hidden_layers=2)
    refused(b, bad, "bert.encoder.layer.2.", "fewer layers than the file (extra tensors)")
    b = nd()
    edit_config(src, b, layer_norm_eps=0)
    refused(b, bad, "layer_norm_eps", "a zero epsilon")
    b = nd()
    edit_tensors(src, b, lambda t: t.pop("cls.predictions.transform.LayerNorm.bias"))
    refused(b, bad, "cls.predictions.transform.LayerNorm.bias", "a missing MLM transform tensor")
    b = nd()
    edit_tensors(src, b, lambda t: t.pop("cls.predictions.bias"))
    refused(b, bad, "no head", "an MLM model without its output bias has no recognisable head")
    b = nd()
    edit_tensors(src, b, lambda t: t.update({"bert.embeddings.position_ids": torch.arange(40).flip(0)[None]}))
    refused(b, bad, "bert.embeddings.position_ids", "permuted position ids")
    b = nd()
    edit_tensors(srcc, b, lambda t: t.pop("bert.pooler.dense.weight"))
    refused(b, bad, "bert.pooler.dense.weight", "a classifier without its pooler")
    b = nd()
    edit_tensors(srcc, b, lambda t: t.update({"cls.predictions.bias": torch.zeros(97)}))
    refused(b, bad, "both", "an MLM head beside a classifier")
    b = nd()
    edit_config(srcc, b, problem_type="multi_label_classification")
    refused(b, bad, "problem_type", "multi-label classification")
    b = nd()
    edit_tensors(src, b, lambda t: t.update({"bert.embeddings.word_embeddings.weight": t["bert.embeddings.word_embeddings.weight"].half()}))
    check(os.path.exists(b), "made an F16 copy")
    rc, _, err = run("import", b, "-o", bad)
    check(rc == 0, "an F16 tensor is read (widened to float32): %s" % err.strip())


def cli_tests(d):
    """the flags around the import that need no torch: usage errors and --ids, on a byte model"""
    m = os.path.join(d, "byte.safetensors")
    rc, _, err = run("init", "--d_model", 16, "--n_heads", 2, "--n_layers", 1, "--max_seq_len", 8, "--out", m)
    if not check(rc == 0, "mhe init: %s" % err):
        return
    rc, o, err = run("logits", "--model", m, "--ids", "65 66 67")
    rows = [r.split() for r in o.strip().split("\n")] if rc == 0 else []
    check(len(rows) == 3 and all(len(r) == 256 for r in rows), "logits: 3 rows of 256: rc %d %s" % (rc, err))
    rc, o2, err = run("generate", "--model", m, "--prompt", "ABC", "--n", 4, "--temperature", 0)
    rc3, o3, err3 = run("generate", "--model", m, "--ids", "65 66 67", "--n", 4, "--temperature", 0)
    got = [int(x) for x in o3.split()] if rc3 == 0 else None
    check(rc == 0 and got is not None and bytes(got).decode("latin-1") == o2.rstrip("\n"),
          "generate --ids gives the ids of the text generate --prompt gives: %r vs %r %s" % (got, o2, err3))
    for args, needle in ((["logits", "--model", m, "--ids", "65 256"], "outside the vocabulary"),
                         (["logits", "--model", m, "--ids", "65 x"], "not a number"),
                         (["logits", "--model", m, "--ids", " "], "nothing given"),
                         (["logits", "--model", m, "--ids", "1 2", "--types", "0 0"], "type_vocab=0"),
                         (["logits", "--model", m, "--ids", "-1"], "outside the vocabulary"),
                         (["logits", "--model", m, "--ids", "1 2 3 4 5 6 7 8 9"], "max_seq_len"),
                         (["logits", "--model", m, "--ids", "1", "--task", "cls"], "no classification head"),
                         (["generate", "--model", m, "--ids", "1", "--prompt", "A"], "not both"),
                         (["import", d], "--out"),
                         (["import", "-o", os.path.join(d, "x.safetensors")], "one directory"),
                         (["import", d, d, "-o", os.path.join(d, "x.safetensors")], "one directory"),
                         (["import", os.path.join(d, "nowhere"), "-o", os.path.join(d, "x.safetensors")], "config.json")):
        rc, _, err = run(*args)
        check(rc in (1, 2) and needle in err, "%s: want an error with %r, got rc %d %s" % (" ".join(args[:1] + args[3:]), needle, rc, err.strip()))
    check(not os.path.exists(os.path.join(d, "x.safetensors")), "a refused import writes nothing")


def tokenizer_tests(torch, transformers, d):
    """tokenizer.json beside the weights: a byte-level BPE is attached (text in and out
    as the tokenizers package encodes it), so is a WordPiece one (BERT's: [CLS] text [SEP]
    into the classifier, logits as transformers'), a broken one or one of another size is
    refused"""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        print("SKIP the tokenizer.json cases: no tokenizers package")
        RESULTS.skipped += 1
        return
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
    text = "".join(open(os.path.join(docs, f), encoding="utf-8").read() for f in sorted(os.listdir(docs)) if f.endswith(".md"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    V = tok.get_vocab_size()
    torch.manual_seed(3)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2,
                                                              n_positions=48)).eval()
    perturb(torch, hf)
    src = os.path.join(d, "gpt2tok")
    hf.save_pretrained(src, safe_serialization=True)
    tok.save(os.path.join(src, "tokenizer.json"))
    out = os.path.join(d, "gpt2tok.safetensors")
    rc, _, err = run("import", src, "-o", out)
    check(rc == 0 and "tokenizer.json attached" in err, "a byte-level BPE tokenizer.json is attached: rc %d %s" % (rc, err.strip()))
    if rc != 0:
        return
    prompt = "The kind table of mhe.h"
    ids = tok.encode(prompt).ids
    prompt_file = os.path.join(d, "prompt.txt")
    with open(prompt_file, "w", encoding="utf-8") as f:
        f.write(prompt)
    rc, o, err = run("tokenize", "encode", "--model", out, "--data", prompt_file)
    check(rc == 0 and [int(x) for x in o.split()] == ids, "the attached tokenizer encodes as tokenizers does: %s vs %s %s"
          % (o.strip(), ids, err.strip()))
    with torch.no_grad():
        g = hf.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, pad_token_id=0)[0].tolist()
    rc, o, err = run("generate", "--model", out, "--prompt", prompt, "--n", 10, "--temperature", 0)
    want = tok.decode(g)
    check(rc == 0 and o.rstrip("\n") == want, "greedy generate from a text prompt: mhe %r, transformers %r %s"
          % (o, want, err.strip()[-200:]))

    small = os.path.join(d, "gpt2tok_small")   # a tokenizer of another size than vocab_size
    edit_config(src, small, vocab_size=V + 1)
    edit_tensors(small, small + "2", lambda t: t.update({k: torch.cat([v, v[:1]]) for k, v in list(t.items())
                                                         if k.endswith("wte.weight")}))
    refused(small + "2", os.path.join(d, "x.safetensors"), "tokenizer.json has %d tokens" % V, "a tokenizer of another size")
    broken = os.path.join(d, "gpt2tok_broken")
    shutil.copytree(src, broken)
    with open(os.path.join(broken, "tokenizer.json"), "r+", encoding="utf-8") as f:
        body = f.read()
        f.seek(0)
        f.truncate()
        f.write(body[:len(body) // 2])
    refused(broken, os.path.join(d, "x.safetensors"), "tokenizer.json", "a truncated tokenizer.json")

    from tokenizers import BertWordPieceTokenizer
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator([text], vocab_size=300, min_frequency=2, show_progress=False)
    Vb = wp.get_vocab_size()
    from tokenizers import processors
    cls_id, sep_id = wp.token_to_id("[CLS]"), wp.token_to_id("[SEP]")
    wp.post_processor = processors.TemplateProcessing(   # what bert-base-uncased's tokenizer.json has
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    torch.manual_seed(4)
    hb = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=Vb, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
        max_position_embeddings=64, num_labels=3)).eval()
    perturb(torch, hb)
    srcb = os.path.join(d, "berttok")
    hb.save_pretrained(srcb, safe_serialization=True)
    wp.save(os.path.join(srcb, "tokenizer.json"))
    outb = os.path.join(d, "berttok.safetensors")
    rc, _, err = run("import", srcb, "-o", outb)
    check(rc == 0 and "tokenizer.json attached (WordPiece, %d tokens)" % Vb in err,
          "a WordPiece tokenizer.json is attached: rc %d %s" % (rc, err.strip()))
    if rc != 0:
        return
    sentence = "Héllo, the KIND table of mhe.h: naïve [MASK] cafés!"
    ref = Tokenizer.from_file(os.path.join(srcb, "tokenizer.json"))
    ids = ref.encode(sentence).ids   # [CLS] ... [SEP], as BERT reads a text
    sfile = os.path.join(d, "sentence.txt")
    with open(sfile, "w", encoding="utf-8") as f:
        f.write(sentence)
    rc, o, err = run("tokenize", "encode", "--special", "--model", outb, "--data", sfile)
    got = [int(x) for x in o.split()] if rc == 0 else None
    check(got == ids, "the attached WordPiece encodes as tokenizers does, [CLS] and [SEP] included: %s vs %s %s"
          % (got, ids, err.strip()))
    with torch.no_grad():
        want = hb(torch.tensor([ids])).logits.tolist()
    diff = max_diff(mhe_logits(outb, ids, "cls"), want)
    check(diff < TOL, "the BERT classifier on text (WordPiece ids) differs from transformers' by %g" % diff)
    data = os.path.join(d, "wpcls.txt")   # text sets are read through the tokenizer, [CLS] and [SEP] around each
    with open(data, "w", encoding="utf-8") as f:
        f.write("".join("%d\t%s\n" % (i % 3, ["Naïve café", "the KIND table", "mhe.h reads text"][i % 3]) for i in range(12)))
    rc, o, err = run("eval", "--task", "cls", "--model", outb, "--data", data, "--seq_len", 32)
    check(rc == 0 and "acc" in o, "eval --task cls on text through the attached WordPiece: rc %d %s" % (rc, err.strip()[-300:]))
    # pairs, A<TAB>B: [CLS] A [SEP] B [SEP] with types 0 and 1, as tokenizer(A, B) gives transformers
    pairs = [("Naïve café", "the KIND table"), ("mhe.h reads text", "Héllo [MASK] cafés!"), ("the KIND", "table of mhe.h"),
             ("cafés", "naïve")]
    pdata = os.path.join(d, "wppairs.txt")
    with open(pdata, "w", encoding="utf-8") as f:
        f.write("".join("%d\t%s\t%s\n" % (i % 3, a, b) for i, (a, b) in enumerate(pairs)))
    rc, o, err = run("eval", "--task", "cls", "--model", outb, "--data", pdata, "--seq_len", 32)
    got = re.search(r"loss ([0-9.]+)", o) if rc == 0 else None
    enc = [ref.encode(a, b) for a, b in pairs]
    ce = torch.nn.functional.cross_entropy
    with torch.no_grad():
        want = sum(ce(hb(torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids])).logits, torch.tensor([i % 3])).item()
                   for i, e in enumerate(enc)) / len(enc)
        untyped = sum(ce(hb(torch.tensor([e.ids])).logits, torch.tensor([i % 3])).item() for i, e in enumerate(enc)) / len(enc)
    check(got is not None and abs(float(got.group(1)) - want) < 2e-4 and abs(untyped - want) > 1e-3,
          "pairs through the WordPiece template: mhe's loss %s, transformers' on tokenizer(A, B) %.4f (%.4f without the "
          "types) %s" % (got.group(1) if got else None, want, untyped, err.strip()[-200:]))


def main():
    why = mhe_missing()
    if why:
        return skip("test_import.py", why)
    py = hf_python()
    if py and py != sys.executable:   # $MHE_HF_PYTHON has transformers, this interpreter not: run there
        os.execv(py, [py] + sys.argv)
    d = tmpdir("mhe_import_")
    cli_tests(d)
    why = torch_missing()
    if why:
        print("SKIP the transformers comparisons: %s" % why)
        RESULTS.skipped += 1
        return finish()
    try:
        import torch
        import transformers
        import safetensors.torch  # noqa: F401
    except ImportError as e:
        print("SKIP the transformers comparisons: transformers/safetensors not available to %s (%s)" % (sys.executable, e))
        RESULTS.skipped += 1
        return finish()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    gpt2_tests(torch, transformers, d)
    bert_tests(torch, transformers, d)
    tokenizer_tests(torch, transformers, d)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
