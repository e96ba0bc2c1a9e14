/* KV-cache decoding equals the parallel forward, token by token, for every
   attention kind that decodes, as self-attention of a decoder and of an
   encoder-decoder (with every cross kind), pre-norm and post-norm, and
   post-norm with Admin's residual scales profiled (omega != 1), with dropout
   configured (decoding and the reference forward run without it). Decoding
   and training share the sublayer code; this is the test that would see a
   residual, norm or omega applied differently on one side. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

#define T_LEN 7
#define S_LEN 5

static int make_config(mhe_config *c, const char *text) {
    char err[MHE_ERR_LEN];
    const char *base = "vocab_size=13\nd_model=16\nn_heads=2\nn_layers=3\nmax_seq_len=8\ninit_std=0.3\n"
                       "dropout=0.1\nattn_dropout=0.1\nfixed_seq=ids:1 2 3 4 5 6 7 8\n";
    *c = mhe_config_default();
    if (mhe_config_parse(c, base, strlen(base), err) != MHE_OK || mhe_config_parse(c, text, strlen(text), err) != MHE_OK ||
        mhe_config_validate(c, err) != MHE_OK) {
        CHECK(0, "test config [%s]: %s", text, err);
        return 0;
    }
    return 1;
}

/* mhe_prefill of the same tokens, as a prompt of 3 in chunks of 2 and 1,
   then 4 after them in one chunk: the logits after each prompt equal the
   forward's rows 2 and 6, and the cache (K/V rows, states) equals that of
   the decode steps in `steps`, within float rounding */
static void prefill_equals_steps(mhe_model *m, const mhe_kv_cache *steps, const int *tok, const int *src, const char *text) {
    mhe_kv_cache kv;
    int V = m->cfg.vocab_size, l, bad[2] = { 1, 99 };
    double e0, e1, worst = 0;
    if (mhe_kv_cache_init(&kv, m, T_LEN, NULL) != MHE_OK) { CHECK(0, "prefill cache [%s]", text); return; }
    CHECK(kv.prefill_rows == T_LEN, "a heap cache prefills up to max_len tokens at once [%s]: %d", text, kv.prefill_rows);
    if (m->cfg.arch == MHE_ARCH_ENCDEC) CHECK(mhe_kv_cache_encode(m, &kv, src, S_LEN) == MHE_OK, "encode [%s]: %s", text, m->err);
    kv.prefill_rows = 2;
    CHECK(mhe_prefill(m, &kv, tok, 3) == MHE_OK && kv.len == 3, "prefill 3 [%s]: %s", text, m->err);
    e0 = test_max_rel_err(kv.logits, m->acts.logits + (size_t)2 * V, V, 1.0);
    kv.prefill_rows = T_LEN;
    CHECK(mhe_prefill(m, &kv, tok + 3, T_LEN - 3) == MHE_OK && kv.len == T_LEN, "prefill 4 more [%s]: %s", text, m->err);
    e1 = test_max_rel_err(kv.logits, m->acts.logits + (size_t)(T_LEN - 1) * V, V, 1.0);
    CHECK(e0 < 2e-5 && e1 < 2e-5, "prefill's logits equal the forward's [%s]: %.3g, %.3g", text, e0, e1);
    for (l = 0; l < m->n_total_layers; l++) {
        if (!steps->k[l]) continue;
        worst = fmax(worst, test_max_rel_err(kv.k[l], steps->k[l], (int)((size_t)T_LEN * kv.k_width[l]), 1.0));
        if (kv.v_width[l]) worst = fmax(worst, test_max_rel_err(kv.v[l], steps->v[l], (int)((size_t)T_LEN * kv.v_width[l]), 1.0));
        if (kv.state_floats[l]) worst = fmax(worst, test_max_rel_err(kv.state[l], steps->state[l], (int)kv.state_floats[l], 1.0));
    }
    CHECK(worst < 2e-5, "prefill's cache equals the decode steps' [%s]: %.3g", text, worst);
    /* refused before anything changes: a bad token inside the prompt, a prompt past the room, none */
    kv.len = 2;
    CHECK(mhe_prefill(m, &kv, bad, 2) == MHE_ERR_DATA && strstr(m->err, "prompt position 1") && kv.len == 2,
          "a bad prompt token is refused [%s]: %s", text, m->err);
    CHECK(mhe_prefill(m, &kv, tok, T_LEN - 1) == MHE_ERR_ARG && strstr(m->err, "do not fit") && kv.len == 2,
          "a prompt past the cache is refused [%s]: %s", text, m->err);
    CHECK(mhe_prefill(m, &kv, tok, 0) == MHE_ERR_ARG && kv.len == 2, "an empty prompt is refused [%s]", text);
    mhe_kv_cache_free(&kv);
}

/* the logits of mhe_decode_step, token by token, against the forward's */
static void decode_equals_forward(const char *text) {
    mhe_config c;
    mhe_model m;
    mhe_kv_cache kv;
    mhe_batch b;
    mhe_rng r;
    int tok[T_LEN], src[S_LEN], t;
    double worst = 0, omega_off = 0;
    if (!make_config(&c, text)) return;
    mhe_rng_seed(&r, 21);
    for (t = 0; t < T_LEN; t++) tok[t] = (int)mhe_rng_below(&r, (uint32_t)c.vocab_size);
    for (t = 0; t < S_LEN; t++) src[t] = (int)mhe_rng_below(&r, (uint32_t)c.vocab_size);
    memset(&b, 0, sizeof b);
    b.B = 1; b.T = T_LEN; b.tokens = tok;
    if (c.arch == MHE_ARCH_ENCDEC) { b.Ts = S_LEN; b.src = src; }
    if (mhe_model_init(&m, &c, 5, NULL) != MHE_OK) { CHECK(0, "init [%s]: %s", text, m.err); return; }
    if (c.admin) {
        int l, k;
        CHECK(mhe_model_admin_init(&m, &b) == MHE_OK, "admin profiling [%s]: %s", text, m.err);
        for (l = 0; l < m.n_total_layers; l++)
            for (k = 0; k < 3; k++)
                if (m.layers[l].omega[k]) omega_off = fmax(omega_off, fabs(m.layers[l].omega[k]->data[0] - 1.0));
        CHECK(omega_off > 0.05, "Admin profiling moved omega away from 1 [%s]: %.3g", text, omega_off);
    }
    CHECK(mhe_kv_cache_init(&kv, &m, T_LEN, NULL) == MHE_OK, "kv cache init [%s]", text);
    if (c.arch == MHE_ARCH_ENCDEC) CHECK(mhe_kv_cache_encode(&m, &kv, src, S_LEN) == MHE_OK, "encode [%s]: %s", text, m.err);
    CHECK(mhe_model_forward_batch(&m, &b, NULL) == MHE_OK, "forward [%s]: %s", text, m.err);
    worst = test_decode_vs_forward(&m, &kv, tok, T_LEN);
    CHECK(worst >= 0, "decode [%s]: %s", text, m.err);
    CHECK(worst >= 0 && worst < 2e-5, "decoding equals the forward [%s]: %.3g", text, worst);
    prefill_equals_steps(&m, &kv, tok, src, text);
    mhe_kv_cache_free(&kv);
    mhe_model_free(&m);
}

/* The kind table states facts the code must honour: the tensors a layer of
   each kind owns (bias=0: the names outside brackets), and the causal and
   cross-attention rules, which validation enforces with the table's reason. */
static void kind_table(void) {
    int kind;
    for (kind = 0; kind < MHE_ATTN_KIND_COUNT; kind++) {
        const char *listed = mhe_attn_kind_tensors(kind), *p;
        char text[256], want[512] = " ", have[512] = " ", err[MHE_ERR_LEN];
        mhe_config c;
        mhe_model m;
        int i, depth = 0, causal = kind != MHE_ATTN_FNET && kind != MHE_ATTN_LINEAR;
        snprintf(text, sizeof text, "bias=0\n%sattn=%s\n", causal ? "" : "arch=encoder\n", mhe_attn_kind_name(kind));
        if (!make_config(&c, text)) continue;
        for (p = listed; *p; p++) {   /* the words outside [...] */
            size_t n = strlen(want);
            if (*p == '[') depth++;
            else if (*p == ']') depth--;
            else if (!depth && *p != '(' && strncmp(p, "(none)", 6) != 0 && n + 2 < sizeof want) { want[n] = *p; want[n + 1] = 0; }
            if (!strncmp(p, "(none)", 6)) p += 5;
        }
        while (strstr(want, "  ")) memmove(strstr(want, "  "), strstr(want, "  ") + 1, strlen(strstr(want, "  ")));
        if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { CHECK(0, "init %s: %s", text, m.err); continue; }
        for (i = 0; i < m.n_tensors; i++) {
            const char *nm = m.params[i].name;
            if (!strncmp(nm, "layers.0.attn.", 14)) {
                char base[64];
                snprintf(base, sizeof base, "%s", nm + 14);
                if (strstr(base, ".weight")) *strstr(base, ".weight") = 0;
                if (strlen(have) + strlen(base) + 2 < sizeof have) { strcat(have, base); strcat(have, " "); }
            }
        }
        if (strlen(want) > 1 && want[strlen(want) - 1] != ' ') strcat(want, " ");
        CHECK(strcmp(want, have) == 0, "kind table: %s owns [%s], the table says [%s]", mhe_attn_kind_name(kind), have, want);
        mhe_model_free(&m);
        c = mhe_config_default();
        snprintf(text, sizeof text, "arch=encdec\nenc_layers=1\ncross_attn=%s\n", mhe_attn_kind_name(kind));
        if (mhe_config_parse(&c, text, strlen(text), err) == MHE_OK) {
            int cross_ok = !(kind == MHE_ATTN_MLP || kind == MHE_ATTN_NONAPPROX || kind == MHE_ATTN_RNDEMB_QK ||
                             kind == MHE_ATTN_FIXEDSEQ_QK || kind == MHE_ATTN_FNET || kind == MHE_ATTN_LINEAR);
            mhe_status st = mhe_config_validate(&c, err);
            CHECK((st == MHE_OK) == cross_ok && (cross_ok || strstr(err, "cross-attention of layer 0 is")),
                  "cross rule of %s: %s", mhe_attn_kind_name(kind), st == MHE_OK ? "accepted" : err);
        }
        c = mhe_config_default();
        snprintf(text, sizeof text, "attn=%s\n", mhe_attn_kind_name(kind));
        if (mhe_config_parse(&c, text, strlen(text), err) == MHE_OK)
            CHECK((mhe_config_validate(&c, err) == MHE_OK) == causal, "causal rule of %s", mhe_attn_kind_name(kind));
    }
}

/* the kinds whose name in `field` of a default config + `extra` validates, in the enum's order */
static int kinds_accepted(const char *extra, const char *field, const char **out) {
    int kind, n = 0;
    char text[160], err[MHE_ERR_LEN];
    for (kind = 0; kind < MHE_ATTN_KIND_COUNT; kind++) {
        mhe_config c = mhe_config_default();
        snprintf(text, sizeof text, "%s%s=%s\n", extra, field, mhe_attn_kind_name(kind));
        if (mhe_config_parse(&c, text, strlen(text), err) == MHE_OK && mhe_config_validate(&c, err) == MHE_OK)
            out[n++] = mhe_attn_kind_name(kind);
    }
    return n;
}

int main(void) {
    /* the kinds are taken from the library's own rules (kind_table checks them):
       a causal decoder's; an encoder-decoder's decoder, cross-attention and encoder */
    const char *self_kinds[MHE_ATTN_KIND_COUNT], *cross_kinds[MHE_ATTN_KIND_COUNT];
    const char *encdec_kinds[MHE_ATTN_KIND_COUNT], *enc_kinds[MHE_ATTN_KIND_COUNT];
    int nself = kinds_accepted("", "attn", self_kinds);
    int ncross = kinds_accepted("arch=encdec\nenc_layers=1\n", "cross_attn", cross_kinds);
    int nencdec = kinds_accepted("arch=encdec\nenc_layers=1\n", "attn", encdec_kinds);
    int nenc = kinds_accepted("arch=encdec\nenc_layers=1\n", "enc_attn", enc_kinds);
    static const char *norms[] = { "", "norm_position=post\n", "norm_position=post\nadmin=1\n" };
    int i, j, v;
    char text[512];
    setvbuf(stdout, NULL, _IONBF, 0);
    kind_table();
    CHECK(nself == 15 && ncross == 11 && nencdec == 13 && nenc == 15,
          "kinds by role: %d causal, %d cross, %d encoder-decoder self, %d encoder", nself, ncross, nencdec, nenc);
    for (v = 0; v < 3; v++) {
        for (i = 0; i < nself; i++) {   /* a decoder: the kind between two mha layers (hybrids too), then alone */
            snprintf(text, sizeof text, "%sattn=mha,%s,mha\nkv_groups=2\ncollab_dim=6\n", norms[v], self_kinds[i]);
            decode_equals_forward(text);
            snprintf(text, sizeof text, "%sattn=%s\nkv_groups=2\n", norms[v], self_kinds[i]);
            decode_equals_forward(text);
        }
        for (i = 0; i < nencdec; i++) {   /* an encoder-decoder: every self kind, every cross kind */
            for (j = 0; j < ncross; j += 4) {
                const char *cross = cross_kinds[(i + j) % ncross], *enc = enc_kinds[(i + j) % nenc];
                snprintf(text, sizeof text, "%sarch=encdec\nenc_layers=2\nn_layers=2\nenc_attn=%s,mha\nattn=%s,mha\n"
                         "cross_attn=%s,mhe-mul\nkv_groups=2\ncollab_dim=6\n", norms[v], enc, encdec_kinds[i], cross);
                decode_equals_forward(text);
            }
        }
    }
    return TEST_END();
}
