/* mhe_plots.h - attention-pattern indicators (thesis sec. 4.4.4) as CSV and
   SVG, and attention heat-maps. Included after mhe.h and <stdio.h> by
   tools/cli/mhe.c (mhe eval --indicators) and examples/deconstruct.c.

   Normalisations:
   - the CSV holds the raw values of mhe_indicators_eval (means over the
     evaluation sequences; see mhe.h section 11), one row per layer and head
     and a "mean" row per layer; entropy_norm and conc_norm are normalised
     per map (row entropy / log(keys seen); ||A||_F / sqrt(L)).
   - the chart, like the thesis's Figure 4.1 (footnote 5), min-max normalises
     Entropy, Conc and HeadDiv over every layer of every model drawn (so 0 is
     the least and 1 the most among them) and plots Sink and LocFoc0..3 as
     they are (the thesis doubles LocFoc for visibility; we do not). */
#ifndef MHE_PLOTS_H
#define MHE_PLOTS_H
#include <math.h>

/* a program may use a few of these (mhe_compare.h: pl_xml and pl_color only) */
#if defined(__GNUC__)
#define PL_FN static __attribute__((unused))
#else
#define PL_FN static
#endif

PL_FN void pl_xml(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '<') fputs("&lt;", f);
        else if (ch == '>') fputs("&gt;", f);
        else if (ch == '&') fputs("&amp;", f);
        else if (ch == '"') fputs("&quot;", f);
        else if (ch < 0x20 || ch >= 0x7f) fprintf(f, "&#%d;", ch < 0x20 ? 0x2400 + ch : 0xfffd);
        else fputc(ch, f);
    }
}

/* one CSV: model,layer,kind,head,<indicators>; empty cells where a layer has no map */
PL_FN void pl_ind_csv(FILE *f, const mhe_indicators *ind, const char *model, int header) {
    int l, h, i;
    if (header) {
        fprintf(f, "model,layer,kind,head");
        for (i = 0; i < MHE_IND_COUNT; i++) fprintf(f, ",%s", mhe_ind_name(i));
        fputc('\n', f);
    }
    for (l = 0; l < ind->n_layers; l++)
        for (h = 0; h <= ind->n_heads; h++) {
            fprintf(f, "%s,%d,%s,", model, l, mhe_attn_kind_name(ind->kind[l]));
            if (h < ind->n_heads) fprintf(f, "%d", h); else fprintf(f, "mean");
            for (i = 0; i < MHE_IND_COUNT; i++) {
                double v = mhe_indicator(ind, l, h < ind->n_heads ? h : -1, i);
                if (ind->has_map[l]) fprintf(f, ",%.6g", v); else fputc(',', f);
            }
            fputc('\n', f);
        }
}

PL_FN const char *pl_color(int i) {
    static const char *c[] = { "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666",
                               "#1f78b4", "#b2df8a", "#fb9a99", "#cab2d6", "#6a3d9a", "#b15928", "#ff7f00", "#000000" };
    return c[i % 16];
}

/* Per-layer indicators (the mean over heads) of n models: one panel per
   indicator, x = layer, a line per model. */
PL_FN void pl_ind_svg(FILE *f, const mhe_indicators *const *ind, const char *const *labels, int n, const char *title) {
    static const int which[8] = { MHE_IND_ENTROPY, MHE_IND_CONC, MHE_IND_HEADDIV, MHE_IND_SINK,
                                  MHE_IND_LOCFOC0, MHE_IND_LOCFOC1, MHE_IND_LOCFOC2, MHE_IND_LOCFOC3 };
    static const char *names[8] = { "Entropy (min-max)", "Conc (min-max)", "HeadDiv (min-max)", "Sink",
                                    "LocFoc0", "LocFoc1", "LocFoc2", "LocFoc3" };
    double lo[3], hi[3];
    int p, k, l, maxl = 1, pw = 220, ph = 150, top = 50, W = 40 + 4 * (pw + 28), H;
    for (k = 0; k < n; k++) if (ind[k]->n_layers > maxl) maxl = ind[k]->n_layers;
    for (p = 0; p < 3; p++) {   /* min-max over every layer of every model */
        lo[p] = INFINITY; hi[p] = -INFINITY;
        for (k = 0; k < n; k++)
            for (l = 0; l < ind[k]->n_layers; l++) {
                double v = mhe_indicator(ind[k], l, -1, which[p]);
                if (!ind[k]->has_map[l] || isnan(v)) continue;
                if (v < lo[p]) lo[p] = v;
                if (v > hi[p]) hi[p] = v;
            }
    }
    H = top + 2 * (ph + 60) + 20 + 18 * ((n + 3) / 4);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">", W, H, W / 2);
    pl_xml(f, title);
    fprintf(f, "</text>\n");
    for (p = 0; p < 8; p++) {
        double x0 = 40 + (p % 4) * (pw + 28), y0 = top + (p / 4) * (ph + 60), ymin = 0, ymax = 1;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">%s</text>\n", x0 + pw / 2, y0 - 6, names[p]);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", x0, y0, pw, ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">1</text><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n",
                x0 - 3, y0 + 4, x0 - 3, y0 + ph + 4);
        for (l = 0; l < maxl; l++) {
            double x = x0 + (maxl > 1 ? pw * (double)l / (maxl - 1) : pw / 2.0);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%d</text>\n", x, y0 + ph + 14, l);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">layer</text>\n", x0 + pw / 2, y0 + ph + 28);
        for (k = 0; k < n; k++) {
            int started = 0;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", pl_color(k));
            for (l = 0; l < ind[k]->n_layers; l++) {
                double v = mhe_indicator(ind[k], l, -1, which[p]), x, y;
                if (!ind[k]->has_map[l] || isnan(v)) continue;
                if (p < 3) v = hi[p] > lo[p] ? (v - lo[p]) / (hi[p] - lo[p]) : 0.5;
                if (v < ymin) v = ymin;
                if (v > ymax) v = ymax;
                x = x0 + (maxl > 1 ? pw * (double)l / (maxl - 1) : pw / 2.0);
                y = y0 + ph * (1 - v);
                fprintf(f, "%s%.1f,%.1f", started ? " " : "", x, y);
                started = 1;
            }
            fprintf(f, "\"/>\n");
        }
    }
    for (k = 0; k < n; k++) {
        double x = 40 + (k % 4) * 240, y = top + 2 * (ph + 60) + 10 + 18 * (k / 4);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">",
                x, y, x + 24, y, pl_color(k), x + 30, y + 4);
        pl_xml(f, labels[k]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

/* Heat-maps of every layer and head for one sequence: the model runs it on
   its reference path (maps materialised) and is restored. tokens[T] (bytes
   are drawn as labels); darker = more weight. Layers without a map are
   left out. */
PL_FN int pl_heatmap_svg(FILE *f, mhe_model *m, const int *tokens, int T, const char *title) {
    int n = m->cfg.n_heads, NL = m->cfg.n_layers, l, h, t, j, fused = m->cfg.fused_attention, cell, W, H, rows = 0;
    float *A = (float *)malloc((size_t)T * T * sizeof(float));
    mhe_batch b;
    if (!A) return 0;
    mhe_model_set_reference(m, 1);
    memset(&b, 0, sizeof b);
    b.B = 1; b.T = T; b.tokens = tokens;
    if (mhe_model_forward_batch(m, &b, NULL) != MHE_OK) { free(A); mhe_model_set_reference(m, !fused); return 0; }
    for (l = 0; l < NL; l++) rows += mhe_attn_probs(m, l, 0, A);
    cell = T <= 16 ? 10 : T <= 32 ? 6 : 3;
    W = 60 + n * (T * cell + 16);
    H = 50 + rows * (T * cell + 30);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"monospace\" font-size=\"9\">\n", W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\">", W, H);
    pl_xml(f, title);
    fprintf(f, "</text>\n");
    rows = 0;
    for (l = 0; l < NL; l++) {
        double y0 = 50 + rows * (T * cell + 30);
        if (!mhe_attn_probs(m, l, 0, A)) continue;
        fprintf(f, "<text x=\"4\" y=\"%.1f\">L%d %s</text>\n", y0 - 4, l, mhe_attn_kind_name(m->layers[l].attn.kind));
        for (h = 0; h < n; h++) {
            double x0 = 60 + h * (T * cell + 16);
            mhe_attn_probs(m, l, h, A);
            if (l == 0) fprintf(f, "<text x=\"%.1f\" y=\"38\">head %d</text>\n", x0, h);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#bbb\"/>\n", x0, y0, T * cell, T * cell);
            for (t = 0; t < T; t++)
                for (j = 0; j < T; j++) {
                    float a = A[(size_t)t * T + j];
                    int g;
                    if (a < 0.005f) continue;
                    g = (int)(255 * (1 - sqrt(a > 1 ? 1 : a)));
                    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,255)\"/>\n",
                            x0 + j * cell, y0 + t * cell, cell, cell, g, g);
                }
        }
        rows++;
    }
    if (cell >= 6) {   /* the tokens along the first map's rows */
        for (t = 0; t < T; t++) {
            char ch[2];
            ch[0] = (char)(tokens[t] >= 0x20 && tokens[t] < 0x7f ? tokens[t] : '.'); ch[1] = 0;
            fprintf(f, "<text x=\"50\" y=\"%d\" text-anchor=\"end\">", 50 + t * cell + cell - 1);
            pl_xml(f, ch);
            fprintf(f, "</text>\n");
        }
    }
    fprintf(f, "</svg>\n");
    free(A);
    mhe_model_set_reference(m, !fused);
    return 1;
}
#endif
