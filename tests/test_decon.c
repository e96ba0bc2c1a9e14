/* The kinds of "deconstructing attention" (thesis ch. 4) and FNet: the FFT
   against a direct DFT; finite-difference gradient checks of whole models
   (decoder, encoder, encoder-decoder, padded, with dropout); linear-time
   paths equal to the reference paths; the recurrent forms (decoding with an
   O(1) state) equal to the parallel causal forms; padding invisible; the
   hybrid layouts of Table 4.11; skip; parameter counts; the fixed stream;
   config errors; indicators; the cost tables and cache sizes of Table 4.8. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#define MHE_COSTS_IMPLEMENTATION
#include "../tools/cli/mhe_costs.h"   /* the thesis cost tables: a tool header */
#include <stdlib.h>

static mhe_config tiny(const char *extra) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=11\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\ninit_std=0.3\nfixed_seq=ids:3 1 4 1 5 9 2 6\n";
    OK(mhe_config_parse(&c, base, strlen(base), err));
    if (extra && mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) printf("bad test config: %s\n", err);
    return c;
}

/* B x 7 random tokens and targets (B <= 3), a source of 6; padded: sequence 1 shorter */
typedef struct { mhe_batch b; int tok[24], tgt[24], src[24], len[3], slen[3]; } tbatch;

static void make_batch(tbatch *tb, const mhe_config *c, int B, int T, int Ts, int pad, uint64_t seed) {
    mhe_rng r;
    int i;
    memset(tb, 0, sizeof *tb);
    mhe_rng_seed(&r, seed);
    for (i = 0; i < B * T; i++) { tb->tok[i] = (int)mhe_rng_below(&r, (uint32_t)c->vocab_size); tb->tgt[i] = (int)mhe_rng_below(&r, (uint32_t)c->vocab_size); }
    for (i = 0; i < B * Ts; i++) tb->src[i] = (int)mhe_rng_below(&r, (uint32_t)c->vocab_size);
    tb->tgt[2] = -1;
    for (i = 0; i < B; i++) { tb->len[i] = T; tb->slen[i] = Ts; }
    tb->b.B = B; tb->b.T = T; tb->b.tokens = tb->tok; tb->b.targets = tb->tgt;
    if (pad) { tb->len[1] = T - 3; tb->slen[1] = Ts - 2; tb->b.lengths = tb->len; }
    if (c->arch == MHE_ARCH_ENCDEC) { tb->b.Ts = Ts; tb->b.src = tb->src; if (pad) tb->b.src_lengths = tb->slen; }
}

/* d loss / d every parameter tensor (sampled entries) against central differences */
static void gradcheck(const char *extra, int pad) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    tbatch tb;
    int bad, train = c.dropout > 0 || c.attn_dropout > 0;
    float loss;
    double worst;
    mhe_rng_seed(&r, 9);
    if (mhe_model_init(&m, &c, 4, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", extra, m.err); return; }
    make_batch(&tb, &c, 2, 7, 6, pad, 3);
    m.training = train; m.dropout_seed = 77;   /* the same dropout masks in every pass */
    mhe_model_zero_grad(&m);
    CHECK(mhe_model_forward_batch(&m, &tb.b, &loss) == MHE_OK && mhe_model_backward(&m) == MHE_OK, "forward/backward [%s]: %s", extra, m.err);
    bad = test_model_gradcheck(&m, test_loss_batch, &tb.b, &r, 5, 5, NULL, &worst, NULL);
    CHECK(bad == 0, "model gradient check [%s]%s: %d tensors off, worst %.3g", extra, pad ? " padded" : "", bad, worst);
    mhe_model_free(&m);
}

/* fused_attention=1 (linear-time Taylor and Non-approximate) against =0 (the probabilities materialised) */
static void fused_equals_reference(const char *extra, int pad) {
    mhe_config c = tiny(extra), c2;
    mhe_model a, b;
    tbatch tb;
    float la, lb;
    double eg;
    make_batch(&tb, &c, 3, 8, 7, pad, 2);
    c2 = c; c2.fused_attention = 0;
    OK(mhe_model_init(&a, &c, 7, NULL));
    OK(mhe_model_init(&b, &c2, 7, NULL));
    OK(mhe_model_forward_batch(&a, &tb.b, &la)); OK(mhe_model_backward(&a));
    OK(mhe_model_forward_batch(&b, &tb.b, &lb)); OK(mhe_model_backward(&b));
    eg = test_max_rel_err(a.grad_data, b.grad_data, (long)a.n_params, 1e-3);
    CHECK(fabs(la - lb) < 1e-5 && eg < 1e-3, "linear-time path equals the reference [%s%s]: loss %g vs %g, grads %.3g", extra, pad ? " padded" : "", la, lb, eg);
    mhe_model_free(&a); mhe_model_free(&b);
}

/* decoding token by token (recurrent states, precomputed maps, K/V caches) equals the parallel causal forward */
static void decode_equals_forward(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_kv_cache kv;
    tbatch tb;
    int round;
    double worst = 0;
    make_batch(&tb, &c, 1, 8, 6, 0, 5);
    tb.b.targets = NULL;
    if (mhe_model_init(&m, &c, 3, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", extra, m.err); return; }
    CHECK(mhe_kv_cache_init(&kv, &m, 8, NULL) == MHE_OK, "kv cache init");
    if (c.arch == MHE_ARCH_ENCDEC) CHECK(mhe_kv_cache_encode(&m, &kv, tb.src, 6) == MHE_OK, "encode: %s", m.err);
    OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    for (round = 0; round < 2; round++) {   /* twice: a second sequence starts from fresh states */
        double e;
        kv.len = 0;
        e = test_decode_vs_forward(&m, &kv, tb.tok, 8);
        CHECK(e >= 0, "decode [%s]: %s", extra, m.err);
        if (e < 0 || e > worst) worst = e < 0 ? INFINITY : e;
    }
    CHECK(worst < 1e-4, "decoding equals the full forward [%s]: %.3g", extra, worst);
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
}

/* causal kinds: changing the last tokens leaves the logits of the earlier ones as they were */
static void causal(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    tbatch tb;
    float keep[8 * 11];
    int V = c.vocab_size;
    make_batch(&tb, &c, 1, 8, 6, 0, 4);
    tb.b.targets = NULL;
    OK(mhe_model_init(&m, &c, 8, NULL));
    OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    memcpy(keep, m.acts.logits, sizeof(float) * 8 * V);
    tb.tok[5] = (tb.tok[5] + 1) % V; tb.tok[7] = (tb.tok[7] + 3) % V;
    OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    CHECK(memcmp(keep, m.acts.logits, sizeof(float) * 5 * V) == 0 && memcmp(keep + 5 * V, m.acts.logits + 5 * V, sizeof(float) * V) != 0,
          "causal [%s]: tokens 5.. change nothing before position 5 (and position 5 itself)", extra);
    mhe_model_free(&m);
}

/* the real positions of a padded sequence see the same as the sequence alone */
static void padding_invisible(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    tbatch tb;
    int V = c.vocab_size, T = 8, t;
    float keep[8 * 11];
    double worst = 0;
    mhe_batch one;
    make_batch(&tb, &c, 3, T, 7, 1, 6);
    tb.b.targets = NULL;
    OK(mhe_model_init(&m, &c, 8, NULL));
    CHECK(mhe_model_forward_batch(&m, &tb.b, NULL) == MHE_OK, "padded forward: %s", m.err);
    memcpy(keep, m.acts.logits + (size_t)T * V, sizeof(float) * (size_t)tb.len[1] * V);
    memset(&one, 0, sizeof one);
    one.B = 1; one.T = tb.len[1]; one.tokens = tb.tok + T;
    if (c.arch == MHE_ARCH_ENCDEC) { one.Ts = tb.slen[1]; one.src = tb.src + 7; }
    CHECK(mhe_model_forward_batch(&m, &one, NULL) == MHE_OK, "unpadded forward: %s", m.err);
    for (t = 0; t < tb.len[1]; t++) {
        double e = test_max_rel_err(keep + (size_t)t * V, m.acts.logits + (size_t)t * V, V, 1.0);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-5, "padding is invisible [%s]: %.3g", extra, worst);
    mhe_model_free(&m);
}

static void fft_known(void) {
    static const int lens[] = { 1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 31, 64, 100, 128, 255 };
    double re[255], im[255], r0[255], i0[255], *work;
    int li, n, j, k, ok = 1;
    double worst = 0;
    mhe_rng r;
    mhe_rng_seed(&r, 1);
    work = (double *)malloc(mhe_fft_work_len(255) * sizeof(double));
    for (li = 0; li < (int)(sizeof lens / sizeof lens[0]); li++) {
        n = lens[li];
        for (j = 0; j < n; j++) { r0[j] = re[j] = mhe_rng_normal(&r); i0[j] = im[j] = mhe_rng_normal(&r); }
        mhe_fft(re, im, n, 0, work);
        for (k = 0; k < n; k++) {   /* the DFT by its definition */
            double sr = 0, si = 0, e;
            for (j = 0; j < n; j++) {
                double a = -6.283185307179586 * (double)((long)j * k % n) / n;
                sr += r0[j] * cos(a) - i0[j] * sin(a);
                si += r0[j] * sin(a) + i0[j] * cos(a);
            }
            e = fabs(sr - re[k]) + fabs(si - im[k]);
            if (e > worst) worst = e;
        }
        mhe_fft(re, im, n, 1, work);   /* the inverse, times n */
        for (j = 0; j < n; j++) if (fabs(re[j] / n - r0[j]) + fabs(im[j] / n - i0[j]) > 1e-9) ok = 0;
    }
    CHECK(worst < 1e-9, "FFT (radix-2 and Bluestein) equals the DFT for lengths 1..255: %.3g", worst);
    CHECK(ok, "inverse FFT undoes the FFT");
    CHECK(mhe_fft_work_len(64) == 1 && mhe_fft_work_len(100) >= 4 * 256 + 200, "work sizes");
    free(work);
}

/* fnet's mixing is Re(F_L X F_C) = C_L X C_C - S_L X S_C (cos and sin matrices) */
static void fnet_known(void) {
    enum { L = 5, C = 6 };
    float x[L * C], y[L * C];
    double *work = (double *)malloc(mhe__fnet_work(L, C) * sizeof(double)), worst = 0;
    int i, t, c, j, k;
    mhe_rng r;
    mhe_rng_seed(&r, 2);
    for (i = 0; i < L * C; i++) x[i] = mhe_rng_normal(&r);
    mhe__fnet_apply(x, y, 1, L, C, NULL, work, 0);
    for (t = 0; t < L; t++)
        for (c = 0; c < C; c++) {
            double v = 0;
            for (j = 0; j < L; j++)
                for (k = 0; k < C; k++) {
                    double a = 6.283185307179586 * t * j / L, b = 6.283185307179586 * k * c / C;
                    v += cos(a) * x[j * C + k] * cos(b) - sin(a) * x[j * C + k] * sin(b);
                }
            if (fabs(v - y[t * C + c]) > worst) worst = fabs(v - y[t * C + c]);
        }
    CHECK(worst < 1e-4, "fnet = C X C - S X S: %.3g", worst);
    free(work);
}

/* the recurrent Non-approximate form (eq. 4.18) against its definition (eq. 4.7) */
static void nonapprox_recurrence(void) {
    mhe_attn_dims d;
    enum { T = 9, DH = 4 };
    float q[T * DH], k[T * DH], v[T * DH], o[T * DH], lse[T];
    double worst = 0;
    int i, t, j, c;
    mhe_rng r;
    mhe_rng_seed(&r, 4);
    for (i = 0; i < T * DH; i++) { q[i] = 3 * mhe_rng_normal(&r); k[i] = 3 * mhe_rng_normal(&r); v[i] = mhe_rng_normal(&r); }
    memset(&d, 0, sizeof d);
    d.B = 1; d.n_heads = d.n_kv_heads = 1; d.Tq = d.Tk = T; d.d_head = DH; d.q_stride = d.k_stride = d.v_stride = d.o_stride = DH;
    d.causal = 1; d.scale = 0.5f;
    mhe__nonapprox_lin_fwd(&d, o, lse, q, k, v);
    for (t = 0; t < T; t++) {
        double num[DH] = { 0 }, den = 0;
        for (j = 0; j <= t; j++) {
            double s = 0, e;
            for (c = 0; c < DH; c++) s += q[j * DH + c] / (1 + exp(-q[j * DH + c])) * k[j * DH + c];
            e = exp(0.5 * s);
            den += e;
            for (c = 0; c < DH; c++) num[c] += e * v[j * DH + c];
        }
        for (c = 0; c < DH; c++) if (fabs(num[c] / den - o[t * DH + c]) > worst) worst = fabs(num[c] / den - o[t * DH + c]);
    }
    CHECK(worst < 1e-5, "nonapprox recurrence equals softmax over time of SiLU(q).k: %.3g", worst);
}

/* the Taylor weights: phi(q).phi(k) = 1 + s + s^2/2, s = scale q.k */
static void taylor_features(void) {
    enum { DH = 5 };
    float q[DH], k[DH], pq[64], pk[64];
    double s = 0, dot = 0;
    int i;
    mhe_rng r;
    mhe_rng_seed(&r, 6);
    for (i = 0; i < DH; i++) { q[i] = mhe_rng_normal(&r); k[i] = mhe_rng_normal(&r); s += q[i] * k[i]; }
    s *= 0.3;
    mhe__taylor_phi(q, DH, sqrtf(0.3f), pq);
    mhe__taylor_phi(k, DH, sqrtf(0.3f), pk);
    for (i = 0; i < mhe__taylor_features(DH); i++) dot += (double)pq[i] * pk[i];
    CHECK(mhe__taylor_features(DH) == 21 && fabs(dot - (1 + s + s * s / 2)) < 1e-5, "Taylor features: %g vs %g", dot, 1 + s + s * s / 2);
}

/* the linear-time cores against the reference cores on sequences of several
   chunks (causal, bidirectional, padded; Taylor also as cross-attention, Tq != Tk) */
static void long_cores(void) {
    static const struct { int causal, Tq, Tk, pad, nonapprox; } cases[] = {
        { 1, 75, 75, 0, 0 }, { 1, 75, 75, 1, 0 }, { 0, 70, 70, 1, 0 }, { 0, 37, 50, 1, 0 }, { 1, 33, 33, 0, 0 },
        { 1, 75, 75, 1, 1 }, { 0, 70, 70, 1, 1 },
    };
    enum { B = 2, N = 2, DH = 5, TM = 75 };
    int ci;
    for (ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++) {
        mhe_attn_dims d;
        static float q[B * TM * N * DH], k[B * TM * N * DH], v[B * TM * N * DH], g[B * TM * N * DH];
        static float o1[B * TM * N * DH], o2[B * TM * N * DH], st1[B * N * TM], probs[B * N * TM * TM];
        static float dq1[B * TM * N * DH], dk1[B * TM * N * DH], dv1[B * TM * N * DH], dq2[B * TM * N * DH], dk2[B * TM * N * DH], dv2[B * TM * N * DH];
        float *slots;
        int lens[B], i, nq, nk;
        double e;
        mhe_rng r;
        mhe_rng_seed(&r, 10 + ci);
        memset(&d, 0, sizeof d);
        d.B = B; d.n_heads = d.n_kv_heads = N; d.Tq = cases[ci].Tq; d.Tk = cases[ci].Tk; d.d_head = DH;
        d.q_stride = d.k_stride = d.v_stride = d.o_stride = N * DH; d.causal = cases[ci].causal; d.scale = 0.45f;
        lens[0] = d.Tk; lens[1] = d.Tk - 19;
        if (cases[ci].pad) d.kv_len = lens;
        nq = B * d.Tq * N * DH; nk = B * d.Tk * N * DH;
        for (i = 0; i < nq; i++) { q[i] = 1.5f * mhe_rng_normal(&r); g[i] = mhe_rng_normal(&r); }
        for (i = 0; i < nk; i++) { k[i] = 1.5f * mhe_rng_normal(&r); v[i] = mhe_rng_normal(&r); }
        memset(dq1, 0, sizeof dq1); memset(dk1, 0, sizeof dk1); memset(dv1, 0, sizeof dv1);
        memset(dq2, 0, sizeof dq2); memset(dk2, 0, sizeof dk2); memset(dv2, 0, sizeof dv2);
        slots = (float *)malloc((size_t)mhe__taylor_slots(B, N, DH) * mhe__taylor_slot(DH) * sizeof(float));
        if (cases[ci].nonapprox) {
            mhe__nonapprox_lin_fwd(&d, o1, st1, q, k, v);
            mhe__nonapprox_lin_bwd(&d, dq1, dk1, dv1, g, o1, st1, q, k, v);
            mhe__nonapprox_ref_fwd(&d, o2, probs, q, k, v);
            mhe__nonapprox_ref_bwd(&d, dq2, dk2, dv2, g, o2, probs, q, k, v);
        } else {
            mhe__taylor_lin_fwd(&d, o1, st1, q, k, v, slots);
            mhe__taylor_lin_bwd(&d, dq1, dk1, dv1, g, o1, st1, q, k, v, slots);
            mhe__taylor_ref_fwd(&d, o2, probs, q, k, v);
            mhe__taylor_ref_bwd(&d, dq2, dk2, dv2, g, probs, q, k, v);
        }
        e = test_max_rel_err(o1, o2, nq, 1e-2);
        e = fmax(e, test_max_rel_err(dq1, dq2, nq, 1e-2));
        e = fmax(e, test_max_rel_err(dk1, dk2, nk, 1e-2));
        e = fmax(e, test_max_rel_err(dv1, dv2, nk, 1e-2));
        CHECK(e < 2e-4, "%s linear-time core = reference over %d x %d (%s%s): %.3g", cases[ci].nonapprox ? "nonapprox" : "taylor",
              d.Tq, d.Tk, d.causal ? "causal" : "bidirectional", cases[ci].pad ? ", padded" : "", e);
        free(slots);
    }
}

/* mhe_attn_param_count equals the tensors a built model has, for every new kind */
static void param_counts(void) {
    int kind;
    for (kind = MHE_ATTN_MLP; kind <= MHE_ATTN_LINEAR; kind++) {
        mhe_config c = tiny("n_layers=1\narch=encoder\n");
        mhe_model m;
        int64_t built = 0, i, bias;
        c.attn[0] = kind;
        for (bias = 0; bias < 2; bias++) {
            c.bias = (int)bias;
            CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "init %s: %s", mhe_attn_kind_name(kind), m.err);
            for (built = 0, i = 0; i < m.n_tensors; i++) if (strstr(m.params[i].name, ".attn.")) built += m.params[i].size;
            CHECK(built == mhe_attn_param_count(&c, kind, 1, (int)bias), "%s: built %lld vs formula %lld", mhe_attn_kind_name(kind),
                  (long long)built, (long long)mhe_attn_param_count(&c, kind, 1, (int)bias));
            mhe_model_free(&m);
        }
    }
    {   /* matched to mha: exactly when 3 divides n d_h, else within d_m; fnet none; linear L^2 + d^2 */
        mhe_config c = mhe_config_default();
        c.d_model = 96; c.n_heads = 4;   /* n d_h = 96 */
        CHECK(mhe_attn_param_count(&c, MHE_ATTN_MLP, 1, 0) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 0), "mlp = mha at n d_h = 96");
        c.d_model = 128;
        CHECK(llabs((long long)(mhe_attn_param_count(&c, MHE_ATTN_MLP, 1, 0) - mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 0))) <= 128,
              "mlp within d_m of mha at 128: %lld vs %lld", (long long)mhe_attn_param_count(&c, MHE_ATTN_MLP, 1, 0),
              (long long)mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 0));
        CHECK(mhe_attn_param_count(&c, MHE_ATTN_TAYLOR, 1, 1) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1) &&
              mhe_attn_param_count(&c, MHE_ATTN_NONAPPROX, 1, 1) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1) &&
              mhe_attn_param_count(&c, MHE_ATTN_RNDEMB_QK, 1, 1) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1) &&
              mhe_attn_param_count(&c, MHE_ATTN_FIXEDSEQ_QK, 1, 1) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1) &&
              mhe_attn_param_count(&c, MHE_ATTN_STATICEMB_QK, 1, 1) == mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1), "the Q/K/V kinds count as mha");
        CHECK(mhe_attn_param_count(&c, MHE_ATTN_FNET, 1, 1) == 0, "fnet has no parameters");
        CHECK(mhe_attn_param_count(&c, MHE_ATTN_LINEAR, 1, 1) == (int64_t)256 * 256 + 128 * 128, "linear: L^2 + d^2");
    }
}

/* Table 4.11 for 24 layers: the layers that keep standard attention (1-indexed), typed from the table */
static void layouts(void) {
    static const struct { const char *name; int ids[13]; } t411[] = {
        { "even", { 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24 } }, { "odd", { 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23 } },
        { "top", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 } }, { "middle", { 1, 2, 3, 4, 5, 6, 19, 20, 21, 22, 23, 24 } },
        { "bottom", { 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24 } }, { "25%", { 4, 8, 12, 16, 20, 24 } },
        { "first", { 1 } }, { "last", { 24 } }, { "bilateral", { 1, 24 } },
    };
    int i, l, j;
    char err[MHE_ERR_LEN], v[64];
    for (i = 0; i < 9; i++) {
        mhe_config c = mhe_config_default();
        int ok = 1;
        c.n_layers = 24;
        snprintf(v, sizeof v, "nonapprox@%s", t411[i].name);
        CHECK(mhe_config_set(&c, "attn", v, err) == MHE_OK && mhe_config_validate(&c, err) == MHE_OK, "attn=%s: %s", v, err);
        for (l = 0; l < 24; l++) {
            int std = 0;
            for (j = 0; j < 13 && t411[i].ids[j]; j++) std |= t411[i].ids[j] == l + 1;
            if (mhe_config_layer_kind(&c, l) != (std ? MHE_ATTN_MHA : MHE_ATTN_NONAPPROX)) ok = 0;
        }
        CHECK(ok, "layout %s keeps mha exactly in Table 4.11's layers", t411[i].name);
    }
    {   /* the layout key, written into the model's list; a reloaded model has the same list */
        mhe_config c = tiny("attn=rndemb-qk\nlayout=even\nn_layers=4\n");
        mhe_model a, b;
        size_t size = 0, w = 0;
        void *buf;
        int tok[6] = { 1, 2, 3, 4, 5, 6 };
        float la, lb;
        CHECK(mhe_model_init(&a, &c, 3, NULL) == MHE_OK, "init with layout: %s", a.err);
        CHECK(a.cfg.attn[0] == MHE_ATTN_RNDEMB_QK && a.cfg.attn[1] == MHE_ATTN_MHA && a.cfg.attn[2] == MHE_ATTN_RNDEMB_QK &&
              a.cfg.attn[3] == MHE_ATTN_MHA && a.cfg.attn[4] == -1, "the model's list is rndemb-qk,mha,rndemb-qk,mha");
        OK(mhe_checkpoint_size(&a, NULL, &size));
        buf = malloc(size);
        OK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &w));
        CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK && memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0 &&
              memcmp(a.param_data, b.param_data, (size_t)a.n_params * 4) == 0, "layout checkpoint round trip: %s", b.err);
        OK(mhe_model_forward(&a, tok, tok, 1, 6, &la));
        OK(mhe_model_forward(&b, tok, tok, 1, 6, &lb));
        CHECK(la == lb, "reloaded rndemb-qk model (eps from fixed_seed) gives the same loss: %g vs %g", la, lb);
        free(buf);
        mhe_model_free(&a); mhe_model_free(&b);
    }
}

/* every new kind survives a checkpoint round trip (config, weights, the same loss) */
static void checkpoints(void) {
    static const char *cfgs[] = {
        "attn=mlp,taylor\n", "attn=nonapprox,staticemb-qk\n", "attn=fixedseq-qk\nfixed_seq=ids:1 2 3 4\n",
        "attn=fixedseq-qk\nvocab_size=256\nmax_seq_len=16\nfixed_seq=in the beginning\n", "arch=encoder\nattn=fnet,linear\n",
        "arch=encdec\nenc_layers=1\nenc_attn=fnet\ncross_attn=taylor,staticemb-qk\nattn=staticemb-qk,mlp\n",
    };
    int i;
    for (i = 0; i < (int)(sizeof cfgs / sizeof cfgs[0]); i++) {
        mhe_config c = tiny(cfgs[i]);
        mhe_model a, b;
        tbatch tb;
        size_t size = 0, w = 0;
        void *buf;
        float la, lb;
        make_batch(&tb, &c, 2, 6, 5, 0, 1);
        CHECK(mhe_model_init(&a, &c, 5, NULL) == MHE_OK, "init [%s]: %s", cfgs[i], a.err);
        OK(mhe_checkpoint_size(&a, NULL, &size));
        buf = malloc(size);
        OK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &w));
        CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK && memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0, "round trip [%s]: %s", cfgs[i], b.err);
        OK(mhe_model_forward_batch(&a, &tb.b, &la));
        OK(mhe_model_forward_batch(&b, &tb.b, &lb));
        CHECK(la == lb, "same loss after reload [%s]", cfgs[i]);
        free(buf);
        mhe_model_free(&a); mhe_model_free(&b);
    }
}

/* bad configs fail at config time, naming the problem */
static void config_errors(void) {
    static const struct { const char *text, *want; } bad[] = {
        { "attn=fnet\n", "cannot be causal" },                                   /* fnet asked to be causal */
        { "attn=mha,linear\n", "cannot be causal" },
        { "arch=encdec\nenc_layers=1\nattn=fnet\n", "cannot be causal" },        /* the decoder of encdec */
        { "arch=encdec\nenc_layers=1\ncross_attn=linear\n", "itself" },
        { "arch=encdec\nenc_layers=1\ncross_attn=fnet\n", "itself" },
        { "arch=encdec\nenc_layers=1\ncross_attn=mlp\n", "ignore the source" },
        { "arch=encdec\nenc_layers=1\ncross_attn=nonapprox\n", "own query and key" },
        { "arch=encdec\nenc_layers=1\nenc_attn=rndemb-qk\n", "fixed stream" },
        { "attn=rndemb-qk,fixedseq-qk\n", "one fixed stream" },
        { "attn=mlp,taylor,nonapprox\n", "n_layers" },                            /* a hybrid list of 3 for 2 layers */
        { "attn=fixedseq-qk\nfixed_seq=ids:1 2 3 4 5 6 7 8 9\n", "max_seq_len" }, /* 9 tokens, max_seq_len 8 */
        { "attn=fixedseq-qk\nvocab_size=256\nfixed_seq=longer than eight\n", "max_seq_len" },
        { "attn=fixedseq-qk\nfixed_seq=ids:1 2 x\n", "ids:" },
        { "attn=fixedseq-qk\nfixed_seq=ids:1 20\n", "vocabulary" },
        { "attn=fixedseq-qk\nfixed_seq=abc\n", "vocabulary" },                   /* bytes >= vocab_size 11 */
        { "attn=nonapprox@sideways\n", "sideways" },
        { "arch=encdec\nenc_layers=1\nenc_attn=mlp@even\n", "only attn" },
        { "layout=odd\nattn=fnet\n", "cannot be causal" },                       /* simple layers of the layout checked */
    };
    int i;
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        mhe_config c = mhe_config_default();
        char err[MHE_ERR_LEN] = "";
        const char *base = "vocab_size=11\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\n";
        mhe_status st = mhe_config_parse(&c, base, strlen(base), err);
        if (st == MHE_OK) st = mhe_config_parse(&c, bad[i].text, strlen(bad[i].text), err);
        if (st == MHE_OK) st = mhe_config_validate(&c, err);
        CHECK(st == MHE_ERR_CONFIG && strstr(err, bad[i].want), "config '%s' rejected naming '%s': %s", bad[i].text, bad[i].want, err);
    }
    {   /* the default fixed text is cut to max_seq_len, never an error */
        mhe_config c = tiny("attn=fixedseq-qk\nvocab_size=256\nfixed_seq=\n");
        char err[MHE_ERR_LEN];
        CHECK(mhe_config_validate(&c, err) == MHE_OK, "default fixed text: %s", err);
    }
}

/* skip: the non-standard layers' attention sublayers become the identity */
static void skip(void) {
    mhe_config c = tiny("attn=nonapprox,mha,taylor\nn_layers=3\n");
    mhe_model a, b;
    tbatch tb;
    float la, lb, lc;
    int l;
    mhe_kv_cache kv;
    double worst = 0;
    make_batch(&tb, &c, 2, 7, 6, 0, 8);
    OK(mhe_model_init(&a, &c, 2, NULL));
    OK(mhe_model_init(&b, &c, 2, NULL));
    for (l = 0; l < 3; l += 2) {   /* pre-norm: h + W^O(...) with W^O = 0 (and no bias) is h */
        memset(b.layers[l].attn.wo->data, 0, (size_t)b.layers[l].attn.wo->size * 4);
        memset(b.layers[l].attn.bo->data, 0, (size_t)b.layers[l].attn.bo->size * 4);
    }
    a.skip_attn = 1 | 4;
    OK(mhe_model_forward_batch(&a, &tb.b, &la));
    OK(mhe_model_forward_batch(&b, &tb.b, &lb));
    CHECK(fabs(la - lb) < 1e-6, "skip = a branch that adds nothing: %g vs %g", la, lb);
    a.skip_attn = 0;
    OK(mhe_model_forward_batch(&a, &tb.b, &lc));
    CHECK(fabs(lc - la) > 1e-4, "without skip the loss differs: %g vs %g", lc, la);
    a.skip_attn = 1 | 4;
    tb.b.B = 1; tb.b.targets = NULL;
    OK(mhe_model_forward_batch(&a, &tb.b, NULL));
    OK(mhe_kv_cache_init(&kv, &a, 8, NULL));
    for (l = 0; l < 7; l++) {
        double e;
        OK(mhe_decode_step(&a, &kv, tb.tok[l]));
        e = test_max_rel_err(kv.logits, a.acts.logits + (size_t)l * c.vocab_size, c.vocab_size, 1.0);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-5, "decoding with skip equals the forward with skip: %.3g", worst);
    mhe_kv_cache_free(&kv);
    mhe_model_free(&a); mhe_model_free(&b);
    {   /* post-norm: the sublayer's output is its input, and the gradient is still right */
        mhe_config p = tiny("attn=mlp,mha\nnorm_position=post\n");
        mhe_model m;
        OK(mhe_model_init(&m, &p, 2, NULL));
        m.skip_attn = 1;
        make_batch(&tb, &p, 2, 7, 6, 0, 8);
        OK(mhe_model_forward_batch(&m, &tb.b, &la));
        CHECK(memcmp(m.acts.layer[0].sub[0].nrm, m.acts.layer[0].in, (size_t)14 * p.d_model * 4) == 0, "post-norm skip: output = input");
        mhe_model_free(&m);
    }
}

/* rndemb-qk / fixedseq-qk maps do not depend on the input; staticemb-qk's do, but not on the layer's hidden state */
static void fixed_maps(void) {
    const char *kinds[2] = { "attn=mha,rndemb-qk\nfused_attention=0\n", "attn=taylor,fixedseq-qk\nfused_attention=0\n" };
    int i;
    for (i = 0; i < 2; i++) {
        mhe_config c = tiny(kinds[i]);
        mhe_model m;
        tbatch t1, t2;
        float p1[8 * 8], p2[8 * 8], q1[8 * 8], q2[8 * 8];
        OK(mhe_model_init(&m, &c, 2, NULL));
        make_batch(&t1, &c, 1, 8, 6, 0, 1);
        make_batch(&t2, &c, 1, 8, 6, 0, 2);
        OK(mhe_model_forward_batch(&m, &t1.b, NULL));
        mhe_attn_probs(&m, 1, 2, p1); mhe_attn_probs(&m, 0, 0, q1);
        OK(mhe_model_forward_batch(&m, &t2.b, NULL));
        mhe_attn_probs(&m, 1, 2, p2); mhe_attn_probs(&m, 0, 0, q2);
        CHECK(memcmp(p1, p2, sizeof p1) == 0 && memcmp(q1, q2, sizeof q1) != 0, "[%s] the fixed layer's map is the same for two inputs, layer 0's is not", kinds[i]);
        mhe_model_free(&m);
    }
}

static void indicators_known(void) {
    enum { L = 4 };
    float uni[L * L], eye[L * L], sink[L * L], heads[2 * L * L];
    double o[MHE_IND_COUNT];
    int t, j;
    memset(uni, 0, sizeof uni); memset(eye, 0, sizeof eye); memset(sink, 0, sizeof sink);
    for (t = 0; t < L; t++) { for (j = 0; j <= t; j++) uni[t * L + j] = 1.0f / (t + 1); eye[t * L + t] = 1; sink[t * L] = 1; }
    mhe_attn_map_indicators(uni, L, L, 1, o);   /* uniform causal: row entropy log(t+1) */
    CHECK(fabs(o[MHE_IND_ENTROPY] - (log(2.0) + log(3.0) + log(4.0)) / 4) < 1e-6 && fabs(o[MHE_IND_ENTROPY_N] - 1) < 1e-6, "uniform map entropy");
    CHECK(fabs(o[MHE_IND_CONC] - sqrt(1 + 0.5 + 1.0 / 3 + 0.25)) < 1e-6, "uniform map Frobenius norm");
    CHECK(fabs(o[MHE_IND_SINK] - (1 + 0.5 + 1.0 / 3 + 0.25) / 4) < 1e-6, "uniform map sink");
    CHECK(fabs(o[MHE_IND_LOCFOC1] - (0.5 + 1.0 / 3 + 0.25) / 3) < 1e-6 && fabs(o[MHE_IND_LOCFOC3] - 0.25) < 1e-6, "uniform map local focus");
    mhe_attn_map_indicators(eye, L, L, 1, o);   /* each token sees itself: mlp */
    CHECK(o[MHE_IND_ENTROPY] == 0 && fabs(o[MHE_IND_CONC_N] - 1) < 1e-9 && o[MHE_IND_LOCFOC0] == 1 && o[MHE_IND_LOCFOC1] == 0 &&
          fabs(o[MHE_IND_SINK] - 0.25) < 1e-9, "identity map");
    mhe_attn_map_indicators(sink, L, L, 1, o);
    CHECK(o[MHE_IND_SINK] == 1 && o[MHE_IND_ENTROPY] == 0, "all on the first token: sink 1");
    memcpy(heads, uni, sizeof uni); memcpy(heads + L * L, uni, sizeof uni);
    CHECK(mhe_attn_headdiv(heads, 2, L * L, L, L, 1) == 0, "identical heads: HeadDiv 0");
    memcpy(heads + L * L, eye, sizeof eye);   /* std of two values is |a - b| / 2 */
    {
        double want = 0;
        for (t = 0; t < L; t++) for (j = 0; j <= t; j++) want += fabs(uni[t * L + j] - eye[t * L + j]) / 2;
        want *= 2.0 / (L * (L + 1));
        CHECK(fabs(mhe_attn_headdiv(heads, 2, L * L, L, L, 1) - want) < 1e-7, "HeadDiv of two heads: 2/(L(1+L)) sum std");
    }
}

/* indicators of a small model: every layer, fnet/linear without a map, mlp's identity */
static void indicators_model(void) {
    mhe_config c = tiny("arch=encoder\nattn=mha,fnet,mlp,nonapprox\nn_layers=4\n");
    mhe_model m;
    mhe_indicators ind;
    int data[200], i, ok = 1;
    for (i = 0; i < 200; i++) data[i] = (i * 7 + i / 3) % 11;
    OK(mhe_model_init(&m, &c, 1, NULL));
    CHECK(mhe_indicators_eval(&m, data, 200, 4, 8, 3, &ind) == MHE_OK, "indicators: %s", m.err);
    CHECK(ind.sequences == 12 && ind.n_layers == 4 && m.cfg.fused_attention == 1, "3 batches of 4, the model restored");
    CHECK(ind.has_map[1] == 0 && !mhe__is_finite((float)mhe_indicator(&ind, 1, 0, MHE_IND_ENTROPY)), "fnet has no map (NaN)");
    CHECK(mhe_indicator(&ind, 2, -1, MHE_IND_LOCFOC0) == 1 && mhe_indicator(&ind, 2, 1, MHE_IND_HEADDIV) == 0, "mlp: the identity");
    for (i = 0; i < MHE_IND_COUNT; i++) if (!(mhe_indicator(&ind, 0, -1, i) >= 0)) ok = 0;
    CHECK(ok && mhe_indicator(&ind, 0, -1, MHE_IND_ENTROPY_N) > 0.5 && mhe_indicator(&ind, 0, -1, MHE_IND_HEADDIV) > 0,
          "mha at init: near-uniform maps, heads differ: H_norm %.3f HeadDiv %.4f", mhe_indicator(&ind, 0, -1, MHE_IND_ENTROPY_N),
          mhe_indicator(&ind, 0, -1, MHE_IND_HEADDIV));
    mhe_indicators_free(&ind);
    mhe_model_free(&m);
}

/* Table 4.8 at B = 1: what a KV cache holds per layer, in fp32 bytes, is twice the
   table's half-precision bytes where our layer keeps what the table counts */
static void cache_sizes(void) {
    mhe_config c = tiny("attn=mha,mlp,nonapprox,staticemb-qk,rndemb-qk,taylor\nn_layers=6\nmax_seq_len=32\nd_model=24\nn_heads=4\n");
    mhe_model m;
    mhe_kv_cache a, b;
    int L = 16, d = 24, h = 4, dh = 6, F = 1 + 6 + 21;
    OK(mhe_model_init(&m, &c, 1, NULL));
    OK(mhe_kv_cache_init(&a, &m, L, NULL));
    OK(mhe_kv_cache_init(&b, &m, 2 * L, NULL));
    CHECK((double)a.layer_bytes[0] == 2 * mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_MHA, 1, L, d, h, 1), "mha: 4BLd (fp16) = 8Ld bytes");
    CHECK(a.layer_bytes[1] == 0 && mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_MLP, 1, L, d, h, 1) == 0, "mlp: no cache");
    CHECK((double)a.layer_bytes[2] == 2 * mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_NONAPPROX, 1, L, d, h, 1) && a.layer_bytes[2] == b.layer_bytes[2],
          "nonapprox: 2Bd + 4Bh, the same for any length: %zu", a.layer_bytes[2]);
    CHECK((double)a.layer_bytes[3] == 2 * mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_STATICEMB_QK, 1, L, d, h, 1), "staticemb-qk: 4BLd");
    CHECK((double)a.layer_bytes[4] == 2 * (mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_RNDEMB_QK, 1, L, d, h, 1) - 2.0 * L * d) &&
          a.shared_bytes[4] == (size_t)4 * h * L * (L + 1) / 2, "rndemb-qk: V rows per sequence (2BLd), shared maps h L(L+1)/2");
    CHECK(a.layer_bytes[5] == (size_t)4 * h * (F * dh + F) && a.layer_bytes[5] == b.layer_bytes[5] && a.k_width[5] == 0 && a.v_width[5] == 0,
          "taylor: a state of h (F d_h + F) floats, no K/V rows, the same for any length");
    mhe_kv_cache_free(&a); mhe_kv_cache_free(&b);
    mhe_model_free(&m);
}

/* Tables 4.5-4.8: a few values by hand from the printed formulas */
static void cost_tables(void) {
    double B = 2, L = 8, d = 16, h = 4, t = 1;
    char buf[64];
    CHECK(mhe_attn_cost(MHE_COST_PREFILL, MHE_ATTN_MHA, B, L, d, h, t) == 4 * B * L * L * d + 6 * B * L * d * d, "Standard prefill");
    CHECK(mhe_attn_cost(MHE_COST_DECODE, MHE_ATTN_TAYLOR, B, L, d, h, t) == 10 * B * d * d, "Approx. decode");
    CHECK(mhe_attn_cost(MHE_COST_ACT, MHE_ATTN_TAYLOR, B, L, d, h, 2) == 11 * B * L * d / 2 + 3 * B * d * d / (h * 2), "Approx. activations");
    CHECK(mhe_attn_cost(MHE_COST_CACHE, MHE_ATTN_FIXEDSEQ_QK, B, L, d, h, t) == 2 * (B + 1) * L * d, "FixedSeqQK cache 2(B+1)Ld");
    CHECK(mhe_attn_cost(MHE_COST_TIME, MHE_ATTN_FNET, B, L, d, h, t) < 0, "no entry for fnet");
    mhe_attn_cost_formula(MHE_COST_PREFILL, MHE_ATTN_RNDEMB_QK, buf, sizeof buf);
    CHECK(strcmp(buf, "2L^2d + 2BL^2d + 6BLd^2") == 0, "formula text: %s", buf);
    mhe_attn_cost_formula(MHE_COST_ACT, MHE_ATTN_TAYLOR, buf, sizeof buf);
    CHECK(strcmp(buf, "(11BLd + 3Bd^2/h)/t") == 0, "formula text: %s", buf);
}

/* a few steps of training lower the loss for every causal kind and a hybrid */
static void trains(void) {
    static const char *cfgs[] = { "attn=mlp\n", "attn=taylor\n", "attn=nonapprox\n", "attn=rndemb-qk\n", "attn=fixedseq-qk\n",
                                  "attn=staticemb-qk\n", "attn=nonapprox@even\nn_layers=2\n", "arch=encoder\nattn=fnet,linear\n" };
    int data[400], i, s;
    for (i = 0; i < 400; i++) data[i] = "abcabdabeab"[i % 11] - 'a' + (i / 37) % 3;
    for (i = 0; i < (int)(sizeof cfgs / sizeof cfgs[0]); i++) {
        mhe_config c = tiny(cfgs[i]);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m;
        mhe_trainer tr;
        float first = 0, last = 0;
        c.init_std = 0.02f;
        tc.batch = 4; tc.seq_len = 8; tc.steps = 60; tc.lr = 1e-2f; tc.warmup = 5; tc.min_lr = 1e-3f;
        OK(mhe_model_init(&m, &c, 1, NULL));
        OK(mhe_trainer_init(&tr, &m, &tc));
        for (s = 0; s < tc.steps; s++) {
            if (mhe_trainer_step(&tr, data, 400) != MHE_OK) { printf("  %s\n", tr.err); break; }
            if (s < 5) first += tr.last_loss / 5;
            if (s >= tc.steps - 5) last += tr.last_loss / 5;
        }
        CHECK(last < first - 0.3f, "training lowers the loss [%s]: %.3f -> %.3f", cfgs[i], first, last);
        mhe_trainer_free(&tr);
        mhe_model_free(&m);
    }
}

int main(void) {
    static const char *grads[] = {
        "attn=mlp\n", "attn=mlp\nnorm_position=post\nbias=0\n", "attn=taylor\n", "attn=taylor\nfused_attention=0\n",
        "attn=nonapprox\n", "attn=nonapprox\nfused_attention=0\nnorm_position=post\n",
        "attn=rndemb-qk\n", "attn=mha,rndemb-qk\nnorm_position=post\n", "attn=fixedseq-qk\n", "attn=staticemb-qk,fixedseq-qk\nbias=0\n",
        "attn=staticemb-qk\n", "attn=rndemb-qk,staticemb-qk\ndropout=0.1\nattn_dropout=0.2\n",
        "attn=mlp,nonapprox,taylor\nn_layers=3\nnorm=rmsnorm\ntie_embeddings=0\n", "attn=taylor@odd\nn_layers=3\n",
        "arch=encoder\nattn=fnet,linear\n", "arch=encoder\nattn=linear,fnet\nnorm_position=post\n",
        "arch=encoder\nattn=taylor,nonapprox\n", "arch=encoder\nattn=mlp,fixedseq-qk\nfixed_seq=\nvocab_size=200\n",
        "arch=encoder\nattn=staticemb-qk,mlp\nn_classes=2\n",
        "arch=encdec\nenc_layers=2\nenc_attn=fnet,linear\nattn=taylor,staticemb-qk\ncross_attn=taylor,staticemb-qk\n",
        "arch=encdec\nenc_layers=1\nenc_attn=staticemb-qk\nattn=nonapprox,mlp\ncross_attn=staticemb-qk,taylor\nfused_attention=0\nnorm_position=post\n",
    };
    static const char *fused[] = {
        "attn=taylor,nonapprox\n", "attn=nonapprox,taylor\nnorm_position=post\nd_head=5\n", "arch=encoder\nattn=taylor,nonapprox\n",
        "arch=encdec\nenc_layers=1\nenc_attn=taylor\nattn=nonapprox,taylor\ncross_attn=taylor\n",
    };
    static const char *decode[] = {
        "attn=mlp\n", "attn=taylor\n", "attn=nonapprox\n", "attn=rndemb-qk\n", "attn=fixedseq-qk\n", "attn=staticemb-qk\n",
        "attn=mha,rndemb-qk\nnorm_position=post\n", "attn=taylor,nonapprox,fixedseq-qk,mlp\nn_layers=4\n", "attn=nonapprox@even\nn_layers=4\n",
        "attn=taylor\nd_head=5\nfused_attention=0\n",
        "arch=encdec\nenc_layers=1\nattn=taylor,staticemb-qk\ncross_attn=staticemb-qk,taylor\n",
        "arch=encdec\nenc_layers=2\nenc_attn=fnet,mlp\nattn=nonapprox,mlp\ncross_attn=taylor,mha\n",
    };
    static const char *pads[] = {
        "attn=taylor,nonapprox\n", "attn=rndemb-qk,staticemb-qk\n", "arch=encoder\nattn=fnet,linear\n",
        "arch=encoder\nattn=taylor,nonapprox\nfused_attention=0\n", "arch=encoder\nattn=fixedseq-qk,mlp\n",
        "arch=encdec\nenc_layers=1\nenc_attn=linear\ncross_attn=taylor,staticemb-qk\nattn=staticemb-qk,nonapprox\n",
    };
    int i;
    setvbuf(stdout, NULL, _IONBF, 0);
    fft_known();
    fnet_known();
    nonapprox_recurrence();
    taylor_features();
    long_cores();
    for (i = 0; i < (int)(sizeof grads / sizeof grads[0]); i++) gradcheck(grads[i], i % 3 == 0);
    for (i = 0; i < (int)(sizeof fused / sizeof fused[0]); i++) { fused_equals_reference(fused[i], 0); fused_equals_reference(fused[i], 1); }
    for (i = 0; i < (int)(sizeof decode / sizeof decode[0]); i++) decode_equals_forward(decode[i]);
    for (i = 0; i < (int)(sizeof pads / sizeof pads[0]); i++) padding_invisible(pads[i]);
    for (i = 0; i < 9; i++) causal(decode[i]);
    param_counts();
    layouts();
    checkpoints();
    config_errors();
    skip();
    fixed_maps();
    indicators_known();
    indicators_model();
    cache_sizes();
    cost_tables();
    trains();
    return TEST_END();
}
