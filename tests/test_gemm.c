/* tests/test_gemm.c - mhe_gemm against a double-precision reference.

   Covers the four transpose combinations, odd and transformer shapes, row
   strides wider than the matrices, alpha and beta (beta == 0 on a C full of
   NaN), the matrix-vector paths (M == 1, N == 1), K == 0 and alpha == 0, that
   nothing outside the M x N window of C is written, and that 1, 2 and 3
   threads give bit-identical results. tests/test_gemm_scalar.c includes this
   file with MHE_NO_SIMD defined, so the portable micro-kernel is tested too.

   Error measure: for each element, |C - ref| / (|alpha| * sqrt(sum_k (a_ik b_kj)^2)
   + |beta c_ij|), i.e. relative to the size of the terms; it must stay below
   1e-6 * sqrt(K) (float rounding gives about 5e-8 * sqrt(K) on random data,
   while one missing or doubled term gives about 1/sqrt(K)). */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

#include <stdlib.h>

#ifdef MHE_TEST_QUICK
#define TG_QUICK 1
#else
#define TG_QUICK 0
#endif

static mhe_rng tg_rng;

static float tg_uniform(void) { return 2.0f * mhe_rng_uniform(&tg_rng) - 1.0f; }

static float *tg_alloc(size_t n) {
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!p) { printf("out of memory\n"); exit(1); }
    return p;
}

/* a rows x cols matrix with row stride ld >= cols; padding gets a sentinel */
static float *tg_matrix(int rows, int cols, int ld) {
    float *p = tg_alloc((size_t)rows * ld);
    int i, j;
    for (i = 0; i < rows; i++)
        for (j = 0; j < ld; j++) p[(size_t)i * ld + j] = j < cols ? tg_uniform() : 777.0f;
    return p;
}

/* op(X)[r][c] of a row-major X with stride ld */
static double tg_op(const float *X, int ld, int trans, int r, int c) {
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

typedef struct tg_case {
    int ta, tb, M, N, K;
    int pad_a, pad_b, pad_c; /* extra row-stride elements */
    float alpha, beta;
} tg_case;

/* run one case; returns the worst scaled error (or 1e30 on NaN / a touched pad).
   Rows are checked with a stride on large problems to keep the reference cheap. */
static double tg_run(const tg_case *t, int row_step) {
    int ra = t->ta ? t->K : t->M, ca = t->ta ? t->M : t->K;
    int rb = t->tb ? t->N : t->K, cb = t->tb ? t->K : t->N;
    int lda = ca + t->pad_a, ldb = cb + t->pad_b, ldc = t->N + t->pad_c;
    float *A = tg_matrix(ra, ca, lda), *B = tg_matrix(rb, cb, ldb);
    float *C = tg_matrix(t->M, t->N, ldc), *C0 = tg_alloc((size_t)t->M * ldc);
    double worst = 0, lim = 1e-6 * sqrt((double)t->K + 1.0);
    int i, j, k;
    if (t->beta == 0.0f) /* beta == 0 must not read C */
        for (i = 0; i < t->M; i++)
            for (j = 0; j < t->N; j++) C[(size_t)i * ldc + j] = NAN;
    memcpy(C0, C, (size_t)t->M * ldc * sizeof(float));
    mhe_gemm(t->ta, t->tb, t->M, t->N, t->K, t->alpha, A, lda, B, ldb, t->beta, C, ldc);
    for (i = 0; i < t->M; i++) {
        int full = (i % row_step) == 0 || i == t->M - 1;
        for (j = 0; j < ldc; j++) {
            double c = C[(size_t)i * ldc + j];
            if (j >= t->N) {
                if (c != 777.0f) worst = 1e30; /* the padding of C must stay as it was */
                continue;
            }
            if (!full) continue;
            {
                double s = 0, s2 = 0, c0 = C0[(size_t)i * ldc + j], ref, scale, e;
                for (k = 0; k < t->K; k++) {
                    double p = tg_op(A, lda, t->ta, i, k) * tg_op(B, ldb, t->tb, k, j);
                    s += p;
                    s2 += p * p;
                }
                ref = t->alpha * s + (t->beta == 0.0f ? 0.0 : t->beta * c0);
                scale = fabs(t->alpha) * sqrt(s2) + (t->beta == 0.0f ? 0.0 : fabs(t->beta * c0));
                if (scale < 1e-30) scale = 1e-30;
                e = fabs(c - ref) / scale;
                if (!(e <= 1e30)) e = 1e30; /* NaN */
                if (e > worst) worst = e;
            }
        }
    }
    free(A); free(B); free(C); free(C0);
    return worst / lim; /* <= 1 passes */
}

static double tg_worst; /* largest error seen, as a fraction of the limit */

static void tg_check(const tg_case *t, int row_step) {
    double r = tg_run(t, row_step);
    if (r > tg_worst) tg_worst = r;
    CHECK(r <= 1.0, "gemm ta=%d tb=%d M=%d N=%d K=%d lda+%d ldb+%d ldc+%d alpha=%g beta=%g: "
          "error %.3g of the limit", t->ta, t->tb, t->M, t->N, t->K, t->pad_a, t->pad_b, t->pad_c,
          (double)t->alpha, (double)t->beta, r);
}

static const int tg_sizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 65, 127, 129, 255, 257, 300};
#define TG_NSIZES ((int)(sizeof tg_sizes / sizeof tg_sizes[0]))

/* every (M, N) pair of the size list for each transpose case, K cycling
   through the list, alpha/beta/strides varying from case to case */
static void test_shapes(void) {
    static const float alphas[] = {1.0f, -0.5f, 2.5f};
    static const float betas[] = {0.0f, 1.0f, 0.5f};
    int tr, im, in, n = 0;
    for (tr = 0; tr < 4; tr++)
        for (im = 0; im < TG_NSIZES; im++)
            for (in = 0; in < TG_NSIZES; in++, n++) {
                tg_case t;
                if (TG_QUICK && (im + in) % 4 != 0) continue;
                t.ta = tr & 1; t.tb = tr >> 1;
                t.M = tg_sizes[im]; t.N = tg_sizes[in];
                t.K = tg_sizes[(im * 7 + in * 3 + tr) % TG_NSIZES];
                t.alpha = alphas[n % 3];
                t.beta = betas[(n / 3) % 3];
                t.pad_a = (n % 5 == 1) ? 3 : 0;
                t.pad_b = (n % 7 == 2) ? 5 : 0;
                t.pad_c = (n % 4 == 3) ? 17 : 0;
                tg_check(&t, t.M * t.N * t.K > 2000000 ? 7 : 1);
            }
}

/* the shapes a transformer layer produces, forward (NN) and backward (NT, TN) */
static void test_transformer_shapes(void) {
    static const int shp[][3] = {{1024, 256, 768}, {1024, 768, 256}, {256, 1024, 512}, {512, 128, 1000}};
    int s, tr, ns = TG_QUICK ? 1 : (int)(sizeof shp / sizeof shp[0]);
    for (s = 0; s < ns; s++)
        for (tr = 0; tr < 4; tr++) {
            tg_case t;
            memset(&t, 0, sizeof t);
            t.ta = tr & 1; t.tb = tr >> 1;
            t.M = shp[s][0]; t.K = shp[s][1]; t.N = shp[s][2];
            t.alpha = 1.0f; t.beta = (s + tr) % 2 ? 1.0f : 0.0f;
            tg_check(&t, TG_QUICK ? 61 : 13);
        }
}

/* long K (several KC blocks) with beta != 0, and alpha != 1 */
static void test_long_k(void) {
    static const int ks[] = {511, 512, 1000, 2049};
    int i, tr;
    for (i = 0; i < (TG_QUICK ? 2 : 4); i++)
        for (tr = 0; tr < 4; tr++) {
            tg_case t;
            memset(&t, 0, sizeof t);
            t.ta = tr & 1; t.tb = tr >> 1;
            t.M = 37; t.N = 70; t.K = ks[i];
            t.alpha = 0.75f; t.beta = 0.5f; t.pad_c = 2;
            tg_check(&t, 1);
        }
}

/* matrix-vector paths: M == 1 or N == 1, long and strided */
static void test_vectors(void) {
    static const int lens[] = {1, 5, 64, 255, 257, 1000, 3000};
    int tr, a, b, n = 0;
    for (tr = 0; tr < 4; tr++)
        for (a = 0; a < 7; a++)
            for (b = 0; b < 7; b++, n++) {
                tg_case t;
                if (TG_QUICK && (a + b) % 3 != 0) continue;
                memset(&t, 0, sizeof t);
                t.ta = tr & 1; t.tb = tr >> 1;
                t.N = lens[a]; t.K = lens[b];
                t.M = 1;
                t.alpha = n % 2 ? 1.0f : -1.5f;
                t.beta = n % 3 == 0 ? 0.0f : 0.5f;
                t.pad_a = n % 2 ? 0 : 9; t.pad_b = n % 3 ? 0 : 4; t.pad_c = n % 4 ? 0 : 6;
                tg_check(&t, 1);
                t.M = lens[a]; t.N = 1;
                tg_check(&t, 1);
            }
}

/* K == 0 and alpha == 0: C = beta * C without touching A and B (NULL here) */
static void test_degenerate(void) {
    float C[6 * 5];
    int i, ok;
    for (i = 0; i < 30; i++) C[i] = (float)i;
    mhe_gemm(0, 0, 6, 4, 0, 1.0f, NULL, 1, NULL, 4, 0.5f, C, 5);
    for (ok = 1, i = 0; i < 30; i++)
        if (C[i] != (i % 5 == 4 ? (float)i : 0.5f * (float)i)) ok = 0;
    CHECK(ok, "K == 0, beta 0.5 scales C and leaves its padding");
    for (i = 0; i < 30; i++) C[i] = NAN;
    mhe_gemm(1, 1, 6, 5, 0, 1.0f, NULL, 6, NULL, 1, 0.0f, C, 5);
    for (ok = 1, i = 0; i < 30; i++)
        if (C[i] != 0.0f) ok = 0;
    CHECK(ok, "K == 0, beta 0 zeroes C even where it held NaN");
    for (i = 0; i < 30; i++) C[i] = (float)i;
    mhe_gemm(0, 0, 6, 5, 7, 0.0f, NULL, 7, NULL, 5, 1.0f, C, 5);
    for (ok = 1, i = 0; i < 30; i++)
        if (C[i] != (float)i) ok = 0;
    CHECK(ok, "alpha == 0, beta 1 leaves C unchanged");
    mhe_gemm(0, 0, 0, 5, 7, 1.0f, NULL, 7, NULL, 5, 1.0f, C, 5);
    mhe_gemm(0, 0, 6, 0, 7, 1.0f, NULL, 7, NULL, 5, 1.0f, C, 5);
    for (ok = 1, i = 0; i < 30; i++)
        if (C[i] != (float)i) ok = 0;
    CHECK(ok, "M == 0 or N == 0 does nothing");
}

/* a small exact case that a reader can check by hand */
static void test_known(void) {
    const float A[2 * 3] = {1, 2, 3, 4, 5, 6};          /* 2 x 3 */
    const float B[3 * 2] = {7, 8, 9, 10, 11, 12};       /* 3 x 2 */
    const float want[4] = {58, 64, 139, 154};
    float C[4] = {1, 1, 1, 1}, AT[6], BT[6];
    int i, j, ok;
    mhe_gemm(0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
    for (ok = 1, i = 0; i < 4; i++) ok &= C[i] == want[i];
    CHECK(ok, "[[1,2,3],[4,5,6]] x [[7,8],[9,10],[11,12]] = [[58,64],[139,154]]");
    for (i = 0; i < 2; i++)
        for (j = 0; j < 3; j++) { AT[j * 2 + i] = A[i * 3 + j]; BT[i * 3 + j] = B[j * 2 + i]; }
    mhe_gemm(1, 1, 2, 2, 3, 2.0f, AT, 2, BT, 3, 0.0f, C, 2);
    for (ok = 1, i = 0; i < 4; i++) ok &= C[i] == 2 * want[i];
    CHECK(ok, "the same product from transposed operands, alpha 2");
    mhe_gemm(0, 1, 2, 2, 3, 1.0f, A, 3, BT, 3, -1.0f, C, 2);
    for (ok = 1, i = 0; i < 4; i++) ok &= C[i] == -want[i];
    CHECK(ok, "beta -1 against the previous result");
}

/* the result must not depend on the number of threads (fixed K order) */
static void test_threads(void) {
#ifdef _OPENMP
    static const int shp[][5] = {
        /* ta, tb, M, K, N */
        {0, 0, 1024, 256, 768}, {1, 0, 1024, 768, 256}, {0, 1, 257, 300, 129},
        {1, 1, 300, 1000, 77}, {0, 0, 13, 600, 1000}, {0, 0, 1, 3000, 2000},
        {0, 1, 2000, 3000, 1}, {1, 0, 4096, 64, 48},
    };
    int s, nt, saved = omp_get_max_threads();
    int ns = TG_QUICK ? 3 : (int)(sizeof shp / sizeof shp[0]);
    for (s = 0; s < ns; s++) {
        int ta = shp[s][0], tb = shp[s][1], M = shp[s][2], K = shp[s][3], N = shp[s][4];
        int lda = ta ? M : K, ldb = tb ? K : N;
        float *A = tg_matrix(ta ? K : M, lda, lda), *B = tg_matrix(tb ? N : K, ldb, ldb);
        float *C1 = tg_matrix(M, N, N), *Cn = tg_alloc((size_t)M * N);
        float *Cin = tg_alloc((size_t)M * N);
        memcpy(Cin, C1, (size_t)M * N * sizeof(float));
        omp_set_num_threads(1);
        mhe_gemm(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, 0.25f, C1, N);
        for (nt = 2; nt <= 3; nt++) {
            memcpy(Cn, Cin, (size_t)M * N * sizeof(float));
            omp_set_num_threads(nt);
            mhe_gemm(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, 0.25f, Cn, N);
            CHECK(memcmp(C1, Cn, (size_t)M * N * sizeof(float)) == 0,
                  "%d threads differ from 1 thread: ta=%d tb=%d M=%d K=%d N=%d", nt, ta, tb, M, K, N);
        }
        free(A); free(B); free(C1); free(Cn); free(Cin);
    }
    omp_set_num_threads(saved);
#else
    printf("(built without OpenMP: the thread-count test is skipped)\n");
#endif
}

int main(void) {
    mhe_rng_seed(&tg_rng, 12345);
#if defined(MHE__GEMM_AVX512)
    printf("gemm micro-kernel: AVX-512, %d x %d\n", MHE__GEMM_MR, MHE__GEMM_NR);
#elif defined(MHE__GEMM_AVX2)
    printf("gemm micro-kernel: AVX2+FMA, %d x %d\n", MHE__GEMM_MR, MHE__GEMM_NR);
#else
    printf("gemm micro-kernel: portable C, %d x %d\n", MHE__GEMM_MR, MHE__GEMM_NR);
#endif
    test_known();
    test_degenerate();
    test_shapes();
    test_transformer_shapes();
    test_long_k();
    test_vectors();
    test_threads();
    printf("largest error: %.3f of the limit 1e-6*sqrt(K)\n", tg_worst);
    return TEST_END();
}
