/* tests/cuda/test_cuda.cpp - every kernel of mhe_cuda.cuh (but the
   attention cores: test_attn.cpp) and the device model, executed on the CPU
   through tests/cuda/emu.h and compared with the CPU library.

   Built by `make test-cuda` in four ways: fibers (run in forward and in
   reversed order), blocks at once under ThreadSanitizer, threads under
   ThreadSanitizer, threads under ASan + UBSan.
   An argument runs one group (gemm, tf32, bf16, norm, elementwise, model, kinds,
   large, train, decode, prefill, eval, errors, features); the fault builds
   (MHE_CUDA_FAULT) run one group each. Built by nvcc (make cuda) it runs on
   the GPU; without a device it says so in one line and exits with status 3
   (tests/cuda/test_device.h). */
#define MHE_IMPLEMENTATION
#include "mhe.h"
#include "mhe_cuda.cuh"
#include "tests/test.h"
#include "tests/cuda/test_device.h"
#include <algorithm>
#include <functional>
#include <stdlib.h>
#include <vector>

static mhe_rng test_rng;

static std::vector<float> randn(size_t n, float s) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = s * mhe_rng_normal(&test_rng);
    return v;
}

template <typename T> static T *dev(const std::vector<T> &h) {
    T *d = test_dev_alloc<T>(h.size() * sizeof(T) + 4);
    test_copy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

template <typename T> static std::vector<T> host(const T *d, size_t n) {
    std::vector<T> h(n);
    test_copy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}

static double rel_err(const std::vector<float> &a, const std::vector<float> &b) {
    double m = 0, s = 1e-6;
    for (size_t i = 0; i < b.size(); i++)
        s = fabs(b[i]) > s ? fabs(b[i]) : s;
    for (size_t i = 0; i < b.size(); i++) {
        double d = fabs((double)a[i] - b[i]) / s;
        if (!(d <= m)) /* NaN counts */
            m = d == d ? d : 1e30;
    }
    return m;
}

/* ---- GEMM ------------------------------------------------------------------ */

/* tf32 rounding of the inputs (cvt.rna: 10 mantissa bits, nearest, ties
   away from zero), for a reference the TF32 kernel must match closely */
static std::vector<float> tf32_round(const std::vector<float> &x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7f800000u) != 0x7f800000u) /* finite: add half an ulp of tf32, drop 13 bits */
            u = (u + 0x1000u) & ~0x1fffu;
        memcpy(&y[i], &u, 4);
    }
    return y;
}

/* bf16 rounding (cvt.rn.bf16x2: 7 mantissa bits, nearest, ties to even) */
static std::vector<float> bf16_round(const std::vector<float> &x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if ((u & 0x7f800000u) != 0x7f800000u) /* finite: half an ulp less one, plus the last kept bit */
            u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&y[i], &u, 4);
    }
    return y;
}

static const char *const precision_name[] = {"fp32", "tf32", "bf16"};

/* float32, TF32 or bf16: each shape through both kernels of the precision (the 128 x 128 tile
   forced with mhe__cu_gemm_big_min = 0; leading dimensions that are not multiples of 4 keep the
   tensor cores off the pipelined kernel), through the 64 x 64 one with K split in 3 slices (a
   workspace, mhe__cu_splitk_force), and (TF32, bf16) through the pipelined cp.async kernel on
   aligned leading dimensions (not A^T B^T, which stays on the 128 tile). Half the cases add a
   bias and an activation in the epilogue (act_out written on the M x N outputs only: the
   columns past N keep their sentinel). */
static void test_gemm(int precision) {
    static const int shapes[][3] = {{67, 45, 37}, {1, 129, 70}, {130, 3, 17}, {64, 64, 16}, {5, 7, 300}, {129, 128, 9},
                                    {200, 260, 45}};
    long big_min = mhe__cu_gemm_big_min;
#if defined(MHE_EMU_THREADS) || defined(MHE_EMU_BLOCKS)
    /* the sanitizer builds (a thread per CUDA thread, every mma a warp-wide exchange: slow): races and
       bounds need every edge and transpose, not both betas (beta 0.5 reads C too) nor the largest shape */
    const int beta0 = 1, n_shapes = 6;
#else
    const int beta0 = 0, n_shapes = 7;
#endif
    static const char *const route_name[] = {"", " 128-tile", " split-K", " pipelined"};
    float *d_ws = NULL;
    cudaMalloc(&d_ws, MHE__CU_SPLITK_WS * sizeof(float));
    for (int route = 0; route < (precision ? 4 : 3); route++)
    for (int si = 0; si < n_shapes; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int bi = beta0; bi < 2; bi++) {
                    int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                    if (route == 3) { /* 16-byte rows for cp.async */
                        lda = (lda + 3) / 4 * 4;
                        ldb = (ldb + 3) / 4 * 4;
                    } else if (lda % 4 == 0 && ldb % 4 == 0) {
                        ldb++;
                    }
                    int epi = (si + ta + tb + bi) % 2, act = (si + route) % 4; /* GELU, ReLU, SiLU, exact GELU */
                    float alpha = 0.7f, beta = bi ? 0.5f : 0.0f;
                    std::vector<float> A = randn((size_t)(ta ? K : M) * lda, 1), B = randn((size_t)(tb ? N : K) * ldb, 1);
                    std::vector<float> C0 = randn((size_t)M * ldc, 1), ref = C0, bias = randn(N, 1);
                    std::vector<float> act0((size_t)M * ldc, 7.0f), act_ref = act0;
                    if (precision) { /* the reference sees what the tensor cores see */
                        std::vector<float> Ar = precision == MHE_CUDA_TF32 ? tf32_round(A) : bf16_round(A),
                                           Br = precision == MHE_CUDA_TF32 ? tf32_round(B) : bf16_round(B);
                        mhe_gemm(ta, tb, M, N, K, alpha, Ar.data(), lda, Br.data(), ldb, beta, ref.data(), ldc);
                    } else {
                        mhe_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, ref.data(), ldc);
                    }
                    if (epi)
                        for (int r = 0; r < M; r++) {
                            for (int c = 0; c < N; c++)
                                ref[(size_t)r * ldc + c] += bias[c];
                            mhe_act_fwd(act, &act_ref[(size_t)r * ldc], &ref[(size_t)r * ldc], N);
                        }
                    float *dA = dev(A), *dB = dev(B), *dC = dev(C0), *d_bias = dev(bias), *d_act = dev(act0);
                    mhe__cu_epi ep = {epi ? d_bias : NULL, epi ? d_act : NULL, act};
                    mhe__cu_gemm_big_min = route == 1 || route == 3 ? 0 : big_min;
                    mhe__cu_splitk_force = route == 2 ? 3 : 0;
                    long pipe0 = mhe__cu_gemm_pipe_calls;
                    cudaError_t e = mhe__cu_gemm(precision, ta, tb, M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc,
                                                 route == 2 ? d_ws : NULL, MHE__CU_SPLITK_WS, ep);
                    mhe__cu_gemm_big_min = big_min;
                    mhe__cu_splitk_force = 0;
                    std::vector<float> got = host(dC, C0.size()), got_act = host(d_act, act0.size());
                    double err = rel_err(got, ref), err_act = epi ? rel_err(got_act, act_ref) : 0;
                    CHECK(e == cudaSuccess && err < 2e-5 && err_act < 2e-5 &&
                              mhe__cu_gemm_pipe_calls - pipe0 == (route == 3 && !(ta && tb)),
                          "%s%s gemm ta=%d tb=%d %dx%dx%d beta=%g%s: rel err %.3g, activation %.3g, pipelined %ld (%s)",
                          precision ? precision_name[precision] : "simt", route_name[route], ta, tb, M, N, K,
                          (double)beta, epi ? " +bias+act" : "", err, err_act, mhe__cu_gemm_pipe_calls - pipe0,
                          cudaGetErrorString(e));
                    for (float *p : {dA, dB, dC, d_bias, d_act})
                        cudaFree(p);
                }
    cudaFree(d_ws);
}

/* ---- norms, activations, embeddings, cross-entropy, AdamW --------------------- */

static void test_norm(void) {
    static const int Cs[] = {75, 300, 32};
    for (int C : Cs)
        for (int rms = 0; rms < 2; rms++) {
            int N = 200, R = 7; /* the weight gradient's column sums in R uneven chunks of rows */
            std::vector<float> x = randn((size_t)N * C, 2), w = randn(C, 1), b = randn(C, 1), dy = randn((size_t)N * C, 1);
            std::vector<float> out((size_t)N * C), mean(N), rstd(N), dx = randn((size_t)N * C, 1), dw = randn(C, 1),
                db = randn(C, 1);
            std::vector<float> dx0 = dx, dw0 = dw, db0 = db;
            float *d_x = dev(x), *d_w = dev(w), *d_b = dev(b), *d_out = dev(out), *d_mean = dev(mean),
                  *d_rstd = dev(rstd), *d_dy = dev(dy), *d_dx = dev(dx0), *d_dw = dev(dw0), *d_db = dev(db0);
            size_t smem = mhe__cu_norm_smem(C);
            cudaError_t e = mhe__cu_launch(mhe__cu_norm_fwd, dim3(N), dim3(MHE__CU_EW), smem, d_out, d_mean, d_rstd,
                                           (const float *)d_x, (const float *)d_w, (const float *)d_b, C, 1e-5f, rms);
            if (rms)
                mhe_rmsnorm_fwd(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
            else
                mhe_layernorm_fwd(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
            CHECK(e == cudaSuccess && rel_err(host(d_out, out.size()), out) < 1e-5, "norm fwd rms=%d C=%d: %.3g", rms, C,
                  rel_err(host(d_out, out.size()), out));
            CHECK(rel_err(host(d_rstd, N), rstd) < 1e-5, "norm rstd rms=%d C=%d", rms, C);
            /* the backward from the device's own statistics (equal to the CPU's, checked above) */
            e = mhe__cu_launch(mhe__cu_norm_bwd_x, dim3(N), dim3(MHE__CU_EW), smem, d_dx, (const float *)d_dy,
                               (const float *)d_x, (const float *)d_w, (const float *)d_mean, (const float *)d_rstd, C, rms);
            float *d_part = dev(std::vector<float>((size_t)2 * R * C, NAN));
            if (e == cudaSuccess)
                e = mhe__cu_launch(mhe__cu_colsum_part, dim3(mhe__cu_blocks(C, MHE__CU_EW), R), dim3(MHE__CU_EW), 0, d_part,
                                   (const float *)d_dy, C, (const float *)d_x, (const float *)d_mean,
                                   (const float *)d_rstd, N, C, R, rms ? 2 : 1);
            if (e == cudaSuccess)
                e = mhe__cu_launch(mhe__cu_colsum_add, dim3(mhe__cu_blocks(C, MHE__CU_EW)), dim3(MHE__CU_EW), 0, d_dw,
                                   rms ? (float *)NULL : d_db, (const float *)d_part, C, R, rms ? 2 : 1);
            if (rms)
                mhe_rmsnorm_bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
            else
                mhe_layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C);
            CHECK(e == cudaSuccess && rel_err(host(d_dx, dx.size()), dx) < 1e-5, "norm dx rms=%d C=%d: %.3g", rms, C,
                  rel_err(host(d_dx, dx.size()), dx));
            CHECK(rel_err(host(d_dw, C), dw) < 1e-5, "norm dw rms=%d C=%d", rms, C);
            if (!rms)
                CHECK(rel_err(host(d_db, C), db) < 1e-5, "norm db C=%d", C);
            if (!rms) { /* mode 0: a bias gradient, the column sums of dy (rows of stride C + 3: C columns read) */
                int ld = C + 3;
                std::vector<float> y = randn((size_t)N * ld, 1), bias = randn(C, 1), want = bias;
                for (int i = 0; i < N; i++)
                    for (int j = 0; j < C; j++)
                        want[j] += y[(size_t)i * ld + j];
                float *d_y = dev(y), *d_bias = dev(bias);
                e = mhe__cu_launch(mhe__cu_colsum_part, dim3(mhe__cu_blocks(C, MHE__CU_EW), R), dim3(MHE__CU_EW), 0, d_part,
                                   (const float *)d_y, ld, (const float *)NULL, (const float *)NULL,
                                   (const float *)NULL, N, C, R, 0);
                if (e == cudaSuccess)
                    e = mhe__cu_launch(mhe__cu_colsum_add, dim3(mhe__cu_blocks(C, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                                       d_bias, (float *)NULL, (const float *)d_part, C, R, 0);
                CHECK(e == cudaSuccess && rel_err(host(d_bias, C), want) < 1e-5, "bias gradient column sums C=%d: %.3g",
                      C, rel_err(host(d_bias, C), want));
                cudaFree(d_y);
                cudaFree(d_bias);
            }
            for (float *p : {d_x, d_w, d_b, d_out, d_mean, d_rstd, d_dy, d_dx, d_dw, d_db, d_part})
                cudaFree(p);
        }
}

static void test_elementwise(void) {
    int64_t n = 1000;
    for (int act = 0; act < 4; act++) { /* the forward: in the GEMM epilogue (test_gemm) */
        std::vector<float> x = randn(n, 2), dy = randn(n, 1), dx = randn(n, 1), dx0 = dx;
        float *d_x = dev(x), *d_dy = dev(dy), *d_dx = dev(dx0);
        mhe__cu_launch(mhe__cu_act_bwd, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, act, d_dx,
                       (const float *)d_x, (const float *)d_dy, n);
        mhe_act_bwd(act, dx.data(), x.data(), dy.data(), n);
        CHECK(rel_err(host(d_dx, n), dx) < 1e-5, "activation %d backward", act);
        for (float *p : {d_x, d_dy, d_dx})
            cudaFree(p);
    }
    { /* embeddings: rows repeat (atomics), positions from an offset */
        int V = 11, C = 70, B = 3, T = 9, t0 = 2, P = 16;
        std::vector<float> tok = randn((size_t)V * C, 1), pos = randn((size_t)P * C, 1), out((size_t)B * T * C);
        std::vector<float> d = randn(out.size(), 1), dtok((size_t)V * C, 0.0f), dpos((size_t)P * C, 0.0f);
        std::vector<int> ids(B * T);
        for (int i = 0; i < B * T; i++)
            ids[i] = (i * 7) % 5; /* five ids, each used several times */
        float *d_tok = dev(tok), *d_pos = dev(pos), *d_out = dev(out), *d_d = dev(d), *d_dtok = dev(dtok),
              *d_dpos = dev(dpos);
        int *d_ids = dev(ids);
        mhe__cu_launch(mhe__cu_embed_fwd, dim3(B * T), dim3(MHE__CU_EW), 0, d_out, (const float *)d_tok,
                       (const float *)d_pos, (const int *)d_ids, T, t0, C);
        mhe__cu_launch(mhe__cu_embed_bwd_tok, dim3(B * T), dim3(MHE__CU_EW), 0, d_dtok, (const float *)d_d,
                       (const int *)d_ids, C);
        mhe__cu_launch(mhe__cu_embed_bwd_pos, dim3(mhe__cu_blocks((int64_t)T * C, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                       d_dpos, (const float *)d_d, B, T, C);
        for (int r = 0; r < B * T; r++)
            for (int c = 0; c < C; c++) {
                out[(size_t)r * C + c] = tok[(size_t)ids[r] * C + c] + pos[(size_t)(t0 + r % T) * C + c];
                dtok[(size_t)ids[r] * C + c] += d[(size_t)r * C + c];
                dpos[(size_t)(r % T) * C + c] += d[(size_t)r * C + c];
            }
        CHECK(rel_err(host(d_out, out.size()), out) < 1e-6, "embedding forward");
        CHECK(rel_err(host(d_dtok, dtok.size()), dtok) < 1e-5, "embedding backward (repeated rows)");
        CHECK(rel_err(host(d_dpos, dpos.size()), dpos) < 1e-5, "position backward");
        for (float *p : {d_tok, d_pos, d_out, d_d, d_dtok, d_dpos})
            cudaFree(p);
        cudaFree(d_ids);
    }
    { /* hash-emb word batches: bucket rows shared by several words, special rows (code -1 - s) repeated */
        int N = 5, S = MHE_N_SPECIAL, C = 70, B = 3, T = 9;
        std::vector<float> tab = randn((size_t)N * C, 1), spec = randn((size_t)S * C, 1), pos = randn((size_t)T * C, 1);
        std::vector<float> out((size_t)B * T * C), d = randn(out.size(), 1), dtab((size_t)N * C, 0.0f), dspec((size_t)S * C, 0.0f);
        std::vector<int> codes(B * T);
        for (int i = 0; i < B * T; i++)
            codes[i] = i % 4 == 1 ? -1 - i % S : (i * 7) % N;
        float *d_tab = dev(tab), *d_spec = dev(spec), *d_pos = dev(pos), *d_out = dev(out), *d_d = dev(d),
              *d_dtab = dev(dtab), *d_dspec = dev(dspec);
        int *d_codes = dev(codes);
        mhe__cu_launch(mhe__cu_hash_emb_fwd, dim3(B * T), dim3(MHE__CU_EW), 0, d_out, (const float *)d_spec,
                       (const float *)d_tab, (const float *)d_pos, (const int *)d_codes, T, C);
        mhe__cu_launch(mhe__cu_hash_emb_bwd, dim3(B * T), dim3(MHE__CU_EW), 0, d_dspec, d_dtab, (const float *)d_d,
                       (const int *)d_codes, C);
        for (int r = 0; r < B * T; r++) {
            int k = codes[r];
            const float *e = k >= 0 ? &tab[(size_t)k * C] : &spec[(size_t)(-1 - k) * C];
            float *de = k >= 0 ? &dtab[(size_t)k * C] : &dspec[(size_t)(-1 - k) * C];
            for (int c = 0; c < C; c++) {
                out[(size_t)r * C + c] = e[c] + pos[(size_t)(r % T) * C + c];
                de[c] += d[(size_t)r * C + c];
            }
        }
        CHECK(rel_err(host(d_out, out.size()), out) < 1e-6, "hash-emb embedding forward");
        CHECK(rel_err(host(d_dtab, dtab.size()), dtab) < 1e-5 && rel_err(host(d_dspec, dspec.size()), dspec) < 1e-5,
              "hash-emb embedding backward (shared buckets, repeated special rows)");
        for (float *p : {d_tab, d_spec, d_pos, d_out, d_d, d_dtab, d_dspec})
            cudaFree(p);
        cudaFree(d_codes);
    }
    for (int emb : {MHE_EMB_HASH_POOL, MHE_EMB_HASH_ADD, MHE_EMB_HASH_PROJ}) {
        /* hash-pool, -add, -proj word batches against mhe_hash_*_fwd/_bwd: words share codebook rows and
           (pool, proj) the weights; special rows repeat; proj has a clamped axis and an all-zero word */
        int S = MHE_N_SPECIAL, C = 70, B = 3, T = 9, rows = B * T, nb = 13, k = 4, nch = mhe_hash_pool_chunks(nb, k), nw = 0;
        size_t rb = MHE_BITS_BYTES(nb);
        const char *name = emb == MHE_EMB_HASH_POOL ? "hash-pool" : emb == MHE_EMB_HASH_ADD ? "hash-add" : "hash-proj";
        std::vector<int> codes(rows);
        for (int i = 0; i < rows; i++)
            codes[i] = i % 4 == 1 ? -1 - i % S : nw++;
        std::vector<unsigned char> bits((size_t)nw * rb);
        for (size_t i = 0; i < bits.size(); i++)
            bits[i] = (unsigned char)mhe_rng_below(&test_rng, 256);
        if (emb == MHE_EMB_HASH_PROJ)
            std::fill(bits.begin(), bits.begin() + (long)rb, 0); /* word 0: no ones, the bits' norm clamped */
        std::vector<int> idx((size_t)nw * nch);
        mhe_hash_pool_index(idx.data(), bits.data(), nw, nb, k);
        size_t np = emb == MHE_EMB_HASH_POOL ? (((size_t)1 << k) + 1) * C : (size_t)2 * nb * C, nw2 = (size_t)nch * C;
        std::vector<float> par = randn(np, 1), w = randn(emb == MHE_EMB_HASH_PROJ ? (size_t)C * nb : nw2, 1);
        if (emb == MHE_EMB_HASH_PROJ)
            std::fill(w.begin(), w.begin() + nb, 0.5f); /* axis 0 constant: |c_0| = 0, clamped */
        std::vector<float> spec = randn((size_t)S * C, 1), reg = randn(C, 1), pos = randn((size_t)T * C, 1);
        std::vector<float> out((size_t)rows * C), d = randn(out.size(), 1), dpar = randn(np, 1), dw = randn(w.size(), 1),
                           dspec = randn(spec.size(), 1), dreg = randn(C, 1);
        float *d_par = dev(par), *d_w = dev(w), *d_spec = dev(spec), *d_reg = dev(reg), *d_pos = dev(pos),
              *d_out = dev(out), *d_d = dev(d), *d_dpar = dev(dpar), *d_dw = dev(dw), *d_dspec = dev(dspec),
              *d_dreg = dev(dreg);
        std::vector<float> wn((size_t)C * nb), wnorm(C), wout((size_t)nw * C), uu((size_t)nw * 2);
        float *d_wn = dev(wn), *d_wnorm = dev(wnorm), *d_wout = dev(wout), *d_uu = dev(uu);
        int *d_codes = dev(codes), *d_idx = dev(idx);
        unsigned char *d_bits = dev(bits);
        float inv = 1.0f / sqrtf((float)nb);
        if (emb == MHE_EMB_HASH_POOL) {
            mhe__cu_launch(mhe__cu_hash_pool_fwd, dim3(rows), dim3(MHE__CU_EW), 0, d_out, (const float *)d_spec,
                           (const float *)d_par, (const float *)d_w, (const float *)d_reg, (const float *)d_pos,
                           (const int *)d_codes, (const int *)d_idx, T, nch, C);
            mhe__cu_launch(mhe__cu_hash_pool_bwd, dim3(rows), dim3(MHE__CU_EW), 0, d_dpar, d_dw, (const float *)d_d,
                           (const float *)d_par, (const float *)d_w, (const int *)d_codes, (const int *)d_idx, nch, C);
        } else if (emb == MHE_EMB_HASH_ADD) {
            mhe__cu_launch(mhe__cu_hash_add_fwd, dim3(rows), dim3(MHE__CU_EW), 0, d_out, (const float *)d_spec,
                           (const float *)d_par, (const float *)d_reg, (const float *)d_pos, (const int *)d_codes,
                           (const unsigned char *)d_bits, T, nb, C, inv);
            mhe__cu_launch(mhe__cu_hash_add_bwd, dim3(rows), dim3(MHE__CU_EW), 0, d_dpar, (const float *)d_d,
                           (const int *)d_codes, (const unsigned char *)d_bits, nb, C, inv);
        } else {
            mhe__cu_launch(mhe__cu_hash_proj_weights, dim3(mhe__cu_blocks(C, MHE__CU_EW)), dim3(MHE__CU_EW), 0, d_wn,
                           d_wnorm, (const float *)d_w, nb, C);
            mhe__cu_launch(mhe__cu_hash_proj_fwd, dim3(rows), dim3(MHE__CU_EW), 0, d_out, d_wout, d_uu,
                           (const float *)d_spec, (const float *)d_wn, (const float *)d_reg, (const float *)d_pos,
                           (const int *)d_codes, (const unsigned char *)d_bits, T, nb, C);
            mhe__cu_launch(mhe__cu_hash_proj_bwd, dim3(mhe__cu_blocks((int64_t)C * nb, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                           d_dw, (const float *)d_d, (const float *)d_wn, (const float *)d_wnorm, (const float *)d_wout,
                           (const float *)d_uu, (const int *)d_codes, (const unsigned char *)d_bits, rows, nb, C);
        }
        mhe__cu_launch(mhe__cu_hash_words_bwd, dim3(rows), dim3(MHE__CU_EW), 0, d_dspec, d_dreg, (const float *)d_d,
                       (const int *)d_codes, C);
        /* the CPU: the words' embeddings, then each row as mhe__words_fwd and mhe__embed_fwd build it */
        std::vector<float> e((size_t)nw * C), de((size_t)nw * C), sm(nw2);
        if (emb == MHE_EMB_HASH_POOL)
            mhe_hash_pool_fwd(e.data(), sm.data(), par.data(), w.data(), idx.data(), nw, nch, C);
        else if (emb == MHE_EMB_HASH_ADD)
            mhe_hash_add_fwd(e.data(), par.data(), bits.data(), nw, nb, C, sqrtf((float)nb));
        else
            mhe_hash_proj_fwd(e.data(), wn.data(), wnorm.data(), w.data(), bits.data(), nw, nb, C);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < C; c++) {
                float g = d[(size_t)r * C + c];
                if (codes[r] < 0) {
                    out[(size_t)r * C + c] = spec[(size_t)(-1 - codes[r]) * C + c] + pos[(size_t)(r % T) * C + c];
                    dspec[(size_t)(-1 - codes[r]) * C + c] += g;
                } else {
                    out[(size_t)r * C + c] = (e[(size_t)codes[r] * C + c] + reg[c]) + pos[(size_t)(r % T) * C + c];
                    dreg[c] += g;
                    de[(size_t)codes[r] * C + c] = g;
                }
            }
        if (emb == MHE_EMB_HASH_POOL)
            mhe_hash_pool_bwd(dpar.data(), dw.data(), de.data(), par.data(), sm.data(), idx.data(), nw, nch, C);
        else if (emb == MHE_EMB_HASH_ADD)
            mhe_hash_add_bwd(dpar.data(), de.data(), bits.data(), nw, nb, C, sqrtf((float)nb));
        else
            mhe_hash_proj_bwd(dw.data(), de.data(), wn.data(), wnorm.data(), bits.data(), nw, nb, C);
        CHECK(rel_err(host(d_out, out.size()), out) < 1e-5, "%s embedding forward", name);
        CHECK(rel_err(host(d_dspec, dspec.size()), dspec) < 1e-5 && rel_err(host(d_dreg, dreg.size()), dreg) < 1e-5,
              "%s: special and regular rows backward", name);
        if (emb != MHE_EMB_HASH_PROJ)
            CHECK(rel_err(host(d_dpar, dpar.size()), dpar) < 1e-5, "%s backward: codebooks (shared rows)", name);
        if (emb != MHE_EMB_HASH_ADD)
            CHECK(rel_err(host(d_dw, dw.size()), dw) < 1e-5, "%s backward: %s", name,
                  emb == MHE_EMB_HASH_POOL ? "pooling weights" : "projection (a clamped axis, an all-zero word)");
        for (float *p : {d_par, d_w, d_spec, d_reg, d_pos, d_out, d_d, d_dpar, d_dw, d_dspec, d_dreg, d_wn, d_wnorm, d_wout, d_uu})
            cudaFree(p);
        cudaFree(d_codes);
        cudaFree(d_idx);
        cudaFree(d_bits);
    }
    { /* softmax cross-entropy with ignored rows, V past the block width */
        int N = 9, V = 301;
        std::vector<float> z = randn((size_t)N * V, 3), loss(N), dz((size_t)N * V, 0.0f), dzc((size_t)N * V, 0.0f);
        std::vector<int> tg(N);
        for (int i = 0; i < N; i++)
            tg[i] = i % 4 == 3 ? -1 : (i * 37) % V;
        float *d_z = dev(z), *d_loss = dev(loss), *d_dz = dev(dz);
        int *d_tg = dev(tg), count;
        float mean;
        mhe__cu_launch(mhe__cu_xent, dim3(N), dim3(MHE__CU_EW), 0, d_loss, d_dz, (const float *)d_z,
                       (const int *)d_tg, V, 0.25f);
        mhe_xent_fwd(loss.data(), &mean, &count, z.data(), tg.data(), N, V);
        mhe_xent_bwd(dzc.data(), z.data(), tg.data(), N, V, 0.25f);
        CHECK(rel_err(host(d_loss, N), loss) < 1e-5, "cross-entropy losses");
        CHECK(rel_err(host(d_dz, dz.size()), dzc) < 1e-5, "cross-entropy gradient");
        cudaFree(d_z);
        cudaFree(d_loss);
        cudaFree(d_dz);
        cudaFree(d_tg);
    }
    { /* AdamW with a clipping scale, against mhe_clip_grad_norm + mhe_adamw_update: two tensors in one
         launch, 777 elements with weight decay and 5000 without (two chunks, the second short) */
        int64_t n1 = 777, m = n1 + 5000;
        std::vector<float> p = randn(m, 1), gr = randn(m, 1), mo = randn(m, 0.1f), ve = randn(m, 0.1f);
        for (auto &x : ve)
            x = x * x;
        float *d_p = dev(p), *d_g = dev(gr), *d_m = dev(mo), *d_v = dev(ve);
        float lr = 3e-3f, wd = 0.1f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, clip = 1.0f;
        int t = 5;
        float norm = mhe_clip_grad_norm(gr.data(), m, clip), gs = norm > clip ? clip / (norm + 1e-6f) : 1.0f;
        float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
        std::vector<float> decayed(p.begin() + n1, p.end()), g2(gr.begin() + n1, gr.end()),
            m2(mo.begin() + n1, mo.end()), v2(ve.begin() + n1, ve.end()); /* the second tensor as if it decayed */
        mhe_adamw_update(decayed.data(), g2.data(), m2.data(), v2.data(), m - n1, lr, b1, b2, eps, wd, t);
        mhe_adamw_update(p.data(), gr.data(), mo.data(), ve.data(), n1, lr, b1, b2, eps, wd, t);
        mhe_adamw_update(p.data() + n1, gr.data() + n1, mo.data() + n1, ve.data() + n1, m - n1, lr, b1, b2, eps, 0.0f,
                         t);
        std::vector<mhe_cuda_adam_chunk> ch = {{0, (int)n1, 1}, {n1, MHE__CU_ADAM_CHUNK, 0},
                                               {n1 + MHE__CU_ADAM_CHUNK, (int)(m - n1 - MHE__CU_ADAM_CHUNK), 0}};
        mhe_cuda_adam_chunk *d_ch = NULL;
        cudaMalloc(&d_ch, ch.size() * sizeof ch[0]);
        cudaMemcpy(d_ch, ch.data(), ch.size() * sizeof ch[0], cudaMemcpyHostToDevice);
        mhe__cu_launch(mhe__cu_adamw, dim3((unsigned)ch.size()), dim3(MHE__CU_EW), 0, d_p, d_g, d_m, d_v,
                       (const mhe_cuda_adam_chunk *)d_ch, gs, (const float *)NULL, lr / bc1, 1.0f - lr * wd, b1, b2, eps, sqrtf(bc2));
        CHECK(rel_err(host(d_p, m), p) < 1e-6 && rel_err(host(d_m, m), mo) < 1e-5 && rel_err(host(d_v, m), ve) < 1e-5,
              "AdamW with clipping, two tensors in one launch");
        std::vector<float> got = host(d_p, m), got2(got.begin() + n1, got.end());
        CHECK(rel_err(got2, decayed) > 1e-5, "AdamW: no weight decay where the tensor has none (rel %.3g)",
              rel_err(got2, decayed));
        for (float *q : {d_p, d_g, d_m, d_v})
            cudaFree(q);
        cudaFree(d_ch);
    }
}

/* ---- the device model ------------------------------------------------------------ */

static mhe_config small_config(int kind, int arch, int post, int norm, int act) {
    mhe_config c = mhe_config_default();
    c.arch = arch;
    c.vocab_size = 61;
    c.d_model = 48;
    c.n_heads = 4;
    c.d_head = 12;
    c.n_layers = 2;
    c.d_ff = 100;
    c.max_seq_len = 24;
    c.kv_groups = 2;
    c.collab_dim = 20;
    c.post_norm = post;
    c.norm = norm;
    c.activation = act;
    c.head_init_std = 0.3f; /* head embeddings far from 0, so the heads differ */
    strcpy(c.fixed_seq, "ids:3,1,4,1,5,9,2,6,5,3,5"); /* fixedseq-qk's text, inside the vocabulary */
    for (int l = 0; l < c.n_layers; l++)
        c.attn[l] = l == 0 ? kind : (kind == MHE_ATTN_MHA ? MHE_ATTN_MHE_MUL : MHE_ATTN_MHA);
    if (mhe_attn_kind_is_decon(kind)) /* scores of order 1: at 0.02, |s| ~ 0.02 and Taylor's s^2 / 2 hides */
        c.init_std = 0.1f;
    if (kind == MHE_ATTN_RNDEMB_QK || kind == MHE_ATTN_FIXEDSEQ_QK) { /* the fixed stream runs through a block below */
        c.attn[0] = MHE_ATTN_MHA;
        c.attn[1] = kind;
    }
    return c;
}

static const int device_kinds[] = {MHE_ATTN_MHA,     MHE_ATTN_SHA,     MHE_ATTN_MQA,    MHE_ATTN_GQA,   MHE_ATTN_SKV,
                                   MHE_ATTN_EL_ATT,  MHE_ATTN_MHE_ADD, MHE_ATTN_MHE_MUL, MHE_ATTN_COLLAB};

/* how far a device step may be from the CPU's: the loss (relative), the
   logits and each gradient tensor (max error over the tensor's largest value) */
struct step_tol {
    double loss, logits, grad;
};

/* the worst a device step was, for the summary line */
struct step_err {
    double loss, logits, grad;
    char grad_name[MHE_NAME_LEN];
};

static const step_tol fp32_tol = {1e-5, 1e-5, 2e-4};

/* one forward and backward on both sides: loss, logits and every gradient.
   The device runs once per precision p (MHE_CUDA_FP32, _TF32, _BF16) below n_prec,
   each against the same CPU step; tol[p] bounds precision p. With summary,
   one line per precision says the worst errors (the GPU check reads it).
   An encoder-decoder reads a source of Ts tokens (0: T). */
static void compare_step(const mhe_config *cfg, const char *what, int B, int T, const step_tol *tol, int n_prec,
                         int summary, int first = 0, int Ts = 0) {
    mhe_model m;
    int V = cfg->vocab_size, s2s = cfg->arch == MHE_ARCH_ENCDEC;
    Ts = s2s ? (Ts > 0 ? Ts : T) : 0;
    std::vector<int> tok(B * T), tgt(B * T), src(B * Ts + 1);
    float loss_cpu = 0;
    if (mhe_model_init(&m, cfg, 7, NULL) != MHE_OK) {
        CHECK(0, "%s: model init: %s", what, m.err);
        return;
    }
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
        tgt[i] = cfg->arch == MHE_ARCH_ENCODER && i % 3 ? -1 : (int)mhe_rng_below(&test_rng, (uint32_t)V);
    }
    for (int i = 0; i < B * Ts; i++)
        src[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    mhe_model_zero_grad(&m);
    if (s2s) {
        mhe_batch bt;
        memset(&bt, 0, sizeof bt);
        bt.B = B; bt.T = T; bt.tokens = tok.data(); bt.targets = tgt.data(); bt.Ts = Ts; bt.src = src.data();
        CHECK(mhe_model_forward_batch(&m, &bt, &loss_cpu) == MHE_OK, "%s: CPU forward: %s", what, m.err);
    } else {
        CHECK(mhe_model_forward(&m, tok.data(), tgt.data(), B, T, &loss_cpu) == MHE_OK, "mhe_model_forward: %s", m.err);
    }
    std::vector<float> logits_cpu(m.acts.logits, m.acts.logits + (size_t)B * T * V);
    CHECK(mhe_model_backward(&m) == MHE_OK, "mhe_model_backward: %s", m.err);
    std::vector<float> grad_cpu(m.grad_data, m.grad_data + m.n_params);
    double gmax = 0;
    for (float x : grad_cpu)
        gmax = fabs(x) > gmax ? fabs(x) : gmax;
    for (int p = first; p < n_prec; p++) {
        mhe_cuda_model g;
        float loss_dev = 0;
        step_err worst = {0, 0, 0, ""};
        char w[200];
        snprintf(w, sizeof w, "%s%s%s", what, n_prec > 1 ? " " : "", n_prec > 1 ? precision_name[p] : "");
        mhe_status st = mhe_cuda_model_init(&g, &m, p);
        CHECK(st == MHE_OK, "%s: device init: %s", w, g.err);
        if (st != MHE_OK)
            continue;
        st = s2s ? mhe_cuda_model_forward_s2s(&g, src.data(), Ts, tok.data(), tgt.data(), B, T, &loss_dev)
                 : mhe_cuda_model_forward(&g, tok.data(), tgt.data(), B, T, &loss_dev);
        if (st == MHE_OK)
            st = mhe_cuda_model_backward(&g);
        CHECK(st == MHE_OK, "%s: device step: %s", w, g.err);
        worst.loss = fabs((double)loss_dev - loss_cpu) / fabs((double)loss_cpu);
        CHECK_CLOSE(loss_dev, loss_cpu, tol[p].loss, tol[p].loss, "%s: loss %.7f vs CPU %.7f", w, (double)loss_dev,
                    (double)loss_cpu);
        std::vector<float> logits_dev(logits_cpu.size());
        mhe_cuda_model_logits(&g, logits_dev.data());
        worst.logits = rel_err(logits_dev, logits_cpu);
        CHECK(worst.logits < tol[p].logits, "%s: logits rel err %.3g (bound %.3g)", w, worst.logits, tol[p].logits);
        /* the tensor cores did round: a float32 step stays within 1e-5 */
        CHECK(p == MHE_CUDA_FP32 || worst.logits > 1e-5, "%s: logits rel err %.3g: was the step rounded?", w,
              worst.logits);
        mhe_cuda_model_grads(&g); /* into m.grad_data: the CPU's are in grad_cpu */
        int bad = 0;
        for (int i = 0; i < m.n_tensors; i++) {
            const mhe_tensor *t = &m.params[i];
            size_t off = (size_t)(t->data - m.param_data);
            std::vector<float> a(m.grad_data + off, m.grad_data + off + t->size),
                b(grad_cpu.begin() + (long)off, grad_cpu.begin() + (long)(off + t->size));
            double e = rel_err(a, b), mx = 0;
            for (float x : b)
                mx = fabs(x) > mx ? fabs(x) : mx;
            /* a gradient that is zero in exact arithmetic (MHE-ADD's key bias: it shifts whole score
               rows) is rounding noise on both sides: compared against the model's gradient scale */
            if (mx < 1e-3 * gmax)
                e = e * mx / (1e-3 * gmax);
            if (!(e <= worst.grad)) {
                worst.grad = e == e ? e : 1e30;
                snprintf(worst.grad_name, sizeof worst.grad_name, "%s", t->name);
            }
            if (!(e < tol[p].grad)) {
                bad++;
                printf("  %s: gradient of %s rel err %.3g (max |g| %.3g)\n", w, t->name, e, mx);
            }
        }
        CHECK(bad == 0, "%s: %d of %d gradients differ from the CPU's (bound %.3g)", w, bad, m.n_tensors, tol[p].grad);
        if (summary)
            printf("%s: loss %.2g logits %.2g gradient %.2g (%s); bounds %.2g %.2g %.2g\n", w, worst.loss, worst.logits,
                   worst.grad, worst.grad_name, tol[p].loss, tol[p].logits, tol[p].grad);
        mhe_cuda_model_free(&g);
    }
    mhe_model_free(&m);
}

/* thesis ch. 4 and FNet (fnet and linear mix a whole sequence: encoders only) */
static const int decon_kinds[] = {MHE_ATTN_MLP,         MHE_ATTN_TAYLOR,       MHE_ATTN_NONAPPROX,
                                  MHE_ATTN_RNDEMB_QK,   MHE_ATTN_FIXEDSEQ_QK,  MHE_ATTN_STATICEMB_QK,
                                  MHE_ATTN_FNET,        MHE_ATTN_LINEAR};

static int encoder_only(int kind) { return kind == MHE_ATTN_FNET || kind == MHE_ATTN_LINEAR; }

/* the per-kind checks' bounds (relative; logits and gradients to the tensor's
   largest value). float32: the device sums in another order than the CPU
   (measured on the ch. 4 and FNet kinds: logits below 7e-7, gradients below
   1e-5; the bounds are the other kinds'). TF32 rounds every GEMM input to
   10 mantissa bits, 2^-11 = 4.9e-4 relative: measured on those kinds, logits
   to 1.2e-3, gradients to 2.5e-3 (two layers back), the mean loss to 4.1e-5
   (the errors average out); the bounds are 4 to 5 times those. */
static const step_tol fp32_bounds = {1e-5, 1e-5, 2e-4}, tf32_bounds = {2e-4, 5e-3, 1e-2};

/* one precision (tf32 0 or 1) against its bounds */
static void compare_step(const mhe_config *cfg, const char *what, int B = 2, int T = 19, int tf32 = 0,
                         step_tol bd = fp32_bounds) {
    step_tol tol[2] = {bd, bd};
    compare_step(cfg, what, B, T, tol, tf32 ? 2 : 1, 0, tf32 ? 1 : 0);
}

/* three layers of the given kinds, small enough for the sanitizer runs (pre-norm LayerNorm, or post-norm RMSNorm) */
static mhe_config hybrid(int arch, int post, int k0, int k1, int k2) {
    mhe_config c = small_config(k0, arch, post, post ? MHE_NORM_RMSNORM : MHE_NORM_LAYERNORM, MHE_ACT_GELU);
    c.d_model = 32;
    c.n_heads = 2;
    c.d_head = 16;
    c.d_ff = 48;
    c.n_layers = 3;
    c.attn[0] = k0;
    c.attn[1] = k1;
    c.attn[2] = k2;
    return c;
}

/* decoding token by token on the device equals the device's full forward (logits within tol) */
static void decode_check(const mhe_config *cfg, const char *what, int T, double tol) {
    mhe_model m;
    mhe_cuda_model g;
    mhe_cuda_kv_cache kc;
    int V = cfg->vocab_size;
    std::vector<int> tok(T);
    for (int i = 0; i < T; i++)
        tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    if (mhe_model_init(&m, cfg, 3, NULL) != MHE_OK) {
        CHECK(0, "decode %s: model init: %s", what, m.err);
        return;
    }
    memset(&kc, 0, sizeof kc);
    mhe_status st = mhe_cuda_model_init(&g, &m, 0);
    if (st == MHE_OK)
        st = mhe_cuda_model_forward(&g, tok.data(), NULL, 1, T, NULL);
    std::vector<float> full((size_t)T * V), step(V);
    if (st == MHE_OK)
        st = mhe_cuda_model_logits(&g, full.data());
    if (st == MHE_OK)
        st = mhe_cuda_kv_cache_init(&kc, &g, T);
    double worst = 0;
    for (int t = 0; t < T && st == MHE_OK; t++) {
        st = mhe_cuda_decode_step(&g, &kc, tok[t], step.data());
        std::vector<float> ref(full.begin() + (long)t * V, full.begin() + (long)(t + 1) * V);
        double e = rel_err(step, ref);
        worst = e > worst ? e : worst;
    }
    CHECK(st == MHE_OK && worst < tol, "decode %s: step logits equal the forward's (rel %.3g) %s", what, worst,
          st == MHE_OK ? "" : g.err);
    if (getenv("MHE_TEST_VERBOSE"))
        printf("  decode %s: logits %.3g\n", what, worst);
    if (st == MHE_OK) /* a second sequence in the same cache starts fresh */
        CHECK(mhe_cuda_decode_step(&g, &kc, tok[0], NULL) == MHE_ERR_SHAPE, "decode %s past the cache: MHE_ERR_SHAPE",
              what);
    if (st == MHE_OK) {
        kc.len = 0;
        st = mhe_cuda_decode_step(&g, &kc, tok[0], step.data());
        std::vector<float> ref(full.begin(), full.begin() + V);
        CHECK(st == MHE_OK && rel_err(step, ref) < tol, "decode %s: a new sequence starts from empty states (rel %.3g)",
              what, rel_err(step, ref));
    }
    mhe_cuda_kv_cache_free(&kc);
    mhe_cuda_model_free(&g);
    mhe_model_free(&m);
}

/* the source of an encoder-decoder batch for compare_batch: Ts tokens (0: T), src_lengths (NULL: none) */
struct batch_src {
    int Ts;
    const int *lengths;
};
static void compare_batch(const mhe_config *cfg, const char *what, int B, int T, uint64_t drop, const int *lengths,
                          const int *labels, batch_src src = {0, NULL}, int tf32 = 0, const int *types = NULL);

/* the ch. 4 and FNet kinds in two small hybrids, so that the sanitizer runs (the model group) execute
   every kernel of theirs (staticemb-qk and fixedseq-qk have none of their own: the norms, GEMMs and
   the copies of rndemb-qk); each kind alone, pre- and post-norm, TF32, longer sequences: the kinds group */
static void test_hybrids(void) {
    /* rndemb-qk first: its fixed stream runs through that block only */
    mhe_config c = hybrid(MHE_ARCH_DECODER, 0, MHE_ATTN_RNDEMB_QK, MHE_ATTN_TAYLOR, MHE_ATTN_NONAPPROX);
    compare_step(&c, "hybrid decoder rndemb-qk taylor nonapprox", 2, 9);
    decode_check(&c, "hybrid decoder", 3, 1e-5);
    c = hybrid(MHE_ARCH_ENCODER, 1, MHE_ATTN_FNET, MHE_ATTN_LINEAR, MHE_ATTN_MLP);
    compare_step(&c, "hybrid post-norm encoder fnet linear mlp", 2, 9);
}

/* the kernels of dropout, attention dropout, Admin and the classification head, small, for the
   sanitizer runs of the model group (the features group checks them across the kinds) */
static void test_feature_kernels(void) {
    static const int len[2] = {9, 4}, lab[2] = {1, 0};
    mhe_config c = hybrid(MHE_ARCH_ENCODER, 1, MHE_ATTN_MHE_ADD, MHE_ATTN_GQA, MHE_ATTN_MLP);
    c.admin = 1;
    c.dropout = 0.1f;
    c.attn_dropout = 0.2f;
    c.n_classes = 2;
    compare_batch(&c, "hybrid Admin classifier mhe-add gqa mlp, dropout", 2, 9, 5, len, lab);
    /* the cores that read the padding themselves, and fnet's DFT tables of two lengths */
    c = hybrid(MHE_ARCH_ENCODER, 0, MHE_ATTN_NONAPPROX, MHE_ATTN_FNET, MHE_ATTN_LINEAR);
    c.n_classes = 2;
    compare_batch(&c, "hybrid classifier nonapprox fnet linear, padded", 2, 9, 0, len, lab);
}

static void test_model_s2s(void);
static void test_model_s2s_features(void);

/* an imported BERT's config: post-norm, exact GELU, token types, the
   embeddings' norm, the MLM head's transform and output bias */
static mhe_config bert_config(void) {
    mhe_config c = small_config(MHE_ATTN_MHA, MHE_ARCH_ENCODER, 1, MHE_NORM_LAYERNORM, MHE_ACT_GELU_ERF);
    c.attn[1] = MHE_ATTN_MHA;
    c.emb_norm = 1;
    c.type_vocab = 2;
    c.head_transform = 1;
    c.head_bias = 1;
    return c;
}

/* token types of two padded texts of 11: a pair, the second text type 1 */
static const int *bert_pair_types(void) {
    static int types[2 * 11];
    for (int i = 0; i < 2 * 11; i++)
        types[i] = i % 11 >= 5;
    return types;
}

/* an imported BERT's pieces (mhe import) as a masked LM and as a classifier
   of padded pairs with the pooler (cls_pool=first): every kernel of theirs,
   small, for the sanitizer runs of the model group */
static void test_bert(void) {
    static const int len[2] = {11, 7}, lab[2] = {2, 0};
    mhe_config c = bert_config();
    compare_batch(&c, "bert masked LM (types, emb_norm, head transform and bias)", 2, 11, 0, NULL, NULL, {0, NULL}, 1,
                  bert_pair_types());
    c.n_classes = 3;
    c.cls_pool = MHE_POOL_FIRST;
    compare_batch(&c, "bert classifier (pooler), padded pairs", 2, 11, 0, len, lab, {0, NULL}, 1, bert_pair_types());
}

/* the same pieces with dropout, mean pooling, and on a decoder that decodes
   with its cache (the features group: fibers only, the kernels are test_bert's) */
static void test_bert_features(void) {
    static const int len[2] = {11, 7}, lab[2] = {2, 0};
    mhe_config c = bert_config();
    c.dropout = 0.1f;
    compare_batch(&c, "bert masked LM, dropout", 2, 11, 77, NULL, NULL, {0, NULL}, 0, bert_pair_types());
    c.dropout = 0.0f;
    c.n_classes = 3;
    c.cls_pool = MHE_POOL_MEAN;
    compare_batch(&c, "bert classifier (mean), padded pairs", 2, 11, 0, len, lab, {0, NULL}, 0, bert_pair_types());
    mhe_config d = small_config(MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU_ERF);
    d.emb_norm = 1;
    d.type_vocab = 2;
    d.head_transform = 1;
    d.head_bias = 1;
    compare_batch(&d, "decoder with BERT's pieces", 2, 11, 0, NULL, NULL, {0, NULL}, 0, NULL);
    decode_check(&d, "decoder with BERT's pieces", 9, 1e-5);
}

static void test_model(void) {
    char what[128];
    for (int kind : device_kinds) {
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        snprintf(what, sizeof what, "decoder %s", mhe_attn_kind_name(kind));
        compare_step(&c, what, 2, 19, &fp32_tol, 1, 0);
    }
    {
        mhe_config c = small_config(MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER, 1, MHE_NORM_RMSNORM, MHE_ACT_SILU);
        c.bias = 0;
        c.tie_embeddings = 0;
        compare_step(&c, "post-norm rmsnorm silu, no biases, untied head", 2, 19, &fp32_tol, 1, 0);
    }
    {
        mhe_config c = small_config(MHE_ATTN_MHE_ADD, MHE_ARCH_ENCODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_RELU);
        compare_step(&c, "encoder (masked LM) mhe-add", 2, 19, &fp32_tol, 1, 0);
    }
    test_feature_kernels();
    test_bert();
    test_model_s2s();
    test_model_s2s_features();
}

/* ---- the device model at a realistic size, float32, TF32 and bf16 -------------------- */

/* Every device kind in both layers of a pre-norm decoder with d_model D, 4
   heads of D/4, d_ff 4D, 256 bytes of vocabulary, B = 2 sequences of T: at
   T = 256 the attention runs 8 tiles of 32 keys, so the online softmax
   rescales across tiles in every kernel, forward and backward. The bounds:
   float32 as the small model's, but the gradients twice as loose (sums of
   512 rows and 1024 columns instead of 38 and 100). TF32 rounds each GEMM
   input to 10 explicit mantissa bits, a relative error up to u = 2^-11;
   a product carries 2u, a dot product of random-signed terms about that
   relative to its scale, and the errors of the GEMMs in a chain add: about
   ten GEMMs lead to a logit, twice that to a gradient, while the loss
   averages B*T tokens' errors. The emulation (the same rounding) measured at
   T = 256, D = 256 at most 0.01u on the loss, 1.4u on the logits and 3u on
   the gradients; the bounds leave room for the tensor cores' own
   accumulation: loss u, logits 8u, gradients 32u. bf16 keeps 7 explicit
   bits, u = 2^-8, and the same argument gives the same multiples of its u. */
static void test_large(int T, int D) {
    const double u = 1.0 / 2048, u_bf16 = 1.0 / 256;
    const step_tol tol[3] = {{1e-5, 1e-5, 4e-4}, {u, 8 * u, 32 * u}, {u_bf16, 8 * u_bf16, 32 * u_bf16}};
    char what[128];
    for (int kind : device_kinds) {
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.vocab_size = 256;
        c.d_model = D;
        c.n_heads = 4;
        c.d_head = D / 4;
        c.d_ff = 4 * D;
        c.max_seq_len = T;
        c.collab_dim = D / 4 + 16; /* query/key width unlike the heads' */
        for (int l = 0; l < c.n_layers; l++)
            c.attn[l] = kind;
        snprintf(what, sizeof what, "large %s B=2 T=%d d_model=%d", mhe_attn_kind_name(kind), T, D);
        compare_step(&c, what, 2, T, tol, 3, 1);
        if (kind != MHE_ATTN_MHA && kind != MHE_ATTN_MHE_MUL)
            continue;
        /* again in TF32 and bf16 with every GEMM on the 128 tiles: the pipelined cp.async kernel
           wherever the operands are aligned (a model's shapes at the sizes that pick it on a GPU) */
        long big_min = mhe__cu_gemm_big_min, pipe0 = mhe__cu_gemm_pipe_calls;
        mhe__cu_gemm_big_min = 0;
        snprintf(what, sizeof what, "128-tile %s B=2 T=%d d_model=%d", mhe_attn_kind_name(kind), T, D);
        compare_step(&c, what, 2, T, tol, 3, 1, MHE_CUDA_TF32);
        mhe__cu_gemm_big_min = big_min;
        CHECK(mhe__cu_gemm_pipe_calls > pipe0, "%s: the pipelined GEMM ran %ld times", what,
              mhe__cu_gemm_pipe_calls - pipe0);
    }
    test_hybrids();
}

/* every ch. 4 and FNet kind alone: pre-norm LayerNorm GELU, post-norm RMSNorm
   SiLU without biases and untied, a sequence past the attention tiles (32
   keys) and past a GEMM tile (64 rows) for the kinds that mix over time by
   GEMMs, and TF32 */
static void test_kinds(void) {
    char what[160];
    for (int kind : decon_kinds) {
        int arch = encoder_only(kind) ? MHE_ARCH_ENCODER : MHE_ARCH_DECODER;
        const char *name = mhe_attn_kind_name(kind);
        mhe_config c = small_config(kind, arch, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        snprintf(what, sizeof what, "%s %s", encoder_only(kind) ? "encoder" : "decoder", name);
        compare_step(&c, what);
        c = small_config(kind, arch, 1, MHE_NORM_RMSNORM, MHE_ACT_SILU);
        c.bias = 0;
        c.tie_embeddings = 0;
        snprintf(what, sizeof what, "%s post-norm rmsnorm silu, no biases, untied", name);
        compare_step(&c, what);
        if (!encoder_only(kind)) { /* bidirectional: every query sees every key */
            c = small_config(kind, MHE_ARCH_ENCODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_RELU);
            snprintf(what, sizeof what, "encoder (masked LM) %s", name);
            compare_step(&c, what);
        }
        c = small_config(kind, arch, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.max_seq_len = 72;
        snprintf(what, sizeof what, "%s, T = %d", name, encoder_only(kind) ? 70 : 45);
        compare_step(&c, what, 1, encoder_only(kind) ? 70 : 45);
        c = small_config(kind, arch, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        snprintf(what, sizeof what, "%s, TF32", name);
        compare_step(&c, what, 2, 19, 1, tf32_bounds);
    }
}

/* ---- training in lockstep: the CPU's trainer and the device's from the same init -------------- */

struct lockstep {
    mhe_trainer cpu;
    mhe_cuda_model g;
    mhe_cuda_trainer dev;
};

/* step s on both sides (the CPU's status checked there); returns the device's */
typedef std::function<mhe_status(lockstep &, int)> lockstep_step;

/* what a run must show beyond the losses tracking the CPU's (within 1e-3 relative at every
   step): the device's last loss below its first by more than fall (< 0: not checked), and
   after the sync its parameters within 1e-3 of the CPU's (params) */
struct lockstep_want {
    double fall;
    int params;
};

/* n steps of tc on the CPU (trainer on mc) and on the device (on md, initialised as mc) in
   lockstep; then after (evaluation: the device synced to md) while both trainers live. The
   models stay the caller's. */
static void lockstep_train(mhe_model *mc, mhe_model *md, const mhe_train_config *tc, const char *what, int n,
                           const lockstep_step &step, lockstep_want want,
                           const std::function<void(lockstep &)> &after = nullptr) {
    lockstep r;
    memset(&r, 0, sizeof r);
    if (mhe_trainer_init(&r.cpu, mc, tc) != MHE_OK) {
        CHECK(0, "train %s: CPU trainer: %s", what, r.cpu.err);
        return;
    }
    mhe_status st = mhe_cuda_model_init(&r.g, md, 0);
    if (st == MHE_OK && (st = mhe_cuda_trainer_init(&r.dev, &r.g, tc)) != MHE_OK)
        memcpy(r.g.err, r.dev.host.err, MHE_ERR_LEN);
    CHECK(st == MHE_OK, "train %s: device init: %s", what, r.g.err);
    if (st == MHE_OK) {
        double worst = 0;
        float first = 0, last_dev = 0;
        for (int s = 0; s < n && st == MHE_OK; s++) {
            st = step(r, s);
            worst = fmax(worst, fabs((double)r.dev.host.last_loss - r.cpu.last_loss) / r.cpu.last_loss);
            if (s == 0)
                first = r.cpu.last_loss;
            last_dev = r.dev.host.last_loss;
        }
        printf("train %s: %d steps, loss %.4f -> CPU %.4f, device %.4f (worst step difference %.2g relative)\n", what,
               n, (double)first, (double)r.cpu.last_loss, (double)last_dev, worst);
        CHECK(st == MHE_OK && worst < 1e-3, "train %s: device losses track the CPU's (worst rel diff %.3g) %s", what,
              worst, st == MHE_OK ? "" : r.dev.host.err);
        if (want.fall >= 0)
            CHECK(last_dev < first - want.fall, "train %s: loss falls on the device (%.3f -> %.3f; CPU %.3f)", what,
                  (double)first, (double)last_dev, (double)r.cpu.last_loss);
        CHECK(mhe_cuda_trainer_sync(&r.dev) == MHE_OK, "train %s: sync: %s", what, r.g.err);
        if (want.params) { /* the parameters come back to the host model: it evaluates as the CPU-trained one */
            /* but a key bias: its gradient is zero in exact arithmetic (it shifts a query's scores
               alike), so AdamW's normalised steps turn either side's rounding into steps of lr */
            std::vector<float> a, b;
            for (int i = 0; i < md->n_tensors; i++) {
                const mhe_tensor *t = &md->params[i];
                size_t off = (size_t)(t->data - md->param_data), len = strlen(t->name);
                if (len >= 7 && !strcmp(t->name + len - 7, "wk.bias"))
                    continue;
                a.insert(a.end(), md->param_data + off, md->param_data + off + t->size);
                b.insert(b.end(), mc->param_data + off, mc->param_data + off + t->size);
            }
            CHECK(rel_err(a, b) < 1e-3, "train %s: synced parameters equal the CPU's (rel %.3g)", what, rel_err(a, b));
        }
        if (after)
            after(r);
        mhe_cuda_trainer_free(&r.dev);
    }
    mhe_cuda_model_free(&r.g);
    mhe_trainer_free(&r.cpu);
}

/* Two runs of one training step on the same inputs give the same bits only where the float
   atomics (the embedding backward's, the fixed stream's) add in one order: the emulation's fibers
   mode, which runs threads and blocks one at a time. A GPU, and the emulation's threaded modes,
   add them in the order the threads arrive, and AdamW turns a last-bit difference in a gradient
   near zero into a step of up to 2 lr: two trainers there agree on the parameters within
   same_run_tol (rel_err, relative to the largest parameter; measured under ASan's thread per CUDA
   thread: 2.2e-5 after 7 steps) and on the loss and gradient norm within a tenth of it. */
#if defined(MHE_CUDA_EMULATE) && !defined(MHE_EMU_THREADS) && !defined(MHE_EMU_BLOCKS)
static const double same_run_tol = 0.0;
#else
static const double same_run_tol = 1e-3;
#endif

static bool same_run(double a, double b) { return fabs(a - b) <= 0.1 * same_run_tol * fabs(b); }

/* two device trainers on two copies of one model (the same init), to compare trainer modes */
struct trainer_pair {
    mhe_model m[2];
    mhe_cuda_model g[2];
    mhe_cuda_trainer t[2];
    int ok = 1;
    trainer_pair(const mhe_config &c, const mhe_train_config &tc) {
        memset(m, 0, sizeof m);
        memset(g, 0, sizeof g);
        memset(t, 0, sizeof t);
        for (int i = 0; i < 2 && ok; i++)
            ok = mhe_model_init(&m[i], &c, 11, NULL) == MHE_OK && mhe_cuda_model_init(&g[i], &m[i], 0) == MHE_OK &&
                 mhe_cuda_trainer_init(&t[i], &g[i], &tc) == MHE_OK;
    }
    ~trainer_pair() {
        for (int i = 0; i < 2; i++) {
            mhe_cuda_trainer_free(&t[i]);
            mhe_cuda_model_free(&g[i]);
            mhe_model_free(&m[i]);
        }
    }
    std::vector<float> params(int i) { return host(g[i].params, m[i].n_params); }
};

/* A deferred trainer (no blocking copy in a step: the loss and norm read back by
   mhe_cuda_trainer_stats) against the default one from the same init: the same parameters bit
   for bit after 12 steps (the clipping scale computed on the device with the host's float
   operations; clip is low enough to act), the same last loss and norm. Then a non-finite
   gradient: the default trainer refuses the step at once; the deferred one returns from it,
   makes no update from it on (the parameters stay those before it) and names it at the next
   mhe_cuda_trainer_stats. */
static void test_train_deferred(const int *data, size_t n) {
    mhe_config c = small_config(MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
    c.vocab_size = 256;
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 2;
    tc.seq_len = 16;
    tc.lr = 3e-3f;
    tc.warmup = 2;
    tc.steps = 40;
    tc.clip = 0.5f;
    trainer_pair pair(c, tc);
    mhe_model *m = pair.m;
    mhe_cuda_model *g = pair.g;
    mhe_cuda_trainer *t = pair.t;
    CHECK(pair.ok, "deferred trainer: init: %s %s", g[0].err, g[1].err);
    if (!pair.ok)
        return;
    t[1].deferred = 1;
    int bad_steps = 0, stats_calls = 0;
    for (int s = 0; s < 12; s++) {
        bad_steps += mhe_cuda_trainer_step(&t[0], data, n) != MHE_OK;
        bad_steps += mhe_cuda_trainer_step(&t[1], data, n) != MHE_OK;
        if (s % 5 == 4) /* statistics now and then, as a log line would read them */
            stats_calls += mhe_cuda_trainer_stats(&t[1]) == MHE_OK;
    }
    CHECK(bad_steps == 0 && stats_calls == 2, "deferred trainer: 12 steps (%d failed, %d stats calls)", bad_steps,
          stats_calls);
    CHECK(mhe_cuda_trainer_stats(&t[1]) == MHE_OK && same_run(t[1].host.last_loss, t[0].host.last_loss) &&
              same_run(t[1].host.last_grad_norm, t[0].host.last_grad_norm) && t[0].host.last_grad_norm > tc.clip,
          "deferred trainer: last loss %.9g norm %.9g, default %.9g %.9g (clip %g)", (double)t[1].host.last_loss,
          (double)t[1].host.last_grad_norm, (double)t[0].host.last_loss, (double)t[0].host.last_grad_norm,
          (double)tc.clip);
    std::vector<float> p0 = host(g[0].params, m[0].n_params), p1 = host(g[1].params, m[1].n_params);
    CHECK(rel_err(p1, p0) <= same_run_tol && t[0].host.step == 12 && t[1].host.step == 12,
          "deferred trainer: the same parameters as the default one, bit for bit where the atomics add in one order "
          "(max rel %.3g, bound %.3g)", rel_err(p1, p0), same_run_tol);
    /* a NaN in one weight: every gradient after it is NaN */
    float nan = NAN;
    for (int i = 0; i < 2; i++)
        cudaMemcpy(g[i].params + 5, &nan, sizeof nan, cudaMemcpyHostToDevice);
    CHECK(mhe_cuda_trainer_step(&t[0], data, n) == MHE_ERR_NONFINITE && t[0].host.step == 12,
          "default trainer: a non-finite norm refuses the step (%s)", t[0].host.err);
    std::vector<float> before = host(g[1].params, m[1].n_params);
    mhe_status s1 = mhe_cuda_trainer_step(&t[1], data, n), s2 = mhe_cuda_trainer_step(&t[1], data, n);
    CHECK(s1 == MHE_OK && s2 == MHE_OK, "deferred trainer: the non-finite step returns without waiting");
    mhe_status st = mhe_cuda_trainer_stats(&t[1]);
    std::vector<float> after = host(g[1].params, m[1].n_params);
    int same = 0;
    for (size_t i = 0; i < after.size(); i++)
        same += memcmp(&after[i], &before[i], sizeof(float)) == 0;
    CHECK(st == MHE_ERR_NONFINITE && strstr(t[1].host.err, "at step 12;") && same == (int)after.size(),
          "deferred trainer: the non-finite step named at the next stats (%s), no update since (%d of %zu unchanged)",
          t[1].host.err, same, after.size());
    CHECK(mhe_cuda_trainer_sync(&t[1]) == MHE_ERR_NONFINITE, "deferred trainer: sync reports it too");
}

/* ---- training: 20 steps on real text, device against CPU --------------------------- */

static void test_train(void) {
    int *data = NULL;
    size_t n = 0;
    char err[MHE_ERR_LEN];
    if (mhe_read_text_tokens("examples/data/train.txt", &data, &n, NULL, err) != MHE_OK) {
        CHECK(0, "corpus: %s", err);
        return;
    }
    /* the two layers' kinds; the ch. 4 and FNet kinds in pairs (fnet, linear: a masked-LM encoder) */
    static const int runs[][3] = {{MHE_ATTN_MHA, MHE_ATTN_MHA, MHE_ARCH_DECODER},
                                  {MHE_ATTN_MHE_MUL, MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER},
                                  {MHE_ATTN_MHE_ADD, MHE_ATTN_MHE_ADD, MHE_ARCH_DECODER},
                                  {MHE_ATTN_COLLAB, MHE_ATTN_COLLAB, MHE_ARCH_DECODER},
                                  {MHE_ATTN_TAYLOR, MHE_ATTN_NONAPPROX, MHE_ARCH_DECODER},
                                  {MHE_ATTN_STATICEMB_QK, MHE_ATTN_RNDEMB_QK, MHE_ARCH_DECODER},
                                  {MHE_ATTN_MLP, MHE_ATTN_FIXEDSEQ_QK, MHE_ARCH_DECODER},
                                  {MHE_ATTN_FNET, MHE_ATTN_LINEAR, MHE_ARCH_ENCODER}};
    for (const auto &run : runs) {
        mhe_config c = small_config(run[0], run[2], 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", mhe_attn_kind_name(run[0]), run[1] != run[0] ? "+" : "",
                 run[1] != run[0] ? mhe_attn_kind_name(run[1]) : "");
        mhe_train_config tc = mhe_train_config_default();
        mhe_model mc, md;
        c.vocab_size = 256;
        c.init_std = mhe_config_default().init_std; /* as the CLI trains: AdamW's steps, not large scores, are tested */
        c.attn[0] = run[0];
        c.attn[1] = run[1];
        tc.batch = 2;
        tc.seq_len = 16;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 20;
        tc.seed = 5;
        CHECK(mhe_model_init(&mc, &c, 11, NULL) == MHE_OK, "mhe_model_init: %s", mc.err);
        CHECK(mhe_model_init(&md, &c, 11, NULL) == MHE_OK, "mhe_model_init: %s", md.err);
        lockstep_train(&mc, &md, &tc, name, 20, [&](lockstep &r, int) {
            CHECK(mhe_trainer_step(&r.cpu, data, n) == MHE_OK, "mhe_trainer_step: %s", r.cpu.err);
            return mhe_cuda_trainer_step(&r.dev, data, n);
        }, {0.3, 1});
        mhe_model_free(&mc);
        mhe_model_free(&md);
    }
    test_train_deferred(data, n);
    free(data);
}

/* ---- decoding: token by token equals the full forward ------------------------------- */

static void test_decode(void) {
    for (int kind : decon_kinds) { /* every kind the CPU decodes: not fnet, linear (encoders) */
        if (encoder_only(kind))
            continue;
        /* pre-norm, so that the scores are of order 1 (post-norm reads the small raw embeddings); mlp has none */
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, kind == MHE_ATTN_MLP, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        char what[64];
        snprintf(what, sizeof what, "%s%s", mhe_attn_kind_name(kind), kind == MHE_ATTN_MLP ? " post-norm" : "");
        decode_check(&c, what, 13, 1e-5);
    }
    for (int kind : device_kinds) {
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, kind == MHE_ATTN_MQA, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        decode_check(&c, mhe_attn_kind_name(kind), 13, 1e-5);
    }
    { /* the MHE cache holds one head: d_h K and d_h V per position (layer 1 of small_config is mha) */
        mhe_config c = small_config(MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_kv_cache kc;
        memset(&kc, 0, sizeof kc);
        memset(&g, 0, sizeof g);
        mhe_status st = mhe_model_init(&m, &c, 3, NULL);
        if (st == MHE_OK && (st = mhe_cuda_model_init(&g, &m, 0)) == MHE_OK) {
            st = mhe_cuda_kv_cache_init(&kc, &g, 13);
            CHECK(st == MHE_OK && kc.kv_w[0] == 2 * mhe_config_d_head(&c) && kc.kv_w[1] == 2 * c.n_heads * mhe_config_d_head(&c),
                  "MHE-MUL caches one head (%d floats per position; mha %d)", kc.kv_w[0], kc.kv_w[1]);
            mhe_cuda_kv_cache_free(&kc);
            mhe_cuda_model_free(&g);
        } else {
            CHECK(0, "MHE-MUL cache: %s%s", m.err, g.err);
        }
        mhe_model_free(&m);
    }
}

/* ---- prefill: the prompt as one batch = token by token = the CPU's decoding ------------------ */

/* the first len rows of every layer's device cache (K|V, or el-att's inputs) */
static std::vector<float> cache_rows(const mhe_cuda_kv_cache *kc, int n_layers, int len) {
    std::vector<float> all;
    for (int l = 0; l < n_layers; l++) {
        std::vector<float> h = host(kc->kv[l], (size_t)len * kc->kv_w[l]);
        all.insert(all.end(), h.begin(), h.end());
    }
    return all;
}

/* A prompt of P tokens, then D decode steps, on a decoder whose layers are `kind` (and mha). The
   reference is the CPU library's own decoding (mhe_decode_step) at every position from P - 1 on:
   one prefill then steps; the prompt in three prefills (chunks 1, ~P/2, the rest: later ones see
   cached keys, edges off the 32-key tiles); and, where step is set, P single device steps then
   steps (with equal caches). Returns the worst relative difference from the CPU; *wsteps that
   of the device's prefill from its own token-by-token decoding. */
static double check_prefill(int kind, int P, int D, int tf32, int step, double tol, double *wsteps) {
    mhe_config c = small_config(kind, MHE_ARCH_DECODER, kind == MHE_ATTN_MQA, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
    const char *name = mhe_attn_kind_name(kind);
    mhe_model m;
    mhe_kv_cache kv;
    mhe_cuda_model g;
    mhe_cuda_kv_cache ka, kb;
    int V = c.vocab_size, L = P + D;
    double worst = 0, wstep = 0;
    c.max_seq_len = L;
    std::vector<int> tok(L);
    for (int i = 0; i < L; i++)
        tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    CHECK(mhe_model_init(&m, &c, 5, NULL) == MHE_OK, "mhe_model_init: %s", m.err);
    /* ref[i]: the CPU's logits after position P - 1 + i */
    std::vector<std::vector<float>> ref;
    mhe_status st = mhe_kv_cache_init(&kv, &m, L, NULL);
    for (int t = 0; t < L && st == MHE_OK; t++) {
        st = mhe_decode_step(&m, &kv, tok[t]);
        if (t >= P - 1)
            ref.emplace_back(kv.logits, kv.logits + V);
    }
    mhe_kv_cache_free(&kv);
    CHECK(st == MHE_OK, "prefill %s: CPU decoding: %s", name, m.err);
    if (st != MHE_OK || (st = mhe_cuda_model_init(&g, &m, tf32)) != MHE_OK) {
        CHECK(st == MHE_OK, "prefill %s: device init: %s", name, g.err);
        mhe_model_free(&m);
        return 1e30;
    }
    std::vector<float> got(V), one(V);
    st = mhe_cuda_kv_cache_init(&ka, &g, L);
    if (st == MHE_OK)
        st = mhe_cuda_kv_cache_init(&kb, &g, L);
    /* (a) one prefill, then decode steps */
    if (st == MHE_OK)
        st = mhe_cuda_prefill(&g, &ka, tok.data(), P, got.data());
    CHECK(st == MHE_OK && ka.len == P, "prefill %s: %d tokens: %s", name, P, g.err);
    if (st == MHE_OK)
        worst = rel_err(got, ref[0]);
    /* (b) the same prompt token by token: the same logits and the same cache */
    for (int t = 0; t < P && st == MHE_OK && step; t++)
        st = mhe_cuda_decode_step(&g, &kb, tok[t], one.data());
    if (st == MHE_OK && step) {
        wstep = rel_err(got, one);
        double ec = rel_err(cache_rows(&ka, c.n_layers, P), cache_rows(&kb, c.n_layers, P));
        CHECK(ec < tol, "prefill %s: the cache equals token-by-token decoding's (rel %.3g)", name, ec);
        if (kind == MHE_ATTN_MHE_ADD) {
            std::vector<float> ba = host(ka.kb, (size_t)P * c.n_heads), bb = host(kb.kb, (size_t)P * c.n_heads);
            CHECK(rel_err(ba, bb) < tol, "prefill %s: the key biases equal token-by-token decoding's", name);
        }
    }
    for (int i = 0; i < D && st == MHE_OK; i++) {
        st = mhe_cuda_decode_step(&g, &ka, tok[P + i], got.data());
        double e = rel_err(got, ref[i + 1]);
        worst = e > worst ? e : worst;
        if (step && st == MHE_OK) {
            st = mhe_cuda_decode_step(&g, &kb, tok[P + i], one.data());
            e = rel_err(one, ref[i + 1]);
            worst = e > worst ? e : worst;
        }
    }
    CHECK(st == MHE_OK && worst < tol, "prefill %s%s: %d-token prompt and %d steps equal the CPU's decoding (rel %.3g) %s",
          name, tf32 ? " (tf32)" : "", P, D, worst, st == MHE_OK ? "" : g.err);
    if (step)
        CHECK(wstep < tol, "prefill %s: equals the device's token-by-token decoding (rel %.3g)", name, wstep);
    /* (c) the prompt in three prefills: queries of the later ones attend to cached keys too */
    if (st == MHE_OK) {
        int cut[3] = {1, P / 2 + 3, P};
        ka.len = 0;
        for (int k = 0, at = 0; k < 3 && st == MHE_OK; at = cut[k], k++)
            st = mhe_cuda_prefill(&g, &ka, tok.data() + at, cut[k] - at, got.data());
        double e = st == MHE_OK ? rel_err(got, ref[0]) : 1e30;
        CHECK(st == MHE_OK && ka.len == P && e < tol, "prefill %s: in chunks of %d, %d, %d after cached tokens (rel %.3g) %s",
              name, cut[0], cut[1] - cut[0], P - cut[1], e, st == MHE_OK ? "" : g.err);
        worst = e > worst ? e : worst;
    }
    if (wsteps)
        *wsteps = wstep;
    mhe_cuda_kv_cache_free(&ka);
    mhe_cuda_kv_cache_free(&kb);
    mhe_cuda_model_free(&g);
    mhe_model_free(&m);
    return worst;
}

static void test_prefill(void) {
    double worst = 0, wsteps = 0;
    for (int kind : device_kinds) {
        double ws = 0, e = check_prefill(kind, 70, 3, 0, 0, 1e-5, NULL); /* 70 keys: three tiles of 32 */
        worst = e > worst ? e : worst;
        /* token by token (a launch sequence per token): a shorter prompt, still two tiles */
        e = check_prefill(kind, 34, 1, 0, 1, 1e-5, &ws);
        worst = e > worst ? e : worst;
        wsteps = ws > wsteps ? ws : wsteps;
    }
    /* the ch. 4 kinds that decode: the recurrent ones step through the prompt's positions inside the one
       prefill, the fixed kinds read their stream's Q|K rows for all of them at once */
    for (int kind : decon_kinds) {
        if (encoder_only(kind))
            continue;
        double ws = 0, e = check_prefill(kind, 40, 2, 0, 1, 1e-5, &ws);
        worst = e > worst ? e : worst;
        wsteps = ws > wsteps ? ws : wsteps;
    }
    printf("prefill: worst difference from the CPU's decoding %.3g, from the device's token-by-token %.3g (relative to max |logit|)\n",
           worst, wsteps);
    /* TF32 GEMMs: the same path, the tensor cores' rounding (10-bit mantissas) */
    double e = check_prefill(MHE_ATTN_MHE_MUL, 40, 2, 1, 0, 1e-2, NULL);
    printf("prefill with TF32 GEMMs: %.3g from the CPU\n", e);
}

/* ---- evaluation: the device's forward passes over the CPU's windows and batches --------------- */

static void test_eval(void) {
    int *data = NULL;
    size_t n = 0;
    char err[MHE_ERR_LEN];
    if (mhe_read_text_tokens("examples/data/valid.txt", &data, &n, NULL, err) != MHE_OK) {
        CHECK(0, "corpus: %s", err);
        return;
    }
    static const struct { int kind, arch; } cases[] = {{MHE_ATTN_MHA, MHE_ARCH_DECODER},
                                                      {MHE_ATTN_MHE_ADD, MHE_ARCH_DECODER},
                                                      {MHE_ATTN_COLLAB, MHE_ARCH_ENCODER}};
    double worst = 0;
    for (const auto &k : cases) {
        mhe_config c = small_config(k.kind, k.arch, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        mhe_model m;
        mhe_cuda_model g;
        const char *what = k.arch == MHE_ARCH_ENCODER ? "encoder" : "decoder";
        c.vocab_size = 256;
        CHECK(mhe_model_init(&m, &c, 9, NULL) == MHE_OK, "mhe_model_init: %s", m.err);
        if (mhe_cuda_model_init(&g, &m, 0) != MHE_OK) {
            CHECK(0, "eval: device init: %s", g.err);
            mhe_model_free(&m);
            continue;
        }
        float lc = 0, ld = 0;
        /* 9 windows of 20 in batches of 4, 4, 1 (the device reallocates for none of them) */
        mhe_status sc = mhe_evaluate(&m, data, 200, 4, 20, 0, &lc), sd = mhe_cuda_evaluate(&g, data, 200, 4, 20, 0, &ld);
        worst = fmax(worst, fabs((double)ld - lc) / lc);
        CHECK(sc == MHE_OK && sd == MHE_OK && fabs((double)ld - lc) < 1e-5 * lc, "eval %s %s: loss %.7f vs CPU %.7f %s",
              what, mhe_attn_kind_name(k.kind), (double)ld, (double)lc, g.err);
        sc = mhe_evaluate(&m, data, 2000, 3, 24, 2, &lc);
        sd = mhe_cuda_evaluate(&g, data, 2000, 3, 24, 2, &ld);
        worst = fmax(worst, fabs((double)ld - lc) / lc);
        CHECK(sc == MHE_OK && sd == MHE_OK && fabs((double)ld - lc) < 1e-5 * lc, "eval %s %s, 2 batches: %.7f vs CPU %.7f",
              what, mhe_attn_kind_name(k.kind), (double)ld, (double)lc);
        if (k.arch == MHE_ARCH_DECODER) {
            int64_t nc = 0, nd = 0;
            sc = mhe_evaluate_strided(&m, data, 150, 3, 20, 7, &lc, &nc);
            sd = mhe_cuda_evaluate_strided(&g, data, 150, 3, 20, 7, &ld, &nd);
            worst = fmax(worst, fabs((double)ld - lc) / lc);
            CHECK(sc == MHE_OK && sd == MHE_OK && nc == nd && nc == 149 && fabs((double)ld - lc) < 1e-5 * lc,
                  "eval strided %s: loss %.7f vs CPU %.7f, %lld vs %lld scored", mhe_attn_kind_name(k.kind), (double)ld,
                  (double)lc, (long long)nd, (long long)nc);
        } else {
            CHECK(mhe_cuda_evaluate_strided(&g, data, 150, 3, 20, 7, &ld, NULL) == MHE_ERR_CONFIG && strstr(g.err, "decoder"),
                  "strided eval of an encoder: %s", g.err);
        }
        CHECK(mhe_cuda_evaluate(&g, data, 10, 4, 20, 0, &ld) == MHE_ERR_DATA && strstr(g.err, "needs at least"),
              "eval: too little text: %s", g.err);
        mhe_cuda_model_free(&g);
        mhe_model_free(&m);
    }
    printf("eval: worst relative difference of the device's mean loss from the CPU's %.3g\n", worst);
    { /* an error of the device's forward reaches the caller: bytes past a 61-token vocabulary */
        mhe_config c = small_config(MHE_ATTN_MHA, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        mhe_model m;
        mhe_cuda_model g;
        float ld = 0;
        CHECK(mhe_model_init(&m, &c, 9, NULL) == MHE_OK, "mhe_model_init: %s", m.err);
        if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
            CHECK(mhe_cuda_evaluate(&g, data, 200, 4, 20, 0, &ld) == MHE_ERR_DATA && strstr(g.err, "outside the vocabulary"),
                  "eval: a token past the vocabulary: %s", g.err);
            mhe_cuda_model_free(&g);
        }
        mhe_model_free(&m);
    }
    free(data);
}

/* two encoder and two decoder blocks of the given kinds (enc_attn, attn, cross_attn) */
struct s2s_kinds {
    int enc[2], self[2], cross[2], post;
};

/* every kind the device runs appears in some stack; every kind a cross-attention may be (the
   softmax kinds, taylor, staticemb-qk: Q, K from both sides' embeddings through norm3) appears
   as one, staticemb-qk pre- and post-norm */
static const s2s_kinds s2s_cases[] = {
    {{MHE_ATTN_MHA, MHE_ATTN_TAYLOR}, {MHE_ATTN_MHA, MHE_ATTN_MHE_MUL}, {MHE_ATTN_MHA, MHE_ATTN_MHE_ADD}, 0},
    {{MHE_ATTN_NONAPPROX, MHE_ATTN_STATICEMB_QK}, {MHE_ATTN_STATICEMB_QK, MHE_ATTN_GQA}, {MHE_ATTN_COLLAB, MHE_ATTN_EL_ATT}, 1},
    {{MHE_ATTN_FNET, MHE_ATTN_MLP}, {MHE_ATTN_SHA, MHE_ATTN_TAYLOR}, {MHE_ATTN_TAYLOR, MHE_ATTN_SKV}, 0},
    {{MHE_ATTN_LINEAR, MHE_ATTN_MHE_ADD}, {MHE_ATTN_NONAPPROX, MHE_ATTN_MQA}, {MHE_ATTN_MHE_MUL, MHE_ATTN_MQA}, 0},
    {{MHE_ATTN_COLLAB, MHE_ATTN_EL_ATT}, {MHE_ATTN_MLP, MHE_ATTN_COLLAB}, {MHE_ATTN_GQA, MHE_ATTN_SHA}, 1},
    {{MHE_ATTN_STATICEMB_QK, MHE_ATTN_MHA}, {MHE_ATTN_MHA, MHE_ATTN_STATICEMB_QK}, {MHE_ATTN_STATICEMB_QK, MHE_ATTN_MHA}, 0},
    {{MHE_ATTN_MHA, MHE_ATTN_MHA}, {MHE_ATTN_MHA, MHE_ATTN_MHA}, {MHE_ATTN_MHA, MHE_ATTN_STATICEMB_QK}, 1},
};

static mhe_config s2s_config(const s2s_kinds &k) {
    mhe_config c = small_config(MHE_ATTN_MHA, MHE_ARCH_ENCDEC, k.post, k.post ? MHE_NORM_RMSNORM : MHE_NORM_LAYERNORM,
                                k.post ? MHE_ACT_SILU : MHE_ACT_GELU);
    c.enc_layers = 2;
    for (int l = 0; l < 2; l++) {
        c.enc_attn[l] = k.enc[l];
        c.attn[l] = k.self[l];
        c.cross_attn[l] = k.cross[l];
    }
    c.init_std = 0.1f; /* scores of order 1, as small_config's ch. 4 kinds */
    return c;
}

static void s2s_name(const s2s_kinds &k, char *out, size_t len) {
    snprintf(out, len, "encdec %s+%s | %s+%s x %s+%s%s", mhe_attn_kind_name(k.enc[0]), mhe_attn_kind_name(k.enc[1]),
             mhe_attn_kind_name(k.self[0]), mhe_attn_kind_name(k.self[1]), mhe_attn_kind_name(k.cross[0]),
             mhe_attn_kind_name(k.cross[1]), k.post ? " post-norm" : "");
}

/* ---- dropout, Admin and the classification head on the device ------------------------------ */

/* the worst gaps of the compare_batch calls, per feature (the summary lines) */
static step_err batch_worst[2];

/* One forward and backward of a batch on both sides, in training mode with
   a dropout seed (drop) or not: the loss, the logits (class logits with
   labels) and every gradient, the device in float32, then in TF32 too when
   tf32 is set (tf32_bounds). lengths pads the sequences, labels classifies
   them (else per-token targets); an encoder-decoder reads a source (src).
   With admin, the CPU's profiling pass sets the omegas first, so they are
   not 1. Under MHE_TEST_VERBOSE a line gives the worst gaps. */
static void compare_batch(const mhe_config *cfg, const char *what, int B, int T, uint64_t drop, const int *lengths,
                          const int *labels, batch_src src, int tf32, const int *types) {
    mhe_model m;
    mhe_batch bt;
    int V = cfg->vocab_size, Ts = cfg->arch == MHE_ARCH_ENCDEC ? (src.Ts > 0 ? src.Ts : T) : 0;
    std::vector<int> tok(B * T), tgt(B * T), stok((size_t)B * Ts + 1);
    float loss_cpu = 0;
    if (mhe_model_init(&m, cfg, 7, NULL) != MHE_OK) {
        CHECK(0, "%s: model init: %s", what, m.err);
        return;
    }
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
        tgt[i] = cfg->arch == MHE_ARCH_ENCODER && i % 3 ? -1 : (int)mhe_rng_below(&test_rng, (uint32_t)V);
    }
    for (int i = 0; i < B * Ts; i++)
        stok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    memset(&bt, 0, sizeof bt);
    bt.B = B;
    bt.T = T;
    bt.tokens = tok.data();
    bt.targets = labels ? NULL : tgt.data();
    bt.labels = labels;
    bt.lengths = lengths;
    bt.types = types;
    if (Ts) {
        bt.Ts = Ts;
        bt.src = stok.data();
        bt.src_lengths = src.lengths;
    }
    m.dropout_seed = drop;
    if (cfg->admin)
        CHECK(mhe_model_admin_init(&m, &bt) == MHE_OK, "%s: CPU Admin profiling: %s", what, m.err);
    m.training = drop != 0;
    mhe_model_zero_grad(&m);
    mhe_status st = mhe_model_forward_batch(&m, &bt, &loss_cpu);
    CHECK(st == MHE_OK, "%s: CPU forward: %s", what, m.err);
    size_t nl = labels ? (size_t)B * cfg->n_classes : (size_t)B * T * V;
    std::vector<float> logits_cpu(labels ? m.acts.cls_logits : m.acts.logits, (labels ? m.acts.cls_logits : m.acts.logits) + nl);
    OK(mhe_model_backward(&m));
    std::vector<float> grad_cpu(m.grad_data, m.grad_data + m.n_params);
    double gmax = 0;
    for (float x : grad_cpu)
        gmax = fabs(x) > gmax ? fabs(x) : gmax;
    for (int p = 0; p <= tf32; p++) {
        const step_tol &tol = p ? tf32_bounds : fp32_bounds;
        step_err worst = {0, 0, 0, ""};
        char w[200];
        float loss_dev = 0;
        mhe_cuda_model g;
        snprintf(w, sizeof w, "%s%s", what, p ? " tf32" : "");
        st = mhe_cuda_model_init(&g, &m, p);
        if (st == MHE_OK)
            st = mhe_cuda_model_forward_batch(&g, &bt, &loss_dev);
        if (st == MHE_OK)
            st = mhe_cuda_model_backward(&g);
        CHECK(st == MHE_OK, "%s: device step: %s", w, g.err);
        if (st != MHE_OK)
            break;
        worst.loss = fabs((double)loss_dev - loss_cpu) / fabs((double)loss_cpu);
        CHECK_CLOSE(loss_dev, loss_cpu, tol.loss, tol.loss, "%s: loss %.7f vs CPU %.7f", w, (double)loss_dev,
                    (double)loss_cpu);
        std::vector<float> logits_dev(nl);
        mhe_cuda_model_logits(&g, logits_dev.data());
        worst.logits = rel_err(logits_dev, logits_cpu);
        CHECK(worst.logits < tol.logits, "%s: logits rel err %.3g", w, worst.logits);
        mhe_cuda_model_grads(&g);
        int bad = 0;
        for (int i = 0; i < m.n_tensors; i++) {
            const mhe_tensor *t = &m.params[i];
            size_t off = (size_t)(t->data - m.param_data);
            std::vector<float> a(m.grad_data + off, m.grad_data + off + t->size),
                b(grad_cpu.begin() + (long)off, grad_cpu.begin() + (long)(off + t->size));
            double e = rel_err(a, b), mx = 0;
            for (float x : b)
                mx = fabs(x) > mx ? fabs(x) : mx;
            if (mx < 1e-3 * gmax) /* zero in exact arithmetic (MHE-ADD's key bias): against the model's scale */
                e = e * mx / (1e-3 * gmax);
            if (!(e <= worst.grad)) {
                worst.grad = e == e ? e : 1e30;
                snprintf(worst.grad_name, sizeof worst.grad_name, "%s", t->name);
            }
            if (!(e < tol.grad)) {
                bad++;
                printf("  %s: gradient of %s rel err %.3g (max |g| %.3g)\n", w, t->name, e, mx);
            }
        }
        CHECK(bad == 0, "%s: %d of %d gradients differ from the CPU's", w, bad, m.n_tensors);
        if (getenv("MHE_TEST_VERBOSE"))
            printf("  %s: loss %.2g logits %.2g gradient %.2g (%s)\n", w, worst.loss, worst.logits, worst.grad,
                   worst.grad_name);
        step_err &bw = batch_worst[p];
        bw.loss = fmax(bw.loss, worst.loss);
        bw.logits = fmax(bw.logits, worst.logits);
        if (worst.grad >= bw.grad) {
            bw.grad = worst.grad;
            snprintf(bw.grad_name, sizeof bw.grad_name, "%s: %s", what, worst.grad_name);
        }
        mhe_cuda_model_free(&g);
    }
    mhe_model_free(&m);
}

static const char cls_text[] = "0\tthe cat sat\n1\ta dog ran far away from home\n2\tno\n0\tcats sit on mats all day long\n"
                               "1\tdogs\n2\tnothing at all here\n0\tcat\n1\tthe dog barked at the mail\n";

static void test_features(void) {
    char what[160];
    test_bert_features();
    /* dropout and attention dropout: the same masks as the CPU's, on every kind with attention weights */
    static const int drop_kinds[] = {MHE_ATTN_MHA,     MHE_ATTN_SHA,    MHE_ATTN_GQA,   MHE_ATTN_EL_ATT,
                                     MHE_ATTN_MHE_ADD, MHE_ATTN_MHE_MUL, MHE_ATTN_COLLAB, MHE_ATTN_TAYLOR,
                                     MHE_ATTN_STATICEMB_QK, MHE_ATTN_FIXEDSEQ_QK};
    for (int kind : drop_kinds) {
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.dropout = 0.1f;
        c.attn_dropout = 0.2f;
        snprintf(what, sizeof what, "dropout decoder %s", mhe_attn_kind_name(kind));
        compare_batch(&c, what, 2, 19, 0x1234567ULL + (uint64_t)kind, NULL, NULL);
    }
    {
        mhe_config c = small_config(MHE_ATTN_MHE_ADD, MHE_ARCH_ENCODER, 1, MHE_NORM_RMSNORM, MHE_ACT_SILU);
        c.dropout = 0.15f;
        c.attn_dropout = 0.3f;
        compare_batch(&c, "dropout post-norm encoder mhe-add", 2, 19, 99, NULL, NULL);
        c = hybrid(MHE_ARCH_ENCODER, 0, MHE_ATTN_FNET, MHE_ATTN_LINEAR, MHE_ATTN_MLP);
        c.dropout = 0.1f;
        compare_batch(&c, "dropout encoder fnet linear mlp", 2, 9, 7, NULL, NULL);
    }
    /* Admin: post-norm, omegas from the profiling pass, with dropout */
    static const int admin_kinds[] = {MHE_ATTN_SHA, MHE_ATTN_MHE_MUL, MHE_ATTN_MLP};
    for (int kind : admin_kinds) {
        mhe_config c = small_config(kind, MHE_ARCH_DECODER, 1, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.admin = 1;
        c.n_layers = 3;
        c.attn[2] = kind;
        c.dropout = kind == MHE_ATTN_MLP ? 0.1f : 0.0f;
        snprintf(what, sizeof what, "admin decoder %s%s", mhe_attn_kind_name(kind), c.dropout > 0 ? " dropout" : "");
        compare_batch(&c, what, 2, 13, c.dropout > 0 ? 31 : 0, NULL, NULL);
    }
    { /* the device's profiling pass sets the omegas the CPU's does; decoding reads them */
        mhe_config c = small_config(MHE_ATTN_SHA, MHE_ARCH_DECODER, 1, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.admin = 1;
        c.n_layers = 4;
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_kv_cache kc;
        std::vector<int> tok(2 * 11);
        for (int &t : tok)
            t = (int)mhe_rng_below(&test_rng, (uint32_t)c.vocab_size);
        mhe_batch bt;
        memset(&bt, 0, sizeof bt);
        bt.B = 2;
        bt.T = 11;
        bt.tokens = tok.data();
        memset(&kc, 0, sizeof kc);
        OK(mhe_model_init(&m, &c, 5, NULL));
        mhe_status st = mhe_cuda_model_init(&g, &m, 0);
        if (st == MHE_OK)
            st = mhe__cu_admin_init(&g, &bt);
        if (st == MHE_OK)
            st = mhe_cuda_model_download(&g);
        std::vector<float> dev(m.param_data, m.param_data + m.n_params);
        OK(mhe_model_admin_init(&m, &bt));
        std::vector<float> cpu(m.param_data, m.param_data + m.n_params);
        CHECK(st == MHE_OK && rel_err(dev, cpu) < 1e-5, "admin: the device's profiling sets the CPU's omegas (rel %.3g) %s",
              rel_err(dev, cpu), g.err);
        int scaled = 0;
        for (int l = 0; l < c.n_layers; l++)
            scaled += m.layers[l].omega[0] && fabsf(m.layers[l].omega[0]->data[0] - 1.0f) > 0.05f;
        CHECK(scaled >= 2, "admin: profiling moved the omegas from 1 (%d layers)", scaled);
        /* decoding an Admin model: token by token as the CPU's full forward */
        float lc = 0;
        mhe_cuda_model_upload(&g);
        OK(mhe_model_forward(&m, tok.data(), NULL, 1, 11, &lc));
        std::vector<float> step(c.vocab_size);
        double worst = 0;
        if (st == MHE_OK)
            st = mhe_cuda_kv_cache_init(&kc, &g, 11);
        for (int t = 0; t < 11 && st == MHE_OK; t++) {
            st = mhe_cuda_decode_step(&g, &kc, tok[t], step.data());
            std::vector<float> ref(m.acts.logits + (size_t)t * c.vocab_size, m.acts.logits + (size_t)(t + 1) * c.vocab_size);
            worst = fmax(worst, rel_err(step, ref));
        }
        CHECK(st == MHE_OK && worst < 1e-5, "admin: decoding on the device equals the CPU's forward (rel %.3g) %s", worst,
              g.err);
        mhe_cuda_kv_cache_free(&kc);
        mhe_cuda_model_free(&g);
        mhe_model_free(&m);
    }
    /* the classification head: padded sequences, labels (one ignored), mean pooling */
    /* nonapprox, fnet and linear read the lengths in their own cores (the scan stops, the DFT
       and W_seq are cut to each sequence): pre- and post-norm, float32 and TF32 */
    static const int cls_kinds[] = {MHE_ATTN_MHA,   MHE_ATTN_MHE_ADD, MHE_ATTN_COLLAB, MHE_ATTN_TAYLOR,
                                    MHE_ATTN_MLP,   MHE_ATTN_RNDEMB_QK, MHE_ATTN_NONAPPROX, MHE_ATTN_FNET,
                                    MHE_ATTN_LINEAR};
    static const int lengths[3] = {19, 6, 11}, labels[3] = {2, 0, -1};
    for (int kind : cls_kinds) {
        int own = kind == MHE_ATTN_NONAPPROX || kind == MHE_ATTN_FNET || kind == MHE_ATTN_LINEAR;
        for (int post = 0; post <= own; post++) {
            mhe_config c = small_config(kind, MHE_ARCH_ENCODER, kind == MHE_ATTN_MLP || post,
                                        post ? MHE_NORM_RMSNORM : MHE_NORM_LAYERNORM, MHE_ACT_GELU);
            c.n_classes = 3;
            c.dropout = kind == MHE_ATTN_MHA || (own && post) ? 0.1f : 0.0f;
            c.attn_dropout = kind == MHE_ATTN_MHA ? 0.1f : 0.0f;
            if (own) /* both layers: the second reads the first's padded rows */
                c.attn[1] = kind;
            snprintf(what, sizeof what, "classification %s%s%s", mhe_attn_kind_name(kind), post ? " post-norm" : "",
                     c.dropout > 0 ? " dropout" : "");
            compare_batch(&c, what, 3, 19, c.dropout > 0 ? 77 : 0, lengths, labels, {0, NULL}, own && !post);
        }
    }
    { /* padded per-token targets through a causal nonapprox decoder (the scan stops at the length) */
        mhe_config c = small_config(MHE_ATTN_NONAPPROX, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        c.attn[1] = MHE_ATTN_NONAPPROX;
        compare_batch(&c, "padded decoder nonapprox", 3, 19, 0, lengths, NULL);
    }
    { /* nothing the device runs is refused any more; padding is still checked */
        mhe_config c = small_config(MHE_ATTN_FNET, MHE_ARCH_ENCODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        char err[MHE_ERR_LEN] = "";
        c.n_classes = 2;
        CHECK(mhe_cuda_supports(&c, err) == MHE_OK, "classification with fnet runs on the device: %s", err);
        c = s2s_config(s2s_cases[1]);
        c.admin = 1;
        c.dropout = 0.1f;
        c.attn_dropout = 0.1f;
        CHECK(mhe_cuda_supports(&c, err) == MHE_OK, "encdec with Admin and dropout runs on the device: %s", err);
        c = small_config(MHE_ATTN_NONAPPROX, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        mhe_model m;
        mhe_cuda_model g;
        mhe_batch bt;
        int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, len[2] = {4, 2};
        memset(&bt, 0, sizeof bt);
        bt.B = 2;
        bt.T = 4;
        bt.tokens = tok;
        bt.lengths = len;
        OK(mhe_model_init(&m, &c, 1, NULL));
        if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
            CHECK(mhe_cuda_model_forward_batch(&g, &bt, NULL) == MHE_OK, "padded sequences through nonapprox: %s", g.err);
            len[1] = 5;
            CHECK(mhe_cuda_model_forward_batch(&g, &bt, NULL) == MHE_ERR_DATA && strstr(g.err, "lengths[1]"),
                  "a length past T: %s", g.err);
            bt.lengths = NULL;
            bt.labels = len;
            CHECK(mhe_cuda_model_forward_batch(&g, &bt, NULL) == MHE_ERR_CONFIG && strstr(g.err, "n_classes=0"),
                  "labels without a head: %s", g.err);
            mhe_cuda_model_free(&g);
        }
        mhe_model_free(&m);
        c = s2s_config(s2s_cases[0]);
        OK(mhe_model_init(&m, &c, 1, NULL));
        if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
            int slen[2] = {3, 0};
            bt.labels = NULL;
            bt.lengths = NULL;
            bt.src = tok;
            bt.Ts = 3;
            bt.src_lengths = slen;
            CHECK(mhe_cuda_model_forward_batch(&g, &bt, NULL) == MHE_ERR_DATA && strstr(g.err, "src_lengths[1]"),
                  "an empty source: %s", g.err);
            slen[1] = 2;
            CHECK(mhe_cuda_model_forward_batch(&g, &bt, NULL) == MHE_OK, "a padded source: %s", g.err);
            mhe_cuda_model_free(&g);
        }
        mhe_model_free(&m);
    }
}

/* the bundled text as tokens, and cls_text as a labelled set: what the training tests read */
struct train_texts {
    int *data = NULL;
    size_t n = 0;
    mhe_text_set ts;
    int ok = 0;
    train_texts() {
        char err[MHE_ERR_LEN];
        memset(&ts, 0, sizeof ts);
        if (mhe_read_text_tokens("examples/data/train.txt", &data, &n, NULL, err) != MHE_OK) {
            CHECK(0, "corpus: %s", err);
            return;
        }
        ok = mhe_text_set_parse(&ts, cls_text, sizeof cls_text - 1, NULL, err) == MHE_OK;
        CHECK(ok, "classification text: %s", err);
    }
    ~train_texts() {
        if (ok)
            mhe_text_set_free(&ts);
        free(data);
    }
};

/* ---- training and evaluation with dropout, Admin and a classification head ---------------- */

static void test_features_train(void) {
    train_texts texts;
    if (!texts.ok)
        return;
    const int *data = texts.data;
    size_t n = texts.n;
    const mhe_text_set &ts = texts.ts;
    /* CLS_PAD: the kinds whose cores read the padding themselves (nonapprox's scan stops at the
       length, fnet's DFT runs over it, linear's W_seq is cut to it) */
    enum { DROP, ADMIN, CLS, CLS_PAD };
    for (int run = DROP; run <= CLS_PAD; run++) {
        static const char *const names[] = {"dropout mha+mhe-add", "admin sha post-norm, 4 layers",
                                            "classification collab+mha dropout",
                                            "classification nonapprox+fnet+linear dropout"};
        int cls = run == CLS || run == CLS_PAD;
        mhe_config c = small_config(run == DROP ? MHE_ATTN_MHA : run == ADMIN ? MHE_ATTN_SHA : MHE_ATTN_COLLAB,
                                    cls ? MHE_ARCH_ENCODER : MHE_ARCH_DECODER, run == ADMIN, MHE_NORM_LAYERNORM,
                                    MHE_ACT_GELU);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model mc, md;
        c.vocab_size = 256;
        c.init_std = mhe_config_default().init_std;
        if (run == DROP)
            c.attn[1] = MHE_ATTN_MHE_ADD;
        if (run == ADMIN) {
            c.admin = 1;
            c.n_layers = 4;
            for (int l = 0; l < 4; l++)
                c.attn[l] = MHE_ATTN_SHA;
        }
        if (run == CLS_PAD) {
            c.n_layers = 3;
            c.attn[0] = MHE_ATTN_NONAPPROX;
            c.attn[1] = MHE_ATTN_FNET;
            c.attn[2] = MHE_ATTN_LINEAR;
        }
        if (run != ADMIN) {
            c.dropout = 0.1f;
            c.attn_dropout = 0.1f;
        }
        if (cls)
            c.n_classes = 3;
        tc.batch = 2;
        tc.seq_len = 16;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 8;
        tc.seed = 5;
        OK(mhe_model_init(&mc, &c, 11, NULL));
        OK(mhe_model_init(&md, &c, 11, NULL));
        lockstep_train(&mc, &md, &tc, names[run], 8, [&](lockstep &r, int) {
            if (cls) {
                OK(mhe_trainer_step_cls(&r.cpu, &ts));
                return mhe_cuda_trainer_step_cls(&r.dev, &ts);
            }
            OK(mhe_trainer_step(&r.cpu, data, n));
            return mhe_cuda_trainer_step(&r.dev, data, n);
        }, {0, 1}, [&](lockstep &r) { /* evaluation: dropout off on both sides */
            if (cls) {
                mhe_cls_metrics mcpu, mdev;
                mhe_status sc = mhe_evaluate_cls(&mc, &ts, 3, 16, &mcpu), sd = mhe_cuda_evaluate_cls(&r.g, &ts, 3, 16, &mdev);
                CHECK(sc == MHE_OK && sd == MHE_OK && mdev.n == mcpu.n && mdev.n == ts.n &&
                          fabs(mdev.loss - mcpu.loss) < 1e-3 * mcpu.loss && mdev.accuracy == mcpu.accuracy,
                      "eval %s: loss %.6f vs CPU %.6f, accuracy %.3f vs %.3f over %lld %s", names[run], mdev.loss,
                      mcpu.loss, mdev.accuracy, mcpu.accuracy, (long long)mdev.n, r.g.err);
            } else {
                float lc = 0, ld = 0;
                mhe_status sc = mhe_evaluate(&mc, data, 200, 4, 20, 0, &lc),
                           sd = mhe_cuda_evaluate(&r.g, data, 200, 4, 20, 0, &ld);
                CHECK(sc == MHE_OK && sd == MHE_OK && fabs((double)ld - lc) < 1e-3 * lc, "eval %s: loss %.6f vs CPU %.6f %s",
                      names[run], (double)ld, (double)lc, r.g.err);
            }
        });
        mhe_model_free(&mc);
        mhe_model_free(&md);
    }
}

/* ---- encoder-decoder: the encoder, causal self-attention, cross-attention ------------------ */

/* decoding an encoded source token by token, and as a prefill, equals the device's
   forward and the CPU's mhe_kv_cache_encode + mhe_decode_step */
static void decode_check_s2s(const mhe_config *cfg, const char *what, int T, int Ts, double tol) {
    mhe_model m;
    mhe_cuda_model g;
    mhe_cuda_kv_cache kc;
    mhe_kv_cache cc;
    int V = cfg->vocab_size;
    std::vector<int> tok(T), src(Ts);
    for (int i = 0; i < T; i++)
        tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    for (int i = 0; i < Ts; i++)
        src[i] = (int)mhe_rng_below(&test_rng, (uint32_t)V);
    if (mhe_model_init(&m, cfg, 3, NULL) != MHE_OK) {
        CHECK(0, "decode %s: model init: %s", what, m.err);
        return;
    }
    memset(&kc, 0, sizeof kc);
    memset(&cc, 0, sizeof cc);
    std::vector<float> full((size_t)T * V), step(V);
    mhe_status st = mhe_cuda_model_init(&g, &m, 0);
    if (st == MHE_OK)
        st = mhe_cuda_model_forward_s2s(&g, src.data(), Ts, tok.data(), NULL, 1, T, NULL);
    if (st == MHE_OK)
        st = mhe_cuda_model_logits(&g, full.data());
    if (st == MHE_OK)
        st = mhe_cuda_kv_cache_init(&kc, &g, T);
    if (st == MHE_OK) /* nothing to read the cross-attention from yet */
        CHECK(mhe_cuda_decode_step(&g, &kc, tok[0], NULL) == MHE_ERR_ARG && strstr(g.err, "mhe_cuda_kv_cache_encode"),
              "decode %s before encoding: %s", what, g.err);
    if (st == MHE_OK)
        st = mhe_cuda_kv_cache_encode(&g, &kc, src.data(), Ts);
    if (st == MHE_OK && (mhe_kv_cache_init(&cc, &m, T, NULL) != MHE_OK || mhe_kv_cache_encode(&m, &cc, src.data(), Ts) != MHE_OK))
        CHECK(0, "decode %s: CPU cache: %s", what, m.err);
    double worst = 0, worst_cpu = 0;
    for (int t = 0; t < T && st == MHE_OK; t++) {
        st = mhe_cuda_decode_step(&g, &kc, tok[t], step.data());
        std::vector<float> ref(full.begin() + (long)t * V, full.begin() + (long)(t + 1) * V);
        worst = fmax(worst, rel_err(step, ref));
        if (cc.block && mhe_decode_step(&m, &cc, tok[t]) == MHE_OK)
            worst_cpu = fmax(worst_cpu, rel_err(step, std::vector<float>(cc.logits, cc.logits + V)));
        else
            worst_cpu = 1;
    }
    CHECK(st == MHE_OK && worst < tol, "decode %s: step logits equal the forward's (rel %.3g) %s", what, worst,
          st == MHE_OK ? "" : g.err);
    CHECK(st == MHE_OK && worst_cpu < tol, "decode %s: step logits equal the CPU's decoding (rel %.3g)", what, worst_cpu);
    if (st == MHE_OK) { /* encoding again starts a new sequence; the prompt as one batch */
        st = mhe_cuda_kv_cache_encode(&g, &kc, src.data(), Ts);
        if (st == MHE_OK)
            st = mhe_cuda_prefill(&g, &kc, tok.data(), T - 1, NULL);
        if (st == MHE_OK)
            st = mhe_cuda_decode_step(&g, &kc, tok[T - 1], step.data());
        std::vector<float> ref(full.end() - V, full.end());
        CHECK(st == MHE_OK && rel_err(step, ref) < tol, "decode %s: prefill of %d, then a step (rel %.3g) %s", what,
              T - 1, rel_err(step, ref), st == MHE_OK ? "" : g.err);
    }
    if (getenv("MHE_TEST_VERBOSE"))
        printf("  decode %s: logits %.3g, CPU %.3g\n", what, worst, worst_cpu);
    mhe_kv_cache_free(&cc);
    mhe_cuda_kv_cache_free(&kc);
    mhe_cuda_model_free(&g);
    mhe_model_free(&m);
}

/* one small encoder-decoder for the sanitizer runs (the model group): every kernel the
   cross-attention path adds to the decoder's is one of theirs, on other shapes */
/* A trainer whose steps run as a CUDA graph (t.graph) against the same deferred trainer launching
   every kernel, from the same init: the same parameters bit for bit after every step (the graph
   runs the same operations in the same order; the dropout seeds and the learning rate change
   every step and are patched into its nodes). The graph is built at the second step of a shape
   (the third with Admin, whose first step is not recorded) and launched from then on; a change
   of shape (a shorter seq_len for three steps, then back) runs that step kernel by kernel and
   builds the next graph. Every kind the device trains, with dropout: decoders (a fixed stream's
   device copy node), encoders' classification heads on padded batches (lengths and labels are
   uploads; fnet and linear size some launches by the lengths, so a batch whose lengths differ
   from the last one's runs kernel by kernel), encoder-decoders with a source. */
static void test_train_graph(void) {
    train_texts texts;
    if (!texts.ok)
        return;
    const int *data = texts.data;
    size_t n = texts.n;
    const mhe_text_set &ts = texts.ts;
    enum { DEC, CLS, S2S };
    struct graph_run {
        int a0, a1, task, steps, shape_change, admin;
    };
    static const graph_run runs[] = {
        {MHE_ATTN_MHE_ADD, MHE_ATTN_RNDEMB_QK, DEC, 12, 1, 0},  {MHE_ATTN_MHA, MHE_ATTN_MHE_MUL, CLS, 12, 0, 0},
        {MHE_ATTN_COLLAB, MHE_ATTN_SHA, DEC, 5, 0, 0},          {MHE_ATTN_TAYLOR, MHE_ATTN_NONAPPROX, DEC, 5, 0, 0},
        {MHE_ATTN_STATICEMB_QK, MHE_ATTN_MLP, DEC, 5, 0, 0},    {MHE_ATTN_MHA, MHE_ATTN_FIXEDSEQ_QK, DEC, 5, 0, 0},
        {MHE_ATTN_FNET, MHE_ATTN_LINEAR, CLS, 5, 0, 0},         {MHE_ATTN_GQA, MHE_ATTN_EL_ATT, DEC, 5, 0, 1},
        {1, 0, S2S, 5, 0, 0},                                   {3, 0, S2S, 5, 0, 0},
    };
    for (const graph_run &run : runs) {
        char name[128];
        mhe_config c;
        if (run.task == S2S) {
            c = s2s_config(s2s_cases[run.a0]);
            s2s_name(s2s_cases[run.a0], name + 7, sizeof name - 7);
            memcpy(name, "graph: ", 7);
        } else {
            c = small_config(run.a0, run.task == CLS ? MHE_ARCH_ENCODER : MHE_ARCH_DECODER, run.admin,
                             MHE_NORM_LAYERNORM, MHE_ACT_GELU);
            c.attn[0] = run.a0;
            c.attn[1] = run.a1;
            snprintf(name, sizeof name, "graph: %s %s+%s%s", run.task == CLS ? "classifier, padded," : "decoder",
                     mhe_attn_kind_name(run.a0), mhe_attn_kind_name(run.a1), run.admin ? " admin post-norm" : "");
        }
        c.vocab_size = 256;
        c.dropout = 0.1f;
        c.attn_dropout = 0.1f;
        c.admin = run.admin;
        c.n_classes = run.task == CLS ? 3 : 0;
        mhe_train_config tc = mhe_train_config_default();
        tc.batch = 2;
        tc.seq_len = run.task == S2S ? 10 : 16;
        tc.src_len = run.task == S2S ? 12 : 0;
        tc.lr = 3e-3f;
        tc.warmup = 4;
        tc.steps = 40;
        tc.clip = 0.5f;
        trainer_pair pair(c, tc);
        mhe_cuda_trainer *t = pair.t;
        CHECK(pair.ok, "%s: init: %s %s", name, pair.g[0].err, pair.g[1].err);
        if (!pair.ok)
            break;
        t[0].deferred = t[1].deferred = t[1].graph = 1;
        /* steps at the trainer's seq_len, then (shape_change) 3 at 8 and 3 back at 16 */
        int phases[3] = {run.steps, run.shape_change ? 3 : 0, run.shape_change ? 3 : 0}, lens[3] = {16, 8, 16};
        int bad = 0, differ = 0, steps = 0;
        double worst = 0;
        for (int ph = 0; ph < 3; ph++)
            for (int s = 0; s < phases[ph]; s++, steps++) {
                for (int i = 0; i < 2; i++) {
                    if (run.task != S2S)
                        t[i].host.tc.seq_len = lens[ph];
                    bad += (run.task == CLS ? mhe_cuda_trainer_step_cls(&t[i], &ts) : mhe_cuda_trainer_step(&t[i], data, n)) != MHE_OK;
                }
                double e = rel_err(pair.params(1), pair.params(0));
                differ += !(e <= same_run_tol);
                worst = e > worst ? e : worst;
            }
        /* one graph per phase, launched from the phase's second recorded step on */
        long builds = run.shape_change ? 3 : 1, launches = steps - builds - run.admin;
        int lengths_shape = run.a0 == MHE_ATTN_FNET; /* its launches follow the batch's lengths */
        CHECK(bad == 0 && differ == 0, "%s: %d steps (%d failed), the parameters of the launching trainer after every "
              "step, bit for bit where the atomics add in one order (%d differ: max rel %.3g, bound %.3g) %s %s", name,
              steps, bad, differ, worst, same_run_tol, t[0].host.err, t[1].host.err);
        CHECK(t[1].graph == 1 && t[1].graph_error == cudaSuccess && t[0].graph_launches == 0 &&
                  (lengths_shape || (t[1].graph_builds == builds && t[1].graph_launches == launches)) &&
                  t[1].graph_patches >= t[1].graph_launches,
              "%s: %ld graphs built (want %ld), %ld steps launched as one (want %ld), %ld nodes patched", name,
              t[1].graph_builds, builds, t[1].graph_launches, launches, t[1].graph_patches);
        mhe_status s0 = mhe_cuda_trainer_stats(&t[0]), s1 = mhe_cuda_trainer_stats(&t[1]);
        CHECK(s0 == MHE_OK && s1 == MHE_OK && same_run(t[1].host.last_loss, t[0].host.last_loss) &&
                  same_run(t[1].host.last_grad_norm, t[0].host.last_grad_norm) && t[1].host.step == steps,
              "%s: last loss %.9g norm %.9g, launching trainer %.9g %.9g", name, (double)t[1].host.last_loss,
              (double)t[1].host.last_grad_norm, (double)t[0].host.last_loss, (double)t[0].host.last_grad_norm);
        printf("ok %s: %d steps, %ld graphs built, %ld steps as one launch, %ld nodes patched, parameters max rel %.3g\n",
               name, steps, t[1].graph_builds, t[1].graph_launches, t[1].graph_patches, worst);
    }
}

/* The loss curve of a 200-step run on real text, the device against the CPU in each precision,
   held to the bounds tools/scripts/gpu_check.py holds a GPU's to (relative to the CPU's loss at
   each step: step 1, steps 1-50, all steps, the mean of the last 20): float32 1e-5, 1e-3, 5e-3,
   3e-3; TF32 (u = 2^-11) 4u, 5e-3, 2e-2, 1e-2; bf16 (u = 2^-8) TF32's times 8. Both sides learn
   (the last 10 losses below the first by 0.5 nats). TF32 and bf16 train as mhe train does
   (deferred, each step a CUDA graph launch), float32 launching every kernel. T = 32 and d_head
   16: the tiled attention core (on the tensor cores in TF32 and bf16) and the tensor-core GEMMs. */
static void test_curve(void) {
    int *data = NULL;
    size_t n = 0;
    char err[MHE_ERR_LEN];
    if (mhe_read_text_tokens("examples/data/train.txt", &data, &n, NULL, err) != MHE_OK) {
        CHECK(0, "corpus: %s", err);
        return;
    }
    mhe_config c = small_config(MHE_ATTN_MHE_MUL, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
    c.vocab_size = 256;
    c.d_model = 32;
    c.n_heads = 2;
    c.d_head = 16;
    c.d_ff = 64;
    c.max_seq_len = 16;
    c.attn[1] = MHE_ATTN_MHA;
    c.init_std = mhe_config_default().init_std;
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 2;
    tc.seq_len = 16;
    tc.lr = 1e-3f;
    tc.warmup = 20;
    tc.steps = 200;
    tc.seed = 7;
    const int steps = 200;
    const double u16 = ldexp(1.0, -8), u32 = ldexp(1.0, -11);
    const double tol[3][4] = {{1e-5, 1e-3, 5e-3, 3e-3},
                              {4 * u32, 5e-3, 2e-2, 1e-2},
                              {4 * u32 * u16 / u32, 5e-3 * u16 / u32, 2e-2 * u16 / u32, 1e-2 * u16 / u32}};
    std::vector<double> cpu(steps);
    { /* the CPU's curve */
        mhe_model m;
        mhe_trainer t;
        OK(mhe_model_init(&m, &c, 11, NULL));
        OK(mhe_trainer_init(&t, &m, &tc));
        for (int s = 0; s < steps; s++) {
            OK(mhe_trainer_step(&t, data, n));
            cpu[s] = t.last_loss;
        }
        mhe_trainer_free(&t);
        mhe_model_free(&m);
    }
    static const char *const names[3] = {"fp32", "tf32", "bf16"};
    for (int p = 0; p < 3; p++) {
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_trainer t;
        memset(&g, 0, sizeof g);
        OK(mhe_model_init(&m, &c, 11, NULL));
        int ok = mhe_cuda_model_init(&g, &m, p) == MHE_OK && mhe_cuda_trainer_init(&t, &g, &tc) == MHE_OK;
        CHECK(ok, "curve %s: init: %s", names[p], g.err);
        if (!ok) {
            mhe_model_free(&m);
            break;
        }
        t.deferred = t.graph = p > 0;
        std::vector<double> rel(steps);
        double dev0 = 0, dev_last = 0, cpu_last = 0;
        int bad = 0;
        for (int s = 0; s < steps; s++) {
            bad += mhe_cuda_trainer_step(&t, data, n) != MHE_OK || mhe_cuda_trainer_stats(&t) != MHE_OK;
            rel[s] = fabs(t.host.last_loss - cpu[s]) / fabs(cpu[s]);
            dev0 = s == 0 ? t.host.last_loss : dev0;
            if (s >= steps - 10) {
                dev_last += t.host.last_loss / 10;
                cpu_last += cpu[s] / 10;
            }
        }
        double early = *std::max_element(rel.begin(), rel.begin() + 50), all = *std::max_element(rel.begin(), rel.end());
        double tail = 0;
        for (int s = steps - 20; s < steps; s++)
            tail += rel[s] / 20;
        CHECK(bad == 0 && rel[0] <= tol[p][0] && early <= tol[p][1] && all <= tol[p][2] && tail <= tol[p][3],
              "curve %s, %d steps against the CPU: step 1 rel %.3g (bound %.3g), steps 1-50 max %.3g (%.3g), all %.3g "
              "(%.3g), last 20 mean %.3g (%.3g), %d failed steps %s", names[p], steps, rel[0], tol[p][0], early,
              tol[p][1], all, tol[p][2], tail, tol[p][3], bad, t.host.err);
        CHECK(dev_last < dev0 - 0.5 && cpu_last < cpu[0] - 0.5 && (p == 0 || t.graph_launches == steps - 1),
              "curve %s: the device learns %.4f -> %.4f, the CPU %.4f -> %.4f (%ld steps as one graph launch)",
              names[p], dev0, dev_last, cpu[0], cpu_last, t.graph_launches);
        printf("ok curve %s: step 1 rel %.3g, steps 1-50 max %.3g, all %.3g (step %d), last 20 mean %.3g; loss %.4f -> "
               "%.4f (CPU %.4f)\n", names[p], rel[0], early, all, (int)(std::max_element(rel.begin(), rel.end()) -
               rel.begin()) + 1, tail, dev0, dev_last, cpu_last);
        mhe_cuda_trainer_free(&t);
        mhe_cuda_model_free(&g);
        mhe_model_free(&m);
    }
    free(data);
}

static void test_model_s2s(void) {
    mhe_config c = s2s_config(s2s_cases[0]);
    c.d_model = 32;
    c.n_heads = 2;
    c.d_head = 16;
    c.d_ff = 48;
    compare_step(&c, "encdec mha+taylor | mha+mhe-mul x mha+mhe-add, small", 2, 5, &fp32_tol, 1, 0, 0, 7);
}

/* a small post-norm encoder-decoder with Admin, dropout and padding on both sides, for the
   sanitizer runs (the source's embedding dropout and the cross-attention's padding and dropout) */
static void test_model_s2s_features(void) {
    static const int len[2] = {5, 3}, slen[2] = {2, 7};
    mhe_config c = s2s_config(s2s_cases[4]);
    c.d_model = 32;
    c.n_heads = 2;
    c.d_head = 16;
    c.d_ff = 48;
    c.admin = 1;
    c.dropout = 0.1f;
    c.attn_dropout = 0.2f;
    compare_batch(&c, "encdec collab+el-att | mlp+collab x gqa+sha, admin, dropout, padded, small", 2, 5, 3, len, NULL,
                  {7, slen});
}

static void test_encdec(void) {
    char what[160];
    int *data = NULL;
    size_t n = 0;
    char err[MHE_ERR_LEN];
    int i = 0;
    for (const s2s_kinds &k : s2s_cases) {
        mhe_config c = s2s_config(k);
        s2s_name(k, what, sizeof what);
        /* a source longer, then shorter than the decoder's sequence */
        compare_step(&c, what, 2, 11, &fp32_tol, 1, 0, 0, i % 2 ? 7 : 16);
        decode_check_s2s(&c, what, 9, i % 2 ? 6 : 12, 1e-5);
        i++;
    }
    {
        mhe_config c = s2s_config(s2s_cases[0]);
        snprintf(what, sizeof what, "encdec mha+taylor | mha+mhe-mul x mha+mhe-add, TF32");
        step_tol tol[2] = {tf32_bounds, tf32_bounds};
        compare_step(&c, what, 2, 11, tol, 2, 0, 1, 14);
    }
    /* dropout (the source's embedding and the cross-attention's sites too), Admin (post-norm:
       encoder, decoder and cross sublayers), and padding on either side, one batch each */
    {
        static const int drop_cases[] = {0, 1, 5}, admin_cases[] = {1, 4}, pad_cases[] = {0, 2, 3};
        static const int len[2] = {11, 5}, slen16[2] = {4, 16}, slen7[2] = {7, 2};
        char name[120];
        for (int ci : drop_cases) {
            mhe_config c = s2s_config(s2s_cases[ci]);
            c.dropout = 0.1f;
            c.attn_dropout = 0.2f;
            s2s_name(s2s_cases[ci], name, sizeof name);
            snprintf(what, sizeof what, "%s, dropout", name);
            compare_batch(&c, what, 2, 11, 0x5eedULL + (uint64_t)ci, NULL, NULL, {ci % 2 ? 7 : 16, NULL});
        }
        for (int ci : admin_cases) {
            mhe_config c = s2s_config(s2s_cases[ci]);
            c.admin = 1;
            c.dropout = ci == 4 ? 0.1f : 0.0f;
            s2s_name(s2s_cases[ci], name, sizeof name);
            snprintf(what, sizeof what, "%s, admin%s", name, c.dropout > 0 ? ", dropout" : "");
            compare_batch(&c, what, 2, 11, c.dropout > 0 ? 41 : 0, NULL, NULL, {9, NULL});
        }
        for (int ci : pad_cases) {
            mhe_config c = s2s_config(s2s_cases[ci]);
            int Ts = ci % 2 ? 7 : 16;
            c.dropout = ci == 3 ? 0.1f : 0.0f;
            c.attn_dropout = ci == 3 ? 0.1f : 0.0f;
            s2s_name(s2s_cases[ci], name, sizeof name);
            snprintf(what, sizeof what, "%s, padded%s", name, c.dropout > 0 ? ", dropout" : "");
            compare_batch(&c, what, 2, 11, c.dropout > 0 ? 43 : 0, len, NULL, {Ts, Ts == 16 ? slen16 : slen7},
                          ci == 2);
        }
    }
    if (mhe_read_text_tokens("examples/data/train.txt", &data, &n, NULL, err) != MHE_OK) {
        CHECK(0, "corpus: %s", err);
        return;
    }
    { /* training: the batches carry a source (src_len), the losses track the CPU's */
        mhe_config c = s2s_config(s2s_cases[0]);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model mc, md;
        c.vocab_size = 256;
        c.init_std = mhe_config_default().init_std;
        tc.batch = 2;
        tc.seq_len = 10;
        tc.src_len = 14;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 12;
        tc.seed = 5;
        CHECK(mhe_model_init(&mc, &c, 11, NULL) == MHE_OK, "mhe_model_init: %s", mc.err);
        CHECK(mhe_model_init(&md, &c, 11, NULL) == MHE_OK, "mhe_model_init: %s", md.err);
        lockstep_train(&mc, &md, &tc, "encdec", 12, [&](lockstep &r, int) {
            CHECK(mhe_trainer_step(&r.cpu, data, n) == MHE_OK, "mhe_trainer_step: %s", r.cpu.err);
            return mhe_cuda_trainer_step(&r.dev, data, n);
        }, {0.3, 0}, [&](lockstep &r) {
            /* evaluation on the device: the same windows (source, then continuation) as mhe_evaluate */
            float lc = 0, ld = 0;
            mhe_status sc = mhe_evaluate(&md, data, 400, 4, 12, 0, &lc);
            mhe_status sd = mhe_cuda_evaluate(&r.g, data, 400, 4, 12, 0, &ld);
            CHECK(sc == MHE_OK && sd == MHE_OK && fabs((double)ld - lc) < 1e-5 * lc, "eval encdec: loss %.7f vs CPU %.7f %s",
                  (double)ld, (double)lc, r.g.err);
            float l0 = 0;
            CHECK(mhe_cuda_model_forward(&r.g, data, NULL, 1, 4, &l0) == MHE_ERR_ARG && strstr(r.g.err, "forward_s2s"),
                  "encdec forward without a source: %s", r.g.err);
            CHECK(mhe_cuda_model_forward_s2s(&r.g, data, 0, data, NULL, 1, 4, &l0) == MHE_ERR_ARG &&
                      strstr(r.g.err, "source"), "encdec forward with an empty source: %s", r.g.err);
        });
        mhe_model_free(&mc);
        mhe_model_free(&md);
    }
    { /* dropout, attention dropout (the cross-attention's too) and Admin in training: the
         encoder, decoder and cross sublayers profiled on the device's first step */
        mhe_config c = s2s_config(s2s_cases[4]);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model mc, md;
        c.vocab_size = 256;
        c.init_std = mhe_config_default().init_std;
        c.admin = 1;
        c.dropout = 0.1f;
        c.attn_dropout = 0.1f;
        tc.batch = 2;
        tc.seq_len = 10;
        tc.src_len = 12;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 8;
        tc.seed = 7;
        OK(mhe_model_init(&mc, &c, 11, NULL));
        OK(mhe_model_init(&md, &c, 11, NULL));
        lockstep_train(&mc, &md, &tc, "encdec admin post-norm, dropout", 8, [&](lockstep &r, int) {
            OK(mhe_trainer_step(&r.cpu, data, n));
            return mhe_cuda_trainer_step(&r.dev, data, n);
        }, {0, 1});
        mhe_model_free(&mc);
        mhe_model_free(&md);
    }
    { /* padded batches (lengths, src_lengths) with dropout, through nonapprox, linear and the
         cross-attention: the same random batch on both sides at each step */
        mhe_config c = s2s_config(s2s_cases[3]);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model mc, md;
        enum { B = 3, T = 10, TS = 12 };
        std::vector<int> tok(B * T), tgt(B * T), src(B * TS), len(B), slen(B);
        c.dropout = 0.1f;
        c.attn_dropout = 0.1f;
        tc.batch = B;
        tc.seq_len = T;
        tc.src_len = TS;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 6;
        tc.seed = 9;
        OK(mhe_model_init(&mc, &c, 11, NULL));
        OK(mhe_model_init(&md, &c, 11, NULL));
        lockstep_train(&mc, &md, &tc, "encdec padded batches, dropout", 6, [&](lockstep &r, int s) {
            mhe_batch bt;
            for (int i = 0; i < B * T; i++) {
                tok[i] = (int)mhe_rng_below(&test_rng, (uint32_t)c.vocab_size);
                tgt[i] = (int)mhe_rng_below(&test_rng, (uint32_t)c.vocab_size);
            }
            for (int i = 0; i < B * TS; i++)
                src[i] = (int)mhe_rng_below(&test_rng, (uint32_t)c.vocab_size);
            for (int b = 0; b < B; b++) { /* one full sequence and source per batch */
                len[b] = b == s % B ? T : 1 + (int)mhe_rng_below(&test_rng, T);
                slen[b] = b == (s + 1) % B ? TS : 1 + (int)mhe_rng_below(&test_rng, TS);
            }
            memset(&bt, 0, sizeof bt);
            bt.B = B;
            bt.T = T;
            bt.tokens = tok.data();
            bt.targets = tgt.data();
            bt.lengths = len.data();
            bt.Ts = TS;
            bt.src = src.data();
            bt.src_lengths = slen.data();
            OK(mhe__trainer_update(&r.cpu, &bt));
            return mhe__cu_train_batch(&r.dev, &bt);
        }, {-1, 1});
        mhe_model_free(&mc);
        mhe_model_free(&md);
    }
    free(data);
}

/* ---- word models: hash-emb embeddings, word vocabularies, the S+R head -------------------- */

/* a word corpus (the first bytes of the training text) and a model on it with its features */
struct word_corpus {
    mhe_lexicon x;
    mhe_word_feats f;
    int *tok;
    size_t n;
};

static int word_corpus_of(word_corpus *k, size_t bytes) {
    char err[MHE_ERR_LEN];
    void *buf = NULL;
    size_t len = 0;
    memset(k, 0, sizeof *k);
    mhe_lexicon_init(&k->x, NULL);
    if (mhe_read_file("examples/data/train.txt", &buf, &len, NULL, err) != MHE_OK) {
        CHECK(0, "corpus: %s", err);
        return 0;
    }
    mhe_status st = mhe_words_parse(&k->x, (const char *)buf, len < bytes ? len : bytes, &k->tok, &k->n, NULL, err);
    free(buf);
    CHECK(st == MHE_OK, "word corpus: %s", err);
    return st == MHE_OK;
}

static void word_corpus_free(word_corpus *k) {
    mhe_lexicon_free(&k->x);
    mhe_word_feats_free(&k->f);
    free(k->tok);
}

/* small_config's sizes with an S+R head on word tokens: hash-emb buckets (few: words collide), or a word vocabulary */
static mhe_config word_config(int embedding, int post) {
    mhe_config c = small_config(MHE_ATTN_MHA, MHE_ARCH_ENCODER, post, post ? MHE_NORM_RMSNORM : MHE_NORM_LAYERNORM,
                                MHE_ACT_GELU);
    c.embedding = embedding;
    c.token_head = MHE_HEAD_SR;
    c.hash_buckets = 48;
    c.attn[1] = MHE_ATTN_MHE_ADD;
    return c;
}

static int word_model_init(mhe_model *m, const mhe_config *c, word_corpus *k, uint64_t seed) {
    if (mhe_model_init(m, c, seed, NULL) != MHE_OK ||
        (c->embedding == MHE_EMB_VOCAB && mhe_model_set_vocab(m, &k->x) != MHE_OK)) {
        CHECK(0, "word model: %s", m->err);
        return 0;
    }
    mhe_word_feats_free(&k->f);
    if (mhe_word_feats_update(m, &k->x, &k->f) != MHE_OK) {
        CHECK(0, "word features: %s", m->err);
        return 0;
    }
    return 1;
}

/* one S+R step of a word batch on both sides: loss, the 3 logits per token, every gradient
   (with dropout: in training mode, the same masks; with Admin: the CPU's profiled omegas) */
static void compare_word_step(const mhe_config *cfg, word_corpus *k, const char *what) {
    const int B = 2, T = 17, K = MHE_SR_CLASSES;
    mhe_model m;
    mhe_cuda_model g;
    std::vector<int> clean(B * T), tok(B * T), tgt(B * T);
    if (!word_model_init(&m, cfg, k, 7))
        return;
    for (int b = 0; b < B; b++)
        memcpy(&clean[b * T], k->tok + 40 * b, T * sizeof(int));
    mhe_sr_corrupt(tok.data(), tgt.data(), clean.data(), NULL, B, T, 0.3f, MHE_N_SPECIAL, NULL, (size_t)k->f.n, &test_rng);
    tok[3] = MHE_TOK_BOS; /* a special row among the words */
    mhe_batch bt;
    memset(&bt, 0, sizeof bt);
    bt.B = B; bt.T = T; bt.tokens = tok.data(); bt.targets = tgt.data(); bt.words = &k->f;
    float lc = 0, ld = 0;
    if (cfg->admin) /* the CPU's profiling sets the omegas the device copies */
        OK(mhe_model_admin_init(&m, &bt));
    m.training = cfg->dropout > 0 || cfg->attn_dropout > 0; /* both sides drop with the same seed */
    m.dropout_seed = 0x5eed;
    mhe_model_zero_grad(&m);
    mhe_status st = mhe_model_forward_batch(&m, &bt, &lc);
    if (st == MHE_OK)
        st = mhe_model_backward(&m);
    CHECK(st == MHE_OK, "%s: CPU step: %s", what, m.err);
    std::vector<float> logits_cpu(m.acts.logits, m.acts.logits + (size_t)B * T * K), grad_cpu(m.grad_data, m.grad_data + m.n_params);
    if ((st = mhe_cuda_model_init(&g, &m, 0)) == MHE_OK) {
        st = mhe_cuda_model_forward_batch(&g, &bt, &ld);
        if (st == MHE_OK)
            st = mhe_cuda_model_backward(&g);
    }
    CHECK(st == MHE_OK, "%s: device step: %s", what, g.err);
    if (st == MHE_OK) {
        CHECK_CLOSE(ld, lc, 1e-5, 1e-5, "%s: loss %.7f vs CPU %.7f", what, (double)ld, (double)lc);
        std::vector<float> logits_dev(logits_cpu.size());
        mhe_cuda_model_logits(&g, logits_dev.data());
        CHECK(rel_err(logits_dev, logits_cpu) < 1e-5, "%s: S+R logits rel err %.3g", what, rel_err(logits_dev, logits_cpu));
        mhe_cuda_model_grads(&g);
        int bad = 0;
        double gmax = 0;
        for (float x : grad_cpu)
            gmax = fmax(gmax, fabs(x));
        for (int i = 0; i < m.n_tensors; i++) {
            const mhe_tensor *t = &m.params[i];
            size_t off = (size_t)(t->data - m.param_data);
            std::vector<float> a(m.grad_data + off, m.grad_data + off + t->size),
                b(grad_cpu.begin() + (long)off, grad_cpu.begin() + (long)(off + t->size));
            double e = rel_err(a, b), mx = 0;
            for (float x : b)
                mx = fmax(mx, fabs(x));
            if (mx < 1e-3 * gmax) /* zero in exact arithmetic (MHE-ADD's key bias): against the model's scale, as compare_step */
                e = e * mx / (1e-3 * gmax);
            if (!(e < 2e-4)) {
                bad++;
                printf("  %s: gradient of %s rel err %.3g\n", what, t->name, e);
            }
        }
        CHECK(bad == 0, "%s: %d of %d gradients differ from the CPU's", what, bad, m.n_tensors);
        mhe_cuda_model_free(&g);
    }
    mhe_model_free(&m);
}

/* n S+R trainer steps on both sides from the same init: the device's losses track the CPU's */
static void compare_word_train(const mhe_config *cfg, word_corpus *k, const char *what, int n) {
    mhe_model mc, md;
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 4;
    tc.seq_len = 16;
    tc.lr = 3e-3f;
    tc.warmup = 2;
    tc.steps = n;
    tc.seed = 5;
    if (!word_model_init(&mc, cfg, k, 11))
        return;
    if (!word_model_init(&md, cfg, k, 11)) {
        mhe_model_free(&mc);
        return;
    }
    lockstep_train(&mc, &md, &tc, what, n, [&](lockstep &r, int) {
        CHECK(mhe_trainer_step_sr(&r.cpu, k->tok, k->n, &k->f) == MHE_OK, "%s: CPU step: %s", what, r.cpu.err);
        return mhe_cuda_trainer_step_sr(&r.dev, k->tok, k->n, &k->f);
    }, {-1, 0}, [&](lockstep &r) {
        mhe_cls_metrics ec, ed;
        mhe_status sc = mhe_evaluate_sr(&md, k->tok, k->n, &k->f, 4, 16, 2, 0.3f, &ec);
        mhe_status sd = mhe_cuda_evaluate_sr(&r.g, k->tok, k->n, &k->f, 4, 16, 2, 0.3f, &ed);
        CHECK(sc == MHE_OK && sd == MHE_OK && fabs(ed.loss - ec.loss) < 1e-5 * ec.loss && ed.n == ec.n,
              "%s: evaluate S+R: loss %.7f vs CPU %.7f %s", what, ed.loss, ec.loss, r.g.err);
    });
    mhe_model_free(&mc);
    mhe_model_free(&md);
}

static void test_hash(void) {
    word_corpus k;
    if (!word_corpus_of(&k, 6000))
        return;
    mhe_config c = word_config(MHE_EMB_HASH_EMB, 0);
    compare_word_step(&c, &k, "hash-emb S+R encoder");
    c = word_config(MHE_EMB_HASH_EMB, 1);
    c.attn[0] = MHE_ATTN_TAYLOR;
    c.arch = MHE_ARCH_DECODER;
    compare_word_step(&c, &k, "hash-emb S+R decoder taylor+mhe-add post-norm");
    c = word_config(MHE_EMB_VOCAB, 0);
    c.vocab_size = k.x.n + MHE_N_SPECIAL;
    compare_word_step(&c, &k, "word vocabulary S+R encoder");
    /* hash-pool, -add, -proj (eq. 2.1-2.3): 24 bits, pool's 5 chunks of k = 5 (the last one 4 bits) */
    for (int emb : {MHE_EMB_HASH_POOL, MHE_EMB_HASH_ADD, MHE_EMB_HASH_PROJ}) {
        char what[96];
        c = word_config(emb, emb == MHE_EMB_HASH_ADD);
        c.hash_bits = 24;
        c.hash_chunk = 5;
        if (emb == MHE_EMB_HASH_ADD)
            c.arch = MHE_ARCH_DECODER;
        snprintf(what, sizeof what, "%s S+R %s", mhe__emb_name(&c), emb == MHE_EMB_HASH_ADD ? "decoder post-norm" : "encoder");
        compare_word_step(&c, &k, what);
        c.init_std = mhe_config_default().init_std;
        snprintf(what, sizeof what, "%s S+R", mhe__emb_name(&c));
        compare_word_train(&c, &k, what, 6);
    }
    c = word_config(MHE_EMB_HASH_EMB, 1); /* the other feature set on word batches: dropout, attention dropout, Admin */
    c.dropout = 0.1f;
    c.attn_dropout = 0.2f;
    c.admin = 1;
    compare_word_step(&c, &k, "hash-emb S+R encoder post-norm, Admin, dropout");
    { /* 12 S+R steps on both sides, then the evaluation */
        mhe_model mc, md;
        mhe_train_config tc = mhe_train_config_default();
        c = word_config(MHE_EMB_HASH_EMB, 0);
        c.init_std = mhe_config_default().init_std;
        c.dropout = 0.1f; /* the S+R step draws its dropout seed where the CPU's does */
        tc.batch = 4;
        tc.seq_len = 16;
        tc.lr = 3e-3f;
        tc.warmup = 2;
        tc.steps = 12;
        tc.seed = 5;
        if (word_model_init(&mc, &c, &k, 11) && word_model_init(&md, &c, &k, 11)) {
            lockstep_train(&mc, &md, &tc, "hash-emb S+R, dropout", 12, [&](lockstep &r, int) {
                CHECK(mhe_trainer_step_sr(&r.cpu, k.tok, k.n, &k.f) == MHE_OK, "mhe_trainer_step_sr: %s", r.cpu.err);
                return mhe_cuda_trainer_step_sr(&r.dev, k.tok, k.n, &k.f);
            }, {0.2, 0}, [&](lockstep &r) {
                CHECK(mhe_cuda_trainer_step(&r.dev, k.tok, k.n) == MHE_ERR_CONFIG && strstr(r.dev.host.err, "step_sr"),
                      "an S+R model takes no LM step: %s", r.dev.host.err);
                mhe_cls_metrics ec, ed;
                mhe_status sc = mhe_evaluate_sr(&md, k.tok, k.n, &k.f, 4, 16, 3, 0.3f, &ec);
                mhe_status sd = mhe_cuda_evaluate_sr(&r.g, k.tok, k.n, &k.f, 4, 16, 3, 0.3f, &ed);
                CHECK(sc == MHE_OK && sd == MHE_OK && fabs(ed.loss - ec.loss) < 1e-5 * ec.loss &&
                          ed.accuracy == ec.accuracy && ed.n == ec.n,
                      "evaluate S+R: loss %.7f acc %.4f vs CPU %.7f %.4f %s", ed.loss, ed.accuracy, ec.loss, ec.accuracy,
                      r.g.err);
                /* refusals, as the CPU's */
                float l0;
                CHECK(mhe_cuda_model_forward(&r.g, k.tok, NULL, 1, 8, &l0) == MHE_ERR_ARG &&
                          strstr(r.g.err, "word features"), "hash-emb forward without word features: %s", r.g.err);
                mhe_batch bt;
                int bad_tok[4] = {MHE_N_SPECIAL, MHE_N_SPECIAL + k.f.n, 1, 2};
                memset(&bt, 0, sizeof bt);
                bt.B = 1; bt.T = 4; bt.tokens = bad_tok; bt.words = &k.f;
                CHECK(mhe_cuda_model_forward_batch(&r.g, &bt, NULL) == MHE_ERR_DATA && strstr(r.g.err, "word types"),
                      "a word token past the features: %s", r.g.err);
            });
            mhe_model_free(&md);
        }
        mhe_model_free(&mc);
    }
    { /* a hash-emb decoder has no vocabulary softmax: nothing to decode, as mhe_decode_step says */
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_kv_cache kc;
        c = word_config(MHE_EMB_HASH_EMB, 0);
        c.arch = MHE_ARCH_DECODER;
        if (word_model_init(&m, &c, &k, 3)) {
            if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
                CHECK(mhe_cuda_kv_cache_init(&kc, &g, 8) == MHE_ERR_CONFIG && strstr(g.err, "nothing to generate"),
                      "hash-emb decoding: %s", g.err);
                mhe_cuda_model_free(&g);
            }
            mhe_model_free(&m);
        }
    }
    word_corpus_free(&k);
}

/* ---- bad input: a status and a message, never a wrong result ---------------------------- */

static void test_errors(void) {
    mhe_config c = small_config(MHE_ATTN_MHA, MHE_ARCH_DECODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
    mhe_model m;
    mhe_cuda_model g;
    char err[MHE_ERR_LEN] = "";
    CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "mhe_model_init: %s", m.err);

#ifdef MHE_CUDA_EMULATE /* the emulation's hooks provoke what a real GPU does rarely */
    mhe_emu_set_device_count(0);
    CHECK(mhe_cuda_model_init(&g, &m, 0) == MHE_ERR_DEVICE && strstr(g.err, "no CUDA device"), "no device: %s", g.err);
    mhe_emu_set_device_count(1);

    mhe_emu_set_no_kernel_image(1);
    CHECK(mhe_cuda_model_init(&g, &m, 0) == MHE_ERR_DEVICE && strstr(g.err, "no kernel image"), "binary without the arch: %s",
          g.err);
    mhe_emu_set_no_kernel_image(0);

    mhe_emu_set_mem_limit(1000);
    CHECK(mhe_cuda_model_init(&g, &m, 0) == MHE_ERR_NOMEM && strstr(g.err, "out of device memory"),
          "out of device memory at init: %s", g.err);
    mhe_emu_set_mem_limit((size_t)m.n_params * 8 + 4096); /* parameters fit, activations do not */
    if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
        int tok[40] = {0};
        float loss;
        CHECK(mhe_cuda_model_forward(&g, tok, tok, 2, 20, &loss) == MHE_ERR_NOMEM, "out of device memory for activations: %s",
              g.err);
        mhe_cuda_model_free(&g);
    } else {
        CHECK(0, "init within the memory limit: %s", g.err);
    }
    mhe_emu_set_mem_limit(0);
    cudaGetLastError(); /* the errors provoked above are not left for test_device_settled */
#endif

    {
        mhe_config bad = c;
        int kinds_ok = 0;
        for (int kind = 0; kind < MHE_ATTN_KIND_COUNT; kind++) { /* every kind has a device path */
            bad.attn[1] = kind;
            kinds_ok += mhe_cuda_supports(&bad, err) == MHE_OK;
        }
        CHECK(kinds_ok == MHE_ATTN_KIND_COUNT, "%d of %d kinds run on the device", kinds_ok, MHE_ATTN_KIND_COUNT);
        { /* a kind the program registered (host functions) is refused by name, never run elsewhere */
            static mhe_attn_kind_ops ops;
            static int id = -1;
            ops.name = "mine", ops.causal = 1;
            ops.tensors = [](const mhe_config *, mhe_kind_tensor *) { return 0; };
            ops.forward = [](const mhe_kind_call *, const float *, float *) {};
            if (id < 0) id = mhe_attn_kind_register(&ops, err);
            bad.attn[1] = id;
            CHECK(id >= MHE_ATTN_KIND_COUNT && mhe_cuda_supports(&bad, err) == MHE_ERR_CONFIG && strstr(err, "attn=mine") &&
                      strstr(err, "registered"), "a registered kind is refused by name: %s", err);
        }
        bad = c;
        for (int emb = MHE_EMB_HASH_EMB; emb <= MHE_EMB_HASH_PROJ; emb++) { /* every hash kind runs on the device (the hash group) */
            bad.embedding = emb;
            CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "embedding %d runs on the device: %s", emb, err);
        }
        { /* each of BERT's pieces (mhe import) runs on the device (the model group checks them) */
            static const char *const names[] = { "emb_norm", "type_vocab", "head_transform", "head_bias", "cls_pool" };
            for (int k = 0; k < 5; k++) {
                bad = c;
                if (k == 0) bad.emb_norm = 1;
                if (k == 1) bad.type_vocab = 2;
                if (k == 2) bad.head_transform = 1;
                if (k == 3) bad.head_bias = 1;
                if (k == 4) { bad.arch = MHE_ARCH_ENCODER; bad.n_classes = 2; bad.cls_pool = MHE_POOL_FIRST; }
                CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "%s runs on the device: %s", names[k], err);
            }
        }
        bad = c; /* dropout, Admin and a classifier over mha run there */
        bad.dropout = 0.1f;
        bad.attn_dropout = 0.2f;
        bad.admin = bad.post_norm = 1;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "dropout, attention dropout, Admin: %s", err);
        bad.arch = MHE_ARCH_ENCODER;
        bad.n_classes = 3;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "a classification head: %s", err);
        bad.attn[1] = MHE_ATTN_LINEAR; /* its W_seq cut to each length, as nonapprox's scan and fnet's DFT */
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "a classification head over linear: %s", err);
        bad.attn[1] = MHE_ATTN_COLLAB; /* the one config left to the CPU: a query row past the cores' limit */
        bad.collab_dim = MHE_MAX_D_HEAD + 4;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_ERR_CONFIG && strstr(err, "collab_dim 260 exceeds"),
              "collab_dim past the device attention limit: %s", err);
        bad = c;
        bad.arch = MHE_ARCH_ENCDEC; /* runs on the device (the encdec group) */
        bad.enc_layers = 1;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "encdec runs on the device: %s", err);
        bad.dropout = 0.1f; /* the source's and cross-attention's dropout sites run there too */
        bad.attn_dropout = 0.1f;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "encdec with dropout and attention dropout: %s", err);
        bad.admin = bad.post_norm = 1;
        CHECK(mhe_cuda_supports(&bad, err) == MHE_OK, "encdec with Admin: %s", err);
    }
    if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) {
        int tok[4] = {1, 2, 999, 3}, tg[4] = {1, 2, 3, 4};
        float loss;
        CHECK(mhe_cuda_model_forward(&g, tok, tg, 1, 4, &loss) == MHE_ERR_DATA && strstr(g.err, "999"),
              "token outside the vocabulary: %s", g.err);
        int many[30] = {0};
        CHECK(mhe_cuda_model_forward(&g, many, NULL, 1, 30, NULL) == MHE_ERR_SHAPE, "past max_seq_len: %s", g.err);
        CHECK(mhe_cuda_model_backward(&g) == MHE_ERR_ARG, "backward without targets: %s", g.err);
        mhe_cuda_model_free(&g);
    }
    if (mhe_cuda_model_init(&g, &m, 0) == MHE_OK) { /* prefill: refused before anything joins the cache */
        mhe_cuda_kv_cache kc, ref;
        int tok[12] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, bad[3] = {1, 61, 2}, neg[2] = {4, -1};
        std::vector<float> a(c.vocab_size), b(c.vocab_size);
        if (mhe_cuda_kv_cache_init(&kc, &g, 10) == MHE_OK && mhe_cuda_kv_cache_init(&ref, &g, 10) == MHE_OK) {
            CHECK(mhe_cuda_prefill(&g, &kc, tok, 0, a.data()) == MHE_ERR_ARG && strstr(g.err, "no tokens") && kc.len == 0,
                  "prefill of 0 tokens: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, NULL, 3, a.data()) == MHE_ERR_ARG && kc.len == 0, "prefill of NULL: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, tok, 11, a.data()) == MHE_ERR_SHAPE && strstr(g.err, "do not fit") && kc.len == 0,
                  "prefill past the capacity: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, tok, 6, a.data()) == MHE_OK && kc.len == 6, "prefill of 6: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, tok + 6, 5, a.data()) == MHE_ERR_SHAPE && kc.len == 6,
                  "prefill past the capacity after 6 cached: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, bad, 3, a.data()) == MHE_ERR_DATA && strstr(g.err, "61") && kc.len == 6,
                  "prefill of a token past the vocabulary: %s", g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, neg, 2, a.data()) == MHE_ERR_DATA && strstr(g.err, "-1") && kc.len == 6,
                  "prefill of a negative token: %s", g.err);
            CHECK(mhe_cuda_prefill(NULL, &kc, tok, 2, a.data()) == MHE_ERR_ARG && mhe_cuda_prefill(&g, NULL, tok, 2, NULL) == MHE_ERR_ARG,
                  "prefill without a model or cache");
            /* the refusals left the cache as it was: the rest of the prompt continues it exactly */
            mhe_status st = mhe_cuda_prefill(&g, &kc, tok + 6, 4, a.data());
            if (st == MHE_OK)
                st = mhe_cuda_prefill(&g, &ref, tok, 10, b.data());
            CHECK(st == MHE_OK && kc.len == 10 && rel_err(a, b) < 1e-5, "prefill continues after refusals (rel %.3g): %s",
                  rel_err(a, b), g.err);
            CHECK(mhe_cuda_prefill(&g, &kc, tok, 1, NULL) == MHE_ERR_SHAPE && strstr(g.err, "full"), "prefill into a full cache: %s",
                  g.err);
        } else {
            CHECK(0, "KV cache init: %s", g.err);
        }
        mhe_cuda_kv_cache_free(&kc);
        mhe_cuda_kv_cache_free(&ref);
        mhe_cuda_model_free(&g);
    }
    { /* fnet and linear mix whole sequences: encoders, which decode neither here nor on the CPU */
        mhe_config e = small_config(MHE_ATTN_FNET, MHE_ARCH_ENCODER, 0, MHE_NORM_LAYERNORM, MHE_ACT_GELU);
        mhe_model me;
        mhe_cuda_kv_cache kc;
        if (mhe_model_init(&me, &e, 1, NULL) == MHE_OK && mhe_cuda_model_init(&g, &me, 0) == MHE_OK) {
            CHECK(mhe_cuda_kv_cache_init(&kc, &g, 8) == MHE_ERR_CONFIG && strstr(g.err, "needs a decoder"),
                  "decoding an fnet encoder: %s", g.err);
            mhe_cuda_model_free(&g);
            mhe_model_free(&me);
        } else {
            CHECK(0, "fnet encoder: %s%s", me.err, g.err);
        }
    }
    { /* a head past the attention kernels' limit: a status, no launch */
        mhe_attn_dims d;
        memset(&d, 0, sizeof d);
        d.B = 1;
        d.n_heads = d.n_kv_heads = 1;
        d.Tq = d.Tk = 4;
        d.d_head = MHE_MAX_D_HEAD + 1;
        d.q_stride = d.k_stride = d.v_stride = d.o_stride = d.d_head;
        d.scale = 1.0f;
        CHECK(mhe__cu_attn_fwd(&d, 0, 0, NULL, NULL, NULL, NULL, NULL, err) == MHE_ERR_DEVICE, "d_head %d: %s", d.d_head,
              err);
    }
    mhe_model_free(&m);
}

/* name is one of the comma-separated groups in list */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p))
        if (!strncmp(p, name, n) && (p[n] == ',' || !p[n]))
            return 1;
    return 0;
}

/* test_cuda [GROUP[,GROUP...] [T D]]: all groups, or those named; large takes
   its size (default T = 256, d_model = 256; in the emulation 80 and 64, three
   key tiles, about ten seconds, and only when named: tests/cuda/run.sh runs
   it once) */
int main(int argc, char **argv) {
    static const char *const groups[] = {"gemm",  "tf32",  "bf16",   "norm",   "elementwise", "model",   "kinds",
                                         "large", "train", "decode", "prefill",     "eval",    "errors",
                                         "features", "encdec", "hash", "curve"};
    const char *only = argc > 1 ? argv[1] : "";
#ifdef MHE_CUDA_EMULATE
    int large_T = 80, large_D = 64;
#else
    int large_T = 256, large_D = 256;
#endif
    if (argc > 3) {
        large_T = atoi(argv[2]);
        large_D = atoi(argv[3]);
    }
    int named = 0;
    for (const char *g : groups)
        named += in_list(only, g);
    if ((*only && named != 1 + (int)(std::count(only, only + strlen(only), ','))) || argc == 3 || argc > 4 ||
        large_T < 1 || large_D < 4 || large_D % 4) {
        printf("usage: test_cuda [GROUP[,GROUP...] [T D]]; GROUP: gemm tf32 bf16 norm elementwise model kinds large "
               "train decode prefill eval errors features encdec hash curve (large: T >= 1, D a multiple of 4)\n");
        return 2;
    }
    test_device_or_exit("test_cuda");
    mhe_rng_seed(&test_rng, 42);
#ifdef MHE_CUDA_EMULATE
#define GROUP(name) (*only ? in_list(only, name) : strcmp(name, "large") != 0 && strcmp(name, "curve") != 0)
#else
#define GROUP(name) (!*only || in_list(only, name))
#endif
#define RUN(name, call)                                                                                                \
    if (GROUP(name)) {                                                                                                 \
        call;                                                                                                          \
        test_device_settled(name);                                                                                     \
    }
    RUN("gemm", test_gemm(0));
    RUN("tf32", test_gemm(MHE_CUDA_TF32));
    RUN("bf16", test_gemm(MHE_CUDA_BF16));
    RUN("norm", test_norm());
    RUN("elementwise", test_elementwise());
    RUN("model", test_model());
    RUN("kinds", test_kinds());
    RUN("large", test_large(large_T, large_D));
    RUN("train", (test_train(), test_train_graph()));
    RUN("decode", test_decode());
    RUN("prefill", test_prefill());
    RUN("eval", test_eval());
    RUN("errors", test_errors());
    RUN("features", (test_features(), test_features_train()));
    RUN("encdec", test_encdec());
    RUN("hash", test_hash());
    RUN("curve", test_curve());
    return TEST_END();
}
