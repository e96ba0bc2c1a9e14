/* Kernels: known answers and finite-difference gradient checks for every op. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

static mhe_rng rng;

static void fill(float *x, int n, float scale) { int i; for (i = 0; i < n; i++) x[i] = scale * mhe_rng_normal(&rng); }

/* Scalar probe L = sum_i w_i * out_i; the op under test is a callback. */
typedef void (*fwd_fn)(const float *x, float *out, void *ctx);
typedef void (*bwd_fn)(const float *x, const float *dout, float *dx, void *ctx);

/* compares the analytic dL/dx with central differences (step h) */
static void gradcheck(const char *name, fwd_fn f, bwd_fn b, void *ctx, int nin, int nout, float h, double tol) {
    float x[512], out[512], w[512], dx[512];
    double worst = 0, gmax = 0;
    int i, j;
    fill(x, nin, 1.0f); fill(w, nout, 1.0f);
    memset(dx, 0, sizeof dx);
    f(x, out, ctx);
    b(x, w, dx, ctx);
    for (i = 0; i < nin; i++) {
        double lp = 0, lm = 0, num, err;
        float keep = x[i];
        x[i] = keep + h; f(x, out, ctx); for (j = 0; j < nout; j++) lp += (double)w[j] * out[j];
        x[i] = keep - h; f(x, out, ctx); for (j = 0; j < nout; j++) lm += (double)w[j] * out[j];
        x[i] = keep;
        num = (lp - lm) / (2.0 * h);
        err = fabs(num - dx[i]) / (1e-2 + fabs(num));
        if (err > worst) worst = err;
        if (fabs(dx[i]) > gmax) gmax = fabs(dx[i]);
    }
    CHECK(worst <= tol, "%s: gradient check worst relative error %.3g > %.3g", name, worst, tol);
    CHECK(gmax > 1e-3, "%s: gradient is (almost) zero everywhere", name);
}

enum { N = 3, C = 8 };
static float g_w[C], g_b[C], g_mean[N], g_rstd[N], g_dw[C], g_db[C];

static void ln_f(const float *x, float *o, void *c) { (void)c; mhe_layernorm_fwd(o, g_mean, g_rstd, x, g_w, g_b, N, C, 1e-5f); }
static void ln_b(const float *x, const float *d, float *dx, void *c) { (void)c; mhe_layernorm_bwd(dx, g_dw, g_db, d, x, g_w, g_mean, g_rstd, N, C); }
static void rms_f(const float *x, float *o, void *c) { (void)c; mhe_rmsnorm_fwd(o, g_rstd, x, g_w, N, C, 1e-5f); }
static void rms_b(const float *x, const float *d, float *dx, void *c) { (void)c; mhe_rmsnorm_bwd(dx, g_dw, d, x, g_w, g_rstd, N, C); }
static void act_f(const float *x, float *o, void *c) { mhe_act_fwd(*(int *)c, o, x, N * C); }
static void act_b(const float *x, const float *d, float *dx, void *c) { mhe_act_bwd(*(int *)c, dx, x, d, N * C); }
static void sm_f(const float *x, float *o, void *c) { (void)c; mhe_softmax_fwd(o, x, N, C); }
static void sm_b(const float *x, const float *d, float *dx, void *c) { float o[N * C]; (void)c; mhe_softmax_fwd(o, x, N, C); mhe_softmax_bwd(dx, o, d, N, C); }
static int g_targets[N] = { 3, -1, 7 };
static void xe_f(const float *x, float *o, void *c) { float l[N]; (void)c; mhe_xent_fwd(l, o, NULL, x, g_targets, N, C); }
static void xe_b(const float *x, const float *d, float *dx, void *c) { (void)c; mhe_xent_bwd(dx, x, g_targets, N, C, d[0] / 2.0f); }
static void do_f(const float *x, float *o, void *c) { (void)c; mhe_dropout_fwd(o, x, N * C, 0.3f, 99, 5); }
static void do_b(const float *x, const float *d, float *dx, void *c) { (void)c; (void)x; mhe_dropout_bwd(dx, d, N * C, 0.3f, 99, 5); }
enum { LI = 5, LO = 4 };
static float g_lw[LO * LI], g_lb[LO], g_ldw[LO * LI], g_ldb[LO];
static void lin_f(const float *x, float *o, void *c) { (void)c; mhe_linear_fwd(o, x, g_lw, g_lb, N, LI, LO); }
static void lin_b(const float *x, const float *d, float *dx, void *c) { (void)c; mhe_linear_bwd(dx, g_ldw, g_ldb, d, x, g_lw, N, LI, LO); }
/* the same linear layer seen as a function of its weight */
static float g_lx[N * LI];
static void linw_f(const float *w, float *o, void *c) { (void)c; mhe_linear_fwd(o, g_lx, w, g_lb, N, LI, LO); }
static void linw_b(const float *w, const float *d, float *dw, void *c) { (void)c; mhe_linear_bwd(NULL, dw, NULL, d, g_lx, w, N, LI, LO); }
/* layer norm as a function of its gain */
static float g_x[N * C];
static void lnw_f(const float *w, float *o, void *c) { (void)c; mhe_layernorm_fwd(o, g_mean, g_rstd, g_x, w, g_b, N, C, 1e-5f); }
static void lnw_b(const float *w, const float *d, float *dw, void *c) { float dx[N * C]; (void)c; memset(dx, 0, sizeof dx); mhe_layernorm_bwd(dx, dw, g_db, d, g_x, w, g_mean, g_rstd, N, C); }
static void rmsw_f(const float *w, float *o, void *c) { (void)c; mhe_rmsnorm_fwd(o, g_rstd, g_x, w, N, C, 1e-5f); }
static void rmsw_b(const float *w, const float *d, float *dw, void *c) { float dx[N * C]; (void)c; memset(dx, 0, sizeof dx); mhe_rmsnorm_bwd(dx, dw, d, g_x, w, g_rstd, N, C); }
/* embedding as a function of its table (V=6 rows of C) */
static int g_ids[N] = { 2, 5, 2 };
static void emb_f(const float *t, float *o, void *c) { (void)c; mhe_embedding_fwd(o, t, g_ids, N, C, 0); }
static void emb_b(const float *t, const float *d, float *dt, void *c) { (void)c; (void)t; mhe_embedding_bwd(dt, d, g_ids, N, C); }

static void known_answers(void) {
    /* softmax([1,2,3]) = e^x / sum e^x */
    float x[3] = { 1, 2, 3 }, y[3], m, r, w[3] = { 1, 1, 1 }, o[3];
    double s = exp(1.0) + exp(2.0) + exp(3.0);
    int t = 2, cnt;
    float l, loss;
    mhe_softmax_fwd(y, x, 1, 3);
    CHECK_CLOSE(y[0], exp(1.0) / s, 1e-7, 1e-6, "softmax[0]");
    CHECK_CLOSE(y[2], exp(3.0) / s, 1e-7, 1e-6, "softmax[2]");
    /* layernorm of [1,2,3]: mean 2, var 2/3 -> (x-2)/sqrt(2/3) */
    mhe_layernorm_fwd(o, &m, &r, x, w, NULL, 1, 3, 0.0f);
    CHECK_CLOSE(o[0], -1.0 / sqrt(2.0 / 3.0), 1e-6, 1e-6, "layernorm[0] = %g", o[0]);
    CHECK_CLOSE(m, 2.0, 1e-7, 0, "layernorm mean");
    /* rmsnorm of [1,2,3]: rms = sqrt(14/3) */
    mhe_rmsnorm_fwd(o, &r, x, w, 1, 3, 0.0f);
    CHECK_CLOSE(o[2], 3.0 / sqrt(14.0 / 3.0), 1e-6, 1e-6, "rmsnorm[2] = %g", o[2]);
    /* cross-entropy of logits [1,2,3] with target 2 = log(s) - 3 */
    mhe_xent_fwd(&l, &loss, &cnt, x, &t, 1, 3);
    CHECK_CLOSE(loss, log(s) - 3.0, 1e-6, 1e-6, "xent");
    CHECK(cnt == 1, "xent count");
    /* GELU(1) with the tanh form = 0.8411920, ReLU, SiLU(1) = 1/(1+e^-1) */
    mhe_act_fwd(MHE_ACT_GELU, o, x, 1);
    CHECK_CLOSE(o[0], 0.841192, 1e-6, 0, "gelu(1) = %.7f", o[0]);
    mhe_act_fwd(MHE_ACT_SILU, o, x, 1);
    CHECK_CLOSE(o[0], 1.0 / (1.0 + exp(-1.0)), 1e-7, 1e-6, "silu(1)");
    /* the exact GELU(1) = Phi(1) = 0.8413447460685429 */
    mhe_act_fwd(MHE_ACT_GELU_ERF, o, x, 1);
    CHECK_CLOSE(o[0], 0.8413447460685429, 1e-6, 0, "gelu-erf(1) = %.7f", o[0]);
}

/* the library's own exp and tanh against libm over their whole range */
static void exp_accuracy(void) {
    double worst = 0, worst_t = 0;
    float x;
    for (x = -87.0f; x < 88.0f; x += 0.0137f) {
        double e = fabs(mhe__exp(x) - exp((double)x)) / exp((double)x);
        if (e > worst) worst = e;
    }
    for (x = -12.0f; x < 12.0f; x += 0.001f) {
        double e = fabs(mhe__tanh(x) - tanh((double)x));
        if (e > worst_t) worst_t = e;
    }
    CHECK(worst < 5e-7, "exp relative error %.3g", worst);
    CHECK(worst_t < 5e-7, "tanh absolute error %.3g", worst_t);
    CHECK(mhe__exp(-100.0f) == 0.0f && mhe__exp(100.0f) > 3e38f, "exp at the edges");
#ifndef __FAST_MATH__   /* -ffast-math assumes there are no infinities or NaNs */
    CHECK(mhe__exp(-INFINITY) == 0.0f && isinf(mhe__exp(100.0f)) && isnan(mhe__exp(NAN)), "exp of -inf, +large, NaN");
#endif
}

/* the MHE paper's indicators on round numbers */
static void prr_peop(void) {
    CHECK_CLOSE(mhe_prr(80.0, 100.0, 0), 0.8, 1e-12, 0, "PRR direct");
    CHECK_CLOSE(mhe_prr(60.0, 50.0, 1), 0.8, 1e-12, 0, "PRR inverse (perplexity 60 vs 50)");
    CHECK_CLOSE(mhe_peop(110.0, 1010.0, 100.0, 1000.0, 0), 10.0, 1e-9, 0, "PEoP: 10%% gain for 1%% params");
    CHECK_CLOSE(mhe_peop(90.0, 1010.0, 100.0, 1000.0, 1), 10.0, 1e-9, 0, "PEoP inverse");
}

static void dropout_stats(void) {
    enum { M = 100000 };
    static float a[M], b[M];
    int i, zeros = 0;
    for (i = 0; i < M; i++) a[i] = 1.0f;
    mhe_dropout_fwd(b, a, M, 0.25f, 7, 0);
    for (i = 0; i < M; i++) zeros += b[i] == 0.0f;
    CHECK(fabs(zeros / (double)M - 0.25) < 0.01, "dropout rate %.4f != 0.25", zeros / (double)M);
    CHECK(b[0] == 0.0f || fabs(b[0] - 1.0f / 0.75f) < 1e-6, "kept values scaled by 1/(1-p)");
}

static void rng_and_arena(void) {
    mhe_rng a, b;
    unsigned char buf[1000];
    mhe_arena ar;
    void *p, *q;
    int i, same = 1;
    double mean = 0, var = 0;
    mhe_rng_seed(&a, 5); mhe_rng_seed(&b, 5);
    for (i = 0; i < 100; i++) same &= mhe_rng_u64(&a) == mhe_rng_u64(&b);
    CHECK(same, "same seed, same stream");
    mhe_rng_seed(&b, 6);
    CHECK(mhe_rng_u64(&a) != mhe_rng_u64(&b), "different seed, different stream");
    for (i = 0; i < 20000; i++) { float z = mhe_rng_normal(&a); mean += z; var += z * z; }
    mean /= 20000; var = var / 20000 - mean * mean;
    CHECK(fabs(mean) < 0.03 && fabs(var - 1) < 0.05, "normal: mean %.3f var %.3f", mean, var);
    mhe_arena_init(&ar, buf + 3, sizeof buf - 3);
    p = mhe_arena_alloc(&ar, 100);
    q = mhe_arena_alloc(&ar, 100);
#ifndef MHE_ARENA_DEBUG   /* debug arenas hand out separate mallocs: malloc's alignment */
    CHECK(p && q && ((uintptr_t)p % 64) == 0 && ((uintptr_t)q % 64) == 0, "arena: 64-byte aligned");
#else
    CHECK(p && q, "arena: allocations succeed");
#endif
    CHECK(mhe_arena_alloc(&ar, 10000) == NULL, "arena: too large request gives NULL");
    mhe_arena_reset(&ar);
    CHECK(ar.used == 0 && ar.peak >= 256, "arena: reset keeps peak");
    mhe_arena_free(&ar);
    CHECK(mhe_arena_alloc_block(&ar, 4096, NULL) == MHE_OK && mhe_arena_alloc(&ar, 4000) != NULL, "arena: own block");
    mhe_arena_free(&ar);
}

static void schedules(void) {
    mhe_train_config c = mhe_train_config_default();
    c.lr = 1.0f; c.min_lr = 0.1f; c.warmup = 10; c.steps = 110;
    c.schedule = MHE_SCHED_CONSTANT;
    CHECK_CLOSE(mhe_lr_at(&c, 0), 0.1, 1e-6, 0, "warmup starts at lr/warmup");
    CHECK_CLOSE(mhe_lr_at(&c, 50), 1.0, 1e-6, 0, "constant");
    c.schedule = MHE_SCHED_LINEAR;
    CHECK_CLOSE(mhe_lr_at(&c, 60), 0.55, 1e-6, 0, "linear midpoint");
    CHECK_CLOSE(mhe_lr_at(&c, 110), 0.1, 1e-6, 0, "linear end");
    c.schedule = MHE_SCHED_COSINE;
    CHECK_CLOSE(mhe_lr_at(&c, 60), 0.55, 1e-6, 0, "cosine midpoint");
    CHECK_CLOSE(mhe_lr_at(&c, 10), 1.0, 1e-6, 0, "cosine start");
    c.schedule = MHE_SCHED_INVSQRT;
    CHECK_CLOSE(mhe_lr_at(&c, 39), 0.5, 1e-6, 0, "invsqrt at 4*warmup");
    c.schedule = MHE_SCHED_COSINE_RESTARTS; c.cycles = 2;
    CHECK_CLOSE(mhe_lr_at(&c, 60), 1.0, 1e-6, 0, "restart at half");
    CHECK_CLOSE(mhe_lr_at(&c, 35), 0.55, 1e-6, 0, "restarts: first cycle midpoint");
}

static void adamw_known(void) {
    /* one step from zero moments: p -= lr * g/|g| (+decay) */
    float p = 1.0f, g = 0.5f, m = 0, v = 0;
    mhe_adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    CHECK_CLOSE(p, 0.9, 1e-6, 0, "adam first step = lr * sign(g): %g", p);
    p = 1.0f; m = 0; v = 0;
    mhe_adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1);
    CHECK_CLOSE(p, 1.0 * (1 - 0.05) - 0.1, 1e-6, 0, "decoupled weight decay: %g", p);
    { /* the vector loop gives the scalar loop's numbers, tails included (the same bits in builds that
         round each float operation; x87 builds keep this loop's intermediates in long double) */
        enum { NA = 1037 };
        static float p1[NA], g1[NA], m1[NA], v1[NA], p2[NA], m2[NA], v2[NA];
        double worst = 0, sum = 0;
        int i, t;
        for (i = 0; i < NA; i++) {
            p1[i] = p2[i] = mhe_rng_normal(&rng);
            m1[i] = m2[i] = v1[i] = v2[i] = 0.0f;
        }
        /* the constants as float variables: x87 builds evaluate 0.999f itself in long double */
        float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
        for (t = 1; t <= 3; t++) {
            float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
            float step = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * wd;
            for (i = 0; i < NA; i++)
                g1[i] = mhe_rng_normal(&rng) * (float)(i % 7 + 1);
            mhe_adamw_update(p1, g1, m1, v1, NA, lr, b1, b2, eps, wd, t);
            for (i = 0; i < NA; i++) {
                m2[i] = b1 * m2[i] + (1.0f - b1) * g1[i];
                v2[i] = b2 * v2[i] + (1.0f - b2) * g1[i] * g1[i];
                p2[i] = p2[i] * decay - step * m2[i] / (sqrtf(v2[i]) / bc2_sqrt + eps);
            }
        }
        for (i = 0; i < NA; i++)
            worst = fmax(worst, fabs((double)p1[i] - p2[i]) / (1e-3 + fabs((double)p2[i])) +
                                    fabs((double)v1[i] - v2[i]) / (1e-3 + fabs((double)v2[i])));
        CHECK(worst < 1e-4, "adamw over %d elements = the scalar loop: %.3g (relative)", NA, worst);
        for (i = 0; i < NA; i++)
            sum += (double)g1[i] * g1[i];
        CHECK_CLOSE(mhe_clip_grad_norm(g1, NA, 0.0f), sqrt(sum), 0, 1e-6, "grad norm of %d elements", NA);
    }
    {
        float gg[4] = { 3, 4, 0, 0 };
        float n = mhe_clip_grad_norm(gg, 4, 1.0f);
        CHECK_CLOSE(n, 5.0, 1e-6, 0, "grad norm");
        CHECK_CLOSE(gg[0], 0.6, 1e-5, 0, "clipped to norm 1");
    }
}

static void configs(void) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    const char *text = "# a comment\n d_model = 64 \nn_heads=4\nattn=mha,mha\nn_layers=2\nnorm=rmsnorm\n\n";
    CHECK(mhe_config_parse(&c, text, strlen(text), err) == MHE_OK, "parse good config: %s", err);
    CHECK(mhe_config_validate(&c, err) == MHE_OK && c.d_model == 64 && c.norm == MHE_NORM_RMSNORM, "validated: %s", err);
    c = mhe_config_default();
    CHECK(mhe_config_set(&c, "d_model", "0", err) == MHE_ERR_CONFIG && strstr(err, "d_model"), "zero size rejected: %s", err);
    CHECK(mhe_config_set(&c, "n_heads", "-4", err) == MHE_ERR_CONFIG, "negative rejected: %s", err);
    CHECK(mhe_config_set(&c, "d_model", "12x", err) == MHE_ERR_CONFIG, "garbage int rejected: %s", err);
    CHECK(mhe_config_set(&c, "dropout", "nan", err) == MHE_ERR_CONFIG, "nan rejected: %s", err);
    CHECK(mhe_config_set(&c, "dropout", "1.5", err) == MHE_ERR_CONFIG, "dropout >= 1 rejected: %s", err);
    CHECK(mhe_config_set(&c, "colour", "red", err) == MHE_ERR_CONFIG && strstr(err, "colour"), "unknown key rejected: %s", err);
    CHECK(mhe_config_set(&c, "attn", "mha,foo", err) == MHE_ERR_CONFIG && strstr(err, "foo"), "unknown kind rejected: %s", err);
    CHECK(mhe_config_set(&c, "norm", "batchnorm", err) == MHE_ERR_CONFIG, "unknown norm rejected: %s", err);
    CHECK(mhe_config_set(&c, "d_model", "99999999999999999999", err) != MHE_OK, "overflowing int rejected: %s", err);
    c = mhe_config_default(); c.d_model = 130; c.n_heads = 4;
    CHECK(mhe_config_validate(&c, err) == MHE_ERR_CONFIG && strstr(err, "divisible"), "indivisible heads: %s", err);
    c.d_head = 32;
    CHECK(mhe_config_validate(&c, err) == MHE_OK, "explicit d_head makes it valid: %s", err);
    c = mhe_config_default();
    OK(mhe_config_set(&c, "attn", "mha,mha,mha", err));
    CHECK(mhe_config_validate(&c, err) == MHE_ERR_CONFIG && strstr(err, "n_layers"), "attn list length: %s", err);
    c = mhe_config_default(); c.n_layers = 0;
    CHECK(mhe_config_validate(&c, err) == MHE_ERR_CONFIG, "n_layers 0 rejected in validate: %s", err);
    CHECK(mhe_config_parse(&c, "d_model 64\n", 11, err) == MHE_ERR_CONFIG && strstr(err, "line 1"), "missing '=': %s", err);
    {
        mhe_config a = mhe_config_default(), b = mhe_config_default();
        const char *key;
        char val[128];
        int i;
        a.d_model = 48; a.d_head = 16; a.norm = MHE_NORM_RMSNORM; a.dropout = 0.125f; a.attn[1] = MHE_ATTN_MHA;
        for (i = 0; mhe_config_field(&a, i, &key, val, sizeof val); i++) OK(mhe_config_set(&b, key, val, err));
        CHECK(memcmp(&a, &b, sizeof a) == 0, "config text round trip");
    }
    {
        mhe_train_config t = mhe_train_config_default();
        CHECK(mhe_train_config_set(&t, "schedule", "cosine-restarts", err) == MHE_OK && t.schedule == MHE_SCHED_COSINE_RESTARTS, "schedule name");
        CHECK(mhe_train_config_set(&t, "lr", "-1", err) == MHE_ERR_CONFIG, "negative lr rejected: %s", err);
        CHECK(mhe_train_config_set(&t, "batch", "0", err) == MHE_ERR_CONFIG, "zero batch rejected: %s", err);
        t.min_lr = 1; t.lr = 0.5f;
        CHECK(mhe_train_config_validate(&t, err) == MHE_ERR_CONFIG, "min_lr > lr rejected: %s", err);
    }
}

/* CP-ALS: recovers an exact rank-R tensor; its error formula equals the
   explicit reconstruction's; a hard limit is reported, not hidden */
static void cp_als(void) {
    enum { I = 9, J = 5, K = 7, R = 3 };
    float A0[I * R], B0[J * R], C0[K * R], T[I * J * K], A[I * (R + 1)], B[J * (R + 1)], C[K * (R + 1)];
    mhe_rng r;
    mhe_cp_result res;
    int i, j, k, q;
    double num = 0, den = 0;
    mhe_rng_seed(&r, 21);
    for (i = 0; i < I * R; i++) A0[i] = mhe_rng_normal(&r);
    for (i = 0; i < J * R; i++) B0[i] = mhe_rng_normal(&r);
    for (i = 0; i < K * R; i++) C0[i] = mhe_rng_normal(&r);
    for (i = 0; i < I; i++)
        for (j = 0; j < J; j++)
            for (k = 0; k < K; k++) {
                double v = 0;
                for (q = 0; q < R; q++) v += (double)A0[i * R + q] * B0[j * R + q] * C0[k * R + q];
                T[(i * J + j) * K + k] = (float)v;
            }
    CHECK(mhe_cp_als(T, I, J, K, R, A, B, C, 5000, 1e-9, MHE_CP_INIT_RANDOM, 5, NULL, &res) == MHE_OK && res.rel_error < 1e-3,
          "CP-ALS recovers a rank-3 tensor: error %.3g after %d sweeps", res.rel_error, res.iterations);
    /* rank 2: a real residual, and the reported error is the explicit one */
    CHECK(mhe_cp_als(T, I, J, K, 2, A, B, C, 500, 1e-9, MHE_CP_INIT_RANDOM, 5, NULL, &res) == MHE_OK, "rank-2 fit converges: %d sweeps", res.iterations);
    for (i = 0; i < I; i++)
        for (j = 0; j < J; j++)
            for (k = 0; k < K; k++) {
                double v = 0, t = T[(i * J + j) * K + k];
                for (q = 0; q < 2; q++) v += (double)A[i * 2 + q] * B[j * 2 + q] * C[k * 2 + q];
                num += (t - v) * (t - v); den += t * t;
            }
    CHECK(res.rel_error > 0.01 && fabs(sqrt(num / den) - res.rel_error) < 1e-4, "rank-2 residual %.4f reported as %.4f", sqrt(num / den), res.rel_error);
    CHECK(mhe_cp_als(T, I, J, K, R, A, B, C, 1, 1e-12, MHE_CP_INIT_RANDOM, 5, NULL, &res) == MHE_ERR_CONVERGE && res.iterations == 1, "iteration limit reported");
    CHECK(mhe_cp_als(T, I, J, K, 0, A, B, C, 10, 1e-6, MHE_CP_INIT_RANDOM, 5, NULL, &res) == MHE_ERR_ARG, "rank 0 rejected");
    CHECK(mhe_cp_als(T, I, J, K, R, A, B, C, 0, 1e-6, MHE_CP_INIT_RANDOM, 5, NULL, &res) == MHE_ERR_ARG, "no iterations rejected");
    CHECK(mhe_cp_als(T, I, J, K, R, A, B, C, 10, 1e-6, 7, 5, NULL, &res) == MHE_ERR_ARG, "unknown init rejected");
    {   /* the HOSVD start: the same rank-3 tensor from 20 seeds, every fit exact */
        int s, bad = 0, sweeps = 0;
        for (s = 0; s < 20; s++) {
            mhe_status st = mhe_cp_als(T, I, J, K, R, A, B, C, 5000, 1e-10, MHE_CP_INIT_SVD, (uint64_t)s, NULL, &res);
            bad += st != MHE_OK || res.rel_error > 1e-4;
            sweeps += res.iterations;
        }
        CHECK(bad == 0, "CP-ALS from the HOSVD start recovers rank 3 from every seed: %d of 20 off, %.1f sweeps on average", bad, sweeps / 20.0);
    }
}

int main(void) {
    int acts[4] = { MHE_ACT_GELU, MHE_ACT_RELU, MHE_ACT_SILU, MHE_ACT_GELU_ERF }, i;
    const char *act_names[4] = { "gelu", "relu", "silu", "gelu-erf" };
    float table[6 * C];
    mhe_rng_seed(&rng, 1);
    fill(g_w, C, 1.0f); fill(g_b, C, 1.0f); fill(g_lw, LO * LI, 1.0f); fill(g_lb, LO, 1.0f);
    fill(g_lx, N * LI, 1.0f); fill(g_x, N * C, 1.0f);
    known_answers();
    gradcheck("layernorm dx", ln_f, ln_b, NULL, N * C, N * C, 1e-2f, 1e-2);
    gradcheck("rmsnorm dx", rms_f, rms_b, NULL, N * C, N * C, 1e-2f, 1e-2);
    gradcheck("layernorm dw", lnw_f, lnw_b, NULL, C, N * C, 1e-2f, 1e-2);
    gradcheck("rmsnorm dw", rmsw_f, rmsw_b, NULL, C, N * C, 1e-2f, 1e-2);
    /* ReLU is piecewise linear: a small step keeps away from its kink; the smooth ones take a larger step */
    for (i = 0; i < 4; i++) gradcheck(act_names[i], act_f, act_b, &acts[i], N * C, N * C, acts[i] == MHE_ACT_RELU ? 1e-3f : 1e-2f, 1e-2);
    gradcheck("softmax", sm_f, sm_b, NULL, N * C, N * C, 1e-2f, 1e-2);
    gradcheck("cross-entropy", xe_f, xe_b, NULL, N * C, 1, 1e-2f, 1e-2);
    gradcheck("dropout", do_f, do_b, NULL, N * C, N * C, 1e-2f, 1e-3);
    gradcheck("linear dx", lin_f, lin_b, NULL, N * LI, N * LO, 1e-2f, 1e-3);
    gradcheck("linear dw", linw_f, linw_b, NULL, LO * LI, N * LO, 1e-2f, 1e-3);
    (void)table;
    gradcheck("embedding", emb_f, emb_b, NULL, 6 * C, N * C, 1e-2f, 1e-3);
    exp_accuracy();
    prr_peop();
    dropout_stats();
    rng_and_arena();
    schedules();
    adamw_known();
    configs();
    cp_als();
    return TEST_END();
}
