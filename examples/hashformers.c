/* hashformers - the HashFormers recipe (thesis ch. 2) on small real data:
   for every embedding (a word vocabulary as the baseline, and hash-emb,
   hash-pool, hash-add, hash-proj, each with MD5 and with LSH) pre-train a
   small encoder with Shuffle+Random on the words of the bundled corpus
   (examples/data/train.txt), fine-tune it with a classification head on
   Debian fortune cookies by category (examples/data/fortunes_*.tsv), and
   print a table like the thesis's Tables 2.1 and 2.2: S+R and fine-tuned
   scores, embedding and total parameters, PCR (eq. 2.5, 2.6) against the
   vocabulary baseline, PoEP (eq. 2.7), pre-training tokens per second of
   wall clock and per CPU second (the robust figure on a shared machine).
   Then words the corpus never had: how each model embeds them.
     build/examples/hashformers [steps]   (run from the repository root)
   steps: S+R pre-training steps per model (default 600); fine-tuning takes
   half as many. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

#define N_MODELS 9
static const struct { const char *name, *cfg; } MODELS[N_MODELS] = {
    { "vocab (4K words)", "embedding=vocab\nvocab_size=4100\n" },
    { "MD-Emb (1K)", "embedding=hash-emb\nhash=md5\nhash_buckets=1024\n" },
    { "MD-Pool", "embedding=hash-pool\nhash=md5\n" },
    { "MD-Add", "embedding=hash-add\nhash=md5\n" },
    { "MD-Proj", "embedding=hash-proj\nhash=md5\n" },
    { "LSH-Emb (1K)", "embedding=hash-emb\nhash=lsh\nhash_buckets=1024\nlsh_features=table\nlsh_dim=5000\n" },
    { "LSH-Pool", "embedding=hash-pool\nhash=lsh\nlsh_features=table\nlsh_dim=5000\n" },
    { "LSH-Add", "embedding=hash-add\nhash=lsh\nlsh_features=table\nlsh_dim=5000\n" },
    { "LSH-Proj", "embedding=hash-proj\nhash=lsh\nlsh_features=table\nlsh_dim=5000\n" },
};
static const char *BASE = "arch=encoder\ntoken_head=sr\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=48\n";
static const char *UNSEEN[] = { "computer", "computers", "programmer", "programming", "galaxy", "galaxies" };
#define N_UNSEEN 6

typedef struct {
    mhe_cls_metrics sr, cls;
    int64_t emb, total;
    double tok_s, tok_cpu_s, seconds;
    float unseen[N_UNSEEN][64];
} result;

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    int i;
    for (i = 0; i < n; i++) { ab += (double)a[i] * b[i]; aa += (double)a[i] * a[i]; bb += (double)b[i] * b[i]; }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 600, v, s, i;
    mhe_lexicon x, xtr;
    mhe_text_set ftr, fte;
    int *tr = NULL, *va = NULL, ntypes;
    size_t ntr, nva, oov = 0, nte = 0;
    char err[MHE_ERR_LEN];
    void *corpus;
    size_t corpus_len;
    result res[N_MODELS];
    if (steps < 1) { fprintf(stderr, "usage: hashformers [steps >= 1]\n"); return 2; }
    mhe_lexicon_init(&x, NULL);
    mhe_lexicon_init(&xtr, NULL);
    /* the training words first: their types are the lexicon's first ones */
    if (mhe_read_words("examples/data/train.txt", &x, &tr, &ntr, NULL, err) != MHE_OK ||
        mhe_read_file("examples/data/train.txt", &corpus, &corpus_len, NULL, err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", err);
        return 1;
    }
    ntypes = x.n;
    for (i = 0; i < x.n; i++) {   /* the training types alone: no other word is drawn as an S+R random word */
        size_t len;
        const char *w = mhe_lexicon_word(&x, i, &len);
        int t;
        if (mhe_lexicon_intern(&xtr, w, len, 0, &t) != MHE_OK) { fprintf(stderr, "out of memory\n"); return 1; }
        xtr.count[t] = x.count[i];
    }
    if (mhe_read_words("examples/data/valid.txt", &x, &va, &nva, NULL, err) != MHE_OK ||
        mhe_text_set_load_words(&ftr, &x, "examples/data/fortunes_train.tsv", NULL, err) != MHE_OK ||
        mhe_text_set_load_words(&fte, &x, "examples/data/fortunes_test.tsv", NULL, err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", err);
        return 1;
    }
    for (i = 0; i < (int)fte.start[fte.n]; i++, nte++) oov += fte.tokens[i] - MHE_N_SPECIAL >= ntypes;
    printf("S+R pre-training: %zu words of train.txt (%d types), %d steps of 32 x 32 words; S+R validation on valid.txt\n",
           ntr, ntypes, steps);
    printf("fine-tuning: %d fortunes (4 classes), %d steps of 32 x 48 words; test: %d fortunes, %.0f%% of their words never in train.txt\n",
           ftr.n, steps / 2, fte.n, 100.0 * oov / nte);
    printf("encoder: d_model 64, 4 heads, 2 layers, d_ff 256; T = 128 hash bits, k = 10; LSH over the top 5000 character\n"
           "1-4-grams of train.txt (thesis footnote 4)\n\n");
    for (v = 0; v < N_MODELS; v++) {
        mhe_config c = mhe_config_default(), cc;
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m, f;
        mhe_trainer t;
        mhe_word_feats ftrain, fall;
        double t0 = seconds(), t1, tt;
        clock_t c0;
        memset(&ftrain, 0, sizeof ftrain);
        memset(&fall, 0, sizeof fall);
        if (mhe_config_parse(&c, BASE, strlen(BASE), err) != MHE_OK || mhe_config_parse(&c, MODELS[v].cfg, strlen(MODELS[v].cfg), err) != MHE_OK) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        if (mhe_model_init(&m, &c, 42, NULL) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, m.err); return 1; }
        if (c.embedding == MHE_EMB_VOCAB && mhe_model_set_vocab(&m, &xtr) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, m.err); return 1; }
        if (c.hash == MHE_WORD_HASH_LSH && c.embedding != MHE_EMB_VOCAB && mhe_model_set_ngrams(&m, (const char *)corpus, corpus_len) != MHE_OK) {
            fprintf(stderr, "%s: %s\n", MODELS[v].name, m.err);
            return 1;
        }
        if (mhe_word_feats_update(&m, &xtr, &ftrain) != MHE_OK || mhe_word_feats_update(&m, &x, &fall) != MHE_OK) {
            fprintf(stderr, "%s: %s\n", MODELS[v].name, m.err);
            return 1;
        }
        tc.steps = steps; tc.batch = 32; tc.seq_len = 32; tc.lr = 3e-3f; tc.min_lr = 3e-4f; tc.warmup = steps / 20; tc.seed = 7;
        if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        tt = seconds();
        c0 = clock();
        for (s = 0; s < steps; s++)
            if (mhe_trainer_step_sr(&t, tr, ntr, &ftrain) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, t.err); return 1; }
        t1 = seconds();
        res[v].tok_s = (double)steps * tc.batch * tc.seq_len / (t1 - tt);
        res[v].tok_cpu_s = (double)steps * tc.batch * tc.seq_len / ((double)(clock() - c0) / CLOCKS_PER_SEC);
        if (mhe_evaluate_sr(&m, va, nva, &fall, 32, 32, 0, tc.sr_prob, &res[v].sr) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, m.err); return 1; }
        mhe_trainer_free(&t);
        /* fine-tuning: the pre-trained weights and a new 4-class head */
        cc = m.cfg;
        cc.n_classes = 4;
        if (mhe_model_init_from(&f, &cc, &m, 43, NULL, NULL) != MHE_OK) { fprintf(stderr, "%s\n", f.err); return 1; }
        ftr.words = fte.words = &fall;
        tc.steps = steps / 2; tc.seq_len = 48; tc.lr = 1e-3f; tc.min_lr = 1e-4f; tc.warmup = tc.steps / 10;
        if (mhe_trainer_init(&t, &f, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        for (s = 0; s < tc.steps; s++)
            if (mhe_trainer_step_cls(&t, &ftr) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, t.err); return 1; }
        if (mhe_evaluate_cls(&f, &fte, 32, 48, &res[v].cls) != MHE_OK) { fprintf(stderr, "%s: %s\n", MODELS[v].name, f.err); return 1; }
        res[v].emb = mhe_model_emb_params(&f);
        res[v].total = f.n_params;
        for (i = 0; i < N_UNSEEN; i++) {   /* the word's own part: without the regular row every hashed word shares */
            int j;
            if (mhe_model_embed_word(&f, UNSEEN[i], strlen(UNSEEN[i]), res[v].unseen[i]) != MHE_OK) { fprintf(stderr, "%s\n", f.err); return 1; }
            for (j = 0; f.regular_emb && j < 64; j++) res[v].unseen[i][j] -= f.regular_emb->data[j];
        }
        res[v].seconds = seconds() - t0;
        printf("%-16s S+R acc %.3f MCC %.3f | fortunes acc %.3f F1 %.3f | %.0f s\n", MODELS[v].name, res[v].sr.accuracy, res[v].sr.mcc,
               res[v].cls.accuracy, res[v].cls.macro_f1, res[v].seconds);
        fflush(stdout);
        mhe_trainer_free(&t);
        mhe_model_free(&f);
        mhe_model_free(&m);
        mhe_word_feats_free(&ftrain);
        mhe_word_feats_free(&fall);
    }
    printf("\n| model | S+R acc | S+R MCC | fortunes acc | macro-F1 | #emb params | #total params | PCR Emb (%%) | PCR All (%%) | PoEP (%%) | tokens/s | tokens/CPU-s |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (v = 0; v < N_MODELS; v++)   /* thesis eq. 2.5-2.7, against the vocabulary baseline */
        printf("| %s | %.3f | %.3f | %.3f | %.3f | %lld | %lld | %.1f | %.1f | %.1f | %.0f | %.0f |\n", MODELS[v].name, res[v].sr.accuracy,
               res[v].sr.mcc, res[v].cls.accuracy, res[v].cls.macro_f1, (long long)res[v].emb, (long long)res[v].total,
               100 * mhe_pcr((double)res[v].emb, (double)res[0].emb), 100 * mhe_pcr((double)res[v].total, (double)res[0].total),
               100 * mhe_poep((double)res[v].emb, (double)res[v].total), res[v].tok_s, res[v].tok_cpu_s);
    printf("\nWords never seen in train.txt, embedded by each fine-tuned model: cosine similarity of their hash\n"
           "embeddings (the input vector less the regular row all hashed words share). The vocabulary maps every\n"
           "one of them to <unk>, so every pair is 1.000:\n\n| model |");
    for (i = 0; i < N_UNSEEN; i += 2) printf(" %s / %s |", UNSEEN[i], UNSEEN[i + 1]);
    printf(" computer / galaxy |\n|---|");
    for (i = 0; i < N_UNSEEN / 2 + 1; i++) printf("---:|");
    printf("\n");
    for (v = 0; v < N_MODELS; v++) {
        printf("| %s |", MODELS[v].name);
        for (i = 0; i < N_UNSEEN; i += 2) printf(" %.3f |", cosine(res[v].unseen[i], res[v].unseen[i + 1], 64));
        printf(" %.3f |\n", cosine(res[v].unseen[0], res[v].unseen[4], 64));
    }
    free(tr); free(va); free(corpus);
    mhe_text_set_free(&ftr);
    mhe_text_set_free(&fte);
    mhe_lexicon_free(&x);
    mhe_lexicon_free(&xtr);
    return 0;
}
