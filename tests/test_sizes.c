/* Size arithmetic on 32- and 64-bit hosts (make test-m32 runs this too):
   the activation layout counts its bytes in double as well, so a batch whose
   activations cannot be addressed is MHE_ERR_OVERFLOW instead of a wrapped,
   too small block; and every buffer the layout hands out lies inside the
   block it measured. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

/* every float buffer of one layer's activations inside [lo, hi) */
static int inside(const void *p, const unsigned char *lo, const unsigned char *hi) {
    return !p || ((const unsigned char *)p >= lo && (const unsigned char *)p < hi);
}

int main(void) {
    const char *attn[] = { "mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul", "mhe-mul,mha,gqa" };
    int a, fused, arch, bt, bad = 0, n = 0;
    static const int shapes[][3] = { { 1, 1, 1 }, { 3, 7, 5 }, { 16, 64, 32 }, { 2, 128, 128 } };
    for (a = 0; a < 9; a++)
        for (fused = 0; fused < 2; fused++)
            for (arch = 0; arch < 3; arch++) {
                mhe_config c = mhe_config_default();
                mhe_model m;
                c.vocab_size = 300; c.d_model = 24; c.n_heads = 3; c.n_layers = 3; c.max_seq_len = 128; c.kv_groups = 3;
                c.d_head = arch ? 5 : 0; c.d_ff = arch ? 17 : 0; c.fused_attention = fused; c.arch = arch;
                if (arch == MHE_ARCH_ENCODER) c.n_classes = 4;
                if (arch == MHE_ARCH_ENCDEC) { c.enc_layers = 2; OK(mhe_config_set(&c, "cross_attn", "mhe-mul,gqa,mha", NULL)); }
                OK(mhe_config_set(&c, "attn", attn[a], NULL));
                if (a == 8) c.attn[3] = -1;
                if (arch && a == 5) c.d_head = 8;   /* el-att needs n * d_head = d_model */
                if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { CHECK(0, "init %s: %s", attn[a], m.err); continue; }
                for (bt = 0; bt < 4; bt++) {
                    int B = shapes[bt][0], T = shapes[bt][1], Ts = shapes[bt][2], l, k;
                    const unsigned char *lo, *hi;
                    if (mhe_model_reserve(&m, B, T, Ts) != MHE_OK) { bad++; continue; }
                    lo = (const unsigned char *)m.acts_block; hi = lo + m.acts.bytes + MHE_ARENA_ALIGN;
                    for (l = 0; l < m.n_total_layers; l++) {
                        const mhe_layer_acts *la = &m.acts.layer[l];
                        for (k = 0; k < 3; k++) if (!inside(la->sub[k].nrm, lo, hi) || !inside(la->sub[k].sum, lo, hi)) bad++;
                        if (!inside(la->attn.stats, lo, hi) || !inside(la->cross.kv, lo, hi) || !inside(la->act, lo, hi)) bad++;
                    }
                    if (!inside(m.acts.d_logits, lo, hi) || !inside(m.acts.tokens, lo, hi) || !inside(m.acts.lengths, lo, hi)) bad++;
                    n++;
                }
                mhe_model_free(&m);
            }
    CHECK(bad == 0 && n > 200, "every activation buffer lies in its measured block (%d of %d shapes off)", bad, n);
    {
        /* vocab 65536 x 16 x 1024 tokens of logits: 4 GB, twice (logits and their gradient) */
        mhe_config c = mhe_config_default();
        mhe_model m;
        c.vocab_size = 65536; c.d_model = 8; c.n_heads = 1; c.n_layers = 1; c.max_seq_len = 1024; c.d_ff = 8;
        CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "large-vocabulary model: %s", m.err);
        if (sizeof(size_t) < 8) {
            CHECK(mhe_model_reserve(&m, 16, 1024, 0) == MHE_ERR_OVERFLOW && strstr(m.err, "addresses"),
                  "32-bit: 16 x 1024 tokens of a 65536 vocabulary is MHE_ERR_OVERFLOW: %s", m.err);
            printf("  32-bit host: %s\n", m.err);
        } else {
            size_t need = mhe__acts_layout(&m, 16, 1024, 0, NULL);
            CHECK(need != SIZE_MAX && (double)need >= 2.0 * 16 * 1024 * 65536 * 4, "64-bit: the same batch measures %.3g bytes", (double)need);
        }
        mhe_model_free(&m);
    }
    return TEST_END();
}
