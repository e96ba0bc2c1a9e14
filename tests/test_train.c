/* Training: the loss falls below the unigram baseline on the bundled corpus
   within a short budget; the same seed gives the same run bit for bit; a run
   resumed from a checkpoint equals the uninterrupted one; bad data and
   non-finite losses give errors; a failed save leaves the old file intact. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _WIN32
#include <direct.h>
#define mkdir(path, mode) _mkdir(path)   /* no mode argument there */
#endif

static int *load(const char *path, size_t *n) {
    int *tok;
    char err[MHE_ERR_LEN];
    if (mhe_read_text_tokens(path, &tok, n, NULL, err) != MHE_OK) { printf("%s\n", err); return NULL; }
    return tok;
}

static mhe_config small_cfg(void) {
    mhe_config c = mhe_config_default();
    c.d_model = 64; c.n_heads = 4; c.n_layers = 2; c.max_seq_len = 64;
    return c;
}

static mhe_train_config small_tc(int steps) {
    mhe_train_config t = mhe_train_config_default();
    t.steps = steps; t.batch = 16; t.seq_len = 64; t.lr = 3e-3f; t.min_lr = 3e-4f; t.warmup = 10; t.seed = 7;
    return t;
}


/* the long training runs: the main suite and -ffast-math; the sanitizer, 32-bit
   and cross builds run the rest (MHE_TEST_QUICK, MHE_TEST_SHORT_TRAIN) */
#if !defined(MHE_TEST_QUICK) && !defined(MHE_TEST_SHORT_TRAIN)
#define TT_LONG 1
#else
#define TT_LONG 0
#endif

#if TT_LONG
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void loss_falls(const int *train, size_t nt, const int *valid, size_t nv) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(300);
    mhe_model m;
    mhe_trainer t;
    float before, after;
    double unigram = mhe_unigram_entropy(train, nt, 256), t0 = now_s(), el;
    int s;
    OK(mhe_model_init(&m, &c, 1, NULL));
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "trainer init: %s", t.err);
    OK(mhe_evaluate(&m, valid, nv, 16, 64, 8, &before));
    for (s = 0; s < tc.steps; s++) if (mhe_trainer_step(&t, train, nt) != MHE_OK) { printf("step: %s\n", t.err); break; }
    CHECK(mhe_evaluate(&m, valid, nv, 16, 64, 8, &after) == MHE_OK, "evaluate: %s", m.err);
    el = now_s() - t0;
    printf("  validation loss %.3f -> %.3f nats/byte in %d steps (%.1f s); unigram baseline %.3f\n", before, after, tc.steps, el, unigram);
    CHECK(after < unigram - 0.4, "validation loss %.3f is not clearly below the unigram entropy %.3f", after, unigram);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

#endif

/* runs `steps` steps; with save_at > 0 it checkpoints there to memory,
   throws everything away, reloads and goes on */
static void run(const int *train, size_t nt, int steps, int save_at, float *losses, float **params, int64_t *np) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(steps);
    mhe_model m;
    mhe_trainer t;
    int s;
    c.dropout = 0.1f; c.attn_dropout = 0.1f;   /* resume must replay dropout too */
    OK(mhe_model_init(&m, &c, 3, NULL));
    OK(mhe_trainer_init(&t, &m, &tc));
    for (s = 0; s < steps; s++) {
        if (s == save_at) {
            size_t size, w;
            void *buf;
            OK(mhe_checkpoint_size(&m, &t, &size));
            buf = malloc(size);
            CHECK(mhe_checkpoint_write_mem(&m, &t, buf, size, &w) == MHE_OK, "trainer checkpoint");
            mhe_trainer_free(&t);
            mhe_model_free(&m);
            CHECK(mhe_model_load_mem(&m, buf, size, NULL) == MHE_OK, "reload model: %s", m.err);
            CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "new trainer");
            CHECK(mhe_trainer_load_mem(&t, buf, size) == MHE_OK, "reload trainer: %s", t.err);
            CHECK(t.step == save_at, "step restored");
            free(buf);
        }
        OK(mhe_trainer_step(&t, train, nt));
        losses[s] = t.last_loss;
    }
    *np = m.n_params;
    *params = malloc((size_t)m.n_params * sizeof(float));
    memcpy(*params, m.param_data, (size_t)m.n_params * sizeof(float));
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

static void determinism_and_resume(const int *train, size_t nt) {
    enum { S = TT_LONG ? 12 : 6 };   /* the quick builds (qemu, sanitizers) resume half-way through 6 steps */
    float la[S], lb[S], lc[S], *pa, *pb, *pc;
    int64_t na, nb, nc;
    run(train, nt, S, -1, la, &pa, &na);
    run(train, nt, S, -1, lb, &pb, &nb);
    run(train, nt, S, S / 2 - 1, lc, &pc, &nc);
    CHECK(memcmp(la, lb, sizeof la) == 0 && memcmp(pa, pb, (size_t)na * 4) == 0, "same seed: identical losses and weights");
    CHECK(memcmp(la, lc, sizeof la) == 0, "resumed run has the same loss sequence");
    CHECK(na == nc && memcmp(pa, pc, (size_t)na * 4) == 0, "resumed run ends with the same weights bit for bit");
    free(pa); free(pb); free(pc);
}

static void bad_inputs(const int *train, size_t nt) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(5);
    mhe_model m;
    mhe_trainer t;
    int bad[3] = { 1, 300, 2 };
    float loss;
    OK(mhe_model_init(&m, &c, 1, NULL));
    OK(mhe_trainer_init(&t, &m, &tc));
    CHECK(mhe_trainer_step(&t, train, 10) == MHE_ERR_DATA, "too little data: %s", t.err);
    CHECK(mhe_model_forward(&m, bad, bad, 1, 3, &loss) == MHE_ERR_DATA && strstr(m.err, "300"), "token outside vocabulary: %s", m.err);
    CHECK(mhe_model_forward(&m, bad, NULL, 1, 65, &loss) == MHE_ERR_ARG, "sequence longer than max_seq_len: %s", m.err);
    m.layers[0].fc1_w->data[3] = NAN;
    CHECK(mhe_trainer_step(&t, train, nt) == MHE_ERR_NONFINITE, "NaN loss detected: %s", t.err);
    CHECK(t.step == 0, "no update after a non-finite loss");
    tc.seq_len = 100;
    mhe_trainer_free(&t);
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_ERR_CONFIG, "seq_len > max_seq_len rejected: %s", t.err);
    mhe_model_free(&m);
}

static void atomic_save(void) {
    mhe_config c = small_cfg();
    mhe_model m, r;
    char path[256], tmp[300];
    float first;
    snprintf(path, sizeof path, "/tmp/mhe_test_train_%d.safetensors", (int)getpid());
    OK(mhe_model_init(&m, &c, 1, NULL));
    CHECK(mhe_checkpoint_save(&m, NULL, path) == MHE_OK, "save: %s", m.err);
    first = m.param_data[0];
    m.param_data[0] += 1.0f;
    /* make every temporary name this process could use (PATH.tmp.PID.0 to
       .999) a directory: the save must fail, say why, and keep the old file */
    {
        int k;
        for (k = 0; k < 1000; k++) { snprintf(tmp, sizeof tmp, "%s.tmp.%d.%d", path, (int)getpid(), k); mkdir(tmp, 0700); }
        CHECK(mhe_checkpoint_save(&m, NULL, path) == MHE_ERR_IO && strstr(m.err, "File exists"), "save with blocked temp names fails: %s", m.err);
        for (k = 0; k < 1000; k++) { snprintf(tmp, sizeof tmp, "%s.tmp.%d.%d", path, (int)getpid(), k); rmdir(tmp); }
    }
    CHECK(mhe_model_load(&r, path, NULL) == MHE_OK && r.param_data[0] == first, "old checkpoint intact after a failed save");
    mhe_model_free(&r);
    CHECK(mhe_checkpoint_save(&m, NULL, "/nonexistent-dir/x.safetensors") == MHE_ERR_IO, "unwritable directory: %s", m.err);
    remove(path);
    CHECK(mhe_model_load(&r, path, NULL) == MHE_ERR_IO, "missing file: %s", r.err);
    mhe_model_free(&m);
}

#if TT_LONG
/* an encoder learns masked bytes from both sides: its masked-LM loss falls below the unigram entropy */
static void encoder_mlm(const int *train, size_t nt, const int *valid, size_t nv) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(600);
    mhe_model m;
    mhe_trainer t;
    float before, after;
    double unigram = mhe_unigram_entropy(train, nt, 256);
    int s;
    c.arch = MHE_ARCH_ENCODER;
    tc.mlm_prob = 0.3f;
    OK(mhe_model_init(&m, &c, 1, NULL));
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "encoder trainer: %s", t.err);
    OK(mhe_evaluate(&m, valid, nv, 16, 64, 8, &before));
    for (s = 0; s < tc.steps; s++) if (mhe_trainer_step(&t, train, nt) != MHE_OK) { printf("step: %s\n", t.err); break; }
    OK(mhe_evaluate(&m, valid, nv, 16, 64, 8, &after));
    printf("  encoder masked-LM validation loss %.3f -> %.3f in %d steps; unigram %.3f\n", before, after, tc.steps, unigram);
    CHECK(after < unigram - 0.1 && after < before - 2.0, "encoder MLM loss %.3f not clearly below the unigram entropy %.3f", after, unigram);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}
/* an encoder-decoder continues a text: its validation loss falls well below the unigram entropy */
static void encdec_continuation(const int *train, size_t nt, const int *valid, size_t nv) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(300);
    mhe_model m;
    mhe_trainer t;
    float before, after;
    double unigram = mhe_unigram_entropy(train, nt, 256);
    int s;
    c.arch = MHE_ARCH_ENCDEC; c.enc_layers = 1;
    tc.src_len = 48; tc.seq_len = 32;
    CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "encdec init: %s", m.err);
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "encdec trainer: %s", t.err);
    OK(mhe_evaluate_s2s(&m, valid, nv, 16, 48, 32, 8, &before));
    for (s = 0; s < tc.steps; s++) if (mhe_trainer_step(&t, train, nt) != MHE_OK) { printf("step: %s\n", t.err); break; }
    CHECK(mhe_evaluate_s2s(&m, valid, nv, 16, 48, 32, 8, &after) == MHE_OK, "encdec evaluate: %s", m.err);
    printf("  encoder-decoder continuation: validation loss %.3f -> %.3f in %d steps; unigram %.3f\n", before, after, tc.steps, unigram);
    CHECK(after < unigram - 0.4, "encdec validation loss %.3f is not clearly below the unigram entropy %.3f", after, unigram);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

/* Appends `label<TAB>line` for lines [first, first+count) of a corpus. */
static size_t add_lines(char *out, size_t used, const int *tok, size_t n, int label, int first, int count) {
    size_t i = 0;
    int line = 0;
    while (i < n && line < first) if (tok[i++] == '\n') line++;
    while (i < n && line < first + count) {
        used += (size_t)sprintf(out + used, "%d\t", label);
        while (i < n && tok[i] != '\n') out[used++] = (char)tok[i++];
        out[used++] = '\n';
        i++; line++;
    }
    return used;
}
#endif

/* A real text-classification task from the bundled corpus: verses of the
   Old Testament narrative (train.txt opens with Genesis) against verses of
   the epistles (valid.txt opens with Romans). Trains the classification
   head, then scores held-out verses; checks the text-set parser too. */
static void classification(const int *train, size_t nt, const int *valid, size_t nv) {
    char err[MHE_ERR_LEN];
    mhe_text_set set;
    {   /* parser: bad lines name their line number */
        static const char *bad[] = { "0\thello\nx\tbad label\n", "0\thello\n1 no tab\n", "0\t\n", "", "-1\tneg\n", "999999999\tbig\n" };
        int i;
        for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++)
            CHECK(mhe_text_set_parse(&set, bad[i], strlen(bad[i]), NULL, err) == MHE_ERR_DATA, "text set '%s' rejected: %s", bad[i], err);
        CHECK(mhe_text_set_parse(&set, "2\tab\r\n\n0\tc\n", 11, NULL, err) == MHE_OK && set.n == 2 && set.n_classes == 3 &&
              set.start[1] - set.start[0] == 2 && set.labels[0] == 2 && set.tokens[2] == 'c', "CRLF and blank lines: %s", err);
        mhe_text_set_free(&set);
    }
#if TT_LONG
    {
        enum { TRAIN = 1500, TEST = 300 };
        size_t cap = 2 * (TRAIN + TEST) * 600, used = 0;
        char *text = (char *)malloc(cap), *held = (char *)malloc(cap / 2);
        mhe_text_set tr, te;
        mhe_config c = small_cfg();
        mhe_train_config tc = small_tc(400);
        mhe_model m;
        mhe_trainer t;
        mhe_cls_metrics before, after;
        int s;
        used = add_lines(text, used, train, nt, 0, 0, TRAIN);
        used = add_lines(text, used, valid, nv, 1, 0, TRAIN);
        CHECK(mhe_text_set_parse(&tr, text, used, NULL, err) == MHE_OK && tr.n == 2 * TRAIN, "training set: %s", err);
        used = add_lines(held, 0, train, nt, 0, TRAIN, TEST);
        used = add_lines(held, used, valid, nv, 1, TRAIN, TEST);
        CHECK(mhe_text_set_parse(&te, held, used, NULL, err) == MHE_OK && te.n == 2 * TEST, "test set: %s", err);
        c.arch = MHE_ARCH_ENCODER; c.n_classes = 2;
        tc.batch = 32;
        OK(mhe_model_init(&m, &c, 3, NULL));
        CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "cls trainer: %s", t.err);
        OK(mhe_evaluate_cls(&m, &te, 32, 64, &before));
        for (s = 0; s < tc.steps; s++) if (mhe_trainer_step_cls(&t, &tr) != MHE_OK) { printf("step: %s\n", t.err); break; }
        CHECK(mhe_evaluate_cls(&m, &te, 32, 64, &after) == MHE_OK, "cls evaluate: %s", m.err);
        printf("  classification (Genesis.. vs Romans.., held-out verses): accuracy %.3f -> %.3f, macro-F1 %.3f, MCC %.3f, loss %.3f\n",
               before.accuracy, after.accuracy, after.macro_f1, after.mcc, after.loss);
        CHECK(after.n == 2 * TEST && after.accuracy > 0.75 && after.mcc > 0.5, "held-out accuracy %.3f, MCC %.3f", after.accuracy, after.mcc);
        {   /* labels beyond the head are refused */
            mhe_text_set three;
            CHECK(mhe_text_set_parse(&three, "2\tverse\n", 8, NULL, err) == MHE_OK, "3-class set");
            CHECK(mhe_trainer_step_cls(&t, &three) == MHE_ERR_DATA, "labels beyond n_classes: %s", t.err);
            mhe_text_set_free(&three);
        }
        mhe_trainer_free(&t);
        mhe_model_free(&m);
        mhe_text_set_free(&tr); mhe_text_set_free(&te);
        free(text); free(held);
    }
#else
    (void)train; (void)nt; (void)valid; (void)nv;
#endif
}

#if TT_LONG
/* Word models on the corpus: Shuffle+Random pre-training learns more than
   the label prior (the vocab baseline also finds random and shuffled words),
   a hash embedding then fine-tunes to classify held-out verses, and an S+R
   run is deterministic. One thread: these models are small (docs/design.md section 11). */
static void words_sr_and_finetune(void) {
    mhe_lexicon x, xtr;   /* all types; the training types alone, with their training counts */
    mhe_word_feats ftr, fall;
    int *tr = NULL, *va = NULL;
    size_t ntr = 0, nva = 0;
    char err[MHE_ERR_LEN];
    int v;
    double t0 = now_s();
    mhe_lexicon_init(&x, NULL);
    memset(&ftr, 0, sizeof ftr);
    memset(&fall, 0, sizeof fall);
    CHECK(mhe_read_words("examples/data/train.txt", &x, &tr, &ntr, NULL, err) == MHE_OK, "train words: %s", err);
    mhe_lexicon_init(&xtr, NULL);
    for (v = 0; v < x.n; v++) {
        size_t len;
        const char *w = mhe_lexicon_word(&x, v, &len);
        int ty;
        OK(mhe_lexicon_intern(&xtr, w, len, 0, &ty));
        xtr.count[ty] = x.count[v];
    }
    CHECK(mhe_read_words("examples/data/valid.txt", &x, &va, &nva, NULL, err) == MHE_OK && x.n > xtr.n, "valid words: %s", err);
    printf("  words: %zu train tokens (%d types), %zu valid tokens (%d new types)\n", ntr, xtr.n, nva, x.n - xtr.n);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    for (v = 0; v < 2; v++) {
        const char *extra = v == 0 ? "vocab_size=2004\n" : "embedding=hash-pool\nhash=lsh\nlsh_dim=2000\n";
        const char *base = "arch=encoder\ntoken_head=sr\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=32\n";
        mhe_config c = mhe_config_default();
        mhe_train_config tc = small_tc(300);
        mhe_model m;
        mhe_trainer t;
        mhe_cls_metrics r0, r;
        double prior = 0;
        int s, k;
        OK(mhe_config_parse(&c, base, strlen(base), err));
        OK(mhe_config_parse(&c, extra, strlen(extra), err));
        tc.batch = 32; tc.seq_len = 32; tc.warmup = 20;
        CHECK(mhe_model_init(&m, &c, 5, NULL) == MHE_OK, "init %s: %s", extra, m.err);
        /* training features cover the training types (the first ones of x), so no validation word is drawn as a random word */
        if (v == 0) OK(mhe_model_set_vocab(&m, &xtr));
        mhe_word_feats_free(&ftr); mhe_word_feats_free(&fall);
        CHECK(mhe_word_feats_update(&m, &xtr, &ftr) == MHE_OK && mhe_word_feats_update(&m, &x, &fall) == MHE_OK, "features: %s", m.err);
        CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "trainer: %s", t.err);
        OK(mhe_evaluate_sr(&m, va, nva, &fall, 32, 32, 16, 0.1f, &r0));
        for (s = 0; s < tc.steps; s++) if (mhe_trainer_step_sr(&t, tr, ntr, &ftr) != MHE_OK) { printf("step: %s\n", t.err); break; }
        CHECK(mhe_evaluate_sr(&m, va, nva, &fall, 32, 32, 16, 0.1f, &r) == MHE_OK, "evaluate S+R: %s", m.err);
        {   /* the entropy of the label prior: the loss of a model that ignores its input */
            double p[3] = { 1 - 0.1 * (1 - 2.0 / 32) - 0.09, 0.1 * (1 - 2.0 / 32), 0.09 };
            for (k = 0; k < 3; k++) prior -= p[k] * log(p[k]);
        }
        printf("  S+R %s: valid loss %.3f -> %.3f (label prior %.3f), accuracy %.3f, macro-F1 %.3f, MCC %.3f\n", v ? "hash-pool/lsh" : "vocab",
               r0.loss, r.loss, prior, r.accuracy, r.macro_f1, r.mcc);
        CHECK(r.loss < prior - 0.05, "S+R loss %.3f is not clearly below the prior's %.3f", r.loss, prior);
        if (v == 0) CHECK(r.mcc > 0.2 && r.macro_f1 > 0.4, "the vocab baseline detects corrupted words: MCC %.3f, F1 %.3f", r.mcc, r.macro_f1);
        if (v == 1) {   /* fine-tune the pre-trained hash model: Genesis.. vs Romans.. verses as words */
            mhe_config cc = m.cfg;
            mhe_model f;
            mhe_trainer ft;
            mhe_text_set set, held;
            mhe_word_feats fs;
            char *text = (char *)malloc(2000000), *ht = (char *)malloc(400000);
            size_t used = 0, hu = 0;
            int *bt = NULL, *bv = NULL, copied = 0;
            size_t nbt, nbv;
            mhe_cls_metrics cr;
            OK(mhe_read_text_tokens("examples/data/train.txt", &bt, &nbt, NULL, err));
            OK(mhe_read_text_tokens("examples/data/valid.txt", &bv, &nbv, NULL, err));
            used = add_lines(text, used, bt, nbt, 0, 0, 1500);
            used = add_lines(text, used, bv, nbv, 1, 0, 1500);
            hu = add_lines(ht, hu, bt, nbt, 0, 1500, 300);
            hu = add_lines(ht, hu, bv, nbv, 1, 1500, 300);
            cc.n_classes = 2;
            CHECK(mhe_model_init_from(&f, &cc, &m, 9, NULL, &copied) == MHE_OK && copied == m.n_tensors, "init_from: %s", f.err);
            CHECK(mhe_text_set_parse_words(&set, &x, text, used, NULL, err) == MHE_OK &&
                  mhe_text_set_parse_words(&held, &x, ht, hu, NULL, err) == MHE_OK, "word sets: %s", err);
            memset(&fs, 0, sizeof fs);
            OK(mhe_word_feats_update(&f, &x, &fs));
            set.words = held.words = &fs;
            tc.steps = 200; tc.seq_len = 32; tc.batch = 32;
            OK(mhe_trainer_init(&ft, &f, &tc));
            for (s = 0; s < tc.steps; s++) if (mhe_trainer_step_cls(&ft, &set) != MHE_OK) { printf("cls step: %s\n", ft.err); break; }
            CHECK(mhe_evaluate_cls(&f, &held, 32, 32, &cr) == MHE_OK, "evaluate cls: %s", f.err);
            printf("  fine-tuned hash-pool/lsh (words, held-out verses): accuracy %.3f, macro-F1 %.3f, MCC %.3f\n", cr.accuracy, cr.macro_f1, cr.mcc);
            CHECK(cr.n == 600 && cr.accuracy > 0.75, "fine-tuned word classifier: accuracy %.3f", cr.accuracy);
            mhe_trainer_free(&ft);
            mhe_model_free(&f);
            mhe_word_feats_free(&fs);
            mhe_text_set_free(&set); mhe_text_set_free(&held);
            free(text); free(ht); free(bt); free(bv);
        }
        mhe_trainer_free(&t);
        mhe_model_free(&m);
    }
    {   /* same seed, same S+R run */
        float l1[5], l2[5];
        int rep, s;
        for (rep = 0; rep < 2; rep++) {
            mhe_config c = mhe_config_default();
            mhe_train_config tc = small_tc(5);
            mhe_model m;
            mhe_trainer t;
            const char *cfg = "arch=encoder\ntoken_head=sr\nembedding=hash-add\nd_model=32\nn_heads=2\nn_layers=1\nmax_seq_len=16\ndropout=0.1\n";
            OK(mhe_config_parse(&c, cfg, strlen(cfg), err));
            tc.batch = 4; tc.seq_len = 16;
            OK(mhe_model_init(&m, &c, 2, NULL));
            mhe_word_feats_free(&ftr);
            OK(mhe_word_feats_update(&m, &x, &ftr));
            OK(mhe_trainer_init(&t, &m, &tc));
            for (s = 0; s < 5; s++) { OK(mhe_trainer_step_sr(&t, tr, ntr, &ftr)); (rep ? l2 : l1)[s] = t.last_loss; }
            mhe_trainer_free(&t);
            mhe_model_free(&m);
        }
        CHECK(memcmp(l1, l2, sizeof l1) == 0, "S+R training is deterministic");
    }
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    printf("  word tests: %.1f s\n", now_s() - t0);
    mhe_word_feats_free(&ftr); mhe_word_feats_free(&fall);
    mhe_lexicon_free(&x);
    mhe_lexicon_free(&xtr);
    free(tr); free(va);
}
#endif

/* Strided perplexity (MHE paper sec. 4.5) against a token-by-token
   computation: target j is scored by its own forward pass over the window
   the definition gives it (the first window [0, T) for j <= T, else window
   k = ceil((j - T) / s) starting at k*s, or the window ending at the text's
   end when k*s passes it), all other targets of that pass ignored. */
static void strided_perplexity(const int *valid) {
    mhe_config c = small_cfg();
    mhe_model m;
    const int n = 150, T = 16, strides[] = { 1, 5, 16 };
    int si, *tgt = (int *)malloc(T * sizeof(int));
    float loss, l1;
    int64_t scored;
    mhe_status st;
    CHECK(mhe_model_init(&m, &c, 11, NULL) == MHE_OK, "init: %s", m.err);
    for (si = 0; si < 3; si++) {
        int s = strides[si], j;
        double total = 0;
        size_t last = (size_t)(n - 1 - T);
        CHECK(mhe_evaluate_strided(&m, valid, n, 4, T, s, &loss, &scored) == MHE_OK, "strided %d: %s", s, m.err);
        CHECK(scored == n - 1, "stride %d scores %lld targets, not %d", s, (long long)scored, n - 1);
        for (j = 1; j < n; j++) {
            size_t begin = 0, k;
            int t;
            if (j > T) {
                k = (size_t)(j - T + s - 1) / (size_t)s;
                begin = k * (size_t)s > last ? last : k * (size_t)s;
            }
            for (t = 0; t < T; t++) tgt[t] = (int)begin + t + 1 == j ? valid[j] : -1;
            OK(mhe_model_forward(&m, valid + begin, tgt, 1, T, &l1));
            total += l1;
        }
        CHECK_CLOSE(loss, total / (n - 1), 1e-5, 1e-5, "stride %d: %.7f vs token by token %.7f", s, loss, total / (n - 1));
    }
    /* stride == seq_len over whole windows is mhe_evaluate's consecutive windows */
    CHECK(mhe_evaluate_strided(&m, valid, 8 * T + 1, 3, T, T, &loss, &scored) == MHE_OK && scored == 8 * T, "stride T: %s", m.err);
    CHECK(mhe_evaluate(&m, valid, 8 * T + 1, 3, T, 0, &l1) == MHE_OK, "evaluate: %s", m.err);
    CHECK_CLOSE(loss, l1, 1e-6, 1e-6, "stride T %.7f vs consecutive windows %.7f", loss, l1);
    /* bad input: a status and a message */
    st = mhe_evaluate_strided(&m, valid, n, 4, T, 0, &loss, NULL);
    CHECK(st == MHE_ERR_ARG && strstr(m.err, "stride"), "stride 0: %d %s", st, m.err);
    st = mhe_evaluate_strided(&m, valid, n, 4, T, T + 1, &loss, NULL);
    CHECK(st == MHE_ERR_ARG, "stride > seq_len: %d", st);
    st = mhe_evaluate_strided(&m, valid, T, 4, T, 1, &loss, NULL);
    CHECK(st == MHE_ERR_DATA, "too short: %d %s", st, m.err);
    mhe_model_free(&m);
    c.arch = MHE_ARCH_ENCODER;
    CHECK(mhe_model_init(&m, &c, 11, NULL) == MHE_OK, "init encoder: %s", m.err);
    st = mhe_evaluate_strided(&m, valid, n, 4, T, 4, &loss, NULL);
    CHECK(st == MHE_ERR_CONFIG && strstr(m.err, "decoder"), "encoder: %d %s", st, m.err);
    mhe_model_free(&m);
    free(tgt);
}

int main(void) {
    size_t nt, nv;
    int *train = load("examples/data/train.txt", &nt), *valid = load("examples/data/valid.txt", &nv);
    if (!train || !valid) { CHECK(0, "bundled corpus missing (run from the repository root)"); return TEST_END(); }
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    determinism_and_resume(train, nt);
    bad_inputs(train, nt);
    atomic_save();
    strided_perplexity(valid);
#if TT_LONG
    loss_falls(train, nt, valid, nv);
    encoder_mlm(train, nt, valid, nv);
    encdec_continuation(train, nt, valid, nv);
#endif
    classification(train, nt, valid, nv);
#if TT_LONG
    words_sr_and_finetune();
#endif
    free(train); free(valid);
    return TEST_END();
}
