/* Replays every fuzz seed (tests/fuzz/seeds/) and every committed crash
   input (tests/fuzz/regress/<target>/) through the fuzz targets of
   tests/fuzz/fuzz.h, with their invariants as CHECKs; under
   `make test-sanitize` with AddressSanitizer and UBSan. The seed
   checkpoints must also load: they are known-good files of every kind. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <dirent.h>

static const char *fuzz_current;
#define FUZZ_FAIL(msg) (test_fail_count++, printf("FAIL %s: fuzz invariant: %s\n", fuzz_current, (msg)))
#include "fuzz/fuzz.h"

static unsigned char *read_all(const char *path, size_t *n) {
    void *buf;
    char err[MHE_ERR_LEN];
    if (mhe_read_file(path, &buf, n, NULL, err) != MHE_OK) { printf("%s\n", err); return NULL; }
    return (unsigned char *)buf;
}

/* runs fn on every file of dir; returns how many; `must` checks each file */
static int replay_dir(const char *dir, int (*fn)(const uint8_t *, size_t), void (*must)(const char *, const unsigned char *, size_t)) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        char path[600];
        unsigned char *buf;
        size_t size;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!(buf = read_all(path, &size))) { CHECK(0, "cannot read %s", path); continue; }
        fuzz_current = path;
        fn(buf, size);
        if (must) must(path, buf, size);
        test_pass_count++;
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

static void must_load(const char *path, const unsigned char *buf, size_t n) {
    mhe_model m;
    mhe_status s = mhe_model_load_mem(&m, buf, n, NULL);
    CHECK(s == MHE_OK, "seed %s loads: %s", path, m.err);
    if (s == MHE_OK) mhe_model_free(&m);
}

static void must_train_load(const char *path, const unsigned char *buf, size_t n) {
    mhe_model m;
    mhe_trainer t;
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 2; tc.seq_len = 4;   /* what tests/fuzz/make_seeds.c trained with */
    if (mhe_model_load_mem(&m, buf, n, NULL) != MHE_OK) { CHECK(0, "seed %s loads", path); return; }
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK && mhe_trainer_load_mem(&t, buf, n) == MHE_OK && t.step == 2,
          "trainer seed %s restores its state: %s", path, t.err);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

/* the ends of every numeric field's range, printed as the help shows them,
   are accepted by set and by validate (they once disagreed on 0.99, 1e-6) */
static void range_ends(void) {
    int i, e, bad = 0;
    char err[MHE_ERR_LEN], val[64];
    for (i = 0; i < MHE__N_CONFIG_FIELDS + MHE__N_TRAIN_FIELDS; i++) {
        int train = i >= MHE__N_CONFIG_FIELDS;
        const mhe__field *f = train ? &mhe__train_fields[i - MHE__N_CONFIG_FIELDS] : &mhe__config_fields[i];
        if (f->type != MHE__F_INT && f->type != MHE__F_FLOAT) continue;
        for (e = 0; e < 2; e++) {
            mhe_config c = mhe_config_default();
            mhe_train_config t = mhe_train_config_default();
            mhe_status s1, s2;
            snprintf(val, sizeof val, f->type == MHE__F_INT ? "%.0f" : "%g", e ? f->hi : f->lo);
            s1 = train ? mhe_train_config_set(&t, f->key, val, err) : mhe_config_set(&c, f->key, val, err);
            s2 = train ? mhe_train_config_validate(&t, err) : mhe_config_validate(&c, err);
            /* validate may still object to a combination (min_lr > lr, d_model % n_heads), never to the field */
            if (s1 != MHE_OK || (s2 != MHE_OK && !strncmp(err, train ? "train field '" : "config field '", 13))) {
                printf("  %s=%s: set %s, validate: %s\n", f->key, val, mhe_status_str(s1), s2 == MHE_OK ? "ok" : err);
                bad++;
            }
        }
    }
    CHECK(bad == 0, "%d range ends rejected", bad);
}

int main(void) {
    int i, k, seeds = 0, regress = 0;
    for (i = 0; i < FUZZ_N_TARGETS; i++) {
        const fuzz_target *ft = &fuzz_targets[i];
        char dir[256];
        int ns = 0, nr;
        for (k = 0; k < 3 && ft->seeds[k]; k++) {
            void (*must)(const char *, const unsigned char *, size_t) = NULL;
            snprintf(dir, sizeof dir, "tests/fuzz/seeds/%s", ft->seeds[k]);
            if (!strcmp(ft->name, "checkpoint")) must = !strcmp(ft->seeds[k], "trainer") ? must_train_load : must_load;
            ns += replay_dir(dir, ft->fn, must);
        }
        snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", ft->name);
        nr = replay_dir(dir, ft->fn, NULL);
        printf("  %-12s %3d seeds, %3d regression inputs\n", ft->name, ns, nr);
        CHECK(ns > 0, "target %s has seeds (run from the repository root)", ft->name);
        seeds += ns; regress += nr;
    }
    if (fuzz_tmp_path[0]) remove(fuzz_tmp_path);
    range_ends();
    printf("  replayed %d seeds and %d regression inputs\n", seeds, regress);
    return TEST_END();
}
