/* tests/cuda/test_attn.cpp - the device attention cores of mhe_cuda.cuh
   against the CPU's fused core (mhe_attn_fused_fwd / _bwd), forward output
   and every gradient, on shapes that are no multiple of the 32-key tiles:
   shared K/V heads (MQA, GQA), cross-attention (Tq != Tk), padding
   (kv_len), causal and bidirectional, decoding (Tq = 1), per-head maps
   (MHE-MUL stacked, MHE-ADD's query and value maps), collab's wide
   queries, per-head values and key bias, and a head of 130 columns. Run
   by tests/cuda/run.sh in every emulation mode. */
#define MHE_IMPLEMENTATION
#ifndef MHE_CUDA
#define MHE_CUDA
#endif
#include "mhe.h"
#include "tests/test.h"
#include <vector>

static mhe_rng rng;

static std::vector<float> randn(size_t n, float s) {
    std::vector<float> v(n);
    for (auto &x : v)
        x = s * mhe_rng_normal(&rng);
    return v;
}

template <typename T> static T *dev(const std::vector<T> &h) {
    void *d = NULL;
    cudaMalloc(&d, h.size() * sizeof(T) + sizeof(T));
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return (T *)d;
}

static std::vector<float> back(const float *d, size_t n) {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

static double rel(const std::vector<float> &a, const std::vector<float> &b) {
    double m = 0, s = 1e-6;
    for (float x : b)
        s = fabs(x) > s ? fabs(x) : s;
    for (size_t i = 0; i < a.size(); i++) {
        double d = fabs((double)a[i] - b[i]) / s;
        m = d > m || d != d ? (d == d ? d : 1e30) : m;
    }
    return m;
}

enum { PLAIN, MUL, ADDMAP, COLLAB };

static void one(const char *what, int B, int n, int n_kv, int Tq, int Tk, int dh, int causal, int padded, int maps) {
    mhe_attn_dims d;
    memset(&d, 0, sizeof d);
    int dk = maps == COLLAB ? dh + 7 : dh, group = n / n_kv;
    d.B = B;
    d.n_heads = n;
    d.n_kv_heads = maps == PLAIN ? n_kv : 1;
    d.Tq = Tq;
    d.Tk = Tk;
    d.d_head = dh;
    d.causal = causal;
    d.q_offset = Tk - Tq;
    d.scale = 1.0f / sqrtf((float)dh);
    d.q_shared = maps != PLAIN;
    d.q_stride = d.q_shared ? dk : n * dh;
    d.k_stride = maps == COLLAB ? dk + n : d.n_kv_heads * dh;
    d.v_stride = maps == COLLAB ? n * dh : d.n_kv_heads * dh;
    d.o_stride = n * dh;
    (void)group;
    std::vector<int> kv_len(B);
    for (int b = 0; b < B; b++)
        kv_len[b] = Tk - 3 * b;
    std::vector<float> q = randn((size_t)B * Tq * d.q_stride, 1), k = randn((size_t)B * Tk * d.k_stride, 1),
                       v = randn((size_t)B * Tk * d.v_stride, 1), dout = randn((size_t)B * Tq * d.o_stride, 1);
    std::vector<float> qm = randn((size_t)n * dk, 0.5f), qa = randn((size_t)n * dk, 0.5f), vm = randn((size_t)n * dh, 0.5f),
                       va = randn((size_t)n * dh, 0.5f);
    for (auto &x : qm)
        x += 1.0f;
    for (auto &x : vm)
        x += 1.0f;
    float *d_q = dev(q), *d_k = dev(k), *d_v = dev(v), *d_do = dev(dout), *d_qm = dev(qm), *d_qa = dev(qa), *d_vm = dev(vm),
          *d_va = dev(va);
    int *d_len = dev(kv_len);
    mhe_attn_dims dd = d; /* the device's copy: device pointers */
    if (padded) {
        d.kv_len = kv_len.data();
        dd.kv_len = d_len;
    }
    if (maps == MUL) {
        d.q_mul = qm.data(), d.v_mul = vm.data();
        dd.q_mul = d_qm, dd.v_mul = d_vm;
    } else if (maps == ADDMAP) {
        d.q_add = qa.data(), d.v_add = va.data();
        dd.q_add = d_qa, dd.v_add = d_va;
    } else if (maps == COLLAB) { /* M in the query map, the key bias after K~ */
        d.d_qk = dd.d_qk = dk;
        d.v_per_head = dd.v_per_head = 1;
        d.q_mul = qm.data();
        dd.q_mul = d_qm;
        d.k_bias = k.data() + dk;
        dd.k_bias = d_k + dk;
        d.k_bias_stride = dd.k_bias_stride = d.k_stride;
    }
    size_t no = (size_t)B * Tq * d.o_stride, nl = (size_t)B * n * Tq;
    std::vector<float> out(no), lse(nl), dq(q.size(), 0.0f), dk_(k.size(), 0.0f), dv(v.size(), 0.0f);
    std::vector<float> g1((size_t)n * dk, 0.0f), g2((size_t)n * dh, 0.0f), scratch((size_t)B * n * 5 * (dk > dh ? dk : dh));
    mhe_attn_grads gr;
    memset(&gr, 0, sizeof gr);
    gr.map_scratch = scratch.data();
    if (maps == MUL || maps == COLLAB)
        gr.dq_mul = g1.data();
    if (maps == ADDMAP)
        gr.dq_add = g1.data();
    if (maps == MUL)
        gr.dv_mul = g2.data();
    if (maps == ADDMAP)
        gr.dv_add = g2.data();
    if (maps == COLLAB) {
        gr.dk_bias = dk_.data() + dk;
        mhe__attn_mul_fwd(&d, out.data(), lse.data(), q.data(), k.data(), v.data());
        mhe__attn_mul_bwd(&d, &gr, dq.data(), dk_.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                          k.data(), v.data());
    } else {
        mhe_attn_fused_fwd(&d, out.data(), lse.data(), q.data(), k.data(), v.data());
        mhe_attn_fused_bwd(&d, &gr, dq.data(), dk_.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(),
                           k.data(), v.data());
    }
    /* device: gradients added into buffers that start non-zero, as the model's do */
    std::vector<float> z1 = randn(q.size(), 1), z2 = randn(k.size(), 1), z3 = randn(v.size(), 1), z4 = randn(g1.size(), 1),
                       z5 = randn(g2.size(), 1);
    float *d_out = dev(out), *d_lse = dev(lse), *d_dq = dev(z1), *d_dk = dev(z2), *d_dv = dev(z3), *d_g1 = dev(z4),
          *d_g2 = dev(z5), *d_scr = dev(std::vector<float>(mhe__cu_attn_bwd_floats(&dd) + 1));
    mhe_attn_grads dg;
    memset(&dg, 0, sizeof dg);
    if (gr.dq_mul)
        dg.dq_mul = d_g1;
    if (gr.dq_add)
        dg.dq_add = d_g1;
    if (gr.dv_mul)
        dg.dv_mul = d_g2;
    if (gr.dv_add)
        dg.dv_add = d_g2;
    if (gr.dk_bias)
        dg.dk_bias = d_dk + dk;
    char err[MHE_ERR_LEN] = "";
    mhe_status st = mhe__cu_attn_fwd(&dd, d_out, d_lse, d_q, d_k, d_v, err);
    CHECK(st == MHE_OK && rel(back(d_out, no), out) < 2e-5, "%s: output (rel %.3g) %s", what, rel(back(d_out, no), out), err);
    if (st == MHE_OK)
        st = mhe__cu_attn_bwd(&dd, &dg, d_dq, d_dk, d_dv, d_do, d_out, d_lse, d_q, d_k, d_v, d_scr, err);
    CHECK(st == MHE_OK, "%s: backward: %s", what, err);
    auto added = [](std::vector<float> g, const std::vector<float> &z) {
        for (size_t i = 0; i < g.size(); i++)
            g[i] += z[i];
        return g;
    };
    CHECK(rel(back(d_dq, q.size()), added(dq, z1)) < 1e-4, "%s: dQ (rel %.3g)", what, rel(back(d_dq, q.size()), added(dq, z1)));
    CHECK(rel(back(d_dk, k.size()), added(dk_, z2)) < 1e-4, "%s: dK (rel %.3g)", what,
          rel(back(d_dk, k.size()), added(dk_, z2)));
    CHECK(rel(back(d_dv, v.size()), added(dv, z3)) < 1e-4, "%s: dV (rel %.3g)", what, rel(back(d_dv, v.size()), added(dv, z3)));
    if (dg.dq_mul || dg.dq_add)
        CHECK(rel(back(d_g1, g1.size()), added(g1, z4)) < 1e-4, "%s: query map gradient (rel %.3g)", what,
              rel(back(d_g1, g1.size()), added(g1, z4)));
    if (dg.dv_mul || dg.dv_add)
        CHECK(rel(back(d_g2, g2.size()), added(g2, z5)) < 1e-4, "%s: value map gradient (rel %.3g)", what,
              rel(back(d_g2, g2.size()), added(g2, z5)));
    for (float *p : {d_q, d_k, d_v, d_do, d_qm, d_qa, d_vm, d_va, d_out, d_lse, d_dq, d_dk, d_dv, d_g1, d_g2, d_scr})
        cudaFree(p);
    cudaFree(d_len);
}

int main(void) {
    mhe_rng_seed(&rng, 9);
    one("mha causal", 2, 4, 4, 37, 37, 16, 1, 0, PLAIN);
    one("mha bidirectional, padded", 2, 4, 4, 37, 37, 16, 0, 1, PLAIN);
    one("gqa (2 K/V heads) causal", 2, 6, 2, 37, 37, 40, 1, 0, PLAIN);
    one("mqa cross-attention Tq 19, Tk 45, padded", 2, 4, 1, 19, 45, 24, 0, 1, PLAIN);
    one("decoding: one query over 45 keys", 2, 4, 2, 1, 45, 16, 1, 0, PLAIN);
    one("head of 130 columns", 1, 2, 2, 23, 23, 130, 1, 0, PLAIN);
    one("mhe-mul stacked, causal", 2, 4, 1, 37, 37, 16, 1, 0, MUL);
    one("mhe-mul stacked, cross, padded", 2, 6, 1, 19, 45, 24, 0, 1, MUL);
    one("query/value add maps (MHE-ADD's psi)", 2, 4, 1, 37, 37, 16, 1, 0, ADDMAP);
    one("collab: wide Q~K~, per-head V, key bias", 2, 4, 1, 37, 37, 16, 1, 0, COLLAB);
    { /* limits: a status, never a launch */
        mhe_attn_dims d;
        char err[MHE_ERR_LEN];
        memset(&d, 0, sizeof d);
        d.B = d.n_heads = d.n_kv_heads = 1;
        d.Tq = d.Tk = 4;
        d.d_head = MHE_MAX_D_HEAD + 1;
        CHECK(mhe__cu_attn_fwd(&d, NULL, NULL, NULL, NULL, NULL, err) == MHE_ERR_DEVICE, "d_head past the limit: %s", err);
        d.d_head = 16;
        d.dropout = 0.1f;
        CHECK(mhe__cu_attn_fwd(&d, NULL, NULL, NULL, NULL, NULL, err) == MHE_ERR_CONFIG, "attention dropout: %s", err);
        d.dropout = 0;
        d.n_heads = 64;
        d.d_head = 256;
        d.q_shared = 1;
        CHECK(mhe__cu_attn_fwd(&d, NULL, NULL, NULL, NULL, NULL, err) == MHE_ERR_DEVICE && strstr(err, "shared memory"),
              "64 heads of 256 in one group: %s", err);
    }
    return TEST_END();
}
