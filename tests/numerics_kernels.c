/* tests/numerics_kernels.c - the same library computations, compiled twice
   into test_numerics: with -fno-fast-math (suffix _std) and with -ffast-math
   (suffix _fast). Each copy holds its own static copy of the library. */
#define MHE_STATIC
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "numerics_kernels.h"

#define NK_CAT2(a, b) a##b
#define NK_CAT(a, b) NK_CAT2(a, b)
#define NK(name) NK_CAT(name, NUM_SUFFIX)

static nk_api api;

static int k_isnan(float x) { return isnan(x); }
static int k_self_neq(float x) { return x != x; }
static int k_isinf(float x) { return isinf(x); }
static int k_lib_finite(float x) { return mhe__is_finite(x); }
static float k_exp(float x) { return mhe__exp(x); }
static void k_gelu(float *o, const float *x, int n) { mhe_act_fwd(MHE_ACT_GELU, o, x, n); }
static void k_gelu_bwd(float *o, const float *x, const float *d, int n) { memset(o, 0, (size_t)n * sizeof(float)); mhe_act_bwd(MHE_ACT_GELU, o, x, d, n); }
static void k_softmax(float *o, const float *x, int rows, int cols) { mhe_softmax_fwd(o, x, rows, cols); }
static void k_xent(float *losses, const float *logits, const int *targets, int rows, int cols) {
    mhe_xent_fwd(losses, NULL, NULL, logits, targets, rows, cols);
}
static void k_layernorm(float *o, const float *x, const float *w, const float *b, int rows, int cols) {
    float mean[64], rstd[64];
    mhe_layernorm_fwd(o, mean, rstd, x, w, b, rows, cols, 1e-5f);
}
static float k_sum(const float *x, int n) { float s = 0; int i; for (i = 0; i < n; i++) s += x[i]; return s; }

/* one training step of a small model with a NaN planted in `tensor` */
static int k_train_nan(const char *tensor, float *loss) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer t;
    int data[300], i, s;
    c.vocab_size = 32; c.d_model = 16; c.n_heads = 2; c.n_layers = 1; c.max_seq_len = 16;
    tc.batch = 2; tc.seq_len = 16;
    for (i = 0; i < 300; i++) data[i] = i * 7 % 32;
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) return -1;
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { mhe_model_free(&m); return -1; }
    mhe_model_find(&m, tensor)->data[3] = NAN;
    s = (int)mhe_trainer_step(&t, data, 300);
    *loss = t.last_loss;
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return s;
}

/* a forward pass with a NaN in one W^Q row (so every score of a head is NaN) */
static int k_forward_nan(const char *attn, int fused, float *loss) {
    mhe_config c = mhe_config_default();
    mhe_model m;
    int tok[16], tgt[16], i, s;
    c.vocab_size = 32; c.d_model = 16; c.n_heads = 2; c.n_layers = 1; c.max_seq_len = 16; c.fused_attention = fused;
    if (mhe_config_set(&c, "attn", attn, NULL) != MHE_OK || mhe_model_init(&m, &c, 1, NULL) != MHE_OK) return -1;
    for (i = 0; i < 16; i++) { tok[i] = i * 7 % 32; tgt[i] = (i * 7 + 7) % 32; }
    mhe_model_find(&m, "layers.0.attn.wq.weight")->data[3] = NAN;
    s = (int)mhe_model_forward(&m, tok, tgt, 1, 16, loss);
    mhe_model_free(&m);
    return s;
}

const nk_api *NK(nk_get)(void) {
    api.isnan_ = k_isnan; api.self_neq = k_self_neq; api.isinf_ = k_isinf; api.lib_finite = k_lib_finite;
    api.exp_ = k_exp; api.gelu = k_gelu; api.gelu_bwd = k_gelu_bwd; api.softmax = k_softmax; api.xent = k_xent;
    api.layernorm = k_layernorm; api.sum = k_sum; api.train_nan = k_train_nan;
    api.forward_nan = k_forward_nan;
    return &api;
}
