// tests/cuda/test_emu.cpp - checks the CUDA emulation (tests/cuda/emu.h) itself.
//
/* From the repository root (mkdir -p build first); g++ works as well as clang++.
   1. fibers, both orders:
     clang++ -std=c++20 -O1 -Wall -Wextra -Werror -I. tests/cuda/test_emu.cpp -o build/test_emu && build/test_emu
   2. threads under ThreadSanitizer:
     clang++ -std=c++20 -O1 -g -DMHE_EMU_THREADS -fsanitize=thread -I. tests/cuda/test_emu.cpp \
       -o build/test_emu_tsan && build/test_emu_tsan
   3. threads under AddressSanitizer + UBSan:
     clang++ -std=c++20 -O1 -g -DMHE_EMU_THREADS -fsanitize=address,undefined -fno-sanitize-recover=all \
       -I. tests/cuda/test_emu.cpp -o build/test_emu_asan && build/test_emu_asan
   4. blocks (several runner threads) under ThreadSanitizer:
     clang++ -std=c++20 -O1 -g -DMHE_EMU_BLOCKS -fsanitize=thread -I. tests/cuda/test_emu.cpp \
       -o build/test_emu_blocks && build/test_emu_blocks
   5. TSan does see a missing __syncthreads (expect "WARNING: ThreadSanitizer: data race"),
      and with -DMHE_EMU_BLOCKS instead of -DMHE_EMU_THREADS a race between blocks too:
     clang++ -std=c++20 -O1 -g -DMHE_EMU_THREADS -DEMU_SHOW_RACE -fsanitize=thread -I. \
       tests/cuda/test_emu.cpp -o build/test_emu_race && build/test_emu_race
   EMU_BENCH=1 in the environment also times a launch of 64 blocks x 256
   threads (10 __syncthreads and 10 warp reductions). */
//
// Prints "emu: N passed, M failed" and exits nonzero on a failure.
#include "tests/cuda/emu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef MHE_EMU_THREADS
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>
#endif

static int passed, failed;

static void check(bool ok, const char *what, int line) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "test_emu.cpp:%d: FAILED: %s\n", line, what);
}
#define CHECK(cond) check((cond), #cond, __LINE__)

static const unsigned FULL = 0xffffffffu;

template <typename... Exp, typename... Act>
static cudaError_t launch(dim3 grid, dim3 block, size_t smem, void (*kernel)(Exp...), Act &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Act>(args)...);
}

// Device memory holding n copies of `fill`.
template <typename T>
static T *device_array(size_t n, T fill = T()) {
    T *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) {
        fprintf(stderr, "test_emu: cudaMalloc failed\n");
        exit(2);
    }
    std::vector<T> host(n, fill);
    cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice);
    return p;
}

template <typename T>
static std::vector<T> to_host(const T *p, size_t n) {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
}

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

// Tree reduction of one block in shared memory.
__global__ void block_sum(const int *in, int *out) {
    __shared__ int s[256];
    unsigned t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half)
            s[t] += s[t + half];
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = s[0];
}

// Each thread reads its neighbour's slot WITHOUT the __syncthreads() that
// must come between the write and the read: the bug the orders expose.
__global__ void neighbour_no_sync(const int *in, int *out) {
    __shared__ int s[128];
    unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = in[i];
    out[i] = s[(t + 1) % blockDim.x];
}

// Records in which order the threads run, before and after a barrier.
__global__ void run_order(int *counter, int *first, int *second) {
    first[threadIdx.x] = atomicAdd(counter, 1);
    __syncthreads();
    second[threadIdx.x] = atomicAdd(counter, 1);
}

// Every shuffle variant; result k of thread i goes to out[i * kShuffles + k].
constexpr int kShuffles = 20;
__global__ void shuffles(int *out, float *fout, double *dout) {
    unsigned lane = threadIdx.x % 32, i = threadIdx.x;
    int v = (int)(lane * 10 + 1);
    int *o = out + i * kShuffles;
    o[0] = __shfl_sync(FULL, v, 5);
    o[1] = __shfl_sync(FULL, v, 31 - (int)lane);
    o[2] = __shfl_sync(FULL, v, 3, 8);
    o[3] = __shfl_sync(FULL, v, 35);
    o[4] = __shfl_up_sync(FULL, v, 1);
    o[5] = __shfl_up_sync(FULL, v, 3, 8);
    o[6] = __shfl_down_sync(FULL, v, 1);
    o[7] = __shfl_down_sync(FULL, v, 3, 8);
    o[8] = __shfl_down_sync(FULL, v, 16, 16);
    o[9] = __shfl_xor_sync(FULL, v, 1);
    o[10] = __shfl_xor_sync(FULL, v, 16);
    o[11] = __shfl_xor_sync(FULL, v, 16, 16);  // later segment: own value; earlier: allowed
    o[12] = __shfl_xor_sync(FULL, v, 4, 8);
    o[13] = __shfl_down_sync(FULL, v, 8);
    o[14] = (int)__shfl_sync(FULL, (unsigned)v + 1000u, 7);
    o[15] = (int)__ballot_sync(FULL, lane % 3 == 0);
    o[16] = __any_sync(FULL, lane == 5) + 2 * __any_sync(FULL, 0);
    o[17] = __all_sync(FULL, 1) + 2 * __all_sync(FULL, lane < 31);
    o[18] = (int)__ballot_sync(FULL, 1);
    __syncwarp();
    o[19] = __shfl_xor_sync(FULL, v, 2, 4);
    float f = (float)lane + 0.5f;
    for (int m = 16; m > 0; m /= 2)
        f += __shfl_xor_sync(FULL, f, m);
    fout[i] = f;
    dout[i] = __shfl_sync(FULL, (double)lane * 0.25, 9);
}

// The shuffle results CUDA documents, for a warp of `lanes` threads. A source
// lane past the end of a partial warp gives the caller's own value (undefined
// on a GPU; the emulation's choice).
static int ref_value(unsigned lane) { return (int)(lane * 10 + 1); }
static int ref_read(unsigned lane, int src, unsigned lanes) {
    return src >= 0 && (unsigned)src < lanes ? ref_value((unsigned)src) : ref_value(lane);
}
static int ref_shfl(unsigned lane, int src, int width, unsigned lanes) {
    int base = (int)lane / width * width;
    return ref_read(lane, base + ((src % width) + width) % width, lanes);
}
static int ref_up(unsigned lane, int delta, int width, unsigned lanes) {
    return (int)lane % width - delta >= 0 ? ref_read(lane, (int)lane - delta, lanes) : ref_value(lane);
}
static int ref_down(unsigned lane, int delta, int width, unsigned lanes) {
    return (int)lane % width + delta < width ? ref_read(lane, (int)lane + delta, lanes) : ref_value(lane);
}
static int ref_xor(unsigned lane, int mask, int width, unsigned lanes) {
    int src = (int)lane ^ mask;
    return src / width > (int)lane / width ? ref_value(lane) : ref_read(lane, src, lanes);
}

static void expected_shuffles(unsigned lane, unsigned lanes, int *e) {
    unsigned all = lanes == 32 ? FULL : (1u << lanes) - 1;
    e[0] = ref_shfl(lane, 5, 32, lanes);
    e[1] = ref_shfl(lane, 31 - (int)lane, 32, lanes);
    e[2] = ref_shfl(lane, 3, 8, lanes);
    e[3] = ref_shfl(lane, 35, 32, lanes);
    e[4] = ref_up(lane, 1, 32, lanes);
    e[5] = ref_up(lane, 3, 8, lanes);
    e[6] = ref_down(lane, 1, 32, lanes);
    e[7] = ref_down(lane, 3, 8, lanes);
    e[8] = ref_down(lane, 16, 16, lanes);
    e[9] = ref_xor(lane, 1, 32, lanes);
    e[10] = ref_xor(lane, 16, 32, lanes);
    e[11] = ref_xor(lane, 16, 16, lanes);
    e[12] = ref_xor(lane, 4, 8, lanes);
    e[13] = ref_down(lane, 8, 32, lanes);
    e[14] = 7 < lanes ? ref_value(7) + 1000 : ref_value(lane) + 1000;
    e[15] = (int)(0x49249249u & all);
    e[16] = lanes > 5 ? 1 : 0;
    e[17] = 1 + (lanes < 32 ? 2 : 0);
    e[18] = (int)all;
    e[19] = ref_xor(lane, 2, 4, lanes);
}

__global__ void atomics(int *i, unsigned *u, unsigned long long *ull, float *f, double *d, int *imax, int *imin,
                        unsigned *umax, unsigned *umin, int *cas, unsigned *exch, unsigned long long *exch_sum) {
    int id = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(i, 1);
    atomicAdd(u, 2u);
    atomicAdd(ull, 3ull);
    atomicAdd(f, 1.0f);
    atomicAdd(d, 0.5);
    atomicMax(imax, id * 7 % 1001);
    atomicMin(imin, -id);
    atomicMax(umax, (unsigned)id);
    atomicMin(umin, 1000000u - (unsigned)id);
    // an increment made of compare-and-swap, as CUDA code does it
    int old = atomicCAS(cas, 0, 0), assumed;
    do {
        assumed = old;
        old = atomicCAS(cas, assumed, assumed + 1);
    } while (old != assumed);
    atomicAdd(exch_sum, (unsigned long long)atomicExch(exch, (unsigned)id));
}

__global__ void exch_float(float *f, float *old) { old[threadIdx.x] = atomicExch(f, (float)threadIdx.x); }

// D = A*B + C for one 16x8x8 tile, each lane loading its fragments as a GPU
// kernel would; `alias` makes d and c the same array.
__global__ void mma_tile(const float *A, const float *B, const float *C, float *D, int alias) {
    unsigned lane = threadIdx.x, grp = lane >> 2, tig = lane % 4;
    unsigned a[4] = {mhe_emu_cvt_rna_tf32(A[grp * 8 + tig]), mhe_emu_cvt_rna_tf32(A[(grp + 8) * 8 + tig]),
                     mhe_emu_cvt_rna_tf32(A[grp * 8 + tig + 4]), mhe_emu_cvt_rna_tf32(A[(grp + 8) * 8 + tig + 4])};
    unsigned b[2] = {mhe_emu_cvt_rna_tf32(B[tig * 8 + grp]), mhe_emu_cvt_rna_tf32(B[(tig + 4) * 8 + grp])};
    float c[4] = {C[grp * 8 + 2 * tig], C[grp * 8 + 2 * tig + 1], C[(grp + 8) * 8 + 2 * tig],
                  C[(grp + 8) * 8 + 2 * tig + 1]};
    float d[4];
    float *dst = d;
    if (alias)
        dst = c;
    mhe_emu_mma_m16n8k8_tf32(dst, a, b, c);
    D[grp * 8 + 2 * tig] = dst[0];
    D[grp * 8 + 2 * tig + 1] = dst[1];
    D[(grp + 8) * 8 + 2 * tig] = dst[2];
    D[(grp + 8) * 8 + 2 * tig + 1] = dst[3];
}

// D = A*B + C for one 16x8x16 bf16 tile, the fragments packed from float
// as a GPU kernel would (A [16][16], B [16][8], C and D [16][8])
__global__ void mma_bf16_tile(const float *A, const float *B, const float *C, float *D) {
    unsigned lane = threadIdx.x, grp = lane >> 2, tig = lane % 4, a[4], b[2];
    for (unsigned h = 0; h < 2; h++) {
        unsigned k = 2 * tig + 8 * h;
        a[2 * h] = mhe_emu_cvt_rn_bf16x2(A[grp * 16 + k + 1], A[grp * 16 + k]);
        a[2 * h + 1] = mhe_emu_cvt_rn_bf16x2(A[(grp + 8) * 16 + k + 1], A[(grp + 8) * 16 + k]);
        b[h] = mhe_emu_cvt_rn_bf16x2(B[(k + 1) * 8 + grp], B[k * 8 + grp]);
    }
    float c[4] = {C[grp * 8 + 2 * tig], C[grp * 8 + 2 * tig + 1], C[(grp + 8) * 8 + 2 * tig],
                  C[(grp + 8) * 8 + 2 * tig + 1]};
    mhe_emu_mma_m16n8k16_bf16(c, a, b, c);
    D[grp * 8 + 2 * tig] = c[0];
    D[grp * 8 + 2 * tig + 1] = c[1];
    D[(grp + 8) * 8 + 2 * tig] = c[2];
    D[(grp + 8) * 8 + 2 * tig + 1] = c[3];
}

// ldmatrix .x1/.x2/.x4 (NUM) from dynamic shared memory holding 4 matrices of
// 8 rows, each row 16 bytes of 16-bit elements e(i, row, c) = 1000 i + 10 row + c,
// rows 48 bytes apart. Lane 8i + j gives the address of stored row (3 j) % 8 of
// matrix i, so the rows a lane receives follow the addresses, not the storage.
// out[4 lane + i] = the lane's d[i].
static unsigned short ldm_element(unsigned i, unsigned row, unsigned c) { return (unsigned short)(1000 * i + 10 * row + c); }
template <unsigned NUM>
__global__ void ldmatrix_tile(unsigned *out) {
    unsigned char *s = static_cast<unsigned char *>(mhe_emu_dyn_shared());
    unsigned lane = threadIdx.x;
    for (unsigned e = lane; e < 4 * 8 * 8; e += 32) {
        unsigned i = e / 64, row = e / 8 % 8, c = e % 8;
        unsigned short v = ldm_element(i, row, c);
        memcpy(s + (8 * i + row) * 48 + 2 * c, &v, 2);
    }
    __syncwarp();
    unsigned d[4] = {0, 0, 0, 0}, m = lane / 8 % NUM;
    const void *row = s + (8 * m + 3 * (lane % 8) % 8) * 48;
    if (NUM == 1)
        mhe_emu_ldmatrix_x1(d, row);
    else if (NUM == 2)
        mhe_emu_ldmatrix_x2(d, row);
    else
        mhe_emu_ldmatrix_x4(d, row);
    for (unsigned i = 0; i < 4; i++)
        out[4 * lane + i] = d[i];
}

// cp.async: every thread copies 16-byte pieces of src into shared memory
// (0xff bytes at the launch) in three groups of one copy each, src_bytes 16,
// 5 and 0 (zero-fill), and records what it sees of its own pieces: before any
// wait, after wait_group 2 with the third group open (uncommitted), after
// wait_group 1 (the first two landed) and after wait_group 0.
// seen[thread][stage][piece] = the first byte-pair word of each piece.
__global__ void cp_async_groups(const unsigned char *src, unsigned *seen) {
    unsigned char *s = static_cast<unsigned char *>(mhe_emu_dyn_shared());
    unsigned t = threadIdx.x;
    unsigned char *mine = s + 48 * t;
    static const unsigned src_bytes[3] = {16, 5, 0};
    unsigned *out = seen + 4 * 3 * 4 * t;
    auto record = [&](unsigned stage) {
        for (unsigned p = 0; p < 3; p++)
            for (unsigned w = 0; w < 4; w++)
                memcpy(&out[(stage * 3 + p) * 4 + w], mine + 16 * p + 4 * w, 4);
    };
    for (unsigned p = 0; p < 2; p++) {
        mhe_emu_cp_async_16(mine + 16 * p, src + 48 * t + 16 * p, src_bytes[p]);
        mhe_emu_cp_async_commit();
    }
    mhe_emu_cp_async_16(mine + 32, src + 48 * t + 32, src_bytes[2]);
    record(0);
    mhe_emu_cp_async_wait(2);  // two committed groups, at most two pending: nothing has to land
    record(1);
    mhe_emu_cp_async_commit();
    mhe_emu_cp_async_wait(1);  // three committed: the first two land
    record(2);
    mhe_emu_cp_async_wait(0);
    record(3);
}

__global__ void empty_kernel() {}

// Fills all of the dynamic shared memory, then sums it back.
__global__ void dyn_smem_sum(unsigned long long *out) {
    unsigned char *s = static_cast<unsigned char *>(mhe_emu_dyn_shared());
    size_t n = 100 * 1024;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
        s[i] = (unsigned char)(i % 251);
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += s[i];
        out[blockIdx.x] = sum;  // a block of its own: the blocks may run at once
    }
}

// Linear ids and warps of a 3-D block, and every block of a 3-D grid.
__global__ void shape(unsigned *linear, unsigned *ballot_y1, unsigned *blocks) {
    unsigned t = threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
    unsigned b = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
    unsigned bits = __ballot_sync(FULL, threadIdx.y == 1);
    if (b == 0) {
        linear[t] = threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16;
        ballot_y1[t] = bits;
    }
    if (t == 0)
        atomicAdd(&blocks[b], 1u);
}

__global__ void scale(float *p, int n, float factor) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n)
        p[i] *= factor;
}

__global__ void math_bits(float *out) {
    float x = 2.0f;
    out[0] = __expf(0.0f) + __logf(1.0f);
    out[1] = __fdividef(1.0f, 4.0f) + __frcp_rn(x);
    out[2] = rsqrtf(4.0f) + __fsqrt_rn(9.0f);
    out[3] = __saturatef(-1.0f) + __saturatef(0.25f) + __saturatef(7.0f) + __saturatef(NAN);
    out[4] = __uint_as_float(__float_as_uint(1.5f)) + __int_as_float(__float_as_int(-0.5f));
    out[5] = __ldg(&out[4]) + fmaf(2.0f, 3.0f, 1.0f);
}

#ifndef MHE_EMU_THREADS
// Deadlocks, for the detector: a __syncthreads only half the block reaches,
// and a warp shuffle half a warp skips.
__global__ void sync_in_branch(int *out) {
    if (threadIdx.x < 32)
        __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

__global__ void shuffle_half_warp(int *out) {
    int v = (int)threadIdx.x;
    if (threadIdx.x % 32 < 16)
        v = __shfl_xor_sync(FULL, v, 1);
    out[threadIdx.x] = v;
}
#endif

#ifdef MHE_EMU_BLOCKS
// Blocks 0 and 1 each wait (10 s at most) for the other to have started: both
// see the other only if two runners run them at once. Each keeps its number in
// static and in dynamic shared memory across the wait, which stay its own
// only if every runner has its own shared memory.
__global__ void handshake(int *started, int *saw_other, int *kept) {
    __shared__ int mine;
    int *dyn = static_cast<int *>(mhe_emu_dyn_shared());
    int b = (int)blockIdx.x;
    if (threadIdx.x == 0) {
        mine = b;
        dyn[0] = b;
        atomicExch(&started[b], 1);
        auto t0 = std::chrono::steady_clock::now();
        while (atomicAdd(&started[1 - b], 0) == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        }
        saw_other[b] = atomicAdd(&started[1 - b], 0);
    }
    __syncthreads();
    if (threadIdx.x == 0)
        kept[b] = mine == b && dyn[0] == b;
}

// The order in which the blocks ran (ran[k]: the k-th block), and the OS
// thread that ran each one.
__global__ void block_log(int *count, int *ran, unsigned long long *thread) {
    if (threadIdx.x == 0) {
        ran[atomicAdd(count, 1)] = (int)blockIdx.x;
        thread[blockIdx.x] = (unsigned long long)pthread_self();
    }
}

// Only block `bad` deadlocks.
__global__ void sync_in_one_block(int *out, unsigned bad) {
    if (blockIdx.x != bad || threadIdx.x < 32)
        __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
#endif

#if defined(MHE_EMU_BLOCKS) && defined(EMU_SHOW_RACE)
// A sum over blocks without atomicAdd: a race between blocks.
__global__ void plain_sum(int *sum) { *sum += 1; }
#endif

// The timing kernel: 10 warp reductions and 10 __syncthreads.
__global__ void bench_kernel(float *out) {
    __shared__ float s[256];
    unsigned t = threadIdx.x;
    float v = (float)t;
    for (int i = 0; i < 10; i++) {
        float r = v;
        for (int m = 16; m > 0; m /= 2)
            r += __shfl_xor_sync(FULL, r, m);
        v = r * 0.001f;
        s[t] = v;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

static void test_block_sum(int reverse) {
    mhe_emu_set_order(reverse);
    const int blocks = 7, n = blocks * 256;
    std::vector<int> host(n);
    for (int i = 0; i < n; i++)
        host[i] = i * 7 % 1000 - 300;
    int *in = device_array<int>(n), *out = device_array<int>(blocks, -1);
    cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    CHECK(launch(dim3(blocks), dim3(256), 0, block_sum, (const int *)in, out) == cudaSuccess);
    std::vector<int> got = to_host(out, blocks);
    bool ok = true;
    for (int b = 0; b < blocks; b++) {
        int want = 0;
        for (int i = 0; i < 256; i++)
            want += host[b * 256 + i];
        ok = ok && got[b] == want;
    }
    CHECK(ok);
    cudaFree(in);
    cudaFree(out);
}

#ifndef MHE_EMU_THREADS
static void test_run_order() {
    const int n = 64;
    int *counter = device_array<int>(1), *first = device_array<int>(n), *second = device_array<int>(n);
    for (int reverse = 0; reverse < 2; reverse++) {
        mhe_emu_set_order(reverse);
        cudaMemset(counter, 0, sizeof(int));
        CHECK(launch(dim3(1), dim3(n), 0, run_order, counter, first, second) == cudaSuccess);
        std::vector<int> f = to_host(first, n), s = to_host(second, n);
        bool ok = true;
        for (int t = 0; t < n; t++) {
            int pos = reverse ? n - 1 - t : t;  // forward: thread 0 first; reverse: the last first
            ok = ok && f[t] == pos && s[t] == n + pos;
        }
        CHECK(ok);
    }
    mhe_emu_set_order(0);
    cudaFree(counter);
    cudaFree(first);
    cudaFree(second);
}
#endif

// Returns how many outputs of neighbour_no_sync are wrong.
[[maybe_unused]] static int run_missing_barrier() {
    const int blocks = 4, n = blocks * 128;
    std::vector<int> host(n);
    for (int i = 0; i < n; i++)
        host[i] = 1000 + i;
    int *in = device_array<int>(n), *out = device_array<int>(n);
    cudaMemcpy(in, host.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    CHECK(launch(dim3(blocks), dim3(128), 0, neighbour_no_sync, (const int *)in, out) == cudaSuccess);
    std::vector<int> got = to_host(out, n);
    int wrong = 0;
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < 128; t++)
            wrong += got[b * 128 + t] != host[b * 128 + (t + 1) % 128];
    cudaFree(in);
    cudaFree(out);
    return wrong;
}

static void test_shuffles(unsigned nthreads) {
    int *out = device_array<int>(nthreads * kShuffles);
    float *fout = device_array<float>(nthreads);
    double *dout = device_array<double>(nthreads);
    CHECK(launch(dim3(1), dim3(nthreads), 0, shuffles, out, fout, dout) == cudaSuccess);
    std::vector<int> got = to_host(out, nthreads * kShuffles);
    std::vector<float> f = to_host(fout, nthreads);
    std::vector<double> d = to_host(dout, nthreads);
    cudaFree(out);
    cudaFree(fout);
    cudaFree(dout);
    int bad = 0;
    for (unsigned i = 0; i < nthreads; i++) {
        unsigned lane = i % 32, lanes = nthreads - i / 32 * 32 < 32 ? nthreads - i / 32 * 32 : 32;
        int e[kShuffles];
        expected_shuffles(lane, lanes, e);
        for (int k = 0; k < kShuffles; k++)
            if (got[i * kShuffles + k] != e[k]) {
                if (bad++ < 5)
                    fprintf(stderr, "  %u threads: thread %u result %d is %d, want %d\n", nthreads, i, k,
                            got[i * kShuffles + k], e[k]);
            }
        if (lanes == 32) {
            bad += f[i] != 32 * 15.5f + 16.0f;  // sum of lane + 0.5 over the warp
            bad += d[i] != 9 * 0.25;
        }
    }
    CHECK(bad == 0);
    if (nthreads < 32)
        return;
    // a few by hand, from CUDA's descriptions
    CHECK(got[3 * kShuffles + 11] == 3 * 10 + 1);   // lane 3 ^ 16 = 19: a later 16-lane segment, own value
    CHECK(got[19 * kShuffles + 11] == 3 * 10 + 1);  // lane 19 ^ 16 = 3: an earlier segment may be read
    CHECK(got[0 * kShuffles + 4] == 1);             // shfl_up from lane 0: own value
    CHECK(got[9 * kShuffles + 2] == 11 * 10 + 1);   // width 8: lane 9 reads lane 8 + 3
    CHECK(got[15 * kShuffles + 15] == (int)0x49249249u);
}

static void test_atomics() {
    const unsigned blocks = 37, threads = 192, n = blocks * threads;
    int *i = device_array<int>(1), *imax = device_array<int>(1, -5), *imin = device_array<int>(1, 5);
    int *cas = device_array<int>(1);
    unsigned *u = device_array<unsigned>(1), *umax = device_array<unsigned>(1);
    unsigned *umin = device_array<unsigned>(1, 2000000u), *exch = device_array<unsigned>(1, 12345u);
    unsigned long long *ull = device_array<unsigned long long>(1), *exch_sum = device_array<unsigned long long>(1);
    float *f = device_array<float>(1);
    double *d = device_array<double>(1);
    CHECK(launch(dim3(blocks), dim3(threads), 0, atomics, i, u, ull, f, d, imax, imin, umax, umin, cas, exch,
                 exch_sum) == cudaSuccess);
    int max_id = 0;
    unsigned long long id_sum = 0;
    for (unsigned k = 0; k < n; k++) {
        max_id = (int)(k * 7 % 1001) > max_id ? (int)(k * 7 % 1001) : max_id;
        id_sum += k;
    }
    CHECK(to_host(i, 1)[0] == (int)n);
    CHECK(to_host(u, 1)[0] == 2 * n);
    CHECK(to_host(ull, 1)[0] == 3ull * n);
    CHECK(to_host(f, 1)[0] == (float)n);
    CHECK(to_host(d, 1)[0] == 0.5 * n);
    CHECK(to_host(imax, 1)[0] == max_id);
    CHECK(to_host(imin, 1)[0] == -(int)(n - 1));
    CHECK(to_host(umax, 1)[0] == n - 1);
    CHECK(to_host(umin, 1)[0] == 1000000u - (n - 1));
    CHECK(to_host(cas, 1)[0] == (int)n);
    // every value atomicExch returned, plus the last one stored, is every id plus the initial one
    CHECK(to_host(exch_sum, 1)[0] + to_host(exch, 1)[0] == id_sum + 12345u);
    float *ff = device_array<float>(1, -1.0f), *old = device_array<float>(32);
    CHECK(launch(dim3(1), dim3(32), 0, exch_float, ff, old) == cudaSuccess);
    std::vector<float> o = to_host(old, 32);
    float total = to_host(ff, 1)[0];
    for (float x : o)
        total += x;
    CHECK(total == -1.0f + 31 * 32 / 2);
    for (void *p : {(void *)i, (void *)imax, (void *)imin, (void *)cas, (void *)u, (void *)umax, (void *)umin,
                    (void *)exch, (void *)ull, (void *)exch_sum, (void *)f, (void *)d, (void *)ff, (void *)old})
        cudaFree(p);
}

static float tf32_round(float x) { return __uint_as_float(mhe_emu_cvt_rna_tf32(x)); }

// random values with bits below TF32's and bf16's precision, so rounding matters
static std::vector<float> mma_input(size_t n, unsigned *seed) {
    std::vector<float> x(n);
    for (float &v : x) {
        *seed = *seed * 1103515245u + 12345u;
        v = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 4.0f;
    }
    return x;
}

static float *mma_upload(const std::vector<float> &x) {
    float *d = device_array<float>(x.size());
    cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    return d;
}

// D [16][8] against C + A B (A [16][K], B [K][8]) in double from the rounded
// inputs: every element within 1e-6 of its terms' size, and the unrounded sum
// off somewhere (so the check would notice missing rounding)
static void mma_compare(const std::vector<float> &D, const std::vector<float> &A, const std::vector<float> &B,
                        const std::vector<float> &C, int K, float (*round)(float)) {
    int bad = 0, differs_unrounded = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double want = C[r * 8 + n], raw = C[r * 8 + n], size = fabs(C[r * 8 + n]);
            for (int k = 0; k < K; k++) {
                double p = (double)round(A[r * K + k]) * round(B[k * 8 + n]);
                want += p;
                raw += (double)A[r * K + k] * B[k * 8 + n];
                size += fabs(p);
            }
            double tol = 1e-6 * size;
            bad += fabs(D[r * 8 + n] - want) > tol;
            differs_unrounded += fabs(raw - want) > tol;
        }
    CHECK(bad == 0);
    CHECK(differs_unrounded > 0);
}

static void test_mma() {
    unsigned seed = 12345;
    std::vector<float> A = mma_input(128, &seed), B = mma_input(64, &seed), C = mma_input(128, &seed);
    float *dA = mma_upload(A), *dB = mma_upload(B), *dC = mma_upload(C), *dD = device_array<float>(128);
    for (int alias = 0; alias < 2; alias++) {
        CHECK(launch(dim3(1), dim3(32), 0, mma_tile, (const float *)dA, (const float *)dB, (const float *)dC, dD,
                     alias) == cudaSuccess);
        mma_compare(to_host(dD, 128), A, B, C, 8, tf32_round);
    }
    for (float *p : {dA, dB, dC, dD})
        cudaFree(p);
}

static unsigned bits(float x) { return __float_as_uint(x); }

// bf16 by the definition: the nearest of the two bf16 neighbours in double, ties to the even one
static float bf16_round(float x) {
    unsigned u = __float_as_uint(x), down = u & 0xffff0000u, up = down + 0x10000u;
    double dd = fabs((double)x - __uint_as_float(down)), du = fabs((double)__uint_as_float(up) - x);
    return __uint_as_float(dd < du || (dd == du && !(down & 0x10000u)) ? down : up);
}

static void test_mma_bf16() {
    unsigned seed = 777;
    std::vector<float> A = mma_input(256, &seed), B = mma_input(128, &seed), C = mma_input(128, &seed);
    float *dA = mma_upload(A), *dB = mma_upload(B), *dC = mma_upload(C), *dD = device_array<float>(128);
    CHECK(launch(dim3(1), dim3(32), 0, mma_bf16_tile, (const float *)dA, (const float *)dB, (const float *)dC, dD) ==
          cudaSuccess);
    mma_compare(to_host(dD, 128), A, B, C, 16, bf16_round);
    for (float *p : {dA, dB, dC, dD})
        cudaFree(p);
}

// ldmatrix by its definition: lane l's d[i] is word l % 4 of the row lane 8i + l / 4 addressed
static void test_ldmatrix() {
    unsigned *out = device_array<unsigned>(4 * 32);
    for (unsigned num : {1u, 2u, 4u}) {
        auto kernel = num == 1 ? ldmatrix_tile<1> : num == 2 ? ldmatrix_tile<2> : ldmatrix_tile<4>;
        CHECK(launch(dim3(1), dim3(32), 32 * 48, kernel, out) == cudaSuccess);
        std::vector<unsigned> d = to_host(out, 4 * 32);
        int bad = 0;
        for (unsigned l = 0; l < 32; l++)
            for (unsigned i = 0; i < 4; i++) {
                unsigned row = 3 * (l / 4) % 8, w = l % 4;
                unsigned want = i < num ? (unsigned)ldm_element(i, row, 2 * w) | (unsigned)ldm_element(i, row, 2 * w + 1) << 16
                                        : 0u;
                bad += d[4 * l + i] != want;
            }
        CHECK(bad == 0);
    }
    cudaFree(out);
}

static void test_cp_async() {
    const unsigned threads = 64;
    std::vector<unsigned char> src(48 * threads);
    for (size_t i = 0; i < src.size(); i++)
        src[i] = (unsigned char)(i * 7 + 3);
    unsigned char *d_src = device_array<unsigned char>(src.size());
    cudaMemcpy(d_src, src.data(), src.size(), cudaMemcpyHostToDevice);
    unsigned *seen = device_array<unsigned>(4 * 3 * 4 * threads);
    CHECK(launch(dim3(1), dim3(threads), 48 * threads, cp_async_groups, (const unsigned char *)d_src, seen) ==
          cudaSuccess);
    std::vector<unsigned> got = to_host(seen, 4 * 3 * 4 * threads);
    int bad = 0;
    for (unsigned t = 0; t < threads; t++)
        for (unsigned stage = 0; stage < 4; stage++)
            for (unsigned p = 0; p < 3; p++) {
                // landed: piece 0, 1 after wait_group 1 (stage 2), piece 2 after wait_group 0
                bool landed = p < 2 ? stage >= 2 : stage >= 3;
                static const unsigned src_bytes[3] = {16, 5, 0};
                unsigned char want[16];
                for (unsigned b = 0; b < 16; b++)
                    want[b] = !landed ? 0xff : b < src_bytes[p] ? src[48 * t + 16 * p + b] : 0;
                bad += memcmp(&got[(((size_t)t * 4 + stage) * 3 + p) * 4], want, 16) != 0;
            }
    CHECK(bad == 0);
    cudaFree(d_src);
    cudaFree(seen);
}

static void test_cvt_bf16() {
    CHECK(mhe_emu_cvt_rn_bf16x2(1.0f, -2.0f) == 0x3f80c000u);  // hi in the upper half
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x3f808000u)) == 0x3f80u);  // a tie from an even last bit: stays
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x3f818000u)) == 0x3f82u);  // a tie from an odd last bit: up to even
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x3f807fffu)) == 0x3f80u);  // just below a tie: down
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x3f808001u)) == 0x3f81u);  // just above: up
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0xbf818000u)) == 0xbf82u);  // negative tie: to even
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x3fff8000u)) == 0x4000u);  // carries into the exponent: 2.0
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x7f7fffffu)) == 0x7f80u);  // FLT_MAX rounds up to Inf
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x00018000u)) == 0x0002u);  // a subnormal tie, to even
    CHECK(mhe_emu_bf16_rn(-0.0f) == 0x8000u);
    CHECK(mhe_emu_bf16_rn(INFINITY) == 0x7f80u && mhe_emu_bf16_rn(-INFINITY) == 0xff80u);
    CHECK(mhe_emu_bf16_rn(NAN) == 0x7fffu);
    CHECK(mhe_emu_bf16_rn(__uint_as_float(0x7f800001u)) == 0x7fffu);  // payload in the low bits only: still NaN
    CHECK(mhe_emu_bf16_rn(0.1f) == 0x3dcdu);  // 0x3dcccccd: above the tie, up
    unsigned seed = 99, bad = 0;  // against the definition, on random patterns
    for (int i = 0; i < 100000; i++) {
        seed = seed * 1664525u + 1013904223u;
        float x = __uint_as_float(seed);
        if (std::isnan(x) || std::isinf(x) || fabsf(x) > 3.3e38f)
            continue;
        bad += mhe_emu_bf16_rn(x) << 16 != __float_as_uint(bf16_round(x));
    }
    CHECK(bad == 0);
}



static void test_cvt_tf32() {
    CHECK(mhe_emu_cvt_rna_tf32(1.0f) == 0x3f800000u);
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3f801000u)) == 0x3f802000u);  // a tie: away from zero
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3f803000u)) == 0x3f804000u);  // a tie from an odd last bit
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3f800fffu)) == 0x3f800000u);  // just below a tie: down
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3f801001u)) == 0x3f802000u);  // just above: up
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0xbf801000u)) == 0xbf802000u);  // negative tie: away from zero
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0xbf800fffu)) == 0xbf800000u);
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3ffff000u)) == 0x40000000u);  // carries into the exponent: 2.0
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x3fffffffu)) == 0x40000000u);
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x7f7fffffu)) == 0x7f800000u);  // FLT_MAX rounds up to Inf
    CHECK(mhe_emu_cvt_rna_tf32(__uint_as_float(0x00001000u)) == 0x00002000u);  // a subnormal tie
    CHECK(mhe_emu_cvt_rna_tf32(0.0f) == 0u);
    CHECK(mhe_emu_cvt_rna_tf32(-0.0f) == 0x80000000u);
    CHECK(mhe_emu_cvt_rna_tf32(INFINITY) == bits(INFINITY));
    CHECK(mhe_emu_cvt_rna_tf32(-INFINITY) == bits(-INFINITY));
    unsigned nan = mhe_emu_cvt_rna_tf32(NAN);
    CHECK(std::isnan(__uint_as_float(nan)) && (nan & 0x1fffu) == 0);
    unsigned low_nan = mhe_emu_cvt_rna_tf32(__uint_as_float(0x7f800001u));  // payload in the low bits only
    CHECK(std::isnan(__uint_as_float(low_nan)) && (low_nan & 0x1fffu) == 0);
    CHECK(mhe_emu_cvt_rna_tf32(0.1f) == 0x3dccc000u);  // 0x3dcccccd: below the tie, down
}

static void test_launch_checks() {
    cudaGetLastError();
    long before = mhe_emu_launches();
    CHECK(launch(dim3(1), dim3(1025), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(cudaPeekAtLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(launch(dim3(1), dim3(32, 32, 2), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(launch(dim3(1), dim3(1, 1, 65), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(launch(dim3(1), dim3(0), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(launch(dim3(0), dim3(32), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(launch(dim3(1, 65536), dim3(32), 0, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(launch(dim3(1), dim3(32), 48 * 1024 + 1, empty_kernel) == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(mhe_emu_launches() == before);  // none of them ran
    CHECK(launch(dim3(1), dim3(1024), 48 * 1024, empty_kernel) == cudaSuccess);
    CHECK(launch(dim3(1), dim3(1, 1, 64), 0, empty_kernel) == cudaSuccess);
    CHECK(mhe_emu_launches() == before + 2);

    // 100 KiB of dynamic shared memory once the kernel opts in
    unsigned long long *sum = device_array<unsigned long long>(2);
    CHECK(launch(dim3(2), dim3(128), 100 * 1024, dyn_smem_sum, sum) == cudaErrorInvalidConfiguration);
    CHECK(cudaFuncSetAttribute(dyn_smem_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) == cudaSuccess);
    CHECK(launch(dim3(2), dim3(128), 100 * 1024, dyn_smem_sum, sum) == cudaSuccess);
    unsigned long long want = 0;
    for (size_t k = 0; k < 100 * 1024; k++)
        want += k % 251;
    CHECK(to_host(sum, 2)[0] == want && to_host(sum, 2)[1] == want);
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, dyn_smem_sum) == cudaSuccess);
    CHECK(attr.maxDynamicSharedSizeBytes == 100 * 1024 && attr.maxThreadsPerBlock == 1024);
    CHECK(cudaFuncSetAttribute(dyn_smem_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024 + 1) ==
          cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    cudaFree(sum);

    // arguments are converted to the kernel's parameter types
    float *p = device_array<float>(100, 2.0f);
    size_t n = 100;
    double factor = 1.5;
    CHECK(launch(dim3(4), dim3(32), 0, scale, p, n, factor) == cudaSuccess);
    std::vector<float> got = to_host(p, 100);
    bool ok = true;
    for (float x : got)
        ok = ok && x == 3.0f;
    CHECK(ok);
    cudaFree(p);
}

static void test_shape() {
    unsigned *linear = device_array<unsigned>(96), *ballot_y1 = device_array<unsigned>(96);
    unsigned *blocks = device_array<unsigned>(12);
    CHECK(launch(dim3(2, 3, 2), dim3(8, 4, 3), 0, shape, linear, ballot_y1, blocks) == cudaSuccess);
    std::vector<unsigned> l = to_host(linear, 96), b = to_host(ballot_y1, 96), n = to_host(blocks, 12);
    bool ok = true;
    for (unsigned t = 0; t < 96; t++) {
        unsigned x = t % 8, y = t / 8 % 4, z = t / 32;
        ok = ok && l[t] == (x | y << 8 | z << 16);
        // warp t/32 holds linear ids 32w..32w+31; y == 1 is ids 8..15 of each z-slice of 32
        ok = ok && b[t] == 0x0000ff00u;
    }
    CHECK(ok);
    ok = true;
    for (unsigned k = 0; k < 12; k++)
        ok = ok && n[k] == 1;
    CHECK(ok);
    cudaFree(linear);
    cudaFree(ballot_y1);
    cudaFree(blocks);
}

static void test_memory_api() {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 1000) == cudaSuccess && p && (uintptr_t)p % 256 == 0);
    int local = 0;
    CHECK(cudaFree(&local) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaFree((char *)p + 8) == cudaErrorInvalidValue);
    std::vector<char> host(2000, 7);
    CHECK(cudaMemcpy(p, host.data(), 1000, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(p, host.data(), 1001, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy((char *)p + 500, host.data(), 501, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(host.data(), host.data() + 1000, 10, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(host.data(), p, 10, (cudaMemcpyKind)7) == cudaErrorInvalidMemcpyDirection);
    CHECK(cudaMemsetAsync((char *)p + 100, 3, 900) == cudaSuccess);
    CHECK(cudaMemset((char *)p + 100, 3, 901) == cudaErrorInvalidValue);
    void *q = nullptr;
    CHECK(cudaMalloc(&q, 1000) == cudaSuccess);
    CHECK(cudaMemcpyAsync(q, p, 1000, cudaMemcpyDeviceToDevice) == cudaSuccess);
    CHECK(cudaMemcpy(host.data(), q, 1000, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[99] == 7 && host[100] == 3 && host[999] == 3);
    CHECK(cudaFree(p) == cudaSuccess && cudaFree(q) == cudaSuccess);
    CHECK(cudaFree(p) == cudaErrorInvalidValue);  // twice
    CHECK(cudaFree(nullptr) == cudaSuccess);
    cudaGetLastError();
}

// Graphs: one thread appends a digit, so the digits say the order nodes ran in.
__global__ void append_digit(int *p, int digit) { *p = *p * 10 + digit; }
__global__ void never_launched(int *p) { *p = -1; }

// A chain of nodes (memset, three kernels, a copy to the host) runs in order;
// a kernel node's new arguments reach the next launch of the exec only; two
// nodes with no dependency between them run in either order (reverse: the
// later first), as a GPU may run them; a kernel the emulation never saw
// launched, and a dependency from another graph, are refused.
static void test_graph() {
    int *p = device_array<int>(1), host_value = 0, zero = 0;
    launch(dim3(1), dim3(1), 0, append_digit, p, 0);  // the emulation learns the kernel's parameters here
    cudaGraph_t graph = nullptr;
    cudaGraphNode_t nodes[5];
    CHECK(cudaGraphCreate(&graph, 0) == cudaSuccess);
    cudaMemsetParams set = {};
    set.dst = p;
    set.elementSize = 4;
    set.width = 1;
    set.height = 1;
    CHECK(cudaGraphAddMemsetNode(&nodes[0], graph, nullptr, 0, &set) == cudaSuccess);
    int digits[3] = {1, 2, 3};
    void *args[3][2] = {{&p, &digits[0]}, {&p, &digits[1]}, {&p, &digits[2]}};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)append_digit;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    for (int i = 0; i < 3; i++) {
        kp.kernelParams = args[i];
        CHECK(cudaGraphAddKernelNode(&nodes[1 + i], graph, &nodes[i], 1, &kp) == cudaSuccess);
    }
    digits[0] = 9;  // the node copied its arguments when added
    CHECK(cudaGraphAddMemcpyNode1D(&nodes[4], graph, &nodes[3], 1, &host_value, p, sizeof(int),
                                   cudaMemcpyDeviceToHost) == cudaSuccess);
    cudaGraphExec_t exec = nullptr, exec2 = nullptr;
    CHECK(cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess);
    for (int order = 0; order < 2; order++) {  // a chain runs in its order either way
        mhe_emu_set_order(order);
        host_value = 0;
        CHECK(cudaGraphLaunch(exec, 0) == cudaSuccess && host_value == 123);
    }
    mhe_emu_set_order(0);
    int seven = 7;
    void *args7[2] = {&p, &seven};
    kp.kernelParams = args7;
    CHECK(cudaGraphExecKernelNodeSetParams(exec, nodes[2], &kp) == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, 0) == cudaSuccess && host_value == 173);
    CHECK(cudaGraphInstantiateWithFlags(&exec2, graph, 0) == cudaSuccess);  // the graph kept digit 2
    CHECK(cudaGraphLaunch(exec2, 0) == cudaSuccess && host_value == 123);
    CHECK(cudaGraphExecKernelNodeSetParams(exec, nodes[0], &kp) == cudaErrorInvalidValue);  // a memset node
    cudaGetLastError();
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphExecDestroy(exec2) == cudaSuccess);

    // two kernels, neither after the other
    cudaGraph_t loose = nullptr;
    cudaGraphNode_t a, b, c;
    CHECK(cudaGraphCreate(&loose, 0) == cudaSuccess);
    kp.kernelParams = args[1];
    CHECK(cudaGraphAddKernelNode(&a, loose, nullptr, 0, &kp) == cudaSuccess);
    kp.kernelParams = args[2];
    CHECK(cudaGraphAddKernelNode(&b, loose, nullptr, 0, &kp) == cudaSuccess);
    CHECK(cudaGraphInstantiateWithFlags(&exec, loose, 0) == cudaSuccess);
    int seen[2];
    for (int order = 0; order < 2; order++) {
        mhe_emu_set_order(order);
        cudaMemcpy(p, &zero, sizeof zero, cudaMemcpyHostToDevice);
        CHECK(cudaGraphLaunch(exec, 0) == cudaSuccess);
        seen[order] = to_host(p, 1)[0];
    }
    mhe_emu_set_order(0);
    CHECK(seen[0] == 23 && seen[1] == 32);
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);

    // refused
    void *args_never[1] = {&p};
    kp.func = (void *)never_launched;
    kp.kernelParams = args_never;
    CHECK(cudaGraphAddKernelNode(&c, loose, nullptr, 0, &kp) == cudaErrorInvalidDeviceFunction);
    kp.func = (void *)append_digit;
    kp.kernelParams = args[0];
    CHECK(cudaGraphAddKernelNode(&c, loose, &nodes[1], 1, &kp) == cudaErrorInvalidValue);  // nodes[1] is graph's
    set.elementSize = 3;
    CHECK(cudaGraphAddMemsetNode(&c, loose, nullptr, 0, &set) == cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaGraphDestroy(loose) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess);
    cudaFree(p);
}

static void test_hooks() {
    // memory limit
    size_t free_b = 0, total_b = 0;
    CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total_b == (size_t(16) << 30));
    mhe_emu_set_mem_limit(1 << 20);
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, 512 * 1024) == cudaSuccess);
    CHECK(cudaMalloc(&b, 600 * 1024) == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
    CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total_b == (1 << 20) && free_b == 512 * 1024);
    CHECK(cudaMalloc(&b, 512 * 1024) == cudaSuccess);
    CHECK(cudaFree(a) == cudaSuccess && cudaFree(b) == cudaSuccess);
    mhe_emu_set_mem_limit(0);
    CHECK(cudaMalloc(&a, 600 * 1024) == cudaSuccess && cudaFree(a) == cudaSuccess);

    // no device
    mhe_emu_set_device_count(0);
    int count = -1;
    CHECK(cudaGetDeviceCount(&count) == cudaErrorNoDevice && count == 0);
    CHECK(cudaMalloc(&a, 16) == cudaErrorNoDevice);
    CHECK(launch(dim3(1), dim3(32), 0, empty_kernel) == cudaErrorNoDevice);
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0) == cudaErrorNoDevice);
    CHECK(cudaDeviceSynchronize() == cudaErrorNoDevice);
    mhe_emu_set_device_count(1);
    CHECK(cudaGetDeviceCount(&count) == cudaSuccess && count == 1);
    CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
    CHECK(cudaSetDevice(0) == cudaSuccess);
    int dev = -1;
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);

    // no kernel image
    mhe_emu_set_no_kernel_image(1);
    cudaFuncAttributes attr;
    CHECK(launch(dim3(1), dim3(32), 0, empty_kernel) == cudaErrorNoKernelImageForDevice);
    CHECK(cudaFuncGetAttributes(&attr, empty_kernel) == cudaErrorNoKernelImageForDevice);
    mhe_emu_set_no_kernel_image(0);
    CHECK(launch(dim3(1), dim3(32), 0, empty_kernel) == cudaSuccess);
    CHECK(cudaFuncGetAttributes(&attr, empty_kernel) == cudaSuccess && attr.maxDynamicSharedSizeBytes == 48 * 1024);
    cudaGetLastError();

    // device properties, error names, events
    CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    CHECK(strcmp(prop.name, "mhe CPU emulation") == 0 && prop.major == 9 && prop.minor == 0);
    CHECK(prop.sharedMemPerBlock == 48 * 1024 && prop.sharedMemPerBlockOptin == 227 * 1024);
    CHECK(prop.maxThreadsPerBlock == 1024 && prop.warpSize == 32);
    CHECK(strcmp(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice") == 0);
    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    cudaEvent_t start = nullptr, stop = nullptr;
    CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess);
    CHECK(cudaEventRecord(start) == cudaSuccess);
    CHECK(launch(dim3(4), dim3(64), 0, empty_kernel) == cudaSuccess);
    CHECK(cudaEventRecord(stop, nullptr) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess);
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms >= 0.0f);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
}

static void test_math() {
    float *out = device_array<float>(6);
    CHECK(launch(dim3(1), dim3(1), 0, math_bits, out) == cudaSuccess);
    std::vector<float> o = to_host(out, 6);
    CHECK(o[0] == 1.0f && o[1] == 0.75f && o[2] == 3.5f && o[3] == 1.25f && o[4] == 1.0f && o[5] == 8.0f);
    cudaFree(out);
}

#ifndef MHE_EMU_THREADS
static void test_deadlock() {
    int *out = device_array<int>(2 * 64);
    fprintf(stderr, "test_emu: deadlock reports are expected next\n");
    CHECK(launch(dim3(2), dim3(64), 0, sync_in_branch, out) == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(launch(dim3(1), dim3(64), 0, shuffle_half_warp, out) == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    cudaFree(out);
#ifdef MHE_EMU_BLOCKS
    // one block of many: the launch fails whichever runner ran it
    out = device_array<int>(16 * 64);
    CHECK(launch(dim3(16), dim3(64), 0, sync_in_one_block, out, 5u) == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    cudaFree(out);
#endif
    test_block_sum(0);  // the emulation still works afterwards
}
#endif

#ifdef MHE_EMU_BLOCKS
// Runners run blocks at once, each with its own shared memory.
static void test_blocks_at_once() {
    mhe_emu_set_block_threads(4);
    int *started = device_array<int>(2), *saw_other = device_array<int>(2), *kept = device_array<int>(2);
    CHECK(launch(dim3(2), dim3(64), 16, handshake, started, saw_other, kept) == cudaSuccess);
    std::vector<int> saw = to_host(saw_other, 2), k = to_host(kept, 2);
    CHECK(saw[0] == 1 && saw[1] == 1);
    CHECK(k[0] == 1 && k[1] == 1);
    cudaFree(started);
    cudaFree(saw_other);
    cudaFree(kept);
}

// Returns the order in which the blocks of a grid of n ran; threads[b]: the
// OS thread that ran block b.
static std::vector<int> block_order(int n, std::vector<unsigned long long> *threads = nullptr) {
    int *count = device_array<int>(1), *ran = device_array<int>((size_t)n, -1);
    unsigned long long *thread = device_array<unsigned long long>((size_t)n);
    CHECK(launch(dim3((unsigned)n), dim3(32), 0, block_log, count, ran, thread) == cudaSuccess);
    std::vector<int> order = to_host(ran, (size_t)n);
    if (threads)
        *threads = to_host(thread, (size_t)n);
    cudaFree(count);
    cudaFree(ran);
    cudaFree(thread);
    return order;
}

static bool each_block_once(const std::vector<int> &v) {
    std::vector<int> seen(v.size(), 0);
    for (int b : v)
        if (b < 0 || (size_t)b >= v.size() || seen[(size_t)b]++)
            return false;
    return true;
}

// The orders the blocks run in, and which runner runs which.
static void test_block_orders() {
    const int n = 24;
    std::vector<int> forward(n), reverse(n);
    for (int i = 0; i < n; i++) {
        forward[i] = i;
        reverse[i] = n - 1 - i;
    }
    mhe_emu_set_block_threads(1);  // one runner: the order is the launch's order
    mhe_emu_set_seed(0);
    mhe_emu_set_order(0);
    CHECK(block_order(n) == forward);
    mhe_emu_set_order(1);
    CHECK(block_order(n) == reverse);
    mhe_emu_set_order(0);
    mhe_emu_set_seed(12345);
    std::vector<int> a = block_order(n), b = block_order(n);
    CHECK(each_block_once(a) && each_block_once(b));
    CHECK(a != forward && a != reverse && a != b);  // shuffled, differently each launch
    mhe_emu_set_seed(0);

    // 3 runners: runner k runs positions k, k + 3, ... of the order, so
    // neighbours in it run on different threads.
    mhe_emu_set_block_threads(3);
    std::vector<unsigned long long> thread;
    std::vector<int> order = block_order(n, &thread);
    CHECK(each_block_once(order));
    bool shares = true;
    for (int i = 0; i + 1 < n; i++)
        shares = shares && thread[i] != thread[i + 1] && (i + 3 >= n || thread[i] == thread[i + 3]);
    CHECK(shares);
    mhe_emu_set_block_threads(4);
}
#endif

#ifndef MHE_EMU_THREADS
// Misuse aborts on purpose; these run in a child process (fiber mode only:
// a child of a process that had threads must not start threads under TSan).
__global__ void partial_mask(int *out) { out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 0); }
__global__ void bad_width(int *out) { out[threadIdx.x] = __shfl_xor_sync(FULL, 1, 1, 12); }
__global__ void ldmatrix_misaligned(unsigned *out) {
    unsigned char *s = static_cast<unsigned char *>(mhe_emu_dyn_shared());
    unsigned d[4];
    mhe_emu_ldmatrix_x4(d, s + 16 * (threadIdx.x % 8) + (threadIdx.x == 9 ? 8 : 0));
    out[threadIdx.x] = d[0];
}
__global__ void cp_async_never_waited(const float *src) {
    float *s = static_cast<float *>(mhe_emu_dyn_shared());
    mhe_emu_cp_async_16(s + 4 * threadIdx.x, src + 4 * threadIdx.x, 16);
    mhe_emu_cp_async_commit();
}
__global__ void cp_async_misaligned(const float *src) {
    float *s = static_cast<float *>(mhe_emu_dyn_shared());
    mhe_emu_cp_async_16(s + 4 * threadIdx.x, src + 4 * threadIdx.x + 1, 16);
    mhe_emu_cp_async_wait(0);
}
__global__ void mma_half_warp(float *out) {
    unsigned a[4] = {}, b[2] = {};
    float c[4] = {};
    mhe_emu_mma_m16n8k8_tf32(out + 4 * threadIdx.x, a, b, c);
}

// True when fn, run in a child process, aborts with `message` on stderr.
static bool aborts_with(void (*fn)(), const char *message) {
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        fn();
        _exit(0);
    }
    close(fds[1]);
    char text[4096];
    size_t used = 0;
    ssize_t got;
    while ((got = read(fds[0], text + used, sizeof text - 1 - used)) > 0)
        used += (size_t)got;
    text[used] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && strstr(text, message);
}

static int *misuse_out;
static float *misuse_fout;

static void test_misuse() {
    misuse_out = device_array<int>(64);
    misuse_fout = device_array<float>(4 * 64);
    CHECK(aborts_with([] { launch(dim3(1), dim3(32), 0, partial_mask, misuse_out); }, "full-warp masks only"));
    CHECK(aborts_with([] { launch(dim3(1), dim3(32), 0, bad_width, misuse_out); }, "must be a power of 2"));
    CHECK(aborts_with([] { launch(dim3(1), dim3(48), 0, mma_half_warp, misuse_fout); }, "needs a whole warp"));
    CHECK(aborts_with([] { __syncthreads(); }, "__syncthreads called outside a kernel"));
    CHECK(aborts_with([] { launch(dim3(1), dim3(32), 256, ldmatrix_misaligned, (unsigned *)misuse_out); },
                      "lane 9's row address"));
    CHECK(aborts_with([] { launch(dim3(1), dim3(32), 1024, cp_async_never_waited, (const float *)misuse_fout); },
                      "never waited for"));
    CHECK(aborts_with([] { launch(dim3(1), dim3(32), 1024, cp_async_misaligned, (const float *)misuse_fout); },
                      "must be 16-byte aligned"));
    CHECK(launch(dim3(1), dim3(64), 0, mma_half_warp, misuse_fout) == cudaSuccess);  // whole warps are fine
    cudaFree(misuse_out);
    cudaFree(misuse_fout);
}
#endif

static void bench() {
    const int blocks = 64, threads = 256, runs = 3;
    float *out = device_array<float>(blocks * threads);
    launch(dim3(blocks), dim3(threads), 0, bench_kernel, out);  // warm up (stacks, pages)
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < runs; r++)
        launch(dim3(blocks), dim3(threads), 0, bench_kernel, out);
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count() / runs;
#ifdef MHE_EMU_THREADS
    const char *mode = "threads";
#elif defined(MHE_EMU_BLOCKS)
    const char *mode = "blocks";
#else
    const char *mode = "fibers";
#endif
    printf("emu bench (%s): %d blocks x %d threads, 10 __syncthreads + 10 shfl_xor reductions: %.1f ms a launch\n",
           mode, blocks, threads, ms);
    cudaFree(out);
}

int main() {
#ifndef MHE_EMU_THREADS
    // First: its children fork, and a child of a process that has started
    // runner threads (blocks mode) has none of them.
    test_misuse();
#endif
    test_block_sum(0);
    test_block_sum(1);
#ifndef MHE_EMU_THREADS
    test_run_order();
#endif
#if !defined(MHE_EMU_THREADS) && !defined(MHE_EMU_TSAN)
    // The missing __syncthreads gives a wrong answer in at least one order.
    mhe_emu_set_order(0);
    int wrong_forward = run_missing_barrier();
    mhe_emu_set_order(1);
    int wrong_reverse = run_missing_barrier();
    mhe_emu_set_order(0);
    CHECK(wrong_forward > 0 || wrong_reverse > 0);
#elif defined(EMU_SHOW_RACE)
    printf("EMU_SHOW_RACE: %d wrong outputs; ThreadSanitizer should have reported a data race\n",
           run_missing_barrier());
#if defined(MHE_EMU_BLOCKS)
    int *sum = device_array<int>(1);
    launch(dim3(8), dim3(1), 0, plain_sum, sum);
    printf("EMU_SHOW_RACE: sum %d of 8; ThreadSanitizer should have reported a data race between blocks\n",
           to_host(sum, 1)[0]);
    cudaFree(sum);
#endif
#endif
#ifdef MHE_EMU_BLOCKS
    test_blocks_at_once();
    test_block_orders();
#endif
    test_shuffles(64);
    test_shuffles(48);  // a last warp of 16 lanes
    test_shuffles(5);
    test_atomics();
    test_mma();
    test_cvt_tf32();
    test_mma_bf16();
    test_cvt_bf16();
    test_ldmatrix();
    test_cp_async();
    test_launch_checks();
    test_shape();
    test_memory_api();
    test_graph();
    test_hooks();
    test_math();
#ifndef MHE_EMU_THREADS
    test_deadlock();
#endif
    const char *b = getenv("EMU_BENCH");
    if (b && strcmp(b, "1") == 0)
        bench();
    printf("emu: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
