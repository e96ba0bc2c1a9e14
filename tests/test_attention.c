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
    OK(mhe_attn_fused_fwd(&d, o2, lse, q, k, v));
    mhe_attn_ref_bwd(&d, NULL, dq1, dk1, dv1, dout, probs, q, k, v);
    OK(mhe_attn_fused_bwd(&d, NULL, dq2, dk2, dv2, dout, o2, lse, q, k, v));
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

/* The decoding core (one query per head, mhe__attn_one) against the
   reference core on explicitly expanded heads: MHE's per-head maps
   (maps 1: MHE-MUL's q_mul, v_mul; 2: MHE-ADD's q_add, k_add, v_add; 3:
   collab's mixing rows of width W, key bias and per-head values), spans of
   more heads than one pass takes, head sizes off the 8-lane kernels, and
   contexts of several key tiles, split in halves for one long sequence.
   The lse against the fused core's (which reads the same maps), and one
   thread against two, bit for bit. */
static void one_vs_ref(int B, int n, int nkv, int Tk, int dh, int maps, int W) {
    int qw = maps == 3 ? W : dh, kw = maps == 3 ? W + n : nkv * dh, h, b, j, c, vn = maps == 3 ? n : nkv;
    size_t nk = (size_t)B * Tk;
    float *q = malloc((size_t)B * (maps ? qw : n * dh) * 4), *k = malloc(nk * kw * 4), *v = malloc(nk * vn * dh * 4);
    float *mul = malloc((size_t)n * qw * 4), *add = malloc((size_t)n * dh * 4 * 3), *vmul = malloc((size_t)n * dh * 4);
    float *qx = malloc((size_t)B * n * qw * 4), *kx = malloc(nk * n * dh * 4), *vx = malloc(nk * n * dh * 4);
    float *o1 = malloc((size_t)B * n * dh * 4), *o2 = malloc((size_t)B * n * dh * 4), *o3 = malloc((size_t)B * n * dh * 4);
    float *probs = malloc((size_t)B * n * Tk * 4), *lse1 = malloc((size_t)B * n * 4), *lse2 = malloc((size_t)B * n * 4),
          *lse3 = malloc((size_t)B * n * 4);
    mhe_attn_dims d, r;
    double e_o, e_l = 0;
    memset(&d, 0, sizeof d);
    d.B = B; d.n_heads = n; d.n_kv_heads = maps ? 1 : nkv; d.Tq = 1; d.Tk = Tk; d.d_head = dh;
    d.q_stride = maps ? qw : n * dh; d.k_stride = kw; d.v_stride = vn * dh; d.o_stride = n * dh;
    d.scale = 1.0f / sqrtf((float)dh); d.q_shared = maps != 0;
    fill(q, (size_t)B * d.q_stride); fill(k, nk * kw); fill(v, nk * vn * dh);
    fill(mul, (size_t)n * qw); fill(add, (size_t)n * dh * 3); fill(vmul, (size_t)n * dh);
    if (maps == 1) { d.q_mul = mul; d.v_mul = vmul; }
    if (maps == 2) { d.q_add = add; d.k_add = add + n * dh; d.v_add = add + 2 * n * dh; }
    if (maps == 3) { d.d_qk = W; d.q_mul = mul; d.v_per_head = 1; d.k_bias = k + W; d.k_bias_stride = kw; }
    r = d; /* the reference: every head's Q, K, V written out */
    r.q_shared = 0; r.q_mul = r.q_add = r.k_add = r.v_mul = r.v_add = NULL;
    r.q_stride = n * qw;
    if (maps == 1 || maps == 2) { r.n_kv_heads = n; r.k_stride = r.v_stride = n * dh; }
    for (b = 0; b < B; b++)
        for (h = 0; h < n; h++)
            for (c = 0; c < qw; c++) {
                float x = q[(size_t)b * d.q_stride + (maps ? 0 : (size_t)h * dh) + c];
                qx[((size_t)b * n + h) * qw + c] = (maps == 1 || maps == 3 ? x * mul[h * qw + c] : x) + (maps == 2 ? add[h * dh + c] : 0.0f);
            }
    if (maps == 1 || maps == 2)
        for (j = 0; j < (int)nk; j++)
            for (h = 0; h < n; h++)
                for (c = 0; c < dh; c++) {
                    kx[((size_t)j * n + h) * dh + c] = k[(size_t)j * kw + c] + (maps == 2 ? add[n * dh + h * dh + c] : 0.0f);
                    vx[((size_t)j * n + h) * dh + c] = v[(size_t)j * dh + c] * (maps == 1 ? vmul[h * dh + c] : 1.0f) +
                                                        (maps == 2 ? add[2 * n * dh + h * dh + c] : 0.0f);
                }
    mhe_attn_ref_fwd(&r, o1, probs, qx, maps == 1 || maps == 2 ? kx : k, maps == 1 || maps == 2 ? vx : v);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    mhe__attn_one(&d, o2, lse2, q, k, v);
#ifdef _OPENMP
    omp_set_num_threads(2);
#endif
    mhe__attn_one(&d, o3, lse3, q, k, v);
    e_o = test_max_rel_err(o2, o1, (long)B * n * dh, 1.0);
    if (maps != 3) { /* the fused core takes the same maps and gives the lse */
        OK(mhe_attn_fused_fwd(&d, o1, lse1, q, k, v));
        e_l = test_max_rel_err(lse2, lse1, (long)B * n, 1.0);
    }
    CHECK(e_o < 1e-5 && e_l < 1e-5, "decoding core != reference (B%d n%d kv%d Tk%d d%d maps%d W%d): out %.2g lse %.2g",
          B, n, nkv, Tk, dh, maps, W, e_o, e_l);
    CHECK(!memcmp(o2, o3, (size_t)B * n * dh * 4) && !memcmp(lse2, lse3, (size_t)B * n * 4),
          "decoding core: 1 and 2 threads differ (B%d n%d kv%d Tk%d d%d maps%d)", B, n, nkv, Tk, dh, maps);
    free(q); free(k); free(v); free(mul); free(add); free(vmul); free(qx); free(kx); free(vx);
    free(o1); free(o2); free(o3); free(probs); free(lse1); free(lse2); free(lse3);
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
    one_vs_ref(2, 8, 8, 300, 32, 0, 0);   /* MHA: neighbouring heads in one pass, 5 key tiles, 2 threads */
    one_vs_ref(1, 8, 8, 700, 32, 0, 0);   /* one MHA sequence, long: the keys split in two halves */
    one_vs_ref(1, 8, 1, 600, 64, 1, 0);   /* one MHE-MUL sequence, long: split, shared kernels */
    one_vs_ref(1, 12, 1, 150, 12, 0, 0);  /* MQA: passes of 8 + 4 heads, d_h not a multiple of 8 */
    one_vs_ref(2, 12, 3, 200, 16, 0, 0);  /* GQA: groups of 4 heads, padded lanes */
    one_vs_ref(1, 8, 1, 257, 64, 1, 0);   /* MHE-MUL maps */
    one_vs_ref(2, 8, 1, 130, 64, 2, 0);   /* MHE-ADD maps: the key map's constant in the lse */
    one_vs_ref(1, 4, 1, 70, 256, 1, 0);   /* widest head: past the shared kernels' tiles */
    one_vs_ref(1, 4, 1, 90, 16, 3, 300);  /* collab: W = 300, queries copied, passes of 3 + 1 */
    one_vs_ref(2, 2, 1, 20, 8, 3, 1500);  /* collab: W past the copy, mixing rows read in place */
    return TEST_END();
}
