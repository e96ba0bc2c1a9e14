"""mhe.h's Unicode tables against the Hugging Face `tokenizers` package, every
code point (the comparisons are skipped, with a SKIP line, without the
package), and against the pinned Unicode data they are generated from.

  - the tables are what tools/scripts/unicode_classes.py and
    wordpiece_tables.py make of unicodedata2's data (skipped, saying so,
    where that data is not in build/unicode: the generators' --write fetch it)
  - byte-level BPE's split: `mhe tokenize encode` of a hand-made
    tokenizer.json, whose merges join a probe character with any byte beside
    it, gives tokenizers' ids on a text where each code point sits between
    probes of each class (where not, the code points whose class differs
    from the one tokenizers' ByteLevel pre-tokenizer gives are named)
  - WordPiece: for every code point, BertNormalizer's clean_text,
    handle_chinese_chars, strip_accents and lowercase, and
    BertPreTokenizer's punctuation, give what mhe.h's tables say; canonical
    ordering of the marks strip_accents keeps, pair by pair; then `mhe
    tokenize encode` of a vocabulary of every normalised character gives
    tokenizers' ids on all code points in three-character words, uncased"""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, RESULTS, check, finish, mhe_missing, skip, tmpdir  # noqa: E402
from mhetest import run_mhe as run  # noqa: E402

CPS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]   # the scalar values: what UTF-8 text can hold
TEXT_CPS = CPS[1:]   # a text file for mhe holds no NUL
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
CONTROL, WSPACE, PUNCT, MARK, CJK, CCC = 1, 2, 4, 8, 16, 32


def header_table(src, name):
    """the numbers of mhe.h's table `name`, flat"""
    m = re.search(r"\b%s\[[^]]*\](?:\[\d+\])? = \{(.*?)\n\};" % name, src, re.S)
    return [int(x, 0) for x in re.findall(r"-?0x[0-9a-f]+|-?\d+", m.group(1))]


def runs_to_list(runs, shift):
    out = [0] * 0x110000
    for i, r in enumerate(runs):
        end = runs[i + 1] >> shift if i + 1 < len(runs) else 0x110000
        out[r >> shift:end] = [r & ((1 << shift) - 1)] * (end - (r >> shift))
    return out


def first(diff, show):
    return ", ".join(show(c) for c in diff[:6]) + (" ..." if len(diff) > 6 else "")


def generated_current():
    for script in ("unicode_classes.py", "wordpiece_tables.py"):
        p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "scripts", script), "--check"], capture_output=True, text=True)
        if "not checked" in p.stdout:
            print("SKIP %s --check: %s" % (script, p.stdout.strip()))
            RESULTS.skipped += 1
        else:
            check(p.returncode == 0, "tools/scripts/%s --check: mhe.h's table is what it makes: %s" % (script, p.stderr.strip()))


def byte_level_classes():
    """each code point's class as tokenizers' ByteLevel pre-tokenizer (GPT-2's pattern) splits it"""
    from tokenizers import pre_tokenizers
    p = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    out = {}
    for i in range(0, len(CPS), 65536):
        chunk = CPS[i:i + 65536]
        # "a" c "1": a letter joins the a, a number the 1; "a!" c "!": anything else but a space joins the !s
        starts = {s: e for _, (s, e) in p.pre_tokenize_str("".join("a" + chr(c) + "1" for c in chunk))}
        starts2 = {s for _, (s, e) in p.pre_tokenize_str("".join("a!" + chr(c) + "!" for c in chunk))}
        for j, c in enumerate(chunk):
            out[c] = (LETTER if starts.get(3 * j) == 3 * j + 2 else NUMBER if starts.get(3 * j + 1) == 3 * j + 3
                      else SPACE if 4 * j + 2 in starts2 else OTHER)
    out[0x20] = SPACE   # " 1" is one piece: ' ?\p{N}+'
    return out


def bytes_to_unicode():
    """GPT-2's byte -> character map of byte-level vocabularies"""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_split(d, src):
    from tokenizers import Tokenizer
    # a probe character merges with any byte beside it, so the ids show where the pieces end
    bl = bytes_to_unicode()
    vocab = {bl[b]: b for b in range(256)}
    merges = []
    for probe in "a1!":
        for b in range(256):
            for left, right in ((probe, bl[b]), (bl[b], probe)):
                if left + right not in vocab:
                    vocab[left + right] = len(vocab)
                    merges.append([left, right])
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
         "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                   "vocab": vocab, "merges": merges}}
    path = os.path.join(d, "probe-bpe.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    tok = Tokenizer.from_file(path)
    # "a" c "1": a letter joins the a, a number the 1; "a!" c "!": anything else but a space joins the !s
    text = "".join("a%c1a!%c!" % (c, c) for c in TEXT_CPS)
    data = os.path.join(d, "sweep.txt")
    with open(data, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    want = tok.encode(text, add_special_tokens=False).ids
    rc, out, err = run("tokenize", "encode", "--tokenizer", path, "--data", data)
    got = [int(x) for x in out.split()] if rc == 0 else []
    bad = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
    check(rc == 0 and got == want, "byte-level BPE: mhe tokenize encode gives tokenizers' ids around every code point "
          "(%d ids; first difference at id %s) %s" % (len(want), bad, err.strip()))
    if rc != 0 or got != want:   # name the code points whose class differs
        table = runs_to_list(header_table(src, "mhe__uc_runs"), 2)
        cls = byte_level_classes()
        diff = [c for c in CPS if table[c] != cls[c]]
        check(not diff, "byte-level split: mhe.h's class of all %d code points is tokenizers' (%d differ: %s)"
              % (len(CPS), len(diff), first(diff, lambda c: "U+%04X %d, not %d" % (c, table[c], cls[c]))))


def wordpiece_facts():
    """per code point, what tokenizers' BertNormalizer (each step alone) and BertPreTokenizer do"""
    from tokenizers import normalizers, pre_tokenizers

    def each(norm):   # "|" is left alone by every step and is no combining mark: a separator
        cps = [c for c in CPS if c != ord("|")]
        out = {ord("|"): "|"}
        for i in range(0, len(cps), 100000):
            chunk = cps[i:i + 100000]
            parts = norm.normalize_str("|".join(chr(c) for c in chunk)).split("|")
            assert len(parts) == len(chunk)
            out.update(zip(chunk, parts))
        return out

    def bert(**kw):
        args = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)
        args.update(kw)
        return each(normalizers.BertNormalizer(**args))

    facts = {"clean": bert(clean_text=True), "chinese": bert(handle_chinese_chars=True),
             "strip": bert(strip_accents=True), "lower": bert(lowercase=True)}
    pre = pre_tokenizers.BertPreTokenizer()
    punct, space = set(), set()
    for i in range(0, len(CPS), 65536):   # "x" c "x ": a punctuation character is a word, a space splits
        chunk = CPS[i:i + 65536]
        starts = {s for _, (s, e) in pre.pre_tokenize_str("".join("x" + chr(c) + "x " for c in chunk))}
        punct.update(c for j, c in enumerate(chunk) if 4 * j + 1 in starts and 4 * j + 2 in starts)
        space.update(c for j, c in enumerate(chunk) if 4 * j + 1 not in starts and 4 * j + 2 in starts)
    facts["punct"] = punct
    facts["space"] = space
    return facts


def wordpiece_tables(src, facts):
    flags = runs_to_list(header_table(src, "mhe__wp_runs"), 6)
    lower = {}
    t = header_table(src, "mhe__wp_lower")
    for a, b, stride, delta in zip(t[0::4], t[1::4], t[2::4], t[3::4]):
        for c in range(a, b + 1, stride):
            lower[c] = c + delta
    strip = {}
    t = header_table(src, "mhe__wp_nfd1")
    for a, b, to, step in zip(t[0::4], t[1::4], t[2::4], t[3::4]):
        for c in range(a, b + 1):
            strip[c] = [to + (c - a) * step]
    t = header_table(src, "mhe__wp_nfdn")
    for k in range(0, len(t), 5):
        strip[t[k]] = t[k + 2:k + 2 + t[k + 1]]

    def stripped(c):   # mhe__wp_strip
        if 0xAC00 <= c <= 0xD7A3:
            s, tt = c - 0xAC00, (c - 0xAC00) % 28
            return [0x1100 + s // 588, 0x1161 + (s % 588) // 28] + ([0x11A7 + tt] if tt else [])
        return strip[c] if c in strip else [] if flags[c] & MARK else [c]

    ws = lambda c: flags[c] & WSPACE   # noqa: E731
    tests = [
        ("clean_text", "clean", lambda c: "" if c in (0, 0xFFFD) or flags[c] & CONTROL else " " if ws(c) else chr(c)),
        ("handle_chinese_chars", "chinese", lambda c: " %c " % c if flags[c] & CJK else chr(c)),
        ("strip_accents", "strip", lambda c: "".join(map(chr, stripped(c)))),
        ("lowercase", "lower", lambda c: "i\u0307" if c == 0x130 else chr(lower.get(c, c))),
    ]
    for what, key, mine in tests:
        diff = [c for c in CPS if mine(c) != facts[key][c]]
        check(not diff, "WordPiece %s of all %d code points as tokenizers' (%d differ: %s)" % (
              what, len(CPS), len(diff), first(diff, lambda c: "U+%04X %r, not %r" % (c, mine(c), facts[key][c]))))
    for what, bit, key in (("punctuation", PUNCT, "punct"), ("white space", WSPACE, "space")):
        diff = [c for c in CPS if bool(flags[c] & bit) != (c in facts[key])]
        check(not diff, "BertPreTokenizer: mhe.h's %s of all code points is tokenizers' (%d differ: %s)"
              % (what, len(diff), first(diff, lambda c: "U+%04X" % c)))
    # the marks strip_accents keeps, in canonical order: NFD swaps a pair when the second's class is lower
    from tokenizers import normalizers
    t = header_table(src, "mhe__wp_ccc")
    ccc = dict(zip(t[0::2], t[1::2]))
    strip_only = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    pairs = [(a, b) for a in ccc for b in ccc]
    got = strip_only.normalize_str("|".join("x" + chr(a) + chr(b) for a, b in pairs)).split("|")
    bad = [(a, b) for (a, b), g in zip(pairs, got) if g != "x" + (chr(b) + chr(a) if ccc[b] < ccc[a] else chr(a) + chr(b))]
    check(not bad, "strip_accents orders the %d kept marks pair by pair as mhe.h's classes (%d pairs differ: %s)"
          % (len(ccc), len(bad), first(bad, lambda p: "U+%04X U+%04X" % p)))
    # the class flag (a mark strip_accents drops is no barrier to ordering, one of class 0 is):
    # U+0345 (class 240) then c: NFD swaps them when 0 < class(c) < 240
    nfd, nz = normalizers.NFD(), {0x345}
    cand = [c for c in CPS if c not in (1, 0x345)]
    for i in range(0, len(cand), 50000):
        chunk = cand[i:i + 50000]
        alone = nfd.normalize_str("\x01".join(chr(c) for c in chunk)).split("\x01")
        parts = nfd.normalize_str("".join("\x01\u0345" + chr(c) for c in chunk)).split("\x01")[1:]
        nz.update(c for c, a, p in zip(chunk, alone, parts) if a == chr(c) and not p.startswith("\u0345"))
    diff = [c for c in CPS if bool(flags[c] & CCC) != (c in nz) and c not in strip and not 0xAC00 <= c <= 0xD7A3]
    check(not diff, "the combining-class flag of mhe.h is set where tokenizers' NFD sorts (%d differ: %s)"
          % (len(diff), first(diff, lambda c: "U+%04X" % c)))


def wordpiece_ids(d, facts):
    """every code point in three-character words through mhe tokenize encode, against tokenizers"""
    from tokenizers import Tokenizer
    text = " ".join("".join(chr(c) for c in TEXT_CPS[i:i + 3]) for i in range(0, len(TEXT_CPS), 3))
    for name in ("uncased",):   # every step; the tables' checks above see each step alone
        norm = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": True, "lowercase": True}
        j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": norm,
             "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": None,
             "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
             "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                       "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0}}}
        path = os.path.join(d, "wp.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f)
        tok = Tokenizer.from_file(path)
        vocab = {"[UNK]": 0}
        for c in sorted(set(tok.normalizer.normalize_str(text)) - {" "}):
            vocab[c] = len(vocab)
            vocab["##" + c] = len(vocab)
        j["model"]["vocab"] = vocab
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
        want = tok.encode(text, add_special_tokens=False).ids
        data = os.path.join(d, "wp.txt")
        with open(data, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        rc, out, err = run("tokenize", "encode", "--tokenizer", path, "--data", data)
        got = [int(x) for x in out.split()] if rc == 0 else []
        bad = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
        check(rc == 0 and got == want and want.count(0) == 0, "WordPiece %s: mhe's ids of every code point (%d ids, %d tokens) are "
              "tokenizers' (first difference at id %s) %s" % (name, len(want), len(vocab), bad, err.strip()))


def main():
    why = mhe_missing()
    if why:
        return skip("test_unicode.py", why)
    generated_current()
    try:
        import tokenizers
    except ImportError:
        print("SKIP the sweeps against tokenizers: no tokenizers package (pip install tokenizers)")
        RESULTS.skipped += 1
        return finish()
    print("tokenizers %s" % tokenizers.__version__)
    src = open(os.path.join(REPO, "mhe.h"), encoding="utf-8").read()
    d = tmpdir("mhe_unicode_")
    bpe_split(d, src)
    facts = wordpiece_facts()
    wordpiece_tables(src, facts)
    wordpiece_ids(d, facts)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
