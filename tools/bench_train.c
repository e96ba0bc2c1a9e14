/* bench_train - milliseconds per training step, tokens/s and peak memory of
   mhe.h on C1 and C2 for the attention kinds mha, mhe-mul, mhe-add and mqa,
   next to the same step in PyTorch (CPU, same threads, the same kind) when it
   is installed, printed as a Markdown table with the ratios.
     build/bench_train                 all configs and kinds, 1 and 2 threads
     build/bench_train --scaling       step time vs sequence length (2048 tokens a step)
     build/bench_train --config C1 --threads 1 [--steps N] [--attn KIND] [--seq T --batch B]
                                       one run (prints a JSON line)
   Step = zero_grad + forward + loss + backward + AdamW (lr 3e-4, betas
   0.9/0.95, wd 0.1, no clipping), one fixed random batch, as the PyTorch
   script tools/bench_train_torch.py does. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#include <windows.h>
#include <psapi.h>
#else
#include <sys/resource.h>
#endif

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
#ifdef _WIN32
/* no getrusage there: the peak working set */
static double peak_rss_mb(void) {
    PROCESS_MEMORY_COUNTERS pmc;
    return K32GetProcessMemoryInfo(GetCurrentProcess(), &pmc, sizeof pmc) ? pmc.PeakWorkingSetSize / 1048576.0 : 0;
}
#else
static double peak_rss_mb(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_maxrss / 1024.0; }
#endif
static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

typedef struct { const char *name; int d_model, n_heads, n_layers, T, B; } bench_cfg;
static const bench_cfg configs[] = { { "C1", 256, 8, 4, 128, 8 }, { "C2", 512, 8, 6, 256, 4 } };

static int run_one(const bench_cfg *bc0, int threads, int steps, int warmup, const char *attn, int seq, int batch) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer t;
    int *data, i, n = 1 << 16;
    double *ms = (double *)malloc(sizeof(double) * (size_t)steps);
    char err[MHE_ERR_LEN];
    mhe_rng r;
    bench_cfg bcv = *bc0, *bc = &bcv;
    if (seq > 0) bcv.T = seq;
    if (batch > 0) bcv.B = batch;
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    c.vocab_size = 256; c.d_model = bc->d_model; c.n_heads = bc->n_heads; c.n_layers = bc->n_layers; c.max_seq_len = bc->T;
    if (mhe_config_set(&c, "attn", attn, err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
    tc.batch = bc->B; tc.seq_len = bc->T; tc.lr = 3e-4f; tc.min_lr = 3e-4f; tc.warmup = 0; tc.schedule = MHE_SCHED_CONSTANT;
    tc.beta1 = 0.9f; tc.beta2 = 0.95f; tc.weight_decay = 0.1f; tc.clip = 0; tc.steps = steps + warmup;
    if (mhe_model_init(&m, &c, 0, NULL) != MHE_OK) { fprintf(stderr, "%s\n", m.err); return 1; }
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
    /* a window of exactly B*(T+1) random tokens is sampled each step; timing does not depend on the text */
    data = (int *)malloc(sizeof(int) * (size_t)n);
    mhe_rng_seed(&r, 0);
    for (i = 0; i < n; i++) data[i] = (int)mhe_rng_below(&r, 256);
    for (i = 0; i < warmup + steps; i++) {
        double t0 = now_s();
        if (mhe_trainer_step(&t, data, (size_t)n) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        if (i >= warmup) ms[i - warmup] = (now_s() - t0) * 1e3;
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_d);
    printf("JSON {\"config\": \"%s\", \"attn\": \"%s\", \"seq\": %d, \"batch\": %d, \"threads\": %d, \"ms_median\": %.2f, \"ms_min\": %.2f, "
           "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"params\": %lld}\n",
           bc->name, attn, bc->T, bc->B, threads, ms[steps / 2], ms[0], bc->B * bc->T / (ms[steps / 2] / 1e3), peak_rss_mb(),
           (long long)m.n_params);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    free(data); free(ms);
    return 0;
}

/* run a command and pull "key": number out of its JSON line */
static int json_run(const char *cmd, double *ms, double *tps, double *rss) {
    char line[1024];
    int found = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    while (fgets(line, sizeof line, p)) {
        char *j = strstr(line, "JSON ");
        char *a, *b, *c;
        if (!j) continue;
        a = strstr(j, "\"ms_median\":"); b = strstr(j, "\"tokens_per_s\":"); c = strstr(j, "\"peak_rss_mb\":");
        if (a && b && c) {
            *ms = atof(a + 12); *tps = atof(b + 15); *rss = atof(c + 14);
            found = 1;
        }
    }
    pclose(p);
    return found;
}

static const char *const kinds[] = { "mha", "mhe-mul", "mhe-add", "mqa" };

/* one mhe run and (when torch) the PyTorch one, both as subprocesses so peak RSS is each run's own */
static int both(const char *self, const char *cfg, int th, const char *kind, int seq, int batch, int steps, int torch,
                double *ms, double *tps, double *rss, double *tms, double *trss) {
    char cmd[768], extra[64] = "";
    double ttps;
    if (seq > 0) snprintf(extra, sizeof extra, " --seq %d --batch %d", seq, batch);
    snprintf(cmd, sizeof cmd, "%s --config %s --threads %d --steps %d --attn %s%s", self, cfg, th, steps, kind, extra);
    if (!json_run(cmd, ms, tps, rss)) return 0;
    *tms = *trss = 0;
    if (torch) {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/bench_train_torch.py --config %s --threads %d --steps %d --warmup %d --attn %s%s",
                 cfg, th, steps, steps / 4 + 1, kind, extra);
        if (!json_run(cmd, tms, &ttps, trss)) *tms = 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *only = NULL, *attn = "mha";
    int threads = 0, steps = 0, seq = 0, batch = 0, scaling = 0, i, ci, th, k;
    int torch = system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_train [--config C1|C2 --threads N [--steps N] [--attn KIND] [--seq T --batch B]]\n"
                   "                   [--scaling] [--no-torch]\n"
                   "Without --config: every config and kind (mha, mhe-mul, mhe-add, mqa) at 1 and 2 threads, mhe\n"
                   "and PyTorch, as a Markdown table. --scaling: step time vs sequence length 128..2048 at 2048\n"
                   "tokens a step (C1 width) for mha, mhe-mul and taylor.\n");
            return 0;
        }
        if (i + 1 < argc && strcmp(argv[i], "--config") == 0) only = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--attn") == 0) attn = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--seq") == 0) seq = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) batch = atoi(argv[++i]);
        else if (strcmp(argv[i], "--scaling") == 0) scaling = 1;
        else if (strcmp(argv[i], "--no-torch") == 0) torch = 0;
    }
    if (only) {
        for (ci = 0; ci < 2; ci++)
            if (strcmp(only, configs[ci].name) == 0)
                return run_one(&configs[ci], threads > 0 ? threads : 1, steps > 0 ? steps : (ci ? 10 : 20), ci ? 3 : 5, attn, seq, batch);
        fprintf(stderr, "unknown config %s\n", only);
        return 2;
    }
    if (scaling) {
        static const char *const sk[] = { "mha", "mhe-mul", "taylor" };
        int L;
        th = threads > 0 ? threads : 1;
        printf("C1 width (d_model 256, 8 heads, 4 layers), 2048 tokens a step (batch 2048/T), %d thread(s)\n\n", th);
        printf("| T | batch | mha ms/step | mhe-mul ms/step | mhe-mul / mha | taylor ms/step | taylor / mha |\n|---:|---:|---:|---:|---:|---:|---:|\n");
        for (L = 128; L <= 2048; L *= 2) {
            double v[3] = { 0, 0, 0 };
            for (k = 0; k < 3; k++) {
                char cmd[512];
                double tps, rss;
                if (mhe_attn_kind_from_name(sk[k]) < 0) continue;   /* not in this build */
                snprintf(cmd, sizeof cmd, "%s --config C1 --threads %d --steps %d --attn %s --seq %d --batch %d", argv[0], th,
                         L >= 1024 ? 4 : 8, sk[k], L, 2048 / L);
                if (!json_run(cmd, &v[k], &tps, &rss)) v[k] = 0;
            }
            printf("| %d | %d | %.1f | %.1f | %.2fx |", L, 2048 / L, v[0], v[1], v[0] > 0 ? v[1] / v[0] : 0);
            if (v[2] > 0) printf(" %.1f | %.2fx |\n", v[2], v[2] / v[0]); else printf(" - | - |\n");
            fflush(stdout);
        }
        return 0;
    }
    printf("| config | threads | attention | mhe ms/step | mhe tokens/s | mhe peak RSS MB | PyTorch ms/step | PyTorch peak RSS MB | speed-up (PyTorch ms / mhe ms) | mhe step / mhe mha step |\n");
    printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (ci = 0; ci < 2; ci++)
        for (th = 1; th <= 2; th++) {
            double mha_ms = 0;
            for (k = 0; k < 4; k++) {
                double ms = 0, tps = 0, rss = 0, tms = 0, trss = 0;
                int st = ci ? 10 : 20;
                if (!both(argv[0], configs[ci].name, th, kinds[k], 0, 0, st, torch, &ms, &tps, &rss, &tms, &trss)) {
                    printf("| %s | %d | %s | failed |\n", configs[ci].name, th, kinds[k]);
                    continue;
                }
                if (k == 0) mha_ms = ms;
                printf("| %s | %d | %s | %.1f | %.0f | %.0f | ", configs[ci].name, th, kinds[k], ms, tps, rss);
                if (tms > 0) printf("%.1f | %.0f | %.2fx | ", tms, trss, tms / ms); else printf("- | - | - | ");
                printf("%.2fx |\n", mha_ms > 0 ? ms / mha_ms : 0);
                fflush(stdout);
            }
        }
    return 0;
}
