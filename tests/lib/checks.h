/* tests/lib/checks.h - checks several test programs share, so each is
   written once: a file's bytes (test_slurp) and "decoding equals the
   forward" (test_decode_vs_forward). Included by tests/test.h; a program
   that does not use test.h (build_subset.c) includes it itself. */
#ifndef MHE_TEST_CHECKS_H
#define MHE_TEST_CHECKS_H
#include <stdio.h>
#include <stdlib.h>

/* the whole file, NUL-terminated one byte past its end (so a text can be
   read as a string), read with stdio rather than the library being tested;
   *n its size. NULL when the file cannot be read (then *n = 0). */
static inline unsigned char *test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b = NULL;
    long len;
    *n = 0;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (b = (unsigned char *)malloc((size_t)len + 1)) != NULL) {
        *n = fread(b, 1, (size_t)len, f);
        if (*n != (size_t)len) { free(b); b = NULL; *n = 0; }
        else b[len] = 0;
    }
    fclose(f);
    return b;
}

#if defined(MHE_H_INCLUDED) && defined(MHE_TEST_H)   /* with mhe.h and test.h */
/* Decodes tok[0..T) one token at a time through kv (fresh, or holding an
   encoded source) and returns the worst relative error of each step's logits
   against row t of m->acts.logits, which the caller filled with the causal
   forward of the same tokens. -1 when a step fails (m->err says why). */
static inline double test_decode_vs_forward(mhe_model *m, mhe_kv_cache *kv, const int *tok, int T) {
    double worst = 0;
    int t, V = m->cfg.vocab_size;
    for (t = 0; t < T; t++) {
        double e;
        if (mhe_decode_step(m, kv, tok[t]) != MHE_OK) return -1;
        e = test_max_rel_err(kv->logits, m->acts.logits + (size_t)t * V, V, 1.0);
        if (e > worst) worst = e;
    }
    return worst;
}
#endif
#endif /* MHE_TEST_CHECKS_H */
