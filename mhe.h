/* mhe.h - v0.1 - parameter-efficient transformers in one C header (MIT licence, see end of file)

   Build, train and run small transformers with the attention variants of the
   multi-head-embedding (MHE) family, with nothing but libc and libm.

   USAGE
     Do this:
        #define MHE_IMPLEMENTATION
     before you include this file in *one* C or C++ file to create the
     implementation. Every other file includes "mhe.h" without the define.

   A FIFTEEN-LINE PROGRAM (train a byte-level GPT on a text buffer)
        mhe_config cfg = mhe_config_default();          // d_model 128, 4 heads, ...
        mhe_model m;
        if (mhe_model_init(&m, &cfg, 42, NULL) != MHE_OK) puts(m.err);
        mhe_train_config tc = mhe_train_config_default();
        mhe_trainer tr;
        mhe_trainer_init(&tr, &m, &tc);
        for (int s = 0; s < tc.steps; s++) {
            mhe_trainer_step(&tr, text, text_len);        // sample a batch, fwd, bwd, AdamW
            printf("step %d loss %.3f\n", s, tr.last_loss);
        }
        mhe_trainer_free(&tr); mhe_model_free(&m);

   OPTIONS (define before including the implementation)
     MHE_STATIC            every function becomes static (private to one file)
     MHE_MALLOC(ctx,n)     \
     MHE_REALLOC(ctx,p,old,n) > allocator hooks, define all three or none; ctx
     MHE_FREE(ctx,p)       /  is the user pointer given to the object (may be NULL)
     MHE_ASSERT(x)         internal invariants only (never user input); default assert()
     MHE_NO_STDIO          drop everything that touches files or prints
     MHE_NO_SIMD           use the portable scalar GEMM micro-kernel only
     MHE_ARENA_DEBUG       arena allocations become separate mallocs so that
                           AddressSanitizer sees every overrun
     Threads: compile with -fopenmp to use OpenMP; without it the pragmas vanish
     and everything runs on one thread.

   CONVENTIONS
     Every function that can fail returns mhe_status; mhe_status_str() names
     the code, and the object involved keeps a detailed message in its `err`
     field. Nothing in the library calls exit() or abort() on user input.
     Shapes are row-major. Legend: B batch, T (or L) sequence length, C = d_m
     model width, n heads, d_h head size, V vocabulary size.
     Gradient buffers *accumulate* (+=); zeroing them is an explicit step.

   VERSION HISTORY
     0.1  core tensors, kernels, GPT decoder with MHA, AdamW, safetensors
*/
#ifndef MHE_H_INCLUDED
#define MHE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef MHE_STATIC
#define MHEDEF static
#else
#ifdef __cplusplus
#define MHEDEF extern "C"
#else
#define MHEDEF extern
#endif
#endif

#define MHE_VERSION "0.1"

/* ======================================================================== */
/* 1. status codes, allocator, arena, RNG                                   */
/* ======================================================================== */

typedef enum mhe_status {
    MHE_OK = 0,
    MHE_ERR_NOMEM,        /* an allocation failed (or an arena is full) */
    MHE_ERR_ARG,          /* a NULL pointer or an argument out of range */
    MHE_ERR_CONFIG,       /* a model or training config field is invalid */
    MHE_ERR_SHAPE,        /* tensor shapes disagree (with each other or with a byte count) */
    MHE_ERR_IO,           /* a file could not be opened, read or written */
    MHE_ERR_TRUNCATED,    /* input ends before its declared length */
    MHE_ERR_HEADER,       /* a safetensors JSON header is malformed */
    MHE_ERR_DTYPE,        /* an unknown or unsupported tensor dtype */
    MHE_ERR_OFFSET,       /* tensor byte ranges overlap, leave gaps or leave the file */
    MHE_ERR_MISSING,      /* a tensor or metadata key the model needs is absent */
    MHE_ERR_OVERFLOW,     /* a size computation would overflow */
    MHE_ERR_NONFINITE,    /* a loss or gradient became NaN or infinite */
    MHE_ERR_DATA,         /* a corpus or token file is empty, too short or has bad tokens */
    MHE_ERR_FORMAT,       /* a checkpoint of another format or version */
    MHE_STATUS_COUNT
} mhe_status;

MHEDEF const char *mhe_status_str(mhe_status s);

#define MHE_ERR_LEN 256   /* size of the `err` message buffers in objects */

/* An arena hands out memory from one block (yours or malloc'd). Allocations
   are 64-byte aligned; there is no per-allocation free: reset or free all. */
typedef struct mhe_arena {
    unsigned char *base;
    size_t size, used, peak;
    void *raw_;           /* the MHE_MALLOC'd block, NULL for a caller's buffer */
    void *alloc_ctx;
#ifdef MHE_ARENA_DEBUG
    void **debug_ptrs; size_t debug_n, debug_cap;
#endif
} mhe_arena;

MHEDEF void   mhe_arena_init(mhe_arena *a, void *buffer, size_t size);   /* use the caller's buffer */
MHEDEF mhe_status mhe_arena_alloc_block(mhe_arena *a, size_t size, void *alloc_ctx); /* or allocate one */
MHEDEF void  *mhe_arena_alloc(mhe_arena *a, size_t bytes);                /* NULL when full */
MHEDEF void   mhe_arena_reset(mhe_arena *a);
MHEDEF void   mhe_arena_free(mhe_arena *a);
/* bytes an arena needs to hold allocations of the given sizes (alignment included) */
#define MHE_ARENA_ALIGN 64
#define MHE_ARENA_ROUND(n) (((size_t)(n) + MHE_ARENA_ALIGN - 1) & ~(size_t)(MHE_ARENA_ALIGN - 1))

/* Seedable RNG (xoshiro256**, seeded through splitmix64). Copy the struct to
   save its state; the same seed gives the same stream on every platform. */
typedef struct mhe_rng { uint64_t s[4]; } mhe_rng;

MHEDEF void     mhe_rng_seed(mhe_rng *r, uint64_t seed);
MHEDEF uint64_t mhe_rng_u64(mhe_rng *r);
MHEDEF float    mhe_rng_uniform(mhe_rng *r);                 /* [0, 1) with 24 random bits */
MHEDEF float    mhe_rng_normal(mhe_rng *r);                  /* N(0, 1), Box-Muller */
MHEDEF uint32_t mhe_rng_below(mhe_rng *r, uint32_t n);       /* uniform integer in [0, n) */
/* Counter-based uniform in [0,1): a pure function of (seed, index), so a
   dropout mask can be regenerated in the backward pass instead of stored. */
MHEDEF float    mhe_hash_uniform(uint64_t seed, uint64_t index);

/* ======================================================================== */
/* 2. tensors                                                               */
/* ======================================================================== */

#define MHE_MAX_DIMS 4
#define MHE_NAME_LEN 64

/* A float32 tensor, contiguous and row-major, with an optional gradient of
   the same shape. Data and gradient point into blocks owned elsewhere (the
   model's parameter and gradient blocks), so tensors are cheap to copy. */
typedef struct mhe_tensor {
    char name[MHE_NAME_LEN];
    int ndim;
    int64_t shape[MHE_MAX_DIMS];
    float *data;
    float *grad;          /* NULL when the tensor has no gradient */
    int64_t size;         /* number of elements */
    int decay;            /* 1: AdamW applies weight decay (matrices), 0: biases, norms */
} mhe_tensor;

/* number of elements of a shape, or -1 when a dimension is < 1 or the product overflows */
MHEDEF int64_t mhe_shape_size(int ndim, const int64_t *shape);

/* ======================================================================== */
/* 3. kernels                                                               */
/* ======================================================================== */

/* C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major.
   op(X) = X when trans_x == 0, X^T otherwise; lda/ldb/ldc are row strides of
   the matrices as stored. beta == 0 overwrites C without reading it.
   Cache-blocked with packed panels and a register-tiled micro-kernel;
   AVX2/FMA or AVX-512 intrinsics when the compiler targets them (scalar
   fallback otherwise, or with MHE_NO_SIMD); OpenMP over column/row blocks. */
MHEDEF void mhe_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc);

/* ======================================================================== */
/* 10. checkpoints: safetensors                                             */
/* ======================================================================== */
/* Format: 8-byte little-endian header length N, N bytes of JSON
   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
    "__metadata__": {"key": "value", ...}}, then the raw little-endian data.
   The parser checks everything a hostile file could get wrong: lengths,
   JSON syntax, dtypes, shape x dtype size = byte range, ranges inside the
   data section, no overlaps or gaps, no size overflow. */

#define MHE_ST_MAX_DIMS 8

typedef struct mhe_st_tensor {
    const char *name;            /* decoded UTF-8, NUL-terminated, owned by the mhe_safetensors */
    int dtype;                   /* MHE_DTYPE_* */
    int ndim;
    int64_t shape[MHE_ST_MAX_DIMS];
    int64_t size;                /* number of elements */
    const unsigned char *data;   /* begin of its bytes inside the parsed buffer (may be unaligned) */
    size_t nbytes;
} mhe_st_tensor;

enum { MHE_DTYPE_F32 = 0, MHE_DTYPE_F16, MHE_DTYPE_BF16, MHE_DTYPE_F64,
       MHE_DTYPE_I64, MHE_DTYPE_I32, MHE_DTYPE_I16, MHE_DTYPE_I8, MHE_DTYPE_U8, MHE_DTYPE_BOOL };

/* A parsed view of a safetensors buffer. The buffer must outlive the view. */
typedef struct mhe_safetensors {
    int n_tensors;
    mhe_st_tensor *tensors;
    int n_meta;
    const char **meta_keys, **meta_values;
    const unsigned char *data;   /* the data section */
    size_t data_size;
    void *alloc_ctx;
    void *storage_;              /* private: one block holding the tables and strings */
    char err[MHE_ERR_LEN];
} mhe_safetensors;

MHEDEF mhe_status mhe_st_parse(mhe_safetensors *st, const void *buf, size_t size, void *alloc_ctx);
MHEDEF void mhe_st_free(mhe_safetensors *st);
MHEDEF const mhe_st_tensor *mhe_st_find(const mhe_safetensors *st, const char *name);
MHEDEF const char *mhe_st_meta(const mhe_safetensors *st, const char *key);
/* copy a tensor's data as float32 into out[n] (F32 only; checks n == size) */
MHEDEF mhe_status mhe_st_read_f32(const mhe_safetensors *st, const mhe_st_tensor *t, float *out, int64_t n);

/* Writer: items are F32 tensors; metadata is n_meta key/value string pairs. */
typedef struct mhe_st_item {
    const char *name;
    int ndim;
    int64_t shape[MHE_ST_MAX_DIMS];
    const float *data;
} mhe_st_item;

/* exact byte size of the file mhe_st_write_mem would produce */
MHEDEF mhe_status mhe_st_write_size(const mhe_st_item *items, int n_items,
                                    const char *const *meta_keys, const char *const *meta_values,
                                    int n_meta, size_t *out_size, char *err);
MHEDEF mhe_status mhe_st_write_mem(void *buf, size_t cap, size_t *written,
                                   const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, char *err);
#ifndef MHE_NO_STDIO
/* write to path + ".tmp", flush, fsync where available, then rename over path:
   a file already at `path` is replaced only by a complete new one */
MHEDEF mhe_status mhe_st_save_file(const char *path, const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, void *alloc_ctx, char *err);
/* read a whole file into a fresh MHE_MALLOC'd buffer */
MHEDEF mhe_status mhe_read_file(const char *path, void **buf, size_t *size, void *alloc_ctx, char *err);
#endif

#endif /* MHE_H_INCLUDED */

/* ######################################################################## */
/*                              IMPLEMENTATION                              */
/* ######################################################################## */
#ifdef MHE_IMPLEMENTATION
#ifndef MHE_IMPLEMENTATION_DONE
#define MHE_IMPLEMENTATION_DONE

#include <math.h>
#include <string.h>
#include <float.h>
#include <limits.h>
#ifndef MHE_NO_STDIO
#include <stdio.h>
#include <stdarg.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(MHE_MALLOC) && defined(MHE_FREE) && defined(MHE_REALLOC)
/* all three given */
#elif !defined(MHE_MALLOC) && !defined(MHE_FREE) && !defined(MHE_REALLOC)
#include <stdlib.h>
#define MHE_MALLOC(ctx, n)            ((void)(ctx), malloc(n))
#define MHE_REALLOC(ctx, p, old, n)   ((void)(ctx), (void)(old), realloc((p), (n)))
#define MHE_FREE(ctx, p)              ((void)(ctx), free(p))
#else
#error "Define all or none of MHE_MALLOC, MHE_REALLOC and MHE_FREE."
#endif

#ifndef MHE_ASSERT
#include <assert.h>
#define MHE_ASSERT(x) assert(x)
#endif

#ifdef __cplusplus
#define MHE__CAST(T, x) ((T)(x))
#else
#define MHE__CAST(T, x) (x)
#endif

/* ---- 1. status codes, allocator, arena, RNG ---------------------------- */

MHEDEF const char *mhe_status_str(mhe_status s) {
    switch (s) {
    case MHE_OK: return "ok";
    case MHE_ERR_NOMEM: return "out of memory";
    case MHE_ERR_ARG: return "invalid argument";
    case MHE_ERR_CONFIG: return "invalid configuration";
    case MHE_ERR_SHAPE: return "shape mismatch";
    case MHE_ERR_IO: return "input/output error";
    case MHE_ERR_TRUNCATED: return "truncated input";
    case MHE_ERR_HEADER: return "malformed header";
    case MHE_ERR_DTYPE: return "unsupported dtype";
    case MHE_ERR_OFFSET: return "bad data offsets";
    case MHE_ERR_MISSING: return "missing tensor or field";
    case MHE_ERR_OVERFLOW: return "size overflow";
    case MHE_ERR_NONFINITE: return "non-finite value";
    case MHE_ERR_DATA: return "bad data";
    case MHE_ERR_FORMAT: return "unknown format or version";
    default: return "unknown status";
    }
}

/* printf into a fixed message buffer (err may be NULL); returns the status */
static mhe_status mhe__fail(char *err, mhe_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static mhe_status mhe__fail(char *err, mhe_status st, const char *fmt, ...) {
    if (err) {
#ifndef MHE_NO_STDIO
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, MHE_ERR_LEN, fmt, ap);
        va_end(ap);
#else
        size_t i = 0; /* no vsnprintf: keep the format text itself */
        for (; fmt[i] && i + 1 < MHE_ERR_LEN; i++) err[i] = fmt[i];
        err[i] = 0;
#endif
    }
    return st;
}

/* a*b for sizes, 0 on overflow is signalled through *ok */
static size_t mhe__mul_size(size_t a, size_t b, int *ok) {
    if (a != 0 && b > SIZE_MAX / a) { *ok = 0; return 0; }
    return a * b;
}
static size_t mhe__add_size(size_t a, size_t b, int *ok) {
    if (b > SIZE_MAX - a) { *ok = 0; return 0; }
    return a + b;
}

MHEDEF void mhe_arena_init(mhe_arena *a, void *buffer, size_t size) {
    memset(a, 0, sizeof *a);
    /* align the start; the caller's buffer may be anywhere */
    uintptr_t p = (uintptr_t)buffer, q = (p + MHE_ARENA_ALIGN - 1) & ~(uintptr_t)(MHE_ARENA_ALIGN - 1);
    if (buffer && size > (size_t)(q - p)) { a->base = (unsigned char *)q; a->size = size - (size_t)(q - p); }
}

MHEDEF mhe_status mhe_arena_alloc_block(mhe_arena *a, size_t size, void *alloc_ctx) {
    int ok = 1;
    size_t total = mhe__add_size(size, MHE_ARENA_ALIGN, &ok);
    void *p;
    if (!ok) return MHE_ERR_OVERFLOW;
    p = MHE_MALLOC(alloc_ctx, total);
    if (!p) return MHE_ERR_NOMEM;
    mhe_arena_init(a, p, total);
    a->raw_ = p;
    a->alloc_ctx = alloc_ctx;
    return MHE_OK;
}

MHEDEF void *mhe_arena_alloc(mhe_arena *a, size_t bytes) {
    size_t need = MHE_ARENA_ROUND(bytes ? bytes : 1);
    if (need < bytes) return NULL;
    if (!a->base || need > a->size - a->used) return NULL;
#ifdef MHE_ARENA_DEBUG
    /* account as usual, but hand out a separate block so ASan sees overruns */
    if (a->debug_n == a->debug_cap) {
        size_t cap = a->debug_cap ? 2 * a->debug_cap : 64;
        void **np = (void **)MHE_REALLOC(a->alloc_ctx, a->debug_ptrs, a->debug_cap * sizeof(void *), cap * sizeof(void *));
        if (!np) return NULL;
        a->debug_ptrs = np; a->debug_cap = cap;
    }
    {
        void *p = MHE_MALLOC(a->alloc_ctx, bytes ? bytes : 1);
        if (!p) return NULL;
        a->debug_ptrs[a->debug_n++] = p;
        a->used += need;
        if (a->used > a->peak) a->peak = a->used;
        return p;
    }
#else
    {
        void *p = a->base + a->used;
        a->used += need;
        if (a->used > a->peak) a->peak = a->used;
        return p;
    }
#endif
}

MHEDEF void mhe_arena_reset(mhe_arena *a) {
#ifdef MHE_ARENA_DEBUG
    size_t i;
    for (i = 0; i < a->debug_n; i++) MHE_FREE(a->alloc_ctx, a->debug_ptrs[i]);
    a->debug_n = 0;
#endif
    a->used = 0;
}

MHEDEF void mhe_arena_free(mhe_arena *a) {
    mhe_arena_reset(a);
#ifdef MHE_ARENA_DEBUG
    if (a->debug_ptrs) MHE_FREE(a->alloc_ctx, a->debug_ptrs);
#endif
    if (a->raw_) MHE_FREE(a->alloc_ctx, a->raw_);
    memset(a, 0, sizeof *a);
}

static uint64_t mhe__splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

MHEDEF void mhe_rng_seed(mhe_rng *r, uint64_t seed) {
    int i;
    for (i = 0; i < 4; i++) r->s[i] = mhe__splitmix64(&seed);
}

static uint64_t mhe__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** (Blackman and Vigna, 2018) */
MHEDEF uint64_t mhe_rng_u64(mhe_rng *r) {
    uint64_t *s = r->s, result = mhe__rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = mhe__rotl(s[3], 45);
    return result;
}

MHEDEF float mhe_rng_uniform(mhe_rng *r) { return (float)(mhe_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

MHEDEF float mhe_rng_normal(mhe_rng *r) {
    /* Box-Muller with a uniform in (0,1] so log never sees 0 */
    double u1 = ((double)(mhe_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(mhe_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

MHEDEF uint32_t mhe_rng_below(mhe_rng *r, uint32_t n) {
    /* Lemire's multiply-shift; the tiny bias (< n / 2^32) is irrelevant here */
    return n ? (uint32_t)(((mhe_rng_u64(r) >> 32) * (uint64_t)n) >> 32) : 0;
}

MHEDEF float mhe_hash_uniform(uint64_t seed, uint64_t index) {
    uint64_t x = seed ^ (index * 0xd1b54a32d192ed03ULL);
    return (float)(mhe__splitmix64(&x) >> 40) * (1.0f / 16777216.0f);
}

/* ---- 2. tensors --------------------------------------------------------- */

MHEDEF int64_t mhe_shape_size(int ndim, const int64_t *shape) {
    int64_t n = 1;
    int i;
    if (ndim < 0 || ndim > MHE_MAX_DIMS) return -1;
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 1 || n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

/* ---- 3. kernels: GEMM --------------------------------------------------- */
#include "parts/gemm.inc"

/* ---- 10. checkpoints: safetensors --------------------------------------- */
#include "parts/safetensors.inc"

#endif /* MHE_IMPLEMENTATION_DONE */
#endif /* MHE_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the mhe authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
