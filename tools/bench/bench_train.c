/* bench_train - milliseconds per training step, tokens/s, GFLOP/s against the
   machine's measured FMA peak and peak memory of mhe.h on C1 and C2 for the
   attention kinds mha, mhe-mul, mhe-add and mqa, next to the same step in
   PyTorch 2 (CPU, same threads, the same kind) and, when Debian's torch is
   installed, PyTorch 1.13, printed as a Markdown table with the ratios.
     build/bench_train                 all configs and kinds, 1 and 2 threads
     build/bench_train --scaling       step time vs sequence length (2048 tokens a step)
     build/bench_train --config C1 --threads 1 [--steps N] [--attn KIND] [--seq T --batch B]
                                       one run (prints a JSON line)
     build/bench_train --profile [--config C1] [--threads 1] [--attn KIND]
                                       one run, then ms per step of each operation
                                       class, forward / backward / update, and its share
   Step = zero_grad + forward + loss + backward + AdamW (lr 3e-4, betas
   0.9/0.95, wd 0.1, no clipping), one fixed random batch, as the PyTorch
   script tools/bench/bench_train_torch.py does (run from the repository root).

   PyTorch 2's interpreter: --python PATH, else $MHE_TORCH_PYTHON, else
   ./.venv/bin/python when its torch is >= 2. Debian's /usr/bin/python3 (torch
   1.13) is a second column unless --no-debian.

   FLOPs of a step are counted from the config, not measured: 2 per
   multiply-add of every forward matmul (Q/K/V, or the one seed head of
   mhe-add/mhe-mul, or mqa's one K/V head; W^O; fc1; fc2; the LM head) and of
   the attention core (q k^T and p v) over the T(T+1)/2 causal query-key pairs
   only: PyTorch's scaled_dot_product_attention and mhe's fused kernel both
   skip the masked tiles, so the masked half is not useful work. Backward
   counts twice the forward (mhe's and SDPA's recomputation of the scores is
   not counted); elementwise work (norms, GELU, softmax, AdamW) is ignored.
   The peak is bench_peak.h's FMA loop at the row's thread count. */
#define _POSIX_C_SOURCE 200809L
#define MHE_PROFILE            /* per-operation times for --profile: a clock read per operation, ~0.01 % */
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cli/mhe_clock.h"
#include "bench_peak.h"

#define DEBIAN_PYTHON "/usr/bin/python3"
#define VENV_PYTHON "./.venv/bin/python"

static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

typedef struct { const char *name; int d_model, n_heads, n_layers, T, B; } bench_cfg;
static const bench_cfg configs[] = { { "C1", 256, 8, 4, 128, 8 }, { "C2", 512, 8, 6, 256, 4 } };
enum { VOCAB = 256 };

/* FLOPs of one training step (see the top comment for what is counted) */
static double step_flops(const bench_cfg *bc, const char *kind) {
    double C = bc->d_model, dh = C / bc->n_heads, rows = (double)bc->B * bc->T, T = bc->T;
    double qkv = strcmp(kind, "mqa") == 0 ? C + 2 * dh : strncmp(kind, "mhe-", 4) == 0 ? 3 * dh : 3 * C;
    double linear = bc->n_layers * 2 * rows * C * (qkv + C + 4 * C + 4 * C) + 2 * rows * C * VOCAB;
    double core = bc->n_layers * 2 * (2.0 * bc->B * bc->n_heads * dh * (T * (T + 1) / 2));
    return 3 * (linear + core);
}

/* --profile: the mean time per step of each operation class since the reset, as a Markdown table */
static void print_profile(const char *name, const char *attn, int threads, int steps, double step_ms) {
    static const char *const what[MHE_OP_COUNT] = {
        "token + position embedding", "layer norms", "Q/K/V projections (GEMM)", "attention core",
        "W^O projection (GEMM)", "MLP fc1 (GEMM)", "GELU", "MLP fc2 (GEMM)", "residual adds",
        "LM head (GEMM)", "cross-entropy", "memset (zero_grad, gradient buffers)", "gradient norm (clipping)", "AdamW" };
    mhe_profile p;
    double sum = 0;
    int op;
    mhe_profile_read(&p);
    printf("\n%s %s, %d thread(s): mean of %d steps, %.2f ms per step\n\n", name, attn, threads, steps, step_ms);
    printf("| operation | forward ms | backward ms | update ms | ms per step | share of step |\n|---|---:|---:|---:|---:|---:|\n");
    for (op = 0; op < MHE_OP_COUNT; op++) {
        double f = p.ms[MHE_PHASE_FORWARD][op] / steps, b = p.ms[MHE_PHASE_BACKWARD][op] / steps,
               u = p.ms[MHE_PHASE_UPDATE][op] / steps;
        sum += f + b + u;
        printf("| %s (`%s`) | %.2f | %.2f | %.2f | %.2f | %.1f %% |\n", what[op], mhe_profile_op_name(op), f, b, u, f + b + u,
               100 * (f + b + u) / step_ms);
    }
    printf("| everything else (not timed: batch copy, checks, scratch binding) | | | | %.2f | %.1f %% |\n", step_ms - sum,
           100 * (step_ms - sum) / step_ms);
    printf("| **step** | | | | **%.2f** | 100 %% |\n\n", step_ms);
}

static int run_one(const bench_cfg *bc0, int threads, int steps, int warmup, const char *attn, int seq, int batch,
                   int profile) {
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
    c.vocab_size = VOCAB; c.d_model = bc->d_model; c.n_heads = bc->n_heads; c.n_layers = bc->n_layers; c.max_seq_len = bc->T;
    if (mhe_config_set(&c, "attn", attn, err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
    tc.batch = bc->B; tc.seq_len = bc->T; tc.lr = 3e-4f; tc.min_lr = 3e-4f; tc.warmup = 0; tc.schedule = MHE_SCHED_CONSTANT;
    tc.beta1 = 0.9f; tc.beta2 = 0.95f; tc.weight_decay = 0.1f; tc.clip = 0; tc.steps = steps + warmup;
    if (mhe_model_init(&m, &c, 0, NULL) != MHE_OK) { fprintf(stderr, "%s\n", m.err); return 1; }
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
    /* a window of exactly B*(T+1) random tokens is sampled each step; timing does not depend on the text */
    data = (int *)malloc(sizeof(int) * (size_t)n);
    mhe_rng_seed(&r, 0);
    for (i = 0; i < n; i++) data[i] = (int)mhe_rng_below(&r, VOCAB);
    for (i = 0; i < warmup + steps; i++) {
        double t0;
        if (i == warmup) mhe_profile_reset();
        t0 = now_s();
        if (mhe_trainer_step(&t, data, (size_t)n) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        if (i >= warmup) ms[i - warmup] = (now_s() - t0) * 1e3;
    }
    if (profile) {
        double total = 0;
        for (i = 0; i < steps; i++) total += ms[i];
        print_profile(bc->name, attn, threads, steps, total / steps);
    }
    qsort(ms, (size_t)steps, sizeof(double), cmp_d);
    printf("JSON {\"config\": \"%s\", \"attn\": \"%s\", \"seq\": %d, \"batch\": %d, \"threads\": %d, \"ms_median\": %.2f, \"ms_min\": %.2f, "
           "\"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"params\": %lld, \"gflop_per_step\": %.3f}\n",
           bc->name, attn, bc->T, bc->B, threads, ms[steps / 2], ms[0], bc->B * bc->T / (ms[steps / 2] / 1e3), peak_rss_mb(),
           (long long)m.n_params, step_flops(bc, attn) / 1e9);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    free(data); free(ms);
    return 0;
}

/* one run's JSON line: the numbers, and the peer's torch version and BLAS */
typedef struct { double ms, tps, rss; char version[48], blas[192]; } run_result;

/* the string value of "key": "..." in a JSON line (no escapes expected in these values) */
static void json_str(const char *line, const char *key, char *out, size_t size) {
    const char *p = strstr(line, key);
    size_t n = 0;
    out[0] = 0;
    if (!p || !(p = strchr(p + strlen(key), '"'))) return;
    for (p++; *p && *p != '"' && n + 1 < size; p++) out[n++] = *p;
    out[n] = 0;
}

/* run a command and pull the fields out of its JSON line; 0 when there is none */
static int json_run(const char *cmd, run_result *res) {
    char line[2048];
    int found = 0;
    FILE *p = popen(cmd, "r");
    memset(res, 0, sizeof *res);
    if (!p) return 0;
    while (fgets(line, sizeof line, p)) {
        char *j = strstr(line, "JSON ");
        char *a, *b, *c;
        if (!j) continue;
        a = strstr(j, "\"ms_median\":"); b = strstr(j, "\"tokens_per_s\":"); c = strstr(j, "\"peak_rss_mb\":");
        if (a && b && c) {
            res->ms = atof(a + 12); res->tps = atof(b + 15); res->rss = atof(c + 14);
            json_str(j, "\"torch_version\":", res->version, sizeof res->version);
            json_str(j, "\"blas\":", res->blas, sizeof res->blas);
            found = 1;
        }
    }
    pclose(p);
    return found;
}

/* the major version of `python`'s torch, 0 when it has none (or does not run) */
static int torch_major(const char *python) {
    char cmd[1200], line[64] = "";
    FILE *p;
    if (strchr(python, '\'')) return 0;   /* it goes between single quotes */
    snprintf(cmd, sizeof cmd, "'%s' -c 'import torch; print(torch.__version__)' 2>/dev/null", python);
    if (!(p = popen(cmd, "r"))) return 0;
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    return atoi(line);
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "r");
    if (f) fclose(f);
    return f != NULL;
}

/* the PyTorch script on `python` for one row; res->ms = 0 when it failed */
static void torch_run(const char *python, const char *cfg, int th, const char *kind, int steps, int warmup, const char *extra,
                      run_result *res) {
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "'%s' tools/bench/bench_train_torch.py --config %s --threads %d --steps %d --warmup %d --attn %s%s",
             python, cfg, th, steps, warmup, kind, extra);
    if (!json_run(cmd, res)) res->ms = 0;
}

static const char *const kinds[] = { "mha", "mhe-mul", "mhe-add", "mqa" };

/* "major.minor" of a version string such as 2.15.0+cu132 */
static void short_version(const char *version, char *out, size_t size) {
    const char *dot = strchr(version, '.');
    size_t n = dot ? strcspn(dot + 1, ".+") + (size_t)(dot + 1 - version) : strlen(version);
    if (n >= size) n = size - 1;
    memcpy(out, version, n);
    out[n] = 0;
}

/* a tiny run that names a torch and its BLAS before the table; its column label "PyTorch X.Y" into label */
static int probe_torch(const char *python, const char *tag, run_result *res, char *label, size_t size) {
    char v[48];
    torch_run(python, "C1", 1, "mha", 1, 0, " --seq 8 --batch 1", res);
    if (res->ms <= 0) return 0;
    short_version(res->version, v, sizeof v);
    snprintf(label, size, "PyTorch %s", v);
    printf("%s%s: torch %s (%s), BLAS: %s\n", label, tag, res->version, python, res->blas);
    return 1;
}

int main(int argc, char **argv) {
    const char *only = NULL, *attn = "mha", *python = NULL, *debian = NULL;
    int threads = 0, steps = 0, seq = 0, batch = 0, scaling = 0, torch = 1, use_debian = 1, profile = 0, i, ci, th, k;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_train [--config C1|C2 --threads N [--steps N] [--attn KIND] [--seq T --batch B]]\n"
                   "                   [--scaling] [--threads N] [--python PATH] [--no-debian] [--no-torch]\n"
                   "       bench_train --profile [--config C1|C2] [--threads N] [--attn KIND] [--steps N]\n"
                   "Without --config: every config and kind (mha, mhe-mul, mhe-add, mqa) at 1 and 2 threads (or only\n"
                   "--threads N), mhe next to PyTorch 2 (--python PATH, else $MHE_TORCH_PYTHON, else ./.venv/bin/python\n"
                   "when its torch is >= 2) and Debian's PyTorch (/usr/bin/python3; --no-debian drops it), as a\n"
                   "Markdown table with GFLOP/s against the measured FMA peak. Run from the repository root.\n"
                   "--scaling: step time vs sequence length 128..2048 at 2048 tokens a step (C1 width) for mha,\n"
                   "mhe-mul and taylor. --profile: one run (C1, mha, 1 thread unless given), then the mean ms per\n"
                   "step of each operation class, forward / backward / update, and its share of the step.\n");
            return 0;
        }
        if (i + 1 < argc && strcmp(argv[i], "--config") == 0) only = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--attn") == 0) attn = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--seq") == 0) seq = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) batch = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--python") == 0) python = argv[++i];
        else if (strcmp(argv[i], "--scaling") == 0) scaling = 1;
        else if (strcmp(argv[i], "--profile") == 0) profile = 1;
        else if (strcmp(argv[i], "--no-debian") == 0) use_debian = 0;
        else if (strcmp(argv[i], "--no-torch") == 0) torch = 0;
        else { fprintf(stderr, "bench_train: unknown argument %s (see --help)\n", argv[i]); return 2; }
    }
    if (profile && !only) only = "C1";
    if (only) {
        for (ci = 0; ci < 2; ci++)
            if (strcmp(only, configs[ci].name) == 0)
                return run_one(&configs[ci], threads > 0 ? threads : 1, steps > 0 ? steps : (ci ? 10 : 20), ci ? 3 : 5, attn, seq, batch,
                               profile);
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
                run_result res;
                if (mhe_attn_kind_from_name(sk[k]) < 0) continue;   /* not in this build */
                snprintf(cmd, sizeof cmd, "%s --config C1 --threads %d --steps %d --attn %s --seq %d --batch %d", argv[0], th,
                         L >= 1024 ? 4 : 8, sk[k], L, 2048 / L);
                v[k] = json_run(cmd, &res) ? res.ms : 0;
            }
            printf("| %d | %d | %.1f | %.1f | %.2fx |", L, 2048 / L, v[0], v[1], v[0] > 0 ? v[1] / v[0] : 0);
            if (v[2] > 0) printf(" %.1f | %.2fx |\n", v[2], v[2] / v[0]); else printf(" - | - |\n");
            fflush(stdout);
        }
        return 0;
    }
    if (threads < 0) { fprintf(stderr, "bench_train: --threads must be >= 1\n"); return 2; }

    /* the interpreters: PyTorch 2 (the peer) and Debian's (a second column) */
    if (!torch) python = NULL, use_debian = 0;
    else if (!python && getenv("MHE_TORCH_PYTHON") && *getenv("MHE_TORCH_PYTHON")) python = getenv("MHE_TORCH_PYTHON");
    else if (!python && file_exists(VENV_PYTHON) && torch_major(VENV_PYTHON) >= 2) python = VENV_PYTHON;
    if (python && torch_major(python) < 1) {
        fprintf(stderr, "bench_train: %s has no torch; no PyTorch 2 column\n", python);
        python = NULL;
    }
    if (use_debian && file_exists(DEBIAN_PYTHON) && (!python || strcmp(python, DEBIAN_PYTHON) != 0) && torch_major(DEBIAN_PYTHON) >= 1)
        debian = DEBIAN_PYTHON;

    {
        run_result peer, deb;
        char peer_label[64] = "PyTorch 2", deb_label[64] = "PyTorch 1.13";
        /* thread counts of the rows: 1 and 2, or --threads N alone */
        int counts[2] = { 1, 2 }, n_counts = 2, ti;
        double peak[2];
        memset(&peer, 0, sizeof peer);
        memset(&deb, 0, sizeof deb);
        /* a tiny probe run names each torch and its BLAS before the table */
        if (python) {
            if (!probe_torch(python, "", &peer, peer_label, sizeof peer_label)) {
                fprintf(stderr, "bench_train: tools/bench/bench_train_torch.py failed under %s; no PyTorch 2 column\n", python);
                python = NULL;
            }
        } else {
            printf("PyTorch 2: not found (--python PATH, $MHE_TORCH_PYTHON, or python3 -m venv .venv && "
                   ".venv/bin/pip install torch numpy)\n");
        }
        if (debian && !probe_torch(debian, " (Debian)", &deb, deb_label, sizeof deb_label)) debian = NULL;
        if (threads) counts[0] = threads, n_counts = 1;
        /* measured with nothing else of ours running */
        for (ti = 0; ti < n_counts; ti++) {
            peak[ti] = bench_peak_gflops(counts[ti], 0.2);
            printf("FMA peak (%s, %d lanes, measured): %d thread%s %.1f GFLOP/s\n", BENCH_PEAK_ISA, BENCH_PEAK_LANES,
                   counts[ti], counts[ti] > 1 ? "s" : "", peak[ti]);
        }
        for (ci = 0; ci < 2; ci++)
            for (k = 0; k < 4; k++)
                printf("%s %s: %.2f GFLOP per step\n", configs[ci].name, kinds[k], step_flops(&configs[ci], kinds[k]) / 1e9);
        printf("\n| config | threads | attention | mhe ms/step | mhe tokens/s | mhe GFLOP/s (%% of peak) | %s ms/step | "
               "%s GFLOP/s (%% of peak) | mhe / %s (time) |", peer_label, peer_label, peer_label);
        if (debian) printf(" %s ms/step |", deb_label);
        printf(" mhe step / mhe mha step | peak RSS MB (mhe, %s) |\n", peer_label);
        printf("|---|---:|---|---:|---:|---:|---:|---:|---:|%s---:|---:|\n", debian ? "---:|" : "");
        fflush(stdout);
        for (ci = 0; ci < 2; ci++)
            for (ti = 0; ti < n_counts; ti++) {
                double mha_ms = 0;
                th = counts[ti];
                for (k = 0; k < 4; k++) {
                    const bench_cfg *bc = &configs[ci];
                    double gf = step_flops(bc, kinds[k]) / 1e9;
                    int st = steps > 0 ? steps : (ci ? 10 : 20);
                    char cmd[768];
                    run_result me, pt, db;
                    /* each run is a subprocess, so that its peak RSS is its own */
                    snprintf(cmd, sizeof cmd, "%s --config %s --threads %d --steps %d --attn %s", argv[0], bc->name, th, st, kinds[k]);
                    if (!json_run(cmd, &me)) {
                        printf("| %s | %d | %s | failed |\n", bc->name, th, kinds[k]);
                        continue;
                    }
                    pt.ms = db.ms = 0;
                    if (python) torch_run(python, bc->name, th, kinds[k], st, st / 4 + 1, "", &pt);
                    if (debian) torch_run(debian, bc->name, th, kinds[k], st, st / 4 + 1, "", &db);
                    if (k == 0) mha_ms = me.ms;
                    printf("| %s | %d | %s | %.1f | %.0f | %.1f (%.0f %%) | ", bc->name, th, kinds[k], me.ms, me.tps,
                           gf / (me.ms / 1e3), 100 * gf / (me.ms / 1e3) / peak[ti]);
                    if (pt.ms > 0)
                        printf("%.1f | %.1f (%.0f %%) | %.2fx |", pt.ms, gf / (pt.ms / 1e3), 100 * gf / (pt.ms / 1e3) / peak[ti],
                               me.ms / pt.ms);
                    else
                        printf("- | - | - |");
                    if (debian) {
                        if (db.ms > 0) printf(" %.1f |", db.ms); else printf(" - |");
                    }
                    printf(" %.2fx | %.0f, ", mha_ms > 0 ? me.ms / mha_ms : 0, me.rss);
                    if (pt.ms > 0) printf("%.0f |\n", pt.rss); else printf("- |\n");
                    fflush(stdout);
                }
            }
    }
    return 0;
}
