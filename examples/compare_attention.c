/* compare_attention - train a small byte-level decoder with every attention
   kind for the same step budget on the bundled corpus, then print (and write
   as Markdown and an SVG bar chart) what each costs and how well it does:
   attention and total parameters, validation perplexity, PRR against MHA and
   PEoP against SHA (MHE paper sec. 4.6, perplexity as the inverse indicator),
   tokens/s, memory and KV-cache bytes per token.
     build/examples/compare_attention [steps] [out-prefix]   (run from the repository root)
   Defaults: 400 steps, writes build/compare_attention.md and .svg. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

typedef struct { int kind; int64_t attn_params, total_params; double ppl, tok_s, mem_mb, kv_bytes; } result;

int main(int argc, char **argv) {
    size_t n_train, n_valid;
    int *train = NULL, *valid = NULL;
    char load_err[MHE_ERR_LEN];
    int steps = argc > 1 ? atoi(argv[1]) : 400, k, i, mha = -1, sha = -1;
    const char *prefix = argc > 2 ? argv[2] : "build/compare_attention";
    enum { NK = MHE_ATTN_MHE_MUL + 1 };   /* the MHE paper's kinds (examples/deconstruct.c has thesis ch. 4's) */
    result res[NK];
    char path[512];
    FILE *md, *svg;
    double max_ppl = 0;
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &n_train, NULL, load_err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &n_valid, NULL, load_err) != MHE_OK) {
        fprintf(stderr, "%s (run from the repository root)\n", load_err);
        return 1;
    }
    printf("decoder, d_model 128, 8 heads of 16, 4 layers, T 128, batch 16, %d steps per kind\n", steps);
    for (k = 0; k < NK; k++) {
        mhe_config c = mhe_config_default();
        mhe_train_config tc = mhe_train_config_default();
        mhe_model m;
        mhe_trainer t;
        mhe_kv_cache kv;
        float val;
        double t0;
        c.d_model = 128; c.n_heads = 8; c.n_layers = 4; c.max_seq_len = 128; c.kv_groups = 2;
        for (i = 0; i < MHE_MAX_LAYERS; i++) c.attn[i] = k;
        tc.steps = steps; tc.batch = 16; tc.seq_len = 128; tc.lr = 2e-3f; tc.min_lr = 2e-4f; tc.warmup = steps / 20; tc.seed = 5;
        if (mhe_model_init(&m, &c, 42, NULL) != MHE_OK) { fprintf(stderr, "%s\n", m.err); return 1; }
        if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s\n", t.err); return 1; }
        t0 = seconds();
        for (i = 0; i < steps; i++)
            if (mhe_trainer_step(&t, train, n_train) != MHE_OK) { fprintf(stderr, "%s: %s\n", mhe_attn_kind_name(k), t.err); return 1; }
        res[k].tok_s = (double)steps * tc.batch * tc.seq_len / (seconds() - t0);
        mhe_evaluate(&m, valid, n_valid, 16, 128, 20, &val);
        res[k].kind = k;
        res[k].ppl = mhe_perplexity(val);
        res[k].total_params = m.n_params;
        res[k].attn_params = c.n_layers * mhe_attn_param_count(&c, k, 1, c.bias);
        res[k].mem_mb = (m.bytes_params + m.bytes_acts + 2.0 * m.n_params * sizeof(float)) / 1e6;
        mhe_kv_cache_init(&kv, &m, 1, NULL);
        res[k].kv_bytes = (double)kv.bytes_per_token;
        mhe_kv_cache_free(&kv);
        printf("  %-8s val ppl %6.3f  %7.0f tok/s\n", mhe_attn_kind_name(k), res[k].ppl, res[k].tok_s);
        fflush(stdout);
        if (k == MHE_ATTN_MHA) mha = k;
        if (k == MHE_ATTN_SHA) sha = k;
        if (res[k].ppl > max_ppl) max_ppl = res[k].ppl;
        mhe_trainer_free(&t);
        mhe_model_free(&m);
    }
    snprintf(path, sizeof path, "%s.md", prefix);
    md = fopen(path, "w");
    if (!md) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    for (i = 0; i < 2; i++) {
        FILE *f = i ? md : stdout;
        fprintf(f, "\n| kind | attention params | total params | val ppl | PRR vs MHA | PEoP vs SHA | tokens/s | memory MB | KV cache bytes/token |\n");
        fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (k = 0; k < NK; k++) {
            char peop[32];
            if (k == sha) snprintf(peop, sizeof peop, "(reference)");
            else snprintf(peop, sizeof peop, "%.2f", mhe_peop(res[k].ppl, (double)res[k].total_params, res[sha].ppl, (double)res[sha].total_params, 1));
            fprintf(f, "| %s | %lld | %lld | %.3f | %.3f | %s | %.0f | %.1f | %.0f |\n", mhe_attn_kind_name(k),
                    (long long)res[k].attn_params, (long long)res[k].total_params, res[k].ppl,
                    mhe_prr(res[k].ppl, res[mha].ppl, 1), peop, res[k].tok_s, res[k].mem_mb, res[k].kv_bytes);
        }
    }
    fclose(md);
    /* SVG: validation perplexity per kind, bars labelled with the attention parameter count */
    snprintf(path, sizeof path, "%s.svg", prefix);
    svg = fopen(path, "w");
    if (!svg) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    fprintf(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"360\" font-family=\"sans-serif\" font-size=\"12\">\n");
    fprintf(svg, "<rect width=\"720\" height=\"360\" fill=\"white\"/>\n");
    fprintf(svg, "<text x=\"360\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Validation perplexity after %d steps (lower is better)</text>\n", steps);
    fprintf(svg, "<line x1=\"60\" y1=\"300\" x2=\"700\" y2=\"300\" stroke=\"black\"/><line x1=\"60\" y1=\"40\" x2=\"60\" y2=\"300\" stroke=\"black\"/>\n");
    for (i = 0; i <= 4; i++) {
        double v = max_ppl * 1.1 * i / 4, y = 300 - 260.0 * i / 4;
        fprintf(svg, "<text x=\"55\" y=\"%.1f\" text-anchor=\"end\">%.1f</text><line x1=\"60\" y1=\"%.1f\" x2=\"700\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", y + 4, v, y, y);
    }
    for (k = 0; k < NK; k++) {
        double h = 260.0 * res[k].ppl / (max_ppl * 1.1), x = 75 + k * 78.0;
        const char *col = k == MHE_ATTN_MHE_ADD || k == MHE_ATTN_MHE_MUL ? "#d95f02" : "#1b9e77";
        fprintf(svg, "<rect x=\"%.1f\" y=\"%.1f\" width=\"55\" height=\"%.1f\" fill=\"%s\"/>\n", x, 300 - h, h, col);
        fprintf(svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.2f</text>\n", x + 27.5, 295 - h, res[k].ppl);
        fprintf(svg, "<text x=\"%.1f\" y=\"318\" text-anchor=\"middle\">%s</text>\n", x + 27.5, mhe_attn_kind_name(k));
        fprintf(svg, "<text x=\"%.1f\" y=\"334\" text-anchor=\"middle\" fill=\"#555\">%.0fk</text>\n", x + 27.5, res[k].attn_params / 1e3);
    }
    fprintf(svg, "<text x=\"380\" y=\"352\" text-anchor=\"middle\" fill=\"#555\">attention parameters (all layers)</text>\n</svg>\n");
    fclose(svg);
    printf("\nwrote %s.md and %s.svg\n", prefix, prefix);
    free(train); free(valid);
    return 0;
}
