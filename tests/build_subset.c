/* build_subset.c - the subset switches compute what the whole library does.

   `build_subset write DIR` (the full build) trains a small byte LM for a few
   steps and writes DIR/subset.safetensors and DIR/subset.ref: the logits of
   a forward pass, its loss, the logits of decoding with a KV cache, and the
   same for the model's q8 checkpoint. `build_subset check DIR` (any build:
   full, MHE_NO_TRAIN, MHE_NO_TRAIN with MHE_NO_STDIO, MHE_NO_TOKENIZERS, and
   all three) loads those checkpoint bytes,
   recomputes every output and fails unless each equals the reference bit
   for bit. Under MHE_NO_TRAIN it also checks that nothing gradient-shaped is
   allocated and that the checkpoint writers refuse a trainer.
   `make check-build` builds and runs all five. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "lib/checks.h"   /* test_slurp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SB_B 2
#define SB_T 12
#define SB_V 256
#define SB_NREF (SB_B * SB_T * SB_V + 1 + 2 * SB_V)   /* forward logits, loss, decode, q8 decode */

static int fails;
#define CHECK(cond, ...) do { if (!(cond)) { fails++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__); printf("\n"); } } while (0)

static int tokens[SB_B * SB_T], targets[SB_B * SB_T];

static void make_tokens(void) {
    static const char text[] = "In the beginning was the word, and the word was with";
    int i;
    for (i = 0; i < SB_B * SB_T; i++) {
        tokens[i] = (unsigned char)text[i % (sizeof text - 1)];
        targets[i] = (unsigned char)text[(i + 1) % (sizeof text - 1)];
    }
}

/* out[SB_NREF] from the float model m */
static int outputs(mhe_model *m, float *out) {
    mhe_kv_cache kv;
    mhe_model q;
    void *img;
    size_t size = 0, written = 0;
    int i;
    float loss = 0;
    if (mhe_model_forward(m, tokens, targets, SB_B, SB_T, &loss) != MHE_OK) { printf("forward: %s\n", m->err); return 0; }
    memcpy(out, m->acts.logits, (size_t)SB_B * SB_T * SB_V * sizeof(float));
    out[SB_B * SB_T * SB_V] = loss;
    if (mhe_kv_cache_init(&kv, m, SB_T, NULL) != MHE_OK) { printf("kv cache: %s\n", m->err); return 0; }
    for (i = 0; i < SB_T; i++)
        if (mhe_decode_step(m, &kv, tokens[i]) != MHE_OK) { printf("decode: %s\n", m->err); mhe_kv_cache_free(&kv); return 0; }
    memcpy(out + SB_B * SB_T * SB_V + 1, kv.logits, SB_V * sizeof(float));
    mhe_kv_cache_free(&kv);
    /* q8: quantize the float weights, load the image, decode the same tokens */
    if (mhe_q8_checkpoint_size(m, 0, &size) != MHE_OK || !(img = malloc(size))) { printf("q8 size: %s\n", m->err); return 0; }
    if (mhe_q8_checkpoint_write_mem(m, 0, img, size, &written) != MHE_OK || written != size) {
        printf("q8 write: %s\n", m->err); free(img); return 0;
    }
    if (mhe_model_load_mem(&q, img, size, NULL) != MHE_OK) { printf("q8 load: %s\n", q.err); free(img); return 0; }
    free(img);
    if (mhe_kv_cache_init(&kv, &q, SB_T, NULL) != MHE_OK) { printf("q8 kv cache: %s\n", q.err); mhe_model_free(&q); return 0; }
    for (i = 0; i < SB_T; i++)
        if (mhe_decode_step(&q, &kv, tokens[i]) != MHE_OK) { printf("q8 decode: %s\n", q.err); break; }
    memcpy(out + SB_B * SB_T * SB_V + 1 + SB_V, kv.logits, SB_V * sizeof(float));
    mhe_kv_cache_free(&kv);
    mhe_model_free(&q);
    return i == SB_T;
}

#ifndef MHE_NO_TRAIN
static int spit(const char *path, const void *buf, size_t size) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(buf, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = 0;
    return ok;
}

static int write_reference(const char *ckpt_path, const char *ref_path, float *out) {
    static int data[4096];
    mhe_config cfg = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer tr;
    char err[MHE_ERR_LEN];
    void *img;
    size_t size = 0, written = 0;
    int i, ok;
    for (i = 0; i < 4096; i++) data[i] = (i * 7 + i / 13) % 97 + 32;
    static const char conf[] = "attn=mhe-mul\nd_model=32\nn_heads=2\nn_layers=2\nmax_seq_len=16\nd_ff=64\n";
    if (mhe_config_parse(&cfg, conf, sizeof conf - 1, err) != MHE_OK) {
        printf("config: %s\n", err); return 0;
    }
    tc.batch = SB_B; tc.seq_len = SB_T; tc.lr = 1e-2f; tc.warmup = 0;
    if (mhe_model_init(&m, &cfg, 5, NULL) != MHE_OK) { printf("init: %s\n", m.err); return 0; }
    if (mhe_trainer_init(&tr, &m, &tc) != MHE_OK) { printf("trainer: %s\n", tr.err); mhe_model_free(&m); return 0; }
    ok = 1;
    for (i = 0; i < 3 && ok; i++) ok = mhe_trainer_step(&tr, data, 4096) == MHE_OK;
    if (!ok) printf("step: %s\n", tr.err);
    mhe_trainer_free(&tr);
    ok = ok && mhe_checkpoint_size(&m, NULL, &size) == MHE_OK && (img = malloc(size)) != NULL;
    if (ok) {
        ok = mhe_checkpoint_write_mem(&m, NULL, img, size, &written) == MHE_OK && written == size &&
             spit(ckpt_path, img, size);
        free(img);
    }
    ok = ok && outputs(&m, out) && spit(ref_path, out, SB_NREF * sizeof(float));
    if (!ok) printf("write: %s\n", m.err);
    mhe_model_free(&m);
    return ok;
}
#endif

int main(int argc, char **argv) {
    static float ref[SB_NREF], got[SB_NREF];
    char ckpt_path[512], ref_path[512];
    void *img, *rbuf;
    size_t size = 0, rsize = 0;
    mhe_model m;
    int i, differ = 0;
    if (argc != 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "check"))) {
        printf("usage: build_subset write|check DIR\n");
        return 2;
    }
    make_tokens();
    snprintf(ckpt_path, sizeof ckpt_path, "%s/subset.safetensors", argv[2]);
    snprintf(ref_path, sizeof ref_path, "%s/subset.ref", argv[2]);
    if (!strcmp(argv[1], "write")) {
#ifdef MHE_NO_TRAIN
        printf("write needs the trainer: build without MHE_NO_TRAIN\n");
        return 2;
#else
        return write_reference(ckpt_path, ref_path, ref) ? 0 : 1;
#endif
    }
    img = test_slurp(ckpt_path, &size);
    rbuf = test_slurp(ref_path, &rsize);
    if (!img || !rbuf || rsize != sizeof ref) { printf("cannot read %s and %s (run write first)\n", ckpt_path, ref_path); return 1; }
    memcpy(ref, rbuf, sizeof ref);
    free(rbuf);
    if (mhe_model_load_mem(&m, img, size, NULL) != MHE_OK) { printf("load: %s\n", m.err); free(img); return 1; }
    free(img);
    CHECK(outputs(&m, got), "outputs: %s", m.err);
    for (i = 0; i < SB_NREF; i++)
        if (memcmp(&ref[i], &got[i], sizeof(float))) differ++;
    CHECK(differ == 0, "%d of %d outputs differ from the full build's (first: forward logits, then loss, decode, q8 decode)",
          differ, SB_NREF);
#ifdef MHE_NO_TRAIN
    {
        mhe_trainer fake;
        mhe_status st;
        memset(&fake, 0, sizeof fake);
        CHECK(m.grad_data == NULL, "MHE_NO_TRAIN: the model has a gradient block");
        CHECK(m.acts.d_logits == NULL && m.acts.d_h == NULL, "MHE_NO_TRAIN: the backward's activation buffers are laid out");
        st = mhe_checkpoint_size(&m, &fake, &size);
        CHECK(st == MHE_ERR_ARG, "MHE_NO_TRAIN: a trainer checkpoint gave %s, not MHE_ERR_ARG", mhe_status_str(st));
    }
#endif
    mhe_model_free(&m);
    printf("build_subset%s%s: %d outputs against the full build's: %s\n",
#ifdef MHE_NO_TRAIN
           " MHE_NO_TRAIN",
#else
           "",
#endif
#ifdef MHE_NO_TOKENIZERS
           " MHE_NO_TOKENIZERS"
#endif
#ifdef MHE_NO_STDIO
           " MHE_NO_STDIO",
#else
           "",
#endif
           SB_NREF, fails ? "FAILED" : "equal, bit for bit");
    return fails ? 1 : 0;
}
