"""Regenerates one transformers version's directory of tests/fixtures/hf/: tiny
random GPT-2 and BERT models saved by that version's save_pretrained, their
tokenizers trained by the tokenizers package on examples/data's fortunes, and
what transformers and tokenizers compute on them (reference.json), which
tests/test_hf_fixtures.py holds `mhe import` and mhe's tokenizers to without
any Python package.

    python3 tools/scripts/make_hf_fixtures.py [--out tests/fixtures/hf] [--configs-only]

writes OUT/tf-VERSION/ for the transformers it runs under (VERSION its version):
  gpt2/, bert-mlm/, bert-cls/   config.json, model.safetensors, tokenizer.json
  configs/gpt2.json, bert.json   config.json as save_pretrained writes it, and
  configs/gpt2_full.json, bert_full.json   every key this version's config writes
                                 (to_json_string(use_diff=False)), the models' shapes
                                 (--configs-only: only these; needs only transformers)
  reference.json                 the package versions used and, per model, the ids,
                                 logits, losses, greedy tokens and tokenizer ids
Needs torch, transformers and tokenizers (any 4.x or 5.x). The weights are moved
off their initial values (a bias at 0 or a norm at 1 would hide a mapping error)
and stored in float32, float16 or bfloat16 (the reference computes in float32 from
the stored values). Deterministic for a given set of package versions.
"""
import argparse
import json
import os
import random
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_TEXTS = 80           # random multi-script texts per tokenizer

# code points assigned in Unicode 6.1 or earlier, whose classes no later version changed:
# the fixtures test the tokenizers, not a Unicode table's age
SCRIPTS = [
    (0x20, 0x7E), (0xA0, 0xFF), (0x100, 0x17F), (0x300, 0x36F), (0x391, 0x3C9), (0x410, 0x44F), (0x5D0, 0x5EA),
    (0x621, 0x64A), (0x660, 0x669), (0x905, 0x939), (0x966, 0x96F), (0xE01, 0xE30), (0x3041, 0x3096), (0x30A1, 0x30FA),
    (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x2010, 0x2027), (0x1F600, 0x1F64F), (0xFF01, 0xFF5E),
]
SPACES = [" ", " ", " ", "  ", "\n", "\t", "\u00a0", "\u3000", "\r\n", " \n "]


def random_texts(seed, n):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            lo, hi = rng.choice(SCRIPTS)
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 7))))
            parts.append(rng.choice(SPACES))
        if rng.random() < 0.3:
            parts.append(rng.choice(["don't", "it's", "3.14", "1234567", "[MASK]", "Héllo", "naïve café", "'ll", "WORLD"]))
        out.append("".join(parts))
    return out


def corpus():
    with open(os.path.join(REPO, "examples", "data", "fortunes_train.tsv"), encoding="utf-8") as f:
        return [line.split("\t", 1)[1].rstrip("\n") for line in f if "\t" in line]


def moved(torch, model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def save(torch, model, d, dtype):
    """saves model in dtype; returns it back in float32 holding the stored values"""
    model = model.to(dtype)
    try:
        model.save_pretrained(d, safe_serialization=True)
    except TypeError:   # 5.x has no safe_serialization: safetensors is all it writes
        model.save_pretrained(d)
    return model.to(torch.float32).eval()


def rows(logits):
    """the first, a middle and the last position's logits (6 digits): every weight shows in the last"""
    T = len(logits)
    return {str(t): [float("%.6g" % v) for v in logits[t]] for t in sorted({0, T // 2, T - 1})}


def bpe_tokenizer(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    return tok


def wordpiece_tokenizer(texts):
    from tokenizers import BertWordPieceTokenizer, processors
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(texts, vocab_size=300, min_frequency=2, show_progress=False)
    cls, sep = wp.token_to_id("[CLS]"), wp.token_to_id("[SEP]")
    wp.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return wp


def gpt2(torch, transformers, d, tok, texts, dtype):
    V = tok.get_vocab_size()
    cfg = transformers.GPT2Config(vocab_size=V, n_embd=16, n_layer=2, n_head=2, n_positions=32)
    m = save(torch, moved(torch, transformers.GPT2LMHeadModel(cfg), 11), d, dtype)
    tok.save(os.path.join(d, "tokenizer.json"))
    prompt = "A bug in the code is worth two"
    ids = tok.encode(prompt).ids
    line = "A complex system that works is invariably found to have evolved"
    lids = tok.encode(line).ids[:25]
    with torch.no_grad():
        logits = m(torch.tensor([ids])).logits[0]
        loss = m(torch.tensor([lids]), labels=torch.tensor([lids])).loss.item()
        greedy = m.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()
    text_ids = [tok.encode(t).ids for t in texts]
    return {"ids": ids, "logits": rows(logits.tolist()), "prompt": prompt, "greedy": greedy,
            "greedy_text": tok.decode(greedy), "loss_text": tok.decode(lids), "loss_ids": lids, "loss": loss,
            "texts": texts, "text_ids": text_ids,
            # decode(encode(t)) where it is not t (byte-level BPE gives t back)
            "decoded": {str(i): tok.decode(x) for i, x in enumerate(text_ids) if tok.decode(x) != texts[i]}}


def bert_cfg(transformers, V, **kw):
    return transformers.BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=32, **kw)


def bert_mlm(torch, transformers, d, wp, texts, dtype):
    V = wp.get_vocab_size()
    m = save(torch, moved(torch, transformers.BertForMaskedLM(bert_cfg(transformers, V)), 12), d, dtype)
    wp.save(os.path.join(d, "tokenizer.json"))
    enc = wp.encode("The [MASK] of the code is worth two", "in the documentation")
    with torch.no_grad():
        logits = m(torch.tensor([enc.ids]), token_type_ids=torch.tensor([enc.type_ids])).logits[0]
    return {"ids": enc.ids, "types": enc.type_ids, "logits": rows(logits.tolist()),
            "mask_token": wp.token_to_id("[MASK]"), "texts": texts, "text_ids": [wp.encode(t).ids for t in texts]}


def bert_cls(torch, transformers, d, wp, dtype):
    V = wp.get_vocab_size()
    m = save(torch, moved(torch, transformers.BertForSequenceClassification(bert_cfg(transformers, V, num_labels=3)), 13), d, dtype)
    wp.save(os.path.join(d, "tokenizer.json"))
    rows = [(0, "A bug in the code", None), (1, "is worth two", "in the documentation"), (2, "Naïve café!", None),
            (1, "Wrong, cretin!", "you notice"), (0, "PDP", None), (2, "Old Testament god", "no mercy")]
    ce = torch.nn.functional.cross_entropy
    encs = [wp.encode(a, b) if b else wp.encode(a) for _, a, b in rows]
    with torch.no_grad():
        out = [m(torch.tensor([e.ids]), token_type_ids=torch.tensor([e.type_ids])).logits for e in encs]
        loss = sum(ce(o, torch.tensor([y])).item() for o, (y, _, _) in zip(out, rows)) / len(rows)
    return {"rows": [[y, a] + ([b] if b else []) for y, a, b in rows], "ids": [e.ids for e in encs],
            "types": [e.type_ids for e in encs], "logits": [[float("%.6g" % v) for v in o[0].tolist()] for o in out], "loss": loss}


def configs(transformers, top, V):
    """the configs of the models' shapes as this version writes them, diff and full"""
    d = os.path.join(top, "configs")
    os.makedirs(d, exist_ok=True)
    for name, c in (("gpt2", transformers.GPT2Config(vocab_size=V, n_embd=16, n_layer=2, n_head=2, n_positions=32)),
                    ("bert", bert_cfg(transformers, V))):
        c.save_pretrained(os.path.join(d, name))
        os.replace(os.path.join(d, name, "config.json"), os.path.join(d, name + ".json"))
        os.rmdir(os.path.join(d, name))
        with open(os.path.join(d, name + "_full.json"), "w") as f:
            f.write(c.to_json_string(use_diff=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "hf"))
    ap.add_argument("--configs-only", action="store_true", help="only configs/ (transformers without torch)")
    a = ap.parse_args()
    if a.configs_only:
        import transformers
        configs(transformers, os.path.join(a.out, "tf-" + transformers.__version__), 300)
        print("wrote the configs of transformers %s" % transformers.__version__)
        return 0
    import safetensors
    import tokenizers
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    v = transformers.__version__
    top = os.path.join(a.out, "tf-" + v)
    os.makedirs(os.path.join(top, "configs"), exist_ok=True)
    texts = corpus()
    tok, wp = bpe_tokenizer(texts), wordpiece_tokenizer(texts)
    # the dtypes alternate between versions, so that both fixtures together read all three
    old = int(v.split(".")[0]) < 5
    dt = [torch.float16, torch.bfloat16, torch.float32] if old else [torch.float32, torch.float16, torch.bfloat16]
    ref = {"versions": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": v,
                        "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__},
           "gpt2": gpt2(torch, transformers, os.path.join(top, "gpt2"), tok, random_texts(1, N_TEXTS), dt[0]),
           "bert-mlm": bert_mlm(torch, transformers, os.path.join(top, "bert-mlm"), wp, random_texts(2, N_TEXTS), dt[1]),
           "bert-cls": bert_cls(torch, transformers, os.path.join(top, "bert-cls"), wp, dt[2])}
    assert tok.get_vocab_size() == wp.get_vocab_size() == 300   # what --configs-only writes
    configs(transformers, top, 300)
    with open(os.path.join(top, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))
    print("wrote %s (transformers %s, tokenizers %s, torch %s)" % (top, v, tokenizers.__version__, torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
