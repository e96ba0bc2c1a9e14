/* bench_cuda - the CUDA companion on a real GPU: GEMM TFLOP/s at transformer
   shapes (float32 SIMT, TF32 and bf16 tensor cores), attention forward +
   backward for mha, mhe-mul and mhe-add at L = 512 .. 8192, training tokens/s
   as `mhe train --device cuda` runs it (a deferred trainer, each step one
   CUDA graph launch; "graph 1.2x": its speed-up over launching every kernel)
   with the device memory it used (d_model 512, 8 layers, T 512; without
   --quick also a 124M-class d_model 768, 12 layers, 12 heads, T 1024), and
   decoding microseconds per token with the KV cache after a prompt. Built by
   `make cuda` (build/cuda/bench_cuda).
   Inputs are random, never zeros. Without a device it says so and exits 0;
   a failed call makes the exit status 1 (make gpu-check runs --quick, and
   tools/bench/bench_torch_cuda.py --bench-cuda puts PyTorch's numbers beside
   these; docs/cuda.md has an H200's).
   usage: bench_cuda [--quick] [--tf32 | --bf16] [--gemm-only | --attn-only | --train-only | --decode-only] */
#define MHE_IMPLEMENTATION
#include "mhe.h"
#include "mhe_cuda.cuh"
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

/* a failed call: named once, and the exit status says so (timings of a failed call mean nothing) */
static int failures;
static void failed(const char *what, const char *why) {
    if (failures++ < 10)
        fprintf(stderr, "bench_cuda: %s failed: %s\n", what, why);
}

static float *dalloc(size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) {
        fprintf(stderr, "bench_cuda: cannot allocate %zu floats on the device\n", n);
        exit(1);
    }
    cudaMemset(p, 0, n * sizeof(float));
    return (float *)p;
}

/* inputs: uniform in [lo, hi), never zeros (zeros time faster than data and hide unwritten outputs) */
static float *drandom(size_t n, float lo, float hi) {
    static mhe_rng r;
    static int seeded;
    if (!seeded)
        mhe_rng_seed(&r, 7), seeded = 1;
    float *d = dalloc(n), *h = (float *)malloc(n * sizeof(float));
    if (!h) {
        fprintf(stderr, "bench_cuda: cannot allocate %zu floats on the host\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * mhe_rng_uniform(&r);
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}

/* median of reps timings (ms) of one call */
template <typename F> static float time_ms(int reps, F f) {
    float t[32], ms;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    f(); /* warm-up */
    if (reps > 32)
        reps = 32;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a, 0);
        f();
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        t[r] = ms;
    }
    for (int i = 1; i < reps; i++) /* insertion sort: a handful of values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[reps / 2];
}

static void bench_gemm(int quick) {
    float *ws = dalloc(MHE__CU_SPLITK_WS); /* as the model's: small outputs split K */
    int tokens = quick ? 1024 : 4096, Cs[2] = {768, 1024};
    printf("\nGEMM, TFLOP/s (float32 SIMT | TF32 and bf16 mma.sync), %d tokens\n", tokens);
    printf("%-28s %8s %8s %8s\n", "shape (M x N x K)", "simt", "tf32", "bf16");
    for (int ci = 0; ci < (quick ? 1 : 2); ci++) {
        int C = Cs[ci];
        struct { const char *what; int ta, M, N, K; } sh[] = {
            {"QKV projection", 0, tokens, 3 * C, C}, {"W^O", 0, tokens, C, C},
            {"MLP up", 0, tokens, 4 * C, C},        {"MLP down", 0, tokens, C, 4 * C},
            {"weight gradient (A^T)", 1, C, 4 * C, tokens}, {"LM head (32000)", 0, tokens, 32000, C}};
        for (auto &s : sh) {
            float *A = drandom((size_t)s.M * s.K, -1, 1), *B = drandom((size_t)s.K * s.N, -1, 1),
                  *Cm = dalloc((size_t)s.M * s.N);
            double flops = 2.0 * s.M * s.N * s.K;
            auto gemm = [&](int precision) {
                cudaError_t e = mhe__cu_gemm(precision, s.ta, 1, s.M, s.N, s.K, 1, A, s.ta ? s.M : s.K, B, s.K, 0, Cm,
                                             s.N, ws, MHE__CU_SPLITK_WS, mhe__cu_no_epi);
                if (e != cudaSuccess)
                    failed(precision == MHE_CUDA_BF16 ? "bf16 GEMM" : precision ? "tf32 GEMM" : "simt GEMM",
                           cudaGetErrorString(e));
            };
            float t0 = time_ms(quick ? 3 : 9, [&] { gemm(MHE_CUDA_FP32); });
            float t1 = time_ms(quick ? 3 : 9, [&] { gemm(MHE_CUDA_TF32); });
            float t2 = time_ms(quick ? 3 : 9, [&] { gemm(MHE_CUDA_BF16); });
            char label[64];
            snprintf(label, sizeof label, "C=%d %s", C, s.what);
            printf("%-28s %8.2f %8.2f %8.2f   (%d x %d x %d)\n", label, flops / t0 / 1e9, flops / t1 / 1e9,
                   flops / t2 / 1e9, s.M, s.N, s.K);
            cudaFree(A);
            cudaFree(B);
            cudaFree(Cm);
        }
    }
    cudaFree(ws);
}

/* precision: the tiled core in float32, or on the tensor cores (--tf32, --bf16) */
static void bench_attn(int quick, int precision) {
    int n = 12, dh = 64, HD = n * dh, Ls[5] = {512, 1024, 2048, 4096, 8192};
    printf("\nattention, causal, %d heads of %d, B*L = 8192 tokens%s: forward | backward ms (ratio to mha)\n", n, dh,
           precision == MHE_CUDA_BF16 ? ", bf16 tensor cores" : precision == MHE_CUDA_TF32 ? ", TF32 tensor cores" : "");
    printf("%6s %20s %28s %28s\n", "L", "mha", "mhe-mul", "mhe-add");
    for (int li = 0; li < (quick ? 2 : 5); li++) {
        int L = Ls[li], B = 8192 / L > 0 ? 8192 / L : 1;
        size_t rows = (size_t)B * L;
        float *q = drandom(rows * HD, -1, 1), *k = drandom(rows * HD, -1, 1), *v = drandom(rows * HD, -1, 1),
              *o = dalloc(rows * HD), *go = drandom(rows * HD, -1, 1), *dq = dalloc(rows * HD), *dk = dalloc(rows * HD),
              *dv = dalloc(rows * HD), *lse = dalloc(rows * n), *maps = drandom(4 * (size_t)HD, 0.5f, 1.5f),
              *kb = drandom(rows * n, -1, 1), *scr = dalloc(rows * n);
        float res[3][2];
        char err[MHE_ERR_LEN];
        for (int kind = 0; kind < 3; kind++) {
            mhe_attn_dims d;
            mhe_attn_grads gr;
            memset(&d, 0, sizeof d);
            memset(&gr, 0, sizeof gr);
            d.B = B, d.n_heads = n, d.Tq = d.Tk = L, d.d_head = dh, d.causal = 1, d.scale = 0.125f, d.o_stride = HD;
            if (kind == 0) { /* mha: per-head Q, K, V */
                d.n_kv_heads = n, d.q_stride = d.k_stride = d.v_stride = HD;
            } else { /* MHE: one seed head, the maps inside the core (MUL) or a key bias (ADD) */
                d.n_kv_heads = 1, d.q_shared = 1, d.q_stride = d.k_stride = d.v_stride = dh;
                if (kind == 1)
                    d.q_mul = maps, d.v_mul = maps + HD, gr.dq_mul = maps + 2 * HD, gr.dv_mul = maps + 3 * HD;
                else
                    d.k_bias = kb, d.k_bias_stride = n, d.v_add = maps, gr.dk_bias = kb, gr.dv_add = maps + HD;
            }
            res[kind][0] = time_ms(quick ? 3 : 5, [&] {
                if (mhe__cu_attn_fwd(&d, 0, precision, o, lse, q, k, v, err) != MHE_OK)
                    failed("attention forward", err);
            });
            res[kind][1] = time_ms(quick ? 3 : 5, [&] {
                if (mhe__cu_attn_bwd(&d, 0, precision, &gr, dq, dk, dv, go, o, lse, q, k, v, scr, err) != MHE_OK)
                    failed("attention backward", err);
            });
        }
        printf("%6d %9.2f | %8.2f %9.2f | %6.2f (%.2fx) %9.2f | %6.2f (%.2fx)\n", L, res[0][0], res[0][1], res[1][0],
               res[1][1], (res[1][0] + res[1][1]) / (res[0][0] + res[0][1]), res[2][0], res[2][1],
               (res[2][0] + res[2][1]) / (res[0][0] + res[0][1]));
        for (float *p : {q, k, v, o, go, dq, dk, dv, lse, maps, kb, scr})
            cudaFree(p);
    }
    printf("attention activations kept per token and layer: mha Q,K,V %d floats; mhe-mul/mhe-add %d (1/%d)\n", 3 * HD,
           3 * dh, n);
}

/* the benchmarks' byte-level GPTs (tools/bench/bench_torch_cuda.py builds the same): d_model,
   layers, heads, T, and the suffix of their rows' kind ("" for the first) */
struct bench_gpt {
    int d, layers, heads, T;
    const char *suffix;
};
static const bench_gpt gpt_quick = {128, 2, 8, 128, ""}, gpt_c2 = {512, 8, 8, 512, ""},
                       gpt_124m = {768, 12, 12, 1024, "-124M"};
static const int bench_kinds[3] = {MHE_ATTN_MHA, MHE_ATTN_MHE_MUL, MHE_ATTN_MHE_ADD};

static mhe_config bench_config(const bench_gpt &s, int kind) {
    mhe_config c = mhe_config_default();
    c.vocab_size = 256, c.d_model = s.d, c.n_heads = s.heads, c.n_layers = s.layers, c.max_seq_len = s.T;
    for (int l = 0; l < c.n_layers; l++)
        c.attn[l] = kind;
    return c;
}

static int bench_train(int quick, int precision) {
    size_t n = 1 << 20;
    int *data = (int *)malloc(n * sizeof(int));
    mhe_rng r;
    mhe_rng_seed(&r, 1);
    for (size_t i = 0; i < n; i++)
        data[i] = (int)mhe_rng_below(&r, 256);
    printf("\ntraining a byte-level GPT (random bytes): tokens/s and device memory%s\n",
           precision == MHE_CUDA_TF32 ? ", TF32 GEMMs" : precision == MHE_CUDA_BF16 ? ", bf16 GEMMs" : "");
    bench_gpt sizes[2] = {quick ? gpt_quick : gpt_c2, gpt_124m};
    for (int si = 0; si < (quick ? 1 : 2); si++)
    for (int ki = 0; ki < 3; ki++) {
        const bench_gpt &s = sizes[si];
        mhe_config c = bench_config(s, bench_kinds[ki]);
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_trainer t;
        size_t free0 = 0, free1 = 0, total = 0;
        char kind[32];
        snprintf(kind, sizeof kind, "%s%s", mhe_attn_kind_name(bench_kinds[ki]), s.suffix);
        if (ki == 0)
            printf("d_model %d, %d layers, %d heads, T %d, batch 8\n", s.d, s.layers, s.heads, s.T);
        tc.batch = 8, tc.seq_len = c.max_seq_len, tc.steps = quick ? 3 : 20;
        cudaMemGetInfo(&free0, &total);
        if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK || mhe_cuda_model_init(&g, &m, precision) != MHE_OK) {
            fprintf(stderr, "bench_cuda: %s%s\n", m.err, g.err);
            return 1;
        }
        /* as mhe train --device cuda runs (deferred, the step as a CUDA graph), and launching every
           kernel: groups of 4 steps between two events, so the host records step k + 1 while the
           device runs step k */
        float ms[2];
        for (int graph = 1; graph >= 0; graph--) {
            if (mhe_cuda_trainer_init(&t, &g, &tc) != MHE_OK) {
                fprintf(stderr, "bench_cuda: %s\n", t.host.err);
                return 1;
            }
            t.deferred = 1;
            t.graph = graph;
            ms[graph] = time_ms(quick ? 3 : 9, [&] {
                for (int k = 0; k < 4; k++)
                    if (mhe_cuda_trainer_step(&t, data, n) != MHE_OK)
                        failed("training step", t.host.err);
            }) / 4;
            if (mhe_cuda_trainer_stats(&t) != MHE_OK)
                failed("training step", t.host.err);
            if (graph && (t.graph_launches < 1 || t.graph_error != cudaSuccess))
                failed("training step as a CUDA graph", cudaGetErrorString(t.graph_error));
            if (graph)
                cudaMemGetInfo(&free1, &total);
            mhe_cuda_trainer_free(&t);
        }
        printf("%-8s %8.0f tokens/s  %7.1f ms/step  device memory %.1f MB (library %.1f MB)  graph %.2fx\n", kind,
               tc.batch * tc.seq_len / (ms[1] / 1e3), ms[1], (free0 - free1) / 1e6,
               (g.device_bytes + 2.0 * m.n_params * 4) / 1e6, ms[0] / ms[1]);
        mhe_cuda_model_free(&g);
        mhe_model_free(&m);
    }
    free(data);
    return 0;
}

/* decoding: a prompt of P random bytes into the KV cache (mhe_cuda_prefill), then N greedy tokens
   one decode step each, the logits copied to the host and the next token picked there (as mhe
   generate does): microseconds per new token, the median of three runs */
static int bench_decode(int quick, int precision) {
    int P = quick ? 32 : 128, N = quick ? 32 : 256;
    const bench_gpt &s = quick ? gpt_quick : gpt_c2;
    printf("\ndecoding with the KV cache, d_model %d, %d layers, %d heads, prompt %d, %d new tokens, batch 1%s\n", s.d,
           s.layers, s.heads, P, N, precision == MHE_CUDA_TF32 ? ", TF32 GEMMs" : precision == MHE_CUDA_BF16 ? ", bf16 GEMMs" : "");
    for (int ki = 0; ki < 3; ki++) {
        mhe_config c = bench_config(s, bench_kinds[ki]);
        mhe_model m;
        mhe_cuda_model g;
        mhe_cuda_kv_cache kv;
        mhe_rng r;
        std::vector<int> prompt(P);
        std::vector<float> logits(256);
        mhe_rng_seed(&r, 3);
        for (int &t : prompt)
            t = (int)mhe_rng_below(&r, 256);
        if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK || mhe_cuda_model_init(&g, &m, precision) != MHE_OK ||
            mhe_cuda_kv_cache_init(&kv, &g, P + N) != MHE_OK) {
            fprintf(stderr, "bench_cuda: %s%s\n", m.err, g.err);
            return 1;
        }
        float t[3];
        for (int rep = 0; rep < 3; rep++) {
            kv.len = 0;
            if (mhe_cuda_prefill(&g, &kv, prompt.data(), P, logits.data()) != MHE_OK)
                failed("prefill", g.err);
            cudaEvent_t a, b;
            cudaEventCreate(&a);
            cudaEventCreate(&b);
            cudaEventRecord(a, 0);
            for (int i = 0; i < N; i++) {
                int next = (int)(std::max_element(logits.begin(), logits.end()) - logits.begin());
                if (mhe_cuda_decode_step(&g, &kv, next, logits.data()) != MHE_OK) {
                    failed("decode step", g.err);
                    break;
                }
            }
            cudaEventRecord(b, 0);
            cudaEventSynchronize(b);
            cudaEventElapsedTime(&t[rep], a, b);
            cudaEventDestroy(a);
            cudaEventDestroy(b);
        }
        std::sort(t, t + 3);
        mhe_kv_cache hk; /* the CPU's cache of the same model: its bytes per token */
        size_t per_token = 0;
        if (mhe_kv_cache_init(&hk, &m, 1, NULL) == MHE_OK) {
            per_token = hk.bytes_per_token;
            mhe_kv_cache_free(&hk);
        }
        printf("decode %-8s %9.1f us/token  KV cache %zu bytes/token\n", mhe_attn_kind_name(bench_kinds[ki]),
               1e3 * t[1] / N, per_token);
        mhe_cuda_kv_cache_free(&kv);
        mhe_cuda_model_free(&g);
        mhe_model_free(&m);
    }
    return 0;
}

int main(int argc, char **argv) {
    int quick = 0, precision = MHE_CUDA_FP32, only = 0;
    char name[256], err[MHE_ERR_LEN];
    int major = 0, minor = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--tf32"))
            precision = MHE_CUDA_TF32;
        else if (!strcmp(argv[i], "--bf16"))
            precision = MHE_CUDA_BF16;
        else if (!strcmp(argv[i], "--gemm-only"))
            only = 1;
        else if (!strcmp(argv[i], "--attn-only"))
            only = 2;
        else if (!strcmp(argv[i], "--train-only"))
            only = 3;
        else if (!strcmp(argv[i], "--decode-only"))
            only = 4;
        else {
            fprintf(stderr, "usage: bench_cuda [--quick] [--tf32 | --bf16] [--gemm-only | --attn-only | --train-only | "
                            "--decode-only]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (mhe_cuda_device(name, sizeof name, &major, &minor, err) != MHE_OK) {
        printf("bench_cuda: no CUDA device (%s): nothing to measure\n", err);
        return 0;
    }
    printf("device: %s (compute capability %d.%d)\n", name, major, minor);
    int rc = 0;
    if (!only || only == 1)
        bench_gemm(quick);
    if (!only || only == 2)
        bench_attn(quick, precision);
    if (!only || only == 3)
        rc = bench_train(quick, precision);
    if ((!only || only == 4) && !rc)
        rc = bench_decode(quick, precision);
    cudaError_t e = cudaDeviceSynchronize(); /* a fault in the last kernels shows here */
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        failed("the device at exit", cudaGetErrorString(e));
    if (failures)
        fprintf(stderr, "bench_cuda: %d failed calls: the numbers above are not valid\n", failures);
    return failures ? 1 : rc;
}
