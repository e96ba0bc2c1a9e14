/* bench_gemm - mhe_gemm against OpenBLAS and MKL cblas_sgemm on transformer
   shapes, and against the machine's measured FMA peak (tools/bench/bench_peak.h).

   make build/bench_gemm && ./build/bench_gemm [--quick] [--threads N] [--mkl PATH]

   Prints a Markdown table: GFLOP/s = 2*M*N*K / best time, where each timed
   repetition repeats the call for at least 50 ms. The whole table is measured
   `--rounds` times (default 2) and each cell keeps its best, so that a burst
   of load from another process does not decide a row. The Makefile links
   OpenBLAS (-DMHE_BENCH_OPENBLAS -lopenblas) when <cblas.h> is installed;
   without it that column is left out. MKL is loaded at run time (dlopen, so
   nothing links against it): --mkl PATH, else $MHE_MKL, else
   ./.venv/lib/libmkl_rt.so* (pip install mkl into the venv), else the
   system's libmkl_rt.so; it runs on GNU OpenMP (MKL_THREADING_LAYER=GNU
   unless set), the runtime mhe uses, so that two thread pools do not fight
   over the cores. The libraries run back to back on each row, with a pause
   between them so that no library's idle worker threads (they spin for a
   while after a call) steal the next one's second core. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "mhe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../cli/mhe_clock.h"
#include "bench_peak.h"
#ifndef _WIN32
#include <dlfcn.h>
#include <glob.h>
#define BENCH_HAVE_DLOPEN 1
#endif

#ifdef MHE_BENCH_OPENBLAS
#include <cblas.h>
void openblas_set_num_threads(int);
#endif

typedef struct bench_shape {
    const char *name;
    int ta, tb, M, K, N;
} bench_shape;

static const bench_shape shapes[] = {
    {"sq256", 0, 0, 256, 256, 256},
    {"sq512", 0, 0, 512, 512, 512},
    {"sq1024", 0, 0, 1024, 1024, 1024},
    {"NN 1024x256x768", 0, 0, 1024, 256, 768},
    {"NN 1024x768x256", 0, 0, 1024, 768, 256},
    {"NN 4096x512x2048", 0, 0, 4096, 512, 2048},
    {"NT 1024x256x768", 0, 1, 1024, 256, 768},
    {"NT 1024x768x256", 0, 1, 1024, 768, 256},
    {"NT 4096x512x2048", 0, 1, 4096, 512, 2048},
    {"TN 1024x256x768", 1, 0, 1024, 256, 768},
    {"TN 1024x768x256", 1, 0, 1024, 768, 256},
    {"TN 4096x512x2048", 1, 0, 4096, 512, 2048},
};

/* MKL's cblas_sgemm and thread setter, from dlsym; CBLAS's enum values */
typedef void (*sgemm_fn)(int layout, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc);
static sgemm_fn mkl_sgemm;
static void (*mkl_set_threads)(int);
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

#ifdef BENCH_HAVE_DLOPEN
static void *mkl_try(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL), *sgemm, *set_threads;
    if (!h) return NULL;
    /* memcpy: ISO C has no cast from an object pointer to a function pointer */
    sgemm = dlsym(h, "cblas_sgemm");
    set_threads = dlsym(h, "MKL_Set_Num_Threads");
    memcpy(&mkl_sgemm, &sgemm, sizeof sgemm);
    memcpy(&mkl_set_threads, &set_threads, sizeof set_threads);
    if (mkl_sgemm && mkl_set_threads) return h;
    mkl_sgemm = NULL;
    dlclose(h);
    return NULL;
}
#endif

/* MKL from the first place that has it (see the top comment); its path in
   `found`, or 0 when there is none */
static int mkl_load(const char *path, char *found, size_t size) {
#ifdef BENCH_HAVE_DLOPEN
    static const char *const system_names[] = { "libmkl_rt.so", "libmkl_rt.so.2", "libmkl_rt.so.3" };
    const char *env = getenv("MHE_MKL");
    glob_t g;
    size_t i;
    /* must be in the environment before MKL starts; a user's own choice stays */
#ifdef _OPENMP
    setenv("MKL_THREADING_LAYER", "GNU", 0);
#endif
    if (path) {
        snprintf(found, size, "%s", path);
        return mkl_try(path) != NULL;
    }
    if (env && *env) {
        snprintf(found, size, "%s", env);
        return mkl_try(env) != NULL;
    }
    if (glob("./.venv/lib/libmkl_rt.so*", 0, NULL, &g) == 0) {
        for (i = 0; i < g.gl_pathc; i++)
            if (mkl_try(g.gl_pathv[i])) {
                snprintf(found, size, "%s", g.gl_pathv[i]);
                globfree(&g);
                return 1;
            }
        globfree(&g);
    }
    for (i = 0; i < sizeof system_names / sizeof system_names[0]; i++)
        if (mkl_try(system_names[i])) {
            snprintf(found, size, "%s", system_names[i]);
            return 1;
        }
#else
    (void)path; (void)size;
#endif
    found[0] = 0;
    return 0;
}

static void pause_s(double s) {
    struct timespec t;
    t.tv_sec = (time_t)s;
    t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    nanosleep(&t, NULL);
}

typedef struct bench_call {
    int lib; /* 0 mhe, 1 OpenBLAS, 2 MKL */
    const bench_shape *s;
    const float *A, *B;
    float *C;
} bench_call;

static void bench_run(const bench_call *c) {
    const bench_shape *s = c->s;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (c->lib == 0) {
        mhe_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, c->A, lda, c->B, ldb, 0.0f, c->C, s->N);
    } else if (c->lib == 2) {
        mkl_sgemm(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS, s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS,
                  s->M, s->N, s->K, 1.0f, c->A, lda, c->B, ldb, 0.0f, c->C, s->N);
    } else {
#ifdef MHE_BENCH_OPENBLAS
        cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans,
                    s->M, s->N, s->K, 1.0f, c->A, lda, c->B, ldb, 0.0f, c->C, s->N);
#endif
    }
}

/* best time per call over `reps` repetitions of >= min_s seconds each */
static double bench_time(const bench_call *c, int reps, double min_s) {
    double best = 1e30;
    int r, n = 1;
    double t0 = now_s();
    bench_run(c); /* warm-up, and a first guess of the call count */
    {
        double t = now_s() - t0;
        n = t > 0 ? (int)(min_s / t) + 1 : 1000;
    }
    for (r = 0; r < reps; r++) {
        double t;
        int i;
        t0 = now_s();
        for (i = 0; i < n; i++) bench_run(c);
        t = (now_s() - t0) / n;
        if (t < best) best = t;
    }
    return best;
}

static void usage(const char *argv0) {
    printf("usage: %s [--quick] [--rounds N] [--threads N] [--mkl PATH] [--help]\n"
           "  mhe_gemm vs OpenBLAS cblas_sgemm (when linked) and MKL's (when found) on square and\n"
           "  transformer shapes, NN, NT (C = A*B^T) and TN (C = A^T*B), with 1 and 2 threads, and\n"
           "  mhe's share of the measured FMA peak; prints a Markdown table.\n"
           "  --quick      2 repetitions per cell instead of 5, one round\n"
           "  --rounds N   measure the whole table N times, keep each cell's best (default 2)\n"
           "  --threads N  only N threads (default: 1 and 2)\n"
           "  --mkl PATH   libmkl_rt to load (default: $MHE_MKL, ./.venv/lib/libmkl_rt.so*, the system's)\n", argv0);
}

#define BENCH_MAX_THREADS 2
#define BENCH_NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

int main(int argc, char **argv) {
    int reps = 5, rounds = 2, only_threads = 0, i, ti, round;
    size_t maxa = 0, maxb = 0, maxc = 0;
    float *A, *B, *C0, *C1;
    double worst = 1e30;
    /* best seconds per call and max error, per [threads-1][shape] */
    double tmhe[BENCH_MAX_THREADS][BENCH_NSHAPES], tblas[BENCH_MAX_THREADS][BENCH_NSHAPES];
    double tmkl[BENCH_MAX_THREADS][BENCH_NSHAPES], errs[BENCH_MAX_THREADS][BENCH_NSHAPES];
    double peak[BENCH_MAX_THREADS], worst_mkl = 1e30;
    const char *mkl_path = NULL;
    char mkl_found[1024];
    int have_blas = 0, have_mkl;
#ifdef MHE_BENCH_OPENBLAS
    have_blas = 1;
#endif
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { reps = 2; rounds = 1; }
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mkl") && i + 1 < argc) mkl_path = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(argv[0]); return 0; }
        else { usage(argv[0]); return 2; }
    }
    if (rounds < 1) rounds = 1;
    if (only_threads < 0 || only_threads > BENCH_MAX_THREADS) {
        fprintf(stderr, "--threads must be 1 or 2\n");
        return 2;
    }
    for (i = 0; i < BENCH_NSHAPES; i++) {
        size_t a = (size_t)shapes[i].M * shapes[i].K, b = (size_t)shapes[i].K * shapes[i].N,
               c = (size_t)shapes[i].M * shapes[i].N;
        if (a > maxa) maxa = a;
        if (b > maxb) maxb = b;
        if (c > maxc) maxc = c;
    }
    A = (float *)malloc(maxa * sizeof *A);
    B = (float *)malloc(maxb * sizeof *B);
    C0 = (float *)malloc(maxc * sizeof *C0);
    C1 = (float *)malloc(maxc * sizeof *C1);
    if (!A || !B || !C0 || !C1) { fprintf(stderr, "out of memory\n"); return 1; }
    {
        mhe_rng r;
        size_t k;
        mhe_rng_seed(&r, 1);
        for (k = 0; k < maxa; k++) A[k] = 2.0f * mhe_rng_uniform(&r) - 1.0f;
        for (k = 0; k < maxb; k++) B[k] = 2.0f * mhe_rng_uniform(&r) - 1.0f;
    }
    for (ti = 0; ti < BENCH_MAX_THREADS; ti++)
        for (i = 0; i < BENCH_NSHAPES; i++) tmhe[ti][i] = tblas[ti][i] = tmkl[ti][i] = 1e30, errs[ti][i] = 0;
    have_mkl = mkl_load(mkl_path, mkl_found, sizeof mkl_found);
    if (have_mkl) printf("MKL: %s\n", mkl_found);
    else if (mkl_found[0]) fprintf(stderr, "bench_gemm: cannot load MKL from %s (or it has no cblas_sgemm)\n", mkl_found);
    else printf("MKL: not found (pip install mkl into ./.venv, or --mkl PATH)\n");
    /* before any library has started a thread pool */
    for (ti = 1; ti <= BENCH_MAX_THREADS; ti++) {
        peak[ti - 1] = 0;
        if (only_threads && ti != only_threads) continue;
        peak[ti - 1] = bench_peak_gflops(ti, 0.2);
        printf("FMA peak (%s, %d lanes, measured): %d thread%s %.1f GFLOP/s\n", BENCH_PEAK_ISA, BENCH_PEAK_LANES, ti,
               ti > 1 ? "s" : "", peak[ti - 1]);
    }
    printf("\n");

    for (round = 0; round < rounds; round++) {
        fprintf(stderr, "round %d of %d\n", round + 1, rounds);
        for (ti = 1; ti <= BENCH_MAX_THREADS; ti++) {
            if (only_threads && ti != only_threads) continue;
            for (i = 0; i < BENCH_NSHAPES; i++) {
                const bench_shape *s = &shapes[i];
                double t;
                bench_call c;
                size_t k, n = (size_t)s->M * s->N;
#ifdef _OPENMP
                omp_set_num_threads(ti);
#endif
                c.s = s; c.A = A; c.B = B;
                c.lib = 0; c.C = C0;
                t = bench_time(&c, reps, 0.05);
                if (t < tmhe[ti - 1][i]) tmhe[ti - 1][i] = t;
                /* lib 1 OpenBLAS, lib 2 MKL: each checked against mhe's C0 */
                for (c.lib = 1; c.lib <= 2; c.lib++) {
                    double *best = c.lib == 1 ? &tblas[ti - 1][i] : &tmkl[ti - 1][i];
                    if (c.lib == 1 ? !have_blas : !have_mkl) continue;
#ifdef MHE_BENCH_OPENBLAS
                    if (c.lib == 1) openblas_set_num_threads(ti);
#endif
                    if (c.lib == 2) mkl_set_threads(ti);
                    pause_s(0.1);
                    c.C = C1;
                    t = bench_time(&c, reps, 0.05);
                    if (t < *best) *best = t;
                    pause_s(0.1);
                    for (k = 0; k < n; k++) {
                        double d = C0[k] > C1[k] ? C0[k] - C1[k] : C1[k] - C0[k];
                        if (d > errs[ti - 1][i]) errs[ti - 1][i] = d;
                    }
                }
            }
        }
    }

    /* ratios are speed ratios: above 1, mhe is faster */
    printf("| shape (M x K x N) | threads | mhe GFLOP/s | mhe %% of peak | OpenBLAS GFLOP/s | mhe/OpenBLAS | "
           "MKL GFLOP/s | mhe/MKL | max abs err |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (ti = 1; ti <= BENCH_MAX_THREADS; ti++) {
        if (only_threads && ti != only_threads) continue;
        for (i = 0; i < BENCH_NSHAPES; i++) {
            const bench_shape *s = &shapes[i];
            double flops = 2.0 * s->M * s->N * s->K, tm = tmhe[ti - 1][i], tb = tblas[ti - 1][i], tk = tmkl[ti - 1][i];
            printf("| %s | %d | %.1f | %.0f %% | ", s->name, ti, flops / tm * 1e-9, 100 * flops / tm * 1e-9 / peak[ti - 1]);
            if (have_blas) {
                if (tb / tm < worst) worst = tb / tm;
                printf("%.1f | %.2f | ", flops / tb * 1e-9, tb / tm);
            } else {
                printf("- | - | ");
            }
            if (have_mkl) {
                if (tk / tm < worst_mkl) worst_mkl = tk / tm;
                printf("%.1f | %.2f | ", flops / tk * 1e-9, tk / tm);
            } else {
                printf("- | - | ");
            }
            if (have_blas || have_mkl) printf("%.1e |\n", errs[ti - 1][i]); else printf("- |\n");
        }
    }
    if (have_blas) printf("\nworst mhe/OpenBLAS ratio: %.2f\n", worst);
    else printf("\n(built without OpenBLAS: install libopenblas-dev and rebuild for the comparison)\n");
    if (have_mkl) printf("worst mhe/MKL ratio: %.2f\n", worst_mkl);
#ifndef _OPENMP
    printf("(built without OpenMP: every mhe row ran on one thread)\n");
#endif
    free(A); free(B); free(C0); free(C1);
    return 0;
}
