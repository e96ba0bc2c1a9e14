/* bench_peak.h - this machine's float32 FMA peak, measured: the yardstick for
   the "% of peak" columns of bench_gemm and bench_train.

   A loop of independent fused multiply-adds on the widest vectors the
   compiler was told about (-march): AVX-512F, AVX2+FMA, NEON, else scalar.
   Each accumulator is a dependency chain; an FMA unit has a latency of about
   4 cycles and a core has up to 2 (x86) or 4 (Apple) of them, so 8-16 chains
   in flight keep every unit busy. GFLOP/s counts 2 flops per FMA lane. The
   scalar fallback is a multiply and an add (the Makefile's -std=c99 turns off
   FP contraction, so the compiler does not fuse them), also 2 flops.

   bench_peak_gflops(threads, seconds) runs the loop on `threads` OpenMP
   threads (one without OpenMP) and returns the best of three timings. The
   including file defines MHE_IMPLEMENTATION's mhe.h (for omp.h) and
   mhe_clock.h first. */
#ifndef BENCH_PEAK_H
#define BENCH_PEAK_H
#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#define BENCH_PEAK_X4(OP, a) OP(a) OP(a + 1) OP(a + 2) OP(a + 3)
/* per ISA: the vector type, broadcast, x * m + a fused, add, store */
#if defined(__AVX512F__)
#define BENCH_PEAK_ISA "AVX-512F"
#define BENCH_PEAK_LANES 16
#define BENCH_PEAK_CHAINS 16   /* 32 zmm registers */
typedef __m512 bench_peak_vec;
#define BENCH_PEAK_SET1(x) _mm512_set1_ps(x)
#define BENCH_PEAK_FMA(x, m, a) _mm512_fmadd_ps(x, m, a)
#define BENCH_PEAK_ADD(x, y) _mm512_add_ps(x, y)
#define BENCH_PEAK_STORE(p, x) _mm512_storeu_ps(p, x)
#elif defined(__FMA__)
#define BENCH_PEAK_ISA "AVX2 FMA"
#define BENCH_PEAK_LANES 8
#define BENCH_PEAK_CHAINS 12   /* 16 ymm registers: 12 chains and the two operands */
typedef __m256 bench_peak_vec;
#define BENCH_PEAK_SET1(x) _mm256_set1_ps(x)
#define BENCH_PEAK_FMA(x, m, a) _mm256_fmadd_ps(x, m, a)
#define BENCH_PEAK_ADD(x, y) _mm256_add_ps(x, y)
#define BENCH_PEAK_STORE(p, x) _mm256_storeu_ps(p, x)
#elif defined(__ARM_NEON) && (defined(__aarch64__) || defined(__ARM_FEATURE_FMA))
#define BENCH_PEAK_ISA "NEON FMA"
#define BENCH_PEAK_LANES 4
#define BENCH_PEAK_CHAINS 16   /* 32 q registers on AArch64 */
typedef float32x4_t bench_peak_vec;
#define BENCH_PEAK_SET1(x) vdupq_n_f32(x)
#define BENCH_PEAK_FMA(x, m, a) vfmaq_f32(a, x, m)   /* a + x * m */
#define BENCH_PEAK_ADD(x, y) vaddq_f32(x, y)
#define BENCH_PEAK_STORE(p, x) vst1q_f32(p, x)
#else
#define BENCH_PEAK_ISA "scalar"
#define BENCH_PEAK_LANES 1
#define BENCH_PEAK_CHAINS 12
typedef float bench_peak_vec;
#define BENCH_PEAK_SET1(x) (x)
#define BENCH_PEAK_FMA(x, m, a) ((x) * (m) + (a))
#define BENCH_PEAK_ADD(x, y) ((x) + (y))
#define BENCH_PEAK_STORE(p, x) (*(p) = (x))
#endif

/* `iters` rounds of BENCH_PEAK_CHAINS independent FMAs; returns a sum of the
   chains so that the compiler cannot drop them. x = x * m + a with m just
   under 1 settles at a / (1 - m): no overflow, no denormals. */
static float bench_peak_kernel(long iters, float seed) {
    bench_peak_vec m = BENCH_PEAK_SET1(0.99999f), a = BENCH_PEAK_SET1(1e-6f), x[BENCH_PEAK_CHAINS];
    float lanes[BENCH_PEAK_LANES], out = 0;
    long i;
    int c;
#define BENCH_PEAK_INIT(k) x[k] = BENCH_PEAK_SET1(seed + (float)(k));
#define BENCH_PEAK_STEP(k) x[k] = BENCH_PEAK_FMA(x[k], m, a);
#if BENCH_PEAK_CHAINS == 16
#define BENCH_PEAK_ALL(OP) BENCH_PEAK_X4(OP, 0) BENCH_PEAK_X4(OP, 4) BENCH_PEAK_X4(OP, 8) BENCH_PEAK_X4(OP, 12)
#else
#define BENCH_PEAK_ALL(OP) BENCH_PEAK_X4(OP, 0) BENCH_PEAK_X4(OP, 4) BENCH_PEAK_X4(OP, 8)
#endif
    BENCH_PEAK_ALL(BENCH_PEAK_INIT)
    for (i = 0; i < iters; i++) {
        BENCH_PEAK_ALL(BENCH_PEAK_STEP)
    }
    for (c = 1; c < BENCH_PEAK_CHAINS; c++) x[0] = BENCH_PEAK_ADD(x[0], x[c]);
    BENCH_PEAK_STORE(lanes, x[0]);
    for (c = 0; c < BENCH_PEAK_LANES; c++) out += lanes[c];
#undef BENCH_PEAK_INIT
#undef BENCH_PEAK_STEP
#undef BENCH_PEAK_ALL
    return out;
}

/* the result goes here so that the kernel's work is observable */
static volatile float bench_peak_sink;

/* seconds for `iters` rounds on each of `threads` threads, all at once */
static double bench_peak_time(int threads, long iters) {
    double t0 = now_s();
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        float r = bench_peak_kernel(iters, (float)omp_get_thread_num());
#pragma omp critical
        bench_peak_sink += r;
    }
#else
    (void)threads;
    bench_peak_sink += bench_peak_kernel(iters, 0.0f);
#endif
    return now_s() - t0;
}

/* GFLOP/s of `threads` threads together (1 without OpenMP), ~`seconds` of
   work: the round count is calibrated on one thread (a parallel region's
   start-up would distort it), then three timings, the best kept (a burst of
   load from another process lowers one of them, not the answer) */
static double bench_peak_gflops(int threads, double seconds) {
    long iters = 1L << 14;
    double t, best = 1e30;
    int r;
#ifndef _OPENMP
    threads = 1;
#endif
    if (threads < 1) threads = 1;
    while ((t = bench_peak_time(1, iters)) < 0.01 && iters < (1L << 30)) iters *= 2;   /* 1L << 30: long may be 32 bits */
    iters = (long)((double)iters * (seconds / 3) / (t > 0 ? t : 1e-9)) + 1;
    for (r = 0; r < 3; r++) {
        t = bench_peak_time(threads, iters);
        if (t < best) best = t;
    }
    return 2.0 * BENCH_PEAK_LANES * BENCH_PEAK_CHAINS * (double)iters * threads / best * 1e-9;
}
#endif
