/* llama_decode - llama.cpp's side of tools/bench/bench_llama.py: load a GGUF
   model, feed a prompt of token ids, then decode greedily, as `mhe generate
   --ids ... --temperature 0` does, and print one JSON line: load time (to
   a context ready to decode), time to the first new token, microseconds
   per decoded token, peak RSS and the ids. Built by bench_llama.py against
   the libllama it builds from llama-cpp-python's source under build/
   (outside tools/bench/*.c, which make builds: it needs llama.h).
     llama_decode MODEL.gguf THREADS N_NEW KV_TYPE(f32|f16) ID ID ...
   The prompt goes in one batch (llama.cpp's prompt processing); every new
   token is one llama_decode of one token. mmap is llama.cpp's default. */
#include "llama.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static int argmax(const float *x, int n) {
    int i, b = 0;
    for (i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) { (void)level; (void)text; (void)ud; }

int main(int argc, char **argv) {
    struct llama_model_params mp;
    struct llama_context_params cp;
    struct llama_model *model;
    struct llama_context *ctx;
    const struct llama_vocab *vocab;
    int threads, n_new, n_prompt, i, V, *ids;
    double t0, t_load, t_first, t_gen;
    struct rusage ru;
    if (argc < 6) { fprintf(stderr, "usage: llama_decode MODEL.gguf THREADS N_NEW f32|f16 ID...\n"); return 2; }
    threads = atoi(argv[2]); n_new = atoi(argv[3]); n_prompt = argc - 5;
    ids = (int *)malloc(sizeof(int) * (size_t)(n_prompt + n_new));
    for (i = 0; i < n_prompt; i++) ids[i] = atoi(argv[5 + i]);
    llama_log_set(quiet, NULL);
    t0 = now_s();
    llama_backend_init();
    mp = llama_model_default_params();
    model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "llama_decode: cannot load %s\n", argv[1]); return 1; }
    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_new);
    cp.n_batch = cp.n_ubatch = (uint32_t)n_prompt;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = strcmp(argv[4], "f16") == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.no_perf = true;
    ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_decode: cannot create a context\n"); return 1; }
    vocab = llama_model_get_vocab(model);
    V = llama_vocab_n_tokens(vocab);
    t_load = now_s() - t0;
    if (llama_decode(ctx, llama_batch_get_one(ids, n_prompt)) != 0) { fprintf(stderr, "llama_decode: prompt failed\n"); return 1; }
    ids[n_prompt] = argmax(llama_get_logits_ith(ctx, -1), V);
    t_first = now_s() - t0;
    t_gen = now_s();
    for (i = 1; i < n_new; i++) {
        if (llama_decode(ctx, llama_batch_get_one(&ids[n_prompt + i - 1], 1)) != 0) { fprintf(stderr, "llama_decode: step failed\n"); return 1; }
        ids[n_prompt + i] = argmax(llama_get_logits_ith(ctx, -1), V);
    }
    t_gen = now_s() - t_gen;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"load_s\": %.4f, \"first_token_s\": %.4f, \"us_per_token\": %.1f, \"peak_rss_kb\": %ld, \"ids\": [", t_load, t_first,
           n_new > 1 ? t_gen / (n_new - 1) * 1e6 : 0.0, ru.ru_maxrss);
    for (i = 0; i < n_prompt + n_new; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
