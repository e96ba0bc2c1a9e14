/* mhe_decode - mhe's side of tools/bench/bench_llama.py, the same steps and
   JSON line as llama_decode.c: mhe_model_load and the finiteness check that
   the mhe tool makes, a KV cache for prompt + new tokens, the prompt's ids
   through mhe_prefill (as `mhe generate`), then greedy decoding (mhe_sample at temperature
   0, as `mhe generate --temperature 0`).
     mhe_decode MODEL.safetensors THREADS N_NEW ID ID ... */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifndef _WIN32
#include <sys/resource.h>   /* peak RSS (0 on Windows) */
#endif

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char **argv) {
    mhe_model m;
    mhe_kv_cache kv;
    int threads, n_new, n_prompt, i, *ids;
    double t0, t_load, t_first, t_gen;
    long peak_kb = 0;
    if (argc < 5) { fprintf(stderr, "usage: mhe_decode MODEL THREADS N_NEW ID...\n"); return 2; }
    threads = atoi(argv[2]); n_new = atoi(argv[3]); n_prompt = argc - 4;
    ids = (int *)malloc(sizeof(int) * (size_t)(n_prompt + n_new));
    for (i = 0; i < n_prompt; i++) ids[i] = atoi(argv[4 + i]);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    t0 = now_s();
    if (mhe_model_load(&m, argv[1], NULL) != MHE_OK || mhe_model_check_finite(&m) != MHE_OK) { fprintf(stderr, "mhe_decode: %s\n", m.err); return 1; }
    if (mhe_kv_cache_init(&kv, &m, n_prompt + n_new, NULL) != MHE_OK) { fprintf(stderr, "mhe_decode: no KV cache\n"); return 1; }
    t_load = now_s() - t0;
    if (mhe_prefill(&m, &kv, ids, n_prompt) != MHE_OK) { fprintf(stderr, "mhe_decode: %s\n", m.err); return 1; }
    ids[n_prompt] = mhe_sample(kv.logits, m.cfg.vocab_size, 0, 0, NULL);
    t_first = now_s() - t0;
    t_gen = now_s();
    for (i = 1; i < n_new; i++) {
        if (mhe_decode_step(&m, &kv, ids[n_prompt + i - 1]) != MHE_OK) { fprintf(stderr, "mhe_decode: %s\n", m.err); return 1; }
        ids[n_prompt + i] = mhe_sample(kv.logits, m.cfg.vocab_size, 0, 0, NULL);
    }
    t_gen = now_s() - t_gen;
#ifndef _WIN32
    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        peak_kb = ru.ru_maxrss;
    }
#endif
    printf("{\"load_s\": %.4f, \"first_token_s\": %.4f, \"us_per_token\": %.1f, \"peak_rss_kb\": %ld, \"ids\": [", t_load, t_first,
           n_new > 1 ? t_gen / (n_new - 1) * 1e6 : 0.0, peak_kb);
    for (i = 0; i < n_prompt + n_new; i++) printf(i ? ", %d" : "%d", ids[i]);
    printf("]}\n");
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    free(ids);
    return 0;
}
