/* Attention cores: the reference path against finite differences, and the
   fused online-softmax path against the reference (forward and backward),
   over shapes that cross the tile edges, with and without the causal mask,
   with and without attention dropout, and with shared K/V heads. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

static mhe_rng rng;
static void fill(float *x, size_t n) { size_t i; for (i = 0; i < n; i++) x[i] = mhe_rng_normal(&rng); }

static mhe_attn_dims dims(int B, int n, int nkv, int Tq, int Tk, int dh, int causal, float drop) {
    mhe_attn_dims d;
    memset(&d, 0, sizeof d);
    d.B = B; d.n_heads = n; d.n_kv_heads = nkv; d.Tq = Tq; d.Tk = Tk; d.d_head = dh;
    d.q_stride = n * dh + 3;            /* padded rows: strides are honoured */
    d.k_stride = d.v_stride = nkv * dh + 1;
    d.o_stride = n * dh;
    d.causal = causal; d.q_offset = Tk - Tq;
    d.scale = 1.0f / sqrtf((float)dh);
    d.dropout = drop; d.seed = 12345;
    return d;
}

static void fused_vs_ref(int B, int n, int nkv, int Tq, int Tk, int dh, int causal, float drop) {
    mhe_attn_dims d = dims(B, n, nkv, Tq, Tk, dh, causal, drop);
    size_t nq = (size_t)B * Tq * d.q_stride, nk = (size_t)B * Tk * d.k_stride, no = (size_t)B * Tq * d.o_stride;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *dout = malloc(no * 4);
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *probs = malloc((size_t)B * n * Tq * Tk * 4), *lse = malloc((size_t)B * n * Tq * 4);
    float *dq1 = calloc(nq, 4), *dk1 = calloc(nk, 4), *dv1 = calloc(nk, 4), *dq2 = calloc(nq, 4), *dk2 = calloc(nk, 4), *dv2 = calloc(nk, 4);
    double e_o, e_q, e_k, e_v;
    fill(q, nq); fill(k, nk); fill(v, nk); fill(dout, no);
    mhe_attn_ref_fwd(&d, o1, probs, q, k, v);
    mhe_attn_fused_fwd(&d, o2, lse, q, k, v);
    mhe_attn_ref_bwd(&d, NULL, dq1, dk1, dv1, dout, probs, q, k, v);
    mhe_attn_fused_bwd(&d, NULL, dq2, dk2, dv2, dout, o2, lse, q, k, v);
    e_o = test_max_rel_err(o2, o1, (long)no, 1.0);
    e_q = test_max_rel_err(dq2, dq1, (long)nq, 1.0);
    e_k = test_max_rel_err(dk2, dk1, (long)nk, 1.0);
    e_v = test_max_rel_err(dv2, dv1, (long)nk, 1.0);
    CHECK(e_o < 1e-5 && e_q < 1e-4 && e_k < 1e-4 && e_v < 1e-4,
          "fused != reference (B%d n%d kv%d Tq%d Tk%d d%d causal%d drop%.1f): out %.2g dq %.2g dk %.2g dv %.2g",
          B, n, nkv, Tq, Tk, dh, causal, (double)drop, e_o, e_q, e_k, e_v);
    free(q); free(k); free(v); free(dout); free(o1); free(o2); free(probs); free(lse);
    free(dq1); free(dk1); free(dv1); free(dq2); free(dk2); free(dv2);
}

/* d/dx of L = sum(w * out) by central differences, x in {q, k, v} */
static void ref_gradcheck(int causal, float drop, int nkv) {
    mhe_attn_dims d = dims(2, 2, nkv, 5, 5, 4, causal, drop);
    enum { MAXN = 512 };
    float q[MAXN], k[MAXN], v[MAXN], w[MAXN], o[MAXN], p[MAXN], dq[MAXN], dk[MAXN], dv[MAXN];
    float *xs[3] = { q, k, v }, *gs[3] = { dq, dk, dv };
    size_t nq = (size_t)2 * 5 * d.q_stride, nk = (size_t)2 * 5 * d.k_stride, no = (size_t)2 * 5 * d.o_stride, sizes[3];
    double worst = 0;
    int which, i;
    sizes[0] = nq; sizes[1] = nk; sizes[2] = nk;
    fill(q, nq); fill(k, nk); fill(v, nk); fill(w, no);
    memset(dq, 0, sizeof dq); memset(dk, 0, sizeof dk); memset(dv, 0, sizeof dv);
    mhe_attn_ref_fwd(&d, o, p, q, k, v);
    mhe_attn_ref_bwd(&d, NULL, dq, dk, dv, w, p, q, k, v);
    for (which = 0; which < 3; which++)
        for (i = 0; i < (int)sizes[which]; i++) {
            float keep = xs[which][i], h = 1e-2f;
            double lp = 0, lm = 0, num;
            size_t j;
            xs[which][i] = keep + h; mhe_attn_ref_fwd(&d, o, p, q, k, v); for (j = 0; j < no; j++) lp += (double)w[j] * o[j];
            xs[which][i] = keep - h; mhe_attn_ref_fwd(&d, o, p, q, k, v); for (j = 0; j < no; j++) lm += (double)w[j] * o[j];
            xs[which][i] = keep;
            num = (lp - lm) / (2.0 * h);
            if (fabs(num - gs[which][i]) / (1e-2 + fabs(num)) > worst) worst = fabs(num - gs[which][i]) / (1e-2 + fabs(num));
        }
    CHECK(worst < 1e-2, "reference attention gradient check (causal %d, dropout %.1f, kv %d): worst %.3g", causal, (double)drop, nkv, worst);
}

int main(void) {
    int causal;
    mhe_rng_seed(&rng, 3);
    for (causal = 0; causal < 2; causal++) {
        ref_gradcheck(causal, 0.0f, 2);
        ref_gradcheck(causal, 0.3f, 2);
        ref_gradcheck(causal, 0.0f, 1);
        fused_vs_ref(1, 1, 1, 1, 1, 1, causal, 0.0f);
        fused_vs_ref(2, 3, 3, 7, 7, 5, causal, 0.0f);
        fused_vs_ref(2, 4, 4, 33, 33, 16, causal, 0.0f);
        fused_vs_ref(1, 2, 2, 65, 65, 32, causal, 0.0f);
        fused_vs_ref(2, 8, 8, 128, 128, 32, causal, 0.0f);
        fused_vs_ref(1, 2, 2, 100, 130, 64, causal, 0.0f);     /* queries are the last positions */
        fused_vs_ref(1, 2, 2, 1, 77, 16, causal, 0.0f);        /* one decoding step */
        fused_vs_ref(2, 4, 1, 40, 40, 8, causal, 0.0f);        /* K/V shared by all heads */
        fused_vs_ref(2, 6, 2, 70, 70, 8, causal, 0.0f);        /* 2 K/V groups */
        fused_vs_ref(2, 4, 4, 70, 70, 16, causal, 0.2f);       /* attention dropout */
        fused_vs_ref(1, 2, 2, 200, 200, 256, causal, 0.1f);    /* largest head size */
    }
    return TEST_END();
}
