/* Allocation-failure injection. MHE_MALLOC / MHE_REALLOC go through a hook
   that fails the k-th allocation of an operation; each operation runs for
   k = 1, 2, ... until it completes without reaching k. Every failing run
   must return MHE_ERR_NOMEM (or the documented failure value), free all it
   allocated (the hook counts live blocks; make test-sanitize adds LSan),
   keep a checkpoint on disk byte for byte and leave a trainer unchanged.
   Operations: model creation, trainer init + steps, the first forward,
   evaluation, checkpoint save over a valid file, checkpoint write to memory,
   gradient save, model and trainer load (file and memory), KV cache +
   generation, the corpus loader, the arena, the unigram entropy, byte-level
   BPE (train, load, encode, decode, in a checkpoint). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long fa_count, fa_fail_at, fa_live;
static int fa_armed, fa_failed;
static int fa_sites[128], fa_nsites;   /* mhe.h lines whose allocation was made to fail */

static void fa_site(int line) {
    int i;
    for (i = 0; i < fa_nsites; i++) if (fa_sites[i] == line) return;
    if (fa_nsites < 128) fa_sites[fa_nsites++] = line;
}
static int fa_fail_now(int line) {
    if (!fa_armed || ++fa_count != fa_fail_at) return 0;
    fa_failed = 1;
    fa_site(line);
    return 1;
}
static void *fa_malloc(size_t n, int line) {
    void *p;
    if (fa_fail_now(line)) return NULL;
    p = malloc(n ? n : 1);
    if (p) fa_live++;
    return p;
}
static void *fa_realloc(void *p, size_t n, int line) {
    void *q;
    if (fa_fail_now(line)) return NULL;
    q = realloc(p, n ? n : 1);
    if (q && !p) fa_live++;
    return q;
}
static void fa_free(void *p) {
    if (p) fa_live--;
    free(p);
}
#define MHE_MALLOC(ctx, n) ((void)(ctx), fa_malloc((n), __LINE__))
#define MHE_REALLOC(ctx, p, old, n) ((void)(ctx), (void)(old), fa_realloc((p), (n), __LINE__))
#define MHE_FREE(ctx, p) ((void)(ctx), fa_free(p))

#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

static char path[128], tmp_path[160], grads_path[160];
static int data[200];

static void arm(void) { fa_armed = 1; }
static void disarm(void) { fa_armed = 0; }

static mhe_config tiny(const char *attn) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    c.vocab_size = 16; c.d_model = 8; c.n_heads = 2; c.n_layers = 2; c.d_ff = 12; c.max_seq_len = 8;
    OK(mhe_config_set(&c, "attn", attn, err));
    return c;
}
static mhe_train_config tiny_tc(void) {
    mhe_train_config tc = mhe_train_config_default();
    tc.batch = 2; tc.seq_len = 6; tc.steps = 4; tc.warmup = 1;
    return tc;
}

/* ---- the operations; each returns the status of the armed part ---------------- */

static mhe_status op_model_init(void) {
    mhe_config c = tiny("mhe-mul");
    mhe_model m;
    mhe_status s;
    arm(); s = mhe_model_init(&m, &c, 1, NULL); disarm();
    if (s != MHE_OK) CHECK(m.params == NULL && m.param_data == NULL && m.err[0], "failed init keeps nothing: %s", m.err);
    mhe_model_free(&m);
    return s;
}

static mhe_status op_trainer(void) {
    mhe_config c = tiny("gqa");
    mhe_train_config tc = tiny_tc();
    mhe_model m;
    mhe_trainer t;
    mhe_status s;
    int i;
    c.dropout = 0.1f;
    OK(mhe_model_init(&m, &c, 1, NULL));
    arm();
    s = mhe_trainer_init(&t, &m, &tc);
    for (i = 0; i < 3 && s == MHE_OK; i++) s = mhe_trainer_step(&t, data, 200);
    disarm();
    if (s != MHE_OK) CHECK(t.adam_m == NULL && t.err[0], "failed trainer init keeps nothing: %s", t.err);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return s;
}

static mhe_status op_forward_eval(void) {
    mhe_config c = tiny("mha");
    mhe_model m;
    mhe_status s;
    float loss = 0;
    c.arch = MHE_ARCH_ENCODER;
    OK(mhe_model_init(&m, &c, 1, NULL));
    arm();
    s = mhe_model_forward(&m, data, data + 1, 1, 8, &loss);
    if (s == MHE_OK) s = mhe_evaluate(&m, data, 200, 3, 8, 2, &loss);
    disarm();
    if (s != MHE_OK) CHECK(m.err[0] != 0, "failed forward/evaluate says why: %s", m.err);
    mhe_model_free(&m);
    return s;
}

/* a valid file sits at `path`; a save of different weights over it fails */
static mhe_status op_save(void) {
    mhe_config c = tiny("mhe-add");
    mhe_train_config tc = tiny_tc();
    mhe_model m, r;
    mhe_trainer t;
    mhe_status s;
    size_t n0 = 0, n1 = 0, w = 0, need = 0;
    unsigned char *before, *after, *buf;
    OK(mhe_model_init(&m, &c, 1, NULL));
    OK(mhe_trainer_init(&t, &m, &tc));
    OK(mhe_trainer_step(&t, data, 200));
    CHECK(mhe_checkpoint_save(&m, &t, path) == MHE_OK, "setup save: %s", t.err);
    before = test_slurp(path, &n0);
    OK(mhe_trainer_step(&t, data, 200));   /* new weights: a save that got through would change the file */
    arm();
    s = mhe_checkpoint_save(&m, &t, path);
    if (s != MHE_OK) {   /* the save itself failed: the old file must be there, byte for byte */
        disarm();
        after = test_slurp(path, &n1);
        CHECK(after && n1 == n0 && !memcmp(before, after, n0), "the checkpoint on disk is unchanged after a failed save");
        CHECK(access(tmp_path, F_OK) != 0, "no temporary file left behind");
        CHECK(mhe_model_load(&r, path, NULL) == MHE_OK, "the old checkpoint still loads: %s", r.err);
        mhe_model_free(&r);
        free(after);
    }
    if (s == MHE_OK) {
        s = mhe_grads_save(&m, grads_path);
        if (s != MHE_OK) { disarm(); CHECK(access(grads_path, F_OK) != 0, "a failed gradient save writes nothing"); }
    }
    if (s == MHE_OK) s = mhe_checkpoint_size(&m, &t, &need);
    disarm();
    buf = (unsigned char *)malloc(need ? need : 1);
    arm();
    if (s == MHE_OK) s = mhe_checkpoint_write_mem(&m, &t, buf, need, &w);
    disarm();
    remove(grads_path);
    free(before); free(buf);
    mhe_trainer_free(&t);
    mhe_model_free(&m);
    return s;
}

/* `path` holds a trainer checkpoint (written by op_save's setup) */
static mhe_status op_load(void) {
    mhe_config c = tiny("mhe-add");
    mhe_train_config tc = tiny_tc();
    mhe_model m, m2;
    mhe_trainer t;
    mhe_status s;
    size_t n = 0;
    unsigned char *file = test_slurp(path, &n);
    float *keep;
    int step;
    OK(mhe_model_init(&m2, &c, 7, NULL));
    OK(mhe_trainer_init(&t, &m2, &tc));
    OK(mhe_trainer_step(&t, data, 200));
    keep = (float *)malloc((size_t)m2.n_params * sizeof(float));
    memcpy(keep, t.adam_m, (size_t)m2.n_params * sizeof(float));
    step = t.step;
    arm();
    s = mhe_model_load(&m, path, NULL);
    if (s == MHE_OK) { mhe_model_free(&m); s = mhe_model_load_mem(&m, file, n, NULL); }
    if (s != MHE_OK) CHECK(m.params == NULL && m.err[0], "failed load keeps nothing: %s", m.err);
    if (s == MHE_OK) {
        s = mhe_trainer_load(&t, path);
        if (s != MHE_OK)
            CHECK(t.step == step && !memcmp(keep, t.adam_m, (size_t)m2.n_params * sizeof(float)) && t.err[0],
                  "failed trainer load leaves the trainer unchanged: %s", t.err);
        else CHECK(t.step == 2, "trainer state restored");
    }
    disarm();
    mhe_model_free(&m);
    mhe_trainer_free(&t);
    mhe_model_free(&m2);
    free(keep); free(file);
    return s;
}

static mhe_status op_generate(void) {
    mhe_config c = tiny("mhe-mul,skv");
    mhe_model m;
    mhe_kv_cache kv;
    mhe_rng rng;
    mhe_status s;
    int i, tok = 3;
    OK(mhe_model_init(&m, &c, 1, NULL));
    mhe_rng_seed(&rng, 5);
    arm();
    s = mhe_kv_cache_init(&kv, &m, 8, NULL);
    for (i = 0; i < 8 && s == MHE_OK; i++) {
        s = mhe_decode_step(&m, &kv, tok);
        tok = mhe_sample(kv.logits, c.vocab_size, 0.8f, 4, &rng);
    }
    disarm();
    if (s != MHE_OK) CHECK(kv.block == NULL, "failed KV cache keeps nothing");
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
    return s;
}

static mhe_status op_corpus(void) {
    char err[MHE_ERR_LEN];
    int *tok = NULL;
    size_t n = 99;
    mhe_status s;
    arm(); s = mhe_read_text_tokens("examples/data/valid.txt", &tok, &n, NULL, err); disarm();
    if (s != MHE_OK) CHECK(tok == NULL && n == 0 && err[0], "failed corpus load returns nothing: %s", err);
    else fa_free(tok);
    return s;
}

/* the arena hands out NULL when an allocation fails (MHE_ARENA_DEBUG: one malloc per allocation) */
static mhe_status op_arena(void) {
    mhe_arena a;
    mhe_status s;
    int i;
    memset(&a, 0, sizeof a);
    arm();
    s = mhe_arena_alloc_block(&a, 200 * 64, NULL);
    for (i = 0; i < 150 && s == MHE_OK; i++)
        if (!mhe_arena_alloc(&a, 10)) s = MHE_ERR_NOMEM;
    disarm();
    mhe_arena_free(&a);
    return s;
}

static mhe_status op_entropy(void) {
    double h;
    arm(); h = mhe_unigram_entropy(data, 200, 300); disarm();   /* vocab > 256 allocates */
    return h == -1 ? MHE_ERR_NOMEM : MHE_OK;
}

/* byte-level BPE: train, the text form, tokenizer.json, encode and decode,
   the tokenizer into a model and through a checkpoint in memory */
static mhe_status op_bpe(void) {
    static const char text[] = "the cat sat on the mat; the dog sat on the log <eos> it's 3.14";
    static const char hf[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<s>\":3},\"merges\":[[\"a\",\"b\"]]},"
                             "\"added_tokens\":[{\"id\":3,\"content\":\"<s>\"}],\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}";
    const char *added[1] = { "<eos>" };
    mhe_bpe b, c;
    mhe_config cfg = tiny("mha");
    mhe_model m, r;
    mhe_status s;
    char buf[8192], out[256];
    size_t n = 0, k = 0, ck = 0;
    int ids[128];
    unsigned char d[16];
    void *mem = NULL;
    mhe_bpe_init(&b, NULL);
    mhe_bpe_init(&c, NULL);
    cfg.vocab_size = 265;
    OK(mhe_model_init(&m, &cfg, 1, NULL));
    arm();
    s = mhe_bpe_train(&b, text, sizeof text - 1, 265, MHE_BPE_SPLIT_GPT2, added, 1);
    if (s == MHE_OK) s = mhe_bpe_save_mem(&b, buf, sizeof buf, &n);
    if (s == MHE_OK) s = mhe_bpe_load_mem(&c, buf, n);
    if (s == MHE_OK) s = mhe_bpe_encode(&c, text, sizeof text - 1, ids, 128, &k, NULL, NULL);
    if (s == MHE_OK) s = mhe__bpe_encode_par(&c, text, sizeof text - 1, ids, 128, &k, 1, 4, 8, NULL);   /* cut in pieces */
    if (s == MHE_OK) s = mhe_bpe_decode(&c, ids, k, out, sizeof out, &n, NULL);
    if (s == MHE_OK) s = mhe_bpe_md5(&c, d);
    if (s == MHE_OK) s = mhe_model_set_bpe(&m, &c);
    if (s == MHE_OK) s = mhe_checkpoint_size(&m, NULL, &ck);
    if (s == MHE_OK) s = (mem = malloc(ck)) != NULL ? mhe_checkpoint_write_mem(&m, NULL, mem, ck, &ck) : MHE_ERR_NOMEM;
    if (s == MHE_OK) { s = mhe_model_load_mem(&r, mem, ck, NULL); if (s == MHE_OK) mhe_model_free(&r); }
    if (s == MHE_OK) s = mhe_bpe_load_hf(&c, hf, sizeof hf - 1);
    disarm();
    if (s != MHE_OK && b.n_tokens == 0) CHECK(b.bytes == NULL && b.merges == NULL, "a failed train keeps nothing");
    free(mem);
    mhe_bpe_free(&b); mhe_bpe_free(&c);
    mhe_model_free(&m);
    return s;
}

/* WordPiece: BERT's tokenizer.json, encode (normalised text, pieces),
   decode, the text form, a labelled set read through it */
static mhe_status op_wordpiece(void) {
    static const char hf[] = "{\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\",\"vocab\":{\"[UNK]\":0,\"[CLS]\":1,\"[SEP]\":2,"
                             "\"hello\":3,\"##s\":4,\",\":5}},\"added_tokens\":[{\"id\":1,\"content\":\"[CLS]\",\"normalized\":false},"
                             "{\"id\":2,\"content\":\"[SEP]\",\"normalized\":false}],"
                             "\"normalizer\":{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,\"strip_accents\":null,\"lowercase\":true},"
                             "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"decoder\":{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true},"
                             "\"post_processor\":{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",2],\"cls\":[\"[CLS]\",1]}}";
    static const char text[] = "H\xc3\xa9llos, [CLS] hellos [SEP]";
    static const char set[] = "0\tHellos, hello\n1\thello\thellos\n";   /* a text and a pair (types) */
    mhe_bpe b, c;
    mhe_text_set ts;
    mhe_status s;
    char buf[4096], out[256];
    size_t n = 0, k = 0;
    int ids[64];
    mhe_bpe_init(&b, NULL);
    mhe_bpe_init(&c, NULL);
    memset(&ts, 0, sizeof ts);
    arm();
    s = mhe_bpe_load_hf(&b, hf, sizeof hf - 1);
    if (s == MHE_OK) s = mhe_bpe_encode(&b, text, sizeof text - 1, ids, 64, &k, NULL, NULL);
    if (s == MHE_OK) s = mhe_bpe_decode(&b, ids, k, out, sizeof out, &n, NULL);
    if (s == MHE_OK) s = mhe_bpe_save_mem(&b, buf, sizeof buf, &n);
    if (s == MHE_OK) s = mhe_bpe_load_mem(&c, buf, n);
    if (s == MHE_OK) s = mhe_text_set_parse(&ts, set, sizeof set - 1, NULL, NULL);
    if (s == MHE_OK) s = mhe_text_set_bpe(&ts, &c, NULL);
    disarm();
    mhe_text_set_free(&ts);
    mhe_bpe_free(&b); mhe_bpe_free(&c);
    return s;
}

/* runs op with the k-th allocation failing for k = 1, 2, ... until it
   completes; returns the number of allocations it makes */
static int inject(const char *name, mhe_status (*op)(void)) {
    long k;
    int bad = 0;
    for (k = 1; k < 1000; k++) {
        mhe_status s;
        long live = fa_live;
        fa_count = 0; fa_failed = 0; fa_fail_at = k;
        s = op();
        if (!fa_failed) {
            CHECK(s == MHE_OK, "%s completes without injection: %s", name, mhe_status_str(s));
            break;
        }
        if (s != MHE_ERR_NOMEM) { printf("  %s: allocation %ld failed, status %s\n", name, k, mhe_status_str(s)); bad++; }
        if (fa_live != live) { printf("  %s: allocation %ld failed, %ld blocks leaked\n", name, k, fa_live - live); bad++; }
    }
    CHECK(bad == 0, "%s: every failed allocation gives MHE_ERR_NOMEM and leaks nothing (%d problems)", name, bad);
    printf("  %-34s %3ld allocation points\n", name, k - 1);
    return (int)(k - 1);
}

/* the allocation calls in mhe.h, to say which ones no operation reached */
static void report_sites(void) {
    FILE *f = fopen("mhe.h", "r");
    char line[1024];
    int ln = 0, all = 0, i, hit;
    if (!f) return;
    printf("  allocation sites of mhe.h not reached:");
    while (fgets(line, sizeof line, f)) {
        ln++;
        if ((!strstr(line, "MHE_MALLOC(") && !strstr(line, "MHE_REALLOC(")) || strstr(line, "(ctx") || strstr(line, "#")) continue;
        all++;
        for (i = 0, hit = 0; i < fa_nsites; i++) if (fa_sites[i] == ln) hit = 1;
        if (!hit) printf(" %d", ln);
    }
    fclose(f);
    printf(" (%d of %d reached)\n", fa_nsites, all);
}

int main(void) {
    int i, total = 0;
    (void)fa_realloc;   /* used by MHE_ARENA_DEBUG builds only */
    snprintf(path, sizeof path, "/tmp/mhe_test_alloc_%d.safetensors", (int)getpid());
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
    snprintf(grads_path, sizeof grads_path, "%s.grads", path);
    for (i = 0; i < 200; i++) data[i] = (i * 7 + i / 3) % 16;
    total += inject("model init", op_model_init);
    total += inject("trainer init + 3 steps", op_trainer);
    total += inject("first forward + evaluate", op_forward_eval);
    total += inject("save, grads, write to memory", op_save);
    total += inject("model load (file, memory) + trainer", op_load);
    total += inject("KV cache + 8 generated tokens", op_generate);
    total += inject("corpus loader", op_corpus);
    total += inject("arena", op_arena);
    total += inject("unigram entropy (vocab 300)", op_entropy);
    total += inject("byte-level BPE", op_bpe);
    total += inject("WordPiece", op_wordpiece);
    CHECK(fa_live == 0, "no block alive at the end (%ld)", fa_live);
    printf("  %d allocation points injected, at %d distinct allocation sites of mhe.h (lines", total, fa_nsites);
    for (i = 0; i < fa_nsites; i++) printf(" %d", fa_sites[i]);
    printf(")\n");
    report_sites();
    remove(path);
    return TEST_END();
}
