/* Prints the loss of every step of a short training run (with dropout), the
   final weights' checksum and one forward's logits: the same program built
   at several optimisation levels must print the same numbers (within the
   tolerances that tests/test_optlevels.py states). */
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer t;
    char err[MHE_ERR_LEN];
    static int data[4096];
    int i, s;
    double sum = 0;
    const char *cfg = "vocab_size=64\nd_model=48\nn_heads=4\nn_layers=3\nmax_seq_len=32\ndropout=0.1\nattn_dropout=0.1\n"
                      "attn=mha,mhe-mul,mhe-add\n";
    mhe_rng r;
    if (mhe_config_parse(&c, cfg, strlen(cfg), err) != MHE_OK) { printf("config: %s\n", err); return 1; }
    tc.steps = 20; tc.batch = 4; tc.seq_len = 32; tc.warmup = 2; tc.lr = 3e-3f;
    mhe_rng_seed(&r, 3);
    for (i = 0; i < 4096; i++) data[i] = (int)((i * 7 + (int)mhe_rng_below(&r, 5)) % 64);
    if (mhe_model_init(&m, &c, 5, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) { printf("init failed\n"); return 1; }
    for (s = 0; s < tc.steps; s++) {
        if (mhe_trainer_step(&t, data, 4096) != MHE_OK) { printf("step: %s\n", t.err); return 1; }
        printf("loss %d %.9g\n", s, (double)t.last_loss);
    }
    for (i = 0; i < m.n_params; i++) sum += m.param_data[i] * (double)((i % 13) - 6);
    printf("weights %.9g\n", sum);
    mhe_model_forward(&m, data, NULL, 1, 32, NULL);
    for (i = 0; i < 8; i++) printf("logit %d %.9g\n", i, (double)m.acts.logits[31 * 64 + i]);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return 0;
}
