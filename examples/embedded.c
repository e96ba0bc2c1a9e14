/* examples/embedded.c - inference in one static buffer: no malloc, no files.
   Every allocation goes to an arena over `ram` (MHE_MALLOC below); the
   checkpoint is a byte array, as it would sit in a device's flash. Built for
   the host by `make`, and for a Cortex-M4 (bare metal, newlib) by
   `make build-cortex-m4`, which only compiles and links it.
   Here the "flash" image is written at start-up from a freshly initialised
   model; on a device it would be the bytes of a trained checkpoint
   (`mhe train ... --out m.safetensors`, then objcopy or xxd -i). */
#ifndef MHE_NO_STDIO
#define MHE_NO_STDIO
#endif
#define MHE_MALLOC(ctx, n) mhe_arena_alloc((mhe_arena *)(ctx), (n))
#define MHE_REALLOC(ctx, p, old, n) ((void)(ctx), (void)(p), (void)(old), (void)(n), (void *)0)
#define MHE_FREE(ctx, p) ((void)(ctx), (void)(p))   /* the arena is reset as a whole */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>

static unsigned char ram[64 * 1024];     /* everything the library allocates */
static unsigned char flash[32 * 1024];   /* the checkpoint image */

/* write a checkpoint of a small byte-level model into flash[]; returns its size */
static size_t make_flash_image(mhe_arena *a) {
    mhe_config c = mhe_config_default();
    mhe_model m;
    size_t n = 0;
    c.vocab_size = 64; c.d_model = 16; c.n_heads = 2; c.n_layers = 2; c.d_ff = 32; c.max_seq_len = 24;
    c.attn[0] = c.attn[1] = MHE_ATTN_MHE_MUL;
    if (mhe_model_init(&m, &c, 2024, a) != MHE_OK) return 0;
    if (mhe_checkpoint_write_mem(&m, NULL, flash, sizeof flash, &n) != MHE_OK) n = 0;
    mhe_arena_reset(a);   /* the model goes; only the image stays */
    return n;
}

int main(void) {
    mhe_arena a;
    mhe_model m;
    mhe_kv_cache kv;
    size_t image;
    int i, tok = 1, out[16];
    mhe_arena_init(&a, ram, sizeof ram);
    if (!(image = make_flash_image(&a))) { puts("embedded: cannot build the checkpoint image"); return 1; }
    /* boot: the model from the image, a KV cache, then greedy generation */
    if (mhe_model_load_mem(&m, flash, image, &a) != MHE_OK) { puts(m.err); return 1; }
    if (mhe_kv_cache_init(&kv, &m, m.cfg.max_seq_len, &a) != MHE_OK) { puts("embedded: KV cache does not fit"); return 1; }
    for (i = 0; i < 16; i++) {
        if (mhe_decode_step(&m, &kv, tok) != MHE_OK) { puts(m.err); return 1; }
        tok = out[i] = mhe_sample(kv.logits, m.cfg.vocab_size, 0.0f, 0, NULL);
    }
    printf("embedded: checkpoint image %u bytes; arena peak %u of %u bytes; tokens", (unsigned)image,
           (unsigned)a.peak, (unsigned)sizeof ram);
    for (i = 0; i < 16; i++) printf(" %d", out[i]);
    printf("\n");
    return 0;
}
