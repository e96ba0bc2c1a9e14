/* deep_single_head.c - multi-head or deep single-head? (Liu et al. 2021)

   A γ-head L-layer transformer and a 1-head γL-layer one have about the same
   parameters and the same number of attention heads in all (d_head and the
   MLP width 64·γ per layer stay fixed). The deep one is harder to train as a
   post-norm stack; Admin initialisation (Liu et al. 2020) rescales its
   residuals so it trains. This program trains four post-norm byte-level
   decoders on the bundled corpus for the same steps and prints their loss
   curves: 8 heads x 3 layers and 1 head x 24 layers, each with and without
   Admin (`admin=1`). It writes build/deep_single_head.csv (training loss per
   step and validation loss every 50 steps) and build/deep_single_head.svg.

     make build/examples/deep_single_head && build/examples/deep_single_head [steps] [lr]

   Defaults: 300 steps, learning rate 5e-4 (warmup 40, cosine to 5e-5); at 2e-3
   even the shallow post-norm model needs Admin. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_RUNS 4
#define EVAL_EVERY 50

typedef struct { const char *name, *cfg; } run_def;

static const run_def runs[N_RUNS] = {
    { "8H-3L", "n_heads=8\nd_head=16\nn_layers=3\nd_ff=512\n" },
    { "8H-3L Admin", "n_heads=8\nd_head=16\nn_layers=3\nd_ff=512\nadmin=1\n" },
    { "1H-24L", "n_heads=1\nd_head=16\nn_layers=24\nd_ff=64\n" },
    { "1H-24L Admin", "n_heads=1\nd_head=16\nn_layers=24\nd_ff=64\nadmin=1\n" },
};
static const char *const colours[N_RUNS] = { "#1f77b4", "#17becf", "#d62728", "#2ca02c" };

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 300, r, s, n_eval;
    float lr = argc > 2 ? (float)atof(argv[2]) : 5e-4f;
    char err[MHE_ERR_LEN];
    int *train, *valid;
    size_t nt, nv;
    float *loss, *val, lo = 1e9f, hi = 0;
    double unigram;
    FILE *f;
    if (steps < EVAL_EVERY || lr <= 0) { fprintf(stderr, "usage: deep_single_head [steps >= %d] [lr > 0]\n", EVAL_EVERY); return 2; }
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &nt, NULL, err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &nv, NULL, err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", err);
        return 1;
    }
    n_eval = steps / EVAL_EVERY + 1;
    loss = (float *)calloc((size_t)N_RUNS * steps, sizeof(float));
    val = (float *)calloc((size_t)N_RUNS * n_eval, sizeof(float));
    unigram = mhe_unigram_entropy(valid, nv, 256);
    printf("post-norm byte decoders, d_model 128, T 64, batch 16, %d steps, lr %g; unigram entropy %.3f nats\n\n", steps, lr, unigram);
    printf("| model | parameters | val loss at 0 | at %d | at %d (end) | val perplexity | trains? |\n|---|---:|---:|---:|---:|---:|---|\n",
           steps / 2 / EVAL_EVERY * EVAL_EVERY, steps);
    for (r = 0; r < N_RUNS; r++) {
        mhe_config c = mhe_config_default();
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m;
        mhe_trainer t;
        const char *base = "vocab_size=256\nd_model=128\nmax_seq_len=64\nnorm_position=post\n";
        float v;
        int diverged = 0;
        if (mhe_config_parse(&c, base, strlen(base), err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
        if (mhe_config_parse(&c, runs[r].cfg, strlen(runs[r].cfg), err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
        tc.steps = steps; tc.batch = 16; tc.seq_len = 64; tc.lr = lr; tc.min_lr = lr / 10; tc.warmup = 40; tc.seed = 5;
        if (mhe_model_init(&m, &c, 11, NULL) != MHE_OK) { fprintf(stderr, "%s\n", m.err); return 1; }
        if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        for (s = 0; s < steps; s++) {
            if (s % EVAL_EVERY == 0) {
                if (mhe_evaluate(&m, valid, nv, 16, 64, 8, &v) != MHE_OK) v = NAN;   /* diverged */
                val[r * n_eval + s / EVAL_EVERY] = v;
            }
            if (!diverged && mhe_trainer_step(&t, train, nt) != MHE_OK) { diverged = 1; printf("(%s: %s)\n", runs[r].name, t.err); }
            loss[(size_t)r * steps + s] = diverged ? 0.0f / 0.0f : t.last_loss;
        }
        if (mhe_evaluate(&m, valid, nv, 16, 64, 8, &v) != MHE_OK) v = NAN;
        val[r * n_eval + n_eval - 1] = v;
        printf("| %s | %lld | %.3f | %.3f | %.3f | %.2f | %s |\n", runs[r].name, (long long)m.n_params, val[r * n_eval],
               val[r * n_eval + n_eval / 2], v, mhe_perplexity(v), v < unigram - 0.3 ? "yes" : "no (above the unigram baseline)");
        fflush(stdout);
        mhe_trainer_free(&t);
        mhe_model_free(&m);
    }
    /* CSV: the training loss of every step, validation loss where measured */
    f = fopen("build/deep_single_head.csv", "w");
    if (!f) { fprintf(stderr, "cannot write build/deep_single_head.csv (run `make` first)\n"); return 1; }
    fprintf(f, "step");
    for (r = 0; r < N_RUNS; r++) fprintf(f, ",train %s,val %s", runs[r].name, runs[r].name);
    fprintf(f, "\n");
    for (s = 0; s <= steps; s++) {
        fprintf(f, "%d", s);
        for (r = 0; r < N_RUNS; r++) {
            if (s < steps) fprintf(f, ",%.4f", loss[(size_t)r * steps + s]); else fprintf(f, ",");
            if (s % EVAL_EVERY == 0 && s / EVAL_EVERY < n_eval) fprintf(f, ",%.4f", val[r * n_eval + s / EVAL_EVERY]); else fprintf(f, ",");
        }
        fprintf(f, "\n");
    }
    fclose(f);
    /* SVG: training loss (mean over 10 steps) per model */
    for (r = 0; r < N_RUNS * steps; r++) if (loss[r] == loss[r]) { if (loss[r] < lo) lo = loss[r]; if (loss[r] > hi) hi = loss[r]; }
    if (hi > 6) hi = 6;
    f = fopen("build/deep_single_head.svg", "w");
    if (!f) return 1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"400\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"720\" height=\"400\" fill=\"white\"/>\n"
               "<text x=\"360\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Training loss, post-norm: 8 heads x 3 layers vs 1 head x 24 layers</text>\n"
               "<line x1=\"60\" y1=\"340\" x2=\"700\" y2=\"340\" stroke=\"black\"/><line x1=\"60\" y1=\"40\" x2=\"60\" y2=\"340\" stroke=\"black\"/>\n");
    for (s = 0; s <= 4; s++) {
        float v = lo + (hi - lo) * s / 4, y = 340 - 300 * (v - lo) / (hi - lo);
        fprintf(f, "<text x=\"55\" y=\"%.1f\" text-anchor=\"end\">%.2f</text><line x1=\"60\" y1=\"%.1f\" x2=\"700\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y + 4, v, y, y);
        fprintf(f, "<text x=\"%.1f\" y=\"356\" text-anchor=\"middle\">%d</text>\n", 60 + 640.0 * s / 4, steps * s / 4);
    }
    fprintf(f, "<text x=\"380\" y=\"380\" text-anchor=\"middle\" fill=\"#555\">step</text>\n");
    for (r = 0; r < N_RUNS; r++) {
        int first = 1;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", colours[r]);
        for (s = 0; s + 10 <= steps; s += 10) {
            float mean = 0;
            int k;
            for (k = 0; k < 10; k++) mean += loss[(size_t)r * steps + s + k] / 10;
            if (mean != mean) break;   /* diverged */
            if (mean > hi) mean = hi;
            fprintf(f, "%s%.1f,%.1f", first ? "" : " ", 60 + 640.0 * (s + 5) / steps, 340 - 300 * (mean - lo) / (hi - lo));
            first = 0;
        }
        fprintf(f, "\"/>\n<text x=\"560\" y=\"%d\" fill=\"%s\">%s</text>\n", 60 + 16 * r, colours[r], runs[r].name);
    }
    fprintf(f, "</svg>\n");
    fclose(f);
    printf("\nwrote build/deep_single_head.csv and build/deep_single_head.svg\n");
    free(loss); free(val); free(train); free(valid);
    return 0;
}
