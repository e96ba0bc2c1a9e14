/* bench_gemm - mhe_gemm against OpenBLAS cblas_sgemm on transformer shapes.

   make build/bench_gemm && ./build/bench_gemm [--quick] [--threads N]

   Prints a Markdown table: GFLOP/s = 2*M*N*K / best time, where each timed
   repetition repeats the call for at least 50 ms. The whole table is measured
   `--rounds` times (default 2) and each cell keeps its best, so that a burst
   of load from another process does not decide a row. The Makefile links
   OpenBLAS (-DMHE_BENCH_OPENBLAS -lopenblas) when <cblas.h> is installed;
   without it only mhe's numbers are printed. mhe and OpenBLAS run back to
   back on each row, with a pause between them so that neither library's
   idle worker threads (both spin for a while after a call) steal the other's
   second core. */
#define _POSIX_C_SOURCE 199309L
#define MHE_IMPLEMENTATION
#include "mhe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void pause_s(double s) {
    struct timespec t;
    t.tv_sec = (time_t)s;
    t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
    nanosleep(&t, NULL);
}

typedef struct bench_call {
    int lib; /* 0 mhe, 1 OpenBLAS */
    const bench_shape *s;
    const float *A, *B;
    float *C;
} bench_call;

static void bench_run(const bench_call *c) {
    const bench_shape *s = c->s;
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (c->lib == 0) {
        mhe_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, c->A, lda, c->B, ldb, 0.0f, c->C, s->N);
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
    printf("usage: %s [--quick] [--rounds N] [--threads N] [--help]\n"
           "  mhe_gemm vs OpenBLAS cblas_sgemm (when linked) on square and transformer shapes,\n"
           "  NN, NT (C = A*B^T) and TN (C = A^T*B), with 1 and 2 threads; prints a Markdown table.\n"
           "  --quick      2 repetitions per cell instead of 5, one round\n"
           "  --rounds N   measure the whole table N times, keep each cell's best (default 2)\n"
           "  --threads N  only N threads (default: 1 and 2)\n", argv0);
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
    double errs[BENCH_MAX_THREADS][BENCH_NSHAPES];
    int have_blas = 0;
#ifdef MHE_BENCH_OPENBLAS
    have_blas = 1;
#endif
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { reps = 2; rounds = 1; }
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) only_threads = atoi(argv[++i]);
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
        for (i = 0; i < BENCH_NSHAPES; i++) tmhe[ti][i] = tblas[ti][i] = 1e30, errs[ti][i] = 0;

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
                if (!have_blas) continue;
#ifdef MHE_BENCH_OPENBLAS
                openblas_set_num_threads(ti);
#endif
                pause_s(0.1);
                c.lib = 1; c.C = C1;
                t = bench_time(&c, reps, 0.05);
                if (t < tblas[ti - 1][i]) tblas[ti - 1][i] = t;
                pause_s(0.1);
                for (k = 0; k < n; k++) {
                    double d = C0[k] > C1[k] ? C0[k] - C1[k] : C1[k] - C0[k];
                    if (d > errs[ti - 1][i]) errs[ti - 1][i] = d;
                }
            }
        }
    }

    printf("| shape (M x K x N) | threads | mhe GFLOP/s | OpenBLAS GFLOP/s | mhe/OpenBLAS | max abs err |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (ti = 1; ti <= BENCH_MAX_THREADS; ti++) {
        if (only_threads && ti != only_threads) continue;
        for (i = 0; i < BENCH_NSHAPES; i++) {
            const bench_shape *s = &shapes[i];
            double flops = 2.0 * s->M * s->N * s->K, tm = tmhe[ti - 1][i], tb = tblas[ti - 1][i];
            if (have_blas) {
                if (tb / tm < worst) worst = tb / tm;
                printf("| %s | %d | %.1f | %.1f | %.2f | %.1e |\n", s->name, ti, flops / tm * 1e-9,
                       flops / tb * 1e-9, tb / tm, errs[ti - 1][i]);
            } else {
                printf("| %s | %d | %.1f | - | - | - |\n", s->name, ti, flops / tm * 1e-9);
            }
        }
    }
    if (have_blas) printf("\nworst mhe/OpenBLAS ratio: %.2f\n", worst);
    else printf("\n(built without OpenBLAS: install libopenblas-dev and rebuild for the comparison)\n");
#ifndef _OPENMP
    printf("(built without OpenMP: every mhe row ran on one thread)\n");
#endif
    free(A); free(B); free(C0); free(C1);
    return 0;
}
