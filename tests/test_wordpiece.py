"""WordPiece (BERT's tokenizer) through the tool (mhe tokenize), against the
Hugging Face `tokenizers` package where it is installed (the comparisons are
skipped, with a SKIP line, without it; the bad-input cases need only python3
and build/mhe).

  - tokenizers trains WordPiece vocabularies (BertWordPieceTokenizer) on the
    repository's docs under five normalizer settings (uncased BERT, cased,
    accents stripped but cased, no clean_text, no Chinese padding); mhe reads
    their tokenizer.json and gives the same ids as encode(add_special_tokens=
    False) on a held-out doc and on unusual text (accents, CJK, Hangul, İ,
    controls, Unicode spaces and punctuation, long words, [MASK] inside text),
    also with encode --threads 3 on 400 KB of it
  - a sweep over every 7th code point (and every code point with a
    decomposition or one of the tables' classes) in three-character words,
    with a vocabulary of every normalised character as a word and as a
    "##" piece: the normalizer and pre-tokenizer agree with tokenizers'
    character by character
  - --special puts the template's [CLS] and [SEP] around the ids
    (TemplateProcessing, BertProcessing; an error without one)
  - decode joins as tokenizers' WordPiece decoder does (with cleanup);
    convert writes mhe-wordpiece text, which encodes the same
  - bad input: an mhe-wordpiece file truncated or with a bad prefix, a
    tokenizer.json whose unk_token is not in the vocab, with merges, with a
    ByteLevel pre-tokenizer, a template of two specials before $A, a
    normalised added token the normalizer changes: a clear error
(mhe.h's WordPiece tables, every code point: tests/test_unicode.py)"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, RESULTS, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402

UNUSUAL = [
    "Héllo, WORLD! Naïve café résumé Ångström ÉCOLE façade Øre straße ﬁne ǅemal",
    "北京欢迎你 東京 中文字符 and 한국어 텍스트, 日本語のテキスト",
    "İstanbul ıi ΣΑΣ Ωμέγα Кириллица ÀÉÎÕÜ",
    "tabs\tand\nnewlines\r\n  runs   of spaces\u00a0nbsp\u3000ideographic\u2003em\u0085nel \x0b\x0c",
    "controls \x01\x02\x7f zero\u200bwidth soft\u00adhyphen bom\ufeff rep\ufffdlacement",
    "punct: «quotes» “curly” ‘single’ — dash – ¿qué? ¡sí! ... (paren) [bracket] {brace} §¶†‡•",
    "math ∑∫≤≥ ± × ÷ ½ currency $€£¥ emoji \U0001F389\U0001F44D\U0001F3FD",
    "don't can't I'm we've they're it's o'clock rock'n'roll e-mail U.S.A. 3.14 1,000",
    "supercalifragilisticexpialidocious" * 4 + " pneumonoultramicroscopicsilicovolcanoconiosis",
    "a [MASK] in text, [CLS] and [SEP] too, [UNK]ish and [mask] lower",
    "combining e\u0301 a\u0308 n\u0303 \u1e9b\u0323 decomposed",
]

SETTINGS = [   # (name, BertWordPieceTokenizer keyword arguments)
    ("uncased", dict(lowercase=True)),
    ("cased", dict(lowercase=False)),
    ("cased-stripped", dict(lowercase=False, strip_accents=True)),
    ("no-clean", dict(lowercase=True, clean_text=False)),
    ("no-chinese", dict(lowercase=True, handle_chinese_chars=False)),
]


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def ids_of(tok_path, data):
    rc, out, err = run("tokenize", "encode", "--tokenizer", tok_path, "--data", data)
    return (rc, [int(x) for x in out.split()] if rc == 0 else None, err.strip())


def sweep_text():
    """three-character words of every 7th scalar value, and of every value a table names"""
    import unicodedata
    cps = [c for c in range(32, 0x110000, 7) if not 0xD800 <= c < 0xE000]
    cps += [c for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000 and c not in (0x20,) and
            (unicodedata.decomposition(chr(c)) or unicodedata.category(chr(c))[0] in "PZ" or
             unicodedata.category(chr(c)) in ("Mn", "Cc", "Cf"))]
    cps += [0x130, 0xAC01, 0xD7A3, 0x4E00, 0xF900]
    return " ".join("".join(chr(c) for c in cps[i:i + 3]) for i in range(0, len(cps), 3))


def compare_settings(d, text_docs, held):
    from tokenizers import BertWordPieceTokenizer, Tokenizer
    held_text = held + "\n" + "\n".join(UNUSUAL)
    held_file = write(os.path.join(d, "held.txt"), held_text)
    for name, kw in SETTINGS:
        tk = BertWordPieceTokenizer(**kw)
        tk.train_from_iterator([text_docs], vocab_size=1500, min_frequency=2, show_progress=False)
        path = os.path.join(d, "wp-%s.json" % name)
        tk.save(path)
        tok = Tokenizer.from_file(path)
        want = tok.encode(held_text, add_special_tokens=False).ids
        rc, got, err = ids_of(path, held_file)
        first = next((i for i, (a, b) in enumerate(zip(got or [], want)) if a != b), None)
        check(rc == 0 and got == want, "%s: mhe's ids are tokenizers' on held-out text (%d ids; first difference at %s) %s"
              % (name, len(want), first, err))
        if name == "uncased":   # --threads: the text cut at lines, the same ids
            big = (held_text + "\r\n\n") * (400000 // len(held_text) + 1)
            rc, got, err = run("tokenize", "encode", "--tokenizer", path, "--data", write(os.path.join(d, "big.txt"), big), "--threads", 3)
            bwant = tok.encode(big, add_special_tokens=False).ids
            if rc != 0 and "without OpenMP" in err:
                print("SKIP encode --threads 3: %s" % err.strip())
                RESULTS.skipped += 1
            else:
                got = [int(x) for x in got.split()] if rc == 0 else None
                check(rc == 0 and got == bwant, "%s: encode --threads 3 of %d bytes: tokenizers' ids %s" % (name, len(big.encode()), err.strip()))
        # decode, as tokenizers' decoder with cleanup, special tokens kept
        rc2, out, err2 = run("tokenize", "decode", "--tokenizer", path, "--data", write(os.path.join(d, "ids.txt"), " ".join(map(str, want))))
        dwant = tok.decode(want, skip_special_tokens=False)
        check(rc2 == 0 and out == dwant, "%s: decode as tokenizers' WordPiece decoder: %r... vs %r... %s" % (name, out[:60], dwant[:60], err2))
        # convert: mhe's own text form encodes the same
        conv = os.path.join(d, "wp-%s.tok" % name)
        rc3, _, err3 = run("tokenize", "convert", "--tokenizer", path, "--out", conv)
        rc4, got4, err4 = ids_of(conv, held_file) if rc3 == 0 else (rc3, None, err3)
        check(rc4 == 0 and got4 == want and open(conv, encoding="utf-8").readline() == "mhe-wordpiece 1\n",
              "%s: convert to mhe-wordpiece, same ids: %s %s" % (name, err3, err4))
        # the character sweep: every normalised character a token and a ## piece
        sweep = sweep_text()
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        chars = sorted(set(tok.normalizer.normalize_str(sweep)) - {" "})
        vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}
        for c in chars:
            vocab.setdefault(c, len(vocab))
            vocab.setdefault("##" + c, len(vocab))
        j["model"]["vocab"] = vocab
        j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] in vocab]
        for a in j["added_tokens"]:
            a["id"] = vocab[a["content"]]
        spath = os.path.join(d, "sweep-%s.json" % name)
        with open(spath, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        stok = Tokenizer.from_file(spath)
        swant = stok.encode(sweep, add_special_tokens=False).ids
        rc5, sgot, err5 = ids_of(spath, write(os.path.join(d, "sweep.txt"), sweep))
        bad = next((i for i, (a, b) in enumerate(zip(sgot or [], swant)) if a != b), None)
        check(rc5 == 0 and sgot == swant, "%s: the character sweep (%d characters, %d ids) as tokenizers: first difference at %s %s"
              % (name, len(sweep), len(swant), bad, err5))


def bad_input(d):
    good = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True}],
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                               "pair": [],
                               "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [3], "tokens": ["[CLS]"]},
                                                  "[SEP]": {"id": "[SEP]", "ids": [4], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "##b": 2, "[CLS]": 3, "[SEP]": 4}}}
    data = write(os.path.join(d, "ab.txt"), "ab AB a b")
    p = os.path.join(d, "good.json")
    with open(p, "w") as f:
        json.dump(good, f)
    rc, got, err = ids_of(p, data)
    check(rc == 0 and got == [1, 2, 1, 2, 1, 0], "a hand-made WordPiece tokenizer.json: 'ab AB a b' -> 1 2 1 2 1 0: %s %s" % (got, err))

    rc, out, err = run("tokenize", "encode", "--special", "--tokenizer", p, "--data", data)
    check(rc == 0 and out.split() == "3 1 2 1 2 1 0 4".split(), "--special: [CLS] and [SEP] of the template around the ids: %s %s" % (out.strip(), err))
    for what, post, want in [("BertProcessing", {"type": "BertProcessing", "sep": ["[SEP]", 4], "cls": ["[CLS]", 3]}, "3 1 2 1 2 1 0 4"),
                             ("no post_processor", None, None)]:
        j = json.loads(json.dumps(good))
        j["post_processor"] = post
        q = os.path.join(d, "post.json")
        with open(q, "w") as f:
            json.dump(j, f)
        rc, out, err = run("tokenize", "encode", "--special", "--tokenizer", q, "--data", data)
        if want:
            check(rc == 0 and out.split() == want.split(), "--special with %s: %s %s" % (what, out.strip(), err))
        else:
            check(rc == 1 and "no cls or sep" in err, "--special with %s: a clear error: rc %d %s" % (what, rc, err.strip()))

    def variant(what, needle, fn):
        j = json.loads(json.dumps(good))
        fn(j)
        q = os.path.join(d, "bad.json")
        with open(q, "w") as f:
            json.dump(j, f)
        rc, _, err = run("tokenize", "encode", "--tokenizer", q, "--data", data)
        check(rc == 1 and needle in err and "mhe: " in err, "%s: want an error naming %r, got rc %d %s" % (what, needle, rc, err.strip()))

    variant("unk_token not in the vocab", "model.unk_token", lambda j: j["model"].update(unk_token="<unk>"))
    variant("no unk_token", "unk_token is missing", lambda j: j["model"].pop("unk_token"))
    variant("merges in WordPiece", "model.merges", lambda j: j["model"].update(merges=["a b"]))
    variant("a ByteLevel pre-tokenizer", "BertPreTokenizer", lambda j: j.update(pre_tokenizer={"type": "ByteLevel"}))
    variant("an unknown normalizer", "normalizer.type 'NFKC'", lambda j: j.update(normalizer={"type": "NFKC"}))
    variant("a field of another type", "fields of another type", lambda j: j["decoder"].update(add_prefix_space=True))
    variant("two specials before $A", "one special token on each side",
            lambda j: j["post_processor"]["single"].insert(0, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}))
    variant("a special without an id", "no single id",
            lambda j: j["post_processor"]["special_tokens"].pop("[SEP]"))
    variant("a prefix of 9 bytes", "continuing_subword_prefix is longer",
            lambda j: j["model"].update(continuing_subword_prefix="#########"))
    variant("decoder prefix differs", "decoder.prefix differs", lambda j: j["decoder"].update(prefix="@@"))
    variant("a normalised added token the normalizer changes", "normalizer changes it",
            lambda j: j["added_tokens"].append({"id": 5, "content": "[MASK]", "single_word": False, "lstrip": False, "rstrip": False,
                                                "normalized": True, "special": False}) or j["model"]["vocab"].update({"[MASK]": 5}))
    variant("a BertNormalizer on a BPE", "ByteLevel components only",
            lambda j: j.update(model={"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                               pre_tokenizer={"type": "ByteLevel"}, post_processor=None, decoder=None, added_tokens=[]))

    conv = os.path.join(d, "good.tok")
    rc, _, err = run("tokenize", "convert", "--tokenizer", p, "--out", conv)
    check(rc == 0, "convert the hand-made tokenizer: %s" % err.strip())
    text = open(conv, encoding="utf-8").read()
    check("cls 3\nsep 4\n" in text and "prefix 2323\n" in text, "the text form names cls, sep and the prefix: %r" % text[:160])
    for what, body, needle in [
        ("truncated", text[:len(text) // 2], "truncated"),
        ("a bad prefix", text.replace("prefix 2323", "prefix 23g3"), "prefix"),
        ("unk out of range", text.replace("unk 0\n", "unk 9\n"), "unk"),
        ("no unk", text.replace("unk 0\n", "unk -1\n"), "unk"),
        ("cls past the vocabulary", text.replace("cls 3\n", "cls 7\n"), "cls 7"),
        ("merges in WordPiece", text.replace("end\n", "merges 0\nend\n"), "end"),
    ]:
        q = write(os.path.join(d, "bad.tok"), body)
        rc, _, err = run("tokenize", "encode", "--tokenizer", q, "--data", data)
        check(rc == 1 and needle in err, "mhe-wordpiece %s: want an error naming %r, got rc %d %s" % (what, needle, rc, err.strip()))


def main():
    why = mhe_missing()
    if why:
        return skip("test_wordpiece.py", why)
    d = tmpdir("mhe_wordpiece_")
    bad_input(d)
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        print("SKIP the comparisons with tokenizers: no tokenizers package")
        RESULTS.skipped += 1
        return finish()
    docs = os.path.join(REPO, "docs")
    names = sorted(f for f in os.listdir(docs) if f.endswith(".md"))
    held = open(os.path.join(docs, names[0]), encoding="utf-8").read()
    train = "".join(open(os.path.join(docs, f), encoding="utf-8").read() for f in names[1:])
    compare_settings(d, train, held)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
