/* Crash-safe checkpoints. A valid trainer checkpoint sits at PATH; child
   processes try to replace it with a large model and are stopped midway:
     1. a write error: RLIMIT_FSIZE with SIGXFSZ ignored, so write() fails
        with EFBIG; the save must report MHE_ERR_IO and remove its temp file;
     2. death mid-write: the same limit with SIGXFSZ at its default action,
        so the kernel kills the child inside write() at a known byte;
     3. SIGKILL from the parent as soon as the child's temporary file
        PATH.tmp.PID.0 holds some bytes.
   After each, PATH is the old checkpoint byte for byte (or, if a kill came
   after the rename, the complete new one), loads, and training resumed from
   it gives the same losses and weights as the run that never stopped. A
   stale file at the next save's temporary name, even a symlink to another
   file, does not break that save and is not written through. */
#define _POSIX_C_SOURCE 200809L
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#ifdef _WIN32
/* fork, setrlimit, signals and symlinks are POSIX; test_fileio checks the
   Windows side of the writer (replacing, a target open elsewhere, a stale
   temporary file) */
int main(void) {
    printf("SKIP test_crash_save: needs fork, setrlimit, SIGXFSZ/SIGKILL and symlinks (POSIX)\n");
    printf("RESULT: %d passed, %d failed, 1 skipped\n", test_pass_count, test_fail_count);
    return 0;
}
#else
#include <stdlib.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static char path[128], tmp[200], victim[160];

/* the temporary file the save of process `pid` starts with */
static void tmp_of(pid_t pid) { snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", path, (long)pid); }
static int data[400];

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (long)sb.st_size : -1;
}

static int same_file(const char *p, const unsigned char *want, size_t n) {
    size_t m;
    unsigned char *b = test_slurp(p, &m);
    int same = b && m == n && !memcmp(b, want, n);
    free(b);
    return same;
}

static mhe_config small_cfg(void) {
    mhe_config c = mhe_config_default();
    c.vocab_size = 32; c.d_model = 16; c.n_heads = 4; c.n_layers = 2; c.max_seq_len = 16;
    c.attn[0] = MHE_ATTN_MHE_MUL; c.dropout = 0.1f;   /* resume must replay dropout */
    return c;
}

static mhe_train_config small_tc(void) {
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 4; tc.seq_len = 16; tc.steps = 20; tc.warmup = 2; tc.seed = 11;
    return tc;
}

/* a child that saves `big` over PATH with an optional file-size limit */
static pid_t save_child(const mhe_model *big, long fsize_limit, int ignore_xfsz) {
    pid_t pid = fork();
    if (pid == 0) {
        mhe_status s;
        if (fsize_limit > 0) {
            struct rlimit rl;
            rl.rlim_cur = rl.rlim_max = (rlim_t)fsize_limit;
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        if (ignore_xfsz) signal(SIGXFSZ, SIG_IGN);
        s = mhe_checkpoint_save(big, NULL, path);
        if (s != MHE_OK) printf("  child: %s\n", ((mhe_model *)big)->err);
        fflush(stdout);
        _exit((int)s);
    }
    return pid;
}

/* PATH still holds `old`, and training resumed from it matches the reference */
static void resumes(const unsigned char *old, size_t n, const float *ref_losses, const float *ref_params, int64_t np, const char *what) {
    mhe_model m;
    mhe_trainer t;
    mhe_train_config tc = small_tc();
    int s, same = 1;
    CHECK(same_file(path, old, n), "%s: the old checkpoint is intact byte for byte", what);
    if (mhe_model_load(&m, path, NULL) != MHE_OK) { CHECK(0, "%s: old checkpoint loads: %s", what, m.err); return; }
    CHECK(mhe_trainer_init(&t, &m, &tc) == MHE_OK && mhe_trainer_load(&t, path) == MHE_OK && t.step == 3,
          "%s: trainer state loads (step %d): %s", what, t.step, t.err);
    for (s = 0; s < 3; s++) {
        OK(mhe_trainer_step(&t, data, 400));
        if (t.last_loss != ref_losses[s]) same = 0;
    }
    CHECK(same && m.n_params == np && !memcmp(m.param_data, ref_params, (size_t)np * sizeof(float)),
          "%s: training resumed from it equals the uninterrupted run bit for bit", what);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

int main(void) {
    mhe_config c = small_cfg(), bc = mhe_config_default();
    mhe_train_config tc = small_tc();
    mhe_model m, big, r;
    mhe_trainer t;
    float ref_losses[3], *ref_params;
    unsigned char *old;
    size_t old_n, big_size = 0;
    int i, st, attempt, mid_write = 0, before_rename = 0;
    pid_t pid;
    FILE *f;

    snprintf(path, sizeof path, "/tmp/mhe_test_crash_%d.safetensors", (int)getpid());
    snprintf(victim, sizeof victim, "%s.victim", path);
    for (i = 0; i < 400; i++) data[i] = (i * 13 + i / 7) % 32;

    /* the checkpoint to protect: after 3 steps; the reference run goes on 3 more */
    OK(mhe_model_init(&m, &c, 5, NULL));
    OK(mhe_trainer_init(&t, &m, &tc));
    for (i = 0; i < 3; i++) OK(mhe_trainer_step(&t, data, 400));
    CHECK(mhe_checkpoint_save(&m, &t, path) == MHE_OK, "first save: %s", t.err);
    old = test_slurp(path, &old_n);
    for (i = 0; i < 3; i++) { OK(mhe_trainer_step(&t, data, 400)); ref_losses[i] = t.last_loss; }
    ref_params = (float *)malloc((size_t)m.n_params * sizeof(float));
    memcpy(ref_params, m.param_data, (size_t)m.n_params * sizeof(float));

    /* the large model the children try to save (built once, shared by fork) */
#ifdef MHE_TEST_QUICK
    bc.d_model = 192; bc.n_layers = 2;
#else
    bc.d_model = 384; bc.n_layers = 4;
#endif
    bc.n_heads = 4; bc.max_seq_len = 256;
    CHECK(mhe_model_init(&big, &bc, 9, NULL) == MHE_OK, "large model: %s", big.err);
    OK(mhe_checkpoint_size(&big, NULL, &big_size));
    printf("  protected checkpoint %lu bytes; the interrupted saves write %lu bytes\n", (unsigned long)old_n, (unsigned long)big_size);
    fflush(stdout);

    /* 1. write error (EFBIG): reported, temp file removed, old file intact */
    pid = save_child(&big, 1L << 16, 1);
    tmp_of(pid);
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == MHE_ERR_IO, "write error: the save reports MHE_ERR_IO (status 0x%x)", st);
    CHECK(file_size(tmp) < 0, "write error: the temporary file is removed");
    resumes(old, old_n, ref_losses, ref_params, m.n_params, "write error");

    /* 2. killed by SIGXFSZ inside write(), 64 KB into the temp file */
    pid = save_child(&big, 1L << 16, 0);
    tmp_of(pid);
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ, "the child died by SIGXFSZ mid-write (status 0x%x)", st);
    CHECK(file_size(tmp) == 1L << 16, "a partial temp file of 64 KB is left (%ld bytes)", file_size(tmp));
    resumes(old, old_n, ref_losses, ref_params, m.n_params, "death mid-write");

    /* 3. SIGKILL once the temp file has bytes; up to 8 tries to land inside the write */
    for (attempt = 0; attempt < 8 && !mid_write; attempt++) {
        struct timespec ts = { 0, 20000 };
        long sz = -1;
        int waited;
        remove(tmp);
        pid = save_child(&big, 0, 0);
        tmp_of(pid);
        /* kill as soon as the temp file holds some bytes */
        for (waited = 0; waited < 200000 && (sz = file_size(tmp)) <= 0; waited++) nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) {
            sz = file_size(tmp);
            if (same_file(path, old, old_n)) {
                before_rename++;
                if (sz > 0 && (size_t)sz < big_size) mid_write = 1;
            } else {
                /* the kill came after the rename: then the new file must be complete */
                CHECK(mhe_model_load(&r, path, NULL) == MHE_OK && r.n_params == big.n_params, "a renamed file is complete");
                mhe_model_free(&r);
                remove(path); f = fopen(path, "wb"); fwrite(old, 1, old_n, f); fclose(f);
            }
        } else {   /* it finished first: put the old file back and try again */
            remove(path); f = fopen(path, "wb"); fwrite(old, 1, old_n, f); fclose(f);
        }
    }
    printf("  SIGKILL: %d of %d kills landed before the rename, %s inside the write (temp file %ld of %lu bytes)\n",
           before_rename, attempt, mid_write ? "one" : "none", file_size(tmp), (unsigned long)big_size);
    CHECK(mid_write, "a SIGKILL landed in the middle of the write");
    resumes(old, old_n, ref_losses, ref_params, m.n_params, "SIGKILL");

    /* a leftover temp file does not break the next save; a symlink is not followed */
    CHECK(file_size(tmp) >= 0, "a partial temp file is left over from the kill");
    remove(tmp);
    f = fopen(victim, "wb"); fputs("victim", f); fclose(f);
    tmp_of(getpid());   /* the name this process's next save tries first */
    CHECK(symlink(victim, tmp) == 0, "stale temp file as a symlink");
    CHECK(mhe_checkpoint_save(&m, &t, path) == MHE_OK, "save over a stale temp file: %s", t.err);
    CHECK(file_size(tmp) >= 0 && remove(tmp) == 0, "the stale symlink was left alone");
    tmp_of(getpid()); tmp[strlen(tmp) - 1] = '1';
    CHECK(file_size(tmp) < 0, "no temp file after a successful save");
    CHECK(file_size(victim) == 6, "the symlink's target was not written through");
    CHECK(mhe_model_load(&r, path, NULL) == MHE_OK && !memcmp(r.param_data, m.param_data, (size_t)m.n_params * sizeof(float)),
          "the new checkpoint holds the new weights: %s", r.err);
    mhe_model_free(&r);

    remove(path); remove(tmp); remove(victim);
    free(old); free(ref_params);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    mhe_model_free(&big);
    return TEST_END();
}
#endif /* _WIN32 */
