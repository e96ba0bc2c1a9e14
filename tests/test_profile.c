/* The per-operation profile (MHE_PROFILE, tools/bench_train --profile): every
   timed site is reached once per use, in its phase (forward, backward,
   update), so the call counts of a step follow from the model's shape; the
   times are non-negative and add up to no more than the step's wall time;
   reset clears them; and the profiled step trains exactly as an unprofiled
   one (same loss over several steps as the same run with profiling reset
   in between, which only clears the tables). */
#define _POSIX_C_SOURCE 200809L
#define MHE_PROFILE
#define MHE_IMPLEMENTATION
#include "../mhe.h"
#include "test.h"
#include <stdlib.h>

static double wall_s(void) { return mhe__prof_now(); }   /* the profile's own clock */

/* one trainer step of a small decoder of kind attn, profiled from a reset */
static void step_counts(const char *attn, const char *norm_position, int cross) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    mhe_model m;
    mhe_trainer t;
    mhe_profile p;
    char err[MHE_ERR_LEN];
    int data[4096], i, op, ph, L = 3, E = cross ? 2 : 0;
    int64_t want_norm_fwd, sub = cross ? 3 : 2;
    double t0, wall, sum = 0;
    mhe_rng r;
    c.d_model = 32; c.n_heads = 4; c.n_layers = L; c.max_seq_len = 16;
    if (cross) { c.arch = MHE_ARCH_ENCDEC; c.enc_layers = E; }
    CHECK(mhe_config_set(&c, "attn", attn, err) == MHE_OK, "%s: %s", attn, err);
    CHECK(mhe_config_set(&c, "norm_position", norm_position, err) == MHE_OK, "%s", err);
    tc.batch = 2; tc.seq_len = 16; tc.steps = 10;
    if (cross) tc.src_len = 8;
    mhe_rng_seed(&r, 3);
    for (i = 0; i < 4096; i++) data[i] = (int)mhe_rng_below(&r, 256);
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { CHECK(0, "%s", m.err); return; }
    if (mhe_trainer_init(&t, &m, &tc) != MHE_OK) { CHECK(0, "%s", t.err); mhe_model_free(&m); return; }
    CHECK(mhe_trainer_step(&t, data, 4096) == MHE_OK, "%s", t.err);   /* warm: buffers reserved */
    mhe_profile_reset();
    t0 = wall_s();
    CHECK(mhe_trainer_step(&t, data, 4096) == MHE_OK, "%s", t.err);
    wall = (wall_s() - t0) * 1e3;
    mhe_profile_read(&p);
    for (ph = 0; ph < MHE_PHASE_COUNT; ph++)
        for (op = 0; op < MHE_OP_COUNT; op++) {
            CHECK(p.ms[ph][op] >= 0 && (p.calls[ph][op] > 0 || p.ms[ph][op] == 0),
                  "%s %s phase %d: %g ms in %lld calls", attn, mhe_profile_op_name(op), ph, p.ms[ph][op],
                  (long long)p.calls[ph][op]);
            sum += p.ms[ph][op];
        }
    CHECK(sum <= wall * 1.001 + 0.01, "%s: the operations add up to %.3f ms, more than the step's %.3f ms", attn, sum, wall);
    /* per layer: Q/K/V, the core and W^O once per attention sublayer, the MLP's three once */
    CHECK(p.calls[0][MHE_OP_QKV] == L + E + (cross ? L : 0) && p.calls[1][MHE_OP_QKV] == p.calls[0][MHE_OP_QKV],
          "%s: qkv %lld / %lld calls", attn, (long long)p.calls[0][MHE_OP_QKV], (long long)p.calls[1][MHE_OP_QKV]);
    CHECK(p.calls[0][MHE_OP_ATTN] == p.calls[0][MHE_OP_QKV] && p.calls[1][MHE_OP_ATTN] == p.calls[0][MHE_OP_QKV]
          && p.calls[0][MHE_OP_WO] == p.calls[0][MHE_OP_QKV] && p.calls[1][MHE_OP_WO] == p.calls[0][MHE_OP_QKV],
          "%s: attn %lld / %lld, wo %lld / %lld", attn, (long long)p.calls[0][MHE_OP_ATTN], (long long)p.calls[1][MHE_OP_ATTN],
          (long long)p.calls[0][MHE_OP_WO], (long long)p.calls[1][MHE_OP_WO]);
    for (op = MHE_OP_FC1; op <= MHE_OP_FC2; op++)
        for (ph = 0; ph < 2; ph++)
            CHECK(p.calls[ph][op] == L + E, "%s: %s phase %d: %lld calls", attn, mhe_profile_op_name(op), ph,
                  (long long)p.calls[ph][op]);
    /* pre-norm: a norm entering every sublayer plus the final one(s); post-norm: one leaving every sublayer */
    want_norm_fwd = (int64_t)L * sub + (int64_t)E * 2 + (norm_position[1] == 'r' ? 1 + (E > 0) : 0);
    CHECK(p.calls[0][MHE_OP_NORM] == want_norm_fwd && p.calls[1][MHE_OP_NORM] == want_norm_fwd,
          "%s %s: norm %lld / %lld calls, want %lld", attn, norm_position, (long long)p.calls[0][MHE_OP_NORM],
          (long long)p.calls[1][MHE_OP_NORM], (long long)want_norm_fwd);
    CHECK(p.calls[0][MHE_OP_HEAD] == 1 && p.calls[1][MHE_OP_HEAD] == 1 && p.calls[0][MHE_OP_LOSS] == 1
          && p.calls[1][MHE_OP_LOSS] == 1, "%s: head %lld / %lld, loss %lld / %lld", attn,
          (long long)p.calls[0][MHE_OP_HEAD], (long long)p.calls[1][MHE_OP_HEAD], (long long)p.calls[0][MHE_OP_LOSS],
          (long long)p.calls[1][MHE_OP_LOSS]);
    CHECK(p.calls[0][MHE_OP_EMBED] == 1 + (E > 0) && p.calls[1][MHE_OP_EMBED] == 1 + (E > 0), "%s: embed %lld / %lld",
          attn, (long long)p.calls[0][MHE_OP_EMBED], (long long)p.calls[1][MHE_OP_EMBED]);
    CHECK(p.calls[2][MHE_OP_ZERO] == 1 && p.calls[2][MHE_OP_CLIP] == 1 && p.calls[2][MHE_OP_ADAMW] == 1,
          "%s: update zero %lld, clip %lld, adamw %lld", attn, (long long)p.calls[2][MHE_OP_ZERO],
          (long long)p.calls[2][MHE_OP_CLIP], (long long)p.calls[2][MHE_OP_ADAMW]);
    for (op = 0; op < MHE_OP_COUNT; op++)
        CHECK(p.calls[0][op] + p.calls[1][op] == 0 || (op != MHE_OP_CLIP && op != MHE_OP_ADAMW),
              "%s: %s outside the update", attn, mhe_profile_op_name(op));
    mhe_profile_reset();
    mhe_profile_read(&p);
    for (ph = 0; ph < MHE_PHASE_COUNT; ph++)
        for (op = 0; op < MHE_OP_COUNT; op++)
            if (p.calls[ph][op] || p.ms[ph][op] != 0) { CHECK(0, "reset left %s phase %d", mhe_profile_op_name(op), ph); ph = MHE_PHASE_COUNT; break; }
    mhe_trainer_free(&t);
    mhe_model_free(&m);
}

/* profiling observes only: resetting the tables between steps changes no loss */
static void same_training(void) {
    mhe_config c = mhe_config_default();
    mhe_train_config tc = mhe_train_config_default();
    float loss[2][6];
    int data[4096], i, run, s;
    mhe_rng r;
    c.d_model = 32; c.n_heads = 4; c.n_layers = 2; c.max_seq_len = 16;
    tc.batch = 2; tc.seq_len = 16; tc.steps = 6;
    mhe_rng_seed(&r, 5);
    for (i = 0; i < 4096; i++) data[i] = (int)mhe_rng_below(&r, 256);
    for (run = 0; run < 2; run++) {
        mhe_model m;
        mhe_trainer t;
        if (mhe_model_init(&m, &c, 2, NULL) != MHE_OK || mhe_trainer_init(&t, &m, &tc) != MHE_OK) { CHECK(0, "init"); return; }
        for (s = 0; s < 6; s++) {
            if (run) mhe_profile_reset();
            CHECK(mhe_trainer_step(&t, data, 4096) == MHE_OK, "%s", t.err);
            loss[run][s] = t.last_loss;
        }
        mhe_trainer_free(&t);
        mhe_model_free(&m);
    }
    CHECK(memcmp(loss[0], loss[1], sizeof loss[0]) == 0, "profiled runs differ: %.9g vs %.9g at the last step", loss[0][5], loss[1][5]);
}

int main(void) {
    CHECK(mhe_profile_enabled() == 1, "MHE_PROFILE defined but profiling reports disabled");
    CHECK(strcmp(mhe_profile_op_name(MHE_OP_ADAMW), "adamw") == 0 && strcmp(mhe_profile_op_name(-1), "?") == 0,
          "op names");
    step_counts("mha", "pre", 0);
    step_counts("mhe-mul", "pre", 0);
    step_counts("mqa", "post", 0);
    step_counts("mha", "pre", 1);
    same_training();
    return TEST_END();
}
