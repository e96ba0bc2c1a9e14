/* tests/fuzz/make_seeds.c - writes the committed seed corpora of the fuzz
   targets (tests/fuzz/seeds/). Run by hand after a format change:
       make fuzz-seeds
   The seeds are committed files, never generated at build time, so that a
   fuzz run starts from known-good inputs even when the writer is broken.
   Tiny models (vocab 16, d_model 8, 2 heads) keep every file a few KB. */
#define MHE_IMPLEMENTATION
#include "../../mhe.h"
#include <stdio.h>
#include <stdlib.h>

static int write_file(const char *dir, const char *name, const void *buf, size_t n) {
    char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0) { fprintf(stderr, "cannot write %s\n", path); return 1; }
    printf("%-60s %6lu bytes\n", path, (unsigned long)n);
    return 0;
}

static const char *base_cfg = "vocab_size=16\nd_model=8\nn_heads=2\nn_layers=1\nd_ff=12\nmax_seq_len=8\n";

/* a model checkpoint (and, with train, a trainer checkpoint after 2 steps) */
static int checkpoint(const char *root, const char *name, const char *extra, int train) {
    mhe_config c = mhe_config_default();
    mhe_model m;
    mhe_trainer t;
    char err[MHE_ERR_LEN], dir[256], file[128];
    size_t size, w;
    void *buf;
    int rc = 0, i;
    mhe_config_parse(&c, base_cfg, strlen(base_cfg), err);
    if (mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, err); return 1; }
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, m.err); return 1; }
    if (train) {
        mhe_train_config tc = mhe_train_config_default();
        int data[64];
        tc.batch = 2; tc.seq_len = 4; tc.steps = 10; tc.warmup = 1;
        for (i = 0; i < 64; i++) data[i] = (i * 7 + i / 5) % 16;
        if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, t.err); return 1; }
        for (i = 0; i < 2; i++) mhe_trainer_step(&t, data, 64);
    }
    mhe_checkpoint_size(&m, train ? &t : NULL, &size);
    buf = malloc(size);
    if (mhe_checkpoint_write_mem(&m, train ? &t : NULL, buf, size, &w) != MHE_OK) rc = 1;
    snprintf(dir, sizeof dir, "%s/%s", root, train ? "trainer" : "checkpoint");
    snprintf(file, sizeof file, "%s.safetensors", name);
    if (!rc) rc = write_file(dir, file, buf, w);
    free(buf);
    if (train) mhe_trainer_free(&t);
    mhe_model_free(&m);
    return rc;
}

/* a q8 (int8 weights) checkpoint of the same small models, `group` along the rows */
static int q8_checkpoint(const char *root, const char *name, const char *extra, int group) {
    mhe_config c = mhe_config_default();
    mhe_model m;
    char err[MHE_ERR_LEN], dir[256], file[128];
    size_t size = 0, w;
    void *buf;
    int rc = 0;
    mhe_config_parse(&c, base_cfg, strlen(base_cfg), err);
    if (mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, err); return 1; }
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, m.err); return 1; }
    if (mhe_q8_checkpoint_size(&m, group, &size) != MHE_OK) { fprintf(stderr, "%s: %s\n", name, m.err); mhe_model_free(&m); return 1; }
    buf = malloc(size);
    if (mhe_q8_checkpoint_write_mem(&m, group, buf, size, &w) != MHE_OK) rc = 1;
    snprintf(dir, sizeof dir, "%s/checkpoint", root);
    snprintf(file, sizeof file, "%s.safetensors", name);
    if (!rc) rc = write_file(dir, file, buf, w);
    free(buf);
    mhe_model_free(&m);
    return rc;
}

/* a hand-written safetensors file: JSON header (length prefixed) + data */
static int raw(const char *root, const char *name, const char *json, const void *data, size_t n) {
    unsigned char buf[4096];
    size_t hl = strlen(json);
    char dir[256];
    int i;
    uint64_t v = hl;
    for (i = 0; i < 8; i++) { buf[i] = (unsigned char)(v & 0xff); v >>= 8; }
    memcpy(buf + 8, json, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    snprintf(dir, sizeof dir, "%s/safetensors", root);
    return write_file(dir, name, buf, 8 + hl + n);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "tests/fuzz/seeds";
    static const char *kinds[] = { "mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul" };
    static const unsigned char bytes[32] = { 0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64,
                                             1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
    char dir[256], extra[128];
    int rc = 0, k;
    for (k = 0; k < 8; k++) {
        snprintf(extra, sizeof extra, "attn=%s\n", kinds[k]);
        rc |= checkpoint(root, kinds[k], extra, 0);
    }
    rc |= checkpoint(root, "hybrid", "n_layers=2\nattn=mhe-mul,gqa\nnorm=rmsnorm\nactivation=silu\n", 0);
    rc |= checkpoint(root, "post_nobias_untied", "norm_position=post\nbias=0\ntie_embeddings=0\nactivation=relu\n", 0);
    rc |= checkpoint(root, "encoder_cls", "arch=encoder\nn_classes=3\nattn=mhe-add\nd_head=3\n", 0);
    rc |= checkpoint(root, "mha", "attn=mha\n", 1);
    rc |= checkpoint(root, "mhe-mul_dropout", "attn=mhe-mul\ndropout=0.1\nattn_dropout=0.1\n", 1);
    rc |= checkpoint(root, "encoder", "arch=encoder\nattn=skv\n", 1);
    rc |= q8_checkpoint(root, "mhe-mul_q8", "attn=mhe-mul\n", 4);
    rc |= q8_checkpoint(root, "hybrid_q8_rows", "n_layers=2\nattn=mhe-mul,gqa\nnorm=rmsnorm\nactivation=silu\ntie_embeddings=0\n", 0);

    /* foreign but valid safetensors: other dtypes, empty and zero-size tensors, metadata escapes */
    rc |= raw(root, "empty.safetensors", "{}", NULL, 0);
    rc |= raw(root, "meta_only.safetensors", "{\"__metadata__\":{\"format\":\"pt\",\"k\\u00e9y\":\"v\\n\\\"q\\\"\"}}", NULL, 0);
    rc |= raw(root, "dtypes.safetensors",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]},"
              "\"c\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]},"
              "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[32,32]}}", bytes, 32);
    rc |= raw(root, "scalar_u8.safetensors",
              "{\"s\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},\"__metadata__\":null}", bytes + 20, 1);

    /* model and training config texts */
    snprintf(dir, sizeof dir, "%s/config", root);
    {
        static const char *cfgs[][2] = {
            { "default.txt", "" },
            { "gpt.txt", "arch=decoder\nvocab_size=256\nd_model=128\nn_heads=4\nn_layers=4\nmax_seq_len=128\nattn=mhe-mul\n" },
            { "hybrid.txt", "# odd layers nonstandard\nn_layers=4\nattn = mha, gqa ,mhe-add,el-att\nkv_groups=2\nnorm=rmsnorm\n"
                            "norm_eps=1e-6\nnorm_position=post\nactivation=silu\nbias=0\ntie_embeddings=0\n" },
            { "encoder.txt", "arch=encoder\nn_classes=5\nmask_token=-1\nd_head=48\ndropout=0.1\nattn_dropout=0.05\n"
                             "init_std=0.02\nhead_init_std=0.5\nfused_attention=0\n" },
            { "train.txt", "steps=600\nbatch=16\nseq_len=128\nlr=2e-3\nmin_lr=1e-4\nwarmup=50\nschedule=cosine-restarts\n"
                           "cycles=3\nbeta1=0.9\nbeta2=0.95\neps=1e-8\nweight_decay=0.1\nclip=1.0\nseed=18446744073709551615\n"
                           "eval_every=100\neval_batches=4\nsave_every=0\nlog_every=10\nmlm_prob=0.15\n" },
            { "bad.txt", "d_model=12x\nattn=mha,foo\n" },
        };
        for (k = 0; k < (int)(sizeof cfgs / sizeof cfgs[0]); k++) rc |= write_file(dir, cfgs[k][0], cfgs[k][1], strlen(cfgs[k][1]));
    }
    snprintf(dir, sizeof dir, "%s/corpus", root);
    rc |= write_file(dir, "verse.txt", "In the beginning God created the heaven and the earth.\n", 55);
    rc |= write_file(dir, "utf8.txt", "caf\xc3\xa9 \xe2\x82\xac\n\t\r", 11);
    rc |= write_file(dir, "nul.bin", "ab\0cd", 5);
    return rc;
}
