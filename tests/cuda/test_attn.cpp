/* tests/cuda/test_attn.cpp - the device attention cores of mhe_cuda.cuh
   (mhe__cu_attn_fwd / _bwd) against the CPU library's own cores, forward
   output and every gradient, on shapes that are no multiple of the 32-key
   tiles: shared K/V heads (MQA, GQA), cross-attention (Tq != Tk, causal or
   not), padding (kv_len, one sequence fully padded), decoding (Tq = 1),
   strides wider than the heads, heads of 16 to 256 columns, and the maps of
   each kind as the model sets them:
     MHE-MUL    stacked (q_shared, q_mul, v_mul)    vs mhe__attn_mul_fwd/bwd
     MHE-ADD    q_add, k_add, v_add                 vs mhe_attn_fused_fwd/bwd
     MHE-ADD    one QK^T plus the key-bias table    vs mhe__attn_add_fwd/bwd
                K e_i^Q (the device model's form)
     collab     d_qk != d_head, V per head, key     vs mhe__attn_mul_fwd/bwd
                bias (as mhe__collab_dims sets it)
   and a decoding step of each against mhe__attn_one, the CPU's decoder;
   then attention dropout on each path, over several key tiles (the CPU's
   masks: the same seed, the same weights dropped).
   Gradients are added into buffers that start non-zero, as the model's do.
   Errors (a head past 256 columns, a group past shared memory) are
   statuses, never launches. Run by tests/cuda/run.sh with fibers, with
   blocks at once under ThreadSanitizer and with threads under ASan; built
   by nvcc (make cuda) it runs on the GPU (no device: one line, exit status
   3). `test_attn quick`: one case of each kind and path, for the slow tools
   (compute-sanitizer). */
#define MHE_IMPLEMENTATION
#include "mhe.h"
#include "mhe_cuda.cuh"
#include "tests/test.h"
#include "tests/cuda/test_device.h"
#include <vector>

typedef std::vector<float> vec;

static mhe_rng rng;

static vec randn(size_t n, float s) {
    vec v(n);
    for (auto &x : v)
        x = s * mhe_rng_normal(&rng);
    return v;
}

/* a device copy of h (one spare element, so that an empty vector still gets its own allocation) */
template <typename T> static T *dev(const std::vector<T> &h) {
    T *d = test_dev_alloc<T>(h.size() * sizeof(T) + sizeof(T));
    test_copy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

static vec back(const float *d, size_t n) {
    vec h(n);
    test_copy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

static double max_abs(const vec &a) {
    double m = 0;
    for (float x : a)
        m = fabs(x) > m ? fabs(x) : m;
    return m;
}

/* max |got - base - want| / scale (base: what the buffer held before the
   gradient was added; scale: the data scale, at least 1e-6); NaN counts as
   1e30 */
static double err_of(const vec &got, const vec &base, const vec &want, double scale) {
    double m = 0;
    if (scale < 1e-6)
        scale = 1e-6;
    for (size_t i = 0; i < got.size(); i++) {
        double d = fabs((double)got[i] - (base.empty() ? 0.0 : (double)base[i]) - want[i]) / scale;
        m = d != d ? 1e30 : d > m ? d : m;
    }
    return m;
}

enum { PLAIN, MUL, ADDMAP, ADDK, ADDKB, COLLAB };
static const char *kind_name[] = {"plain", "mhe-mul", "q_add/v_add", "mhe-add maps", "mhe-add key bias",
                                   "collab"};

/* padding: none, kv_len[b] = Tk - 3b, or the last sequence with no key at all */
enum { NOPAD, PAD, PAD_EMPTY };

/* dk[r] += dkb[r] E^Q and dE^Q += dkb^T K: back through the MHE-ADD key-bias table kb = K E^Q^T */
static void kb_bwd(const vec &dkb, const vec &eq, const vec &k, int rows, int n, int dh, int ks, vec &dk,
                   vec &deq) {
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < n; h++)
            for (int c = 0; c < dh; c++) {
                dk[(size_t)r * ks + c] += dkb[(size_t)r * n + h] * eq[(size_t)h * dh + c];
                deq[(size_t)h * dh + c] += dkb[(size_t)r * n + h] * k[(size_t)r * ks + c];
            }
}

/* attention dropout's p for the cases run (0: none) */
static float att_drop = 0.0f;
static int att_precision = MHE_CUDA_FP32; /* _TF32, _BF16: the tiled core on the tensor cores */
static const char *const att_precision_name[] = {"", " tf32", " bf16"};

/* the tiled core (mhe__cu_flash_*) runs these; the rest, and every case again with
   mhe__cu_flash_off set, run the warp-per-row core: both against the CPU */
static int tiled_case(int Tq, int dh, int maps) {
    int dk = maps == COLLAB ? dh + 7 : dh; /* as one() sets it; collab tiles on the tensor cores only */
    return att_drop == 0.0f && dh <= MHE__CU_FL && dk <= MHE__CU_FL && Tq >= MHE__CU_FL_MIN_ROWS &&
           (maps != COLLAB || att_precision != MHE_CUDA_FP32);
}

static void one(int B, int n, int n_kv, int Tq, int Tk, int dh, int causal, int pad, int maps) {
    char what[200];
    snprintf(what, sizeof what, "%s B %d n %d n_kv %d Tq %d Tk %d d_h %d%s%s%s%s%s", kind_name[maps], B, n,
             maps == PLAIN ? n_kv : 1, Tq, Tk, dh, causal ? " causal" : "",
             pad == PAD ? " padded" : pad == PAD_EMPTY ? " empty sequence" : "", att_drop > 0 ? " dropout" : "",
             !tiled_case(Tq, dh, maps) ? "" : mhe__cu_flash_off ? " (warp-per-row core)" : " (tiled core)",
             att_precision_name[att_precision]);
    /* the tiled core on the tensor cores, forward and backward: bounds from the precision's unit
       roundoff u (TF32 2^-11, bf16 2^-8), the output and every gradient within 8u of the CPU's
       (measured on the emulation, bf16: 1.6u and 2.3u) */
    double u = att_precision == MHE_CUDA_BF16 ? 1.0 / 256 : att_precision == MHE_CUDA_TF32 ? 1.0 / 2048 : 0;
    double tol_out = u > 0 ? 8 * u : 2e-5, tol_grad = u > 0 ? 8 * u : 1e-4;
    mhe_attn_dims d;
    memset(&d, 0, sizeof d);
    int dk = maps == COLLAB ? dh + 7 : dh;
    d.B = B;
    d.n_heads = n;
    d.n_kv_heads = maps == PLAIN ? n_kv : 1;
    d.Tq = Tq;
    d.Tk = Tk;
    d.d_head = dh;
    d.causal = causal;
    d.q_offset = Tk - Tq;
    d.scale = 1.0f / sqrtf((float)dh);
    d.dropout = att_drop;
    d.seed = 0x5eed0000ULL + (uint64_t)maps;
    d.q_shared = maps != PLAIN;
    /* strides a little wider than the columns read: rows are found by stride, never by width */
    d.q_stride = (d.q_shared ? dk : n * dh) + 3;
    d.k_stride = maps == COLLAB ? dk + n + 2 : d.n_kv_heads * dh + 5;
    d.v_stride = maps == COLLAB ? n * dh + 1 : d.n_kv_heads * dh + 2;
    d.o_stride = n * dh + 1;
    std::vector<int> kv_len(B);
    for (int b = 0; b < B; b++)
        kv_len[b] = pad == PAD_EMPTY && b == B - 1 ? 0 : Tk - 3 * b;
    vec q = randn((size_t)B * Tq * d.q_stride, 1), k = randn((size_t)B * Tk * d.k_stride, 1),
        v = randn((size_t)B * Tk * d.v_stride, 1), dout = randn((size_t)B * Tq * d.o_stride, 1);
    vec qm = randn((size_t)n * dk, 0.5f), qa = randn((size_t)n * dk, 0.5f), ka = randn((size_t)n * dh, 0.5f),
        vm = randn((size_t)n * dh, 0.5f), va = randn((size_t)n * dh, 0.5f);
    for (auto &x : qm)
        x += 1.0f;
    for (auto &x : vm)
        x += 1.0f;
    /* MHE-ADD's key-bias table kb[key][h] = k . e_h^Q (qa plays e^Q), built as mhe_cuda.cuh C3 builds it */
    vec kb((size_t)B * Tk * n, 0.0f);
    for (int r = 0; r < B * Tk; r++)
        for (int h = 0; h < n; h++)
            for (int c = 0; c < dh; c++)
                kb[(size_t)r * n + h] += k[(size_t)r * d.k_stride + c] * qa[(size_t)h * dh + c];
    float *d_q = dev(q), *d_k = dev(k), *d_v = dev(v), *d_do = dev(dout), *d_qm = dev(qm), *d_qa = dev(qa),
          *d_ka = dev(ka), *d_vm = dev(vm), *d_va = dev(va), *d_kb = dev(kb);
    int *d_len = dev(kv_len);
    mhe_attn_dims dd = d; /* the device's copy: device pointers */
    if (pad != NOPAD) {
        d.kv_len = kv_len.data();
        dd.kv_len = d_len;
    }
    if (maps == MUL) {
        d.q_mul = qm.data(), d.v_mul = vm.data();
        dd.q_mul = d_qm, dd.v_mul = d_vm;
    } else if (maps == ADDMAP || maps == ADDK) {
        d.q_add = qa.data(), d.v_add = va.data();
        dd.q_add = d_qa, dd.v_add = d_va;
        if (maps == ADDK)
            d.k_add = ka.data(), dd.k_add = d_ka;
    } else if (maps == ADDKB) { /* the CPU takes e^Q, e^V as arguments; the device the table and v_add */
        dd.k_bias = d_kb;
        dd.k_bias_stride = n;
        dd.v_add = d_va;
    } else if (maps == COLLAB) { /* mhe__collab_dims: M in the query map, the key bias after K~ */
        d.d_qk = dd.d_qk = dk;
        d.v_per_head = dd.v_per_head = 1;
        d.q_mul = qm.data();
        dd.q_mul = d_qm;
        d.k_bias = k.data() + dk;
        dd.k_bias = d_k + dk;
        d.k_bias_stride = dd.k_bias_stride = d.k_stride;
    }

    /* the CPU reference, through the core the CPU model uses for this kind */
    size_t no = (size_t)B * Tq * d.o_stride, nl = (size_t)B * n * Tq;
    vec out(no, 0.0f), lse(nl), dq(q.size(), 0.0f), dk_(k.size(), 0.0f), dv(v.size(), 0.0f);
    vec g1((size_t)n * dk, 0.0f), g2((size_t)n * dh, 0.0f), g3((size_t)n * dh, 0.0f);
    vec scratch((size_t)B * n * 5 * (dk > dh ? dk : dh));
    mhe_attn_grads gr;
    memset(&gr, 0, sizeof gr);
    gr.map_scratch = scratch.data();
    if (maps == MUL || maps == COLLAB)
        gr.dq_mul = g1.data();
    if (maps == ADDMAP || maps == ADDK)
        gr.dq_add = g1.data();
    if (maps == ADDK)
        gr.dk_add = g3.data();
    if (maps == MUL)
        gr.dv_mul = g2.data();
    if (maps == ADDMAP || maps == ADDK)
        gr.dv_add = g2.data();
    if (maps == COLLAB)
        gr.dk_bias = dk_.data() + dk;
    if (maps == MUL || maps == COLLAB) {
        CHECK(mhe__attn_mul_rows(&d) > 0, "%s: the CPU runs it stacked", what);
        mhe__attn_mul_fwd(&d, out.data(), lse.data(), q.data(), k.data(), v.data());
        mhe__attn_mul_bwd(&d, &gr, dq.data(), dk_.data(), dv.data(), dout.data(), out.data(), lse.data(),
                          q.data(), k.data(), v.data());
    } else if (maps == ADDKB) {
        CHECK(mhe__attn_add_fits(&d), "%s: the CPU runs it with shared scores", what);
        mhe__attn_add_fwd(&d, out.data(), lse.data(), q.data(), k.data(), v.data(), qa.data(), va.data());
        mhe__attn_add_bwd(&d, &gr, dq.data(), dk_.data(), dv.data(), dout.data(), out.data(), lse.data(),
                          q.data(), k.data(), v.data(), qa.data(), va.data(), g1.data(), g2.data());
    } else {
        OK(mhe_attn_fused_fwd(&d, out.data(), lse.data(), q.data(), k.data(), v.data()));
        OK(mhe_attn_fused_bwd(&d, &gr, dq.data(), dk_.data(), dv.data(), dout.data(), out.data(), lse.data(),
                           q.data(), k.data(), v.data()));
    }

    /* the device: outputs start as garbage, gradients as random values the backward must add to */
    vec z_dq = randn(q.size(), 1), z_dk = randn(k.size(), 1), z_dv = randn(v.size(), 1);
    vec z1 = randn(g1.size(), 1), z2 = randn(g2.size(), 1), z3 = randn(g3.size(), 1), z_out = randn(no, 1);
    vec z_kb(kb.size(), 0.0f);
    float *d_out = dev(z_out), *d_lse = dev(vec(nl, 0.0f)), *d_dq = dev(z_dq), *d_dk = dev(z_dk),
          *d_dv = dev(z_dv), *d_g1 = dev(z1), *d_g2 = dev(z2), *d_g3 = dev(z3), *d_dkb = dev(z_kb),
          *d_scr = dev(vec(mhe__cu_attn_bwd_floats(&dd) + 1));
    mhe_attn_grads dg;
    memset(&dg, 0, sizeof dg);
    if (gr.dq_mul)
        dg.dq_mul = d_g1;
    if (gr.dq_add)
        dg.dq_add = d_g1;
    if (gr.dk_add)
        dg.dk_add = d_g3;
    if (gr.dv_mul)
        dg.dv_mul = d_g2;
    if (gr.dv_add || maps == ADDKB)
        dg.dv_add = d_g2;
    if (gr.dk_bias)
        dg.dk_bias = d_dk + dk;
    if (maps == ADDKB)
        dg.dk_bias = d_dkb;
    char err[MHE_ERR_LEN] = "";
    long tiled_before = mhe__cu_flash_calls;
    mhe_status st = mhe__cu_attn_fwd(&dd, 0, att_precision, d_out, d_lse, d_q, d_k, d_v, err);
    CHECK(st == MHE_OK, "%s: forward: %s", what, err);
    CHECK((mhe__cu_flash_calls > tiled_before) == (tiled_case(Tq, dh, maps) && !mhe__cu_flash_off),
          "%s: the forward ran the %s core", what, mhe__cu_flash_calls > tiled_before ? "tiled" : "warp-per-row");
    /* the output's own columns (o_stride leaves one the cores must not write; the gradients' spare
       columns are compared with the rest: the CPU leaves them 0) */
    vec got = back(d_out, no), want = out;
    int past = 0;
    for (size_t r = 0; r < (size_t)B * Tq; r++) {
        size_t spare = r * d.o_stride + (size_t)n * dh;
        past += got[spare] != z_out[spare];
        got[spare] = want[spare] = 0.0f;
    }
    CHECK(!past, "%s: the forward wrote past the heads in %d rows", what, past);
    double e = err_of(got, vec(), want, max_abs(want));
    CHECK(e < tol_out, "%s: output (err %.3g)", what, e);
    if (u > 0) /* the tensor cores did round (a float32 core stays within 2e-6) */
        CHECK(e > 1e-5, "%s: output err %.3g: was it rounded?", what, e);
    if (st == MHE_OK)
        st = mhe__cu_attn_bwd(&dd, 0, att_precision, &dg, d_dq, d_dk, d_dv, d_do, d_out, d_lse, d_q, d_k, d_v, d_scr, err);
    CHECK(st == MHE_OK, "%s: backward: %s", what, err);
    vec dq_dev = back(d_dq, q.size()), dk_dev = back(d_dk, k.size()), dv_dev = back(d_dv, v.size());
    vec g1_dev = back(d_g1, g1.size()), g2_dev = back(d_g2, g2.size());
    if (maps == ADDKB) { /* what the device model does after the core: back through kb = K E^Q^T */
        kb_bwd(back(d_dkb, kb.size()), qa, k, B * Tk, n, dh, d.k_stride, dk_dev, g1_dev);
    }
    e = err_of(dq_dev, z_dq, dq, max_abs(dq));
    CHECK(e < tol_grad, "%s: dQ (err %.3g)", what, e);
    e = err_of(dk_dev, z_dk, dk_, max_abs(dk_));
    CHECK(e < tol_grad, "%s: dK (err %.3g)", what, e);
    e = err_of(dv_dev, z_dv, dv, max_abs(dv));
    CHECK(e < tol_grad, "%s: dV (err %.3g)", what, e);
    if (dg.dq_mul || dg.dq_add || maps == ADDKB) {
        e = err_of(g1_dev, z1, g1, max_abs(g1));
        CHECK(e < tol_grad, "%s: query map gradient (err %.3g)", what, e);
    }
    if (dg.dv_mul || dg.dv_add) {
        e = err_of(g2_dev, z2, g2, max_abs(g2));
        CHECK(e < tol_grad, "%s: value map gradient (err %.3g)", what, e);
    }
    if (dg.dk_add) { /* k_add shifts whole score rows: its true gradient is 0, the CPU's is rounding */
        e = err_of(back(d_g3, g3.size()), z3, g3, max_abs(g1));
        CHECK(e < tol_grad, "%s: key map gradient (err %.3g)", what, e);
    }

    /* decoding: the CPU model's decoder is mhe__attn_one (its maps on the fly) */
    if (Tq == 1 && causal && st == MHE_OK && !att_drop) {
        mhe_attn_dims d1 = d;
        vec out1(no, 0.0f), lse1(nl);
        if (maps == ADDKB) /* the CPU decoder adds the embeddings themselves */
            d1.q_add = qa.data(), d1.k_add = ka.data(), d1.v_add = va.data();
        mhe__attn_one(&d1, out1.data(), lse1.data(), q.data(), k.data(), v.data());
        got = back(d_out, no);
        for (size_t r = 0; r < (size_t)B * Tq; r++)
            got[r * d.o_stride + (size_t)n * dh] = out1[r * d.o_stride + (size_t)n * dh] = 0.0f;
        e = err_of(got, vec(), out1, max_abs(out1));
        CHECK(e < 2e-5, "%s: output vs the CPU decoder (err %.3g)", what, e);
    }
    for (float *p : {d_q, d_k, d_v, d_do, d_qm, d_qa, d_ka, d_vm, d_va, d_kb, d_out, d_lse, d_dq, d_dk, d_dv,
                     d_g1, d_g2, d_g3, d_dkb, d_scr})
        cudaFree(p);
    cudaFree(d_len);
}

/* limits: each a status naming the limit, never a launch (the pointers are never read) */
static void limits(void) {
    mhe_attn_dims d;
    mhe_attn_grads gr;
    char err[MHE_ERR_LEN];
    float x[4] = {0, 0, 0, 0};
    memset(&d, 0, sizeof d);
    memset(&gr, 0, sizeof gr);
    d.B = d.n_heads = d.n_kv_heads = 1;
    d.Tq = d.Tk = 4;
    d.d_head = MHE_MAX_D_HEAD + 1;
    d.scale = 1.0f;
    for (int bwd = 0; bwd < 2; bwd++) {
        const char *pass = bwd ? "backward" : "forward";
        auto run = [&](void) {
            err[0] = 0;
            return bwd ? mhe__cu_attn_bwd(&d, 0, 0, &gr, x, x, x, x, x, x, x, x, x, x, err)
                       : mhe__cu_attn_fwd(&d, 0, 0, x, x, x, x, x, err);
        };
        d.d_head = MHE_MAX_D_HEAD + 1;
        CHECK(run() == MHE_ERR_DEVICE && strstr(err, "256"), "%s: d_head past the limit: %s", pass, err);
        d.d_head = 16;
        d.d_qk = MHE_MAX_D_HEAD + 1; /* collab's query/key width */
        CHECK(run() == MHE_ERR_DEVICE && strstr(err, "256"), "%s: d_qk past the limit: %s", pass, err);
        d.d_qk = 0;
        d.n_heads = 6;
        d.n_kv_heads = 4;
        CHECK(run() == MHE_ERR_ARG, "%s: 6 heads over 4 K/V heads: %s", pass, err);
        d.n_heads = 64; /* one K/V group of 64 heads of 256: no block holds their accumulators */
        d.n_kv_heads = 1;
        d.d_head = 256;
        d.q_shared = 1;
        CHECK(run() == MHE_ERR_DEVICE && strstr(err, "shared memory"), "%s: 64 heads of 256 in one group: %s",
              pass, err);
        d.n_heads = d.n_kv_heads = 1;
        d.q_shared = 0;
        d.d_head = 16;
    }
}

/* the cases: B n n_kv Tq Tk d_h causal padding maps, and 1 when `quick` runs it too */
static const struct {
    int B, n, n_kv, Tq, Tk, dh, causal, pad, maps, quick;
} cases[] = {
    /* the general core: mha, gqa, mqa, one head (sha); self and cross, causal and not */
    {2, 4, 4, 37, 37, 16, 1, NOPAD, PLAIN, 1},
    {2, 1, 1, 37, 37, 16, 1, PAD, PLAIN, 0},
    {2, 4, 4, 37, 37, 16, 0, PAD, PLAIN, 0},
    {2, 6, 2, 37, 37, 40, 1, NOPAD, PLAIN, 0},
    {2, 4, 2, 37, 37, 64, 1, PAD, PLAIN, 1},
    {2, 4, 1, 19, 45, 24, 0, PAD, PLAIN, 0},
    {2, 4, 2, 19, 45, 40, 1, NOPAD, PLAIN, 1},
    {2, 4, 4, 37, 37, 16, 0, PAD_EMPTY, PLAIN, 0},
    {1, 2, 2, 23, 23, 130, 1, NOPAD, PLAIN, 0},
    {1, 4, 2, 19, 45, 130, 0, PAD, PLAIN, 0},
    {1, 4, 1, 9, 9, 256, 1, NOPAD, PLAIN, 1}, /* past 48 KiB of shared memory: the opt-in launch */
    /* several 64-row tiles of queries and keys (the tiled core's blocks), partial last tiles, a
       sequence with no keys, cross-attention with a query offset (prefill after a cache) */
    {2, 4, 2, 150, 150, 64, 1, PAD, PLAIN, 1},
    {1, 4, 4, 70, 130, 40, 0, PAD, PLAIN, 0},
    {2, 2, 2, 129, 129, 16, 1, NOPAD, PLAIN, 0},
    {2, 6, 2, 100, 100, 64, 1, PAD_EMPTY, PLAIN, 0},
    {1, 4, 2, 80, 200, 32, 1, PAD, PLAIN, 0},
    {2, 4, 1, 150, 150, 64, 1, PAD, MUL, 1},
    {2, 6, 1, 100, 130, 40, 0, PAD, ADDKB, 0},
    {2, 4, 1, 90, 90, 32, 1, NOPAD, ADDK, 0},
    {1, 4, 1, 70, 70, 16, 1, PAD, ADDMAP, 0},
    /* decoding: one query at position Tk - 1 */
    {2, 4, 2, 1, 45, 16, 1, NOPAD, PLAIN, 0},
    {2, 4, 4, 1, 45, 64, 1, PAD, PLAIN, 1},
    /* MHE-MUL stacked */
    {2, 4, 1, 37, 37, 16, 1, NOPAD, MUL, 0},
    {2, 6, 1, 19, 45, 24, 0, PAD, MUL, 1},
    {2, 4, 1, 37, 37, 64, 0, NOPAD, MUL, 0},
    {1, 4, 1, 23, 23, 130, 1, NOPAD, MUL, 0},
    {2, 4, 1, 1, 45, 16, 1, PAD, MUL, 0},
    /* MHE-ADD: the maps (fused path), and the shared scores with the key-bias table */
    {2, 4, 1, 37, 37, 16, 1, NOPAD, ADDMAP, 0},
    {2, 4, 1, 37, 37, 16, 1, PAD, ADDK, 1},
    {2, 6, 1, 19, 45, 40, 0, NOPAD, ADDK, 0},
    {2, 4, 1, 37, 37, 16, 1, NOPAD, ADDKB, 0},
    {2, 6, 1, 19, 45, 64, 0, PAD, ADDKB, 1},
    {2, 4, 1, 1, 45, 16, 1, NOPAD, ADDKB, 0},
    /* collab */
    {2, 4, 1, 37, 37, 16, 1, NOPAD, COLLAB, 0},
    {2, 6, 1, 19, 45, 40, 0, PAD, COLLAB, 1},
    {2, 4, 1, 1, 45, 16, 1, NOPAD, COLLAB, 0},
    {2, 4, 1, 100, 130, 32, 1, PAD, COLLAB, 0}, /* the tiled core over two query and three key tiles */
    {1, 2, 1, 40, 40, 60, 0, NOPAD, COLLAB, 0},  /* d_qk 67: past the tiles, the warp-per-row core */
};

/* attention dropout: self and cross, GQA, each map path */
static const struct {
    int B, n, n_kv, Tq, Tk, dh, causal, pad, maps, quick;
} drop_cases[] = {
    {2, 4, 2, 37, 37, 16, 1, PAD, PLAIN, 0},  {2, 4, 1, 19, 45, 24, 0, PAD, PLAIN, 0},
    {2, 6, 1, 19, 45, 24, 0, PAD, MUL, 0},    {2, 4, 1, 37, 37, 16, 1, PAD, ADDK, 0},
    {2, 6, 1, 19, 45, 40, 0, PAD, ADDKB, 1},  {2, 6, 1, 19, 45, 40, 0, PAD, COLLAB, 0},
};

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "quick");
    if (argc > 1 && !quick) {
        printf("usage: test_attn [quick]\n");
        return 2;
    }
    test_device_or_exit("test_attn");
    mhe_rng_seed(&rng, 9);
    for (const auto &c : cases)
        if (c.quick || !quick) {
            one(c.B, c.n, c.n_kv, c.Tq, c.Tk, c.dh, c.causal, c.pad, c.maps);
            if (tiled_case(c.Tq, c.dh, c.maps)) { /* the same case through the warp-per-row core */
                mhe__cu_flash_off = 1;
                one(c.B, c.n, c.n_kv, c.Tq, c.Tk, c.dh, c.causal, c.pad, c.maps);
                mhe__cu_flash_off = 0;
            }
#if defined(MHE_EMU_THREADS) || defined(MHE_EMU_BLOCKS)
            if (!c.quick) /* the sanitizer builds (slow): races and bounds on the quick cases' shapes */
                continue;
#endif
            for (att_precision = MHE_CUDA_TF32; att_precision <= MHE_CUDA_BF16; att_precision++)
                if (tiled_case(c.Tq, c.dh, c.maps)) /* the tiled core on the tensor cores */
                    one(c.B, c.n, c.n_kv, c.Tq, c.Tk, c.dh, c.causal, c.pad, c.maps);
            att_precision = MHE_CUDA_FP32;
        }
    att_drop = 0.25f; /* attention dropout on each path, over two key tiles */
    for (const auto &c : drop_cases)
        if (c.quick || !quick)
            one(c.B, c.n, c.n_kv, c.Tq, c.Tk, c.dh, c.causal, c.pad, c.maps);
    att_drop = 0.0f;
    limits();
    test_device_settled(quick ? "quick" : "attention");
    printf("attn: %d passed, %d failed\n", test_pass_count, test_fail_count);
    return TEST_END();
}
