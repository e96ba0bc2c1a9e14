/* head_init - how the head-embedding initialisation of MHE-ADD and MHE-MUL
   shapes training: the spread between heads (how different the heads are)
   over the first steps, and the validation loss at the end, for several
   init scales. Head spread of a layer: the mean over heads i of
   |m_i - mean_j m_j| / |mean_j m_j|, where m_i is head i's effective map
   (MUL: w_i = (1+e_i^Q)*(1+e_i^K) concatenated with 1+e_i^V, relative to the
   mean map; ADD: e_i^Q, e_i^K, e_i^V concatenated, whose mean can be near 0,
   so the absolute spread). Run from the repository root:
     build/head_init [steps] */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>

/* mean over layers of the head spread defined above */
static double head_spread(const mhe_model *m, int mul) {
    int n = m->cfg.n_heads, dh = mhe_config_d_head(&m->cfg), l, i, c, k;
    double total = 0;
    for (l = 0; l < m->cfg.n_layers; l++) {
        const mhe_attn_weights *y = &m->layers[l].attn;
        double mean[3 * MHE_MAX_D_HEAD], mnorm = 0, spread = 0;
        for (c = 0; c < 3 * dh; c++) mean[c] = 0;
        for (i = 0; i < n; i++)
            for (k = 0; k < 3; k++)
                for (c = 0; c < dh; c++) {
                    size_t e = (size_t)i * dh + c;
                    double v = k == 0 ? (mul ? (1 + y->eq->data[e]) * (1 + y->ek->data[e]) : y->eq->data[e])
                             : k == 1 ? (mul ? 1 + y->ev->data[e] : y->ek->data[e]) : (mul ? 0 : y->ev->data[e]);
                    mean[k * dh + c] += v / n;
                }
        for (c = 0; c < 3 * dh; c++) mnorm += mean[c] * mean[c];
        for (i = 0; i < n; i++) {
            double d2 = 0;
            for (k = 0; k < 3; k++)
                for (c = 0; c < dh; c++) {
                    size_t e = (size_t)i * dh + c;
                    double v = k == 0 ? (mul ? (1 + y->eq->data[e]) * (1 + y->ek->data[e]) : y->eq->data[e])
                             : k == 1 ? (mul ? 1 + y->ev->data[e] : y->ek->data[e]) : (mul ? 0 : y->ev->data[e]);
                    d2 += (v - mean[k * dh + c]) * (v - mean[k * dh + c]);
                }
            spread += sqrt(d2) / n;
        }
        total += mul ? spread / sqrt(mnorm) : spread;
    }
    return total / m->cfg.n_layers;
}

int main(int argc, char **argv) {
    size_t nt, nv;
    int *train = NULL, *valid = NULL;
    char load_err[MHE_ERR_LEN];
    int steps = argc > 1 ? atoi(argv[1]) : 300, kind, si, s;
    const float scales[] = { 0.0f, 0.02f, 0.1f, 0.5f };
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &nt, NULL, load_err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &nv, NULL, load_err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", load_err);
        return 1;
    }
    printf("decoder d_model 128, 8 heads of 16, 2 layers, T 64, batch 16, %d steps, seed 1\n\n", steps);
    printf("| kind | head init std | spread at 0 | at %d | at %d | at %d | val loss |\n|---|---:|---:|---:|---:|---:|---:|\n",
           steps / 10, steps / 3, steps);
    for (kind = MHE_ATTN_MHE_ADD; kind <= MHE_ATTN_MHE_MUL; kind++)
        for (si = 0; si < 4; si++) {
            mhe_config c = mhe_config_default();
            mhe_train_config tc = mhe_train_config_default();
            mhe_model m;
            mhe_trainer t;
            double sp[4] = { 0, 0, 0, 0 };
            float val;
            int i;
            c.d_model = 128; c.n_heads = 8; c.n_layers = 2; c.max_seq_len = 64; c.head_init_std = scales[si];
            for (i = 0; i < MHE_MAX_LAYERS; i++) c.attn[i] = kind;
            tc.steps = steps; tc.batch = 16; tc.seq_len = 64; tc.lr = 2e-3f; tc.min_lr = 2e-4f; tc.warmup = steps / 20;
            if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "init failed\n"); return 1; }
            sp[0] = head_spread(&m, kind == MHE_ATTN_MHE_MUL);
            for (s = 1; s <= steps; s++) {
                if (mhe_trainer_step(&t, train, nt) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
                if (s == (steps >= 10 ? steps / 10 : 1)) sp[1] = head_spread(&m, kind == MHE_ATTN_MHE_MUL);
                if (s == (steps >= 3 ? steps / 3 : 1)) sp[2] = head_spread(&m, kind == MHE_ATTN_MHE_MUL);
            }
            sp[3] = head_spread(&m, kind == MHE_ATTN_MHE_MUL);
            if (mhe_evaluate(&m, valid, nv, 16, 64, 20, &val) != MHE_OK) val = NAN;   /* a diverged run: NaN in the table */
            printf("| %s | %.2f | %.4f | %.4f | %.4f | %.4f | %.3f |\n", mhe_attn_kind_name(kind), scales[si], sp[0], sp[1], sp[2], sp[3], val);
            fflush(stdout);
            mhe_trainer_free(&t);
            mhe_model_free(&m);
        }
    free(train); free(valid);
    return 0;
}
