/* mhe_cuda.cuh - the CUDA companion of mhe.h (docs/design.md section 12)

   Use: in one .cu file, `#define MHE_IMPLEMENTATION`, `#include "mhe.h"`,
   then `#include "mhe_cuda.cuh"` (other files include both without the
   define). It calls the private functions that mhe.h declares in its
   "companion interface" block, and nothing else of mhe.h's internals. The
   CUDA runtime only, no cuBLAS, cuDNN or CUTLASS. Float32 tensors live on the device; the host model
   (mhe_model) keeps the config, the tensor names and the checkpoint, so a
   model trained here saves to the same safetensors file.

   The same source compiles as plain C++ through tests/cuda/emu.h
   (MHE_CUDA_EMULATE), which runs every CUDA thread on the CPU: that is how
   every kernel here is executed and checked against the CPU library (its
   blocks mode runs several blocks at once under ThreadSanitizer, so a
   data-dependent scatter to global memory without atomics is reported).
   Warp collectives use full masks only: the emulation cannot check others.

   Contents (one op per section, its kernels beside their launchers; the
   model, decoding and the trainer only call them)
     C1. the device runtime: errors, launches and their recording, memory,
         warp and block reductions, the dropout hash
     C2. GEMM: float32 SIMT tiles, TF32 and bf16 mma.sync tiles, the
         pipelined cp.async tile, split-K; linear layers and column sums
     C3. attention cores: online softmax, MHE-MUL / collab stacked, MHE-ADD
         shared scores, Taylor, Non-approximate; the kinds' cores and decoding
         cores; the mixing kinds (mlp, fnet, linear)
     C4. norms and elementwise: norms, activations, residuals, dropout,
         cross-entropy, sums, the classification head's pooling
     C5. embeddings: tokens, positions, token types, hash embeddings
     C6. the optimizer: AdamW, clipping
     C7. the device model: which kinds run, the memory layout, sublayers,
         forward, backward, evaluation
     C8. decoding: the KV cache, prompt prefill, decode steps
     C9. the trainer: steps, deferred statistics, CUDA graphs
*/
#ifndef MHE_CUDA_CUH
#define MHE_CUDA_CUH

#ifndef MHE_H_INCLUDED
#error "mhe_cuda.cuh: include mhe.h first"
#endif
#ifdef MHE_NO_TRAIN
#error "mhe_cuda.cuh needs the trainer and the backward passes: drop MHE_NO_TRAIN"
#endif

#if !defined(__CUDACC__) && !defined(MHE_CUDA_EMULATE)
#error "mhe_cuda.cuh: compile it with nvcc (in a .cu file), or as C++ through tests/cuda/emu.h"
#endif
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif
#include <stdint.h>
#include <string.h>
#include <initializer_list>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

/* ======================================================================== */
/* declarations                                                             */
/* ======================================================================== */
/* The device side of an mhe_model. The host model keeps the config, the
   tensor names and the checkpoint; the device holds copies of the
   parameters and gradients (the host layout, one block each) and the
   activations. Runs decoder, encoder (masked-LM) and encoder-decoder
   models (cross-attention of every kind mhe.h allows there) with every
   attention kind: the softmax kinds mha, sha, mqa,
   gqa, skv, el-att, mhe-add, mhe-mul and collab, the thesis ch. 4 kinds
   mlp, taylor, nonapprox, rndemb-qk, fixedseq-qk (with their fixed stream)
   and staticemb-qk, and the FNet encoders fnet and linear; pre- or
   post-norm, dropout and attention dropout (the CPU's masks), Admin, the
   encoder's classification head and padded batches (lengths, src_lengths)
   on every kind, as the CPU. Embeddings: the vocabulary (byte or word
   tokens) and hash-emb, -pool, -add, -proj; the LM or S+R head; an
   imported BERT's pieces (token types, the embeddings' norm, the MLM head's
   transform and output bias, the pooler: cls_pool=first). Only a
   collab_dim past MHE_MAX_D_HEAD (mhe_cuda_supports says so) and skipped
   attention layers (mhe_model.skip_attn: eval --skip) stay on the CPU
   path. Decoding covers every kind the CPU
   decodes (all but fnet and linear, which are encoder-only). */
typedef struct mhe_cuda_layer_acts {
    const float *in;                        /* block input [rows, C] */
    float *nrm[3], *mean[3], *rstd[3], *sum[3]; /* sublayers 0 (attention) and 2 (MLP), as mhe_sub_acts */
    float *proj, *att, *lse, *hmap;         /* Q|K|V [rows, proj_w], [rows, att_w], [B n T], MUL maps [2 n d_h] */
    float *kb;                              /* MHE-ADD: each key's per-head bias k . e_i^Q [rows, n] */
    float *ext;                             /* staticemb-qk: N(e) [rows, C], then its mean and rstd [rows] */
    float *fc1, *act;                       /* [rows, d_ff] */
    float *kv;                              /* cross-attention (encdec): the source's K|V [B Ts, k_w + v_w] */
} mhe_cuda_layer_acts;

/* KV cache of decoding on the device: per layer, the K and V columns of
   each position (one head for the MHE kinds: 1/n of mha's; the V rows only
   for rndemb-qk and fixedseq-qk), and the state of the kinds that keep one */
typedef struct mhe_cuda_kv_cache {
    int len, cap;                           /* positions cached, capacity (<= max_seq_len) */
    float *kv[MHE_MAX_LAYERS];              /* [cap, k_w + v_w] (el-att: the layer's input [cap, C]) */
    int kv_w[MHE_MAX_LAYERS];
    float *state[MHE_MAX_LAYERS];           /* taylor S|z [n, F, d_h + 1]; nonapprox [n, d_h + 2]; fixed kinds:
                                               the fixed stream's Q|K [cap, 2 n d_h], made at position 0 */
    size_t state_floats[MHE_MAX_LAYERS];
    float *kb;                              /* MHE-ADD: the cached keys' per-head biases [cap, n] (else NULL) */
    /* encdec: each decoder layer's cross-attention K|V of the encoded source
       (el-att: the encoder output), [max_seq_len, xkv_w], made once per
       source by mhe_cuda_kv_cache_encode */
    float *xkv[MHE_MAX_LAYERS];
    int xkv_w[MHE_MAX_LAYERS];
    int src_len;                            /* source tokens encoded (0: none yet) */
    void *block;
} mhe_cuda_kv_cache;

/* the GEMMs' precision (mhe_cuda_model_init): float32 throughout, or the matrices rounded to TF32
   or bf16 on their way into tensor cores (sm_80+) with float32 sums, as PyTorch's TF32 matmuls and
   bf16 autocast; parameters, AdamW's moments and every other kernel stay float32 */
enum { MHE_CUDA_FP32 = 0, MHE_CUDA_TF32 = 1, MHE_CUDA_BF16 = 2 };

typedef struct mhe_cuda_model {
    mhe_model *host;
    int precision;                          /* MHE_CUDA_FP32, _TF32 or _BF16: the GEMMs */
    float *params, *grads;                  /* device copies, laid out as host->param_data */
    int cap_rows, cap_B, cap_T;             /* activation capacity */
    void *acts_block;
    mhe_cuda_layer_acts layer[MHE_MAX_LAYERS];
    float *emb, *fin, *fin_mean, *fin_rstd, *logits, *losses, *branch, *partial, *colpart, *gemm_ws, *attn_scratch;
    float *d_h, *d_u, *d_tmp, *d_att, *d_proj, *d_fc1, *d_act, *d_logits, *d_hmap, *d_kb;
    float *d_emb;                           /* staticemb-qk: d loss / d the stream's embeddings e */
    float *mix, *dft;                       /* fnet: X [C_C | S_C] [rows, 2C]; [C_C | S_C] [C, 2C], C_L, S_L [L, L] */
    int dft_T;                              /* the L whose tables dft holds (0: none yet, nor C's) */
    /* the fixed stream of rndemb-qk / fixedseq-qk (thesis eq. 4.9-4.12): the
       blocks below the last such layer run on a fixed input, one sequence */
    mhe_cuda_layer_acts fixed_layer[MHE_MAX_LAYERS];
    float *fixed_emb, *d_qk;                /* its input [T, C]; d loss / d its Q|K [top][cap_T, 2 n d_h] */
    float *fixed_eps;                       /* rndemb-qk: the host model's eps [max_seq_len, C] */
    int *fixed_tokens;                      /* fixedseq-qk: the host model's fixed text [max_seq_len] */
    void *fixed_block;
    int *tokens, *targets;
    /* encdec: the cross-attention sublayers' activations (per decoder layer),
       the source, its embedding, the encoder's final norm and output, and
       the gradients of the output and (staticemb-qk) of the embedding */
    mhe_cuda_layer_acts cross[MHE_MAX_LAYERS];
    int *src;
    float *src_emb, *enc_fin, *enc_mean, *enc_rstd, *d_mem, *d_src_emb;
    const float *mem;
    const float *final_h;
    int last_B, last_T, last_Ts, last_count, has_targets, pos0;
    int hashed;                             /* g->tokens holds hash codes (the MHE_EMB_ kind; 0: rows) */
    /* hash-pool/-add/-proj word batches: the words' chunk indices or bits; proj's
       wn, |c_j| (wnorm), each word's embedding (wout) and u0, u1 (uu) */
    int *hw_in;
    float *hw_wn, *hw_wnorm, *hw_out, *hw_uu;
    const mhe_batch *words;                 /* set while a word batch's forward runs (mhe__cu_forward_batch) */
    mhe_cuda_kv_cache *cache;               /* set while a decode step runs */
    /* dropout (on while host->training, as the CPU's; never in the fixed
       stream or decoding) and the classification head with padding */
    int drop;                               /* the last forward ran with dropout */
    float *d_drop;                          /* a branch gradient through its dropout mask [rows, C] */
    const int *in_lengths, *in_labels;      /* host [B]: the next forward's padding and labels (NULL: none) */
    const int *in_src_lengths;              /* host [B]: encdec, the next forward's source padding */
    int *lengths, *labels, *src_lengths;    /* their device copies [cap_B] */
    int *h_len;                             /* host copies of lengths, then src_lengths [2 cap_B] (fnet, linear) */
    int has_len, has_src_len, last_cls;     /* the last forward had lengths, src_lengths; classified its sequences */
    float *pooled, *cls_logits, *d_pooled, *d_cls; /* [B, C], [B, n_classes], and their gradients */
    /* BERT's pieces (an imported BERT, mhe.h's emb_norm, type_vocab, head_transform, head_bias, cls_pool) */
    const int *in_types;                    /* host [B T]: the next forward's token types (NULL: type 0) */
    int *types;                             /* their device copy [rows] */
    float *emb_sum, *emb_mean, *emb_rstd;   /* emb_norm: word + position + type [rows, C], the norm's statistics */
    float *d_emb_sum;                       /* its gradient [rows, C] */
    float *hd_pre, *hd_act, *hd_out, *hd_mean, *hd_rstd;  /* head_transform: W h + b, act, norm [rows, C] */
    float *d_hd1, *d_hd2;                   /* head_transform: backward scratch [rows, C] */
    float *first, *d_first;                 /* cls_pool=first: the first token's rows [B, C] and their gradient */
    size_t device_bytes;                    /* parameters, gradients and activations */
    size_t cap_bytes_acts;
    int async_in;                           /* 1: a trainer's step: its uploads need not wait (mhe__cu_upload) */
    float *loss_sink;                       /* device: where a forward sums its losses without a copy back
                                               (a deferred trainer's step); NULL: the loss comes back at once */
    char err[MHE_ERR_LEN];
} mhe_cuda_model;

/* the trainer: the host mhe_trainer keeps the config, step, batch RNG and
   (after mhe_cuda_trainer_sync) the AdamW moments of a checkpoint */
/* a slice of the parameters that one block of the AdamW launch updates */
typedef struct mhe_cuda_adam_chunk {
    int64_t off;                            /* into the parameters, as host->param_data */
    int n, decay;                           /* elements; 1: weight decay applies (mhe_tensor.decay) */
} mhe_cuda_adam_chunk;

struct mhe__cu_graph; /* a trainer's recorded step and its graph */

typedef struct mhe_cuda_trainer {
    mhe_trainer host;
    mhe_cuda_model *dev;
    float *adam_m, *adam_v;                 /* device */
    mhe_cuda_adam_chunk *adam_chunks;       /* device: every tensor in slices, one launch updates them all */
    int n_adam_chunks;
    /* deferred = 1: a step makes no blocking copy. Its loss and gradient norm stay on the device,
       clipping reads the norm there (a non-finite norm stops the updates from that step on), and
       an asynchronous copy brings them to the host; mhe_cuda_trainer_stats waits for the last
       step's and fills host.last_loss and last_grad_norm. 0 (the default): every step returns them. */
    int deferred;
    float *stats;                           /* device [8]: loss sum, gradient sum of squares, AdamW's scale, first
                                               non-finite step + 1, its norm */
    float *stats_host;                      /* pinned host copy of stats */
    int stats_count;                        /* the last step's scored tokens (its loss = sum / count) */
    int stats_pending;                      /* a step ran since the last mhe_cuda_trainer_stats */
    cudaEvent_t stats_ready;                /* recorded after the copy */
    int has_event;                          /* stats_ready was created */
    /* graph = 1 (with deferred): each step is recorded, and a step whose launches repeat the last
       step's (kernels, grids, memsets: the same shapes) runs as one CUDA graph launch, with the
       arguments that changed (dropout seeds, the learning rate, moved buffers) patched into its
       nodes. Built at the second step of a shape, rebuilt when the shape changes; the same float
       operations in the same order as without it. 0 (the default): every kernel is launched. */
    int graph;
    struct mhe__cu_graph *graph_state;
    long graph_builds, graph_launches, graph_patches; /* graphs built, steps run as one, nodes patched */
    cudaError_t graph_error;                /* why graph turned itself off (a graph the driver refused), else cudaSuccess */
} mhe_cuda_trainer;

/* the first device's name and compute capability, or MHE_ERR_DEVICE (no
   device, no driver, or no kernel image for it in this binary) */
MHEDEF mhe_status mhe_cuda_device(char *name, size_t len, int *major, int *minor, char *err);
/* MHE_OK when the model's config runs on the device; else MHE_ERR_CONFIG naming the field */
MHEDEF mhe_status mhe_cuda_supports(const mhe_config *c, char *err);
/* copies the host model's parameters to the device (gradients zero); precision MHE_CUDA_FP32 (0),
   MHE_CUDA_TF32 (1) or MHE_CUDA_BF16 (2) */
MHEDEF mhe_status mhe_cuda_model_init(mhe_cuda_model *g, mhe_model *host, int precision);
MHEDEF void mhe_cuda_model_free(mhe_cuda_model *g);
MHEDEF mhe_status mhe_cuda_model_reserve(mhe_cuda_model *g, int B, int T);
/* host tokens/targets [B*T] (targets NULL: no loss); as mhe_model_forward */
MHEDEF mhe_status mhe_cuda_model_forward(mhe_cuda_model *g, const int *tokens, const int *targets, int B, int T,
                                         float *loss);
/* encdec: the source src [B*Ts] through the encoder, then tokens/targets as above */
MHEDEF mhe_status mhe_cuda_model_forward_s2s(mhe_cuda_model *g, const int *src, int Ts, const int *tokens,
                                             const int *targets, int B, int T, float *loss);
MHEDEF mhe_status mhe_cuda_model_backward(mhe_cuda_model *g);   /* grads += d loss / d param */
MHEDEF mhe_status mhe_cuda_model_zero_grad(mhe_cuda_model *g);
/* parameters host -> device (after the host model changed) and device -> host (to save or evaluate there) */
MHEDEF mhe_status mhe_cuda_model_upload(mhe_cuda_model *g);
MHEDEF mhe_status mhe_cuda_model_download(mhe_cuda_model *g);
/* the device gradients into the host model's grad_data */
MHEDEF mhe_status mhe_cuda_model_grads(mhe_cuda_model *g);
/* logits [B*T, V] of the last forward into host memory (a classification
   forward: the class logits [B, n_classes]) */
MHEDEF mhe_status mhe_cuda_model_logits(mhe_cuda_model *g, float *out);
/* as mhe_model_forward_batch: tokens (or word tokens, bt->words:
   embedding=vocab or hash-emb) with per-token targets (LM or S+R), or
   sequence labels through the classification head (mean over each
   sequence's real tokens), lengths (padding) optional; a source for
   encdec (src_lengths: its padding); dropout when g->host->training is set (with
   g->host->dropout_seed) */
MHEDEF mhe_status mhe_cuda_model_forward_batch(mhe_cuda_model *g, const mhe_batch *bt, float *loss);

MHEDEF mhe_status mhe_cuda_trainer_init(mhe_cuda_trainer *t, mhe_cuda_model *g, const mhe_train_config *tc);
MHEDEF void mhe_cuda_trainer_free(mhe_cuda_trainer *t);
/* one step as mhe_trainer_step (same batches, schedule, clipping and AdamW) on the device */
MHEDEF mhe_status mhe_cuda_trainer_step(mhe_cuda_trainer *t, const int *data, size_t n);
/* one step of the classification head as mhe_trainer_step_cls (same examples) on the device */
MHEDEF mhe_status mhe_cuda_trainer_step_cls(mhe_cuda_trainer *t, const mhe_text_set *s);
/* device -> host: parameters into the model, moments into t->host (then mhe_checkpoint_save as usual);
   a deferred trainer's statistics too (mhe_cuda_trainer_stats) */
MHEDEF mhe_status mhe_cuda_trainer_sync(mhe_cuda_trainer *t);
/* t->deferred: waits for the last step and fills t->host.last_loss and last_grad_norm;
   MHE_ERR_NONFINITE when a step's gradient norm was not finite (no update was made from that
   step on: the step is named), at this call and every later one. Nothing to do (MHE_OK) for a
   trainer that is not deferred. */
MHEDEF mhe_status mhe_cuda_trainer_stats(mhe_cuda_trainer *t);
/* one Shuffle+Random step (token_head=sr) as mhe_trainer_step_sr; words as there (NULL: byte tokens) */
MHEDEF mhe_status mhe_cuda_trainer_step_sr(mhe_cuda_trainer *t, const int *data, size_t n, const mhe_word_feats *words);
/* host -> device: after loading a checkpoint into t->host and the model */
MHEDEF mhe_status mhe_cuda_trainer_upload(mhe_cuda_trainer *t);

MHEDEF mhe_status mhe_cuda_kv_cache_init(mhe_cuda_kv_cache *c, mhe_cuda_model *g, int max_len);
MHEDEF void mhe_cuda_kv_cache_free(mhe_cuda_kv_cache *c);
/* feeds one token at position c->len; logits [V] into host memory (may be NULL) */
MHEDEF mhe_status mhe_cuda_decode_step(mhe_cuda_model *g, mhe_cuda_kv_cache *c, int token, float *logits);
/* feeds tokens[n] at positions c->len .. c->len + n - 1 as one forward pass
   (a prompt): each query sees the cached keys and the prompt's keys up to
   its own; their K/V join the cache. The last position's logits [V] into
   host memory (may be NULL). The same logits as n decode steps. On an error
   the cache keeps its length. */
MHEDEF mhe_status mhe_cuda_prefill(mhe_cuda_model *g, mhe_cuda_kv_cache *c, const int *tokens, int n, float *logits);
/* encdec, as mhe_kv_cache_encode: the encoder over src[Ts] and every decoder
   layer's cross-attention K|V into the cache, once per source (decoding
   then reads them); empties the self-attention cache */
MHEDEF mhe_status mhe_cuda_kv_cache_encode(mhe_cuda_model *g, mhe_cuda_kv_cache *c, const int *src, int Ts);

/* mhe_evaluate_s2s and mhe_evaluate_strided with the forward passes on the
   device: the same windows, batches and masks (decoder and encoder models) */
MHEDEF mhe_status mhe_cuda_evaluate(mhe_cuda_model *g, const int *data, size_t n, int batch, int seq_len,
                                    int max_batches, float *mean_loss);
/* as mhe_evaluate_sr: Shuffle+Random accuracy and loss (token_head=sr) */
MHEDEF mhe_status mhe_cuda_evaluate_sr(mhe_cuda_model *g, const int *data, size_t n, const mhe_word_feats *words,
                                       int batch, int seq_len, int max_batches, float prob, mhe_cls_metrics *out);
/* as mhe_evaluate_s2s: encdec windows of src_len source tokens (0: seq_len) */
MHEDEF mhe_status mhe_cuda_evaluate_s2s(mhe_cuda_model *g, const int *data, size_t n, int batch, int src_len,
                                        int seq_len, int max_batches, float *mean_loss);
MHEDEF mhe_status mhe_cuda_evaluate_strided(mhe_cuda_model *g, const int *data, size_t n, int batch, int seq_len,
                                            int stride, float *mean_loss, int64_t *n_scored);
/* mhe_evaluate_cls with the forward passes on the device: loss, accuracy, macro F1, MCC */
MHEDEF mhe_status mhe_cuda_evaluate_cls(mhe_cuda_model *g, const mhe_text_set *s, int batch, int seq_len,
                                        mhe_cls_metrics *out);

#endif /* MHE_CUDA_CUH */

#if defined(MHE_IMPLEMENTATION) && !defined(MHE_CUDA_IMPLEMENTATION_DONE)
#ifndef MHE_IMPLEMENTATION_DONE
#error "mhe_cuda.cuh with MHE_IMPLEMENTATION: include mhe.h with MHE_IMPLEMENTATION first, in the same file"
#endif
#define MHE_CUDA_IMPLEMENTATION_DONE

/* ======================================================================== */
/* C1. the device runtime: errors, launches, memory, reductions             */
/* ======================================================================== */

/* Test-only fault injection: tests/cuda builds the kernels once with each
   MHE_CUDA_FAULT value to prove the emulation catches the broken variant
   (1: a missing barrier, 2: a shared buffer one row short, 3: a swapped
   mma fragment, 4: a plain += for an atomicAdd). 0 in every real build. */
#ifndef MHE_CUDA_FAULT
#define MHE_CUDA_FAULT 0
#endif
#define MHE__CU_FAULT(n) (MHE_CUDA_FAULT == (n))

#define MHE__CU_FULL 0xffffffffu
#define MHE__CU_WARP 32

/* dynamic shared memory: `extern __shared__` does not parse as C++, so one macro */
#ifdef MHE_CUDA_EMULATE
#define MHE__CU_DYN_SHARED(T, name) T *name = (T *)mhe_emu_dyn_shared()
#else
#define MHE__CU_DYN_SHARED(T, name)                                                                      \
    extern __shared__ __align__(16) unsigned char mhe__cu_dyn_smem[];                                    \
    T *name = (T *)mhe__cu_dyn_smem
#endif

static __device__ __forceinline__ float mhe__cu_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(MHE__CU_FULL, v, o);
    return v;
}

static __device__ __forceinline__ float mhe__cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(MHE__CU_FULL, v, o));
    return v;
}

/* ---- a step recorded for a CUDA graph (mhe_cuda_trainer.graph) ----------
   While a trainer records a step (mhe__cu_recording set, on its thread),
   each kernel launch, memset and device copy of the step becomes an op
   instead of running. The batch's uploads run at once: they only fill
   inputs no kernel of the step writes, so they may go before it. The ops
   then run as one graph launch (mhe__cu_graph_run), or one by one. */
struct mhe__cu_op {
    const void *key = NULL; /* the kernel, or the tag of a memset or copy */
    virtual ~mhe__cu_op() {}
    virtual cudaError_t run() = 0; /* as the call it stands for, on the legacy stream */
    virtual cudaError_t add(cudaGraph_t graph, const cudaGraphNode_t *after, cudaGraphNode_t *node) = 0;
    virtual int same_shape(const mhe__cu_op *o) const = 0; /* o has the same key: the same node? */
    virtual int same_args(const mhe__cu_op *o) const = 0;
    virtual cudaError_t patch(cudaGraphExec_t exec, cudaGraphNode_t node) = 0; /* these arguments into node */
};

template <typename... Exp>
struct mhe__cu_kernel_op : mhe__cu_op {
    void (*kernel)(Exp...);
    dim3 grid, block;
    size_t smem;
    std::tuple<typename std::decay<Exp>::type...> args; /* converted as a launch converts them */
    void *where[sizeof...(Exp) + 1];                    /* each argument's address: a kernel node's kernelParams */
    template <typename... Act>
    mhe__cu_kernel_op(void (*k)(Exp...), dim3 gr, dim3 bl, size_t sm, Act &&...a)
        : kernel(k), grid(gr), block(bl), smem(sm), args(std::forward<Act>(a)...) {
        key = (const void *)k;
        point(std::index_sequence_for<Exp...>{});
    }
    template <size_t... I> void point(std::index_sequence<I...>) {
        void *w[] = {(void *)&std::get<I>(args)..., NULL};
        memcpy(where, w, sizeof w);
    }
    template <size_t... I> cudaError_t launch(std::index_sequence<I...>) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = 0;
        return cudaLaunchKernelEx(&cfg, kernel, std::get<I>(args)...);
    }
    template <size_t... I> int equal(const mhe__cu_kernel_op *o, std::index_sequence<I...>) const {
        int same = 1; /* byte for byte: a struct's padding may differ, which only costs a patch */
        (void)o;
        (void)std::initializer_list<int>{
            (same &= !memcmp(&std::get<I>(args), &std::get<I>(o->args), sizeof(std::get<I>(args))), 0)...};
        return same;
    }
    cudaKernelNodeParams params() {
        cudaKernelNodeParams p = {};
        p.func = (void *)kernel;
        p.gridDim = grid;
        p.blockDim = block;
        p.sharedMemBytes = (unsigned)smem;
        p.kernelParams = where;
        return p;
    }
    cudaError_t run() override { return launch(std::index_sequence_for<Exp...>{}); }
    cudaError_t add(cudaGraph_t graph, const cudaGraphNode_t *after, cudaGraphNode_t *node) override {
        cudaKernelNodeParams p = params();
        return cudaGraphAddKernelNode(node, graph, after, after ? 1 : 0, &p);
    }
    int same_shape(const mhe__cu_op *op) const override {
        const mhe__cu_kernel_op *o = static_cast<const mhe__cu_kernel_op *>(op);
        return grid.x == o->grid.x && grid.y == o->grid.y && grid.z == o->grid.z && block.x == o->block.x &&
               block.y == o->block.y && block.z == o->block.z && smem == o->smem;
    }
    int same_args(const mhe__cu_op *o) const override {
        return equal(static_cast<const mhe__cu_kernel_op *>(o), std::index_sequence_for<Exp...>{});
    }
    cudaError_t patch(cudaGraphExec_t exec, cudaGraphNode_t node) override {
        cudaKernelNodeParams p = params();
        return cudaGraphExecKernelNodeSetParams(exec, node, &p);
    }
};

/* a memset to zero (bytes from p) or a copy; a change of either is a new node, never a patch */
struct mhe__cu_mem_op : mhe__cu_op {
    void *dst;
    const void *src; /* NULL: a memset */
    size_t bytes;
    cudaMemcpyKind kind;
    mhe__cu_mem_op(void *d, const void *s, size_t n, cudaMemcpyKind k) : dst(d), src(s), bytes(n), kind(k) {
        static const char memset_tag = 0, copy_tag = 0;
        key = s ? &copy_tag : &memset_tag;
    }
    cudaError_t run() override {
        return src ? cudaMemcpyAsync(dst, src, bytes, kind, 0) : cudaMemsetAsync(dst, 0, bytes, 0);
    }
    cudaError_t add(cudaGraph_t graph, const cudaGraphNode_t *after, cudaGraphNode_t *node) override {
        cudaMemsetParams p = {};
        if (src)
            return cudaGraphAddMemcpyNode1D(node, graph, after, after ? 1 : 0, dst, src, bytes, kind);
        p.dst = dst;
        p.elementSize = 1;
        p.width = bytes;
        p.height = 1;
        return cudaGraphAddMemsetNode(node, graph, after, after ? 1 : 0, &p);
    }
    int same_shape(const mhe__cu_op *op) const override {
        const mhe__cu_mem_op *o = static_cast<const mhe__cu_mem_op *>(op);
        return dst == o->dst && src == o->src && bytes == o->bytes && kind == o->kind;
    }
    int same_args(const mhe__cu_op *) const override { return 1; }
    cudaError_t patch(cudaGraphExec_t, cudaGraphNode_t) override { return cudaErrorInvalidValue; }
};

typedef struct mhe__cu_recorder {
    mhe__cu_op **ops;
    int n, cap;
} mhe__cu_recorder;

static thread_local mhe__cu_recorder *mhe__cu_recording = NULL;

static cudaError_t mhe__cu_record(mhe__cu_op *op) {
    mhe__cu_recorder *r = mhe__cu_recording;
    if (!op)
        return cudaErrorMemoryAllocation;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        mhe__cu_op **ops = (mhe__cu_op **)realloc(r->ops, (size_t)cap * sizeof *ops);
        if (!ops) {
            delete op;
            return cudaErrorMemoryAllocation;
        }
        r->ops = ops;
        r->cap = cap;
    }
    r->ops[r->n++] = op;
    return cudaSuccess;
}

static void mhe__cu_recorder_free(mhe__cu_recorder *r) {
    for (int i = 0; i < r->n; i++)
        delete r->ops[i];
    free(r->ops);
    r->ops = NULL;
    r->n = r->cap = 0;
}

/* Launch through cudaLaunchKernelEx (`<<<>>>` is not C++); dynamic shared
   memory past the 48 KiB default is asked for first. */
template <typename... Exp, typename... Act>
static cudaError_t mhe__cu_launch(void (*kernel)(Exp...), dim3 grid, dim3 block, size_t smem, Act &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = 0;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return e;
    }
    if (mhe__cu_recording)
        return mhe__cu_record(new (std::nothrow)
                                  mhe__cu_kernel_op<Exp...>(kernel, grid, block, smem, std::forward<Act>(args)...));
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Act>(args)...);
}

/* bytes from p to zero, and a device-side copy (device to device, or to pinned host memory) */
static cudaError_t mhe__cu_memset0(void *p, size_t bytes) {
    if (mhe__cu_recording)
        return mhe__cu_record(new (std::nothrow) mhe__cu_mem_op(p, NULL, bytes, cudaMemcpyDefault));
    return cudaMemsetAsync(p, 0, bytes, 0);
}

static cudaError_t mhe__cu_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (mhe__cu_recording)
        return mhe__cu_record(new (std::nothrow) mhe__cu_mem_op(dst, src, bytes, kind));
    return cudaMemcpyAsync(dst, src, bytes, kind, 0);
}

/* a batch's input host -> device. Async (a trainer's step, whose batch is in
   the trainer's own pageable buffers): the driver stages pageable memory at
   once, so the host neither waits for the device's earlier work nor keeps
   src; else a plain copy (a caller's buffer may be pinned and reused). */
static cudaError_t mhe__cu_upload(int async, void *dst, const void *src, size_t bytes) {
    if (async)
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, 0);
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
}

/* a CUDA error as an mhe_status with the call that failed in err */
static mhe_status mhe__cu_status(cudaError_t e, char *err, const char *what) {
    if (e == cudaSuccess)
        return MHE_OK;
    if (e == cudaErrorMemoryAllocation)
        return mhe__fail(err, MHE_ERR_NOMEM, "%s: out of device memory", what);
    return mhe__fail(err, MHE_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

static int mhe__cu_blocks(int64_t n, int per) { return (int)((n + per - 1) / per); }

#define MHE__CU_EW 256 /* threads of the elementwise and row kernels */

/* sum over the block (MHE__CU_EW threads); every thread gets it. red is
   shared scratch of one float per warp, reused only after a barrier. */
static __device__ float mhe__cu_block_sum(float v, float *red) {
    int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32, nw = (int)blockDim.x / 32;
    v = mhe__cu_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return mhe__cu_warp_sum(v);
}

/* mhe_hash_uniform on the device, bit for bit: splitmix64 (Steele et al.
   2014) of seed ^ index * const, its top 24 bits over 2^24. The dropout
   masks (embedding, residual, attention weights) are the CPU's. */
static __device__ __forceinline__ float mhe__cu_hash_uniform(uint64_t seed, uint64_t index) {
    uint64_t z = (seed ^ (index * 0xd1b54a32d192ed03ULL)) + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (float)((z ^ (z >> 31)) >> 40) * (1.0f / 16777216.0f);
}

#define MHE__CU_TRY(call, what)                                                                          \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess)                                                                           \
            return mhe__cu_status(e_, g->err, what);                                                     \
    } while (0)
#define MHE__CU_MHE(call)                                                                                \
    do {                                                                                                 \
        mhe_status s_ = (call);                                                                          \
        if (s_ != MHE_OK)                                                                                \
            return s_;                                                                                   \
    } while (0)

/* a tensor's device copy and its gradient: same offset as in the host block */
#define MHE__CU_P(g, t) ((t) ? (g)->params + ((t)->data - (g)->host->param_data) : (float *)NULL)
#define MHE__CU_G(g, t) ((t) ? (g)->grads + ((t)->data - (g)->host->param_data) : (float *)NULL)

static mhe_status mhe__cu_zero(mhe_cuda_model *g, float *p, size_t n) {
    MHE__CU_TRY(mhe__cu_memset0(p, n * sizeof(float)), "cudaMemset");
    return MHE_OK;
}

/* ======================================================================== */
/* C2. GEMM: float32 SIMT, TF32 and bf16 mma.sync, pipelined; linear layers */
/* ======================================================================== */
/* C = alpha op(A) op(B) + beta C, row-major as mhe_gemm: op(A) is [M, K]
   (A itself [K, M] when transposed), op(B) is [K, N]. beta = 0 never reads
   C. Float32 SIMT tiles (the default), or tensor-core tiles behind the
   model's precision: TF32 (10-bit mantissas in, float32 sums: about 1e-3
   relative error) or bf16 (7-bit mantissas: about 8e-3), so the tests
   compare those with looser bounds. Each comes in a 64 x 64 tile (with
   split-K for small outputs) and a 128 x 128 tile for large ones. */

#define MHE__CU_GBM 64 /* block tile: 64 x 64 outputs, K in steps of 16 */
#define MHE__CU_GBN 64
#define MHE__CU_GBK 16

/* op(A)[m][k] and op(B)[k][n] of a tile, zero outside the matrix */
template <int TRANS>
static __device__ __forceinline__ float mhe__cu_ld(const float *X, int ld, int r, int c, int R, int Cn) {
    if (r >= R || c >= Cn)
        return 0.0f;
    return TRANS ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* GELU (tanh form, Hendrycks and Gimpel 2016), ReLU, SiLU, exact GELU: the CPU's formulas */
static __device__ __forceinline__ float mhe__cu_act(int act, float x) {
    if (act == MHE_ACT_GELU)
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    if (act == MHE_ACT_GELU_ERF)
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    if (act == MHE_ACT_RELU)
        return x > 0.0f ? x : 0.0f;
    return x / (1.0f + expf(-x));
}

static __device__ __forceinline__ float mhe__cu_act_grad(int act, float x) {
    if (act == MHE_ACT_GELU) {
        float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    }
    if (act == MHE_ACT_RELU)
        return x > 0.0f ? 1.0f : 0.0f;
    if (act == MHE_ACT_GELU_ERF)
        return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
    float sg = 1.0f / (1.0f + expf(-x));
    return sg * (1.0f + x * (1.0f - sg));
}

/* What a GEMM adds on the way out (a linear layer's epilogue, fused so that no other launch
   reads the output back): C = alpha op(A) op(B) + beta C + bias[column], and with act_out also
   act_out = act(C) at the same place (stride ldc): the layer's pre-activation and activation.
   The bias joins each output as it leaves the registers; the activation is a last pass of the
   block over its own tile, after a barrier, while the tile is in cache (mhe__cu_epi_act): one
   copy of the activation's code per kernel, not one per accumulator. The same float operations
   as separate bias and activation passes, so the same bits. */
struct mhe__cu_epi {
    const float *bias; /* NULL: none */
    float *act_out;    /* NULL: no activation */
    int act;           /* MHE_ACT_* */
};
static const mhe__cu_epi mhe__cu_no_epi = {NULL, NULL, 0};

static __device__ __forceinline__ void mhe__cu_store(float *C, int ldc, int M, int N, int r, int c, float alpha,
                                                     float acc, float beta, const mhe__cu_epi &ep) {
    if (r < M && c < N) {
        float *p = C + (size_t)r * ldc + c;
        float x = beta == 0.0f ? alpha * acc : alpha * acc + beta * *p;
        if (ep.bias)
            x += ep.bias[c];
        *p = x;
    }
}

/* the activation of the block's TM x TN tile at (m0, n0), after every thread's stores */
static __device__ __forceinline__ void mhe__cu_epi_act(const float *C, int ldc, int M, int N, int m0, int n0, int TM,
                                                       int TN, const mhe__cu_epi &ep) {
    if (!ep.act_out) /* the same for the whole block: the barrier is reached by all or none */
        return;
    __syncthreads();
    for (int e = (int)threadIdx.x; e < TM * TN; e += (int)blockDim.x) {
        int r = m0 + e / TN, c = n0 + e % TN;
        if (r < M && c < N)
            ep.act_out[(size_t)r * ldc + c] = mhe__cu_act(ep.act, C[(size_t)r * ldc + c]);
    }
}

/* SIMT: 256 threads, each owns 4 x 4 outputs strided by 16 so that reads of
   a shared row hit 16 different banks. The tiles are stored k-major
   (As[k][m], Bs[k][n]) so the inner loop reads rows. */
/* split K (kc < K): block z sums k in [z kc, (z + 1) kc) into C + z cz (a workspace, alpha 1, beta 0) */
template <int TA, int TB>
__global__ __launch_bounds__(256) void mhe__cu_gemm_simt(int M, int N, int K, float alpha, const float *__restrict__ A,
                                                         int lda, const float *__restrict__ B, int ldb, float beta,
                                                         float *__restrict__ C, int ldc, int kc, int64_t cz,
                                                         mhe__cu_epi ep) {
    __shared__ float As[MHE__CU_GBK][MHE__CU_GBM + 4];
    __shared__ float Bs[MHE__CU_GBK][MHE__CU_GBN + 4];
    int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    int m0 = (int)blockIdx.y * MHE__CU_GBM, n0 = (int)blockIdx.x * MHE__CU_GBN;
    int kb = (int)blockIdx.z * kc, ke = kb + kc < K ? kb + kc : K;
    C += (int64_t)blockIdx.z * cz;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = kb; k0 < ke; k0 += MHE__CU_GBK) {
        /* 1024 elements per tile, 4 per thread; consecutive threads read consecutive addresses */
        for (int e = tid; e < MHE__CU_GBM * MHE__CU_GBK; e += 256) {
            int a_m = TA ? e % MHE__CU_GBM : e / MHE__CU_GBK, a_k = TA ? e / MHE__CU_GBM : e % MHE__CU_GBK;
            int b_n = TB ? e / MHE__CU_GBK : e % MHE__CU_GBN, b_k = TB ? e % MHE__CU_GBK : e / MHE__CU_GBN;
            As[a_k][a_m] = mhe__cu_ld<TA>(A, lda, m0 + a_m, k0 + a_k, M, ke);
            Bs[b_k][b_n] = mhe__cu_ld<TB>(B, ldb, k0 + b_k, n0 + b_n, ke, N);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MHE__CU_GBK; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++)
                a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++)
                b[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        /* the next tile overwrites As, Bs: everyone must be done reading */
        if (!MHE__CU_FAULT(1))
            __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            mhe__cu_store(C, ldc, M, N, m0 + ty + 16 * i, n0 + tx + 16 * j, alpha, acc[i][j], beta, ep);
    mhe__cu_epi_act(C, ldc, M, N, m0, n0, MHE__CU_GBM, MHE__CU_GBN, ep);
}

/* SIMT, large shapes: 128 x 128 outputs per block of 256 threads, each
   thread 8 x 8 (rows 4 ty .. 4 ty + 3 and 64 more, columns likewise with
   tx), K in steps of 8. Four 16-byte shared loads feed 64 multiply-adds
   (the 64 x 64 kernel above: eight 4-byte loads for 16). Shared memory
   holds two K steps: the next tile is read from global memory into
   registers while the current one is multiplied, then stored into the
   other half, one barrier per step. The k-major tiles are 132 floats wide
   so that the column-wise stores of a row-major A (or a transposed B)
   land in distinct banks and rows stay 16-byte aligned. */
#define MHE__CU_GB2 128 /* block tile */
#define MHE__CU_GB2K 8
#define MHE__CU_GB2W (MHE__CU_GB2 + 4)

static long mhe__cu_gemm_big_min = 128L * 128 * 64; /* M x N from which the 128 tile runs; tests set 0 */

/* this thread's EPT elements of the next K step of a 128 tile: A's (m, k) or B's (k, n) at tile offsets
   (the SIMT kernel's 4 of K; the tensor-core kernels' EPT of 2 EPT) */
template <int TRANS_MAJOR, int EPT>
static __device__ __forceinline__ void mhe__cu_gt2_fetch(float v[EPT], const float *X, int ld, int r0, int c0, int R,
                                                         int Cn, int tid) {
    /* TRANS_MAJOR 0: the tile's 128 rows along X's rows (EPT consecutive columns each thread);
       1: along X's columns (EPT / 4 consecutive rows per warp, 4 consecutive elements each) */
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        int r, c;
        if (TRANS_MAJOR) {
            r = r0 + (EPT / 4) * (tid / 32) + e / 4;
            c = c0 + (tid % 32) * 4 + e % 4;
        } else {
            r = r0 + tid / 2;
            c = c0 + (tid % 2) * EPT + e;
        }
        v[e] = r < R && c < Cn ? X[(size_t)r * ld + c] : 0.0f;
    }
}

template <int TA, int TB>
__global__ __launch_bounds__(256) void mhe__cu_gemm_simt128(int M, int N, int K, float alpha,
                                                               const float *__restrict__ A, int lda,
                                                               const float *__restrict__ B, int ldb, float beta,
                                                               float *__restrict__ C, int ldc, mhe__cu_epi ep) {
    /* 16-byte aligned: rows are read as float4 (GNU attribute form: nvcc, gcc and clang) */
    __shared__ float As[2][MHE__CU_GB2K][MHE__CU_GB2W] __attribute__((aligned(16)));
    __shared__ float Bs[2][MHE__CU_GB2K][MHE__CU_GB2W] __attribute__((aligned(16)));
    int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
    int m0 = (int)blockIdx.y * MHE__CU_GB2, n0 = (int)blockIdx.x * MHE__CU_GB2;
    float acc[8][8], va[4], vb[4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[i][j] = 0.0f;
    /* op(A)[m][k]: A [M][K] row-major (TA 0: rows of the tile along A's rows) or A [K][M] (TA 1);
       op(B)[k][n]: B [K][N] (TB 0: one row of B per k) or B [N][K] (TB 1) */
#define MHE__CU_GB2_FETCH(k0)                                                                            \
    do {                                                                                                 \
        if (TA)                                                                                          \
            mhe__cu_gt2_fetch<1, 4>(va, A, lda, (k0), m0, K, M, tid);                                    \
        else                                                                                             \
            mhe__cu_gt2_fetch<0, 4>(va, A, lda, m0, (k0), M, K, tid);                                    \
        if (TB)                                                                                          \
            mhe__cu_gt2_fetch<0, 4>(vb, B, ldb, n0, (k0), N, K, tid);                                    \
        else                                                                                             \
            mhe__cu_gt2_fetch<1, 4>(vb, B, ldb, (k0), n0, K, N, tid);                                    \
    } while (0)
#define MHE__CU_GB2_STORE(buf)                                                                           \
    do {                                                                                                 \
        for (int e = 0; e < 4; e++) {                                                                    \
            if (TA)                                                                                      \
                As[buf][tid / 32][(tid % 32) * 4 + e] = va[e];                                           \
            else                                                                                         \
                As[buf][(tid % 2) * 4 + e][tid / 2] = va[e];                                             \
            if (TB)                                                                                      \
                Bs[buf][(tid % 2) * 4 + e][tid / 2] = vb[e];                                             \
            else                                                                                         \
                Bs[buf][tid / 32][(tid % 32) * 4 + e] = vb[e];                                           \
        }                                                                                                \
    } while (0)
    MHE__CU_GB2_FETCH(0);
    MHE__CU_GB2_STORE(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += MHE__CU_GB2K) {
        int more = k0 + MHE__CU_GB2K < K;
        if (more) /* the next step's elements, in flight while this one is multiplied */
            MHE__CU_GB2_FETCH(k0 + MHE__CU_GB2K);
#pragma unroll
        for (int kk = 0; kk < MHE__CU_GB2K; kk++) {
            float a[8], b[8];
            float4 a0 = *(const float4 *)&As[buf][kk][4 * ty], a1 = *(const float4 *)&As[buf][kk][64 + 4 * ty];
            float4 b0 = *(const float4 *)&Bs[buf][kk][4 * tx], b1 = *(const float4 *)&Bs[buf][kk][64 + 4 * tx];
            a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
            b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w, b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) { /* the other half was last read before the previous barrier */
            MHE__CU_GB2_STORE(buf ^ 1);
            if (!MHE__CU_FAULT(1))
                __syncthreads();
            buf ^= 1;
        }
    }
#undef MHE__CU_GB2_FETCH
#undef MHE__CU_GB2_STORE
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
            mhe__cu_store(C, ldc, M, N, m0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4),
                          n0 + (j < 4 ? 4 * tx + j : 64 + 4 * tx + j - 4), alpha, acc[i][j], beta, ep);
    mhe__cu_epi_act(C, ldc, M, N, m0, n0, MHE__CU_GB2, MHE__CU_GB2, ep);
}

/* an mma's C fragment (c0, c1 at (r, c) and (r, c + 1), c2, c3 eight rows down) into C */
static __device__ __forceinline__ void mhe__cu_store_frag(float *C, int ldc, int M, int N, int r, int c, float alpha,
                                                          const float acc[4], float beta, const mhe__cu_epi &ep) {
#pragma unroll
    for (int e = 0; e < 4; e++)
        mhe__cu_store(C, ldc, M, N, r + 8 * (e / 2), c + e % 2, alpha, acc[e], beta, ep);
}

/* a warp's MI x 4 fragments (rows r0 + 16 i, columns c0 + 8 j; g, t its lane's) into C */
template <int MI>
static __device__ __forceinline__ void mhe__cu_store_frags(float *C, int ldc, int M, int N, int r0, int c0, float alpha,
                                                           const float (*acc)[4][4], float beta,
                                                           const mhe__cu_epi &ep, int g, int t) {
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            mhe__cu_store_frag(C, ldc, M, N, r0 + 16 * i + g, c0 + 8 * j + 2 * t, alpha, acc[i][j], beta, ep);
}

/* TF32 tensor cores: mma.sync.m16n8k8 (PTX ISA, "Matrix fragments for
   mma.m16n8k8", .tf32). Fragment coordinates, with
   g = lane / 4 and t = lane % 4: A a0 (g, t), a1 (g+8, t), a2 (g, t+4),
   a3 (g+8, t+4); B b0 (k = t, n = g), b1 (k = t+4, n = g); C c0, c1 (g, 2t
   and 2t+1), c2, c3 (g+8, 2t and 2t+1). */
static __device__ __forceinline__ unsigned mhe__cu_tf32(float x) {
#ifdef MHE_CUDA_EMULATE
    return mhe_emu_cvt_rna_tf32(x);
#else
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return u;
#endif
}

/* bf16 (Kalamkar et al. 2019: float32's exponent, 7 mantissa bits) tensor cores:
   mma.sync.m16n8k16 ("Matrix fragments for mma.m16n8k16 with floating point
   type", .bf16), k twice as deep per instruction. A register holds two bf16,
   the lower k in its lower half: A a0 (g, 2t and 2t+1), a1 (g+8, the same),
   a2 and a3 (the same rows, k + 8); B b0 (k = 2t and 2t+1, n = g), b1 (k + 8).
   cvt.rn.bf16x2.f32 rounds to nearest even and packs hi above lo. */
static __device__ __forceinline__ unsigned mhe__cu_bf16x2(float hi, float lo) {
#ifdef MHE_CUDA_EMULATE
    return mhe_emu_cvt_rn_bf16x2(hi, lo);
#else
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
#endif
}

/* c += a b on the tensor cores: m16n8k8 TF32 (BF16 0) or m16n8k16 bf16 (1), float32 sums */
template <int BF16>
static __device__ __forceinline__ void mhe__cu_mma(float c[4], const unsigned a[4], const unsigned b[2]) {
#ifdef MHE_CUDA_EMULATE
    float d[4];
    if (BF16)
        mhe_emu_mma_m16n8k16_bf16(d, a, b, c);
    else
        mhe_emu_mma_m16n8k8_tf32(d, a, b, c);
    for (int i = 0; i < 4; i++)
        c[i] = d[i];
#else
#define MHE__CU_MMA_ARGS                                                                                 \
    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                                     \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])
    if (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n" MHE__CU_MMA_ARGS);
    else
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n" MHE__CU_MMA_ARGS);
#undef MHE__CU_MMA_ARGS
#endif
}

/* 64 x 64 tiles: 128 threads = 4 warps in a 2 x 2 grid, each warp 32 x 32
   outputs = 2 x 4 fragments of 16 x 8. The tiles are float in shared
   memory, rounded (BF16 0: TF32, 1: bf16) as each fragment is read. Split K
   as mhe__cu_gemm_simt's. */
template <int TA, int TB, int BF16>
__global__ __launch_bounds__(128) void mhe__cu_gemm_mma(int M, int N, int K, float alpha, const float *__restrict__ A,
                                                        int lda, const float *__restrict__ B, int ldb, float beta,
                                                        float *__restrict__ C, int ldc, int kc, int64_t cz,
                                                        mhe__cu_epi ep) {
    /* As[m][k] and Bs[k][n]; +4 keeps fragment reads on distinct banks */
    __shared__ float As[MHE__CU_GBM][MHE__CU_GBK + 4];
    __shared__ float Bs[MHE__CU_GBK][MHE__CU_GBN + 4];
    int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    int m0 = (int)blockIdx.y * MHE__CU_GBM, n0 = (int)blockIdx.x * MHE__CU_GBN;
    int kb = (int)blockIdx.z * kc, ke = kb + kc < K ? kb + kc : K;
    C += (int64_t)blockIdx.z * cz;
    int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    float acc[2][4][4];
    #pragma unroll
    for (int i = 0; i < 2; i++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    for (int k0 = kb; k0 < ke; k0 += MHE__CU_GBK) {
        for (int e = tid; e < MHE__CU_GBM * MHE__CU_GBK; e += 128) {
            int a_m = TA ? e % MHE__CU_GBM : e / MHE__CU_GBK, a_k = TA ? e / MHE__CU_GBM : e % MHE__CU_GBK;
            int b_n = TB ? e / MHE__CU_GBK : e % MHE__CU_GBN, b_k = TB ? e % MHE__CU_GBK : e / MHE__CU_GBN;
            As[a_m][a_k] = mhe__cu_ld<TA>(A, lda, m0 + a_m, k0 + a_k, M, ke);
            Bs[b_k][b_n] = mhe__cu_ld<TB>(B, ldb, k0 + b_k, n0 + b_n, ke, N);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < MHE__CU_GBK; ks += BF16 ? 16 : 8) {
            unsigned a[2][4], b[4][2];
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                int r = wm + 16 * i + g;
                if (BF16) {
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int k = ks + 2 * t + 8 * h;
                        a[i][2 * h] = mhe__cu_bf16x2(As[r][k + 1], As[r][k]);
                        a[i][2 * h + 1] = mhe__cu_bf16x2(As[r + 8][k + 1], As[r + 8][k]);
                    }
                } else {
                    a[i][0] = mhe__cu_tf32(As[r][ks + t]);
                    a[i][1] = mhe__cu_tf32(As[r + 8][ks + t]);
                    a[i][2] = mhe__cu_tf32(As[r][ks + t + 4]);
                    a[i][3] = mhe__cu_tf32(As[r + 8][ks + t + 4]);
                }
                if (MHE__CU_FAULT(3)) { /* the test's broken variant: two fragment registers swapped */
                    unsigned s = a[i][1];
                    a[i][1] = a[i][2];
                    a[i][2] = s;
                }
            }
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                int c = wn + 8 * j + g;
                if (BF16) {
                    b[j][0] = mhe__cu_bf16x2(Bs[ks + 2 * t + 1][c], Bs[ks + 2 * t][c]);
                    b[j][1] = mhe__cu_bf16x2(Bs[ks + 2 * t + 9][c], Bs[ks + 2 * t + 8][c]);
                } else {
                    b[j][0] = mhe__cu_tf32(Bs[ks + t][c]);
                    b[j][1] = mhe__cu_tf32(Bs[ks + t + 4][c]);
                }
            }
            #pragma unroll
            for (int i = 0; i < 2; i++)
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    mhe__cu_mma<BF16>(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
    mhe__cu_store_frags<2>(C, ldc, M, N, m0 + wm, n0 + wn, alpha, acc, beta, ep, g, t);
    mhe__cu_epi_act(C, ldc, M, N, m0, n0, MHE__CU_GBM, MHE__CU_GBN, ep);
}

/* Tensor cores, large shapes: 128 x 128 outputs per block of 256 threads =
   8 warps in a 2 x 4 grid, each warp 64 x 32 outputs = 4 x 4 fragments (16
   mma per k step of the instruction; the 64 x 64 kernel: 8). K in steps of
   16 (TF32) or 32 (bf16), double-buffered as mhe__cu_gemm_simt128: the next
   step is read into registers while this one is multiplied, and rounded
   once on its way into shared memory (the 64 kernel rounds every fragment
   read). Shared memory holds 16 rows of 32-bit words per operand and
   buffer, k-major and 136 wide: one TF32 value, or a bf16 pair (k, k + 1),
   per word, so both read their fragments alike (row t or t + 4 of an
   8-row half, column g) and land on bank 8 t + g, all 32 distinct. */
#define MHE__CU_GT2W (MHE__CU_GB2 + 8)


/* the fetched elements into tile[k][mn] (TF32) or tile[k / 2][mn] (bf16 pairs), rounded */
template <int TRANS_MAJOR, int BF16>
static __device__ __forceinline__ void mhe__cu_gt2_store(unsigned (*tile)[MHE__CU_GT2W], const float *v, int tid) {
    if (BF16) {
#pragma unroll
        for (int e = 0; e < 16; e++) { /* (k, k + 1): elements e and e + 4 (TRANS_MAJOR 1) or e + 1 */
            if (TRANS_MAJOR && e % 8 < 4)
                tile[2 * (tid / 32) + e / 8][(tid % 32) * 4 + e % 4] = mhe__cu_bf16x2(v[e + 4], v[e]);
            else if (!TRANS_MAJOR && e % 2 == 0)
                tile[(tid % 2) * 8 + e / 2][tid / 2] = mhe__cu_bf16x2(v[e + 1], v[e]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) {
            if (TRANS_MAJOR)
                tile[2 * (tid / 32) + e / 4][(tid % 32) * 4 + e % 4] = mhe__cu_tf32(v[e]);
            else
                tile[(tid % 2) * 8 + e][tid / 2] = mhe__cu_tf32(v[e]);
        }
    }
}

template <int TA, int TB, int BF16>
__global__ __launch_bounds__(256) void mhe__cu_gemm_mma128(int M, int N, int K, float alpha,
                                                             const float *__restrict__ A, int lda,
                                                             const float *__restrict__ B, int ldb, float beta,
                                                             float *__restrict__ C, int ldc, mhe__cu_epi ep) {
    enum { EPT = BF16 ? 16 : 8, KSTEP = 2 * EPT };
    __shared__ unsigned As[2][16][MHE__CU_GT2W];
    __shared__ unsigned Bs[2][16][MHE__CU_GT2W];
    int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    int m0 = (int)blockIdx.y * MHE__CU_GB2, n0 = (int)blockIdx.x * MHE__CU_GB2;
    int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
    float acc[4][4][4], va[EPT], vb[EPT];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
    /* op(A) [M][K]: A row-major (TA 0: the tile's rows along A's rows) or A [K][M] (TA 1); op(B) likewise */
#define MHE__CU_GT2_FETCH(k0)                                                                            \
    do {                                                                                                 \
        if (TA)                                                                                          \
            mhe__cu_gt2_fetch<1, EPT>(va, A, lda, (k0), m0, K, M, tid);                                  \
        else                                                                                             \
            mhe__cu_gt2_fetch<0, EPT>(va, A, lda, m0, (k0), M, K, tid);                                  \
        if (TB)                                                                                          \
            mhe__cu_gt2_fetch<0, EPT>(vb, B, ldb, n0, (k0), N, K, tid);                                  \
        else                                                                                             \
            mhe__cu_gt2_fetch<1, EPT>(vb, B, ldb, (k0), n0, K, N, tid);                                  \
    } while (0)
#define MHE__CU_GT2_STORE(buf)                                                                           \
    do {                                                                                                 \
        mhe__cu_gt2_store<TA, BF16>(As[buf], va, tid);                                                   \
        mhe__cu_gt2_store<!TB, BF16>(Bs[buf], vb, tid);                                                  \
    } while (0)
    MHE__CU_GT2_FETCH(0);
    MHE__CU_GT2_STORE(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += KSTEP) {
        int more = k0 + KSTEP < K;
        if (more) /* the next step's elements, in flight while this one is multiplied */
            MHE__CU_GT2_FETCH(k0 + KSTEP);
#pragma unroll
        for (int half = 0; half < 16; half += 8) { /* one instruction's k: 8 (TF32) or 16 (bf16) */
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = wm + 16 * i + g;
                a[i][0] = As[buf][half + t][r];
                a[i][1] = As[buf][half + t][r + 8];
                a[i][2] = As[buf][half + t + 4][r];
                a[i][3] = As[buf][half + t + 4][r + 8];
                if (MHE__CU_FAULT(3)) { /* the test's broken variant, as in the 64 kernel */
                    unsigned s = a[i][1];
                    a[i][1] = a[i][2];
                    a[i][2] = s;
                }
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int c = wn + 8 * j + g;
                b[j][0] = Bs[buf][half + t][c];
                b[j][1] = Bs[buf][half + t + 4][c];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mhe__cu_mma<BF16>(acc[i][j], a[i], b[j]);
        }
        if (more) { /* the other half was last read before the previous barrier */
            MHE__CU_GT2_STORE(buf ^ 1);
            if (!MHE__CU_FAULT(1))
                __syncthreads();
            buf ^= 1;
        }
    }
#undef MHE__CU_GT2_FETCH
#undef MHE__CU_GT2_STORE
    mhe__cu_store_frags<4>(C, ldc, M, N, m0 + wm, n0 + wn, alpha, acc, beta, ep, g, t);
    mhe__cu_epi_act(C, ldc, M, N, m0, n0, MHE__CU_GB2, MHE__CU_GB2, ep);
}

/* Ampere's asynchronous copy and matrix load (PTX ISA, "cp.async" and "ldmatrix"; the emulation
   implements both from the same text). cp.async.cg copies 16 bytes from global to shared memory
   without a register on the way, src_bytes of them read and the rest zero-filled; the copies of a
   thread are closed into groups (commit) and waited for by group (wait_group N: all but the N
   newest landed), and other threads see them only after that wait and a barrier. ldmatrix.x4:
   lanes 8i .. 8i + 7 give the addresses of matrix i's eight 16-byte rows; lane l gets word l % 4
   of row l / 4 of each. */
static __device__ __forceinline__ void mhe__cu_cp_async16(void *dst, const void *src, int src_bytes) {
#ifdef MHE_CUDA_EMULATE
    mhe_emu_cp_async_16(dst, src, (unsigned)src_bytes);
#else
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}

static __device__ __forceinline__ void mhe__cu_cp_commit(void) {
#ifdef MHE_CUDA_EMULATE
    mhe_emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N>
static __device__ __forceinline__ void mhe__cu_cp_wait(void) {
#ifdef MHE_CUDA_EMULATE
    mhe_emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

static __device__ __forceinline__ void mhe__cu_ldmatrix_x4(unsigned d[4], const void *row) {
#ifdef MHE_CUDA_EMULATE
    mhe_emu_ldmatrix_x4(d, row);
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a)
                 : "memory");
#endif
}

/* Tensor cores, pipelined: 128 x 128 outputs per block of 256 threads (8 warps in a 2 x 4 grid,
   each 64 x 32 outputs, as mhe__cu_gemm_mma128), K in stages of 32 through MHE__CU_GP_STAGES
   buffers: cp.async copies stage s + 2 straight into shared memory while stage s is multiplied,
   and each stage costs one wait and one barrier. The tiles stay float32 in shared memory (a copy
   cannot round), so fragments are rounded to TF32 or bf16 as they are read.
   A tile whose rows run along K in memory (op(A) = A, op(B) = B^T: a linear layer's forward) is
   stored [row][k], 36 floats a row (rows 144 bytes apart: ldmatrix's eight rows land on distinct
   banks), and read by ldmatrix.x4, whose 32-bit words on float data are exactly the TF32
   fragments: word (row l / 4, k l % 4) of an 8 x 4 block is a0 (g, t), and of the blocks 8 rows
   and 4 k further, a1, a2, a3; likewise b0 (n g, k t) and b1 (k t + 4) from a [n][k] tile. The
   other tiles are stored [k][row], 136 floats a row, and read word by word (bank 8 t + g).
   bf16 packs the k pairs (t, t + 4) and (t + 8, t + 12) where the instruction's fragment has
   (2t, 2t + 1) and (2t + 8, 2t + 9): one permutation of k for both operands, so the same sum
   (in another order) from the words ldmatrix gives. cp.async needs 16-byte aligned A and B and
   leading dimensions that are multiples of 4; other GEMMs (and A^T B^T) take mhe__cu_gemm_mma128. */
#define MHE__CU_GP_BK 32 /* K per stage */
#define MHE__CU_GP_STAGES 3
#define MHE__CU_GP_KROW (MHE__CU_GP_BK + 4)               /* floats per row of a [row][k] tile */
#define MHE__CU_GP_RROW (MHE__CU_GB2 + 8)                 /* of a [k][row] tile */
#define MHE__CU_GP_TILE (MHE__CU_GB2 * MHE__CU_GP_KROW)   /* floats per operand and stage (the larger) */
#define MHE__CU_GP_SMEM ((size_t)2 * MHE__CU_GP_STAGES * MHE__CU_GP_TILE * sizeof(float))

static long mhe__cu_gemm_pipe_calls; /* tests: launches of the pipelined kernel, so they can see it ran */

/* a stage of X into tile by cp.async, 4 copies of 16 bytes per thread. KROW 1: tile[row][k], the
   tile's 128 rows from X's row r0 on and its 32 k from column c0; 0: tile[k][row], its 32 k from
   X's row r0 and its 128 rows from column c0. R x Cn: X's size; past it, zeros. */
template <int KROW>
static __device__ __forceinline__ void mhe__cu_gp_load(float *tile, const float *X, int ld, int r0, int c0, int R,
                                                       int Cn, int tid) {
    enum {
        ROWS = KROW ? MHE__CU_GB2 : MHE__CU_GP_BK,
        CHUNKS = (KROW ? MHE__CU_GP_BK : MHE__CU_GB2) / 4,
        STRIDE = KROW ? MHE__CU_GP_KROW : MHE__CU_GP_RROW
    };
#pragma unroll
    for (int i = 0; i < ROWS * CHUNKS / 256; i++) {
        int e = tid + 256 * i, r = e / CHUNKS, c = (e % CHUNKS) * 4, gr = r0 + r, gc = c0 + c;
        int n = gr < R && gc < Cn ? (Cn - gc < 4 ? Cn - gc : 4) : 0;
        mhe__cu_cp_async16(tile + r * STRIDE + c, n ? X + (size_t)gr * ld + gc : X, 4 * n);
    }
}

/* the raw float words of rows r + g and r + g + 8 at k = k0 + t and k0 + t + 4: w[0] (g, t),
   w[1] (g + 8, t), w[2] (g, t + 4), w[3] (g + 8, t + 4): an A fragment's (TF32) places */
template <int KROW>
static __device__ __forceinline__ void mhe__cu_gp_words_a(unsigned w[4], const float *tile, int r, int k0, int lane) {
    if (KROW) {
        mhe__cu_ldmatrix_x4(w, tile + (r + lane % 8 + 8 * (lane / 8 % 2)) * MHE__CU_GP_KROW + k0 + 4 * (lane / 16));
    } else {
        int g = lane / 4, t = lane % 4;
        const float *p = tile + (k0 + t) * MHE__CU_GP_RROW + r + g;
        w[0] = __float_as_uint(p[0]);
        w[1] = __float_as_uint(p[8]);
        w[2] = __float_as_uint(p[4 * MHE__CU_GP_RROW]);
        w[3] = __float_as_uint(p[4 * MHE__CU_GP_RROW + 8]);
    }
}

/* the raw words of column c + g at k = k0 + t + 4q, q = 0..3 (B's b0, b1 of two TF32 steps) */
template <int KROW>
static __device__ __forceinline__ void mhe__cu_gp_words_b(unsigned w[4], const float *tile, int c, int k0, int lane) {
    if (KROW) {
        mhe__cu_ldmatrix_x4(w, tile + (c + lane % 8) * MHE__CU_GP_KROW + k0 + 4 * (lane / 8));
    } else {
        const float *p = tile + (k0 + lane % 4) * MHE__CU_GP_RROW + c + lane / 4;
#pragma unroll
        for (int q = 0; q < 4; q++)
            w[q] = __float_as_uint(p[4 * q * MHE__CU_GP_RROW]);
    }
}

static __device__ __forceinline__ unsigned mhe__cu_tf32w(unsigned w) { return mhe__cu_tf32(__uint_as_float(w)); }

template <int TA, int TB, int BF16>
__global__ __launch_bounds__(256) void mhe__cu_gemm_pipe(int M, int N, int K, float alpha,
                                                          const float *__restrict__ A, int lda,
                                                          const float *__restrict__ B, int ldb, float beta,
                                                          float *__restrict__ C, int ldc, mhe__cu_epi ep) {
    MHE__CU_DYN_SHARED(float, sm);
    int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    int m0 = (int)blockIdx.y * MHE__CU_GB2, n0 = (int)blockIdx.x * MHE__CU_GB2;
    int wm = (warp / 4) * 64, wn = (warp % 4) * 32, nk = (K + MHE__CU_GP_BK - 1) / MHE__CU_GP_BK;
    float acc[4][4][4] = {{{0.0f}}};
    /* stage kt into buffer s: op(A)'s rows run along A's rows unless TA, op(B)'s along B's if TB */
#define MHE__CU_GP_LOAD(s, kt)                                                                           \
    do {                                                                                                 \
        float *As_ = sm + (s) * 2 * MHE__CU_GP_TILE, *Bs_ = As_ + MHE__CU_GP_TILE;                       \
        int k0_ = (kt) * MHE__CU_GP_BK;                                                                  \
        if (TA)                                                                                          \
            mhe__cu_gp_load<0>(As_, A, lda, k0_, m0, K, M, tid);                                         \
        else                                                                                             \
            mhe__cu_gp_load<1>(As_, A, lda, m0, k0_, M, K, tid);                                         \
        if (TB)                                                                                          \
            mhe__cu_gp_load<1>(Bs_, B, ldb, n0, k0_, N, K, tid);                                         \
        else                                                                                             \
            mhe__cu_gp_load<0>(Bs_, B, ldb, k0_, n0, K, N, tid);                                         \
    } while (0)
#pragma unroll
    for (int s = 0; s < MHE__CU_GP_STAGES - 1; s++) {
        if (s < nk)
            MHE__CU_GP_LOAD(s, s);
        mhe__cu_cp_commit(); /* empty groups too: the wait below counts groups */
    }
    for (int kt = 0; kt < nk; kt++) {
        mhe__cu_cp_wait<MHE__CU_GP_STAGES - 2>(); /* this thread's copies of stage kt have landed */
        if (!MHE__CU_FAULT(1))
            __syncthreads(); /* everyone's have, and everyone is done with the buffer stage kt + 2 takes */
        if (kt + MHE__CU_GP_STAGES - 1 < nk)
            MHE__CU_GP_LOAD((kt + MHE__CU_GP_STAGES - 1) % MHE__CU_GP_STAGES, kt + MHE__CU_GP_STAGES - 1);
        mhe__cu_cp_commit();
        const float *As = sm + (kt % MHE__CU_GP_STAGES) * 2 * MHE__CU_GP_TILE, *Bs = As + MHE__CU_GP_TILE;
#pragma unroll
        for (int k16 = 0; k16 < MHE__CU_GP_BK; k16 += 16) {
            /* B's fragments first, then A's row by row, each used at once (fewer live registers) */
            unsigned a[4], b[4][2], w[4], wb[4][4];
            if (BF16) { /* one k16 instruction: A (g, t | t + 4), (g + 8, ...), then k + 8; B likewise */
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    mhe__cu_gp_words_b<TB>(w, Bs, wn + 8 * j, k16, lane);
                    b[j][0] = mhe__cu_bf16x2(__uint_as_float(w[1]), __uint_as_float(w[0]));
                    b[j][1] = mhe__cu_bf16x2(__uint_as_float(w[3]), __uint_as_float(w[2]));
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        mhe__cu_gp_words_a<!TA>(w, As, wm + 16 * i, k16 + 8 * h, lane);
                        if (MHE__CU_FAULT(3)) { /* the test's broken variant, as in the other kernels */
                            unsigned x = w[1];
                            w[1] = w[2];
                            w[2] = x;
                        }
                        a[2 * h] = mhe__cu_bf16x2(__uint_as_float(w[2]), __uint_as_float(w[0]));
                        a[2 * h + 1] = mhe__cu_bf16x2(__uint_as_float(w[3]), __uint_as_float(w[1]));
                    }
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        mhe__cu_mma<1>(acc[i][j], a, b[j]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++) /* B's words for both k8 instructions */
                    mhe__cu_gp_words_b<TB>(wb[j], Bs, wn + 8 * j, k16, lane);
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        b[j][0] = mhe__cu_tf32w(wb[j][2 * h]);
                        b[j][1] = mhe__cu_tf32w(wb[j][2 * h + 1]);
                    }
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        mhe__cu_gp_words_a<!TA>(w, As, wm + 16 * i, k16 + 8 * h, lane);
                        if (MHE__CU_FAULT(3)) {
                            unsigned x = w[1];
                            w[1] = w[2];
                            w[2] = x;
                        }
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            a[e] = mhe__cu_tf32w(w[e]);
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            mhe__cu_mma<0>(acc[i][j], a, b[j]);
                    }
                }
            }
        }
    }
#undef MHE__CU_GP_LOAD
    mhe__cu_cp_wait<0>(); /* the empty groups of the last stages */
    mhe__cu_store_frags<4>(C, ldc, M, N, m0 + wm, n0 + wn, alpha, acc, beta, ep, g, t);
    mhe__cu_epi_act(C, ldc, M, N, m0, n0, MHE__CU_GB2, MHE__CU_GB2, ep);
}

typedef void (*mhe__cu_gemm_kernel)(int, int, int, float, const float *, int, const float *, int, float, float *, int,
                                    mhe__cu_epi);
typedef void (*mhe__cu_gemm_split_kernel)(int, int, int, float, const float *, int, const float *, int, float, float *,
                                          int, int, int64_t, mhe__cu_epi);

template <int BF16>
static mhe__cu_gemm_kernel mhe__cu_mma128_kernel(int ta, int tb) {
    return ta ? (tb ? mhe__cu_gemm_mma128<1, 1, BF16> : mhe__cu_gemm_mma128<1, 0, BF16>)
              : (tb ? mhe__cu_gemm_mma128<0, 1, BF16> : mhe__cu_gemm_mma128<0, 0, BF16>);
}

/* the three transposes a model runs (forward A B^T, input gradient A B, weight gradient A^T B);
   A^T B^T, which none does, keeps mhe__cu_gemm_mma128 (its pipelined form spills a register) */
template <int BF16>
static mhe__cu_gemm_kernel mhe__cu_pipe_kernel(int ta, int tb) {
    return ta ? mhe__cu_gemm_pipe<1, 0, BF16> : (tb ? mhe__cu_gemm_pipe<0, 1, BF16> : mhe__cu_gemm_pipe<0, 0, BF16>);
}

template <int BF16>
static mhe__cu_gemm_split_kernel mhe__cu_mma_kernel(int ta, int tb) {
    return ta ? (tb ? mhe__cu_gemm_mma<1, 1, BF16> : mhe__cu_gemm_mma<1, 0, BF16>)
              : (tb ? mhe__cu_gemm_mma<0, 1, BF16> : mhe__cu_gemm_mma<0, 0, BF16>);
}

/* C = alpha (sum over the S slices of ws) + beta C, the slices added in order (deterministic) */
__global__ __launch_bounds__(256) void mhe__cu_splitk_sum(float *C, int ldc, const float *ws, int M, int N, int S,
                                                          float alpha, float beta, mhe__cu_epi ep) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, MN = (int64_t)M * N;
    if (i >= MN)
        return;
    float acc = 0.0f;
    for (int z = 0; z < S; z++)
        acc += ws[z * MN + i];
    mhe__cu_store(C, ldc, M, N, (int)(i / N), (int)(i % N), alpha, acc, beta, ep);
    if (ep.act_out)
        ep.act_out[(i / N) * ldc + i % N] = mhe__cu_act(ep.act, C[(i / N) * ldc + i % N]);
}

/* Split K: an output too small to fill the GPU with 64 x 64 tiles (a weight gradient: d_model^2
   outputs summed over every token) is summed in S slices of K at once, into a workspace, then
   added up in order. The number of slices: enough blocks for two per SM of a large GPU, slices
   of at least MHE__CU_SPLITK_MIN_K, within the workspace. mhe__cu_splitk_force (tests) sets S. */
#define MHE__CU_SPLITK_WS (1 << 21) /* floats of workspace (g->gemm_ws) */
#define MHE__CU_SPLITK_MIN_K 256
static int mhe__cu_splitk_force;

static int mhe__cu_splitk_slices(int M, int N, int K, size_t ws_floats) {
    int64_t MN = (int64_t)M * N, blocks = (int64_t)mhe__cu_blocks(M, MHE__CU_GBM) * mhe__cu_blocks(N, MHE__CU_GBN);
    int64_t S = mhe__cu_splitk_force ? mhe__cu_splitk_force : (264 + blocks - 1) / blocks;
    if (!mhe__cu_splitk_force && K < 4 * MHE__CU_SPLITK_MIN_K) /* short sums (decoding's GEMVs) stay whole */
        return 1;
    if (!mhe__cu_splitk_force && S > K / MHE__CU_SPLITK_MIN_K)
        S = K / MHE__CU_SPLITK_MIN_K;
    if (S > (K + MHE__CU_GBK - 1) / MHE__CU_GBK)
        S = (K + MHE__CU_GBK - 1) / MHE__CU_GBK;
    if (MN > 0 && S > (int64_t)(ws_floats / MN))
        S = (int64_t)(ws_floats / MN);
    return S > 16 ? 16 : (int)S;
}

/* the device mhe_gemm: same arguments, device pointers; precision (MHE_CUDA_FP32, _TF32, _BF16)
   picks the kernels; ws (NULL: none) lets a small output split K; ep: bias and activation */
static cudaError_t mhe__cu_gemm(int precision, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                                int lda, const float *B, int ldb, float beta, float *C, int ldc, float *ws,
                                size_t ws_floats, mhe__cu_epi ep) {
    dim3 grid((unsigned)mhe__cu_blocks(N, MHE__CU_GBN), (unsigned)mhe__cu_blocks(M, MHE__CU_GBM));
    dim3 block(256);
    if (M <= 0 || N <= 0)
        return cudaSuccess;
    if ((long)M * N >= mhe__cu_gemm_big_min) { /* enough 128 x 128 tiles to fill the GPU */
        grid = dim3((unsigned)mhe__cu_blocks(N, MHE__CU_GB2), (unsigned)mhe__cu_blocks(M, MHE__CU_GB2));
        int aligned = ((uintptr_t)A | (uintptr_t)B) % 16 == 0 && lda % 4 == 0 && ldb % 4 == 0;
        if (precision != MHE_CUDA_FP32 && aligned && !(ta && tb)) {
            mhe__cu_gemm_pipe_calls++;
            return mhe__cu_launch(precision == MHE_CUDA_BF16 ? mhe__cu_pipe_kernel<1>(ta, tb)
                                                             : mhe__cu_pipe_kernel<0>(ta, tb),
                                  grid, block, MHE__CU_GP_SMEM, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
        }
        mhe__cu_gemm_kernel k = precision == MHE_CUDA_BF16   ? mhe__cu_mma128_kernel<1>(ta, tb)
                                : precision == MHE_CUDA_TF32 ? mhe__cu_mma128_kernel<0>(ta, tb)
                                : ta ? (tb ? mhe__cu_gemm_simt128<1, 1> : mhe__cu_gemm_simt128<1, 0>)
                                     : (tb ? mhe__cu_gemm_simt128<0, 1> : mhe__cu_gemm_simt128<0, 0>);
        return mhe__cu_launch(k, grid, block, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
    }
    mhe__cu_gemm_split_kernel k = precision == MHE_CUDA_BF16   ? mhe__cu_mma_kernel<1>(ta, tb)
                                  : precision == MHE_CUDA_TF32 ? mhe__cu_mma_kernel<0>(ta, tb)
                                  : ta ? (tb ? mhe__cu_gemm_simt<1, 1> : mhe__cu_gemm_simt<1, 0>)
                                       : (tb ? mhe__cu_gemm_simt<0, 1> : mhe__cu_gemm_simt<0, 0>);
    if (precision != MHE_CUDA_FP32)
        block = dim3(128);
    int S = ws ? mhe__cu_splitk_slices(M, N, K, ws_floats) : 1;
    if (S < 2)
        return mhe__cu_launch(k, grid, block, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, K, (int64_t)0, ep);
    int kc = (K + S - 1) / S;
    kc = (kc + MHE__CU_GBK - 1) / MHE__CU_GBK * MHE__CU_GBK;
    S = (K + kc - 1) / kc;
    grid.z = (unsigned)S;
    cudaError_t e = mhe__cu_launch(k, grid, block, 0, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, ws, N, kc, (int64_t)M * N,
                                   mhe__cu_no_epi);
    if (e != cudaSuccess)
        return e;
    return mhe__cu_launch(mhe__cu_splitk_sum, dim3(mhe__cu_blocks((int64_t)M * N, 256)), dim3(256), 0, C, ldc,
                          (const float *)ws, M, N, S, alpha, beta, ep);
}

static mhe_status mhe__cu_gemm_m(mhe_cuda_model *g, int ta, int tb, int M, int N, int K, float alpha,
                                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    MHE__CU_TRY(mhe__cu_gemm(g->precision, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, g->gemm_ws,
                             MHE__CU_SPLITK_WS, mhe__cu_no_epi),
                "GEMM");
    return MHE_OK;
}

/* out[N, OC] (row stride ldo: a column slice when wider) = inp[N, IC] W^T + b, as mhe_linear_fwd /
   mhe__lin_rows, the bias added by the GEMM's epilogue; act_out (NULL: none): act(out), stride ldo */
static mhe_status mhe__cu_linear_fwd_act(mhe_cuda_model *g, float *out, int ldo, const float *inp, const float *w,
                                         const float *b, int N, int IC, int OC, float *act_out, int act) {
    mhe__cu_epi ep = {b, act_out, act};
    MHE__CU_TRY(mhe__cu_gemm(g->precision, 0, 1, N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, ldo, g->gemm_ws,
                             MHE__CU_SPLITK_WS, ep),
                "GEMM");
    return MHE_OK;
}

static mhe_status mhe__cu_linear_fwd(mhe_cuda_model *g, float *out, int ldo, const float *inp, const float *w,
                                     const float *b, int N, int IC, int OC) {
    return mhe__cu_linear_fwd_act(g, out, ldo, inp, w, b, N, IC, OC, NULL, 0);
}

/* Column sums over rows, in two passes that add in a fixed order (the same sums every
   run, no atomics): R chunks of rows, one thread per column and chunk, write partials;
   then one thread per column adds its R partials in order. (One thread per column over
   every row kept all but C/256 blocks of the GPU idle.) mode 0: part[r][j] = sum of
   x[i][j] over chunk r (a bias gradient); mode 1 (LayerNorm) / 2 (RMSNorm): the norm's
   weight and bias gradients, x the output gradient: part[2r][j] = sum x[i][j] xhat[i][j],
   part[2r + 1][j] = sum x[i][j]. */
#define MHE__CU_COLPART (1 << 19) /* floats of partials (g->colpart) */

__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_colsum_part(float *part, const float *x, int ld,
                                                                  const float *inp, const float *mean,
                                                                  const float *rstd, int N, int OC, int R,
                                                                  int mode) {
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x), r = (int)blockIdx.y;
    int i0 = (int)((int64_t)r * N / R), i1 = (int)((int64_t)(r + 1) * N / R);
    float sw = 0.0f, sb = 0.0f;
    if (j >= OC)
        return;
    for (int i = i0; i < i1; i++) {
        float d = x[(size_t)i * ld + j];
        if (mode)
            sw += d * (inp[(size_t)i * OC + j] - (mode == 2 ? 0.0f : mean[i])) * rstd[i];
        sb += d;
    }
    if (mode) {
        part[(size_t)2 * r * OC + j] = sw;
        part[(size_t)(2 * r + 1) * OC + j] = sb;
    } else
        part[(size_t)r * OC + j] = sb;
}

/* dst[j] += the R partials of column j in order (mode 0); modes 1, 2: dw[j] and db[j] (db may be NULL) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_colsum_add(float *dw, float *db, const float *part, int OC,
                                                                 int R, int mode) {
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    float sw = 0.0f, sb = 0.0f;
    if (j >= OC)
        return;
    for (int r = 0; r < R; r++) {
        if (mode) {
            sw += part[(size_t)2 * r * OC + j];
            sb += part[(size_t)(2 * r + 1) * OC + j];
        } else
            sw += part[(size_t)r * OC + j];
    }
    dw[j] += sw;
    if (mode && db)
        db[j] += sb;
}

/* dw[j] += column sums of x [N][OC] (row stride ld) (mode 0), or a norm's weight and bias
   gradients (modes 1, 2; inp, mean, rstd its saved input and statistics): see mhe__cu_colsum_part */
static mhe_status mhe__cu_colsums(mhe_cuda_model *g, float *dw, float *db, const float *x, int ld, int N, int OC,
                                  const float *inp, const float *mean, const float *rstd, int mode) {
    int per = mode ? 2 : 1;
    int64_t R = N / 32; /* chunks of at least 32 rows, at most 64 chunks, within the buffer */
    if (R > 64)
        R = 64;
    if (R * per * OC > MHE__CU_COLPART)
        R = MHE__CU_COLPART / ((int64_t)per * OC);
    if (R < 1)
        R = 1;
    if (N < 1 || OC < 1)
        return MHE_OK;
    if ((int64_t)per * OC > MHE__CU_COLPART)
        return mhe__fail(g->err, MHE_ERR_DEVICE, "column sums over %d columns: past the %d-float buffer", OC,
                         MHE__CU_COLPART);
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_colsum_part, dim3(mhe__cu_blocks(OC, MHE__CU_EW), (unsigned)R),
                               dim3(MHE__CU_EW), 0, g->colpart, x, ld, inp, mean, rstd, N, OC, (int)R, mode),
                "column sums");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_colsum_add, dim3(mhe__cu_blocks(OC, MHE__CU_EW)), dim3(MHE__CU_EW), 0, dw, db,
                               (const float *)g->colpart, OC, (int)R, mode),
                "column sums");
    return MHE_OK;
}

/* din += dout W, dW += dout^T inp, db += column sums, as mhe_linear_bwd (din may be NULL) */
static mhe_status mhe__cu_linear_bwd(mhe_cuda_model *g, float *din, float *dw, float *db, const float *dout,
                                     int ldd, const float *inp, const float *w, int N, int IC, int OC) {
    if (din)
        MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, N, IC, OC, 1.0f, dout, ldd, w, IC, 1.0f, din, IC));
    MHE__CU_MHE(mhe__cu_gemm_m(g, 1, 0, OC, IC, N, 1.0f, dout, ldd, inp, IC, 1.0f, dw, IC));
    if (db)
        MHE__CU_MHE(mhe__cu_colsums(g, db, NULL, dout, ldd, N, OC, NULL, NULL, NULL, 0));
    return MHE_OK;
}

/* ======================================================================== */
/* C3. attention cores                                                      */
/* ======================================================================== */
/* Fused attention with online softmax (Milakov and Gimelshein 2018; Dao et
   et al. 2022) for the meaning of mhe_attn_dims (mhe.h section 4), device
   pointers throughout. One warp owns one query row and every query head of
   its K/V group, so a K/V tile loaded into shared memory once serves all of
   them: for MHE-MUL and collab (q_shared, one K/V head) that is the
   stacked form of docs/design.md section 5, the head maps applied to the query in
   shared memory and to the output at the end, and per-head Q/K/V never
   reach device memory. MHE-ADD reaches the core with one QK^T for all
   heads and its per-head key bias k_j . e_i^Q precomputed as a [keys, n]
   table (k_bias, as collab's content bias); k_add only shifts whole score
   rows, which softmax ignores, so it is not read (its gradient is 0).
   Scores, weights and accumulators stay in shared memory (lanes own
   columns), so no register array is indexed at run time.

   The same tiles run Taylor ("Approximate", thesis eq. 4.6; Based, Arora et
   al. 2024) as template mode TAY = 1: w = 1 + s + s^2/2 in place of exp(s),
   one shared normaliser, o_t = sum_j w_tj v_j / sum_j w_tj (w >= 1/2, so no
   running max), lse holding that sum, as mhe__taylor_ref_fwd/_bwd. The CPU
   also has a chunked linear-time form; its state is F x d_h per head (F = 1
   + d_h + d_h (d_h + 1)/2: 2145 at d_h = 64), and adding a key to it and
   reading it costs more than the direct form's T keys per query while T < F
   (2F causal), so training here runs the direct form and decoding, one
   token at a time, keeps the state (mhe__cu_taylor_step). */

#define MHE__CU_BK 32   /* keys per shared tile (one per lane) */

/* everything a core kernel needs, passed by value */
typedef struct mhe__cu_att {
    int B, n, n_kv, group, Tq, Tk, dk, dh, vw, q_off, causal;
    int qs, ks, vs, os, kbs, q_shared, v_per_head;
    float scale;
    const int *kv_len;
    const float *q_mul, *q_add, *v_mul, *v_add, *k_bias;
    float drop;                             /* attention dropout's p (0: none) */
    uint64_t seed;                          /* its stream (mhe_attn_dims.seed) */
} mhe__cu_att;

static mhe__cu_att mhe__cu_att_from(const mhe_attn_dims *d) {
    mhe__cu_att a;
    memset(&a, 0, sizeof a);
    a.B = d->B;
    a.n = d->n_heads;
    a.n_kv = d->n_kv_heads;
    a.group = d->n_heads / d->n_kv_heads;
    a.Tq = d->Tq;
    a.Tk = d->Tk;
    a.dh = d->d_head;
    a.dk = d->d_qk > 0 ? d->d_qk : d->d_head;
    a.v_per_head = d->v_per_head;
    a.vw = d->v_per_head ? a.group * d->d_head : d->d_head;
    a.q_off = d->q_offset;
    a.causal = d->causal;
    a.qs = d->q_stride;
    a.ks = d->k_stride;
    a.vs = d->v_stride;
    a.os = d->o_stride;
    a.kbs = d->k_bias_stride;
    a.q_shared = d->q_shared;
    a.scale = d->scale;
    a.drop = d->dropout;
    a.seed = d->seed;
    a.kv_len = d->kv_len;
    a.q_mul = d->q_mul;
    a.q_add = d->q_add;
    a.v_mul = d->v_mul;
    a.v_add = d->v_add;
    a.k_bias = d->k_bias;
    return a;
}

/* keys query t of sequence b may see: the causal limit and the padding */
static __device__ __forceinline__ int mhe__cu_visible(const mhe__cu_att &a, int b, int t) {
    int n = a.Tk;
    if (a.causal && t + a.q_off + 1 < n)
        n = t + a.q_off + 1;
    if (a.kv_len && a.kv_len[b] < n)
        n = a.kv_len[b];
    return n < 0 ? 0 : n;
}

/* attention dropout's factor on weight (b, h, t, j): 0 or 1 / (1 - p), from
   the CPU's stream (mhe_hash_uniform at MHE__ATT_IDX), so the masks agree */
static __device__ __forceinline__ float mhe__cu_att_keep(const mhe__cu_att &a, int b, int h, int t, int j) {
    uint64_t i = (((uint64_t)b * (uint64_t)a.n + (uint64_t)h) * (uint64_t)a.Tq + (uint64_t)t) * (uint64_t)a.Tk + (uint64_t)j;
    return mhe__cu_hash_uniform(a.seed, i) >= a.drop ? 1.0f / (1.0f - a.drop) : 0.0f;
}

/* head h's query at row r mapped as in eq. 5 of the MHE paper: q * q_mul_h + q_add_h */
static __device__ __forceinline__ float mhe__cu_qmap(const mhe__cu_att &a, const float *q, int h, int c) {
    float x = q[c];
    if (a.q_mul)
        x *= a.q_mul[(size_t)h * a.dk + c];
    if (a.q_add)
        x += a.q_add[(size_t)h * a.dk + c];
    return x;
}

/* shared memory of a forward block of W warps, in floats */
static size_t mhe__cu_fwd_smem(const mhe__cu_att *a, int W) {
    size_t G = (size_t)a->group;
    size_t per_warp = G * a->dk + MHE__CU_BK + G * a->dh + 3 * G;
    return (size_t)MHE__CU_BK * (a->dk + 1) + (size_t)MHE__CU_BK * a->vw + (size_t)MHE__CU_BK * G + W * per_warp;
}

/* one key tile of the SIMT cores (forward, dq) into shared memory: K rows padded to
   dk + 1 floats (no bank conflicts between lanes), V rows (per head or the group's),
   the group's key biases; 0 past Tk. A macro: the same loads in the same order in
   each kernel, so registers stay as the budget has them. */
#define MHE__CU_SIMT_LOAD_KV(a, k, v, kt, vt, kbt, b, g, G, j0)                                          \
    do {                                                                                               \
        for (int e = (int)threadIdx.x; e < MHE__CU_BK * (a).dk; e += (int)blockDim.x) {                 \
            int j = e / (a).dk, c = e % (a).dk;                                                        \
            (kt)[j * ((a).dk + 1) + c] =                                                               \
                (j0) + j < (a).Tk ? (k)[((size_t)(b) * (a).Tk + (j0) + j) * (a).ks + (size_t)(g) * (a).dk + c] \
                                  : 0.0f;                                                              \
        }                                                                                              \
        for (int e = (int)threadIdx.x; e < MHE__CU_BK * (a).vw; e += (int)blockDim.x) {                 \
            int j = e / (a).vw, c = e % (a).vw;                                                        \
            size_t col = (a).v_per_head ? (size_t)(g) * (a).vw + c : (size_t)(g) * (a).dh + c;          \
            (vt)[e] = (j0) + j < (a).Tk ? (v)[((size_t)(b) * (a).Tk + (j0) + j) * (a).vs + col] : 0.0f; \
        }                                                                                              \
        if ((a).k_bias)                                                                                \
            for (int e = (int)threadIdx.x; e < MHE__CU_BK * (G); e += (int)blockDim.x) {               \
                int j = e / (G), hh = e % (G);                                                         \
                (kbt)[e] = (j0) + j < (a).Tk ? (a).k_bias[((size_t)(b) * (a).Tk + (j0) + j) * (a).kbs + (g) * (G) + hh] \
                                             : 0.0f;                                                   \
            }                                                                                          \
    } while (0)

/* Forward: block (query rows blockIdx.x*W .., K/V head blockIdx.y, sequence blockIdx.z) */
template <int TAY>
__global__ __launch_bounds__(128, 1) void mhe__cu_attn_fwd_k(mhe__cu_att a, float *out, float *lse, const float *q,
                                                          const float *k, const float *v) {
    MHE__CU_DYN_SHARED(float, sm);
    const float drop = TAY ? 0.0f : a.drop; /* Taylor has no attention dropout: none compiled in */
    int W = (int)blockDim.x / 32, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int b = (int)blockIdx.z, g = (int)blockIdx.y, G = a.group, t = (int)blockIdx.x * W + warp;
    int live = t < a.Tq, kend_blk, kend;
    float *kt = sm, *vt = kt + MHE__CU_BK * (a.dk + 1), *kbt = vt + MHE__CU_BK * a.vw;
    float *wb = kbt + MHE__CU_BK * G + (size_t)warp * (G * a.dk + MHE__CU_BK + G * a.dh + 3 * G);
    float *qb = wb, *pb = qb + G * a.dk, *acc = pb + MHE__CU_BK, *mst = acc + G * a.dh, *lst = mst + G;
    float *kst = lst + G; /* attention dropout: the kept weights' running sum (MHE-ADD's e^V term) */
    int tl = (int)blockIdx.x * W + W - 1 < a.Tq - 1 ? (int)blockIdx.x * W + W - 1 : a.Tq - 1;
    kend_blk = mhe__cu_visible(a, b, tl); /* the block's last row sees the most keys */
    kend = live ? mhe__cu_visible(a, b, t) : 0;
    if (live) {
        for (int hh = 0; hh < G; hh++) {
            int h = g * G + hh;
            const float *qr = q + ((size_t)b * a.Tq + t) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
            for (int c = lane; c < a.dk; c += 32)
                qb[hh * a.dk + c] = mhe__cu_qmap(a, qr, h, c);
            for (int c = lane; c < a.dh; c += 32)
                acc[hh * a.dh + c] = 0.0f;
        }
        if (lane == 0)
            for (int hh = 0; hh < G; hh++) {
                mst[hh] = -INFINITY;
                lst[hh] = 0.0f;
                kst[hh] = 0.0f;
            }
    }
    __syncwarp();
    for (int j0 = 0; j0 < kend_blk; j0 += MHE__CU_BK) {
        __syncthreads(); /* the previous tile is read by every warp */
        MHE__CU_SIMT_LOAD_KV(a, k, v, kt, vt, kbt, b, g, G, j0);
        __syncthreads();
        if (!live || j0 >= kend)
            continue;
        int vis = j0 + lane < kend;
        float s0 = 0.0f;
        for (int hh = 0; hh < G; hh++) {
            /* heads that read the same query share one dot product (MHE-ADD) */
            if (hh == 0 || a.q_mul || !a.q_shared || a.q_add) {
                s0 = 0.0f;
                for (int c = 0; c < a.dk; c++)
                    s0 += qb[hh * a.dk + c] * kt[lane * (a.dk + 1) + c];
            }
            float s = vis ? a.scale * (s0 + (a.k_bias ? kbt[lane * G + hh] : 0.0f)) : -INFINITY;
            float m_old = mst[hh], m_new, p, corr;
            if (TAY) { /* Taylor: plain sums, no max to track */
                m_new = 0.0f;
                p = vis ? 1.0f + s + 0.5f * s * s : 0.0f;
                corr = 1.0f;
            } else {
                m_new = fmaxf(m_old, mhe__cu_warp_max(s));
                p = vis ? expf(s - m_new) : 0.0f;
                corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            }
            float mass = mhe__cu_warp_sum(p), kept = mass;
            if (drop > 0.0f) { /* the normaliser sums every weight, V sees the kept ones (mhe__row_dropout) */
                p = vis ? p * mhe__cu_att_keep(a, b, g * G + hh, t, j0 + lane) : 0.0f;
                kept = mhe__cu_warp_sum(p);
            }
            pb[lane] = p;
            __syncwarp();
            const float *vh = vt + (a.v_per_head ? hh * a.dh : 0);
            for (int c = lane; c < a.dh; c += 32) {
                float o = acc[hh * a.dh + c] * corr;
                for (int j = 0; j < MHE__CU_BK; j++)
                    o += pb[j] * vh[j * a.vw + c];
                acc[hh * a.dh + c] = o;
            }
            float l_old = lst[hh], k_old = kst[hh];
            __syncwarp(); /* everyone has read pb, mst, lst, kst */
            if (lane == 0) {
                mst[hh] = m_new;
                lst[hh] = l_old * corr + mass;
                kst[hh] = k_old * corr + kept;
            }
            __syncwarp();
        }
    }
    if (!live)
        return; /* no barrier follows */
    for (int hh = 0; hh < G; hh++) {
        int h = g * G + hh;
        float l = lst[hh], inv = l > 0.0f ? 1.0f / l : 0.0f;
        float *o = out + ((size_t)b * a.Tq + t) * a.os + (size_t)h * a.dh;
        for (int c = lane; c < a.dh; c += 32) {
            float x = acc[hh * a.dh + c] * inv;
            if (l > 0.0f && a.v_mul)
                x *= a.v_mul[(size_t)h * a.dh + c];
            if (l > 0.0f && a.v_add) /* e^V weighted by the kept mass (all of it without dropout) */
                x += a.v_add[(size_t)h * a.dh + c] * (drop > 0.0f ? kst[hh] * inv : 1.0f);
            o[c] = x;
        }
        if (lane == 0) /* Taylor: the normaliser itself (0 for a row that sees no key, as the CPU) */
            lse[((size_t)b * a.n + h) * a.Tq + t] = TAY ? l : l > 0.0f ? mst[hh] + logf(l) : -INFINITY;
    }
}

/* D[b, h, t] = dO_h . (O_h - v_add_h): the row term of the softmax backward.
   With attention dropout the e^V term is dropped with its weights, so
   D = dO_h . O_h and A = D + B n Tq holds dO_h . v_add_h, the term each kept
   weight adds to dP (mhe__bwd_row's add) */
__global__ __launch_bounds__(128) void mhe__cu_attn_rowdot(mhe__cu_att a, float *D, const float *dout, const float *out) {
    int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = (int)threadIdx.x % 32;
    if (i >= (int64_t)a.B * a.n * a.Tq)
        return;
    int t = (int)(i % a.Tq), h = (int)(i / a.Tq % a.n), b = (int)(i / ((int64_t)a.Tq * a.n));
    const float *o = out + ((size_t)b * a.Tq + t) * a.os + (size_t)h * a.dh,
                *g = dout + ((size_t)b * a.Tq + t) * a.os + (size_t)h * a.dh;
    float s = 0.0f, e = 0.0f;
    for (int c = lane; c < a.dh; c += 32) {
        float ev = a.v_add ? a.v_add[(size_t)h * a.dh + c] : 0.0f;
        s += g[c] * (o[c] - (a.drop > 0.0f ? 0.0f : ev));
        e += g[c] * ev;
    }
    s = mhe__cu_warp_sum(s);
    e = mhe__cu_warp_sum(e);
    if (lane == 0)
        D[i] = s;
    if (lane == 0 && a.drop > 0.0f)
        D[i + (int64_t)a.B * a.n * a.Tq] = a.v_add ? e : 0.0f;
}

/* Backward for the queries (Dao et al. 2022, Algorithm 4, the dQ half): per
   row and head, P = exp(S - lse), dP = dO~ V^T with dO~ = dO * v_mul,
   dS = P (dP - D); dQ_h = scale dS K. The map gradients of the query side
   and of v_mul / v_add are sums over all rows: atomics. */
static size_t mhe__cu_dq_smem(const mhe__cu_att *a, int W) {
    size_t G = (size_t)a->group;
    size_t per_warp = 2 * G * a->dk + 2 * G * a->dh + MHE__CU_BK + 4 * G;
    return (size_t)MHE__CU_BK * (a->dk + 1) + (size_t)MHE__CU_BK * a->vw + (size_t)MHE__CU_BK * G + W * per_warp;
}

template <int TAY>
__global__ __launch_bounds__(128, 1) void mhe__cu_attn_dq_k(mhe__cu_att a, float *dq, float *dq_mul, float *dq_add,
                                                         float *dv_mul, float *dv_add, const float *dout,
                                                         const float *lse, const float *D, const float *q,
                                                         const float *k, const float *v) {
    MHE__CU_DYN_SHARED(float, sm);
    const float drop = TAY ? 0.0f : a.drop; /* Taylor has no attention dropout: none compiled in */
    int W = (int)blockDim.x / 32, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int b = (int)blockIdx.z, g = (int)blockIdx.y, G = a.group, t = (int)blockIdx.x * W + warp;
    int live = t < a.Tq, kend_blk, kend;
    float *kt = sm, *vt = kt + MHE__CU_BK * (a.dk + 1), *kbt = vt + MHE__CU_BK * a.vw;
    float *wb = kbt + MHE__CU_BK * G + (size_t)warp * (2 * G * a.dk + 2 * G * a.dh + MHE__CU_BK + 4 * G);
    float *qb = wb, *dqa = qb + G * a.dk, *gb = dqa + G * a.dk, *ou = gb + G * a.dh, *pb = ou + G * a.dh;
    float *lb = pb + MHE__CU_BK, *Db = lb + G, *Ab = Db + G, *kb = Ab + G; /* dropout: dO.e^V, kept mass */
    int tl = (int)blockIdx.x * W + W - 1 < a.Tq - 1 ? (int)blockIdx.x * W + W - 1 : a.Tq - 1;
    kend_blk = mhe__cu_visible(a, b, tl);
    kend = live ? mhe__cu_visible(a, b, t) : 0;
    if (live) {
        for (int hh = 0; hh < G; hh++) {
            int h = g * G + hh;
            const float *qr = q + ((size_t)b * a.Tq + t) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
            const float *go = dout + ((size_t)b * a.Tq + t) * a.os + (size_t)h * a.dh;
            for (int c = lane; c < a.dk; c += 32) {
                qb[hh * a.dk + c] = mhe__cu_qmap(a, qr, h, c);
                dqa[hh * a.dk + c] = 0.0f;
            }
            for (int c = lane; c < a.dh; c += 32) {
                gb[hh * a.dh + c] = go[c] * (a.v_mul ? a.v_mul[(size_t)h * a.dh + c] : 1.0f);
                ou[hh * a.dh + c] = 0.0f;
            }
            if (lane == 0) {
                lb[hh] = lse[((size_t)b * a.n + h) * a.Tq + t];
                Db[hh] = D[((size_t)b * a.n + h) * a.Tq + t];
                Ab[hh] = drop > 0.0f ? D[((size_t)b * a.n + h) * a.Tq + t + (size_t)a.B * a.n * a.Tq] : 0.0f;
                kb[hh] = 0.0f;
            }
        }
    }
    __syncwarp();
    for (int j0 = 0; j0 < kend_blk; j0 += MHE__CU_BK) {
        __syncthreads();
        MHE__CU_SIMT_LOAD_KV(a, k, v, kt, vt, kbt, b, g, G, j0);
        __syncthreads();
        if (!live || j0 >= kend)
            continue;
        int vis = j0 + lane < kend;
        for (int hh = 0; hh < G; hh++) {
            const float *vh = vt + (a.v_per_head ? hh * a.dh : 0);
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.dk; c++)
                s += qb[hh * a.dk + c] * kt[lane * (a.dk + 1) + c];
            for (int c = 0; c < a.dh; c++)
                dp += gb[hh * a.dh + c] * vh[lane * a.vw + c];
            s = a.scale * (s + (a.k_bias ? kbt[lane * G + hh] : 0.0f));
            float p, ds;
            if (TAY) { /* p = w / Z: dS = (dP - D) (1 + s) / Z (mhe__taylor_ref_bwd) */
                float z = vis ? lb[hh] : 1.0f;
                p = vis ? (1.0f + s + 0.5f * s * s) / z : 0.0f;
                ds = vis ? (dp - Db[hh]) * (1.0f + s) / z : 0.0f;
            } else { /* dropout: dS = P ((dP + A) mask - D), P becomes the kept weights (mhe__bwd_row) */
                float mk = drop > 0.0f && vis ? mhe__cu_att_keep(a, b, g * G + hh, t, j0 + lane) : 1.0f;
                p = vis ? expf(s - lb[hh]) : 0.0f;
                ds = p * ((dp + Ab[hh]) * mk - Db[hh]);
                p *= mk;
            }
            if (drop > 0.0f) {
                float ksum = mhe__cu_warp_sum(p);
                __syncwarp();
                if (lane == 0)
                    kb[hh] += ksum;
            }
            pb[lane] = ds;
            __syncwarp();
            for (int c = lane; c < a.dk; c += 32) {
                float x = 0.0f;
                for (int j = 0; j < MHE__CU_BK; j++)
                    x += pb[j] * kt[j * (a.dk + 1) + c];
                dqa[hh * a.dk + c] += x;
            }
            __syncwarp();
            if (a.v_mul) { /* the unmapped output, for d v_mul */
                pb[lane] = p;
                __syncwarp();
                for (int c = lane; c < a.dh; c += 32) {
                    float x = 0.0f;
                    for (int j = 0; j < MHE__CU_BK; j++)
                        x += pb[j] * vh[j * a.vw + c];
                    ou[hh * a.dh + c] += x;
                }
                __syncwarp();
            }
        }
    }
    if (!live)
        return;
    for (int hh = 0; hh < G; hh++) {
        int h = g * G + hh;
        const float *qr = q + ((size_t)b * a.Tq + t) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
        float *dqr = dq + ((size_t)b * a.Tq + t) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
        const float *go = dout + ((size_t)b * a.Tq + t) * a.os + (size_t)h * a.dh;
        for (int c = lane; c < a.dk; c += 32) {
            float gq = a.scale * dqa[hh * a.dk + c]; /* d loss / d mapped query */
            float m = a.q_mul ? a.q_mul[(size_t)h * a.dk + c] : 1.0f;
            if (a.q_shared) /* heads add into the one seed query: several warps of a block share this row */
                atomicAdd(dqr + c, gq * m);
            else
                dqr[c] += gq * m;
            if (dq_mul)
                atomicAdd(dq_mul + (size_t)h * a.dk + c, gq * qr[c]);
            if (dq_add)
                atomicAdd(dq_add + (size_t)h * a.dk + c, gq);
        }
        for (int c = lane; c < a.dh; c += 32) {
            if (dv_mul && kend > 0)
                atomicAdd(dv_mul + (size_t)h * a.dh + c, go[c] * ou[hh * a.dh + c]);
            if (dv_add && kend > 0)
                atomicAdd(dv_add + (size_t)h * a.dh + c, go[c] * (drop > 0.0f ? kb[hh] : 1.0f));
        }
    }
}

/* Backward for the keys and values (Algorithm 4, the dK dV half): a warp
   owns one key of one K/V head and loops over every query and head that
   read it, so dK, dV and the key-bias gradient are written by one warp
   each (disjoint, no atomics). The query-side map is folded into the key:
   (q * m_h + a_h) . k = q . (k * m_h) + a_h . k. */
#define MHE__CU_BT 32   /* queries per shared tile of the key-side backward */

static size_t mhe__cu_dkv_smem(const mhe__cu_att *a, int W) {
    size_t G = (size_t)a->group;
    size_t per_warp = (size_t)a->dk + a->dh + 2 * MHE__CU_BT + a->dk + (a->v_per_head ? G : 1) * a->dh + 2;
    return (size_t)MHE__CU_BT * (a->dk + 1) + (size_t)MHE__CU_BT * (a->dh + 1) + 2 * MHE__CU_BT + W * per_warp;
}

template <int TAY>
__global__ __launch_bounds__(128, 1) void mhe__cu_attn_dkv_k(mhe__cu_att a, float *dk, float *dv, float *dk_bias,
                                                          const float *dout, const float *lse, const float *D,
                                                          const float *q, const float *k, const float *v) {
    MHE__CU_DYN_SHARED(float, sm);
    const float drop = TAY ? 0.0f : a.drop; /* Taylor has no attention dropout: none compiled in */
    int W = (int)blockDim.x / 32, warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    int b = (int)blockIdx.z, g = (int)blockIdx.y, G = a.group, j = (int)blockIdx.x * W + warp;
    int live = j < a.Tk && !(a.kv_len && j >= a.kv_len[b]);
    float *qt = sm, *gt = qt + MHE__CU_BT * (a.dk + 1), *lt = gt + MHE__CU_BT * (a.dh + 1), *Dt = lt + MHE__CU_BT;
    size_t per_warp = (size_t)a.dk + a.dh + 2 * MHE__CU_BT + a.dk + (a.v_per_head ? G : 1) * a.dh + 2;
    float *wb = Dt + MHE__CU_BT + (size_t)warp * per_warp;
    float *kh = wb, *vh = kh + a.dk, *pb = vh + a.dh, *sb = pb + MHE__CU_BT, *dka = sb + MHE__CU_BT;
    float *dva = dka + a.dk, *cst = dva + (a.v_per_head ? G : 1) * a.dh;
    const float *kr = k + ((size_t)b * a.Tk + (live ? j : 0)) * a.ks + (size_t)g * a.dk;
    /* the first query that sees the block's first key (causal) */
    int j_first = (int)blockIdx.x * W, t_start = a.causal ? j_first - a.q_off : 0;
    if (t_start < 0)
        t_start = 0;
    t_start -= t_start % MHE__CU_BT;
    for (int c = lane; c < a.dk; c += 32)
        dka[c] = 0.0f;
    for (int c = lane; c < (a.v_per_head ? G : 1) * a.dh; c += 32)
        dva[c] = 0.0f;
    for (int t0 = t_start; t0 < a.Tq; t0 += MHE__CU_BT) {
        __syncthreads();
        for (int e = (int)threadIdx.x; e < MHE__CU_BT * a.dk; e += (int)blockDim.x) {
            int r = e / a.dk, c = e % a.dk;
            qt[r * (a.dk + 1) + c] = t0 + r < a.Tq ? q[((size_t)b * a.Tq + t0 + r) * a.qs + (a.q_shared ? 0 : (size_t)g * G * a.dk) + c] : 0.0f;
        }
        for (int hh = 0; hh < G; hh++) {
            int h = g * G + hh;
            if (hh > 0) /* the query tile of head hh (non-shared queries differ per head) */
                __syncthreads();
            if (hh > 0 && !a.q_shared)
                for (int e = (int)threadIdx.x; e < MHE__CU_BT * a.dk; e += (int)blockDim.x) {
                    int r = e / a.dk, c = e % a.dk;
                    qt[r * (a.dk + 1) + c] =
                        t0 + r < a.Tq ? q[((size_t)b * a.Tq + t0 + r) * a.qs + (size_t)h * a.dk + c] : 0.0f;
                }
            for (int e = (int)threadIdx.x; e < MHE__CU_BT * a.dh; e += (int)blockDim.x) {
                int r = e / a.dh, c = e % a.dh;
                gt[r * (a.dh + 1) + c] = t0 + r < a.Tq ? dout[((size_t)b * a.Tq + t0 + r) * a.os + (size_t)h * a.dh + c] *
                                                            (a.v_mul ? a.v_mul[(size_t)h * a.dh + c] : 1.0f)
                                                      : 0.0f;
            }
            for (int e = (int)threadIdx.x; e < MHE__CU_BT; e += (int)blockDim.x) {
                lt[e] = t0 + e < a.Tq ? lse[((size_t)b * a.n + h) * a.Tq + t0 + e] : 0.0f;
                Dt[e] = t0 + e < a.Tq ? D[((size_t)b * a.n + h) * a.Tq + t0 + e] : 0.0f;
            }
            __syncthreads();
            if (!live)
                continue;
            /* this head's view of the key: k * q_mul_h, plus the row-independent a_h . k and bias */
            float ca = 0.0f;
            for (int c = lane; c < a.dk; c += 32) {
                kh[c] = kr[c] * (a.q_mul ? a.q_mul[(size_t)h * a.dk + c] : 1.0f);
                if (a.q_add)
                    ca += a.q_add[(size_t)h * a.dk + c] * kr[c];
            }
            ca = mhe__cu_warp_sum(ca);
            if (a.k_bias)
                ca += a.k_bias[((size_t)b * a.Tk + j) * a.kbs + h];
            size_t vcol = a.v_per_head ? (size_t)g * a.vw + (size_t)hh * a.dh : (size_t)g * a.dh;
            for (int c = lane; c < a.dh; c += 32) /* dropout: dP reads v + e^V (mhe__bwd_row's add), dV does not */
                vh[c] = v[((size_t)b * a.Tk + j) * a.vs + vcol + c] +
                        (drop > 0.0f && a.v_add ? a.v_add[(size_t)h * a.dh + c] : 0.0f);
            __syncwarp();
            int t = t0 + lane, vis = t < a.Tq && j < mhe__cu_visible(a, b, t);
            float s = 0.0f, dp = 0.0f;
            for (int c = 0; c < a.dk; c++)
                s += qt[lane * (a.dk + 1) + c] * kh[c];
            for (int c = 0; c < a.dh; c++)
                dp += gt[lane * (a.dh + 1) + c] * vh[c];
            float sc = a.scale * (s + ca), p, ds;
            if (TAY) {
                float z = vis ? lt[lane] : 1.0f;
                p = vis ? (1.0f + sc + 0.5f * sc * sc) / z : 0.0f;
                ds = vis ? (dp - Dt[lane]) * (1.0f + sc) / z : 0.0f;
            } else {
                float mk = drop > 0.0f && vis ? mhe__cu_att_keep(a, b, h, t, j) : 1.0f;
                p = vis ? expf(sc - lt[lane]) : 0.0f;
                ds = p * (dp * mk - Dt[lane]);
                p *= mk; /* dV reads the kept weights */
            }
            float dsum = mhe__cu_warp_sum(ds);
            pb[lane] = p;
            sb[lane] = ds;
            __syncwarp();
            float *dvh = dva + (a.v_per_head ? hh * a.dh : 0);
            for (int c = lane; c < a.dh; c += 32) {
                float x = 0.0f;
                for (int r = 0; r < MHE__CU_BT; r++)
                    x += pb[r] * gt[r * (a.dh + 1) + c];
                dvh[c] += x;
            }
            for (int c = lane; c < a.dk; c += 32) { /* d k = scale sum_t dS (q_t * m_h + a_h) */
                float x = 0.0f, m = a.q_mul ? a.q_mul[(size_t)h * a.dk + c] : 1.0f;
                for (int r = 0; r < MHE__CU_BT; r++)
                    x += sb[r] * qt[r * (a.dk + 1) + c];
                dka[c] += a.scale * (x * m + (a.q_add ? dsum * a.q_add[(size_t)h * a.dk + c] : 0.0f));
            }
            if (dk_bias && lane == 0)
                cst[0] = dsum; /* summed below over the query tiles */
            __syncwarp();
            if (dk_bias && lane == 0)
                dk_bias[((size_t)b * a.Tk + j) * a.kbs + h] += a.scale * cst[0];
            __syncwarp();
        }
    }
    if (!live)
        return;
    float *dkr = dk + ((size_t)b * a.Tk + j) * a.ks + (size_t)g * a.dk;
    for (int c = lane; c < a.dk; c += 32)
        dkr[c] += dka[c];
    for (int hh = 0; hh < (a.v_per_head ? G : 1); hh++) {
        size_t vcol = a.v_per_head ? (size_t)g * a.vw + (size_t)hh * a.dh : (size_t)g * a.dh;
        float *dvr = dv + ((size_t)b * a.Tk + j) * a.vs + vcol;
        for (int c = lane; c < a.dh; c += 32)
            dvr[c] += dva[hh * a.dh + c];
    }
}

/* The tiled core (Dao 2023, FlashAttention-2, Algorithms 1 and 2, in
   float32 on the SIMT units): a block of 256 threads owns 64 query rows
   (forward) or 64 keys (backward) of one head and shares every tile of 64
   rows among them. Each thread holds a 4 x 4 piece of every 64 x 64
   product in registers (rows ty + 16 i, columns tx + 16 j), so one
   shared-memory load feeds four multiply-adds where the warp-per-row core
   above needs two loads for one. Tiles are stored [row][65]: the odd
   stride puts the 16 rows a half-warp reads in 16 banks. It runs softmax
   attention with MHE's maps (q * q_mul_h + q_add_h applied as the query
   tile is loaded, v_mul / v_add on the output), MHE-ADD's key-bias table,
   GQA / MQA and one seed query (q_shared), collab on the tensor cores
   (query/key width d_qk unlike d_h, V per head, its content bias as the
   key-bias table), causal,
   padded, q_offset, for d_h and d_qk <= 64 and at least
   MHE__CU_FL_MIN_ROWS queries, without attention dropout;
   mhe__cu_flash_fits says which, the warp-per-row core runs the rest
   (Taylor, dropout, decoding, wide heads). */
#define MHE__CU_FL 64          /* rows (queries or keys) per tile, and the widest head */
#define MHE__CU_FLS 65         /* a tile row's stride in shared memory */
#define MHE__CU_FL_MIN_ROWS 16 /* fewer queries (decoding) leave most of a 64-row block idle */

static int mhe__cu_flash_off;    /* tests: 1 sends every call to the warp-per-row core */
static long mhe__cu_flash_calls; /* tests: launches of the tiled core, so they can see it ran */

/* collab (V per head, d_qk unlike d_h) takes the tiled core on the tensor cores only: in float32
   its extra columns would push the SIMT backward past the 128 registers that keep two blocks on
   an SM */
static int mhe__cu_flash_fits(const mhe__cu_att *a, int taylor, int precision) {
    int collab = a->v_per_head || a->dk != a->dh;
    return !mhe__cu_flash_off && !taylor && a->drop == 0.0f && a->dk <= MHE__CU_FL && a->dh <= MHE__CU_FL &&
           a->Tq >= MHE__CU_FL_MIN_ROWS && (!collab || precision != MHE_CUDA_FP32);
}

/* the first V column of head h: its K/V head's, or (collab: V per head) its own slice of it */
static __device__ __forceinline__ int64_t mhe__cu_fl_vcol(const mhe__cu_att &a, int h) {
    return a.v_per_head ? (int64_t)(h / a.group) * a.vw + (int64_t)(h % a.group) * a.dh : (int64_t)(h / a.group) * a.dh;
}

/* x rounded as the tensor cores of a precision read it (RND 0: float32, MHE_CUDA_TF32, MHE_CUDA_BF16),
   kept as a float whose dropped bits are zero */
template <int RND>
static __device__ __forceinline__ float mhe__cu_round(float x) {
    if (RND == MHE_CUDA_TF32)
        return __uint_as_float(mhe__cu_tf32(x));
    if (RND == MHE_CUDA_BF16)
        return __uint_as_float(mhe__cu_bf16x2(x, 0.0f) & 0xffff0000u);
    return x;
}

/* tile[r][c] (rows LD floats apart) = src row r0 + r, columns col0 .. col0 + width - 1 (zeros past
   rows or width), rounded as RND says */
template <int LD = MHE__CU_FLS, int RND = 0>
static __device__ __forceinline__ void mhe__cu_fl_load(float *tile, const float *src, int64_t row0, int rows,
                                                       int64_t stride, int64_t col0, int width) {
    for (int e = (int)threadIdx.x; e < MHE__CU_FL * MHE__CU_FL; e += (int)blockDim.x) {
        int r = e / MHE__CU_FL, c = e % MHE__CU_FL;
        tile[r * LD + c] = r < rows && c < width ? mhe__cu_round<RND>(src[(row0 + r) * stride + col0 + c]) : 0.0f;
    }
}

/* head h's queries of rows t0 .. t0 + rows - 1, mapped (eq. 5 of the MHE paper) */
template <int LD = MHE__CU_FLS, int RND = 0>
static __device__ __forceinline__ void mhe__cu_fl_load_q(const mhe__cu_att &a, float *tile, const float *q, int b,
                                                         int t0, int rows, int h) {
    for (int e = (int)threadIdx.x; e < MHE__CU_FL * MHE__CU_FL; e += (int)blockDim.x) {
        int r = e / MHE__CU_FL, c = e % MHE__CU_FL;
        tile[r * LD + c] =
            r < rows && c < a.dk
                ? mhe__cu_round<RND>(mhe__cu_qmap(
                      a, q + ((size_t)b * a.Tq + t0 + r) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk), h, c))
                : 0.0f;
    }
}

/* max (or sum) over the 16 threads that share a row (one half-warp) */
static __device__ __forceinline__ float mhe__cu_row16_max(float x) {
    for (int o = 8; o; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
static __device__ __forceinline__ float mhe__cu_row16_sum(float x) {
    for (int o = 8; o; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* acc[i][j] += sum over k < n of A[row ty + 16 i][k] B[k][col tx + 16 j], A and B tiles in shared
   memory read through (row stride, k stride) pairs: the one product every step below is */
static __device__ __forceinline__ void mhe__cu_fl_mm(float acc[4][4], const float *A, int a_row, int a_k,
                                                     const float *B, int b_k, int b_col, int n, int tx, int ty) {
#pragma unroll 4
    for (int k = 0; k < n; k++) {
        float x[4], y[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            x[i] = A[(ty + 16 * i) * a_row + k * a_k];
            y[i] = B[k * b_k + (tx + 16 * i) * b_col];
        }
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[i][j] += x[i] * y[j];
    }
}

/* a per-column sum over this block's rows (v[j] for column tx + 16 j) added to dst[col]: over
   the two rows a warp holds by shuffle, then one atomic per warp and column */
static __device__ __forceinline__ void mhe__cu_fl_colsum_add(float *dst, const float v[4], int width, int tx) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float x = v[j] + __shfl_xor_sync(0xffffffffu, v[j], 16);
        if ((threadIdx.x & 16) == 0 && tx + 16 * j < width)
            atomicAdd(dst + tx + 16 * j, x);
    }
}

/* The backward's products on the tensor cores too (TC: MHE_CUDA_TF32 or _BF16; 0: float32 on
   the SIMT units, mhe__cu_fl_mm). With TC, a block's 8 warps split each 64 x 64 product into
   16 x 32 pieces (warp w: rows 16 (w % 4), columns 32 (w / 4)), a thread's 16 elements in mma's C
   fragments: acc[i][e] at row g + 8 (e / 2), column 8 i + 2 t + e % 2 of its piece. The operands
   are rounded as each fragment is read (P and dS are made in the step). Every tile is zero past
   its rows and columns, so k runs to n rounded up to the instruction's depth. mhe__cu_fl_row and
   _col give an element's place in either layout; _slot numbers a thread's columns (SIMT 4, TC 8)
   for the per-column sums of mhe__cu_fl_colsum. */
template <int TC>
static __device__ __forceinline__ int mhe__cu_fl_row(int i, int e) {
    int tid = (int)threadIdx.x;
    return TC ? 16 * (tid / 32 % 4) + tid % 32 / 4 + 8 * (e / 2) : tid / 16 + 16 * i;
}
template <int TC>
static __device__ __forceinline__ int mhe__cu_fl_col(int i, int e) {
    int tid = (int)threadIdx.x;
    return TC ? 32 * (tid / 128) + 8 * i + 2 * (tid % 4) + e % 2 : tid % 16 + 16 * e;
}
template <int TC>
static __device__ __forceinline__ int mhe__cu_fl_slot(int i, int e) { return TC ? 2 * i + e % 2 : e; }
/* the thread's rows likewise: SIMT 4 (i), TC 2 (e / 2); mhe__cu_fl_row<TC>(rs, 2 rs) is row slot rs's */
template <int TC>
static __device__ __forceinline__ int mhe__cu_fl_rslot(int i, int e) { return TC ? e / 2 : i; }

template <int TC>
static __device__ __forceinline__ void mhe__cu_fl_prod(float acc[4][4], const float *A, int a_row, int a_k,
                                                       const float *B, int b_k, int b_col, int n) {
    int tid = (int)threadIdx.x;
    if (!TC) {
        mhe__cu_fl_mm(acc, A, a_row, a_k, B, b_k, b_col, n, tid % 16, tid / 16);
        return;
    }
    enum { BF16 = TC == MHE_CUDA_BF16, KSTEP = BF16 ? 16 : 8 }; /* (TC 0 returned above) */
    int lane = tid % 32, g = lane / 4, t = lane % 4, r0 = 16 * (tid / 32 % 4) + g, c0 = 32 * (tid / 128) + g;
    for (int k = 0; k < n; k += KSTEP) {
        const float *a0 = A + r0 * a_row + k * a_k, *a8 = a0 + 8 * a_row;
        unsigned fa[4];
        if (BF16) {
            fa[0] = mhe__cu_bf16x2(a0[(2 * t + 1) * a_k], a0[2 * t * a_k]);
            fa[1] = mhe__cu_bf16x2(a8[(2 * t + 1) * a_k], a8[2 * t * a_k]);
            fa[2] = mhe__cu_bf16x2(a0[(2 * t + 9) * a_k], a0[(2 * t + 8) * a_k]);
            fa[3] = mhe__cu_bf16x2(a8[(2 * t + 9) * a_k], a8[(2 * t + 8) * a_k]);
        } else {
            fa[0] = mhe__cu_tf32(a0[t * a_k]);
            fa[1] = mhe__cu_tf32(a8[t * a_k]);
            fa[2] = mhe__cu_tf32(a0[(t + 4) * a_k]);
            fa[3] = mhe__cu_tf32(a8[(t + 4) * a_k]);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float *bc = B + k * b_k + (c0 + 8 * i) * b_col;
            unsigned fb[2];
            if (BF16) {
                fb[0] = mhe__cu_bf16x2(bc[(2 * t + 1) * b_k], bc[2 * t * b_k]);
                fb[1] = mhe__cu_bf16x2(bc[(2 * t + 9) * b_k], bc[(2 * t + 8) * b_k]);
            } else {
                fb[0] = mhe__cu_tf32(bc[t * b_k]);
                fb[1] = mhe__cu_tf32(bc[(t + 4) * b_k]);
            }
            mhe__cu_mma<BF16>(acc[i], fa, fb);
        }
    }
}

/* the per-column sums of a thread's slots (v[slot]) over the block's rows, added to dst */
template <int TC>
static __device__ __forceinline__ void mhe__cu_fl_colsum(float *dst, const float v[8], int width) {
    if (!TC) {
        mhe__cu_fl_colsum_add(dst, v, width, (int)threadIdx.x % 16);
    } else {
#pragma unroll
        for (int sl = 0; sl < 8; sl++) { /* the 8 lanes of a column (g), then one atomic per warp */
            float x = v[sl];
            x += __shfl_xor_sync(0xffffffffu, x, 4);
            x += __shfl_xor_sync(0xffffffffu, x, 8);
            x += __shfl_xor_sync(0xffffffffu, x, 16);
            int c = mhe__cu_fl_col<TC>(sl / 2, sl % 2);
            if (threadIdx.x % 32 < 4 && c < width)
                atomicAdd(dst + c, x);
        }
    }
}

/* the key-bias row of a key tile of the tiled cores (collab's content bias, MHE-ADD's
   e^K term; 0 without one and past the tile's keys): a macro, as MHE__CU_SIMT_LOAD_KV */
#define MHE__CU_FL_LOAD_KB(a, kbt, b, j0, keys, h)                                                       \
    for (int e = (int)threadIdx.x; e < MHE__CU_FL; e += (int)blockDim.x)                               \
    (kbt)[e] = (a).k_bias && e < (keys) ? (a).k_bias[((size_t)(b) * (a).Tk + (j0) + e) * (a).kbs + (h)] : 0.0f

/* Forward: block (64 query rows blockIdx.x, head blockIdx.y, sequence blockIdx.z) */
__global__ __launch_bounds__(256) void mhe__cu_flash_fwd(mhe__cu_att a, float *out, float *lse, const float *q,
                                                         const float *k, const float *v) {
    MHE__CU_DYN_SHARED(float, sm);
    const int T2 = MHE__CU_FL * MHE__CU_FLS;
    float *qt = sm, *kt = qt + T2, *vt = kt + T2, *pt = vt + T2, *kbt = pt + T2;
    int tx = (int)threadIdx.x % 16, ty = (int)threadIdx.x / 16;
    int b = (int)blockIdx.z, h = (int)blockIdx.y, g = h / a.group, t0 = (int)blockIdx.x * MHE__CU_FL;
    int rows = a.Tq - t0 < MHE__CU_FL ? a.Tq - t0 : MHE__CU_FL;
    int vis[4];
    float m[4], l[4], o[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty + 16 * i;
        vis[i] = r < rows ? mhe__cu_visible(a, b, t0 + r) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++)
            o[i][j] = 0.0f;
    }
    int kend = mhe__cu_visible(a, b, t0 + rows - 1); /* the last row sees the most keys */
    mhe__cu_fl_load_q(a, qt, q, b, t0, rows, h);
    for (int j0 = 0; j0 < kend; j0 += MHE__CU_FL) {
        int keys = kend - j0 < MHE__CU_FL ? kend - j0 : MHE__CU_FL;
        __syncthreads(); /* every thread is done with the previous K, V and P tiles */
        mhe__cu_fl_load(kt, k, (int64_t)b * a.Tk + j0, keys, a.ks, (int64_t)g * a.dk, a.dk);
        mhe__cu_fl_load(vt, v, (int64_t)b * a.Tk + j0, keys, a.vs, (int64_t)g * a.dh, a.dh);
        MHE__CU_FL_LOAD_KB(a, kbt, b, j0, keys, h);
        __syncthreads();
        float s[4][4] = {{0.0f}};
        mhe__cu_fl_mm(s, qt, MHE__CU_FLS, 1, kt, 1, MHE__CU_FLS, a.dk, tx, ty); /* S = Q K^T */
#pragma unroll
        for (int i = 0; i < 4; i++) { /* the online softmax of row i (Algorithm 1, lines 8-10) */
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int kk = tx + 16 * j;
                s[i][j] = j0 + kk < vis[i] ? a.scale * (s[i][j] + kbt[kk]) : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            float m_new = fmaxf(m[i], mhe__cu_row16_max(mx)), sum = 0.0f;
            float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = s[i][j] == -INFINITY ? 0.0f : expf(s[i][j] - m_new);
                pt[(ty + 16 * i) * MHE__CU_FLS + tx + 16 * j] = p;
                sum += p;
            }
            l[i] = l[i] * corr + mhe__cu_row16_sum(sum);
            m[i] = m_new;
#pragma unroll
            for (int j = 0; j < 4; j++)
                o[i][j] *= corr;
        }
        __syncthreads();
        mhe__cu_fl_mm(o, pt, MHE__CU_FLS, 1, vt, MHE__CU_FLS, 1, keys, tx, ty); /* O += P V */
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty + 16 * i;
        if (r >= rows)
            continue;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *orow = out + ((size_t)b * a.Tq + t0 + r) * a.os + (size_t)h * a.dh;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = tx + 16 * j;
            if (c >= a.dh)
                continue;
            float x = o[i][j] * inv;
            if (l[i] > 0.0f && a.v_mul)
                x *= a.v_mul[(size_t)h * a.dh + c];
            if (l[i] > 0.0f && a.v_add)
                x += a.v_add[(size_t)h * a.dh + c];
            orow[c] = x;
        }
        if (tx == 0)
            lse[((size_t)b * a.n + h) * a.Tq + t0 + r] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

/* Forward on the tensor cores (TF32, BF16 0, or bf16, 1: the model's precision), FlashAttention-2's
   layout: a block of 4 warps owns 64 query rows, each warp 16 of them, and every K/V tile of 64 keys
   serves all four. S = Q K^T and O += P V are mma.sync (the fragments of C2's GEMM); a warp's
   scores stay in registers as C fragments, so the online softmax runs there (a row's max and sum
   over the 4 lanes that hold it), and P goes from the C fragments of S straight into the A
   fragments of P V: bf16's A (g, 2t | 2t + 1) is two C fragments of S side by side; TF32's
   (g, t), (g, t + 4) is C's (g, 2t), (g, 2t + 1) when the 8 keys of an instruction are taken in
   the order 0, 2, 4, 6, 1, 3, 5, 7, which V's fragment follows (rows 2t and 2t + 1). Q, K, V are
   rounded once, into shared memory (rows 68 floats apart: fragment reads hit 32 banks); P as it
   enters the instruction; the row sums, max and O stay float32. The same rows, masks, maps and
   outputs as mhe__cu_flash_fwd, which float32 runs. */
#define MHE__CU_FLT 68 /* a row's stride in the tensor-core tiles */

static size_t mhe__cu_flash_tc_bytes(void) { return (3 * (size_t)MHE__CU_FL * MHE__CU_FLT + MHE__CU_FL) * sizeof(float); }

template <int BF16>
__global__ __launch_bounds__(128) void mhe__cu_flash_fwd_tc(mhe__cu_att a, float *out, float *lse, const float *q,
                                                             const float *k, const float *v) {
    enum { RND = BF16 ? MHE_CUDA_BF16 : MHE_CUDA_TF32, KSTEP = BF16 ? 16 : 8 };
    MHE__CU_DYN_SHARED(float, sm);
    const int T2 = MHE__CU_FL * MHE__CU_FLT;
    float *qt = sm, *kt = qt + T2, *vt = kt + T2, *kbt = vt + T2;
    int lane = (int)threadIdx.x % 32, w = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
    int b = (int)blockIdx.z, h = (int)blockIdx.y, kvh = h / a.group, t0 = (int)blockIdx.x * MHE__CU_FL;
    int rows = a.Tq - t0 < MHE__CU_FL ? a.Tq - t0 : MHE__CU_FL;
    int r0 = 16 * w + g; /* this lane's rows: r0 (c0, c1) and r0 + 8 (c2, c3) */
    int vis[2] = {r0 < rows ? mhe__cu_visible(a, b, t0 + r0) : 0, r0 + 8 < rows ? mhe__cu_visible(a, b, t0 + r0 + 8) : 0};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[n][e] = 0.0f;
    int kend = mhe__cu_visible(a, b, t0 + rows - 1);
    mhe__cu_fl_load_q<MHE__CU_FLT, RND>(a, qt, q, b, t0, rows, h);
    for (int j0 = 0; j0 < kend; j0 += MHE__CU_FL) {
        int keys = kend - j0 < MHE__CU_FL ? kend - j0 : MHE__CU_FL;
        __syncthreads(); /* every warp is done with the previous K and V */
        mhe__cu_fl_load<MHE__CU_FLT, RND>(kt, k, (int64_t)b * a.Tk + j0, keys, a.ks, (int64_t)kvh * a.dk, a.dk);
        mhe__cu_fl_load<MHE__CU_FLT, RND>(vt, v, (int64_t)b * a.Tk + j0, keys, a.vs, mhe__cu_fl_vcol(a, h), a.dh);
        MHE__CU_FL_LOAD_KB(a, kbt, b, j0, keys, h);
        __syncthreads();
        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[j][e] = 0.0f;
        for (int k0 = 0; k0 < a.dk; k0 += KSTEP) { /* S = Q K^T (Q and K zero past d_k) */
            const float *qa = qt + r0 * MHE__CU_FLT + k0, *qb = qa + 8 * MHE__CU_FLT;
            unsigned fa[4];
            if (BF16) {
                fa[0] = mhe__cu_bf16x2(qa[2 * t + 1], qa[2 * t]);
                fa[1] = mhe__cu_bf16x2(qb[2 * t + 1], qb[2 * t]);
                fa[2] = mhe__cu_bf16x2(qa[2 * t + 9], qa[2 * t + 8]);
                fa[3] = mhe__cu_bf16x2(qb[2 * t + 9], qb[2 * t + 8]);
            } else {
                fa[0] = __float_as_uint(qa[t]);
                fa[1] = __float_as_uint(qb[t]);
                fa[2] = __float_as_uint(qa[t + 4]);
                fa[3] = __float_as_uint(qb[t + 4]);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (8 * j >= keys) /* the same for the whole warp */
                    break;
                const float *kr = kt + (8 * j + g) * MHE__CU_FLT + k0;
                unsigned fb[2];
                if (BF16) {
                    fb[0] = mhe__cu_bf16x2(kr[2 * t + 1], kr[2 * t]);
                    fb[1] = mhe__cu_bf16x2(kr[2 * t + 9], kr[2 * t + 8]);
                } else {
                    fb[0] = __float_as_uint(kr[t]);
                    fb[1] = __float_as_uint(kr[t + 4]);
                }
                mhe__cu_mma<BF16>(s[j], fa, fb);
            }
        }
        /* the online softmax of rows r0 (e = 0, 1) and r0 + 8 (e = 2, 3) (Algorithm 1, lines 8-10) */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = 8 * j + 2 * t + (e & 1);
                s[j][e] = j0 + col < vis[e / 2] ? a.scale * (s[j][e] + kbt[col]) : -INFINITY;
                mx[e / 2] = fmaxf(mx[e / 2], s[j][e]);
            }
        float corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(MHE__CU_FULL, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(MHE__CU_FULL, mx[i], 2));
            float m_new = fmaxf(m[i], mx[i]);
            corr[i] = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
            m[i] = m_new;
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = s[j][e] == -INFINITY ? 0.0f : expf(s[j][e] - m[e / 2]);
                sum[e / 2] += s[j][e];
            }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sum[i] += __shfl_xor_sync(MHE__CU_FULL, sum[i], 1);
            sum[i] += __shfl_xor_sync(MHE__CU_FULL, sum[i], 2);
            l[i] = l[i] * corr[i] + sum[i];
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[n][e] *= corr[e / 2];
        /* O += P V, P from the registers (V zero past the tile's keys) */
#pragma unroll
        for (int j = 0; j < 8; j += KSTEP / 8) {
            if (8 * j >= keys)
                break;
            unsigned fa[4];
            if (BF16) {
                fa[0] = mhe__cu_bf16x2(s[j][1], s[j][0]);
                fa[1] = mhe__cu_bf16x2(s[j][3], s[j][2]);
                fa[2] = mhe__cu_bf16x2(s[j + 1][1], s[j + 1][0]);
                fa[3] = mhe__cu_bf16x2(s[j + 1][3], s[j + 1][2]);
            } else { /* keys in the order 2t, 2t + 1 for the instruction's t, t + 4 */
                fa[0] = mhe__cu_tf32(s[j][0]);
                fa[1] = mhe__cu_tf32(s[j][2]);
                fa[2] = mhe__cu_tf32(s[j][1]);
                fa[3] = mhe__cu_tf32(s[j][3]);
            }
            const float *vr = vt + (8 * j + 2 * t) * MHE__CU_FLT + g;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                if (8 * n >= a.dh)
                    break;
                unsigned fb[2];
                if (BF16) {
                    fb[0] = mhe__cu_bf16x2(vr[MHE__CU_FLT + 8 * n], vr[8 * n]);
                    fb[1] = mhe__cu_bf16x2(vr[9 * MHE__CU_FLT + 8 * n], vr[8 * MHE__CU_FLT + 8 * n]);
                } else {
                    fb[0] = __float_as_uint(vr[8 * n]);
                    fb[1] = __float_as_uint(vr[MHE__CU_FLT + 8 * n]);
                }
                mhe__cu_mma<BF16>(o[n], fa, fb);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = r0 + 8 * i;
        if (r >= rows)
            continue;
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *orow = out + ((size_t)b * a.Tq + t0 + r) * a.os + (size_t)h * a.dh;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = 8 * n + 2 * t + e;
                if (c >= a.dh)
                    continue;
                float x = o[n][2 * i + e] * inv;
                if (l[i] > 0.0f && a.v_mul)
                    x *= a.v_mul[(size_t)h * a.dh + c];
                if (l[i] > 0.0f && a.v_add)
                    x += a.v_add[(size_t)h * a.dh + c];
                orow[c] = x;
            }
        if (t == 0)
            lse[((size_t)b * a.n + h) * a.Tq + t0 + r] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

/* Backward: block (64 keys blockIdx.x, head blockIdx.y, sequence blockIdx.z), over every query
   tile that reads them (Algorithm 2): P = exp(S - lse), dP = dO~ V^T with dO~ = dO * v_mul,
   dS = P (dP - D); dV += P^T dO~ and dK += scale dS^T Q~ (Q~ the mapped queries) stay in
   registers and go out once, by atomics where several heads share the K/V head; dQ~ = scale
   dS K goes out by atomics (the key blocks share the queries), through the query map to the
   seed query and to q_mul / q_add's gradients. MHE-ADD's key bias gets the column sums of
   scale dS; v_mul's gradient needs the unmapped output P V, one more product; v_add's is the
   sum of dO over the rows that see a key, added by the blocks of key 0. */
template <int TC> /* TC: "at least 1 block per SM" lets ptxas past 128 registers (sm_90 stops there and spills); 0: no minimum */
__global__ __launch_bounds__(256, TC ? 1 : 0) void mhe__cu_flash_bwd(mhe__cu_att a, float *dq, float *dk, float *dv,
                                                         float *dq_mul, float *dq_add, float *dv_mul, float *dv_add,
                                                         float *dk_bias, const float *dout, const float *lse,
                                                         const float *D, const float *q, const float *k,
                                                         const float *v) {
    MHE__CU_DYN_SHARED(float, sm);
    const int T2 = MHE__CU_FL * MHE__CU_FLS;
    float *kt = sm, *vt = kt + T2, *qt = vt + T2, *gt = qt + T2, *pt = gt + T2, *st = pt + T2, *lt = st + T2,
          *Dt = lt + MHE__CU_FL, *kbt = Dt + MHE__CU_FL;
#define MHE__CU_FL_ROW(i, e) mhe__cu_fl_row<TC>(i, e)
#define MHE__CU_FL_COL(i, e) mhe__cu_fl_col<TC>(i, e)
#define MHE__CU_FL_SLOT(i, e) mhe__cu_fl_slot<TC>(i, e)
    int b = (int)blockIdx.z, h = (int)blockIdx.y, g = h / a.group, j0 = (int)blockIdx.x * MHE__CU_FL;
    int keys = a.Tk - j0 < MHE__CU_FL ? a.Tk - j0 : MHE__CU_FL;
    if (a.kv_len && a.kv_len[b] - j0 < keys) /* keys past the padding are read by no query */
        keys = a.kv_len[b] - j0;
    if (keys <= 0)
        return; /* the whole block: no barrier is reached */
    float dka[4][4] = {{0.0f}}, dva[4][4] = {{0.0f}}, kb_sum = 0.0f;
    mhe__cu_fl_load(kt, k, (int64_t)b * a.Tk + j0, keys, a.ks, (int64_t)g * a.dk, a.dk);
    mhe__cu_fl_load(vt, v, (int64_t)b * a.Tk + j0, keys, a.vs, TC ? mhe__cu_fl_vcol(a, h) : (int64_t)g * a.dh, a.dh);
    MHE__CU_FL_LOAD_KB(a, kbt, b, j0, keys, h);
    int t_start = a.causal ? j0 - a.q_off : 0; /* the first query that sees key j0 */
    if (t_start < 0)
        t_start = 0;
    for (int t0 = t_start; t0 < a.Tq; t0 += MHE__CU_FL) {
        int rows = a.Tq - t0 < MHE__CU_FL ? a.Tq - t0 : MHE__CU_FL;
        __syncthreads(); /* the previous query tile is read by every thread */
        mhe__cu_fl_load_q(a, qt, q, b, t0, rows, h);
        for (int e = (int)threadIdx.x; e < MHE__CU_FL * MHE__CU_FL; e += (int)blockDim.x) {
            int r = e / MHE__CU_FL, c = e % MHE__CU_FL;
            gt[r * MHE__CU_FLS + c] = r < rows && c < a.dh ? dout[((size_t)b * a.Tq + t0 + r) * a.os + (size_t)h * a.dh + c] *
                                                                  (a.v_mul ? a.v_mul[(size_t)h * a.dh + c] : 1.0f)
                                                            : 0.0f;
        }
        for (int r = (int)threadIdx.x; r < MHE__CU_FL; r += (int)blockDim.x) {
            lt[r] = r < rows ? lse[((size_t)b * a.n + h) * a.Tq + t0 + r] : 0.0f;
            Dt[r] = r < rows ? D[((size_t)b * a.n + h) * a.Tq + t0 + r] : 0.0f;
        }
        __syncthreads();
        float s[4][4] = {{0.0f}}, dp[4][4] = {{0.0f}};
        int vis[4]; /* per row slot */
#pragma unroll
        for (int rs = 0; rs < (TC ? 2 : 4); rs++) {
            int r = MHE__CU_FL_ROW(rs, 2 * rs);
            vis[rs] = r < rows ? mhe__cu_visible(a, b, t0 + r) : 0;
        }
        mhe__cu_fl_prod<TC>(s, qt, MHE__CU_FLS, 1, kt, 1, MHE__CU_FLS, a.dk);  /* S = Q~ K^T */
        mhe__cu_fl_prod<TC>(dp, gt, MHE__CU_FLS, 1, vt, 1, MHE__CU_FLS, a.dh); /* dP = dO~ V^T */
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int r = MHE__CU_FL_ROW(i, j), kk = MHE__CU_FL_COL(i, j);
                float p = j0 + kk < vis[mhe__cu_fl_rslot<TC>(i, j)] ? expf(a.scale * (s[i][j] + kbt[kk]) - lt[r])
                                                                     : 0.0f;
                pt[r * MHE__CU_FLS + kk] = p;
                st[r * MHE__CU_FLS + kk] = p * (dp[i][j] - Dt[r]);
            }
        }
        __syncthreads();
        /* dV += P^T dO~, dK += dS^T Q~: the rows are this block's keys */
        mhe__cu_fl_prod<TC>(dva, pt, 1, MHE__CU_FLS, gt, MHE__CU_FLS, 1, rows);
        mhe__cu_fl_prod<TC>(dka, st, 1, MHE__CU_FLS, qt, MHE__CU_FLS, 1, rows);
        if (dk_bias && threadIdx.x < (unsigned)MHE__CU_FL) /* column sums of dS */
            for (int r = 0; r < rows; r++)
                kb_sum += st[r * MHE__CU_FLS + threadIdx.x];
        float gq[4][4] = {{0.0f}};
        mhe__cu_fl_prod<TC>(gq, st, MHE__CU_FLS, 1, kt, MHE__CU_FLS, 1, keys); /* dQ~ = dS K, this block's share */
        float pm[8] = {0.0f}, pa[8] = {0.0f};
#pragma unroll
        for (int rs = 0; rs < (TC ? 2 : 4); rs++) { /* row by row: one row pointer at a time */
            int r = MHE__CU_FL_ROW(rs, 2 * rs);
            if (r >= rows)
                continue;
            const float *qr = q + ((size_t)b * a.Tq + t0 + r) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
            float *dqr = dq + ((size_t)b * a.Tq + t0 + r) * a.qs + (a.q_shared ? 0 : (size_t)h * a.dk);
#pragma unroll
            for (int x = 0; x < (TC ? 8 : 4); x++) { /* the row's elements acc[i][j] */
                int i = TC ? x / 2 : rs, j = TC ? 2 * rs + x % 2 : x, c = MHE__CU_FL_COL(i, j);
                if (c >= a.dk)
                    continue;
                float gmq = a.scale * gq[i][j]; /* d loss / d mapped query, this block's share */
                atomicAdd(dqr + c, gmq * (a.q_mul ? a.q_mul[(size_t)h * a.dk + c] : 1.0f));
                pm[MHE__CU_FL_SLOT(i, j)] += dq_mul ? gmq * qr[c] : 0.0f;
                pa[MHE__CU_FL_SLOT(i, j)] += gmq;
            }
        }
        if (dq_mul)
            mhe__cu_fl_colsum<TC>(dq_mul + (size_t)h * a.dk, pm, a.dk);
        if (dq_add)
            mhe__cu_fl_colsum<TC>(dq_add + (size_t)h * a.dk, pa, a.dk);
        if (dv_mul) { /* the unmapped output's share P V, against dO */
            float ou[4][4] = {{0.0f}}, pv[8] = {0.0f};
            mhe__cu_fl_prod<TC>(ou, pt, MHE__CU_FLS, 1, vt, MHE__CU_FLS, 1, keys);
#pragma unroll
            for (int rs = 0; rs < (TC ? 2 : 4); rs++) {
                int r = MHE__CU_FL_ROW(rs, 2 * rs);
                if (r >= rows)
                    continue;
                const float *dor = dout + ((size_t)b * a.Tq + t0 + r) * a.os + (size_t)h * a.dh;
#pragma unroll
                for (int x = 0; x < (TC ? 8 : 4); x++) {
                    int i = TC ? x / 2 : rs, j = TC ? 2 * rs + x % 2 : x, c = MHE__CU_FL_COL(i, j);
                    if (c < a.dh)
                        pv[MHE__CU_FL_SLOT(i, j)] += dor[c] * ou[i][j];
                }
            }
            mhe__cu_fl_colsum<TC>(dv_mul + (size_t)h * a.dh, pv, a.dh);
        }
        if (dv_add && j0 == 0) { /* every row that sees a key sees key 0 */
            float sa[8] = {0.0f};
#pragma unroll
            for (int rs = 0; rs < (TC ? 2 : 4); rs++) {
                if (vis[rs] <= 0)
                    continue;
                const float *dor = dout + ((size_t)b * a.Tq + t0 + MHE__CU_FL_ROW(rs, 2 * rs)) * a.os + (size_t)h * a.dh;
#pragma unroll
                for (int x = 0; x < (TC ? 8 : 4); x++) {
                    int i = TC ? x / 2 : rs, j = TC ? 2 * rs + x % 2 : x, c = MHE__CU_FL_COL(i, j);
                    if (c < a.dh)
                        sa[MHE__CU_FL_SLOT(i, j)] += dor[c];
                }
            }
            mhe__cu_fl_colsum<TC>(dv_add + (size_t)h * a.dh, sa, a.dh);
        }
    }
    if (dk_bias && threadIdx.x < (unsigned)keys)
        dk_bias[((size_t)b * a.Tk + j0 + threadIdx.x) * a.kbs + h] += a.scale * kb_sum;
#pragma unroll
    for (int rs = 0; rs < (TC ? 2 : 4); rs++) {
        int r = MHE__CU_FL_ROW(rs, 2 * rs);
        if (r >= keys)
            continue;
        float *dkr = dk + ((size_t)b * a.Tk + j0 + r) * a.ks + (size_t)g * a.dk,
              *dvr = dv + ((size_t)b * a.Tk + j0 + r) * a.vs + (TC ? mhe__cu_fl_vcol(a, h) : (int64_t)g * a.dh);
#pragma unroll
        for (int x = 0; x < (TC ? 8 : 4); x++) {
            int i = TC ? x / 2 : rs, j = TC ? 2 * rs + x % 2 : x, c = MHE__CU_FL_COL(i, j);
            if (!TC) { /* d_qk = d_h, one V per K/V head (mhe__cu_flash_fits) */
                if (c < a.dh && a.group > 1) { /* the other heads of this K/V head add to the same rows */
                    atomicAdd(dkr + c, a.scale * dka[i][j]);
                    atomicAdd(dvr + c, dva[i][j]);
                } else if (c < a.dh) {
                    dkr[c] += a.scale * dka[i][j];
                    dvr[c] += dva[i][j];
                }
            } else { /* the same, with collab's widths (dV: the head's own slice, no atomics) */
                if (c < a.dk && a.group > 1)
                    atomicAdd(dkr + c, a.scale * dka[i][j]);
                else if (c < a.dk)
                    dkr[c] += a.scale * dka[i][j];
                if (c < a.dh && a.group > 1 && !a.v_per_head)
                    atomicAdd(dvr + c, dva[i][j]);
                else if (c < a.dh)
                    dvr[c] += dva[i][j];
            }
        }
    }
#undef MHE__CU_FL_ROW
#undef MHE__CU_FL_COL
#undef MHE__CU_FL_SLOT
}

static size_t mhe__cu_flash_fwd_bytes(void) {
    return (4 * (size_t)MHE__CU_FL * MHE__CU_FLS + MHE__CU_FL) * sizeof(float);
}
static size_t mhe__cu_flash_bwd_bytes(void) {
    return (6 * (size_t)MHE__CU_FL * MHE__CU_FLS + 3 * MHE__CU_FL) * sizeof(float);
}

/* warps per block that fit the shared memory the kernel needs (0: none) */
static int mhe__cu_att_warps(const mhe__cu_att *a, size_t (*smem)(const mhe__cu_att *, int)) {
    for (int W = 4; W >= 1; W /= 2)
        if (smem(a, W) * sizeof(float) <= 99 * 1024)
            return W;
    return 0;
}

static mhe_status mhe__cu_att_check(const mhe_attn_dims *d, char *err) {
    int dk = d->d_qk > 0 ? d->d_qk : d->d_head;
    if (d->d_head < 1 || d->d_head > MHE_MAX_D_HEAD || dk > MHE_MAX_D_HEAD)
        return mhe__fail(err, MHE_ERR_DEVICE, "head width %d (query/key %d) is outside the device cores' 1..%d", d->d_head,
                         dk, MHE_MAX_D_HEAD);
    if (d->n_kv_heads < 1 || d->n_heads % d->n_kv_heads)
        return mhe__fail(err, MHE_ERR_ARG, "%d query heads cannot share %d K/V heads", d->n_heads, d->n_kv_heads);
    return MHE_OK;
}

/* taylor: the Taylor weights (TAY = 1) in place of softmax; no maps, K/V heads per query head;
   precision (MHE_CUDA_FP32, _TF32, _BF16): the tiled core's products on the tensor cores */
static mhe_status mhe__cu_attn_fwd(const mhe_attn_dims *d, int taylor, int precision, float *out, float *lse,
                                   const float *q, const float *k, const float *v, char *err) {
    mhe_status st = mhe__cu_att_check(d, err);
    if (st != MHE_OK)
        return st;
    mhe__cu_att a = mhe__cu_att_from(d);
    if (taylor) /* the CPU's Taylor cores have no attention dropout */
        a.drop = 0.0f;
    int W = mhe__cu_att_warps(&a, mhe__cu_fwd_smem);
    if (!W)
        return mhe__fail(err, MHE_ERR_DEVICE, "%d heads of width %d per K/V group need more shared memory than a block has",
                         a.group, a.dh);
    if (a.Tq < 1 || a.B < 1)
        return MHE_OK;
    if (mhe__cu_flash_fits(&a, taylor, precision)) {
        mhe__cu_flash_calls++;
        dim3 fgrid((unsigned)mhe__cu_blocks(a.Tq, MHE__CU_FL), (unsigned)a.n, (unsigned)a.B);
        if (precision != MHE_CUDA_FP32)
            return mhe__cu_status(mhe__cu_launch(precision == MHE_CUDA_BF16 ? mhe__cu_flash_fwd_tc<1>
                                                                            : mhe__cu_flash_fwd_tc<0>,
                                                 fgrid, dim3(128), mhe__cu_flash_tc_bytes(), a, out, lse, q, k, v),
                                  err, "attention forward");
        return mhe__cu_status(mhe__cu_launch(mhe__cu_flash_fwd, fgrid, dim3(256), mhe__cu_flash_fwd_bytes(), a, out, lse,
                                             q, k, v),
                              err, "attention forward");
    }
    dim3 grid((unsigned)mhe__cu_blocks(a.Tq, W), (unsigned)a.n_kv, (unsigned)a.B);
    return mhe__cu_status(mhe__cu_launch(taylor ? mhe__cu_attn_fwd_k<1> : mhe__cu_attn_fwd_k<0>, grid, dim3(32 * W),
                                         mhe__cu_fwd_smem(&a, W) * sizeof(float), a, out, lse, q, k, v),
                          err, "attention forward");
}

/* the backward's row terms D, then (attention dropout) A */
static size_t mhe__cu_attn_bwd_floats(const mhe_attn_dims *d) { return 2 * (size_t)d->B * d->n_heads * d->Tq; }

static mhe_status mhe__cu_attn_bwd(const mhe_attn_dims *d, int taylor, int precision, const mhe_attn_grads *gr, float *dq, float *dk,
                                   float *dv, const float *dout, const float *out, const float *lse, const float *q,
                                   const float *k, const float *v, float *scratch, char *err) {
    mhe_status st = mhe__cu_att_check(d, err);
    if (st != MHE_OK)
        return st;
    mhe__cu_att a = mhe__cu_att_from(d);
    if (taylor)
        a.drop = 0.0f;
    int Wq = mhe__cu_att_warps(&a, mhe__cu_dq_smem), Wk = mhe__cu_att_warps(&a, mhe__cu_dkv_smem);
    if (!Wq || !Wk)
        return mhe__fail(err, MHE_ERR_DEVICE, "%d heads of width %d per K/V group need more shared memory than a block has",
                         a.group, a.dh);
    if (a.Tq < 1 || a.B < 1)
        return MHE_OK;
    int64_t rows = (int64_t)a.B * a.n * a.Tq;
    cudaError_t e = mhe__cu_launch(mhe__cu_attn_rowdot, dim3(mhe__cu_blocks(rows, 4)), dim3(128), 0, a, scratch, dout, out);
    if (e == cudaSuccess && a.Tk > 0 && mhe__cu_flash_fits(&a, taylor, precision)) {
        mhe__cu_flash_calls++;
        e = mhe__cu_launch(precision == MHE_CUDA_BF16   ? mhe__cu_flash_bwd<MHE_CUDA_BF16>
                           : precision == MHE_CUDA_TF32 ? mhe__cu_flash_bwd<MHE_CUDA_TF32>
                                                        : mhe__cu_flash_bwd<0>,
                           dim3((unsigned)mhe__cu_blocks(a.Tk, MHE__CU_FL), (unsigned)a.n, (unsigned)a.B),
                           dim3(256), mhe__cu_flash_bwd_bytes(), a, dq, dk, dv, gr ? gr->dq_mul : NULL,
                           gr ? gr->dq_add : NULL, gr ? gr->dv_mul : NULL, gr ? gr->dv_add : NULL,
                           gr ? gr->dk_bias : NULL, dout, lse, (const float *)scratch, q, k, v);
        return mhe__cu_status(e, err, "attention backward");
    }
    if (e == cudaSuccess)
        e = mhe__cu_launch(taylor ? mhe__cu_attn_dq_k<1> : mhe__cu_attn_dq_k<0>,
                           dim3((unsigned)mhe__cu_blocks(a.Tq, Wq), (unsigned)a.n_kv, (unsigned)a.B), dim3(32 * Wq), mhe__cu_dq_smem(&a, Wq) * sizeof(float), a, dq, gr ? gr->dq_mul : NULL,
                           gr ? gr->dq_add : NULL, gr ? gr->dv_mul : NULL, gr ? gr->dv_add : NULL, dout, lse,
                           (const float *)scratch, q, k, v);
    if (e == cudaSuccess && a.Tk > 0)
        e = mhe__cu_launch(taylor ? mhe__cu_attn_dkv_k<1> : mhe__cu_attn_dkv_k<0>,
                           dim3((unsigned)mhe__cu_blocks(a.Tk, Wk), (unsigned)a.n_kv, (unsigned)a.B), dim3(32 * Wk), mhe__cu_dkv_smem(&a, Wk) * sizeof(float), a, dk, dv,
                           gr ? gr->dk_bias : NULL, dout, lse, (const float *)scratch, q, k, v);
    return mhe__cu_status(e, err, "attention backward");
}

/* Non-approximate (thesis eq. 4.7-4.8): one score per position, s_j =
   scale SiLU(q_j).k_j (a token's own query and key), A_tj = exp(s_j) / sum
   of exp(s) over the keys t sees: the recurrent form (eq. 4.18) with a
   running max, as mhe__nonapprox_lin_fwd. One warp per (head, sequence),
   lane l owns columns l + 32 i (registers, every loop over i unrolled); the
   scan over positions is sequential, a warp reduction per key and no
   barrier. st (decoding): per head [max, sum, numerator d_h], read unless
   fresh (a new sequence) and written back. lse = max + log sum per row. */
#define MHE__CU_NA_COLS (MHE_MAX_D_HEAD / 32)

typedef struct mhe__cu_na {
    int B, n, T, dh, qs, ks, vs, os, causal;
    float scale;
    const int *len;                         /* [B] real tokens of each sequence (keys past them are padding); NULL: T */
} mhe__cu_na;

/* keys query t of sequence b sees, as mhe__att_visible: the causal bound and the padding */
static __device__ __forceinline__ int mhe__cu_na_visible(const mhe__cu_na &a, int b, int t) {
    int n = a.causal ? t + 1 : a.T;
    return a.len && a.len[b] < n ? a.len[b] : n;
}

/* s_j = scale SiLU(q_j).k_j, in every lane */
static __device__ __forceinline__ float mhe__cu_na_score(const mhe__cu_na &a, const float *qj, const float *kj,
                                                         int lane) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < MHE__CU_NA_COLS; i++) {
        int c = lane + 32 * i;
        if (c < a.dh)
            s += mhe__cu_act(MHE_ACT_SILU, qj[c]) * kj[c];
    }
    return a.scale * mhe__cu_warp_sum(s);
}

__global__ __launch_bounds__(32) void mhe__cu_nonapprox_fwd(mhe__cu_na a, float *out, float *lse, const float *q,
                                                            const float *k, const float *v, float *st, int fresh) {
    int h = (int)blockIdx.x, b = (int)blockIdx.y, lane = (int)threadIdx.x, added = 0;
    float num[MHE__CU_NA_COLS], mx = -INFINITY, den = 0.0f;
    float *sh = st ? st + (size_t)h * (a.dh + 2) : NULL;
    int keep = sh && !fresh;
    if (keep) {
        mx = sh[0];
        den = sh[1];
    }
#pragma unroll
    for (int i = 0; i < MHE__CU_NA_COLS; i++) {
        int c = lane + 32 * i;
        num[i] = keep && c < a.dh ? sh[2 + c] : 0.0f;
    }
    for (int t = 0; t < a.T; t++) {
        int vis = mhe__cu_na_visible(a, b, t);
        size_t ro = ((size_t)b * a.T + t) * a.os + (size_t)h * a.dh;
        for (; added < vis; added++) {
            size_t r = (size_t)b * a.T + added;
            const float *vj = v + r * a.vs + (size_t)h * a.dh;
            float s = mhe__cu_na_score(a, q + r * a.qs + (size_t)h * a.dh, k + r * a.ks + (size_t)h * a.dh, lane);
            if (s > mx) { /* rescale what was summed under the old max */
                float corr = mx == -INFINITY ? 0.0f : expf(mx - s);
#pragma unroll
                for (int i = 0; i < MHE__CU_NA_COLS; i++)
                    num[i] *= corr;
                den *= corr;
                mx = s;
            }
            float e = expf(s - mx);
#pragma unroll
            for (int i = 0; i < MHE__CU_NA_COLS; i++) {
                int c = lane + 32 * i;
                if (c < a.dh)
                    num[i] += e * vj[c];
            }
            den += e;
        }
#pragma unroll
        for (int i = 0; i < MHE__CU_NA_COLS; i++) {
            int c = lane + 32 * i;
            if (c < a.dh)
                out[ro + c] = den > 0.0f ? num[i] / den : 0.0f;
        }
        if (lane == 0)
            lse[((size_t)b * a.n + h) * a.T + t] = den > 0.0f ? mx + logf(den) : -INFINITY;
    }
    if (sh) {
        __syncwarp(); /* every lane has read the old state */
        if (lane == 0) {
            sh[0] = mx;
            sh[1] = den;
        }
#pragma unroll
        for (int i = 0; i < MHE__CU_NA_COLS; i++) {
            int c = lane + 32 * i;
            if (c < a.dh)
                sh[2 + c] = num[i];
        }
    }
}

/* The backward, a reverse sweep as mhe__nonapprox_lin_bwd: with c_t = lse_t,
   A_tj = exp(s_j - c_t); over the queries that see key j, G = sum exp(r -
   c_t) g_t and H = sum exp(r - c_t) g_t.o_t with r the least c_t among them
   (every factor <= 1); dv_j += exp(s_j - r) G, ds_j = exp(s_j - r) (v_j.G -
   H), then through s_j = scale SiLU(q_j).k_j. A warp writes only its own
   head's columns of rows of its own sequence: disjoint, no atomics. */
__global__ __launch_bounds__(32) void mhe__cu_nonapprox_bwd(mhe__cu_na a, float *dq, float *dk, float *dv,
                                                            const float *dout, const float *out, const float *lse,
                                                            const float *q, const float *k, const float *v) {
    int h = (int)blockIdx.x, b = (int)blockIdx.y, lane = (int)threadIdx.x, t = a.T - 1;
    float G[MHE__CU_NA_COLS], H = 0.0f, r = INFINITY;
    const float *cl = lse + ((size_t)b * a.n + h) * a.T;
#pragma unroll
    for (int i = 0; i < MHE__CU_NA_COLS; i++)
        G[i] = 0.0f;
    for (int j = mhe__cu_na_visible(a, b, a.T - 1) - 1; j >= 0; j--) { /* the last query sees the most keys */
        size_t rj = (size_t)b * a.T + j;
        const float *qj = q + rj * a.qs + (size_t)h * a.dh, *kj = k + rj * a.ks + (size_t)h * a.dh,
                    *vj = v + rj * a.vs + (size_t)h * a.dh;
        for (; t >= 0 && mhe__cu_na_visible(a, b, t) > j; t--) { /* the queries that see key j join */
            size_t ro = ((size_t)b * a.T + t) * a.os + (size_t)h * a.dh;
            float go = 0.0f, w = 1.0f;
#pragma unroll
            for (int i = 0; i < MHE__CU_NA_COLS; i++) {
                int c = lane + 32 * i;
                if (c < a.dh)
                    go += dout[ro + c] * out[ro + c];
            }
            go = mhe__cu_warp_sum(go);
            if (cl[t] < r) {
                float corr = r == INFINITY ? 0.0f : expf(cl[t] - r);
#pragma unroll
                for (int i = 0; i < MHE__CU_NA_COLS; i++)
                    G[i] *= corr;
                H *= corr;
                r = cl[t];
            } else {
                w = expf(r - cl[t]);
            }
#pragma unroll
            for (int i = 0; i < MHE__CU_NA_COLS; i++) {
                int c = lane + 32 * i;
                if (c < a.dh)
                    G[i] += w * dout[ro + c];
            }
            H += w * go;
        }
        float e = expf(mhe__cu_na_score(a, qj, kj, lane) - r), vg = 0.0f;
#pragma unroll
        for (int i = 0; i < MHE__CU_NA_COLS; i++) {
            int c = lane + 32 * i;
            if (c < a.dh) {
                dv[rj * a.vs + (size_t)h * a.dh + c] += e * G[i];
                vg += vj[c] * G[i];
            }
        }
        float ds = e * (mhe__cu_warp_sum(vg) - H) * a.scale;
#pragma unroll
        for (int i = 0; i < MHE__CU_NA_COLS; i++) {
            int c = lane + 32 * i;
            if (c < a.dh) {
                dq[rj * a.qs + (size_t)h * a.dh + c] += ds * kj[c] * mhe__cu_act_grad(MHE_ACT_SILU, qj[c]);
                dk[rj * a.ks + (size_t)h * a.dh + c] += ds * mhe__cu_act(MHE_ACT_SILU, qj[c]);
            }
        }
    }
}

/* Taylor decoding, the recurrent form (thesis sec. 4.15; Katharopoulos et
   al. 2020 with Based's phi, as mhe__decon_decode): per head the state S =
   sum_j phi(k_j) [v_j, 1]^T, [F, d_h + 1], whose last column is z; this
   token joins S first, then o = S^T phi(q) / phi(q).z. phi as
   mhe__taylor_phi, on the fly: 1, a x_i, then a^2 x_i x_j for i <= j (over
   sqrt 2 when i = j), a = sqrt(scale). One block per head, threads over the
   d_h + 1 columns; each column's F features are one thread's, in order. */
__global__ __launch_bounds__(256) void mhe__cu_taylor_step(float *out, const float *q, const float *k,
                                                           const float *v, float *S, int dh, float a) {
    __shared__ float xs[3][MHE_MAX_D_HEAD + 1], res[MHE_MAX_D_HEAD + 1];
    int h = (int)blockIdx.x, W = dh + 1;
    size_t F = 1 + (size_t)dh + (size_t)dh * (dh + 1) / 2;
    float *Sh = S + (size_t)h * F * W, a2 = a * a, r2 = 0.70710678118654752f;
    for (int c = (int)threadIdx.x; c < dh; c += (int)blockDim.x) {
        xs[0][c] = q[(size_t)h * dh + c];
        xs[1][c] = k[(size_t)h * dh + c];
        xs[2][c] = v[(size_t)h * dh + c];
    }
    if (threadIdx.x == 0)
        xs[2][dh] = 1.0f; /* the normaliser's column */
    __syncthreads();
    for (int c = (int)threadIdx.x; c < W; c += (int)blockDim.x) {
        float vc = xs[2][c], o, sf;
        float *col = Sh + c;
        sf = col[0] + vc; /* f = 0: phi = 1 */
        col[0] = sf;
        o = sf;
        for (int i = 0; i < dh; i++) {
            float *p = col + (size_t)(1 + i) * W;
            sf = *p + a * xs[1][i] * vc;
            *p = sf;
            o += a * xs[0][i] * sf;
        }
        size_t f = 1 + (size_t)dh;
        for (int i = 0; i < dh; i++)
            for (int j = i; j < dh; j++, f++) {
                float pk = i == j ? a2 * r2 * xs[1][i] * xs[1][i] : a2 * xs[1][i] * xs[1][j];
                float pq = i == j ? a2 * r2 * xs[0][i] * xs[0][i] : a2 * xs[0][i] * xs[0][j];
                float *p = col + f * W;
                sf = *p + pk * vc;
                *p = sf;
                o += pq * sf;
            }
        res[c] = o;
    }
    __syncthreads();
    for (int c = (int)threadIdx.x; c < dh; c += (int)blockDim.x)
        out[(size_t)h * dh + c] = res[c] / res[dh];
}


/* ---- chain 2 on the device: the core of a kind ------------------------------- */

/* MHE-MUL maps (mhe__mul_maps): w_i = (1+e_i^Q)(1+e_i^K), v_i = 1+e_i^V */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_mul_maps(float *hmap, const float *eq, const float *ek,
                                                               const float *ev, int nd) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < nd) {
        hmap[i] = (1.0f + eq[i]) * (1.0f + ek[i]);
        hmap[nd + i] = 1.0f + ev[i];
    }
}

__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_mul_maps_bwd(float *geq, float *gek, float *gev,
                                                                   const float *dmap, const float *eq,
                                                                   const float *ek, int nd) {
    int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < nd) {
        geq[i] += dmap[i] * (1.0f + ek[i]);
        gek[i] += dmap[i] * (1.0f + eq[i]);
        gev[i] += dmap[nd + i];
    }
}

/* sha: the one head copied to all n (forward), their gradients summed into head 0 (backward) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_sha_heads(float *att, int rows, int n, int dh, int bwd) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * dh)
        return;
    float *row = att + (i / dh) * (int64_t)n * dh;
    int c = (int)(i % dh);
    if (bwd) {
        float s = row[c];
        for (int h = 1; h < n; h++)
            s += row[h * dh + c];
        row[c] = s;
    } else {
        for (int h = 1; h < n; h++)
            row[h * dh + c] = row[c];
    }
}

/* dst[r][c] = src[r % period][c] for c < cols (row strides ldd, lds): the fixed
   stream's Q|K, the same for every sequence of the batch; with period = rows,
   a plain copy (new positions' K|V into the decoding cache) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_copy_rows(float *dst, int ldd, const float *src, int lds,
                                                                int rows, int cols, int period) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (int64_t)rows * cols)
        dst[(i / cols) * ldd + i % cols] = src[(i / cols % period) * lds + i % cols];
}

/* dst[t][c] += sum_b src[b T + t][c], b in order (one thread per (t, c), no
   atomics): the batch's d Q|K onto the fixed stream's rows, and back */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_sum_rows(float *dst, int ldd, const float *src, int lds, int B,
                                                               int T, int cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    if (i >= (int64_t)T * cols)
        return;
    for (int b = 0; b < B; b++)
        s += src[((int64_t)b * T + i / cols) * lds + i % cols];
    dst[(i / cols) * ldd + i % cols] += s;
}

/* What the blocks of one stream see, as the CPU's mhe__ctx: the batch, or
   the fixed stream of rndemb-qk / fixedseq-qk (one sequence, fixed = 1, its
   activations in g->fixed_layer). emb is the stream's block-0 input, which
   staticemb-qk reads. */
typedef struct mhe__cu_ctx {
    int B, T, fixed;
    int l0;                                 /* the stream's first layer (encdec's decoder: enc_layers) */
    mhe_cuda_layer_acts *la;
    const float *emb;
    float *d_emb;                           /* staticemb-qk: the gradient of emb (accumulated) */
    /* encdec's decoder: the encoder output [B Ts, C] and its gradient (accumulated); the
       source's embeddings and their gradient (a staticemb-qk cross-attention reads them) */
    const float *mem, *mem_emb;
    float *d_mem, *d_mem_emb;
    int Ts;
    /* the padding, as the CPU's mhe__ctx: the stream's lengths on the device
       (its cores' kv_len) and on the host (fnet's and linear's sequences),
       and the source's (the cross-attention's kv_len); NULL: none */
    const int *len, *hlen, *mem_len;
} mhe__cu_ctx;

/* What the device runs for one attention kind: a row of mhe__cu_kinds (C7), one per MHE_ATTN_*
   kind. The model calls a sublayer's kind through its row; a kind of an existing family needs
   only its row. Each launcher takes its row, so the cores here need not see the table. */
enum { MHE__CU_QK_U, MHE__CU_QK_FIXED, MHE__CU_QK_STATIC };          /* where Q|K come from */
enum { MHE__CU_STATE_NONE, MHE__CU_STATE_TAYLOR, MHE__CU_STATE_SCAN, MHE__CU_STATE_FIXED };
typedef struct mhe__cu_kind_ops mhe__cu_kind_ops;
struct mhe__cu_kind_ops {
    int kind;   /* its MHE_ATTN_*, the row's index (checked where the table is) */
    int qk;     /* MHE__CU_QK_U: Q|K|V one GEMM of u; _FIXED: Q|K the fixed stream's (rndemb-qk,
                   fixedseq-qk), V of u; _STATIC: Q|K of N(e), the stream's block-0 input (staticemb-qk) */
    int v_bias; /* collab: b^V added to the V columns apart from the one GEMM */
    int kb;     /* mhe-add: a [keys, n] key-bias table beside K (decoding caches it) */
    int state;  /* MHE__CU_STATE_*: what decoding keeps beside the cache */
    /* the core's maps and biases beyond Q, K, V (collab, mhe-mul, mhe-add; NULL: none) */
    void (*dims)(mhe_cuda_model *g, const mhe_attn_weights *w, mhe_attn_dims *d, mhe_attn_grads *gr,
                 const float *k, int ks, float *dk, float *hmap, float *dmap);
    /* chain 2: the core on projected Q, K, V (NULL: a mixing kind, which has none) */
    mhe_status (*core_fwd)(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                           mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q, const float *k,
                           const float *v);
    mhe_status (*core_bwd)(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                           mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                           const float *v, float *dq, float *dk, float *dv);
    /* chain 1: the self-attention sublayer from its input u, as mhe__attn_branch_fwd / _bwd */
    mhe_status (*branch_fwd)(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                             const float *u, float *out);
    mhe_status (*branch_bwd)(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                             const float *u, const float *d_out, float *du);
    /* decoding: the new rows' core with the cache (NULL: encoder-only, or no core) */
    mhe_status (*decode)(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, int l, int T, const float *u);
};

/* causal: self-attention of a decoder (the decoder of encdec too); not an
   encoder's, nor cross-attention (every query sees the whole source) */
static int mhe__cu_causal(const mhe_cuda_model *g, int l, int cross) {
    return !cross && g->host->cfg.arch != MHE_ARCH_ENCODER && !g->host->layers[l].encoder;
}

/* the CPU's mhe_attn_dims of a sublayer with device pointers (mhe__attn_fwd's choices, fused paths
   only): collab's head maps and content bias, MHE-MUL's maps (hmap), MHE-ADD's key-bias table (hmap
   holds it, dmap its gradient; e^K only shifts whole rows: no effect, no gradient) */
static void mhe__cu_dims_collab(mhe_cuda_model *g, const mhe_attn_weights *w, mhe_attn_dims *d, mhe_attn_grads *gr,
                                const float *k, int ks, float *dk, float *hmap, float *dmap) {
    mhe__geom geo = mhe__layer_geom(&g->host->cfg, w->kind);
    (void)hmap;
    (void)dmap;
    mhe__collab_dims(d, w, geo.q_w, k, ks);
    d->q_mul = MHE__CU_P(g, w->mix);
    if (gr) {
        gr->dq_mul = MHE__CU_G(g, w->mix);
        gr->dk_bias = dk + geo.q_w;
    }
}

static void mhe__cu_dims_mul(mhe_cuda_model *g, const mhe_attn_weights *w, mhe_attn_dims *d, mhe_attn_grads *gr,
                             const float *k, int ks, float *dk, float *hmap, float *dmap) {
    int HD = g->host->cfg.n_heads * mhe_config_d_head(&g->host->cfg);
    (void)w;
    (void)k;
    (void)ks;
    (void)dk;
    d->q_shared = 1;
    d->q_mul = hmap;
    d->v_mul = hmap + HD;
    if (gr) {
        gr->dq_mul = dmap;
        gr->dv_mul = dmap + HD;
    }
}

/* one QK^T for every head plus the key bias table kb = K E^Q^T */
static void mhe__cu_dims_add(mhe_cuda_model *g, const mhe_attn_weights *w, mhe_attn_dims *d, mhe_attn_grads *gr,
                             const float *k, int ks, float *dk, float *hmap, float *dmap) {
    (void)k;
    (void)ks;
    (void)dk;
    d->q_shared = 1;
    d->k_bias = hmap;
    d->k_bias_stride = g->host->cfg.n_heads;
    d->v_add = MHE__CU_P(g, w->ev);
    if (gr) {
        gr->dk_bias = dmap;
        gr->dv_add = MHE__CU_G(g, w->ev);
    }
}

/* the Non-approximate core's shape from the CPU's dims (Tq = Tk: self-attention) */
static mhe__cu_na mhe__cu_na_from(const mhe_attn_dims *d) {
    mhe__cu_na a;
    a.B = d->B;
    a.n = d->n_heads;
    a.T = d->Tq;
    a.dh = d->d_head;
    a.qs = d->q_stride;
    a.ks = d->k_stride;
    a.vs = d->v_stride;
    a.os = d->o_stride;
    a.causal = d->causal;
    a.scale = d->scale;
    a.len = d->kv_len;
    return a;
}

/* what the CPU's dims of this core hold beyond the shape: attention dropout
   on the main stream of a training forward, self- or cross-attention (the
   fixed stream and decoding run without, as mhe__fixed_fwd and
   mhe_decode_step), and the padding of the keys' stream there (kv_len: the
   stream's lengths, or the source's for cross-attention) */
static void mhe__cu_core_dims(const mhe_cuda_model *g, const mhe_cuda_layer_acts *a, int l, const int *kv_len,
                              mhe_attn_dims *d) {
    int main_stream = !g->cache && (a == &g->layer[l] || a == &g->cross[l]);
    d->dropout = g->drop && main_stream ? g->host->cfg.attn_dropout : 0.0f;
    d->kv_len = main_stream ? kv_len : NULL;
}

/* the softmax cores (the tiles; taylor: its polynomial weight), on the maps map (the key biases
   for mhe-add), their gradients into dmap */
static mhe_status mhe__cu_tiles_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                    mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *map, int taylor, const float *q,
                                    const float *k, const float *v) {
    if (ops->dims)
        ops->dims(g, w, d, NULL, k, d->k_stride, NULL, map, NULL);
    return mhe__cu_attn_fwd(d, taylor, g->precision, a->att, a->lse, q, k, v, g->err);
}

static mhe_status mhe__cu_tiles_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                    mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *map, float *dmap, int taylor,
                                    const float *q, const float *k, const float *v, float *dq, float *dk, float *dv) {
    mhe_attn_grads gr;
    memset(&gr, 0, sizeof gr);
    if (ops->dims)
        ops->dims(g, w, d, &gr, k, d->k_stride, dk, map, dmap);
    return mhe__cu_attn_bwd(d, taylor, g->precision, &gr, dq, dk, dv, g->d_att, a->att, a->lse, q, k, v,
                            g->attn_scratch, g->err);
}

/* the kinds' cores (mhe__cu_kind_ops.core_fwd / _bwd): the plain softmax core */
static mhe_status mhe__cu_core_softmax_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                           mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                           const float *k, const float *v) {
    (void)kb;
    return mhe__cu_tiles_fwd(g, ops, w, a, d, a->hmap, 0, q, k, v);
}

static mhe_status mhe__cu_core_softmax_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                           mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                           const float *v, float *dq, float *dk, float *dv) {
    return mhe__cu_tiles_bwd(g, ops, w, a, d, a->hmap, g->d_hmap, 0, q, k, v, dq, dk, dv);
}

/* Taylor: the same tiles with w = 1 + s + s^2/2 */
static mhe_status mhe__cu_core_taylor_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                          mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                          const float *k, const float *v) {
    (void)kb;
    return mhe__cu_tiles_fwd(g, ops, w, a, d, a->hmap, 1, q, k, v);
}

static mhe_status mhe__cu_core_taylor_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                          mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                          const float *v, float *dq, float *dk, float *dv) {
    return mhe__cu_tiles_bwd(g, ops, w, a, d, a->hmap, g->d_hmap, 1, q, k, v, dq, dk, dv);
}

/* sha: one head's core, copied to all n; the n copies' gradients add up */
static mhe_status mhe__cu_core_sha_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                       const float *k, const float *v) {
    int n = g->host->cfg.n_heads, dh = mhe_config_d_head(&g->host->cfg), rows = d->B * d->Tq;
    (void)kb;
    MHE__CU_MHE(mhe__cu_tiles_fwd(g, ops, w, a, d, a->hmap, 0, q, k, v));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_sha_heads, dim3(mhe__cu_blocks((int64_t)rows * dh, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, a->att, rows, n, dh, 0), "sha heads");
    return MHE_OK;
}

static mhe_status mhe__cu_core_sha_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                       const float *v, float *dq, float *dk, float *dv) {
    int n = g->host->cfg.n_heads, dh = mhe_config_d_head(&g->host->cfg), rows = d->B * d->Tq;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_sha_heads, dim3(mhe__cu_blocks((int64_t)rows * dh, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, g->d_att, rows, n, dh, 1), "sha heads backward");
    return mhe__cu_tiles_bwd(g, ops, w, a, d, a->hmap, g->d_hmap, 0, q, k, v, dq, dk, dv);
}

/* MHE-MUL: the maps first (mhe__mul_maps), their gradients after */
static mhe_status mhe__cu_core_mul_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                       const float *k, const float *v) {
    int HD = g->host->cfg.n_heads * mhe_config_d_head(&g->host->cfg);
    (void)kb;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_mul_maps, dim3(mhe__cu_blocks(HD, MHE__CU_EW)), dim3(MHE__CU_EW), 0, a->hmap,
                               (const float *)MHE__CU_P(g, w->eq), (const float *)MHE__CU_P(g, w->ek),
                               (const float *)MHE__CU_P(g, w->ev), HD), "MHE-MUL maps");
    return mhe__cu_tiles_fwd(g, ops, w, a, d, a->hmap, 0, q, k, v);
}

static mhe_status mhe__cu_core_mul_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                       const float *v, float *dq, float *dk, float *dv) {
    int HD = g->host->cfg.n_heads * mhe_config_d_head(&g->host->cfg);
    MHE__CU_MHE(mhe__cu_zero(g, g->d_hmap, (size_t)2 * HD));
    MHE__CU_MHE(mhe__cu_tiles_bwd(g, ops, w, a, d, a->hmap, g->d_hmap, 0, q, k, v, dq, dk, dv));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_mul_maps_bwd, dim3(mhe__cu_blocks(HD, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                               MHE__CU_G(g, w->eq), MHE__CU_G(g, w->ek), MHE__CU_G(g, w->ev),
                               (const float *)g->d_hmap, (const float *)MHE__CU_P(g, w->eq),
                               (const float *)MHE__CU_P(g, w->ek), HD), "MHE-MUL map gradients");
    return MHE_OK;
}

/* MHE-ADD: kb[key][i] = k . e_i^Q ([keys, n], not [keys, n d_h]) first; back through it after:
   dK += dkb E^Q, dE^Q += dkb^T K */
static mhe_status mhe__cu_core_add_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                       const float *k, const float *v) {
    int n = g->host->cfg.n_heads, dh = mhe_config_d_head(&g->host->cfg);
    MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 1, d->B * d->Tk, n, dh, 1.0f, k, d->k_stride, MHE__CU_P(g, w->eq), dh, 0.0f, kb,
                               n));
    return mhe__cu_tiles_fwd(g, ops, w, a, d, kb, 0, q, k, v);
}

static mhe_status mhe__cu_core_add_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                       mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                       const float *v, float *dq, float *dk, float *dv) {
    int n = g->host->cfg.n_heads, dh = mhe_config_d_head(&g->host->cfg), ks = d->k_stride;
    int keys = d->B * d->Tk;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_kb, (size_t)keys * n));
    MHE__CU_MHE(mhe__cu_tiles_bwd(g, ops, w, a, d, a->kb, g->d_kb, 0, q, k, v, dq, dk, dv));
    MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, keys, dh, n, 1.0f, g->d_kb, n, MHE__CU_P(g, w->eq), dh, 1.0f, dk, ks));
    return mhe__cu_gemm_m(g, 1, 0, n, dh, keys, 1.0f, g->d_kb, n, k, ks, 1.0f, MHE__CU_G(g, w->eq), dh);
}

/* Non-approximate: the recurrent scan, one warp per (head, sequence) */
static mhe_status mhe__cu_core_scan_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                        mhe_cuda_layer_acts *a, mhe_attn_dims *d, float *kb, const float *q,
                                        const float *k, const float *v) {
    (void)ops;
    (void)w;
    (void)kb;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_nonapprox_fwd, dim3((unsigned)g->host->cfg.n_heads, (unsigned)d->B), dim3(32), 0,
                               mhe__cu_na_from(d), a->att, a->lse, q, k, v, (float *)NULL, 1),
                "Non-approximate attention");
    return MHE_OK;
}

static mhe_status mhe__cu_core_scan_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe_attn_weights *w,
                                        mhe_cuda_layer_acts *a, mhe_attn_dims *d, const float *q, const float *k,
                                        const float *v, float *dq, float *dk, float *dv) {
    (void)ops;
    (void)w;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_nonapprox_bwd, dim3((unsigned)g->host->cfg.n_heads, (unsigned)d->B), dim3(32), 0,
                               mhe__cu_na_from(d), dq, dk, dv, (const float *)g->d_att, (const float *)a->att,
                               (const float *)a->lse, q, k, v),
                "Non-approximate attention backward");
    return MHE_OK;
}

/* a sublayer's core (chain 2) through its kind's row: self-attention (cross 0) or cross-attention */
static mhe_status mhe__cu_attn_core_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, mhe_cuda_layer_acts *a, int l,
                                        int cross, int B, int Tq, int Tk, int q_offset, const int *kv_len,
                                        const float *q, int qs, const float *k, int ks, const float *v, int vs) {
    const mhe_attn_weights *w = cross ? &g->host->layers[l].cross : &g->host->layers[l].attn;
    mhe_attn_dims d = mhe__attn_dims(g->host, w, MHE__SITE_ATT(l, cross), B, Tq, Tk, mhe__cu_causal(g, l, cross), NULL);
    float *kb = g->cache && !cross ? g->cache->kb : a->kb; /* cross: the source's keys, in its acts */
    mhe__cu_core_dims(g, a, l, kv_len, &d);
    d.q_offset = q_offset;
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = vs;
    return ops->core_fwd(g, ops, w, a, &d, kb, q, k, v);
}

static mhe_status mhe__cu_attn_core_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, mhe_cuda_layer_acts *a, int l,
                                        int cross, int B, int T, int Tk, const int *kv_len, const float *q, int qs,
                                        const float *k, int ks, const float *v, float *dq, float *dk, float *dv) {
    const mhe_attn_weights *w = cross ? &g->host->layers[l].cross : &g->host->layers[l].attn;
    mhe_attn_dims d = mhe__attn_dims(g->host, w, MHE__SITE_ATT(l, cross), B, T, Tk, mhe__cu_causal(g, l, cross), NULL);
    mhe__cu_core_dims(g, a, l, kv_len, &d);
    d.q_stride = qs;
    d.k_stride = ks;
    d.v_stride = ks;
    return ops->core_bwd(g, ops, w, a, &d, q, k, v, dq, dk, dv);
}

/* decoding (B = 1), the kinds' decode (mhe__cu_kind_ops.decode): the T new positions' rows
   (a->proj) through the core of their kind, with what the cache keeps. Query t sees keys
   0 .. pos + t. K|V rows (the softmax kinds, staticemb-qk): the new positions' K|V columns
   (el-att: its input) join the cache; the core reads the cache. */
static mhe_status mhe__cu_decode_kv(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, int l, int T, const float *u) {
    const mhe_config *c = &g->host->cfg;
    mhe_cuda_layer_acts *a = &g->layer[l];
    mhe_cuda_kv_cache *kc = g->cache;
    mhe__geom geo = mhe__layer_geom(c, ops->kind);
    int pos = kc->len, kvw = kc->kv_w[l], ks;
    const float *k, *v, *src = geo.k_w ? a->proj + geo.q_w : u;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_copy_rows, dim3(mhe__cu_blocks((int64_t)T * kvw, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, kc->kv[l] + (size_t)pos * kvw, kvw, src,
                               geo.k_w ? geo.proj_w : c->d_model, T, kvw, T),
                "KV cache append");
    k = kc->kv[l];
    ks = kvw;
    v = geo.v_w ? k + geo.k_w : k;
    return mhe__cu_attn_core_fwd(g, ops, a, l, 0, 1, T, pos + T, pos, NULL, a->proj, geo.proj_w, k, ks, v, ks);
}

/* Taylor: its state S = sum phi(k) [v, 1]^T, one position after another (as mhe__decon_decode) */
static mhe_status mhe__cu_decode_taylor(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, int l, int T, const float *u) {
    const mhe_config *c = &g->host->cfg;
    mhe_cuda_layer_acts *a = &g->layer[l];
    mhe__geom geo = mhe__layer_geom(c, ops->kind);
    int n = c->n_heads, dh = mhe_config_d_head(c), HD = n * dh, th = (dh + 1 + 31) / 32 * 32, t;
    (void)u;
    for (t = 0; t < T; t++) {
        const float *row = a->proj + (size_t)t * geo.proj_w;
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_taylor_step, dim3((unsigned)n), dim3(th < 256 ? th : 256), 0,
                                   a->att + (size_t)t * HD, row, row + HD, row + 2 * HD, g->cache->state[l], dh,
                                   sqrtf(1.0f / sqrtf((float)dh))),
                    "Taylor decoding step");
    }
    return MHE_OK;
}

/* Non-approximate: its running max, sum and numerator, one position after another */
static mhe_status mhe__cu_decode_scan(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, int l, int T, const float *u) {
    const mhe_config *c = &g->host->cfg;
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &g->layer[l];
    mhe__geom geo = mhe__layer_geom(c, ops->kind);
    int n = c->n_heads, HD = n * mhe_config_d_head(c), pos = g->cache->len, t;
    mhe_attn_dims d = mhe__attn_dims(g->host, w, 0, 1, 1, 1, 1, NULL);
    (void)u;
    d.q_stride = d.k_stride = d.v_stride = 3 * HD;
    for (t = 0; t < T; t++) {
        const float *row = a->proj + (size_t)t * geo.proj_w;
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_nonapprox_fwd, dim3((unsigned)n, 1u), dim3(32), 0, mhe__cu_na_from(&d),
                                   a->att + (size_t)t * HD, a->lse + (size_t)t * n, row, row + HD, row + 2 * HD,
                                   g->cache->state[l], pos + t == 0),
                    "Non-approximate decoding step");
    }
    return MHE_OK;
}

/* rndemb-qk, fixedseq-qk: V rows join the cache, Q|K are the fixed stream's (made at position 0):
   the softmax rows of the CPU's precomputed maps, computed by the training core */
static mhe_status mhe__cu_decode_fixed(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, int l, int T, const float *u) {
    const mhe_config *c = &g->host->cfg;
    mhe_cuda_layer_acts *a = &g->layer[l];
    mhe_cuda_kv_cache *kc = g->cache;
    mhe__geom geo = mhe__layer_geom(c, ops->kind);
    int HD = c->n_heads * mhe_config_d_head(c), pos = kc->len;
    const float *qk = kc->state[l];
    (void)u;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_copy_rows, dim3(mhe__cu_blocks((int64_t)T * HD, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, kc->kv[l] + (size_t)pos * HD, HD,
                               (const float *)(a->proj + 2 * HD), geo.proj_w, T, HD, T),
                "V cache append");
    return mhe__cu_attn_core_fwd(g, ops, a, l, 0, 1, T, pos + T, pos, NULL, qk + (size_t)pos * 2 * HD, 2 * HD,
                                 qk + HD, 2 * HD, kc->kv[l], HD);
}

/* ---- the kinds without an attention core: mlp, fnet, linear ------------------ */

/* the mlp kind (thesis eq. 4.5): att = SiLU(gate) * up over proj = [gate | up] [rows, 2F] */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_gated_fwd(float *att, const float *proj, int rows, int F) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * F)
        return;
    const float *p = proj + (i / F) * 2 * F + i % F;
    att[i] = mhe__cu_act(MHE_ACT_SILU, p[0]) * p[F];
}

/* d [gate | up] = [datt * up * SiLU'(gate) | datt * SiLU(gate)] (written, not added) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_gated_bwd(float *dproj, const float *proj, const float *datt,
                                                                int rows, int F) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * F)
        return;
    int64_t o = (i / F) * 2 * F + i % F;
    float gate = proj[o], up = proj[o + F];
    dproj[o] = datt[i] * up * mhe__cu_act_grad(MHE_ACT_SILU, gate);
    dproj[o + F] = datt[i] * mhe__cu_act(MHE_ACT_SILU, gate);
}

/* the mlp kind (thesis eq. 4.4-4.5): down(SiLU(gate u) * up u); gate | up
   adjacent, one GEMM into proj [rows, 2F], the product into att [rows, F]
   (mhe__gated_fwd / _bwd) */
static mhe_status mhe__cu_gated_fwd_m(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                      const float *u, float *out) {
    const mhe_config *c = &g->host->cfg;
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = c->d_model, F = mhe_config_mlp_width(c), rows = x->B * x->T;
    (void)ops;
    MHE__CU_MHE(mhe__cu_linear_fwd(g, a->proj, 2 * F, u, MHE__CU_P(g, w->gate), MHE__CU_P(g, w->gate_b), rows, C,
                                   2 * F));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_gated_fwd, dim3(mhe__cu_blocks((int64_t)rows * F, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, a->att, (const float *)a->proj, rows, F), "gated MLP");
    return mhe__cu_linear_fwd(g, out, C, a->att, MHE__CU_P(g, w->down), MHE__CU_P(g, w->down_b), rows, F, C);
}

static mhe_status mhe__cu_gated_bwd_m(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                      const float *u, const float *d_out, float *du) {
    const mhe_config *c = &g->host->cfg;
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = c->d_model, F = mhe_config_mlp_width(c), rows = x->B * x->T;
    (void)ops;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_att, (size_t)rows * F));
    MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_att, MHE__CU_G(g, w->down), MHE__CU_G(g, w->down_b), d_out, C, a->att,
                                   MHE__CU_P(g, w->down), rows, F, C));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_gated_bwd, dim3(mhe__cu_blocks((int64_t)rows * F, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, g->d_proj, (const float *)a->proj, (const float *)g->d_att, rows,
                               F), "gated MLP backward");
    return mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->gate), MHE__CU_G(g, w->gate_b), g->d_proj, 2 * F, u,
                              MHE__CU_P(g, w->gate), rows, C, 2 * F);
}

/* the DFT of N points as two tables, c[i ld + j] = cos(2 pi (i j mod N) / N)
   and s the sine, i, j < N: in double (the CPU's mhe_fft twiddles are),
   then rounded to float; sincospi of 2 (i j mod N) / N, in [0, 2), needs
   no large-argument reduction (cos of a double does, in local memory) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_dft_table(float *c, float *s, int N, int ld) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    double sn, cs;
    if (i >= (int64_t)N * N)
        return;
    int r = (int)(i / N), k = (int)(i % N);
    sincospi((double)(2 * (((int64_t)r * k) % N)) / (double)N, &sn, &cs);
    c[(size_t)r * ld + k] = (float)cs;
    s[(size_t)r * ld + k] = (float)sn;
}

/* fnet's tables: [C_C | S_C] [C, 2C] once per activation block, then C_L
   and S_L [L, L] for sequences of L real tokens, made on the device when L
   changes (a padded batch's lengths one after another) */
static mhe_status mhe__cu_dft_tables(mhe_cuda_model *g, int L) {
    int C = g->host->cfg.d_model;
    float *ct = g->dft + 2 * (size_t)C * C;
    if (g->dft_T == L)
        return MHE_OK;
    if (g->dft_T == 0) /* a new block: the features' tables too */
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_dft_table, dim3(mhe__cu_blocks((int64_t)C * C, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, g->dft, g->dft + C, C, 2 * C), "the features' DFT table");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_dft_table, dim3(mhe__cu_blocks((int64_t)L * L, MHE__CU_EW)), dim3(MHE__CU_EW),
                               0, ct, ct + (size_t)L * L, L, L), "the sequence's DFT table");
    g->dft_T = L;
    return MHE_OK;
}

/* FNet mixing (Lee-Thorp et al. 2022), as mhe__fnet_apply: Y = Re(F_L X
   F_C), the unnormalised 2-D DFT over each sequence's L real tokens (hlen:
   the host's lengths; NULL: L = T) and the C features, = C_L X C_C - S_L X
   S_C; padding rows are not mixed in and give 0. A direct real DFT as
   GEMMs, O(T^2 C + T C^2): X [C_C | S_C] for the whole batch, then C_L and
   -S_L on each sequence. The map is its own adjoint: the backward is the
   same call on the gradient, added (acc) into du's real rows. */
static mhe_status mhe__cu_fnet(mhe_cuda_model *g, float *y, const float *x, int B, int T, const int *hlen, int acc) {
    int C = g->host->cfg.d_model, b;
    const float *ct, *st;
    MHE__CU_MHE(mhe__cu_dft_tables(g, hlen ? hlen[0] : T)); /* C's tables before the first GEMM */
    MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, B * T, 2 * C, C, 1.0f, x, C, g->dft, 2 * C, 0.0f, g->mix, 2 * C));
    for (b = 0; b < B; b++) {
        int L = hlen ? hlen[b] : T;
        const float *mb = g->mix + (size_t)b * T * 2 * C;
        float *yb = y + (size_t)b * T * C;
        MHE__CU_MHE(mhe__cu_dft_tables(g, L));
        ct = g->dft + 2 * (size_t)C * C;
        st = ct + (size_t)L * L;
        MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, L, C, L, 1.0f, ct, L, mb, 2 * C, acc ? 1.0f : 0.0f, yb, C));
        MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, L, C, L, -1.0f, st, L, mb + C, 2 * C, 1.0f, yb, C));
        if (!acc && L < T)
            MHE__CU_MHE(mhe__cu_zero(g, yb + (size_t)L * C, (size_t)(T - L) * C));
    }
    return MHE_OK;
}

static mhe_status mhe__cu_fnet_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                   const float *u, float *out) {
    (void)ops;
    (void)l;
    return mhe__cu_fnet(g, out, u, x->B, x->T, x->hlen, 0);
}

static mhe_status mhe__cu_fnet_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                   const float *u, const float *d_out, float *du) {
    (void)ops;
    (void)l;
    (void)u;
    return mhe__cu_fnet(g, du, d_out, x->B, x->T, x->hlen, 1);
}

/* the linear kind (FNet's learned baseline, Lee-Thorp et al. 2022): Y_b =
   W_seq[:L, :L] (X_b W_hidden^T) over each sequence's L real tokens
   (padding rows 0), no bias; att keeps Z = X W_hidden^T
   (mhe__linear_mix_fwd / _bwd) */
static mhe_status mhe__cu_linmix_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                     const float *u, float *out) {
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = g->host->cfg.d_model, Lmax = g->host->cfg.max_seq_len, T = x->T, b;
    (void)ops;
    MHE__CU_MHE(mhe__cu_linear_fwd(g, a->att, C, u, MHE__CU_P(g, w->hidden), NULL, x->B * T, C, C));
    for (b = 0; b < x->B; b++) {
        int L = x->hlen ? x->hlen[b] : T;
        float *ob = out + (size_t)b * T * C;
        MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 0, L, C, L, 1.0f, MHE__CU_P(g, w->seq), Lmax, a->att + (size_t)b * T * C, C,
                                   0.0f, ob, C));
        if (L < T)
            MHE__CU_MHE(mhe__cu_zero(g, ob + (size_t)L * C, (size_t)(T - L) * C));
    }
    return MHE_OK;
}

/* dW_seq += dY_b Z_b^T, dZ_b = W_seq^T dY_b (into d_att; 0 on padding rows), then through W_hidden: du += */
static mhe_status mhe__cu_linmix_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                     const float *u, const float *d_out, float *du) {
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = g->host->cfg.d_model, Lmax = g->host->cfg.max_seq_len, T = x->T, b;
    (void)ops;
    for (b = 0; b < x->B; b++) {
        int L = x->hlen ? x->hlen[b] : T;
        const float *db = d_out + (size_t)b * T * C;
        float *dz = g->d_att + (size_t)b * T * C;
        MHE__CU_MHE(mhe__cu_gemm_m(g, 1, 0, L, C, L, 1.0f, MHE__CU_P(g, w->seq), Lmax, db, C, 0.0f, dz, C));
        if (L < T)
            MHE__CU_MHE(mhe__cu_zero(g, dz + (size_t)L * C, (size_t)(T - L) * C));
        MHE__CU_MHE(mhe__cu_gemm_m(g, 0, 1, L, L, C, 1.0f, db, C, a->att + (size_t)b * T * C, C, 1.0f,
                                   MHE__CU_G(g, w->seq), Lmax));
    }
    return mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->hidden), NULL, g->d_att, C, u, MHE__CU_P(g, w->hidden),
                              x->B * T, C, C);
}

/* ======================================================================== */
/* C4. norms and elementwise: residuals, dropout, losses, pooling           */
/* ======================================================================== */
/* LayerNorm (Ba et al. 2016) or RMSNorm (Zhang and Sennrich 2019) of one
   row per block, as mhe_layernorm_fwd / mhe_rmsnorm_fwd: two passes over
   the row, kept in dynamic shared memory (C floats), mean first then the
   centred variance. rms: mean is not written (NULL). */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_norm_fwd(float *out, float *mean, float *rstd,
                                                               const float *inp, const float *w, const float *b,
                                                               int C, float eps, int rms) {
    __shared__ float red[32];
    MHE__CU_DYN_SHARED(float, row);
    const float *x = inp + (size_t)blockIdx.x * C;
    float s = 0.0f, mu = 0.0f, q = 0.0f, r;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        row[c] = x[c];
        s += row[c];
    }
    if (!rms)
        mu = mhe__cu_block_sum(s, red) / (float)C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        q += (row[c] - mu) * (row[c] - mu);
    r = 1.0f / sqrtf(mhe__cu_block_sum(q, red) / (float)C + eps);
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float y = (row[c] - mu) * r * w[c];
        out[(size_t)blockIdx.x * C + c] = rms || !b ? y : y + b[c];
    }
    if (threadIdx.x == 0) {
        if (!rms)
            mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = r;
    }
}

/* d inp += the norm's input gradient, one row per block:
   dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dout * w (rms: no mean(g) term) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_norm_bwd_x(float *dinp, const float *dout, const float *inp,
                                                                 const float *w, const float *mean,
                                                                 const float *rstd, int C, int rms) {
    __shared__ float red[32];
    MHE__CU_DYN_SHARED(float, row); /* xhat */
    size_t r0 = (size_t)blockIdx.x * C;
    float mu = rms ? 0.0f : mean[blockIdx.x], rs = rstd[blockIdx.x], sg = 0.0f, sgx = 0.0f;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float g = dout[r0 + c] * w[c];
        row[c] = (inp[r0 + c] - mu) * rs;
        sg += g;
        sgx += g * row[c];
    }
    sg = rms ? 0.0f : mhe__cu_block_sum(sg, red) / (float)C;
    sgx = mhe__cu_block_sum(sgx, red) / (float)C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        dinp[r0 + c] += rs * (dout[r0 + c] * w[c] - sg - row[c] * sgx);
}

/* the dynamic shared memory of the norm kernels: one row */
static size_t mhe__cu_norm_smem(int C) { return (size_t)(MHE__CU_FAULT(2) ? C - 1 : C) * sizeof(float); }

static mhe_status mhe__cu_norm_fwd(mhe_cuda_model *g, float *out, float *mean, float *rstd, const float *inp,
                                   const mhe_tensor *w, const mhe_tensor *b, int N) {
    const mhe_config *c = &g->host->cfg;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_norm_fwd, dim3(N), dim3(MHE__CU_EW), mhe__cu_norm_smem(c->d_model), out,
                               mean, rstd, inp, (const float *)MHE__CU_P(g, w), (const float *)MHE__CU_P(g, b),
                               c->d_model, c->norm_eps, c->norm == MHE_NORM_RMSNORM ? 1 : 0), "norm");
    return MHE_OK;
}

static mhe_status mhe__cu_norm_bwd(mhe_cuda_model *g, float *dinp, const float *dout, const float *inp,
                                   const mhe_tensor *w, const mhe_tensor *b, const float *mean, const float *rstd,
                                   int N) {
    const mhe_config *c = &g->host->cfg;
    int rms = c->norm == MHE_NORM_RMSNORM, C = c->d_model;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_norm_bwd_x, dim3(N), dim3(MHE__CU_EW), mhe__cu_norm_smem(C), dinp, dout,
                               inp, (const float *)MHE__CU_P(g, w), mean, rstd, C, rms), "norm backward");
    return mhe__cu_colsums(g, MHE__CU_G(g, w), rms ? (float *)NULL : MHE__CU_G(g, b), dout, C, N, C, inp, mean, rstd,
                           rms ? 2 : 1);
}

/* y[r][off + j] += b[j] for j < nb (a bias on a column slice: collab's b^V,
   the strided projections of the ch. 4 kinds) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_add_cols(float *y, int ld, int off, const float *b, int nb,
                                                               int rows) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (int64_t)rows * nb)
        y[(i / nb) * ld + off + i % nb] += b[i % nb];
}

__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_act_bwd(int act, float *dinp, const float *inp,
                                                              const float *dout, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dinp[i] += dout[i] * mhe__cu_act_grad(act, inp[i]);
}

/* y = a + s * b (residual sums: s = 1; plain copies: b NULL) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_axpby(float *y, const float *a, const float *b, float s,
                                                            int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = b ? a[i] + s * b[i] : a[i];
}

static mhe_status mhe__cu_axpby_m(mhe_cuda_model *g, float *y, const float *a, const float *b, int64_t n) {
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_axpby, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, y, a, b,
                               1.0f, n), "axpby");
    return MHE_OK;
}

/* Admin's residual (Liu et al. 2020, eq. 5): sum = omega * h + branch, omega [C] per column */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_residual_scaled(float *sum, const float *h, const float *branch,
                                                                      const float *omega, int64_t n, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        sum[i] = omega[i % C] * h[i] + branch[i];
}

/* its backward: dh = omega * dsum; domega[c] += sum_r dsum[r][c] h[r][c]
   (one thread per column, rows in order: no atomics) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_admin_bwd(float *dh, float *domega, const float *dsum,
                                                                const float *h, const float *omega, int rows, int C) {
    int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    float s = 0.0f;
    if (c >= C)
        return;
    for (int r = 0; r < rows; r++) {
        size_t i = (size_t)r * C + c;
        s += dsum[i] * h[i];
        dh[i] = omega[c] * dsum[i];
    }
    domega[c] += s;
}

/* inverted dropout as mhe_dropout_fwd (y may be x): element i kept when
   hash(seed, i) >= p, scaled by 1 / (1 - p); the backward is the same map
   on the gradient (mhe_dropout_bwd into zeros) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_dropout(float *y, const float *x, int64_t n, float p,
                                                              uint64_t seed) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = mhe__cu_hash_uniform(seed, (uint64_t)i) >= p ? x[i] * (1.0f / (1.0f - p)) : 0.0f;
}

static mhe_status mhe__cu_dropout_m(mhe_cuda_model *g, float *y, const float *in, int64_t n, float p, int site) {
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_dropout, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, y, in, n, p,
                               mhe__site_seed(g->host, site)), "dropout");
    return MHE_OK;
}

/* Softmax cross-entropy of one row per block (as mhe_xent_fwd/_bwd):
   loss[r] = logsumexp(z) - z[target] (0 for target < 0); with dz, also
   dz = (softmax(z) - onehot) * scale on counted rows, 0 on the others. */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_xent(float *loss, float *dz, const float *z,
                                                           const int *targets, int V, float scale) {
    __shared__ float red[32];
    const float *x = z + (size_t)blockIdx.x * V;
    int tg = targets[blockIdx.x];
    float mx = -INFINITY, s = 0.0f, lse;
    for (int j = (int)threadIdx.x; j < V; j += (int)blockDim.x)
        mx = fmaxf(mx, x[j]);
    /* block max through the same scratch: max = -sum trick does not hold, so a second reduction */
    mx = mhe__cu_warp_max(mx);
    __syncthreads();
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = mx;
    __syncthreads();
    mx = (int)threadIdx.x % 32 < (int)blockDim.x / 32 ? red[threadIdx.x % 32] : -INFINITY;
    mx = mhe__cu_warp_max(mx);
    for (int j = (int)threadIdx.x; j < V; j += (int)blockDim.x)
        s += expf(x[j] - mx);
    lse = mx + logf(mhe__cu_block_sum(s, red));
    if (threadIdx.x == 0)
        loss[blockIdx.x] = tg >= 0 ? lse - x[tg] : 0.0f;
    if (dz)
        for (int j = (int)threadIdx.x; j < V; j += (int)blockDim.x)
            dz[(size_t)blockIdx.x * V + j] = tg >= 0 ? (expf(x[j] - lse) - (j == tg ? 1.0f : 0.0f)) * scale : 0.0f;
}

/* partial[block] = sum of x[i]^2 (or of x[i]) over the block's slice; a
   second launch with one block sums the partials in a fixed order */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_sum(float *partial, const float *x, int64_t n, int square) {
    __shared__ float red[32];
    float s = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += square ? x[i] * x[i] : x[i];
    s = mhe__cu_block_sum(s, red);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

/* sum of n floats (squares: square 1) on the device, two launches in a fixed order, into the
   device float *dst */
static mhe_status mhe__cu_reduce_dev(mhe_cuda_model *g, const float *x, int64_t n, int square, float *dst) {
    int blocks = mhe__cu_blocks(n, MHE__CU_EW);
    if (blocks > 1024)
        blocks = 1024;
    if (blocks < 1)
        blocks = 1;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_sum, dim3(blocks), dim3(MHE__CU_EW), 0, g->partial, x, n, square), "sum");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_sum, dim3(1), dim3(MHE__CU_EW), 0, dst, (const float *)g->partial,
                               (int64_t)blocks, 0),
                "sum of partials");
    return MHE_OK;
}

/* the same sum into *out on the host (a blocking copy) */
static mhe_status mhe__cu_reduce(mhe_cuda_model *g, const float *x, int64_t n, int square, double *out) {
    float s = 0.0f;
    if (mhe__cu_recording) /* a step recorded for a graph reads nothing back (mhe_cuda_trainer.graph) */
        return mhe__fail(g->err, MHE_ERR_DEVICE, "internal: a blocking read inside a recorded step");
    MHE__CU_MHE(mhe__cu_reduce_dev(g, x, n, square, g->partial + 1024));
    MHE__CU_TRY(cudaMemcpy(&s, g->partial + 1024, sizeof s, cudaMemcpyDeviceToHost), "download sum");
    *out = s;
    return MHE_OK;
}

/* a forward's mean loss over count scored tokens from the per-row losses x [n]: on the host at
   once, or (g->loss_sink, a deferred step) summed into the device's loss_sink[0], *loss left alone */
static mhe_status mhe__cu_mean_loss(mhe_cuda_model *g, const float *x, int64_t n, int count, float *loss) {
    double total = 0;
    if (g->loss_sink)
        return mhe__cu_reduce_dev(g, x, n, 0, g->loss_sink);
    MHE__CU_MHE(mhe__cu_reduce(g, x, n, 0, &total));
    if (loss)
        *loss = count ? (float)(total / count) : 0.0f;
    return MHE_OK;
}

/* the classification head's input (mhe__forward_batch): pooled[b] = the
   mean of h[b, t] over the real tokens t < len[b]; one block per sequence */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_pool(float *pooled, const float *h, const int *len, int T,
                                                           int C) {
    int b = (int)blockIdx.x, L = len ? len[b] : T;
    float w = 1.0f / (float)L;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float s = 0.0f;
        for (int t = 0; t < L; t++)
            s += w * h[((size_t)b * T + t) * C + c];
        pooled[(size_t)b * C + c] = s;
    }
}

/* BERT's pooler input and its gradient: first[b] = h[b, 0] (back 0), or dh[b, 0] += dfirst[b] (back 1) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_first_rows(float *out, const float *in, int T, int C, int back) {
    int b = (int)blockIdx.x;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        if (back)
            out[(size_t)b * T * C + c] += in[(size_t)b * C + c];
        else
            out[(size_t)b * C + c] = in[(size_t)b * T * C + c];
    }
}

/* y = tanh(y) (back 0), or d *= 1 - y^2 with y the saved tanh (back 1): the pooler's activation */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_tanh(float *d, const float *y, int64_t n, int back) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        d[i] = back ? d[i] * (1.0f - y[i] * y[i]) : tanhf(d[i]);
}

/* its backward: dh[b, t] += dpooled[b] / len[b] for t < len[b]; one block per row */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_pool_bwd(float *dh, const float *dpooled, const int *len, int T,
                                                               int C) {
    int r = (int)blockIdx.x, b = r / T, L = len ? len[b] : T;
    float w = 1.0f / (float)L;
    if (r % T >= L)
        return;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        dh[(size_t)r * C + c] += w * dpooled[(size_t)b * C + c];
}

/* ======================================================================== */
/* C5. embeddings: tokens, positions, types, hash embeddings                */
/* ======================================================================== */
/* token rows plus learned positions: out[b, t] = tok[tokens[b, t]] + pos[t0 + t] */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_embed_fwd(float *out, const float *tok, const float *pos,
                                                                const int *tokens, int T, int t0, int C) {
    int r = (int)blockIdx.x;
    const float *e = tok + (size_t)tokens[r] * C, *p = pos + (size_t)(t0 + r % T) * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        out[(size_t)r * C + c] = e[c] + p[c];
}

/* d tok[tokens[r]] += d[r]: rows repeat within a batch, so atomics */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_embed_bwd_tok(float *dtok, const float *d, const int *tokens,
                                                                    int C) {
    int r = (int)blockIdx.x;
    float *e = dtok + (size_t)tokens[r] * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        if (MHE__CU_FAULT(4)) /* the test's broken variant: a race between blocks */
            e[c] += d[(size_t)r * C + c];
        else
            atomicAdd(e + c, d[(size_t)r * C + c]);
}

/* a word batch of a hash-emb model (HashFormers eq. 2.12): position r embeds
   its word's bucket row of tok (code >= 0) or a special token's row of
   special (code -1 - s), plus its position. The bucket ids are made on the
   host, once per batch, from the features' per-type buckets (mhe__emb_prepare:
   the CPU's own gather, each word type hashed once by mhe_word_feats_update) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_emb_fwd(float *out, const float *special, const float *tok,
                                                                   const float *pos, const int *codes, int T, int C) {
    int r = (int)blockIdx.x, code = codes[r];
    const float *e = code >= 0 ? tok + (size_t)code * C : special + (size_t)(-1 - code) * C;
    const float *p = pos + (size_t)(r % T) * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        out[(size_t)r * C + c] = e[c] + p[c];
}

/* its backward: words share buckets and special rows repeat, so atomics */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_emb_bwd(float *dspecial, float *dtok, const float *d,
                                                                   const int *codes, int C) {
    int r = (int)blockIdx.x, code = codes[r];
    float *e = code >= 0 ? dtok + (size_t)code * C : dspecial + (size_t)(-1 - code) * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        if (MHE__CU_FAULT(4)) /* the test's broken variant, as mhe__cu_embed_bwd_tok's */
            e[c] += d[(size_t)r * C + c];
        else
            atomicAdd(e + c, d[(size_t)r * C + c]);
}

/* hash-pool, hash-add and hash-proj (HashFormers eq. 2.1, 2.2, 2.3) on a word
   batch: codes[r] is -1 - s for a special token, else the index j of the
   batch's j-th word, whose inputs the host gathered as the CPU does
   (mhe__emb_prepare: pool's chunk indices [nw, n_ch], add's and proj's bits
   [nw, MHE_BITS_BYTES(n_bits)]). A word embeds as mhe__words_fwd: its hash
   embedding plus the regular row, then its position. */
__device__ static inline int mhe__cu_bit(const unsigned char *b, int t) { return (b[t >> 3] >> (7 - (t & 7))) & 1; }

/* a scatter into rows that other blocks share */
__device__ static inline void mhe__cu_scatter(float *p, float v) {
    if (MHE__CU_FAULT(4)) /* the test's broken variant, as mhe__cu_embed_bwd_tok's */
        *p += v;
    else
        atomicAdd(p, v);
}

/* eq. 2.1: e_c = sum_k softmax_k(w[., c]) codebook[idx_k][c] (the softmax over
   chunks per dimension, as mhe__pool_softmax) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_pool_fwd(float *out, const float *special, const float *book,
                                                                    const float *w, const float *regular,
                                                                    const float *pos, const int *codes, const int *idx,
                                                                    int T, int n_ch, int C) {
    int r = (int)blockIdx.x, code = codes[r];
    const float *p = pos + (size_t)(r % T) * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float mx = w[c], s = 0, o = 0;
        if (code < 0) {
            out[(size_t)r * C + c] = special[(size_t)(-1 - code) * C + c] + p[c];
            continue;
        }
        for (int k = 1; k < n_ch; k++)
            mx = fmaxf(mx, w[(size_t)k * C + c]);
        for (int k = 0; k < n_ch; k++)
            s += expf(w[(size_t)k * C + c] - mx);
        for (int k = 0; k < n_ch; k++)
            o += expf(w[(size_t)k * C + c] - mx) / s * book[(size_t)idx[(size_t)code * n_ch + k] * C + c];
        out[(size_t)r * C + c] = (o + (regular ? regular[c] : 0.0f)) + p[c];
    }
}

/* its backward (mhe_hash_pool_bwd): dbook[idx_k][c] += s_kc g_c (row 0 is
   reserved), dw[k][c] += s_kc g_c (E_kc - e_c); rows share both: atomics */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_pool_bwd(float *dbook, float *dw, const float *d,
                                                                    const float *book, const float *w,
                                                                    const int *codes, const int *idx, int n_ch, int C) {
    int r = (int)blockIdx.x, code = codes[r];
    const int *ix = idx + (size_t)(code < 0 ? 0 : code) * n_ch;
    if (code < 0)
        return;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float gv = d[(size_t)r * C + c], mx = w[c], s = 0, e = 0;
        if (gv == 0)
            continue;
        for (int k = 1; k < n_ch; k++)
            mx = fmaxf(mx, w[(size_t)k * C + c]);
        for (int k = 0; k < n_ch; k++)
            s += expf(w[(size_t)k * C + c] - mx);
        for (int k = 0; k < n_ch; k++)
            e += expf(w[(size_t)k * C + c] - mx) / s * book[(size_t)ix[k] * C + c];
        for (int k = 0; k < n_ch; k++) {
            float sk = expf(w[(size_t)k * C + c] - mx) / s, ek = book[(size_t)ix[k] * C + c];
            mhe__cu_scatter(dw + (size_t)k * C + c, sk * gv * (ek - e));
            if (ix[k] != 0)
                mhe__cu_scatter(dbook + (size_t)ix[k] * C + c, sk * gv);
        }
    }
}

/* eq. 2.2: e = sum_t books[t][bit_t] / gamma (gamma = sqrt(n_bits): inv) */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_add_fwd(float *out, const float *special, const float *books,
                                                                   const float *regular, const float *pos,
                                                                   const int *codes, const unsigned char *bits, int T,
                                                                   int n_bits, int C, float inv) {
    int r = (int)blockIdx.x, code = codes[r];
    const float *p = pos + (size_t)(r % T) * C;
    const unsigned char *b = bits + (size_t)(code < 0 ? 0 : code) * ((n_bits + 7) / 8);
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float o = 0;
        if (code < 0) {
            out[(size_t)r * C + c] = special[(size_t)(-1 - code) * C + c] + p[c];
            continue;
        }
        for (int t = 0; t < n_bits; t++)
            o += books[((size_t)t * 2 + mhe__cu_bit(b, t)) * C + c];
        o *= inv;
        out[(size_t)r * C + c] = (o + (regular ? regular[c] : 0.0f)) + p[c];
    }
}

/* its backward: dbooks[t][bit_t] += g / gamma; words share codebook rows */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_add_bwd(float *dbooks, const float *d, const int *codes,
                                                                   const unsigned char *bits, int n_bits, int C,
                                                                   float inv) {
    int r = (int)blockIdx.x, code = codes[r];
    const unsigned char *b = bits + (size_t)(code < 0 ? 0 : code) * ((n_bits + 7) / 8);
    if (code < 0)
        return;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        for (int t = 0; t < n_bits; t++)
            mhe__cu_scatter(dbooks + ((size_t)t * 2 + mhe__cu_bit(b, t)) * C + c, d[(size_t)r * C + c] * inv);
}

/* eq. 2.3's weights, as mhe__proj_weights: wn_j = c_j / max(|c_j|, eps) with
   c_j = w_j - mean(w_j), and |c_j|; one thread per axis j, in double */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_proj_weights(float *wn, float *wnorm, const float *w,
                                                                        int n_bits, int C) {
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    double mean = 0, ss = 0, den;
    if (j >= C)
        return;
    for (int t = 0; t < n_bits; t++)
        mean += w[(size_t)j * n_bits + t];
    mean /= n_bits;
    for (int t = 0; t < n_bits; t++)
        ss += (w[(size_t)j * n_bits + t] - mean) * (w[(size_t)j * n_bits + t] - mean);
    wnorm[j] = (float)sqrt(ss);
    den = sqrt(ss) > 1e-8 ? sqrt(ss) : 1e-8; /* MHE__PROJ_EPS */
    for (int t = 0; t < n_bits; t++)
        wn[(size_t)j * n_bits + t] = (float)((w[(size_t)j * n_bits + t] - mean) / den);
}

/* eq. 2.3 (Pearson correlation of the bits and w_j): e_j = u . wn_j, u the
   centred bits over their clamped norm: u1 for a 1, u0 for a 0 (mhe__proj_bits).
   Keeps e (wout) and u0, u1 (uu) per word for the backward. */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_proj_fwd(float *out, float *wout, float *uu,
                                                                    const float *special, const float *wn,
                                                                    const float *regular, const float *pos,
                                                                    const int *codes, const unsigned char *bits, int T,
                                                                    int n_bits, int C) {
    int r = (int)blockIdx.x, code = codes[r], ones = 0;
    const float *p = pos + (size_t)(r % T) * C;
    const unsigned char *b = bits + (size_t)(code < 0 ? 0 : code) * ((n_bits + 7) / 8);
    double mean, nrm;
    float u0, u1;
    if (code < 0) {
        for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
            out[(size_t)r * C + c] = special[(size_t)(-1 - code) * C + c] + p[c];
        return;
    }
    for (int t = 0; t < n_bits; t++)
        ones += mhe__cu_bit(b, t);
    mean = (double)ones / n_bits;
    nrm = sqrt((double)ones * (double)(n_bits - ones) / n_bits);
    nrm = nrm < 1e-8 ? 1e-8 : nrm;
    u0 = (float)(-mean / nrm);
    u1 = (float)((1.0 - mean) / nrm);
    if (threadIdx.x == 0) {
        uu[(size_t)code * 2] = u0;
        uu[(size_t)code * 2 + 1] = u1;
    }
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x) {
        float e = 0;
        for (int t = 0; t < n_bits; t++)
            e += (mhe__cu_bit(b, t) ? u1 : u0) * wn[(size_t)c * n_bits + t];
        wout[(size_t)code * C + c] = e;
        out[(size_t)r * C + c] = (e + (regular ? regular[c] : 0.0f)) + p[c];
    }
}

/* its backward (mhe_hash_proj_bwd): dw_jt += g_j (u_t - wn_jt e_j) / |c_j|, or
   g_j u_t / eps where |c_j| is clamped; one thread per weight, the batch's
   rows in order, so no two threads share an output */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_proj_bwd(float *dw, const float *d, const float *wn,
                                                                    const float *wnorm, const float *wout,
                                                                    const float *uu, const int *codes,
                                                                    const unsigned char *bits, int rows, int n_bits,
                                                                    int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int j, t, clamped;
    float acc = 0, den;
    if (i >= (int64_t)C * n_bits)
        return;
    j = (int)(i / n_bits);
    t = (int)(i % n_bits);
    clamped = !(wnorm[j] > 1e-8f);
    den = clamped ? 1e-8f : wnorm[j];
    for (int r = 0; r < rows; r++) {
        int code = codes[r];
        float gv, u;
        if (code < 0)
            continue;
        gv = d[(size_t)r * C + j] / den;
        u = uu[(size_t)code * 2 + mhe__cu_bit(bits + (size_t)code * ((n_bits + 7) / 8), t)];
        acc += gv * u;
        if (!clamped)
            acc -= gv * wout[(size_t)code * C + j] * wn[i];
    }
    dw[i] += acc;
}

/* the special rows' and the regular row's gradients of a hash-pool, -add or
   -proj batch: specials repeat and every word adds to the regular row */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_hash_words_bwd(float *dspecial, float *dregular, const float *d,
                                                                     const int *codes, int C) {
    int r = (int)blockIdx.x, code = codes[r];
    float *e = code >= 0 ? dregular : dspecial + (size_t)(-1 - code) * C;
    if (!e)
        return;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        mhe__cu_scatter(e + c, d[(size_t)r * C + c]);
}

/* d pos[t] += sum_b d[b, t]: one thread per (t, c), sequences in order */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_embed_bwd_pos(float *dpos, const float *d, int B, int T, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    if (i >= (int64_t)T * C)
        return;
    for (int b = 0; b < B; b++)
        s += d[(size_t)b * T * C + i];
    dpos[i] += s;
}

/* out[r] += table[idx[r]]: BERT's token-type rows onto the embeddings */
__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_add_rows(float *out, const float *table, const int *idx, int C) {
    int r = (int)blockIdx.x;
    const float *e = table + (size_t)idx[r] * C;
    for (int c = (int)threadIdx.x; c < C; c += (int)blockDim.x)
        out[(size_t)r * C + c] += e[c];
}

/* a hashed word batch's embeddings into g->emb (g->tokens holds its codes),
   as mhe__words_fwd plus the positions */
static mhe_status mhe__cu_words_fwd(mhe_cuda_model *g, int rows, int T) {
    mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, nb = c->hash_bits;
    const float *sp = MHE__CU_P(g, m->special_emb), *reg = MHE__CU_P(g, m->regular_emb), *pos = MHE__CU_P(g, m->pos_emb);
    const int *codes = g->tokens;
    switch (g->hashed) {
    case MHE_EMB_HASH_EMB:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_emb_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->emb, sp,
                                   (const float *)MHE__CU_P(g, m->tok_emb), pos, codes, T, C), "hash embedding");
        break;
    case MHE_EMB_HASH_POOL:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_pool_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->emb, sp,
                                   (const float *)MHE__CU_P(g, m->pool_codebook), (const float *)MHE__CU_P(g, m->pool_w),
                                   reg, pos, codes, (const int *)g->hw_in, T, mhe_hash_pool_chunks(nb, c->hash_chunk), C),
                    "hash-pool embedding");
        break;
    case MHE_EMB_HASH_ADD:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_add_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->emb, sp,
                                   (const float *)MHE__CU_P(g, m->add_books), reg, pos, codes,
                                   (const unsigned char *)g->hw_in, T, nb, C, 1.0f / sqrtf((float)nb)),
                    "hash-add embedding");
        break;
    default:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_proj_weights, dim3(mhe__cu_blocks(C, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                                   g->hw_wn, g->hw_wnorm, (const float *)MHE__CU_P(g, m->proj_w), nb, C),
                    "hash-proj weights");
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_proj_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->emb, g->hw_out, g->hw_uu,
                                   sp, (const float *)g->hw_wn, reg, pos, codes, (const unsigned char *)g->hw_in, T, nb,
                                   C),
                    "hash-proj embedding");
        break;
    }
    return MHE_OK;
}

/* its backward from g->d_h, as mhe__words_bwd (the positions' apart) */
/* d: the gradient at the embeddings' output (after the embedding dropout's mask) */
static mhe_status mhe__cu_words_bwd(mhe_cuda_model *g, const float *d, int rows) {
    mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, nb = c->hash_bits;
    const int *codes = g->tokens;
    if (g->hashed == MHE_EMB_HASH_EMB) {
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_emb_bwd, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->special_emb),
                                   MHE__CU_G(g, m->tok_emb), d, codes, C), "hash embedding backward");
        return MHE_OK;
    }
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_words_bwd, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->special_emb),
                               MHE__CU_G(g, m->regular_emb), d, codes, C), "special and regular rows backward");
    switch (g->hashed) {
    case MHE_EMB_HASH_POOL:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_pool_bwd, dim3(rows), dim3(MHE__CU_EW), 0,
                                   MHE__CU_G(g, m->pool_codebook), MHE__CU_G(g, m->pool_w), d,
                                   (const float *)MHE__CU_P(g, m->pool_codebook), (const float *)MHE__CU_P(g, m->pool_w),
                                   codes, (const int *)g->hw_in, mhe_hash_pool_chunks(nb, c->hash_chunk), C),
                    "hash-pool backward");
        break;
    case MHE_EMB_HASH_ADD:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_add_bwd, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->add_books), d,
                                   codes, (const unsigned char *)g->hw_in, nb, C, 1.0f / sqrtf((float)nb)),
                    "hash-add backward");
        break;
    default:
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_hash_proj_bwd, dim3(mhe__cu_blocks((int64_t)C * nb, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->proj_w), d, (const float *)g->hw_wn,
                                   (const float *)g->hw_wnorm, (const float *)g->hw_out, (const float *)g->hw_uu, codes,
                                   (const unsigned char *)g->hw_in, rows, nb, C),
                    "hash-proj backward");
        break;
    }
    return MHE_OK;
}

/* ======================================================================== */
/* C6. the optimizer: AdamW and clipping                                    */
/* ======================================================================== */
/* AdamW (Loshchilov and Hutter 2019, Algorithm 2) in PyTorch's order with
   the CPU's arithmetic (mhe_adamw_update): step = lr / bc1, decay = 1 - lr wd;
   gs scales the gradient first (clipping), as mhe_clip_grad_norm does. One
   launch for every tensor (PyTorch's fused/multi-tensor AdamW does the
   same): block b updates chunk b, a slice of one tensor, with decay only
   where the tensor decays (a chunk without it multiplies by 1: the same
   bits as no decay). */
#define MHE__CU_ADAM_CHUNK (MHE__CU_EW * 16) /* elements per block */

__global__ __launch_bounds__(MHE__CU_EW) void mhe__cu_adamw(float *p, float *g, float *m, float *v,
                                                            const mhe_cuda_adam_chunk *chunks, float gs,
                                                            const float *gs_dev, float step, float decay, float b1,
                                                            float b2, float eps, float bc2_sqrt) {
    mhe_cuda_adam_chunk c = chunks[blockIdx.x];
    float d = c.decay ? decay : 1.0f;
    for (int j = (int)threadIdx.x; j < c.n; j += (int)blockDim.x) {
        int64_t i = c.off + j;
        /* a deferred step: the scale from mhe__cu_clip_scale, 0 for no update (read in the loop: kept
           across the division's slow-path call, it would take a register that sm_90 spills) */
        float s = gs_dev ? __ldg(gs_dev) : gs;
        if (!(s > 0.0f))
            break;
        float gi = s == 1.0f ? g[i] : g[i] * s;
        g[i] = gi;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] = p[i] * d - step * m[i] / (sqrtf(v[i]) / bc2_sqrt + eps);
    }
}

/* a deferred step's clipping on the device, as mhe__cu_update does it on the host (the same float
   operations): stats[1] the gradients' sum of squares, norm = sqrt of it; stats[2] = AdamW's
   scale, clip / (norm + 1e-6) past clip, or 0 (no update) once a norm was not finite, that
   step + 1 in stats[3] and its norm in stats[4] (steps below 2^24 are exact as floats) */
__global__ __launch_bounds__(32) void mhe__cu_clip_scale(float *stats, float clip, int step) {
    if (threadIdx.x != 0)
        return;
    float norm = sqrtf(stats[1]);
    if (stats[3] == 0.0f && !isfinite(norm)) {
        stats[3] = (float)step + 1.0f;
        stats[4] = norm;
    }
    stats[2] = stats[3] != 0.0f ? 0.0f : clip > 0.0f && norm > clip ? clip / (norm + 1e-6f) : 1.0f;
}

/* clipping and AdamW on the device, as mhe__trainer_update after the backward */
static mhe_status mhe__cu_update(mhe_cuda_trainer *t, mhe_cuda_model *g) {
    mhe_trainer *ht = &t->host;
    mhe_model *m = g->host;
    const mhe_train_config *tc = &ht->tc;
    double sq = 0;
    float norm, gs = 1.0f, lr, bc1, bc2;
    if (t->deferred) { /* no copy: the norm, the clipping scale and the loss stay on the device */
        MHE__CU_MHE(mhe__cu_reduce_dev(g, g->grads, m->n_params, 1, t->stats + 1));
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_clip_scale, dim3(1), dim3(32), 0, t->stats, tc->clip, ht->step),
                    "clipping scale");
        lr = mhe_lr_at(tc, ht->step);
        ht->last_lr = lr;
        bc1 = 1.0f - powf(tc->beta1, (float)(ht->step + 1));
        bc2 = 1.0f - powf(tc->beta2, (float)(ht->step + 1));
        if (t->n_adam_chunks > 0)
            MHE__CU_TRY(mhe__cu_launch(mhe__cu_adamw, dim3((unsigned)t->n_adam_chunks), dim3(MHE__CU_EW), 0,
                                       g->params, g->grads, t->adam_m, t->adam_v,
                                       (const mhe_cuda_adam_chunk *)t->adam_chunks, 1.0f,
                                       (const float *)(t->stats + 2), lr / bc1, 1.0f - lr * tc->weight_decay,
                                       tc->beta1, tc->beta2, tc->eps, sqrtf(bc2)),
                        "AdamW");
        MHE__CU_TRY(mhe__cu_copy(t->stats_host, t->stats, 5 * sizeof(float), cudaMemcpyDeviceToHost),
                    "statistics to the host");
        t->stats_count = g->last_count;
        t->stats_pending = 1;
        ht->step++;
        return MHE_OK;
    }
    MHE__CU_MHE(mhe__cu_reduce(g, g->grads, m->n_params, 1, &sq));
    norm = (float)sqrt(sq);
    ht->last_grad_norm = norm;
    if (!mhe__is_finite(norm))
        return mhe__fail(g->err, MHE_ERR_NONFINITE, "gradient norm is %g at step %d; no update made", (double)norm,
                         ht->step);
    if (tc->clip > 0 && norm > tc->clip)
        gs = tc->clip / (norm + 1e-6f);
    lr = mhe_lr_at(tc, ht->step);
    ht->last_lr = lr;
    bc1 = 1.0f - powf(tc->beta1, (float)(ht->step + 1));
    bc2 = 1.0f - powf(tc->beta2, (float)(ht->step + 1));
    if (t->n_adam_chunks > 0)
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_adamw, dim3((unsigned)t->n_adam_chunks), dim3(MHE__CU_EW), 0, g->params,
                                   g->grads, t->adam_m, t->adam_v, (const mhe_cuda_adam_chunk *)t->adam_chunks, gs,
                                   (const float *)NULL, lr / bc1, 1.0f - lr * tc->weight_decay, tc->beta1, tc->beta2, tc->eps, sqrtf(bc2)),
                    "AdamW");
    ht->step++;
    return MHE_OK;
}

/* ======================================================================== */
/* C7. the device model: layout, forward, backward, evaluation              */
/* ======================================================================== */
/* The CPU driver's structure, call for call (mhe.h sections 5 and 7):
   sublayers enter and leave through the same norms and residuals, chain 1
   projects Q|K|V in one GEMM and runs the kind's core, and decoding is the
   forward pass of the new rows (a prompt, or one token) whose K and V join
   the cache the core reads. */

/* ---- chain 1 on the device: a self-attention sublayer ------------------------- */

/* Q|K|V of a sublayer into a->proj [rows, proj_w], by kind: one GEMM (the
   softmax kinds, taylor, nonapprox, and rndemb-qk / fixedseq-qk inside
   their own stream); Q|K of the fixed stream at this layer, the same for
   every sequence, and V from u (rndemb-qk, fixedseq-qk, eq. 4.10, 4.12;
   decoding reads Q|K from the cache); or Q|K from N(e), the stream's block-0
   input through this sublayer's norm (e itself post-norm), and V from u
   (staticemb-qk, eq. 4.13). W^Q, W^K, W^V are adjacent, and their biases. */
static mhe_status mhe__cu_project(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                  const float *u) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    const mhe_attn_weights *w = &y->attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T;
    if (ops->qk == MHE__CU_QK_FIXED && !x->fixed) {
        if (!g->cache)
            MHE__CU_TRY(mhe__cu_launch(mhe__cu_copy_rows, dim3(mhe__cu_blocks((int64_t)rows * 2 * HD, MHE__CU_EW)),
                                       dim3(MHE__CU_EW), 0, a->proj, 3 * HD,
                                       (const float *)g->fixed_layer[l].proj, 3 * HD, rows, 2 * HD, x->T),
                        "the fixed stream's Q, K");
        return mhe__cu_linear_fwd(g, a->proj + 2 * HD, 3 * HD, u, MHE__CU_P(g, w->wv), MHE__CU_P(g, w->bv), rows,
                                  C, HD);
    }
    if (ops->qk == MHE__CU_QK_STATIC) {
        const float *ne = x->emb;
        if (!c->post_norm) { /* N(e) [rows, C], mean, rstd in ext (mhe__static_in) */
            MHE__CU_MHE(mhe__cu_norm_fwd(g, a->ext, a->ext + (size_t)rows * C, a->ext + (size_t)rows * (C + 1),
                                         x->emb, y->norm1_w, y->norm1_b, rows));
            ne = a->ext;
        }
        MHE__CU_MHE(mhe__cu_linear_fwd(g, a->proj, 3 * HD, ne, MHE__CU_P(g, w->wq), MHE__CU_P(g, w->bq), rows, C,
                                       2 * HD));
        return mhe__cu_linear_fwd(g, a->proj + 2 * HD, 3 * HD, u, MHE__CU_P(g, w->wv), MHE__CU_P(g, w->bv), rows,
                                  C, HD);
    }
    MHE__CU_MHE(mhe__cu_linear_fwd(g, a->proj, geo.proj_w, u, MHE__CU_P(g, w->wq), MHE__CU_P(g, w->bq), rows, C,
                                   geo.proj_w));
    if (ops->v_bias && w->bv)
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_add_cols, dim3(mhe__cu_blocks((int64_t)rows * w->bv->size, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, a->proj, geo.proj_w, geo.q_w + geo.k_w,
                                   (const float *)MHE__CU_P(g, w->bv), (int)w->bv->size, rows), "collab value bias");
    return MHE_OK;
}

/* the attention branch of the kinds with a core (mhe__cu_kind_ops.branch_fwd / _bwd): project,
   the core (decoding: with the cache), W^O */
static mhe_status mhe__cu_attn_branch_fwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                          const float *u, float *out) {
    const mhe_config *c = &g->host->cfg;
    const mhe_attn_weights *w = &g->host->layers[l].attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, ks;
    const float *k, *v;
    MHE__CU_MHE(mhe__cu_project(g, ops, x, l, u));
    if (g->cache) {
        MHE__CU_MHE(ops->decode(g, ops, l, x->T, u));
    } else {
        mhe__kv_ptrs(&geo, a->proj + geo.q_w, geo.proj_w, u, C, &k, &ks, &v);
        MHE__CU_MHE(mhe__cu_attn_core_fwd(g, ops, a, l, 0, x->B, x->T, x->T, 0, x->len, a->proj, geo.proj_w, k, ks,
                                          v, ks));
    }
    return mhe__cu_linear_fwd(g, out, C, a->att, MHE__CU_P(g, w->wo), MHE__CU_P(g, w->bo), rows, HD, C);
}

static mhe_status mhe__cu_attn_branch_bwd(mhe_cuda_model *g, const mhe__cu_kind_ops *ops, const mhe__cu_ctx *x, int l,
                                          const float *u, const float *d_out, float *du) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    const mhe_attn_weights *w = &y->attn;
    mhe_cuda_layer_acts *a = &x->la[l];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, ks;
    const float *k, *v;
    float *dk, *dv, *dqk = g->d_qk + (size_t)l * g->cap_T * 2 * HD;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_att, (size_t)rows * HD));
    MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_att, MHE__CU_G(g, w->wo), MHE__CU_G(g, w->bo), d_out, C, a->att,
                                   MHE__CU_P(g, w->wo), rows, HD, C));
    MHE__CU_MHE(mhe__cu_zero(g, g->d_proj, (size_t)rows * geo.proj_w));
    mhe__kv_ptrs(&geo, a->proj + geo.q_w, geo.proj_w, u, C, &k, &ks, &v);
    dk = geo.k_w ? g->d_proj + geo.q_w : du;
    dv = geo.v_w ? dk + geo.k_w : dk;
    MHE__CU_MHE(mhe__cu_attn_core_bwd(g, ops, a, l, 0, x->B, x->T, x->T, x->len, a->proj, geo.proj_w, k, ks, v,
                                      g->d_proj, dk, dv));
    if (ops->qk == MHE__CU_QK_FIXED && !x->fixed) { /* d Q|K to the fixed stream (summed over the batch), d V to u */
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_sum_rows, dim3(mhe__cu_blocks((int64_t)x->T * 2 * HD, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, dqk, 2 * HD, (const float *)g->d_proj, 3 * HD, x->B, x->T,
                                   2 * HD), "fixed Q, K gradient");
        return mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->wv), MHE__CU_G(g, w->bv), g->d_proj + 2 * HD, 3 * HD, u,
                                  MHE__CU_P(g, w->wv), rows, C, HD);
    }
    if (ops->qk == MHE__CU_QK_FIXED) /* the fixed stream: its own attention plus what the batch asks of its Q|K */
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_sum_rows, dim3(mhe__cu_blocks((int64_t)x->T * 2 * HD, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, g->d_proj, 3 * HD, (const float *)dqk, 2 * HD, 1, x->T,
                                   2 * HD), "fixed Q, K gradient");
    if (ops->qk == MHE__CU_QK_STATIC) { /* d N(e) in d_tmp, then into d_emb through the norm */
        const float *ne = c->post_norm ? x->emb : a->ext;
        MHE__CU_MHE(mhe__cu_zero(g, g->d_tmp, (size_t)rows * C));
        MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_tmp, MHE__CU_G(g, w->wq), MHE__CU_G(g, w->bq), g->d_proj, 3 * HD, ne,
                                       MHE__CU_P(g, w->wq), rows, C, 2 * HD));
        if (c->post_norm)
            MHE__CU_MHE(mhe__cu_axpby_m(g, x->d_emb, x->d_emb, g->d_tmp, (int64_t)rows * C));
        else
            MHE__CU_MHE(mhe__cu_norm_bwd(g, x->d_emb, g->d_tmp, x->emb, y->norm1_w, y->norm1_b,
                                         a->ext + (size_t)rows * C, a->ext + (size_t)rows * (C + 1), rows));
        return mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->wv), MHE__CU_G(g, w->bv), g->d_proj + 2 * HD, 3 * HD, u,
                                  MHE__CU_P(g, w->wv), rows, C, HD);
    }
    MHE__CU_MHE(mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->wq), MHE__CU_G(g, w->bq), g->d_proj, geo.proj_w, u,
                                   MHE__CU_P(g, w->wq), rows, C, geo.proj_w));
    if (ops->v_bias && w->bv) /* b^V: the column sums of its V columns */
        MHE__CU_MHE(mhe__cu_colsums(g, MHE__CU_G(g, w->bv), NULL, g->d_proj + geo.q_w + geo.k_w, geo.proj_w, rows,
                                    (int)w->bv->size, NULL, NULL, NULL, 0));
    return MHE_OK;
}

/* ---- a row per kind ------------------------------------------------------------ */

/* The device's attention kinds, one row per MHE_ATTN_* kind in the enum's order: a kind of an
   existing family is its row. A kind added to mhe.h without a row here stays on the CPU
   (mhe_cuda_supports refuses it). */
static constexpr mhe__cu_kind_ops mhe__cu_kinds[MHE_ATTN_KIND_COUNT] = {
    {MHE_ATTN_MHA, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd, mhe__cu_core_softmax_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_SHA, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_sha_fwd, mhe__cu_core_sha_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_MQA, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd, mhe__cu_core_softmax_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_GQA, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd, mhe__cu_core_softmax_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_SKV, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd, mhe__cu_core_softmax_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_EL_ATT, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd,
     mhe__cu_core_softmax_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_MHE_ADD, MHE__CU_QK_U, 0, 1, MHE__CU_STATE_NONE, mhe__cu_dims_add, mhe__cu_core_add_fwd,
     mhe__cu_core_add_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_MHE_MUL, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, mhe__cu_dims_mul, mhe__cu_core_mul_fwd,
     mhe__cu_core_mul_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_MLP, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, NULL, NULL, mhe__cu_gated_fwd_m, mhe__cu_gated_bwd_m,
     NULL},
    {MHE_ATTN_TAYLOR, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_TAYLOR, NULL, mhe__cu_core_taylor_fwd,
     mhe__cu_core_taylor_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_taylor},
    {MHE_ATTN_NONAPPROX, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_SCAN, NULL, mhe__cu_core_scan_fwd, mhe__cu_core_scan_bwd,
     mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_scan},
    {MHE_ATTN_RNDEMB_QK, MHE__CU_QK_FIXED, 0, 0, MHE__CU_STATE_FIXED, NULL, mhe__cu_core_softmax_fwd,
     mhe__cu_core_softmax_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_fixed},
    {MHE_ATTN_FIXEDSEQ_QK, MHE__CU_QK_FIXED, 0, 0, MHE__CU_STATE_FIXED, NULL, mhe__cu_core_softmax_fwd,
     mhe__cu_core_softmax_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_fixed},
    {MHE_ATTN_STATICEMB_QK, MHE__CU_QK_STATIC, 0, 0, MHE__CU_STATE_NONE, NULL, mhe__cu_core_softmax_fwd,
     mhe__cu_core_softmax_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
    {MHE_ATTN_FNET, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, NULL, NULL, mhe__cu_fnet_fwd, mhe__cu_fnet_bwd,
     NULL},
    {MHE_ATTN_LINEAR, MHE__CU_QK_U, 0, 0, MHE__CU_STATE_NONE, NULL, NULL, NULL, mhe__cu_linmix_fwd,
     mhe__cu_linmix_bwd, NULL},
    {MHE_ATTN_COLLAB, MHE__CU_QK_U, 1, 0, MHE__CU_STATE_NONE, mhe__cu_dims_collab, mhe__cu_core_softmax_fwd,
     mhe__cu_core_softmax_bwd, mhe__cu_attn_branch_fwd, mhe__cu_attn_branch_bwd, mhe__cu_decode_kv},
};

/* every row is its own kind's, or empty */
static constexpr int mhe__cu_kinds_in_order(int i) {
    return i == MHE_ATTN_KIND_COUNT ||
           ((mhe__cu_kinds[i].kind == i || !mhe__cu_kinds[i].branch_fwd) && mhe__cu_kinds_in_order(i + 1));
}
static_assert(mhe__cu_kinds_in_order(0), "mhe__cu_kinds: one row per kind, in the order of mhe.h's enum");

/* the row of a kind with a device path, else NULL */
static const mhe__cu_kind_ops *mhe__cu_kind(int kind) {
    return kind >= 0 && kind < MHE_ATTN_KIND_COUNT && mhe__cu_kinds[kind].branch_fwd ? &mhe__cu_kinds[kind] : NULL;
}

MHEDEF mhe_status mhe_cuda_supports(const mhe_config *c, char *err) {
    int l;
    if (!c)
        return mhe__fail(err, MHE_ERR_ARG, "mhe_cuda_supports: config is NULL");
    for (l = 0; l < c->n_layers; l++) {
        int kind = mhe_config_layer_kind(c, l);
        if (kind >= MHE_ATTN_KIND_COUNT) /* its functions are host code: nothing to launch */
            return mhe__fail(err, MHE_ERR_CONFIG,
                             "layer %d: attn=%s is a kind registered by the program, which runs on the CPU only", l,
                             mhe_attn_kind_name(kind));
        if (!mhe__cu_kind(kind))
            return mhe__fail(err, MHE_ERR_CONFIG, "layer %d: attn=%s has no device path; it runs on the CPU path", l,
                             mhe_attn_kind_name(kind));
    }
    for (l = 0; c->arch == MHE_ARCH_ENCDEC && l < c->enc_layers; l++)
        if (!mhe__cu_kind(c->enc_attn[l]))
            return mhe__fail(err, MHE_ERR_CONFIG, "encoder layer %d: enc_attn=%s has no device path; it runs on the CPU path%s",
                             l, mhe_attn_kind_name(c->enc_attn[l]),
                             c->enc_attn[l] >= MHE_ATTN_KIND_COUNT ? " (a kind registered by the program)" : "");
    for (l = 0; c->arch == MHE_ARCH_ENCDEC && l < c->n_layers; l++)
        if (!mhe__cu_kind(c->cross_attn[l]))
            return mhe__fail(err, MHE_ERR_CONFIG, "layer %d: cross_attn=%s has no device path; it runs on the CPU path",
                             l, mhe_attn_kind_name(c->cross_attn[l]));
    for (l = 0; l < c->n_layers; l++)
        if ((mhe_config_layer_kind(c, l) == MHE_ATTN_COLLAB ||
             (c->arch == MHE_ARCH_ENCDEC && (c->cross_attn[l] == MHE_ATTN_COLLAB || c->enc_attn[l] == MHE_ATTN_COLLAB))) &&
            mhe_config_collab_dim(c) > MHE_MAX_D_HEAD)
            return mhe__fail(err, MHE_ERR_CONFIG, "collab_dim %d exceeds the device attention limit %d",
                             mhe_config_collab_dim(c), MHE_MAX_D_HEAD);
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_device(char *name, size_t len, int *major, int *minor, char *err) {
    int count = 0;
    cudaDeviceProp prop;
    cudaFuncAttributes fa;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1)
        return mhe__fail(err, MHE_ERR_DEVICE, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return mhe__cu_status(e, err, "cudaGetDeviceProperties");
    /* a binary without code for this GPU fails here, not with a wrong result later */
    if ((e = cudaFuncGetAttributes(&fa, mhe__cu_axpby)) != cudaSuccess)
        return mhe__fail(err, MHE_ERR_DEVICE, "no kernel image for %s (compute capability %d.%d) in this binary: %s; rebuild "
                         "with make cuda CUDA_ARCH=sm_%d%d", prop.name, prop.major, prop.minor, cudaGetErrorString(e),
                         prop.major, prop.minor);
    if (name && len)
        snprintf(name, len, "%s", prop.name);
    if (major)
        *major = prop.major;
    if (minor)
        *minor = prop.minor;
    return MHE_OK;
}

/* ---- device memory layout -------------------------------------------------- */

/* take n floats (64-byte aligned) at byte offset *off; with base NULL only counts */
static float *mhe__cu_take(size_t *off, char *base, size_t n) {
    size_t at = *off;
    *off += (n * sizeof(float) + 63) & ~(size_t)63;
    return base ? (float *)(base + at) : NULL;
}

/* 1 when a self-attention sublayer of the layers l0 .. l1-1 has this kind */
static int mhe__cu_kind_in(const mhe_model *m, int l0, int l1, int kind) {
    int l;
    for (l = l0; l < l1; l++)
        if (m->layers[l].attn.kind == kind)
            return 1;
    return 0;
}

/* 1 when a cross-attention sublayer (encdec) has this kind */
static int mhe__cu_cross_has(const mhe_model *m, int kind) {
    int l;
    for (l = 0; l < m->n_total_layers; l++)
        if (m->layers[l].cross.kind == kind)
            return 1;
    return 0;
}

/* ... of any stack (encdec: encoder layers 0 .. E-1, then the decoder's), or a cross-attention */
static int mhe__cu_has_kind(const mhe_model *m, int kind) {
    return mhe__cu_kind_in(m, 0, m->n_total_layers, kind) || mhe__cu_cross_has(m, kind);
}

/* what one stream keeps for the backward, layers 0 .. top-1 over rows (T:
   the longer of the decoder's and the source's lengths, encdec); the widest
   projection and attention output, and the core's backward scratch. A
   decoder layer of encdec also keeps its cross-attention sublayer (norm
   slot 1, and g->cross[l]: Q [rows, q_w], the source's K|V, the core's
   output and statistics). */
static void mhe__cu_layers_layout(mhe_cuda_model *g, mhe_cuda_layer_acts *la, int top, int B, int T, char *base,
                                  size_t *cur, size_t *max_proj, size_t *max_att, size_t *max_scr) {
    const mhe_config *c = &g->host->cfg;
    size_t rows = (size_t)B * T, C = (size_t)c->d_model, F = (size_t)mhe_config_d_ff(c), n = (size_t)c->n_heads;
    size_t HD = n * (size_t)mhe_config_d_head(c);
    int l, k;
    for (l = 0; la == g->layer && l < top; l++) {
        const mhe_attn_weights *w = &g->host->layers[l].cross;
        mhe_cuda_layer_acts *a = &g->cross[l];
        mhe__geom geo;
        mhe_attn_dims d;
        mhe_attn_grads gr;
        size_t scr;
        if (w->kind < 0) {
            memset(a, 0, sizeof *a);
            continue;
        }
        geo = mhe__layer_geom(c, w->kind);
        d = mhe__attn_dims(g->host, w, 0, B, T, T, 0, NULL);
        memset(&gr, 0, sizeof gr);
        if (mhe__cu_kinds[w->kind].dims)
            mhe__cu_kinds[w->kind].dims(g, w, &d, &gr, g->params, geo.k_w + geo.v_w, g->params, g->params, g->params);
        scr = mhe__cu_attn_bwd_floats(&d);
        la[l].nrm[1] = mhe__cu_take(cur, base, rows * C);
        la[l].sum[1] = mhe__cu_take(cur, base, rows * C);
        la[l].mean[1] = mhe__cu_take(cur, base, rows);
        la[l].rstd[1] = mhe__cu_take(cur, base, rows);
        a->proj = mhe__cu_take(cur, base, rows * (size_t)geo.q_w);
        a->kv = mhe__cu_take(cur, base, rows * (size_t)(geo.k_w + geo.v_w));
        a->att = mhe__cu_take(cur, base, rows * (size_t)geo.att_w);
        a->lse = mhe__cu_take(cur, base, rows * n);
        a->hmap = mhe__cu_take(cur, base, 2 * HD);
        a->kb = mhe__cu_take(cur, base, rows * n);
        /* staticemb-qk: N3(e) of the queries, then of the source, each with its mean and rstd */
        a->ext = mhe__cu_take(cur, base, mhe__cu_kinds[w->kind].qk == MHE__CU_QK_STATIC ? 2 * rows * (C + 2) : 0);
        /* the backward's d_proj holds d Q [rows, q_w] and d K|V [rows, k_w + v_w] */
        if ((size_t)(geo.q_w + geo.k_w + geo.v_w) > *max_proj)
            *max_proj = (size_t)(geo.q_w + geo.k_w + geo.v_w);
        if ((size_t)geo.att_w > *max_att)
            *max_att = (size_t)geo.att_w;
        if (scr > *max_scr)
            *max_scr = scr;
    }
    for (l = 0; l < top; l++) {
        mhe_cuda_layer_acts *a = &la[l];
        const mhe_attn_weights *w = &g->host->layers[l].attn;
        mhe__geom geo = mhe__layer_geom(c, w->kind);
        mhe_attn_dims d = mhe__attn_dims(g->host, w, 0, B, T, T, 1, NULL);
        mhe_attn_grads gr;
        size_t scr;
        /* the backward's scratch depends on the maps the kind sets; any non-NULL pointer stands for them here */
        memset(&gr, 0, sizeof gr);
        if (mhe__cu_kinds[w->kind].dims)
            mhe__cu_kinds[w->kind].dims(g, w, &d, &gr, g->params, geo.proj_w, g->params, g->params, g->params);
        scr = mhe__cu_attn_bwd_floats(&d);
        for (k = 0; k < 3; k += 2) {
            a->nrm[k] = mhe__cu_take(cur, base, rows * C);
            a->sum[k] = mhe__cu_take(cur, base, rows * C);
            a->mean[k] = mhe__cu_take(cur, base, rows);
            a->rstd[k] = mhe__cu_take(cur, base, rows);
        }
        a->proj = mhe__cu_take(cur, base, rows * (size_t)geo.proj_w);
        a->att = mhe__cu_take(cur, base, rows * (size_t)geo.att_w);
        a->lse = mhe__cu_take(cur, base, rows * n);
        a->hmap = mhe__cu_take(cur, base, 2 * HD);
        a->kb = mhe__cu_take(cur, base, rows * n);
        a->ext = mhe__cu_take(cur, base, mhe__cu_kinds[w->kind].qk == MHE__CU_QK_STATIC ? rows * (C + 2) : 0);
        a->fc1 = mhe__cu_take(cur, base, rows * F);
        a->act = mhe__cu_take(cur, base, rows * F);
        if ((size_t)geo.proj_w > *max_proj)
            *max_proj = (size_t)geo.proj_w;
        if ((size_t)geo.att_w > *max_att)
            *max_att = (size_t)geo.att_w;
        if (scr > *max_scr)
            *max_scr = scr;
    }
}

static size_t mhe__cu_acts_layout(mhe_cuda_model *g, char *base, int B, int T) {
    const mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    size_t rows = (size_t)B * T, C = (size_t)c->d_model, F = (size_t)mhe_config_d_ff(c), n = (size_t)c->n_heads;
    size_t HD = n * (size_t)mhe_config_d_head(c), V = (size_t)c->vocab_size, max_proj = 0, max_att = HD, max_scr = 0;
    size_t cur = 0;
    int fnet = mhe__cu_has_kind(m, MHE_ATTN_FNET), top = m->fixed.kind >= 0 ? m->fixed.top : 0, E = mhe__n_enc(c);
    mhe__cu_layers_layout(g, g->layer, m->n_total_layers, B, T, base, &cur, &max_proj, &max_att, &max_scr);
    /* the fixed stream: one sequence of T, through the blocks below top */
    mhe__cu_layers_layout(g, g->fixed_layer, top, 1, T, base, &cur, &max_proj, &max_att, &max_scr);
    g->fixed_emb = mhe__cu_take(&cur, base, top ? (size_t)T * C : 0);
    g->d_qk = mhe__cu_take(&cur, base, (size_t)top * T * 2 * HD);
    g->emb = mhe__cu_take(&cur, base, rows * C);
    g->fin = mhe__cu_take(&cur, base, rows * C);
    g->fin_mean = mhe__cu_take(&cur, base, rows);
    g->fin_rstd = mhe__cu_take(&cur, base, rows);
    g->logits = mhe__cu_take(&cur, base, rows * V);
    g->losses = mhe__cu_take(&cur, base, rows);
    g->branch = mhe__cu_take(&cur, base, rows * C);
    g->partial = mhe__cu_take(&cur, base, 1025); /* block partials, then their sum */
    g->colpart = mhe__cu_take(&cur, base, MHE__CU_COLPART);
    g->gemm_ws = mhe__cu_take(&cur, base, MHE__CU_SPLITK_WS);
    g->attn_scratch = mhe__cu_take(&cur, base, max_scr);
    g->d_h = mhe__cu_take(&cur, base, rows * C);
    g->d_u = mhe__cu_take(&cur, base, rows * C);
    g->d_tmp = mhe__cu_take(&cur, base, rows * C);
    g->d_att = mhe__cu_take(&cur, base, rows * max_att);
    g->d_proj = mhe__cu_take(&cur, base, rows * max_proj);
    g->d_fc1 = mhe__cu_take(&cur, base, rows * F);
    g->d_act = mhe__cu_take(&cur, base, rows * F);
    g->d_logits = mhe__cu_take(&cur, base, rows * V);
    g->d_hmap = mhe__cu_take(&cur, base, 2 * HD);
    g->d_kb = mhe__cu_take(&cur, base, rows * n);
    g->d_emb = mhe__cu_take(&cur, base, mhe__cu_has_kind(m, MHE_ATTN_STATICEMB_QK) ? rows * C : 0);
    g->mix = mhe__cu_take(&cur, base, fnet ? rows * 2 * C : 0);
    g->dft = mhe__cu_take(&cur, base, fnet ? 2 * C * C + 2 * (size_t)T * T : 0);
    g->tokens = (int *)mhe__cu_take(&cur, base, rows);
    {
        int emb = c->embedding, nbits = c->hash_bits, proj = emb == MHE_EMB_HASH_PROJ;
        size_t per = emb == MHE_EMB_HASH_POOL ? (size_t)mhe_hash_pool_chunks(nbits, c->hash_chunk)
                     : emb > MHE_EMB_HASH_POOL ? (MHE_BITS_BYTES(nbits) + 3) / 4 : 0;
        g->hw_in = (int *)mhe__cu_take(&cur, base, rows * per);
        g->hw_wn = mhe__cu_take(&cur, base, proj ? (size_t)C * nbits : 0);
        g->hw_wnorm = mhe__cu_take(&cur, base, proj ? (size_t)C : 0);
        g->hw_out = mhe__cu_take(&cur, base, proj ? rows * C : 0);
        g->hw_uu = mhe__cu_take(&cur, base, proj ? rows * 2 : 0);
    }
    g->targets = (int *)mhe__cu_take(&cur, base, rows);
    /* dropout's branch gradients; the classification head and the padding */
    g->d_drop = mhe__cu_take(&cur, base, c->dropout > 0 ? rows * C : 0);
    {
        size_t K = c->n_classes > 0 ? (size_t)c->n_classes : 0, PC = K ? (size_t)B * C : 0;
        g->pooled = mhe__cu_take(&cur, base, PC);
        g->d_pooled = mhe__cu_take(&cur, base, PC);
        g->cls_logits = mhe__cu_take(&cur, base, (size_t)B * K);
        g->d_cls = mhe__cu_take(&cur, base, (size_t)B * K);
        g->lengths = (int *)mhe__cu_take(&cur, base, (size_t)B);
        g->labels = (int *)mhe__cu_take(&cur, base, (size_t)B);
        g->first = mhe__cu_take(&cur, base, c->cls_pool == MHE_POOL_FIRST ? PC : 0);
        g->d_first = mhe__cu_take(&cur, base, c->cls_pool == MHE_POOL_FIRST ? PC : 0);
    }
    /* BERT's pieces */
    g->types = (int *)mhe__cu_take(&cur, base, c->type_vocab ? rows : 0);
    g->emb_sum = mhe__cu_take(&cur, base, c->emb_norm ? rows * C : 0);
    g->emb_mean = mhe__cu_take(&cur, base, c->emb_norm ? rows : 0);
    g->emb_rstd = mhe__cu_take(&cur, base, c->emb_norm ? rows : 0);
    g->d_emb_sum = mhe__cu_take(&cur, base, c->emb_norm ? rows * C : 0);
    {
        size_t hn = c->head_transform ? rows * C : 0, hr = c->head_transform ? rows : 0;
        g->hd_pre = mhe__cu_take(&cur, base, hn);
        g->hd_act = mhe__cu_take(&cur, base, hn);
        g->hd_out = mhe__cu_take(&cur, base, hn);
        g->hd_mean = mhe__cu_take(&cur, base, hr);
        g->hd_rstd = mhe__cu_take(&cur, base, hr);
        g->d_hd1 = mhe__cu_take(&cur, base, hn);
        g->d_hd2 = mhe__cu_take(&cur, base, hn);
    }
    /* encdec's encoder: its input, final norm and output gradient (rows: the source's B Ts fit) */
    g->src = (int *)mhe__cu_take(&cur, base, E ? rows : 0);
    g->src_lengths = (int *)mhe__cu_take(&cur, base, E ? (size_t)B : 0);
    g->src_emb = mhe__cu_take(&cur, base, E ? rows * C : 0);
    g->enc_fin = mhe__cu_take(&cur, base, E ? rows * C : 0);
    g->enc_mean = mhe__cu_take(&cur, base, E ? rows : 0);
    g->enc_rstd = mhe__cu_take(&cur, base, E ? rows : 0);
    g->d_mem = mhe__cu_take(&cur, base, E ? rows * C : 0);
    g->d_src_emb = mhe__cu_take(&cur, base, mhe__cu_kind_in(m, 0, E, MHE_ATTN_STATICEMB_QK) ||
                                                    mhe__cu_cross_has(m, MHE_ATTN_STATICEMB_QK) ? rows * C : 0);
    return cur;
}

MHEDEF mhe_status mhe_cuda_model_reserve(mhe_cuda_model *g, int B, int T) {
    size_t bytes;
    void *block = NULL;
    if (B < 1 || T < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "reserve: B=%d T=%d", B, T);
    if ((int64_t)B * T > (1 << 24))
        return mhe__fail(g->err, MHE_ERR_OVERFLOW, "batch %d x %d is too many tokens", B, T);
    if (T > g->host->cfg.max_seq_len)
        return mhe__fail(g->err, MHE_ERR_SHAPE, "sequence of %d tokens exceeds max_seq_len %d", T,
                         g->host->cfg.max_seq_len);
    if (g->acts_block && B <= g->cap_B && T <= g->cap_T)
        return MHE_OK;
    /* grows, never shrinks: decoding's fixed stream (1 x cap) must not undo a training batch's room */
    if (g->acts_block) {
        B = B > g->cap_B ? B : g->cap_B;
        T = T > g->cap_T ? T : g->cap_T;
    }
    bytes = mhe__cu_acts_layout(g, NULL, B, T);
    {
        int *hl = (int *)realloc(g->h_len, 2 * (size_t)B * sizeof(int));
        if (!hl)
            return mhe__fail(g->err, MHE_ERR_NOMEM, "reserve: out of memory for %d lengths", 2 * B);
        g->h_len = hl;
    }
    if (g->acts_block) {
        cudaFree(g->acts_block);
        g->device_bytes -= g->cap_bytes_acts;
        g->acts_block = NULL;
    }
    MHE__CU_TRY(cudaMalloc(&block, bytes), "activations");
    g->acts_block = block;
    g->cap_bytes_acts = bytes;
    g->device_bytes += bytes;
    g->cap_B = B;
    g->cap_T = T;
    g->dft_T = 0; /* fnet's tables are to be made in the new block */
    mhe__cu_acts_layout(g, (char *)block, B, T);
    return MHE_OK;
}

/* the fixed stream's input as the host model holds it (mhe__fixed_init):
   rndemb-qk's eps, fixedseq-qk's tokens, copied, never re-derived */
static mhe_status mhe__cu_fixed_upload(mhe_cuda_model *g) {
    const mhe_fixed_stream *f = &g->host->fixed;
    size_t L = (size_t)g->host->cfg.max_seq_len, bytes;
    void *p = NULL;
    if (f->kind < 0)
        return MHE_OK;
    bytes = f->kind == MHE_ATTN_RNDEMB_QK ? L * g->host->cfg.d_model * sizeof(float) : L * sizeof(int);
    MHE__CU_TRY(cudaMalloc(&p, bytes), "the fixed stream's input");
    g->fixed_block = p;
    g->device_bytes += bytes;
    if (f->kind == MHE_ATTN_RNDEMB_QK) {
        g->fixed_eps = (float *)p;
        MHE__CU_TRY(cudaMemcpy(p, f->eps, bytes, cudaMemcpyHostToDevice), "upload the fixed embeddings");
    } else {
        g->fixed_tokens = (int *)p;
        MHE__CU_TRY(cudaMemcpy(p, f->tokens, bytes, cudaMemcpyHostToDevice), "upload the fixed sequence");
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_init(mhe_cuda_model *g, mhe_model *host, int precision) {
    size_t bytes;
    int major = 0;
    mhe_status st;
    if (!g)
        return MHE_ERR_ARG;
    memset(g, 0, sizeof *g);
    if (!host || !host->param_data)
        return mhe__fail(g->err, MHE_ERR_ARG, "mhe_cuda_model_init: no host model");
    if ((st = mhe_cuda_supports(&host->cfg, g->err)) != MHE_OK)
        return st;
    if (host->skip_attn)
        return mhe__fail(g->err, MHE_ERR_CONFIG, "skipped attention layers run on the CPU path");
    if ((st = mhe_cuda_device(NULL, 0, &major, NULL, g->err)) != MHE_OK)
        return st;
    if (precision < MHE_CUDA_FP32 || precision > MHE_CUDA_BF16)
        return mhe__fail(g->err, MHE_ERR_ARG, "mhe_cuda_model_init: precision %d (0 fp32, 1 tf32, 2 bf16)", precision);
    if (precision != MHE_CUDA_FP32 && major < 8)
        return mhe__fail(g->err, MHE_ERR_DEVICE, "%s needs compute capability 8.0 or newer (this GPU: %d.x)",
                         precision == MHE_CUDA_TF32 ? "tf32" : "bf16", major);
    g->host = host;
    g->precision = precision;
    bytes = (size_t)host->n_params * sizeof(float);
    {
        void *p = NULL, *q = NULL;
        cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaSuccess && (e = cudaMalloc(&q, bytes)) != cudaSuccess)
            cudaFree(p);
        if (e != cudaSuccess) {
            g->host = NULL;
            return mhe__cu_status(e, g->err, "parameters");
        }
        g->params = (float *)p;
        g->grads = (float *)q;
    }
    g->device_bytes = 2 * bytes;
    if ((st = mhe_cuda_model_upload(g)) != MHE_OK || (st = mhe_cuda_model_zero_grad(g)) != MHE_OK ||
        (st = mhe__cu_fixed_upload(g)) != MHE_OK) {
        mhe_cuda_model_free(g);
        return st;
    }
    return MHE_OK;
}

MHEDEF void mhe_cuda_model_free(mhe_cuda_model *g) {
    if (!g)
        return;
    if (g->params)
        cudaFree(g->params);
    if (g->grads)
        cudaFree(g->grads);
    if (g->acts_block)
        cudaFree(g->acts_block);
    if (g->fixed_block)
        cudaFree(g->fixed_block);
    free(g->h_len);
    g->h_len = NULL;
    g->params = g->grads = NULL;
    g->acts_block = g->fixed_block = NULL;
    g->host = NULL;
}

MHEDEF mhe_status mhe_cuda_model_upload(mhe_cuda_model *g) {
    MHE__CU_TRY(cudaMemcpy(g->params, g->host->param_data, (size_t)g->host->n_params * sizeof(float),
                           cudaMemcpyHostToDevice), "upload parameters");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_download(mhe_cuda_model *g) {
    MHE__CU_TRY(cudaMemcpy(g->host->param_data, g->params, (size_t)g->host->n_params * sizeof(float),
                           cudaMemcpyDeviceToHost), "download parameters");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_grads(mhe_cuda_model *g) {
    if (!g->host->grad_data)
        return mhe__fail(g->err, MHE_ERR_ARG, "the host model has no gradients (loaded for inference)");
    MHE__CU_TRY(cudaMemcpy(g->host->grad_data, g->grads, (size_t)g->host->n_params * sizeof(float),
                           cudaMemcpyDeviceToHost), "download gradients");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_zero_grad(mhe_cuda_model *g) {
    MHE__CU_TRY(mhe__cu_memset0(g->grads, (size_t)g->host->n_params * sizeof(float)), "zero gradients");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_logits(mhe_cuda_model *g, float *out) {
    size_t n = (size_t)g->last_B * g->last_T * mhe__head_width(&g->host->cfg);
    if (g->last_cls) {
        MHE__CU_TRY(cudaMemcpy(out, g->cls_logits, (size_t)g->last_B * g->host->cfg.n_classes * sizeof(float),
                               cudaMemcpyDeviceToHost), "download class logits");
        return MHE_OK;
    }
    MHE__CU_TRY(cudaMemcpy(out, g->logits, n * sizeof(float), cudaMemcpyDeviceToHost), "download logits");
    return MHE_OK;
}

/* ---- cross-attention (encdec) ------------------------------------------------- */

/* The decoder's cross-attention sublayer of block l, as the CPU's
   mhe__attn_branch_fwd with cross = 1: Q from u, K|V from the encoder
   output (mhe__cross_kv: W^K|W^V adjacent, collab's value bias; el-att's
   K = V = the output itself), the kind's core without a causal mask (the
   taylor kind in the same tiles), W^O. Decoding reads K|V from the cache,
   made once per source by mhe_cuda_kv_cache_encode. */
static mhe_status mhe__cu_cross_kv(mhe_cuda_model *g, int l, int rows, const float *mem, const float *mem_emb,
                                   float *kv, float *ext) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    const mhe_attn_weights *w = &y->cross;
    const mhe__cu_kind_ops *ops = &mhe__cu_kinds[w->kind];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int kvw = geo.k_w + geo.v_w, C = c->d_model;
    if (ops->qk == MHE__CU_QK_STATIC) { /* K from N3(the source's embeddings), V from mem (eq. 4.13) */
        const float *ne = mem_emb;
        if (!c->post_norm) {
            MHE__CU_MHE(mhe__cu_norm_fwd(g, ext, ext + (size_t)rows * C, ext + (size_t)rows * (C + 1), mem_emb,
                                         y->norm3_w, y->norm3_b, rows));
            ne = ext;
        }
        MHE__CU_MHE(mhe__cu_linear_fwd(g, kv, kvw, ne, MHE__CU_P(g, w->wk), MHE__CU_P(g, w->bk), rows, C, geo.k_w));
        return mhe__cu_linear_fwd(g, kv + geo.k_w, kvw, mem, MHE__CU_P(g, w->wv), MHE__CU_P(g, w->bv), rows, C,
                                  geo.v_w);
    }
    if (!geo.k_w)
        return MHE_OK;
    MHE__CU_MHE(mhe__cu_linear_fwd(g, kv, kvw, mem, MHE__CU_P(g, w->wk), MHE__CU_P(g, w->bk), rows, c->d_model, kvw));
    if (ops->v_bias && w->bv)
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_add_cols, dim3(mhe__cu_blocks((int64_t)rows * w->bv->size, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, kv, kvw, geo.k_w, (const float *)MHE__CU_P(g, w->bv),
                                   (int)w->bv->size, rows), "collab value bias");
    return MHE_OK;
}

static mhe_status mhe__cu_cross_fwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, const float *u, float *out) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    const mhe_attn_weights *w = &y->cross;
    mhe_cuda_layer_acts *a = &g->cross[l];
    const mhe__cu_kind_ops *ops = &mhe__cu_kinds[w->kind];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, ks;
    const float *k, *v, *qin = u;
    if (ops->qk == MHE__CU_QK_STATIC) { /* Q from N3(e), the decoder's embeddings (eq. 4.13), not from u */
        qin = x->emb;
        if (!c->post_norm) {
            MHE__CU_MHE(mhe__cu_norm_fwd(g, a->ext, a->ext + (size_t)rows * C, a->ext + (size_t)rows * (C + 1), x->emb,
                                         y->norm3_w, y->norm3_b, rows));
            qin = a->ext;
        }
    }
    MHE__CU_MHE(mhe__cu_linear_fwd(g, a->proj, geo.q_w, qin, MHE__CU_P(g, w->wq), MHE__CU_P(g, w->bq), rows, C,
                                   geo.q_w));
    if (g->cache) {
        k = g->cache->xkv[l];
        ks = g->cache->xkv_w[l];
        v = geo.v_w ? k + geo.k_w : k;
    } else {
        MHE__CU_MHE(mhe__cu_cross_kv(g, l, x->B * x->Ts, x->mem, x->mem_emb, a->kv, a->ext + (size_t)rows * (C + 2)));
        mhe__kv_ptrs(&geo, a->kv, geo.k_w + geo.v_w, x->mem, C, &k, &ks, &v);
    }
    MHE__CU_MHE(mhe__cu_attn_core_fwd(g, ops, a, l, 1, x->B, x->T, x->Ts, 0, x->mem_len, a->proj, geo.q_w, k, ks, v,
                                      ks));
    return mhe__cu_linear_fwd(g, out, C, a->att, MHE__CU_P(g, w->wo), MHE__CU_P(g, w->bo), rows, HD, C);
}

/* its backward (mhe__attn_branch_bwd, cross = 1): d u into du, d mem into x->d_mem */
static mhe_status mhe__cu_cross_bwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, const float *u,
                                    const float *d_out, float *du) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    const mhe_attn_weights *w = &y->cross;
    mhe_cuda_layer_acts *a = &g->cross[l];
    const mhe__cu_kind_ops *ops = &mhe__cu_kinds[w->kind];
    mhe__geom geo = mhe__layer_geom(c, w->kind);
    int C = c->d_model, HD = c->n_heads * mhe_config_d_head(c), rows = x->B * x->T, mrows = x->B * x->Ts,
        kvw = geo.k_w + geo.v_w, ks;
    const float *k, *v;
    float *dq = g->d_proj, *dkv = dq + (size_t)rows * geo.q_w, *dk, *dv;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_att, (size_t)rows * HD));
    MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_att, MHE__CU_G(g, w->wo), MHE__CU_G(g, w->bo), d_out, C, a->att,
                                   MHE__CU_P(g, w->wo), rows, HD, C));
    MHE__CU_MHE(mhe__cu_zero(g, dq, (size_t)rows * geo.q_w + (size_t)mrows * kvw));
    mhe__kv_ptrs(&geo, a->kv, kvw, x->mem, C, &k, &ks, &v);
    dk = geo.k_w ? dkv : x->d_mem;
    dv = geo.v_w ? dk + geo.k_w : dk;
    MHE__CU_MHE(mhe__cu_attn_core_bwd(g, ops, a, l, 1, x->B, x->T, x->Ts, x->mem_len, a->proj, geo.q_w, k, ks, v, dq,
                                      dk, dv));
    if (ops->v_bias && w->bv) /* b^V: the column sums of its V columns */
        MHE__CU_MHE(mhe__cu_colsums(g, MHE__CU_G(g, w->bv), NULL, dkv + geo.k_w, kvw, mrows, (int)w->bv->size, NULL,
                                    NULL, NULL, 0));
    if (ops->qk == MHE__CU_QK_STATIC) { /* d N3(e) and d N3(e_src) through d_tmp into the embeddings' gradients */
        const float *bq = a->ext, *bk = a->ext + (size_t)rows * (C + 2);
        MHE__CU_MHE(mhe__cu_zero(g, g->d_tmp, (size_t)rows * C));
        MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_tmp, MHE__CU_G(g, w->wq), MHE__CU_G(g, w->bq), dq, geo.q_w,
                                       c->post_norm ? x->emb : bq, MHE__CU_P(g, w->wq), rows, C, geo.q_w));
        if (c->post_norm)
            MHE__CU_MHE(mhe__cu_axpby_m(g, x->d_emb, x->d_emb, g->d_tmp, (int64_t)rows * C));
        else
            MHE__CU_MHE(mhe__cu_norm_bwd(g, x->d_emb, g->d_tmp, x->emb, y->norm3_w, y->norm3_b, bq + (size_t)rows * C,
                                         bq + (size_t)rows * (C + 1), rows));
        MHE__CU_MHE(mhe__cu_zero(g, g->d_tmp, (size_t)mrows * C));
        MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_tmp, MHE__CU_G(g, w->wk), MHE__CU_G(g, w->bk), dkv, kvw,
                                       c->post_norm ? x->mem_emb : bk, MHE__CU_P(g, w->wk), mrows, C, geo.k_w));
        if (c->post_norm)
            MHE__CU_MHE(mhe__cu_axpby_m(g, x->d_mem_emb, x->d_mem_emb, g->d_tmp, (int64_t)mrows * C));
        else
            MHE__CU_MHE(mhe__cu_norm_bwd(g, x->d_mem_emb, g->d_tmp, x->mem_emb, y->norm3_w, y->norm3_b,
                                         bk + (size_t)mrows * C, bk + (size_t)mrows * (C + 1), mrows));
        return mhe__cu_linear_bwd(g, x->d_mem, MHE__CU_G(g, w->wv), MHE__CU_G(g, w->bv), dkv + geo.k_w, kvw, x->mem,
                                  MHE__CU_P(g, w->wv), mrows, C, geo.v_w);
    }
    MHE__CU_MHE(mhe__cu_linear_bwd(g, du, MHE__CU_G(g, w->wq), MHE__CU_G(g, w->bq), dq, geo.q_w, u,
                                   MHE__CU_P(g, w->wq), rows, C, geo.q_w));
    if (geo.k_w)
        MHE__CU_MHE(mhe__cu_linear_bwd(g, x->d_mem, MHE__CU_G(g, w->wk), MHE__CU_G(g, w->bk), dkv, kvw, x->mem,
                                       MHE__CU_P(g, w->wk), mrows, C, kvw));
    return MHE_OK;
}

/* ---- the MLP and the sublayers ----------------------------------------------- */

static mhe_status mhe__cu_mlp_fwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, const float *u, float *out) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = c->d_model, F = mhe_config_d_ff(c), rows = x->B * x->T;
    MHE__CU_MHE(mhe__cu_linear_fwd_act(g, a->fc1, F, u, MHE__CU_P(g, y->fc1_w), MHE__CU_P(g, y->fc1_b), rows, C, F,
                                       a->act, c->activation));
    return mhe__cu_linear_fwd(g, out, C, a->act, MHE__CU_P(g, y->fc2_w), MHE__CU_P(g, y->fc2_b), rows, F, C);
}

static mhe_status mhe__cu_mlp_bwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, const float *u, const float *d_out,
                                  float *du) {
    const mhe_config *c = &g->host->cfg;
    const mhe_layer *y = &g->host->layers[l];
    mhe_cuda_layer_acts *a = &x->la[l];
    int C = c->d_model, F = mhe_config_d_ff(c), rows = x->B * x->T;
    int64_t n = (int64_t)rows * F;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_act, (size_t)n));
    MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_act, MHE__CU_G(g, y->fc2_w), MHE__CU_G(g, y->fc2_b), d_out, C, a->act,
                                   MHE__CU_P(g, y->fc2_w), rows, F, C));
    MHE__CU_MHE(mhe__cu_zero(g, g->d_fc1, (size_t)n));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_act_bwd, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                               c->activation, g->d_fc1, (const float *)a->fc1, (const float *)g->d_act, n),
                "activation backward");
    return mhe__cu_linear_bwd(g, du, MHE__CU_G(g, y->fc1_w), MHE__CU_G(g, y->fc1_b), g->d_fc1, F, u,
                              MHE__CU_P(g, y->fc1_w), rows, C, F);
}

static const float *mhe__cu_sub_out(const mhe_cuda_model *g, const mhe__cu_ctx *x, int l, int k) {
    return g->host->cfg.post_norm ? x->la[l].nrm[k] : x->la[l].sum[k];
}

/* the residual dropout's p of a stream: the main stream of a training forward only */
static float mhe__cu_res_p(const mhe_cuda_model *g, const mhe__cu_ctx *x) {
    return g->drop && !x->fixed ? g->host->cfg.dropout : 0.0f;
}

/* sum = omega * h + dropout(branch) (omega = 1 without Admin), as
   mhe__sub_leave; Admin's profiling pass (mhe_model_admin_init) first sets
   omega = r, then r = sqrt(Var[r h] + Var[dropout(branch)]) (Liu et al.
   2020, Algorithm 1), the variances from the device's sums */
static mhe_status mhe__cu_residual(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, int k, const float *h, float *sum) {
    mhe_model *m = g->host;
    const mhe_layer *y = &m->layers[l];
    int C = m->cfg.d_model;
    int64_t n = (int64_t)x->B * x->T * C;
    float p = mhe__cu_res_p(g, x), *omega = MHE__CU_P(g, y->omega[k]);
    double s1 = 0, s2 = 0, b1 = 0, b2 = 0;
    if (p > 0)
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->branch, g->branch, n, p, MHE__SITE_RES(l, k)));
    if (!omega)
        return mhe__cu_axpby_m(g, sum, h, g->branch, n);
    if (m->admin_profiling) {
        float *r = &m->admin_ratio[y->encoder], *fill = (float *)malloc((size_t)C * sizeof(float));
        cudaError_t e = fill ? cudaSuccess : cudaErrorMemoryAllocation;
        for (int c = 0; fill && c < C; c++)
            fill[c] = *r;
        if (fill)
            e = cudaMemcpy(omega, fill, (size_t)C * sizeof(float), cudaMemcpyHostToDevice);
        free(fill);
        MHE__CU_TRY(e, "Admin omega");
        MHE__CU_MHE(mhe__cu_reduce(g, h, n, 0, &s1));
        MHE__CU_MHE(mhe__cu_reduce(g, h, n, 1, &s2));
        MHE__CU_MHE(mhe__cu_reduce(g, g->branch, n, 0, &b1));
        MHE__CU_MHE(mhe__cu_reduce(g, g->branch, n, 1, &b2));
        s1 /= (double)n, s2 /= (double)n, b1 /= (double)n, b2 /= (double)n;
        *r = (float)sqrt((double)*r * *r * (s2 - s1 * s1) + (b2 - b1 * b1));
    }
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_residual_scaled, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, sum,
                               h, (const float *)g->branch, (const float *)omega, n, C), "Admin residual");
    return MHE_OK;
}

/* the input of sublayer k of block l: the block input, or the output of the sublayer before (as mhe__sub_in) */
static const float *mhe__cu_sub_in(const mhe_cuda_model *g, const mhe__cu_ctx *x, int l, int k) {
    if (k == 0)
        return x->la[l].in;
    return mhe__cu_sub_out(g, x, l, k == 2 && g->host->layers[l].cross.kind >= 0 ? 1 : 0);
}

/* sublayer k (0 attention, 1 cross-attention, 2 MLP) of block l, as mhe__sub_fwd: enter, branch, leave */
static mhe_status mhe__cu_sub_fwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, int k, const float *h) {
    const mhe_layer *y = &g->host->layers[l];
    mhe_cuda_layer_acts *a = &x->la[l];
    const mhe_tensor *nw, *nb;
    int rows = x->B * x->T, post = g->host->cfg.post_norm;
    const float *u = h;
    mhe__sub_norm(y, k, &nw, &nb);
    if (!post) {
        MHE__CU_MHE(mhe__cu_norm_fwd(g, a->nrm[k], a->mean[k], a->rstd[k], h, nw, nb, rows));
        u = a->nrm[k];
    }
    if (k == 2)
        MHE__CU_MHE(mhe__cu_mlp_fwd(g, x, l, u, g->branch));
    else if (k == 1)
        MHE__CU_MHE(mhe__cu_cross_fwd(g, x, l, u, g->branch));
    else
        MHE__CU_MHE(mhe__cu_kinds[y->attn.kind].branch_fwd(g, &mhe__cu_kinds[y->attn.kind], x, l, u, g->branch));
    MHE__CU_MHE(mhe__cu_residual(g, x, l, k, h, a->sum[k]));
    if (post)
        MHE__CU_MHE(mhe__cu_norm_fwd(g, a->nrm[k], a->mean[k], a->rstd[k], a->sum[k], nw, nb, rows));
    return MHE_OK;
}

/* backward of sublayer k, as mhe__sub_bwd: d_h holds the gradient of its
   output and leaves with the gradient of its input */
static mhe_status mhe__cu_sub_bwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int l, int k) {
    const mhe_layer *y = &g->host->layers[l];
    const mhe__cu_kind_ops *ops = &mhe__cu_kinds[y->attn.kind];
    mhe_cuda_layer_acts *a = &x->la[l];
    const mhe_tensor *nw, *nb;
    const float *h = mhe__cu_sub_in(g, x, l, k);
    int rows = x->B * x->T;
    size_t n = (size_t)rows * g->host->cfg.d_model;
    float p = mhe__cu_res_p(g, x);
    const float *dbr;
    mhe__sub_norm(y, k, &nw, &nb);
    MHE__CU_MHE(mhe__cu_zero(g, g->d_u, n));
    if (!g->host->cfg.post_norm) { /* d h = d h' + N'(f'(dropout'(d h'))) */
        if (p > 0)
            MHE__CU_MHE(mhe__cu_dropout_m(g, g->d_drop, g->d_h, (int64_t)n, p, MHE__SITE_RES(l, k)));
        dbr = p > 0 ? g->d_drop : g->d_h;
        if (k == 2)
            MHE__CU_MHE(mhe__cu_mlp_bwd(g, x, l, a->nrm[k], dbr, g->d_u));
        else if (k == 1)
            MHE__CU_MHE(mhe__cu_cross_bwd(g, x, l, a->nrm[k], dbr, g->d_u));
        else
            MHE__CU_MHE(ops->branch_bwd(g, ops, x, l, a->nrm[k], dbr, g->d_u));
        return mhe__cu_norm_bwd(g, g->d_h, g->d_u, h, nw, nb, a->mean[k], a->rstd[k], rows);
    }
    /* d sum = N'(d h'); d h = omega d sum + f'(dropout'(d sum)), d omega += sum_rows d sum * h */
    MHE__CU_MHE(mhe__cu_norm_bwd(g, g->d_u, g->d_h, a->sum[k], nw, nb, a->mean[k], a->rstd[k], rows));
    if (y->omega[k])
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_admin_bwd, dim3(mhe__cu_blocks(g->host->cfg.d_model, MHE__CU_EW)),
                                   dim3(MHE__CU_EW), 0, g->d_h, MHE__CU_G(g, y->omega[k]), (const float *)g->d_u, h,
                                   (const float *)MHE__CU_P(g, y->omega[k]), rows, g->host->cfg.d_model),
                    "Admin residual backward");
    else
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->d_h, g->d_u, NULL, (int64_t)n));
    if (p > 0)
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->d_drop, g->d_u, (int64_t)n, p, MHE__SITE_RES(l, k)));
    dbr = p > 0 ? g->d_drop : g->d_u;
    if (k == 2)
        return mhe__cu_mlp_bwd(g, x, l, h, dbr, g->d_h);
    if (k == 1)
        return mhe__cu_cross_bwd(g, x, l, h, dbr, g->d_h);
    return ops->branch_bwd(g, ops, x, l, h, dbr, g->d_h);
}

/* blocks x->l0 .. top-1 of a stream on its input x->emb; *out its output (mhe__stack_fwd) */
static mhe_status mhe__cu_stack_fwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int top, const float **out) {
    const float *h = x->emb;
    int l, k;
    for (l = x->l0; l < top; l++) {
        x->la[l].in = h;
        for (k = 0; k < 3; k++)
            if (k != 1 || g->host->layers[l].cross.kind >= 0)
                MHE__CU_MHE(mhe__cu_sub_fwd(g, x, l, k, mhe__cu_sub_in(g, x, l, k)));
        h = mhe__cu_sub_out(g, x, l, 2);
    }
    *out = h;
    return MHE_OK;
}

static mhe_status mhe__cu_stack_bwd(mhe_cuda_model *g, const mhe__cu_ctx *x, int top) {
    int l, k;
    for (l = top - 1; l >= x->l0; l--)
        for (k = 2; k >= 0; k--)
            if (k != 1 || g->host->layers[l].cross.kind >= 0)
                MHE__CU_MHE(mhe__cu_sub_bwd(g, x, l, k));
    return MHE_OK;
}

/* ---- the fixed stream of rndemb-qk and fixedseq-qk ------------------------------ */

static mhe__cu_ctx mhe__cu_fixed_ctx(mhe_cuda_model *g, int T) {
    mhe__cu_ctx x;
    memset(&x, 0, sizeof x);
    x.d_emb = g->d_emb;
    x.B = 1;
    x.T = T;
    x.fixed = 1;
    x.la = g->fixed_layer;
    x.emb = g->fixed_emb;
    return x;
}

/* eq. 4.9 / 4.11: the model's own blocks below top on the fixed input
   (rndemb-qk's eps, fixedseq-qk's text embedded at positions 0 ..), one
   sequence of T, causal as the model; before the batch, which reads its
   Q|K at each fixed layer (mhe__fixed_fwd) */
static mhe_status mhe__cu_fixed_fwd(mhe_cuda_model *g, int T) {
    const mhe_model *m = g->host;
    int C = m->cfg.d_model, HD = m->cfg.n_heads * mhe_config_d_head(&m->cfg);
    mhe__cu_ctx x = mhe__cu_fixed_ctx(g, T);
    const float *h;
    if (m->fixed.kind < 0)
        return MHE_OK;
    if (m->fixed.kind == MHE_ATTN_RNDEMB_QK)
        MHE__CU_TRY(mhe__cu_copy(g->fixed_emb, g->fixed_eps, (size_t)T * C * sizeof(float), cudaMemcpyDeviceToDevice),
                    "the fixed embeddings");
    else
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_fwd, dim3(T), dim3(MHE__CU_EW), 0, g->fixed_emb,
                                   (const float *)MHE__CU_P(g, m->tok_emb), (const float *)MHE__CU_P(g, m->pos_emb),
                                   (const int *)g->fixed_tokens, T, 0, C), "the fixed sequence's embedding");
    MHE__CU_MHE(mhe__cu_stack_fwd(g, &x, m->fixed.top, &h));
    return mhe__cu_zero(g, g->d_qk, (size_t)m->fixed.top * g->cap_T * 2 * HD);
}

/* after the batch's backward filled d_qk: back through the fixed stream into
   the blocks below each such layer, and fixedseq-qk's token and position
   embeddings (rndemb-qk's eps is constant), as mhe__fixed_bwd */
static mhe_status mhe__cu_fixed_bwd(mhe_cuda_model *g, int T) {
    mhe_model *m = g->host;
    int C = m->cfg.d_model, stat = mhe__cu_has_kind(m, MHE_ATTN_STATICEMB_QK);
    mhe__cu_ctx x = mhe__cu_fixed_ctx(g, T);
    size_t n = (size_t)T * C;
    if (m->fixed.kind < 0)
        return MHE_OK;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_h, n));
    if (stat)
        MHE__CU_MHE(mhe__cu_zero(g, g->d_emb, n));
    MHE__CU_MHE(mhe__cu_stack_bwd(g, &x, m->fixed.top));
    if (stat)
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->d_h, g->d_h, g->d_emb, (int64_t)n));
    if (m->fixed.kind != MHE_ATTN_FIXEDSEQ_QK)
        return MHE_OK;
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_tok, dim3(T), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->tok_emb),
                               (const float *)g->d_h, (const int *)g->fixed_tokens, C), "fixed sequence backward");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_pos, dim3(mhe__cu_blocks((int64_t)T * C, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->pos_emb), (const float *)g->d_h, 1, T, C),
                "fixed sequence position backward");
    return MHE_OK;
}

/* ---- the whole model ----------------------------------------------------------- */

/* the next forward's mode and batch extras onto the device, checked as
   mhe__forward_batch checks them: dropout while the host model trains
   (not decoding), the padding (g->in_lengths; encdec's source:
   g->in_src_lengths, Ts > 0) and the sequence labels
   (g->in_labels, whose count of labels >= 0 goes to *count) */
static mhe_status mhe__cu_batch_in(mhe_cuda_model *g, int B, int T, int Ts, int has_targets, int *count) {
    mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int i;
    g->drop = m->training && !g->cache;
    g->has_len = g->has_src_len = g->last_cls = 0;
    if (g->in_labels && c->n_classes < 1)
        return mhe__fail(g->err, MHE_ERR_CONFIG, "the model has no classification head (n_classes=0)");
    if (g->in_labels && has_targets)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: give per-token targets or sequence labels, not both");
    if (g->in_lengths) {
        if (mhe__check_lengths(m, g->in_lengths, B, T, "lengths") != MHE_OK)
            return mhe__fail(g->err, MHE_ERR_DATA, "%s", m->err);
        MHE__CU_TRY(mhe__cu_upload(g->async_in, g->lengths, g->in_lengths, (size_t)B * sizeof(int)),
                    "upload lengths");
        memcpy(g->h_len, g->in_lengths, (size_t)B * sizeof(int)); /* fnet and linear read them on the host */
        g->has_len = 1;
    }
    if (g->in_src_lengths && Ts > 0) { /* encdec: the source's padding (mhe__forward_batch) */
        if (mhe__check_lengths(m, g->in_src_lengths, B, Ts, "src_lengths") != MHE_OK)
            return mhe__fail(g->err, MHE_ERR_DATA, "%s", m->err);
        MHE__CU_TRY(mhe__cu_upload(g->async_in, g->src_lengths, g->in_src_lengths, (size_t)B * sizeof(int)),
                    "upload src_lengths");
        memcpy(g->h_len + g->cap_B, g->in_src_lengths, (size_t)B * sizeof(int));
        g->has_src_len = 1;
    }
    if (g->in_labels) {
        *count = 0;
        for (i = 0; i < B; i++) {
            if (g->in_labels[i] >= c->n_classes)
                return mhe__fail(g->err, MHE_ERR_DATA, "label %d of sequence %d is outside [0, %d)", g->in_labels[i], i,
                                 c->n_classes);
            *count += g->in_labels[i] >= 0;
        }
        MHE__CU_TRY(mhe__cu_upload(g->async_in, g->labels, g->in_labels, (size_t)B * sizeof(int)),
                    "upload labels");
        g->last_cls = 1;
    }
    return MHE_OK;
}

/* the classification head on the final states h (mhe__forward_batch):
   the mean over each sequence's real tokens, a linear layer to the
   classes, the mean cross-entropy over the labelled sequences */
static mhe_status mhe__cu_cls_fwd(mhe_cuda_model *g, const float *h, int B, int T, int count, float *loss) {
    const mhe_model *m = g->host;
    int C = m->cfg.d_model, K = m->cfg.n_classes;
    if (m->cfg.cls_pool == MHE_POOL_FIRST) { /* BERT's pooler: tanh(W_p h_0 + b_p) */
        int64_t n = (int64_t)B * C;
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_first_rows, dim3((unsigned)B), dim3(MHE__CU_EW), 0, g->first, h, T, C, 0),
                    "first rows");
        MHE__CU_MHE(mhe__cu_linear_fwd(g, g->pooled, C, g->first, MHE__CU_P(g, m->pooler_w), MHE__CU_P(g, m->pooler_b),
                                       B, C, C));
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_tanh, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, g->pooled,
                                   (const float *)NULL, n, 0), "pooler tanh");
    } else {
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_pool, dim3((unsigned)B), dim3(MHE__CU_EW), 0, g->pooled, h,
                                   (const int *)(g->has_len ? g->lengths : NULL), T, C), "mean pooling");
    }
    MHE__CU_MHE(mhe__cu_linear_fwd(g, g->cls_logits, K, g->pooled, MHE__CU_P(g, m->cls_w), MHE__CU_P(g, m->cls_b), B, C,
                                   K));
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_xent, dim3((unsigned)B), dim3(MHE__CU_EW), 0, g->losses, g->d_cls,
                               (const float *)g->cls_logits, (const int *)g->labels, K,
                               count ? 1.0f / (float)count : 0.0f), "classification cross-entropy");
    g->last_B = B;
    g->last_T = T;
    g->last_count = count;
    g->has_targets = 1;
    return mhe__cu_mean_loss(g, g->losses, B, count, loss);
}

/* its backward into dfin [B T, C]: d pooled through the head, then / len on the real tokens (or
   through the pooler's tanh and linear layer into each first row) */
static mhe_status mhe__cu_cls_bwd(mhe_cuda_model *g, float *dfin) {
    const mhe_model *m = g->host;
    int C = m->cfg.d_model, K = m->cfg.n_classes, B = g->last_B, T = g->last_T;
    MHE__CU_MHE(mhe__cu_zero(g, g->d_pooled, (size_t)B * C));
    MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_pooled, MHE__CU_G(g, m->cls_w), MHE__CU_G(g, m->cls_b), g->d_cls, K,
                                   g->pooled, MHE__CU_P(g, m->cls_w), B, C, K));
    if (m->cfg.cls_pool == MHE_POOL_FIRST) {
        int64_t n = (int64_t)B * C;
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_tanh, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0, g->d_pooled,
                                   (const float *)g->pooled, n, 1), "pooler tanh backward");
        MHE__CU_MHE(mhe__cu_zero(g, g->d_first, (size_t)n));
        MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_first, MHE__CU_G(g, m->pooler_w), MHE__CU_G(g, m->pooler_b), g->d_pooled,
                                       C, g->first, MHE__CU_P(g, m->pooler_w), B, C, C));
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_first_rows, dim3((unsigned)B), dim3(MHE__CU_EW), 0, dfin,
                                   (const float *)g->d_first, T, C, 1), "first rows backward");
        return MHE_OK;
    }
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_pool_bwd, dim3((unsigned)(B * T)), dim3(MHE__CU_EW), 0, dfin,
                               (const float *)g->d_pooled, (const int *)(g->has_len ? g->lengths : NULL), T, C),
                "mean pooling backward");
    return MHE_OK;
}

/* the stream contexts of the last batch, as the CPU's mhe__contexts: the
   decoder (or single stack) over layers E .., and encdec's encoder over
   layers 0 .. E-1 on the source */
static void mhe__cu_contexts(mhe_cuda_model *g, int B, int T, int Ts, mhe__cu_ctx *enc, mhe__cu_ctx *dec) {
    memset(enc, 0, sizeof *enc);
    memset(dec, 0, sizeof *dec);
    enc->B = dec->B = B;
    enc->la = dec->la = g->layer;
    enc->T = Ts;
    enc->emb = g->src_emb;
    enc->d_emb = g->d_src_emb;
    dec->T = T;
    dec->l0 = mhe__n_enc(&g->host->cfg);
    dec->emb = g->emb;
    dec->d_emb = g->d_emb;
    dec->mem = g->mem;
    dec->d_mem = g->d_mem;
    dec->mem_emb = g->src_emb;
    dec->d_mem_emb = g->d_src_emb;
    dec->Ts = Ts;
    if (g->has_len) {
        dec->len = g->lengths;
        dec->hlen = g->h_len;
    }
    if (g->has_src_len) {
        enc->len = dec->mem_len = g->src_lengths;
        enc->hlen = g->h_len + g->cap_B;
    }
}

/* encdec: the encoder over the uploaded source g->src [B, Ts] (embedding with
   its own positions, its blocks, its final norm pre-norm); g->mem is its output */
static mhe_status mhe__cu_encode(mhe_cuda_model *g, int B, int Ts) {
    const mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, rows = B * Ts;
    mhe__cu_ctx enc, dec;
    const float *h;
    mhe__cu_contexts(g, B, 1, Ts, &enc, &dec);
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->src_emb,
                               (const float *)MHE__CU_P(g, m->tok_emb), (const float *)MHE__CU_P(g, m->enc_pos_emb),
                               (const int *)g->src, Ts, 0, C), "source embedding");
    if (g->drop && c->dropout > 0) /* the source's embedding dropout, site 1 (mhe__encode) */
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->src_emb, g->src_emb, (int64_t)rows * C, c->dropout, 1));
    MHE__CU_MHE(mhe__cu_stack_fwd(g, &enc, mhe__n_enc(c), &h));
    if (!c->post_norm) {
        MHE__CU_MHE(mhe__cu_norm_fwd(g, g->enc_fin, g->enc_mean, g->enc_rstd, h, m->enc_lnf_w, m->enc_lnf_b, rows));
        h = g->enc_fin;
    }
    g->mem = h;
    return MHE_OK;
}

/* the LM head's input for rows of h: h itself, or BERT's MLM transform
   norm(act(W h + b)) (head_transform; mhe__forward_batch) */
static mhe_status mhe__cu_head_in(mhe_cuda_model *g, const float *h, int rows, const float **x) {
    const mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model;
    *x = h;
    if (!c->head_transform)
        return MHE_OK;
    MHE__CU_MHE(mhe__cu_linear_fwd_act(g, g->hd_pre, C, h, MHE__CU_P(g, m->head_w), MHE__CU_P(g, m->head_b), rows, C,
                                       C, g->hd_act, c->activation));
    MHE__CU_MHE(mhe__cu_norm_fwd(g, g->hd_out, g->hd_mean, g->hd_rstd, g->hd_act, m->head_norm_w, m->head_norm_b, rows));
    *x = g->hd_out;
    return MHE_OK;
}

/* the token types of the next forward onto the device, checked as the CPU
   checks them (type 0 where the batch has none) */
static mhe_status mhe__cu_types_in(mhe_cuda_model *g, int rows) {
    const mhe_config *c = &g->host->cfg;
    if (g->in_types && !c->type_vocab)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: token types given, but the model has no type table (type_vocab=0)");
    if (!c->type_vocab)
        return MHE_OK;
    if (!g->in_types) {
        MHE__CU_TRY(mhe__cu_memset0(g->types, (size_t)rows * sizeof(int)), "zero types");
        return MHE_OK;
    }
    for (int i = 0; i < rows; i++)
        if (g->in_types[i] < 0 || g->in_types[i] >= c->type_vocab)
            return mhe__fail(g->err, MHE_ERR_DATA, "token type %d at position %d is outside [0, %d) (type_vocab)",
                             g->in_types[i], i, c->type_vocab);
    MHE__CU_TRY(mhe__cu_upload(g->async_in, g->types, g->in_types, (size_t)rows * sizeof(int)), "upload types");
    return MHE_OK;
}

/* forward of B sequences of T tokens at positions pos0.. (decoding: B = 1 with g->cache, and
   only the last position's logits) */
static mhe_status mhe__cu_forward(mhe_cuda_model *g, const int *src, int Ts, const int *tokens, const int *targets,
                                  int B, int T, int pos0, float *loss) {
    mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, V = mhe__head_width(c), rows = B * T, i, count = 0, cls_count = 0, E = mhe__n_enc(c);
    const mhe_tensor *hb, *head = mhe__token_head(m, &hb);
    const float *h;
    mhe__cu_ctx enc, x;
    if (c->embedding != MHE_EMB_VOCAB && !g->words)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: embedding=%s embeds words: the batch needs word features "
                         "(mhe_batch.words; mhe_cuda_model_forward_batch)", mhe__emb_name(c));
    for (i = 0; i < rows; i++) {
        if (!g->words && (tokens[i] < 0 || tokens[i] >= c->vocab_size)) /* word batches: checked by mhe__emb_prepare */
            return mhe__fail(g->err, MHE_ERR_DATA, "token %d at position %d is outside the vocabulary (%d)", tokens[i],
                             i, c->vocab_size);
        if (targets && targets[i] >= V)
            return mhe__fail(g->err, MHE_ERR_DATA, "target %d at position %d is outside %s (%d)", targets[i], i,
                             c->token_head == MHE_HEAD_SR ? "the S+R classes" : "the vocabulary", V);
        count += targets && targets[i] >= 0;
    }
    if (pos0 + T > c->max_seq_len)
        return mhe__fail(g->err, MHE_ERR_SHAPE, "position %d is past max_seq_len %d", pos0 + T - 1, c->max_seq_len);
    if (E && g->cache) {
        Ts = g->cache->src_len; /* decoding: the source's K|V are in the cache */
    } else if (E) {
        if (!src || Ts < 1)
            return mhe__fail(g->err, MHE_ERR_ARG, "forward: an encoder-decoder model needs a source (src, Ts >= 1)");
        if (Ts > c->max_seq_len)
            return mhe__fail(g->err, MHE_ERR_SHAPE, "source of %d tokens exceeds max_seq_len %d", Ts, c->max_seq_len);
        for (i = 0; i < B * Ts; i++)
            if (src[i] < 0 || src[i] >= V)
                return mhe__fail(g->err, MHE_ERR_DATA, "source: token %d at position %d is outside the vocabulary (%d)",
                                 src[i], i, V);
    } else {
        Ts = 0;
    }
    /* one layout holds both stacks: rows of the longer of T and Ts */
    MHE__CU_MHE(mhe_cuda_model_reserve(g, B, T > Ts ? T : Ts));
    MHE__CU_MHE(mhe__cu_batch_in(g, B, T, E && !g->cache ? Ts : 0, targets != NULL, &cls_count));
    MHE__CU_MHE(mhe__cu_types_in(g, rows));
    if (E && !g->cache) {
        MHE__CU_TRY(mhe__cu_upload(g->async_in, g->src, src, (size_t)B * Ts * sizeof(int)), "upload source");
        MHE__CU_MHE(mhe__cu_encode(g, B, Ts));
    }
    g->hashed = 0;
    if (g->words) { /* the word batch's rows (vocab) or hash-emb codes, gathered on the host by mhe__emb_prepare */
        const mhe_emb_in *e = &m->emb_in;
        if (c->embedding == MHE_EMB_VOCAB) {
            tokens = e->row;
        } else {
            /* spec becomes the codes: -1 - s for a special token; for a word its
               bucket (hash-emb) or its index among the words (the others) */
            int *codes = e->spec, j, emb = c->embedding, nb = c->hash_bits;
            for (i = 0, j = 0; i < rows; i++)
                if (codes[i] >= 0) {
                    codes[i] = -1 - codes[i];
                } else {
                    codes[i] = emb == MHE_EMB_HASH_EMB ? e->wid[j] : j;
                    j++;
                }
            tokens = codes;
            g->hashed = emb;
            if (emb == MHE_EMB_HASH_POOL && e->nw > 0)
                MHE__CU_TRY(mhe__cu_upload(g->async_in, g->hw_in, e->idx,
                                          (size_t)e->nw * mhe_hash_pool_chunks(nb, c->hash_chunk) * sizeof(int)),
                            "upload the words' chunk indices");
            else if (emb > MHE_EMB_HASH_POOL && e->nw > 0)
                MHE__CU_TRY(mhe__cu_upload(g->async_in, g->hw_in, e->bits, (size_t)e->nw * MHE_BITS_BYTES(nb)), "upload the words' bits");
        }
    }
    MHE__CU_TRY(mhe__cu_upload(g->async_in, g->tokens, tokens, (size_t)rows * sizeof(int)), "upload tokens");
    if (targets)
        MHE__CU_TRY(mhe__cu_upload(g->async_in, g->targets, targets, (size_t)rows * sizeof(int)), "upload targets");
    if (!g->cache) /* decoding reads the stream's Q|K from the cache */
        MHE__CU_MHE(mhe__cu_fixed_fwd(g, T));
    if (g->hashed)
        MHE__CU_MHE(mhe__cu_words_fwd(g, rows, T));
    else
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_fwd, dim3(rows), dim3(MHE__CU_EW), 0, g->emb,
                                   (const float *)MHE__CU_P(g, m->tok_emb), (const float *)MHE__CU_P(g, m->pos_emb),
                                   (const int *)g->tokens, T, pos0, C), "embedding");
    if (c->type_vocab) /* BERT's token types (segments) */
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_add_rows, dim3(rows), dim3(MHE__CU_EW), 0, g->emb,
                                   (const float *)MHE__CU_P(g, m->type_emb), (const int *)g->types, C), "token types");
    if (c->emb_norm) { /* BERT: LayerNorm(word + position + type), then dropout */
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->emb_sum, g->emb, NULL, (int64_t)rows * C));
        MHE__CU_MHE(mhe__cu_norm_fwd(g, g->emb, g->emb_mean, g->emb_rstd, g->emb_sum, m->emb_norm_w, m->emb_norm_b, rows));
    }
    if (g->drop && c->dropout > 0) /* embedding dropout, site 0 (mhe__embed_fwd) */
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->emb, g->emb, (int64_t)rows * C, c->dropout, 0));
    mhe__cu_contexts(g, B, T, Ts, &enc, &x);
    MHE__CU_MHE(mhe__cu_stack_fwd(g, &x, m->n_total_layers, &h));
    if (!c->post_norm) {
        MHE__CU_MHE(mhe__cu_norm_fwd(g, g->fin, g->fin_mean, g->fin_rstd, h, m->lnf_w, m->lnf_b, rows));
        h = g->fin;
    }
    g->final_h = h;
    g->last_Ts = Ts;
    if (g->last_cls)
        return mhe__cu_cls_fwd(g, h, B, T, cls_count, loss);
    if (g->cache) { /* the next token's logits: the other rows' would cost T - 1 head GEMM rows for nothing */
        const float *hx;
        MHE__CU_MHE(mhe__cu_head_in(g, h + (size_t)(rows - 1) * C, 1, &hx));
        MHE__CU_MHE(mhe__cu_linear_fwd(g, g->logits, V, hx, MHE__CU_P(g, head), MHE__CU_P(g, hb), 1, C, V));
        g->last_B = g->last_T = 1;
        g->last_count = 0;
        g->has_targets = 0;
        return MHE_OK;
    }
    {
        const float *hx;
        MHE__CU_MHE(mhe__cu_head_in(g, h, rows, &hx));
        MHE__CU_MHE(mhe__cu_linear_fwd(g, g->logits, V, hx, MHE__CU_P(g, head), MHE__CU_P(g, hb), rows, C, V));
    }
    g->last_B = B;
    g->last_T = T;
    g->last_count = count;
    g->has_targets = targets != NULL;
    if (targets) {
        /* the loss and its gradient in one pass: d logits = (softmax - onehot) / count */
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_xent, dim3(rows), dim3(MHE__CU_EW), 0, g->losses, g->d_logits,
                                   (const float *)g->logits, (const int *)g->targets, V,
                                   count ? 1.0f / (float)count : 0.0f), "cross-entropy");
        MHE__CU_MHE(mhe__cu_mean_loss(g, g->losses, rows, count, loss));
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_forward(mhe_cuda_model *g, const int *tokens, const int *targets, int B, int T,
                                         float *loss) {
    if (!g || !g->host)
        return MHE_ERR_ARG;
    if (!tokens || B < 1 || T < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: no tokens (B=%d T=%d)", B, T);
    if (mhe__n_enc(&g->host->cfg))
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: an encoder-decoder model needs a source: mhe_cuda_model_forward_s2s");
    g->cache = NULL;
    return mhe__cu_forward(g, NULL, 0, tokens, targets, B, T, 0, loss);
}

/* a batch as mhe__forward_batch: word features (bt->words: vocab rows or
   hash-emb buckets, gathered on the host as mhe_model_forward_batch does),
   a source (encdec), sequence labels and lengths (padding, never a target) */
static mhe_status mhe__cu_forward_batch(mhe_cuda_model *g, const mhe_batch *bt, float *loss) {
    mhe_status st;
    int *masked = NULL;
    if (!bt || !bt->tokens || bt->B < 1 || bt->T < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: no batch or no tokens");
    if (bt->targets && bt->lengths) { /* padding is never a target (mhe__forward_batch) */
        size_t n = (size_t)bt->B * bt->T;
        if (mhe__check_lengths(g->host, bt->lengths, bt->B, bt->T, "lengths") != MHE_OK)
            return mhe__fail(g->err, MHE_ERR_DATA, "%s", g->host->err);
        if (!(masked = (int *)malloc(n * sizeof(int))))
            return mhe__fail(g->err, MHE_ERR_NOMEM, "forward: out of memory");
        for (size_t i = 0; i < n; i++)
            masked[i] = (int)(i % bt->T) < bt->lengths[i / bt->T] ? bt->targets[i] : -1;
    }
    if (bt->words) {
        if ((int64_t)bt->B * bt->T > (1 << 24)) {
            free(masked);
            return mhe__fail(g->err, MHE_ERR_OVERFLOW, "batch %d x %d is too many tokens", bt->B, bt->T);
        }
        if ((st = mhe__emb_prepare(g->host, bt)) != MHE_OK) { /* checks the words, as the CPU's forward */
            free(masked);
            memcpy(g->err, g->host->err, MHE_ERR_LEN);
            return st;
        }
        g->words = bt;
    }
    g->in_lengths = bt->lengths;
    g->in_labels = bt->labels;
    g->in_src_lengths = bt->src_lengths;
    g->in_types = bt->types;
    st = mhe__cu_forward(g, bt->src, bt->Ts, bt->tokens, masked ? masked : bt->targets, bt->B, bt->T, 0, loss);
    g->in_lengths = g->in_labels = g->in_src_lengths = NULL;
    g->in_types = NULL;
    g->words = NULL;
    g->host->emb_in.active = 0;
    free(masked);
    return st;
}

MHEDEF mhe_status mhe_cuda_model_forward_batch(mhe_cuda_model *g, const mhe_batch *bt, float *loss) {
    if (!g || !g->host)
        return MHE_ERR_ARG;
    g->cache = NULL;
    return mhe__cu_forward_batch(g, bt, loss);
}

MHEDEF mhe_status mhe_cuda_model_forward_s2s(mhe_cuda_model *g, const int *src, int Ts, const int *tokens,
                                             const int *targets, int B, int T, float *loss) {
    if (!g || !g->host)
        return MHE_ERR_ARG;
    if (!tokens || B < 1 || T < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "forward: no tokens (B=%d T=%d)", B, T);
    if (!mhe__n_enc(&g->host->cfg))
        return mhe__fail(g->err, MHE_ERR_CONFIG, "forward_s2s: only an encoder-decoder model (arch=encdec) reads a source");
    g->cache = NULL;
    return mhe__cu_forward(g, src, Ts, tokens, targets, B, T, 0, loss);
}

/* encdec: the encoder's backward from the gradient its output got from every
   cross-attention (g->d_mem), into its blocks, the token embedding and the
   encoder's positions (the end of mhe__backward) */
static mhe_status mhe__cu_encode_bwd(mhe_cuda_model *g, const mhe__cu_ctx *enc) {
    mhe_model *m = g->host;
    const mhe_config *c = &m->cfg;
    int C = c->d_model, E = mhe__n_enc(c), rows = enc->B * enc->T;
    int stat = mhe__cu_kind_in(m, 0, E, MHE_ATTN_STATICEMB_QK) || mhe__cu_cross_has(m, MHE_ATTN_STATICEMB_QK);
    size_t n = (size_t)rows * C;
    const float *de = g->d_h;
    if (!c->post_norm) {
        MHE__CU_MHE(mhe__cu_zero(g, g->d_h, n));
        MHE__CU_MHE(mhe__cu_norm_bwd(g, g->d_h, g->d_mem, mhe__cu_sub_out(g, enc, E - 1, 2), m->enc_lnf_w,
                                     m->enc_lnf_b, g->enc_mean, g->enc_rstd, rows));
    } else {
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->d_h, g->d_mem, NULL, (int64_t)n));
    }
    MHE__CU_MHE(mhe__cu_stack_bwd(g, enc, E)); /* d_src_emb: zeroed before the decoder's backward */
    if (stat) /* staticemb-qk: Q, K read the source's embeddings too */
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->d_h, g->d_h, g->d_src_emb, (int64_t)n));
    if (g->drop && c->dropout > 0) { /* back through the source's embedding dropout (site 1) */
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->d_drop, g->d_h, (int64_t)n, c->dropout, 1));
        de = g->d_drop;
    }
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_tok, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->tok_emb), de,
                               (const int *)g->src, C), "source embedding backward");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_pos, dim3(mhe__cu_blocks((int64_t)enc->T * C, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->enc_pos_emb), de, enc->B, enc->T, C),
                "source position backward");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_model_backward(mhe_cuda_model *g) {
    mhe_model *m;
    const mhe_config *c;
    int B, T, rows, C, V, stat, E;
    const mhe_tensor *hb, *head;
    float *dfin;
    const float *de;
    mhe__cu_ctx enc, x;
    if (!g || !g->host)
        return MHE_ERR_ARG;
    m = g->host;
    c = &m->cfg;
    B = g->last_B;
    T = g->last_T;
    rows = B * T;
    C = c->d_model;
    V = mhe__head_width(c);
    head = mhe__token_head(m, &hb);
    E = mhe__n_enc(c);
    stat = mhe__cu_kind_in(m, E, m->n_total_layers, MHE_ATTN_STATICEMB_QK) || mhe__cu_cross_has(m, MHE_ATTN_STATICEMB_QK);
    if (!g->has_targets || rows == 0)
        return mhe__fail(g->err, MHE_ERR_ARG, "backward needs a forward pass with targets first");
    mhe__cu_contexts(g, B, T, g->last_Ts, &enc, &x);
    dfin = c->post_norm ? g->d_h : g->d_u;
    MHE__CU_MHE(mhe__cu_zero(g, dfin, (size_t)rows * C));
    if (g->last_cls) {
        MHE__CU_MHE(mhe__cu_cls_bwd(g, dfin));
    } else if (c->head_transform) { /* back through norm(act(W h + b)) */
        int64_t n = (int64_t)rows * C;
        MHE__CU_MHE(mhe__cu_zero(g, g->d_hd1, (size_t)n));
        MHE__CU_MHE(mhe__cu_linear_bwd(g, g->d_hd1, MHE__CU_G(g, head), MHE__CU_G(g, hb), g->d_logits, V, g->hd_out,
                                       MHE__CU_P(g, head), rows, C, V));
        MHE__CU_MHE(mhe__cu_zero(g, g->d_hd2, (size_t)n));
        MHE__CU_MHE(mhe__cu_norm_bwd(g, g->d_hd2, g->d_hd1, g->hd_act, m->head_norm_w, m->head_norm_b, g->hd_mean,
                                     g->hd_rstd, rows));
        MHE__CU_MHE(mhe__cu_zero(g, g->d_hd1, (size_t)n));
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_act_bwd, dim3(mhe__cu_blocks(n, MHE__CU_EW)), dim3(MHE__CU_EW), 0,
                                   c->activation, g->d_hd1, (const float *)g->hd_pre, (const float *)g->d_hd2, n),
                    "head activation backward");
        MHE__CU_MHE(mhe__cu_linear_bwd(g, dfin, MHE__CU_G(g, m->head_w), MHE__CU_G(g, m->head_b), g->d_hd1, C,
                                       g->final_h, MHE__CU_P(g, m->head_w), rows, C, C));
    } else {
        MHE__CU_MHE(mhe__cu_linear_bwd(g, dfin, MHE__CU_G(g, head), MHE__CU_G(g, hb), g->d_logits, V, g->final_h,
                                       MHE__CU_P(g, head), rows, C, V));
    }
    if (!c->post_norm) {
        MHE__CU_MHE(mhe__cu_zero(g, g->d_h, (size_t)rows * C));
        MHE__CU_MHE(mhe__cu_norm_bwd(g, g->d_h, g->d_u, mhe__cu_sub_out(g, &x, m->n_total_layers - 1, 2), m->lnf_w,
                                     m->lnf_b, g->fin_mean, g->fin_rstd, rows));
    }
    if (stat)
        MHE__CU_MHE(mhe__cu_zero(g, g->d_emb, (size_t)rows * C));
    if (E)
        MHE__CU_MHE(mhe__cu_zero(g, g->d_mem, (size_t)B * g->last_Ts * C));
    if (E && (mhe__cu_kind_in(m, 0, E, MHE_ATTN_STATICEMB_QK) || mhe__cu_cross_has(m, MHE_ATTN_STATICEMB_QK)))
        /* d e_src: the cross-attentions' (staticemb-qk), then the encoder's */
        MHE__CU_MHE(mhe__cu_zero(g, g->d_src_emb, (size_t)B * g->last_Ts * C));
    MHE__CU_MHE(mhe__cu_stack_bwd(g, &x, m->n_total_layers));
    if (stat) /* staticemb-qk: Q, K read the embeddings too */
        MHE__CU_MHE(mhe__cu_axpby_m(g, g->d_h, g->d_h, g->d_emb, (int64_t)rows * C));
    de = g->d_h;
    if (g->drop && c->dropout > 0) { /* back through the embedding dropout (mhe__embed_bwd) */
        MHE__CU_MHE(mhe__cu_dropout_m(g, g->d_drop, g->d_h, (int64_t)rows * C, c->dropout, 0));
        de = g->d_drop;
    }
    if (c->emb_norm) { /* through the embeddings' norm */
        MHE__CU_MHE(mhe__cu_zero(g, g->d_emb_sum, (size_t)rows * C));
        MHE__CU_MHE(mhe__cu_norm_bwd(g, g->d_emb_sum, de, g->emb_sum, m->emb_norm_w, m->emb_norm_b, g->emb_mean,
                                     g->emb_rstd, rows));
        de = g->d_emb_sum;
    }
    if (c->type_vocab)
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_tok, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->type_emb), de,
                                   (const int *)g->types, C), "token type backward");
    if (g->hashed)
        MHE__CU_MHE(mhe__cu_words_bwd(g, de, rows));
    else
        MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_tok, dim3(rows), dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->tok_emb),
                                   de, (const int *)g->tokens, C), "embedding backward");
    MHE__CU_TRY(mhe__cu_launch(mhe__cu_embed_bwd_pos, dim3(mhe__cu_blocks((int64_t)T * C, MHE__CU_EW)),
                               dim3(MHE__CU_EW), 0, MHE__CU_G(g, m->pos_emb), de, B, T, C),
                "position backward");
    MHE__CU_MHE(mhe__cu_fixed_bwd(g, T));
    return E ? mhe__cu_encode_bwd(g, &enc) : MHE_OK;
}

/* ---- evaluation ------------------------------------------------------------------ */

/* the evaluation loops' forward (mhe__eval_fwd) on the device; its message goes to the host model's err */
static mhe_status mhe__cu_eval_fwd(void *ctx, const mhe_batch *bt, float *loss, int64_t *count) {
    mhe_cuda_model *g = (mhe_cuda_model *)ctx;
    mhe_status st;
    st = mhe_cuda_model_forward_batch(g, bt, loss);
    if (st != MHE_OK)
        memcpy(g->host->err, g->err, MHE_ERR_LEN);
    *count = g->last_count;
    return st;
}

MHEDEF mhe_status mhe_cuda_evaluate_s2s(mhe_cuda_model *g, const int *data, size_t n, int batch, int src_len,
                                        int seq_len, int max_batches, float *mean_loss) {
    mhe_status st;
    if (!g || !g->host)
        return MHE_ERR_ARG;
    st = mhe__evaluate_s2s(g->host, data, n, batch, src_len, seq_len, max_batches, mean_loss, mhe__cu_eval_fwd, g);
    if (st != MHE_OK)
        memcpy(g->err, g->host->err, MHE_ERR_LEN);
    return st;
}

MHEDEF mhe_status mhe_cuda_evaluate(mhe_cuda_model *g, const int *data, size_t n, int batch, int seq_len,
                                    int max_batches, float *mean_loss) {
    return mhe_cuda_evaluate_s2s(g, data, n, batch, 0, seq_len, max_batches, mean_loss);
}

/* mhe_evaluate_sr with the forward passes on the device: the same windows
   and corruption (a fixed seed), the logits downloaded for the confusion */
MHEDEF mhe_status mhe_cuda_evaluate_sr(mhe_cuda_model *g, const int *data, size_t n, const mhe_word_feats *words,
                                       int batch, int seq_len, int max_batches, float prob, mhe_cls_metrics *out) {
    int64_t conf[MHE_SR_CLASSES * MHE_SR_CLASSES], count = 0;
    size_t windows, w = 0, i;
    double total = 0;
    int *buf, T = seq_len, b, nb = 0, c;
    float *lg = NULL;
    mhe_status st = MHE_OK;
    mhe_rng rng;
    mhe_batch bt;
    if (!g || !g->host || !out)
        return MHE_ERR_ARG;
    if (batch < 1 || seq_len < 1 || (int64_t)batch * seq_len > (1 << 24))
        return mhe__fail(g->err, MHE_ERR_ARG, "evaluate: batch %d and seq_len %d must be >= 1 (and not too many tokens)",
                         batch, seq_len);
    if (g->host->cfg.token_head != MHE_HEAD_SR)
        return mhe__fail(g->err, MHE_ERR_CONFIG, "Shuffle+Random needs the S+R head (token_head=sr)");
    if (!data || n < (size_t)T)
        return mhe__fail(g->err, MHE_ERR_DATA, "evaluation data has %zu tokens, a window needs %d", n, T);
    windows = n / (size_t)T;
    buf = (int *)malloc(3 * (size_t)batch * T * sizeof(int));
    lg = (float *)malloc((size_t)batch * T * MHE_SR_CLASSES * sizeof(float));
    if (!buf || !lg) {
        free(buf);
        free(lg);
        return mhe__fail(g->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    }
    memset(conf, 0, sizeof conf);
    mhe_rng_seed(&rng, 0x53522b52ULL); /* mhe_evaluate_sr's corruption */
    memset(&bt, 0, sizeof bt);
    bt.T = T;
    bt.tokens = buf + (size_t)batch * T;
    bt.targets = buf + 2 * (size_t)batch * T;
    bt.words = words;
    g->cache = NULL;
    while (w < windows && (max_batches <= 0 || nb < max_batches)) {
        float loss;
        bt.B = (int)(windows - w < (size_t)batch ? windows - w : (size_t)batch);
        for (b = 0; b < bt.B; b++, w++)
            memcpy(buf + (size_t)b * T, data + w * T, (size_t)T * sizeof(int));
        mhe_sr_corrupt((int *)bt.tokens, (int *)bt.targets, buf, NULL, bt.B, T, prob, words ? MHE_N_SPECIAL : 0, NULL,
                       words ? (size_t)words->n : (size_t)g->host->cfg.vocab_size, &rng);
        if ((st = mhe__cu_forward_batch(g, &bt, &loss)) != MHE_OK || (st = mhe_cuda_model_logits(g, lg)) != MHE_OK)
            break;
        total += (double)loss * g->last_count;
        count += g->last_count;
        for (i = 0; i < (size_t)bt.B * T; i++) {
            const float *z = lg + i * MHE_SR_CLASSES;
            int best = 0;
            if (bt.targets[i] < 0)
                continue;
            for (c = 1; c < MHE_SR_CLASSES; c++)
                if (z[c] > z[best])
                    best = c;
            conf[bt.targets[i] * MHE_SR_CLASSES + best]++;
        }
        nb++;
    }
    free(buf);
    free(lg);
    if (st != MHE_OK)
        return st;
    mhe_cls_metrics_from_confusion(conf, MHE_SR_CLASSES, out);
    out->loss = count ? total / (double)count : 0;
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_evaluate_strided(mhe_cuda_model *g, const int *data, size_t n, int batch, int seq_len,
                                            int stride, float *mean_loss, int64_t *n_scored) {
    mhe_status st;
    if (!g || !g->host)
        return MHE_ERR_ARG;
    st = mhe__evaluate_strided(g->host, data, n, batch, seq_len, stride, mean_loss, n_scored, mhe__cu_eval_fwd, g);
    if (st != MHE_OK)
        memcpy(g->err, g->host->err, MHE_ERR_LEN);
    return st;
}

MHEDEF mhe_status mhe_cuda_evaluate_cls(mhe_cuda_model *g, const mhe_text_set *s, int batch, int seq_len,
                                        mhe_cls_metrics *out) {
    int K, i, b, c, *buf, with_types;
    int64_t *conf;
    float *lg;
    double total = 0;
    mhe_status st = MHE_OK;
    mhe_batch bt;
    if (!g || !g->host || !out)
        return MHE_ERR_ARG;
    K = g->host->cfg.n_classes;
    if (batch < 1 || seq_len < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "evaluate: batch and seq_len must be >= 1");
    if (K < 1)
        return mhe__fail(g->err, MHE_ERR_CONFIG, "the model has no classification head (n_classes=0)");
    if (!s || s->n < 1)
        return mhe__fail(g->err, MHE_ERR_DATA, "classification data has no examples");
    if (s->n_classes > K)
        return mhe__fail(g->err, MHE_ERR_DATA, "classification data has labels up to %d, the model's head has %d classes",
                         s->n_classes - 1, K);
    with_types = s->types && g->host->cfg.type_vocab >= 2;
    buf = (int *)malloc(((size_t)(1 + with_types) * batch * seq_len + 3 * (size_t)batch) * sizeof(int));
    conf = (int64_t *)calloc((size_t)K * K, sizeof(int64_t));
    lg = (float *)malloc((size_t)batch * K * sizeof(float));
    if (!buf || !conf || !lg) {
        free(buf);
        free(conf);
        free(lg);
        return mhe__fail(g->err, MHE_ERR_NOMEM, "evaluate: out of memory");
    }
    g->host->training = 0; /* as mhe_evaluate_cls: no dropout */
    memset(&bt, 0, sizeof bt);
    bt.T = seq_len;
    bt.tokens = buf;
    bt.lengths = buf + (size_t)batch * seq_len;
    bt.labels = bt.lengths + batch;
    for (i = 0; i < s->n && st == MHE_OK; i += batch) {
        int *idx = buf + (size_t)batch * seq_len + 2 * (size_t)batch;
        float loss = 0;
        bt.B = s->n - i < batch ? s->n - i : batch;
        for (b = 0; b < bt.B; b++)
            idx[b] = i + b;
        mhe_text_set_batch(s, idx, bt.B, seq_len, buf, (int *)bt.lengths, (int *)bt.labels);
        if (with_types) { /* pairs: after the indices, as mhe_evaluate_cls */
            mhe_text_set_batch_types(s, idx, bt.B, seq_len, idx + batch);
            bt.types = idx + batch;
        }
        if ((st = mhe_cuda_model_forward_batch(g, &bt, &loss)) != MHE_OK || (st = mhe_cuda_model_logits(g, lg)) != MHE_OK)
            break;
        total += (double)loss * g->last_count;
        for (b = 0; b < bt.B; b++) { /* the arg max, the first on ties, as the CPU */
            int best = 0;
            for (c = 1; c < K; c++)
                if (lg[(size_t)b * K + c] > lg[(size_t)b * K + best])
                    best = c;
            if (bt.labels[b] >= 0)
                conf[(size_t)bt.labels[b] * K + best]++;
        }
    }
    if (st == MHE_OK) {
        mhe_cls_metrics_from_confusion(conf, K, out);
        out->loss = out->n ? total / (double)out->n : 0;
    }
    free(buf);
    free(conf);
    free(lg);
    return st;
}

/* ======================================================================== */
/* C8. decoding: the KV cache, prompt prefill, decode steps                 */
/* ======================================================================== */
MHEDEF mhe_status mhe_cuda_kv_cache_init(mhe_cuda_kv_cache *c, mhe_cuda_model *g, int max_len) {
    const mhe_config *cfg;
    size_t total = 0, off = 0;
    int l, has_add = 0, E, L;
    void *block = NULL;
    if (!c)
        return MHE_ERR_ARG;
    memset(c, 0, sizeof *c);
    if (!g || !g->host)
        return MHE_ERR_ARG;
    cfg = &g->host->cfg;
    E = mhe__n_enc(cfg);
    L = g->host->n_total_layers;
    if (cfg->arch == MHE_ARCH_ENCODER) /* as mhe_decode_step says it (fnet and linear are encoder-only) */
        return mhe__fail(g->err, MHE_ERR_CONFIG, "token-by-token decoding needs a decoder (arch=decoder or encdec)");
    if (cfg->embedding != MHE_EMB_VOCAB || cfg->token_head != MHE_HEAD_LM) /* as mhe_decode_step */
        return mhe__fail(g->err, MHE_ERR_CONFIG, "nothing to generate: %s",
                         cfg->embedding != MHE_EMB_VOCAB ? "a hash embedding has no vocabulary softmax"
                                                         : "the model has the S+R head, not an LM head");
    if (max_len < 1 || max_len > cfg->max_seq_len)
        return mhe__fail(g->err, MHE_ERR_ARG, "cache length %d is outside 1..max_seq_len (%d)", max_len,
                         cfg->max_seq_len);
    for (l = E; l < L; l++) { /* encdec: the source's K|V per decoder layer, for a source up to max_seq_len */
        const mhe_attn_weights *w = &g->host->layers[l].cross;
        mhe__geom geo;
        if (w->kind < 0)
            continue;
        geo = mhe__layer_geom(cfg, w->kind);
        c->xkv_w[l] = geo.k_w ? geo.k_w + geo.v_w : cfg->d_model;
        total += (size_t)cfg->max_seq_len * c->xkv_w[l];
    }
    for (l = E; l < L; l++) {
        int kind = g->host->layers[l].attn.kind, state = mhe__cu_kinds[kind].state;
        size_t n = (size_t)cfg->n_heads, dh = (size_t)mhe_config_d_head(cfg);
        mhe__geom geo = mhe__layer_geom(cfg, kind);
        c->kv_w[l] = geo.cache_k + geo.cache_v; /* el-att caches its input; the fixed kinds V only */
        if (state == MHE__CU_STATE_TAYLOR)
            c->state_floats[l] = n * (1 + dh + dh * (dh + 1) / 2) * (dh + 1);
        else if (state == MHE__CU_STATE_SCAN)
            c->state_floats[l] = n * (dh + 2);
        else if (state == MHE__CU_STATE_FIXED)
            c->state_floats[l] = (size_t)max_len * 2 * n * dh;
        total += (size_t)max_len * c->kv_w[l] + c->state_floats[l];
        has_add |= mhe__cu_kinds[kind].kb;
    }
    if (has_add) /* the MHE-ADD key biases, recomputed each step */
        total += (size_t)max_len * cfg->n_heads;
    MHE__CU_TRY(cudaMalloc(&block, total * sizeof(float)), "KV cache");
    c->block = block;
    for (l = E; l < L; l++) {
        c->xkv[l] = c->xkv_w[l] ? (float *)block + off : NULL;
        off += (size_t)cfg->max_seq_len * c->xkv_w[l];
    }
    for (l = E; l < L; l++) {
        c->kv[l] = (float *)block + off;
        off += (size_t)max_len * c->kv_w[l];
        c->state[l] = c->state_floats[l] ? (float *)block + off : NULL;
        off += c->state_floats[l];
    }
    c->kb = has_add ? (float *)block + off : NULL;
    c->cap = max_len;
    return MHE_OK;
}

MHEDEF void mhe_cuda_kv_cache_free(mhe_cuda_kv_cache *c) {
    if (c && c->block)
        cudaFree(c->block);
    if (c)
        memset(c, 0, sizeof *c);
}

/* Position 0 of a sequence, as the CPU's mhe_decode_step: taylor's S|z
   start at 0 (nonapprox's state is started by its kernel: fresh), and the
   fixed stream runs once over the cache's length (causal: its first rows
   are those of any shorter run), its Q|K kept for every fixed layer. */
static mhe_status mhe__cu_decode_start(mhe_cuda_model *g, mhe_cuda_kv_cache *c) {
    const mhe_config *cfg = &g->host->cfg;
    int HD = cfg->n_heads * mhe_config_d_head(cfg), l;
    for (l = mhe__n_enc(cfg); l < g->host->n_total_layers; l++)
        if (mhe__cu_kinds[g->host->layers[l].attn.kind].state == MHE__CU_STATE_TAYLOR)
            MHE__CU_MHE(mhe__cu_zero(g, c->state[l], c->state_floats[l]));
    if (g->host->fixed.kind < 0)
        return MHE_OK;
    g->cache = NULL;
    MHE__CU_MHE(mhe_cuda_model_reserve(g, 1, c->cap));
    MHE__CU_MHE(mhe__cu_fixed_fwd(g, c->cap));
    for (l = 0; l < g->host->fixed.top; l++)
        if (mhe__kind_fixed(g->host->layers[l].attn.kind)) /* the layers the host's fixed stream serves */
            MHE__CU_TRY(mhe__cu_launch(mhe__cu_copy_rows, dim3(mhe__cu_blocks((int64_t)c->cap * 2 * HD, MHE__CU_EW)),
                                       dim3(MHE__CU_EW), 0, c->state[l], 2 * HD,
                                       (const float *)g->fixed_layer[l].proj, 3 * HD, c->cap, 2 * HD, c->cap),
                        "the fixed stream's Q, K");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_prefill(mhe_cuda_model *g, mhe_cuda_kv_cache *c, const int *tokens, int n, float *logits) {
    mhe_status st;
    if (!g || !g->host || !c || !c->block)
        return MHE_ERR_ARG;
    if (!tokens || n < 1)
        return mhe__fail(g->err, MHE_ERR_ARG, "prefill: no tokens (n=%d)", n);
    if (c->len >= c->cap)
        return mhe__fail(g->err, MHE_ERR_SHAPE, "the KV cache is full (%d positions)", c->cap);
    if (n > c->cap - c->len)
        return mhe__fail(g->err, MHE_ERR_SHAPE, "%d tokens do not fit the KV cache (%d of %d positions used)", n,
                         c->len, c->cap);
    if (mhe__n_enc(&g->host->cfg) && c->src_len < 1) /* as mhe_decode_step */
        return mhe__fail(g->err, MHE_ERR_ARG, "encode a source with mhe_cuda_kv_cache_encode before decoding");
    if (c->len == 0) /* a new sequence: empty states, the fixed stream's Q|K of the current weights */
        MHE__CU_MHE(mhe__cu_decode_start(g, c));
    g->cache = c;
    st = mhe__cu_forward(g, NULL, 0, tokens, NULL, 1, n, c->len, NULL);
    g->cache = NULL;
    if (st != MHE_OK)
        return st;
    c->len += n;
    if (logits)
        MHE__CU_TRY(cudaMemcpy(logits, g->logits, (size_t)g->host->cfg.vocab_size * sizeof(float),
                               cudaMemcpyDeviceToHost), "download logits");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_kv_cache_encode(mhe_cuda_model *g, mhe_cuda_kv_cache *c, const int *src, int Ts) {
    const mhe_config *cfg;
    int l, i, E;
    if (!g || !g->host || !c || !c->block)
        return MHE_ERR_ARG;
    cfg = &g->host->cfg;
    E = mhe__n_enc(cfg);
    if (!E)
        return mhe__fail(g->err, MHE_ERR_CONFIG, "only an encoder-decoder model (arch=encdec) encodes a source");
    if (!src || Ts < 1 || Ts > cfg->max_seq_len)
        return mhe__fail(g->err, MHE_ERR_ARG, "source length %d is outside [1, %d]", src ? Ts : 0, cfg->max_seq_len);
    for (i = 0; i < Ts; i++)
        if (src[i] < 0 || src[i] >= cfg->vocab_size)
            return mhe__fail(g->err, MHE_ERR_DATA, "source: token %d at position %d is outside the vocabulary (%d)",
                             src[i], i, cfg->vocab_size);
    g->cache = NULL;
    g->drop = g->has_len = g->has_src_len = 0; /* decoding: no dropout, one unpadded source */
    MHE__CU_MHE(mhe_cuda_model_reserve(g, 1, Ts));
    MHE__CU_TRY(cudaMemcpy(g->src, src, (size_t)Ts * sizeof(int), cudaMemcpyHostToDevice), "upload source");
    MHE__CU_MHE(mhe__cu_encode(g, 1, Ts));
    for (l = E; l < g->host->n_total_layers; l++) {
        const mhe_attn_weights *w = &g->host->layers[l].cross;
        if (mhe__layer_geom(cfg, w->kind).k_w)
            MHE__CU_MHE(mhe__cu_cross_kv(g, l, Ts, g->mem, g->src_emb, c->xkv[l], g->cross[l].ext));
        else /* el-att: K = V = the encoder output */
            MHE__CU_TRY(cudaMemcpy(c->xkv[l], g->mem, (size_t)Ts * cfg->d_model * sizeof(float),
                                   cudaMemcpyDeviceToDevice), "the encoder output");
    }
    c->src_len = Ts;
    c->len = 0;
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_decode_step(mhe_cuda_model *g, mhe_cuda_kv_cache *c, int token, float *logits) {
    return mhe_cuda_prefill(g, c, &token, 1, logits);
}

/* ======================================================================== */
/* C9. the trainer: steps, deferred statistics, CUDA graphs                 */
/* ======================================================================== */
/* ---- a step as a CUDA graph (mhe_cuda_trainer.graph) ------------------------------ */

struct mhe__cu_graph {
    mhe__cu_recorder last;                  /* the last step's ops: the arguments the graph's nodes hold */
    cudaGraph_t graph;
    cudaGraphExec_t exec;                   /* NULL: no graph for the last step's shape yet */
    cudaGraphNode_t *nodes;                 /* node i runs last.ops[i] */
};

static void mhe__cu_graph_drop(mhe__cu_graph *G) {
    if (G->exec)
        cudaGraphExecDestroy(G->exec);
    if (G->graph)
        cudaGraphDestroy(G->graph);
    free(G->nodes);
    G->exec = NULL;
    G->graph = NULL;
    G->nodes = NULL;
}

/* the recorded ops of a step as one chain of nodes, each after the one before */
static cudaError_t mhe__cu_graph_build(mhe__cu_graph *G, const mhe__cu_recorder *rec) {
    cudaError_t e = cudaGraphCreate(&G->graph, 0);
    int i;
    if (e == cudaSuccess && !(G->nodes = (cudaGraphNode_t *)malloc((size_t)(rec->n > 0 ? rec->n : 1) * sizeof *G->nodes)))
        e = cudaErrorMemoryAllocation;
    for (i = 0; e == cudaSuccess && i < rec->n; i++)
        e = rec->ops[i]->add(G->graph, i ? &G->nodes[i - 1] : NULL, &G->nodes[i]);
    if (e == cudaSuccess)
        e = cudaGraphInstantiateWithFlags(&G->exec, G->graph, 0);
    if (e != cudaSuccess) {
        G->exec = NULL; /* not made */
        mhe__cu_graph_drop(G);
    }
    return e;
}

/* Run a recorded step: as the graph when its ops repeat the last step's
   (patching the nodes whose arguments changed), as a new graph the second
   time a shape is seen, else op by op. It becomes the last step. */
static mhe_status mhe__cu_graph_run(mhe_cuda_trainer *t, mhe__cu_recorder *rec) {
    mhe_cuda_model *g = t->dev;
    mhe__cu_graph *G = t->graph_state;
    int i, same;
    if (!G && !(G = t->graph_state = (mhe__cu_graph *)calloc(1, sizeof *G)))
        return mhe__fail(g->err, MHE_ERR_NOMEM, "CUDA graph: out of memory");
    same = G->last.n == rec->n && rec->n > 0;
    for (i = 0; same && i < rec->n; i++)
        same = rec->ops[i]->key == G->last.ops[i]->key && rec->ops[i]->same_shape(G->last.ops[i]);
    if (!same) {
        mhe__cu_graph_drop(G);
    } else if (G->exec) {
        for (i = 0; i < rec->n; i++)
            if (!rec->ops[i]->same_args(G->last.ops[i])) {
                cudaError_t e = rec->ops[i]->patch(G->exec, G->nodes[i]);
                if (e != cudaSuccess) { /* its nodes no longer match the last step's ops */
                    mhe__cu_graph_drop(G);
                    return mhe__cu_status(e, g->err, "CUDA graph: patch a node");
                }
                t->graph_patches++;
            }
    } else {
        cudaError_t e = mhe__cu_graph_build(G, rec);
        if (e == cudaSuccess) {
            t->graph_builds++;
        } else { /* the step still runs, op by op, and so do the next ones */
            cudaGetLastError();
            t->graph_error = e;
            t->graph = 0;
        }
    }
    if (G->exec) {
        cudaError_t e = cudaGraphLaunch(G->exec, 0);
        if (e != cudaSuccess) {
            mhe__cu_graph_drop(G);
            return mhe__cu_status(e, g->err, "CUDA graph: launch the step");
        }
        t->graph_launches++;
    } else {
        for (i = 0; i < rec->n; i++)
            MHE__CU_TRY(rec->ops[i]->run(), "a recorded step's operation");
    }
    mhe__cu_recorder_free(&G->last);
    G->last = *rec;
    memset(rec, 0, sizeof *rec);
    return MHE_OK;
}

/* ---- training ------------------------------------------------------------------- */

MHEDEF mhe_status mhe_cuda_trainer_init(mhe_cuda_trainer *t, mhe_cuda_model *g, const mhe_train_config *tc) {
    mhe_status st;
    size_t bytes;
    void *p = NULL, *q = NULL;
    cudaError_t e;
    if (!t)
        return MHE_ERR_ARG;
    memset(t, 0, sizeof *t);
    if (!g || !g->host)
        return mhe__fail(t->host.err, MHE_ERR_ARG, "mhe_cuda_trainer_init: no device model");
    if ((st = mhe__trainer_alloc(&t->host, g->host, tc)) != MHE_OK)
        return st;
    t->dev = g;
    bytes = (size_t)g->host->n_params * sizeof(float);
    e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess && (e = cudaMalloc(&q, bytes)) != cudaSuccess)
        cudaFree(p);
    if (e == cudaSuccess) {
        t->adam_m = (float *)p;
        t->adam_v = (float *)q;
        e = cudaMemset(p, 0, bytes);
        if (e == cudaSuccess)
            e = cudaMemset(q, 0, bytes);
    }
    if (e != cudaSuccess) {
        st = mhe__cu_status(e, t->host.err, "AdamW moments");
        mhe_cuda_trainer_free(t);
        return st;
    }
    { /* the AdamW launch's chunks: every tensor cut in slices of MHE__CU_ADAM_CHUNK */
        mhe_model *m = g->host;
        mhe_cuda_adam_chunk *c;
        int i, n = 0;
        for (i = 0; i < m->n_tensors; i++)
            n += (int)((m->params[i].size + MHE__CU_ADAM_CHUNK - 1) / MHE__CU_ADAM_CHUNK);
        c = (mhe_cuda_adam_chunk *)malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
        if (!c) {
            mhe_cuda_trainer_free(t);
            return mhe__fail(t->host.err, MHE_ERR_NOMEM, "AdamW chunks: out of memory");
        }
        for (i = 0, n = 0; i < m->n_tensors; i++) {
            const mhe_tensor *pt = &m->params[i];
            int64_t off = (int64_t)(pt->data - m->param_data), j;
            for (j = 0; j < (int64_t)pt->size; j += MHE__CU_ADAM_CHUNK, n++) {
                c[n].off = off + j;
                c[n].n = (int)((int64_t)pt->size - j < MHE__CU_ADAM_CHUNK ? (int64_t)pt->size - j : MHE__CU_ADAM_CHUNK);
                c[n].decay = pt->decay != 0;
            }
        }
        e = cudaMalloc(&p, (size_t)(n > 0 ? n : 1) * sizeof *c);
        if (e == cudaSuccess) {
            t->adam_chunks = (mhe_cuda_adam_chunk *)p;
            t->n_adam_chunks = n;
            e = cudaMemcpy(p, c, (size_t)n * sizeof *c, cudaMemcpyHostToDevice);
        }
        free(c);
        if (e != cudaSuccess) {
            st = mhe__cu_status(e, t->host.err, "AdamW chunks");
            mhe_cuda_trainer_free(t);
            return st;
        }
    }
    e = cudaMalloc(&p, 8 * sizeof(float)); /* a deferred step's statistics, and their host copy */
    if (e == cudaSuccess) {
        t->stats = (float *)p;
        e = cudaMemset(p, 0, 8 * sizeof(float));
    }
    if (e == cudaSuccess && (e = cudaMallocHost(&q, 8 * sizeof(float))) == cudaSuccess)
        t->stats_host = (float *)q;
    if (e == cudaSuccess && (e = cudaEventCreate(&t->stats_ready)) == cudaSuccess)
        t->has_event = 1;
    if (e != cudaSuccess) {
        st = mhe__cu_status(e, t->host.err, "step statistics");
        mhe_cuda_trainer_free(t);
        return st;
    }
    if ((st = mhe_cuda_model_reserve(g, tc->batch, tc->seq_len)) != MHE_OK) {
        memcpy(t->host.err, g->err, MHE_ERR_LEN);
        mhe_cuda_trainer_free(t);
        return st;
    }
    return MHE_OK;
}

MHEDEF void mhe_cuda_trainer_free(mhe_cuda_trainer *t) {
    if (!t)
        return;
    if (t->adam_m)
        cudaFree(t->adam_m);
    if (t->adam_v)
        cudaFree(t->adam_v);
    if (t->adam_chunks)
        cudaFree(t->adam_chunks);
    if (t->stats)
        cudaFree(t->stats);
    if (t->stats_host)
        cudaFreeHost(t->stats_host);
    if (t->has_event)
        cudaEventDestroy(t->stats_ready);
    if (t->graph_state) {
        mhe__cu_graph_drop(t->graph_state);
        mhe__cu_recorder_free(&t->graph_state->last);
        free(t->graph_state);
        t->graph_state = NULL;
    }
    t->adam_m = t->adam_v = NULL;
    t->adam_chunks = NULL;
    t->stats = t->stats_host = NULL;
    t->has_event = 0;
    mhe_trainer_free(&t->host);
}

/* Admin's profiling pass (mhe_model_admin_init) on the device: one forward
   in training mode that sets each sublayer's omega in turn */
static mhe_status mhe__cu_admin_init(mhe_cuda_model *g, const mhe_batch *bt) {
    mhe_model *m = g->host;
    mhe_batch b = *bt;
    mhe_status st;
    int keep = m->training;
    b.targets = NULL; /* no loss: the pass only measures */
    b.labels = NULL;
    m->admin_profiling = 1;
    m->admin_ratio[0] = m->admin_ratio[1] = 1.0f;
    m->training = 1; /* as the authors profile: dropout on */
    st = mhe_cuda_model_forward_batch(g, &b, NULL);
    m->training = keep;
    m->admin_profiling = 0;
    return st;
}

/* mhe__trainer_update on the device: the dropout seed drawn as the CPU
   trainer draws it (the same batches follow), Admin's profiling on a fresh
   run, forward and backward in training mode, clipping and AdamW */
static mhe_status mhe__cu_train_batch(mhe_cuda_trainer *t, const mhe_batch *bt) {
    mhe_cuda_model *g = t->dev;
    mhe_model *m = g->host;
    mhe_status st = MHE_OK;
    mhe__cu_recorder rec = {NULL, 0, 0};
    float loss = 0;
    int admin = m->cfg.admin && t->host.step == 0;
    m->training = 1;
    m->dropout_seed = mhe_rng_u64(&t->host.rng);
    g->cache = NULL;
    g->async_in = t->deferred;
    if (admin) /* it reads its statistics back: never recorded */
        st = mhe__cu_admin_init(g, bt);
    if (t->deferred && t->graph && !admin)
        mhe__cu_recording = &rec;
    if (st == MHE_OK && (st = mhe_cuda_model_zero_grad(g)) == MHE_OK) {
        g->loss_sink = t->deferred ? t->stats : NULL; /* a deferred step's loss stays on the device */
        st = mhe_cuda_model_forward_batch(g, bt, &loss);
        g->loss_sink = NULL;
    }
    if (st == MHE_OK)
        st = mhe_cuda_model_backward(g);
    m->training = 0;
    if (st == MHE_OK)
        st = mhe__cu_update(t, g);
    mhe__cu_recording = NULL;
    g->async_in = 0;
    if (st == MHE_OK && rec.n)
        st = mhe__cu_graph_run(t, &rec);
    mhe__cu_recorder_free(&rec);
    if (st == MHE_OK && t->deferred)
        st = mhe__cu_status(cudaEventRecord(t->stats_ready, 0), g->err, "statistics event");
    if (st != MHE_OK) {
        memcpy(t->host.err, g->err, MHE_ERR_LEN);
        return st;
    }
    if (!t->deferred)
        t->host.last_loss = loss;
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_trainer_stats(mhe_cuda_trainer *t) {
    mhe_cuda_model *g;
    if (!t || !t->dev)
        return MHE_ERR_ARG;
    g = t->dev;
    if (!t->deferred)
        return MHE_OK;
    if (t->stats_pending) {
        MHE__CU_TRY(cudaEventSynchronize(t->stats_ready), "statistics");
        t->stats_pending = 0;
        t->host.last_loss = t->stats_count ? (float)((double)t->stats_host[0] / t->stats_count) : 0.0f;
        t->host.last_grad_norm = (float)sqrt((double)t->stats_host[1]);
    }
    if (t->stats_host[3] != 0.0f) { /* every later call too: no step has updated since */
        mhe__fail(t->host.err, MHE_ERR_NONFINITE, "gradient norm is %g at step %d; no update made from it on",
                  (double)t->stats_host[4], (int)t->stats_host[3] - 1);
        memcpy(g->err, t->host.err, MHE_ERR_LEN); /* mhe_cuda_trainer_sync's callers read the model's */
        return MHE_ERR_NONFINITE;
    }
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_trainer_step(mhe_cuda_trainer *t, const int *data, size_t n) {
    mhe_batch bt;
    mhe_status st;
    if (!t || !t->dev)
        return MHE_ERR_ARG;
    if ((st = mhe__lm_batch(&t->host, data, n, &bt)) != MHE_OK)
        return st;
    return mhe__cu_train_batch(t, &bt);
}

MHEDEF mhe_status mhe_cuda_trainer_step_cls(mhe_cuda_trainer *t, const mhe_text_set *s) {
    mhe_trainer *ht;
    const mhe_train_config *tc;
    mhe_batch bt;
    int b, *idx;
    if (!t || !t->dev)
        return MHE_ERR_ARG;
    ht = &t->host;
    tc = &ht->tc;
    idx = ht->batch_targets; /* the example indices, in the targets' room (mhe_trainer_step_cls) */
    if (!s || s->n < 1)
        return mhe__fail(ht->err, MHE_ERR_DATA, "classification data has no examples");
    if (s->n_classes > t->dev->host->cfg.n_classes)
        return mhe__fail(ht->err, MHE_ERR_DATA, "classification data has labels up to %d, the model's head has %d classes",
                         s->n_classes - 1, t->dev->host->cfg.n_classes);
    for (b = 0; b < tc->batch; b++)
        idx[b] = (int)mhe_rng_below(&ht->rng, (uint32_t)s->n);
    mhe_text_set_batch(s, idx, tc->batch, tc->seq_len, ht->batch_tokens, ht->batch_lengths, ht->batch_labels);
    memset(&bt, 0, sizeof bt);
    bt.B = tc->batch;
    bt.T = tc->seq_len;
    bt.tokens = ht->batch_tokens;
    bt.labels = ht->batch_labels;
    bt.lengths = ht->batch_lengths;
    if (s->types && t->dev->host->cfg.type_vocab >= 2) { /* pairs: in S+R's room, as mhe_trainer_step_cls */
        mhe_text_set_batch_types(s, idx, tc->batch, tc->seq_len, ht->batch_clean);
        bt.types = ht->batch_clean;
    }
    return mhe__cu_train_batch(t, &bt);
}

/* one Shuffle+Random step as mhe_trainer_step_sr: the same windows and
   corruption (drawn on the host from the trainer's RNG), then the device's
   forward, backward and AdamW; words: the corpus's word features (hash-emb
   or word-vocabulary models), NULL for byte tokens */
MHEDEF mhe_status mhe_cuda_trainer_step_sr(mhe_cuda_trainer *t, const int *data, size_t n, const mhe_word_feats *words) {
    mhe_trainer *h;
    mhe_cuda_model *g;
    const mhe_train_config *tc;
    mhe_batch bt;
    int T, b;
    if (!t || !t->dev)
        return MHE_ERR_ARG;
    h = &t->host;
    g = t->dev;
    tc = &h->tc;
    T = tc->seq_len;
    if (g->host->cfg.token_head != MHE_HEAD_SR)
        return mhe__fail(h->err, MHE_ERR_CONFIG, "Shuffle+Random needs the S+R head (token_head=sr); this model has an LM head");
    if (!data || n < (size_t)T)
        return mhe__fail(h->err, MHE_ERR_DATA, "training data has %zu tokens, a window needs %d", n, T);
    for (b = 0; b < tc->batch; b++) {
        size_t span = n - (size_t)T + 1;
        size_t off = span > 0xFFFFFFFFu ? (size_t)(mhe_rng_u64(&h->rng) % span) : (size_t)mhe_rng_below(&h->rng, (uint32_t)span);
        memcpy(h->batch_clean + (size_t)b * T, data + off, (size_t)T * sizeof(int));
    }
    mhe_sr_corrupt(h->batch_tokens, h->batch_targets, h->batch_clean, NULL, tc->batch, T, tc->sr_prob,
                   words ? MHE_N_SPECIAL : 0, NULL, words ? (size_t)words->n : (size_t)g->host->cfg.vocab_size, &h->rng);
    memset(&bt, 0, sizeof bt);
    bt.B = tc->batch;
    bt.T = T;
    bt.tokens = h->batch_tokens;
    bt.targets = h->batch_targets;
    bt.words = words;
    return mhe__cu_train_batch(t, &bt); /* its dropout seed is drawn after the batch, as the CPU trainer does */
}

MHEDEF mhe_status mhe_cuda_trainer_sync(mhe_cuda_trainer *t) {
    mhe_cuda_model *g = t->dev;
    size_t bytes = (size_t)g->host->n_params * sizeof(float);
    mhe_status st = mhe_cuda_trainer_stats(t);
    if (st != MHE_OK)
        return st;
    MHE__CU_MHE(mhe_cuda_model_download(g));
    MHE__CU_TRY(cudaMemcpy(t->host.adam_m, t->adam_m, bytes, cudaMemcpyDeviceToHost), "download AdamW m");
    MHE__CU_TRY(cudaMemcpy(t->host.adam_v, t->adam_v, bytes, cudaMemcpyDeviceToHost), "download AdamW v");
    return MHE_OK;
}

MHEDEF mhe_status mhe_cuda_trainer_upload(mhe_cuda_trainer *t) {
    mhe_cuda_model *g = t->dev;
    size_t bytes = (size_t)g->host->n_params * sizeof(float);
    MHE__CU_MHE(mhe_cuda_model_upload(g));
    MHE__CU_TRY(cudaMemcpy(t->adam_m, t->host.adam_m, bytes, cudaMemcpyHostToDevice), "upload AdamW m");
    MHE__CU_TRY(cudaMemcpy(t->adam_v, t->host.adam_v, bytes, cudaMemcpyHostToDevice), "upload AdamW v");
    return MHE_OK;
}

#endif /* MHE_IMPLEMENTATION && !MHE_CUDA_IMPLEMENTATION_DONE */
