/* mhe_compare.h - the comparison study of attention kinds on a user's data
   (`mhe compare`): for every kind and seed a training run, each resumable
   from its checkpoints in the study's folder, then a report with the seed
   statistics, PRR, PEoP, the MHE paper's claims under a named test, curves
   and SVG plots. Included after mhe.h (with its implementation),
   mhe_plots.h and mhe_clock.h by tools/cli/mhe.c; a program that registers
   its own kinds (mhe_attn_kind_register) includes the same three and calls
   compare_run, so its kinds are compared the same way. Link with -lpthread
   (--jobs runs several trainings at once on threads). compare_opts.device
   trains on another device (mhe compare --device cuda: tools/cli/mhe.c).

   The runs call the library as `mhe train` and `mhe eval` do (the same
   init, trainer, checkpoints and evaluation), so a run's numbers equal those
   of separate commands with the same settings. */
#ifndef MHE_COMPARE_H
#define MHE_COMPARE_H
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef _WIN32
#include <direct.h>
#endif

enum { COMPARE_LM = 0, COMPARE_CLS = 1 };
enum { COMPARE_OK = 0, COMPARE_FAILED = 1, COMPARE_USAGE = 2, COMPARE_STOPPED = 3 };
#define COMPARE_MAX_KINDS 64
#define COMPARE_MAX_SEEDS 100

/* A trainer on a device other than the CPU (tools/cli/mhe.c gives the CUDA
   companion's, set up as `mhe train --device cuda` does). open makes the
   trainer of m, restored from the checkpoint `resume` when not NULL, and sets
   *t to its host half (step, RNG, and after sync the moments); step and
   step_cls are mhe_trainer_step and mhe_trainer_step_cls there; sync brings
   the weights, moments and last loss back into m and *t (before a validation,
   a checkpoint, a progress line and the final evaluation, which run on the
   CPU); close frees it. check refuses a kind the device cannot train before
   anything trains. Runs on a device go one at a time. */
typedef struct {
    const char *name;                  /* "cuda": for messages and settings.txt */
    int (*check)(const mhe_config *c, char *err);
    void *(*open)(mhe_model *m, const mhe_train_config *tc, const char *resume, mhe_trainer **t, char *err);
    mhe_status (*step)(void *h, const int *data, size_t n);
    mhe_status (*step_cls)(void *h, const mhe_text_set *set);
    int (*sync)(void *h, char *err);
    void (*close)(void *h);
} compare_device;

typedef struct {
    int task;                          /* COMPARE_LM or COMPARE_CLS */
    const char *data, *valid;          /* lm: the texts; cls: valid is the validation set */
    const char *pretrain, *train, *test;   /* cls: pretraining corpus, labelled sets */
    const char *tokenizer;             /* a BPE tokenizer file (mhe tokenize), or NULL */
    int subwords;                      /* > 0: a BPE of this many tokens trained on the training text */
    const char *kinds;                 /* comma list of KIND or KIND@LAYOUT (NULL: the MHE paper's eight) */
    int seeds;
    unsigned long long seed, init_seed;   /* run s: batches from seed + s, weights from init_seed + s */
    mhe_config cfg;                    /* the model; attn is set per kind */
    mhe_train_config tc;               /* lm: training; cls: fine-tuning */
    mhe_train_config pre;              /* cls: pretraining */
    int batches;                       /* lm: validation batches of the final metric (0: all of the text) */
    const char *baseline, *reference;  /* PRR against baseline, PEoP against reference */
    const char *pairs;                 /* "A:B,..." : is A better than B? */
    int jobs, threads;                 /* runs at once (0: one per thread); threads in all (0: OpenMP's default) */
    const char *out;                   /* the study's folder */
    int (*stop)(void);                 /* nonzero: stop after the step in flight (a signal came) */
    int quiet;
    const compare_device *device;      /* NULL: the runs train on the CPU */
} compare_opts;

/* ---- small helpers ---------------------------------------------------------- */

static void cmp_err(char *err, const char *fmt, ...)
#if defined(__MINGW_PRINTF_FORMAT)
    __attribute__((format(__MINGW_PRINTF_FORMAT, 2, 3)))   /* mingw: gnu_printf when its C99 stdio is on */
#elif defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void cmp_err(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, MHE_ERR_LEN, fmt, ap);
    va_end(ap);
}

static int cmp_mkdir(const char *path) {
#ifdef _WIN32
    if (_mkdir(path) == 0) return 1;
#else
    if (mkdir(path, 0777) == 0) return 1;
#endif
    if (errno == EEXIST) {
        struct stat s;
        return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
    }
    return 0;
}

static int cmp_exists(const char *path) {
    struct stat s;
    return stat(path, &s) == 0;
}

static uint64_t cmp_fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = (const unsigned char *)p;
    size_t i;
    for (i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ULL; }
    return h;
}

/* ---- statistics over seeds ---------------------------------------------------- */

typedef struct { double mean, std, lo, hi, min, max; int n; } cmp_stats;

/* ln of the regularised incomplete beta's continued fraction, for the t distribution */
static double cmp_betacf(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1), h;
    int m;
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    h = d;
    for (m = 1; m <= 300; m++) {
        double m2 = 2.0 * m, num = m * (b - m) * x / ((a + m2 - 1) * (a + m2)), del;
        d = 1 + num * d; if (fabs(d) < tiny) d = tiny;
        c = 1 + num / c; if (fabs(c) < tiny) c = tiny;
        d = 1 / d; h *= d * c;
        num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
        d = 1 + num * d; if (fabs(d) < tiny) d = tiny;
        c = 1 + num / c; if (fabs(c) < tiny) c = tiny;
        d = 1 / d; del = d * c; h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return h;
}

static double cmp_ibeta(double a, double b, double x) {
    double front;
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log(1 - x));
    /* the fraction converges fast on the side of the mean */
    if (x < (a + 1) / (a + b + 2)) return front * cmp_betacf(a, b, x) / a;
    return 1 - front * cmp_betacf(b, a, 1 - x) / b;
}

/* two-sided p of Student's t with df degrees of freedom */
static double cmp_t_p(double t, double df) { return cmp_ibeta(df / 2, 0.5, df / (df + t * t)); }

/* the t with two-sided p = 0.05 (the 97.5 % quantile), by bisection */
static double cmp_t975(double df) {
    double lo = 0, hi = 1e4;
    int i;
    for (i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (cmp_t_p(mid, df) > 0.05) lo = mid; else hi = mid;
    }
    return (lo + hi) / 2;
}

static cmp_stats cmp_stats_of(const double *x, int n) {
    cmp_stats s;
    double ss = 0, half;
    int i;
    memset(&s, 0, sizeof s);
    s.n = n;
    if (n < 1) return s;
    s.min = s.max = x[0];
    for (i = 0; i < n; i++) {
        s.mean += x[i];
        if (x[i] < s.min) s.min = x[i];
        if (x[i] > s.max) s.max = x[i];
    }
    s.mean /= n;
    for (i = 0; i < n; i++) ss += (x[i] - s.mean) * (x[i] - s.mean);
    s.std = n > 1 ? sqrt(ss / (n - 1)) : 0;   /* sample std */
    half = n > 1 ? cmp_t975(n - 1) * s.std / sqrt((double)n) : 0;
    s.lo = s.mean - half;
    s.hi = s.mean + half;
    return s;
}

/* Welch's t-test of two seed samples: the two-sided p (1 when it cannot tell) */
static double cmp_welch_p(const cmp_stats *a, const cmp_stats *b) {
    double va, vb, se2, df, t;
    if (a->n < 2 || b->n < 2) return 1;
    va = a->std * a->std / a->n;
    vb = b->std * b->std / b->n;
    se2 = va + vb;
    if (se2 <= 0) return a->mean == b->mean ? 1 : 0;   /* no spread at all: any gap is real */
    t = (a->mean - b->mean) / sqrt(se2);
    df = se2 * se2 / ((va > 0 ? va * va / (a->n - 1) : 0) + (vb > 0 ? vb * vb / (b->n - 1) : 0));
    return cmp_t_p(t, df);
}

/* ---- the study ------------------------------------------------------------------- */

typedef struct { int step; double val; } cmp_point;

typedef struct {
    char name[96];           /* as given: KIND or KIND@LAYOUT */
    char dir[64];            /* its runs' folder names: the name with [^A-Za-z0-9._-] as _ */
    mhe_config cfg;
    int64_t attn_params, total_params;
    double kv_bytes;
    /* per seed */
    double metric[COMPARE_MAX_SEEDS], f1[COMPARE_MAX_SEEDS], bpb[COMPARE_MAX_SEEDS], seconds[COMPARE_MAX_SEEDS];
    cmp_point *curve[COMPARE_MAX_SEEDS];
    int n_curve[COMPARE_MAX_SEEDS];
} cmp_kind;

typedef struct {
    const compare_opts *o;
    cmp_kind *kinds;
    int n_kinds;
    mhe_bpe *bpe;            /* the tokenizer of every model, or NULL */
    int *train, *valid;      /* lm: token streams; cls: the pretraining corpus in train */
    size_t n_train, n_valid, valid_bytes;
    mhe_text_set ftrain, fvalid, ftest;
    int n_classes;
    /* the work queue and what the runs share */
    pthread_mutex_t lock;
    int next_run, n_runs, runs_done, failed, stopped;
    long long steps_total, steps_done, steps_at_start;
    double t0;
    char err[MHE_ERR_LEN];
} cmp_study;

static const char *cmp_metric_name(const cmp_study *s) { return s->o->task == COMPARE_LM ? "val ppl" : "test accuracy"; }
static int cmp_lower_better(const cmp_study *s) { return s->o->task == COMPARE_LM; }

/* one thread writes files at a time: mhe.h's list of pending temporary files is per process */
static pthread_mutex_t cmp_write_lock = PTHREAD_MUTEX_INITIALIZER;

static void cmp_fail(cmp_study *s, const char *msg) {
    pthread_mutex_lock(&s->lock);
    if (!s->failed) snprintf(s->err, sizeof s->err, "%s", msg);
    s->failed = 1;
    pthread_mutex_unlock(&s->lock);
}

static int cmp_should_stop(cmp_study *s) {
    int r;
    if (s->o->stop && s->o->stop()) {
        pthread_mutex_lock(&s->lock);
        s->stopped = 1;
        pthread_mutex_unlock(&s->lock);
        return 1;
    }
    pthread_mutex_lock(&s->lock);
    r = s->failed || s->stopped;
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* ---- per-run files: the checkpoint, progress (curve and seconds), the result ---- */

static int cmp_write_text(const char *path, const char *text, char *err) {
    mhe_out w;
    char e[MHE_ERR_LEN];
    int ok;
    pthread_mutex_lock(&cmp_write_lock);
    ok = mhe_out_open(&w, path, e) == MHE_OK;
    if (ok) {
        mhe_out_write(&w, text, strlen(text));
        ok = mhe_out_commit(&w, e) == MHE_OK;
    }
    pthread_mutex_unlock(&cmp_write_lock);
    if (!ok) cmp_err(err, "%s", e);
    return ok;
}

typedef struct { char *p; size_t n, cap; int bad; } cmp_buf;

static void cmp_put(cmp_buf *b, const char *fmt, ...)
#if defined(__MINGW_PRINTF_FORMAT)
    __attribute__((format(__MINGW_PRINTF_FORMAT, 2, 3)))   /* mingw: gnu_printf when its C99 stdio is on */
#elif defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void cmp_put(cmp_buf *b, const char *fmt, ...) {
    va_list ap;
    int k;
    if (b->bad) return;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        k = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) { b->bad = 1; return; }
        if ((size_t)k < room) { b->n += (size_t)k; return; }
        {
            size_t cap = (b->cap + (size_t)k + 1) * 2;
            char *p = (char *)realloc(b->p, cap);
            if (!p) { b->bad = 1; return; }
            b->p = p;
            b->cap = cap;
        }
    }
}

static int cmp_buf_save(cmp_buf *b, const char *path, char *err) {
    int ok;
    if (b->bad) { cmp_err(err, "%s: out of memory", path); free(b->p); return 0; }
    ok = cmp_write_text(path, b->p ? b->p : "", err);
    free(b->p);
    memset(b, 0, sizeof *b);
    return ok;
}

/* the next line of a NUL-terminated buffer, cut in place; NULL at the end */
static char *cmp_line(char **p) {
    char *start = *p, *nl;
    if (!start || !*start) return NULL;
    nl = strchr(start, '\n');
    if (nl) { *nl = 0; *p = nl + 1; }
    else *p = start + strlen(start);
    return start;
}

static char *cmp_slurp(const char *path, size_t *len) {
    void *buf;
    char err[MHE_ERR_LEN];
    size_t n;
    if (mhe_read_file(path, &buf, &n, NULL, err) != MHE_OK) return NULL;
    {
        char *t = (char *)realloc(buf, n + 1);
        if (!t) { free(buf); return NULL; }
        t[n] = 0;
        if (len) *len = n;
        return t;
    }
}

/* progress file: "seconds S" then "STEP VALUE" lines; points past `upto` are dropped (their steps are redone) */
static void cmp_read_progress(const char *path, int upto, cmp_point **pts, int *n, double *seconds) {
    char *t = cmp_slurp(path, NULL), *line, *save = t;
    *n = 0;
    *seconds = 0;
    if (!t) return;
    while ((line = cmp_line(&save)) != NULL) {
        int step;
        double v;
        if (sscanf(line, "seconds %lf", &v) == 1) *seconds = v;
        else if (sscanf(line, "%d %lf", &step, &v) == 2 && step <= upto) {
            cmp_point *p = (cmp_point *)realloc(*pts, (size_t)(*n + 1) * sizeof **pts);
            if (!p) break;
            *pts = p;
            (*pts)[(*n)++].step = step;
            (*pts)[*n - 1].val = v;
        }
    }
    free(t);
}

static int cmp_write_progress(const char *path, const cmp_point *pts, int n, double seconds, char *err) {
    cmp_buf b;
    int i;
    memset(&b, 0, sizeof b);
    cmp_put(&b, "seconds %.17g\n", seconds);
    for (i = 0; i < n; i++) cmp_put(&b, "%d %.9g\n", pts[i].step, pts[i].val);
    return cmp_buf_save(&b, path, err);
}

/* ---- one training stage: steps with validation and checkpoints, resumable ---- */

typedef struct {
    cmp_study *s;
    int run, kind, seed;
    const char *label;           /* "pretrain", "fine-tune" or "" */
    const mhe_train_config *tc;
    int cls;                     /* classification steps on s->ftrain, else LM steps on s->train */
    const int *vdata;            /* LM validation stream (NULL: none) */
    size_t n_vdata;
    char ckpt[MHE_PATH_LEN], progress[MHE_PATH_LEN];
    double seconds;
    cmp_point *pts;
    int n_pts;
} cmp_stage;

static void cmp_progress_line(cmp_stage *g, const mhe_trainer *t, double per_step, const char *val) {
    cmp_study *s = g->s;
    double left_run = per_step * (g->tc->steps - t->step), rate, left;
    pthread_mutex_lock(&s->lock);
    rate = (s->steps_done - s->steps_at_start) / (now_s() - s->t0);
    left = rate > 0 ? (s->steps_total - s->steps_done) / rate : 0;
    if (!s->o->quiet)
        printf("[%d/%d] %s seed %d%s%s: step %d/%d  loss %.4f%s  %.0f ms/step  run left %.0f s  study left %.0f min\n", g->run + 1,
               s->n_runs, s->kinds[g->kind].name, g->seed, *g->label ? " " : "", g->label, t->step, g->tc->steps, t->last_loss, val,
               per_step * 1e3, left_run, left / 60);
    fflush(stdout);
    pthread_mutex_unlock(&s->lock);
}

/* a run's trainer: the library's on the CPU, or o->device's (t: its host half) */
typedef struct { mhe_trainer cpu, *t; void *dev; const compare_device *d; } cmp_trainer;

static int cmp_trainer_open(const cmp_study *s, mhe_model *m, const mhe_train_config *tc, const char *resume, cmp_trainer *ct, char *err) {
    memset(ct, 0, sizeof *ct);
    ct->d = s->o->device;
    if (ct->d) {
        ct->dev = ct->d->open(m, tc, resume, &ct->t, err);
        return ct->dev != NULL;
    }
    if (mhe_trainer_init(&ct->cpu, m, tc) != MHE_OK) { cmp_err(err, "%s", ct->cpu.err); return 0; }
    if (resume && mhe_trainer_load(&ct->cpu, resume) != MHE_OK) {
        cmp_err(err, "%s: %s", resume, ct->cpu.err);
        mhe_trainer_free(&ct->cpu);
        return 0;
    }
    ct->t = &ct->cpu;
    return 1;
}

static mhe_status cmp_trainer_step(cmp_trainer *ct, cmp_study *s, int cls) {
    if (ct->d) return cls ? ct->d->step_cls(ct->dev, &s->ftrain) : ct->d->step(ct->dev, s->train, s->n_train);
    return cls ? mhe_trainer_step_cls(ct->t, &s->ftrain) : mhe_trainer_step(ct->t, s->train, s->n_train);
}

/* the device's state into the host model and trainer (nothing to do on the CPU) */
static int cmp_trainer_sync(cmp_trainer *ct, char *err) { return !ct->d || ct->d->sync(ct->dev, err); }

static void cmp_trainer_close(cmp_trainer *ct) {
    if (ct->d && ct->dev) ct->d->close(ct->dev);
    else if (!ct->d && ct->t) mhe_trainer_free(&ct->cpu);
    ct->dev = NULL;
    ct->t = NULL;
}

static int cmp_save(cmp_stage *g, mhe_model *m, cmp_trainer *ct, double seconds, char *err) {
    int ok;
    if (!cmp_trainer_sync(ct, err)) return 0;
    /* the curve first: a checkpoint never has fewer points than its steps had */
    if (!cmp_write_progress(g->progress, g->pts, g->n_pts, seconds, err)) return 0;
    pthread_mutex_lock(&cmp_write_lock);
    ok = mhe_checkpoint_save(m, ct->t, g->ckpt) == MHE_OK;
    pthread_mutex_unlock(&cmp_write_lock);
    if (!ok) cmp_err(err, "%s", ct->t->err);
    return ok;
}

/* runs the stage's remaining steps on m (fresh or loaded by the caller) with
   trainer ct (restored from g->ckpt when resumed); 1 done, 0 failed, -1 stopped */
static int cmp_train(cmp_stage *g, mhe_model *m, cmp_trainer *ct, char *err) {
    const mhe_train_config *tc = g->tc;
    mhe_trainer *t = ct->t;
    cmp_study *s = g->s;
    double t0 = now_s(), base = g->seconds, tlast = t0;
    int first = t->step, saved = t->step, every = tc->eval_every, save_every = tc->save_every > 0 ? tc->save_every : 100;
    while (t->step < tc->steps) {
        mhe_status st;
        if (cmp_should_stop(s)) {
            if (saved != t->step && !cmp_save(g, m, ct, base + now_s() - t0, err)) return 0;
            return -1;
        }
        st = cmp_trainer_step(ct, s, g->cls);
        if (st != MHE_OK) { cmp_err(err, "step %d: %s", t->step, t->err); return 0; }
        pthread_mutex_lock(&s->lock);
        s->steps_done++;
        pthread_mutex_unlock(&s->lock);
        {
            int has_valid = g->cls ? s->fvalid.n > 0 : g->vdata != NULL;
            int eval_now = has_valid && every > 0 && (t->step % every == 0 || t->step == tc->steps);
            /* a line at each validation, or every 30 s, and at the end */
            int line_now = eval_now || t->step == tc->steps || now_s() - tlast > 30;
            char val[64] = "";
            if (line_now && !cmp_trainer_sync(ct, err)) return 0;   /* the weights to validate, the loss to print */
            if (eval_now) {
                double v;
                if (g->cls) {
                    mhe_cls_metrics r;
                    st = mhe_evaluate_cls(m, &s->fvalid, tc->batch, tc->seq_len, &r);
                    v = r.accuracy;
                    snprintf(val, sizeof val, "  val accuracy %.4f", v);
                } else {
                    float loss;
                    st = mhe_evaluate_s2s(m, g->vdata, g->n_vdata, tc->batch, tc->src_len, tc->seq_len, tc->eval_batches, &loss);
                    v = loss;
                    snprintf(val, sizeof val, "  val loss %.4f", v);
                }
                if (st != MHE_OK) { cmp_err(err, "validation at step %d: %s", t->step, m->err); return 0; }
                {
                    cmp_point *p = (cmp_point *)realloc(g->pts, (size_t)(g->n_pts + 1) * sizeof *p);
                    if (!p) { cmp_err(err, "out of memory"); return 0; }
                    g->pts = p;
                    p[g->n_pts].step = t->step;
                    p[g->n_pts++].val = v;
                }
            }
            if (line_now) {
                cmp_progress_line(g, t, (now_s() - t0) / (t->step - first), val);
                tlast = now_s();
            }
        }
        if ((t->step % save_every == 0 || t->step == tc->steps)) {
            if (!cmp_save(g, m, ct, base + now_s() - t0, err)) return 0;
            saved = t->step;
        }
    }
    g->seconds = base + now_s() - t0;
    return 1;
}

/* a stage's model and trainer: resumed from its checkpoint when there is one, else made by make() */
static int cmp_stage_begin(cmp_stage *g, mhe_model *m, cmp_trainer *ct, int *fresh, char *err) {
    *fresh = !cmp_exists(g->ckpt);
    if (*fresh) { g->n_pts = 0; g->seconds = 0; return 1; }
    if (mhe_model_load(m, g->ckpt, NULL) != MHE_OK) { cmp_err(err, "%s", m->err); return 0; }
    if (!cmp_trainer_open(g->s, m, g->tc, g->ckpt, ct, err)) { mhe_model_free(m); return 0; }
    cmp_read_progress(g->progress, ct->t->step, &g->pts, &g->n_pts, &g->seconds);
    pthread_mutex_lock(&g->s->lock);
    g->s->steps_done += ct->t->step;
    g->s->steps_at_start += ct->t->step;
    pthread_mutex_unlock(&g->s->lock);
    return 1;
}

static void cmp_run_dir(const cmp_study *s, int k, int seed, const char *file, char *out) {
    snprintf(out, MHE_PATH_LEN, "%s/runs/%s-s%d%s%s", s->o->out, s->kinds[k].dir, seed, file ? "/" : "", file ? file : "");
}

/* the result file of a finished run: "key value" lines */
static int cmp_read_result(cmp_study *s, int k, int seed) {
    char path[MHE_PATH_LEN], *t, *line, *save;
    cmp_kind *K = &s->kinds[k];
    int got = 0;
    cmp_run_dir(s, k, seed, "result.txt", path);
    if (!(t = cmp_slurp(path, NULL))) return 0;
    save = t;
    while ((line = cmp_line(&save)) != NULL) {
        double v;
        if (sscanf(line, "metric %lf", &v) == 1) { K->metric[seed] = v; got = 1; }
        else if (sscanf(line, "f1 %lf", &v) == 1) K->f1[seed] = v;
        else if (sscanf(line, "bpb %lf", &v) == 1) K->bpb[seed] = v;
        else if (sscanf(line, "seconds %lf", &v) == 1) K->seconds[seed] = v;
    }
    free(t);
    return got;
}

static int cmp_curve_keep(cmp_study *s, int k, int seed, cmp_stage *g) {
    cmp_kind *K = &s->kinds[k];
    free(K->curve[seed]);
    K->curve[seed] = g->pts;
    K->n_curve[seed] = g->n_pts;
    g->pts = NULL;
    g->n_pts = 0;
    return 1;
}

/* an LM run: train (or resume) and evaluate on the validation text */
static int cmp_run_lm(cmp_study *s, int run, int k, int seed, char *err) {
    const compare_opts *o = s->o;
    cmp_kind *K = &s->kinds[k];
    cmp_stage g;
    mhe_model m;
    cmp_trainer t;
    mhe_train_config tc = o->tc;
    int fresh, rc;
    float loss;
    char path[MHE_PATH_LEN];
    cmp_buf b;
    memset(&g, 0, sizeof g);
    tc.seed = o->seed + (uint64_t)seed;
    g.s = s; g.run = run; g.kind = k; g.seed = seed; g.label = ""; g.tc = &tc; g.vdata = s->valid; g.n_vdata = s->n_valid;
    cmp_run_dir(s, k, seed, "checkpoint.safetensors", g.ckpt);
    cmp_run_dir(s, k, seed, "progress.txt", g.progress);
    if (!cmp_stage_begin(&g, &m, &t, &fresh, err)) return 0;
    if (fresh) {
        if (mhe_model_init(&m, &K->cfg, o->init_seed + (uint64_t)seed, NULL) != MHE_OK) { cmp_err(err, "%s", m.err); return 0; }
        if (s->bpe && mhe_model_set_bpe(&m, s->bpe) != MHE_OK) { cmp_err(err, "%s", m.err); mhe_model_free(&m); return 0; }
        if (!cmp_trainer_open(s, &m, &tc, NULL, &t, err)) { mhe_model_free(&m); return 0; }
    }
    rc = cmp_train(&g, &m, &t, err);
    if (rc == 1 && !cmp_trainer_sync(&t, err)) rc = 0;
    if (rc == 1 && mhe_evaluate_s2s(&m, s->valid, s->n_valid, tc.batch, tc.src_len, tc.seq_len, o->batches, &loss) != MHE_OK) {
        cmp_err(err, "evaluation: %s", m.err);
        rc = 0;
    }
    if (rc == 1) {
        K->metric[seed] = mhe_perplexity(loss);
        /* nats per token over the scored tokens, as bits per byte of the same text */
        K->bpb[seed] = loss / log(2.0) * (double)s->n_valid / (double)s->valid_bytes;
        K->seconds[seed] = g.seconds;
        memset(&b, 0, sizeof b);
        cmp_put(&b, "metric %.17g\nbpb %.17g\nseconds %.17g\nloss %.9g\n", K->metric[seed], K->bpb[seed], g.seconds, loss);
        cmp_run_dir(s, k, seed, "result.txt", path);
        if (!cmp_buf_save(&b, path, err)) rc = 0;
    }
    cmp_curve_keep(s, k, seed, &g);
    cmp_trainer_close(&t);
    mhe_model_free(&m);
    return rc;
}

/* a downstream run: pretrain a masked-LM encoder, fine-tune its classification head, test */
static int cmp_run_cls(cmp_study *s, int run, int k, int seed, char *err) {
    const compare_opts *o = s->o;
    cmp_kind *K = &s->kinds[k];
    cmp_stage g;
    mhe_model m, pre;
    cmp_trainer t;
    mhe_train_config ptc = o->pre, ftc = o->tc;
    int fresh, rc;
    char pre_path[MHE_PATH_LEN], path[MHE_PATH_LEN];
    double pre_seconds;
    mhe_cls_metrics r;
    cmp_buf b;
    ptc.seed = o->seed + (uint64_t)seed;
    ftc.seed = o->seed + (uint64_t)seed;
    /* pretraining; its final checkpoint says it is done */
    memset(&g, 0, sizeof g);
    g.s = s; g.run = run; g.kind = k; g.seed = seed; g.label = "pretrain"; g.tc = &ptc;
    cmp_run_dir(s, k, seed, "pretrain.safetensors", g.ckpt);
    cmp_run_dir(s, k, seed, "pretrain-progress.txt", g.progress);
    snprintf(pre_path, sizeof pre_path, "%s", g.ckpt);
    if (!cmp_stage_begin(&g, &m, &t, &fresh, err)) return 0;
    if (fresh) {
        if (mhe_model_init(&m, &K->cfg, o->init_seed + (uint64_t)seed, NULL) != MHE_OK) { cmp_err(err, "%s", m.err); return 0; }
        if (s->bpe && mhe_model_set_bpe(&m, s->bpe) != MHE_OK) { cmp_err(err, "%s", m.err); mhe_model_free(&m); return 0; }
        if (!cmp_trainer_open(s, &m, &ptc, NULL, &t, err)) { mhe_model_free(&m); return 0; }
    }
    rc = cmp_train(&g, &m, &t, err);
    pre_seconds = g.seconds;
    free(g.pts);
    cmp_trainer_close(&t);
    mhe_model_free(&m);
    if (rc != 1) return rc;
    /* fine-tuning: the pretrained weights and a new head, as `mhe train --task cls --model` */
    memset(&g, 0, sizeof g);
    g.s = s; g.run = run; g.kind = k; g.seed = seed; g.label = "fine-tune"; g.tc = &ftc; g.cls = 1;
    cmp_run_dir(s, k, seed, "finetune.safetensors", g.ckpt);
    cmp_run_dir(s, k, seed, "finetune-progress.txt", g.progress);
    if (!cmp_stage_begin(&g, &m, &t, &fresh, err)) return 0;
    if (fresh) {
        mhe_config c;
        if (mhe_model_load(&pre, pre_path, NULL) != MHE_OK) { cmp_err(err, "%s", pre.err); return 0; }
        c = pre.cfg;
        c.n_classes = s->n_classes;
        if (mhe_model_init_from(&m, &c, &pre, ftc.seed, NULL, NULL) != MHE_OK) {
            cmp_err(err, "%s", m.err);
            mhe_model_free(&pre);
            return 0;
        }
        mhe_model_free(&pre);
        if (!cmp_trainer_open(s, &m, &ftc, NULL, &t, err)) { mhe_model_free(&m); return 0; }
    }
    rc = cmp_train(&g, &m, &t, err);
    if (rc == 1 && !cmp_trainer_sync(&t, err)) rc = 0;
    if (rc == 1 && mhe_evaluate_cls(&m, &s->ftest, ftc.batch, ftc.seq_len, &r) != MHE_OK) {
        cmp_err(err, "test: %s", m.err);
        rc = 0;
    }
    if (rc == 1) {
        /* as mhe eval prints them (4 decimals), so the report is what separate runs give */
        char num[32];
        snprintf(num, sizeof num, "%.4f", r.accuracy);
        K->metric[seed] = strtod(num, NULL);
        snprintf(num, sizeof num, "%.4f", r.macro_f1);
        K->f1[seed] = strtod(num, NULL);
        K->seconds[seed] = pre_seconds + g.seconds;
        memset(&b, 0, sizeof b);
        cmp_put(&b, "metric %.17g\nf1 %.17g\nseconds %.17g\nmcc %.17g\n", K->metric[seed], K->f1[seed], K->seconds[seed], r.mcc);
        cmp_run_dir(s, k, seed, "result.txt", path);
        if (!cmp_buf_save(&b, path, err)) rc = 0;
    }
    cmp_curve_keep(s, k, seed, &g);
    cmp_trainer_close(&t);
    mhe_model_free(&m);
    return rc;
}

static int cmp_run_one(cmp_study *s, int run) {
    int k = run / s->o->seeds, seed = run % s->o->seeds, rc;
    char err[MHE_ERR_LEN], dir[MHE_PATH_LEN], path[MHE_PATH_LEN];
    cmp_kind *K = &s->kinds[k];
    if (cmp_read_result(s, k, seed)) {   /* done before: its numbers and curve */
        cmp_stage g;
        memset(&g, 0, sizeof g);
        cmp_run_dir(s, k, seed, s->o->task == COMPARE_LM ? "progress.txt" : "finetune-progress.txt", path);
        cmp_read_progress(path, 1 << 30, &g.pts, &g.n_pts, &g.seconds);
        cmp_curve_keep(s, k, seed, &g);
        pthread_mutex_lock(&s->lock);
        s->steps_done += s->o->tc.steps + (s->o->task == COMPARE_CLS ? s->o->pre.steps : 0);
        s->steps_at_start += s->o->tc.steps + (s->o->task == COMPARE_CLS ? s->o->pre.steps : 0);
        s->runs_done++;
        if (!s->o->quiet) printf("[%d/%d] %s seed %d: done before (%s %.4f)\n", run + 1, s->n_runs, K->name, seed, cmp_metric_name(s), K->metric[seed]);
        pthread_mutex_unlock(&s->lock);
        return 1;
    }
    cmp_run_dir(s, k, seed, NULL, dir);
    if (!cmp_mkdir(dir)) {
        cmp_err(err, "cannot create %s: %s", dir, strerror(errno));
        cmp_fail(s, err);
        return 0;
    }
    rc = s->o->task == COMPARE_LM ? cmp_run_lm(s, run, k, seed, err) : cmp_run_cls(s, run, k, seed, err);
    if (rc == 0) {
        char msg[MHE_ERR_LEN];
        cmp_err(msg, "%s seed %d: %s", K->name, seed, err);
        cmp_fail(s, msg);
        return 0;
    }
    if (rc == 1) {
        pthread_mutex_lock(&s->lock);
        s->runs_done++;
        if (!s->o->quiet)
            printf("[%d/%d] %s seed %d: %s %.4f in %.0f s (%d of %d runs done)\n", run + 1, s->n_runs, K->name, seed, cmp_metric_name(s),
                   K->metric[seed], K->seconds[seed], s->runs_done, s->n_runs);
        fflush(stdout);
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

typedef struct { cmp_study *s; int threads; } cmp_worker;

static void *cmp_worker_main(void *arg) {
    cmp_worker *w = (cmp_worker *)arg;
    cmp_study *s = w->s;
#ifdef _OPENMP
    if (w->threads > 0) omp_set_num_threads(w->threads);   /* this thread's teams only */
#endif
    for (;;) {
        int run;
        if (cmp_should_stop(s)) break;
        pthread_mutex_lock(&s->lock);
        run = s->next_run < s->n_runs ? s->next_run++ : -1;
        pthread_mutex_unlock(&s->lock);
        if (run < 0) break;
        if (cmp_run_one(s, run) != 1) break;
    }
    return NULL;
}

/* ---- preflight: every bad input refused before the first step ------------------- */

static const char *cmp_paper_kinds = "mha,sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul";

static int cmp_find_kind(const cmp_study *s, const char *name) {
    int k;
    for (k = 0; k < s->n_kinds; k++) if (strcmp(s->kinds[k].name, name) == 0) return k;
    return -1;
}

static int cmp_parse_kinds(cmp_study *s, char *err) {
    const compare_opts *o = s->o;
    const char *p = o->kinds ? o->kinds : cmp_paper_kinds;
    s->kinds = (cmp_kind *)calloc(COMPARE_MAX_KINDS, sizeof *s->kinds);
    if (!s->kinds) { cmp_err(err, "out of memory"); return 0; }
    for (;;) {
        size_t len = strcspn(p, ",");
        cmp_kind *K;
        char e[MHE_ERR_LEN];
        int i;
        if (len == 0 || len >= sizeof K->name) { cmp_err(err, "--kinds '%s': an empty or too long name", o->kinds); return 0; }
        if (s->n_kinds == COMPARE_MAX_KINDS) { cmp_err(err, "--kinds: more than %d kinds", COMPARE_MAX_KINDS); return 0; }
        K = &s->kinds[s->n_kinds];
        memcpy(K->name, p, len);
        K->name[len] = 0;
        for (i = 0; i < s->n_kinds; i++)
            if (strcmp(s->kinds[i].name, K->name) == 0) { cmp_err(err, "--kinds: '%s' is listed twice", K->name); return 0; }
        {   /* the bare kind must be known (the config would name the field only) */
            char bare[96];
            snprintf(bare, sizeof bare, "%.*s", (int)strcspn(K->name, "@"), K->name);
            if (mhe_attn_kind_from_name(bare) < 0) { cmp_err(err, "--kinds: unknown kind '%s'", bare); return 0; }
        }
        K->cfg = o->cfg;
        if (mhe_config_set(&K->cfg, "attn", K->name, e) != MHE_OK) { cmp_err(err, "--kinds %s: %s", K->name, e); return 0; }
        if (o->task == COMPARE_CLS) K->cfg.n_classes = 0;   /* the pretrained encoder has no head yet */
        if (mhe_config_validate(&K->cfg, e) != MHE_OK) { cmp_err(err, "--kinds %s: %s", K->name, e); return 0; }
        if (o->device && o->device->check && !o->device->check(&K->cfg, e)) {
            cmp_err(err, "--kinds %s: --device %s: %s", K->name, o->device->name, e);
            return 0;
        }
        for (i = 0; K->name[i] && i < (int)sizeof K->dir - 1; i++) {
            char c = K->name[i];
            K->dir[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ? c : '_';
        }
        K->dir[i] = 0;
        for (i = 0; i < s->n_kinds; i++)
            if (strcmp(s->kinds[i].dir, K->dir) == 0) {
                cmp_err(err, "--kinds: '%s' and '%s' would share the folder runs/%s-*", s->kinds[i].name, K->name, K->dir);
                return 0;
            }
        s->n_kinds++;
        if (!p[len]) break;
        p += len + 1;
    }
    return 1;
}

/* the sizes every kind's runs report, from a model built once per kind */
static int cmp_kind_sizes(cmp_study *s, char *err) {
    int k, l;
    for (k = 0; k < s->n_kinds; k++) {
        cmp_kind *K = &s->kinds[k];
        mhe_config c = K->cfg;
        mhe_model m;
        if (s->o->task == COMPARE_CLS) c.n_classes = s->n_classes;   /* the tested model carries the head */
        if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { cmp_err(err, "--kinds %s: %s", K->name, m.err); return 0; }
        K->total_params = m.n_params;
        K->attn_params = 0;
        for (l = 0; l < c.n_layers; l++) K->attn_params += mhe_attn_param_count(&c, c.attn[l], 1, c.bias);
        K->kv_bytes = 0;
        if (c.arch == MHE_ARCH_DECODER) {
            mhe_kv_cache kv;
            if (mhe_kv_cache_init(&kv, &m, 1, NULL) == MHE_OK) {
                K->kv_bytes = (double)kv.bytes_per_token;
                mhe_kv_cache_free(&kv);
            }
        }
        mhe_model_free(&m);
    }
    return 1;
}

static int cmp_tokens(const cmp_study *s, const char *flag, const char *path, int **tok, size_t *n, char *err) {
    char e[MHE_ERR_LEN];
    mhe_status st = s->bpe ? mhe_bpe_read_tokens(s->bpe, path, tok, n, NULL, e) : mhe_read_text_tokens(path, tok, n, NULL, e);
    if (st != MHE_OK) { cmp_err(err, "%s: %s", flag, e); return 0; }
    return 1;
}

static int cmp_window(const mhe_config *c, const mhe_train_config *tc) {
    int Ts = tc->src_len > 0 ? tc->src_len : tc->seq_len;
    return c->arch == MHE_ARCH_ENCODER ? tc->seq_len : c->arch == MHE_ARCH_ENCDEC ? Ts + tc->seq_len : tc->seq_len + 1;
}

/* the tokenizer: a file, or one trained on the training text (kept in every checkpoint) */
static int cmp_tokenizer(cmp_study *s, char *err) {
    const compare_opts *o = s->o;
    if (!o->tokenizer && !o->subwords) return 1;
    s->bpe = (mhe_bpe *)malloc(sizeof *s->bpe);
    if (!s->bpe) { cmp_err(err, "out of memory"); return 0; }
    mhe_bpe_init(s->bpe, NULL);
    if (o->tokenizer) {
        if (mhe_bpe_load(s->bpe, o->tokenizer) != MHE_OK) { cmp_err(err, "--tokenizer %s: %s", o->tokenizer, s->bpe->err); return 0; }
    } else {
        /* the encoders' mask is an added token, as `mhe tokenize train --added "<mask>"` makes it */
        static const char *const mask[1] = { "<mask>" };
        const char *from = o->task == COMPARE_LM ? o->data : o->pretrain;
        size_t len;
        char *text = cmp_slurp(from, &len);
        mhe_status st;
        if (!text) { cmp_err(err, "--subwords: cannot read %s", from); return 0; }
        st = mhe_bpe_train(s->bpe, text, len, o->subwords, MHE_BPE_SPLIT_GPT2, o->task == COMPARE_CLS ? mask : NULL, o->task == COMPARE_CLS);
        free(text);
        if (st != MHE_OK) { cmp_err(err, "--subwords %d: %s", o->subwords, s->bpe->err); return 0; }
    }
    return 1;
}

/* a hash set of lines, to find a test text in the pretraining corpus or the training set */
typedef struct { uint64_t *h; size_t n, cap; } cmp_lines;

static int cmp_lines_add(cmp_lines *L, const char *p, size_t n) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 1024;
        uint64_t *h = (uint64_t *)realloc(L->h, cap * sizeof *h);
        if (!h) return 0;
        L->h = h;
        L->cap = cap;
    }
    L->h[L->n++] = cmp_fnv(p, n, 1469598103934665603ULL);
    return 1;
}

static int cmp_u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_lines_has(const cmp_lines *L, const char *p, size_t n) {
    uint64_t h = cmp_fnv(p, n, 1469598103934665603ULL);
    return bsearch(&h, L->h, L->n, sizeof h, cmp_u64_cmp) != NULL;
}

/* every line of the file (tsv: its text after the label, and each tab-separated part of it) */
static int cmp_lines_of(cmp_lines *L, const char *path, int tsv) {
    size_t len;
    char *t = cmp_slurp(path, &len), *p, *end;
    if (!t) return 0;
    for (p = t; p < t + len; p = end + 1) {
        char *q;
        end = (char *)memchr(p, '\n', (size_t)(t + len - p));
        if (!end) end = t + len;
        q = p;
        if (tsv) {
            char *tab = (char *)memchr(p, '\t', (size_t)(end - p));
            if (!tab) continue;
            q = tab + 1;
            if (!cmp_lines_add(L, q, (size_t)(end - q))) break;
            while ((tab = (char *)memchr(q, '\t', (size_t)(end - q))) != NULL) {
                if (!cmp_lines_add(L, q, (size_t)(tab - q))) break;
                q = tab + 1;
            }
        }
        if (end > q && !cmp_lines_add(L, q, (size_t)(end - q))) break;
    }
    free(t);
    qsort(L->h, L->n, sizeof *L->h, cmp_u64_cmp);
    return 1;
}

/* a test text (or a part of a pair) that occurs in the pretraining corpus or the training set */
static int cmp_leak_check(const compare_opts *o, char *err) {
    cmp_lines pre, tr;
    size_t len, line = 0;
    char *t, *p, *end;
    int ok = 1;
    memset(&pre, 0, sizeof pre);
    memset(&tr, 0, sizeof tr);
    if (!cmp_lines_of(&pre, o->pretrain, 0) || !cmp_lines_of(&tr, o->train, 1) || !(t = cmp_slurp(o->test, &len))) {
        cmp_err(err, "cannot read the --pretrain, --train or --test file");
        free(pre.h); free(tr.h);
        return 0;
    }
    for (p = t; ok && p < t + len; p = end + 1) {
        char *tab, *q;
        end = (char *)memchr(p, '\n', (size_t)(t + len - p));
        if (!end) end = t + len;
        line++;
        if (!(tab = (char *)memchr(p, '\t', (size_t)(end - p)))) continue;
        for (q = tab + 1; ok;) {
            char *next = (char *)memchr(q, '\t', (size_t)(end - q));
            char *stop = next ? next : end;
            /* the whole text, then each part of a pair */
            const char *what = NULL;
            if (cmp_lines_has(&pre, tab + 1, (size_t)(end - tab - 1)) || (stop > q && cmp_lines_has(&pre, q, (size_t)(stop - q))))
                what = "--pretrain";
            else if (cmp_lines_has(&tr, tab + 1, (size_t)(end - tab - 1)) || (stop > q && cmp_lines_has(&tr, q, (size_t)(stop - q))))
                what = "--train";
            if (what) {
                cmp_err(err, "--test %s line %zu: its text occurs in %s %s (a test text must be unseen): refused", o->test, line, what,
                        what[2] == 'p' ? o->pretrain : o->train);
                ok = 0;
            }
            if (!next) break;
            q = next + 1;
        }
    }
    free(t); free(pre.h); free(tr.h);
    return ok;
}

static int cmp_load_set(const cmp_study *s, mhe_text_set *set, const char *flag, const char *path, char *err) {
    char e[MHE_ERR_LEN];
    mhe_status st = mhe_text_set_load(set, path, NULL, e);
    if (st == MHE_OK && s->bpe) st = mhe_text_set_bpe(set, s->bpe, e);
    if (st != MHE_OK) { cmp_err(err, "%s: %s", flag, e); return 0; }
    if (set->n == 0) { cmp_err(err, "%s %s: no examples", flag, path); return 0; }
    return 1;
}

static int cmp_labels_in(const mhe_text_set *set, int K, const char *flag, const char *path, char *err) {
    int i;
    for (i = 0; i < set->n; i++)
        if (set->labels[i] >= K) {
            cmp_err(err, "%s %s: example %d has label %d, outside the classes 0..%d of --train", flag, path, i + 1, set->labels[i], K - 1);
            return 0;
        }
    return 1;
}

static int cmp_load_data(cmp_study *s, char *err) {
    const compare_opts *o = s->o;
    const mhe_config *c = &s->kinds[0].cfg;
    if (o->task == COMPARE_LM) {
        int need = cmp_window(c, &o->tc);
        if (!cmp_tokens(s, "--data", o->data, &s->train, &s->n_train, err) || !cmp_tokens(s, "--valid", o->valid, &s->valid, &s->n_valid, err))
            return 0;
        if (s->n_train < (size_t)need) { cmp_err(err, "--data %s: %zu tokens, one training window needs %d (seq_len %d)", o->data, s->n_train, need, o->tc.seq_len); return 0; }
        if (s->n_valid < (size_t)need) { cmp_err(err, "--valid %s: %zu tokens, one validation window needs %d (seq_len %d)", o->valid, s->n_valid, need, o->tc.seq_len); return 0; }
        s->valid_bytes = s->n_valid;
        if (s->bpe) {
            int *b;
            if (mhe_read_text_tokens(o->valid, &b, &s->valid_bytes, NULL, err) != MHE_OK) return 0;
            free(b);
        }
        return 1;
    }
    if (!cmp_tokens(s, "--pretrain", o->pretrain, &s->train, &s->n_train, err)) return 0;
    if (s->n_train < (size_t)cmp_window(c, &o->pre)) {
        cmp_err(err, "--pretrain %s: %zu tokens, one pretraining window needs %d (--pretrain-fields seq_len %d)", o->pretrain, s->n_train,
                cmp_window(c, &o->pre), o->pre.seq_len);
        return 0;
    }
    if (!cmp_load_set(s, &s->ftrain, "--train", o->train, err) || !cmp_load_set(s, &s->fvalid, "--valid", o->valid, err) ||
        !cmp_load_set(s, &s->ftest, "--test", o->test, err))
        return 0;
    s->n_classes = c->n_classes > 0 ? c->n_classes : s->ftrain.n_classes;
    if (s->n_classes < 2) { cmp_err(err, "--train %s: %d class; a classification needs two or more", o->train, s->n_classes); return 0; }
    if (!cmp_labels_in(&s->ftrain, s->n_classes, "--train", o->train, err) || !cmp_labels_in(&s->fvalid, s->n_classes, "--valid", o->valid, err) ||
        !cmp_labels_in(&s->ftest, s->n_classes, "--test", o->test, err))
        return 0;
    return cmp_leak_check(o, err);
}

/* ---- the settings file: a restart with other settings is refused, naming the setting ---- */

static void cmp_hash_file(cmp_buf *b, const char *key, const char *path) {
    size_t len = 0;
    char *t = path ? cmp_slurp(path, &len) : NULL;
    if (!path) return;
    cmp_put(b, "%s %016llx %zu\n", key, (unsigned long long)(t ? cmp_fnv(t, len, 1469598103934665603ULL) : 0), len);
    free(t);
}

static void cmp_settings(const cmp_study *s, cmp_buf *b) {
    const compare_opts *o = s->o;
    const char *key;
    char val[512];
    int i;
    cmp_put(b, "mhe-compare 1\ntask %s\n", o->task == COMPARE_LM ? "lm" : "cls");
    cmp_hash_file(b, o->task == COMPARE_LM ? "data" : "pretrain", o->task == COMPARE_LM ? o->data : o->pretrain);
    cmp_hash_file(b, "valid", o->valid);
    cmp_hash_file(b, "train", o->task == COMPARE_CLS ? o->train : NULL);
    cmp_hash_file(b, "test", o->task == COMPARE_CLS ? o->test : NULL);
    cmp_hash_file(b, "tokenizer", o->tokenizer);
    cmp_put(b, "subwords %d\nkinds %s\nseeds %d\nseed %llu\ninit-seed %llu\n", o->subwords, o->kinds ? o->kinds : cmp_paper_kinds, o->seeds,
            o->seed, o->init_seed);
    if (o->task == COMPARE_LM) cmp_put(b, "batches %d\n", o->batches);
    /* the device's sums round otherwise: a study's runs all train on one */
    cmp_put(b, "device %s\n", o->device ? o->device->name : "cpu");
    for (i = 0; mhe_config_field(&o->cfg, i, &key, val, sizeof val); i++)
        if (strcmp(key, "attn") != 0 && strcmp(key, "layout") != 0) cmp_put(b, "model.%s %s\n", key, val);
    /* what changes no number (log_every, save_every) may differ */
    for (i = 0; mhe_train_config_field(&o->tc, i, &key, val, sizeof val); i++)
        if (strcmp(key, "log_every") != 0 && strcmp(key, "save_every") != 0 && strcmp(key, "seed") != 0) cmp_put(b, "train.%s %s\n", key, val);
    if (o->task == COMPARE_CLS)
        for (i = 0; mhe_train_config_field(&o->pre, i, &key, val, sizeof val); i++)
            if (strcmp(key, "log_every") != 0 && strcmp(key, "save_every") != 0 && strcmp(key, "seed") != 0) cmp_put(b, "pretrain.%s %s\n", key, val);
}

/* the flag that sets a settings key, for the message */
static void cmp_flag_of(const char *key, char *out, size_t n) {
    size_t k = strcspn(key, " ");
    if (strncmp(key, "model.", 6) == 0 || strncmp(key, "train.", 6) == 0) snprintf(out, n, "--%.*s", (int)(k - 6), key + 6);
    else if (strncmp(key, "pretrain.", 9) == 0) snprintf(out, n, "--pretrain-fields %.*s", (int)(k - 9), key + 9);
    else snprintf(out, n, "--%.*s", (int)k, key);
}

static int cmp_check_settings(cmp_study *s, char *err) {
    char path[MHE_PATH_LEN], *old;
    cmp_buf b;
    memset(&b, 0, sizeof b);
    cmp_settings(s, &b);
    if (b.bad) { free(b.p); cmp_err(err, "out of memory"); return 0; }
    snprintf(path, sizeof path, "%s/settings.txt", s->o->out);
    if (!(old = cmp_slurp(path, NULL))) return cmp_buf_save(&b, path, err);
    {
        char *line, *save = old, *mine = b.p;
        int ok = 1;
        while (ok && (line = cmp_line(&save)) != NULL) {
            size_t k = strcspn(line, " ");
            char *p = mine, flag[96];
            /* find the same key in this study's settings */
            while (p && *p && !(strncmp(p, line, k) == 0 && (p[k] == ' ' || p[k] == '\n'))) { p = strchr(p, '\n'); if (p) p++; }
            cmp_flag_of(line, flag, sizeof flag);
            if (!p || !*p) {
                cmp_err(err, "--out %s holds a study with %s, which this one does not set: refused (another --out, or the same settings)",
                        s->o->out, line);
                ok = 0;
            } else {
                size_t n = strcspn(p, "\n");
                if (n != strlen(line) || strncmp(p, line, n) != 0) {
                    const char *what = strncmp(line, "data ", 5) == 0 || strncmp(line, "valid ", 6) == 0 || strncmp(line, "train ", 6) == 0 ||
                                       strncmp(line, "test ", 5) == 0 || strncmp(line, "pretrain ", 9) == 0 || strncmp(line, "tokenizer ", 10) == 0
                                       ? " (the file's content differs)" : "";
                    cmp_err(err, "--out %s holds a study run with other settings: %s was '%s', now '%.*s'%s: refused (another --out, or the same %s)",
                            s->o->out, flag, line + k + 1, (int)(n - k - 1), p + k + 1, what, flag);
                    ok = 0;
                }
            }
        }
        free(old);
        free(b.p);
        return ok;
    }
}

/* ---- the report ---------------------------------------------------------------------- */

static void cmp_seed_stats(const cmp_study *s, const double *x, cmp_stats *st) { *st = cmp_stats_of(x, s->o->seeds); }

/* per seed: PRR of kind k against the baseline, PEoP against the reference (0 when not defined) */
static int cmp_prr(const cmp_study *s, int k, int base, double *out) {
    int i;
    if (base < 0) return 0;
    for (i = 0; i < s->o->seeds; i++) out[i] = mhe_prr(s->kinds[k].metric[i], s->kinds[base].metric[i], cmp_lower_better(s));
    return 1;
}

static int cmp_peop(const cmp_study *s, int k, int ref, double *out) {
    int i;
    const cmp_kind *K = &s->kinds[k], *R;
    if (ref < 0 || ref == k) return 0;
    R = &s->kinds[ref];
    if (K->total_params == R->total_params) return 0;
    for (i = 0; i < s->o->seeds; i++)
        out[i] = mhe_peop(K->metric[i], (double)K->total_params, R->metric[i], (double)R->total_params, cmp_lower_better(s));
    return 1;
}

/* a claim "a is better than b" under Welch's t-test, p < 0.05 */
static void cmp_claim_better(const cmp_study *s, char *out, size_t n, const char *an, const char *bn) {
    int a = cmp_find_kind(s, an), b = cmp_find_kind(s, bn);
    cmp_stats sa, sb;
    double p, gap;
    int lower = cmp_lower_better(s);
    if (a < 0 || b < 0) { snprintf(out, n, "not run (needs %s and %s in --kinds)", an, bn); return; }
    cmp_seed_stats(s, s->kinds[a].metric, &sa);
    cmp_seed_stats(s, s->kinds[b].metric, &sb);
    gap = lower ? sb.mean - sa.mean : sa.mean - sb.mean;   /* > 0: a is better */
    if (s->o->seeds < 2) {
        snprintf(out, n, "not separated: one seed, no test (%s %.4f, %s %.4f)", an, sa.mean, bn, sb.mean);
        return;
    }
    p = cmp_welch_p(&sa, &sb);
    snprintf(out, n, "%s: %s %.4f ± %.4f, %s %.4f ± %.4f; Welch's t-test p = %.3g%s",
             p >= 0.05 ? "not separated" : gap > 0 ? "holds" : "does not hold", an, sa.mean, sa.std, bn, sb.mean, sb.std, p,
             p >= 0.05 ? " (not below 0.05)" : gap > 0 ? "" : " (the other way round)");
}

/* the share of the baseline's score a kind keeps: PRR's 95 % interval against a floor */
static void cmp_claim_retention(const cmp_study *s, char *out, size_t n, const char *kn, const char *basen, double floor) {
    int k = cmp_find_kind(s, kn), b = cmp_find_kind(s, basen);
    double prr[COMPARE_MAX_SEEDS];
    cmp_stats st;
    if (k < 0 || b < 0) { snprintf(out, n, "not run (needs %s and %s in --kinds)", kn, basen); return; }
    cmp_prr(s, k, b, prr);
    cmp_seed_stats(s, prr, &st);
    if (s->o->seeds < 2) {
        snprintf(out, n, "not separated: one seed, no interval (PRR %.1f %%)", 100 * st.mean);
        return;
    }
    if (st.lo >= floor)
        snprintf(out, n, "holds: PRR of %s against %s %.1f %%, 95 %% interval %.1f–%.1f %%, above %.1f %%%s", kn, basen, 100 * st.mean, 100 * st.lo,
                 100 * st.hi, 100 * floor, st.mean > 0.99 && floor < 0.9 ? " (above the paper's 99 % too: as good as the baseline here)" : "");
    else if (st.hi < floor)
        snprintf(out, n, "does not hold: PRR of %s against %s %.1f %%, 95 %% interval %.1f–%.1f %%, below %.1f %%", kn, basen, 100 * st.mean,
                 100 * st.lo, 100 * st.hi, 100 * floor);
    else
        snprintf(out, n, "not separated: PRR of %s against %s %.1f %%, its 95 %% interval %.1f–%.1f %% straddles %.1f %%", kn, basen,
                 100 * st.mean, 100 * st.lo, 100 * st.hi, 100 * floor);
}

typedef struct { char name[200], verdict[400]; } cmp_claim;

static int cmp_claims(const cmp_study *s, cmp_claim *c, int max) {
    int n = 0;
    double floor = s->o->task == COMPARE_LM ? 0.75 : 0.929;
    const char *p = s->o->pairs;
    snprintf(c[n].name, sizeof c[n].name, "mha is better than sha (the reason for several heads)");
    cmp_claim_better(s, c[n].verdict, sizeof c[n].verdict, "mha", "sha"); n++;
    if (s->o->task == COMPARE_LM)
        snprintf(c[n].name, sizeof c[n].name, "mhe-mul keeps 75–99 %% of mha's performance (MHE paper, PRR)");
    else
        snprintf(c[n].name, sizeof c[n].name, "mhe-mul keeps at least 92.9 %% of mha's score (MHE paper Table 3's lowest PRR)");
    cmp_claim_retention(s, c[n].verdict, sizeof c[n].verdict, "mhe-mul", "mha", floor); n++;
    snprintf(c[n].name, sizeof c[n].name, "mhe-mul is better than mhe-add");
    cmp_claim_better(s, c[n].verdict, sizeof c[n].verdict, "mhe-mul", "mhe-add"); n++;
    snprintf(c[n].name, sizeof c[n].name, "mhe-mul is better than sha, at almost its parameter count");
    cmp_claim_better(s, c[n].verdict, sizeof c[n].verdict, "mhe-mul", "sha"); n++;
    while (p && *p && n < max) {   /* the user's pairs A:B */
        size_t len = strcspn(p, ","), colon = strcspn(p, ":");
        char a[96], b[96];
        if (colon < len && colon < sizeof a && len - colon - 1 < sizeof b) {
            snprintf(a, sizeof a, "%.*s", (int)colon, p);
            snprintf(b, sizeof b, "%.*s", (int)(len - colon - 1), p + colon + 1);
            snprintf(c[n].name, sizeof c[n].name, "%.70s is better than %.70s (--pairs)", a, b);
            cmp_claim_better(s, c[n].verdict, sizeof c[n].verdict, a, b);
            n++;
        }
        p += len + (p[len] ? 1 : 0);
    }
    return n;
}

/* ---- plots: values from the same numbers as report.json; each plot's <g> carries its
   axis (data-x0/x1 values at data-left/right pixels, data-y0/y1 at data-bottom/top) */

typedef struct { double left, right, top, bottom, x0, x1, y0, y1; int logx; } cmp_axes;

static double cmp_px(const cmp_axes *a, double v) {
    double f = a->logx ? (log10(v) - log10(a->x0)) / (log10(a->x1) - log10(a->x0)) : (v - a->x0) / (a->x1 - a->x0);
    return a->left + f * (a->right - a->left);
}
static double cmp_py(const cmp_axes *a, double v) { return a->bottom - (v - a->y0) / (a->y1 - a->y0) * (a->bottom - a->top); }

static double cmp_nice(double range, int ticks) {
    double raw = range / ticks, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* a y range with a margin, its ends on ticks */
static void cmp_yrange(cmp_axes *a, double lo, double hi) {
    double step;
    if (!(hi > lo)) { hi = lo + fabs(lo) * 0.01 + 1e-3; lo -= fabs(lo) * 0.01 + 1e-3; }
    step = cmp_nice(hi - lo, 5);
    a->y0 = floor(lo / step) * step;
    a->y1 = ceil(hi / step) * step;
    if (a->y1 <= a->y0) a->y1 = a->y0 + step;
}

static void cmp_svg_begin(FILE *f, double w, double h, const char *title, const char *sub) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    fprintf(f, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n<text x=\"%.1f\" y=\"18\" text-anchor=\"middle\" font-size=\"14\">", w, h, w / 2);
    pl_xml(f, title);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"34\" text-anchor=\"middle\" fill=\"#555\">", w / 2);
    pl_xml(f, sub);
    fprintf(f, "</text>\n");
}

static void cmp_axes_draw(FILE *f, const cmp_axes *a, const char *xlabel, const char *ylabel) {
    double step = cmp_nice(a->y1 - a->y0, 5), v;
    fprintf(f, "<g data-left=\"%.17g\" data-right=\"%.17g\" data-top=\"%.17g\" data-bottom=\"%.17g\" data-x0=\"%.17g\" data-x1=\"%.17g\" "
               "data-y0=\"%.17g\" data-y1=\"%.17g\" data-logx=\"%d\">\n", a->left, a->right, a->top, a->bottom, a->x0, a->x1, a->y0, a->y1, a->logx);
    for (v = a->y0; v <= a->y1 + step * 1e-9; v += step) {
        double y = cmp_py(a, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\">%g</text>\n",
                a->left, y, a->right, y, a->left - 5, y + 4, fabs(v) < step * 1e-9 ? 0 : v);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n",
            a->left, a->bottom, a->right, a->bottom, a->left, a->top, a->left, a->bottom);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (a->left + a->right) / 2, a->bottom + 34);
    pl_xml(f, xlabel);
    fprintf(f, "</text>\n<text transform=\"translate(14 %.1f) rotate(-90)\" text-anchor=\"middle\">", (a->top + a->bottom) / 2);
    pl_xml(f, ylabel);
    fprintf(f, "</text>\n");
}

/* the final metric: each seed a point, the 95 % interval a line with caps, the mean a tick */
static void cmp_plot_final(FILE *f, const cmp_study *s) {
    cmp_axes a;
    double lo = 1e300, hi = -1e300, slot = 80, w;
    int k, i;
    memset(&a, 0, sizeof a);
    for (k = 0; k < s->n_kinds; k++) {
        cmp_stats st;
        cmp_seed_stats(s, s->kinds[k].metric, &st);
        if (st.min < lo) lo = st.min;
        if (st.max > hi) hi = st.max;
        if (st.lo < lo) lo = st.lo;
        if (st.hi > hi) hi = st.hi;
    }
    w = 90 + slot * s->n_kinds;
    if (w < 440) w = 440;
    a.left = 70; a.right = w - 20; a.top = 50; a.bottom = 300; a.x0 = 0; a.x1 = s->n_kinds;
    cmp_yrange(&a, lo, hi);
    cmp_svg_begin(f, w, 360, s->o->task == COMPARE_LM ? "Validation perplexity per kind (lower is better)" : "Test accuracy per kind (higher is better)",
                  "points: seeds; line: 95 % interval of the mean (Student t); tick: mean");
    cmp_axes_draw(f, &a, "", s->o->task == COMPARE_LM ? "validation perplexity" : "test accuracy");
    for (k = 0; k < s->n_kinds; k++) {
        const cmp_kind *K = &s->kinds[k];
        cmp_stats st;
        double x = cmp_px(&a, k + 0.5);
        cmp_seed_stats(s, K->metric, &st);
        fprintf(f, "<g class=\"kind\" data-kind=\"");
        pl_xml(f, K->name);
        fprintf(f, "\">\n");
        if (s->o->seeds > 1)
            fprintf(f, "<line class=\"interval\" x1=\"%.2f\" y1=\"%.4f\" x2=\"%.2f\" y2=\"%.4f\" stroke=\"black\"/>"
                       "<line x1=\"%.2f\" y1=\"%.4f\" x2=\"%.2f\" y2=\"%.4f\" stroke=\"black\"/><line x1=\"%.2f\" y1=\"%.4f\" x2=\"%.2f\" y2=\"%.4f\" stroke=\"black\"/>\n",
                    x, cmp_py(&a, st.lo), x, cmp_py(&a, st.hi), x - 6, cmp_py(&a, st.lo), x + 6, cmp_py(&a, st.lo), x - 6, cmp_py(&a, st.hi), x + 6,
                    cmp_py(&a, st.hi));
        fprintf(f, "<line class=\"mean\" x1=\"%.2f\" y1=\"%.4f\" x2=\"%.2f\" y2=\"%.4f\" stroke=\"%s\" stroke-width=\"3\"/>\n", x - 14, cmp_py(&a, st.mean),
                x + 14, cmp_py(&a, st.mean), pl_color(k));
        for (i = 0; i < s->o->seeds; i++)
            fprintf(f, "<circle class=\"seed\" cx=\"%.2f\" cy=\"%.4f\" r=\"3.5\" fill=\"%s\" fill-opacity=\"0.7\"><title>seed %d: %.6g</title></circle>\n",
                    x + (s->o->seeds > 1 ? (i - (s->o->seeds - 1) / 2.0) * 5 : 0), cmp_py(&a, K->metric[i]), pl_color(k), i, K->metric[i]);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">", x, a.bottom + 16);
        pl_xml(f, K->name);
        fprintf(f, "</text>\n</g>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
}

/* the metric against attention parameters (log scale), the MHE paper's trade-off figure */
static void cmp_plot_tradeoff(FILE *f, const cmp_study *s) {
    cmp_axes a;
    double lo = 1e300, hi = -1e300, pmin = 1e300, pmax = 0;
    int k;
    memset(&a, 0, sizeof a);
    for (k = 0; k < s->n_kinds; k++) {
        cmp_stats st;
        double p = (double)s->kinds[k].attn_params;
        cmp_seed_stats(s, s->kinds[k].metric, &st);
        if (st.lo < lo) lo = st.lo;
        if (st.hi > hi) hi = st.hi;
        if (p > 0 && p < pmin) pmin = p;
        if (p > pmax) pmax = p;
    }
    if (pmax <= 0) { pmin = 1; pmax = 10; }
    a.left = 70; a.right = 580; a.top = 50; a.bottom = 300; a.logx = 1;
    a.x0 = pmin / 1.5; a.x1 = pmax * 1.5;
    cmp_yrange(&a, lo, hi);
    cmp_svg_begin(f, 600, 360, s->o->task == COMPARE_LM ? "Validation perplexity against attention parameters" : "Test accuracy against attention parameters",
                  "mean over seeds with its 95 % interval; x: attention parameters of all layers (log scale)");
    cmp_axes_draw(f, &a, "attention parameters (log scale)", s->o->task == COMPARE_LM ? "validation perplexity" : "test accuracy");
    for (k = 0; k < s->n_kinds; k++) {
        const cmp_kind *K = &s->kinds[k];
        cmp_stats st;
        double x;
        if (K->attn_params <= 0) continue;   /* no attention parameters: off a log axis */
        x = cmp_px(&a, (double)K->attn_params);
        cmp_seed_stats(s, K->metric, &st);
        fprintf(f, "<g class=\"kind\" data-kind=\"");
        pl_xml(f, K->name);
        fprintf(f, "\">");
        if (s->o->seeds > 1)
            fprintf(f, "<line class=\"interval\" x1=\"%.4f\" y1=\"%.4f\" x2=\"%.4f\" y2=\"%.4f\" stroke=\"%s\"/>", x, cmp_py(&a, st.lo), x,
                    cmp_py(&a, st.hi), pl_color(k));
        fprintf(f, "<circle class=\"mean\" cx=\"%.4f\" cy=\"%.4f\" r=\"4\" fill=\"%s\"><title>%lld attention parameters: %.6g</title></circle>"
                   "<text x=\"%.2f\" y=\"%.2f\">", x, cmp_py(&a, st.mean), pl_color(k), (long long)K->attn_params, st.mean, x + 7, cmp_py(&a, st.mean) - 6);
        pl_xml(f, K->name);
        fprintf(f, "</text></g>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
}

/* validation per step: per kind the mean over seeds, a band of ± one std */
static void cmp_plot_curves(FILE *f, const cmp_study *s) {
    cmp_axes a;
    double lo = 1e300, hi = -1e300;
    int k, i, j, maxstep = 1, any = 0;
    memset(&a, 0, sizeof a);
    for (k = 0; k < s->n_kinds; k++)
        for (i = 0; i < s->o->seeds; i++)
            for (j = 0; j < s->kinds[k].n_curve[i]; j++) {
                const cmp_point *p = &s->kinds[k].curve[i][j];
                if (p->val < lo) lo = p->val;
                if (p->val > hi) hi = p->val;
                if (p->step > maxstep) maxstep = p->step;
                any = 1;
            }
    if (!any) { lo = 0; hi = 1; }
    a.left = 70; a.right = 560; a.top = 50; a.bottom = 300; a.x0 = 0; a.x1 = maxstep;
    cmp_yrange(&a, lo, hi);
    cmp_svg_begin(f, 700, 360, s->o->task == COMPARE_LM ? "Validation loss during training" : "Validation accuracy during fine-tuning",
                  "line: mean over seeds; band: ± one std over seeds");
    cmp_axes_draw(f, &a, "step", s->o->task == COMPARE_LM ? "validation loss (nats per token)" : "validation accuracy");
    for (k = 0; k < s->n_kinds; k++) {
        const cmp_kind *K = &s->kinds[k];
        int n = K->n_curve[0];
        for (i = 1; i < s->o->seeds; i++) if (K->n_curve[i] < n) n = K->n_curve[i];
        fprintf(f, "<g class=\"kind\" data-kind=\"");
        pl_xml(f, K->name);
        fprintf(f, "\">\n");
        if (n > 0) {
            double mean[1024], sd[1024];
            int steps[1024];
            if (n > 1024) n = 1024;
            for (j = 0; j < n; j++) {
                double x[COMPARE_MAX_SEEDS];
                cmp_stats st;
                for (i = 0; i < s->o->seeds; i++) x[i] = K->curve[i][j].val;
                st = cmp_stats_of(x, s->o->seeds);
                mean[j] = st.mean; sd[j] = st.std; steps[j] = K->curve[0][j].step;
            }
            fprintf(f, "<polygon class=\"band\" fill=\"%s\" fill-opacity=\"0.2\" stroke=\"none\" points=\"", pl_color(k));
            for (j = 0; j < n; j++) fprintf(f, "%.2f,%.2f ", cmp_px(&a, steps[j]), cmp_py(&a, mean[j] + sd[j]));
            for (j = n - 1; j >= 0; j--) fprintf(f, "%.2f,%.2f ", cmp_px(&a, steps[j]), cmp_py(&a, mean[j] - sd[j]));
            fprintf(f, "\"/>\n<polyline class=\"mean\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", pl_color(k));
            for (j = 0; j < n; j++) fprintf(f, "%.4f,%.4f ", cmp_px(&a, steps[j]), cmp_py(&a, mean[j]));
            fprintf(f, "\"/>\n");
        }
        fprintf(f, "<line x1=\"575\" y1=\"%d\" x2=\"595\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"600\" y=\"%d\">", 60 + 16 * k,
                60 + 16 * k, pl_color(k), 64 + 16 * k);
        pl_xml(f, K->name);
        fprintf(f, "</text>\n</g>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
}

static void cmp_json_array(FILE *f, const double *x, int n) {
    int i;
    fputc('[', f);
    for (i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? ", " : "", x[i]);
    fputc(']', f);
}

static void cmp_json_stats(FILE *f, const char *name, const cmp_stats *st) {
    fprintf(f, "\"%s\": {\"mean\": %.17g, \"std\": %.17g, \"ci95\": [%.17g, %.17g], \"min\": %.17g, \"max\": %.17g}", name, st->mean, st->std,
            st->lo, st->hi, st->min, st->max);
}

static void cmp_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void cmp_write_json(FILE *f, const cmp_study *s, const cmp_claim *c, int nc) {
    const compare_opts *o = s->o;
    int base = cmp_find_kind(s, o->baseline), ref = cmp_find_kind(s, o->reference), k, i;
    fprintf(f, "{\n\"task\": \"%s\", \"metric\": \"%s\", \"lower_is_better\": %s, \"seeds\": %d, \"seed\": %llu, \"init_seed\": %llu,\n",
            o->task == COMPARE_LM ? "lm" : "cls", o->task == COMPARE_LM ? "validation perplexity" : "test accuracy",
            cmp_lower_better(s) ? "true" : "false", o->seeds, o->seed, o->init_seed);
    fprintf(f, "\"baseline\": ");
    cmp_json_str(f, o->baseline);
    fprintf(f, ", \"reference\": ");
    cmp_json_str(f, o->reference);
    fprintf(f, ",\n\"kinds\": [\n");
    for (k = 0; k < s->n_kinds; k++) {
        const cmp_kind *K = &s->kinds[k];
        double x[COMPARE_MAX_SEEDS];
        cmp_stats st;
        fprintf(f, "{\"kind\": ");
        cmp_json_str(f, K->name);
        fprintf(f, ", \"attention_params\": %lld, \"total_params\": %lld, \"kv_bytes_per_token\": %.17g,\n \"metric\": ", (long long)K->attn_params,
                (long long)K->total_params, K->kv_bytes);
        cmp_json_array(f, K->metric, o->seeds);
        cmp_seed_stats(s, K->metric, &st);
        fprintf(f, ", ");
        cmp_json_stats(f, "metric_stats", &st);
        if (o->task == COMPARE_LM) { fprintf(f, ",\n \"bits_per_byte\": "); cmp_json_array(f, K->bpb, o->seeds); }
        else { fprintf(f, ",\n \"macro_f1\": "); cmp_json_array(f, K->f1, o->seeds); }
        fprintf(f, ",\n \"seconds\": ");
        cmp_json_array(f, K->seconds, o->seeds);
        if (cmp_prr(s, k, base, x)) {
            fprintf(f, ",\n \"prr\": ");
            cmp_json_array(f, x, o->seeds);
            cmp_seed_stats(s, x, &st);
            fprintf(f, ", ");
            cmp_json_stats(f, "prr_stats", &st);
        }
        if (cmp_peop(s, k, ref, x)) {
            fprintf(f, ",\n \"peop\": ");
            cmp_json_array(f, x, o->seeds);
            cmp_seed_stats(s, x, &st);
            fprintf(f, ", ");
            cmp_json_stats(f, "peop_stats", &st);
        }
        fprintf(f, "}%s\n", k + 1 < s->n_kinds ? "," : "");
    }
    fprintf(f, "],\n\"claims\": [\n");
    for (i = 0; i < nc; i++) {
        fprintf(f, "{\"claim\": ");
        cmp_json_str(f, c[i].name);
        fprintf(f, ", \"verdict\": ");
        cmp_json_str(f, c[i].verdict);
        fprintf(f, "}%s\n", i + 1 < nc ? "," : "");
    }
    fprintf(f, "]\n}\n");
}

static void cmp_write_md(FILE *f, const cmp_study *s, const cmp_claim *c, int nc) {
    const compare_opts *o = s->o;
    int base = cmp_find_kind(s, o->baseline), ref = cmp_find_kind(s, o->reference), k, i, lm = o->task == COMPARE_LM;
    const mhe_config *cf = &s->kinds[0].cfg;
    char batches[32];
    snprintf(batches, sizeof batches, "%d batches", o->batches);
    fprintf(f, "# Comparison of attention kinds\n\n");
    if (lm)
        fprintf(f, "Language modelling: %s, d_model %d, %d heads, %d layer(s); %d steps of %d x %d tokens, lr %g (min %g, warmup %d); "
                   "%d seed%s per kind (seed s: weights from %llu + s, batches from %llu + s). Training text `%s`, validation text `%s` "
                   "(%s %s); tokens: %s.\n\n",
                cf->arch == MHE_ARCH_ENCODER ? "encoder (masked LM)" : "decoder", cf->d_model, cf->n_heads, cf->n_layers, o->tc.steps, o->tc.batch,
                o->tc.seq_len, (double)o->tc.lr, (double)o->tc.min_lr, o->tc.warmup, o->seeds, o->seeds == 1 ? "" : "s", o->init_seed, o->seed,
                o->data, o->valid, o->batches ? "perplexity over its first" : "perplexity over the whole of it", o->batches ? batches : "",
                s->bpe ? "byte-level BPE (perplexity per token; bits per byte over the same bytes)" : "bytes");
    else
        fprintf(f, "Downstream: a masked-LM encoder (d_model %d, %d heads, %d layers) pretrained on `%s` for %d steps of %d x %d tokens, "
                   "fine-tuned on `%s` (%d classes) for %d steps of %d, tested on `%s` (%d examples); %d seed%s per kind (seed s: weights "
                   "from %llu + s, batches and the new head from %llu + s); tokens: %s.\n\n",
                cf->d_model, cf->n_heads, cf->n_layers, o->pretrain, o->pre.steps, o->pre.batch, o->pre.seq_len, o->train, s->n_classes,
                o->tc.steps, o->tc.batch, o->test, s->ftest.n, o->seeds, o->seeds == 1 ? "" : "s", o->init_seed, o->seed,
                s->bpe ? "byte-level BPE" : "bytes");
    fprintf(f, "± is the sample standard deviation over the seeds, the interval the 95 %% interval of the mean (Student t, n − 1 degrees "
               "of freedom). PRR against %s and PEoP against %s (MHE paper sec. 4.6; %s) are taken per seed, seed i against seed i.\n\n",
            o->baseline, o->reference, lm ? "perplexity as the inverse indicator" : "accuracy as the direct indicator");
    if (lm)
        fprintf(f, "| kind | attention params | total params | val ppl (mean ± std) | 95 %% interval | min–max | bits per byte | PRR vs %s | "
                   "PEoP vs %s | s per run | KV cache bytes/token |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", o->baseline, o->reference);
    else
        fprintf(f, "| kind | attention params | total params | accuracy | 95 %% interval | macro-F1 | PRR vs %s (accuracy) | PEoP vs %s | s per run |\n"
                   "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n", o->baseline, o->reference);
    for (k = 0; k < s->n_kinds; k++) {
        const cmp_kind *K = &s->kinds[k];
        cmp_stats m, x2, tm;
        double x[COMPARE_MAX_SEEDS];
        char prr[64], peop[64];
        cmp_seed_stats(s, K->metric, &m);
        cmp_seed_stats(s, K->seconds, &tm);
        if (cmp_prr(s, k, base, x)) { cmp_seed_stats(s, x, &x2); snprintf(prr, sizeof prr, "%.3f ± %.3f", x2.mean, x2.std); }
        else snprintf(prr, sizeof prr, "(%s not run)", o->baseline);
        if (cmp_peop(s, k, ref, x)) { cmp_seed_stats(s, x, &x2); snprintf(peop, sizeof peop, "%.2f ± %.2f", x2.mean, x2.std); }
        else snprintf(peop, sizeof peop, ref < 0 ? "(%s not run)" : k == ref ? "(reference)" : "(same size as %s)", o->reference);
        if (lm) {
            cmp_seed_stats(s, K->bpb, &x2);
            fprintf(f, "| %s | %lld | %lld | %.3f ± %.3f | %.3f–%.3f | %.3f–%.3f | %.4f ± %.4f | %s | %s | %.0f | %.0f |\n", K->name,
                    (long long)K->attn_params, (long long)K->total_params, m.mean, m.std, m.lo, m.hi, m.min, m.max, x2.mean, x2.std, prr, peop,
                    tm.mean, K->kv_bytes);
        } else {
            cmp_seed_stats(s, K->f1, &x2);
            fprintf(f, "| %s | %lld | %lld | %.3f ± %.3f | %.3f–%.3f | %.3f ± %.3f | %s | %s | %.0f |\n", K->name, (long long)K->attn_params,
                    (long long)K->total_params, m.mean, m.std, m.lo, m.hi, x2.mean, x2.std, prr, peop, tm.mean);
        }
    }
    fprintf(f, "\nClaims (a gap between two kinds counts when Welch's t-test over the seeds gives p < 0.05; a share of %s's score, when "
               "the 95 %% interval of the per-seed PRR lies wholly on one side of the bound; \"not separated\" otherwise):\n\n", o->baseline);
    for (i = 0; i < nc; i++) fprintf(f, "- %s: %s\n", c[i].name, c[i].verdict);
    fprintf(f, "\n![final metric per kind](final.svg)\n\n![metric against attention parameters](tradeoff.svg)\n\n![validation curves](curves.svg)\n");
}

static void cmp_write_curves(FILE *f, const cmp_study *s) {
    int k, i, j;
    fprintf(f, "kind,seed,step,%s\n", s->o->task == COMPARE_LM ? "val_loss" : "val_accuracy");
    for (k = 0; k < s->n_kinds; k++)
        for (i = 0; i < s->o->seeds; i++)
            for (j = 0; j < s->kinds[k].n_curve[i]; j++)
                fprintf(f, "%s,%d,%d,%.9g\n", s->kinds[k].name, i, s->kinds[k].curve[i][j].step, s->kinds[k].curve[i][j].val);
}

static const char *const cmp_outputs[6] = { "report.md", "report.json", "curves.csv", "final.svg", "tradeoff.svg", "curves.svg" };

static int cmp_report(cmp_study *s, char *err) {
    cmp_claim claims[40];
    int nc = cmp_claims(s, claims, 40), i, ok = 1;
    mhe_out w[6];
    char path[MHE_PATH_LEN], e[MHE_ERR_LEN];
    int opened = 0;
    /* every file written in full before any replaces its old version */
    for (i = 0; i < 6 && ok; i++) {
        snprintf(path, sizeof path, "%s/%s", s->o->out, cmp_outputs[i]);
        if (mhe_out_open(&w[i], path, e) != MHE_OK) { cmp_err(err, "%s", e); ok = 0; }
        else opened++;
    }
    if (ok) {
        cmp_write_md(w[0].f, s, claims, nc);
        cmp_write_json(w[1].f, s, claims, nc);
        cmp_write_curves(w[2].f, s);
        cmp_plot_final(w[3].f, s);
        cmp_plot_tradeoff(w[4].f, s);
        cmp_plot_curves(w[5].f, s);
    }
    for (i = 0; i < opened; i++) {
        if (ok && mhe_out_commit(&w[i], e) != MHE_OK) { cmp_err(err, "%s", e); ok = 0; }
        else if (!ok) mhe_out_discard(&w[i]);
    }
    if (ok && !s->o->quiet) {
        printf("\n");
        for (i = 0; i < nc; i++) printf("- %s: %s\n", claims[i].name, claims[i].verdict);
        printf("wrote %s/report.md, report.json, curves.csv, final.svg, tradeoff.svg, curves.svg\n", s->o->out);
    }
    return ok;
}

static void cmp_free(cmp_study *s) {
    int k, i;
    if (s->kinds)
        for (k = 0; k < s->n_kinds; k++)
            for (i = 0; i < COMPARE_MAX_SEEDS; i++) free(s->kinds[k].curve[i]);
    free(s->kinds);
    free(s->train);
    free(s->valid);
    mhe_text_set_free(&s->ftrain);
    mhe_text_set_free(&s->fvalid);
    mhe_text_set_free(&s->ftest);
    if (s->bpe) { mhe_bpe_free(s->bpe); free(s->bpe); }
    pthread_mutex_destroy(&s->lock);
}

/* does the file a name any of the study's outputs? */
static int cmp_same_file(const char *a, const char *b) {
#ifndef _WIN32
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
#endif
    return strcmp(a, b) == 0;
}

static int cmp_check_inputs(const compare_opts *o, char *err) {
    const char *in[7] = { o->data, o->valid, o->pretrain, o->train, o->test, o->tokenizer, NULL };
    static const char *flag[7] = { "--data", "--valid", "--pretrain", "--train", "--test", "--tokenizer", NULL };
    char path[MHE_PATH_LEN];
    int i, j;
    struct stat st;
    for (i = 0; i < 6; i++) {
        if (!in[i]) continue;
        if (stat(in[i], &st) != 0) { cmp_err(err, "%s %s: %s", flag[i], in[i], strerror(errno)); return 0; }
        if (cmp_same_file(in[i], o->out)) { cmp_err(err, "--out %s is the input %s: refused", o->out, flag[i]); return 0; }
        for (j = 0; j < 6; j++) {
            snprintf(path, sizeof path, "%s/%s", o->out, cmp_outputs[j]);
            if (cmp_same_file(in[i], path)) { cmp_err(err, "the output %s is the input %s %s: refused", path, flag[i], in[i]); return 0; }
        }
        snprintf(path, sizeof path, "%s/settings.txt", o->out);
        if (cmp_same_file(in[i], path)) { cmp_err(err, "the output %s is the input %s %s: refused", path, flag[i], in[i]); return 0; }
    }
    return 1;
}

/* the study: checks, the runs (resumed where a previous one stopped), the report.
   Returns COMPARE_OK, COMPARE_FAILED or COMPARE_USAGE (message in err), or
   COMPARE_STOPPED when o->stop asked (every run in flight saved). */
static int compare_run(const compare_opts *o, char *err) {
    cmp_study s;
    int i, rc = COMPARE_OK, jobs;
    char path[MHE_PATH_LEN];
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.lock, NULL);
    s.o = o;
    err[0] = 0;
    if (o->seeds < 1 || o->seeds > COMPARE_MAX_SEEDS) { cmp_err(err, "--seeds %d: 1..%d", o->seeds, COMPARE_MAX_SEEDS); cmp_free(&s); return COMPARE_USAGE; }
    if (o->task == COMPARE_LM ? !o->data || !o->valid : !o->pretrain || !o->train || !o->valid || !o->test) {
        cmp_err(err, o->task == COMPARE_LM ? "language modelling needs --data TRAIN and --valid VALID"
                                           : "--task cls needs --pretrain CORPUS, --train A.tsv, --valid B.tsv and --test C.tsv");
        cmp_free(&s);
        return COMPARE_USAGE;
    }
    if (o->device && o->jobs > 1) {
        cmp_err(err, "--jobs %d: runs on --device %s go one at a time (they would share its default stream)", o->jobs, o->device->name);
        cmp_free(&s);
        return COMPARE_USAGE;
    }
    if (!cmp_parse_kinds(&s, err)) { cmp_free(&s); return COMPARE_USAGE; }
    if (o->task == COMPARE_CLS && s.kinds[0].cfg.arch != MHE_ARCH_ENCODER) { cmp_err(err, "--task cls pretrains encoders: --arch encoder"); cmp_free(&s); return COMPARE_USAGE; }
    for (i = 0; o->pairs && i < 1; i++) {   /* every kind a pair names is in --kinds */
        const char *p = o->pairs;
        while (*p) {
            size_t len = strcspn(p, ","), colon = strcspn(p, ":");
            char a[96], b[96];
            if (colon >= len || colon == 0 || colon + 1 == len || colon >= sizeof a || len - colon - 1 >= sizeof b) {
                cmp_err(err, "--pairs '%s': each item is A:B (is kind A better than kind B?)", o->pairs);
                cmp_free(&s);
                return COMPARE_USAGE;
            }
            snprintf(a, sizeof a, "%.*s", (int)colon, p);
            snprintf(b, sizeof b, "%.*s", (int)(len - colon - 1), p + colon + 1);
            if (cmp_find_kind(&s, a) < 0 || cmp_find_kind(&s, b) < 0) {
                cmp_err(err, "--pairs %s:%s: '%s' is not in --kinds", a, b, cmp_find_kind(&s, a) < 0 ? a : b);
                cmp_free(&s);
                return COMPARE_USAGE;
            }
            p += len + (p[len] ? 1 : 0);
        }
    }
    if (!cmp_check_inputs(o, err) || !cmp_tokenizer(&s, err)) { cmp_free(&s); return COMPARE_FAILED; }
    if (s.bpe) {   /* every model's vocabulary is the tokenizer's */
        for (i = 0; i < s.n_kinds; i++) {
            char e[MHE_ERR_LEN];
            s.kinds[i].cfg.vocab_size = s.bpe->n_tokens;
            if (mhe_config_validate(&s.kinds[i].cfg, e) != MHE_OK) { cmp_err(err, "--kinds %s: %s", s.kinds[i].name, e); cmp_free(&s); return COMPARE_FAILED; }
        }
    }
    if (!cmp_load_data(&s, err) || !cmp_kind_sizes(&s, err)) { cmp_free(&s); return COMPARE_FAILED; }
    snprintf(path, sizeof path, "%s/runs", o->out);
    if (!cmp_mkdir(o->out) || !cmp_mkdir(path)) {
        cmp_err(err, "--out %s: cannot create the folder %s: %s", o->out, path, strerror(errno));
        cmp_free(&s);
        return COMPARE_FAILED;
    }
    if (!cmp_check_settings(&s, err)) { cmp_free(&s); return COMPARE_FAILED; }
    s.n_runs = s.n_kinds * o->seeds;
    s.steps_total = (long long)s.n_runs * (o->tc.steps + (o->task == COMPARE_CLS ? o->pre.steps : 0));
    jobs = o->device ? 1 : o->jobs;
    if (jobs < 1) {   /* the default: a run per thread (faster than threads inside one run: tools/bench/bench_compare.sh) */
        jobs = o->threads;
#ifdef _OPENMP
        if (jobs < 1) jobs = omp_get_max_threads();
#endif
        if (jobs < 1) jobs = 1;
    }
    if (jobs > s.n_runs) jobs = s.n_runs;
    if (!o->quiet)
        printf("%d kinds x %d seeds = %d runs in %s, %d at once%s\n", s.n_kinds, o->seeds, s.n_runs, o->out, jobs,
               o->threads > 0 ? "" : "");
    fflush(stdout);
    s.t0 = now_s();
    if (jobs == 1) {
        cmp_worker w;
        w.s = &s;
        w.threads = o->threads;
        cmp_worker_main(&w);
    } else {
        pthread_t th[64];
        cmp_worker w[64];
        int started = 0, per = o->threads > 0 ? o->threads / jobs : 0;
#ifdef _OPENMP
        if (per == 0) per = omp_get_max_threads() / jobs;
#endif
        if (jobs > 64) jobs = 64;
        for (i = 0; i < jobs; i++) {
            w[i].s = &s;
            w[i].threads = per > 0 ? per : 1;
            if (pthread_create(&th[i], NULL, cmp_worker_main, &w[i]) != 0) break;
            started++;
        }
        if (started == 0) cmp_worker_main(&w[0]);
        for (i = 0; i < started; i++) pthread_join(th[i], NULL);
    }
    if (s.failed) { snprintf(err, MHE_ERR_LEN, "%s", s.err); rc = COMPARE_FAILED; }
    else if (s.stopped || s.runs_done < s.n_runs) rc = COMPARE_STOPPED;
    else if (!cmp_report(&s, err)) rc = COMPARE_FAILED;
    cmp_free(&s);
    return rc;
}
#endif
