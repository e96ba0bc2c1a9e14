/* Size arithmetic on 32- and 64-bit hosts (make test-m32 runs this too):
   the activation bound that mhe_model_reserve checks first covers every
   byte the layout asks for, and a batch whose activations cannot be
   addressed is MHE_ERR_OVERFLOW instead of a wrapped, too small block. */
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"

int main(void) {
    const char *attn[] = { "mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul", "mhe-mul,mha,gqa" };
    int a, fused, enc, bt, bad = 0, n = 0;
    static const int shapes[][2] = { { 1, 1 }, { 3, 7 }, { 16, 64 }, { 2, 128 } };
    double worst = 0;
    for (a = 0; a < 9; a++)
        for (fused = 0; fused < 2; fused++)
            for (enc = 0; enc < 2; enc++) {
                mhe_config c = mhe_config_default();
                mhe_model m;
                c.vocab_size = 300; c.d_model = 24; c.n_heads = 3; c.n_layers = 3; c.max_seq_len = 128; c.kv_groups = 3;
                c.d_head = enc ? 5 : 0; c.d_ff = enc ? 17 : 0; c.fused_attention = fused;
                if (enc) { c.arch = MHE_ARCH_ENCODER; c.n_classes = 4; }
                mhe_config_set(&c, "attn", attn[a], NULL);
                if (a == 8) c.attn[3] = -1;
                if (enc && a == 5) c.d_head = 8;   /* el-att needs n * d_head = d_model */
                if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { CHECK(0, "init %s: %s", attn[a], m.err); continue; }
                for (bt = 0; bt < 4; bt++) {
                    int B = shapes[bt][0], T = shapes[bt][1];
                    double bound = mhe__acts_bound(&m, B, T), need = (double)mhe__acts_layout(&m, B, T, NULL) + MHE_ARENA_ALIGN;
                    if (bound < need) { bad++; printf("  %s fused %d encoder %d B %d T %d: bound %.0f < layout %.0f\n", attn[a], fused, enc, B, T, bound, need); }
                    if (need / bound > worst) worst = need / bound;
                    n++;
                }
                mhe_model_free(&m);
            }
    printf("  %d layouts: the bound covers each (tightest: layout = %.2f of the bound)\n", n, worst);
    CHECK(bad == 0, "the activation bound covers the layout (%d of %d below)", bad, n);
    {
        /* vocab 65536 x 16 x 1024 tokens of logits: 4 GB, twice (logits and their gradient) */
        mhe_config c = mhe_config_default();
        mhe_model m;
        c.vocab_size = 65536; c.d_model = 8; c.n_heads = 1; c.n_layers = 1; c.max_seq_len = 1024; c.d_ff = 8;
        CHECK(mhe_model_init(&m, &c, 1, NULL) == MHE_OK, "large-vocabulary model: %s", m.err);
        if (sizeof(size_t) < 8) {
            CHECK(mhe_model_reserve(&m, 16, 1024) == MHE_ERR_OVERFLOW && strstr(m.err, "addresses"),
                  "32-bit: 16 x 1024 tokens of a 65536 vocabulary is MHE_ERR_OVERFLOW: %s", m.err);
            printf("  32-bit host: %s\n", m.err);
        } else CHECK(mhe__acts_bound(&m, 16, 1024) < (double)SIZE_MAX / 2, "64-bit: the same batch is addressable");
        mhe_model_free(&m);
    }
    return TEST_END();
}
