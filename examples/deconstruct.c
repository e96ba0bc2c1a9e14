/* deconstruct - thesis chapter 4 ("deconstructing attention") in miniature:
   a small byte-level decoder trained with standard attention (mha) in every
   layer, with each simpler kind in every layer (uniform), and with each
   simpler kind in the odd-numbered layers while the even ones keep mha
   (the "even" hybrid of Table 4.11), all at the same parameter count, the
   same seed and the same steps. Prints the validation perplexity of each (and
   of each hybrid with its simpler layers skipped) as in Table 4.1, and writes
   the attention-pattern indicators (sec. 4.4.4) as CSV and two charts, and
   the heat-maps of the nonapprox hybrid.
     build/examples/deconstruct [steps] [out-prefix]   (run from the repository root)
   Defaults: 300 steps, writes build/deconstruct.md, _indicators.csv,
   _uniform.svg, _hybrid.svg, _maps.svg. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../tools/cli/mhe_plots.h"

static double seconds(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

/* the thesis's names for the kinds it compares */
static const int kinds[6] = { MHE_ATTN_MLP, MHE_ATTN_TAYLOR, MHE_ATTN_NONAPPROX, MHE_ATTN_RNDEMB_QK, MHE_ATTN_FIXEDSEQ_QK,
                              MHE_ATTN_STATICEMB_QK };
static const char *names[6] = { "MLP", "Approx.", "Non-apx.", "RndEmbQK", "FixedSeqQK", "StaticEmbQK" };

typedef struct {
    char label[48];
    int kind, hybrid;
    int64_t params, attn_params;
    double ppl, ppl_skip, tok_s;
    mhe_indicators ind;
} run;

enum { D_MODEL = 96, HEADS = 6, LAYERS = 4, T = 64, BATCH = 16, VAL_BATCHES = 24, IND_BATCHES = 4 };

static int train_one(run *r, int steps, const int *train, size_t n_train, const int *valid, size_t n_valid, const char *maps) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer t;
    float val;
    double t0;
    int i, l;
    c.d_model = D_MODEL; c.n_heads = HEADS; c.n_layers = LAYERS; c.max_seq_len = T; c.bias = 0;
    for (i = 0; i < MHE_MAX_LAYERS; i++) c.attn[i] = r->kind;
    c.layout = r->hybrid ? MHE_LAYOUT_EVEN : MHE_LAYOUT_NONE;
    tc.steps = steps; tc.batch = BATCH; tc.seq_len = T; tc.lr = 2e-3f; tc.min_lr = 2e-4f; tc.warmup = steps / 20; tc.seed = 5;
    if (mhe_model_init(&m, &c, 42, NULL) != MHE_OK) { fprintf(stderr, "%s: %s\n", r->label, m.err); return 0; }
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s: %s\n", r->label, t.err); return 0; }
    t0 = seconds();
    for (i = 0; i < steps; i++)
        if (mhe_trainer_step(&t, train, n_train) != MHE_OK) { fprintf(stderr, "%s: %s\n", r->label, t.err); return 0; }
    r->tok_s = (double)steps * BATCH * T / (seconds() - t0);
    r->params = m.n_params;
    for (r->attn_params = 0, l = 0; l < LAYERS; l++) r->attn_params += mhe_attn_param_count(&c, m.cfg.attn[l], 1, c.bias);
    if (mhe_evaluate(&m, valid, n_valid, BATCH, T, VAL_BATCHES, &val) != MHE_OK) val = NAN;   /* a diverged run: NaN in the table */
    r->ppl = mhe_perplexity(val);
    r->ppl_skip = 0;
    if (r->hybrid) {   /* "with skip": the simpler layers' attention becomes the identity */
        for (l = 0; l < LAYERS; l++) if (m.cfg.attn[l] != MHE_ATTN_MHA) m.skip_attn |= (uint64_t)1 << l;
        if (mhe_evaluate(&m, valid, n_valid, BATCH, T, VAL_BATCHES, &val) != MHE_OK) val = NAN;
        r->ppl_skip = mhe_perplexity(val);
        m.skip_attn = 0;
    }
    if (mhe_indicators_eval(&m, valid, n_valid, BATCH, T, IND_BATCHES, &r->ind) != MHE_OK) { fprintf(stderr, "%s\n", m.err); return 0; }
    if (maps) {
        FILE *f = fopen(maps, "w");
        if (f) { pl_heatmap_svg(f, &m, valid, 24, "Attention maps of a nonapprox@even hybrid: layers 0, 2 nonapprox, 1, 3 mha"); fclose(f); }
    }
    printf("  %-22s %8lld params  val ppl %7.3f", r->label, (long long)r->params, r->ppl);
    if (r->hybrid) printf("  with skip %9.3f", r->ppl_skip);
    printf("  %6.0f tok/s\n", r->tok_s);
    fflush(stdout);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return 1;
}

int main(int argc, char **argv) {
    size_t n_train, n_valid;
    int *train = NULL, *valid = NULL, steps = argc > 1 ? atoi(argv[1]) : 300, i, k;
    const char *prefix = argc > 2 ? argv[2] : "build/deconstruct";
    char err[MHE_ERR_LEN], path[512];
    run runs[13];
    FILE *md, *csv, *svg;
    const mhe_indicators *ind[6];
    const char *labels[6];
    if (steps < 1) { fprintf(stderr, "usage: deconstruct [steps >= 1] [out-prefix]\n"); return 2; }
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &n_train, NULL, err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &n_valid, NULL, err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", err);
        return 1;
    }
    printf("decoder, d_model %d, %d heads of %d, %d layers, no biases, T %d, batch %d, %d steps each, same seed\n",
           D_MODEL, HEADS, D_MODEL / HEADS, LAYERS, T, BATCH, steps);
    memset(runs, 0, sizeof runs);
    snprintf(runs[0].label, sizeof runs[0].label, "mha (Standard)");
    runs[0].kind = MHE_ATTN_MHA;
    for (k = 0; k < 6; k++) {
        run *u = &runs[1 + k], *h = &runs[7 + k];
        snprintf(u->label, sizeof u->label, "%s", mhe_attn_kind_name(kinds[k]));
        snprintf(h->label, sizeof h->label, "%s@even", mhe_attn_kind_name(kinds[k]));
        u->kind = h->kind = kinds[k];
        h->hybrid = 1;
    }
    snprintf(path, sizeof path, "%s_maps.svg", prefix);
    for (i = 0; i < 13; i++)
        if (!train_one(&runs[i], steps, train, n_train, valid, n_valid, runs[i].hybrid && runs[i].kind == MHE_ATTN_NONAPPROX ? path : NULL))
            return 1;
    snprintf(path, sizeof path, "%s.md", prefix);
    if (!(md = fopen(path, "w"))) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    for (i = 0; i < 2; i++) {
        FILE *f = i ? md : stdout;
        int g;
        fprintf(f, "\n| configuration | attention | mhe kind | parameters | attention parameters | val ppl | tokens/s |\n");
        fprintf(f, "|---|---|---|---:|---:|---:|---:|\n");
        fprintf(f, "| Standard | | mha | %lld | %lld | %.3f | %.0f |\n", (long long)runs[0].params, (long long)runs[0].attn_params,
                runs[0].ppl, runs[0].tok_s);
        for (g = 0; g < 3; g++)
            for (k = 0; k < 6; k++) {
                const run *r = &runs[(g ? 7 : 1) + k];
                fprintf(f, "| %s | %s | %s | %lld | %lld | %.3f | %.0f |\n", k ? "" : g == 0 ? "Uniform" : g == 1 ? "Hybrid" : "Hybrid skip",
                        names[k], r->label, (long long)r->params, (long long)r->attn_params, g == 2 ? r->ppl_skip : r->ppl, r->tok_s);
            }
    }
    fclose(md);
    snprintf(path, sizeof path, "%s_indicators.csv", prefix);
    if (!(csv = fopen(path, "w"))) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    for (i = 0; i < 13; i++) pl_ind_csv(csv, &runs[i].ind, runs[i].label, i == 0);
    fclose(csv);
    for (i = 0; i < 2; i++) {   /* Figure 4.1: uniform (top) and hybrid (bottom) against Standard; like the
                                   thesis, without MLP, whose identity map would set the min-max range */
        ind[0] = &runs[0].ind; labels[0] = runs[0].label;
        for (k = 1; k < 6; k++) { ind[k] = &runs[(i ? 7 : 1) + k].ind; labels[k] = runs[(i ? 7 : 1) + k].label; }
        snprintf(path, sizeof path, "%s_%s.svg", prefix, i ? "hybrid" : "uniform");
        if (!(svg = fopen(path, "w"))) { fprintf(stderr, "cannot write %s\n", path); return 1; }
        pl_ind_svg(svg, ind, labels, 6, i ? "Indicators per layer: even hybrids (layers 0, 2 simpler; 1, 3 mha) and Standard"
                                          : "Indicators per layer: uniform models and Standard");
        fclose(svg);
    }
    printf("\nwrote %s.md, %s_indicators.csv, %s_uniform.svg, %s_hybrid.svg, %s_maps.svg\n", prefix, prefix, prefix, prefix, prefix);
    for (i = 0; i < 13; i++) mhe_indicators_free(&runs[i].ind);
    free(train); free(valid);
    return 0;
}
