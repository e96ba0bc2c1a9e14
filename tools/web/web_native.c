/* web_native - the page's C side (mhe_web.c) as a native program, so that
   tests/test_web.py can hold what the browser shows against the same code
   built natively, and tools/web/bench.py can time it.
     web_native CONFIG_TEXT TEXT_FILE SEED STEPS PROMPT
   trains STEPS steps and prints one JSON object: the loss of each step,
   steps per second, the prompt's logits [T, V] and each layer's maps.
   (C99 with stdio: the library itself is built without it, as on the page.) */
#define _POSIX_C_SOURCE 200809L
#include "mhe_web.c"
#include <stdio.h>
#include <time.h>

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }

/* a string into web_buffer */
static int put(const char *s, size_t n) {
    unsigned char *b = web_buffer((int)n);
    if (!b) return -1;
    memcpy(b, s, n);
    b[n] = 0;
    return (int)n;
}

int main(int argc, char **argv) {
    FILE *f;
    char *text;
    long size;
    int steps, s, T, V, L, H, i, n;
    unsigned seed;
    double t0, secs;
    float *loss;
    if (argc != 6) {
        fprintf(stderr, "usage: web_native CONFIG_TEXT TEXT_FILE SEED STEPS PROMPT\n");
        return 2;
    }
    seed = (unsigned)strtoul(argv[3], NULL, 10);
    steps = atoi(argv[4]);
    if (!(f = fopen(argv[2], "rb")) || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    text = (char *)malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) { fprintf(stderr, "cannot read %s\n", argv[2]); return 1; }
    fclose(f);
    if (put(text, (size_t)size) < 0 || web_set_text((int)size) != 0) { fprintf(stderr, "%s\n", web_err()); return 1; }
    n = put(argv[1], strlen(argv[1]));
    if (n < 0 || web_setup(n, seed) != 0) { fprintf(stderr, "%s\n", web_err()); return 1; }
    loss = (float *)malloc(((size_t)steps + 1) * sizeof(float));
    t0 = now();
    for (s = 0; s < steps; s++)
        if (isnan(loss[s] = web_step())) { fprintf(stderr, "%s\n", web_err()); return 1; }
    secs = now() - t0;
    n = put(argv[5], strlen(argv[5]));
    if ((T = web_analyze(n)) < 0) { fprintf(stderr, "%s\n", web_err()); return 1; }
    V = W.m.cfg.vocab_size; L = W.m.cfg.n_layers; H = W.m.cfg.n_heads;
    printf("{\"arch\": %d, \"params\": %.0f, \"steps_per_s\": %.6g, \"T\": %d, \"V\": %d,\n\"loss\": [", web_arch(), web_n_params(),
           steps / (secs > 0 ? secs : 1e-9), T, V);
    for (s = 0; s < steps; s++) printf("%s%.9g", s ? ", " : "", loss[s]);
    printf("],\n\"logits\": [");
    for (i = 0; i < T * V; i++) printf("%s%.9g", i ? ", " : "", web_out()[i]);
    printf("],\n\"map_kind\": [");
    for (i = 0; i < L; i++) printf("%s%d", i ? ", " : "", web_map_kind(i));
    printf("],\n\"maps\": [");
    for (i = 0; i < L * H * T * T; i++) printf("%s%.9g", i ? ", " : "", web_out()[(size_t)(T + 1) * V + i]);
    printf("]}\n");
    free(loss); free(text);
    return 0;
}
