/* mhe_web.c - the page's C side (docs/web.md): a thin layer over mhe.h's
   public API, built to WebAssembly for the page's Web Worker and included
   as it is by web_native.c, the native program the browser test compares
   the page with. One model, one trainer and one text per instance (each
   worker has its own instance). Strings and byte arrays travel through
   web_buffer; results through web_out. No layer is computed here. */
#define MHE_IMPLEMENTATION
#define MHE_NO_STDIO   /* the page reads no files: the text arrives as bytes */
#include "../../mhe.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>

#ifdef __wasm__
#define WEB_API(name) __attribute__((export_name(#name)))
#else
#define WEB_API(name)
#endif

/* the longest text the page trains on (1 MiB: 4 MiB of tokens, and the
   page copies it to a worker) */
#define WEB_MAX_TEXT (1 << 20)
/* the longest prompt (and model window) the page runs */
#define WEB_MAX_SEQ 512

/* what a layer's map in web_out holds (web_map_kind) */
enum { WEB_MAP_NONE = 0,      /* fnet: no token-to-token weights */
       WEB_MAP_PROBS,         /* rows of probabilities (softmax, taylor's and nonapprox's normalised weights) */
       WEB_MAP_IDENTITY,      /* mlp: each token sees only itself */
       WEB_MAP_WEIGHTS };     /* linear: W_seq[:T, :T], learned weights, not probabilities */

static struct {
    mhe_config cfg;
    mhe_train_config tc;
    mhe_model m;
    mhe_trainer tr;
    int have_model;
    int *tokens;
    size_t n_tokens;
    unsigned char *buf;
    size_t buf_cap;
    float *out;             /* web_analyze: logits [T, V], next-byte probabilities [V], maps [layers, heads, T, T] */
    size_t out_cap;
    int map_kind[MHE_MAX_LAYERS];
    char err[MHE_ERR_LEN + 64];
} W;

static int web_fail(const char *msg) {
    snprintf(W.err, sizeof W.err, "%s", msg);
    return -1;
}

/* a scratch byte buffer of n + 1 bytes that JS fills (text, config, prompt) */
WEB_API(web_buffer) unsigned char *web_buffer(int n) {
    unsigned char *p;
    if (n < 0) return NULL;
    if ((size_t)n + 1 <= W.buf_cap) return W.buf;
    if (!(p = (unsigned char *)realloc(W.buf, (size_t)n + 1))) return NULL;
    W.buf = p; W.buf_cap = (size_t)n + 1;
    return W.buf;
}

WEB_API(web_err) const char *web_err(void) { return W.err; }
WEB_API(web_max_text) int web_max_text(void) { return WEB_MAX_TEXT; }
WEB_API(web_kind_count) int web_kind_count(void) { return mhe_attn_kind_count(); }
WEB_API(web_kind_name) const char *web_kind_name(int k) { return mhe_attn_kind_name(k); }
WEB_API(web_kind_source) const char *web_kind_source(int k) { return mhe_attn_kind_source(k); }
WEB_API(web_kind_tensors) const char *web_kind_tensors(int k) { return mhe_attn_kind_tensors(k); }

/* is key a field of the train config (else of the model config)? */
static int web_is_train_key(const char *key) {
    mhe_train_config tc = mhe_train_config_default();
    const char *k;
    char v[64];
    int i;
    for (i = 0; mhe_train_config_field(&tc, i, &k, v, sizeof v); i++)
        if (!strcmp(k, key)) return 1;
    return 0;
}

/* config text (key=value lines) to a model config and a train config, each
   key to the one that has it; a kind that only an encoder runs (fnet,
   linear) makes the model a masked-LM encoder, as the validator says */
static int web_parse(const char *text, int len, mhe_config *c, mhe_train_config *tc) {
    char err[MHE_ERR_LEN], line[256];
    const char *p = text, *end = text + len;
    *c = mhe_config_default();
    *tc = mhe_train_config_default();
    while (p < end) {
        const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
        char *eq;
        size_t n = (size_t)((nl ? nl : end) - p);
        if (n >= sizeof line) return web_fail("a config line is too long");
        memcpy(line, p, n); line[n] = 0;
        p += n + (nl != NULL);
        if (!n) continue;
        if (!(eq = strchr(line, '='))) return web_fail("a config line without '='");
        *eq = 0;
        if ((web_is_train_key(line) ? mhe_train_config_set(tc, line, eq + 1, err) : mhe_config_set(c, line, eq + 1, err)) != MHE_OK)
            return web_fail(err);
    }
    if (mhe_config_validate(c, err) != MHE_OK) {
        mhe_config e = *c;
        e.arch = MHE_ARCH_ENCODER;
        if (c->arch != MHE_ARCH_DECODER || mhe_config_validate(&e, W.err) != MHE_OK) return web_fail(err);
        *c = e;
    }
    if (mhe_train_config_validate(tc, err) != MHE_OK) return web_fail(err);
    return 0;
}

/* a text the page can train on: not empty, not binary, not too long.
   Binary: a NUL byte, invalid UTF-8, or more than 1 % control bytes other
   than tab, newline, carriage return and form feed. */
WEB_API(web_check_text) int web_check_text(const unsigned char *s, int n) {
    int i, ctrl = 0;
    if (n <= 0) return web_fail("the text is empty: paste some text first");
    if (n > WEB_MAX_TEXT) {
        snprintf(W.err, sizeof W.err, "the text is %d bytes; the page takes at most %d (1 MiB): paste a shorter part", n, WEB_MAX_TEXT);
        return -1;
    }
    for (i = 0; i < n; i++) {
        unsigned c = s[i];
        int more = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
        if (c == 0) {
            snprintf(W.err, sizeof W.err, "this looks binary, not text: a NUL byte at offset %d", i);
            return -1;
        }
        if (more < 0 || (c == 0xC0 || c == 0xC1 || c > 0xF4)) {
            snprintf(W.err, sizeof W.err, "this looks binary, not text: invalid UTF-8 at offset %d", i);
            return -1;
        }
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') ctrl++;
        for (; more > 0; more--)
            if (++i >= n || (s[i] & 0xC0) != 0x80) {
                snprintf(W.err, sizeof W.err, "this looks binary, not text: invalid UTF-8 at offset %d", i < n ? i : n);
                return -1;
            }
    }
    if ((double)ctrl > 0.01 * n) {
        snprintf(W.err, sizeof W.err, "this looks binary, not text: %d control bytes in %d", ctrl, n);
        return -1;
    }
    return 0;
}

/* the bytes in web_buffer become the training text: tokens 0..255 */
WEB_API(web_set_text) int web_set_text(int n) {
    int *t, i;
    if (!W.buf && n > 0) return web_fail("no text in the buffer");
    if (web_check_text(W.buf, n) != 0) return -1;
    if (!(t = (int *)malloc((size_t)n * sizeof(int)))) return web_fail("out of memory for the text");
    for (i = 0; i < n; i++) t[i] = W.buf[i];
    free(W.tokens);
    W.tokens = t; W.n_tokens = (size_t)n;
    return 0;
}

static void web_drop(void) {
    if (!W.have_model) return;
    mhe_trainer_free(&W.tr);
    mhe_model_free(&W.m);
    W.have_model = 0;
}

/* a fresh model and trainer for the config text in web_buffer (len bytes),
   model and batches seeded with seed; the text must be set */
WEB_API(web_setup) int web_setup(int len, unsigned seed) {
    size_t need;
    web_drop();
    if (web_parse((const char *)W.buf, len, &W.cfg, &W.tc) != 0) return -1;
    if (!W.tokens) return web_fail("no training text");
    need = (size_t)W.tc.seq_len + (W.cfg.arch == MHE_ARCH_DECODER);
    if (W.n_tokens < need) {
        snprintf(W.err, sizeof W.err, "the text has %zu bytes; a training window needs %zu: paste more, or shorten the window", W.n_tokens, need);
        return -1;
    }
    W.tc.seed = seed;
    if (mhe_model_init(&W.m, &W.cfg, seed, NULL) != MHE_OK) return web_fail(W.m.err);
    if (mhe_trainer_init(&W.tr, &W.m, &W.tc) != MHE_OK) {
        (void)web_fail(W.tr.err);
        mhe_model_free(&W.m);
        return -1;
    }
    W.have_model = 1;
    return 0;
}

WEB_API(web_arch) int web_arch(void) { return W.have_model ? W.m.cfg.arch : -1; }
WEB_API(web_n_params) double web_n_params(void) { return W.have_model ? (double)W.m.n_params : -1; }
WEB_API(web_step_count) int web_step_count(void) { return W.have_model ? W.tr.step : 0; }
WEB_API(web_n_layers) int web_n_layers(void) { return W.have_model ? W.m.cfg.n_layers : 0; }
WEB_API(web_n_maps) int web_n_maps(void) { return W.have_model ? W.m.cfg.n_layers * W.m.cfg.n_heads : 0; }

/* one training step; its loss, NaN on failure (the message in web_err) */
WEB_API(web_step) float web_step(void) {
    if (!W.have_model) { (void)web_fail("no model: set one up first"); return NAN; }
    if (mhe_trainer_step(&W.tr, W.tokens, W.n_tokens) != MHE_OK) { (void)web_fail(W.tr.err); return NAN; }
    return W.tr.last_loss;
}

/* Parameter counts for the config text in web_buffer with its attention set
   to kind: which 0 the attention sublayer (W^O and biases included, as the
   model has them), 1 the whole model (built once to count, then freed).
   -1 when that kind cannot take the config (web_err says why). */
WEB_API(web_count) double web_count(int len, int kind, int which) {
    mhe_config c;
    mhe_train_config tc;
    mhe_model m;
    char *text = (char *)malloc((size_t)len + 64);
    int n, i;
    double r;
    if (!text) return web_fail("out of memory");
    n = snprintf(text, (size_t)len + 64, "%.*s\nattn=%s\n", len, (const char *)W.buf, mhe_attn_kind_name(kind));
    i = web_parse(text, n, &c, &tc);
    free(text);
    if (i != 0) return -1;
    if (which == 0) return (double)mhe_attn_param_count(&c, kind, 1, c.bias);
    c.max_seq_len = tc.seq_len;
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) return web_fail(m.err);
    r = (double)m.n_params;
    mhe_model_free(&m);
    return r;
}

/* prompt bytes (web_buffer, len) to tokens, at most max_seq_len of them */
static int web_prompt(int len, int *tok) {
    int T = len < W.m.cfg.max_seq_len ? len : W.m.cfg.max_seq_len, i;
    for (i = 0; i < T; i++) tok[i] = W.buf[i];
    return T;
}

/* One forward pass of the prompt in web_buffer on the reference path, so
   every map is materialised (mhe_model_set_reference; training goes back to
   the fused cores after). web_out then holds the logits [T, V], the
   probabilities of the byte after the prompt [V] (mhe_softmax_fwd of the
   last row), and per layer and head a T x T map whose meaning web_map_kind
   gives. Returns T, or -1. */
WEB_API(web_analyze) int web_analyze(int len) {
    int tok[WEB_MAX_SEQ], T, V, L, H, l, h, t, linear = mhe_attn_kind_from_name("linear");
    size_t need;
    mhe_status st;
    float loss, *maps;
    if (!W.have_model) return web_fail("no model: train one first");
    if (len < 1) return web_fail("type a prompt first");
    if (W.m.cfg.max_seq_len > WEB_MAX_SEQ) return web_fail("max_seq_len is too long for the page");
    T = web_prompt(len, tok);
    V = W.m.cfg.vocab_size; L = W.m.cfg.n_layers; H = W.m.cfg.n_heads;
    need = (size_t)(T + 1) * V + (size_t)L * H * T * T;
    if (need > W.out_cap) {
        float *o = (float *)realloc(W.out, need * sizeof(float));
        if (!o) return web_fail("out of memory for the maps");
        W.out = o; W.out_cap = need;
    }
    mhe_model_set_reference(&W.m, 1);
    W.m.training = 0;
    st = mhe_model_forward(&W.m, tok, NULL, 1, T, &loss);
    if (st != MHE_OK) {
        (void)web_fail(W.m.err);
        mhe_model_set_reference(&W.m, 0);
        return -1;
    }
    memcpy(W.out, W.m.acts.logits, (size_t)T * V * sizeof(float));
    mhe_softmax_fwd(W.out + (size_t)T * V, W.out + (size_t)(T - 1) * V, 1, V);
    maps = W.out + (size_t)(T + 1) * V;
    for (l = 0; l < L; l++) {
        int kind = W.m.layers[l].attn.kind;
        for (h = 0; h < H; h++) {
            float *map = maps + ((size_t)l * H + h) * T * T;
            if (kind == linear) {   /* W_seq[:T, :T] mixes the tokens */
                const float *ws = W.m.layers[l].attn.seq->data;
                for (t = 0; t < T; t++) memcpy(map + (size_t)t * T, ws + (size_t)t * W.m.cfg.max_seq_len, (size_t)T * sizeof(float));
                W.map_kind[l] = WEB_MAP_WEIGHTS;
            } else if (mhe_attn_probs(&W.m, l, h, map)) {
                W.map_kind[l] = kind == mhe_attn_kind_from_name("mlp") ? WEB_MAP_IDENTITY : WEB_MAP_PROBS;
            } else {
                memset(map, 0, (size_t)T * T * sizeof(float));
                W.map_kind[l] = WEB_MAP_NONE;
            }
        }
    }
    mhe_model_set_reference(&W.m, 0);
    return T;
}

WEB_API(web_out) float *web_out(void) { return W.out; }
WEB_API(web_map_kind) int web_map_kind(int layer) { return layer >= 0 && layer < MHE_MAX_LAYERS ? W.map_kind[layer] : 0; }

/* Text from the model into web_buffer, after the prompt in it (len bytes):
   a decoder continues the prompt with n sampled bytes (KV cache, top-k
   sampling at temperature, seeded); an encoder fills each '_' of the
   prompt with its most likely byte (masked LM). Returns the bytes written
   (a NUL follows), or -1. */
WEB_API(web_generate) int web_generate(int len, int n, float temperature, int top_k, unsigned seed) {
    int tok[WEB_MAX_SEQ], T, i, V;
    if (!W.have_model) return web_fail("no model: train one first");
    if (len < 1) return web_fail("type a prompt first");
    if (W.m.cfg.max_seq_len > WEB_MAX_SEQ) return web_fail("max_seq_len is too long for the page");
    V = W.m.cfg.vocab_size;
    if (W.m.cfg.arch == MHE_ARCH_ENCODER) {
        float loss;
        T = web_prompt(len, tok);
        for (i = 0; i < T; i++)
            if (tok[i] == '_') tok[i] = W.m.cfg.mask_token >= 0 ? W.m.cfg.mask_token : V - 1;
        W.m.training = 0;
        if (mhe_model_forward(&W.m, tok, NULL, 1, T, &loss) != MHE_OK) return web_fail(W.m.err);
        for (i = 0; i < T; i++) {
            if (W.buf[i] == '_') {
                const float *lg = W.m.acts.logits + (size_t)i * V;
                int best = 0, v;
                for (v = 1; v < V; v++)
                    if (lg[v] > lg[best]) best = v;
                W.buf[i] = (unsigned char)best;
            }
        }
        W.buf[T] = 0;
        return T;
    } else {
        mhe_kv_cache kv;
        mhe_rng rng;
        int max = W.m.cfg.max_seq_len, out = 0, next = 0;
        unsigned char *gen;
        T = web_prompt(len, tok);
        if (T >= max) T = max - 1;   /* room for one new byte at least */
        if (n > max - T) n = max - T;
        if (!(gen = (unsigned char *)malloc((size_t)n + 1))) return web_fail("out of memory");
        if (mhe_kv_cache_init(&kv, &W.m, max, NULL) != MHE_OK) { free(gen); return web_fail(W.m.err); }
        mhe_rng_seed(&rng, seed);
        if (T > 0 && mhe_prefill(&W.m, &kv, tok, T) != MHE_OK) goto fail;   /* the prompt in chunks */
        for (out = 0; out < n; out++) {
            next = mhe_sample(kv.logits, V, temperature, top_k, &rng);
            gen[out] = (unsigned char)next;
            if (out + 1 < n && mhe_decode_step(&W.m, &kv, next) != MHE_OK) goto fail;
        }
        mhe_kv_cache_free(&kv);
        if (!web_buffer(out)) { free(gen); return web_fail("out of memory"); }
        memcpy(W.buf, gen, (size_t)out);
        W.buf[out] = 0;
        free(gen);
        return out;
    fail:
        (void)web_fail(W.m.err);
        mhe_kv_cache_free(&kv);
        free(gen);
        return -1;
    }
}
