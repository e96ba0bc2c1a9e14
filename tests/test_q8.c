/* int8 weights (q8): quantization error bounds; the q8 kernel against the
   float kernel on the dequantized weights; q8 checkpoints of every kind that
   decodes, loaded to the heap and in place into a fixed arena, decoding as a
   float model of the dequantized weights does (tight) and close to the
   original float model; each bad input its own status; training refused;
   and the bundled tiny LM's perplexity, float32 against q8. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

static void quantize_bounds(void) {
    enum { R = 5, Cc = 96 };
    static float w[R * Cc], back[R * Cc], x[Cc], y[R], yq[R], yi[R];
    static int8_t q[R * Cc];
    static float s[R * Cc];
    static const int groups[] = { 32, 16, 8, 96, 3, 1 };
    mhe_rng r;
    int gi, i;
    mhe_rng_seed(&r, 3);
    for (i = 0; i < R * Cc; i++) w[i] = 0.05f * mhe_rng_normal(&r) * (i % 17 == 0 ? 8.0f : 1.0f);   /* a few outliers */
    for (i = 0; i < Cc; i++) x[i] = mhe_rng_normal(&r);
    for (i = 0; i < 32; i++) w[Cc + i] = 0;   /* an all-zero group */
    for (gi = 0; gi < (int)(sizeof groups / sizeof groups[0]); gi++) {
        int g = groups[gi], bad = 0, j;
        double worst_dot = 0;
        CHECK(mhe_q8_quantize(q, s, w, R, Cc, g) == MHE_OK, "quantize group %d", g);
        for (i = 0; i < R * Cc; i++) {
            float sc = s[i / g];
            back[i] = (float)q[i] * sc;
            if (!(sc > 0) || fabsf(back[i] - w[i]) > 0.5f * sc * 1.0001f) bad++;
        }
        CHECK(bad == 0, "group %d: |w - q s| <= s / 2 and s > 0 for every weight (%d off)", g, bad);
        if (g == 32) CHECK(s[Cc / 32] == 1.0f && q[Cc] == 0, "an all-zero group gets scale 1 and zeros");
        mhe_linear_fwd(y, x, back, NULL, 1, Cc, R);
        mhe_q8_linear_fwd(yq, R, x, Cc, q, s, g, NULL, 1, Cc, R);
        mhe_q8_linear_fwd_i8(yi, R, x, Cc, q, s, g, NULL, 1, Cc, R);
        for (j = 0; j < R; j++) {
            CHECK_CLOSE(yq[j], y[j], 1e-5, 1e-5, "group %d output %d: q8 %g, float on dequantized weights %g", g, j, yq[j], y[j]);
            if (fabs(yi[j] - y[j]) > worst_dot) worst_dot = fabs(yi[j] - y[j]);
        }
        CHECK(worst_dot < 0.05, "group %d: int8 x int8 (per-token activation scale) within 0.05: %g", g, worst_dot);
        {   /* the int8 x int8 kernel (SIMD sums) equals its definition: exact integer group sums */
            float amax = 0, xs;
            int8_t xq[Cc];
            for (j = 0; j < Cc; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
            xs = amax / 127.0f;
            for (j = 0; j < Cc; j++) xq[j] = (int8_t)roundf(x[j] * (1.0f / xs));
            for (j = 0, bad = 0; j < R; j++) {
                double want = 0;
                int k, gg;
                for (gg = 0; gg < Cc / g; gg++) {
                    long dot = 0;
                    for (k = gg * g; k < (gg + 1) * g; k++) dot += (long)q[j * Cc + k] * xq[k];
                    want += (double)s[j * (Cc / g) + gg] * (double)dot;
                }
                bad += fabs(yi[j] - xs * want) > 1e-5 * (1 + fabs(xs * want));
            }
            CHECK(bad == 0, "group %d: the int8 x int8 kernel equals its integer definition (%d outputs off)", g, bad);
        }
    }
    CHECK(mhe_q8_quantize(q, s, w, R, Cc, 7) == MHE_ERR_ARG, "a group that does not divide the row is refused");
    w[3] = NAN;
    CHECK(mhe_q8_quantize(q, s, w, R, Cc, 32) == MHE_ERR_NONFINITE, "a NaN weight is refused");
}

static int make_config(mhe_config *c, const char *text) {
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=29\nd_model=32\nn_heads=4\nn_layers=2\nmax_seq_len=8\ninit_std=0.2\n"
                       "fixed_seq=ids:1 2 3 4 5 6 7 8\nkv_groups=2\ncollab_dim=16\n";
    *c = mhe_config_default();
    if (mhe_config_parse(c, base, strlen(base), err) != MHE_OK || mhe_config_parse(c, text, strlen(text), err) != MHE_OK ||
        mhe_config_validate(c, err) != MHE_OK) {
        CHECK(0, "config [%s]: %s", text, err);
        return 0;
    }
    return 1;
}

static unsigned char *q8_image(const mhe_model *m, int group, size_t *size) {
    unsigned char *buf;
    size_t w = 0;
    *size = 0;
    if (mhe_q8_checkpoint_size(m, group, size) != MHE_OK) return NULL;
    buf = (unsigned char *)malloc(*size);
    if (mhe_q8_checkpoint_write_mem(m, group, buf, *size, &w) != MHE_OK || w != *size) { free(buf); return NULL; }
    return buf;
}

/* decode T tokens with three models: the original float one, a float model
   of the q8 model's dequantized weights (the reference), the q8 model in
   place in a fixed arena; returns the worst errors */
static void decode_kind(const char *text, int group) {
    enum { T = 8 };
    static unsigned char arena_buf[4 << 20];
    mhe_config c;
    mhe_model orig, heap, ref, m;
    mhe_kv_cache k0, k1, k2;
    mhe_arena arena;
    unsigned char *img, *fimg;
    size_t size, fsize = 0, w = 0, need = 0;
    int t, src[5] = { 3, 1, 4, 1, 5 }, n_q8 = 0, i;
    double e_ref = 0, e_orig = 0, span = 0;
    if (!make_config(&c, text)) return;
    if (mhe_model_init(&orig, &c, 11, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", text, orig.err); return; }
    img = q8_image(&orig, group, &size);
    CHECK(img != NULL, "q8 image [%s]: %s", text, orig.err);
    if (!img) { mhe_model_free(&orig); return; }
    CHECK(mhe_model_load_mem(&heap, img, size, NULL) == MHE_OK && heap.q8 && heap.grad_data == NULL, "heap load [%s]: %s", text, heap.err);
    for (i = 0; i < heap.n_tensors; i++) n_q8 += heap.params[i].q8 != NULL;
    CHECK(n_q8 > 0, "int8 tensors [%s]", text);
    OK(mhe_checkpoint_size(&heap, NULL, &fsize));   /* the dequantized weights as a float checkpoint */
    fimg = (unsigned char *)malloc(fsize);
    OK(mhe_checkpoint_write_mem(&heap, NULL, fimg, fsize, &w));
    CHECK(mhe_model_load_mem(&ref, fimg, fsize, NULL) == MHE_OK, "reference load [%s]: %s", text, ref.err);
    CHECK(mhe_inference_memory_needed(img, size, T, MHE_LOAD_IN_PLACE, &need) == MHE_OK && need <= sizeof arena_buf, "memory needed [%s]", text);
    mhe_arena_init(&arena, arena_buf, need);
    CHECK(mhe_model_load_arena(&m, img, size, &arena, MHE_LOAD_IN_PLACE) == MHE_OK, "in-place load [%s]: %s", text, m.err);
    CHECK(mhe_kv_cache_init_arena(&k2, &m, T, &arena) == MHE_OK, "cache in the arena [%s]", text);
    for (i = 0; i < m.n_tensors; i++)
        if (m.params[i].q8 && ((const unsigned char *)m.params[i].q8 < img || (const unsigned char *)m.params[i].q8 >= img + size || m.params[i].data)) break;
    CHECK(i == m.n_tensors, "in place: int8 weights point into the image, no float copy [%s]", text);
    OK(mhe_kv_cache_init(&k0, &orig, T, NULL));
    OK(mhe_kv_cache_init(&k1, &ref, T, NULL));
    if (c.arch == MHE_ARCH_ENCDEC) {
        CHECK(mhe_kv_cache_encode(&orig, &k0, src, 5) == MHE_OK && mhe_kv_cache_encode(&ref, &k1, src, 5) == MHE_OK &&
              mhe_kv_cache_encode(&m, &k2, src, 5) == MHE_OK, "encode [%s]: %s", text, m.err);
    }
    for (t = 0; t < T; t++) {
        int tok = (t * 7 + 3) % c.vocab_size, v;
        if (mhe_decode_step(&orig, &k0, tok) != MHE_OK || mhe_decode_step(&ref, &k1, tok) != MHE_OK || mhe_decode_step(&m, &k2, tok) != MHE_OK) {
            CHECK(0, "decode [%s] token %d: %s", text, t, m.err);
            break;
        }
        for (v = 0; v < c.vocab_size; v++) span = fmax(span, fabs(k0.logits[v]));
        e_ref = fmax(e_ref, test_max_rel_err(k2.logits, k1.logits, c.vocab_size, 1.0));
        e_orig = fmax(e_orig, test_max_rel_err(k2.logits, k0.logits, c.vocab_size, 1.0));
    }
    CHECK(e_ref < 2e-4, "q8 decoding equals the float model of its dequantized weights [%s, group %d]: %.3g", text, group, e_ref);
    if (getenv("Q8_VERBOSE")) printf("%-40.40s group %2d: vs dequantized %.2g, vs float32 %.3g (logits up to %.3g)\n", text, group, e_ref, e_orig, span);
    CHECK(e_orig < 0.05 * fmax(span, 1.0), "q8 logits close to float32 [%s, group %d]: %.3g (logits up to %.3g)", text, group, e_orig, span);
    {   /* inference only */
        mhe_trainer tr;
        mhe_train_config tc = mhe_train_config_default();
        int tok[4] = { 1, 2, 3, 4 };
        tc.seq_len = 4; tc.batch = 1;
        CHECK(mhe_trainer_init(&tr, &heap, &tc) == MHE_ERR_FORMAT && strstr(tr.err, "q8"), "a q8 model refuses training [%s]: %s", text, tr.err);
        if (c.arch == MHE_ARCH_DECODER) {
            float l1 = 0, l2 = 0;
            CHECK(mhe_model_forward(&heap, tok, tok, 1, 4, &l1) == MHE_OK && mhe_model_forward(&ref, tok, tok, 1, 4, &l2) == MHE_OK &&
                  fabs(l1 - l2) < 1e-4, "the batch forward of q8 runs its int8 weights [%s]: %g vs %g", text, l1, l2);
            CHECK(mhe_model_backward(&heap) == MHE_ERR_FORMAT, "and a backward pass [%s]: %s", text, heap.err);
        }
    }
    mhe_kv_cache_free(&k0); mhe_kv_cache_free(&k1); mhe_kv_cache_free(&k2);
    mhe_model_free(&m); mhe_arena_free(&arena);
    mhe_model_free(&ref); mhe_model_free(&heap); mhe_model_free(&orig);
    free(img); free(fimg);
}

/* a copy of img with the header text `from` (first occurrence after `after`) replaced by `to` of the same length */
static unsigned char *patch_header(const unsigned char *img, size_t size, const char *after, const char *from, const char *to) {
    unsigned char *b = (unsigned char *)malloc(size);
    size_t hl = 0, i, a = 0;
    memcpy(b, img, size);
    for (i = 0; i < 8; i++) hl |= (size_t)img[i] << (8 * i);
    for (i = 8; i + strlen(after) <= 8 + hl; i++) if (!memcmp(b + i, after, strlen(after))) { a = i; break; }
    for (i = a; a && i + strlen(from) <= 8 + hl; i++)
        if (!memcmp(b + i, from, strlen(from))) { memcpy(b + i, to, strlen(to)); return b; }
    free(b);
    return NULL;
}

static mhe_status load_status(const unsigned char *img, size_t size, mhe_model *m) {
    mhe_status s = mhe_model_load_mem(m, img, size, NULL);
    if (s == MHE_OK) mhe_model_free(m);
    return s;
}

static void bad_input(void) {
    static unsigned char arena_buf[1 << 20];
    mhe_config c;
    mhe_model orig, m;
    mhe_safetensors st;
    mhe_arena arena;
    unsigned char *img, *b;
    size_t size, need = 0;
    const char *sc = "\"layers.0.attn.wq.weight_scale\"";
    static const struct { uint32_t bits; mhe_status want; const char *what; } scales[] = {
        { 0x7fc00000u, MHE_ERR_NONFINITE, "NaN" }, { 0x7f800000u, MHE_ERR_NONFINITE, "Inf" }, { 0, MHE_ERR_FORMAT, "zero" },
        { 0xbf800000u, MHE_ERR_FORMAT, "negative" },
    };
    int i;
    if (!make_config(&c, "attn=mha\nd_model=64\n")) return;
    OK(mhe_model_init(&orig, &c, 1, NULL));
    img = q8_image(&orig, 32, &size);
    if (!img) { CHECK(0, "q8 image"); mhe_model_free(&orig); return; }
    for (i = 0; i < (int)(sizeof scales / sizeof scales[0]); i++) {   /* a bad scale, little-endian */
        const mhe_st_tensor *t;
        b = (unsigned char *)malloc(size);
        memcpy(b, img, size);
        OK(mhe_st_parse(&st, b, size, NULL));
        t = mhe_st_find(&st, "layers.0.attn.wq.weight_scale");
        if (t) {
            unsigned char *p = b + (t->data - b) + 4;   /* element 1 */
            p[0] = (unsigned char)scales[i].bits; p[1] = (unsigned char)(scales[i].bits >> 8);
            p[2] = (unsigned char)(scales[i].bits >> 16); p[3] = (unsigned char)(scales[i].bits >> 24);
        }
        mhe_st_free(&st);
        CHECK(t && load_status(b, size, &m) == scales[i].want && strstr(m.err, "scale 1 of 'layers.0.attn.wq.weight_scale'"),
              "a %s scale is refused: %s", scales[i].what, m.err);
        mhe_arena_init(&arena, arena_buf, sizeof arena_buf);
        CHECK(mhe_model_load_arena(&m, b, size, &arena, MHE_LOAD_IN_PLACE) == scales[i].want, "and in place: %s", m.err);
        mhe_arena_free(&arena);   /* nothing of arena_buf; the blocks of a MHE_ARENA_DEBUG build */
        free(b);
    }
    b = patch_header(img, size, "\"quant.group\"", "\"32\"", "\"24\"");
    CHECK(b && load_status(b, size, &m) == MHE_ERR_SHAPE && strstr(m.err, "does not divide"), "a group that does not divide a row: %s", m.err);
    free(b);
    b = patch_header(img, size, "\"quant.group\"", "\"32\"", "\"16\"");
    CHECK(b && load_status(b, size, &m) == MHE_ERR_SHAPE && strstr(m.err, "per row"), "scales that do not match the group: %s", m.err);
    free(b);
    b = patch_header(img, size, sc, "F32", "I32");
    CHECK(b && load_status(b, size, &m) == MHE_ERR_DTYPE && strstr(m.err, "weight_scale"), "scales of the wrong dtype: %s", m.err);
    free(b);
    b = patch_header(img, size, sc, "[64,2]", "[32,4]");   /* wq [64, 64]: scales [64, 2] */
    CHECK(b && load_status(b, size, &m) == MHE_ERR_SHAPE && strstr(m.err, "weight_scale"), "scales of the wrong shape: %s", m.err);
    free(b);
    b = patch_header(img, size, "\"layers.0.attn.wq.weight\"", "I8", "U8");
    CHECK(b && load_status(b, size, &m) == MHE_ERR_DTYPE, "int8 weights of another dtype: %s", m.err);
    free(b);
    b = patch_header(img, size, "\"quant\"", "\"q8\"", "\"q4\"");
    CHECK(b && load_status(b, size, &m) == MHE_ERR_FORMAT, "an unknown quantization: %s", m.err);
    free(b);
    CHECK(mhe_inference_memory_needed(img, size, 8, MHE_LOAD_IN_PLACE, &need) == MHE_OK, "memory needed");
    mhe_arena_init(&arena, arena_buf, need - MHE_ARENA_ALIGN - 1);
    {
        mhe_status s1 = mhe_model_load_arena(&m, img, size, &arena, MHE_LOAD_IN_PLACE), s2 = MHE_OK;
        mhe_kv_cache kv;
        if (s1 == MHE_OK) s2 = mhe_kv_cache_init_arena(&kv, &m, 8, &arena);
        CHECK(s1 == MHE_ERR_NOMEM || s2 == MHE_ERR_NOMEM, "an arena too small: MHE_ERR_NOMEM (%d, %d)", s1, s2);
        mhe_arena_free(&arena);
    }
    mhe_arena_init(&arena, arena_buf, sizeof arena_buf);
    CHECK(mhe_model_load_arena(&m, img, size, &arena, 0) == MHE_ERR_ARG && strstr(m.err, "in place"), "an arena copy of q8 is refused: %s", m.err);
    mhe_arena_free(&arena);
    CHECK(mhe_inference_memory_needed(img, size, 8, 0, &need) == MHE_ERR_ARG, "and its size is not computed");
    free(img);
    mhe_model_free(&orig);
}

/* the bundled tiny LM on its validation text: perplexity float32 vs q8 */
static void tiny_lm_perplexity(void) {
    mhe_model f, q;
    void *buf = NULL;
    size_t size = 0, qsize = 0, n = 0;
    int *tok = NULL;
    unsigned char *img;
    float lf = 0, lq = 0;
    char err[MHE_ERR_LEN];
    int g;
    if (mhe_model_load(&f, "examples/data/tiny_lm.safetensors", NULL) != MHE_OK ||
        mhe_read_text_tokens("examples/data/valid.txt", &tok, &n, NULL, err) != MHE_OK) {
        CHECK(0, "tiny LM and its validation text: %s", f.err);
        return;
    }
    (void)buf; (void)size;
    CHECK(mhe_evaluate(&f, tok, n, 8, 64, 16, &lf) == MHE_OK, "float eval: %s", f.err);
    for (g = 32; g >= 0; g -= 32) {
        img = q8_image(&f, g, &qsize);
        CHECK(img && mhe_model_load_mem(&q, img, qsize, NULL) == MHE_OK, "q8 tiny LM (group %d)", g);
        if (!img) continue;
        CHECK(mhe_evaluate(&q, tok, n, 8, 64, 16, &lq) == MHE_OK, "q8 eval: %s", q.err);
        printf("tiny LM, %d validation windows of 64: perplexity float32 %.4f, q8 (%s) %.4f (%+.3f %%), file %zu bytes\n", 8 * 16,
               exp(lf), g ? "group 32" : "per row", exp(lq), 100.0 * (exp(lq) / exp(lf) - 1), qsize);
        CHECK(exp(lq) <= 1.01 * exp(lf), "q8 perplexity within 1 %% of float32 (group %d): %.4f vs %.4f", g, exp(lq), exp(lf));
        mhe_model_free(&q);
        free(img);
    }
    free(tok);
    mhe_model_free(&f);
}

/* the kind table's q8 column is what a q8 checkpoint stores as int8: for
   every kind, the int8 tensors of layer 0's sublayer, by name */
static void q8_column(void) {
    int kind;
    for (kind = 0; kind < MHE_ATTN_KIND_COUNT; kind++) {
        const char *name = mhe_attn_kind_name(kind), *listed = mhe_attn_kind_q8_tensors(kind);
        char text[256], have[256] = "";
        mhe_config c;
        mhe_model orig, q;
        unsigned char *img;
        size_t size;
        int i, encoder = kind == MHE_ATTN_FNET || kind == MHE_ATTN_LINEAR;
        snprintf(text, sizeof text, "%sattn=%s\nbias=0\n", encoder ? "arch=encoder\n" : "", name);
        if (!make_config(&c, text)) continue;
        if (mhe_model_init(&orig, &c, 2, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", text, orig.err); continue; }
        img = q8_image(&orig, 0, &size);
        CHECK(img && mhe_model_load_mem(&q, img, size, NULL) == MHE_OK, "q8 image of %s", name);
        if (!img) { mhe_model_free(&orig); continue; }
        for (i = 0; i < q.n_tensors; i++) {
            char base[64];
            if (strncmp(q.params[i].name, "layers.0.attn.", 14) != 0 || !q.params[i].q8) continue;
            snprintf(base, sizeof base, "%s", q.params[i].name + 14);
            if (strstr(base, ".weight")) *strstr(base, ".weight") = 0;
            if (strlen(have) + strlen(base) + 2 < sizeof have) { if (have[0]) strcat(have, " "); strcat(have, base); }
        }
        CHECK(strcmp(have, strcmp(listed, "(none)") == 0 ? "" : listed) == 0, "q8 column of %s: int8 [%s], the table says [%s]",
              name, have, listed);
        mhe_model_free(&q); mhe_model_free(&orig); free(img);
    }
}

int main(void) {
    char text[256], err[MHE_ERR_LEN];
    int kind, n = 0;
    setvbuf(stdout, NULL, _IONBF, 0);
    quantize_bounds();
    q8_column();
    for (kind = 0; kind < MHE_ATTN_KIND_COUNT; kind++) {   /* every kind a causal decoder runs */
        mhe_config c = mhe_config_default();
        snprintf(text, sizeof text, "attn=%s\n", mhe_attn_kind_name(kind));
        if (mhe_config_parse(&c, text, strlen(text), err) != MHE_OK || mhe_config_validate(&c, err) != MHE_OK)
            continue;   /* fnet, linear: encoders only */
        snprintf(text, sizeof text, "attn=mha,%s\nbias=%d\n", mhe_attn_kind_name(kind), kind & 1);
        decode_kind(text, 32);
        n++;
    }
    CHECK(n == MHE_ATTN_KIND_COUNT - 2, "%d kinds decoded through q8", n);
    decode_kind("attn=mhe-mul\ntie_embeddings=0\nnorm=rmsnorm\n", 0);        /* an int8 LM head, one scale per row */
    decode_kind("attn=mlp,gqa\nnorm_position=post\n", 16);
    decode_kind("arch=encdec\nenc_layers=1\nenc_attn=mhe-mul\ncross_attn=mhe-add,el-att\nattn=mqa,mhe-mul\n", 32);
    decode_kind("arch=encdec\nenc_layers=1\nenc_attn=linear\ncross_attn=collab,staticemb-qk\nattn=taylor,mha\n", 32);
    bad_input();
    tiny_lm_perplexity();
    return TEST_END();
}
