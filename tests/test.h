/* tests/test.h - the tiny assertion kit every test program uses.
   Each test file defines MHE_IMPLEMENTATION and includes ../mhe.h itself, so
   static helpers are reachable. A program ends with TEST_END(), which prints
   "RESULT: N passed, N failed" for tests/run.sh to add up. */
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
#endif
