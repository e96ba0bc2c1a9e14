/* mhe_costs.h - the cost tables of the thesis's Appendices E-H (Tables
   4.5-4.8) for the mhe tool: `mhe params --complexity` prints them and `mhe
   generate` compares its measured KV cache with Table 4.8. A research aid,
   kept out of mhe.h (a model never needs it); include after mhe.h, and
   define MHE_COSTS_IMPLEMENTATION in one file (tools/cli/mhe_params.c). */
#ifndef MHE_COSTS_H
#define MHE_COSTS_H
#include <stddef.h>

/* Costs of one attention layer from the thesis's appendix tables, as
   formulas in B (batch), L (length), d (width), h (heads), t (tensor
   parallel): what = MHE_COST_TIME (Table 4.5, O(.)), MHE_COST_PREFILL,
   MHE_COST_DECODE (Table 4.6, FLOPs), MHE_COST_ACT (Table 4.7, bytes at
   half precision), MHE_COST_CACHE (Table 4.8, bytes at half precision).
   Kinds: mha (the thesis's Standard), mlp, taylor, nonapprox, rndemb-qk,
   fixedseq-qk, staticemb-qk; -1 for the others. */
enum { MHE_COST_TIME = 0, MHE_COST_PREFILL, MHE_COST_DECODE, MHE_COST_ACT, MHE_COST_CACHE, MHE_COST_COUNT };
double mhe_attn_cost(int what, int kind, double B, double L, double d, double h, double t);
/* the same formula as text ("4BL^2d + 6BLd^2"); 0 when there is none */
int mhe_attn_cost_formula(int what, int kind, char *buf, size_t cap);

#endif /* MHE_COSTS_H */

#if defined(MHE_COSTS_IMPLEMENTATION) && !defined(MHE_COSTS_IMPLEMENTATION_DONE)
#define MHE_COSTS_IMPLEMENTATION_DONE
#include <math.h>
#include <stdio.h>

/* a term coef B^b L^l d^d h^h t^t (exponents may be negative) */
typedef struct mc_term { double coef; signed char b, l, d, h, t; } mc_term;
#define MC_NTERMS 3
typedef struct mc_formula { int n; mc_term term[MC_NTERMS]; } mc_formula;

/* rows: Standard (mha), MLP, Approx. (taylor), Non-apx. (nonapprox), RndEmbQK,
   FixedSeqQK, StaticEmbQK; columns: MHE_COST_* in order. Typed from the
   tables' terms; mhe params --complexity prints them and tests/test_decon.py
   checks them against the formulas as printed. */
static const mc_formula mc_costs[7][MHE_COST_COUNT] = {
    {   /* Standard */
        { 2, { { 1, 1, 2, 1, 0, 0 }, { 1, 1, 1, 2, 0, 0 } } },
        { 2, { { 4, 1, 2, 1, 0, 0 }, { 6, 1, 1, 2, 0, 0 } } },
        { 2, { { 6, 1, 0, 2, 0, 0 }, { 4, 1, 1, 1, 0, 0 } } },
        { 2, { { 8, 1, 1, 1, 0, -1 }, { 2, 1, 2, 0, 1, -1 } } },
        { 1, { { 4, 1, 1, 1, 0, 0 } } } },
    {   /* MLP */
        { 1, { { 1, 1, 1, 2, 0, 0 } } },
        { 1, { { 6, 1, 1, 2, 0, 0 } } },
        { 1, { { 6, 1, 0, 2, 0, 0 } } },
        { 1, { { 8, 1, 1, 1, 0, -1 } } },
        { 0, { { 0, 0, 0, 0, 0, 0 } } } },
    {   /* Approx. */
        { 1, { { 1, 1, 1, 2, 0, 0 } } },
        { 1, { { 14, 1, 1, 2, 0, 0 } } },
        { 1, { { 10, 1, 0, 2, 0, 0 } } },
        { 2, { { 11, 1, 1, 1, 0, -1 }, { 3, 1, 0, 2, -1, -1 } } },
        { 2, { { 6, 1, 0, 1, 0, 0 }, { 4, 1, 0, 2, -1, 0 } } } },
    {   /* Non-apx. */
        { 1, { { 1, 1, 1, 2, 0, 0 } } },
        { 1, { { 6, 1, 1, 2, 0, 0 } } },
        { 1, { { 6, 1, 0, 2, 0, 0 } } },
        { 2, { { 8, 1, 1, 1, 0, -1 }, { 4, 1, 1, 0, 1, -1 } } },
        { 2, { { 2, 1, 0, 1, 0, 0 }, { 4, 1, 0, 0, 1, 0 } } } },
    {   /* RndEmbQK */
        { 2, { { 1, 1, 2, 1, 0, 0 }, { 1, 1, 1, 2, 0, 0 } } },
        { 3, { { 2, 0, 2, 1, 0, 0 }, { 2, 1, 2, 1, 0, 0 }, { 6, 1, 1, 2, 0, 0 } } },
        { 3, { { 2, 0, 1, 1, 0, 0 }, { 2, 1, 1, 1, 0, 0 }, { 6, 1, 0, 2, 0, 0 } } },
        { 3, { { 4, 1, 1, 1, 0, -1 }, { 8, 0, 1, 1, 0, -1 }, { 2, 0, 2, 0, 1, -1 } } },
        { 2, { { 2, 1, 1, 1, 0, 0 }, { 2, 0, 1, 1, 0, 0 } } } },
    {   /* FixedSeqQK: as RndEmbQK */
        { 2, { { 1, 1, 2, 1, 0, 0 }, { 1, 1, 1, 2, 0, 0 } } },
        { 3, { { 2, 0, 2, 1, 0, 0 }, { 2, 1, 2, 1, 0, 0 }, { 6, 1, 1, 2, 0, 0 } } },
        { 3, { { 2, 0, 1, 1, 0, 0 }, { 2, 1, 1, 1, 0, 0 }, { 6, 1, 0, 2, 0, 0 } } },
        { 3, { { 4, 1, 1, 1, 0, -1 }, { 8, 0, 1, 1, 0, -1 }, { 2, 0, 2, 0, 1, -1 } } },
        { 2, { { 2, 1, 1, 1, 0, 0 }, { 2, 0, 1, 1, 0, 0 } } } },
    {   /* StaticEmbQK: as Standard */
        { 2, { { 1, 1, 2, 1, 0, 0 }, { 1, 1, 1, 2, 0, 0 } } },
        { 2, { { 4, 1, 2, 1, 0, 0 }, { 6, 1, 1, 2, 0, 0 } } },
        { 2, { { 6, 1, 0, 2, 0, 0 }, { 4, 1, 1, 1, 0, 0 } } },
        { 2, { { 8, 1, 1, 1, 0, -1 }, { 2, 1, 2, 0, 1, -1 } } },
        { 1, { { 4, 1, 1, 1, 0, 0 } } } },
};

static int mc_row(int kind) {
    switch (kind) {
    case MHE_ATTN_MHA: return 0;
    case MHE_ATTN_MLP: return 1;
    case MHE_ATTN_TAYLOR: return 2;
    case MHE_ATTN_NONAPPROX: return 3;
    case MHE_ATTN_RNDEMB_QK: return 4;
    case MHE_ATTN_FIXEDSEQ_QK: return 5;
    case MHE_ATTN_STATICEMB_QK: return 6;
    default: return -1;
    }
}

double mhe_attn_cost(int what, int kind, double B, double L, double d, double h, double t) {
    int r = mc_row(kind), i;
    double sum = 0;
    if (r < 0 || what < 0 || what >= MHE_COST_COUNT) return -1;
    for (i = 0; i < mc_costs[r][what].n; i++) {
        const mc_term *x = &mc_costs[r][what].term[i];
        sum += x->coef * pow(B, x->b) * pow(L, x->l) * pow(d, x->d) * pow(h, x->h) * pow(t, x->t);
    }
    return sum;
}

/* "4BL^2d + 6BLd^2"; the Table 4.7 formulas, every term over t, as "(...)/t" */
int mhe_attn_cost_formula(int what, int kind, char *buf, size_t cap) {
    int r = mc_row(kind), i, all_t = 1;
    size_t used = 0;
    const mc_formula *f;
    if (!buf || cap == 0) return 0;
    buf[0] = 0;
    if (r < 0 || what < 0 || what >= MHE_COST_COUNT) return 0;
    f = &mc_costs[r][what];
    if (f->n == 0) { snprintf(buf, cap, "0"); return 1; }
    for (i = 0; i < f->n; i++) all_t &= f->term[i].t == -1;
#define MC_PUT(...) do { int w_ = snprintf(buf + used, cap - used, __VA_ARGS__); if (w_ > 0) used += (size_t)w_ < cap - used ? (size_t)w_ : cap - used - 1; } while (0)
    if (all_t && f->n > 1) MC_PUT("(");
    for (i = 0; i < f->n; i++) {
        const mc_term *x = &f->term[i];
        const char *sym = "BLdh";
        int e[4], k, den = 0;
        e[0] = x->b; e[1] = x->l; e[2] = x->d; e[3] = x->h;
        if (i) MC_PUT(" + ");
        if (x->coef != 1 || (e[0] <= 0 && e[1] <= 0 && e[2] <= 0 && e[3] <= 0)) MC_PUT("%g", x->coef);
        for (k = 0; k < 4; k++) {
            if (e[k] < 0) { den = 1; continue; }
            if (e[k] >= 1) MC_PUT("%c", sym[k]);
            if (e[k] > 1) MC_PUT("^%d", e[k]);
        }
        if (den || (x->t < 0 && !all_t)) {
            MC_PUT("/");
            for (k = 0; k < 4; k++) if (e[k] < 0) MC_PUT("%c", sym[k]);
            if (x->t < 0 && !all_t) MC_PUT("t");
        }
    }
    if (all_t) MC_PUT(f->n > 1 ? ")/t" : "/t");
#undef MC_PUT
    return 1;
}

#endif /* MHE_COSTS_IMPLEMENTATION */
