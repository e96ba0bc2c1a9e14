/* bench_decode - microseconds per generated token of mhe_decode_step (a KV
   cache) at several context lengths, for the attention kinds mha, mqa, gqa,
   mhe-mul and mhe-add, next to the same decode loop in PyTorch 2
   (tools/bench/bench_decode_torch.py), with the KV-cache bytes of each side; a
   JSON line per measurement, then a Markdown table.
     build/bench_decode               decoder, byte vocabulary, d_model 512, 8 heads, 6 layers,
                                      max_len 2048; every kind; contexts 128, 1024, 2048; 1 and 2 threads
     build/bench_decode --kinds mha,mhe-mul --contexts 128,max --threads 1
     build/bench_decode --check       mhe's next-token logits against the PyTorch loop's
     build/bench_decode --cpu-time    process CPU time instead of wall time (one thread, busy machine)
     build/bench_decode --models build/gpt2/gpt2.safetensors,build/gpt2/gpt2_q8.safetensors --contexts 128
                                      checkpoints (float32 or q8) in place of the built models: the load
                                      time, the bytes a token reads and decoding's share of the bandwidth
   Method, the same on both sides: context L is the number of keys the last
   timed token attends to. The first L-k random tokens (k = min(window, L))
   are prefilled, not timed (here by mhe_decode_step, in PyTorch by one
   batched forward); then the k tokens at positions L-k .. L-1 are decoded
   one at a time, each step computing the next-token logits, and the time
   over k is one repeat. One untimed repeat, then `repeats` timed ones, each
   rewinding the cache to L-k; the median is the result.
   The memory time of a step: the bytes it must read (every weight once,
   the position table's one row, the cached K/V rows of the context) over
   the machine's streaming read bandwidth at that thread count, measured
   here on a buffer past the caches. A decoding step of one sequence is a
   matrix-vector product per weight, so this is what it costs when every
   byte comes from memory: an estimate, not a bound (the L3 may keep part
   of the weights from one token to the next). Its inverse, the memory time
   over the measured time, is decoding's share of the bandwidth bound. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#define popen _popen
#define pclose _pclose
#endif

#define MAX_KINDS 16
#define MAX_CONTEXTS 16
#define MAX_THREADS 8
#define CHECK_PREFIX 24   /* --check: tokens decoded by mhe */
#define CHECK_STEPS 4     /* --check: of which the PyTorch loop decodes the last ones (it prefills the rest) */
static const char torch_script[] = "tools/bench/bench_decode_torch.py";

typedef struct {
    int d_model, heads, layers, max_len, kv_groups, window, repeats;
    int n_kinds, n_contexts, n_threads;
    char *kinds[MAX_KINDS];
    int contexts[MAX_CONTEXTS], threads[MAX_THREADS];
    int models;                     /* --models: kinds[] are checkpoint paths */
} bench_opts;

/* one (threads, kind, context) measurement of both sides; torch_us 0: not measured */
typedef struct {
    int threads, context, window;
    const char *kind;
    double mhe_us, mhe_us_min, torch_us, torch_us_min, torch_kv_bytes, memory_us;
    size_t mhe_kv_bytes, mhe_kv_bytes_per_token, weight_bytes;
    long long params;
    double load_s;                  /* --models: mhe_model_load's time */
} bench_row;

/* --cpu-time: the process's CPU time instead of the wall clock; on a loaded
   machine a one-thread run then counts only its own work */
static clockid_t timer = CLOCK_MONOTONIC;
static double now_s(void) { struct timespec ts; clock_gettime(timer, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static void set_threads(int threads) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
}

/* the benchmark's model: mhe's defaults (pre-norm, LayerNorm, GELU tanh, MLP 4C,
   biases, tied head, weights N(0, 0.02)) at the requested size, one kind in every layer */
static int make_model(const bench_opts *o, const char *kind, mhe_model *m) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    c.vocab_size = 256; c.d_model = o->d_model; c.n_heads = o->heads; c.n_layers = o->layers;
    c.max_seq_len = o->max_len; c.kv_groups = o->kv_groups;
    if (mhe_config_set(&c, "attn", kind, err) != MHE_OK || mhe_config_validate(&c, err) != MHE_OK) {
        fprintf(stderr, "bench_decode: %s: %s\n", kind, err);
        return 0;
    }
    if (mhe_model_init(m, &c, 1, NULL) != MHE_OK) {
        fprintf(stderr, "bench_decode: %s: %s\n", kind, m->err);
        return 0;
    }
    return 1;
}

/* the bytes of weights one decoding step reads: every tensor once (int8
   weights and their scales for q8 tensors), but one row of the position
   table, and one row of an untied token embedding (a tied one is the head) */
static size_t step_weight_bytes(const mhe_model *m) {
    size_t b = 0;
    int i;
    for (i = 0; i < m->n_tensors; i++) {
        const mhe_tensor *t = &m->params[i];
        size_t rows = (size_t)t->shape[0], n = (size_t)t->size;
        if (t == m->pos_emb || (t == m->tok_emb && (m->lm_head || !m->cfg.tie_embeddings))) n /= rows;
        b += t->q8 ? n + n / (size_t)t->q8_group * sizeof(float) : n * sizeof(float);
    }
    return b;
}

/* streaming read bandwidth, GB/s, of `threads` threads summing a buffer
   four times the size of a large L3: the best of three passes */
#define BW_FLOATS ((size_t)64 << 20)
static double read_gbps(int threads) {
    static float *buf;
    double best = 0;
    int pass;
    long long i, n = (long long)BW_FLOATS;
    if (!buf && !(buf = (float *)malloc(BW_FLOATS * sizeof(float)))) return 0;
    set_threads(threads);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (i = 0; i < n; i++) buf[i] = (float)(i & 7);   /* first touch by the threads that read */
    for (pass = 0; pass < 3; pass++) {
        double t0 = now_s(), s = 0, dt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(+ : s)
#endif
        for (i = 0; i < n; i += 16) {   /* one float per 64-byte line: the loads, not the adds, set the pace */
            float a = buf[i] + buf[i + 4] + buf[i + 8] + buf[i + 12];
            s += a;
        }
        dt = now_s() - t0;
        if (s < 0) return 0;   /* keeps the sum live */
        if (BW_FLOATS * sizeof(float) / dt / 1e9 > best) best = BW_FLOATS * sizeof(float) / dt / 1e9;
    }
    return best;
}

static size_t cache_bytes(const mhe_kv_cache *kv) {   /* K/V rows and recurrent state of every layer, at max_len */
    size_t b = 0;
    int l;
    for (l = 0; l < kv->n_layers; l++) b += kv->layer_bytes[l];
    return b;
}

/* mhe's side of one kind at one thread count: a row per context */
static int measure_mhe(const bench_opts *o, int ki, int threads, bench_row *rows) {
    mhe_model m;
    mhe_kv_cache kv;
    mhe_rng r;
    int *tokens = (int *)malloc(sizeof(int) * (size_t)o->max_len), ci, i, rep, ok = 1;
    double *us = (double *)malloc(sizeof(double) * (size_t)o->repeats);
    double t_load = now_s();
    set_threads(threads);
    if (o->models) {
        if (!tokens || !us || mhe_model_load(&m, o->kinds[ki], NULL) != MHE_OK) {
            fprintf(stderr, "bench_decode: %s\n", tokens && us ? m.err : "out of memory");
            free(tokens); free(us);
            return 0;
        }
        t_load = now_s() - t_load;
    } else if (!tokens || !us || !make_model(o, o->kinds[ki], &m)) { free(tokens); free(us); return 0; }
    if (mhe_kv_cache_init(&kv, &m, o->max_len, NULL) != MHE_OK) {
        fprintf(stderr, "bench_decode: no memory for the KV cache\n");
        mhe_model_free(&m); free(tokens); free(us);
        return 0;
    }
    mhe_rng_seed(&r, 0);
    for (i = 0; i < o->max_len; i++) tokens[i] = (int)mhe_rng_below(&r, (uint32_t)m.cfg.vocab_size);
    for (ci = 0; ci < o->n_contexts && ok; ci++) {
        int L = o->contexts[ci], k = L < o->window ? L : o->window, start = L - k;
        bench_row *row = &rows[ci];
        /* rows 0..start-1 already cached hold these tokens whatever came before: extend or rewind */
        if (kv.len > start) kv.len = start;
        while (ok && kv.len < start) ok = mhe_decode_step(&m, &kv, tokens[kv.len]) == MHE_OK;
        for (rep = 0; rep <= o->repeats && ok; rep++) {   /* repeat 0 warms up */
            double t0;
            kv.len = start;
            t0 = now_s();
            for (i = start; i < L && ok; i++) ok = mhe_decode_step(&m, &kv, tokens[i]) == MHE_OK;
            if (rep) us[rep - 1] = (now_s() - t0) / k * 1e6;
        }
        if (!ok) { fprintf(stderr, "bench_decode: %s: %s\n", o->kinds[ki], m.err); break; }
        qsort(us, (size_t)o->repeats, sizeof(double), cmp_d);
        memset(row, 0, sizeof *row);
        row->threads = threads; row->context = L; row->window = k; row->kind = o->kinds[ki];
        row->mhe_us = us[o->repeats / 2]; row->mhe_us_min = us[0];
        if (o->repeats % 2 == 0) row->mhe_us = 0.5 * (us[o->repeats / 2 - 1] + us[o->repeats / 2]);
        row->mhe_kv_bytes = cache_bytes(&kv);
        row->mhe_kv_bytes_per_token = kv.bytes_per_token;
        row->params = (long long)m.n_params;
        row->weight_bytes = step_weight_bytes(&m);
        row->load_s = o->models ? t_load : 0;
    }
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    free(tokens); free(us);
    return ok;
}

/* "key": number in a JSON line */
static int json_num(const char *line, const char *key, double *v) {
    char pat[64];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    if (!(p = strstr(line, pat))) return 0;
    *v = atof(p + strlen(pat));
    return 1;
}

/* 1 when PATH runs python with torch >= 2 */
static int has_torch2(const char *py) {
    char cmd[1200];
    if (strchr(py, '\'')) return 0;
    snprintf(cmd, sizeof cmd, "'%s' -c \"import sys, torch; sys.exit(int(torch.__version__.split('.')[0]) < 2)\" >/dev/null 2>&1", py);
    return system(cmd) == 0;
}

/* the interpreter for the PyTorch side: --python, else $MHE_TORCH_PYTHON, else
   ./.venv/bin/python; NULL (and why in reason) when none has torch >= 2 */
static const char *find_python(const char *flag, char *reason, size_t cap) {
    const char *env = getenv("MHE_TORCH_PYTHON"), *venv = "./.venv/bin/python";
    FILE *f = fopen(torch_script, "r");
    if (!f) { snprintf(reason, cap, "%s not found (run from the repository root)", torch_script); return NULL; }
    fclose(f);
    if (flag || (env && *env)) {
        const char *py = flag ? flag : env;
        if (has_torch2(py)) return py;
        snprintf(reason, cap, "%s (%s) does not run python with torch >= 2", py, flag ? "--python" : "MHE_TORCH_PYTHON");
        return NULL;
    }
    if (has_torch2(venv)) return venv;
    snprintf(reason, cap, "no --python or MHE_TORCH_PYTHON, and %s is missing or has no torch >= 2", venv);
    return NULL;
}

static void size_args(const bench_opts *o, char *buf, size_t cap) {
    snprintf(buf, cap, "--d_model %d --heads %d --layers %d --max_len %d --kv_groups %d", o->d_model, o->heads, o->layers,
             o->max_len, o->kv_groups);
}

/* the PyTorch side of one kind at one thread count: fills the torch columns of rows
   (matched by context); keeps the script's header line (torch version, BLAS) in about */
static void measure_torch(const bench_opts *o, const char *py, int ki, int threads, bench_row *rows, char *about, size_t cap) {
    char cmd[2048], sizes[256], ctx[256] = "", line[2048];
    size_t used = 0;
    int ci;
    FILE *p;
    for (ci = 0; ci < o->n_contexts; ci++)
        used += (size_t)snprintf(ctx + used, sizeof ctx - used, "%s%d", ci ? "," : "", o->contexts[ci]);
    size_args(o, sizes, sizeof sizes);
    snprintf(cmd, sizeof cmd, "'%s' %s --kind %s %s --threads %d --contexts %s --window %d --repeats %d%s", py, torch_script,
             o->kinds[ki], sizes, threads, ctx, o->window, o->repeats, timer == CLOCK_MONOTONIC ? "" : " --cpu-time");
    if (!(p = popen(cmd, "r"))) return;
    while (fgets(line, sizeof line, p)) {
        double L, us, mn, kvb;
        if (strncmp(line, "torch ", 6) == 0 && !about[0]) {
            size_t len = strcspn(line, "\n");
            if (len >= cap) len = cap - 1;
            memcpy(about, line, len);
            about[len] = 0;
        }
        if (strncmp(line, "JSON ", 5) != 0 || !json_num(line, "context", &L) || !json_num(line, "us_per_token", &us) ||
            !json_num(line, "us_min", &mn) || !json_num(line, "kv_bytes", &kvb))
            continue;
        for (ci = 0; ci < o->n_contexts; ci++)
            if (rows[ci].context == (int)L) { rows[ci].torch_us = us; rows[ci].torch_us_min = mn; rows[ci].torch_kv_bytes = kvb; }
    }
    pclose(p);
}

static void print_json(const bench_opts *o, const bench_row *r) {
    printf("JSON {\"d_model\": %d, \"heads\": %d, \"layers\": %d, \"max_len\": %d, \"kv_groups\": %d, \"threads\": %d, "
           "\"kind\": \"%s\", \"context\": %d, \"window\": %d, \"repeats\": %d, \"params\": %lld, "
           "\"mhe_us_per_token\": %.1f, \"mhe_us_min\": %.1f, \"mhe_kv_bytes\": %zu, \"mhe_kv_bytes_per_token\": %zu, "
           "\"weight_bytes\": %zu, \"memory_us\": %.1f, \"bytes_per_token\": %.0f, \"bandwidth_share\": %.3f, \"load_s\": %.3f, ",
           o->d_model, o->heads, o->layers, o->max_len, o->kv_groups, r->threads, r->kind, r->context, r->window, o->repeats,
           r->params, r->mhe_us, r->mhe_us_min, r->mhe_kv_bytes, r->mhe_kv_bytes_per_token, r->weight_bytes, r->memory_us,
           (double)r->weight_bytes + (double)r->mhe_kv_bytes_per_token * r->context, r->mhe_us > 0 ? r->memory_us / r->mhe_us : 0,
           r->load_s);
    if (r->torch_us > 0)
        printf("\"torch_us_per_token\": %.1f, \"torch_us_min\": %.1f, \"torch_kv_bytes\": %.0f}\n", r->torch_us, r->torch_us_min,
               r->torch_kv_bytes);
    else
        printf("\"torch_us_per_token\": null, \"torch_us_min\": null, \"torch_kv_bytes\": null}\n");
    fflush(stdout);
}

/* threads, then context, then kind as given, so the kinds of one context sit together */
static void print_table(const bench_opts *o, const bench_row *rows, int n) {
    int ti, ci, ki, i;
    if (o->models) {   /* bytes per token, the bound they set and decoding's share of it */
        printf("\n| model | parameters | threads | context | load s | mhe µs/token | tokens/s | MB read per token | memory time µs "
               "| share of the bandwidth bound |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (i = 0; i < n; i++) {
            const bench_row *r = &rows[i];
            const char *base = strrchr(r->kind, '/');
            printf("| %s | %lld | %d | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.0f %% |\n", base ? base + 1 : r->kind, r->params, r->threads,
                   r->context, r->load_s, r->mhe_us, 1e6 / r->mhe_us, ((double)r->weight_bytes + (double)r->mhe_kv_bytes_per_token * r->context) / 1e6,
                   r->memory_us, r->mhe_us > 0 ? 100 * r->memory_us / r->mhe_us : 0);
        }
        return;
    }
    printf("\n| model | threads | kind | context | mhe µs/token | PyTorch µs/token | mhe / PyTorch | mhe kind / mhe mha "
           "| memory time µs | mhe / memory time | mhe KV-cache bytes | PyTorch KV-cache bytes |\n");
    printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (ti = 0; ti < o->n_threads; ti++)
        for (ci = 0; ci < o->n_contexts; ci++) {
            const bench_row *mha = NULL;
            for (i = 0; i < n; i++)
                if (rows[i].threads == o->threads[ti] && rows[i].context == o->contexts[ci] && strcmp(rows[i].kind, "mha") == 0)
                    mha = &rows[i];
            for (ki = 0; ki < o->n_kinds; ki++)
                for (i = 0; i < n; i++) {
                    const bench_row *r = &rows[i];
                    if (r->threads != o->threads[ti] || r->context != o->contexts[ci] || strcmp(r->kind, o->kinds[ki]) != 0)
                        continue;
                    printf("| d%d h%d l%d T%d | %d | %s | %d | %.1f | ", o->d_model, o->heads, o->layers, o->max_len, r->threads,
                           r->kind, r->context, r->mhe_us);
                    if (r->torch_us > 0) printf("%.1f | %.2fx | ", r->torch_us, r->mhe_us / r->torch_us);
                    else printf("- | - | ");
                    if (mha) printf("%.2fx | ", r->mhe_us / mha->mhe_us);
                    else printf("- | ");
                    if (r->memory_us > 0) printf("%.1f | %.2fx | ", r->memory_us, r->mhe_us / r->memory_us);
                    else printf("- | - | ");
                    printf("%zu | ", r->mhe_kv_bytes);
                    if (r->torch_kv_bytes > 0) printf("%.0f |\n", r->torch_kv_bytes);
                    else printf("- |\n");
                }
        }
}

/* --check: per kind, mhe decodes CHECK_PREFIX random tokens with every parameter
   perturbed (so biases, norm gains and head embeddings all matter), saves the
   checkpoint and the logits of its last CHECK_STEPS steps; the PyTorch loop loads
   that checkpoint, prefills, decodes those steps and compares */
static int run_check(const bench_opts *o, const char *py) {
    const char *tmp = getenv("TMPDIR");
    int ki, failures = 0;
#ifdef _WIN32
    if (!tmp) tmp = getenv("TEMP");
#endif
    if (!tmp || !*tmp) tmp = "/tmp";
    for (ki = 0; ki < o->n_kinds; ki++) {
        char ckpt[512], logits_path[512], cmd[4096], sizes[256], toks[CHECK_PREFIX * 4 + 1], line[2048];
        int P = o->max_len < CHECK_PREFIX ? o->max_len : CHECK_PREFIX, S = P < CHECK_STEPS ? P : CHECK_STEPS, t, ok = 0;
        size_t used = 0;
        float *logits;
        int64_t i;
        mhe_model m;
        mhe_kv_cache kv;
        mhe_rng r;
        FILE *f, *p;
        if (!make_model(o, o->kinds[ki], &m)) { failures++; continue; }
        mhe_rng_seed(&r, 7);
        for (i = 0; i < m.n_params; i++) m.param_data[i] += 0.02f * mhe_rng_normal(&r);
        snprintf(ckpt, sizeof ckpt, "%s/mhe_bench_decode_%s.safetensors", tmp, o->kinds[ki]);
        snprintf(logits_path, sizeof logits_path, "%s/mhe_bench_decode_%s.f32", tmp, o->kinds[ki]);
        logits = (float *)malloc(sizeof(float) * 256 * (size_t)S);
        if (!logits || mhe_checkpoint_save(&m, NULL, ckpt) != MHE_OK || mhe_kv_cache_init(&kv, &m, o->max_len, NULL) != MHE_OK) {
            fprintf(stderr, "bench_decode --check %s: %s\n", o->kinds[ki], m.err);
            free(logits); mhe_model_free(&m); failures++;
            continue;
        }
        for (t = 0; t < P; t++) {
            int tok = (int)mhe_rng_below(&r, 256);
            used += (size_t)snprintf(toks + used, sizeof toks - used, "%s%d", t ? "," : "", tok);
            if (mhe_decode_step(&m, &kv, tok) != MHE_OK) break;
            if (t >= P - S) memcpy(logits + (size_t)(t - (P - S)) * 256, kv.logits, 256 * sizeof(float));
        }
        f = t == P ? fopen(logits_path, "wb") : NULL;
        if (f && fwrite(logits, sizeof(float), 256 * (size_t)S, f) == 256 * (size_t)S && fclose(f) == 0) {
            size_args(o, sizes, sizeof sizes);
            snprintf(cmd, sizeof cmd, "'%s' %s --check '%s' --tokens %s --logits '%s' --steps %d", py, torch_script, ckpt, toks,
                     logits_path, S);
            if ((p = popen(cmd, "r")) != NULL) {
                while (fgets(line, sizeof line, p)) {
                    if (strncmp(line, "check ", 6) == 0) printf("%s", line);
                    if (strncmp(line, "JSON ", 5) == 0) { printf("%s", line); ok = strstr(line, "\"ok\": true") != NULL; }
                }
                ok = pclose(p) == 0 && ok;
            }
        } else {
            fprintf(stderr, "bench_decode --check %s: %s\n", o->kinds[ki], t < P ? m.err : "cannot write the logits");
            if (f) fclose(f);
        }
        if (!ok) { printf("check %s: FAILED\n", o->kinds[ki]); failures++; }
        fflush(stdout);
        remove(ckpt); remove(logits_path);
        free(logits);
        mhe_kv_cache_free(&kv);
        mhe_model_free(&m);
    }
    printf("check: %d of %d kinds agree\n", o->n_kinds - failures, o->n_kinds);
    return failures ? 1 : 0;
}

/* comma-separated integers ("max" is max_value) into out[cap]; the count, 0 on a
   bad or repeated item (rows are told apart by these values) */
static int parse_ints(char *text, int *out, int cap, int max_value) {
    int n = 0, i;
    char *tok;
    for (tok = strtok(text, ","); tok; tok = strtok(NULL, ",")) {
        int v = strcmp(tok, "max") == 0 ? max_value : atoi(tok);
        if (n == cap || v < 1 || (max_value > 0 && v > max_value)) return 0;
        for (i = 0; i < n; i++) if (out[i] == v) return 0;
        out[n++] = v;
    }
    return n;
}

static void usage(void) {
    printf("usage: bench_decode [--d_model N] [--heads N] [--layers N] [--max_len N] [--kv_groups N]\n"
           "                    [--kinds K1,K2,..] [--contexts L1,L2,..|max] [--threads T1,T2,..]\n"
           "                    [--window K] [--repeats R] [--python PATH] [--no-torch] [--cpu-time] [--check]\n"
           "                    [--models F1,F2,..]\n"
           "Defaults: d_model 512, 8 heads, 6 layers, max_len 2048, kv_groups 2 (gqa); kinds\n"
           "mha,mqa,gqa,mhe-mul,mhe-add; contexts 128,1024,max (those below max_len); threads 1,2;\n"
           "window 32; repeats 5.\n"
           "Microseconds per token of mhe_decode_step at each context (the keys the last timed token\n"
           "attends to): prefill L-k tokens (not timed), decode the k = min(window, L) tokens at\n"
           "positions L-k..L-1, time / k; median of the repeats (each rewinds to L-k). PyTorch:\n"
           "tools/bench/bench_decode_torch.py with --python PATH, else $MHE_TORCH_PYTHON, else\n"
           "./.venv/bin/python (needs torch >= 2; else that column is skipped). Any kind mhe decodes\n"
           "is timed; the PyTorch loop has mha, mqa, gqa, mhe-mul and mhe-add. --check: mhe's\n"
           "next-token logits against the PyTorch loop's on one saved checkpoint per kind.\n"
           "--cpu-time: both sides time the process's CPU time (for one-thread runs on a busy machine).\n"
           "Memory time: (bytes of every weight + the cached K/V rows of the context) / the streaming\n"
           "read bandwidth measured at that thread count: a step's cost when every byte comes from memory.\n"
           "--models: checkpoints (float32 or q8) instead of the built models, no PyTorch: load time, bytes\n"
           "read per token (int8 weights and their scales for q8) and memory time / measured time, the share\n"
           "of the bandwidth bound decoding reaches; --contexts up to the smallest max_seq_len (default 128).\n");
}

int main(int argc, char **argv) {
    static char kinds_arg[512] = "mha,mqa,gqa,mhe-mul,mhe-add", contexts_arg[256] = "", threads_arg[64] = "1,2";
    static bench_row rows[MAX_KINDS * MAX_CONTEXTS * MAX_THREADS];
    bench_opts o;
    const char *python_flag = NULL, *py = NULL;
    char reason[600] = "--no-torch", about[512] = "";
    int check = 0, no_torch = 0, n_rows = 0, i, ti, ki;
    char *tok;
    memset(&o, 0, sizeof o);
    o.d_model = 512; o.heads = 8; o.layers = 6; o.max_len = 2048; o.kv_groups = 2; o.window = 32; o.repeats = 5;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(); return 0; }
        if (strcmp(a, "--check") == 0) { check = 1; continue; }
        if (strcmp(a, "--no-torch") == 0) { no_torch = 1; continue; }
        if (strcmp(a, "--cpu-time") == 0) { timer = CLOCK_PROCESS_CPUTIME_ID; continue; }
        if (!v) { fprintf(stderr, "bench_decode: %s needs a value (--help)\n", a); return 2; }
        i++;
        if (strcmp(a, "--d_model") == 0) o.d_model = atoi(v);
        else if (strcmp(a, "--heads") == 0) o.heads = atoi(v);
        else if (strcmp(a, "--layers") == 0) o.layers = atoi(v);
        else if (strcmp(a, "--max_len") == 0) o.max_len = atoi(v);
        else if (strcmp(a, "--kv_groups") == 0) o.kv_groups = atoi(v);
        else if (strcmp(a, "--window") == 0) o.window = atoi(v);
        else if (strcmp(a, "--repeats") == 0) o.repeats = atoi(v);
        else if (strcmp(a, "--kinds") == 0) snprintf(kinds_arg, sizeof kinds_arg, "%s", v);
        else if (strcmp(a, "--contexts") == 0) snprintf(contexts_arg, sizeof contexts_arg, "%s", v);
        else if (strcmp(a, "--threads") == 0) snprintf(threads_arg, sizeof threads_arg, "%s", v);
        else if (strcmp(a, "--python") == 0) python_flag = v;
        else if (strcmp(a, "--models") == 0) { snprintf(kinds_arg, sizeof kinds_arg, "%s", v); o.models = 1; }
        else { fprintf(stderr, "bench_decode: unknown option %s (--help)\n", a); return 2; }
    }
    if (o.d_model < 1 || o.heads < 1 || o.layers < 1 || o.max_len < 1 || o.window < 1 || o.repeats < 1) {
        fprintf(stderr, "bench_decode: sizes, --window and --repeats must be >= 1\n");
        return 2;
    }
    for (tok = strtok(kinds_arg, ","); tok; tok = strtok(NULL, ",")) {
        for (i = 0; i < o.n_kinds; i++) if (strcmp(o.kinds[i], tok) == 0) break;
        if (o.n_kinds == MAX_KINDS || (!o.models && mhe_attn_kind_from_name(tok) < 0) || i < o.n_kinds) {
            fprintf(stderr, "bench_decode: unknown or repeated attention kind %s (at most %d kinds)\n", tok, MAX_KINDS);
            return 2;
        }
        o.kinds[o.n_kinds++] = tok;
    }
    if (o.models) {   /* the cache and token draws sized by the checkpoints' smallest max_seq_len */
        o.max_len = 0;
        for (i = 0; i < o.n_kinds; i++) {
            mhe_model m;
            if (mhe_model_load(&m, o.kinds[i], NULL) != MHE_OK) { fprintf(stderr, "bench_decode: %s\n", m.err); return 1; }
            if (!o.max_len || m.cfg.max_seq_len < o.max_len) o.max_len = m.cfg.max_seq_len;
            mhe_model_free(&m);
        }
        if (!contexts_arg[0]) snprintf(contexts_arg, sizeof contexts_arg, "%d", o.max_len < 128 ? o.max_len : 128);
        no_torch = 1;
        snprintf(reason, sizeof reason, "--models");
    }
    if (!contexts_arg[0])   /* the default: 128, 1024 and max_len, those below max_len */
        snprintf(contexts_arg, sizeof contexts_arg, "%s%smax", o.max_len > 128 ? "128," : "", o.max_len > 1024 ? "1024," : "");
    o.n_contexts = parse_ints(contexts_arg, o.contexts, MAX_CONTEXTS, o.max_len);
    o.n_threads = parse_ints(threads_arg, o.threads, MAX_THREADS, 0);
    if (!o.n_kinds || !o.n_contexts || !o.n_threads) {
        fprintf(stderr, "bench_decode: --kinds, --contexts (1..max_len, or max) and --threads need at least one item, none repeated\n");
        return 2;
    }
    if (!no_torch) py = find_python(python_flag, reason, sizeof reason);
    if (check) {
        if (!py) { printf("bench_decode --check: no PyTorch to compare with: %s\n", reason); return 1; }
        return run_check(&o, py);
    }
    if (o.models) {
        printf("models:");
        for (i = 0; i < o.n_kinds; i++) printf(" %s", o.kinds[i]);
        printf("; window %d tokens, median of %d repeats%s\n", o.window, o.repeats,
               timer == CLOCK_MONOTONIC ? "" : "; process CPU time, not wall time (--cpu-time)");
    }
    else printf("model: decoder, byte vocabulary, d_model %d, %d heads, %d layers, max_len %d (gqa: %d K/V groups); "
           "window %d tokens, median of %d repeats%s\n", o.d_model, o.heads, o.layers, o.max_len, o.kv_groups, o.window, o.repeats,
           timer == CLOCK_MONOTONIC ? "" : "; process CPU time, not wall time (--cpu-time)");
#ifndef _OPENMP
    printf("mhe: built without OpenMP, every run is one thread\n");
#endif
    if (!py) printf("PyTorch column skipped: %s\n", reason);
    fflush(stdout);
    for (ti = 0; ti < o.n_threads; ti++) {
        double gbps = read_gbps(o.threads[ti]);
        printf("streaming read, %d thread(s): %.1f GB/s (the memory time's bandwidth)\n", o.threads[ti], gbps);
        fflush(stdout);
        for (ki = 0; ki < o.n_kinds; ki++) {
            bench_row *r = &rows[n_rows];
            if (!measure_mhe(&o, ki, o.threads[ti], r)) continue;
            for (i = 0; i < o.n_contexts && gbps > 0; i++)
                r[i].memory_us = ((double)r[i].weight_bytes + (double)r[i].mhe_kv_bytes_per_token * r[i].context) / gbps / 1e3;
            if (py) measure_torch(&o, py, ki, o.threads[ti], r, about, sizeof about);
            for (i = 0; i < o.n_contexts; i++) print_json(&o, &r[i]);
            n_rows += o.n_contexts;
        }
    }
    if (about[0]) printf("PyTorch: %s\n", about);
    print_table(&o, rows, n_rows);
    return 0;
}
