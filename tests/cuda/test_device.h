/* tests/cuda/test_device.h - what test_cuda and test_attn do about the device
   itself, on a GPU and in the emulation alike. No usable device is one line
   and exit status 3 (TEST_NO_DEVICE: a machine without a GPU, told apart from
   a failure); a failed CUDA allocation or copy names the call and the error,
   prints the counts so far and ends the program with status 1; after each
   group an error left by a launch or an asynchronous fault is a failure that
   names the group. Include after mhe.h and tests/test.h. */
#ifndef MHE_TEST_DEVICE_H
#define MHE_TEST_DEVICE_H
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#define TEST_NO_DEVICE 3

static const char *test_prog = "test";

/* a CUDA call that failed: the tests cannot go on (device memory is gone or the context is dead) */
static void test_cuda_fatal(cudaError_t e, const char *fmt, ...) {
    va_list ap;
    printf("FAIL %s: ", test_prog);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(": %s (%s)\n", cudaGetErrorString(e), cudaGetErrorName(e));
    test_fail_count++;
    fflush(stdout);
    exit(TEST_END());
}

/* the first device, or one line and TEST_NO_DEVICE; a device this binary has no code for is a failure */
static void test_device_or_exit(const char *prog) {
    char name[256], err[MHE_ERR_LEN] = "";
    int major = 0, minor = 0;
    test_prog = prog;
    setvbuf(stdout, NULL, _IOLBF, 0); /* into a file too: a run killed at its time limit keeps every FAIL line */
    if (mhe_cuda_device(name, sizeof name, &major, &minor, err) != MHE_OK) {
        if (strstr(err, "no CUDA device")) {
            printf("%s: %s; nothing run\n", prog, err);
            exit(TEST_NO_DEVICE);
        }
        printf("FAIL %s: %s\n", prog, err);
        exit(1);
    }
    printf("%s: device %s (compute capability %d.%d)\n", prog, name, major, minor);
    fflush(stdout);
}

/* after a group: nothing left in CUDA's error state, every kernel finished without a fault;
   then the group's own line (counts since the last group, seconds), flushed as it ends */
static void test_device_settled(const char *group) {
    static int passed0, failed0;
    static double t0 = -1;
    struct timespec ts;
    double t;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaGetLastError();
    CHECK(e == cudaSuccess, "%s: CUDA error after the %s group: %s (%s)", test_prog, group, cudaGetErrorString(e),
          cudaGetErrorName(e));
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t = ts.tv_sec + 1e-9 * ts.tv_nsec;
    printf("group %s: %d passed, %d failed (%.1f s)\n", group, test_pass_count - passed0, test_fail_count - failed0,
           t0 < 0 ? 0.0 : t - t0);
    fflush(stdout);
    passed0 = test_pass_count;
    failed0 = test_fail_count;
    t0 = t;
}

template <typename T> static T *test_dev_alloc(size_t bytes) {
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e != cudaSuccess)
        test_cuda_fatal(e, "cudaMalloc of %zu bytes", bytes);
    return (T *)d;
}

static void test_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpy(dst, src, bytes, kind);
    if (e != cudaSuccess)
        test_cuda_fatal(e, "cudaMemcpy of %zu bytes %s", bytes,
                        kind == cudaMemcpyHostToDevice ? "to the device" : "from the device");
}
#endif
