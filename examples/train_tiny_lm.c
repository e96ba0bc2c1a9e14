/* train_tiny_lm - train a byte-level GPT on the bundled King James corpus,
   show a progress line and the validation perplexity, then write text.
   Run from the repository root: make run  (or build/examples/train_tiny_lm [steps]) */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
    size_t n_train, n_valid;
    int *train = NULL, *valid = NULL;
    char load_err[MHE_ERR_LEN];
    mhe_config cfg = mhe_config_default();        /* GPT: pre-norm, GELU, tied embeddings, mha */
    mhe_train_config tc = mhe_train_config_default();
    mhe_model model;
    mhe_trainer trainer;
    mhe_kv_cache cache;
    mhe_rng rng;
    const char *prompt = "And God said, ";
    int ids[16];                              /* the prompt as token ids */
    float val_loss;
    double t0;
    int i;
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &n_train, NULL, load_err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &n_valid, NULL, load_err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", load_err);
        return 1;
    }

    cfg.d_model = 128; cfg.n_heads = 4; cfg.n_layers = 4; cfg.max_seq_len = 128;
    tc.steps = argc > 1 ? atoi(argv[1]) : 1000;
    tc.batch = 16; tc.seq_len = 128; tc.lr = 2e-3f; tc.min_lr = 2e-4f; tc.warmup = 30;
    if (mhe_model_init(&model, &cfg, 42, NULL) != MHE_OK) { fprintf(stderr, "%s\n", model.err); return 1; }
    if (mhe_trainer_init(&trainer, &model, &tc) != MHE_OK) { fprintf(stderr, "%s\n", trainer.err); return 1; }
    printf("GPT with %lld parameters; corpus %zu train / %zu validation bytes\n", (long long)model.n_params, n_train, n_valid);
    printf("unigram baseline: %.3f nats/byte\n", mhe_unigram_entropy(train, n_train, 256));

    t0 = seconds();
    for (i = 1; i <= tc.steps; i++) {
        if (mhe_trainer_step(&trainer, train, n_train) != MHE_OK) { fprintf(stderr, "\n%s\n", trainer.err); return 1; }
        if (i % 10 == 0 || i == tc.steps) {
            double el = seconds() - t0;
            printf("\rstep %4d/%d  loss %.3f  %6.0f tok/s  %3.0fs left ", i, tc.steps, trainer.last_loss,
                   (double)i * tc.batch * tc.seq_len / el, el / i * (tc.steps - i));
            fflush(stdout);
        }
        if (i % 250 == 0 || i == tc.steps) {
            if (mhe_evaluate(&model, valid, n_valid, 16, 128, 10, &val_loss) != MHE_OK) { fprintf(stderr, "\n%s\n", model.err); return 1; }
            printf("\n  validation loss %.3f, perplexity %.2f\n", val_loss, mhe_perplexity(val_loss));
        }
    }
    printf("peak memory of the model: %.1f MB parameters+gradients, %.1f MB activations, %.1f MB AdamW\n",
           model.bytes_params / 1e6, model.bytes_acts / 1e6, 2.0 * model.n_params * sizeof(float) / 1e6);

    /* generate with the KV cache: temperature 0.8, top-k 40 */
    if (mhe_kv_cache_init(&cache, &model, cfg.max_seq_len, NULL) != MHE_OK) { fprintf(stderr, "%s\n", model.err); return 1; }
    mhe_rng_seed(&rng, 1);
    printf("\n%s", prompt);
    for (i = 0; prompt[i]; i++) ids[i] = (unsigned char)prompt[i];   /* bytes are the token ids */
    if (mhe_prefill(&model, &cache, ids, i) != MHE_OK) { fprintf(stderr, "%s\n", model.err); return 1; }
    while (cache.len < cfg.max_seq_len) {
        int tok = mhe_sample(cache.logits, cfg.vocab_size, 0.8f, 40, &rng);
        putchar(tok);
        if (mhe_decode_step(&model, &cache, tok) != MHE_OK) { fprintf(stderr, "\n%s\n", model.err); return 1; }
    }
    printf("\n");
    mhe_kv_cache_free(&cache);
    mhe_trainer_free(&trainer);
    mhe_model_free(&model);
    free(train); free(valid);
    return 0;
}
