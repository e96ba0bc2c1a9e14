/* collab_reparam.c - a trained model's heads made to collaborate (Cordonnier
   et al. 2020, sec. 3.3 and Figure 5)

   Trains a byte-level decoder with standard multi-head attention (mha, with
   biases) on the bundled corpus, then turns every layer into collaborative
   attention of shared query/key width D~ = D_k, D_k/2, D_k/3 and D_k/4 (D_k =
   n_heads * d_head) by a CP decomposition of the stacked W_Q^(i) W_K^(i)T
   (mhe_model_reparam_collab), and measures the validation loss right after
   the decomposition and after a short re-fine-tune. The original model gets
   the same extra steps, so every "after" is compared at the same budget.
   Prints a Markdown table with the decomposition times (the paper's Figure 4
   measures those) and writes build/collab_reparam.md and .svg.

     make build/examples/collab_reparam && build/examples/collab_reparam [steps] [finetune_steps]

   Defaults: 600 training steps, 100 re-fine-tuning steps. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_DIMS 4

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the relative CP errors of the layers, for the table */
typedef struct { double sum, worst; int n; } cp_stats;

static void on_layer(void *ctx, const char *sublayer, const mhe_cp_result *r) {
    cp_stats *s = (cp_stats *)ctx;
    (void)sublayer;
    s->sum += r->rel_error;
    if (r->rel_error > s->worst) s->worst = r->rel_error;
    s->n++;
}

static float val_loss(mhe_model *m, const int *valid, size_t nv) {
    float v = 0;
    if (mhe_evaluate(m, valid, nv, 16, 64, 16, &v) != MHE_OK) { fprintf(stderr, "evaluate: %s\n", m->err); exit(1); }
    return v;
}

/* a few more steps at a low learning rate; returns the validation loss after */
static float finetune(mhe_model *m, int steps, float lr, const int *train, size_t nt, const int *valid, size_t nv) {
    mhe_train_config tc = mhe_train_config_default();
    mhe_trainer t;
    int s;
    tc.steps = steps; tc.batch = 16; tc.seq_len = 64; tc.lr = lr; tc.min_lr = lr / 10; tc.warmup = steps / 10; tc.seed = 9;
    if (mhe_trainer_init(&t, m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); exit(1); }
    for (s = 0; s < steps; s++)
        if (mhe_trainer_step(&t, train, nt) != MHE_OK) { fprintf(stderr, "%s\n", t.err); exit(1); }
    mhe_trainer_free(&t);
    return val_loss(m, valid, nv);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 600, ft = argc > 2 ? atoi(argv[2]) : 100, i, s, Dk;
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=256\nd_model=128\nn_heads=8\nd_head=16\nn_layers=4\nmax_seq_len=64\nattn=mha\nbias=1\n";
    int *train, *valid, dims[N_DIMS];
    size_t nt, nv;
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m, orig_ft;
    mhe_trainer t;
    float v_orig, v_orig_ft, before[N_DIMS], after[N_DIMS], lo = 1e9f, hi = -1e9f;
    double secs[N_DIMS], t0;
    int64_t attn_params[N_DIMS + 1], params[N_DIMS + 1];
    cp_stats st[N_DIMS];
    FILE *out[2];
    if (steps < 1 || ft < 1) { fprintf(stderr, "usage: collab_reparam [steps >= 1] [finetune_steps >= 1]\n"); return 2; }
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &nt, NULL, err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &nv, NULL, err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", err);
        return 1;
    }
    if (mhe_config_parse(&c, base, strlen(base), err) != MHE_OK) { fprintf(stderr, "%s\n", err); return 1; }
    Dk = c.n_heads * mhe_config_d_head(&c);
    tc.steps = steps; tc.batch = 16; tc.seq_len = 64; tc.lr = 1e-3f; tc.min_lr = 1e-4f; tc.warmup = steps / 10; tc.seed = 5;
    if (mhe_model_init(&m, &c, 3, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "init failed\n"); return 1; }
    printf("training an mha decoder (d_model 128, 8 heads of 16, 4 layers, T 64, batch 16) for %d steps...\n", steps);
    fflush(stdout);
    for (s = 0; s < steps; s++)
        if (mhe_trainer_step(&t, train, nt) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
    mhe_trainer_free(&t);
    v_orig = val_loss(&m, valid, nv);
    attn_params[N_DIMS] = (int64_t)c.n_layers * mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1);
    params[N_DIMS] = m.n_params;
    /* the original with the same extra steps: the reference for every re-fine-tuned model */
    if (mhe_model_init_from(&orig_ft, &c, &m, 1, NULL, NULL) != MHE_OK) { fprintf(stderr, "%s\n", orig_ft.err); return 1; }
    v_orig_ft = finetune(&orig_ft, ft, 3e-4f, train, nt, valid, nv);
    mhe_model_free(&orig_ft);
    for (i = 0; i < N_DIMS; i++) {
        mhe_reparam_opts o = mhe_reparam_opts_default();
        mhe_model r;
        mhe_status rs;
        dims[i] = (Dk + i) / (i + 1);   /* D_k, then D_k/2, /3, /4 rounded up */
        o.dim = dims[i];
        o.progress = on_layer;
        o.progress_ctx = &st[i];
        memset(&st[i], 0, sizeof st[i]);
        t0 = now_s();
        rs = mhe_model_reparam_collab(&r, &m, &o, NULL, NULL);
        secs[i] = now_s() - t0;
        if (rs != MHE_OK) { fprintf(stderr, "D~ = %d: %s\n", dims[i], r.err); return 1; }
        attn_params[i] = (int64_t)c.n_layers * mhe_attn_param_count(&r.cfg, MHE_ATTN_COLLAB, 1, 1);
        params[i] = r.n_params;
        before[i] = val_loss(&r, valid, nv);
        after[i] = finetune(&r, ft, 3e-4f, train, nt, valid, nv);
        printf("D~ = %3d: CP-ALS %.3f s, val loss %.4f after the decomposition, %.4f after %d steps\n", dims[i], secs[i], before[i],
               after[i], ft);
        fflush(stdout);
        mhe_model_free(&r);
    }
    out[0] = stdout;
    out[1] = fopen("build/collab_reparam.md", "w");
    if (!out[1]) { fprintf(stderr, "cannot write build/collab_reparam.md (run `make` first)\n"); return 1; }
    for (s = 0; s < 2; s++) {
        FILE *f = out[s];
        fprintf(f, "\nValidation loss (nats per byte) of the trained mha model (%.4f; %.4f after %d more steps) reparametrised as\n"
                   "collaborative attention, right after the CP decomposition and after %d steps of re-fine-tuning (lr 3e-4):\n\n",
                v_orig, v_orig_ft, ft, ft);
        fprintf(f, "| D~ | of D_k | attention params | model params | CP error (mean / worst layer) | CP time (s) | val loss, decomposed |"
                   " after re-fine-tune | vs mha re-fine-tuned |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        fprintf(f, "| mha | - | %lld | %lld | - | - | %.4f | %.4f | - |\n", (long long)attn_params[N_DIMS], (long long)params[N_DIMS],
                v_orig, v_orig_ft);
        for (i = 0; i < N_DIMS; i++)
            fprintf(f, "| %d | 1/%d | %lld | %lld | %.3f / %.3f | %.3f | %.4f | %.4f | %+.4f |\n", dims[i], i + 1,
                    (long long)attn_params[i], (long long)params[i], st[i].n ? st[i].sum / st[i].n : 0.0, st[i].worst, secs[i],
                    before[i], after[i], after[i] - v_orig_ft);
    }
    fclose(out[1]);
    /* SVG: validation loss against D~, decomposed and re-fine-tuned, the mha levels as lines */
    for (i = 0; i < N_DIMS; i++) {
        if (before[i] > hi) hi = before[i];
        if (after[i] < lo) lo = after[i];
    }
    if (v_orig > hi) hi = v_orig;
    if (v_orig_ft < lo) lo = v_orig_ft;
    lo -= 0.05f; hi += 0.05f;
    out[1] = fopen("build/collab_reparam.svg", "w");
    if (!out[1]) return 1;
    {
        FILE *f = out[1];
        const char *col[2] = { "#d62728", "#1f77b4" };
        int k;
#define X_OF(d) (80 + 560.0 * ((double)(d) - dims[N_DIMS - 1]) / (double)(Dk - dims[N_DIMS - 1]))
#define Y_OF(v) (340 - 290.0 * ((v) - lo) / (hi - lo))
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"400\" font-family=\"sans-serif\" font-size=\"12\">\n"
                   "<rect width=\"720\" height=\"400\" fill=\"white\"/>\n"
                   "<text x=\"360\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">mha reparametrised as collaborative attention: "
                   "validation loss vs shared key/query width</text>\n"
                   "<line x1=\"80\" y1=\"340\" x2=\"660\" y2=\"340\" stroke=\"black\"/><line x1=\"80\" y1=\"40\" x2=\"80\" y2=\"340\" stroke=\"black\"/>\n");
        for (k = 0; k <= 4; k++) {
            float v = lo + (hi - lo) * k / 4;
            fprintf(f, "<text x=\"75\" y=\"%.1f\" text-anchor=\"end\">%.2f</text><line x1=\"80\" y1=\"%.1f\" x2=\"660\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    Y_OF(v) + 4, v, Y_OF(v), Y_OF(v));
        }
        for (i = 0; i < N_DIMS; i++) fprintf(f, "<text x=\"%.1f\" y=\"356\" text-anchor=\"middle\">%d</text>\n", X_OF(dims[i]), dims[i]);
        fprintf(f, "<text x=\"370\" y=\"380\" text-anchor=\"middle\" fill=\"#555\">D~ (D_k = %d)</text>\n", Dk);
        fprintf(f, "<line x1=\"80\" x2=\"660\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6 4\"/>\n", Y_OF(v_orig), Y_OF(v_orig), col[0]);
        fprintf(f, "<line x1=\"80\" x2=\"660\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-dasharray=\"6 4\"/>\n", Y_OF(v_orig_ft), Y_OF(v_orig_ft), col[1]);
        for (k = 0; k < 2; k++) {
            const float *v = k ? after : before;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col[k]);
            for (i = 0; i < N_DIMS; i++) fprintf(f, "%s%.1f,%.1f", i ? " " : "", X_OF(dims[i]), Y_OF(v[i]));
            fprintf(f, "\"/>\n");
            for (i = 0; i < N_DIMS; i++) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X_OF(dims[i]), Y_OF(v[i]), col[k]);
        }
        fprintf(f, "<text x=\"470\" y=\"60\" fill=\"%s\">decomposed (dashed: mha)</text>\n"
                   "<text x=\"470\" y=\"76\" fill=\"%s\">+ %d steps (dashed: mha + %d)</text>\n</svg>\n", col[0], col[1], ft, ft);
#undef X_OF
#undef Y_OF
        fclose(f);
    }
    printf("\nwrote build/collab_reparam.md and build/collab_reparam.svg\n");
    mhe_model_free(&m);
    free(train);
    free(valid);
    return 0;
}
