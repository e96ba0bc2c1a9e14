/* Words and hash embeddings inside models: the lexicon and word corpora
   (bad input included), word features, config validation, the built
   embedding's parameter count against mhe_hash_param_count, finite-difference
   gradient checks of whole models for every embedding x {md5, lsh} x
   {pre, post}-norm, unseen words, checkpoints with the n-gram table and the
   word vocabulary (and hostile ones), the Shuffle+Random corruption,
   fine-tuning with mhe_model_init_from, refusals (generation, LM training). */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

static const char *WORDS_TEXT =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "\n"
    "And God said, Let there be light: and there was light.   \r\n"
    "Walking walked walks WALKER played playing plays!\n";

static void lexicon_basics(void) {
    mhe_lexicon x;
    int a, b, c, i, t, ok = 1;
    size_t len;
    const char *w;
    char big[64];
    mhe_lexicon_init(&x, NULL);
    CHECK(mhe_lexicon_intern(&x, "Hello", 5, 1, &a) == MHE_OK && a == 0, "first type is 0");
    CHECK(mhe_lexicon_intern(&x, "hELLO", 5, 1, &b) == MHE_OK && b == 0 && x.count[0] == 2, "case folds to the same type, counted twice");
    CHECK(mhe_lexicon_intern(&x, "hello!", 6, 0, &c) == MHE_OK && c == 1 && x.count[1] == 0, "another type, not counted");
    w = mhe_lexicon_word(&x, 0, &len);
    CHECK(len == 5 && memcmp(w, "hello", 5) == 0, "types are stored lower-cased");
    CHECK(mhe_lexicon_find(&x, "HELLO", 5) == 0 && mhe_lexicon_find(&x, "hell", 4) == -1, "find");
    CHECK(mhe_lexicon_intern(&x, "", 0, 1, &a) == MHE_ERR_ARG, "an empty word is refused");
    CHECK(mhe_lexicon_intern(&x, NULL, 3, 1, &a) == MHE_ERR_ARG, "a NULL word is refused");
    /* many types: the slot table grows, every type is found again */
    for (i = 0; i < 20000; i++) {
        snprintf(big, sizeof big, "w%d", i);
        if (mhe_lexicon_intern(&x, big, strlen(big), 1, &t) != MHE_OK || t != i + 2) ok = 0;
    }
    for (i = 0; i < 20000; i += 7) { snprintf(big, sizeof big, "W%d", i); if (mhe_lexicon_find(&x, big, strlen(big)) != i + 2) ok = 0; }
    CHECK(ok && x.n == 20002, "20000 types interned and found (%d)", x.n);
    {   /* bytes >= 0x80 (invalid UTF-8 too) are word bytes, kept as they are; a 1 MB word is one type */
        const char inv[] = "caf\xc3\xa9\xff";
        size_t n1 = 1u << 20;
        char *huge = (char *)malloc(n1);
        memset(huge, 'q', n1);
        CHECK(mhe_lexicon_intern(&x, inv, 6, 1, &a) == MHE_OK && mhe_lexicon_find(&x, inv, 6) == a, "invalid UTF-8 word interned as bytes");
        CHECK(mhe_lexicon_intern(&x, huge, n1, 1, &b) == MHE_OK && mhe_lexicon_intern(&x, huge, n1, 1, &c) == MHE_OK && b == c &&
              x.count[b] == 2, "a 1 MB word is one type");
        free(huge);
    }
    mhe_lexicon_free(&x);
}

static void words_parse(void) {
    mhe_lexicon x;
    int *tok = NULL;
    size_t n = 0, i;
    char err[MHE_ERR_LEN];
    const char *want[] = { "in", "the", "beginning" };
    mhe_lexicon_init(&x, NULL);
    CHECK(mhe_words_parse(&x, WORDS_TEXT, strlen(WORDS_TEXT), &tok, &n, NULL, err) == MHE_OK, "parse: %s", err);
    {
        int eos = 0, ok = 1;
        for (i = 0; i < n; i++) eos += tok[i] == MHE_TOK_EOS;
        for (i = 0; i < 3; i++) {
            size_t len;
            const char *w = mhe_lexicon_word(&x, tok[i] - MHE_N_SPECIAL, &len);
            if (len != strlen(want[i]) || memcmp(w, want[i], len)) ok = 0;
        }
        CHECK(ok && eos == 4 && tok[n - 1] == MHE_TOK_EOS, "four non-blank lines end with </s>, the blank one gives nothing (%d)", eos);
        /* "earth." -> "earth", "." and "form," -> "form", ","; "plays!" -> "plays", "!" */
        CHECK(mhe_lexicon_find(&x, ".", 1) >= 0 && mhe_lexicon_find(&x, "walker", 6) >= 0 && mhe_lexicon_find(&x, "WALKER", 6) >= 0,
              "punctuation runs are words, capitals fold");
    }
    free(tok);
    CHECK(mhe_words_parse(&x, " \n\t\r\n ", 6, &tok, &n, NULL, err) == MHE_ERR_DATA && tok == NULL && n == 0, "only spaces: no word (%s)", err);
    CHECK(mhe_words_parse(&x, "", 0, &tok, &n, NULL, err) == MHE_ERR_DATA, "empty text: no word");
    {   /* NUL is punctuation in memory; a file with NUL is not text */
        const char t[] = "a\0b";
        FILE *f = fopen("build/test_words_nul.txt", "wb");
        CHECK(mhe_words_parse(&x, t, 3, &tok, &n, NULL, err) == MHE_OK && n == 4, "NUL is a punctuation word in memory");
        free(tok);
        if (f) { fwrite(t, 1, 3, f); fclose(f); }
        CHECK(mhe_read_words("build/test_words_nul.txt", &x, &tok, &n, NULL, err) == MHE_ERR_DATA && strstr(err, "NUL"), "file with NUL: %s", err);
        CHECK(mhe_read_words("build/no_such_file.txt", &x, &tok, &n, NULL, err) == MHE_ERR_IO, "missing file: %s", err);
        remove("build/test_words_nul.txt");
    }
    mhe_lexicon_free(&x);
}

static void text_sets(void) {
    mhe_lexicon x;
    mhe_text_set s;
    char err[MHE_ERR_LEN];
    const char *good = "1\tHello, World\n\n0\tworld\r\n2\thello hello\n";
    mhe_lexicon_init(&x, NULL);
    CHECK(mhe_text_set_parse_words(&s, &x, good, strlen(good), NULL, err) == MHE_OK, "word text set: %s", err);
    CHECK(s.n == 3 && s.n_classes == 3 && s.start[1] == 3 && s.start[3] == 6 && x.n == 3 && s.tokens[0] == MHE_N_SPECIAL &&
          s.tokens[3] == MHE_N_SPECIAL + 2, "3 examples of 3, 1 and 2 words over 3 types");
    {
        int tok[2 * 4], len[2], lab[2], idx[2] = { 0, 1 };
        mhe_text_set_batch(&s, idx, 2, 4, tok, len, lab);
        CHECK(len[0] == 3 && len[1] == 1 && tok[4 + 1] == MHE_TOK_PAD && lab[0] == 1, "batches pad with <pad>");
    }
    mhe_text_set_free(&s);
    CHECK(mhe_text_set_parse_words(&s, &x, "1\t  \t \n", 7, NULL, err) == MHE_ERR_DATA && strstr(err, "line 1"), "no word: %s", err);
    CHECK(mhe_text_set_parse_words(&s, &x, "x\thello\n", 8, NULL, err) == MHE_ERR_DATA, "bad label: %s", err);
    CHECK(mhe_text_set_parse_words(&s, NULL, good, strlen(good), NULL, err) == MHE_ERR_ARG, "NULL lexicon");
    mhe_lexicon_free(&x);
}

/* ---- configs -------------------------------------------------------------- */

static const char *BASE = "arch=encoder\ntoken_head=sr\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\ninit_std=0.3\n";

static mhe_status cfg_of(mhe_config *c, const char *extra, char *err) {
    mhe_status st;
    *c = mhe_config_default();
    if ((st = mhe_config_parse(c, BASE, strlen(BASE), err)) != MHE_OK) return st;
    if (extra && (st = mhe_config_parse(c, extra, strlen(extra), err)) != MHE_OK) return st;
    return mhe_config_validate(c, err);
}

static void config_errors(void) {
    static const struct { const char *text, *want; } bad[] = {
        { "embedding=hash-emb\nhash_buckets=0\n", "hash_buckets" },
        { "embedding=hash-pool\nhash_chunk=25\n", "hash_chunk" },
        { "embedding=hash-pool\nhash_chunk=12\nhash_bits=8\n", "larger than hash_bits" },
        { "embedding=hash-add\nhash_bits=200\n", "128" },
        { "embedding=hash-emb\nhash=lsh\nhash_buckets=7\n", "even" },
        { "embedding=hash-emb\nhash=lsh\nhash_buckets=200\nlsh_dim=64\n", "N/2" },
        { "embedding=hash-proj\nhash=lsh\nhash_bits=100\nlsh_dim=64\n", "P = 64" },
        { "embedding=hash-proj\nhash=lsh\nlsh_nmin=3\nlsh_nmax=2\n", "lsh_nmin" },
        { "embedding=hash-pooling\n", "hash-pooling" },
        { "embedding=hash-add\nhash=sha1\n", "sha1" },
        { "embedding=hash-proj\ntoken_head=lm\n", "no LM head or masked LM" },
        { "embedding=hash-add\nmask_token=3\n", "masked LM" },
        { "embedding=hash-emb\narch=encdec\nenc_layers=1\n", "encdec" },
        { "embedding=hash-add\nhash_bits=0\n", "hash_bits" },
        { "embedding=hash-pool\nhash_chunk=0\n", "hash_chunk" },
        { "token_head=softmax\n", "softmax" },
    };
    int i;
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        mhe_config c;
        char err[MHE_ERR_LEN] = "";
        mhe_status st = cfg_of(&c, bad[i].text, err);
        CHECK(st != MHE_OK && strstr(err, bad[i].want), "config '%s' rejected naming '%s': %s", bad[i].text, bad[i].want, err);
    }
    {   /* and the good ones, including T not a multiple of 8 or of k (the last chunk is shorter) */
        const char *good[] = { "embedding=hash-pool\nhash_bits=13\nhash_chunk=5\n", "embedding=hash-add\nhash=lsh\nhash_bits=37\nlsh_dim=64\n",
                               "embedding=hash-emb\nhash=lsh\nhash_buckets=128\nlsh_dim=64\n", "embedding=vocab\n" };
        for (i = 0; i < 4; i++) {
            mhe_config c;
            char err[MHE_ERR_LEN] = "";
            CHECK(cfg_of(&c, good[i], err) == MHE_OK, "config '%s' accepted: %s", good[i], err);
        }
    }
}

/* ---- word models ------------------------------------------------------------ */

typedef struct {
    mhe_lexicon x;
    mhe_word_feats f;
    int *tok;
    size_t n;
} corpus;

static void corpus_of(corpus *k, const char *text) {
    char err[MHE_ERR_LEN];
    memset(k, 0, sizeof *k);
    mhe_lexicon_init(&k->x, NULL);
    if (mhe_words_parse(&k->x, text, strlen(text), &k->tok, &k->n, NULL, err) != MHE_OK) printf("corpus: %s\n", err);
}

static void corpus_free(corpus *k) {
    mhe_lexicon_free(&k->x);
    mhe_word_feats_free(&k->f);
    free(k->tok);
}

/* a model of BASE + extra on the corpus: word vocabulary or n-gram table as needed, features */
static int word_model(mhe_model *m, const char *extra, corpus *k, uint64_t seed) {
    mhe_config c;
    char err[MHE_ERR_LEN] = "";
    if (cfg_of(&c, extra, err) != MHE_OK) { printf("bad test config '%s': %s\n", extra, err); return 0; }
    if (mhe_model_init(m, &c, seed, NULL) != MHE_OK) { printf("init: %s\n", m->err); return 0; }
    if (c.embedding == MHE_EMB_VOCAB && mhe_model_set_vocab(m, &k->x) != MHE_OK) { printf("vocab: %s\n", m->err); return 0; }
    if (c.embedding != MHE_EMB_VOCAB && c.hash == MHE_WORD_HASH_LSH && c.lsh_features &&
        mhe_model_set_ngrams(m, WORDS_TEXT, strlen(WORDS_TEXT)) != MHE_OK) { printf("ngrams: %s\n", m->err); return 0; }
    mhe_word_feats_free(&k->f);
    if (mhe_word_feats_update(m, &k->x, &k->f) != MHE_OK) { printf("feats: %s\n", m->err); return 0; }
    return 1;
}

/* a word batch of 2 x 7: corpus windows with a special token inside, row 1
   padded to 4; S+R labels (some ignored) */
typedef struct { mhe_batch b; int tok[14], tgt[14], len[2]; } word_batch;

static void make_word_batch(word_batch *w, const corpus *k, const mhe_word_feats *f, mhe_rng *r) {
    int i;
    memset(w, 0, sizeof *w);
    for (i = 0; i < 14; i++) { w->tok[i] = k->tok[3 + i]; w->tgt[i] = (int)mhe_rng_below(r, 3); }
    w->tok[2] = MHE_TOK_BOS; w->tok[9] = MHE_TOK_UNK; w->tgt[5] = -1;
    w->len[0] = 7; w->len[1] = 4;
    w->b.B = 2; w->b.T = 7; w->b.tokens = w->tok; w->b.targets = w->tgt; w->b.lengths = w->len; w->b.words = f;
}

static void word_gradcheck(const char *extra) {
    corpus k;
    mhe_model m;
    mhe_rng r;
    word_batch wb;
    int i, bad, nz_used = 0;
    float loss;
    double worst;
    corpus_of(&k, WORDS_TEXT);
    mhe_rng_seed(&r, 3);
    if (!word_model(&m, extra, &k, 5)) { CHECK(0, "model [%s]", extra); corpus_free(&k); return; }
    make_word_batch(&wb, &k, &k.f, &r);
    mhe_model_zero_grad(&m);
    CHECK(mhe_model_forward_batch(&m, &wb.b, &loss) == MHE_OK, "forward [%s]: %s", extra, m.err);
    CHECK(mhe_model_backward(&m) == MHE_OK, "backward: %s", m.err);
    /* 6 entries per tensor, the last 3 among the entries the batch uses */
    bad = test_model_gradcheck(&m, test_loss_batch, &wb.b, &r, 6, 3, extra, &worst, NULL);
    for (i = 0; i < m.n_tensors; i++) {   /* the gradient check moved no gradient */
        mhe_tensor *t = &m.params[i];
        int64_t e;
        if (t != m.special_emb && t != m.regular_emb && t != m.pool_w && t != m.add_books && t != m.proj_w && t != m.sr_w) continue;
        for (e = 0; e < t->size && t->grad[e] == 0; e++) {}
        if (e < t->size) nz_used++;
    }
    CHECK(bad == 0, "word model gradient check [%s]: %d tensors off, worst %.3g", extra, bad, worst);
    CHECK(m.cfg.embedding == MHE_EMB_VOCAB || m.cfg.embedding == MHE_EMB_HASH_EMB || nz_used >= 4,
          "special, regular, hash and S+R tensors all get gradient [%s] (%d)", extra, nz_used);
    mhe_model_free(&m);
    corpus_free(&k);
}

/* built embedding tensors == the thesis's count (+ regular row, + Pool's reserved row) */
static void param_counts(void) {
    static const char *kinds[] = { "hash-emb", "hash-pool", "hash-add", "hash-proj" };
    int kind, h;
    for (kind = 0; kind < 4; kind++)
        for (h = 0; h < 2; h++) {
            char extra[256];
            mhe_config c;
            mhe_model m;
            char err[MHE_ERR_LEN];
            int64_t sum = 0, want;
            int i;
            snprintf(extra, sizeof extra, "embedding=%s\nhash=%s\nhash_bits=24\nhash_chunk=5\nhash_buckets=64\nlsh_dim=96\nd_model=12\n",
                     kinds[kind], h ? "lsh" : "md5");
            cfg_of(&c, extra, err);
            CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "init %s: %s", kinds[kind], m.err);
            want = mhe_hash_param_count(kind, 12, 24, 5, 64, MHE_HASH_COUNT_TOKEN_ROW | MHE_HASH_COUNT_PAD_ROW);
            for (i = 0; i < m.n_tensors; i++) sum += m.params[i].size;
            CHECK(mhe_model_emb_params(&m) == want, "%s/%s: built embedding %lld vs mhe_hash_param_count %lld", kinds[kind], h ? "lsh" : "md5",
                  (long long)mhe_model_emb_params(&m), (long long)want);
            CHECK(sum == m.n_params && m.special_emb && m.special_emb->size == MHE_N_SPECIAL * 12 && !m.lm_head && m.sr_w,
                  "%s: special rows, S+R head, no LM head", kinds[kind]);
            if (kind == MHE_HASH_POOL) {
                int64_t z = 0;
                for (i = 0; i < 12; i++) z += m.pool_codebook->data[i] != 0;
                CHECK(z == 0 && m.pool_codebook->shape[0] == 33 && m.pool_w->shape[0] == 5, "pool: codebook 2^5+1 rows, row 0 zero, 5 chunks");
            }
            if (kind == MHE_HASH_ADD) CHECK(m.add_books->ndim == 3 && m.add_books->shape[1] == 2, "add: books [T, 2, C]");
            mhe_model_free(&m);
        }
    {   /* the vocab baseline: V x C */
        mhe_config c;
        mhe_model m;
        char err[MHE_ERR_LEN];
        cfg_of(&c, "vocab_size=40\n", err);
        OK(mhe_model_init(&m, &c, 1, NULL));
        CHECK(mhe_model_emb_params(&m) == 40 * 12 && !m.special_emb && !m.regular_emb, "vocab: V x C, no special table");
        mhe_model_free(&m);
    }
}

/* what a word hashes to, with the library's own hash functions */
static void hashing_in_models(void) {
    corpus k;
    mhe_model m;
    int32_t id = -1, id2 = -1;
    unsigned char bits[16], bits2[16], d[16];
    corpus_of(&k, WORDS_TEXT);
    word_model(&m, "embedding=hash-emb\nhash_buckets=1000\n", &k, 1);
    {
        uint64_t v;
        OK(mhe_word_id_md5("light", 5, MHE_HASH_KEY, MHE_HASH_KEY_LEN, 1000, &v));
        CHECK(mhe_model_hash_word(&m, "LIGHT", 5, &id, NULL) == MHE_OK && id == (int32_t)v, "hash-emb md5: HMAC-MD5 mod N, case-folded (%d vs %d)", id, (int)v);
        CHECK(k.f.id[mhe_lexicon_find(&k.x, "light", 5)] == id, "features hold the same bucket");
        CHECK(mhe_model_hash_word(&m, "", 0, &id, NULL) == MHE_ERR_ARG, "an empty word is refused: %s", m.err);
        CHECK(mhe_model_hash_word(&m, "light", 5, NULL, NULL) == MHE_ERR_ARG, "no id buffer is refused");
    }
    mhe_model_free(&m);
    word_model(&m, "embedding=hash-add\nhash_bits=20\nhash_key=0\n", &k, 1);
    OK(mhe_word_hash_md5("earth", 5, NULL, 0, d));
    CHECK(mhe_model_hash_word(&m, "Earth", 5, NULL, bits) == MHE_OK && bits[0] == d[0] && bits[1] == d[1] && bits[2] == (d[2] & 0xF0),
          "hash_key=0: plain MD5's first 20 bits, the rest of the byte zero");
    mhe_model_free(&m);
    word_model(&m, "embedding=hash-proj\nhash=lsh\nhash_bits=32\nlsh_dim=64\n", &k, 1);
    {
        mhe_lsh l;
        mhe_lsh_config lc = mhe_lsh_config_default();
        lc.n_features = 64; lc.n_bits = 32; lc.n_buckets = 2;
        OK(mhe_lsh_init(&l, &lc, NULL, 0, NULL));
        OK(mhe_lsh_bits(&l, "walking", 7, NULL, bits2));
        CHECK(mhe_model_hash_word(&m, "walking", 7, NULL, bits) == MHE_OK && memcmp(bits, bits2, 4) == 0, "lsh bits: mhe_lsh_bits with the model's settings");
        mhe_lsh_free(&l);
    }
    {   /* a word never seen embeds, and equals its embedding inside a forward pass */
        float e1[12], e2[12];
        mhe_lexicon x2;
        mhe_word_feats f2;
        int ty, tok[1];
        mhe_batch b;
        double err = 0;
        int j;
        CHECK(mhe_lexicon_find(&k.x, "zebra", 5) < 0, "zebra is not in the corpus");
        CHECK(mhe_model_embed_word(&m, "zebra", 5, e1) == MHE_OK, "an unseen word embeds: %s", m.err);
        mhe_lexicon_init(&x2, NULL);
        memset(&f2, 0, sizeof f2);
        OK(mhe_lexicon_intern(&x2, "zebra", 5, 1, &ty));
        OK(mhe_word_feats_update(&m, &x2, &f2));
        tok[0] = MHE_N_SPECIAL + ty;
        memset(&b, 0, sizeof b);
        b.B = 1; b.T = 1; b.tokens = tok; b.words = &f2;
        CHECK(mhe_model_forward_batch(&m, &b, NULL) == MHE_OK, "forward of zebra: %s", m.err);
        for (j = 0; j < 12; j++) { e2[j] = m.acts.emb[j] - m.pos_emb->data[j]; if (fabs(e1[j] - e2[j]) > err) err = fabs(e1[j] - e2[j]); }
        CHECK(err < 1e-6, "embed_word equals the forward pass's embedding (%.3g)", err);
        mhe_word_feats_free(&f2);
        mhe_lexicon_free(&x2);
    }
    mhe_model_free(&m);
    /* the vocab baseline: an unseen word is <unk> */
    word_model(&m, "vocab_size=20\n", &k, 1);
    CHECK(mhe_model_hash_word(&m, "zebra", 5, &id, NULL) == MHE_OK && id == MHE_TOK_UNK, "vocab: unseen word is <unk>");
    CHECK(mhe_model_hash_word(&m, "the", 3, &id2, NULL) == MHE_OK && id2 == MHE_N_SPECIAL, "vocab: the most frequent word is row 4 (%d)", id2);
    CHECK(m.vocab.n == 16, "vocab_size 20 keeps 16 words");
    mhe_model_free(&m);
    {   /* a byte-level vocab model has no word vocabulary */
        mhe_config c = mhe_config_default();
        OK(mhe_model_init(&m, &c, 1, NULL));
        CHECK(mhe_model_hash_word(&m, "the", 3, &id, NULL) == MHE_ERR_CONFIG, "byte model: %s", m.err);
        CHECK(mhe_model_set_ngrams(&m, "abc", 3) == MHE_ERR_CONFIG, "byte model has no n-gram table");
        mhe_model_free(&m);
    }
    corpus_free(&k);
}

static void forward_errors(void) {
    corpus k, k2;
    mhe_model m, m2;
    mhe_rng r;
    word_batch wb;
    corpus_of(&k, WORDS_TEXT);
    corpus_of(&k2, WORDS_TEXT);
    mhe_rng_seed(&r, 1);
    word_model(&m, "embedding=hash-pool\nhash=lsh\nhash_bits=20\nhash_chunk=6\nlsh_dim=64\n", &k, 1);
    word_model(&m2, "embedding=hash-pool\nhash=lsh\nhash_bits=20\nhash_chunk=6\nlsh_dim=64\nlsh_seed=7\n", &k2, 1);
    make_word_batch(&wb, &k, &k2.f, &r);
    CHECK(mhe_model_forward_batch(&m, &wb.b, NULL) == MHE_ERR_ARG && strstr(m.err, "other hashing"), "features of another eta refused: %s", m.err);
    CHECK(mhe_word_feats_update(&m, &k2.x, &k2.f) == MHE_ERR_ARG, "updating another model's features refused");
    wb.b.words = NULL;
    CHECK(mhe_model_forward_batch(&m, &wb.b, NULL) == MHE_ERR_ARG && strstr(m.err, "word features"), "no features: %s", m.err);
    wb.b.words = &k.f;
    wb.tok[4] = MHE_N_SPECIAL + k.x.n;
    CHECK(mhe_model_forward_batch(&m, &wb.b, NULL) == MHE_ERR_DATA, "type beyond the features: %s", m.err);
    wb.tok[4] = -1;
    CHECK(mhe_model_forward_batch(&m, &wb.b, NULL) == MHE_ERR_DATA, "negative token: %s", m.err);
    wb.tok[4] = MHE_N_SPECIAL;
    wb.tgt[0] = 3;
    CHECK(mhe_model_forward_batch(&m, &wb.b, NULL) == MHE_ERR_DATA && strstr(m.err, "S+R"), "S+R target 3: %s", m.err);
    {   /* generation and LM training are refused */
        mhe_kv_cache kv;
        mhe_config c;
        mhe_model d;
        char err[MHE_ERR_LEN];
        mhe_trainer t;
        mhe_train_config tc = mhe_train_config_default();
        cfg_of(&c, "arch=decoder\nembedding=hash-add\nhash_bits=16\n", err);
        CHECK(mhe_model_init(&d, &c, 1, NULL) == MHE_OK, "a hash-embedding decoder with an S+R head: %s", d.err);
        OK(mhe_kv_cache_init(&kv, &d, 4, NULL));
        CHECK(mhe_decode_step(&d, &kv, 5) == MHE_ERR_CONFIG && strstr(d.err, "nothing to generate"), "no generation: %s", d.err);
        mhe_kv_cache_free(&kv);
        tc.batch = 2; tc.seq_len = 4;
        OK(mhe_trainer_init(&t, &d, &tc));
        CHECK(mhe_trainer_step(&t, k.tok, k.n) == MHE_ERR_CONFIG && strstr(t.err, "mhe_trainer_step_sr"), "no LM training: %s", t.err);
        {
            float l;
            CHECK(mhe_evaluate(&d, k.tok, k.n, 2, 4, 1, &l) == MHE_ERR_CONFIG, "no LM evaluation: %s", d.err);
        }
        mhe_trainer_free(&t);
        mhe_model_free(&d);
        cfg_of(&c, "arch=decoder\ntoken_head=lm\n", err);
        OK(mhe_model_init(&d, &c, 1, NULL));
        OK(mhe_trainer_init(&t, &d, &tc));
        CHECK(mhe_trainer_step_sr(&t, k.tok, k.n, NULL) == MHE_ERR_CONFIG, "S+R needs the S+R head: %s", t.err);
        mhe_trainer_free(&t);
        mhe_model_free(&d);
    }
    mhe_model_free(&m);
    mhe_model_free(&m2);
    corpus_free(&k);
    corpus_free(&k2);
}

/* checkpoints carry the n-gram table and the word vocabulary */
static void checkpoints(void) {
    static const char *extras[] = { "embedding=hash-pool\nhash=lsh\nlsh_features=table\nlsh_dim=40\nhash_bits=24\nhash_chunk=7\n",
                                    "vocab_size=30\n", "embedding=hash-proj\nhash_bits=16\nnorm_position=post\n",
                                    "embedding=hash-emb\nhash=lsh\nhash_buckets=16\nlsh_dim=64\nn_classes=2\n" };
    int v;
    for (v = 0; v < 4; v++) {
        corpus k;
        mhe_model a, b;
        mhe_rng r;
        word_batch wb;
        mhe_word_feats fb;
        size_t size = 0, w = 0;
        void *buf;
        float la, lb;
        corpus_of(&k, WORDS_TEXT);
        mhe_rng_seed(&r, 2);
        word_model(&a, extras[v], &k, 9);
        OK(mhe_checkpoint_size(&a, NULL, &size));
        buf = malloc(size);
        CHECK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &w) == MHE_OK && w == size, "write [%s]", extras[v]);
        CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK, "load [%s]: %s", extras[v], b.err);
        CHECK(a.hash_sig == b.hash_sig && memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0 && b.vocab.n == a.vocab.n &&
              b.lsh_ready == a.lsh_ready, "word state restored [%s]", extras[v]);
        memset(&fb, 0, sizeof fb);
        CHECK(mhe_word_feats_update(&b, &k.x, &fb) == MHE_OK &&
              (fb.id ? memcmp(fb.id, k.f.id, (size_t)k.x.n * 4) == 0 : memcmp(fb.bits, k.f.bits, (size_t)k.x.n * MHE_BITS_BYTES(fb.n_bits)) == 0),
              "the reloaded model hashes every word the same [%s]", extras[v]);
        make_word_batch(&wb, &k, &k.f, &r);
        OK(mhe_model_forward_batch(&a, &wb.b, &la));
        wb.b.words = &fb;
        OK(mhe_model_forward_batch(&b, &wb.b, &lb));
        CHECK(la == lb, "same loss after reload [%s]: %g vs %g", extras[v], la, lb);
        if (v < 2) {   /* hostile word state: an out-of-range vocabulary byte, a bad n-gram table */
            mhe_safetensors st;
            const mhe_st_tensor *t;
            unsigned char *c = (unsigned char *)malloc(size);
            mhe_model bad;
            memcpy(c, buf, size);
            OK(mhe_st_parse(&st, c, size, NULL));
            t = mhe_st_find(&st, v ? "vocab.words" : "lsh.ngrams");
            CHECK(t != NULL && t->dtype == MHE_DTYPE_I32, "the checkpoint holds %s as I32", v ? "vocab.words" : "lsh.ngrams");
            if (t) {
                unsigned char *p = (unsigned char *)t->data;
                if (v) { p[0] = 0x2c; p[1] = 0x01; }                       /* byte 300 */
                else { p[0] = 0xff; p[1] = 0xff; p[2] = 0xff; p[3] = 0x7f; }  /* count of order 1 far too large */
                CHECK(mhe_model_load_mem(&bad, c, size, NULL) != MHE_OK, "hostile %s rejected: %s", t->name, bad.err);
                if (v) {   /* the last word not ended by a newline */
                    p[0] = 'a'; p[1] = 0;
                    p = (unsigned char *)t->data + t->nbytes - 4;
                    p[0] = 'x';
                    CHECK(mhe_model_load_mem(&bad, c, size, NULL) == MHE_ERR_FORMAT, "unterminated vocabulary: %s", bad.err);
                }
            }
            mhe_st_free(&st);
            free(c);
        }
        mhe_word_feats_free(&fb);
        mhe_model_free(&b);
        mhe_model_free(&a);
        free(buf);
        corpus_free(&k);
    }
    {   /* a checkpoint written before the word fields existed loads with their defaults */
        mhe_config c = mhe_config_default();
        mhe_model a, b;
        mhe__ckpt k;
        char err[MHE_ERR_LEN];
        size_t size, w;
        void *buf;
        int i, j;
        c.d_model = 8; c.n_heads = 2; c.n_layers = 1; c.max_seq_len = 4; c.vocab_size = 10;
        OK(mhe_model_init(&a, &c, 1, NULL));
        mhe__ckpt_build(&a, NULL, &k, 0, err);
        for (i = j = 0; i < k.n_meta; i++) {
            const char *key = k.keys[i];
            if (strstr(key, "hash") || strstr(key, "lsh_") || !strcmp(key, "embedding") || !strcmp(key, "token_head")) continue;
            k.keys[j] = key; k.values[j++] = k.values[i];
        }
        CHECK(j == k.n_meta - 14, "14 word fields left out (%d)", k.n_meta - j);
        OK(mhe_st_write_size(k.items, k.n_items, k.keys, k.values, j, &size, err));
        buf = malloc(size);
        OK(mhe_st_write_mem(buf, size, &w, k.items, k.n_items, k.keys, k.values, j, err));
        CHECK(mhe_model_load_mem(&b, buf, w, NULL) == MHE_OK && b.cfg.embedding == MHE_EMB_VOCAB && b.cfg.hash_bits == 128 &&
              b.cfg.token_head == MHE_HEAD_LM, "an older checkpoint loads with the defaults: %s", b.err);
        mhe_model_free(&b);
        MHE_FREE(NULL, k.block);
        mhe_model_free(&a);
        free(buf);
    }
}

/* the S+R corruption: rates, one permutation per batch, specials and padding untouched */
static void sr_corruption(void) {
    enum { B = 64, T = 50 };
    static int tok[B * T], in[B * T], lab[B * T], len[B];
    int pi[T], b, t, counts[3] = { 0, 0, 0 }, ign = 0, ok_orig = 1, ok_shuf = 1, ok_rand = 1, ok_pad = 1, real = 0;
    mhe_rng r;
    for (t = 0; t < T; t++) pi[t] = -1;
    for (b = 0; b < B; b++) {
        len[b] = b == 3 ? 20 : T;
        for (t = 0; t < T; t++) tok[b * T + t] = 1000 * (b + 1) + t;   /* position t is readable from the token */
        tok[b * T + 7] = MHE_TOK_EOS;                                  /* a special token */
    }
    mhe_rng_seed(&r, 11);
    mhe_sr_corrupt(in, lab, tok, len, B, T, 0.10f, MHE_N_SPECIAL, NULL, 500, &r);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) {
            int i = b * T + t, l = lab[i];
            if (t >= len[b] || t == 7) { if (l != -1 || in[i] != tok[i]) ok_pad = 0; ign++; continue; }
            real++;
            if (l < 0 || l > 2) { ok_orig = 0; continue; }
            counts[l]++;
            if (l == 0 && in[i] != tok[i]) ok_orig = 0;
            if (l == 1) {   /* the token of position pi(t) of the same row, pi the same for every row */
                int src = in[i] - 1000 * (b + 1);
                if (src < 0 || src >= len[b] || src == t || src == 7 || (pi[t] >= 0 && pi[t] != src)) ok_shuf = 0;
                pi[t] = src;
            }
            if (l == 2 && (in[i] < MHE_N_SPECIAL || in[i] >= MHE_N_SPECIAL + 500 || in[i] == tok[i])) ok_rand = 0;
        }
    CHECK(ok_pad && ign == B + (T - 20), "specials and padding: label -1, input unchanged (%d ignored)", ign);
    CHECK(ok_orig && ok_shuf && ok_rand, "original keeps the token; shuffled reads pi(t) of its row (one pi per batch); random is another word");
    CHECK(fabs(counts[1] / (double)real - 0.10 * (1 - 2.0 / T)) < 0.015, "~10%% shuffled: %.3f", counts[1] / (double)real);
    CHECK(fabs(counts[2] / (double)real - 0.09) < 0.015, "~9%% random: %.3f", counts[2] / (double)real);
    mhe_rng_seed(&r, 11);
    mhe_sr_corrupt(in, lab, tok, NULL, B, T, 0.0f, MHE_N_SPECIAL, NULL, 500, &r);
    for (b = 0, ok_orig = 1; b < B * T; b++) if ((tok[b] >= MHE_N_SPECIAL && lab[b] != 0) || in[b] != tok[b]) ok_orig = 0;
    CHECK(ok_orig, "prob 0: every real token original");
    {   /* random words from a pool of the corpus: never special, never the same word */
        int pool[6] = { MHE_TOK_EOS, 1005, 1005, MHE_TOK_EOS, 77, 1005 }, ok = 1, seen77 = 0;
        mhe_rng_seed(&r, 12);
        mhe_sr_corrupt(in, lab, tok, NULL, B, T, 0.5f, MHE_N_SPECIAL, pool, 6, &r);
        for (b = 0; b < B * T; b++) if (lab[b] == 2) { if (in[b] != 77 && in[b] != 1005) ok = 0; if (in[b] == tok[b]) ok = 0; seen77 += in[b] == 77; }
        CHECK(ok && seen77 > 0, "pool draws skip specials and the original");
    }
}

/* fine-tuning: a pretrained word model with a new classification head */
static void init_from(void) {
    corpus k;
    mhe_model a, b;
    mhe_config c;
    int copied = 0, i;
    corpus_of(&k, WORDS_TEXT);
    word_model(&a, "embedding=hash-add\nhash=lsh\nhash_bits=16\nlsh_dim=64\n", &k, 4);
    c = a.cfg;
    c.n_classes = 3;
    CHECK(mhe_model_init_from(&b, &c, &a, 8, NULL, &copied) == MHE_OK, "init_from: %s", b.err);
    CHECK(copied == a.n_tensors && b.n_tensors == a.n_tensors + 2 && b.hash_sig == a.hash_sig, "every pretrained tensor copied (%d of %d)", copied, a.n_tensors);
    for (i = 0; i < a.n_tensors; i++)
        if (memcmp(a.params[i].data, mhe_model_find(&b, a.params[i].name)->data, (size_t)a.params[i].size * 4)) break;
    CHECK(i == a.n_tensors && b.cls_w != NULL, "weights equal, the head is new");
    {   /* the old features still fit the new model */
        word_batch wb;
        mhe_rng r;
        int labels[2] = { 2, 0 };
        float loss;
        mhe_rng_seed(&r, 1);
        make_word_batch(&wb, &k, &k.f, &r);
        wb.b.targets = NULL; wb.b.labels = labels;
        CHECK(mhe_model_forward_batch(&b, &wb.b, &loss) == MHE_OK && loss > 0, "classification forward on the pretrained features: %s", b.err);
    }
    mhe_model_free(&b);
    c.lsh_seed = 5;
    CHECK(mhe_model_init_from(&b, &c, &a, 8, NULL, &copied) == MHE_ERR_CONFIG && strstr(b.err, "hashing"), "other hashing refused: %s", b.err);
    mhe_model_free(&a);
    corpus_free(&k);
}

/* random bytes through the word parsers, random mutations of word-model
   checkpoints: an error or a result, never a crash (run under ASan too) */
static void fuzz(void) {
    mhe_rng r;
    int i, crashes_would_show = 1, parsed = 0, loaded = 0, rejected = 0;
    unsigned char buf[300];
    mhe_rng_seed(&r, 99);
    for (i = 0; i < 400; i++) {
        mhe_lexicon x;
        mhe_text_set set;
        int *tok = NULL, n = 1 + (int)mhe_rng_below(&r, sizeof buf), j;
        size_t nt;
        char err[MHE_ERR_LEN];
        for (j = 0; j < n; j++) {   /* bytes biased towards the structure: digits, tabs, newlines, spaces */
            uint32_t c = mhe_rng_below(&r, 8);
            buf[j] = (unsigned char)(c == 0 ? '\t' : c == 1 ? '\n' : c == 2 ? ' ' : c == 3 ? '0' + mhe_rng_below(&r, 10) : mhe_rng_below(&r, 256));
        }
        mhe_lexicon_init(&x, NULL);
        if (mhe_words_parse(&x, (const char *)buf, (size_t)n, &tok, &nt, NULL, err) == MHE_OK) {
            for (j = 0; j < (int)nt; j++) if (tok[j] < MHE_TOK_EOS || tok[j] >= MHE_N_SPECIAL + x.n) crashes_would_show = 0;
            parsed++;
        }
        free(tok);
        if (mhe_text_set_parse_words(&set, &x, (const char *)buf, (size_t)n, NULL, err) == MHE_OK) {
            if (set.start[set.n] == 0) crashes_would_show = 0;
            mhe_text_set_free(&set);
        }
        mhe_lexicon_free(&x);
    }
    CHECK(crashes_would_show && parsed > 0, "random text through the word parsers (%d parsed)", parsed);
    {
        corpus k;
        mhe_model a, b;
        size_t size = 0, w;
        unsigned char *good, *bad;
        corpus_of(&k, WORDS_TEXT);
        word_model(&a, "embedding=hash-pool\nhash=lsh\nlsh_features=table\nlsh_dim=40\nhash_bits=24\nhash_chunk=7\n", &k, 9);
        OK(mhe_checkpoint_size(&a, NULL, &size));
        good = (unsigned char *)malloc(size);
        bad = (unsigned char *)malloc(size);
        OK(mhe_checkpoint_write_mem(&a, NULL, good, size, &w));
        for (i = 0; i < 300; i++) {
            int j, flips = 1 + (int)mhe_rng_below(&r, 4);
            memcpy(bad, good, size);
            /* mostly the data section's tail, where lsh.ngrams lives, sometimes anywhere */
            for (j = 0; j < flips; j++) {
                size_t at = mhe_rng_below(&r, 2) ? size - 1 - mhe_rng_below(&r, 2100) : mhe_rng_below(&r, (uint32_t)size);
                bad[at] = (unsigned char)mhe_rng_below(&r, 256);
            }
            if (mhe_model_load_mem(&b, bad, size, NULL) == MHE_OK) { loaded++; mhe_model_free(&b); }
            else rejected++;
        }
        CHECK(loaded + rejected == 300 && rejected > 0, "mutated word checkpoints: %d loaded, %d rejected", loaded, rejected);
        free(good); free(bad);
        mhe_model_free(&a);
        corpus_free(&k);
    }
}

int main(void) {
    static const char *variants[] = {
        "vocab_size=24\n",
        "vocab_size=24\nn_classes=2\nnorm_position=post\nbias=0\n",
        "embedding=hash-emb\nhash_buckets=16\n",
        "embedding=hash-emb\nhash_buckets=16\nnorm_position=post\n",
        "embedding=hash-emb\nhash=lsh\nhash_buckets=16\nlsh_dim=64\n",
        "embedding=hash-emb\nhash=lsh\nhash_buckets=16\nlsh_dim=64\nnorm_position=post\nnorm=rmsnorm\n",
        "embedding=hash-pool\nhash_bits=21\nhash_chunk=5\n",
        "embedding=hash-pool\nhash_bits=21\nhash_chunk=5\nnorm_position=post\n",
        "embedding=hash-pool\nhash=lsh\nhash_bits=24\nhash_chunk=4\nlsh_dim=64\n",
        "embedding=hash-pool\nhash=lsh\nhash_bits=24\nhash_chunk=4\nlsh_features=table\nlsh_dim=30\nnorm_position=post\n",
        "embedding=hash-add\nhash_bits=20\n",
        "embedding=hash-add\nhash_bits=20\nnorm_position=post\nhash_key=0\nbias=0\n",
        "embedding=hash-add\nhash=lsh\nhash_bits=20\nlsh_dim=64\nlsh_pad=1\n",
        "embedding=hash-add\nhash=lsh\nhash_bits=20\nlsh_dim=64\nnorm_position=post\nattn=mhe-mul\n",
        "embedding=hash-proj\nhash_bits=16\n",
        "embedding=hash-proj\nhash_bits=16\nnorm_position=post\nattn=mhe-add\n",
        "embedding=hash-proj\nhash=lsh\nhash_bits=16\nlsh_dim=64\n",
        "embedding=hash-proj\nhash=lsh\nhash_bits=16\nlsh_dim=64\nnorm_position=post\narch=decoder\n",
    };
    int i;
    setvbuf(stdout, NULL, _IONBF, 0);
    lexicon_basics();
    words_parse();
    text_sets();
    config_errors();
    param_counts();
    hashing_in_models();
    for (i = 0; i < (int)(sizeof variants / sizeof variants[0]); i++) word_gradcheck(variants[i]);
    forward_errors();
    checkpoints();
    sr_corruption();
    init_from();
    fuzz();
    return TEST_END();
}
