/* tests/test.h - the tiny assertion kit every test program uses.
   Each test file defines MHE_IMPLEMENTATION and includes ../mhe.h itself, so
   static helpers are reachable; the model-level helpers below need mhe.h
   included first (a program without it gets only the assertion kit). A
   program ends with TEST_END(), which prints "RESULT: N passed, N failed"
   for tests/run.sh to add up. */
#ifndef MHE_TEST_H
#define MHE_TEST_H
#include <stdio.h>
#include <math.h>
#include <string.h>

static int test_pass_count, test_fail_count;

#define CHECK(cond, ...) do { \
    if (cond) test_pass_count++; \
    else { test_fail_count++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
           printf(__VA_ARGS__); printf("\n"); } } while (0)

/* |a-b| <= atol + rtol*|b| */
#define CHECK_CLOSE(a, b, atol, rtol, ...) do { double ca_ = (a), cb_ = (b); \
    CHECK(fabs(ca_ - cb_) <= (atol) + (rtol) * fabs(cb_), __VA_ARGS__); } while (0)

/* a library call that must succeed for the test to go on meaningfully (its
   status is checked, never dropped: mhe.h marks it warn_unused_result) */
#define OK(call) CHECK((call) == MHE_OK, "%s failed", #call)

/* a status dropped on purpose (the call is expected to fail, or the result
   shows elsewhere): gcc does not take a (void) cast for warn_unused_result */
static inline void test_ignore(int status) { (void)status; }

#define TEST_END() (printf("RESULT: %d passed, %d failed\n", test_pass_count, test_fail_count), \
                     test_fail_count ? 1 : 0)

/* max |a-b| / max(|b|, floor) over n values */
static inline double test_max_rel_err(const float *a, const float *b, long n, double floor_) {
    double m = 0;
    long i;
    for (i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), s = fabs((double)b[i]);
        if (s < floor_) s = floor_;
        if (d / s > m) m = d / s;
    }
    return m;
}

#ifdef MHE_H_INCLUDED
/* Model-level finite-difference gradient check, shared by test_model.c,
   test_words.c and test_decon.c. Only where mhe.h came first.

   loss(m, ctx) gives the loss at m's current parameters (each test its own:
   an LM batch, a word batch with S+R labels, ...); m's gradients must already
   hold its analytic gradient (zero_grad, forward, backward on the same input:
   the caller does that, with its own CHECKs). For every parameter tensor,
   `samples` entries drawn with r: draws from number `from_used` on are taken
   among the entries with a nonzero gradient, when the tensor has any (pass
   from_used >= samples for uniform draws only). Each entry is moved by
   h = 1e-2 both ways: num = (loss(+h) - loss(-h)) / 2h, error
   |num - grad| / (2e-3 + |num|) (a NaN counts as an infinite error). A tensor
   is off when its worst error exceeds 5e-2; it is printed ("  [tag] name: ...",
   no "[tag] " when tag is NULL). Returns the number of tensors off; *worst
   (may be NULL) the worst error over all tensors, *checked (may be NULL) the
   number of entries compared. */
typedef float (*test_loss_fn)(mhe_model *m, void *ctx);

/* the usual loss callback: ctx is an mhe_batch */
static inline float test_loss_batch(mhe_model *m, void *batch) {
    float loss = NAN;
    test_ignore(mhe_model_forward_batch(m, (const mhe_batch *)batch, &loss));   /* a non-finite loss is the answer */
    return loss;
}

static inline int test_model_gradcheck(mhe_model *m, test_loss_fn loss, void *ctx, mhe_rng *r, int samples,
                                       int from_used, const char *tag, double *worst, int *checked) {
    int i, j, bad = 0, n = 0;
    double all = 0;
    for (i = 0; i < m->n_tensors; i++) {
        mhe_tensor *t = &m->params[i];
        double tw = 0;
        int64_t nzc = 0, e;
        if (from_used < samples)
            for (e = 0; e < t->size; e++) nzc += t->grad[e] != 0;
        for (j = 0; j < samples; j++) {
            float keep, h = 1e-2f, lp, lm;
            double num, err;
            e = (int64_t)mhe_rng_below(r, (uint32_t)t->size);
            if (j >= from_used && nzc > 0) {
                int64_t want = (int64_t)mhe_rng_below(r, (uint32_t)nzc), seen = -1;
                for (e = 0; e < t->size; e++) if (t->grad[e] != 0 && ++seen == want) break;
            }
            keep = t->data[e];
            t->data[e] = keep + h; lp = loss(m, ctx);
            t->data[e] = keep - h; lm = loss(m, ctx);
            t->data[e] = keep;
            num = ((double)lp - lm) / (2.0 * h);
            err = fabs(num - t->grad[e]) / (2e-3 + fabs(num));
            if (isnan(err)) err = HUGE_VAL;
            if (err > tw) tw = err;
            n++;
        }
        if (tw > 5e-2) {
            bad++;
            printf("  %s%s%s%s: worst relative error %.3g\n", tag ? "[" : "", tag ? tag : "", tag ? "] " : "", t->name, tw);
        }
        if (tw > all) all = tw;
    }
    if (worst) *worst = all;
    if (checked) *checked = n;
    return bad;
}
#endif /* MHE_H_INCLUDED */
#include "lib/checks.h"   /* test_slurp, test_decode_vs_forward */
#endif
