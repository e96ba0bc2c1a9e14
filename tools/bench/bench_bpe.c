/* bench_bpe - byte-level BPE (or WordPiece) encoding speed of mhe: the best
   of R timed encodes of a whole text (after one untimed); on one thread
   mhe_bpe_encode with a caller's work buffer, on THREADS > 1
   mhe_bpe_encode_threads. tools/bench/bench_bpe.py runs it beside the
   tokenizers package on the same tokenizer.json and text.
     build/bench_bpe TOKENIZER TEXT [R] [THREADS]   prints: mb_per_s ids bytes seconds */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>
#include "../cli/mhe_clock.h"

int main(int argc, char **argv) {
    mhe_bpe b;
    void *text, *work;
    size_t len, n = 0;
    int *ids, r, R = argc > 3 ? atoi(argv[3]) : 5, threads = argc > 4 ? atoi(argv[4]) : 1;
    double best = 1e30;
    char err[MHE_ERR_LEN];
    if (argc < 3 || threads < 1) { fprintf(stderr, "usage: bench_bpe TOKENIZER TEXT [REPEATS] [THREADS]\n"); return 2; }
    mhe_bpe_init(&b, NULL);
    if (mhe_bpe_load(&b, argv[1]) != MHE_OK) { fprintf(stderr, "bench_bpe: %s\n", b.err); return 1; }
    if (mhe_read_file(argv[2], &text, &len, NULL, err) != MHE_OK) { fprintf(stderr, "bench_bpe: %s\n", err); return 1; }
    ids = (int *)malloc((mhe_bpe_max_ids(&b, len) + 1) * sizeof(int));
    work = malloc(mhe_bpe_work_size(len));
    if (!ids || !work) { fprintf(stderr, "bench_bpe: out of memory\n"); return 1; }
    for (r = -1; r < (R < 1 ? 1 : R); r++) {
        double t0 = now_s(), t;
        mhe_status st = threads == 1 ? mhe_bpe_encode(&b, (const char *)text, len, ids, mhe_bpe_max_ids(&b, len), &n, work, err)
                                     : mhe_bpe_encode_threads(&b, (const char *)text, len, ids, mhe_bpe_max_ids(&b, len), &n, threads, err);
        if (st != MHE_OK) { fprintf(stderr, "bench_bpe: %s\n", err); return 1; }
        t = now_s() - t0;
        if (r >= 0 && t < best) best = t;
    }
    printf("%.3f %zu %zu %.6f\n", len / best / 1e6, n, len, best);
    free(ids); free(work); free(text);
    mhe_bpe_free(&b);
    return 0;
}
