/* What -ffast-math changes. tests/numerics_kernels.c is compiled twice with
   this build's flags, once with -fno-fast-math and once with -ffast-math, and
   both copies run the same computations here:
   - NaN tests: isnan(), isinf() and x != x become constant false under
     -ffinite-math-only, so the library's own exp loses its NaN guard; the
     library's finite test reads the float's bits and still sees NaN and Inf,
     so a training step with a NaN weight stops with MHE_ERR_NONFINITE in both.
   - values: GELU (forward and backward, on the library's exp), softmax and
     cross-entropy (libm expf/logf, sums), LayerNorm (sums) are not bit for bit
     equal between the builds, only close: reassociated sums, contracted
     multiply-adds, vectorised libm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "numerics_kernels.h"
#include "test.h"

/* elements whose bits differ, and the largest absolute difference */
static int bits_differ(const float *a, const float *b, int n, double *max_abs) {
    int i, c = 0;
    *max_abs = 0;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (memcmp(a + i, b + i, sizeof(float))) c++;
        if (d > *max_abs || d != d) *max_abs = d;
    }
    return c;
}

static int bits_nan(float x) { uint32_t u; memcpy(&u, &x, 4); return (u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu); }

enum { N = 64 * 1000 };
static float x[N], w[1000], b[1000], d[N], out_std[N], out_fast[N];
static int targets[64];

static void compare(const char *what, const float *a, const float *b, int n, double tol) {
    double max_abs;
    int differ = bits_differ(a, b, n, &max_abs);
    printf("  %-26s %6d of %6d values differ in their bits, max |diff| %.3g\n", what, differ, n, max_abs);
    CHECK(max_abs <= tol, "%s: fast-math changes rounding only (max |diff| %.3g > %.3g)", what, max_abs, tol);
}

int main(void) {
    const nk_api *s = nk_get_std(), *f = nk_get_fast();
    volatile float nan_v = NAN, inf_v = INFINITY;
    float ls, lf, es, ef;
    uint32_t r = 1;
    int i, st, sf;
    const char *planted[] = { "layers.0.attn.wq.weight", "layers.0.mlp.fc1.weight", "tok_emb.weight" };
    for (i = 0; i < N; i++) { r = r * 1664525u + 1013904223u; x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 8.0f; d[i] = 1.0f; }
    for (i = 0; i < 1000; i++) { w[i] = 1.0f + 0.001f * (float)i; b[i] = 0.01f * (float)(i % 7); }
    for (i = 0; i < 64; i++) targets[i] = i * 7 % 1000;

    /* ---- NaN and Inf tests ---- */
    printf("  isnan(NaN): %d normal, %d fast-math; x != x: %d, %d; isinf(Inf): %d, %d\n", s->isnan_(nan_v), f->isnan_(nan_v),
           s->self_neq(nan_v), f->self_neq(nan_v), s->isinf_(inf_v), f->isinf_(inf_v));
    CHECK(s->isnan_(nan_v) && s->self_neq(nan_v) && s->isinf_(inf_v), "the normal build sees NaN and Inf");
#if defined(__GNUC__) && defined(__OPTIMIZE__) && defined(__MINGW32__)
    /* mingw's isnan() and isinf() are library calls on the bits (__isnanf,
       __fpclassifyf), which fast-math does not fold; x != x it does */
    CHECK(f->isnan_(nan_v) && !f->self_neq(nan_v) && f->isinf_(inf_v),
          "under -ffast-math (mingw) x != x is compiled to false, isnan() and isinf() still work");
#elif defined(__GNUC__) && defined(__OPTIMIZE__)   /* gcc and clang fold these at -O1 and above */
    CHECK(!f->isnan_(nan_v) && !f->self_neq(nan_v) && !f->isinf_(inf_v),
          "under -ffast-math isnan(), x != x and isinf() are compiled to false");
#endif
    CHECK(!s->lib_finite(nan_v) && !f->lib_finite(nan_v) && !s->lib_finite(inf_v) && !f->lib_finite(inf_v) &&
          s->lib_finite(1.0f) && f->lib_finite(1.0f), "the library's bit-level finite test works in both builds");
    es = s->exp_(nan_v); ef = f->exp_(nan_v);
    printf("  library exp(NaN): %g normal, %g fast-math\n", (double)es, (double)ef);
    CHECK(bits_nan(es), "exp(NaN) is NaN in the normal build");
#if defined(__GNUC__) && defined(__OPTIMIZE__)
    CHECK(!bits_nan(ef), "under -ffast-math the library's exp loses its NaN guard (x != x is false)");
#endif
    for (i = 0; i < 3; i++) {
        st = s->train_nan(planted[i], &ls);
        sf = f->train_nan(planted[i], &lf);
        printf("  NaN in %-24s: step status %d (loss %g) normal, %d (loss %g) fast-math\n", planted[i], st, (double)ls, sf, (double)lf);
        CHECK(st == 12 && sf == 12, "a NaN weight stops training with MHE_ERR_NONFINITE in both builds (%s)", planted[i]);
    }

    /* a NaN weight reaches the loss through the reference and the fused
       attention cores (the fused one once took an all-NaN row for a masked one) */
    for (i = 0; i < 6; i++) {
        const char *kinds[3] = { "mha", "mhe-add", "mhe-mul" };
        st = s->forward_nan(kinds[i / 2], i % 2, &ls);
        sf = f->forward_nan(kinds[i / 2], i % 2, &lf);
        printf("  NaN in W^Q, %-7s %-9s core: forward status %d normal, %d fast-math (loss %g)\n", kinds[i / 2],
               i % 2 ? "fused" : "reference", st, sf, (double)lf);
        CHECK(st == 12, "a NaN in W^Q makes the %s %s forward MHE_ERR_NONFINITE", kinds[i / 2], i % 2 ? "fused" : "reference");
    }

    /* ---- values ---- */
    s->gelu(out_std, x, N); f->gelu(out_fast, x, N);
    compare("GELU (library exp)", out_std, out_fast, N, 1e-5);
    s->gelu_bwd(out_std, x, d, N); f->gelu_bwd(out_fast, x, d, N);
    compare("GELU backward", out_std, out_fast, N, 1e-5);
    s->softmax(out_std, x, 64, 1000); f->softmax(out_fast, x, 64, 1000);
    compare("softmax (libm expf)", out_std, out_fast, N, 1e-6);
    s->xent(out_std, x, targets, 64, 1000); f->xent(out_fast, x, targets, 64, 1000);
    compare("cross-entropy (expf, logf)", out_std, out_fast, 64, 1e-4);
    s->layernorm(out_std, x, w, b, 64, 1000); f->layernorm(out_fast, x, w, b, 64, 1000);
    compare("LayerNorm (sums)", out_std, out_fast, N, 1e-5);
    ls = s->sum(x, N); lf = f->sum(x, N);
    printf("  a float sum of %d values: %.9g normal, %.9g fast-math (order of additions)\n", N, (double)ls, (double)lf);
    CHECK(fabs((double)ls - (double)lf) <= 1e-3 * fabs((double)ls) + 1e-3, "reordered sums stay close");
    return TEST_END();
}
