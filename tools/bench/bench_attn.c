/* bench_attn - MHE fast paths against their reference paths and against MHA
   at equal width: ms per training step and the attention activation memory
   (Q/K/V projections and per-head copies, and the attention statistics) per
   layer, as ratios measured in one run.
     build/bench_attn [--config C1|C2] [--threads N] [--steps N] */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cli/mhe_clock.h"

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

typedef struct { const char *label, *attn; int fused; } variant;

int main(int argc, char **argv) {
    static const variant vs[] = {
        { "mha (fused core)", "mha", 1 }, { "mha (reference core)", "mha", 0 },
        { "mhe-mul fast path", "mhe-mul", 1 }, { "mhe-mul reference path", "mhe-mul", 0 },
        { "mhe-add fast path", "mhe-add", 1 }, { "mhe-add reference path", "mhe-add", 0 },
    };
    int d_model = 256, n_heads = 8, n_layers = 4, T = 128, B = 8, steps = 10, threads = 2, i, v;
    double base_ms = 0, base_mem = 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_attn [--config C1|C2] [--threads N] [--steps N]\n");
            return 0;
        }
        if (i + 1 < argc && strcmp(argv[i], "--config") == 0 && strcmp(argv[++i], "C2") == 0) { d_model = 512; n_layers = 6; T = 256; B = 4; }
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    printf("d_model %d, %d heads, %d layers, T %d, batch %d, %d thread(s), median of %d steps\n\n", d_model, n_heads, n_layers, T, B, threads, steps);
    printf("| attention | ms/step | vs MHA | Q/K/V activations per layer (KB) | vs MHA | attention statistics per layer (KB) |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (v = 0; v < (int)(sizeof vs / sizeof vs[0]); v++) {
        mhe_config c = mhe_config_default();
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m;
        mhe_trainer t;
        char err[MHE_ERR_LEN];
        int *data, n = 1 << 16, s;
        double *ms = (double *)malloc(sizeof(double) * (size_t)steps), qkv_kb, stats_kb;
        mhe_rng r;
        c.d_model = d_model; c.n_heads = n_heads; c.n_layers = n_layers; c.max_seq_len = T; c.fused_attention = vs[v].fused;
        if (mhe_config_set(&c, "attn", vs[v].attn, err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
        tc.batch = B; tc.seq_len = T; tc.steps = steps + 3; tc.warmup = 0; tc.schedule = MHE_SCHED_CONSTANT;
        if (mhe_model_init(&m, &c, 0, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s %s\n", m.err, t.err); return 1; }
        data = (int *)malloc(sizeof(int) * (size_t)n);
        mhe_rng_seed(&r, 0);
        for (i = 0; i < n; i++) data[i] = (int)mhe_rng_below(&r, 256);
        for (s = 0; s < steps + 3; s++) {
            double t0 = now_s();
            if (mhe_trainer_step(&t, data, (size_t)n) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
            if (s >= 3) ms[s - 3] = (now_s() - t0) * 1e3;
        }
        qsort(ms, (size_t)steps, sizeof(double), cmp_d);
        {   /* what one layer keeps for Q, K, V: its projections, plus per-head copies on the MHE reference path */
            mhe__geom g = mhe__layer_geom(&c, c.attn[0]);
            double bt = (double)B * T, hd = (double)n_heads * mhe_config_d_head(&c);
            qkv_kb = bt * (g.proj_w + (m.acts.layer[0].attn.projx ? 3 * hd : 0)) * 4 / 1024;
            stats_kb = (c.fused_attention ? (double)B * n_heads * T : (double)B * n_heads * T * T) * 4 / 1024;
        }
        if (v == 0) { base_ms = ms[steps / 2]; base_mem = qkv_kb; }
        printf("| %s | %.1f | %.2fx | %.0f | %.3fx | %.0f |\n", vs[v].label, ms[steps / 2], ms[steps / 2] / base_ms, qkv_kb,
               qkv_kb / base_mem, stats_kb);
        fflush(stdout);
        mhe_trainer_free(&t);
        mhe_model_free(&m);
        free(data); free(ms);
    }
    return 0;
}
