/* The whole model: finite-difference gradient check of the loss w.r.t.
   every parameter tensor (sampled entries), fused core == reference core
   inside the model, KV-cache decoding == full forward, checkpoints. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

static mhe_config tiny(const char *extra) {
    mhe_config c = mhe_config_default();
    char err[MHE_ERR_LEN];
    /* scaled residual outputs: the finite differences of the checks below were tuned on them */
    const char *base = "vocab_size=11\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\ninit_std=0.3\ninit_residual=scaled\n";
    OK(mhe_config_parse(&c, base, strlen(base), err));
    if (extra && mhe_config_parse(&c, extra, strlen(extra), err) != MHE_OK) printf("bad test config: %s\n", err);
    return c;
}

static void batch(int *tok, int *tgt, int n, int V, mhe_rng *r) {
    int i;
    for (i = 0; i < n; i++) { tok[i] = (int)mhe_rng_below(r, (uint32_t)V); tgt[i] = (int)mhe_rng_below(r, (uint32_t)V); }
}

/* A batch of random tokens for config c: B x T decoder (or single-stack)
   tokens, Ts source tokens for encdec; with pad, the second sequence (and
   source) is shorter than the rest, padded. Arrays must hold B*T / B*Ts. */
typedef struct { mhe_batch b; int tok[3 * 8], tgt[3 * 8], src[3 * 8], len[3], slen[3]; } test_batch;

static void make_batch(test_batch *tb, const mhe_config *c, int B, int T, int Ts, int pad, mhe_rng *r) {
    int i;
    memset(tb, 0, sizeof *tb);
    batch(tb->tok, tb->tgt, B * T, c->vocab_size, r);
    {   /* the source from its own stream, so the checks sample the same entries as before sources existed */
        mhe_rng rs;
        mhe_rng_seed(&rs, 77);
        batch(tb->src, tb->src, B * Ts, c->vocab_size, &rs);
    }
    tb->tgt[3] = -1;                          /* an ignored position */
    tb->b.B = B; tb->b.T = T; tb->b.tokens = tb->tok; tb->b.targets = tb->tgt;
    for (i = 0; i < B; i++) { tb->len[i] = T; tb->slen[i] = Ts; }
    if (pad) { tb->len[1] = T - 3; tb->slen[1] = Ts - 2; tb->b.lengths = tb->len; }
    if (c->arch == MHE_ARCH_ENCDEC) { tb->b.Ts = Ts; tb->b.src = tb->src; if (pad) tb->b.src_lengths = tb->slen; }
}

static void model_gradcheck(const char *extra, int pad) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    test_batch tb;
    int bad, checked;
    float loss;
    double worst;
    mhe_rng_seed(&r, 9);
    CHECK(mhe_model_init(&m, &c, 4, NULL) == MHE_OK, "init [%s]: %s", extra, m.err);
    make_batch(&tb, &c, 2, 7, 6, pad, &r);
    mhe_model_zero_grad(&m);
    CHECK(mhe_model_forward_batch(&m, &tb.b, &loss) == MHE_OK, "forward: %s", m.err);
    CHECK(mhe_model_backward(&m) == MHE_OK, "backward: %s", m.err);
    bad = test_model_gradcheck(&m, test_loss_batch, &tb.b, &r, 5, 5, NULL, &worst, &checked);
    CHECK(bad == 0, "model gradient check [%s%s]: %d tensors off, worst %.3g over %d entries", extra ? extra : "", pad ? " padded" : "", bad, worst, checked);
    mhe_model_free(&m);
}

static void fused_equals_reference(const char *extra, int pad) {
    mhe_config c = tiny(extra), c2;
    mhe_model a, b;
    mhe_rng r;
    test_batch tb;
    float la, lb;
    double eg;
    mhe_rng_seed(&r, 2);
    make_batch(&tb, &c, 3, 8, 7, pad, &r);
    c2 = c; c2.fused_attention = 0;
    OK(mhe_model_init(&a, &c, 7, NULL));
    OK(mhe_model_init(&b, &c2, 7, NULL));
    /* with dropout configured, run in training mode: both paths must drop the same weights */
    a.training = b.training = c.dropout > 0 || c.attn_dropout > 0;
    a.dropout_seed = b.dropout_seed = 99;
    OK(mhe_model_forward_batch(&a, &tb.b, &la)); OK(mhe_model_backward(&a));
    OK(mhe_model_forward_batch(&b, &tb.b, &lb)); OK(mhe_model_backward(&b));
    eg = test_max_rel_err(a.grad_data, b.grad_data, (long)a.n_params, 1e-3);
    CHECK(fabs(la - lb) < 1e-5 && eg < 1e-3, "model fused vs reference core [%s%s]: loss %g vs %g, grads %.3g", extra, pad ? " padded" : "", la, lb, eg);
    mhe_model_free(&a); mhe_model_free(&b);
}

static void decode_equals_forward(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_kv_cache kv;
    mhe_rng r;
    test_batch tb;
    double worst = 0;
    mhe_rng_seed(&r, 5);
    make_batch(&tb, &c, 1, 8, 6, 0, &r);
    tb.b.targets = NULL;
    OK(mhe_model_init(&m, &c, 3, NULL));
    OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    CHECK(mhe_kv_cache_init(&kv, &m, 8, NULL) == MHE_OK, "kv cache init");
    if (c.arch == MHE_ARCH_ENCODER) {   /* bidirectional: no token-by-token decoding */
        CHECK(mhe_decode_step(&m, &kv, tb.tok[0]) == MHE_ERR_CONFIG, "decoding an encoder is refused: %s", m.err);
        mhe_kv_cache_free(&kv);
        mhe_model_free(&m);
        return;
    }
    if (c.arch == MHE_ARCH_ENCDEC) {
        CHECK(mhe_decode_step(&m, &kv, tb.tok[0]) == MHE_ERR_ARG, "decoding before encoding a source is refused: %s", m.err);
        CHECK(mhe_kv_cache_encode(&m, &kv, tb.src, 6) == MHE_OK, "encode the source: %s", m.err);
        /* the encoder pass reused the activations: run the batch again for the reference logits */
        OK(mhe_model_forward_batch(&m, &tb.b, NULL));
    }
    worst = test_decode_vs_forward(&m, &kv, tb.tok, 8);
    CHECK(worst >= 0, "decode [%s]: %s", extra, m.err);
    CHECK(worst >= 0 && worst < 1e-5, "KV-cache decoding equals the full forward [%s]: %.3g", extra, worst);
    CHECK(mhe_decode_step(&m, &kv, tb.tok[0]) == MHE_ERR_ARG, "full cache is an error, not an overrun");
    CHECK(mhe_decode_step(&m, &kv, 99) == MHE_ERR_DATA, "bad token rejected");
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
}

/* Padding is invisible: the real positions of a padded sequence give the
   same logits (and pooled class logits) as the sequence alone, unpadded. */
static float batch_loss(mhe_model *m, const test_batch *tb) {
    float loss = 0;
    OK(mhe_model_forward_batch(m, &tb->b, &loss));
    return loss;
}

/* Collaborative reparametrisation (Cordonnier et al. 2020, sec. 3.3): exact
   at D~ = n d_h (with query biases folded into the content bias, key biases
   dropped), exact up to ALS at D~ = the heads' true CP rank, and bad input
   refused with nothing built. */
static void reparam_collab(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m, r;
    mhe_reparam_opts o = mhe_reparam_opts_default();
    mhe_rng g;
    test_batch tb;
    int conv = 0, l, i, d, h, j, R = 3, C = c.d_model, n = c.n_heads, dh = mhe_config_d_head(&c);
    float l0, l1;
    mhe_rng_seed(&g, 31);
    CHECK(mhe_model_init(&m, &c, 8, NULL) == MHE_OK, "reparam source [%s]: %s", extra, m.err);
    for (i = 0; i < m.n_tensors; i++)   /* biases away from 0, so the folding is exercised */
        if (strstr(m.params[i].name, ".bias"))
            for (j = 0; j < m.params[i].size; j++) m.params[i].data[j] = 0.3f * mhe_rng_normal(&g);
    make_batch(&tb, &c, 2, 7, 6, c.arch != MHE_ARCH_DECODER, &g);
    l0 = batch_loss(&m, &tb);
    o.dim = n * dh;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, &conv) == MHE_OK, "reparam D~ = n d_h [%s]: %s", extra, r.err);
    l1 = batch_loss(&r, &tb);
    CHECK(conv >= 1 && fabs(l1 - l0) <= 1e-4 * fabs(l0) && r.cfg.collab_dim == n * dh,
          "reparam at D~ = n d_h is exact [%s]: %d sublayers, loss %.7f vs %.7f", extra, conv, l1, l0);
    mhe_model_free(&r);
    /* heads whose W_Q^(i) W_K^(i)T = A diag(b_i) C^T have CP rank R: D~ = R recovers them */
    for (l = 0; l < 2 * m.n_total_layers; l++) {   /* self- and cross-attention */
        mhe_attn_weights *w = l % 2 ? &m.layers[l / 2].cross : &m.layers[l / 2].attn;
        float A[64 * 3], B[16 * 3], Cm[64 * 3];
        if (w->kind != MHE_ATTN_MHA) continue;
        for (i = 0; i < C * R; i++) { A[i] = mhe_rng_normal(&g); Cm[i] = mhe_rng_normal(&g); }
        for (i = 0; i < n * R; i++) B[i] = 0.5f + mhe_rng_uniform(&g);
        for (h = 0; h < n; h++)
            for (d = 0; d < dh; d++)
                for (i = 0; i < C; i++) {
                    w->wq->data[(size_t)(h * dh + d) * C + i] = d < R ? A[i * R + d] * B[h * R + d] : 0.0f;
                    w->wk->data[(size_t)(h * dh + d) * C + i] = d < R ? Cm[i * R + d] : 0.0f;
                }
    }
    l0 = batch_loss(&m, &tb);
    o.dim = R; o.tol = 1e-9; o.max_iter = 20000;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, &conv) == MHE_OK, "reparam D~ = CP rank [%s]: %s", extra, r.err);
    l1 = batch_loss(&r, &tb);
    CHECK(fabs(l1 - l0) <= 1e-4 * fabs(l0), "reparam at the heads' CP rank %d recovers the layer [%s]: loss %.7f vs %.7f", R, extra, l1, l0);
    mhe_model_free(&r);
    /* bad input: nothing is built, the message says why */
    o.dim = 0;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, NULL) == MHE_ERR_ARG && r.n_tensors == 0 && strstr(r.err, "dim"), "D~ = 0 refused: %s", r.err);
    o.dim = 2; o.max_iter = 1; o.tol = 0;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, NULL) == MHE_ERR_CONVERGE && r.n_tensors == 0 && !r.param_data &&
          strstr(r.err, "converge") && strstr(r.err, "layers."), "no convergence within max_iter: nothing built: %s", r.err);
    mhe_model_free(&m);
}

static void reparam_errors(void) {
    mhe_config c = tiny("attn=mhe-mul,gqa\nkv_groups=3\n");
    mhe_model m, r;
    mhe_reparam_opts o = mhe_reparam_opts_default();
    OK(mhe_model_init(&m, &c, 1, NULL));
    o.dim = 4;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, NULL) == MHE_ERR_CONFIG && strstr(r.err, "no mha") && r.n_tensors == 0,
          "a model without mha layers is refused: %s", r.err);
    mhe_model_free(&m);
    c = tiny("attn=collab,mha\ncollab_dim=6\n");
    OK(mhe_model_init(&m, &c, 1, NULL));
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, NULL) == MHE_ERR_CONFIG && strstr(r.err, "D~ = 6"),
          "existing collab layers of another width are refused: %s", r.err);
    o.dim = 6;
    CHECK(mhe_model_reparam_collab(&r, &m, &o, NULL, NULL) == MHE_OK && r.layers[0].attn.kind == MHE_ATTN_COLLAB &&
          r.layers[1].attn.kind == MHE_ATTN_COLLAB && memcmp(r.layers[0].attn.wq->data, m.layers[0].attn.wq->data, 6 * 12 * 4) == 0,
          "mha beside collab of the same width: converted, the collab layer copied: %s", r.err);
    mhe_model_free(&r);
    mhe_model_free(&m);
}

static void padding_equals_truncation(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    test_batch tb;
    int V = c.vocab_size, T = 8, Ts = 7, t, cls = c.n_classes > 0, labels[3] = { 1, 0, 2 };
    float keep[8 * 64], keep_cls[8];
    double worst = 0;
    mhe_batch one;
    mhe_rng_seed(&r, 6);
    make_batch(&tb, &c, 3, T, Ts, 1, &r);
    tb.b.targets = NULL;
    OK(mhe_model_init(&m, &c, 8, NULL));
    CHECK(mhe_model_forward_batch(&m, &tb.b, NULL) == MHE_OK, "padded forward: %s", m.err);
    memcpy(keep, m.acts.logits + (size_t)T * V, sizeof(float) * (size_t)tb.len[1] * V);
    if (cls) {   /* the pooled head: the mean over the real tokens only */
        tb.b.labels = labels;
        CHECK(mhe_model_forward_batch(&m, &tb.b, NULL) == MHE_OK, "padded forward (head): %s", m.err);
        memcpy(keep_cls, m.acts.cls_logits + c.n_classes, sizeof(float) * (size_t)c.n_classes);
    }
    /* sequence 1 alone, exactly its real tokens */
    memset(&one, 0, sizeof one);
    one.B = 1; one.T = tb.len[1]; one.tokens = tb.tok + T;
    if (c.arch == MHE_ARCH_ENCDEC) { one.Ts = tb.slen[1]; one.src = tb.src + Ts; }
    CHECK(mhe_model_forward_batch(&m, &one, NULL) == MHE_OK, "unpadded forward: %s", m.err);
    for (t = 0; t < tb.len[1]; t++) {
        double e = test_max_rel_err(keep + (size_t)t * V, m.acts.logits + (size_t)t * V, V, 1.0);
        if (e > worst) worst = e;
    }
    if (cls) {
        double e;
        one.labels = labels + 1;
        CHECK(mhe_model_forward_batch(&m, &one, NULL) == MHE_OK, "unpadded forward (head): %s", m.err);
        e = test_max_rel_err(keep_cls, m.acts.cls_logits, c.n_classes, 1.0);
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-5, "padding is masked out [%s]: %.3g", extra, worst);
    {   /* bad lengths are errors */
        int badlen[3] = { 8, 0, 8 };
        tb.b.lengths = badlen;
        CHECK(mhe_model_forward_batch(&m, &tb.b, NULL) == MHE_ERR_DATA, "length 0 rejected: %s", m.err);
        badlen[1] = 9;
        CHECK(mhe_model_forward_batch(&m, &tb.b, NULL) == MHE_ERR_DATA, "length > T rejected: %s", m.err);
    }
    mhe_model_free(&m);
}

static void checkpoint_roundtrip(void) {
    mhe_config c = tiny("norm=rmsnorm\ntie_embeddings=0\n");
    mhe_model a, b;
    size_t size = 0, written = 0;
    void *buf;
    int tok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float la, lb;
    OK(mhe_model_init(&a, &c, 11, NULL));
    CHECK(mhe_checkpoint_size(&a, NULL, &size) == MHE_OK, "checkpoint size");
    buf = malloc(size);
    CHECK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &written) == MHE_OK && written == size, "write to memory");
    CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK, "load from memory: %s", b.err);
    CHECK(memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0, "config restored from __metadata__");
    CHECK(a.n_params == b.n_params && memcmp(a.param_data, b.param_data, (size_t)a.n_params * 4) == 0, "weights restored bit for bit");
    OK(mhe_model_forward(&a, tok, tok, 1, 8, &la));
    OK(mhe_model_forward(&b, tok, tok, 1, 8, &lb));
    CHECK(la == lb, "same loss after reload");
    mhe_model_free(&b);
    /* a truncated checkpoint is an error, never a crash */
    CHECK(mhe_model_load_mem(&b, buf, size - 1, NULL) != MHE_OK, "truncated checkpoint rejected");
    CHECK(mhe_model_load_mem(&b, buf, 8, NULL) != MHE_OK, "header-only checkpoint rejected: %s", b.err);
    {   /* a model of another shape cannot take these weights */
        char *t = malloc(size);
        memcpy(t, buf, size);
        /* corrupt the format tag */
        {
            char *f = NULL; size_t i;
            for (i = 8; i + 5 < size; i++) if (memcmp(t + i, "mhe-1", 5) == 0) { f = t + i; break; }
            if (f) f[4] = '9';
            CHECK(f && mhe_model_load_mem(&b, t, size, NULL) == MHE_ERR_FORMAT, "other format version rejected: %s", b.err);
        }
        free(t);
    }
    free(buf);
    mhe_model_free(&a);
}

/* encoder classification head: finite differences of the pooled-class loss */
static void cls_gradcheck(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    int tok[3 * 6], labels[3] = { 2, 0, -1 }, i, j, bad = 0;
    float loss;
    mhe_rng_seed(&r, 4);
    batch(tok, tok, 18, c.vocab_size, &r);
    CHECK(mhe_model_init(&m, &c, 2, NULL) == MHE_OK, "cls init: %s", m.err);
    mhe_model_zero_grad(&m);
    CHECK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &loss) == MHE_OK, "cls forward: %s", m.err);
    CHECK(mhe_model_backward(&m) == MHE_OK, "cls backward");
    for (i = 0; i < m.n_tensors; i++) {
        mhe_tensor *t = &m.params[i];
        double worst = 0;
        if (strstr(t->name, "lm_head") || strcmp(t->name, "tok_emb.weight") == 0) continue;   /* LM head unused here (tok_emb still checked below) */
        for (j = 0; j < 4; j++) {
            int64_t e = (int64_t)mhe_rng_below(&r, (uint32_t)t->size);
            float keep = t->data[e], lp, lm;
            double num;
            t->data[e] = keep + 1e-2f; OK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &lp));
            t->data[e] = keep - 1e-2f; OK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &lm));
            t->data[e] = keep;
            num = ((double)lp - lm) / 2e-2;
            if (fabs(num - t->grad[e]) / (2e-3 + fabs(num)) > worst) worst = fabs(num - t->grad[e]) / (2e-3 + fabs(num));
        }
        if (worst > 5e-2) { bad++; printf("  cls %s: %.3g\n", t->name, worst); }
    }
    {   /* token embedding rows of tokens that occur */
        int64_t e = (int64_t)tok[0] * c.d_model + 1;
        float keep = m.tok_emb->data[e], lp, lm;
        double num;
        m.tok_emb->data[e] = keep + 1e-2f; OK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &lp));
        m.tok_emb->data[e] = keep - 1e-2f; OK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &lm));
        m.tok_emb->data[e] = keep;
        num = ((double)lp - lm) / 2e-2;
        if (fabs(num - m.tok_emb->grad[e]) / (2e-3 + fabs(num)) > 5e-2) bad++;
    }
    CHECK(bad == 0, "classification gradient check [%s]: %d tensors off", extra, bad);
    labels[0] = 7;
    CHECK(mhe_model_forward_cls(&m, tok, labels, 3, 6, &loss) == MHE_ERR_DATA, "label out of range: %s", m.err);
    mhe_model_free(&m);
}

/* every kind of the MHE paper (and an encoder with a head) survives a
   checkpoint round trip; test_decon does the kinds of thesis ch. 4 */
#define NK (MHE_ATTN_MHE_MUL + 1)
static void checkpoint_every_kind(void) {
    int kind;
    for (kind = 0; kind <= NK + 1; kind++) {
        mhe_config c = tiny(kind == NK ? "arch=encoder\nn_classes=4\nattn=gqa,mhe-add\nn_heads=4\nd_model=16\n"
                            : kind > NK ? "arch=encdec\nenc_layers=3\nenc_attn=mhe-mul,gqa,skv\ncross_attn=el-att,mhe-add\nn_heads=4\nd_model=16\n"
                                                         : "n_heads=4\nd_model=16\nkv_groups=2\n");
        mhe_model a, b;
        size_t size = 0, w = 0;
        void *buf;
        if (kind < NK) { int l; for (l = 0; l < MHE_MAX_LAYERS; l++) c.attn[l] = kind; }
        OK(mhe_model_init(&a, &c, 5, NULL));
        OK(mhe_checkpoint_size(&a, NULL, &size));
        buf = malloc(size);
        OK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &w));
        CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK && memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0 &&
              a.n_params == b.n_params && memcmp(a.param_data, b.param_data, (size_t)a.n_params * 4) == 0,
              "checkpoint round trip, kind %s: %s", kind < NK ? mhe_attn_kind_name(kind) : kind == NK ? "encoder" : "encdec", b.err);
        mhe_model_free(&b);
        mhe_model_free(&a);
        free(buf);
    }
}

/* Admin profiling: omega_1 = 1, then each omega_i is the output scale of the
   sublayers before it, recomputed here by hand from the stored activations
   (without dropout, so the branch output is sum - omega * input) */
static void admin_profile(const char *extra) {
    mhe_config c = tiny(extra);
    mhe_model m;
    mhe_rng r;
    test_batch tb;
    int l, k, bad = 0, checked = 0;
    float ratio[2] = { 1.0f, 1.0f };
    char err[MHE_ERR_LEN];
    mhe_rng_seed(&r, 12);
    CHECK(mhe_model_init(&m, &c, 9, NULL) == MHE_OK, "admin init [%s]: %s", extra, m.err);
    make_batch(&tb, &c, 2, 7, 6, 0, &r);
    CHECK(mhe_model_admin_init(&m, &tb.b) == MHE_OK, "admin profiling: %s", m.err);
    for (l = 0; l < m.n_total_layers; l++)
        for (k = 0; k < 3; k++) {
            const mhe_layer *y = &m.layers[l];
            const float *h, *sum;
            int64_t n, i;
            double s1 = 0, q1 = 0, s2 = 0, q2 = 0, w;
            float *rr = &ratio[y->encoder];
            if (!y->omega[k]) continue;
            w = y->omega[k]->data[0];
            if (fabs(w - *rr) > 1e-5 * fabs(*rr) || y->omega[k]->data[c.d_model - 1] != y->omega[k]->data[0]) bad++;
            checked++;
            h = mhe__sub_in(&m, l, k); sum = m.acts.layer[l].sub[k].sum;
            n = (int64_t)2 * (y->encoder ? 6 : 7) * c.d_model;
            for (i = 0; i < n; i++) {
                double a = w * h[i], f = sum[i] - a;
                s1 += a; q1 += a * a; s2 += f; q2 += f * f;
            }
            *rr = (float)sqrt(q1 / n - (s1 / n) * (s1 / n) + q2 / n - (s2 / n) * (s2 / n));
        }
    CHECK(bad == 0 && checked >= 4, "admin omegas follow the running output scale [%s]: %d of %d off", extra, bad, checked);
    mhe_model_free(&m);
    c = tiny("admin=1\n");
    CHECK(mhe_config_validate(&c, err) == MHE_ERR_CONFIG && strstr(err, "post"), "admin on pre-norm refused: %s", err);
}

/* classification metrics against hand-computed values */
static void cls_metrics(void) {
    /* binary: TN 50, FP 10, FN 5, TP 35 -> accuracy 0.85; F1(1) = 70/85, F1(0) = 100/115;
       MCC = (35*50 - 10*5) / sqrt(45*40*55*60) */
    int64_t bin[4] = { 50, 10, 5, 35 }, three[9] = { 3, 1, 0, 0, 2, 2, 1, 0, 1 }, one[4] = { 7, 0, 3, 0 };
    mhe_cls_metrics r;
    mhe_cls_metrics_from_confusion(bin, 2, &r);
    CHECK(r.n == 100 && fabs(r.accuracy - 0.85) < 1e-12 && fabs(r.macro_f1 - (70.0 / 85 + 100.0 / 115) / 2) < 1e-12 &&
          fabs(r.mcc - 1700.0 / sqrt(45.0 * 40 * 55 * 60)) < 1e-12, "binary metrics: acc %.4f F1 %.4f MCC %.4f", r.accuracy, r.macro_f1, r.mcc);
    /* 3 classes (Gorodkin's R_K): c = 6, s = 10, p = (4, 3, 3), t = (4, 4, 2) -> (60 - 34) / sqrt((100 - 34)(100 - 36)) */
    mhe_cls_metrics_from_confusion(three, 3, &r);
    CHECK(fabs(r.accuracy - 0.6) < 1e-12 && fabs(r.mcc - 26.0 / sqrt(66.0 * 64)) < 1e-12 &&
          fabs(r.macro_f1 - (6.0 / 8 + 4.0 / 7 + 2.0 / 5) / 3) < 1e-12, "3-class metrics: acc %.4f F1 %.4f MCC %.4f", r.accuracy, r.macro_f1, r.mcc);
    /* always predicting one class: MCC 0, not NaN */
    mhe_cls_metrics_from_confusion(one, 2, &r);
    CHECK(fabs(r.accuracy - 0.7) < 1e-12 && r.mcc == 0.0, "constant predictor: MCC %.4f", r.mcc);
}

/* bad encoder-decoder configs fail at config time with a message naming the problem */
static void encdec_config_errors(void) {
    static const struct { const char *text, *want; } bad[] = {
        { "arch=encdec\n", "enc_layers" },                                     /* no encoder */
        { "enc_layers=2\n", "encdec" },                                        /* an encoder stack on a decoder */
        { "arch=encdec\nenc_layers=2\nenc_attn=mha,mha,mha\n", "enc_attn" },  /* 3 kinds for 2 layers */
        { "arch=encdec\nenc_layers=1\ncross_attn=mha,gqa,mha\n", "cross_attn" },
        { "arch=encdec\nenc_layers=1\ncross_attn=el-att\nd_head=3\n", "encoder output" },   /* K = V = 12 wide, 3 heads of 3 */
        { "arch=encdec\nenc_layers=1\nenc_attn=gqa\nkv_groups=2\n", "kv_groups" },
        { "arch=encdec\nenc_layers=40\nn_layers=30\n", "exceed" },
        { "arch=encdec\nenc_layers=1\ncross_attn=mhe-pow\n", "mhe-pow" },
    };
    int i;
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        mhe_config c = mhe_config_default();
        char err[MHE_ERR_LEN] = "";
        const char *base = "vocab_size=11\nd_model=12\nn_heads=3\nn_layers=2\nmax_seq_len=8\n";
        mhe_status st = mhe_config_parse(&c, base, strlen(base), err);
        if (st == MHE_OK) st = mhe_config_parse(&c, bad[i].text, strlen(bad[i].text), err);
        if (st == MHE_OK) st = mhe_config_validate(&c, err);
        CHECK(st != MHE_OK && strstr(err, bad[i].want), "config '%s' rejected naming '%s': %s", bad[i].text, bad[i].want, err);
    }
}

static void head_init(void) {
    mhe_config c = tiny("attn=mhe-mul\nhead_init_std=0\n");
    mhe_model m;
    int64_t i, nz = 0;
    OK(mhe_model_init(&m, &c, 1, NULL));
    for (i = 0; i < m.layers[0].attn.eq->size; i++) nz += m.layers[0].attn.eq->data[i] != 0.0f;
    CHECK(nz == 0 && m.layers[0].attn.eq->decay == 0, "head_init_std=0 gives zero head embeddings, without weight decay");
    mhe_model_free(&m);
    c = tiny("attn=mhe-add\nhead_init_std=0.5\n");
    OK(mhe_model_init(&m, &c, 1, NULL));
    {
        double ss = 0;
        for (i = 0; i < m.layers[1].attn.ev->size; i++) ss += m.layers[1].attn.ev->data[i] * m.layers[1].attn.ev->data[i];
        CHECK(fabs(sqrt(ss / m.layers[1].attn.ev->size) - 0.5) < 0.15, "head_init_std sets the scale: %.3f", sqrt(ss / m.layers[1].attn.ev->size));
    }
    mhe_model_free(&m);
}

/* init_residual=scaled (GPT-2) draws the same numbers as plain and divides the
   residual outputs W^O and fc2 by sqrt(2 * n_layers); every other tensor is equal */
static void residual_init(void) {
    mhe_config cp = tiny("init_residual=plain\n"), cs = tiny(NULL), d = mhe_config_default();
    mhe_model p, s;
    int l, i, j, same = 1, scaled = 1;
    CHECK(d.init_residual == MHE_INIT_RESIDUAL_PLAIN && cs.init_residual == MHE_INIT_RESIDUAL_SCALED, "init_residual defaults to plain");
    OK(mhe_model_init(&p, &cp, 5, NULL));
    OK(mhe_model_init(&s, &cs, 5, NULL));
    for (l = 0; l < 2; l++) {
        const mhe_tensor *pt[2] = { p.layers[l].attn.wo, p.layers[l].fc2_w }, *st[2] = { s.layers[l].attn.wo, s.layers[l].fc2_w };
        for (j = 0; j < 2; j++)
            for (i = 0; i < pt[j]->size; i++) scaled &= fabsf(st[j]->data[i] - 0.5f * pt[j]->data[i]) <= 1e-6f * fabsf(pt[j]->data[i]);
        for (i = 0; i < p.layers[l].attn.wq->size; i++) same &= s.layers[l].attn.wq->data[i] == p.layers[l].attn.wq->data[i];
    }
    CHECK(scaled, "init_residual=scaled: W^O and fc2 are the plain draws / sqrt(2*2)");
    CHECK(same, "init_residual leaves W^Q alone");
    mhe_model_free(&p);
    mhe_model_free(&s);
}

static void mlm_masking(void) {
    enum { N = 20000 };
    static int tok[N], in[N], tg[N];
    int i, chosen = 0, masked = 0, kept = 0;
    mhe_rng r;
    mhe_rng_seed(&r, 8);
    for (i = 0; i < N; i++) tok[i] = 1 + i % 50;
    mhe_mlm_mask(in, tg, tok, N, 0.15f, 0, 51, &r);
    for (i = 0; i < N; i++) {
        if (tg[i] < 0) { if (in[i] != tok[i]) kept = -100000; continue; }
        chosen++;
        if (tg[i] != tok[i]) kept = -100000;
        if (in[i] == 0) masked++; else if (in[i] == tok[i]) kept++;
    }
    CHECK(fabs(chosen / (double)N - 0.15) < 0.01, "MLM chooses 15%%: %.3f", chosen / (double)N);
    CHECK(fabs(masked / (double)chosen - 0.8) < 0.03, "80%% become [MASK]: %.3f", masked / (double)chosen);
    CHECK(kept > 0 && fabs(kept / (double)chosen - 0.1) < 0.03, "about 10%% stay (plus random hits): %.3f", kept / (double)chosen);
}

static void sampling(void) {
    float logits[6] = { 0.1f, 2.0f, -1.0f, 1.5f, 0.0f, 1.9f };
    int counts[6] = { 0 }, i, ok = 1;
    mhe_rng r;
    double z = 0, p1;
    mhe_rng_seed(&r, 1);
    CHECK(mhe_sample(logits, 6, 0.0f, 0, &r) == 1, "temperature 0 is greedy");
    for (i = 0; i < 3000; i++) { int t = mhe_sample(logits, 6, 1.0f, 3, &r); counts[t]++; if (t != 1 && t != 3 && t != 5) ok = 0; }
    CHECK(ok, "top-k 3 only samples the three largest logits");
    for (i = 0; i < 6; i++) if (i == 1 || i == 3 || i == 5) z += exp(logits[i]);
    p1 = exp(2.0) / z;
    CHECK(fabs(counts[1] / 3000.0 - p1) < 0.03, "sampling follows softmax: %.3f vs %.3f", counts[1] / 3000.0, p1);
    {   /* unigram entropy of a uniform 4-symbol stream is log 4 */
        int d[8] = { 0, 1, 2, 3, 3, 2, 1, 0 }, big[4] = { 300, 300, 700, 700 };
        CHECK(fabs(mhe_unigram_entropy(d, 8, 4) - log(4.0)) < 1e-12, "unigram entropy");
        CHECK(fabs(mhe_unigram_entropy(big, 4, 1000) - log(2.0)) < 1e-12, "unigram entropy, large vocabulary");
    }
}

/* the attention-parameter formula equals the tensors a built model has
   (the MHE paper's kinds; test_decon checks the kinds of thesis ch. 4) */
static void attn_counts(void) {
    int kind;
    for (kind = 0; kind < NK; kind++) {
        mhe_config c = tiny("n_heads=4\nd_model=16\nkv_groups=2\nn_layers=1\n");
        mhe_model m;
        int64_t built = 0, i;
        c.attn[0] = kind;
        CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "init %s: %s", mhe_attn_kind_name(kind), m.err);
        for (i = 0; i < m.n_tensors; i++) if (strstr(m.params[i].name, ".attn.")) built += m.params[i].size;
        CHECK(built == mhe_attn_param_count(&c, kind, 1, 1), "%s: built %lld vs formula %lld", mhe_attn_kind_name(kind),
              (long long)built, (long long)mhe_attn_param_count(&c, kind, 1, 1));
        mhe_model_free(&m);
    }
    {   /* MHE paper Table 1 (BERT-base: 12 layers, d 768, 12 heads of 64, no biases, with W^O) */
        mhe_config c = mhe_config_default();
        c.d_model = 768; c.n_heads = 12;
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_MHA, 1, 0) == 28311552, "BERT-base MHA 28.31M");
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_SHA, 1, 0) == 8847360, "BERT-base SHA 8.85M");
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_MHE_MUL, 1, 0) == 8875008, "BERT-base MHE 8.88M");
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_MQA, 1, 0) == 15335424, "BERT-base MQA 15.34M");
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_SKV, 1, 0) == 21233664, "BERT-base SKV 21.23M");
        CHECK(12 * mhe_attn_param_count(&c, MHE_ATTN_EL_ATT, 1, 0) == 14155776, "BERT-base EL-ATT 14.16M");
        /* collaborative (Cordonnier et al. sec. 3.4): W~_Q, W~_K and M take (2 D_in + N_h) D~, besides the
           content bias (N_h D_in), W^V and W^O */
        c.collab_dim = 256;
        CHECK(mhe_attn_param_count(&c, MHE_ATTN_COLLAB, 0, 0) == (2 * 768 + 12) * 256 + 12 * 768 + 768 * 768,
              "collab D~ 256: %lld", (long long)mhe_attn_param_count(&c, MHE_ATTN_COLLAB, 0, 0));
    }
    {   /* a built collab layer has the formula's tensors, and only b^V besides W^O's bias */
        mhe_config c = tiny("n_heads=4\nd_model=16\nn_layers=1\nattn=collab\ncollab_dim=6\n");
        mhe_model m;
        int64_t built = 0, i, nb = 0;
        CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "init collab: %s", m.err);
        for (i = 0; i < m.n_tensors; i++)
            if (strstr(m.params[i].name, ".attn.")) { built += m.params[i].size; nb += strstr(m.params[i].name, "bias") && !strstr(m.params[i].name, "content"); }
        CHECK(built == mhe_attn_param_count(&c, MHE_ATTN_COLLAB, 1, 1) && nb == 2, "collab: built %lld vs formula %lld, %lld biases",
              (long long)built, (long long)mhe_attn_param_count(&c, MHE_ATTN_COLLAB, 1, 1), (long long)nb);
        mhe_model_free(&m);
        c = tiny("attn=collab\ncollab_dim=8\ncollab_mix_std=0\n");
        OK(mhe_model_init(&m, &c, 1, NULL));
        {   /* blocks of ones: 3 heads over 8 columns take ceil(8/3) = 3 each, the last one 2 */
            const float *M = m.layers[0].attn.mix->data;
            CHECK(M[0] == 1 && M[2] == 1 && M[3] == 0 && M[8 + 3] == 1 && M[8 + 5] == 1 && M[8 + 6] == 0 && M[16 + 6] == 1 && M[16 + 7] == 1 &&
                  M[16 + 5] == 0 && m.layers[0].attn.mix->decay == 0, "collab_mix_std=0: M is blocks of ones, without decay");
        }
        mhe_model_free(&m);
    }
}

/* the BERT pieces of mhe import: each field's rule names the field, the
   tensors exist exactly when asked for, and a checkpoint round trip keeps
   them (the loader's config and every tensor's shape) */
static void bert_pieces(void) {
    static const struct { const char *cfg, *needle; } bad[] = {
        { "arch=encdec\nenc_layers=1\nemb_norm=1\n", "emb_norm" },
        { "arch=encdec\nenc_layers=1\ntype_vocab=2\n", "type_vocab" },
        { "emb_norm=1\nattn=rndemb-qk\n", "emb_norm" },
        { "type_vocab=2\nattn=fixedseq-qk\n", "type_vocab" },
        { "arch=encoder\ntoken_head=sr\nembedding=hash-emb\nhead_transform=1\n", "head_transform" },
        { "arch=encdec\nenc_layers=1\nhead_bias=1\n", "head_bias" },
        { "arch=encoder\ncls_pool=first\n", "cls_pool" },
        { "type_vocab=65537\n", "type_vocab" },
        { "emb_norm=2\n", "emb_norm" },
    };
    const char *all = "arch=encoder\nn_classes=3\ncls_pool=first\nemb_norm=1\ntype_vocab=2\nhead_transform=1\nhead_bias=1\n";
    char err[MHE_ERR_LEN];
    size_t i, size = 0, w = 0;
    mhe_model a, b;
    mhe_config c;
    void *buf;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mhe_config x = mhe_config_default();
        mhe_status st = mhe_config_parse(&x, bad[i].cfg, strlen(bad[i].cfg), err);
        if (st == MHE_OK) st = mhe_config_validate(&x, err);
        CHECK(st == MHE_ERR_CONFIG && strstr(err, bad[i].needle), "config [%s] refused naming %s: %s", bad[i].cfg, bad[i].needle, err);
    }
    c = tiny(all);
    OK(mhe_model_init(&a, &c, 6, NULL));
    CHECK(a.type_emb && a.type_emb->shape[0] == 2 && a.emb_norm_w && a.emb_norm_b && a.head_w && a.head_b && a.head_norm_w &&
          a.head_norm_b && a.lm_b && a.lm_b->size == c.vocab_size && a.pooler_w && a.pooler_b, "every BERT tensor laid out");
    OK(mhe_checkpoint_size(&a, NULL, &size));
    buf = malloc(size);
    OK(mhe_checkpoint_write_mem(&a, NULL, buf, size, &w));
    CHECK(mhe_model_load_mem(&b, buf, size, NULL) == MHE_OK && memcmp(&a.cfg, &b.cfg, sizeof a.cfg) == 0 &&
          a.n_params == b.n_params && memcmp(a.param_data, b.param_data, (size_t)a.n_params * 4) == 0,
          "checkpoint round trip with the BERT pieces: %s", b.err);
    mhe_model_free(&b);
    mhe_model_free(&a);
    free(buf);
    c = tiny(NULL);
    OK(mhe_model_init(&a, &c, 6, NULL));
    CHECK(!a.type_emb && !a.emb_norm_w && !a.head_w && !a.lm_b && !a.pooler_w, "no BERT tensor by default");
    mhe_model_free(&a);
}

/* token types (segments): the gradient of every row the batch uses, types
   all 0 equal no types, a type outside the table or types for a model
   without one refused */
static void token_types(void) {
    mhe_config c = tiny("arch=encoder\ntype_vocab=3\nemb_norm=1\nnorm_position=post\nhead_transform=1\n");
    mhe_model m;
    mhe_rng r;
    test_batch tb;
    int types[2 * 7], zeros[2 * 7], i, bad, checked;
    float loss, l0, l1;
    double worst;
    mhe_rng_seed(&r, 12);
    OK(mhe_model_init(&m, &c, 8, NULL));
    make_batch(&tb, &c, 2, 7, 0, 0, &r);
    for (i = 0; i < 14; i++) { types[i] = i % 7 < 3 ? 0 : 1 + (i & 1); zeros[i] = 0; }
    tb.b.types = types;
    mhe_model_zero_grad(&m);
    OK(mhe_model_forward_batch(&m, &tb.b, &loss));
    OK(mhe_model_backward(&m));
    bad = test_model_gradcheck(&m, test_loss_batch, &tb.b, &r, 5, 5, NULL, &worst, &checked);
    CHECK(bad == 0, "gradient check with token types 0, 1, 2: %d tensors off, worst %.3g", bad, worst);
    {   /* rows 1 and 2 got gradient: the types reached the table */
        double g1 = 0, g2 = 0;
        for (i = 0; i < c.d_model; i++) { g1 += fabs(m.type_emb->grad[c.d_model + i]); g2 += fabs(m.type_emb->grad[2 * c.d_model + i]); }
        CHECK(g1 > 0 && g2 > 0, "type rows 1 and 2 have gradients (%g, %g)", g1, g2);
    }
    tb.b.types = zeros; OK(mhe_model_forward_batch(&m, &tb.b, &l0));
    tb.b.types = NULL; OK(mhe_model_forward_batch(&m, &tb.b, &l1));
    CHECK(l0 == l1 && l0 != loss, "types all 0 equal no types (%g, %g), and differ from mixed types (%g)", l0, l1, loss);
    types[5] = 3; tb.b.types = types;
    CHECK(mhe_model_forward_batch(&m, &tb.b, &l0) == MHE_ERR_DATA && strstr(m.err, "type_vocab"), "type 3 of 3 refused: %s", m.err);
    mhe_model_free(&m);
    c = tiny("arch=encoder\n");
    OK(mhe_model_init(&m, &c, 8, NULL));
    types[5] = 0;
    CHECK(mhe_model_forward_batch(&m, &tb.b, &l0) == MHE_ERR_ARG && strstr(m.err, "type_vocab=0"), "types without a table refused: %s", m.err);
    mhe_model_free(&m);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *variants[] = {
        "",
        "norm=rmsnorm\nactivation=relu\n",
        "activation=silu\nbias=0\ntie_embeddings=0\n",
        "norm_position=post\n",
        "norm_position=post\nnorm=rmsnorm\ntie_embeddings=0\n",
        "d_head=5\nfused_attention=0\n",
        "n_layers=1\nd_ff=7\n",
        "attn=sha\n",
        "attn=mqa\n",
        "attn=gqa\nn_heads=4\nd_model=16\nkv_groups=2\n",
        "attn=skv\n",
        "attn=el-att\n",
        "attn=el-att\nnorm_position=post\n",
        "attn=mhe-add\n",
        "attn=mhe-mul\n",
        "attn=mhe-mul\nnorm_position=post\nbias=0\n",
        "attn=mhe-add,mhe-mul\n",
        "attn=mha,gqa\nn_heads=4\nd_model=16\nkv_groups=2\nattn_dropout=0.2\ndropout=0.1\n",
        "attn=mhe-mul,mhe-add\nattn_dropout=0.2\n",
        "attn=sha,skv\nattn_dropout=0.3\n",
        "attn=mhe-add\nn_heads=65\nd_head=1\n",   /* past the shared-score limit: the tile-by-tile path */
        "arch=encoder\n",
        "arch=encoder\nattn=mhe-mul,gqa\nn_heads=4\nd_model=16\nkv_groups=2\n",
        "arch=encoder\nattn=mhe-add,el-att\nnorm_position=post\nattn_dropout=0.2\n",
        /* encoder-decoder: every kind as self- and as cross-attention, pre and post norm */
        "arch=encdec\nenc_layers=1\n",
        "arch=encdec\nenc_layers=2\nn_layers=1\nnorm_position=post\nnorm=rmsnorm\ntie_embeddings=0\n",
        "arch=encdec\nenc_layers=2\nenc_attn=mhe-mul,mhe-add\ncross_attn=mhe-add,mhe-mul\nattn=sha,el-att\n",
        "arch=encdec\nenc_layers=2\nenc_attn=el-att,skv\ncross_attn=el-att,skv\nattn=mhe-mul,mqa\nnorm_position=post\n",
        "arch=encdec\nenc_layers=1\nenc_attn=gqa\ncross_attn=gqa,mhe-mul\nattn=mhe-add,mha\nn_heads=4\nd_model=16\nkv_groups=2\nattn_dropout=0.2\ndropout=0.1\n",
        "arch=encdec\nenc_layers=1\nenc_attn=sha\ncross_attn=sha,mqa\nattn=skv,gqa\nkv_groups=3\nbias=0\nfused_attention=0\n",
        "arch=encdec\nenc_layers=1\ncross_attn=mhe-add\nattn=mhe-add\nn_heads=65\nd_head=1\n",
        /* collaborative attention: exact width, compressed, blocks init, dropout, the reference fallback */
        "attn=collab\n",
        "attn=collab\ncollab_dim=5\ncollab_mix_std=0\nbias=0\n",
        "attn=collab,mha\ncollab_dim=20\nattn_dropout=0.2\ndropout=0.1\nnorm_position=post\n",
        "attn=collab\nn_heads=65\nd_head=1\ncollab_dim=130\n",   /* 65 heads of width 130 do not stack */
        "arch=encoder\nattn=collab,mhe-mul\ncollab_dim=7\n",
        "arch=encdec\nenc_layers=1\nenc_attn=collab\ncross_attn=collab,mha\nattn=mha,collab\ncollab_dim=7\nnorm_position=post\n",
        /* Admin residual scales (post-norm) */
        "norm_position=post\nadmin=1\n",
        "arch=encdec\nenc_layers=2\nnorm_position=post\nadmin=1\nnorm=rmsnorm\ncross_attn=mhe-mul\ndropout=0.1\n",
        /* BERT's pieces (mhe import): embedding norm, token types, the MLM head's transform and bias */
        "emb_norm=1\ntype_vocab=2\nhead_transform=1\nhead_bias=1\n",
        "arch=encoder\nnorm_position=post\nemb_norm=1\ntype_vocab=3\nhead_transform=1\nhead_bias=1\nactivation=gelu-erf\ndropout=0.1\n",
        "norm=rmsnorm\nemb_norm=1\nhead_transform=1\nbias=0\ntie_embeddings=0\nattn=mhe-mul,staticemb-qk\n",
    };
    const char *padded[] = {
        "",
        "arch=encoder\n",
        "arch=encoder\nn_classes=3\nattn=mhe-mul,mhe-add\n",
        "arch=encoder\nn_classes=3\nattn=gqa,el-att\nn_heads=4\nd_model=16\nkv_groups=2\nnorm_position=post\n",
        "arch=encoder\nattn=sha,skv\nattn_dropout=0.2\nd_head=5\n",
        "arch=encdec\nenc_layers=2\nenc_attn=mhe-add,mha\ncross_attn=mhe-mul,el-att\nattn=mqa,mhe-add\n",
        "arch=encdec\nenc_layers=1\ncross_attn=mhe-add\nattn=mhe-add\nn_heads=65\nd_head=1\nnorm_position=post\n",
        "arch=encoder\nn_classes=3\nattn=collab\ncollab_dim=8\n",
        "arch=encdec\nenc_layers=1\nenc_attn=collab\ncross_attn=collab\nattn=collab\ncollab_dim=4\n",
        "arch=encoder\nn_classes=3\ncls_pool=first\nemb_norm=1\ntype_vocab=2\nnorm_position=post\nhead_transform=1\nhead_bias=1\n",
    };
    int i;
    for (i = 0; i < (int)(sizeof variants / sizeof variants[0]); i++) {
        model_gradcheck(variants[i], 0);
        fused_equals_reference(variants[i], 0);
        decode_equals_forward(variants[i]);
    }
    /* padded batches: gradients, both cores, and padding invisible to the real tokens */
    for (i = 0; i < (int)(sizeof padded / sizeof padded[0]); i++) {
        model_gradcheck(padded[i], 1);
        fused_equals_reference(padded[i], 1);
        padding_equals_truncation(padded[i]);
    }
    reparam_collab("");
    reparam_collab("norm_position=post\nattn=mha,mhe-mul\n");
    reparam_collab("arch=encdec\nenc_layers=1\nbias=0\n");
    reparam_collab("arch=encoder\nattn=taylor@odd\nn_layers=2\n");   /* the layout's mha layer */
    reparam_errors();
    checkpoint_roundtrip();
    sampling();
    attn_counts();
    mlm_masking();
    head_init();
    residual_init();
    checkpoint_every_kind();
    encdec_config_errors();
    cls_metrics();
    admin_profile("norm_position=post\nadmin=1\nn_layers=4\n");
    admin_profile("arch=encdec\nenc_layers=2\nnorm_position=post\nadmin=1\n");
    cls_gradcheck("arch=encoder\nn_classes=3\n");
    cls_gradcheck("arch=encoder\nn_classes=3\nattn=mhe-mul\nnorm_position=post\nbias=0\n");
    cls_gradcheck("arch=encoder\nn_classes=3\ncls_pool=first\nemb_norm=1\ntype_vocab=2\nnorm_position=post\nactivation=gelu-erf\n");
    cls_gradcheck("arch=encoder\nn_classes=3\ncls_pool=first\nbias=0\nemb_norm=1\nnorm=rmsnorm\n");
    bert_pieces();
    token_types();
    return TEST_END();
}
