/* Byte-level BPE (mhe.h section 8): the Unicode class table at known code
   points, GPT-2's split against the pieces the tokenizers package gives,
   training on hand-worked corpora (merges and the tie rule), encode/decode
   round trips on random bytes (invalid UTF-8 and NUL included), the text
   form's round trip and every bad field, a tokenizer.json written here
   (both merge forms, added tokens, unk) and its bad fields, a model
   checkpoint carrying a tokenizer (MD5 and vocab_size checked); WordPiece
   (BERT's) from a tokenizer.json, with known answers. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <math.h>
#include <stdlib.h>

static void unicode_classes(void) {
    static const struct { uint32_t cp; int cls; } known[] = {
        {'A', MHE_UC_LETTER}, {'z', MHE_UC_LETTER}, {'5', MHE_UC_NUMBER}, {' ', MHE_UC_SPACE}, {'\t', MHE_UC_SPACE},
        {'\n', MHE_UC_SPACE}, {0x0B, MHE_UC_SPACE}, {0x1C, MHE_UC_OTHER} /* Python's isspace, not White_Space */,
        {'\'', MHE_UC_OTHER}, {'_', MHE_UC_OTHER}, {0x00, MHE_UC_OTHER}, {0x85, MHE_UC_SPACE}, {0xA0, MHE_UC_SPACE},
        {0xAA, MHE_UC_LETTER} /* ordinal indicator, Lo */, {0xB2, MHE_UC_NUMBER} /* superscript two, No */,
        {0xBD, MHE_UC_NUMBER} /* one half */, {0xE9, MHE_UC_LETTER}, {0x0301, MHE_UC_OTHER} /* combining acute, Mn */,
        {0x0661, MHE_UC_NUMBER} /* Arabic-Indic one, Nd */, {0x1680, MHE_UC_SPACE}, {0x2003, MHE_UC_SPACE},
        {0x200B, MHE_UC_OTHER} /* zero width space is not White_Space */, {0x2167, MHE_UC_NUMBER} /* Roman eight, Nl */,
        {0x3000, MHE_UC_SPACE}, {0x3042, MHE_UC_LETTER} /* hiragana a */, {0x4E16, MHE_UC_LETTER}, {0xAC00, MHE_UC_LETTER},
        {0xD800, MHE_UC_OTHER}, {0xFF10, MHE_UC_NUMBER} /* fullwidth 0 */, {0x1F389, MHE_UC_OTHER}, {0x1D400, MHE_UC_LETTER},
        {0x20000, MHE_UC_LETTER} /* CJK extension B */, {0x10FFFF, MHE_UC_OTHER}, {0x110000, MHE_UC_OTHER},
        /* Unicode 15 and 16, as tokenizers 0.23 classes them; 17's additions are not yet letters */
        {0x31350, MHE_UC_LETTER} /* CJK extension H */, {0x1C89, MHE_UC_LETTER}, {0xA7CB, MHE_UC_LETTER},
        {0x13460, MHE_UC_LETTER} /* Egyptian hieroglyphs extended-A */, {0x0C5C, MHE_UC_OTHER}, {0xA7CE, MHE_UC_OTHER},
    };
    size_t i;
    int bad = 0;
    for (i = 0; i < sizeof known / sizeof known[0]; i++)
        if (mhe_unicode_class(known[i].cp) != known[i].cls) { bad++; printf("  U+%04lX: class %d, expected %d\n", (unsigned long)known[i].cp, mhe_unicode_class(known[i].cp), known[i].cls); }
    CHECK(bad == 0, "%d code points of %zu in the wrong class", bad, sizeof known / sizeof known[0]);
    CHECK(strcmp(mhe_unicode_version(), "16.0.0") == 0, "Unicode version %s (tokenizers 0.23's regex classes)", mhe_unicode_version());
}

/* the pieces of text joined with '|' */
static void pieces(const char *text, size_t len, char *out) {
    size_t pos = 0, q = 0;
    while (pos < len) {
        size_t e = mhe_bpe_split_next(text, len, pos);
        if (q) out[q++] = '|';
        memcpy(out + q, text + pos, e - pos); q += e - pos;
        if (e <= pos) break;
        pos = e;
    }
    out[q] = 0;
}

static void split_rule(void) {
    /* the pieces of the tokenizers package's ByteLevel pre-tokenizer (0.19.1) */
    static const char *cases[][2] = {
        {"Hello world", "Hello| world"}, {"it's", "it|'s"}, {"a  b", "a| | b"}, {"x\n\ny", "x|\n|\n|y"},
        {"x  \n", "x|  \n"}, {"123abc", "123|abc"}, {"!!? 'll", "!!?| '|ll"}, {"don't  ", "don|'t|  "},
        {"I'M", "I|'|M"}, {"I'm", "I|'m"}, {" 's", " '|s"}, {"we'll they're I've I'd", "we|'ll| they|'re| I|'ve| I|'d"},
        {"e\xcc\x81 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8e\x89 x", "e|\xcc\x81| \xe4\xb8\x96\xe7\x95\x8c| \xf0\x9f\x8e\x89| x"},
        {"a\x1c\x1c" "b", "a|\x1c\x1c|b"}, {"a\xc2\xa0\xc2\xa0" "b", "a|\xc2\xa0|\xc2\xa0|b"}, {"3.14", "3|.|14"},
        {"  ", "  "}, {"'", "'"}, {" ", " "},
    };
    char got[256];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pieces(cases[i][0], strlen(cases[i][0]), got);
        CHECK(strcmp(got, cases[i][1]) == 0, "split of case %zu: '%s', expected '%s'", i, got, cases[i][1]);
    }
    /* invalid UTF-8 is one character of class other a byte: it joins a run of others */
    pieces("a\xff\xfe!b\xc3", 6, got);
    CHECK(strcmp(got, "a|\xff\xfe!|b|\xc3") == 0, "invalid UTF-8 bytes are others: '%s'", got);
}

static void encode_all(const mhe_bpe *b, const char *t, size_t len, int *ids, size_t *n) {
    char err[MHE_ERR_LEN];
    OK(mhe_bpe_encode(b, t, len, ids, len + 1, n, NULL, err));
}

static void train_known(void) {
    mhe_bpe b;
    int ids[64];
    size_t n;
    const char *t = "aaabdaaabac";
    mhe_bpe_init(&b, NULL);
    /* by hand: aa (count 4); then ab and (aa, a) both 2, ab has the lower left id;
       then (aa, ab) 2; then four pairs of count 1, (a, c) has the lowest left id */
    OK(mhe_bpe_train(&b, t, strlen(t), 260, MHE_BPE_SPLIT_NONE, NULL, 0));
    CHECK(b.n_tokens == 260 && b.n_merges == 4, "260 tokens, 4 merges (%d, %d)", b.n_tokens, b.n_merges);
    if (b.n_merges == 4) {
        static const int32_t want[12] = { 'a', 'a', 256, 'a', 'b', 257, 256, 257, 258, 'a', 'c', 259 };
        CHECK(memcmp(b.merges, want, sizeof want) == 0, "the merges: aa, ab (tie: lowest left id), aaab, ac (tie)");
        CHECK(mhe_bpe_find(&b, "aaab", 4) == 258 && mhe_bpe_merge_rank(&b, 256, 257) == 2 && mhe_bpe_merge_rank(&b, 257, 256) == -1,
              "find and merge_rank");
    }
    encode_all(&b, t, strlen(t), ids, &n);
    CHECK(n == 4 && ids[0] == 258 && ids[1] == 'd' && ids[2] == 258 && ids[3] == 259, "aaabdaaabac -> aaab d aaab ac");
    /* lowest rank first, leftmost on equal ranks: "aaa" -> aa a, "aaaa" -> aa aa */
    encode_all(&b, "aaa", 3, ids, &n);
    CHECK(n == 2 && ids[0] == 256 && ids[1] == 'a', "aaa -> aa a");
    encode_all(&b, "caab", 4, ids, &n);   /* aa (rank 0) before ab (rank 1): c aa b */
    CHECK(n == 3 && ids[0] == 'c' && ids[1] == 256 && ids[2] == 'b', "caab -> c aa b (rank order, not left to right)");
    /* the GPT-2 split: merges stay inside pieces */
    t = "the cat the hat";
    OK(mhe_bpe_train(&b, t, strlen(t), 259, MHE_BPE_SPLIT_GPT2, NULL, 0));
    if (b.n_merges == 3) {
        static const int32_t want[9] = { 'a', 't', 256, 'h', 'e', 257, 't', 257, 258 };
        CHECK(memcmp(b.merges, want, sizeof want) == 0, "gpt2 split: at, he, the (counts 2; lowest left id first)");
    } else CHECK(0, "3 merges (%d)", b.n_merges);
    encode_all(&b, "the hat", 7, ids, &n);
    CHECK(n == 4 && ids[0] == 258 && ids[1] == ' ' && ids[2] == 'h' && ids[3] == 256, "'the hat' -> the | ' ' h at (%zu ids)", n);
    /* a text that runs out of pairs stops early; bad arguments */
    OK(mhe_bpe_train(&b, "ab", 2, 1000, MHE_BPE_SPLIT_NONE, NULL, 0));
    CHECK(b.n_tokens == 257, "'ab' has one pair: 257 tokens (%d)", b.n_tokens);
    CHECK(mhe_bpe_train(&b, "ab", 2, 255, MHE_BPE_SPLIT_NONE, NULL, 0) == MHE_ERR_ARG && strstr(b.err, "vocab size"), "vocab size < 256: %s", b.err);
    {
        const char *dup[2] = { "<s>", "<s>" };
        CHECK(mhe_bpe_train(&b, "ab", 2, 300, MHE_BPE_SPLIT_NONE, dup, 2) == MHE_ERR_ARG && strstr(b.err, "repeats"), "repeated added token: %s", b.err);
    }
    CHECK(mhe_bpe_train(&b, "ab", 2, 300, 7, NULL, 0) == MHE_ERR_ARG, "unknown split");
    mhe_bpe_free(&b);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static unsigned rnd(void) { rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17; return (unsigned)(rng_state >> 11); }

static void roundtrip(void) {
    static const char *corpus =
        "The quick brown fox jumps over the lazy dog. It's 3.14159 o'clock; we'll see.\n"
        "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x8e\x89 e\xcc\x81  \n\n\tindent   spaces<|endoftext|>";
    const char *added[1] = { "<|endoftext|>" };
    mhe_bpe b;
    size_t L = 20000, i, n, len, trial;
    char *big = (char *)malloc(L), *text = (char *)malloc(4096), *back = (char *)malloc(4200);
    int *ids = (int *)malloc(4200 * sizeof(int)), ok = 1, split;
    char err[MHE_ERR_LEN];
    void *work = malloc(mhe_bpe_work_size(4096));
    for (i = 0; i < L; i++) big[i] = corpus[i % strlen(corpus)];
    mhe_bpe_init(&b, NULL);
    for (split = 0; split < 2; split++) {
        OK(mhe_bpe_train(&b, big, L, 300, split, added, 1));
        CHECK(b.n_tokens == 300 && b.added[299] && b.byte_id[0] == 0 && b.byte_id[255] == 255, "300 tokens, the added one last (%d)", b.n_tokens);
        for (trial = 0; trial < 300; trial++) {
            len = rnd() % 4096;
            for (i = 0; i < len; i++) {   /* random bytes, or pieces of the corpus, or the added token */
                unsigned r = rnd() % 10;
                text[i] = r < 4 ? (char)(rnd() & 0xff) : r < 9 ? corpus[rnd() % strlen(corpus)] : '<';
            }
            if (len > 20 && trial % 3 == 0) memcpy(text + len / 2, "<|endoftext|>", 13);
            if (mhe_bpe_encode(&b, text, len, ids, len, &n, trial % 2 ? work : NULL, err) != MHE_OK ||
                mhe_bpe_decode(&b, ids, n, back, 4200, &len, err) != MHE_OK) { ok = 0; printf("  %s\n", err); break; }
            if (len != (size_t)(trial % 2 ? len : len) || memcmp(back, text, len) != 0) { ok = 0; break; }
            for (i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= b.n_tokens) ok = 0;
        }
        CHECK(ok, "decode(encode(x)) = x on 300 random texts, split %d", split);
    }
    /* encode compresses the training text; decode refuses a bad id; cap too small */
    OK(mhe_bpe_encode(&b, big, 4096, ids, 4096, &n, NULL, err));
    CHECK(n < 4096 * 3 / 4, "the training text: %zu ids for 4096 bytes", n);
    ids[3] = 300;
    CHECK(mhe_bpe_decode(&b, ids, n, back, 4200, &len, err) == MHE_ERR_DATA && strstr(err, "position 3"), "bad id: %s", err);
    CHECK(mhe_bpe_encode(&b, "xyzxyzxyz", 9, ids, 2, &n, NULL, err) == MHE_ERR_SHAPE, "cap too small: %s", err);
    mhe_bpe_free(&b);
    free(big); free(text); free(back); free(ids); free(work);
}

/* the text form of b with line `line` (1-based) replaced by repl (NULL: deleted) */
static size_t edited(const mhe_bpe *b, int line, const char *repl, char *out, size_t cap) {
    size_t n, i, q = 0;
    char *buf;
    int l = 1;
    if (mhe_bpe_save_mem(b, NULL, 0, &n) != MHE_OK) return 0;
    buf = (char *)malloc(n);
    if (mhe_bpe_save_mem(b, buf, n, &n) != MHE_OK) { free(buf); return 0; }
    for (i = 0; i < n && q + 64 < cap; i++) {
        if (l == line) {
            if (repl) { memcpy(out + q, repl, strlen(repl)); q += strlen(repl); out[q++] = '\n'; }
            while (i < n && buf[i] != '\n') i++;
            l++;
            continue;
        }
        out[q++] = buf[i];
        if (buf[i] == '\n') l++;
    }
    free(buf);
    return q;
}

static void text_form(void) {
    mhe_bpe b, c;
    const char *added[1] = { "<eos>" };
    const char *t = "aaabdaaabac the cat the hat";
    char *buf = (char *)malloc(1 << 16), *buf2 = (char *)malloc(1 << 16);
    size_t n, n2;
    unsigned char d1[16], d2[16];
    mhe_bpe_init(&b, NULL);
    mhe_bpe_init(&c, NULL);
    OK(mhe_bpe_train(&b, t, strlen(t), 270, MHE_BPE_SPLIT_GPT2, added, 1));
    OK(mhe_bpe_save_mem(&b, buf, 1 << 16, &n));
    OK(mhe_bpe_load_mem(&c, buf, n));
    OK(mhe_bpe_save_mem(&c, buf2, 1 << 16, &n2));
    CHECK(n == n2 && memcmp(buf, buf2, n) == 0 && c.n_tokens == b.n_tokens && c.n_merges == b.n_merges && c.added[b.n_tokens - 1],
          "save -> load -> save is the same text");
    OK(mhe_bpe_md5(&b, d1));
    OK(mhe_bpe_md5(&c, d2));
    CHECK(memcmp(d1, d2, 16) == 0, "same MD5");
    {   /* every truncation is refused, and leaves c empty */
        size_t k;
        int bad = 0;
        for (k = 0; k < n; k++) if (mhe_bpe_load_mem(&c, buf, k) == MHE_OK || c.n_tokens != 0) bad++;
        CHECK(bad == 0, "%d of %zu truncations accepted", bad, n);
        CHECK(mhe_bpe_load_mem(&c, buf, n - 3) == MHE_ERR_TRUNCATED, "truncated in the end line: %s", c.err);
    }
    {   /* each field: (line, replacement, expected status, a word of the message) */
        int M = 8 + b.n_tokens;   /* the 'merges' line */
        char l1[64], l2[64], l3[64];
        struct { int line; const char *repl; mhe_status st; const char *msg; } bad[] = {
            {1, "mhe-bpe 2", MHE_ERR_FORMAT, "mhe-bpe 1"}, {2, "split words", MHE_ERR_FORMAT, "split"},
            {3, "prefix_space 2", MHE_ERR_FORMAT, "prefix_space"}, {4, "ignore_merges x", MHE_ERR_FORMAT, "ignore_merges"},
            {5, "unk 999", MHE_ERR_FORMAT, "unk"}, {6, "fuse_unk", MHE_ERR_FORMAT, "fuse_unk"},
            {7, "tokens 0", MHE_ERR_FORMAT, "tokens"}, {7, "tokens 99999", MHE_ERR_FORMAT, "expected 't HEX'"},
            {8, "t 0G", MHE_ERR_FORMAT, "hex"}, {8, "t ", MHE_ERR_FORMAT, "token 0"}, {8, "x 00", MHE_ERR_FORMAT, "token 0"},
            {8, "t 01", MHE_ERR_FORMAT, "repeats"}, {M, "merges 9999", MHE_ERR_FORMAT, "merges"},
            {M + 1, l1, MHE_ERR_FORMAT, "ids in 0..269"}, {M + 2, l2, MHE_ERR_FORMAT, "repeats merge"},
            {M + 1, l3, MHE_ERR_FORMAT, "followed by"}, {M + 1, "1 2", MHE_ERR_FORMAT, "LEFT RIGHT RESULT"},
            {M + 1, "01 2 3", MHE_ERR_FORMAT, "LEFT RIGHT RESULT"},
        };
        size_t i;
        snprintf(l1, sizeof l1, "%d %d %d", b.merges[0], b.merges[1], b.n_tokens);            /* result out of range */
        snprintf(l2, sizeof l2, "%d %d %d", b.merges[0], b.merges[1], b.merges[2]);           /* merge 1 = merge 0 */
        snprintf(l3, sizeof l3, "%d %d %d", b.merges[0], b.merges[1], b.merges[2] + 1);       /* result is not left + right */
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            size_t k = edited(&b, bad[i].line, bad[i].repl, buf2, 1 << 16);
            mhe_status st = mhe_bpe_load_mem(&c, buf2, k);
            CHECK(st == bad[i].st && strstr(c.err, bad[i].msg) && c.n_tokens == 0, "bad field %zu (line %d '%s'): %s (%s)", i, bad[i].line,
                  bad[i].repl, mhe_status_str(st), c.err);
        }
        memcpy(buf2, buf, n); memcpy(buf2 + n, "x\n", 2);
        CHECK(mhe_bpe_load_mem(&c, buf2, n + 2) == MHE_ERR_FORMAT, "bytes after 'end': %s", c.err);
    }
#ifndef MHE_NO_STDIO
    OK(mhe_bpe_save(&b, "build/test_bpe.tok"));
    OK(mhe_bpe_load(&c, "build/test_bpe.tok"));
    CHECK(c.n_tokens == b.n_tokens, "file round trip");
    CHECK(mhe_bpe_load(&c, "build/no_such.tok") == MHE_ERR_IO && strstr(c.err, "no_such"), "missing file: %s", c.err);
    remove("build/test_bpe.tok");
#endif
    mhe_bpe_free(&b); mhe_bpe_free(&c);
    free(buf); free(buf2);
}

/* a small tokenizer.json: bytes a b c d (a reordered alphabet), merges ab, abc, and <s> */
static const char *HF_HEAD =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":6,\"content\":\"<s>\","
    "\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
    "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,"
    "\"fuse_unk\":false,\"byte_fallback\":false,\"vocab\":{\"b\":0,\"a\":1,\"c\":2,\"d\":3,\"ab\":4,\"abc\":5,\"<s>\":6,\"\\u0120\":7},";

static mhe_status hf_load(mhe_bpe *b, const char *merges_and_end) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", HF_HEAD, merges_and_end);
    return mhe_bpe_load_hf(b, buf, strlen(buf));
}

static void hugging_face(void) {
    mhe_bpe b;
    int ids[32];
    size_t n;
    char err[MHE_ERR_LEN];
    mhe_bpe_init(&b, NULL);
    OK(hf_load(&b, "\"merges\":[\"a b\",\"ab c\"]}}"));
    CHECK(b.n_tokens == 8 && b.byte_id['a'] == 1 && b.byte_id[' '] == 7 && b.byte_id['e'] == -1 && b.added[6], "ids as the file gives them");
    OK(mhe_bpe_encode(&b, "abcab<s>dxb", 11, ids, 11, &n, NULL, err));
    /* abc ab <s> d, x dropped (no token, no unk: as tokenizers does), b */
    CHECK(n == 5 && ids[0] == 5 && ids[1] == 4 && ids[2] == 6 && ids[3] == 3 && ids[4] == 0, "abcab<s>dxb -> 5 4 6 3 0 (%zu ids)", n);
    OK(hf_load(&b, "\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"]]}}"));
    OK(mhe_bpe_encode(&b, "abc", 3, ids, 3, &n, NULL, err));
    CHECK(n == 1 && ids[0] == 5, "the [a, b] form of merges");
    {
        struct { const char *tail; const char *msg; } bad[] = {
            {"\"merges\":[\"a b\",\"a b\"]}}", "model.merges: merge 1 repeats"},
            {"\"merges\":[\"a e\"]}}", "model.merges[0]: 'e' is not in model.vocab"},
            {"\"merges\":[\"c d\"]}}", "model.merges[0]: the result 'cd'"},
            {"\"merges\":[\"a  b\"]}}", "model.merges[0] is not two tokens"},
            {"\"merges\":[[\"a\"]]}}", "model.merges[0] must be a pair"},
            {"\"merges\":[\"a b\",\"ab c\"]", "(end of file)"},
            {"\"merges\":[\"a b\",\"ab c\"]}} x", "bytes after"},
            {"\"merges\":[\"a b\"],\"dropout\":0.1}}", "model.dropout"},
            {"\"merges\":[\"a b\"],\"byte_fallback\":true}}", "model.byte_fallback"},
            {"\"merges\":[\"a b\"],\"type\":\"WordPiece\"}}", "model.merges in a WordPiece model"},
            {"\"merges\":[\"a b\"]},\"normalizer\":{\"type\":\"NFC\"}}", "normalizer.type 'NFC' is not supported"},
            {"\"merges\":[\"a b\"]},\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":true}}", "ByteLevel components only (normalizer BertNormalizer)"},
            {"\"merges\":[\"a b\"],\"type\":\"Unigram\"}}", "model.type 'Unigram' is neither"},
            {"\"merges\":[\"a b\"]},\"pre_tokenizer\":null}", "pre_tokenizer"},
            {"\"merges\":[\"a b\"],\"vocab\":{}}}", "model.vocab appears twice"},
            {"\"merges\":[\"a b\"],\"unk_token\":\"<unk>\"}}", "model.unk_token '<unk>'"},
        };
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            mhe_status st = hf_load(&b, bad[i].tail);
            CHECK(st != MHE_OK && strstr(b.err, bad[i].msg) && b.n_tokens == 0, "bad tokenizer.json %zu: %s", i, b.err);
        }
    }
    {   /* a vocab with a gap, a repeated id, a non-byte-level entry, an added token at another's id */
        const char *bad[][2] = {
            {"{\"model\":{\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "no token has id 1"},
            {"{\"model\":{\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "both have id 0"},
            {"{\"model\":{\"vocab\":{\"\\u20ac\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "not byte-level"},
            {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"added_tokens\":[{\"id\":0,\"content\":\"<s>\"}]}", "model.vocab gives to 'a'"},
            {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"lstrip\":true}]}", "added_tokens[0].lstrip"},
            {"{\"model\":{\"vocab\":{\"a\":-1},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "model.vocab[0]: an id"},
            {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", "pre_tokenizer.type 'Whitespace'"},
            {"{\"model\":{\"vocab\":{\"a\":0}},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}", "model.merges is missing"},
            {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"post_processor\":{\"type\":\"TemplateProcessing\"}}", "post_processor.single is missing"},
        };
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECK(mhe_bpe_load_hf(&b, bad[i][0], strlen(bad[i][0])) != MHE_OK && strstr(b.err, bad[i][1]), "bad vocab %zu: %s", i, b.err);
    }
    {   /* every truncation of a valid file is refused */
        char buf[4096];
        size_t k, len;
        int acc = 0;
        snprintf(buf, sizeof buf, "%s%s", HF_HEAD, "\"merges\":[\"a b\",\"ab c\"]}}");
        len = strlen(buf);
        for (k = 0; k < len; k++) if (mhe_bpe_load_hf(&b, buf, k) == MHE_OK) acc++;
        CHECK(acc == 0, "%d truncations of tokenizer.json accepted", acc);
    }
    {   /* two passes of added tokens, as tokenizers' AddedVocabulary: "normalized": false ones first,
           then the "normalized": true ones between them; "ab" is also a vocabulary entry (a merge makes it) */
        const char *j = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"x\":3,\"ab\":4},\"merges\":[\"a b\"]},"
                        "\"added_tokens\":[{\"id\":4,\"content\":\"ab\",\"normalized\":true},{\"id\":5,\"content\":\"bc\",\"normalized\":false,\"special\":true}],"
                        "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
        char buf[2048];
        size_t k;
        mhe_bpe c;
        OK(mhe_bpe_load_hf(&b, j, strlen(j)));
        CHECK(b.added[4] == (MHE_BPE_ADDED | MHE_BPE_ADDED_LATE | MHE_BPE_ADDED_VOCAB) && b.added[5] == MHE_BPE_ADDED, "added flags %d %d", b.added[4], b.added[5]);
        OK(mhe_bpe_encode(&b, "xabcx", 5, ids, 5, &n, NULL, err));
        CHECK(n == 4 && ids[0] == 3 && ids[1] == 0 && ids[2] == 5 && ids[3] == 3, "xabcx -> x a bc x: bc (first pass) wins over ab (%zu)", n);
        OK(mhe_bpe_encode(&b, "abxab", 5, ids, 5, &n, NULL, err));
        CHECK(n == 3 && ids[0] == 4 && ids[1] == 3 && ids[2] == 4, "abxab -> ab x ab");
        mhe_bpe_init(&c, NULL);
        OK(mhe_bpe_save_mem(&b, buf, sizeof buf, &k));
        OK(mhe_bpe_load_mem(&c, buf, k));
        OK(mhe_bpe_encode(&c, "xabcx", 5, ids, 5, &n, NULL, err));
        CHECK(n == 4 && ids[2] == 5 && c.added[4] == b.added[4], "the text form keeps the flags (N, a)");
        mhe_bpe_free(&c);
    }
    {   /* ignore_merges: a piece that is a vocabulary entry is that entry (tokenizers 0.19.1: 4 3 2 3; '.' has no token) */
        const char *j = "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4},"
                        "\"merges\":[\"a b\"]},\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
        OK(mhe_bpe_load_hf(&b, j, strlen(j)));
        OK(mhe_bpe_encode(&b, "abc.abcab", 9, ids, 9, &n, NULL, err));
        CHECK(n == 4 && ids[0] == 4 && ids[1] == 3 && ids[2] == 2 && ids[3] == 3, "ignore_merges: abc . abcab -> 4 3 2 3 (%zu)", n);
    }
    {   /* add_prefix_space puts a space before every stretch between added tokens: more ids than bytes */
        const char *j = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"\\u0120\":1,\"|\":2},\"merges\":[]},"
                        "\"added_tokens\":[{\"id\":2,\"content\":\"|\",\"special\":true,\"normalized\":false}],"
                        "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true}}";
        OK(mhe_bpe_load_hf(&b, j, strlen(j)));
        CHECK(mhe_bpe_max_ids(&b, 5) == 11, "max_ids with prefix_space");
        OK(mhe_bpe_encode(&b, "a|a|a", 5, ids, mhe_bpe_max_ids(&b, 5), &n, NULL, err));
        CHECK(n == 8 && ids[0] == 1 && ids[1] == 0 && ids[2] == 2 && ids[3] == 1 && ids[7] == 0, "' a' | ' a' | ' a': 8 ids of 5 bytes (%zu)", n);
    }
    {   /* unk with fuse_unk: unknown bytes become one unk */
        const char *j = "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"vocab\":{\"<unk>\":0,\"a\":1},\"merges\":[]},"
                        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\",\"add_prefix_space\":false}]}}";
        OK(mhe_bpe_load_hf(&b, j, strlen(j)));
        OK(mhe_bpe_encode(&b, "axyza", 5, ids, 5, &n, NULL, err));
        CHECK(n == 3 && ids[0] == 1 && ids[1] == 0 && ids[2] == 1, "a <unk> a (%zu)", n);
    }
    mhe_bpe_free(&b);
}

/* the checkpoint ck with its tokenizer tensor replaced by tok's text form and
   the MD5 metadata by md5 (NULL: tok's own); a fresh malloc'd file in *out */
static size_t swap_tokenizer(const void *ck, size_t n, const mhe_bpe *tok, const char *md5, void **out) {
    mhe_safetensors st;
    mhe_st_item items[64];
    const char *keys[128], *vals[128];
    char *text, hex[33];
    size_t tn, w = 0, size;
    int i, ni = 0, nm = 0;
    unsigned char d[16];
    float *floats[64];
    if (mhe_st_parse(&st, ck, n, NULL) != MHE_OK || mhe_bpe_save_mem(tok, NULL, 0, &tn) != MHE_OK) return 0;
    text = (char *)malloc(tn);
    if (mhe_bpe_save_mem(tok, text, tn, &tn) != MHE_OK) return 0;
    mhe_md5(text, tn, d);
    for (i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    for (i = 0; i < st.n_tensors && ni < 64; i++) {
        const mhe_st_tensor *t = &st.tensors[i];
        mhe_st_item *it = &items[ni];
        memset(it, 0, sizeof *it);
        it->name = t->name; it->ndim = t->ndim;
        memcpy(it->shape, t->shape, sizeof t->shape);
        floats[ni] = NULL;
        if (strcmp(t->name, "bpe.tokenizer") == 0) { it->dtype = MHE_DTYPE_I8; it->data_i8 = (const int8_t *)(const void *)text; it->shape[0] = (int64_t)tn; }
        else if (t->dtype == MHE_DTYPE_F32) { floats[ni] = (float *)malloc((size_t)t->size * 4 + 4); memcpy(floats[ni], t->data, (size_t)t->size * 4); it->data = floats[ni]; }
        else return 0;
        ni++;
    }
    for (i = 0; i < st.n_meta && nm < 128; i++, nm++) {
        keys[nm] = st.meta_keys[i];
        vals[nm] = strcmp(st.meta_keys[i], "tokenizer.md5") == 0 ? (md5 ? md5 : hex) : st.meta_values[i];
    }
    if (mhe_st_write_size(items, ni, keys, vals, nm, &size, NULL) != MHE_OK) return 0;
    *out = malloc(size);
    if (mhe_st_write_mem(*out, size, &w, items, ni, keys, vals, nm, NULL) != MHE_OK) w = 0;
    for (i = 0; i < ni; i++) free(floats[i]);
    free(text);
    mhe_st_free(&st);
    return w;
}

static void checkpoints(void) {
    const char *t = "the cat sat on the mat; the dog sat on the log. 'tis the season, isn't it?";
    mhe_bpe b, small;
    mhe_config cfg = mhe_config_default();
    mhe_model m, m2;
    char err[MHE_ERR_LEN];
    size_t n = 0, n2;
    void *ck, *bad = NULL;
    unsigned char d1[16], d2[16];
    mhe_bpe_init(&b, NULL);
    mhe_bpe_init(&small, NULL);
    OK(mhe_bpe_train(&b, t, strlen(t), 270, MHE_BPE_SPLIT_GPT2, NULL, 0));
    OK(mhe_bpe_train(&small, t, strlen(t), 265, MHE_BPE_SPLIT_GPT2, NULL, 0));
    OK(mhe_config_set(&cfg, "d_model", "16", err));
    OK(mhe_config_set(&cfg, "n_heads", "2", err));
    OK(mhe_config_set(&cfg, "n_layers", "1", err));
    OK(mhe_config_set(&cfg, "max_seq_len", "16", err));
    OK(mhe_config_set(&cfg, "vocab_size", "270", err));
    OK(mhe_model_init(&m, &cfg, 1, NULL));
    CHECK(mhe_model_set_bpe(&m, &small) == MHE_ERR_CONFIG && strstr(m.err, "vocab_size 270") && strstr(m.err, "265"), "vocab_size mismatch: %s", m.err);
    OK(mhe_model_set_bpe(&m, &b));
    OK(mhe_checkpoint_size(&m, NULL, &n));
    ck = malloc(n);
    OK(mhe_checkpoint_write_mem(&m, NULL, ck, n, &n2));
    OK(mhe_model_load_mem(&m2, ck, n, NULL));
    CHECK(m2.bpe && m2.bpe->n_tokens == 270, "the tokenizer comes back with the model");
    if (m2.bpe) { OK(mhe_bpe_md5(&b, d1)); OK(mhe_bpe_md5(m2.bpe, d2)); CHECK(memcmp(d1, d2, 16) == 0, "the same tokenizer (MD5)"); }
    mhe_model_free(&m2);
    {   /* one byte of the tokenizer's text changed: the MD5 disagrees */
        mhe_safetensors st;
        size_t off;
        OK(mhe_st_parse(&st, ck, n, NULL));
        off = (size_t)(mhe_st_find(&st, "bpe.tokenizer")->data - (const unsigned char *)ck) + 20;
        mhe_st_free(&st);
        ((unsigned char *)ck)[off] ^= 1;
        CHECK(mhe_model_load_mem(&m2, ck, n, NULL) == MHE_ERR_FORMAT && strstr(m2.err, "bpe.tokenizer") && strstr(m2.err, "MD5"), "damaged tokenizer: %s", m2.err);
        ((unsigned char *)ck)[off] ^= 1;
    }
    {   /* an arena load checks the MD5 and allocates no tokenizer */
        size_t need = 0;
        mhe_arena ar;
        OK(mhe_inference_memory_needed(ck, n, 8, 0, &need));
        OK(mhe_arena_alloc_block(&ar, need, NULL));
        OK(mhe_model_load_arena(&m2, ck, n, &ar, 0));
        CHECK(m2.bpe == NULL, "arena load: no tokenizer on the heap");
        mhe_model_free(&m2);
        mhe_arena_reset(&ar);
        n2 = swap_tokenizer(ck, n, &b, "00000000000000000000000000000000", &bad);
        CHECK(mhe_model_load_arena(&m2, bad, n2, &ar, 0) == MHE_ERR_FORMAT && strstr(m2.err, "MD5"), "arena load, wrong MD5: %s", m2.err);
        free(bad);
        mhe_arena_free(&ar);
    }
    /* another tokenizer with its own MD5: 265 tokens for a model of 270 */
    n2 = swap_tokenizer(ck, n, &small, NULL, &bad);
    CHECK(n2 && mhe_model_load_mem(&m2, bad, n2, NULL) == MHE_ERR_CONFIG && strstr(m2.err, "vocab_size 270"), "vocab size mismatch in a file: %s", m2.err);
    free(bad);
    n2 = swap_tokenizer(ck, n, &b, "00000000000000000000000000000000", &bad);
    CHECK(n2 && mhe_model_load_mem(&m2, bad, n2, NULL) == MHE_ERR_FORMAT && strstr(m2.err, "tokenizer.md5"), "wrong MD5: %s", m2.err);
    free(bad);
    {   /* a model with a tokenizer takes no word vocabulary */
        mhe_lexicon x;
        int ty;
        mhe_lexicon_init(&x, NULL);
        OK(mhe_lexicon_intern(&x, "word", 4, 1, &ty));
        CHECK(mhe_model_set_vocab(&m, &x) == MHE_ERR_CONFIG && strstr(m.err, "BPE"), "set_vocab on a BPE model: %s", m.err);
        mhe_lexicon_free(&x);
    }
    /* fine-tuning keeps it */
    OK(mhe_model_init_from(&m2, &cfg, &m, 2, NULL, NULL));
    CHECK(m2.bpe && m2.bpe->n_tokens == 270, "init_from copies the tokenizer");
    mhe_model_free(&m2);
    mhe_model_free(&m);
    mhe_bpe_free(&b); mhe_bpe_free(&small);
    free(ck);
}

/* 4000 random changes of one to three bytes (from pick, or any byte), and
   now and then a cut, alternately to a tokenizer.json (hf) and to mhe's text
   form (text): a load succeeds or fails with a message, never crashes (run
   under the sanitizers by make test-sanitize); a loaded tokenizer encodes
   and decodes t. Returns the failures; *loaded counts the loads. */
static int mutate_loads(const char *hf, const char *text, size_t text_len, const char *pick, const char *t, int *loaded) {
    mhe_bpe c;
    char *buf = (char *)malloc(1 << 16), err[MHE_ERR_LEN];
    size_t i, k, m, pn = strlen(pick);
    int trial, bad = 0, ids[256];
    mhe_bpe_init(&c, NULL);
    *loaded = 0;
    for (trial = 0; trial < 4000; trial++) {
        const char *src = trial % 2 ? hf : text;
        size_t len = trial % 2 ? strlen(hf) : text_len;
        mhe_status st;
        memcpy(buf, src, len);
        for (k = 0, m = 1 + rnd() % 3; k < m; k++) {
            i = rnd() % len;
            buf[i] = (char)(rnd() % 4 ? pick[rnd() % pn] : (char)(rnd() & 0xff));
        }
        if (rnd() % 8 == 0) len = rnd() % len;
        st = trial % 2 ? mhe_bpe_load_hf(&c, buf, len) : mhe_bpe_load_mem(&c, buf, len);
        if (st != MHE_OK) { if (!c.err[0] || c.n_tokens) bad++; continue; }
        ++*loaded;
        if (mhe_bpe_encode(&c, t, strlen(t), ids, 256, &k, NULL, err) != MHE_OK || mhe_bpe_decode(&c, ids, k, buf, 1 << 16, &i, err) != MHE_OK) bad++;
    }
    mhe_bpe_free(&c);
    free(buf);
    return bad;
}

static void mutations(void) {
    mhe_bpe b;
    char *good = (char *)malloc(1 << 16), hf[4096];
    size_t n;
    int bad, loaded;
    const char *t = "the cat sat on the mat; the dog sat on the log";
    mhe_bpe_init(&b, NULL);
    OK(mhe_bpe_train(&b, t, strlen(t), 270, MHE_BPE_SPLIT_GPT2, NULL, 0));
    OK(mhe_bpe_save_mem(&b, good, 1 << 16, &n));
    snprintf(hf, sizeof hf, "%s%s", HF_HEAD, "\"merges\":[\"a b\",[\"ab\",\"c\"]]}}");
    bad = mutate_loads(hf, good, n, "0123456789 \n\"{}[],:atb-", t, &loaded);
    CHECK(bad == 0, "4000 mutated files: %d failures without a message, or loaded ones that do not encode (%d loaded)", bad, loaded);
    mhe_bpe_free(&b);
    free(good);
}

/* WordPiece (BERT's): a hand-written tokenizer.json with known answers
   (normalizer, punctuation, greedy pieces, unk, added tokens, the
   template in text sets), decoding, the text form, a checkpoint, and
   random bytes within mhe_bpe_max_ids and mhe_bpe_work_size */
static const char *WP_JSON =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
    "\"added_tokens\":[{\"id\":0,\"content\":\"[PAD]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":1,\"content\":\"[UNK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":2,\"content\":\"[CLS]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":3,\"content\":\"[SEP]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
    "{\"id\":4,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],"
    "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
    "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],\"pair\":[],"
    "\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[2],\"tokens\":[\"[CLS]\"]},\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[3],\"tokens\":[\"[SEP]\"]}}},"
    "\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
    "\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,"
    "\"vocab\":{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,\"[MASK]\":4,\"hello\":5,\"world\":6,\"##s\":7,\"cafe\":8,\",\":9,\"!\":10,"
    "\"un\":11,\"##aff\":12,\"##able\":13,\"\\u5317\":14,\"i\":15,\"a\":16,\"##a\":17,\"\\u1112\":18,\"##\\u1161\":19,\"##\\u11ab\":20}}}";

static void wordpiece(void) {
    static const struct { const char *text; int n; int ids[8]; } known[] = {
        {"H\xc3\xa9llo, WORLDs!", 5, {5, 9, 6, 7, 10}},        /* accents stripped, lowercase, punctuation split, ##s */
        {"unaffable", 3, {11, 12, 13}},                         /* greedy longest pieces */
        {"Caf\xc3\xa9\xe5\x8c\x97\xe4\xba\xac", 3, {8, 14, 1}}, /* CJK padded: each ideograph a word; one not in the vocab is unk */
        {"\xc4\xb0", 1, {15}},                                  /* U+0130: I + combining dot, the dot stripped, then i */
        {"hello\xffworld", 1, {1}},                             /* an invalid byte is U+FFFD, dropped: "helloworld" is unk */
        {"a\x01" "a\xe2\x80\x83" "a", 3, {16, 17, 16}},         /* a control dropped ("aa"), an em space splits */
        {"[MASK] hello[CLS]", 3, {4, 5, 2}},                    /* added tokens cut out before normalisation */
        {"\xed\x95\x9c", 3, {18, 19, 20}},                      /* a Hangul syllable is its three jamo */
        {"  \t\n ", 0, {0}},
    };
    mhe_bpe b, c;
    char err[MHE_ERR_LEN], out[256], *buf;
    int ids[256];
    size_t n, i, len;
    mhe_bpe_init(&b, NULL);
    mhe_bpe_init(&c, NULL);
    OK(mhe_bpe_load_hf(&b, WP_JSON, strlen(WP_JSON)));
    CHECK(b.model == MHE_TOK_WORDPIECE && b.cls == 2 && b.sep == 3 && b.unk == 1 && b.normalize == 15 && b.split == MHE_BPE_SPLIT_BERT
          && strcmp(b.subword_prefix, "##") == 0 && b.max_word_chars == 100 && b.decode_cleanup == 1, "the fields of a BERT tokenizer.json");
    for (i = 0; i < sizeof known / sizeof known[0]; i++) {
        int same;
        OK(mhe_bpe_encode(&b, known[i].text, strlen(known[i].text), ids, 256, &n, NULL, err));
        same = (int)n == known[i].n && memcmp(ids, known[i].ids, n * sizeof(int)) == 0;
        CHECK(same, "wordpiece %zu: %zu ids, first %d (want %d, first %d)", i, n, n ? ids[0] : -1, known[i].n, known[i].ids[0]);
    }
    {   /* a word of 101 characters is unk; of 100, pieces */
        char w[102];
        memset(w, 'a', 101); w[101] = 0;
        OK(mhe_bpe_encode(&b, w, 101, ids, 256, &n, NULL, err));
        CHECK(n == 1 && ids[0] == 1, "101 characters: unk (%zu ids)", n);
        OK(mhe_bpe_encode(&b, w, 100, ids, 256, &n, NULL, err));
        CHECK(n == 100 && ids[0] == 16 && ids[99] == 17, "100 characters: a ##a ... (%zu ids)", n);
        CHECK(mhe_bpe_encode(&b, w, 100, ids, 99, &n, NULL, err) == MHE_ERR_SHAPE, "99 ids of room for 100: %s", err);
    }
    {   /* decode: pieces joined, cleanup */
        static const int h[] = {2, 5, 9, 6, 7, 10, 3};
        OK(mhe_bpe_decode(&b, h, 7, out, sizeof out, &len, err));
        CHECK(len == 26 && memcmp(out, "[CLS] hello, worlds! [SEP]", 26) == 0, "decode: '%.*s'", (int)len, out);
        b.decode_cleanup = 0;
        OK(mhe_bpe_decode(&b, h + 1, 5, out, sizeof out, &len, err));
        CHECK(len == 16 && memcmp(out, "hello , worlds !", 16) == 0, "decode without cleanup: '%.*s'", (int)len, out);
        b.decode_cleanup = 1;
    }
    {   /* the template around each example of a text set */
        mhe_text_set s;
        const char *set = "0\tHello!\n1\tunaffable\n";
        OK(mhe_text_set_parse(&s, set, strlen(set), NULL, err));
        OK(mhe_text_set_bpe(&s, &b, err));
        CHECK(s.start[1] == 4 && s.start[2] == 9 && s.tokens[0] == 2 && s.tokens[1] == 5 && s.tokens[2] == 10 && s.tokens[3] == 3
              && s.tokens[4] == 2 && s.tokens[8] == 3, "text set: [CLS] hello ! [SEP] | [CLS] un ##aff ##able [SEP]");
        CHECK(s.types == NULL, "text set without a pair: no token types");
        mhe_text_set_free(&s);
    }
    {   /* a pair, A<TAB>B: BERT's pair template and token types */
        mhe_text_set s;
        const char *set = "1\tHello!\tunaffable\n0\tHello!\n";
        static const int want[] = {2, 5, 10, 3, -1, -1, -1, 3, 2, 5, 10, 3}, /* -1: unaffable's three ids */
                         want_types[] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
        int pair_ok, types[12], idx[2] = {0, 1};
        OK(mhe_bpe_encode(&b, "unaffable", 9, ids, 256, &n, NULL, err));
        OK(mhe_text_set_parse(&s, set, strlen(set), NULL, err));
        OK(mhe_text_set_bpe(&s, &b, err));
        pair_ok = n == 3 && s.start[1] == 8 && s.start[2] == 12 && s.types != NULL;
        for (i = 0; pair_ok && i < 12; i++)
            pair_ok = (i < 4 || i > 6 ? s.tokens[i] == want[i] : s.tokens[i] == ids[i - 4]) && s.types[i] == want_types[i];
        CHECK(pair_ok, "pair: [CLS] hello ! [SEP] un ##aff ##able [SEP], types 0 0 0 0 1 1 1 1; a single text types 0");
        mhe_text_set_batch_types(&s, idx, 2, 6, types);
        CHECK(types[3] == 0 && types[4] == 1 && types[5] == 1 && types[6] == 0 && types[11] == 0,
              "the batch's types cut at T = 6, padding type 0");
        mhe_text_set_free(&s);
        set = "1\tHello!\t \n";
        OK(mhe_text_set_parse(&s, set, strlen(set), NULL, err));
        CHECK(mhe_text_set_bpe(&s, &b, err) == MHE_ERR_DATA && strstr(err, "example 1: the second text of the pair has no token"),
              "a pair whose second text has no token: %s", err);
        mhe_text_set_free(&s);
    }
    {   /* a set of pairs trains with its types: the trainer's loss is its batch's forward loss with them */
        mhe_text_set s;
        const char *set = "1\tHello!\tunaffable\n0\tunaffable\tHello!\n1\tHello, worlds!\tHello!\n";
        mhe_config c = mhe_config_default();
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m1, m2;
        mhe_trainer t;
        mhe_batch bt;
        int tok[2 * 10], lens[2], labs[2], ty[2 * 10];
        float with = 0, without = 0;
        c.d_model = 16; c.n_heads = 2; c.n_layers = 1; c.d_ff = 32; c.max_seq_len = 16; c.vocab_size = b.n_tokens;
        c.arch = MHE_ARCH_ENCODER; c.n_classes = 2; c.type_vocab = 2;
        tc.batch = 2; tc.seq_len = 10; tc.steps = 1;
        OK(mhe_text_set_parse(&s, set, strlen(set), NULL, err));
        OK(mhe_text_set_bpe(&s, &b, err));
        OK(mhe_model_init(&m1, &c, 7, NULL));
        OK(mhe_model_init(&m2, &c, 7, NULL));
        OK(mhe_trainer_init(&t, &m1, &tc));
        OK(mhe_trainer_step_cls(&t, &s));
        mhe_text_set_batch(&s, t.batch_targets, 2, 10, tok, lens, labs);   /* the step's examples, in the targets' room */
        mhe_text_set_batch_types(&s, t.batch_targets, 2, 10, ty);
        memset(&bt, 0, sizeof bt);
        bt.B = 2; bt.T = 10; bt.tokens = tok; bt.lengths = lens; bt.labels = labs; bt.types = ty;
        m2.training = 1;
        OK(mhe_model_forward_batch(&m2, &bt, &with));
        bt.types = NULL;
        OK(mhe_model_forward_batch(&m2, &bt, &without));
        CHECK(fabsf(t.last_loss - with) < 1e-6f * (1 + with) && fabsf(with - without) > 1e-4f,
              "a pair set's training step uses its types: loss %.6f, forward %.6f with them, %.6f without", t.last_loss, with, without);
        mhe_trainer_free(&t);
        mhe_model_free(&m1);
        mhe_model_free(&m2);
        mhe_text_set_free(&s);
    }
    {   /* the text form: a round trip with the same ids and MD5 */
        unsigned char d1[16], d2[16];
        OK(mhe_bpe_save_mem(&b, NULL, 0, &len));
        buf = (char *)malloc(len);
        OK(mhe_bpe_save_mem(&b, buf, len, &len));
        CHECK(len > 16 && memcmp(buf, "mhe-wordpiece 1\n", 16) == 0, "the text form starts with mhe-wordpiece 1");
        OK(mhe_bpe_load_mem(&c, buf, len));
        OK(mhe_bpe_md5(&b, d1)); OK(mhe_bpe_md5(&c, d2));
        CHECK(memcmp(d1, d2, 16) == 0 && c.model == MHE_TOK_WORDPIECE && c.cls == 2 && c.normalize == 15, "text form round trip");
        OK(mhe_bpe_encode(&c, known[0].text, strlen(known[0].text), ids, 256, &n, NULL, err));
        CHECK(n == 5 && ids[4] == 10, "the reloaded tokenizer encodes the same");
        CHECK(mhe_bpe_load_mem(&c, buf, len - 5) == MHE_ERR_TRUNCATED && c.n_tokens == 0, "a truncated mhe-wordpiece: %s", c.err);
        free(buf);
    }
    {   /* random bytes: within max_ids, in exactly mhe_bpe_work_size bytes of work (checked by the sanitizers) */
        int trial, fails = 0;
        for (trial = 0; trial < 400; trial++) {
            size_t L = rnd() % 200, k, cap = mhe_bpe_max_ids(&b, L);
            char *t = (char *)malloc(L + 1);
            void *work = malloc(mhe_bpe_work_size(L));
            int *o = (int *)malloc((cap + 1) * sizeof(int));
            static const char *pool[] = {"\xe5\x8c\x97", "\xed\x95\x9c", "\xc4\xb0", "a", " ", "!", "[MASK]", "\xc3\xa9", "\xf0\x9f\x8e\x89", "\xcc\x81"};
            for (k = 0; k < L; ) {
                if (rnd() % 3) { const char *q = pool[rnd() % 10]; size_t m = strlen(q); if (k + m > L) m = L - k; memcpy(t + k, q, m); k += m; }
                else t[k++] = (char)(rnd() & 0xff);
            }
            if (mhe_bpe_encode(&b, t, L, o, cap, &n, work, err) != MHE_OK || n > cap) fails++;
            free(t); free(work); free(o);
        }
        CHECK(fails == 0, "400 random texts within mhe_bpe_max_ids: %d failed", fails);
    }
    {   /* a model carries it through a checkpoint */
        mhe_config cfg = mhe_config_default();
        mhe_model m, m2;
        void *ck;
        size_t n2;
        OK(mhe_config_set(&cfg, "d_model", "16", err));
        OK(mhe_config_set(&cfg, "n_heads", "2", err));
        OK(mhe_config_set(&cfg, "n_layers", "1", err));
        OK(mhe_config_set(&cfg, "max_seq_len", "16", err));
        OK(mhe_config_set(&cfg, "vocab_size", "21", err));
        OK(mhe_model_init(&m, &cfg, 1, NULL));
        OK(mhe_model_set_bpe(&m, &b));
        OK(mhe_checkpoint_size(&m, NULL, &n));
        ck = malloc(n);
        OK(mhe_checkpoint_write_mem(&m, NULL, ck, n, &n2));
        OK(mhe_model_load_mem(&m2, ck, n, NULL));
        CHECK(m2.bpe && m2.bpe->model == MHE_TOK_WORDPIECE && m2.bpe->sep == 3, "the WordPiece tokenizer comes back with the model");
        if (m2.bpe) {
            OK(mhe_bpe_encode(m2.bpe, known[1].text, strlen(known[1].text), ids, 256, &n, NULL, err));
            CHECK(n == 3 && ids[2] == 13, "and encodes the same");
        }
        mhe_model_free(&m2); mhe_model_free(&m);
        free(ck);
    }
    mhe_bpe_free(&b); mhe_bpe_free(&c);
}

/* the same mutations of a WordPiece tokenizer.json and of its text form */
static void wordpiece_mutations(void) {
    mhe_bpe b;
    char *good = (char *)malloc(1 << 16);
    size_t n;
    int bad, loaded;
    mhe_bpe_init(&b, NULL);
    OK(mhe_bpe_load_hf(&b, WP_JSON, strlen(WP_JSON)));
    OK(mhe_bpe_save_mem(&b, good, 1 << 16, &n));
    bad = mutate_loads(WP_JSON, good, n, "0123456789 \n\"{}[],:-#tfnulWPBS",
                       "H\xc3\xa9llo, WORLDs! unaffable \xe5\x8c\x97 [MASK] \xed\x95\x9c \xff", &loaded);
    CHECK(bad == 0 && loaded > 100, "4000 mutated WordPiece files: %d failures without a message, or loaded ones that do not encode (%d loaded)", bad, loaded);
    mhe_bpe_free(&b);
    free(good);
}

/* mhe_bpe_encode_threads: where a text may be cut, then many pieces of random
   texts (runs of blank lines, CR LF, Unicode spaces, added tokens with white
   space) against one mhe_bpe_encode */
static void threaded(void) {
    static const struct { const char *t; size_t cut; } cuts[] = {
        {"x\ny", 1}, {"x\r\ny", 2}, {"x\n\n\ny", 3}, {"x\n  y", 3}, {"x\n", 0}, {"x y", 1}, {"x\xe3\x80\x80y", 0},
        {"x \xe3\x80\x80y", 0}, {"x \n\xe2\x80\xa8\ty", 6}, {"\ny", 0},
        {"x\n<y", 0} /* '<' starts an added token */, {"x\n<y\nz", 4}, {">\ny", 0} /* '>' ends one */, {">\ny z", 3},
    };
    static const char *frag[] = {
        "the", "cat", "Hello", "WORLD", " ", "  ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\t", " \n ", "\n ", " \n",
        "\xe3\x80\x80", "\xc2\x85", "\xe2\x80\xa8", "\x0b", "\x0c", "'s", "'ll", "123", "3.14", "!!", "\xe4\xb8\x96",
        "\xf0\x9f\x8e\x89", "e\xcc\x81", "H\xc3\xa9llo", "\xff", "\xc3", "<|endoftext|>", "\r\n\r", "[MASK]", "a b",
    };
    static const char *corpus = "the cat sat on the mat.\nHello WORLD, it's 3.14!\r\n\r\n\tcaf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c\n\n\n";
    const char *added[2] = { "<|endoftext|>", "\r\n\r" };
    unsigned char ok[256];
    mhe_bpe b;
    char err[MHE_ERR_LEN], *text = (char *)malloc(70000);
    int *want = (int *)malloc(140002 * sizeof(int)), *got = (int *)malloc(140002 * sizeof(int)), v, bad = 0, trials = 0;
    size_t i, nw, ng, len;
    memset(ok, 0, sizeof ok);
    for (i = 9; i <= 13; i++) ok[i] = 1;
    ok[' '] = 1;
    ok['<'] = 2;   /* an added token starts with '<' and ends with '>' */
    ok['>'] = 4;
    for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t at = mhe__bpe_cut((const unsigned char *)cuts[i].t, strlen(cuts[i].t), 0, strlen(cuts[i].t), ok);
        CHECK(at == cuts[i].cut, "cut of %zu: %zu, want %zu", i, at, cuts[i].cut);
    }
    mhe_bpe_init(&b, NULL);
    for (v = 0; v < 5; v++) {   /* trained BPE; prefix_space; a late added token with CR LF; WordPiece; WordPiece, an added token with a space */
        int t;
        size_t c = 0;
        if (v < 3) {
            char big[4000];
            for (i = 0; i < sizeof big; i++) big[i] = corpus[i % strlen(corpus)];
            OK(mhe_bpe_train(&b, big, sizeof big, 400, MHE_BPE_SPLIT_GPT2, added, v == 2 ? 2 : 1));
            b.prefix_space = v == 1;
            if (v == 2) b.added[b.n_tokens - 1] |= MHE_BPE_ADDED_LATE;
        } else {
            OK(mhe_bpe_load_hf(&b, WP_JSON, strlen(WP_JSON)));
            if (v == 4) {   /* "a b" as a late added token (the normalizer leaves it) */
                static const char *tok = ",{\"id\":21,\"content\":\"a b\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                                         "\"normalized\":true,\"special\":false}";
                const char *a1 = strstr(WP_JSON, "],\"normalizer\""), *a2 = strstr(WP_JSON, "}}}");
                char *j = (char *)malloc(strlen(WP_JSON) + 200);
                sprintf(j, "%.*s%s%.*s,\"a b\":21%s", (int)(a1 - WP_JSON), WP_JSON, tok, (int)(a2 - a1), a1, a2);
                CHECK(mhe_bpe_load_hf(&b, j, strlen(j)) == MHE_OK, "WordPiece with a late added token 'a b': %s", b.err);
                free(j);
            }
        }
        for (t = 0; t < 12; t++) {
            len = 2000 + rnd() % 60000;
            for (i = 0; i < len;) {
                const char *f = frag[rnd() % (sizeof frag / sizeof frag[0])];
                size_t k = strlen(f);
                if (i + k > len) break;
                memcpy(text + i, f, k);
                i += k;
            }
            len = i;
            if (mhe_bpe_encode(&b, text, len, want, mhe_bpe_max_ids(&b, len), &nw, NULL, err) != MHE_OK ||
                mhe__bpe_encode_par(&b, text, len, got, t % 3 ? mhe_bpe_max_ids(&b, len) : 2 * len + 1, &ng, 1 + t % 3, 4 + t * 7, 256, err) != MHE_OK ||
                nw != ng || memcmp(want, got, nw * sizeof(int)) != 0) { bad++; printf("  variant %d, text %d: %s\n", v, t, err); }
            trials++;
            if (!c) c = mhe__bpe_cut((const unsigned char *)text, len, len / 2, len, ok);
        }
        CHECK(v == 4 || c, "variant %d: the random texts have cuts", v);
    }
    CHECK(bad == 0, "threaded encoding = one mhe_bpe_encode on %d random texts of 5 tokenizers (%d differ)", trials, bad);
    /* the public call on a text past its least piece; a cap too small; one thread */
    len = 0;
    while (len + 40 < 70000) { memcpy(text + len, "some words\n\nand a line\r\n   indented\xe3\x80\x80 ", 40); len += 40; }
    OK(mhe_bpe_train(&b, text, 4000, 300, MHE_BPE_SPLIT_GPT2, NULL, 0));
    OK(mhe_bpe_encode(&b, text, len, want, len, &nw, NULL, err));
    OK(mhe_bpe_encode_threads(&b, text, len, got, len, &ng, 2, err));
    CHECK(nw == ng && memcmp(want, got, nw * sizeof(int)) == 0, "mhe_bpe_encode_threads, 2 threads: the same %zu ids", nw);
    OK(mhe_bpe_encode_threads(&b, text, len, got, len, &ng, 1, err));
    CHECK(nw == ng && memcmp(want, got, nw * sizeof(int)) == 0, "one thread: the same ids");
    CHECK(mhe__bpe_encode_par(&b, text, len, got, nw - 1, &ng, 2, 8, 256, err) == MHE_ERR_SHAPE && ng == 0, "a cap one short: %s", err);
    mhe_bpe_free(&b);
    free(text); free(want); free(got);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    unicode_classes();
    split_rule();
    train_known();
    roundtrip();
    text_form();
    hugging_face();
    checkpoints();
    mutations();
    wordpiece();
    wordpiece_mutations();
    threaded();
    return TEST_END();
}
