/* embedded.c - inference with every byte from one static buffer.

   The model (examples/data/tiny_lm.safetensors: a 2-layer MHE-MUL byte LM,
   86K parameters, trained on the bundled corpus by
   examples/data/make_tiny_lm.sh) is compiled in as a C array that
   `mhe export` generated, with the arena size the library computed for it
   (tiny_lm_ARENA_BYTES). The weights stay in that array (read-only memory,
   flash on a device); the parsed header, the tensor table, the KV cache and
   the per-token scratch come from `arena_buf`; nothing calls malloc. The
   library is compiled with MHE_NO_STDIO (no file functions); printing is
   this program's own. */
#ifndef MHE_NO_STDIO
#define MHE_NO_STDIO
#endif
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "tiny_lm_model.h"   /* generated into build/ by `make` */
#include <stdio.h>
#include <string.h>

static unsigned char arena_buf[tiny_lm_ARENA_BYTES];   /* computed by `mhe export`; the weights are not in it */

int main(int argc, char **argv) {
    const char *prompt = argc > 1 ? argv[1] : "And God said, ";
    int n = (int)strlen(prompt), i, tok;
    mhe_arena arena;
    mhe_model m;
    mhe_kv_cache kv;
    mhe_rng rng;
    if (n < 1 || n >= tiny_lm_MAX_LEN) { printf("prompt: 1..%d bytes\n", tiny_lm_MAX_LEN - 1); return 1; }
    mhe_arena_init(&arena, arena_buf, sizeof arena_buf);
    /* in place needs the image 4-byte aligned (the generated array is, with gcc and clang); a
       compiler that cannot align it needs tiny_lm_ARENA_BYTES_COPY bytes and flags 0 */
    if (mhe_model_load_arena(&m, tiny_lm, tiny_lm_SIZE, &arena, MHE_LOAD_IN_PLACE) != MHE_OK) { printf("load: %s\n", m.err); return 1; }
    if (mhe_kv_cache_init_arena(&kv, &m, tiny_lm_MAX_LEN, &arena) != MHE_OK) { printf("KV cache does not fit\n"); return 1; }
    printf("model: %lld parameters, weights read in place from a %d-byte const array\n", (long long)m.n_params, tiny_lm_SIZE);
    printf("arena: %zu of %zu bytes used (tables, tensors, %zu-byte KV cache, scratch); no other allocation\n\n",
           arena.used, sizeof arena_buf, kv.bytes);
    mhe_rng_seed(&rng, 7);
    fputs(prompt, stdout);
    for (i = 0; i < n; i++) mhe_decode_step(&m, &kv, (unsigned char)prompt[i]);
    while (kv.len < tiny_lm_MAX_LEN) {
        tok = mhe_sample(kv.logits, m.cfg.vocab_size, 0.7f, 20, &rng);
        putchar(tok);
        if (mhe_decode_step(&m, &kv, tok) != MHE_OK) break;
    }
    putchar('\n');
    return 0;
}
