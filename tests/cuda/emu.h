// tests/cuda/emu.h - run mhe's CUDA kernels on the CPU, for tests only.
//
// The kernels in mhe_cuda.cuh are plain C++ once this header has defined the
// CUDA keywords, built-in variables and runtime functions, so the same source
// compiles with nvcc for a GPU and with g++/clang++ (-std=c++20 -x c++) for
// this emulation. It is not a GPU simulator: it runs each CUDA thread as a
// C++ thread of execution so that barriers, warp collectives and shared
// memory behave as CUDA defines them, and misuse shows up.
//
// How a launch runs. A runner runs a block's threads, one block after
// another: every thread of a block has finished before its next block
// starts. Inside a block there is one emulated thread per (x, y, z) of
// threadIdx. `__shared__` is `static` (thread_local in the blocks mode), so
// a kernel's shared arrays are function statics that the threads of the
// block a runner runs share. Warps are 32 consecutive linear thread ids
// (x + y*Dx + z*Dx*Dy); a last partial warp has fewer lanes and its
// collectives cover those lanes only.
//
// Three modes, chosen when compiling:
//   default            fibers, one per CUDA thread, one runner on the
//                      launching thread. A fiber runs until it waits at a
//                      barrier; then the next one runs, in thread order
//                      0,1,2,... (or last to first with MHE_EMU_ORDER=reverse
//                      or mhe_emu_set_order(1)), so a missing __syncthreads
//                      gives different results in the two orders. Blocks run
//                      in order of their linear index (x fastest), or last to
//                      first, or shuffled (MHE_EMU_SEED=n, mhe_emu_set_seed).
//                      A barrier that can never complete (deadlock) fails the
//                      launch with cudaErrorLaunchFailure and a message.
//   -DMHE_EMU_BLOCKS   as fibers, but several runners at once, each on a
//                      thread of its own (MHE_EMU_BLOCK_THREADS, default 4;
//                      mhe_emu_set_block_threads): runner k runs blocks
//                      k, k + 4, k + 8... of the launch's order. With
//                      -fsanitize=thread, TSan sees each warp as a thread
//                      and a race between blocks (a plain += where an
//                      atomicAdd belongs) or between warps (a missing
//                      __syncthreads) as a data race; add
//                      -fno-sanitize-thread-func-entry-exit (gcc: --param
//                      tsan-instrument-func-entry-exit=0) for readable
//                      reports: the lanes of a warp share one TSan call
//                      stack. Races inside a warp are the threads mode's.
//   -DMHE_EMU_THREADS  one pthread per CUDA thread and pthread_barrier_t
//                      barriers, one block at a time: the mode for
//                      AddressSanitizer, and for ThreadSanitizer inside a
//                      warp (slow: TSan follows about 250 threads at once,
//                      and misses races between those beyond).
//
// Misuse that CUDA leaves undefined (a partial mask, a bad shuffle width,
// mma from a partial warp, a call outside a kernel) prints a message and
// aborts. A bad launch configuration is not misuse: it returns CUDA's error.
// Threads mode aborts on a barrier that not every thread reaches (at once
// when it can tell, else after 60 s without progress: MHE_EMU_WATCHDOG=s).
//
// Limits, for the kernel author:
// - No `extern __shared__`: dynamic shared memory is mhe_emu_dyn_shared().
//   Static __shared__ arrays keep their contents from block to block and
//   launch to launch on a runner (a GPU does not clear them either), and do
//   not count against the shared memory limit. Dynamic shared memory starts
//   as 0xff bytes (NaN as floats) at each launch.
// - No inline PTX: use mhe_emu_mma_m16n8k8_tf32, mhe_emu_cvt_rna_tf32,
//   mhe_emu_mma_m16n8k16_bf16, mhe_emu_cvt_rn_bf16x2, mhe_emu_ldmatrix_x1/2/4
//   and mhe_emu_cp_async_16 / _commit / _wait.
// - Warp collectives take the full mask 0xffffffff only. Lanes do not run in
//   lockstep: warp-synchronous code needs __syncwarp, as since Volta.
// - A thread runs until it reaches a barrier, so it must never spin-wait for
//   another thread or block (flags, locks, grid-wide sync): in the fiber
//   mode such a loop never ends, and in the others it may.
// - Device memory is host memory: a kernel that dereferences a host pointer
//   works here and faults on a GPU. cudaMemcpy/cudaMemset do check that the
//   device side lies inside a live cudaMalloc allocation.
// - Launches, copies and events are synchronous; streams are accepted and
//   ignored. __expf and friends are the exact functions. Launch from one
//   host thread only.
// - Fiber stacks are 256 KiB (a guard page faults past that); threads mode
//   uses 1 MiB stacks. The threads and blocks modes keep their threads for
//   later launches, so a child process forked after a launch must not launch.
// - Blocks mode under TSan: up to 7 runner threads (each runs as many TSan
//   threads as a block has warps, and TSan follows about 250 at once).
#ifndef MHE_CUDA_EMU_H
#define MHE_CUDA_EMU_H

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <cxxabi.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(MHE_EMU_THREADS) && defined(MHE_EMU_BLOCKS)
#error "tests/cuda/emu.h: MHE_EMU_THREADS and MHE_EMU_BLOCKS are two different modes: pick one"
#endif
#if defined(MHE_EMU_THREADS) || defined(MHE_EMU_BLOCKS)
#include <atomic>
#include <pthread.h>
#include <semaphore.h>
#endif
#ifdef MHE_EMU_THREADS
#include <ctime>
#else
#include <vector>
// Fibers switch with a few lines of assembly on x86-64 and aarch64 ELF (see
// 5a), with ucontext elsewhere or with -DMHE_EMU_UCONTEXT.
#if !defined(MHE_EMU_UCONTEXT) && !(defined(__ELF__) && (defined(__x86_64__) || defined(__aarch64__)))
#define MHE_EMU_UCONTEXT 1
#endif
#ifdef MHE_EMU_UCONTEXT
#include <ucontext.h>
#endif
#endif

// AddressSanitizer cannot follow the fibers' stack switches: it needs
// threads. ThreadSanitizer follows fibers that tell it of each switch, which
// the blocks mode does (see 5a).
#if defined(__SANITIZE_ADDRESS__)
#define MHE_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define MHE_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(MHE_EMU_ASAN)
#define MHE_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer) && !defined(MHE_EMU_TSAN)
#define MHE_EMU_TSAN 1
#endif
#endif
#if defined(MHE_EMU_ASAN) && !defined(MHE_EMU_THREADS)
#error "tests/cuda/emu.h: build with -DMHE_EMU_THREADS under ASan (fibers confuse it)"
#endif
#if defined(MHE_EMU_TSAN) && !defined(MHE_EMU_THREADS) && !defined(MHE_EMU_BLOCKS)
#error "tests/cuda/emu.h: build with -DMHE_EMU_BLOCKS or -DMHE_EMU_THREADS under TSan"
#endif

// Lets shared code tell the emulation from nvcc.
#define MHE_CUDA_EMU 1

// ---------------------------------------------------------------------------
// 1. CUDA's keywords
// ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __noinline__
// `inline` rather than nothing: a __device__ __forceinline__ helper defined in
// a header must not become a duplicate symbol when two files include it.
#define __forceinline__ inline
#define __launch_bounds__(...)
// A runner runs one block at a time, so a function static is exactly one
// block's shared memory where one runner runs them all (fiber and threads
// modes). In the blocks mode each runner thread runs its block's threads as
// fibers on itself, so there a thread_local static is. (`extern __shared__`
// arrays do not work: use mhe_emu_dyn_shared() for dynamic shared memory.)
#ifdef MHE_EMU_BLOCKS
#define __shared__ static thread_local
#else
#define __shared__ static
#endif
#define __constant__ static

// ---------------------------------------------------------------------------
// 2. CUDA's types
// ---------------------------------------------------------------------------
struct uint3 {
    unsigned x, y, z;
};

// 16-byte vector loads from shared memory: the type and its alignment, as CUDA's vector_types.h
struct alignas(16) float4 {
    float x, y, z, w;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// Codes and values as in CUDA's driver_types.h.
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
};

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

struct CUstream_st {
    int unused;
};
typedef CUstream_st *cudaStream_t;

struct CUevent_st {
    double ms;      // wall clock when recorded, in ms since an arbitrary start
    bool recorded;
};
typedef CUevent_st *cudaEvent_t;

// graphs (section 9b)
struct CUgraph_st;
struct CUgraphNode_st;
struct CUgraphExec_st;
typedef CUgraph_st *cudaGraph_t;
typedef CUgraphNode_st *cudaGraphNode_t;
typedef CUgraphExec_st *cudaGraphExec_t;

struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;  // the address of each argument's value
    void **extra;         // not supported: must be null
};

struct cudaMemsetParams {
    void *dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;  // 1, 2 or 4
    size_t width;              // elements per row
    size_t height;
};

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    size_t sharedMemPerMultiprocessor;
    size_t totalConstMem;
    int multiProcessorCount;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int maxThreadsPerMultiProcessor;
    int warpSize;
    int regsPerBlock;
    int clockRate;        // kHz
    int memoryClockRate;  // kHz
    int memoryBusWidth;   // bits
    int l2CacheSize;      // bytes
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes;
    size_t constSizeBytes;
    size_t localSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
    int maxDynamicSharedSizeBytes;
};

struct cudaLaunchConfig_t {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    void *attrs;  // ignored
    unsigned numAttrs;
};

// ---------------------------------------------------------------------------
// 3. Built-in variables
// ---------------------------------------------------------------------------
// Per emulated thread. In the fiber modes a runner's fibers share its OS
// thread, and the scheduler stores the next fiber's values before it switches.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
// Per launch, written before any emulated thread starts.
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------
// 4. The emulator's state
// ---------------------------------------------------------------------------
namespace mhe_emu_impl {

constexpr unsigned kMaxThreads = 1024;
constexpr unsigned kMaxWarps = kMaxThreads / 32;
constexpr unsigned kMaxCopies = 64;  // cp.async copies a thread may have in flight (see mhe_emu_cp_async_16)
constexpr size_t kDefaultSmem = 48 * 1024;   // per block without opting in
constexpr size_t kOptinSmem = 227 * 1024;    // sm_90's sharedMemPerBlockOptin
constexpr size_t kDefaultMem = size_t(16) << 30;
constexpr size_t kFiberStack = 256 * 1024;
constexpr size_t kThreadStack = 1024 * 1024;
constexpr int kWatchdogSeconds = 60;         // threads mode: no progress this long = stuck (MHE_EMU_WATCHDOG)
// The emulation's answer to a launch asking for too much dynamic shared
// memory. A real GPU says cudaErrorInvalidValue ("invalid argument") there,
// so code that must work on both should only check for "not cudaSuccess".
constexpr cudaError_t kSmemTooBig = cudaErrorInvalidConfiguration;

// What an emulated thread is doing (fiber scheduler, threads-mode watchdog).
enum : unsigned char { kRunnable, kWaitBlock, kWaitWarp, kDone };
// Threads mode: why a thread waits at a barrier, so that a thread at
// __syncthreads meeting one that has returned is caught (see thread_wait).
enum : unsigned char { kKindSync = 1, kKindWarp = 2, kKindExit = 3 };

// One lane's contribution to a warp collective: a shuffle uses w[0..1], the
// tf32 mma 10 words (a0-a3, b0-b1, c0-c3).
struct Slot {
    unsigned w[10];
};

#ifndef MHE_EMU_THREADS
#ifdef MHE_EMU_UCONTEXT
typedef ucontext_t FiberCtx;
#else
struct FiberCtx {
    void *sp;  // while switched out: its stack, with the saved registers on top (see 5a)
};
#endif
#endif

struct Runner;

// One emulated CUDA thread.
struct Lane {
    uint3 idx;             // its threadIdx
    unsigned tid;          // linear id in the block
    unsigned warp, lane;   // tid / 32, tid % 32
    unsigned block_phase;  // block barriers passed so far
    unsigned warp_phase;   // warp barriers passed so far
    Runner *runner;        // the runner it belongs to
    // cp.async copies issued and not landed yet: their bytes (read at issue), where they go,
    // and the group each belongs to (groups counts the commits so far in this block)
    struct Copy {
        unsigned char *dst;
        unsigned char bytes[16];
        unsigned group;
    } copies[kMaxCopies];
    unsigned ncopies, groups;
#ifndef MHE_EMU_THREADS
    FiberCtx ctx;
    void *stack;           // null: no fiber yet
    unsigned char state;
#endif
};

// MHE_EMU_DEVICES=0 starts the program with no device and MHE_EMU_MEM_LIMIT=N
// with N bytes of device memory (a test program's no-device and failed-
// allocation paths, seen from outside); unset: one device, kDefaultMem
inline int initial_device_count() {
    const char *env = getenv("MHE_EMU_DEVICES");
    return env && *env ? atoi(env) : 1;
}
inline size_t initial_mem_limit() {
    const char *env = getenv("MHE_EMU_MEM_LIMIT");
    return env && *env ? (size_t)strtoull(env, nullptr, 10) : kDefaultMem;
}

// Runs one block at a time: its emulated threads and what they share. The
// fiber and threads modes have one runner; the blocks mode one per runner
// thread, each running blocks as fibers on its own OS thread.
struct Runner {
    unsigned index;
    Lane *lanes;                // kMaxThreads, allocated once, never moved
    void *dyn_smem = nullptr;   // this launch's dynamic shared memory
    // Warp exchange buffers, two per warp: a collective writes the buffer of
    // its barrier's parity, so the next collective (other buffer) cannot
    // overwrite slots a slow lane has still to read, and one barrier suffices.
    Slot exchange[kMaxWarps][2][32];
#ifndef MHE_EMU_THREADS
    FiberCtx main_ctx;          // the scheduler's context
    unsigned block_arrived = 0;
    unsigned warp_arrived[kMaxWarps] = {};
    unsigned runnable = 0;      // fibers that can run now
    unsigned live = 0;          // fibers not finished
    bool deadlock = false;
    // ThreadSanitizer (blocks mode, see below): the scheduler's fiber and
    // each warp's, and bytes whose addresses name happens-before edges.
    void *tsan = nullptr;
    void *tsan_warp[kMaxWarps] = {};
    char tsan_block[2], tsan_start, tsan_end;
#endif
#ifdef MHE_EMU_BLOCKS
    pthread_t thread;
    sem_t start;                // posted: run this launch's share of the blocks
#endif
};

constexpr unsigned kMaxRunners = 64;
constexpr unsigned kDefaultRunners = 4;  // blocks mode, unless MHE_EMU_BLOCK_THREADS says
constexpr unsigned kMaxTsanRunners = 7;  // blocks mode under TSan (see section 4's TSan notes)

struct State {
    // test hooks and runtime bookkeeping (host side only)
    int device_count = initial_device_count();
    int device = 0;
    size_t mem_limit = initial_mem_limit();  // 0: no limit
    size_t live_bytes = 0;
    bool no_kernel_image = false;
    long launches = 0;
    int order = -1;                  // -1: not chosen yet (read MHE_EMU_ORDER), 0 forward, 1 reverse
    long seed = -1;                  // -1: not chosen yet (read MHE_EMU_SEED), 0 none, else shuffle the blocks
    int nrunners_wanted = -1;        // blocks mode; -1: not chosen yet (read MHE_EMU_BLOCK_THREADS)
    cudaError_t last_error = cudaSuccess;
    std::map<uintptr_t, size_t> allocations;          // device "memory": base -> size
    std::map<const void *, int> smem_limits;          // per kernel, from cudaFuncSetAttribute

    // the launch being run
    void (*run)(void *) = nullptr;   // calls the kernel with its arguments
    void *run_data = nullptr;
    const void *kernel = nullptr;
    unsigned nthreads = 0, nwarps = 0;
    unsigned warp_lanes[kMaxWarps] = {};
    size_t nblocks = 0;
    Runner *runners[kMaxRunners] = {};  // created on first use, never freed
    unsigned nrunners = 0;              // used by this launch

#ifdef MHE_EMU_THREADS
    pthread_barrier_t block_bar;
    pthread_barrier_t warp_bar[kMaxWarps];
    unsigned char block_kind[2][kMaxThreads];  // [barrier parity][tid]
    unsigned char warp_kind[2][kMaxThreads];
    std::atomic<unsigned char> thread_state[kMaxThreads];
    std::atomic<unsigned long> progress{0};     // barrier arrivals, for the watchdog
    pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
    unsigned done = 0;
    // The workers, kept from launch to launch: creating and ending up to 1024
    // threads per launch was most of the sanitizer runs' (system) time.
    pthread_t workers[kMaxThreads];
    sem_t start[kMaxThreads];                  // posted: worker i runs lane i of the launch
    unsigned nworkers = 0;
    bool quit = false;                         // at exit: the workers return
    std::atomic<size_t> block_now{0};          // block being run, for the watchdog's message
#else
    bool reverse = false;            // this launch runs threads (and blocks) last to first
    std::vector<size_t> shuffled;    // this launch's block order, when shuffled
#endif
#ifdef MHE_EMU_BLOCKS
    unsigned nthreads_started = 0;   // runner threads
    bool quit = false;               // at exit: the runner threads return
    sem_t runner_done;               // posted by each runner thread at the end of its share
    // A runner's block deadlocked: the others take no more blocks. Relaxed,
    // like everything the runners share during a launch, so that nothing
    // orders one runner's blocks before another's (for ThreadSanitizer).
    std::atomic<bool> failed{false};
#endif
};

inline State g;
// The emulated thread running on this OS thread (null outside kernels).
inline thread_local Lane *self = nullptr;

// ThreadSanitizer's view of the fibers (blocks mode). TSan is told of each
// switch, and sees each warp as a thread of its own (not each CUDA thread:
// TSan follows at most about 250 threads at once, and misses races between
// those beyond). A switch does not order the warps' memory accesses
// (no_sync); only what orders a GPU's warps does, so that TSan sees races
// between warps as well as between blocks (races inside a warp are left to
// the threads mode):
// - __syncthreads: each thread releases the barrier's clock when it arrives
//   and acquires it when it goes on (tsan_block, by barrier parity, as the
//   exchange buffers);
// - the start and end of a block on the same runner (tsan_start, tsan_end),
//   as the next block there reuses the shared memory; blocks on different
//   runners stay unordered: their conflicting accesses are races;
// - the launch, before and after (the semaphores that start and end it).
// The scheduler's own bookkeeping, which the warps share without such an
// order, is not checked (MHE_EMU_UNCHECKED functions); every access TSan
// does check comes before the warp's next release. Without TSan all of this
// is nothing.
#ifdef MHE_EMU_TSAN
extern "C" {  // as in <sanitizer/tsan_interface.h>
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_set_fiber_name(void *fiber, const char *name);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
}
#define MHE_EMU_UNCHECKED __attribute__((no_sanitize("thread")))
inline void *tsan_current() { return __tsan_get_current_fiber(); }
inline void *tsan_create(unsigned runner, unsigned warp) {
    void *fiber = __tsan_create_fiber(0);
    char name[64];
    snprintf(name, sizeof name, "mhe emu runner %u, warp %u", runner, warp);
    __tsan_set_fiber_name(fiber, name);
    return fiber;
}
inline void tsan_destroy(void *fiber) { __tsan_destroy_fiber(fiber); }
// TSan enters and leaves functions on the fiber current at the time: the
// switch must be inlined into the function that switches stacks, so that
// both sides of each switch go through the same frames.
MHE_EMU_UNCHECKED __attribute__((always_inline)) inline void tsan_switch(void *fiber) {
    if (fiber != __tsan_get_current_fiber())
        __tsan_switch_to_fiber(fiber, 1 /* __tsan_switch_to_fiber_no_sync */);
}
inline void tsan_acquire(void *sync) { __tsan_acquire(sync); }
inline void tsan_release(void *sync) { __tsan_release(sync); }
#else
#define MHE_EMU_UNCHECKED
inline void *tsan_current() { return nullptr; }
inline void *tsan_create(unsigned, unsigned) { return nullptr; }
inline void tsan_destroy(void *) {}
inline void tsan_switch(void *) {}
inline void tsan_acquire(void *) {}
inline void tsan_release(void *) {}
#endif

// Records a failed call as CUDA's "last error" and returns the code.
inline cudaError_t fail(cudaError_t e) {
    g.last_error = e;
    return e;
}

inline cudaError_t no_device() {
    return g.device_count <= 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

// "name(args)" of a kernel if the executable exports it, else its address as
// an offset that `addr2line -f -C -e EXE OFFSET` turns into a name.
inline void kernel_name(char *out, size_t size, const void *kernel) {
    Dl_info info;
    if (kernel && dladdr(kernel, &info)) {
        if (info.dli_sname) {
            int status = 0;
            char *nice = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
            snprintf(out, size, "%s", status == 0 && nice ? nice : info.dli_sname);
            free(nice);
            return;
        }
        if (info.dli_fname) {
            unsigned long off = (unsigned long)((const char *)kernel - (const char *)info.dli_fbase);
            snprintf(out, size, "at %s+0x%lx (addr2line -f -C -e %s 0x%lx)", info.dli_fname, off,
                     info.dli_fname, off);
            return;
        }
    }
    snprintf(out, size, "at %p", kernel);
}

// Prints "mhe emu: <message> [kernel, block, thread]" and aborts.
[[noreturn]] __attribute__((format(printf, 1, 2))) inline void die(const char *fmt, ...) {
    fprintf(stderr, "mhe emu: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (self) {
        char name[512];
        kernel_name(name, sizeof name, g.kernel);
        fprintf(stderr, "\n  in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)", name, blockIdx.x, blockIdx.y,
                blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    }
    fprintf(stderr, "\n");
    abort();
}

inline Lane *current(const char *what) {
    if (!self)
        die("%s called outside a kernel", what);
    return self;
}

// A thread that ends with cp.async copies it never waited for has read
// nothing they wrote, so the kernel lost its data or needs no copy: misuse.
inline void copies_at_exit(Lane *me) {
    if (me->ncopies)
        die("a thread ended with %u cp.async copies it never waited for (cp.async.wait_group): a kernel must "
            "wait for every copy it issues", me->ncopies);
    me->groups = 0;
}

inline double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

inline uint3 block_index(size_t b) {
    size_t gx = gridDim.x, gy = gridDim.y;
    return uint3{unsigned(b % gx), unsigned(b / gx % gy), unsigned(b / (gx * gy))};
}

// ---------------------------------------------------------------------------
// 5a. Fibers: a runner's scheduler (fiber mode: on the launching thread)
// ---------------------------------------------------------------------------
#ifndef MHE_EMU_THREADS

// The switch between fibers. glibc's swapcontext makes an rt_sigprocmask
// system call on every switch, which was most of the fiber runs' time; the
// fibers never change the signal mask, so this switch keeps to user space.
// It saves what a call must preserve (System V x86-64: rbx, rbp, r12-r15,
// MXCSR and the x87 control word; AAPCS64: x19-x29, lr, d8-d15, FPCR) on the
// stack being left, stores that stack pointer in *save, and resumes the one
// in `load`: one saved the same way, or a new fiber's from fiber_start_frame.
// In a comdat group so that several files may include this header.
#ifndef MHE_EMU_UCONTEXT
extern "C" void mhe_emu_fiber_switch(void **save, void *load);
extern "C" void mhe_emu_fiber_entry();

#if defined(__x86_64__)
__asm__(".pushsection .text.mhe_emu_fiber_switch,\"axG\",@progbits,mhe_emu_fiber_switch,comdat\n"
        ".weak mhe_emu_fiber_switch\n"
        ".type mhe_emu_fiber_switch,@function\n"
        ".p2align 4\n"
        "mhe_emu_fiber_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    subq $8, %rsp\n"
        "    stmxcsr (%rsp)\n"
        "    fnstcw 4(%rsp)\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    ldmxcsr (%rsp)\n"
        "    fldcw 4(%rsp)\n"
        "    addq $8, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size mhe_emu_fiber_switch, .-mhe_emu_fiber_switch\n"
        // A new fiber's first return lands here, on a 16-byte aligned stack,
        // with the entry function in rbx. The entry never returns; if it did,
        // ud2 stops the program at once. Outermost frame for unwinders.
        ".weak mhe_emu_fiber_entry\n"
        ".type mhe_emu_fiber_entry,@function\n"
        "mhe_emu_fiber_entry:\n"
        "    .cfi_startproc\n"
        "    .cfi_undefined rip\n"
        "    callq *%rbx\n"
        "    ud2\n"
        "    .cfi_endproc\n"
        ".size mhe_emu_fiber_entry, .-mhe_emu_fiber_entry\n"
        ".popsection\n");

constexpr size_t kFrameWords = 8;  // control words, r15, r14, r13, r12, rbx, rbp, return address

// The stack of a fiber not yet run: as mhe_emu_fiber_switch leaves one, so
// that switching to it "returns" into mhe_emu_fiber_entry.
inline void *fiber_start_frame(char *top, void (*entry)()) {
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ __volatile__("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
    uint64_t *f = (uint64_t *)top - kFrameWords;  // after the ret: rsp = top, 16-byte aligned
    memset(f, 0, kFrameWords * 8);                 // rbp = 0 ends frame-pointer backtraces
    f[0] = mxcsr | (uint64_t)fpucw << 32;
    f[5] = (uint64_t)entry;                        // rbx
    f[7] = (uint64_t)&mhe_emu_fiber_entry;
    return f;
}

#else  // __aarch64__
__asm__(".pushsection .text.mhe_emu_fiber_switch,\"axG\",@progbits,mhe_emu_fiber_switch,comdat\n"
        ".weak mhe_emu_fiber_switch\n"
        ".type mhe_emu_fiber_switch,%function\n"
        ".p2align 4\n"
        "mhe_emu_fiber_switch:\n"
        "    sub sp, sp, #176\n"
        "    stp x19, x20, [sp, #0]\n"
        "    stp x21, x22, [sp, #16]\n"
        "    stp x23, x24, [sp, #32]\n"
        "    stp x25, x26, [sp, #48]\n"
        "    stp x27, x28, [sp, #64]\n"
        "    stp x29, x30, [sp, #80]\n"
        "    stp d8, d9, [sp, #96]\n"
        "    stp d10, d11, [sp, #112]\n"
        "    stp d12, d13, [sp, #128]\n"
        "    stp d14, d15, [sp, #144]\n"
        "    mrs x9, fpcr\n"
        "    str x9, [sp, #160]\n"
        "    mov x9, sp\n"
        "    str x9, [x0]\n"
        "    mov sp, x1\n"
        "    ldp x19, x20, [sp, #0]\n"
        "    ldp x21, x22, [sp, #16]\n"
        "    ldp x23, x24, [sp, #32]\n"
        "    ldp x25, x26, [sp, #48]\n"
        "    ldp x27, x28, [sp, #64]\n"
        "    ldp x29, x30, [sp, #80]\n"
        "    ldp d8, d9, [sp, #96]\n"
        "    ldp d10, d11, [sp, #112]\n"
        "    ldp d12, d13, [sp, #128]\n"
        "    ldp d14, d15, [sp, #144]\n"
        "    ldr x9, [sp, #160]\n"
        "    msr fpcr, x9\n"
        "    add sp, sp, #176\n"
        "    ret\n"
        ".size mhe_emu_fiber_switch, .-mhe_emu_fiber_switch\n"
        // A new fiber's first return lands here with the entry function in
        // x19; brk stops the program if the entry ever returns.
        ".weak mhe_emu_fiber_entry\n"
        ".type mhe_emu_fiber_entry,%function\n"
        "mhe_emu_fiber_entry:\n"
        "    .cfi_startproc\n"
        "    .cfi_undefined x30\n"
        "    blr x19\n"
        "    brk #1\n"
        "    .cfi_endproc\n"
        ".size mhe_emu_fiber_entry, .-mhe_emu_fiber_entry\n"
        ".popsection\n");

constexpr size_t kFrameWords = 22;  // x19-x30, d8-d15, FPCR, padding to 16 bytes

inline void *fiber_start_frame(char *top, void (*entry)()) {
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    uint64_t *f = (uint64_t *)top - kFrameWords;  // after the switch: sp = top
    memset(f, 0, kFrameWords * 8);                 // x29 = 0 ends frame-pointer backtraces
    f[0] = (uint64_t)entry;                        // x19
    f[11] = (uint64_t)&mhe_emu_fiber_entry;        // x30
    f[20] = fpcr;
    return f;
}
#endif

// Saves the running fiber (or the scheduler) in `from` and resumes `to`.
MHE_EMU_UNCHECKED __attribute__((always_inline)) inline void ctx_switch(FiberCtx *from, FiberCtx *to) {
    mhe_emu_fiber_switch(&from->sp, to->sp);
}
#else
MHE_EMU_UNCHECKED __attribute__((always_inline)) inline void ctx_switch(FiberCtx *from, FiberCtx *to) {
    swapcontext(from, to);
}
#endif

// The block that comes p-th in this launch's order (see choose_order).
inline size_t block_at(size_t p) {
    if (!g.shuffled.empty())
        return g.shuffled[p];
    return g.reverse ? g.nblocks - 1 - p : p;
}

// The next fiber that can run after lane `from`, in the chosen order;
// `from` itself comes last. Only called while some fiber is runnable.
MHE_EMU_UNCHECKED inline Lane *next_runnable(Runner *r, unsigned from) {
    unsigned n = g.nthreads, i = from;
    for (unsigned step = 1; step <= n; step++) {
        // a wrap rather than `% n`: the division was a fifth of a barrier's cost
        if (g.reverse)
            i = i == 0 ? n - 1 : i - 1;
        else
            i = i + 1 == n ? 0 : i + 1;
        if (r->lanes[i].state == kRunnable)
            return &r->lanes[i];
    }
    return nullptr;
}

// Saves the running fiber (or the scheduler) in `from` and resumes `next`.
MHE_EMU_UNCHECKED inline void switch_to(FiberCtx *from, Lane *next) {
    self = next;
    threadIdx = next->idx;
    tsan_switch(next->runner->tsan_warp[next->warp]);
    ctx_switch(from, &next->ctx);
    // back here when another fiber (or the scheduler) switches to this one
}

// Back to the runner's scheduler: the block has ended, or cannot go on.
MHE_EMU_UNCHECKED inline void switch_to_scheduler(Lane *me) {
    Runner *r = me->runner;
    tsan_switch(r->tsan);
    ctx_switch(&me->ctx, &r->main_ctx);
}

// Arrival at a block barrier (block = true) or at this fiber's warp barrier.
MHE_EMU_UNCHECKED inline void fiber_wait(bool block) {
    Lane *me = self;
    Runner *r = me->runner;
    // TSan: what this warp has done happens before what every thread of the
    // block does after a __syncthreads, and before the runner's next block
    // (even if this one never ends: a deadlock).
    char *edge = &r->tsan_block[me->block_phase & 1];
    if (block)
        tsan_release(edge);
    tsan_release(&r->tsan_end);
    me->state = block ? kWaitBlock : kWaitWarp;
    r->runnable--;
    if (block) {
        me->block_phase++;
        if (++r->block_arrived == g.nthreads) {  // the last one: everybody may go on
            r->block_arrived = 0;
            for (unsigned i = 0; i < g.nthreads; i++)
                r->lanes[i].state = kRunnable;
            r->runnable += g.nthreads;
        }
    } else {
        me->warp_phase++;
        unsigned w = me->warp, lanes = g.warp_lanes[w];
        if (++r->warp_arrived[w] == lanes) {
            r->warp_arrived[w] = 0;
            for (unsigned i = 0; i < lanes; i++)
                r->lanes[w * 32 + i].state = kRunnable;
            r->runnable += lanes;
        }
    }
    if (r->runnable == 0) {
        // Nothing can run but fibers remain: the scheduler gives up on this
        // block and never resumes this fiber (see run_block).
        r->deadlock = true;
        switch_to_scheduler(me);
        abort();
    }
    Lane *next = next_runnable(r, me->tid);
    // A fiber whose arrival completed the barrier, and whose turn it is
    // anyway, goes on without a context switch.
    if (next != me)
        switch_to(&me->ctx, next);
    if (block)
        tsan_acquire(edge);
}

// A fiber's kernel call has returned: it waits, switched out, until its
// runner starts it in the next block.
MHE_EMU_UNCHECKED inline void fiber_finish() {
    Lane *me = self;
    Runner *r = me->runner;
    tsan_release(&r->tsan_end);
    me->state = kDone;
    r->runnable--;
    r->live--;
    if (r->live == 0)
        switch_to_scheduler(me);  // the block is done
    else if (r->runnable == 0) {
        r->deadlock = true;       // the others wait for this one forever
        switch_to_scheduler(me);
    } else
        switch_to(&me->ctx, next_runnable(r, me->tid));
}

// A fiber's life: one CUDA thread in each block its runner runs. A new
// fiber's first switch starts it here.
[[noreturn]] MHE_EMU_UNCHECKED inline void fiber_main() {
    for (;;) {
        tsan_acquire(&self->runner->tsan_start);
        g.run(g.run_data);
        copies_at_exit(self);
        fiber_finish();
    }
}

inline void fiber_create(Lane *l) {
    // mmap with a PROT_NONE page below: a stack overflow faults at once
    // instead of overwriting the heap.
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(nullptr, kFiberStack + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("cannot map a %zu-byte fiber stack", kFiberStack);
    mprotect(p, page, PROT_NONE);
    l->stack = (char *)p + page;
#ifdef MHE_EMU_UCONTEXT
    getcontext(&l->ctx);  // makecontext needs an initialised context
    l->ctx.uc_stack.ss_sp = l->stack;
    l->ctx.uc_stack.ss_size = kFiberStack;
    l->ctx.uc_link = nullptr;  // fiber_main never returns
    makecontext(&l->ctx, fiber_main, 0);
#else
    l->ctx.sp = fiber_start_frame((char *)l->stack + kFiberStack, fiber_main);
#endif
    Runner *r = l->runner;
    if (!r->tsan_warp[l->warp])
        r->tsan_warp[l->warp] = tsan_create(r->index, l->warp);
}

// After a deadlock: the fibers left at a barrier are never resumed, so every
// fiber of the runner goes (their stacks, and with them what TSan remembers
// of that memory, and the warps' TSan fibers, whose call stacks the lanes
// share), and the next blocks start new ones.
inline void runner_reset(Runner *r) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (unsigned i = 0; i < kMaxThreads; i++) {
        Lane *l = &r->lanes[i];
        if (l->stack)
            munmap((char *)l->stack - page, kFiberStack + page);
        l->stack = nullptr;
    }
    for (unsigned w = 0; w < kMaxWarps; w++) {
        if (r->tsan_warp[w])
            tsan_destroy(r->tsan_warp[w]);
        r->tsan_warp[w] = nullptr;
    }
}

inline void report_deadlock(Runner *r, uint3 block) {
    unsigned at_sync = 0, at_warp = 0, done = 0;
    for (unsigned i = 0; i < g.nthreads; i++) {
        at_sync += r->lanes[i].state == kWaitBlock;
        at_warp += r->lanes[i].state == kWaitWarp;
        done += r->lanes[i].state == kDone;
    }
    char warps[200] = "";  // the warps with a lane at a warp barrier
    size_t used = 0;
    for (unsigned w = 0; w < g.nwarps && used + 8 < sizeof warps; w++) {
        bool waits = false;
        for (unsigned i = 0; i < g.warp_lanes[w]; i++)
            waits = waits || r->lanes[w * 32 + i].state == kWaitWarp;
        if (waits)
            used += (size_t)snprintf(warps + used, sizeof warps - used, " %u", w);
    }
    char name[512];
    kernel_name(name, sizeof name, g.kernel);
    fprintf(stderr,
            "mhe emu: deadlock in kernel %s, block (%u,%u,%u): of %u threads, %u wait at __syncthreads, "
            "%u wait at a warp collective or __syncwarp (warps:%s), %u have returned. A barrier that not "
            "every thread reaches (in a branch, or after an early return)? The launch fails with "
            "cudaErrorLaunchFailure.\n",
            name, block.x, block.y, block.z, g.nthreads, at_sync, at_warp, at_warp ? warps : " none", done);
}

// Runs block b on runner r's fibers, from the runner's OS thread. False
// (and a report on stderr) when it deadlocked.
inline bool run_block(Runner *r, size_t b) {
    blockIdx = block_index(b);
    for (unsigned i = 0; i < g.nthreads; i++) {
        Lane *l = &r->lanes[i];
        l->state = kRunnable;
        l->block_phase = l->warp_phase = 0;
        if (!l->stack)
            fiber_create(l);
    }
    r->block_arrived = 0;
    memset(r->warp_arrived, 0, sizeof r->warp_arrived);
    r->runnable = r->live = g.nthreads;
    r->deadlock = false;
    tsan_release(&r->tsan_start);
    switch_to(&r->main_ctx, &r->lanes[g.reverse ? g.nthreads - 1 : 0]);
    // back when every fiber has finished, or none can go on
    tsan_acquire(&r->tsan_end);
    self = nullptr;
    if (!r->deadlock)
        return true;
    report_deadlock(r, blockIdx);
    runner_reset(r);
    return false;
}

#ifndef MHE_EMU_BLOCKS
// Fiber mode: one runner, on the launching thread.
inline cudaError_t run_blocks() {
    for (size_t p = 0; p < g.nblocks; p++)
        if (!run_block(g.runners[0], block_at(p)))
            return cudaErrorLaunchFailure;
    return cudaSuccess;
}
#endif

inline void block_barrier() {
    current("__syncthreads");
    __asm__ __volatile__("" ::: "memory");
    fiber_wait(true);
    __asm__ __volatile__("" ::: "memory");
}

inline void warp_barrier(const char *what) {
    current(what);
    __asm__ __volatile__("" ::: "memory");
    fiber_wait(false);
    __asm__ __volatile__("" ::: "memory");
}

#endif  // !MHE_EMU_THREADS

// ---------------------------------------------------------------------------
// 5b. Threads mode: one pthread per CUDA thread
// ---------------------------------------------------------------------------
#ifdef MHE_EMU_THREADS

inline const char *kind_name(unsigned char kind) {
    return kind == kKindSync ? "__syncthreads" : kind == kKindWarp ? "a warp collective" : "the kernel's end";
}

// Waits at a pthread barrier, then checks that the neighbour (tid + 1, in a
// ring) arrived for the same reason. Each thread writes its kind to the slot
// of this barrier's parity; that slot is written again only two barriers
// later, after the neighbour has read it, so the check needs no lock. When
// every neighbour agrees, everybody does.
inline void thread_wait(bool block, unsigned char kind) {
    Lane *me = self;
    unsigned p = (block ? me->block_phase++ : me->warp_phase++) & 1;
    unsigned base = block ? 0 : me->warp * 32;
    unsigned count = block ? g.nthreads : g.warp_lanes[me->warp];
    unsigned char *kinds = block ? g.block_kind[p] : g.warp_kind[p];
    kinds[me->tid] = kind;
    g.thread_state[me->tid].store(block ? kWaitBlock : kWaitWarp, std::memory_order_relaxed);
    g.progress.fetch_add(1, std::memory_order_relaxed);
    pthread_barrier_wait(block ? &g.block_bar : &g.warp_bar[me->warp]);
    g.thread_state[me->tid].store(kRunnable, std::memory_order_relaxed);
    unsigned other = base + (me->tid - base + 1) % count;
    if (kinds[other] != kind)
        die("thread %u waits at %s while thread %u has reached %s: a barrier that not every thread "
            "reaches (in a branch, or after an early return). Threads mode cannot recover from this; "
            "the fiber mode reports it as cudaErrorLaunchFailure.",
            me->tid, kind_name(kind), other, kind_name(kinds[other]));
}

inline void block_barrier() {
    current("__syncthreads");
    thread_wait(true, kKindSync);
}

inline void warp_barrier(const char *what) {
    current(what);
    thread_wait(false, kKindWarp);
}

// One launch, on the worker that runs lane `me`.
inline void run_thread(Lane *me) {
    self = me;
    threadIdx = me->idx;
    for (size_t b = 0; b < g.nblocks; b++) {
        blockIdx = block_index(b);
        if (me->tid == 0)
            g.block_now.store(b, std::memory_order_relaxed);
        g.run(g.run_data);
        copies_at_exit(me);
        // A block ends with a warp then a block barrier marked "exit", so that
        // the next block's shared memory writes wait for this block's reads,
        // and so that an early return meets the other threads' barriers.
        thread_wait(false, kKindExit);
        thread_wait(true, kKindExit);
    }
    g.thread_state[me->tid].store(kDone, std::memory_order_relaxed);
    self = nullptr;
    pthread_mutex_lock(&g.done_mu);
    g.done++;
    pthread_cond_signal(&g.done_cv);
    pthread_mutex_unlock(&g.done_mu);
}

// A worker: lane i of every launch with more than i threads. The semaphore
// and done_mu order each launch's memory after the last one's, as the
// thread creation and join did.
inline void *worker_main(void *arg) {
    unsigned i = (unsigned)(uintptr_t)arg;  // not lanes[i].tid: the launcher rewrites it
    for (;;) {
        while (sem_wait(&g.start[i]) != 0) {
        }
        if (g.quit)
            return nullptr;
        run_thread(&g.runners[0]->lanes[i]);
    }
}

inline void stop_workers() {
    g.quit = true;
    for (unsigned i = 0; i < g.nworkers; i++)
        sem_post(&g.start[i]);
    for (unsigned i = 0; i < g.nworkers; i++)
        pthread_join(g.workers[i], nullptr);
}

inline void add_workers(unsigned n) {
    if (g.nworkers == 0)
        atexit(stop_workers);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kThreadStack);
    for (unsigned i = g.nworkers; i < n; i++) {
        sem_init(&g.start[i], 0, 0);
        int err = pthread_create(&g.workers[i], &attr, worker_main, (void *)(uintptr_t)i);
        if (err)
            die("pthread_create failed for thread %u of %u: %s", i, n, strerror(err));
        g.nworkers = i + 1;
    }
    pthread_attr_destroy(&attr);
}

// The launching thread waits for the workers. If no barrier is reached for
// kWatchdogSeconds (or $MHE_EMU_WATCHDOG seconds), it reports where the
// threads are and aborts instead of hanging the test run: the deadlocks that
// thread_wait cannot see, e.g. a lane that returned while the rest of its
// warp waits at __syncthreads.
inline void wait_for_threads() {
    static const int limit = getenv("MHE_EMU_WATCHDOG") ? atoi(getenv("MHE_EMU_WATCHDOG")) : kWatchdogSeconds;
    pthread_mutex_lock(&g.done_mu);
    unsigned long last = 0;
    double since = now_ms();
    while (g.done < g.nthreads) {
        timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&g.done_cv, &g.done_mu, &until);
        unsigned long now = g.progress.load(std::memory_order_relaxed) + g.done;  // a finished thread is progress
        if (now != last) {
            last = now;
            since = now_ms();
            continue;
        }
        if (g.done == g.nthreads || now_ms() - since < limit * 1000.0)
            continue;
        unsigned count[4] = {};
        for (unsigned i = 0; i < g.nthreads; i++)
            count[g.thread_state[i].load(std::memory_order_relaxed)]++;
        uint3 b = block_index(g.block_now.load(std::memory_order_relaxed));
        char name[512];
        kernel_name(name, sizeof name, g.kernel);
        fprintf(stderr,
                "mhe emu: no barrier reached for %d s in kernel %s, block (%u,%u,%u) or later: of %u threads, "
                "%u run, %u wait at __syncthreads (or the block's end), %u at a warp barrier (a collective, "
                "__syncwarp or the kernel's end), %u have finished. A deadlock (a barrier some threads never "
                "reach)? The fiber mode tells more.\n",
                limit, name, b.x, b.y, b.z, g.nthreads, count[kRunnable], count[kWaitBlock],
                count[kWaitWarp], count[kDone]);
        abort();
    }
    pthread_mutex_unlock(&g.done_mu);
}

inline cudaError_t run_blocks() {
    pthread_barrier_init(&g.block_bar, nullptr, g.nthreads);
    for (unsigned w = 0; w < g.nwarps; w++)
        pthread_barrier_init(&g.warp_bar[w], nullptr, g.warp_lanes[w]);
    g.done = 0;
    for (unsigned i = 0; i < g.nthreads; i++) {
        g.thread_state[i].store(kRunnable, std::memory_order_relaxed);
        g.runners[0]->lanes[i].block_phase = g.runners[0]->lanes[i].warp_phase = 0;
    }
    if (g.nworkers < g.nthreads)
        add_workers(g.nthreads);
    for (unsigned i = 0; i < g.nthreads; i++)
        sem_post(&g.start[i]);
    wait_for_threads();  // every worker has left the barriers: they may go
    pthread_barrier_destroy(&g.block_bar);
    for (unsigned w = 0; w < g.nwarps; w++)
        pthread_barrier_destroy(&g.warp_bar[w]);
    return cudaSuccess;
}

#endif  // MHE_EMU_THREADS

// ---------------------------------------------------------------------------
// 5c. Blocks mode: runners on threads of their own, at once
// ---------------------------------------------------------------------------
#ifdef MHE_EMU_BLOCKS

// A runner thread. Each launch, runner k runs the blocks at positions k,
// k + nrunners, k + 2 nrunners... of the launch's order: fixed shares rather
// than blocks taken from a shared counter, so that neighbours in the order
// are on different runners however the OS schedules the threads (one
// thread could otherwise take every block of a small grid), and a seed
// replays a race.
inline void *runner_main(void *arg) {
    Runner *r = static_cast<Runner *>(arg);
    r->tsan = tsan_current();
    for (;;) {
        while (sem_wait(&r->start) != 0) {
        }
        if (g.quit)
            return nullptr;
        for (size_t p = r->index; p < g.nblocks; p += g.nrunners) {
            if (g.failed.load(std::memory_order_relaxed))
                break;
            if (!run_block(r, block_at(p)))
                g.failed.store(true, std::memory_order_relaxed);
        }
        sem_post(&g.runner_done);
    }
}

inline void stop_runners() {
    g.quit = true;
    for (unsigned k = 0; k < g.nthreads_started; k++)
        sem_post(&g.runners[k]->start);
    for (unsigned k = 0; k < g.nthreads_started; k++)
        pthread_join(g.runners[k]->thread, nullptr);
}

// The threads of runners 0..n-1 (created by the launch), kept for later launches.
inline void start_runner_threads(unsigned n) {
    if (g.nthreads_started == 0) {
        sem_init(&g.runner_done, 0, 0);
        atexit(stop_runners);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kThreadStack);  // the kernels run on the fibers' stacks
    for (unsigned k = g.nthreads_started; k < n; k++) {
        Runner *r = g.runners[k];
        sem_init(&r->start, 0, 0);
        int err = pthread_create(&r->thread, &attr, runner_main, r);
        if (err)
            die("pthread_create failed for runner %u of %u: %s", k, n, strerror(err));
        g.nthreads_started = k + 1;
    }
    pthread_attr_destroy(&attr);
}

// The semaphores order the launch after what the host did before it, and
// what the host does next after the launch; nothing else orders the runners.
inline cudaError_t run_blocks() {
    start_runner_threads(g.nrunners);
    g.failed.store(false, std::memory_order_relaxed);
    for (unsigned k = 0; k < g.nrunners; k++)
        sem_post(&g.runners[k]->start);
    for (unsigned k = 0; k < g.nrunners; k++)
        while (sem_wait(&g.runner_done) != 0) {
        }
    return g.failed.load(std::memory_order_relaxed) ? cudaErrorLaunchFailure : cudaSuccess;
}

#endif  // MHE_EMU_BLOCKS

// ---------------------------------------------------------------------------
// 6. Warp collectives, through the exchange buffers
// ---------------------------------------------------------------------------

inline void check_mask(unsigned mask, const char *what) {
    if (mask != 0xffffffffu)
        die("%s with mask 0x%08x: the emulation supports full-warp masks only (0xffffffff)", what, mask);
}

// Posts this lane's slot, waits for the warp, and returns the warp's slots.
// The caller reads them before its next warp barrier.
inline const Slot *warp_exchange(const Slot &mine, const char *what) {
    Lane *me = current(what);
    Slot *slots = me->runner->exchange[me->warp][me->warp_phase & 1];
    slots[me->lane] = mine;
    warp_barrier(what);
    return slots;
}

// For shuffles: each lane posts `var`, then reads lane `src`'s. A lane that
// does not exist (past the end of a partial warp) gives the caller's own
// value, as an out-of-segment source does in CUDA. On a GPU it is undefined.
template <typename T>
inline T shuffle(T var, unsigned src, const char *what) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffles move values of up to 8 bytes");
    Slot mine = {};
    memcpy(mine.w, &var, sizeof(T));
    unsigned lanes = g.warp_lanes[current(what)->warp];
    const Slot *slots = warp_exchange(mine, what);
    if (src >= lanes)
        return var;
    T out;
    memcpy(&out, slots[src].w, sizeof(T));
    return out;
}

inline unsigned check_width(unsigned mask, int width, const char *what) {
    check_mask(mask, what);
    if (width < 1 || width > 32 || (width & (width - 1)))
        die("%s with width %d: the width must be a power of 2 from 1 to 32", what, width);
    return current(what)->lane;
}

inline unsigned ballot(unsigned mask, int pred, const char *what) {
    check_mask(mask, what);
    Slot mine = {};
    mine.w[0] = pred != 0;
    unsigned lanes = g.warp_lanes[current(what)->warp];
    const Slot *slots = warp_exchange(mine, what);
    unsigned bits = 0;
    for (unsigned i = 0; i < lanes; i++)
        bits |= slots[i].w[0] << i;
    return bits;
}

inline unsigned lanes_mask() {
    unsigned lanes = g.warp_lanes[current("__all_sync")->warp];
    return lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
}

// A tf32 operand as the tensor core reads it: the low 13 bits are ignored.
inline float tf32_value(unsigned bits) {
    bool nan = (bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu);
    if (!nan)
        bits &= 0xffffe000u;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// Atomics that no builtin does in one step (float add, min, max): retry a
// compare-and-swap until no other thread got in between. The generic builtin
// compares bits, so a NaN does not loop forever.
template <typename T>
inline T atomic_update(T *addr, T (*op)(T, T), T val) {
    T old;
    __atomic_load(addr, &old, __ATOMIC_SEQ_CST);
    T want = op(old, val);
    while (!__atomic_compare_exchange(addr, &old, &want, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        want = op(old, val);
    return old;
}

template <typename T>
inline T atomic_cas(T *a, T compare, T val) {
    // on failure `compare` receives the current value; on success it was it
    __atomic_compare_exchange_n(a, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;
}

}  // namespace mhe_emu_impl

// ---------------------------------------------------------------------------
// 7. Device functions
// ---------------------------------------------------------------------------

inline void __syncthreads() { mhe_emu_impl::block_barrier(); }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
    mhe_emu_impl::check_mask(mask, "__syncwarp");
    mhe_emu_impl::warp_barrier("__syncwarp");
}

// The emulation's atomics are sequentially consistent, so the data they
// publish is ordered too: a fence adds nothing but a compiler barrier.
inline void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
inline void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }

// Shuffles, as CUDA defines them: with width < 32 the warp is split into
// segments of `width` lanes and lane numbers are relative to the segment.
template <typename T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    unsigned lane = mhe_emu_impl::check_width(mask, width, "__shfl_sync");
    unsigned w = (unsigned)width;
    unsigned src = (lane & ~(w - 1)) + ((unsigned)srcLane & (w - 1));
    return mhe_emu_impl::shuffle(var, src, "__shfl_sync");
}

template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    unsigned lane = mhe_emu_impl::check_width(mask, width, "__shfl_up_sync");
    unsigned in_segment = lane & ((unsigned)width - 1);
    unsigned src = in_segment >= delta ? lane - delta : lane;  // below the segment: own value
    return mhe_emu_impl::shuffle(var, src, "__shfl_up_sync");
}

template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    unsigned lane = mhe_emu_impl::check_width(mask, width, "__shfl_down_sync");
    unsigned in_segment = lane & ((unsigned)width - 1);
    unsigned src = delta < (unsigned)width - in_segment ? lane + delta : lane;  // past it: own value
    return mhe_emu_impl::shuffle(var, src, "__shfl_down_sync");
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    unsigned lane = mhe_emu_impl::check_width(mask, width, "__shfl_xor_sync");
    unsigned src = lane ^ ((unsigned)laneMask & 31);
    // Earlier segments may be read, later ones give the caller's own value.
    if (src > (lane | ((unsigned)width - 1)))
        src = lane;
    return mhe_emu_impl::shuffle(var, src, "__shfl_xor_sync");
}

inline unsigned __ballot_sync(unsigned mask, int pred) { return mhe_emu_impl::ballot(mask, pred, "__ballot_sync"); }
inline int __any_sync(unsigned mask, int pred) { return mhe_emu_impl::ballot(mask, pred, "__any_sync") != 0; }
inline int __all_sync(unsigned mask, int pred) {
    return mhe_emu_impl::ballot(mask, pred, "__all_sync") == mhe_emu_impl::lanes_mask();
}

// Atomics: GCC/Clang __atomic builtins, which ThreadSanitizer knows. Each
// returns the old value, as in CUDA.
inline int atomicAdd(int *a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned *a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
inline float atomicAdd(float *a, float v) {
    return mhe_emu_impl::atomic_update<float>(a, [](float x, float y) { return x + y; }, v);
}
inline double atomicAdd(double *a, double v) {
    return mhe_emu_impl::atomic_update<double>(a, [](double x, double y) { return x + y; }, v);
}
inline int atomicMax(int *a, int v) {
    return mhe_emu_impl::atomic_update<int>(a, [](int x, int y) { return x > y ? x : y; }, v);
}
inline unsigned atomicMax(unsigned *a, unsigned v) {
    return mhe_emu_impl::atomic_update<unsigned>(a, [](unsigned x, unsigned y) { return x > y ? x : y; }, v);
}
inline int atomicMin(int *a, int v) {
    return mhe_emu_impl::atomic_update<int>(a, [](int x, int y) { return x < y ? x : y; }, v);
}
inline unsigned atomicMin(unsigned *a, unsigned v) {
    return mhe_emu_impl::atomic_update<unsigned>(a, [](unsigned x, unsigned y) { return x < y ? x : y; }, v);
}
inline int atomicExch(int *a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned *a, unsigned v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline float atomicExch(float *a, float v) {
    float old;
    __atomic_exchange(a, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
inline int atomicCAS(int *a, int compare, int val) { return mhe_emu_impl::atomic_cas(a, compare, val); }
inline unsigned atomicCAS(unsigned *a, unsigned compare, unsigned val) {
    return mhe_emu_impl::atomic_cas(a, compare, val);
}
inline unsigned long long atomicCAS(unsigned long long *a, unsigned long long compare, unsigned long long val) {
    return mhe_emu_impl::atomic_cas(a, compare, val);
}

// Math intrinsics: the exact functions stand in for the fast approximations.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// CUDA's sincospi (sin and cos of pi x, without a large-argument reduction): pi x in double
inline void sincospi(double x, double *s, double *c) {
    *s = sin(3.14159265358979323846 * x);
    *c = cos(3.14159265358979323846 * x);
}
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline unsigned __float_as_uint(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
inline float __uint_as_float(unsigned u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}
inline int __float_as_int(float x) {
    int i;
    memcpy(&i, &x, 4);
    return i;
}
inline float __int_as_float(int i) {
    float x;
    memcpy(&x, &i, 4);
    return x;
}
template <typename T>
inline T __ldg(const T *p) {
    return *p;
}

// cvt.rna.tf32.f32: round to tf32 (10 explicit mantissa bits) to nearest,
// ties away from zero; the 32-bit pattern with its low 13 bits zero.
inline unsigned mhe_emu_cvt_rna_tf32(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) {  // Inf or NaN
        if ((u & 0x007fffffu) == 0)
            return u;                        // Inf stays Inf
        return (u & 0xffffe000u) | 0x00400000u;  // NaN stays (a quiet) NaN
    }
    // Sign and magnitude are separate bits, so adding half a tf32 ulp to the
    // pattern rounds the magnitude half-up: ties away from zero. A carry out
    // of the mantissa moves into the exponent, which is the right answer
    // (and gives Inf past the largest tf32).
    return (u + 0x1000u) & 0xffffe000u;
}

namespace mhe_emu_impl {
// An mma for the warp: every lane posts its fragments (a[4], b[2], c[4]) and
// gets all 32 lanes' (the whole of A, B and C are rebuilt from them).
inline const Slot *mma_exchange(const unsigned a[4], const unsigned b[2], const float c[4], const char *what,
                                Lane **me) {
    *me = current(what);
    if (g.warp_lanes[(*me)->warp] != 32)
        die("%s needs a whole warp, but warp %u has %u threads", what, (*me)->warp, g.warp_lanes[(*me)->warp]);
    Slot mine = {};
    memcpy(&mine.w[0], a, 4 * sizeof(unsigned));
    memcpy(&mine.w[4], b, 2 * sizeof(unsigned));
    memcpy(&mine.w[6], c, 4 * sizeof(float));  // before d is written: d may be c
    return warp_exchange(mine, what);
}

// C from the slots (c0, c1 at (groupID, 2 tig and 2 tig+1), c2, c3 eight rows
// down), then this lane's four elements of D = A*B + C in float, k in order
// (the products of TF32 or bf16 values are exact in float)
template <unsigned KD>
inline void mma_finish(float d[4], const float (*A)[KD], const float (*B)[8], const Slot *s, const Lane *me) {
    float C[16][8];
    for (unsigned l = 0; l < 32; l++) {
        unsigned grp = l >> 2, tig = l % 4;
        for (unsigned i = 0; i < 4; i++)
            C[grp + (i >= 2 ? 8 : 0)][2 * tig + (i & 1)] = __uint_as_float(s[l].w[6 + i]);
    }
    unsigned grp = me->lane >> 2, tig = me->lane % 4;
    for (unsigned i = 0; i < 4; i++) {
        unsigned row = grp + (i >= 2 ? 8 : 0), col = 2 * tig + (i & 1);
        float sum = 0.0f;
        for (unsigned k = 0; k < KD; k++)
            sum += A[row][k] * B[k][col];
        d[i] = sum + C[row][col];
    }
}
}  // namespace mhe_emu_impl

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, D = A*B + C, for the
// warp. Fragment layout from the PTX ISA, section "Matrix Fragments for
// mma.m16n8k8" (9.7.14.5.7 in PTX ISA 8.x; anchor
// #warp-level-matrix-fragment-mma-1688), .tf32 tables, with
// groupID = lane >> 2 and tig = lane % 4 (threadID_in_group):
//   A (16x8, row-major): a0 (groupID, tig)   a1 (groupID+8, tig)
//                        a2 (groupID, tig+4) a3 (groupID+8, tig+4)
//   B (8x8, [k][n]):     b0 (k = tig, n = groupID)  b1 (k = tig+4, n = groupID)
//   C, D (16x8):         c0, c1 (groupID, 2*tig and 2*tig+1)
//                        c2, c3 (groupID+8, 2*tig and 2*tig+1)
inline void mhe_emu_mma_m16n8k8_tf32(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    using namespace mhe_emu_impl;
    Lane *me;
    const Slot *s = mma_exchange(a, b, c, "mhe_emu_mma_m16n8k8_tf32", &me);
    float A[16][8], B[8][8];
    for (unsigned l = 0; l < 32; l++) {
        unsigned grp = l >> 2, tig = l % 4;
        const unsigned *w = s[l].w;
        A[grp][tig] = tf32_value(w[0]);
        A[grp + 8][tig] = tf32_value(w[1]);
        A[grp][tig + 4] = tf32_value(w[2]);
        A[grp + 8][tig + 4] = tf32_value(w[3]);
        B[tig][grp] = tf32_value(w[4]);
        B[tig + 4][grp] = tf32_value(w[5]);
    }
    mma_finish<8>(d, A, B, s, me);
}

// cvt.rn.bf16x2.f32 d, hi, lo: both rounded to bf16 (8 mantissa bits) to
// nearest, ties to even, hi in the upper 16 bits of d and lo in the lower
// (PTX ISA, cvt: "a is stored in the upper half of d"). Past the largest
// bf16 a value rounds to Inf; a NaN becomes the canonical 0x7fff.
inline unsigned mhe_emu_bf16_rn(float x) {
    unsigned u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
        return 0x7fffu;
    // half a bf16 ulp less one, plus the last kept bit: ties go to even
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
inline unsigned mhe_emu_cvt_rn_bf16x2(float hi, float lo) { return mhe_emu_bf16_rn(hi) << 16 | mhe_emu_bf16_rn(lo); }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, D = A*B + C, for the
// warp. Fragment layout from the PTX ISA, section "Matrix Fragments for
// mma.m16n8k16 with floating point type" (.bf16 tables), groupID = lane >> 2,
// tig = lane % 4; each register holds two bf16, the lower column (A) or row
// (B) in its lower 16 bits:
//   A (16x16, row-major): a0 (groupID, 2 tig and 2 tig+1)
//                         a1 (groupID+8, 2 tig and 2 tig+1)
//                         a2 (groupID, 2 tig+8 and 2 tig+9)
//                         a3 (groupID+8, 2 tig+8 and 2 tig+9)
//   B (16x8, [k][n]):     b0 (k = 2 tig and 2 tig+1, n = groupID)
//                         b1 (k = 2 tig+8 and 2 tig+9, n = groupID)
//   C, D (16x8): as mma.m16n8k8 above.
inline void mhe_emu_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
    using namespace mhe_emu_impl;
    Lane *me;
    const Slot *s = mma_exchange(a, b, c, "mhe_emu_mma_m16n8k16_bf16", &me);
    auto lo = [](unsigned w) { return __uint_as_float(w << 16); };
    auto hi = [](unsigned w) { return __uint_as_float(w & 0xffff0000u); };
    float A[16][16], B[16][8];
    for (unsigned l = 0; l < 32; l++) {
        unsigned grp = l >> 2, tig = l % 4;
        const unsigned *w = s[l].w;
        for (unsigned h = 0; h < 2; h++) {  // h 1: the columns (rows of B) 8 further on
            A[grp][2 * tig + 8 * h] = lo(w[2 * h]);
            A[grp][2 * tig + 8 * h + 1] = hi(w[2 * h]);
            A[grp + 8][2 * tig + 8 * h] = lo(w[2 * h + 1]);
            A[grp + 8][2 * tig + 8 * h + 1] = hi(w[2 * h + 1]);
            B[2 * tig + 8 * h][grp] = lo(w[4 + h]);
            B[2 * tig + 8 * h + 1][grp] = hi(w[4 + h]);
        }
    }
    mma_finish<16>(d, A, B, s, me);
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}.shared.b16 (PTX ISA, "Warp-level matrix
// load instruction: ldmatrix"), without .trans: the warp loads NUM matrices
// of 8 x 8 16-bit elements from shared memory. Lanes 8i .. 8i + 7 give the
// addresses of matrix i's eight rows (16 bytes each, 16-byte aligned; the
// other lanes' addresses are not read); lane l gets, of matrix i, the 32-bit
// word l % 4 of row l / 4 in d[i] (the row's elements 2 (l % 4) and
// 2 (l % 4) + 1, the first in the lower half). On 32-bit data (TF32), the
// word is one element: lane l gets element (l / 4, l % 4) of an 8 x 4 block.
namespace mhe_emu_impl {
template <unsigned NUM>
inline void ldmatrix(unsigned d[NUM], const void *row, const char *what) {
    Lane *me = current(what);
    if (g.warp_lanes[me->warp] != 32)
        die("%s needs a whole warp, but warp %u has %u threads", what, me->warp, g.warp_lanes[me->warp]);
    if (me->lane < 8 * NUM && (uintptr_t)row % 16)
        die("%s: lane %u's row address %p is not 16-byte aligned", what, me->lane, row);
    Slot mine = {};
    memcpy(mine.w, &row, sizeof row);
    const Slot *s = warp_exchange(mine, what);
    for (unsigned i = 0; i < NUM; i++) {
        const unsigned char *p;
        memcpy(&p, s[8 * i + me->lane / 4].w, sizeof p);
        memcpy(&d[i], p + 4 * (me->lane % 4), 4);
    }
}
}  // namespace mhe_emu_impl
inline void mhe_emu_ldmatrix_x1(unsigned d[1], const void *row) { mhe_emu_impl::ldmatrix<1>(d, row, "ldmatrix.x1"); }
inline void mhe_emu_ldmatrix_x2(unsigned d[2], const void *row) { mhe_emu_impl::ldmatrix<2>(d, row, "ldmatrix.x2"); }
inline void mhe_emu_ldmatrix_x4(unsigned d[4], const void *row) { mhe_emu_impl::ldmatrix<4>(d, row, "ldmatrix.x4"); }

// cp.async.cg.shared.global [dst], [src], 16, src_bytes (PTX ISA, "cp.async"):
// copies src_bytes (0 to 16) from global to shared memory and fills the rest
// of the 16 bytes with zeros, both addresses 16-byte aligned (src is not read
// when src_bytes is 0). Asynchronously: here the bytes are read at issue and
// land only when the thread waits for their group, so a kernel that reads
// the buffer before waiting (and its barrier) reads the old bytes, which a
// GPU may too. cp.async.commit_group closes this thread's copies so far into
// a group; cp.async.wait_group n returns once at most the n most recent
// groups are pending, the older ones landed (wait_group 0: all). A thread
// may end only with every copy landed.
inline void mhe_emu_cp_async_16(void *dst, const void *src, unsigned src_bytes) {
    using namespace mhe_emu_impl;
    Lane *me = current("cp.async");
    if (src_bytes > 16)
        die("cp.async of 16 bytes with src-size %u: at most 16", src_bytes);
    if ((uintptr_t)dst % 16 || (src_bytes && (uintptr_t)src % 16))
        die("cp.async: addresses dst %p, src %p must be 16-byte aligned", dst, src);
    if (me->ncopies == kMaxCopies)
        die("more than %u cp.async copies in flight in one thread (the emulation's limit): wait for some", kMaxCopies);
    Lane::Copy &c = me->copies[me->ncopies++];
    c.dst = (unsigned char *)dst;
    memset(c.bytes, 0, 16);
    if (src_bytes)
        memcpy(c.bytes, src, src_bytes);
    c.group = me->groups;
}
inline void mhe_emu_cp_async_commit(void) { mhe_emu_impl::current("cp.async.commit_group")->groups++; }
inline void mhe_emu_cp_async_wait(unsigned n) {
    mhe_emu_impl::Lane *me = mhe_emu_impl::current("cp.async.wait_group");
    unsigned keep = 0;
    for (unsigned i = 0; i < me->ncopies; i++) {  // in the order issued
        mhe_emu_impl::Lane::Copy &c = me->copies[i];
        if (c.group + n < me->groups)
            memcpy(c.dst, c.bytes, 16);
        else
            me->copies[keep++] = c;
    }
    me->ncopies = keep;
}

// The launch's dynamic shared memory: exactly the bytes asked for (so that
// AddressSanitizer sees an overrun), filled with 0xff bytes at the launch
// (NaN as floats) because CUDA does not clear shared memory either.
inline void *mhe_emu_dyn_shared(void) { return mhe_emu_impl::current("mhe_emu_dyn_shared")->runner->dyn_smem; }

// ---------------------------------------------------------------------------
// 8. Launch
// ---------------------------------------------------------------------------
namespace mhe_emu_impl {

inline size_t smem_limit(const void *kernel) {
    auto it = g.smem_limits.find(kernel);
    return it == g.smem_limits.end() ? kDefaultSmem : (size_t)it->second;
}

// The checks a GPU makes before it runs anything.
inline cudaError_t check_launch(const cudaLaunchConfig_t *cfg, const void *kernel) {
    if (cudaError_t e = no_device())
        return e;
    if (g.no_kernel_image)
        return fail(cudaErrorNoKernelImageForDevice);
    if (!kernel)
        return fail(cudaErrorInvalidDeviceFunction);
    if (!cfg)
        return fail(cudaErrorInvalidValue);
    dim3 bd = cfg->blockDim, gd = cfg->gridDim;
    if (bd.x == 0 || bd.y == 0 || bd.z == 0 || bd.x > 1024 || bd.y > 1024 || bd.z > 64 ||
        (unsigned long long)bd.x * bd.y * bd.z > kMaxThreads)
        return fail(cudaErrorInvalidConfiguration);
    if (gd.x == 0 || gd.y == 0 || gd.z == 0 || gd.x > 0x7fffffffu || gd.y > 65535 || gd.z > 65535)
        return fail(cudaErrorInvalidConfiguration);
    if (cfg->dynamicSmemBytes > smem_limit(kernel))
        return fail(kSmemTooBig);
    return cudaSuccess;
}

// Runner k, made on first use.
inline Runner *runner(unsigned k) {
    Runner *&r = g.runners[k];
    if (!r) {
        r = new Runner();
        r->index = k;
        r->lanes = new Lane[kMaxThreads]();
        for (unsigned i = 0; i < kMaxThreads; i++)
            r->lanes[i].runner = r;
    }
    return r;
}

// How many runners this launch uses: one, but in the blocks mode one per
// runner thread (MHE_EMU_BLOCK_THREADS, default 4) up to one per block.
inline unsigned runner_count() {
#ifdef MHE_EMU_BLOCKS
    if (g.nrunners_wanted < 0) {
        const char *env = getenv("MHE_EMU_BLOCK_THREADS");
        g.nrunners_wanted = env ? atoi(env) : (int)kDefaultRunners;
    }
    size_t n = g.nrunners_wanted < 1 ? 1 : g.nrunners_wanted > (int)kMaxRunners ? kMaxRunners : g.nrunners_wanted;
#ifdef MHE_EMU_TSAN
    // up to 32 TSan threads (warps) each: more, and TSan would miss races
    if (n > kMaxTsanRunners)
        die("%zu runner threads: at most %u under ThreadSanitizer, which follows about 250 threads at once", n,
            kMaxTsanRunners);
#endif
    return (unsigned)(n < g.nblocks ? n : g.nblocks);
#else
    return 1;
#endif
}

#ifndef MHE_EMU_THREADS
// splitmix64's output function: a well-mixed 64-bit value from a counter.
inline uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// This launch's orders: threads within a block, and the blocks, first to
// last or last to first (MHE_EMU_ORDER=reverse); with a seed (MHE_EMU_SEED,
// not 0) the blocks in a shuffled order instead, another one each launch
// and the same ones again for the same seed.
inline void choose_order() {
    if (g.order < 0) {
        const char *env = getenv("MHE_EMU_ORDER");
        g.order = env && strcmp(env, "reverse") == 0;
    }
    if (g.seed < 0) {
        const char *env = getenv("MHE_EMU_SEED");
        g.seed = env ? strtol(env, nullptr, 10) : 0;
        g.seed = g.seed < 0 ? 0 : g.seed;
    }
    g.reverse = g.order == 1;
    g.shuffled.clear();
    if (g.seed == 0)
        return;
    g.shuffled.resize(g.nblocks);
    for (size_t i = 0; i < g.nblocks; i++)
        g.shuffled[i] = i;
    uint64_t state = (uint64_t)g.seed << 32 ^ (uint64_t)g.launches;
    for (size_t i = g.nblocks - 1; i > 0; i--) {  // Fisher-Yates
        state = mix64(state);
        std::swap(g.shuffled[i], g.shuffled[state % (i + 1)]);
    }
}
#endif

inline cudaError_t launch(const cudaLaunchConfig_t &cfg, const void *kernel, void (*run)(void *), void *data) {
    if (self)
        die("a kernel launch from inside a kernel is not supported");
    g.launches++;
    g.run = run;
    g.run_data = data;
    g.kernel = kernel;
    blockDim = cfg.blockDim;
    gridDim = cfg.gridDim;
    g.nthreads = blockDim.x * blockDim.y * blockDim.z;
    g.nwarps = (g.nthreads + 31) / 32;
    for (unsigned w = 0; w < g.nwarps; w++)
        g.warp_lanes[w] = g.nthreads - w * 32 < 32 ? g.nthreads - w * 32 : 32;
    g.nblocks = (size_t)gridDim.x * gridDim.y * gridDim.z;
    g.nrunners = runner_count();
    for (unsigned k = 0; k < g.nrunners; k++) {
        Runner *r = runner(k);
        for (unsigned i = 0; i < g.nthreads; i++) {
            Lane *l = &r->lanes[i];
            l->tid = i;
            l->idx = uint3{i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
            l->warp = i / 32;
            l->lane = i % 32;
        }
        r->dyn_smem = malloc(cfg.dynamicSmemBytes);
        if (!r->dyn_smem)
            die("cannot allocate %zu bytes of dynamic shared memory", cfg.dynamicSmemBytes);
        memset(r->dyn_smem, 0xff, cfg.dynamicSmemBytes);
    }
#ifndef MHE_EMU_THREADS
    choose_order();
#endif

    cudaError_t err = run_blocks();

    for (unsigned k = 0; k < g.nrunners; k++) {
        free(g.runners[k]->dyn_smem);
        g.runners[k]->dyn_smem = nullptr;
    }
    g.run = nullptr;
    g.run_data = nullptr;
    return err ? fail(err) : cudaSuccess;
}

// The kernel and a copy of its arguments, converted to its parameter types.
template <typename... Exp>
struct KernelCall {
    void (*kernel)(Exp...);
    std::tuple<std::decay_t<Exp>...> args;
    // Every emulated thread calls the kernel on these copies (by value, as
    // CUDA passes kernel arguments, so a thread may change its own).
    static void run(void *p) {
        KernelCall *call = static_cast<KernelCall *>(p);
        std::apply(call->kernel, call->args);
    }
    // A graph's kernel node knows the kernel by address and its arguments by
    // the addresses of their values (cudaKernelNodeParams), as a GPU does.
    static void *make(const void *kernel, void *const *params) {
        return make_from(kernel, params, std::index_sequence_for<Exp...>{});
    }
    template <size_t... I>
    static void *make_from(const void *kernel, void *const *params, std::index_sequence<I...>) {
        return new KernelCall{reinterpret_cast<void (*)(Exp...)>(const_cast<void *>(kernel)),
                              std::tuple<std::decay_t<Exp>...>(*static_cast<std::decay_t<Exp> *>(params[I])...)};
    }
    static void *clone(const void *p) { return new KernelCall(*static_cast<const KernelCall *>(p)); }
    static void destroy(void *p) { delete static_cast<KernelCall *>(p); }
};

// How to call a kernel known only by its address, learnt from its first
// cudaLaunchKernelEx (the one place its parameter types are seen): a graph
// node of a kernel never launched directly is refused (cudaErrorInvalidDeviceFunction).
struct KernelThunk {
    void *(*make)(const void *kernel, void *const *params);  // a call with copies of the arguments
    void *(*clone)(const void *call);
    void (*run)(void *call);
    void (*destroy)(void *call);
};
inline std::map<const void *, KernelThunk> thunks;

}  // namespace mhe_emu_impl

template <typename... Exp, typename... Act>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*kernel)(Exp...), Act &&...args) {
    static_assert(sizeof...(Exp) == sizeof...(Act),
                  "cudaLaunchKernelEx: the kernel takes a different number of arguments");
    const void *key = reinterpret_cast<const void *>(kernel);
    if (cudaError_t e = mhe_emu_impl::check_launch(cfg, key))
        return e;
    using Call = mhe_emu_impl::KernelCall<Exp...>;
    mhe_emu_impl::thunks.emplace(key, mhe_emu_impl::KernelThunk{&Call::make, &Call::clone, &Call::run, &Call::destroy});
    Call call{kernel, std::tuple<std::decay_t<Exp>...>(std::forward<Act>(args)...)};
    return mhe_emu_impl::launch(*cfg, key, &Call::run, &call);
}

// ---------------------------------------------------------------------------
// 9. Runtime API (host memory stands in for device memory)
// ---------------------------------------------------------------------------
namespace mhe_emu_impl {

// Is [p, p + n) inside one live cudaMalloc allocation?
inline bool device_range(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    auto it = g.allocations.upper_bound(a);
    if (it == g.allocations.begin())
        return false;
    --it;
    return a - it->first <= it->second && n <= it->second - (a - it->first);
}

}  // namespace mhe_emu_impl

inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = mhe_emu_impl::g.last_error;
    mhe_emu_impl::g.last_error = cudaSuccess;
    return e;
}

inline cudaError_t cudaPeekAtLastError(void) { return mhe_emu_impl::g.last_error; }

inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "unrecognized error code";
}

inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unrecognized error code";
}

inline cudaError_t cudaGetDeviceCount(int *count) {
    using mhe_emu_impl::g;
    if (!count)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *count = g.device_count > 0 ? g.device_count : 0;
    return mhe_emu_impl::no_device();
}

inline cudaError_t cudaSetDevice(int device) {
    using mhe_emu_impl::g;
    if (cudaError_t e = mhe_emu_impl::no_device())
        return e;
    if (device < 0 || device >= g.device_count)
        return mhe_emu_impl::fail(cudaErrorInvalidDevice);
    g.device = device;
    return cudaSuccess;
}

inline cudaError_t cudaGetDevice(int *device) {
    if (cudaError_t e = mhe_emu_impl::no_device())
        return e;
    if (!device)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *device = mhe_emu_impl::g.device;
    return cudaSuccess;
}

// An sm_90 (H100-like) device, but with 8 multiprocessors so that grids
// sized from the SM count stay small on a CPU.
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (!prop)
        return fail(cudaErrorInvalidValue);
    if (device < 0 || device >= g.device_count)
        return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "mhe CPU emulation");
    prop->major = 9;
    prop->minor = 0;
    prop->totalGlobalMem = g.mem_limit ? g.mem_limit : kDefaultMem;
    prop->sharedMemPerBlock = kDefaultSmem;
    prop->sharedMemPerBlockOptin = kOptinSmem;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->totalConstMem = 64 * 1024;
    prop->multiProcessorCount = 8;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->warpSize = 32;
    prop->regsPerBlock = 65536;
    prop->clockRate = 1980000;
    prop->memoryClockRate = 2619000;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 * 1024 * 1024;
    return cudaSuccess;
}

inline cudaError_t cudaDeviceSynchronize(void) { return mhe_emu_impl::no_device(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return mhe_emu_impl::no_device(); }

inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    if (cudaError_t e = mhe_emu_impl::no_device())
        return e;
    if (!stream)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *stream = new CUstream_st();
    return cudaSuccess;
}

inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete stream;
    return cudaSuccess;
}

inline cudaError_t cudaMalloc(void **ptr, size_t size) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (size == 0)
        return cudaSuccess;
    if (g.mem_limit && (g.live_bytes > g.mem_limit || size > g.mem_limit - g.live_bytes))
        return fail(cudaErrorMemoryAllocation);
    void *p = nullptr;
    if (posix_memalign(&p, 256, size) != 0)  // cudaMalloc's alignment; size exact for ASan
        return fail(cudaErrorMemoryAllocation);
    g.allocations[(uintptr_t)p] = size;
    g.live_bytes += size;
    *ptr = p;
    return cudaSuccess;
}

template <typename T>
inline cudaError_t cudaMalloc(T **ptr, size_t size) {
    return cudaMalloc(reinterpret_cast<void **>(ptr), size);
}

inline cudaError_t cudaFree(void *ptr) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (!ptr)
        return cudaSuccess;
    auto it = g.allocations.find((uintptr_t)ptr);
    if (it == g.allocations.end())
        return fail(cudaErrorInvalidValue);
    g.live_bytes -= it->second;
    g.allocations.erase(it);
    free(ptr);
    return cudaSuccess;
}

// Pinned (page-locked) host memory: plain host memory here, where every copy
// is synchronous anyway. Kept apart from device allocations: cudaFree of it
// fails, as on a GPU.
inline cudaError_t cudaMallocHost(void **ptr, size_t size) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    *ptr = malloc(size ? size : 1);
    return *ptr ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
template <typename T>
inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
    return cudaMallocHost(reinterpret_cast<void **>(ptr), size);
}
inline cudaError_t cudaFreeHost(void *ptr) {
    free(ptr);
    return cudaSuccess;
}

inline cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (!free_bytes || !total_bytes)
        return fail(cudaErrorInvalidValue);
    size_t total = g.mem_limit ? g.mem_limit : kDefaultMem;
    *total_bytes = total;
    *free_bytes = g.live_bytes < total ? total - g.live_bytes : 0;
    return cudaSuccess;
}

// The device side(s) of a copy must lie inside live cudaMalloc allocations.
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection);
    if (count == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue);
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dst_dev && !device_range(dst, count)) || (src_dev && !device_range(src, count)))
        return fail(cudaErrorInvalidValue);
    memcpy(dst, src, count);
    return cudaSuccess;
}

inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
    (void)stream;
    return cudaMemcpy(dst, src, count, kind);
}

inline cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (count == 0)
        return cudaSuccess;
    if (!device_range(ptr, count))
        return fail(cudaErrorInvalidValue);
    memset(ptr, value, count);
    return cudaSuccess;
}

inline cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream = nullptr) {
    (void)stream;
    return cudaMemset(ptr, value, count);
}

template <typename F>
inline cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr, int value) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : fail(cudaErrorInvalidValue);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > kOptinSmem)
        return fail(cudaErrorInvalidValue);
    g.smem_limits[reinterpret_cast<const void *>(func)] = value;
    return cudaSuccess;
}

template <typename F>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, F *func) {
    using namespace mhe_emu_impl;
    if (cudaError_t e = no_device())
        return e;
    if (g.no_kernel_image)
        return fail(cudaErrorNoKernelImageForDevice);
    if (!attr)
        return fail(cudaErrorInvalidValue);
    if (!func)
        return fail(cudaErrorInvalidDeviceFunction);
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = 1024;
    attr->numRegs = 32;       // made up: the emulation has no registers
    attr->ptxVersion = 90;
    attr->binaryVersion = 90;
    attr->maxDynamicSharedSizeBytes = (int)smem_limit(reinterpret_cast<const void *>(func));
    return cudaSuccess;
}

// Events measure wall-clock time; the emulation is synchronous, so recording
// is reading the clock.
inline cudaError_t cudaEventCreate(cudaEvent_t *ev) {
    if (cudaError_t e = mhe_emu_impl::no_device())
        return e;
    if (!ev)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *ev = new CUevent_st();
    return cudaSuccess;
}

inline cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream = nullptr) {
    (void)stream;
    if (!ev)
        return mhe_emu_impl::fail(cudaErrorInvalidResourceHandle);
    ev->ms = mhe_emu_impl::now_ms();
    ev->recorded = true;
    return cudaSuccess;
}

inline cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    return ev ? cudaSuccess : mhe_emu_impl::fail(cudaErrorInvalidResourceHandle);
}

inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    if (!start || !end)
        return mhe_emu_impl::fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded)
        return mhe_emu_impl::fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

inline cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    delete ev;
    return cudaSuccess;
}

// ---------------------------------------------------------------------------
// 9b. Graphs: nodes added with their dependencies, instantiated, launched
// ---------------------------------------------------------------------------
// A launch runs the nodes one at a time in an order their dependencies
// allow: the earliest added ready node first, or with MHE_EMU_ORDER=reverse
// (mhe_emu_set_order(1)) the latest, so that a node that should depend on an
// earlier one and does not runs before it there, as it may on a GPU.
namespace mhe_emu_impl {

struct GraphNode {
    enum Kind { kKernel, kMemset, kMemcpy } kind;
    std::vector<size_t> deps;                  // indices of earlier nodes
    // kernel
    cudaLaunchConfig_t cfg;
    const void *key = nullptr;
    const KernelThunk *thunk = nullptr;
    void *call = nullptr;                      // owned: thunk->destroy
    // memset
    cudaMemsetParams set;
    // memcpy
    void *dst = nullptr;
    const void *src = nullptr;
    size_t count = 0;
    cudaMemcpyKind copy_kind = cudaMemcpyDefault;

    GraphNode() : kind(kKernel), cfg(), set() {}
    GraphNode(const GraphNode &o) : GraphNode() { *this = o; }
    GraphNode &operator=(const GraphNode &o) {
        if (this == &o)
            return *this;
        release();
        kind = o.kind, deps = o.deps, cfg = o.cfg, key = o.key, thunk = o.thunk, set = o.set;
        dst = o.dst, src = o.src, count = o.count, copy_kind = o.copy_kind;
        call = o.call ? o.thunk->clone(o.call) : nullptr;
        return *this;
    }
    ~GraphNode() { release(); }
    void release() {
        if (call)
            thunk->destroy(call);
        call = nullptr;
    }
};

// A kernel node's launch from its params, checked as cudaGraphAddKernelNode checks them.
inline cudaError_t kernel_node(GraphNode *n, const cudaKernelNodeParams *p) {
    if (!p || p->extra)
        return fail(cudaErrorInvalidValue);
    auto it = thunks.find(p->func);
    if (!p->func || it == thunks.end())  // see KernelThunk
        return fail(cudaErrorInvalidDeviceFunction);
    n->kind = GraphNode::kKernel;
    n->cfg = cudaLaunchConfig_t();
    n->cfg.gridDim = p->gridDim;
    n->cfg.blockDim = p->blockDim;
    n->cfg.dynamicSmemBytes = p->sharedMemBytes;
    n->key = p->func;
    n->thunk = &it->second;
    n->release();
    n->call = it->second.make(p->func, p->kernelParams);
    return cudaSuccess;
}

}  // namespace mhe_emu_impl

struct CUgraphNode_st {
    CUgraph_st *graph;
    size_t index;
};

struct CUgraph_st {
    std::vector<mhe_emu_impl::GraphNode> nodes;
    std::vector<std::unique_ptr<CUgraphNode_st>> handles;
};

struct CUgraphExec_st {
    const CUgraph_st *from;
    std::vector<mhe_emu_impl::GraphNode> nodes;
};

namespace mhe_emu_impl {

// a new node's dependencies: nodes of this graph
inline cudaError_t add_node(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
                            GraphNode &&node) {
    if (!out || !graph || (ndeps && !deps))
        return fail(cudaErrorInvalidValue);
    for (size_t i = 0; i < ndeps; i++) {
        if (!deps[i] || deps[i]->graph != graph)
            return fail(cudaErrorInvalidValue);
        node.deps.push_back(deps[i]->index);
    }
    graph->nodes.push_back(std::move(node));
    graph->handles.push_back(std::unique_ptr<CUgraphNode_st>(new CUgraphNode_st{graph, graph->nodes.size() - 1}));
    *out = graph->handles.back().get();
    return cudaSuccess;
}

inline cudaError_t run_node(const GraphNode &n);

}  // namespace mhe_emu_impl

inline cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned int flags) {
    if (cudaError_t e = mhe_emu_impl::no_device())
        return e;
    if (!graph || flags)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *graph = new CUgraph_st();
    return cudaSuccess;
}

inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

inline cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const cudaKernelNodeParams *params) {
    using namespace mhe_emu_impl;
    GraphNode n;
    if (cudaError_t e = kernel_node(&n, params))
        return e;
    return add_node(node, graph, deps, ndeps, std::move(n));
}

inline cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                          size_t ndeps, const cudaMemsetParams *params) {
    using namespace mhe_emu_impl;
    if (!params || (params->elementSize != 1 && params->elementSize != 2 && params->elementSize != 4) ||
        params->height < 1 || (params->height > 1 && params->pitch < params->width * params->elementSize))
        return fail(cudaErrorInvalidValue);
    GraphNode n;
    n.kind = GraphNode::kMemset;
    n.set = *params;
    return add_node(node, graph, deps, ndeps, std::move(n));
}

inline cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *node, cudaGraph_t graph, const cudaGraphNode_t *deps,
                                            size_t ndeps, void *dst, const void *src, size_t count,
                                            cudaMemcpyKind kind) {
    using namespace mhe_emu_impl;
    GraphNode n;
    n.kind = GraphNode::kMemcpy;
    n.dst = dst;
    n.src = src;
    n.count = count;
    n.copy_kind = kind;
    return add_node(node, graph, deps, ndeps, std::move(n));
}

inline cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                 unsigned long long flags = 0) {
    if (!exec || !graph || flags)
        return mhe_emu_impl::fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph, graph->nodes};
    return cudaSuccess;
}

inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

// a kernel node of the graph exec was made from gets new arguments (and
// launch shape): the next launches use them; the graph keeps its own
inline cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                    const cudaKernelNodeParams *params) {
    using namespace mhe_emu_impl;
    if (!exec || !node || node->graph != exec->from || node->index >= exec->nodes.size())
        return fail(cudaErrorInvalidValue);
    GraphNode &n = exec->nodes[node->index];
    if (n.kind != GraphNode::kKernel)
        return fail(cudaErrorInvalidValue);
    return kernel_node(&n, params);
}

inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    using namespace mhe_emu_impl;
    (void)stream;
    if (cudaError_t e = no_device())
        return e;
    if (!exec)
        return fail(cudaErrorInvalidValue);
    if (g.order < 0) {
        const char *env = getenv("MHE_EMU_ORDER");
        g.order = env && strcmp(env, "reverse") == 0;
    }
    size_t n = exec->nodes.size();
    std::vector<size_t> waiting(n);       // dependencies not yet run
    std::vector<std::vector<size_t>> next(n);
    std::vector<bool> ready(n, false), done(n, false);
    for (size_t i = 0; i < n; i++) {
        waiting[i] = exec->nodes[i].deps.size();
        for (size_t d : exec->nodes[i].deps)
            next[d].push_back(i);
        ready[i] = waiting[i] == 0;
    }
    for (size_t ran = 0; ran < n; ran++) {
        size_t pick = n;
        for (size_t k = 0; k < n; k++) {
            size_t i = g.order == 1 ? n - 1 - k : k;
            if (ready[i] && !done[i]) {
                pick = i;
                break;
            }
        }
        done[pick] = true;  // dependencies only point back: some node is always ready
        if (cudaError_t e = run_node(exec->nodes[pick]))
            return e;
        for (size_t j : next[pick])
            ready[j] = --waiting[j] == 0;
    }
    return cudaSuccess;
}

inline cudaError_t mhe_emu_impl::run_node(const GraphNode &n) {
    switch (n.kind) {
    case GraphNode::kKernel:
        if (cudaError_t e = check_launch(&n.cfg, n.key))
            return e;
        return launch(n.cfg, n.key, n.thunk->run, n.call);
    case GraphNode::kMemset:
        if (!device_range(n.set.dst, n.set.height > 1 ? n.set.pitch * (n.set.height - 1) +
                                                            n.set.width * n.set.elementSize
                                                      : n.set.width * n.set.elementSize))
            return fail(cudaErrorInvalidValue);
        for (size_t r = 0; r < n.set.height; r++)
            for (size_t i = 0; i < n.set.width; i++) {
                unsigned char *p = (unsigned char *)n.set.dst + r * n.set.pitch + i * n.set.elementSize;
                memcpy(p, &n.set.value, n.set.elementSize);  // the value's low bytes (little-endian hosts)
            }
        return cudaSuccess;
    case GraphNode::kMemcpy:
        return cudaMemcpy(n.dst, n.src, n.count, n.copy_kind);
    }
    return fail(cudaErrorInvalidValue);
}

// ---------------------------------------------------------------------------
// 10. Test hooks (emulation only)
// ---------------------------------------------------------------------------

// Fiber and blocks modes: run the threads of a block (between barriers) and
// the blocks of a grid last to first (1) or first to last (0). Without a
// call, MHE_EMU_ORDER=reverse picks reverse.
inline void mhe_emu_set_order(int reverse) { mhe_emu_impl::g.order = reverse ? 1 : 0; }

// Fiber and blocks modes: not 0, run the blocks of each launch in an order
// shuffled from this seed and the launch's number; 0, in mhe_emu_set_order's.
// Without a call, MHE_EMU_SEED (a decimal number) sets it.
inline void mhe_emu_set_seed(long seed) { mhe_emu_impl::g.seed = seed > 0 ? seed : 0; }

// Blocks mode: how many runner threads run blocks at once (1 to 64, 7 under
// TSan; a launch uses no more than it has blocks). Without a call,
// MHE_EMU_BLOCK_THREADS, or 4.
inline void mhe_emu_set_block_threads(int n) { mhe_emu_impl::g.nrunners_wanted = n; }

// 0: no device; cudaGetDeviceCount and every device call fail with cudaErrorNoDevice
// (MHE_EMU_DEVICES=N sets the count the program starts with).
inline void mhe_emu_set_device_count(int count) {
    using mhe_emu_impl::g;
    g.device_count = count > 0 ? count : 0;
    if (g.device >= g.device_count)
        g.device = 0;
}

// cudaMalloc fails (cudaErrorMemoryAllocation) once the live allocations
// would exceed `bytes`; 0 removes the limit. The default is 16 GiB, which
// cudaMemGetInfo and totalGlobalMem report.
inline void mhe_emu_set_mem_limit(size_t bytes) { mhe_emu_impl::g.mem_limit = bytes; }

// 1: every launch and cudaFuncGetAttributes fail with cudaErrorNoKernelImageForDevice.
inline void mhe_emu_set_no_kernel_image(int on) { mhe_emu_impl::g.no_kernel_image = on != 0; }

// Kernel launches that passed the checks and ran, since the program started.
inline long mhe_emu_launches(void) { return mhe_emu_impl::g.launches; }

// The kernels' test-only broken variants (mhe_cuda.cuh's MHE_CUDA_FAULT, 0 in
// every real build) chosen when the program starts, from the environment
// (MHE_CUDA_FAULT=N), so each emulation binary runs them all: one build per
// mode instead of one per variant. A -DMHE_CUDA_FAULT=N build still works.
#ifndef MHE_CUDA_FAULT
inline const int mhe_emu_fault = getenv("MHE_CUDA_FAULT") ? atoi(getenv("MHE_CUDA_FAULT")) : 0;
#define MHE_CUDA_FAULT mhe_emu_fault
#endif

#endif  // MHE_CUDA_EMU_H
