/* embedded.c - inference with every byte from one static buffer.

   The model (examples/data/tiny_lm.safetensors: a 2-layer MHE-MUL byte LM,
   86K parameters, trained on the bundled corpus by
   examples/data/make_tiny_lm.sh) is compiled in as a C array that
   `mhe export` generated, with the arena size the library computed for it
   (tiny_lm_ARENA_BYTES). The weights stay in that array (read-only memory,
   flash on a device); the parsed header, the tensor table, the KV cache and
   the per-token scratch come from `arena_buf`; nothing calls malloc. The
   library is compiled with MHE_NO_STDIO (no file functions); printing is
   this program's own.

   The same file runs on a Cortex-M4 (`make test-cortex-m4`: qemu's
   mps2-an386, examples/m4/ for the startup code and the memory map) with
   the q8 model; there EMBEDDED_M4 adds the board's clock and stack reading,
   and EMBEDDED_TEMPERATURE=0 (greedy decoding) makes its tokens comparable
   with an x86 build's. */
#ifndef MHE_NO_STDIO
#define MHE_NO_STDIO
#endif
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "tiny_lm_model.h"   /* generated into build/ by `make` */
#include <stdio.h>
#include <string.h>

#ifndef EMBEDDED_TEMPERATURE
#define EMBEDDED_TEMPERATURE 0.7f   /* 0: greedy */
#endif
#ifndef EMBEDDED_PROMPT
#define EMBEDDED_PROMPT "And God said, "
#endif
/* EMBEDDED_PREDICTIONS: also print the argmax after each prompt byte (the
   Cortex-M4 test compares them: greedy text from a model this small soon
   repeats itself, its guesses along a real text do not) */
#ifdef EMBEDDED_M4   /* examples/m4/startup.c */
unsigned long long m4_ticks(void);   /* SysTick at the 25 MHz core clock */
unsigned long m4_stack_used(void);   /* bytes, high-water mark */
unsigned long m4_heap_used(void);    /* bytes newlib's stdio took (the library takes none) */
#endif

static unsigned char arena_buf[tiny_lm_ARENA_BYTES];   /* computed by `mhe export`; the weights are not in it */

int main(int argc, char **argv) {
    const char *prompt = argc > 1 ? argv[1] : EMBEDDED_PROMPT;
    int n = (int)strlen(prompt), i, tok;
    mhe_arena arena;
    /* static, not on the stack: the model struct's per-layer tables (for up to
       MHE_MAX_LAYERS layers) take 33 KB on a 32-bit target */
    static mhe_model m;
    static mhe_kv_cache kv;
    mhe_rng rng;
#ifdef EMBEDDED_M4
    unsigned long long t0;
#endif
    if (n < 1 || n >= tiny_lm_MAX_LEN) { printf("prompt: 1..%d bytes\n", tiny_lm_MAX_LEN - 1); return 1; }
    mhe_arena_init(&arena, arena_buf, sizeof arena_buf);
    /* in place needs the image 4-byte aligned (the generated array is, with gcc and clang); a
       compiler that cannot align it needs tiny_lm_ARENA_BYTES_COPY bytes and flags 0 */
    if (mhe_model_load_arena(&m, tiny_lm, tiny_lm_SIZE, &arena, MHE_LOAD_IN_PLACE) != MHE_OK) { printf("load: %s\n", m.err); return 1; }
    if (mhe_kv_cache_init_arena(&kv, &m, tiny_lm_MAX_LEN, &arena) != MHE_OK) { printf("KV cache does not fit\n"); return 1; }
    /* long, not long long or %zu: newlib-nano's printf has neither */
    printf("model: %ld parameters, weights read in place from a %d-byte const array\n", (long)m.n_params, tiny_lm_SIZE);
    printf("arena: %lu of %lu bytes used (tables, tensors, %lu-byte KV cache, scratch); no other allocation\n\n",
           (unsigned long)arena.used, (unsigned long)sizeof arena_buf, (unsigned long)kv.bytes);
    mhe_rng_seed(&rng, 7);
    fputs(prompt, stdout);
#ifdef EMBEDDED_M4
    t0 = m4_ticks();
#endif
#ifdef EMBEDDED_PREDICTIONS
    static unsigned char guess[tiny_lm_MAX_LEN];
    for (i = 0; i < n; i++) {
        if (mhe_decode_step(&m, &kv, (unsigned char)prompt[i]) != MHE_OK) { printf("\ndecode: %s\n", m.err); return 1; }
        guess[i] = (unsigned char)mhe_sample(kv.logits, m.cfg.vocab_size, 0.0f, 1, &rng);
    }
#else
    for (i = 0; i < n; i++)
        if (mhe_decode_step(&m, &kv, (unsigned char)prompt[i]) != MHE_OK) { printf("\ndecode: %s\n", m.err); return 1; }
#endif
    while (kv.len < tiny_lm_MAX_LEN) {
        tok = mhe_sample(kv.logits, m.cfg.vocab_size, EMBEDDED_TEMPERATURE, 20, &rng);
        putchar(tok);
        if (mhe_decode_step(&m, &kv, tok) != MHE_OK) { printf("\ndecode: %s\n", m.err); return 1; }
    }
    putchar('\n');
#ifdef EMBEDDED_PREDICTIONS
    printf("argmax after each prompt byte:");
    for (i = 0; i < n; i++) printf(" %d", guess[i]);
    putchar('\n');
#endif
#ifdef EMBEDDED_M4
    t0 = m4_ticks() - t0;
    printf("\ndecode: %d tokens in %lu SysTick ticks (25 MHz); stack used: %lu bytes; heap (newlib stdio): %lu bytes\n",
           kv.len, (unsigned long)t0, m4_stack_used(), m4_heap_used());
#endif
    return 0;
}
