/* Stack budget: training steps and decoding run in a thread whose stack is
   128 KB (musl's default), with OpenMP workers of 128 KB too (the program
   re-executes itself with OMP_STACKSIZE=128K). The thread's stack is
   painted first and the untouched part measured after, so the test also
   checks the documented need, MHE_STACK_NEED. Kernel scratch comes from the
   model's planned block, not from the stack, for every kind and head size
   up to MHE_MAX_D_HEAD. */
#define _GNU_SOURCE
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#ifdef _WIN32
/* the painted stack needs pthread_attr_setstack with the caller's memory,
   aligned_alloc, setenv and /proc/self/exe: POSIX */
int main(void) {
    printf("SKIP test_stack: needs a caller-allocated pthread stack, setenv and re-execution through /proc (POSIX)\n");
    printf("RESULT: %d passed, %d failed, 1 skipped\n", test_pass_count, test_fail_count);
    return 0;
}
#else
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define STACK_BYTES (128 * 1024)
#define PAINT 0xa5

typedef struct {
    const char *config;
    int ok;
    char err[MHE_ERR_LEN];
} job;

/* train a few steps and decode: m on the heap (56 KB of the caller's data, not the library's frames) */
static void run_model(job *j, mhe_model *m) {
    mhe_config c = mhe_config_default();
    mhe_trainer tr;
    mhe_train_config tc = mhe_train_config_default();
    mhe_kv_cache kv;
    int tokens[600], i, s;
    if (mhe_config_parse(&c, j->config, strlen(j->config), j->err) != MHE_OK) return;
    if (mhe_model_init(m, &c, 1, NULL) != MHE_OK) { snprintf(j->err, sizeof j->err, "%.200s", m->err); return; }
    for (i = 0; i < 600; i++) tokens[i] = (i * 7 + i / 13) % c.vocab_size;
    /* the frames do not grow with the batch or the MLP width: the d_head 256
       configs run one sequence, so the qemu and sanitizer builds stay quick */
    tc.batch = c.d_model > 128 ? 1 : 4; tc.seq_len = c.max_seq_len; tc.steps = 2; tc.warmup = 1;
    if (mhe_trainer_init(&tr, m, &tc) != MHE_OK) { snprintf(j->err, sizeof j->err, "%.200s", m->err); mhe_model_free(m); return; }
    for (s = 0; s < tc.steps; s++)
        if (mhe_trainer_step(&tr, tokens, 600) != MHE_OK) { snprintf(j->err, sizeof j->err, "step: %.200s", m->err); goto done; }
    j->ok = 1;
    if (c.arch == MHE_ARCH_DECODER) {
        j->ok = 0;
        if (mhe_kv_cache_init(&kv, m, c.max_seq_len, NULL) != MHE_OK) { snprintf(j->err, sizeof j->err, "cache"); goto done; }
        for (i = 0; i < c.max_seq_len; i++)
            if (mhe_decode_step(m, &kv, tokens[i]) != MHE_OK) { snprintf(j->err, sizeof j->err, "decode: %.200s", m->err); break; }
        j->ok = i == c.max_seq_len;
        mhe_kv_cache_free(&kv);
    }
done:
    mhe_trainer_free(&tr);
    mhe_model_free(m);
}

static void *run(void *arg) {
    job *j = (job *)arg;
    mhe_model *m = (mhe_model *)malloc(sizeof *m);
    j->ok = 0;
    if (m) run_model(j, m);
    free(m);
    return NULL;
}

/* run one config on a painted 128 KB stack; returns the bytes it touched */
static size_t run_small_stack(job *j) {
    pthread_attr_t attr;
    pthread_t th;
    unsigned char *stack = (unsigned char *)aligned_alloc(4096, STACK_BYTES);
    size_t untouched = 0;
    memset(stack, PAINT, STACK_BYTES);
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, STACK_BYTES);
    if (pthread_create(&th, &attr, run, j) != 0) { j->ok = 0; snprintf(j->err, sizeof j->err, "pthread_create"); }
    else pthread_join(th, NULL);
    while (untouched < STACK_BYTES && stack[untouched] == PAINT) untouched++;   /* stacks grow down */
    pthread_attr_destroy(&attr);
    free(stack);
    return STACK_BYTES - untouched;
}

/* The kernels' scratch for direct callers: a bound block and a per-call one
   give the same bits; a fused backward with maps but no map_scratch is an
   argument error, not an assert. */
static void direct_scratch(void) {
    enum { M = 70, N = 90, K = 150 };
    static float A[M * K], B[K * N], C1[M * N], C2[M * N];
    float *buf = (float *)malloc(mhe_scratch_floats(16, 2) * sizeof(float));
    mhe_scratch ws;
    const mhe_scratch *prev;
    mhe_attn_dims d;
    mhe_attn_grads g;
    float q[2 * 4 * 16], o[2 * 4 * 16], lse[2 * 2 * 4], dq[2 * 4 * 16], ones[2 * 16];
    int i;
    for (i = 0; i < M * K; i++) A[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (i = 0; i < K * N; i++) B[i] = (float)((i * 53) % 97) / 48.0f - 1.0f;
    mhe_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);
    mhe_scratch_init(&ws, buf, 16, 2);
    prev = mhe_scratch_bind(&ws);
    mhe_gemm(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C2, N);
    CHECK(memcmp(C1, C2, sizeof C1) == 0, "mhe_gemm on a bound scratch = on its own, bit for bit");
    memset(&d, 0, sizeof d);
    d.B = 1; d.n_heads = 2; d.n_kv_heads = 1; d.Tq = d.Tk = 4; d.d_head = 16; d.q_shared = 1;
    d.q_stride = d.k_stride = d.v_stride = 16; d.o_stride = 32; d.scale = 0.25f;
    for (i = 0; i < (int)(sizeof q / sizeof q[0]); i++) q[i] = (float)(i % 7) / 7.0f;
    for (i = 0; i < 2 * 16; i++) ones[i] = 1.0f;
    d.q_mul = ones; d.v_mul = ones;
    CHECK(mhe_attn_fused_fwd(&d, o, lse, q, q, q) == MHE_OK, "fused forward with maps on the bound scratch");
    memset(&g, 0, sizeof g);
    memset(dq, 0, sizeof dq);
    CHECK(mhe_attn_fused_bwd(&d, &g, dq, dq, dq, o, o, lse, q, q, q) == MHE_ERR_ARG,
          "maps without map_scratch: MHE_ERR_ARG");
    mhe_scratch_bind(prev);
    free(buf);
}

int main(int argc, char **argv) {
    static const char *configs[] = {
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=64\n",
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=3\nmax_seq_len=64\nattn=mhe-mul,mhe-add,collab\nattn_dropout=0.1\n",
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=4\nmax_seq_len=64\nattn=taylor,nonapprox,staticemb-qk,mlp\n",
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=64\nattn=rndemb-qk,gqa\nkv_groups=2\n",
        "vocab_size=64\nd_model=512\nn_heads=2\nn_layers=1\nmax_seq_len=80\nd_ff=64\nattn=mha\n",   /* d_head 256 = MHE_MAX_D_HEAD */
        "vocab_size=64\nd_model=512\nn_heads=2\nn_layers=2\nmax_seq_len=80\nd_ff=64\nattn=mhe-add,mhe-mul\nnorm_position=post\n",
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=64\narch=encoder\nattn=fnet,linear\n",
        "vocab_size=64\nd_model=64\nn_heads=4\nn_layers=2\nmax_seq_len=64\narch=encdec\nenc_layers=1\ncross_attn=mhe-mul\n",
    };
    size_t worst = 0;
    int i;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!getenv("OMP_STACKSIZE")) {   /* OpenMP reads it at start-up: run again with small worker stacks */
        setenv("OMP_STACKSIZE", "128K", 1);
        execv("/proc/self/exe", argv);
        printf("cannot re-execute (%s): worker stacks keep their default size\n", argc > 0 ? argv[0] : "?");
    }
    direct_scratch();
    for (i = 0; i < (int)(sizeof configs / sizeof configs[0]); i++) {
        job j;
        size_t used;
        memset(&j, 0, sizeof j);
        j.config = configs[i];
        used = run_small_stack(&j);
        CHECK(j.ok, "training and decoding on a 128 KB stack [%s]: %s", configs[i], j.err);
        if (used > worst) worst = used;
    }
    printf("deepest stack: %zu bytes (MHE_STACK_NEED %d)\n", worst, MHE_STACK_NEED);
#if defined(__SANITIZE_ADDRESS__)
    worst /= 2;   /* AddressSanitizer's red zones about double the frames: the need is for plain builds */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    worst /= 2;
#endif
#endif
    CHECK(worst <= MHE_STACK_NEED, "the stack a run touched (%zu bytes) is within MHE_STACK_NEED (%d)", worst, MHE_STACK_NEED);
    return TEST_END();
}
#endif /* _WIN32 */
