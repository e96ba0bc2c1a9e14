/* A kind registered from outside mhe.h (examples/my_attention.c, QK-norm
   attention): registration and its refusals; every gradient of whole models
   built from it (decoder, padded encoder, beside built-in kinds in one stack)
   against central differences; decoding equal to the forward pass; a
   checkpoint that records the kind's name, loads back to the same logits, and
   names the kind when it is not registered; a trainer that lowers the loss;
   a kind without backward or decoding refused where they are needed. */
#define MY_ATTENTION_NO_MAIN
#include "../examples/my_attention.c"
#include "test.h"
#include <time.h>

static mhe_config tiny(const char *extra) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=11\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\ninit_std=0.3\nattn=qknorm\n";
    OK(mhe_config_parse(&c, base, strlen(base), err));
    if (extra && mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) printf("bad test config: %s\n", err);
    return c;
}

typedef struct { mhe_batch b; int tok[24], tgt[24], len[3]; } tbatch;

static void make_batch(tbatch *tb, const mhe_config *c, int B, int T, int pad, uint64_t seed) {
    mhe_rng r;
    int i;
    memset(tb, 0, sizeof *tb);
    mhe_rng_seed(&r, seed);
    for (i = 0; i < B * T; i++) {
        tb->tok[i] = (int)mhe_rng_below(&r, (uint32_t)c->vocab_size);
        tb->tgt[i] = (int)mhe_rng_below(&r, (uint32_t)c->vocab_size);
    }
    for (i = 0; i < B; i++) tb->len[i] = T;
    tb->b.B = B, tb->b.T = T, tb->b.tokens = tb->tok, tb->b.targets = tb->tgt;
    if (pad) tb->len[1] = T - 3, tb->b.lengths = tb->len;
}

static void gradcheck(const char *extra, int pad) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    tbatch tb;
    float loss;
    double worst;
    int bad;
    mhe_rng_seed(&r, 9);
    if (mhe_model_init(&m, &c, 4, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", extra, m.err); return; }
    make_batch(&tb, &c, 2, 7, pad, 3);
    mhe_model_zero_grad(&m);
    CHECK(mhe_model_forward_batch(&m, &tb.b, &loss) == MHE_OK && mhe_model_backward(&m) == MHE_OK,
          "forward/backward [%s]: %s", extra, m.err);
    bad = test_model_gradcheck(&m, test_loss_batch, &tb.b, &r, 6, 3, NULL, &worst, NULL);
    CHECK(bad == 0, "gradients of a qknorm model [%s%s] against finite differences: %d tensors off (worst %.3g)",
          extra ? extra : "decoder", pad ? ", padded" : "", bad, worst);
    mhe_model_free(&m);
}

static void decode_matches_forward(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_kv_cache kv;
    tbatch tb;
    int round;
    make_batch(&tb, &c, 1, 8, 0, 5);
    tb.b.targets = NULL;
    if (mhe_model_init(&m, &c, 3, NULL) != MHE_OK) { CHECK(0, "init: %s", m.err); return; }
    CHECK(mhe_kv_cache_init(&kv, &m, 8, NULL) == MHE_OK, "kv cache init");
    OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    for (round = 0; round < 2; round++) { /* twice: a second sequence starts over */
        double e;
        kv.len = 0;
        e = test_decode_vs_forward(&m, &kv, tb.tok, 8);
        CHECK(e >= 0 && e < 1e-5, "decoding [%s] equals the forward pass (round %d): %g", extra ? extra : "qknorm",
              round, e);
    }
    CHECK(kv.bytes_per_token == (size_t)c.n_layers * 2 * 12 * sizeof(float),
          "the cache keeps Khat and V (mha: K and V) per token: %zu bytes", kv.bytes_per_token);
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
}

static void checkpoint_and_training(void) {
    mhe_config c = tiny("n_layers=2\nd_model=16\nn_heads=2\nvocab_size=256\nmax_seq_len=32\ninit_std=0.02\n");
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m, back;
    mhe_trainer t;
    tbatch tb;
    char path[600], other[640];
    const char *tmp = getenv("TMPDIR");
    int *data, s;
    size_t n, i, size;
    float first = 0, last = 0, l1, l2;
    unsigned char *bytes;
    char err[MHE_ERR_LEN];
#ifdef _WIN32
    if (!tmp || !*tmp) tmp = getenv("TEMP"); /* /tmp is no directory there */
#endif
    snprintf(path, sizeof path, "%s/mhe_test_my_attention_%lx.safetensors", tmp && *tmp ? tmp : "/tmp",
             (unsigned long)time(NULL));
    snprintf(other, sizeof other, "%s.other", path);
    data = (int *)malloc(4000 * sizeof(int));
    for (i = 0; i < 4000; i++) data[i] = "the cat sat on the mat. "[i % 24];
    n = 4000;
    tc.steps = 40, tc.batch = 4, tc.seq_len = 32, tc.lr = 3e-3f, tc.warmup = 2, tc.seed = 1;
    if (mhe_model_init(&m, &c, 2, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) {
        CHECK(0, "init: %s %s", m.err, t.err);
        free(data);
        return;
    }
    for (s = 0; s < tc.steps; s++) {
        OK(mhe_trainer_step(&t, data, n));
        if (s < 3) first += t.last_loss / 3;
        if (s >= tc.steps - 3) last += t.last_loss / 3;
    }
    CHECK(last < first - 1.0f, "training a qknorm model lowers the loss: %.3f -> %.3f", first, last);
    CHECK(m.layers[0].attn.user[QK_TAU].data[0] != 0, "the learned gain moved");
    OK(mhe_checkpoint_save(&m, &t, path));
    make_batch(&tb, &c, 1, 12, 0, 8);
    OK(mhe_model_forward_batch(&m, &tb.b, &l1));
    CHECK(mhe_model_load(&back, path, NULL) == MHE_OK, "load with the kind registered: %s", back.err);
    if (back.n_tensors) {
        OK(mhe_model_forward_batch(&back, &tb.b, &l2));
        CHECK(l1 == l2 && strcmp(mhe_attn_kind_name(back.cfg.attn[1]), "qknorm") == 0,
              "the loaded model gives the same loss: %g %g", l1, l2);
        mhe_model_free(&back);
    }
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    free(data);
    /* the same file naming a kind nobody registered: refused by name, nothing loaded */
    bytes = test_slurp(path, &size);
    if (bytes) {
        FILE *f;
        int swapped = 0;
        for (i = 0; i + 15 < size; i++) /* the config's "attn":"qknorm" (the 8-byte length before it holds zeros) */
            if (memcmp(bytes + i, "\"attn\":\"qknorm\"", 15) == 0) memcpy(bytes + i + 8, "qkcos0", 6), swapped++;
        f = fopen(other, "wb");
        if (f) { fwrite(bytes, 1, size, f); fclose(f); }
        memset(&back, 0, sizeof back);
        CHECK(swapped > 0 && mhe_model_load(&back, other, NULL) != MHE_OK &&
                  strstr(back.err, "'qkcos0'") && strstr(back.err, "registered") && back.n_tensors == 0,
              "a checkpoint of an unregistered kind is refused naming it (%d): %s", swapped, back.err);
        free(bytes);
        remove(other);
    }
    remove(path);
    (void)err;
}

static void fwd_only(const mhe_kind_call *k, const float *u, float *out) {
    (void)u;
    memset(out, 0, (size_t)k->B * k->T * k->cfg->d_model * sizeof(float));
}

static int no_tensors(const mhe_config *c, mhe_kind_tensor *t) {
    (void)c, (void)t;
    return 0;
}

static void registration(void) {
    mhe_attn_kind_ops o = qknorm_ops;
    mhe_config c;
    mhe_model m;
    mhe_trainer t;
    mhe_train_config tc = mhe_train_config_default();
    mhe_kv_cache kv;
    char err[MHE_ERR_LEN];
    int id;
    CHECK(mhe_attn_kind_register(&qknorm_ops, err) < 0 && strstr(err, "exists already"), "twice: %s", err);
    o.name = "mha";
    CHECK(mhe_attn_kind_register(&o, err) < 0 && strstr(err, "'mha' exists"), "a built-in name: %s", err);
    o.name = "bad name";
    CHECK(mhe_attn_kind_register(&o, err) < 0 && strstr(err, "letters, digits"), "a malformed name: %s", err);
    o.name = "noforward";
    o.forward = NULL;
    CHECK(mhe_attn_kind_register(&o, err) < 0 && strstr(err, "forward"), "no forward: %s", err);
    /* an inference-only kind without decoding: a trainer and a KV cache refuse it by name */
    memset(&o, 0, sizeof o);
    o.name = "zero", o.causal = 1, o.tensors = no_tensors, o.forward = fwd_only;
    id = mhe_attn_kind_register(&o, err);
    CHECK(id == mhe_attn_kind_count() - 1 && mhe_attn_kind_from_name("zero") == id, "registered: %d %s", id, err);
    c = tiny("attn=zero,mha\n");
    CHECK(mhe_attn_param_count(&c, id, 1, 1) == 0, "a kind without tensors has no parameters");
    if (mhe_model_init(&m, &c, 1, NULL) == MHE_OK) {
        tc.batch = 2, tc.seq_len = 8;
        CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_ERR_CONFIG && strstr(t.err, "zero") && strstr(t.err, "backward"),
              "a kind without backward cannot train: %s", t.err);
        CHECK(mhe_kv_cache_init(&kv, &m, 8, NULL) == MHE_ERR_CONFIG, "a kind without decoding has no KV cache");
        mhe_model_free(&m);
    }
    c = mhe_config_default();
    CHECK(mhe_config_set(&c, "cross_attn", "qknorm", err) == MHE_OK, "set");
    OK(mhe_config_set(&c, "arch", "encdec", err));
    c.enc_layers = 1;
    CHECK(mhe_config_validate(&c, err) != MHE_OK && strstr(err, "qknorm") && strstr(err, "self-attention only"),
          "not as cross-attention: %s", err);
}

int main(void) {
    char err[MHE_ERR_LEN];
    CHECK(mhe_attn_kind_register(&qknorm_ops, err) == MHE_ATTN_KIND_COUNT, "register: %s", err);
    gradcheck(NULL, 0);
    gradcheck("arch=encoder\n", 1);
    gradcheck("attn=qknorm,mhe-mul\nnorm_position=post\n", 0);
    decode_matches_forward(NULL);
    decode_matches_forward("attn=mha,qknorm\n");
    checkpoint_and_training();
    registration();
    return TEST_END();
}
