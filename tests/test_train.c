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


#ifndef MHE_TEST_QUICK   /* the sanitizer run skips the long training runs */
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void loss_falls(const int *train, size_t nt, const int *valid, size_t nv) {
    mhe_config c = small_cfg();
    mhe_train_config tc = small_tc(300);
    mhe_model m;
    mhe_trainer t;
    float before, after;
    double unigram = mhe_unigram_entropy(train, nt, 256), t0 = now_s(), el;
    int s;
    mhe_model_init(&m, &c, 1, NULL);
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "trainer init: %s", t.err);
    mhe_evaluate(&m, valid, nv, 16, 64, 8, &before);
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
    mhe_model_init(&m, &c, 3, NULL);
    mhe_trainer_init(&t, &m, &tc);
    for (s = 0; s < steps; s++) {
        if (s == save_at) {
            size_t size, w;
            void *buf;
            mhe_checkpoint_size(&m, &t, &size);
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
        mhe_trainer_step(&t, train, nt);
        losses[s] = t.last_loss;
    }
    *np = m.n_params;
    *params = malloc((size_t)m.n_params * sizeof(float));
    memcpy(*params, m.param_data, (size_t)m.n_params * sizeof(float));
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

static void determinism_and_resume(const int *train, size_t nt) {
    enum { S = 12 };
    float la[S], lb[S], lc[S], *pa, *pb, *pc;
    int64_t na, nb, nc;
    run(train, nt, S, -1, la, &pa, &na);
    run(train, nt, S, -1, lb, &pb, &nb);
    run(train, nt, S, 5, lc, &pc, &nc);
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
    mhe_model_init(&m, &c, 1, NULL);
    mhe_trainer_init(&t, &m, &tc);
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
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mhe_model_init(&m, &c, 1, NULL);
    CHECK(mhe_checkpoint_save(&m, NULL, path) == MHE_OK, "save: %s", m.err);
    first = m.param_data[0];
    m.param_data[0] += 1.0f;
    /* make the temporary name unusable (a non-empty directory, which the
       save cannot clear away): the save must fail and keep the old file */
    {
        char inner[320];
        FILE *f;
        snprintf(inner, sizeof inner, "%s/x", tmp);
        mkdir(tmp, 0700);
        if ((f = fopen(inner, "w")) != NULL) fclose(f);
        CHECK(mhe_checkpoint_save(&m, NULL, path) == MHE_ERR_IO, "save with blocked temp file fails: %s", m.err);
        remove(inner);
        rmdir(tmp);
    }
    CHECK(mhe_model_load(&r, path, NULL) == MHE_OK && r.param_data[0] == first, "old checkpoint intact after a failed save");
    mhe_model_free(&r);
    CHECK(mhe_checkpoint_save(&m, NULL, "/nonexistent-dir/x.safetensors") == MHE_ERR_IO, "unwritable directory: %s", m.err);
    remove(path);
    CHECK(mhe_model_load(&r, path, NULL) == MHE_ERR_IO, "missing file: %s", r.err);
    mhe_model_free(&m);
}

#ifndef MHE_TEST_QUICK
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
    mhe_model_init(&m, &c, 1, NULL);
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK, "encoder trainer: %s", t.err);
    mhe_evaluate(&m, valid, nv, 16, 64, 8, &before);
    for (s = 0; s < tc.steps; s++) if (mhe_trainer_step(&t, train, nt) != MHE_OK) { printf("step: %s\n", t.err); break; }
    mhe_evaluate(&m, valid, nv, 16, 64, 8, &after);
    printf("  encoder masked-LM validation loss %.3f -> %.3f in %d steps; unigram %.3f\n", before, after, tc.steps, unigram);
    CHECK(after < unigram - 0.1 && after < before - 2.0, "encoder MLM loss %.3f not clearly below the unigram entropy %.3f", after, unigram);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}
#endif

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
#ifndef MHE_TEST_QUICK
    loss_falls(train, nt, valid, nv);
    encoder_mlm(train, nt, valid, nv);
#endif
    free(train); free(valid);
    return TEST_END();
}
