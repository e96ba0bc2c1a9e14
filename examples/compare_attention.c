/* compare_attention - train a small byte-level decoder with each attention
   kind on the bundled corpus, several seeds per kind, and report what each
   costs and how well it does, with the seed spread that says which
   differences are real: validation perplexity (mean ± sample std, min-max),
   PRR against MHA and PEoP against SHA (MHE paper sec. 4.6, perplexity as the
   inverse indicator; per seed, then mean ± std), attention and total
   parameters, tokens/s, memory and KV-cache bytes per token. Ends with three
   verdicts (does mha separate from sha, does MHE-MUL keep 75-99 % of MHA,
   is MUL ahead of ADD) and writes PREFIX.md and PREFIX.svg.
   --bpe N: the same study on subwords: a byte-level BPE of N tokens trained
   on train.txt (GPT-2's split, mhe_bpe_train), both texts encoded by it, and
   every model's vocabulary N; the same steps, batch and sequence length in
   tokens (equal model compute but for the wider head; a step then sees
   several bytes per token). Perplexity is then per token; the table adds
   bits per byte, comparable with the byte-level study's.
     build/examples/compare_attention [--steps N] [--seeds S] [--d_model C] [--heads n]
         [--layers L] [--seq_len T] [--batch B] [--lr LR] [--kinds a,b,...]
         [--out PREFIX] [--threads N] [--eval_batches N] [--bpe N]
     build/examples/compare_attention [steps] [out-prefix]      (the older form)
   Run from the repository root (it reads examples/data/train.txt, valid.txt).
   Seed s (0-based) trains from model seed 42 + s and draws batches from
   seed 5 + s, so seed 0 is the single run of earlier versions. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEEDS 100

typedef struct {
    int steps, seeds, d_model, heads, layers, seq_len, batch, threads, eval_batches, bpe;
    double lr;
    int kinds[MHE_ATTN_KIND_COUNT], n_kinds;
    const char *prefix;
} options;

typedef struct {
    int kind;
    int64_t attn_params, total_params;
    double ppl[MAX_SEEDS], bpb[MAX_SEEDS];   /* per token; bits per byte of valid.txt */
    double tok_s, mem_mb, kv_bytes;   /* tok_s: mean over seeds; the rest do not depend on the seed */
} result;

typedef struct { double mean, std, min, max; int n; } spread;

static double seconds(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

static void usage(FILE *f) {
    fprintf(f, "usage: compare_attention [--steps N] [--seeds S] [--d_model C] [--heads n] [--layers L]\n"
               "         [--seq_len T] [--batch B] [--lr LR] [--kinds a,b,...] [--out PREFIX] [--threads N]\n"
               "         [--eval_batches N] [--bpe N]\n"
               "       compare_attention [steps] [out-prefix]\n"
               "defaults: 400 steps, 3 seeds, d_model 128, 8 heads, 4 layers, T 128, batch 16, lr 2e-3,\n"
               "the MHE paper's kinds (mha,sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul), build/compare_attention,\n"
               "--eval_batches 0 (the whole validation text; N > 0 only for quick checks), --bpe 0 (bytes)\n");
}

/* a flag's value as a whole integer in lo..hi, else a message naming the flag and exit 2 */
static int parse_int(const char *flag, const char *text, long lo, long hi) {
    char *end;
    long v;
    errno = 0;
    v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "compare_attention: %s: bad value '%s' (an integer in %ld..%ld)\n", flag, text, lo, hi);
        exit(2);
    }
    return (int)v;
}

/* finite by its exponent bits: -ffast-math folds isnan() and NaN comparisons away */
static int finite_bits(double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return (u >> 52 & 0x7ff) != 0x7ff;
}

static double parse_real(const char *flag, const char *text, double lo, double hi) {
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (errno || end == text || *end || !finite_bits(v) || !(v > lo && v <= hi)) {
        fprintf(stderr, "compare_attention: %s: bad value '%s' (a number in (%g, %g])\n", flag, text, lo, hi);
        exit(2);
    }
    return v;
}

static void parse_kinds(options *o, const char *text) {
    char name[64];
    const char *p = text;
    o->n_kinds = 0;
    for (;;) {
        size_t len = strcspn(p, ",");
        int kind, i;
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "compare_attention: --kinds: bad value '%s' (comma-separated kind names)\n", text);
            exit(2);
        }
        memcpy(name, p, len);
        name[len] = 0;
        kind = mhe_attn_kind_from_name(name);
        if (kind < 0) {
            fprintf(stderr, "compare_attention: --kinds: unknown kind '%s' in '%s'\n", name, text);
            exit(2);
        }
        for (i = 0; i < o->n_kinds; i++)
            if (o->kinds[i] == kind) {
                fprintf(stderr, "compare_attention: --kinds: '%s' is listed twice in '%s'\n", name, text);
                exit(2);
            }
        o->kinds[o->n_kinds++] = kind;
        if (!p[len]) break;
        p += len + 1;
    }
}

static void parse_options(options *o, int argc, char **argv) {
    int i, positional = 0;
    o->steps = 400; o->seeds = 3; o->d_model = 128; o->heads = 8; o->layers = 4;
    o->seq_len = 128; o->batch = 16; o->threads = 0; o->eval_batches = 0; o->lr = 2e-3; o->bpe = 0;
    o->prefix = "build/compare_attention";
    for (o->n_kinds = 0; o->n_kinds <= MHE_ATTN_MHE_MUL; o->n_kinds++) o->kinds[o->n_kinds] = o->n_kinds;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); exit(0); }
        if (a[0] != '-' || a[1] != '-') {   /* the older form: [steps] [out-prefix] */
            if (positional == 0) o->steps = parse_int("steps", a, 1, 10000000);
            else if (positional == 1) o->prefix = a;
            else { fprintf(stderr, "compare_attention: unexpected argument '%s'\n", a); usage(stderr); exit(2); }
            positional++;
            continue;
        }
        if (!v) { fprintf(stderr, "compare_attention: %s needs a value\n", a); usage(stderr); exit(2); }
        if (strcmp(a, "--steps") == 0) o->steps = parse_int(a, v, 1, 10000000);
        else if (strcmp(a, "--seeds") == 0) o->seeds = parse_int(a, v, 1, MAX_SEEDS);
        else if (strcmp(a, "--d_model") == 0) o->d_model = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--heads") == 0) o->heads = parse_int(a, v, 1, 4096);
        else if (strcmp(a, "--layers") == 0) o->layers = parse_int(a, v, 1, MHE_MAX_LAYERS);
        else if (strcmp(a, "--seq_len") == 0) o->seq_len = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--batch") == 0) o->batch = parse_int(a, v, 1, 65536);
        else if (strcmp(a, "--threads") == 0) o->threads = parse_int(a, v, 0, 4096);
        else if (strcmp(a, "--eval_batches") == 0) o->eval_batches = parse_int(a, v, 0, 1000000000);
        else if (strcmp(a, "--bpe") == 0) o->bpe = parse_int(a, v, 257, MHE_BPE_MAX_TOKENS);
        else if (strcmp(a, "--lr") == 0) o->lr = parse_real(a, v, 0, 1);
        else if (strcmp(a, "--kinds") == 0) parse_kinds(o, v);
        else if (strcmp(a, "--out") == 0) {
            if (!*v) { fprintf(stderr, "compare_attention: --out: empty prefix\n"); exit(2); }
            o->prefix = v;
        } else { fprintf(stderr, "compare_attention: unknown flag '%s'\n", a); usage(stderr); exit(2); }
        i++;
    }
}

static spread spread_of(const double *x, int n) {
    spread s = {0, 0, 0, 0, 0};
    int i, finite = 0;
    double ss = 0;
    for (i = 0; i < n; i++) {
        if (!isfinite(x[i])) continue;
        if (!finite || x[i] < s.min) s.min = x[i];
        if (!finite || x[i] > s.max) s.max = x[i];
        s.mean += x[i];
        finite++;
    }
    s.n = finite;
    if (!finite) return s;
    s.mean /= finite;
    for (i = 0; i < n; i++)
        if (isfinite(x[i])) ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.std = finite > 1 ? sqrt(ss / (finite - 1)) : 0;   /* sample std (n - 1) */
    return s;
}

static const result *find_kind(const result *res, int n, int kind) {
    int i;
    for (i = 0; i < n; i++)
        if (res[i].kind == kind) return &res[i];
    return NULL;
}

static void config_for(mhe_config *c, const options *o, int kind) {
    int i;
    *c = mhe_config_default();
    c->d_model = o->d_model; c->n_heads = o->heads; c->n_layers = o->layers; c->max_seq_len = o->seq_len;
    if (o->bpe) c->vocab_size = o->bpe;
    c->kv_groups = o->heads % 2 == 0 ? 2 : 1;   /* gqa: two K/V groups when the heads split evenly */
    for (i = 0; i < MHE_MAX_LAYERS; i++) c->attn[i] = kind;
}

/* ---- verdicts: one line each, "holds" / "does not hold" / a reason it cannot tell */

static void verdict_separate(char *out, size_t len, const result *mha, const result *sha, int seeds) {
    spread a, b;
    double gap, noise;
    if (!mha || !sha) { snprintf(out, len, "not run (needs mha and sha in --kinds)"); return; }
    a = spread_of(mha->ppl, seeds); b = spread_of(sha->ppl, seeds);
    gap = fabs(b.mean - a.mean); noise = a.std + b.std;
    if (seeds < 2)
        snprintf(out, len, "cannot tell with one seed (no spread): mha %.3f, sha %.3f", a.mean, b.mean);
    else if (gap > noise)
        snprintf(out, len, "holds: the gap %.3f between mha (%.3f) and sha (%.3f) exceeds the sum of their stds %.3f%s",
                 gap, a.mean, b.mean, noise, a.mean < b.mean ? "" : " (but sha is the better one)");
    else
        snprintf(out, len, "does not hold: the gap %.3f between mha (%.3f) and sha (%.3f) is within the sum of their stds %.3f",
                 gap, a.mean, b.mean, noise);
}

/* The retention figure is the paper's PRR for an inverse indicator (MHE
   paper sec. 4.6): PRR = 1 - (ppl_model - ppl_MHA) / ppl_MHA, i.e. mhe_prr(.., 1).
   Its 74.9 % is MHE-MUL's perplexity 53.8 vs MHA's 43.0 on WikiText-103
   (sec. 5, Table 2), its 99.0 % decoder GLUE; we test the floor, 75 %. */
static void verdict_retention(char *out, size_t len, const result *mha, const result *mul, int seeds) {
    double prr[MAX_SEEDS];
    spread s;
    int i;
    const char *one = seeds < 2 ? " (one seed: no spread)" : "";
    if (!mha || !mul) { snprintf(out, len, "not run (needs mha and mhe-mul in --kinds)"); return; }
    for (i = 0; i < seeds; i++) prr[i] = mhe_prr(mul->ppl[i], mha->ppl[i], 1);
    s = spread_of(prr, seeds);
    if (s.mean - s.std >= 0.75)
        snprintf(out, len, "holds: PRR of mhe-mul vs mha %.1f ± %.1f %%%s%s", 100 * s.mean, 100 * s.std,
                 s.mean > 0.99 ? ", above the paper's 99 %: mhe-mul does as well as mha here" : ", within 75-99 %", one);
    else if (s.mean + s.std < 0.75)
        snprintf(out, len, "does not hold: PRR of mhe-mul vs mha %.1f ± %.1f %%, below 75 %%%s", 100 * s.mean, 100 * s.std, one);
    else
        snprintf(out, len, "cannot tell: PRR of mhe-mul vs mha %.1f ± %.1f %% straddles 75 %%", 100 * s.mean, 100 * s.std);
}

static void verdict_mul_add(char *out, size_t len, const result *add, const result *mul, int seeds) {
    spread a, m;
    double noise;
    if (!add || !mul) { snprintf(out, len, "not run (needs mhe-add and mhe-mul in --kinds)"); return; }
    a = spread_of(add->ppl, seeds); m = spread_of(mul->ppl, seeds);
    noise = a.std + m.std;
    if (seeds < 2)
        snprintf(out, len, "cannot tell with one seed (no spread): mhe-mul %.3f, mhe-add %.3f", m.mean, a.mean);
    else if (a.mean - m.mean > noise)
        snprintf(out, len, "holds: mhe-mul %.3f below mhe-add %.3f by %.3f, more than the sum of their stds %.3f",
                 m.mean, a.mean, a.mean - m.mean, noise);
    else if (m.mean - a.mean > noise)
        snprintf(out, len, "does not hold: mhe-add %.3f below mhe-mul %.3f by %.3f, more than the sum of their stds %.3f",
                 a.mean, m.mean, m.mean - a.mean, noise);
    else
        snprintf(out, len, "not separated: mhe-mul %.3f vs mhe-add %.3f, a gap of %.3f within the sum of their stds %.3f",
                 m.mean, a.mean, fabs(a.mean - m.mean), noise);
}

/* ---- outputs ---- */

static void write_table(FILE *f, const result *res, int n, int seeds) {
    const result *mha = find_kind(res, n, MHE_ATTN_MHA), *sha = find_kind(res, n, MHE_ATTN_SHA);
    int k, i;
    fprintf(f, "| kind | attention params | total params | val ppl (mean ± std) | min–max | bits per byte | PRR vs MHA | PEoP vs SHA | tokens/s | memory MB | KV cache bytes/token |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (k = 0; k < n; k++) {
        const result *r = &res[k];
        spread p = spread_of(r->ppl, seeds);
        char prr[48], peop[48];
        double x[MAX_SEEDS];
        if (!mha) snprintf(prr, sizeof prr, "(mha not run)");
        else {
            spread s;
            for (i = 0; i < seeds; i++) x[i] = mhe_prr(r->ppl[i], mha->ppl[i], 1);
            s = spread_of(x, seeds);
            snprintf(prr, sizeof prr, "%.3f ± %.3f", s.mean, s.std);
        }
        if (!sha) snprintf(peop, sizeof peop, "(sha not run)");
        else if (r == sha) snprintf(peop, sizeof peop, "(reference)");
        else if (r->total_params == sha->total_params) snprintf(peop, sizeof peop, "(same size as sha)");
        else {
            spread s;
            for (i = 0; i < seeds; i++)
                x[i] = mhe_peop(r->ppl[i], (double)r->total_params, sha->ppl[i], (double)sha->total_params, 1);
            s = spread_of(x, seeds);
            snprintf(peop, sizeof peop, "%.2f ± %.2f", s.mean, s.std);
        }
        spread b = spread_of(r->bpb, seeds);
        fprintf(f, "| %s | %lld | %lld | %.3f ± %.3f | %.3f–%.3f | %.4f ± %.4f | %s | %s | %.0f | %.1f | %.0f |\n",
                mhe_attn_kind_name(r->kind), (long long)r->attn_params, (long long)r->total_params,
                p.mean, p.std, p.min, p.max, b.mean, b.std, prr, peop, r->tok_s, r->mem_mb, r->kv_bytes);
    }
}

/* writes path.tmp, then renames it over path, so a reader never sees half a file */
static FILE *open_tmp(char *tmp, size_t len, const char *path) {
    FILE *f;
    snprintf(tmp, len, "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f) fprintf(stderr, "compare_attention: cannot write %s: %s\n", tmp, strerror(errno));
    return f;
}

static int close_and_rename(FILE *f, const char *tmp, const char *path) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "compare_attention: writing %s failed\n", tmp);
        remove(tmp);
        return 0;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "compare_attention: cannot rename %s to %s: %s\n", tmp, path, strerror(errno));
        remove(tmp);
        return 0;
    }
    return 1;
}

/* a tick step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over range */
static double nice_step(double range, int ticks) {
    double raw = range / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* Bars at the mean perplexity, error bars over the seeds' min-max. The axis
   starts near the lowest value (said in the title): from zero, spreads of a
   few hundredths would be invisible. */
static void write_svg(FILE *f, const result *res, int n, const options *o) {
    const double top = 60, bottom = 300, left = 60, slot = 84;
    double lo = 1e300, hi = 0, step, width = left + 20 + slot * n;
    int k, i;
    for (k = 0; k < n; k++) {
        spread p = spread_of(res[k].ppl, o->seeds);
        if (p.min < lo) lo = p.min;
        if (p.max > hi) hi = p.max;
    }
    if (width < 420) width = 420;
    if (!(hi > lo)) hi = lo + 1;
    step = nice_step(hi - lo, 5);
    lo = floor(lo / step) * step - step;
    if (lo < 0) lo = 0;
    hi = ceil(hi / step) * step;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"370\" font-family=\"sans-serif\" font-size=\"12\">\n", width);
    fprintf(f, "<rect width=\"%.0f\" height=\"370\" fill=\"white\"/>\n", width);
    fprintf(f, "<text x=\"%.1f\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">Validation perplexity, mean of %d seed%s, "
               "%d steps (lower is better)</text>\n", width / 2, o->seeds, o->seeds == 1 ? "" : "s", o->steps);
    fprintf(f, "<text x=\"%.1f\" y=\"36\" text-anchor=\"middle\" fill=\"#555\">error bars: min to max over the seeds; "
               "the axis starts at %g</text>\n", width / 2, lo);
    for (i = 0; lo + i * step <= hi + step * 1e-9; i++) {
        double v = lo + i * step, y = bottom - (bottom - top) * (v - lo) / (hi - lo);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                left - 5, y + 4, v, left, y, width - 10, y);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            left, bottom, width - 10, bottom, left, top, left, bottom);
    for (k = 0; k < n; k++) {
        spread p = spread_of(res[k].ppl, o->seeds);
        double x = left + 14 + k * slot, mid = x + 28;
        double y_mean = bottom - (bottom - top) * (p.mean - lo) / (hi - lo);
        double y_min = bottom - (bottom - top) * (p.min - lo) / (hi - lo);
        double y_max = bottom - (bottom - top) * (p.max - lo) / (hi - lo);
        const char *col = res[k].kind == MHE_ATTN_MHE_ADD || res[k].kind == MHE_ATTN_MHE_MUL ? "#d95f02" : "#1b9e77";
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"56\" height=\"%.1f\" fill=\"%s\"/>\n", x, y_mean, bottom - y_mean, col);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>", mid, y_min, mid, y_max);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>", mid - 8, y_min, mid + 8, y_min);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", mid - 8, y_max, mid + 8, y_max);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3f</text>\n", mid, y_max - 5, p.mean);
        fprintf(f, "<text x=\"%.1f\" y=\"318\" text-anchor=\"middle\">%s</text>\n", mid, mhe_attn_kind_name(res[k].kind));
        fprintf(f, "<text x=\"%.1f\" y=\"334\" text-anchor=\"middle\" fill=\"#555\">%.0fk</text>\n", mid, res[k].attn_params / 1e3);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"358\" text-anchor=\"middle\" fill=\"#555\">attention parameters (all layers)</text>\n</svg>\n", width / 2);
}

int main(int argc, char **argv) {
    static result res[MHE_ATTN_KIND_COUNT];
    options o;
    size_t n_train, n_valid, valid_bytes;
    int *train = NULL, *valid = NULL, k, s, i;
    char load_err[MHE_ERR_LEN], err[MHE_ERR_LEN], scored[48], path[1024], tmp[1040], verdict[3][400];
    FILE *md, *svg;
    const char *verdict_name[3] = {"(a) mha and sha separate", "(b) MHE-MUL keeps 75–99 % of MHA's performance (MHE paper)",
                                   "(c) MUL ahead of ADD"};
    parse_options(&o, argc, argv);
#ifdef _OPENMP
    if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
    /* every config is checked before any training, so a bad combination fails at once */
    for (k = 0; k < o.n_kinds; k++) {
        mhe_config c;
        config_for(&c, &o, o.kinds[k]);
        if (mhe_config_validate(&c, err) != MHE_OK) {
            fprintf(stderr, "compare_attention: %s: %s\n", mhe_attn_kind_name(o.kinds[k]), err);
            return 2;
        }
    }
    /* an unwritable prefix fails now, not after the training */
    snprintf(path, sizeof path, "%s.md", o.prefix);
    if (!(md = open_tmp(tmp, sizeof tmp, path))) return 1;
    fclose(md);
    remove(tmp);
    if (mhe_read_text_tokens("examples/data/train.txt", &train, &n_train, NULL, load_err) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &valid, &n_valid, NULL, load_err) != MHE_OK) {
        fprintf(stderr, "compare_attention: %s (run from the repository root)\n", load_err);
        return 1;
    }
    valid_bytes = n_valid;
    if (o.bpe) {   /* subwords: a BPE learnt on the training text, both texts re-read through it */
        mhe_bpe b;
        char *text = (char *)malloc(n_train);
        mhe_bpe_init(&b, NULL);
        for (i = 0; text && (size_t)i < n_train; i++) text[i] = (char)train[i];
        if (!text || mhe_bpe_train(&b, text, n_train, o.bpe, MHE_BPE_SPLIT_GPT2, NULL, 0) != MHE_OK) {
            fprintf(stderr, "compare_attention: --bpe %d: %s\n", o.bpe, text ? b.err : "out of memory");
            return 1;
        }
        free(text); free(train); free(valid);
        o.bpe = b.n_tokens;   /* fewer when the text runs out of pairs */
        if (mhe_bpe_read_tokens(&b, "examples/data/train.txt", &train, &n_train, NULL, load_err) != MHE_OK ||
            mhe_bpe_read_tokens(&b, "examples/data/valid.txt", &valid, &n_valid, NULL, load_err) != MHE_OK) {
            fprintf(stderr, "compare_attention: %s\n", load_err);
            return 1;
        }
        mhe_bpe_free(&b);
        printf("byte-level BPE of %d tokens: train %zu tokens, valid %zu tokens (%.2f bytes per token)\n", o.bpe, n_train,
               n_valid, (double)valid_bytes / (double)n_valid);
    }
    printf("decoder, d_model %d, %d heads, %d layers, T %d, batch %d, lr %g, %d steps, %d seed%s per kind\n",
           o.d_model, o.heads, o.layers, o.seq_len, o.batch, o.lr, o.steps, o.seeds, o.seeds == 1 ? "" : "s");
    for (k = 0; k < o.n_kinds; k++) {
        result *r = &res[k];
        double tok_s_sum = 0;
        r->kind = o.kinds[k];
        for (s = 0; s < o.seeds; s++) {
            mhe_config c;
            mhe_train_config tc = mhe_train_config_default();
            mhe_model m;
            mhe_trainer t;
            mhe_kv_cache kv;
            float val;
            double t0, tok_s;
            config_for(&c, &o, r->kind);
            tc.steps = o.steps; tc.batch = o.batch; tc.seq_len = o.seq_len;
            tc.lr = (float)o.lr; tc.min_lr = (float)(o.lr / 10); tc.warmup = o.steps / 20; tc.seed = 5 + (uint64_t)s;
            if (mhe_model_init(&m, &c, 42 + (uint64_t)s, NULL) != MHE_OK) {
                fprintf(stderr, "compare_attention: %s: %s\n", mhe_attn_kind_name(r->kind), m.err);
                return 1;
            }
            if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) {
                fprintf(stderr, "compare_attention: %s: %s\n", mhe_attn_kind_name(r->kind), t.err);
                return 1;
            }
            t0 = seconds();
            for (i = 0; i < o.steps; i++)
                if (mhe_trainer_step(&t, train, n_train) != MHE_OK) {
                    fprintf(stderr, "compare_attention: %s, seed %d: %s\n", mhe_attn_kind_name(r->kind), s, t.err);
                    return 1;
                }
            tok_s = (double)o.steps * o.batch * o.seq_len / (seconds() - t0);
            tok_s_sum += tok_s;
            /* the whole validation text (max_batches 0) by default: a sample would add its own noise */
            if (mhe_evaluate(&m, valid, n_valid, o.batch, o.seq_len, o.eval_batches, &val) != MHE_OK) {
                fprintf(stderr, "compare_attention: %s: %s\n", mhe_attn_kind_name(r->kind), m.err);
                return 1;
            }
            r->ppl[s] = mhe_perplexity(val);
            /* nats per token over the scored tokens -> bits per byte of the same text (the whole of valid.txt by default) */
            r->bpb[s] = val / log(2.0) * (double)n_valid / (double)valid_bytes;
            r->total_params = m.n_params;
            r->attn_params = c.n_layers * mhe_attn_param_count(&c, r->kind, 1, c.bias);
            r->mem_mb = (m.bytes_params + m.bytes_acts + 2.0 * m.n_params * sizeof(float)) / 1e6;
            if (mhe_kv_cache_init(&kv, &m, 1, NULL) == MHE_OK) {
                r->kv_bytes = (double)kv.bytes_per_token;
                mhe_kv_cache_free(&kv);
            }
            printf("  %-8s seed %d  val ppl %7.3f  %7.0f tok/s\n", mhe_attn_kind_name(r->kind), s, r->ppl[s], tok_s);
            fflush(stdout);
            mhe_trainer_free(&t);
            mhe_model_free(&m);
        }
        r->tok_s = tok_s_sum / o.seeds;
    }
    verdict_separate(verdict[0], sizeof verdict[0], find_kind(res, o.n_kinds, MHE_ATTN_MHA),
                     find_kind(res, o.n_kinds, MHE_ATTN_SHA), o.seeds);
    verdict_retention(verdict[1], sizeof verdict[1], find_kind(res, o.n_kinds, MHE_ATTN_MHA),
                      find_kind(res, o.n_kinds, MHE_ATTN_MHE_MUL), o.seeds);
    verdict_mul_add(verdict[2], sizeof verdict[2], find_kind(res, o.n_kinds, MHE_ATTN_MHE_ADD),
                    find_kind(res, o.n_kinds, MHE_ATTN_MHE_MUL), o.seeds);
    printf("\n");
    write_table(stdout, res, o.n_kinds, o.seeds);
    printf("\n");
    for (i = 0; i < 3; i++) printf("Verdict %s: %s\n", verdict_name[i], verdict[i]);

    snprintf(path, sizeof path, "%s.md", o.prefix);
    if (!(md = open_tmp(tmp, sizeof tmp, path))) return 1;
    if (o.eval_batches > 0) snprintf(scored, sizeof scored, "the first %d batches of", o.eval_batches);
    else snprintf(scored, sizeof scored, "the whole of");
    fprintf(md, "decoder, d_model %d, %d heads, %d layers, T %d, batch %d, lr %g, %d steps, %d seed%s per kind "
                "(seed s: model seed 42 + s, batch seed 5 + s); validation perplexity over %s "
                "examples/data/valid.txt; ± is the sample std over the seeds, PRR and PEoP are taken per seed "
                "(seed i against seed i of mha / sha); tokens: %s\n\n",
            o.d_model, o.heads, o.layers, o.seq_len, o.batch, o.lr, o.steps, o.seeds, o.seeds == 1 ? "" : "s", scored,
            o.bpe ? "byte-level BPE (per-token perplexity; bits per byte over the same bytes)" : "bytes");
    write_table(md, res, o.n_kinds, o.seeds);
    fprintf(md, "\n");
    for (i = 0; i < 3; i++) fprintf(md, "- Verdict %s: %s\n", verdict_name[i], verdict[i]);
    if (!close_and_rename(md, tmp, path)) return 1;

    snprintf(path, sizeof path, "%s.svg", o.prefix);
    if (!(svg = open_tmp(tmp, sizeof tmp, path))) return 1;
    write_svg(svg, res, o.n_kinds, &o);
    if (!close_and_rename(svg, tmp, path)) return 1;
    printf("\nwrote %s.md and %s.svg\n", o.prefix, o.prefix);
    free(train); free(valid);
    return 0;
}
