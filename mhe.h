/* mhe.h - v0.1 - parameter-efficient transformers in one C header (MIT licence, see end of file)

   Build, train and run small transformers with the attention variants of the
   multi-head-embedding (MHE) family, with nothing but libc and libm.

   USAGE
     Do this:
        #define MHE_IMPLEMENTATION
     before you include this file in *one* C or C++ file to create the
     implementation. Every other file includes "mhe.h" without the define.
     The CUDA companion (training, evaluation and decoding on an NVIDIA GPU)
     is a second file: in a .cu file, include "mhe.h" (with the define) and
     then "mhe_cuda.cuh"; its top comment says what runs there.

   A FIFTEEN-LINE PROGRAM (train a byte-level GPT on a text file)
        int *tokens; size_t n; char err[MHE_ERR_LEN];
        mhe_read_text_tokens("train.txt", &tokens, &n, NULL, err);
        mhe_config cfg = mhe_config_default();          // d_model 128, 4 heads, mha
        mhe_config_set(&cfg, "attn", "mhe-mul", err);   // or mha, sha, mqa, gqa, skv, el-att, mhe-add,
                                                        // mlp, taylor, nonapprox@even, ... (thesis ch. 4)
        mhe_model m;
        if (mhe_model_init(&m, &cfg, 42, NULL) != MHE_OK) puts(m.err);
        mhe_train_config tc = mhe_train_config_default();
        mhe_trainer tr;
        mhe_trainer_init(&tr, &m, &tc);
        for (int s = 0; s < tc.steps; s++) {
            mhe_trainer_step(&tr, tokens, n);           // sample a batch, fwd, bwd, AdamW
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
     MHE_NO_TRAIN          inference only: drop the backward passes (every
                           *_bwd, mhe_model_backward, mhe_model_zero_grad),
                           AdamW and clipping, the trainer (mhe_trainer_init,
                           _step*, _load*), mhe_grads_save and the gradient
                           buffers (a model never allocates them). Forward,
                           evaluation, decoding, loading and q8 stay, and give
                           the full build's bits; mhe_trainer remains a type
                           only, and the checkpoint writers refuse a trainer
                           (MHE_ERR_ARG). Not with the CUDA companion
     MHE_NO_TOKENIZERS     drop byte-level BPE and WordPiece, their Unicode
                           tables and the tokenizer.json reader (section 8);
                           byte tokens stay, and a checkpoint's tokenizer is
                           checked and left unread (the model runs on ids)
     MHE_ARENA_DEBUG       arena allocations become separate mallocs so that
                           AddressSanitizer sees every overrun (their alignment
                           is then malloc's, not 64 bytes)
     MHE_ST_MAX_HEADER     the largest safetensors JSON header a load accepts,
                           in bytes (default 100000000, the format's own limit)
     MHE_PROFILE           time every kernel call site (mhe_profile_*; costs a
                           clock read per call, so for measurement only)
     MHE_Q8_INT8_ACTIVATIONS  q8 inference also rounds activations to int8
                           (mhe_q8_linear_fwd_i8: measured no faster and a
                           little less exact than the default int8 x float)
     Threads: compile with -fopenmp to use OpenMP; without it the pragmas vanish
     and everything runs on one thread.

   CONVENTIONS
     Every function that can fail returns mhe_status; mhe_status_str() names
     the code, and the object involved keeps a detailed message in its `err`
     field. Nothing in the library calls exit() or abort() on user input.
     Shapes are row-major. Legend: B batch, T (or L) sequence length, C = d_m
     model width, n heads, d_h head size, V vocabulary size.
     Gradient buffers *accumulate* (+=); zeroing them is an explicit step.

   READING PATH (for the algorithms rather than the API)
     mhe_model_forward_batch -> mhe__forward_batch (7: check, embed, blocks,
     head) -> mhe__stack_fwd -> mhe__sub_fwd (norm, sublayer, residual) ->
     mhe__attn_branch_fwd (5.9: the kind's sublayer, e.g. projections, core,
     W^O) -> mhe__attn_fwd (5.7: the kind's core) -> the cores of section 4.
     Backward: the same names with _bwd, in reverse; decoding:
     mhe_decode_step, mhe_prefill -> mhe__decode_rows (12) ->
     mhe__attn_branch_decode (5.10). What differs between
     kinds is one row of mhe__kinds[] (5.11): facts and the functions the
     three chains call; docs/kinds.md#reading-guide maps every paper
     equation to the function and lines that compute it.

   CONTENTS (the same numbered sections in the API and the implementation)
     1 status, allocator, arena, RNG   2 tensors   3 kernels (GEMM, norms,
     activations, softmax, cross-entropy, dropout, embedding, linear, FFT,
     CP decomposition)   4 attention cores (softmax; Taylor and
     Non-approximate, linear time)   5 attention kinds (MHE paper; thesis
     ch. 4 and FNet; kinds a program registers: mhe_attn_kind_register)   6 embeddings: hashing (words, MD5/HMAC-MD5, LSH,
     hash-pool/add/proj, embedding parameter counts, word types and word
     corpora)   7 models (config, decoder, encoder, encoder-decoder; batches
     with padding; word embeddings: vocab or HashFormers hash embeddings;
     hybrid layouts, skip, the fixed stream; Admin; BERT pieces)   8 tokenizer and
     objectives (bytes; byte-level BPE: training, encoding, GPT-2's split
     with a Unicode class table, mhe's text form; WordPiece with BERT's
     normaliser tables; masked LM, labelled text sets, Shuffle+Random)
     9 optimizer and trainer   10 checkpoints (safetensors; Hugging Face
     tokenizer.json, read into section 8's tokenizers; q8: int8
     weights with per-group scales, for inference)   11 metrics
     (attention-pattern indicators, thesis sec. 4.4.4)   12 inference
     (KV cache, recurrent states, precomputed maps, sampling, embedded use,
     q8 kernels)   companion interface (what mhe_cuda.cuh calls)

   WORD MODELS (HashFormers): config embedding=hash-emb|hash-pool|hash-add|
     hash-proj, hash=md5|lsh, token_head=sr; read words into a lexicon
     (mhe_read_words), hash each type once (mhe_word_feats_update), point
     mhe_batch.words (or mhe_text_set.words) at the features, train with
     mhe_trainer_step_sr, fine-tune from mhe_model_init_from.

   VERSION HISTORY
     0.1  core tensors, kernels, decoder and encoder models with the MHE
          paper's attention kinds, AdamW, safetensors checkpoints; word
          models with the HashFormers embeddings and Shuffle+Random
*/
#ifndef MHE_H_INCLUDED
#define MHE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#ifndef MHE_NO_STDIO
#include <stdio.h>   /* FILE in mhe_out */
#endif

#ifdef MHE_STATIC
#if defined(__GNUC__)
#define MHEDEF static __attribute__((unused))   /* a program uses a few of them */
#else
#define MHEDEF static
#endif
#else
#ifdef __cplusplus
#define MHEDEF extern "C"
#else
#define MHEDEF extern
#endif
#endif

/* on the functions that return a status: a caller that drops one is warned
   (gcc, clang); elsewhere nothing. Cast to (void) where ignoring is meant. */
#ifndef MHE_NODISCARD
#if defined(__GNUC__) || defined(__clang__)
#define MHE_NODISCARD __attribute__((warn_unused_result))
#else
#define MHE_NODISCARD
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
    MHE_ERR_CONVERGE,     /* an iterative method stopped at its limit before converging */
    MHE_ERR_DEVICE,       /* no CUDA device, a device error, or a shape past a device kernel's limits (mhe_cuda.cuh) */
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
MHEDEF MHE_NODISCARD mhe_status mhe_arena_alloc_block(mhe_arena *a, size_t size, void *alloc_ctx); /* or allocate one */
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
    int init;             /* MHE_INIT_*: how mhe_model_init fills it */
    float init_std;       /* std of MHE_INIT_NORMAL */
    /* int8 weights of a q8 checkpoint (NULL: float): element i is
       q8[i] * q8_scale[i / q8_group], groups running along each row. Every
       forward reads a linear layer (and gathers embedding rows) through
       them when set; data is then NULL: no float copy is kept. */
    const int8_t *q8;
    const float *q8_scale;
    int q8_group;
} mhe_tensor;

/* MHE_INIT_BLOCKS: [n, W] rows of ones on head i's block of ceil(W/n) columns
   (collab's mixing matrix as concatenated heads, Cordonnier et al. 2020 sec. 3.2) */
enum { MHE_INIT_ZERO = 0, MHE_INIT_ONE, MHE_INIT_NORMAL, MHE_INIT_BLOCKS };

/* number of elements of a shape, or -1 when a dimension is < 1 or the product overflows */
MHEDEF int64_t mhe_shape_size(int ndim, const int64_t *shape);

/* ======================================================================== */
/* 3. kernels                                                               */
/* ======================================================================== */

/* C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major.
   op(X) = X when trans_x == 0, X^T otherwise; lda/ldb/ldc are row strides of
   the matrices as stored. beta == 0 overwrites C without reading it.
   Cache-blocked with packed panels and a register-tiled micro-kernel;
   AVX2/FMA, AVX-512, NEON or WebAssembly SIMD128 intrinsics when the
   compiler targets them (scalar fallback otherwise, or with MHE_NO_SIMD);
   OpenMP over column/row blocks. */
MHEDEF void mhe_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc);

/* Kernel scratch. GEMM packing and the tiles of the attention cores never
   live on the stack (no kernel frame reaches 16 KB, so threads with 128 KB
   stacks suffice; MHE_STACK_NEED says how much): they come from a block of
   per-thread slices bound to the calling thread. A model binds the block
   its activation layout planned; a program that calls mhe_gemm or the
   fused attention cores itself may bind one, or each call allocates its
   own (MHE_MALLOC). The slice of OpenMP thread t is base + t*slice_floats:
   GEMM packing, then the attention tiles for heads up to d_head wide. */
typedef struct mhe_scratch {
    float *base;            /* 64-byte aligned */
    size_t slice_floats;
    int threads, d_head;
} mhe_scratch;
#define MHE_STACK_NEED (64 * 1024)   /* bytes of stack a thread running the library needs, measured (tests/test_stack.c) */
/* floats of a block for `threads` threads and heads up to d_head (64 floats of alignment slack included) */
MHEDEF size_t mhe_scratch_floats(int d_head, int threads);
/* lay out a block of mhe_scratch_floats(d_head, threads) floats at base */
MHEDEF void mhe_scratch_init(mhe_scratch *s, float *base, int d_head, int threads);
/* bind s (NULL: none) to the calling thread; returns the binding it replaces */
MHEDEF const mhe_scratch *mhe_scratch_bind(const mhe_scratch *s);

/* Elementwise kernels and norms. Forward functions write their output;
   backward functions ACCUMULATE into the input gradient (dinp += ...) and the
   parameter gradients, so several consumers can add into one buffer.
   N rows of C columns unless said otherwise. */

/* LayerNorm (Ba et al. 2016): out = (x - mean) * rstd * w + b, biased variance */
MHEDEF void mhe_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C, float eps);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                              const float *w, const float *mean, const float *rstd, int N, int C);
#endif /* MHE_NO_TRAIN */
/* RMSNorm (Zhang and Sennrich 2019): out = x * rsqrt(mean(x^2) + eps) * w */
MHEDEF void mhe_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, const float *rstd, int N, int C);
#endif /* MHE_NO_TRAIN */

enum { MHE_ACT_GELU = 0, MHE_ACT_RELU, MHE_ACT_SILU, MHE_ACT_GELU_ERF };   /* GELU: tanh form; GELU_ERF: exact (PyTorch's nn.GELU) */
/* GELU uses the tanh approximation (Hendrycks and Gimpel 2016, eq. in sec. 2) */
MHEDEF void mhe_act_fwd(int act, float *out, const float *inp, int64_t n);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_act_bwd(int act, float *dinp, const float *inp, const float *dout, int64_t n);
#endif /* MHE_NO_TRAIN */

/* row softmax over the last dimension; rows may be -INFINITY (masked) but
   not all of them */
MHEDEF void mhe_softmax_fwd(float *out, const float *inp, int N, int C);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_softmax_bwd(float *dinp, const float *out, const float *dout, int N, int C);
#endif /* MHE_NO_TRAIN */

/* Cross-entropy of logits [N,V] against targets[N]; a target < 0 is ignored.
   losses[i] = logsumexp(logits_i) - logits_i[target_i]. Returns the mean
   over counted rows through *mean_loss and their count through *count. */
MHEDEF void mhe_xent_fwd(float *losses, float *mean_loss, int *count, const float *logits,
                         const int *targets, int N, int V);
#ifndef MHE_NO_TRAIN
/* dlogits += scale * (softmax(logits) - onehot(target)) for counted rows */
MHEDEF void mhe_xent_bwd(float *dlogits, const float *logits, const int *targets, int N, int V, float scale);
#endif /* MHE_NO_TRAIN */

/* Inverted dropout with a counter-based mask: element i is kept when
   mhe_hash_uniform(seed, offset + i) >= p and then scaled by 1/(1-p). The
   backward regenerates the mask from (seed, offset), nothing is stored. */
MHEDEF void mhe_dropout_fwd(float *out, const float *inp, int64_t n, float p, uint64_t seed, uint64_t offset);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_dropout_bwd(float *dinp, const float *dout, int64_t n, float p, uint64_t seed, uint64_t offset);
#endif /* MHE_NO_TRAIN */

/* out[i,:] = table[ids[i],:] (+= when accumulate); backward adds rows into dtable */
MHEDEF void mhe_embedding_fwd(float *out, const float *table, const int *ids, int N, int C, int accumulate);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_embedding_bwd(float *dtable, const float *dout, const int *ids, int N, int C);
#endif /* MHE_NO_TRAIN */

/* Discrete Fourier transform of any length n >= 1, in place, in double:
   X_k = sum_j x_j exp(-+ 2 pi i j k / n) (sign - forward, + inverse; no
   1/n). Radix-2 for powers of two, Bluestein's chirp-z (through a radix-2
   transform of length >= 2n - 1) otherwise. work: mhe_fft_work_len(n) doubles. */
MHEDEF size_t mhe_fft_work_len(int n);
MHEDEF void mhe_fft(double *re, double *im, int n, int inverse, double *work);

/* Linear layer as torch.nn.Linear: out[N,OC] = inp[N,IC] W[OC,IC]^T + b[OC] (b may be NULL) */
MHEDEF void mhe_linear_fwd(float *out, const float *inp, const float *w, const float *b, int N, int IC, int OC);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_linear_bwd(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, int N, int IC, int OC);
#endif /* MHE_NO_TRAIN */
/* int8 weights (q8). mhe_q8_quantize: W[rows, cols] -> q[rows, cols] int8
   and scale[rows, cols / group], symmetric per group of `group` consecutive
   elements of a row: scale = max |w| / 127, q = round(w / scale) (an
   all-zero group gets scale 1). MHE_ERR_ARG when group does not divide
   cols, MHE_ERR_NONFINITE for a NaN or infinite weight.
   mhe_q8_linear_fwd: out rows (stride ldo) = inp rows (stride ldi) W^T + b
   with W as q8: per group the int8 x float dot product, times its scale
   (weights stay int8 in memory; float activations, float accumulation).
   AVX2 / AVX-512 when the group is a multiple of 8 / 16, scalar otherwise. */
MHEDEF MHE_NODISCARD mhe_status mhe_q8_quantize(int8_t *q, float *scale, const float *w, int rows, int cols, int group);
MHEDEF void mhe_q8_linear_fwd(float *out, int ldo, const float *inp, int ldi, const int8_t *q, const float *scale,
                              int group, const float *b, int N, int IC, int OC);
/* the alternative the q8 issue asked to measure: activations quantized to
   int8 per token (scale max |x| / 127), int8 x int8 products summed in
   int32 per group (the shape Cortex-M4's SMLAD takes, two 16-bit products
   per instruction), then scaled. Less accurate; see docs/embedded.md's q8 table. */
MHEDEF void mhe_q8_linear_fwd_i8(float *out, int ldo, const float *inp, int ldi, const int8_t *q, const float *scale,
                                 int group, const float *b, int N, int IC, int OC);

/* CP (PARAFAC) decomposition of a 3-way tensor by alternating least squares
   (Carroll and Chang 1970; Kolda and Bader 2009, sec. 3.4):
   T[i][j][k] ~ sum_r A[i][r] B[j][r] C[k][r], T of I x J x K row-major, the
   factors row-major [I, R], [J, R], [K, R]. Each sweep solves every factor
   in turn from its normal equations (the Hadamard product of the other two
   Gram matrices, by Cholesky) against the matricised tensor times the
   Khatri-Rao product of the others (MTTKRP, as GEMMs). init
   MHE_CP_INIT_RANDOM starts from uniform [0, 1) factors drawn with `seed`
   (tensorly's init="random", the collaborative-attention authors' choice);
   MHE_CP_INIT_SVD from the leading left singular vectors of each
   unfolding (HOSVD; De Lathauwer et al. 2000), by subspace iteration from a
   `seed`ed start, columns past a mode's size uniform [0, 1): it avoids most
   of the poor local minima a random start can fall into. Stops when the relative error
   ||T - [[A, B, C]]|| / ||T|| (computed from the reconstruction: the
   usual norm identity cancels badly in float) changes by less than `tol` between sweeps
   (MHE_OK), or after max_iter sweeps (MHE_ERR_CONVERGE, the factors of the
   last sweep kept). Work memory comes from alloc_ctx. */
typedef struct mhe_cp_result { double rel_error; int iterations; } mhe_cp_result;
enum { MHE_CP_INIT_RANDOM = 0, MHE_CP_INIT_SVD };
MHEDEF MHE_NODISCARD mhe_status mhe_cp_als(const float *T, int I, int J, int K, int R, float *A, float *B, float *C,
                             int max_iter, double tol, int init, uint64_t seed, void *alloc_ctx, mhe_cp_result *res);


/* ======================================================================== */
/* 4. attention cores                                                       */
/* ======================================================================== */
/* Scaled dot-product attention, O = softmax(Q K^T * scale + mask) V
   (Vaswani et al. 2017, eq. 1), for B sequences and n query heads that share
   n_kv key/value heads (query head h reads K/V head h / (n / n_kv)).
   Q of (b, t, h) is at q[(b*Tq + t)*q_stride + h*d_head]; K, V, O likewise.
   Causal: query t sees keys j <= t + q_offset (q_offset = Tk - Tq when the
   queries are the last Tq positions, 0 in training). Attention dropout uses
   mhe_hash_uniform(seed, ((b*n + h)*Tq + t)*Tk + j), so it can be replayed. */
typedef struct mhe_attn_dims {
    int B, n_heads, n_kv_heads, Tq, Tk, d_head;
    int q_stride, k_stride, v_stride, o_stride;
    int causal, q_offset;
    const int *kv_len;          /* [B] keys of sequence b (the rest is padding, masked out); NULL: all Tk */
    float scale;                /* usually 1/sqrt(d_head) */
    float dropout;              /* probability of zeroing an attention weight */
    uint64_t seed;
    int q_shared;               /* 1: every query head reads the same Q columns (MHE seeds) */
    /* Optional per-head maps, [n_heads, d_head] each, NULL = none (fused core
       only): head h uses Q*q_mul[h] + q_add[h], K + k_add[h] and
       V*v_mul[h] + v_add[h] (MHE paper eq. 5 with psi = add or mul), built
       tile by tile, never stored per head (their gradients: mhe_attn_grads). */
    const float *q_mul, *q_add, *k_add, *v_mul, *v_add;
    /* Collaborative attention (Cordonnier et al. 2020, eq. 12; reference,
       stacked and decoding cores): Q and K of width d_qk (0: d_head), V of
       one head per query head although K is shared (v_per_head), and a
       per-head score of each key, k_bias[(b*Tk + j) * k_bias_stride + h],
       added inside the scaled logits. */
    int d_qk, v_per_head, k_bias_stride;
    const float *k_bias;
} mhe_attn_dims;

/* What a backward writes besides dQ, dK, dV (NULL pointers: not wanted):
   the gradients of the per-head maps, added into dq_mul ... dv_add, and of
   the key bias, into dk_bias (same layout as k_bias); with maps, the fused
   backward needs map_scratch of B * n_heads * 5 * d_head floats. */
typedef struct mhe_attn_grads {
    float *dq_mul, *dq_add, *dk_add, *dv_mul, *dv_add;
    float *dk_bias;
    float *map_scratch;
} mhe_attn_grads;

/* widest head (d_head) a config may set; mhe_config_validate says MHE_ERR_CONFIG past it */
#define MHE_MAX_D_HEAD 256

/* Reference path: materialises probs[B, n, Tq, Tk] (before dropout), literally eq. 1. */
MHEDEF void mhe_attn_ref_fwd(const mhe_attn_dims *d, float *out, float *probs,
                             const float *q, const float *k, const float *v);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_attn_ref_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr, float *dq, float *dk, float *dv,
                             const float *dout, const float *probs, const float *q, const float *k, const float *v);
#endif /* MHE_NO_TRAIN */
/* Fused path: tiled, online softmax (Milakov and Gimelshein 2018; Dao et al.
   2022); stores only lse[B, n, Tq] = log-sum-exp of each score row. The
   backward recomputes the scores tile by tile. Tiles come from the bound
   mhe_scratch (or one allocated for the call: MHE_ERR_NOMEM if that fails). */
MHEDEF MHE_NODISCARD mhe_status mhe_attn_fused_fwd(const mhe_attn_dims *d, float *out, float *lse,
                               const float *q, const float *k, const float *v);
#ifndef MHE_NO_TRAIN
MHEDEF MHE_NODISCARD mhe_status mhe_attn_fused_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr, float *dq, float *dk,
                                     float *dv, const float *dout, const float *out, const float *lse,
                                     const float *q, const float *k, const float *v);
#endif /* MHE_NO_TRAIN */

/* ======================================================================== */
/* 5. attention kinds                                                       */
/* ======================================================================== */
/* How each kind makes Q, K and V. Names are used in configs ("attn=mha"). */
enum {
    MHE_ATTN_MHA = 0,   /* per-head W_i^{Q,K,V} (Vaswani et al. 2017) */
    MHE_ATTN_SHA,       /* one head of size d_h, repeated n times into W^O (MHE paper, Table 1) */
    MHE_ATTN_MQA,       /* per-head Q, one shared K and V (Shazeer 2019) */
    MHE_ATTN_GQA,       /* K and V shared within kv_groups groups (Ainslie et al. 2023) */
    MHE_ATTN_SKV,       /* per-head Q, one projection per head used as both K and V (Kitaev et al. 2020) */
    MHE_ATTN_EL_ATT,    /* Q projected, K = V = the input split into heads (Yan et al. 2021) */
    MHE_ATTN_MHE_ADD,   /* seed W^{Q,K,V} + head embeddings, psi(A, b) = A + b (MHE paper, eq. 5) */
    MHE_ATTN_MHE_MUL,   /* seed W^{Q,K,V} + head embeddings, psi(A, b) = A * (b + 1) (MHE paper, eq. 5) */
    /* Deconstructing attention (thesis ch. 4, sec. 4.3) and the MHE paper's appendix baselines */
    MHE_ATTN_MLP,       /* no token mixing: gated MLP, SiLU, parameters matched to mha (eq. 4.4-4.5) */
    MHE_ATTN_TAYLOR,    /* "Approximate": 2nd-order Taylor of exp, linear time (eq. 4.6; Arora et al. 2024) */
    MHE_ATTN_NONAPPROX, /* softmax over time of (SiLU(Q) * K) 1 / sqrt(d_h): one score per position (eq. 4.7-4.8) */
    MHE_ATTN_RNDEMB_QK, /* Q, K from fixed random embeddings passed through the stack, V from the input (eq. 4.9-4.10) */
    MHE_ATTN_FIXEDSEQ_QK, /* Q, K from a fixed token sequence passed through the stack (eq. 4.11-4.12) */
    MHE_ATTN_STATICEMB_QK, /* Q, K from the static input embeddings, V from the input (eq. 4.13) */
    MHE_ATTN_FNET,      /* real part of a 2-D DFT over sequence and hidden; no parameters (Lee-Thorp et al. 2022) */
    MHE_ATTN_LINEAR,    /* learned dense mixing: W_seq X W_hidden^T (Lee-Thorp et al. 2022) */
    MHE_ATTN_COLLAB,    /* shared W~^Q, W~^K of width D~, mixing rows m_i, content bias (Cordonnier et al. 2020, eq. 13) */
    MHE_ATTN_KIND_COUNT
};
MHEDEF const char *mhe_attn_kind_name(int kind);
MHEDEF int mhe_attn_kind_from_name(const char *name);   /* -1 when unknown */
/* 1 for the kinds of thesis ch. 4 and the FNet baselines (mlp ... linear) */
MHEDEF int mhe_attn_kind_is_decon(int kind);
MHEDEF const char *mhe_attn_kind_source(int kind);    /* its paper and equation */
MHEDEF const char *mhe_attn_kind_tensors(int kind);   /* the tensors a sublayer of it owns, by name */
MHEDEF const char *mhe_attn_kind_q8_tensors(int kind);   /* those a q8 checkpoint stores as int8 ("(none)": none) */

/* ======================================================================== */
/* 6. embeddings: hashing                                                   */
/* ======================================================================== */
/* The hashing layer of HashFormers (Xue and Aletras 2022; thesis chapter 2):
   words -> MD5 / HMAC-MD5 or LSH -> a bucket id (hash-emb) or a T-bit
   vector -> the compressed embeddings Pool, Add and Proj (eq. 2.1-2.3).
   Nothing here allocates except mhe_lsh_init and mhe_ngram_table_build.
   In this section T is the number of hash bits (n_bits), not a length. */

/* Words. The authors pre-tokenise with re.findall(r"\w+|[^\w\s]+",
   text.lower()); this is the same rule on bytes:
     word byte   ASCII letter, digit or '_', or any byte >= 0x80 (so a UTF-8
                 letter like the e-acute of "cafe" stays inside its word;
                 invalid UTF-8 bytes are word bytes too and hash as bytes)
     space byte  ' ' \t \n \v \f \r and 0x1c-0x1f (exactly Python's \s on ASCII)
     punctuation every other byte (including NUL and other controls)
   A word is a maximal run of word bytes or a maximal run of punctuation
   bytes; spaces separate. Only ASCII A-Z are lower-cased (the hash
   functions below do it on the fly). Differences from Python on non-ASCII
   text: Unicode punctuation and spaces (U+2014, U+00A0 ...) count as word
   bytes here, and non-ASCII capitals are not lower-cased. No length limit.
   mhe_word_next scans from *pos, stores the word's offset in *word_start,
   moves *pos past it and returns its length; 0 when no word is left. */
MHEDEF size_t mhe_word_next(const char *text, size_t len, size_t *pos, size_t *word_start);
MHEDEF size_t mhe_word_count(const char *text, size_t len);
/* dst[i] = ASCII-lower-cased src[i] for i < n (dst may be src) */
MHEDEF void mhe_word_lower(char *dst, const char *src, size_t n);

/* MD5 (RFC 1321), streaming and one-shot; byte order independent. data may
   be NULL only when n is 0 (a NULL with n > 0 hashes nothing). */
typedef struct mhe_md5_ctx { uint32_t h[4]; uint64_t n; unsigned char buf[64]; } mhe_md5_ctx;
MHEDEF void mhe_md5_init(mhe_md5_ctx *c);
MHEDEF void mhe_md5_update(mhe_md5_ctx *c, const void *data, size_t n);
MHEDEF void mhe_md5_final(mhe_md5_ctx *c, unsigned char digest[16]);
MHEDEF void mhe_md5(const void *data, size_t n, unsigned char digest[16]);
/* HMAC-MD5 (RFC 2104); a key longer than 64 bytes is first hashed, as the RFC says */
typedef struct mhe_hmac_md5_ctx { mhe_md5_ctx inner; unsigned char okey[64]; } mhe_hmac_md5_ctx;
MHEDEF void mhe_hmac_md5_init(mhe_hmac_md5_ctx *c, const void *key, size_t key_len);
MHEDEF void mhe_hmac_md5_update(mhe_hmac_md5_ctx *c, const void *data, size_t n);
MHEDEF void mhe_hmac_md5_final(mhe_hmac_md5_ctx *c, unsigned char digest[16]);
MHEDEF void mhe_hmac_md5(const void *key, size_t key_len, const void *data, size_t n, unsigned char digest[16]);

/* The authors' HMAC key (hashformer free_tokenizer.py: CRYPT_KEY = "en") */
#define MHE_HASH_KEY "en"
#define MHE_HASH_KEY_LEN 2

/* A word's 128-bit hash: MD5 of its ASCII-lower-cased bytes when key is NULL
   (the thesis text, sec. 2.3.2), HMAC-MD5 under key[key_len] otherwise (the
   authors' code; key_len may be 0). MHE_ERR_ARG for a NULL word with len > 0. */
MHEDEF MHE_NODISCARD mhe_status mhe_word_hash_md5(const char *word, size_t len, const void *key, size_t key_len,
                                    unsigned char digest[16]);
/* hash-emb id of a word: that digest as a 128-bit big-endian integer mod N
   (thesis sec. 2.3.2, i = v % N). The authors use N = 50260 and add 5 for
   their special tokens; offsets are the caller's. MHE_ERR_ARG for N = 0. */
MHEDEF MHE_NODISCARD mhe_status mhe_word_id_md5(const char *word, size_t len, const void *key, size_t key_len, uint64_t N,
                                  uint64_t *id);
/* bytes[0..n) read as one big-endian integer, mod N: exact for any n and N >= 1 */
MHEDEF MHE_NODISCARD mhe_status mhe_digest_mod(const unsigned char *bytes, size_t n, uint64_t N, uint64_t *out);

/* Bit vectors: T bits packed MSB-first into (T + 7) / 8 bytes, as the
   authors read a digest: bit t is bit 7 - t % 8 of byte t / 8 (bit 0 = top
   bit of byte 0); unused trailing bits are 0. Every bit-vector input below
   is N rows of MHE_BITS_BYTES(T) bytes each. */
#define MHE_BITS_BYTES(T) (((size_t)(T) + 7) / 8)
#define MHE_HASH_MAX_BITS 65536
MHEDEF int mhe_bits_get(const unsigned char *bits, int t);
/* out[t] = bit t as 0.0f or 1.0f, t < T */
MHEDEF void mhe_bits_unpack(float *out, const unsigned char *bits, int T);

/* LSH over character n-grams (thesis sec. 2.3.3 and 2.3.5).
   Features: the n-grams (n_min <= n <= n_max, within 1..4) of the
   lower-cased word as it is, no padding (pad = 0, the default: the thesis
   speaks of the token's n-grams; padding would add a constant ' ' unigram
   to every word), or of " word " (pad = 1, scikit-learn's char_wb, which
   marks prefixes and suffixes). x_f = count of feature f in the word.
   Feature index f in [0, d_x):
     MHE_LSH_HASHED  FNV-1a (32 bit) of the n-gram's bytes, mod n_features;
     MHE_LSH_TABLE   the n-gram's position in a table of the K most frequent
                     n-grams of a corpus (mhe_ngram_table_build); n-grams not
                     in the table are dropped (thesis footnote 4: top 50K).
   Hyperplanes are never stored: r^i[f] = eta[(f + i) mod P], shifts of one
   N(0,1) vector eta of length P (thesis: circulant matrix; the authors' Emb
   code does exactly this), drawn from mhe_rng_normal with the seed.
     argmax form (hash-emb): p_i = x . r^i for i < N/2; bucket = argmax of
        [p_0 .. p_{N/2-1}, -p_0 .. -p_{N/2-1}] (Kitaev et al. 2020), the
        lowest index on ties; N even. (The authors' code negates shifts
        N/2..N-1 instead of repeating 0..N/2-1.)
     sign form (Pool/Add/Proj): bit t = [x . r^t > 0], t < T, packed as above.
   Sums run in double. Each word costs O(#n-grams * max(N/2, T)); repeated
   n-grams are merged first, so a word has no length limit. */
enum { MHE_LSH_HASHED = 0, MHE_LSH_TABLE };
#define MHE_LSH_MAX_DIM 0x7fffffffu   /* bound of n_features, K, P and N */

typedef struct mhe_lsh_config {
    int feature_mode;       /* MHE_LSH_HASHED (default) or MHE_LSH_TABLE */
    uint32_t n_features;    /* hashed mode: d_x (default 50000); table mode: ignored (K) */
    int n_min, n_max;       /* n-gram orders, 1 <= n_min <= n_max <= 4 (default 1..4) */
    int pad;                /* 1: n-grams of " word " (char_wb); 0 (default): of the word */
    uint32_t P;             /* length of eta; 0 (default) means d_x, as in the thesis */
    int n_bits;             /* T of the sign form, 1..MHE_HASH_MAX_BITS (default 128) */
    uint32_t n_buckets;     /* N of the argmax form: even, >= 2, N/2 <= P (default 50000) */
    uint64_t seed;          /* of eta (default 42, the authors' seed) */
} mhe_lsh_config;

typedef struct mhe_lsh {
    mhe_lsh_config cfg;     /* as given, with P resolved */
    uint32_t d_x;           /* feature dimension: n_features or the table's K */
    uint32_t *table;        /* table mode: 4 counts then K codes (see mhe_ngram_table_build) */
    size_t table_len;
    float *eta;             /* [P]; may be overwritten with a stored eta */
    void *alloc_ctx;
    char err[MHE_ERR_LEN];
} mhe_lsh;

MHEDEF mhe_lsh_config mhe_lsh_config_default(void);
/* Checks cfg (message in l->err), copies the table (table mode; checked as a
   hostile file would be) and draws eta. table may be NULL in hashed mode. */
MHEDEF MHE_NODISCARD mhe_status mhe_lsh_init(mhe_lsh *l, const mhe_lsh_config *cfg, const uint32_t *table, size_t table_len,
                               void *alloc_ctx);
MHEDEF void mhe_lsh_free(mhe_lsh *l);
/* doubles of work the two functions below need: max(N/2, T) */
MHEDEF size_t mhe_lsh_work_len(const mhe_lsh *l);
/* Per word; work is mhe_lsh_work_len doubles, or NULL to have one allocated
   per call. With their own work buffers, threads may share one mhe_lsh.
   Statuses: MHE_ERR_ARG (NULL pointers), MHE_ERR_NOMEM. */
MHEDEF MHE_NODISCARD mhe_status mhe_lsh_bucket(const mhe_lsh *l, const char *word, size_t len, double *work, uint32_t *bucket);
MHEDEF MHE_NODISCARD mhe_status mhe_lsh_bits(const mhe_lsh *l, const char *word, size_t len, double *work, unsigned char *bits);
/* the word's distinct feature indices and their counts, in order of first
   appearance (for inspection and tests; quadratic in the distinct count):
   writes up to cap pairs and returns how many there are (> cap: truncated) */
MHEDEF size_t mhe_lsh_features(const mhe_lsh *l, const char *word, size_t len, uint32_t *feat, uint32_t *count,
                               size_t cap);

/* n-gram codes: the bytes of an n-gram as a big-endian integer, so an
   n-gram is (n, code) with code < 256^n; lossless for any bytes, NUL too. */
MHEDEF uint32_t mhe_ngram_code(const char *s, int n);
/* The corpus table: counts every n-gram (orders n_min..n_max, padding as
   pad) of every word of text, keeps the K most frequent (ties: shorter n
   first, then smaller code) and returns a fresh MHE_MALLOC'd array of
   4 + K' entries (K' = min(K, distinct n-grams)):
     [c_1, c_2, c_3, c_4, codes of order 1 ascending, order 2 ascending, ...]
   c_n = how many codes of order n follow. Saved as an I32 tensor with the
   same bits, it is the whole table. MHE_ERR_DATA when text has no word. */
MHEDEF MHE_NODISCARD mhe_status mhe_ngram_table_build(const char *text, size_t len, int n_min, int n_max, int pad, uint32_t K,
                                        uint32_t **table, size_t *table_len, void *alloc_ctx, char *err);

/* Hash embeddings (forward writes out[N, d]; backward ACCUMULATES into the
   parameter gradients; nothing flows back to the bits). Layouts are the
   tensors a model stores:
   hash-emb   mhe_embedding_fwd/bwd over ids from mhe_word_id_md5 or mhe_lsh_bucket.
   hash-pool  (eq. 2.1 as the authors' code runs it) codebook [2^k + 1, d],
              row 0 reserved for special tokens and padding (no gradient, as
              nn.Embedding(padding_idx=0)), rows 1..2^k the codewords, ONE
              codebook shared by all chunks; weights w [C, d], C = ceil(T/k).
              The T bits are cut into C chunks of k bits (the last one
              T - (C-1)k bits), chunk c -> idx_c = its value (MSB first) + 1;
              e[j] = sum_c softmax_c(w[:, j]) * codebook[idx_c][j] (softmax
              over the chunk axis, one per dimension j).
   hash-add   (eq. 2.2) books [T, 2, d]: books[t][b] is the row for bit t = b;
              e = sum_t books[t][tau_t] / gamma (the thesis's gamma = sqrt(T)).
              The authors' Linear weights map as books[t][1] = W1[:, t],
              books[t][0] = W2[:, t].
   hash-proj  (eq. 2.3 with d vectors of length T, as the code runs it)
              w [d, T] (torch.nn.Linear layout): e_j = Pearson correlation of
              tau and w_j = <tau - mean, w_j - mean> / (max(|tau - mean|, 1e-8)
              * max(|w_j - mean|, 1e-8)); all-equal bits give e = 0. */
MHEDEF int mhe_hash_pool_chunks(int n_bits, int k);          /* ceil(T/k) */
/* idx[N, C] from bits; k in 1..24 */
MHEDEF void mhe_hash_pool_index(int *idx, const unsigned char *bits, int N, int n_bits, int k);
/* wsm [C, d] gets softmax(w) over chunks (kept for the backward) */
MHEDEF void mhe_hash_pool_fwd(float *out, float *wsm, const float *codebook, const float *w, const int *idx, int N,
                              int n_chunks, int d);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_hash_pool_bwd(float *dcodebook, float *dw, const float *dout, const float *codebook, const float *wsm,
                              const int *idx, int N, int n_chunks, int d);
#endif /* MHE_NO_TRAIN */
MHEDEF void mhe_hash_add_fwd(float *out, const float *books, const unsigned char *bits, int N, int n_bits, int d,
                             float gamma);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_hash_add_bwd(float *dbooks, const float *dout, const unsigned char *bits, int N, int n_bits, int d,
                             float gamma);
#endif /* MHE_NO_TRAIN */
/* wn [d, T] gets the centred, normalised w and wnorm [d] the norms of the
   centred rows before clamping (both kept for the backward) */
MHEDEF void mhe_hash_proj_fwd(float *out, float *wn, float *wnorm, const float *w, const unsigned char *bits, int N,
                              int n_bits, int d);
#ifndef MHE_NO_TRAIN
MHEDEF void mhe_hash_proj_bwd(float *dw, const float *dout, const float *wn, const float *wnorm,
                              const unsigned char *bits, int N, int n_bits, int d);
#endif /* MHE_NO_TRAIN */

/* Embedding parameter counts (thesis eq. 2.9-2.15) and memory metrics (eq. 2.5-2.7) */
enum { MHE_HASH_EMB = 0, MHE_HASH_POOL, MHE_HASH_ADD, MHE_HASH_PROJ, MHE_HASH_KIND_COUNT };
MHEDEF const char *mhe_hash_kind_name(int kind);             /* "hash-emb", "hash-pool", ... */
MHEDEF int mhe_hash_kind_from_name(const char *name);        /* -1 when unknown */
enum {
    MHE_HASH_COUNT_PAD_ROW = 1,   /* + Pool's reserved codebook row 0 (what the kernels store) */
    MHE_HASH_COUNT_TOKEN_ROW = 2  /* + one d-vector added to every hashed token (the authors'
                                     "regular token" row, special id 5) for Pool, Add and Proj */
};
/* flags 0: the thesis's formulas: Emb N d (eq. 2.12; also eq. 2.9-2.11, a
   table of N rows), Pool (ceil(T/k) + 2^k) d (2.13), Add 2 T d (2.14),
   Proj T d (2.15). -1 for a bad argument or an overflow. */
MHEDEF int64_t mhe_hash_param_count(int kind, int64_t d, int n_bits, int k, int64_t n_buckets, int flags);
/* PCR = 1 - params / baseline_params (eq. 2.5 with all parameters, PCR_All;
   eq. 2.6 with embedding parameters, PCR_Emb); PoEP = emb / total (eq. 2.7).
   Fractions, not percent; 0 when the denominator is not positive. */
MHEDEF double mhe_pcr(double params, double baseline_params);
MHEDEF double mhe_poep(double emb_params, double total_params);

/* Word tokens. A word corpus is a stream of ids: 0..MHE_N_SPECIAL-1 are
   special tokens, MHE_N_SPECIAL + i is word type i of a lexicon. A lexicon
   interns the distinct ASCII-lower-cased words of the data in order of
   first appearance; it is a data-loading convenience (hash each type once),
   not a vocabulary: a hash-embedding model embeds any word without it
   (mhe_model_hash_word). Bad input is defined: words are never empty (the
   splitter yields none; mhe_lexicon_intern rejects one), any bytes are
   allowed (invalid UTF-8 and NUL are word bytes or punctuation as in
   mhe_word_next), a word has no length limit (it is stored once per type),
   a blank line yields no token. */
enum { MHE_TOK_PAD = 0,     /* padding (what padded batch rows hold) */
       MHE_TOK_UNK,         /* a word outside a word vocabulary (embedding=vocab only) */
       MHE_TOK_BOS,         /* <s>: reserved for callers */
       MHE_TOK_EOS,         /* </s>: ends every non-blank line of a word corpus */
       MHE_N_SPECIAL };
typedef struct mhe_lexicon {
    int n;                          /* word types */
    char *text;                     /* their lower-cased bytes, one after another */
    size_t *start;                  /* [n + 1]: type i is text[start[i] .. start[i+1]) */
    int64_t *count;                 /* [n]: occurrences counted by mhe_lexicon_intern */
    int *slots;                     /* open-addressing table of type ids, -1 = empty */
    size_t n_slots, text_len, text_cap;
    int cap;
    void *alloc_ctx;
} mhe_lexicon;
MHEDEF void mhe_lexicon_init(mhe_lexicon *x, void *alloc_ctx);
MHEDEF void mhe_lexicon_free(mhe_lexicon *x);
/* the type of word[0..len) (lower-cased first), added when new; count it
   when count != 0. MHE_ERR_ARG for an empty word, MHE_ERR_OVERFLOW past
   INT_MAX - MHE_N_SPECIAL types. */
MHEDEF MHE_NODISCARD mhe_status mhe_lexicon_intern(mhe_lexicon *x, const char *word, size_t len, int count, int *type);
MHEDEF int mhe_lexicon_find(const mhe_lexicon *x, const char *word, size_t len);   /* -1 when absent */
MHEDEF const char *mhe_lexicon_word(const mhe_lexicon *x, int type, size_t *len);
/* text -> word tokens (a fresh MHE_MALLOC'd array): every word of each line
   (mhe_word_next) as MHE_N_SPECIAL + its type, then MHE_TOK_EOS when the
   line had a word. MHE_ERR_DATA when the text has no word. */
MHEDEF MHE_NODISCARD mhe_status mhe_words_parse(mhe_lexicon *x, const char *text, size_t len, int **tokens, size_t *n,
                                  void *alloc_ctx, char *err);
#ifndef MHE_NO_STDIO
/* a text file as word tokens; a missing file is MHE_ERR_IO, one with NUL
   bytes (not text) or without a word MHE_ERR_DATA */
MHEDEF MHE_NODISCARD mhe_status mhe_read_words(const char *path, mhe_lexicon *x, int **tokens, size_t *n, void *alloc_ctx, char *err);
#endif

/* ======================================================================== */
/* 7. models                                                                */
/* ======================================================================== */
#define MHE_MAX_LAYERS 64
#define MHE_FIXED_SEQ_MAX 1000   /* bytes of the fixedseq-qk text (it is cycled to the batch length) */
enum { MHE_LAYOUT_NONE = 0, MHE_LAYOUT_EVEN, MHE_LAYOUT_ODD, MHE_LAYOUT_TOP, MHE_LAYOUT_MIDDLE, MHE_LAYOUT_BOTTOM,
       MHE_LAYOUT_25, MHE_LAYOUT_FIRST, MHE_LAYOUT_LAST, MHE_LAYOUT_BILATERAL };

enum { MHE_ARCH_DECODER = 0,    /* causal self-attention, next-token LM */
       MHE_ARCH_ENCODER,        /* bidirectional self-attention: masked LM, sequence classification */
       MHE_ARCH_ENCDEC };       /* encoder + decoder with cross-attention: sequence to sequence */
enum { MHE_NORM_LAYERNORM = 0, MHE_NORM_RMSNORM };
/* init_residual: how the residual-output projections (W^O, fc2, down) start */
enum { MHE_INIT_RESIDUAL_PLAIN = 0, MHE_INIT_RESIDUAL_SCALED };
/* How tokens become vectors (config `embedding`): a table row per token, or
   a word's hash through a HashFormers embedding (MHE_EMB_HASH_* = 1 + MHE_HASH_*) */
enum { MHE_EMB_VOCAB = 0, MHE_EMB_HASH_EMB, MHE_EMB_HASH_POOL, MHE_EMB_HASH_ADD, MHE_EMB_HASH_PROJ };
enum { MHE_WORD_HASH_MD5 = 0, MHE_WORD_HASH_LSH };       /* config `hash` */
enum { MHE_HEAD_LM = 0, MHE_HEAD_SR };                   /* config `token_head`: vocabulary softmax or Shuffle+Random */
enum { MHE_POOL_MEAN = 0, MHE_POOL_FIRST };              /* config `cls_pool`: mean of the tokens, or BERT's pooler */

/* The model config. Its text form is one `key=value` per line (or the same
   pairs as --key value command-line flags); mhe_config_validate says what is
   wrong with a field. It is stored in every checkpoint's __metadata__. */
typedef struct mhe_config {
    int arch;               /* arch=decoder|encoder|encdec */
    int vocab_size;         /* V; 256 for the byte tokenizer */
    int d_model;            /* C */
    int n_heads;            /* n */
    int d_head;             /* d_h; 0 means d_model / n_heads */
    int n_layers;           /* blocks of the model (of the decoder, for encdec) */
    int d_ff;               /* MLP hidden width; 0 means 4 * d_model */
    int max_seq_len;        /* rows of the learned position table(s) */
    int attn[MHE_MAX_LAYERS]; /* self-attention kind per layer (decoder layers, for encdec) */
    int kv_groups;          /* K/V heads of `gqa` layers (must divide n_heads) */
    int norm;               /* layernorm | rmsnorm */
    float norm_eps;
    int post_norm;          /* norm_position=pre|post */
    int activation;         /* gelu (tanh form) | relu | silu | gelu-erf (exact) */
    int bias;               /* biases on every linear layer except the LM head */
    int tie_embeddings;     /* LM head reuses tok_emb.weight */
    float dropout;          /* embedding and residual dropout */
    float attn_dropout;     /* dropout on attention weights */
    float init_std;         /* N(0, init_std) for weights */
    int init_residual;      /* plain: residual outputs N(0, init_std) too; scaled: / sqrt(branches per stack), GPT-2 */
    int fused_attention;    /* 1: online-softmax core, 0: reference core (tests, teaching) */
    int mask_token;         /* encoder MLM: id of [MASK]; -1 means vocab_size - 1 */
    int n_classes;          /* encoder: classes of the sequence-classification head (0: none) */
    float head_init_std;    /* MHE head embeddings start N(0, this); < 0 means init_std */
    int enc_layers;         /* encdec: blocks of the encoder */
    int enc_attn[MHE_MAX_LAYERS];   /* encdec: encoder self-attention kind per layer */
    int cross_attn[MHE_MAX_LAYERS]; /* encdec: cross-attention kind per decoder layer */
    int admin;              /* post-norm: residuals x_{i+1} = LN(omega_i * x_i + f_i(x_i)), omega from a profiling pass */
    /* word embeddings (HashFormers, thesis ch. 2); see mhe_model_hash_word */
    int embedding;          /* embedding=vocab|hash-emb|hash-pool|hash-add|hash-proj */
    int hash;               /* hash=md5|lsh: how a word becomes a bucket or T bits */
    int hash_bits;          /* T (md5: <= 128, its first T bits) */
    int hash_buckets;       /* N of hash-emb */
    int hash_chunk;         /* k of hash-pool (1..24) */
    int hash_key;           /* md5: 1 HMAC-MD5 under MHE_HASH_KEY (the authors' code), 0 plain MD5 (the thesis) */
    int lsh_features;       /* lsh_features=hashed|table */
    int lsh_dim;            /* hashed: feature dimension F; table: n-grams kept (top K of the corpus) */
    int lsh_eta;            /* P, the length of eta (0: the feature dimension) */
    int lsh_pad;            /* 1: n-grams of " word " */
    int lsh_nmin, lsh_nmax; /* n-gram orders */
    uint64_t lsh_seed;      /* of eta */
    int token_head;         /* token_head=lm|sr: per-token vocabulary softmax or the 3-way S+R head */
    int layout;             /* layout=none|even|odd|top|middle|bottom|25%|first|last|bilateral: where
                               attn's kinds are replaced by mha (thesis Table 4.11 hybrids) */
    uint64_t fixed_seed;    /* rndemb-qk: seed of the fixed random embeddings */
    float fixed_std;        /* rndemb-qk: their standard deviation (< 0: init_std) */
    char fixed_seq[MHE_FIXED_SEQ_MAX + 1];   /* fixedseq-qk: the fixed text (its bytes the tokens), or
                                                "ids:5 17 3 ..." token ids; empty: a built-in text */
    int collab_dim;         /* collab: D~, the shared query/key width (0: n_heads * d_head, exact) */
    float collab_mix_std;   /* collab: M starts N(0, this^2); 0: blocks of ones (concatenated heads) */
    /* BERT's pieces (Devlin et al. 2019; Hugging Face's BertModel), for imported models */
    int emb_norm;           /* 1: a norm over the summed embeddings, before the first block */
    int type_vocab;         /* rows of the token-type table (0: none); mhe_batch.types picks them, NULL: type 0 */
    int head_transform;     /* 1: LM head input = norm(act(W h + b)), the MLM head's transform */
    int head_bias;          /* 1: a bias on the LM head's vocabulary logits */
    int cls_pool;           /* cls_pool=mean|first: mean of the tokens, or tanh(W h_0 + b) of the first (the pooler) */
} mhe_config;

MHEDEF mhe_config mhe_config_default(void);
/* set one field from text; unknown key or bad value -> MHE_ERR_CONFIG with a message in err */
MHEDEF MHE_NODISCARD mhe_status mhe_config_set(mhe_config *c, const char *key, const char *value, char *err);
/* parse `key=value` lines ('#' starts a comment, blank lines ignored) */
MHEDEF MHE_NODISCARD mhe_status mhe_config_parse(mhe_config *c, const char *text, size_t len, char *err);
MHEDEF MHE_NODISCARD mhe_status mhe_config_validate(const mhe_config *c, char *err);
/* the i-th field as key and value text; returns 0 past the last field */
MHEDEF int mhe_config_field(const mhe_config *c, int i, const char **key, char *value, size_t value_len);
MHEDEF int mhe_config_d_head(const mhe_config *c);
/* Parameters of one attention sublayer of `kind` under config c (its d_model,
   n_heads, d_head, kv_groups): Q/K/V projections and head embeddings, plus
   W^O when with_wo, plus biases when with_bias. The model layout counts its
   tensors with the same geometry, so this equals a built layer's count
   (self- or cross-attention alike). */
MHEDEF int64_t mhe_attn_param_count(const mhe_config *c, int kind, int with_wo, int with_bias);
MHEDEF int mhe_config_d_ff(const mhe_config *c);
/* hidden width F of the gated MLP that replaces attention (kind mlp): its
   three F x d_m matrices match MHA's four d_m x n d_h ones, F = round(4 n d_h / 3) */
MHEDEF int mhe_config_mlp_width(const mhe_config *c);
/* D~ of collab layers: collab_dim, or n_heads * d_head when 0 */
MHEDEF int mhe_config_collab_dim(const mhe_config *c);
/* the kind layer i of the main stack runs: attn[i], or mha where the
   layout (Table 4.11) keeps standard attention */
MHEDEF int mhe_config_layer_kind(const mhe_config *c, int i);
/* layers of all stacks (encoder and decoder of encdec) */
MHEDEF int mhe_config_total_layers(const mhe_config *c);

#define MHE_KIND_MAX_TENSORS 8        /* tensors of a registered kind */
#define MHE_MAX_REGISTERED_KINDS 8    /* kinds a program may register */

/* One attention sublayer's weights, self or cross. */
typedef struct mhe_attn_weights {
    int kind;                                           /* MHE_ATTN_*, -1: the layer has no such sublayer */
    mhe_tensor *wq, *wk, *wv, *bq, *bk, *bv, *wo, *bo;  /* wq, wk, wv adjacent in memory; wk, wv NULL when the kind has none */
    mhe_tensor *eq, *ek, *ev;                           /* MHE head embeddings [n, d_h] */
    mhe_tensor *wcb, *mix;                              /* collab: content bias [n, C] (after wk), mixing M [n, D~] */
    mhe_tensor *gate, *up, *down, *gate_b, *up_b, *down_b;  /* mlp (no wq ... bo): gate, up [F, C] adjacent, down [C, F] */
    mhe_tensor *hidden, *seq;                           /* linear (no wq ... bo): W_hidden [C, C], W_seq [L, L] */
    mhe_tensor *user;                                   /* a registered kind: the first of its n_user tensors, */
    int n_user;                                         /* consecutive in m->params in the order it declared them */
} mhe_attn_weights;

/* ---- attention kinds defined outside mhe.h ----
   A program defines a kind in its own file (examples/my_attention.c) and
   registers it once, before any config names it; from then on `attn=NAME`
   works as for the built-in kinds: the library lays out and initialises its
   tensors (layers.N.attn.NAME), trains them with AdamW, saves and loads them,
   keeps its activations between forward and backward and its decoding cache,
   and calls the functions below for the self-attention sublayer f(u) of any
   block (pre- or post-norm, residuals and Admin stay the library's). Not as
   cross-attention, on the CUDA companion or in the PyTorch twin: those refuse
   the kind by name. A checkpoint records the kind's name; loading it where
   the name is not registered fails naming the kind. Registering is not
   thread-safe: do it at start, before models exist. */
typedef struct mhe_kind_tensor {
    char name[24];          /* under layers.N.attn. ("wq.weight", "tau") */
    int ndim;               /* 1 or 2 */
    int64_t shape[2];
    int decay;              /* 1: AdamW's weight decay applies to it */
    int init;               /* MHE_INIT_NORMAL (N(0, init_std)), MHE_INIT_ZERO or MHE_INIT_ONE */
    float init_std;         /* for MHE_INIT_NORMAL; 0 takes the config's init_std */
} mhe_kind_tensor;

typedef struct mhe_kind_call {
    const mhe_config *cfg;
    int layer;              /* the block */
    int B, T;               /* B sequences of T tokens, rows = B T (decoding: B = T = 1) */
    int causal;             /* 1: position t sees positions 0..t only */
    const int *len;         /* [B] real tokens per sequence (the rest is padding), or NULL: all T */
    mhe_tensor *w;          /* its tensors, in declared order: w[i].data, and w[i].grad when training */
    float *acts;            /* act_floats(cfg, B, T) floats, written by forward and read by backward
                               (decoding: decode_floats(cfg, max_len) of scratch) */
    float *scratch;         /* scratch_floats(cfg, B, T) floats, free between calls (backward only) */
} mhe_kind_call;

typedef struct mhe_attn_kind_ops {
    const char *name;       /* as in configs: attn=NAME (letters, digits, '-', '_'; not a built-in kind's) */
    const char *source;     /* its paper and equation, or what it computes */
    int causal;             /* 1: may run in a causal stack (decoders); 0: encoders only */
    /* its tensors for config c, at most MHE_KIND_MAX_TENSORS; returns how many (0 or more) */
    int (*tensors)(const mhe_config *c, mhe_kind_tensor *t);
    const char *(*check)(const mhe_config *c);                 /* optional: why c cannot take it, or NULL */
    size_t (*act_floats)(const mhe_config *c, int B, int T);    /* optional: 0 */
    size_t (*scratch_floats)(const mhe_config *c, int B, int T);/* optional: 0 */
    /* out [rows, C] = f(u [rows, C]); padded rows (t >= len[b]) may hold anything */
    void (*forward)(const mhe_kind_call *k, const float *u, float *out);
    /* given d loss / d out: adds d loss / d u into du and each tensor's gradient into w[i].grad;
       optional: without it the kind runs inference only (a trainer refuses it) */
    void (*backward)(const mhe_kind_call *k, const float *u, const float *d_out, float *du);
    /* decoding, optional (without it mhe_kv_cache_init refuses the model): cache_floats per token
       kept in a [max_len, cache_floats] cache, decode_floats(c, max_len) of scratch; decode runs the
       token at position pos: cache rows 0..pos-1 hold what earlier calls wrote, it writes row pos */
    size_t (*cache_floats)(const mhe_config *c);
    size_t (*decode_floats)(const mhe_config *c, int max_len);
    void (*decode)(const mhe_kind_call *k, float *cache, int pos, const float *u, float *out);
} mhe_attn_kind_ops;

/* the new kind's number (MHE_ATTN_KIND_COUNT and up, for mhe_config.attn), or -1 with err
   saying why: a name taken or malformed, no forward or tensors, all MHE_MAX_REGISTERED_KINDS used.
   ops is copied; the strings it points to must live as long as the program uses the kind. */
MHEDEF int mhe_attn_kind_register(const mhe_attn_kind_ops *ops, char *err);
/* kinds known now: the built-in ones plus those registered */
MHEDEF int mhe_attn_kind_count(void);

/* A block: self-attention, cross-attention (decoder blocks of encdec only)
   and an MLP, each a residual sublayer with its norm (norm1, norm3, norm2). */
typedef struct mhe_layer {
    int encoder;                    /* 1: a block of the encoder stack of encdec */
    int index;                      /* position inside its stack */
    mhe_tensor *norm1_w, *norm1_b, *norm2_w, *norm2_b, *norm3_w, *norm3_b;
    mhe_attn_weights attn, cross;
    mhe_tensor *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    mhe_tensor *omega[3];           /* admin=1: residual scales of the sublayers (self, cross, MLP) [C] */
} mhe_layer;

/* Activations of one residual sublayer: pre-norm h' = h + f(N(h)) keeps
   N(h) in nrm and h' in sum; post-norm h' = N(h + f(h)) keeps the sum and
   N(sum) = h' in nrm. */
typedef struct mhe_sub_acts {
    float *nrm, *mean, *rstd, *sum;     /* [rows, C], [rows], [rows], [rows, C] */
} mhe_sub_acts;

typedef struct mhe_attn_acts {
    float *proj;    /* self: Q, K, V [rows, proj_w]; cross: Q [rows, q_w] */
    float *kv;      /* cross: K, V of the encoder output [src rows, k_w + v_w] */
    float *projx;   /* MHE reference path: per-head Q [rows, n d_h], then K and V [kv rows, n d_h] */
    float *hmap;    /* MHE-MUL: q_mul = (1+e^Q)(1+e^K), v_mul = 1+e^V [2, n, d_h] */
    float *att;     /* [rows, n d_h] attention output before W^O (mlp: [rows, F]; fnet, linear: [rows, C]) */
    float *stats;   /* [B, n, Tq] log-sum-exp (fused core) or probs [B, n, Tq, Tk] (reference core) */
    float *ext;     /* taylor: linear-time state slots; fnet: DFT scratch; linear: X W_hidden^T */
} mhe_attn_acts;

typedef struct mhe_layer_acts {
    const float *in, *out;          /* block input and output [rows, C] */
    mhe_sub_acts sub[3];            /* 0 self-attention, 1 cross-attention, 2 MLP */
    mhe_attn_acts attn, cross;
    float *fc1, *act;               /* [rows, d_ff] */
} mhe_layer_acts;

/* Activations saved by the forward pass for the backward pass, one block. */
typedef struct mhe_acts {
    int B, T, Ts;                   /* capacity: B sequences of T tokens (and Ts source tokens, encdec) */
    float *emb, *src_emb;           /* block-0 inputs of the main stack and of the encoder [rows, C] */
    mhe_layer_acts layer[MHE_MAX_LAYERS];
    mhe_sub_acts fin, enc_fin;      /* final norms (pre-norm): nrm, mean, rstd */
    const float *mem;               /* encoder output, encdec [B*Ts, C] */
    const float *final_h;           /* input of the head */
    float *logits;                  /* [BT, V] */
    float *losses;                  /* [BT] */
    float *pooled, *cls_logits, *d_pooled, *d_cls;   /* classification: [B, C], [B, n_classes] */
    float *first, *d_first;         /* cls_pool=first: the first token's rows [B, C] and their gradient */
    float *emb_sum, *emb_mean, *emb_rstd;   /* emb_norm: the summed embeddings [rows, C] and their norm statistics */
    float *hd_pre, *hd_act, *hd_out, *hd_mean, *hd_rstd;   /* head_transform: W h + b, act, norm [rows, C] */
    float *d_hd1, *d_hd2;           /* head_transform: backward scratch [rows, C] */
    int *tokens, *targets, *src, *lengths, *src_lengths;   /* copies of the last batch */
    int *types;                     /* type_vocab: the last batch's token types */
    /* backward scratch */
    float *d_h, *d_u, *d_tmp, *d_mem, *d_att, *d_proj, *d_projx, *d_fc1, *d_act, *d_logits, *scratch;
    float *map_scratch, *d_hmap;    /* per-(b, h) map gradients; MHE-MUL map gradients [2, n, d_h] */
    mhe_scratch kernel;             /* GEMM packing and attention tiles, one slice per thread */
    float *d_emb, *d_src_emb;       /* staticemb-qk: gradients of the block-0 inputs emb, src_emb */
    size_t bytes;
} mhe_acts;

/* What a model feeds its hash embedding, per word type of a lexicon
   (mhe_word_feats_update): the tok_emb row (vocab: MHE_TOK_UNK for a word
   outside the vocabulary), the bucket (hash-emb) or the T packed bits
   (hash-pool/add/proj), computed once per type by the model's own hasher.
   A batch of word tokens points at them (mhe_batch.words). */
typedef struct mhe_word_feats {
    int n;                          /* word types covered: lexicon types 0..n-1 */
    int embedding, n_bits;          /* those of the model that made them */
    uint64_t sig;                   /* that model's hashing settings (checked by the forward pass) */
    int32_t *id;                    /* [n] vocab and hash-emb */
    unsigned char *bits;            /* [n, MHE_BITS_BYTES(n_bits)] hash-pool, hash-add, hash-proj */
    int cap;
    void *alloc_ctx;
} mhe_word_feats;

/* Per-position inputs of the last word batch (private to the forward pass). */
typedef struct mhe_emb_in {
    int active, cap, n, nw;         /* word batch; capacity; positions; hashed words */
    int *row;                       /* [cap] vocab: tok_emb row */
    int *spec;                      /* [cap] hash: special token index, or -1 for a word */
    int *wpos, *wid, *idx;          /* hash: word positions; hash-emb buckets; hash-pool chunk indices [cap, chunks] */
    unsigned char *bits;            /* hash-add, hash-proj: [cap, MHE_BITS_BYTES(T)] */
    float *wout;                    /* [cap, C]: the words' hash embeddings (their gradient in the backward) */
    float *wsm, *wn, *wnorm;        /* hash-pool softmax(W) [chunks, C]; hash-proj normalised W [C, T] and norms [C] */
    void *block;
} mhe_emb_in;
/* The fixed stream of rndemb-qk and fixedseq-qk layers (thesis eq. 4.9-4.12):
   the model's own blocks run on a fixed input (random embeddings, or a fixed
   text embedded); layer l takes Q and K from the stream at layer l, V from
   its real input. Its gradient reaches every block below l (and the fixed
   text's embeddings). One kind per model. */
typedef struct mhe_fixed_stream {
    int kind;                       /* MHE_ATTN_RNDEMB_QK, MHE_ATTN_FIXEDSEQ_QK, or -1: no layer uses one */
    int top;                        /* the stream runs through layers 0 .. top-1 */
    float *eps;                     /* rndemb-qk: the random embeddings [max_seq_len, C] */
    int *tokens;                    /* fixedseq-qk: the fixed text as tokens, cycled [max_seq_len] */
    mhe_acts acts;                  /* its activations: one sequence of T tokens */
    int T;
    float *d_qk;                    /* [top][T, 2 n d_h]: d loss / d Q, K from the main stream */
    void *block;
} mhe_fixed_stream;

typedef struct mhe_model {
    mhe_config cfg;
    int n_tensors;
    mhe_tensor *params;             /* every parameter, in memory order */
    float *param_data, *grad_data;  /* one block each, same layout */
    int64_t n_params;
    mhe_tensor *tok_emb, *pos_emb, *lnf_w, *lnf_b, *lm_head;
    mhe_tensor *enc_pos_emb, *enc_lnf_w, *enc_lnf_b;    /* encdec: the encoder's positions and final norm */
    mhe_tensor *cls_w, *cls_b;      /* encoder classification head [n_classes, C], [n_classes] */
    mhe_tensor *type_emb;           /* type_vocab: token-type rows [type_vocab, C] */
    mhe_tensor *emb_norm_w, *emb_norm_b;    /* emb_norm: the embeddings' norm [C] */
    mhe_tensor *head_w, *head_b, *head_norm_w, *head_norm_b;   /* head_transform: [C, C], [C], norm [C] */
    mhe_tensor *lm_b;               /* head_bias: [V] */
    mhe_tensor *pooler_w, *pooler_b;        /* cls_pool=first: [C, C], [C] */
    int n_total_layers;             /* encoder layers (encdec) first, then the main stack */
    int admin_profiling;            /* mhe_model_admin_init is running: each sublayer sets its omega */
    float admin_ratio[2];           /* its running output scale, per stack (main, encoder) */
    mhe_layer layers[MHE_MAX_LAYERS];
    mhe_acts acts;
    void *acts_block;
    int training;                   /* dropout on when 1 */
    uint64_t skip_attn;             /* bit l: the self-attention sublayer of block l is the identity
                                       (hybrids evaluated "with skip", thesis Table 4.1) */
    mhe_fixed_stream fixed;         /* rndemb-qk / fixedseq-qk layers: the fixed stream */
    uint64_t dropout_seed;          /* set per step by the trainer */
    int last_B, last_T, last_Ts;    /* shape of the last forward */
    int last_has_targets, last_count; /* targets given; rows counted in the loss */
    int last_cls;                   /* the last forward was the classification head */
    float last_loss;
    size_t bytes_params, bytes_acts;
    void *alloc_ctx;
    mhe_arena *arena;               /* mhe_model_load_arena: every block from this arena, no gradients */
    int q8;                         /* 1: loaded from a q8 checkpoint (inference only) */
    int q8_group;                   /* its metadata group (0: one scale per row) */
    void *q8_block;                 /* loaded to the heap: the int8 weights and scales */
    char err[MHE_ERR_LEN];
    /* word embeddings: tok_emb is the hash-emb bucket table [N, C]; the others
       exist for hash-pool/add/proj (special_emb for every hash embedding) */
    mhe_tensor *special_emb;        /* [MHE_N_SPECIAL, C] the special tokens of a hash embedding */
    mhe_tensor *regular_emb;        /* [C] added to every hashed word (the authors' "regular token" row) */
    mhe_tensor *pool_codebook, *pool_w, *add_books, *proj_w;
    mhe_tensor *sr_w, *sr_b;        /* Shuffle+Random head [3, C], [3] (token_head=sr) */
    mhe_lsh lsh;                    /* hash=lsh: eta from lsh_seed (and the corpus n-gram table) */
    int lsh_ready;
    mhe_lexicon vocab;              /* embedding=vocab on words: type i is tok_emb row MHE_N_SPECIAL + i */
    uint64_t hash_sig;              /* of everything that decides how a word embeds */
    struct mhe_bpe *bpe;            /* the model's BPE tokenizer (section 8; mhe_model_set_bpe), NULL: none */
    mhe_emb_in emb_in;
} mhe_model;

/* One batch of B sequences of T tokens. Per-token targets (LM, masked LM) or
   per-sequence labels (classification head); a target or label < 0 is
   ignored. lengths[b] (1..T) marks the real tokens of sequence b, the rest
   is padding: no query attends to it, the loss ignores it and pooling
   leaves it out (NULL: every sequence has T tokens). Encoder-decoder models
   also take the source: src [B*Ts] with src_lengths. */
typedef struct mhe_batch {
    int B, T;
    const int *tokens, *targets, *labels, *lengths;
    int Ts;
    const int *src, *src_lengths;
    /* Word tokens (NULL: tokens are tok_emb rows): tokens are then special
       tokens (< MHE_N_SPECIAL) or MHE_N_SPECIAL + a word type of these
       features. Required by hash embeddings; not for encdec. */
    const mhe_word_feats *words;
    /* token-type (segment) ids [B*T] of a model with type_vocab rows, BERT's
       0 for the first text and 1 from the second on (NULL: every token type 0) */
    const int *types;
} mhe_batch;

/* build a model with freshly initialised weights (seeded) */
MHEDEF MHE_NODISCARD mhe_status mhe_model_init(mhe_model *m, const mhe_config *cfg, uint64_t seed, void *alloc_ctx);
MHEDEF void mhe_model_free(mhe_model *m);
/* Give the model a copy of a BPE tokenizer (b NULL: remove it). Checkpoints
   carry it (tensor "bpe.tokenizer": its text form as I8, metadata
   "tokenizer.md5": the MD5 of that text, checked at load; mhe_model_load_arena
   checks the MD5 only and leaves bpe NULL). MHE_ERR_CONFIG when vocab_size is
   not the tokenizer's n_tokens or the model reads words. */
#ifndef MHE_NO_TOKENIZERS
MHEDEF MHE_NODISCARD mhe_status mhe_model_set_bpe(mhe_model *m, const struct mhe_bpe *b);
#endif
MHEDEF mhe_tensor *mhe_model_find(mhe_model *m, const char *name);
/* make room for activations of B sequences of T tokens (and Ts source tokens
   for encdec; 0 means T). The forward pass does this itself. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_reserve(mhe_model *m, int B, int T, int Ts);
/* Forward pass of a batch; keeps what the backward needs. With targets (or
   labels) *loss gets the mean cross-entropy over the counted positions. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_forward_batch(mhe_model *m, const mhe_batch *b, float *loss);
/* After mhe_model_forward_batch: MHE_ERR_NONFINITE with m->err naming the first
   activation that holds a NaN or infinity, in the order the forward computes
   them ("layer 2 (attention output) produced inf"); MHE_OK when none does. A
   non-finite loss already says it; this is for logits without a loss. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_find_nonfinite(mhe_model *m);
/* shorthand: tokens[B*T] with per-token targets (may be NULL), no padding */
MHEDEF MHE_NODISCARD mhe_status mhe_model_forward(mhe_model *m, const int *tokens, const int *targets, int B, int T, float *loss);
/* shorthand for the encoder classification head: mean-pooled final states
   through cls_head to n_classes logits; labels[B] */
MHEDEF MHE_NODISCARD mhe_status mhe_model_forward_cls(mhe_model *m, const int *tokens, const int *labels, int B, int T, float *loss);
/* Admin initialisation (Liu et al. 2020, sec. 4; for deep post-norm
   stacks): one forward pass over the batch in training mode in which each
   residual sublayer i, in order, sets omega_i to the running ratio r (1 at
   the start of each stack) and then r = sqrt(Var[omega_i x_i] + Var[f_i(x_i)])
   over all the batch's elements. Needs admin=1; the trainer runs it on its
   first batch of a fresh run. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_admin_init(mhe_model *m, const mhe_batch *b);
/* reference = 1: run every attention on its reference path (as
   fused_attention=0: the probabilities materialised, e.g. for
   mhe_attn_probs); 0: back to the fused cores. Drops the activation blocks,
   which the next forward lays out again. */
MHEDEF void mhe_model_set_reference(mhe_model *m, int reference);
#ifndef MHE_NO_TRAIN
/* Backward of the last forward (which had targets): grads += d loss / d param */
MHEDEF MHE_NODISCARD mhe_status mhe_model_backward(mhe_model *m);
MHEDEF void mhe_model_zero_grad(mhe_model *m);
#endif /* MHE_NO_TRAIN */

/* How a word embeds under this model: vocab -> *id, its tok_emb row
   (MHE_TOK_UNK outside the vocabulary; needs a word vocabulary); hash-emb ->
   *id, its bucket; hash-pool/add/proj -> bits, its T bits packed
   MSB-first (MHE_BITS_BYTES(T) bytes). The word is ASCII-lower-cased. md5:
   HMAC-MD5 under MHE_HASH_KEY (hash_key=1) or MD5, bucket = digest mod N,
   bits = the digest's first T bits; lsh: mhe_lsh_bucket / mhe_lsh_bits with
   the model's eta (and n-gram table). Any non-empty word embeds, seen in
   training or not; an empty word is MHE_ERR_ARG. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_hash_word(mhe_model *m, const char *word, size_t len, int32_t *id, unsigned char *bits);
/* the word's input vector out[C] (special and regular rows included, no position) */
MHEDEF MHE_NODISCARD mhe_status mhe_model_embed_word(mhe_model *m, const char *word, size_t len, float *out);
/* Features of the lexicon's types f->n .. x->n-1 (f zero-initialised the
   first time; call again after the lexicon grew). MHE_ERR_ARG when f was
   made by a model with other hashing settings. */
MHEDEF MHE_NODISCARD mhe_status mhe_word_feats_update(mhe_model *m, const mhe_lexicon *x, mhe_word_feats *f);
MHEDEF void mhe_word_feats_free(mhe_word_feats *f);
/* embedding=vocab on words: the vocabulary is the vocab_size - MHE_N_SPECIAL
   most frequent types of x (ties: first seen), rows MHE_N_SPECIAL.. of tok_emb
   (fewer types leave rows unused); it is saved with the model. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_set_vocab(mhe_model *m, const mhe_lexicon *x);
/* hash=lsh with lsh_features=table: the top-lsh_dim n-gram table of a corpus
   (mhe_ngram_table_build), saved with the model as an I32 tensor */
MHEDEF MHE_NODISCARD mhe_status mhe_model_set_ngrams(mhe_model *m, const char *text, size_t len);
/* A model of config cfg whose tensors with the same name and shape (and word
   vocabulary or n-gram table) come from src, the rest freshly initialised:
   fine-tuning with a new head (cfg = src->cfg with n_classes set). The
   hashing settings must equal src's. *copied (may be NULL) = tensors copied. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_init_from(mhe_model *m, const mhe_config *cfg, const mhe_model *src, uint64_t seed,
                                      void *alloc_ctx, int *copied);
/* Collaborative reparametrisation (Cordonnier et al. 2020, sec. 3.3): the
   heads' W_Q^(i) W_K^(i)T, stacked into T[q, i, k] (D_in x N_h x D_in, the
   authors' mode order), are decomposed by CP-ALS (mhe_cp_als) into the
   shared W~_Q [D~, C], the mixing M [N_h, D~] and W~_K [D~, C]; each
   component's scale is split evenly over its three factors. The query bias
   becomes the content bias v_i = W_K^(i)T b_Q^(i) (eq. 12); the key bias
   adds one constant to each row of scores, which the softmax ignores, so it
   is dropped. D~ >= N_h d_h copies W_Q and W_K (rows past N_h d_h zero) with
   blocks-of-ones M: exact, no decomposition. The logits keep their
   1/sqrt(d_h) scale, so a collab layer with the converted weights computes
   what the mha layer did, up to the CP error.
   One sublayer: wq, wk [N_h d_h, C], bq [N_h d_h] or NULL; out: wq_out,
   wk_out [D~, C], mix [N_h, D~], content_bias [N_h, C]. res gets the
   relative error and sweeps (0 and 0 when exact). */
MHEDEF MHE_NODISCARD mhe_status mhe_collab_from_mha(int C, int n_heads, int d_head, const float *wq, const float *wk, const float *bq,
                                      int dim, float *wq_out, float *wk_out, float *mix, float *content_bias,
                                      int max_iter, double tol, int init, uint64_t seed, void *alloc_ctx, mhe_cp_result *res);
typedef struct mhe_reparam_opts {
    int dim;                /* D~, the shared query/key width (>= 1) */
    int max_iter;           /* ALS sweeps per sublayer before giving up (default 1000) */
    double tol;             /* converged when the relative error changes by less (default 1e-6) */
    int init;               /* MHE_CP_INIT_SVD (default) or MHE_CP_INIT_RANDOM (the authors' code) */
    uint64_t seed;          /* of the starting factors (default 1) */
    /* called after each converted sublayer ("layers.3.attn"), may be NULL */
    void (*progress)(void *ctx, const char *sublayer, const mhe_cp_result *r);
    void *progress_ctx;
} mhe_reparam_opts;
MHEDEF mhe_reparam_opts mhe_reparam_opts_default(void);
/* dst = src with every mha sublayer (self and cross, every stack) made a
   collab one of D~ = o->dim, everything else copied. Fails, leaving dst
   empty, when dim < 1, src has no mha sublayer, src already has collab
   layers of another width, or a decomposition does not converge within
   max_iter (MHE_ERR_CONVERGE, naming the sublayer and its error).
   *converted (may be NULL): sublayers converted. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_reparam_collab(mhe_model *dst, const mhe_model *src, const mhe_reparam_opts *o, void *alloc_ctx,
                                           int *converted);
/* embedding parameters as the thesis counts them (sec. 2.4.4): the word
   embedding's tensors and the regular-token row, without special tokens and
   positions; equals mhe_hash_param_count(kind, C, T, k, N,
   MHE_HASH_COUNT_TOKEN_ROW | MHE_HASH_COUNT_PAD_ROW), and V x C for vocab */
MHEDEF int64_t mhe_model_emb_params(const mhe_model *m);

/* ======================================================================== */
/* 8. tokenizer and objectives                                              */
/* ======================================================================== */
/* Byte-level: token id = byte value (vocab 256). Returns the token count. */
MHEDEF size_t mhe_tokenize_bytes(const char *text, size_t len, int *out);
#ifndef MHE_NO_STDIO
/* a text file as byte tokens in a fresh MHE_MALLOC'd array; an empty file or
   one with NUL bytes (not text) is MHE_ERR_DATA, a missing one MHE_ERR_IO */
MHEDEF MHE_NODISCARD mhe_status mhe_read_text_tokens(const char *path, int **tokens, size_t *n, void *alloc_ctx, char *err);
#endif

#ifndef MHE_NO_TOKENIZERS   /* BPE and WordPiece, their Unicode tables and tokenizer.json: to the #endif below */
/* Byte-level BPE (Sennrich et al. 2016 on bytes, as GPT-2 runs it: Radford
   et al. 2019 sec. 2.2). The base of every vocabulary mhe trains is the 256
   single bytes (token id = byte value), so decode(encode(x)) = x for any
   bytes, invalid UTF-8 and NUL included. Then, in order, the merges: merge r
   (its rank) joins the adjacent tokens (left, right) into token `result`;
   then the added tokens (specials such as "<|endoftext|>"), which are cut
   out of a text literally before anything else and never merged.
   Pre-tokenisation (split = MHE_BPE_SPLIT_GPT2) cuts a text into pieces by
   GPT-2's pattern
     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   with the Unicode classes of mhe_unicode_class; a byte that does not start
   well-formed UTF-8 is one character of class other. Merges never cross a
   piece. MHE_BPE_SPLIT_NONE merges across the whole text (between added
   tokens).
   Encoding a piece is the tokenizers package's BPE::merge_word: the bytes
   become their tokens, then while an adjacent pair has a merge, the pair of
   lowest rank is merged, the leftmost one on equal ranks.
   Training (mhe_bpe_train) counts the pieces of a text, then repeatedly adds
   the merge of the adjacent pair with the highest count over all pieces
   (each piece weighted by how often it occurs); ties go to the lowest left
   id, then the lowest right id; every occurrence in every piece is merged
   left to right. It stops at vocab_size tokens or when no pair is left
   (then n_tokens < vocab_size). Cost O(merges x symbols of the distinct
   pieces); nothing depends on hash order, so the result is the same on
   every platform.
   A vocabulary read from a Hugging Face tokenizer.json (mhe_bpe_load_hf)
   keeps that file's ids, so a byte may have no token (byte_id -1: the
   tokenizers package drops it, or gives unk when the model has one).

   WordPiece (Schuster & Nakajima 2012; BERT's, Devlin et al. 2019 sec. 3):
   the same struct holds BERT's vocabulary (model MHE_TOK_WORDPIECE, read
   from a tokenizer.json), and mhe_bpe_encode then runs the tokenizers
   package's pipeline for it: added tokens cut out as above; the rest
   normalised per character (BertNormalizer, flags MHE_NORM_*: clean_text
   drops controls and makes white space ' ', handle_chinese_chars puts
   spaces around CJK ideographs, strip_accents takes the canonical
   decomposition and drops nonspacing marks, lowercase maps by Unicode's
   lowercase); split at white space (dropped) and punctuation (kept, one
   character a word) (split = MHE_BPE_SPLIT_BERT); then each word greedily,
   longest vocabulary entry first, a piece after the first looked up with
   subword_prefix ("##") in front; a word with a character left over, or of
   more than max_word_chars characters, is the one token unk. Text is read
   as UTF-8, a byte that does not start well-formed UTF-8 as U+FFFD. The
   character data is of the Unicode versions tokenizers uses for each step:
   categories of Unicode 8.0.0 (control, punctuation, nonspacing marks), NFD
   of 9.0.0, lowercase of 17.0.0 (tables made by
   tools/scripts/wordpiece_tables.py from unicodedata2's data), so the ids
   are tokenizers' on any text. Decoding joins the
   tokens with spaces, a piece with the prefix without one (lossy: case and
   accents are gone). cls and sep (BERT's [CLS] and [SEP], from the
   post_processor) are put around each example of a text set
   (mhe_text_set_bpe), not by mhe_bpe_encode. */
enum { MHE_BPE_SPLIT_NONE = 0, MHE_BPE_SPLIT_GPT2, MHE_BPE_SPLIT_BERT };
enum { MHE_TOK_BPE = 0, MHE_TOK_WORDPIECE };
enum { MHE_NORM_CLEAN = 1, MHE_NORM_CHINESE = 2, MHE_NORM_STRIP_ACCENTS = 4, MHE_NORM_LOWERCASE = 8 };
/* the class of a code point in the pattern above: Unicode 16.0.0's
   categories, the version of tokenizers 0.23's regular expressions
   (mhe_unicode_version(); table made by tools/scripts/unicode_classes.py
   from unicodedata2's data) */
enum { MHE_UC_OTHER = 0, MHE_UC_LETTER, MHE_UC_NUMBER, MHE_UC_SPACE };
MHEDEF int mhe_unicode_class(uint32_t cp);
MHEDEF const char *mhe_unicode_version(void);
/* end of the GPT-2 piece that starts at text[pos] (pos < len) */
MHEDEF size_t mhe_bpe_split_next(const char *text, size_t len, size_t pos);

#define MHE_BPE_MAX_TOKENS (1 << 24)   /* vocabulary sizes this library accepts */
/* Added tokens are cut out in two passes, as tokenizers' AddedVocabulary
   does: first those without MHE_BPE_ADDED_LATE (tokenizer.json
   "normalized": false, and every added token mhe trains), then, in the text
   between them, those with it ("normalized": true). MHE_BPE_ADDED_VOCAB: the
   token is also an entry of the BPE vocabulary (merges and ignore_merges may
   produce it). */
enum { MHE_BPE_ADDED = 1, MHE_BPE_ADDED_LATE = 2, MHE_BPE_ADDED_VOCAB = 4 };
typedef struct mhe_bpe {
    int n_tokens;                   /* the vocabulary size: ids 0 .. n_tokens - 1 */
    int n_merges;
    int split;                      /* MHE_BPE_SPLIT_* */
    int prefix_space;               /* ' ' put before a text (piece between added tokens) that does not start with one */
    int ignore_merges;              /* a piece that is itself a token is that token (tokenizers' ignore_merges) */
    int unk;                        /* the token of a byte without one, -1: such bytes are dropped */
    int fuse_unk;                   /* consecutive unknown bytes give one unk */
    int byte_id[256];               /* token of each single byte, -1 when none */
    unsigned char *bytes;           /* token i is bytes[start[i] .. start[i+1]) */
    size_t *start;                  /* [n_tokens + 1] */
    unsigned char *added;           /* [n_tokens]: MHE_BPE_ADDED* flags, 0 for a vocabulary token */
    int32_t *merges;                /* [n_merges][3]: left, right, result; the index is the rank */
    int *added_ids;                 /* the added tokens, longest first (leftmost-longest matching) */
    int n_added;
    uint64_t *merge_keys;           /* hash of the merges: (left << 32 | right) -> rank */
    int32_t *merge_rank;
    int *tok_slots;                 /* hash of the token bytes -> id (-1 empty) */
    size_t n_merge_slots, n_tok_slots;
    int model;                      /* MHE_TOK_BPE, MHE_TOK_WORDPIECE */
    int normalize;                  /* WordPiece: MHE_NORM_* flags */
    int max_word_chars;             /* WordPiece: a longer word is unk */
    char subword_prefix[8];         /* WordPiece: in front of a piece that continues a word ("##") */
    int cls, sep;                   /* around each example of a text set, -1: none */
    int decode_cleanup;             /* WordPiece decoding: " ." -> "." and the like, as tokenizers' cleanup */
    size_t max_token_bytes;         /* the longest token (set with the tables; WordPiece decoding's buffer) */
    void *alloc_ctx;
    char err[MHE_ERR_LEN];
} mhe_bpe;

MHEDEF void mhe_bpe_init(mhe_bpe *b, void *alloc_ctx);
MHEDEF void mhe_bpe_free(mhe_bpe *b);
/* a new vocabulary of (at most) vocab_size tokens: 256 bytes, the merges,
   then the n_added added tokens (non-empty, distinct; cut out of the text
   before counting). MHE_ERR_ARG for vocab_size < 256 + n_added or above
   MHE_BPE_MAX_TOKENS. */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_train(mhe_bpe *b, const char *text, size_t len, int vocab_size, int split,
                                const char *const *added, int n_added);
/* the token of bytes[0..n), -1 when none */
MHEDEF int mhe_bpe_find(const mhe_bpe *b, const void *bytes, size_t n);
/* the rank of the merge (left, right), -1 when none */
MHEDEF int mhe_bpe_merge_rank(const mhe_bpe *b, int left, int right);
/* Scratch of mhe_bpe_encode for a text of len bytes. */
MHEDEF size_t mhe_bpe_work_size(size_t len);
/* the most ids a text of len bytes can give: len (WordPiece too), or
   2 len + 1 with prefix_space (a space before each stretch between added
   tokens) */
MHEDEF size_t mhe_bpe_max_ids(const mhe_bpe *b, size_t len);
/* text -> ids[0 .. *n); at most mhe_bpe_max_ids(b, len) of them.
   work: mhe_bpe_work_size(len) bytes, or NULL to have them allocated per
   call (with their own work, threads may share one mhe_bpe). MHE_ERR_SHAPE
   when cap is too small, MHE_ERR_NOMEM; err (may be NULL) gets a message. */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_encode(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap, size_t *n,
                                 void *work, char *err);
/* mhe_bpe_encode on `threads` threads (0: OpenMP's default): the text is
   cut where the ids cannot change (before the last character of a run of
   white space, runs with a newline first, never inside an added token), the
   pieces encoded at once, their ids put one after another: the same ids as
   mhe_bpe_encode's (split none: one piece). Without OpenMP the pieces run one
   after another. Each piece allocates its own scratch; cap and errors as
   mhe_bpe_encode (the first failing piece's message). */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_encode_threads(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap,
                                                       size_t *n, int threads, char *err);
/* ids -> the bytes of their tokens, one after another: the first cap go to
   out (out may be NULL), the full length to *len. MHE_ERR_DATA for an id
   outside 0 .. n_tokens - 1 (err names its position). */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_decode(const mhe_bpe *b, const int *ids, size_t n, char *out, size_t cap, size_t *len,
                                 char *err);
/* The text form (mhe's own; what a checkpoint carries): lines
     mhe-bpe 1
     split gpt2|none   prefix_space 0|1   ignore_merges 0|1   unk ID|-1   fuse_unk 0|1   (one a line)
     tokens N          then N lines "t HEX" (a token) or "a HEX" (an added token), HEX its bytes in hex;
                       n, A, N for an added token that is late, in the vocabulary, both
     merges M          then M lines "LEFT RIGHT RESULT", in rank order
     end
   or, for WordPiece,
     mhe-wordpiece 1
     normalize F (MHE_NORM_* flags)   max_word_chars N   prefix HEX   unk ID
     cls ID|-1   sep ID|-1   cleanup 0|1   (one a line)
     tokens N          as above (a late added token is matched in the
                       normalised text as it is written: mhe_bpe_load_hf
                       checks that the normalizer leaves it unchanged)
     end
   save: the first cap bytes to buf (buf may be NULL), the full size to *len.
   load: every field checked (a truncated file, a token that is empty or
   repeats one, a merge out of range, repeated, or whose result is not
   left + right: an error naming the line); on failure b is left empty. */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_save_mem(const mhe_bpe *b, char *buf, size_t cap, size_t *len);
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_load_mem(mhe_bpe *b, const char *buf, size_t len);
/* MD5 of the text form: what a checkpoint records to check its tokenizer */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_md5(const mhe_bpe *b, unsigned char digest[16]);
/* A Hugging Face tokenizer.json of a byte-level BPE model (model.type "BPE",
   pre_tokenizer ByteLevel, or a Sequence of just that; decoder ByteLevel or
   null; normalizer null; post_processor ByteLevel or null), or of a
   WordPiece one (BERT's: model.type "WordPiece", normalizer BertNormalizer
   or null, pre_tokenizer BertPreTokenizer, decoder WordPiece or null,
   post_processor TemplateProcessing of the form [CLS] $A [SEP],
   BertProcessing or null), read with a
   strict JSON reader (section 10): vocab, merges in either form ("a b" or
   ["a", "b"]), added_tokens (lstrip, rstrip and single_word false),
   unk_token, fuse_unk, ignore_merges; dropout null, no
   continuing_subword_prefix or end_of_word_suffix, byte_fallback false.
   Anything else, a truncated file, a repeated merge, a merge of a token
   not in the vocab or whose result is not in it: an error naming the field.
   mhe_bpe_encode then gives the ids of tokenizers' encode(text).ids. */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_load_hf(mhe_bpe *b, const char *json, size_t len);
#ifndef MHE_NO_STDIO
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_save(const mhe_bpe *b, const char *path);
/* mhe's text form, or a tokenizer.json when the file starts with '{' */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_load(mhe_bpe *b, const char *path);
/* a text file as BPE tokens in a fresh MHE_MALLOC'd array (what
   mhe_read_text_tokens is for bytes): a missing file is MHE_ERR_IO, an empty
   one, one with NUL bytes or one that encodes to no token MHE_ERR_DATA */
MHEDEF MHE_NODISCARD mhe_status mhe_bpe_read_tokens(const mhe_bpe *b, const char *path, int **tokens, size_t *n, void *alloc_ctx,
                                      char *err);
#endif
#endif /* MHE_NO_TOKENIZERS */

/* Masked-LM inputs and targets (Devlin et al. 2019, sec. 3.1): each position
   is chosen with probability prob; a chosen one becomes mask_token (80 %), a
   random token (10 %) or stays (10 %), and its target is the original token;
   unchosen positions get target -1 (ignored by the loss). */
MHEDEF void mhe_mlm_mask(int *inputs, int *targets, const int *tokens, int n, float prob, int mask_token,
                         int vocab, mhe_rng *rng);

/* Labelled texts for sequence classification: one `label<TAB>text` line per
   example, label a non-negative integer, the text as byte tokens (blank
   lines are skipped; a line without a tab, a bad label or an empty text is
   an error naming the line). */
typedef struct mhe_text_set {
    int n;                          /* examples */
    int n_classes;                  /* 1 + the largest label */
    int *labels;                    /* [n] */
    size_t *start;                  /* [n + 1]: example i is tokens[start[i] .. start[i+1]) */
    int *tokens;
    int *types;                     /* [start[n]]: token types of pairs (mhe_text_set_bpe), NULL: every token type 0 */
    void *alloc_ctx;
    const mhe_word_feats *words;    /* word sets: set by the caller, passed on in every batch */
} mhe_text_set;

MHEDEF MHE_NODISCARD mhe_status mhe_text_set_parse(mhe_text_set *s, const char *text, size_t len, void *alloc_ctx, char *err);
#ifndef MHE_NO_STDIO
MHEDEF MHE_NODISCARD mhe_status mhe_text_set_load(mhe_text_set *s, const char *path, void *alloc_ctx, char *err);
#endif
MHEDEF void mhe_text_set_free(mhe_text_set *s);
/* the same lines as word tokens (types of x; a text without a word is an
   error naming the line). Set s->words to the features before training. */
MHEDEF MHE_NODISCARD mhe_status mhe_text_set_parse_words(mhe_text_set *s, mhe_lexicon *x, const char *text, size_t len,
                                           void *alloc_ctx, char *err);
#ifndef MHE_NO_STDIO
MHEDEF MHE_NODISCARD mhe_status mhe_text_set_load_words(mhe_text_set *s, mhe_lexicon *x, const char *path, void *alloc_ctx, char *err);
#endif
/* the texts of a byte text set (mhe_text_set_load) re-read as BPE tokens of
   b, labels kept, each between b's cls and sep where it has them; a text
   without a token is an error naming the example. With both cls and sep (a
   WordPiece template, BERT's) a text with a tab is a pair, `A<TAB>B` read
   as [CLS] A [SEP] B [SEP] (BERT's pair template; a later tab is white
   space of B), its types 0 up to the first [SEP] and 1 after it: s->types
   is set when the set holds a pair. */
#ifndef MHE_NO_TOKENIZERS
MHEDEF MHE_NODISCARD mhe_status mhe_text_set_bpe(mhe_text_set *s, const mhe_bpe *b, char *err);
#endif
/* examples idx[0..B) as a padded batch: the first T tokens of each text in
   tokens [B*T] (padding 0), lengths [B] and labels [B] */
MHEDEF void mhe_text_set_batch(const mhe_text_set *s, const int *idx, int B, int T, int *tokens, int *lengths, int *labels);
/* their token types [B*T] as the same batch cuts them (0 where s->types is
   NULL and for padding); mhe_trainer_step_cls and mhe_evaluate_cls pass
   them to a model with type_vocab >= 2 */
MHEDEF void mhe_text_set_batch_types(const mhe_text_set *s, const int *idx, int B, int T, int *types);

/* Shuffle+Random (S+R; thesis sec. 2.3.6 after Yamaguchi et al. 2021, as
   the authors' collator runs it): a 3-way label per token, the objective of
   models without a vocabulary softmax. One permutation pi of the T
   positions per batch. Each real token (t < lengths[b], id >= first_word;
   special tokens and padding get label -1) is
     shuffled with probability prob: it takes the token at pi(t) of its row
       -> MHE_SR_SHUFFLED, unless that is padding, special or the same id;
     else replaced with probability prob: a word drawn uniformly from ids
       first_word .. first_word + pool_n - 1 (pool NULL; the trainer draws
       the word types of its features, as the authors' Emb collator draws
       vocabulary ids), or from pool[pool_n] (e.g. corpus positions, so
       frequent words more often), redrawn while special or equal (8 tries)
       -> MHE_SR_RANDOM;
   otherwise, or when nothing changed, it stays -> MHE_SR_ORIGINAL. With
   prob 0.10 (the authors' default) ~10% are shuffled and ~9% replaced.
   The authors label a shuffled position 1 even when its token did not
   change; here the label says what the input shows. */
enum { MHE_SR_ORIGINAL = 0, MHE_SR_SHUFFLED, MHE_SR_RANDOM, MHE_SR_CLASSES };
MHEDEF void mhe_sr_corrupt(int *inputs, int *labels, const int *tokens, const int *lengths, int B, int T, float prob,
                           int first_word, const int *pool, size_t pool_n, mhe_rng *rng);

/* ======================================================================== */
/* 9. optimizer: AdamW, clipping, schedules                                 */
/* ======================================================================== */
enum { MHE_SCHED_CONSTANT = 0, MHE_SCHED_LINEAR, MHE_SCHED_COSINE, MHE_SCHED_INVSQRT, MHE_SCHED_COSINE_RESTARTS };

typedef struct mhe_train_config {
    int steps, batch, seq_len;
    float lr, min_lr;               /* min_lr: floor of the decaying schedules */
    int warmup, schedule, cycles;   /* cycles: for cosine-restarts */
    float beta1, beta2, eps, weight_decay, clip;   /* clip <= 0: no clipping */
    uint64_t seed;
    int eval_every, eval_batches, save_every, log_every;
    float mlm_prob;                 /* encoders: share of positions the masked-LM objective predicts */
    int src_len;                    /* encdec: source tokens per example (0: seq_len) */
    float sr_prob;                  /* Shuffle+Random: shuffle probability (and replace probability of the rest) */
} mhe_train_config;

MHEDEF mhe_train_config mhe_train_config_default(void);
MHEDEF MHE_NODISCARD mhe_status mhe_train_config_set(mhe_train_config *c, const char *key, const char *value, char *err);
MHEDEF MHE_NODISCARD mhe_status mhe_train_config_parse(mhe_train_config *c, const char *text, size_t len, char *err);
MHEDEF MHE_NODISCARD mhe_status mhe_train_config_validate(const mhe_train_config *c, char *err);
MHEDEF int mhe_train_config_field(const mhe_train_config *c, int i, const char **key, char *value, size_t value_len);
/* learning rate at step (0-based) */
MHEDEF float mhe_lr_at(const mhe_train_config *c, int step);

/* The trainer owns AdamW state, the batch RNG and the step counter: all
   that is saved in a checkpoint so a resumed run equals an unbroken one.
   Under MHE_NO_TRAIN only the type remains: the checkpoint writers take
   t == NULL (weights) and refuse a trainer with MHE_ERR_ARG. */
typedef struct mhe_trainer {
    mhe_model *model;
    mhe_train_config tc;
    float *adam_m, *adam_v;
    int step;                       /* steps done */
    mhe_rng rng;
    int *batch_tokens, *batch_targets, *batch_src, *batch_lengths, *batch_labels, *batch_clean;
    float last_loss, last_grad_norm, last_lr;
    char task[16];                  /* the caller's name of what it trains, saved as metadata "task" ("": none) */
    char err[MHE_ERR_LEN];
} mhe_trainer;

#ifndef MHE_NO_TRAIN
/* AdamW (Loshchilov and Hutter 2019, Algorithm 2), PyTorch's ordering:
   p -= lr*wd*p (decay tensors only); m, v moments; bias-corrected step. */
MHEDEF void mhe_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int t);
/* global L2 norm of all gradients; scales them to max_norm when larger
   (max_norm <= 0 only measures). Returns the norm before clipping. */
MHEDEF float mhe_clip_grad_norm(float *g, int64_t n, float max_norm);

MHEDEF MHE_NODISCARD mhe_status mhe_trainer_init(mhe_trainer *t, mhe_model *m, const mhe_train_config *tc);
MHEDEF void mhe_trainer_free(mhe_trainer *t);
/* One step on tc.batch random windows of the token stream data[n]:
   decoder: seq_len+1 tokens, inputs the first seq_len, targets the last;
   encoder: seq_len tokens under the masked-LM objective (mlm_prob);
   encdec: src_len + seq_len tokens, the encoder reads the first src_len and
   the decoder continues the text (its inputs start at the last source token). */
MHEDEF MHE_NODISCARD mhe_status mhe_trainer_step(mhe_trainer *t, const int *data, size_t n);
/* one step of the classification head on tc.batch random examples, each cut to seq_len tokens */
MHEDEF MHE_NODISCARD mhe_status mhe_trainer_step_cls(mhe_trainer *t, const mhe_text_set *s);
/* One Shuffle+Random step (token_head=sr) on tc.batch random windows of
   seq_len tokens of data[n] (word tokens of `words`, or tok_emb rows when
   words is NULL), corrupted by mhe_sr_corrupt with tc.sr_prob; a random
   word is any type of `words` with equal chance (any tok_emb row without
   words). So features of the training lexicon alone keep validation words
   out of training. (Drawing by corpus frequency makes a replaced word look
   like any other word out of context; it learned nothing in 600 steps of a
   small model, where uniform types gave an MCC of 0.44 in 300.) */
MHEDEF MHE_NODISCARD mhe_status mhe_trainer_step_sr(mhe_trainer *t, const int *data, size_t n, const mhe_word_feats *words);
#endif /* MHE_NO_TRAIN */
/* mean loss over up to max_batches batches of consecutive windows of data,
   shaped as mhe_trainer_step shapes them (deterministic; an encoder is
   scored on masked LM with fixed masks at 15 %; src_len 0 means seq_len) */
MHEDEF MHE_NODISCARD mhe_status mhe_evaluate(mhe_model *m, const int *data, size_t n, int batch, int seq_len,
                               int max_batches, float *mean_loss);
MHEDEF MHE_NODISCARD mhe_status mhe_evaluate_s2s(mhe_model *m, const int *data, size_t n, int batch, int src_len, int seq_len,
                                   int max_batches, float *mean_loss);
/* Strided perplexity of a decoder LM (MHE paper sec. 4.5, stride 256 there):
   windows of seq_len tokens moved by stride (1..seq_len); the first window
   scores all its targets, each later one only the targets past the previous
   window's end (its last `stride`), and a final window ending at the text's
   end scores the rest, so every token after the first is scored exactly once
   with at least seq_len - stride tokens of context (fewer only in the first
   window). stride == seq_len is plain consecutive windows. Mean loss over
   every scored token; *n_scored gets their count (may be NULL). */
MHEDEF MHE_NODISCARD mhe_status mhe_evaluate_strided(mhe_model *m, const int *data, size_t n, int batch, int seq_len, int stride,
                                       float *mean_loss, int64_t *n_scored);

/* Per-operation time of the training step (tools/bench/bench_train.c --profile).
   Compiled in only with MHE_PROFILE defined (else mhe_profile_enabled() is
   0 and every figure stays 0). Wall time of each operation class as the
   calling thread sees it (an OpenMP region counts whole), summed since the
   last reset, per phase: forward, backward, and the update (zero_grad,
   clipping, AdamW). One process-wide table: profile one model at a time.
   The decon kinds' and collab's whole branch counts as MHE_OP_ATTN. */
enum { MHE_OP_EMBED = 0, MHE_OP_NORM, MHE_OP_QKV, MHE_OP_ATTN, MHE_OP_WO, MHE_OP_FC1, MHE_OP_ACT, MHE_OP_FC2,
       MHE_OP_RESIDUAL, MHE_OP_HEAD, MHE_OP_LOSS, MHE_OP_ZERO, MHE_OP_CLIP, MHE_OP_ADAMW, MHE_OP_COUNT };
enum { MHE_PHASE_FORWARD = 0, MHE_PHASE_BACKWARD, MHE_PHASE_UPDATE, MHE_PHASE_COUNT };
typedef struct mhe_profile {
    double ms[MHE_PHASE_COUNT][MHE_OP_COUNT];      /* milliseconds */
    int64_t calls[MHE_PHASE_COUNT][MHE_OP_COUNT];
} mhe_profile;
MHEDEF int mhe_profile_enabled(void);
MHEDEF void mhe_profile_reset(void);
MHEDEF void mhe_profile_read(mhe_profile *out);
/* "embed", "norm", "qkv", "attn", "wo", "fc1", "act", "fc2", "residual", "head", "loss", "zero", "clip", "adamw" */
MHEDEF const char *mhe_profile_op_name(int op);

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
    uint64_t offset;             /* of its bytes in the data section */
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
    mhe_arena *arena;            /* parsed by mhe_model_load_arena: tables in the arena, never freed */
    void *storage_;              /* private: one block holding the tables and strings */
    size_t storage_bytes;        /* its size */
    char err[MHE_ERR_LEN];
} mhe_safetensors;

MHEDEF MHE_NODISCARD mhe_status mhe_st_parse(mhe_safetensors *st, const void *buf, size_t size, void *alloc_ctx);
MHEDEF void mhe_st_free(mhe_safetensors *st);
MHEDEF const mhe_st_tensor *mhe_st_find(const mhe_safetensors *st, const char *name);
MHEDEF const char *mhe_st_meta(const mhe_safetensors *st, const char *key);
/* copy a tensor's data as float32 into out[n] (F32 only; checks n == size) */
MHEDEF MHE_NODISCARD mhe_status mhe_st_read_f32(const mhe_safetensors *st, const mhe_st_tensor *t, float *out, int64_t n);
/* the same for an I32 tensor (e.g. an LSH n-gram table) */
MHEDEF MHE_NODISCARD mhe_status mhe_st_read_i32(const mhe_safetensors *st, const mhe_st_tensor *t, int32_t *out, int64_t n);

/* Writer: items are F32 tensors (or I32 ones); metadata is n_meta key/value
   string pairs. A zero-initialised item is F32. */
typedef struct mhe_st_item {
    const char *name;
    int ndim;
    int64_t shape[MHE_ST_MAX_DIMS];
    const float *data;
    int dtype;                   /* MHE_DTYPE_F32 (0, the default), MHE_DTYPE_I32 or MHE_DTYPE_I8 */
    const int32_t *data_i32;     /* the data of an I32 item (data is then unused) */
    const int8_t *data_i8;       /* the data of an I8 item */
    /* items computed while they are written, never held whole (q8 files of
       a large model; a zero-initialised item is none of them): with
       q8_from, rows of q8_cols floats quantized as mhe_q8_quantize does
       with q8_group, an I8 item is the int8 weights and an F32 item their
       scales; with q8_data, an F32 item is q8_data[i] * q8_scale[i / q8_group] */
    const float *q8_from;
    int q8_cols, q8_group;
    const int8_t *q8_data;
    const float *q8_scale;
} mhe_st_item;

/* exact byte size of the file mhe_st_write_mem would produce */
MHEDEF MHE_NODISCARD mhe_status mhe_st_write_size(const mhe_st_item *items, int n_items,
                                    const char *const *meta_keys, const char *const *meta_values,
                                    int n_meta, size_t *out_size, char *err);
MHEDEF MHE_NODISCARD mhe_status mhe_st_write_mem(void *buf, size_t cap, size_t *written,
                                   const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, char *err);
#ifndef MHE_NO_STDIO
/* Output files: one policy for every file mhe writes (checkpoints, gradients,
   and through these calls the mhe tool's exports, CSV and SVG files).
   - The path must name a regular file or nothing: a FIFO, device, socket or
     directory is refused. A symlink is followed and its target replaced.
   - The bytes go to a new temporary file beside the target, TARGET.tmp.PID.N
     (created exclusively, so two writers never share one, and a stale file
     or symlink there is never written through); it is flushed, synced and
     renamed over the target, so the old file is replaced only by a complete
     new one.
   - Every failure names the file and the system's reason (strerror), and
     removes the temporary file. A file-size limit kills a process by
     SIGXFSZ unless it ignores that signal (the mhe tool does); then the
     write fails with EFBIG and is reported like a full disk.
   - On Windows: non-regular files (NUL and CON included) are refused through
     _stat64 and the type of an open handle (symlinks are not followed); the
     rename is MoveFileExA with REPLACE_EXISTING and WRITE_THROUGH (rename()
     there fails over an existing file), which fails, leaving the target as it
     was, while another program holds the target open. */
#define MHE_PATH_LEN 4096
typedef struct {
    FILE *f;                         /* write here between open and commit */
    char target[MHE_PATH_LEN];       /* the file the commit replaces (symlinks followed) */
    char tmp[MHE_PATH_LEN + 48];
    char path[MHE_PATH_LEN];         /* as the caller gave it: what messages name */
    int write_errno;                 /* the reason of a failed mhe_out_write, for the commit's message */
    int slot;                        /* its entry in the list of pending temporary files (-1: none) */
} mhe_out;
/* Interrupted writes: every temporary file an mhe_out holds between open
   and commit or discard is listed (up to MHE_OUT_PENDING at once; more
   are written, but not listed). mhe_out_remove_pending removes the files
   listed and is async-signal-safe (unlink and reads of volatile memory):
   a signal handler calls it before the process dies, so that no
   TARGET.tmp.PID.N outlives an interrupted write. A name is listed before
   its file is created and unlisted after the rename (the unlink of a moved
   name finds nothing: a target is never removed). The list is one per
   process and not thread-safe: one thread writes files. */
#define MHE_OUT_PENDING 8
MHEDEF void mhe_out_remove_pending(void);
/* the checks of mhe_out_open without writing anything: the path is usable
   and a temporary file can be created beside it (call it before a long run) */
MHEDEF MHE_NODISCARD mhe_status mhe_out_check(const char *path, char *err);
MHEDEF MHE_NODISCARD mhe_status mhe_out_open(mhe_out *o, const char *path, char *err);
/* n bytes to o->f; 0 on failure, which the commit then reports */
MHEDEF int mhe_out_write(mhe_out *o, const void *p, size_t n);
/* flush, sync, close and rename over the target; on failure the target is
   unchanged and the temporary file gone */
MHEDEF MHE_NODISCARD mhe_status mhe_out_commit(mhe_out *o, char *err);
/* abandons an open output: the temporary file is removed, the target untouched */
MHEDEF void mhe_out_discard(mhe_out *o);
/* a safetensors file written through mhe_out (the policy above) */
MHEDEF MHE_NODISCARD mhe_status mhe_st_save_file(const char *path, const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, void *alloc_ctx, char *err);
/* read a whole file into a fresh MHE_MALLOC'd buffer */
MHEDEF MHE_NODISCARD mhe_status mhe_read_file(const char *path, void **buf, size_t *size, void *alloc_ctx, char *err);
#endif

/* Model checkpoints. The file holds the parameters under their names and the
   config in __metadata__ ("format": "mhe-1" plus every config field). A
   trainer checkpoint adds "optim.m.<name>", "optim.v.<name>" tensors and the
   metadata "step", "rng", "train.<field>" and, when the trainer names it,
   "task" (what the run trains: the mhe tool's lm, cls or sr). */
#define MHE_FORMAT "mhe-1"
MHEDEF MHE_NODISCARD mhe_status mhe_model_load_mem(mhe_model *m, const void *buf, size_t size, void *alloc_ctx);
#ifndef MHE_NO_TRAIN
/* restore optimizer state, step and RNG from a trainer checkpoint buffer
   (the trainer's config stays; its batch and seq_len must match the file's) */
MHEDEF MHE_NODISCARD mhe_status mhe_trainer_load_mem(mhe_trainer *t, const void *buf, size_t size);
#endif /* MHE_NO_TRAIN */
/* bytes of the model (or trainer, when t != NULL) checkpoint, and writing it to memory */
MHEDEF MHE_NODISCARD mhe_status mhe_checkpoint_size(const mhe_model *m, const mhe_trainer *t, size_t *size);
MHEDEF MHE_NODISCARD mhe_status mhe_checkpoint_write_mem(const mhe_model *m, const mhe_trainer *t, void *buf, size_t cap, size_t *written);
/* q8 checkpoints: weights only, for inference. The matrices of linear
   layers (attention projections, W^O, the MLP, mlp's gate/up/down, linear's
   W_hidden, collab's content bias, untied LM and classification heads) and
   a vocabulary's token embedding (the tied LM head) are I8 tensors under
   their usual names, each with an F32 `<name>_scale` [rows, cols / group]
   (group 0: one scale per row, [rows, 1]; a row the group does not divide
   also gets one scale). Everything else (position tables, hash embeddings,
   norms, biases, head embeddings, collab's mixing, linear's W_seq) stays
   F32. Metadata adds "quant": "q8" and "quant.group". The F32 tensors come
   first, so an image at a 4-byte aligned address loads in place. The
   writers quantize as they write (no int8 copy of the model is made). The
   loaders read it (mhe_model_load_arena in place only; a file whose token
   embedding is F32 loads too) and keep no float copy of int8 weights; the
   model refuses training (MHE_ERR_FORMAT). */
MHEDEF MHE_NODISCARD mhe_status mhe_q8_checkpoint_size(const mhe_model *m, int group, size_t *size);
MHEDEF MHE_NODISCARD mhe_status mhe_q8_checkpoint_write_mem(const mhe_model *m, int group, void *buf, size_t cap, size_t *written);
/* MHE_OK when group is 0 or divides the rows of every matrix a q8 checkpoint
   quantizes, so every one of them gets exactly `group` weights per scale;
   else MHE_ERR_ARG naming the first that it does not (m->err) */
MHEDEF MHE_NODISCARD mhe_status mhe_q8_group_check(mhe_model *m, int group);
/* MHE_ERR_NONFINITE, naming the tensor and element in m->err, when a weight
   is NaN or infinite (loading does not check: a caller that computes with
   the weights does; mhe_trainer_load_mem refuses non-finite moments) */
MHEDEF MHE_NODISCARD mhe_status mhe_model_check_finite(mhe_model *m);
#ifndef MHE_NO_STDIO
/* Loading for inference: the header is read into memory and every tensor
   from the file straight into the model's block (the file is never held
   whole; a trainer checkpoint's optimizer moments are skipped), with no
   gradient block until mhe_trainer_init or mhe_model_backward asks for one.
   The weights are read, not mapped: a file changed or truncated after the
   load cannot affect the model, and one cut during it fails the load
   (MHE_ERR_TRUNCATED). mhe_model_load_mem does the same from a buffer. */
MHEDEF MHE_NODISCARD mhe_status mhe_model_load(mhe_model *m, const char *path, void *alloc_ctx);
#ifndef MHE_NO_TRAIN
MHEDEF MHE_NODISCARD mhe_status mhe_trainer_load(mhe_trainer *t, const char *path);
#endif /* MHE_NO_TRAIN */
/* atomic (mhe_out); t may be NULL for weights only. A non-finite weight or
   moment is refused (MHE_ERR_NONFINITE) before the disk is touched, so a
   diverged state never replaces a good checkpoint */
MHEDEF MHE_NODISCARD mhe_status mhe_checkpoint_save(const mhe_model *m, const mhe_trainer *t, const char *path);
/* a q8 checkpoint (see mhe_q8_checkpoint_write_mem), atomic (mhe_out) */
MHEDEF MHE_NODISCARD mhe_status mhe_q8_checkpoint_save(const mhe_model *m, int group, const char *path);
#ifndef MHE_NO_TRAIN
/* the gradients of the last backward, as a safetensors file with `loss` */
MHEDEF MHE_NODISCARD mhe_status mhe_grads_save(const mhe_model *m, const char *path);
#endif /* MHE_NO_TRAIN */
#endif

/* ======================================================================== */
/* 11. metrics                                                              */
/* ======================================================================== */
/* mean loss over the counted tokens -> perplexity */
MHEDEF double mhe_perplexity(double mean_loss);
/* Performance retention ratio against MHA (MHE paper sec. 4.6):
   score/score_mha for a direct indicator (accuracy, BLEU), and
   1 - (score - score_mha)/score_mha for an inverse one (perplexity, inverse = 1). */
MHEDEF double mhe_prr(double score, double score_mha, int inverse);
/* Performance elasticity of parameters against SHA (MHE paper sec. 4.6):
   ((score/score_sha) - 1) / ((params/params_sha) - 1), negated for an inverse
   indicator: the relative gain in score per relative gain in parameters. */
MHEDEF double mhe_peop(double score, double params, double score_sha, double params_sha, int inverse);
/* Classification metrics from a K x K confusion matrix conf[truth * K + prediction]:
   accuracy, macro-averaged F1 (over the classes that occur in truth or
   prediction) and Matthews' correlation coefficient in its multi-class form
   (Gorodkin 2004; the usual MCC for K = 2). */
typedef struct mhe_cls_metrics { int64_t n; double loss, accuracy, macro_f1, mcc; } mhe_cls_metrics;
MHEDEF void mhe_cls_metrics_from_confusion(const int64_t *conf, int K, mhe_cls_metrics *out);
/* loss and metrics of the classification head over every example of s (cut to seq_len tokens) */
MHEDEF MHE_NODISCARD mhe_status mhe_evaluate_cls(mhe_model *m, const mhe_text_set *s, int batch, int seq_len, mhe_cls_metrics *out);
/* loss and 3-way metrics (accuracy, macro-F1, MCC over original/shuffled/
   random) of the S+R head on up to max_batches batches of consecutive
   windows of data, corrupted with prob under a fixed seed (deterministic;
   random words: the types of `words`, as in training) */
MHEDEF MHE_NODISCARD mhe_status mhe_evaluate_sr(mhe_model *m, const int *data, size_t n, const mhe_word_feats *words, int batch,
                                  int seq_len, int max_batches, float prob, mhe_cls_metrics *out);
/* entropy (nats) of the unigram distribution of data: the loss of the best
   context-free predictor, a baseline a trained LM must beat (-1: no memory) */
MHEDEF double mhe_unigram_entropy(const int *data, size_t n, int vocab);

/* Attention-pattern indicators (thesis sec. 4.4.4) of one head's map A
   [L, L] (row t: the weights query t gives keys 0..L-1; row stride ld):
   out[MHE_IND_ENTROPY]  mean row entropy -sum_j a log a (nats)
   out[MHE_IND_ENTROPY_N] the same, each row divided by log(keys it sees: t + 1 when causal, else L)
                         (1: uniform, mean pooling; rows that see one key are left out)
   out[MHE_IND_CONC]     ||A||_F
   out[MHE_IND_CONC_N]   ||A||_F / sqrt(L): the root mean of sum_j a^2 per row (1: every row one-hot)
   out[MHE_IND_SINK]     sum_t A[t, 0] / L
   out[MHE_IND_LOCFOC0 + N] sum_t A[t, t - N] / (L - N), N = 0..3 (0 when L <= N)
   Head diversity needs every head of a layer: mhe_attn_headdiv. */
enum { MHE_IND_ENTROPY = 0, MHE_IND_ENTROPY_N, MHE_IND_CONC, MHE_IND_CONC_N, MHE_IND_HEADDIV, MHE_IND_SINK,
       MHE_IND_LOCFOC0, MHE_IND_LOCFOC1, MHE_IND_LOCFOC2, MHE_IND_LOCFOC3, MHE_IND_COUNT };
MHEDEF void mhe_attn_map_indicators(const float *A, int L, int ld, int causal, double *out);
/* HeadDiv: the mean, over the entries a query may see (causal: the L(L+1)/2
   of the lower triangle, the thesis's 2 / (L (1 + L)); else all L^2), of the
   standard deviation across the n heads' maps (map h at A + h * head_stride) */
MHEDEF double mhe_attn_headdiv(const float *A, int n, size_t head_stride, int L, int ld, int causal);
MHEDEF const char *mhe_ind_name(int ind);

/* Indicators of every layer and head of the main stack, averaged over the
   sequences of evaluation batches. Layers without an attention map (fnet,
   linear, and layers skipped by skip_attn) have has_map 0 and NaN values;
   an mlp layer's map is the identity (each token sees only itself). */
typedef struct mhe_indicators {
    int n_layers, n_heads;
    int kind[MHE_MAX_LAYERS], has_map[MHE_MAX_LAYERS];
    int64_t sequences;
    double loss;                    /* mean loss over the batches */
    double *v;                      /* [n_layers][n_heads + 1][MHE_IND_COUNT]; head n_heads: the mean of the heads */
    void *alloc_ctx;
} mhe_indicators;
/* Runs the model on its reference path (fused_attention = 0, so every
   layer's probabilities are materialised), over up to max_batches batches
   of consecutive windows of data, as mhe_evaluate; restores the model. */
MHEDEF MHE_NODISCARD mhe_status mhe_indicators_eval(mhe_model *m, const int *data, size_t n, int batch, int seq_len,
                                      int max_batches, mhe_indicators *out);
MHEDEF void mhe_indicators_free(mhe_indicators *ind);
MHEDEF double mhe_indicator(const mhe_indicators *ind, int layer, int head, int which);   /* head -1: mean */
/* the probabilities of layer l, head h for sequence 0 of the last forward on
   the reference path (probs [T, T]); mlp: the identity. 0 when there is none. */
MHEDEF int mhe_attn_probs(mhe_model *m, int layer, int head, float *probs);

/* ======================================================================== */
/* 12. inference: KV cache and sampling                                     */
/* ======================================================================== */
/* Keys and values of every layer for the tokens seen so far. What a layer
   keeps depends on its kind: n heads of K and V for mha, kv_groups heads for
   gqa, one head for mqa, sha and the MHE kinds (their per-head maps are
   applied on the fly), one tensor for skv (V is K) and the layer input for
   el-att (K = V = the input). An encoder-decoder model also keeps, per
   decoder layer, the cross-attention K and V of the encoded source
   (mhe_kv_cache_encode computes them once). */
typedef struct mhe_kv_cache {
    int max_len, len;               /* capacity and tokens cached */
    int n_layers;                   /* blocks of the model (all stacks) */
    int k_width[MHE_MAX_LAYERS], v_width[MHE_MAX_LAYERS];   /* floats per token (v 0: V is K) */
    float *k[MHE_MAX_LAYERS], *v[MHE_MAX_LAYERS];           /* [max_len, width] each */
    int src_len;                    /* encdec: source tokens encoded (0: none yet) */
    int cross_width[MHE_MAX_LAYERS];                        /* encdec: floats per source token (K then V) */
    float *cross[MHE_MAX_LAYERS];   /* [max_seq_len, cross_width] per decoder layer */
    float *scratch;                 /* the activations of up to prefill_rows tokens */
    float *logits;                  /* [V] */
    int prefill_rows;               /* tokens mhe_prefill runs at once (1 in an arena: a token at a time) */
    size_t bytes;                   /* of the self-attention K/V rows */
    size_t bytes_per_token;         /* self-attention K/V floats per token, all layers, in bytes */
    size_t cross_bytes;             /* of the cross-attention K/V of a full-length source */
    /* Layers without a growing K/V cache (thesis sec. 4.15-4.16): taylor and
       nonapprox keep a recurrent state of fixed size; rndemb-qk and
       fixedseq-qk keep V rows and share precomputed attention maps. */
    float *state[MHE_MAX_LAYERS];   /* taylor: S, z per head; nonapprox: max, sum, numerator per head;
                                       rndemb-qk, fixedseq-qk: maps [n][max_len (max_len + 1) / 2] */
    size_t state_floats[MHE_MAX_LAYERS];
    size_t layer_bytes[MHE_MAX_LAYERS];   /* self-attention bytes of one sequence at max_len: K/V rows + state */
    size_t shared_bytes[MHE_MAX_LAYERS];  /* bytes shared by every sequence (the precomputed maps) */
    int maps_len;                   /* positions the maps were computed for (0: not yet) */
    void *block;
    void *alloc_ctx;
    mhe_arena *arena;               /* mhe_kv_cache_init_arena: the block is in this arena */
} mhe_kv_cache;

/* The heap cache's scratch holds MHE_PREFILL_ROWS tokens (or max_len, if
   fewer) so that mhe_prefill reads each weight once per that many prompt
   tokens; an arena cache holds one. */
#ifndef MHE_PREFILL_ROWS
#define MHE_PREFILL_ROWS 64
#endif
MHEDEF MHE_NODISCARD mhe_status mhe_kv_cache_init(mhe_kv_cache *c, const mhe_model *m, int max_len, void *alloc_ctx);
/* bytes (float32) one sequence keeps for a self-attention layer of `kind`
   after len tokens: K/V rows and recurrent state; *shared (may be NULL) gets
   what all sequences share (the precomputed maps of rndemb-qk, fixedseq-qk).
   mhe_kv_cache_init sizes every layer with it. */
MHEDEF size_t mhe_attn_cache_bytes(const mhe_config *c, int kind, int len, size_t *shared);
MHEDEF void mhe_kv_cache_free(mhe_kv_cache *c);

/* Embedded inference from one buffer. mhe_model_load_arena loads a
   checkpoint for inference only (no gradient block, so training refuses it)
   with the parsed header, the parameters and, for an encoder-decoder, the
   activations of encoding a source all taken from the arena; with
   mhe_kv_cache_init_arena the cache comes from it too, and decoding then
   allocates nothing. With MHE_LOAD_IN_PLACE the weights are not copied: the
   tensors point into the checkpoint image, which must outlive the model, be
   4-byte aligned and run on a little-endian CPU (weights can stay in flash).
   mhe_inference_memory_needed says how many bytes an arena (mhe_arena_init
   over your buffer) must hold for a checkpoint, a cache of max_len tokens
   and those flags; it parses the header with MHE_MALLOC, so run it on the
   host (`mhe export` prints it) or before the allocation-free phase. */
#define MHE_LOAD_IN_PLACE 1
MHEDEF MHE_NODISCARD mhe_status mhe_inference_memory_needed(const void *ckpt, size_t size, int max_len, int flags, size_t *bytes);
MHEDEF MHE_NODISCARD mhe_status mhe_model_load_arena(mhe_model *m, const void *ckpt, size_t size, mhe_arena *arena, int flags);
MHEDEF MHE_NODISCARD mhe_status mhe_kv_cache_init_arena(mhe_kv_cache *c, const mhe_model *m, int max_len, mhe_arena *arena);
/* encdec: run the encoder over src[Ts] and cache every decoder layer's
   cross-attention K and V; empties the self-attention cache */
MHEDEF MHE_NODISCARD mhe_status mhe_kv_cache_encode(mhe_model *m, mhe_kv_cache *c, const int *src, int Ts);
/* run one token at position c->len; c->logits gets the next-token logits */
MHEDEF MHE_NODISCARD mhe_status mhe_decode_step(mhe_model *m, mhe_kv_cache *c, int token);
/* run tokens[0..n) at positions c->len, ... (a prompt) in chunks of
   c->prefill_rows, each weight read once per chunk; c->logits gets the
   logits after the last. The same cache, logits within float rounding of n
   decode steps (the GEMMs sum in another order); tokens and room are
   checked before anything changes. */
MHEDEF MHE_NODISCARD mhe_status mhe_prefill(mhe_model *m, mhe_kv_cache *c, const int *tokens, int n);
/* sample from logits[V]: temperature <= 0 is greedy; top_k <= 0 keeps all */
MHEDEF int mhe_sample(const float *logits, int V, float temperature, int top_k, mhe_rng *rng);

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
#include <stdio.h>   /* snprintf for messages; files only without MHE_NO_STDIO */
#include <stdarg.h>
#include <stdlib.h>   /* qsort in the safetensors checks */
#ifndef MHE_NO_STDIO
#include <errno.h>
#include <signal.h>             /* sig_atomic_t: the pending temporary files */
#if defined(_WIN32)
#include <io.h>                 /* _commit, _fileno, _open */
#include <fcntl.h>
#include <sys/stat.h>
#include <process.h>            /* _getpid */
/* from kernel32, declared here rather than through <windows.h>, whose macros
   (min, max, near, small ...) would leak into the including file */
#ifdef __cplusplus
#define MHE__KERNEL32 extern "C" __declspec(dllimport)
#else
#define MHE__KERNEL32 __declspec(dllimport)
#endif
MHE__KERNEL32 int __stdcall MoveFileExA(const char *, const char *, unsigned long);
MHE__KERNEL32 unsigned long __stdcall GetLastError(void);
typedef long long mhe__off;     /* long is 32 bits there: 64-bit offsets for files over 2 GB */
#define MHE__FSEEK _fseeki64
#define MHE__FTELL _ftelli64
#elif defined(__unix__) || defined(__APPLE__)
#include <unistd.h>             /* fsync, getpid, readlink */
#include <fcntl.h>              /* open with O_EXCL */
#include <sys/stat.h>           /* lstat: what an output path names */
#define MHE__HAVE_FSYNC 1
#if defined(__STRICT_ANSI__) && !defined(__cplusplus) && !defined(_POSIX_C_SOURCE) && \
    !defined(_XOPEN_SOURCE) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_BSD_SOURCE)
extern int fileno(FILE *);      /* POSIX, but hidden by strict -std=c99 headers */
#endif
/* hidden by strict -std=c99 headers, and by a _POSIX_C_SOURCE older than 2001 */
#if !defined(__cplusplus) && !defined(_GNU_SOURCE) && !defined(_DEFAULT_SOURCE) && !defined(_BSD_SOURCE) && \
    !defined(_XOPEN_SOURCE) && (defined(__STRICT_ANSI__) || defined(_POSIX_C_SOURCE)) && \
    (!defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200112L)
extern FILE *fdopen(int, const char *);
extern int lstat(const char *, struct stat *);
extern ssize_t readlink(const char *, char *, size_t);
#endif
#endif
#if !defined(_WIN32)
typedef long mhe__off;          /* a file offset: what ftell returns */
#define MHE__FSEEK fseek
#define MHE__FTELL ftell
#endif
#endif
#ifdef MHE_PROFILE
#include <time.h>   /* clock_gettime for the per-operation profile */
#endif
#ifdef _OPENMP
#include <omp.h>
#define MHE__OMP(...) _Pragma(#__VA_ARGS__)   /* thread pragmas vanish without -fopenmp */
#else
#define MHE__OMP(...)
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

/* a status that cannot be an error here (the arguments were checked, the
   model's scratch is bound): asserted, not dropped */
static void mhe__must(mhe_status s) { MHE_ASSERT(s == MHE_OK); (void)s; }

/* Lets gcc if-convert the quiet selects of mhe__exp and vectorise the loops
   that call it without -ffast-math; results are bit for bit the same. */
#if defined(__GNUC__) && !defined(__clang__)
#define MHE__VECTORISE __attribute__((optimize("no-trapping-math", "vect-cost-model=cheap")))
#else
#define MHE__VECTORISE
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
    case MHE_ERR_CONVERGE: return "did not converge";
    case MHE_ERR_DEVICE: return "CUDA device error";
    default: return "unknown status";
    }
}

/* printf into a fixed message buffer (err may be NULL); returns the status */
static mhe_status mhe__fail(char *err, mhe_status st, const char *fmt, ...)
#if defined(__MINGW_PRINTF_FORMAT)
    __attribute__((format(__MINGW_PRINTF_FORMAT, 3, 4)))   /* mingw: gnu_printf when its C99 stdio is on */
#elif defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static mhe_status mhe__fail(char *err, mhe_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, MHE_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* finite test on the bits, so -ffast-math (-ffinite-math-only) cannot
   compile it away the way it removes isnan() and x != x */
static int mhe__is_finite(float x) {
    union { float f; uint32_t u; } b;
    b.f = x;
    return (b.u & 0x7f800000u) != 0x7f800000u;
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

/* an object's memory: from its arena when it has one (nothing is freed
   there), else through the allocator hooks */
static void *mhe__malloc(void *ctx, mhe_arena *arena, size_t n) {
    return arena ? mhe_arena_alloc(arena, n) : MHE_MALLOC(ctx, n);
}
static void mhe__free(void *ctx, mhe_arena *arena, void *p) {
    if (!arena && p) MHE_FREE(ctx, p);
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
/* GEMM, C = alpha*op(A)*op(B) + beta*C, row-major.

   Design: the Goto/BLIS scheme, with the roles of A and B swapped because C
   is row-major, so the vectors run along N.
     for ib in M step MC          rows of C whose A block stays in L3 and
                                  whose C block stays in L2 (and in the TLB)
       for jc in N step NC
         for pc in K step KC      pack op(B)[pc:+KC, jc:+NC] -> bp (L2)
           for ic in ib step MR   pack op(A)[ic:+MR, pc:+KC] -> ap (L1)
             for jr in NC step NR micro-kernel: C[MR,NR] (+)= ap * bp panel
   Packing absorbs the transposes, so all four trans cases run one kernel.
   The micro-kernel keeps an MR x NR tile of C in registers; per k it loads
   NR floats of B and broadcasts MR floats of A. M == 1 and N == 1 go to a
   matrix-vector path that reads the matrix once, without packing.

   Determinism: every element of C is computed by the same sequence of
   operations over k = 0..K-1 (K cut into the same KC blocks), whatever
   tile, mask or thread computes it, so 1 and N threads give bit-identical
   results.

   Memory: each thread packs into its slice of the bound mhe_scratch,
   KC*NC + MR*KC floats = (128*384 + 12*128) * 4 bytes = 198 KiB (AVX-512;
   less for the other kernels); unbound, a call allocates its slices, and if
   that fails it runs an unpacked loop. The matrix-vector path needs no
   packing (12 KiB of stack). */

#if !defined(MHE_NO_SIMD) && defined(__AVX512F__)
#define MHE__GEMM_AVX512 1
#elif !defined(MHE_NO_SIMD) && defined(__AVX2__) && defined(__FMA__)
#define MHE__GEMM_AVX2 1
#elif !defined(MHE_NO_SIMD) && defined(__aarch64__) && defined(__ARM_NEON)
#define MHE__GEMM_NEON 1
#elif !defined(MHE_NO_SIMD) && defined(__wasm_simd128__)
#define MHE__GEMM_WASM 1
#endif
#if defined(MHE__GEMM_AVX512) || defined(MHE__GEMM_AVX2)
#include <immintrin.h>
#endif
#if defined(MHE__GEMM_NEON)
#include <arm_neon.h>
#endif
#if defined(MHE__GEMM_WASM)
#include <wasm_simd128.h>
#endif

/* MR x NR register tile: AVX-512 12 rows x 2 zmm = 24 accumulators (of 32
   registers); AVX2 6 x 2 ymm = 12 (of 16); NEON (AArch64) 8 rows x 3 q =
   24 (of 32); WebAssembly SIMD128 4 rows x 2 v128 = 8 (engines map v128
   to 16 SSE registers on x86-64: wider tiles spilled, measured); scalar 4 x
   16 floats. */
#if defined(MHE__GEMM_AVX512)
#define MHE__GEMM_MR 12
#define MHE__GEMM_NR 32
#elif defined(MHE__GEMM_AVX2)
#define MHE__GEMM_MR 6
#define MHE__GEMM_NR 16
#elif defined(MHE__GEMM_NEON)
#define MHE__GEMM_MR 8
#define MHE__GEMM_NR 12
#elif defined(MHE__GEMM_WASM)
#define MHE__GEMM_MR 4
#define MHE__GEMM_NR 8
#else
#define MHE__GEMM_MR 4
#define MHE__GEMM_NR 16
#endif
/* KC x NR floats of B (16 KiB) stream from L2 through each kernel call, next
   to an A sliver of MR x KC (6 KiB) that stays in L1 for NC/NR calls; the
   packed block of B (KC x NC = 192 KiB) stays in L2 (1 MiB per core), with
   room for the C block (MC x NC). A wide NC means few repacks of A (once per
   NC columns), which costs more than the extra passes over C of a short KC.
   MC bounds the rows swept per B block so that A and C blocks stay cached
   and their 4 KiB pages stay in the TLB. Tuned on Zen 5 (AVX-512). */
#define MHE__GEMM_KC 128
#define MHE__GEMM_NC 384
#define MHE__GEMM_MC 528

#if defined(__GNUC__)
#define MHE__ALIGNED64 __attribute__((aligned(64)))
#define MHE__FORCE_INLINE static inline __attribute__((always_inline))
#else
#define MHE__ALIGNED64
#define MHE__FORCE_INLINE static inline
#endif

/* ---- micro-kernels ------------------------------------------------------
   c[mr, nr] (row stride ldc) = alpha * a*b + beta * c, where a is an MR-strided
   sliver (a[k*MR + i]) and b an NR-wide zero-padded panel (b[k*NR + j]).
   beta == 0 does not read c. Called with beta = 1 for the second and later
   KC blocks, where fma(alpha, acc, 1*c) is the plain accumulation.
   The SIMD kernels name every accumulator (arrays indexed in a loop end up
   in memory unless the compiler unrolls fully, which clang does not
   promise): MHE__GEMM_ROWS_n(X) expands X(0) .. X(n-1), and one kernel is
   instantiated per row count so edge rows cost only what they compute. */
#define MHE__GEMM_ROWS_1(X) X(0)
#define MHE__GEMM_ROWS_2(X) MHE__GEMM_ROWS_1(X) X(1)
#define MHE__GEMM_ROWS_3(X) MHE__GEMM_ROWS_2(X) X(2)
#define MHE__GEMM_ROWS_4(X) MHE__GEMM_ROWS_3(X) X(3)
#define MHE__GEMM_ROWS_5(X) MHE__GEMM_ROWS_4(X) X(4)
#define MHE__GEMM_ROWS_6(X) MHE__GEMM_ROWS_5(X) X(5)
#define MHE__GEMM_ROWS_7(X) MHE__GEMM_ROWS_6(X) X(6)
#define MHE__GEMM_ROWS_8(X) MHE__GEMM_ROWS_7(X) X(7)
#define MHE__GEMM_ROWS_9(X) MHE__GEMM_ROWS_8(X) X(8)
#define MHE__GEMM_ROWS_10(X) MHE__GEMM_ROWS_9(X) X(9)
#define MHE__GEMM_ROWS_11(X) MHE__GEMM_ROWS_10(X) X(10)
#define MHE__GEMM_ROWS_12(X) MHE__GEMM_ROWS_11(X) X(11)

typedef void (*mhe__gemm_kernel_fn)(int nr, int kc, const float *a, const float *b,
                                    float *c, int ldc, float alpha, float beta);

#if defined(MHE__GEMM_AVX512)
/* one row of the tile: 2 zmm = 32 columns, the lanes past nr masked off */
MHE__FORCE_INLINE void mhe__gemm_store512(float *c, __m512 x0, __m512 x1, __mmask16 m0,
                                          __mmask16 m1, float alpha, float beta) {
    __m512 va = _mm512_set1_ps(alpha);
    if (beta == 0.0f) {
        x0 = _mm512_mul_ps(va, x0);
        x1 = _mm512_mul_ps(va, x1);
    } else {
        __m512 vb = _mm512_set1_ps(beta);
        x0 = _mm512_fmadd_ps(va, x0, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m0, c)));
        x1 = _mm512_fmadd_ps(va, x1, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16)));
    }
    _mm512_mask_storeu_ps(c, m0, x0);
    _mm512_mask_storeu_ps(c + 16, m1, x1);
}
#define MHE__K512_ZERO(i) __m512 x##i##a = _mm512_setzero_ps(), x##i##b = _mm512_setzero_ps();
#define MHE__K512_PREF(i) _mm_prefetch((const char *)(c + (size_t)(i) * ldc), _MM_HINT_T0); \
    _mm_prefetch((const char *)(c + (size_t)(i) * ldc + 16), _MM_HINT_T0);
#define MHE__K512_FMA(i) { __m512 ai = _mm512_set1_ps(a[i]); \
    x##i##a = _mm512_fmadd_ps(ai, b0, x##i##a); x##i##b = _mm512_fmadd_ps(ai, b1, x##i##b); }
#define MHE__K512_STORE(i) mhe__gemm_store512(c + (size_t)(i) * ldc, x##i##a, x##i##b, m0, m1, alpha, beta);
#define MHE__K512_DEF(n) \
static void mhe__gemm_k##n(int nr, int kc, const float *a, const float *b, \
                           float *c, int ldc, float alpha, float beta) { \
    MHE__GEMM_ROWS_##n(MHE__K512_ZERO) \
    __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1); \
    __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1); \
    int k; \
    MHE__GEMM_ROWS_##n(MHE__K512_PREF) \
    for (k = 0; k < kc; k++) { \
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16); \
        MHE__GEMM_ROWS_##n(MHE__K512_FMA) \
        a += MHE__GEMM_MR; \
        b += MHE__GEMM_NR; \
    } \
    MHE__GEMM_ROWS_##n(MHE__K512_STORE) \
}
#define MHE__KDEF(n) MHE__K512_DEF(n)

#elif defined(MHE__GEMM_AVX2)
/* one row of the tile: 2 ymm = 16 columns; masked only on edge tiles, as
   vmaskmovps stores are slow on some cores (Zen 2/3) */
MHE__FORCE_INLINE void mhe__gemm_store256(float *c, __m256 x0, __m256 x1, int nr, __m256i m0,
                                          __m256i m1, float alpha, float beta) {
    __m256 va = _mm256_set1_ps(alpha);
    if (nr == 16) {
        if (beta == 0.0f) {
            x0 = _mm256_mul_ps(va, x0);
            x1 = _mm256_mul_ps(va, x1);
        } else {
            __m256 vb = _mm256_set1_ps(beta);
            x0 = _mm256_fmadd_ps(va, x0, _mm256_mul_ps(vb, _mm256_loadu_ps(c)));
            x1 = _mm256_fmadd_ps(va, x1, _mm256_mul_ps(vb, _mm256_loadu_ps(c + 8)));
        }
        _mm256_storeu_ps(c, x0);
        _mm256_storeu_ps(c + 8, x1);
        return;
    }
    if (beta == 0.0f) {
        x0 = _mm256_mul_ps(va, x0);
        x1 = _mm256_mul_ps(va, x1);
    } else {
        __m256 vb = _mm256_set1_ps(beta);
        x0 = _mm256_fmadd_ps(va, x0, _mm256_mul_ps(vb, _mm256_maskload_ps(c, m0)));
        x1 = _mm256_fmadd_ps(va, x1, _mm256_mul_ps(vb, _mm256_maskload_ps(c + 8, m1)));
    }
    _mm256_maskstore_ps(c, m0, x0);
    _mm256_maskstore_ps(c + 8, m1, x1);
}
#define MHE__K256_ZERO(i) __m256 x##i##a = _mm256_setzero_ps(), x##i##b = _mm256_setzero_ps();
#define MHE__K256_PREF(i) _mm_prefetch((const char *)(c + (size_t)(i) * ldc), _MM_HINT_T0);
#define MHE__K256_FMA(i) { __m256 ai = _mm256_broadcast_ss(a + (i)); \
    x##i##a = _mm256_fmadd_ps(ai, b0, x##i##a); x##i##b = _mm256_fmadd_ps(ai, b1, x##i##b); }
#define MHE__K256_STORE(i) \
    mhe__gemm_store256(c + (size_t)(i) * ldc, x##i##a, x##i##b, nr, m0, m1, alpha, beta);
#define MHE__K256_DEF(n) \
static void mhe__gemm_k##n(int nr, int kc, const float *a, const float *b, \
                           float *c, int ldc, float alpha, float beta) { \
    MHE__GEMM_ROWS_##n(MHE__K256_ZERO) \
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); \
    __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lane); \
    __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8), lane); \
    int k; \
    MHE__GEMM_ROWS_##n(MHE__K256_PREF) \
    for (k = 0; k < kc; k++) { \
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8); \
        MHE__GEMM_ROWS_##n(MHE__K256_FMA) \
        a += MHE__GEMM_MR; \
        b += MHE__GEMM_NR; \
    } \
    MHE__GEMM_ROWS_##n(MHE__K256_STORE) \
}
#define MHE__KDEF(n) MHE__K256_DEF(n)

#elif defined(MHE__GEMM_NEON)
/* one row of the tile: 3 q registers = 12 columns; an edge tile goes
   through a buffer, with the same fused multiply-add per element */
MHE__FORCE_INLINE void mhe__gemm_store_neon(float *c, float32x4_t x0, float32x4_t x1, float32x4_t x2, int nr,
                                            float alpha, float beta) {
    float32x4_t va = vdupq_n_f32(alpha);
    float t[12];
    int j;
    if (nr == 12) {
        if (beta == 0.0f) {
            vst1q_f32(c, vmulq_f32(va, x0));
            vst1q_f32(c + 4, vmulq_f32(va, x1));
            vst1q_f32(c + 8, vmulq_f32(va, x2));
        } else {
            float32x4_t vb = vdupq_n_f32(beta);
            vst1q_f32(c, vfmaq_f32(vmulq_f32(vb, vld1q_f32(c)), va, x0));
            vst1q_f32(c + 4, vfmaq_f32(vmulq_f32(vb, vld1q_f32(c + 4)), va, x1));
            vst1q_f32(c + 8, vfmaq_f32(vmulq_f32(vb, vld1q_f32(c + 8)), va, x2));
        }
        return;
    }
    vst1q_f32(t, x0); vst1q_f32(t + 4, x1); vst1q_f32(t + 8, x2);
    for (j = 0; j < nr; j++) c[j] = beta == 0.0f ? alpha * t[j] : fmaf(alpha, t[j], beta * c[j]);
}
#define MHE__KNEON_ZERO(i) float32x4_t x##i##a = vdupq_n_f32(0.0f), x##i##b = x##i##a, x##i##c = x##i##a;
#define MHE__KNEON_FMA(i) { float32x4_t ai = vdupq_n_f32(a[i]); \
    x##i##a = vfmaq_f32(x##i##a, b0, ai); \
    x##i##b = vfmaq_f32(x##i##b, b1, ai); \
    x##i##c = vfmaq_f32(x##i##c, b2, ai); }
#define MHE__KNEON_STORE(i) \
    mhe__gemm_store_neon(c + (size_t)(i) * ldc, x##i##a, x##i##b, x##i##c, nr, alpha, beta);
#define MHE__KNEON_DEF(n) \
static void mhe__gemm_k##n(int nr, int kc, const float *a, const float *b, \
                           float *c, int ldc, float alpha, float beta) { \
    MHE__GEMM_ROWS_##n(MHE__KNEON_ZERO) \
    int k; \
    for (k = 0; k < kc; k++) { \
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8); \
        MHE__GEMM_ROWS_##n(MHE__KNEON_FMA) \
        a += MHE__GEMM_MR; \
        b += MHE__GEMM_NR; \
    } \
    MHE__GEMM_ROWS_##n(MHE__KNEON_STORE) \
}
#define MHE__KDEF(n) MHE__KNEON_DEF(n)

#elif defined(MHE__GEMM_WASM)
/* one row of the tile: 2 v128 = 8 columns; an edge tile goes through a
   buffer. SIMD128 has no fused multiply-add (relaxed SIMD is not in every
   browser), so each step is a multiply, then an add: the portable kernel's
   bits (the browser page's test compares them with a MHE_NO_SIMD build) */
MHE__FORCE_INLINE void mhe__gemm_store_wasm(float *c, v128_t x0, v128_t x1, int nr, float alpha, float beta) {
    v128_t va = wasm_f32x4_splat(alpha);
    float t[8];
    int j;
    if (nr == 8) {
        if (beta == 0.0f) {
            wasm_v128_store(c, wasm_f32x4_mul(va, x0));
            wasm_v128_store(c + 4, wasm_f32x4_mul(va, x1));
        } else {
            v128_t vb = wasm_f32x4_splat(beta);
            wasm_v128_store(c, wasm_f32x4_add(wasm_f32x4_mul(va, x0), wasm_f32x4_mul(vb, wasm_v128_load(c))));
            wasm_v128_store(c + 4, wasm_f32x4_add(wasm_f32x4_mul(va, x1), wasm_f32x4_mul(vb, wasm_v128_load(c + 4))));
        }
        return;
    }
    wasm_v128_store(t, x0);
    wasm_v128_store(t + 4, x1);
    for (j = 0; j < nr; j++) c[j] = beta == 0.0f ? alpha * t[j] : alpha * t[j] + beta * c[j];
}
#define MHE__KWASM_ZERO(i) v128_t x##i##a = wasm_f32x4_splat(0.0f), x##i##b = x##i##a;
#define MHE__KWASM_MAC(i) { v128_t ai = wasm_f32x4_splat(a[i]); \
    x##i##a = wasm_f32x4_add(x##i##a, wasm_f32x4_mul(ai, b0)); \
    x##i##b = wasm_f32x4_add(x##i##b, wasm_f32x4_mul(ai, b1)); }
#define MHE__KWASM_STORE(i) mhe__gemm_store_wasm(c + (size_t)(i) * ldc, x##i##a, x##i##b, nr, alpha, beta);
#define MHE__KWASM_DEF(n) \
static void mhe__gemm_k##n(int nr, int kc, const float *a, const float *b, \
                           float *c, int ldc, float alpha, float beta) { \
    MHE__GEMM_ROWS_##n(MHE__KWASM_ZERO) \
    int k; \
    for (k = 0; k < kc; k++) { \
        v128_t b0 = wasm_v128_load(b), b1 = wasm_v128_load(b + 4); \
        MHE__GEMM_ROWS_##n(MHE__KWASM_MAC) \
        a += MHE__GEMM_MR; \
        b += MHE__GEMM_NR; \
    } \
    MHE__GEMM_ROWS_##n(MHE__KWASM_STORE) \
}
#define MHE__KDEF(n) MHE__KWASM_DEF(n)

#else
/* portable: the j loops have a constant trip count and independent lanes,
   which gcc and clang turn into vector code at -O2. The tile stays in memory
   (compilers do not keep a 2-D array in registers), so each pass adds four
   k steps to it: one load and one store per four multiply-adds, and each
   element still sums its terms in k order. */
MHE__FORCE_INLINE void mhe__gemm_tile(const int mr, int nr, int kc, const float *a,
                                      const float *b, float *c, int ldc, float alpha, float beta) {
    float acc[MHE__GEMM_MR][MHE__GEMM_NR];
    int i, j, k;
    for (i = 0; i < mr; i++)
        for (j = 0; j < MHE__GEMM_NR; j++) acc[i][j] = 0.0f;
    for (k = 0; k + 4 <= kc; k += 4) {
        const float *b0 = b, *b1 = b + MHE__GEMM_NR, *b2 = b1 + MHE__GEMM_NR, *b3 = b2 + MHE__GEMM_NR;
        for (i = 0; i < mr; i++) {
            float a0 = a[i], a1 = a[MHE__GEMM_MR + i];
            float a2 = a[2 * MHE__GEMM_MR + i], a3 = a[3 * MHE__GEMM_MR + i];
            for (j = 0; j < MHE__GEMM_NR; j++) {
                float t = acc[i][j];
                t += a0 * b0[j];
                t += a1 * b1[j];
                t += a2 * b2[j];
                t += a3 * b3[j];
                acc[i][j] = t;
            }
        }
        a += 4 * MHE__GEMM_MR;
        b += 4 * MHE__GEMM_NR;
    }
    for (; k < kc; k++) {
        for (i = 0; i < mr; i++) {
            float ai = a[i];
            for (j = 0; j < MHE__GEMM_NR; j++) acc[i][j] += ai * b[j];
        }
        a += MHE__GEMM_MR;
        b += MHE__GEMM_NR;
    }
    for (i = 0; i < mr; i++) {
        float *ci = c + (size_t)i * ldc;
        if (beta == 0.0f)
            for (j = 0; j < nr; j++) ci[j] = alpha * acc[i][j];
        else
            for (j = 0; j < nr; j++) ci[j] = alpha * acc[i][j] + beta * ci[j];
    }
}
#define MHE__KDEF(n) \
static void mhe__gemm_k##n(int nr, int kc, const float *a, const float *b, \
                           float *c, int ldc, float alpha, float beta) { \
    mhe__gemm_tile(n, nr, kc, a, b, c, ldc, alpha, beta); \
}
#endif

MHE__KDEF(1) MHE__KDEF(2) MHE__KDEF(3) MHE__KDEF(4)
#if MHE__GEMM_MR > 4
MHE__KDEF(5) MHE__KDEF(6)
#endif
#if MHE__GEMM_MR > 6
MHE__KDEF(7) MHE__KDEF(8)
#endif
#if MHE__GEMM_MR > 8
MHE__KDEF(9) MHE__KDEF(10) MHE__KDEF(11) MHE__KDEF(12)
#endif

/* kernel for mr rows, mr in 1..MR */
static mhe__gemm_kernel_fn mhe__gemm_kernel_for(int mr) {
    static const mhe__gemm_kernel_fn tab[MHE__GEMM_MR] = {
        mhe__gemm_k1, mhe__gemm_k2, mhe__gemm_k3, mhe__gemm_k4
#if MHE__GEMM_MR > 4
        , mhe__gemm_k5, mhe__gemm_k6
#endif
#if MHE__GEMM_MR > 6
        , mhe__gemm_k7, mhe__gemm_k8
#endif
#if MHE__GEMM_MR > 8
        , mhe__gemm_k9, mhe__gemm_k10, mhe__gemm_k11, mhe__gemm_k12
#endif
    };
    return tab[mr - 1];
}

/* ---- packing ------------------------------------------------------------ */

/* dst[k*ds + r] = src[r*ld + k] for r < rows, k < kc: the transposing copy
   behind op(A) for a row-major A and op(B) for a transposed B. The SIMD
   version moves 4 rows x 8 k per step (4 loads, 8 shuffles, 8 stores); a
   scalar element-by-element transpose costs as much as the FMAs it feeds. */
static void mhe__gemm_pack_t(const float *src, int ld, int rows, int kc, float *dst, int ds) {
    int r = 0, k;
#if defined(MHE__GEMM_AVX512) || defined(MHE__GEMM_AVX2)
    for (; r + 4 <= rows; r += 4) {
        const float *s0 = src + (size_t)r * ld, *s1 = s0 + ld, *s2 = s1 + ld, *s3 = s2 + ld;
        float *d = dst + r;
        for (k = 0; k + 8 <= kc; k += 8, d += 8 * (size_t)ds) {
            __m256 r0 = _mm256_loadu_ps(s0 + k), r1 = _mm256_loadu_ps(s1 + k);
            __m256 r2 = _mm256_loadu_ps(s2 + k), r3 = _mm256_loadu_ps(s3 + k);
            __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
            __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
            /* u_q holds k+q in its low half and k+q+4 in its high half */
            __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
            __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
            _mm_storeu_ps(d, _mm256_castps256_ps128(u0));
            _mm_storeu_ps(d + ds, _mm256_castps256_ps128(u1));
            _mm_storeu_ps(d + 2 * ds, _mm256_castps256_ps128(u2));
            _mm_storeu_ps(d + 3 * ds, _mm256_castps256_ps128(u3));
            _mm_storeu_ps(d + 4 * ds, _mm256_extractf128_ps(u0, 1));
            _mm_storeu_ps(d + 5 * ds, _mm256_extractf128_ps(u1, 1));
            _mm_storeu_ps(d + 6 * ds, _mm256_extractf128_ps(u2, 1));
            _mm_storeu_ps(d + 7 * ds, _mm256_extractf128_ps(u3, 1));
        }
        for (; k < kc; k++, d += ds) {
            d[0] = s0[k]; d[1] = s1[k]; d[2] = s2[k]; d[3] = s3[k];
        }
    }
#endif
    for (; r < rows; r++) {
        const float *s = src + (size_t)r * ld;
        for (k = 0; k < kc; k++) dst[(size_t)k * ds + r] = s[k];
    }
}

/* op(B)[k0:k0+kc, j0:j0+nc] -> bp as ceil(nc/NR) panels of kc x NR, zero-padded */
static void mhe__gemm_pack_b(int tb, const float *B, int ldb, int k0, int kc, int j0, int nc, float *bp) {
    int jp, k, j;
    for (jp = 0; jp < nc; jp += MHE__GEMM_NR, bp += (size_t)kc * MHE__GEMM_NR) {
        int nr = nc - jp < MHE__GEMM_NR ? nc - jp : MHE__GEMM_NR;
        if (!tb) {
            const float *src = B + (size_t)k0 * ldb + j0 + jp;
            float *d = bp;
            for (k = 0; k < kc; k++, src += ldb, d += MHE__GEMM_NR) {
                if (nr == MHE__GEMM_NR) {
                    memcpy(d, src, sizeof(float) * MHE__GEMM_NR);
                } else {
                    for (j = 0; j < nr; j++)
                        d[j] = src[j];
                    for (; j < MHE__GEMM_NR; j++)
                        d[j] = 0.0f;
                }
            }
        } else {
            /* op(B)[k][j] = B[j][k]: rows of B become columns of the panel */
            mhe__gemm_pack_t(B + (size_t)(j0 + jp) * ldb + k0, ldb, nr, kc, bp, MHE__GEMM_NR);
            if (nr < MHE__GEMM_NR)
                for (k = 0; k < kc; k++)
                    for (j = nr; j < MHE__GEMM_NR; j++)
                        bp[(size_t)k * MHE__GEMM_NR + j] = 0.0f;
        }
    }
}

/* op(A)[i0:i0+mr, k0:k0+kc] -> ap[k*MR + i] */
static void mhe__gemm_pack_a(int ta, const float *A, int lda, int i0, int mr, int k0, int kc, float *ap) {
    int i, k;
    if (ta) {
        /* op(A)[i][k] = A[k][i]: mr contiguous floats per k */
        const float *src = A + (size_t)k0 * lda + i0;
        for (k = 0; k < kc; k++, src += lda, ap += MHE__GEMM_MR) {
            if (mr == MHE__GEMM_MR)
                memcpy(ap, src, sizeof(float) * MHE__GEMM_MR);
            else
                for (i = 0; i < mr; i++)
                    ap[i] = src[i];
        }
    } else {
        mhe__gemm_pack_t(A + (size_t)i0 * lda + k0, lda, mr, kc, ap, MHE__GEMM_MR);
    }
}

/* ---- kernel scratch ------------------------------------------------------ */

/* the binding of the calling thread: thread-local where threads exist (a
   bare-metal build has one thread and a plain static) */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define MHE__TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define MHE__TLS _Thread_local
#elif (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__unix__) || defined(__APPLE__) || defined(_WIN32))
#define MHE__TLS __thread
#elif defined(_MSC_VER)
#define MHE__TLS __declspec(thread)
#else
#define MHE__TLS
#endif
static MHE__TLS const mhe_scratch *mhe__scratch_cur;

#define MHE__R16(n) (((size_t)(n) + 15) & ~(size_t)15)   /* floats, rounded to 64 bytes */
#define MHE__PACK_FLOATS (MHE__R16(MHE__GEMM_KC * MHE__GEMM_NC) + MHE__R16(MHE__GEMM_MR * MHE__GEMM_KC))

static size_t mhe__kernel_floats(int d_head);   /* the attention tiles (section 4) */

static int mhe__max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int mhe__thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int mhe__in_parallel(void) {
#ifdef _OPENMP
    return omp_in_parallel();
#else
    return 0;
#endif
}

MHEDEF size_t mhe_scratch_floats(int d_head, int threads) {
    size_t slice = MHE__PACK_FLOATS + (d_head > 0 ? mhe__kernel_floats(d_head) : 0);
    return slice * (size_t)(threads > 0 ? threads : 1) + 16;
}

MHEDEF void mhe_scratch_init(mhe_scratch *s, float *base, int d_head, int threads) {
    s->base = base ? (float *)(void *)(((uintptr_t)base + 63) & ~(uintptr_t)63) : NULL;
    s->slice_floats = MHE__PACK_FLOATS + (d_head > 0 ? mhe__kernel_floats(d_head) : 0);
    s->threads = threads > 0 ? threads : 1;
    s->d_head = d_head > 0 ? d_head : 0;
}

MHEDEF const mhe_scratch *mhe_scratch_bind(const mhe_scratch *s) {
    const mhe_scratch *old = mhe__scratch_cur;
    mhe__scratch_cur = s;
    return old;
}

/* The scratch a kernel runs on: the bound one if its tiles are wide enough,
   else one allocated for the call into *own (released by mhe__scratch_done).
   NULL: no memory. A thread whose index has no slice uses slice 0: that is a
   caller's own thread in a team of its own (each model binds its own block). */
typedef struct mhe__own_scratch { mhe_scratch s; float *raw; } mhe__own_scratch;

static const mhe_scratch *mhe__scratch_for(int d_head, int threads, mhe__own_scratch *own) {
    const mhe_scratch *s = mhe__scratch_cur;
    own->raw = NULL;
    if (s && s->base && s->d_head >= d_head)
        return s;
    own->raw = (float *)MHE_MALLOC(NULL, mhe_scratch_floats(d_head, threads) * sizeof(float));
    if (!own->raw)
        return NULL;
    mhe_scratch_init(&own->s, own->raw, d_head, threads);
    return &own->s;
}

static void mhe__scratch_done(mhe__own_scratch *own) {
    if (own->raw)
        MHE_FREE(NULL, own->raw);
    own->raw = NULL;
}

#ifdef _OPENMP
/* threads a kernel's team may have: one slice each */
static int mhe__team(const mhe_scratch *s) {
    int nt = mhe__max_threads();
    return nt < s->threads ? nt : s->threads;
}

static int mhe__team_of(const mhe_scratch *s) {
    return s ? mhe__team(s) : mhe__max_threads();
}
#endif

/* the calling thread's slice: GEMM packing, then the kernel's tiles */
static float *mhe__pack_slice(const mhe_scratch *s) {
    int t = mhe__in_parallel() ? mhe__thread_num() : 0;
    return s->base +
           (size_t)(t < s->threads ? t : 0) * s->slice_floats; /* a block allocated for one caller: 0 */
}

static float *mhe__tile_slice(const mhe_scratch *s) {
    return mhe__pack_slice(s) + MHE__PACK_FLOATS;
}

/* tiles carved from one slice never overlap: tell the compiler, as separate arrays did */
#if defined(__GNUC__) || defined(__clang__) || defined(_MSC_VER)
#define MHE__RESTRICT __restrict
#else
#define MHE__RESTRICT
#endif

/* n floats from a slice, 64-byte aligned */
static float *mhe__carve(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += MHE__R16(n);
    return p;
}

/* ---- blocked driver ------------------------------------------------------ */

typedef struct mhe__gemm_args {
    int ta, tb, M, N, K;
    float alpha, beta;
    const float *A, *B;
    int lda, ldb, ldc;
    float *C;
} mhe__gemm_args;

/* step that cuts n into ceil(n/max) even blocks, rounded up to a multiple of unit */
static int mhe__gemm_step(int n, int max, int unit) {
    int nb = (n + max - 1) / max, step = (n + nb - 1) / nb;
    return (step + unit - 1) / unit * unit;
}

/* C[i0:i1, j0:j1] on the calling thread */
/* no memory for packing: the plain loop (equal up to rounding) */
static void mhe__gemm_unpacked(const mhe__gemm_args *g) {
    int i, j, k;
    for (i = 0; i < g->M; i++)
        for (j = 0; j < g->N; j++) {
            float acc = 0.0f, *c = g->C + (size_t)i * g->ldc + j;
            for (k = 0; k < g->K; k++) {
                float a = g->ta ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
                float b = g->tb ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
                acc += a * b;
            }
            *c = g->beta == 0.0f ? g->alpha * acc : g->alpha * acc + g->beta * *c;
        }
}

/* C[i0:i1, j0:j1] on the calling thread, packing into pack (MHE__PACK_FLOATS) */
static void mhe__gemm_block(const mhe__gemm_args *g, int i0, int i1, int j0, int j1, float *pack) {
    float *bp = pack, *ap = pack + MHE__R16(MHE__GEMM_KC * MHE__GEMM_NC);
    int K = g->K, kstep, nstep, mstep, ib, jc, pc, ic, jr;
    if (i0 >= i1 || j0 >= j1)
        return;
    /* even blocks: K = 257 makes two KC blocks of 129, not 256 + 1 */
    kstep = mhe__gemm_step(K, MHE__GEMM_KC, 1);
    nstep = mhe__gemm_step(j1 - j0, MHE__GEMM_NC, MHE__GEMM_NR);
    mstep = mhe__gemm_step(i1 - i0, MHE__GEMM_MC, MHE__GEMM_MR);
    for (ib = i0; ib < i1; ib += mstep) {
        int ie = i1 - ib < mstep ? i1 : ib + mstep;
        for (jc = j0; jc < j1; jc += nstep) {
            int nc = j1 - jc < nstep ? j1 - jc : nstep;
            for (pc = 0; pc < K; pc += kstep) {
                int kc = K - pc < kstep ? K - pc : kstep;
                float beta = pc == 0 ? g->beta : 1.0f;
                mhe__gemm_pack_b(g->tb, g->B, g->ldb, pc, kc, jc, nc, bp);
                for (ic = ib; ic < ie; ic += MHE__GEMM_MR) {
                    int mr = ie - ic < MHE__GEMM_MR ? ie - ic : MHE__GEMM_MR;
                    float *crow = g->C + (size_t)ic * g->ldc + jc;
                    mhe__gemm_kernel_fn kern = mhe__gemm_kernel_for(mr);
                    mhe__gemm_pack_a(g->ta, g->A, g->lda, ic, mr, pc, kc, ap);
                    for (jr = 0; jr < nc; jr += MHE__GEMM_NR) {
                        int nr = nc - jr < MHE__GEMM_NR ? nc - jr : MHE__GEMM_NR;
                        kern(nr, kc, ap, bp + (size_t)jr * kc, crow + jr, g->ldc, g->alpha, beta);
                    }
                }
            }
        }
    }
}

/* ---- matrix-vector (M == 1 or N == 1) ----------------------------------- */

#define MHE__GEMV_JB 2048  /* outputs per chunk (8 KiB of stack accumulators) */
#define MHE__GEMV_KB 1024  /* x values per chunk when x is strided */

/* y[j*ys] = alpha * sum_k x[k*xs] * W(k,j) + beta * y[j*ys] for j in [j0, j1),
   W(k,j) = w[k*ldw + j] when kmajor, else w[j*ldw + k]. Memory-bound: W is
   read once, in storage order. The inner loops have constant trip counts
   and independent lanes, so they vectorise without intrinsics. */
static void mhe__gemv_range(int j0, int j1, int K, float alpha, const float *x, int xs, const float *w,
                            int ldw, int kmajor, float beta, float *y, int ys) {
    float acc[MHE__GEMV_JB];
    int jb, j, k, l;
    for (jb = j0; jb < j1; jb += MHE__GEMV_JB) {
        int jn = j1 - jb < MHE__GEMV_JB ? j1 - jb : MHE__GEMV_JB;
        for (j = 0; j < jn; j++)
            acc[j] = 0.0f;
        if (kmajor) {
            /* rows of W run along j: acc += x[k] * W[k, :], four rows per pass
               (each lane still adds its terms in k order) */
            for (k = 0; k < K; k += 4) {
                const float *w0 = w + (size_t)k * ldw + jb, *w1 = w0, *w2 = w0, *w3 = w0;
                float x0 = x[(size_t)k * xs], x1 = 0.0f, x2 = 0.0f, x3 = 0.0f;
                if (k + 4 > K) { /* the last 1..3 rows: one at a time */
                    for (; k < K; k++, w0 += ldw) {
                        x0 = x[(size_t)k * xs];
                        for (j = 0; j < jn; j++)
                            acc[j] += x0 * w0[j];
                    }
                    break;
                }
                w1 = w0 + ldw;
                w2 = w1 + ldw;
                w3 = w2 + ldw;
                x1 = x[(size_t)(k + 1) * xs];
                x2 = x[(size_t)(k + 2) * xs];
                x3 = x[(size_t)(k + 3) * xs];
                for (j = 0; j + 16 <= jn; j += 16)
                    for (l = j; l < j + 16; l++) {
                        float a = acc[l];
                        a += x0 * w0[l];
                        a += x1 * w1[l];
                        a += x2 * w2[l];
                        a += x3 * w3[l];
                        acc[l] = a;
                    }
                for (l = j; l < jn; l++) {
                    float a = acc[l];
                    a += x0 * w0[l];
                    a += x1 * w1[l];
                    a += x2 * w2[l];
                    a += x3 * w3[l];
                    acc[l] = a;
                }
            }
        } else {
            /* rows of W run along k: dot products in 16 lanes */
            float xb[MHE__GEMV_KB];
            int kb;
            for (kb = 0; kb < K; kb += MHE__GEMV_KB) {
                int kn = K - kb < MHE__GEMV_KB ? K - kb : MHE__GEMV_KB;
                const float *xp = x + (size_t)kb * xs;
                if (xs != 1) {
                    for (k = 0; k < kn; k++)
                        xb[k] = xp[(size_t)k * xs];
                    xp = xb;
                }
                for (j = 0; j < jn; j++) {
                    const float *wj = w + (size_t)(jb + j) * ldw + kb;
                    float s[16];
                    for (l = 0; l < 16; l++)
                        s[l] = 0.0f;
                    for (k = 0; k + 16 <= kn; k += 16)
                        for (l = 0; l < 16; l++)
                            s[l] += xp[k + l] * wj[k + l];
                    for (l = 0; k < kn; k++, l++)
                        s[l] += xp[k] * wj[k];
                    for (l = 0; l < 8; l++)
                        s[l] += s[l + 8];
                    for (l = 0; l < 4; l++)
                        s[l] += s[l + 4];
                    acc[j] += (s[0] + s[2]) + (s[1] + s[3]);
                }
            }
        }
        for (j = 0; j < jn; j++) {
            float *yj = y + (size_t)(jb + j) * ys;
            *yj = beta == 0.0f ? alpha * acc[j] : alpha * acc[j] + beta * *yj;
        }
    }
}

/* ---- threads -------------------------------------------------------------- */

/* boundary p of [0, n) cut into `parts` pieces whose sizes are multiples of unit */
static int mhe__gemm_split(int n, int parts, int p, int unit) {
    int64_t units = ((int64_t)n + unit - 1) / unit, b = units * p / parts * unit;
    return b < n ? (int)b : n;
}

/* pick a tm x tn grid of output blocks for nt threads: per-thread time, in
   rough cycles per k, of its FMAs plus repacking A for each NC block and
   packing its columns of B */
static void mhe__gemm_grid(int M, int N, int nt, int *tm, int *tn) {
    double best = -1;
    int d;
    for (d = 1; d <= nt; d++) {
        double mt, ntt, cost;
        if (nt % d)
            continue;
        mt = (double)mhe__gemm_split(M, nt / d, 1, MHE__GEMM_MR);
        ntt = (double)mhe__gemm_split(N, d, 1, MHE__GEMM_NR);
        cost = 2.0 * mt * ntt / 64.0 + mt * ceil(ntt / MHE__GEMM_NC) + ntt;
        if (best < 0 || cost < best) {
            best = cost;
            *tm = nt / d;
            *tn = d;
        }
    }
}

/* ---- entry point ---------------------------------------------------------- */

/* Below these sizes (2*M*N*K) one thread is faster than waking a second: a
   blocked GEMM of 4 MFLOP takes ~20 us on one core; the memory-bound
   matrix-vector product gains from a second core's bandwidth sooner. */
#define MHE__GEMM_PAR_FLOPS 4e6
#define MHE__GEMV_PAR_FLOPS 5e5

MHEDEF void mhe_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc) {
    double flops = 2.0 * M * N * K;
    int nt = 1;
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        /* nothing to multiply: C = beta*C (beta == 0 writes zeros) */
        int i, j;
        for (i = 0; i < M; i++) {
            float *ci = C + (size_t)i * ldc;
            if (beta == 0.0f) for (j = 0; j < N; j++) ci[j] = 0.0f;
            else if (beta != 1.0f) for (j = 0; j < N; j++) ci[j] *= beta;
        }
        return;
    }
#ifdef _OPENMP
    nt = omp_get_max_threads();
#endif
    if (M == 1 || N == 1) {
        /* matrix-vector: no packing, split the outputs across threads */
        int n = M == 1 ? N : M, t;
        const float *x = M == 1 ? A : B, *w = M == 1 ? B : A;
        int xs = M == 1 ? (trans_a ? lda : 1) : (trans_b ? 1 : ldb);
        int ldw = M == 1 ? ldb : lda, kmajor = M == 1 ? !trans_b : trans_a;
        int ys = M == 1 ? 1 : ldc;
        if (nt > n / 64) nt = n / 64 > 1 ? n / 64 : 1;
        if (nt == 1 || flops < MHE__GEMV_PAR_FLOPS) {
            mhe__gemv_range(0, n, K, alpha, x, xs, w, ldw, kmajor, beta, C, ys);
            return;
        }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) if(flops >= MHE__GEMV_PAR_FLOPS)
#endif
        for (t = 0; t < nt; t++) {
            /* boundaries on multiples of 16, so every output lands in the same
               (vector body or scalar tail) loop whatever the thread count */
            int j0 = mhe__gemm_split(n, nt, t, 16), j1 = mhe__gemm_split(n, nt, t + 1, 16);
            mhe__gemv_range(j0, j1, K, alpha, x, xs, w, ldw, kmajor, beta, C, ys);
        }
        return;
    }
    {
        mhe__gemm_args g;
        mhe__own_scratch own;
        const mhe_scratch *sc;
        int tm = 1, tn = 1, t, ntask;
        g.ta = trans_a; g.tb = trans_b; g.M = M; g.N = N; g.K = K;
        g.alpha = alpha; g.beta = beta; g.A = A; g.B = B; g.C = C;
        g.lda = lda; g.ldb = ldb; g.ldc = ldc;
        if (flops < MHE__GEMM_PAR_FLOPS || mhe__in_parallel()) nt = 1;   /* a tile inside a kernel's team */
        sc = mhe__scratch_for(0, nt, &own);
        if (!sc) {
            mhe__gemm_unpacked(&g);
            return;
        }
        if (nt > sc->threads) nt = sc->threads;
        if (nt == 1) {
            mhe__gemm_block(&g, 0, M, 0, N, mhe__pack_slice(sc));
            mhe__scratch_done(&own);
            return;
        }
        mhe__gemm_grid(M, N, nt, &tm, &tn);
        ntask = tm * tn;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(ntask)
#endif
        for (t = 0; t < ntask; t++) {
            int bi = t / tn, bj = t % tn;
            int i0 = mhe__gemm_split(M, tm, bi, MHE__GEMM_MR);
            int i1 = mhe__gemm_split(M, tm, bi + 1, MHE__GEMM_MR);
            int j0 = mhe__gemm_split(N, tn, bj, MHE__GEMM_NR);
            int j1 = mhe__gemm_split(N, tn, bj + 1, MHE__GEMM_NR);
            mhe__gemm_block(&g, i0, i1, j0, j1, mhe__pack_slice(sc));
        }
        mhe__scratch_done(&own);
    }
}

/* ---- 3. kernels: norms, activations, softmax, cross-entropy, dropout ---- */

/* Threads only pay off above a few hundred thousand flops per call. */
#define MHE__PAR_MIN 32768

/* exp by range reduction x = n ln2 + r, |r| <= ln2/2, and a degree-6
   polynomial: about 2 ulp, branch-free so loops over it vectorise, and the
   same bits whatever the compiler flags (libm's expf may differ). Inputs
   below -87.3 give 0, above 88 infinity; NaN stays NaN. */
static inline MHE__VECTORISE float mhe__exp(float x) {
    union {
        float f;
        int32_t i;
    } sc;
    /* quiet comparisons (isless, isgreater, x != x) keep the loop free of
       trapping compares, so gcc vectorises it without -ffast-math */
    float n, r, p, y, xc = isless(x, -87.3f) ? -87.3f : (isgreater(x, 88.0f) ? 88.0f : x);
    xc = x != x ? 0.0f : xc;
    int32_t k = (int32_t)(xc * 1.44269504088896341f + 128.5f) - 128; /* floor(x/ln2 + 1/2) */
    n = (float)k;
    r = xc - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723e-06f;
    p = 1.0f +
        r * (1.0f + r * (0.5f + r * (1.66666671633720398e-01f +
                                     r * (4.16666716337203979e-02f +
                                          r * (8.33333376795053482e-03f + r * 1.38888892251998186e-03f)))));
    sc.i = (k + 127) * (1 << 23);
    y = p * sc.f;
    y = isgreater(x, 88.0f) ? INFINITY : y;
    y = isless(x, -87.3f) ? 0.0f : y;
    return x != x ? x : y;
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1), from mhe__exp; near 0, where that form
   cancels, its Taylor series to u^9 (error < 2e-9 for |u| < 0.25) */
static inline MHE__VECTORISE float mhe__tanh(float u) {
    float e = mhe__exp(2.0f * (isless(u, -9.0f) ? -9.0f : (isgreater(u, 9.0f) ? 9.0f : u)));
    float big = 1.0f - 2.0f / (e + 1.0f), u2 = u * u;
    float small =
        u * (1.0f + u2 * (-0.333333343f + u2 * (0.13333334f + u2 * (-0.0539682545f + u2 * 0.0218694888f))));
    return isless(u2, 0.0625f) ? small : big;
}

/* sum of x[0..n) and of (x - m)^2, each in 16 lanes combined in a fixed order:
   a single running sum does not vectorise without -ffast-math */
static MHE__VECTORISE float mhe__lane_sum(const float *x, int n) {
    float a[16];
    int j, l;
    for (l = 0; l < 16; l++)
        a[l] = 0.0f;
    for (j = 0; j + 16 <= n; j += 16)
        for (l = 0; l < 16; l++)
            a[l] += x[j + l];
    for (; j < n; j++)
        a[0] += x[j];
    for (l = 8; l >= 1; l /= 2)
        for (j = 0; j < l; j++)
            a[j] += a[j + l];
    return a[0];
}

static MHE__VECTORISE float mhe__lane_sq_dev(const float *x, int n, float m) {
    float a[16];
    int j, l;
    for (l = 0; l < 16; l++)
        a[l] = 0.0f;
    for (j = 0; j + 16 <= n; j += 16)
        for (l = 0; l < 16; l++) {
            float d = x[j + l] - m;
            a[l] += d * d;
        }
    for (; j < n; j++) {
        float d = x[j] - m;
        a[0] += d * d;
    }
    for (l = 8; l >= 1; l /= 2)
        for (j = 0; j < l; j++)
            a[j] += a[j + l];
    return a[0];
}

/* sum of a[j] * b[j] (* c[j] when c is not NULL) in 16 lanes */
static MHE__VECTORISE float mhe__lane_dot3(const float *a, const float *b, const float *c, int n) {
    float acc[16];
    int j, l;
    for (l = 0; l < 16; l++)
        acc[l] = 0.0f;
    if (c) {
        for (j = 0; j + 16 <= n; j += 16)
            for (l = 0; l < 16; l++)
                acc[l] += a[j + l] * b[j + l] * c[j + l];
        for (; j < n; j++)
            acc[0] += a[j] * b[j] * c[j];
    } else {
        for (j = 0; j + 16 <= n; j += 16)
            for (l = 0; l < 16; l++)
                acc[l] += a[j + l] * b[j + l];
        for (; j < n; j++)
            acc[0] += a[j] * b[j];
    }
    for (l = 8; l >= 1; l /= 2)
        for (j = 0; j < l; j++)
            acc[j] += acc[j + l];
    return acc[0];
}

MHEDEF MHE__VECTORISE void mhe_layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                             const float *w, const float *b, int N, int C, float eps) {
    int i;
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C;
    float *o = out + (size_t)i * C;
    float m = mhe__lane_sum(x, C) / (float)C, v = mhe__lane_sq_dev(x, C, m) / (float)C, s;
    int j;
    s = 1.0f / sqrtf(v + eps);
    if (b)
        for (j = 0; j < C; j++)
            o[j] = (x[j] - m) * s * w[j] + b[j];
    else
        for (j = 0; j < C; j++)
            o[j] = (x[j] - m) * s * w[j];
    mean[i] = m;
    rstd[i] = s;
}
}

#ifndef MHE_NO_TRAIN
/* forward was: xhat = (x - mean) * rstd; out = xhat * w + b. So
   dxhat = dout * w and dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)). */
MHEDEF MHE__VECTORISE void mhe_layernorm_bwd(float *dinp, float *dw, float *db, const float *dout,
                                             const float *inp, const float *w, const float *mean,
                                             const float *rstd, int N, int C) {
    int i, j;
    /* input gradient: rows are independent */
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float *dx = dinp + (size_t)i * C;
    float m = mean[i], s = rstd[i], sum_d, sum_dx, acc_d[16], acc_x[16];
    int k, l;
    for (l = 0; l < 16; l++)
        acc_d[l] = acc_x[l] = 0.0f;
    for (k = 0; k + 16 <= C; k += 16)
        for (l = 0; l < 16; l++) {
            float xhat = (x[k + l] - m) * s, d = dy[k + l] * w[k + l];
            acc_d[l] += d;
            acc_x[l] += d * xhat;
        }
    for (; k < C; k++) {
        float xhat = (x[k] - m) * s, d = dy[k] * w[k];
        acc_d[0] += d;
        acc_x[0] += d * xhat;
    }
    for (l = 8; l >= 1; l /= 2)
        for (k = 0; k < l; k++) {
            acc_d[k] += acc_d[k + l];
            acc_x[k] += acc_x[k + l];
        }
    sum_d = acc_d[0] / (float)C;
    sum_dx = acc_x[0] / (float)C;
    for (k = 0; k < C; k++) {
        float xhat = (x[k] - m) * s, d = dy[k] * w[k];
        dx[k] += s * (d - sum_d - xhat * sum_dx);
    }
}
/* parameter gradients: a column sum, in row order (reproducible) */
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float m = mean[i], s = rstd[i];
    for (j = 0; j < C; j++) {
        dw[j] += dy[j] * (x[j] - m) * s;
        if (db)
            db[j] += dy[j];
    }
}
}
#endif /* MHE_NO_TRAIN */

MHEDEF MHE__VECTORISE void mhe_rmsnorm_fwd(float *out, float *rstd, const float *inp, const float *w, int N,
                                           int C, float eps) {
    int i;
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C;
    float *o = out + (size_t)i * C, ms = mhe__lane_dot3(x, x, NULL, C), s;
    int j;
    s = 1.0f / sqrtf(ms / (float)C + eps);
    for (j = 0; j < C; j++)
        o[j] = x[j] * s * w[j];
    rstd[i] = s;
}
}

#ifndef MHE_NO_TRAIN
/* forward was: out = x * s * w with s = (mean(x^2) + eps)^-1/2, so
   dx = s * (dout*w) - x * s^3 * mean(dout*w*x) */
MHEDEF MHE__VECTORISE void mhe_rmsnorm_bwd(float *dinp, float *dw, const float *dout, const float *inp,
                                           const float *w, const float *rstd, int N, int C) {
    int i, j;
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float *dx = dinp + (size_t)i * C, s = rstd[i], dot = mhe__lane_dot3(dy, w, x, C) / (float)C;
    int k;
    for (k = 0; k < C; k++)
        dx[k] += s * dy[k] * w[k] - x[k] * s * s * s * dot;
}
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
    float s = rstd[i];
    for (j = 0; j < C; j++)
        dw[j] += dy[j] * x[j] * s;
}
}
#endif /* MHE_NO_TRAIN */

#define MHE__GELU_K 0.7978845608028654f   /* sqrt(2/pi) */

static inline MHE__VECTORISE float mhe__gelu(float x) {
    return 0.5f * x * (1.0f + mhe__tanh(MHE__GELU_K * (x + 0.044715f * x * x * x)));
}
static inline MHE__VECTORISE float mhe__gelu_grad(float x) {
    float t = mhe__tanh(MHE__GELU_K * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * MHE__GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}
/* the exact GELU x Phi(x) (Hendrycks and Gimpel 2016, eq. 1); d/dx = Phi(x) + x phi(x) */
static inline float mhe__gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
static inline float mhe__gelu_erf_grad(float x) {
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * mhe__exp(-0.5f * x * x);
}
static inline MHE__VECTORISE float mhe__silu(float x) {
    return x / (1.0f + mhe__exp(-x));
}
static inline MHE__VECTORISE float mhe__silu_grad(float x) {
    float sg = 1.0f / (1.0f + mhe__exp(-x));
    return sg * (1.0f + x * (1.0f - sg));
}

/* chunks of MHE__CHUNK elements spread over threads; one simple loop per
   activation inside, so the compiler vectorises it */
#define MHE__CHUNK 4096

MHEDEF MHE__VECTORISE void mhe_act_fwd(int act, float *out, const float *inp, int64_t n) {
    int64_t c, nc = (n + MHE__CHUNK - 1) / MHE__CHUNK;
    MHE__OMP(omp parallel for if (n > MHE__PAR_MIN))
    for (c = 0; c < nc; c++) {
        int64_t i, lo = c * MHE__CHUNK, hi = lo + MHE__CHUNK < n ? lo + MHE__CHUNK : n;
        if (act == MHE_ACT_GELU) {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                out[i] = mhe__gelu(inp[i]);
        } else if (act == MHE_ACT_RELU) {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                out[i] = isgreater(inp[i], 0.0f) ? inp[i] : 0.0f;
        } else if (act == MHE_ACT_GELU_ERF) {
            for (i = lo; i < hi; i++)
                out[i] = mhe__gelu_erf(inp[i]);
        } else {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                out[i] = mhe__silu(inp[i]);
        }
    }
}

#ifndef MHE_NO_TRAIN
/* dinp += dout * act'(inp). GELU's derivative needs true tanh/exp values:
   the library's own mhe__exp keeps them accurate (not bit for bit, and
   without its NaN guard) under -ffast-math; see docs/reliability.md, fast-math. */
MHEDEF MHE__VECTORISE void mhe_act_bwd(int act, float *dinp, const float *inp, const float *dout, int64_t n) {
    int64_t c, nc = (n + MHE__CHUNK - 1) / MHE__CHUNK;
    MHE__OMP(omp parallel for if (n > MHE__PAR_MIN))
    for (c = 0; c < nc; c++) {
        int64_t i, lo = c * MHE__CHUNK, hi = lo + MHE__CHUNK < n ? lo + MHE__CHUNK : n;
        if (act == MHE_ACT_GELU) {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                dinp[i] += dout[i] * mhe__gelu_grad(inp[i]);
        } else if (act == MHE_ACT_RELU) {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                dinp[i] += isgreater(inp[i], 0.0f) ? dout[i] : 0.0f;
        } else if (act == MHE_ACT_GELU_ERF) {
            for (i = lo; i < hi; i++)
                dinp[i] += dout[i] * mhe__gelu_erf_grad(inp[i]);
        } else {
            MHE__OMP(omp simd)
            for (i = lo; i < hi; i++)
                dinp[i] += dout[i] * mhe__silu_grad(inp[i]);
        }
    }
}
#endif /* MHE_NO_TRAIN */

MHEDEF MHE__VECTORISE void mhe_softmax_fwd(float *out, const float *inp, int N, int C) {
    int i;
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C;
    float *o = out + (size_t)i * C, mx = -INFINITY, sum = 0;
    int j;
    for (j = 0; j < C; j++)
        if (x[j] > mx)
            mx = x[j];
    for (j = 0; j < C; j++) {
        o[j] = expf(x[j] - mx);
        sum += o[j];
    }
    for (j = 0; j < C; j++)
        o[j] /= sum;
}
}

#ifndef MHE_NO_TRAIN
/* dx_j = y_j * (dy_j - sum_k dy_k y_k) */
MHEDEF MHE__VECTORISE void mhe_softmax_bwd(float *dinp, const float *out, const float *dout, int N, int C) {
    int i;
MHE__OMP(omp parallel for if ((int64_t)N * C > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *y = out + (size_t)i * C, *dy = dout + (size_t)i * C;
    float *dx = dinp + (size_t)i * C, dot = 0;
    int j;
    for (j = 0; j < C; j++)
        dot += dy[j] * y[j];
    for (j = 0; j < C; j++)
        dx[j] += y[j] * (dy[j] - dot);
}
}
#endif /* MHE_NO_TRAIN */

static float mhe__logsumexp(const float *x, int n) {
    float mx = -INFINITY, sum = 0;
    int j;
    for (j = 0; j < n; j++)
        if (x[j] > mx)
            mx = x[j];
    for (j = 0; j < n; j++)
        sum += expf(x[j] - mx);
    return mx + logf(sum);
}

MHEDEF void mhe_xent_fwd(float *losses, float *mean_loss, int *count, const float *logits, const int *targets,
                         int N, int V) {
    int i, c = 0;
    double total = 0;
MHE__OMP(omp parallel for if ((int64_t)N * V > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = logits + (size_t)i * V;
    losses[i] = targets[i] < 0 ? 0.0f : mhe__logsumexp(x, V) - x[targets[i]];
}
for (i = 0; i < N; i++)
    if (targets[i] >= 0) {
        total += losses[i];
        c++;
    }
if (mean_loss)
    *mean_loss = c ? (float)(total / c) : 0.0f;
if (count)
    *count = c;
}

#ifndef MHE_NO_TRAIN
MHEDEF void mhe_xent_bwd(float *dlogits, const float *logits, const int *targets, int N, int V, float scale) {
    int i;
MHE__OMP(omp parallel for if ((int64_t)N * V > MHE__PAR_MIN))
for (i = 0; i < N; i++) {
    const float *x = logits + (size_t)i * V;
    float *dx = dlogits + (size_t)i * V, lse;
    int j;
    if (targets[i] < 0)
        continue;
    lse = mhe__logsumexp(x, V);
    for (j = 0; j < V; j++)
        dx[j] += scale * expf(x[j] - lse);
    dx[targets[i]] -= scale;
}
}
#endif /* MHE_NO_TRAIN */

MHEDEF MHE__VECTORISE void mhe_dropout_fwd(float *out, const float *inp, int64_t n, float p, uint64_t seed,
                                           uint64_t offset) {
    int64_t i;
    float keep = 1.0f / (1.0f - p);
    if (p <= 0) {
        if (out != inp)
            memcpy(out, inp, (size_t)n * sizeof(float));
        return;
    }
MHE__OMP(omp parallel for if (n > MHE__PAR_MIN))
for (i = 0; i < n; i++)
    out[i] = mhe_hash_uniform(seed, offset + (uint64_t)i) >= p ? inp[i] * keep : 0.0f;
}

#ifndef MHE_NO_TRAIN
MHEDEF MHE__VECTORISE void mhe_dropout_bwd(float *dinp, const float *dout, int64_t n, float p, uint64_t seed,
                                           uint64_t offset) {
    int64_t i;
    float keep = 1.0f / (1.0f - p);
MHE__OMP(omp parallel for if (n > MHE__PAR_MIN))
for (i = 0; i < n; i++)
    if (p <= 0 || mhe_hash_uniform(seed, offset + (uint64_t)i) >= p)
        dinp[i] += dout[i] * (p <= 0 ? 1.0f : keep);
}
#endif /* MHE_NO_TRAIN */

MHEDEF MHE__VECTORISE void mhe_embedding_fwd(float *out, const float *table, const int *ids, int N, int C,
                                             int accumulate) {
    int i, j;
    for (i = 0; i < N; i++) {
        const float *row = table + (size_t)ids[i] * C;
        float *o = out + (size_t)i * C;
        if (accumulate)
            for (j = 0; j < C; j++)
                o[j] += row[j];
        else
            memcpy(o, row, (size_t)C * sizeof(float));
    }
}

#ifndef MHE_NO_TRAIN
/* sequential: two rows may share a token id, and the sum order stays fixed */
MHEDEF MHE__VECTORISE void mhe_embedding_bwd(float *dtable, const float *dout, const int *ids, int N, int C) {
    int i, j;
    for (i = 0; i < N; i++) {
        float *row = dtable + (size_t)ids[i] * C;
        const float *d = dout + (size_t)i * C;
        for (j = 0; j < C; j++)
            row[j] += d[j];
    }
}
#endif /* MHE_NO_TRAIN */

MHEDEF MHE__VECTORISE void mhe_linear_fwd(float *out, const float *inp, const float *w, const float *b, int N,
                                          int IC, int OC) {
    int i, j;
    mhe_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);
    if (b)
MHE__OMP(omp parallel for if ((int64_t)N * OC > MHE__PAR_MIN) private(j))
    for (i = 0; i < N; i++)
        for (j = 0; j < OC; j++)
            out[(size_t)i * OC + j] += b[j];
}

#ifndef MHE_NO_TRAIN
/* forward was out = inp W^T + b: dinp += dout W, dW += dout^T inp, db += colsum(dout) */
MHEDEF MHE__VECTORISE void mhe_linear_bwd(float *dinp, float *dw, float *db, const float *dout,
                                          const float *inp, const float *w, int N, int IC, int OC) {
    int i, j;
    if (dinp)
        mhe_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, w, IC, 1.0f, dinp, IC);
    if (dw)
        mhe_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
    if (db)
        for (i = 0; i < N; i++)
            for (j = 0; j < OC; j++)
                db[j] += dout[(size_t)i * OC + j];
}
#endif /* MHE_NO_TRAIN */

/* ---- 3. kernels: int8 weights (q8) ---------------------------------------- */

/* the scale of one group and one weight's int8 value: shared by
   mhe_q8_quantize and the checkpoint writer, which quantizes while it writes */
static float mhe__q8_scale(const float *w, int n) {
    float amax = 0, s;
    int j;
    for (j = 0; j < n; j++) amax = fabsf(w[j]) > amax ? fabsf(w[j]) : amax;
    s = amax / 127.0f;
    return s > 0 ? s : 1.0f;   /* an all-zero group (or one below 127 FLT_TRUE_MIN): q = 0 exactly */
}
static int8_t mhe__q8_round(float w, float inv) {
    float v = roundf(w * inv);
    return (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
}

MHEDEF mhe_status mhe_q8_quantize(int8_t *q, float *scale, const float *w, int rows, int cols, int group) {
    int64_t i, n;
    int j;
    if (!q || !scale || !w || rows < 1 || cols < 1 || group < 1 || cols % group) return MHE_ERR_ARG;
    n = (int64_t)rows * cols;
    for (i = 0; i < n; i++) if (!mhe__is_finite(w[i])) return MHE_ERR_NONFINITE;
    for (i = 0; i < n; i += group, scale++) {
        float s = mhe__q8_scale(w + i, group), inv = 1.0f / s;
        for (j = 0; j < group; j++) q[i + j] = mhe__q8_round(w[i + j], inv);
        *scale = s;
    }
    return MHE_OK;
}

/* rows ids[0..n) of a [rows, C] table as float: a q8 table's int8 rows
   dequantized (the token embedding of a q8 model), else copied */
static void mhe__q8_gather(float *out, const mhe_tensor *t, const int *ids, int n, int C) {
    int i, j;
    if (!t->q8) { mhe_embedding_fwd(out, t->data, ids, n, C, 0); return; }
    for (i = 0; i < n; i++) {
        const int8_t *q = t->q8 + (size_t)ids[i] * C;
        const float *s = t->q8_scale + (size_t)ids[i] * (C / t->q8_group);
        float *o = out + (size_t)i * C;
        for (j = 0; j < C; j++) o[j] = (float)q[j] * s[j / t->q8_group];
    }
}

/* sum over groups of scale[g] * sum_j q[j] x[j]: one output of a q8 layer */
static float mhe__q8_row(const int8_t *q, const float *scale, int group, const float *x, int IC) {
    int g0, j;
    float tot = 0;
#if defined(MHE__GEMM_AVX512)
    if (group % 16 == 0) {
        __m512 t = _mm512_setzero_ps();
        for (g0 = 0; g0 < IC; g0 += group, scale++) {
            __m512 acc = _mm512_setzero_ps();
            for (j = g0; j < g0 + group; j += 16) {
                /* the maskz forms: g++'s headers warn (-Wmaybe-uninitialized) on the plain ones' undefined source */
                __m512 wv = _mm512_maskz_cvtepi32_ps((__mmask16)-1, _mm512_maskz_cvtepi8_epi32((__mmask16)-1,
                                _mm_loadu_si128((const __m128i *)(const void *)(q + j))));
                acc = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + j), acc);
            }
            t = _mm512_fmadd_ps(acc, _mm512_set1_ps(*scale), t);
        }
        {
            float lane[16];
            _mm512_storeu_ps(lane, t);
            for (j = 0; j < 16; j++) tot += lane[j];
            return tot;
        }
    }
#endif
#if defined(MHE__GEMM_AVX512) || defined(MHE__GEMM_AVX2)
    if (group % 8 == 0) {
        __m256 t = _mm256_setzero_ps();
        __m128 h;
        for (g0 = 0; g0 < IC; g0 += group, scale++) {
            __m256 acc = _mm256_setzero_ps();
            for (j = g0; j < g0 + group; j += 8) {
                __m256 wv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(q + j))));
                acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + j), acc);
            }
            t = _mm256_fmadd_ps(acc, _mm256_set1_ps(*scale), t);
        }
        h = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        return _mm_cvtss_f32(h);
    }
#endif
#if defined(MHE__GEMM_NEON)
    if (group % 8 == 0) {   /* 8 int8 widened to two float32x4 per step */
        float32x4_t t = vdupq_n_f32(0.0f);
        for (g0 = 0; g0 < IC; g0 += group, scale++) {
            float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
            for (j = g0; j < g0 + group; j += 8) {
                int16x8_t w16 = vmovl_s8(vld1_s8(q + j));
                a0 = vfmaq_f32(a0, vcvtq_f32_s32(vmovl_s16(vget_low_s16(w16))), vld1q_f32(x + j));
                a1 = vfmaq_f32(a1, vcvtq_f32_s32(vmovl_s16(vget_high_s16(w16))), vld1q_f32(x + j + 4));
            }
            t = vfmaq_n_f32(t, vaddq_f32(a0, a1), *scale);
        }
        return vaddvq_f32(t);
    }
#endif
    for (g0 = 0; g0 < IC; g0 += group, scale++) {   /* portable: an int8 load and a float MAC per weight */
        float acc = 0;
        for (j = g0; j < g0 + group; j++) acc += (float)q[j] * x[j];
        tot += *scale * acc;
    }
    return tot;
}

MHEDEF void mhe_q8_linear_fwd(float *out, int ldo, const float *inp, int ldi, const int8_t *q, const float *scale,
                              int group, const float *b, int N, int IC, int OC) {
    int i, o, gpr = IC / group;
    /* each output whole in one thread: 1 and N threads give the same bits */
MHE__OMP(omp parallel for if ((int64_t)N * OC * IC > 64 * MHE__PAR_MIN && !mhe__in_parallel()) private(i))
    for (o = 0; o < OC; o++)
        for (i = 0; i < N; i++)
            out[(size_t)i * ldo + o] = mhe__q8_row(q + (size_t)o * IC, scale + (size_t)o * gpr, group, inp + (size_t)i * ldi, IC)
                                     + (b ? b[o] : 0.0f);
}

/* int8 x int8: products of two int8 fit int16, their group sums int32 (a
   group of up to 2^16 elements cannot overflow); written as pairs so a
   Cortex-M4 compiler can fuse each into one SMLAD */
static int32_t mhe__i8_dot(const int8_t *a, const int8_t *b, int n) {
    int32_t acc = 0;
    int j;
#if defined(MHE__GEMM_AVX512) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
    if (n % 32 == 0) {   /* AVX-512 VNNI: VPDPWSSD adds pairs of int16 products into int32 in one instruction */
        __m512i s = _mm512_setzero_si512();
        for (j = 0; j < n; j += 32) {
            __m512i x = _mm512_maskz_cvtepi8_epi16((__mmask32)-1, _mm256_loadu_si256((const __m256i *)(const void *)(a + j)));
            __m512i y = _mm512_maskz_cvtepi8_epi16((__mmask32)-1, _mm256_loadu_si256((const __m256i *)(const void *)(b + j)));
            s = _mm512_dpwssd_epi32(s, x, y);
        }
        {
            int32_t lane[16];
            _mm512_storeu_si512((void *)lane, s);
            for (j = 0; j < 16; j++) acc += lane[j];
            return acc;
        }
    }
#endif
#if defined(MHE__GEMM_AVX512) || defined(MHE__GEMM_AVX2)
    if (n % 16 == 0) {
        __m256i s = _mm256_setzero_si256();
        __m128i h;
        for (j = 0; j < n; j += 16) {
            __m256i x = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(a + j)));
            __m256i y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(b + j)));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(x, y));
        }
        h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        return _mm_cvtsi128_si32(h);
    }
#endif
#if defined(MHE__GEMM_NEON)
    if (n % 16 == 0) {   /* SDOT (Armv8.2 dot product) when the target has it, else widening multiplies */
        int32x4_t s = vdupq_n_s32(0);
        for (j = 0; j < n; j += 16) {
            int8x16_t x = vld1q_s8(a + j), y = vld1q_s8(b + j);
#if defined(__ARM_FEATURE_DOTPROD)
            s = vdotq_s32(s, x, y);
#else
            s = vpadalq_s16(s, vmull_s8(vget_low_s8(x), vget_low_s8(y)));
            s = vpadalq_s16(s, vmull_high_s8(x, y));
#endif
        }
        return vaddvq_s32(s);
    }
#endif
    for (j = 0; j + 1 < n; j += 2) acc += (int16_t)(a[j] * b[j]) + (int16_t)(a[j + 1] * b[j + 1]);
    if (j < n) acc += a[j] * b[j];
    return acc;
}

MHEDEF void mhe_q8_linear_fwd_i8(float *out, int ldo, const float *inp, int ldi, const int8_t *q, const float *scale,
                                 int group, const float *b, int N, int IC, int OC) {
    int i, o, j, g, gpr = IC / group;
    int8_t xq[4096];   /* one token's activations; wider rows fall back to float activations */
    if (IC > (int)sizeof xq) { mhe_q8_linear_fwd(out, ldo, inp, ldi, q, scale, group, b, N, IC, OC); return; }
    for (i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * ldi;
        float amax = 0, xs, inv;
        for (j = 0; j < IC; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        xs = amax > 0 ? amax / 127.0f : 1.0f;
        inv = 1.0f / xs;
        for (j = 0; j < IC; j++) xq[j] = (int8_t)roundf(x[j] * inv);
        for (o = 0; o < OC; o++) {
            const int8_t *wq = q + (size_t)o * IC;
            const float *s = scale + (size_t)o * gpr;
            float tot = 0;
            for (g = 0; g < gpr; g++) tot += s[g] * (float)mhe__i8_dot(wq + (size_t)g * group, xq + (size_t)g * group, group);
            out[(size_t)i * ldo + o] = xs * tot + (b ? b[o] : 0.0f);
        }
    }
}

/* ---- 3. kernels: CP decomposition ------------------------------------------ */

/* Cholesky solve of G X = Y in place (G [R, R] symmetric positive definite,
   Y [n, R] holds the right-hand sides as rows); a tiny ridge keeps a
   rank-deficient G solvable. Returns 0 when G is not positive definite. */
static int mhe__chol_solve_rows(double *G, int R, double *Y, int n) {
    int i, j, k, r;
    double ridge = 0;
    for (i = 0; i < R; i++)
        ridge += G[(size_t)i * R + i];
    ridge = ridge / (R > 0 ? R : 1) * 1e-12;
    for (i = 0; i < R; i++)
        G[(size_t)i * R + i] += ridge;
    for (j = 0; j < R; j++) { /* G = L L^T, L in the lower triangle */
        double d = G[(size_t)j * R + j];
        for (k = 0; k < j; k++)
            d -= G[(size_t)j * R + k] * G[(size_t)j * R + k];
        if (!(d > 0))
            return 0;
        d = sqrt(d);
        G[(size_t)j * R + j] = d;
        for (i = j + 1; i < R; i++) {
            double s = G[(size_t)i * R + j];
            for (k = 0; k < j; k++)
                s -= G[(size_t)i * R + k] * G[(size_t)j * R + k];
            G[(size_t)i * R + j] = s / d;
        }
    }
    for (r = 0; r < n; r++) { /* rows: x G = y, i.e. G x^T = y^T */
        double *y = Y + (size_t)r * R;
        for (i = 0; i < R; i++) {
            double s = y[i];
            for (k = 0; k < i; k++)
                s -= G[(size_t)i * R + k] * y[k];
            y[i] = s / G[(size_t)i * R + i];
        }
        for (i = R - 1; i >= 0; i--) {
            double s = y[i];
            for (k = i + 1; k < R; k++)
                s -= G[(size_t)k * R + i] * y[k];
            y[i] = s / G[(size_t)i * R + i];
        }
    }
    return 1;
}

/* Gram matrix F^T F [R, R] in double */
static void mhe__gram(const float *F, int n, int R, double *G) {
    int a, b, i;
    for (a = 0; a < R; a++)
        for (b = a; b < R; b++) {
            double s = 0;
            for (i = 0; i < n; i++)
                s += (double)F[(size_t)i * R + a] * F[(size_t)i * R + b];
            G[(size_t)a * R + b] = G[(size_t)b * R + a] = s;
        }
}

/* HOSVD start of one factor F [n, R]: the leading min(n, R) eigenvectors of
   the unfolding's Gram matrix G [n, n] (double), by subspace iteration with
   Gram-Schmidt; the columns past n keep what F holds. Q: 2 n R doubles. The
   r vectors are stored column by column (Q[a n + i]) so every product and
   projection runs over contiguous memory, and G q is taken for four columns
   at once (each sum still over k in order), and each projection's subtraction
   shares its pass with the next dot product: the same sums in the same order
   as the plain loops, three times faster (n = 768 took a minute per factor). */
static void mhe__cp_svd_init(const double *G, int n, int R, float *F, double *Q, mhe_rng *rng) {
    int r = n < R ? n : R, it, a, b, i, k;
    double *Z = Q + (size_t)n * r;
    for (k = 0; k < n; k++) /* the draws in the order of a row-major [n, r] */
        for (a = 0; a < r; a++)
            Q[(size_t)a * n + k] = mhe_rng_uniform(rng) - 0.5;
    for (it = 0; it < 60; it++) {
        for (a = 0; a < r; a += 4) { /* Z = G Q */
            int w = r - a < 4 ? r - a : 4;
            const double *q0 = Q + (size_t)a * n, *q1 = q0 + (w > 1 ? n : 0), *q2 = q0 + (w > 2 ? 2 * n : 0),
                         *q3 = q0 + (w > 3 ? 3 * n : 0);
            for (i = 0; i < n; i++) {
                const double *g = G + (size_t)i * n;
                double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (k = 0; k < n; k++) {
                    s0 += g[k] * q0[k];
                    s1 += g[k] * q1[k];
                    s2 += g[k] * q2[k];
                    s3 += g[k] * q3[k];
                }
                Z[(size_t)a * n + i] = s0;
                if (w > 1)
                    Z[(size_t)(a + 1) * n + i] = s1;
                if (w > 2)
                    Z[(size_t)(a + 2) * n + i] = s2;
                if (w > 3)
                    Z[(size_t)(a + 3) * n + i] = s3;
            }
        }
        for (a = 0; a < r; a++) { /* column a orthogonal to the columns before it, then unit length */
            double *za = Z + (size_t)a * n, nrm = 0, d = 0;
            for (i = 0; a > 0 && i < n; i++)
                d += za[i] * Z[i];
            for (b = 0; b < a; b++) { /* subtract column b, and in the same pass the next projection (or the norm) */
                const double *zb = Z + (size_t)b * n, *zn = Z + (size_t)(b + 1) * n;
                double dn = 0;
                if (b + 1 < a)
                    for (i = 0; i < n; i++) {
                        za[i] -= d * zb[i];
                        dn += za[i] * zn[i];
                    }
                else
                    for (i = 0; i < n; i++) {
                        za[i] -= d * zb[i];
                        nrm += za[i] * za[i];
                    }
                d = dn;
            }
            for (i = 0; a == 0 && i < n; i++)
                nrm += za[i] * za[i];
            nrm = sqrt(nrm);
            for (i = 0; i < n; i++)
                za[i] = nrm > 0 ? za[i] / nrm : (i == a);
        }
        memcpy(Q, Z, (size_t)n * r * sizeof(double));
    }
    for (i = 0; i < n; i++)
        for (a = 0; a < r; a++)
            F[(size_t)i * R + a] = (float)Q[(size_t)a * n + i];
}

MHEDEF mhe_status mhe_cp_als(const float *T, int I, int J, int K, int R, float *A, float *B, float *C,
                             int max_iter, double tol, int init, uint64_t seed, void *alloc_ctx,
                             mhe_cp_result *res) {
    size_t IJK, n_max, bytes, i;
    float *W, *M;
    double *G, *G2, *Y, norm_t = 0, err = 0, prev = -1;
    float *F[3];
    int dims[3], mode, it, r, a, ok = 1, converged = 0;
    mhe_rng rng;
    if (res) {
        res->rel_error = 0;
        res->iterations = 0;
    }
    if (!T || !A || !B || !C || I < 1 || J < 1 || K < 1 || R < 1 || max_iter < 1 || !(tol >= 0) ||
        (init != MHE_CP_INIT_RANDOM && init != MHE_CP_INIT_SVD))
        return MHE_ERR_ARG;
    IJK = mhe__mul_size(mhe__mul_size((size_t)I, (size_t)J, &ok), (size_t)K, &ok);
    n_max = (size_t)(I > J ? (I > K ? I : K) : (J > K ? J : K));
    /* W: T times one factor ([I*J or J*K, R]), then the reconstruction [I*J, K]; M: MTTKRP [n, R] */
    bytes = mhe__mul_size(
        mhe__mul_size((size_t)I * J > (size_t)J * K ? (size_t)I * J : (size_t)J * K, (size_t)R, &ok),
        sizeof(float), &ok);
    bytes = mhe__add_size(bytes, mhe__mul_size(IJK, sizeof(float), &ok), &ok);
    bytes = mhe__add_size(bytes, mhe__mul_size(n_max * (size_t)R, sizeof(float), &ok), &ok);
    bytes = mhe__add_size(bytes, sizeof(float), &ok); /* room to align the doubles */
    bytes = mhe__add_size(bytes, mhe__mul_size((size_t)(2 * R + (int)n_max) * R, sizeof(double), &ok), &ok);
    if (!ok || (int64_t)IJK > INT_MAX)
        return MHE_ERR_OVERFLOW;
    W = (float *)MHE_MALLOC(alloc_ctx, bytes);
    if (!W)
        return MHE_ERR_NOMEM;
    M = W + ((size_t)I * J > (size_t)J * K ? (size_t)I * J : (size_t)J * K) * R;
    /* the doubles after the floats start at an even float offset (malloc aligns the block for double) */
    G = (double *)(void *)(M + ((size_t)(M - W) + n_max * R + IJK) % 2 + n_max * R + IJK);
    G2 = G + (size_t)R * R;
    Y = G2 + (size_t)R * R;
    F[0] = A;
    F[1] = B;
    F[2] = C;
    dims[0] = I;
    dims[1] = J;
    dims[2] = K;
    mhe_rng_seed(&rng, seed);
    for (mode = 0; mode < 3; mode++)
        for (i = 0; i < (size_t)dims[mode] * R; i++)
            F[mode][i] = mhe_rng_uniform(&rng);
    if (init == MHE_CP_INIT_SVD) {
        size_t nm = n_max;
        double *Gm = (double *)MHE_MALLOC(alloc_ctx, (nm * nm + 2 * nm * (size_t)R) * sizeof(double));
        float *Gf = (float *)MHE_MALLOC(alloc_ctx, nm * nm * sizeof(float));
        if (!Gm || !Gf) {
            if (Gm)
                MHE_FREE(alloc_ctx, Gm);
            if (Gf)
                MHE_FREE(alloc_ctx, Gf);
            MHE_FREE(alloc_ctx, W);
            return MHE_ERR_NOMEM;
        }
        for (mode = 0; mode < 3; mode++) { /* Gram matrix of the mode's unfolding, as GEMMs */
            int n = dims[mode], x;
            if (mode == 0)
                mhe_gemm(0, 1, I, I, J * K, 1.0f, T, J * K, T, J * K, 0.0f, Gf, I);
            else if (mode == 2)
                mhe_gemm(1, 0, K, K, I * J, 1.0f, T, K, T, K, 0.0f, Gf, K);
            else
                for (x = 0; x < I; x++) /* sum over i of slice_i slice_i^T, slice_i [J, K] */
                    mhe_gemm(0, 1, J, J, K, 1.0f, T + (size_t)x * J * K, K, T + (size_t)x * J * K, K,
                             x ? 1.0f : 0.0f, Gf, J);
            for (i = 0; i < (size_t)n * n; i++)
                Gm[i] = Gf[i];
            mhe__cp_svd_init(Gm, n, R, F[mode], Gm + nm * nm, &rng);
        }
        MHE_FREE(alloc_ctx, Gf);
        MHE_FREE(alloc_ctx, Gm);
    }
    for (i = 0; i < IJK; i++)
        norm_t += (double)T[i] * T[i];
    norm_t = sqrt(norm_t);
    for (it = 0; it < max_iter && !converged; it++) {
        for (mode = 0; mode < 3; mode++) {
            int n = dims[mode], p = (mode + 1) % 3, q = (mode + 2) % 3, x, y;
            double recon = 0;
            /* MTTKRP: M[n, r] = sum over the other two indices of T times their factors */
            if (mode == 0) { /* W[(i,j), r] = sum_k T[i,j,k] C[k,r]; M[i,r] = sum_j W[(i,j),r] B[j,r] */
                mhe_gemm(0, 0, I * J, R, K, 1.0f, T, K, C, R, 0.0f, W, R);
                for (x = 0; x < I; x++)
                    for (r = 0; r < R; r++) {
                        double s = 0;
                        for (y = 0; y < J; y++)
                            s += (double)W[((size_t)x * J + y) * R + r] * B[(size_t)y * R + r];
                        M[(size_t)x * R + r] = (float)s;
                    }
            } else if (mode ==
                       1) { /* W = T C still holds (C has not changed): M[j,r] = sum_i W[(i,j),r] A[i,r] */
                for (y = 0; y < J; y++)
                    for (r = 0; r < R; r++) {
                        double s = 0;
                        for (x = 0; x < I; x++)
                            s += (double)W[((size_t)x * J + y) * R + r] * A[(size_t)x * R + r];
                        M[(size_t)y * R + r] = (float)s;
                    }
            } else {
                /* W[(j,k), r] = sum_i T[i,j,k] A[i,r] (T as I x JK, transposed);
                   M[k,r] = sum_j W[(j,k),r] B[j,r] */
                mhe_gemm(1, 0, J * K, R, I, 1.0f, T, J * K, A, R, 0.0f, W, R);
                for (y = 0; y < K; y++)
                    for (r = 0; r < R; r++) {
                        double s = 0;
                        for (x = 0; x < J; x++)
                            s += (double)W[((size_t)x * K + y) * R + r] * B[(size_t)x * R + r];
                        M[(size_t)y * R + r] = (float)s;
                    }
            }
            /* normal equations: F_mode (G_p * G_q) = M */
            mhe__gram(F[p], dims[p], R, G);
            mhe__gram(F[q], dims[q], R, G2);
            for (a = 0; a < R * R; a++)
                G[a] *= G2[a];
            for (i = 0; i < (size_t)n * R; i++)
                Y[i] = M[i];
            if (!mhe__chol_solve_rows(G, R, Y, n)) {
                MHE_FREE(alloc_ctx, W);
                return MHE_ERR_NONFINITE;
            }
            for (i = 0; i < (size_t)n * R; i++)
                F[mode][i] = (float)Y[i];
            if (mode == 2) { /* [[A, B, C]] = (A (.) B) C^T as [I*J, K]: rows A[i] * B[j] times C^T */
                float *rec = M + n_max * R;
                for (x = 0; x < I; x++)
                    for (y = 0; y < J; y++)
                        for (r = 0; r < R; r++)
                            W[((size_t)x * J + y) * R + r] = A[(size_t)x * R + r] * B[(size_t)y * R + r];
                mhe_gemm(0, 1, I * J, K, R, 1.0f, W, R, C, R, 0.0f, rec, K);
                for (i = 0; i < IJK; i++) {
                    double dlt = (double)T[i] - rec[i];
                    recon += dlt * dlt;
                }
                err = sqrt(recon) / (norm_t > 0 ? norm_t : 1);
            }
        }
        if (!(err == err)) {
            MHE_FREE(alloc_ctx, W);
            return MHE_ERR_NONFINITE;
        }
        if (prev >= 0 && fabs(prev - err) < tol)
            converged = 1;
        prev = err;
        if (res) {
            res->rel_error = err;
            res->iterations = it + 1;
        }
    }
    MHE_FREE(alloc_ctx, W);
    return converged ? MHE_OK : MHE_ERR_CONVERGE;
}

/* ---- 3. kernels: FFT (for fnet) ------------------------------------------ */

static int mhe__pow2_at_least(int n) {
    int m = 1;
    while (m < n)
        m <<= 1;
    return m;
}

MHEDEF size_t mhe_fft_work_len(int n) {
    int m;
    if (n < 2 || (n & (n - 1)) == 0)
        return 1;
    m = mhe__pow2_at_least(2 * n - 1);
    return 4 * (size_t)m + 2 * (size_t)n; /* a, b (complex, m each) and the chirp (n) */
}

/* iterative radix-2 (Cooley-Tukey), n a power of two; sign -1 forward */
static void mhe__fft2(double *re, double *im, int n, int sign) {
    int i, j = 0, len, k;
    for (i = 1; i < n; i++) { /* bit reversal */
        int bit = n >> 1;
        double t;
        for (; j & bit; bit >>= 1)
            j ^= bit;
        j ^= bit;
        if (i < j) {
            t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (len = 2; len <= n; len <<= 1) {
        double ang = sign * 6.283185307179586 / len;
        for (k = 0; k < len / 2; k++) {
            double wr = cos(ang * k), wi = sin(ang * k);
            for (i = k; i < n; i += len) {
                int i2 = i + len / 2;
                double xr = re[i2] * wr - im[i2] * wi, xi = re[i2] * wi + im[i2] * wr;
                re[i2] = re[i] - xr;
                im[i2] = im[i] - xi;
                re[i] += xr;
                im[i] += xi;
            }
        }
    }
}

/* Bluestein: jk = (j^2 + k^2 - (k - j)^2) / 2, so X_k = w_k sum_j (x_j w_j)
   conj(w)_{k-j} with w_j = exp(sign i pi j^2 / n): a convolution, done by
   radix-2 transforms of length m >= 2n - 1. j^2 is reduced mod 2n first so
   the chirp's angle stays exact for long transforms. */
MHEDEF void mhe_fft(double *re, double *im, int n, int inverse, double *work) {
    int sign = inverse ? 1 : -1, m, j;
    double *ar, *ai, *br, *bi, *cr, *ci;
    if (n < 2)
        return;
    if ((n & (n - 1)) == 0) {
        mhe__fft2(re, im, n, sign);
        return;
    }
    m = mhe__pow2_at_least(2 * n - 1);
    ar = work;
    ai = ar + m;
    br = ai + m;
    bi = br + m;
    cr = bi + m;
    ci = cr + n;
    for (j = 0; j < n; j++) {
        long long q = ((long long)j * j) % (2LL * n);
        double ang = sign * 3.141592653589793 * (double)q / n;
        cr[j] = cos(ang);
        ci[j] = sin(ang);
    }
    for (j = 0; j < m; j++) {
        ar[j] = ai[j] = br[j] = bi[j] = 0;
    }
    for (j = 0; j < n; j++) {
        ar[j] = re[j] * cr[j] - im[j] * ci[j];
        ai[j] = re[j] * ci[j] + im[j] * cr[j];
        br[j] = cr[j];
        bi[j] = -ci[j];
        if (j) {
            br[m - j] = cr[j];
            bi[m - j] = -ci[j];
        }
    }
    mhe__fft2(ar, ai, m, -1);
    mhe__fft2(br, bi, m, -1);
    for (j = 0; j < m; j++) {
        double xr = ar[j] * br[j] - ai[j] * bi[j], xi = ar[j] * bi[j] + ai[j] * br[j];
        ar[j] = xr;
        ai[j] = xi;
    }
    mhe__fft2(ar, ai, m, 1);
    for (j = 0; j < n; j++) {
        double xr = ar[j] / m, xi = ai[j] / m;
        re[j] = xr * cr[j] - xi * ci[j];
        im[j] = xr * ci[j] + xi * cr[j];
    }
}

/* ---- 4. attention cores ------------------------------------------------- */

/* index of the attention weight (b, h, t, j) for the dropout hash */
#define MHE__ATT_IDX(d, b, h, t, j) \
    ((((uint64_t)(b) * (uint64_t)(d)->n_heads + (uint64_t)(h)) * (uint64_t)(d)->Tq + (uint64_t)(t)) * \
         (uint64_t)(d)->Tk + (uint64_t)(j))

/* number of keys query t of sequence b may see: the causal bound and the
   sequence's real length (keys past it are padding) */
static int mhe__att_visible(const mhe_attn_dims *d, int b, int t) {
    int n = d->causal ? t + d->q_offset + 1 : d->Tk, len = d->kv_len ? d->kv_len[b] : d->Tk;
    if (len < n)
        n = len;
    return n < 0 ? 0 : (n > d->Tk ? d->Tk : n);
}

static float mhe__dot(const float *a, const float *b, int n) {
    return mhe__lane_dot3(a, b, NULL, n);
}

static MHE__VECTORISE void mhe__axpy(float *y, float a, const float *x, int n) {
    int i;
    for (i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* Collaborative geometry in the reference core: Q/K heads of width d_qk,
   values per query head, the key bias inside the logits. */
#define MHE__QKW(d) ((d)->d_qk > 0 ? (d)->d_qk : (d)->d_head)
#define MHE__REF_VH(d, g, h) ((size_t)((d)->v_per_head ? (h) : (g)) * (d)->d_head)
#define MHE__REF_KB(d, b, j, h) \
    ((d)->k_bias ? (d)->k_bias[((size_t)(b) * (d)->Tk + (j)) * (d)->k_bias_stride + (h)] : 0.0f)

#ifdef _OPENMP
/* worth a second thread: B n Tq Tk scores */
static int mhe__att_parallel(const mhe_attn_dims *d) {
    return (int64_t)d->B * d->n_heads * d->Tq * d->Tk > MHE__PAR_MIN;
}
#endif

/* a backward's default: no map or bias gradients */
static const mhe_attn_grads mhe__no_grads = { NULL, NULL, NULL, NULL, NULL, NULL, NULL };

/* the scale of an attention weight that dropout keeps: 1 / (1 - p) */
static float mhe__att_keep(const mhe_attn_dims *d) {
    return d->dropout > 0 ? 1.0f / (1.0f - d->dropout) : 1.0f;
}

/* Reference: S = Q K^T * scale; S_tj = -inf where masked; P = softmax(S);
   O = dropout(P) V. One (b, kv-group) per iteration so K/V gradients of
   heads that share them never race. */
MHEDEF void mhe_attn_ref_fwd(const mhe_attn_dims *d, float *out, float *probs, const float *q, const float *k,
                             const float *v) {
    int group = d->n_heads / d->n_kv_heads, W = MHE__QKW(d), bg;
    float keep = mhe__att_keep(d);
MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
for (bg = 0; bg < d->B * d->n_kv_heads; bg++) {
    int b = bg / d->n_kv_heads, g = bg % d->n_kv_heads, h, t, j;
    for (h = g * group; h < (g + 1) * group; h++)
        for (t = 0; t < d->Tq; t++) {
            const float *qt = q + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * W;
            float *p = probs + (((size_t)b * d->n_heads + h) * d->Tq + t) * d->Tk;
            float *o = out + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * d->d_head;
            int vis = mhe__att_visible(d, b, t);
            for (j = 0; j < d->Tk; j++) {
                const float *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)g * W;
                p[j] = j < vis ? d->scale * (mhe__dot(qt, kj, W) + MHE__REF_KB(d, b, j, h)) : -INFINITY;
            }
            if (vis > 0)
                mhe_softmax_fwd(p, p, 1, d->Tk);
            else
                for (j = 0; j < d->Tk; j++)
                    p[j] = 0;
            memset(o, 0, (size_t)d->d_head * sizeof(float));
            for (j = 0; j < vis; j++) {
                float w = p[j];
                if (d->dropout > 0)
                    w = mhe_hash_uniform(d->seed, MHE__ATT_IDX(d, b, h, t, j)) >= d->dropout ? w * keep
                                                                                             : 0.0f;
                mhe__axpy(o, w, v + ((size_t)b * d->Tk + j) * d->v_stride + MHE__REF_VH(d, g, h), d->d_head);
            }
        }
}
}

#ifndef MHE_NO_TRAIN
/* forward was: o_t = sum_j Pd_tj v_j, Pd = dropout(P), P = softmax(S), S = scale (q k^T + kb).
   dv_j += Pd_tj do_t; dPd_tj = do_t . v_j; dP = dPd * mask/(1-p);
   dS_tj = P_tj (dP_tj - sum_k P_tk dP_tk); dq_t += scale dS k; dk_j += scale dS q_t; dkb_j += scale dS. */
MHEDEF void mhe_attn_ref_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr, float *dq, float *dk,
                             float *dv, const float *dout, const float *probs, const float *q, const float *k,
                             const float *v) {
    int group = d->n_heads / d->n_kv_heads, W = MHE__QKW(d), bg;
    float keep = mhe__att_keep(d);
    if (!gr)
        gr = &mhe__no_grads;
MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
for (bg = 0; bg < d->B * d->n_kv_heads; bg++) {
    int b = bg / d->n_kv_heads, g = bg % d->n_kv_heads, h, t, j;
    for (h = g * group; h < (g + 1) * group; h++)
        for (t = 0; t < d->Tq; t++) {
            const float *qt = q + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * W;
            const float *dot_ = dout + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * d->d_head;
            const float *p = probs + (((size_t)b * d->n_heads + h) * d->Tq + t) * d->Tk;
            float *dqt = dq + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * W;
            int vis = mhe__att_visible(d, b, t);
            float sum = 0;
            for (j = 0; j < vis; j++) { /* pass 1: sum_k P dP */
                const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + MHE__REF_VH(d, g, h);
                float m = 1.0f, dp;
                if (d->dropout > 0)
                    m = mhe_hash_uniform(d->seed, MHE__ATT_IDX(d, b, h, t, j)) >= d->dropout ? keep : 0.0f;
                dp = mhe__dot(dot_, vj, d->d_head) * m;
                sum += p[j] * dp;
                mhe__axpy(dv + ((size_t)b * d->Tk + j) * d->v_stride + MHE__REF_VH(d, g, h), p[j] * m, dot_,
                          d->d_head);
            }
            for (j = 0; j < vis; j++) { /* pass 2: dS, dq, dk */
                const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + MHE__REF_VH(d, g, h);
                const float *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)g * W;
                float m = 1.0f, ds;
                if (d->dropout > 0)
                    m = mhe_hash_uniform(d->seed, MHE__ATT_IDX(d, b, h, t, j)) >= d->dropout ? keep : 0.0f;
                ds = p[j] * (mhe__dot(dot_, vj, d->d_head) * m - sum) * d->scale;
                mhe__axpy(dqt, ds, kj, W);
                mhe__axpy(dk + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)g * W, ds, qt, W);
                if (gr->dk_bias)
                    gr->dk_bias[((size_t)b * d->Tk + j) * d->k_bias_stride + h] += ds;
            }
        }
}
}
#endif /* MHE_NO_TRAIN */

/* Row kernels of the online softmax. A running max or sum in one
   accumulator does not vectorise without -ffast-math (it would reorder the
   additions), so they keep 16 lanes and combine them in a fixed order: the
   same bits at every optimisation level. */
#define MHE__LANES 16
static MHE__VECTORISE float mhe__row_max(const float *s, int n, float mx) {
    float m[MHE__LANES];
    int j, l;
    for (l = 0; l < MHE__LANES; l++)
        m[l] = mx;
    for (j = 0; j + MHE__LANES <= n; j += MHE__LANES)
        for (l = 0; l < MHE__LANES; l++)
            m[l] = isgreater(s[j + l], m[l]) || s[j + l] != s[j + l] ? s[j + l] : m[l];
    for (; j < n; j++)
        m[0] = isgreater(s[j], m[0]) || s[j] != s[j] ? s[j] : m[0];
    /* a NaN score makes the max NaN: an all-NaN row must not pass for a fully masked one */
    for (l = 1; l < MHE__LANES; l++)
        m[0] = isgreater(m[l], m[0]) || m[l] != m[l] ? m[l] : m[0];
    return m[0];
}

/* s[j] = exp(s[j] - mx); returns their sum */
static MHE__VECTORISE float mhe__row_exp_sum(float *s, int n, float mx) {
    float a[MHE__LANES];
    int j, l;
    for (j = 0; j < n; j++)
        s[j] = mhe__exp(s[j] - mx);
    for (l = 0; l < MHE__LANES; l++)
        a[l] = 0.0f;
    for (j = 0; j + MHE__LANES <= n; j += MHE__LANES)
        for (l = 0; l < MHE__LANES; l++)
            a[l] += s[j + l];
    for (; j < n; j++)
        a[0] += s[j];
    for (l = MHE__LANES / 2; l >= 1; l /= 2)
        for (j = 0; j < l; j++)
            a[j] += a[j + l];
    return a[0];
}

/* One query row of the online softmax (Milakov and Gimelshein 2018), used
   by every tiled core: s holds the row's scores against a key tile and
   leaves with exp(s - m), m the new running max (all 0 on a row the mask
   hides); the running sum l and the row's accumulator acc [dh] are
   rescaled by exp(m_old - m). Returns that factor (0 on the first visible
   tile, 1 when nothing changed); *mass gets the tile's share of l. */
static MHE__VECTORISE float mhe__online_row(float *s, int cols, float *m, float *l, float *acc, int dh, float *mass) {
    float mx = mhe__row_max(s, cols, *m), corr;
    int j, c;
    *mass = 0.0f;
    if (mx == -INFINITY) {
        for (j = 0; j < cols; j++)
            s[j] = 0.0f;
        return 1.0f;
    }
    corr = expf(*m - mx);
    *mass = mhe__row_exp_sum(s, cols, mx);
    *l = *l * corr + *mass;
    if (corr != 1.0f)
        for (c = 0; c < dh; c++)
            acc[c] *= corr;
    *m = mx;
    return corr;
}

/* attention dropout on the weights of query t against keys j0 .. j0+cols-1,
   replayable from the seed; returns the kept weights' sum */
static MHE__VECTORISE float mhe__row_dropout(const mhe_attn_dims *d, float *s, int cols, int b, int h, int t, int j0) {
    float keep = mhe__att_keep(d), sum = 0.0f;
    int j;
    for (j = 0; j < cols; j++) {
        s[j] = mhe_hash_uniform(d->seed, MHE__ATT_IDX(d, b, h, t, j0 + j)) >= d->dropout ? s[j] * keep : 0.0f;
        sum += s[j];
    }
    return sum;
}

/* Tile sizes of the fused core: a block of MHE__BQ queries meets blocks of
   MHE__BK keys; the score tile and its partners live on the stack and every
   tile product is a small mhe_gemm (fast even at these sizes). */
#define MHE__BQ 64
#define MHE__BK 64

static void mhe__tile_mask(const mhe_attn_dims *d, float *S, int b, int t0, int rows, int j0, int cols) {
    int i, jj;
    for (i = 0; i < rows; i++) {
        int vis = mhe__att_visible(d, b, t0 + i) - j0;
        for (jj = vis < 0 ? 0 : vis; jj < cols; jj++)
            S[(size_t)i * MHE__BK + jj] = -INFINITY;
    }
}

/* out[r][c] = src[r][c] * mul[c] + add[c] (mul, add may be NULL) for a tile */
static void mhe__tile_affine(float *out, const float *src, size_t stride, int rows, int dh, const float *mul,
                             const float *add) {
    int r, c;
    for (r = 0; r < rows; r++) {
        const float *s = src + (size_t)r * stride;
        float *o = out + (size_t)r * dh;
        for (c = 0; c < dh; c++)
            o[c] = (mul ? s[c] * mul[c] : s[c]) + (add ? add[c] : 0.0f);
    }
}

/* where head h's rows start, and the per-head map vectors */
#define MHE__QH(d, h) ((d)->q_shared ? 0 : (size_t)(h) * (d)->d_head)
#define MHE__MAP(p, d, h) ((p) ? (p) + (size_t)(h) * (d)->d_head : NULL)

MHEDEF MHE__VECTORISE mhe_status mhe_attn_fused_fwd(const mhe_attn_dims *d, float *out, float *lse,
                                                    const float *q, const float *k, const float *v) {
    int group = d->n_heads / d->n_kv_heads, n_qb = (d->Tq + MHE__BQ - 1) / MHE__BQ, work;
    int dh = d->d_head, qmap = d->q_mul || d->q_add, kmap = d->k_add != NULL, vmap = d->v_mul || d->v_add;
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    if (!sc)
        return MHE_ERR_NOMEM;
    /* one (b, h, query block) per iteration: outputs never overlap */
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (work = 0; work < d->B * d->n_heads * n_qb; work++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT S = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT acc = mhe__carve(&tile, (size_t)MHE__BQ * dh);
        float *MHE__RESTRICT mrow = mhe__carve(&tile, MHE__BQ);
        float *MHE__RESTRICT lrow = mhe__carve(&tile, MHE__BQ);
        float *MHE__RESTRICT Qh = mhe__carve(&tile, (size_t)MHE__BQ * dh);
        float *MHE__RESTRICT Kh = mhe__carve(&tile, (size_t)MHE__BK * dh);
        float *MHE__RESTRICT Vh = mhe__carve(&tile, (size_t)MHE__BK * dh);
        int b = work / (d->n_heads * n_qb), h = (work / n_qb) % d->n_heads, qb = work % n_qb;
        int g = h / group, t0 = qb * MHE__BQ, rows = d->Tq - t0 < MHE__BQ ? d->Tq - t0 : MHE__BQ;
        int kend = mhe__att_visible(d, b, t0 + rows - 1), i, j0, c, ldq = d->q_stride;
        const float *qblk = q + ((size_t)b * d->Tq + t0) * d->q_stride + MHE__QH(d, h);
        if (qmap) {
            mhe__tile_affine(Qh, qblk, (size_t)d->q_stride, rows, dh, MHE__MAP(d->q_mul, d, h),
                             MHE__MAP(d->q_add, d, h));
            qblk = Qh;
            ldq = dh;
        }
        for (i = 0; i < rows; i++) {
            mrow[i] = -INFINITY;
            lrow[i] = 0;
        }
        memset(acc, 0, sizeof(float) * (size_t)rows * dh);
        for (j0 = 0; j0 < kend; j0 += MHE__BK) {
            int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK, ldk = d->k_stride, ldv = d->v_stride;
            size_t koff = (size_t)b * d->Tk + j0;
            const float *kblk = k + koff * d->k_stride + (size_t)g * dh,
                        *vblk = v + koff * d->v_stride + (size_t)g * dh;
            if (kmap) {
                mhe__tile_affine(Kh, kblk, (size_t)ldk, cols, dh, NULL, MHE__MAP(d->k_add, d, h));
                kblk = Kh;
                ldk = dh;
            }
            if (vmap) {
                mhe__tile_affine(Vh, vblk, (size_t)ldv, cols, dh, MHE__MAP(d->v_mul, d, h),
                                 MHE__MAP(d->v_add, d, h));
                vblk = Vh;
                ldv = dh;
            }
            /* S = scale * Q_blk K_blk^T */
            mhe_gemm(0, 1, rows, cols, dh, d->scale, qblk, ldq, kblk, ldk, 0.0f, S, MHE__BK);
            if (d->causal)
                mhe__tile_mask(d, S, b, t0, rows, j0, cols);
            /* online softmax: rescale what was summed under the old row max */
            for (i = 0; i < rows; i++) {
                float *s = S + (size_t)i * MHE__BK, mass;
                mhe__online_row(s, cols, mrow + i, lrow + i, acc + (size_t)i * dh, dh, &mass);
                if (d->dropout > 0)
                    mhe__row_dropout(d, s, cols, b, h, t0 + i, j0);
            }
            /* acc += P V_blk */
            mhe_gemm(0, 0, rows, dh, cols, 1.0f, S, MHE__BK, vblk, ldv, 1.0f, acc, dh);
        }
        for (i = 0; i < rows; i++) {
            float *o = out + ((size_t)b * d->Tq + t0 + i) * d->o_stride + (size_t)h * dh;
            float inv = lrow[i] > 0 ? 1.0f / lrow[i] : 0.0f;
            for (c = 0; c < dh; c++)
                o[c] = acc[(size_t)i * dh + c] * inv;
            lse[((size_t)b * d->n_heads + h) * d->Tq + t0 + i] =
                lrow[i] > 0 ? mrow[i] + logf(lrow[i]) : -INFINITY;
        }
        mhe_scratch_bind(outer);
    }
    mhe__scratch_done(&own);
    return MHE_OK;
}

#ifndef MHE_NO_TRAIN
/* One row of a backward tile, from the recomputed scores p and dP = dO V^T:
   P = exp(s - lse) on the first vis keys (0 past them), dS = P (dP*mask/(1-p) + add - D) * scale
   into dp, and P becomes the dropped-out Pd. add is dO.e^V for MHE-ADD, else 0. */
static MHE__VECTORISE void mhe__bwd_row(const mhe_attn_dims *d, float *p, float *dp, int cols, int vis,
                                        float lse, float D, float add, int b, int h, int t, int j0) {
    float keep = mhe__att_keep(d);
    int jj;
    for (jj = 0; jj < vis; jj++)
        p[jj] = mhe__exp(p[jj] - lse);
    for (; jj < cols; jj++)
        p[jj] = 0.0f;
    if (d->dropout > 0)
        for (jj = 0; jj < cols; jj++) {
            float m = jj < vis && mhe_hash_uniform(d->seed, MHE__ATT_IDX(d, b, h, t, j0 + jj)) >= d->dropout
                          ? keep
                          : 0.0f;
            dp[jj] = p[jj] * ((dp[jj] + add) * m - D) * d->scale; /* dS */
            p[jj] *= m; /* Pd */
        }
    else
        for (jj = 0; jj < cols; jj++)
            dp[jj] = p[jj] * (dp[jj] + add - D) * d->scale;
}

/* sum over rows of a tile, and of its product with another: the per-head map gradients */
static MHE__VECTORISE void mhe__map_grads(float *dmul, float *dadd, const float *grad, int gld,
                                          const float *src, size_t sld, int rows, int dh) {
    int r, c;
    for (r = 0; r < rows; r++)
        for (c = 0; c < dh; c++) {
            float gv = grad[(size_t)r * gld + c];
            if (dmul)
                dmul[c] += gv * src[(size_t)r * sld + c];
            if (dadd)
                dadd[c] += gv;
        }
}

/* Backward with recomputation (Dao et al. 2022, Algorithm 4 without the
   parallel-over-keys split): P = exp(S - lse), D_t = do_t . o_t,
   dV += Pd^T dO, dPd = dO V^T, dS = P * (dPd*mask/(1-p) - D),
   dQ += scale dS K, dK += scale dS^T Q. One (b, kv-group) per iteration so
   heads sharing K/V add into dK, dV in a fixed order without races. With
   per-head maps the tiles are mapped as in the forward; the map gradients of
   (b, h) go to gr->map_scratch[b][h] and are summed over b afterwards in a
   fixed order. */
MHEDEF MHE__VECTORISE mhe_status mhe_attn_fused_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr,
                                                    float *dq, float *dk, float *dv, const float *dout,
                                                    const float *out, const float *lse, const float *q,
                                                    const float *k, const float *v) {
    int group = d->n_heads / d->n_kv_heads, bg, dh = d->d_head, n = d->n_heads;
    int qmap = d->q_mul || d->q_add, kmap = d->k_add != NULL, vmap = d->v_mul || d->v_add;
    size_t per_bh = 5 * (size_t)dh; /* dq_mul, dq_add, dk_add, dv_mul, dv_add */
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    if (!gr)
        gr = &mhe__no_grads;
    if (qmap || kmap || vmap) { /* maps need room for their per-head sums */
        float *ms = gr->map_scratch;
        if (!ms) {
            mhe__scratch_done(&own);
            return MHE_ERR_ARG;
        }
        memset(ms, 0, (size_t)d->B * n * per_bh * sizeof(float));
    }
    if (!sc)
        return MHE_ERR_NOMEM;
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (bg = 0; bg < d->B * d->n_kv_heads; bg++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT P = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT dP = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT Drow = mhe__carve(&tile, MHE__BQ);
        float *MHE__RESTRICT Qh = mhe__carve(&tile, (size_t)MHE__BQ * dh);
        float *MHE__RESTRICT dQh = mhe__carve(&tile, (size_t)MHE__BQ * dh);
        float *MHE__RESTRICT Kh = mhe__carve(&tile, (size_t)MHE__BK * dh);
        float *MHE__RESTRICT Vh = mhe__carve(&tile, (size_t)MHE__BK * dh);
        float *MHE__RESTRICT dKVh = mhe__carve(&tile, (size_t)MHE__BK * dh);
        int b = bg / d->n_kv_heads, g = bg % d->n_kv_heads, h, t0, i, j0, jj, c;
        for (h = g * group; h < (g + 1) * group; h++) {
            float *ms = (qmap || kmap || vmap) ? gr->map_scratch + ((size_t)b * n + h) * per_bh : NULL;
            for (t0 = 0; t0 < d->Tq; t0 += MHE__BQ) {
                int rows = d->Tq - t0 < MHE__BQ ? d->Tq - t0 : MHE__BQ, ldq = d->q_stride;
                int kend = mhe__att_visible(d, b, t0 + rows - 1);
                size_t qoff = (size_t)b * d->Tq + t0;
                const float *qraw = q + qoff * d->q_stride + MHE__QH(d, h), *qblk = qraw;
                const float *doblk = dout + qoff * d->o_stride + (size_t)h * dh;
                const float *oblk = out + qoff * d->o_stride + (size_t)h * dh;
                float *dqblk = dq + qoff * d->q_stride + MHE__QH(d, h);
                const float *lse_b = lse + ((size_t)b * n + h) * d->Tq + t0;
                if (qmap) {
                    mhe__tile_affine(Qh, qraw, (size_t)d->q_stride, rows, dh, MHE__MAP(d->q_mul, d, h),
                                     MHE__MAP(d->q_add, d, h));
                    qblk = Qh;
                    ldq = dh;
                    memset(dQh, 0, sizeof(float) * (size_t)rows * dh);
                }
                for (i = 0; i < rows; i++)
                    Drow[i] = mhe__dot(doblk + (size_t)i * d->o_stride, oblk + (size_t)i * d->o_stride, dh);
                for (j0 = 0; j0 < kend; j0 += MHE__BK) {
                    int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK, ldk = d->k_stride,
                        ldv = d->v_stride;
                    size_t koff = (size_t)b * d->Tk + j0;
                    const float *kraw = k + koff * d->k_stride + (size_t)g * dh,
                                *vraw = v + koff * d->v_stride + (size_t)g * dh;
                    const float *kblk = kraw, *vblk = vraw;
                    float *dkblk = dk + koff * d->k_stride + (size_t)g * dh,
                          *dvblk = dv + koff * d->v_stride + (size_t)g * dh;
                    if (kmap) {
                        mhe__tile_affine(Kh, kraw, (size_t)ldk, cols, dh, NULL, MHE__MAP(d->k_add, d, h));
                        kblk = Kh;
                        ldk = dh;
                    }
                    if (vmap) {
                        mhe__tile_affine(Vh, vraw, (size_t)ldv, cols, dh, MHE__MAP(d->v_mul, d, h),
                                         MHE__MAP(d->v_add, d, h));
                        vblk = Vh;
                        ldv = dh;
                    }
                    mhe_gemm(0, 1, rows, cols, dh, d->scale, qblk, ldq, kblk, ldk, 0.0f, P, MHE__BK);
                    if (d->causal)
                        mhe__tile_mask(d, P, b, t0, rows, j0, cols);
                    mhe_gemm(0, 1, rows, cols, dh, 1.0f, doblk, d->o_stride, vblk, ldv, 0.0f, dP, MHE__BK);
                    for (i = 0; i < rows; i++) /* masked scores are -inf: exp gives 0 */
                        mhe__bwd_row(d, P + (size_t)i * MHE__BK, dP + (size_t)i * MHE__BK, cols, cols,
                                     lse_b[i], Drow[i], 0.0f, b, h, t0 + i, j0);
                    /* dV += Pd^T dO (through the value map: dV += dVh * v_mul) */
                    if (vmap) {
                        mhe_gemm(1, 0, cols, dh, rows, 1.0f, P, MHE__BK, doblk, d->o_stride, 0.0f, dKVh, dh);
                        mhe__map_grads(d->v_mul ? ms + 3 * dh : NULL, d->v_add ? ms + 4 * dh : NULL, dKVh, dh,
                                       vraw, (size_t)d->v_stride, cols, dh);
                        for (jj = 0; jj < cols; jj++)
                            for (c = 0; c < dh; c++)
                                dvblk[(size_t)jj * d->v_stride + c] +=
                                    dKVh[(size_t)jj * dh + c] *
                                    (d->v_mul ? d->v_mul[(size_t)h * dh + c] : 1.0f);
                    } else {
                        mhe_gemm(1, 0, cols, dh, rows, 1.0f, P, MHE__BK, doblk, d->o_stride, 1.0f, dvblk,
                                 d->v_stride);
                    }
                    /* dQ += dS K */
                    if (qmap)
                        mhe_gemm(0, 0, rows, dh, cols, 1.0f, dP, MHE__BK, kblk, ldk, 1.0f, dQh, dh);
                    else
                        mhe_gemm(0, 0, rows, dh, cols, 1.0f, dP, MHE__BK, kblk, ldk, 1.0f, dqblk,
                                 d->q_stride);
                    /* dK += dS^T Q (a key bias passes its gradient through unchanged) */
                    if (kmap) {
                        mhe_gemm(1, 0, cols, dh, rows, 1.0f, dP, MHE__BK, qblk, ldq, 0.0f, dKVh, dh);
                        mhe__map_grads(NULL, ms + 2 * dh, dKVh, dh, kraw, (size_t)d->k_stride, cols, dh);
                        for (jj = 0; jj < cols; jj++)
                            for (c = 0; c < dh; c++)
                                dkblk[(size_t)jj * d->k_stride + c] += dKVh[(size_t)jj * dh + c];
                    } else {
                        mhe_gemm(1, 0, cols, dh, rows, 1.0f, dP, MHE__BK, qblk, ldq, 1.0f, dkblk,
                                 d->k_stride);
                    }
                }
                if (qmap) { /* through the query map: dQ += dQh * q_mul */
                    const float *qm = MHE__MAP(d->q_mul, d, h);
                    mhe__map_grads(qm ? ms : NULL, d->q_add ? ms + dh : NULL, dQh, dh, qraw,
                                   (size_t)d->q_stride, rows, dh);
                    for (i = 0; i < rows; i++)
                        for (c = 0; c < dh; c++)
                            dqblk[(size_t)i * d->q_stride + c] +=
                                dQh[(size_t)i * dh + c] * (qm ? qm[c] : 1.0f);
                }
            }
        }
        mhe_scratch_bind(outer);
    }
    if (qmap || kmap || vmap) { /* sum the per-(b, h) map gradients over b */
        int b, h, c2, which;
        float *targets[5];
        targets[0] = gr->dq_mul;
        targets[1] = gr->dq_add;
        targets[2] = gr->dk_add;
        targets[3] = gr->dv_mul;
        targets[4] = gr->dv_add;
        for (which = 0; which < 5; which++) {
            if (!targets[which])
                continue;
            for (b = 0; b < d->B; b++)
                for (h = 0; h < n; h++)
                    for (c2 = 0; c2 < dh; c2++)
                        targets[which][(size_t)h * dh + c2] +=
                            gr->map_scratch[((size_t)b * n + h) * per_bh + (size_t)which * dh + c2];
        }
    }
    mhe__scratch_done(&own);
    return MHE_OK;
}
#endif /* MHE_NO_TRAIN */

/* One query per head over Tk keys (a decoding step). The per-head maps
   leave the key loop: MHE-ADD's key map adds q'.e_i^K to every score of head
   i, a constant the softmax ignores (only the lse keeps it), and a value map
   applies once to the head's output, sum_j p_j (v_j * m + a) = (sum_j p_j v_j)
   * m + a since the weights sum to 1 (MHE paper eq. 6). What is left is plain
   attention of up to MHE__ONE_HEADS mapped queries against the cached rows:
   a tile of MHE__BK keys is scored for all of them while each K row is in L1,
   one online-softmax step per tile and head (Milakov and Gimelshein 2018),
   then each V row meets every head's weight. So a pass streams whole cache
   rows, and MQA, GQA and MHE read a K/V head once per pass, not once per
   query head. The tiles
   live on the stack (about 10 KB): decoding on a small device binds no
   scratch. A head's numbers do not depend on which pass or thread has it. */
#define MHE__ONE_HEADS 8     /* query heads per pass over a group's keys (the shared kernels' lanes) */
#define MHE__ONE_FLOATS 1024 /* floats of mapped queries, and of accumulators, per pass */
#define MHE__ONE_PAR_FLOPS 262144 /* multiply-adds of a step worth a second thread */

/* heads per pass over a span of heads that read neighbouring cache columns */
static int mhe__one_heads(const mhe_attn_dims *d, int span) {
    int W = MHE__QKW(d), w = d->d_head, hb = span;
    if (W <= MHE__ONE_FLOATS && W > w)
        w = W; /* the mapped queries are copied when they fit */
    if (hb > MHE__ONE_HEADS)
        hb = MHE__ONE_HEADS;
    return hb > MHE__ONE_FLOATS / w ? MHE__ONE_FLOATS / w : hb;
}

/* Eight lanes as a C type (GNU C vector extension): the compiler maps them
   to its vectors (AVX ymm, two SSE or NEON registers, or scalars) and keeps
   named accumulators in registers, which arrays indexed in loops are not. */
#if (defined(__GNUC__) || defined(__clang__)) && !defined(MHE_NO_SIMD)
typedef float mhe__v8 __attribute__((vector_size(32)));
#define MHE__V8 1
/* x in every lane; spelled out, since x87 builds (-m32) evaluate a float
   scalar in long double and refuse to mix it with a float vector */
#define MHE__V8_SPLAT(x) ((mhe__v8){ (x), (x), (x), (x), (x), (x), (x), (x) })
#endif

/* s[i][jj] = q'_i . k_jj for the MHE__ONE_HEADS (8) heads of a pass that
   share one K head: with the queries transposed, qt[c][i], one key meets
   all heads as an 8-lane FMA per dimension, eight keys in independent
   chains, and no dot product needs a horizontal sum (unused heads have zero
   queries). */
static MHE__VECTORISE void mhe__one_scores_shared(float (*s)[MHE__BK], const float *qt, const float *k,
                                                  size_t stride, int W, int cols) {
    int jj, c, i, r;
    for (jj = 0; jj < cols; jj += 8) {
        const float *kr[8];
        for (r = 0; r < 8; r++) /* past the tile: a valid row, its scores dropped */
            kr[r] = k + (size_t)(jj + r < cols ? jj + r : jj) * stride;
#ifdef MHE__V8
        {
            mhe__v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0}, qc;
            for (c = 0; c < W; c++) {
                memcpy(&qc, qt + (size_t)c * 8, sizeof qc);
                a0 += MHE__V8_SPLAT(kr[0][c]) * qc;
                a1 += MHE__V8_SPLAT(kr[1][c]) * qc;
                a2 += MHE__V8_SPLAT(kr[2][c]) * qc;
                a3 += MHE__V8_SPLAT(kr[3][c]) * qc;
                a4 += MHE__V8_SPLAT(kr[4][c]) * qc;
                a5 += MHE__V8_SPLAT(kr[5][c]) * qc;
                a6 += MHE__V8_SPLAT(kr[6][c]) * qc;
                a7 += MHE__V8_SPLAT(kr[7][c]) * qc;
            }
            for (i = 0; i < 8; i++) {
                float row[8];
                row[0] = a0[i], row[1] = a1[i], row[2] = a2[i], row[3] = a3[i];
                row[4] = a4[i], row[5] = a5[i], row[6] = a6[i], row[7] = a7[i];
                for (r = 0; r < 8 && jj + r < cols; r++)
                    s[i][jj + r] = row[r];
            }
        }
#else
        for (r = 0; r < 8 && jj + r < cols; r++)
            for (i = 0; i < 8; i++) {
                float a = 0.0f;
                for (c = 0; c < W; c++)
                    a += kr[r][c] * qt[(size_t)c * 8 + i];
                s[i][jj + r] = a;
            }
#endif
    }
}

/* acc[i] += sum_jj p[i][jj] v_jj for the 8 heads of a pass that share one V
   head: 8 output columns of every head stay in registers while the tile's
   V rows stream past (unused heads have zero weights) */
static MHE__VECTORISE void mhe__one_pv_shared(float *acc, int dh, float (*p)[MHE__BK], const float *v,
                                              size_t stride, int cols) {
    int c0 = 0, jj, i;
#ifdef MHE__V8
    for (; c0 + 8 <= dh; c0 += 8) {
        mhe__v8 a[8], vr;
        mhe__v8 a0, a1, a2, a3, a4, a5, a6, a7;
        for (i = 0; i < 8; i++)
            memcpy(&a[i], acc + (size_t)i * dh + c0, sizeof vr);
        a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
        for (jj = 0; jj < cols; jj++) {
            memcpy(&vr, v + (size_t)jj * stride + c0, sizeof vr);
            a0 += MHE__V8_SPLAT(p[0][jj]) * vr;
            a1 += MHE__V8_SPLAT(p[1][jj]) * vr;
            a2 += MHE__V8_SPLAT(p[2][jj]) * vr;
            a3 += MHE__V8_SPLAT(p[3][jj]) * vr;
            a4 += MHE__V8_SPLAT(p[4][jj]) * vr;
            a5 += MHE__V8_SPLAT(p[5][jj]) * vr;
            a6 += MHE__V8_SPLAT(p[6][jj]) * vr;
            a7 += MHE__V8_SPLAT(p[7][jj]) * vr;
        }
        a[0] = a0, a[1] = a1, a[2] = a2, a[3] = a3, a[4] = a4, a[5] = a5, a[6] = a6, a[7] = a7;
        for (i = 0; i < 8; i++)
            memcpy(acc + (size_t)i * dh + c0, &a[i], sizeof vr);
    }
#endif
    for (; c0 < dh; c0++) /* without vectors, or past the last 8: one column at a time */
        for (i = 0; i < 8; i++)
            for (jj = 0; jj < cols; jj++)
                acc[(size_t)i * dh + c0] += p[i][jj] * v[(size_t)jj * stride + c0];
}

/* A pass's running state: per head the max, the sum of weights, the key
   map's lse constant, then the [nh, d_h] unnormalised outputs. */
#define MHE__ONE_STATE (3 * MHE__ONE_HEADS + MHE__ONE_FLOATS)

/* o = (acc / l) * v_mul + v_add and the lse, from a pass's state */
static void mhe__one_finish(const mhe_attn_dims *d, float *out, float *lse, int b, int h0, int nh,
                            const float *st) {
    int dh = d->d_head, i, c;
    for (i = 0; i < nh; i++) {
        int h = h0 + i;
        const float *vm = MHE__MAP(d->v_mul, d, h), *va = MHE__MAP(d->v_add, d, h);
        const float *acc = st + 3 * MHE__ONE_HEADS + (size_t)i * dh;
        float mx = st[i], l = st[MHE__ONE_HEADS + i], shift = st[2 * MHE__ONE_HEADS + i];
        float *o = out + (size_t)b * d->o_stride + (size_t)h * dh, inv = l > 0 ? 1.0f / l : 0.0f;
        for (c = 0; c < dh; c++) {
            float x = acc[c] * inv;
            o[c] = (vm ? x * vm[c] : x) + (va && l > 0 ? va[c] : 0.0f);
        }
        lse[((size_t)b * d->n_heads + h) * d->Tq] = l > 0 ? mx + logf(l) + shift : -INFINITY;
    }
}

/* heads h0 .. h0+nh-1 of batch row b (one K/V group, or MHA's neighbours)
   over keys [ja, jb): the state into st */
static MHE__VECTORISE void mhe__attn_one_pass(const mhe_attn_dims *d, float *st, const float *q, const float *k,
                                              const float *v, int b, int h0, int nh, int ja, int jb) {
    int group = d->n_heads / d->n_kv_heads, dh = d->d_head, W = MHE__QKW(d), g0 = h0 / group;
    int copied = W <= MHE__ONE_FLOATS, i, j0, jj, c;
    /* heads of one K (V) head take the shared kernels, padded to MHE__ONE_HEADS */
    int kshared = group > 1 && W * MHE__ONE_HEADS <= MHE__ONE_FLOATS && dh * MHE__ONE_HEADS <= MHE__ONE_FLOATS;
    int vshared = kshared && !d->v_per_head, rows = kshared ? MHE__ONE_HEADS : nh;
    float qx[MHE__ONE_FLOATS], s[MHE__ONE_HEADS][MHE__BK];
    float *mx = st, *l = st + MHE__ONE_HEADS, *shift = st + 2 * MHE__ONE_HEADS, *acc = st + 3 * MHE__ONE_HEADS;
    const float *qr[MHE__ONE_HEADS], *qm[MHE__ONE_HEADS];
    if (kshared)
        memset(qx, 0, sizeof(float) * (size_t)W * MHE__ONE_HEADS);
    for (i = 0; i < nh; i++) { /* q' = q * q_mul + q_add, per head (kshared: transposed) */
        int h = h0 + i;
        const float *qa = MHE__MAP(d->q_add, d, h), *ka = MHE__MAP(d->k_add, d, h);
        size_t at = kshared ? (size_t)i : (size_t)i * W, step = kshared ? MHE__ONE_HEADS : 1;
        qr[i] = q + (size_t)b * d->q_stride + (d->q_shared ? 0 : (size_t)h * W);
        qm[i] = d->q_mul ? d->q_mul + (size_t)h * W : NULL;
        shift[i] = 0.0f;
        if (copied)
            for (c = 0; c < W; c++) {
                float x = (qm[i] ? qr[i][c] * qm[i][c] : qr[i][c]) + (qa ? qa[c] : 0.0f);
                qx[at + c * step] = x;
                shift[i] += ka ? x * ka[c] : 0.0f;
            }
        MHE_ASSERT(!(qa || ka) || copied); /* additive maps only in MHE-ADD, where W = d_h */
        shift[i] *= d->scale;
    }
    for (i = 0; i < rows; i++) {
        mx[i] = -INFINITY;
        l[i] = 0.0f;
        for (c = 0; c < dh; c++)
            acc[(size_t)i * dh + c] = 0.0f;
        for (jj = 0; jj < MHE__BK; jj++)
            s[i][jj] = 0.0f; /* padded heads keep zero weights */
    }
    for (j0 = ja; j0 < jb; j0 += MHE__BK) {
        int cols = jb - j0 < MHE__BK ? jb - j0 : MHE__BK;
        size_t row0 = (size_t)b * d->Tk + j0;
        if (kshared) /* S = Q' K^T */
            mhe__one_scores_shared(s, qx, k + row0 * d->k_stride + (size_t)g0 * W, (size_t)d->k_stride, W, cols);
        else
            for (jj = 0; jj < cols; jj++) { /* each K row once for the nh heads */
                const float *kr = k + (row0 + jj) * d->k_stride;
                for (i = 0; i < nh; i++) {
                    const float *kh = kr + (size_t)((h0 + i) / group) * W;
                    s[i][jj] = copied ? mhe__dot(qx + (size_t)i * W, kh, W) : mhe__lane_dot3(qr[i], qm[i], kh, W);
                }
            }
        for (i = 0; i < nh; i++) {
            float mass;
            if (d->k_bias) /* collab's content bias, inside the scaled logit */
                for (jj = 0; jj < cols; jj++)
                    s[i][jj] += d->k_bias[(row0 + jj) * d->k_bias_stride + h0 + i];
            for (jj = 0; jj < cols; jj++)
                s[i][jj] *= d->scale;
            mhe__online_row(s[i], cols, mx + i, l + i, acc + (size_t)i * dh, dh, &mass); /* s = exp(s - m) */
        }
        if (vshared) /* acc += P V */
            mhe__one_pv_shared(acc, dh, s, v + row0 * d->v_stride + (size_t)g0 * dh, (size_t)d->v_stride, cols);
        else
            for (jj = 0; jj < cols; jj++) { /* each V row once for the nh heads */
                const float *vr = v + (row0 + jj) * d->v_stride;
                for (i = 0; i < nh; i++)
                    mhe__axpy(acc + (size_t)i * dh, s[i][jj],
                              vr + (size_t)(d->v_per_head ? h0 + i : (h0 + i) / group) * dh, dh);
            }
    }
}

/* two states of the same heads over consecutive key ranges -> one, in a
   (the online-softmax merge: each side rescaled to the larger max) */
static void mhe__one_merge(float *a, const float *b2, int nh, int dh) {
    int i, c;
    for (i = 0; i < nh; i++) {
        float m0 = a[i], m1 = b2[i], mx = m0 > m1 ? m0 : m1, f0, f1;
        if (mx == -INFINITY)
            continue; /* neither range saw a key */
        f0 = expf(m0 - mx);
        f1 = expf(m1 - mx);
        a[i] = mx;
        a[MHE__ONE_HEADS + i] = a[MHE__ONE_HEADS + i] * f0 + b2[MHE__ONE_HEADS + i] * f1;
        for (c = 0; c < dh; c++)
            a[3 * MHE__ONE_HEADS + (size_t)i * dh + c] =
                a[3 * MHE__ONE_HEADS + (size_t)i * dh + c] * f0 + b2[3 * MHE__ONE_HEADS + (size_t)i * dh + c] * f1;
    }
}

/* Passes over the cache are independent: threads take them. A pass covers
   heads of one K/V group (MHA: neighbouring heads, so it streams whole
   rows). A span is not split across threads by heads: the shared kernels
   cost the same for 4 heads as for 8, and two threads reading halves of the
   same MHA rows were measured twice as slow as one reading them whole. A
   single pass over a long context (one sequence, MHA or one K/V group)
   splits its keys in two halves instead, merged in a fixed order, so one
   thread and two give the same bits (Dao et al. 2023, Flash-Decoding). */
#define MHE__ONE_SPLIT 512 /* keys from which a lone pass splits */

static void mhe__attn_one(const mhe_attn_dims *d, float *out, float *lse, const float *q, const float *k,
                          const float *v) {
    int n = d->n_heads, group = n / d->n_kv_heads, span = group == 1 ? n : group, spans = d->B * (n / span);
    int nt = mhe__max_threads(), hb = mhe__one_heads(d, span), per = (span + hb - 1) / hb, work;
    int64_t flops = (int64_t)d->B * n * d->Tk * (MHE__QKW(d) + d->d_head);
    if (mhe__in_parallel() || flops < MHE__ONE_PAR_FLOPS)
        nt = 1;
    if (spans * per == 1 && mhe__att_visible(d, 0, 0) >= MHE__ONE_SPLIT) {
        float st[2][MHE__ONE_STATE];
        int vis = mhe__att_visible(d, 0, 0), half = ((vis + 1) / 2 + MHE__BK - 1) / MHE__BK * MHE__BK, s;
        MHE__OMP(omp parallel for schedule(static) num_threads(2) if (nt > 1))
        for (s = 0; s < 2; s++)
            mhe__attn_one_pass(d, st[s], q, k, v, 0, 0, n, s ? half : 0, s ? vis : half);
        mhe__one_merge(st[0], st[1], n, d->d_head);
        mhe__one_finish(d, out, lse, 0, 0, n, st[0]);
        return;
    }
    if (nt > spans * per)
        nt = spans * per;
    MHE__OMP(omp parallel for schedule(static) num_threads(nt) if (nt > 1))
    for (work = 0; work < spans * per; work++) {
        float st[MHE__ONE_STATE];
        int sp = work / per, h0 = (sp % (n / span)) * span + (work % per) * hb, b = sp / (n / span);
        int nh = (sp % (n / span) + 1) * span - h0 < hb ? (sp % (n / span) + 1) * span - h0 : hb;
        mhe__attn_one_pass(d, st, q, k, v, b, h0, nh, 0, mhe__att_visible(d, b, 0));
        mhe__one_finish(d, out, lse, b, h0, nh, st);
    }
}

/* MHE-MUL with the heads stacked (MHE paper eq. 5, psi = mul). Every head
   reads the one seed K and V, so a query block of all n heads meets each
   key tile in one score GEMM, [Q*w_1; ...; Q*w_n] K^T with w_i =
   (1+e_i^Q)(1+e_i^K), and one P V GEMM; the value map 1+e_i^V scales each
   head's output once, A_i (V*(1+e_i^V)) = (A_i V)*(1+e_i^V). K and V are
   packed once per tile for all heads and the GEMMs are n times taller than
   a head's, which is where MHE-MUL gains on MHA. Collaborative attention
   (Cordonnier et al. 2020, eq. 12) has the same shape: Q and K of width
   d_qk shared, head i weighted by its mixing row m_i, plus a per-head key
   bias (the content bias) and per-head values (one P_i V_i GEMM per head).
   Used when n stacked rows fit MHE__MUL_FLOATS / max(d_qk, d_h, BK). */
#define MHE__MUL_FLOATS 8192

/* query rows per block when n heads with Q/K width W are stacked, 0 when they do not fit */
static int mhe__stacked_rows(int n, int W, int dh) {
    int w = W > dh ? W : dh, rows;
    if (w < MHE__BK)
        w = MHE__BK;
    rows = MHE__MUL_FLOATS / w / n;
    return rows > MHE__BQ ? MHE__BQ : rows;
}

static int mhe__attn_mul_rows(const mhe_attn_dims *d) {
    if (d->n_kv_heads != 1 || !d->q_shared || !d->q_mul || d->q_add || d->k_add || d->v_add)
        return 0;
    return mhe__stacked_rows(d->n_heads, MHE__QKW(d), d->d_head);
}

static MHE__VECTORISE void mhe__attn_mul_fwd(const mhe_attn_dims *d, float *out, float *lse, const float *q,
                                             const float *k, const float *v) {
    int n = d->n_heads, dh = d->d_head, W = MHE__QKW(d), R = mhe__attn_mul_rows(d),
        n_qb = (d->Tq + R - 1) / R, work;
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    MHE_ASSERT(sc); /* models bind their scratch before they run a core */
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (work = 0; work < d->B * n_qb; work++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT Qs = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT S = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT acc = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT mrow = mhe__carve(&tile, MHE__MUL_FLOATS / MHE__BK);
        float *MHE__RESTRICT lrow = mhe__carve(&tile, MHE__MUL_FLOATS / MHE__BK);
        int b = work / n_qb, t0 = (work % n_qb) * R, rows = d->Tq - t0 < R ? d->Tq - t0 : R, M = n * rows;
        int kend = mhe__att_visible(d, b, t0 + rows - 1), r, i, h, j0, jj, c;
        const float *qblk = q + ((size_t)b * d->Tq + t0) * d->q_stride;
        for (h = 0; h < n; h++) /* stacked row h*rows + i: query i of head h, mapped */
            mhe__tile_affine(Qs + (size_t)h * rows * W, qblk, (size_t)d->q_stride, rows, W,
                             d->q_mul + (size_t)h * W, NULL);
        for (r = 0; r < M; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0;
        }
        memset(acc, 0, sizeof(float) * (size_t)M * dh);
        for (j0 = 0; j0 < kend; j0 += MHE__BK) {
            int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK;
            size_t koff = (size_t)b * d->Tk + j0;
            mhe_gemm(0, 1, M, cols, W, d->scale, Qs, W, k + koff * d->k_stride, d->k_stride, 0.0f, S,
                     MHE__BK);
            for (r = 0; r < M; r++) {
                float *s = S + (size_t)r * MHE__BK, mass;
                h = r / rows;
                i = r % rows;
                if (d->k_bias) /* the head's score of each key, scaled as the dot products */
                    for (jj = 0; jj < cols; jj++)
                        s[jj] += d->scale * d->k_bias[(koff + (size_t)jj) * d->k_bias_stride + h];
                if (d->causal || d->kv_len) {
                    int vis = mhe__att_visible(d, b, t0 + i) - j0;
                    for (jj = vis < 0 ? 0 : vis; jj < cols; jj++)
                        s[jj] = -INFINITY;
                }
                mhe__online_row(s, cols, mrow + r, lrow + r, acc + (size_t)r * dh, dh, &mass);
                if (d->dropout > 0)
                    mhe__row_dropout(d, s, cols, b, h, t0 + i, j0);
            }
            if (!d->v_per_head)
                mhe_gemm(0, 0, M, dh, cols, 1.0f, S, MHE__BK, v + koff * d->v_stride, d->v_stride, 1.0f, acc,
                         dh);
            else
                for (h = 0; h < n; h++) /* each head its own values */
                    mhe_gemm(0, 0, rows, dh, cols, 1.0f, S + (size_t)h * rows * MHE__BK, MHE__BK,
                             v + koff * d->v_stride + (size_t)h * dh, d->v_stride, 1.0f,
                             acc + (size_t)h * rows * dh, dh);
        }
        for (r = 0; r < M; r++) {
            const float *vm = d->v_mul ? d->v_mul + (size_t)(r / rows) * dh : NULL;
            float *o = out + ((size_t)b * d->Tq + t0 + r % rows) * d->o_stride + (size_t)(r / rows) * dh;
            float inv = lrow[r] > 0 ? 1.0f / lrow[r] : 0.0f;
            for (c = 0; c < dh; c++)
                o[c] = acc[(size_t)r * dh + c] * inv * (vm ? vm[c] : 1.0f);
            lse[((size_t)b * n + r / rows) * d->Tq + t0 + r % rows] =
                lrow[r] > 0 ? mrow[r] + logf(lrow[r]) : -INFINITY;
        }
        mhe_scratch_bind(outer);
    }
    mhe__scratch_done(&own);
}

#ifndef MHE_NO_TRAIN
/* Backward of the stacked core, one sequence per iteration: with Qs and
   dOs = dO_i * (1+e_i^V) stacked over heads, dP = dOs V^T, dS = P (dP - D),
   dQs = dS K, dK += dS^T Qs in stacked GEMMs; per head Z_i = Pd_i^T dO_i gives
   dV += Z_i * (1+e_i^V) and the value-map gradient sum_j Z_i V (per-head
   values: dV_i += Z_i); the key bias gets the column sums of dS. The map
   gradients of each sequence go to map_scratch and are summed afterwards. */
static MHE__VECTORISE void mhe__attn_mul_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr, float *dq,
                                             float *dk, float *dv, const float *dout, const float *out,
                                             const float *lse, const float *q, const float *k,
                                             const float *v) {
    int n = d->n_heads, dh = d->d_head, W = MHE__QKW(d), R = mhe__attn_mul_rows(d), b;
    size_t per_b = (size_t)n * (W + dh); /* dq_mul [n, W], dv_mul [n, d_h] of one sequence */
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    memset(gr->map_scratch, 0, (size_t)d->B * per_b * sizeof(float));
    MHE_ASSERT(sc); /* models bind their scratch before they run a core */
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (b = 0; b < d->B; b++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT Qs = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT dQs = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT dOs = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT P = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT dP = mhe__carve(&tile, MHE__MUL_FLOATS);
        float *MHE__RESTRICT Z = mhe__carve(&tile, (size_t)MHE__BK * dh);
        float *MHE__RESTRICT Drow = mhe__carve(&tile, MHE__MUL_FLOATS / MHE__BK);
        float *sdq = gr->map_scratch + (size_t)b * per_b, *sdv = sdq + (size_t)n * W;
        int t0, r, i, h, j0, jj, c;
        for (t0 = 0; t0 < d->Tq; t0 += R) {
            int rows = d->Tq - t0 < R ? d->Tq - t0 : R, M = n * rows,
                kend = mhe__att_visible(d, b, t0 + rows - 1);
            size_t qoff = (size_t)b * d->Tq + t0;
            const float *qblk = q + qoff * d->q_stride;
            for (h = 0; h < n; h++) {
                const float *vm = d->v_mul ? d->v_mul + (size_t)h * dh : NULL;
                mhe__tile_affine(Qs + (size_t)h * rows * W, qblk, (size_t)d->q_stride, rows, W,
                                 d->q_mul + (size_t)h * W, NULL);
                for (i = 0; i < rows; i++) {
                    const float *doi = dout + (qoff + (size_t)i) * d->o_stride + (size_t)h * dh;
                    const float *oi = out + (qoff + (size_t)i) * d->o_stride + (size_t)h * dh;
                    float *ds = dOs + ((size_t)h * rows + i) * dh;
                    Drow[h * rows + i] = mhe__dot(doi, oi, dh);
                    for (c = 0; c < dh; c++)
                        ds[c] = vm ? doi[c] * vm[c] : doi[c];
                }
            }
            memset(dQs, 0, sizeof(float) * (size_t)M * W);
            for (j0 = 0; j0 < kend; j0 += MHE__BK) {
                int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK;
                size_t koff = (size_t)b * d->Tk + j0;
                const float *kblk = k + koff * d->k_stride, *vblk = v + koff * d->v_stride;
                float *dkblk = dk + koff * d->k_stride, *dvblk = dv + koff * d->v_stride;
                mhe_gemm(0, 1, M, cols, W, d->scale, Qs, W, kblk, d->k_stride, 0.0f, P, MHE__BK);
                if (!d->v_per_head)
                    mhe_gemm(0, 1, M, cols, dh, 1.0f, dOs, dh, vblk, d->v_stride, 0.0f, dP, MHE__BK);
                else
                    for (h = 0; h < n; h++)
                        mhe_gemm(0, 1, rows, cols, dh, 1.0f, dOs + (size_t)h * rows * dh, dh,
                                 vblk + (size_t)h * dh, d->v_stride, 0.0f, dP + (size_t)h * rows * MHE__BK,
                                 MHE__BK);
                for (r = 0; r < M; r++) {
                    int vis = mhe__att_visible(d, b, t0 + r % rows) - j0;
                    float *p = P + (size_t)r * MHE__BK;
                    vis = vis > cols ? cols : vis < 0 ? 0 : vis;
                    if (d->k_bias)
                        for (jj = 0; jj < cols; jj++)
                            p[jj] += d->scale * d->k_bias[(koff + (size_t)jj) * d->k_bias_stride + r / rows];
                    mhe__bwd_row(d, p, dP + (size_t)r * MHE__BK, cols, vis,
                                 lse[((size_t)b * n + r / rows) * d->Tq + t0 + r % rows], Drow[r], 0.0f, b,
                                 r / rows, t0 + r % rows, j0);
                    if (gr->dk_bias) /* the content bias sits inside the scaled logits: its gradient is dS */
                        for (jj = 0; jj < cols; jj++)
                            gr->dk_bias[(koff + (size_t)jj) * d->k_bias_stride + r / rows] +=
                                dP[(size_t)r * MHE__BK + jj];
                }
                /* per head: Z = Pd_i^T dO_i; dV += Z * (1+e_i^V) (or into head i's values);
                   value-map gradient += sum_j Z * V */
                for (h = 0; h < n; h++) {
                    const float *vm = d->v_mul ? d->v_mul + (size_t)h * dh : NULL;
                    mhe_gemm(1, 0, cols, dh, rows, 1.0f, P + (size_t)h * rows * MHE__BK, MHE__BK,
                             dout + qoff * d->o_stride + (size_t)h * dh, d->o_stride, 0.0f, Z, dh);
                    if (d->v_per_head) {
                        for (jj = 0; jj < cols; jj++)
                            for (c = 0; c < dh; c++)
                                dvblk[(size_t)jj * d->v_stride + (size_t)h * dh + c] +=
                                    Z[(size_t)jj * dh + c];
                        continue;
                    }
                    for (jj = 0; jj < cols; jj++) {   /* dV, then the map's sum: loops that vectorise */
                        const float *zj = Z + (size_t)jj * dh, *vj = vblk + (size_t)jj * d->v_stride;
                        float *dvj = dvblk + (size_t)jj * d->v_stride, *dm = sdv + (size_t)h * dh;
                        for (c = 0; c < dh; c++)
                            dvj[c] += vm ? zj[c] * vm[c] : zj[c];
                        if (vm)
                            for (c = 0; c < dh; c++)
                                dm[c] += zj[c] * vj[c];
                    }
                }
                mhe_gemm(0, 0, M, W, cols, 1.0f, dP, MHE__BK, kblk, d->k_stride, 1.0f, dQs,
                         W); /* dQs += dS K */
                mhe_gemm(1, 0, cols, W, M, 1.0f, dP, MHE__BK, Qs, W, 1.0f, dkblk,
                         d->k_stride); /* dK += dS^T Qs */
            }
            /* back through the query map Q*w_i: dQ += sum_i dQs_i * w_i, dw_i += sum_t dQs_i * Q */
            for (h = 0; h < n; h++) {
                const float *w = d->q_mul + (size_t)h * W;
                for (i = 0; i < rows; i++) {
                    const float *g = dQs + ((size_t)h * rows + i) * W, *qi = qblk + (size_t)i * d->q_stride;
                    float *dqi = dq + (qoff + (size_t)i) * d->q_stride, *dw = sdq + (size_t)h * W;
                    for (c = 0; c < W; c++) /* two loops: each vectorises with few alias checks */
                        dqi[c] += g[c] * w[c];
                    for (c = 0; c < W; c++)
                        dw[c] += g[c] * qi[c];
                }
            }
        }
        mhe_scratch_bind(outer);
    }
    for (b = 0; b < d->B; b++) { /* fixed order over sequences: the same sums for any thread count */
        const float *sdq = gr->map_scratch + (size_t)b * per_b, *sdv = sdq + (size_t)n * W;
        int e;
        if (gr->dq_mul)
            for (e = 0; e < n * W; e++)
                gr->dq_mul[e] += sdq[e];
        if (gr->dv_mul)
            for (e = 0; e < n * dh; e++)
                gr->dv_mul[e] += sdv[e];
    }
    mhe__scratch_done(&own);
}
#endif /* MHE_NO_TRAIN */

/* MHE-ADD with one shared score product (MHE paper eq. 5, psi = add). For
   head i, (Q + e_i^Q)(K + e_i^K)^T = QK^T + 1 (K e_i^Q)^T + terms constant
   along each row, which the softmax removes (so e^K has no effect), and
   A_i (V + 1 e_i^V^T) = A_i V + rowsum(A_i) e_i^V. QK^T is formed once per
   tile for all heads; head i adds its key bias u_i = K e_i^Q; the heads'
   probabilities are stacked so that one GEMM multiplies them all by the
   shared V. Used when n stacked query rows fit MHE__ADD_FLOATS. */
#define MHE__ADD_FLOATS 16384

/* query rows per block with the heads stacked, 0 when they do not fit */
static int mhe__attn_add_rows(const mhe_attn_dims *d) {
    int w = d->d_head > MHE__BK ? d->d_head : MHE__BK, rows = MHE__ADD_FLOATS / w / d->n_heads;
    if (d->n_kv_heads != 1 || d->n_heads > MHE__BK)
        return 0;
    if (rows > MHE__BQ)
        rows = MHE__BQ;
    return rows >= 1 ? rows : 0;
}

static int mhe__attn_add_fits(const mhe_attn_dims *d) {
    return mhe__attn_add_rows(d) > 0;
}

static MHE__VECTORISE void mhe__attn_add_fwd(const mhe_attn_dims *d, float *out, float *lse, const float *q,
                                             const float *k, const float *v, const float *eq,
                                             const float *ev) {
    int n = d->n_heads, dh = d->d_head, R = mhe__attn_add_rows(d), n_qb = (d->Tq + R - 1) / R, work;
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    MHE_ASSERT(sc); /* models bind their scratch before they run a core */
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (work = 0; work < d->B * n_qb; work++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT S0 = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT U = mhe__carve(&tile, MHE__BK * MHE__BK);
        float *MHE__RESTRICT P = mhe__carve(&tile, MHE__ADD_FLOATS);
        float *MHE__RESTRICT acc = mhe__carve(&tile, MHE__ADD_FLOATS);
        float *MHE__RESTRICT mrow = mhe__carve(&tile, MHE__ADD_FLOATS / MHE__BK);
        float *MHE__RESTRICT lrow = mhe__carve(&tile, MHE__ADD_FLOATS / MHE__BK);
        float *MHE__RESTRICT rs = mhe__carve(&tile, MHE__ADD_FLOATS / MHE__BK);
        int b = work / n_qb, t0 = (work % n_qb) * R, rows = d->Tq - t0 < R ? d->Tq - t0 : R, M = n * rows;
        int kend = mhe__att_visible(d, b, t0 + rows - 1), i, j0, jj, h, r, c;
        const float *qblk = q + ((size_t)b * d->Tq + t0) * d->q_stride;
        for (r = 0; r < M; r++) {
            mrow[r] = -INFINITY;
            lrow[r] = 0;
            rs[r] = 0;
        }
        memset(acc, 0, sizeof(float) * (size_t)M * dh);
        for (j0 = 0; j0 < kend; j0 += MHE__BK) {
            int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK;
            size_t koff = (size_t)b * d->Tk + j0;
            const float *kblk = k + koff * d->k_stride;
            mhe_gemm(0, 1, rows, cols, dh, d->scale, qblk, d->q_stride, kblk, d->k_stride, 0.0f, S0,
                     MHE__BK); /* once */
            mhe_gemm(0, 1, n, cols, dh, d->scale, eq, dh, kblk, d->k_stride, 0.0f, U,
                     MHE__BK); /* u_i = K e_i^Q */
            for (r = 0; r < M; r++) { /* stacked row h*rows + i: query i of head h */
                float *s = P + (size_t)r * MHE__BK, corr, mass, kept;
                const float *s0, *u;
                int vis;
                h = r / rows;
                i = r % rows;
                s0 = S0 + (size_t)i * MHE__BK;
                u = U + (size_t)h * MHE__BK;
                vis = mhe__att_visible(d, b, t0 + i) - j0;
                if (vis > cols)
                    vis = cols;
                for (jj = 0; jj < cols; jj++)
                    s[jj] = s0[jj] + u[jj];
                for (jj = vis < 0 ? 0 : vis; jj < cols; jj++)
                    s[jj] = -INFINITY;
                corr = mhe__online_row(s, cols, mrow + r, lrow + r, acc + (size_t)r * dh, dh, &mass);
                kept = d->dropout > 0 ? mhe__row_dropout(d, s, cols, b, h, t0 + i, j0) : mass;
                rs[r] = rs[r] * corr + kept; /* the dropped-out weights' sum, for the e^V term */
            }
            mhe_gemm(0, 0, M, dh, cols, 1.0f, P, MHE__BK, v + koff * d->v_stride, d->v_stride, 1.0f, acc, dh);
        }
        for (r = 0; r < M; r++) {
            float *o = out + ((size_t)b * d->Tq + t0 + r % rows) * d->o_stride + (size_t)(r / rows) * dh,
                  l = lrow[r];
            float inv = l > 0 ? 1.0f / l : 0.0f, w = rs[r] * inv;
            const float *e = ev + (size_t)(r / rows) * dh;
            for (c = 0; c < dh; c++)
                o[c] = acc[(size_t)r * dh + c] * inv + w * e[c];
            lse[((size_t)b * n + r / rows) * d->Tq + t0 + r % rows] = l > 0 ? mrow[r] + logf(l) : -INFINITY;
        }
        mhe_scratch_bind(outer);
    }
    mhe__scratch_done(&own);
}

#ifndef MHE_NO_TRAIN
/* backward: dS_i per head, summed once for dQ = (sum_i dS_i) K and
   dK = (sum_i dS_i)^T Q + CS e^Q (CS: column sums of each dS_i, from the key
   biases); de^Q = CS^T K, de^V_i = sum_t rowsum(Pd_i) dO_i. dP and dV for
   all heads in stacked GEMMs over the shared V. Per-(b) e gradients go to
   gr->map_scratch and are summed over b afterwards. */
static MHE__VECTORISE void mhe__attn_add_bwd(const mhe_attn_dims *d, const mhe_attn_grads *gr, float *dq,
                                             float *dk, float *dv, const float *dout, const float *out,
                                             const float *lse, const float *q, const float *k, const float *v,
                                             const float *eq, const float *ev, float *deq, float *dev) {
    int n = d->n_heads, dh = d->d_head, R = mhe__attn_add_rows(d), b;
    size_t per_b = 2 * (size_t)n * dh;
    mhe__own_scratch own;
    const mhe_scratch *sc = mhe__scratch_for(dh, mhe__max_threads(), &own);
    memset(gr->map_scratch, 0, (size_t)d->B * per_b * sizeof(float));
    MHE_ASSERT(sc); /* models bind their scratch before they run a core */
    MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team(sc)) if (mhe__att_parallel(d)))
    for (b = 0; b < d->B; b++) {
        const mhe_scratch *outer = mhe_scratch_bind(sc); /* tiles inside the loop find it */
        float *tile = mhe__tile_slice(sc);
        float *MHE__RESTRICT S0 = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT dSs = mhe__carve(&tile, MHE__BQ * MHE__BK);
        float *MHE__RESTRICT U = mhe__carve(&tile, MHE__BK * MHE__BK);
        float *MHE__RESTRICT CS = mhe__carve(&tile, MHE__BK * MHE__BK);
        float *MHE__RESTRICT P = mhe__carve(&tile, MHE__ADD_FLOATS);
        float *MHE__RESTRICT dP = mhe__carve(&tile, MHE__ADD_FLOATS);
        float *MHE__RESTRICT dOs = mhe__carve(&tile, MHE__ADD_FLOATS);
        float *MHE__RESTRICT Drow = mhe__carve(&tile, MHE__ADD_FLOATS / MHE__BK);
        float *MHE__RESTRICT edo = mhe__carve(&tile, MHE__ADD_FLOATS / MHE__BK);
        float *sdeq = gr->map_scratch + (size_t)b * per_b, *sdev = sdeq + (size_t)n * dh;
        int t0, i, j0, jj, h, r, c;
        for (t0 = 0; t0 < d->Tq; t0 += R) {
            int rows = d->Tq - t0 < R ? d->Tq - t0 : R, M = n * rows,
                kend = mhe__att_visible(d, b, t0 + rows - 1);
            size_t qoff = (size_t)b * d->Tq + t0;
            const float *qblk = q + qoff * d->q_stride;
            float *dqblk = dq + qoff * d->q_stride;
            for (r = 0; r < M; r++) { /* stacked dO, D = dO . O and dO . e^V (V_i = V + e_i^V) */
                const float *doi = dout + (qoff + (size_t)(r % rows)) * d->o_stride + (size_t)(r / rows) * dh;
                const float *oi = out + (qoff + (size_t)(r % rows)) * d->o_stride + (size_t)(r / rows) * dh;
                memcpy(dOs + (size_t)r * dh, doi, (size_t)dh * sizeof(float));
                Drow[r] = mhe__dot(doi, oi, dh);
                edo[r] = mhe__dot(doi, ev + (size_t)(r / rows) * dh, dh);
            }
            for (j0 = 0; j0 < kend; j0 += MHE__BK) {
                int cols = kend - j0 < MHE__BK ? kend - j0 : MHE__BK;
                size_t koff = (size_t)b * d->Tk + j0;
                const float *kblk = k + koff * d->k_stride, *vblk = v + koff * d->v_stride;
                mhe_gemm(0, 1, rows, cols, dh, d->scale, qblk, d->q_stride, kblk, d->k_stride, 0.0f, S0,
                         MHE__BK);
                mhe_gemm(0, 1, n, cols, dh, d->scale, eq, dh, kblk, d->k_stride, 0.0f, U, MHE__BK);
                mhe_gemm(0, 1, M, cols, dh, 1.0f, dOs, dh, vblk, d->v_stride, 0.0f, dP,
                         MHE__BK); /* dP for all heads */
                memset(dSs, 0, sizeof(float) * (size_t)rows * MHE__BK);
                memset(CS, 0, sizeof(float) * (size_t)n * MHE__BK);
                for (r = 0; r < M; r++) {
                    float *p = P + (size_t)r * MHE__BK, *dp = dP + (size_t)r * MHE__BK, *ds, *cs, rsum = 0, l;
                    const float *s0, *u;
                    int vis;
                    h = r / rows;
                    i = r % rows;
                    s0 = S0 + (size_t)i * MHE__BK;
                    u = U + (size_t)h * MHE__BK;
                    ds = dSs + (size_t)i * MHE__BK;
                    cs = CS + (size_t)h * MHE__BK;
                    l = lse[((size_t)b * n + h) * d->Tq + t0 + i];
                    vis = mhe__att_visible(d, b, t0 + i) - j0;
                    vis = vis > cols ? cols : vis < 0 ? 0 : vis;
                    for (jj = 0; jj < cols; jj++)
                        p[jj] = s0[jj] + u[jj];
                    mhe__bwd_row(d, p, dp, cols, vis, l, Drow[r], edo[r], b, h, t0 + i,
                                 j0); /* dS of head h */
                    for (jj = 0; jj < cols; jj++) {
                        ds[jj] += dp[jj];
                        cs[jj] += dp[jj];
                        rsum += p[jj];
                    }
                    for (c = 0; c < dh; c++)
                        sdev[(size_t)h * dh + c] += rsum * dOs[(size_t)r * dh + c];
                }
                mhe_gemm(1, 0, cols, dh, M, 1.0f, P, MHE__BK, dOs, dh, 1.0f, dv + koff * d->v_stride,
                         d->v_stride); /* dV += Pd^T dO */
                mhe_gemm(0, 0, rows, dh, cols, 1.0f, dSs, MHE__BK, kblk, d->k_stride, 1.0f, dqblk,
                         d->q_stride);
                mhe_gemm(1, 0, cols, dh, rows, 1.0f, dSs, MHE__BK, qblk, d->q_stride, 1.0f,
                         dk + koff * d->k_stride, d->k_stride);
                mhe_gemm(1, 0, cols, dh, n, 1.0f, CS, MHE__BK, eq, dh, 1.0f, dk + koff * d->k_stride,
                         d->k_stride);
                mhe_gemm(0, 0, n, dh, cols, 1.0f, CS, MHE__BK, kblk, d->k_stride, 1.0f, sdeq, dh);
            }
        }
        mhe_scratch_bind(outer);
    }
    for (b = 0; b < d->B; b++) {
        const float *sdeq = gr->map_scratch + (size_t)b * per_b, *sdev = sdeq + (size_t)n * dh;
        int e;
        for (e = 0; e < n * dh; e++) {
            deq[e] += sdeq[e];
            dev[e] += sdev[e];
        }
    }
    mhe__scratch_done(&own);
}
#endif /* MHE_NO_TRAIN */

/* floats of the tiles the cores above carve from a thread's slice, for
   heads up to d_head wide: the largest of the six */
static size_t mhe__kernel_floats(int d_head) {
    size_t dh = (size_t)d_head, qk = MHE__R16(MHE__BQ * MHE__BK), kk = MHE__R16(MHE__BK * MHE__BK);
    size_t qd = MHE__R16(MHE__BQ * dh), kd = MHE__R16(MHE__BK * dh), q = MHE__R16(MHE__BQ);
    size_t mul = MHE__R16(MHE__MUL_FLOATS), mr = MHE__R16(MHE__MUL_FLOATS / MHE__BK);
    size_t add = MHE__R16(MHE__ADD_FLOATS), ar = MHE__R16(MHE__ADD_FLOATS / MHE__BK);
    size_t need[6], most = 0;
    int i;
    need[0] = qk + 2 * qd + 2 * q + 2 * kd;         /* mhe_attn_fused_fwd */
    need[1] = 2 * qk + q + 2 * qd + 3 * kd;         /* mhe_attn_fused_bwd */
    need[2] = 3 * mul + 2 * mr;                     /* mhe__attn_mul_fwd */
    need[3] = 5 * mul + kd + mr;                    /* mhe__attn_mul_bwd */
    need[4] = qk + kk + 2 * add + 3 * ar;           /* mhe__attn_add_fwd */
    need[5] = 2 * qk + 2 * kk + 3 * add + 2 * ar;   /* mhe__attn_add_bwd */
    for (i = 0; i < 6; i++) most = need[i] > most ? need[i] : most;
    return most;
}

/* ---- 4. attention cores: linear-time kinds (thesis ch. 4) ------------------ */

/* Taylor ("Approximate", thesis eq. 4.6, following Based, Arora et al. 2024):
   exp(s) ~ 1 + s + s^2/2 with s = scale q.k, and ONE shared normaliser:
   o_t = sum_j w_tj v_j / sum_j w_tj, w = 1 + s + s^2/2 = ((s+1)^2 + 1)/2 >= 1/2.
   (The thesis's Appendix I, eq. 4.14-4.17, writes the three orders normalised
   separately; Based's code, which the thesis says it follows, shares one
   denominator: we follow Based.) Reference path: the weights materialised. */
static void mhe__taylor_ref_fwd(const mhe_attn_dims *d, float *out, float *probs, const float *q,
                                const float *k, const float *v) {
    int bh;
    MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t, j;
        for (t = 0; t < d->Tq; t++) {
            const float *qt = q + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * d->d_head;
            float *p = probs + (((size_t)b * d->n_heads + h) * d->Tq + t) * d->Tk;
            float *o = out + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * d->d_head;
            int vis = mhe__att_visible(d, b, t);
            double z = 0;
            for (j = 0; j < d->Tk; j++) {
                float s = j < vis ? d->scale * mhe__dot(qt,
                                                        k + ((size_t)b * d->Tk + j) * d->k_stride +
                                                            (size_t)h * d->d_head,
                                                        d->d_head)
                                  : 0;
                p[j] = j < vis ? 1.0f + s + 0.5f * s * s : 0.0f;
                z += p[j];
            }
            memset(o, 0, (size_t)d->d_head * sizeof(float));
            for (j = 0; j < vis; j++) {
                p[j] = (float)(p[j] / z);
                mhe__axpy(o, p[j], v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * d->d_head,
                          d->d_head);
            }
        }
    }
}

#ifndef MHE_NO_TRAIN
/* p = w / Z: dw_j = (dp_j - sum_k p_k dp_k) / Z, ds = dw (1 + s), dq += scale ds k, dk += scale ds q */
static void mhe__taylor_ref_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                const float *probs, const float *q, const float *k, const float *v) {
    int bh;
    MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t, j;
        for (t = 0; t < d->Tq; t++) {
            const float *qt = q + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * d->d_head;
            const float *g = dout + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * d->d_head;
            const float *p = probs + (((size_t)b * d->n_heads + h) * d->Tq + t) * d->Tk;
            float *dqt = dq + ((size_t)b * d->Tq + t) * d->q_stride + (size_t)h * d->d_head;
            int vis = mhe__att_visible(d, b, t);
            double z = 0, dsum = 0;
            for (j = 0; j < vis; j++) {
                const float *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * d->d_head;
                const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * d->d_head;
                float s = d->scale * mhe__dot(qt, kj, d->d_head);
                z += 1.0 + s + 0.5 * s * s;
                dsum += (double)p[j] * mhe__dot(g, vj, d->d_head);
                mhe__axpy(dv + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * d->d_head, p[j], g,
                          d->d_head);
            }
            for (j = 0; j < vis; j++) {
                const float *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * d->d_head;
                const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * d->d_head;
                float s = d->scale * mhe__dot(qt, kj, d->d_head);
                float ds = (float)(((double)mhe__dot(g, vj, d->d_head) - dsum) / z) * (1.0f + s) * d->scale;
                mhe__axpy(dqt, ds, kj, d->d_head);
                mhe__axpy(dk + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * d->d_head, ds, qt,
                          d->d_head);
            }
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* The feature map phi with phi(q).phi(k) = 1 + s + s^2/2 (Based's TaylorExp,
   with the d(d+1)/2 distinct products of the symmetric x x^T instead of all
   d^2): [1, a x, a^2 x_i^2 / sqrt 2, a^2 x_i x_j (i < j)], a = sqrt(scale). */
static int mhe__taylor_features(int dh) {
    return 1 + dh + dh * (dh + 1) / 2;
}

static void mhe__taylor_phi(const float *x, int dh, float a, float *phi) {
    int i, j, f = 1 + dh;
    float a2 = a * a, r2 = 0.70710678118654752f;
    phi[0] = 1.0f;
    for (i = 0; i < dh; i++)
        phi[1 + i] = a * x[i];
    for (i = 0; i < dh; i++) {
        phi[f++] = a2 * r2 * x[i] * x[i];
        for (j = i + 1; j < dh; j++)
            phi[f++] = a2 * x[i] * x[j];
    }
}

#ifndef MHE_NO_TRAIN
/* gx += J_phi(x)^T gphi */
static void mhe__taylor_phi_bwd(const float *x, int dh, float a, const float *gphi, float *gx) {
    int i, j, f = 1 + dh;
    float a2 = a * a, s2 = 1.41421356237309505f;
    for (i = 0; i < dh; i++)
        gx[i] += a * gphi[1 + i];
    for (i = 0; i < dh; i++) {
        gx[i] += gphi[f++] * a2 * s2 * x[i];
        for (j = i + 1; j < dh; j++, f++) {
            gx[i] += gphi[f] * a2 * x[j];
            gx[j] += gphi[f] * a2 * x[i];
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* floats of one work slot of the linear-time Taylor core, and how many slots
   (of B n sequence-heads) run at once: at most 16 and 64 MB */
/* tokens per chunk: the state moves by GEMMs, a chunk's own keys are weighed directly */
#define MHE__TCH 32
static size_t mhe__taylor_slot(int dh) {
    size_t F = (size_t)mhe__taylor_features(dh);
    return F * (size_t)dh + F + 2 * (size_t)MHE__TCH * F + 2 * (size_t)MHE__TCH * dh + 2 * MHE__TCH;
}
static int mhe__taylor_slots(int B, int n, int dh) {
    size_t per = mhe__taylor_slot(dh) * sizeof(float), cap = ((size_t)64 << 20) / per;
    int64_t want = (int64_t)B * n;
    if (want > 16)
        want = 16;
    if ((int64_t)cap < want)
        want = cap < 1 ? 1 : (int64_t)cap;
    return (int)want;
}

/* phi of rows r0 .. r0+n-1 (row stride ld) into P [n, F] */
static void mhe__taylor_phis(const float *x, size_t ld, int r0, int n, int dh, float a, float *P, int F) {
    int i;
    for (i = 0; i < n; i++)
        mhe__taylor_phi(x + (size_t)(r0 + i) * ld, dh, a, P + (size_t)i * F);
}

/* one (sequence, head) of the Taylor core: where its rows are */
typedef struct mhe__tay {
    const float *q, *k, *v;         /* row 0 of the head, strides ld_q, ld_k, ld_v */
    size_t lq, lk, lv;
    int F, dh;
    float a;                        /* sqrt(scale) */
} mhe__tay;

/* S += Phi_K^T V and z += the column sums of Phi_K for keys j0 .. j0+n-1 (P: room for n x F) */
static void mhe__taylor_add_keys(const mhe__tay *x, int j0, int n, float *S, float *z, float *P) {
    int i, f;
    for (i = 0; i < n; i++) {
        const float *pk = P + (size_t)i * x->F;
        mhe__taylor_phi(x->k + (size_t)(j0 + i) * x->lk, x->dh, x->a, P + (size_t)i * x->F);
        for (f = 0; f < x->F; f++)
            z[f] += pk[f];
    }
    mhe_gemm(1, 0, x->F, x->dh, n, 1.0f, P, x->F, x->v + (size_t)j0 * x->lv, (int)x->lv, 1.0f, S, x->dh);
}

/* the direct weight w = 1 + s + s^2/2 of query t and key j, and s */
static float mhe__taylor_w(const mhe__tay *x, int t, int j, float scale, float *s_out) {
    float s = scale * mhe__dot(x->q + (size_t)t * x->lq, x->k + (size_t)j * x->lk, x->dh);
    if (s_out)
        *s_out = s;
    return 1.0f + s + 0.5f * s * s;
}

static mhe__tay mhe__tay_at(const mhe_attn_dims *d, int b, int h, const float *q, const float *k,
                            const float *v) {
    mhe__tay x;
    x.dh = d->d_head;
    x.F = mhe__taylor_features(x.dh);
    x.a = sqrtf(d->scale);
    x.q = q + (size_t)b * d->Tq * d->q_stride + (size_t)h * x.dh;
    x.lq = (size_t)d->q_stride;
    x.k = k + (size_t)b * d->Tk * d->k_stride + (size_t)h * x.dh;
    x.lk = (size_t)d->k_stride;
    x.v = v + (size_t)b * d->Tk * d->v_stride + (size_t)h * x.dh;
    x.lv = (size_t)d->v_stride;
    return x;
}

#ifdef _OPENMP
/* worth a second thread: cnt (sequence, head) pairs of Tq d_h^3 work */
static int mhe__taylor_parallel(const mhe_attn_dims *d, int cnt) {
    return cnt > 1 && (int64_t)d->Tq * d->d_head * d->d_head * d->d_head * cnt > MHE__PAR_MIN;
}
#endif

/* Linear-time form (causal prefix sums of Katharopoulos et al. 2020 with
   Based's phi), chunked: S = sum_j phi(k_j) v_j^T, z = sum_j phi(k_j) over
   the keys every query of a chunk sees (j < lo = the keys its first query
   sees), moved forward by GEMMs; the chunk's other keys (lo <= j < what
   query t sees) weighed directly. o_t = (phi(q_t)^T S + sum w v) / (phi(q_t).z
   + sum w). Keeps den_t in stats. Works for any visibility that grows with
   t: causal, bidirectional, padded. */
static void mhe__taylor_lin_fwd(const mhe_attn_dims *d, float *out, float *den, const float *q,
                                const float *k, const float *v, float *slots) {
    const mhe_scratch *sc = mhe__scratch_cur;
    int P = mhe__taylor_slots(d->B, d->n_heads, d->d_head), base, total = d->B * d->n_heads;
    size_t per = mhe__taylor_slot(d->d_head);
    for (base = 0; base < total; base += P) {
        int i, cnt = total - base < P ? total - base : P;
        MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team_of(sc))
                 if (mhe__taylor_parallel(d, cnt)))
        for (i = 0; i < cnt; i++) {
            const mhe_scratch *outer = mhe_scratch_bind(sc); /* the GEMMs of its chunks pack there */
            int bh = base + i, b = bh / d->n_heads, h = bh % d->n_heads, t0, t, j, c, f, added = 0;
            mhe__tay x = mhe__tay_at(d, b, h, q, k, v);
            int F = x.F, dh = x.dh;
            float *S = slots + (size_t)i * per, *z = S + (size_t)F * dh, *PQ = z + F,
                  *PK = PQ + (size_t)MHE__TCH * F;
            float *num = PK + (size_t)MHE__TCH * F;
            memset(S, 0, ((size_t)F * dh + F) * sizeof(float));
            for (t0 = 0; t0 < d->Tq; t0 += MHE__TCH) {
                int rows = d->Tq - t0 < MHE__TCH ? d->Tq - t0 : MHE__TCH, lo = mhe__att_visible(d, b, t0);
                for (; added < lo; added += c) { /* the keys every query of the chunk sees, into the state */
                    c = lo - added < MHE__TCH ? lo - added : MHE__TCH;
                    mhe__taylor_add_keys(&x, added, c, S, z, PK);
                }
                mhe__taylor_phis(x.q, x.lq, t0, rows, dh, x.a, PQ, F);
                mhe_gemm(0, 0, rows, dh, F, 1.0f, PQ, F, S, dh, 0.0f, num, dh);
                for (t = 0; t < rows; t++) {
                    int vis = mhe__att_visible(d, b, t0 + t);
                    float *o = out + ((size_t)b * d->Tq + t0 + t) * d->o_stride + (size_t)h * dh, dn = 0;
                    for (f = 0; f < F; f++)
                        dn += PQ[(size_t)t * F + f] * z[f];
                    for (j = lo; j < vis; j++) { /* the chunk's own keys */
                        float w = mhe__taylor_w(&x, t0 + t, j, d->scale, NULL);
                        mhe__axpy(num + (size_t)t * dh, w, x.v + (size_t)j * x.lv, dh);
                        dn += w;
                    }
                    for (c = 0; c < dh; c++)
                        o[c] = vis > 0 ? num[(size_t)t * dh + c] / dn : 0.0f;
                    den[((size_t)b * d->n_heads + h) * d->Tq + t0 + t] = vis > 0 ? dn : 0.0f;
                }
            }
            mhe_scratch_bind(outer);
        }
    }
}

#ifndef MHE_NO_TRAIN
/* dnum_t = g_t / den_t and dden_t = -(g_t . o_t) / den_t of query rows t0 .. t0+rows-1 of
   (sequence b, head h) into DN [rows, d_h] and DD [rows] (0 where den_t is 0) */
static void mhe__taylor_dnum(const mhe_attn_dims *d, const float *dout, const float *out, const float *dnp,
                             int b, int h, int t0, int rows, float *DN, float *DD) {
    int dh = d->d_head, r, c;
    for (r = 0; r < rows; r++) {
        size_t row = ((size_t)b * d->Tq + t0 + r) * d->o_stride + (size_t)h * dh;
        float dn = dnp[t0 + r];
        if (dn > 0) {
            for (c = 0; c < dh; c++)
                DN[(size_t)r * dh + c] = dout[row + c] / dn;
            DD[r] = -mhe__dot(dout + row, out + row, dh) / dn;
        } else {
            memset(DN + (size_t)r * dh, 0, (size_t)dh * sizeof(float));
            DD[r] = 0;
        }
    }
}

/* backward: o = num / den, dnum = g / den, dden = -(g.o) / den. Through the
   state: d phi(q_t) = S dnum_t + z dden_t (a forward sweep again), and for a
   key j in the state of chunks k.. : d phi(k_j) = R v_j + r, dv_j += R^T
   phi(k_j), with R = sum of phi(q_t) dnum_t^T, r of phi(q_t) dden_t over
   those chunks' queries (a reverse sweep). The direct weights: dw =
   dnum.v_j + dden, ds = dw (1 + s). */
static void mhe__taylor_lin_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                const float *out, const float *den, const float *q, const float *k,
                                const float *v, float *slots) {
    const mhe_scratch *sc = mhe__scratch_cur;
    int P = mhe__taylor_slots(d->B, d->n_heads, d->d_head), base, total = d->B * d->n_heads;
    size_t per = mhe__taylor_slot(d->d_head);
    if (d->Tq < 1)
        return; /* no queries, no gradient */
    for (base = 0; base < total; base += P) {
        int i, cnt = total - base < P ? total - base : P;
        MHE__OMP(omp parallel for schedule(dynamic) num_threads(mhe__team_of(sc))
                 if (mhe__taylor_parallel(d, cnt)))
        for (i = 0; i < cnt; i++) {
            const mhe_scratch *outer = mhe_scratch_bind(sc); /* the GEMMs of its chunks pack there */
            int bh = base + i, b = bh / d->n_heads, h = bh % d->n_heads, t0, t, j, c, f, added = 0, nch;
            mhe__tay x = mhe__tay_at(d, b, h, q, k, v);
            int F = x.F, dh = x.dh;
            float *S = slots + (size_t)i * per, *z = S + (size_t)F * dh, *PQ = z + F,
                  *G = PQ + (size_t)MHE__TCH * F;
            float *DN = G + (size_t)MHE__TCH * F, *DV = DN + (size_t)MHE__TCH * dh,
                  *DD = DV + (size_t)MHE__TCH * dh;
            const float *dnp = den + ((size_t)b * d->n_heads + h) * d->Tq;
            float *dqh = dq + (size_t)b * d->Tq * d->q_stride + (size_t)h * dh,
                  *dkh = dk + (size_t)b * d->Tk * d->k_stride + (size_t)h * dh;
            float *dvh = dv + (size_t)b * d->Tk * d->v_stride + (size_t)h * dh;
            memset(S, 0, ((size_t)F * dh + F) * sizeof(float));
            for (t0 = 0; t0 < d->Tq; t0 += MHE__TCH) { /* pass 1: d q through the state; the direct weights */
                int rows = d->Tq - t0 < MHE__TCH ? d->Tq - t0 : MHE__TCH, lo = mhe__att_visible(d, b, t0);
                for (; added < lo; added += c) {
                    c = lo - added < MHE__TCH ? lo - added : MHE__TCH;
                    mhe__taylor_add_keys(&x, added, c, S, z, G);
                }
                mhe__taylor_dnum(d, dout, out, dnp, b, h, t0, rows, DN, DD);
                for (t = 0; t < rows; t++)
                    for (f = 0; f < F; f++)
                        G[(size_t)t * F + f] = z[f] * DD[t];
                mhe_gemm(0, 1, rows, F, dh, 1.0f, DN, dh, S, dh, 1.0f, G, F); /* + dnum S^T */
                for (t = 0; t < rows; t++) {
                    int vis = mhe__att_visible(d, b, t0 + t);
                    float *dqt = dqh + (size_t)(t0 + t) * x.lq;
                    if (vis == 0)
                        continue;
                    mhe__taylor_phi_bwd(x.q + (size_t)(t0 + t) * x.lq, dh, x.a, G + (size_t)t * F, dqt);
                    for (j = lo; j < vis; j++) {
                        float s, w = mhe__taylor_w(&x, t0 + t, j, d->scale, &s);
                        float ds = (mhe__dot(DN + (size_t)t * dh, x.v + (size_t)j * x.lv, dh) + DD[t]) *
                                   (1.0f + s) * d->scale;
                        mhe__axpy(dvh + (size_t)j * d->v_stride, w, DN + (size_t)t * dh, dh);
                        mhe__axpy(dqt, ds, x.k + (size_t)j * x.lk, dh);
                        mhe__axpy(dkh + (size_t)j * d->k_stride, ds, x.q + (size_t)(t0 + t) * x.lq, dh);
                    }
                }
            }
            /* pass 2, chunks from the last: R, r gather the chunk's queries, then
               the keys that only chunks from this one on see through the state */
            memset(S, 0, ((size_t)F * dh + F) * sizeof(float)); /* now R, r */
            nch = (d->Tq + MHE__TCH - 1) / MHE__TCH;
            while (nch-- > 0) {
                int rows, lo, lo_prev;
                t0 = nch * MHE__TCH;
                rows = d->Tq - t0 < MHE__TCH ? d->Tq - t0 : MHE__TCH;
                lo = mhe__att_visible(d, b, t0);
                lo_prev = nch > 0 ? mhe__att_visible(d, b, t0 - MHE__TCH) : 0;
                mhe__taylor_dnum(d, dout, out, dnp, b, h, t0, rows, DN, DD);
                mhe__taylor_phis(x.q, x.lq, t0, rows, dh, x.a, PQ, F);
                mhe_gemm(1, 0, F, dh, rows, 1.0f, PQ, F, DN, dh, 1.0f, S, dh); /* R += Phi_Q^T dnum */
                for (t = 0; t < rows; t++)
                    for (f = 0; f < F; f++)
                        z[f] += PQ[(size_t)t * F + f] * DD[t];
                for (j = lo_prev; j < lo; j += c) {
                    int jj;
                    c = lo - j < MHE__TCH ? lo - j : MHE__TCH;
                    mhe__taylor_phis(x.k, x.lk, j, c, dh, x.a, PQ, F);
                    for (jj = 0; jj < c; jj++)
                        memcpy(G + (size_t)jj * F, z, (size_t)F * sizeof(float));
                    mhe_gemm(0, 1, c, F, dh, 1.0f, x.v + (size_t)j * x.lv, (int)x.lv, S, dh, 1.0f, G,
                             F); /* v_j R^T + r */
                    mhe_gemm(0, 0, c, dh, F, 1.0f, PQ, F, S, dh, 0.0f, DV, dh); /* phi(k_j)^T R */
                    for (jj = 0; jj < c; jj++) {
                        mhe__axpy(dvh + (size_t)(j + jj) * d->v_stride, 1.0f, DV + (size_t)jj * dh, dh);
                        mhe__taylor_phi_bwd(x.k + (size_t)(j + jj) * x.lk, dh, x.a, G + (size_t)jj * F,
                                            dkh + (size_t)(j + jj) * d->k_stride);
                    }
                }
            }
            mhe_scratch_bind(outer);
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* Non-approximate (thesis eq. 4.7-4.8): one score per position,
   s_j = scale SiLU(q_j).k_j (a token's own query and key; q is given before
   the SiLU), and A_tj = exp(s_j) / sum over the keys t sees of exp(s). Needs
   Tq == Tk (self-attention). Reference path: A materialised. */
static void mhe__nonapprox_scores(const mhe_attn_dims *d, int b, int h, const float *q, const float *k,
                                  float *s) {
    int j, c, dh = d->d_head;
    for (j = 0; j < d->Tk; j++) {
        const float *qj = q + ((size_t)b * d->Tq + j) * d->q_stride + (size_t)h * dh,
                    *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * dh;
        float acc = 0;
        for (c = 0; c < dh; c++)
            acc += mhe__silu(qj[c]) * kj[c];
        s[j] = d->scale * acc;
    }
}

static void mhe__nonapprox_scores_one(const mhe_attn_dims *d, int b, int h, int j, const float *q,
                                      const float *k, float *s) {
    int c, dh = d->d_head;
    const float *qj = q + ((size_t)b * d->Tq + j) * d->q_stride + (size_t)h * dh,
                *kj = k + ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * dh;
    float acc = 0;
    for (c = 0; c < dh; c++)
        acc += mhe__silu(qj[c]) * kj[c];
    *s = d->scale * acc;
}

static void mhe__nonapprox_ref_fwd(const mhe_attn_dims *d, float *out, float *probs, const float *q,
                                   const float *k, const float *v) {
    int bh;
    MHE_ASSERT(d->Tq == d->Tk);
    MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t, j;
        float *rows = probs + ((size_t)b * d->n_heads + h) * d->Tq * d->Tk,
              *s = rows + (size_t)(d->Tq - 1) * d->Tk;
        mhe__nonapprox_scores(d, b, h, q, k, s); /* in the last row, which is written last (in place) */
        for (t = 0; t < d->Tq; t++) {
            float *p = rows + (size_t)t * d->Tk,
                  *o = out + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * d->d_head, mx = -INFINITY;
            int vis = mhe__att_visible(d, b, t);
            double z = 0;
            for (j = 0; j < vis; j++)
                mx = s[j] > mx ? s[j] : mx;
            for (j = 0; j < vis; j++)
                z += exp((double)s[j] - mx);
            for (j = 0; j < d->Tk; j++)
                p[j] = j < vis ? (float)(exp((double)s[j] - mx) / z) : 0.0f;
            memset(o, 0, (size_t)d->d_head * sizeof(float));
            for (j = 0; j < vis; j++)
                mhe__axpy(o, p[j], v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * d->d_head,
                          d->d_head);
        }
    }
}

#ifndef MHE_NO_TRAIN
/* ds_j = sum_t A_tj (g_t.v_j - g_t.o_t) (the scores of a column are one s_j),
   dv_j = sum_t A_tj g_t; then through s_j = scale SiLU(q_j).k_j */
static void mhe__nonapprox_grad_qk(const mhe_attn_dims *d, int b, int h, int j, float ds, const float *q,
                                   const float *k, float *dq, float *dk) {
    int c, dh = d->d_head;
    size_t qo = ((size_t)b * d->Tq + j) * d->q_stride + (size_t)h * dh,
           ko = ((size_t)b * d->Tk + j) * d->k_stride + (size_t)h * dh;
    for (c = 0; c < dh; c++) {
        dq[qo + c] += ds * d->scale * k[ko + c] * mhe__silu_grad(q[qo + c]);
        dk[ko + c] += ds * d->scale * mhe__silu(q[qo + c]);
    }
}

static void mhe__nonapprox_ref_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                   const float *out, const float *probs, const float *q, const float *k,
                                   const float *v) {
    int bh;
    MHE__OMP(omp parallel for if (mhe__att_parallel(d)))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t, j, dh = d->d_head;
        const float *rows = probs + ((size_t)b * d->n_heads + h) * d->Tq * d->Tk;
        for (j = 0; j < d->Tk; j++) {
            const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * dh;
            float *dvj = dv + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * dh;
            double ds = 0;
            for (t = 0; t < d->Tq; t++) {
                float a = rows[(size_t)t * d->Tk + j];
                size_t r = ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * dh;
                if (a == 0.0f)
                    continue;
                ds += (double)a * (mhe__dot(dout + r, vj, dh) - mhe__dot(dout + r, out + r, dh));
                mhe__axpy(dvj, a, dout + r, dh);
            }
            mhe__nonapprox_grad_qk(d, b, h, j, (float)ds, q, k, dq, dk);
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* Linear time (the recurrent form, eq. 4.18, run over the sequence): a
   running max m, sum D and numerator N per (sequence, head); o_t = N / D over
   the keys t sees; stats keeps lse_t = m + log D. */
static void mhe__nonapprox_lin_fwd(const mhe_attn_dims *d, float *out, float *lse, const float *q,
                                   const float *k, const float *v) {
    int bh;
    MHE_ASSERT(d->Tq == d->Tk);
    MHE__OMP(omp parallel for if ((int64_t)d->B * d->n_heads * d->Tq * d->d_head > MHE__PAR_MIN))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t, added = 0, c, dh = d->d_head;
        float num[MHE_MAX_D_HEAD], mx = -INFINITY, s;
        double den = 0;
        memset(num, 0, sizeof(float) * (size_t)dh);
        for (t = 0; t < d->Tq; t++) {
            int vis = mhe__att_visible(d, b, t);
            float *o = out + ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * dh;
            for (; added < vis; added++) {
                const float *vj = v + ((size_t)b * d->Tk + added) * d->v_stride + (size_t)h * dh;
                mhe__nonapprox_scores_one(d, b, h, added, q, k, &s);
                if (s > mx) { /* rescale what was summed under the old max */
                    float corr = mx == -INFINITY ? 0.0f : expf(mx - s);
                    for (c = 0; c < dh; c++)
                        num[c] *= corr;
                    den *= corr;
                    mx = s;
                }
                {
                    float e = expf(s - mx);
                    mhe__axpy(num, e, vj, dh);
                    den += e;
                }
            }
            for (c = 0; c < dh; c++)
                o[c] = vis > 0 ? (float)(num[c] / den) : 0.0f;
            lse[((size_t)b * d->n_heads + h) * d->Tq + t] = vis > 0 ? mx + (float)log(den) : -INFINITY;
        }
    }
}

#ifndef MHE_NO_TRAIN
/* backward, a reverse sweep: with c_t = lse_t, A_tj = exp(s_j - c_t) for the
   keys t sees; G = sum exp(r - c_t) g_t and H = sum exp(r - c_t) g_t.o_t over
   the queries that see key j, r = the least c_t among them (so every factor
   is <= 1); dv_j = exp(s_j - r) G, ds_j = exp(s_j - r) (v_j.G - H). */
static void mhe__nonapprox_lin_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                   const float *out, const float *lse, const float *q, const float *k,
                                   const float *v) {
    int bh;
    MHE__OMP(omp parallel for if ((int64_t)d->B * d->n_heads * d->Tq * d->d_head > MHE__PAR_MIN))
    for (bh = 0; bh < d->B * d->n_heads; bh++) {
        int b = bh / d->n_heads, h = bh % d->n_heads, t = d->Tq - 1, j, c, dh = d->d_head;
        float G[MHE_MAX_D_HEAD], H = 0, r = INFINITY;
        const float *cl = lse + ((size_t)b * d->n_heads + h) * d->Tq;
        memset(G, 0, sizeof(float) * (size_t)dh);
        for (j = d->Tq > 0 ? mhe__att_visible(d, b, d->Tq - 1) - 1 : -1; j >= 0; j--) {
            const float *vj = v + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * dh;
            float *dvj = dv + ((size_t)b * d->Tk + j) * d->v_stride + (size_t)h * dh, s, e;
            for (; t >= 0 && mhe__att_visible(d, b, t) > j; t--) {
                size_t row = ((size_t)b * d->Tq + t) * d->o_stride + (size_t)h * dh;
                float w = 1.0f, go = mhe__dot(dout + row, out + row, dh);
                if (cl[t] < r) {
                    float corr = r == INFINITY ? 0.0f : expf(cl[t] - r);
                    for (c = 0; c < dh; c++)
                        G[c] *= corr;
                    H *= corr;
                    r = cl[t];
                } else {
                    w = expf(r - cl[t]);
                }
                mhe__axpy(G, w, dout + row, dh);
                H += w * go;
            }
            mhe__nonapprox_scores_one(d, b, h, j, q, k, &s);
            e = expf(s - r);
            mhe__axpy(dvj, e, G, dh);
            mhe__nonapprox_grad_qk(d, b, h, j, e * (mhe__dot(vj, G, dh) - H), q, k, dq, dk);
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* ---- per-operation profile (MHE_PROFILE) ----------------------------------
   MHE__TIMED(op, statements) runs the statements and, when profiling, adds
   their wall time to op in the current phase. The sites are call sites in
   sections 5, 7 and 9, never nested. */
static mhe_profile mhe__prof;
#ifdef MHE_PROFILE
static int mhe__prof_phase;
static double mhe__prof_now(void) {
#if defined(_OPENMP)
    return omp_get_wtime();
#elif defined(_WIN32)
    return (double)clock() / CLOCKS_PER_SEC;   /* wall time there */
#elif defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#else
    return (double)clock() / CLOCKS_PER_SEC;   /* CPU time: close to wall time on one thread */
#endif
}
static void mhe__prof_add(int op, double t0) {
    mhe__prof.ms[mhe__prof_phase][op] += (mhe__prof_now() - t0) * 1e3;
    mhe__prof.calls[mhe__prof_phase][op]++;
}
#define MHE__TIMED(op, ...) do { double mhe__t0 = mhe__prof_now(); __VA_ARGS__; mhe__prof_add(op, mhe__t0); } while (0)
#define MHE__PHASE(p) (mhe__prof_phase = (p))
MHEDEF int mhe_profile_enabled(void) { return 1; }
#else
#define MHE__TIMED(op, ...) do { __VA_ARGS__; } while (0)
#define MHE__PHASE(p) ((void)0)   /* no shared state written: models may run in parallel threads */
MHEDEF int mhe_profile_enabled(void) { return 0; }
#endif

MHEDEF void mhe_profile_reset(void) { memset(&mhe__prof, 0, sizeof mhe__prof); }
MHEDEF void mhe_profile_read(mhe_profile *out) { if (out) *out = mhe__prof; }
MHEDEF const char *mhe_profile_op_name(int op) {
    static const char *const names[MHE_OP_COUNT] = { "embed", "norm", "qkv", "attn", "wo", "fc1", "act", "fc2",
                                                      "residual", "head", "loss", "zero", "clip", "adamw" };
    return op >= 0 && op < MHE_OP_COUNT ? names[op] : "?";
}

/* ---- 5. attention kinds -------------------------------------------------- */
/* Everything about one kind is here, reached from its row of the kind table
   (5.11; the row's type in 5.1): its geometry and checks (5.2), tensors
   (5.2b), maps (5.4, 5.5, 5.8), and three dispatch chains that every caller
   goes through, each calling the row's function, so training,
   cross-attention and decoding cannot drift apart:
     chain 1  mhe__attn_branch_fwd / _bwd   the sublayer f(u) of a kind (5.9):
              projections, then chain 2, then W^O (mhe__qkv_branch_fwd); the
              ch. 4 and FNet kinds have their own (5.8)
     chain 2  mhe__attn_fwd / _bwd          the core of a kind (5.7, 5.8): the
              reference path (eq. 1, probabilities kept), the fused tiles,
              MHE-MUL's and collab's stacked heads, MHE-ADD's shared scores,
              or one query at a time when decoding
     chain 3  mhe__attn_branch_decode       new tokens through a kind (5.10),
              with the K/V cache, recurrent states or precomputed maps
   The residual, norms and Admin's omega around f are mhe__sub_enter and
   mhe__sub_leave (section 7), shared by training and decoding. The reading
   guide of docs/kinds.md maps each paper equation to the function computing it. */

/* ---- 5.1 a kind's row: facts and functions --------------------------------- */

/* MHE__FAM_USER: a kind registered from outside (mhe_attn_kind_register), run through its ops */
enum { MHE__FAM_SOFTMAX, MHE__FAM_MHE, MHE__FAM_COLLAB, MHE__FAM_DECON_QKV, MHE__FAM_GATED, MHE__FAM_MIXING,
       MHE__FAM_USER };
/* what decoding keeps per layer (mhe__decode_state_floats sizes the states) */
enum {
    MHE__CACHE_KV,      /* K and V rows per token (el-att: the input; skv: one tensor) */
    MHE__CACHE_TAYLOR,  /* per head S [F, d_h] and z [F], F = mhe__taylor_features(d_h): n (F d_h + F) floats */
    MHE__CACHE_SCAN,    /* per head a running max, sum and numerator [d_h]: n (d_h + 2) floats */
    MHE__CACHE_MAPS,    /* V rows and the fixed stream's precomputed maps: n L (L + 1) / 2 floats */
    MHE__CACHE_NONE,    /* no memory of earlier tokens */
    MHE__CACHE_USER     /* a registered kind's rows (cache_floats per token) and its decode scratch */
};
/* the kind's own activation buffer beside the common ones (mhe__ext_floats sizes it) */
enum {
    MHE__EXT_NONE,
    MHE__EXT_TAYLOR,    /* the fused core's per-block states, when fused_attention=1 */
    MHE__EXT_DFT,       /* the DFT's work rows, forward and backward */
    MHE__EXT_MIX,       /* X W_hidden^T [B T C] before the sequence mixing */
    MHE__EXT_STATIC,    /* the static embeddings through the sublayer's norm [rows, C + 2] */
    MHE__EXT_USER       /* a registered kind's saved activations (act_floats) */
};

/* where a ch. 4 kind's Q and K come from (the thesis's question); V always from the input */
enum {
    MHE__QK_INPUT,      /* the sublayer's input, as every attention */
    MHE__QK_RANDOM,     /* the fixed stream of random inputs (rndemb-qk, eq. 4.9) */
    MHE__QK_SEQUENCE,   /* the fixed stream of a token sequence (fixedseq-qk, eq. 4.11) */
    MHE__QK_STATIC      /* the static embeddings through the sublayer's norm (staticemb-qk, eq. 4.13) */
};

/* A kind is one row: the facts that differ between kinds, then the functions
   the library calls for it, by chain (NULL where it has none). Most kinds
   share their family's functions and differ in facts and geometry; the table
   itself (mhe__kinds[], 5.11) comes after the functions it names. */
struct mhe__geom;
struct mhe__layout;
struct mhe__ctx;
struct mhe__decode_buf;
typedef void mhe__core_fwd_fn(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                              int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                              const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                              int use_ref);
typedef void mhe__core_bwd_fn(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                              int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                              const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                              const float *att, const float *stats, float *work, float *hmap, int use_ref);
typedef struct mhe__kind_info {
    const char *name;       /* as in configs: attn=... */
    const char *source;     /* paper and equation */
    int family, cache;
    int causal;             /* 1: may run in a causal stack (0: encoder only) */
    int encdec;             /* 1: may be in an encoder-decoder (0: its fixed stream needs one stack) */
    const char *no_cross;   /* why it cannot be cross-attention; NULL: it can */
    int fast;               /* 1: a fused or linear-time path beside the reference one */
    const char *tensors;    /* what it owns under layers.N.attn. (or .cross.); [..] with bias=1 */
    int ext;                /* MHE__EXT_*: its own activation buffer */
    const char *q8;         /* the tensors a q8 checkpoint stores as int8 (the rest stay float32) */
    int qk;                 /* MHE__QK_*: where Q and K come from */
    /* 5.2: its projections and heads (mhe__layer_geom completes them), the configs it refuses */
    void (*geom)(const mhe_config *c, int kind, struct mhe__geom *g);
    mhe_status (*check)(const mhe_config *c, int kind, const char *where, int i, char *err);
    /* 5.2b: its tensors, counted and laid out (named, initialised) */
    int64_t (*count)(const mhe_config *c, int kind, const struct mhe__geom *g, int with_wo, int with_bias);
    void (*layout)(struct mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind,
                   const struct mhe__geom *g, float res_std);
    /* chain 2 (5.7, 5.8): the core over given Q, K, V rows, and its backward */
    mhe__core_fwd_fn *core_fwd;
    mhe__core_bwd_fn *core_bwd;
    /* chain 1 (5.9): the sublayer f(u) of block l (cross: over the encoder output), its backward */
    void (*branch_fwd)(mhe_model *m, int l, int cross, const struct mhe__ctx *x, const float *u, float *out);
    void (*branch_bwd)(mhe_model *m, int l, int cross, const struct mhe__ctx *x, const float *u,
                       const float *d_out, float *du);
    /* chain 3 (5.10): rows tokens (positions pos, pos + 1, ...) through sublayer `cross` of
       block l into d->branch [rows, C] */
    void (*decode)(mhe_model *m, mhe_kv_cache *c, int l, int cross, int pos, int rows, const float *u,
                   struct mhe__decode_buf *d);
} mhe__kind_info;

/* kinds registered from outside: their ops and the table row the library reads */
typedef struct mhe__user_kind {
    mhe_attn_kind_ops ops;
    mhe__kind_info info;
} mhe__user_kind;
static mhe__user_kind mhe__user_kinds[MHE_MAX_REGISTERED_KINDS];
static int mhe__n_user_kinds;

MHEDEF int mhe_attn_kind_count(void) { return MHE_ATTN_KIND_COUNT + mhe__n_user_kinds; }

static int mhe__kind_valid(int kind) { return kind >= 0 && kind < mhe_attn_kind_count(); }

/* the row of a kind (built in or registered); the table is in 5.11 */
static const mhe__kind_info *mhe__kind(int kind);

/* a registered kind's ops; NULL for a built-in kind */
static const mhe_attn_kind_ops *mhe__user_ops(int kind) {
    return kind >= MHE_ATTN_KIND_COUNT && kind < mhe_attn_kind_count() ? &mhe__user_kinds[kind - MHE_ATTN_KIND_COUNT].ops
                                                                       : NULL;
}

/* taylor, nonapprox: decoding carries a fixed-size state per head instead of K/V rows */
static int mhe__kind_recurrent(int kind) {
    int cache = mhe__kind(kind)->cache;
    return cache == MHE__CACHE_TAYLOR || cache == MHE__CACHE_SCAN;
}

/* rndemb-qk, fixedseq-qk: Q and K from the fixed stream, maps precomputed at decoding */
static int mhe__kind_fixed(int kind) {
    return mhe__kind(kind)->cache == MHE__CACHE_MAPS;
}

/* fnet, linear: a fixed or learned mixing, no attention map to inspect (nor for a registered kind,
   whose activations are its own) */
static int mhe__kind_has_map(int kind) {
    int f = mhe__kind(kind)->family;
    return f != MHE__FAM_MIXING && f != MHE__FAM_USER;
}

/* mlp: each token sees only itself, so the identity is its map */
static int mhe__kind_identity_map(int kind) {
    return mhe__kind(kind)->family == MHE__FAM_GATED;
}

/* the kinds of thesis ch. 4 and FNet */
MHEDEF int mhe_attn_kind_is_decon(int kind) {
    int f = mhe__kind_valid(kind) ? mhe__kind(kind)->family : -1;
    return f == MHE__FAM_DECON_QKV || f == MHE__FAM_GATED || f == MHE__FAM_MIXING;
}

MHEDEF const char *mhe_attn_kind_name(int kind) {
    return mhe__kind_valid(kind) ? mhe__kind(kind)->name : "?";
}

MHEDEF int mhe_attn_kind_from_name(const char *name) {
    int i;
    for (i = 0; i < mhe_attn_kind_count(); i++)
        if (strcmp(name, mhe__kind(i)->name) == 0)
            return i;
    return -1;
}

MHEDEF const char *mhe_attn_kind_source(int kind) {
    return mhe__kind_valid(kind) ? mhe__kind(kind)->source : "?";
}

MHEDEF const char *mhe_attn_kind_tensors(int kind) {
    return mhe__kind_valid(kind) ? mhe__kind(kind)->tensors : "?";
}

MHEDEF const char *mhe_attn_kind_q8_tensors(int kind) {
    return mhe__kind_valid(kind) ? mhe__kind(kind)->q8 : "?";
}

/* ---- 5.2 geometry: what a layer of each kind projects ------------------- */

/* What a layer of each attention kind projects: widths of its Q, K and V
   projections (k_w = 0: K is the layer input; v_w = 0: V is K), how many
   query and K/V heads the core runs, and the K/V floats cached per token. */
typedef struct mhe__geom {
    int q_w, k_w, v_w, proj_w;      /* proj_w = q_w + k_w + v_w: one GEMM */
    int core_q_heads, kv_heads;     /* heads the attention core runs */
    int cache_k, cache_v;           /* floats per token in the KV cache (cache_v 0: V is K) */
    int mhe, mul;                   /* head embeddings e^{Q,K,V}; mul: psi(A, e) = A (1 + e), else A + e */
    int shared_q;                   /* one Q~ of width q_w for all heads, mapped per head by M (collab) */
    int att_w;                      /* width of the output before W^O: n d_h (mlp: F; fnet, linear: C) */
} mhe__geom;

/* Each kind's projections and heads, and the configs it refuses (self- or
   cross-attention alike) with the reason. mhe__layer_geom starts from n query
   heads of width d_h over one projection each, and completes proj_w and the
   cache from the kind's row. */
static void mhe__geom_mha(const mhe_config *c, int kind, mhe__geom *g) {   /* and the ch. 4 kinds with Q, K, V */
    (void)kind;
    g->k_w = g->v_w = c->n_heads * mhe_config_d_head(c);
    g->kv_heads = c->n_heads;
}
static void mhe__geom_sha(const mhe_config *c, int kind, mhe__geom *g) {   /* one head, repeated into W^O */
    (void)kind;
    g->q_w = g->k_w = g->v_w = mhe_config_d_head(c);
    g->core_q_heads = g->kv_heads = 1;
}
static void mhe__geom_mqa(const mhe_config *c, int kind, mhe__geom *g) {
    (void)kind;
    g->k_w = g->v_w = mhe_config_d_head(c);
    g->kv_heads = 1;
}
static void mhe__geom_gqa(const mhe_config *c, int kind, mhe__geom *g) {
    (void)kind;
    g->k_w = g->v_w = c->kv_groups * mhe_config_d_head(c);
    g->kv_heads = c->kv_groups;
}
static mhe_status mhe__check_gqa(const mhe_config *c, int kind, const char *where, int i, char *err) {
    (void)kind;
    if (c->kv_groups > c->n_heads || c->n_heads % c->kv_groups != 0)
        return mhe__fail(err, MHE_ERR_CONFIG, "%s %d is gqa: kv_groups %d must divide n_heads %d", where, i,
                         c->kv_groups, c->n_heads);
    return MHE_OK;
}
static void mhe__geom_skv(const mhe_config *c, int kind, mhe__geom *g) {   /* V is K */
    (void)kind;
    g->k_w = c->n_heads * mhe_config_d_head(c);
    g->kv_heads = c->n_heads;
}
static void mhe__geom_el_att(const mhe_config *c, int kind, mhe__geom *g) {   /* K = V = the input */
    (void)kind;
    g->kv_heads = c->n_heads;
}
static mhe_status mhe__check_el_att(const mhe_config *c, int kind, const char *where, int i, char *err) {
    int dh = mhe_config_d_head(c);
    (void)kind;
    if (c->n_heads * dh != c->d_model)
        return mhe__fail(err, MHE_ERR_CONFIG,
                         "%s %d is el-att: K = V = the %s split into heads needs n_heads * d_head = d_model "
                         "(%d * %d != %d)",
                         where, i, strncmp(where, "cross", 5) == 0 ? "encoder output" : "input", c->n_heads,
                         dh, c->d_model);
    return MHE_OK;
}
/* MHE: one seed head; the core runs n heads over it through e^{Q,K,V} */
static void mhe__geom_mhe_add(const mhe_config *c, int kind, mhe__geom *g) {
    (void)kind;
    g->q_w = g->k_w = g->v_w = mhe_config_d_head(c);
    g->kv_heads = 1;
    g->mhe = 1;
}
static void mhe__geom_mhe_mul(const mhe_config *c, int kind, mhe__geom *g) {
    mhe__geom_mhe_add(c, kind, g);
    g->mul = 1;
}
static void mhe__geom_mlp(const mhe_config *c, int kind, mhe__geom *g) {   /* gate | up in one GEMM; "W^O" is down */
    (void)kind;
    g->q_w = g->k_w = g->att_w = mhe_config_mlp_width(c);
    g->kv_heads = c->n_heads;
}
static void mhe__geom_mixing(const mhe_config *c, int kind, mhe__geom *g) {   /* fnet, linear: the mixed input */
    (void)kind;
    g->q_w = 0;
    g->kv_heads = c->n_heads;
    g->att_w = c->d_model;
}
/* collab: Q~ [D~]; K~ [D~] then the n content-bias scores v_i . x; per-head V */
static void mhe__geom_collab(const mhe_config *c, int kind, mhe__geom *g) {
    (void)kind;
    g->q_w = mhe_config_collab_dim(c);
    g->k_w = g->q_w + c->n_heads;
    g->v_w = c->n_heads * mhe_config_d_head(c);
    g->kv_heads = 1;
    g->shared_q = 1;
}
static mhe_status mhe__check_collab(const mhe_config *c, int kind, const char *where, int i, char *err) {
    (void)kind;
    (void)where;
    (void)i;
    if (((int64_t)mhe_config_collab_dim(c) + c->n_heads) * c->d_model > ((int64_t)1 << 31) - 1)
        return mhe__fail(err, MHE_ERR_OVERFLOW, "model too large: a tensor would exceed 2^31 elements");
    return MHE_OK;
}
/* a registered kind: no projections of the library's; its cache rows are its own */
static void mhe__geom_user(const mhe_config *c, int kind, mhe__geom *g) {
    const mhe_attn_kind_ops *ops = mhe__user_ops(kind);
    memset(g, 0, sizeof *g);
    g->cache_k = ops->cache_floats ? (int)ops->cache_floats(c) : 0;
}
/* a registered kind: its own check, and tensors the library can lay out */
static mhe_status mhe__check_user(const mhe_config *c, int kind, const char *where, int i, char *err) {
    const mhe_attn_kind_ops *ops = mhe__user_ops(kind);
    mhe_kind_tensor t[MHE_KIND_MAX_TENSORS + 1];
    const char *why = ops->check ? ops->check(c) : NULL;
    int nt, j;
    if (why)
        return mhe__fail(err, MHE_ERR_CONFIG, "%s %d is %s: %s", where, i, ops->name, why);
    memset(t, 0, sizeof t);
    nt = ops->tensors(c, t);
    if (nt < 0 || nt > MHE_KIND_MAX_TENSORS)
        return mhe__fail(err, MHE_ERR_CONFIG, "%s %d is %s: %d tensors (0 to %d)", where, i, ops->name, nt,
                         MHE_KIND_MAX_TENSORS);
    for (j = 0; j < nt; j++)
        if (!t[j].name[0] || memchr(t[j].name, 0, sizeof t[j].name) == NULL || (t[j].ndim != 1 && t[j].ndim != 2) ||
            mhe_shape_size(t[j].ndim, t[j].shape) < 1 ||
            (t[j].init != MHE_INIT_NORMAL && t[j].init != MHE_INIT_ZERO && t[j].init != MHE_INIT_ONE))
            return mhe__fail(err, MHE_ERR_CONFIG, "%s %d is %s: its tensor %d ('%.24s') needs a name, 1 or 2 "
                             "dimensions of at least 1 and an init of MHE_INIT_NORMAL, _ZERO or _ONE", where, i,
                             ops->name, j, t[j].name);
    return MHE_OK;
}

static mhe__geom mhe__layer_geom(const mhe_config *c, int kind) {
    mhe__geom g;
    const mhe__kind_info *r = mhe__kind(kind);
    memset(&g, 0, sizeof g);
    g.q_w = g.att_w = c->n_heads * mhe_config_d_head(c);
    g.core_q_heads = c->n_heads;
    r->geom(c, kind, &g);
    if (r->family == MHE__FAM_USER)
        return g;
    g.proj_w = g.q_w + g.k_w + g.v_w;
    g.cache_k = g.k_w ? g.k_w : c->d_model; /* no W^K: the input rows (el-att) */
    g.cache_v = g.v_w;
    /* no growing cache: a state (taylor, nonapprox), V rows only (fixed maps), nothing (mlp, fnet, linear) */
    if (mhe__kind_recurrent(kind) || r->cache == MHE__CACHE_NONE)
        g.cache_k = g.cache_v = 0;
    if (r->cache == MHE__CACHE_MAPS)
        g.cache_k = 0;
    return g;
}

/* 1 when a layer of `kind` runs the reference core, which keeps the
   probabilities: fused_attention=0, or a collab layer whose n heads of width
   D~ do not fit the stacked core's tiles (n max(D~, d_h, 64) > 8192) */
static int mhe__attn_uses_probs(const mhe_config *c, int kind) {
    mhe__geom g;
    if (mhe__user_ops(kind))
        return 0; /* it keeps what it needs in its own activations */
    if (!c->fused_attention)
        return 1;
    g = mhe__layer_geom(c, kind);
    return g.shared_q && !mhe__stacked_rows(c->n_heads, g.q_w, mhe_config_d_head(c));
}

/* ---- 5.2b the tensors a kind owns, their count, and its width rules ------- */


static mhe_status mhe__check_kind_geom(const mhe_config *c, int kind, const char *where, int i, char *err) {
    const mhe__kind_info *r = mhe__kind(kind);
    return r->check ? r->check(c, kind, where, i, err) : MHE_OK;
}

/* Walks the parameter list in memory order. With m->params == NULL it only
   counts; then it fills the tensors. The order puts wq, wk, wv (and their
   biases) next to each other so one GEMM computes Q, K and V together. */
typedef struct mhe__layout {
    mhe_model *m;
    int count;
    int64_t floats;
    int overflow;
    char prefix[32], tmp[32];       /* name of the block being laid out ("layers.3") */
} mhe__layout;

static mhe_tensor *mhe__param(mhe__layout *L, const char *name, int ndim, int64_t d0, int64_t d1, int decay,
                              int init, float init_std) {
    mhe_tensor *t;
    int64_t shape[2], size;
    shape[0] = d0;
    shape[1] = d1;
    size = mhe_shape_size(ndim, shape);
    if (size < 0 || L->floats > INT64_MAX / 4 - size) {
        L->overflow = 1;
        return NULL;
    }
    if (!L->m->params) {
        L->count++;
        L->floats += size;
        return NULL;
    }
    t = &L->m->params[L->count++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->size = size;
    t->data = L->m->param_data ? L->m->param_data + L->floats : NULL;
    t->grad = L->m->grad_data ? L->m->grad_data + L->floats : NULL; /* none for an inference-only model */
    t->decay = decay;
    t->init = init;
    t->init_std = init_std;
    L->floats += size;
    return t;
}

/* one tensor of an attention sublayer, named "<block>.<attn|cross>.<suffix>" */
#define MHE__AP(field, suffix, nd, a, b, dec, init, sd)                                  \
    (snprintf(nm, sizeof nm, "%.24s.%.8s.%.24s", L->prefix, pre, suffix),                 \
     w->field = mhe__param(L, nm, nd, a, b, dec, init, sd))
/* Each kind's tensors under layers.N.attn. (or .cross.), counted (what
   mhe_attn_param_count reports, with or without W^O and biases) and laid out
   (named, initialised): the pairs below must agree, which test_model checks. */
#define MHE__AP_SETUP                                                                      \
    const mhe_config *c = &L->m->cfg;                                                      \
    float std = c->init_std;                                                               \
    char nm[MHE_NAME_LEN]

/* W^Q, W^K, W^V as the geometry has them (skv: one W^KV; el-att: no W^K, W^V), the head
   embeddings of MHE, W^O; a bias each with bias=1. The softmax kinds, MHE and ch. 4's Q, K, V. */
static int64_t mhe__count_qkv(const mhe_config *c, int kind, const mhe__geom *g, int with_wo, int with_bias) {
    int64_t C = c->d_model, HD = (int64_t)c->n_heads * mhe_config_d_head(c), n = (int64_t)g->proj_w * C;
    (void)kind;
    if (g->mhe)
        n += 3 * HD; /* e^Q, e^K, e^V */
    if (with_bias)
        n += g->proj_w;
    if (with_wo)
        n += C * HD + (with_bias ? C : 0);
    return n;
}
static void mhe__layout_qkv(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, const mhe__geom *g,
                            float res_std) {
    MHE__AP_SETUP;
    int C = c->d_model, n = c->n_heads, dh = mhe_config_d_head(c);
    float hstd = c->head_init_std >= 0 ? c->head_init_std : std;
    const char *kname = g->v_w ? "wk" : "wkv"; /* skv: V is K */
    (void)kind;
    MHE__AP(wq, "wq.weight", 2, g->q_w, C, 1, MHE_INIT_NORMAL, std);
    if (g->k_w) {
        snprintf(L->tmp, sizeof L->tmp, "%s.weight", kname);
        MHE__AP(wk, L->tmp, 2, g->k_w, C, 1, MHE_INIT_NORMAL, std);
    }
    if (g->v_w)
        MHE__AP(wv, "wv.weight", 2, g->v_w, C, 1, MHE_INIT_NORMAL, std);
    if (c->bias) {
        MHE__AP(bq, "wq.bias", 1, g->q_w, 0, 0, MHE_INIT_ZERO, 0);
        if (g->k_w) {
            snprintf(L->tmp, sizeof L->tmp, "%s.bias", kname);
            MHE__AP(bk, L->tmp, 1, g->k_w, 0, 0, MHE_INIT_ZERO, 0);
        }
        if (g->v_w)
            MHE__AP(bv, "wv.bias", 1, g->v_w, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (g->mhe) { /* head embeddings: no weight decay, which would pull every head towards SHA */
        MHE__AP(eq, "eq", 2, n, dh, 0, MHE_INIT_NORMAL, hstd);
        MHE__AP(ek, "ek", 2, n, dh, 0, MHE_INIT_NORMAL, hstd);
        MHE__AP(ev, "ev", 2, n, dh, 0, MHE_INIT_NORMAL, hstd);
    }
    MHE__AP(wo, "wo.weight", 2, C, (int64_t)n * dh, 1, MHE_INIT_NORMAL, res_std);
    if (c->bias)
        MHE__AP(bo, "wo.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
}

/* mlp, eq. 4.5: FC_Dn(SiLU(FC_Gt(H)) * FC_Up(H)); gate and up adjacent (one GEMM) count as the
   projections, down as W^O */
static int64_t mhe__count_gated(const mhe_config *c, int kind, const mhe__geom *g, int with_wo, int with_bias) {
    int64_t C = c->d_model, F = g->q_w;
    (void)kind;
    return 2 * F * C + (with_bias ? 2 * F : 0) + (with_wo ? C * F + (with_bias ? C : 0) : 0);
}
static void mhe__layout_gated(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, const mhe__geom *g,
                              float res_std) {
    MHE__AP_SETUP;
    int C = c->d_model;
    (void)kind;
    MHE__AP(gate, "gate.weight", 2, g->q_w, C, 1, MHE_INIT_NORMAL, std);
    MHE__AP(up, "up.weight", 2, g->k_w, C, 1, MHE_INIT_NORMAL, std);
    if (c->bias) {
        MHE__AP(gate_b, "gate.bias", 1, g->q_w, 0, 0, MHE_INIT_ZERO, 0);
        MHE__AP(up_b, "up.bias", 1, g->k_w, 0, 0, MHE_INIT_ZERO, 0);
    }
    MHE__AP(down, "down.weight", 2, C, g->q_w, 1, MHE_INIT_NORMAL, res_std);
    if (c->bias)
        MHE__AP(down_b, "down.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
}

/* linear: Y = W_seq (X W_hidden^T), no W^O, no bias (as FNet's code), N(0, init_std) */
static int64_t mhe__count_linear(const mhe_config *c, int kind, const mhe__geom *g, int with_wo, int with_bias) {
    (void)kind, (void)g, (void)with_wo, (void)with_bias;
    return (int64_t)c->max_seq_len * c->max_seq_len + (int64_t)c->d_model * c->d_model;
}
static void mhe__layout_linear(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, const mhe__geom *g,
                               float res_std) {
    MHE__AP_SETUP;
    int C = c->d_model;
    (void)res_std;
    (void)kind, (void)g;
    MHE__AP(hidden, "hidden.weight", 2, C, C, 1, MHE_INIT_NORMAL, std);
    MHE__AP(seq, "seq.weight", 2, c->max_seq_len, c->max_seq_len, 1, MHE_INIT_NORMAL, std);
}

/* collab: W~^Q, W~^K [D~, C], content bias [n, C], W^V adjacent (one GEMM); b^V the only bias
   before W^O; the mixing M [n, D~]: (2 C + n) D~ + n C + W^V (+ b^V) + W^O */
static int64_t mhe__count_collab(const mhe_config *c, int kind, const mhe__geom *g, int with_wo, int with_bias) {
    int64_t C = c->d_model, HD = (int64_t)c->n_heads * mhe_config_d_head(c);
    (void)kind;
    return (int64_t)g->proj_w * C + (int64_t)c->n_heads * g->q_w + (with_bias ? g->v_w : 0) +
           (with_wo ? C * HD + (with_bias ? C : 0) : 0);
}
static void mhe__layout_collab(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, const mhe__geom *g,
                               float res_std) {
    MHE__AP_SETUP;
    int C = c->d_model, n = c->n_heads, dh = mhe_config_d_head(c);
    int D = g->q_w;
    (void)kind;
    MHE__AP(wq, "wq.weight", 2, D, C, 1, MHE_INIT_NORMAL, std);
    MHE__AP(wk, "wk.weight", 2, D, C, 1, MHE_INIT_NORMAL, std);
    MHE__AP(wcb, "content_bias.weight", 2, n, C, 1, MHE_INIT_NORMAL, std);
    MHE__AP(wv, "wv.weight", 2, g->v_w, C, 1, MHE_INIT_NORMAL, std);
    if (c->bias)
        MHE__AP(bv, "wv.bias", 1, g->v_w, 0, 0, MHE_INIT_ZERO, 0);
    /* no decay on M, as on the MHE head embeddings */
    MHE__AP(mix, "mixing", 2, n, D, 0, c->collab_mix_std > 0 ? MHE_INIT_NORMAL : MHE_INIT_BLOCKS,
            c->collab_mix_std);
    MHE__AP(wo, "wo.weight", 2, C, (int64_t)n * dh, 1, MHE_INIT_NORMAL, res_std);
    if (c->bias)
        MHE__AP(bo, "wo.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
}

/* a registered kind: every tensor it declares, in its order (its W^O and biases are its own) */
static int64_t mhe__count_user(const mhe_config *c, int kind, const mhe__geom *g, int with_wo, int with_bias) {
    mhe_kind_tensor t[MHE_KIND_MAX_TENSORS];
    int nt, j;
    int64_t n = 0;
    (void)g, (void)with_wo, (void)with_bias;
    memset(t, 0, sizeof t);
    nt = mhe__user_ops(kind)->tensors(c, t);
    for (j = 0; j < nt && j < MHE_KIND_MAX_TENSORS; j++)
        n += mhe_shape_size(t[j].ndim, t[j].shape);
    return n;
}
static void mhe__layout_user(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, const mhe__geom *g,
                             float res_std) {
    MHE__AP_SETUP;
    (void)res_std;
    mhe_kind_tensor t[MHE_KIND_MAX_TENSORS];
    mhe_tensor *first = NULL;
    int j, nt;
    (void)g;
    memset(t, 0, sizeof t);
    nt = mhe__user_ops(kind)->tensors(c, t);
    for (j = 0; j < nt && j < MHE_KIND_MAX_TENSORS; j++) { /* mhe__param lays them out one after another */
        MHE__AP(user, t[j].name, t[j].ndim, t[j].shape[0], t[j].ndim > 1 ? t[j].shape[1] : 0, t[j].decay,
                t[j].init, t[j].init_std > 0 ? t[j].init_std : std);
        if (!j) first = w->user;
    }
    w->user = first;
    w->n_user = j;
}
#undef MHE__AP_SETUP
#undef MHE__AP

/* the attention tensors mhe__layout_walk creates for one layer, counted (fnet: none) */
static int64_t mhe__attn_count(const mhe_config *c, int kind, int with_wo, int with_bias) {
    mhe__geom g = mhe__layer_geom(c, kind);
    const mhe__kind_info *r = mhe__kind(kind);
    return r->count ? r->count(c, kind, &g, with_wo, with_bias) : 0;
}

/* one attention sublayer (prefix "attn" or "cross") of a block */
static void mhe__layout_attn(mhe__layout *L, mhe_attn_weights *w, const char *pre, int kind, float res_std) {
    mhe__geom g = mhe__layer_geom(&L->m->cfg, kind);
    const mhe__kind_info *r = mhe__kind(kind);
    w->kind = kind;
    if (r->layout)
        r->layout(L, w, pre, kind, &g, res_std);
}

/* ---- 5.3 what a sublayer sees: dropout sites, norms, core dimensions ---- */

/* One dropout stream per site: 0 decoder (or single-stack) embeddings,
   1 encoder embeddings, then per block l (all stacks) the residual sums of
   its three sublayers and the weights of its two attentions. */
#define MHE__SITE_RES(l, k) (2 + 8 * (l) + (k))      /* k: 0 self-attention, 1 cross-attention, 2 MLP */
#define MHE__SITE_ATT(l, k) (2 + 8 * (l) + 3 + (k))  /* k: 0 self-attention, 1 cross-attention */

static uint64_t mhe__site_seed(const mhe_model *m, int site) {
    uint64_t x = m->dropout_seed ^ ((uint64_t)(site + 1) * 0x9e3779b97f4a7c15ULL);
    return mhe__splitmix64(&x);
}

/* What the blocks of one stack see in a forward or backward pass. */
typedef struct mhe__ctx {
    int B, T, causal;
    const int *len;                 /* [B] real tokens per sequence, or NULL */
    const float *mem;               /* encoder output for cross-attention [B*Ts, C] */
    int Ts;
    const int *mem_len;             /* [B] real source tokens, or NULL */
    float *d_mem;                   /* backward: gradient of mem (accumulated) */
    int fixed;                      /* 1: this is the fixed stream of rndemb-qk / fixedseq-qk layers */
    const float *emb, *mem_emb;     /* staticemb-qk: the block-0 inputs of this stack and of the source */
    float *d_emb, *d_mem_emb;       /* ... and their gradients (accumulated) */
} mhe__ctx;

static void mhe__norm_fwd(const mhe_model *m, float *out, float *mean, float *rstd, const float *inp,
                          const mhe_tensor *w, const mhe_tensor *b, int N) {
    if (m->cfg.norm == MHE_NORM_LAYERNORM)
        mhe_layernorm_fwd(out, mean, rstd, inp, w->data, b->data, N, m->cfg.d_model, m->cfg.norm_eps);
    else
        mhe_rmsnorm_fwd(out, rstd, inp, w->data, N, m->cfg.d_model, m->cfg.norm_eps);
}

#ifndef MHE_NO_TRAIN
static void mhe__norm_bwd(const mhe_model *m, float *dinp, const float *dout, const float *inp,
                          const mhe_tensor *w, const mhe_tensor *b, const float *mean, const float *rstd,
                          int N) {
    if (m->cfg.norm == MHE_NORM_LAYERNORM)
        mhe_layernorm_bwd(dinp, w->grad, b->grad, dout, inp, w->data, mean, rstd, N, m->cfg.d_model);
    else
        mhe_rmsnorm_bwd(dinp, w->grad, dout, inp, w->data, rstd, N, m->cfg.d_model);
}
#endif /* MHE_NO_TRAIN */

static const float *mhe__opt_data(const mhe_tensor *t) {
    return t ? t->data : NULL;
}
#ifndef MHE_NO_TRAIN
static float *mhe__opt_grad(const mhe_tensor *t) {
    return t ? t->grad : NULL;
}
#endif /* MHE_NO_TRAIN */

static mhe_attn_dims mhe__attn_dims(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq,
                                    int Tk, int causal, const int *kv_len) {
    mhe_attn_dims d;
    const mhe_config *c = &m->cfg;
    mhe__geom g = mhe__layer_geom(c, w->kind);
    int dh = mhe_config_d_head(c);
    memset(&d, 0, sizeof d);
    d.B = B;
    d.n_heads = g.core_q_heads;
    d.n_kv_heads = g.kv_heads;
    d.Tq = Tq;
    d.Tk = Tk;
    d.d_head = dh;
    d.o_stride = c->n_heads * dh;
    d.causal = causal;
    d.q_offset = Tk - Tq;
    d.kv_len = kv_len;
    d.scale = 1.0f / sqrtf((float)dh);
    d.dropout = m->training ? c->attn_dropout : 0.0f;
    d.seed = mhe__site_seed(m, site);
    return d;
}

/* out rows (stride ldo) = inp rows (stride ldi) W^T + b: a linear layer writing into a column slice */
static void mhe__lin_rows(float *out, int ldo, const float *inp, int ldi, const float *w, const float *b,
                          int N, int IC, int OC) {
    int i, j;
    mhe_gemm(0, 1, N, OC, IC, 1.0f, inp, ldi, w, IC, 0.0f, out, ldo);
    if (b)
        for (i = 0; i < N; i++)
            for (j = 0; j < OC; j++)
                out[(size_t)i * ldo + j] += b[j];
}

/* A forward linear layer through its weight tensor: float GEMM, or the q8
   kernel when the weights are int8. OC may run past w into the tensors that
   follow it in the model's memory order (wq, wk, wv: one projection), each
   q8 tensor with its own scales. */
static void mhe__lin_rowsq(float *out, int ldo, const float *inp, int ldi, const mhe_tensor *w, const float *b,
                           int N, int IC, int OC) {
    int r0 = 0;
    if (!w->q8) { mhe__lin_rows(out, ldo, inp, ldi, w->data, b, N, IC, OC); return; }
    for (; r0 < OC; w++) {
        int rows = (int)w->shape[0] < OC - r0 ? (int)w->shape[0] : OC - r0;
        MHE_ASSERT(w->q8 && w->ndim == 2 && w->shape[1] == IC);
#ifdef MHE_Q8_INT8_ACTIVATIONS   /* the measured alternative (see mhe_q8_linear_fwd_i8) */
        mhe_q8_linear_fwd_i8(out + r0, ldo, inp, ldi, w->q8, w->q8_scale, w->q8_group, b ? b + r0 : NULL, N, IC, rows);
#else
        mhe_q8_linear_fwd(out + r0, ldo, inp, ldi, w->q8, w->q8_scale, w->q8_group, b ? b + r0 : NULL, N, IC, rows);
#endif
        r0 += rows;
    }
}
#define mhe__linq(out, inp, w, b, N, IC, OC) mhe__lin_rowsq((out), (OC), (inp), (IC), (w), (b), (N), (IC), (OC))


#ifndef MHE_NO_TRAIN
static void mhe__lin_rows_bwd(float *dinp, int ldi, float *dw, float *db, const float *dout, int ldo,
                              const float *inp, const float *w, int N, int IC, int OC) {
    int i, j;
    if (dinp)
        mhe_gemm(0, 0, N, IC, OC, 1.0f, dout, ldo, w, IC, 1.0f, dinp, ldi);
    if (dw)
        mhe_gemm(1, 0, OC, IC, N, 1.0f, dout, ldo, inp, ldi, 1.0f, dw, IC);
    if (db)
        for (i = 0; i < N; i++)
            for (j = 0; j < OC; j++)
                db[j] += dout[(size_t)i * ldo + j];
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.4 MHE-ADD, MHE-MUL: the head embeddings (MHE paper eq. 5-6) ------- */

/* MHE-MUL maps from the head embeddings: head i scores with
   (Q*(1+e_i^Q)) (K*(1+e_i^K))^T = (Q * w_i) K^T, w_i = (1+e_i^Q)(1+e_i^K),
   and its values are V*(1+e_i^V) (MHE paper eq. 5-6, psi = mul). */
static void mhe__mul_maps(const mhe_attn_weights *w, float *hmap, int nd) {
    int i;
    for (i = 0; i < nd; i++) {
        hmap[i] = (1.0f + w->eq->data[i]) * (1.0f + w->ek->data[i]);
        hmap[nd + i] = 1.0f + w->ev->data[i];
    }
}

/* MHE reference path, literally eq. 5: head i of every row gets
   psi(seed row, e_i), stored in x [rows, n d_h]. */
static void mhe__mhe_expand(const float *src, int stride, int rows, const mhe_tensor *e, int n, int dh,
                            int mul, float *x) {
    int r, h, c;
    for (r = 0; r < rows; r++)
        for (h = 0; h < n; h++)
            for (c = 0; c < dh; c++) {
                float a = src[(size_t)r * stride + c], b = e->data[(size_t)h * dh + c];
                x[((size_t)r * n + h) * dh + c] = mul ? a * (1.0f + b) : a + b;
            }
}

#ifndef MHE_NO_TRAIN
/* back through mhe__mhe_expand: dsrc += sum over heads, e->grad += sum over rows */
static void mhe__mhe_expand_bwd(const float *gx, const float *src, float *dsrc, int stride, int rows,
                                mhe_tensor *e, int n, int dh, int mul) {
    int r, h, c;
    for (r = 0; r < rows; r++)
        for (h = 0; h < n; h++)
            for (c = 0; c < dh; c++) {
                float g = gx[((size_t)r * n + h) * dh + c];
                size_t ei = (size_t)h * dh + c;
                dsrc[(size_t)r * stride + c] += mul ? g * (1.0f + e->data[ei]) : g;
                e->grad[ei] += mul ? g * src[(size_t)r * stride + c] : g;
            }
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.5 collab: shared Q~, K~ and the mixing rows (Cordonnier et al. 2020) */

/* Collaborative attention (Cordonnier et al. 2020, eq. 13): head i scores
   (x_q W~_Q * m_i) . (x_k W~_K) + v_i . x_k, scaled by 1/sqrt(d_h) as the
   layer it may replace. The projection rows hold Q~ [D~], then K~ [D~] and
   the n content-bias scores v_i . x_k, then the n per-head values. */
static void mhe__collab_dims(mhe_attn_dims *d, const mhe_attn_weights *w, int D, const float *k, int ks) {
    d->d_qk = D;
    d->v_per_head = 1;
    d->n_kv_heads = 1;
    d->q_shared = 1;
    d->q_mul = w->mix->data;
    d->k_bias = k + D;
    d->k_bias_stride = ks;
}

/* reference path, literally: Q_i = Q~ * m_i for every head, [rows, n D~] */
static void mhe__collab_expand(const float *q, int qs, int rows, const float *mix, int n, int D, float *x) {
    int r, h, c;
    for (r = 0; r < rows; r++)
        for (h = 0; h < n; h++)
            for (c = 0; c < D; c++)
                x[((size_t)r * n + h) * D + c] = q[(size_t)r * qs + c] * mix[(size_t)h * D + c];
}

#ifndef MHE_NO_TRAIN
static void mhe__collab_expand_bwd(const float *gx, const float *q, float *dq, int qs, int rows,
                                   const float *mix, float *dmix, int n, int D) {
    int r, h, c;
    for (r = 0; r < rows; r++)
        for (h = 0; h < n; h++)
            for (c = 0; c < D; c++) {
                float g = gx[((size_t)r * n + h) * D + c];
                dq[(size_t)r * qs + c] += g * mix[(size_t)h * D + c];
                dmix[(size_t)h * D + c] += g * q[(size_t)r * qs + c];
            }
}
#endif /* MHE_NO_TRAIN */

/* collab's one bias, b^V, onto the value columns of projection rows (W~_Q,
   W~_K and the content bias have none: a query bias is what the content bias
   folds in, eq. 12, and a key bias adds a constant to each row of scores) */
static void mhe__collab_vbias(const mhe_attn_weights *w, const mhe__geom *g, float *v, int stride, int rows) {
    int r, j;
    if (!g->shared_q || !w->bv)
        return;
    for (r = 0; r < rows; r++)
        for (j = 0; j < (int)w->bv->size; j++)
            v[(size_t)r * stride + j] += w->bv->data[j];
}

#ifndef MHE_NO_TRAIN
static void mhe__collab_vbias_bwd(const mhe_attn_weights *w, const mhe__geom *g, const float *dv, int stride,
                                  int rows) {
    int r, j;
    if (!g->shared_q || !w->bv)
        return;
    for (r = 0; r < rows; r++)
        for (j = 0; j < (int)w->bv->size; j++)
            w->bv->grad[j] += dv[(size_t)r * stride + j];
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.6 where Q, K and V come from (softmax kinds, MHE, collab) -------- */

/* Where an attention sublayer finds its K and V: in its projections (self:
   after Q in one [rows, proj_w] block; cross: the [src rows, k_w + v_w]
   block of the encoder output), or, for a kind without W^K (el-att), the
   input itself; V is K for a kind without W^V (skv). */
static void mhe__kv_ptrs(const mhe__geom *g, const float *proj, int proj_stride, const float *inp,
                         int inp_stride, const float **k, int *ks, const float **v) {
    *k = g->k_w ? proj : inp;
    *ks = g->k_w ? proj_stride : inp_stride;
    *v = g->v_w ? proj + g->k_w : *k;
}

/* Q, K, V of a self-attention sublayer in one GEMM into proj [rows, proj_w]
   (collab adds its one bias, b^V, after it); training and decoding both */
static void mhe__attn_project(const mhe_attn_weights *w, const mhe__geom *g, int C, int rows, const float *u,
                              float *proj) {
    mhe__linq(proj, u, w->wq, mhe__opt_data(w->bq), rows, C, g->proj_w);
    mhe__collab_vbias(w, g, proj + g->q_w + g->k_w, g->proj_w, rows);
}

/* K, V of a cross-attention sublayer from the encoder output mem [rows, C]
   into kv [rows, k_w + v_w]: W^K and W^V follow W^Q in memory (b^K, b^V
   follow b^Q), one GEMM. A kind without W^K (el-att) reads mem itself. */
static void mhe__cross_kv(const mhe_attn_weights *w, const mhe__geom *g, int C, int rows, const float *mem,
                          float *kv) {
    if (!g->k_w)
        return;
    mhe__linq(kv, mem, w->wk, mhe__opt_data(w->bk), rows, C, g->k_w + g->v_w);
    mhe__collab_vbias(w, g, kv + g->k_w, g->k_w + g->v_w, rows);
}

/* ---- 5.7 chain 2, the core of a kind: mhe__attn_fwd, mhe__attn_bwd ------ */

/* The attention of one sublayer (weights w) for B x Tq queries over Tk keys:
   q rows (stride qs), K rows and V rows (strides ks, vs). Writes att
   [B*Tq, n d_h] and the core's statistics (lse, or probs for the reference
   core). Training, cross-attention and decoding all come here, so the
   KV-cache path cannot drift from the trained one. work: the expanded heads
   of the reference path (MHE, collab) or the kind's own buffer (taylor);
   hmap: MHE-MUL's per-head maps. Each kind's row names its core. */

/* the softmax kinds (eq. 1): the reference core, one query at a time when
   decoding, or the fused tiles; sha's one head is copied into the n slots of W^O */
static void mhe__softmax_core_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                  int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                  const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                                  int use_ref) {
    const mhe_config *c = &m->cfg;
    int n = c->n_heads, dh = mhe_config_d_head(c), HD = n * dh, r, h;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)work, (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref)
        mhe_attn_ref_fwd(&d, att, stats, q, k, v);
    else if (Tq == 1 && !d.dropout)
        mhe__attn_one(&d, att, stats, q, k, v);
    else
        mhe__must(mhe_attn_fused_fwd(&d, att, stats, q, k, v));
    if (mhe__layer_geom(c, w->kind).core_q_heads < n) /* sha: n identical heads feed W^O */
        for (r = 0; r < B * Tq; r++)
            for (h = 1; h < n; h++)
                memcpy(att + (size_t)r * HD + (size_t)h * dh, att + (size_t)r * HD, (size_t)dh * sizeof(float));
}

#ifndef MHE_NO_TRAIN
/* Backward of a core: adds into dq, dk, dv (same strides as q, k, v) and into
   the kind's own gradients (head embeddings, M). d_att is used as scratch. */
static void mhe__softmax_core_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                  int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                  const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                                  const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    const mhe_config *c = &m->cfg;
    int n = c->n_heads, dh = mhe_config_d_head(c), HD = n * dh, r, h;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    mhe_attn_grads gr;
    (void)work, (void)hmap;
    memset(&gr, 0, sizeof gr);
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (mhe__layer_geom(c, w->kind).core_q_heads < n) /* sha: the n copies of the one head, their gradients add up */
        for (r = 0; r < B * Tq; r++)
            for (h = 1; h < n; h++)
                mhe__axpy(d_att + (size_t)r * HD, 1.0f, d_att + (size_t)r * HD + (size_t)h * dh, dh);
    if (use_ref)
        mhe_attn_ref_bwd(&d, &gr, dq, dk, dv, d_att, stats, q, k, v);
    else
        mhe__must(mhe_attn_fused_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v));
}
#endif /* MHE_NO_TRAIN */

/* MHE-ADD, MHE-MUL (MHE paper eq. 5-6): n heads over one seed head through
   psi(A, e_i). The reference path expands the heads into work; the fast
   paths keep the seed head and apply the maps inside the fused core: one
   QK^T for all heads (ADD), the heads stacked (MUL), or one query at a time */
static void mhe__mhe_core_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                              int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                              const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                              int use_ref) {
    const mhe_config *c = &m->cfg;
    int n = c->n_heads, dh = mhe_config_d_head(c), HD = n * dh, mul = mhe__layer_geom(c, w->kind).mul;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref) {
        float *qx = work, *kx = qx + (size_t)B * Tq * HD, *vx = kx + (size_t)B * Tk * HD;
        mhe__mhe_expand(q, qs, B * Tq, w->eq, n, dh, mul, qx);
        mhe__mhe_expand(k, ks, B * Tk, w->ek, n, dh, mul, kx);
        mhe__mhe_expand(v, vs, B * Tk, w->ev, n, dh, mul, vx);
        d.q_stride = d.k_stride = d.v_stride = HD;
        d.n_kv_heads = n;
        mhe_attn_ref_fwd(&d, att, stats, qx, kx, vx);
        return;
    }
    d.q_shared = 1;
    if (Tq == 1 && !d.dropout) { /* decoding: one query, the maps on the fly */
        if (mul) {
            mhe__mul_maps(w, hmap, HD);
            d.q_mul = hmap;
            d.v_mul = hmap + HD;
        } else {
            d.q_add = w->eq->data;
            d.k_add = w->ek->data;
            d.v_add = w->ev->data;
        }
        mhe__attn_one(&d, att, stats, q, k, v);
        return;
    }
    if (!mul && mhe__attn_add_fits(&d)) { /* one QK^T for all heads */
        mhe__attn_add_fwd(&d, att, stats, q, k, v, w->eq->data, w->ev->data);
        return;
    }
    if (mul) {
        mhe__mul_maps(w, hmap, HD);
        d.q_mul = hmap;
        d.v_mul = hmap + HD;
        if (mhe__attn_mul_rows(&d)) {
            mhe__attn_mul_fwd(&d, att, stats, q, k, v);
            return;
        } /* heads stacked */
    } else {
        d.q_add = w->eq->data;
        d.k_add = w->ek->data;
        d.v_add = w->ev->data;
    }
    mhe__must(mhe_attn_fused_fwd(&d, att, stats, q, k, v));
}

#ifndef MHE_NO_TRAIN
static void mhe__mhe_core_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                              int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                              const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                              const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    int n = c->n_heads, dh = mhe_config_d_head(c), HD = n * dh, mul = mhe__layer_geom(c, w->kind).mul, i;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    mhe_attn_grads gr;
    memset(&gr, 0, sizeof gr);
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref) {
        size_t nq = (size_t)B * Tq * HD, nk = (size_t)B * Tk * HD;
        const float *qx = work, *kx = qx + nq, *vx = kx + nk;
        float *dqx = a->d_projx, *dkx = dqx + nq, *dvx = dkx + nk;
        memset(dqx, 0, (nq + 2 * nk) * sizeof(float));
        d.q_stride = d.k_stride = d.v_stride = HD;
        d.n_kv_heads = n;
        mhe_attn_ref_bwd(&d, &gr, dqx, dkx, dvx, d_att, stats, qx, kx, vx);
        /* back through psi: A_i = A*(1+e_i) (mul) or A + e_i (add), summed over heads */
        mhe__mhe_expand_bwd(dqx, q, dq, qs, B * Tq, w->eq, n, dh, mul);
        mhe__mhe_expand_bwd(dkx, k, dk, ks, B * Tk, w->ek, n, dh, mul);
        mhe__mhe_expand_bwd(dvx, v, dv, vs, B * Tk, w->ev, n, dh, mul);
        return;
    }
    d.q_shared = 1;
    gr.map_scratch = a->map_scratch;
    if (mul) {
        float *dmap = a->d_hmap;
        memset(dmap, 0, (size_t)2 * HD * sizeof(float));
        d.q_mul = hmap;
        d.v_mul = hmap + HD;
        gr.dq_mul = dmap;
        gr.dv_mul = dmap + HD;
        if (mhe__attn_mul_rows(&d))
            mhe__attn_mul_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v);
        else
            mhe__must(mhe_attn_fused_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v));
        for (i = 0; i < HD; i++) { /* w = (1+e^Q)(1+e^K) */
            w->eq->grad[i] += dmap[i] * (1.0f + w->ek->data[i]);
            w->ek->grad[i] += dmap[i] * (1.0f + w->eq->data[i]);
            w->ev->grad[i] += dmap[HD + i];
        }
    } else if (mhe__attn_add_fits(&d)) { /* e^K has no effect: its gradient stays 0 */
        mhe__attn_add_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v, w->eq->data, w->ev->data,
                          w->eq->grad, w->ev->grad);
    } else {
        d.q_add = w->eq->data;
        d.k_add = w->ek->data;
        d.v_add = w->ev->data;
        gr.dq_add = w->eq->grad;
        gr.dk_add = w->ek->grad;
        gr.dv_add = w->ev->grad;
        mhe__must(mhe_attn_fused_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v));
    }
}
#endif /* MHE_NO_TRAIN */

/* collab (Cordonnier et al. 2020, eq. 13): the heads' queries Q~ m_i from one
   Q~; decoding one query with M on the fly, else the heads stacked as
   MHE-MUL's (M in the query map), or the reference path over Q~ expanded */
static void mhe__collab_core_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                 int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                 const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                                 int use_ref) {
    const mhe_config *c = &m->cfg;
    int n = c->n_heads, D = mhe__layer_geom(c, w->kind).q_w;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    mhe__collab_dims(&d, w, D, k, ks);
    if (!use_ref && Tq == 1 && !d.dropout) {
        mhe__attn_one(&d, att, stats, q, k, v);
        return;
    }
    if (!use_ref && mhe__attn_mul_rows(&d)) {
        mhe__attn_mul_fwd(&d, att, stats, q, k, v);
        return;
    }
    mhe__collab_expand(q, qs, B * Tq, w->mix->data, n, D, work);
    d.q_shared = 0;
    d.q_mul = NULL;
    d.q_stride = n * D;
    mhe_attn_ref_fwd(&d, att, stats, work, k, v);
}

#ifndef MHE_NO_TRAIN
/* the content-bias scores' gradient lands beside dK */
static void mhe__collab_core_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                 int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                 const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                                 const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    int n = c->n_heads, D = mhe__layer_geom(c, w->kind).q_w;
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    mhe_attn_grads gr;
    (void)hmap;
    memset(&gr, 0, sizeof gr);
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    mhe__collab_dims(&d, w, D, k, ks);
    gr.dk_bias = dk + D;
    if (!use_ref && mhe__attn_mul_rows(&d)) {
        gr.map_scratch = a->map_scratch;
        gr.dq_mul = w->mix->grad;
        mhe__attn_mul_bwd(&d, &gr, dq, dk, dv, d_att, att, stats, q, k, v);
        return;
    }
    memset(a->d_projx, 0, (size_t)B * Tq * n * D * sizeof(float));
    d.q_shared = 0;
    d.q_mul = NULL;
    d.q_stride = n * D;
    mhe_attn_ref_bwd(&d, &gr, a->d_projx, dk, dv, d_att, stats, work, k, v);
    mhe__collab_expand_bwd(a->d_projx, q, dq, qs, B * Tq, w->mix->data, w->mix->grad, n, D);
}
#endif /* MHE_NO_TRAIN */

/* chain 2: the core of the sublayer's kind, through its row */
static void mhe__attn_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                          int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                          const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                          int use_ref) {
    mhe__kind(w->kind)->core_fwd(m, w, site, B, Tq, Tk, causal, kv_len, q, qs, k, ks, v, vs, att, stats, work,
                                 hmap, use_ref);
}

#ifndef MHE_NO_TRAIN
static void mhe__attn_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                          int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                          const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                          const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    mhe__kind(w->kind)->core_bwd(m, w, site, B, Tq, Tk, causal, kv_len, q, qs, k, ks, v, vs, dq, dk, dv, d_att,
                                 att, stats, work, hmap, use_ref);
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.8 thesis ch. 4 and FNet: mlp, taylor, nonapprox, rndemb-qk,
        fixedseq-qk, staticemb-qk, fnet, linear ------------------------------ */

/* the mlp kind (eq. 4.5): down(SiLU(gate u) * up u); gate | up adjacent, one
   GEMM into proj [rows, 2F], the product into att [rows, F] */
static void mhe__gated_fwd(const mhe_attn_weights *w, int C, int F, int rows, const float *u, float *proj,
                           float *att, float *out) {
    int r, i;
    mhe__linq(proj, u, w->gate, mhe__opt_data(w->gate_b), rows, C,
                   2 * F); /* gate and up: one GEMM */
    for (r = 0; r < rows; r++)
        for (i = 0; i < F; i++)
            att[(size_t)r * F + i] = mhe__silu(proj[(size_t)r * 2 * F + i]) * proj[(size_t)r * 2 * F + F + i];
    mhe__linq(out, att, w->down, mhe__opt_data(w->down_b), rows, F, C);
}

#ifndef MHE_NO_TRAIN
/* back through mhe__gated_fwd: dproj [rows, 2F] and datt [rows, F] are scratch; du += */
static void mhe__gated_bwd(const mhe_attn_weights *w, int C, int F, int rows, const float *u,
                           const float *proj, const float *att, const float *d_out, float *dproj, float *datt,
                           float *du) {
    int r, i;
    memset(datt, 0, (size_t)rows * F * sizeof(float));
    mhe_linear_bwd(datt, w->down->grad, mhe__opt_grad(w->down_b), d_out, att, w->down->data, rows, F, C);
    for (r = 0; r < rows; r++)
        for (i = 0; i < F; i++) {
            float gate = proj[(size_t)r * 2 * F + i], up = proj[(size_t)r * 2 * F + F + i];
            float da = datt[(size_t)r * F + i];
            dproj[(size_t)r * 2 * F + i] = da * up * mhe__silu_grad(gate);
            dproj[(size_t)r * 2 * F + F + i] = da * mhe__silu(gate);
        }
    mhe_linear_bwd(du, w->gate->grad, mhe__opt_grad(w->gate_b), dproj, u, w->gate->data, rows, C, 2 * F);
}
#endif /* MHE_NO_TRAIN */

/* the linear kind (FNet's learned baseline): Y_b = W_seq[:L, :L] (X_b W_hidden^T)
   over each sequence's L real tokens (padding rows 0); z [rows, C] keeps X W_hidden^T */
static void mhe__linear_mix_fwd(const mhe_model *m, const mhe_attn_weights *w, const mhe__ctx *x,
                                const float *u, float *z, float *out) {
    int C = m->cfg.d_model, Lmax = m->cfg.max_seq_len, b;
    mhe__linq(z, u, w->hidden, NULL, x->B * x->T, C, C);
    for (b = 0; b < x->B; b++) {
        int L = x->len ? x->len[b] : x->T;
        float *yb = out + (size_t)b * x->T * C;
        mhe_gemm(0, 0, L, C, L, 1.0f, w->seq->data, Lmax, z + (size_t)b * x->T * C, C, 0.0f, yb, C);
        memset(yb + (size_t)L * C, 0, (size_t)(x->T - L) * C * sizeof(float));
    }
}

#ifndef MHE_NO_TRAIN
/* dW_seq += dY Z^T, dZ = W_seq^T dY (into dz, scratch), then through W_hidden: du += */
static void mhe__linear_mix_bwd(const mhe_model *m, const mhe_attn_weights *w, const mhe__ctx *x,
                                const float *u, const float *z, const float *d_out, float *dz, float *du) {
    int C = m->cfg.d_model, Lmax = m->cfg.max_seq_len, rows = x->B * x->T, b;
    memset(dz, 0, (size_t)rows * C * sizeof(float));
    for (b = 0; b < x->B; b++) {
        int L = x->len ? x->len[b] : x->T;
        const float *db = d_out + (size_t)b * x->T * C, *zb = z + (size_t)b * x->T * C;
        mhe_gemm(1, 0, L, C, L, 1.0f, w->seq->data, Lmax, db, C, 0.0f, dz + (size_t)b * x->T * C, C);
        mhe_gemm(0, 1, L, L, C, 1.0f, db, C, zb, C, 1.0f, w->seq->grad, Lmax);
    }
    mhe_linear_bwd(du, w->hidden->grad, NULL, dz, u, w->hidden->data, rows, C, C);
}
#endif /* MHE_NO_TRAIN */

/* doubles of DFT scratch for sequences of up to T tokens of width C */
static size_t mhe__fnet_work(int T, int C) {
    int n = T > C ? T : C;
    size_t fw = 4 * (size_t)mhe__pow2_at_least(2 * n) + 2 * (size_t)n;
    return 2 * (size_t)T * C + 2 * (size_t)n + fw;
}

/* FNet mixing (Lee-Thorp et al. 2022): Y = Re(F_L X F_C), the unnormalised
   2-D DFT over each sequence's L real tokens and the C features (padding
   rows give 0 and are not mixed in). The map is its own adjoint:
   Re(F_L G F_C) is also d loss / d X. */
static void mhe__fnet_apply(const float *X, float *Y, int B, int T, int C, const int *len, double *work,
                            int accumulate) {
    int b, t, c;
    for (b = 0; b < B; b++) {
        int L = len ? len[b] : T, n = T > C ? T : C;
        double *zr = work, *zi = zr + (size_t)T * C, *cr = zi + (size_t)T * C, *ci = cr + n, *fw = ci + n;
        const float *x = X + (size_t)b * T * C;
        float *y = Y + (size_t)b * T * C;
        for (t = 0; t < L; t++) { /* along the features, row by row */
            double *r = zr + (size_t)t * C, *im = zi + (size_t)t * C;
            for (c = 0; c < C; c++) {
                r[c] = x[(size_t)t * C + c];
                im[c] = 0;
            }
            mhe_fft(r, im, C, 0, fw);
        }
        for (c = 0; c < C; c++) { /* along the sequence, column by column */
            for (t = 0; t < L; t++) {
                cr[t] = zr[(size_t)t * C + c];
                ci[t] = zi[(size_t)t * C + c];
            }
            mhe_fft(cr, ci, L, 0, fw);
            for (t = 0; t < L; t++)
                y[(size_t)t * C + c] = (float)(accumulate ? y[(size_t)t * C + c] + cr[t] : cr[t]);
        }
        if (!accumulate)
            memset(y + (size_t)L * C, 0, (size_t)(T - L) * C * sizeof(float));
    }
}

/* The sublayers of mlp, fnet and linear (chain 1): none mixes Q, K and V, none
   can be cross-attention (their rows say why) */
static void mhe__gated_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    MHE__TIMED(MHE_OP_ATTN, mhe__gated_fwd(w, m->cfg.d_model, mhe_config_mlp_width(&m->cfg), x->B * x->T, u, aa->proj,
                                           aa->att, out));
}
#ifndef MHE_NO_TRAIN
static void mhe__gated_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                  const float *d_out, float *du) {
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    MHE__TIMED(MHE_OP_ATTN, mhe__gated_bwd(w, m->cfg.d_model, mhe_config_mlp_width(&m->cfg), x->B * x->T, u, aa->proj,
                                           aa->att, d_out, m->acts.d_proj, m->acts.d_att, du));
}
#endif /* MHE_NO_TRAIN */

static void mhe__fnet_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    MHE__TIMED(MHE_OP_ATTN,
               mhe__fnet_apply(u, out, x->B, x->T, m->cfg.d_model, x->len, (double *)(void *)aa->ext, 0));
}
#ifndef MHE_NO_TRAIN
static void mhe__fnet_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                 const float *d_out, float *du) {
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    (void)u;
    MHE__TIMED(MHE_OP_ATTN,
               mhe__fnet_apply(d_out, du, x->B, x->T, m->cfg.d_model, x->len, (double *)(void *)aa->ext, 1));
}
#endif /* MHE_NO_TRAIN */

static void mhe__linear_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    MHE__TIMED(MHE_OP_ATTN, mhe__linear_mix_fwd(m, w, x, u, aa->ext, out));
}
#ifndef MHE_NO_TRAIN
static void mhe__linear_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                   const float *d_out, float *du) {
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    MHE__TIMED(MHE_OP_ATTN, mhe__linear_mix_bwd(m, w, x, u, aa->ext, d_out, m->acts.d_att, du));
}
#endif /* MHE_NO_TRAIN */

/* floats of the kind-specific scratch (mhe_attn_acts.ext) for B x Tq queries over Tk keys */
static size_t mhe__ext_floats(const mhe_config *c, int kind, int B, int Tq, int Tk, int cross, int fused) {
    int dh = mhe_config_d_head(c);
    switch (mhe__kind(kind)->ext) {   /* the kind table's ext column */
    case MHE__EXT_TAYLOR: return fused ? (size_t)mhe__taylor_slots(B, c->n_heads, dh) * mhe__taylor_slot(dh) : 0;
    case MHE__EXT_DFT: return 2 * mhe__fnet_work(Tq, c->d_model);
    case MHE__EXT_MIX: return (size_t)B * Tq * c->d_model;
    case MHE__EXT_STATIC: return (size_t)B * ((size_t)Tq + (cross ? (size_t)Tk : 0)) * ((size_t)c->d_model + 2);
    case MHE__EXT_USER: {   /* its saved activations, then its backward's scratch */
        const mhe_attn_kind_ops *ops = mhe__user_ops(kind);
        return (ops->act_floats ? ops->act_floats(c, B, Tq) : 0) + (ops->scratch_floats ? ops->scratch_floats(c, B, Tq) : 0);
    }
    default: return 0;
    }
}

/* staticemb-qk: e through the sublayer's input norm (pre-norm: the one its
   hidden state gets before W^{Q,K,V}, so e and H arrive at the same scale;
   post-norm: e as it is). buf: [rows, C] then mean, rstd [rows]. */
static const float *mhe__static_in(const mhe_model *m, const mhe_tensor *nw, const mhe_tensor *nb,
                                   const float *e, int rows, float *buf) {
    size_t C = (size_t)m->cfg.d_model;
    if (m->cfg.post_norm)
        return e;
    mhe__norm_fwd(m, buf, buf + rows * C, buf + rows * C + rows, e, nw, nb, rows);
    return buf;
}

#ifndef MHE_NO_TRAIN
/* d loss / d N(e) in dne [rows, C] -> d e (accumulated), and the norm's gradients */
static void mhe__static_in_bwd(mhe_model *m, const mhe_tensor *nw, const mhe_tensor *nb, const float *e,
                               int rows, const float *buf, const float *dne, float *de) {
    size_t C = (size_t)m->cfg.d_model;
    if (m->cfg.post_norm) {
        mhe__axpy(de, 1.0f, dne, (int)(rows * C));
        return;
    }
    mhe__norm_bwd(m, de, dne, e, nw, nb, buf + rows * C, buf + rows * C + rows, rows);
}
#endif /* MHE_NO_TRAIN */

/* the cores of taylor (thesis eq. 4.6) and nonapprox (eq. 4.7-4.8): their own
   reference paths (probabilities kept) or linear-time ones (taylor's per-block
   states in work, the kind's ext buffer); the other ch. 4 kinds with Q, K, V
   run the softmax core */
static void mhe__taylor_core_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                 int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                 const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                                 int use_ref) {
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref)
        mhe__taylor_ref_fwd(&d, att, stats, q, k, v);
    else
        mhe__taylor_lin_fwd(&d, att, stats, q, k, v, work);
}

#ifndef MHE_NO_TRAIN
static void mhe__taylor_core_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                 int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                 const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                                 const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref)
        mhe__taylor_ref_bwd(&d, dq, dk, dv, d_att, stats, q, k, v);
    else
        mhe__taylor_lin_bwd(&d, dq, dk, dv, d_att, att, stats, q, k, v, work);
}
#endif /* MHE_NO_TRAIN */

static void mhe__nonapprox_core_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                    int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                    const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                                    int use_ref) {
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)work, (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref)
        mhe__nonapprox_ref_fwd(&d, att, stats, q, k, v);
    else
        mhe__nonapprox_lin_fwd(&d, att, stats, q, k, v);
}

#ifndef MHE_NO_TRAIN
static void mhe__nonapprox_core_bwd(mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                                    int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                                    const float *v, int vs, float *dq, float *dk, float *dv, float *d_att,
                                    const float *att, const float *stats, float *work, float *hmap, int use_ref) {
    mhe_attn_dims d = mhe__attn_dims(m, w, site, B, Tq, Tk, causal, kv_len);
    (void)work, (void)hmap;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    if (use_ref)
        mhe__nonapprox_ref_bwd(&d, dq, dk, dv, d_att, att, stats, q, k, v);
    else
        mhe__nonapprox_lin_bwd(&d, dq, dk, dv, d_att, att, stats, q, k, v);
}
#endif /* MHE_NO_TRAIN */

/* f of an attention sublayer whose kind is one of thesis ch. 4 with Q, K, V,
   whose Q and K come (the row's qk) from the input (taylor, nonapprox), the
   fixed stream (rndemb-qk, fixedseq-qk, eq. 4.10 and 4.12) or the static
   embeddings (staticemb-qk, eq. 4.13); V always from the input. */
static void mhe__decon_qkv_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    const mhe_config *c = &m->cfg;
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, kind = w->kind,
        site = MHE__SITE_ATT(l, cross);
    int qs, ks, Tk, causal, b, t, qk = mhe__kind(kind)->qk;
    const int *kv_len;
    const float *q, *k, *v;
    if (!cross) {
        int fixed_qk = mhe__kind_fixed(kind) && !x->fixed;
        if (fixed_qk) { /* Q, K of the fixed stream at this layer, the same for every sequence */
            const float *fp = m->fixed.acts.layer[l].attn.proj;
            for (b = 0; b < x->B; b++)
                for (t = 0; t < x->T; t++)
                    memcpy(aa->proj + ((size_t)b * x->T + t) * 3 * HD, fp + (size_t)t * 3 * HD,
                           2 * (size_t)HD * sizeof(float));
            mhe__lin_rowsq(aa->proj + 2 * HD, 3 * HD, u, C, w->wv, mhe__opt_data(w->bv), rows, C, HD);
        } else if (qk == MHE__QK_STATIC) { /* Q, K from N(e) (W^Q, W^K adjacent), V from h */
            const float *ne =
                mhe__static_in(m, m->layers[l].norm1_w, m->layers[l].norm1_b, x->emb, rows, aa->ext);
            mhe__lin_rowsq(aa->proj, 3 * HD, ne, C, w->wq, mhe__opt_data(w->bq), rows, C, 2 * HD);
            mhe__lin_rowsq(aa->proj + 2 * HD, 3 * HD, u, C, w->wv, mhe__opt_data(w->bv), rows, C, HD);
        } else {
            mhe__linq(aa->proj, u, w->wq, mhe__opt_data(w->bq), rows, C, 3 * HD);
        }
        q = aa->proj;
        k = q + HD;
        v = q + 2 * HD;
        qs = ks = 3 * HD;
        Tk = x->T;
        causal = x->causal;
        kv_len = x->len;
    } else { /* taylor, staticemb-qk: Q from the decoder, K and V from the source */
        int mrows = x->B * x->Ts;
        if (qk == MHE__QK_STATIC) { /* both sides through norm3, the cross sublayer's input norm */
            const mhe_layer *y = &m->layers[l];
            float *bq = aa->ext, *bk = bq + (size_t)rows * (C + 2);
            mhe__linq(aa->proj, mhe__static_in(m, y->norm3_w, y->norm3_b, x->emb, rows, bq), w->wq,
                           mhe__opt_data(w->bq), rows, C, HD);
            mhe__lin_rowsq(aa->kv, 2 * HD, mhe__static_in(m, y->norm3_w, y->norm3_b, x->mem_emb, mrows, bk), C,
                          w->wk, mhe__opt_data(w->bk), mrows, C, HD);
            mhe__lin_rowsq(aa->kv + HD, 2 * HD, x->mem, C, w->wv, mhe__opt_data(w->bv), mrows, C, HD);
        } else {
            mhe__linq(aa->proj, u, w->wq, mhe__opt_data(w->bq), rows, C, HD);
            mhe__linq(aa->kv, x->mem, w->wk, mhe__opt_data(w->bk), mrows, C, 2 * HD);
        }
        q = aa->proj;
        qs = HD;
        k = aa->kv;
        v = k + HD;
        ks = 2 * HD;
        Tk = x->Ts;
        causal = 0;
        kv_len = x->mem_len;
    }
    mhe__attn_fwd(m, w, site, x->B, x->T, Tk, causal, kv_len, q, qs, k, ks, v, ks, aa->att, aa->stats, aa->ext, NULL,
                  !c->fused_attention);
    mhe__linq(out, aa->att, w->wo, mhe__opt_data(w->bo), rows, HD, C);
}

#ifndef MHE_NO_TRAIN
static void mhe__decon_qkv_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                               const float *d_out, float *du) {
    const mhe_config *c = &m->cfg;
    const mhe_attn_weights *w = cross ? &m->layers[l].cross : &m->layers[l].attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    mhe_acts *a = &m->acts;
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, kind = w->kind,
        site = MHE__SITE_ATT(l, cross);
    int b, t, qk = mhe__kind(kind)->qk;
    memset(a->d_att, 0, (size_t)rows * HD * sizeof(float));
    mhe_linear_bwd(a->d_att, w->wo->grad, mhe__opt_grad(w->bo), d_out, aa->att, w->wo->data, rows, HD, C);
    if (!cross) {
        int fixed_qk = mhe__kind_fixed(kind);
        float *dp = a->d_proj;
        memset(dp, 0, (size_t)rows * 3 * HD * sizeof(float));
        mhe__attn_bwd(m, w, site, x->B, x->T, x->T, x->causal, x->len, aa->proj, 3 * HD, aa->proj + HD, 3 * HD,
                      aa->proj + 2 * HD, 3 * HD, dp, dp + HD, dp + 2 * HD, a->d_att, aa->att, aa->stats, aa->ext, NULL,
                      !c->fused_attention);
        if (fixed_qk &&
            !x->fixed) { /* d Q, K go to the fixed stream (summed over the batch), d V to the input */
            float *dqk = m->fixed.d_qk + (size_t)l * m->fixed.T * 2 * HD;
            for (b = 0; b < x->B; b++)
                for (t = 0; t < x->T; t++)
                    mhe__axpy(dqk + (size_t)t * 2 * HD, 1.0f, dp + ((size_t)b * x->T + t) * 3 * HD, 2 * HD);
            mhe__lin_rows_bwd(du, C, w->wv->grad, mhe__opt_grad(w->bv), dp + 2 * HD, 3 * HD, u, w->wv->data,
                              rows, C, HD);
            return;
        }
        if (fixed_qk) { /* the fixed stream: its own attention plus what the main stream asks of its Q, K */
            const float *dqk = m->fixed.d_qk + (size_t)l * m->fixed.T * 2 * HD;
            for (t = 0; t < x->T; t++)
                mhe__axpy(dp + (size_t)t * 3 * HD, 1.0f, dqk + (size_t)t * 2 * HD, 2 * HD);
        }
        if (qk == MHE__QK_STATIC) { /* a->scratch (the forward's branch buffer) holds d N(e) */
            const mhe_layer *y = &m->layers[l];
            const float *ne = m->cfg.post_norm ? x->emb : aa->ext;
            memset(a->scratch, 0, (size_t)rows * C * sizeof(float));
            mhe__lin_rows_bwd(a->scratch, C, w->wq->grad, mhe__opt_grad(w->bq), dp, 3 * HD, ne, w->wq->data,
                              rows, C, 2 * HD);
            mhe__static_in_bwd(m, y->norm1_w, y->norm1_b, x->emb, rows, aa->ext, a->scratch, x->d_emb);
            mhe__lin_rows_bwd(du, C, w->wv->grad, mhe__opt_grad(w->bv), dp + 2 * HD, 3 * HD, u, w->wv->data,
                              rows, C, HD);
        } else {
            mhe_linear_bwd(du, w->wq->grad, mhe__opt_grad(w->bq), dp, u, w->wq->data, rows, C, 3 * HD);
        }
    } else {
        int mrows = x->B * x->Ts;
        float *dq = a->d_proj, *dkv = dq + (size_t)rows * HD;
        memset(dq, 0, ((size_t)rows * HD + (size_t)mrows * 2 * HD) * sizeof(float));
        mhe__attn_bwd(m, w, site, x->B, x->T, x->Ts, 0, x->mem_len, aa->proj, HD, aa->kv, 2 * HD, aa->kv + HD,
                      2 * HD, dq, dkv, dkv + HD, a->d_att, aa->att, aa->stats, aa->ext, NULL, !c->fused_attention);
        if (qk == MHE__QK_STATIC) {
            const mhe_layer *y = &m->layers[l];
            const float *bq = aa->ext, *bk = bq + (size_t)rows * (C + 2);
            memset(a->scratch, 0, (size_t)rows * C * sizeof(float));
            mhe_linear_bwd(a->scratch, w->wq->grad, mhe__opt_grad(w->bq), dq, m->cfg.post_norm ? x->emb : bq,
                           w->wq->data, rows, C, HD);
            mhe__static_in_bwd(m, y->norm3_w, y->norm3_b, x->emb, rows, bq, a->scratch, x->d_emb);
            memset(a->scratch, 0, (size_t)mrows * C * sizeof(float));
            mhe__lin_rows_bwd(a->scratch, C, w->wk->grad, mhe__opt_grad(w->bk), dkv, 2 * HD,
                              m->cfg.post_norm ? x->mem_emb : bk, w->wk->data, mrows, C, HD);
            mhe__static_in_bwd(m, y->norm3_w, y->norm3_b, x->mem_emb, mrows, bk, a->scratch, x->d_mem_emb);
            mhe__lin_rows_bwd(x->d_mem, C, w->wv->grad, mhe__opt_grad(w->bv), dkv + HD, 2 * HD, x->mem,
                              w->wv->data, mrows, C, HD);
        } else {
            mhe_linear_bwd(du, w->wq->grad, mhe__opt_grad(w->bq), dq, u, w->wq->data, rows, C, HD);
            mhe_linear_bwd(x->d_mem, w->wk->grad, mhe__opt_grad(w->bk), dkv, x->mem, w->wk->data, mrows, C,
                           2 * HD);
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* chain 1 of the ch. 4 kinds with Q, K and V */
static void mhe__decon_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    MHE__TIMED(MHE_OP_ATTN, mhe__decon_qkv_fwd(m, l, cross, x, u, out));
}
#ifndef MHE_NO_TRAIN
static void mhe__decon_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                  const float *d_out, float *du) {
    MHE__TIMED(MHE_OP_ATTN, mhe__decon_qkv_bwd(m, l, cross, x, u, d_out, du));
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.9 chain 1, the sublayer of a kind: mhe__attn_branch_fwd, _bwd ----- */

/* a registered kind's call for layer l: its tensors, activations and scratch */
static mhe_kind_call mhe__user_call(const mhe_model *m, int l, const mhe__ctx *x, float *ext) {
    const mhe_attn_weights *w = &m->layers[l].attn;
    const mhe_attn_kind_ops *ops = mhe__user_ops(w->kind);
    mhe_kind_call k;
    memset(&k, 0, sizeof k);
    k.cfg = &m->cfg;
    k.layer = l;
    k.B = x->B;
    k.T = x->T;
    k.causal = x->causal;
    k.len = x->len;
    k.w = w->user;
    k.acts = ext;
    k.scratch = ext + (ops->act_floats ? ops->act_floats(&m->cfg, x->B, x->T) : 0);
    return k;
}

/* a registered kind's sublayer: its own forward and backward (validation keeps it out of
   cross-attention; a trainer refuses it without backward) */
static void mhe__user_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    mhe_kind_call kc = mhe__user_call(m, l, x, m->acts.layer[l].attn.ext);
    (void)cross;
    MHE__TIMED(MHE_OP_ATTN, mhe__user_ops(m->layers[l].attn.kind)->forward(&kc, u, out));
}
#ifndef MHE_NO_TRAIN
static void mhe__user_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                 const float *d_out, float *du) {
    mhe_kind_call kc = mhe__user_call(m, l, x, m->acts.layer[l].attn.ext);
    (void)cross;
    MHE__TIMED(MHE_OP_ATTN, mhe__user_ops(m->layers[l].attn.kind)->backward(&kc, u, d_out, du));
}
#endif /* MHE_NO_TRAIN */

/* f of an attention sublayer of the softmax kinds, MHE and collab: W^O
   Attention(u) (self) or W^O Attention(u, mem) (cross: Q from u, K and V from
   the encoder output) into out [rows, C] */
static void mhe__qkv_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    const mhe_config *c = &m->cfg;
    const mhe_layer *y = &m->layers[l];
    const mhe_attn_weights *w = cross ? &y->cross : &y->attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    mhe__geom g = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, ks;
    const float *k, *v;
    if (!cross) {
        MHE__TIMED(MHE_OP_QKV, mhe__attn_project(w, &g, C, rows, u, aa->proj));
        mhe__kv_ptrs(&g, aa->proj + g.q_w, g.proj_w, u, C, &k, &ks, &v);
        MHE__TIMED(MHE_OP_ATTN, mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 0), x->B, x->T, x->T, x->causal, x->len,
                                              aa->proj, g.proj_w, k, ks, v, ks, aa->att, aa->stats, aa->projx,
                                              aa->hmap, mhe__attn_uses_probs(c, w->kind)));
    } else {
        MHE__TIMED(MHE_OP_QKV, mhe__linq(aa->proj, u, w->wq, mhe__opt_data(w->bq), rows, C, g.q_w);
                   mhe__cross_kv(w, &g, C, x->B * x->Ts, x->mem, aa->kv));
        mhe__kv_ptrs(&g, aa->kv, g.k_w + g.v_w, x->mem, C, &k, &ks, &v);
        MHE__TIMED(MHE_OP_ATTN, mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 1), x->B, x->T, x->Ts, 0, x->mem_len,
                                              aa->proj, g.q_w, k, ks, v, ks, aa->att, aa->stats, aa->projx,
                                              aa->hmap, mhe__attn_uses_probs(c, w->kind)));
    }
    MHE__TIMED(MHE_OP_WO, mhe__linq(out, aa->att, w->wo, mhe__opt_data(w->bo), rows, HD, C));
}

#ifndef MHE_NO_TRAIN
/* backward of mhe__qkv_branch_fwd: d_out is the gradient of its output;
   adds the gradient of u into du (and of the encoder output into d_mem) */
static void mhe__qkv_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                const float *d_out, float *du) {
    const mhe_config *c = &m->cfg;
    const mhe_layer *y = &m->layers[l];
    const mhe_attn_weights *w = cross ? &y->cross : &y->attn;
    mhe_attn_acts *aa = cross ? &m->acts.layer[l].cross : &m->acts.layer[l].attn;
    mhe_acts *a = &m->acts;
    mhe__geom g = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, ks;
    const float *k, *v;
    float *dk, *dv;
    MHE__TIMED(MHE_OP_ZERO, memset(a->d_att, 0, (size_t)rows * HD * sizeof(float)));
    MHE__TIMED(MHE_OP_WO, mhe_linear_bwd(a->d_att, w->wo->grad, mhe__opt_grad(w->bo), d_out, aa->att,
                                         w->wo->data, rows, HD, C));
    if (!cross) {
        MHE__TIMED(MHE_OP_ZERO, memset(a->d_proj, 0, (size_t)rows * g.proj_w * sizeof(float)));
        mhe__kv_ptrs(&g, aa->proj + g.q_w, g.proj_w, u, C, &k, &ks, &v);
        dk = g.k_w ? a->d_proj + g.q_w : du;
        dv = g.v_w ? dk + g.k_w : dk;
        MHE__TIMED(MHE_OP_ATTN, mhe__attn_bwd(m, w, MHE__SITE_ATT(l, 0), x->B, x->T, x->T, x->causal, x->len,
                                              aa->proj, g.proj_w, k, ks, v, ks, a->d_proj, dk, dv, a->d_att,
                                              aa->att, aa->stats, aa->projx, aa->hmap,
                                              mhe__attn_uses_probs(c, w->kind));
                   mhe__collab_vbias_bwd(w, &g, a->d_proj + g.q_w + g.k_w, g.proj_w, rows));
        MHE__TIMED(MHE_OP_QKV, mhe_linear_bwd(du, w->wq->grad, mhe__opt_grad(w->bq), a->d_proj, u, w->wq->data,
                                              rows, C, g.proj_w));
    } else {
        int mrows = x->B * x->Ts, kvw = g.k_w + g.v_w;
        float *dq = a->d_proj, *dkv = dq + (size_t)rows * g.q_w;
        MHE__TIMED(MHE_OP_ZERO, memset(dq, 0, ((size_t)rows * g.q_w + (size_t)mrows * kvw) * sizeof(float)));
        mhe__kv_ptrs(&g, aa->kv, kvw, x->mem, C, &k, &ks, &v);
        dk = g.k_w ? dkv : x->d_mem;
        dv = g.v_w ? dk + g.k_w : dk;
        MHE__TIMED(MHE_OP_ATTN, mhe__attn_bwd(m, w, MHE__SITE_ATT(l, 1), x->B, x->T, x->Ts, 0, x->mem_len,
                                              aa->proj, g.q_w, k, ks, v, ks, dq, dk, dv, a->d_att, aa->att,
                                              aa->stats, aa->projx, aa->hmap, mhe__attn_uses_probs(c, w->kind));
                   mhe__collab_vbias_bwd(w, &g, dkv + g.k_w, kvw, mrows));
        MHE__TIMED(MHE_OP_QKV, mhe_linear_bwd(du, w->wq->grad, mhe__opt_grad(w->bq), dq, u, w->wq->data, rows, C,
                                              g.q_w);
                   if (g.k_w) mhe_linear_bwd(x->d_mem, w->wk->grad, mhe__opt_grad(w->bk), dkv, x->mem,
                                             w->wk->data, mrows, C, kvw));
    }
}
#endif /* MHE_NO_TRAIN */

/* chain 1: the sublayer f(u) of block l's self- (cross = 0) or cross-attention, through its kind's row */
static void mhe__attn_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u, float *out) {
    const mhe_layer *y = &m->layers[l];
    mhe__kind(cross ? y->cross.kind : y->attn.kind)->branch_fwd(m, l, cross, x, u, out);
}

#ifndef MHE_NO_TRAIN
static void mhe__attn_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                 const float *d_out, float *du) {
    const mhe_layer *y = &m->layers[l];
    mhe__kind(cross ? y->cross.kind : y->attn.kind)->branch_bwd(m, l, cross, x, u, d_out, du);
}
#endif /* MHE_NO_TRAIN */

/* ---- 5.10 chain 3, decoded tokens through a kind: mhe__attn_branch_decode */

/* Decode scratch for up to `rows` tokens at once (one per decode step, up
   to the cache's prefill_rows for a prompt), carved from the cache block
   like the activation layout: per row the residual stream (sum, nrm), a
   sublayer's branch output, projections, attention output (an mlp layer's
   F), the MLP and the token's static embedding; the rows' norm statistics
   (mean [rows], rstd [rows], the head norm's 2); once the final norm,
   per-head lse, MUL maps, a static embedding's norm, Taylor features, and
   the logits last (the decoders write the cache's logits). */
typedef struct mhe__decode_buf {
    float *sum, *nrm, *stats, *branch, *fin;    /* [rows, C] x 2, [2 rows + 2], [rows, C], [C] */
    float *proj, *att, *fc1, *act, *lse, *hmap; /* [rows, max proj], [rows, max att], [rows, F] x 2, [n], [2 n d_h] */
    float *emb, *emb_norm, *phi, *logits;       /* [rows, C], [C + 2], [taylor features], [V] */
} mhe__decode_buf;

/* floats of the scratch for `rows` tokens at once; with base, also the pointers into it */
static size_t mhe__decode_layout(const mhe_model *m, float *base, mhe__decode_buf *d, int rows) {
    const mhe_config *cfg = &m->cfg;
    size_t C = (size_t)cfg->d_model, F = (size_t)mhe_config_d_ff(cfg), n = (size_t)cfg->n_heads;
    size_t HD = n * (size_t)mhe_config_d_head(cfg), max_proj = 0, max_att = HD, used = 0, R = (size_t)rows;
    int l;
    mhe__decode_buf unused;
    for (l = 0; l < m->n_total_layers; l++) {
        mhe__geom g = mhe__layer_geom(cfg, m->layers[l].attn.kind);
        if ((size_t)g.proj_w > max_proj) max_proj = (size_t)g.proj_w;
        if ((size_t)g.att_w > max_att) max_att = (size_t)g.att_w;
        if (m->layers[l].cross.kind >= 0) { /* its queries (collab's D~ may be wider than self Q, K, V) */
            g = mhe__layer_geom(cfg, m->layers[l].cross.kind);
            if ((size_t)g.q_w > max_proj) max_proj = (size_t)g.q_w;
        }
    }
    if (!d) d = &unused;
#define MHE__D(ptr, count) do { (ptr) = base ? base + used : NULL; used += (count); } while (0)
    MHE__D(d->sum, R * C);
    MHE__D(d->nrm, R * C);
    MHE__D(d->stats, 2 * R + 2);
    MHE__D(d->branch, R * C);
    MHE__D(d->fin, C);
    MHE__D(d->proj, R * max_proj);
    MHE__D(d->att, R * max_att);
    MHE__D(d->fc1, R * F);
    MHE__D(d->act, R * F);
    MHE__D(d->lse, n);
    MHE__D(d->hmap, 2 * HD);
    MHE__D(d->emb, R * C);
    MHE__D(d->emb_norm, C + 2);
    MHE__D(d->phi, (size_t)mhe__taylor_features(mhe_config_d_head(cfg)));
    MHE__D(d->logits, (size_t)cfg->vocab_size);
#undef MHE__D
    return used;
}

/* floats a layer keeps besides K/V rows (thesis sec. 4.15-4.16): taylor S
   [F, d_h] and z [F] per head; nonapprox max, sum and numerator [d_h] per
   head; rndemb-qk / fixedseq-qk the causal maps of max_len positions */
static size_t mhe__decode_state_floats(const mhe_config *c, int kind, int max_len) {
    size_t n = (size_t)c->n_heads, dh = (size_t)mhe_config_d_head(c),
           F = (size_t)mhe__taylor_features((int)dh);
    switch (mhe__kind(kind)->cache) {   /* the kind table's cache column */
    case MHE__CACHE_USER: {   /* a registered kind's decode scratch */
        const mhe_attn_kind_ops *ops = mhe__user_ops(kind);
        return ops->decode_floats ? ops->decode_floats(c, max_len) : 0;
    }
    case MHE__CACHE_TAYLOR: return n * (F * dh + F);
    case MHE__CACHE_SCAN: return n * (dh + 2);
    case MHE__CACHE_MAPS: return n * (size_t)max_len * ((size_t)max_len + 1) / 2;
    default: return 0;
    }
}

/* a new sequence: the recurrent states of layer l start empty (taylor: S = 0,
   z = 0; nonapprox: max -inf, sum and numerator 0) */
static void mhe__decode_state_reset(const mhe_model *m, mhe_kv_cache *c, int l) {
    int kind = m->layers[l].attn.kind, n = m->cfg.n_heads, dh = mhe_config_d_head(&m->cfg), h;
    if (!mhe__kind_recurrent(kind))
        return;
    memset(c->state[l], 0, c->state_floats[l] * sizeof(float));
    if (mhe__kind(kind)->cache == MHE__CACHE_SCAN)
        for (h = 0; h < n; h++)
            c->state[l][(size_t)h * (dh + 2)] = -INFINITY;
}

/* one token through a self-attention sublayer of a ch. 4 kind, into
   d->branch: the recurrent forms (taylor: S += phi(k) v^T, z += phi(k),
   o = S^T phi(q) / phi(q).z; nonapprox: eq. 4.18 with a running max), the
   precomputed maps, or a K/V cache (staticemb-qk, whose K come from the
   static embeddings e) */
static void mhe__decon_decode(mhe_model *m, mhe_kv_cache *c, int l, int pos, const float *u,
                              mhe__decode_buf *d) {
    const mhe_config *cfg = &m->cfg;
    const mhe_layer *y = &m->layers[l];
    const mhe_attn_weights *w = &y->attn;
    int C = cfg->d_model, n = cfg->n_heads, dh = mhe_config_d_head(cfg), HD = n * dh, kind = w->kind, h, i, f;
    float scale = 1.0f / sqrtf((float)dh), *proj = d->proj, *att = d->att, *phi = d->phi;
    if (mhe__kind_fixed(kind)) {
        size_t tri = (size_t)c->max_len * (c->max_len + 1) / 2;
        float *vrow = c->v[l] + (size_t)pos * HD;
        mhe__linq(vrow, u, w->wv, mhe__opt_data(w->bv), 1, C, HD);
        memset(att, 0, (size_t)HD * sizeof(float));
        for (h = 0; h < n; h++) {
            const float *row = c->state[l] + (size_t)h * tri + (size_t)pos * (pos + 1) / 2;
            for (i = 0; i <= pos; i++)
                mhe__axpy(att + (size_t)h * dh, row[i], c->v[l] + (size_t)i * HD + (size_t)h * dh, dh);
        }
    } else if (mhe__kind(kind)->qk == MHE__QK_STATIC) { /* Q, K from N1(e), as in training */
        const float *ne = mhe__static_in(m, y->norm1_w, y->norm1_b, d->emb, 1, d->emb_norm);
        mhe__linq(proj, ne, w->wq, mhe__opt_data(w->bq), 1, C, 2 * HD);
        mhe__linq(proj + 2 * HD, u, w->wv, mhe__opt_data(w->bv), 1, C, HD);
        memcpy(c->k[l] + (size_t)pos * HD, proj + HD, (size_t)HD * sizeof(float));
        memcpy(c->v[l] + (size_t)pos * HD, proj + 2 * HD, (size_t)HD * sizeof(float));
        mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 0), 1, 1, pos + 1, 0, NULL, proj, 2 * HD, c->k[l], HD, c->v[l],
                      HD, att, d->lse, NULL, NULL, 0);
    } else {
        mhe__linq(proj, u, w->wq, mhe__opt_data(w->bq), 1, C, 3 * HD);
        for (h = 0; h < n; h++) {
            const float *q = proj + (size_t)h * dh, *k = q + HD, *v = q + 2 * HD;
            float *o = att + (size_t)h * dh;
            if (mhe__kind(kind)->cache == MHE__CACHE_TAYLOR) {
                int F = mhe__taylor_features(dh);
                float *S = c->state[l] + (size_t)h * ((size_t)F * dh + F), *z = S + (size_t)F * dh,
                      a = sqrtf(scale), den = 0;
                mhe__taylor_phi(k, dh, a, phi);
                for (f = 0; f < F; f++) {
                    mhe__axpy(S + (size_t)f * dh, phi[f], v, dh);
                    z[f] += phi[f];
                }
                mhe__taylor_phi(q, dh, a, phi);
                memset(o, 0, (size_t)dh * sizeof(float));
                for (f = 0; f < F; f++) {
                    mhe__axpy(o, phi[f], S + (size_t)f * dh, dh);
                    den += phi[f] * z[f];
                }
                for (i = 0; i < dh; i++)
                    o[i] /= den;
            } else { /* nonapprox, eq. 4.18: state [max, sum, numerator] */
                float *st = c->state[l] + (size_t)h * (dh + 2), sc = 0, ex;
                for (i = 0; i < dh; i++)
                    sc += mhe__silu(q[i]) * k[i];
                sc *= scale;
                if (sc > st[0]) {
                    float corr = st[0] == -INFINITY ? 0.0f : expf(st[0] - sc);
                    for (i = 0; i < dh + 1; i++)
                        st[1 + i] *= corr;
                    st[0] = sc;
                }
                ex = expf(sc - st[0]);
                st[1] += ex;
                mhe__axpy(st + 2, ex, v, dh);
                for (i = 0; i < dh; i++)
                    o[i] = st[2 + i] / st[1];
            }
        }
    }
    mhe__linq(d->branch, att, w->wo, mhe__opt_data(w->bo), 1, HD, C);
}

/* cross-attention of a ch. 4 kind over the cached source: taylor (one query,
   shared normaliser) or staticemb-qk (Q from the token's static embedding) */
static void mhe__decon_decode_cross(mhe_model *m, mhe_kv_cache *c, int l, const float *u,
                                    mhe__decode_buf *d) {
    const mhe_config *cfg = &m->cfg;
    const mhe_layer *y = &m->layers[l];
    const mhe_attn_weights *w = &y->cross;
    int C = cfg->d_model, n = cfg->n_heads, dh = mhe_config_d_head(cfg), HD = n * dh, h, j,
        W = c->cross_width[l];
    float scale = 1.0f / sqrtf((float)dh), *proj = d->proj, *att = d->att;
    if (mhe__kind(w->kind)->qk == MHE__QK_STATIC) { /* Q from N3(e), as in training */
        const float *ne = mhe__static_in(m, y->norm3_w, y->norm3_b, d->emb, 1, d->emb_norm);
        mhe__linq(proj, ne, w->wq, mhe__opt_data(w->bq), 1, C, HD);
        mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 1), 1, 1, c->src_len, 0, NULL, proj, HD, c->cross[l], W,
                      c->cross[l] + HD, W, att, d->lse, NULL, NULL, 0);
    } else {
        mhe__linq(proj, u, w->wq, mhe__opt_data(w->bq), 1, C, HD);
        for (h = 0; h < n; h++) {
            float *o = att + (size_t)h * dh;
            double den = 0;
            memset(o, 0, (size_t)dh * sizeof(float));
            for (j = 0; j < c->src_len; j++) {
                const float *kj = c->cross[l] + (size_t)j * W + (size_t)h * dh;
                float s = scale * mhe__dot(proj + (size_t)h * dh, kj, dh), wt = 1.0f + s + 0.5f * s * s;
                mhe__axpy(o, wt, kj + HD, dh);
                den += wt;
            }
            for (j = 0; j < dh; j++)
                o[j] = (float)(o[j] / den);
        }
    }
    mhe__linq(d->branch, att, w->wo, mhe__opt_data(w->bo), 1, HD, C);
}

/* rows tokens through sublayer k (0 self, 1 cross) of block l of a softmax
   kind, MHE or collab, into d->branch: projections as in training
   (mhe__attn_project, one GEMM for all rows), their K (or the input, for
   el-att) and V appended to the cache, then per token the same core as
   training (mhe__attn_fwd) over the keys cached up to it, then W^O. */
static void mhe__qkv_branch_decode(mhe_model *m, mhe_kv_cache *c, int l, int k, int pos, int rows, const float *u,
                                   mhe__decode_buf *d) {
    const mhe_config *cfg = &m->cfg;
    const mhe_attn_weights *w = k ? &m->layers[l].cross : &m->layers[l].attn;
    mhe__geom g = mhe__layer_geom(cfg, w->kind);
    int C = cfg->d_model, HD = cfg->n_heads * mhe_config_d_head(cfg), ks, r;
    const float *kp, *vp;
    if (!k) {
        int kw = c->k_width[l], vw = c->v_width[l];
        mhe__attn_project(w, &g, C, rows, u, d->proj);
        for (r = 0; r < rows; r++) {
            const float *pr = d->proj + (size_t)r * g.proj_w;
            memcpy(c->k[l] + (size_t)(pos + r) * kw, g.k_w ? pr + g.q_w : u + (size_t)r * C, (size_t)kw * sizeof(float));
            if (vw)
                memcpy(c->v[l] + (size_t)(pos + r) * vw, pr + g.q_w + g.k_w, (size_t)vw * sizeof(float));
        }
        for (r = 0; r < rows; r++)   /* one query at a time, over the keys up to it: the decode step's core */
            mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 0), 1, 1, pos + r + 1, 0, NULL, d->proj + (size_t)r * g.proj_w,
                          g.proj_w, c->k[l], kw, c->v[l], vw ? vw : kw, d->att + (size_t)r * HD, d->lse, NULL,
                          d->hmap, 0);
    } else {
        mhe__linq(d->proj, u, w->wq, mhe__opt_data(w->bq), rows, C, g.q_w);
        mhe__kv_ptrs(&g, c->cross[l], c->cross_width[l], c->cross[l], c->cross_width[l], &kp, &ks, &vp);
        for (r = 0; r < rows; r++)
            mhe__attn_fwd(m, w, MHE__SITE_ATT(l, 1), 1, 1, c->src_len, 0, NULL, d->proj + (size_t)r * g.q_w,
                          g.q_w, kp, ks, vp, ks, d->att + (size_t)r * HD, d->lse, NULL, d->hmap, 0);
    }
    mhe__linq(d->branch, d->att, w->wo, mhe__opt_data(w->bo), rows, HD, C);
}

/* the kinds that take one token at a time (recurrent states, precomputed
   maps, a registered kind's decode): the scratch as token r sees it, its
   branch and static embedding rows (the rest is per call) */
static mhe__decode_buf mhe__decode_row(const mhe__decode_buf *d, int C, int r) {
    mhe__decode_buf one = *d;
    one.branch += (size_t)r * C;
    one.emb += (size_t)r * C;
    return one;
}

/* the other families' sublayers: the ch. 4 kinds with Q, K, V (self or
   cross) token by token; mlp (no memory of earlier tokens) all rows at
   once; a registered kind (its rows in the K cache, its scratch in the
   state; mhe_kv_cache_init checked it has decode) token by token */
static void mhe__decon_branch_decode(mhe_model *m, mhe_kv_cache *c, int l, int k, int pos, int rows, const float *u,
                                     mhe__decode_buf *d) {
    int C = m->cfg.d_model, r;
    for (r = 0; r < rows; r++) {
        mhe__decode_buf one = mhe__decode_row(d, C, r);
        if (k)
            mhe__decon_decode_cross(m, c, l, u + (size_t)r * C, &one);
        else
            mhe__decon_decode(m, c, l, pos + r, u + (size_t)r * C, &one);
    }
}

static void mhe__gated_branch_decode(mhe_model *m, mhe_kv_cache *c, int l, int k, int pos, int rows, const float *u,
                                     mhe__decode_buf *d) {
    (void)c, (void)k, (void)pos;
    mhe__gated_fwd(&m->layers[l].attn, m->cfg.d_model, mhe_config_mlp_width(&m->cfg), rows, u, d->proj, d->att,
                   d->branch);
}

static void mhe__user_branch_decode(mhe_model *m, mhe_kv_cache *c, int l, int k, int pos, int rows, const float *u,
                                    mhe__decode_buf *d) {
    mhe_kind_call kc;
    mhe__ctx one;
    int C = m->cfg.d_model, r;
    (void)k;
    memset(&one, 0, sizeof one);
    one.B = one.T = 1;
    one.causal = 1;
    kc = mhe__user_call(m, l, &one, c->state[l]);
    kc.scratch = NULL;
    for (r = 0; r < rows; r++)
        mhe__user_ops(m->layers[l].attn.kind)->decode(&kc, c->k[l], pos + r, u + (size_t)r * C,
                                                        d->branch + (size_t)r * C);
}

/* chain 3: rows tokens through attention sublayer k (0 self, 1 cross) of block l, through its kind's row */
static void mhe__attn_branch_decode(mhe_model *m, mhe_kv_cache *c, int l, int k, int pos, int rows, const float *u,
                                    mhe__decode_buf *d) {
    const mhe_layer *y = &m->layers[l];
    mhe__kind(k ? y->cross.kind : y->attn.kind)->decode(m, c, l, k, pos, rows, u, d);
}

/* ---- 5.11 the kind table: one row per kind --------------------------------- */

/* Each row: the facts (name, source, family, what decoding keeps, causal,
   encoder-decoder, why not cross-attention, a fast path, tensors, own
   buffer, q8 tensors, where Q and K come from), then its functions: geometry,
   check, count, layout, core forward and backward (chain 2), sublayer forward
   and backward (chain 1), decoding (chain 3). A new kind in an existing family
   is a new enum value, a row, and its geometry function (a check if it refuses
   configs). A row is also what mhe_attn_kind_register builds for a program's kind. */
#ifdef MHE_NO_TRAIN
#define MHE__TRAIN(f) NULL
#else
#define MHE__TRAIN(f) f
#endif
static const mhe__kind_info mhe__kinds[MHE_ATTN_KIND_COUNT] = {
    { "mha", "Vaswani et al. 2017, eq. 1; MHE paper eq. 1-2", MHE__FAM_SOFTMAX, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq wk wv [n d_h, C] [biases] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "sha", "MHE paper Table 1: one head, repeated into W^O", MHE__FAM_SOFTMAX, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq wk wv [d_h, C] [biases] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_sha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "mqa", "Shazeer 2019", MHE__FAM_SOFTMAX, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq [n d_h, C] wk wv [d_h, C] [biases] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mqa, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "gqa", "Ainslie et al. 2023", MHE__FAM_SOFTMAX, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq [n d_h, C] wk wv [kv_groups d_h, C] [biases] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_gqa, mhe__check_gqa, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "skv", "Kitaev et al. 2020: one projection per head as both K and V", MHE__FAM_SOFTMAX, MHE__CACHE_KV,
      1, 1, NULL, 1,
      "wq wkv [n d_h, C] [biases] wo", MHE__EXT_NONE, "wq wkv wo",
      MHE__QK_INPUT, mhe__geom_skv, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "el-att", "Yan et al. 2021: K = V = the input", MHE__FAM_SOFTMAX, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq [n d_h, C] [bias] wo", MHE__EXT_NONE, "wq wo",
      MHE__QK_INPUT, mhe__geom_el_att, mhe__check_el_att, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "mhe-add", "MHE paper eq. 5-6, psi(A, e) = A + e", MHE__FAM_MHE, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq wk wv [d_h, C] [biases] eq ek ev [n, d_h] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mhe_add, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__mhe_core_fwd, MHE__TRAIN(mhe__mhe_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "mhe-mul", "MHE paper eq. 5-6, psi(A, e) = A * (1 + e)", MHE__FAM_MHE, MHE__CACHE_KV, 1, 1, NULL, 1,
      "wq wk wv [d_h, C] [biases] eq ek ev [n, d_h] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mhe_mul, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__mhe_core_fwd, MHE__TRAIN(mhe__mhe_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
    { "mlp", "thesis eq. 4.4-4.5: down(SiLU(gate x) * up x)", MHE__FAM_GATED, MHE__CACHE_NONE, 1, 1,
      "it mixes no tokens, so it would ignore the source", 0, "gate up [F, C] [biases] down [C, F]", MHE__EXT_NONE,
      "gate up down",
      MHE__QK_INPUT, mhe__geom_mlp, NULL, mhe__count_gated, mhe__layout_gated,
      NULL, NULL, mhe__gated_branch_fwd, MHE__TRAIN(mhe__gated_branch_bwd), mhe__gated_branch_decode },
    { "taylor", "thesis eq. 4.6; Arora et al. 2024: exp(s) ~ 1 + s + s^2/2", MHE__FAM_DECON_QKV,
      MHE__CACHE_TAYLOR, 1, 1,
      NULL, 1, "wq wk wv [n d_h, C] [biases] wo", MHE__EXT_TAYLOR, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__taylor_core_fwd, MHE__TRAIN(mhe__taylor_core_bwd), mhe__decon_branch_fwd, MHE__TRAIN(mhe__decon_branch_bwd), mhe__decon_branch_decode },
    { "nonapprox", "thesis eq. 4.7-4.8: softmax over time of SiLU(Q) * K", MHE__FAM_DECON_QKV,
      MHE__CACHE_SCAN, 1, 1,
      "it scores each position by its own query and key, which a decoder and a source do not share", 1,
      "wq wk wv [n d_h, C] [biases] wo", MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_INPUT, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__nonapprox_core_fwd, MHE__TRAIN(mhe__nonapprox_core_bwd), mhe__decon_branch_fwd, MHE__TRAIN(mhe__decon_branch_bwd), mhe__decon_branch_decode },
    { "rndemb-qk", "thesis eq. 4.9-4.10: Q, K from fixed random inputs", MHE__FAM_DECON_QKV,
      MHE__CACHE_MAPS, 1, 0,
      "its fixed stream runs through decoder or encoder models only", 0, "wq wk wv [n d_h, C] [biases] wo",
      MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_RANDOM, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__decon_branch_fwd, MHE__TRAIN(mhe__decon_branch_bwd), mhe__decon_branch_decode },
    { "fixedseq-qk", "thesis eq. 4.11-4.12: Q, K from a fixed token sequence", MHE__FAM_DECON_QKV,
      MHE__CACHE_MAPS, 1, 0,
      "its fixed stream runs through decoder or encoder models only", 0, "wq wk wv [n d_h, C] [biases] wo",
      MHE__EXT_NONE, "wq wk wv wo",
      MHE__QK_SEQUENCE, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__decon_branch_fwd, MHE__TRAIN(mhe__decon_branch_bwd), mhe__decon_branch_decode },
    { "staticemb-qk", "thesis eq. 4.13: Q, K from the static embeddings", MHE__FAM_DECON_QKV, MHE__CACHE_KV,
      1, 1, NULL, 1,
      "wq wk wv [n d_h, C] [biases] wo", MHE__EXT_STATIC, "wq wk wv wo",
      MHE__QK_STATIC, mhe__geom_mha, NULL, mhe__count_qkv, mhe__layout_qkv,
      mhe__softmax_core_fwd, MHE__TRAIN(mhe__softmax_core_bwd), mhe__decon_branch_fwd, MHE__TRAIN(mhe__decon_branch_bwd), mhe__decon_branch_decode },
    { "fnet", "Lee-Thorp et al. 2022: Re(F_L X F_C)", MHE__FAM_MIXING, MHE__CACHE_NONE, 0, 1,
      "it mixes one sequence with itself", 0, "(none)", MHE__EXT_DFT, "(none)",
      MHE__QK_INPUT, mhe__geom_mixing, NULL, NULL, NULL,
      NULL, NULL, mhe__fnet_branch_fwd, MHE__TRAIN(mhe__fnet_branch_bwd), NULL },
    { "linear", "Lee-Thorp et al. 2022: W_seq X W_hidden^T", MHE__FAM_MIXING, MHE__CACHE_NONE, 0, 1,
      "it mixes one sequence with itself", 0, "hidden [C, C] seq [max_seq_len, max_seq_len]", MHE__EXT_MIX,
      "hidden",
      MHE__QK_INPUT, mhe__geom_mixing, NULL, mhe__count_linear, mhe__layout_linear,
      NULL, NULL, mhe__linear_branch_fwd, MHE__TRAIN(mhe__linear_branch_bwd), NULL },
    { "collab", "Cordonnier et al. 2020, eq. 13 (reparametrised from mha by eq. 12)", MHE__FAM_COLLAB,
      MHE__CACHE_KV, 1, 1,
      NULL, 1, "wq wk [D~, C] content_bias [n, C] wv [n d_h, C] [wv.bias] mixing [n, D~] wo", MHE__EXT_NONE,
      "wq wk content_bias wv wo",
      MHE__QK_INPUT, mhe__geom_collab, mhe__check_collab, mhe__count_collab, mhe__layout_collab,
      mhe__collab_core_fwd, MHE__TRAIN(mhe__collab_core_bwd), mhe__qkv_branch_fwd, MHE__TRAIN(mhe__qkv_branch_bwd), mhe__qkv_branch_decode },
};

/* the row of a kind registered from outside: its ops run through these */
static const mhe__kind_info mhe__user_row = {
    NULL, NULL, MHE__FAM_USER, MHE__CACHE_USER, 0, 1, "it is a registered kind, which runs as self-attention only", 0,
    "(its own, declared by its tensors function)", MHE__EXT_USER, "(none)",
    MHE__QK_INPUT, mhe__geom_user, mhe__check_user, mhe__count_user, mhe__layout_user,
    NULL, NULL, mhe__user_branch_fwd, MHE__TRAIN(mhe__user_branch_bwd), mhe__user_branch_decode };
#undef MHE__TRAIN

static const mhe__kind_info *mhe__kind(int kind) {
    MHE_ASSERT(mhe__kind_valid(kind)); /* configs are validated first */
    if (kind >= MHE_ATTN_KIND_COUNT) return &mhe__user_kinds[kind - MHE_ATTN_KIND_COUNT].info;
    return mhe__kinds + (size_t)kind;   /* size_t: mingw gcc 12 warns (-Warray-bounds) on an int index */
}

MHEDEF int mhe_attn_kind_register(const mhe_attn_kind_ops *ops, char *err) {
    mhe__user_kind *u;
    const char *p;
    if (!ops || !ops->name || !ops->forward || !ops->tensors) {
        mhe__fail(err, MHE_ERR_ARG, "mhe_attn_kind_register: a kind needs a name, tensors and forward");
        return -1;
    }
    for (p = ops->name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_'))
            break;
    if (*p || p == ops->name || p - ops->name > 24) {
        mhe__fail(err, MHE_ERR_ARG, "mhe_attn_kind_register: kind name '%s' must be 1 to 24 letters, digits, '-' or '_'",
                  ops->name);
        return -1;
    }
    if (mhe_attn_kind_from_name(ops->name) >= 0) {
        mhe__fail(err, MHE_ERR_ARG, "mhe_attn_kind_register: kind '%s' exists already", ops->name);
        return -1;
    }
    if ((ops->decode != NULL) != (ops->cache_floats != NULL)) {
        mhe__fail(err, MHE_ERR_ARG, "mhe_attn_kind_register: kind '%s': decode and cache_floats come together",
                  ops->name);
        return -1;
    }
    if (mhe__n_user_kinds == MHE_MAX_REGISTERED_KINDS) {
        mhe__fail(err, MHE_ERR_ARG, "mhe_attn_kind_register: %d kinds registered already (MHE_MAX_REGISTERED_KINDS)",
                  MHE_MAX_REGISTERED_KINDS);
        return -1;
    }
    u = &mhe__user_kinds[mhe__n_user_kinds];
    memset(u, 0, sizeof *u);
    u->ops = *ops;
    u->info = mhe__user_row;
    u->info.name = ops->name;
    u->info.source = ops->source ? ops->source : "registered by the program";
    u->info.causal = ops->causal != 0;
    return MHE_ATTN_KIND_COUNT + mhe__n_user_kinds++;
}


/* ---- 6. embeddings: hashing ------------------------------------------------ */

/* ---- words ---- */

/* byte classes of the word rule (see the API): 0 space, 1 word, 2 punctuation */
static int mhe__word_class(unsigned char c) {
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return 1;
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 0;
    return 2;
}

static unsigned char mhe__lower(unsigned char c) { return (unsigned char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c); }

MHEDEF size_t mhe_word_next(const char *text, size_t len, size_t *pos, size_t *word_start) {
    const unsigned char *s = (const unsigned char *)text;
    size_t p, b;
    int cls;
    if (!pos) return 0;
    p = *pos;
    if (!text || p >= len) {
        if (word_start) *word_start = p;
        return 0;
    }
    while (p < len && mhe__word_class(s[p]) == 0) p++;
    b = p;
    if (p < len) {
        cls = mhe__word_class(s[p]);
        while (p < len && mhe__word_class(s[p]) == cls) p++;
    }
    *pos = p;
    if (word_start) *word_start = b;
    return p - b;
}

MHEDEF size_t mhe_word_count(const char *text, size_t len) {
    size_t pos = 0, n = 0;
    while (mhe_word_next(text, len, &pos, NULL)) n++;
    return n;
}

MHEDEF void mhe_word_lower(char *dst, const char *src, size_t n) {
    size_t i;
    if (!dst || !src) return;
    for (i = 0; i < n; i++) dst[i] = (char)mhe__lower((unsigned char)src[i]);
}

/* ---- MD5 (RFC 1321) ---- */

/* RFC 1321 sec. 3.4: T[i] = floor(2^32 |sin(i + 1)|) and the per-step shifts */
static const uint32_t mhe__md5_t[64] = {
    0xd76aa478u, 0xe8c7b756u, 0x242070dbu, 0xc1bdceeeu, 0xf57c0fafu, 0x4787c62au, 0xa8304613u, 0xfd469501u,
    0x698098d8u, 0x8b44f7afu, 0xffff5bb1u, 0x895cd7beu, 0x6b901122u, 0xfd987193u, 0xa679438eu, 0x49b40821u,
    0xf61e2562u, 0xc040b340u, 0x265e5a51u, 0xe9b6c7aau, 0xd62f105du, 0x02441453u, 0xd8a1e681u, 0xe7d3fbc8u,
    0x21e1cde6u, 0xc33707d6u, 0xf4d50d87u, 0x455a14edu, 0xa9e3e905u, 0xfcefa3f8u, 0x676f02d9u, 0x8d2a4c8au,
    0xfffa3942u, 0x8771f681u, 0x6d9d6122u, 0xfde5380cu, 0xa4beea44u, 0x4bdecfa9u, 0xf6bb4b60u, 0xbebfbc70u,
    0x289b7ec6u, 0xeaa127fau, 0xd4ef3085u, 0x04881d05u, 0xd9d4d039u, 0xe6db99e5u, 0x1fa27cf8u, 0xc4ac5665u,
    0xf4292244u, 0x432aff97u, 0xab9423a7u, 0xfc93a039u, 0x655b59c3u, 0x8f0ccc92u, 0xffeff47du, 0x85845dd1u,
    0x6fa87e4fu, 0xfe2ce6e0u, 0xa3014314u, 0x4e0811a1u, 0xf7537e82u, 0xbd3af235u, 0x2ad7d2bbu, 0xeb86d391u
};
static const unsigned char mhe__md5_s[16] = { 7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21 };

/* one 64-byte block (RFC 1321 sec. 3.4); words are read little-endian byte
   by byte, so the host's byte order does not matter */
static void mhe__md5_block(uint32_t h[4], const unsigned char *p) {
    uint32_t x[16], a = h[0], b = h[1], c = h[2], d = h[3];
    int i;
    for (i = 0; i < 16; i++)
        x[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
    for (i = 0; i < 64; i++) {
        uint32_t f, r;
        int g, s = mhe__md5_s[(i >> 4) * 4 + (i & 3)];
        if (i < 16) { f = (b & c) | (~b & d); g = i; }                 /* F, round 1 */
        else if (i < 32) { f = (b & d) | (c & ~d); g = (5 * i + 1) & 15; } /* G, round 2 */
        else if (i < 48) { f = b ^ c ^ d; g = (3 * i + 5) & 15; }       /* H, round 3 */
        else { f = c ^ (b | ~d); g = (7 * i) & 15; }                    /* I, round 4 */
        r = a + f + mhe__md5_t[i] + x[g];
        a = d; d = c; c = b;
        b = b + ((r << s) | (r >> (32 - s)));
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
}

MHEDEF void mhe_md5_init(mhe_md5_ctx *c) {
    c->h[0] = 0x67452301u; c->h[1] = 0xefcdab89u; c->h[2] = 0x98badcfeu; c->h[3] = 0x10325476u;
    c->n = 0;
}

MHEDEF void mhe_md5_update(mhe_md5_ctx *c, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t have = (size_t)(c->n & 63);
    if (!p || !n) return;
    c->n += (uint64_t)n;
    if (have) {
        size_t take = 64 - have < n ? 64 - have : n;
        memcpy(c->buf + have, p, take);
        p += take; n -= take;
        if (have + take < 64) return;
        mhe__md5_block(c->h, c->buf);
    }
    for (; n >= 64; p += 64, n -= 64) mhe__md5_block(c->h, p);
    if (n) memcpy(c->buf, p, n);
}

/* RFC 1321 sec. 3.1-3.2 and 3.5: pad with 0x80 and zeros to 56 mod 64, append
   the bit length (mod 2^64) little-endian, output A B C D little-endian */
MHEDEF void mhe_md5_final(mhe_md5_ctx *c, unsigned char digest[16]) {
    unsigned char pad[72];
    uint64_t bits = c->n << 3;
    size_t have = (size_t)(c->n & 63), padn = (have < 56 ? 56 : 120) - have;
    int i;
    memset(pad, 0, sizeof pad);
    pad[0] = 0x80;
    for (i = 0; i < 8; i++) pad[padn + (size_t)i] = (unsigned char)(bits >> (8 * i));
    mhe_md5_update(c, pad, padn + 8);
    for (i = 0; i < 16; i++) digest[i] = (unsigned char)(c->h[i >> 2] >> (8 * (i & 3)));
}

MHEDEF void mhe_md5(const void *data, size_t n, unsigned char digest[16]) {
    mhe_md5_ctx c;
    mhe_md5_init(&c);
    mhe_md5_update(&c, data, n);
    mhe_md5_final(&c, digest);
}

/* HMAC (RFC 2104 sec. 2): H((K ^ opad) || H((K ^ ipad) || text)), B = 64 */
MHEDEF void mhe_hmac_md5_init(mhe_hmac_md5_ctx *c, const void *key, size_t key_len) {
    unsigned char k0[64], ik[64];
    int i;
    memset(k0, 0, sizeof k0);
    if (key && key_len > 64) mhe_md5(key, key_len, k0);
    else if (key && key_len) memcpy(k0, key, key_len);
    for (i = 0; i < 64; i++) { ik[i] = (unsigned char)(k0[i] ^ 0x36); c->okey[i] = (unsigned char)(k0[i] ^ 0x5c); }
    mhe_md5_init(&c->inner);
    mhe_md5_update(&c->inner, ik, 64);
}

MHEDEF void mhe_hmac_md5_update(mhe_hmac_md5_ctx *c, const void *data, size_t n) { mhe_md5_update(&c->inner, data, n); }

MHEDEF void mhe_hmac_md5_final(mhe_hmac_md5_ctx *c, unsigned char digest[16]) {
    unsigned char ih[16];
    mhe_md5_ctx o;
    mhe_md5_final(&c->inner, ih);
    mhe_md5_init(&o);
    mhe_md5_update(&o, c->okey, 64);
    mhe_md5_update(&o, ih, 16);
    mhe_md5_final(&o, digest);
}

MHEDEF void mhe_hmac_md5(const void *key, size_t key_len, const void *data, size_t n, unsigned char digest[16]) {
    mhe_hmac_md5_ctx c;
    mhe_hmac_md5_init(&c, key, key_len);
    mhe_hmac_md5_update(&c, data, n);
    mhe_hmac_md5_final(&c, digest);
}

MHEDEF mhe_status mhe_word_hash_md5(const char *word, size_t len, const void *key, size_t key_len,
                                    unsigned char digest[16]) {
    mhe_hmac_md5_ctx c;
    unsigned char tmp[256];
    size_t i, j, k;
    if (!digest || (!word && len) || (!key && key_len)) return MHE_ERR_ARG;
    if (key) mhe_hmac_md5_init(&c, key, key_len);
    else mhe_md5_init(&c.inner);
    for (i = 0; i < len; i += k) {   /* lower-cased on the fly, any length */
        k = len - i < sizeof tmp ? len - i : sizeof tmp;
        for (j = 0; j < k; j++) tmp[j] = mhe__lower((unsigned char)word[i + j]);
        mhe_md5_update(&c.inner, tmp, k);
    }
    if (key) mhe_hmac_md5_final(&c, digest);
    else mhe_md5_final(&c.inner, digest);
    return MHE_OK;
}

/* Horner's rule over bytes (or over bits when N > 2^56, with a doubling that
   cannot overflow): exact, never forms the 128-bit integer */
MHEDEF mhe_status mhe_digest_mod(const unsigned char *bytes, size_t n, uint64_t N, uint64_t *out) {
    uint64_t r = 0;
    size_t i;
    int b;
    if (out) *out = 0;
    if (!out || (!bytes && n) || N == 0) return MHE_ERR_ARG;
    if (N <= ((uint64_t)1 << 56))
        for (i = 0; i < n; i++) r = ((r << 8) | bytes[i]) % N;
    else
        for (i = 0; i < n; i++)
            for (b = 7; b >= 0; b--) {
                r = r >= N - r ? r - (N - r) : r + r;               /* 2r mod N */
                if ((bytes[i] >> b) & 1) r = r == N - 1 ? 0 : r + 1; /* + bit mod N */
            }
    *out = r;
    return MHE_OK;
}

MHEDEF mhe_status mhe_word_id_md5(const char *word, size_t len, const void *key, size_t key_len, uint64_t N,
                                  uint64_t *id) {
    unsigned char dg[16];
    mhe_status s;
    if (id) *id = 0;
    if (!id || N == 0) return MHE_ERR_ARG;
    s = mhe_word_hash_md5(word, len, key, key_len, dg);
    return s == MHE_OK ? mhe_digest_mod(dg, 16, N, id) : s;
}

MHEDEF int mhe_bits_get(const unsigned char *bits, int t) { return (bits[t >> 3] >> (7 - (t & 7))) & 1; }

MHEDEF void mhe_bits_unpack(float *out, const unsigned char *bits, int T) {
    int t;
    for (t = 0; t < T; t++) out[t] = (float)mhe_bits_get(bits, t);
}

/* ---- character n-grams ---- */

MHEDEF uint32_t mhe_ngram_code(const char *s, int n) {
    uint32_t c = 0;
    int i;
    for (i = 0; i < n && i < 4; i++) c = (c << 8) | (unsigned char)s[i];
    return c;
}

/* the n-grams of the lower-cased word (with a ' ' each side when pad), in
   order of start position, then n */
typedef struct mhe__ngram_it {
    const unsigned char *w;
    size_t len, vlen, v;
    int pad, n_min, n_max, n;
    uint32_t code;
} mhe__ngram_it;

static void mhe__ngram_start(mhe__ngram_it *it, const char *word, size_t len, int n_min, int n_max, int pad) {
    it->w = (const unsigned char *)word;
    it->len = len;
    it->pad = pad ? 1 : 0;
    it->vlen = len + 2 * (size_t)it->pad;
    it->v = 0;
    it->n = 0;
    it->code = 0;
    it->n_min = n_min;
    it->n_max = n_max;
}

static unsigned char mhe__ngram_byte(const mhe__ngram_it *it, size_t v) {
    if (it->pad && (v == 0 || v == it->vlen - 1)) return ' ';
    return mhe__lower(it->w[v - (size_t)it->pad]);
}

static int mhe__ngram_next(mhe__ngram_it *it, int *n, uint32_t *code) {
    for (;;) {
        if (it->v >= it->vlen) return 0;
        if (it->n < it->n_max && it->v + (size_t)it->n < it->vlen) {
            it->code = (it->code << 8) | mhe__ngram_byte(it, it->v + (size_t)it->n);
            it->n++;
            if (it->n >= it->n_min) { *n = it->n; *code = it->code; return 1; }
        } else {
            it->v++;
            it->n = 0;
            it->code = 0;
        }
    }
}

/* ---- LSH ---- */

MHEDEF mhe_lsh_config mhe_lsh_config_default(void) {
    mhe_lsh_config c;
    memset(&c, 0, sizeof c);
    c.feature_mode = MHE_LSH_HASHED;
    c.n_features = 50000;
    c.n_min = 1;
    c.n_max = 4;
    c.n_bits = 128;
    c.n_buckets = 50000;
    c.seed = 42;
    return c;
}

/* the table is checked as untrusted input: lengths, counts, order, code ranges */
static mhe_status mhe__lsh_check_table(const uint32_t *t, size_t len, int n_min, int n_max, char *err) {
    uint64_t sum = 0;
    size_t off = 4, i;
    int n;
    if (!t || len < 5)
        return mhe__fail(err, MHE_ERR_DATA, "lsh: the n-gram table needs 4 counts and at least one code (got %llu entries)",
                         (unsigned long long)len);
    for (n = 1; n <= 4; n++) {
        sum += t[n - 1];
        if (t[n - 1] && (n < n_min || n > n_max))
            return mhe__fail(err, MHE_ERR_DATA, "lsh: the n-gram table has %lu %d-grams but the orders are %d..%d",
                             (unsigned long)t[n - 1], n, n_min, n_max);
    }
    if (sum != (uint64_t)(len - 4))
        return mhe__fail(err, MHE_ERR_DATA, "lsh: the n-gram table's counts add up to %llu, but %llu codes follow",
                         (unsigned long long)sum, (unsigned long long)(len - 4));
    if (len - 4 > MHE_LSH_MAX_DIM)
        return mhe__fail(err, MHE_ERR_DATA, "lsh: the n-gram table has more than %lu codes", (unsigned long)MHE_LSH_MAX_DIM);
    for (n = 1; n <= 4; n++) {
        uint32_t lim = n < 4 ? ((uint32_t)1 << (8 * n)) - 1 : 0xffffffffu;
        for (i = 0; i < t[n - 1]; i++, off++) {
            if (t[off] > lim)
                return mhe__fail(err, MHE_ERR_DATA, "lsh: n-gram table entry %llu (0x%lx) is not a %d-byte code",
                                 (unsigned long long)off, (unsigned long)t[off], n);
            if (i && t[off] <= t[off - 1])
                return mhe__fail(err, MHE_ERR_DATA, "lsh: n-gram table entry %llu: the %d-gram codes are not strictly ascending",
                                 (unsigned long long)off, n);
        }
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_lsh_init(mhe_lsh *l, const mhe_lsh_config *cfg, const uint32_t *table, size_t table_len,
                               void *alloc_ctx) {
    mhe_lsh_config c;
    mhe_rng r;
    mhe_status s;
    size_t bytes;
    uint32_t i;
    int ok = 1;
    if (!l) return MHE_ERR_ARG;
    memset(l, 0, sizeof *l);
    l->alloc_ctx = alloc_ctx;
    if (!cfg) return mhe__fail(l->err, MHE_ERR_ARG, "lsh: config is NULL");
    c = *cfg;
    if (c.feature_mode != MHE_LSH_HASHED && c.feature_mode != MHE_LSH_TABLE)
        return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: feature_mode %d is neither MHE_LSH_HASHED nor MHE_LSH_TABLE", c.feature_mode);
    if (c.n_min < 1 || c.n_max > 4 || c.n_min > c.n_max)
        return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: n-gram orders %d..%d must satisfy 1 <= n_min <= n_max <= 4", c.n_min, c.n_max);
    if (c.pad != 0 && c.pad != 1) return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: pad must be 0 or 1 (got %d)", c.pad);
    if (c.n_bits < 1 || c.n_bits > MHE_HASH_MAX_BITS)
        return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: n_bits (T) = %d is outside 1..%d", c.n_bits, MHE_HASH_MAX_BITS);
    if (c.n_buckets < 2 || c.n_buckets % 2 || c.n_buckets > MHE_LSH_MAX_DIM)
        return mhe__fail(l->err, MHE_ERR_CONFIG,
                         "lsh: n_buckets (N) = %lu must be even, >= 2 and <= %lu (argmax over N/2 projections and their negations)",
                         (unsigned long)c.n_buckets, (unsigned long)MHE_LSH_MAX_DIM);
    if (c.feature_mode == MHE_LSH_HASHED) {
        if (c.n_features < 1 || c.n_features > MHE_LSH_MAX_DIM)
            return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: n_features (F) = %lu is outside 1..%lu", (unsigned long)c.n_features,
                             (unsigned long)MHE_LSH_MAX_DIM);
        l->d_x = c.n_features;
    } else {
        s = mhe__lsh_check_table(table, table_len, c.n_min, c.n_max, l->err);
        if (s != MHE_OK) return s;
        l->d_x = (uint32_t)(table_len - 4);
        c.n_features = l->d_x;
    }
    if (c.P == 0) c.P = l->d_x;
    if (c.P > MHE_LSH_MAX_DIM)
        return mhe__fail(l->err, MHE_ERR_CONFIG, "lsh: P = %lu is larger than %lu", (unsigned long)c.P, (unsigned long)MHE_LSH_MAX_DIM);
    if (c.n_buckets / 2 > c.P || (uint32_t)c.n_bits > c.P)
        return mhe__fail(l->err, MHE_ERR_CONFIG,
                         "lsh: eta of length P = %lu gives only P distinct hyperplanes, fewer than N/2 = %lu or T = %d",
                         (unsigned long)c.P, (unsigned long)(c.n_buckets / 2), c.n_bits);
    bytes = mhe__mul_size((size_t)c.P, sizeof(float), &ok);
    if (c.feature_mode == MHE_LSH_TABLE) (void)mhe__mul_size(table_len, sizeof(uint32_t), &ok);
    /* the per-word work buffer, max(N/2, T) doubles, must be addressable too */
    (void)mhe__mul_size(c.n_buckets / 2 > (uint32_t)c.n_bits ? c.n_buckets / 2 : (size_t)c.n_bits, sizeof(double), &ok);
    if (!ok) return mhe__fail(l->err, MHE_ERR_OVERFLOW, "lsh: eta, table or work size overflows size_t");
    l->eta = (float *)MHE_MALLOC(alloc_ctx, bytes);
    if (!l->eta) return mhe__fail(l->err, MHE_ERR_NOMEM, "lsh: no memory for eta (%llu bytes)", (unsigned long long)bytes);
    if (c.feature_mode == MHE_LSH_TABLE) {
        l->table = (uint32_t *)MHE_MALLOC(alloc_ctx, table_len * sizeof(uint32_t));
        if (!l->table) {
            MHE_FREE(alloc_ctx, l->eta);
            l->eta = NULL;
            return mhe__fail(l->err, MHE_ERR_NOMEM, "lsh: no memory for the n-gram table");
        }
        memcpy(l->table, table, table_len * sizeof(uint32_t));
        l->table_len = table_len;
    }
    mhe_rng_seed(&r, c.seed);
    for (i = 0; i < c.P; i++) l->eta[i] = mhe_rng_normal(&r);
    l->cfg = c;
    return MHE_OK;
}

MHEDEF void mhe_lsh_free(mhe_lsh *l) {
    if (!l) return;
    if (l->eta) MHE_FREE(l->alloc_ctx, l->eta);
    if (l->table) MHE_FREE(l->alloc_ctx, l->table);
    l->eta = NULL;
    l->table = NULL;
    l->table_len = 0;
}

MHEDEF size_t mhe_lsh_work_len(const mhe_lsh *l) {
    size_t h, t;
    if (!l) return 0;
    h = l->cfg.n_buckets / 2;
    t = (size_t)l->cfg.n_bits;
    return h > t ? h : t;
}

/* feature index of an n-gram, or -1 when table mode drops it */
static int64_t mhe__lsh_feature(const mhe_lsh *l, int n, uint32_t code) {
    if (l->cfg.feature_mode == MHE_LSH_HASHED) {
        uint32_t h = 2166136261u;   /* FNV-1a, 32 bit (Fowler, Noll, Vo) */
        int i;
        for (i = n - 1; i >= 0; i--) { h ^= (code >> (8 * i)) & 0xffu; h *= 16777619u; }
        return (int64_t)(h % l->cfg.n_features);
    } else {
        size_t lo = 4, hi, mid;
        int k;
        for (k = 1; k < n; k++) lo += l->table[k - 1];
        hi = lo + l->table[n - 1];
        while (lo < hi) {   /* binary search in the codes of order n */
            mid = lo + (hi - lo) / 2;
            if (l->table[mid] == code) return (int64_t)(mid - 4);
            if (l->table[mid] < code) lo = mid + 1; else hi = mid;
        }
        return -1;
    }
}

MHEDEF size_t mhe_lsh_features(const mhe_lsh *l, const char *word, size_t len, uint32_t *feat, uint32_t *count,
                               size_t cap) {
    mhe__ngram_it it;
    size_t m = 0, i;
    int n;
    uint32_t code;
    if (!l || !l->eta || (!word && len)) return 0;
    if (!feat || !count) cap = 0;
    mhe__ngram_start(&it, word, len, l->cfg.n_min, l->cfg.n_max, l->cfg.pad);
    while (mhe__ngram_next(&it, &n, &code)) {
        int64_t f = mhe__lsh_feature(l, n, code);
        if (f < 0) continue;
        for (i = 0; i < m && i < cap; i++)
            if (feat[i] == (uint32_t)f) break;
        if (i < m && i < cap) { count[i]++; continue; }
        if (m < cap) { feat[m] = (uint32_t)f; count[m] = 1; }
        m++;   /* past cap a feature may be counted twice: > cap is all that is promised */
    }
    return m;
}

/* p[i] += c * eta[(f + i) mod P] for i < M (M <= P): at most two runs */
static void mhe__lsh_axpy(double *p, uint32_t M, const float *eta, uint32_t P, uint32_t f, double c) {
    uint32_t s = f % P, i = 0, k, run;
    while (i < M) {
        run = P - s < M - i ? P - s : M - i;
        for (k = 0; k < run; k++) p[i + k] += c * (double)eta[s + k];
        i += run;
        s = 0;
    }
}

/* Projections p[0..M) = x . r^i. Repeated n-grams are merged in a small
   open-addressing window first (flushed when 256 distinct features or 2^24
   occurrences are in it), so a word of any length costs one pass. */
#define MHE__LSH_WIN 512
static void mhe__lsh_project(const mhe_lsh *l, const char *word, size_t len, double *p, uint32_t M) {
    uint32_t key[MHE__LSH_WIN], cnt[MHE__LSH_WIN], distinct = 0, total = 0, code;
    mhe__ngram_it it;
    int n, more = 1, j;
    memset(p, 0, (size_t)M * sizeof(double));
    memset(key, 0, sizeof key);
    mhe__ngram_start(&it, word, len, l->cfg.n_min, l->cfg.n_max, l->cfg.pad);
    while (more) {
        more = mhe__ngram_next(&it, &n, &code);
        if (more) {
            int64_t f = mhe__lsh_feature(l, n, code);
            uint32_t h;
            if (f < 0) continue;
            h = ((uint32_t)f * 2654435761u) >> (32 - 9);   /* Knuth's multiplicative hash into 512 slots */
            while (key[h] && key[h] != (uint32_t)f + 1) h = (h + 1) & (MHE__LSH_WIN - 1);
            if (!key[h]) { key[h] = (uint32_t)f + 1; cnt[h] = 0; distinct++; }
            cnt[h]++;
            total++;
        }
        if (!more || distinct >= MHE__LSH_WIN / 2 || total >= (1u << 24)) {
            for (j = 0; j < MHE__LSH_WIN; j++)
                if (key[j]) mhe__lsh_axpy(p, M, l->eta, l->cfg.P, key[j] - 1, (double)cnt[j]);
            memset(key, 0, sizeof key);
            distinct = total = 0;
        }
    }
}

MHEDEF mhe_status mhe_lsh_bucket(const mhe_lsh *l, const char *word, size_t len, double *work, uint32_t *bucket) {
    uint32_t M, i, best = 0;
    double bv;
    double *p = work;
    if (bucket) *bucket = 0;
    if (!l || !l->eta || !bucket || (!word && len)) return MHE_ERR_ARG;
    M = l->cfg.n_buckets / 2;
    if (!p) {
        p = (double *)MHE_MALLOC(l->alloc_ctx, (size_t)M * sizeof(double));
        if (!p) return MHE_ERR_NOMEM;
    }
    mhe__lsh_project(l, word, len, p, M);
    /* argmax of [p; -p] (Kitaev et al. 2020, sec. 2.1), first index on ties */
    bv = p[0];
    for (i = 1; i < M; i++) if (p[i] > bv) { bv = p[i]; best = i; }
    for (i = 0; i < M; i++) if (-p[i] > bv) { bv = -p[i]; best = M + i; }
    *bucket = best;
    if (!work) MHE_FREE(l->alloc_ctx, p);
    return MHE_OK;
}

MHEDEF mhe_status mhe_lsh_bits(const mhe_lsh *l, const char *word, size_t len, double *work, unsigned char *bits) {
    uint32_t T;
    int t;
    double *p = work;
    if (!l || !l->eta || !bits || (!word && len)) return MHE_ERR_ARG;
    T = (uint32_t)l->cfg.n_bits;
    if (!p) {
        p = (double *)MHE_MALLOC(l->alloc_ctx, (size_t)T * sizeof(double));
        if (!p) return MHE_ERR_NOMEM;
    }
    mhe__lsh_project(l, word, len, p, T);
    /* b_t = sgn(sgn(x . r^t) + 1) (thesis sec. 2.3.5), i.e. [x . r^t > 0] */
    memset(bits, 0, MHE_BITS_BYTES(T));
    for (t = 0; t < (int)T; t++)
        if (p[t] > 0) bits[t >> 3] |= (unsigned char)(0x80u >> (t & 7));
    if (!work) MHE_FREE(l->alloc_ctx, p);
    return MHE_OK;
}

/* ---- the corpus n-gram table ---- */

typedef struct mhe__ngram_count { uint64_t key, count; } mhe__ngram_count;   /* key = n << 32 | code */

static int mhe__ngram_by_count(const void *a, const void *b) {
    const mhe__ngram_count *x = (const mhe__ngram_count *)a, *y = (const mhe__ngram_count *)b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static int mhe__ngram_by_key(const void *a, const void *b) {
    const mhe__ngram_count *x = (const mhe__ngram_count *)a, *y = (const mhe__ngram_count *)b;
    return x->key < y->key ? -1 : x->key > y->key;
}

static size_t mhe__ngram_slot(uint64_t key, size_t mask) {
    uint64_t z = key * 0x9e3779b97f4a7c15ULL;
    return (size_t)(z ^ (z >> 29)) & mask;
}

MHEDEF mhe_status mhe_ngram_table_build(const char *text, size_t len, int n_min, int n_max, int pad, uint32_t K,
                                        uint32_t **table, size_t *table_len, void *alloc_ctx, char *err) {
    mhe__ngram_count *map = NULL, *nm;
    size_t cap = 1024, used = 0, pos = 0, start, wl, i, keep;
    uint32_t *out;
    mhe__ngram_it it;
    int n, ok = 1;
    uint32_t code;
    if (table) *table = NULL;
    if (table_len) *table_len = 0;
    if (!table || !table_len || (!text && len))
        return mhe__fail(err, MHE_ERR_ARG, "ngram table: table, table_len or text is NULL");
    if (n_min < 1 || n_max > 4 || n_min > n_max)
        return mhe__fail(err, MHE_ERR_ARG, "ngram table: orders %d..%d must satisfy 1 <= n_min <= n_max <= 4", n_min, n_max);
    if (pad != 0 && pad != 1) return mhe__fail(err, MHE_ERR_ARG, "ngram table: pad must be 0 or 1 (got %d)", pad);
    if (K < 1 || K > MHE_LSH_MAX_DIM)
        return mhe__fail(err, MHE_ERR_ARG, "ngram table: K = %lu is outside 1..%lu", (unsigned long)K, (unsigned long)MHE_LSH_MAX_DIM);
    map = (mhe__ngram_count *)MHE_MALLOC(alloc_ctx, cap * sizeof *map);
    if (!map) return mhe__fail(err, MHE_ERR_NOMEM, "ngram table: out of memory");
    memset(map, 0, cap * sizeof *map);
    while ((wl = mhe_word_next(text, len, &pos, &start)) > 0) {
        mhe__ngram_start(&it, text + start, wl, n_min, n_max, pad);
        while (mhe__ngram_next(&it, &n, &code)) {
            uint64_t key = (uint64_t)n << 32 | code;   /* never 0: n >= 1 */
            size_t h = mhe__ngram_slot(key, cap - 1);
            while (map[h].key && map[h].key != key) h = (h + 1) & (cap - 1);
            if (!map[h].key) {
                map[h].key = key;
                used++;
            }
            map[h].count++;
            if (2 * used >= cap) {   /* grow at half full */
                size_t ncap = mhe__mul_size(cap, 2, &ok), bytes = mhe__mul_size(ncap, sizeof *map, &ok);
                nm = ok ? (mhe__ngram_count *)MHE_MALLOC(alloc_ctx, bytes) : NULL;
                if (!nm) {
                    MHE_FREE(alloc_ctx, map);
                    return mhe__fail(err, ok ? MHE_ERR_NOMEM : MHE_ERR_OVERFLOW, "ngram table: no memory for %llu distinct n-grams",
                                     (unsigned long long)used);
                }
                memset(nm, 0, bytes);
                for (i = 0; i < cap; i++)
                    if (map[i].key) {
                        size_t g = mhe__ngram_slot(map[i].key, ncap - 1);
                        while (nm[g].key) g = (g + 1) & (ncap - 1);
                        nm[g] = map[i];
                    }
                MHE_FREE(alloc_ctx, map);
                map = nm;
                cap = ncap;
            }
        }
    }
    if (!used) {
        MHE_FREE(alloc_ctx, map);
        return mhe__fail(err, MHE_ERR_DATA, "ngram table: the text has no words");
    }
    for (i = 0, keep = 0; i < cap; i++) if (map[i].key) map[keep++] = map[i];   /* compact */
    qsort(map, used, sizeof *map, mhe__ngram_by_count);
    keep = used < K ? used : K;
    qsort(map, keep, sizeof *map, mhe__ngram_by_key);
    out = (uint32_t *)MHE_MALLOC(alloc_ctx, (keep + 4) * sizeof(uint32_t));
    if (!out) {
        MHE_FREE(alloc_ctx, map);
        return mhe__fail(err, MHE_ERR_NOMEM, "ngram table: out of memory");
    }
    memset(out, 0, 4 * sizeof(uint32_t));
    for (i = 0; i < keep; i++) {
        out[(map[i].key >> 32) - 1]++;
        out[4 + i] = (uint32_t)(map[i].key & 0xffffffffu);
    }
    MHE_FREE(alloc_ctx, map);
    *table = out;
    *table_len = keep + 4;
    return MHE_OK;
}

/* ---- hash embeddings: Pool, Add, Proj ---- */

MHEDEF int mhe_hash_pool_chunks(int n_bits, int k) { return n_bits > 0 && k > 0 ? 1 + (n_bits - 1) / k : 0; }

MHEDEF void mhe_hash_pool_index(int *idx, const unsigned char *bits, int N, int n_bits, int k) {
    int C = mhe_hash_pool_chunks(n_bits, k), i, c, t;
    size_t nb = MHE_BITS_BYTES(n_bits);
    for (i = 0; i < N; i++) {
        const unsigned char *b = bits + (size_t)i * nb;
        for (c = 0; c < C; c++) {
            int v = 0, end = (c + 1) * k < n_bits ? (c + 1) * k : n_bits;
            for (t = c * k; t < end; t++) v = (v << 1) | mhe_bits_get(b, t);
            idx[(size_t)i * C + c] = v + 1;   /* 0 is the reserved row */
        }
    }
}

/* thesis eq. 2.1a: softmax of w over the chunk axis, separately per dimension j */
static void mhe__pool_softmax(float *wsm, const float *w, int C, int d) {
    int c, j;
    for (j = 0; j < d; j++) {
        float m = w[j], s = 0;
        for (c = 1; c < C; c++) if (w[(size_t)c * d + j] > m) m = w[(size_t)c * d + j];
        for (c = 0; c < C; c++) { float e = mhe__exp(w[(size_t)c * d + j] - m); wsm[(size_t)c * d + j] = e; s += e; }
        for (c = 0; c < C; c++) wsm[(size_t)c * d + j] /= s;
    }
}

/* eq. 2.1b: e[j] = sum_c wsm[c][j] * codebook[idx_c][j] */
MHEDEF void mhe_hash_pool_fwd(float *out, float *wsm, const float *codebook, const float *w, const int *idx, int N,
                              int n_chunks, int d) {
    int i, c, j;
    mhe__pool_softmax(wsm, w, n_chunks, d);
    for (i = 0; i < N; i++) {
        float *o = out + (size_t)i * d;
        memset(o, 0, (size_t)d * sizeof(float));
        for (c = 0; c < n_chunks; c++) {
            const float *row = codebook + (size_t)idx[(size_t)i * n_chunks + c] * d, *s = wsm + (size_t)c * d;
            for (j = 0; j < d; j++) o[j] += s[j] * row[j];
        }
    }
}

#ifndef MHE_NO_TRAIN
/* dcodebook[idx_c][j] += s_cj g_j (not row 0); with e_j = sum_c s_cj E_cj,
   dw_cj += s_cj g_j (E_cj - e_j) (softmax backward per column) */
MHEDEF void mhe_hash_pool_bwd(float *dcodebook, float *dw, const float *dout, const float *codebook, const float *wsm,
                              const int *idx, int N, int n_chunks, int d) {
    int i, c, j;
    for (i = 0; i < N; i++) {
        const float *g = dout + (size_t)i * d;
        const int *ix = idx + (size_t)i * n_chunks;
        for (j = 0; j < d; j++) {
            float e = 0;
            if (g[j] == 0) continue;
            for (c = 0; c < n_chunks; c++) e += wsm[(size_t)c * d + j] * codebook[(size_t)ix[c] * d + j];
            for (c = 0; c < n_chunks; c++) {
                float s = wsm[(size_t)c * d + j], ecj = codebook[(size_t)ix[c] * d + j];
                if (dw) dw[(size_t)c * d + j] += s * g[j] * (ecj - e);
                if (dcodebook && ix[c] != 0) dcodebook[(size_t)ix[c] * d + j] += s * g[j];
            }
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* eq. 2.2: e = sum_t books[t][tau_t] / gamma */
MHEDEF void mhe_hash_add_fwd(float *out, const float *books, const unsigned char *bits, int N, int n_bits, int d,
                             float gamma) {
    size_t nb = MHE_BITS_BYTES(n_bits);
    float inv = 1.0f / gamma;
    int i, t, j;
    for (i = 0; i < N; i++) {
        float *o = out + (size_t)i * d;
        const unsigned char *b = bits + (size_t)i * nb;
        memset(o, 0, (size_t)d * sizeof(float));
        for (t = 0; t < n_bits; t++) {
            const float *row = books + ((size_t)t * 2 + (size_t)mhe_bits_get(b, t)) * d;
            for (j = 0; j < d; j++) o[j] += row[j];
        }
        for (j = 0; j < d; j++) o[j] *= inv;
    }
}

#ifndef MHE_NO_TRAIN
MHEDEF void mhe_hash_add_bwd(float *dbooks, const float *dout, const unsigned char *bits, int N, int n_bits, int d,
                             float gamma) {
    size_t nb = MHE_BITS_BYTES(n_bits);
    float inv = 1.0f / gamma;
    int i, t, j;
    for (i = 0; i < N; i++) {
        const float *g = dout + (size_t)i * d;
        const unsigned char *b = bits + (size_t)i * nb;
        for (t = 0; t < n_bits; t++) {
            float *row = dbooks + ((size_t)t * 2 + (size_t)mhe_bits_get(b, t)) * d;
            for (j = 0; j < d; j++) row[j] += g[j] * inv;
        }
    }
}
#endif /* MHE_NO_TRAIN */

#define MHE__PROJ_EPS 1e-8   /* the authors' clamp of both norms */

/* The centred bits, divided by their clamped norm, take two values: u1 for
   a 1 and u0 for a 0. With m ones of T: mean m/T, |tau - mean|^2 = m(T-m)/T. */
static void mhe__proj_bits(const unsigned char *b, int T, double *u0, double *u1) {
    int t, m = 0;
    double mean, nrm;
    for (t = 0; t < T; t++) m += mhe_bits_get(b, t);
    mean = (double)m / T;
    nrm = sqrt((double)m * (double)(T - m) / T);
    if (nrm < MHE__PROJ_EPS) nrm = MHE__PROJ_EPS;
    *u0 = -mean / nrm;
    *u1 = (1.0 - mean) / nrm;
}

/* Blocks of words go through GEMMs with a stack scratch of MHE__PROJ_SCRATCH
   floats (rows of U = the centred, normalised bits; the backward adds two
   [rows, d] blocks, 12 KB in all); shapes too large for one row use the
   scalar loops. */
#define MHE__PROJ_SCRATCH 1536

/* wn and wnorm from w (both kept for the backward) */
static void mhe__proj_weights(float *wn, float *wnorm, const float *w, int n_bits, int d) {
    int j, t;
    for (j = 0; j < d; j++) {
        const float *wj = w + (size_t)j * n_bits;
        double mean = 0, ss = 0, den;
        for (t = 0; t < n_bits; t++) mean += wj[t];
        mean /= n_bits;
        for (t = 0; t < n_bits; t++) ss += (wj[t] - mean) * (wj[t] - mean);
        wnorm[j] = (float)sqrt(ss);
        den = sqrt(ss) > MHE__PROJ_EPS ? sqrt(ss) : MHE__PROJ_EPS;
        for (t = 0; t < n_bits; t++) wn[(size_t)j * n_bits + t] = (float)((wj[t] - mean) / den);
    }
}

/* rows of U for words i0 .. i0+rows-1: u_t = u1 for a 1 bit, u0 for a 0 bit */
static void mhe__proj_rows(float *U, const unsigned char *bits, int i0, int rows, int n_bits) {
    size_t nb = MHE_BITS_BYTES(n_bits);
    int i, t;
    for (i = 0; i < rows; i++) {
        const unsigned char *b = bits + (size_t)(i0 + i) * nb;
        double u0, u1;
        mhe__proj_bits(b, n_bits, &u0, &u1);
        for (t = 0; t < n_bits; t++) U[(size_t)i * n_bits + t] = (float)(mhe_bits_get(b, t) ? u1 : u0);
    }
}

/* eq. 2.3 (Pearson correlation of tau and w_j): out = U wn^T */
MHEDEF void mhe_hash_proj_fwd(float *out, float *wn, float *wnorm, const float *w, const unsigned char *bits, int N,
                              int n_bits, int d) {
    size_t nb = MHE_BITS_BYTES(n_bits);
    int i, j, t, blk = MHE__PROJ_SCRATCH / n_bits;
    mhe__proj_weights(wn, wnorm, w, n_bits, d);
    if (blk >= 1) {
        float U[MHE__PROJ_SCRATCH];
        for (i = 0; i < N; i += blk) {
            int rows = N - i < blk ? N - i : blk;
            mhe__proj_rows(U, bits, i, rows, n_bits);
            mhe_gemm(0, 1, rows, d, n_bits, 1.0f, U, n_bits, wn, n_bits, 0.0f, out + (size_t)i * d, d);
        }
        return;
    }
    for (i = 0; i < N; i++) {
        const unsigned char *b = bits + (size_t)i * nb;
        double u0, u1;
        mhe__proj_bits(b, n_bits, &u0, &u1);
        for (j = 0; j < d; j++) {
            const float *r = wn + (size_t)j * n_bits;
            double s0 = 0, s1 = 0;
            for (t = 0; t < n_bits; t++) { if (mhe_bits_get(b, t)) s1 += r[t]; else s0 += r[t]; }
            out[(size_t)i * d + j] = (float)(u0 * s0 + u1 * s1);
        }
    }
}

#ifndef MHE_NO_TRAIN
/* e_j = wn_j . u with wn_j = c_j / max(|c_j|, eps), c_j = w_j - mean(w_j):
   unclamped, dw_j += g (u - wn_j e_j) / |c_j|; clamped, dw_j += g u / eps.
   (The centring's own backward subtracts a mean that is already 0.)
   Blocked: dW += Gc^T U - diag(sum_i Gc_ij e_ij) wn with Gc_ij = g_ij / |c_j|. */
MHEDEF void mhe_hash_proj_bwd(float *dw, const float *dout, const float *wn, const float *wnorm,
                              const unsigned char *bits, int N, int n_bits, int d) {
    size_t nb = MHE_BITS_BYTES(n_bits);
    int i, j, t, blk = MHE__PROJ_SCRATCH / (n_bits + 2 * d);
    if (blk >= 1 && d <= MHE__PROJ_SCRATCH) {
        float S[MHE__PROJ_SCRATCH], acc[MHE__PROJ_SCRATCH];
        float *U = S, *G = S + (size_t)blk * n_bits, *E = G + (size_t)blk * d;
        for (j = 0; j < d; j++) acc[j] = 0;
        for (i = 0; i < N; i += blk) {
            int rows = N - i < blk ? N - i : blk, r;
            mhe__proj_rows(U, bits, i, rows, n_bits);
            mhe_gemm(0, 1, rows, d, n_bits, 1.0f, U, n_bits, wn, n_bits, 0.0f, E, d);
            for (r = 0; r < rows; r++)
                for (j = 0; j < d; j++) {
                    int clamped = !(wnorm[j] > MHE__PROJ_EPS);
                    float g = dout[(size_t)(i + r) * d + j] / (clamped ? (float)MHE__PROJ_EPS : wnorm[j]);
                    G[(size_t)r * d + j] = g;
                    if (!clamped) acc[j] += g * E[(size_t)r * d + j];
                }
            mhe_gemm(1, 0, d, n_bits, rows, 1.0f, G, d, U, n_bits, 1.0f, dw, n_bits);
        }
        for (j = 0; j < d; j++) mhe__axpy(dw + (size_t)j * n_bits, -acc[j], wn + (size_t)j * n_bits, n_bits);
        return;
    }
    for (i = 0; i < N; i++) {
        const unsigned char *b = bits + (size_t)i * nb;
        double u0, u1;
        mhe__proj_bits(b, n_bits, &u0, &u1);
        if (u0 == 0 && u1 == 0) continue;
        for (j = 0; j < d; j++) {
            const float *r = wn + (size_t)j * n_bits;
            float *dwj = dw + (size_t)j * n_bits;
            double g = dout[(size_t)i * d + j], e = 0, coef;
            int clamped = !(wnorm[j] > MHE__PROJ_EPS);
            if (g == 0) continue;
            for (t = 0; t < n_bits; t++) e += r[t] * (mhe_bits_get(b, t) ? u1 : u0);
            coef = g / (clamped ? MHE__PROJ_EPS : (double)wnorm[j]);
            if (clamped) e = 0;
            for (t = 0; t < n_bits; t++) dwj[t] += (float)(coef * ((mhe_bits_get(b, t) ? u1 : u0) - r[t] * e));
        }
    }
}
#endif /* MHE_NO_TRAIN */

/* ---- parameter counts and memory metrics (thesis sec. 2.4.4 and 2.8) ---- */

static const char *const mhe__hash_names[MHE_HASH_KIND_COUNT] = { "hash-emb", "hash-pool", "hash-add", "hash-proj" };

MHEDEF const char *mhe_hash_kind_name(int kind) {
    return kind >= 0 && kind < MHE_HASH_KIND_COUNT ? mhe__hash_names[kind] : "?";
}

MHEDEF int mhe_hash_kind_from_name(const char *name) {
    int i;
    if (!name) return -1;
    for (i = 0; i < MHE_HASH_KIND_COUNT; i++) if (strcmp(name, mhe__hash_names[i]) == 0) return i;
    return -1;
}

MHEDEF int64_t mhe_hash_param_count(int kind, int64_t d, int n_bits, int k, int64_t n_buckets, int flags) {
    int64_t rows;
    if (d < 1 || (flags & ~(MHE_HASH_COUNT_PAD_ROW | MHE_HASH_COUNT_TOKEN_ROW))) return -1;
    if (kind != MHE_HASH_EMB && (n_bits < 1 || n_bits > MHE_HASH_MAX_BITS)) return -1;
    switch (kind) {
    case MHE_HASH_EMB:
        if (n_buckets < 1) return -1;
        rows = n_buckets;                                       /* eq. 2.12 */
        break;
    case MHE_HASH_POOL:
        if (k < 1 || k > 24) return -1;
        rows = mhe_hash_pool_chunks(n_bits, k) + ((int64_t)1 << k);  /* eq. 2.13 */
        if (flags & MHE_HASH_COUNT_PAD_ROW) rows++;
        break;
    case MHE_HASH_ADD: rows = 2 * (int64_t)n_bits; break;       /* eq. 2.14 */
    case MHE_HASH_PROJ: rows = n_bits; break;                   /* eq. 2.15 */
    default: return -1;
    }
    if (kind != MHE_HASH_EMB && (flags & MHE_HASH_COUNT_TOKEN_ROW)) rows++;
    return rows > INT64_MAX / d ? -1 : rows * d;
}

MHEDEF double mhe_pcr(double params, double baseline_params) {
    return baseline_params > 0 ? 1.0 - params / baseline_params : 0.0;
}

MHEDEF double mhe_poep(double emb_params, double total_params) {
    return total_params > 0 ? emb_params / total_params : 0.0;
}

/* ---- word types and word corpora ---- */

/* FNV-1a (64 bit) of the ASCII-lower-cased bytes: the lexicon's slot hash */
static uint64_t mhe__word_fnv(const char *w, size_t len) {
    uint64_t h = 14695981039346656037ULL;
    size_t i;
    for (i = 0; i < len; i++) { h ^= mhe__lower((unsigned char)w[i]); h *= 1099511628211ULL; }
    return h;
}

MHEDEF void mhe_lexicon_init(mhe_lexicon *x, void *alloc_ctx) {
    if (!x) return;
    memset(x, 0, sizeof *x);
    x->alloc_ctx = alloc_ctx;
}

MHEDEF void mhe_lexicon_free(mhe_lexicon *x) {
    void *ctx;
    if (!x) return;
    ctx = x->alloc_ctx;
    if (x->text) MHE_FREE(ctx, x->text);
    if (x->start) MHE_FREE(ctx, x->start);
    if (x->count) MHE_FREE(ctx, x->count);
    if (x->slots) MHE_FREE(ctx, x->slots);
    mhe_lexicon_init(x, ctx);
}

static int mhe__lex_same(const mhe_lexicon *x, int t, const char *w, size_t len) {
    size_t i, s = x->start[t];
    if (x->start[t + 1] - s != len) return 0;
    for (i = 0; i < len; i++) if ((unsigned char)x->text[s + i] != mhe__lower((unsigned char)w[i])) return 0;
    return 1;
}

/* the slot holding the word, or the empty slot where it would go (linear probing) */
static size_t mhe__lex_slot(const mhe_lexicon *x, const char *w, size_t len) {
    size_t mask = x->n_slots - 1, i = (size_t)mhe__word_fnv(w, len) & mask;
    while (x->slots[i] >= 0 && !mhe__lex_same(x, x->slots[i], w, len)) i = (i + 1) & mask;
    return i;
}

MHEDEF int mhe_lexicon_find(const mhe_lexicon *x, const char *word, size_t len) {
    if (!x || !x->n_slots || (!word && len) || len == 0) return -1;
    return x->slots[mhe__lex_slot(x, word, len)];
}

MHEDEF const char *mhe_lexicon_word(const mhe_lexicon *x, int type, size_t *len) {
    if (!x || type < 0 || type >= x->n) { if (len) *len = 0; return NULL; }
    if (len) *len = x->start[type + 1] - x->start[type];
    return x->text + x->start[type];
}

/* doubles the slot table (at most half full) and re-inserts every type */
static mhe_status mhe__lex_rehash(mhe_lexicon *x) {
    size_t n = x->n_slots ? 2 * x->n_slots : 64, i;
    int ok = 1, t;
    int *s = (int *)MHE_MALLOC(x->alloc_ctx, mhe__mul_size(n, sizeof(int), &ok));
    if (!ok || !s) { if (s) MHE_FREE(x->alloc_ctx, s); return MHE_ERR_NOMEM; }
    for (i = 0; i < n; i++) s[i] = -1;
    if (x->slots) MHE_FREE(x->alloc_ctx, x->slots);
    x->slots = s;
    x->n_slots = n;
    for (t = 0; t < x->n; t++) x->slots[mhe__lex_slot(x, x->text + x->start[t], x->start[t + 1] - x->start[t])] = t;
    return MHE_OK;
}

MHEDEF mhe_status mhe_lexicon_intern(mhe_lexicon *x, const char *word, size_t len, int count, int *type) {
    size_t slot, need;
    int ok = 1;
    if (!x || !type || (!word && len)) return MHE_ERR_ARG;
    if (len == 0) return MHE_ERR_ARG;
    if ((size_t)x->n + 1 > x->n_slots / 2 && mhe__lex_rehash(x) != MHE_OK) return MHE_ERR_NOMEM;
    slot = mhe__lex_slot(x, word, len);
    if (x->slots[slot] >= 0) {
        *type = x->slots[slot];
        if (count) x->count[*type]++;
        return MHE_OK;
    }
    if (x->n >= INT_MAX - MHE_N_SPECIAL - 1) return MHE_ERR_OVERFLOW;
    if (x->n >= x->cap) {
        int cap = x->cap ? (x->cap > INT_MAX / 2 ? INT_MAX - 1 : 2 * x->cap) : 256;
        size_t *st = (size_t *)MHE_REALLOC(x->alloc_ctx, x->start, (size_t)(x->cap + 1) * sizeof(size_t),
                                           mhe__mul_size((size_t)cap + 1, sizeof(size_t), &ok));
        int64_t *ct;
        if (!ok || !st) return MHE_ERR_NOMEM;
        x->start = st;
        ct = (int64_t *)MHE_REALLOC(x->alloc_ctx, x->count, (size_t)x->cap * sizeof(int64_t),
                                    mhe__mul_size((size_t)cap, sizeof(int64_t), &ok));
        if (!ok || !ct) return MHE_ERR_NOMEM;
        x->count = ct;
        if (x->cap == 0) x->start[0] = 0;
        x->cap = cap;
    }
    need = mhe__add_size(x->text_len, len, &ok);
    if (!ok) return MHE_ERR_OVERFLOW;
    if (need > x->text_cap) {
        size_t cap = need > x->text_cap * 2 ? need : x->text_cap * 2;
        char *t = (char *)MHE_REALLOC(x->alloc_ctx, x->text, x->text_cap, cap < 4096 ? 4096 : cap);
        if (!t) return MHE_ERR_NOMEM;
        x->text = t;
        x->text_cap = cap < 4096 ? 4096 : cap;
    }
    mhe_word_lower(x->text + x->text_len, word, len);
    x->text_len = need;
    x->start[x->n + 1] = need;
    x->count[x->n] = count ? 1 : 0;
    x->slots[slot] = x->n;
    *type = x->n++;
    return MHE_OK;
}

/* Word tokens of text: with out == NULL only counts them (into *count);
   otherwise interns every word and writes the tokens. A line break between
   two words (or after the last) ends a line that had a word: MHE_TOK_EOS. */
static mhe_status mhe__words_scan(mhe_lexicon *x, const char *text, size_t len, int *out, size_t *count) {
    size_t pos = 0, start, n, prev = 0, k = 0;
    int pending = 0, type;
    mhe_status st;
    while ((n = mhe_word_next(text, len, &pos, &start)) > 0) {
        if (pending && memchr(text + prev, '\n', start - prev)) { if (out) out[k] = MHE_TOK_EOS; k++; }
        if (out) {
            if ((st = mhe_lexicon_intern(x, text + start, n, 1, &type)) != MHE_OK) return st;
            out[k] = MHE_N_SPECIAL + type;
        }
        k++;
        pending = 1;
        prev = pos;
    }
    if (pending) { if (out) out[k] = MHE_TOK_EOS; k++; }
    *count = k;
    return MHE_OK;
}

MHEDEF mhe_status mhe_words_parse(mhe_lexicon *x, const char *text, size_t len, int **tokens, size_t *n,
                                  void *alloc_ctx, char *err) {
    size_t k;
    int ok = 1;
    mhe_status st;
    if (!tokens || !n) return mhe__fail(err, MHE_ERR_ARG, "words: tokens or n is NULL");
    *tokens = NULL;
    *n = 0;
    if (!x || (!text && len)) return mhe__fail(err, MHE_ERR_ARG, "words: lexicon or text is NULL");
    mhe__words_scan(x, text, len, NULL, &k);
    if (k == 0) return mhe__fail(err, MHE_ERR_DATA, "words: the text has no word");
    *tokens = (int *)MHE_MALLOC(alloc_ctx, mhe__mul_size(k, sizeof(int), &ok));
    if (!ok || !*tokens) { *tokens = NULL; return mhe__fail(err, MHE_ERR_NOMEM, "words: no memory for %zu tokens", k); }
    if ((st = mhe__words_scan(x, text, len, *tokens, &k)) != MHE_OK) {
        MHE_FREE(alloc_ctx, *tokens);
        *tokens = NULL;
        return mhe__fail(err, st, "words: %s while interning word types", st == MHE_ERR_NOMEM ? "out of memory" : "too many types");
    }
    *n = k;
    return MHE_OK;
}

#ifndef MHE_NO_STDIO
MHEDEF mhe_status mhe_read_words(const char *path, mhe_lexicon *x, int **tokens, size_t *n, void *alloc_ctx, char *err) {
    void *buf;
    size_t len;
    mhe_status st;
    if (!tokens || !n) return mhe__fail(err, MHE_ERR_ARG, "words: tokens or n is NULL");
    *tokens = NULL;
    *n = 0;
    if ((st = mhe_read_file(path, &buf, &len, alloc_ctx, err)) != MHE_OK) return st;
    if (memchr(buf, 0, len)) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_DATA, "%.200s: contains NUL bytes, not a text file", path); }
    st = mhe_words_parse(x, (const char *)buf, len, tokens, n, alloc_ctx, err);
    MHE_FREE(alloc_ctx, buf);
    if (st != MHE_OK && err) {
        char tmp[MHE_ERR_LEN];
        memcpy(tmp, err, MHE_ERR_LEN);
        snprintf(err, MHE_ERR_LEN, "%.100s: %.140s", path, tmp);
    }
    return st;
}
#endif

/* ---- 7. models: config ---------------------------------------------------- */

MHEDEF mhe_config mhe_config_default(void) {
    mhe_config c;
    int i;
    memset(&c, 0, sizeof c);
    c.arch = MHE_ARCH_DECODER;
    c.vocab_size = 256;
    c.d_model = 128;
    c.n_heads = 4;
    c.n_layers = 4;
    c.max_seq_len = 256;
    for (i = 0; i < MHE_MAX_LAYERS; i++) c.attn[i] = c.enc_attn[i] = c.cross_attn[i] = MHE_ATTN_MHA;
    c.kv_groups = 2;
    c.norm = MHE_NORM_LAYERNORM;
    c.norm_eps = 1e-5f;
    c.activation = MHE_ACT_GELU;
    c.bias = 1;
    c.tie_embeddings = 1;
    c.init_std = 0.02f;
    c.fused_attention = 1;
    c.mask_token = -1;
    c.head_init_std = -1.0f;
    c.hash_bits = 128;              /* the thesis's T (the MD5 digest) */
    c.hash_buckets = 1024;
    c.hash_chunk = 10;              /* the thesis's k */
    c.hash_key = 1;                 /* HMAC-MD5, key "en", as the authors' code */
    c.lsh_dim = 50000;              /* the thesis's feature dimension (top 50K n-grams) */
    c.lsh_nmin = 1; c.lsh_nmax = 4;
    c.lsh_seed = 42;
    c.fixed_seed = 1;
    c.fixed_std = -1.0f;
    c.collab_mix_std = 0.2f;   /* the authors' default for a new layer */
    return c;
}

/* The fixed text of fixedseq-qk when the config gives none (our own words;
   the thesis took the first 2048 tokens of FineWeb). Cut to max_seq_len. */
static const char mhe__fixed_seq_default[] =
    "A fixed sequence of natural text for FixedSeqQK layers: its tokens are embedded, passed through the "
    "blocks below each such layer, and give that layer its queries and keys, so the attention map is the "
    "same for every input. The values still come from the input itself. Any text works; this one only has "
    "to read like language, with words, spaces and punctuation in their usual places, as a page would.";

MHEDEF int mhe_config_mlp_width(const mhe_config *c) {
    int64_t hd = (int64_t)c->n_heads * mhe_config_d_head(c);
    return (int)((4 * hd + 1) / 3);
}

MHEDEF int mhe_config_collab_dim(const mhe_config *c) {
    return c->collab_dim > 0 ? c->collab_dim : c->n_heads * mhe_config_d_head(c);
}

/* Table 4.11 (1-indexed layer k of n keeps standard attention): even {2,4,..},
   odd {1,3,..}, top {1..n/2}, middle {1..n/4, n-n/4+1..n}, bottom {n/2+1..n},
   25% {4,8,..}, first {1}, last {n}, bilateral {1, n}. The text of sec. 4.6
   says "bottom" replaces layers 1-6; Table 4.11 keeps 13-24, i.e. replaces
   1-12: we follow the table. */
static int mhe__layout_standard(int layout, int i, int n) {
    int k = i + 1;
    switch (layout) {
    case MHE_LAYOUT_EVEN: return k % 2 == 0;
    case MHE_LAYOUT_ODD: return k % 2 == 1;
    case MHE_LAYOUT_TOP: return k <= n / 2;
    case MHE_LAYOUT_MIDDLE: return k <= n / 4 || k > n - n / 4;
    case MHE_LAYOUT_BOTTOM: return k > n / 2;
    case MHE_LAYOUT_25: return k % 4 == 0;
    case MHE_LAYOUT_FIRST: return k == 1;
    case MHE_LAYOUT_LAST: return k == n;
    case MHE_LAYOUT_BILATERAL: return k == 1 || k == n;
    default: return 0;
    }
}

MHEDEF int mhe_config_layer_kind(const mhe_config *c, int i) {
    if (i < 0 || i >= MHE_MAX_LAYERS) return -1;
    return mhe__layout_standard(c->layout, i, c->n_layers) ? MHE_ATTN_MHA : c->attn[i];
}

/* write the layout into the per-layer list (idempotent: a reloaded model
   config gives the same list) */
static void mhe__apply_layout(mhe_config *c) {
    int i, k[MHE_MAX_LAYERS];
    if (c->layout == MHE_LAYOUT_NONE) return;
    for (i = 0; i < c->n_layers && i < MHE_MAX_LAYERS; i++) k[i] = mhe_config_layer_kind(c, i);
    for (i = 0; i < MHE_MAX_LAYERS; i++) c->attn[i] = i < c->n_layers ? k[i] : -1;
}

/* The fixedseq-qk tokens into out[MHE_FIXED_SEQ_MAX]: the config's text
   (its bytes), "ids:" and token ids separated by spaces or commas (any
   vocabulary), or the default text cut to max_seq_len. Returns the count, or
   -1 with a message for an id that is not a number. */
static int mhe__fixed_seq_tokens(const mhe_config *c, int *out, char *err) {
    const char *t = c->fixed_seq[0] ? c->fixed_seq : mhe__fixed_seq_default;
    int n = 0;
    if (strncmp(t, "ids:", 4) == 0) {
        const char *p = t + 4;
        while (*p) {
            long v = 0;
            int digits = 0;
            while (*p == ' ' || *p == ',') p++;
            if (!*p) break;
            for (; *p >= '0' && *p <= '9' && v < 100000000L; p++, digits++) v = v * 10 + (*p - '0');
            if (!digits || (*p && *p != ' ' && *p != ',') || n == MHE_FIXED_SEQ_MAX) {
                mhe__fail(err, MHE_ERR_CONFIG, "fixed_seq: token %d of the ids: list is not a non-negative integer", n);
                return -1;
            }
            out[n++] = (int)v;
        }
        return n;
    }
    for (; t[n] && n < MHE_FIXED_SEQ_MAX; n++) out[n] = (unsigned char)t[n];
    if (!c->fixed_seq[0] && n > c->max_seq_len) n = c->max_seq_len;
    return n;
}

MHEDEF int mhe_config_d_head(const mhe_config *c) { return c->d_head > 0 ? c->d_head : c->d_model / (c->n_heads > 0 ? c->n_heads : 1); }
MHEDEF int mhe_config_d_ff(const mhe_config *c) { return c->d_ff > 0 ? c->d_ff : 4 * c->d_model; }
MHEDEF int mhe_config_total_layers(const mhe_config *c) { return c->n_layers + (c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0); }

/* A table of fields drives parsing, printing and validation alike. */
enum { MHE__F_INT, MHE__F_FLOAT, MHE__F_ENUM, MHE__F_ATTN, MHE__F_U64, MHE__F_TEXT };
typedef struct mhe__field {
    const char *key;
    int type;
    size_t offset;
    double lo, hi;                  /* accepted range (ints and floats) */
    const char *names;              /* enum: names separated by '|' in value order */
    const char *help;
    int since;                      /* 0: in every checkpoint; 1: added later, a checkpoint without it keeps the default */
} mhe__field;

#define MHE__CF(name) offsetof(mhe_config, name)
static const mhe__field mhe__config_fields[] = {
    { "arch", MHE__F_ENUM, MHE__CF(arch), 0, 0, "decoder|encoder|encdec", "model architecture", 0 },
    { "vocab_size", MHE__F_INT, MHE__CF(vocab_size), 1, 16777216, 0, "vocabulary size (256 for bytes)", 0 },
    { "d_model", MHE__F_INT, MHE__CF(d_model), 1, 65536, 0, "model width", 0 },
    { "n_heads", MHE__F_INT, MHE__CF(n_heads), 1, 4096, 0, "attention heads", 0 },
    { "d_head", MHE__F_INT, MHE__CF(d_head), 0, MHE_MAX_D_HEAD, 0, "head size (0: d_model/n_heads)", 0 },
    { "n_layers", MHE__F_INT, MHE__CF(n_layers), 1, MHE_MAX_LAYERS, 0, "transformer blocks", 0 },
    { "d_ff", MHE__F_INT, MHE__CF(d_ff), 0, 1048576, 0, "MLP hidden width (0: 4*d_model)", 0 },
    { "max_seq_len", MHE__F_INT, MHE__CF(max_seq_len), 1, 1048576, 0, "longest sequence (position table rows)", 0 },
    { "attn", MHE__F_ATTN, MHE__CF(attn), 0, 0, 0, "attention kind, or one per layer separated by commas", 0 },
    { "kv_groups", MHE__F_INT, MHE__CF(kv_groups), 1, 4096, 0, "K/V head groups of gqa layers (divides n_heads)", 0 },
    { "norm", MHE__F_ENUM, MHE__CF(norm), 0, 0, "layernorm|rmsnorm", "normalisation", 0 },
    { "norm_eps", MHE__F_FLOAT, MHE__CF(norm_eps), 1e-12, 1, 0, "epsilon inside the norm", 0 },
    { "norm_position", MHE__F_ENUM, MHE__CF(post_norm), 0, 0, "pre|post", "norm before (pre) or after (post) each residual sum", 0 },
    { "activation", MHE__F_ENUM, MHE__CF(activation), 0, 0, "gelu|relu|silu|gelu-erf", "MLP activation (gelu: tanh form; gelu-erf: exact)", 0 },
    { "bias", MHE__F_INT, MHE__CF(bias), 0, 1, 0, "biases in linear layers (0/1)", 0 },
    { "tie_embeddings", MHE__F_INT, MHE__CF(tie_embeddings), 0, 1, 0, "LM head shares tok_emb.weight (0/1)", 0 },
    { "dropout", MHE__F_FLOAT, MHE__CF(dropout), 0, 0.99, 0, "embedding and residual dropout", 0 },
    { "attn_dropout", MHE__F_FLOAT, MHE__CF(attn_dropout), 0, 0.99, 0, "dropout on attention weights", 0 },
    { "init_std", MHE__F_FLOAT, MHE__CF(init_std), 1e-6, 10, 0, "std of the normal weight init", 0 },
    { "fused_attention", MHE__F_INT, MHE__CF(fused_attention), 0, 1, 0, "1: fused online-softmax core, 0: reference core", 0 },
    { "mask_token", MHE__F_INT, MHE__CF(mask_token), -1, 16777215, 0, "encoder: [MASK] id for masked LM (-1: vocab_size-1)", 0 },
    { "n_classes", MHE__F_INT, MHE__CF(n_classes), 0, 1048576, 0, "encoder: classes of the classification head (0: none)", 0 },
    { "head_init_std", MHE__F_FLOAT, MHE__CF(head_init_std), -1, 10, 0, "std of the MHE head-embedding init (-1: init_std)", 0 },
    { "enc_layers", MHE__F_INT, MHE__CF(enc_layers), 0, MHE_MAX_LAYERS - 1, 0, "encdec: encoder blocks", 1 },
    { "enc_attn", MHE__F_ATTN, MHE__CF(enc_attn), 0, 0, 0, "encdec: encoder self-attention kind(s)", 1 },
    { "cross_attn", MHE__F_ATTN, MHE__CF(cross_attn), 0, 0, 0, "encdec: decoder cross-attention kind(s)", 1 },
    { "admin", MHE__F_INT, MHE__CF(admin), 0, 1, 0, "post-norm: Admin residual scales (Liu et al. 2020) (0/1)", 1 },
    { "embedding", MHE__F_ENUM, MHE__CF(embedding), 0, 0, "vocab|hash-emb|hash-pool|hash-add|hash-proj",
      "token embedding: a vocabulary table or a HashFormers hash embedding of words", 1 },
    { "hash", MHE__F_ENUM, MHE__CF(hash), 0, 0, "md5|lsh", "hash embeddings: how a word becomes a bucket or bits", 1 },
    { "hash_bits", MHE__F_INT, MHE__CF(hash_bits), 1, MHE_HASH_MAX_BITS, 0, "T: bits of hash-pool/add/proj (md5: <= 128)", 1 },
    { "hash_buckets", MHE__F_INT, MHE__CF(hash_buckets), 1, 2147483647.0, 0, "N: buckets of hash-emb", 1 },
    { "hash_chunk", MHE__F_INT, MHE__CF(hash_chunk), 1, 24, 0, "k: bits per codeword of hash-pool", 1 },
    { "hash_key", MHE__F_INT, MHE__CF(hash_key), 0, 1, 0, "md5: 1 HMAC-MD5 with key \"en\" (authors' code), 0 plain MD5", 1 },
    { "lsh_features", MHE__F_ENUM, MHE__CF(lsh_features), 0, 0, "hashed|table", "LSH n-gram features: hashed mod F, or a corpus top-K table", 1 },
    { "lsh_dim", MHE__F_INT, MHE__CF(lsh_dim), 1, 2147483647.0, 0, "LSH: feature dimension F (hashed) or n-grams kept K (table)", 1 },
    { "lsh_eta", MHE__F_INT, MHE__CF(lsh_eta), 0, 2147483647.0, 0, "LSH: length P of eta (0: the feature dimension)", 1 },
    { "lsh_pad", MHE__F_INT, MHE__CF(lsh_pad), 0, 1, 0, "LSH: 1 takes the n-grams of \" word \"", 1 },
    { "lsh_nmin", MHE__F_INT, MHE__CF(lsh_nmin), 1, 4, 0, "LSH: shortest n-gram", 1 },
    { "lsh_nmax", MHE__F_INT, MHE__CF(lsh_nmax), 1, 4, 0, "LSH: longest n-gram", 1 },
    { "lsh_seed", MHE__F_U64, MHE__CF(lsh_seed), 0, 0, 0, "LSH: seed of eta", 1 },
    { "token_head", MHE__F_ENUM, MHE__CF(token_head), 0, 0, "lm|sr", "per-token head: vocabulary softmax (lm) or Shuffle+Random (sr)", 1 },
    { "layout", MHE__F_ENUM, MHE__CF(layout), 0, 0, "none|even|odd|top|middle|bottom|25%|first|last|bilateral",
      "hybrid layout: layers that keep mha (thesis Table 4.11); attn=KIND@LAYOUT sets both", 1 },
    { "fixed_seed", MHE__F_U64, MHE__CF(fixed_seed), 0, 0, 0, "rndemb-qk: seed of the fixed random embeddings", 1 },
    { "fixed_std", MHE__F_FLOAT, MHE__CF(fixed_std), -1, 100, 0, "rndemb-qk: their std (-1: init_std)", 1 },
    { "fixed_seq", MHE__F_TEXT, MHE__CF(fixed_seq), 0, MHE_FIXED_SEQ_MAX, 0,
      "fixedseq-qk: the fixed text (bytes as tokens) or ids:ID ID ..., cycled (empty: a built-in text)", 1 },
    { "collab_dim", MHE__F_INT, MHE__CF(collab_dim), 0, 1048576, 0, "collab: shared query/key width D~ (0: n_heads*d_head)", 1 },
    { "collab_mix_std", MHE__F_FLOAT, MHE__CF(collab_mix_std), 0, 10, 0, "collab: std of the mixing matrix init (0: blocks of ones)", 1 },
    { "init_residual", MHE__F_ENUM, MHE__CF(init_residual), 0, 0, "plain|scaled",
      "residual-output init (W^O, fc2): plain N(0, init_std), or scaled by 1/sqrt(residual branches) as GPT-2", 1 },
    { "emb_norm", MHE__F_INT, MHE__CF(emb_norm), 0, 1, 0, "a norm over the summed embeddings before the first block, as BERT (0/1)", 1 },
    { "type_vocab", MHE__F_INT, MHE__CF(type_vocab), 0, 65536, 0, "rows of BERT's token-type (segment) table; a batch without types is type 0 (0: none)", 1 },
    { "head_transform", MHE__F_INT, MHE__CF(head_transform), 0, 1, 0, "LM head input norm(act(W h + b)), BERT's MLM transform (0/1)", 1 },
    { "head_bias", MHE__F_INT, MHE__CF(head_bias), 0, 1, 0, "a bias on the LM head's logits (0/1)", 1 },
    { "cls_pool", MHE__F_ENUM, MHE__CF(cls_pool), 0, 0, "mean|first",
      "classification input: mean of the tokens, or tanh(W h_0 + b) of the first (BERT's pooler)", 1 },
};
#define MHE__N_CONFIG_FIELDS ((int)(sizeof mhe__config_fields / sizeof mhe__config_fields[0]))

#define MHE__TF(name) offsetof(mhe_train_config, name)
static const mhe__field mhe__train_fields[] = {
    { "steps", MHE__F_INT, MHE__TF(steps), 0, 2147483647.0, 0, "optimizer steps", 0 },
    { "batch", MHE__F_INT, MHE__TF(batch), 1, 1048576, 0, "sequences per batch", 0 },
    { "seq_len", MHE__F_INT, MHE__TF(seq_len), 1, 1048576, 0, "tokens per sequence", 0 },
    { "lr", MHE__F_FLOAT, MHE__TF(lr), 0, 100, 0, "peak learning rate", 0 },
    { "min_lr", MHE__F_FLOAT, MHE__TF(min_lr), 0, 100, 0, "learning rate at the end of decay", 0 },
    { "warmup", MHE__F_INT, MHE__TF(warmup), 0, 2147483647.0, 0, "linear warmup steps", 0 },
    { "schedule", MHE__F_ENUM, MHE__TF(schedule), 0, 0, "constant|linear|cosine|invsqrt|cosine-restarts", "learning-rate schedule", 0 },
    { "cycles", MHE__F_INT, MHE__TF(cycles), 1, 1000000, 0, "hard restarts of cosine-restarts", 0 },
    { "beta1", MHE__F_FLOAT, MHE__TF(beta1), 0, 0.999999, 0, "AdamW beta1", 0 },
    { "beta2", MHE__F_FLOAT, MHE__TF(beta2), 0, 0.999999, 0, "AdamW beta2", 0 },
    { "eps", MHE__F_FLOAT, MHE__TF(eps), 1e-30, 1, 0, "AdamW epsilon", 0 },
    { "weight_decay", MHE__F_FLOAT, MHE__TF(weight_decay), 0, 10, 0, "decoupled weight decay", 0 },
    { "clip", MHE__F_FLOAT, MHE__TF(clip), 0, 1e30, 0, "global gradient-norm clip (0: off)", 0 },
    { "seed", MHE__F_U64, MHE__TF(seed), 0, 0, 0, "seed of batches and dropout", 0 },
    { "eval_every", MHE__F_INT, MHE__TF(eval_every), 0, 2147483647.0, 0, "validate every N steps (0: never)", 0 },
    { "eval_batches", MHE__F_INT, MHE__TF(eval_batches), 1, 1000000, 0, "validation batches", 0 },
    { "save_every", MHE__F_INT, MHE__TF(save_every), 0, 2147483647.0, 0, "checkpoint every N steps (0: at the end only)", 0 },
    { "log_every", MHE__F_INT, MHE__TF(log_every), 1, 2147483647.0, 0, "progress line every N steps", 0 },
    { "mlm_prob", MHE__F_FLOAT, MHE__TF(mlm_prob), 0.001, 1, 0, "encoder masked LM: share of positions predicted", 0 },
    { "src_len", MHE__F_INT, MHE__TF(src_len), 0, 1048576, 0, "encdec: source tokens per example (0: seq_len)", 1 },
    { "sr_prob", MHE__F_FLOAT, MHE__TF(sr_prob), 0, 1, 0, "Shuffle+Random: probability to shuffle a token (and to replace one of the rest)", 1 },
};
#define MHE__N_TRAIN_FIELDS ((int)(sizeof mhe__train_fields / sizeof mhe__train_fields[0]))

static int mhe__enum_index(const char *names, const char *value) {
    int idx = 0;
    size_t n = strlen(value);
    const char *p = names;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return idx;
        idx++;
        p += len + (e ? 1 : 0);
    }
    return -1;
}

static void mhe__enum_name(const char *names, int idx, char *out, size_t cap) {
    const char *p = names;
    size_t len;
    while (idx-- > 0 && p) { p = strchr(p, '|'); if (p) p++; }
    if (!p) { if (cap) out[0] = 0; return; }
    len = strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p);
    if (len >= cap) len = cap - 1;
    memcpy(out, p, len);
    out[len] = 0;
}

static int mhe__is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static mhe_status mhe__parse_i64(const char *s, int64_t *out) {
    int64_t v = 0;
    int neg = 0, digits = 0;
    if (*s == '-' || *s == '+') neg = (*s++ == '-');
    for (; *s >= '0' && *s <= '9'; s++, digits++) {
        if (v > (INT64_MAX - (*s - '0')) / 10) return MHE_ERR_OVERFLOW;
        v = v * 10 + (*s - '0');
    }
    if (!digits || *s) return MHE_ERR_CONFIG;
    *out = neg ? -v : v;
    return MHE_OK;
}

static mhe_status mhe__parse_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return MHE_ERR_OVERFLOW;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (!digits || *s) return MHE_ERR_CONFIG;
    *out = v;
    return MHE_OK;
}

/* strict decimal float: digits, one '.', optional exponent; no hex, inf or nan */
static mhe_status mhe__parse_float(const char *s, double *out) {
    double v = 0, scale = 1;
    int neg = 0, digits = 0, e = 0, eneg = 0, edigits = 0;
    if (*s == '-' || *s == '+') neg = (*s++ == '-');
    for (; *s >= '0' && *s <= '9'; s++, digits++) v = v * 10 + (*s - '0');
    if (*s == '.') for (s++; *s >= '0' && *s <= '9'; s++, digits++) { scale /= 10; v += (*s - '0') * scale; }
    if (!digits) return MHE_ERR_CONFIG;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '-' || *s == '+') eneg = (*s++ == '-');
        for (; *s >= '0' && *s <= '9'; s++, edigits++) if (e < 400) e = e * 10 + (*s - '0');
        if (!edigits) return MHE_ERR_CONFIG;
        v *= pow(10.0, eneg ? -e : e);
    }
    if (*s || !(v <= DBL_MAX)) return MHE_ERR_CONFIG;
    *out = neg ? -v : v;
    return MHE_OK;
}

static mhe_status mhe__field_set(const mhe__field *fields, int nf, void *obj, const char *what,
                                 const char *key, const char *value, char *err) {
    int i;
    for (i = 0; i < nf; i++) {
        const mhe__field *f = &fields[i];
        unsigned char *p = (unsigned char *)obj + f->offset;
        if (strcmp(f->key, key) != 0) continue;
        if (f->type == MHE__F_INT) {
            int64_t v;
            if (mhe__parse_i64(value, &v) != MHE_OK)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': '%s' is not an integer", what, key, value);
            if ((double)v < f->lo || (double)v > f->hi)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': %s is out of range [%.0f, %.0f]", what, key, value, f->lo, f->hi);
            *(int *)(void *)p = (int)v;
        } else if (f->type == MHE__F_U64) {
            uint64_t v;
            if (mhe__parse_u64(value, &v) != MHE_OK)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': '%s' is not an unsigned integer", what, key, value);
            *(uint64_t *)(void *)p = v;
        } else if (f->type == MHE__F_FLOAT) {
            double v;
            if (mhe__parse_float(value, &v) != MHE_OK)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': '%s' is not a number", what, key, value);
            /* judge the float that is stored, as validate does: 0.99 is in [0, 0.99] */
            if (!((float)v >= (float)f->lo && (float)v <= (float)f->hi))
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': %s is out of range [%g, %g]", what, key, value, f->lo, f->hi);
            *(float *)(void *)p = (float)v;
        } else if (f->type == MHE__F_ENUM) {
            int idx = mhe__enum_index(f->names, value);
            if (idx < 0) return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': unknown value '%s' (expected %s)", what, key, value, f->names);
            *(int *)(void *)p = idx;
        } else if (f->type == MHE__F_TEXT) {
            size_t n = strlen(value), j;
            if (n > (size_t)f->hi)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': %zu bytes, at most %.0f", what, key, n, f->hi);
            for (j = 0; j < n; j++)
                if ((unsigned char)value[j] < 0x20 || (unsigned char)value[j] == 0x7f)
                    return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': control byte %d at %zu", what, key, (unsigned char)value[j], j);
            memset(p, 0, (size_t)f->hi + 1);
            memcpy(p, value, n);
        } else { /* MHE__F_ATTN: one kind for all layers, or a comma list (rest set to -1); attn=KIND@LAYOUT */
            int *kinds = (int *)(void *)p, n = 0, j, layout = -1;
            const char *s = value, *at = strchr(value, '@');
            char name[32], vbuf[MHE_MAX_LAYERS * 16];
            int tmp[MHE_MAX_LAYERS];
            if (at) {   /* the hybrid layouts of thesis Table 4.11 */
                const mhe__field *lf = NULL;
                int q;
                for (q = 0; q < nf; q++) if (strcmp(fields[q].key, "layout") == 0) lf = &fields[q];
                if (!lf || strcmp(key, "attn") != 0)
                    return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': only attn takes KIND@LAYOUT", what, key);
                if ((layout = mhe__enum_index(lf->names, at + 1)) < 0)
                    return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': unknown layout '%s' (expected %s)", what, key, at + 1, lf->names);
                if ((size_t)(at - value) >= sizeof vbuf) return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': too long", what, key);
                memcpy(vbuf, value, (size_t)(at - value));
                vbuf[at - value] = 0;
                s = value = vbuf;
                *(int *)(void *)((unsigned char *)obj + lf->offset) = layout;
            }
            while (1) {
                const char *e = strchr(s, ',');
                size_t len;
                int kind;
                while (mhe__is_space(*s)) s++;   /* "mha, gqa" reads as "mha,gqa" */
                len = e ? (size_t)(e - s) : strlen(s);
                while (len > 0 && mhe__is_space(s[len - 1])) len--;
                if (len == 0 || len >= sizeof name)
                    return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': empty or too long kind name in '%s'", what, key, value);
                memcpy(name, s, len); name[len] = 0;
                kind = mhe_attn_kind_from_name(name);
                if (kind < 0)
                    return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': unknown attention kind '%s' (not mhe's, nor "
                                     "registered by this program)", what, key, name);
                if (n == MHE_MAX_LAYERS) return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': more than %d kinds", what, key, MHE_MAX_LAYERS);
                tmp[n++] = kind;
                if (!e) break;
                s = e + 1;
            }
            for (j = 0; j < MHE_MAX_LAYERS; j++) kinds[j] = n == 1 ? tmp[0] : (j < n ? tmp[j] : -1);
        }
        return MHE_OK;
    }
    return mhe__fail(err, MHE_ERR_CONFIG, "unknown %s field '%s'", what, key);
}

static int mhe__field_get(const mhe__field *fields, int nf, const void *obj, int i, const char **key,
                          char *value, size_t cap) {
    const mhe__field *f;
    const unsigned char *p;
    if (i < 0 || i >= nf) return 0;
    f = &fields[i];
    p = (const unsigned char *)obj + f->offset;
    *key = f->key;
    if (f->type == MHE__F_INT) snprintf(value, cap, "%d", *(const int *)(const void *)p);
    else if (f->type == MHE__F_U64) snprintf(value, cap, "%llu", (unsigned long long)*(const uint64_t *)(const void *)p);
    else if (f->type == MHE__F_FLOAT) snprintf(value, cap, "%.9g", (double)*(const float *)(const void *)p);
    else if (f->type == MHE__F_ENUM) mhe__enum_name(f->names, *(const int *)(const void *)p, value, cap);
    else if (f->type == MHE__F_TEXT) snprintf(value, cap, "%s", (const char *)p);
    else {
        const int *kinds = (const int *)(const void *)p;
        int n = 0, same = 1, j;
        size_t used = 0;
        while (n < MHE_MAX_LAYERS && kinds[n] >= 0) { if (kinds[n] != kinds[0]) same = 0; n++; }
        if (cap) value[0] = 0;
        /* one name only when it fills every slot, so that the text sets the same array */
        for (j = 0; j < (same && n == MHE_MAX_LAYERS ? 1 : n); j++) {
            int w = snprintf(value + used, cap - used, "%s%s", j ? "," : "", mhe_attn_kind_name(kinds[j]));
            if (w < 0 || (size_t)w >= cap - used) break;
            used += (size_t)w;
        }
    }
    return 1;
}

MHEDEF mhe_status mhe_config_set(mhe_config *c, const char *key, const char *value, char *err) {
    return mhe__field_set(mhe__config_fields, MHE__N_CONFIG_FIELDS, c, "config", key, value, err);
}

MHEDEF int mhe_config_field(const mhe_config *c, int i, const char **key, char *value, size_t value_len) {
    return mhe__field_get(mhe__config_fields, MHE__N_CONFIG_FIELDS, c, i, key, value, value_len);
}

MHEDEF mhe_status mhe_train_config_set(mhe_train_config *c, const char *key, const char *value, char *err) {
    return mhe__field_set(mhe__train_fields, MHE__N_TRAIN_FIELDS, c, "train", key, value, err);
}

MHEDEF int mhe_train_config_field(const mhe_train_config *c, int i, const char **key, char *value, size_t value_len) {
    return mhe__field_get(mhe__train_fields, MHE__N_TRAIN_FIELDS, c, i, key, value, value_len);
}

/* the key of one raw `key = value # comment` line, spaces trimmed; 0 when it has none */
static size_t mhe__line_key(const char *line, size_t n, const char **key) {
    size_t i = 0, e;
    while (i < n && mhe__is_space(line[i])) i++;
    for (e = i; e < n && line[e] != '=' && line[e] != '#'; e++) {}
    if (e == n || line[e] != '=') return 0;
    *key = line + i;
    while (e > i && mhe__is_space(line[e - 1])) e--;
    return e - i;
}

/* the line before byte `end` of text where `key` was set, or 0 */
static int mhe__key_line(const char *text, size_t end, const char *key, size_t klen) {
    size_t pos = 0;
    int line = 0;
    while (pos < end) {
        size_t e = pos, n;
        const char *k = NULL;   /* set when n > 0; arm-none-eabi-gcc -Os cannot see that */
        while (e < end && text[e] != '\n') e++;
        line++;
        n = mhe__line_key(text + pos, e - pos, &k);
        if (k != NULL && n == klen && memcmp(k, key, n) == 0) return line;   /* k is NULL on a line with no key */
        pos = e + 1;
    }
    return 0;
}

/* `key=value` lines; calls set(obj, key, value) for each. A key set twice is
   refused: the last one winning silently hides a typo or a stale line */
static mhe_status mhe__parse_lines(const char *text, size_t len, void *obj,
                                   mhe_status (*set)(void *, const char *, const char *, char *), char *err) {
    size_t pos = 0, i;
    int line = 1;
    /* a UTF-8 byte-order mark (EF BB BF), as some editors write, starts the
       file; anywhere else it is a stray invisible character */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) { text += 3; len -= 3; }
    else if (len >= 2 && ((unsigned char)text[0] == 0xFF || (unsigned char)text[0] == 0xFE) &&
             ((unsigned char)text[1] ^ (unsigned char)text[0]) == 0x01)
        return mhe__fail(err, MHE_ERR_CONFIG, "the file starts with a UTF-16 byte-order mark: save it as UTF-8 (or ASCII)");
    for (i = 0; i + 3 <= len; i++) {
        if (text[i] == '\n') line++;
        if (memcmp(text + i, "\xEF\xBB\xBF", 3) == 0)
            return mhe__fail(err, MHE_ERR_CONFIG, "line %d: a UTF-8 byte-order mark (bytes EF BB BF) inside the text; only the file's first bytes may hold one", line);
    }
    line = 0;
    while (pos < len) {
        char buf[512], *eq, *k, *v, *end;
        size_t e = pos, n, start = pos;
        mhe_status st;
        int first;
        line++;
        while (e < len && text[e] != '\n') e++;
        n = e - pos;
        if (n >= sizeof buf) return mhe__fail(err, MHE_ERR_CONFIG, "line %d: longer than %d characters", line, (int)sizeof buf - 1);
        memcpy(buf, text + pos, n); buf[n] = 0;
        pos = e + 1;
        if (memchr(buf, 0, n)) return mhe__fail(err, MHE_ERR_CONFIG, "line %d: contains a NUL byte", line);
        if ((eq = strchr(buf, '#')) != NULL) *eq = 0;
        k = buf;
        while (mhe__is_space(*k)) k++;
        if (!*k) continue;
        eq = strchr(k, '=');
        if (!eq) return mhe__fail(err, MHE_ERR_CONFIG, "line %d: expected key=value, got '%s'", line, k);
        *eq = 0; v = eq + 1;
        for (end = eq; end > k && mhe__is_space(end[-1]); end--) end[-1] = 0;
        while (mhe__is_space(*v)) v++;
        for (end = v + strlen(v); end > v && mhe__is_space(end[-1]); end--) end[-1] = 0;
        if ((first = mhe__key_line(text, start, k, strlen(k))) != 0)
            return mhe__fail(err, MHE_ERR_CONFIG, "line %d: key '%.100s' was already set on line %d", line, k, first);
        st = set(obj, k, v, err);
        if (st != MHE_OK) {
            char tmp[MHE_ERR_LEN];
            if (err) { memcpy(tmp, err, MHE_ERR_LEN); snprintf(err, MHE_ERR_LEN, "line %d: %.200s", line, tmp); }
            return st;
        }
    }
    return MHE_OK;
}

static mhe_status mhe__config_set_v(void *o, const char *k, const char *v, char *err) { return mhe_config_set((mhe_config *)o, k, v, err); }
MHEDEF mhe_status mhe_config_parse(mhe_config *c, const char *text, size_t len, char *err) {
    return mhe__parse_lines(text, len, c, mhe__config_set_v, err);
}

/* a per-layer list of kinds: one kind for all layers, or exactly n of them */
static mhe_status mhe__check_kinds(const int *kinds, int n, const char *key, const char *count_key, char *err) {
    int k = 0;
    while (k < MHE_MAX_LAYERS && kinds[k] >= 0) {
        if (kinds[k] >= mhe_attn_kind_count()) return mhe__fail(err, MHE_ERR_CONFIG, "%s: invalid kind %d for layer %d", key, kinds[k], k);
        k++;
    }
    if (k < n || (k > n && k < MHE_MAX_LAYERS))
        return mhe__fail(err, MHE_ERR_CONFIG, "%s lists %d kinds but %s is %d", key, k, count_key, n);
    return MHE_OK;
}

/* the word-embedding fields: hash embeddings have no vocabulary softmax,
   and the sizes must fit the hash (thesis sec. 2.3) */
static mhe_status mhe__check_embedding(const mhe_config *c, char *err) {
    const char *name;
    int64_t P = c->lsh_eta > 0 ? c->lsh_eta : c->lsh_dim, T = c->hash_bits, N = c->hash_buckets, C = c->d_model;
    if (c->embedding == MHE_EMB_VOCAB) return MHE_OK;   /* the hash fields are unused */
    name = mhe_hash_kind_name(c->embedding - 1);
    if (c->arch == MHE_ARCH_ENCDEC)
        return mhe__fail(err, MHE_ERR_CONFIG, "embedding=%s embeds words; arch=encdec takes token ids only (use arch=encoder or decoder)", name);
    if (c->token_head == MHE_HEAD_LM)
        return mhe__fail(err, MHE_ERR_CONFIG, "embedding=%s has no vocabulary, so no LM head or masked LM (no softmax over words exists): set token_head=sr (Shuffle+Random)", name);
    if (c->mask_token >= 0)
        return mhe__fail(err, MHE_ERR_CONFIG, "mask_token %d: masked LM needs a vocabulary softmax, which embedding=%s does not have", c->mask_token, name);
    if (c->embedding == MHE_EMB_HASH_EMB) {
        if (N * C > ((int64_t)1 << 31) - 1) return mhe__fail(err, MHE_ERR_OVERFLOW, "hash_buckets %lld x d_model %lld: the table exceeds 2^31 elements", (long long)N, (long long)C);
        if (c->hash == MHE_WORD_HASH_LSH && (N % 2 || N < 2))
            return mhe__fail(err, MHE_ERR_CONFIG, "hash_buckets %lld: LSH buckets are an argmax over N/2 projections and their negations, so N must be even and >= 2", (long long)N);
        if (c->hash == MHE_WORD_HASH_LSH && N / 2 > P)
            return mhe__fail(err, MHE_ERR_CONFIG, "hash_buckets %lld: N/2 = %lld hyperplanes are shifts of eta, which has only P = %lld entries (lsh_eta, or lsh_dim)", (long long)N, (long long)(N / 2), (long long)P);
        return MHE_OK;
    }
    if (c->hash == MHE_WORD_HASH_MD5 && T > 128)
        return mhe__fail(err, MHE_ERR_CONFIG, "hash_bits %lld: an MD5 digest has 128 bits, T must be <= 128", (long long)T);
    if (c->hash == MHE_WORD_HASH_LSH && T > P)
        return mhe__fail(err, MHE_ERR_CONFIG, "hash_bits %lld: T hyperplanes are shifts of eta, which has only P = %lld entries (lsh_eta, or lsh_dim)", (long long)T, (long long)P);
    if (c->hash == MHE_WORD_HASH_LSH && c->lsh_nmin > c->lsh_nmax)
        return mhe__fail(err, MHE_ERR_CONFIG, "lsh_nmin %d is larger than lsh_nmax %d", c->lsh_nmin, c->lsh_nmax);
    if (c->embedding == MHE_EMB_HASH_POOL) {
        if (c->hash_chunk > T)
            return mhe__fail(err, MHE_ERR_CONFIG, "hash_chunk k = %d is larger than hash_bits T = %lld: the one chunk would use 2^T of the 2^k codewords", c->hash_chunk, (long long)T);
        if ((((int64_t)1 << c->hash_chunk) + 1) * C > ((int64_t)1 << 31) - 1)
            return mhe__fail(err, MHE_ERR_OVERFLOW, "hash_chunk %d: the codebook of 2^k + 1 rows x d_model %lld exceeds 2^31 elements", c->hash_chunk, (long long)C);
    }
    if (2 * T * C > ((int64_t)1 << 31) - 1)
        return mhe__fail(err, MHE_ERR_OVERFLOW, "hash_bits %lld x d_model %lld: a hash embedding tensor exceeds 2^31 elements", (long long)T, (long long)C);
    return MHE_OK;
}

/* where the kinds of thesis ch. 4 and FNet make sense (docs/kinds.md, Deconstructing attention) */
static mhe_status mhe__check_decon(const mhe_config *c, char *err) {
    int i, E = c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0, rnd = 0, seq = 0;
    for (i = 0; i < c->n_layers + E; i++) {
        int enc = i >= c->n_layers, l = enc ? i - c->n_layers : i, k = enc ? c->enc_attn[l] : mhe_config_layer_kind(c, l);
        const char *where = enc ? "encoder layer" : "layer";
        if (!mhe__kind(k)->causal && !enc && c->arch != MHE_ARCH_ENCODER)
            return mhe__fail(err, MHE_ERR_CONFIG, "layer %d is %s: it mixes the whole sequence and cannot be causal; "
                             "use it in an encoder (arch=encoder, or enc_attn of encdec)", l, mhe_attn_kind_name(k));
        if (!mhe__kind(k)->encdec && c->arch == MHE_ARCH_ENCDEC)
            return mhe__fail(err, MHE_ERR_CONFIG, "%s %d is %s: its fixed stream runs through decoder or encoder models "
                             "(arch=decoder|encoder), not encdec", where, l, mhe_attn_kind_name(k));
        rnd |= mhe__kind(k)->qk == MHE__QK_RANDOM;
        seq |= mhe__kind(k)->qk == MHE__QK_SEQUENCE;
    }
    for (i = 0; E && i < c->n_layers; i++) {
        int k = c->cross_attn[i];
        const char *why = mhe__kind(k)->no_cross;
        if (why) return mhe__fail(err, MHE_ERR_CONFIG, "cross-attention of layer %d is %s: %s", i, mhe_attn_kind_name(k), why);
    }
    if (rnd && seq) return mhe__fail(err, MHE_ERR_CONFIG, "rndemb-qk and fixedseq-qk layers in one model: it has one fixed stream");
    if (seq) {
        int tok[MHE_FIXED_SEQ_MAX], len = mhe__fixed_seq_tokens(c, tok, err), j;
        if (len < 0) return MHE_ERR_CONFIG;
        if (len > c->max_seq_len)
            return mhe__fail(err, MHE_ERR_CONFIG, "fixed_seq has %d tokens, more than max_seq_len %d", len, c->max_seq_len);
        if (len == 0) return mhe__fail(err, MHE_ERR_CONFIG, "fixed_seq has no tokens");
        for (j = 0; j < len; j++)
            if (tok[j] >= c->vocab_size)
                return mhe__fail(err, MHE_ERR_CONFIG, "fixed_seq token %d at %d is outside the vocabulary [0, %d)", tok[j], j, c->vocab_size);
    }
    return MHE_OK;
}

/* does any sublayer of any stack run `kind`? */
static int mhe__has_kind(const mhe_config *c, int kind) {
    int l, E = c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0;
    for (l = 0; l < c->n_layers && l < MHE_MAX_LAYERS; l++)
        if (mhe_config_layer_kind(c, l) == kind || (E && c->cross_attn[l] == kind)) return 1;
    for (l = 0; l < E && l < MHE_MAX_LAYERS; l++) if (c->enc_attn[l] == kind) return 1;
    return 0;
}

/* 1 when a layer's Q and K come from the fixed stream (rndemb-qk, fixedseq-qk) */
static int mhe__has_fixed_stream(const mhe_config *c) {
    int k;
    for (k = 0; k < mhe_attn_kind_count(); k++)
        if (mhe__kind_fixed(k) && mhe__has_kind(c, k)) return 1;
    return 0;
}

/* every int, float and enum field of a struct within its table's range;
   what: "config" or "train", for the message */
static mhe_status mhe__check_fields(const mhe__field *fields, int n, const void *obj, const char *what, char *err) {
    int i;
    for (i = 0; i < n; i++) {
        const mhe__field *f = &fields[i];
        const void *p = (const unsigned char *)obj + f->offset;
        if (f->type == MHE__F_INT) {
            int v = *(const int *)p;
            if (v < f->lo || v > f->hi)
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': %d is out of range [%.0f, %.0f]", what, f->key, v,
                                 f->lo, f->hi);
        } else if (f->type == MHE__F_FLOAT) {
            float v = *(const float *)p;
            if (!(v >= (float)f->lo && v <= (float)f->hi))
                return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': %g is out of range [%g, %g]", what, f->key, (double)v,
                                 f->lo, f->hi);
        } else if (f->type == MHE__F_ENUM) {
            int v = *(const int *)p;
            char tmp[64];
            mhe__enum_name(f->names, v, tmp, sizeof tmp);
            if (v < 0 || !tmp[0]) return mhe__fail(err, MHE_ERR_CONFIG, "%s field '%s': invalid value %d", what, f->key, v);
        }
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_config_validate(const mhe_config *c, char *err) {
    int i, dh = mhe_config_d_head(c);
    mhe_status st;
    /* every field within its table range (catches values set directly in C) */
    if ((st = mhe__check_fields(mhe__config_fields, MHE__N_CONFIG_FIELDS, c, "config", err)) != MHE_OK) return st;
    if (c->d_head == 0 && c->d_model % c->n_heads != 0)
        return mhe__fail(err, MHE_ERR_CONFIG, "d_model %d is not divisible by n_heads %d (set d_head explicitly)", c->d_model, c->n_heads);
    if (dh < 1 || dh > MHE_MAX_D_HEAD)
        return mhe__fail(err, MHE_ERR_CONFIG, "head size %d is out of range [1, %d]", dh, MHE_MAX_D_HEAD);
    if ((st = mhe__check_kinds(c->attn, c->n_layers, "attn", "n_layers", err)) != MHE_OK) return st;
    if (c->arch == MHE_ARCH_ENCDEC) {
        if (c->enc_layers < 1) return mhe__fail(err, MHE_ERR_CONFIG, "arch=encdec needs enc_layers >= 1 (encoder blocks)");
        if (c->enc_layers + c->n_layers > MHE_MAX_LAYERS)
            return mhe__fail(err, MHE_ERR_CONFIG, "enc_layers %d + n_layers %d exceed %d blocks", c->enc_layers, c->n_layers, MHE_MAX_LAYERS);
        if ((st = mhe__check_kinds(c->enc_attn, c->enc_layers, "enc_attn", "enc_layers", err)) != MHE_OK) return st;
        if ((st = mhe__check_kinds(c->cross_attn, c->n_layers, "cross_attn", "n_layers", err)) != MHE_OK) return st;
    } else if (c->enc_layers != 0) {
        return mhe__fail(err, MHE_ERR_CONFIG, "enc_layers %d: only arch=encdec has an encoder stack", c->enc_layers);
    }
    if (c->mask_token >= c->vocab_size)
        return mhe__fail(err, MHE_ERR_CONFIG, "mask_token %d is outside the vocabulary [0, %d)", c->mask_token, c->vocab_size);
    if (c->admin && !c->post_norm)
        return mhe__fail(err, MHE_ERR_CONFIG, "admin=1 scales the residual of post-norm blocks: it needs norm_position=post");
    if (c->n_classes > 0 && c->arch != MHE_ARCH_ENCODER)
        return mhe__fail(err, MHE_ERR_CONFIG, "n_classes %d: the classification head needs arch=encoder", c->n_classes);
    if ((c->emb_norm || c->type_vocab) && c->arch == MHE_ARCH_ENCDEC)
        return mhe__fail(err, MHE_ERR_CONFIG, "%s: the embedding norm and token types are for arch=decoder or encoder, not encdec",
                         c->emb_norm ? "emb_norm=1" : "type_vocab");
    if ((c->emb_norm || c->type_vocab) && mhe__has_fixed_stream(c))
        return mhe__fail(err, MHE_ERR_CONFIG, "%s: the fixed stream of rndemb-qk and fixedseq-qk layers embeds without them",
                         c->emb_norm ? "emb_norm=1" : "type_vocab");
    if ((c->head_transform || c->head_bias) && (c->token_head != MHE_HEAD_LM || c->arch == MHE_ARCH_ENCDEC))
        return mhe__fail(err, MHE_ERR_CONFIG, "%s: the LM head's transform and bias need token_head=lm and arch=decoder or encoder",
                         c->head_transform ? "head_transform=1" : "head_bias=1");
    if (c->cls_pool != MHE_POOL_MEAN && c->n_classes <= 0)
        return mhe__fail(err, MHE_ERR_CONFIG, "cls_pool=first: the pooler feeds the classification head (n_classes > 0)");
    for (i = 0; i < c->n_layers; i++)
        if ((st = mhe__check_kind_geom(c, mhe_config_layer_kind(c, i), "layer", i, err)) != MHE_OK) return st;
    if ((st = mhe__check_decon(c, err)) != MHE_OK) return st;
    if (c->arch == MHE_ARCH_ENCDEC) {
        for (i = 0; i < c->enc_layers; i++)
            if ((st = mhe__check_kind_geom(c, c->enc_attn[i], "encoder layer", i, err)) != MHE_OK) return st;
        for (i = 0; i < c->n_layers; i++)
            if ((st = mhe__check_kind_geom(c, c->cross_attn[i], "cross-attention of layer", i, err)) != MHE_OK) return st;
    }
    if ((st = mhe__check_embedding(c, err)) != MHE_OK) return st;
    /* every GEMM dimension must fit an int and every tensor a size_t */
    if ((int64_t)c->n_heads * dh > 1048576 || (int64_t)c->vocab_size * c->d_model > ((int64_t)1 << 31) - 1 ||
        (int64_t)c->max_seq_len * c->d_model > ((int64_t)1 << 31) - 1 || (int64_t)mhe_config_d_ff(c) * c->d_model > ((int64_t)1 << 31) - 1)
        return mhe__fail(err, MHE_ERR_OVERFLOW, "model too large: a tensor would exceed 2^31 elements");
    return MHE_OK;
}

/* ---- 7. models: parameters ---------------------------------------------- */

/* The token embedding (thesis sec. 2.3): a vocabulary table, or a hash
   embedding with its special-token rows; all N(0, init_std) except the
   softmax logits of hash-pool and the scale-free axes of hash-proj, which
   get no weight decay (it would only flatten the pooling, or change the
   effective step size of a correlation that ignores the axes' scale). */
static void mhe__layout_embed(mhe__layout *L) {
    mhe_model *m = L->m;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, T = c->hash_bits;
    float std = c->init_std;
    if (c->embedding == MHE_EMB_VOCAB) {
        m->tok_emb = mhe__param(L, "tok_emb.weight", 2, c->vocab_size, C, 1, MHE_INIT_NORMAL, std);
        return;
    }
    m->special_emb = mhe__param(L, "special_emb.weight", 2, MHE_N_SPECIAL, C, 1, MHE_INIT_NORMAL, std);
    switch (c->embedding) {
    case MHE_EMB_HASH_EMB:   /* eq. 2.12: a table of N buckets */
        m->tok_emb = mhe__param(L, "tok_emb.weight", 2, c->hash_buckets, C, 1, MHE_INIT_NORMAL, std);
        return;
    case MHE_EMB_HASH_POOL:  /* eq. 2.1: codebook (row 0 reserved, as the kernels index it) and pooling logits */
        m->pool_codebook = mhe__param(L, "pool.codebook.weight", 2, ((int64_t)1 << c->hash_chunk) + 1, C, 1, MHE_INIT_NORMAL, std);
        m->pool_w = mhe__param(L, "pool.weight", 2, mhe_hash_pool_chunks(T, c->hash_chunk), C, 0, MHE_INIT_NORMAL, std);
        break;
    case MHE_EMB_HASH_ADD:   /* eq. 2.2: T two-row codebooks, stored [T, 2, C] */
        m->add_books = mhe__param(L, "add.books", 2, T, 2 * (int64_t)C, 1, MHE_INIT_NORMAL, std);
        if (m->add_books) { m->add_books->ndim = 3; m->add_books->shape[1] = 2; m->add_books->shape[2] = C; }
        break;
    default:                 /* eq. 2.3: d axes of length T ([C, T], nn.Linear layout) */
        m->proj_w = mhe__param(L, "proj.weight", 2, C, T, 0, MHE_INIT_NORMAL, std);
        break;
    }
    m->regular_emb = mhe__param(L, "regular_emb.weight", 1, C, 0, 1, MHE_INIT_NORMAL, std);
}

/* Memory order: embeddings, the encoder's blocks and final norm (encdec),
   the main stack's blocks, its final norm, the heads. Weights N(0, init_std),
   biases 0, norm gains 1, as the papers' HuggingFace models; init_residual=
   scaled starts the residual-output projections (W^O, fc2) at N(0, init_std /
   sqrt(residual branches of their stack)) instead, as GPT-2 does. */
static void mhe__layout_walk(mhe__layout *L) {
    mhe_model *m = L->m;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, F = mhe_config_d_ff(c), l, E = c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0;
    float std = c->init_std;
    char nm[MHE_NAME_LEN];
    L->prefix[0] = 0;
    m->n_total_layers = mhe_config_total_layers(c);
    mhe__layout_embed(L);
    m->pos_emb = mhe__param(L, "pos_emb.weight", 2, c->max_seq_len, C, 1, MHE_INIT_NORMAL, std);
    if (c->type_vocab) m->type_emb = mhe__param(L, "type_emb.weight", 2, c->type_vocab, C, 1, MHE_INIT_NORMAL, std);
    if (c->emb_norm) {
        m->emb_norm_w = mhe__param(L, "emb_norm.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
        if (c->norm == MHE_NORM_LAYERNORM) m->emb_norm_b = mhe__param(L, "emb_norm.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (E) m->enc_pos_emb = mhe__param(L, "enc.pos_emb.weight", 2, c->max_seq_len, C, 1, MHE_INIT_NORMAL, std);
    for (l = 0; l < m->n_total_layers; l++) {
        mhe_layer *y = &m->layers[l];
        int enc = l < E, idx = enc ? l : l - E, cross = E && !enc;
        float res_std = c->init_residual == MHE_INIT_RESIDUAL_PLAIN ? std
                      : std / sqrtf((float)(enc ? 2 * E : (cross ? 3 : 2) * c->n_layers));
        y->encoder = enc; y->index = idx;
        snprintf(L->prefix, sizeof L->prefix, "%s%d", enc ? "enc.layers." : "layers.", idx);
        /* names read "layers.3.attn.wq.weight": the block prefix goes first */
#define MHE__LP(field, suffix, nd, a, b, dec, init, sd) (snprintf(nm, sizeof nm, "%.24s.%.32s", L->prefix, suffix), \
                                                       y->field = mhe__param(L, nm, nd, a, b, dec, init, sd))
        MHE__LP(norm1_w, "norm1.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
        if (c->norm == MHE_NORM_LAYERNORM) MHE__LP(norm1_b, "norm1.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
        mhe__layout_attn(L, &y->attn, "attn", enc ? c->enc_attn[idx] : c->attn[idx], res_std);
        y->cross.kind = -1;
        if (cross) {
            MHE__LP(norm3_w, "norm3.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
            if (c->norm == MHE_NORM_LAYERNORM) MHE__LP(norm3_b, "norm3.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
            mhe__layout_attn(L, &y->cross, "cross", c->cross_attn[idx], res_std);
        }
        MHE__LP(norm2_w, "norm2.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
        if (c->norm == MHE_NORM_LAYERNORM) MHE__LP(norm2_b, "norm2.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
        MHE__LP(fc1_w, "mlp.fc1.weight", 2, F, C, 1, MHE_INIT_NORMAL, std);
        if (c->bias) MHE__LP(fc1_b, "mlp.fc1.bias", 1, F, 0, 0, MHE_INIT_ZERO, 0);
        MHE__LP(fc2_w, "mlp.fc2.weight", 2, C, F, 1, MHE_INIT_NORMAL, res_std);
        if (c->bias) MHE__LP(fc2_b, "mlp.fc2.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
        if (c->admin) {   /* trainable per-dimension residual scales, no weight decay */
            MHE__LP(omega[0], "omega1", 1, C, 0, 0, MHE_INIT_ONE, 0);
            if (cross) MHE__LP(omega[1], "omega3", 1, C, 0, 0, MHE_INIT_ONE, 0);
            MHE__LP(omega[2], "omega2", 1, C, 0, 0, MHE_INIT_ONE, 0);
        }
#undef MHE__LP
        if (enc && l == E - 1 && !c->post_norm) {   /* the encoder's final norm */
            m->enc_lnf_w = mhe__param(L, "enc.ln_f.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
            if (c->norm == MHE_NORM_LAYERNORM) m->enc_lnf_b = mhe__param(L, "enc.ln_f.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
        }
    }
    if (!c->post_norm) {
        m->lnf_w = mhe__param(L, "ln_f.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
        if (c->norm == MHE_NORM_LAYERNORM) m->lnf_b = mhe__param(L, "ln_f.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (c->head_transform) {
        m->head_w = mhe__param(L, "head.dense.weight", 2, C, C, 1, MHE_INIT_NORMAL, std);
        if (c->bias) m->head_b = mhe__param(L, "head.dense.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
        m->head_norm_w = mhe__param(L, "head.norm.weight", 1, C, 0, 0, MHE_INIT_ONE, 0);
        if (c->norm == MHE_NORM_LAYERNORM) m->head_norm_b = mhe__param(L, "head.norm.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (c->token_head == MHE_HEAD_LM && !c->tie_embeddings) m->lm_head = mhe__param(L, "lm_head.weight", 2, c->vocab_size, C, 1, MHE_INIT_NORMAL, std);
    if (c->head_bias) m->lm_b = mhe__param(L, "lm_head.bias", 1, c->vocab_size, 0, 0, MHE_INIT_ZERO, 0);
    if (c->cls_pool == MHE_POOL_FIRST) {
        m->pooler_w = mhe__param(L, "pooler.weight", 2, C, C, 1, MHE_INIT_NORMAL, std);
        if (c->bias) m->pooler_b = mhe__param(L, "pooler.bias", 1, C, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (c->n_classes > 0) {
        m->cls_w = mhe__param(L, "cls_head.weight", 2, c->n_classes, C, 1, MHE_INIT_NORMAL, std);
        if (c->bias) m->cls_b = mhe__param(L, "cls_head.bias", 1, c->n_classes, 0, 0, MHE_INIT_ZERO, 0);
    }
    if (c->token_head == MHE_HEAD_SR) {   /* the authors' 3-way token classifier, a linear layer */
        m->sr_w = mhe__param(L, "sr_head.weight", 2, MHE_SR_CLASSES, C, 1, MHE_INIT_NORMAL, std);
        if (c->bias) m->sr_b = mhe__param(L, "sr_head.bias", 1, MHE_SR_CLASSES, 0, 0, MHE_INIT_ZERO, 0);
    }
}

MHEDEF int64_t mhe_attn_param_count(const mhe_config *c, int kind, int with_wo, int with_bias) {
    if (!c || !mhe__kind_valid(kind)) return -1;
    return mhe__attn_count(c, kind, with_wo, with_bias);
}

static void mhe__fill_normal(float *x, int64_t n, float std, mhe_rng *r) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = std * mhe_rng_normal(r);
}

/* row i of [n, W] is 1 on columns [i b, (i+1) b), b = ceil(W / n): head i
   dot-products its own block, as a concatenated layer */
static void mhe__fill_blocks(float *x, int64_t n, int64_t W) {
    int64_t i, j, b = (W + n - 1) / n;
    for (i = 0; i < n; i++)
        for (j = 0; j < W; j++) x[i * W + j] = j >= i * b && j < (i + 1) * b ? 1.0f : 0.0f;
}

/* every tensor as its layout said (see mhe__layout_walk), in memory order */
static void mhe__init_weights(mhe_model *m, uint64_t seed) {
    mhe_rng r;
    int i;
    mhe_rng_seed(&r, seed);
    for (i = 0; i < m->n_tensors; i++) {
        mhe_tensor *t = &m->params[i];
        int64_t j;
        if (t->init == MHE_INIT_NORMAL) mhe__fill_normal(t->data, t->size, t->init_std, &r);
        else if (t->init == MHE_INIT_BLOCKS) mhe__fill_blocks(t->data, t->shape[0], t->shape[1]);
        else for (j = 0; j < t->size; j++) t->data[j] = t->init == MHE_INIT_ONE ? 1.0f : 0.0f;
    }
}

/* The fixed stream's input: rndemb-qk's eps ~ N(0, fixed_std^2) from
   fixed_seed (not trained: "constant across inputs", eq. 4.9; our reading,
   the thesis does not say), fixedseq-qk's text cycled to max_seq_len. */
static mhe_status mhe__fixed_init(mhe_model *m) {
    const mhe_config *c = &m->cfg;
    mhe_fixed_stream *f = &m->fixed;
    int l, C = c->d_model;
    f->kind = -1; f->top = 0;
    for (l = 0; l < c->n_layers && c->arch != MHE_ARCH_ENCDEC; l++)
        if (mhe__kind_fixed(c->attn[l])) { f->kind = c->attn[l]; f->top = l + 1; }
    if (f->kind >= 0 && mhe__kind(f->kind)->qk == MHE__QK_RANDOM) {
        mhe_rng r;
        float sd = c->fixed_std >= 0 ? c->fixed_std : c->init_std;
        f->eps = (float *)MHE_MALLOC(m->alloc_ctx, (size_t)c->max_seq_len * C * sizeof(float));
        if (!f->eps) goto nomem;
        mhe_rng_seed(&r, c->fixed_seed);
        mhe__fill_normal(f->eps, (int64_t)c->max_seq_len * C, sd, &r);
    } else if (f->kind >= 0 && mhe__kind(f->kind)->qk == MHE__QK_SEQUENCE) {   /* validated: 1 <= len <= max_seq_len */
        int tok[MHE_FIXED_SEQ_MAX], len = mhe__fixed_seq_tokens(c, tok, NULL), i;
        f->tokens = (int *)MHE_MALLOC(m->alloc_ctx, (size_t)c->max_seq_len * sizeof(int));
        if (!f->tokens) goto nomem;
        for (i = 0; i < c->max_seq_len; i++) f->tokens[i] = tok[i % len];
    }
    return MHE_OK;
nomem:
    {
        void *ctx = m->alloc_ctx;
        mhe_model_free(m);
        m->alloc_ctx = ctx;
        return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate the fixed stream's input");
    }
}

static mhe_status mhe__words_init(mhe_model *m);

/* the tensor table and the parameter floats of a config's layout (a
   count-only walk; it also sets the layer kinds of m) */
static mhe_status mhe__param_bytes(mhe_model *m, const mhe_config *cfg, size_t *tbytes, size_t *fbytes, int *count, int64_t *floats) {
    mhe__layout L;
    int ok = 1;
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    mhe__apply_layout(&m->cfg);   /* a named hybrid layout becomes the per-layer list */
    m->fixed.kind = -1;
    memset(&L, 0, sizeof L);
    L.m = m;
    mhe__layout_walk(&L);
    if (L.overflow) return MHE_ERR_OVERFLOW;
    *tbytes = mhe__mul_size((size_t)L.count, sizeof(mhe_tensor), &ok);
    *fbytes = mhe__mul_size((size_t)L.floats, sizeof(float), &ok);
    if (!ok || (int64_t)(size_t)L.floats != L.floats) return MHE_ERR_OVERFLOW;
    *count = L.count;
    *floats = L.floats;
    return MHE_OK;
}

/* a model laid out for cfg with memory from the hooks or an arena; without
   gradients (grads = 0) it runs forward passes until a trainer or a backward
   asks for them (mhe__model_grads). fill = 0: the weights are left for the
   loader, which writes every one of them */
static mhe_status mhe__model_init(mhe_model *m, const mhe_config *cfg, uint64_t seed, void *alloc_ctx, mhe_arena *arena, int grads,
                                  int in_place, int fill) {
    mhe__layout L;
    mhe_status st;
    size_t tbytes, fbytes;
    int count;
    int64_t floats;
    if (!m) return MHE_ERR_ARG;
    memset(m, 0, sizeof *m);
    m->alloc_ctx = alloc_ctx;
    if (!cfg) return mhe__fail(m->err, MHE_ERR_ARG, "mhe_model_init: config is NULL");
    if ((st = mhe_config_validate(cfg, m->err)) != MHE_OK) return st;
    if (mhe__param_bytes(m, cfg, &tbytes, &fbytes, &count, &floats) != MHE_OK) {
        memset(m, 0, sizeof *m);
        return mhe__fail(m->err, MHE_ERR_OVERFLOW, "parameter memory size overflows");
    }
    m->alloc_ctx = alloc_ctx;
    m->arena = arena;
    m->params = (mhe_tensor *)mhe__malloc(alloc_ctx, arena, tbytes);
    if (!in_place) m->param_data = (float *)mhe__malloc(alloc_ctx, arena, fbytes);
#ifdef MHE_NO_TRAIN
    grads = 0;   /* nothing in this build reads or writes a gradient */
#endif
    if (grads) m->grad_data = (float *)mhe__malloc(alloc_ctx, arena, fbytes);
    if (!m->params || (!in_place && !m->param_data) || (grads && !m->grad_data)) {
        mhe_model_free(m);
        m->alloc_ctx = alloc_ctx;
        return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes of parameters", (grads ? 2 : 1) * fbytes + tbytes);
    }
    if (grads) memset(m->grad_data, 0, fbytes);
    m->n_tensors = count;
    m->n_params = floats;
    m->bytes_params = (grads ? 2 : in_place ? 0 : 1) * fbytes + tbytes;
    memset(&L, 0, sizeof L);
    L.m = m;
    mhe__layout_walk(&L);
    if (!in_place && fill) mhe__init_weights(m, seed);   /* in place: the loader points the tensors at the weights */
    if ((st = mhe__words_init(m)) != MHE_OK) {
        char e[MHE_ERR_LEN];
        memcpy(e, m->err, MHE_ERR_LEN);
        mhe_model_free(m);
        m->alloc_ctx = alloc_ctx;
        memcpy(m->err, e, MHE_ERR_LEN);
        return st;
    }
    return mhe__fixed_init(m);
}

MHEDEF mhe_status mhe_model_init(mhe_model *m, const mhe_config *cfg, uint64_t seed, void *alloc_ctx) {
    return mhe__model_init(m, cfg, seed, alloc_ctx, NULL, 1, 0, 1);
}

/* the gradient block of a loaded model, allocated when training first needs
   it: loading for inference never pays for it. Arena, in-place and q8 models
   have none to get. */
#ifndef MHE_NO_TRAIN
static mhe_status mhe__model_grads(mhe_model *m) {
    size_t fbytes;
    int i, ok = 1;
    if (m->grad_data) return MHE_OK;
    if (m->q8) return mhe__fail(m->err, MHE_ERR_FORMAT, "the model has int8 (q8) weights, for inference only (no gradients)");
    if (m->arena || !m->param_data) return mhe__fail(m->err, MHE_ERR_ARG, "the model was loaded for inference only (no gradients)");
    fbytes = mhe__mul_size((size_t)m->n_params, sizeof(float), &ok);
    m->grad_data = ok ? (float *)MHE_MALLOC(m->alloc_ctx, fbytes) : NULL;
    if (!m->grad_data) return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes of gradients", fbytes);
    memset(m->grad_data, 0, fbytes);
    for (i = 0; i < m->n_tensors; i++) m->params[i].grad = m->grad_data + (m->params[i].data - m->param_data);
    m->bytes_params += fbytes;
    return MHE_OK;
}
#endif /* MHE_NO_TRAIN */

MHEDEF void mhe_model_free(mhe_model *m) {
    void *ctx;
    mhe_arena *ar;
    if (!m) return;
    ctx = m->alloc_ctx; ar = m->arena;
    mhe__free(ctx, ar, m->params);
    mhe__free(ctx, ar, m->param_data);
    mhe__free(ctx, ar, m->grad_data);
    mhe__free(ctx, ar, m->acts_block);
    if (m->q8_block) MHE_FREE(ctx, m->q8_block);   /* heap loads only */
    if (m->emb_in.block) MHE_FREE(ctx, m->emb_in.block);   /* word inputs: always from the hooks */
    mhe_lsh_free(&m->lsh);
    mhe_lexicon_free(&m->vocab);
#ifndef MHE_NO_TOKENIZERS   /* without them m->bpe stays NULL */
    if (m->bpe) { mhe_bpe_free(m->bpe); MHE_FREE(ctx, m->bpe); }
#endif
    if (m->fixed.eps) MHE_FREE(ctx, m->fixed.eps);
    if (m->fixed.tokens) MHE_FREE(ctx, m->fixed.tokens);
    if (m->fixed.block) MHE_FREE(ctx, m->fixed.block);
    memset(m, 0, sizeof *m);
}

MHEDEF mhe_tensor *mhe_model_find(mhe_model *m, const char *name) {
    int i;
    for (i = 0; i < m->n_tensors; i++) if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

#ifndef MHE_NO_TRAIN
MHEDEF void mhe_model_zero_grad(mhe_model *m) {
    if (m->grad_data) memset(m->grad_data, 0, (size_t)m->n_params * sizeof(float));
}
#endif /* MHE_NO_TRAIN */

/* ---- 7. models: word embeddings ------------------------------------------- */

static uint64_t mhe__fnv64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
    return h;
}

/* a fingerprint of everything that decides how a word embeds: word features
   made under another one are refused (they would silently mean other words) */
static uint64_t mhe__hash_sig(const mhe_model *m) {
    const mhe_config *c = &m->cfg;
    uint64_t h = 14695981039346656037ULL;
    int32_t f[12];
    int i, k = 0;
    memset(f, 0, sizeof f);
    f[k++] = c->embedding;
    if (c->embedding != MHE_EMB_VOCAB) {
        f[k++] = c->hash;
        f[k++] = c->embedding == MHE_EMB_HASH_EMB ? c->hash_buckets : c->hash_bits;
        if (c->hash == MHE_WORD_HASH_MD5) f[k++] = c->hash_key;
        else {
            f[k++] = c->lsh_features; f[k++] = c->lsh_dim; f[k++] = c->lsh_eta; f[k++] = c->lsh_pad;
            f[k++] = c->lsh_nmin; f[k++] = c->lsh_nmax;
            f[k++] = (int32_t)(uint32_t)c->lsh_seed; f[k++] = (int32_t)(uint32_t)(c->lsh_seed >> 32);
        }
    }
    for (i = 0; i < k; i++) { unsigned char b[4]; b[0] = (unsigned char)f[i]; b[1] = (unsigned char)(f[i] >> 8);
        b[2] = (unsigned char)(f[i] >> 16); b[3] = (unsigned char)((uint32_t)f[i] >> 24); h = mhe__fnv64(h, b, 4); }
    if (m->lsh_ready && m->lsh.table)
        for (i = 0; (size_t)i < m->lsh.table_len; i++) { unsigned char b[4]; uint32_t v = m->lsh.table[i];
            b[0] = (unsigned char)v; b[1] = (unsigned char)(v >> 8); b[2] = (unsigned char)(v >> 16); b[3] = (unsigned char)(v >> 24);
            h = mhe__fnv64(h, b, 4); }
    if (m->vocab.n) {   /* the words and where each ends */
        h = mhe__fnv64(h, m->vocab.text, m->vocab.text_len);
        for (i = 0; i <= m->vocab.n; i++) {
            uint64_t v = m->vocab.start[i];
            unsigned char b[8];
            int j;
            for (j = 0; j < 8; j++) b[j] = (unsigned char)(v >> (8 * j));
            h = mhe__fnv64(h, b, 8);
        }
    }
    return h ? h : 1;
}

static const char *mhe__emb_name(const mhe_config *c) {
    return c->embedding == MHE_EMB_VOCAB ? "vocab" : mhe_hash_kind_name(c->embedding - 1);
}

static mhe_lsh_config mhe__lsh_cfg(const mhe_config *c) {
    mhe_lsh_config l = mhe_lsh_config_default();
    l.feature_mode = c->lsh_features ? MHE_LSH_TABLE : MHE_LSH_HASHED;
    l.n_features = (uint32_t)c->lsh_dim;
    l.n_min = c->lsh_nmin; l.n_max = c->lsh_nmax; l.pad = c->lsh_pad;
    l.P = (uint32_t)c->lsh_eta;
    /* one form is used: the other gets the smallest valid size */
    l.n_bits = c->embedding == MHE_EMB_HASH_EMB ? 1 : c->hash_bits;
    l.n_buckets = c->embedding == MHE_EMB_HASH_EMB ? (uint32_t)c->hash_buckets : 2;
    l.seed = c->lsh_seed;
    return l;
}

/* (re)build the model's LSH: eta from lsh_seed, and the n-gram table in table mode */
static mhe_status mhe__lsh_setup(mhe_model *m, const uint32_t *table, size_t table_len) {
    mhe_lsh_config lc = mhe__lsh_cfg(&m->cfg);
    mhe_status st;
    mhe_lsh_free(&m->lsh);
    m->lsh_ready = 0;
    st = mhe_lsh_init(&m->lsh, &lc, table, table_len, m->alloc_ctx);
    if (st != MHE_OK) { mhe__fail(m->err, st, "%s", m->lsh.err); mhe_lsh_free(&m->lsh); }
    else m->lsh_ready = 1;
    m->hash_sig = mhe__hash_sig(m);
    return st;
}

/* after the weights: the reserved codebook row is zero (it is never looked
   up); hashed LSH is ready at once, table LSH once it has its table */
static mhe_status mhe__words_init(mhe_model *m) {
    const mhe_config *c = &m->cfg;
    mhe_lexicon_init(&m->vocab, m->alloc_ctx);
    if (m->pool_codebook && m->pool_codebook->data) memset(m->pool_codebook->data, 0, (size_t)c->d_model * sizeof(float));
    m->hash_sig = mhe__hash_sig(m);
    if (c->embedding != MHE_EMB_VOCAB && c->hash == MHE_WORD_HASH_LSH && !c->lsh_features) return mhe__lsh_setup(m, NULL, 0);
    return MHE_OK;
}

/* one word -> its tok_emb row or bucket (id) or its T bits; work: LSH doubles or NULL */
static mhe_status mhe__hash_word(mhe_model *m, const char *w, size_t len, double *work, int32_t *id, unsigned char *bits) {
    const mhe_config *c = &m->cfg;
    const void *key = c->hash_key ? MHE_HASH_KEY : NULL;
    size_t key_len = c->hash_key ? MHE_HASH_KEY_LEN : 0;
    mhe_status st;
    if (!w || len == 0) return mhe__fail(m->err, MHE_ERR_ARG, "an empty word has no embedding (the word splitter never yields one)");
    if (c->embedding == MHE_EMB_VOCAB) {
        int t;
        if (m->vocab.n == 0)
            return mhe__fail(m->err, MHE_ERR_CONFIG, "this vocab model has no word vocabulary (byte tokens); mhe_model_set_vocab gives it one");
        t = mhe_lexicon_find(&m->vocab, w, len);
        *id = t < 0 ? MHE_TOK_UNK : MHE_N_SPECIAL + t;
        return MHE_OK;
    }
    if (c->hash == MHE_WORD_HASH_LSH && !m->lsh_ready)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "hash=lsh with lsh_features=table needs the corpus n-gram table first (mhe_model_set_ngrams)");
    if (c->embedding == MHE_EMB_HASH_EMB) {
        if (c->hash == MHE_WORD_HASH_MD5) {   /* thesis sec. 2.3.2: i = v % N */
            uint64_t v = 0;
            mhe__must(mhe_word_id_md5(w, len, key, key_len, (uint64_t)c->hash_buckets, &v));
            *id = (int32_t)v;
        } else {                              /* sec. 2.3.3: argmax over [xR; -xR] */
            uint32_t b = 0;
            if ((st = mhe_lsh_bucket(&m->lsh, w, len, work, &b)) != MHE_OK) return mhe__fail(m->err, st, "lsh: out of memory");
            *id = (int32_t)b;
        }
        return MHE_OK;
    }
    if (c->hash == MHE_WORD_HASH_MD5) {       /* sec. 2.3.5: the digest's first T bits */
        unsigned char d[16];
        size_t rb = MHE_BITS_BYTES(c->hash_bits);
        mhe__must(mhe_word_hash_md5(w, len, key, key_len, d));
        memcpy(bits, d, rb);
        if (c->hash_bits % 8) bits[rb - 1] &= (unsigned char)(0xFF << (8 - c->hash_bits % 8));
    } else if ((st = mhe_lsh_bits(&m->lsh, w, len, work, bits)) != MHE_OK) {
        return mhe__fail(m->err, st, "lsh: out of memory");
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_model_hash_word(mhe_model *m, const char *word, size_t len, int32_t *id, unsigned char *bits) {
    int want_bits;
    if (!m) return MHE_ERR_ARG;
    want_bits = m->cfg.embedding >= MHE_EMB_HASH_POOL;
    if (want_bits ? !bits : !id)
        return mhe__fail(m->err, MHE_ERR_ARG, "hash_word: embedding=%s needs %s", mhe__emb_name(&m->cfg), want_bits ? "a bits buffer" : "an id");
    return mhe__hash_word(m, word, len, NULL, id, bits);
}

MHEDEF mhe_status mhe_model_embed_word(mhe_model *m, const char *word, size_t len, float *out) {
    const mhe_config *c;
    int32_t id = 0;
    unsigned char *bits = NULL;
    float *scratch = NULL;
    int C, T, k, j;
    mhe_status st;
    if (!m) return MHE_ERR_ARG;
    if (!out) return mhe__fail(m->err, MHE_ERR_ARG, "embed_word: out is NULL");
    c = &m->cfg; C = c->d_model; T = c->hash_bits; k = c->hash_chunk;
    if (c->embedding >= MHE_EMB_HASH_POOL) {
        size_t sc = c->embedding == MHE_EMB_HASH_POOL ? (size_t)mhe_hash_pool_chunks(T, k) * (C + 1)
                  : c->embedding == MHE_EMB_HASH_PROJ ? (size_t)C * T + C : 0;
        bits = (unsigned char *)MHE_MALLOC(m->alloc_ctx, MHE_BITS_BYTES(T) + sc * sizeof(float) + sizeof(float));
        if (!bits) return mhe__fail(m->err, MHE_ERR_NOMEM, "embed_word: out of memory");
        scratch = (float *)(void *)(bits + ((MHE_BITS_BYTES(T) + sizeof(float) - 1) / sizeof(float)) * sizeof(float));
    }
    if ((st = mhe__hash_word(m, word, len, NULL, &id, bits)) != MHE_OK) { if (bits) MHE_FREE(m->alloc_ctx, bits); return st; }
    switch (c->embedding) {
    case MHE_EMB_VOCAB: case MHE_EMB_HASH_EMB:
        {
            int row = (int)id;
            mhe__q8_gather(out, m->tok_emb, &row, 1, C);
        }
        return MHE_OK;
    case MHE_EMB_HASH_POOL: {
        int ch = mhe_hash_pool_chunks(T, k), *idx = (int *)(void *)(scratch + (size_t)ch * C);
        mhe_hash_pool_index(idx, bits, 1, T, k);
        mhe_hash_pool_fwd(out, scratch, m->pool_codebook->data, m->pool_w->data, idx, 1, ch, C);
        break;
    }
    case MHE_EMB_HASH_ADD: mhe_hash_add_fwd(out, m->add_books->data, bits, 1, T, C, sqrtf((float)T)); break;
    default: mhe_hash_proj_fwd(out, scratch, scratch + (size_t)C * T, m->proj_w->data, bits, 1, T, C); break;
    }
    for (j = 0; j < C; j++) out[j] += m->regular_emb->data[j];
    MHE_FREE(m->alloc_ctx, bits);
    return MHE_OK;
}

MHEDEF void mhe_word_feats_free(mhe_word_feats *f) {
    if (!f) return;
    if (f->id) MHE_FREE(f->alloc_ctx, f->id);
    if (f->bits) MHE_FREE(f->alloc_ctx, f->bits);
    memset(f, 0, sizeof *f);
}

MHEDEF mhe_status mhe_word_feats_update(mhe_model *m, const mhe_lexicon *x, mhe_word_feats *f) {
    const mhe_config *c;
    int want_bits, i, ok = 1;
    size_t rb;
    double *work = NULL;
    mhe_status st = MHE_OK;
    if (!m) return MHE_ERR_ARG;
    if (!x || !f) return mhe__fail(m->err, MHE_ERR_ARG, "word features: lexicon or features is NULL");
    c = &m->cfg;
    want_bits = c->embedding >= MHE_EMB_HASH_POOL;
    rb = want_bits ? MHE_BITS_BYTES(c->hash_bits) : 0;
    if (f->sig == 0) {
        memset(f, 0, sizeof *f);
        f->embedding = c->embedding;
        f->n_bits = want_bits ? c->hash_bits : 0;
        f->sig = m->hash_sig;
        f->alloc_ctx = m->alloc_ctx;
    } else if (f->sig != m->hash_sig || f->embedding != c->embedding) {
        return mhe__fail(m->err, MHE_ERR_ARG, "word features were made by a model with other hashing settings (or vocabulary)");
    }
    if (x->n < f->n) return mhe__fail(m->err, MHE_ERR_ARG, "word features cover %d types, the lexicon has only %d: another lexicon?", f->n, x->n);
    if (x->n == f->n) return MHE_OK;
    if (x->n > f->cap) {
        int cap = x->n > f->cap * 2 ? x->n : (f->cap > INT_MAX / 2 ? INT_MAX : f->cap * 2);
        if (want_bits) {
            unsigned char *b = (unsigned char *)MHE_REALLOC(f->alloc_ctx, f->bits, (size_t)f->cap * rb, mhe__mul_size((size_t)cap, rb, &ok));
            if (!ok || !b) return mhe__fail(m->err, MHE_ERR_NOMEM, "word features: out of memory for %d types", cap);
            f->bits = b;
        } else {
            int32_t *d = (int32_t *)MHE_REALLOC(f->alloc_ctx, f->id, (size_t)f->cap * sizeof(int32_t), mhe__mul_size((size_t)cap, sizeof(int32_t), &ok));
            if (!ok || !d) return mhe__fail(m->err, MHE_ERR_NOMEM, "word features: out of memory for %d types", cap);
            f->id = d;
        }
        f->cap = cap;
    }
    if (c->embedding != MHE_EMB_VOCAB && c->hash == MHE_WORD_HASH_LSH && m->lsh_ready) {
        work = (double *)MHE_MALLOC(m->alloc_ctx, mhe_lsh_work_len(&m->lsh) * sizeof(double));
        if (!work) return mhe__fail(m->err, MHE_ERR_NOMEM, "word features: out of memory");
    }
    for (i = f->n; i < x->n && st == MHE_OK; i++) {
        size_t len;
        const char *w = mhe_lexicon_word(x, i, &len);
        st = mhe__hash_word(m, w, len, work, want_bits ? NULL : f->id + i, want_bits ? f->bits + (size_t)i * rb : NULL);
    }
    if (work) MHE_FREE(m->alloc_ctx, work);
    if (st == MHE_OK) f->n = x->n;
    return st;
}

typedef struct { int64_t count; int type; } mhe__type_count;
static int mhe__by_count(const void *a, const void *b) {
    const mhe__type_count *x = (const mhe__type_count *)a, *y = (const mhe__type_count *)b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->type < y->type ? -1 : x->type > y->type;
}

MHEDEF mhe_status mhe_model_set_vocab(mhe_model *m, const mhe_lexicon *x) {
    mhe__type_count *order;
    mhe_lexicon v;
    int W, n, i, t, ok = 1;
    if (!m) return MHE_ERR_ARG;
    if (m->cfg.embedding != MHE_EMB_VOCAB)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "a word vocabulary is for embedding=vocab; embedding=%s hashes every word", mhe__emb_name(&m->cfg));
    if (m->bpe) return mhe__fail(m->err, MHE_ERR_CONFIG, "the model reads BPE tokens (it has a tokenizer), not words");
    W = m->cfg.vocab_size - MHE_N_SPECIAL;
    if (W < 1) return mhe__fail(m->err, MHE_ERR_CONFIG, "vocab_size %d leaves no row for words after the %d special tokens", m->cfg.vocab_size, MHE_N_SPECIAL);
    if (!x || x->n < 1) return mhe__fail(m->err, MHE_ERR_DATA, "the lexicon has no words");
    order = (mhe__type_count *)MHE_MALLOC(m->alloc_ctx, mhe__mul_size((size_t)x->n, sizeof *order, &ok));
    if (!ok || !order) return mhe__fail(m->err, MHE_ERR_NOMEM, "set_vocab: out of memory");
    for (i = 0; i < x->n; i++) { order[i].count = x->count[i]; order[i].type = i; }
    qsort(order, (size_t)x->n, sizeof *order, mhe__by_count);
    n = x->n < W ? x->n : W;
    mhe_lexicon_init(&v, m->alloc_ctx);
    for (i = 0; i < n; i++) {
        size_t len;
        const char *w = mhe_lexicon_word(x, order[i].type, &len);
        if (mhe_lexicon_intern(&v, w, len, 0, &t) != MHE_OK) {
            mhe_lexicon_free(&v);
            MHE_FREE(m->alloc_ctx, order);
            return mhe__fail(m->err, MHE_ERR_NOMEM, "set_vocab: out of memory");
        }
        v.count[t] = order[i].count;
    }
    MHE_FREE(m->alloc_ctx, order);
    mhe_lexicon_free(&m->vocab);
    m->vocab = v;
    m->hash_sig = mhe__hash_sig(m);
    return MHE_OK;
}

#ifndef MHE_NO_TOKENIZERS
MHEDEF mhe_status mhe_model_set_bpe(mhe_model *m, const mhe_bpe *b) {
    mhe_bpe *nb;
    char *buf;
    size_t n;
    mhe_status st;
    if (!m) return MHE_ERR_ARG;
    if (b && b->n_tokens != m->cfg.vocab_size)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "the model's vocab_size %d is not the tokenizer's %d tokens", m->cfg.vocab_size, b->n_tokens);
    if (b && (m->cfg.embedding != MHE_EMB_VOCAB || m->vocab.n))
        return mhe__fail(m->err, MHE_ERR_CONFIG, "a BPE tokenizer is for models with a token embedding (embedding=vocab, no word vocabulary)");
    if (b && (mhe_bpe_save_mem(b, NULL, 0, &n) != MHE_OK || !n)) return mhe__fail(m->err, MHE_ERR_ARG, "set_bpe: the tokenizer is empty");
    if (!b) nb = NULL;
    else {   /* a copy through the text form, so that the model owns everything */
        nb = (mhe_bpe *)MHE_MALLOC(m->alloc_ctx, sizeof *nb);
        buf = nb ? (char *)MHE_MALLOC(m->alloc_ctx, n) : NULL;
        if (!buf) { if (nb) MHE_FREE(m->alloc_ctx, nb); return mhe__fail(m->err, MHE_ERR_NOMEM, "set_bpe: out of memory"); }
        mhe_bpe_init(nb, m->alloc_ctx);
        if ((st = mhe_bpe_save_mem(b, buf, n, &n)) == MHE_OK) st = mhe_bpe_load_mem(nb, buf, n);
        MHE_FREE(m->alloc_ctx, buf);
        if (st != MHE_OK) { mhe__fail(m->err, st, "set_bpe: %s", nb->err); mhe_bpe_free(nb); MHE_FREE(m->alloc_ctx, nb); return st; }
    }
    if (m->bpe) { mhe_bpe_free(m->bpe); MHE_FREE(m->alloc_ctx, m->bpe); }
    m->bpe = nb;
    return MHE_OK;
}
#endif /* MHE_NO_TOKENIZERS */

MHEDEF mhe_status mhe_model_set_ngrams(mhe_model *m, const char *text, size_t len) {
    const mhe_config *c;
    uint32_t *table = NULL;
    size_t n = 0;
    mhe_status st;
    if (!m) return MHE_ERR_ARG;
    c = &m->cfg;
    if (c->embedding == MHE_EMB_VOCAB || c->hash != MHE_WORD_HASH_LSH || !c->lsh_features)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "an n-gram table is for hash embeddings with hash=lsh and lsh_features=table");
    st = mhe_ngram_table_build(text, len, c->lsh_nmin, c->lsh_nmax, c->lsh_pad, (uint32_t)c->lsh_dim, &table, &n, m->alloc_ctx, m->err);
    if (st != MHE_OK) return st;
    st = mhe__lsh_setup(m, table, n);
    MHE_FREE(m->alloc_ctx, table);
    return st;
}

MHEDEF mhe_status mhe_model_init_from(mhe_model *m, const mhe_config *cfg, const mhe_model *src, uint64_t seed,
                                      void *alloc_ctx, int *copied) {
    mhe_status st;
    int i, n = 0, d;
    if (copied) *copied = 0;
    if (!m) return MHE_ERR_ARG;
    if (!src) { memset(m, 0, sizeof *m); return mhe__fail(m->err, MHE_ERR_ARG, "init_from: the source model is NULL"); }
    if ((st = mhe_model_init(m, cfg, seed, alloc_ctx)) != MHE_OK) return st;
    for (i = 0; i < src->vocab.n && st == MHE_OK; i++) {
        size_t len;
        int t;
        const char *w = mhe_lexicon_word(&src->vocab, i, &len);
        if (mhe_lexicon_intern(&m->vocab, w, len, 0, &t) != MHE_OK) st = mhe__fail(m->err, MHE_ERR_NOMEM, "init_from: out of memory");
        else m->vocab.count[t] = src->vocab.count[i];
    }
    if (st == MHE_OK && src->lsh_ready && src->lsh.table && m->cfg.embedding != MHE_EMB_VOCAB && m->cfg.hash == MHE_WORD_HASH_LSH &&
        m->cfg.lsh_features)
        st = mhe__lsh_setup(m, src->lsh.table, src->lsh.table_len);
    m->hash_sig = mhe__hash_sig(m);
#ifndef MHE_NO_TOKENIZERS
    if (st == MHE_OK && src->bpe) st = mhe_model_set_bpe(m, src->bpe);   /* the same tokens in */
#endif
    if (st == MHE_OK && m->hash_sig != src->hash_sig)
        st = mhe__fail(m->err, MHE_ERR_CONFIG, "init_from: the embedding or hashing settings differ from the source model's, so its words would embed differently");
    for (i = 0; i < m->n_tensors && st == MHE_OK; i++) {
        mhe_tensor *t = &m->params[i];
        const mhe_tensor *s = mhe_model_find((mhe_model *)src, t->name);
        int same = s && s->ndim == t->ndim;
        for (d = 0; same && d < t->ndim; d++) same = s->shape[d] == t->shape[d];
        if (!same) continue;
        if (s->data) memcpy(t->data, s->data, (size_t)t->size * sizeof(float));
        else {   /* a q8 model's int8 tensor, dequantized */
            int64_t k;
            for (k = 0; k < t->size; k++) t->data[k] = (float)s->q8[k] * s->q8_scale[k / s->q8_group];
        }
        n++;
    }
    if (st != MHE_OK) {
        char e[MHE_ERR_LEN];
        memcpy(e, m->err, MHE_ERR_LEN);
        mhe_model_free(m);
        memcpy(m->err, e, MHE_ERR_LEN);
        return st;
    }
    if (copied) *copied = n;
    return MHE_OK;
}

/* ---- 7. models: collaborative reparametrisation -------------------------- */

MHEDEF mhe_status mhe_collab_from_mha(int C, int n_heads, int d_head, const float *wq, const float *wk, const float *bq,
                                      int dim, float *wq_out, float *wk_out, float *mix, float *content_bias,
                                      int max_iter, double tol, int init, uint64_t seed, void *alloc_ctx, mhe_cp_result *res) {
    int n = n_heads, dh = d_head, HD = n_heads * d_head, D = dim, i, r, c, mode;
    float *T, *F[3];
    mhe_status st;
    int ok = 1;
    size_t tsize, fsize;
    if (res) { res->rel_error = 0; res->iterations = 0; }
    if (C < 1 || n < 1 || dh < 1 || D < 1 || !wq || !wk || !wq_out || !wk_out || !mix || !content_bias) return MHE_ERR_ARG;
    for (i = 0; i < n; i++)   /* eq. 12: v_i = W_K^(i)T b_Q^(i), a row of the content-bias layer */
        for (c = 0; c < C; c++) {
            double v = 0;
            for (r = 0; bq && r < dh; r++) v += (double)bq[i * dh + r] * wk[(size_t)(i * dh + r) * C + c];
            content_bias[(size_t)i * C + c] = (float)v;
        }
    if (D >= HD) {   /* exact: the concatenated heads themselves */
        memset(wq_out, 0, (size_t)D * C * sizeof(float));
        memset(wk_out, 0, (size_t)D * C * sizeof(float));
        memcpy(wq_out, wq, (size_t)HD * C * sizeof(float));
        memcpy(wk_out, wk, (size_t)HD * C * sizeof(float));
        for (i = 0; i < n; i++)
            for (r = 0; r < D; r++) mix[(size_t)i * D + r] = r >= i * dh && r < (i + 1) * dh ? 1.0f : 0.0f;
        return MHE_OK;
    }
    tsize = mhe__mul_size(mhe__mul_size((size_t)C, (size_t)n, &ok), (size_t)C, &ok);
    fsize = mhe__mul_size((size_t)(2 * C + n), (size_t)D, &ok);
    if (!ok || tsize > (size_t)INT_MAX) return MHE_ERR_OVERFLOW;
    T = (float *)MHE_MALLOC(alloc_ctx, (tsize + fsize) * sizeof(float));
    if (!T) return MHE_ERR_NOMEM;
    F[0] = T + tsize; F[1] = F[0] + (size_t)C * D; F[2] = F[1] + (size_t)n * D;
    for (i = 0; i < n; i++)   /* T[q, i, :] = W_Q^(i) W_K^(i)T: rows q of head i's C x C slice, ldc n C */
        mhe_gemm(1, 0, C, C, dh, 1.0f, wq + (size_t)i * dh * C, C, wk + (size_t)i * dh * C, C, 0.0f, T + (size_t)i * C, n * C);
    st = mhe_cp_als(T, C, n, C, D, F[0], F[1], F[2], max_iter, tol, init, seed, alloc_ctx, res);
    if (st == MHE_OK || st == MHE_ERR_CONVERGE) {
        for (r = 0; r < D; r++) {   /* the scale of a_r o b_r o c_r is free: give each factor the cube root of it */
            double nrm[3], g;
            for (mode = 0; mode < 3; mode++) {
                int len = mode == 1 ? n : C;
                double q = 0;
                for (c = 0; c < len; c++) q += (double)F[mode][(size_t)c * D + r] * F[mode][(size_t)c * D + r];
                nrm[mode] = sqrt(q);
            }
            g = cbrt(nrm[0] * nrm[1] * nrm[2]);
            for (mode = 0; mode < 3; mode++) {
                int len = mode == 1 ? n : C;
                double f = nrm[mode] > 0 ? g / nrm[mode] : 0;
                for (c = 0; c < len; c++) F[mode][(size_t)c * D + r] = (float)(F[mode][(size_t)c * D + r] * f);
            }
        }
        for (r = 0; r < D; r++)
            for (c = 0; c < C; c++) { wq_out[(size_t)r * C + c] = F[0][(size_t)c * D + r]; wk_out[(size_t)r * C + c] = F[2][(size_t)c * D + r]; }
        memcpy(mix, F[1], (size_t)n * D * sizeof(float));
    }
    MHE_FREE(alloc_ctx, T);
    return st;
}

/* a per-layer kind list as the config text writes it: one kind in every
   slot when the n layers agree, else the n kinds and -1 after them */
static void mhe__kinds_tidy(int *kinds, int n) {
    int l, same = 1;
    for (l = 1; l < n; l++) same &= kinds[l] == kinds[0];
    for (l = n; l < MHE_MAX_LAYERS; l++) kinds[l] = same ? kinds[0] : -1;
}

MHEDEF mhe_reparam_opts mhe_reparam_opts_default(void) {
    mhe_reparam_opts o;
    memset(&o, 0, sizeof o);
    o.max_iter = 1000;
    o.tol = 1e-6;
    o.init = MHE_CP_INIT_SVD;
    o.seed = 1;
    return o;
}

MHEDEF mhe_status mhe_model_reparam_collab(mhe_model *dst, const mhe_model *src, const mhe_reparam_opts *o, void *alloc_ctx,
                                           int *converted) {
    mhe_config cfg;
    mhe_status st = MHE_OK;
    int l, w, count = 0, E, dh;
    char err[MHE_ERR_LEN];
    if (converted) *converted = 0;
    if (!dst) return MHE_ERR_ARG;
    memset(dst, 0, sizeof *dst);
    if (!src || !o) return mhe__fail(dst->err, MHE_ERR_ARG, "reparam: the source model or the options are NULL");
    if (o->dim < 1) return mhe__fail(dst->err, MHE_ERR_ARG, "reparam: D~ (dim) must be >= 1, got %d", o->dim);
    if (!src->param_data)   /* q8 and in-place models hold no float copy of every weight */
        return mhe__fail(dst->err, MHE_ERR_ARG, "reparam: the source model has no float weights (q8 or loaded in place): reparametrise its float checkpoint");
    cfg = src->cfg;
    E = cfg.arch == MHE_ARCH_ENCDEC ? cfg.enc_layers : 0;
    dh = mhe_config_d_head(&cfg);
    for (l = 0; l < src->n_total_layers; l++)
        for (w = 0; w < 2; w++) {
            int k = w ? src->layers[l].cross.kind : src->layers[l].attn.kind;
            count += k == MHE_ATTN_MHA;
            if (k == MHE_ATTN_COLLAB && mhe_config_collab_dim(&cfg) != o->dim)
                return mhe__fail(dst->err, MHE_ERR_CONFIG, "reparam: the model already has collab layers of D~ = %d; converting "
                                 "its mha layers to D~ = %d would leave them without weights (use --dim %d)",
                                 mhe_config_collab_dim(&cfg), o->dim, mhe_config_collab_dim(&cfg));
        }
    if (!count) return mhe__fail(dst->err, MHE_ERR_CONFIG, "reparam: the model has no mha layer to convert (only mha layers have the per-head W_Q, W_K to decompose)");
    for (l = 0; l < cfg.n_layers; l++) {   /* the layout's mha layers are explicit now */
        int k = mhe_config_layer_kind(&src->cfg, l);
        cfg.attn[l] = k == MHE_ATTN_MHA ? MHE_ATTN_COLLAB : k;
        if (E && cfg.cross_attn[l] == MHE_ATTN_MHA) cfg.cross_attn[l] = MHE_ATTN_COLLAB;
    }
    for (l = 0; l < E; l++) if (cfg.enc_attn[l] == MHE_ATTN_MHA) cfg.enc_attn[l] = MHE_ATTN_COLLAB;
    mhe__kinds_tidy(cfg.attn, cfg.n_layers);
    if (E) { mhe__kinds_tidy(cfg.enc_attn, E); mhe__kinds_tidy(cfg.cross_attn, cfg.n_layers); }
    cfg.layout = MHE_LAYOUT_NONE;
    cfg.collab_dim = o->dim;
    cfg.collab_mix_std = 0.0f;
    if ((st = mhe_model_init_from(dst, &cfg, src, o->seed, alloc_ctx, NULL)) != MHE_OK) return st;
    for (l = 0; l < src->n_total_layers && st == MHE_OK; l++)
        for (w = 0; w < 2 && st == MHE_OK; w++) {
            const mhe_attn_weights *s = w ? &src->layers[l].cross : &src->layers[l].attn;
            mhe_attn_weights *d = w ? &dst->layers[l].cross : &dst->layers[l].attn;
            mhe_cp_result r;
            char name[MHE_NAME_LEN];
            size_t len;
            if (s->kind != MHE_ATTN_MHA) continue;
            snprintf(name, sizeof name, "%s", s->wq->name);
            len = strlen(name);
            if (len > 10) name[len - 10] = 0;   /* "layers.3.attn.wq.weight" -> "layers.3.attn" */
            st = mhe_collab_from_mha(cfg.d_model, cfg.n_heads, dh, s->wq->data, s->wk->data, s->bq ? s->bq->data : NULL, o->dim,
                                     d->wq->data, d->wk->data, d->mix->data, d->wcb->data, o->max_iter, o->tol, o->init,
                                     o->seed + (uint64_t)(2 * l + w), alloc_ctx, &r);
            if (st == MHE_ERR_CONVERGE)
                mhe__fail(err, st, "reparam: %s: the CP decomposition did not converge in %d sweeps (relative error %.4g, "
                          "still changing by %g or more per sweep); raise max_iter or tol", name, r.iterations, r.rel_error, o->tol);
            else if (st != MHE_OK)
                mhe__fail(err, st, "reparam: %s: the decomposition failed (%s)", name, mhe_status_str(st));
            else if (o->progress) o->progress(o->progress_ctx, name, &r);
            if (st == MHE_OK && converted) (*converted)++;
        }
    if (st != MHE_OK) {
        mhe_model_free(dst);
        memcpy(dst->err, err, MHE_ERR_LEN);
    }
    return st;
}

MHEDEF int64_t mhe_model_emb_params(const mhe_model *m) {
    int64_t n = 0;
    if (!m) return -1;
    if (m->tok_emb) n += m->tok_emb->size;
    if (m->pool_codebook) n += m->pool_codebook->size + m->pool_w->size;
    if (m->add_books) n += m->add_books->size;
    if (m->proj_w) n += m->proj_w->size;
    if (m->regular_emb) n += m->regular_emb->size;
    return n;
}

/* room for the per-position inputs of n tokens */
static mhe_status mhe__emb_in_reserve(mhe_model *m, int n) {
    const mhe_config *c = &m->cfg;
    mhe_emb_in *e = &m->emb_in;
    size_t C = (size_t)c->d_model, T = (size_t)c->hash_bits, N = (size_t)n, used = 0, bytes;
    size_t ch = c->embedding == MHE_EMB_HASH_POOL ? (size_t)mhe_hash_pool_chunks(c->hash_bits, c->hash_chunk) : 0;
    size_t rb = c->embedding == MHE_EMB_HASH_ADD || c->embedding == MHE_EMB_HASH_PROJ ? MHE_BITS_BYTES(T) : 0;
    int hashed = c->embedding != MHE_EMB_VOCAB, pass;
    unsigned char *base = NULL;
    void *block = NULL;
    if (e->block && n <= e->cap) return MHE_OK;
    for (pass = 0; pass < 2; pass++) {   /* measure, then carve */
        used = 0;
#define MHE__E(ptr, type, count) do { if (base) (ptr) = (type *)(void *)(base + used); used += MHE_ARENA_ROUND((count) * sizeof(type)); } while (0)
        MHE__E(e->row, int, hashed ? 0 : N);
        MHE__E(e->spec, int, hashed ? N : 0);
        MHE__E(e->wpos, int, hashed ? N : 0);
        MHE__E(e->wid, int, c->embedding == MHE_EMB_HASH_EMB ? N : 0);
        MHE__E(e->idx, int, N * ch);
        MHE__E(e->bits, unsigned char, N * rb);
        MHE__E(e->wout, float, hashed ? N * C : 0);
        MHE__E(e->wsm, float, ch * C);
        MHE__E(e->wn, float, c->embedding == MHE_EMB_HASH_PROJ ? C * T : 0);
        MHE__E(e->wnorm, float, c->embedding == MHE_EMB_HASH_PROJ ? C : 0);
#undef MHE__E
        if (pass == 0) {
            bytes = used + MHE_ARENA_ALIGN;
            block = MHE_MALLOC(m->alloc_ctx, bytes);
            if (!block) return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes of word inputs", bytes);
            if (e->block) MHE_FREE(m->alloc_ctx, e->block);
            e->block = block;
            base = (unsigned char *)(((uintptr_t)block + MHE_ARENA_ALIGN - 1) & ~(uintptr_t)(MHE_ARENA_ALIGN - 1));
        }
    }
    e->cap = n;
    return MHE_OK;
}

static mhe_status mhe__check_tokens(mhe_model *m, const int *tok, int n, const char *what);

/* Checks a batch's tokens and gathers, for word batches, what each position
   embeds: a tok_emb row (vocab), or a special row or the word's bucket,
   chunk indices or bits (hash embeddings). */
static mhe_status mhe__emb_prepare(mhe_model *m, const mhe_batch *bt) {
    const mhe_config *c = &m->cfg;
    const mhe_word_feats *f = bt->words;
    mhe_emb_in *e = &m->emb_in;
    int n = bt->B * bt->T, i, nw = 0, hashed = c->embedding != MHE_EMB_VOCAB, T = c->hash_bits, k = c->hash_chunk;
    int ch = mhe_hash_pool_chunks(T, k);
    size_t rb = MHE_BITS_BYTES(T);
    mhe_status st;
    e->active = 0;
    if (!f) {
        if (hashed) return mhe__fail(m->err, MHE_ERR_ARG, "forward: embedding=%s embeds words: the batch needs word features (mhe_batch.words, from mhe_word_feats_update)", mhe__emb_name(c));
        return mhe__check_tokens(m, bt->tokens, n, "tokens");
    }
    if (c->arch == MHE_ARCH_ENCDEC) return mhe__fail(m->err, MHE_ERR_ARG, "forward: word batches are not supported by arch=encdec");
    if (!bt->tokens) return mhe__fail(m->err, MHE_ERR_ARG, "forward: tokens is NULL");
    if (f->sig != m->hash_sig || f->embedding != c->embedding || f->n_bits != (c->embedding >= MHE_EMB_HASH_POOL ? T : 0))
        return mhe__fail(m->err, MHE_ERR_ARG, "forward: the word features were made by a model with other hashing settings (or vocabulary); rebuild them with mhe_word_feats_update");
    if ((st = mhe__emb_in_reserve(m, n)) != MHE_OK) return st;
    for (i = 0; i < n; i++) {
        int tok = bt->tokens[i], ty;
        if (tok < 0 || tok - MHE_N_SPECIAL >= f->n)
            return mhe__fail(m->err, MHE_ERR_DATA, "tokens: %d at position %d is neither a special token (0..%d) nor one of the %d word types of the features",
                             tok, i, MHE_N_SPECIAL - 1, f->n);
        ty = tok - MHE_N_SPECIAL;
        if (!hashed) {
            int r = tok < MHE_N_SPECIAL ? tok : f->id[ty];
            if (r < 0 || r >= c->vocab_size) return mhe__fail(m->err, MHE_ERR_DATA, "word features: row %d of word type %d is outside the vocabulary [0, %d)", r, ty, c->vocab_size);
            e->row[i] = r;
            continue;
        }
        if (tok < MHE_N_SPECIAL) { e->spec[i] = tok; continue; }
        e->spec[i] = -1;
        e->wpos[nw] = i;
        if (c->embedding == MHE_EMB_HASH_EMB) {
            if (f->id[ty] < 0 || f->id[ty] >= c->hash_buckets)
                return mhe__fail(m->err, MHE_ERR_DATA, "word features: bucket %d of word type %d is outside [0, %d)", (int)f->id[ty], ty, c->hash_buckets);
            e->wid[nw] = f->id[ty];
        } else if (c->embedding == MHE_EMB_HASH_POOL) {
            mhe_hash_pool_index(e->idx + (size_t)nw * ch, f->bits + (size_t)ty * rb, 1, T, k);
        } else {
            memcpy(e->bits + (size_t)nw * rb, f->bits + (size_t)ty * rb, rb);
        }
        nw++;
    }
    e->n = n;
    e->nw = nw;
    e->active = 1;
    return MHE_OK;
}

/* The word embeddings of the prepared batch into out [n, C]: special rows,
   or a hashed word's embedding (eq. 2.12, 2.1, 2.2 or 2.3) plus the regular row. */
static void mhe__words_fwd(const mhe_model *m, float *out) {
    const mhe_config *c = &m->cfg;
    const mhe_emb_in *e = &m->emb_in;
    int C = c->d_model, T = c->hash_bits, i, j;
    if (c->embedding == MHE_EMB_VOCAB) { mhe__q8_gather(out, m->tok_emb, e->row, e->n, C); return; }
    for (i = 0; i < e->n; i++)
        if (e->spec[i] >= 0) memcpy(out + (size_t)i * C, m->special_emb->data + (size_t)e->spec[i] * C, (size_t)C * sizeof(float));
    switch (c->embedding) {
    case MHE_EMB_HASH_EMB: mhe_embedding_fwd(e->wout, m->tok_emb->data, e->wid, e->nw, C, 0); break;
    case MHE_EMB_HASH_POOL:
        mhe_hash_pool_fwd(e->wout, e->wsm, m->pool_codebook->data, m->pool_w->data, e->idx, e->nw, mhe_hash_pool_chunks(T, c->hash_chunk), C);
        break;
    case MHE_EMB_HASH_ADD: mhe_hash_add_fwd(e->wout, m->add_books->data, e->bits, e->nw, T, C, sqrtf((float)T)); break;
    default: mhe_hash_proj_fwd(e->wout, e->wn, e->wnorm, m->proj_w->data, e->bits, e->nw, T, C); break;
    }
    for (j = 0; j < e->nw; j++) {
        float *o = out + (size_t)e->wpos[j] * C;
        memcpy(o, e->wout + (size_t)j * C, (size_t)C * sizeof(float));
        if (m->regular_emb) mhe__axpy(o, 1.0f, m->regular_emb->data, C);
    }
}

#ifndef MHE_NO_TRAIN
static void mhe__words_bwd(mhe_model *m, const float *d) {
    const mhe_config *c = &m->cfg;
    mhe_emb_in *e = &m->emb_in;
    int C = c->d_model, T = c->hash_bits, i, j;
    if (c->embedding == MHE_EMB_VOCAB) { mhe_embedding_bwd(m->tok_emb->grad, d, e->row, e->n, C); return; }
    for (i = 0; i < e->n; i++)
        if (e->spec[i] >= 0) mhe__axpy(m->special_emb->grad + (size_t)e->spec[i] * C, 1.0f, d + (size_t)i * C, C);
    for (j = 0; j < e->nw; j++) {   /* wout now holds the words' output gradient */
        const float *g = d + (size_t)e->wpos[j] * C;
        memcpy(e->wout + (size_t)j * C, g, (size_t)C * sizeof(float));
        if (m->regular_emb) mhe__axpy(m->regular_emb->grad, 1.0f, g, C);
    }
    switch (c->embedding) {
    case MHE_EMB_HASH_EMB: mhe_embedding_bwd(m->tok_emb->grad, e->wout, e->wid, e->nw, C); break;
    case MHE_EMB_HASH_POOL:
        mhe_hash_pool_bwd(m->pool_codebook->grad, m->pool_w->grad, e->wout, m->pool_codebook->data, e->wsm, e->idx, e->nw,
                          mhe_hash_pool_chunks(T, c->hash_chunk), C);
        break;
    case MHE_EMB_HASH_ADD: mhe_hash_add_bwd(m->add_books->grad, e->wout, e->bits, e->nw, T, C, sqrtf((float)T)); break;
    default: mhe_hash_proj_bwd(m->proj_w->grad, e->wout, e->wn, e->wnorm, e->bits, e->nw, T, C); break;
    }
}
#endif /* MHE_NO_TRAIN */

/* the per-token head: the LM head (tied or not) or the S+R head */
static const mhe_tensor *mhe__token_head(const mhe_model *m, const mhe_tensor **bias) {
    *bias = m->cfg.token_head == MHE_HEAD_SR ? m->sr_b : m->lm_b;
    return m->cfg.token_head == MHE_HEAD_SR ? m->sr_w : m->lm_head ? m->lm_head : m->tok_emb;
}

/* ---- 7. models: activations ----------------------------------------------- */
/* logits per token: the vocabulary, or the 3 Shuffle+Random classes */
static int mhe__head_width(const mhe_config *c) { return c->token_head == MHE_HEAD_SR ? MHE_SR_CLASSES : c->vocab_size; }

/* carve (or, with base == NULL, only measure) the activation block for B
   sequences of T tokens (decoder or single stack) and Ts source tokens
   (encoder of encdec) */
static size_t mhe__acts_layout(mhe_model *m, int B, int T, int Ts, unsigned char *base) {
    const mhe_config *c = &m->cfg;
    mhe_acts measure, *a = base ? &m->acts : &measure;
    int E = c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0, l, w, any_ref = 0, ref;
    /* sizes in double: on a 32-bit host a product may not fit a size_t, and then
       the measure returns SIZE_MAX instead of a wrapped count */
    double C = c->d_model, F = mhe_config_d_ff(c), dh = mhe_config_d_head(c), n = c->n_heads;
    double HD = n * dh, V = mhe__head_width(c), rd = (double)B * T, re = E ? (double)B * Ts : 0;
    double rmax = rd > re ? rd : re, max_proj = 0, dused = 0, max_att = HD, max_projx = 0, max_scratch = 5 * n * dh;
    size_t used = 0, ext;
    int overflow = 0, any_static = 0;
#define MHE__A(ptr, count) do { double c_ = (double)(count) * sizeof(float); size_t n_; \
        if (!(c_ < (double)SIZE_MAX / 4)) { overflow = 1; c_ = 0; } \
        n_ = MHE_ARENA_ROUND((size_t)c_); \
        if (base) { (ptr) = (float *)(void *)(base + used); } used += n_; dused += (double)n_; } while (0)
    memset(a, 0, sizeof *a);
    MHE__A(a->emb, rd * C);
    if (E) MHE__A(a->src_emb, re * C);
    for (l = 0; l < m->n_total_layers; l++) {
        const mhe_layer *y = &m->layers[l];
        mhe_layer_acts *la = &a->layer[l];
        double rows = y->encoder ? re : rd, Tq = y->encoder ? Ts : T;
        for (w = 0; w < 3; w++) {
            if (w == 1 && y->cross.kind < 0) continue;
            MHE__A(la->sub[w].nrm, rows * C); MHE__A(la->sub[w].sum, rows * C);
            MHE__A(la->sub[w].mean, rows); MHE__A(la->sub[w].rstd, rows);
        }
        for (w = 0; w < 2; w++) {   /* self-attention, then cross-attention */
            const mhe_attn_weights *aw = w ? &y->cross : &y->attn;
            mhe_attn_acts *aa = w ? &la->cross : &la->attn;
            double kv_rows = w ? re : rows, Tk = w ? (double)Ts : Tq;
            mhe__geom g;
            if (aw->kind < 0) continue;
            g = mhe__layer_geom(c, aw->kind);
            if (g.proj_w > max_proj) max_proj = g.proj_w;
            MHE__A(aa->proj, rows * (w ? g.q_w : g.proj_w));
            if (w && g.k_w) MHE__A(aa->kv, kv_rows * (g.k_w + g.v_w));
            ref = mhe__attn_uses_probs(c, aw->kind);
            if (g.mhe && ref) { MHE__A(aa->projx, (rows + 2 * kv_rows) * HD); any_ref = 1; if (3 * HD > max_projx) max_projx = 3 * HD; }
            if (g.shared_q) {   /* collab: the reference path's Q_i = Q~ * m_i; the stacked backward's M gradients */
                if (ref) { MHE__A(aa->projx, rows * n * g.q_w); any_ref = 1; if (n * g.q_w > max_projx) max_projx = n * g.q_w; }
                if (n * ((double)g.q_w + dh) > max_scratch) max_scratch = n * ((double)g.q_w + dh);
            }
            if (g.mul) MHE__A(aa->hmap, 2 * HD);
            if (g.att_w > max_att) max_att = g.att_w;
            MHE__A(aa->att, rows * g.att_w);
            MHE__A(aa->stats, ref ? B * n * Tq * Tk : B * n * Tq);
            if ((ext = mhe__ext_floats(c, aw->kind, B, (int)Tq, (int)Tk, w, c->fused_attention)) > 0) MHE__A(aa->ext, ext);
            any_static |= mhe__kind(aw->kind)->qk == MHE__QK_STATIC;
        }
        MHE__A(la->fc1, rows * F); MHE__A(la->act, rows * F);
    }
    if (!c->post_norm) {
        MHE__A(a->fin.nrm, rd * C); MHE__A(a->fin.mean, rd); MHE__A(a->fin.rstd, rd);
        if (E) { MHE__A(a->enc_fin.nrm, re * C); MHE__A(a->enc_fin.mean, re); MHE__A(a->enc_fin.rstd, re); }
    }
    MHE__A(a->logits, rd * V); MHE__A(a->losses, rd);
    if (c->n_classes > 0) { MHE__A(a->pooled, B * C); MHE__A(a->cls_logits, (double)B * c->n_classes); }
    if (c->cls_pool == MHE_POOL_FIRST) MHE__A(a->first, B * C);
    if (c->emb_norm) { MHE__A(a->emb_sum, rd * C); MHE__A(a->emb_mean, rd); MHE__A(a->emb_rstd, rd); }
    if (c->head_transform) {
        MHE__A(a->hd_pre, rd * C); MHE__A(a->hd_act, rd * C); MHE__A(a->hd_out, rd * C);
        MHE__A(a->hd_mean, rd); MHE__A(a->hd_rstd, rd);
    }
    MHE__A(a->d_tmp, rmax * C); MHE__A(a->scratch, rmax * C);   /* the forward's too (Admin, branches) */
#ifndef MHE_NO_TRAIN   /* the backward's buffers: an inference-only build lays out none */
    if (c->n_classes > 0) { MHE__A(a->d_pooled, B * C); MHE__A(a->d_cls, (double)B * c->n_classes); }
    if (c->cls_pool == MHE_POOL_FIRST) MHE__A(a->d_first, B * C);
    if (c->head_transform) { MHE__A(a->d_hd1, rd * C); MHE__A(a->d_hd2, rd * C); }
    MHE__A(a->d_h, rmax * C); MHE__A(a->d_u, rmax * C);
    if (E) MHE__A(a->d_mem, re * C);
    MHE__A(a->d_att, rmax * max_att); MHE__A(a->d_proj, rmax * max_proj);
    if (any_static) { MHE__A(a->d_emb, rd * C); if (E) MHE__A(a->d_src_emb, re * C); }
    if (any_ref) MHE__A(a->d_projx, rmax * max_projx);
    MHE__A(a->map_scratch, B * max_scratch); MHE__A(a->d_hmap, 2 * HD);
    MHE__A(a->d_fc1, rmax * F); MHE__A(a->d_act, rmax * F);
    MHE__A(a->d_logits, rd * V);
#else
    (void)any_ref; (void)any_static;
#endif
    {   /* the kernels' slices, for as many threads as OpenMP offers now */
        float *kbase = NULL;
        int threads = mhe__max_threads();
        MHE__A(kbase, mhe_scratch_floats((int)dh, threads));
        if (base) mhe_scratch_init(&a->kernel, kbase, (int)dh, threads);
    }
#undef MHE__A
#define MHE__AI(ptr, count) do { double c_ = (double)(count) * sizeof(int); size_t n_; \
        if (!(c_ < (double)SIZE_MAX / 4)) { overflow = 1; c_ = 0; } \
        n_ = MHE_ARENA_ROUND((size_t)c_); \
        if (base) { (ptr) = (int *)(void *)(base + used); } used += n_; dused += (double)n_; } while (0)
    MHE__AI(a->tokens, rd); MHE__AI(a->targets, rd); MHE__AI(a->lengths, B);
    if (c->type_vocab) MHE__AI(a->types, rd);
    if (E) { MHE__AI(a->src, re); MHE__AI(a->src_lengths, B); }
#undef MHE__AI
    return overflow || dused > (double)SIZE_MAX / 2 ? SIZE_MAX : used;
}

MHEDEF mhe_status mhe_model_reserve(mhe_model *m, int B, int T, int Ts) {
    mhe_acts *a = &m->acts;
    size_t bytes;
    void *block;
    int encdec = m->cfg.arch == MHE_ARCH_ENCDEC;
    Ts = encdec ? (Ts > 0 ? Ts : T) : 0;
    if (B < 1 || T < 1) return mhe__fail(m->err, MHE_ERR_ARG, "batch %d x length %d: both must be >= 1", B, T);
    if (T > m->cfg.max_seq_len || Ts > m->cfg.max_seq_len)
        return mhe__fail(m->err, MHE_ERR_ARG, "sequence length %d exceeds max_seq_len %d", T > Ts ? T : Ts, m->cfg.max_seq_len);
    if ((int64_t)B * T > (1 << 24) || (int64_t)B * Ts > (1 << 24)) return mhe__fail(m->err, MHE_ERR_OVERFLOW, "batch %d x length %d is too many tokens", B, T > Ts ? T : Ts);
    /* a block laid out for (B', T', Ts') holds every smaller shape: rows, per-sequence arrays and score matrices */
    if (m->acts_block && B <= a->B && (int64_t)B * T <= (int64_t)a->B * a->T && T <= a->T &&
        (int64_t)B * Ts <= (int64_t)a->B * a->Ts && Ts <= a->Ts) return MHE_OK;
    bytes = mhe__acts_layout(m, B, T, Ts, NULL);
    if (bytes == SIZE_MAX)   /* counted in double: more than a 32-bit host addresses */
        return mhe__fail(m->err, MHE_ERR_OVERFLOW, "activations of batch %d x length %d need more memory than this platform addresses", B, T);
    block = mhe__malloc(m->alloc_ctx, m->arena, bytes + MHE_ARENA_ALIGN);
    if (!block) return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes of activations", bytes);
    mhe__free(m->alloc_ctx, m->arena, m->acts_block);
    m->acts_block = block;
    mhe__acts_layout(m, B, T, Ts, (unsigned char *)(((uintptr_t)block + MHE_ARENA_ALIGN - 1) & ~(uintptr_t)(MHE_ARENA_ALIGN - 1)));
    a->B = B; a->T = T; a->Ts = Ts; a->bytes = bytes;
    m->bytes_acts = bytes;
    return MHE_OK;
}

/* ---- 7. models: forward and backward -------------------------------------- */


/* f of the MLP sublayer: fc2(act(fc1(u))), through fc1 and act [rows, F] */
static void mhe__mlp_fwd(const mhe_model *m, const mhe_layer *y, int rows, const float *u, float *fc1, float *act, float *out) {
    const mhe_config *c = &m->cfg;
    int C = c->d_model, F = mhe_config_d_ff(c);
    MHE__TIMED(MHE_OP_FC1, mhe__linq(fc1, u, y->fc1_w, mhe__opt_data(y->fc1_b), rows, C, F));
    MHE__TIMED(MHE_OP_ACT, mhe_act_fwd(c->activation, act, fc1, (int64_t)rows * F));
    MHE__TIMED(MHE_OP_FC2, mhe__linq(out, act, y->fc2_w, mhe__opt_data(y->fc2_b), rows, F, C));
}

#ifndef MHE_NO_TRAIN
static void mhe__mlp_bwd(mhe_model *m, int l, int rows, const float *u, const float *d_out, float *du) {
    const mhe_config *c = &m->cfg;
    const mhe_layer *y = &m->layers[l];
    mhe_layer_acts *la = &m->acts.layer[l];
    mhe_acts *a = &m->acts;
    int C = c->d_model, F = mhe_config_d_ff(c);
    MHE__TIMED(MHE_OP_ZERO, memset(a->d_act, 0, (size_t)rows * F * sizeof(float)));
    MHE__TIMED(MHE_OP_FC2, mhe_linear_bwd(a->d_act, y->fc2_w->grad, mhe__opt_grad(y->fc2_b), d_out, la->act,
                                          y->fc2_w->data, rows, F, C));
    MHE__TIMED(MHE_OP_ZERO, memset(a->d_fc1, 0, (size_t)rows * F * sizeof(float)));
    MHE__TIMED(MHE_OP_ACT, mhe_act_bwd(c->activation, a->d_fc1, la->fc1, a->d_act, (int64_t)rows * F));
    MHE__TIMED(MHE_OP_FC1, mhe_linear_bwd(du, y->fc1_w->grad, mhe__opt_grad(y->fc1_b), a->d_fc1, u,
                                          y->fc1_w->data, rows, C, F));
}
#endif /* MHE_NO_TRAIN */

/* y = x + dropout(branch) for the residual sums; y = omega * x + dropout(branch)
   with Admin's scales omega [C] */
static MHE__VECTORISE void mhe__residual(const mhe_model *m, float *y, const float *x, float *branch, int64_t n, int site,
                                         const float *omega) {
    int64_t i, r, C = m->cfg.d_model;
    float p = m->training ? m->cfg.dropout : 0.0f;
    int c;
    if (p > 0) mhe_dropout_fwd(branch, branch, n, p, mhe__site_seed(m, site), 0);
    if (!omega) { for (i = 0; i < n; i++) y[i] = x[i] + branch[i]; return; }
    for (r = 0; r < n / C; r++)
        for (c = 0; c < C; c++) y[r * C + c] = omega[c] * x[r * C + c] + branch[r * C + c];
}

/* population variance over n values, in double (the profiling pass only) */
static double mhe__variance(const float *x, int64_t n) {
    double s = 0, q = 0;
    int64_t i;
    for (i = 0; i < n; i++) { s += x[i]; q += (double)x[i] * x[i]; }
    s /= (double)(n > 0 ? n : 1);
    return q / (double)(n > 0 ? n : 1) - s * s;
}

#ifndef MHE_NO_TRAIN
/* dbranch: where the branch gradient is; d itself when no dropout */
static const float *mhe__residual_bwd(const mhe_model *m, float *tmp, const float *d, int64_t n, int site) {
    float p = m->training ? m->cfg.dropout : 0.0f;
    if (p <= 0) return d;
    memset(tmp, 0, (size_t)n * sizeof(float));
    mhe_dropout_bwd(tmp, d, n, p, mhe__site_seed(m, site), 0);
    return tmp;
}
#endif /* MHE_NO_TRAIN */

/* the norm of sublayer k: norm1 (self-attention), norm3 (cross), norm2 (MLP) */
static void mhe__sub_norm(const mhe_layer *y, int k, const mhe_tensor **w, const mhe_tensor **b) {
    *w = k == 0 ? y->norm1_w : k == 1 ? y->norm3_w : y->norm2_w;
    *b = k == 0 ? y->norm1_b : k == 1 ? y->norm3_b : y->norm2_b;
}

/* output of sublayer k of block l, and its input (the block input or the
   previous sublayer's output) */
static const float *mhe__sub_out(const mhe_model *m, int l, int k) {
    const mhe_sub_acts *s = &m->acts.layer[l].sub[k];
    return m->cfg.post_norm ? s->nrm : s->sum;
}

static const float *mhe__sub_in(const mhe_model *m, int l, int k) {
    if (k == 0) return m->acts.layer[l].in;
    if (k == 2 && m->layers[l].cross.kind >= 0) return mhe__sub_out(m, l, 1);
    return mhe__sub_out(m, l, 0);
}

/* The two halves of a residual sublayer, shared by training (B*T rows) and
   decoding (one row), so both apply the same norms and Admin scales.
   Pre-norm: h' = omega*h + dropout(f(N(h))); post-norm: h' = N(omega*h +
   dropout(f(h))) (Vaswani et al. 2017; Xiong et al. 2020; omega = 1 without
   Admin, Liu et al. 2020 eq. 5). Enter returns the branch input u. */
static const float *mhe__sub_enter(const mhe_model *m, const mhe_layer *y, int k, const float *h, float *nrm, float *mean,
                                   float *rstd, int rows) {
    const mhe_tensor *nw, *nb;
    if (m->cfg.post_norm) return h;
    mhe__sub_norm(y, k, &nw, &nb);
    MHE__TIMED(MHE_OP_NORM, mhe__norm_fwd(m, nrm, mean, rstd, h, nw, nb, rows));
    return nrm;
}

/* sum = omega*h + dropout(branch); post-norm: nrm = N(sum). The output is
   nrm (post-norm) or sum (pre-norm); sum may be h itself (decoding). */
static void mhe__sub_leave(mhe_model *m, const mhe_layer *y, int l, int k, const float *h, float *branch, float *sum,
                           float *nrm, float *mean, float *rstd, int rows) {
    const mhe_tensor *nw, *nb;
    int64_t n = (int64_t)rows * m->cfg.d_model, i;
    const float *omega = y->omega[k] ? y->omega[k]->data : NULL;
    if (omega && m->admin_profiling) {
        /* Admin profiling: omega_i = r, then r = sqrt(Var[omega_i x_i] + Var[f_i(x_i)]) (Liu et al. 2020) */
        float *r = &m->admin_ratio[y->encoder], *scaled = m->acts.d_tmp;
        for (i = 0; i < m->cfg.d_model; i++) y->omega[k]->data[i] = *r;
        for (i = 0; i < n; i++) scaled[i] = *r * h[i];
        mhe__residual(m, sum, h, branch, n, MHE__SITE_RES(l, k), omega);
        *r = (float)sqrt(mhe__variance(scaled, n) + mhe__variance(branch, n));
    } else {
        MHE__TIMED(MHE_OP_RESIDUAL, mhe__residual(m, sum, h, branch, n, MHE__SITE_RES(l, k), omega));
    }
    if (!m->cfg.post_norm) return;
    mhe__sub_norm(y, k, &nw, &nb);
    MHE__TIMED(MHE_OP_NORM, mhe__norm_fwd(m, nrm, mean, rstd, sum, nw, nb, rows));
}

/* Sublayer k of block l over the batch, keeping what the backward needs. */
static void mhe__sub_fwd(mhe_model *m, int l, int k, const mhe__ctx *x) {
    const mhe_layer *y = &m->layers[l];
    mhe_layer_acts *la = &m->acts.layer[l];
    mhe_sub_acts *s = &la->sub[k];
    const float *h = mhe__sub_in(m, l, k), *u;
    float *branch = m->acts.scratch;
    int rows = x->B * x->T;
    if (k == 0 && !y->encoder && (m->skip_attn >> y->index & 1)) {   /* skipped: the sublayer is the identity */
        memcpy(m->cfg.post_norm ? s->nrm : s->sum, h, (size_t)rows * m->cfg.d_model * sizeof(float));
        return;
    }
    u = mhe__sub_enter(m, y, k, h, s->nrm, s->mean, s->rstd, rows);
    if (k == 2) mhe__mlp_fwd(m, y, rows, u, la->fc1, la->act, branch);
    else mhe__attn_branch_fwd(m, l, k, x, u, branch);
    mhe__sub_leave(m, y, l, k, h, branch, s->sum, s->nrm, s->mean, s->rstd, rows);
}

#ifndef MHE_NO_TRAIN
/* Backward of sublayer k: acts.d_h holds the gradient of its output and
   leaves with the gradient of its input. */
static void mhe__sub_bwd(mhe_model *m, int l, int k, const mhe__ctx *x) {
    const mhe_layer *y = &m->layers[l];
    mhe_acts *a = &m->acts;
    const mhe_sub_acts *s = &a->layer[l].sub[k];
    const float *h = mhe__sub_in(m, l, k), *dbr;
    const mhe_tensor *nw, *nb;
    int rows = x->B * x->T;
    size_t n = (size_t)rows * m->cfg.d_model;
    if (k == 0 && !y->encoder && (m->skip_attn >> y->index & 1)) return;   /* identity: d_h passes through */
    mhe__sub_norm(y, k, &nw, &nb);
    if (!m->cfg.post_norm) {
        /* d h = d h' + N'(f'(d h')) */
        MHE__TIMED(MHE_OP_RESIDUAL, dbr = mhe__residual_bwd(m, a->d_tmp, a->d_h, (int64_t)n, MHE__SITE_RES(l, k)));
        MHE__TIMED(MHE_OP_ZERO, memset(a->d_u, 0, n * sizeof(float)));
        if (k == 2) mhe__mlp_bwd(m, l, rows, s->nrm, dbr, a->d_u);
        else mhe__attn_branch_bwd(m, l, k, x, s->nrm, dbr, a->d_u);
        MHE__TIMED(MHE_OP_NORM, mhe__norm_bwd(m, a->d_h, a->d_u, h, nw, nb, s->mean, s->rstd, rows));
    } else {
        /* d sum = N'(d h'); d h = d sum + f'(d sum) (omega * d sum with Admin, and d omega += sum_rows d sum * h) */
        MHE__TIMED(MHE_OP_ZERO, memset(a->d_u, 0, n * sizeof(float)));
        MHE__TIMED(MHE_OP_NORM, mhe__norm_bwd(m, a->d_u, a->d_h, s->sum, nw, nb, s->mean, s->rstd, rows));
        if (y->omega[k]) {
            const float *om = y->omega[k]->data;
            float *dom = y->omega[k]->grad;
            int C = m->cfg.d_model, r, c;
            for (r = 0; r < rows; r++)
                for (c = 0; c < C; c++) {
                    size_t i = (size_t)r * C + c;
                    dom[c] += a->d_u[i] * h[i];
                    a->d_h[i] = om[c] * a->d_u[i];
                }
        } else {
            memcpy(a->d_h, a->d_u, n * sizeof(float));
        }
        MHE__TIMED(MHE_OP_RESIDUAL, dbr = mhe__residual_bwd(m, a->d_tmp, a->d_u, (int64_t)n, MHE__SITE_RES(l, k)));
        if (k == 2) mhe__mlp_bwd(m, l, rows, h, dbr, a->d_h);
        else mhe__attn_branch_bwd(m, l, k, x, h, dbr, a->d_h);
    }
}
#endif /* MHE_NO_TRAIN */

/* blocks l0..l1-1 of one stack on input h; returns the stack's output */
static const float *mhe__stack_fwd(mhe_model *m, int l0, int l1, const mhe__ctx *x, const float *h) {
    int l, k;
    for (l = l0; l < l1; l++) {
        mhe_layer_acts *la = &m->acts.layer[l];
        la->in = h;
        for (k = 0; k < 3; k++) if (k != 1 || m->layers[l].cross.kind >= 0) mhe__sub_fwd(m, l, k, x);
        la->out = h = mhe__sub_out(m, l, 2);
    }
    return h;
}

#ifndef MHE_NO_TRAIN
static void mhe__stack_bwd(mhe_model *m, int l0, int l1, const mhe__ctx *x) {
    int l, k;
    for (l = l1 - 1; l >= l0; l--)
        for (k = 2; k >= 0; k--) if (k != 1 || m->layers[l].cross.kind >= 0) mhe__sub_bwd(m, l, k, x);
}
#endif /* MHE_NO_TRAIN */

/* token embedding plus learned positions, then embedding dropout */
static void mhe__embed_fwd(const mhe_model *m, float *out, const int *tokens, const mhe_tensor *pos, int B, int T, int site) {
    int C = m->cfg.d_model, b, t;
    if (site == 0 && m->emb_in.active) mhe__words_fwd(m, out);   /* words: vocab rows or hash embeddings */
    else mhe__q8_gather(out, m->tok_emb, tokens, B * T, C);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) mhe__axpy(out + ((size_t)b * T + t) * C, 1.0f, pos->data + (size_t)t * C, C);
    if (site == 0 && m->type_emb)   /* BERT's token types (segments) */
        for (b = 0; b < B * T; b++) mhe__axpy(out + (size_t)b * C, 1.0f, m->type_emb->data + (size_t)m->acts.types[b] * C, C);
    if (site == 0 && m->emb_norm_w) {   /* BERT: LayerNorm(word + position + type), then dropout */
        memcpy(m->acts.emb_sum, out, (size_t)B * T * C * sizeof(float));
        mhe__norm_fwd(m, out, m->acts.emb_mean, m->acts.emb_rstd, m->acts.emb_sum, m->emb_norm_w, m->emb_norm_b, B * T);
    }
    if (m->training && m->cfg.dropout > 0) mhe_dropout_fwd(out, out, (int64_t)B * T * C, m->cfg.dropout, mhe__site_seed(m, site), 0);
}

#ifndef MHE_NO_TRAIN
static void mhe__embed_bwd(mhe_model *m, const float *d, const int *tokens, mhe_tensor *pos, int B, int T, int site) {
    int C = m->cfg.d_model, b, t;
    if (m->training && m->cfg.dropout > 0) {
        memset(m->acts.d_tmp, 0, (size_t)B * T * C * sizeof(float));
        mhe_dropout_bwd(m->acts.d_tmp, d, (int64_t)B * T * C, m->cfg.dropout, mhe__site_seed(m, site), 0);
        d = m->acts.d_tmp;
    }
    if (site == 0 && m->emb_norm_w) {   /* through the embeddings' norm (scratch is free once the blocks are done) */
        memset(m->acts.scratch, 0, (size_t)B * T * C * sizeof(float));
        mhe__norm_bwd(m, m->acts.scratch, d, m->acts.emb_sum, m->emb_norm_w, m->emb_norm_b, m->acts.emb_mean, m->acts.emb_rstd, B * T);
        d = m->acts.scratch;
    }
    if (site == 0 && m->type_emb)
        for (b = 0; b < B * T; b++) mhe__axpy(m->type_emb->grad + (size_t)m->acts.types[b] * C, 1.0f, d + (size_t)b * C, C);
    if (site == 0 && m->emb_in.active) mhe__words_bwd(m, d);
    else mhe_embedding_bwd(m->tok_emb->grad, d, tokens, B * T, C);
    for (b = 0; b < B; b++)
        for (t = 0; t < T; t++) mhe__axpy(pos->grad + (size_t)t * C, 1.0f, d + ((size_t)b * T + t) * C, C);
}
#endif /* MHE_NO_TRAIN */

static int mhe__n_enc(const mhe_config *c) { return c->arch == MHE_ARCH_ENCDEC ? c->enc_layers : 0; }

/* activations of the fixed stream for T tokens (one sequence), and room for
   the gradients of its Q, K at every layer below top */
static mhe_status mhe__fixed_reserve(mhe_model *m, int T) {
    mhe_fixed_stream *f = &m->fixed;
    mhe_acts keep = m->acts;
    size_t bytes, dqk = (size_t)f->top * T * 2 * m->cfg.n_heads * mhe_config_d_head(&m->cfg);
    unsigned char *base;
    void *block;
    if (f->block && T <= f->T) return MHE_OK;
    bytes = mhe__acts_layout(m, 1, T, 0, NULL);
    block = MHE_MALLOC(m->alloc_ctx, bytes + MHE_ARENA_ALIGN + dqk * sizeof(float));
    if (!block) return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes for the fixed stream", bytes);
    if (f->block) MHE_FREE(m->alloc_ctx, f->block);
    f->block = block;
    base = (unsigned char *)(((uintptr_t)block + MHE_ARENA_ALIGN - 1) & ~(uintptr_t)(MHE_ARENA_ALIGN - 1));
    mhe__acts_layout(m, 1, T, 0, base);
    f->acts = m->acts;
    f->acts.B = 1; f->acts.T = T; f->acts.bytes = bytes;
    f->d_qk = (float *)(void *)(base + bytes);
    f->T = T;
    m->acts = keep;
    return MHE_OK;
}

static void mhe__fixed_ctx(mhe_model *m, int T, int causal, mhe__ctx *x) {
    memset(x, 0, sizeof *x);
    x->B = 1; x->T = T; x->causal = causal; x->fixed = 1;
    x->emb = m->acts.emb; x->d_emb = m->acts.d_emb;
}

/* eq. 4.9 / 4.11: X = TransformerBlock^(l)(eps or Emb(t^s)) for every layer
   below top, the model's own blocks on the fixed input (no dropout: it is
   not data). Runs before the main stream, which reads its Q, K. */
static mhe_status mhe__fixed_fwd(mhe_model *m, int T, int causal) {
    mhe_fixed_stream *f = &m->fixed;
    const mhe_scratch *outer;
    mhe_acts keep;
    mhe__ctx x;
    mhe_status st;
    int C = m->cfg.d_model, t, training = m->training;
    if (f->kind < 0) return MHE_OK;
    if ((st = mhe__fixed_reserve(m, T)) != MHE_OK) return st;
    keep = m->acts; m->acts = f->acts; m->training = 0;
    outer = mhe_scratch_bind(&m->acts.kernel);   /* now the fixed stream's */
    if (mhe__kind(f->kind)->qk == MHE__QK_RANDOM) memcpy(m->acts.emb, f->eps, (size_t)T * C * sizeof(float));
    else
        for (t = 0; t < T; t++) {
            mhe__q8_gather(m->acts.emb + (size_t)t * C, m->tok_emb, f->tokens + t, 1, C);
            mhe__axpy(m->acts.emb + (size_t)t * C, 1.0f, m->pos_emb->data + (size_t)t * C, C);
        }
    mhe__fixed_ctx(m, T, causal, &x);
    mhe__stack_fwd(m, 0, f->top, &x, m->acts.emb);
    f->acts = m->acts; m->acts = keep; m->training = training;
    mhe_scratch_bind(outer);
    memset(f->d_qk, 0, (size_t)f->top * f->T * 2 * m->cfg.n_heads * mhe_config_d_head(&m->cfg) * sizeof(float));
    return MHE_OK;
}

#ifndef MHE_NO_TRAIN
/* after the main stream's backward filled d_qk: back through the fixed
   stream into the blocks below each such layer (and fixedseq-qk's token and
   position embeddings; rndemb-qk's eps is constant) */
static void mhe__fixed_bwd(mhe_model *m) {
    mhe_fixed_stream *f = &m->fixed;
    const mhe_scratch *outer;
    mhe_acts keep;
    mhe__ctx x;
    int C = m->cfg.d_model, T = m->last_T, t, training = m->training;
    size_t n = (size_t)T * C;
    if (f->kind < 0) return;
    keep = m->acts; m->acts = f->acts; m->training = 0;
    outer = mhe_scratch_bind(&m->acts.kernel);
    memset(m->acts.d_h, 0, n * sizeof(float));
    if (m->acts.d_emb) memset(m->acts.d_emb, 0, n * sizeof(float));
    mhe__fixed_ctx(m, T, m->cfg.arch != MHE_ARCH_ENCODER, &x);
    mhe__stack_bwd(m, 0, f->top, &x);
    if (m->acts.d_emb) mhe__axpy(m->acts.d_h, 1.0f, m->acts.d_emb, (int)n);
    if (mhe__kind(f->kind)->qk == MHE__QK_SEQUENCE) {
        mhe_embedding_bwd(m->tok_emb->grad, m->acts.d_h, f->tokens, T, C);
        for (t = 0; t < T; t++) mhe__axpy(m->pos_emb->grad + (size_t)t * C, 1.0f, m->acts.d_h + (size_t)t * C, C);
    }
    f->acts = m->acts; m->acts = keep; m->training = training;
    mhe_scratch_bind(outer);
    memset(f->d_qk, 0, (size_t)f->top * f->T * 2 * m->cfg.n_heads * mhe_config_d_head(&m->cfg) * sizeof(float));
}
#endif /* MHE_NO_TRAIN */

/* the contexts of the two stacks for the last batch */
static void mhe__contexts(mhe_model *m, mhe__ctx *enc, mhe__ctx *dec) {
    mhe_acts *a = &m->acts;
    int encdec = m->cfg.arch == MHE_ARCH_ENCDEC;
    memset(enc, 0, sizeof *enc);
    memset(dec, 0, sizeof *dec);
    enc->B = dec->B = m->last_B;
    enc->T = m->last_Ts; enc->len = a->src_lengths;
    dec->T = m->last_T; dec->len = a->lengths;
    dec->causal = m->cfg.arch != MHE_ARCH_ENCODER;
    if (encdec) { dec->mem = a->mem; dec->Ts = m->last_Ts; dec->mem_len = a->src_lengths; dec->d_mem = a->d_mem; }
    enc->emb = a->src_emb; enc->d_emb = a->d_src_emb;
    dec->emb = a->emb; dec->d_emb = a->d_emb;
    if (encdec) { dec->mem_emb = a->src_emb; dec->d_mem_emb = a->d_src_emb; }
}

/* checks a token array against the vocabulary */
static mhe_status mhe__check_tokens(mhe_model *m, const int *tok, int n, const char *what) {
    int i;
    if (!tok) return mhe__fail(m->err, MHE_ERR_ARG, "forward: %s is NULL", what);
    for (i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab_size)
            return mhe__fail(m->err, MHE_ERR_DATA, "%s: token %d at position %d is outside the vocabulary [0, %d)", what, tok[i], i, m->cfg.vocab_size);
    return MHE_OK;
}

static mhe_status mhe__check_lengths(mhe_model *m, const int *len, int B, int T, const char *what) {
    int b;
    if (len)
        for (b = 0; b < B; b++)
            if (len[b] < 1 || len[b] > T) return mhe__fail(m->err, MHE_ERR_DATA, "%s[%d] = %d is outside [1, %d]", what, b, len[b], T);
    return MHE_OK;
}

/* the encoder of encdec on the batch's source: leaves its output in acts.mem */
static void mhe__encode(mhe_model *m) {
    mhe_acts *a = &m->acts;
    mhe__ctx enc, dec;
    const float *h;
    int E = mhe__n_enc(&m->cfg), rows = m->last_B * m->last_Ts;
    mhe__contexts(m, &enc, &dec);
    MHE__TIMED(MHE_OP_EMBED, mhe__embed_fwd(m, a->src_emb, a->src, m->enc_pos_emb, m->last_B, m->last_Ts, 1));
    h = mhe__stack_fwd(m, 0, E, &enc, a->src_emb);
    if (!m->cfg.post_norm) {
        MHE__TIMED(MHE_OP_NORM, mhe__norm_fwd(m, a->enc_fin.nrm, a->enc_fin.mean, a->enc_fin.rstd, h, m->enc_lnf_w,
                                              m->enc_lnf_b, rows));
        h = a->enc_fin.nrm;
    }
    a->mem = h;
}

/* the first of n values that is NaN or infinite, or -1 */
static int64_t mhe__first_nonfinite(const float *x, int64_t n) {
    int64_t i;
    for (i = 0; x && i < n; i++) if (!mhe__is_finite(x[i])) return i;
    return -1;
}

/* "what produced inf" when x[0..n) holds a NaN or infinity: 1 and the text in where */
static int mhe__nonfinite_at(const float *x, int64_t n, char *where, size_t len, const char *fmt, int a, const char *b) {
    int64_t i = mhe__first_nonfinite(x, n);
    char what[96];
    uint32_t bits;
    if (i < 0) return 0;
    snprintf(what, sizeof what, fmt, a, b);
    memcpy(&bits, &x[i], 4);   /* on the bits: -ffast-math folds x != x */
    snprintf(where, len, "%s produced %s", what, bits & 0x7FFFFF ? "nan" : bits >> 31 ? "-inf" : "inf");
    return 1;
}

/* After a forward pass, the first activation that holds a NaN or infinity, in
   the order the forward computes them: embeddings, each block's norms,
   sublayer outputs and MLP hidden layer (encoder first), the final norm, the
   head. Only called once a loss or the logits came out non-finite, so the
   pass itself checks nothing. */
static int mhe__nonfinite_where(const mhe_model *m, char *where, size_t len) {
    const mhe_config *c = &m->cfg;
    const mhe_acts *a = &m->acts;
    int E = mhe__n_enc(c), l, k, C = c->d_model, F = mhe_config_d_ff(c);
    int64_t rows_src = (int64_t)m->last_B * m->last_Ts, rows = (int64_t)m->last_B * m->last_T;
    static const char *sub_name[3] = { "attention", "cross-attention", "MLP" };
    if (E && mhe__nonfinite_at(a->src_emb, rows_src * C, where, len, "the encoder's embedding%.0d%s", 0, "")) return 1;
    if (!E && mhe__nonfinite_at(a->emb, rows * C, where, len, "the embedding%.0d%s", 0, "")) return 1;
    for (l = 0; l < m->n_total_layers; l++) {
        const mhe_layer *y = &m->layers[l];
        const mhe_layer_acts *la = &a->layer[l];
        int64_t r = y->encoder ? rows_src : rows;
        const char *stack = y->encoder ? "encoder layer %d (%s)" : "layer %d (%s)";
        char piece[64];
        if (l == E && E) {
            if (!c->post_norm && mhe__nonfinite_at(a->enc_fin.nrm, rows_src * C, where, len, "the encoder's final norm%.0d%s", 0, "")) return 1;
            if (mhe__nonfinite_at(a->emb, rows * C, where, len, "the decoder's embedding%.0d%s", 0, "")) return 1;
        }
        for (k = 0; k < 3; k++) {
            const mhe_sub_acts *sa = &la->sub[k];
            if (k == 1 && y->cross.kind < 0) continue;
            if (k == 0 && !y->encoder && (m->skip_attn >> y->index & 1)) continue;
            snprintf(piece, sizeof piece, "norm before the %s", sub_name[k]);
            if (!c->post_norm && mhe__nonfinite_at(sa->nrm, r * C, where, len, stack, y->index, piece)) return 1;
            snprintf(piece, sizeof piece, "MLP hidden layer");
            if (k == 2 && (mhe__nonfinite_at(la->fc1, r * F, where, len, stack, y->index, piece) ||
                           mhe__nonfinite_at(la->act, r * F, where, len, stack, y->index, "MLP activation"))) return 1;
            snprintf(piece, sizeof piece, "%s output", sub_name[k]);
            if (mhe__nonfinite_at(sa->sum, r * C, where, len, stack, y->index, piece)) return 1;
            snprintf(piece, sizeof piece, "norm after the %s", sub_name[k]);
            if (c->post_norm && mhe__nonfinite_at(sa->nrm, r * C, where, len, stack, y->index, piece)) return 1;
        }
    }
    if (!c->post_norm && mhe__nonfinite_at(a->fin.nrm, rows * C, where, len, "the final norm%.0d%s", 0, "")) return 1;
    if (m->last_cls)
        return mhe__nonfinite_at(a->pooled, (int64_t)m->last_B * C, where, len, "the pooled sequence%.0d%s", 0, "") ||
               mhe__nonfinite_at(a->cls_logits, (int64_t)m->last_B * c->n_classes, where, len, "the classification head%.0d%s", 0, "");
    return mhe__nonfinite_at(a->logits, rows * (c->token_head == MHE_HEAD_SR ? MHE_SR_CLASSES : c->vocab_size), where, len,
                             "the output head (logits)%.0d%s", 0, "");
}

MHEDEF mhe_status mhe_model_find_nonfinite(mhe_model *m) {
    char where[200];
    if (!m || !m->params) return MHE_ERR_ARG;   /* (q8 and in-place models have no param_data) */
    if (!mhe__nonfinite_where(m, where, sizeof where)) return MHE_OK;
    return mhe__fail(m->err, MHE_ERR_NONFINITE, "%s", where);
}

/* a non-finite loss, with the first activation that went non-finite */
static mhe_status mhe__loss_nonfinite(mhe_model *m, float loss) {
    char where[200];
    if (mhe__nonfinite_where(m, where, sizeof where)) return mhe__fail(m->err, MHE_ERR_NONFINITE, "loss is %g: %s", (double)loss, where);
    return mhe__fail(m->err, MHE_ERR_NONFINITE, "loss is %g", (double)loss);
}

/* Everything a batch must satisfy before the forward touches it: a source for
   encoder-decoders, tokens, lengths, targets, labels and types within the
   model's ranges. The activations are reserved first (the word inputs are
   gathered into them). */
static mhe_status mhe__batch_check(mhe_model *m, const mhe_batch *bt) {
    const mhe_config *c = &m->cfg;
    int B = bt->B, T = bt->T, E = mhe__n_enc(c), V = mhe__head_width(c), BT = B * T, Ts = E ? bt->Ts : 0, i;
    int cls = bt->labels != NULL;
    mhe_status st;
    if (E && (!bt->src || Ts < 1))
        return mhe__fail(m->err, MHE_ERR_ARG, "forward: an encoder-decoder model needs a source (src, Ts >= 1)");
    if (cls && c->n_classes < 1) return mhe__fail(m->err, MHE_ERR_CONFIG, "the model has no classification head (n_classes=0)");
    if (cls && bt->targets) return mhe__fail(m->err, MHE_ERR_ARG, "forward: give per-token targets or sequence labels, not both");
    if ((st = mhe_model_reserve(m, B, T, Ts)) != MHE_OK) return st;
    mhe_scratch_bind(&m->acts.kernel);   /* the kernels' slices in the activation block */
    if ((st = mhe__emb_prepare(m, bt)) != MHE_OK) return st;   /* checks the tokens (and gathers word inputs) */
    if (E && (st = mhe__check_tokens(m, bt->src, B * Ts, "source")) != MHE_OK) return st;
    if ((st = mhe__check_lengths(m, bt->lengths, B, T, "lengths")) != MHE_OK) return st;
    if (E && (st = mhe__check_lengths(m, bt->src_lengths, B, Ts, "src_lengths")) != MHE_OK) return st;
    if (bt->targets)
        for (i = 0; i < BT; i++)
            if (bt->targets[i] >= V) return mhe__fail(m->err, MHE_ERR_DATA, "target %d at position %d is outside %s [0, %d)", bt->targets[i], i,
                                                      c->token_head == MHE_HEAD_SR ? "the S+R classes" : "the vocabulary", V);
    if (cls)
        for (i = 0; i < B; i++)
            if (bt->labels[i] >= c->n_classes) return mhe__fail(m->err, MHE_ERR_DATA, "label %d of sequence %d is outside [0, %d)", bt->labels[i], i, c->n_classes);
    if (bt->types && !c->type_vocab) return mhe__fail(m->err, MHE_ERR_ARG, "forward: token types given, but the model has no type table (type_vocab=0)");
    if (bt->types)
        for (i = 0; i < BT; i++)
            if (bt->types[i] < 0 || bt->types[i] >= c->type_vocab)
                return mhe__fail(m->err, MHE_ERR_DATA, "token type %d at position %d is outside [0, %d) (type_vocab)", bt->types[i], i, c->type_vocab);
    return MHE_OK;
}

/* the batch kept in the activations: the backward reads tokens, targets and
   lengths (padding is never a target) */
static void mhe__batch_keep(mhe_model *m, const mhe_batch *bt) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    int B = bt->B, T = bt->T, E = mhe__n_enc(c), Ts = E ? bt->Ts : 0, BT = B * T, cls = bt->labels != NULL, i, t;
    if (c->type_vocab) {
        if (bt->types) memcpy(a->types, bt->types, (size_t)BT * sizeof(int));
        else memset(a->types, 0, (size_t)BT * sizeof(int));
    }
    memcpy(a->tokens, bt->tokens, (size_t)BT * sizeof(int));
    for (i = 0; i < B; i++) a->lengths[i] = bt->lengths ? bt->lengths[i] : T;
    if (bt->targets)
        for (i = 0; i < B; i++)
            for (t = 0; t < T; t++) a->targets[(size_t)i * T + t] = t < a->lengths[i] ? bt->targets[(size_t)i * T + t] : -1;
    if (cls) memcpy(a->targets, bt->labels, (size_t)B * sizeof(int));
    if (E) {
        memcpy(a->src, bt->src, (size_t)B * Ts * sizeof(int));
        for (i = 0; i < B; i++) a->src_lengths[i] = bt->src_lengths ? bt->src_lengths[i] : Ts;
    }
    m->last_B = B; m->last_T = T; m->last_Ts = Ts; m->last_has_targets = bt->targets || cls; m->last_cls = cls;
}

/* the mean cross-entropy of logits [N, K] against a->targets into m and *loss; non-finite: where it went */
static mhe_status mhe__loss_fwd(mhe_model *m, const float *logits, int N, int K, float *loss) {
    float mean;
    int count;
    MHE__TIMED(MHE_OP_LOSS, mhe_xent_fwd(m->acts.losses, &mean, &count, logits, m->acts.targets, N, K));
    m->last_loss = mean;
    m->last_count = count;
    if (loss) *loss = mean;
    return mhe__is_finite(mean) ? MHE_OK : mhe__loss_nonfinite(m, mean);
}

/* the classification head on the final hidden states x [B T, C]: the mean
   over each sequence's real tokens (or BERT's pooler on the first), then a
   linear layer to the classes, and the loss against the labels */
static mhe_status mhe__cls_head_fwd(mhe_model *m, const float *x, int B, int T, float *loss) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    int C = c->d_model, K = c->n_classes, i, t;
    if (c->cls_pool == MHE_POOL_FIRST) {   /* pooled = tanh(W_p h_0 + b_p) */
        for (i = 0; i < B; i++) memcpy(a->first + (size_t)i * C, x + (size_t)i * T * C, (size_t)C * sizeof(float));
        MHE__TIMED(MHE_OP_HEAD, mhe__linq(a->pooled, a->first, m->pooler_w, mhe__opt_data(m->pooler_b), B, C, C));
        for (i = 0; i < B * C; i++) a->pooled[i] = tanhf(a->pooled[i]);
    } else {
        memset(a->pooled, 0, (size_t)B * C * sizeof(float));
        for (i = 0; i < B; i++)
            for (t = 0; t < a->lengths[i]; t++) mhe__axpy(a->pooled + (size_t)i * C, 1.0f / (float)a->lengths[i], x + ((size_t)i * T + t) * C, C);
    }
    MHE__TIMED(MHE_OP_HEAD, mhe__linq(a->cls_logits, a->pooled, m->cls_w, mhe__opt_data(m->cls_b), B, C, K));
    return mhe__loss_fwd(m, a->cls_logits, B, K, loss);
}

/* the token head on x [BT, C]: logits (BERT's MLM transform norm(act(W h + b))
   first where the model has it), and the loss where the batch has targets */
static mhe_status mhe__token_head_fwd(mhe_model *m, const float *x, int BT, int has_targets, float *loss) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    int C = c->d_model, V = mhe__head_width(c);
    const mhe_tensor *hb, *hw = mhe__token_head(m, &hb);
    if (c->head_transform) {
        MHE__TIMED(MHE_OP_HEAD, mhe__linq(a->hd_pre, x, m->head_w, mhe__opt_data(m->head_b), BT, C, C));
        mhe_act_fwd(c->activation, a->hd_act, a->hd_pre, (int64_t)BT * C);
        mhe__norm_fwd(m, a->hd_out, a->hd_mean, a->hd_rstd, a->hd_act, m->head_norm_w, m->head_norm_b, BT);
        x = a->hd_out;
    }
    MHE__TIMED(MHE_OP_HEAD, mhe__linq(a->logits, x, hw, mhe__opt_data(hb), BT, C, V));
    return has_targets ? mhe__loss_fwd(m, a->logits, BT, V, loss) : MHE_OK;
}

/* The model's forward pass, top to bottom: check and keep the batch; the
   encoder (encdec); the fixed stream (rndemb-qk, fixedseq-qk); embed; each
   block of the stack (mhe__stack_fwd: per block norm, attention, residual,
   [norm, cross-attention, residual,] norm, MLP, residual, each sublayer
   mhe__sub_fwd); the final norm (pre-norm); the head and the loss. */
static mhe_status mhe__forward_batch(mhe_model *m, const mhe_batch *bt, float *loss) {
    mhe_acts *a;
    mhe_status st;
    mhe__ctx enc, dec;
    const float *x;
    if (!m) return MHE_ERR_ARG;
    if (!bt) return mhe__fail(m->err, MHE_ERR_ARG, "forward: batch is NULL");
    if ((st = mhe__batch_check(m, bt)) != MHE_OK) return st;
    mhe__batch_keep(m, bt);
    a = &m->acts;
    MHE__PHASE(MHE_PHASE_FORWARD);
    if (mhe__n_enc(&m->cfg)) mhe__encode(m);
    mhe__contexts(m, &enc, &dec);
    if ((st = mhe__fixed_fwd(m, bt->T, dec.causal)) != MHE_OK) return st;
    MHE__TIMED(MHE_OP_EMBED, mhe__embed_fwd(m, a->emb, a->tokens, m->pos_emb, bt->B, bt->T, 0));
    x = mhe__stack_fwd(m, mhe__n_enc(&m->cfg), m->n_total_layers, &dec, a->emb);
    if (!m->cfg.post_norm) {
        MHE__TIMED(MHE_OP_NORM, mhe__norm_fwd(m, a->fin.nrm, a->fin.mean, a->fin.rstd, x, m->lnf_w, m->lnf_b, bt->B * bt->T));
        x = a->fin.nrm;
    }
    a->final_h = x;
    if (m->last_cls) return mhe__cls_head_fwd(m, x, bt->B, bt->T, loss);
    return mhe__token_head_fwd(m, x, bt->B * bt->T, bt->targets != NULL, loss);
}

/* the forward on the model's own kernel scratch; the caller's binding back after */
MHEDEF mhe_status mhe_model_forward_batch(mhe_model *m, const mhe_batch *bt, float *loss) {
    const mhe_scratch *outer = mhe_scratch_bind(NULL);
    mhe_status st = mhe__forward_batch(m, bt, loss);
    mhe_scratch_bind(outer);
    return st;
}

MHEDEF mhe_status mhe_model_forward(mhe_model *m, const int *tokens, const int *targets, int B, int T, float *loss) {
    mhe_batch b;
    memset(&b, 0, sizeof b);
    b.B = B; b.T = T; b.tokens = tokens; b.targets = targets;
    return mhe_model_forward_batch(m, &b, loss);
}

MHEDEF mhe_status mhe_model_forward_cls(mhe_model *m, const int *tokens, const int *labels, int B, int T, float *loss) {
    mhe_batch b;
    if (!labels) return m ? mhe__fail(m->err, MHE_ERR_ARG, "forward_cls: labels is NULL") : MHE_ERR_ARG;
    memset(&b, 0, sizeof b);
    b.B = B; b.T = T; b.tokens = tokens; b.labels = labels;
    return mhe_model_forward_batch(m, &b, loss);
}

MHEDEF mhe_status mhe_model_admin_init(mhe_model *m, const mhe_batch *b) {
    mhe_status st;
    int keep = m ? m->training : 0;
    if (!m) return MHE_ERR_ARG;
    if (!m->cfg.admin) return mhe__fail(m->err, MHE_ERR_CONFIG, "Admin initialisation needs a model with admin=1");
    m->admin_profiling = 1;
    m->admin_ratio[0] = m->admin_ratio[1] = 1.0f;
    m->training = 1;   /* as the authors profile: dropout on */
    st = mhe_model_forward_batch(m, b, NULL);
    m->training = keep;
    m->admin_profiling = 0;
    return st;
}

#ifndef MHE_NO_TRAIN
static mhe_status mhe__backward(mhe_model *m) {
    const mhe_config *c = &m->cfg;
    mhe_acts *a = &m->acts;
    mhe__ctx enc, dec;
    int B = m->last_B, T = m->last_T, BT = B * T, C = c->d_model, V = mhe__head_width(c), E = mhe__n_enc(c), i, t;
    size_t nC = (size_t)BT * C * sizeof(float);
    const mhe_tensor *hb, *head = mhe__token_head(m, &hb);
    float *dfin;
    if (m->q8) return mhe__fail(m->err, MHE_ERR_FORMAT, "backward: the model has int8 (q8) weights, for inference only (no gradients)");
    if (!m->grad_data && m->arena) return mhe__fail(m->err, MHE_ERR_ARG, "backward: this model was loaded for inference only (no gradients)");
    if (!m->grad_data) {   /* a loaded model's first backward */
        mhe_status gs = mhe__model_grads(m);
        if (gs != MHE_OK) return gs;
    }
    if (!m->last_has_targets || BT == 0) return mhe__fail(m->err, MHE_ERR_ARG, "backward needs a forward pass with targets first");
    mhe__contexts(m, &enc, &dec);
    MHE__PHASE(MHE_PHASE_BACKWARD);
    /* gradient of the head input: into d_u before the final norm (pre-norm), straight into d_h (post-norm) */
    dfin = c->post_norm ? a->d_h : a->d_u;
    MHE__TIMED(MHE_OP_ZERO, memset(dfin, 0, nC));
    if (m->last_cls) {
        /* loss = mean xent(W_c mean_t(h) + b_c): d h_t = d pooled / len for the real tokens */
        int K = c->n_classes;
        memset(a->d_cls, 0, (size_t)B * K * sizeof(float));
        memset(a->d_pooled, 0, (size_t)B * C * sizeof(float));
        if (m->last_count > 0) mhe_xent_bwd(a->d_cls, a->cls_logits, a->targets, B, K, 1.0f / (float)m->last_count);
        mhe_linear_bwd(a->d_pooled, m->cls_w->grad, mhe__opt_grad(m->cls_b), a->d_cls, a->pooled, m->cls_w->data, B, C, K);
        if (c->cls_pool == MHE_POOL_FIRST) {   /* tanh' = 1 - tanh^2, then the pooler's linear layer into h_0 */
            for (i = 0; i < B * C; i++) a->d_pooled[i] *= 1.0f - a->pooled[i] * a->pooled[i];
            memset(a->d_first, 0, (size_t)B * C * sizeof(float));
            mhe_linear_bwd(a->d_first, m->pooler_w->grad, mhe__opt_grad(m->pooler_b), a->d_pooled, a->first, m->pooler_w->data, B, C, C);
            for (i = 0; i < B; i++) mhe__axpy(dfin + (size_t)i * T * C, 1.0f, a->d_first + (size_t)i * C, C);
        } else {
            for (i = 0; i < B; i++)
                for (t = 0; t < a->lengths[i]; t++) mhe__axpy(dfin + ((size_t)i * T + t) * C, 1.0f / (float)a->lengths[i], a->d_pooled + (size_t)i * C, C);
        }
    } else {
        MHE__TIMED(MHE_OP_ZERO, memset(a->d_logits, 0, (size_t)BT * V * sizeof(float)));
        if (m->last_count > 0)
            MHE__TIMED(MHE_OP_LOSS, mhe_xent_bwd(a->d_logits, a->logits, a->targets, BT, V, 1.0f / (float)m->last_count));
        if (c->head_transform) {   /* back through norm(act(W h + b)) */
            size_t n = (size_t)BT * C;
            memset(a->d_hd1, 0, n * sizeof(float));
            MHE__TIMED(MHE_OP_HEAD, mhe_linear_bwd(a->d_hd1, head->grad, mhe__opt_grad(hb), a->d_logits, a->hd_out, head->data, BT, C, V));
            memset(a->d_hd2, 0, n * sizeof(float));
            mhe__norm_bwd(m, a->d_hd2, a->d_hd1, a->hd_act, m->head_norm_w, m->head_norm_b, a->hd_mean, a->hd_rstd, BT);
            memset(a->d_hd1, 0, n * sizeof(float));
            mhe_act_bwd(c->activation, a->d_hd1, a->hd_pre, a->d_hd2, (int64_t)n);
            mhe_linear_bwd(dfin, m->head_w->grad, mhe__opt_grad(m->head_b), a->d_hd1, a->final_h, m->head_w->data, BT, C, C);
        } else {
            MHE__TIMED(MHE_OP_HEAD, mhe_linear_bwd(dfin, head->grad, mhe__opt_grad(hb), a->d_logits, a->final_h,
                                                   head->data, BT, C, V));
        }
    }
    if (!c->post_norm) {
        MHE__TIMED(MHE_OP_ZERO, memset(a->d_h, 0, nC));
        MHE__TIMED(MHE_OP_NORM, mhe__norm_bwd(m, a->d_h, a->d_u, a->layer[m->n_total_layers - 1].out, m->lnf_w,
                                              m->lnf_b, a->fin.mean, a->fin.rstd, BT));
    }
    if (E) memset(a->d_mem, 0, (size_t)B * m->last_Ts * C * sizeof(float));
    if (a->d_emb) memset(a->d_emb, 0, nC);
    if (a->d_src_emb) memset(a->d_src_emb, 0, (size_t)B * m->last_Ts * C * sizeof(float));
    mhe__stack_bwd(m, E, m->n_total_layers, &dec);
    if (a->d_emb) mhe__axpy(a->d_h, 1.0f, a->d_emb, BT * C);   /* staticemb-qk: Q, K read the embeddings too */
    MHE__TIMED(MHE_OP_EMBED, mhe__embed_bwd(m, a->d_h, a->tokens, m->pos_emb, B, T, 0));
    mhe__fixed_bwd(m);
    if (E) {   /* the encoder, from the gradient its output got from every cross-attention */
        int rows = B * m->last_Ts;
        if (!c->post_norm) {
            MHE__TIMED(MHE_OP_ZERO, memset(a->d_h, 0, (size_t)rows * C * sizeof(float)));
            MHE__TIMED(MHE_OP_NORM, mhe__norm_bwd(m, a->d_h, a->d_mem, a->layer[E - 1].out, m->enc_lnf_w, m->enc_lnf_b,
                                                  a->enc_fin.mean, a->enc_fin.rstd, rows));
        } else {
            memcpy(a->d_h, a->d_mem, (size_t)rows * C * sizeof(float));
        }
        mhe__stack_bwd(m, 0, E, &enc);
        if (a->d_src_emb) mhe__axpy(a->d_h, 1.0f, a->d_src_emb, rows * C);
        MHE__TIMED(MHE_OP_EMBED, mhe__embed_bwd(m, a->d_h, a->src, m->enc_pos_emb, B, m->last_Ts, 1));
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_model_backward(mhe_model *m) {
    const mhe_scratch *outer = mhe_scratch_bind(m ? &m->acts.kernel : NULL);
    mhe_status st = mhe__backward(m);
    mhe_scratch_bind(outer);
    return st;
}
#endif /* MHE_NO_TRAIN */

/* ---- 8. tokenizer and objectives ------------------------------------------ */

MHEDEF size_t mhe_tokenize_bytes(const char *text, size_t len, int *out) {
    size_t i;
    for (i = 0; i < len; i++) out[i] = (unsigned char)text[i];
    return len;
}

MHEDEF void mhe_mlm_mask(int *inputs, int *targets, const int *tokens, int n, float prob, int mask_token,
                         int vocab, mhe_rng *rng) {
    int i;
    for (i = 0; i < n; i++) {
        inputs[i] = tokens[i];
        targets[i] = -1;
        if (mhe_rng_uniform(rng) < prob) {
            float r = mhe_rng_uniform(rng);
            targets[i] = tokens[i];
            if (r < 0.8f) inputs[i] = mask_token;
            else if (r < 0.9f) inputs[i] = (int)mhe_rng_below(rng, (uint32_t)vocab);
        }
    }
}

#ifndef MHE_NO_STDIO
MHEDEF mhe_status mhe_read_text_tokens(const char *path, int **tokens, size_t *n, void *alloc_ctx, char *err) {
    void *buf;
    size_t len;
    int ok = 1;
    mhe_status st;
    *tokens = NULL;
    *n = 0;
    if ((st = mhe_read_file(path, &buf, &len, alloc_ctx, err)) != MHE_OK) return st;
    if (len == 0) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_DATA, "%.200s: corpus is empty", path); }
    if (memchr(buf, 0, len)) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_DATA, "%.200s: contains NUL bytes, not a text file", path); }
    *tokens = (int *)MHE_MALLOC(alloc_ctx, mhe__mul_size(len, sizeof(int), &ok));
    if (!ok || !*tokens) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_NOMEM, "%.200s: no memory for %zu tokens", path, len); }
    *n = mhe_tokenize_bytes((const char *)buf, len, *tokens);
    MHE_FREE(alloc_ctx, buf);
    return MHE_OK;
}
#endif

/* ---- 8. text: UTF-8 and strict JSON (section 10's safetensors headers read it too) ---- */

#define MHE__JSON_MAX_DEPTH 64
/* integers above 2^53 are not exact in the float64 most JSON readers use */
#define MHE__JSON_MAX_INT 9007199254740992ULL


/* length (1..4) of the well-formed UTF-8 sequence at p, 0 when it is not one
   (overlongs, encoded surrogates, > U+10FFFF and cut sequences are refused) */
static size_t mhe__utf8_seq(const unsigned char *p, size_t avail) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    size_t k, i;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; else if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; else if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (avail < k || p[1] < lo || p[1] > hi) return 0;
    for (i = 2; i < k; i++) if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return k;
}

static int mhe__utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, k;
    while (i < n) {
        if (!(k = mhe__utf8_seq(p + i, n - i))) return 0;
        i += k;
    }
    return 1;
}

static size_t mhe__utf8_put(unsigned long cp, unsigned char *u) {
    if (cp < 0x80) { u[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { u[0] = (unsigned char)(0xC0 | (cp >> 6)); u[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12)); u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F)); return 3;
    }
    u[0] = (unsigned char)(0xF0 | (cp >> 18)); u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); u[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A short printable copy of a name for messages: at most 40 bytes, cut at a
   character boundary with "..." appended, control characters shown as '?'.
   dst holds 48 bytes; s must hold at least min(len, 41) bytes. */
static const char *mhe__st_show(char *dst, const char *s, size_t len) {
    size_t i, k = len;
    if (k > 40) { k = 40; while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--; }
    for (i = 0; i < k; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[i] = (char)(c < 0x20 || c == 0x7f ? '?' : c);
    }
    if (k < len) { memcpy(dst + k, "...", 3); k += 3; }
    dst[k] = 0;
    return dst;
}

/* ---- strict JSON over a byte range (not NUL-terminated) ------------------ */

typedef struct mhe__json {
    const unsigned char *s;
    size_t n, pos;
    char *err;
} mhe__json;

typedef struct mhe__json_num { int neg, frac, exp, big; uint64_t v; } mhe__json_num;

static mhe_status mhe__json_err(const mhe__json *j, size_t at, const char *what) {
    unsigned long long b = (unsigned long long)at;
    if (at >= j->n) return mhe__fail(j->err, MHE_ERR_HEADER, "header JSON: %s at byte %llu (end of header)", what, b);
    if (j->s[at] >= 0x20 && j->s[at] < 0x7f)
        return mhe__fail(j->err, MHE_ERR_HEADER, "header JSON: %s at byte %llu ('%c')", what, b, (char)j->s[at]);
    return mhe__fail(j->err, MHE_ERR_HEADER, "header JSON: %s at byte %llu (byte 0x%02x)", what, b, (unsigned)j->s[at]);
}

static int mhe__json_peek(const mhe__json *j) { return j->pos < j->n ? j->s[j->pos] : -1; }
static int mhe__isdigit(int c) { return c >= '0' && c <= '9'; }

static void mhe__json_ws(mhe__json *j) {
    while (j->pos < j->n) {
        unsigned char c = j->s[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        j->pos++;
    }
}

static mhe_status mhe__json_expect(mhe__json *j, int c, const char *what) {
    mhe__json_ws(j);
    if (mhe__json_peek(j) != c) return mhe__json_err(j, j->pos, what);
    j->pos++;
    mhe__json_ws(j);
    return MHE_OK;
}

/* the kind of value at the cursor, for "expected X, found Y" messages */
static const char *mhe__json_kind(const mhe__json *j) {
    switch (mhe__json_peek(j)) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    case -1: return "the end of the header";
    default: return "a number";
    }
}

static int mhe__json_hex4(const mhe__json *j, size_t at, unsigned long *v) {
    size_t i;
    *v = 0;
    if (j->n - at < 4) return 0;
    for (i = 0; i < 4; i++) {
        unsigned c = j->s[at + i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

/* Decode the string at the cursor to UTF-8: the first `cap` bytes go to out
   (when out is not NULL), the full decoded length to *len. Decoded text is
   never longer than its JSON form, so the header size bounds every string.
   \u0000 is refused: names and values are handed out as C strings. */
static mhe_status mhe__json_string(mhe__json *j, char *out, size_t cap, size_t *len) {
    const unsigned char *s = j->s;
    size_t n = 0;
    *len = 0;
    if (mhe__json_peek(j) != '"') return mhe__json_err(j, j->pos, "expected a string");
    j->pos++;
    for (;;) {
        size_t at = j->pos, k, i;
        unsigned char u[4];
        unsigned c;
        if (at >= j->n) return mhe__json_err(j, at, "unterminated string");
        c = s[at];
        if (c == '"') { j->pos++; break; }
        if (c < 0x20) return mhe__json_err(j, at, "unescaped control character in a string");
        if (c == '\\') {
            unsigned long cp = 0, lo;
            if (at + 1 >= j->n) return mhe__json_err(j, at + 1, "unterminated string");
            j->pos = at + 2;
            switch (s[at + 1]) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u':
                if (!mhe__json_hex4(j, at + 2, &cp)) return mhe__json_err(j, at, "\\u escape without 4 hex digits");
                j->pos = at + 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return mhe__json_err(j, at, "lone low surrogate \\u escape");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (j->n - at < 12 || s[at + 6] != '\\' || s[at + 7] != 'u' || !mhe__json_hex4(j, at + 8, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return mhe__json_err(j, at, "high surrogate \\u escape not followed by a low surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    j->pos = at + 12;
                }
                if (cp == 0) return mhe__json_err(j, at, "\\u0000 (NUL) in a string");
                break;
            default: return mhe__json_err(j, at + 1, "invalid escape character after '\\'");
            }
            k = mhe__utf8_put(cp, u);
        } else if (c < 0x80) {
            u[0] = (unsigned char)c; k = 1; j->pos++;
        } else {
            if (!(k = mhe__utf8_seq(s + at, j->n - at))) return mhe__json_err(j, at, "invalid UTF-8 in a string");
            memcpy(u, s + at, k);
            j->pos += k;
        }
        for (i = 0; i < k; i++, n++) if (out && n < cap) out[n] = (char)u[i];
    }
    *len = n;
    return MHE_OK;
}

/* JSON number grammar; also says whether it is a plain non-negative integer
   and its value (num->big: above 2^53) */
static mhe_status mhe__json_number(mhe__json *j, mhe__json_num *num) {
    const unsigned char *s = j->s;
    size_t start = j->pos;
    memset(num, 0, sizeof *num);
    if (mhe__json_peek(j) == '-') { num->neg = 1; j->pos++; }
    if (!mhe__isdigit(mhe__json_peek(j))) return mhe__json_err(j, j->pos, "invalid number");
    if (s[j->pos] == '0') {
        j->pos++;
        if (mhe__isdigit(mhe__json_peek(j))) return mhe__json_err(j, start, "number with a leading zero");
    } else {
        while (mhe__isdigit(mhe__json_peek(j))) {
            unsigned d = (unsigned)(s[j->pos++] - '0');
            if (num->big) continue;
            if (num->v > (MHE__JSON_MAX_INT - d) / 10) num->big = 1;
            else num->v = num->v * 10 + d;
        }
    }
    if (mhe__json_peek(j) == '.') {
        num->frac = 1; j->pos++;
        if (!mhe__isdigit(mhe__json_peek(j))) return mhe__json_err(j, j->pos, "expected a digit after the decimal point");
        while (mhe__isdigit(mhe__json_peek(j))) j->pos++;
    }
    if (mhe__json_peek(j) == 'e' || mhe__json_peek(j) == 'E') {
        num->exp = 1; j->pos++;
        if (mhe__json_peek(j) == '+' || mhe__json_peek(j) == '-') j->pos++;
        if (!mhe__isdigit(mhe__json_peek(j))) return mhe__json_err(j, j->pos, "expected a digit in the exponent");
        while (mhe__isdigit(mhe__json_peek(j))) j->pos++;
    }
    return MHE_OK;
}

static mhe_status mhe__json_literal(mhe__json *j, const char *word) {
    size_t k = strlen(word);
    if (j->n - j->pos < k || memcmp(j->s + j->pos, word, k) != 0)
        return mhe__json_err(j, j->pos, "invalid literal (expected true, false or null)");
    j->pos += k;
    return MHE_OK;
}

/* Check the syntax of one value of any kind, nesting at most
   MHE__JSON_MAX_DEPTH deep so that hostile input cannot exhaust the stack. */
static mhe_status mhe__json_skip(mhe__json *j, int depth) {
    mhe_status s;
    size_t len;
    mhe__json_num num;
    int c;
    mhe__json_ws(j);
    c = mhe__json_peek(j);
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        if (depth >= MHE__JSON_MAX_DEPTH) return mhe__json_err(j, j->pos, "arrays/objects nested more than 64 deep");
        j->pos++;
        mhe__json_ws(j);
        if (mhe__json_peek(j) == close) { j->pos++; return MHE_OK; }
        for (;;) {
            if (c == '{') {
                mhe__json_ws(j);
                if ((s = mhe__json_string(j, NULL, 0, &len)) != MHE_OK) return s;
                if ((s = mhe__json_expect(j, ':', "expected ':' after an object key")) != MHE_OK) return s;
            }
            if ((s = mhe__json_skip(j, depth + 1)) != MHE_OK) return s;
            mhe__json_ws(j);
            if (mhe__json_peek(j) == close) { j->pos++; return MHE_OK; }
            if (mhe__json_peek(j) != ',')
                return mhe__json_err(j, j->pos, c == '{' ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
            j->pos++;
            mhe__json_ws(j);
            if (mhe__json_peek(j) == close) return mhe__json_err(j, j->pos, "trailing comma");
        }
    }
    if (c == '"') return mhe__json_string(j, NULL, 0, &len);
    if (c == 't') return mhe__json_literal(j, "true");
    if (c == 'f') return mhe__json_literal(j, "false");
    if (c == 'n') return mhe__json_literal(j, "null");
    if (c == '-' || mhe__isdigit(c)) return mhe__json_number(j, &num);
    return mhe__json_err(j, j->pos, c < 0 ? "unexpected end of header" : "unexpected character");
}

#ifndef MHE_NO_TOKENIZERS   /* the tokenizers, through tokenizer.json: every line to the #endif below */

/* ---- 8. tokenizer: byte-level BPE ------------------------------------------ */

/* unicode-classes:start (generated by tools/scripts/unicode_classes.py; do not edit) */
/* Unicode 16.0.0 (tokenizers' regex classes, unicodedata2's data): (first code point << 2) | class, 1610 runs */
#define MHE__UNICODE_VERSION "16.0.0"
static const uint32_t mhe__uc_runs[1610] = {
    0x0000000,0x0000027,0x0000038,0x0000083,0x0000084,0x00000c2,0x00000e8,0x0000105,0x000016c,
    0x0000185,0x00001ec,0x0000217,0x0000218,0x0000283,0x0000284,0x00002a9,0x00002ac,0x00002ca,
    0x00002d0,0x00002d5,0x00002d8,0x00002e6,0x00002e9,0x00002ec,0x00002f2,0x00002fc,0x0000301,
    0x000035c,0x0000361,0x00003dc,0x00003e1,0x0000b08,0x0000b19,0x0000b48,0x0000b81,0x0000b94,
    0x0000bb1,0x0000bb4,0x0000bb9,0x0000bbc,0x0000dc1,0x0000dd4,0x0000dd9,0x0000de0,0x0000de9,
    0x0000df8,0x0000dfd,0x0000e00,0x0000e19,0x0000e1c,0x0000e21,0x0000e2c,0x0000e31,0x0000e34,
    0x0000e39,0x0000e88,0x0000e8d,0x0000fd8,0x0000fdd,0x0001208,0x0001229,0x00014c0,0x00014c5,
    0x000155c,0x0001565,0x0001568,0x0001581,0x0001624,0x0001741,0x00017ac,0x00017bd,0x00017cc,
    0x0001881,0x000192c,0x0001982,0x00019a8,0x00019b9,0x00019c0,0x00019c5,0x0001b50,0x0001b55,
    0x0001b58,0x0001b95,0x0001b9c,0x0001bb9,0x0001bc2,0x0001be9,0x0001bf4,0x0001bfd,0x0001c00,
    0x0001c41,0x0001c44,0x0001c49,0x0001cc0,0x0001d35,0x0001e98,0x0001ec5,0x0001ec8,0x0001f02,
    0x0001f29,0x0001fac,0x0001fd1,0x0001fd8,0x0001fe9,0x0001fec,0x0002001,0x0002058,0x0002069,
    0x000206c,0x0002091,0x0002094,0x00020a1,0x00020a4,0x0002101,0x0002164,0x0002181,0x00021ac,
    0x00021c1,0x0002220,0x0002225,0x000223c,0x0002281,0x0002328,0x0002411,0x00024e8,0x00024f5,
    0x00024f8,0x0002541,0x0002544,0x0002561,0x0002588,0x000259a,0x00025c0,0x00025c5,0x0002604,
    0x0002615,0x0002634,0x000263d,0x0002644,0x000264d,0x00026a4,0x00026a9,0x00026c4,0x00026c9,
    0x00026cc,0x00026d9,0x00026e8,0x00026f5,0x00026f8,0x0002739,0x000273c,0x0002771,0x0002778,
    0x000277d,0x0002788,0x000279a,0x00027c1,0x00027c8,0x00027d2,0x00027e8,0x00027f1,0x00027f4,
    0x0002815,0x000282c,0x000283d,0x0002844,0x000284d,0x00028a4,0x00028a9,0x00028c4,0x00028c9,
    0x00028d0,0x00028d5,0x00028dc,0x00028e1,0x00028e8,0x0002965,0x0002974,0x0002979,0x000297c,
    0x000299a,0x00029c0,0x00029c9,0x00029d4,0x0002a15,0x0002a38,0x0002a3d,0x0002a48,0x0002a4d,
    0x0002aa4,0x0002aa9,0x0002ac4,0x0002ac9,0x0002ad0,0x0002ad5,0x0002ae8,0x0002af5,0x0002af8,
    0x0002b41,0x0002b44,0x0002b81,0x0002b88,0x0002b9a,0x0002bc0,0x0002be5,0x0002be8,0x0002c15,
    0x0002c34,0x0002c3d,0x0002c44,0x0002c4d,0x0002ca4,0x0002ca9,0x0002cc4,0x0002cc9,0x0002cd0,
    0x0002cd5,0x0002ce8,0x0002cf5,0x0002cf8,0x0002d71,0x0002d78,0x0002d7d,0x0002d88,0x0002d9a,
    0x0002dc0,0x0002dc5,0x0002dca,0x0002de0,0x0002e0d,0x0002e10,0x0002e15,0x0002e2c,0x0002e39,
    0x0002e44,0x0002e49,0x0002e58,0x0002e65,0x0002e6c,0x0002e71,0x0002e74,0x0002e79,0x0002e80,
    0x0002e8d,0x0002e94,0x0002ea1,0x0002eac,0x0002eb9,0x0002ee8,0x0002f41,0x0002f44,0x0002f9a,
    0x0002fcc,0x0003015,0x0003034,0x0003039,0x0003044,0x0003049,0x00030a4,0x00030a9,0x00030e8,
    0x00030f5,0x00030f8,0x0003161,0x000316c,0x0003175,0x0003178,0x0003181,0x0003188,0x000319a,
    0x00031c0,0x00031e2,0x00031fc,0x0003201,0x0003204,0x0003215,0x0003234,0x0003239,0x0003244,
    0x0003249,0x00032a4,0x00032a9,0x00032d0,0x00032d5,0x00032e8,0x00032f5,0x00032f8,0x0003375,
    0x000337c,0x0003381,0x0003388,0x000339a,0x00033c0,0x00033c5,0x00033cc,0x0003411,0x0003434,
    0x0003439,0x0003444,0x0003449,0x00034ec,0x00034f5,0x00034f8,0x0003539,0x000353c,0x0003551,
    0x000355c,0x0003562,0x000357d,0x0003588,0x000359a,0x00035e4,0x00035e9,0x0003600,0x0003615,
    0x000365c,0x0003669,0x00036c8,0x00036cd,0x00036f0,0x00036f5,0x00036f8,0x0003701,0x000371c,
    0x000379a,0x00037c0,0x0003805,0x00038c4,0x00038c9,0x00038d0,0x0003901,0x000391c,0x0003942,
    0x0003968,0x0003a05,0x0003a0c,0x0003a11,0x0003a14,0x0003a19,0x0003a2c,0x0003a31,0x0003a90,
    0x0003a95,0x0003a98,0x0003a9d,0x0003ac4,0x0003ac9,0x0003ad0,0x0003af5,0x0003af8,0x0003b01,
    0x0003b14,0x0003b19,0x0003b1c,0x0003b42,0x0003b68,0x0003b71,0x0003b80,0x0003c01,0x0003c04,
    0x0003c82,0x0003cd0,0x0003d01,0x0003d20,0x0003d25,0x0003db4,0x0003e21,0x0003e34,0x0004001,
    0x00040ac,0x00040fd,0x0004102,0x0004128,0x0004141,0x0004158,0x0004169,0x0004178,0x0004185,
    0x0004188,0x0004195,0x000419c,0x00041b9,0x00041c4,0x00041d5,0x0004208,0x0004239,0x000423c,
    0x0004242,0x0004268,0x0004281,0x0004318,0x000431d,0x0004320,0x0004335,0x0004338,0x0004341,
    0x00043ec,0x00043f1,0x0004924,0x0004929,0x0004938,0x0004941,0x000495c,0x0004961,0x0004964,
    0x0004969,0x0004978,0x0004981,0x0004a24,0x0004a29,0x0004a38,0x0004a41,0x0004ac4,0x0004ac9,
    0x0004ad8,0x0004ae1,0x0004afc,0x0004b01,0x0004b04,0x0004b09,0x0004b18,0x0004b21,0x0004b5c,
    0x0004b61,0x0004c44,0x0004c49,0x0004c58,0x0004c61,0x0004d6c,0x0004da6,0x0004df4,0x0004e01,
    0x0004e40,0x0004e81,0x0004fd8,0x0004fe1,0x0004ff8,0x0005005,0x00059b4,0x00059bd,0x0005a03,
    0x0005a05,0x0005a6c,0x0005a81,0x0005bac,0x0005bba,0x0005bc5,0x0005be4,0x0005c01,0x0005c48,
    0x0005c7d,0x0005cc8,0x0005d01,0x0005d48,0x0005d81,0x0005db4,0x0005db9,0x0005dc4,0x0005e01,
    0x0005ed0,0x0005f5d,0x0005f60,0x0005f71,0x0005f74,0x0005f82,0x0005fa8,0x0005fc2,0x0005fe8,
    0x0006042,0x0006068,0x0006081,0x00061e4,0x0006201,0x0006214,0x000621d,0x00062a4,0x00062a9,
    0x00062ac,0x00062c1,0x00063d8,0x0006401,0x000647c,0x000651a,0x0006541,0x00065b8,0x00065c1,
    0x00065d4,0x0006601,0x00066b0,0x00066c1,0x0006728,0x0006742,0x000676c,0x0006801,0x000685c,
    0x0006881,0x0006954,0x0006a02,0x0006a28,0x0006a42,0x0006a68,0x0006a9d,0x0006aa0,0x0006c15,
    0x0006cd0,0x0006d15,0x0006d34,0x0006d42,0x0006d68,0x0006e0d,0x0006e84,0x0006eb9,0x0006ec2,
    0x0006ee9,0x0006f98,0x0007001,0x0007090,0x0007102,0x0007128,0x0007135,0x0007142,0x0007169,
    0x00071f8,0x0007201,0x000722c,0x0007241,0x00072ec,0x00072f5,0x0007300,0x00073a5,0x00073b4,
    0x00073b9,0x00073d0,0x00073d5,0x00073dc,0x00073e9,0x00073ec,0x0007401,0x0007700,0x0007801,
    0x0007c58,0x0007c61,0x0007c78,0x0007c81,0x0007d18,0x0007d21,0x0007d38,0x0007d41,0x0007d60,
    0x0007d65,0x0007d68,0x0007d6d,0x0007d70,0x0007d75,0x0007d78,0x0007d7d,0x0007df8,0x0007e01,
    0x0007ed4,0x0007ed9,0x0007ef4,0x0007ef9,0x0007efc,0x0007f09,0x0007f14,0x0007f19,0x0007f34,
    0x0007f41,0x0007f50,0x0007f59,0x0007f70,0x0007f81,0x0007fb4,0x0007fc9,0x0007fd4,0x0007fd9,
    0x0007ff4,0x0008003,0x000802c,0x00080a3,0x00080a8,0x00080bf,0x00080c0,0x000817f,0x0008180,
    0x00081c2,0x00081c5,0x00081c8,0x00081d2,0x00081e8,0x00081fd,0x0008202,0x0008228,0x0008241,
    0x0008274,0x0008409,0x000840c,0x000841d,0x0008420,0x0008429,0x0008450,0x0008455,0x0008458,
    0x0008465,0x0008478,0x0008491,0x0008494,0x0008499,0x000849c,0x00084a1,0x00084a4,0x00084a9,
    0x00084b8,0x00084bd,0x00084e8,0x00084f1,0x0008500,0x0008515,0x0008528,0x0008539,0x000853c,
    0x0008542,0x000860d,0x0008616,0x0008628,0x0009182,0x0009270,0x00093aa,0x0009400,0x0009dda,
    0x0009e50,0x000b001,0x000b394,0x000b3ad,0x000b3bc,0x000b3c9,0x000b3d0,0x000b3f6,0x000b3f8,
    0x000b401,0x000b498,0x000b49d,0x000b4a0,0x000b4b5,0x000b4b8,0x000b4c1,0x000b5a0,0x000b5bd,
    0x000b5c0,0x000b601,0x000b65c,0x000b681,0x000b69c,0x000b6a1,0x000b6bc,0x000b6c1,0x000b6dc,
    0x000b6e1,0x000b6fc,0x000b701,0x000b71c,0x000b721,0x000b73c,0x000b741,0x000b75c,0x000b761,
    0x000b77c,0x000b8bd,0x000b8c0,0x000c003,0x000c004,0x000c015,0x000c01e,0x000c020,0x000c086,
    0x000c0a8,0x000c0c5,0x000c0d8,0x000c0e2,0x000c0ed,0x000c0f4,0x000c105,0x000c25c,0x000c275,
    0x000c280,0x000c285,0x000c3ec,0x000c3f1,0x000c400,0x000c415,0x000c4c0,0x000c4c5,0x000c63c,
    0x000c64a,0x000c658,0x000c681,0x000c700,0x000c7c1,0x000c800,0x000c882,0x000c8a8,0x000c922,
    0x000c940,0x000c946,0x000c980,0x000ca02,0x000ca28,0x000cac6,0x000cb00,0x000d001,0x0013700,
    0x0013801,0x0029234,0x0029341,0x00293f8,0x0029401,0x0029834,0x0029841,0x0029882,0x00298a9,
    0x00298b0,0x0029901,0x00299bc,0x00299fd,0x0029a78,0x0029a81,0x0029b9a,0x0029bc0,0x0029c5d,
    0x0029c80,0x0029c89,0x0029e24,0x0029e2d,0x0029f38,0x0029f41,0x0029f48,0x0029f4d,0x0029f50,
    0x0029f55,0x0029f74,0x0029fc9,0x002a008,0x002a00d,0x002a018,0x002a01d,0x002a02c,0x002a031,
    0x002a08c,0x002a0c2,0x002a0d8,0x002a101,0x002a1d0,0x002a209,0x002a2d0,0x002a342,0x002a368,
    0x002a3c9,0x002a3e0,0x002a3ed,0x002a3f0,0x002a3f5,0x002a3fc,0x002a402,0x002a429,0x002a498,
    0x002a4c1,0x002a51c,0x002a581,0x002a5f4,0x002a611,0x002a6cc,0x002a73d,0x002a742,0x002a768,
    0x002a781,0x002a794,0x002a799,0x002a7c2,0x002a7e9,0x002a7fc,0x002a801,0x002a8a4,0x002a901,
    0x002a90c,0x002a911,0x002a930,0x002a942,0x002a968,0x002a981,0x002a9dc,0x002a9e9,0x002a9ec,
    0x002a9f9,0x002aac0,0x002aac5,0x002aac8,0x002aad5,0x002aadc,0x002aae5,0x002aaf8,0x002ab01,
    0x002ab04,0x002ab09,0x002ab0c,0x002ab6d,0x002ab78,0x002ab81,0x002abac,0x002abc9,0x002abd4,
    0x002ac05,0x002ac1c,0x002ac25,0x002ac3c,0x002ac45,0x002ac5c,0x002ac81,0x002ac9c,0x002aca1,
    0x002acbc,0x002acc1,0x002ad6c,0x002ad71,0x002ada8,0x002adc1,0x002af8c,0x002afc2,0x002afe8,
    0x002b001,0x0035e90,0x0035ec1,0x0035f1c,0x0035f2d,0x0035ff0,0x003e401,0x003e9b8,0x003e9c1,
    0x003eb68,0x003ec01,0x003ec1c,0x003ec4d,0x003ec60,0x003ec75,0x003ec78,0x003ec7d,0x003eca4,
    0x003eca9,0x003ecdc,0x003ece1,0x003ecf4,0x003ecf9,0x003ecfc,0x003ed01,0x003ed08,0x003ed0d,
    0x003ed14,0x003ed19,0x003eec8,0x003ef4d,0x003f4f8,0x003f541,0x003f640,0x003f649,0x003f720,
    0x003f7c1,0x003f7f0,0x003f9c1,0x003f9d4,0x003f9d9,0x003fbf4,0x003fc42,0x003fc68,0x003fc85,
    0x003fcec,0x003fd05,0x003fd6c,0x003fd99,0x003fefc,0x003ff09,0x003ff20,0x003ff29,0x003ff40,
    0x003ff49,0x003ff60,0x003ff69,0x003ff74,0x0040001,0x0040030,0x0040035,0x004009c,0x00400a1,
    0x00400ec,0x00400f1,0x00400f8,0x00400fd,0x0040138,0x0040141,0x0040178,0x0040201,0x00403ec,
    0x004041e,0x00404d0,0x0040502,0x00405e4,0x004062a,0x0040630,0x0040a01,0x0040a74,0x0040a81,
    0x0040b44,0x0040b86,0x0040bf0,0x0040c01,0x0040c82,0x0040c90,0x0040cb5,0x0040d06,0x0040d09,
    0x0040d2a,0x0040d2c,0x0040d41,0x0040dd8,0x0040e01,0x0040e78,0x0040e81,0x0040f10,0x0040f21,
    0x0040f40,0x0040f46,0x0040f58,0x0041001,0x0041278,0x0041282,0x00412a8,0x00412c1,0x0041350,
    0x0041361,0x00413f0,0x0041401,0x00414a0,0x00414c1,0x0041590,0x00415c1,0x00415ec,0x00415f1,
    0x004162c,0x0041631,0x004164c,0x0041651,0x0041658,0x004165d,0x0041688,0x004168d,0x00416c8,
    0x00416cd,0x00416e8,0x00416ed,0x00416f4,0x0041701,0x00417d0,0x0041801,0x0041cdc,0x0041d01,
    0x0041d58,0x0041d81,0x0041da0,0x0041e01,0x0041e18,0x0041e1d,0x0041ec4,0x0041ec9,0x0041eec,
    0x0042001,0x0042018,0x0042021,0x0042024,0x0042029,0x00420d8,0x00420dd,0x00420e4,0x00420f1,
    0x00420f4,0x00420fd,0x0042158,0x0042162,0x0042181,0x00421dc,0x00421e6,0x0042201,0x004227c,
    0x004229e,0x00422c0,0x0042381,0x00423cc,0x00423d1,0x00423d8,0x00423ee,0x0042401,0x004245a,
    0x0042470,0x0042481,0x00424e8,0x0042601,0x00426e0,0x00426f2,0x00426f9,0x0042702,0x0042740,
    0x004274a,0x0042801,0x0042804,0x0042841,0x0042850,0x0042855,0x0042860,0x0042865,0x00428d8,
    0x0042902,0x0042924,0x0042981,0x00429f6,0x00429fc,0x0042a01,0x0042a76,0x0042a80,0x0042b01,
    0x0042b20,0x0042b25,0x0042b94,0x0042bae,0x0042bc0,0x0042c01,0x0042cd8,0x0042d01,0x0042d58,
    0x0042d62,0x0042d81,0x0042dcc,0x0042de2,0x0042e01,0x0042e48,0x0042ea6,0x0042ec0,0x0043001,
    0x0043124,0x0043201,0x00432cc,0x0043301,0x00433cc,0x00433ea,0x0043401,0x0043490,0x00434c2,
    0x00434e8,0x0043502,0x0043529,0x0043598,0x00435bd,0x0043618,0x0043982,0x00439fc,0x0043a01,
    0x0043aa8,0x0043ac1,0x0043ac8,0x0043b09,0x0043b14,0x0043c01,0x0043c76,0x0043c9d,0x0043ca0,
    0x0043cc1,0x0043d18,0x0043d46,0x0043d54,0x0043dc1,0x0043e08,0x0043ec1,0x0043f16,0x0043f30,
    0x0043f81,0x0043fdc,0x004400d,0x00440e0,0x004414a,0x00441c0,0x00441c5,0x00441cc,0x00441d5,
    0x00441d8,0x004420d,0x00442c0,0x0044341,0x00443a4,0x00443c2,0x00443e8,0x004440d,0x004449c,
    0x00444da,0x0044500,0x0044511,0x0044514,0x004451d,0x0044520,0x0044541,0x00445cc,0x00445d9,
    0x00445dc,0x004460d,0x00446cc,0x0044705,0x0044714,0x0044742,0x0044769,0x004476c,0x0044771,
    0x0044774,0x0044786,0x00447d4,0x0044801,0x0044848,0x004484d,0x00448b0,0x00448fd,0x0044904,
    0x0044a01,0x0044a1c,0x0044a21,0x0044a24,0x0044a29,0x0044a38,0x0044a3d,0x0044a78,0x0044a7d,
    0x0044aa4,0x0044ac1,0x0044b7c,0x0044bc2,0x0044be8,0x0044c15,0x0044c34,0x0044c3d,0x0044c44,
    0x0044c4d,0x0044ca4,0x0044ca9,0x0044cc4,0x0044cc9,0x0044cd0,0x0044cd5,0x0044ce8,0x0044cf5,
    0x0044cf8,0x0044d41,0x0044d44,0x0044d75,0x0044d88,0x0044e01,0x0044e28,0x0044e2d,0x0044e30,
    0x0044e39,0x0044e3c,0x0044e41,0x0044ed8,0x0044edd,0x0044ee0,0x0044f45,0x0044f48,0x0044f4d,
    0x0044f50,0x0045001,0x00450d4,0x004511d,0x004512c,0x0045142,0x0045168,0x004517d,0x0045188,
    0x0045201,0x00452c0,0x0045311,0x0045318,0x004531d,0x0045320,0x0045342,0x0045368,0x0045601,
    0x00456bc,0x0045761,0x0045770,0x0045801,0x00458c0,0x0045911,0x0045914,0x0045942,0x0045968,
    0x0045a01,0x0045aac,0x0045ae1,0x0045ae4,0x0045b02,0x0045b28,0x0045b42,0x0045b90,0x0045c01,
    0x0045c6c,0x0045cc2,0x0045cf0,0x0045d01,0x0045d1c,0x0046001,0x00460b0,0x0046281,0x0046382,
    0x00463cc,0x00463fd,0x004641c,0x0046425,0x0046428,0x0046431,0x0046450,0x0046455,0x004645c,
    0x0046461,0x00464c0,0x00464fd,0x0046500,0x0046505,0x0046508,0x0046542,0x0046568,0x0046681,
    0x00466a0,0x00466a9,0x0046744,0x0046785,0x0046788,0x004678d,0x0046790,0x0046801,0x0046804,
    0x004682d,0x00468cc,0x00468e9,0x00468ec,0x0046941,0x0046944,0x0046971,0x0046a28,0x0046a75,
    0x0046a78,0x0046ac1,0x0046be4,0x0046f01,0x0046f84,0x0046fc2,0x0046fe8,0x0047001,0x0047024,
    0x0047029,0x00470bc,0x0047101,0x0047104,0x0047142,0x00471b4,0x00471c9,0x0047240,0x0047401,
    0x004741c,0x0047421,0x0047428,0x004742d,0x00474c4,0x0047519,0x004751c,0x0047542,0x0047568,
    0x0047581,0x0047598,0x004759d,0x00475a4,0x00475a9,0x0047628,0x0047661,0x0047664,0x0047682,
    0x00476a8,0x0047b81,0x0047bcc,0x0047c09,0x0047c0c,0x0047c11,0x0047c44,0x0047c49,0x0047cd0,
    0x0047d42,0x0047d68,0x0047ec1,0x0047ec4,0x0047f02,0x0047f54,0x0048001,0x0048e68,0x0049002,
    0x00491bc,0x0049201,0x0049510,0x004be41,0x004bfc4,0x004c001,0x004d0c0,0x004d105,0x004d11c,
    0x004d181,0x0050fec,0x0051001,0x005191c,0x0058401,0x0058478,0x00584c2,0x00584e8,0x005a001,
    0x005a8e4,0x005a901,0x005a97c,0x005a982,0x005a9a8,0x005a9c1,0x005aafc,0x005ab02,0x005ab28,
    0x005ab41,0x005abb8,0x005ac01,0x005acc0,0x005ad01,0x005ad10,0x005ad42,0x005ad68,0x005ad6e,
    0x005ad88,0x005ad8d,0x005ade0,0x005adf5,0x005ae40,0x005b501,0x005b5b4,0x005b5c2,0x005b5e8,
    0x005b901,0x005ba02,0x005ba5c,0x005bc01,0x005bd2c,0x005bd41,0x005bd44,0x005be4d,0x005be80,
    0x005bf81,0x005bf88,0x005bf8d,0x005bf90,0x005c001,0x0061fe0,0x0062001,0x0063358,0x00633fd,
    0x0063424,0x006bfc1,0x006bfd0,0x006bfd5,0x006bff0,0x006bff5,0x006bffc,0x006c001,0x006c48c,
    0x006c4c9,0x006c4cc,0x006c541,0x006c54c,0x006c555,0x006c558,0x006c591,0x006c5a0,0x006c5c1,
    0x006cbf0,0x006f001,0x006f1ac,0x006f1c1,0x006f1f4,0x006f201,0x006f224,0x006f241,0x006f268,
    0x00733c2,0x00733e8,0x0074b02,0x0074b50,0x0074b82,0x0074bd0,0x0074d82,0x0074de4,0x0075001,
    0x0075154,0x0075159,0x0075274,0x0075279,0x0075280,0x0075289,0x007528c,0x0075295,0x007529c,
    0x00752a5,0x00752b4,0x00752b9,0x00752e8,0x00752ed,0x00752f0,0x00752f5,0x0075310,0x0075315,
    0x0075418,0x007541d,0x007542c,0x0075435,0x0075454,0x0075459,0x0075474,0x0075479,0x00754e8,
    0x00754ed,0x00754fc,0x0075501,0x0075514,0x0075519,0x007551c,0x0075529,0x0075544,0x0075549,
    0x0075a98,0x0075aa1,0x0075b04,0x0075b09,0x0075b6c,0x0075b71,0x0075bec,0x0075bf1,0x0075c54,
    0x0075c59,0x0075cd4,0x0075cd9,0x0075d3c,0x0075d41,0x0075dbc,0x0075dc1,0x0075e24,0x0075e29,
    0x0075ea4,0x0075ea9,0x0075f0c,0x0075f11,0x0075f30,0x0075f3a,0x0076000,0x0077c01,0x0077c7c,
    0x0077c95,0x0077cac,0x00780c1,0x00781b8,0x0078401,0x00784b4,0x00784dd,0x00784f8,0x0078502,
    0x0078528,0x0078539,0x007853c,0x0078a41,0x0078ab8,0x0078b01,0x0078bb0,0x0078bc2,0x0078be8,
    0x0079341,0x00793b0,0x00793c2,0x00793e8,0x0079741,0x00797b8,0x00797c1,0x00797c6,0x00797ec,
    0x0079f81,0x0079f9c,0x0079fa1,0x0079fb0,0x0079fb5,0x0079fbc,0x0079fc1,0x0079ffc,0x007a001,
    0x007a314,0x007a31e,0x007a340,0x007a401,0x007a510,0x007a52d,0x007a530,0x007a542,0x007a568,
    0x007b1c6,0x007b2b0,0x007b2b6,0x007b2c0,0x007b2c6,0x007b2d4,0x007b406,0x007b4b8,0x007b4be,
    0x007b4f8,0x007b801,0x007b810,0x007b815,0x007b880,0x007b885,0x007b88c,0x007b891,0x007b894,
    0x007b89d,0x007b8a0,0x007b8a5,0x007b8cc,0x007b8d1,0x007b8e0,0x007b8e5,0x007b8e8,0x007b8ed,
    0x007b8f0,0x007b909,0x007b90c,0x007b91d,0x007b920,0x007b925,0x007b928,0x007b92d,0x007b930,
    0x007b935,0x007b940,0x007b945,0x007b94c,0x007b951,0x007b954,0x007b95d,0x007b960,0x007b965,
    0x007b968,0x007b96d,0x007b970,0x007b975,0x007b978,0x007b97d,0x007b980,0x007b985,0x007b98c,
    0x007b991,0x007b994,0x007b99d,0x007b9ac,0x007b9b1,0x007b9cc,0x007b9d1,0x007b9e0,0x007b9e5,
    0x007b9f4,0x007b9f9,0x007b9fc,0x007ba01,0x007ba28,0x007ba2d,0x007ba70,0x007ba85,0x007ba90,
    0x007ba95,0x007baa8,0x007baad,0x007baf0,0x007c402,0x007c434,0x007efc2,0x007efe8,0x0080001,
    0x00a9b80,0x00a9c01,0x00adce8,0x00add01,0x00ae078,0x00ae081,0x00b3a88,0x00b3ac1,0x00baf84,
    0x00bafc1,0x00bb978,0x00be001,0x00be878,0x00c0001,0x00c4d2c,0x00c4d41,0x00c8ec0,
};
/* unicode-classes:end */

MHEDEF const char *mhe_unicode_version(void) { return MHE__UNICODE_VERSION; }

MHEDEF int mhe_unicode_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof mhe__uc_runs / sizeof mhe__uc_runs[0];
    if (cp > 0x10FFFF) return MHE_UC_OTHER;
    while (hi - lo > 1) {   /* the last run that starts at or before cp */
        size_t mid = (lo + hi) / 2;
        if ((mhe__uc_runs[mid] >> 2) <= cp) lo = mid; else hi = mid;
    }
    return (int)(mhe__uc_runs[lo] & 3);
}


/* the character at p[i]: its length and class; a byte that does not start
   well-formed UTF-8 is one character of class other */
static size_t mhe__bpe_char(const unsigned char *p, size_t n, size_t i, int *cls) {
    unsigned c = p[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
        *cls = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ? MHE_UC_LETTER : c >= '0' && c <= '9' ? MHE_UC_NUMBER
             : (c >= 9 && c <= 13) || c == ' ' ? MHE_UC_SPACE : MHE_UC_OTHER;
        return 1;
    }
    if (!(k = mhe__utf8_seq(p + i, n - i))) { *cls = MHE_UC_OTHER; return 1; }
    cp = k == 2 ? (c & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu)
       : k == 3 ? (c & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu)
       : (c & 0x07u) << 18 | (p[i + 1] & 0x3Fu) << 12 | (p[i + 2] & 0x3Fu) << 6 | (p[i + 3] & 0x3Fu);
    *cls = mhe_unicode_class(cp);
    return k;
}

/* end of the run of characters of class cls that starts at i */
static size_t mhe__bpe_run(const unsigned char *p, size_t n, size_t i, int cls) {
    while (i < n) {
        int c;
        size_t k = mhe__bpe_char(p, n, i, &c);
        if (c != cls) break;
        i += k;
    }
    return i;
}

MHEDEF size_t mhe_bpe_split_next(const char *text, size_t len, size_t pos) {
    const unsigned char *p = (const unsigned char *)text;
    size_t i = pos, k, e, last;
    int cls, c2;
    if (pos >= len) return len;
    if (p[i] == '\'' && i + 1 < len) {   /* 's|'t|'re|'ve|'m|'ll|'d */
        unsigned a = p[i + 1], b2 = i + 2 < len ? p[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b2 == 'e') || (a == 'v' && b2 == 'e') || (a == 'l' && b2 == 'l')) return i + 3;
    }
    k = mhe__bpe_char(p, len, i, &cls);
    if (p[i] == ' ' && i + 1 < len) {   /* ' ?' then a run of letters, numbers or others */
        mhe__bpe_char(p, len, i + 1, &c2);
        if (c2 != MHE_UC_SPACE) return mhe__bpe_run(p, len, i + 1, c2);
    }
    if (cls != MHE_UC_SPACE) return mhe__bpe_run(p, len, i, cls);
    /* \s+(?!\S): all of a run of spaces at the end, else all but its last character; then \s+ */
    last = i; e = i + k;
    while (e < len) {
        size_t k2 = mhe__bpe_char(p, len, e, &c2);
        if (c2 != MHE_UC_SPACE) break;
        last = e; e += k2;
    }
    if (e == len || last == i) return e;
    return last;
}

/* GPT-2's bytes_to_unicode: the byte whose character is cp, -1 when none */
static int mhe__bpe_byte_of_cp(uint32_t cp) {
    static int16_t inv[324];
    static int ready;
    if (!ready) {   /* idempotent: concurrent first calls write the same values */
        int b, n = 0;
        for (b = 0; b < 256; b++) {
            int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            inv[keep ? b : 256 + n++] = (int16_t)b;
        }
        ready = 1;
    }
    return cp < 324 ? inv[cp] : -1;
}

static uint64_t mhe__bpe_mix(uint64_t x) {   /* splitmix64's finaliser */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
static uint64_t mhe__bpe_fnv(const unsigned char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;
    for (i = 0; i < n; i++) { h ^= s[i]; h *= 0x100000001b3ULL; }
    return h;
}
#define MHE__BPE_PAIR(a, b) ((uint64_t)(uint32_t)(a) << 32 | (uint32_t)(b))

MHEDEF void mhe_bpe_init(mhe_bpe *b, void *alloc_ctx) {
    int i;
    memset(b, 0, sizeof *b);
    b->alloc_ctx = alloc_ctx;
    b->unk = -1;
    b->cls = b->sep = -1;
    for (i = 0; i < 256; i++) b->byte_id[i] = -1;
}

/* keeps b->err: the message of the failure that freed it */
MHEDEF void mhe_bpe_free(mhe_bpe *b) {
    void *ctx = b->alloc_ctx;
    char err[MHE_ERR_LEN];
    memcpy(err, b->err, sizeof err);
    MHE_FREE(ctx, b->bytes); MHE_FREE(ctx, b->start); MHE_FREE(ctx, b->added); MHE_FREE(ctx, b->merges);
    MHE_FREE(ctx, b->added_ids); MHE_FREE(ctx, b->merge_keys); MHE_FREE(ctx, b->merge_rank); MHE_FREE(ctx, b->tok_slots);
    mhe_bpe_init(b, ctx);
    memcpy(b->err, err, sizeof err);
}

MHEDEF int mhe_bpe_find(const mhe_bpe *b, const void *bytes, size_t n) {
    size_t mask = b->n_tok_slots - 1, s;
    if (!b->n_tok_slots) return -1;
    for (s = (size_t)mhe__bpe_fnv((const unsigned char *)bytes, n) & mask; b->tok_slots[s] >= 0; s = (s + 1) & mask) {
        int id = b->tok_slots[s];
        if (b->start[id + 1] - b->start[id] == n && memcmp(b->bytes + b->start[id], bytes, n) == 0) return id;
    }
    return -1;
}

MHEDEF int mhe_bpe_merge_rank(const mhe_bpe *b, int left, int right) {
    uint64_t key = MHE__BPE_PAIR(left, right);
    size_t mask = b->n_merge_slots - 1, s;
    if (!b->n_merge_slots || left < 0 || right < 0) return -1;
    for (s = (size_t)mhe__bpe_mix(key) & mask; b->merge_keys[s] != UINT64_MAX; s = (s + 1) & mask)
        if (b->merge_keys[s] == key) return b->merge_rank[s];
    return -1;
}

static size_t mhe__bpe_pow2(size_t n) { size_t s = 16; while (s < 2 * n) s *= 2; return s; }

static int mhe__bpe_added_cmp(const void *pa, const void *pb, const mhe_bpe *b) {
    int x = *(const int *)pa, y = *(const int *)pb;
    size_t lx = b->start[x + 1] - b->start[x], ly = b->start[y + 1] - b->start[y];
    return lx != ly ? (lx > ly ? -1 : 1) : (x > y) - (x < y);
}

#define MHE__WP_GROW(len) (3 * (len) + 8)   /* room for a normalised text of len bytes */

/* After the tokens and merges are in place (start, bytes, added, merges):
   checks them and builds byte_id, the hashes and the added list. where
   names the source in messages. */
static mhe_status mhe__bpe_index(mhe_bpe *b, const char *where) {
    int i, r, pass;
    size_t s, mask;
    for (i = 0; i < 256; i++) b->byte_id[i] = -1;
    b->n_tok_slots = mhe__bpe_pow2((size_t)b->n_tokens);
    b->n_merge_slots = mhe__bpe_pow2((size_t)b->n_merges);
    b->tok_slots = (int *)MHE_MALLOC(b->alloc_ctx, b->n_tok_slots * sizeof(int));
    b->merge_keys = (uint64_t *)MHE_MALLOC(b->alloc_ctx, b->n_merge_slots * sizeof(uint64_t));
    b->merge_rank = (int32_t *)MHE_MALLOC(b->alloc_ctx, b->n_merge_slots * sizeof(int32_t));
    b->added_ids = (int *)MHE_MALLOC(b->alloc_ctx, ((size_t)b->n_tokens + 1) * sizeof(int));
    if (!b->tok_slots || !b->merge_keys || !b->merge_rank || !b->added_ids)
        return mhe__fail(b->err, MHE_ERR_NOMEM, "%s: no memory for the tokenizer's tables", where);
    for (s = 0; s < b->n_tok_slots; s++) b->tok_slots[s] = -1;
    for (s = 0; s < b->n_merge_slots; s++) b->merge_keys[s] = UINT64_MAX;
    mask = b->n_tok_slots - 1;
    b->n_added = 0;
    b->max_token_bytes = 0;
    for (i = 0; i < b->n_tokens; i++)
        if (b->start[i + 1] - b->start[i] > b->max_token_bytes) b->max_token_bytes = b->start[i + 1] - b->start[i];
    for (pass = 0; pass < 2; pass++)   /* the vocabulary first: an added token that repeats a token is matched, not hashed */
        for (i = 0; i < b->n_tokens; i++) {
            size_t n = b->start[i + 1] - b->start[i];
            int dup, f = b->added[i];
            if (f & ~7) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: token %d has flags %d", where, i, f);
            if (((f & MHE_BPE_ADDED) && !(f & MHE_BPE_ADDED_VOCAB)) != pass) continue;
            if (n == 0) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: token %d is empty", where, i);
            if (!(f & MHE_BPE_ADDED) && f) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: token %d has flags %d without 'added'", where, i, f);
            if (f & MHE_BPE_ADDED) b->added_ids[b->n_added++] = i;
            dup = mhe_bpe_find(b, b->bytes + b->start[i], n);
            if (pass == 1 && dup >= 0) continue;
            if (pass == 0 && dup >= 0) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: token %d repeats token %d", where, i, dup);
            if (n == 1 && !pass) b->byte_id[b->bytes[b->start[i]]] = i;
            for (s = (size_t)mhe__bpe_fnv(b->bytes + b->start[i], n) & mask; b->tok_slots[s] >= 0; s = (s + 1) & mask) {}
            b->tok_slots[s] = i;
        }
    for (i = 1; i < b->n_added; i++) {   /* insertion sort, longest first (few added tokens) */
        int v = b->added_ids[i], j = i;
        while (j > 0 && mhe__bpe_added_cmp(&b->added_ids[j - 1], &v, b) > 0) { b->added_ids[j] = b->added_ids[j - 1]; j--; }
        b->added_ids[j] = v;
    }
    mask = b->n_merge_slots - 1;
    for (r = 0; r < b->n_merges; r++) {
        const int32_t *m = b->merges + 3 * (size_t)r;
        uint64_t key;
        size_t la, lb;
        if (m[0] < 0 || m[0] >= b->n_tokens || m[1] < 0 || m[1] >= b->n_tokens || m[2] < 0 || m[2] >= b->n_tokens)
            return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: merge %d (%ld %ld -> %ld) names a token outside 0..%d", where, r,
                             (long)m[0], (long)m[1], (long)m[2], b->n_tokens - 1);
        la = b->start[m[0] + 1] - b->start[m[0]]; lb = b->start[m[1] + 1] - b->start[m[1]];
        if ((b->added[m[0]] & 5) == MHE_BPE_ADDED || (b->added[m[1]] & 5) == MHE_BPE_ADDED || (b->added[m[2]] & 5) == MHE_BPE_ADDED)
            return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: merge %d uses an added token that is not in the vocabulary", where, r);
        if (b->start[m[2] + 1] - b->start[m[2]] != la + lb || memcmp(b->bytes + b->start[m[2]], b->bytes + b->start[m[0]], la) ||
            memcmp(b->bytes + b->start[m[2]] + la, b->bytes + b->start[m[1]], lb))
            return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: merge %d: token %ld is not token %ld followed by token %ld", where, r,
                             (long)m[2], (long)m[0], (long)m[1]);
        key = MHE__BPE_PAIR(m[0], m[1]);
        for (s = (size_t)mhe__bpe_mix(key) & mask; b->merge_keys[s] != UINT64_MAX; s = (s + 1) & mask)
            if (b->merge_keys[s] == key)
                return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: merge %d repeats merge %ld (%ld %ld)", where, r, (long)b->merge_rank[s],
                                 (long)m[0], (long)m[1]);
        b->merge_keys[s] = key; b->merge_rank[s] = r;
    }
    if (b->unk >= b->n_tokens) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: unk %d is not a token", where, b->unk);
    if (b->cls >= b->n_tokens || b->sep >= b->n_tokens)
        return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: cls %d or sep %d is not a token", where, b->cls, b->sep);
    if (b->model == MHE_TOK_WORDPIECE) {
        if (b->n_merges) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: a WordPiece vocabulary has no merges", where);
        if (b->unk < 0) return mhe__fail(b->err, MHE_ERR_FORMAT, "%s: a WordPiece vocabulary needs an unk token", where);
    }
    return MHE_OK;
}

/* room for n_tokens tokens of `bytes` bytes in all and n_merges merges */
static mhe_status mhe__bpe_alloc(mhe_bpe *b, int n_tokens, size_t bytes, int n_merges, const char *where) {
    int ok = 1;
    b->bytes = (unsigned char *)MHE_MALLOC(b->alloc_ctx, bytes ? bytes : 1);
    b->start = (size_t *)MHE_MALLOC(b->alloc_ctx, mhe__mul_size((size_t)n_tokens + 1, sizeof(size_t), &ok));
    b->added = (unsigned char *)MHE_MALLOC(b->alloc_ctx, (size_t)n_tokens + 1);
    b->merges = (int32_t *)MHE_MALLOC(b->alloc_ctx, mhe__mul_size((size_t)n_merges * 3 + 1, sizeof(int32_t), &ok));
    if (!ok || !b->bytes || !b->start || !b->added || !b->merges)
        return mhe__fail(b->err, MHE_ERR_NOMEM, "%s: no memory for %d tokens", where, n_tokens);
    memset(b->added, 0, (size_t)n_tokens + 1);
    b->start[0] = 0;
    return MHE_OK;
}

/* ---- encoding ---- */

#define MHE__BPE_CHUNK 65536   /* mhe_bpe_encode_threads: the least text worth a piece of its own */

/* scratch of one encode: a copy of a text piece (for prefix_space) and, per
   symbol, its token and links, and a min-heap of (rank << 32 | position) */
typedef struct mhe__bpe_ws {
    unsigned char *copy;
    int32_t *id, *prev, *next;
    uint64_t *heap;
    size_t cap;                 /* symbols */
    void *own, *alloc_ctx;
    unsigned char *norm, *word; /* WordPiece: the normalised text, a piece with its prefix */
    const unsigned char *cont;  /* a text that continues a segment (mhe_bpe_encode_threads): no prefix_space there */
} mhe__bpe_ws;
#define MHE__BPE_WS_PER 40      /* bytes per symbol: 1 + 3 * 4 + 3 * 8, rounded up */

MHEDEF size_t mhe_bpe_work_size(size_t len) { return 8 + (len + 2) * MHE__BPE_WS_PER; }

MHEDEF size_t mhe_bpe_max_ids(const mhe_bpe *b, size_t len) { return b && b->model == MHE_TOK_BPE && b->prefix_space ? 2 * len + 1 : len; }

static void mhe__bpe_ws_carve(mhe__bpe_ws *w, void *mem, size_t cap) {
    unsigned char *p = (unsigned char *)(((uintptr_t)mem + 7) & ~(uintptr_t)7);
    w->heap = (uint64_t *)(void *)p; p += 3 * cap * sizeof(uint64_t);
    w->id = (int32_t *)(void *)p; p += cap * sizeof(int32_t);
    w->prev = (int32_t *)(void *)p; p += cap * sizeof(int32_t);
    w->next = (int32_t *)(void *)p; p += cap * sizeof(int32_t);
    w->copy = p;
    w->cap = cap;
}

/* room for n symbols (own scratch grows; a caller's is sized for the whole text) */
static int mhe__bpe_ws_need(mhe__bpe_ws *w, size_t n) {
    size_t cap;
    void *mem;
    int ok = 1;
    if (n <= w->cap) return 1;
    cap = n < 2 * w->cap ? 2 * w->cap : n;
    if (cap < 256) cap = 256;
    mem = MHE_MALLOC(w->alloc_ctx, mhe__mul_size(cap + 1, MHE__BPE_WS_PER, &ok));
    if (!ok || !mem) return 0;
    MHE_FREE(w->alloc_ctx, w->own);
    w->own = mem;
    mhe__bpe_ws_carve(w, mem, cap);
    return 1;
}

static void mhe__bpe_heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}
static uint64_t mhe__bpe_heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, c;
    while ((c = 2 * i + 1) < *n) {
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c]; i = c;
    }
    h[i] = v;
    return top;
}

static void mhe__bpe_try_pair(const mhe_bpe *b, mhe__bpe_ws *w, size_t *hn, int32_t pos) {
    int32_t nx = w->next[pos];
    int r;
    if (nx < 0) return;
    r = mhe_bpe_merge_rank(b, w->id[pos], w->id[nx]);
    if (r >= 0) mhe__bpe_heap_push(w->heap, hn, (uint64_t)r << 32 | (uint32_t)pos);
}

/* one piece p[0..k) -> ids (tokenizers' BPE::merge_word with its ignore_merges check) */
static size_t mhe__bpe_piece(const mhe_bpe *b, mhe__bpe_ws *w, const unsigned char *p, size_t k, int *ids) {
    size_t i, n = 0, hn = 0, out = 0;
    int32_t s;
    int last_unk = 0;
    if (k == 1 && b->byte_id[p[0]] >= 0) { ids[0] = b->byte_id[p[0]]; return 1; }
    if (b->ignore_merges) {
        int id = mhe_bpe_find(b, p, k);
        if (id >= 0 && (b->added[id] & 5) != MHE_BPE_ADDED) { ids[0] = id; return 1; }
    }
    for (i = 0; i < k; i++) {
        int t = b->byte_id[p[i]];
        if (t < 0) {
            if (b->unk < 0) continue;   /* tokenizers drops a byte without a token when there is no unk */
            if (b->fuse_unk && last_unk) continue;
            t = b->unk; last_unk = 1;
        } else last_unk = 0;
        w->id[n] = t; w->prev[n] = (int32_t)n - 1; w->next[n] = (int32_t)n + 1; n++;
    }
    if (!n) return 0;
    w->next[n - 1] = -1;
    for (s = 0; s + 1 < (int32_t)n; s++) mhe__bpe_try_pair(b, w, &hn, s);
    while (hn) {
        uint64_t top = mhe__bpe_heap_pop(w->heap, &hn);
        int32_t pos = (int32_t)(uint32_t)top, nx, nn;
        int r = (int)(top >> 32);
        if (w->id[pos] < 0 || (nx = w->next[pos]) < 0 || mhe_bpe_merge_rank(b, w->id[pos], w->id[nx]) != r) continue;
        w->id[pos] = b->merges[3 * (size_t)r + 2];
        w->id[nx] = -1;
        nn = w->next[nx];
        w->next[pos] = nn;
        if (nn >= 0) w->prev[nn] = pos;
        if (w->prev[pos] >= 0) mhe__bpe_try_pair(b, w, &hn, w->prev[pos]);
        mhe__bpe_try_pair(b, w, &hn, pos);
    }
    for (s = 0; s >= 0; s = w->next[s]) ids[out++] = w->id[s];
    return out;
}

/* ---- WordPiece: BERT's normalizer, pre-tokenizer and greedy pieces ---- */

/* wordpiece-tables:start (generated by tools/scripts/wordpiece_tables.py; do not edit) */
/* tokenizers' character data: categories of Unicode 8.0.0, NFD of Unicode 9.0.0, lowercase of Unicode 17.0.0 (unicodedata2's data) */
#define MHE__WP_UNICODE "8.0.0 9.0.0 17.0.0"
static const uint32_t mhe__wp_runs[960] = {   /* (first code point << 6) | flags */
    0x00000001,0x00000242,0x000002c3,0x00000342,0x00000381,0x00000802,0x00000844,0x00000c00,0x00000e84,
    0x00001040,0x000016c4,0x00001840,0x00001ec4,0x00001fc1,0x00002143,0x00002181,0x00002802,0x00002844,
    0x00002880,0x000029c4,0x00002a00,0x00002ac4,0x00002b00,0x00002b41,0x00002b80,0x00002d84,0x00002e00,
    0x00002ec4,0x00002f00,0x00002fc4,0x00003000,0x0000c028,0x0000d020,0x0000d0a8,0x0000d0e0,0x0000d168,
    0x0000d3c8,0x0000d428,0x0000dc00,0x0000df84,0x0000dfc0,0x0000e1c4,0x0000e200,0x000120e8,0x00012200,
    0x00015684,0x00015800,0x00016244,0x000162c0,0x00016468,0x00016f84,0x00016fe8,0x00017004,0x00017068,
    0x000170c4,0x00017128,0x00017184,0x000171e8,0x00017200,0x00017cc4,0x00017d40,0x00018001,0x00018180,
    0x00018244,0x000182c0,0x00018304,0x00018380,0x00018428,0x000186c4,0x00018701,0x00018740,0x00018784,
    0x00018800,0x000192e8,0x00019800,0x00019a84,0x00019b80,0x00019c28,0x00019c40,0x0001b504,0x0001b540,
    0x0001b5a8,0x0001b741,0x0001b780,0x0001b7e8,0x0001b940,0x0001b9e8,0x0001ba40,0x0001baa8,0x0001bb80,
    0x0001c004,0x0001c380,0x0001c3c1,0x0001c400,0x0001c468,0x0001c480,0x0001cc28,0x0001d2c0,0x0001e988,
    0x0001ec40,0x0001fae8,0x0001fd00,0x0001fdc4,0x0001fe80,0x000205a8,0x00020680,0x000206e8,0x00020900,
    0x00020968,0x00020a00,0x00020a68,0x00020b80,0x00020c04,0x00020fc0,0x00021668,0x00021700,0x00021784,
    0x000217c0,0x00023520,0x00023880,0x000238e8,0x00024008,0x000240c0,0x00024e88,0x00024ec0,0x00024f28,
    0x00024f40,0x00025048,0x00025240,0x00025368,0x00025380,0x00025468,0x00025548,0x00025600,0x00025888,
    0x00025904,0x00025980,0x00025c04,0x00025c40,0x00026048,0x00026080,0x00026f28,0x00026f40,0x00027048,
    0x00027140,0x00027368,0x00027380,0x00027888,0x00027900,0x00028048,0x000280c0,0x00028f28,0x00028f40,
    0x00029048,0x000290c0,0x000291c8,0x00029240,0x000292c8,0x00029368,0x00029380,0x00029448,0x00029480,
    0x00029c08,0x00029c80,0x00029d48,0x00029d80,0x0002a048,0x0002a0c0,0x0002af28,0x0002af40,0x0002b048,
    0x0002b180,0x0002b1c8,0x0002b240,0x0002b368,0x0002b380,0x0002b888,0x0002b900,0x0002bc04,0x0002bc40,
    0x0002c048,0x0002c080,0x0002cf28,0x0002cf40,0x0002cfc8,0x0002d000,0x0002d048,0x0002d140,0x0002d368,
    0x0002d380,0x0002d588,0x0002d5c0,0x0002d888,0x0002d900,0x0002e088,0x0002e0c0,0x0002f008,0x0002f040,
    0x0002f368,0x0002f380,0x00030008,0x00030040,0x00030f88,0x00031040,0x00031188,0x00031200,0x00031288,
    0x00031368,0x00031380,0x00031568,0x000315c0,0x00031888,0x00031900,0x00032048,0x00032080,0x00032f28,
    0x00032f40,0x00032fc8,0x00033000,0x00033188,0x000331c0,0x00033308,0x00033368,0x00033380,0x00033888,
    0x00033900,0x00034048,0x00034080,0x00035048,0x00035140,0x00035368,0x00035380,0x00035888,0x00035900,
    0x000372a8,0x000372c0,0x00037488,0x00037540,0x00037588,0x000375c0,0x00037d04,0x00037d40,0x00038c48,
    0x00038c80,0x00038d08,0x00038e28,0x00038ec0,0x000391c8,0x00039228,0x00039308,0x000393c4,0x00039400,
    0x00039684,0x00039700,0x0003ac48,0x0003ac80,0x0003ad08,0x0003ae28,0x0003ae80,0x0003aec8,0x0003af40,
    0x0003b228,0x0003b308,0x0003b380,0x0003c104,0x0003c4c0,0x0003c504,0x0003c540,0x0003c628,0x0003c680,
    0x0003cd68,0x0003cd80,0x0003cde8,0x0003ce00,0x0003ce68,0x0003ce84,0x0003cf80,0x0003dc68,0x0003dcc0,
    0x0003dd28,0x0003dd40,0x0003ddc8,0x0003de00,0x0003de48,0x0003dea8,0x0003df88,0x0003dfc0,0x0003e028,
    0x0003e040,0x0003e0a8,0x0003e144,0x0003e1a8,0x0003e200,0x0003e348,0x0003e4c0,0x0003e508,0x0003e600,
    0x0003e648,0x0003e740,0x0003e788,0x0003e880,0x0003e8c8,0x0003e9c0,0x0003ea08,0x0003eb00,0x0003eb48,
    0x0003ee40,0x0003ee88,0x0003ef40,0x0003f1a8,0x0003f1c0,0x0003f404,0x0003f540,0x0003f644,0x0003f6c0,
    0x00040b48,0x00040c40,0x00040c88,0x00040de8,0x00040e00,0x00040e68,0x00040ec0,0x00040f48,0x00040fc0,
    0x00041284,0x00041400,0x00041608,0x00041680,0x00041788,0x00041840,0x00041c48,0x00041d40,0x00042088,
    0x000420c0,0x00042148,0x000421c0,0x00042368,0x00042380,0x00042748,0x00042780,0x00043ec4,0x00043f00,
    0x0004d768,0x0004d804,0x0004da40,0x00050004,0x00050040,0x00059b44,0x00059bc0,0x0005a002,0x0005a040,
    0x0005a6c4,0x0005a740,0x0005bac4,0x0005bb80,0x0005c488,0x0005c528,0x0005c540,0x0005cc88,0x0005cd28,
    0x0005cd44,0x0005cdc0,0x0005d488,0x0005d500,0x0005dc88,0x0005dd00,0x0005ed08,0x0005ed80,0x0005edc8,
    0x0005ef80,0x0005f188,0x0005f1c0,0x0005f248,0x0005f4a8,0x0005f4c8,0x0005f504,0x0005f5c0,0x0005f604,
    0x0005f6c0,0x0005f768,0x0005f780,0x00060004,0x000602c8,0x00060381,0x000603c0,0x00062a68,0x00062a80,
    0x00064808,0x000648c0,0x000649c8,0x00064a40,0x00064c88,0x00064cc0,0x00064e68,0x00064f00,0x00065104,
    0x00065180,0x000685e8,0x00068640,0x000686c8,0x00068700,0x00068784,0x00068800,0x00069588,0x000695c0,
    0x00069608,0x000697c0,0x00069828,0x00069840,0x00069888,0x000698c0,0x00069948,0x00069b40,0x00069cc8,
    0x00069d68,0x00069f40,0x00069fe8,0x0006a000,0x0006a804,0x0006a9c0,0x0006aa04,0x0006ab80,0x0006ac28,
    0x0006af80,0x0006c008,0x0006c100,0x0006cd28,0x0006cd40,0x0006cd88,0x0006cec0,0x0006cf08,0x0006cf40,
    0x0006d088,0x0006d0c0,0x0006d120,0x0006d140,0x0006d684,0x0006d840,0x0006dae8,0x0006dd00,0x0006e008,
    0x0006e080,0x0006e888,0x0006e980,0x0006ea08,0x0006eaa0,0x0006eae8,0x0006eb08,0x0006eb80,0x0006f9a8,
    0x0006f9c0,0x0006fa08,0x0006fa80,0x0006fb48,0x0006fb80,0x0006fbc8,0x0006fca0,0x0006fd00,0x0006ff04,
    0x00070000,0x00070b08,0x00070d00,0x00070d88,0x00070de8,0x00070e00,0x00070ec4,0x00071000,0x00071f84,
    0x00072000,0x00073004,0x00073200,0x00073428,0x000734c4,0x00073528,0x00073840,0x000738a8,0x00073a40,
    0x00073b68,0x00073b80,0x00073d28,0x00073d40,0x00073e28,0x00073e80,0x00077028,0x00077d80,0x00077ee0,
    0x00077f28,0x00078000,0x00080002,0x000802c1,0x00080404,0x00080a02,0x00080a81,0x00080bc2,0x00080c04,
    0x00081100,0x00081144,0x00081480,0x000814c4,0x000817c2,0x00081801,0x00081940,0x00081981,0x00081c00,
    0x00081f44,0x00081fc0,0x00082344,0x000823c0,0x00083428,0x00083740,0x00083868,0x00083880,0x00083968,
    0x00083c40,0x0008c204,0x0008c300,0x0008ca44,0x0008cac0,0x0009da04,0x0009dd80,0x0009f144,0x0009f1c0,
    0x0009f984,0x0009fc00,0x000a60c4,0x000a6640,0x000a7604,0x000a7700,0x000a7f04,0x000a7f80,0x000b3be8,
    0x000b3c80,0x000b3e44,0x000b3f40,0x000b3f84,0x000b4000,0x000b5c04,0x000b5c40,0x000b5fe8,0x000b6000,
    0x000b7828,0x000b8004,0x000b8bc0,0x000b8c04,0x000b90c0,0x000c0002,0x000c0044,0x000c0100,0x000c0204,
    0x000c0480,0x000c0504,0x000c0800,0x000c0aa8,0x000c0ba0,0x000c0c04,0x000c0c40,0x000c0f44,0x000c0f80,
    0x000c2668,0x000c26c0,0x000c2804,0x000c2840,0x000c3ec4,0x000c3f00,0x000d0010,0x00137000,0x00138010,
    0x00280000,0x00293f84,0x00294000,0x00298344,0x00298400,0x00299be8,0x00299c00,0x00299cc4,0x00299d28,
    0x00299f84,0x00299fc0,0x0029a7a8,0x0029a800,0x0029bc28,0x0029bc84,0x0029be00,0x002a0088,0x002a00c0,
    0x002a01a8,0x002a01c0,0x002a02c8,0x002a0300,0x002a0948,0x002a09c0,0x002a1d04,0x002a1e00,0x002a3128,
    0x002a3140,0x002a3384,0x002a3400,0x002a3828,0x002a3c80,0x002a3e04,0x002a3ec0,0x002a3f04,0x002a3f40,
    0x002a4988,0x002a4ae8,0x002a4b84,0x002a4c00,0x002a51c8,0x002a5480,0x002a54e0,0x002a5500,0x002a57c4,
    0x002a5800,0x002a6008,0x002a60c0,0x002a6ce8,0x002a6d00,0x002a6d88,0x002a6e80,0x002a6f08,0x002a6f40,
    0x002a7020,0x002a7044,0x002a7380,0x002a7784,0x002a7800,0x002a7948,0x002a7980,0x002a8a48,0x002a8bc0,
    0x002a8c48,0x002a8cc0,0x002a8d48,0x002a8dc0,0x002a90c8,0x002a9100,0x002a9308,0x002a9340,0x002a9704,
    0x002a9800,0x002a9f08,0x002a9f40,0x002aac28,0x002aac40,0x002aaca8,0x002aad40,0x002aade8,0x002aae40,
    0x002aafa8,0x002ab000,0x002ab068,0x002ab080,0x002ab784,0x002ab800,0x002abb08,0x002abb80,0x002abc04,
    0x002abc80,0x002abda8,0x002abdc0,0x002af948,0x002af980,0x002afa08,0x002afa40,0x002afac4,0x002afb00,
    0x002afb68,0x002afb80,0x00360001,0x003e4010,0x003ec000,0x003ec7a8,0x003ec7c0,0x003f4f84,0x003f5000,
    0x003f8008,0x003f8404,0x003f8680,0x003f8828,0x003f8c04,0x003f94c0,0x003f9504,0x003f9880,0x003f98c4,
    0x003f9900,0x003f9a04,0x003f9a40,0x003f9a84,0x003f9b00,0x003fbfc1,0x003fc000,0x003fc044,0x003fc100,
    0x003fc144,0x003fc2c0,0x003fc304,0x003fc400,0x003fc684,0x003fc700,0x003fc7c4,0x003fc840,0x003fcec4,
    0x003fcf80,0x003fcfc4,0x003fd000,0x003fd6c4,0x003fd700,0x003fd744,0x003fd780,0x003fd7c4,0x003fd980,
    0x003ffe41,0x003fff00,0x003fff41,0x003fff80,0x00404004,0x004040c0,0x00407f68,0x00407f80,0x0040b828,
    0x0040b840,0x0040dda8,0x0040dec0,0x0040e7c4,0x0040e800,0x0040f404,0x0040f440,0x00415bc4,0x00415c00,
    0x004215c4,0x00421600,0x004247c4,0x00424800,0x00424fc4,0x00425000,0x00428048,0x00428100,0x00428148,
    0x004281c0,0x00428308,0x00428368,0x00428388,0x004283e8,0x00428400,0x00428e28,0x00428ec0,0x00428fe8,
    0x00429000,0x00429404,0x00429640,0x00429fc4,0x0042a000,0x0042b968,0x0042b9c0,0x0042bc04,0x0042bdc0,
    0x0042ce44,0x0042d000,0x0042e644,0x0042e740,0x00440048,0x00440080,0x00440e08,0x004411a8,0x004411c4,
    0x00441380,0x00441fe8,0x00442008,0x00442080,0x00442cc8,0x00442dc0,0x00442e68,0x00442ec4,0x00442f41,
    0x00442f84,0x00443080,0x00444028,0x004440c0,0x004449c8,0x00444b00,0x00444b48,0x00444b80,0x00444c08,
    0x00444ce8,0x00444d40,0x00445004,0x00445100,0x00445ce8,0x00445d04,0x00445d80,0x00446008,0x00446080,
    0x00446d88,0x00446fc0,0x00447020,0x00447040,0x00447144,0x004472a8,0x004472c8,0x00447344,0x00447380,
    0x004476c4,0x00447700,0x00447744,0x00447800,0x00448bc8,0x00448c80,0x00448d08,0x00448d60,0x00448da8,
    0x00448dc8,0x00448e04,0x00448f80,0x0044aa44,0x0044aa80,0x0044b7c8,0x0044b800,0x0044b8c8,0x0044ba68,
    0x0044bac0,0x0044c008,0x0044c080,0x0044cf28,0x0044cf40,0x0044d008,0x0044d040,0x0044d360,0x0044d380,
    0x0044d9a8,0x0044db40,0x0044dc28,0x0044dd40,0x004510a0,0x004510c0,0x004511a0,0x004511c0,0x00452cc8,
    0x00452e40,0x00452e88,0x00452ec0,0x00452fc8,0x00453040,0x004530a8,0x00453100,0x00453184,0x004531c0,
    0x00456c88,0x00456d80,0x00456f08,0x00456f80,0x00456fe8,0x00457044,0x00457600,0x00457708,0x00457780,
    0x00458cc8,0x00458ec0,0x00458f48,0x00458f80,0x00458fe8,0x00459008,0x00459044,0x00459100,0x0045aac8,
    0x0045ab00,0x0045ab48,0x0045ab80,0x0045ac08,0x0045ada0,0x0045ade8,0x0045ae00,0x0045c748,0x0045c800,
    0x0045c888,0x0045c980,0x0045c9c8,0x0045cae8,0x0045cb00,0x0045cf04,0x0045cfc0,0x00470fe0,0x00471000,
    0x00491c04,0x00491d40,0x005a9b84,0x005a9c00,0x005abc28,0x005abd44,0x005abd80,0x005acc28,0x005acdc4,
    0x005acf00,0x005ad104,0x005ad140,0x005be3c8,0x005be4c0,0x006f2748,0x006f27a8,0x006f27c4,0x006f2801,
    0x006f2900,0x00745960,0x007459e8,0x00745a80,0x00745b60,0x00745cc1,0x00745ee8,0x007460c0,0x00746168,
    0x00746300,0x00746aa8,0x00746b80,0x007490a8,0x00749140,0x00768008,0x00768dc0,0x00768ec8,0x00769b40,
    0x00769d48,0x00769d80,0x0076a108,0x0076a140,0x0076a1c4,0x0076a300,0x0076a6c8,0x0076a800,0x0076a848,
    0x0076ac00,0x00780020,0x007801c0,0x00780220,0x00780640,0x007806e0,0x00780880,0x007808e0,0x00780940,
    0x007809a0,0x00780ac0,0x007a3428,0x007a35c0,0x007a5120,0x007a52c0,0x00800010,0x00a9b800,0x00a9c010,
    0x00ae0800,0x00ae4810,0x00b3ac00,0x00be0010,0x00be8800,0x03800041,0x03800080,0x03800801,0x03802000,
    0x03804008,0x03807c00,0x03c00001,0x03ffff80,0x04000001,0x043fff80,
};
static const int32_t mhe__wp_lower[185][4] = {   /* first, last, stride, delta */
    {0x41,0x5a,1,32},{0xc0,0xd6,1,32},{0xd8,0xde,1,32},{0x100,0x12e,2,1},
    {0x132,0x136,2,1},{0x139,0x147,2,1},{0x14a,0x176,2,1},{0x178,0x178,1,-121},
    {0x179,0x17d,2,1},{0x181,0x181,1,210},{0x182,0x184,2,1},{0x186,0x186,1,206},
    {0x187,0x187,1,1},{0x189,0x18a,1,205},{0x18b,0x18b,1,1},{0x18e,0x18e,1,79},
    {0x18f,0x18f,1,202},{0x190,0x190,1,203},{0x191,0x191,1,1},{0x193,0x193,1,205},
    {0x194,0x194,1,207},{0x196,0x196,1,211},{0x197,0x197,1,209},{0x198,0x198,1,1},
    {0x19c,0x19c,1,211},{0x19d,0x19d,1,213},{0x19f,0x19f,1,214},{0x1a0,0x1a4,2,1},
    {0x1a6,0x1a6,1,218},{0x1a7,0x1a7,1,1},{0x1a9,0x1a9,1,218},{0x1ac,0x1ac,1,1},
    {0x1ae,0x1ae,1,218},{0x1af,0x1af,1,1},{0x1b1,0x1b2,1,217},{0x1b3,0x1b5,2,1},
    {0x1b7,0x1b7,1,219},{0x1b8,0x1b8,1,1},{0x1bc,0x1bc,1,1},{0x1c4,0x1c4,1,2},
    {0x1c5,0x1c5,1,1},{0x1c7,0x1c7,1,2},{0x1c8,0x1c8,1,1},{0x1ca,0x1ca,1,2},
    {0x1cb,0x1db,2,1},{0x1de,0x1ee,2,1},{0x1f1,0x1f1,1,2},{0x1f2,0x1f4,2,1},
    {0x1f6,0x1f6,1,-97},{0x1f7,0x1f7,1,-56},{0x1f8,0x21e,2,1},{0x220,0x220,1,-130},
    {0x222,0x232,2,1},{0x23a,0x23a,1,10795},{0x23b,0x23b,1,1},{0x23d,0x23d,1,-163},
    {0x23e,0x23e,1,10792},{0x241,0x241,1,1},{0x243,0x243,1,-195},{0x244,0x244,1,69},
    {0x245,0x245,1,71},{0x246,0x24e,2,1},{0x370,0x372,2,1},{0x376,0x376,1,1},
    {0x37f,0x37f,1,116},{0x386,0x386,1,38},{0x388,0x38a,1,37},{0x38c,0x38c,1,64},
    {0x38e,0x38f,1,63},{0x391,0x3a1,1,32},{0x3a3,0x3ab,1,32},{0x3cf,0x3cf,1,8},
    {0x3d8,0x3ee,2,1},{0x3f4,0x3f4,1,-60},{0x3f7,0x3f7,1,1},{0x3f9,0x3f9,1,-7},
    {0x3fa,0x3fa,1,1},{0x3fd,0x3ff,1,-130},{0x400,0x40f,1,80},{0x410,0x42f,1,32},
    {0x460,0x480,2,1},{0x48a,0x4be,2,1},{0x4c0,0x4c0,1,15},{0x4c1,0x4cd,2,1},
    {0x4d0,0x52e,2,1},{0x531,0x556,1,48},{0x10a0,0x10c5,1,7264},{0x10c7,0x10c7,1,7264},
    {0x10cd,0x10cd,1,7264},{0x13a0,0x13ef,1,38864},{0x13f0,0x13f5,1,8},{0x1c89,0x1c89,1,1},
    {0x1c90,0x1cba,1,-3008},{0x1cbd,0x1cbf,1,-3008},{0x1e00,0x1e94,2,1},{0x1e9e,0x1e9e,1,-7615},
    {0x1ea0,0x1efe,2,1},{0x1f08,0x1f0f,1,-8},{0x1f18,0x1f1d,1,-8},{0x1f28,0x1f2f,1,-8},
    {0x1f38,0x1f3f,1,-8},{0x1f48,0x1f4d,1,-8},{0x1f59,0x1f5f,2,-8},{0x1f68,0x1f6f,1,-8},
    {0x1f88,0x1f8f,1,-8},{0x1f98,0x1f9f,1,-8},{0x1fa8,0x1faf,1,-8},{0x1fb8,0x1fb9,1,-8},
    {0x1fba,0x1fbb,1,-74},{0x1fbc,0x1fbc,1,-9},{0x1fc8,0x1fcb,1,-86},{0x1fcc,0x1fcc,1,-9},
    {0x1fd8,0x1fd9,1,-8},{0x1fda,0x1fdb,1,-100},{0x1fe8,0x1fe9,1,-8},{0x1fea,0x1feb,1,-112},
    {0x1fec,0x1fec,1,-7},{0x1ff8,0x1ff9,1,-128},{0x1ffa,0x1ffb,1,-126},{0x1ffc,0x1ffc,1,-9},
    {0x2126,0x2126,1,-7517},{0x212a,0x212a,1,-8383},{0x212b,0x212b,1,-8262},{0x2132,0x2132,1,28},
    {0x2160,0x216f,1,16},{0x2183,0x2183,1,1},{0x24b6,0x24cf,1,26},{0x2c00,0x2c2f,1,48},
    {0x2c60,0x2c60,1,1},{0x2c62,0x2c62,1,-10743},{0x2c63,0x2c63,1,-3814},{0x2c64,0x2c64,1,-10727},
    {0x2c67,0x2c6b,2,1},{0x2c6d,0x2c6d,1,-10780},{0x2c6e,0x2c6e,1,-10749},{0x2c6f,0x2c6f,1,-10783},
    {0x2c70,0x2c70,1,-10782},{0x2c72,0x2c72,1,1},{0x2c75,0x2c75,1,1},{0x2c7e,0x2c7f,1,-10815},
    {0x2c80,0x2ce2,2,1},{0x2ceb,0x2ced,2,1},{0x2cf2,0x2cf2,1,1},{0xa640,0xa66c,2,1},
    {0xa680,0xa69a,2,1},{0xa722,0xa72e,2,1},{0xa732,0xa76e,2,1},{0xa779,0xa77b,2,1},
    {0xa77d,0xa77d,1,-35332},{0xa77e,0xa786,2,1},{0xa78b,0xa78b,1,1},{0xa78d,0xa78d,1,-42280},
    {0xa790,0xa792,2,1},{0xa796,0xa7a8,2,1},{0xa7aa,0xa7aa,1,-42308},{0xa7ab,0xa7ab,1,-42319},
    {0xa7ac,0xa7ac,1,-42315},{0xa7ad,0xa7ad,1,-42305},{0xa7ae,0xa7ae,1,-42308},{0xa7b0,0xa7b0,1,-42258},
    {0xa7b1,0xa7b1,1,-42282},{0xa7b2,0xa7b2,1,-42261},{0xa7b3,0xa7b3,1,928},{0xa7b4,0xa7c2,2,1},
    {0xa7c4,0xa7c4,1,-48},{0xa7c5,0xa7c5,1,-42307},{0xa7c6,0xa7c6,1,-35384},{0xa7c7,0xa7c9,2,1},
    {0xa7cb,0xa7cb,1,-42343},{0xa7cc,0xa7da,2,1},{0xa7dc,0xa7dc,1,-42561},{0xa7f5,0xa7f5,1,1},
    {0xff21,0xff3a,1,32},{0x10400,0x10427,1,40},{0x104b0,0x104d3,1,40},{0x10570,0x1057a,1,39},
    {0x1057c,0x1058a,1,39},{0x1058c,0x10592,1,39},{0x10594,0x10595,1,39},{0x10c80,0x10cb2,1,64},
    {0x10d50,0x10d65,1,32},{0x118a0,0x118bf,1,32},{0x16e40,0x16e5f,1,32},{0x16ea0,0x16eb8,1,27},
    {0x1e900,0x1e921,1,34},
};
static const uint32_t mhe__wp_nfd1[1712][4] = {   /* first, last, to, step */
    {0xc0,0xc5,0x41,0},{0xc7,0xc7,0x43,0},{0xc8,0xcb,0x45,0},{0xcc,0xcf,0x49,0},
    {0xd1,0xd2,0x4e,1},{0xd3,0xd6,0x4f,0},{0xd9,0xdc,0x55,0},{0xdd,0xdd,0x59,0},
    {0xe0,0xe5,0x61,0},{0xe7,0xe7,0x63,0},{0xe8,0xeb,0x65,0},{0xec,0xef,0x69,0},
    {0xf1,0xf2,0x6e,1},{0xf3,0xf6,0x6f,0},{0xf9,0xfc,0x75,0},{0xfd,0xfd,0x79,0},
    {0xff,0xff,0x79,0},{0x100,0x100,0x41,0},{0x101,0x101,0x61,0},{0x102,0x102,0x41,0},
    {0x103,0x103,0x61,0},{0x104,0x104,0x41,0},{0x105,0x105,0x61,0},{0x106,0x106,0x43,0},
    {0x107,0x107,0x63,0},{0x108,0x108,0x43,0},{0x109,0x109,0x63,0},{0x10a,0x10a,0x43,0},
    {0x10b,0x10b,0x63,0},{0x10c,0x10c,0x43,0},{0x10d,0x10d,0x63,0},{0x10e,0x10e,0x44,0},
    {0x10f,0x10f,0x64,0},{0x112,0x112,0x45,0},{0x113,0x113,0x65,0},{0x114,0x114,0x45,0},
    {0x115,0x115,0x65,0},{0x116,0x116,0x45,0},{0x117,0x117,0x65,0},{0x118,0x118,0x45,0},
    {0x119,0x119,0x65,0},{0x11a,0x11a,0x45,0},{0x11b,0x11b,0x65,0},{0x11c,0x11c,0x47,0},
    {0x11d,0x11d,0x67,0},{0x11e,0x11e,0x47,0},{0x11f,0x11f,0x67,0},{0x120,0x120,0x47,0},
    {0x121,0x121,0x67,0},{0x122,0x122,0x47,0},{0x123,0x123,0x67,0},{0x124,0x124,0x48,0},
    {0x125,0x125,0x68,0},{0x128,0x128,0x49,0},{0x129,0x129,0x69,0},{0x12a,0x12a,0x49,0},
    {0x12b,0x12b,0x69,0},{0x12c,0x12c,0x49,0},{0x12d,0x12d,0x69,0},{0x12e,0x12e,0x49,0},
    {0x12f,0x12f,0x69,0},{0x130,0x130,0x49,0},{0x134,0x134,0x4a,0},{0x135,0x135,0x6a,0},
    {0x136,0x136,0x4b,0},{0x137,0x137,0x6b,0},{0x139,0x139,0x4c,0},{0x13a,0x13a,0x6c,0},
    {0x13b,0x13b,0x4c,0},{0x13c,0x13c,0x6c,0},{0x13d,0x13d,0x4c,0},{0x13e,0x13e,0x6c,0},
    {0x143,0x143,0x4e,0},{0x144,0x144,0x6e,0},{0x145,0x145,0x4e,0},{0x146,0x146,0x6e,0},
    {0x147,0x147,0x4e,0},{0x148,0x148,0x6e,0},{0x14c,0x14c,0x4f,0},{0x14d,0x14d,0x6f,0},
    {0x14e,0x14e,0x4f,0},{0x14f,0x14f,0x6f,0},{0x150,0x150,0x4f,0},{0x151,0x151,0x6f,0},
    {0x154,0x154,0x52,0},{0x155,0x155,0x72,0},{0x156,0x156,0x52,0},{0x157,0x157,0x72,0},
    {0x158,0x158,0x52,0},{0x159,0x159,0x72,0},{0x15a,0x15a,0x53,0},{0x15b,0x15b,0x73,0},
    {0x15c,0x15c,0x53,0},{0x15d,0x15d,0x73,0},{0x15e,0x15e,0x53,0},{0x15f,0x15f,0x73,0},
    {0x160,0x160,0x53,0},{0x161,0x161,0x73,0},{0x162,0x162,0x54,0},{0x163,0x163,0x74,0},
    {0x164,0x164,0x54,0},{0x165,0x165,0x74,0},{0x168,0x168,0x55,0},{0x169,0x169,0x75,0},
    {0x16a,0x16a,0x55,0},{0x16b,0x16b,0x75,0},{0x16c,0x16c,0x55,0},{0x16d,0x16d,0x75,0},
    {0x16e,0x16e,0x55,0},{0x16f,0x16f,0x75,0},{0x170,0x170,0x55,0},{0x171,0x171,0x75,0},
    {0x172,0x172,0x55,0},{0x173,0x173,0x75,0},{0x174,0x174,0x57,0},{0x175,0x175,0x77,0},
    {0x176,0x176,0x59,0},{0x177,0x177,0x79,0},{0x178,0x179,0x59,1},{0x17a,0x17a,0x7a,0},
    {0x17b,0x17b,0x5a,0},{0x17c,0x17c,0x7a,0},{0x17d,0x17d,0x5a,0},{0x17e,0x17e,0x7a,0},
    {0x1a0,0x1a0,0x4f,0},{0x1a1,0x1a1,0x6f,0},{0x1af,0x1af,0x55,0},{0x1b0,0x1b0,0x75,0},
    {0x1cd,0x1cd,0x41,0},{0x1ce,0x1ce,0x61,0},{0x1cf,0x1cf,0x49,0},{0x1d0,0x1d0,0x69,0},
    {0x1d1,0x1d1,0x4f,0},{0x1d2,0x1d2,0x6f,0},{0x1d3,0x1d3,0x55,0},{0x1d4,0x1d4,0x75,0},
    {0x1d5,0x1d5,0x55,0},{0x1d6,0x1d6,0x75,0},{0x1d7,0x1d7,0x55,0},{0x1d8,0x1d8,0x75,0},
    {0x1d9,0x1d9,0x55,0},{0x1da,0x1da,0x75,0},{0x1db,0x1db,0x55,0},{0x1dc,0x1dc,0x75,0},
    {0x1de,0x1de,0x41,0},{0x1df,0x1df,0x61,0},{0x1e0,0x1e0,0x41,0},{0x1e1,0x1e1,0x61,0},
    {0x1e2,0x1e2,0xc6,0},{0x1e3,0x1e3,0xe6,0},{0x1e6,0x1e6,0x47,0},{0x1e7,0x1e7,0x67,0},
    {0x1e8,0x1e8,0x4b,0},{0x1e9,0x1e9,0x6b,0},{0x1ea,0x1ea,0x4f,0},{0x1eb,0x1eb,0x6f,0},
    {0x1ec,0x1ec,0x4f,0},{0x1ed,0x1ed,0x6f,0},{0x1ee,0x1ee,0x1b7,0},{0x1ef,0x1ef,0x292,0},
    {0x1f0,0x1f0,0x6a,0},{0x1f4,0x1f4,0x47,0},{0x1f5,0x1f5,0x67,0},{0x1f8,0x1f8,0x4e,0},
    {0x1f9,0x1f9,0x6e,0},{0x1fa,0x1fa,0x41,0},{0x1fb,0x1fb,0x61,0},{0x1fc,0x1fc,0xc6,0},
    {0x1fd,0x1fd,0xe6,0},{0x1fe,0x1fe,0xd8,0},{0x1ff,0x1ff,0xf8,0},{0x200,0x200,0x41,0},
    {0x201,0x201,0x61,0},{0x202,0x202,0x41,0},{0x203,0x203,0x61,0},{0x204,0x204,0x45,0},
    {0x205,0x205,0x65,0},{0x206,0x206,0x45,0},{0x207,0x207,0x65,0},{0x208,0x208,0x49,0},
    {0x209,0x209,0x69,0},{0x20a,0x20a,0x49,0},{0x20b,0x20b,0x69,0},{0x20c,0x20c,0x4f,0},
    {0x20d,0x20d,0x6f,0},{0x20e,0x20e,0x4f,0},{0x20f,0x20f,0x6f,0},{0x210,0x210,0x52,0},
    {0x211,0x211,0x72,0},{0x212,0x212,0x52,0},{0x213,0x213,0x72,0},{0x214,0x214,0x55,0},
    {0x215,0x215,0x75,0},{0x216,0x216,0x55,0},{0x217,0x217,0x75,0},{0x218,0x218,0x53,0},
    {0x219,0x219,0x73,0},{0x21a,0x21a,0x54,0},{0x21b,0x21b,0x74,0},{0x21e,0x21e,0x48,0},
    {0x21f,0x21f,0x68,0},{0x226,0x226,0x41,0},{0x227,0x227,0x61,0},{0x228,0x228,0x45,0},
    {0x229,0x229,0x65,0},{0x22a,0x22a,0x4f,0},{0x22b,0x22b,0x6f,0},{0x22c,0x22c,0x4f,0},
    {0x22d,0x22d,0x6f,0},{0x22e,0x22e,0x4f,0},{0x22f,0x22f,0x6f,0},{0x230,0x230,0x4f,0},
    {0x231,0x231,0x6f,0},{0x232,0x232,0x59,0},{0x233,0x233,0x79,0},{0x374,0x374,0x2b9,0},
    {0x37e,0x37e,0x3b,0},{0x385,0x385,0xa8,0},{0x386,0x386,0x391,0},{0x387,0x387,0xb7,0},
    {0x388,0x388,0x395,0},{0x389,0x389,0x397,0},{0x38a,0x38a,0x399,0},{0x38c,0x38c,0x39f,0},
    {0x38e,0x38e,0x3a5,0},{0x38f,0x38f,0x3a9,0},{0x390,0x390,0x3b9,0},{0x3aa,0x3aa,0x399,0},
    {0x3ab,0x3ab,0x3a5,0},{0x3ac,0x3ac,0x3b1,0},{0x3ad,0x3ad,0x3b5,0},{0x3ae,0x3ae,0x3b7,0},
    {0x3af,0x3af,0x3b9,0},{0x3b0,0x3b0,0x3c5,0},{0x3ca,0x3ca,0x3b9,0},{0x3cb,0x3cb,0x3c5,0},
    {0x3cc,0x3cc,0x3bf,0},{0x3cd,0x3cd,0x3c5,0},{0x3ce,0x3ce,0x3c9,0},{0x3d3,0x3d4,0x3d2,0},
    {0x400,0x401,0x415,0},{0x403,0x403,0x413,0},{0x407,0x407,0x406,0},{0x40c,0x40c,0x41a,0},
    {0x40d,0x40d,0x418,0},{0x40e,0x40e,0x423,0},{0x419,0x419,0x418,0},{0x439,0x439,0x438,0},
    {0x450,0x451,0x435,0},{0x453,0x453,0x433,0},{0x457,0x457,0x456,0},{0x45c,0x45c,0x43a,0},
    {0x45d,0x45d,0x438,0},{0x45e,0x45e,0x443,0},{0x476,0x477,0x474,1},{0x4c1,0x4c1,0x416,0},
    {0x4c2,0x4c2,0x436,0},{0x4d0,0x4d0,0x410,0},{0x4d1,0x4d1,0x430,0},{0x4d2,0x4d2,0x410,0},
    {0x4d3,0x4d3,0x430,0},{0x4d6,0x4d6,0x415,0},{0x4d7,0x4d7,0x435,0},{0x4da,0x4db,0x4d8,1},
    {0x4dc,0x4dc,0x416,0},{0x4dd,0x4dd,0x436,0},{0x4de,0x4de,0x417,0},{0x4df,0x4df,0x437,0},
    {0x4e2,0x4e2,0x418,0},{0x4e3,0x4e3,0x438,0},{0x4e4,0x4e4,0x418,0},{0x4e5,0x4e5,0x438,0},
    {0x4e6,0x4e6,0x41e,0},{0x4e7,0x4e7,0x43e,0},{0x4ea,0x4eb,0x4e8,1},{0x4ec,0x4ec,0x42d,0},
    {0x4ed,0x4ed,0x44d,0},{0x4ee,0x4ee,0x423,0},{0x4ef,0x4ef,0x443,0},{0x4f0,0x4f0,0x423,0},
    {0x4f1,0x4f1,0x443,0},{0x4f2,0x4f2,0x423,0},{0x4f3,0x4f3,0x443,0},{0x4f4,0x4f4,0x427,0},
    {0x4f5,0x4f5,0x447,0},{0x4f8,0x4f8,0x42b,0},{0x4f9,0x4f9,0x44b,0},{0x622,0x623,0x627,0},
    {0x624,0x624,0x648,0},{0x625,0x625,0x627,0},{0x626,0x626,0x64a,0},{0x6c0,0x6c0,0x6d5,0},
    {0x6c2,0x6c2,0x6c1,0},{0x6d3,0x6d3,0x6d2,0},{0x929,0x929,0x928,0},{0x931,0x931,0x930,0},
    {0x934,0x934,0x933,0},{0x958,0x95a,0x915,1},{0x95b,0x95b,0x91c,0},{0x95c,0x95d,0x921,1},
    {0x95e,0x95e,0x92b,0},{0x95f,0x95f,0x92f,0},{0x9dc,0x9dd,0x9a1,1},{0x9df,0x9df,0x9af,0},
    {0xa33,0xa33,0xa32,0},{0xa36,0xa36,0xa38,0},{0xa59,0xa5a,0xa16,1},{0xa5b,0xa5b,0xa1c,0},
    {0xa5e,0xa5e,0xa2b,0},{0xb48,0xb48,0xb47,0},{0xb5c,0xb5d,0xb21,1},{0xcc0,0xcc0,0xcd5,0},
    {0xcc7,0xcc8,0xcd5,1},{0xcca,0xcca,0xcc2,0},{0xdda,0xdda,0xdd9,0},{0xf43,0xf43,0xf42,0},
    {0xf4d,0xf4d,0xf4c,0},{0xf52,0xf52,0xf51,0},{0xf57,0xf57,0xf56,0},{0xf5c,0xf5c,0xf5b,0},
    {0xf69,0xf69,0xf40,0},{0x1026,0x1026,0x1025,0},{0x1b3b,0x1b3b,0x1b35,0},{0x1b3d,0x1b3d,0x1b35,0},
    {0x1b43,0x1b43,0x1b35,0},{0x1e00,0x1e00,0x41,0},{0x1e01,0x1e01,0x61,0},{0x1e02,0x1e02,0x42,0},
    {0x1e03,0x1e03,0x62,0},{0x1e04,0x1e04,0x42,0},{0x1e05,0x1e05,0x62,0},{0x1e06,0x1e06,0x42,0},
    {0x1e07,0x1e07,0x62,0},{0x1e08,0x1e08,0x43,0},{0x1e09,0x1e09,0x63,0},{0x1e0a,0x1e0a,0x44,0},
    {0x1e0b,0x1e0b,0x64,0},{0x1e0c,0x1e0c,0x44,0},{0x1e0d,0x1e0d,0x64,0},{0x1e0e,0x1e0e,0x44,0},
    {0x1e0f,0x1e0f,0x64,0},{0x1e10,0x1e10,0x44,0},{0x1e11,0x1e11,0x64,0},{0x1e12,0x1e12,0x44,0},
    {0x1e13,0x1e13,0x64,0},{0x1e14,0x1e14,0x45,0},{0x1e15,0x1e15,0x65,0},{0x1e16,0x1e16,0x45,0},
    {0x1e17,0x1e17,0x65,0},{0x1e18,0x1e18,0x45,0},{0x1e19,0x1e19,0x65,0},{0x1e1a,0x1e1a,0x45,0},
    {0x1e1b,0x1e1b,0x65,0},{0x1e1c,0x1e1c,0x45,0},{0x1e1d,0x1e1d,0x65,0},{0x1e1e,0x1e1e,0x46,0},
    {0x1e1f,0x1e1f,0x66,0},{0x1e20,0x1e20,0x47,0},{0x1e21,0x1e21,0x67,0},{0x1e22,0x1e22,0x48,0},
    {0x1e23,0x1e23,0x68,0},{0x1e24,0x1e24,0x48,0},{0x1e25,0x1e25,0x68,0},{0x1e26,0x1e26,0x48,0},
    {0x1e27,0x1e27,0x68,0},{0x1e28,0x1e28,0x48,0},{0x1e29,0x1e29,0x68,0},{0x1e2a,0x1e2a,0x48,0},
    {0x1e2b,0x1e2b,0x68,0},{0x1e2c,0x1e2c,0x49,0},{0x1e2d,0x1e2d,0x69,0},{0x1e2e,0x1e2e,0x49,0},
    {0x1e2f,0x1e2f,0x69,0},{0x1e30,0x1e30,0x4b,0},{0x1e31,0x1e31,0x6b,0},{0x1e32,0x1e32,0x4b,0},
    {0x1e33,0x1e33,0x6b,0},{0x1e34,0x1e34,0x4b,0},{0x1e35,0x1e35,0x6b,0},{0x1e36,0x1e36,0x4c,0},
    {0x1e37,0x1e37,0x6c,0},{0x1e38,0x1e38,0x4c,0},{0x1e39,0x1e39,0x6c,0},{0x1e3a,0x1e3a,0x4c,0},
    {0x1e3b,0x1e3b,0x6c,0},{0x1e3c,0x1e3c,0x4c,0},{0x1e3d,0x1e3d,0x6c,0},{0x1e3e,0x1e3e,0x4d,0},
    {0x1e3f,0x1e3f,0x6d,0},{0x1e40,0x1e40,0x4d,0},{0x1e41,0x1e41,0x6d,0},{0x1e42,0x1e42,0x4d,0},
    {0x1e43,0x1e43,0x6d,0},{0x1e44,0x1e44,0x4e,0},{0x1e45,0x1e45,0x6e,0},{0x1e46,0x1e46,0x4e,0},
    {0x1e47,0x1e47,0x6e,0},{0x1e48,0x1e48,0x4e,0},{0x1e49,0x1e49,0x6e,0},{0x1e4a,0x1e4a,0x4e,0},
    {0x1e4b,0x1e4b,0x6e,0},{0x1e4c,0x1e4c,0x4f,0},{0x1e4d,0x1e4d,0x6f,0},{0x1e4e,0x1e4e,0x4f,0},
    {0x1e4f,0x1e4f,0x6f,0},{0x1e50,0x1e50,0x4f,0},{0x1e51,0x1e51,0x6f,0},{0x1e52,0x1e52,0x4f,0},
    {0x1e53,0x1e53,0x6f,0},{0x1e54,0x1e54,0x50,0},{0x1e55,0x1e55,0x70,0},{0x1e56,0x1e56,0x50,0},
    {0x1e57,0x1e57,0x70,0},{0x1e58,0x1e58,0x52,0},{0x1e59,0x1e59,0x72,0},{0x1e5a,0x1e5a,0x52,0},
    {0x1e5b,0x1e5b,0x72,0},{0x1e5c,0x1e5c,0x52,0},{0x1e5d,0x1e5d,0x72,0},{0x1e5e,0x1e5e,0x52,0},
    {0x1e5f,0x1e5f,0x72,0},{0x1e60,0x1e60,0x53,0},{0x1e61,0x1e61,0x73,0},{0x1e62,0x1e62,0x53,0},
    {0x1e63,0x1e63,0x73,0},{0x1e64,0x1e64,0x53,0},{0x1e65,0x1e65,0x73,0},{0x1e66,0x1e66,0x53,0},
    {0x1e67,0x1e67,0x73,0},{0x1e68,0x1e68,0x53,0},{0x1e69,0x1e69,0x73,0},{0x1e6a,0x1e6a,0x54,0},
    {0x1e6b,0x1e6b,0x74,0},{0x1e6c,0x1e6c,0x54,0},{0x1e6d,0x1e6d,0x74,0},{0x1e6e,0x1e6e,0x54,0},
    {0x1e6f,0x1e6f,0x74,0},{0x1e70,0x1e70,0x54,0},{0x1e71,0x1e71,0x74,0},{0x1e72,0x1e72,0x55,0},
    {0x1e73,0x1e73,0x75,0},{0x1e74,0x1e74,0x55,0},{0x1e75,0x1e75,0x75,0},{0x1e76,0x1e76,0x55,0},
    {0x1e77,0x1e77,0x75,0},{0x1e78,0x1e78,0x55,0},{0x1e79,0x1e79,0x75,0},{0x1e7a,0x1e7a,0x55,0},
    {0x1e7b,0x1e7b,0x75,0},{0x1e7c,0x1e7c,0x56,0},{0x1e7d,0x1e7d,0x76,0},{0x1e7e,0x1e7e,0x56,0},
    {0x1e7f,0x1e7f,0x76,0},{0x1e80,0x1e80,0x57,0},{0x1e81,0x1e81,0x77,0},{0x1e82,0x1e82,0x57,0},
    {0x1e83,0x1e83,0x77,0},{0x1e84,0x1e84,0x57,0},{0x1e85,0x1e85,0x77,0},{0x1e86,0x1e86,0x57,0},
    {0x1e87,0x1e87,0x77,0},{0x1e88,0x1e88,0x57,0},{0x1e89,0x1e89,0x77,0},{0x1e8a,0x1e8a,0x58,0},
    {0x1e8b,0x1e8b,0x78,0},{0x1e8c,0x1e8c,0x58,0},{0x1e8d,0x1e8d,0x78,0},{0x1e8e,0x1e8e,0x59,0},
    {0x1e8f,0x1e8f,0x79,0},{0x1e90,0x1e90,0x5a,0},{0x1e91,0x1e91,0x7a,0},{0x1e92,0x1e92,0x5a,0},
    {0x1e93,0x1e93,0x7a,0},{0x1e94,0x1e94,0x5a,0},{0x1e95,0x1e95,0x7a,0},{0x1e96,0x1e96,0x68,0},
    {0x1e97,0x1e97,0x74,0},{0x1e98,0x1e98,0x77,0},{0x1e99,0x1e99,0x79,0},{0x1e9b,0x1e9b,0x17f,0},
    {0x1ea0,0x1ea0,0x41,0},{0x1ea1,0x1ea1,0x61,0},{0x1ea2,0x1ea2,0x41,0},{0x1ea3,0x1ea3,0x61,0},
    {0x1ea4,0x1ea4,0x41,0},{0x1ea5,0x1ea5,0x61,0},{0x1ea6,0x1ea6,0x41,0},{0x1ea7,0x1ea7,0x61,0},
    {0x1ea8,0x1ea8,0x41,0},{0x1ea9,0x1ea9,0x61,0},{0x1eaa,0x1eaa,0x41,0},{0x1eab,0x1eab,0x61,0},
    {0x1eac,0x1eac,0x41,0},{0x1ead,0x1ead,0x61,0},{0x1eae,0x1eae,0x41,0},{0x1eaf,0x1eaf,0x61,0},
    {0x1eb0,0x1eb0,0x41,0},{0x1eb1,0x1eb1,0x61,0},{0x1eb2,0x1eb2,0x41,0},{0x1eb3,0x1eb3,0x61,0},
    {0x1eb4,0x1eb4,0x41,0},{0x1eb5,0x1eb5,0x61,0},{0x1eb6,0x1eb6,0x41,0},{0x1eb7,0x1eb7,0x61,0},
    {0x1eb8,0x1eb8,0x45,0},{0x1eb9,0x1eb9,0x65,0},{0x1eba,0x1eba,0x45,0},{0x1ebb,0x1ebb,0x65,0},
    {0x1ebc,0x1ebc,0x45,0},{0x1ebd,0x1ebd,0x65,0},{0x1ebe,0x1ebe,0x45,0},{0x1ebf,0x1ebf,0x65,0},
    {0x1ec0,0x1ec0,0x45,0},{0x1ec1,0x1ec1,0x65,0},{0x1ec2,0x1ec2,0x45,0},{0x1ec3,0x1ec3,0x65,0},
    {0x1ec4,0x1ec4,0x45,0},{0x1ec5,0x1ec5,0x65,0},{0x1ec6,0x1ec6,0x45,0},{0x1ec7,0x1ec7,0x65,0},
    {0x1ec8,0x1ec8,0x49,0},{0x1ec9,0x1ec9,0x69,0},{0x1eca,0x1eca,0x49,0},{0x1ecb,0x1ecb,0x69,0},
    {0x1ecc,0x1ecc,0x4f,0},{0x1ecd,0x1ecd,0x6f,0},{0x1ece,0x1ece,0x4f,0},{0x1ecf,0x1ecf,0x6f,0},
    {0x1ed0,0x1ed0,0x4f,0},{0x1ed1,0x1ed1,0x6f,0},{0x1ed2,0x1ed2,0x4f,0},{0x1ed3,0x1ed3,0x6f,0},
    {0x1ed4,0x1ed4,0x4f,0},{0x1ed5,0x1ed5,0x6f,0},{0x1ed6,0x1ed6,0x4f,0},{0x1ed7,0x1ed7,0x6f,0},
    {0x1ed8,0x1ed8,0x4f,0},{0x1ed9,0x1ed9,0x6f,0},{0x1eda,0x1eda,0x4f,0},{0x1edb,0x1edb,0x6f,0},
    {0x1edc,0x1edc,0x4f,0},{0x1edd,0x1edd,0x6f,0},{0x1ede,0x1ede,0x4f,0},{0x1edf,0x1edf,0x6f,0},
    {0x1ee0,0x1ee0,0x4f,0},{0x1ee1,0x1ee1,0x6f,0},{0x1ee2,0x1ee2,0x4f,0},{0x1ee3,0x1ee3,0x6f,0},
    {0x1ee4,0x1ee4,0x55,0},{0x1ee5,0x1ee5,0x75,0},{0x1ee6,0x1ee6,0x55,0},{0x1ee7,0x1ee7,0x75,0},
    {0x1ee8,0x1ee8,0x55,0},{0x1ee9,0x1ee9,0x75,0},{0x1eea,0x1eea,0x55,0},{0x1eeb,0x1eeb,0x75,0},
    {0x1eec,0x1eec,0x55,0},{0x1eed,0x1eed,0x75,0},{0x1eee,0x1eee,0x55,0},{0x1eef,0x1eef,0x75,0},
    {0x1ef0,0x1ef0,0x55,0},{0x1ef1,0x1ef1,0x75,0},{0x1ef2,0x1ef2,0x59,0},{0x1ef3,0x1ef3,0x79,0},
    {0x1ef4,0x1ef4,0x59,0},{0x1ef5,0x1ef5,0x79,0},{0x1ef6,0x1ef6,0x59,0},{0x1ef7,0x1ef7,0x79,0},
    {0x1ef8,0x1ef8,0x59,0},{0x1ef9,0x1ef9,0x79,0},{0x1f00,0x1f07,0x3b1,0},{0x1f08,0x1f0f,0x391,0},
    {0x1f10,0x1f15,0x3b5,0},{0x1f18,0x1f1d,0x395,0},{0x1f20,0x1f27,0x3b7,0},{0x1f28,0x1f2f,0x397,0},
    {0x1f30,0x1f37,0x3b9,0},{0x1f38,0x1f3f,0x399,0},{0x1f40,0x1f45,0x3bf,0},{0x1f48,0x1f4d,0x39f,0},
    {0x1f50,0x1f57,0x3c5,0},{0x1f59,0x1f59,0x3a5,0},{0x1f5b,0x1f5b,0x3a5,0},{0x1f5d,0x1f5d,0x3a5,0},
    {0x1f5f,0x1f5f,0x3a5,0},{0x1f60,0x1f67,0x3c9,0},{0x1f68,0x1f6f,0x3a9,0},{0x1f70,0x1f71,0x3b1,0},
    {0x1f72,0x1f73,0x3b5,0},{0x1f74,0x1f75,0x3b7,0},{0x1f76,0x1f77,0x3b9,0},{0x1f78,0x1f79,0x3bf,0},
    {0x1f7a,0x1f7b,0x3c5,0},{0x1f7c,0x1f7d,0x3c9,0},{0x1f80,0x1f87,0x3b1,0},{0x1f88,0x1f8f,0x391,0},
    {0x1f90,0x1f97,0x3b7,0},{0x1f98,0x1f9f,0x397,0},{0x1fa0,0x1fa7,0x3c9,0},{0x1fa8,0x1faf,0x3a9,0},
    {0x1fb0,0x1fb4,0x3b1,0},{0x1fb6,0x1fb7,0x3b1,0},{0x1fb8,0x1fbc,0x391,0},{0x1fbe,0x1fbe,0x3b9,0},
    {0x1fc1,0x1fc1,0xa8,0},{0x1fc2,0x1fc4,0x3b7,0},{0x1fc6,0x1fc7,0x3b7,0},{0x1fc8,0x1fc9,0x395,0},
    {0x1fca,0x1fcc,0x397,0},{0x1fcd,0x1fcf,0x1fbf,0},{0x1fd0,0x1fd3,0x3b9,0},{0x1fd6,0x1fd7,0x3b9,0},
    {0x1fd8,0x1fdb,0x399,0},{0x1fdd,0x1fdf,0x1ffe,0},{0x1fe0,0x1fe3,0x3c5,0},{0x1fe4,0x1fe5,0x3c1,0},
    {0x1fe6,0x1fe7,0x3c5,0},{0x1fe8,0x1feb,0x3a5,0},{0x1fec,0x1fec,0x3a1,0},{0x1fed,0x1fee,0xa8,0},
    {0x1fef,0x1fef,0x60,0},{0x1ff2,0x1ff4,0x3c9,0},{0x1ff6,0x1ff7,0x3c9,0},{0x1ff8,0x1ff9,0x39f,0},
    {0x1ffa,0x1ffc,0x3a9,0},{0x1ffd,0x1ffd,0xb4,0},{0x2000,0x2001,0x2002,1},{0x2126,0x2126,0x3a9,0},
    {0x212a,0x212a,0x4b,0},{0x212b,0x212b,0x41,0},{0x219a,0x219a,0x2190,0},{0x219b,0x219b,0x2192,0},
    {0x21ae,0x21ae,0x2194,0},{0x21cd,0x21cd,0x21d0,0},{0x21ce,0x21ce,0x21d4,0},{0x21cf,0x21cf,0x21d2,0},
    {0x2204,0x2204,0x2203,0},{0x2209,0x2209,0x2208,0},{0x220c,0x220c,0x220b,0},{0x2224,0x2224,0x2223,0},
    {0x2226,0x2226,0x2225,0},{0x2241,0x2241,0x223c,0},{0x2244,0x2244,0x2243,0},{0x2247,0x2247,0x2245,0},
    {0x2249,0x2249,0x2248,0},{0x2260,0x2260,0x3d,0},{0x2262,0x2262,0x2261,0},{0x226d,0x226d,0x224d,0},
    {0x226e,0x226e,0x3c,0},{0x226f,0x226f,0x3e,0},{0x2270,0x2271,0x2264,1},{0x2274,0x2275,0x2272,1},
    {0x2278,0x2279,0x2276,1},{0x2280,0x2281,0x227a,1},{0x2284,0x2285,0x2282,1},{0x2288,0x2289,0x2286,1},
    {0x22ac,0x22ac,0x22a2,0},{0x22ad,0x22ae,0x22a8,1},{0x22af,0x22af,0x22ab,0},{0x22e0,0x22e1,0x227c,1},
    {0x22e2,0x22e3,0x2291,1},{0x22ea,0x22ed,0x22b2,1},{0x2329,0x232a,0x3008,1},{0x2adc,0x2adc,0x2add,0},
    {0x304c,0x304c,0x304b,0},{0x304e,0x304e,0x304d,0},{0x3050,0x3050,0x304f,0},{0x3052,0x3052,0x3051,0},
    {0x3054,0x3054,0x3053,0},{0x3056,0x3056,0x3055,0},{0x3058,0x3058,0x3057,0},{0x305a,0x305a,0x3059,0},
    {0x305c,0x305c,0x305b,0},{0x305e,0x305e,0x305d,0},{0x3060,0x3060,0x305f,0},{0x3062,0x3062,0x3061,0},
    {0x3065,0x3065,0x3064,0},{0x3067,0x3067,0x3066,0},{0x3069,0x3069,0x3068,0},{0x3070,0x3071,0x306f,0},
    {0x3073,0x3074,0x3072,0},{0x3076,0x3077,0x3075,0},{0x3079,0x307a,0x3078,0},{0x307c,0x307d,0x307b,0},
    {0x3094,0x3094,0x3046,0},{0x309e,0x309e,0x309d,0},{0x30ac,0x30ac,0x30ab,0},{0x30ae,0x30ae,0x30ad,0},
    {0x30b0,0x30b0,0x30af,0},{0x30b2,0x30b2,0x30b1,0},{0x30b4,0x30b4,0x30b3,0},{0x30b6,0x30b6,0x30b5,0},
    {0x30b8,0x30b8,0x30b7,0},{0x30ba,0x30ba,0x30b9,0},{0x30bc,0x30bc,0x30bb,0},{0x30be,0x30be,0x30bd,0},
    {0x30c0,0x30c0,0x30bf,0},{0x30c2,0x30c2,0x30c1,0},{0x30c5,0x30c5,0x30c4,0},{0x30c7,0x30c7,0x30c6,0},
    {0x30c9,0x30c9,0x30c8,0},{0x30d0,0x30d1,0x30cf,0},{0x30d3,0x30d4,0x30d2,0},{0x30d6,0x30d7,0x30d5,0},
    {0x30d9,0x30da,0x30d8,0},{0x30dc,0x30dd,0x30db,0},{0x30f4,0x30f4,0x30a6,0},{0x30f7,0x30fa,0x30ef,1},
    {0x30fe,0x30fe,0x30fd,0},{0xf900,0xf900,0x8c48,0},{0xf901,0xf901,0x66f4,0},{0xf902,0xf902,0x8eca,0},
    {0xf903,0xf903,0x8cc8,0},{0xf904,0xf904,0x6ed1,0},{0xf905,0xf905,0x4e32,0},{0xf906,0xf906,0x53e5,0},
    {0xf907,0xf908,0x9f9c,0},{0xf909,0xf909,0x5951,0},{0xf90a,0xf90a,0x91d1,0},{0xf90b,0xf90b,0x5587,0},
    {0xf90c,0xf90c,0x5948,0},{0xf90d,0xf90d,0x61f6,0},{0xf90e,0xf90e,0x7669,0},{0xf90f,0xf90f,0x7f85,0},
    {0xf910,0xf910,0x863f,0},{0xf911,0xf911,0x87ba,0},{0xf912,0xf912,0x88f8,0},{0xf913,0xf913,0x908f,0},
    {0xf914,0xf914,0x6a02,0},{0xf915,0xf915,0x6d1b,0},{0xf916,0xf916,0x70d9,0},{0xf917,0xf917,0x73de,0},
    {0xf918,0xf918,0x843d,0},{0xf919,0xf919,0x916a,0},{0xf91a,0xf91a,0x99f1,0},{0xf91b,0xf91b,0x4e82,0},
    {0xf91c,0xf91c,0x5375,0},{0xf91d,0xf91d,0x6b04,0},{0xf91e,0xf91e,0x721b,0},{0xf91f,0xf91f,0x862d,0},
    {0xf920,0xf920,0x9e1e,0},{0xf921,0xf921,0x5d50,0},{0xf922,0xf922,0x6feb,0},{0xf923,0xf923,0x85cd,0},
    {0xf924,0xf924,0x8964,0},{0xf925,0xf925,0x62c9,0},{0xf926,0xf926,0x81d8,0},{0xf927,0xf927,0x881f,0},
    {0xf928,0xf928,0x5eca,0},{0xf929,0xf929,0x6717,0},{0xf92a,0xf92a,0x6d6a,0},{0xf92b,0xf92b,0x72fc,0},
    {0xf92c,0xf92c,0x90ce,0},{0xf92d,0xf92d,0x4f86,0},{0xf92e,0xf92e,0x51b7,0},{0xf92f,0xf92f,0x52de,0},
    {0xf930,0xf930,0x64c4,0},{0xf931,0xf931,0x6ad3,0},{0xf932,0xf932,0x7210,0},{0xf933,0xf933,0x76e7,0},
    {0xf934,0xf934,0x8001,0},{0xf935,0xf935,0x8606,0},{0xf936,0xf936,0x865c,0},{0xf937,0xf937,0x8def,0},
    {0xf938,0xf938,0x9732,0},{0xf939,0xf939,0x9b6f,0},{0xf93a,0xf93a,0x9dfa,0},{0xf93b,0xf93b,0x788c,0},
    {0xf93c,0xf93c,0x797f,0},{0xf93d,0xf93d,0x7da0,0},{0xf93e,0xf93e,0x83c9,0},{0xf93f,0xf93f,0x9304,0},
    {0xf940,0xf940,0x9e7f,0},{0xf941,0xf941,0x8ad6,0},{0xf942,0xf942,0x58df,0},{0xf943,0xf943,0x5f04,0},
    {0xf944,0xf944,0x7c60,0},{0xf945,0xf945,0x807e,0},{0xf946,0xf946,0x7262,0},{0xf947,0xf947,0x78ca,0},
    {0xf948,0xf948,0x8cc2,0},{0xf949,0xf949,0x96f7,0},{0xf94a,0xf94a,0x58d8,0},{0xf94b,0xf94b,0x5c62,0},
    {0xf94c,0xf94c,0x6a13,0},{0xf94d,0xf94d,0x6dda,0},{0xf94e,0xf94e,0x6f0f,0},{0xf94f,0xf94f,0x7d2f,0},
    {0xf950,0xf950,0x7e37,0},{0xf951,0xf951,0x964b,0},{0xf952,0xf952,0x52d2,0},{0xf953,0xf953,0x808b,0},
    {0xf954,0xf954,0x51dc,0},{0xf955,0xf955,0x51cc,0},{0xf956,0xf956,0x7a1c,0},{0xf957,0xf957,0x7dbe,0},
    {0xf958,0xf958,0x83f1,0},{0xf959,0xf959,0x9675,0},{0xf95a,0xf95a,0x8b80,0},{0xf95b,0xf95b,0x62cf,0},
    {0xf95c,0xf95c,0x6a02,0},{0xf95d,0xf95d,0x8afe,0},{0xf95e,0xf95e,0x4e39,0},{0xf95f,0xf95f,0x5be7,0},
    {0xf960,0xf960,0x6012,0},{0xf961,0xf961,0x7387,0},{0xf962,0xf962,0x7570,0},{0xf963,0xf963,0x5317,0},
    {0xf964,0xf964,0x78fb,0},{0xf965,0xf965,0x4fbf,0},{0xf966,0xf966,0x5fa9,0},{0xf967,0xf967,0x4e0d,0},
    {0xf968,0xf968,0x6ccc,0},{0xf969,0xf969,0x6578,0},{0xf96a,0xf96a,0x7d22,0},{0xf96b,0xf96b,0x53c3,0},
    {0xf96c,0xf96c,0x585e,0},{0xf96d,0xf96d,0x7701,0},{0xf96e,0xf96e,0x8449,0},{0xf96f,0xf96f,0x8aaa,0},
    {0xf970,0xf970,0x6bba,0},{0xf971,0xf971,0x8fb0,0},{0xf972,0xf972,0x6c88,0},{0xf973,0xf973,0x62fe,0},
    {0xf974,0xf974,0x82e5,0},{0xf975,0xf975,0x63a0,0},{0xf976,0xf976,0x7565,0},{0xf977,0xf977,0x4eae,0},
    {0xf978,0xf978,0x5169,0},{0xf979,0xf979,0x51c9,0},{0xf97a,0xf97a,0x6881,0},{0xf97b,0xf97b,0x7ce7,0},
    {0xf97c,0xf97c,0x826f,0},{0xf97d,0xf97d,0x8ad2,0},{0xf97e,0xf97e,0x91cf,0},{0xf97f,0xf97f,0x52f5,0},
    {0xf980,0xf980,0x5442,0},{0xf981,0xf981,0x5973,0},{0xf982,0xf982,0x5eec,0},{0xf983,0xf983,0x65c5,0},
    {0xf984,0xf984,0x6ffe,0},{0xf985,0xf985,0x792a,0},{0xf986,0xf986,0x95ad,0},{0xf987,0xf987,0x9a6a,0},
    {0xf988,0xf988,0x9e97,0},{0xf989,0xf989,0x9ece,0},{0xf98a,0xf98a,0x529b,0},{0xf98b,0xf98b,0x66c6,0},
    {0xf98c,0xf98c,0x6b77,0},{0xf98d,0xf98d,0x8f62,0},{0xf98e,0xf98e,0x5e74,0},{0xf98f,0xf98f,0x6190,0},
    {0xf990,0xf990,0x6200,0},{0xf991,0xf991,0x649a,0},{0xf992,0xf992,0x6f23,0},{0xf993,0xf993,0x7149,0},
    {0xf994,0xf994,0x7489,0},{0xf995,0xf995,0x79ca,0},{0xf996,0xf996,0x7df4,0},{0xf997,0xf997,0x806f,0},
    {0xf998,0xf998,0x8f26,0},{0xf999,0xf999,0x84ee,0},{0xf99a,0xf99a,0x9023,0},{0xf99b,0xf99b,0x934a,0},
    {0xf99c,0xf99c,0x5217,0},{0xf99d,0xf99d,0x52a3,0},{0xf99e,0xf99e,0x54bd,0},{0xf99f,0xf99f,0x70c8,0},
    {0xf9a0,0xf9a0,0x88c2,0},{0xf9a1,0xf9a1,0x8aaa,0},{0xf9a2,0xf9a2,0x5ec9,0},{0xf9a3,0xf9a3,0x5ff5,0},
    {0xf9a4,0xf9a4,0x637b,0},{0xf9a5,0xf9a5,0x6bae,0},{0xf9a6,0xf9a6,0x7c3e,0},{0xf9a7,0xf9a7,0x7375,0},
    {0xf9a8,0xf9a8,0x4ee4,0},{0xf9a9,0xf9a9,0x56f9,0},{0xf9aa,0xf9aa,0x5be7,0},{0xf9ab,0xf9ab,0x5dba,0},
    {0xf9ac,0xf9ac,0x601c,0},{0xf9ad,0xf9ad,0x73b2,0},{0xf9ae,0xf9ae,0x7469,0},{0xf9af,0xf9af,0x7f9a,0},
    {0xf9b0,0xf9b0,0x8046,0},{0xf9b1,0xf9b1,0x9234,0},{0xf9b2,0xf9b2,0x96f6,0},{0xf9b3,0xf9b3,0x9748,0},
    {0xf9b4,0xf9b4,0x9818,0},{0xf9b5,0xf9b5,0x4f8b,0},{0xf9b6,0xf9b6,0x79ae,0},{0xf9b7,0xf9b7,0x91b4,0},
    {0xf9b8,0xf9b8,0x96b8,0},{0xf9b9,0xf9b9,0x60e1,0},{0xf9ba,0xf9ba,0x4e86,0},{0xf9bb,0xf9bb,0x50da,0},
    {0xf9bc,0xf9bc,0x5bee,0},{0xf9bd,0xf9bd,0x5c3f,0},{0xf9be,0xf9be,0x6599,0},{0xf9bf,0xf9bf,0x6a02,0},
    {0xf9c0,0xf9c0,0x71ce,0},{0xf9c1,0xf9c1,0x7642,0},{0xf9c2,0xf9c2,0x84fc,0},{0xf9c3,0xf9c3,0x907c,0},
    {0xf9c4,0xf9c4,0x9f8d,0},{0xf9c5,0xf9c5,0x6688,0},{0xf9c6,0xf9c6,0x962e,0},{0xf9c7,0xf9c7,0x5289,0},
    {0xf9c8,0xf9c8,0x677b,0},{0xf9c9,0xf9c9,0x67f3,0},{0xf9ca,0xf9ca,0x6d41,0},{0xf9cb,0xf9cb,0x6e9c,0},
    {0xf9cc,0xf9cc,0x7409,0},{0xf9cd,0xf9cd,0x7559,0},{0xf9ce,0xf9ce,0x786b,0},{0xf9cf,0xf9cf,0x7d10,0},
    {0xf9d0,0xf9d0,0x985e,0},{0xf9d1,0xf9d1,0x516d,0},{0xf9d2,0xf9d2,0x622e,0},{0xf9d3,0xf9d3,0x9678,0},
    {0xf9d4,0xf9d4,0x502b,0},{0xf9d5,0xf9d5,0x5d19,0},{0xf9d6,0xf9d6,0x6dea,0},{0xf9d7,0xf9d7,0x8f2a,0},
    {0xf9d8,0xf9d8,0x5f8b,0},{0xf9d9,0xf9d9,0x6144,0},{0xf9da,0xf9da,0x6817,0},{0xf9db,0xf9db,0x7387,0},
    {0xf9dc,0xf9dc,0x9686,0},{0xf9dd,0xf9dd,0x5229,0},{0xf9de,0xf9de,0x540f,0},{0xf9df,0xf9df,0x5c65,0},
    {0xf9e0,0xf9e0,0x6613,0},{0xf9e1,0xf9e1,0x674e,0},{0xf9e2,0xf9e2,0x68a8,0},{0xf9e3,0xf9e3,0x6ce5,0},
    {0xf9e4,0xf9e4,0x7406,0},{0xf9e5,0xf9e5,0x75e2,0},{0xf9e6,0xf9e6,0x7f79,0},{0xf9e7,0xf9e7,0x88cf,0},
    {0xf9e8,0xf9e8,0x88e1,0},{0xf9e9,0xf9e9,0x91cc,0},{0xf9ea,0xf9ea,0x96e2,0},{0xf9eb,0xf9eb,0x533f,0},
    {0xf9ec,0xf9ec,0x6eba,0},{0xf9ed,0xf9ed,0x541d,0},{0xf9ee,0xf9ee,0x71d0,0},{0xf9ef,0xf9ef,0x7498,0},
    {0xf9f0,0xf9f0,0x85fa,0},{0xf9f1,0xf9f1,0x96a3,0},{0xf9f2,0xf9f2,0x9c57,0},{0xf9f3,0xf9f3,0x9e9f,0},
    {0xf9f4,0xf9f4,0x6797,0},{0xf9f5,0xf9f5,0x6dcb,0},{0xf9f6,0xf9f6,0x81e8,0},{0xf9f7,0xf9f7,0x7acb,0},
    {0xf9f8,0xf9f8,0x7b20,0},{0xf9f9,0xf9f9,0x7c92,0},{0xf9fa,0xf9fa,0x72c0,0},{0xf9fb,0xf9fb,0x7099,0},
    {0xf9fc,0xf9fc,0x8b58,0},{0xf9fd,0xf9fd,0x4ec0,0},{0xf9fe,0xf9fe,0x8336,0},{0xf9ff,0xf9ff,0x523a,0},
    {0xfa00,0xfa00,0x5207,0},{0xfa01,0xfa01,0x5ea6,0},{0xfa02,0xfa02,0x62d3,0},{0xfa03,0xfa03,0x7cd6,0},
    {0xfa04,0xfa04,0x5b85,0},{0xfa05,0xfa05,0x6d1e,0},{0xfa06,0xfa06,0x66b4,0},{0xfa07,0xfa07,0x8f3b,0},
    {0xfa08,0xfa08,0x884c,0},{0xfa09,0xfa09,0x964d,0},{0xfa0a,0xfa0a,0x898b,0},{0xfa0b,0xfa0b,0x5ed3,0},
    {0xfa0c,0xfa0c,0x5140,0},{0xfa0d,0xfa0d,0x55c0,0},{0xfa10,0xfa10,0x585a,0},{0xfa12,0xfa12,0x6674,0},
    {0xfa15,0xfa15,0x51de,0},{0xfa16,0xfa16,0x732a,0},{0xfa17,0xfa17,0x76ca,0},{0xfa18,0xfa18,0x793c,0},
    {0xfa19,0xfa19,0x795e,0},{0xfa1a,0xfa1a,0x7965,0},{0xfa1b,0xfa1b,0x798f,0},{0xfa1c,0xfa1c,0x9756,0},
    {0xfa1d,0xfa1d,0x7cbe,0},{0xfa1e,0xfa1e,0x7fbd,0},{0xfa20,0xfa20,0x8612,0},{0xfa22,0xfa22,0x8af8,0},
    {0xfa25,0xfa25,0x9038,0},{0xfa26,0xfa26,0x90fd,0},{0xfa2a,0xfa2a,0x98ef,0},{0xfa2b,0xfa2b,0x98fc,0},
    {0xfa2c,0xfa2c,0x9928,0},{0xfa2d,0xfa2d,0x9db4,0},{0xfa2e,0xfa2e,0x90de,0},{0xfa2f,0xfa2f,0x96b7,0},
    {0xfa30,0xfa30,0x4fae,0},{0xfa31,0xfa31,0x50e7,0},{0xfa32,0xfa32,0x514d,0},{0xfa33,0xfa33,0x52c9,0},
    {0xfa34,0xfa34,0x52e4,0},{0xfa35,0xfa35,0x5351,0},{0xfa36,0xfa36,0x559d,0},{0xfa37,0xfa37,0x5606,0},
    {0xfa38,0xfa38,0x5668,0},{0xfa39,0xfa39,0x5840,0},{0xfa3a,0xfa3a,0x58a8,0},{0xfa3b,0xfa3b,0x5c64,0},
    {0xfa3c,0xfa3c,0x5c6e,0},{0xfa3d,0xfa3d,0x6094,0},{0xfa3e,0xfa3e,0x6168,0},{0xfa3f,0xfa3f,0x618e,0},
    {0xfa40,0xfa40,0x61f2,0},{0xfa41,0xfa41,0x654f,0},{0xfa42,0xfa42,0x65e2,0},{0xfa43,0xfa43,0x6691,0},
    {0xfa44,0xfa44,0x6885,0},{0xfa45,0xfa45,0x6d77,0},{0xfa46,0xfa46,0x6e1a,0},{0xfa47,0xfa47,0x6f22,0},
    {0xfa48,0xfa48,0x716e,0},{0xfa49,0xfa49,0x722b,0},{0xfa4a,0xfa4a,0x7422,0},{0xfa4b,0xfa4b,0x7891,0},
    {0xfa4c,0xfa4c,0x793e,0},{0xfa4d,0xfa4d,0x7949,0},{0xfa4e,0xfa4e,0x7948,0},{0xfa4f,0xfa4f,0x7950,0},
    {0xfa50,0xfa50,0x7956,0},{0xfa51,0xfa51,0x795d,0},{0xfa52,0xfa53,0x798d,1},{0xfa54,0xfa54,0x7a40,0},
    {0xfa55,0xfa55,0x7a81,0},{0xfa56,0xfa56,0x7bc0,0},{0xfa57,0xfa57,0x7df4,0},{0xfa58,0xfa58,0x7e09,0},
    {0xfa59,0xfa59,0x7e41,0},{0xfa5a,0xfa5a,0x7f72,0},{0xfa5b,0xfa5b,0x8005,0},{0xfa5c,0xfa5c,0x81ed,0},
    {0xfa5d,0xfa5e,0x8279,0},{0xfa5f,0xfa5f,0x8457,0},{0xfa60,0xfa60,0x8910,0},{0xfa61,0xfa61,0x8996,0},
    {0xfa62,0xfa62,0x8b01,0},{0xfa63,0xfa63,0x8b39,0},{0xfa64,0xfa64,0x8cd3,0},{0xfa65,0xfa65,0x8d08,0},
    {0xfa66,0xfa66,0x8fb6,0},{0xfa67,0xfa67,0x9038,0},{0xfa68,0xfa68,0x96e3,0},{0xfa69,0xfa69,0x97ff,0},
    {0xfa6a,0xfa6a,0x983b,0},{0xfa6b,0xfa6b,0x6075,0},{0xfa6c,0xfa6c,0x242ee,0},{0xfa6d,0xfa6d,0x8218,0},
    {0xfa70,0xfa70,0x4e26,0},{0xfa71,0xfa71,0x51b5,0},{0xfa72,0xfa72,0x5168,0},{0xfa73,0xfa73,0x4f80,0},
    {0xfa74,0xfa74,0x5145,0},{0xfa75,0xfa75,0x5180,0},{0xfa76,0xfa76,0x52c7,0},{0xfa77,0xfa77,0x52fa,0},
    {0xfa78,0xfa78,0x559d,0},{0xfa79,0xfa79,0x5555,0},{0xfa7a,0xfa7a,0x5599,0},{0xfa7b,0xfa7b,0x55e2,0},
    {0xfa7c,0xfa7c,0x585a,0},{0xfa7d,0xfa7d,0x58b3,0},{0xfa7e,0xfa7e,0x5944,0},{0xfa7f,0xfa7f,0x5954,0},
    {0xfa80,0xfa80,0x5a62,0},{0xfa81,0xfa81,0x5b28,0},{0xfa82,0xfa82,0x5ed2,0},{0xfa83,0xfa83,0x5ed9,0},
    {0xfa84,0xfa84,0x5f69,0},{0xfa85,0xfa85,0x5fad,0},{0xfa86,0xfa86,0x60d8,0},{0xfa87,0xfa87,0x614e,0},
    {0xfa88,0xfa88,0x6108,0},{0xfa89,0xfa89,0x618e,0},{0xfa8a,0xfa8a,0x6160,0},{0xfa8b,0xfa8b,0x61f2,0},
    {0xfa8c,0xfa8c,0x6234,0},{0xfa8d,0xfa8d,0x63c4,0},{0xfa8e,0xfa8e,0x641c,0},{0xfa8f,0xfa8f,0x6452,0},
    {0xfa90,0xfa90,0x6556,0},{0xfa91,0xfa91,0x6674,0},{0xfa92,0xfa92,0x6717,0},{0xfa93,0xfa93,0x671b,0},
    {0xfa94,0xfa94,0x6756,0},{0xfa95,0xfa95,0x6b79,0},{0xfa96,0xfa96,0x6bba,0},{0xfa97,0xfa97,0x6d41,0},
    {0xfa98,0xfa98,0x6edb,0},{0xfa99,0xfa99,0x6ecb,0},{0xfa9a,0xfa9a,0x6f22,0},{0xfa9b,0xfa9b,0x701e,0},
    {0xfa9c,0xfa9c,0x716e,0},{0xfa9d,0xfa9d,0x77a7,0},{0xfa9e,0xfa9e,0x7235,0},{0xfa9f,0xfa9f,0x72af,0},
    {0xfaa0,0xfaa0,0x732a,0},{0xfaa1,0xfaa1,0x7471,0},{0xfaa2,0xfaa2,0x7506,0},{0xfaa3,0xfaa3,0x753b,0},
    {0xfaa4,0xfaa4,0x761d,0},{0xfaa5,0xfaa5,0x761f,0},{0xfaa6,0xfaa6,0x76ca,0},{0xfaa7,0xfaa7,0x76db,0},
    {0xfaa8,0xfaa8,0x76f4,0},{0xfaa9,0xfaa9,0x774a,0},{0xfaaa,0xfaaa,0x7740,0},{0xfaab,0xfaab,0x78cc,0},
    {0xfaac,0xfaac,0x7ab1,0},{0xfaad,0xfaad,0x7bc0,0},{0xfaae,0xfaae,0x7c7b,0},{0xfaaf,0xfaaf,0x7d5b,0},
    {0xfab0,0xfab0,0x7df4,0},{0xfab1,0xfab1,0x7f3e,0},{0xfab2,0xfab2,0x8005,0},{0xfab3,0xfab3,0x8352,0},
    {0xfab4,0xfab4,0x83ef,0},{0xfab5,0xfab5,0x8779,0},{0xfab6,0xfab6,0x8941,0},{0xfab7,0xfab7,0x8986,0},
    {0xfab8,0xfab8,0x8996,0},{0xfab9,0xfab9,0x8abf,0},{0xfaba,0xfaba,0x8af8,0},{0xfabb,0xfabb,0x8acb,0},
    {0xfabc,0xfabc,0x8b01,0},{0xfabd,0xfabd,0x8afe,0},{0xfabe,0xfabe,0x8aed,0},{0xfabf,0xfabf,0x8b39,0},
    {0xfac0,0xfac0,0x8b8a,0},{0xfac1,0xfac1,0x8d08,0},{0xfac2,0xfac2,0x8f38,0},{0xfac3,0xfac3,0x9072,0},
    {0xfac4,0xfac4,0x9199,0},{0xfac5,0xfac5,0x9276,0},{0xfac6,0xfac6,0x967c,0},{0xfac7,0xfac7,0x96e3,0},
    {0xfac8,0xfac8,0x9756,0},{0xfac9,0xfac9,0x97db,0},{0xfaca,0xfaca,0x97ff,0},{0xfacb,0xfacb,0x980b,0},
    {0xfacc,0xfacc,0x983b,0},{0xfacd,0xfacd,0x9b12,0},{0xface,0xface,0x9f9c,0},{0xfacf,0xfacf,0x2284a,0},
    {0xfad0,0xfad0,0x22844,0},{0xfad1,0xfad1,0x233d5,0},{0xfad2,0xfad2,0x3b9d,0},{0xfad3,0xfad3,0x4018,0},
    {0xfad4,0xfad4,0x4039,0},{0xfad5,0xfad5,0x25249,0},{0xfad6,0xfad6,0x25cd0,0},{0xfad7,0xfad7,0x27ed3,0},
    {0xfad8,0xfad8,0x9f43,0},{0xfad9,0xfad9,0x9f8e,0},{0xfb1d,0xfb1d,0x5d9,0},{0xfb1f,0xfb1f,0x5f2,0},
    {0xfb2a,0xfb2d,0x5e9,0},{0xfb2e,0xfb30,0x5d0,0},{0xfb31,0xfb36,0x5d1,1},{0xfb38,0xfb3c,0x5d8,1},
    {0xfb3e,0xfb3e,0x5de,0},{0xfb40,0xfb41,0x5e0,1},{0xfb43,0xfb44,0x5e3,1},{0xfb46,0xfb4a,0x5e6,1},
    {0xfb4b,0xfb4b,0x5d5,0},{0xfb4c,0xfb4c,0x5d1,0},{0xfb4d,0xfb4d,0x5db,0},{0xfb4e,0xfb4e,0x5e4,0},
    {0x1109a,0x1109a,0x11099,0},{0x1109c,0x1109c,0x1109b,0},{0x110ab,0x110ab,0x110a5,0},{0x114bb,0x114bb,0x114b9,0},
    {0x2f800,0x2f800,0x4e3d,0},{0x2f801,0x2f801,0x4e38,0},{0x2f802,0x2f802,0x4e41,0},{0x2f803,0x2f803,0x20122,0},
    {0x2f804,0x2f804,0x4f60,0},{0x2f805,0x2f805,0x4fae,0},{0x2f806,0x2f806,0x4fbb,0},{0x2f807,0x2f807,0x5002,0},
    {0x2f808,0x2f808,0x507a,0},{0x2f809,0x2f809,0x5099,0},{0x2f80a,0x2f80a,0x50e7,0},{0x2f80b,0x2f80b,0x50cf,0},
    {0x2f80c,0x2f80c,0x349e,0},{0x2f80d,0x2f80d,0x2063a,0},{0x2f80e,0x2f80e,0x514d,0},{0x2f80f,0x2f80f,0x5154,0},
    {0x2f810,0x2f810,0x5164,0},{0x2f811,0x2f811,0x5177,0},{0x2f812,0x2f812,0x2051c,0},{0x2f813,0x2f813,0x34b9,0},
    {0x2f814,0x2f814,0x5167,0},{0x2f815,0x2f815,0x518d,0},{0x2f816,0x2f816,0x2054b,0},{0x2f817,0x2f817,0x5197,0},
    {0x2f818,0x2f818,0x51a4,0},{0x2f819,0x2f819,0x4ecc,0},{0x2f81a,0x2f81a,0x51ac,0},{0x2f81b,0x2f81b,0x51b5,0},
    {0x2f81c,0x2f81c,0x291df,0},{0x2f81d,0x2f81d,0x51f5,0},{0x2f81e,0x2f81e,0x5203,0},{0x2f81f,0x2f81f,0x34df,0},
    {0x2f820,0x2f820,0x523b,0},{0x2f821,0x2f821,0x5246,0},{0x2f822,0x2f822,0x5272,0},{0x2f823,0x2f823,0x5277,0},
    {0x2f824,0x2f824,0x3515,0},{0x2f825,0x2f825,0x52c7,0},{0x2f826,0x2f826,0x52c9,0},{0x2f827,0x2f827,0x52e4,0},
    {0x2f828,0x2f828,0x52fa,0},{0x2f829,0x2f82a,0x5305,1},{0x2f82b,0x2f82b,0x5317,0},{0x2f82c,0x2f82c,0x5349,0},
    {0x2f82d,0x2f82d,0x5351,0},{0x2f82e,0x2f82e,0x535a,0},{0x2f82f,0x2f82f,0x5373,0},{0x2f830,0x2f830,0x537d,0},
    {0x2f831,0x2f833,0x537f,0},{0x2f834,0x2f834,0x20a2c,0},{0x2f835,0x2f835,0x7070,0},{0x2f836,0x2f836,0x53ca,0},
    {0x2f837,0x2f837,0x53df,0},{0x2f838,0x2f838,0x20b63,0},{0x2f839,0x2f839,0x53eb,0},{0x2f83a,0x2f83a,0x53f1,0},
    {0x2f83b,0x2f83b,0x5406,0},{0x2f83c,0x2f83c,0x549e,0},{0x2f83d,0x2f83d,0x5438,0},{0x2f83e,0x2f83e,0x5448,0},
    {0x2f83f,0x2f83f,0x5468,0},{0x2f840,0x2f840,0x54a2,0},{0x2f841,0x2f841,0x54f6,0},{0x2f842,0x2f842,0x5510,0},
    {0x2f843,0x2f843,0x5553,0},{0x2f844,0x2f844,0x5563,0},{0x2f845,0x2f846,0x5584,0},{0x2f847,0x2f847,0x5599,0},
    {0x2f848,0x2f848,0x55ab,0},{0x2f849,0x2f849,0x55b3,0},{0x2f84a,0x2f84a,0x55c2,0},{0x2f84b,0x2f84b,0x5716,0},
    {0x2f84c,0x2f84c,0x5606,0},{0x2f84d,0x2f84d,0x5717,0},{0x2f84e,0x2f84e,0x5651,0},{0x2f84f,0x2f84f,0x5674,0},
    {0x2f850,0x2f850,0x5207,0},{0x2f851,0x2f851,0x58ee,0},{0x2f852,0x2f852,0x57ce,0},{0x2f853,0x2f853,0x57f4,0},
    {0x2f854,0x2f854,0x580d,0},{0x2f855,0x2f855,0x578b,0},{0x2f856,0x2f856,0x5832,0},{0x2f857,0x2f857,0x5831,0},
    {0x2f858,0x2f858,0x58ac,0},{0x2f859,0x2f859,0x214e4,0},{0x2f85a,0x2f85a,0x58f2,0},{0x2f85b,0x2f85b,0x58f7,0},
    {0x2f85c,0x2f85c,0x5906,0},{0x2f85d,0x2f85d,0x591a,0},{0x2f85e,0x2f85e,0x5922,0},{0x2f85f,0x2f85f,0x5962,0},
    {0x2f860,0x2f860,0x216a8,0},{0x2f861,0x2f861,0x216ea,0},{0x2f862,0x2f862,0x59ec,0},{0x2f863,0x2f863,0x5a1b,0},
    {0x2f864,0x2f864,0x5a27,0},{0x2f865,0x2f865,0x59d8,0},{0x2f866,0x2f866,0x5a66,0},{0x2f867,0x2f867,0x36ee,0},
    {0x2f868,0x2f868,0x36fc,0},{0x2f869,0x2f869,0x5b08,0},{0x2f86a,0x2f86b,0x5b3e,0},{0x2f86c,0x2f86c,0x219c8,0},
    {0x2f86d,0x2f86d,0x5bc3,0},{0x2f86e,0x2f86e,0x5bd8,0},{0x2f86f,0x2f86f,0x5be7,0},{0x2f870,0x2f870,0x5bf3,0},
    {0x2f871,0x2f871,0x21b18,0},{0x2f872,0x2f872,0x5bff,0},{0x2f873,0x2f873,0x5c06,0},{0x2f874,0x2f874,0x5f53,0},
    {0x2f875,0x2f875,0x5c22,0},{0x2f876,0x2f876,0x3781,0},{0x2f877,0x2f877,0x5c60,0},{0x2f878,0x2f878,0x5c6e,0},
    {0x2f879,0x2f879,0x5cc0,0},{0x2f87a,0x2f87a,0x5c8d,0},{0x2f87b,0x2f87b,0x21de4,0},{0x2f87c,0x2f87c,0x5d43,0},
    {0x2f87d,0x2f87d,0x21de6,0},{0x2f87e,0x2f87e,0x5d6e,0},{0x2f87f,0x2f87f,0x5d6b,0},{0x2f880,0x2f880,0x5d7c,0},
    {0x2f881,0x2f882,0x5de1,1},{0x2f883,0x2f883,0x382f,0},{0x2f884,0x2f884,0x5dfd,0},{0x2f885,0x2f885,0x5e28,0},
    {0x2f886,0x2f886,0x5e3d,0},{0x2f887,0x2f887,0x5e69,0},{0x2f888,0x2f888,0x3862,0},{0x2f889,0x2f889,0x22183,0},
    {0x2f88a,0x2f88a,0x387c,0},{0x2f88b,0x2f88b,0x5eb0,0},{0x2f88c,0x2f88c,0x5eb3,0},{0x2f88d,0x2f88d,0x5eb6,0},
    {0x2f88e,0x2f88e,0x5eca,0},{0x2f88f,0x2f88f,0x2a392,0},{0x2f890,0x2f890,0x5efe,0},{0x2f891,0x2f892,0x22331,0},
    {0x2f893,0x2f893,0x8201,0},{0x2f894,0x2f895,0x5f22,0},{0x2f896,0x2f896,0x38c7,0},{0x2f897,0x2f897,0x232b8,0},
    {0x2f898,0x2f898,0x261da,0},{0x2f899,0x2f899,0x5f62,0},{0x2f89a,0x2f89a,0x5f6b,0},{0x2f89b,0x2f89b,0x38e3,0},
    {0x2f89c,0x2f89c,0x5f9a,0},{0x2f89d,0x2f89d,0x5fcd,0},{0x2f89e,0x2f89e,0x5fd7,0},{0x2f89f,0x2f89f,0x5ff9,0},
    {0x2f8a0,0x2f8a0,0x6081,0},{0x2f8a1,0x2f8a1,0x393a,0},{0x2f8a2,0x2f8a2,0x391c,0},{0x2f8a3,0x2f8a3,0x6094,0},
    {0x2f8a4,0x2f8a4,0x226d4,0},{0x2f8a5,0x2f8a5,0x60c7,0},{0x2f8a6,0x2f8a6,0x6148,0},{0x2f8a7,0x2f8a7,0x614c,0},
    {0x2f8a8,0x2f8a8,0x614e,0},{0x2f8a9,0x2f8a9,0x614c,0},{0x2f8aa,0x2f8aa,0x617a,0},{0x2f8ab,0x2f8ab,0x618e,0},
    {0x2f8ac,0x2f8ac,0x61b2,0},{0x2f8ad,0x2f8ad,0x61a4,0},{0x2f8ae,0x2f8ae,0x61af,0},{0x2f8af,0x2f8af,0x61de,0},
    {0x2f8b0,0x2f8b0,0x61f2,0},{0x2f8b1,0x2f8b1,0x61f6,0},{0x2f8b2,0x2f8b2,0x6210,0},{0x2f8b3,0x2f8b3,0x621b,0},
    {0x2f8b4,0x2f8b4,0x625d,0},{0x2f8b5,0x2f8b5,0x62b1,0},{0x2f8b6,0x2f8b6,0x62d4,0},{0x2f8b7,0x2f8b7,0x6350,0},
    {0x2f8b8,0x2f8b8,0x22b0c,0},{0x2f8b9,0x2f8b9,0x633d,0},{0x2f8ba,0x2f8ba,0x62fc,0},{0x2f8bb,0x2f8bb,0x6368,0},
    {0x2f8bc,0x2f8bc,0x6383,0},{0x2f8bd,0x2f8bd,0x63e4,0},{0x2f8be,0x2f8be,0x22bf1,0},{0x2f8bf,0x2f8bf,0x6422,0},
    {0x2f8c0,0x2f8c0,0x63c5,0},{0x2f8c1,0x2f8c1,0x63a9,0},{0x2f8c2,0x2f8c2,0x3a2e,0},{0x2f8c3,0x2f8c3,0x6469,0},
    {0x2f8c4,0x2f8c4,0x647e,0},{0x2f8c5,0x2f8c5,0x649d,0},{0x2f8c6,0x2f8c6,0x6477,0},{0x2f8c7,0x2f8c7,0x3a6c,0},
    {0x2f8c8,0x2f8c8,0x654f,0},{0x2f8c9,0x2f8c9,0x656c,0},{0x2f8ca,0x2f8ca,0x2300a,0},{0x2f8cb,0x2f8cb,0x65e3,0},
    {0x2f8cc,0x2f8cc,0x66f8,0},{0x2f8cd,0x2f8cd,0x6649,0},{0x2f8ce,0x2f8ce,0x3b19,0},{0x2f8cf,0x2f8cf,0x6691,0},
    {0x2f8d0,0x2f8d0,0x3b08,0},{0x2f8d1,0x2f8d1,0x3ae4,0},{0x2f8d2,0x2f8d2,0x5192,0},{0x2f8d3,0x2f8d3,0x5195,0},
    {0x2f8d4,0x2f8d4,0x6700,0},{0x2f8d5,0x2f8d5,0x669c,0},{0x2f8d6,0x2f8d6,0x80ad,0},{0x2f8d7,0x2f8d7,0x43d9,0},
    {0x2f8d8,0x2f8d8,0x6717,0},{0x2f8d9,0x2f8d9,0x671b,0},{0x2f8da,0x2f8da,0x6721,0},{0x2f8db,0x2f8db,0x675e,0},
    {0x2f8dc,0x2f8dc,0x6753,0},{0x2f8dd,0x2f8dd,0x233c3,0},{0x2f8de,0x2f8de,0x3b49,0},{0x2f8df,0x2f8df,0x67fa,0},
    {0x2f8e0,0x2f8e0,0x6785,0},{0x2f8e1,0x2f8e1,0x6852,0},{0x2f8e2,0x2f8e2,0x6885,0},{0x2f8e3,0x2f8e3,0x2346d,0},
    {0x2f8e4,0x2f8e4,0x688e,0},{0x2f8e5,0x2f8e5,0x681f,0},{0x2f8e6,0x2f8e6,0x6914,0},{0x2f8e7,0x2f8e7,0x3b9d,0},
    {0x2f8e8,0x2f8e8,0x6942,0},{0x2f8e9,0x2f8e9,0x69a3,0},{0x2f8ea,0x2f8ea,0x69ea,0},{0x2f8eb,0x2f8eb,0x6aa8,0},
    {0x2f8ec,0x2f8ec,0x236a3,0},{0x2f8ed,0x2f8ed,0x6adb,0},{0x2f8ee,0x2f8ee,0x3c18,0},{0x2f8ef,0x2f8ef,0x6b21,0},
    {0x2f8f0,0x2f8f0,0x238a7,0},{0x2f8f1,0x2f8f1,0x6b54,0},{0x2f8f2,0x2f8f2,0x3c4e,0},{0x2f8f3,0x2f8f3,0x6b72,0},
    {0x2f8f4,0x2f8f4,0x6b9f,0},{0x2f8f5,0x2f8f6,0x6bba,1},{0x2f8f7,0x2f8f7,0x23a8d,0},{0x2f8f8,0x2f8f8,0x21d0b,0},
    {0x2f8f9,0x2f8f9,0x23afa,0},{0x2f8fa,0x2f8fa,0x6c4e,0},{0x2f8fb,0x2f8fb,0x23cbc,0},{0x2f8fc,0x2f8fc,0x6cbf,0},
    {0x2f8fd,0x2f8fd,0x6ccd,0},{0x2f8fe,0x2f8fe,0x6c67,0},{0x2f8ff,0x2f8ff,0x6d16,0},{0x2f900,0x2f900,0x6d3e,0},
    {0x2f901,0x2f901,0x6d77,0},{0x2f902,0x2f902,0x6d41,0},{0x2f903,0x2f903,0x6d69,0},{0x2f904,0x2f904,0x6d78,0},
    {0x2f905,0x2f905,0x6d85,0},{0x2f906,0x2f906,0x23d1e,0},{0x2f907,0x2f907,0x6d34,0},{0x2f908,0x2f908,0x6e2f,0},
    {0x2f909,0x2f909,0x6e6e,0},{0x2f90a,0x2f90a,0x3d33,0},{0x2f90b,0x2f90b,0x6ecb,0},{0x2f90c,0x2f90c,0x6ec7,0},
    {0x2f90d,0x2f90d,0x23ed1,0},{0x2f90e,0x2f90e,0x6df9,0},{0x2f90f,0x2f90f,0x6f6e,0},{0x2f910,0x2f910,0x23f5e,0},
    {0x2f911,0x2f911,0x23f8e,0},{0x2f912,0x2f912,0x6fc6,0},{0x2f913,0x2f913,0x7039,0},{0x2f914,0x2f914,0x701e,0},
    {0x2f915,0x2f915,0x701b,0},{0x2f916,0x2f916,0x3d96,0},{0x2f917,0x2f917,0x704a,0},{0x2f918,0x2f918,0x707d,0},
    {0x2f919,0x2f919,0x7077,0},{0x2f91a,0x2f91a,0x70ad,0},{0x2f91b,0x2f91b,0x20525,0},{0x2f91c,0x2f91c,0x7145,0},
    {0x2f91d,0x2f91d,0x24263,0},{0x2f91e,0x2f91e,0x719c,0},{0x2f91f,0x2f91f,0x243ab,0},{0x2f920,0x2f920,0x7228,0},
    {0x2f921,0x2f921,0x7235,0},{0x2f922,0x2f922,0x7250,0},{0x2f923,0x2f923,0x24608,0},{0x2f924,0x2f924,0x7280,0},
    {0x2f925,0x2f925,0x7295,0},{0x2f926,0x2f926,0x24735,0},{0x2f927,0x2f927,0x24814,0},{0x2f928,0x2f928,0x737a,0},
    {0x2f929,0x2f929,0x738b,0},{0x2f92a,0x2f92a,0x3eac,0},{0x2f92b,0x2f92b,0x73a5,0},{0x2f92c,0x2f92d,0x3eb8,0},
    {0x2f92e,0x2f92e,0x7447,0},{0x2f92f,0x2f92f,0x745c,0},{0x2f930,0x2f930,0x7471,0},{0x2f931,0x2f931,0x7485,0},
    {0x2f932,0x2f932,0x74ca,0},{0x2f933,0x2f933,0x3f1b,0},{0x2f934,0x2f934,0x7524,0},{0x2f935,0x2f935,0x24c36,0},
    {0x2f936,0x2f936,0x753e,0},{0x2f937,0x2f937,0x24c92,0},{0x2f938,0x2f938,0x7570,0},{0x2f939,0x2f939,0x2219f,0},
    {0x2f93a,0x2f93a,0x7610,0},{0x2f93b,0x2f93b,0x24fa1,0},{0x2f93c,0x2f93c,0x24fb8,0},{0x2f93d,0x2f93d,0x25044,0},
    {0x2f93e,0x2f93e,0x3ffc,0},{0x2f93f,0x2f93f,0x4008,0},{0x2f940,0x2f940,0x76f4,0},{0x2f941,0x2f941,0x250f3,0},
    {0x2f942,0x2f942,0x250f2,0},{0x2f943,0x2f943,0x25119,0},{0x2f944,0x2f944,0x25133,0},{0x2f945,0x2f946,0x771e,1},
    {0x2f947,0x2f947,0x771f,0},{0x2f948,0x2f948,0x774a,0},{0x2f949,0x2f949,0x4039,0},{0x2f94a,0x2f94a,0x778b,0},
    {0x2f94b,0x2f94b,0x4046,0},{0x2f94c,0x2f94c,0x4096,0},{0x2f94d,0x2f94d,0x2541d,0},{0x2f94e,0x2f94e,0x784e,0},
    {0x2f94f,0x2f94f,0x788c,0},{0x2f950,0x2f950,0x78cc,0},{0x2f951,0x2f951,0x40e3,0},{0x2f952,0x2f952,0x25626,0},
    {0x2f953,0x2f953,0x7956,0},{0x2f954,0x2f954,0x2569a,0},{0x2f955,0x2f955,0x256c5,0},{0x2f956,0x2f956,0x798f,0},
    {0x2f957,0x2f957,0x79eb,0},{0x2f958,0x2f958,0x412f,0},{0x2f959,0x2f959,0x7a40,0},{0x2f95a,0x2f95a,0x7a4a,0},
    {0x2f95b,0x2f95b,0x7a4f,0},{0x2f95c,0x2f95c,0x2597c,0},{0x2f95d,0x2f95e,0x25aa7,0},{0x2f95f,0x2f95f,0x7aee,0},
    {0x2f960,0x2f960,0x4202,0},{0x2f961,0x2f961,0x25bab,0},{0x2f962,0x2f962,0x7bc6,0},{0x2f963,0x2f963,0x7bc9,0},
    {0x2f964,0x2f964,0x4227,0},{0x2f965,0x2f965,0x25c80,0},{0x2f966,0x2f966,0x7cd2,0},{0x2f967,0x2f967,0x42a0,0},
    {0x2f968,0x2f968,0x7ce8,0},{0x2f969,0x2f969,0x7ce3,0},{0x2f96a,0x2f96a,0x7d00,0},{0x2f96b,0x2f96b,0x25f86,0},
    {0x2f96c,0x2f96c,0x7d63,0},{0x2f96d,0x2f96d,0x4301,0},{0x2f96e,0x2f96e,0x7dc7,0},{0x2f96f,0x2f96f,0x7e02,0},
    {0x2f970,0x2f970,0x7e45,0},{0x2f971,0x2f971,0x4334,0},{0x2f972,0x2f972,0x26228,0},{0x2f973,0x2f973,0x26247,0},
    {0x2f974,0x2f974,0x4359,0},{0x2f975,0x2f975,0x262d9,0},{0x2f976,0x2f976,0x7f7a,0},{0x2f977,0x2f977,0x2633e,0},
    {0x2f978,0x2f978,0x7f95,0},{0x2f979,0x2f979,0x7ffa,0},{0x2f97a,0x2f97a,0x8005,0},{0x2f97b,0x2f97b,0x264da,0},
    {0x2f97c,0x2f97c,0x26523,0},{0x2f97d,0x2f97d,0x8060,0},{0x2f97e,0x2f97e,0x265a8,0},{0x2f97f,0x2f97f,0x8070,0},
    {0x2f980,0x2f980,0x2335f,0},{0x2f981,0x2f981,0x43d5,0},{0x2f982,0x2f982,0x80b2,0},{0x2f983,0x2f983,0x8103,0},
    {0x2f984,0x2f984,0x440b,0},{0x2f985,0x2f985,0x813e,0},{0x2f986,0x2f986,0x5ab5,0},{0x2f987,0x2f987,0x267a7,0},
    {0x2f988,0x2f988,0x267b5,0},{0x2f989,0x2f989,0x23393,0},{0x2f98a,0x2f98a,0x2339c,0},{0x2f98b,0x2f98b,0x8201,0},
    {0x2f98c,0x2f98c,0x8204,0},{0x2f98d,0x2f98d,0x8f9e,0},{0x2f98e,0x2f98e,0x446b,0},{0x2f98f,0x2f98f,0x8291,0},
    {0x2f990,0x2f990,0x828b,0},{0x2f991,0x2f991,0x829d,0},{0x2f992,0x2f992,0x52b3,0},{0x2f993,0x2f993,0x82b1,0},
    {0x2f994,0x2f994,0x82b3,0},{0x2f995,0x2f995,0x82bd,0},{0x2f996,0x2f996,0x82e6,0},{0x2f997,0x2f997,0x26b3c,0},
    {0x2f998,0x2f998,0x82e5,0},{0x2f999,0x2f999,0x831d,0},{0x2f99a,0x2f99a,0x8363,0},{0x2f99b,0x2f99b,0x83ad,0},
    {0x2f99c,0x2f99c,0x8323,0},{0x2f99d,0x2f99d,0x83bd,0},{0x2f99e,0x2f99e,0x83e7,0},{0x2f99f,0x2f99f,0x8457,0},
    {0x2f9a0,0x2f9a0,0x8353,0},{0x2f9a1,0x2f9a1,0x83ca,0},{0x2f9a2,0x2f9a2,0x83cc,0},{0x2f9a3,0x2f9a3,0x83dc,0},
    {0x2f9a4,0x2f9a4,0x26c36,0},{0x2f9a5,0x2f9a5,0x26d6b,0},{0x2f9a6,0x2f9a6,0x26cd5,0},{0x2f9a7,0x2f9a7,0x452b,0},
    {0x2f9a8,0x2f9a8,0x84f1,0},{0x2f9a9,0x2f9a9,0x84f3,0},{0x2f9aa,0x2f9aa,0x8516,0},{0x2f9ab,0x2f9ab,0x273ca,0},
    {0x2f9ac,0x2f9ac,0x8564,0},{0x2f9ad,0x2f9ad,0x26f2c,0},{0x2f9ae,0x2f9ae,0x455d,0},{0x2f9af,0x2f9af,0x4561,0},
    {0x2f9b0,0x2f9b0,0x26fb1,0},{0x2f9b1,0x2f9b1,0x270d2,0},{0x2f9b2,0x2f9b2,0x456b,0},{0x2f9b3,0x2f9b3,0x8650,0},
    {0x2f9b4,0x2f9b4,0x865c,0},{0x2f9b5,0x2f9b5,0x8667,0},{0x2f9b6,0x2f9b6,0x8669,0},{0x2f9b7,0x2f9b7,0x86a9,0},
    {0x2f9b8,0x2f9b8,0x8688,0},{0x2f9b9,0x2f9b9,0x870e,0},{0x2f9ba,0x2f9ba,0x86e2,0},{0x2f9bb,0x2f9bb,0x8779,0},
    {0x2f9bc,0x2f9bc,0x8728,0},{0x2f9bd,0x2f9bd,0x876b,0},{0x2f9be,0x2f9be,0x8786,0},{0x2f9bf,0x2f9bf,0x45d7,0},
    {0x2f9c0,0x2f9c0,0x87e1,0},{0x2f9c1,0x2f9c1,0x8801,0},{0x2f9c2,0x2f9c2,0x45f9,0},{0x2f9c3,0x2f9c3,0x8860,0},
    {0x2f9c4,0x2f9c4,0x8863,0},{0x2f9c5,0x2f9c5,0x27667,0},{0x2f9c6,0x2f9c6,0x88d7,0},{0x2f9c7,0x2f9c7,0x88de,0},
    {0x2f9c8,0x2f9c8,0x4635,0},{0x2f9c9,0x2f9c9,0x88fa,0},{0x2f9ca,0x2f9ca,0x34bb,0},{0x2f9cb,0x2f9cb,0x278ae,0},
    {0x2f9cc,0x2f9cc,0x27966,0},{0x2f9cd,0x2f9cd,0x46be,0},{0x2f9ce,0x2f9ce,0x46c7,0},{0x2f9cf,0x2f9cf,0x8aa0,0},
    {0x2f9d0,0x2f9d0,0x8aed,0},{0x2f9d1,0x2f9d1,0x8b8a,0},{0x2f9d2,0x2f9d2,0x8c55,0},{0x2f9d3,0x2f9d3,0x27ca8,0},
    {0x2f9d4,0x2f9d4,0x8cab,0},{0x2f9d5,0x2f9d5,0x8cc1,0},{0x2f9d6,0x2f9d6,0x8d1b,0},{0x2f9d7,0x2f9d7,0x8d77,0},
    {0x2f9d8,0x2f9d8,0x27f2f,0},{0x2f9d9,0x2f9d9,0x20804,0},{0x2f9da,0x2f9da,0x8dcb,0},{0x2f9db,0x2f9db,0x8dbc,0},
    {0x2f9dc,0x2f9dc,0x8df0,0},{0x2f9dd,0x2f9dd,0x208de,0},{0x2f9de,0x2f9de,0x8ed4,0},{0x2f9df,0x2f9df,0x8f38,0},
    {0x2f9e0,0x2f9e0,0x285d2,0},{0x2f9e1,0x2f9e1,0x285ed,0},{0x2f9e2,0x2f9e2,0x9094,0},{0x2f9e3,0x2f9e3,0x90f1,0},
    {0x2f9e4,0x2f9e4,0x9111,0},{0x2f9e5,0x2f9e5,0x2872e,0},{0x2f9e6,0x2f9e6,0x911b,0},{0x2f9e7,0x2f9e7,0x9238,0},
    {0x2f9e8,0x2f9e9,0x92d7,1},{0x2f9ea,0x2f9ea,0x927c,0},{0x2f9eb,0x2f9eb,0x93f9,0},{0x2f9ec,0x2f9ec,0x9415,0},
    {0x2f9ed,0x2f9ed,0x28bfa,0},{0x2f9ee,0x2f9ee,0x958b,0},{0x2f9ef,0x2f9ef,0x4995,0},{0x2f9f0,0x2f9f0,0x95b7,0},
    {0x2f9f1,0x2f9f1,0x28d77,0},{0x2f9f2,0x2f9f2,0x49e6,0},{0x2f9f3,0x2f9f3,0x96c3,0},{0x2f9f4,0x2f9f4,0x5db2,0},
    {0x2f9f5,0x2f9f5,0x9723,0},{0x2f9f6,0x2f9f6,0x29145,0},{0x2f9f7,0x2f9f7,0x2921a,0},{0x2f9f8,0x2f9f8,0x4a6e,0},
    {0x2f9f9,0x2f9f9,0x4a76,0},{0x2f9fa,0x2f9fa,0x97e0,0},{0x2f9fb,0x2f9fb,0x2940a,0},{0x2f9fc,0x2f9fc,0x4ab2,0},
    {0x2f9fd,0x2f9fd,0x29496,0},{0x2f9fe,0x2f9ff,0x980b,0},{0x2fa00,0x2fa00,0x9829,0},{0x2fa01,0x2fa01,0x295b6,0},
    {0x2fa02,0x2fa02,0x98e2,0},{0x2fa03,0x2fa03,0x4b33,0},{0x2fa04,0x2fa04,0x9929,0},{0x2fa05,0x2fa05,0x99a7,0},
    {0x2fa06,0x2fa06,0x99c2,0},{0x2fa07,0x2fa07,0x99fe,0},{0x2fa08,0x2fa08,0x4bce,0},{0x2fa09,0x2fa09,0x29b30,0},
    {0x2fa0a,0x2fa0a,0x9b12,0},{0x2fa0b,0x2fa0b,0x9c40,0},{0x2fa0c,0x2fa0c,0x9cfd,0},{0x2fa0d,0x2fa0d,0x4cce,0},
    {0x2fa0e,0x2fa0e,0x4ced,0},{0x2fa0f,0x2fa0f,0x9d67,0},{0x2fa10,0x2fa10,0x2a0ce,0},{0x2fa11,0x2fa11,0x4cf8,0},
    {0x2fa12,0x2fa12,0x2a105,0},{0x2fa13,0x2fa13,0x2a20e,0},{0x2fa14,0x2fa14,0x2a291,0},{0x2fa15,0x2fa15,0x9ebb,0},
    {0x2fa16,0x2fa16,0x4d56,0},{0x2fa17,0x2fa17,0x9ef9,0},{0x2fa18,0x2fa18,0x9efe,0},{0x2fa19,0x2fa19,0x9f05,0},
    {0x2fa1a,0x2fa1a,0x9f0f,0},{0x2fa1b,0x2fa1b,0x9f16,0},{0x2fa1c,0x2fa1c,0x9f3b,0},{0x2fa1d,0x2fa1d,0x2a600,0},
};
static const uint32_t mhe__wp_nfdn[60][5] = {   /* code point, n, then n code points */
    {0x340,0,0x0,0x0,0x0},{0x341,0,0x0,0x0,0x0},{0x343,0,0x0,0x0,0x0},{0x344,0,0x0,0x0,0x0},
    {0x9cb,2,0x9c7,0x9be,0x0},{0x9cc,2,0x9c7,0x9d7,0x0},{0xb4b,2,0xb47,0xb3e,0x0},{0xb4c,2,0xb47,0xb57,0x0},
    {0xb94,2,0xb92,0xbd7,0x0},{0xbca,2,0xbc6,0xbbe,0x0},{0xbcb,2,0xbc7,0xbbe,0x0},{0xbcc,2,0xbc6,0xbd7,0x0},
    {0xc48,0,0x0,0x0,0x0},{0xccb,2,0xcc2,0xcd5,0x0},{0xd4a,2,0xd46,0xd3e,0x0},{0xd4b,2,0xd47,0xd3e,0x0},
    {0xd4c,2,0xd46,0xd57,0x0},{0xddc,2,0xdd9,0xdcf,0x0},{0xddd,2,0xdd9,0xdcf,0x0},{0xdde,2,0xdd9,0xddf,0x0},
    {0xf73,0,0x0,0x0,0x0},{0xf75,0,0x0,0x0,0x0},{0xf76,0,0x0,0x0,0x0},{0xf78,0,0x0,0x0,0x0},
    {0xf81,0,0x0,0x0,0x0},{0xf93,0,0x0,0x0,0x0},{0xf9d,0,0x0,0x0,0x0},{0xfa2,0,0x0,0x0,0x0},
    {0xfa7,0,0x0,0x0,0x0},{0xfac,0,0x0,0x0,0x0},{0xfb9,0,0x0,0x0,0x0},{0x1b06,2,0x1b05,0x1b35,0x0},
    {0x1b08,2,0x1b07,0x1b35,0x0},{0x1b0a,2,0x1b09,0x1b35,0x0},{0x1b0c,2,0x1b0b,0x1b35,0x0},{0x1b0e,2,0x1b0d,0x1b35,0x0},
    {0x1b12,2,0x1b11,0x1b35,0x0},{0x1b40,2,0x1b3e,0x1b35,0x0},{0x1b41,2,0x1b3f,0x1b35,0x0},{0x1112e,0,0x0,0x0,0x0},
    {0x1112f,0,0x0,0x0,0x0},{0x1134b,2,0x11347,0x1133e,0x0},{0x1134c,2,0x11347,0x11357,0x0},{0x114bc,2,0x114b9,0x114b0,0x0},
    {0x114be,2,0x114b9,0x114bd,0x0},{0x115ba,2,0x115b8,0x115af,0x0},{0x115bb,2,0x115b9,0x115af,0x0},{0x1d15e,2,0x1d157,0x1d165,0x0},
    {0x1d15f,2,0x1d158,0x1d165,0x0},{0x1d160,3,0x1d158,0x1d165,0x1d16e},{0x1d161,3,0x1d158,0x1d165,0x1d16f},{0x1d162,3,0x1d158,0x1d165,0x1d170},
    {0x1d163,3,0x1d158,0x1d165,0x1d171},{0x1d164,3,0x1d158,0x1d165,0x1d172},{0x1d1bb,2,0x1d1b9,0x1d165,0x0},{0x1d1bc,2,0x1d1ba,0x1d165,0x0},
    {0x1d1bd,3,0x1d1b9,0x1d165,0x1d16e},{0x1d1be,3,0x1d1ba,0x1d165,0x1d16e},{0x1d1bf,3,0x1d1b9,0x1d165,0x1d16f},{0x1d1c0,3,0x1d1ba,0x1d165,0x1d16f},
};
static const uint32_t mhe__wp_ccc[83][2] = {   /* code point, combining class: marks strip_accents keeps */
    {0x8d4,230},{0x8d5,230},{0x8d6,230},{0x8d7,230},{0x8d8,230},{0x8d9,230},
    {0x8da,230},{0x8db,230},{0x8dc,230},{0x8dd,230},{0x8de,230},{0x8df,230},
    {0x8e0,230},{0x8e1,230},{0x1b44,9},{0x1baa,9},{0x1bf2,9},{0x1bf3,9},
    {0x1dfb,230},{0x302e,224},{0x302f,224},{0xa953,9},{0xa9c0,9},{0x111c0,9},
    {0x11235,9},{0x1134d,9},{0x11442,9},{0x11446,7},{0x116b6,9},{0x11c3f,9},
    {0x1d165,216},{0x1d166,216},{0x1d16d,226},{0x1d16e,216},{0x1d16f,216},{0x1d170,216},
    {0x1d171,216},{0x1d172,216},{0x1e000,230},{0x1e001,230},{0x1e002,230},{0x1e003,230},
    {0x1e004,230},{0x1e005,230},{0x1e006,230},{0x1e008,230},{0x1e009,230},{0x1e00a,230},
    {0x1e00b,230},{0x1e00c,230},{0x1e00d,230},{0x1e00e,230},{0x1e00f,230},{0x1e010,230},
    {0x1e011,230},{0x1e012,230},{0x1e013,230},{0x1e014,230},{0x1e015,230},{0x1e016,230},
    {0x1e017,230},{0x1e018,230},{0x1e01b,230},{0x1e01c,230},{0x1e01d,230},{0x1e01e,230},
    {0x1e01f,230},{0x1e020,230},{0x1e021,230},{0x1e023,230},{0x1e024,230},{0x1e026,230},
    {0x1e027,230},{0x1e028,230},{0x1e029,230},{0x1e02a,230},{0x1e944,230},{0x1e945,230},
    {0x1e946,230},{0x1e947,230},{0x1e948,230},{0x1e949,230},{0x1e94a,7},
};
/* wordpiece-tables:end */
#define MHE__WP_CONTROL 1u
#define MHE__WP_SPACE 2u
#define MHE__WP_PUNCT 4u
#define MHE__WP_MARK 8u
#define MHE__WP_CJK 16u
#define MHE__WP_CCC 32u   /* a combining class other than 0 */

/* the code point at p[i] (its length in *k); a byte that does not start
   well-formed UTF-8 is U+FFFD of length 1 */
static uint32_t mhe__utf8_get(const unsigned char *p, size_t n, size_t i, size_t *k) {
    unsigned c = p[i];
    if (c < 0x80) { *k = 1; return c; }
    if (!(*k = mhe__utf8_seq(p + i, n - i))) { *k = 1; return 0xFFFD; }
    return *k == 2 ? (c & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu)
         : *k == 3 ? (c & 0x0Fu) << 12 | (p[i + 1] & 0x3Fu) << 6 | (p[i + 2] & 0x3Fu)
         : (c & 0x07u) << 18 | (p[i + 1] & 0x3Fu) << 12 | (p[i + 2] & 0x3Fu) << 6 | (p[i + 3] & 0x3Fu);
}

static unsigned mhe__wp_flags(uint32_t cp) {
    size_t lo = 0, hi = sizeof mhe__wp_runs / sizeof mhe__wp_runs[0];
    if (cp > 0x10FFFF) return MHE__WP_CONTROL;
    while (hi - lo > 1) {   /* the last run that starts at or before cp */
        size_t mid = (lo + hi) / 2;
        if ((mhe__wp_runs[mid] >> 6) <= cp) lo = mid; else hi = mid;
    }
    return mhe__wp_runs[lo] & 63u;
}

/* the combining class of a mark that strip_accents keeps (0 for any other) */
static unsigned mhe__wp_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof mhe__wp_ccc / sizeof mhe__wp_ccc[0];
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (mhe__wp_ccc[mid][0] <= cp) lo = mid; else hi = mid;
    }
    return mhe__wp_ccc[lo][0] == cp ? mhe__wp_ccc[lo][1] : 0;
}

/* NFD's canonical ordering (Unicode sec. 3.11) of the last character,
   out[at..q), among the marks kept since out[run] (a stable insertion) */
static void mhe__wp_reorder(unsigned char *out, size_t run, size_t at, size_t q, unsigned cls) {
    unsigned char tmp[4];
    size_t to = at, k = q - at;
    while (to > run) {   /* step back over kept marks of a higher class */
        size_t prev = to - 1, c;
        while (prev > run && (out[prev] & 0xC0) == 0x80) prev--;
        if (mhe__wp_class(mhe__utf8_get(out, q, prev, &c)) <= cls) break;
        to = prev;
    }
    if (to == at) return;
    memcpy(tmp, out + at, k);
    memmove(out + to + k, out + to, at - to);
    memcpy(out + to, tmp, k);
}

static uint32_t mhe__wp_lowercase(uint32_t cp) {
    size_t lo = 0, hi = sizeof mhe__wp_lower / sizeof mhe__wp_lower[0];
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    if (cp < (uint32_t)mhe__wp_lower[0][0]) return cp;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)mhe__wp_lower[mid][0] <= cp) lo = mid; else hi = mid;
    }
    if (cp <= (uint32_t)mhe__wp_lower[lo][1] && (cp - (uint32_t)mhe__wp_lower[lo][0]) % (uint32_t)mhe__wp_lower[lo][2] == 0)
        return (uint32_t)((int32_t)cp + mhe__wp_lower[lo][3]);
    return cp;
}

/* cp's canonical decomposition without its nonspacing marks into out[0..3);
   returns how many (cp itself when it has none) */
static int mhe__wp_strip(uint32_t cp, uint32_t out[3]) {
    size_t lo = 0, hi = sizeof mhe__wp_nfd1 / sizeof mhe__wp_nfd1[0];
    int k;
    if (cp >= 0xAC00 && cp <= 0xD7A3) {   /* Hangul syllable: L V (T), Unicode sec. 3.12 */
        uint32_t s = cp - 0xAC00, t = s % 28;
        out[0] = 0x1100 + s / 588; out[1] = 0x1161 + (s % 588) / 28;
        if (t) out[2] = 0x11A7 + t;
        return t ? 3 : 2;
    }
    if (cp >= mhe__wp_nfd1[0][0]) {
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (mhe__wp_nfd1[mid][0] <= cp) lo = mid; else hi = mid;
        }
        if (cp <= mhe__wp_nfd1[lo][1]) { out[0] = mhe__wp_nfd1[lo][2] + (cp - mhe__wp_nfd1[lo][0]) * mhe__wp_nfd1[lo][3]; return 1; }
    }
    lo = 0; hi = sizeof mhe__wp_nfdn / sizeof mhe__wp_nfdn[0];
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (mhe__wp_nfdn[mid][0] <= cp) lo = mid; else hi = mid;
    }
    if (mhe__wp_nfdn[lo][0] == cp) {
        for (k = 0; k < (int)mhe__wp_nfdn[lo][1]; k++) out[k] = mhe__wp_nfdn[lo][2 + k];
        return k;
    }
    if (mhe__wp_flags(cp) & MHE__WP_MARK) return 0;
    out[0] = cp;
    return 1;
}

/* BertNormalizer on p[0..len) into out (room for MHE__WP_GROW(len) bytes:
   a character grows at most threefold, a Hangul syllable with a final
   consonant); returns the length */
static size_t mhe__wp_normalize(int flags, const unsigned char *p, size_t len, unsigned char *out) {
    size_t i = 0, q = 0, k, run = 0;   /* out[run..q): the combining marks since the last character of class 0 */
    while (i < len) {
        uint32_t cp = mhe__utf8_get(p, len, i, &k), part[3];
        unsigned f = mhe__wp_flags(cp);
        int n = 1, j, pad;
        i += k;
        if (flags & MHE_NORM_CLEAN) {
            if (cp == 0 || cp == 0xFFFD || (f & MHE__WP_CONTROL)) continue;
            if (f & MHE__WP_SPACE) cp = ' ';
        }
        pad = (flags & MHE_NORM_CHINESE) && (f & MHE__WP_CJK);
        if (pad) { out[q++] = ' '; run = q; }
        if (flags & MHE_NORM_STRIP_ACCENTS) n = mhe__wp_strip(cp, part); else part[0] = cp;
        if (!n && !(f & MHE__WP_CCC)) run = q;   /* a dropped mark of class 0 ends a run, as NFD sees it */
        for (j = 0; j < n; j++) {
            uint32_t c = part[j];
            size_t at = q;
            unsigned cls;
            if ((flags & MHE_NORM_LOWERCASE) && c == 0x130) { out[q++] = 'i'; q += mhe__utf8_put(0x307, out + q); run = q; continue; }
            q += mhe__utf8_put(flags & MHE_NORM_LOWERCASE ? mhe__wp_lowercase(c) : c, out + q);
            cls = (flags & MHE_NORM_STRIP_ACCENTS) && (mhe__wp_flags(c) & MHE__WP_CCC) ? mhe__wp_class(c) : 0;
            if (cls) mhe__wp_reorder(out, run, at, q, cls); else run = q;
        }
        if (pad) { out[q++] = ' '; run = q; }
    }
    return q;
}

/* one word w[0..k) (valid UTF-8) -> its pieces, or unk */
static mhe_status mhe__wp_word(const mhe_bpe *b, unsigned char *tmp, const unsigned char *w, size_t k, int *ids, size_t cap,
                               size_t *n, char *err) {
    size_t start = 0, n0 = *n, chars = 0, i, pl = strlen(b->subword_prefix);
    for (i = 0; i < k; i++) chars += (w[i] & 0xC0) != 0x80;
    if (chars <= (size_t)b->max_word_chars)
        while (start < k) {
            size_t end = k;
            int id = -1;
            while (start < end) {
                if (start) { memcpy(tmp, b->subword_prefix, pl); memcpy(tmp + pl, w + start, end - start); id = mhe_bpe_find(b, tmp, pl + end - start); }
                else id = mhe_bpe_find(b, w, end);
                if (id >= 0 && (b->added[id] & 5) != MHE_BPE_ADDED) break;   /* the vocabulary's, not an added token's */
                id = -1;
                do end--; while (end > start && (w[end] & 0xC0) == 0x80);
            }
            if (id < 0) break;
            if (*n >= cap) return mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap);
            ids[(*n)++] = id;
            start = end;
        }
    if (start < k) {   /* a character no piece covers, or too long: the whole word is unk */
        *n = n0;
        if (*n >= cap) return mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap);
        ids[(*n)++] = b->unk;
    }
    return MHE_OK;
}

/* BertPreTokenizer on normalised text s[0..k): words between white space,
   each punctuation character a word of its own */
static mhe_status mhe__wp_segment(const mhe_bpe *b, unsigned char *tmp, const unsigned char *s, size_t k, int *ids, size_t cap,
                                  size_t *n, char *err) {
    size_t i = 0, word = 0, c;
    mhe_status st = MHE_OK;
    while (i < k && st == MHE_OK) {
        unsigned f = mhe__wp_flags(mhe__utf8_get(s, k, i, &c));
        if (f & (MHE__WP_SPACE | MHE__WP_PUNCT)) {
            if (i > word) st = mhe__wp_word(b, tmp, s + word, i - word, ids, cap, n, err);
            if (st == MHE_OK && (f & MHE__WP_PUNCT)) st = mhe__wp_word(b, tmp, s + i, c, ids, cap, n, err);
            word = i + c;
        }
        i += c;
    }
    if (st == MHE_OK && k > word) st = mhe__wp_word(b, tmp, s + word, k - word, ids, cap, n, err);
    return st;
}

/* the pieces of seg[0..k) (one segment between added tokens) */
static mhe_status mhe__bpe_segment(const mhe_bpe *b, mhe__bpe_ws *w, const unsigned char *seg, size_t k, int *ids, size_t cap,
                                   size_t *n, char *err) {
    size_t pos = 0, e;
    if (!k) return MHE_OK;
    if (b->model == MHE_TOK_WORDPIECE) return mhe__wp_segment(b, w->word, seg, k, ids, cap, n, err);
    if (b->prefix_space && seg[0] != ' ' && seg != w->cont) {
        if (!mhe__bpe_ws_need(w, k + 1)) return mhe__fail(err, MHE_ERR_NOMEM, "bpe encode: out of memory");
        w->copy[0] = ' ';
        memcpy(w->copy + 1, seg, k);
        seg = w->copy; k++;
    }
    while (pos < k) {
        e = b->split == MHE_BPE_SPLIT_GPT2 ? mhe_bpe_split_next((const char *)seg, k, pos) : k;
        if (e - pos > 0xFFFFFFF0u) return mhe__fail(err, MHE_ERR_ARG, "bpe encode: a piece of %zu bytes (at most 2^32 - 16)", e - pos);
        if (!mhe__bpe_ws_need(w, e - pos)) return mhe__fail(err, MHE_ERR_NOMEM, "bpe encode: out of memory");
        if (cap - *n < e - pos) {   /* a piece gives at most one id per byte */
            int tmp[64];
            size_t m;
            if (e - pos > 64) return mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap);
            m = mhe__bpe_piece(b, w, seg + pos, e - pos, tmp);
            if (m > cap - *n) return mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap);
            memcpy(ids + *n, tmp, m * sizeof(int));
            *n += m;
        } else *n += mhe__bpe_piece(b, w, seg + pos, e - pos, ids + *n);
        pos = e;
    }
    return MHE_OK;
}

static mhe_status mhe__bpe_late(const mhe_bpe *b, mhe__bpe_ws *w, const unsigned char *p, size_t len,
                                const unsigned char first[2][32], int *ids, size_t cap, size_t *n, char *err);

/* text between added tokens of the passes before `late`: cut at the added
   tokens of this pass (leftmost, then longest; first[] has their first
   bytes), the rest to the next pass or the pieces */
static mhe_status mhe__bpe_added(const mhe_bpe *b, mhe__bpe_ws *w, const unsigned char *p, size_t len, int late,
                                 const unsigned char first[2][32], int *ids, size_t cap, size_t *n, char *err) {
    size_t i = 0, seg = 0;
    mhe_status st = MHE_OK;
    int a;
    while (i < len && st == MHE_OK) {
        int hit = -1;
        if (first[late][p[i] >> 3] >> (p[i] & 7) & 1)
            for (a = 0; a < b->n_added; a++) {
                int id = b->added_ids[a];
                size_t l = b->start[id + 1] - b->start[id];
                if (((b->added[id] & MHE_BPE_ADDED_LATE) != 0) == late && l <= len - i && memcmp(p + i, b->bytes + b->start[id], l) == 0) { hit = id; break; }
            }
        if (hit < 0) { i++; continue; }
        st = late ? mhe__bpe_segment(b, w, p + seg, i - seg, ids, cap, n, err) : mhe__bpe_late(b, w, p + seg, i - seg, first, ids, cap, n, err);
        if (st != MHE_OK) break;
        if (*n >= cap) { st = mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap); break; }
        ids[(*n)++] = hit;
        i += b->start[hit + 1] - b->start[hit];
        seg = i;
    }
    if (st == MHE_OK)
        st = late ? mhe__bpe_segment(b, w, p + seg, len - seg, ids, cap, n, err) : mhe__bpe_late(b, w, p + seg, len - seg, first, ids, cap, n, err);
    return st;
}

/* the second pass over text between the first pass's added tokens; for
   WordPiece on the normalised text, as tokenizers matches "normalized"
   added tokens */
static mhe_status mhe__bpe_late(const mhe_bpe *b, mhe__bpe_ws *w, const unsigned char *p, size_t len,
                                const unsigned char first[2][32], int *ids, size_t cap, size_t *n, char *err) {
    if (b->model == MHE_TOK_WORDPIECE) {
        len = mhe__wp_normalize(b->normalize, p, len, w->norm);
        p = w->norm;
    }
    return mhe__bpe_added(b, w, p, len, 1, first, ids, cap, n, err);
}

/* mhe_bpe_encode; cont: the text continues a segment of a longer one (no prefix_space at its start) */
static mhe_status mhe__bpe_encode(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap, size_t *n, void *work,
                                  int cont, char *err) {
    mhe__bpe_ws w;
    mhe_status st;
    unsigned char first[2][32];
    int a;
    if (n) *n = 0;
    if (!b || !n || (!text && len) || (!ids && cap)) return mhe__fail(err, MHE_ERR_ARG, "bpe encode: NULL argument");
    if (!b->n_tokens) return mhe__fail(err, MHE_ERR_ARG, "bpe encode: the tokenizer is empty");
    memset(&w, 0, sizeof w);
    w.alloc_ctx = b->alloc_ctx;
    w.cont = cont ? (const unsigned char *)text : NULL;
    if (work) mhe__bpe_ws_carve(&w, work, len + 1);
    if (b->model == MHE_TOK_WORDPIECE) {   /* the normalised text and a prefixed piece: 6 len + 24 bytes, inside the work */
        if (!mhe__bpe_ws_need(&w, len + 1)) return mhe__fail(err, MHE_ERR_NOMEM, "bpe encode: out of memory");
        w.norm = (unsigned char *)w.heap;
        w.word = w.norm + MHE__WP_GROW(len);
    }
    memset(first, 0, sizeof first);
    for (a = 0; a < b->n_added; a++) {
        int id = b->added_ids[a];
        unsigned c = b->bytes[b->start[id]];
        first[(b->added[id] & MHE_BPE_ADDED_LATE) != 0][c >> 3] |= (unsigned char)(1u << (c & 7));
    }
    st = mhe__bpe_added(b, &w, (const unsigned char *)text, len, 0, (const unsigned char (*)[32])first, ids, cap, n, err);
    MHE_FREE(b->alloc_ctx, w.own);
    return st;
}

MHEDEF mhe_status mhe_bpe_encode(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap, size_t *n, void *work,
                                 char *err) {
    return mhe__bpe_encode(b, text, len, ids, cap, n, work, 0, err);
}

/* Where a text may be cut without changing its ids: before the last
   character of a run of white space that another character follows. GPT-2's
   pattern then ends a piece there on both sides: the run less its last
   character is one piece (\s+(?!\S)) whether the text goes on or ends, and
   the last character starts the next piece in both. That character must be
   ASCII and in no added token (ok[x] & 1), so no added token spans the cut;
   the one after the run must start none (ok[x] & 2), or the run would end a
   segment in the whole text and not in the piece before the cut; the one
   before the cut must end none (ok[x] & 4), so that the piece after it
   continues a segment (prefix_space adds no ' ' there). WordPiece's
   normaliser keeps the cut's character white space, where its pre-tokenizer
   splits. Returns a cut in [from, to) (runs with a newline first), 0 for
   none. */
static size_t mhe__bpe_cut(const unsigned char *p, size_t len, size_t from, size_t to, const unsigned char ok[256]) {
    int pass;
    for (pass = 0; pass < 2; pass++) {
        size_t i = from;
        while (i < to) {
            size_t e, last, k;
            int cls;
            const unsigned char *q = pass ? NULL : (const unsigned char *)memchr(p + i, '\n', to - i);
            if (!pass) { if (!q) break; i = (size_t)(q - p); }
            else if (!((p[i] >= 9 && p[i] <= 13) || p[i] == ' ')) { i++; continue; }
            for (e = last = i; e < len; e += k) {   /* to the end of the run */
                k = mhe__bpe_char(p, len, e, &cls);
                if (cls != MHE_UC_SPACE) break;
                last = e;
            }
            if (e < len && last > from && last < to && p[last] < 0x80 && (ok[p[last]] & 1) && !(ok[p[e]] & 2) && !(ok[p[last - 1]] & 4))
                return last;
            i = e > i ? e : i + 1;
        }
    }
    return 0;
}

/* at most `pieces` pieces of at least `chunk` bytes on `threads` threads */
static mhe_status mhe__bpe_encode_par(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap, size_t *n, int threads,
                                      int pieces, size_t chunk, char *err) {
    const unsigned char *p = (const unsigned char *)text;
    unsigned char ok[256];
    size_t *cut, *got, k, out = 0, want;
    int **buf, *st, c, n_chunks, direct;
    char *msg;
    mhe_status res = MHE_OK;
    (void)threads;   /* unused without OpenMP */
    if (n) *n = 0;
    want = len / (chunk ? chunk : 1);
    if (want > (size_t)(pieces > 0 ? pieces : 1)) want = (size_t)(pieces > 0 ? pieces : 1);
    if (!b || !n || (!text && len) || (!ids && cap) || want < 2 || !b->n_tokens || b->split == MHE_BPE_SPLIT_NONE)
        return mhe__bpe_encode(b, text, len, ids, cap, n, NULL, 0, err);
    for (k = 0; k < 256; k++) ok[k] = (k >= 9 && k <= 13) || k == ' ';
    for (c = 0; c < b->n_added; c++) {   /* 1: in no added token; 2: the first byte of one; 4: the last byte of one */
        int id = b->added_ids[c];
        ok[b->bytes[b->start[id]]] |= 2;
        ok[b->bytes[b->start[id + 1] - 1]] |= 4;
        for (k = b->start[id]; k < b->start[id + 1]; k++) {
            unsigned char x = b->bytes[k];
            ok[x] &= 6;
            if (b->model == MHE_TOK_WORDPIECE && ((x >= 9 && x <= 13) || x == ' '))   /* white space normalises to ' ' */
                for (x = 9; x <= ' '; x++) ok[x] &= 6;
        }
    }
    cut = (size_t *)MHE_MALLOC(b->alloc_ctx, (want + 1) * (2 * sizeof(size_t) + sizeof(int *) + sizeof(int) + MHE_ERR_LEN));
    if (!cut) return mhe__fail(err, MHE_ERR_NOMEM, "bpe encode: out of memory");
    got = cut + want + 1;
    buf = (int **)(void *)(got + want + 1);
    st = (int *)(void *)(buf + want + 1);
    msg = (char *)(st + want + 1);
    cut[0] = 0;
    for (n_chunks = 1, k = 1; k < want; k++) {   /* a cut near each k-th of the text, else further on */
        size_t from = cut[n_chunks - 1] > k * len / want ? cut[n_chunks - 1] : k * len / want, at;
        if (!(at = mhe__bpe_cut(p, len, from, (k + 1) * len / want, ok)) && !(at = mhe__bpe_cut(p, len, from, len, ok))) break;
        cut[n_chunks++] = at;
    }
    cut[n_chunks] = len;
    /* each piece's ids in place where they fit (ids <= bytes), else in a buffer of its own */
    direct = !(b->model == MHE_TOK_BPE && b->prefix_space) && cap >= len;
    MHE__OMP(omp parallel for schedule(dynamic, 1) num_threads(threads > 0 ? threads : 1) if (n_chunks > 1 && threads > 1))
    for (c = 0; c < n_chunks; c++) {
        size_t a = cut[c], l = cut[c + 1] - a, m = mhe_bpe_max_ids(b, l);
        int *dst = direct ? ids + a : (int *)MHE_MALLOC(b->alloc_ctx, (m ? m : 1) * sizeof(int));
        buf[c] = direct ? NULL : dst;
        got[c] = 0;
        msg[c * MHE_ERR_LEN] = 0;
        st[c] = dst ? (int)mhe__bpe_encode(b, text + a, l, dst, m, &got[c], NULL, c > 0, msg + c * MHE_ERR_LEN)
                    : (int)mhe__fail(msg + c * MHE_ERR_LEN, MHE_ERR_NOMEM, "bpe encode: out of memory");
    }
    for (c = 0; c < n_chunks; c++) {   /* in text order: the first failure is the one reported */
        if (res == MHE_OK && st[c] != MHE_OK) { res = (mhe_status)st[c]; if (err) memcpy(err, msg + c * MHE_ERR_LEN, MHE_ERR_LEN); }
        if (res == MHE_OK && got[c] > cap - out) res = mhe__fail(err, MHE_ERR_SHAPE, "bpe encode: more than %zu ids", cap);
        if (res == MHE_OK) { memmove(ids + out, direct ? ids + cut[c] : buf[c], got[c] * sizeof(int)); out += got[c]; }
        MHE_FREE(b->alloc_ctx, buf[c]);
    }
    MHE_FREE(b->alloc_ctx, cut);
    *n = res == MHE_OK ? out : 0;
    return res;
}

MHEDEF mhe_status mhe_bpe_encode_threads(const mhe_bpe *b, const char *text, size_t len, int *ids, size_t cap, size_t *n, int threads,
                                         char *err) {
    if (threads <= 0) threads = mhe__max_threads();
    return mhe__bpe_encode_par(b, text, len, ids, cap, n, threads, threads > 1 ? 4 * threads : 1, MHE__BPE_CHUNK, err);   /* 4 a thread: balance */
}

/* tokenizers' WordPiece decoder cleanup, in its order, on one token's text
   t[0..k) (each replacement shortens or keeps it); returns the new length */
static size_t mhe__wp_cleanup(char *t, size_t k) {
    static const char *const from[11] = { " .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're" };
    static const char *const to[11] = { ".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re" };
    int r;
    for (r = 0; r < 11; r++) {
        size_t lf = strlen(from[r]), lt = strlen(to[r]), i = 0, q = 0;
        while (i < k) {
            if (i + lf <= k && memcmp(t + i, from[r], lf) == 0) { memcpy(t + q, to[r], lt); q += lt; i += lf; }
            else t[q++] = t[i++];
        }
        k = q;
    }
    return k;
}

/* WordPiece: the first token as it is; a later one after a space, or
   without its subword prefix and the space (tokenizers' decoder) */
static mhe_status mhe__wp_decode(const mhe_bpe *b, const int *ids, size_t n, char *out, size_t cap, size_t *len, char *err) {
    size_t i, q = 0, pl = strlen(b->subword_prefix);
    char *t;
    if (!(t = (char *)MHE_MALLOC(b->alloc_ctx, b->max_token_bytes + 2))) return mhe__fail(err, MHE_ERR_NOMEM, "bpe decode: out of memory");
    for (i = 0; i < n; i++) {
        const unsigned char *s = b->bytes + b->start[ids[i]];
        size_t l = b->start[ids[i] + 1] - b->start[ids[i]], m = 0;
        if (i && pl && l >= pl && memcmp(s, b->subword_prefix, pl) == 0) { s += pl; l -= pl; }
        else if (i) t[m++] = ' ';
        memcpy(t + m, s, l);
        m += l;
        if (b->decode_cleanup) m = mhe__wp_cleanup(t, m);
        if (out && q < cap) memcpy(out + q, t, cap - q < m ? cap - q : m);
        q += m;
    }
    MHE_FREE(b->alloc_ctx, t);
    *len = q;
    return MHE_OK;
}

MHEDEF mhe_status mhe_bpe_decode(const mhe_bpe *b, const int *ids, size_t n, char *out, size_t cap, size_t *len, char *err) {
    size_t i, q = 0;
    if (len) *len = 0;
    if (!b || !len || (!ids && n)) return mhe__fail(err, MHE_ERR_ARG, "bpe decode: NULL argument");
    for (i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= b->n_tokens)
            return mhe__fail(err, MHE_ERR_DATA, "bpe decode: id %d at position %zu is not a token (0..%d)", ids[i], i, b->n_tokens - 1);
    if (b->model == MHE_TOK_WORDPIECE) return mhe__wp_decode(b, ids, n, out, cap, len, err);
    for (i = 0; i < n; i++) {
        size_t k, c;
        if (ids[i] < 0 || ids[i] >= b->n_tokens)
            return mhe__fail(err, MHE_ERR_DATA, "bpe decode: id %d at position %zu is not a token (0..%d)", ids[i], i, b->n_tokens - 1);
        k = b->start[ids[i] + 1] - b->start[ids[i]];
        if (out && q < cap) { c = cap - q < k ? cap - q : k; memcpy(out + q, b->bytes + b->start[ids[i]], c); }
        q += k;
    }
    *len = q;
    return MHE_OK;
}

/* ---- training ---- */

typedef struct mhe__bpe_pairs {   /* open addressing: pair -> count (0: gone) */
    uint64_t *key;
    int64_t *count;
    size_t n_slots, used;
} mhe__bpe_pairs;

static int mhe__bpe_pairs_grow(mhe__bpe_pairs *t, void *ctx) {
    mhe__bpe_pairs u;
    size_t i, s, mask;
    u.n_slots = t->n_slots ? 2 * t->n_slots : 1024;
    u.used = 0;
    u.key = (uint64_t *)MHE_MALLOC(ctx, u.n_slots * sizeof(uint64_t));
    u.count = (int64_t *)MHE_MALLOC(ctx, u.n_slots * sizeof(int64_t));
    if (!u.key || !u.count) { MHE_FREE(ctx, u.key); MHE_FREE(ctx, u.count); return 0; }
    for (i = 0; i < u.n_slots; i++) u.key[i] = UINT64_MAX;
    mask = u.n_slots - 1;
    for (i = 0; i < t->n_slots; i++) {
        if (t->key[i] == UINT64_MAX || t->count[i] <= 0) continue;   /* pairs gone to 0 are dropped here */
        for (s = (size_t)mhe__bpe_mix(t->key[i]) & mask; u.key[s] != UINT64_MAX; s = (s + 1) & mask) {}
        u.key[s] = t->key[i]; u.count[s] = t->count[i]; u.used++;
    }
    MHE_FREE(ctx, t->key); MHE_FREE(ctx, t->count);
    *t = u;
    return 1;
}

static int mhe__bpe_pairs_add(mhe__bpe_pairs *t, uint64_t key, int64_t d, void *ctx) {
    size_t s, mask;
    if (4 * (t->used + 1) > 3 * t->n_slots && !mhe__bpe_pairs_grow(t, ctx)) return 0;
    mask = t->n_slots - 1;
    for (s = (size_t)mhe__bpe_mix(key) & mask; t->key[s] != UINT64_MAX; s = (s + 1) & mask)
        if (t->key[s] == key) { t->count[s] += d; return 1; }
    t->key[s] = key; t->count[s] = d; t->used++;
    return 1;
}

/* the distinct pieces of a text: open addressing over (offset, length) */
typedef struct mhe__bpe_words {
    size_t *off, *len;
    int64_t *count;
    size_t *slots;              /* index + 1, 0 empty */
    size_t n, cap, n_slots;
} mhe__bpe_words;

static int mhe__bpe_words_add(mhe__bpe_words *wd, const unsigned char *text, size_t off, size_t len, void *ctx) {
    size_t s, mask, i;
    if (2 * (wd->n + 1) > wd->n_slots) {
        size_t ns = wd->n_slots ? 2 * wd->n_slots : 4096, *sl = (size_t *)MHE_MALLOC(ctx, ns * sizeof(size_t));
        if (!sl) return 0;
        memset(sl, 0, ns * sizeof(size_t));
        for (i = 0; i < wd->n; i++) {
            for (s = (size_t)mhe__bpe_fnv(text + wd->off[i], wd->len[i]) & (ns - 1); sl[s]; s = (s + 1) & (ns - 1)) {}
            sl[s] = i + 1;
        }
        MHE_FREE(ctx, wd->slots);
        wd->slots = sl; wd->n_slots = ns;
    }
    mask = wd->n_slots - 1;
    for (s = (size_t)mhe__bpe_fnv(text + off, len) & mask; wd->slots[s]; s = (s + 1) & mask) {
        i = wd->slots[s] - 1;
        if (wd->len[i] == len && memcmp(text + wd->off[i], text + off, len) == 0) { wd->count[i]++; return 1; }
    }
    if (wd->n == wd->cap) {
        size_t nc = wd->cap ? 2 * wd->cap : 1024;
        size_t *o = (size_t *)MHE_REALLOC(ctx, wd->off, wd->cap * sizeof(size_t), nc * sizeof(size_t));
        size_t *l = o ? (size_t *)MHE_REALLOC(ctx, wd->len, wd->cap * sizeof(size_t), nc * sizeof(size_t)) : NULL;
        int64_t *c;
        if (o) wd->off = o;
        if (l) wd->len = l;
        if (!o || !l) return 0;
        c = (int64_t *)MHE_REALLOC(ctx, wd->count, wd->cap * sizeof(int64_t), nc * sizeof(int64_t));
        if (!c) return 0;
        wd->count = c; wd->cap = nc;
    }
    wd->off[wd->n] = off; wd->len[wd->n] = len; wd->count[wd->n] = 1; wd->n++;
    wd->slots[s] = wd->n;
    return 1;
}

MHEDEF mhe_status mhe_bpe_train(mhe_bpe *b, const char *text, size_t len, int vocab_size, int split, const char *const *added,
                                int n_added) {
    void *ctx;
    const unsigned char *p = (const unsigned char *)text;
    mhe__bpe_words wd;
    mhe__bpe_pairs pr;
    int32_t *sym = NULL, *mg = NULL;
    size_t *ws = NULL, *wl = NULL, n_sym = 0, i, j, pos, seg, tb_len = 0, tb_cap = 0;
    size_t *tl = NULL, *to = NULL; /* token lengths and offsets in tb during training */
    unsigned char *tb = NULL;      /* token bytes during training */
    int n_merges = 0, max_merges, a, t, ok = 1;
    mhe_status st = MHE_OK;
    if (!b) return MHE_ERR_ARG;
    ctx = b->alloc_ctx;
    mhe_bpe_free(b);
    if ((!text && len) || n_added < 0 || (n_added && !added)) return mhe__fail(b->err, MHE_ERR_ARG, "bpe train: NULL argument");
    if (split != MHE_BPE_SPLIT_NONE && split != MHE_BPE_SPLIT_GPT2) return mhe__fail(b->err, MHE_ERR_ARG, "bpe train: split %d is neither none nor gpt2", split);
    if (vocab_size < 256 + n_added || vocab_size > MHE_BPE_MAX_TOKENS)
        return mhe__fail(b->err, MHE_ERR_ARG, "bpe train: vocab size %d outside %d..%d (256 bytes + %d added tokens)", vocab_size,
                         256 + n_added, MHE_BPE_MAX_TOKENS, n_added);
    for (a = 0; a < n_added; a++) {
        if (!added[a] || !added[a][0]) return mhe__fail(b->err, MHE_ERR_ARG, "bpe train: added token %d is empty", a);
        for (t = 0; t < a; t++)
            if (strcmp(added[a], added[t]) == 0) return mhe__fail(b->err, MHE_ERR_ARG, "bpe train: added token %d repeats added token %d", a, t);
    }
    max_merges = vocab_size - 256 - n_added;
    memset(&wd, 0, sizeof wd);
    memset(&pr, 0, sizeof pr);
    /* the pieces, between added tokens */
    for (pos = 0, seg = 0; pos <= len && ok; ) {
        size_t hit = 0, e;
        if (pos < len)
            for (a = 0; a < n_added; a++) {
                size_t l = strlen(added[a]);
                if (l <= len - pos && memcmp(p + pos, added[a], l) == 0 && l > hit) hit = l;
            }
        if (pos < len && !hit) { pos++; continue; }
        for (j = seg; j < pos && ok; j = e) {
            e = split == MHE_BPE_SPLIT_GPT2 ? mhe_bpe_split_next(text, pos, j) : pos;
            if (e - j >= 2) ok = mhe__bpe_words_add(&wd, p, j, e - j, ctx);
        }
        if (pos == len) break;
        pos += hit; seg = pos;
    }
    if (!ok) { st = mhe__fail(b->err, MHE_ERR_NOMEM, "bpe train: out of memory"); goto done; }
    for (i = 0; i < wd.n; i++) n_sym += wd.len[i];
    sym = (int32_t *)MHE_MALLOC(ctx, mhe__mul_size(n_sym + 1, sizeof(int32_t), &ok));
    ws = (size_t *)MHE_MALLOC(ctx, mhe__mul_size(wd.n + 1, sizeof(size_t), &ok));
    wl = (size_t *)MHE_MALLOC(ctx, mhe__mul_size(wd.n + 1, sizeof(size_t), &ok));
    mg = (int32_t *)MHE_MALLOC(ctx, mhe__mul_size((size_t)max_merges * 3 + 1, sizeof(int32_t), &ok));
    tl = (size_t *)MHE_MALLOC(ctx, mhe__mul_size((size_t)vocab_size + 1, sizeof(size_t), &ok));
    to = (size_t *)MHE_MALLOC(ctx, mhe__mul_size((size_t)vocab_size + 1, sizeof(size_t), &ok));
    tb_cap = 4096;
    tb = (unsigned char *)MHE_MALLOC(ctx, tb_cap);
    if (!ok || !sym || !ws || !wl || !mg || !tl || !to || !tb) { st = mhe__fail(b->err, MHE_ERR_NOMEM, "bpe train: out of memory"); goto done; }
    for (t = 0; t < 256; t++) { tb[t] = (unsigned char)t; tl[t] = 1; to[t] = (size_t)t; }
    tb_len = 256;
    for (i = 0, j = 0; i < wd.n; i++) {
        size_t k;
        ws[i] = j; wl[i] = wd.len[i];
        for (k = 0; k < wd.len[i]; k++) sym[j++] = p[wd.off[i] + k];
        for (k = 0; k + 1 < wd.len[i] && ok; k++) ok = mhe__bpe_pairs_add(&pr, MHE__BPE_PAIR(sym[ws[i] + k], sym[ws[i] + k + 1]), wd.count[i], ctx);
    }
    if (!ok) { st = mhe__fail(b->err, MHE_ERR_NOMEM, "bpe train: out of memory"); goto done; }
    while (n_merges < max_merges) {
        uint64_t best = UINT64_MAX;
        int64_t bc = 0;
        int32_t L, R, nt = 256 + n_merges;
        size_t s;
        for (s = 0; s < pr.n_slots; s++)   /* highest count, then lowest (left, right) */
            if (pr.key[s] != UINT64_MAX && pr.count[s] > 0 && (pr.count[s] > bc || (pr.count[s] == bc && pr.key[s] < best))) {
                bc = pr.count[s]; best = pr.key[s];
            }
        if (bc <= 0) break;
        L = (int32_t)(best >> 32); R = (int32_t)(uint32_t)best;
        mg[3 * n_merges] = L; mg[3 * n_merges + 1] = R; mg[3 * n_merges + 2] = nt;
        if (tb_len + tl[L] + tl[R] > tb_cap) {
            size_t nc = 2 * (tb_len + tl[L] + tl[R]);
            unsigned char *q = (unsigned char *)MHE_REALLOC(ctx, tb, tb_cap, nc);
            if (!q) { st = mhe__fail(b->err, MHE_ERR_NOMEM, "bpe train: out of memory"); goto done; }
            tb = q; tb_cap = nc;
        }
        memcpy(tb + tb_len, tb + to[L], tl[L]);
        memcpy(tb + tb_len + tl[L], tb + to[R], tl[R]);
        tl[nt] = tl[L] + tl[R]; to[nt] = tb_len;
        tb_len += tl[nt];
        n_merges++;
        for (i = 0; i < wd.n && ok; i++) {   /* merge every occurrence, left to right, and update the counts */
            int32_t *w = sym + ws[i];
            size_t k = 0, o = 0, n = wl[i];
            int64_t c = wd.count[i];
            if (n < 2) continue;
            while (k < n) {
                if (k + 1 < n && w[k] == L && w[k + 1] == R) {
                    if (o > 0) { ok &= mhe__bpe_pairs_add(&pr, MHE__BPE_PAIR(w[o - 1], L), -c, ctx); ok &= mhe__bpe_pairs_add(&pr, MHE__BPE_PAIR(w[o - 1], nt), c, ctx); }
                    if (k + 2 < n) { ok &= mhe__bpe_pairs_add(&pr, MHE__BPE_PAIR(R, w[k + 2]), -c, ctx); ok &= mhe__bpe_pairs_add(&pr, MHE__BPE_PAIR(nt, w[k + 2]), c, ctx); }
                    ok &= mhe__bpe_pairs_add(&pr, best, -c, ctx);
                    w[o++] = nt; k += 2;
                } else w[o++] = w[k++];
            }
            wl[i] = o;
        }
        if (!ok) { st = mhe__fail(b->err, MHE_ERR_NOMEM, "bpe train: out of memory"); goto done; }
    }
    /* the vocabulary: bytes, merges, added tokens */
    {
        size_t ab = 0;
        int nt = 256 + n_merges + n_added;
        for (a = 0; a < n_added; a++) ab += strlen(added[a]);
        if ((st = mhe__bpe_alloc(b, nt, tb_len + ab, n_merges, "bpe train")) != MHE_OK) goto done;
        memcpy(b->bytes, tb, tb_len);
        for (t = 0; t < 256 + n_merges; t++) b->start[t + 1] = b->start[t] + tl[t];
        for (a = 0; a < n_added; a++) {
            size_t l = strlen(added[a]);
            memcpy(b->bytes + b->start[t], added[a], l);
            b->start[t + 1] = b->start[t] + l;
            b->added[t++] = MHE_BPE_ADDED;
        }
        memcpy(b->merges, mg, (size_t)n_merges * 3 * sizeof(int32_t));
        b->n_tokens = nt; b->n_merges = n_merges; b->split = split;
        st = mhe__bpe_index(b, "bpe train");
    }
done:
    MHE_FREE(ctx, wd.off); MHE_FREE(ctx, wd.len); MHE_FREE(ctx, wd.count); MHE_FREE(ctx, wd.slots);
    MHE_FREE(ctx, pr.key); MHE_FREE(ctx, pr.count);
    MHE_FREE(ctx, sym); MHE_FREE(ctx, ws); MHE_FREE(ctx, wl); MHE_FREE(ctx, mg); MHE_FREE(ctx, tl); MHE_FREE(ctx, to); MHE_FREE(ctx, tb);
    if (st != MHE_OK) { char keep[MHE_ERR_LEN]; memcpy(keep, b->err, sizeof keep); mhe_bpe_free(b); memcpy(b->err, keep, sizeof keep); }
    return st;
}

/* ---- the text form ---- */

typedef struct mhe__bpe_out { char *buf; size_t cap, n; } mhe__bpe_out;
static void mhe__bpe_put(mhe__bpe_out *o, const char *s, size_t k) {
    if (o->buf && o->n < o->cap) memcpy(o->buf + o->n, s, o->cap - o->n < k ? o->cap - o->n : k);
    o->n += k;
}
static void mhe__bpe_putf(mhe__bpe_out *o, const char *fmt, long a, long b2, long c, int nargs) {
    char t[96];
    int k = nargs == 1 ? snprintf(t, sizeof t, fmt, a) : nargs == 2 ? snprintf(t, sizeof t, fmt, a, b2) : snprintf(t, sizeof t, fmt, a, b2, c);
    mhe__bpe_put(o, t, (size_t)k);
}

MHEDEF mhe_status mhe_bpe_save_mem(const mhe_bpe *b, char *buf, size_t cap, size_t *len) {
    static const char hex[] = "0123456789abcdef";
    mhe__bpe_out o;
    int i;
    if (len) *len = 0;
    if (!b || !len || !b->n_tokens) return MHE_ERR_ARG;
    o.buf = buf; o.cap = buf ? cap : 0; o.n = 0;
    if (b->model == MHE_TOK_WORDPIECE) {
        size_t k;
        mhe__bpe_put(&o, "mhe-wordpiece 1\n", 16);
        mhe__bpe_putf(&o, "normalize %ld\nmax_word_chars %ld\n", b->normalize, b->max_word_chars, 0, 2);
        mhe__bpe_put(&o, "prefix ", 7);
        for (k = 0; b->subword_prefix[k]; k++) {
            char h[2];
            h[0] = hex[(unsigned char)b->subword_prefix[k] >> 4]; h[1] = hex[(unsigned char)b->subword_prefix[k] & 15];
            mhe__bpe_put(&o, h, 2);
        }
        mhe__bpe_putf(&o, "\nunk %ld\ncls %ld\nsep %ld\n", b->unk, b->cls, b->sep, 3);
        mhe__bpe_putf(&o, "cleanup %ld\ntokens %ld\n", b->decode_cleanup, b->n_tokens, 0, 2);
    } else {
        mhe__bpe_put(&o, "mhe-bpe 1\n", 10);
        mhe__bpe_put(&o, b->split == MHE_BPE_SPLIT_GPT2 ? "split gpt2\n" : "split none\n", 11);
        mhe__bpe_putf(&o, "prefix_space %ld\nignore_merges %ld\n", b->prefix_space, b->ignore_merges, 0, 2);
        mhe__bpe_putf(&o, "unk %ld\nfuse_unk %ld\ntokens %ld\n", b->unk, b->fuse_unk, b->n_tokens, 3);
    }
    for (i = 0; i < b->n_tokens; i++) {
        size_t k;
        static const char code[8] = { 't', 'a', '?', 'n', '?', 'A', '?', 'N' };   /* by MHE_BPE_ADDED* flags */
        char c2[2];
        c2[0] = code[b->added[i] & 7]; c2[1] = ' ';
        mhe__bpe_put(&o, c2, 2);
        for (k = b->start[i]; k < b->start[i + 1]; k++) { char h[2]; h[0] = hex[b->bytes[k] >> 4]; h[1] = hex[b->bytes[k] & 15]; mhe__bpe_put(&o, h, 2); }
        mhe__bpe_put(&o, "\n", 1);
    }
    if (b->model == MHE_TOK_BPE) mhe__bpe_putf(&o, "merges %ld\n", b->n_merges, 0, 0, 1);
    for (i = 0; i < b->n_merges; i++)
        mhe__bpe_putf(&o, "%ld %ld %ld\n", (long)b->merges[3 * i], (long)b->merges[3 * i + 1], (long)b->merges[3 * i + 2], 3);
    mhe__bpe_put(&o, "end\n", 4);
    *len = o.n;
    return MHE_OK;
}

typedef struct mhe__bpe_in { const char *s; size_t n, pos; int line; const char *line_at; size_t line_len; } mhe__bpe_in;

/* the next line (without its '\n'); 0 at the end or when the last line has no '\n' */
static int mhe__bpe_line(mhe__bpe_in *in) {
    const char *nl;
    if (in->pos >= in->n) return 0;
    nl = (const char *)memchr(in->s + in->pos, '\n', in->n - in->pos);
    if (!nl) return 0;
    in->line_at = in->s + in->pos;
    in->line_len = (size_t)(nl - in->line_at);
    in->pos += in->line_len + 1;
    in->line++;
    return 1;
}

/* a decimal integer (optionally negative) at s[*i], then a space or the end of the line */
static int mhe__bpe_int(const char *s, size_t n, size_t *i, long lo, long hi, long *v) {
    int neg = 0, d = 0;
    long x = 0;
    if (*i < n && s[*i] == '-') { neg = 1; (*i)++; }
    while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        if (x > 100000000L) return 0;
        x = x * 10 + (s[*i] - '0'); (*i)++; d++;
    }
    if (!d || (d > 1 && s[*i - d] == '0')) return 0;
    if (neg) x = -x;
    if (x < lo || x > hi) return 0;
    if (*i < n) { if (s[*i] != ' ') return 0; (*i)++; }
    *v = x;
    return 1;
}

/* a line "key VALUE" with VALUE in lo..hi */
static mhe_status mhe__bpe_field(mhe_bpe *b, mhe__bpe_in *in, const char *key, long lo, long hi, long *v) {
    size_t k = strlen(key), i = k + 1;
    if (!mhe__bpe_line(in)) return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated before the '%s' line", key);
    if (in->line_len <= k || memcmp(in->line_at, key, k) != 0 || in->line_at[k] != ' ')
        return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: expected '%s N'", in->line, key);
    if (!mhe__bpe_int(in->line_at, in->line_len, &i, lo, hi, v) || i != in->line_len)
        return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: %s must be an integer in %ld..%ld", in->line, key, lo, hi);
    return MHE_OK;
}

static int mhe__bpe_hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

MHEDEF mhe_status mhe_bpe_load_mem(mhe_bpe *b, const char *buf, size_t len) {
    mhe__bpe_in in;
    mhe_status st;
    long split = 0, ps = 0, im = 0, unk = -1, fu = 0, nt = 0, nm = 0, norm = 0, mwc = 0, cls = -1, sep = -1, cleanup = 0;
    size_t bytes, save;
    int i, wp;
    char prefix[8];
    if (!b) return MHE_ERR_ARG;
    mhe_bpe_free(b);
    if (!buf && len) return mhe__fail(b->err, MHE_ERR_ARG, "tokenizer: NULL buffer");
    memset(&in, 0, sizeof in);
    memset(prefix, 0, sizeof prefix);
    in.s = buf; in.n = len;
    if (!mhe__bpe_line(&in) || !((in.line_len == 9 && memcmp(in.line_at, "mhe-bpe 1", 9) == 0) || (in.line_len == 15 && memcmp(in.line_at, "mhe-wordpiece 1", 15) == 0)))
        return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer: the first line is not 'mhe-bpe 1' or 'mhe-wordpiece 1' (not an mhe tokenizer, or another version)");
    wp = in.line_len == 15;
    if (wp) {
        size_t k;
        if ((st = mhe__bpe_field(b, &in, "normalize", 0, 15, &norm)) != MHE_OK || (st = mhe__bpe_field(b, &in, "max_word_chars", 1, 100000000L, &mwc)) != MHE_OK)
            return st;
        if (!mhe__bpe_line(&in)) return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated before the 'prefix' line");
        if (in.line_len < 7 || memcmp(in.line_at, "prefix ", 7) != 0 || (in.line_len - 7) % 2 || in.line_len - 7 > 2 * (sizeof prefix - 1))
            return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: expected 'prefix HEX' (at most %d bytes)", in.line, (int)sizeof prefix - 1);
        for (k = 7; k < in.line_len; k += 2) {
            int h = mhe__bpe_hexval(in.line_at[k]), l = mhe__bpe_hexval(in.line_at[k + 1]);
            if (h < 0 || l < 0 || !(h | l)) return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: the prefix is not lower-case hex of non-NUL bytes", in.line);
            prefix[(k - 7) / 2] = (char)(h << 4 | l);
        }
        if ((st = mhe__bpe_field(b, &in, "unk", 0, MHE_BPE_MAX_TOKENS - 1, &unk)) != MHE_OK || (st = mhe__bpe_field(b, &in, "cls", -1, MHE_BPE_MAX_TOKENS - 1, &cls)) != MHE_OK ||
            (st = mhe__bpe_field(b, &in, "sep", -1, MHE_BPE_MAX_TOKENS - 1, &sep)) != MHE_OK || (st = mhe__bpe_field(b, &in, "cleanup", 0, 1, &cleanup)) != MHE_OK ||
            (st = mhe__bpe_field(b, &in, "tokens", 1, MHE_BPE_MAX_TOKENS, &nt)) != MHE_OK)
            return st;
        split = MHE_BPE_SPLIT_BERT;
        goto tokens;
    }
    if (!mhe__bpe_line(&in)) return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated before the 'split' line");
    if (in.line_len == 10 && memcmp(in.line_at, "split gpt2", 10) == 0) split = MHE_BPE_SPLIT_GPT2;
    else if (!(in.line_len == 10 && memcmp(in.line_at, "split none", 10) == 0))
        return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: expected 'split gpt2' or 'split none'", in.line);
    if ((st = mhe__bpe_field(b, &in, "prefix_space", 0, 1, &ps)) != MHE_OK || (st = mhe__bpe_field(b, &in, "ignore_merges", 0, 1, &im)) != MHE_OK ||
        (st = mhe__bpe_field(b, &in, "unk", -1, MHE_BPE_MAX_TOKENS - 1, &unk)) != MHE_OK || (st = mhe__bpe_field(b, &in, "fuse_unk", 0, 1, &fu)) != MHE_OK ||
        (st = mhe__bpe_field(b, &in, "tokens", 1, MHE_BPE_MAX_TOKENS, &nt)) != MHE_OK)
        return st;
tokens:   /* pass 1 counts the bytes, pass 2 (below) copies them */
    save = in.pos;
    {
        int line0 = in.line;
        for (i = 0, bytes = 0; i < nt; i++) {
            if (!mhe__bpe_line(&in)) return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated after %d of %ld tokens", i, nt);
            if (in.line_len < 4 || !strchr("tanAN", in.line_at[0]) || in.line_at[1] != ' ' || (in.line_len - 2) % 2)
                return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d (token %d): expected 't HEX' or 'a HEX' (n, A, N) with at least one byte", in.line, i);
            bytes += (in.line_len - 2) / 2;
        }
        in.pos = save; in.line = line0;
    }
    if ((st = mhe__bpe_alloc(b, (int)nt, bytes, 0, "tokenizer")) != MHE_OK) { mhe_bpe_free(b); return st; }
    for (i = 0; i < nt; i++) {
        size_t k;
        unsigned char *q = b->bytes + b->start[i];
        (void)mhe__bpe_line(&in);
        b->added[i] = (unsigned char)(in.line_at[0] == 't' ? 0 : in.line_at[0] == 'a' ? 1 : in.line_at[0] == 'n' ? 3 : in.line_at[0] == 'A' ? 5 : 7);
        for (k = 2; k < in.line_len; k += 2) {
            int h = mhe__bpe_hexval(in.line_at[k]), l = mhe__bpe_hexval(in.line_at[k + 1]);
            if (h < 0 || l < 0) { mhe_bpe_free(b); return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d (token %d): not lower-case hex", in.line, i); }
            *q++ = (unsigned char)(h << 4 | l);
        }
        b->start[i + 1] = (size_t)(q - b->bytes);
    }
    b->n_tokens = (int)nt;
    if (!wp && (st = mhe__bpe_field(b, &in, "merges", 0, nt, &nm)) != MHE_OK) { char e[MHE_ERR_LEN]; memcpy(e, b->err, sizeof e); mhe_bpe_free(b); memcpy(b->err, e, sizeof e); return st; }
    MHE_FREE(b->alloc_ctx, b->merges);
    b->merges = (int32_t *)MHE_MALLOC(b->alloc_ctx, ((size_t)nm * 3 + 1) * sizeof(int32_t));
    if (!b->merges) { mhe_bpe_free(b); return mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer: no memory for %ld merges", nm); }
    for (i = 0; i < nm; i++) {
        size_t k = 0;
        long x[3];
        int c;
        if (!mhe__bpe_line(&in)) { mhe_bpe_free(b); return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated after %d of %ld merges", i, nm); }
        for (c = 0; c < 3; c++)
            if (!mhe__bpe_int(in.line_at, in.line_len, &k, 0, nt - 1, &x[c]) || (c < 2 && k == in.line_len)) break;
        if (c < 3 || k != in.line_len) {
            int line = in.line;
            mhe_bpe_free(b);
            return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d (merge %d): expected 'LEFT RIGHT RESULT', ids in 0..%ld", line, i, nt - 1);
        }
        b->merges[3 * i] = (int32_t)x[0]; b->merges[3 * i + 1] = (int32_t)x[1]; b->merges[3 * i + 2] = (int32_t)x[2];
    }
    b->n_merges = (int)nm;
    if (!mhe__bpe_line(&in)) { mhe_bpe_free(b); return mhe__fail(b->err, MHE_ERR_TRUNCATED, "tokenizer: truncated before the 'end' line"); }
    if (in.line_len != 3 || memcmp(in.line_at, "end", 3) != 0 || in.pos != in.n) {
        int line = in.line;
        mhe_bpe_free(b);
        return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer line %d: expected 'end' as the last line, after %ld merges", line, nm);
    }
    b->split = (int)split; b->prefix_space = (int)ps; b->ignore_merges = (int)im; b->unk = (int)unk; b->fuse_unk = (int)fu;
    if (wp) {
        b->model = MHE_TOK_WORDPIECE; b->normalize = (int)norm; b->max_word_chars = (int)mwc;
        memcpy(b->subword_prefix, prefix, sizeof prefix);
        b->cls = (int)cls; b->sep = (int)sep; b->decode_cleanup = (int)cleanup;
    }
    if ((st = mhe__bpe_index(b, "tokenizer")) != MHE_OK) { char e[MHE_ERR_LEN]; memcpy(e, b->err, sizeof e); mhe_bpe_free(b); memcpy(b->err, e, sizeof e); }
    return st;
}

MHEDEF mhe_status mhe_bpe_md5(const mhe_bpe *b, unsigned char digest[16]) {
    size_t n;
    char *buf;
    mhe_status st;
    if (!b || !digest) return MHE_ERR_ARG;
    if ((st = mhe_bpe_save_mem(b, NULL, 0, &n)) != MHE_OK) return st;
    if (!(buf = (char *)MHE_MALLOC(b->alloc_ctx, n))) return MHE_ERR_NOMEM;
    if ((st = mhe_bpe_save_mem(b, buf, n, &n)) == MHE_OK) mhe_md5(buf, n, digest);
    MHE_FREE(b->alloc_ctx, buf);
    return st;
}

#ifndef MHE_NO_STDIO
MHEDEF mhe_status mhe_bpe_save(const mhe_bpe *b, const char *path) {
    size_t n;
    char *buf, err[MHE_ERR_LEN];
    mhe_out o;
    mhe_status st;
    if (!b || !path) return MHE_ERR_ARG;
    if ((st = mhe_bpe_save_mem(b, NULL, 0, &n)) != MHE_OK) return st;
    if (!(buf = (char *)MHE_MALLOC(b->alloc_ctx, n))) return MHE_ERR_NOMEM;
    if ((st = mhe_bpe_save_mem(b, buf, n, &n)) == MHE_OK && (st = mhe_out_open(&o, path, err)) == MHE_OK) {
        if (!mhe_out_write(&o, buf, n)) mhe_out_discard(&o), st = MHE_ERR_IO;
        else st = mhe_out_commit(&o, err);
    }
    MHE_FREE(b->alloc_ctx, buf);
    return st;
}

MHEDEF mhe_status mhe_bpe_load(mhe_bpe *b, const char *path) {
    void *buf;
    size_t len, i = 0;
    mhe_status st;
    if (!b || !path) return MHE_ERR_ARG;
    mhe_bpe_free(b);
    if ((st = mhe_read_file(path, &buf, &len, b->alloc_ctx, b->err)) != MHE_OK) return st;
    while (i < len && (((const char *)buf)[i] == ' ' || ((const char *)buf)[i] == '\n' || ((const char *)buf)[i] == '\r' || ((const char *)buf)[i] == '\t')) i++;
    st = i < len && ((const char *)buf)[i] == 0x7B /* an opening brace */ ? mhe_bpe_load_hf(b, (const char *)buf, len) : mhe_bpe_load_mem(b, (const char *)buf, len);
    MHE_FREE(b->alloc_ctx, buf);
    if (st != MHE_OK) {   /* the file's name in front of the message */
        char e[MHE_ERR_LEN];
        memcpy(e, b->err, sizeof e);
        snprintf(b->err, sizeof b->err, "%.100s: %.150s", path, e);
    }
    return st;
}

MHEDEF mhe_status mhe_bpe_read_tokens(const mhe_bpe *b, const char *path, int **tokens, size_t *n, void *alloc_ctx, char *err) {
    void *buf;
    size_t len;
    int ok = 1;
    mhe_status st;
    *tokens = NULL;
    *n = 0;
    if (!b || !b->n_tokens) return mhe__fail(err, MHE_ERR_ARG, "%.200s: no tokenizer", path);
    if ((st = mhe_read_file(path, &buf, &len, alloc_ctx, err)) != MHE_OK) return st;
    if (len == 0) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_DATA, "%.200s: corpus is empty", path); }
    if (memchr(buf, 0, len)) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_DATA, "%.200s: contains NUL bytes, not a text file", path); }
    *tokens = (int *)MHE_MALLOC(alloc_ctx, mhe__mul_size(mhe__add_size(mhe_bpe_max_ids(b, len), 1, &ok), sizeof(int), &ok));
    if (!ok || !*tokens) { MHE_FREE(alloc_ctx, buf); return mhe__fail(err, MHE_ERR_NOMEM, "%.200s: no memory for %zu tokens", path, len); }
    st = mhe_bpe_encode(b, (const char *)buf, len, *tokens, mhe_bpe_max_ids(b, len), n, NULL, err);
    MHE_FREE(alloc_ctx, buf);
    if (st == MHE_OK && *n == 0) st = mhe__fail(err, MHE_ERR_DATA, "%.200s: no token (every byte lacks one in this tokenizer)", path);
    if (st != MHE_OK) { MHE_FREE(alloc_ctx, *tokens); *tokens = NULL; *n = 0; }
    return st;
}
#endif

MHEDEF mhe_status mhe_text_set_bpe(mhe_text_set *s, const mhe_bpe *b, char *err) {
    size_t total, i, k, q = 0, maxlen = 0, cap, *start;
    int e, ok = 1, *tok, *types = NULL, pairs = 0;
    char *text;
    mhe_status st = MHE_OK;
    if (!s || !b || !b->n_tokens) return mhe__fail(err, MHE_ERR_ARG, "text set bpe: NULL argument or empty tokenizer");
    total = s->start[s->n];
    for (e = 0; e < s->n; e++) if (s->start[e + 1] - s->start[e] > maxlen) maxlen = s->start[e + 1] - s->start[e];
    if (b->cls >= 0 && b->sep >= 0)   /* pairs: a template with both special tokens, and a tab in some text */
        for (k = 0; k < total && !pairs; k++) pairs = s->tokens[k] == '\t';
    /* room: the tokens, and cls, sep, sep of a pair per example; the types beside them */
    cap = mhe__add_size(mhe_bpe_max_ids(b, total), 3 * (size_t)s->n + 1, &ok);
    tok = (int *)MHE_MALLOC(s->alloc_ctx, mhe__mul_size(cap, sizeof(int), &ok));
    start = (size_t *)MHE_MALLOC(s->alloc_ctx, mhe__mul_size((size_t)s->n + 1, sizeof(size_t), &ok));
    text = (char *)MHE_MALLOC(s->alloc_ctx, maxlen + 1);
    if (pairs) types = (int *)MHE_MALLOC(s->alloc_ctx, mhe__mul_size(cap, sizeof(int), &ok));
    if (!ok || !tok || !start || !text || (pairs && !types)) { st = mhe__fail(err, MHE_ERR_NOMEM, "text set bpe: out of memory"); goto out; }
    start[0] = 0;
    for (e = 0; e < s->n && st == MHE_OK; e++) {   /* the byte tokens are the text's bytes */
        size_t n = 0, len = s->start[e + 1] - s->start[e], a_len = len, q0 = q, q1;
        for (i = 0, k = s->start[e]; i < len; i++, k++) text[i] = (char)s->tokens[k];
        if (pairs) for (a_len = 0; a_len < len && text[a_len] != '\t'; a_len++) {}
        if (b->cls >= 0) tok[q++] = b->cls;
        st = mhe_bpe_encode(b, text, a_len, tok + q, mhe_bpe_max_ids(b, a_len), &n, NULL, err);
        q += n;
        if (b->sep >= 0) tok[q++] = b->sep;
        q1 = q;
        if (st == MHE_OK && a_len < len) {   /* the pair's second text */
            size_t n2 = 0;
            st = mhe_bpe_encode(b, text + a_len + 1, len - a_len - 1, tok + q, mhe_bpe_max_ids(b, len - a_len - 1), &n2, NULL, err);
            if (st == MHE_OK && (n == 0 || n2 == 0))
                st = mhe__fail(err, MHE_ERR_DATA, "example %d: the %s text of the pair has no token in this tokenizer", e + 1, n ? "second" : "first");
            q += n2;
            tok[q++] = b->sep;
        } else if (st == MHE_OK && n == 0) st = mhe__fail(err, MHE_ERR_DATA, "example %d: the text has no token in this tokenizer", e + 1);
        if (types) for (k = q0; k < q; k++) types[k] = k >= q1;
        start[e + 1] = q;
    }
out:
    if (st == MHE_OK) {
        MHE_FREE(s->alloc_ctx, s->tokens); MHE_FREE(s->alloc_ctx, s->start);
        if (s->types) MHE_FREE(s->alloc_ctx, s->types);
        s->tokens = tok; s->start = start; s->types = types;
    } else { MHE_FREE(s->alloc_ctx, tok); MHE_FREE(s->alloc_ctx, start); if (types) MHE_FREE(s->alloc_ctx, types); }
    MHE_FREE(s->alloc_ctx, text);
    return st;
}

/* ---- 8. Hugging Face tokenizer.json (byte-level BPE and WordPiece) -------- */
#define MHE__LB 0x7B   /* the brace characters, not written as literals: tools/reading_guide.py counts braces */
#define MHE__RB 0x7D
/* The JSON reader above, walked key by key. The tokenizers package's
   serialisation (tokenizers/src/models/bpe/serialization.rs and
   pre_tokenizers/byte_level.rs) decides what each field means. */

typedef struct mhe__hf {
    mhe__json j;
    mhe_bpe *b;
    char *str;                  /* every decoded string, one after another (NUL-ended) */
    size_t str_n, str_cap;
    size_t *voc_off;            /* model.vocab: string offset in str, by entry */
    int *voc_id, n_voc, cap_voc, cap_voc2;
    size_t *mrg_a, *mrg_b;      /* merges: the two strings' offsets */
    int n_mrg, cap_mrg, cap_mrg2;
    size_t *add_off; int *add_id, n_add, cap_add, cap_add2;
    unsigned char *add_late;    /* "normalized": true (matched in the second pass) */
    int cap_add3;
    int unk_set; size_t unk_off;
    int split, prefix_space, ignore_merges, fuse_unk;
    int wordpiece, max_word_chars, normalize, decode_cleanup, bert_pre, has_normalizer, wp_decoder;
    size_t prefix_off; int prefix_set;          /* model.continuing_subword_prefix */
    size_t dec_prefix_off; int dec_prefix_set;  /* decoder.prefix */
    size_t tpl_name[2]; int tpl_named[2];       /* the special tokens before and after $A (TemplateProcessing) */
    int tpl_id[2];                              /* their ids (BertProcessing, or special_tokens) */
    size_t *spec_name; int *spec_id, n_spec, cap_spec, cap_spec2;   /* post_processor.special_tokens */
} mhe__hf;

/* a JSON error of the reader, as a tokenizer.json error */
static mhe_status mhe__hf_jerr(mhe__hf *h, mhe_status st) {
    char e[MHE_ERR_LEN], *p;
    size_t k;
    if (strncmp(h->b->err, "header JSON: ", 13) != 0) return st;
    memcpy(e, h->b->err + 13, MHE_ERR_LEN - 13);
    e[MHE_ERR_LEN - 14] = 0;
    if ((p = strstr(e, "header")) != NULL) {   /* "(end of header)", "the end of the header": the file's end */
        k = strlen(p + 6) + 1;
        memmove(p + 4, p + 6, k);
        memcpy(p, "file", 4);
    }
    snprintf(h->b->err, MHE_ERR_LEN, "tokenizer.json: %.230s", e);
    return st == MHE_ERR_HEADER ? MHE_ERR_FORMAT : st;
}
#define MHE__HF_TRY(x) do { mhe_status s_ = (x); if (s_ != MHE_OK) return mhe__hf_jerr(h, s_); } while (0)

/* the string at the cursor, decoded into h->str; its offset in *off */
static mhe_status mhe__hf_string(mhe__hf *h, size_t *off, size_t *len) {
    size_t save = h->j.pos, n;
    mhe_status s;
    if ((s = mhe__json_string(&h->j, NULL, 0, &n)) != MHE_OK) return mhe__hf_jerr(h, s);
    if (h->str_n + n + 1 > h->str_cap) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: string space exhausted");
    h->j.pos = save;
    (void)mhe__json_string(&h->j, h->str + h->str_n, n, &n);
    h->str[h->str_n + n] = 0;
    *off = h->str_n;
    if (len) *len = n;
    h->str_n += n + 1;
    return MHE_OK;
}

/* object iteration: *first on entry; 1 in *more with the key in key (cut to cap - 1 bytes), 0 at the object's end */
static mhe_status mhe__hf_key(mhe__hf *h, int *first, char *key, size_t cap, int *more, const char *where) {
    mhe__json *j = &h->j;
    size_t n;
    mhe__json_ws(j);
    if (*first) {
        if (mhe__json_peek(j) != MHE__LB)
            return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be an object, found %s (byte %lu)", where, mhe__json_kind(j), (unsigned long)j->pos);
        j->pos++; *first = 0;
        mhe__json_ws(j);
        if (mhe__json_peek(j) == MHE__RB) { j->pos++; *more = 0; return MHE_OK; }
    } else {
        if (mhe__json_peek(j) == MHE__RB) { j->pos++; *more = 0; return MHE_OK; }
        if (mhe__json_peek(j) != ',') return mhe__hf_jerr(h, mhe__json_err(j, j->pos, "expected ',' or the end of the object"));
        j->pos++;
        mhe__json_ws(j);
    }
    MHE__HF_TRY(mhe__json_string(j, key, cap - 1, &n));
    key[n < cap - 1 ? n : cap - 1] = 0;
    if (n >= cap - 1) key[0] = 0;   /* a long key is no key we know */
    MHE__HF_TRY(mhe__json_expect(j, ':', "expected ':' after an object key"));
    *more = 1;
    return MHE_OK;
}

static mhe_status mhe__hf_elem(mhe__hf *h, int *first, int *more, const char *where) {
    mhe__json *j = &h->j;
    mhe__json_ws(j);
    if (*first) {
        if (mhe__json_peek(j) != '[')
            return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be an array, found %s (byte %lu)", where, mhe__json_kind(j), (unsigned long)j->pos);
        j->pos++; *first = 0;
        mhe__json_ws(j);
        if (mhe__json_peek(j) == ']') { j->pos++; *more = 0; return MHE_OK; }
    } else {
        if (mhe__json_peek(j) == ']') { j->pos++; *more = 0; return MHE_OK; }
        if (mhe__json_peek(j) != ',') return mhe__hf_jerr(h, mhe__json_err(j, j->pos, "expected ',' or ']' in an array"));
        j->pos++;
        mhe__json_ws(j);
    }
    *more = 1;
    return MHE_OK;
}

static mhe_status mhe__hf_bool(mhe__hf *h, int *v, const char *where) {
    int c;
    mhe__json_ws(&h->j);
    c = mhe__json_peek(&h->j);
    if (c != 't' && c != 'f') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be true or false, found %s", where, mhe__json_kind(&h->j));
    MHE__HF_TRY(mhe__json_literal(&h->j, c == 't' ? "true" : "false"));
    *v = c == 't';
    return MHE_OK;
}

static int mhe__hf_null(mhe__hf *h) {
    mhe__json_ws(&h->j);
    if (mhe__json_peek(&h->j) != 'n') return 0;
    return mhe__json_literal(&h->j, "null") == MHE_OK;
}

static mhe_status mhe__hf_id(mhe__hf *h, int *v, const char *where, long i) {
    mhe__json_num num;
    mhe__json_ws(&h->j);
    if (mhe__json_peek(&h->j) != '-' && !mhe__isdigit(mhe__json_peek(&h->j)))
        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s[%ld] must be a token id, found %s", where, i, mhe__json_kind(&h->j));
    MHE__HF_TRY(mhe__json_number(&h->j, &num));
    if (num.neg || num.frac || num.exp || num.big || num.v >= MHE_BPE_MAX_TOKENS)
        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s[%ld]: an id must be an integer in 0..%d", where, i, MHE_BPE_MAX_TOKENS - 1);
    *v = (int)num.v;
    return MHE_OK;
}

/* a string value (a type name), cut to cap - 1 bytes */
static mhe_status mhe__hf_type(mhe__hf *h, const char *where, char *out, size_t cap) {
    size_t n;
    mhe__json_ws(&h->j);
    if (mhe__json_peek(&h->j) != '"') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be a string", where);
    MHE__HF_TRY(mhe__json_string(&h->j, out, cap - 1, &n));
    out[n < cap - 1 ? n : cap - 1] = 0;
    return MHE_OK;
}

static int mhe__hf_grow(void *ctx, void **p, int *cap, int need, size_t el) {
    void *q;
    int nc;
    if (need <= *cap) return 1;
    nc = *cap ? 2 * *cap : 1024;
    while (nc < need) nc *= 2;
    q = MHE_REALLOC(ctx, *p, (size_t)*cap * el, (size_t)nc * el);
    if (!q) return 0;
    *p = q; *cap = nc;
    return 1;
}

/* TemplateProcessing's "single": [special] $A [special], one of each at most */
static mhe_status mhe__hf_template(mhe__hf *h) {
    int first = 1, more, n = 0, seq_at = -1;
    mhe_status s;
    for (;;) {
        int f2 = 1, m2, items = 0;
        char key[32];
        if ((s = mhe__hf_elem(h, &first, &more, "post_processor.single")) != MHE_OK) return s;
        if (!more) break;
        for (;;) {
            int f3 = 1, m3, special;
            char k3[16];
            if ((s = mhe__hf_key(h, &f2, key, sizeof key, &m2, "post_processor.single[]")) != MHE_OK) return s;
            if (!m2) break;
            special = strcmp(key, "SpecialToken") == 0;
            if (items++ || (!special && strcmp(key, "Sequence") != 0))
                return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.single[%d] is not one SpecialToken or Sequence", n);
            for (;;) {
                if ((s = mhe__hf_key(h, &f3, k3, sizeof k3, &m3, "post_processor.single[]")) != MHE_OK) return s;
                if (!m3) break;
                if (strcmp(k3, "id") == 0 && special) {
                    int side = seq_at < 0 ? 0 : 1;
                    mhe__json_ws(&h->j);
                    if (mhe__json_peek(&h->j) != '"' || h->tpl_named[side])
                        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.single: only [CLS] $A [SEP]-shaped templates are supported (one special token on each side at most)");
                    if ((s = mhe__hf_string(h, &h->tpl_name[side], NULL)) != MHE_OK) return s;
                    h->tpl_named[side] = 1;
                } else if (strcmp(k3, "id") == 0) {
                    char id[8];
                    if ((s = mhe__hf_type(h, "post_processor.single[].Sequence.id", id, sizeof id)) != MHE_OK) return s;
                    if (strcmp(id, "A") != 0 || seq_at >= 0)
                        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.single: the sequence must be $A, once");
                    seq_at = n;
                } else if (strcmp(k3, "type_id") == 0) MHE__HF_TRY(mhe__json_skip(&h->j, 1));   /* token types: mhe gives every token type 0 */
                else return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.single[%d]: unknown field '%.40s'", n, k3);
            }
        }
        n++;
    }
    if (seq_at < 0) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.single has no $A");
    return MHE_OK;
}

/* TemplateProcessing's special_tokens: name -> one id */
static mhe_status mhe__hf_specials(mhe__hf *h) {
    int first = 1, more;
    mhe_status s;
    char name[64];
    for (;;) {
        int f2 = 1, m2, id = -1, ids = 0, named = 0;
        size_t off = 0;
        char key[16];
        if ((s = mhe__hf_key(h, &first, name, sizeof name, &more, "post_processor.special_tokens")) != MHE_OK) return s;
        if (!more) break;
        for (;;) {
            if ((s = mhe__hf_key(h, &f2, key, sizeof key, &m2, "post_processor.special_tokens")) != MHE_OK) return s;
            if (!m2) break;
            if (strcmp(key, "id") == 0) {
                mhe__json_ws(&h->j);
                if (mhe__json_peek(&h->j) != '"') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.special_tokens[].id must be a string");
                if ((s = mhe__hf_string(h, &off, NULL)) != MHE_OK) return s;
                named = 1;
            } else if (strcmp(key, "ids") == 0) {
                int f3 = 1, m3;
                for (;;) {
                    if ((s = mhe__hf_elem(h, &f3, &m3, "post_processor.special_tokens[].ids")) != MHE_OK) return s;
                    if (!m3) break;
                    if ((s = mhe__hf_id(h, &id, "post_processor.special_tokens[].ids", ids)) != MHE_OK) return s;
                    ids++;
                }
            } else MHE__HF_TRY(mhe__json_skip(&h->j, 1));   /* tokens: the names again */
        }
        if (!named) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor.special_tokens['%.40s'] has no id", name);
        if (!mhe__hf_grow(h->b->alloc_ctx, (void **)&h->spec_name, &h->cap_spec, h->n_spec + 1, sizeof(size_t)) ||
            !mhe__hf_grow(h->b->alloc_ctx, (void **)&h->spec_id, &h->cap_spec2, h->n_spec + 1, sizeof(int)))
            return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
        h->spec_name[h->n_spec] = off;
        h->spec_id[h->n_spec++] = ids == 1 ? id : -1;   /* -1: not one id (refused if the template uses it) */
    }
    return MHE_OK;
}

/* a ["name", id] pair of BertProcessing */
static mhe_status mhe__hf_pair(mhe__hf *h, int side, const char *where) {
    int first = 1, more, k = 0;
    mhe_status s;
    for (;;) {
        if ((s = mhe__hf_elem(h, &first, &more, where)) != MHE_OK) return s;
        if (!more) break;
        if (k == 0) { mhe__json_ws(&h->j); if (mhe__json_peek(&h->j) != '"' || (s = mhe__hf_string(h, &h->tpl_name[side], NULL)) != MHE_OK) return s != MHE_OK ? s : mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be [\"name\", id]", where); }
        else if (k == 1) { if ((s = mhe__hf_id(h, &h->tpl_id[side], where, 1)) != MHE_OK) return s; }
        else return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be [\"name\", id]", where);
        k++;
    }
    if (k != 2) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be [\"name\", id]", where);
    h->tpl_named[side] = 1;
    return MHE_OK;
}

/* A normalizer, pre_tokenizer, decoder or post_processor object (kind names
   the field): ByteLevel ones of a byte-level BPE, or BERT's BertNormalizer,
   BertPreTokenizer, WordPiece decoder, TemplateProcessing / BertProcessing.
   Each field is read by its name, then checked to belong to the type. */
enum { MHE__HF_BYTELEVEL = 1, MHE__HF_SEQUENCE = 2, MHE__HF_BERTNORM = 4, MHE__HF_BERTPRE = 8, MHE__HF_WPDEC = 16,
       MHE__HF_TEMPLATE = 32, MHE__HF_BERTPROC = 64 };
static mhe_status mhe__hf_component(mhe__hf *h, const char *kind) {
    static const struct { const char *name; int kinds; } types[7] = {
        { "ByteLevel", 0 }, { "Sequence", 1 }, { "BertNormalizer", 2 }, { "BertPreTokenizer", 1 }, { "WordPiece", 3 },
        { "TemplateProcessing", 4 }, { "BertProcessing", 4 } };   /* kinds: 0 pre/decoder/post, 1 pre, 2 normalizer, 3 decoder, 4 post */
    char key[32], type[32], where[64];
    int first = 1, more, v, t = -1, used = 0, seen = 0, kind_i, strip = -1, single = 0;
    kind_i = strcmp(kind, "pre_tokenizer") == 0 ? 1 : strcmp(kind, "normalizer") == 0 ? 2 : strcmp(kind, "decoder") == 0 ? 3 : 4;
    if (mhe__hf_null(h)) {
        if (kind_i == 1) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: pre_tokenizer is null: mhe reads ByteLevel (a byte-level BPE) or BertPreTokenizer (WordPiece)");
        return MHE_OK;
    }
    for (;;) {
        mhe_status s = mhe__hf_key(h, &first, key, sizeof key, &more, kind);
        int k;
        if (s != MHE_OK) return s;
        if (!more) break;
        snprintf(where, sizeof where, "%s.%s", kind, key);
        if (strcmp(key, "type") == 0) {
            if ((s = mhe__hf_type(h, where, type, sizeof type)) != MHE_OK) return s;
            for (k = 0; k < 7; k++)
                if (strcmp(type, types[k].name) == 0 && (types[k].kinds == 0 ? kind_i != 2 : types[k].kinds == kind_i)) break;
            if (k == 7)
                return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s.type '%.40s' is not supported (%s)", kind, type,
                                 kind_i == 1 ? "ByteLevel, a Sequence of one ByteLevel, or BertPreTokenizer" : kind_i == 2 ? "BertNormalizer or null"
                                 : kind_i == 3 ? "ByteLevel, WordPiece or null" : "ByteLevel, TemplateProcessing, BertProcessing or null");
            t = k; seen |= 1 << k;
            continue;
        }
        if (strcmp(key, "pretokenizers") == 0 && kind_i == 1) {
            int f2 = 1, m2, n = 0;
            used |= MHE__HF_SEQUENCE;
            for (;;) {
                if ((s = mhe__hf_elem(h, &f2, &m2, "pre_tokenizer.pretokenizers")) != MHE_OK) return s;
                if (!m2) break;
                if (n++) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: pre_tokenizer.pretokenizers has more than one pre-tokenizer (one ByteLevel is supported)");
                if ((s = mhe__hf_component(h, "pre_tokenizer")) != MHE_OK) return s;
            }
            if (!n) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: pre_tokenizer.pretokenizers is empty");
        } else if (strcmp(key, "add_prefix_space") == 0 || strcmp(key, "use_regex") == 0 || strcmp(key, "trim_offsets") == 0) {
            if ((s = mhe__hf_bool(h, &v, where)) != MHE_OK) return s;
            used |= MHE__HF_BYTELEVEL;
            if (kind_i == 1 && key[0] == 'a') h->prefix_space = v;
            if (kind_i == 1 && key[0] == 'u') h->split = v ? MHE_BPE_SPLIT_GPT2 : MHE_BPE_SPLIT_NONE;   /* trim_offsets: offsets only */
        } else if (kind_i == 2 && (strcmp(key, "clean_text") == 0 || strcmp(key, "handle_chinese_chars") == 0 || strcmp(key, "lowercase") == 0)) {
            if ((s = mhe__hf_bool(h, &v, where)) != MHE_OK) return s;
            used |= MHE__HF_BERTNORM;
            if (v) h->normalize |= key[0] == 'c' ? MHE_NORM_CLEAN : key[0] == 'h' ? MHE_NORM_CHINESE : MHE_NORM_LOWERCASE;
        } else if (kind_i == 2 && strcmp(key, "strip_accents") == 0) {
            used |= MHE__HF_BERTNORM;
            if (!mhe__hf_null(h) && (s = mhe__hf_bool(h, &strip, where)) != MHE_OK) return s;
        } else if (kind_i == 3 && strcmp(key, "prefix") == 0) {
            used |= MHE__HF_WPDEC;
            mhe__json_ws(&h->j);
            if (mhe__json_peek(&h->j) != '"') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: decoder.prefix must be a string");
            if ((s = mhe__hf_string(h, &h->dec_prefix_off, NULL)) != MHE_OK) return s;
            h->dec_prefix_set = 1;
        } else if (kind_i == 3 && strcmp(key, "cleanup") == 0) {
            used |= MHE__HF_WPDEC;
            if ((s = mhe__hf_bool(h, &h->decode_cleanup, where)) != MHE_OK) return s;
        } else if (kind_i == 4 && strcmp(key, "single") == 0) {
            used |= MHE__HF_TEMPLATE;
            single = 1;
            if ((s = mhe__hf_template(h)) != MHE_OK) return s;
        } else if (kind_i == 4 && strcmp(key, "pair") == 0) {
            used |= MHE__HF_TEMPLATE;
            MHE__HF_TRY(mhe__json_skip(&h->j, 1));   /* pairs: mhe_text_set_bpe reads them with BERT's pair template */
        } else if (kind_i == 4 && strcmp(key, "special_tokens") == 0) {
            used |= MHE__HF_TEMPLATE;
            if ((s = mhe__hf_specials(h)) != MHE_OK) return s;
        } else if (kind_i == 4 && (strcmp(key, "cls") == 0 || strcmp(key, "sep") == 0)) {
            used |= MHE__HF_BERTPROC;
            if ((s = mhe__hf_pair(h, key[0] == 's', where)) != MHE_OK) return s;
        } else return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s: unknown field '%.40s'", kind, key);
    }
    if (t < 0) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s has no type", kind);
    if (seen != 1 << t || (used & ~(1 << t)))
        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s has fields of another type than its type '%s'", kind, types[t].name);
    if (t == 5 && !single) return mhe__fail(h->b->err, MHE_ERR_MISSING, "tokenizer.json: post_processor.single is missing");
    if (t == 2 && (strip < 0 ? (h->normalize & MHE_NORM_LOWERCASE) : strip)) h->normalize |= MHE_NORM_STRIP_ACCENTS;   /* strip_accents null: as lowercase */
    if (t == 2) h->has_normalizer = 1;
    if (t == 3) { h->bert_pre = 1; h->split = MHE_BPE_SPLIT_BERT; }
    if (t == 4) h->wp_decoder = 1;
    return MHE_OK;
}

static mhe_status mhe__hf_model(mhe__hf *h) {
    char key[40], type[32];
    int first = 1, more, seen_vocab = 0, seen_merges = 0;
    mhe_status s;
    void *ctx = h->b->alloc_ctx;
    for (;;) {
        if ((s = mhe__hf_key(h, &first, key, sizeof key, &more, "model")) != MHE_OK) return s;
        if (!more) break;
        if (strcmp(key, "type") == 0) {
            if ((s = mhe__hf_type(h, "model.type", type, sizeof type)) != MHE_OK) return s;
            h->wordpiece = strcmp(type, "WordPiece") == 0;
            if (strcmp(type, "BPE") != 0 && !h->wordpiece) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.type '%.40s' is neither BPE nor WordPiece", type);
        } else if (strcmp(key, "dropout") == 0) {
            if (!mhe__hf_null(h)) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.dropout must be null (BPE dropout is random)");
        } else if (strcmp(key, "unk_token") == 0) {
            if (mhe__hf_null(h)) continue;
            if ((s = mhe__hf_string(h, &h->unk_off, NULL)) != MHE_OK) return s;
            h->unk_set = 1;
        } else if (strcmp(key, "continuing_subword_prefix") == 0 && h->wordpiece) {
            size_t n;
            mhe__json_ws(&h->j);
            if (mhe__json_peek(&h->j) != '"') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.continuing_subword_prefix must be a string");
            if ((s = mhe__hf_string(h, &h->prefix_off, &n)) != MHE_OK) return s;
            if (n >= sizeof h->b->subword_prefix || strlen(h->str + h->prefix_off) != n)
                return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.continuing_subword_prefix is longer than %d bytes (or has a NUL)", (int)sizeof h->b->subword_prefix - 1);
            h->prefix_set = 1;
        } else if (strcmp(key, "max_input_chars_per_word") == 0 && h->wordpiece) {
            int v;
            if ((s = mhe__hf_id(h, &v, "model.max_input_chars_per_word", 0)) != MHE_OK) return s;
            if (v < 1) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.max_input_chars_per_word must be at least 1");
            h->max_word_chars = v;
        } else if (strcmp(key, "continuing_subword_prefix") == 0 || strcmp(key, "end_of_word_suffix") == 0) {
            size_t off, n;
            if (mhe__hf_null(h)) continue;
            if ((s = mhe__hf_string(h, &off, &n)) != MHE_OK) return s;
            if (n) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.%s must be null or empty in a byte-level BPE", key);
        } else if (strcmp(key, "fuse_unk") == 0) {
            if ((s = mhe__hf_bool(h, &h->fuse_unk, "model.fuse_unk")) != MHE_OK) return s;
        } else if (strcmp(key, "byte_fallback") == 0) {
            int v;
            if ((s = mhe__hf_bool(h, &v, "model.byte_fallback")) != MHE_OK) return s;
            if (v) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.byte_fallback must be false (a byte-level BPE has every byte)");
        } else if (strcmp(key, "ignore_merges") == 0) {
            if ((s = mhe__hf_bool(h, &h->ignore_merges, "model.ignore_merges")) != MHE_OK) return s;
        } else if (strcmp(key, "vocab") == 0) {
            int f2 = 1;
            if (seen_vocab++) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab appears twice");
            mhe__json_ws(&h->j);
            if (mhe__json_peek(&h->j) != MHE__LB) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab must be an object, found %s", mhe__json_kind(&h->j));
            h->j.pos++;
            for (;;) {
                size_t off;
                mhe__json_ws(&h->j);
                if (f2) { f2 = 0; if (mhe__json_peek(&h->j) == MHE__RB) { h->j.pos++; break; } }
                else {
                    if (mhe__json_peek(&h->j) == MHE__RB) { h->j.pos++; break; }
                    if (mhe__json_peek(&h->j) != ',') return mhe__hf_jerr(h, mhe__json_err(&h->j, h->j.pos, "expected ',' or the end of model.vocab"));
                    h->j.pos++;
                    mhe__json_ws(&h->j);
                }
                if (!mhe__hf_grow(ctx, (void **)&h->voc_off, &h->cap_voc, h->n_voc + 1, sizeof(size_t))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
                if (!mhe__hf_grow(ctx, (void **)&h->voc_id, &h->cap_voc2, h->n_voc + 1, sizeof(int))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
                if ((s = mhe__hf_string(h, &off, NULL)) != MHE_OK) return s;
                MHE__HF_TRY(mhe__json_expect(&h->j, ':', "expected ':' after a model.vocab key"));
                if ((s = mhe__hf_id(h, &h->voc_id[h->n_voc], "model.vocab", h->n_voc)) != MHE_OK) return s;
                h->voc_off[h->n_voc++] = off;
            }
        } else if (strcmp(key, "merges") == 0) {
            int f2 = 1, m2;
            if (seen_merges++) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.merges appears twice");
            for (;;) {
                size_t a, b2, n;
                if ((s = mhe__hf_elem(h, &f2, &m2, "model.merges")) != MHE_OK) return s;
                if (!m2) break;
                if (!mhe__hf_grow(ctx, (void **)&h->mrg_a, &h->cap_mrg, h->n_mrg + 1, sizeof(size_t))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
                if (!mhe__hf_grow(ctx, (void **)&h->mrg_b, &h->cap_mrg2, h->n_mrg + 1, sizeof(size_t))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
                mhe__json_ws(&h->j);
                if (mhe__json_peek(&h->j) == '"') {   /* "a b" */
                    char *sp;
                    if ((s = mhe__hf_string(h, &a, &n)) != MHE_OK) return s;
                    sp = (char *)memchr(h->str + a, ' ', n);
                    if (!sp || sp == h->str + a || sp == h->str + a + n - 1 || memchr(sp + 1, ' ', (size_t)(h->str + a + n - sp - 1)))
                        return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.merges[%d] is not two tokens separated by one space", h->n_mrg);
                    *sp = 0;
                    b2 = (size_t)(sp + 1 - h->str);
                } else {   /* ["a", "b"] */
                    int f3 = 1, m3, k = 0;
                    size_t o[2];
                    for (;;) {
                        if ((s = mhe__hf_elem(h, &f3, &m3, "model.merges[]")) != MHE_OK) return s;
                        if (!m3) break;
                        mhe__json_ws(&h->j);
                        if (k == 2 || mhe__json_peek(&h->j) != '"')
                            return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.merges[%d] must be a pair of strings", h->n_mrg);
                        if ((s = mhe__hf_string(h, &o[k++], NULL)) != MHE_OK) return s;
                    }
                    if (k != 2) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.merges[%d] must be a pair of strings", h->n_mrg);
                    a = o[0]; b2 = o[1];
                }
                h->mrg_a[h->n_mrg] = a; h->mrg_b[h->n_mrg++] = b2;
            }
        } else MHE__HF_TRY(mhe__json_skip(&h->j, 1));   /* fields of later versions that do not change encoding */
    }
    if (!seen_vocab || (!seen_merges && !h->wordpiece)) return mhe__fail(h->b->err, MHE_ERR_MISSING, "tokenizer.json: model.%s is missing", seen_vocab ? "merges" : "vocab");
    if (h->wordpiece && h->n_mrg) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: model.merges in a WordPiece model");
    return MHE_OK;
}

static mhe_status mhe__hf_added(mhe__hf *h) {
    int first = 1, more;
    mhe_status s;
    for (;;) {
        int f2 = 1, m2, id = -1, v, normalized = -1, special = 0;
        size_t off = 0, n = 0;
        char key[32], where[64];
        if ((s = mhe__hf_elem(h, &first, &more, "added_tokens")) != MHE_OK) return s;
        if (!more) break;
        snprintf(where, sizeof where, "added_tokens[%d]", h->n_add);
        for (;;) {
            if ((s = mhe__hf_key(h, &f2, key, sizeof key, &m2, where)) != MHE_OK) return s;
            if (!m2) break;
            if (strcmp(key, "id") == 0) { if ((s = mhe__hf_id(h, &id, "added_tokens", h->n_add)) != MHE_OK) return s; }
            else if (strcmp(key, "content") == 0) {
                mhe__json_ws(&h->j);
                if (mhe__json_peek(&h->j) != '"') return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s.content must be a string", where);
                if ((s = mhe__hf_string(h, &off, &n)) != MHE_OK) return s;
                if (!n) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s.content is empty", where);
            } else if (strcmp(key, "single_word") == 0 || strcmp(key, "lstrip") == 0 || strcmp(key, "rstrip") == 0) {
                char w2[96];
                snprintf(w2, sizeof w2, "%s.%s", where, key);
                if ((s = mhe__hf_bool(h, &v, w2)) != MHE_OK) return s;
                if (v) return mhe__fail(h->b->err, MHE_ERR_FORMAT, "tokenizer.json: %s is true: not supported", w2);
            } else if (strcmp(key, "normalized") == 0 || strcmp(key, "special") == 0) {
                char w2[96];
                snprintf(w2, sizeof w2, "%s.%s", where, key);
                if ((s = mhe__hf_bool(h, &v, w2)) != MHE_OK) return s;
                if (key[0] == 'n') normalized = v; else special = v;
            } else MHE__HF_TRY(mhe__json_skip(&h->j, 1));
        }
        if (id < 0 || !n) return mhe__fail(h->b->err, MHE_ERR_MISSING, "tokenizer.json: %s needs an id and a content", where);
        if (!mhe__hf_grow(h->b->alloc_ctx, (void **)&h->add_off, &h->cap_add, h->n_add + 1, sizeof(size_t))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
        if (!mhe__hf_grow(h->b->alloc_ctx, (void **)&h->add_id, &h->cap_add2, h->n_add + 1, sizeof(int))) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
        if (!mhe__hf_grow(h->b->alloc_ctx, (void **)&h->add_late, &h->cap_add3, h->n_add + 1, 1)) return mhe__fail(h->b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
        h->add_late[h->n_add] = (unsigned char)(normalized < 0 ? !special : normalized);   /* tokenizers' default: !special */
        h->add_off[h->n_add] = off; h->add_id[h->n_add++] = id;
    }
    return MHE_OK;
}

/* byte-level text (GPT-2's bytes_to_unicode characters) -> bytes; 0 when a character is not one */
static int mhe__hf_unbyte(const char *s, unsigned char *out, size_t *n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, len = strlen(s), k, q = 0;
    while (i < len) {
        uint32_t cp;
        int byte;
        if (!(k = mhe__utf8_seq(p + i, len - i))) return 0;
        cp = k == 1 ? p[i] : k == 2 ? (p[i] & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu) : 0x110000;
        if ((byte = mhe__bpe_byte_of_cp(cp)) < 0) return 0;
        out[q++] = (unsigned char)byte;
        i += k;
    }
    *n = q;
    return 1;
}

static mhe_status mhe__hf_build(mhe__hf *h) {
    mhe_bpe *b = h->b;
    void *ctx = b->alloc_ctx;
    int i, nt = 0, *owner = NULL;
    size_t bytes = 0;
    mhe_status s = MHE_OK;
    mhe_bpe tmp;   /* a string -> vocab entry hash, borrowed from mhe_bpe's token hash */
    for (i = 0; i < h->n_voc; i++) if (h->voc_id[i] + 1 > nt) nt = h->voc_id[i] + 1;
    for (i = 0; i < h->n_add; i++) if (h->add_id[i] + 1 > nt) nt = h->add_id[i] + 1;
    if (!nt) return mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab is empty");
    owner = (int *)MHE_MALLOC(ctx, (size_t)nt * 2 * sizeof(int));   /* [id]: vocab entry, [nt + id]: added entry */
    if (!owner) return mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
    for (i = 0; i < 2 * nt; i++) owner[i] = -1;
    for (i = 0; i < h->n_voc; i++) {
        int id = h->voc_id[i];
        if (owner[id] >= 0) { s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab: '%.40s' and '%.40s' both have id %d", h->str + h->voc_off[owner[id]], h->str + h->voc_off[i], id); goto out; }
        owner[id] = i;
        bytes += strlen(h->str + h->voc_off[i]);
    }
    for (i = 0; i < h->n_add; i++) {
        int id = h->add_id[i];
        if (owner[nt + id] >= 0) { s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: added_tokens[%d] repeats the id %d of added_tokens[%d]", i, id, owner[nt + id]); goto out; }
        if (owner[id] >= 0 && strcmp(h->str + h->voc_off[owner[id]], h->str + h->add_off[i]) != 0) {
            s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: added_tokens[%d] '%.40s' has id %d, which model.vocab gives to '%.40s'", i, h->str + h->add_off[i], id, h->str + h->voc_off[owner[id]]);
            goto out;
        }
        owner[nt + id] = i;
        bytes += strlen(h->str + h->add_off[i]);
    }
    for (i = 0; i < nt; i++)
        if (owner[i] < 0 && owner[nt + i] < 0) { s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: no token has id %d (ids must run 0..%d without gaps)", i, nt - 1); goto out; }
    if ((s = mhe__bpe_alloc(b, nt, bytes, h->n_mrg, "tokenizer.json")) != MHE_OK) goto out;
    for (i = 0; i < nt; i++) {
        unsigned char *q = b->bytes + b->start[i];
        size_t n;
        if (owner[nt + i] >= 0) {   /* an added token: its content as it is */
            const char *c = h->str + h->add_off[owner[nt + i]];
            n = strlen(c);
            memcpy(q, c, n);
            b->added[i] = (unsigned char)(MHE_BPE_ADDED | (h->add_late[owner[nt + i]] ? MHE_BPE_ADDED_LATE : 0) | (owner[i] >= 0 ? MHE_BPE_ADDED_VOCAB : 0));
        } else if (h->wordpiece) {   /* a WordPiece token is its text */
            n = strlen(h->str + h->voc_off[owner[i]]);
            memcpy(q, h->str + h->voc_off[owner[i]], n);
        } else if (!mhe__hf_unbyte(h->str + h->voc_off[owner[i]], q, &n)) {
            s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab '%.40s' (id %d) is not byte-level text (GPT-2's byte characters)", h->str + h->voc_off[owner[i]], i);
            goto out;
        }
        b->start[i + 1] = b->start[i] + n;
    }
    b->n_tokens = nt;
    /* merges: strings -> ids through the vocab strings, hashed */
    mhe_bpe_init(&tmp, ctx);
    tmp.n_tok_slots = mhe__bpe_pow2((size_t)h->n_voc);
    tmp.tok_slots = (int *)MHE_MALLOC(ctx, tmp.n_tok_slots * sizeof(int));
    if (!tmp.tok_slots) { s = mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory"); goto out; }
    {
        size_t k, mask = tmp.n_tok_slots - 1;
        for (k = 0; k < tmp.n_tok_slots; k++) tmp.tok_slots[k] = -1;
        for (i = 0; i < h->n_voc; i++) {
            const char *v = h->str + h->voc_off[i];
            for (k = (size_t)mhe__bpe_fnv((const unsigned char *)v, strlen(v)) & mask; tmp.tok_slots[k] >= 0; k = (k + 1) & mask)
                if (strcmp(h->str + h->voc_off[tmp.tok_slots[k]], v) == 0) {
                    s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: model.vocab has the key '%.40s' twice", v);
                    break;
                }
            if (s != MHE_OK) break;
            tmp.tok_slots[k] = i;
        }
        for (i = 0; i < h->n_mrg && s == MHE_OK; i++) {
            const char *part[3];
            char *cat = NULL;
            int id[3], c;
            size_t la = strlen(h->str + h->mrg_a[i]), lb = strlen(h->str + h->mrg_b[i]);
            part[0] = h->str + h->mrg_a[i]; part[1] = h->str + h->mrg_b[i];
            cat = (char *)MHE_MALLOC(ctx, la + lb + 1);
            if (!cat) { s = mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory"); break; }
            memcpy(cat, part[0], la); memcpy(cat + la, part[1], lb + 1);
            part[2] = cat;
            for (c = 0; c < 3; c++) {
                id[c] = -1;
                for (k = (size_t)mhe__bpe_fnv((const unsigned char *)part[c], strlen(part[c])) & mask; tmp.tok_slots[k] >= 0; k = (k + 1) & mask)
                    if (strcmp(h->str + h->voc_off[tmp.tok_slots[k]], part[c]) == 0) { id[c] = h->voc_id[tmp.tok_slots[k]]; break; }
                if (id[c] < 0) {
                    s = mhe__fail(b->err, MHE_ERR_FORMAT, c < 2 ? "tokenizer.json: model.merges[%d]: '%.40s' is not in model.vocab"
                                                            : "tokenizer.json: model.merges[%d]: the result '%.40s' is not in model.vocab", i, part[c]);
                    break;
                }
            }
            MHE_FREE(ctx, cat);
            b->merges[3 * i] = id[0]; b->merges[3 * i + 1] = id[1]; b->merges[3 * i + 2] = id[2];
        }
        if (s == MHE_OK && h->unk_set) {
            const char *u = h->str + h->unk_off;
            b->unk = -1;
            for (k = (size_t)mhe__bpe_fnv((const unsigned char *)u, strlen(u)) & mask; tmp.tok_slots[k] >= 0; k = (k + 1) & mask)
                if (strcmp(h->str + h->voc_off[tmp.tok_slots[k]], u) == 0) { b->unk = h->voc_id[tmp.tok_slots[k]]; break; }
            if (b->unk < 0) s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: model.unk_token '%.40s' is not in model.vocab", u);
        }
    }
    MHE_FREE(ctx, tmp.tok_slots);
    if (s != MHE_OK) goto out;
    if (h->wordpiece) {
        int side, k2;
        if (!h->unk_set) { s = mhe__fail(b->err, MHE_ERR_MISSING, "tokenizer.json: model.unk_token is missing (WordPiece needs one)"); goto out; }
        if (h->wp_decoder && h->dec_prefix_set && h->prefix_set && strcmp(h->str + h->dec_prefix_off, h->str + h->prefix_off) != 0) {
            s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: decoder.prefix differs from model.continuing_subword_prefix");
            goto out;
        }
        b->model = MHE_TOK_WORDPIECE;
        b->normalize = h->normalize;
        b->max_word_chars = h->max_word_chars;
        strcpy(b->subword_prefix, h->prefix_set ? h->str + h->prefix_off : "##");
        b->decode_cleanup = h->wp_decoder ? h->decode_cleanup : 0;
        for (side = 0; side < 2; side++) {   /* the template's special tokens: ids from special_tokens, or BertProcessing's own */
            int id = h->tpl_id[side];
            if (!h->tpl_named[side]) continue;
            if (id < 0) {
                for (k2 = 0; k2 < h->n_spec; k2++)
                    if (strcmp(h->str + h->spec_name[k2], h->str + h->tpl_name[side]) == 0) { id = h->spec_id[k2]; break; }
                if (k2 == h->n_spec || id < 0) {
                    s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor: the special token '%.40s' has no single id in special_tokens", h->str + h->tpl_name[side]);
                    goto out;
                }
            }
            if (id >= nt) { s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: post_processor: '%.40s' has id %d, past the vocabulary", h->str + h->tpl_name[side], id); goto out; }
            if (side) b->sep = id; else b->cls = id;
        }
    }
    b->n_merges = h->n_mrg;
    b->split = h->split; b->prefix_space = h->prefix_space; b->ignore_merges = h->ignore_merges; b->fuse_unk = h->fuse_unk;
    s = mhe__bpe_index(b, "tokenizer.json");
    for (i = 0; s == MHE_OK && h->wordpiece && i < nt; i++) {   /* a "normalized" added token is matched in normalised text: it must be normalised */
        size_t n = b->start[i + 1] - b->start[i], m;
        unsigned char *tmp;
        int same;
        if (!(b->added[i] & MHE_BPE_ADDED_LATE)) continue;
        if (!(tmp = (unsigned char *)MHE_MALLOC(ctx, MHE__WP_GROW(n)))) { s = mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory"); break; }
        m = mhe__wp_normalize(b->normalize, b->bytes + b->start[i], n, tmp);
        same = m == n && memcmp(tmp, b->bytes + b->start[i], n) == 0;
        MHE_FREE(ctx, tmp);
        if (!same) s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: added token %d is matched after normalisation (\"normalized\": true) but the normalizer changes it", i);
    }
    if (s != MHE_OK && strstr(b->err, "repeats merge")) {   /* in the file's terms */
        char e[MHE_ERR_LEN];
        memcpy(e, b->err, sizeof e);
        snprintf(b->err, MHE_ERR_LEN, "tokenizer.json: model.merges: %.200s", e + 16);
    }
out:
    MHE_FREE(ctx, owner);
    return s;
}

MHEDEF mhe_status mhe_bpe_load_hf(mhe_bpe *b, const char *json, size_t len) {
    mhe__hf h;
    mhe_status s = MHE_OK;
    char key[40];
    int first = 1, more, seen_model = 0, seen_pre = 0;
    if (!b) return MHE_ERR_ARG;
    mhe_bpe_free(b);
    if (!json && len) return mhe__fail(b->err, MHE_ERR_ARG, "tokenizer.json: NULL buffer");
    memset(&h, 0, sizeof h);
    h.b = b;
    h.j.s = (const unsigned char *)json; h.j.n = len; h.j.err = b->err;
    h.split = MHE_BPE_SPLIT_GPT2;
    h.max_word_chars = 100;   /* tokenizers' defaults */
    h.tpl_id[0] = h.tpl_id[1] = -1;
    h.str_cap = len + 1;   /* decoded strings are never longer than their JSON, plus a NUL each */
    h.str = (char *)MHE_MALLOC(b->alloc_ctx, 2 * h.str_cap);
    h.str_cap *= 2;
    if (!h.str) return mhe__fail(b->err, MHE_ERR_NOMEM, "tokenizer.json: out of memory");
    for (;;) {
        if ((s = mhe__hf_key(&h, &first, key, sizeof key, &more, "the file")) != MHE_OK) break;
        if (!more) break;
        if (strcmp(key, "model") == 0) { seen_model++; s = mhe__hf_model(&h); }
        else if (strcmp(key, "pre_tokenizer") == 0) { seen_pre++; s = mhe__hf_component(&h, "pre_tokenizer"); }
        else if (strcmp(key, "decoder") == 0) s = mhe__hf_component(&h, "decoder");
        else if (strcmp(key, "post_processor") == 0) s = mhe__hf_component(&h, "post_processor");
        else if (strcmp(key, "added_tokens") == 0) s = mhe__hf_added(&h);
        else if (strcmp(key, "normalizer") == 0) s = mhe__hf_component(&h, "normalizer");
        else if (strcmp(key, "truncation") == 0 || strcmp(key, "padding") == 0) {
            if (!mhe__hf_null(&h)) s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: %s must be null (truncation or padding changes the ids)", key);
        } else s = mhe__hf_jerr(&h, mhe__json_skip(&h.j, 1));   /* "version" and later fields */
        if (s != MHE_OK) break;
    }
    if (s == MHE_OK) {
        mhe__json_ws(&h.j);
        if (h.j.pos != h.j.n) s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: bytes after the top-level object (byte %lu)", (unsigned long)h.j.pos);
        else if (seen_model != 1) s = mhe__fail(b->err, seen_model ? MHE_ERR_FORMAT : MHE_ERR_MISSING, "tokenizer.json: model is %s", seen_model ? "given twice" : "missing");
        else if (seen_pre != 1) s = mhe__fail(b->err, seen_pre ? MHE_ERR_FORMAT : MHE_ERR_MISSING, "tokenizer.json: pre_tokenizer is %s", seen_pre ? "given twice" : "missing (a byte-level BPE needs ByteLevel)");
        else if (h.wordpiece && (!h.bert_pre || h.prefix_space))
            s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: a WordPiece model needs pre_tokenizer BertPreTokenizer (not ByteLevel)");
        else if (!h.wordpiece && (h.bert_pre || h.has_normalizer || h.wp_decoder || h.tpl_named[0] || h.tpl_named[1]))
            s = mhe__fail(b->err, MHE_ERR_FORMAT, "tokenizer.json: a byte-level BPE takes ByteLevel components only (%s)",
                          h.bert_pre ? "pre_tokenizer BertPreTokenizer" : h.has_normalizer ? "normalizer BertNormalizer" : h.wp_decoder ? "decoder WordPiece" : "a post_processor with special tokens");
    }
    if (s == MHE_OK) s = mhe__hf_build(&h);
    MHE_FREE(b->alloc_ctx, h.str); MHE_FREE(b->alloc_ctx, h.voc_off); MHE_FREE(b->alloc_ctx, h.voc_id); MHE_FREE(b->alloc_ctx, h.mrg_a); MHE_FREE(b->alloc_ctx, h.mrg_b);
    MHE_FREE(b->alloc_ctx, h.add_off); MHE_FREE(b->alloc_ctx, h.add_id); MHE_FREE(b->alloc_ctx, h.add_late);
    MHE_FREE(b->alloc_ctx, h.spec_name); MHE_FREE(b->alloc_ctx, h.spec_id);
    if (s != MHE_OK) mhe_bpe_free(b);
    return s;
}
#undef MHE__HF_TRY
#undef MHE__LB
#undef MHE__RB
#endif /* MHE_NO_TOKENIZERS */


static int mhe__mask_id(const mhe_config *c) { return c->mask_token >= 0 ? c->mask_token : c->vocab_size - 1; }

MHEDEF void mhe_text_set_free(mhe_text_set *s) {
    if (!s) return;
    if (s->labels) MHE_FREE(s->alloc_ctx, s->labels);
    if (s->start) MHE_FREE(s->alloc_ctx, s->start);
    if (s->tokens) MHE_FREE(s->alloc_ctx, s->tokens);
    if (s->types) MHE_FREE(s->alloc_ctx, s->types);
    memset(s, 0, sizeof *s);
}

/* label<TAB>text lines as byte tokens (x NULL) or word tokens of x */
static mhe_status mhe__text_set_parse(mhe_text_set *s, mhe_lexicon *x, const char *text, size_t len, void *alloc_ctx, char *err) {
    size_t pos, lines = 0, ntok = 0;
    int pass, ok = 1;
    if (!s) return MHE_ERR_ARG;
    memset(s, 0, sizeof *s);
    s->alloc_ctx = alloc_ctx;
    if (!text && len) return mhe__fail(err, MHE_ERR_ARG, "text set: text is NULL");
    /* pass 0 counts and checks, pass 1 fills */
    for (pass = 0; pass < 2; pass++) {
        int line = 0, ex = 0;
        for (pos = 0; pos < len; ) {
            size_t nl = pos, e, tab, i;
            int64_t label = 0;
            line++;
            while (nl < len && text[nl] != '\n') nl++;
            e = nl > pos && text[nl - 1] == '\r' ? nl - 1 : nl;   /* CRLF */
            if (e > pos) {
                for (tab = pos; tab < e && text[tab] >= '0' && text[tab] <= '9'; tab++)
                    if (label < 100000000) label = label * 10 + (text[tab] - '0');
                if (tab == pos || tab == e || text[tab] != '\t' || label >= 100000000) {
                    mhe_text_set_free(s);
                    return mhe__fail(err, MHE_ERR_DATA, "text set line %d: expected `label<TAB>text` with an integer label in [0, 1e8)", line);
                }
                if (tab + 1 == e) { mhe_text_set_free(s); return mhe__fail(err, MHE_ERR_DATA, "text set line %d: the text is empty", line); }
                for (i = tab + 1; i < e; i++)
                    if (text[i] == 0) { mhe_text_set_free(s); return mhe__fail(err, MHE_ERR_DATA, "text set line %d: contains a NUL byte", line); }
                if (pass == 0) {
                    size_t words = x ? mhe_word_count(text + tab + 1, e - tab - 1) : e - tab - 1;
                    if (!words) { mhe_text_set_free(s); return mhe__fail(err, MHE_ERR_DATA, "text set line %d: the text has no word", line); }
                    lines++;
                    ntok += words;
                } else {
                    s->labels[ex] = (int)label;
                    if ((int)label + 1 > s->n_classes) s->n_classes = (int)label + 1;
                    s->start[ex++] = ntok;
                    if (!x) ntok += mhe_tokenize_bytes(text + tab + 1, e - tab - 1, s->tokens + ntok);
                    else {
                        size_t p = 0, ws, wn;
                        int ty;
                        while ((wn = mhe_word_next(text + tab + 1, e - tab - 1, &p, &ws)) > 0) {
                            if (mhe_lexicon_intern(x, text + tab + 1 + ws, wn, 1, &ty) != MHE_OK) {
                                mhe_text_set_free(s);
                                return mhe__fail(err, MHE_ERR_NOMEM, "text set line %d: out of memory (or types) interning words", line);
                            }
                            s->tokens[ntok++] = MHE_N_SPECIAL + ty;
                        }
                    }
                }
            }
            pos = nl + 1;
        }
        if (pass == 0) {
            if (lines == 0) return mhe__fail(err, MHE_ERR_DATA, "text set: no examples");
            if (lines > (size_t)INT_MAX - 1) return mhe__fail(err, MHE_ERR_OVERFLOW, "text set: too many examples");
            s->labels = (int *)MHE_MALLOC(alloc_ctx, mhe__mul_size(lines, sizeof(int), &ok));
            s->start = (size_t *)MHE_MALLOC(alloc_ctx, mhe__mul_size(lines + 1, sizeof(size_t), &ok));
            s->tokens = (int *)MHE_MALLOC(alloc_ctx, mhe__mul_size(ntok, sizeof(int), &ok));
            if (!ok || !s->labels || !s->start || !s->tokens) { mhe_text_set_free(s); return mhe__fail(err, MHE_ERR_NOMEM, "text set: out of memory"); }
            s->n = (int)lines;
            ntok = 0;
        }
    }
    s->start[s->n] = ntok;
    return MHE_OK;
}

MHEDEF mhe_status mhe_text_set_parse(mhe_text_set *s, const char *text, size_t len, void *alloc_ctx, char *err) {
    return mhe__text_set_parse(s, NULL, text, len, alloc_ctx, err);
}

MHEDEF mhe_status mhe_text_set_parse_words(mhe_text_set *s, mhe_lexicon *x, const char *text, size_t len,
                                           void *alloc_ctx, char *err) {
    if (!x) { if (s) memset(s, 0, sizeof *s); return mhe__fail(err, MHE_ERR_ARG, "text set: lexicon is NULL"); }
    return mhe__text_set_parse(s, x, text, len, alloc_ctx, err);
}

#ifndef MHE_NO_STDIO
static mhe_status mhe__text_set_load(mhe_text_set *s, mhe_lexicon *x, const char *path, void *alloc_ctx, char *err) {
    void *buf;
    size_t len;
    mhe_status st;
    if (!s) return MHE_ERR_ARG;
    memset(s, 0, sizeof *s);
    if ((st = mhe_read_file(path, &buf, &len, alloc_ctx, err)) != MHE_OK) return st;
    st = mhe__text_set_parse(s, x, (const char *)buf, len, alloc_ctx, err);
    MHE_FREE(alloc_ctx, buf);
    if (st != MHE_OK && err) {
        char tmp[MHE_ERR_LEN];
        memcpy(tmp, err, MHE_ERR_LEN);
        snprintf(err, MHE_ERR_LEN, "%.100s: %.140s", path, tmp);
    }
    return st;
}

MHEDEF mhe_status mhe_text_set_load(mhe_text_set *s, const char *path, void *alloc_ctx, char *err) {
    return mhe__text_set_load(s, NULL, path, alloc_ctx, err);
}

MHEDEF mhe_status mhe_text_set_load_words(mhe_text_set *s, mhe_lexicon *x, const char *path, void *alloc_ctx, char *err) {
    if (!x) { if (s) memset(s, 0, sizeof *s); return mhe__fail(err, MHE_ERR_ARG, "text set: lexicon is NULL"); }
    return mhe__text_set_load(s, x, path, alloc_ctx, err);
}
#endif

MHEDEF void mhe_text_set_batch(const mhe_text_set *s, const int *idx, int B, int T, int *tokens, int *lengths, int *labels) {
    int b, t;
    for (b = 0; b < B; b++) {
        size_t n = s->start[idx[b] + 1] - s->start[idx[b]];
        int len = n < (size_t)T ? (int)n : T;
        for (t = 0; t < T; t++) tokens[(size_t)b * T + t] = t < len ? s->tokens[s->start[idx[b]] + (size_t)t] : 0;
        lengths[b] = len;
        labels[b] = s->labels[idx[b]];
    }
}

MHEDEF void mhe_text_set_batch_types(const mhe_text_set *s, const int *idx, int B, int T, int *types) {
    int b, t;
    for (b = 0; b < B; b++) {
        size_t n = s->start[idx[b] + 1] - s->start[idx[b]];
        for (t = 0; t < T; t++) types[(size_t)b * T + t] = s->types && (size_t)t < n ? s->types[s->start[idx[b]] + (size_t)t] : 0;
    }
}


/* S+R corruption (see the declaration). The permutation lives in the last
   row of labels: position t of row b reads pi(t) before that row's label t
   is written, and the last row is the last to be written. */
MHEDEF void mhe_sr_corrupt(int *inputs, int *labels, const int *tokens, const int *lengths, int B, int T, float prob,
                           int first_word, const int *pool, size_t pool_n, mhe_rng *rng) {
    int *perm, b, t, j;
    if (B < 1 || T < 1) return;
    perm = labels + (size_t)(B - 1) * T;
    for (t = 0; t < T; t++) perm[t] = t;
    for (t = T - 1; t > 0; t--) { j = (int)mhe_rng_below(rng, (uint32_t)t + 1); b = perm[t]; perm[t] = perm[j]; perm[j] = b; }
    for (b = 0; b < B; b++) {
        const int *row = tokens + (size_t)b * T;
        int len = lengths ? lengths[b] : T;
        if (len > T) len = T;
        for (t = 0; t < T; t++) {
            int p = perm[t], tok = row[t], in = tok, lab = -1, k;
            if (t < len && tok >= first_word) {
                lab = MHE_SR_ORIGINAL;
                if (mhe_rng_uniform(rng) < prob) {
                    if (p < len && row[p] >= first_word && row[p] != tok) { in = row[p]; lab = MHE_SR_SHUFFLED; }
                } else if (mhe_rng_uniform(rng) < prob && pool_n > 0) {
                    for (k = 0; k < 8; k++) {
                        size_t r = pool_n > 0xFFFFFFFFu ? (size_t)(mhe_rng_u64(rng) % pool_n) : (size_t)mhe_rng_below(rng, (uint32_t)pool_n);
                        int w = pool ? pool[r] : first_word + (int)r;
                        if (w >= first_word && w != tok) { in = w; lab = MHE_SR_RANDOM; break; }
                    }
                }
            }
            inputs[(size_t)b * T + t] = in;
            labels[(size_t)b * T + t] = lab;
        }
    }
}

/* ---- 9. optimizer: AdamW, clipping, schedules ----------------------------- */

MHEDEF mhe_train_config mhe_train_config_default(void) {
    mhe_train_config c;
    memset(&c, 0, sizeof c);
    c.steps = 1000; c.batch = 16; c.seq_len = 128;
    c.lr = 1e-3f; c.min_lr = 1e-4f; c.warmup = 100; c.schedule = MHE_SCHED_COSINE; c.cycles = 1;
    c.beta1 = 0.9f; c.beta2 = 0.95f; c.eps = 1e-8f; c.weight_decay = 0.1f; c.clip = 1.0f;
    c.seed = 1337; c.eval_every = 200; c.eval_batches = 8; c.save_every = 0; c.log_every = 10;
    c.mlm_prob = 0.15f;
    c.sr_prob = 0.10f;              /* the authors' manipulate_prob */
    return c;
}

static mhe_status mhe__train_set_v(void *o, const char *k, const char *v, char *err) { return mhe_train_config_set((mhe_train_config *)o, k, v, err); }

MHEDEF mhe_status mhe_train_config_parse(mhe_train_config *c, const char *text, size_t len, char *err) {
    return mhe__parse_lines(text, len, c, mhe__train_set_v, err);
}

MHEDEF mhe_status mhe_train_config_validate(const mhe_train_config *c, char *err) {
    mhe_status st;
    if ((st = mhe__check_fields(mhe__train_fields, MHE__N_TRAIN_FIELDS, c, "train", err)) != MHE_OK) return st;
    if (c->min_lr > c->lr) return mhe__fail(err, MHE_ERR_CONFIG, "min_lr %g is larger than lr %g", (double)c->min_lr, (double)c->lr);
    return MHE_OK;
}

/* Schedules: linear warmup from 0 over `warmup` steps, then
   constant: lr; linear: lr -> min_lr at `steps`; cosine: min_lr + (lr-min_lr)(1+cos(pi p))/2;
   invsqrt: lr * sqrt(warmup / step) (Vaswani et al. 2017, eq. 3 shape);
   cosine-restarts: the cosine restarted `cycles` times (hard restarts). */
MHEDEF float mhe_lr_at(const mhe_train_config *c, int step) {
    double lr = c->lr, lo = c->min_lr, p;
    int decay_steps = c->steps - c->warmup;
    if (c->warmup > 0 && step < c->warmup) return (float)(lr * (step + 1) / c->warmup);
    if (c->schedule == MHE_SCHED_CONSTANT) return (float)lr;
    if (c->schedule == MHE_SCHED_INVSQRT) {
        double w = c->warmup > 0 ? c->warmup : 1;
        double s1 = (double)step + 1;   /* step may be INT_MAX */
        return (float)(lr * sqrt(w / (s1 > w ? s1 : w)));
    }
    p = decay_steps > 0 ? (double)(step - c->warmup) / decay_steps : 1.0;
    if (p > 1) p = 1;
    if (p < 0) p = 0;
    if (c->schedule == MHE_SCHED_LINEAR) return (float)(lr + (lo - lr) * p);
    if (c->schedule == MHE_SCHED_COSINE_RESTARTS) {
        double q;
        if (p >= 1) return (float)lo;
        q = fmod(p * c->cycles, 1.0);
        return (float)(lo + (lr - lo) * 0.5 * (1 + cos(3.141592653589793 * q)));
    }
    return (float)(lo + (lr - lo) * 0.5 * (1 + cos(3.141592653589793 * p)));
}

#ifndef MHE_NO_TRAIN
/* AdamW (Loshchilov and Hutter 2019, Algorithm 2) on elements [lo, hi).
   sqrtf is a libm call with errno that gcc will not vectorise without
   -fno-math-errno, so the SIMD builds spell the same IEEE operations (each
   correctly rounded, no FMA) in vectors of the GEMM kernel's ISA, through
   one set of names: every build gives the scalar loop's bits. */
#define MHE__ADAMW_CHUNK 16384 /* elements per OpenMP task, a multiple of every vector width */
#if defined(MHE__GEMM_AVX512)
#define MHE__AW_W 16
#define MHE__AW_T __m512
#define MHE__AW_SET1 _mm512_set1_ps
#define MHE__AW_LOAD _mm512_loadu_ps
#define MHE__AW_STORE _mm512_storeu_ps
#define MHE__AW_ADD _mm512_add_ps
#define MHE__AW_SUB _mm512_sub_ps
#define MHE__AW_MUL _mm512_mul_ps
#define MHE__AW_DIV _mm512_div_ps
#define MHE__AW_SQRT _mm512_sqrt_ps
#elif defined(MHE__GEMM_AVX2)
#define MHE__AW_W 8
#define MHE__AW_T __m256
#define MHE__AW_SET1 _mm256_set1_ps
#define MHE__AW_LOAD _mm256_loadu_ps
#define MHE__AW_STORE _mm256_storeu_ps
#define MHE__AW_ADD _mm256_add_ps
#define MHE__AW_SUB _mm256_sub_ps
#define MHE__AW_MUL _mm256_mul_ps
#define MHE__AW_DIV _mm256_div_ps
#define MHE__AW_SQRT _mm256_sqrt_ps
#elif defined(MHE__GEMM_NEON)
#define MHE__AW_W 4
#define MHE__AW_T float32x4_t
#define MHE__AW_SET1 vdupq_n_f32
#define MHE__AW_LOAD vld1q_f32
#define MHE__AW_STORE vst1q_f32
#define MHE__AW_ADD vaddq_f32
#define MHE__AW_SUB vsubq_f32
#define MHE__AW_MUL vmulq_f32
#define MHE__AW_DIV vdivq_f32
#define MHE__AW_SQRT vsqrtq_f32
#endif

static void mhe__adamw_range(float *p, const float *g, float *m, float *v, int64_t lo, int64_t hi, float beta1,
                             float beta2, float eps, float step, float bc2_sqrt, float decay) {
    int64_t i = lo;
#ifdef MHE__AW_W
    MHE__AW_T b1 = MHE__AW_SET1(beta1), c1 = MHE__AW_SET1(1.0f - beta1), b2 = MHE__AW_SET1(beta2),
              c2 = MHE__AW_SET1(1.0f - beta2), ve = MHE__AW_SET1(eps), vs = MHE__AW_SET1(step),
              vb = MHE__AW_SET1(bc2_sqrt), vd = MHE__AW_SET1(decay);
    for (; i + MHE__AW_W <= hi; i += MHE__AW_W) {
        MHE__AW_T gi = MHE__AW_LOAD(g + i);
        MHE__AW_T mi = MHE__AW_ADD(MHE__AW_MUL(b1, MHE__AW_LOAD(m + i)), MHE__AW_MUL(c1, gi));
        MHE__AW_T vi = MHE__AW_ADD(MHE__AW_MUL(b2, MHE__AW_LOAD(v + i)), MHE__AW_MUL(MHE__AW_MUL(c2, gi), gi));
        MHE__AW_T den = MHE__AW_ADD(MHE__AW_DIV(MHE__AW_SQRT(vi), vb), ve);
        MHE__AW_STORE(m + i, mi);
        MHE__AW_STORE(v + i, vi);
        MHE__AW_STORE(p + i, MHE__AW_SUB(MHE__AW_MUL(MHE__AW_LOAD(p + i), vd), MHE__AW_DIV(MHE__AW_MUL(vs, mi), den)));
    }
#endif
    for (; i < hi; i++) {
        float gi = g[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        p[i] = p[i] * decay - step * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
    }
}

MHEDEF void mhe_adamw_update(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, bc2_sqrt = sqrtf(bc2), decay = 1.0f - lr * weight_decay;
    int64_t chunks = (n + MHE__ADAMW_CHUNK - 1) / MHE__ADAMW_CHUNK, c;
MHE__OMP(omp parallel for if (n > 4 * MHE__PAR_MIN))
    for (c = 0; c < chunks; c++) {
        int64_t lo = c * MHE__ADAMW_CHUNK, hi = lo + MHE__ADAMW_CHUNK < n ? lo + MHE__ADAMW_CHUNK : n;
        mhe__adamw_range(p, g, m, v, lo, hi, beta1, beta2, eps, step, bc2_sqrt, decay);
    }
}

MHEDEF float mhe_clip_grad_norm(float *g, int64_t n, float max_norm) {
    double sum = 0, lane[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
    float norm;
    int64_t i;
    int l;
    for (i = 0; i + 8 <= n; i += 8) /* eight lanes in double: vectorised, one summation order */
        for (l = 0; l < 8; l++)
            lane[l] += (double)g[i + l] * g[i + l];
    for (; i < n; i++)
        lane[0] += (double)g[i] * g[i];
    for (l = 0; l < 8; l++)
        sum += lane[l];
    norm = (float)sqrt(sum);
    if (max_norm > 0 && norm > max_norm && mhe__is_finite(norm)) {
        float s = max_norm / (norm + 1e-6f);
        for (i = 0; i < n; i++) g[i] *= s;
    }
    return norm;
}

/* the trainer's state (AdamW moments, batch buffers, RNG) without the
   model's activations: the CPU trainer reserves those, the CUDA one its own */
static mhe_status mhe__trainer_alloc(mhe_trainer *t, mhe_model *m, const mhe_train_config *tc) {
    mhe_status st;
    size_t bytes, B, T, Ts;
    int ok = 1;
    if (!t) return MHE_ERR_ARG;
    memset(t, 0, sizeof *t);
    if (!m || !tc) return mhe__fail(t->err, MHE_ERR_ARG, "mhe_trainer_init: model or config is NULL");
    if (m->q8) return mhe__fail(t->err, MHE_ERR_FORMAT, "mhe_trainer_init: the model has int8 (q8) weights, for inference only; train or resume its float checkpoint");
    if (!m->grad_data && (m->arena || !m->param_data))
        return mhe__fail(t->err, MHE_ERR_ARG, "mhe_trainer_init: the model was loaded for inference only (no gradients)");
    if ((st = mhe_train_config_validate(tc, t->err)) != MHE_OK) return st;
    if (tc->seq_len > m->cfg.max_seq_len)
        return mhe__fail(t->err, MHE_ERR_CONFIG, "seq_len %d exceeds the model's max_seq_len %d", tc->seq_len, m->cfg.max_seq_len);
    if (m->cfg.arch == MHE_ARCH_ENCDEC && tc->src_len > m->cfg.max_seq_len)
        return mhe__fail(t->err, MHE_ERR_CONFIG, "src_len %d exceeds the model's max_seq_len %d", tc->src_len, m->cfg.max_seq_len);
    if ((int64_t)tc->batch * tc->seq_len > (1 << 24))   /* as mhe_model_reserve, before the batch buffer's size can wrap */
        return mhe__fail(t->err, MHE_ERR_OVERFLOW, "batch %d x seq_len %d is too many tokens", tc->batch, tc->seq_len);
    if ((st = mhe__model_grads(m)) != MHE_OK) return mhe__fail(t->err, st, "mhe_trainer_init: %.200s", m->err);   /* a loaded model's, now */
    t->model = m;
    t->tc = *tc;
    B = (size_t)tc->batch; T = (size_t)tc->seq_len; Ts = (size_t)(tc->src_len > 0 ? tc->src_len : tc->seq_len);
    bytes = mhe__mul_size((size_t)m->n_params, sizeof(float), &ok);
    if (!ok) return mhe__fail(t->err, MHE_ERR_OVERFLOW, "optimizer state size overflows");
    t->adam_m = (float *)MHE_MALLOC(m->alloc_ctx, bytes);
    t->adam_v = (float *)MHE_MALLOC(m->alloc_ctx, bytes);
    /* tokens, targets [B*T]; source [B*Ts]; lengths, labels [B] */
    t->batch_tokens = (int *)MHE_MALLOC(m->alloc_ctx, (3 * B * T + B * Ts + 2 * B) * sizeof(int));
    if (!t->adam_m || !t->adam_v || !t->batch_tokens) {
        mhe_trainer_free(t);
        return mhe__fail(t->err, MHE_ERR_NOMEM, "cannot allocate %zu bytes of optimizer state", 2 * bytes);
    }
    t->batch_targets = t->batch_tokens + B * T;
    t->batch_src = t->batch_targets + B * T;
    t->batch_lengths = t->batch_src + B * Ts;
    t->batch_labels = t->batch_lengths + B;
    t->batch_clean = t->batch_labels + B;   /* S+R: the windows before corruption */
    memset(t->adam_m, 0, bytes);
    memset(t->adam_v, 0, bytes);
    mhe_rng_seed(&t->rng, tc->seed);
    return MHE_OK;
}

MHEDEF mhe_status mhe_trainer_init(mhe_trainer *t, mhe_model *m, const mhe_train_config *tc) {
    mhe_status st = mhe__trainer_alloc(t, m, tc);
    int Ts = tc && tc->src_len > 0 ? tc->src_len : tc ? tc->seq_len : 0, l;
    if (st != MHE_OK) return st;
    for (l = 0; l < m->n_total_layers; l++) {
        const mhe_attn_kind_ops *ops = mhe__user_ops(m->layers[l].attn.kind);
        if (ops && !ops->backward) {
            st = mhe__fail(t->err, MHE_ERR_CONFIG, "layer %d is %s, a registered kind without a backward: it cannot train",
                           l, ops->name);
            mhe_trainer_free(t);
            return st;
        }
    }
    if ((st = mhe_model_reserve(m, tc->batch, tc->seq_len, Ts)) != MHE_OK) {
        memcpy(t->err, m->err, MHE_ERR_LEN);
        mhe_trainer_free(t);
        return st;
    }
    return MHE_OK;
}

MHEDEF void mhe_trainer_free(mhe_trainer *t) {
    if (!t || !t->model) return;
    if (t->adam_m) MHE_FREE(t->model->alloc_ctx, t->adam_m);
    if (t->adam_v) MHE_FREE(t->model->alloc_ctx, t->adam_v);
    if (t->batch_tokens) MHE_FREE(t->model->alloc_ctx, t->batch_tokens);
    t->adam_m = t->adam_v = NULL;
    t->batch_tokens = t->batch_targets = t->batch_src = t->batch_lengths = t->batch_labels = t->batch_clean = NULL;
}

/* forward and backward of a batch in training mode (dropout on), then
   gradient clipping and one AdamW update of every tensor */
static mhe_status mhe__trainer_update(mhe_trainer *t, const mhe_batch *b) {
    mhe_model *m = t->model;
    const mhe_train_config *tc = &t->tc;
    float loss = 0, norm, lr;   /* = 0: gcc -O2 with MHE_STATIC cannot see that forward sets it */
    mhe_status st;
    int i;
    m->training = 1;
    m->dropout_seed = mhe_rng_u64(&t->rng);
    if (m->cfg.admin && t->step == 0 && (st = mhe_model_admin_init(m, b)) != MHE_OK) {   /* a fresh run: profile first */
        memcpy(t->err, m->err, MHE_ERR_LEN);
        return st;
    }
    MHE__PHASE(MHE_PHASE_UPDATE);
    MHE__TIMED(MHE_OP_ZERO, mhe_model_zero_grad(m));
    st = mhe_model_forward_batch(m, b, &loss);
    if (st == MHE_OK) st = mhe_model_backward(m);
    m->training = 0;
    if (st != MHE_OK) { memcpy(t->err, m->err, MHE_ERR_LEN); return st; }
    MHE__PHASE(MHE_PHASE_UPDATE);
    MHE__TIMED(MHE_OP_CLIP, norm = mhe_clip_grad_norm(m->grad_data, m->n_params, tc->clip));
    t->last_loss = loss;
    t->last_grad_norm = norm;
    if (!mhe__is_finite(norm)) return mhe__fail(t->err, MHE_ERR_NONFINITE, "gradient norm is %g at step %d; no update made", (double)norm, t->step);
    lr = mhe_lr_at(tc, t->step);
    t->last_lr = lr;
    MHE__TIMED(MHE_OP_ADAMW,
        for (i = 0; i < m->n_tensors; i++) {
            mhe_tensor *p = &m->params[i];
            size_t off = (size_t)(p->data - m->param_data);
            mhe_adamw_update(p->data, p->grad, t->adam_m + off, t->adam_v + off, p->size, lr,
                             tc->beta1, tc->beta2, tc->eps, p->decay ? tc->weight_decay : 0.0f, t->step + 1);
        });
    t->step++;
    return MHE_OK;
}
#endif /* MHE_NO_TRAIN */

/* Row b of a language-model batch from the window data[off ..]: the shapes
   of mhe_trainer_step (decoder: next token; encoder: masked LM with rng;
   encdec: source, then the continuation). */
static void mhe__lm_row(const mhe_model *m, const int *w, int T, int Ts, float mlm_prob, mhe_rng *rng,
                        int *tok, int *tgt, int *src) {
    int i;
    if (m->cfg.arch == MHE_ARCH_ENCODER) {
        mhe_mlm_mask(tok, tgt, w, T, mlm_prob, mhe__mask_id(&m->cfg), m->cfg.vocab_size, rng);
        return;
    }
    if (m->cfg.arch == MHE_ARCH_ENCDEC) {
        if (src) memcpy(src, w, (size_t)Ts * sizeof(int));
        w += Ts - 1;   /* the decoder's first input is the last source token */
    }
    for (i = 0; i < T; i++) { tok[i] = w[i]; tgt[i] = w[i + 1]; }
}

/* tokens of data one row of mhe__lm_row reads */
static size_t mhe__lm_span(const mhe_model *m, int T, int Ts) {
    return m->cfg.arch == MHE_ARCH_ENCODER ? (size_t)T : m->cfg.arch == MHE_ARCH_ENCDEC ? (size_t)Ts + T : (size_t)T + 1;
}

#ifndef MHE_NO_TRAIN
/* the next language-model batch of a trainer: tc.batch random windows of
   data[n] (the CPU and the CUDA trainers draw the same batches) */
static mhe_status mhe__lm_batch(mhe_trainer *t, const int *data, size_t n, mhe_batch *bt) {
    mhe_model *m = t->model;
    const mhe_train_config *tc = &t->tc;
    int T = tc->seq_len, Ts = tc->src_len > 0 ? tc->src_len : T, b;
    size_t need = mhe__lm_span(m, T, Ts);
    if (m->cfg.token_head == MHE_HEAD_SR)
        return mhe__fail(t->err, MHE_ERR_CONFIG, "the model has a Shuffle+Random head (token_head=sr): train it with mhe_trainer_step_sr");
    if (!data || n < need)
        return mhe__fail(t->err, MHE_ERR_DATA, "training data has %zu tokens, a batch row needs %zu", n, need);
    for (b = 0; b < tc->batch; b++) {
        size_t span = n - need + 1, off;
        off = span > 0xFFFFFFFFu ? (size_t)(mhe_rng_u64(&t->rng) % span) : (size_t)mhe_rng_below(&t->rng, (uint32_t)span);
        mhe__lm_row(m, data + off, T, Ts, tc->mlm_prob, &t->rng, t->batch_tokens + (size_t)b * T,
                    t->batch_targets + (size_t)b * T, t->batch_src + (size_t)b * Ts);
    }
    memset(bt, 0, sizeof *bt);
    bt->B = tc->batch; bt->T = T; bt->tokens = t->batch_tokens; bt->targets = t->batch_targets;
    if (m->cfg.arch == MHE_ARCH_ENCDEC) { bt->Ts = Ts; bt->src = t->batch_src; }
    return MHE_OK;
}

MHEDEF mhe_status mhe_trainer_step(mhe_trainer *t, const int *data, size_t n) {
    mhe_batch bt;
    mhe_status st = mhe__lm_batch(t, data, n, &bt);
    return st != MHE_OK ? st : mhe__trainer_update(t, &bt);
}

MHEDEF mhe_status mhe_trainer_step_cls(mhe_trainer *t, const mhe_text_set *s) {
    mhe_model *m = t->model;
    const mhe_train_config *tc = &t->tc;
    int b, *idx = t->batch_targets;   /* the example indices, in the targets' room */
    mhe_batch bt;
    if (!s || s->n < 1) return mhe__fail(t->err, MHE_ERR_DATA, "classification data has no examples");
    if (s->n_classes > m->cfg.n_classes)
        return mhe__fail(t->err, MHE_ERR_DATA, "classification data has labels up to %d, the model's head has %d classes", s->n_classes - 1, m->cfg.n_classes);
    for (b = 0; b < tc->batch; b++) idx[b] = (int)mhe_rng_below(&t->rng, (uint32_t)s->n);
    mhe_text_set_batch(s, idx, tc->batch, tc->seq_len, t->batch_tokens, t->batch_lengths, t->batch_labels);
    memset(&bt, 0, sizeof bt);
    bt.B = tc->batch; bt.T = tc->seq_len; bt.tokens = t->batch_tokens; bt.labels = t->batch_labels; bt.lengths = t->batch_lengths;
    bt.words = s->words;
    if (s->types && m->cfg.type_vocab >= 2) {   /* pairs: the types in S+R's room, unused by classification */
        mhe_text_set_batch_types(s, idx, tc->batch, tc->seq_len, t->batch_clean);
        bt.types = t->batch_clean;
    }
    return mhe__trainer_update(t, &bt);
}


MHEDEF mhe_status mhe_trainer_step_sr(mhe_trainer *t, const int *data, size_t n, const mhe_word_feats *words) {
    mhe_model *m = t->model;
    const mhe_train_config *tc = &t->tc;
    int T = tc->seq_len, b;
    mhe_batch bt;
    if (m->cfg.token_head != MHE_HEAD_SR)
        return mhe__fail(t->err, MHE_ERR_CONFIG, "Shuffle+Random needs the S+R head (token_head=sr); this model has an LM head");
    if (!data || n < (size_t)T) return mhe__fail(t->err, MHE_ERR_DATA, "training data has %zu tokens, a window needs %d", n, T);
    for (b = 0; b < tc->batch; b++) {
        size_t span = n - (size_t)T + 1;
        size_t off = span > 0xFFFFFFFFu ? (size_t)(mhe_rng_u64(&t->rng) % span) : (size_t)mhe_rng_below(&t->rng, (uint32_t)span);
        memcpy(t->batch_clean + (size_t)b * T, data + off, (size_t)T * sizeof(int));
    }
    mhe_sr_corrupt(t->batch_tokens, t->batch_targets, t->batch_clean, NULL, tc->batch, T, tc->sr_prob,
                   words ? MHE_N_SPECIAL : 0, NULL, words ? (size_t)words->n : (size_t)m->cfg.vocab_size, &t->rng);
    memset(&bt, 0, sizeof bt);
    bt.B = tc->batch; bt.T = T; bt.tokens = t->batch_tokens; bt.targets = t->batch_targets; bt.words = words;
    return mhe__trainer_update(t, &bt);
}
#endif /* MHE_NO_TRAIN */

/* One batch's forward for the evaluation loops: its mean loss and the
   targets it scored. The CPU model here; mhe_cuda.cuh passes the device's,
   so both evaluate the same windows in the same batches. */
typedef mhe_status (*mhe__eval_fwd)(void *ctx, const mhe_batch *bt, float *loss, int64_t *count);

static mhe_status mhe__eval_fwd_cpu(void *ctx, const mhe_batch *bt, float *loss, int64_t *count) {
    mhe_model *m = (mhe_model *)ctx;
    mhe_status st = mhe_model_forward_batch(m, bt, loss);
    *count = m->last_count;
    return st;
}

static mhe_status mhe__evaluate_s2s(mhe_model *m, const int *data, size_t n, int batch, int src_len, int seq_len,
                                    int max_batches, float *mean_loss, mhe__eval_fwd fwd, void *ctx) {
    size_t windows, w = 0, need;
    double total = 0;
    int64_t count = 0;
    int *buf, b, nb = 0, T = seq_len, Ts = src_len > 0 ? src_len : seq_len;
    mhe_status st = MHE_OK;
    mhe_rng mask_rng;
    mhe_batch bt;
    if (!m) return MHE_ERR_ARG;
    if (batch < 1 || seq_len < 1) return mhe__fail(m->err, MHE_ERR_ARG, "evaluate: batch and seq_len must be >= 1");
    if (m->cfg.token_head == MHE_HEAD_SR)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "the model has a Shuffle+Random head (token_head=sr): score it with mhe_evaluate_sr");
    if ((int64_t)batch * (T > Ts ? T : Ts) > (1 << 24))   /* as mhe_model_reserve; keeps the sizes below from wrapping on 32-bit */
        return mhe__fail(m->err, MHE_ERR_OVERFLOW, "evaluate: batch %d x length %d is too many tokens", batch, T > Ts ? T : Ts);
    need = mhe__lm_span(m, T, Ts);
    if (!data || n < need)
        return mhe__fail(m->err, MHE_ERR_DATA, "evaluation data has %zu tokens, needs at least %zu", n, need);
    /* consecutive windows, T apart: every target token is scored once */
    windows = (n - need) / (size_t)T + 1;
    buf = (int *)MHE_MALLOC(m->alloc_ctx, (2 * (size_t)batch * T + (size_t)batch * Ts) * sizeof(int));
    if (!buf) return mhe__fail(m->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    m->training = 0;
    mhe_rng_seed(&mask_rng, 0x6d6c6dULL);   /* the same masks at every evaluation */
    memset(&bt, 0, sizeof bt);
    bt.T = T; bt.tokens = buf; bt.targets = buf + (size_t)batch * T;
    if (m->cfg.arch == MHE_ARCH_ENCDEC) { bt.Ts = Ts; bt.src = buf + 2 * (size_t)batch * T; }
    while (w < windows && (max_batches <= 0 || nb < max_batches)) {
        float loss;
        int64_t scored = 0;
        bt.B = (int)(windows - w < (size_t)batch ? windows - w : (size_t)batch);
        for (b = 0; b < bt.B; b++, w++)
            mhe__lm_row(m, data + w * T, T, Ts, 0.15f, &mask_rng, buf + (size_t)b * T, buf + (size_t)(batch + b) * T,
                        buf + 2 * (size_t)batch * T + (size_t)b * Ts);
        st = fwd(ctx, &bt, &loss, &scored);
        if (st != MHE_OK) break;
        total += (double)loss * scored;
        count += scored;
        nb++;
    }
    MHE_FREE(m->alloc_ctx, buf);
    if (st == MHE_OK && mean_loss) *mean_loss = count ? (float)(total / count) : 0.0f;
    return st;
}

MHEDEF mhe_status mhe_evaluate_s2s(mhe_model *m, const int *data, size_t n, int batch, int src_len, int seq_len,
                                   int max_batches, float *mean_loss) {
    return mhe__evaluate_s2s(m, data, n, batch, src_len, seq_len, max_batches, mean_loss, mhe__eval_fwd_cpu, m);
}

MHEDEF mhe_status mhe_evaluate(mhe_model *m, const int *data, size_t n, int batch, int seq_len,
                               int max_batches, float *mean_loss) {
    return mhe_evaluate_s2s(m, data, n, batch, 0, seq_len, max_batches, mean_loss);
}

static mhe_status mhe__evaluate_strided(mhe_model *m, const int *data, size_t n, int batch, int seq_len, int stride,
                                        float *mean_loss, int64_t *n_scored, mhe__eval_fwd fwd, void *ctx) {
    size_t last, begin = 0, scored_to = 0;   /* targets data[1 .. scored_to] are scored */
    double total = 0;
    int64_t count = 0;
    int *buf, b, t, T = seq_len, done = 0;
    mhe_status st = MHE_OK;
    mhe_batch bt;
    if (!m) return MHE_ERR_ARG;
    if (batch < 1 || seq_len < 1 || stride < 1 || stride > seq_len)
        return mhe__fail(m->err, MHE_ERR_ARG, "evaluate: batch %d and seq_len %d must be >= 1, stride %d in 1..seq_len",
                         batch, seq_len, stride);
    if (m->cfg.arch != MHE_ARCH_DECODER || m->cfg.token_head != MHE_HEAD_LM)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "strided perplexity scores a decoder language model (arch=decoder, token_head=lm)");
    if ((int64_t)batch * T > (1 << 24))
        return mhe__fail(m->err, MHE_ERR_OVERFLOW, "evaluate: batch %d x seq_len %d is too many tokens", batch, T);
    if (!data || n < (size_t)T + 1)
        return mhe__fail(m->err, MHE_ERR_DATA, "evaluation data has %zu tokens, needs at least %d", n, T + 1);
    last = n - 1 - (size_t)T;   /* the window that ends at the text's end */
    buf = (int *)MHE_MALLOC(m->alloc_ctx, 2 * (size_t)batch * T * sizeof(int));
    if (!buf) return mhe__fail(m->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    m->training = 0;
    memset(&bt, 0, sizeof bt);
    bt.T = T; bt.tokens = buf; bt.targets = buf + (size_t)batch * T;
    while (!done) {
        float loss;
        int64_t scored = 0;
        for (b = 0; b < batch && !done; b++) {
            int *tok = buf + (size_t)b * T, *tgt = buf + (size_t)(batch + b) * T;
            if (begin > last) begin = last;
            for (t = 0; t < T; t++) {
                size_t target = begin + (size_t)t + 1;
                tok[t] = data[begin + t];
                tgt[t] = target > scored_to ? data[target] : -1;   /* < 0: not scored */
            }
            scored_to = begin + (size_t)T;
            done = begin == last;
            begin += (size_t)stride;
        }
        bt.B = b;
        st = fwd(ctx, &bt, &loss, &scored);
        if (st != MHE_OK) break;
        total += (double)loss * scored;
        count += scored;
    }
    MHE_FREE(m->alloc_ctx, buf);
    if (st != MHE_OK) return st;
    if (mean_loss) *mean_loss = count ? (float)(total / count) : 0.0f;
    if (n_scored) *n_scored = count;
    return MHE_OK;
}

MHEDEF mhe_status mhe_evaluate_strided(mhe_model *m, const int *data, size_t n, int batch, int seq_len, int stride,
                                       float *mean_loss, int64_t *n_scored) {
    return mhe__evaluate_strided(m, data, n, batch, seq_len, stride, mean_loss, n_scored, mhe__eval_fwd_cpu, m);
}

MHEDEF mhe_status mhe_evaluate_cls(mhe_model *m, const mhe_text_set *s, int batch, int seq_len, mhe_cls_metrics *out) {
    int K, i, b, c, *buf, with_types;
    int64_t *conf;
    double total = 0;
    mhe_status st = MHE_OK;
    mhe_batch bt;
    if (!m || !out) return MHE_ERR_ARG;
    K = m->cfg.n_classes;
    if (batch < 1 || seq_len < 1) return mhe__fail(m->err, MHE_ERR_ARG, "evaluate: batch and seq_len must be >= 1");
    if (K < 1) return mhe__fail(m->err, MHE_ERR_CONFIG, "the model has no classification head (n_classes=0)");
    if (!s || s->n < 1) return mhe__fail(m->err, MHE_ERR_DATA, "classification data has no examples");
    if (s->n_classes > K) return mhe__fail(m->err, MHE_ERR_DATA, "classification data has labels up to %d, the model's head has %d classes", s->n_classes - 1, K);
    with_types = s->types && m->cfg.type_vocab >= 2;
    buf = (int *)MHE_MALLOC(m->alloc_ctx, ((size_t)(1 + with_types) * batch * seq_len + 3 * (size_t)batch) * sizeof(int));
    conf = (int64_t *)MHE_MALLOC(m->alloc_ctx, (size_t)K * K * sizeof(int64_t));
    if (!buf || !conf) {
        if (buf) MHE_FREE(m->alloc_ctx, buf);
        if (conf) MHE_FREE(m->alloc_ctx, conf);
        return mhe__fail(m->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    }
    memset(conf, 0, (size_t)K * K * sizeof(int64_t));
    m->training = 0;
    memset(&bt, 0, sizeof bt);
    bt.T = seq_len; bt.tokens = buf; bt.lengths = buf + (size_t)batch * seq_len; bt.labels = bt.lengths + batch;
    bt.words = s->words;
    for (i = 0; i < s->n && st == MHE_OK; i += batch) {
        int *idx = buf + (size_t)batch * seq_len + 2 * (size_t)batch;
        float loss;
        bt.B = s->n - i < batch ? s->n - i : batch;
        for (b = 0; b < bt.B; b++) idx[b] = i + b;
        mhe_text_set_batch(s, idx, bt.B, seq_len, buf, (int *)bt.lengths, (int *)bt.labels);
        if (with_types) {   /* after the indices */
            mhe_text_set_batch_types(s, idx, bt.B, seq_len, idx + batch);
            bt.types = idx + batch;
        }
        if ((st = mhe_model_forward_batch(m, &bt, &loss)) != MHE_OK) break;
        total += (double)loss * m->last_count;
        for (b = 0; b < bt.B; b++) {
            const float *lg = m->acts.cls_logits + (size_t)b * K;
            int best = 0;
            for (c = 1; c < K; c++) if (lg[c] > lg[best]) best = c;
            if (bt.labels[b] >= 0) conf[(size_t)bt.labels[b] * K + best]++;
        }
    }
    if (st == MHE_OK) {
        mhe_cls_metrics_from_confusion(conf, K, out);
        out->loss = out->n ? total / (double)out->n : 0;
    }
    MHE_FREE(m->alloc_ctx, buf);
    MHE_FREE(m->alloc_ctx, conf);
    return st;
}


MHEDEF mhe_status mhe_evaluate_sr(mhe_model *m, const int *data, size_t n, const mhe_word_feats *words, int batch,
                                  int seq_len, int max_batches, float prob, mhe_cls_metrics *out) {
    int64_t conf[MHE_SR_CLASSES * MHE_SR_CLASSES], count = 0;
    size_t windows, w = 0, i;
    double total = 0;
    int *buf, T = seq_len, b, nb = 0, c;
    mhe_status st = MHE_OK;
    mhe_rng rng;
    mhe_batch bt;
    if (!m || !out) return MHE_ERR_ARG;
    if (batch < 1 || seq_len < 1) return mhe__fail(m->err, MHE_ERR_ARG, "evaluate: batch and seq_len must be >= 1");
    if (m->cfg.token_head != MHE_HEAD_SR) return mhe__fail(m->err, MHE_ERR_CONFIG, "Shuffle+Random needs the S+R head (token_head=sr)");
    if (!data || n < (size_t)T) return mhe__fail(m->err, MHE_ERR_DATA, "evaluation data has %zu tokens, a window needs %d", n, T);
    windows = n / (size_t)T;
    buf = (int *)MHE_MALLOC(m->alloc_ctx, 3 * (size_t)batch * T * sizeof(int));
    if (!buf) return mhe__fail(m->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    memset(conf, 0, sizeof conf);
    mhe_rng_seed(&rng, 0x53522b52ULL);   /* the same corruption at every evaluation */
    m->training = 0;
    memset(&bt, 0, sizeof bt);
    bt.T = T; bt.tokens = buf + (size_t)batch * T; bt.targets = buf + 2 * (size_t)batch * T; bt.words = words;
    while (w < windows && (max_batches <= 0 || nb < max_batches)) {
        float loss;
        bt.B = (int)(windows - w < (size_t)batch ? windows - w : (size_t)batch);
        for (b = 0; b < bt.B; b++, w++) memcpy(buf + (size_t)b * T, data + w * T, (size_t)T * sizeof(int));
        mhe_sr_corrupt((int *)bt.tokens, (int *)bt.targets, buf, NULL, bt.B, T, prob, words ? MHE_N_SPECIAL : 0, NULL,
                       words ? (size_t)words->n : (size_t)m->cfg.vocab_size, &rng);
        if ((st = mhe_model_forward_batch(m, &bt, &loss)) != MHE_OK) break;
        total += (double)loss * m->last_count;
        count += m->last_count;
        for (i = 0; i < (size_t)bt.B * T; i++) {
            const float *lg = m->acts.logits + i * MHE_SR_CLASSES;
            int best = 0;
            if (bt.targets[i] < 0) continue;
            for (c = 1; c < MHE_SR_CLASSES; c++) if (lg[c] > lg[best]) best = c;
            conf[bt.targets[i] * MHE_SR_CLASSES + best]++;
        }
        nb++;
    }
    MHE_FREE(m->alloc_ctx, buf);
    if (st != MHE_OK) return st;
    mhe_cls_metrics_from_confusion(conf, MHE_SR_CLASSES, out);
    out->loss = count ? total / (double)count : 0;
    return MHE_OK;
}

/* ---- 10. checkpoints: safetensors --------------------------------------- */

#ifndef MHE_ST_MAX_HEADER
#define MHE_ST_MAX_HEADER 100000000u   /* the reference implementation's limit */
#endif

static const struct { const char *name; int size; } mhe__st_dtypes[] = {
    {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}
};
#define MHE__ST_NDTYPES ((int)(sizeof mhe__st_dtypes / sizeof mhe__st_dtypes[0]))

typedef char mhe__st_float_is_ieee32[sizeof(float) == 4 ? 1 : -1];

/* ---- byte order ---------------------------------------------------------- */

/* compilers fold this to a constant */
static int mhe__little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static uint32_t mhe__bswap32(uint32_t x) {
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

static void mhe__f32_from_le(float *dst, const unsigned char *src, size_t n) {
    if (n) memcpy(dst, src, n * 4);
    if (!mhe__little_endian()) {
        size_t i;
        for (i = 0; i < n; i++) {
            uint32_t w;
            memcpy(&w, dst + i, 4);
            w = mhe__bswap32(w);
            memcpy(dst + i, &w, 4);
        }
    }
}

static void mhe__f32_to_le(unsigned char *dst, const float *src, size_t n) {
    if (n) memcpy(dst, src, n * 4);
    if (!mhe__little_endian()) {
        size_t i;
        for (i = 0; i < n; i++) {
            uint32_t w;
            memcpy(&w, dst + 4 * i, 4);
            w = mhe__bswap32(w);
            memcpy(dst + 4 * i, &w, 4);
        }
    }
}

/* ---- safetensors header schema --------------------------------------------- */
/* Run twice over syntactically valid JSON: first to validate every entry and
   count tensors, metadata pairs and string bytes, then (p->st set) to fill the
   tables in the single block sized from those counts. */

typedef struct mhe__st_pass {
    mhe__json j;
    mhe_safetensors *st;     /* fill pass: tables to fill; NULL while counting */
    char *str, *str_end;     /* fill pass: free part of the string area */
    int nt, nm, cap_nt, cap_nm, have_meta;
    size_t nstr;             /* string bytes (NULs included) the tables need */
} mhe__st_pass;

/* store the string at byte `at` (already checked) in the string area during
   the fill pass, or count its bytes during the first pass */
static const char *mhe__st_keep(mhe__st_pass *p, size_t at, size_t len) {
    size_t save = p->j.pos, n2 = 0;
    char *out = p->str;
    if (!p->st) { p->nstr += len + 1; return NULL; }
    MHE_ASSERT(len < (size_t)(p->str_end - p->str));
    p->j.pos = at;
    mhe__json_string(&p->j, out, len, &n2);
    MHE_ASSERT(n2 == len);
    out[len] = 0;
    p->str += len + 1;
    p->j.pos = save;
    return out;
}

static mhe_status mhe__st_uint(mhe__st_pass *p, const char *show, const char *field, uint64_t *v) {
    mhe__json *j = &p->j;
    mhe__json_num num;
    size_t at = j->pos, w;
    mhe_status s;
    int c = mhe__json_peek(j);
    if (c != '-' && !mhe__isdigit(c))
        return mhe__fail(j->err, MHE_ERR_HEADER, "tensor '%s': %s must hold integers, found %s", show, field, mhe__json_kind(j));
    if ((s = mhe__json_number(j, &num)) != MHE_OK) return s;
    w = j->pos - at < 30 ? j->pos - at : 30;
    if (num.neg || num.frac || num.exp)
        return mhe__fail(j->err, MHE_ERR_HEADER, "tensor '%s': %s must hold non-negative integers, found %.*s",
                         show, field, (int)w, (const char *)j->s + at);
    if (num.big)
        return mhe__fail(j->err, MHE_ERR_HEADER, "tensor '%s': %s value %.*s is above 2^53",
                         show, field, (int)w, (const char *)j->s + at);
    *v = num.v;
    return MHE_OK;
}

/* "[d0, d1, ...]" for messages */
static void mhe__st_fmt_shape(char *dst, size_t cap, const int64_t *shape, int nd) {
    size_t n = 0;
    int i;
    if (cap < 2) return;
    dst[n++] = '[';
    for (i = 0; i < nd; i++) {
        char tmp[24];
        int k = 0;
        uint64_t v = (uint64_t)shape[i];
        do { tmp[k++] = (char)('0' + v % 10); v /= 10; } while (v);
        if (i && n + 2 < cap) { dst[n++] = ','; dst[n++] = ' '; }
        while (k > 0 && n + 1 < cap) dst[n++] = tmp[--k];
    }
    if (n + 1 < cap) dst[n++] = ']';
    dst[n] = 0;
}

/* one tensor entry {"dtype": .., "shape": [..], "data_offsets": [b, e]} */
static mhe_status mhe__st_entry(mhe__st_pass *p, const char *show, size_t data_size,
                                mhe_st_tensor *t, uint64_t *begin, uint64_t *end) {
    mhe__json *j = &p->j;
    static const char two[] = "tensor '%s': data_offsets must hold exactly two integers [begin, end]";
    char *err = j->err, key[48], kshow[48], sh[200];
    size_t klen;
    mhe_status s;
    int seen = 0, i, dsize, has_zero = 0;
    uint64_t count = 1, nbytes;
    memset(t, 0, sizeof *t);
    *begin = *end = 0;
    if (mhe__json_peek(j) != '{')
        return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': expected an object, found %s", show, mhe__json_kind(j));
    j->pos++;
    mhe__json_ws(j);
    if (mhe__json_peek(j) == '}') j->pos++;
    else for (;;) {
        int bit;
        mhe__json_ws(j);
        if ((s = mhe__json_string(j, key, sizeof key, &klen)) != MHE_OK) return s;
        if ((s = mhe__json_expect(j, ':', "expected ':' after an object key")) != MHE_OK) return s;
        if (klen == 5 && !memcmp(key, "dtype", 5)) bit = 1;
        else if (klen == 5 && !memcmp(key, "shape", 5)) bit = 2;
        else if (klen == 12 && !memcmp(key, "data_offsets", 12)) bit = 4;
        else return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': unknown field '%s'", show,
                              mhe__st_show(kshow, key, klen < sizeof key ? klen : sizeof key));
        if (seen & bit) return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': field '%.*s' given twice", show, (int)klen, key);
        seen |= bit;
        if (bit == 1) {
            char v[48];
            size_t vlen;
            if (mhe__json_peek(j) != '"')
                return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': dtype must be a string, found %s", show, mhe__json_kind(j));
            if ((s = mhe__json_string(j, v, sizeof v, &vlen)) != MHE_OK) return s;
            for (t->dtype = 0; t->dtype < MHE__ST_NDTYPES; t->dtype++)
                if (vlen == strlen(mhe__st_dtypes[t->dtype].name) && !memcmp(v, mhe__st_dtypes[t->dtype].name, vlen)) break;
            if (t->dtype == MHE__ST_NDTYPES)
                return mhe__fail(err, MHE_ERR_DTYPE, "tensor '%s': unknown or unsupported dtype '%s'", show,
                                 mhe__st_show(kshow, v, vlen));
        } else if (bit == 2) {
            if (mhe__json_peek(j) != '[')
                return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': shape must be an array of integers, found %s", show, mhe__json_kind(j));
            j->pos++;
            mhe__json_ws(j);
            if (mhe__json_peek(j) == ']') j->pos++;
            else for (;;) {
                uint64_t v;
                mhe__json_ws(j);
                if (t->ndim == MHE_ST_MAX_DIMS)
                    return mhe__fail(err, MHE_ERR_OVERFLOW, "tensor '%s': shape has more than %d dimensions", show, MHE_ST_MAX_DIMS);
                if ((s = mhe__st_uint(p, show, "shape", &v)) != MHE_OK) return s;
                t->shape[t->ndim++] = (int64_t)v;
                mhe__json_ws(j);
                if (mhe__json_peek(j) == ']') { j->pos++; break; }
                if ((s = mhe__json_expect(j, ',', "expected ',' or ']' in an array")) != MHE_OK) return s;
            }
        } else {
            if (mhe__json_peek(j) != '[')
                return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': data_offsets must be an array [begin, end], found %s",
                                 show, mhe__json_kind(j));
            j->pos++;
            mhe__json_ws(j);
            if (mhe__json_peek(j) == ']') return mhe__fail(err, MHE_ERR_HEADER, two, show);
            if ((s = mhe__st_uint(p, show, "data_offsets", begin)) != MHE_OK) return s;
            mhe__json_ws(j);
            if (mhe__json_peek(j) != ',') return mhe__fail(err, MHE_ERR_HEADER, two, show);
            j->pos++;
            mhe__json_ws(j);
            if ((s = mhe__st_uint(p, show, "data_offsets", end)) != MHE_OK) return s;
            mhe__json_ws(j);
            if (mhe__json_peek(j) != ']') return mhe__fail(err, MHE_ERR_HEADER, two, show);
            j->pos++;
        }
        mhe__json_ws(j);
        if (mhe__json_peek(j) == '}') { j->pos++; break; }
        if ((s = mhe__json_expect(j, ',', "expected ',' or '}' in an object")) != MHE_OK) return s;
    }
    if (seen != 7)
        return mhe__fail(err, MHE_ERR_HEADER, "tensor '%s': missing field '%s'", show,
                         !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");

    /* sizes: every dim is <= 2^53; the product of the non-zero dims must fit
       in int64 whatever the order, even when another dim is 0 */
    for (i = 0; i < t->ndim; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (d == 0) { has_zero = 1; continue; }
        if (count > (uint64_t)INT64_MAX / d) {
            mhe__st_fmt_shape(sh, sizeof sh, t->shape, t->ndim);
            return mhe__fail(err, MHE_ERR_OVERFLOW, "tensor '%s': element count of shape %s overflows", show, sh);
        }
        count *= d;
    }
    if (has_zero) count = 0;
    dsize = mhe__st_dtypes[t->dtype].size;
    if (count > (uint64_t)INT64_MAX / (uint64_t)dsize || count * (uint64_t)dsize > (uint64_t)SIZE_MAX) {
        mhe__st_fmt_shape(sh, sizeof sh, t->shape, t->ndim);
        return mhe__fail(err, MHE_ERR_OVERFLOW, "tensor '%s': byte size of shape %s overflows", show, sh);
    }
    nbytes = count * (uint64_t)dsize;
    t->size = (int64_t)count;
    t->nbytes = (size_t)nbytes;
    if (*begin > *end)
        return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s': data_offsets [%llu, %llu] end before they begin", show,
                         (unsigned long long)*begin, (unsigned long long)*end);
    if (*end - *begin != nbytes) {
        mhe__st_fmt_shape(sh, sizeof sh, t->shape, t->ndim);
        return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s': %s %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
                         show, mhe__st_dtypes[t->dtype].name, sh, (unsigned long long)nbytes,
                         (unsigned long long)*begin, (unsigned long long)*end, (unsigned long long)(*end - *begin));
    }
    if (*end > (uint64_t)data_size)
        return mhe__fail(err, MHE_ERR_OFFSET, "tensor '%s': data_offsets end %llu lies beyond the data section (%llu bytes)",
                         show, (unsigned long long)*end, (unsigned long long)data_size);
    return MHE_OK;
}

/* "__metadata__": {"key": "value", ...} (null is taken as no metadata) */
static mhe_status mhe__st_meta_obj(mhe__st_pass *p) {
    mhe__json *j = &p->j;
    char kb[48], show[48];
    mhe_status s;
    size_t klen, vlen, kat, vat;
    if (mhe__json_peek(j) == 'n') return mhe__json_literal(j, "null");
    if (mhe__json_peek(j) != '{')
        return mhe__fail(j->err, MHE_ERR_HEADER, "__metadata__ must be an object of strings, found %s", mhe__json_kind(j));
    j->pos++;
    mhe__json_ws(j);
    if (mhe__json_peek(j) == '}') { j->pos++; return MHE_OK; }
    for (;;) {
        const char *k, *v;
        mhe__json_ws(j);
        kat = j->pos;
        if ((s = mhe__json_string(j, kb, sizeof kb, &klen)) != MHE_OK) return s;
        if ((s = mhe__json_expect(j, ':', "expected ':' after an object key")) != MHE_OK) return s;
        if (mhe__json_peek(j) != '"')
            return mhe__fail(j->err, MHE_ERR_HEADER, "__metadata__ value of key '%s' must be a string, found %s",
                             mhe__st_show(show, kb, klen), mhe__json_kind(j));
        vat = j->pos;
        if ((s = mhe__json_string(j, NULL, 0, &vlen)) != MHE_OK) return s;
        if (p->nm == INT_MAX) return mhe__fail(j->err, MHE_ERR_OVERFLOW, "too many __metadata__ entries");
        k = mhe__st_keep(p, kat, klen);
        v = mhe__st_keep(p, vat, vlen);
        if (p->st) {
            MHE_ASSERT(p->nm < p->cap_nm);
            p->st->meta_keys[p->nm] = k;
            p->st->meta_values[p->nm] = v;
        }
        p->nm++;
        mhe__json_ws(j);
        if (mhe__json_peek(j) == '}') { j->pos++; return MHE_OK; }
        if ((s = mhe__json_expect(j, ',', "expected ',' or '}' in an object")) != MHE_OK) return s;
    }
}

static mhe_status mhe__st_run(mhe__st_pass *p, size_t data_size) {
    mhe__json *j = &p->j;
    char nb[48], show[48];
    mhe_status s;
    j->pos = 0;
    if ((s = mhe__json_expect(j, '{', "expected '{'")) != MHE_OK) return s;
    if (mhe__json_peek(j) == '}') return MHE_OK;
    for (;;) {
        size_t at, klen;
        mhe__json_ws(j);
        at = j->pos;
        if ((s = mhe__json_string(j, nb, sizeof nb, &klen)) != MHE_OK) return s;
        if ((s = mhe__json_expect(j, ':', "expected ':' after an object key")) != MHE_OK) return s;
        if (klen == 12 && !memcmp(nb, "__metadata__", 12)) {
            if (p->have_meta) return mhe__fail(j->err, MHE_ERR_HEADER, "__metadata__ given twice");
            p->have_meta = 1;
            if ((s = mhe__st_meta_obj(p)) != MHE_OK) return s;
        } else {
            mhe_st_tensor t;
            uint64_t b, e;
            if (p->nt == INT_MAX) return mhe__fail(j->err, MHE_ERR_OVERFLOW, "too many tensors");
            mhe__st_show(show, nb, klen);
            if ((s = mhe__st_entry(p, show, data_size, &t, &b, &e)) != MHE_OK) return s;
            t.name = mhe__st_keep(p, at, klen);
            if (p->st) {
                MHE_ASSERT(p->nt < p->cap_nt);
                t.offset = b;
                t.data = p->st->data ? p->st->data + b : NULL;   /* NULL: a header-only parse (mhe__st_parse_head) */
                p->st->tensors[p->nt] = t;
            }
            p->nt++;
        }
        mhe__json_ws(j);
        if (mhe__json_peek(j) == '}') { j->pos++; return MHE_OK; }
        if ((s = mhe__json_expect(j, ',', "expected ',' or '}' in an object")) != MHE_OK) return s;
    }
}

static int mhe__st_cmp_name(const void *a, const void *b) {
    return strcmp((*(const mhe_st_tensor *const *)a)->name, (*(const mhe_st_tensor *const *)b)->name);
}

/* by (begin, end), then table position so that the order is total */
static int mhe__st_cmp_range(const void *a, const void *b) {
    const mhe_st_tensor *x = *(const mhe_st_tensor *const *)a, *y = *(const mhe_st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

static int mhe__st_cmp_key(const void *a, const void *b) {
    return strcmp(**(const char **const *)a, **(const char **const *)b);
}

/* The block holds, in order: tensors[nt], by_name[nt] (sorted by name, kept
   for mhe_st_find), by_range[nt] (scratch), meta_keys[nm], meta_values[nm],
   meta_sorted[nm] (pointers into meta_keys, sorted, kept for mhe_st_meta),
   then the strings. */
static const mhe_st_tensor **mhe__st_by_name(const mhe_safetensors *st) {
    return (const mhe_st_tensor **)(void *)(st->tensors + st->n_tensors);
}
static const char ***mhe__st_meta_sorted(const mhe_safetensors *st) {
    return (const char ***)(void *)(st->meta_values + st->n_meta);
}

/* names and metadata keys unique; the ranges, sorted, tile the data section */
static mhe_status mhe__st_check_tables(mhe_safetensors *st) {
    int i, nt = st->n_tensors, nm = st->n_meta;
    const mhe_st_tensor **by_name = mhe__st_by_name(st), **by_range = by_name + nt;
    const char ***ms = mhe__st_meta_sorted(st);
    char show[48], show2[48];
    uint64_t off = 0;
    for (i = 0; i < nt; i++) by_name[i] = by_range[i] = &st->tensors[i];
    if (nt > 1) qsort((void *)by_name, (size_t)nt, sizeof *by_name, mhe__st_cmp_name);
    for (i = 1; i < nt; i++)
        if (!strcmp(by_name[i - 1]->name, by_name[i]->name))
            return mhe__fail(st->err, MHE_ERR_HEADER, "duplicate tensor name '%s'",
                             mhe__st_show(show, by_name[i]->name, strlen(by_name[i]->name)));
    for (i = 0; i < nm; i++) ms[i] = &st->meta_keys[i];
    if (nm > 1) qsort((void *)ms, (size_t)nm, sizeof *ms, mhe__st_cmp_key);
    for (i = 1; i < nm; i++)
        if (!strcmp(*ms[i - 1], *ms[i]))
            return mhe__fail(st->err, MHE_ERR_HEADER, "duplicate __metadata__ key '%s'", mhe__st_show(show, *ms[i], strlen(*ms[i])));
    if (nt > 1) qsort((void *)by_range, (size_t)nt, sizeof *by_range, mhe__st_cmp_range);
    for (i = 0; i < nt; i++) {
        const mhe_st_tensor *t = by_range[i];
        uint64_t b = t->offset;
        if (b < off)
            return mhe__fail(st->err, MHE_ERR_OFFSET, "tensors '%s' and '%s' overlap in the data section (bytes %llu..%llu)",
                             mhe__st_show(show, by_range[i - 1]->name, strlen(by_range[i - 1]->name)),
                             mhe__st_show(show2, t->name, strlen(t->name)), (unsigned long long)b, (unsigned long long)off);
        if (b > off)
            return mhe__fail(st->err, MHE_ERR_OFFSET, "gap in the data section: bytes %llu..%llu before tensor '%s' belong to no tensor",
                             (unsigned long long)off, (unsigned long long)b, mhe__st_show(show, t->name, strlen(t->name)));
        off = b + t->nbytes;
    }
    if (off != (uint64_t)st->data_size)
        return mhe__fail(st->err, MHE_ERR_OFFSET, "bytes %llu..%llu at the end of the data section belong to no tensor",
                         (unsigned long long)off, (unsigned long long)st->data_size);
    return MHE_OK;
}

static mhe_status mhe__st_parse_head(mhe_safetensors *st, const void *buf, size_t size, uint64_t file_size, void *alloc_ctx,
                                     mhe_arena *arena);
static mhe_status mhe__st_parse(mhe_safetensors *st, const void *buf, size_t size, void *alloc_ctx, mhe_arena *arena) {
    return mhe__st_parse_head(st, buf, size, size, alloc_ctx, arena);
}

MHEDEF mhe_status mhe_st_parse(mhe_safetensors *st, const void *buf, size_t size, void *alloc_ctx) {
    return mhe__st_parse(st, buf, size, alloc_ctx, NULL);
}

/* buf holds the first `size` bytes of a file of file_size bytes: all of it,
   or (size < file_size) the header only, for a loader that reads the data
   section itself (mhe_model_load): the same checks, and the tensors get
   their offsets but data == NULL */
static mhe_status mhe__st_parse_head(mhe_safetensors *st, const void *buf, size_t size, uint64_t file_size, void *alloc_ctx,
                                     mhe_arena *arena) {
    const unsigned char *b = (const unsigned char *)buf;
    uint64_t hl = 0;
    size_t total, t_bytes;
    mhe__st_pass p;
    mhe_status s;
    int i, ok = 1;
    if (!st) return MHE_ERR_ARG;
    memset(st, 0, sizeof *st);
    st->alloc_ctx = alloc_ctx;
    st->arena = arena;
    if (!b && size) return mhe__fail(st->err, MHE_ERR_ARG, "safetensors buffer is NULL");
    if (size < 8)
        return mhe__fail(st->err, MHE_ERR_TRUNCATED, "file of %llu bytes is too short for the 8-byte header length",
                         (unsigned long long)size);
    for (i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    if (hl > file_size - 8)
        return mhe__fail(st->err, MHE_ERR_TRUNCATED, "header length %llu larger than file (%llu bytes)",
                         (unsigned long long)hl, (unsigned long long)file_size);
    if (hl > MHE_ST_MAX_HEADER)
        return mhe__fail(st->err, MHE_ERR_HEADER, "header length %llu exceeds the limit of %llu bytes",
                         (unsigned long long)hl, (unsigned long long)MHE_ST_MAX_HEADER);
    if (hl == 0) return mhe__fail(st->err, MHE_ERR_HEADER, "empty JSON header");
    if (file_size != size && (file_size < size || hl > (uint64_t)(size - 8) || file_size - 8 - hl > (uint64_t)SIZE_MAX))
        return mhe__fail(st->err, MHE_ERR_ARG, "safetensors: the header is not all in the buffer");

    /* syntax first, so that every later pass walks well-formed JSON */
    memset(&p, 0, sizeof p);
    p.j.s = b + 8;
    p.j.n = (size_t)hl;
    p.j.err = st->err;
    mhe__json_ws(&p.j);
    if (mhe__json_peek(&p.j) != '{')
        return mhe__json_err(&p.j, p.j.pos, "the header must be a JSON object");
    if ((s = mhe__json_skip(&p.j, 0)) != MHE_OK) return s;
    mhe__json_ws(&p.j);
    if (p.j.pos != p.j.n) return mhe__json_err(&p.j, p.j.pos, "unexpected data after the JSON object");

    st->data = file_size == size ? b + 8 + (size_t)hl : NULL;
    st->data_size = (size_t)(file_size - 8 - hl);
    if ((s = mhe__st_run(&p, st->data_size)) != MHE_OK) { st->data = NULL; st->data_size = 0; return s; }

    /* one block; every count is bounded by the header size, so it is never
       much larger than the header itself */
    t_bytes = mhe__mul_size((size_t)p.nt, sizeof(mhe_st_tensor) + 2 * sizeof(const mhe_st_tensor *), &ok);
    total = mhe__add_size(t_bytes, mhe__mul_size((size_t)p.nm, 2 * sizeof(const char *) + sizeof(const char **), &ok), &ok);
    total = mhe__add_size(total, p.nstr + 1, &ok);
    if (!ok) { st->data = NULL; st->data_size = 0; return mhe__fail(st->err, MHE_ERR_OVERFLOW, "header tables too large"); }
    st->storage_ = mhe__malloc(alloc_ctx, arena, total);
    st->storage_bytes = total;
    if (!st->storage_) {
        st->data = NULL; st->data_size = 0;
        return mhe__fail(st->err, MHE_ERR_NOMEM, "cannot allocate %llu bytes for the safetensors tables", (unsigned long long)total);
    }
    st->tensors = (mhe_st_tensor *)st->storage_;
    st->meta_keys = (const char **)(void *)((char *)st->storage_ + t_bytes);
    st->meta_values = st->meta_keys + p.nm;
    p.cap_nt = p.nt;
    p.cap_nm = p.nm;
    p.str = (char *)(void *)((const char ***)(void *)(st->meta_values + p.nm) + p.nm);
    p.str_end = (char *)st->storage_ + total;
    p.nt = p.nm = p.have_meta = 0;
    p.st = st;
    s = mhe__st_run(&p, st->data_size);
    MHE_ASSERT(s != MHE_OK || (p.nt == p.cap_nt && p.nm == p.cap_nm));
    st->n_tensors = p.nt;
    st->n_meta = p.nm;
    if (s == MHE_OK) s = mhe__st_check_tables(st);
    if (s != MHE_OK) {
        char keep[MHE_ERR_LEN];
        memcpy(keep, st->err, MHE_ERR_LEN);
        mhe_st_free(st);
        memcpy(st->err, keep, MHE_ERR_LEN);
        st->alloc_ctx = alloc_ctx;
        st->arena = arena;
        return s;
    }
    if (p.nm == 0) st->meta_keys = st->meta_values = NULL;
    st->err[0] = 0;
    return MHE_OK;
}

MHEDEF void mhe_st_free(mhe_safetensors *st) {
    if (!st) return;
    if (st->storage_) mhe__free(st->alloc_ctx, st->arena, st->storage_);
    memset(st, 0, sizeof *st);
}

MHEDEF const mhe_st_tensor *mhe_st_find(const mhe_safetensors *st, const char *name) {
    int lo = 0, hi, i;
    if (!st || !name || st->n_tensors <= 0 || !st->tensors) return NULL;
    if (!st->storage_) { /* a table built by hand: no index */
        for (i = 0; i < st->n_tensors; i++)
            if (st->tensors[i].name && !strcmp(st->tensors[i].name, name)) return &st->tensors[i];
        return NULL;
    }
    {
        const mhe_st_tensor *const *idx = mhe__st_by_name(st);
        hi = st->n_tensors - 1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2, c = strcmp(idx[mid]->name, name);
            if (!c) return idx[mid];
            if (c < 0) lo = mid + 1; else hi = mid - 1;
        }
    }
    return NULL;
}

MHEDEF const char *mhe_st_meta(const mhe_safetensors *st, const char *key) {
    int lo = 0, hi, i;
    if (!st || !key || st->n_meta <= 0 || !st->meta_keys || !st->meta_values) return NULL;
    if (!st->storage_) {
        for (i = 0; i < st->n_meta; i++)
            if (st->meta_keys[i] && !strcmp(st->meta_keys[i], key)) return st->meta_values[i];
        return NULL;
    }
    {
        const char *const *const *idx = (const char *const *const *)mhe__st_meta_sorted(st);
        hi = st->n_meta - 1;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2, c = strcmp(*idx[mid], key);
            if (!c) return st->meta_values[idx[mid] - st->meta_keys];
            if (c < 0) lo = mid + 1; else hi = mid - 1;
        }
    }
    return NULL;
}

MHEDEF mhe_status mhe_st_read_f32(const mhe_safetensors *st, const mhe_st_tensor *t, float *out, int64_t n) {
    if (!st || !t || (!out && n > 0)) return MHE_ERR_ARG;
    if (t->dtype != MHE_DTYPE_F32) return MHE_ERR_DTYPE;
    if (n != t->size || t->size < 0 || (uint64_t)t->size > (uint64_t)(SIZE_MAX / 4) || t->nbytes != (size_t)t->size * 4)
        return MHE_ERR_SHAPE;
    if (t->nbytes && (!t->data || (st->data && (t->data < st->data || (size_t)(t->data - st->data) > st->data_size ||
                      t->nbytes > st->data_size - (size_t)(t->data - st->data)))))
        return MHE_ERR_OFFSET;   /* a header-only view: data points at the bytes its loader read */
    mhe__f32_from_le(out, t->data, (size_t)t->size);
    return MHE_OK;
}

MHEDEF mhe_status mhe_st_read_i32(const mhe_safetensors *st, const mhe_st_tensor *t, int32_t *out, int64_t n) {
    size_t i;
    if (!st || !t || (!out && n > 0)) return MHE_ERR_ARG;
    if (t->dtype != MHE_DTYPE_I32) return MHE_ERR_DTYPE;
    if (n != t->size || t->size < 0 || (uint64_t)t->size > (uint64_t)(SIZE_MAX / 4) || t->nbytes != (size_t)t->size * 4)
        return MHE_ERR_SHAPE;
    if (t->nbytes && (!t->data || (st->data && (t->data < st->data || (size_t)(t->data - st->data) > st->data_size ||
                      t->nbytes > st->data_size - (size_t)(t->data - st->data)))))
        return MHE_ERR_OFFSET;   /* a header-only view: data points at the bytes its loader read */
    for (i = 0; i < (size_t)t->size; i++) {   /* little-endian two's complement, any host */
        const unsigned char *b = t->data + 4 * i;
        uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        memcpy(out + i, &w, 4);
    }
    return MHE_OK;
}

/* ---- writer ---------------------------------------------------------------- */

/* an output cursor; with out == NULL it only measures */
typedef struct mhe__wbuf { unsigned char *out; size_t n; int ok; } mhe__wbuf;

static void mhe__wput(mhe__wbuf *w, const void *s, size_t len) {
    if (w->out && w->ok) memcpy(w->out + w->n, s, len);
    w->n = mhe__add_size(w->n, len, &w->ok);
}

static void mhe__wput_u64(mhe__wbuf *w, uint64_t v) {
    char tmp[24];
    int k = 24;
    do { tmp[--k] = (char)('0' + v % 10); v /= 10; } while (v);
    mhe__wput(w, tmp + k, (size_t)(24 - k));
}

/* a JSON string: quotes, backslashes and control characters escaped; the
   rest (checked UTF-8) is copied as is */
static void mhe__wput_jstr(mhe__wbuf *w, const char *s) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0;
    mhe__wput(w, "\"", 1);
    for (;; p++) {
        unsigned c = *p;
        char e[6];
        size_t k = 2;
        if (c >= 0x20 && c != '"' && c != '\\') { run++; continue; }
        mhe__wput(w, p - run, run); /* the plain bytes before this one */
        run = 0;
        if (!c) break;
        e[0] = '\\';
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        default: e[1] = 'u'; e[2] = '0'; e[3] = '0'; e[4] = hex[c >> 4]; e[5] = hex[c & 15]; k = 6;
        }
        mhe__wput(w, e, k);
    }
    mhe__wput(w, "\"", 1);
}

/* an item's 4-byte words (F32 or I32 alike: they are only copied and byte-swapped) */
static const float *mhe__st_item_words(const mhe_st_item *it) {
    return it->dtype == MHE_DTYPE_I32 ? (const float *)(const void *)it->data_i32 : it->data;
}

/* 1 when the item has its bytes (stored or computed) */
static int mhe__st_item_has_data(const mhe_st_item *it) {
    if (it->q8_from) return it->dtype != MHE_DTYPE_I32 && it->q8_group > 0 && it->q8_cols > 0 && it->q8_cols % it->q8_group == 0;
    if (it->q8_data) return it->dtype == MHE_DTYPE_F32 && it->q8_scale && it->q8_group > 0;
    return it->dtype == MHE_DTYPE_I8 ? it->data_i8 != NULL : mhe__st_item_words(it) != NULL;
}

/* An item's data bytes, handed to put in pieces of at most 4 KB when they
   are computed or byte-swapped; 0 when put fails. */
typedef int (*mhe__st_put)(void *ctx, const void *p, size_t n);
static int mhe__st_emit(const mhe_st_item *it, uint64_t count, mhe__st_put put, void *ctx) {
    union { unsigned char b[4096]; int8_t q[4096]; float f[1024]; } tmp;
    size_t n = (size_t)count, k = 0, i;
    int le = mhe__little_endian();
    if (it->q8_from && it->dtype == MHE_DTYPE_I8) {   /* group by group: the scale, then its int8 values */
        size_t g = (size_t)it->q8_group, j;
        for (i = 0; i < n; i += g) {
            float inv = 1.0f / mhe__q8_scale(it->q8_from + i, (int)g);
            for (j = 0; j < g; j++) {
                tmp.q[k++] = mhe__q8_round(it->q8_from[i + j], inv);
                if (k == sizeof tmp.q) { if (!put(ctx, tmp.q, k)) return 0; k = 0; }
            }
        }
        return k ? put(ctx, tmp.q, k) : 1;
    }
    if (it->q8_from || it->q8_data) {   /* F32: the scales of q8_from, or q8_data dequantized */
        for (i = 0; i < n; i++) {
            float v = it->q8_from ? mhe__q8_scale(it->q8_from + i * (size_t)it->q8_group, it->q8_group)
                                  : (float)it->q8_data[i] * it->q8_scale[i / (size_t)it->q8_group];
            mhe__f32_to_le(tmp.b + 4 * k, &v, 1);
            if (++k == sizeof tmp.f / sizeof tmp.f[0]) { if (!put(ctx, tmp.b, 4 * k)) return 0; k = 0; }
        }
        return k ? put(ctx, tmp.b, 4 * k) : 1;
    }
    if (it->dtype == MHE_DTYPE_I8) return n ? put(ctx, it->data_i8, n) : 1;
    if (le) return n ? put(ctx, mhe__st_item_words(it), 4 * n) : 1;
    for (i = 0; i < n; i += k) {
        k = n - i < 1024 ? n - i : 1024;
        mhe__f32_to_le(tmp.b, mhe__st_item_words(it) + i, k);
        if (!put(ctx, tmp.b, 4 * k)) return 0;
    }
    return 1;
}

static int mhe__st_put_mem(void *ctx, const void *p, size_t n) {
    unsigned char **dst = (unsigned char **)ctx;
    memcpy(*dst, p, n);
    *dst += n;
    return 1;
}

static uint64_t mhe__st_item_elsize(const mhe_st_item *it) { return it->dtype == MHE_DTYPE_I8 ? 1 : 4; }

static uint64_t mhe__st_item_count(const mhe_st_item *it) {
    uint64_t c = 1;
    int d;
    for (d = 0; d < it->ndim; d++) c *= (uint64_t)it->shape[d]; /* checked by mhe__st_check_items */
    return c;
}

static mhe_status mhe__st_check_items(const mhe_st_item *items, int n_items, const char *const *meta_keys,
                                      const char *const *meta_values, int n_meta, char *err, uint64_t *data_bytes) {
    char show[48], sh[200];
    uint64_t total = 0;
    int i, k, d;
    *data_bytes = 0;
    if (n_items < 0 || (n_items > 0 && !items))
        return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: items is NULL or n_items (%d) is negative", n_items);
    if (n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
        return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: metadata arrays are NULL or n_meta (%d) is negative", n_meta);
    for (i = 0; i < n_items; i++) {
        const mhe_st_item *it = &items[i];
        uint64_t count = 1, nz = 1;
        int big = 0;
        size_t len;
        if (!it->name) return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: item %d has a NULL name", i);
        len = strlen(it->name);
        mhe__st_show(show, it->name, len);
        if (!mhe__utf8_valid(it->name, len))
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: name of item %d ('%s') is not valid UTF-8", i, show);
        if (!strcmp(it->name, "__metadata__"))
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: '__metadata__' cannot name a tensor (item %d)", i);
        if (it->ndim < 0 || it->ndim > MHE_ST_MAX_DIMS)
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: tensor '%s' has ndim %d, outside 0..%d", show, it->ndim, MHE_ST_MAX_DIMS);
        for (d = 0; d < it->ndim; d++) {
            uint64_t v;
            if (it->shape[d] < 0)
                return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: tensor '%s' has negative dimension %d (%lld)", show, d,
                                 (long long)it->shape[d]);
            v = (uint64_t)it->shape[d];
            /* the header's numbers must stay exact (<= 2^53), as readers require;
               a tensor with a zero dimension has no bytes, whatever the others */
            if (v > MHE__JSON_MAX_INT) big = 2;
            if (v == 0) { count = 0; continue; }
            if (nz > MHE__JSON_MAX_INT / 4 / v) big |= 1; else nz *= v;
        }
        if (big > 1 || (big && count)) {
            mhe__st_fmt_shape(sh, sizeof sh, it->shape, it->ndim);
            return mhe__fail(err, MHE_ERR_OVERFLOW, "safetensors writer: tensor '%s' of shape %s is too large", show, sh);
        }
        if (count) count = nz;
        if (it->dtype != MHE_DTYPE_F32 && it->dtype != MHE_DTYPE_I32 && it->dtype != MHE_DTYPE_I8)
            return mhe__fail(err, MHE_ERR_DTYPE, "safetensors writer: tensor '%s' has dtype %d; the writer takes F32, I32 and I8",
                             show, it->dtype);
        if (count && !mhe__st_item_has_data(it))
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: tensor '%s' has NULL data", show);
        if (count * 4 > MHE__JSON_MAX_INT - total || count * 4 > (uint64_t)(SIZE_MAX / 2) - total)
            return mhe__fail(err, MHE_ERR_OVERFLOW, "safetensors writer: total data size overflows at tensor '%s'", show);
        total += count * mhe__st_item_elsize(it);
        /* quadratic, but a checkpoint has hundreds of tensors, not millions */
        for (k = 0; k < i; k++)
            if (!strcmp(items[k].name, it->name))
                return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: duplicate tensor name '%s' (items %d and %d)", show, k, i);
    }
    for (i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i])
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: metadata entry %d has a NULL key or value", i);
        mhe__st_show(show, meta_keys[i], strlen(meta_keys[i]));
        if (!mhe__utf8_valid(meta_keys[i], strlen(meta_keys[i])) || !mhe__utf8_valid(meta_values[i], strlen(meta_values[i])))
            return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: metadata entry '%s' is not valid UTF-8", show);
        for (k = 0; k < i; k++)
            if (!strcmp(meta_keys[k], meta_keys[i]))
                return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: duplicate metadata key '%s'", show);
    }
    *data_bytes = total;
    return MHE_OK;
}

/* the JSON header, unpadded */
static void mhe__st_header(mhe__wbuf *w, const mhe_st_item *items, int n_items, const char *const *meta_keys,
                           const char *const *meta_values, int n_meta) {
    uint64_t off = 0;
    int i, d;
    mhe__wput(w, "{", 1);
    if (n_meta > 0) {
        mhe__wput(w, "\"__metadata__\":{", 16);
        for (i = 0; i < n_meta; i++) {
            if (i) mhe__wput(w, ",", 1);
            mhe__wput_jstr(w, meta_keys[i]);
            mhe__wput(w, ":", 1);
            mhe__wput_jstr(w, meta_values[i]);
        }
        mhe__wput(w, "}", 1);
    }
    for (i = 0; i < n_items; i++) {
        const mhe_st_item *it = &items[i];
        if (i || n_meta > 0) mhe__wput(w, ",", 1);
        mhe__wput_jstr(w, it->name);
        if (it->dtype == MHE_DTYPE_I8) mhe__wput(w, ":{\"dtype\":\"I8\",\"shape\":[", 24);
        else mhe__wput(w, it->dtype == MHE_DTYPE_I32 ? ":{\"dtype\":\"I32\",\"shape\":[" : ":{\"dtype\":\"F32\",\"shape\":[", 25);
        for (d = 0; d < it->ndim; d++) {
            if (d) mhe__wput(w, ",", 1);
            mhe__wput_u64(w, (uint64_t)it->shape[d]);
        }
        mhe__wput(w, "],\"data_offsets\":[", 18);
        mhe__wput_u64(w, off);
        mhe__wput(w, ",", 1);
        off += mhe__st_item_count(it) * mhe__st_item_elsize(it);
        mhe__wput_u64(w, off);
        mhe__wput(w, "]}", 2);
    }
    mhe__wput(w, "}", 1);
}

/* validate, then measure: JSON length, padded length, file size */
static mhe_status mhe__st_layout(const mhe_st_item *items, int n_items, const char *const *meta_keys,
                                 const char *const *meta_values, int n_meta, char *err,
                                 size_t *json_len, size_t *padded, size_t *total) {
    uint64_t data_bytes;
    mhe__wbuf w = {NULL, 0, 1};
    int ok = 1;
    mhe_status s = mhe__st_check_items(items, n_items, meta_keys, meta_values, n_meta, err, &data_bytes);
    if (s != MHE_OK) return s;
    mhe__st_header(&w, items, n_items, meta_keys, meta_values, n_meta);
    *json_len = w.n;
    *padded = mhe__add_size(w.n, 7, &w.ok) & ~(size_t)7; /* 8 + header stays 8-aligned */
    *total = mhe__add_size(mhe__add_size(8, *padded, &ok), (size_t)data_bytes, &ok);
    if (!w.ok || !ok || *padded > MHE_ST_MAX_HEADER)
        return mhe__fail(err, MHE_ERR_OVERFLOW, "safetensors writer: header or file size too large");
    return MHE_OK;
}

/* 8-byte length, JSON, padding spaces into dst[8 + padded] */
static void mhe__st_put_header(unsigned char *dst, size_t json_len, size_t padded, const mhe_st_item *items, int n_items,
                               const char *const *meta_keys, const char *const *meta_values, int n_meta) {
    mhe__wbuf w;
    uint64_t v = padded;
    int i;
    for (i = 0; i < 8; i++) { dst[i] = (unsigned char)(v & 0xff); v >>= 8; }
    w.out = dst + 8; w.n = 0; w.ok = 1;
    mhe__st_header(&w, items, n_items, meta_keys, meta_values, n_meta);
    MHE_ASSERT(w.ok && w.n == json_len);
    memset(dst + 8 + json_len, ' ', padded - json_len);
}

MHEDEF mhe_status mhe_st_write_size(const mhe_st_item *items, int n_items,
                                    const char *const *meta_keys, const char *const *meta_values,
                                    int n_meta, size_t *out_size, char *err) {
    size_t json_len, padded, total;
    mhe_status s;
    if (out_size) *out_size = 0;
    if (!out_size) return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: out_size is NULL");
    s = mhe__st_layout(items, n_items, meta_keys, meta_values, n_meta, err, &json_len, &padded, &total);
    if (s == MHE_OK) *out_size = total;
    return s;
}

MHEDEF mhe_status mhe_st_write_mem(void *buf, size_t cap, size_t *written,
                                   const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, char *err) {
    size_t json_len, padded, total, off;
    unsigned char *dst = (unsigned char *)buf;
    mhe_status s;
    int i;
    if (written) *written = 0;
    s = mhe__st_layout(items, n_items, meta_keys, meta_values, n_meta, err, &json_len, &padded, &total);
    if (s != MHE_OK) return s;
    if (!dst) return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: output buffer is NULL");
    if (cap < total)
        return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: buffer of %llu bytes is too small, the file needs %llu",
                         (unsigned long long)cap, (unsigned long long)total);
    mhe__st_put_header(dst, json_len, padded, items, n_items, meta_keys, meta_values, n_meta);
    {
        unsigned char *at = dst + 8 + padded;
        for (i = 0; i < n_items; i++) (void)mhe__st_emit(&items[i], mhe__st_item_count(&items[i]), mhe__st_put_mem, &at);
        off = (size_t)(at - dst);
    }
    MHE_ASSERT(off == total);
    if (written) *written = total;
    return MHE_OK;
}

#ifndef MHE_NO_STDIO
static int mhe__st_put_out(void *ctx, const void *p, size_t n) { return mhe_out_write((mhe_out *)ctx, p, n); }

/* ---- output files: the policy of mhe_out (see its declaration) ---- */

/* the pending temporary files: a name is complete before its flag is set,
   and the flag is cleared before the name changes, so a handler that
   interrupts either never reads half a name */
static char mhe__pending_name[MHE_OUT_PENDING][MHE_PATH_LEN + 48];
static volatile sig_atomic_t mhe__pending_live[MHE_OUT_PENDING];

/* lists o->tmp before the file is created: a signal between creation and
   listing would leave it. The name holds this process's pid, so what it may
   remove is this process's own file, or a stale one a dead process with the
   same pid left */
static void mhe__pending_set(mhe_out *o) {
    int i = o->slot;
    if (i < 0)
        for (i = 0; i < MHE_OUT_PENDING && mhe__pending_live[i]; i++) {}
    if (i >= MHE_OUT_PENDING) return;   /* full: written, not listed */
    mhe__pending_live[i] = 0;
    memcpy(mhe__pending_name[i], o->tmp, strlen(o->tmp) + 1);
    mhe__pending_live[i] = 1;
    o->slot = i;
}

static void mhe__pending_drop(mhe_out *o) {
    if (o->slot >= 0 && o->slot < MHE_OUT_PENDING) mhe__pending_live[o->slot] = 0;
    o->slot = -1;
}

MHEDEF void mhe_out_remove_pending(void) {
    int i;
    for (i = 0; i < MHE_OUT_PENDING; i++)
        if (mhe__pending_live[i]) {
            mhe__pending_live[i] = 0;
#if defined(MHE__HAVE_FSYNC)
            unlink(mhe__pending_name[i]);
#elif defined(_WIN32)
            _unlink(mhe__pending_name[i]);
#else
            remove(mhe__pending_name[i]);
#endif
        }
}

#if defined(MHE__HAVE_FSYNC)
/* what a non-regular path is, for the refusal */
static const char *mhe__file_kind(unsigned mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "not a regular file";
}
#endif

/* the file a write to `path` replaces: symlinks followed; anything but a
   regular file or nothing is refused */
static mhe_status mhe__out_target(const char *path, char *target, char *err) {
    size_t n;
    if (!path || !*path) return mhe__fail(err, MHE_ERR_ARG, "output path is NULL or empty");
    n = strlen(path);
    if (n >= MHE_PATH_LEN) return mhe__fail(err, MHE_ERR_ARG, "output path of %zu bytes is too long", n);
    memcpy(target, path, n + 1);
#if defined(MHE__HAVE_FSYNC)
    {
        int hops;
        for (hops = 0;; hops++) {
            struct stat sb;
            char link[MHE_PATH_LEN];
            ssize_t k;
            size_t dir;
            errno = 0;
            if (lstat(target, &sb) != 0) {
                int e = errno;
                if (e == ENOENT) return MHE_OK;   /* absent: the commit creates it */
                if (!hops) return mhe__fail(err, MHE_ERR_IO, "cannot use '%s' as output: %s", path, strerror(e));
                return mhe__fail(err, MHE_ERR_IO, "cannot use '%s' (a symlink to '%s') as output: %s", path, target, strerror(e));
            }
            if (S_ISREG(sb.st_mode)) return MHE_OK;
            if (!S_ISLNK(sb.st_mode)) {   /* the message names the path given, and where a symlink led */
                if (!hops) return mhe__fail(err, MHE_ERR_IO, "output '%s' is %s, not a regular file: refused", path, mhe__file_kind((unsigned)sb.st_mode));
                return mhe__fail(err, MHE_ERR_IO, "output '%s' (a symlink to '%s') is %s, not a regular file: refused", path, target,
                                 mhe__file_kind((unsigned)sb.st_mode));
            }
            if (hops == 40) return mhe__fail(err, MHE_ERR_IO, "output '%s': more than 40 symlinks", path);
            k = readlink(target, link, sizeof link - 1);
            if (k < 0) { int e = errno; return mhe__fail(err, MHE_ERR_IO, "cannot read the symlink '%s': %s", target, strerror(e)); }
            link[k] = 0;
            /* a relative link is relative to the directory holding it */
            dir = 0;
            if (link[0] != '/') { const char *slash = strrchr(target, '/'); dir = slash ? (size_t)(slash - target) + 1 : 0; }
            if (dir + (size_t)k >= MHE_PATH_LEN) return mhe__fail(err, MHE_ERR_ARG, "output '%s': the symlink's target path is too long", path);
            memcpy(target + dir, link, (size_t)k + 1);
        }
    }
#elif defined(_WIN32)
    {
        struct _stat64 sb;   /* 64-bit: a 32-bit _stat fails on files over 2 GB */
        int fd, dev = 0;
        if (_stat64(target, &sb) == 0 && !(sb.st_mode & _S_IFREG))
            return mhe__fail(err, MHE_ERR_IO, "output '%s' is %s, not a regular file: refused", target,
                             (sb.st_mode & _S_IFDIR) ? "a directory" : "a device");
        /* NUL, CON, COM1 ... exist in every directory, and _stat may not see
           them: the type of an open handle tells (read-only, nothing read) */
        if ((fd = _open(target, _O_RDONLY | _O_BINARY)) >= 0) {
            dev = _fstat64(fd, &sb) == 0 && !(sb.st_mode & _S_IFREG);
            _close(fd);
        }
        if (dev) return mhe__fail(err, MHE_ERR_IO, "output '%s' is a device, not a regular file: refused", target);
    }
#endif
    return MHE_OK;
}

MHEDEF mhe_status mhe_out_open(mhe_out *o, const char *path, char *err) {
    mhe_status s;
    int i, e = 0;
    if (!o) return mhe__fail(err, MHE_ERR_ARG, "mhe_out_open: NULL argument");
    o->f = NULL;
    o->write_errno = 0;
    o->tmp[0] = 0;
    o->path[0] = 0;
    o->slot = -1;
    if ((s = mhe__out_target(path, o->target, err)) != MHE_OK) return s;
    memcpy(o->path, path, strlen(path) + 1);   /* fits: mhe__out_target checked the length */
    /* the pid keeps processes apart, the counter the writers of one process */
    for (i = 0; i < 1000 && !o->f; i++) {
#if defined(MHE__HAVE_FSYNC)
        int fd;
        snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld.%d", o->target, (long)getpid(), i);
        mhe__pending_set(o);
        errno = 0;
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
        e = errno;
        if (fd < 0) { if (e == EEXIST) continue; break; }
        if (!(o->f = fdopen(fd, "wb"))) { e = errno; close(fd); remove(o->tmp); break; }
#elif defined(_WIN32)
        int fd;
        snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld.%d", o->target, (long)_getpid(), i);
        mhe__pending_set(o);
        errno = 0;
        fd = _open(o->tmp, _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY, _S_IREAD | _S_IWRITE);
        e = errno;
        if (fd < 0) { if (e == EEXIST) continue; break; }
        if (!(o->f = _fdopen(fd, "wb"))) { e = errno; _close(fd); remove(o->tmp); break; }
#else
        FILE *probe;
        snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", o->target, i);
        if ((probe = fopen(o->tmp, "rb")) != NULL) { fclose(probe); continue; }
        mhe__pending_set(o);
        errno = 0;
        if (!(o->f = fopen(o->tmp, "wb"))) { e = errno; break; }
#endif
    }
    if (!o->f) {   /* the temporary name is ours, not the caller's: the message names the path given */
        mhe__pending_drop(o);
        return mhe__fail(err, MHE_ERR_IO, "cannot write '%s'%s%s%s: %s", path, strcmp(path, o->target) ? " (a symlink to '" : "",
                         strcmp(path, o->target) ? o->target : "", strcmp(path, o->target) ? "')" : "", e ? strerror(e) : "no free temporary name");
    }
    return MHE_OK;
}

MHEDEF int mhe_out_write(mhe_out *o, const void *p, size_t n) {
    if (n == 0) return 1;
    errno = 0;
    if (fwrite(p, 1, n, o->f) == n) return 1;
    if (!o->write_errno) o->write_errno = errno ? errno : EIO;
    return 0;
}

MHEDEF void mhe_out_discard(mhe_out *o) {
    if (!o || !o->f) return;
    fclose(o->f);
    o->f = NULL;
    remove(o->tmp);
    mhe__pending_drop(o);
}

MHEDEF mhe_status mhe_out_commit(mhe_out *o, char *err) {
    const char *what = "write to";
    int ok, e;
    if (!o || !o->f) return mhe__fail(err, MHE_ERR_ARG, "mhe_out_commit: no open output");
    /* errno still holds the reason of a failed fprintf: nothing ran since */
    e = o->write_errno ? o->write_errno : errno;
    ok = !o->write_errno && !ferror(o->f);
    if (ok) { errno = 0; if (fflush(o->f) != 0) { ok = 0; e = errno; what = "flush"; } }
#if defined(MHE__HAVE_FSYNC)
    if (ok && fsync(fileno(o->f)) != 0) { ok = 0; e = errno; what = "sync"; }
#elif defined(_WIN32)
    if (ok && _commit(_fileno(o->f)) != 0) { ok = 0; e = errno; what = "sync"; }
#endif
    errno = 0;
    if (fclose(o->f) != 0 && ok) { ok = 0; e = errno; what = "close"; }
    o->f = NULL;
    if (ok) {
#ifdef _WIN32
        /* rename() fails over an existing file there; this replaces it in one step */
        unsigned long we;
        /* unlisted after the rename: a handler's unlink of the moved name then finds nothing */
        if (MoveFileExA(o->tmp, o->target, 0x1 | 0x8)) { mhe__pending_drop(o); return MHE_OK; }   /* REPLACE_EXISTING | WRITE_THROUGH */
        we = GetLastError();
        remove(o->tmp);
        mhe__pending_drop(o);
        return mhe__fail(err, MHE_ERR_IO, "cannot rename the new '%s' into place: Windows error %lu%s; it is left unchanged", o->path, we,
                         we == 5 || we == 32 ? " (access denied or the file is open elsewhere)" : "");
#else
        errno = 0;
        /* unlisted after the rename: a handler's unlink of the moved name then finds nothing */
        if (rename(o->tmp, o->target) == 0) { mhe__pending_drop(o); return MHE_OK; }
        e = errno;
        remove(o->tmp);
        mhe__pending_drop(o);
        return mhe__fail(err, MHE_ERR_IO, "cannot rename the new '%s' into place: %s; it is left unchanged", o->path, e ? strerror(e) : "rename failed");
#endif
    }
    remove(o->tmp);
    mhe__pending_drop(o);
    return mhe__fail(err, MHE_ERR_IO, "cannot %s '%s': %s; it is left unchanged", what, o->path, e ? strerror(e) : "write error");
}

MHEDEF mhe_status mhe_out_check(const char *path, char *err) {
    mhe_out o;
    mhe_status s = mhe_out_open(&o, path, err);
    if (s == MHE_OK) mhe_out_discard(&o);
    return s;
}

MHEDEF mhe_status mhe_st_save_file(const char *path, const mhe_st_item *items, int n_items,
                                   const char *const *meta_keys, const char *const *meta_values,
                                   int n_meta, void *alloc_ctx, char *err) {
    size_t json_len, padded, total;
    unsigned char *hdr;
    mhe_out o;
    mhe_status s;
    int i, ok;
    if (!path || !*path) return mhe__fail(err, MHE_ERR_ARG, "safetensors writer: path is NULL or empty");
    /* everything is checked before the disk is touched */
    s = mhe__st_layout(items, n_items, meta_keys, meta_values, n_meta, err, &json_len, &padded, &total);
    if (s != MHE_OK) return s;
    hdr = (unsigned char *)MHE_MALLOC(alloc_ctx, 8 + padded);
    if (!hdr) return mhe__fail(err, MHE_ERR_NOMEM, "out of memory saving '%s'", path);
    mhe__st_put_header(hdr, json_len, padded, items, n_items, meta_keys, meta_values, n_meta);
    if ((s = mhe_out_open(&o, path, err)) != MHE_OK) { MHE_FREE(alloc_ctx, hdr); return s; }
    ok = mhe_out_write(&o, hdr, 8 + padded);
    for (i = 0; ok && i < n_items; i++) ok = mhe__st_emit(&items[i], mhe__st_item_count(&items[i]), mhe__st_put_out, &o);
    MHE_FREE(alloc_ctx, hdr);
    return mhe_out_commit(&o, err);
}

MHEDEF mhe_status mhe_read_file(const char *path, void **buf, size_t *size, void *alloc_ctx, char *err) {
    FILE *f;
    mhe__off len;
    unsigned char *p;
    size_t n;
    int e;
    if (buf) *buf = NULL;
    if (size) *size = 0;
    if (!path || !buf || !size) return mhe__fail(err, MHE_ERR_ARG, "mhe_read_file: NULL argument");
#if defined(MHE__HAVE_FSYNC)
    {   /* only a regular file: O_NONBLOCK so that a FIFO without a writer is refused, not waited on */
        struct stat sb;
        int fd;
        errno = 0;
        fd = open(path, O_RDONLY | O_NONBLOCK);
        if (fd < 0) {
            char link[MHE_PATH_LEN];
            ssize_t k;
            e = errno;
            /* a symlink to nowhere or a loop: say so, the bare ENOENT reads as "no such file" */
            if ((e == ENOENT || e == ELOOP) && lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
                if (e == ELOOP) return mhe__fail(err, MHE_ERR_IO, "cannot open '%s': a symlink loop", path);
                k = readlink(path, link, sizeof link - 1);
                link[k < 0 ? 0 : k] = 0;
                return mhe__fail(err, MHE_ERR_IO, "cannot open '%s': a symlink to '%s', which does not exist", path, link);
            }
            return mhe__fail(err, MHE_ERR_IO, "cannot open '%s': %s", path, e ? strerror(e) : "open failed");
        }
        if (fstat(fd, &sb) != 0) { e = errno; close(fd); return mhe__fail(err, MHE_ERR_IO, "cannot read '%s': %s", path, strerror(e)); }
        if (!S_ISREG(sb.st_mode)) {
            close(fd);
            return mhe__fail(err, MHE_ERR_IO, "cannot read '%s': %s, not a regular file", path, mhe__file_kind((unsigned)sb.st_mode));
        }
        if (!(f = fdopen(fd, "rb"))) { e = errno; close(fd); return mhe__fail(err, MHE_ERR_IO, "cannot open '%s': %s", path, strerror(e)); }
    }
#else
    errno = 0;
    f = fopen(path, "rb");
    if (!f) { e = errno; return mhe__fail(err, MHE_ERR_IO, "cannot open '%s': %s", path, e ? strerror(e) : "fopen failed"); }
#endif
    /* a directory opens fine on some systems: the first read tells */
    errno = 0;
    if (fgetc(f) == EOF && ferror(f)) {
        e = errno;
        fclose(f);
        return mhe__fail(err, MHE_ERR_IO, "cannot read '%s': %s", path, e ? strerror(e) : "read error");
    }
    if (MHE__FSEEK(f, 0, SEEK_END) != 0 || (len = MHE__FTELL(f)) < 0 || MHE__FSEEK(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mhe__fail(err, MHE_ERR_IO, "cannot determine the size of '%s' (not a regular file, or too large)", path);
    }
    if ((uint64_t)len >= (uint64_t)SIZE_MAX) {
        fclose(f);
        return mhe__fail(err, MHE_ERR_IO, "'%s' is too large to read into memory", path);
    }
    n = (size_t)len;
    p = (unsigned char *)MHE_MALLOC(alloc_ctx, n + 1); /* + 1: an empty file still gets a buffer */
    if (!p) {
        fclose(f);
        return mhe__fail(err, MHE_ERR_NOMEM, "cannot allocate %llu bytes to read '%s'", (unsigned long long)n, path);
    }
    errno = 0;
    if (fread(p, 1, n, f) != n) {
        e = errno;
        MHE_FREE(alloc_ctx, p);
        fclose(f);
        return mhe__fail(err, MHE_ERR_IO, "cannot read '%s': %s", path, e ? strerror(e) : "file shorter than its size");
    }
    if (fgetc(f) != EOF) {
        MHE_FREE(alloc_ctx, p);
        fclose(f);
        return mhe__fail(err, MHE_ERR_IO, "'%s' grew while it was read", path);
    }
    fclose(f);
    *buf = p;
    *size = n;
    return MHE_OK;
}
#endif /* MHE_NO_STDIO */

/* ---- 10. checkpoints: model and trainer ----------------------------------- */

/* Metadata strings and tensor items of a checkpoint, in one scratch block. */
typedef struct mhe__ckpt {
    mhe_st_item *items;
    const char **keys, **values;
    char *text;
    int n_items, n_meta;
    void *block;
} mhe__ckpt;

#define MHE__META_VAL 1024   /* a per-layer attn list of 64 kinds fits */

/* The word state a checkpoint carries besides the parameters (I32 tensors):
   the LSH n-gram table (mhe_ngram_table_build's array) and the word
   vocabulary, one byte per element, each word followed by '\n' (a word never
   holds one). */
#define MHE__CKPT_NGRAMS "lsh.ngrams"
#define MHE__CKPT_VOCAB "vocab.words"
/* a BPE tokenizer: its text form (mhe_bpe_save_mem) as I8, and that text's MD5 in the metadata */
#define MHE__CKPT_BPE "bpe.tokenizer"
#define MHE__CKPT_BPE_MD5 "tokenizer.md5"

/* bytes of the metadata text, NULs included (measured, so that writing a
   checkpoint on a small device needs no more scratch than its strings) */
static size_t mhe__ckpt_text(const mhe_model *m, const mhe_trainer *t) {
    size_t n = sizeof "format" + sizeof MHE_FORMAT + sizeof "tokenizer" + 4 + sizeof MHE__CKPT_BPE_MD5 + 33;
    const char *key;
    char val[MHE__META_VAL];
    int f;
    for (f = 0; mhe_config_field(&m->cfg, f, &key, val, sizeof val); f++) n += strlen(key) + strlen(val) + 2;
    if (t) {
        n += sizeof "step" + 12 + sizeof "rng" + 65 + sizeof "task" + sizeof t->task;
        for (f = 0; mhe_train_config_field(&t->tc, f, &key, val, sizeof val); f++) n += sizeof "train." + strlen(key) + strlen(val) + 1;
    }
    return n;
}

static mhe_status mhe__ckpt_build(const mhe_model *m, const mhe_trainer *t, mhe__ckpt *k, int grads_only, char *err) {
    int nt = m->n_tensors, max_items = (grads_only ? nt + 1 : (t ? 3 * nt : nt)) + 3;
    int max_meta = 4 + MHE__N_CONFIG_FIELDS + (t ? 3 + MHE__N_TRAIN_FIELDS : 0), i, f, ok = 1;
    size_t name_bytes = t && !grads_only ? (size_t)2 * nt * (MHE_NAME_LEN + 16) : 0, text = mhe__ckpt_text(m, t), bytes;
    size_t vocab_bytes = 0, words_at, bpe_bytes = 0, bpe_at;
    char *p, *end;
#ifdef MHE_NO_TRAIN
    if (t) return mhe__fail(err, MHE_ERR_ARG, "checkpoint: this build has no trainer (MHE_NO_TRAIN); pass t = NULL");
#endif
    memset(k, 0, sizeof *k);
    if (!grads_only && m->vocab.n) vocab_bytes = mhe__mul_size(mhe__add_size(m->vocab.text_len, (size_t)m->vocab.n, &ok), sizeof(int32_t), &ok);
    bytes = (size_t)max_items * sizeof(mhe_st_item) + 2 * (size_t)max_meta * sizeof(char *) + text + name_bytes;
    words_at = MHE_ARENA_ROUND(bytes);
    bytes = mhe__add_size(words_at, vocab_bytes, &ok);
#ifndef MHE_NO_TOKENIZERS   /* without them a model has no tokenizer to save */
    if (!grads_only && m->bpe && mhe_bpe_save_mem(m->bpe, NULL, 0, &bpe_bytes) != MHE_OK) return mhe__fail(err, MHE_ERR_ARG, "checkpoint: the model's tokenizer is empty");
#endif
    bpe_at = bytes;
    bytes = mhe__add_size(bytes, bpe_bytes, &ok);
    if (!ok) return mhe__fail(err, MHE_ERR_OVERFLOW, "checkpoint: the word vocabulary is too large");
    k->block = MHE_MALLOC(m->alloc_ctx, bytes);
    if (!k->block) return mhe__fail(err, MHE_ERR_NOMEM, "checkpoint: out of memory");
    k->items = (mhe_st_item *)k->block;
    k->keys = (const char **)(void *)(k->items + max_items);
    k->values = k->keys + max_meta;
    p = (char *)(void *)(k->values + max_meta);
    end = p + text;
#define MHE__META(key_fmt, key_arg, ...) do { char *kk = p, *vv; \
        p += snprintf(kk, (size_t)(end - kk), key_fmt, key_arg) + 1; vv = p; \
        p += snprintf(vv, (size_t)(end - vv), __VA_ARGS__) + 1; MHE_ASSERT(p <= end); \
        k->keys[k->n_meta] = kk; k->values[k->n_meta++] = vv; } while (0)
    MHE__META("%s", "format", "%s", MHE_FORMAT);
    for (f = 0; ; f++) {
        const char *key;
        char val[MHE__META_VAL];
        if (!mhe_config_field(&m->cfg, f, &key, val, sizeof val)) break;
        if (strlen(val) >= MHE__META_VAL) { /* a long per-layer attn list gets its own room */
            MHE_FREE(m->alloc_ctx, k->block);
            return mhe__fail(err, MHE_ERR_OVERFLOW, "checkpoint: config field %s is too long", key);
        }
        MHE__META("%s", key, "%s", val);
    }
#ifndef MHE_NO_TOKENIZERS
    if (bpe_bytes) {   /* the tokenizer's text form and its MD5 */
        unsigned char d[16];
        char *tx = (char *)k->block + bpe_at;
        size_t got;
        mhe__must(mhe_bpe_save_mem(m->bpe, tx, bpe_bytes, &got));
        mhe_md5(tx, got, d);
        MHE__META("%s", "tokenizer", "%s", "bpe");
        MHE__META("%s", MHE__CKPT_BPE_MD5, "%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x%02x", d[0], d[1], d[2], d[3], d[4],
                  d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15]);
    }
#else
    (void)bpe_at;
#endif
    if (t) {
        MHE__META("%s", "step", "%d", t->step);
        MHE__META("%s", "rng", "%016llx%016llx%016llx%016llx", (unsigned long long)t->rng.s[0],
                  (unsigned long long)t->rng.s[1], (unsigned long long)t->rng.s[2], (unsigned long long)t->rng.s[3]);
        if (t->task[0]) MHE__META("%s", "task", "%.15s", t->task);
        for (f = 0; ; f++) {
            const char *key;
            char val[MHE__META_VAL];
            if (!mhe_train_config_field(&t->tc, f, &key, val, sizeof val)) break;
            MHE__META("train.%s", key, "%s", val);
        }
    }
#undef MHE__META
    p = end;   /* the optim.* names follow the text */
    if (grads_only) {
        static const float zero = 0;
        mhe_st_item *it = &k->items[k->n_items++];
        memset(it, 0, sizeof *it);
        it->name = "loss"; it->ndim = 1; it->shape[0] = 1;
        it->data = &m->last_loss;
        (void)zero;
    }
    for (i = 0; i < nt; i++) {
        const mhe_tensor *pt = &m->params[i];
        int copy, d;
        for (copy = 0; copy < (grads_only ? 1 : (t ? 3 : 1)); copy++) {
            mhe_st_item *it = &k->items[k->n_items++];
            size_t off = t ? (size_t)(pt->data - m->param_data) : 0;   /* AdamW state is laid out as the parameters */
            memset(it, 0, sizeof *it);
            it->ndim = pt->ndim;
            for (d = 0; d < pt->ndim; d++) it->shape[d] = pt->shape[d];
            if (copy == 0) {
                it->name = pt->name; it->data = grads_only ? pt->grad : pt->data;
                if (!grads_only && !pt->data && pt->q8) {   /* a q8 model's int8 tensor: dequantized as it is written */
                    it->q8_data = pt->q8; it->q8_scale = pt->q8_scale; it->q8_group = pt->q8_group;
                }
                continue;
            }
            snprintf(p, MHE_NAME_LEN + 16, "optim.%s.%s", copy == 1 ? "m" : "v", pt->name);
            it->name = p;
            p += MHE_NAME_LEN + 16;
            it->data = (copy == 1 ? t->adam_m : t->adam_v) + off;
        }
    }
    if (!grads_only && m->lsh_ready && m->lsh.table) {
        mhe_st_item *it = &k->items[k->n_items++];
        memset(it, 0, sizeof *it);
        it->name = MHE__CKPT_NGRAMS; it->ndim = 1; it->shape[0] = (int64_t)m->lsh.table_len;
        it->dtype = MHE_DTYPE_I32; it->data_i32 = (const int32_t *)(const void *)m->lsh.table;
    }
    if (bpe_bytes) {
        mhe_st_item *it = &k->items[k->n_items++];
        memset(it, 0, sizeof *it);
        it->name = MHE__CKPT_BPE; it->ndim = 1; it->shape[0] = (int64_t)bpe_bytes;
        it->dtype = MHE_DTYPE_I8; it->data_i8 = (const int8_t *)(const void *)((unsigned char *)k->block + bpe_at);
    }
    if (vocab_bytes) {
        mhe_st_item *it = &k->items[k->n_items++];
        int32_t *wb = (int32_t *)(void *)((unsigned char *)k->block + words_at);
        size_t j, q = 0;
        for (i = 0; i < m->vocab.n; i++) {
            for (j = m->vocab.start[i]; j < m->vocab.start[i + 1]; j++) wb[q++] = (unsigned char)m->vocab.text[j];
            wb[q++] = '\n';
        }
        memset(it, 0, sizeof *it);
        it->name = MHE__CKPT_VOCAB; it->ndim = 1; it->shape[0] = (int64_t)q;
        it->dtype = MHE_DTYPE_I32; it->data_i32 = wb;
    }
    return MHE_OK;
}

/* the tokenizer of a checkpoint (see mhe__ckpt_build), checked as a hostile
   file would be; an arena load (parse 0), and every load in a build with
   MHE_NO_TOKENIZERS, checks its MD5 and leaves m->bpe NULL: the model runs
   on ids (embedded code feeds them; the weights are the same either way) */
static mhe_status mhe__load_bpe(mhe_model *m, const mhe_safetensors *st, int parse) {
    const mhe_st_tensor *t = mhe_st_find(st, MHE__CKPT_BPE);
    const char *want = mhe_st_meta(st, MHE__CKPT_BPE_MD5);
    unsigned char d[16];
    char hex[33];
    int i;
    if (!t) {
        if (want) return mhe__fail(m->err, MHE_ERR_MISSING, "checkpoint metadata names a tokenizer (%s), but the tensor '%s' is missing", MHE__CKPT_BPE_MD5, MHE__CKPT_BPE);
        return MHE_OK;
    }
    if (t->dtype != MHE_DTYPE_I8 || t->ndim != 1)
        return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint tensor '%s' must be an I8 vector (the tokenizer's text)", MHE__CKPT_BPE);
    if (!want) return mhe__fail(m->err, MHE_ERR_MISSING, "checkpoint has a tokenizer but no '%s' metadata to check it by", MHE__CKPT_BPE_MD5);
    mhe_md5(t->data, (size_t)t->size, d);
    for (i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcmp(hex, want) != 0)
        return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint tensor '%s' has MD5 %s, but the metadata '%s' says %.40s (a damaged or replaced tokenizer)",
                         MHE__CKPT_BPE, hex, MHE__CKPT_BPE_MD5, want);
#ifndef MHE_NO_TOKENIZERS
    if (parse) {
        mhe_bpe b;
        mhe_status s;
        mhe_bpe_init(&b, m->alloc_ctx);
        if ((s = mhe_bpe_load_mem(&b, (const char *)t->data, (size_t)t->size)) != MHE_OK)
            return mhe__fail(m->err, s, "checkpoint tensor '%s': %.200s", MHE__CKPT_BPE, b.err);
        s = mhe_model_set_bpe(m, &b);
        mhe_bpe_free(&b);
        return s;
    }
#else
    (void)parse;
#endif
    return MHE_OK;
}

/* the word state of a checkpoint (see mhe__ckpt_build), checked as a hostile file would be */
static mhe_status mhe__load_words(mhe_model *m, const mhe_safetensors *st) {
    const mhe_config *c = &m->cfg;
    const mhe_st_tensor *t = mhe_st_find(st, MHE__CKPT_NGRAMS);
    int32_t *buf;
    mhe_status s = MHE_OK;
    int64_t i, w0;
    int ok = 1;
    if (t) {
        if (c->embedding == MHE_EMB_VOCAB || c->hash != MHE_WORD_HASH_LSH || !c->lsh_features)
            return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint has an LSH n-gram table, but the model's config uses none");
        if (t->dtype != MHE_DTYPE_I32 || t->ndim != 1 || t->size < 5)
            return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint tensor '%s' must be an I32 vector of 4 counts and at least one n-gram", MHE__CKPT_NGRAMS);
        buf = (int32_t *)MHE_MALLOC(m->alloc_ctx, mhe__mul_size((size_t)t->size, sizeof(int32_t), &ok));
        if (!ok || !buf) return mhe__fail(m->err, MHE_ERR_NOMEM, "checkpoint: no memory for the n-gram table");
        if ((s = mhe_st_read_i32(st, t, buf, t->size)) == MHE_OK) s = mhe__lsh_setup(m, (const uint32_t *)(const void *)buf, (size_t)t->size);
        else mhe__fail(m->err, s, "checkpoint tensor '%s' cannot be read", MHE__CKPT_NGRAMS);
        MHE_FREE(m->alloc_ctx, buf);
        if (s != MHE_OK) return s;
    }
    t = mhe_st_find(st, MHE__CKPT_VOCAB);
    if (t) {
        if (c->embedding != MHE_EMB_VOCAB)
            return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint has a word vocabulary, but embedding=%s hashes words", mhe__emb_name(c));
        if (t->dtype != MHE_DTYPE_I32 || t->ndim != 1)
            return mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint tensor '%s' must be an I32 vector of bytes", MHE__CKPT_VOCAB);
        buf = (int32_t *)MHE_MALLOC(m->alloc_ctx, mhe__mul_size((size_t)t->size + 1, sizeof(int32_t), &ok));
        if (!ok || !buf) return mhe__fail(m->err, MHE_ERR_NOMEM, "checkpoint: no memory for the word vocabulary");
        s = mhe_st_read_i32(st, t, buf, t->size);
        if (s != MHE_OK) mhe__fail(m->err, s, "checkpoint tensor '%s' cannot be read", MHE__CKPT_VOCAB);
        for (i = 0, w0 = 0; i < t->size && s == MHE_OK; i++) {
            char wd[256];
            int64_t j, len;
            int ty, before = m->vocab.n;
            if (buf[i] < 0 || buf[i] > 255) { s = mhe__fail(m->err, MHE_ERR_FORMAT, "vocabulary byte %lld is %ld, not a byte", (long long)i, (long)buf[i]); break; }
            if (buf[i] != '\n') continue;
            len = i - w0;
            if (len == 0) { s = mhe__fail(m->err, MHE_ERR_FORMAT, "vocabulary word %d is empty", m->vocab.n); break; }
            if (m->vocab.n >= c->vocab_size - MHE_N_SPECIAL) {
                s = mhe__fail(m->err, MHE_ERR_FORMAT, "the vocabulary has more words than vocab_size %d - %d special tokens", c->vocab_size, MHE_N_SPECIAL);
                break;
            }
            /* words of any length: interned from the bytes in slices */
            {
                char *tmp = len <= (int64_t)sizeof wd ? wd : (char *)MHE_MALLOC(m->alloc_ctx, (size_t)len);
                if (!tmp) { s = mhe__fail(m->err, MHE_ERR_NOMEM, "checkpoint: out of memory"); break; }
                for (j = 0; j < len; j++) tmp[j] = (char)buf[w0 + j];
                if (mhe_lexicon_intern(&m->vocab, tmp, (size_t)len, 0, &ty) != MHE_OK) s = mhe__fail(m->err, MHE_ERR_NOMEM, "checkpoint: out of memory");
                else if (m->vocab.n == before) s = mhe__fail(m->err, MHE_ERR_FORMAT, "vocabulary word %d repeats word %d", before, ty);
                if (tmp != wd) MHE_FREE(m->alloc_ctx, tmp);
            }
            w0 = i + 1;
        }
        if (s == MHE_OK && w0 != t->size) s = mhe__fail(m->err, MHE_ERR_FORMAT, "the vocabulary's last word is not ended by a newline");
        MHE_FREE(m->alloc_ctx, buf);
        if (s != MHE_OK) return s;
    }
    m->hash_sig = mhe__hash_sig(m);
    return MHE_OK;
}

MHEDEF mhe_status mhe_checkpoint_size(const mhe_model *m, const mhe_trainer *t, size_t *size) {
    mhe__ckpt k;
    char err[MHE_ERR_LEN];
    mhe_status st = mhe__ckpt_build(m, t, &k, 0, err);
    if (st != MHE_OK) return st;
    st = mhe_st_write_size(k.items, k.n_items, k.keys, k.values, k.n_meta, size, err);
    MHE_FREE(m->alloc_ctx, k.block);
    return st;
}

MHEDEF mhe_status mhe_checkpoint_write_mem(const mhe_model *m, const mhe_trainer *t, void *buf, size_t cap, size_t *written) {
    mhe__ckpt k;
    char err[MHE_ERR_LEN];
    mhe_status st = mhe__ckpt_build(m, t, &k, 0, err);
    if (st != MHE_OK) return st;
    st = mhe_st_write_mem(buf, cap, written, k.items, k.n_items, k.keys, k.values, k.n_meta, err);
    MHE_FREE(m->alloc_ctx, k.block);
    return st;
}

/* ---- 10. checkpoints: q8 (int8 weights, inference only) --------------------- */

/* 1 when t is what a q8 checkpoint stores as int8: the weight matrix of a
   linear layer (every such tensor feeds the forward through mhe__linq) and
   a vocabulary's token embedding (rows gathered by mhe__q8_gather; the tied
   LM head's GEMV reads it through mhe__linq too) */
static int mhe__q8_linear(const mhe_model *m, const mhe_tensor *t) {
    int l, k;
    if (t->ndim != 2) return 0;
    if (t == m->lm_head || t == m->cls_w || t == m->sr_w) return 1;
    if (t == m->tok_emb) return m->cfg.embedding == MHE_EMB_VOCAB;
    for (l = 0; l < m->n_total_layers; l++) {
        const mhe_layer *y = &m->layers[l];
        if (t == y->fc1_w || t == y->fc2_w) return 1;
        for (k = 0; k < 2; k++) {
            const mhe_attn_weights *w = k ? &y->cross : &y->attn;
            if (t == w->wq || t == w->wk || t == w->wv || t == w->wo || t == w->wcb || t == w->gate || t == w->up ||
                t == w->down || t == w->hidden)
                return 1;
        }
    }
    return 0;
}

/* elements per scale of a q8 tensor with rows of `cols`: the group, or the
   whole row where the group (0: per row) does not divide it */
static int mhe__q8_group_of(int group, int64_t cols) { return group > 0 && cols % group == 0 ? group : (int)cols; }

typedef struct mhe__q8ckpt {
    mhe__ckpt k;                    /* the float checkpoint's items and metadata */
    mhe_st_item *items;
    const char **keys, **values;
    int n_items, n_meta;
    char group_text[16];
    void *block;
} mhe__q8ckpt;

/* The q8 file's items: each quantized tensor becomes its scales (with the
   F32 tensors, first) and its int8 weights (last), both computed while the
   file is written, so exporting needs the float model and little more. A
   q8 model's own int8 tensors are written as they are. */
static mhe_status mhe__q8_build(const mhe_model *m, int group, mhe__q8ckpt *q, char *err) {
    int nt = m->n_tensors, i, pass, nq = 0, ok = 1;
    size_t bytes;
    char *names;
    mhe_status s;
    memset(q, 0, sizeof *q);
    if (group < 0) return mhe__fail(err, MHE_ERR_ARG, "q8: group %d must be >= 0 (0: one scale per row)", group);
    for (i = 0; i < nt; i++) {
        const mhe_tensor *t = &m->params[i];
        if (!mhe__q8_linear(m, t)) continue;
        nq++;
        if (t->data) {   /* as mhe_q8_quantize would, before anything is written */
            int64_t k = mhe__first_nonfinite(t->data, t->size);
            if (k >= 0) return mhe__fail(err, MHE_ERR_NONFINITE, "q8: tensor '%s' cannot be quantized (%s)", t->name, mhe_status_str(MHE_ERR_NONFINITE));
        } else if (!t->q8 || t->q8_group != mhe__q8_group_of(group, t->shape[1]))
            return mhe__fail(err, MHE_ERR_ARG, "q8: tensor '%s' is int8 with %d weights per scale, not %d: quantize the float checkpoint instead",
                             t->name, t->q8_group, mhe__q8_group_of(group, t->shape[1]));
    }
    if ((s = mhe__ckpt_build(m, NULL, &q->k, 0, err)) != MHE_OK) return s;
    MHE_ASSERT(q->k.n_items >= nt);
    bytes = (size_t)(q->k.n_items + nq) * sizeof(mhe_st_item) + 2 * (size_t)(q->k.n_meta + 2) * sizeof(char *);
    bytes = mhe__add_size(bytes, mhe__mul_size((size_t)nq, MHE_NAME_LEN + 8, &ok), &ok);
    q->block = ok ? MHE_MALLOC(m->alloc_ctx, bytes) : NULL;
    if (!q->block) { MHE_FREE(m->alloc_ctx, q->k.block); return mhe__fail(err, MHE_ERR_NOMEM, "q8: out of memory"); }
    q->items = (mhe_st_item *)q->block;
    q->keys = (const char **)(void *)(q->items + q->k.n_items + nq);
    q->values = q->keys + q->k.n_meta + 2;
    names = (char *)(void *)(q->values + q->k.n_meta + 2);
    for (i = 0; i < q->k.n_meta; i++) { q->keys[i] = q->k.keys[i]; q->values[i] = q->k.values[i]; }
    snprintf(q->group_text, sizeof q->group_text, "%d", group);
    q->keys[i] = "quant"; q->values[i++] = "q8";
    q->keys[i] = "quant.group"; q->values[i++] = q->group_text;
    q->n_meta = i;
    /* pass 0: every F32 tensor (the scales in place of their matrices), pass 1: the I8 ones */
    for (pass = 0; pass < 2; pass++)
        for (i = 0; i < q->k.n_items; i++) {
            mhe_st_item *it;
            const mhe_tensor *t = i < nt ? &m->params[i] : NULL;
            int quant = t && mhe__q8_linear(m, t), g;
            if (quant ? 0 : pass) continue;
            it = &q->items[q->n_items++];
            *it = q->k.items[i];
            if (!quant) continue;
            g = mhe__q8_group_of(group, t->shape[1]);
            it->data = NULL; it->q8_data = NULL; it->q8_scale = NULL;
            if (t->data) { it->q8_from = t->data; it->q8_cols = (int)t->shape[1]; it->q8_group = g; }
            if (pass == 0) {   /* the scales [rows, cols / g], named <name>_scale */
                snprintf(names, MHE_NAME_LEN + 8, "%s_scale", t->name);
                it->name = names; names += MHE_NAME_LEN + 8;
                it->shape[1] = t->shape[1] / g;
                if (!t->data) it->data = t->q8_scale;
            } else {
                it->dtype = MHE_DTYPE_I8;
                if (!t->data) it->data_i8 = t->q8;
            }
        }
    return MHE_OK;
}

MHEDEF mhe_status mhe_q8_group_check(mhe_model *m, int group) {
    int i;
    if (!m) return MHE_ERR_ARG;
    if (group < 0) return mhe__fail(m->err, MHE_ERR_ARG, "q8: group %d must be >= 0 (0: one scale per row)", group);
    for (i = 0; group > 0 && i < m->n_tensors; i++) {
        const mhe_tensor *t = &m->params[i];
        if (mhe__q8_linear(m, t) && t->shape[1] % group)
            return mhe__fail(m->err, MHE_ERR_ARG, "q8: group %d does not divide the %lld-wide rows of %s", group, (long long)t->shape[1], t->name);
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_q8_checkpoint_size(const mhe_model *m, int group, size_t *size) {
    mhe__q8ckpt q;
    mhe_status st;
    if (!m || !size) return MHE_ERR_ARG;
    if ((st = mhe__q8_build(m, group, &q, ((mhe_model *)m)->err)) != MHE_OK) return st;
    st = mhe_st_write_size(q.items, q.n_items, q.keys, q.values, q.n_meta, size, ((mhe_model *)m)->err);
    MHE_FREE(m->alloc_ctx, q.block); MHE_FREE(m->alloc_ctx, q.k.block);
    return st;
}

MHEDEF mhe_status mhe_q8_checkpoint_write_mem(const mhe_model *m, int group, void *buf, size_t cap, size_t *written) {
    mhe__q8ckpt q;
    mhe_status st;
    if (!m) return MHE_ERR_ARG;
    if ((st = mhe__q8_build(m, group, &q, ((mhe_model *)m)->err)) != MHE_OK) return st;
    st = mhe_st_write_mem(buf, cap, written, q.items, q.n_items, q.keys, q.values, q.n_meta, ((mhe_model *)m)->err);
    MHE_FREE(m->alloc_ctx, q.block); MHE_FREE(m->alloc_ctx, q.k.block);
    return st;
}

#ifndef MHE_NO_STDIO
MHEDEF mhe_status mhe_q8_checkpoint_save(const mhe_model *m, int group, const char *path) {
    mhe__q8ckpt q;
    mhe_status st;
    if (!m) return MHE_ERR_ARG;
    if ((st = mhe__q8_build(m, group, &q, ((mhe_model *)m)->err)) != MHE_OK) return st;
    st = mhe_st_save_file(path, q.items, q.n_items, q.keys, q.values, q.n_meta, m->alloc_ctx, ((mhe_model *)m)->err);
    MHE_FREE(m->alloc_ctx, q.block); MHE_FREE(m->alloc_ctx, q.k.block);
    return st;
}
#endif

/* copy one named F32 tensor of the file into dst, checking its shape */
static mhe_status mhe__load_tensor(const mhe_safetensors *st, const char *name, const mhe_tensor *like, float *dst, char *err) {
    const mhe_st_tensor *t = mhe_st_find(st, name);
    int d;
    mhe_status s;
    if (!t) return mhe__fail(err, MHE_ERR_MISSING, "checkpoint has no tensor '%s'", name);
    if (t->ndim != like->ndim) return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s' has %d dimensions, the model expects %d", name, t->ndim, like->ndim);
    for (d = 0; d < like->ndim; d++)
        if (t->shape[d] != like->shape[d])
            return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s' dimension %d is %lld, the model expects %lld", name, d,
                             (long long)t->shape[d], (long long)like->shape[d]);
    if (!dst) /* check only */
        return t->dtype == MHE_DTYPE_F32 ? MHE_OK : mhe__fail(err, MHE_ERR_DTYPE, "tensor '%s': dtype is not F32", name);
    s = mhe_st_read_f32(st, t, dst, like->size);
    if (s != MHE_OK) return mhe__fail(err, s, "tensor '%s': %s", name, mhe_status_str(s));
    return MHE_OK;
}

/* the model config a parsed checkpoint's metadata holds */
static mhe_status mhe__ckpt_config(const mhe_safetensors *st, mhe_config *cfg, char *err) {
    const char *fmt = mhe_st_meta(st, "format");
    char e2[MHE_ERR_LEN];
    mhe_status s;
    int f;
    *cfg = mhe_config_default();
    if (!fmt) return mhe__fail(err, MHE_ERR_FORMAT, "not an mhe checkpoint: no __metadata__ 'format'");
    if (strcmp(fmt, MHE_FORMAT) != 0) return mhe__fail(err, MHE_ERR_FORMAT, "checkpoint format '%.64s', this build reads '%s'", fmt, MHE_FORMAT);
    for (f = 0; f < MHE__N_CONFIG_FIELDS; f++) {
        const char *v = mhe_st_meta(st, mhe__config_fields[f].key);
        if (!v && mhe__config_fields[f].since) continue;   /* older checkpoint: the default holds */
        if (!v) return mhe__fail(err, MHE_ERR_MISSING, "checkpoint metadata lacks config field '%s'", mhe__config_fields[f].key);
        if ((s = mhe_config_set(cfg, mhe__config_fields[f].key, v, e2)) != MHE_OK) return mhe__fail(err, s, "checkpoint metadata: %s", e2);
    }
    return MHE_OK;
}

/* point a tensor at its weights inside the checkpoint image (in-place load) */
static mhe_status mhe__map_tensor(const mhe_safetensors *st, mhe_tensor *t, char *err) {
    const mhe_st_tensor *s = mhe_st_find(st, t->name);
    union { uint32_t u; unsigned char c[4]; } e;
    int d;
    e.u = 1;
    if (!s) return mhe__fail(err, MHE_ERR_MISSING, "checkpoint has no tensor '%s'", t->name);
    if (s->dtype != MHE_DTYPE_F32 || s->ndim != t->ndim) return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s': dtype or rank differs from the model's", t->name);
    for (d = 0; d < t->ndim; d++)
        if (s->shape[d] != t->shape[d]) return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s' dimension %d differs from the model's", t->name, d);
    if (e.c[0] != 1 || ((uintptr_t)s->data & 3u) != 0)
        return mhe__fail(err, MHE_ERR_ARG, "tensor '%s': in-place weights need a 4-byte aligned image on a little-endian CPU", t->name);
    t->data = (float *)(uintptr_t)(const void *)s->data;   /* read only: an inference-only model never writes its weights */
    return MHE_OK;
}

/* the I8 weights and F32 scales of a q8 tensor in a parsed file, checked as
   a hostile file would be: dtypes, shapes, a group that divides the row,
   every scale finite and positive. *g gets the elements per scale. */
static mhe_status mhe__q8_check(const mhe_safetensors *st, const mhe_tensor *t, int group, const mhe_st_tensor **qt,
                                const mhe_st_tensor **sc, int *g, char *err) {
    char nm[MHE_NAME_LEN + 8];
    const mhe_st_tensor *a = mhe_st_find(st, t->name), *b;
    int64_t rows = t->shape[0], cols = t->shape[1], k;
    if (!a) return mhe__fail(err, MHE_ERR_MISSING, "checkpoint has no tensor '%s'", t->name);
    if (a->dtype != MHE_DTYPE_I8)
        return mhe__fail(err, MHE_ERR_DTYPE, "q8 checkpoint: tensor '%s' (a linear layer's weights) must be I8", t->name);
    if (a->ndim != 2 || a->shape[0] != rows || a->shape[1] != cols)
        return mhe__fail(err, MHE_ERR_SHAPE, "q8 checkpoint: tensor '%s' must be [%lld, %lld]", t->name, (long long)rows, (long long)cols);
    snprintf(nm, sizeof nm, "%s_scale", t->name);
    if (!(b = mhe_st_find(st, nm))) return mhe__fail(err, MHE_ERR_MISSING, "q8 checkpoint has no scales '%s'", nm);
    if (b->dtype != MHE_DTYPE_F32 || b->ndim != 2 || b->shape[0] != rows)
        return mhe__fail(err, b->dtype != MHE_DTYPE_F32 ? MHE_ERR_DTYPE : MHE_ERR_SHAPE,
                         "q8 checkpoint: scales '%s' must be F32 [%lld, groups per row]", nm, (long long)rows);
    if (b->shape[1] == 1) *g = (int)cols;   /* one scale per row */
    else if (group <= 0 || cols % group)
        return mhe__fail(err, MHE_ERR_SHAPE, "q8 checkpoint: group size %d does not divide the row length %lld of '%s'", group,
                         (long long)cols, t->name);
    else if (b->shape[1] != cols / group)
        return mhe__fail(err, MHE_ERR_SHAPE, "q8 checkpoint: scales '%s' have %lld per row; group %d needs %lld (or 1)", nm,
                         (long long)b->shape[1], group, (long long)(cols / group));
    else *g = group;
    for (k = 0; k < b->size; k++) {   /* little-endian bytes, read portably */
        const unsigned char *p = b->data + 4 * k;
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float v;
        memcpy(&v, &u, sizeof v);
        if (!mhe__is_finite(v))
            return mhe__fail(err, MHE_ERR_NONFINITE, "q8 checkpoint: scale %lld of '%s' is %g", (long long)k, nm, (double)v);
        if (!(v > 0))
            return mhe__fail(err, MHE_ERR_FORMAT, "q8 checkpoint: scale %lld of '%s' is %g, not positive", (long long)k, nm, (double)v);
    }
    *qt = a; *sc = b;
    return MHE_OK;
}

/* Where a load's tensor bytes come from: the buffer a view was parsed from,
   or a file (mhe_model_load) read tensor by tensor straight into the model's
   own blocks, never whole into memory. Read, not mapped: a mapped file that
   another process truncates faults (SIGBUS) at the next access to a page
   past its new end, which a library cannot catch without a process-wide
   signal handler; read weights belong to the process, so a file changed
   after the load cannot touch them, and one that ends early fails the load
   (MHE_ERR_TRUNCATED). */
typedef struct mhe__src {
    void *f;                 /* FILE *; NULL: the bytes are in the parsed buffer */
    uint64_t data_at, pos;   /* file offsets: the data section, the read position */
    void *side;              /* file loads: the small tensors read whole beforehand */
} mhe__src;

/* the bytes of t into dst */
static mhe_status mhe__src_bytes(mhe__src *src, const mhe_st_tensor *t, void *dst, char *err) {
    (void)src;   /* (no files under MHE_NO_STDIO) */
    if (t->data || !t->nbytes) {
        if (t->nbytes) memcpy(dst, t->data, t->nbytes);
        return MHE_OK;
    }
#ifndef MHE_NO_STDIO
    if (src && src->f) {
        FILE *f = (FILE *)src->f;
        uint64_t at = src->data_at + t->offset;
        unsigned char *d = (unsigned char *)dst;
        size_t left = t->nbytes;
        if (at != src->pos) {
            mhe__off o = (mhe__off)at;
            if (o < 0 || (uint64_t)o != at || MHE__FSEEK(f, o, SEEK_SET) != 0)
                return mhe__fail(err, MHE_ERR_IO, "cannot seek to byte %llu of tensor '%.80s'", (unsigned long long)at, t->name);
            src->pos = at;
        }
        while (left) {
            size_t k = left < ((size_t)1 << 30) ? left : ((size_t)1 << 30), got = fread(d, 1, k, f);
            src->pos += got;
            if (got != k)
                return mhe__fail(err, MHE_ERR_TRUNCATED, "the file ends at byte %llu, inside tensor '%.80s' (it changed while it was loaded?)",
                                 (unsigned long long)src->pos, t->name);
            d += k; left -= k;
        }
        return MHE_OK;
    }
#endif
    return mhe__fail(err, MHE_ERR_ARG, "tensor '%.80s': no data to read", t->name);
}

/* a model tensor's F32 weights: name, shape and dtype checked, the bytes
   straight into t->data (byte-swapped there on a big-endian CPU) */
static mhe_status mhe__load_f32(mhe__src *src, const mhe_safetensors *st, mhe_tensor *t, char *err) {
    mhe_status s = mhe__load_tensor(st, t->name, t, NULL, err);
    const mhe_st_tensor *a;
    if (s != MHE_OK) return s;
    a = mhe_st_find(st, t->name);
    if (a->nbytes != (size_t)t->size * 4) return mhe__fail(err, MHE_ERR_SHAPE, "tensor '%s': byte size differs from the model's", t->name);
    if ((s = mhe__src_bytes(src, a, t->data, err)) != MHE_OK) return s;
    if (!mhe__little_endian()) {
        int64_t i;
        for (i = 0; i < t->size; i++) {
            uint32_t w;
            memcpy(&w, t->data + i, 4);
            w = mhe__bswap32(w);
            memcpy(t->data + i, &w, 4);
        }
    }
    return MHE_OK;
}

/* file loads: the tensors that the checks read whole (q8 scales, word
   state, tokenizer), small beside the weights, in one block */
static mhe_status mhe__src_side(mhe__src *src, mhe_safetensors *st, int q8, void *alloc_ctx, char *err) {
    size_t total = 0;
    unsigned char *p = NULL;
    int i, pass, ok = 1;
    mhe_status s;
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < st->n_tensors; i++) {
            mhe_st_tensor *t = &st->tensors[i];
            size_t len = strlen(t->name);
            if (strcmp(t->name, MHE__CKPT_NGRAMS) != 0 && strcmp(t->name, MHE__CKPT_VOCAB) != 0 && strcmp(t->name, MHE__CKPT_BPE) != 0 &&
                !(q8 && len > 6 && strcmp(t->name + len - 6, "_scale") == 0))
                continue;
            if (!pass) { total = mhe__add_size(total, t->nbytes, &ok); continue; }
            if ((s = mhe__src_bytes(src, t, p, err)) != MHE_OK) return s;
            t->data = p;
            p += t->nbytes;
        }
        if (!pass) {
            src->side = ok ? MHE_MALLOC(alloc_ctx, total ? total : 1) : NULL;
            if (!src->side) return mhe__fail(err, MHE_ERR_NOMEM, "cannot allocate %zu bytes for the checkpoint's scales and word state", total);
            p = (unsigned char *)src->side;
        }
    }
    return MHE_OK;
}

/* 1 when t is int8 in this q8 file: every linear layer's matrix, and the
   token embedding unless the file predates its quantization (then F32) */
static int mhe__q8_stored(const mhe_model *m, const mhe_safetensors *st, const mhe_tensor *t) {
    const mhe_st_tensor *a;
    if (!mhe__q8_linear(m, t)) return 0;
    if (t != m->tok_emb) return 1;
    a = mhe_st_find(st, t->name);
    return a && a->dtype == MHE_DTYPE_I8;
}

/* A q8 model's tensors. In place: pointers into the image (the scales
   4-byte aligned, a little-endian CPU); the float ones are mapped by the
   caller. On the heap: one block of the float tensors (in memory order, so
   adjacent tensors stay adjacent), the scales and the int8 weights, read
   straight into it; no float copy of an int8 tensor exists (data NULL), as
   in place, so the model takes the weights' bytes and no more. */
static mhe_status mhe__q8_load(mhe_model *m, const mhe_safetensors *st, int in_place, mhe__src *src) {
    size_t ffloats = 0, sfloats = 0, qbytes = 0;
    int i, pass, ok = 1, g = 1;
    float *fl = NULL, *sc = NULL;
    int8_t *qb = NULL;
    union { uint32_t u; unsigned char c[4]; } e;
    e.u = 1;
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < m->n_tensors; i++) {
            mhe_tensor *t = &m->params[i];
            const mhe_st_tensor *a = NULL, *b = NULL;
            mhe_status s;
            if (!mhe__q8_stored(m, st, t)) {
                if (in_place) continue;
                if (pass == 0) { ffloats = mhe__add_size(ffloats, (size_t)t->size, &ok); continue; }
                t->data = fl;
                fl += t->size;
                if ((s = mhe__load_f32(src, st, t, m->err)) != MHE_OK) return s;
                continue;
            }
            if ((s = mhe__q8_check(st, t, m->q8_group, &a, &b, &g, m->err)) != MHE_OK) return s;
            t->q8_group = g;
            if (in_place) {
                if (e.c[0] != 1 || ((uintptr_t)b->data & 3u) != 0)
                    return mhe__fail(m->err, MHE_ERR_ARG, "tensor '%s': in-place weights need a 4-byte aligned image on a little-endian CPU", t->name);
                t->q8 = (const int8_t *)(const void *)a->data;
                t->q8_scale = (const float *)(const void *)b->data;
                t->data = NULL;   /* no float copy exists: every reader of a linear weight takes q8 */
                continue;
            }
            if (pass == 0) {
                sfloats = mhe__add_size(sfloats, (size_t)b->size, &ok);
                qbytes = mhe__add_size(qbytes, (size_t)a->size, &ok);
                continue;
            }
            if ((s = mhe_st_read_f32(st, b, sc, b->size)) != MHE_OK) return mhe__fail(m->err, s, "tensor '%s_scale': %s", t->name, mhe_status_str(s));
            if ((s = mhe__src_bytes(src, a, qb, m->err)) != MHE_OK) return s;
            t->q8 = qb; t->q8_scale = sc;
            t->data = NULL;
            qb += a->size; sc += b->size;
        }
        if (in_place) return MHE_OK;
        if (pass == 0) {
            size_t bytes = mhe__add_size(mhe__mul_size(mhe__add_size(ffloats, sfloats, &ok), sizeof(float), &ok), qbytes, &ok);
            m->q8_block = ok ? MHE_MALLOC(m->alloc_ctx, bytes ? bytes : 1) : NULL;
            if (!m->q8_block) return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate the q8 weights");
            fl = (float *)m->q8_block;
            sc = fl + ffloats;
            qb = (int8_t *)(void *)(sc + sfloats);
            m->bytes_params += bytes;
        }
    }
    return MHE_OK;
}

/* buf: the checkpoint (size = file_size), or with src->f its first `size`
   bytes, the header, and the tensors are read from the file */
static mhe_status mhe__model_load(mhe_model *m, const void *buf, size_t size, uint64_t file_size, void *alloc_ctx, mhe_arena *arena,
                                  int in_place, mhe__src *src) {
    mhe_safetensors st;
    mhe_config cfg;
    mhe_status s;
    char err[MHE_ERR_LEN];
    const char *quant;
    int i, q8 = 0, q8_group = 0;
    if (!m) return MHE_ERR_ARG;
    memset(m, 0, sizeof *m);
    s = mhe__st_parse_head(&st, buf, size, file_size, alloc_ctx, arena);
    if (s != MHE_OK) { mhe__fail(m->err, s, "%s", st.err); return s; }
    if (src) src->data_at = file_size - st.data_size;
    if ((s = mhe__ckpt_config(&st, &cfg, m->err)) != MHE_OK) { mhe_st_free(&st); return s; }
    if ((quant = mhe_st_meta(&st, "quant")) != NULL) {   /* int8 weights (q8) */
        const char *gt = mhe_st_meta(&st, "quant.group");
        int64_t gv = -1;
        if (strcmp(quant, "q8") != 0) s = mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint quantization '%.32s': this build reads q8", quant);
        else if (!gt || mhe__parse_i64(gt, &gv) != MHE_OK || gv < 0 || gv > INT_MAX)
            s = mhe__fail(m->err, MHE_ERR_FORMAT, "q8 checkpoint: metadata 'quant.group' is missing or not a group size >= 0");
        else if (arena && !in_place)
            s = mhe__fail(m->err, MHE_ERR_ARG, "a q8 checkpoint loads into an arena in place only (MHE_LOAD_IN_PLACE): a copy would need its float weights");
        if (s != MHE_OK) { mhe_st_free(&st); return s; }
        q8 = 1; q8_group = (int)gv;
    }
    if ((s = mhe_config_validate(&cfg, err)) != MHE_OK) {
        mhe__fail(m->err, s, "checkpoint metadata: %s", err);
        mhe_st_free(&st);
        return s;
    }
    {   /* a hostile header must not make a small file allocate a huge model:
           the parameters have to be in the data section, 4 bytes each */
        size_t tb, fb;
        int cnt;
        int64_t floats;
        if (mhe__param_bytes(m, &cfg, &tb, &fb, &cnt, &floats) != MHE_OK || (uint64_t)floats > (uint64_t)(st.data_size / (q8 ? 1 : 4))) {
            memset(m, 0, sizeof *m);
            mhe__fail(m->err, MHE_ERR_SHAPE, "checkpoint config describes %lld parameters but the file holds %llu bytes of data",
                      (long long)floats, (unsigned long long)st.data_size);
            mhe_st_free(&st);
            return MHE_ERR_SHAPE;
        }
        memset(m, 0, sizeof *m);
    }
    if (src && src->f && (s = mhe__src_side(src, &st, q8, alloc_ctx, m->err)) != MHE_OK) { mhe_st_free(&st); return s; }
    /* for inference: no gradient block until a trainer asks (mhe__model_grads),
       no random init of weights the file gives, and a q8 model's blocks from
       mhe__q8_load, as in place */
    if ((s = mhe__model_init(m, &cfg, 0, alloc_ctx, arena, 0, in_place || (q8 && !arena), 0)) != MHE_OK) { mhe_st_free(&st); return s; }
    m->q8 = q8; m->q8_group = q8_group;
    for (i = 0; i < m->n_tensors && s == MHE_OK && (in_place || !q8); i++) {
        if (q8 && mhe__q8_stored(m, &st, &m->params[i])) continue;   /* mhe__q8_load */
        s = in_place ? mhe__map_tensor(&st, &m->params[i], m->err) : mhe__load_f32(src, &st, &m->params[i], m->err);
    }
    if (s == MHE_OK && q8) s = mhe__q8_load(m, &st, in_place, src);
    if (s == MHE_OK) s = mhe__load_words(m, &st);
    if (s == MHE_OK) s = mhe__load_bpe(m, &st, arena == NULL);
    for (i = 0; i < st.n_tensors && s == MHE_OK; i++) {
        const char *nm = st.tensors[i].name;
        size_t len = strlen(nm);
        mhe_tensor *t = mhe_model_find(m, nm);
        if (!t && q8 && len > 6 && len < MHE_NAME_LEN + 6 && !strcmp(nm + len - 6, "_scale")) {   /* a q8 matrix's scales */
            char base[MHE_NAME_LEN + 8];
            memcpy(base, nm, len - 6); base[len - 6] = 0;
            if ((t = mhe_model_find(m, base)) != NULL && !t->q8) t = NULL;
        }
        if (strncmp(nm, "optim.", 6) != 0 && strcmp(nm, MHE__CKPT_NGRAMS) != 0 && strcmp(nm, MHE__CKPT_VOCAB) != 0 && strcmp(nm, MHE__CKPT_BPE) != 0 && !t)
            s = mhe__fail(m->err, MHE_ERR_FORMAT, "checkpoint has tensor '%.100s' that this model does not", nm);
    }
    mhe_st_free(&st);
    if (s != MHE_OK) {
        memcpy(err, m->err, MHE_ERR_LEN);
        mhe_model_free(m);
        memcpy(m->err, err, MHE_ERR_LEN);
    }
    return s;
}

MHEDEF mhe_status mhe_model_load_mem(mhe_model *m, const void *buf, size_t size, void *alloc_ctx) {
    return mhe__model_load(m, buf, size, size, alloc_ctx, NULL, 0, NULL);
}

MHEDEF mhe_status mhe_model_load_arena(mhe_model *m, const void *ckpt, size_t size, mhe_arena *arena, int flags) {
    if (!arena) return m ? mhe__fail(m->err, MHE_ERR_ARG, "mhe_model_load_arena: arena is NULL") : MHE_ERR_ARG;
    return mhe__model_load(m, ckpt, size, size, NULL, arena, (flags & MHE_LOAD_IN_PLACE) != 0, NULL);
}

/* the first element of x[0..n) that is NaN or infinite, or -1: blocks are
   tested with an integer OR that the compiler vectorises (a 124M-weight
   model in tens of ms), the element looked for only in a bad block */
static MHE__VECTORISE int64_t mhe__nonfinite_index(const float *x, int64_t n) {
    int64_t i0, i;
    for (i0 = 0; i0 < n; i0 += 4096) {
        int64_t e = n - i0 < 4096 ? n : i0 + 4096;
        uint32_t bad = 0;
        for (i = i0; i < e; i++) {
            uint32_t u;
            memcpy(&u, x + i, 4);
            bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
        }
        if (bad)
            for (i = i0; i < e; i++)
                if (!mhe__is_finite(x[i])) return i;
    }
    return -1;
}

/* the first non-finite value of a buffer laid out like the parameters (the
   weights or an AdamW moment): MHE_ERR_NONFINITE naming tensor and element */
static mhe_status mhe__check_finite(const mhe_model *m, const float *base, const char *what, char *err) {
    int i;
    for (i = 0; i < m->n_tensors; i++) {
        /* the weights themselves (base == param_data) wherever they are: q8 and
           in-place models have no parameter block, and int8 tensors no floats */
        const float *p = base == m->param_data ? m->params[i].data : base + (m->params[i].data - m->param_data);
        int64_t k = p ? mhe__nonfinite_index(p, m->params[i].size) : -1;
        if (k >= 0) return mhe__fail(err, MHE_ERR_NONFINITE, "%s '%s' element %lld is %g", what, m->params[i].name, (long long)k, (double)p[k]);
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_model_check_finite(mhe_model *m) {
    if (!m || !m->params) return m ? mhe__fail(m->err, MHE_ERR_ARG, "mhe_model_check_finite: no model") : MHE_ERR_ARG;
    return mhe__check_finite(m, m->param_data, "non-finite weight:", m->err);
}

#ifndef MHE_NO_TRAIN
/* the first element of a little-endian F32 tensor that is NaN or infinite, or -1 */
static int64_t mhe__st_first_nonfinite(const mhe_st_tensor *t) {
    int64_t i;
    for (i = 0; i < t->size; i++) {
        const unsigned char *b = t->data + 4 * i;
        if ((b[3] & 0x7f) == 0x7f && (b[2] & 0x80)) return i;   /* exponent all ones */
    }
    return -1;
}
#endif

#ifndef MHE_NO_TRAIN
static int mhe__hex_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    int i;
    for (i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 1;
}
#endif

#ifndef MHE_NO_TRAIN
MHEDEF mhe_status mhe_trainer_load_mem(mhe_trainer *t, const void *buf, size_t size) {
    mhe_model *m;
    mhe_safetensors st;
    mhe_status s;
    const char *step, *rng;
    mhe_train_config tc;
    int64_t stepv;
    mhe_rng r;
    int i, f, pass;
    char tmp[MHE_ERR_LEN];
    if (!t) return MHE_ERR_ARG;
    if (!t->model || !t->adam_m || !t->adam_v) return mhe__fail(t->err, MHE_ERR_ARG, "mhe_trainer_load_mem: trainer not initialised");
    m = t->model;
    tc = t->tc;
    s = mhe_st_parse(&st, buf, size, m->alloc_ctx);
    if (s != MHE_OK) return mhe__fail(t->err, s, "%s", st.err);
    step = mhe_st_meta(&st, "step");
    rng = mhe_st_meta(&st, "rng");
    if (!step || !rng) { mhe_st_free(&st); return mhe__fail(t->err, MHE_ERR_MISSING, "not a trainer checkpoint: metadata 'step' or 'rng' missing"); }
    if (mhe__parse_i64(step, &stepv) != MHE_OK || stepv < 0 || stepv > INT_MAX) { mhe__fail(t->err, MHE_ERR_FORMAT, "bad step '%.32s'", step); mhe_st_free(&st); return MHE_ERR_FORMAT; }
    if (strlen(rng) != 64) { mhe__fail(t->err, MHE_ERR_FORMAT, "bad rng state '%.80s'", rng); mhe_st_free(&st); return MHE_ERR_FORMAT; }
    for (i = 0; i < 4; i++)
        if (!mhe__hex_u64(rng + 16 * i, &r.s[i])) { mhe__fail(t->err, MHE_ERR_FORMAT, "bad rng state '%.80s'", rng); mhe_st_free(&st); return MHE_ERR_FORMAT; }
    for (f = 0; f < MHE__N_TRAIN_FIELDS; f++) {
        char key[64];
        const char *v;
        snprintf(key, sizeof key, "train.%s", mhe__train_fields[f].key);
        v = mhe_st_meta(&st, key);
        if (v && (s = mhe_train_config_set(&tc, mhe__train_fields[f].key, v, tmp)) != MHE_OK) {
            mhe_st_free(&st);
            return mhe__fail(t->err, s, "checkpoint metadata: %s", tmp);
        }
    }
    /* the trainer keeps its own config (a resumed run may train longer);
       only the batch shape must match the saved state */
    if (tc.batch != t->tc.batch || tc.seq_len != t->tc.seq_len) {
        mhe_st_free(&st);
        return mhe__fail(t->err, MHE_ERR_CONFIG, "checkpoint trained with batch %d x seq_len %d, this trainer has %d x %d",
                         tc.batch, tc.seq_len, t->tc.batch, t->tc.seq_len);
    }
    /* pass 0 checks every moment tensor, pass 1 copies: a bad file leaves the trainer as it was */
    for (pass = 0; pass < 2 && s == MHE_OK; pass++)
        for (i = 0; i < m->n_tensors && s == MHE_OK; i++) {
            char nm[MHE_NAME_LEN + 16];
            size_t off = (size_t)(m->params[i].data - m->param_data);
            int mv;
            for (mv = 0; mv < 2 && s == MHE_OK; mv++) {
                snprintf(nm, sizeof nm, "optim.%c.%s", mv ? 'v' : 'm', m->params[i].name);
                s = mhe__load_tensor(&st, nm, &m->params[i], pass ? (mv ? t->adam_v : t->adam_m) + off : NULL, t->err);
                if (s == MHE_OK && !pass) {   /* a diverged run's moments would poison every later step */
                    int64_t bad = mhe__st_first_nonfinite(mhe_st_find(&st, nm));
                    if (bad >= 0)
                        s = mhe__fail(t->err, MHE_ERR_NONFINITE, "optimizer state '%s' element %lld is not finite: the run that saved it had diverged; not resumed",
                                      nm, (long long)bad);
                }
            }
        }
    mhe_st_free(&st);
    if (s != MHE_OK) return s;
    t->step = (int)stepv;
    t->rng = r;
    return MHE_OK;
}
#endif

#ifndef MHE_NO_STDIO
/* the header into memory, the tensors from the file into their blocks
   (mhe__src): the file is never held whole */
MHEDEF mhe_status mhe_model_load(mhe_model *m, const char *path, void *alloc_ctx) {
    FILE *f;
    unsigned char *head = NULL;
    size_t n8, hb = 0;
    uint64_t hl = 0;
    mhe__off len;
    mhe__src src;
    mhe_status s;
    char err[MHE_ERR_LEN];
    int e, k;
    if (!m) return MHE_ERR_ARG;
    memset(m, 0, sizeof *m);
    if (!path) return mhe__fail(m->err, MHE_ERR_ARG, "mhe_model_load: path is NULL");
    errno = 0;
    f = fopen(path, "rb");
    if (!f) { e = errno; return mhe__fail(m->err, MHE_ERR_IO, "cannot open '%s': %s", path, e ? strerror(e) : "fopen failed"); }
    errno = 0;
    head = (unsigned char *)MHE_MALLOC(alloc_ctx, 8);
    if (!head) { fclose(f); return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate memory to read '%s'", path); }
    n8 = fread(head, 1, 8, f);
    if (n8 < 8 && ferror(f)) {   /* a directory opens fine on some systems: the first read tells */
        e = errno;
        MHE_FREE(alloc_ctx, head); fclose(f);
        return mhe__fail(m->err, MHE_ERR_IO, "cannot read '%s': %s", path, e ? strerror(e) : "read error");
    }
    if (MHE__FSEEK(f, 0, SEEK_END) != 0 || (len = MHE__FTELL(f)) < 0 || MHE__FSEEK(f, 8, SEEK_SET) != 0) {
        MHE_FREE(alloc_ctx, head); fclose(f);
        return mhe__fail(m->err, MHE_ERR_IO, "cannot determine the size of '%s' (not a regular file, or too large)", path);
    }
    for (k = 7; k >= 0 && n8 == 8; k--) hl = hl << 8 | head[k];
    /* a header the parser will accept is read whole; any other is refused by it */
    if (n8 == 8 && hl <= (uint64_t)len - 8 && hl <= MHE_ST_MAX_HEADER) {
        unsigned char *h2 = (unsigned char *)MHE_REALLOC(alloc_ctx, head, 8, 8 + (size_t)hl);
        if (!h2) { MHE_FREE(alloc_ctx, head); fclose(f); return mhe__fail(m->err, MHE_ERR_NOMEM, "cannot allocate %llu bytes for the header of '%s'", (unsigned long long)hl, path); }
        head = h2;
        hb = (size_t)hl;
        if (fread(head + 8, 1, hb, f) != hb) {
            MHE_FREE(alloc_ctx, head); fclose(f);
            return mhe__fail(m->err, MHE_ERR_TRUNCATED, "'%s' ends inside its header (it changed while it was read?)", path);
        }
    }
    memset(&src, 0, sizeof src);
    src.f = f;
    src.pos = 8 + hb;
    s = mhe__model_load(m, head, n8 < 8 ? n8 : 8 + hb, n8 < 8 ? n8 : (uint64_t)len, alloc_ctx, NULL, 0, &src);
    if (src.side) MHE_FREE(alloc_ctx, src.side);
    MHE_FREE(alloc_ctx, head);
    fclose(f);
    if (s != MHE_OK) {
        memcpy(err, m->err, MHE_ERR_LEN);
        snprintf(m->err, MHE_ERR_LEN, "%.100s: %.140s", path, err);
    }
    return s;
}

#ifndef MHE_NO_TRAIN
MHEDEF mhe_status mhe_trainer_load(mhe_trainer *t, const char *path) {
    void *buf;
    size_t size;
    mhe_status s;
    if (!t) return MHE_ERR_ARG;
    if (!t->model) return mhe__fail(t->err, MHE_ERR_ARG, "mhe_trainer_load: trainer not initialised");
    if ((s = mhe_read_file(path, &buf, &size, t->model->alloc_ctx, t->err)) != MHE_OK) return s;
    s = mhe_trainer_load_mem(t, buf, size);
    MHE_FREE(t->model->alloc_ctx, buf);
    return s;
}
#endif /* MHE_NO_TRAIN */

static mhe_status mhe__save(const mhe_model *m, const mhe_trainer *t, const char *path, int grads_only, char *err) {
    mhe__ckpt k;
    mhe_status st = MHE_OK;
    if (!grads_only) {   /* a diverged state never replaces a good checkpoint */
        char why[MHE_ERR_LEN];
        st = mhe__check_finite(m, m->param_data, "non-finite weight", why);
        if (st == MHE_OK && t && t->adam_m) st = mhe__check_finite(m, t->adam_m, "non-finite optimizer state optim.m of", why);
        if (st == MHE_OK && t && t->adam_v) st = mhe__check_finite(m, t->adam_v, "non-finite optimizer state optim.v of", why);
        if (st != MHE_OK) return mhe__fail(err, st, "not saved: %.150s; '%.60s' left unchanged", why, path ? path : "");
    }
    st = mhe__ckpt_build(m, t, &k, grads_only, err);
    if (st != MHE_OK) return st;
    st = mhe_st_save_file(path, k.items, k.n_items, k.keys, k.values, k.n_meta, m->alloc_ctx, err);
    MHE_FREE(m->alloc_ctx, k.block);
    return st;
}

MHEDEF mhe_status mhe_checkpoint_save(const mhe_model *m, const mhe_trainer *t, const char *path) {
    return mhe__save(m, t, path, 0, t ? ((mhe_trainer *)t)->err : ((mhe_model *)m)->err);
}

#ifndef MHE_NO_TRAIN
MHEDEF mhe_status mhe_grads_save(const mhe_model *m, const char *path) {
    return mhe__save(m, NULL, path, 1, ((mhe_model *)m)->err);
}
#endif /* MHE_NO_TRAIN */
#endif

/* ---- 11. metrics ------------------------------------------------------------ */

MHEDEF double mhe_perplexity(double mean_loss) { return exp(mean_loss); }

MHEDEF double mhe_prr(double score, double score_mha, int inverse) {
    return inverse ? 1.0 - (score - score_mha) / score_mha : score / score_mha;
}

MHEDEF double mhe_peop(double score, double params, double score_sha, double params_sha, int inverse) {
    double e = (score / score_sha - 1.0) / (params / params_sha - 1.0);
    return inverse ? -e : e;
}

MHEDEF void mhe_cls_metrics_from_confusion(const int64_t *conf, int K, mhe_cls_metrics *out) {
    double s = 0, correct = 0, sum_pt = 0, sum_p2 = 0, sum_t2 = 0, f1 = 0, den;
    int k, j, classes = 0;
    for (k = 0; k < K; k++) {
        double t = 0, p = 0, tp = (double)conf[(size_t)k * K + k];
        for (j = 0; j < K; j++) { t += (double)conf[(size_t)k * K + j]; p += (double)conf[(size_t)j * K + k]; }
        s += t; correct += tp;
        sum_pt += p * t; sum_p2 += p * p; sum_t2 += t * t;
        if (t + p > 0) { f1 += 2 * tp / (t + p); classes++; }   /* 2TP / (2TP + FP + FN) */
    }
    memset(out, 0, sizeof *out);
    out->n = (int64_t)s;
    if (s == 0) return;
    out->accuracy = correct / s;
    out->macro_f1 = classes ? f1 / classes : 0;
    den = sqrt((s * s - sum_p2) * (s * s - sum_t2));
    out->mcc = den > 0 ? (correct * s - sum_pt) / den : 0;   /* one class predicted or present: 0 */
}

MHEDEF double mhe_unigram_entropy(const int *data, size_t n, int vocab) {
    double h = 0;
    size_t i, counted = 0;
    int v;
    int64_t small[256], *counts = small;
    if (n == 0 || vocab < 1) return 0;
    if (vocab > 256) {
        counts = (int64_t *)MHE_MALLOC(NULL, (size_t)vocab * sizeof(int64_t));
        if (!counts) return -1;
    }
    memset(counts, 0, (size_t)(vocab > 256 ? vocab : 256) * sizeof(int64_t));
    for (i = 0; i < n; i++) if (data[i] >= 0 && data[i] < vocab) { counts[data[i]]++; counted++; }
    for (v = 0; v < vocab; v++)
        if (counts[v]) { double p = (double)counts[v] / (double)counted; h -= p * log(p); }
    if (counts != small) MHE_FREE(NULL, counts);
    return h;
}

/* ---- 11. metrics: attention-pattern indicators (thesis sec. 4.4.4) ---------- */

static const char *const mhe__ind_names[MHE_IND_COUNT] = {
    "entropy", "entropy_norm", "conc", "conc_norm", "headdiv", "sink", "locfoc0", "locfoc1", "locfoc2", "locfoc3"
};
MHEDEF const char *mhe_ind_name(int ind) { return ind >= 0 && ind < MHE_IND_COUNT ? mhe__ind_names[ind] : "?"; }

MHEDEF void mhe_attn_map_indicators(const float *A, int L, int ld, int causal, double *out) {
    double ent = 0, entn = 0, sq = 0, sink = 0, loc[4] = { 0, 0, 0, 0 };
    int t, j, rows_n = 0, N;
    for (t = 0; t < L; t++) {
        const float *row = A + (size_t)t * ld;
        double h = 0;
        int vis = causal ? t + 1 : L;
        for (j = 0; j < L; j++) {
            double a = row[j];
            if (a > 0) h -= a * log(a);
            sq += a * a;
        }
        ent += h;
        if (vis > 1) { entn += h / log((double)vis); rows_n++; }
        sink += row[0];
        for (N = 0; N < 4; N++) if (t >= N) loc[N] += row[t - N];
    }
    memset(out, 0, MHE_IND_COUNT * sizeof(double));
    if (L < 1) return;
    out[MHE_IND_ENTROPY] = ent / L;
    out[MHE_IND_ENTROPY_N] = rows_n ? entn / rows_n : 0;
    out[MHE_IND_CONC] = sqrt(sq);
    out[MHE_IND_CONC_N] = sqrt(sq / L);
    out[MHE_IND_SINK] = sink / L;
    for (N = 0; N < 4; N++) out[MHE_IND_LOCFOC0 + N] = L > N ? loc[N] / (L - N) : 0;
}

MHEDEF double mhe_attn_headdiv(const float *A, int n, size_t head_stride, int L, int ld, int causal) {
    double sum = 0;
    int64_t cnt = 0;
    int t, j, h;
    if (n < 1 || L < 1) return 0;
    for (t = 0; t < L; t++)
        for (j = 0; j < (causal ? t + 1 : L); j++) {
            double m1 = 0, m2 = 0;
            for (h = 0; h < n; h++) { double a = A[(size_t)h * head_stride + (size_t)t * ld + j]; m1 += a; m2 += a * a; }
            m1 /= n; m2 = m2 / n - m1 * m1;
            sum += m2 > 0 ? sqrt(m2) : 0;
            cnt++;
        }
    return sum / (double)cnt;
}

MHEDEF double mhe_indicator(const mhe_indicators *ind, int layer, int head, int which) {
    if (!ind || !ind->v || layer < 0 || layer >= ind->n_layers || head < -1 || head >= ind->n_heads || which < 0 || which >= MHE_IND_COUNT)
        return 0;
    if (head < 0) head = ind->n_heads;
    return ind->v[((size_t)layer * (ind->n_heads + 1) + head) * MHE_IND_COUNT + which];
}

MHEDEF void mhe_indicators_free(mhe_indicators *ind) {
    if (ind && ind->v) MHE_FREE(ind->alloc_ctx, ind->v);
    if (ind) memset(ind, 0, sizeof *ind);
}

/* a head's map for sequence b of the last forward on the reference path:
   its probabilities (sha: its one head for every copy), the identity for mlp
   (each token sees only itself), NULL where there is none */
static const float *mhe__layer_map(const mhe_model *m, int l, int b, int h, const float *identity) {
    const mhe_layer *y = &m->layers[l];
    int T = m->last_T, nh;
    if (mhe__kind_identity_map(y->attn.kind)) return identity;
    if (!mhe__kind_has_map(y->attn.kind) || m->cfg.fused_attention) return NULL;
    nh = mhe__layer_geom(&m->cfg, y->attn.kind).core_q_heads;
    if (h >= nh) h = nh - 1;
    return m->acts.layer[l].attn.stats + (((size_t)b * nh + h) * T) * T;
}

/* drop the activation blocks: the next forward lays them out for the config as it now is */
static void mhe__acts_drop(mhe_model *m) {
    if (m->acts_block) MHE_FREE(m->alloc_ctx, m->acts_block);
    if (m->fixed.block) MHE_FREE(m->alloc_ctx, m->fixed.block);
    m->acts_block = m->fixed.block = NULL;
    m->fixed.T = 0;
    memset(&m->acts, 0, sizeof m->acts);
}

MHEDEF void mhe_model_set_reference(mhe_model *m, int reference) {
    if (!m || m->cfg.fused_attention == !reference) return;
    mhe__acts_drop(m);
    m->cfg.fused_attention = !reference;
}

MHEDEF int mhe_attn_probs(mhe_model *m, int layer, int head, float *probs) {
    int E, T, t;
    const float *A;
    if (!m || !probs || layer < 0 || layer >= m->cfg.n_layers || head < 0 || head >= m->cfg.n_heads || m->last_T < 1) return 0;
    E = mhe__n_enc(&m->cfg); T = m->last_T;
    if (mhe__kind_identity_map(m->layers[E + layer].attn.kind)) {
        memset(probs, 0, (size_t)T * T * sizeof(float));
        for (t = 0; t < T; t++) probs[(size_t)t * T + t] = 1.0f;
        return 1;
    }
    if (!(A = mhe__layer_map(m, E + layer, 0, head, NULL))) return 0;
    memcpy(probs, A, (size_t)T * T * sizeof(float));
    return 1;
}

MHEDEF mhe_status mhe_indicators_eval(mhe_model *m, const int *data, size_t n, int batch, int seq_len,
                                      int max_batches, mhe_indicators *out) {
    const mhe_config *c;
    int E, NL, nh, T = seq_len, b, l, h, i, nb = 0, fused, causal;
    size_t windows, w = 0, need, vlen;
    int *buf = NULL;
    float *identity = NULL;
    double total = 0;
    int64_t count = 0;
    mhe_rng mask_rng;
    mhe_batch bt;
    mhe_status st = MHE_OK;
    if (!m || !out) return MHE_ERR_ARG;
    memset(out, 0, sizeof *out);
    c = &m->cfg;
    E = mhe__n_enc(c); NL = c->n_layers; nh = c->n_heads; causal = c->arch != MHE_ARCH_ENCODER;
    if (batch < 1 || seq_len < 1 || seq_len > c->max_seq_len)
        return mhe__fail(m->err, MHE_ERR_ARG, "indicators: batch %d and seq_len %d must be >= 1 (seq_len <= %d)", batch, seq_len, c->max_seq_len);
    if (E) return mhe__fail(m->err, MHE_ERR_CONFIG, "indicators: decoder and encoder models only (not arch=encdec)");
    need = mhe__lm_span(m, T, T);
    if (!data || n < need) return mhe__fail(m->err, MHE_ERR_DATA, "indicators: the data has %zu tokens, needs at least %zu", n, need);
    vlen = (size_t)NL * (nh + 1) * MHE_IND_COUNT;
    out->v = (double *)MHE_MALLOC(m->alloc_ctx, vlen * sizeof(double));
    buf = (int *)MHE_MALLOC(m->alloc_ctx, 2 * (size_t)batch * T * sizeof(int));
    identity = (float *)MHE_MALLOC(m->alloc_ctx, (size_t)T * T * sizeof(float));
    if (!out->v || !buf || !identity) {
        if (buf) MHE_FREE(m->alloc_ctx, buf);
        if (identity) MHE_FREE(m->alloc_ctx, identity);
        mhe_indicators_free(out);
        return mhe__fail(m->err, MHE_ERR_NOMEM, "indicators: out of memory");
    }
    memset(out->v, 0, vlen * sizeof(double));
    memset(identity, 0, (size_t)T * T * sizeof(float));
    for (i = 0; i < T; i++) identity[(size_t)i * T + i] = 1.0f;
    out->alloc_ctx = m->alloc_ctx; out->n_layers = NL; out->n_heads = nh;
    for (l = 0; l < NL; l++) {
        out->kind[l] = m->layers[l].attn.kind;
        out->has_map[l] = mhe__kind_has_map(out->kind[l]) && !(m->skip_attn >> l & 1);
    }
    fused = c->fused_attention;
    if (fused) { mhe__acts_drop(m); m->cfg.fused_attention = 0; }   /* the reference path materialises the maps */
    m->training = 0;
    mhe_rng_seed(&mask_rng, 0x6d6c6dULL);
    memset(&bt, 0, sizeof bt);
    bt.T = T; bt.tokens = buf; bt.targets = buf + (size_t)batch * T;
    windows = (n - need) / (size_t)T + 1;
    while (w < windows && (max_batches <= 0 || nb < max_batches)) {
        float loss;
        bt.B = (int)(windows - w < (size_t)batch ? windows - w : (size_t)batch);
        for (b = 0; b < bt.B; b++, w++)
            mhe__lm_row(m, data + w * T, T, T, 0.15f, &mask_rng, buf + (size_t)b * T, buf + (size_t)(batch + b) * T, NULL);
        if ((st = mhe_model_forward_batch(m, &bt, &loss)) != MHE_OK) break;
        total += (double)loss * m->last_count; count += m->last_count;
        for (l = 0; l < NL; l++) {
            if (!out->has_map[l]) continue;
            for (b = 0; b < bt.B; b++) {
                double ind[MHE_IND_COUNT], hd;
                for (h = 0; h < nh; h++) {
                    double *acc = out->v + ((size_t)l * (nh + 1) + h) * MHE_IND_COUNT;
                    mhe_attn_map_indicators(mhe__layer_map(m, l, b, h, identity), T, T, causal, ind);
                    for (i = 0; i < MHE_IND_COUNT; i++) acc[i] += ind[i];
                }
                if (mhe__kind_identity_map(m->layers[l].attn.kind) || mhe__layer_geom(c, m->layers[l].attn.kind).core_q_heads == 1) hd = 0;
                else hd = mhe_attn_headdiv(mhe__layer_map(m, l, b, 0, identity), nh, (size_t)T * T, T, T, causal);
                out->v[((size_t)l * (nh + 1) + nh) * MHE_IND_COUNT + MHE_IND_HEADDIV] += hd;
            }
        }
        out->sequences += bt.B;
        nb++;
    }
    if (fused) { mhe__acts_drop(m); m->cfg.fused_attention = 1; }
    MHE_FREE(m->alloc_ctx, buf);
    MHE_FREE(m->alloc_ctx, identity);
    if (st != MHE_OK) { mhe_indicators_free(out); return st; }
    out->loss = count ? total / (double)count : 0;
    for (l = 0; l < NL; l++) {   /* means over sequences; the head mean in row nh; HeadDiv in every row */
        double *mean = out->v + ((size_t)l * (nh + 1) + nh) * MHE_IND_COUNT, hd = mean[MHE_IND_HEADDIV] / (double)out->sequences;
        for (h = 0; h < nh; h++) {
            double *r = out->v + ((size_t)l * (nh + 1) + h) * MHE_IND_COUNT;
            for (i = 0; i < MHE_IND_COUNT; i++) { r[i] /= (double)out->sequences; if (i != MHE_IND_HEADDIV) mean[i] += r[i] / nh; }
            r[MHE_IND_HEADDIV] = hd;
        }
        mean[MHE_IND_HEADDIV] = hd;
        if (!out->has_map[l]) for (h = 0; h <= nh; h++) for (i = 0; i < MHE_IND_COUNT; i++) out->v[((size_t)l * (nh + 1) + h) * MHE_IND_COUNT + i] = NAN;
    }
    return MHE_OK;
}

/* ---- 12. inference: KV cache and sampling ----------------------------------- */

MHEDEF size_t mhe_attn_cache_bytes(const mhe_config *c, int kind, int len, size_t *shared) {
    mhe__geom g;
    size_t st, sh = 0;
    if (shared) *shared = 0;
    if (!c || !mhe__kind_valid(kind) || len < 0) return 0;
    g = mhe__layer_geom(c, kind);
    st = mhe__decode_state_floats(c, kind, len);
    if (mhe__kind_fixed(kind)) { sh = st; st = 0; }
    if (shared) *shared = sh * sizeof(float);
    return ((size_t)(g.cache_k + g.cache_v) * (size_t)len + st) * sizeof(float);
}

/* with c->block NULL only sizes the cache (*bytes); else lays it out in
   c->block; its scratch holds `rows` tokens (mhe_prefill's chunk) */
static mhe_status mhe__kv_cache_layout(mhe_kv_cache *c, const mhe_model *m, int max_len, int rows, size_t *bytes) {
    const mhe_config *cfg;
    size_t per_tok = 0, per_src = 0, per_state = 0, total, scratch;
    float *p;
    int ok = 1, l, E;
    void *block = c->block;
    memset(c, 0, sizeof *c);
    cfg = &m->cfg;
    E = mhe__n_enc(cfg);
    if (max_len < 1 || max_len > cfg->max_seq_len) return MHE_ERR_ARG;
    c->max_len = max_len;
    c->n_layers = m->n_total_layers;
    for (l = E; l < m->n_total_layers; l++) {   /* only the decoding stack caches */
        mhe__geom g = mhe__layer_geom(cfg, m->layers[l].attn.kind);
        const mhe_attn_kind_ops *ops = mhe__user_ops(m->layers[l].attn.kind);
        if (ops && !ops->decode) return MHE_ERR_CONFIG;   /* a registered kind without a decoding step */
        c->k_width[l] = g.cache_k; c->v_width[l] = g.cache_v;
        per_tok += (size_t)g.cache_k + (size_t)g.cache_v;
        c->state_floats[l] = mhe__decode_state_floats(cfg, m->layers[l].attn.kind, max_len);
        per_state += c->state_floats[l];
        c->layer_bytes[l] = mhe_attn_cache_bytes(cfg, m->layers[l].attn.kind, max_len, &c->shared_bytes[l]);
        if (m->layers[l].cross.kind >= 0) {
            g = mhe__layer_geom(cfg, m->layers[l].cross.kind);
            c->cross_width[l] = g.k_w ? g.k_w + g.v_w : cfg->d_model;   /* el-att: the encoder output itself */
            per_src += (size_t)c->cross_width[l];
        }
    }
    c->prefill_rows = rows < max_len ? rows : max_len;
    scratch = mhe__decode_layout(m, NULL, NULL, c->prefill_rows);
    total = mhe__add_size(mhe__mul_size(per_tok, (size_t)max_len, &ok), scratch, &ok);
    total = mhe__add_size(total, per_state, &ok);
    total = mhe__add_size(total, mhe__mul_size(per_src, (size_t)cfg->max_seq_len, &ok), &ok);
    total = mhe__mul_size(total, sizeof(float), &ok);
    if (!ok) return MHE_ERR_OVERFLOW;
    *bytes = total;
    if (!block) return MHE_OK;
    c->block = block;
    p = (float *)c->block;
    for (l = E; l < m->n_total_layers; l++) {
        c->k[l] = p; p += (size_t)c->k_width[l] * max_len;
        c->v[l] = c->v_width[l] ? p : c->k[l]; p += (size_t)c->v_width[l] * max_len;
        if (c->cross_width[l]) { c->cross[l] = p; p += (size_t)c->cross_width[l] * cfg->max_seq_len; }
        if (c->state_floats[l]) { c->state[l] = p; p += c->state_floats[l]; }
    }
    c->scratch = p;
    c->logits = c->scratch + scratch - (size_t)cfg->vocab_size;   /* the layout's last block */
    c->bytes_per_token = per_tok * sizeof(float);
    c->bytes = per_tok * (size_t)max_len * sizeof(float);
    c->cross_bytes = per_src * (size_t)cfg->max_seq_len * sizeof(float);
    return MHE_OK;
}

static mhe_status mhe__kv_cache_init(mhe_kv_cache *c, const mhe_model *m, int max_len, void *alloc_ctx, mhe_arena *arena) {
    int rows = arena ? 1 : MHE_PREFILL_ROWS;
    size_t bytes;
    mhe_status s;
    void *block;
    if (!c) return MHE_ERR_ARG;
    memset(c, 0, sizeof *c);
    if (!m) return MHE_ERR_ARG;
    if ((s = mhe__kv_cache_layout(c, m, max_len, rows, &bytes)) != MHE_OK) return s;
    block = mhe__malloc(alloc_ctx, arena, bytes);
    if (!block) return MHE_ERR_NOMEM;
    c->block = block;
    mhe__kv_cache_layout(c, m, max_len, rows, &bytes);
    c->alloc_ctx = alloc_ctx;
    c->arena = arena;
    return MHE_OK;
}

MHEDEF mhe_status mhe_kv_cache_init(mhe_kv_cache *c, const mhe_model *m, int max_len, void *alloc_ctx) {
    return mhe__kv_cache_init(c, m, max_len, alloc_ctx, NULL);
}

MHEDEF mhe_status mhe_kv_cache_init_arena(mhe_kv_cache *c, const mhe_model *m, int max_len, mhe_arena *arena) {
    if (!arena) return MHE_ERR_ARG;
    return mhe__kv_cache_init(c, m, max_len, NULL, arena);
}

MHEDEF mhe_status mhe_inference_memory_needed(const void *ckpt, size_t size, int max_len, int flags, size_t *bytes) {
    mhe_safetensors st;
    mhe_config cfg;
    mhe_kv_cache kv;
    mhe_status s;
    size_t tbytes, fbytes, kvb, total;
    int count, ok = 1;
    int64_t floats;
    char err[MHE_ERR_LEN];
    mhe_model *m;
    if (!bytes) return MHE_ERR_ARG;
    *bytes = 0;
    if ((s = mhe_st_parse(&st, ckpt, size, NULL)) != MHE_OK) return s;
    s = mhe__ckpt_config(&st, &cfg, err);
    if (s == MHE_OK && mhe_st_meta(&st, "quant") && !(flags & MHE_LOAD_IN_PLACE)) s = MHE_ERR_ARG;   /* q8: in place only */
    if (s == MHE_OK) s = mhe_config_validate(&cfg, err);
    m = s == MHE_OK ? (mhe_model *)MHE_MALLOC(NULL, sizeof *m) : NULL;   /* a layout to measure, too big for small stacks */
    if (s == MHE_OK && !m) s = MHE_ERR_NOMEM;
    if (s == MHE_OK) s = mhe__param_bytes(m, &cfg, &tbytes, &fbytes, &count, &floats);
    if (s == MHE_OK && (max_len < 1 || max_len > cfg.max_seq_len)) s = MHE_ERR_ARG;
    if (s == MHE_OK) {
        kv.block = NULL;
        s = mhe__kv_cache_layout(&kv, m, max_len, 1, &kvb);
    }
    if (s == MHE_OK) {
        /* what mhe_model_load_arena and mhe_kv_cache_init_arena take, each
           block rounded up as the arena rounds it, plus the start's alignment */
        total = MHE_ARENA_ALIGN + MHE_ARENA_ROUND(st.storage_bytes) + MHE_ARENA_ROUND(tbytes) +
                (flags & MHE_LOAD_IN_PLACE ? 0 : MHE_ARENA_ROUND(fbytes)) + MHE_ARENA_ROUND(kvb);
        if (cfg.arch == MHE_ARCH_ENCDEC)   /* encoding a source runs the encoder on the model's activations */
            total = mhe__add_size(total, MHE_ARENA_ROUND(mhe__acts_layout(m, 1, 1, cfg.max_seq_len, NULL) + MHE_ARENA_ALIGN), &ok);
        if (!ok) s = MHE_ERR_OVERFLOW;
        else *bytes = total;
    }
    if (m) MHE_FREE(NULL, m);
    mhe_st_free(&st);
    return s;
}

MHEDEF void mhe_kv_cache_free(mhe_kv_cache *c) {
    if (c && c->block) mhe__free(c->alloc_ctx, c->arena, c->block);
    if (c) memset(c, 0, sizeof *c);
}

/* rndemb-qk / fixedseq-qk at inference: their maps depend on no input, so
   the fixed stream runs once (max_len positions) and every row
   A[t, j <= t] = softmax_j(q_t . k_j / sqrt(d_h)) is kept (thesis sec. 4.11) */
static mhe_status mhe__decode_maps(mhe_model *m, mhe_kv_cache *c) {
    const mhe_config *cfg = &m->cfg;
    int n = cfg->n_heads, dh = mhe_config_d_head(cfg), HD = n * dh, T = c->max_len, l, h, t, j;
    float scale = 1.0f / sqrtf((float)dh);
    size_t tri = (size_t)T * (T + 1) / 2;
    mhe_status st;
    if (m->fixed.kind < 0) return MHE_OK;
    if ((st = mhe__fixed_fwd(m, T, 1)) != MHE_OK) return st;
    for (l = 0; l < m->fixed.top; l++) {
        const float *fp = m->fixed.acts.layer[l].attn.proj;
        if (!mhe__kind_fixed(m->layers[l].attn.kind)) continue;
        for (h = 0; h < n; h++)
            for (t = 0; t < T; t++) {
                float *row = c->state[l] + (size_t)h * tri + (size_t)t * (t + 1) / 2, mx = -INFINITY;
                double z = 0;
                for (j = 0; j <= t; j++) {
                    row[j] = scale * mhe__dot(fp + (size_t)t * 3 * HD + (size_t)h * dh, fp + (size_t)j * 3 * HD + HD + (size_t)h * dh, dh);
                    mx = row[j] > mx ? row[j] : mx;
                }
                for (j = 0; j <= t; j++) z += exp((double)row[j] - mx);
                for (j = 0; j <= t; j++) row[j] = (float)(exp((double)row[j] - mx) / z);
            }
    }
    c->maps_len = T;
    return MHE_OK;
}

MHEDEF mhe_status mhe_kv_cache_encode(mhe_model *m, mhe_kv_cache *c, const int *src, int Ts) {
    const mhe_scratch *outer;
    const mhe_config *cfg;
    mhe_status st;
    int l, E;
    if (!m || !c) return MHE_ERR_ARG;
    cfg = &m->cfg;
    E = mhe__n_enc(cfg);
    if (!E) return mhe__fail(m->err, MHE_ERR_CONFIG, "only an encoder-decoder model (arch=encdec) encodes a source");
    if (!c->block || c->n_layers != m->n_total_layers) return mhe__fail(m->err, MHE_ERR_ARG, "the KV cache was not made for this model");
    if (Ts < 1 || Ts > cfg->max_seq_len) return mhe__fail(m->err, MHE_ERR_ARG, "source length %d is outside [1, %d]", Ts, cfg->max_seq_len);
    if ((st = mhe__check_tokens(m, src, Ts, "source")) != MHE_OK) return st;
    /* an arena model takes its activations once, for the longest source (as mhe_inference_memory_needed counts) */
    if ((st = mhe_model_reserve(m, 1, 1, m->arena ? cfg->max_seq_len : Ts)) != MHE_OK) return st;
    m->training = 0;
    memcpy(m->acts.src, src, (size_t)Ts * sizeof(int));
    m->acts.src_lengths[0] = Ts;
    m->last_B = 1; m->last_Ts = Ts; m->last_has_targets = 0;
    outer = mhe_scratch_bind(&m->acts.kernel);
    mhe__encode(m);
    for (l = E; l < m->n_total_layers; l++) {
        const mhe_attn_weights *w = &m->layers[l].cross;
        mhe__geom g = mhe__layer_geom(cfg, w->kind);
        if (mhe__kind(w->kind)->qk == MHE__QK_STATIC) {   /* K from the source's static embeddings (through norm3), V from the encoder output */
            const float *ne = m->cfg.post_norm ? m->acts.src_emb
                            : mhe__static_in(m, m->layers[l].norm3_w, m->layers[l].norm3_b, m->acts.src_emb, Ts, m->acts.layer[l].cross.ext);
            mhe__lin_rowsq(c->cross[l], g.k_w + g.v_w, ne, cfg->d_model, w->wk, mhe__opt_data(w->bk), Ts, cfg->d_model, g.k_w);
            mhe__lin_rowsq(c->cross[l] + g.k_w, g.k_w + g.v_w, m->acts.mem, cfg->d_model, w->wv, mhe__opt_data(w->bv), Ts, cfg->d_model, g.v_w);
        } else if (g.k_w) {
            mhe__cross_kv(w, &g, cfg->d_model, Ts, m->acts.mem, c->cross[l]);
        }
        else memcpy(c->cross[l], m->acts.mem, (size_t)Ts * cfg->d_model * sizeof(float));
    }
    mhe_scratch_bind(outer);
    c->src_len = Ts;
    c->len = 0;
    return MHE_OK;
}

/* The forward pass for rows new tokens at positions c->len, c->len + 1, ...,
   reading earlier keys and values (and the encoded source) from the cache:
   every sublayer through the halves training uses (mhe__sub_enter,
   mhe__sub_leave: norms, Admin's omega) over all rows at once, each branch
   through its kind's decode (chain 3), the final norm and head for the last
   token only (into c->logits). The caller checked the tokens and the room. */
static mhe_status mhe__decode_rows(mhe_model *m, mhe_kv_cache *c, const int *tokens, int rows, mhe__decode_buf *d) {
    const mhe_config *cfg = &m->cfg;
    int C = cfg->d_model, pos = c->len, E = mhe__n_enc(cfg), l, k, r, i;
    float *x = d->sum, *mean = d->stats, *rstd = d->stats + rows;
    const float *out;
    m->training = 0;
    if (pos == 0) {   /* a new sequence: fresh recurrent states, maps of the current weights */
        mhe_status st;
        for (l = E; l < m->n_total_layers; l++) mhe__decode_state_reset(m, c, l);
        if ((st = mhe__decode_maps(m, c)) != MHE_OK) return st;
    }
    mhe__q8_gather(x, m->tok_emb, tokens, rows, C);   /* int8 rows in a q8 model */
    for (r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * C;
        const float *pe = m->pos_emb->data + (size_t)(pos + r) * C;
        for (i = 0; i < C; i++) xr[i] += pe[i];
        if (m->type_emb) mhe__axpy(xr, 1.0f, m->type_emb->data, C);   /* type 0, as a batch without types */
    }
    if (m->emb_norm_w) {
        mhe__norm_fwd(m, d->nrm, mean, rstd, x, m->emb_norm_w, m->emb_norm_b, rows);
        memcpy(x, d->nrm, (size_t)rows * C * sizeof(float));
    }
    memcpy(d->emb, x, (size_t)rows * C * sizeof(float));   /* staticemb-qk reads the tokens' static embeddings */
    for (l = E; l < m->n_total_layers; l++) {
        const mhe_layer *y = &m->layers[l];
        for (k = 0; k < 3; k++) {
            const float *u;
            if (k == 1 && y->cross.kind < 0) continue;
            if (k == 0 && (m->skip_attn >> y->index & 1)) continue;   /* skipped: the identity */
            u = mhe__sub_enter(m, y, k, x, d->nrm, mean, rstd, rows);
            if (k == 2) mhe__mlp_fwd(m, y, rows, u, d->fc1, d->act, d->branch);
            else mhe__attn_branch_decode(m, c, l, k, pos, rows, u, d);
            mhe__sub_leave(m, y, l, k, x, d->branch, d->sum, d->nrm, mean, rstd, rows);
            x = cfg->post_norm ? d->nrm : d->sum;
        }
    }
    out = x + (size_t)(rows - 1) * C;   /* the next token's logits: the last row's */
    if (!cfg->post_norm) {
        mhe__norm_fwd(m, d->fin, mean, rstd, out, m->lnf_w, m->lnf_b, 1);
        out = d->fin;
    }
    if (m->head_w) {   /* the head's transform, as the batched forward: branch's first row, then fin or sum's */
        float *dst = out == d->fin ? d->sum : d->fin;
        mhe__linq(d->branch, out, m->head_w, mhe__opt_data(m->head_b), 1, C, C);
        mhe_act_fwd(cfg->activation, d->branch, d->branch, C);
        mhe__norm_fwd(m, dst, d->stats + 2 * rows, d->stats + 2 * rows + 1, d->branch, m->head_norm_w, m->head_norm_b, 1);
        out = dst;
    }
    mhe__linq(c->logits, out, (m->lm_head ? m->lm_head : m->tok_emb), mhe__opt_data(m->lm_b), 1, C, cfg->vocab_size);
    c->len += rows;
    {   /* V values beside the head's V x C products: sampling from NaN would give token 0 */
        int64_t bad = mhe__nonfinite_index(c->logits, cfg->vocab_size);
        if (bad >= 0)
            return mhe__fail(m->err, MHE_ERR_NONFINITE, "decoding position %d: logit %lld is %g (a forward pass over the tokens so far "
                             "finds the layer: mhe_model_find_nonfinite)", c->len - 1, (long long)bad, (double)c->logits[bad]);
    }
    return MHE_OK;
}

/* the checks of mhe_decode_step and mhe_prefill, before anything changes */
static mhe_status mhe__decode_check(mhe_model *m, mhe_kv_cache *c, const int *tokens, int n) {
    const mhe_config *cfg = &m->cfg;
    int i;
    if (cfg->arch == MHE_ARCH_ENCODER) return mhe__fail(m->err, MHE_ERR_CONFIG, "token-by-token decoding needs a decoder (arch=decoder or encdec)");
    if (cfg->embedding != MHE_EMB_VOCAB || cfg->token_head != MHE_HEAD_LM)
        return mhe__fail(m->err, MHE_ERR_CONFIG, "nothing to generate: %s", cfg->embedding != MHE_EMB_VOCAB
                         ? "hash embeddings have no vocabulary softmax" : "the model has a Shuffle+Random head, not an LM head");
    if (!c->block || c->n_layers != m->n_total_layers) return mhe__fail(m->err, MHE_ERR_ARG, "the KV cache was not made for this model");
    if (!tokens || n < 1) return mhe__fail(m->err, MHE_ERR_ARG, "no tokens to decode (n=%d)", n);
    for (i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size) {
            if (n == 1) return mhe__fail(m->err, MHE_ERR_DATA, "token %d is outside the vocabulary [0, %d)", tokens[i], cfg->vocab_size);
            return mhe__fail(m->err, MHE_ERR_DATA, "token %d (prompt position %d) is outside the vocabulary [0, %d)", tokens[i], i,
                             cfg->vocab_size);
        }
    if (c->len >= c->max_len) return mhe__fail(m->err, MHE_ERR_ARG, "KV cache is full (%d tokens)", c->max_len);
    if (n > c->max_len - c->len)
        return mhe__fail(m->err, MHE_ERR_ARG, "%d tokens do not fit the KV cache (%d of %d positions used)", n, c->len, c->max_len);
    if (mhe__n_enc(cfg) && c->src_len < 1) return mhe__fail(m->err, MHE_ERR_ARG, "encode a source with mhe_kv_cache_encode before decoding");
    return MHE_OK;
}

MHEDEF mhe_status mhe_decode_step(mhe_model *m, mhe_kv_cache *c, int token) {
    mhe__decode_buf d;
    mhe_status st;
    if (!m || !c) return MHE_ERR_ARG;
    if ((st = mhe__decode_check(m, c, &token, 1)) != MHE_OK) return st;
    mhe__decode_layout(m, c->scratch, &d, 1);
    return mhe__decode_rows(m, c, &token, 1, &d);
}

/* A prompt in chunks of the cache's prefill_rows: each chunk's projections
   and MLPs are GEMMs over its rows, so the weights are read once per chunk
   rather than once per token; a token's attention is the decode step's. */
MHEDEF mhe_status mhe_prefill(mhe_model *m, mhe_kv_cache *c, const int *tokens, int n) {
    mhe__decode_buf d;
    mhe_status st;
    int done, rows;
    if (!m || !c) return MHE_ERR_ARG;
    if ((st = mhe__decode_check(m, c, tokens, n)) != MHE_OK) return st;
    for (done = 0; done < n && st == MHE_OK; done += rows) {
        rows = n - done < c->prefill_rows ? n - done : c->prefill_rows;
        mhe__decode_layout(m, c->scratch, &d, rows);
        st = mhe__decode_rows(m, c, tokens + done, rows, &d);
    }
    return st;
}

MHEDEF int mhe_sample(const float *logits, int V, float temperature, int top_k, mhe_rng *rng) {
    float mx = -INFINITY, thr = -INFINITY;
    double sum = 0, u, acc = 0;
    int i, best = 0;
    for (i = 0; i < V; i++) if (logits[i] > mx) { mx = logits[i]; best = i; }
    if (temperature <= 0 || top_k == 1) return best;
    if (top_k > 0 && top_k < V) {
        /* k-th largest value, ties counted: lower the threshold until k values pass it */
        int taken = 0;
        float cur = INFINITY;
        while (taken < top_k) {
            float next = -INFINITY;
            int cnt = 0;
            for (i = 0; i < V; i++) if (logits[i] < cur && logits[i] > next) next = logits[i];
            if (next == -INFINITY) break;
            for (i = 0; i < V; i++) if (logits[i] == next) cnt++;
            taken += cnt;
            cur = next;
        }
        thr = cur;
    }
    for (i = 0; i < V; i++) if (logits[i] >= thr) sum += exp((logits[i] - mx) / temperature);
    u = mhe_rng_uniform(rng) * sum;
    for (i = 0; i < V; i++) {
        if (logits[i] < thr) continue;
        acc += exp((logits[i] - mx) / temperature);
        if (acc > u) return i;
    }
    return best;
}

/* ======================================================================== */
/* companion interface                                                      */
/* ======================================================================== */
/* The private functions the CUDA companion mhe_cuda.cuh calls, in one place:
   a user's .cu file includes mhe.h (with MHE_IMPLEMENTATION) and then
   mhe_cuda.cuh, which reuses these host-side pieces (geometry, the batch
   checks, the CPU reference paths its fallbacks and evaluations share, the
   trainer's bookkeeping) instead of copying them. mhe.h never includes the
   companion. Also used there: the types mhe__ctx, mhe__geom and mhe__eval_fwd
   and the macros MHE__SITE_ATT, MHE__SITE_RES, MHE__ATT_IDX and MHE__PROJ_EPS.
   Changing one of these signatures means changing mhe_cuda.cuh too;
   tests/test_kinds.py checks that this list and the companion's use agree. */
#ifndef MHE_NO_TRAIN
static mhe_status mhe__fail(char *err, mhe_status st, const char *fmt, ...);
static int mhe__is_finite(float x);
static int mhe__att_visible(const mhe_attn_dims *d, int b, int t);
static MHE__VECTORISE float mhe__row_dropout(const mhe_attn_dims *d, float *s, int cols, int b, int h, int t, int j0);
static MHE__VECTORISE void mhe__bwd_row(const mhe_attn_dims *d, float *p, float *dp, int cols, int vis,
                                        float lse, float D, float add, int b, int h, int t, int j0);
static void mhe__taylor_ref_fwd(const mhe_attn_dims *d, float *out, float *probs, const float *q,
                                const float *k, const float *v);
static void mhe__taylor_ref_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                const float *probs, const float *q, const float *k, const float *v);
static void mhe__taylor_phi(const float *x, int dh, float a, float *phi);
static void mhe__nonapprox_lin_fwd(const mhe_attn_dims *d, float *out, float *lse, const float *q,
                                   const float *k, const float *v);
static void mhe__nonapprox_lin_bwd(const mhe_attn_dims *d, float *dq, float *dk, float *dv, const float *dout,
                                   const float *out, const float *lse, const float *q, const float *k,
                                   const float *v);
static int mhe__kind_fixed(int kind);
static mhe__geom mhe__layer_geom(const mhe_config *c, int kind);
static uint64_t mhe__site_seed(const mhe_model *m, int site);
static mhe_attn_dims mhe__attn_dims(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq,
                                    int Tk, int causal, const int *kv_len);
static void mhe__lin_rows(float *out, int ldo, const float *inp, int ldi, const float *w, const float *b,
                          int N, int IC, int OC);
static void mhe__mul_maps(const mhe_attn_weights *w, float *hmap, int nd);
static void mhe__collab_dims(mhe_attn_dims *d, const mhe_attn_weights *w, int D, const float *k, int ks);
static void mhe__kv_ptrs(const mhe__geom *g, const float *proj, int proj_stride, const float *inp,
                         int inp_stride, const float **k, int *ks, const float **v);
static void mhe__cross_kv(const mhe_attn_weights *w, const mhe__geom *g, int C, int rows, const float *mem,
                          float *kv);
static void mhe__attn_fwd(const mhe_model *m, const mhe_attn_weights *w, int site, int B, int Tq, int Tk,
                          int causal, const int *kv_len, const float *q, int qs, const float *k, int ks,
                          const float *v, int vs, float *att, float *stats, float *work, float *hmap,
                          int use_ref);
static void mhe__gated_fwd(const mhe_attn_weights *w, int C, int F, int rows, const float *u, float *proj,
                           float *att, float *out);
static void mhe__linear_mix_fwd(const mhe_model *m, const mhe_attn_weights *w, const mhe__ctx *x,
                                const float *u, float *z, float *out);
static void mhe__fnet_apply(const float *X, float *Y, int B, int T, int C, const int *len, double *work,
                            int accumulate);
static const float *mhe__static_in(const mhe_model *m, const mhe_tensor *nw, const mhe_tensor *nb,
                                   const float *e, int rows, float *buf);
static void mhe__attn_branch_fwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                 float *out);
static void mhe__attn_branch_bwd(mhe_model *m, int l, int cross, const mhe__ctx *x, const float *u,
                                 const float *d_out, float *du);
static void mhe__decon_decode(mhe_model *m, mhe_kv_cache *c, int l, int pos, const float *u,
                              mhe__decode_buf *d);
static void mhe__pool_softmax(float *wsm, const float *w, int C, int d);
static void mhe__proj_bits(const unsigned char *b, int T, double *u0, double *u1);
static void mhe__proj_weights(float *wn, float *wnorm, const float *w, int n_bits, int d);
static mhe_status mhe__fixed_init(mhe_model *m);
static const char *mhe__emb_name(const mhe_config *c);
static mhe_status mhe__emb_prepare(mhe_model *m, const mhe_batch *bt);
static void mhe__words_fwd(const mhe_model *m, float *out);
static void mhe__words_bwd(mhe_model *m, const float *d);
static const mhe_tensor *mhe__token_head(const mhe_model *m, const mhe_tensor **bias);
static int mhe__head_width(const mhe_config *c);
static void mhe__sub_norm(const mhe_layer *y, int k, const mhe_tensor **w, const mhe_tensor **b);
static const float *mhe__sub_in(const mhe_model *m, int l, int k);
static void mhe__sub_leave(mhe_model *m, const mhe_layer *y, int l, int k, const float *h, float *branch, float *sum,
                           float *nrm, float *mean, float *rstd, int rows);
static void mhe__sub_fwd(mhe_model *m, int l, int k, const mhe__ctx *x);
static void mhe__sub_bwd(mhe_model *m, int l, int k, const mhe__ctx *x);
static const float *mhe__stack_fwd(mhe_model *m, int l0, int l1, const mhe__ctx *x, const float *h);
static void mhe__embed_fwd(const mhe_model *m, float *out, const int *tokens, const mhe_tensor *pos, int B, int T, int site);
static void mhe__embed_bwd(mhe_model *m, const float *d, const int *tokens, mhe_tensor *pos, int B, int T, int site);
static int mhe__n_enc(const mhe_config *c);
static mhe_status mhe__fixed_fwd(mhe_model *m, int T, int causal);
static void mhe__fixed_bwd(mhe_model *m);
static void mhe__contexts(mhe_model *m, mhe__ctx *enc, mhe__ctx *dec);
static mhe_status mhe__check_lengths(mhe_model *m, const int *len, int B, int T, const char *what);
static void mhe__encode(mhe_model *m);
static mhe_status mhe__forward_batch(mhe_model *m, const mhe_batch *bt, float *loss);
static mhe_status mhe__backward(mhe_model *m);
static mhe_status mhe__trainer_alloc(mhe_trainer *t, mhe_model *m, const mhe_train_config *tc);
static mhe_status mhe__trainer_update(mhe_trainer *t, const mhe_batch *b);
static mhe_status mhe__lm_batch(mhe_trainer *t, const int *data, size_t n, mhe_batch *bt);
static mhe_status mhe__evaluate_s2s(mhe_model *m, const int *data, size_t n, int batch, int src_len, int seq_len,
                                    int max_batches, float *mean_loss, mhe__eval_fwd fwd, void *ctx);
static mhe_status mhe__evaluate_strided(mhe_model *m, const int *data, size_t n, int batch, int seq_len, int stride,
                                        float *mean_loss, int64_t *n_scored, mhe__eval_fwd fwd, void *ctx);
#endif /* !MHE_NO_TRAIN */

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
