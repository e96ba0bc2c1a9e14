/* mhe params - the parameter and memory tables of the MHE paper (Xue and
   Aletras, "Pit One Against Many"), computed, never typed in.

   Linked into the mhe tool, which calls cmd_params (mhe_params.h); uses
   mhe.h's API only (tools/cli/mhe.c holds the implementation). Every count comes
   from mhe_attn_param_count(), the function that also sizes a built model's
   attention layers; the memory model of Table 13 is plain
   arithmetic on those counts. The only numbers from the paper in this file are
   the few printed values that no consistent count reproduces (mp_paper_printed
   below); they are shown beside the exact count as errata, never used.

   Which parameters each table counts (the paper excludes biases throughout):
     Table 4, Figures 3 and 4, GPT-3   Q/K/V projections and head embeddings
     Tables 1, 3, 13, 14 and 15        the same plus W^O (the d_m x nd output
                                       projection), as the paper's totals show */
#define _POSIX_C_SOURCE 200809L   /* mkdir */
#include "../../mhe.h"
#include "mhe_params.h"
#define MHE_COSTS_IMPLEMENTATION
#include "mhe_costs.h"     /* thesis Tables 4.5-4.8 (--complexity) */
#include "mhe_args.h"     /* the number parser of every flag */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _WIN32
#include <direct.h>
#define mkdir(path, mode) _mkdir(path)   /* no mode argument there */
#endif

#define MP_ROWS 24
#define MP_COLS 16
#define MP_CELL 200
#define MP_NOTES 10
#define MP_NOTE_LEN 480

enum { MP_TEXT, MP_MARKDOWN, MP_CSV };

enum {
    MP_T4 = 1 << 0, MP_T1 = 1 << 1, MP_T3 = 1 << 2, MP_T14 = 1 << 3, MP_T15 = 1 << 4,
    MP_T13 = 1 << 5, MP_GPT3 = 1 << 6, MP_FIG3 = 1 << 7, MP_FIG4 = 1 << 8, MP_ALL = (1 << 9) - 1,
    MP_HASH = 1 << 9,  /* HashFormers Table 2.2 (--embeddings); not part of `all`, the MHE paper's tables */
    MP_CX = 0xf << 10, /* thesis Tables 4.5-4.8 (--complexity) */
    MP_COLLAB = 1 << 14 /* collaborative attention, Cordonnier et al. Table 1; not part of `all` */
};

/* --table names, in the order `all` prints them */
static const struct { const char *name; unsigned bit; const char *stem; } mp_table_names[] = {
    { "4", MP_T4, "table4" }, { "1", MP_T1, "table1" }, { "3", MP_T3, "table3" },
    { "14", MP_T14, "table14" }, { "15", MP_T15, "table15" }, { "13", MP_T13, "table13" },
    { "gpt3", MP_GPT3, "gpt3" }, { "fig3", MP_FIG3, "fig3" }, { "fig4", MP_FIG4, "fig4" },
    { "2.2", MP_HASH, "hashformers_table2_2" },
    { "4.5", 1 << 10, "thesis_table4_5" }, { "4.6", 1 << 11, "thesis_table4_6" }, { "4.7", 1 << 12, "thesis_table4_7" },
    { "4.8", 1 << 13, "thesis_table4_8" }, { "collab", MP_COLLAB, "collab_table1" }
};
#define MP_NTABLES ((int)(sizeof mp_table_names / sizeof mp_table_names[0]))

typedef struct mp_opts {
    int format;
    unsigned tables;
    int n, d, g, g_given;
    const char *out_dir;
    int complexity;                 /* --complexity: thesis Tables 4.5-4.8 at cB, cL, cd, ch, ct */
    double cB, cL, cd, ch, ct;
} mp_opts;

/* One table, filled by a builder and printed by mp_print in any format. With
   csv set the builder writes numbers without thousands separators or units. */
typedef struct mp_table {
    char title[300];
    int csv;
    int ncol, nrow, nnote;
    char head[MP_COLS][48];     /* column heading shown in text and markdown */
    char key[MP_COLS][48];      /* the same column's CSV header */
    int right[MP_COLS];         /* right-aligned (numbers) */
    char cell[MP_ROWS][MP_COLS][MP_CELL];
    char note[MP_NOTES][MP_NOTE_LEN];
} mp_table;

/* ---- the paper's printed values that disagree with every consistent count ---- */

/* Each is the paper's own printed figure, kept only to print beside the exact
   count. A note appears only when the count, rounded as the paper rounds,
   differs from it. */
static const struct { const char *table, *row; int kind; const char *printed; } mp_paper_printed[] = {
    { "1", "BERT-base", MHE_ATTN_MHA, "28.32M" },       /* Table 1, #params of MHA */
    { "14", "BASE", MHE_ATTN_MHA, "28.32" },            /* Table 14, #Params(M) of MHA, both BASE rows */
    { "gpt3", "GPT-3", MHE_ATTN_MHA, "43.48B" },        /* section 5.4, GPT-3 projection of MHA */
    { "15-text", "MHA low end", MHE_ATTN_MHA, "19.87M" } /* Appendix D: "MHA ranges from 19.87M to 75.50M" */
};

static const char *mp_printed(const char *table, const char *row, int kind) {
    size_t i;
    for (i = 0; i < sizeof mp_paper_printed / sizeof mp_paper_printed[0]; i++)
        if (strcmp(mp_paper_printed[i].table, table) == 0 && strcmp(mp_paper_printed[i].row, row) == 0 &&
            mp_paper_printed[i].kind == kind)
            return mp_paper_printed[i].printed;
    return NULL;
}

/* ---- counting -------------------------------------------------------------- */

/* Parameters of `sublayers` attention sublayers of `kind` with d_m = d_model,
   n heads of dh, K/V groups g (gqa); no biases. -1 where gqa's g does not
   divide n. */
static int64_t mp_count(int kind, int d_model, int n, int dh, int g, int with_wo, int64_t sublayers) {
    mhe_config c = mhe_config_default();
    int64_t one;
    if (kind == MHE_ATTN_GQA && (g < 1 || n % g != 0)) return -1;
    c.d_model = d_model;
    c.n_heads = n;
    c.d_head = dh;
    c.kv_groups = g;
    one = mhe_attn_param_count(&c, kind, with_wo, 0);
    return one < 0 ? -1 : one * sublayers;
}

/* the kinds in the paper's order (GQA, not in the paper, after MQA), then any
   kind mhe.h adds later but those of thesis ch. 4 (--complexity has them) and
   collab (--table collab) */
static int mp_kind_list(int *kinds) {
    static const int order[] = { MHE_ATTN_SHA, MHE_ATTN_MHA, MHE_ATTN_EL_ATT, MHE_ATTN_MQA, MHE_ATTN_GQA,
                                 MHE_ATTN_SKV, MHE_ATTN_MHE_ADD, MHE_ATTN_MHE_MUL };
    int n = 0, k, i, seen;
    for (i = 0; i < (int)(sizeof order / sizeof order[0]); i++) kinds[n++] = order[i];
    for (k = 0; k < MHE_ATTN_KIND_COUNT && n < MP_COLS - 2; k++) {
        for (seen = mhe_attn_kind_is_decon(k) || k == MHE_ATTN_COLLAB, i = 0; i < n; i++) seen |= kinds[i] == k;
        if (!seen) kinds[n++] = k;
    }
    return n;
}

static void mp_upper(char *dst, size_t cap, const char *s) {
    size_t i;
    for (i = 0; s[i] && i + 1 < cap; i++) dst[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 'a' + 'A' : s[i]);
    dst[i] = 0;
}

/* a kind as the paper writes it (MHA, EL-ATT) or, in CSV, as mhe.h names it */
static void mp_kind_label(const mp_table *t, char *dst, size_t cap, int kind) {
    if (t->csv) snprintf(dst, cap, "%s", mhe_attn_kind_name(kind));
    else mp_upper(dst, cap, mhe_attn_kind_name(kind));
}

/* ---- number formatting ------------------------------------------------------- */

/* exact integer, with thousands separators unless csv */
static void mp_int(char *dst, size_t cap, int64_t v, int csv) {
    char digits[32], out[48];
    int len, i, j = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    len = snprintf(digits, sizeof digits, "%llu", u);
    if (v < 0) out[j++] = '-';
    for (i = 0; i < len; i++) {
        if (!csv && i > 0 && (len - i) % 3 == 0) out[j++] = ',';
        out[j++] = digits[i];
    }
    out[j] = 0;
    snprintf(dst, cap, "%s", out);
}

/* v / scale to two decimals, as the paper rounds its M and B figures */
/* one decimal; a result that rounds to zero prints 0.0 whatever its sign
   (1 - x/x may come out as -0 when the compiler contracts it, -ffast-math) */
static void mp_pct1(char *dst, double v) {
    snprintf(dst, MP_CELL, "%.1f", v);
    if (strcmp(dst, "-0.0") == 0) snprintf(dst, MP_CELL, "0.0");
}

static void mp_short(char *dst, size_t cap, int64_t v, double scale, const char *suffix) {
    snprintf(dst, cap, "%.2f%s", (double)v / scale, suffix);
}

/* ---- table building helpers ------------------------------------------------- */

static void mp_col(mp_table *t, const char *head, const char *key, int right) {
    if (t->ncol >= MP_COLS) return;
    snprintf(t->head[t->ncol], sizeof t->head[0], "%s", head);
    snprintf(t->key[t->ncol], sizeof t->key[0], "%s", key);
    t->right[t->ncol] = right;
    t->ncol++;
}

static char *mp_cell(mp_table *t, int row, int col) {
    static char sink[MP_CELL];
    if (row < 0 || row >= MP_ROWS || col < 0 || col >= MP_COLS) return sink;
    if (row >= t->nrow) t->nrow = row + 1;
    return t->cell[row][col];
}

static void mp_set(mp_table *t, int row, int col, const char *s) { snprintf(mp_cell(t, row, col), MP_CELL, "%s", s); }

static void mp_set_int(mp_table *t, int row, int col, int64_t v) { mp_int(mp_cell(t, row, col), MP_CELL, v, t->csv); }

/* a count; negative means "does not exist" (gqa where g does not divide n) */
static void mp_set_count(mp_table *t, int row, int col, int64_t v) {
    if (v < 0) mp_set(t, row, col, t->csv ? "" : "-");
    else mp_set_int(t, row, col, v);
}

static void mp_note(mp_table *t, const char *s) {
    if (t->nnote < MP_NOTES) snprintf(t->note[t->nnote++], MP_NOTE_LEN, "%s", s);
}

/* ---- printing ------------------------------------------------------------------ */

static void mp_csv_field(FILE *f, const char *s) {
    if (strpbrk(s, ",\"\n\r") == NULL) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) { if (*s == '"') fputc('"', f); fputc(*s, f); }
    fputc('"', f);
}

/* a comment line of the CSV stream ("#" first, as pandas' comment="#" and R's comment.char expect) */
static void mp_csv_comment(FILE *f, const char *prefix, const char *s) { fprintf(f, "# %s%s\n", prefix, s); }

static void mp_pad(FILE *f, int n) { while (n-- > 0) fputc(' ', f); }

/* pure: a CSV file with only the header and the rows (for --out-dir) */
static void mp_print(FILE *f, const mp_table *t, int format, int pure) {
    int w[MP_COLS], r, c, i;
    if (format == MP_CSV) {
        if (!pure) mp_csv_comment(f, "", t->title);
        for (c = 0; c < t->ncol; c++) { if (c) fputc(',', f); mp_csv_field(f, t->key[c]); }
        fputc('\n', f);
        for (r = 0; r < t->nrow; r++) {
            for (c = 0; c < t->ncol; c++) { if (c) fputc(',', f); mp_csv_field(f, t->cell[r][c]); }
            fputc('\n', f);
        }
        if (!pure) {
            for (i = 0; i < t->nnote; i++) mp_csv_comment(f, "note: ", t->note[i]);
            fputc('\n', f);
        }
        return;
    }
    for (c = 0; c < t->ncol; c++) {
        w[c] = (int)strlen(t->head[c]);
        if (format == MP_MARKDOWN && w[c] < 3) w[c] = 3;
        for (r = 0; r < t->nrow; r++) if ((int)strlen(t->cell[r][c]) > w[c]) w[c] = (int)strlen(t->cell[r][c]);
    }
    if (format == MP_MARKDOWN) fprintf(f, "### %s\n\n", t->title);
    else {
        fprintf(f, "%s\n", t->title);
        for (i = (int)strlen(t->title); i > 0; i--) fputc('=', f);
        fputc('\n', f);
    }
    for (c = 0; c < t->ncol; c++) {
        fputs(c ? " | " : "| ", f);
        fputs(t->head[c], f);
        mp_pad(f, w[c] - (int)strlen(t->head[c]));
    }
    fputs(" |\n", f);
    for (c = 0; c < t->ncol; c++) {
        fputc('|', f);
        if (format == MP_MARKDOWN) {
            fputc(t->right[c] ? '-' : ':', f);
            for (i = 0; i < w[c]; i++) fputc('-', f);
            fputc(t->right[c] ? ':' : '-', f);
        } else
            for (i = 0; i < w[c] + 2; i++) fputc('-', f);
    }
    fputs("|\n", f);
    for (r = 0; r < t->nrow; r++) {
        for (c = 0; c < t->ncol; c++) {
            int pad = w[c] - (int)strlen(t->cell[r][c]);
            fputs(c ? " | " : "| ", f);
            if (t->right[c]) mp_pad(f, pad);
            fputs(t->cell[r][c], f);
            if (!t->right[c]) mp_pad(f, pad);
        }
        fputs(" |\n", f);
    }
    if (t->nnote) fputc('\n', f);
    for (i = 0; i < t->nnote; i++) fprintf(f, format == MP_MARKDOWN ? "- %s\n" : "  * %s\n", t->note[i]);
    fputc('\n', f);
}

/* ---- Table 4: formulas fitted to mhe_attn_param_count ------------------------- */

/* count(n, d, g) = a n^2 d^2 + b n d^2 + c g n d^2 + e n d  with d_m = nd */
typedef struct mp_poly { int64_t a, b, c, e; int ok; } mp_poly;

static int64_t mp_one(int kind, int n, int d, int g) { return mp_count(kind, n * d, n, d, g, 0, 1); }

static int64_t mp_poly_eval(mp_poly p, int64_t n, int64_t d, int64_t g) {
    return (p.a * n * n + p.b * n + p.c * g * n) * d * d + p.e * n * d;
}

/* The coefficients come from the counts themselves (d = 1, 2 separate the d^2
   and d terms; n = 1, 2 and g = 1, 2 the n^2, n and gn terms), then the
   polynomial is checked against mhe_attn_param_count at other points, the
   user's (n, d, g) among them. ok = 0 when the count is not of this form. */
static const int mp_fit_pts[][3] = { { 1, 1, 1 }, { 3, 5, 1 }, { 4, 3, 2 }, { 6, 7, 3 }, { 12, 64, 4 },
                                     { 16, 32, 8 }, { 96, 128, 8 }, { 7, 11, 7 } };
#define MP_FIT_POINTS ((int)(sizeof mp_fit_pts / sizeof mp_fit_pts[0]))

static mp_poly mp_fit(int kind, int un, int ud, int ug) {
    mp_poly p;
    int64_t x11, x21, x22, y1, f1, f2;
    int i;
    memset(&p, 0, sizeof p);
#define MP_X_Y(n, g, X, Y) (f1 = mp_one(kind, n, 1, g), f2 = mp_one(kind, n, 2, g), X = (f2 - 2 * f1) / 2, Y = f1 - X)
    MP_X_Y(1, 1, x11, y1);
    MP_X_Y(2, 1, x21, f1);
    MP_X_Y(2, 2, x22, f1);
#undef MP_X_Y
    p.a = (x21 - 2 * x11) / 2;
    p.c = (x22 - x21) / 2;
    p.b = x11 - p.a - p.c;
    p.e = y1;
    p.ok = 1;
    for (i = 0; i <= MP_FIT_POINTS; i++) {
        int n = i < MP_FIT_POINTS ? mp_fit_pts[i][0] : un;
        int d = i < MP_FIT_POINTS ? mp_fit_pts[i][1] : ud;
        int g = i < MP_FIT_POINTS ? mp_fit_pts[i][2] : ug;
        int64_t want = mp_one(kind, n, d, g);
        if (want < 0) continue;   /* gqa where g does not divide n */
        if (mp_poly_eval(p, n, d, g) != want) p.ok = 0;
    }
    return p;
}

static void mp_term(char *buf, size_t cap, int64_t coef, const char *mono, int first) {
    size_t len = strlen(buf);
    int64_t mag = coef < 0 ? -coef : coef;
    const char *sign = coef < 0 ? (first ? "-" : " - ") : (first ? "" : " + ");
    if (mag == 1) snprintf(buf + len, cap - len, "%s%s", sign, mono);
    else snprintf(buf + len, cap - len, "%s%lld%s", sign, (long long)mag, mono);
}

/* e.g. "(3n^2 - 3n)d^2", "3nd^2 + 3nd", "(n^2 + 2gn)d^2", "0" */
static void mp_poly_text(char *buf, size_t cap, mp_poly p) {
    int64_t co[3];
    const char *mono[3] = { "n^2", "n", "gn" };
    int i, k = 0, first = 1;
    co[0] = p.a; co[1] = p.b; co[2] = p.c;
    buf[0] = 0;
    for (i = 0; i < 3; i++) k += co[i] != 0;
    if (k == 1) {
        for (i = 0; i < 3; i++)
            if (co[i]) { char m[16]; snprintf(m, sizeof m, "%sd^2", mono[i]); mp_term(buf, cap, co[i], m, 1); }
        first = 0;
    } else if (k > 1) {
        snprintf(buf, cap, "(");
        for (i = 0; i < 3; i++) if (co[i]) { mp_term(buf, cap, co[i], mono[i], first); first = 0; }
        snprintf(buf + strlen(buf), cap - strlen(buf), ")d^2");
    }
    if (p.e) { mp_term(buf, cap, p.e, "nd", first); first = 0; }
    if (first) snprintf(buf, cap, "0");
}

static const char *mp_complexity(mp_poly p) {
    if (p.a) return "O(n^2d^2)";
    if (p.b || p.c) return "O(nd^2)";
    if (p.e) return "O(nd)";
    return "O(1)";
}

static int mp_build_table4(mp_table *t, const mp_opts *o) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), i, bad = 0;
    mp_poly sha = mp_fit(MHE_ATTN_SHA, o->n, o->d, o->g);
    int64_t sha_n = mp_one(MHE_ATTN_SHA, o->n, o->d, o->g);
    char h1[48], h2[48], buf[MP_NOTE_LEN];
    snprintf(t->title, sizeof t->title,
             "Table 4: parameters of one attention sublayer (n heads of d, d_m = nd; W^O and biases excluded), at n = %d, d = %d",
             o->n, o->d);
    snprintf(h1, sizeof h1, "#params (n=%d, d=%d)", o->n, o->d);
    snprintf(h2, sizeof h2, "extra over SHA (n=%d, d=%d)", o->n, o->d);
    mp_col(t, "attention", "kind", 0);
    mp_col(t, "memory complexity", "complexity", 0);
    mp_col(t, "#params", "params_formula", 0);
    mp_col(t, h1, "params", 1);
    mp_col(t, "extra over SHA", "extra_over_sha_formula", 0);
    mp_col(t, h2, "extra_over_sha", 1);
    for (i = 0; i < nk; i++) {
        mp_poly p = mp_fit(kinds[i], o->n, o->d, o->g), x;
        int64_t v = mp_one(kinds[i], o->n, o->d, o->g);
        char label[32];
        mp_kind_label(t, label, sizeof label, kinds[i]);
        if (kinds[i] == MHE_ATTN_GQA && !t->csv)
            snprintf(label + strlen(label), sizeof label - strlen(label), " (g=%d)", o->g);
        mp_set(t, i, 0, label);
        x = p;
        x.a -= sha.a; x.b -= sha.b; x.c -= sha.c; x.e -= sha.e;
        if (p.ok && sha.ok) {
            mp_set(t, i, 1, mp_complexity(p));
            mp_poly_text(mp_cell(t, i, 2), MP_CELL, p);
            mp_poly_text(mp_cell(t, i, 4), MP_CELL, x);
        } else {
            mp_set(t, i, 1, "?");
            mp_set(t, i, 2, "(not a polynomial in n, d, g)");
            mp_set(t, i, 4, "?");
            bad = 1;
        }
        mp_set_count(t, i, 3, v);
        if (v < 0) mp_set(t, i, 5, t->csv ? "" : "-");
        else mp_set_int(t, i, 5, v - sha_n);
    }
    snprintf(buf, sizeof buf, "The formulas are fitted to mhe_attn_param_count and checked against it at %d (n, d, g) "
             "points, the requested one among them; the numbers are mhe_attn_param_count itself.", MP_FIT_POINTS + 1);
    mp_note(t, buf);
    snprintf(buf, sizeof buf,
             "GQA (not in the paper) shares K and V within g = %d groups (--kv-groups)%s.", o->g,
             o->n % o->g ? "; g does not divide n here, so it has no row values" : "");
    mp_note(t, buf);
    if (bad) mp_note(t, "ERROR: a count does not follow its formula; mhe_attn_param_count changed shape.");
    return bad;
}

/* ---- Tables 1, 3 and the GPT-3 projection: every kind at one configuration ------- */

typedef struct mp_arch {
    const char *group, *name;
    int layers, d_m, heads, d_h;
} mp_arch;

static const mp_arch mp_bert_base = { "Encoder-only", "BASE", 12, 768, 12, 64 };
static const mp_arch mp_gpt3 = { "Decoder-only", "GPT-3", 96, 12288, 96, 128 };

/* WMT-14 encoder-decoders of Tables 3 and 15: N layers in all, N/2 encoder
   layers (self-attention) and N/2 decoder layers (self- and cross-attention) */
static const mp_arch mp_wmt[] = {
    { "WMT", "BASE", 12, 512, 8, 64 }, { "WMT", "BASE h=16", 12, 512, 16, 32 },
    { "WMT", "BASE h=4", 12, 512, 4, 128 }, { "WMT", "4L", 8, 512, 8, 64 },
    { "WMT", "8L", 16, 512, 8, 64 }, { "WMT", "12H", 12, 768, 12, 64 },
    { "WMT", "BIG", 12, 1024, 16, 64 }
};
static int64_t mp_wmt_sublayers(const mp_arch *a) { return (int64_t)(a->layers / 2) + 2 * (int64_t)(a->layers / 2); }

/* Table 14: BERT/GPT-2 sizes (LARGE and MEDIUM: 24 layers, d_m 1024, 16 heads of 64) */
static const mp_arch mp_sizes[] = {
    { "Encoder-only", "BASE", 12, 768, 12, 64 }, { "Encoder-only", "LARGE", 24, 1024, 16, 64 },
    { "Decoder-only", "BASE", 12, 768, 12, 64 }, { "Decoder-only", "MEDIUM", 24, 1024, 16, 64 }
};

/* one row per kind: exact count, short count, extra over SHA, ratios, errata */
static void mp_build_kinds(mp_table *t, const mp_opts *o, const char *id, const char *row, const mp_arch *a,
                           int64_t sublayers, int with_wo, double scale, const char *suffix) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), i;
    int64_t sha = mp_count(MHE_ATTN_SHA, a->d_m, a->heads, a->d_h, o->g, with_wo, sublayers);
    int64_t mha = mp_count(MHE_ATTN_MHA, a->d_m, a->heads, a->d_h, o->g, with_wo, sublayers);
    char h[48], k[48];
    mp_col(t, "attention", "kind", 0);
    mp_col(t, "#params", "params", 1);
    snprintf(h, sizeof h, "#params (%s)", suffix);
    snprintf(k, sizeof k, "params_%s", suffix);
    mp_col(t, h, k, 1);
    mp_col(t, "extra over SHA", "extra_over_sha", 1);
    mp_col(t, "x SHA", "ratio_to_sha", 1);
    mp_col(t, "saved vs MHA (%)", "saving_vs_mha_pct", 1);
    mp_col(t, "note", "note", 0);
    for (i = 0; i < nk; i++) {
        int64_t v = mp_count(kinds[i], a->d_m, a->heads, a->d_h, o->g, with_wo, sublayers);
        const char *printed = mp_printed(id, row, kinds[i]);
        char label[32], s[64], exact[48];
        mp_kind_label(t, label, sizeof label, kinds[i]);
        mp_set(t, i, 0, label);
        if (v < 0) {
            int c;
            for (c = 1; c < 6; c++) mp_set(t, i, c, t->csv ? "" : "-");
            snprintf(mp_cell(t, i, 6), MP_CELL, "kv-groups %d does not divide %d heads", o->g, a->heads);
            continue;
        }
        mp_set_int(t, i, 1, v);
        mp_short(s, sizeof s, v, scale, t->csv ? "" : suffix);
        mp_set(t, i, 2, s);
        mp_set_int(t, i, 3, v - sha);
        snprintf(mp_cell(t, i, 4), MP_CELL, "%.3f", (double)v / (double)sha);
        snprintf(mp_cell(t, i, 5), MP_CELL, "%.2f", 100.0 * (double)(mha - v) / (double)mha);
        mp_short(s, sizeof s, v, scale, suffix);
        if (printed && strcmp(printed, s) != 0) {
            mp_int(exact, sizeof exact, v, t->csv);
            snprintf(mp_cell(t, i, 6), MP_CELL, "erratum: the paper prints %s; %s rounds to %s", printed, exact, s);
        } else if (kinds[i] == MHE_ATTN_GQA)
            snprintf(mp_cell(t, i, 6), MP_CELL, "not in the paper; g = %d K/V groups", o->g);
    }
}

static int mp_build_table1(mp_table *t, const mp_opts *o) {
    const mp_arch *a = &mp_bert_base;
    char buf[MP_NOTE_LEN], s[48];
    snprintf(t->title, sizeof t->title,
             "Table 1: attention parameters of the BERT-base encoder (%d layers, d_m %d, %d heads of %d; W^O included, no biases)",
             a->layers, a->d_m, a->heads, a->d_h);
    mp_build_kinds(t, o, "1", "BERT-base", a, a->layers, 1, 1e6, "M");
    mp_short(s, sizeof s, mp_count(MHE_ATTN_SHA, a->d_m, a->heads, a->d_h, o->g, 1, a->layers), 1e6, "M");
    snprintf(buf, sizeof buf, "SHA is one head of d_h = %d whose output is repeated n times into the d_m x d_m W^O (MHE "
             "without head embeddings); that reading gives %s, the paper's SHA figure.", a->d_h, s);
    mp_note(t, buf);
    return 0;
}

static int mp_build_table3(mp_table *t, const mp_opts *o) {
    const mp_arch *a = &mp_wmt[0];
    int64_t s = mp_wmt_sublayers(a);
    char buf[MP_NOTE_LEN];
    snprintf(t->title, sizeof t->title,
             "Table 3: attention parameters of the WMT-14 encoder-decoder (N = %d, d_m %d, %d heads of %d; W^O included, no biases)",
             a->layers, a->d_m, a->heads, a->d_h);
    mp_build_kinds(t, o, "3", "BASE", a, s, 1, 1e6, "M");
    snprintf(buf, sizeof buf,
             "%d encoder layers (self-attention) + %d decoder layers (self- and cross-attention) = %lld attention sublayers.",
             a->layers / 2, a->layers / 2, (long long)s);
    mp_note(t, buf);
    return 0;
}

static int mp_build_gpt3(mp_table *t, const mp_opts *o) {
    const mp_arch *a = &mp_gpt3;
    char buf[MP_NOTE_LEN], m[48], e[48];
    int64_t mha = mp_count(MHE_ATTN_MHA, a->d_m, a->heads, a->d_h, o->g, 0, a->layers);
    int64_t mhe = mp_count(MHE_ATTN_MHE_MUL, a->d_m, a->heads, a->d_h, o->g, 0, a->layers);
    snprintf(t->title, sizeof t->title,
             "GPT-3 projection (section 5.4): %d decoder layers, %d heads of %d, d_m %d; Q/K/V and head embeddings only "
             "(W^O and biases excluded)", a->layers, a->heads, a->d_h, a->d_m);
    mp_build_kinds(t, o, "gpt3", "GPT-3", a, a->layers, 0, 1e9, "B");
    mp_int(m, sizeof m, mha, t->csv);
    mp_int(e, sizeof e, mhe, t->csv);
    snprintf(buf, sizeof buf, "MHE needs %s parameters where MHA needs %s: %.2f%% fewer.", e, m,
             100.0 * (double)(mha - mhe) / (double)mha);
    mp_note(t, buf);
    return 0;
}

/* ---- Collaborative attention (Cordonnier et al. 2020), Table 1 and sec. 3.4 ------------ */

/* concatenated heads (mha, D_k = n d_h) against collaborative ones of shared
   width D~, one layer with W^V and W^O, no biases; multiply-adds at T tokens
   as Table 1 counts them: projections T D_in per output, the mixing T N_h D~,
   the scores T^2 N_h D~ (concatenated: T^2 D_k) and A V T^2 D_k */
static const struct { const char *setting; int d_in, heads, dk, dt; } mp_collab_rows[] = {
    { "FairSeq transformer-base (sec. 4.1)", 512, 8, 512, 0 }, { "", 512, 8, 512, 128 },
    { "BERT-base (sec. 4.2)", 768, 12, 768, 0 }, { "", 768, 12, 768, 384 }, { "", 768, 12, 768, 256 }, { "", 768, 12, 768, 192 },
};

static double mp_collab_macs(int d_in, int heads, int dk, int dt, double T) {
    if (!dt) return 4 * T * d_in * dk + 2 * T * T * dk;
    return 2 * T * d_in * dt + T * heads * dt + 2 * T * d_in * dk + T * T * heads * dt + T * T * dk;
}

static int mp_build_collab(mp_table *t, const mp_opts *o) {
    const double T = 128;
    int i;
    (void)o;
    snprintf(t->title, sizeof t->title,
             "Collaborative attention (Cordonnier et al. 2020, Table 1): one layer, concatenated (D_k = n d_h) against "
             "collaborative heads of shared width D~, W^V and W^O included, no biases");
    mp_col(t, "setting", "setting", 0);
    mp_col(t, "heads", "heads", 0);
    mp_col(t, "D_in", "d_in", 1);
    mp_col(t, "N_h", "n_heads", 1);
    mp_col(t, "D_k or D~", "dim", 1);
    mp_col(t, "W_Q, W_K (+ M)", "qk_params", 1);
    mp_col(t, "content bias", "content_bias", 1);
    mp_col(t, "#params", "params", 1);
    mp_col(t, "#params w/o content bias (M)", "params_paper_m", 1);
    mp_col(t, "MACs at T=128 (x1e8)", "macs_1e8", 1);
    for (i = 0; i < (int)(sizeof mp_collab_rows / sizeof mp_collab_rows[0]); i++) {
        mhe_config c = mhe_config_default();
        int dt = mp_collab_rows[i].dt, kind = dt ? MHE_ATTN_COLLAB : MHE_ATTN_MHA;
        int64_t all, cb = dt ? (int64_t)mp_collab_rows[i].heads * mp_collab_rows[i].d_in : 0, v2 = 2 * (int64_t)mp_collab_rows[i].d_in * mp_collab_rows[i].dk;
        char s[48];
        c.d_model = mp_collab_rows[i].d_in;
        c.n_heads = mp_collab_rows[i].heads;
        c.d_head = mp_collab_rows[i].dk / mp_collab_rows[i].heads;
        c.collab_dim = dt;
        all = mhe_attn_param_count(&c, kind, 1, 0);
        mp_set(t, i, 0, mp_collab_rows[i].setting);
        mp_set(t, i, 1, dt ? "collaborative" : "concatenated");
        mp_set_int(t, i, 2, mp_collab_rows[i].d_in);
        mp_set_int(t, i, 3, mp_collab_rows[i].heads);
        mp_set_int(t, i, 4, dt ? dt : mp_collab_rows[i].dk);
        mp_set_int(t, i, 5, all - cb - v2);   /* (2 D_in + N_h) D~, or 2 D_in D_k */
        mp_set_int(t, i, 6, cb);
        mp_set_int(t, i, 7, all);
        mp_short(s, sizeof s, all - cb, 1e6, "");
        mp_set(t, i, 8, s);
        snprintf(mp_cell(t, i, 9), MP_CELL, "%.2f", mp_collab_macs(mp_collab_rows[i].d_in, mp_collab_rows[i].heads,
                                                                 mp_collab_rows[i].dk, dt, T) / 1e8);
    }
    mp_note(t, "W_Q, W_K (+ M) is (2 D_in + N_h) D~ for collaborative heads and 2 D_in D_k for concatenated ones (sec. 3.4); "
               "the content-bias rows v_i (eq. 12, N_h D_in) are parameters of mhe's collab layer that the paper's Table 1 "
               "does not count, hence the column without them.");
    mp_note(t, "MACs: T D_in per projection output, T N_h D~ for the mixing, T^2 N_h D~ (concatenated T^2 D_k) for the "
               "scores and T^2 D_k for A V. D~ = D_k/2, D_k/3 and D_k/4 are the reparametrisation settings of sec. 4.2.");
    return 0;
}

/* ---- Tables 14 and 15: MHA against MHE-MUL across model sizes -------------------- */

static void mp_size_row(mp_table *t, int r, int c, int64_t v, int csv) {
    char s[48];
    mp_set_int(t, r, c, v);
    mp_short(s, sizeof s, v, 1e6, csv ? "" : "M");
    mp_set(t, r, c + 1, s);
}

static int mp_build_table14(mp_table *t, const mp_opts *o) {
    int i, n = (int)(sizeof mp_sizes / sizeof mp_sizes[0]);
    char buf[MP_NOTE_LEN];
    snprintf(t->title, sizeof t->title,
             "Table 14: attention parameters of MHA and MHE-MUL across model sizes (one self-attention per layer; W^O "
             "included, no biases)");
    mp_col(t, "architecture", "architecture", 0);
    mp_col(t, "size", "size", 0);
    mp_col(t, "layers", "layers", 1);
    mp_col(t, "d_m", "d_m", 1);
    mp_col(t, "h", "h", 1);
    mp_col(t, "d_h", "d_h", 1);
    mp_col(t, "MHA", "mha", 1);
    mp_col(t, "MHA (M)", "mha_M", 1);
    mp_col(t, "MHE-MUL", "mhe_mul", 1);
    mp_col(t, "MHE-MUL (M)", "mhe_mul_M", 1);
    mp_col(t, "note", "note", 0);
    for (i = 0; i < n; i++) {
        const mp_arch *a = &mp_sizes[i];
        int64_t mha = mp_count(MHE_ATTN_MHA, a->d_m, a->heads, a->d_h, o->g, 1, a->layers);
        int64_t mhe = mp_count(MHE_ATTN_MHE_MUL, a->d_m, a->heads, a->d_h, o->g, 1, a->layers);
        const char *printed = mp_printed("14", a->name, MHE_ATTN_MHA);
        char s[48], exact[48];
        mp_set(t, i, 0, a->group);
        mp_set(t, i, 1, a->name);
        mp_set_int(t, i, 2, a->layers);
        mp_set_int(t, i, 3, a->d_m);
        mp_set_int(t, i, 4, a->heads);
        mp_set_int(t, i, 5, a->d_h);
        mp_size_row(t, i, 6, mha, t->csv);
        mp_size_row(t, i, 8, mhe, t->csv);
        mp_short(s, sizeof s, mha, 1e6, "");
        if (printed && strcmp(printed, s) != 0) {
            mp_int(exact, sizeof exact, mha, t->csv);
            snprintf(mp_cell(t, i, 10), MP_CELL, "erratum: the paper prints %s; %s rounds to %s", printed, exact, s);
        }
    }
    snprintf(buf, sizeof buf, "LARGE and MEDIUM are the standard BERT-large and GPT-2 medium shapes (%d layers, d_m %d, "
             "%d heads of %d); the paper names the sizes only.", mp_sizes[1].layers, mp_sizes[1].d_m, mp_sizes[1].heads,
             mp_sizes[1].d_h);
    mp_note(t, buf);
    return 0;
}

static int mp_build_table15(mp_table *t, const mp_opts *o) {
    int i, n = (int)(sizeof mp_wmt / sizeof mp_wmt[0]), lo = 0, hi = 0, matched = 0;
    int64_t mha[16];
    const char *printed = mp_printed("15-text", "MHA low end", MHE_ATTN_MHA);
    char buf[MP_NOTE_LEN], s[48];
    snprintf(t->title, sizeof t->title,
             "Table 15: attention parameters of the WMT-14 encoder-decoders (N/2 encoder layers with self-attention, "
             "N/2 decoder layers with self- and cross-attention; W^O included, no biases)");
    mp_col(t, "model", "model", 0);
    mp_col(t, "N", "N", 1);
    mp_col(t, "d_m", "d_m", 1);
    mp_col(t, "h", "h", 1);
    mp_col(t, "d_h", "d_h", 1);
    mp_col(t, "sublayers", "attention_sublayers", 1);
    mp_col(t, "MHA", "mha", 1);
    mp_col(t, "MHA (M)", "mha_M", 1);
    mp_col(t, "MHE-MUL", "mhe_mul", 1);
    mp_col(t, "MHE-MUL (M)", "mhe_mul_M", 1);
    mp_col(t, "MHE-MUL / MHA", "mhe_mul_over_mha", 1);
    for (i = 0; i < n; i++) {
        const mp_arch *a = &mp_wmt[i];
        int64_t s_ = mp_wmt_sublayers(a);
        int64_t mhe = mp_count(MHE_ATTN_MHE_MUL, a->d_m, a->heads, a->d_h, o->g, 1, s_);
        mha[i] = mp_count(MHE_ATTN_MHA, a->d_m, a->heads, a->d_h, o->g, 1, s_);
        mp_set(t, i, 0, a->name);
        mp_set_int(t, i, 1, a->layers);
        mp_set_int(t, i, 2, a->d_m);
        mp_set_int(t, i, 3, a->heads);
        mp_set_int(t, i, 4, a->d_h);
        mp_set_int(t, i, 5, s_);
        mp_size_row(t, i, 6, mha[i], t->csv);
        mp_size_row(t, i, 8, mhe, t->csv);
        snprintf(mp_cell(t, i, 10), MP_CELL, "%.3f", (double)mhe / (double)mha[i]);
        if (mha[i] < mha[lo]) lo = i;
        if (mha[i] > mha[hi]) hi = i;
        mp_short(s, sizeof s, mha[i], 1e6, "M");
        if (printed && strcmp(printed, s) == 0) matched = 1;
    }
    snprintf(buf, sizeof buf, "Attention sublayers = N/2 + 2 * N/2 (e.g. %lld for N = %d).",
             (long long)mp_wmt_sublayers(&mp_wmt[0]), mp_wmt[0].layers);
    mp_note(t, buf);
    mp_note(t, "The paper leaves the model name blank on the two BASE rows that change the head shape; they are "
               "labelled by h here.");
    if (printed && !matched) {
        char l[48], h[48], b[48];
        mp_short(l, sizeof l, mha[lo], 1e6, "M");
        mp_short(h, sizeof h, mha[hi], 1e6, "M");
        mp_short(b, sizeof b, mha[0], 1e6, "M");
        snprintf(buf, sizeof buf,
                 "erratum: Appendix D's text gives %s as the low end of the MHA counts in this table; no row counts "
                 "that: they range from %s (%s) to %s (%s), and BASE is %s.", printed, l, mp_wmt[lo].name, h,
                 mp_wmt[hi].name, b);
        mp_note(t, buf);
    }
    return 0;
}

/* ---- Table 13: the memory model of Appendix C -------------------------------------- */

/* per attention block of BERT-base (W^O included), fp16 mixed precision:
   weights and gradients #params * (2 + 4) bytes, Adam states #params * (4 + 4),
   activations batch * sequence length * hidden * 2 */
enum { MP_FP16_BYTES = 2, MP_FP32_BYTES = 4, MP_MEM_BATCH = 32, MP_MEM_SEQ = 512 };

static int mp_build_table13(mp_table *t, const mp_opts *o) {
    const mp_arch *a = &mp_bert_base;
    int kinds[MP_COLS], nk = mp_kind_list(kinds), i;
    int64_t act = (int64_t)MP_MEM_BATCH * MP_MEM_SEQ * a->d_m * MP_FP16_BYTES, total_mha = 0;
    double saving[MP_COLS], mhe_saving = 0;
    char buf[MP_NOTE_LEN], part[64];
    snprintf(t->title, sizeof t->title,
             "Table 13: memory (bytes) per attention block of BERT-base and saving against MHA (batch %d, sequence "
             "length %d, hidden %d, fp16 mixed precision with Adam)", MP_MEM_BATCH, MP_MEM_SEQ, a->d_m);
    mp_col(t, "attention", "kind", 0);
    mp_col(t, "#params", "params", 1);
    mp_col(t, "weights", "weights_bytes", 1);
    mp_col(t, "gradients", "gradients_bytes", 1);
    mp_col(t, "Adam states", "adam_states_bytes", 1);
    mp_col(t, "activations", "activations_bytes", 1);
    mp_col(t, "total", "total_bytes", 1);
    mp_col(t, "saving ratio (%)", "saving_ratio_pct", 1);
    {
        int64_t p = mp_count(MHE_ATTN_MHA, a->d_m, a->heads, a->d_h, o->g, 1, 1);
        total_mha = p * (MP_FP16_BYTES + MP_FP32_BYTES) * 2 + p * (MP_FP32_BYTES + MP_FP32_BYTES) + act;
    }
    for (i = 0; i < nk; i++) {
        int64_t p = mp_count(kinds[i], a->d_m, a->heads, a->d_h, o->g, 1, 1);
        int64_t w = p * (MP_FP16_BYTES + MP_FP32_BYTES), g = w, adam = p * (MP_FP32_BYTES + MP_FP32_BYTES);
        int64_t total = w + g + adam + act;
        char label[32];
        mp_kind_label(t, label, sizeof label, kinds[i]);
        mp_set(t, i, 0, label);
        saving[i] = -1;
        if (p < 0) { int c; for (c = 1; c < 8; c++) mp_set(t, i, c, t->csv ? "" : "-"); continue; }
        mp_set_int(t, i, 1, p);
        mp_set_int(t, i, 2, w);
        mp_set_int(t, i, 3, g);
        mp_set_int(t, i, 4, adam);
        mp_set_int(t, i, 5, act);
        mp_set_int(t, i, 6, total);
        saving[i] = 100.0 * (double)(total_mha - total) / (double)total_mha;
        snprintf(mp_cell(t, i, 7), MP_CELL, "%.2f", saving[i]);
        if (kinds[i] == MHE_ATTN_MHE_MUL) mhe_saving = saving[i];
    }
    snprintf(buf, sizeof buf, "weights = #params * (%d + %d) bytes; gradients = #params * "
             "(%d + %d); Adam states = #params * (%d + %d); activations = batch * sequence length * hidden * %d; saving "
             "ratio = 1 - total / total of MHA.", MP_FP16_BYTES, MP_FP32_BYTES, MP_FP16_BYTES, MP_FP32_BYTES,
             MP_FP32_BYTES, MP_FP32_BYTES, MP_FP16_BYTES);
    mp_note(t, buf);
    snprintf(buf, sizeof buf, "MHE-MUL's saving ratio against the others':");
    for (i = 0; i < nk; i++) {
        char label[32];
        if (saving[i] <= 0 || kinds[i] == MHE_ATTN_MHE_MUL || kinds[i] == MHE_ATTN_MHE_ADD || kinds[i] == MHE_ATTN_SHA) continue;
        mp_upper(label, sizeof label, mhe_attn_kind_name(kinds[i]));   /* prose: the paper's names */
        snprintf(part, sizeof part, " %.2fx %s,", mhe_saving / saving[i], label);
        if (strlen(buf) + strlen(part) < sizeof buf) strcat(buf, part);
    }
    buf[strlen(buf) - 1] = '.';
    mp_note(t, buf);
    return 0;
}

/* ---- Figures 3 and 4 -------------------------------------------------------------------- */

/* Figure 3: one attention sublayer (Q/K/V and head embeddings) as n grows, d fixed */
static const int mp_fig3_heads[] = { 1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128 };
#define MP_FIG3_N ((int)(sizeof mp_fig3_heads / sizeof mp_fig3_heads[0]))
/* Figure 4: all attention sublayers of 12, 24 and 48 layers with 32 and 64 heads */
static const int mp_fig4_heads[] = { 32, 64 };
static const int mp_fig4_layers[] = { 12, 24, 48 };

static int mp_build_fig3(mp_table *t, const mp_opts *o) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), i, k, last = MP_FIG3_N - 1;
    int64_t mha_last;
    char buf[MP_NOTE_LEN], part[80], label[32], v[48];
    snprintf(t->title, sizeof t->title,
             "Figure 3: parameters of one attention sublayer as the number of heads n grows (d = %d per head, d_m = nd; "
             "W^O and biases excluded)", o->d);
    mp_col(t, "n", "n", 1);
    for (k = 0; k < nk; k++) {
        char head[48];
        mp_kind_label(t, head, sizeof head, kinds[k]);
        mp_col(t, head, mhe_attn_kind_name(kinds[k]), 1);
    }
    for (i = 0; i < MP_FIG3_N; i++) {
        mp_set_int(t, i, 0, mp_fig3_heads[i]);
        for (k = 0; k < nk; k++) mp_set_count(t, i, k + 1, mp_one(kinds[k], mp_fig3_heads[i], o->d, o->g));
    }
    mha_last = mp_one(MHE_ATTN_MHA, mp_fig3_heads[last], o->d, o->g);
    mp_int(v, sizeof v, mha_last, t->csv);
    snprintf(buf, sizeof buf, "At n = %d, MHA needs %s; as a fraction of it:", mp_fig3_heads[last], v);
    for (k = 0; k < nk; k++) {
        int64_t x = mp_one(kinds[k], mp_fig3_heads[last], o->d, o->g);
        if (kinds[k] == MHE_ATTN_MHA || x < 0) continue;
        mp_upper(label, sizeof label, mhe_attn_kind_name(kinds[k]));
        snprintf(part, sizeof part, " %s %.4f,", label, (double)x / (double)mha_last);
        if (strlen(buf) + strlen(part) < sizeof buf) strcat(buf, part);
    }
    buf[strlen(buf) - 1] = '.';
    mp_note(t, buf);
    snprintf(buf, sizeof buf, "GQA uses g = %d K/V groups and is shown only where g divides n.", o->g);
    mp_note(t, buf);
    return 0;
}

static int mp_build_fig4(mp_table *t, const mp_opts *o) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), h, l, k, r = 0;
    char buf[MP_NOTE_LEN], a[48], b[48];
    snprintf(t->title, sizeof t->title,
             "Figure 4: parameters of all attention sublayers of 12, 24 and 48 layers with 32 and 64 heads (d = %d per "
             "head, d_m = nd; W^O and biases excluded)", o->d);
    mp_col(t, "heads", "heads", 1);
    mp_col(t, "layers", "layers", 1);
    for (k = 0; k < nk; k++) {
        char head[48];
        mp_kind_label(t, head, sizeof head, kinds[k]);
        mp_col(t, head, mhe_attn_kind_name(kinds[k]), 1);
    }
    for (h = 0; h < 2; h++)
        for (l = 0; l < 3; l++, r++) {
            int n = mp_fig4_heads[h];
            mp_set_int(t, r, 0, n);
            mp_set_int(t, r, 1, mp_fig4_layers[l]);
            for (k = 0; k < nk; k++)
                mp_set_count(t, r, k + 2, mp_count(kinds[k], n * o->d, n, o->d, o->g, 0, mp_fig4_layers[l]));
        }
    mp_int(a, sizeof a, mp_count(MHE_ATTN_MHA, 32 * o->d, 32, o->d, o->g, 0, 48), t->csv);
    mp_int(b, sizeof b, mp_count(MHE_ATTN_MHA, 64 * o->d, 64, o->d, o->g, 0, 12), t->csv);
    snprintf(buf, sizeof buf, "MHA with 48 layers of 32 heads needs %s, with 12 layers of 64 heads %s: doubling the "
             "heads costs as much as quadrupling the layers.", a, b);
    mp_note(t, buf);
    return 0;
}

/* ---- HashFormers Table 2.2: embedding parameters (thesis chapter 2) -------------- */

/* The settings of thesis sec. 2.4.2 and the constants each printed figure
   needs; docs/hashing.md (Parameter counts) explains every one. */
enum {
    MP_H_D = 768, MP_H_T = 128, MP_H_K = 10,   /* BERT-base width, 128-bit hashes, Pool's k */
    MP_H_VOCAB = 50265,                        /* BERT-MLM |V|: RoBERTa's BPE vocabulary */
    MP_H_N50K = 50260,                         /* Emb (50K): the authors' ids are v mod 50260 + 5 */
    MP_H_SPECIALS = 5,                         /* <s> <pad> </s> <unk> <mask>, not counted (sec. 2.8) */
    MP_H_SPECIAL_ROWS = 6,                     /* Pool/Add/Proj's special table: 5 specials + "regular token" */
    MP_H_CANINE = 16000,                       /* CANINE-C hash buckets (eq. 2.10) */
    MP_H_PROFORMER = 420,                      /* ProFormer LSH digest bits (eq. 2.11) */
    /* the encoder of sec. 2.8: RoBERTa-base with a binary classification head */
    MP_H_LAYERS = 12, MP_H_HEADS = 12, MP_H_FF = 3072, MP_H_POS = 514, MP_H_TYPES = 1, MP_H_CLASSES = 2
};

/* Table 2.2's printed figures that no consistent count gives (column 4 PCR Emb,
   8 PoEP); shown beside the exact value only, never used */
static const struct { const char *row; int col; const char *printed; } mp_h_printed[] = {
    { "CANINE-C", 4, "68.1" }, { "HashFormers Emb (1K)", 8, "1.0" }, { "HashFormers Pool", 8, "1.0" }
};

/* everything but the token embeddings: positions, token types, embedding
   LayerNorm, 12 layers (MHA with W^O and biases, two LayerNorms, FFN with
   biases) and the head (dense d x d + out_proj d x classes, with biases) */
static int64_t mp_h_body(void) {
    mhe_config c = mhe_config_default();
    int64_t d = MP_H_D, attn, layer;
    c.d_model = MP_H_D;
    c.n_heads = MP_H_HEADS;
    c.d_head = MP_H_D / MP_H_HEADS;
    attn = mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 1);
    if (attn < 0) return -1;
    layer = attn + 2 * (2 * d) + (d * MP_H_FF + MP_H_FF) + (MP_H_FF * d + d);
    return (int64_t)(MP_H_POS + MP_H_TYPES) * d + 2 * d + MP_H_LAYERS * layer + (d * d + d) + (d * MP_H_CLASSES + MP_H_CLASSES);
}

/* 797.2K, 38.6M: the paper's one-decimal K/M form */
static void mp_h_short(char *dst, size_t cap, int64_t v) {
    if (v >= 1000000) snprintf(dst, cap, "%.1fM", (double)v / 1e6);
    else snprintf(dst, cap, "%.1fK", (double)v / 1e3);
}

static int mp_build_hash(mp_table *t, const mp_opts *o) {
    struct { const char *name; char formula[80]; int64_t emb, module; } r[8];
    const int64_t d = MP_H_D;
    int64_t body = mp_h_body(), base_emb, base_total;
    int chunks = mhe_hash_pool_chunks(MP_H_T, MP_H_K), tok = MHE_HASH_COUNT_TOKEN_ROW, i, n = 0, bad = 0;
    int64_t n1k = mhe_hash_param_count(MHE_HASH_POOL, 1, MP_H_T, MP_H_K, 0, tok);   /* Pool's count in rows */
    static const char *const colname[9] = { "", "", "", "", "PCR Emb", "", "", "", "PoEP" };
    char buf[MP_NOTE_LEN], a[48], b[48], c[48];
    (void)o;
    memset(r, 0, sizeof r);
    snprintf(t->title, sizeof t->title,
             "Table 2.2 (HashFormers): embedding parameters, PCR and PoEP against BERT-MLM (d = %d, T = %d, k = %d)",
             MP_H_D, MP_H_T, MP_H_K);
    mp_col(t, "model", "model", 0);
    mp_col(t, "#Emb formula", "emb_formula", 0);
    mp_col(t, "#Emb params", "emb_params", 1);
    mp_col(t, "#Emb", "emb_short", 1);
    mp_col(t, "PCR Emb (%)", "pcr_emb_pct", 1);
    mp_col(t, "#Total params", "total_params", 1);
    mp_col(t, "#Total", "total_short", 1);
    mp_col(t, "PCR All (%)", "pcr_all_pct", 1);
    mp_col(t, "PoEP (%)", "poep_pct", 1);
    mp_col(t, "note", "note", 0);
#define MP_H_ROW(nm, em, mo, ...) (r[n].name = (nm), r[n].emb = (em), r[n].module = (mo), \
                                   snprintf(r[n].formula, sizeof r[n].formula, __VA_ARGS__), n++)
    MP_H_ROW("BERT-MLM", mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_VOCAB, 0),
             mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_VOCAB, 0), "V x d, V = %d (eq. 2.9)", MP_H_VOCAB);
    MP_H_ROW("CANINE-C", mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_CANINE, 0), -1,
             "buckets x d, %d buckets (eq. 2.10)", MP_H_CANINE);
    MP_H_ROW("ProFormer", mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_PROFORMER, 0), -1,
             "digest bits x d, %d bits (eq. 2.11)", MP_H_PROFORMER);
    MP_H_ROW("HashFormers Emb (50K)", mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_N50K, 0),
             mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, MP_H_N50K + MP_H_SPECIALS, 0), "N x d, N = %d (eq. 2.12)", MP_H_N50K);
    MP_H_ROW("HashFormers Emb (1K)", mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, n1k, 0),
             mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, n1k + MP_H_SPECIALS, 0), "N x d, N = %lld (eq. 2.12)", (long long)n1k);
    MP_H_ROW("HashFormers Pool", mhe_hash_param_count(MHE_HASH_POOL, d, MP_H_T, MP_H_K, 0, tok),
             mhe_hash_param_count(MHE_HASH_POOL, d, MP_H_T, MP_H_K, 0, MHE_HASH_COUNT_PAD_ROW) + MP_H_SPECIAL_ROWS * d,
             "(ceil(T/k) + 2^k + 1) x d (eq. 2.13 + 1)");
    MP_H_ROW("HashFormers Add", mhe_hash_param_count(MHE_HASH_ADD, d, MP_H_T, 0, 0, tok),
             mhe_hash_param_count(MHE_HASH_ADD, d, MP_H_T, 0, 0, 0) + MP_H_SPECIAL_ROWS * d, "(2T + 1) x d (eq. 2.14 + 1)");
    MP_H_ROW("HashFormers Proj", mhe_hash_param_count(MHE_HASH_PROJ, d, MP_H_T, 0, 0, tok),
             mhe_hash_param_count(MHE_HASH_PROJ, d, MP_H_T, 0, 0, 0) + MP_H_SPECIAL_ROWS * d, "(T + 1) x d (eq. 2.15 + 1)");
#undef MP_H_ROW
    base_emb = r[0].emb;
    base_total = body + r[0].module;
    for (i = 0; i < n; i++) {
        int64_t total = r[i].module >= 0 && body >= 0 ? body + r[i].module : -1;
        double exact[9];
        size_t k;
        if (r[i].emb < 0 || body < 0) bad = 1;
        mp_set(t, i, 0, r[i].name);
        mp_set(t, i, 1, r[i].formula);
        mp_set_int(t, i, 2, r[i].emb);
        mp_h_short(a, sizeof a, r[i].emb);
        mp_set(t, i, 3, a);
        exact[4] = 100.0 * mhe_pcr((double)r[i].emb, (double)base_emb);
        mp_pct1(mp_cell(t, i, 4), exact[4]);
        if (total < 0) {
            int col;
            for (col = 5; col < 9; col++) mp_set(t, i, col, t->csv ? "" : "-");
            mp_set(t, i, 9, "total not modelled (another architecture)");
        } else {
            mp_set_int(t, i, 5, total);
            mp_h_short(a, sizeof a, total);
            mp_set(t, i, 6, a);
            mp_pct1(mp_cell(t, i, 7), 100.0 * mhe_pcr((double)total, (double)base_total));
            exact[8] = 100.0 * mhe_poep((double)r[i].emb, (double)total);
            mp_pct1(mp_cell(t, i, 8), exact[8]);
        }
        for (k = 0; k < sizeof mp_h_printed / sizeof mp_h_printed[0]; k++) {
            int col = mp_h_printed[k].col;
            if (strcmp(mp_h_printed[k].row, r[i].name) != 0 || strcmp(mp_h_printed[k].printed, t->cell[i][col]) == 0) continue;
            {   /* appended to the row's note */
                char *note = mp_cell(t, i, 9);
                size_t len = strlen(note);
                snprintf(note + len, MP_CELL - len, "%serratum: the paper prints %s %s; exactly %.3f", len ? "; " : "",
                         colname[col], mp_h_printed[k].printed, exact[col]);
            }
        }
    }
    mp_note(t, "HashFormers rows hold for both hashes (MD5 and LSH): the count does not depend on the hash.");
    mp_int(a, sizeof a, mhe_hash_param_count(MHE_HASH_POOL, d, MP_H_T, MP_H_K, 0, 0), t->csv);
    mp_int(b, sizeof b, mhe_hash_param_count(MHE_HASH_ADD, d, MP_H_T, 0, 0, 0), t->csv);
    mp_int(c, sizeof c, mhe_hash_param_count(MHE_HASH_PROJ, d, MP_H_T, 0, 0, 0), t->csv);
    snprintf(buf, sizeof buf,
             "Pool, Add and Proj count eq. 2.13-2.15 plus one d-vector: the embedding every hashed token adds (row 5, "
             "\"regular token\", of the authors' special-token table). Eq. 2.13-2.15 alone give %s, %s and %s; the printed "
             "figures need the extra row. Pool's reserved codebook row 0 (padding) is not counted (sec. 2.8 excludes "
             "<PAD>); ceil(T/k) = %d.", a, b, c, chunks);
    mp_note(t, buf);
    mp_h_short(a, sizeof a, mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, 50000, 0));
    snprintf(buf, sizeof buf,
             "V = %d is RoBERTa's BPE vocabulary (the text says 50,000 BPE tokens, which would give %s, not 38.6M). "
             "Emb (50K) has N = %d buckets (the authors' code: id = v mod %d + %d; the %d special rows are not counted).",
             MP_H_VOCAB, a, MP_H_N50K, MP_H_N50K, MP_H_SPECIALS, MP_H_SPECIALS);
    mp_note(t, buf);
    mp_h_short(a, sizeof a, mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, 1000, 0));
    mp_h_short(b, sizeof b, mhe_hash_param_count(MHE_HASH_EMB, d, 0, 0, 1024, 0));
    snprintf(buf, sizeof buf,
             "Emb (1K): the thesis says only \"1K\"; the printed 797.2K is Pool's count, N = %lld rows (N = 1000 gives %s, "
             "1024 gives %s), so the 1K table was matched to Pool.", (long long)n1k, a, b);
    mp_note(t, buf);
    mp_int(a, sizeof a, body, t->csv);
    snprintf(buf, sizeof buf,
             "Totals (sec. 2.8, a binary classification task): %s parameters besides the token embeddings (RoBERTa-base: "
             "%d positions, %d token type, %d layers of MHA with W^O and biases, FFN %d, LayerNorms; head d x d + d x %d, with "
             "biases), plus every tensor of the embedding module: Emb's N + %d rows, Pool's %d-row codebook and its "
             "%d x d weights, the %d-row special table of Pool, Add and Proj.", a, MP_H_POS, MP_H_TYPES, MP_H_LAYERS,
             MP_H_FF, MP_H_CLASSES, MP_H_SPECIALS, (1 << MP_H_K) + 1, chunks, MP_H_SPECIAL_ROWS);
    mp_note(t, buf);
    {   /* the errata, explained with the counts rounded as the paper prints them */
        double can = floor((double)r[1].emb / 1e5 + 0.5) / 10, bert = floor((double)r[0].emb / 1e5 + 0.5) / 10;
        double pe = floor((double)r[5].emb / 1e2 + 0.5) / 10, pt = floor((double)(body + r[5].module) / 1e5 + 0.5) / 10;
        snprintf(buf, sizeof buf,
                 "Errata: CANINE-C's printed PCR Emb %s is 1 - %.1fM / %.1fM from the rounded counts (%.2f%%); the exact "
                 "counts give %.2f%%. PoEP of Emb (1K) and Pool is %.2f%% exactly and %.2f%% from the rounded counts "
                 "(%.1fK / %.1fM); the printed %s is reached by neither.", mp_h_printed[0].printed, can, bert,
                 100.0 * (1.0 - can / bert), 100.0 * mhe_pcr((double)r[1].emb, (double)base_emb),
                 100.0 * mhe_poep((double)r[5].emb, (double)(body + r[5].module)), 100.0 * pe / 1e3 / pt, pe, pt,
                 mp_h_printed[2].printed);
        mp_note(t, buf);
    }
    mp_note(t, "PCR = 1 - params / BERT-MLM's (eq. 2.5 over all parameters, eq. 2.6 over embedding parameters); "
               "PoEP = #Emb / #Total (eq. 2.7).");
    if (bad) mp_note(t, "ERROR: a count could not be computed.");
    return bad;
}

/* ---- thesis Tables 4.5-4.8: time, FLOPs, activation memory and cache of the ch. 4 variants ---- */

/* the rows in the thesis's order, and its names for them */
static const int mp_cx_kinds[7] = { MHE_ATTN_MHA, MHE_ATTN_MLP, MHE_ATTN_TAYLOR, MHE_ATTN_NONAPPROX, MHE_ATTN_RNDEMB_QK,
                                    MHE_ATTN_FIXEDSEQ_QK, MHE_ATTN_STATICEMB_QK };
static const char *const mp_cx_names[7] = { "Standard", "MLP", "Approx.", "Non-apx.", "RndEmbQK", "FixedSeqQK", "StaticEmbQK" };

static void mp_cx_value(mp_table *t, int row, int col, double v) {
    if (t->csv || v < 1e15) mp_set_int(t, row, col, (int64_t)llround(v));
    else snprintf(mp_cell(t, row, col), MP_CELL, "%.4g", v);
}

/* which: 0 = Table 4.5, 1 = 4.6, 2 = 4.7, 3 = 4.8 */
static int mp_build_cx(mp_table *t, const mp_opts *o, int which) {
    static const int whats[4][2] = { { MHE_COST_TIME, -1 }, { MHE_COST_PREFILL, MHE_COST_DECODE }, { MHE_COST_ACT, -1 }, { MHE_COST_CACHE, -1 } };
    static const char *const title[4] = { "Table 4.5: time complexity of one attention layer (forward, no cache)",
                                          "Table 4.6: FLOPs of one attention layer with the cache (GEMMs only)",
                                          "Table 4.7: activation memory of one attention layer (bytes, half precision)",
                                          "Table 4.8: cache size per layer for inference (bytes, half precision)" };
    static const char *const head[4][2] = { { "O(.)", "" }, { "prefill", "decode" }, { "activation memory", "" }, { "cache", "" } };
    int r, k, nc = whats[which][1] < 0 ? 1 : 2;
    char buf[96], hb[40], key[48];
    snprintf(t->title, sizeof t->title, "%s at B=%.0f, L=%.0f, d=%.0f, h=%.0f%s", title[which], o->cB, o->cL, o->cd, o->ch,
             which == 2 ? (o->ct != 1 ? "" : ", t=1") : "");
    if (which == 2 && o->ct != 1) snprintf(t->title + strlen(t->title), sizeof t->title - strlen(t->title), ", t=%.0f", o->ct);
    mp_col(t, "attention", "attention", 0);
    mp_col(t, "mhe kind", "kind", 0);
    for (k = 0; k < nc; k++) {
        snprintf(hb, sizeof hb, "%s formula", head[which][k]);
        snprintf(key, sizeof key, "%s_formula", which == 1 ? head[which][k] : which == 0 ? "complexity" : which == 2 ? "activation" : "cache");
        mp_col(t, hb, key, 0);
        snprintf(key + strlen(key) - 7, 8, "%s", "value");
        mp_col(t, head[which][k], key, 1);
    }
    if (which == 3) mp_col(t, "mhe float32 bytes", "mhe_bytes", 1);
    for (r = 0; r < 7; r++) {
        int kind = mp_cx_kinds[r];
        mp_set(t, r, 0, mp_cx_names[r]);
        mp_set(t, r, 1, mhe_attn_kind_name(kind));
        for (k = 0; k < nc; k++) {
            mhe_attn_cost_formula(whats[which][k], kind, buf, sizeof buf);
            mp_set(t, r, 2 + 2 * k, buf);
            mp_cx_value(t, r, 3 + 2 * k, mhe_attn_cost(whats[which][k], kind, o->cB, o->cL, o->cd, o->ch, o->ct));
        }
        if (which == 3) {   /* what mhe's own layer keeps, from the code that sizes its KV cache */
            mhe_config c = mhe_config_default();
            size_t shared = 0, per;
            c.d_model = (int)o->cd; c.n_heads = (int)o->ch; c.max_seq_len = (int)o->cL;
            per = mhe_attn_cache_bytes(&c, kind, (int)o->cL, &shared);
            mp_cx_value(t, r, 4, o->cB * (double)per + (double)shared);
        }
    }
    if (which == 0) mp_note(t, "Low-order O(BLd) terms (element-wise activations, scaling) are left out, as in the thesis.");
    if (which == 1) mp_note(t, "With the maps of RndEmbQK and FixedSeqQK precomputed (mhe does this when decoding) the thesis gives "
                               "2L^2d + 2BLd^2 (prefill) and 2BLd + 2d^2 (decode).");
    if (which == 2) mp_note(t, "t: the tensor-parallel size (--t); attention dropout not counted.");
    if (which == 3) {
        mp_note(t, "mhe float32 bytes: B sequences of what mhe_kv_cache keeps per layer (mhe_attn_cache_bytes), twice the table's "
                   "half-precision bytes where the layer keeps what the table counts (Standard, Non-apx., StaticEmbQK, MLP).");
        mp_note(t, "Approx.: the table's 6Bd + 4Bd^2/h is the state of eq. 4.14-4.17 read with element-wise squares and three "
                   "separate normalisers; mhe follows Based (one normaliser, phi with the d_h(d_h+1)/2 products q_i q_j), "
                   "whose state is h (1 + d_h + d_h(d_h+1)/2)(d_h + 1) floats per sequence.");
        mp_note(t, "RndEmbQK, FixedSeqQK: the table's 2(B+1)Ld is the V rows of B sequences (2BLd) plus one shared set of keys "
                   "(2Ld); mhe shares precomputed maps instead (h L(L+1)/2 floats), so a decode step reads a map row.");
    }
    return 0;
}
static int mp_build_cx45(mp_table *t, const mp_opts *o) { return mp_build_cx(t, o, 0); }
static int mp_build_cx46(mp_table *t, const mp_opts *o) { return mp_build_cx(t, o, 1); }
static int mp_build_cx47(mp_table *t, const mp_opts *o) { return mp_build_cx(t, o, 2); }
static int mp_build_cx48(mp_table *t, const mp_opts *o) { return mp_build_cx(t, o, 3); }

/* ---- SVG plots ------------------------------------------------------------------------------- */

typedef struct mp_series { int kind; int np; double x[16], y[16]; } mp_series;

static const char *mp_color(int kind) {
    switch (kind) {
    case MHE_ATTN_SHA: return "#7f7f7f";
    case MHE_ATTN_MHA: return "#d62728";
    case MHE_ATTN_EL_ATT: return "#ff7f0e";
    case MHE_ATTN_MQA: return "#2ca02c";
    case MHE_ATTN_GQA: return "#17becf";
    case MHE_ATTN_SKV: return "#9467bd";
    case MHE_ATTN_MHE_ADD: return "#1f77b4";
    case MHE_ATTN_MHE_MUL: return "#0b2e59";
    default: return "#8c564b";
    }
}

/* MHE-ADD and MHE-MUL count the same: MHE-MUL is drawn dashed on top */
static const char *mp_dash(int kind) { return kind == MHE_ATTN_MHE_MUL ? " stroke-dasharray=\"7 5\"" : ""; }
static double mp_width(int kind) { return kind == MHE_ATTN_MHE_ADD ? 4.0 : 2.0; }

static void mp_pow10_label(char *dst, size_t cap, int e) {
    static const char *unit[] = { "", "K", "M", "B", "T" };
    int u = e / 3;
    if (e < 0) { snprintf(dst, cap, "1e%d", e); return; }
    if (u > 4) u = 4;
    snprintf(dst, cap, "%.0f%s", pow(10.0, e - 3 * u), unit[u]);
}

static void mp_svg_text(FILE *f, double x, double y, const char *anchor, const char *extra, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y, anchor, extra);
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else fputc(*s, f);
    }
    fputs("</text>\n", f);
}

/* one panel: log2 x axis through the given ticks, log10 y axis over decades [y0, y1] */
static void mp_svg_panel(FILE *f, double px, double py, double pw, double ph, const char *title, const char *xlabel,
                         const int *xt, int nxt, int y0, int y1, const mp_series *s, int ns) {
    double lx0 = log2((double)xt[0]) - 0.2, lx1 = log2((double)xt[nxt - 1]) + 0.2;
    int i, j, e;
    char lab[32];
#define MP_SX(v) (px + (log2(v) - lx0) / (lx1 - lx0) * pw)
#define MP_SY(v) (py + ph - (log10(v) - y0) / (double)(y1 - y0) * ph)
    mp_svg_text(f, px + pw / 2, py - 12, "middle", " font-size=\"14\" font-weight=\"bold\"", title);
    for (e = y0; e <= y1; e++) {   /* decade grid and labels */
        double y = py + ph - (double)(e - y0) / (double)(y1 - y0) * ph;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", px, y, px + pw, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", px - 5, y, px, y);
        mp_pow10_label(lab, sizeof lab, e);
        mp_svg_text(f, px - 8, y + 4, "end", "", lab);
    }
    for (i = 0; i < nxt; i++) {
        double x = MP_SX(xt[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eeeeee\"/>\n", x, py, x, py + ph);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", x, py + ph, x, py + ph + 5);
        snprintf(lab, sizeof lab, "%d", xt[i]);
        mp_svg_text(f, x, py + ph + 18, "middle", "", lab);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", px, py, pw, ph);
    mp_svg_text(f, px + pw / 2, py + ph + 38, "middle", "", xlabel);
    for (i = 0; i < ns; i++) {
        int drawn = 0;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s points=\"", mp_color(s[i].kind),
                mp_width(s[i].kind), mp_dash(s[i].kind));
        for (j = 0; j < s[i].np; j++)
            if (s[i].y[j] > 0) fprintf(f, "%s%.1f,%.1f", drawn++ ? " " : "", MP_SX(s[i].x[j]), MP_SY(s[i].y[j]));
        fputs("\"/>\n", f);
        for (j = 0; j < s[i].np; j++)
            if (s[i].y[j] > 0)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", MP_SX(s[i].x[j]), MP_SY(s[i].y[j]),
                        mp_color(s[i].kind));
    }
#undef MP_SX
#undef MP_SY
}

static void mp_svg_legend(FILE *f, double x, double y, const mp_series *s, int ns, int g) {
    int i;
    char label[40];
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"130\" height=\"%d\" fill=\"white\" stroke=\"#999999\"/>\n", x, y,
            ns * 20 + 10);
    for (i = 0; i < ns; i++) {
        double ly = y + 18 + 20 * i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"%s/>\n",
                x + 10, ly - 4, x + 40, ly - 4, mp_color(s[i].kind), mp_width(s[i].kind), mp_dash(s[i].kind));
        mp_upper(label, sizeof label, mhe_attn_kind_name(s[i].kind));
        if (s[i].kind == MHE_ATTN_GQA) snprintf(label + strlen(label), sizeof label - strlen(label), " (g=%d)", g);
        mp_svg_text(f, x + 48, ly, "start", "", label);
    }
}

static void mp_svg_yrange(const mp_series *s, int ns, int *y0, int *y1) {
    double lo = 0, hi = 0;
    int i, j;
    for (i = 0; i < ns; i++)
        for (j = 0; j < s[i].np; j++)
            if (s[i].y[j] > 0) {
                if (lo == 0 || s[i].y[j] < lo) lo = s[i].y[j];
                if (s[i].y[j] > hi) hi = s[i].y[j];
            }
    if (lo <= 0) lo = hi = 1;
    *y0 = (int)floor(log10(lo));
    *y1 = (int)ceil(log10(hi));
    if (*y1 <= *y0) *y1 = *y0 + 1;
}

static void mp_svg_begin(FILE *f, int w, int h, const char *title) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n", w, h, w, h);
    fputs("<title>", f);
    for (; *title; title++) fputc(*title == '&' || *title == '<' ? ' ' : *title, f);
    fputs("</title>\n", f);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

static void mp_svg_ylabel(FILE *f, double x, double y, const char *s) {
    char tr[96];
    snprintf(tr, sizeof tr, " transform=\"rotate(-90 %.1f %.1f)\"", x, y);
    mp_svg_text(f, x, y, "middle", tr, s);
}

static void mp_svg_fig3(FILE *f, const mp_opts *o) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), k, i, y0, y1;
    mp_series s[MP_COLS];
    char title[160];
    for (k = 0; k < nk; k++) {
        s[k].kind = kinds[k];
        s[k].np = MP_FIG3_N;
        for (i = 0; i < MP_FIG3_N; i++) {
            s[k].x[i] = mp_fig3_heads[i];
            s[k].y[i] = (double)mp_one(kinds[k], mp_fig3_heads[i], o->d, o->g);
        }
    }
    mp_svg_yrange(s, nk, &y0, &y1);
    snprintf(title, sizeof title, "Parameters per attention sublayer (d = %d per head, W^O excluded)", o->d);
    mp_svg_begin(f, 820, 500, title);
    mp_svg_panel(f, 90, 50, 540, 380, title, "number of attention heads n (log scale)", mp_fig3_heads, MP_FIG3_N, y0,
                 y1, s, nk);
    mp_svg_ylabel(f, 24, 240, "parameters (log scale)");
    mp_svg_legend(f, 660, 60, s, nk, o->g);
    fputs("</svg>\n", f);
}

static void mp_svg_fig4(FILE *f, const mp_opts *o) {
    int kinds[MP_COLS], nk = mp_kind_list(kinds), k, h, l, y0, y1, a0, a1;
    mp_series s[2][MP_COLS];
    char title[160];
    for (h = 0; h < 2; h++)
        for (k = 0; k < nk; k++) {
            int n = mp_fig4_heads[h];
            s[h][k].kind = kinds[k];
            s[h][k].np = 3;
            for (l = 0; l < 3; l++) {
                s[h][k].x[l] = mp_fig4_layers[l];
                s[h][k].y[l] = (double)mp_count(kinds[k], n * o->d, n, o->d, o->g, 0, mp_fig4_layers[l]);
            }
        }
    mp_svg_yrange(s[0], nk, &y0, &y1);     /* one y scale for both panels */
    mp_svg_yrange(s[1], nk, &a0, &a1);
    if (a0 < y0) y0 = a0;
    if (a1 > y1) y1 = a1;
    mp_svg_begin(f, 1000, 500, "Parameters of all attention sublayers");
    for (h = 0; h < 2; h++) {
        snprintf(title, sizeof title, "%d heads of %d (W^O excluded)", mp_fig4_heads[h], o->d);
        mp_svg_panel(f, 90 + h * 390, 50, 340, 380, title, "attention layers (log scale)", mp_fig4_layers, 3, y0, y1,
                     s[h], nk);
    }
    mp_svg_ylabel(f, 24, 240, "parameters in all attention sublayers (log scale)");
    mp_svg_legend(f, 850, 60, s[0], nk, o->g);
    fputs("</svg>\n", f);
}

/* ---- writing files --------------------------------------------------------------------------- */

/* writes DIR/stem.ext under mhe.h's output policy (mhe_out: atomic, checked) */
static int mp_write(const mp_opts *o, const char *stem, const char *ext, const mp_table *t, int fig, int quiet_to_stderr) {
    char path[4096], err[MHE_ERR_LEN];
    mhe_out w;
    if (snprintf(path, sizeof path, "%s/%s.%s", o->out_dir, stem, ext) >= (int)sizeof path) {
        fprintf(stderr, "mhe: --out-dir path too long\n");
        return 1;
    }
    if (mhe_out_open(&w, path, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 1; }
    if (t) mp_print(w.f, t, MP_CSV, 1);
    else if (fig == 3) mp_svg_fig3(w.f, o);
    else mp_svg_fig4(w.f, o);
    if (mhe_out_commit(&w, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 1; }
    fprintf(quiet_to_stderr ? stderr : stdout, "wrote %s\n", path);
    return 0;
}

/* ---- options ------------------------------------------------------------------------------- */

static void mp_usage(FILE *f) {
    fprintf(f,
        "usage: mhe params [--table LIST] [--format text|markdown|csv] [--n N] [--d D]\n"
        "                  [--kv-groups G] [--out-dir DIR]\n"
        "       mhe params --embeddings [--format text|markdown|csv] [--out-dir DIR]\n"
        "       mhe params --complexity [--B B] [--L L] [--d D] [--h H] [--t T] [--format F] [--out-dir DIR]\n"
        "The parameter and memory tables of the MHE paper (Xue and Aletras), computed with\n"
        "mhe_attn_param_count, the count a built model has. Biases are never counted (as in\n"
        "the paper); W^O is counted where the paper's totals include it.\n"
        "\n"
        "Tables (--table, a comma-separated list; default all):\n"
        "  4     one attention sublayer: memory complexity, #params and the extra over SHA,\n"
        "        as formulas in n and d (d_m = nd) and as numbers at --n and --d; no W^O\n"
        "  1     BERT-base encoder (12 layers, d_m 768, 12 heads of 64), W^O included\n"
        "  3     WMT-14 BASE encoder-decoder (18 attention sublayers), W^O included\n"
        "  14    MHA and MHE-MUL for BASE/LARGE encoders and BASE/MEDIUM decoders\n"
        "  15    MHA and MHE-MUL for every WMT-14 configuration of Table 15\n"
        "  13    memory per attention block of BERT-base: weights, gradients, Adam states,\n"
        "        activations, total and saving ratio against MHA (batch 32, length 512, fp16)\n"
        "  gpt3  GPT-3 projection: 96 layers, 96 heads of 128, no W^O\n"
        "  fig3  Figure 3 data: one sublayer as n grows from 1 to 128 (d = --d)\n"
        "  fig4  Figure 4 data: 12/24/48 layers with 32 and 64 heads (d = --d)\n"
        "  all   every table above\n"
        "  2.2   HashFormers (thesis chapter 2) Table 2.2: embedding parameters of BERT-MLM,\n"
        "        CANINE-C, ProFormer and HashFormers Emb/Pool/Add/Proj (d 768, T 128, k 10),\n"
        "        with PCR and PoEP; the same as --embeddings (not part of all)\n"
        "  collab  collaborative attention (Cordonnier et al. 2020) Table 1: concatenated against\n"
        "        collaborative heads for FairSeq transformer-base and BERT-base at D~ = D_k/2, /3, /4:\n"
        "        (2 D_in + N_h) D~, content bias, #params and multiply-adds at T = 128 (not part of all)\n"
        "\n"
        "Options:\n"
        "  --format F      text (aligned table, default), markdown, or csv\n"
        "  --n N           heads for Table 4 (default 12)\n"
        "  --d D           head size for Table 4 and the figures (default 64)\n"
        "  --kv-groups G   K/V groups of gqa (default 2); must divide --n when Table 4 is shown\n"
        "  --embeddings    print Table 2.2 of HashFormers only (no other option but --format\n"
        "                  and --out-dir applies)\n"
        "  --complexity    print Tables 4.5-4.8 of the thesis (ch. 4, deconstructing attention): time\n"
        "                  complexity, FLOPs (prefill, decode), activation memory and cache size of one\n"
        "                  layer of each variant, as formulas and at --B (batch, default 1), --L (length,\n"
        "                  2048), --d (model width d = h d_h, 896), --h (heads, 14), --t (tensor parallel\n"
        "                  size, 1); with the bytes of mhe's own cache beside Table 4.8\n"
        "  --out-dir DIR   also write each selected table as DIR/NAME.csv and the figures as\n"
        "                  DIR/fig3.svg and DIR/fig4.svg (DIR is created if missing)\n"
        "  --help          this text\n"
        "Where a figure printed in the paper disagrees with the exact count by rounding, the\n"
        "exact count is shown with an erratum note quoting the paper.\n"
        "Exit status: 0 ok, 1 impossible values or a file that could not be written, 2 bad options.\n");
}

/* 1 ok, 0 not an integer or out of long's range (usage error): mhe_args.h's parser */
static int mp_parse_int(const char *opt, const char *v, long *out) { return arg_long(opt, v, out) == 1; }

static int mp_parse_tables(const char *v, unsigned *bits) {
    char buf[256], *p, *q;
    int i;
    *bits = 0;
    if (strlen(v) >= sizeof buf || !*v) { fprintf(stderr, "mhe: bad --table '%s' (see --help)\n", v); return 0; }
    strcpy(buf, v);
    for (p = buf; p; p = q) {
        unsigned bit = 0;
        q = strchr(p, ',');
        if (q) *q++ = 0;
        if (strcmp(p, "all") == 0) bit = MP_ALL;
        else if (strcmp(p, "gpt-3") == 0 || strcmp(p, "GPT3") == 0 || strcmp(p, "GPT-3") == 0) bit = MP_GPT3;
        for (i = 0; i < MP_NTABLES && !bit; i++) if (strcmp(p, mp_table_names[i].name) == 0) bit = mp_table_names[i].bit;
        if (!bit) {
            fprintf(stderr, "mhe: unknown table '%s' for --table (4, 1, 3, 14, 15, 13, gpt3, fig3, fig4, all, 2.2 or collab)\n", p);
            return 0;
        }
        *bits |= bit;
    }
    return 1;
}

/* 0 ok, otherwise the exit status */
static int mp_parse(int argc, char **argv, mp_opts *o) {
    int i, emb = 0, table_given = 0, shape_given = 0, cd_given = 0;
    long n = 12, d = 64, g = mhe_config_default().kv_groups, cd = 896;
    char cx_opt[32] = "";
    memset(o, 0, sizeof *o);
    o->cB = 1; o->cL = 2048; o->ch = 14; o->ct = 1;
    o->format = MP_TEXT;
    o->tables = MP_ALL;
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '='), *v;
        char name[32];
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (strncmp(a, "--", 2) != 0) { fprintf(stderr, "mhe: unexpected argument '%s' (see mhe params --help)\n", a); return 2; }
        if (strcmp(a, "--embeddings") == 0) { emb = 1; continue; }
        if (strcmp(a, "--complexity") == 0) { o->complexity = 1; continue; }
        if (len >= sizeof name) { fprintf(stderr, "mhe: unknown option %s (see mhe params --help)\n", a); return 2; }
        memcpy(name, a, len);
        name[len] = 0;
        if (strcmp(name, "--format") && strcmp(name, "--table") && strcmp(name, "--n") && strcmp(name, "--d") &&
            strcmp(name, "--kv-groups") && strcmp(name, "--out-dir") && strcmp(name, "--B") && strcmp(name, "--L") &&
            strcmp(name, "--h") && strcmp(name, "--t")) {
            fprintf(stderr, "mhe: unknown option %s (see mhe params --help)\n", name);
            return 2;
        }
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else { fprintf(stderr, "mhe: option %s needs a value\n", name); return 2; }
        if (strcmp(name, "--format") == 0) {
            if (strcmp(v, "text") == 0) o->format = MP_TEXT;
            else if (strcmp(v, "markdown") == 0 || strcmp(v, "md") == 0) o->format = MP_MARKDOWN;
            else if (strcmp(v, "csv") == 0) o->format = MP_CSV;
            else { fprintf(stderr, "mhe: unknown format '%s' for --format (text, markdown or csv)\n", v); return 2; }
        } else if (strcmp(name, "--table") == 0) {
            if (!mp_parse_tables(v, &o->tables)) return 2;
            table_given = 1;
        } else if (strcmp(name, "--n") == 0) {
            if (!mp_parse_int(name, v, &n)) return 2;
            shape_given = 1;
        } else if (strcmp(name, "--d") == 0) {
            if (!mp_parse_int(name, v, &d)) return 2;
            shape_given = 1;
            cd = d; cd_given = 1;
        } else if (strcmp(name, "--B") == 0 || strcmp(name, "--L") == 0 || strcmp(name, "--h") == 0 || strcmp(name, "--t") == 0) {
            long x;
            if (!mp_parse_int(name, v, &x)) return 2;
            if (x < 1 || x > (1L << 24)) { fprintf(stderr, "mhe: %s must be in [1, 2^24] (got %ld)\n", name, x); return 1; }
            if (name[2] == 'B') o->cB = (double)x; else if (name[2] == 'L') o->cL = (double)x;
            else if (name[2] == 'h') o->ch = (double)x; else o->ct = (double)x;
            snprintf(cx_opt, sizeof cx_opt, "%s", name);
        } else if (strcmp(name, "--kv-groups") == 0) {
            if (!mp_parse_int(name, v, &g)) return 2;
            o->g_given = 1;
        } else {
            if (!*v) { fprintf(stderr, "mhe: --out-dir needs a directory name\n"); return 2; }
            o->out_dir = v;
        }
    }
    if (emb && (table_given || shape_given || o->g_given)) {
        fprintf(stderr, "mhe: --embeddings prints Table 2.2 at the thesis's settings; --table, --n, --d and "
                        "--kv-groups do not apply\n");
        return 2;
    }
    if (cx_opt[0] && !o->complexity) { fprintf(stderr, "mhe: %s is an option of --complexity\n", cx_opt); return 2; }
    if (o->complexity) {
        if (emb || table_given || o->g_given || n != 12) {
            fprintf(stderr, "mhe: --complexity prints Tables 4.5-4.8; --embeddings, --table, --n and --kv-groups do not apply\n");
            return 2;
        }
        if (cd_given && (cd < 1 || cd > (1L << 24))) { fprintf(stderr, "mhe: --d must be in [1, 2^24] (got %ld)\n", cd); return 1; }
        o->cd = (double)cd;
        if ((long)o->cd % (long)o->ch != 0) {
            fprintf(stderr, "mhe: --d %.0f is not divisible by --h %.0f (the thesis assumes d = h x d_h)\n", o->cd, o->ch);
            return 1;
        }
        o->tables = MP_CX;
        return 0;
    }
    if (emb) o->tables = MP_HASH;
    if (n < 1) { fprintf(stderr, "mhe: --n must be at least 1 (got %ld)\n", n); return 1; }
    if (d < 1) { fprintf(stderr, "mhe: --d must be at least 1 (got %ld)\n", d); return 1; }
    if (g < 1) { fprintf(stderr, "mhe: --kv-groups must be at least 1 (got %ld)\n", g); return 1; }
    /* counts stay far inside int64 and mhe_config's int fields: d_m = nd <= 2^24, and 128 heads of d for Figure 3 */
    if (n > (1L << 20) || d > (1L << 17) || (int64_t)n * d > ((int64_t)1 << 24)) {
        fprintf(stderr, "mhe: --n %ld and --d %ld are too large (need n <= 2^20, d <= 2^17, n*d <= 2^24)\n", n, d);
        return 1;
    }
    if (g > (1L << 20)) { fprintf(stderr, "mhe: --kv-groups %ld is too large\n", g); return 1; }
    /* an explicit --kv-groups must fit --n; the default one just leaves gqa's row empty */
    if ((o->tables & MP_T4) && o->g_given && n % g != 0) {
        fprintf(stderr, "mhe: --kv-groups %ld does not divide --n %ld (gqa shares K and V within groups of heads)\n", g, n);
        return 1;
    }
    o->n = (int)n;
    o->d = (int)d;
    o->g = (int)g;
    return 0;
}

int cmd_params(int argc, char **argv) {
    typedef int (*builder)(mp_table *, const mp_opts *);
    static const builder build[] = { mp_build_table4, mp_build_table1, mp_build_table3, mp_build_table14,
                                     mp_build_table15, mp_build_table13, mp_build_gpt3, mp_build_fig3, mp_build_fig4,
                                     mp_build_hash, mp_build_cx45, mp_build_cx46, mp_build_cx47, mp_build_cx48,
                                     mp_build_collab };
    mp_opts o;
    mp_table *t;
    int i, rc, status = 0;
    for (i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) { mp_usage(stdout); return 0; }
    rc = mp_parse(argc, argv, &o);
    if (rc) return rc;
    if (o.out_dir) {   /* before any output, so a bad directory prints nothing */
        struct stat st;
        if (mkdir(o.out_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "mhe: cannot create directory %s: %s\n", o.out_dir, strerror(errno));
            return 1;
        }
        if (stat(o.out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "mhe: --out-dir %s is not a directory\n", o.out_dir);
            return 1;
        }
    }
    t = (mp_table *)malloc(sizeof *t);
    if (!t) { fprintf(stderr, "mhe: out of memory\n"); return 1; }
    for (i = 0; i < MP_NTABLES; i++) {
        if (!(o.tables & mp_table_names[i].bit)) continue;
        memset(t, 0, sizeof *t);
        t->csv = o.format == MP_CSV;
        status |= build[i](t, &o);
        mp_print(stdout, t, o.format, 0);
        if (o.out_dir) {
            memset(t, 0, sizeof *t);
            t->csv = 1;
            build[i](t, &o);
            status |= mp_write(&o, mp_table_names[i].stem, "csv", t, 0, o.format == MP_CSV);
            if (mp_table_names[i].bit == MP_FIG3) status |= mp_write(&o, "fig3", "svg", NULL, 3, o.format == MP_CSV);
            if (mp_table_names[i].bit == MP_FIG4) status |= mp_write(&o, "fig4", "svg", NULL, 4, o.format == MP_CSV);
        }
    }
    free(t);
    fflush(stdout);
    if (ferror(stdout)) { fprintf(stderr, "mhe: error writing the tables to stdout\n"); return 1; }
    return status ? 1 : 0;
}
