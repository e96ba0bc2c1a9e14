/* my_attention.c - an attention kind of your own, in one file, without touching mhe.h.

   The kind is QK-norm attention (Henry et al. 2020, "Query-Key Normalization
   for Transformers", eq. 2): each head's queries and keys are scaled to unit
   length, so a score is a cosine, times a learned gain g:
       A_h = softmax(g_h * Qhat_h Khat_h^T) V_h,   Qhat = Q / |Q| per head.
   The paper learns one g, initialised to log2(L^2 - L); here each head learns
   tau_h with g_h = g0 exp(tau_h), tau starting at 0 (g stays positive).
   The file defines its tensors, forward, backward and decoding step, and
   registers them (mhe_attn_kind_register); then attn=qknorm works as any
   built-in kind. main() compares it with mha on the bundled corpus, 3 seeds
   each, through the study of `mhe compare` (tools/cli/mhe_compare.h):
     build/examples/my_attention [--steps N] [--seeds N] [--out DIR]
   tests/test_my_attention.c checks the kind (MY_ATTENTION_NO_MAIN: no main). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, for the study's timings */
#endif
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { QK_WQ, QK_WK, QK_WV, QK_WO, QK_TAU };

static int qk_dims(const mhe_config *c, int *n, int *dh) {
    *n = c->n_heads;
    *dh = mhe_config_d_head(c);
    return *n * *dh;
}

static float qk_g0(const mhe_config *c) { /* the paper's initial gain, log2(L^2 - L) */
    double L = c->max_seq_len > 2 ? c->max_seq_len : 2;
    return (float)(log(L * L - L) / log(2.0));
}

static int qk_tensors(const mhe_config *c, mhe_kind_tensor *t) {
    static const char *names[] = {"wq.weight", "wk.weight", "wv.weight", "wo.weight", "tau"};
    int n, dh, HD = qk_dims(c, &n, &dh), i;
    for (i = 0; i < 5; i++) {
        snprintf(t[i].name, sizeof t[i].name, "%s", names[i]);
        t[i].ndim = 2, t[i].shape[0] = HD, t[i].shape[1] = c->d_model, t[i].decay = 1, t[i].init = MHE_INIT_NORMAL;
    }
    t[QK_WO].shape[0] = c->d_model, t[QK_WO].shape[1] = HD;
    t[QK_TAU].ndim = 1, t[QK_TAU].shape[0] = n, t[QK_TAU].decay = 0, t[QK_TAU].init = MHE_INIT_ZERO;
    return 5;
}

/* saved for the backward: Q|K|V per row [rows, 3HD] (Q, K scaled to unit length per head),
   1/|q|, 1/|k| [rows, n] each, the heads' output [rows, HD], the probabilities [B, n, T, T] */
static size_t qk_act_floats(const mhe_config *c, int B, int T) {
    int n, dh, HD = qk_dims(c, &n, &dh);
    size_t rows = (size_t)B * T;
    return rows * (4 * (size_t)HD + 2 * (size_t)n) + (size_t)B * n * T * T;
}

static size_t qk_scratch_floats(const mhe_config *c, int B, int T) { /* dO, dQ|dK|dV, one row of dP */
    int n, dh, HD = qk_dims(c, &n, &dh);
    return (size_t)B * T * 4 * HD + (size_t)T;
}

/* x[0..dh) /= |x|; returns 1/|x| */
static float qk_unit(float *x, int dh) {
    double s = 1e-12;
    float r;
    int i;
    for (i = 0; i < dh; i++) s += (double)x[i] * x[i];
    r = (float)(1.0 / sqrt(s));
    for (i = 0; i < dh; i++) x[i] *= r;
    return r;
}

static float qk_dot(const float *a, const float *b, int n) {
    float s = 0;
    int i;
    for (i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* scores of query row q over keys 0..nk-1 (stride 3HD), softmax into p; o = sum_j p_j v_j */
static void qk_attend(const float *q, const float *k0, const float *v0, size_t stride, int nk, float g, int dh,
                      float *p, float *o) {
    float mx = -3.4e38f, sum = 0; /* not -INFINITY: -ffast-math builds assume no infinities */
    int j, i;
    for (j = 0; j < nk; j++) {
        p[j] = g * qk_dot(q, k0 + j * stride, dh);
        mx = p[j] > mx ? p[j] : mx;
    }
    for (j = 0; j < nk; j++) sum += p[j] = expf(p[j] - mx);
    memset(o, 0, (size_t)dh * sizeof(float));
    for (j = 0; j < nk; j++) {
        p[j] /= sum;
        for (i = 0; i < dh; i++) o[i] += p[j] * v0[j * stride + i];
    }
}

static void qk_forward(const mhe_kind_call *k, const float *u, float *out) {
    const mhe_config *c = k->cfg;
    int n, dh, HD = qk_dims(c, &n, &dh), C = c->d_model, T = k->T, rows = k->B * T, b, h, i;
    float *qkv = k->acts, *rq = qkv + (size_t)rows * 3 * HD, *rk = rq + (size_t)rows * n, *att = rk + (size_t)rows * n,
          *P = att + (size_t)rows * HD, g0 = qk_g0(c);
    for (i = 0; i < 3; i++) { /* Q, K, V side by side in each row */
        float *tmp = att; /* the heads' output is written later */
        mhe_linear_fwd(tmp, u, k->w[QK_WQ + i].data, NULL, rows, C, HD);
        for (b = 0; b < rows; b++) memcpy(qkv + ((size_t)b * 3 + i) * HD, tmp + (size_t)b * HD, (size_t)HD * sizeof(float));
    }
    for (b = 0; b < rows; b++)
        for (h = 0; h < n; h++) {
            rq[(size_t)b * n + h] = qk_unit(qkv + (size_t)b * 3 * HD + (size_t)h * dh, dh);
            rk[(size_t)b * n + h] = qk_unit(qkv + (size_t)b * 3 * HD + HD + (size_t)h * dh, dh);
        }
    for (b = 0; b < k->B; b++) {
        int L = k->len ? k->len[b] : T;
        for (h = 0; h < n; h++) {
            float g = g0 * expf(k->w[QK_TAU].data[h]);
            for (i = 0; i < T; i++) {
                const float *base = qkv + (size_t)b * T * 3 * HD + (size_t)h * dh;
                float *p = P + (((size_t)b * n + h) * T + i) * T;
                int nk = k->causal ? (i + 1 < L ? i + 1 : L) : L;
                memset(p, 0, (size_t)T * sizeof(float));
                qk_attend(base + (size_t)i * 3 * HD, base + HD, base + 2 * HD, 3 * (size_t)HD, nk, g, dh, p,
                          att + ((size_t)b * T + i) * HD + (size_t)h * dh);
            }
        }
    }
    mhe_linear_fwd(out, att, k->w[QK_WO].data, NULL, rows, HD, C);
}

static void qk_backward(const mhe_kind_call *k, const float *u, const float *d_out, float *du) {
    const mhe_config *c = k->cfg;
    int n, dh, HD = qk_dims(c, &n, &dh), C = c->d_model, T = k->T, rows = k->B * T, b, h, i, j, e;
    const float *qkv = k->acts, *rq = qkv + (size_t)rows * 3 * HD, *rk = rq + (size_t)rows * n,
                *att = rk + (size_t)rows * n, *P = att + (size_t)rows * HD;
    float *dO = k->scratch, *dqkv = dO + (size_t)rows * HD, *dP = dqkv + (size_t)rows * 3 * HD, g0 = qk_g0(c);
    memset(dO, 0, (size_t)rows * 4 * HD * sizeof(float));
    mhe_linear_bwd(dO, k->w[QK_WO].grad, NULL, d_out, att, k->w[QK_WO].data, rows, HD, C);
    for (b = 0; b < k->B; b++)
        for (h = 0; h < n; h++) {
            float g = g0 * expf(k->w[QK_TAU].data[h]);
            double dg = 0;
            for (i = 0; i < T; i++) {
                const float *p = P + (((size_t)b * n + h) * T + i) * T, *go = dO + ((size_t)b * T + i) * HD + (size_t)h * dh;
                const float *qi = qkv + ((size_t)b * T + i) * 3 * HD + (size_t)h * dh;
                float *dqi = dqkv + ((size_t)b * T + i) * 3 * HD + (size_t)h * dh, dot = 0;
                for (j = 0; j < T; j++) { /* dP = dO V^T, dV += P^T dO */
                    const float *vj = qkv + ((size_t)b * T + j) * 3 * HD + 2 * HD + (size_t)h * dh;
                    float *dvj = dqkv + ((size_t)b * T + j) * 3 * HD + 2 * HD + (size_t)h * dh;
                    if (p[j] == 0) { dP[j] = 0; continue; }
                    dP[j] = qk_dot(go, vj, dh);
                    dot += p[j] * dP[j];
                    for (e = 0; e < dh; e++) dvj[e] += p[j] * go[e];
                }
                for (j = 0; j < T; j++) { /* dS = P (dP - rowsum(P dP)); S = g qhat.khat */
                    const float *kj = qkv + ((size_t)b * T + j) * 3 * HD + HD + (size_t)h * dh;
                    float *dkj = dqkv + ((size_t)b * T + j) * 3 * HD + HD + (size_t)h * dh, ds;
                    if (p[j] == 0) continue;
                    ds = p[j] * (dP[j] - dot);
                    dg += (double)ds * qk_dot(qi, kj, dh);
                    for (e = 0; e < dh; e++) dqi[e] += g * ds * kj[e], dkj[e] += g * ds * qi[e];
                }
            }
            k->w[QK_TAU].grad[h] += (float)(dg * g); /* dg / dtau = g */
        }
    for (i = 0; i < rows; i++) /* through x / |x|: dx = (dxhat - xhat (xhat . dxhat)) / |x| */
        for (h = 0; h < n; h++)
            for (j = 0; j < 2; j++) {
                const float *xh = qkv + (size_t)i * 3 * HD + (size_t)j * HD + (size_t)h * dh;
                float *dx = dqkv + (size_t)i * 3 * HD + (size_t)j * HD + (size_t)h * dh,
                      r = (j ? rk : rq)[(size_t)i * n + h], d = qk_dot(xh, dx, dh);
                for (e = 0; e < dh; e++) dx[e] = (dx[e] - xh[e] * d) * r;
            }
    for (i = 0; i < 3; i++) { /* dQ|dK|dV rows into packed [rows, HD] (dO's room), then the projections */
        for (b = 0; b < rows; b++) memcpy(dO + (size_t)b * HD, dqkv + ((size_t)b * 3 + i) * HD, (size_t)HD * sizeof(float));
        mhe_linear_bwd(du, k->w[QK_WQ + i].grad, NULL, dO, u, k->w[QK_WQ + i].data, rows, C, HD);
    }
}

/* decoding: the cache keeps each token's Khat|V; scratch: Q|K|V, the heads' output, the scores */
static size_t qk_cache_floats(const mhe_config *c) {
    int n, dh;
    return 2 * (size_t)qk_dims(c, &n, &dh);
}

static size_t qk_decode_floats(const mhe_config *c, int max_len) {
    int n, dh;
    return 4 * (size_t)qk_dims(c, &n, &dh) + (size_t)max_len;
}

static void qk_decode(const mhe_kind_call *k, float *cache, int pos, const float *u, float *out) {
    const mhe_config *c = k->cfg;
    int n, dh, HD = qk_dims(c, &n, &dh), C = c->d_model, h, i;
    float *qkv = k->acts, *att = qkv + 3 * HD, *p = att + HD, *row = cache + (size_t)pos * 2 * HD, g0 = qk_g0(c);
    for (i = 0; i < 3; i++) mhe_linear_fwd(qkv + (size_t)i * HD, u, k->w[QK_WQ + i].data, NULL, 1, C, HD);
    for (h = 0; h < n; h++) {
        qk_unit(qkv + (size_t)h * dh, dh);
        qk_unit(qkv + HD + (size_t)h * dh, dh);
    }
    memcpy(row, qkv + HD, 2 * (size_t)HD * sizeof(float));
    for (h = 0; h < n; h++)
        qk_attend(qkv + (size_t)h * dh, cache + (size_t)h * dh, cache + HD + (size_t)h * dh, 2 * (size_t)HD, pos + 1,
                  g0 * expf(k->w[QK_TAU].data[h]), dh, p, att + (size_t)h * dh);
    mhe_linear_fwd(out, att, k->w[QK_WO].data, NULL, 1, HD, C);
}

static const mhe_attn_kind_ops qknorm_ops = {
    "qknorm", "Henry et al. 2020, eq. 2: softmax(g Qhat Khat^T) V, a learned gain per head", 1, qk_tensors, NULL,
    qk_act_floats, qk_scratch_floats, qk_forward, qk_backward, qk_cache_floats, qk_decode_floats, qk_decode};

#ifndef MY_ATTENTION_NO_MAIN
/* the kind against mha as `mhe compare` compares kinds: seeds, statistics, claims, plots */
#include "../tools/cli/mhe_plots.h"
#include "../tools/cli/mhe_clock.h"
#include "../tools/cli/mhe_compare.h"

int main(int argc, char **argv) {
    const char *model = "vocab_size=256\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=64\n";
    compare_opts o;
    char err[MHE_ERR_LEN], *end;
    int i;
    memset(&o, 0, sizeof o);
    o.cfg = mhe_config_default(), o.tc = mhe_train_config_default();
    o.task = COMPARE_LM, o.data = "examples/data/train.txt", o.valid = "examples/data/valid.txt", o.out = "build/my_attention";
    o.kinds = "qknorm,mha", o.pairs = "qknorm:mha", o.baseline = "mha", o.reference = "sha", o.seeds = 3, o.seed = 3, o.init_seed = 7;
    o.batches = 8, o.tc.steps = 200, o.tc.batch = 16, o.tc.seq_len = 64, o.tc.lr = 2e-3f, o.tc.eval_every = 50;
    for (i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], &end, 10);
        int *to = strcmp(argv[i], "--steps") == 0 ? &o.tc.steps : strcmp(argv[i], "--seeds") == 0 ? &o.seeds : NULL;
        if (strcmp(argv[i], "--out") == 0) o.out = argv[i + 1];
        else if (!to || end == argv[i + 1] || *end || v < 1 || v > 1000000) break;   /* a bad value names its flag below */
        else *to = (int)v;
    }
    o.tc.warmup = o.tc.steps / 10;
    if (i < argc) {
        fprintf(stderr, "my_attention: %s%s%s: usage: my_attention [--steps N] [--seeds N] [--out DIR]\n", argv[i],
                i + 1 < argc ? " " : " (no value)", i + 1 < argc ? argv[i + 1] : "");
        return 2;
    }
    if (mhe_attn_kind_register(&qknorm_ops, err) < 0 || mhe_config_parse(&o.cfg, model, strlen(model), err) != MHE_OK) {
        fprintf(stderr, "my_attention: %s\n", err);
        return 1;
    }
    if ((i = compare_run(&o, err)) != COMPARE_OK) fprintf(stderr, "my_attention: %s\n", err);   /* run from the repository root */
    return i == COMPARE_OK ? 0 : i == COMPARE_USAGE ? 2 : 1;
}
#endif
