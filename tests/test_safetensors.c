/* tests/test_safetensors.c - safetensors reader and writer: round trips,
   hand-written headers, a battery of malformed files (each must give its
   specific status), every truncation, random mutations, allocation failures
   and the atomic file save. */
#include <stdlib.h>
#include <stdint.h>
#include <time.h>

/* a counting allocator: ctx NULL never fails; otherwise ctx points to an
   int budget of successful allocations left (-1: unlimited) */
static long test_live_allocs;
static void *test_malloc(void *ctx, size_t n) {
    int *budget = (int *)ctx;
    void *p;
    if (budget && *budget == 0) return NULL;
    if (budget && *budget > 0) (*budget)--;
    p = malloc(n ? n : 1);
    if (p) test_live_allocs++;
    return p;
}
static void *test_realloc(void *ctx, void *p, size_t old, size_t n) {
    (void)ctx; (void)old;
    if (!p) test_live_allocs++;
    return realloc(p, n ? n : 1);
}
static void test_free(void *ctx, void *p) {
    (void)ctx;
    if (p) test_live_allocs--;
    free(p);
}
#define MHE_MALLOC(ctx, n) test_malloc((ctx), (n))
#define MHE_REALLOC(ctx, p, old, n) test_realloc((ctx), (p), (old), (n))
#define MHE_FREE(ctx, p) test_free((ctx), (p))

#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

/* ---- helpers ---------------------------------------------------------------- */

/* a file from a JSON header (its length written as given) and data bytes */
static unsigned char *make_file(const char *json, size_t json_len, const void *data, size_t data_len, size_t *out_len) {
    unsigned char *b = (unsigned char *)malloc(8 + json_len + data_len + 1);
    uint64_t v = json_len;
    int i;
    for (i = 0; i < 8; i++) { b[i] = (unsigned char)(v & 0xff); v >>= 8; }
    memcpy(b + 8, json, json_len);
    if (data_len) memcpy(b + 8 + json_len, data, data_len);
    *out_len = 8 + json_len + data_len;
    return b;
}

/* parse from an exactly sized copy so that AddressSanitizer sees any over-read */
static mhe_status parse_exact(mhe_safetensors *st, const unsigned char *b, size_t n) {
    unsigned char *c = n ? (unsigned char *)malloc(n) : NULL;
    mhe_status s;
    if (n) memcpy(c, b, n);
    s = mhe_st_parse(st, c, n, NULL);
    mhe_st_free(st); /* the view points into c */
    free(c);
    return s;
}

/* parse JSON + zero data of data_len bytes; returns the status, the message in msg */
static char last_msg[MHE_ERR_LEN];
static mhe_status parse_json(const char *json, size_t data_len) {
    static unsigned char zeros[256];
    mhe_safetensors st;
    size_t n;
    unsigned char *b = make_file(json, strlen(json), zeros, data_len, &n);
    unsigned char *c = (unsigned char *)malloc(n);
    mhe_status s;
    memcpy(c, b, n);
    s = mhe_st_parse(&st, c, n, NULL);
    memcpy(last_msg, st.err, MHE_ERR_LEN);
    if (s != MHE_OK) {
        CHECK(st.storage_ == NULL && st.n_tensors == 0 && st.tensors == NULL && st.err[0],
              "failed parse leaves a clean struct with a message (%s)", json);
    }
    mhe_st_free(&st);
    free(b);
    free(c);
    return s;
}

#define EXPECT(json, data_len, status) do { \
    mhe_status s_ = parse_json((json), (data_len)); \
    CHECK(s_ == (status), "%s: got %s (%s), want %s", (json), mhe_status_str(s_), last_msg, mhe_status_str(status)); \
} while (0)

static void tmp_name(char *dst, size_t cap, const char *tag) {
    static unsigned counter;
    int local;
    snprintf(dst, cap, "/tmp/mhe_test_st_%lx_%lx_%u_%s", (unsigned long)time(NULL),
             (unsigned long)((uintptr_t)&local >> 4), counter++, tag);
}

static int file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int bits_equal(const float *a, const float *b, size_t n) { return n == 0 || memcmp(a, b, n * 4) == 0; }

/* ---- round trips ------------------------------------------------------------- */

static const char *uname = "na\xc3\xafve \"quoted\" \\ back\nslash \t \xe2\x9c\x93 \xf0\x9f\x98\x80 \x01";

static void test_round_trip(void) {
    float w[12], b4[2] = {-1.5f, 3.25f}, scal = 0.5f;
    mhe_st_item items[4];
    const char *mk[3] = {"format", "note", "empty"};
    const char *mv[3] = {"mhe-1", "q\" b\\ nl\n \xc3\xa9 \xf0\x9f\x98\x80 \x1f", ""};
    size_t size = 0, written = 0, i;
    unsigned char *buf;
    mhe_safetensors st;
    mhe_status s;
    char err[MHE_ERR_LEN];
    uint64_t hl = 0;
    for (i = 0; i < 12; i++) w[i] = (float)i * 0.37f - 2.0f;
    w[5] = -0.0f;
    memset(items, 0, sizeof items);
    items[0].name = "tok_emb.weight"; items[0].ndim = 2; items[0].shape[0] = 3; items[0].shape[1] = 4; items[0].data = w;
    items[1].name = uname; items[1].ndim = 1; items[1].shape[0] = 2; items[1].data = b4;
    items[2].name = "scale"; items[2].ndim = 0; items[2].data = &scal;
    items[3].name = "empty"; items[3].ndim = 2; items[3].shape[0] = 0; items[3].shape[1] = 7; items[3].data = NULL;

    s = mhe_st_write_size(items, 4, mk, mv, 3, &size, err);
    CHECK(s == MHE_OK, "write_size: %s", err);
    buf = (unsigned char *)malloc(size);
    s = mhe_st_write_mem(buf, size - 1, &written, items, 4, mk, mv, 3, err);
    CHECK(s == MHE_ERR_ARG && written == 0, "write_mem into a too small buffer: %s", mhe_status_str(s));
    s = mhe_st_write_mem(buf, size, &written, items, 4, mk, mv, 3, err);
    CHECK(s == MHE_OK && written == size, "write_mem: %s, %zu of %zu", err, written, size);
    for (i = 0; i < 8; i++) hl |= (uint64_t)buf[i] << (8 * i);
    CHECK(hl % 8 == 0 && 8 + hl + (12 + 2 + 1) * 4 == size, "header length %llu padded to 8", (unsigned long long)hl);
    CHECK(buf[8] == '{' && (buf[8 + hl - 1] == ' ' || buf[8 + hl - 1] == '}'), "header starts with '{', ends in padding");
    /* little-endian float data: the scalar 0.5f = 0x3f000000 is the last item with data */
    CHECK(buf[size - 4] == 0x00 && buf[size - 3] == 0x00 && buf[size - 2] == 0x00 && buf[size - 1] == 0x3f,
          "float data is little-endian");

    s = mhe_st_parse(&st, buf, size, NULL);
    CHECK(s == MHE_OK, "parse of a written file: %s", st.err);
    if (s == MHE_OK) {
        const mhe_st_tensor *t;
        float out[12];
        CHECK(st.n_tensors == 4 && st.n_meta == 3, "counts %d %d", st.n_tensors, st.n_meta);
        CHECK(st.data_size == (12 + 2 + 1) * 4, "data size %zu", st.data_size);
        t = mhe_st_find(&st, "tok_emb.weight");
        CHECK(t && t->dtype == MHE_DTYPE_F32 && t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 4 && t->size == 12 &&
              t->nbytes == 48 && t->data == st.data, "tok_emb.weight entry");
        if (t) {
            CHECK(mhe_st_read_f32(&st, t, out, 12) == MHE_OK && bits_equal(out, w, 12), "tok_emb.weight values bit-exact");
            CHECK(mhe_st_read_f32(&st, t, out, 11) == MHE_ERR_SHAPE, "read_f32 with the wrong count");
            CHECK(mhe_st_read_f32(&st, t, NULL, 12) == MHE_ERR_ARG, "read_f32 into NULL");
        }
        t = mhe_st_find(&st, uname);
        CHECK(t && t->ndim == 1 && t->size == 2 && strcmp(t->name, uname) == 0 && t->data == st.data + 48,
              "unicode / quoted name survives");
        if (t) CHECK(mhe_st_read_f32(&st, t, out, 2) == MHE_OK && bits_equal(out, b4, 2), "second tensor values");
        t = mhe_st_find(&st, "scale");
        CHECK(t && t->ndim == 0 && t->size == 1 && t->nbytes == 4, "scalar shape []");
        if (t) CHECK(mhe_st_read_f32(&st, t, out, 1) == MHE_OK && out[0] == 0.5f, "scalar value");
        t = mhe_st_find(&st, "empty");
        CHECK(t && t->ndim == 2 && t->size == 0 && t->nbytes == 0, "zero-size tensor");
        if (t) CHECK(mhe_st_read_f32(&st, t, NULL, 0) == MHE_OK, "reading zero elements");
        CHECK(mhe_st_find(&st, "missing") == NULL && mhe_st_find(&st, "") == NULL && mhe_st_find(&st, NULL) == NULL,
              "missing tensor -> NULL");
        CHECK(st.tensors[0].name && strcmp(st.tensors[0].name, "tok_emb.weight") == 0 && strcmp(st.tensors[3].name, "empty") == 0,
              "table keeps file order");
        CHECK(mhe_st_meta(&st, "format") && strcmp(mhe_st_meta(&st, "format"), "mhe-1") == 0, "metadata format");
        CHECK(mhe_st_meta(&st, "note") && strcmp(mhe_st_meta(&st, "note"), mv[1]) == 0, "metadata with escapes");
        CHECK(mhe_st_meta(&st, "empty") && mhe_st_meta(&st, "empty")[0] == 0, "empty metadata value");
        CHECK(mhe_st_meta(&st, "nope") == NULL, "missing metadata key -> NULL");
    }
    mhe_st_free(&st);
    CHECK(st.storage_ == NULL && st.n_tensors == 0, "free clears the struct");
    mhe_st_free(&st); /* twice is fine */
    free(buf);

    /* no items, no metadata: "{}" padded */
    s = mhe_st_write_size(NULL, 0, NULL, NULL, 0, &size, err);
    CHECK(s == MHE_OK && size == 16, "empty file size %zu", size);
    {
        unsigned char e[16];
        s = mhe_st_write_mem(e, sizeof e, &written, NULL, 0, NULL, NULL, 0, err);
        CHECK(s == MHE_OK && memcmp(e + 8, "{}      ", 8) == 0, "empty file bytes");
        s = mhe_st_parse(&st, e, sizeof e, NULL);
        CHECK(s == MHE_OK && st.n_tensors == 0 && st.n_meta == 0 && mhe_st_find(&st, "x") == NULL &&
              mhe_st_meta(&st, "x") == NULL, "empty file parses: %s", st.err);
        mhe_st_free(&st);
    }
}

static void test_file_round_trip(void) {
    char path[256], tmp[300], err[MHE_ERR_LEN];
    float a[6] = {1, 2, 3, 4, 5, 6}, c[3] = {7, 8, 9}, out[6];
    mhe_st_item items[2];
    const char *mk[1] = {"format"}, *mv[1] = {"mhe-1"};
    void *buf = NULL;
    size_t size = 0;
    mhe_safetensors st;
    mhe_status s;
    memset(items, 0, sizeof items);
    tmp_name(path, sizeof path, "rt.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    items[0].name = "layers.0.attn.wq.weight"; items[0].ndim = 2; items[0].shape[0] = 2; items[0].shape[1] = 3; items[0].data = a;
    items[1].name = "\xe6\x97\xa5\xe6\x9c\xac \"x\""; items[1].ndim = 1; items[1].shape[0] = 3; items[1].data = c;
    s = mhe_st_save_file(path, items, 2, mk, mv, 1, NULL, err);
    CHECK(s == MHE_OK, "save_file: %s", err);
    CHECK(!file_exists(tmp), "no temporary file left after a save");
    s = mhe_read_file(path, &buf, &size, NULL, err);
    CHECK(s == MHE_OK && buf && size > 8, "read_file: %s", err);
    s = mhe_st_parse(&st, buf, size, NULL);
    CHECK(s == MHE_OK && st.n_tensors == 2, "parse saved file: %s", st.err);
    if (s == MHE_OK) {
        const mhe_st_tensor *t = mhe_st_find(&st, "layers.0.attn.wq.weight");
        CHECK(t && mhe_st_read_f32(&st, t, out, 6) == MHE_OK && bits_equal(out, a, 6), "file tensor a");
        t = mhe_st_find(&st, items[1].name);
        CHECK(t && mhe_st_read_f32(&st, t, out, 3) == MHE_OK && bits_equal(out, c, 3), "file tensor with unicode name");
        CHECK(mhe_st_meta(&st, "format") && !strcmp(mhe_st_meta(&st, "format"), "mhe-1"), "file metadata");
    }
    mhe_st_free(&st);
    test_free(NULL, buf);

    /* the file and the in-memory writer give the same bytes */
    {
        size_t n = 0, w = 0;
        unsigned char *m;
        OK(mhe_st_write_size(items, 2, mk, mv, 1, &n, err));
        m = (unsigned char *)malloc(n);
        OK(mhe_st_write_mem(m, n, &w, items, 2, mk, mv, 1, err));
        s = mhe_read_file(path, &buf, &size, NULL, err);
        CHECK(s == MHE_OK && size == n && memcmp(buf, m, n) == 0, "save_file bytes == write_mem bytes");
        test_free(NULL, buf);
        free(m);
    }

    /* saving over an existing file replaces it */
    items[0].shape[0] = 1; items[0].shape[1] = 2;
    s = mhe_st_save_file(path, items, 1, NULL, NULL, 0, NULL, err);
    CHECK(s == MHE_OK, "save over an existing file: %s", err);
    s = mhe_read_file(path, &buf, &size, NULL, err);
    CHECK(s == MHE_OK, "re-read: %s", err);
    s = mhe_st_parse(&st, buf, size, NULL);
    CHECK(s == MHE_OK && st.n_tensors == 1 && st.n_meta == 0 && st.tensors[0].size == 2, "the new file replaced the old one");
    mhe_st_free(&st);

    /* a failed save (NULL data) fails before the disk is touched */
    {
        void *buf2 = NULL;
        size_t size2 = 0;
        items[1].data = NULL;
        s = mhe_st_save_file(path, items, 2, NULL, NULL, 0, NULL, err);
        CHECK(s == MHE_ERR_ARG && strstr(err, "NULL data"), "save with NULL data -> ARG: %s", err);
        CHECK(!file_exists(tmp), "no temporary file after a failed save");
        CHECK(mhe_read_file(path, &buf2, &size2, NULL, err) == MHE_OK && size2 == size && memcmp(buf, buf2, size) == 0,
              "a failed save leaves the old file intact");
        test_free(NULL, buf2);
        items[1].data = c;
    }
    test_free(NULL, buf);

    /* an allocation failure while saving: old file intact, no temp file */
    {
        int budget = 0;
        void *buf2 = NULL;
        size_t size2 = 0;
        OK(mhe_read_file(path, &buf, &size, NULL, err));
        s = mhe_st_save_file(path, items, 2, NULL, NULL, 0, &budget, err);
        CHECK(s == MHE_ERR_NOMEM, "save with a failing allocator -> NOMEM: %s", mhe_status_str(s));
        CHECK(!file_exists(tmp) && mhe_read_file(path, &buf2, &size2, NULL, err) == MHE_OK && size2 == size &&
              memcmp(buf, buf2, size) == 0, "old file intact after NOMEM");
        test_free(NULL, buf2);
        test_free(NULL, buf);
    }
    remove(path);

    /* a directory that does not exist */
    {
        char bad[300];
        snprintf(bad, sizeof bad, "%s.nodir/sub/model.safetensors", path);
        s = mhe_st_save_file(bad, items, 2, mk, mv, 1, NULL, err);
        CHECK(s == MHE_ERR_IO && strstr(err, bad) != NULL, "save into a missing directory -> IO naming the path: %s", err);
        CHECK(!file_exists(bad), "nothing written there");
        s = mhe_st_save_file(NULL, items, 2, mk, mv, 1, NULL, err);
        CHECK(s == MHE_ERR_ARG, "save to a NULL path -> ARG");
    }
}

static void test_read_file(void) {
    char path[256], err[MHE_ERR_LEN];
    void *buf = (void *)1;
    size_t size = 99;
    mhe_status s;
    FILE *f;
    tmp_name(path, sizeof path, "missing");
    s = mhe_read_file(path, &buf, &size, NULL, err);
    CHECK(s == MHE_ERR_IO && buf == NULL && size == 0 && strstr(err, path), "missing file -> IO naming it: %s", err);
    s = mhe_read_file("/tmp", &buf, &size, NULL, err);
    CHECK(s == MHE_ERR_IO && buf == NULL, "a directory -> IO: %s", err);
    s = mhe_read_file(NULL, &buf, &size, NULL, err);
    CHECK(s == MHE_ERR_ARG, "NULL path -> ARG");
    tmp_name(path, sizeof path, "empty");
    f = fopen(path, "wb");
    if (f) fclose(f);
    s = mhe_read_file(path, &buf, &size, NULL, err);
    CHECK(s == MHE_OK && buf != NULL && size == 0, "empty file reads as 0 bytes: %s", err);
    if (s == MHE_OK) {
        mhe_safetensors st;
        CHECK(mhe_st_parse(&st, buf, size, NULL) == MHE_ERR_TRUNCATED, "an empty file is truncated");
        test_free(NULL, buf);
    }
    {
        int budget = 0;
        s = mhe_read_file(path, &buf, &size, &budget, err);
        CHECK(s == MHE_ERR_NOMEM && buf == NULL, "read_file with a failing allocator -> NOMEM");
    }
    remove(path);
}

/* ---- hand-written known-good headers ------------------------------------------ */

static void test_known_good(void) {
    /* values: a = [1, -2] F32, "é t\"/😀" = [1] BF16, i = [1] I64, flags = [3] BOOL */
    const char *json =
        " \n\t{\r\n"
        "  \"i\" : { \"shape\" : [ 1 ] , \"data_offsets\" : [ 10 , 18 ] , \"dtype\" : \"I64\" } ,\n"
        "  \"__metadata__\": {\"format\": \"mhe-1\", \"k\\u00e9y\": \"v\\u00e9\\ud83d\\ude00\\n\\\"\\\\\\/\\b\\f\\r\\t\"},\n"
        "  \"\\u00e9 t\\\"\\/\\ud83d\\ude00\": {\"data_offsets\":[8,10],\"dtype\":\"BF16\",\"shape\":[1]},\n"
        "  \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},\n"
        "  \"flags\": {\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[18,21]},\n"
        "  \"nothing\": {\"dtype\":\"U8\",\"shape\":[0, 9007199254740992],\"data_offsets\":[21,21]},\n"
        "  \"h\": {\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[21,23]}\n"
        "}      \n\t ";
    unsigned char data[23];
    float out[2];
    size_t n;
    unsigned char *b;
    mhe_safetensors st;
    mhe_status s;
    memset(data, 0, sizeof data);
    /* little-endian bytes written by hand: 1.0f = 0x3f800000, -2.0f = 0xc0000000 */
    data[2] = 0x80; data[3] = 0x3f; data[7] = 0xc0;
    b = make_file(json, strlen(json), data, sizeof data, &n);
    s = mhe_st_parse(&st, b, n, NULL);
    CHECK(s == MHE_OK, "hand-written header parses: %s", st.err);
    if (s == MHE_OK) {
        const mhe_st_tensor *t;
        CHECK(st.n_tensors == 6 && st.n_meta == 2, "counts %d %d", st.n_tensors, st.n_meta);
        t = mhe_st_find(&st, "a");
        CHECK(t && mhe_st_read_f32(&st, t, out, 2) == MHE_OK && out[0] == 1.0f && out[1] == -2.0f, "F32 values from LE bytes");
        t = mhe_st_find(&st, "\xc3\xa9 t\"/\xf0\x9f\x98\x80");
        CHECK(t && t->dtype == MHE_DTYPE_BF16 && t->nbytes == 2 && t->data == st.data + 8, "escaped name decoded to UTF-8");
        if (t) CHECK(mhe_st_read_f32(&st, t, out, 1) == MHE_ERR_DTYPE, "read_f32 on BF16 -> DTYPE");
        t = mhe_st_find(&st, "i");
        CHECK(t && t->dtype == MHE_DTYPE_I64 && t->nbytes == 8, "I64 entry with keys in another order");
        t = mhe_st_find(&st, "flags");
        CHECK(t && t->dtype == MHE_DTYPE_BOOL && t->size == 3, "BOOL entry");
        t = mhe_st_find(&st, "nothing");
        CHECK(t && t->size == 0 && t->ndim == 2 && t->shape[1] == 9007199254740992LL, "2^53 is accepted, zero dims");
        t = mhe_st_find(&st, "h");
        CHECK(t && t->dtype == MHE_DTYPE_F16 && t->ndim == 0 && t->size == 1, "F16 scalar");
        CHECK(mhe_st_meta(&st, "k\xc3\xa9y") && !strcmp(mhe_st_meta(&st, "k\xc3\xa9y"), "v\xc3\xa9\xf0\x9f\x98\x80\n\"\\/\b\f\r\t"),
              "metadata escapes");
    }
    mhe_st_free(&st);
    free(b);

    EXPECT("{}", 0, MHE_OK);
    EXPECT("{\"__metadata__\":null}", 0, MHE_OK);
    EXPECT("{\"__metadata__\":{}}", 0, MHE_OK);
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, MHE_OK);
    EXPECT("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
           "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
           "\"b\":{\"dtype\":\"I16\",\"shape\":[2,1],\"data_offsets\":[4,8]}}", 8, MHE_OK);
    EXPECT("{\"a\":{\"dtype\":\"I8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, MHE_OK);
    EXPECT("{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MHE_OK);
    EXPECT("{\"a\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, MHE_OK);
    EXPECT("{\"\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, MHE_OK);

    /* read_f32 guards */
    {
        mhe_safetensors zero;
        memset(&zero, 0, sizeof zero);
        CHECK(mhe_st_find(&zero, "a") == NULL && mhe_st_meta(&zero, "a") == NULL, "lookups on a zeroed struct");
        CHECK(mhe_st_read_f32(&zero, NULL, out, 1) == MHE_ERR_ARG, "read_f32(NULL tensor) -> ARG");
        mhe_st_free(&zero);
        mhe_st_free(NULL);
    }
    /* the byte swap used on big-endian hosts */
    CHECK(mhe__bswap32(0x11223344u) == 0x44332211u, "bswap32");
}

/* ---- malformed files ------------------------------------------------------------- */

static void test_lengths(void) {
    unsigned char b[32];
    mhe_safetensors st;
    mhe_status s;
    size_t n;
    memset(b, 0, sizeof b);
    CHECK(mhe_st_parse(&st, NULL, 0, NULL) == MHE_ERR_TRUNCATED, "empty buffer -> TRUNCATED");
    CHECK(mhe_st_parse(&st, b, 7, NULL) == MHE_ERR_TRUNCATED, "7 bytes -> TRUNCATED");
    CHECK(mhe_st_parse(&st, NULL, 5, NULL) == MHE_ERR_ARG, "NULL buffer with a size -> ARG");
    CHECK(mhe_st_parse(NULL, b, 8, NULL) == MHE_ERR_ARG, "NULL struct -> ARG");
    CHECK(parse_exact(&st, b, 8) == MHE_ERR_HEADER, "header length 0 -> HEADER");
    b[0] = 25;
    s = mhe_st_parse(&st, b, 32, NULL);
    CHECK(s == MHE_ERR_TRUNCATED && strstr(st.err, "header length 25 larger than file (32 bytes)"),
          "header longer than the file -> TRUNCATED: %s", st.err);
    memset(b, 0, 8); b[7] = 0x80; /* 2^63 */
    CHECK(mhe_st_parse(&st, b, 32, NULL) == MHE_ERR_TRUNCATED, "header length 2^63 -> TRUNCATED");
    memset(b, 0xff, 8);
    CHECK(mhe_st_parse(&st, b, 32, NULL) == MHE_ERR_TRUNCATED, "header length 2^64-1 -> TRUNCATED");
    {
        /* a real 100 MB + 1 header: refused before anything is parsed */
        size_t big = 100000001;
        unsigned char *h = (unsigned char *)malloc(8 + big);
        if (h) {
            uint64_t v = big;
            int i;
            for (i = 0; i < 8; i++) { h[i] = (unsigned char)(v & 0xff); v >>= 8; }
            s = mhe_st_parse(&st, h, 8 + big, NULL);
            CHECK(s == MHE_ERR_HEADER, "header over 100 MB -> HEADER: %s", st.err);
            free(h);
        }
    }
    {
        unsigned char *f = make_file("{}", 2, NULL, 0, &n);
        CHECK(parse_exact(&st, f, n) == MHE_OK, "\"{}\" unpadded is fine");
        free(f);
    }
}

static void test_bad_json(void) {
    static const char *bad[] = {
        "",                                   /* only via EXPECT: empty header */
        "   ",
        "[]",
        "\"a\"",
        "{",
        "{\"a",
        "{\"a\"",
        "{\"a\":",
        "{\"a\" {}}",
        "{\"a\":{},}",
        "{,}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x",
        "{}{}",
        "{'a':{}}",
        "{\"a\":tru}",
        "{\"a\":nul}",
        "{\"a\":True}",
        "{\"a\\q\":{}}",
        "{\"a\\u12G4\":{}}",
        "{\"a\\u12\":{}}",
        "{\"\\ud800\":{}}",
        "{\"\\udc00\":{}}",
        "{\"\\ud800\\u0041\":{}}",
        "{\"\\ud800\\n\":{}}",
        "{\"a\\u0000b\":{}}",
        "{\"a\nb\":{}}",
        "{\"a\tb\":{}}",
        "{\"\xff\":{}}",
        "{\"\xc0\xaf\":{}}",
        "{\"\xed\xa0\x80\":{}}",
        "{\"\xf4\x90\x80\x80\":{}}",
        "{\"\xe2\x82\":{}}",
        "\xef\xbb\xbf{}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[+1],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\" \"shape\":[1],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1] \"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0 4]}}",
        "{\"a\":[[[[[[[]]]]]]]]}",
        "{\"a\":{\"x\":}}",
        "{\"a\":{\"x\":1,}}",
        "{\"a\":\"\\\"}",
        "{\"a\":{}}\f",
        NULL
    };
    int i;
    for (i = 0; bad[i]; i++) EXPECT(bad[i], 0, MHE_ERR_HEADER);
    /* NUL bytes: inside a string, and as trailing padding */
    {
        static const char nul_in[] = "{\"a\0b\":{}}";
        static const char nul_pad[] = "{}\0\0\0\0\0\0";
        mhe_safetensors st;
        size_t n;
        unsigned char *f = make_file(nul_in, sizeof nul_in - 1, NULL, 0, &n);
        CHECK(parse_exact(&st, f, n) == MHE_ERR_HEADER, "NUL inside a string -> HEADER");
        free(f);
        f = make_file(nul_pad, sizeof nul_pad - 1, NULL, 0, &n);
        CHECK(parse_exact(&st, f, n) == MHE_ERR_HEADER, "NUL padding -> HEADER");
        free(f);
    }
    /* nesting bombs */
    {
        size_t depth = 10000, k;
        char *j = (char *)malloc(depth * 2 + 16);
        mhe_status s;
        strcpy(j, "{\"a\":");
        k = strlen(j);
        memset(j + k, '[', depth);
        memset(j + k + depth, ']', depth);
        strcpy(j + k + 2 * depth, "}");
        s = parse_json(j, 0);
        CHECK(s == MHE_ERR_HEADER && strstr(last_msg, "nested"), "10000 '[' -> HEADER: %s", last_msg);
        j[k + depth] = 0; /* unclosed */
        EXPECT(j, 0, MHE_ERR_HEADER);
        memset(j, '[', depth);
        j[depth] = 0;
        EXPECT(j, 0, MHE_ERR_HEADER);
        for (k = 0; k < depth / 3; k++) memcpy(j + 5 * k, "{\"a\":", 5);
        j[5 * (depth / 3)] = 0;
        EXPECT(j, 0, MHE_ERR_HEADER);
        free(j);
        /* 60 levels are fine syntactically (then refused by the schema) */
        j = (char *)malloc(200);
        strcpy(j, "{\"a\":");
        memset(j + 5, '[', 60);
        memset(j + 65, ']', 60);
        strcpy(j + 125, "}");
        s = parse_json(j, 0);
        CHECK(s == MHE_ERR_HEADER && strstr(last_msg, "expected an object"), "60 levels: schema error: %s", last_msg);
        free(j);
    }
}

static void test_bad_schema(void) {
#define T(body) "{\"t\":{" body "}}"
    /* good: T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]") with 8 data bytes */
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_OK);
    EXPECT(T("\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    CHECK(strstr(last_msg, "'t'") && strstr(last_msg, "dtype"), "message names tensor and field: %s", last_msg);
    EXPECT(T("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2]"), 8, MHE_ERR_HEADER);
    EXPECT(T(""), 0, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1"), 8, MHE_ERR_HEADER);
    CHECK(strstr(last_msg, "extra") != NULL, "unknown field named: %s", last_msg);
    EXPECT(T("\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":[\"F32\"],\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"b\":0}"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":null"), 8, MHE_ERR_HEADER);
    EXPECT("{\"t\":null}", 0, MHE_ERR_HEADER);
    EXPECT("{\"t\":5}", 0, MHE_ERR_HEADER);
    EXPECT("{\"t\":\"x\"}", 0, MHE_ERR_HEADER);
    EXPECT("{\"t\":[]}", 0, MHE_ERR_HEADER);
    /* numbers in shape and offsets */
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,0]"), 0, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[0.2E+1],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[9007199254740993],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    CHECK(strstr(last_msg, "2^53") != NULL, "message says why: %s", last_msg);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999999999]"), 8, MHE_ERR_HEADER);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[18446744073709551616],\"data_offsets\":[0,8]"), 8, MHE_ERR_HEADER);
    /* dtypes */
    EXPECT(T("\"dtype\":\"F8\",\"shape\":[2],\"data_offsets\":[0,2]"), 2, MHE_ERR_DTYPE);
    CHECK(strstr(last_msg, "F8") && strstr(last_msg, "'t'"), "dtype message: %s", last_msg);
    EXPECT(T("\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_DTYPE);
    EXPECT(T("\"dtype\":\"F32 \",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_DTYPE);
    EXPECT(T("\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_DTYPE);
    EXPECT(T("\"dtype\":\"F32F32F32F32F32F32F32F32F32F32F32F32F32F32F32F32F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_DTYPE);
    /* sizes */
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]"), 4, MHE_ERR_SHAPE);
    CHECK(strstr(last_msg, "needs 8 bytes") != NULL, "shape message: %s", last_msg);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]"), 12, MHE_ERR_SHAPE);
    EXPECT(T("\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]"), 8, MHE_ERR_SHAPE);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]"), 8, MHE_ERR_SHAPE);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]"), 8, MHE_ERR_OVERFLOW);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296,4294967296],\"data_offsets\":[0,0]"), 0, MHE_ERR_OVERFLOW);
    EXPECT(T("\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,8]"), 8, MHE_ERR_OVERFLOW);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]"), 4, MHE_ERR_OVERFLOW);
    /* offsets */
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 4, MHE_ERR_OFFSET);
    CHECK(strstr(last_msg, "beyond") != NULL, "offset message: %s", last_msg);
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]"), 12, MHE_ERR_OFFSET);        /* gap at 0 */
    EXPECT(T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"), 12, MHE_ERR_OFFSET);         /* trailing bytes */
    EXPECT("{}", 4, MHE_ERR_OFFSET);
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, MHE_ERR_OFFSET);  /* overlap */
    CHECK(strstr(last_msg, "overlap") && strstr(last_msg, "'a'") && strstr(last_msg, "'b'"), "overlap message: %s", last_msg);
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHE_ERR_OFFSET);   /* same range */
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, MHE_ERR_OFFSET);   /* empty inside another */
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, MHE_ERR_OFFSET); /* gap */
    CHECK(strstr(last_msg, "gap") != NULL, "gap message: %s", last_msg);
    /* names */
    EXPECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, MHE_ERR_HEADER);
    CHECK(strstr(last_msg, "duplicate tensor name 'a'") != NULL, "duplicate message: %s", last_msg);
    EXPECT("{\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, MHE_ERR_HEADER);
    /* metadata */
    EXPECT("{\"__metadata__\":{\"a\":1}}", 0, MHE_ERR_HEADER);
    CHECK(strstr(last_msg, "'a'") != NULL, "metadata message: %s", last_msg);
    EXPECT("{\"__metadata__\":{\"a\":null}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{\"a\":{}}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{\"a\":[\"x\"]}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{\"a\":true}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":[]}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":\"x\"}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{},\"__metadata__\":{}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, MHE_ERR_HEADER);
    EXPECT("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}}", 0, MHE_OK);
#undef T
}

/* a valid file with several tensors and metadata, for truncation and mutation */
static unsigned char *sample_file(size_t *n) {
    static float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {-1, 1}, c = 3;
    mhe_st_item it[4];
    const char *mk[2] = {"format", "d_model"}, *mv[2] = {"mhe-1", "128"};
    char err[MHE_ERR_LEN];
    unsigned char *buf;
    size_t w;
    memset(it, 0, sizeof it);
    it[0].name = "tok_emb.weight"; it[0].ndim = 2; it[0].shape[0] = 2; it[0].shape[1] = 3; it[0].data = a;
    it[1].name = "ln_f.\"w\"\xc3\xa9"; it[1].ndim = 1; it[1].shape[0] = 2; it[1].data = b;
    it[2].name = "s"; it[2].ndim = 0; it[2].data = &c;
    it[3].name = "e"; it[3].ndim = 1; it[3].shape[0] = 0;
    OK(mhe_st_write_size(it, 4, mk, mv, 2, n, err));
    buf = (unsigned char *)malloc(*n);
    OK(mhe_st_write_mem(buf, *n, &w, it, 4, mk, mv, 2, err));
    return buf;
}

static void test_truncations(void) {
    size_t n, cut, hl = 0, bad = 0, bad_status = 0, jend;
    unsigned char *f = sample_file(&n), *g;
    mhe_safetensors st;
    int i;
    for (i = 0; i < 8; i++) hl |= (size_t)f[i] << (8 * i);
    /* cut anywhere: header length kept */
    for (cut = 0; cut < n; cut++) {
        mhe_status s = parse_exact(&st, f, cut);
        mhe_status want = cut < 8 + hl ? MHE_ERR_TRUNCATED : MHE_ERR_OFFSET;
        if (s == MHE_OK) bad++;
        else if (s != want) bad_status++;
    }
    CHECK(bad == 0 && bad_status == 0, "every truncation fails (%zu OK, %zu with another status)", bad, bad_status);
    /* cut inside the JSON, the header length shrunk to match and the data
       moved up: HEADER, except a cut in the padding, which is a valid file */
    for (jend = hl; jend > 0 && f[8 + jend - 1] != '}'; jend--) {}
    CHECK(jend > 0 && jend < hl, "sample header is padded");
    g = (unsigned char *)malloc(n);
    bad = bad_status = 0;
    for (cut = 0; cut < hl; cut++) {
        mhe_status s;
        uint64_t v = cut;
        memcpy(g, f, n);
        memmove(g + 8 + cut, f + 8 + hl, n - 8 - hl); /* the data follows the shortened header */
        for (i = 0; i < 8; i++) { g[i] = (unsigned char)(v & 0xff); v >>= 8; }
        s = parse_exact(&st, g, n - (hl - cut));
        if (cut >= jend ? s != MHE_OK : s == MHE_OK) bad++;
        else if (cut < jend && s != MHE_ERR_HEADER) bad_status++;
    }
    CHECK(bad == 0 && bad_status == 0, "every shortened header fails with HEADER (%zu wrong outcomes, %zu other statuses)",
          bad, bad_status);
    free(g);
    free(f);
}

/* every OK parse must be self-consistent */
static int consistent(const mhe_safetensors *st, const unsigned char *buf, size_t n) {
    int i;
    uint64_t sum = 0;
    if (!st->data || st->data < buf + 8 || st->data + st->data_size != buf + n) return 0;
    for (i = 0; i < st->n_tensors; i++) {
        const mhe_st_tensor *t = &st->tensors[i];
        if (t->data < st->data || t->data + t->nbytes > st->data + st->data_size) return 0;
        if (t->size < 0 || t->ndim < 0 || t->ndim > MHE_ST_MAX_DIMS) return 0;
        if (mhe_st_find(st, t->name) != t) return 0;
        if (t->dtype == MHE_DTYPE_F32 && t->size <= 64) {
            float tmp[64];
            if (mhe_st_read_f32(st, t, tmp, t->size) != MHE_OK) return 0;
        }
        sum += t->nbytes;
    }
    for (i = 0; i < st->n_meta; i++)
        if (mhe_st_meta(st, st->meta_keys[i]) != st->meta_values[i]) return 0;
    return sum == st->data_size;
}

static void test_mutations(void) {
    static const unsigned char interesting[] = {'"', '\\', '{', '}', '[', ']', ',', ':', '0', '1', '9', '-', 'e', '.',
                                                ' ', 'u', 'n', 0, 0x7f, 0x80, 0xc3, 0xed, 0xf0, 0xff};
    size_t n0, hl0 = 0, i;
    unsigned char *base = sample_file(&n0);
    mhe_rng rng;
    int iter, ok_count = 0, bad = 0, counts[MHE_STATUS_COUNT];
    memset(counts, 0, sizeof counts);
    for (i = 0; i < 8; i++) hl0 |= (size_t)base[i] << (8 * i);
    mhe_rng_seed(&rng, 1234);
    for (iter = 0; iter < 6000; iter++) {
        size_t cap = n0 + 64, n = n0, hl = hl0;
        unsigned char *b = (unsigned char *)malloc(cap), *c;
        int m, nm = 1 + (int)mhe_rng_below(&rng, 4), fix = mhe_rng_below(&rng, 4) != 0;
        mhe_safetensors st;
        mhe_status s;
        memcpy(b, base, n0);
        for (m = 0; m < nm; m++) {
            uint32_t op = mhe_rng_below(&rng, 6);
            /* mostly inside the JSON, where the parser has the most to get wrong */
            size_t pos = mhe_rng_below(&rng, 5) ? 8 + mhe_rng_below(&rng, (uint32_t)hl) : mhe_rng_below(&rng, (uint32_t)n);
            if (pos >= n) pos = n - 1;
            if (op == 0) b[pos] ^= (unsigned char)(1u << mhe_rng_below(&rng, 8));
            else if (op == 1) b[pos] = (unsigned char)mhe_rng_below(&rng, 256);
            else if (op == 2) b[pos] = interesting[mhe_rng_below(&rng, sizeof interesting)];
            else if (op == 3 && n < cap) { /* insert */
                memmove(b + pos + 1, b + pos, n - pos);
                b[pos] = interesting[mhe_rng_below(&rng, sizeof interesting)];
                n++;
                if (pos < 8 + hl) hl++;
            } else if (op == 4 && n > 9) { /* delete */
                memmove(b + pos, b + pos + 1, n - pos - 1);
                n--;
                if (pos < 8 + hl && hl > 1) hl--;
            } else { /* truncate */
                n = pos + 1;
                if (hl > n - 8 && n >= 8) hl = n - 8;
            }
            if (n < 9) break;
        }
        if (fix && n >= 8 && hl <= n - 8) { /* keep the length field honest so the JSON gets parsed */
            uint64_t v = hl;
            for (i = 0; i < 8; i++) { b[i] = (unsigned char)(v & 0xff); v >>= 8; }
        }
        c = (unsigned char *)malloc(n ? n : 1);
        memcpy(c, b, n);
        s = mhe_st_parse(&st, c, n, NULL);
        counts[s < MHE_STATUS_COUNT ? s : 0]++;
        if (s == MHE_OK) {
            ok_count++;
            if (!consistent(&st, c, n)) bad++;
        } else if (st.storage_ || st.n_tensors || !st.err[0]) bad++;
        mhe_st_free(&st);
        free(c);
        free(b);
    }
    CHECK(bad == 0, "mutations: %d inconsistent results", bad);
    CHECK(ok_count > 0 && counts[MHE_ERR_HEADER] > 1000, "the mutations reach both outcomes (%d OK)", ok_count);
    printf("mutations: ok %d, header %d, truncated %d, dtype %d, shape %d, offset %d, overflow %d\n", counts[MHE_OK],
           counts[MHE_ERR_HEADER], counts[MHE_ERR_TRUNCATED], counts[MHE_ERR_DTYPE], counts[MHE_ERR_SHAPE],
           counts[MHE_ERR_OFFSET], counts[MHE_ERR_OVERFLOW]);
    free(base);
}

static void test_alloc_failure(void) {
    size_t n;
    unsigned char *f = sample_file(&n);
    mhe_safetensors st;
    int budget = 0;
    long live = test_live_allocs;
    mhe_status s = mhe_st_parse(&st, f, n, &budget);
    CHECK(s == MHE_ERR_NOMEM && st.storage_ == NULL && st.n_tensors == 0, "parse with a failing allocator -> NOMEM");
    budget = 1;
    s = mhe_st_parse(&st, f, n, &budget);
    CHECK(s == MHE_OK && test_live_allocs == live + 1, "parse makes exactly one allocation");
    mhe_st_free(&st);
    CHECK(test_live_allocs == live, "free releases it");
    free(f);
}

static void test_writer_validation(void) {
    float x[4] = {0};
    mhe_st_item it[2];
    const char *mk[2] = {"a", "a"}, *mv[2] = {"1", "2"}, *mnull[1] = {NULL};
    char err[MHE_ERR_LEN];
    size_t size;
    mhe_status s;
#define W(n_items, keys, vals, nmeta, want) do { \
        s = mhe_st_write_size(it, (n_items), (keys), (vals), (nmeta), &size, err); \
        CHECK(s == (want), "writer case line %d: got %s (%s)", __LINE__, mhe_status_str(s), err); } while (0)
#define RESET() do { memset(it, 0, sizeof it); \
        it[0].name = "a"; it[0].ndim = 1; it[0].shape[0] = 4; it[0].data = x; \
        it[1].name = "b"; it[1].ndim = 2; it[1].shape[0] = 2; it[1].shape[1] = 2; it[1].data = x; } while (0)
    RESET();
    W(2, NULL, NULL, 0, MHE_OK);
    it[0].name = NULL; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[1].data = NULL; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    CHECK(strstr(err, "'b'") != NULL, "NULL data message names the tensor: %s", err);
    it[1].data = NULL; it[1].shape[0] = 0; W(2, NULL, NULL, 0, MHE_OK); RESET();
    it[0].ndim = -1; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[0].ndim = MHE_ST_MAX_DIMS + 1; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[0].shape[0] = -4; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[1].shape[0] = (int64_t)1 << 40; it[1].shape[1] = (int64_t)1 << 40; W(2, NULL, NULL, 0, MHE_ERR_OVERFLOW); RESET();
    it[1].shape[0] = INT64_MAX; W(2, NULL, NULL, 0, MHE_ERR_OVERFLOW); RESET();
    it[1].name = "a"; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    CHECK(strstr(err, "duplicate") != NULL, "duplicate message: %s", err);
    it[1].name = "__metadata__"; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[1].name = "bad\xff"; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    it[1].name = "cut\xe2\x82"; W(2, NULL, NULL, 0, MHE_ERR_ARG); RESET();
    W(-1, NULL, NULL, 0, MHE_ERR_ARG);
    s = mhe_st_write_size(NULL, 1, NULL, NULL, 0, &size, err);
    CHECK(s == MHE_ERR_ARG, "NULL items with n_items 1 -> ARG");
    W(2, mk, mv, 2, MHE_ERR_ARG);     /* duplicate metadata key */
    W(2, mk, mv, 1, MHE_OK);
    W(2, mnull, mv, 1, MHE_ERR_ARG);  /* NULL key */
    W(2, mk, mnull, 1, MHE_ERR_ARG);  /* NULL value */
    W(2, NULL, mv, 1, MHE_ERR_ARG);
    W(2, mk, mv, -1, MHE_ERR_ARG);
    s = mhe_st_write_size(it, 2, NULL, NULL, 0, NULL, err);
    CHECK(s == MHE_ERR_ARG, "NULL out_size -> ARG");
    s = mhe_st_write_mem(NULL, 100, &size, it, 2, NULL, NULL, 0, err);
    CHECK(s == MHE_ERR_ARG, "NULL buffer -> ARG");
#undef W
#undef RESET
}

int main(void) {
    (void)test_realloc; /* MHE_REALLOC is unused by the code under test */
    test_round_trip();
    test_file_round_trip();
    test_read_file();
    test_known_good();
    test_lengths();
    test_bad_json();
    test_bad_schema();
    test_truncations();
    test_mutations();
    test_alloc_failure();
    test_writer_validation();
    CHECK(test_live_allocs == 0, "no allocation leaked (%ld live)", test_live_allocs);
    return TEST_END();
}
