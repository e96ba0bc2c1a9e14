/* tests/test_fileio.c - file I/O where Windows differs from POSIX, checked on
   every platform (make test-windows runs it under wine):
   - bytes 0x0A, 0x0D, 0x1A and 0x00 survive a checkpoint save and load and a
     corpus read (text mode would turn LF into CR LF on writing, and drop CR
     and stop at 0x1A, Ctrl-Z, on reading);
   - a save replaces an existing file (rename() fails over one on Windows),
     again and again, leaving no temporary file; a stale file at the first
     temporary name is left alone;
   - a target held open by a reader: POSIX replaces it (the reader keeps the
     old bytes); Windows refuses, and the old file and no temporary remain;
   - a directory (and on Windows the device NUL) as output is refused;
   - the size of a sparse file beyond 2 GB and 4 GB is read through 64-bit
     offsets (long is 32 bits on Windows): the reader asks for that many
     bytes, which the allocator here refuses;
   - mhe_model_load reads the weights into the model's own memory: a file
     truncated after the load changes nothing (a mapped file would fault),
     and one truncated during the load fails it cleanly. */
#ifndef _WIN32
#define _POSIX_C_SOURCE 200809L   /* fseeko, getpid */
#endif
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>

/* the allocator refuses blocks over 1 GB: the large-file check needs only the size;
   with cut_path set, the first block of at least cut_at bytes truncates that file */
static const char *cut_path;
static size_t cut_at;
static int cut_done;
static void *test_malloc(void *ctx, size_t n) {
    (void)ctx;
    if (cut_path && n >= cut_at && !cut_done) {
        FILE *f = fopen(cut_path, "wb");
        cut_done = f != NULL;
        if (f) fclose(f);
    }
    return n > ((size_t)1 << 30) ? NULL : malloc(n ? n : 1);
}
#define MHE_MALLOC(ctx, n) test_malloc((ctx), (n))
#define MHE_REALLOC(ctx, p, old, n) ((void)(ctx), (void)(old), realloc((p), (n)))
#define MHE_FREE(ctx, p) ((void)(ctx), free(p))

#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#ifdef _WIN32
#include <process.h>
#include <direct.h>
#define getpid _getpid
#define mkdir(path, mode) _mkdir(path)
#define rmdir _rmdir
#else
#include <unistd.h>
#include <sys/stat.h>
#endif

static char dir[512];

static void path_of(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/mhe_test_fileio_%ld_%s", dir, (long)getpid(), name);
}

static int exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int write_bytes(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    int ok = f && fwrite(b, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    return ok;
}

/* one F32 tensor of n values, all with the bytes v */
static mhe_status save_one(const char *p, float *v, int n, char *err) {
    mhe_st_item it;
    memset(&it, 0, sizeof it);
    it.name = "x"; it.ndim = 1; it.shape[0] = n; it.data = v;
    return mhe_st_save_file(p, &it, 1, NULL, NULL, 0, NULL, err);
}

static void binary_round_trip(void) {
    static const char cfg[] = "vocab_size=32\nd_model=16\nn_heads=2\nn_layers=1\nmax_seq_len=16\n";
    static const unsigned char text[] = "line one\r\nline two\n\x1a after Ctrl-Z\r\r\n\n\x1a";
    char p[600], err[MHE_ERR_LEN];
    mhe_config c;
    mhe_model m, back;
    int64_t i;
    int hits[4] = { 0, 0, 0, 0 }, *tok = NULL;
    size_t n = 0, k;
    unsigned char *bytes;

    /* weights whose bytes are 0x0A, 0x0D, 0x1A and 0x00 (all finite floats) */
    c = mhe_config_default();
    CHECK(mhe_config_parse(&c, cfg, sizeof cfg - 1, err) == MHE_OK, "config: %s", err);
    CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "init: %s", m.err);
    for (i = 0; i < m.n_params; i++) {
        static const uint32_t pat[4] = { 0x0a0d1a0au, 0x0d0a0a1au, 0x1a000d0au, 0x000a0d1au };
        uint32_t u = pat[i % 4];
        memcpy(&m.param_data[i], &u, 4);
    }
    path_of(p, sizeof p, "bin.safetensors");
    CHECK(mhe_checkpoint_save(&m, NULL, p) == MHE_OK, "save: %s", m.err);
    bytes = test_slurp(p, &n);
    for (k = 0; bytes && k < n; k++)
        hits[0] += bytes[k] == 0x0a, hits[1] += bytes[k] == 0x0d, hits[2] += bytes[k] == 0x1a, hits[3] += bytes[k] == 0;
    CHECK(bytes && hits[0] >= m.n_params && hits[1] >= m.n_params / 2 && hits[2] >= m.n_params / 2,
          "the file holds the bytes 0x0A (%d), 0x0D (%d), 0x1A (%d)", hits[0], hits[1], hits[2]);
    free(bytes);
    CHECK(mhe_model_load(&back, p, NULL) == MHE_OK, "load: %s", back.err);
    if (back.param_data) {
        CHECK(back.n_params == m.n_params && memcmp(back.param_data, m.param_data, (size_t)m.n_params * 4) == 0,
              "weights with 0x0A/0x0D/0x1A/0x00 bytes come back bit for bit");
        mhe_model_free(&back);
    }
    remove(p);
    mhe_model_free(&m);

    /* a corpus: one token per byte, CR and Ctrl-Z included */
    path_of(p, sizeof p, "corpus.txt");
    CHECK(write_bytes(p, text, sizeof text - 1), "write the corpus");
    CHECK(mhe_read_text_tokens(p, &tok, &n, NULL, err) == MHE_OK, "read the corpus: %s", err);
    if (tok) {
        int same = n == sizeof text - 1;
        for (k = 0; same && k < n; k++) same = tok[k] == text[k];
        CHECK(same, "the corpus reads back byte for byte (%zu tokens of %zu bytes)", n, sizeof text - 1);
        free(tok);
    }
    remove(p);
}

static void replace_existing(void) {
    char p[600], tmp[700], stale[700], err[MHE_ERR_LEN];
    float v[64];
    int round, i;
    size_t n;
    unsigned char *b;
    path_of(p, sizeof p, "replace.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", p, (long)getpid());
    for (round = 0; round < 4; round++) {
        for (i = 0; i < 64; i++) v[i] = (float)(round * 100 + i);
        CHECK(save_one(p, v, 64 - round, err) == MHE_OK, "save %d over the existing file: %s", round, err);
        b = test_slurp(p, &n);
        CHECK(b && n > 4 * (size_t)(64 - round) && memcmp(b + n - 4 * (size_t)(64 - round), v, 4 * (size_t)(64 - round)) == 0,
              "save %d: the file holds the new values", round);
        free(b);
        CHECK(!exists(tmp), "save %d: no temporary file left", round);
    }
    /* a stale file at the first temporary name: skipped, not written through, not removed */
    snprintf(stale, sizeof stale, "%s", tmp);
    CHECK(write_bytes(stale, "stale", 5), "plant a stale temporary file");
    CHECK(save_one(p, v, 8, err) == MHE_OK, "save beside a stale temporary file: %s", err);
    b = test_slurp(stale, &n);
    CHECK(b && n == 5 && memcmp(b, "stale", 5) == 0, "the stale file is left as it was");
    free(b);
    remove(stale);
    remove(p);
}

/* a reader holds the target open while a save replaces it */
static void replace_open(void) {
    char p[600], tmp[700], err[MHE_ERR_LEN];
    float v[16], w[16];
    int i;
    size_t n;
    unsigned char *before;
    FILE *r;
    path_of(p, sizeof p, "open.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", p, (long)getpid());
    for (i = 0; i < 16; i++) v[i] = (float)i, w[i] = -(float)i;
    CHECK(save_one(p, v, 16, err) == MHE_OK, "save: %s", err);
    before = test_slurp(p, &n);
    r = fopen(p, "rb");
    CHECK(r != NULL, "open the target for reading");
#ifdef _WIN32
    /* the C runtime opens without FILE_SHARE_DELETE: the replace must fail cleanly */
    CHECK(save_one(p, w, 16, err) == MHE_ERR_IO && strstr(err, "cannot rename"), "a target open elsewhere is refused: %s", err);
    {
        unsigned char *after = test_slurp(p, &n);
        CHECK(before && after && memcmp(before, after, n) == 0, "the open target keeps its old bytes");
        free(after);
    }
#else
    CHECK(save_one(p, w, 16, err) == MHE_OK, "a target open elsewhere is replaced: %s", err);
    if (r) {   /* the reader still sees the old file */
        unsigned char *old = (unsigned char *)malloc(n);
        CHECK(old && fread(old, 1, n, r) == n && before && memcmp(old, before, n) == 0, "the reader keeps the old bytes");
        free(old);
    }
#endif
    if (r) fclose(r);
    CHECK(!exists(tmp), "no temporary file left");
    free(before);
    remove(p);
}

static void refused_targets(void) {
    char p[600], err[MHE_ERR_LEN];
    float v[4] = { 1, 2, 3, 4 };
    path_of(p, sizeof p, "dir");
    CHECK(mkdir(p, 0700) == 0, "make a directory");
    CHECK(save_one(p, v, 4, err) == MHE_ERR_IO && strstr(err, "directory"), "a directory as output is refused: %s", err);
    CHECK(rmdir(p) == 0, "the directory is still a directory");
#ifdef _WIN32
    err[0] = 0;
    CHECK(mhe_out_check("NUL", err) == MHE_ERR_IO && strstr(err, "device"), "the device NUL as output is refused: %s", err);
    /* CON is in every directory too (wine without a console cannot open it:
       then the temporary name CON.tmp... fails, a refusal all the same) */
    path_of(p, sizeof p, "con");
    strcpy(strrchr(p, '/') + 1, "CON");
    CHECK(mhe_out_check(p, err) == MHE_ERR_IO, "the device CON as output is refused: %s", err);
#endif
}

/* a sparse file of `size` bytes: seek there and write the last byte */
static int make_sparse(const char *p, long long size) {
    FILE *f = fopen(p, "wb");
    int ok;
    if (!f) return 0;
#ifdef _WIN32
    ok = _fseeki64(f, size - 1, SEEK_SET) == 0;
#else
    ok = fseeko(f, (off_t)(size - 1), SEEK_SET) == 0;
#endif
    ok = ok && fputc('z', f) != EOF;
    return (fclose(f) == 0) && ok;
}

static void large_offsets(void) {
    static const long long sizes[2] = { (1LL << 31) + 3, (1LL << 32) + 5 };
    char p[600], err[MHE_ERR_LEN], want[64];
    int i;
#ifdef _WIN32
    const int wide = sizeof(mhe__off) >= 8;
#else
    const int wide = sizeof(mhe__off) >= 8 && sizeof(off_t) >= 8;
#endif
    if (!wide) {
        printf("SKIP large offsets: this build's file offsets are 32 bits (mhe_read_file uses ftell's long)\n");
        return;
    }
    path_of(p, sizeof p, "sparse.bin");
    for (i = 0; i < 2; i++) {
        void *b = NULL;
        size_t n = 0;
        mhe_status s;
        if (!make_sparse(p, sizes[i])) {
            printf("SKIP large offsets: cannot create a sparse file of %lld bytes in %s\n", sizes[i], dir);
            remove(p);
            return;
        }
        s = mhe_read_file(p, &b, &n, NULL, err);
        snprintf(want, sizeof want, "allocate %lld bytes", sizes[i]);
        CHECK(s == MHE_ERR_NOMEM && strstr(err, want), "a %lld-byte file: its size is known (%s)", sizes[i], err);
        free(b);
    }
    remove(p);
}

/* load, truncate, decode: the logits are those of the untouched model; and a
   file cut while it is read (the weights' block allocated, their bytes not
   yet read) is MHE_ERR_TRUNCATED */
static void truncated_after_load(void) {
    static const char cfg[] = "vocab_size=40\nd_model=32\nn_heads=2\nn_layers=2\nmax_seq_len=16\n";
    char p[600], err[MHE_ERR_LEN];
    mhe_config c;
    mhe_model m, back;
    mhe_kv_cache k0, k1;
    int t, same = 1;
    mhe_status s;
    c = mhe_config_default();
    CHECK(mhe_config_parse(&c, cfg, sizeof cfg - 1, err) == MHE_OK, "config: %s", err);
    CHECK(mhe_model_init(&m, &c, 3, NULL) == MHE_OK, "init: %s", m.err);
    path_of(p, sizeof p, "cut.safetensors");
    CHECK(mhe_checkpoint_save(&m, NULL, p) == MHE_OK, "save: %s", m.err);
    CHECK(mhe_model_load(&back, p, NULL) == MHE_OK && back.grad_data == NULL, "load (no gradients until training): %s", back.err);
    CHECK(write_bytes(p, "", 0), "truncate the loaded file");
    OK(mhe_kv_cache_init(&k0, &m, 8, NULL));
    OK(mhe_kv_cache_init(&k1, &back, 8, NULL));
    for (t = 0; t < 8; t++) {
        OK(mhe_decode_step(&m, &k0, t * 3 % 40));
        OK(mhe_decode_step(&back, &k1, t * 3 % 40));
        same = same && memcmp(k0.logits, k1.logits, 40 * sizeof(float)) == 0;
    }
    CHECK(same, "a file truncated after the load: decoding goes on with the weights read, bit for bit");
    mhe_kv_cache_free(&k0); mhe_kv_cache_free(&k1);
    mhe_model_free(&back);
    CHECK(mhe_checkpoint_save(&m, NULL, p) == MHE_OK, "save again: %s", m.err);
    cut_path = p; cut_at = (size_t)m.n_params * sizeof(float); cut_done = 0;
    s = mhe_model_load(&back, p, NULL);
    cut_path = NULL;
    if (cut_done)
        CHECK(s == MHE_ERR_TRUNCATED && strstr(back.err, "changed while"), "a file cut during the load: %s (%s)", mhe_status_str(s), back.err);
    else
        printf("SKIP cut during the load: the open file could not be truncated here\n");
    if (s == MHE_OK) mhe_model_free(&back);
    remove(p);
    mhe_model_free(&m);
}

int main(void) {
    const char *t = getenv("TMPDIR");
#ifdef _WIN32
    if (!t || !*t) t = getenv("TEMP");   /* /tmp is no directory there */
#endif
    snprintf(dir, sizeof dir, "%s", t && *t ? t : "/tmp");
    binary_round_trip();
    replace_existing();
    replace_open();
    refused_targets();
    large_offsets();
    truncated_after_load();
    return TEST_END();
}
