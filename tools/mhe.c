/* mhe - command-line front end of mhe.h: init, train, eval, generate, grad, inspect.
   Every subcommand prints its usage with --help. Errors print one line and
   exit with status 1 (2 for a usage error). */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mhe_plots.h"
#include <sys/resource.h>
#include <unistd.h>

static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static double peak_rss_mb(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_maxrss / 1024.0; }

static int rc_opts;   /* what parse_opts said */

static int die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "mhe: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return 1;
}

static void set_threads(int n) {
#ifdef _OPENMP
    if (n > 0) omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* ---- options ------------------------------------------------------------ */

typedef struct {
    mhe_config cfg;
    mhe_train_config tc;
    int cfg_given, tc_keys_given;
    char tc_given[64];                 /* which train fields came from the command line */
    const char *config_path, *model, *out, *data, *valid, *tokens, *resume, *prompt, *source, *task, *indicators;
    uint64_t seed;
    int threads, n_tokens, top_k, batches, quiet, skip, map_len;
    float temperature;
} opts;

static int read_text(const char *path, char **buf, size_t *len) {
    void *b;
    char err[MHE_ERR_LEN];
    if (mhe_read_file(path, &b, len, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    *buf = (char *)b;
    return 1;
}

static int train_field_index(const char *key) {
    mhe_train_config t = mhe_train_config_default();
    const char *k;
    char v[64];
    int i;
    for (i = 0; mhe_train_config_field(&t, i, &k, v, sizeof v); i++) if (strcmp(k, key) == 0) return i;
    return -1;
}

static int model_field(const char *key) {
    mhe_config c = mhe_config_default();
    const char *k;
    char v[512];
    int i;
    for (i = 0; mhe_config_field(&c, i, &k, v, sizeof v); i++) if (strcmp(k, key) == 0) return 1;
    return 0;
}

/* --key value for config and train fields, and the tool's own flags.
   Returns 1, 0 for a bad value (exit 1) or -1 for a usage error (exit 2). */
static int parse_opts(int argc, char **argv, opts *o) {
    int i;
    char err[MHE_ERR_LEN];
    memset(o, 0, sizeof *o);
    o->cfg = mhe_config_default();
    o->tc = mhe_train_config_default();
    o->seed = 42; o->n_tokens = 200; o->top_k = 40; o->temperature = 0.8f; o->batches = 50; o->map_len = 32;
    /* the config file first, so flags override it */
    for (i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0) {
            char *text;
            size_t len;
            if (!read_text(argv[i + 1], &text, &len)) return 0;
            if (mhe_config_parse(&o->cfg, text, len, err) != MHE_OK) {
                fprintf(stderr, "mhe: %s: %s\n", argv[i + 1], err);
                free(text);
                return 0;
            }
            free(text);
            o->cfg_given = 1;
        }
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char *key = a + 2;
        if (strncmp(a, "--", 2) != 0) { fprintf(stderr, "mhe: unexpected argument '%s'\n", a); return -1; }
        if (strcmp(a, "--quiet") == 0) { o->quiet = 1; continue; }
        if (strcmp(a, "--skip") == 0) { o->skip = 1; continue; }
        if (!v) { fprintf(stderr, "mhe: option %s needs a value\n", a); return -1; }
        i++;
        if (strcmp(key, "config") == 0) continue;
        else if (strcmp(key, "model") == 0) o->model = v;
        else if (strcmp(key, "out") == 0) o->out = v;
        else if (strcmp(key, "data") == 0) o->data = v;
        else if (strcmp(key, "valid") == 0) o->valid = v;
        else if (strcmp(key, "tokens") == 0) o->tokens = v;
        else if (strcmp(key, "resume") == 0) o->resume = v;
        else if (strcmp(key, "prompt") == 0) o->prompt = v;
        else if (strcmp(key, "source") == 0) o->source = v;
        else if (strcmp(key, "indicators") == 0) o->indicators = v;
        else if (strcmp(key, "map-len") == 0) o->map_len = atoi(v);
        else if (strcmp(key, "task") == 0) {
            if (strcmp(v, "lm") != 0 && strcmp(v, "cls") != 0) { fprintf(stderr, "mhe: --task is lm or cls, not '%s'\n", v); return -1; }
            o->task = v;
        }
        else if (strcmp(key, "threads") == 0) o->threads = atoi(v);
        else if (strcmp(key, "n") == 0 || strcmp(key, "length") == 0) o->n_tokens = atoi(v);
        else if (strcmp(key, "top-k") == 0) o->top_k = atoi(v);
        else if (strcmp(key, "batches") == 0) o->batches = atoi(v);
        else if (strcmp(key, "temperature") == 0) o->temperature = (float)atof(v);
        else if (strcmp(key, "seed") == 0 && strcmp(argv[1], "init") == 0) o->seed = strtoull(v, NULL, 10);
        else if (model_field(key)) {
            if (mhe_config_set(&o->cfg, key, v, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
            o->cfg_given = 1;
        } else if (train_field_index(key) >= 0) {
            if (mhe_train_config_set(&o->tc, key, v, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
            o->tc_given[train_field_index(key)] = 1;
        } else { fprintf(stderr, "mhe: unknown option %s (see --help)\n", a); return -1; }
    }
    if (o->threads < 0 || o->n_tokens < 0) { fprintf(stderr, "mhe: --threads and --n must be >= 0\n"); return 0; }
    set_threads(o->threads);
    return 1;
}

static void print_fields(FILE *f, int model) {
    mhe_config c = mhe_config_default();
    mhe_train_config t = mhe_train_config_default();
    const char *k;
    char v[512];
    int i;
    if (model) for (i = 0; mhe_config_field(&c, i, &k, v, sizeof v); i++) fprintf(f, "    --%-16s (default %s)\n", k, v);
    else for (i = 0; mhe_train_config_field(&t, i, &k, v, sizeof v); i++) fprintf(f, "    --%-16s (default %s)\n", k, v);
}

/* bytes of a text file as tokens; rejects empty and binary files */
static int load_corpus(const char *path, int **tokens, size_t *n) {
    char err[MHE_ERR_LEN];
    if (!path) { fprintf(stderr, "mhe: no corpus given (--data FILE)\n"); return 0; }
    if (mhe_read_text_tokens(path, tokens, n, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    return 1;
}

static int load_model(const char *path, mhe_model *m) {
    mhe_status s;
    if (!path) { fprintf(stderr, "mhe: no model given (--model FILE)\n"); return 0; }
    s = mhe_model_load(m, path, NULL);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s (%s)\n", m->err, mhe_status_str(s)); return 0; }
    return 1;
}

static void describe(const mhe_model *m) {
    const char *k;
    char v[512];
    int i;
    printf("model:");
    for (i = 0; mhe_config_field(&m->cfg, i, &k, v, sizeof v); i++) printf(" %s=%s", k, v);
    printf("\nparameters: %lld (%.2f M)\n", (long long)m->n_params, m->n_params / 1e6);
}

/* ---- init --------------------------------------------------------------- */

static int cmd_init(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_status s;
    if (argc > 2 && strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe init [--config CFG] [--KEY VALUE ...] [--seed S] --out MODEL.safetensors\n"
               "Creates a model with freshly initialised weights. CFG holds key=value lines;\n"
               "flags override it. Model fields:\n");
        print_fields(stdout, 1);
        return 0;
    }
    if ((rc_opts = parse_opts(argc, argv, &o)) <= 0) return rc_opts < 0 ? 2 : 1;
    if (!o.out) return die("init: --out FILE is required%s%s", "", "");
    s = mhe_model_init(&m, &o.cfg, o.seed, NULL);
    if (s != MHE_OK) return die("init: %s%s", m.err, "");
    s = mhe_checkpoint_save(&m, NULL, o.out);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); mhe_model_free(&m); return 1; }
    describe(&m);
    printf("wrote %s\n", o.out);
    mhe_model_free(&m);
    return 0;
}

/* ---- train -------------------------------------------------------------- */

static void print_cls(const char *what, const mhe_cls_metrics *r) {
    printf("%s loss %.4f  accuracy %.4f  macro-F1 %.4f  MCC %.4f  (%lld examples)\n", what, r->loss, r->accuracy,
           r->macro_f1, r->mcc, (long long)r->n);
}

/* the train settings saved in the --resume checkpoint, overridden by flags given now */
static int resume_settings(opts *o) {
    void *buf;
    size_t size;
    mhe_safetensors st;
    char err[MHE_ERR_LEN];
    mhe_train_config tc = mhe_train_config_default();
    const char *k;
    char v[64];
    int i;
    if (mhe_read_file(o->resume, &buf, &size, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 0; }
    if (mhe_st_parse(&st, buf, size, NULL) == MHE_OK) {
        for (i = 0; mhe_train_config_field(&tc, i, &k, v, sizeof v); i++) {
            char key[64];
            const char *val;
            snprintf(key, sizeof key, "train.%s", k);
            val = mhe_st_meta(&st, key);
            if (val && !o->tc_given[i]) mhe_train_config_set(&o->tc, k, val, err);
        }
        mhe_st_free(&st);
    }
    free(buf);
    return 1;
}

/* mhe train --task cls: the classification head of an encoder on labelled texts */
static int train_cls(opts *o) {
    mhe_text_set train, valid;
    mhe_model m;
    mhe_trainer t;
    mhe_cls_metrics r;
    char err[MHE_ERR_LEN];
    int rc = 1, tty = isatty(1), first;
    double t0;
    memset(&valid, 0, sizeof valid);
    if (!o->data) { fprintf(stderr, "mhe: no training data given (--data FILE)\n"); return 1; }
    if (mhe_text_set_load(&train, o->data, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 1; }
    if (o->valid && mhe_text_set_load(&valid, o->valid, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); mhe_text_set_free(&train); return 1; }
    if (o->resume || o->model) {
        if (!load_model(o->resume ? o->resume : o->model, &m)) goto out;
        if (o->resume && !resume_settings(o)) { mhe_model_free(&m); goto out; }
    } else {
        if (o->cfg.n_classes == 0) o->cfg.n_classes = train.n_classes > valid.n_classes ? train.n_classes : valid.n_classes;
        if (mhe_model_init(&m, &o->cfg, o->tc.seed, NULL) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto out; }
    }
    if (m.cfg.n_classes < 1) { fprintf(stderr, "mhe: --task cls needs a model with a classification head (arch=encoder, n_classes > 0)\n"); mhe_model_free(&m); goto out; }
    if (mhe_trainer_init(&t, &m, &o->tc) != MHE_OK) { fprintf(stderr, "mhe: %s\n", t.err); mhe_model_free(&m); goto out; }
    if (o->resume && mhe_trainer_load(&t, o->resume) != MHE_OK) { fprintf(stderr, "mhe: %s: %s\n", o->resume, t.err); goto free_all; }
    if (!o->quiet) {
        describe(&m);
        printf("data: %d training examples, %d validation examples, %d classes\n", train.n, valid.n, m.cfg.n_classes);
    }
    t0 = now_s();
    first = t.step;
    while (t.step < o->tc.steps) {
        mhe_status s = mhe_trainer_step_cls(&t, &train);
        if (s != MHE_OK) { fprintf(stderr, "\nmhe: step %d: %s (%s)\n", t.step, t.err, mhe_status_str(s)); goto free_all; }
        if (!o->quiet && (t.step % o->tc.log_every == 0 || t.step == o->tc.steps)) {
            double el = now_s() - t0, per = el / (t.step - first);
            printf("%sstep %6d/%d  loss %.4f  lr %.2e  %5.0f ms/step  left %4.0fs%s", tty ? "\r" : "", t.step, o->tc.steps,
                   t.last_loss, t.last_lr, per * 1e3, per * (o->tc.steps - t.step), tty ? "" : "\n");
            fflush(stdout);
        }
        if (valid.n && o->tc.eval_every > 0 && (t.step % o->tc.eval_every == 0 || t.step == o->tc.steps)) {
            if (mhe_evaluate_cls(&m, &valid, o->tc.batch, o->tc.seq_len, &r) != MHE_OK) { fprintf(stderr, "\nmhe: validation: %s\n", m.err); goto free_all; }
            if (!o->quiet) { printf("%sstep %6d  ", tty ? "\n" : "", t.step); print_cls("val", &r); }
        }
        if (o->tc.save_every > 0 && t.step % o->tc.save_every == 0 && t.step < o->tc.steps &&
            mhe_checkpoint_save(&m, &t, o->out) != MHE_OK) { fprintf(stderr, "\nmhe: %s\n", t.err); goto free_all; }
    }
    if (mhe_checkpoint_save(&m, &t, o->out) != MHE_OK) { fprintf(stderr, "\nmhe: %s\n", t.err); goto free_all; }
    if (!o->quiet) {
        printf("%swrote %s\n", tty ? "\n" : "", o->out);
        printf("peak memory: %.1f MB resident (library: %.1f MB parameters+gradients, %.1f MB activations, %.1f MB AdamW)\n",
               peak_rss_mb(), m.bytes_params / 1e6, m.bytes_acts / 1e6, 2.0 * m.n_params * 4 / 1e6);
    }
    rc = 0;
free_all:
    mhe_trainer_free(&t);
    mhe_model_free(&m);
out:
    mhe_text_set_free(&train);
    mhe_text_set_free(&valid);
    return rc;
}

static int cmd_train(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_trainer t;
    mhe_status s;
    int *train = NULL, *valid = NULL, rc = 1, tty = isatty(1);
    size_t n_train = 0, n_valid = 0;
    double t0;
    float val_loss = 0;
    int first_step;
    if (argc > 2 && strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe train --data TRAIN.txt [--valid VALID.txt] --out CKPT.safetensors\n"
               "                 [--model M.safetensors | --config CFG | --KEY VALUE ...]\n"
               "                 [--resume CKPT.safetensors] [--task lm|cls] [--threads N] [train flags]\n"
               "Trains a byte-level model. --task lm (default): a decoder learns the next byte, an\n"
               "encoder masked bytes (mlm_prob), an encoder-decoder (arch=encdec) continues a text:\n"
               "its encoder reads src_len bytes, its decoder predicts the seq_len bytes after them.\n"
               "--task cls: an encoder's classification head learns labelled texts, one\n"
               "`label<TAB>text` line each (integer labels; n_classes defaults to the largest + 1);\n"
               "validation prints loss, accuracy, macro-F1 and MCC.\n"
               "A new model comes from --model (weights) or from\n"
               "--config/model flags; --resume continues a checkpoint written by this command\n"
               "exactly where it stopped (weights, AdamW moments, RNG, step; the train settings\n"
               "saved in it are used unless a flag overrides them). Progress: step, loss,\n"
               "tokens/s, learning rate and time left; validation loss and perplexity every\n"
               "eval_every steps; peak memory at the end. Checkpoints are written atomically\n"
               "every save_every steps and at the end. Train fields:\n");
        print_fields(stdout, 0);
        printf("Model fields (for a new model): see `mhe init --help`.\n");
        return 0;
    }
    if ((rc_opts = parse_opts(argc, argv, &o)) <= 0) return rc_opts < 0 ? 2 : 1;
    if (!o.out) return die("train: --out FILE is required%s%s", "", "");
    if (o.task && strcmp(o.task, "cls") == 0) return train_cls(&o);
    if (!load_corpus(o.data, &train, &n_train)) return 1;
    if (o.valid && !load_corpus(o.valid, &valid, &n_valid)) { free(train); return 1; }
    if (o.resume) {
        if (!load_model(o.resume, &m)) goto out;
        if (!resume_settings(&o)) { mhe_model_free(&m); goto out; }
    } else if (o.model) {
        if (!load_model(o.model, &m)) goto out;
    } else {
        s = mhe_model_init(&m, &o.cfg, o.tc.seed, NULL);
        if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto out; }
    }
    s = mhe_trainer_init(&t, &m, &o.tc);
    if (s != MHE_OK) { fprintf(stderr, "mhe: %s\n", t.err); mhe_model_free(&m); goto out; }
    if (o.resume && (s = mhe_trainer_load(&t, o.resume)) != MHE_OK) {
        fprintf(stderr, "mhe: %s: %s\n", o.resume, t.err);
        goto free_all;
    }
    {
        size_t need = (size_t)o.tc.seq_len + (m.cfg.arch == MHE_ARCH_ENCDEC ? (size_t)(o.tc.src_len > 0 ? o.tc.src_len : o.tc.seq_len) : 1);
        if (n_train < need) { fprintf(stderr, "mhe: %s: corpus has %zu bytes, a training window needs %zu\n", o.data, n_train, need); goto free_all; }
    }
    if (!o.quiet) {
        describe(&m);
        printf("data: %zu train tokens, %zu valid tokens; unigram entropy %.3f nats\n", n_train, n_valid,
               mhe_unigram_entropy(train, n_train, m.cfg.vocab_size));
        printf("training %d steps of %d x %d tokens%s\n", o.tc.steps, o.tc.batch, o.tc.seq_len,
               t.step ? " (resumed)" : "");
    }
    t0 = now_s();
    first_step = t.step;
    while (t.step < o.tc.steps) {
        s = mhe_trainer_step(&t, train, n_train);
        if (s != MHE_OK) { fprintf(stderr, "\nmhe: step %d: %s (%s)\n", t.step, t.err, mhe_status_str(s)); goto free_all; }
        if (!o.quiet && (t.step % o.tc.log_every == 0 || t.step == o.tc.steps)) {
            double el = now_s() - t0, per = el / (t.step - first_step);
            double tps = (double)(t.step - first_step) * o.tc.batch * o.tc.seq_len / el;
            printf("%sstep %6d/%d  loss %.4f  lr %.2e  %7.0f tok/s  %5.0f ms/step  left %4.0fs%s",
                   tty ? "\r" : "", t.step, o.tc.steps, t.last_loss, t.last_lr, tps, per * 1e3,
                   per * (o.tc.steps - t.step), tty ? "" : "\n");
            fflush(stdout);
        }
        if (valid && o.tc.eval_every > 0 && (t.step % o.tc.eval_every == 0 || t.step == o.tc.steps)) {
            s = mhe_evaluate_s2s(&m, valid, n_valid, o.tc.batch, o.tc.src_len, o.tc.seq_len, o.tc.eval_batches, &val_loss);
            if (s != MHE_OK) { fprintf(stderr, "\nmhe: validation: %s\n", m.err); goto free_all; }
            if (!o.quiet) printf("%sstep %6d  val loss %.4f  val ppl %.3f\n", tty ? "\n" : "", t.step, val_loss, mhe_perplexity(val_loss));
        }
        if (o.tc.save_every > 0 && t.step % o.tc.save_every == 0 && t.step < o.tc.steps) {
            if (mhe_checkpoint_save(&m, &t, o.out) != MHE_OK) { fprintf(stderr, "\nmhe: %s\n", t.err); goto free_all; }
        }
    }
    if (mhe_checkpoint_save(&m, &t, o.out) != MHE_OK) { fprintf(stderr, "\nmhe: %s\n", t.err); goto free_all; }
    if (!o.quiet) {
        printf("%sfinal train loss %.4f", tty ? "\n" : "", t.last_loss);
        if (valid) printf(", val loss %.4f (ppl %.3f)", val_loss, mhe_perplexity(val_loss));
        printf("\nwrote %s\n", o.out);
        printf("peak memory: %.1f MB resident (library: %.1f MB parameters+gradients, %.1f MB activations, %.1f MB AdamW)\n",
               peak_rss_mb(), m.bytes_params / 1e6, m.bytes_acts / 1e6, 2.0 * m.n_params * 4 / 1e6);
    }
    rc = 0;
free_all:
    mhe_trainer_free(&t);
    mhe_model_free(&m);
out:
    free(train); free(valid);
    return rc;
}

/* ---- eval --------------------------------------------------------------- */

/* PREFIX.csv, PREFIX.svg and PREFIX_maps.svg of mhe eval --indicators */
static int write_indicators(const opts *o, mhe_model *m, const int *data, size_t n) {
    mhe_indicators ind;
    const mhe_indicators *one = &ind;
    const char *label = o->model;
    char path[4096];
    FILE *f;
    int i, len = o->map_len < 1 ? 1 : o->map_len > o->tc.seq_len ? o->tc.seq_len : o->map_len, *tok;
    if (m->cfg.arch == MHE_ARCH_ENCDEC) { fprintf(stderr, "mhe: --indicators: decoder and encoder models only\n"); return 1; }
    if (mhe_indicators_eval(m, data, n, o->tc.batch, o->tc.seq_len, o->batches, &ind) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m->err); return 1; }
    printf("indicators over %lld sequences of %d bytes (reference path; layer means over heads):\n", (long long)ind.sequences, o->tc.seq_len);
    printf("  layer %-12s", "kind");
    for (i = 0; i < MHE_IND_COUNT; i++) printf(" %12s", mhe_ind_name(i));
    printf("\n");
    for (i = 0; i < ind.n_layers; i++) {
        int k;
        printf("  %5d %-12s", i, mhe_attn_kind_name(ind.kind[i]));
        for (k = 0; k < MHE_IND_COUNT; k++) {
            if (ind.has_map[i]) printf(" %12.4f", mhe_indicator(&ind, i, -1, k));
            else printf(" %12s", "-");
        }
        printf("\n");
    }
    snprintf(path, sizeof path, "%s.csv", o->indicators);
    if (!(f = fopen(path, "w"))) { fprintf(stderr, "mhe: cannot write %s\n", path); mhe_indicators_free(&ind); return 1; }
    pl_ind_csv(f, &ind, label, 1);
    fclose(f);
    printf("wrote %s\n", path);
    snprintf(path, sizeof path, "%s.svg", o->indicators);
    if (!(f = fopen(path, "w"))) { fprintf(stderr, "mhe: cannot write %s\n", path); mhe_indicators_free(&ind); return 1; }
    pl_ind_svg(f, &one, &label, 1, "Attention-pattern indicators per layer (mean over heads)");
    fclose(f);
    printf("wrote %s\n", path);
    mhe_indicators_free(&ind);
    if (n < (size_t)len) len = (int)n;
    tok = (int *)malloc((size_t)len * sizeof(int));
    snprintf(path, sizeof path, "%s_maps.svg", o->indicators);
    if (!tok || !(f = fopen(path, "w"))) { fprintf(stderr, "mhe: cannot write %s\n", path); free(tok); return 1; }
    for (i = 0; i < len; i++) tok[i] = data[i];
    if (!pl_heatmap_svg(f, m, tok, len, "Attention maps of the first bytes (rows: queries, columns: keys)")) {
        fprintf(stderr, "mhe: heat-maps: %s\n", m->err); fclose(f); free(tok); return 1;
    }
    fclose(f);
    free(tok);
    printf("wrote %s\n", path);
    return 0;
}

static int cmd_eval(int argc, char **argv) {
    opts o;
    mhe_model m;
    int *data;
    size_t n;
    float loss;
    if (argc > 2 && strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe eval --model M.safetensors --data TEXT [--seq_len T] [--src_len S] [--batch B] [--batches N]\n"
               "                [--task lm|cls] [--skip] [--indicators PREFIX [--map-len N]] [--threads N]\n"
               "Mean cross-entropy (nats per byte), perplexity and bits per byte over up to N batches of\n"
               "consecutive windows of the text (N <= 0: all of it), shaped as `mhe train` shapes them.\n"
               "--task cls: loss, accuracy, macro-F1 and MCC of the classification head on every\n"
               "`label<TAB>text` line of TEXT (cut to seq_len bytes).\n"
               "--skip: the self-attention sublayers of the layers that are not mha become the identity\n"
               "(a hybrid evaluated \"with skip\", thesis Table 4.1).\n"
               "--indicators PREFIX: the attention-pattern indicators (thesis sec. 4.4.4: Entropy, Conc,\n"
               "HeadDiv, Sink, LocFoc0..3) of every layer and head over the evaluation batches, from the\n"
               "probabilities of the reference path; writes PREFIX.csv, PREFIX.svg (a chart per layer) and\n"
               "PREFIX_maps.svg (heat-maps of every layer and head for the first --map-len bytes, default 32).\n");
        return 0;
    }
    if ((rc_opts = parse_opts(argc, argv, &o)) <= 0) return rc_opts < 0 ? 2 : 1;
    if (!load_model(o.model, &m)) return 1;
    if (o.skip) {   /* hybrids "with skip": every layer whose kind is not mha loses its attention */
        int l, E = m.cfg.arch == MHE_ARCH_ENCDEC ? m.cfg.enc_layers : 0;
        for (l = 0; l < m.cfg.n_layers; l++) if (m.layers[E + l].attn.kind != MHE_ATTN_MHA) m.skip_attn |= (uint64_t)1 << l;
        if (!m.skip_attn) { fprintf(stderr, "mhe: --skip: every layer of this model is mha, nothing to skip\n"); mhe_model_free(&m); return 1; }
        printf("skipping the attention of layers");
        for (l = 0; l < m.cfg.n_layers; l++) if (m.skip_attn >> l & 1) printf(" %d (%s)", l, mhe_attn_kind_name(m.layers[E + l].attn.kind));
        printf("\n");
    }
    if (o.task && strcmp(o.task, "cls") == 0) {
        mhe_text_set set;
        mhe_cls_metrics r;
        char err[MHE_ERR_LEN];
        int rc = 1;
        if (o.tc.seq_len > m.cfg.max_seq_len) o.tc.seq_len = m.cfg.max_seq_len;
        if (!o.data) { fprintf(stderr, "mhe: no data given (--data FILE)\n"); mhe_model_free(&m); return 1; }
        if (mhe_text_set_load(&set, o.data, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); mhe_model_free(&m); return 1; }
        if (mhe_evaluate_cls(&m, &set, o.tc.batch, o.tc.seq_len, &r) != MHE_OK) fprintf(stderr, "mhe: %s\n", m.err);
        else { print_cls("", &r); rc = 0; }
        mhe_text_set_free(&set);
        mhe_model_free(&m);
        return rc;
    }
    if (!load_corpus(o.data, &data, &n)) { mhe_model_free(&m); return 1; }
    if (o.tc.seq_len > m.cfg.max_seq_len) o.tc.seq_len = m.cfg.max_seq_len;
    if (o.tc.src_len > m.cfg.max_seq_len) o.tc.src_len = m.cfg.max_seq_len;
    if (mhe_evaluate_s2s(&m, data, n, o.tc.batch, o.tc.src_len, o.tc.seq_len, o.batches, &loss) != MHE_OK) {
        fprintf(stderr, "mhe: %s\n", m.err); free(data); mhe_model_free(&m); return 1;
    }
    printf("loss %.4f  perplexity %.3f  bits/byte %.4f  unigram entropy %.4f\n", loss, mhe_perplexity(loss),
           loss / log(2.0), mhe_unigram_entropy(data, n, m.cfg.vocab_size));
    if (o.indicators && write_indicators(&o, &m, data, n) != 0) { free(data); mhe_model_free(&m); return 1; }
    free(data);
    mhe_model_free(&m);
    return 0;
}

/* ---- generate ----------------------------------------------------------- */

/* What each layer keeps for this sequence, beside thesis Table 4.8 (bytes at
   half precision, B = 1, L = len): ours is float32, twice the table's bytes
   where a layer keeps what the table counts. */
static void print_cache_layers(const mhe_model *m, const mhe_kv_cache *kv, int len) {
    int l, E = m->cfg.arch == MHE_ARCH_ENCDEC ? m->cfg.enc_layers : 0, d = m->cfg.d_model, h = m->cfg.n_heads;
    fprintf(stderr, "cache/state per layer for %d tokens (float32 bytes; Table 4.8: fp16 bytes at B=1, L=%d, d=%d, h=%d):\n", len, len, d, h);
    for (l = E; l < m->n_total_layers; l++) {
        int kind = m->layers[l].attn.kind;
        char formula[64];
        fprintf(stderr, "  layer %d %-12s %10zu B", l - E, mhe_attn_kind_name(kind), kv->layer_bytes[l]);
        if (kv->shared_bytes[l]) fprintf(stderr, " + %zu B maps shared by all sequences", kv->shared_bytes[l]);
        if (mhe_attn_cost_formula(MHE_COST_CACHE, kind, formula, sizeof formula))
            fprintf(stderr, "   Table 4.8 %s = %.0f B (x2 = %.0f)", formula, mhe_attn_cost(MHE_COST_CACHE, kind, 1, len, d, h, 1),
                    2 * mhe_attn_cost(MHE_COST_CACHE, kind, 1, len, d, h, 1));
        if (kind == MHE_ATTN_TAYLOR) fprintf(stderr, " [ours: Based's feature map, state per head (1 + d_h + d_h(d_h+1)/2)(d_h + 1) floats]");
        if (kind == MHE_ATTN_RNDEMB_QK || kind == MHE_ATTN_FIXEDSEQ_QK) fprintf(stderr, " [2BLd: V rows; the table's shared 2Ld keys are our maps]");
        fprintf(stderr, "\n");
    }
}

static int cmd_generate(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_kv_cache kv;
    mhe_rng r;
    const char *prompt;
    size_t i, plen;
    int len, tok, rc = 1;
    if (argc > 2 && strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe generate --model M.safetensors [--prompt TEXT] [--source TEXT] [--n TOKENS]\n"
               "                    [--temperature T] [--top-k K] [--seed S]\n"
               "Writes the prompt and a continuation sampled with a KV cache (temperature <= 0: greedy;\n"
               "top-k <= 0: no cut). An encoder-decoder model (arch=encdec) first encodes --source\n"
               "(required) and its decoder starts from --prompt (default: the last byte of the source).\n"
               "Prints the KV-cache size on stderr.\n");
        return 0;
    }
    if ((rc_opts = parse_opts(argc, argv, &o)) <= 0) return rc_opts < 0 ? 2 : 1;
    if (!load_model(o.model, &m)) return 1;
    if (m.cfg.arch == MHE_ARCH_ENCODER) { fprintf(stderr, "mhe: generate needs a decoder (this model has arch=encoder)\n"); mhe_model_free(&m); return 1; }
    if (m.cfg.arch == MHE_ARCH_ENCDEC && (!o.source || !*o.source || strlen(o.source) > (size_t)m.cfg.max_seq_len)) {
        fprintf(stderr, "mhe: an encoder-decoder model needs --source TEXT of 1..%d bytes\n", m.cfg.max_seq_len);
        mhe_model_free(&m);
        return 1;
    }
    prompt = o.prompt ? o.prompt : m.cfg.arch == MHE_ARCH_ENCDEC ? o.source + strlen(o.source) - 1 : "\n";
    plen = strlen(prompt);
    len = m.cfg.max_seq_len;
    if (plen + (size_t)o.n_tokens < (size_t)len) len = (int)(plen + o.n_tokens);
    if (plen == 0 || plen > (size_t)m.cfg.max_seq_len) { fprintf(stderr, "mhe: prompt must have 1..%d bytes\n", m.cfg.max_seq_len); mhe_model_free(&m); return 1; }
    if (mhe_kv_cache_init(&kv, &m, len, NULL) != MHE_OK) { fprintf(stderr, "mhe: cannot allocate the KV cache\n"); mhe_model_free(&m); return 1; }
    fprintf(stderr, "KV cache: %d tokens x %zu bytes per token (all layers, K and V) = %.1f KB\n", len, kv.bytes_per_token, kv.bytes / 1024.0);
    print_cache_layers(&m, &kv, len);
    if (m.cfg.arch == MHE_ARCH_ENCDEC) {
        int srcl = (int)strlen(o.source), *src = (int *)malloc((size_t)srcl * sizeof(int));
        mhe_status es;
        if (!src) { fprintf(stderr, "mhe: out of memory\n"); goto done; }
        for (i = 0; i < (size_t)srcl; i++) src[i] = (unsigned char)o.source[i];
        es = mhe_kv_cache_encode(&m, &kv, src, srcl);
        free(src);
        if (es != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto done; }
        fprintf(stderr, "cross-attention cache: %d source tokens, %.1f KB allocated for up to %d\n", srcl, kv.cross_bytes / 1024.0, m.cfg.max_seq_len);
    }
    mhe_rng_seed(&r, o.tc.seed);
    fwrite(prompt, 1, plen, stdout);
    for (i = 0; i < plen; i++)
        if (mhe_decode_step(&m, &kv, (unsigned char)prompt[i]) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto done; }
    while (kv.len < len) {
        tok = mhe_sample(kv.logits, m.cfg.vocab_size, o.temperature, o.top_k, &r);
        putchar(tok);
        if (mhe_decode_step(&m, &kv, tok) != MHE_OK) { fprintf(stderr, "mhe: %s\n", m.err); goto done; }
    }
    tok = mhe_sample(kv.logits, m.cfg.vocab_size, o.temperature, o.top_k, &r);
    putchar(tok);
    putchar('\n');
    rc = 0;
done:
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    return rc;
}

/* ---- grad --------------------------------------------------------------- */

/* one line of a --tokens file: ids, "." for padding (only at the end), "|" between source and decoder ids */
typedef struct { int *v; int n, cap, bar; } idline;

static int idline_push(idline *l, int v) {
    if (l->n == l->cap) {
        int *nv;
        l->cap = l->cap ? 2 * l->cap : 256;
        nv = (int *)realloc(l->v, (size_t)l->cap * sizeof(int));
        if (!nv) return 0;
        l->v = nv;
    }
    l->v[l->n++] = v;
    return 1;
}

/* real (non-padding) ids among the first n of v; -1 when padding is followed by an id */
static int real_len(const int *v, int n) {
    int i, len = 0;
    for (i = 0; i < n; i++) {
        if (v[i] == -2) continue;
        if (len != i) return -1;
        len++;
    }
    return len;
}

static int cmd_grad(int argc, char **argv) {
    opts o;
    mhe_model m;
    mhe_batch bt;
    char *text, *p;
    size_t len;
    idline all;   /* every line's ids, one after another; bar = source ids per line */
    int rows = 0, width = -1, src_w = -1, cur = 0, cur_bar = -1, B, T, Ts = 0, b, t, rc = 1, encdec, line = 1;
    int *tok = NULL, *tgt, *src, *lens, *slens;
    float loss;
    if (argc > 2 && strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe grad --model M.safetensors --tokens TOKENS.txt --out G.safetensors\n"
               "Runs one forward and backward pass (no dropout) and writes the loss (tensor `loss`,\n"
               "shape [1]) and the gradient of every parameter under the parameter's name.\n"
               "TOKENS.txt: one sequence per line, T+1 whitespace-separated token ids, the same\n"
               "count on every line; inputs are the first T ids, targets the last T; the lines\n"
               "form the batch. A target of -1 is ignored by the loss. A `.` in place of an id is\n"
               "padding (only at the end of a line): those positions are masked out of attention\n"
               "and of the loss. An encoder-decoder model reads `SOURCE IDS | DECODER IDS`: the\n"
               "source ids (the same count on every line, padding allowed) go to the encoder.\n");
        return 0;
    }
    if ((rc_opts = parse_opts(argc, argv, &o)) <= 0) return rc_opts < 0 ? 2 : 1;
    if (!o.tokens || !o.out) return die("grad: --tokens and --out are required%s%s", "", "");
    if (!load_model(o.model, &m)) return 1;
    encdec = m.cfg.arch == MHE_ARCH_ENCDEC;
    if (!read_text(o.tokens, &text, &len)) { mhe_model_free(&m); return 1; }
    p = (char *)realloc(text, len + 1);
    if (!p) { free(text); mhe_model_free(&m); return die("grad: out of memory%s%s", "", ""); }
    text = p;
    text[len] = 0;
    memset(&all, 0, sizeof all);
    for (p = text; ; ) {
        char *end;
        long v;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p == '\n' || *p == 0) {
            if (cur > 0) {
                int sw = cur_bar < 0 ? 0 : cur_bar, w = cur - sw;
                if (encdec != (cur_bar >= 0)) { fprintf(stderr, "mhe: %s: line %d: %s\n", o.tokens, line, encdec ? "an encoder-decoder model needs `SOURCE | DECODER` ids" : "`|` is only for encoder-decoder models"); goto out; }
                if (width >= 0 && (w != width || sw != src_w)) { fprintf(stderr, "mhe: %s: line %d has %d+%d ids, earlier lines %d+%d\n", o.tokens, line, sw, w, src_w, width); goto out; }
                width = w; src_w = sw; rows++; cur = 0; cur_bar = -1;
            }
            if (*p == 0) break;
            p++; line++;
            continue;
        }
        if (*p == '|') {
            if (cur_bar >= 0 || cur == 0) { fprintf(stderr, "mhe: %s: line %d: `|` must follow the source ids, once\n", o.tokens, line); goto out; }
            cur_bar = cur; p++;
            continue;
        }
        if (*p == '.' && (p[1] == 0 || strchr(" \t\r\n|", p[1]))) { v = -2; end = p + 1; }
        else {
            v = strtol(p, &end, 10);
            if (end == p || v < -1 || v > 2147483647L) { fprintf(stderr, "mhe: %s: line %d: bad token id near '%.10s'\n", o.tokens, line, p); goto out; }
        }
        if (!idline_push(&all, (int)v)) { fprintf(stderr, "mhe: out of memory\n"); goto out; }
        cur++;
        p = end;
    }
    if (rows == 0 || width < 2 || (encdec && src_w < 1)) { fprintf(stderr, "mhe: %s: needs at least one line of 2 or more token ids (and a source)\n", o.tokens); goto out; }
    B = rows; T = width - 1; Ts = src_w;
    tok = (int *)malloc((2 * (size_t)B * T + (size_t)B * Ts + 2 * (size_t)B) * sizeof(int));
    if (!tok) { fprintf(stderr, "mhe: out of memory\n"); goto out; }
    tgt = tok + (size_t)B * T; src = tgt + (size_t)B * T; lens = src + (size_t)B * Ts; slens = lens + B;
    for (b = 0; b < B; b++) {
        const int *row = all.v + (size_t)b * (Ts + width), *s = row, *d = row + Ts;
        lens[b] = real_len(d, T);
        slens[b] = real_len(s, Ts);
        if (lens[b] < 1 || real_len(d, width) < 0 || (encdec && slens[b] < 1)) {
            fprintf(stderr, "mhe: %s: sequence %d: padding `.` must come after at least one id, at the end\n", o.tokens, b + 1);
            goto out;
        }
        for (t = 0; t < Ts; t++) src[b * Ts + t] = s[t] == -2 ? 0 : s[t];
        for (t = 0; t < T; t++) { tok[b * T + t] = d[t] == -2 ? 0 : d[t]; tgt[b * T + t] = d[t + 1] == -2 ? -1 : d[t + 1]; }
    }
    memset(&bt, 0, sizeof bt);
    bt.B = B; bt.T = T; bt.tokens = tok; bt.targets = tgt; bt.lengths = lens;
    if (encdec) { bt.Ts = Ts; bt.src = src; bt.src_lengths = slens; }
    mhe_model_zero_grad(&m);
    if (mhe_model_forward_batch(&m, &bt, &loss) != MHE_OK || mhe_model_backward(&m) != MHE_OK || mhe_grads_save(&m, o.out) != MHE_OK) {
        fprintf(stderr, "mhe: %s\n", m.err);
    } else {
        printf("loss %.6f over %d x %d tokens; wrote %s\n", loss, B, T, o.out);
        rc = 0;
    }
out:
    free(tok); free(all.v); free(text);
    mhe_model_free(&m);
    return rc;
}

/* ---- inspect ------------------------------------------------------------ */

static int cmd_inspect(int argc, char **argv) {
    void *buf;
    size_t size;
    mhe_safetensors st;
    char err[MHE_ERR_LEN];
    int i, d;
    long long total = 0;
    if (argc < 3 || strcmp(argv[2], "--help") == 0) {
        printf("usage: mhe inspect FILE.safetensors\nPrints the metadata and every tensor (name, dtype, shape) of a safetensors file.\n");
        return argc < 3 ? 2 : 0;
    }
    if (mhe_read_file(argv[2], &buf, &size, NULL, err) != MHE_OK) { fprintf(stderr, "mhe: %s\n", err); return 1; }
    if (mhe_st_parse(&st, buf, size, NULL) != MHE_OK) { fprintf(stderr, "mhe: %s: %s\n", argv[2], st.err); free(buf); return 1; }
    printf("%s: %zu bytes, %d tensors, %d metadata entries\n", argv[2], size, st.n_tensors, st.n_meta);
    for (i = 0; i < st.n_meta; i++) printf("  meta %-20s = %s\n", st.meta_keys[i], st.meta_values[i]);
    for (i = 0; i < st.n_tensors; i++) {
        static const char *dt[] = { "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL" };
        printf("  %-40s %-4s [", st.tensors[i].name, dt[st.tensors[i].dtype]);
        for (d = 0; d < st.tensors[i].ndim; d++) printf("%s%lld", d ? ", " : "", (long long)st.tensors[i].shape[d]);
        printf("]\n");
        if (strncmp(st.tensors[i].name, "optim.", 6) != 0) total += st.tensors[i].size;
    }
    printf("parameters (without optimizer state): %lld\n", total);
    mhe_st_free(&st);
    free(buf);
    return 0;
}

#include "mhe_params.h"   /* cmd_params: the parameter and memory calculator */

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "--help";
    if (strcmp(cmd, "init") == 0) return cmd_init(argc, argv);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc, argv);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc, argv);
    if (strcmp(cmd, "grad") == 0) return cmd_grad(argc, argv);
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc, argv);
    if (strcmp(cmd, "params") == 0) return cmd_params(argc, argv);
    printf("mhe %s - train and run parameter-efficient transformers\n"
           "usage: mhe COMMAND [options]   (mhe COMMAND --help for each)\n"
           "  init       create a model file from a config\n"
           "  train      train a byte-level LM on a text file, with checkpoints and resume\n"
           "  eval       loss and perplexity of a model on a text file\n"
           "  generate   sample text with a KV cache\n"
           "  grad       loss and every parameter gradient of one batch, as safetensors\n"
           "  inspect    list the metadata and tensors of a safetensors file\n"
           "  params     parameter and memory tables of the attention kinds (MHE paper)\n", MHE_VERSION);
    return strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ? 0 : 2;
}
