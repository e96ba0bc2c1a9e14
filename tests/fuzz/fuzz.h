/* tests/fuzz/fuzz.h - the fuzz targets. Included (after mhe.h with
   MHE_IMPLEMENTATION) by the libFuzzer driver tests/fuzz/fuzz_main.c, built
   once per target, and by tests/test_fuzz_regress.c, which replays the seeds
   and every committed crash input in `make test`.

   Each target checks invariants beyond "no crash" (FUZZ_CHECK): a parsed
   view stays inside its buffer, whatever parses also round-trips through the
   writer, a failed load leaves no half-made object, a failed trainer load
   leaves the trainer as it was. The includer may define FUZZ_FAIL(msg). */
#ifndef MHE_FUZZ_H
#define MHE_FUZZ_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

#ifndef FUZZ_FAIL
/* abort, so that libFuzzer stores the input as a crash */
#define FUZZ_FAIL(msg) (fprintf(stderr, "fuzz invariant violated: %s (%s:%d)\n", (msg), __FILE__, __LINE__), abort())
#endif
#define FUZZ_CHECK(cond, msg) do { if (!(cond)) FUZZ_FAIL(msg); } while (0)

/* the file-based entry points read what the target writes here */
static char fuzz_tmp_path[64];
static const char *fuzz_tmp_file(const uint8_t *data, size_t size) {
    FILE *f;
    if (!fuzz_tmp_path[0]) snprintf(fuzz_tmp_path, sizeof fuzz_tmp_path, "/tmp/mhe_fuzz_%d.bin", (int)getpid());
    f = fopen(fuzz_tmp_path, "wb");
    if (!f) return NULL;
    if (size && fwrite(data, 1, size, f) != size) { fclose(f); return NULL; }
    return fclose(f) == 0 ? fuzz_tmp_path : NULL;
}

static int fuzz_msg_ok(const char *err) {
    return err[0] != 0 && memchr(err, 0, MHE_ERR_LEN) != NULL;
}

/* ---- safetensors parser ------------------------------------------------------ */

/* every parsed F32 file is rewritten by the writer and parsed again: same
   names, shapes, bytes and metadata */
static void fuzz_st_roundtrip(const mhe_safetensors *st) {
    mhe_st_item *items = (mhe_st_item *)calloc((size_t)st->n_tensors + 1, sizeof *items);
    float **copies = (float **)calloc((size_t)st->n_tensors + 1, sizeof *copies);
    size_t need = 0, w = 0;
    unsigned char *buf;
    mhe_safetensors st2;
    char err[MHE_ERR_LEN];
    int i, d;
    for (i = 0; i < st->n_tensors; i++) {
        const mhe_st_tensor *t = &st->tensors[i];
        copies[i] = (float *)malloc(t->nbytes ? t->nbytes : 1);
        FUZZ_CHECK(mhe_st_read_f32(st, t, copies[i], t->size) == MHE_OK, "read_f32 of a parsed F32 tensor");
        items[i].name = t->name;
        items[i].ndim = t->ndim;
        for (d = 0; d < t->ndim; d++) items[i].shape[d] = t->shape[d];
        items[i].data = copies[i];
    }
    FUZZ_CHECK(mhe_st_write_size(items, st->n_tensors, st->meta_keys, st->meta_values, st->n_meta, &need, err) == MHE_OK,
               "the writer accepts what the parser accepted");
    buf = (unsigned char *)malloc(need);
    FUZZ_CHECK(mhe_st_write_mem(buf, need, &w, items, st->n_tensors, st->meta_keys, st->meta_values, st->n_meta, err) == MHE_OK &&
               w == need, "write_mem writes write_size bytes");
    FUZZ_CHECK(mhe_st_parse(&st2, buf, w, NULL) == MHE_OK, "written file parses");
    FUZZ_CHECK(st2.n_tensors == st->n_tensors && st2.n_meta == st->n_meta, "same tensor and metadata counts");
    for (i = 0; i < st->n_tensors; i++) {
        const mhe_st_tensor *a = &st->tensors[i], *b = mhe_st_find(&st2, a->name);
        FUZZ_CHECK(b && b->ndim == a->ndim && b->nbytes == a->nbytes && b->dtype == a->dtype, "tensor survives the round trip");
        FUZZ_CHECK(!memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)a->ndim), "same shape");
        FUZZ_CHECK(a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes), "same bytes");
    }
    for (i = 0; i < st->n_meta; i++) {
        const char *v = mhe_st_meta(&st2, st->meta_keys[i]);
        FUZZ_CHECK(v && !strcmp(v, st->meta_values[i]), "metadata survives the round trip");
    }
    mhe_st_free(&st2);
    free(buf);
    for (i = 0; i < st->n_tensors; i++) free(copies[i]);
    free(copies);
    free(items);
}

static int fuzz_safetensors(const uint8_t *data, size_t size) {
    mhe_safetensors st;
    mhe_status s = mhe_st_parse(&st, data, size, NULL);
    size_t total = 0, hl;
    int i, d, all_f32 = 1;
    if (s != MHE_OK) {
        FUZZ_CHECK(s > MHE_OK && s < MHE_STATUS_COUNT, "a failure has a defined status");
        FUZZ_CHECK(fuzz_msg_ok(st.err), "a failure has a message");
        FUZZ_CHECK(!st.storage_ && !st.tensors && !st.n_tensors && !st.n_meta && !st.data, "a failed parse keeps nothing");
        return 0;
    }
    for (i = 0, hl = 0; i < 8; i++) hl |= (size_t)data[i] << (8 * i);
    FUZZ_CHECK(st.data == data + 8 + hl && st.data_size == size - 8 - hl, "data section right after the header");
    for (i = 0; i < st.n_tensors; i++) {
        const mhe_st_tensor *t = &st.tensors[i];
        uint64_t count = 1;
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= MHE_ST_MAX_DIMS && t->dtype >= 0 && t->dtype < MHE__ST_NDTYPES, "sane ndim and dtype");
        for (d = 0; d < t->ndim; d++) count *= (uint64_t)t->shape[d];
        FUZZ_CHECK((uint64_t)t->size == count && t->nbytes == (size_t)count * (size_t)mhe__st_dtypes[t->dtype].size,
                   "byte count = shape x dtype size");
        /* the byte range lies inside the buffer */
        FUZZ_CHECK(t->data >= st.data && (size_t)(t->data - st.data) <= st.data_size &&
                   t->nbytes <= st.data_size - (size_t)(t->data - st.data), "tensor bytes inside the data section");
        FUZZ_CHECK(mhe_st_find(&st, t->name) == t, "every tensor is found by its name");
        FUZZ_CHECK(mhe__utf8_valid(t->name, strlen(t->name)), "names are valid UTF-8");
        total += t->nbytes;
        if (t->dtype != MHE_DTYPE_F32) all_f32 = 0;
    }
    FUZZ_CHECK(total == st.data_size, "the tensors tile the data section");
    for (i = 0; i < st.n_meta; i++)
        FUZZ_CHECK(mhe_st_meta(&st, st.meta_keys[i]) == st.meta_values[i], "every metadata key is found");
    FUZZ_CHECK(!mhe_st_find(&st, "__metadata__"), "no tensor is called __metadata__");
    if (all_f32) fuzz_st_roundtrip(&st);
    mhe_st_free(&st);
    return 0;
}

/* ---- checkpoint loader ------------------------------------------------------- */

/* element i of a tensor as the forward reads it: its float, or (q8, which keeps no float copy) its int8
   weight times the group's scale, as a float checkpoint of the model writes it */
static float fuzz_weight(const mhe_tensor *t, int64_t i) {
    return t->data ? t->data[i] : (float)t->q8[i] * t->q8_scale[i / t->q8_group];
}

/* the same config and every weight the same, bit for bit, whichever form each model holds it in */
static int fuzz_same_model(const mhe_model *a, const mhe_model *b) {
    int i;
    int64_t e;
    if (memcmp(&a->cfg, &b->cfg, sizeof a->cfg) || a->n_params != b->n_params || a->n_tensors != b->n_tensors) return 0;
    for (i = 0; i < a->n_tensors; i++) {
        const mhe_tensor *x = &a->params[i], *y = &b->params[i];
        if (x->size != y->size || (!x->data && !x->q8) || (!y->data && !y->q8)) return 0;
        for (e = 0; e < x->size; e++) {
            float u = fuzz_weight(x, e), v = fuzz_weight(y, e);
            if (memcmp(&u, &v, sizeof u)) return 0;
        }
    }
    return 1;
}

/* a short forward (and decode) on a loaded model: whatever loads must run */
static void fuzz_run_model(mhe_model *m) {
    int T = m->cfg.max_seq_len < 4 ? m->cfg.max_seq_len : 4, tok[4], tgt[4], i;
    float loss;
    mhe_status s;
    for (i = 0; i < T; i++) { tok[i] = (i * 5 + 1) % m->cfg.vocab_size; tgt[i] = (i * 3 + 2) % m->cfg.vocab_size; }
    s = mhe_model_forward(m, tok, tgt, 1, T, &loss);
    /* a file may hold NaN or huge weights: that is MHE_ERR_NONFINITE, never a crash */
    FUZZ_CHECK(s == MHE_OK || ((s == MHE_ERR_NONFINITE || s == MHE_ERR_NOMEM) && fuzz_msg_ok(m->err)), "forward of a loaded model");
    if (s == MHE_OK && m->cfg.arch == MHE_ARCH_DECODER) {
        mhe_kv_cache kv;
        FUZZ_CHECK(mhe_kv_cache_init(&kv, m, T, NULL) == MHE_OK, "KV cache of a loaded model");
        /* the forward's loss can be finite while a logit is not (-inf beside the target):
           decoding, which returns the logits, says MHE_ERR_NONFINITE */
        for (i = 0; i < T && s == MHE_OK; i++) {
            s = mhe_decode_step(m, &kv, tok[i]);
            FUZZ_CHECK(s == MHE_OK || (s == MHE_ERR_NONFINITE && fuzz_msg_ok(m->err)), "decode step");
        }
        mhe_kv_cache_free(&kv);
    }
}

static int fuzz_checkpoint(const uint8_t *data, size_t size) {
    mhe_model m, mf, m2;
    mhe_status s = mhe_model_load_mem(&m, data, size, NULL), sf;
    const char *path = fuzz_tmp_file(data, size);
    size_t need = 0, w = 0, w2 = 0;
    unsigned char *buf, *buf2;
    /* the file path gives the same answer as the memory path */
    sf = path ? mhe_model_load(&mf, path, NULL) : s;
    FUZZ_CHECK(sf == s, "mhe_model_load and mhe_model_load_mem agree");
    if (s != MHE_OK) {
        FUZZ_CHECK(s > MHE_OK && s < MHE_STATUS_COUNT && fuzz_msg_ok(m.err), "a failure has a status and a message");
        FUZZ_CHECK(!m.params && !m.param_data && !m.grad_data && !m.n_params, "a failed load keeps nothing");
        return 0;
    }
    if (path) { FUZZ_CHECK(fuzz_same_model(&m, &mf), "file and memory loads are identical"); mhe_model_free(&mf); }
    /* re-save and reload: identical config and parameters, identical bytes */
    FUZZ_CHECK(mhe_checkpoint_size(&m, NULL, &need) == MHE_OK, "checkpoint size of a loaded model");
    buf = (unsigned char *)malloc(need);
    buf2 = (unsigned char *)malloc(need);
    FUZZ_CHECK(mhe_checkpoint_write_mem(&m, NULL, buf, need, &w) == MHE_OK && w == need, "re-save");
    FUZZ_CHECK(mhe_model_load_mem(&m2, buf, w, NULL) == MHE_OK, "re-saved checkpoint loads");
    FUZZ_CHECK(fuzz_same_model(&m, &m2), "re-loaded model has identical config and parameters");
    FUZZ_CHECK(mhe_checkpoint_write_mem(&m2, NULL, buf2, need, &w2) == MHE_OK && w2 == w && !memcmp(buf, buf2, w),
               "saving is a fixed point");
    fuzz_run_model(&m2);
    mhe_model_free(&m2);
    mhe_model_free(&m);
    free(buf); free(buf2);
    return 0;
}

/* ---- trainer checkpoints ------------------------------------------------------ */

static int fuzz_trainer(const uint8_t *data, size_t size) {
    mhe_model m, m2;
    mhe_trainer t, t2;
    mhe_train_config tc = mhe_train_config_default();
    mhe_safetensors st;
    char err[MHE_ERR_LEN];
    float *am, *av;
    mhe_rng rng;
    int step, tok[64], i;
    size_t bytes, need = 0, w = 0;
    unsigned char *buf;
    mhe_status s;
    if (mhe_model_load_mem(&m, data, size, NULL) != MHE_OK) return 0;
    /* the trainer takes batch and seq_len from the file when they are small */
    tc.batch = 2; tc.seq_len = m.cfg.max_seq_len < 4 ? m.cfg.max_seq_len : 4;
    if (mhe_st_parse(&st, data, size, NULL) == MHE_OK) {
        const char *b = mhe_st_meta(&st, "train.batch"), *l = mhe_st_meta(&st, "train.seq_len");
        mhe_train_config probe = tc;
        if (b && l && mhe_train_config_set(&probe, "batch", b, err) == MHE_OK &&
            mhe_train_config_set(&probe, "seq_len", l, err) == MHE_OK && (int64_t)probe.batch * probe.seq_len <= 32 &&
            probe.seq_len <= m.cfg.max_seq_len) { tc.batch = probe.batch; tc.seq_len = probe.seq_len; }
        mhe_st_free(&st);
    }
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { mhe_model_free(&m); return 0; }
    /* a recognisable state, to see that a failed load leaves it alone */
    for (i = 0; i < m.n_params; i++) { t.adam_m[i] = (float)i; t.adam_v[i] = (float)(2 * i); }
    t.step = 12345;
    bytes = (size_t)m.n_params * sizeof(float);
    am = (float *)malloc(bytes + 1); av = (float *)malloc(bytes + 1);
    memcpy(am, t.adam_m, bytes); memcpy(av, t.adam_v, bytes);
    rng = t.rng; step = t.step;
    s = mhe_trainer_load_mem(&t, data, size);
    if (s != MHE_OK) {
        FUZZ_CHECK(s > MHE_OK && s < MHE_STATUS_COUNT && fuzz_msg_ok(t.err), "a failure has a status and a message");
        FUZZ_CHECK(!memcmp(am, t.adam_m, bytes) && !memcmp(av, t.adam_v, bytes) && t.step == step &&
                   !memcmp(&rng, &t.rng, sizeof rng), "a failed trainer load leaves the trainer unchanged");
    } else {
        /* save, reload into a fresh model and trainer: the same state; one step on each: the same result */
        FUZZ_CHECK(mhe_checkpoint_size(&m, &t, &need) == MHE_OK, "trainer checkpoint size");
        buf = (unsigned char *)malloc(need);
        FUZZ_CHECK(mhe_checkpoint_write_mem(&m, &t, buf, need, &w) == MHE_OK, "trainer checkpoint write");
        FUZZ_CHECK(mhe_model_load_mem(&m2, buf, w, NULL) == MHE_OK && fuzz_same_model(&m, &m2), "model part reloads");
        FUZZ_CHECK(mhe_trainer_init(&t2, &m2, &tc) == MHE_OK, "second trainer");
        FUZZ_CHECK(mhe_trainer_load_mem(&t2, buf, w) == MHE_OK, "trainer part reloads");
        FUZZ_CHECK(t2.step == t.step && !memcmp(&t2.rng, &t.rng, sizeof t.rng) && !memcmp(t.adam_m, t2.adam_m, bytes) &&
                   !memcmp(t.adam_v, t2.adam_v, bytes), "identical optimizer state, step and RNG");
        for (i = 0; i < 64; i++) tok[i] = (i * 7 + 3) % m.cfg.vocab_size;
        s = mhe_trainer_step(&t, tok, 64);
        FUZZ_CHECK(mhe_trainer_step(&t2, tok, 64) == s, "resumed step has the same status");
        FUZZ_CHECK(fuzz_same_model(&m, &m2) && !memcmp(t.adam_m, t2.adam_m, bytes), "resumed step gives the same weights");
        mhe_trainer_free(&t2);
        mhe_model_free(&m2);
        free(buf);
    }
    free(am); free(av);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return 0;
}

/* ---- config text ------------------------------------------------------------- */

static int fuzz_config(const uint8_t *data, size_t size) {
    mhe_config c = mhe_config_default(), c2 = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default(), tc2 = mhe_train_config_default();
    char err[MHE_ERR_LEN], val[1100];
    const char *key;
    mhe_status s = mhe_config_parse(&c, (const char *)data, size, err), parsed = s;
    int i;
    if (s != MHE_OK) FUZZ_CHECK(s == MHE_ERR_CONFIG && fuzz_msg_ok(err), "config parse failure has a message");
    s = mhe_config_validate(&c, err);   /* whatever parse left, validate judges it */
    if (s == MHE_OK) {
        /* the text form round-trips to an identical struct (this is how checkpoints store it) */
        for (i = 0; mhe_config_field(&c, i, &key, val, sizeof val); i++) {
            FUZZ_CHECK(strlen(val) < 1024, "a field's text fits the checkpoint's metadata slot");
            FUZZ_CHECK(mhe_config_set(&c2, key, val, err) == MHE_OK, "a printed field parses back");
        }
        FUZZ_CHECK(!memcmp(&c, &c2, sizeof c), "config round trip is exact");
        FUZZ_CHECK(mhe_config_validate(&c2, err) == MHE_OK, "the round-tripped config validates");
        FUZZ_CHECK(mhe_attn_param_count(&c, c.attn[0], 1, c.bias) >= 0, "attention parameter count");
    } else {
        FUZZ_CHECK(fuzz_msg_ok(err), "validate failure has a message");
        /* what set accepted, validate's per-field ranges accept too */
        FUZZ_CHECK(parsed != MHE_OK || strncmp(err, "config field '", 14) != 0, "set and validate agree on field ranges");
    }

    s = mhe_train_config_parse(&tc, (const char *)data, size, err);
    if (s != MHE_OK) FUZZ_CHECK(s == MHE_ERR_CONFIG && fuzz_msg_ok(err), "train config parse failure has a message");
    parsed = s;
    s = mhe_train_config_validate(&tc, err);
    FUZZ_CHECK(s == MHE_OK || parsed != MHE_OK || strncmp(err, "train field '", 13) != 0, "set and validate agree on train field ranges");
    if (s == MHE_OK) {
        int steps[6];
        for (i = 0; mhe_train_config_field(&tc, i, &key, val, sizeof val); i++)
            FUZZ_CHECK(mhe_train_config_set(&tc2, key, val, err) == MHE_OK, "a printed train field parses back");
        FUZZ_CHECK(!memcmp(&tc, &tc2, sizeof tc), "train config round trip is exact");
        /* the schedule stays within [0, lr] */
        steps[0] = 0; steps[1] = tc.warmup > 0 ? tc.warmup - 1 : 0; steps[2] = tc.warmup;
        steps[3] = tc.steps / 2; steps[4] = tc.steps > 0 ? tc.steps - 1 : 0; steps[5] = tc.steps;
        for (i = 0; i < 6; i++) {
            float lr = mhe_lr_at(&tc, steps[i]);
            FUZZ_CHECK(lr >= 0 && lr <= tc.lr * (1 + 1e-6f), "learning rate within [0, lr]");
        }
    }
    return 0;
}

/* ---- byte tokenizer and corpus loader ------------------------------------------- */

static int fuzz_corpus(const uint8_t *data, size_t size) {
    int *tok = (int *)malloc((size ? size : 1) * sizeof(int)), *ft = NULL;
    size_t n = mhe_tokenize_bytes((const char *)data, size, tok), i, fn = 0;
    const char *path = fuzz_tmp_file(data, size);
    char err[MHE_ERR_LEN];
    mhe_status s;
    int text = size > 0 && !memchr(data, 0, size);
    FUZZ_CHECK(n == size, "one token per byte");
    for (i = 0; i < n; i++) FUZZ_CHECK(tok[i] == data[i], "token = byte value");
    if (path) {
        s = mhe_read_text_tokens(path, &ft, &fn, NULL, err);
        FUZZ_CHECK(text ? s == MHE_OK : s == MHE_ERR_DATA, "empty or NUL-holding files are MHE_ERR_DATA, text loads");
        if (s == MHE_OK) {
            double h = mhe_unigram_entropy(ft, fn, 256);
            FUZZ_CHECK(fn == size && !memcmp(ft, tok, size * sizeof(int)), "the corpus loader agrees with the tokenizer");
            FUZZ_CHECK(h >= 0 && h <= log(256.0) + 1e-9, "unigram entropy within [0, log 256]");
            free(ft);
        } else FUZZ_CHECK(ft == NULL && fn == 0 && fuzz_msg_ok(err), "a failed load returns nothing and says why");
    }
    free(tok);
    return 0;
}

/* every target, with the seed directories (under tests/fuzz/seeds/) it starts from */
typedef struct fuzz_target { const char *name; int (*fn)(const uint8_t *, size_t); const char *seeds[3]; } fuzz_target;
static const fuzz_target fuzz_targets[] = {
    { "safetensors", fuzz_safetensors, { "safetensors", "checkpoint", "trainer" } },
    { "checkpoint", fuzz_checkpoint, { "checkpoint", "trainer", NULL } },
    { "trainer", fuzz_trainer, { "trainer", NULL, NULL } },
    { "config", fuzz_config, { "config", NULL, NULL } },
    { "corpus", fuzz_corpus, { "corpus", NULL, NULL } },
};
#define FUZZ_N_TARGETS ((int)(sizeof fuzz_targets / sizeof fuzz_targets[0]))

#endif
