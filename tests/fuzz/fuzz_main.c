/* tests/fuzz/fuzz_main.c - libFuzzer driver, built once per target with
   -DFUZZ_NAME='"<target>"' (see `make fuzz`). */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include "fuzz.h"

static int (*fuzz_fn)(const uint8_t *, size_t);

static void fuzz_cleanup(void) { if (fuzz_tmp_path[0]) remove(fuzz_tmp_path); }

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    int i;
    (void)argc; (void)argv;
    for (i = 0; i < FUZZ_N_TARGETS; i++) if (!strcmp(fuzz_targets[i].name, FUZZ_NAME)) fuzz_fn = fuzz_targets[i].fn;
    if (!fuzz_fn) { fprintf(stderr, "unknown fuzz target %s\n", FUZZ_NAME); exit(2); }
    atexit(fuzz_cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_fn(data, size); }
