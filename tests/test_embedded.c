/* Embedded inference: a checkpoint loaded into one arena of the size
   mhe_inference_memory_needed computes, a KV cache in the same arena, and
   decoding, with allocator hooks that fail every call: nothing else is
   allocated, the logits equal those of the ordinary (malloc'd) model, a
   smaller arena is a clean MHE_ERR_NOMEM, and the inference-only model
   refuses training. */
#include <stdlib.h>
static int hooks_fail, hook_calls;
static void *test_malloc(size_t n) { hook_calls++; return hooks_fail ? NULL : malloc(n); }
static void *test_realloc(void *p, size_t n) { hook_calls++; return hooks_fail ? NULL : realloc(p, n); }
#define MHE_MALLOC(ctx, n) ((void)(ctx), test_malloc(n))
#define MHE_REALLOC(ctx, p, old, n) ((void)(ctx), (void)(old), test_realloc((p), (n)))
#define MHE_FREE(ctx, p) ((void)(ctx), free(p))
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

static void embedded(const char *extra, int max_len, int flags) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=37\nd_model=32\nn_heads=4\nn_layers=2\nmax_seq_len=16\n";
    mhe_model ref, m;
    mhe_kv_cache kv_ref, kv;
    mhe_arena arena;
    size_t size = 0, w = 0, need = 0;
    unsigned char *ckpt, *buf;
    int t, src[6] = { 3, 1, 4, 1, 5, 9 }, calls, same = 1;
    OK(mhe_config_parse(&c, base, strlen(base), err));
    if (mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) { CHECK(0, "config: %s", err); return; }
    CHECK(mhe_model_init(&ref, &c, 7, NULL) == MHE_OK, "init [%s]: %s", extra, ref.err);
    OK(mhe_checkpoint_size(&ref, NULL, &size));
    ckpt = (unsigned char *)malloc(size);
    OK(mhe_checkpoint_write_mem(&ref, NULL, ckpt, size, &w));
    CHECK(mhe_inference_memory_needed(ckpt, size, max_len, flags, &need) == MHE_OK && need > 0, "memory needed [%s]", extra);
    buf = (unsigned char *)malloc(need);
    OK(mhe_kv_cache_init(&kv_ref, &ref, max_len, NULL));
    if (c.arch == MHE_ARCH_ENCDEC) OK(mhe_kv_cache_encode(&ref, &kv_ref, src, 6));

    /* a buffer one rounding step too small fails cleanly */
#ifndef MHE_ARENA_DEBUG   /* the debug arena itself allocates each block through the hooks */
    hooks_fail = 1;
#endif
    hook_calls = 0;
    mhe_arena_init(&arena, buf, need - MHE_ARENA_ALIGN - 1);
    {
        mhe_status s1 = mhe_model_load_arena(&m, ckpt, size, &arena, flags), s2 = MHE_OK;
        if (s1 == MHE_OK) {
            s2 = mhe_kv_cache_init_arena(&kv, &m, max_len, &arena);
            if (s2 == MHE_OK && c.arch == MHE_ARCH_ENCDEC) s2 = mhe_kv_cache_encode(&m, &kv, src, 6);
        }
        CHECK(s1 == MHE_ERR_NOMEM || s2 == MHE_ERR_NOMEM, "an arena short of the computed size is MHE_ERR_NOMEM [%s]: %d %d", extra, s1, s2);
        mhe_arena_free(&arena);   /* frees nothing of the caller's buffer; the debug arena's blocks */
    }
    /* the computed size: everything fits and no hook is called */
    mhe_arena_init(&arena, buf, need);
    CHECK(mhe_model_load_arena(&m, ckpt, size, &arena, flags) == MHE_OK, "load into the arena [%s]: %s", extra, m.err);
    CHECK(mhe_kv_cache_init_arena(&kv, &m, max_len, &arena) == MHE_OK, "cache in the arena [%s]", extra);
    if (c.arch == MHE_ARCH_ENCDEC) CHECK(mhe_kv_cache_encode(&m, &kv, src, 6) == MHE_OK, "encode [%s]: %s", extra, m.err);
    for (t = 0; t < max_len; t++) {
        int tok = (t * 5 + 2) % c.vocab_size;
        OK(mhe_decode_step(&ref, &kv_ref, tok));
        if (mhe_decode_step(&m, &kv, tok) != MHE_OK || memcmp(kv.logits, kv_ref.logits, sizeof(float) * (size_t)c.vocab_size) != 0) same = 0;
    }
    calls = hook_calls;
    hooks_fail = 0;
    CHECK(same, "arena decoding equals the ordinary model bit for bit [%s]", extra);
#ifndef MHE_ARENA_DEBUG   /* there the arena mallocs each block on purpose, so ASan sees overruns */
    CHECK(calls == 0, "no allocation outside the arena on the embedded path [%s]: %d calls", extra, calls);
    CHECK(arena.used <= need && need - arena.used <= MHE_ARENA_ALIGN, "the computed size is exact [%s]: used %zu of %zu", extra, arena.used, need);
#else
    (void)calls;
#endif
    CHECK(m.grad_data == NULL && m.bytes_params < ref.bytes_params, "inference-only: no gradient block (%zu vs %zu bytes)", m.bytes_params, ref.bytes_params);
    if (flags & MHE_LOAD_IN_PLACE)   /* the weights stay in the checkpoint image */
        CHECK(m.param_data == NULL && (const unsigned char *)m.tok_emb->data > ckpt && (const unsigned char *)m.tok_emb->data < ckpt + size,
              "in place: the tensors point into the checkpoint [%s]", extra);
    {
        mhe_trainer tr;
        mhe_train_config tc = mhe_train_config_default();
        int tok[4] = { 1, 2, 3, 4 };
        tc.seq_len = 4; tc.batch = 1;
        CHECK(mhe_trainer_init(&tr, &m, &tc) == MHE_ERR_ARG, "an inference-only model refuses a trainer: %s", tr.err);
        if (c.arch != MHE_ARCH_ENCDEC) {
            test_ignore(mhe_model_forward(&m, tok, tok, 1, 4, NULL));   /* may be refused too: the backward is what must be */
            CHECK(mhe_model_backward(&m) == MHE_ERR_ARG, "and a backward pass: %s", m.err);
        }
    }
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    mhe_arena_free(&arena);
    mhe_kv_cache_free(&kv_ref);
    mhe_model_free(&ref);
    free(buf); free(ckpt);
}

int main(void) {
    (void)test_realloc;   /* only the debug arena reallocates */
    int flags;
    for (flags = 0; flags <= MHE_LOAD_IN_PLACE; flags++) {
        embedded("attn=mha\n", 16, flags);
        embedded("attn=mhe-mul\nnorm=rmsnorm\n", 12, flags);
        embedded("attn=mhe-add,gqa\nkv_groups=2\nnorm_position=post\ntie_embeddings=0\n", 8, flags);
        embedded("arch=encdec\nenc_layers=1\nenc_attn=mhe-mul\ncross_attn=mhe-add,el-att\nattn=mqa,mhe-mul\n", 10, flags);
    }
    {   /* bad arguments */
        size_t need;
        mhe_model m;
        CHECK(mhe_inference_memory_needed("junk", 4, 8, 0, &need) != MHE_OK, "memory_needed of junk is an error");
        CHECK(mhe_model_load_arena(&m, "junk", 4, NULL, 0) == MHE_ERR_ARG, "load_arena without an arena");
    }
    return TEST_END();
}
