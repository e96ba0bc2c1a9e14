/* mhe_import.h - part of tools/cli/mhe.c (included after mhe.h's implementation):
   `mhe import DIR`, a Hugging Face GPT-2 or BERT directory (config.json,
   model.safetensors) to an mhe checkpoint. config.json is read by mhe.h's
   strict JSON reader (RFC 8259); every key is either mapped, checked to have
   the one value mhe can represent, or known to change nothing in the math
   (dropout, token ids, names): any other key is refused by name, as is a
   missing, extra or misshapen tensor. Nothing is written unless all of it
   maps. The tokenizer (tokenizer.json) is not read here. */
#ifndef MHE_IMPORT_H
#define MHE_IMPORT_H

#define IMP_NOTE_LEN (2 * MHE_ERR_LEN)   /* imp_run's note: the tokenizer's line and the generation settings' */

/* ---- config.json as a tree, read by mhe.h's JSON reader ------------------ */

/* mhe.h's strict reader (RFC 8259; the one that reads safetensors headers and
   tokenizer.json) checks and decodes each value; this keeps what it read as a
   tree, since config.json is read key by key in any order. */
enum { IJ_NULL, IJ_BOOL, IJ_NUM, IJ_STR, IJ_ARR, IJ_OBJ };

typedef struct ij_node {
    int type, n_kids;
    double num;                  /* IJ_NUM, IJ_BOOL (0/1) */
    int is_int;                  /* IJ_NUM written without fraction or exponent */
    char *str;                   /* IJ_STR: decoded UTF-8 (no NUL inside: refused) */
    char *key;                   /* member name, inside an object */
    struct ij_node *kids;        /* array elements or object members */
} ij_node;

static void ij_free(ij_node *n) {
    int i;
    if (!n) return;
    for (i = 0; i < n->n_kids; i++) ij_free(&n->kids[i]);
    free(n->kids); free(n->str); free(n->key);
    n->kids = NULL; n->str = n->key = NULL; n->n_kids = 0;
}

/* a failure of the tool's own (not the reader's): out of memory, a duplicate key, a number too large */
static mhe_status ij_fail(mhe__json *j, size_t at, const char *what) {
    snprintf(j->err, MHE_ERR_LEN, "config.json: %.200s at byte %lu", what, (unsigned long)at);
    return MHE_ERR_FORMAT;
}

/* the string at the cursor, decoded into a new C string */
static mhe_status ij_string(mhe__json *j, char **out) {
    size_t at = j->pos, len;
    mhe_status st = mhe__json_string(j, NULL, 0, &len);
    if (st != MHE_OK) return st;
    if (!(*out = (char *)malloc(len + 1))) return ij_fail(j, at, "out of memory");
    j->pos = at;
    st = mhe__json_string(j, *out, len, &len);
    (*out)[len] = 0;
    return st;
}

static mhe_status ij_value(mhe__json *j, ij_node *v, int depth) {
    mhe_status st;
    size_t at;
    int c, cap = 0, i;
    mhe__json_ws(j);
    at = j->pos;
    c = mhe__json_peek(j);
    if (c == '{' || c == '[') {
        int close = c == '{' ? '}' : ']';
        if (depth >= MHE__JSON_MAX_DEPTH) return mhe__json_err(j, at, "arrays/objects nested more than 64 deep");
        v->type = c == '{' ? IJ_OBJ : IJ_ARR;
        j->pos++;
        mhe__json_ws(j);
        if (mhe__json_peek(j) == close) { j->pos++; return MHE_OK; }
        for (;;) {
            ij_node *k;
            if (v->n_kids == cap) {
                ij_node *grown = (ij_node *)realloc(v->kids, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *grown);
                if (!grown) return ij_fail(j, j->pos, "out of memory");
                v->kids = grown;
            }
            k = &v->kids[v->n_kids++];
            memset(k, 0, sizeof *k);
            if (c == '{') {
                mhe__json_ws(j);
                at = j->pos;
                if ((st = ij_string(j, &k->key)) != MHE_OK) return st;
                for (i = 0; i < v->n_kids - 1; i++)
                    if (strcmp(v->kids[i].key, k->key) == 0) {
                        char w[MHE_ERR_LEN];
                        snprintf(w, sizeof w, "duplicate key '%.60s'", k->key);
                        return ij_fail(j, at, w);
                    }
                if ((st = mhe__json_expect(j, ':', "expected ':' after an object key")) != MHE_OK) return st;
            }
            if ((st = ij_value(j, k, depth + 1)) != MHE_OK) return st;
            mhe__json_ws(j);
            if (mhe__json_peek(j) == close) { j->pos++; return MHE_OK; }
            if (mhe__json_peek(j) != ',')
                return mhe__json_err(j, j->pos, c == '{' ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
            j->pos++;
        }
    }
    if (c == '"') { v->type = IJ_STR; return ij_string(j, &v->str); }
    if (c == 't' || c == 'f') { v->type = IJ_BOOL; v->num = c == 't'; return mhe__json_literal(j, c == 't' ? "true" : "false"); }
    if (c == 'n') { v->type = IJ_NULL; return mhe__json_literal(j, "null"); }
    {   /* a number: the reader checks the grammar, strtod reads the value */
        mhe__json_num num;
        char buf[64];
        if ((st = mhe__json_number(j, &num)) != MHE_OK) return st;
        if (j->pos - at >= sizeof buf) return ij_fail(j, at, "number of more than 63 characters");
        memcpy(buf, j->s + at, j->pos - at);
        buf[j->pos - at] = 0;
        v->type = IJ_NUM;
        v->is_int = !num.frac && !num.exp;
        v->num = strtod(buf, NULL);
        if (!arg_finite(v->num)) return ij_fail(j, at, "number out of range");
        return MHE_OK;
    }
}

/* the whole text as one JSON value; a UTF-8 BOM at the start is skipped, as
   in config files (RFC 8259 lets a parser ignore it), anywhere else it is
   named. The reader's messages ("header JSON: ... at byte N") become
   config.json's, with the byte counted from the file's start. */
static int ij_parse(const char *text, size_t len, ij_node *root, char *err) {
    mhe__json j;
    mhe_status st;
    memset(root, 0, sizeof *root);
    if (len >= 2 && ((unsigned char)text[0] == 0xFF || (unsigned char)text[0] == 0xFE) && (unsigned char)text[1] == ((unsigned char)text[0] ^ 1)) {
        snprintf(err, MHE_ERR_LEN, "config.json: starts with a UTF-16 byte-order mark: JSON files are UTF-8");
        return 0;
    }
    err[0] = 0;
    j.s = (const unsigned char *)text;
    j.n = len;
    j.pos = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    j.err = err;
    if ((st = ij_value(&j, root, 0)) == MHE_OK) {
        mhe__json_ws(&j);
        if (j.pos != j.n) st = mhe__json_err(&j, j.pos, "text after the JSON value");
    }
    if (st == MHE_OK) return 1;
    ij_free(root);
    if (j.n - j.pos >= 3 && memcmp(text + j.pos, "\xEF\xBB\xBF", 3) == 0)   /* what a stray BOM is, whatever was expected */
        snprintf(err, MHE_ERR_LEN, "config.json: a UTF-8 byte-order mark (EF BB BF); only the file's first bytes may "
                 "hold one, at byte %lu", (unsigned long)j.pos);
    else if (strncmp(err, "header JSON: ", 13) == 0) {
        char e[MHE_ERR_LEN], *p;
        snprintf(e, sizeof e, "%s", err + 13);
        if ((p = strstr(e, "end of header")) != NULL) {   /* "(end of header)": the file's end */
            memcpy(p + 7, "file", 4);
            memmove(p + 11, p + 13, strlen(p + 13) + 1);
        }
        snprintf(err, MHE_ERR_LEN, "config.json: %.230s", e);
    }
    return 0;
}

/* ---- config.json to mhe_config ------------------------------------------- */

typedef struct {
    const ij_node *root;
    char *used;                  /* per top-level key: read by the mapping */
    char err[MHE_ERR_LEN];
    char gen[MHE_ERR_LEN];       /* generation settings set to other than transformers' defaults, for the note */
} imp_cfg;

static const ij_node *imp_key(imp_cfg *I, const char *key) {
    int i;
    for (i = 0; i < I->root->n_kids; i++)
        if (strcmp(I->root->kids[i].key, key) == 0) { I->used[i] = 1; return &I->root->kids[i]; }
    return NULL;
}

/* an integer key in [lo, hi]; absent: def (or refused when def < lo) */
static int imp_int(imp_cfg *I, const char *key, long lo, long hi, long def, int *out) {
    const ij_node *v = imp_key(I, key);
    if (!v) {
        if (def < lo) { snprintf(I->err, sizeof I->err, "config.json: '%s' is missing", key); return 0; }
        *out = (int)def;
        return 1;
    }
    if (v->type != IJ_NUM || !v->is_int || v->num < (double)lo || v->num > (double)hi) {
        snprintf(I->err, sizeof I->err, "config.json: '%s' must be an integer in [%ld, %ld]", key, lo, hi);
        return 0;
    }
    *out = (int)v->num;
    return 1;
}

static int imp_float(imp_cfg *I, const char *key, double def, float *out) {
    const ij_node *v = imp_key(I, key);
    if (!v) { *out = (float)def; return 1; }
    if (v->type != IJ_NUM || !(v->num > 0) || v->num > 1) { snprintf(I->err, sizeof I->err, "config.json: '%s' must be a number in (0, 1]", key); return 0; }
    *out = (float)v->num;
    return 1;
}

/* a boolean key that must be `want` (absent: def) */
static int imp_bool_is(imp_cfg *I, const char *key, int def, int want, const char *why) {
    const ij_node *v = imp_key(I, key);
    int b = def;
    if (v && v->type != IJ_BOOL) { snprintf(I->err, sizeof I->err, "config.json: '%s' must be true or false", key); return 0; }
    if (v) b = (int)v->num;
    if (b != want) { snprintf(I->err, sizeof I->err, "config.json: '%s' = %s is not supported: %s", key, b ? "true" : "false", why); return 0; }
    return 1;
}

static int imp_bool(imp_cfg *I, const char *key, int def, int *out) {
    const ij_node *v = imp_key(I, key);
    if (v && v->type != IJ_BOOL) { snprintf(I->err, sizeof I->err, "config.json: '%s' must be true or false", key); return 0; }
    *out = v ? (int)v->num : def;
    return 1;
}

/* Hugging Face's ACT2FN names that mhe computes exactly */
static int imp_activation(imp_cfg *I, const char *key, const char *def, int *act) {
    const ij_node *v = imp_key(I, key);
    const char *s = v ? (v->type == IJ_STR ? v->str : NULL) : def;
    if (!s) { snprintf(I->err, sizeof I->err, "config.json: '%s' must be a string", key); return 0; }
    if (strcmp(s, "gelu_new") == 0 || strcmp(s, "gelu_pytorch_tanh") == 0) *act = MHE_ACT_GELU;
    else if (strcmp(s, "gelu") == 0) *act = MHE_ACT_GELU_ERF;
    else if (strcmp(s, "relu") == 0) *act = MHE_ACT_RELU;
    else if (strcmp(s, "silu") == 0 || strcmp(s, "swish") == 0) *act = MHE_ACT_SILU;
    else { snprintf(I->err, sizeof I->err, "config.json: '%s' = \"%.40s\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)", key, s); return 0; }
    return 1;
}

/* keys that change nothing the forward pass computes, in any value that
   PretrainedConfig of transformers 4.x or 5.x writes: dropout rates (an
   import is for inference and fine-tuning with mhe's own dropout setting),
   token ids, names, bookkeeping, the dtype the weights were kept in (the
   file's tensors say it, and mhe widens them to float32), options of the
   Python object (outputs returned, attention backend, TorchScript, chunked
   MLP: the same numbers); GPT-2's summary_* belong to the double-heads
   model, whose extra tensors are refused; problem_type matters to a
   classifier only (imp_labels reads it there) */
static const char *const imp_inert[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "use_bfloat16", "transformers_version", "_name_or_path",
    "_commit_hash", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_first_dropout", "summary_activation",
    "summary_proj_to_labels", "summary_type", "summary_use_proj", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "classifier_dropout", "task_specific_params", "gradient_checkpointing", "output_past", "finetuning_task",
    "tokenizer_class", "prefix", "reorder_and_upcast_attn", "chunk_size_feed_forward", "return_dict",
    "output_hidden_states", "output_attentions", "id2label", "label2id", "torchscript", "tf_legacy_loss", "xla_device",
    "_attn_implementation", "_attn_implementation_autoset", "attn_implementation", "problem_type",
};

/* transformers' generate() settings, which 4.x configs carry (5.x keeps them
   in generation_config.json): not part of the model, so any value is
   accepted; one other than the default is named in the import's note,
   since mhe generate takes its own flags. def: the default (IJ_NULL: null) */
static const struct { const char *key; int type; double def; } imp_gen_keys[] = {
    { "max_length", IJ_NUM, 20 }, { "min_length", IJ_NUM, 0 }, { "do_sample", IJ_BOOL, 0 }, { "early_stopping", IJ_BOOL, 0 },
    { "num_beams", IJ_NUM, 1 }, { "num_beam_groups", IJ_NUM, 1 }, { "diversity_penalty", IJ_NUM, 0 }, { "temperature", IJ_NUM, 1 },
    { "top_k", IJ_NUM, 50 }, { "top_p", IJ_NUM, 1 }, { "typical_p", IJ_NUM, 1 }, { "repetition_penalty", IJ_NUM, 1 },
    { "length_penalty", IJ_NUM, 1 }, { "no_repeat_ngram_size", IJ_NUM, 0 }, { "encoder_no_repeat_ngram_size", IJ_NUM, 0 },
    { "bad_words_ids", IJ_NULL, 0 }, { "num_return_sequences", IJ_NUM, 1 }, { "output_scores", IJ_BOOL, 0 },
    { "return_dict_in_generate", IJ_BOOL, 0 }, { "forced_bos_token_id", IJ_NULL, 0 }, { "forced_eos_token_id", IJ_NULL, 0 },
    { "remove_invalid_values", IJ_BOOL, 0 }, { "exponential_decay_length_penalty", IJ_NULL, 0 }, { "suppress_tokens", IJ_NULL, 0 },
    { "begin_suppress_tokens", IJ_NULL, 0 },
};

/* PretrainedConfig keys for other model shapes, accepted at the value that
   leaves a GPT-2 or BERT as it is: heads pruned (pruned_heads: {}) change
   the tensors, the others belong to encoder-decoder wrappers */
static int imp_common(imp_cfg *I) {
    const ij_node *v;
    if (!imp_bool_is(I, "is_encoder_decoder", 0, 0, "mhe imports decoder-only GPT-2 and encoder-only BERT")
        || !imp_bool_is(I, "tie_encoder_decoder", 0, 0, "it ties an encoder-decoder pair, which this is not"))
        return 0;
    if ((v = imp_key(I, "pruned_heads")) != NULL && !(v->type == IJ_OBJ && v->n_kids == 0)) {
        snprintf(I->err, sizeof I->err, "config.json: 'pruned_heads' is not {}: a model with pruned attention heads is not supported");
        return 0;
    }
    if ((v = imp_key(I, "cross_attention_hidden_size")) != NULL && v->type != IJ_NULL) {
        snprintf(I->err, sizeof I->err, "config.json: 'cross_attention_hidden_size' is not null: cross-attention is not supported");
        return 0;
    }
    return 1;
}

static int imp_leftover(imp_cfg *I, const char *model) {
    int i;
    size_t k, g;
    for (i = 0; i < I->root->n_kids; i++) {
        const ij_node *v = &I->root->kids[i];
        if (I->used[i]) continue;
        for (g = 0; g < sizeof imp_gen_keys / sizeof imp_gen_keys[0] && strcmp(imp_gen_keys[g].key, v->key) != 0; g++) {}
        if (g < sizeof imp_gen_keys / sizeof imp_gen_keys[0]) {
            if (v->type != imp_gen_keys[g].type || (v->type != IJ_NULL && v->num != imp_gen_keys[g].def)) {
                size_t n = strlen(I->gen);
                snprintf(I->gen + n, sizeof I->gen - n, "%s%s", n ? ", " : "", v->key);
            }
            continue;
        }
        for (k = 0; k < sizeof imp_inert / sizeof imp_inert[0] && strcmp(imp_inert[k], I->root->kids[i].key) != 0; k++) {}
        if (k == sizeof imp_inert / sizeof imp_inert[0]) {
            snprintf(I->err, sizeof I->err, "config.json: key '%.60s' is not a %s setting mhe maps; refused rather than ignored", I->root->kids[i].key, model);
            return 0;
        }
    }
    return 1;
}

/* the classes of a sequence-classification head: num_labels, or id2label's size */
static int imp_labels(imp_cfg *I, int *K) {
    const ij_node *n = imp_key(I, "num_labels"), *m = imp_key(I, "id2label"), *pt = imp_key(I, "problem_type");
    *K = m && m->type == IJ_OBJ ? m->n_kids : 2;
    if (n && (n->type != IJ_NUM || !n->is_int || n->num < 1 || n->num > 1e6)) { snprintf(I->err, sizeof I->err, "config.json: 'num_labels' must be a positive integer"); return 0; }
    if (n) *K = (int)n->num;
    if (pt && !(pt->type == IJ_NULL || (pt->type == IJ_STR && strcmp(pt->str, "single_label_classification") == 0))) {
        snprintf(I->err, sizeof I->err, "config.json: 'problem_type' must be single_label_classification (mhe's head is a softmax over classes)");
        return 0;
    }
    return 1;
}

/* ---- tensors ------------------------------------------------------------- */

typedef struct {
    const mhe_safetensors *st;
    char *used;                  /* per tensor of the file */
    const char *prefix;          /* "transformer." / "bert." or "" */
    int drop_nsp;                /* a BertForPreTraining file: its next-sentence head and pooler are not imported */
    char err[MHE_ERR_LEN];
} imp_src;

static const mhe_st_tensor *imp_find(imp_src *S, const char *name, int *idx) {
    char full[MHE_NAME_LEN * 2];
    const mhe_st_tensor *t;
    snprintf(full, sizeof full, "%s%s", name[0] == '/' ? "" : S->prefix, name[0] == '/' ? name + 1 : name);
    t = mhe_st_find(S->st, full);
    if (!t) {   /* BERT's original TensorFlow names, kept by the hub's converted files: LayerNorm.gamma, .beta */
        size_t n = strlen(full);
        char alt[MHE_NAME_LEN * 2 + 8];
        if (n > 16 && strcmp(full + n - 16, "LayerNorm.weight") == 0) snprintf(alt, sizeof alt, "%.*sgamma", (int)(n - 6), full);
        else if (n > 14 && strcmp(full + n - 14, "LayerNorm.bias") == 0) snprintf(alt, sizeof alt, "%.*sbeta", (int)(n - 4), full);
        else alt[0] = 0;
        if (alt[0]) t = mhe_st_find(S->st, alt);
    }
    if (!t) { snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.150s' is missing", full); return NULL; }
    *idx = (int)(t - S->st->tensors);
    return t;
}

static float imp_elem(const mhe_st_tensor *t, int64_t i) {
    const unsigned char *b = t->data;
    uint32_t u;
    float f;
    if (t->dtype == MHE_DTYPE_F64) {
        double d;
        uint64_t q = 0;
        int k;
        for (k = 7; k >= 0; k--) q = q << 8 | b[8 * i + k];
        memcpy(&d, &q, 8);
        return (float)d;
    }
    if (t->dtype == MHE_DTYPE_F32) u = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    else if (t->dtype == MHE_DTYPE_BF16) u = (uint32_t)(b[2 * i] | b[2 * i + 1] << 8) << 16;
    else {   /* F16 (IEEE binary16) */
        uint32_t h = (uint32_t)(b[2 * i] | b[2 * i + 1] << 8), s = (h & 0x8000u) << 16, e = h >> 10 & 31, m = h & 0x3FF;
        if (e == 0) { f = (float)m * (1.0f / 16777216.0f); return s ? -f : f; }   /* zero and subnormals: m 2^-24 */
        u = s | (e == 31 ? 0x7F800000u | m << 13 : (e + 112) << 23 | m << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}

enum { IMP_COPY, IMP_T_COLS, IMP_COLS1 };

/* dst from a source tensor: COPY (same shape), T_COLS (Conv1D [in, out]:
   dst[o][i] = src[i][col0 + o] for dst [rows, in]), COLS1 (a 1-D slice
   src[col0 .. col0 + dst size)). want0, want1 is the source shape config.json
   implies (want1 = 0: 1-D). */
static int imp_put(imp_src *S, mhe_tensor *dst, const char *name, int mode, int64_t want0, int64_t want1, int64_t col0) {
    int idx;
    int64_t i, j;
    const mhe_st_tensor *t = imp_find(S, name, &idx);
    if (!t) return 0;
    if (t->dtype != MHE_DTYPE_F32 && t->dtype != MHE_DTYPE_F16 && t->dtype != MHE_DTYPE_BF16 && t->dtype != MHE_DTYPE_F64) {
        snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.150s' is not a float tensor (F32, F16, BF16, F64)", t->name); return 0;
    }
    if (t->ndim != (want1 ? 2 : 1) || t->shape[0] != want0 || (want1 && t->shape[1] != want1)) {
        char got[80] = "", *g = got;
        int d;
        for (d = 0; d < t->ndim && g < got + 60; d++) g += snprintf(g, (size_t)(got + sizeof got - g), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (want1) snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.100s' has shape [%.60s], config.json implies [%lld, %lld]", t->name, got, (long long)want0, (long long)want1);
        else snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.100s' has shape [%.60s], config.json implies [%lld]", t->name, got, (long long)want0);
        return 0;
    }
    S->used[idx] = 1;
    if (mode == IMP_COPY) for (i = 0; i < dst->size; i++) dst->data[i] = imp_elem(t, i);
    else if (mode == IMP_COLS1) for (i = 0; i < dst->size; i++) dst->data[i] = imp_elem(t, col0 + i);
    else {
        int64_t rows = dst->shape[0], in = dst->shape[1];
        for (i = 0; i < rows; i++)
            for (j = 0; j < in; j++) dst->data[i * in + j] = imp_elem(t, j * want1 + col0 + i);
    }
    return 1;
}

/* a tensor that duplicates one already read (a tied decoder, a saved
   causal-mask buffer): accepted only where it is that and nothing else */
static int imp_tied(imp_src *S, const char *name, const mhe_tensor *same) {
    int64_t i;
    char full[MHE_NAME_LEN * 2];
    const mhe_st_tensor *t;
    snprintf(full, sizeof full, "%s%s", name[0] == '/' ? "" : S->prefix, name[0] == '/' ? name + 1 : name);
    if (!(t = mhe_st_find(S->st, full))) return 1;
    if (t->size != same->size) { snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.150s' should be tied to the embeddings but has another shape", full); return 0; }
    if (t->dtype != MHE_DTYPE_F32 && t->dtype != MHE_DTYPE_F16 && t->dtype != MHE_DTYPE_BF16 && t->dtype != MHE_DTYPE_F64) {
        snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.150s' is not a float tensor", full); return 0;
    }
    for (i = 0; i < t->size; i++)
        if (imp_elem(t, i) != same->data[i]) {
            snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.150s' differs from the embeddings it is tied to (tie_word_embeddings is true)", full);
            return 0;
        }
    S->used[(int)(t - S->st->tensors)] = 1;
    return 1;
}

/* GPT-2 checkpoints from older transformers carry the causal mask as a buffer */
static void imp_mask_buffers(imp_src *S, int L) {
    int l, k;
    char nm[MHE_NAME_LEN * 2];
    for (l = 0; l < L; l++)
        for (k = 0; k < 2; k++) {
            const mhe_st_tensor *t;
            snprintf(nm, sizeof nm, "%sh.%d.attn.%s", S->prefix, l, k ? "masked_bias" : "bias");
            if ((t = mhe_st_find(S->st, nm)) != NULL && (t->ndim == 4 || t->ndim == 0)) S->used[(int)(t - S->st->tensors)] = 1;
        }
}

static int imp_extra(imp_src *S) {
    int i, nsp = 0;
    for (i = 0; i < S->st->n_tensors; i++) nsp |= !S->used[i] && strncmp(S->st->tensors[i].name, "cls.seq_relationship.", 21) == 0;
    for (i = 0; i < S->st->n_tensors; i++)
        if (!S->used[i]) {
            snprintf(S->err, sizeof S->err, "model.safetensors: tensor '%.90s' has no place in the mhe model (extra tensor)%s", S->st->tensors[i].name,
                     nsp ? "; a BertForPreTraining file: --drop-nsp leaves its next-sentence head and pooler out" : "");
            return 0;
        }
    return 1;
}

/* ---- the two architectures ------------------------------------------------ */

static int imp_gpt2_config(imp_cfg *I, imp_src *S, mhe_config *c) {
    int inner = 0, tie = 1, l, n_ctx = 0;
    const ij_node *ni;
    (void)S;
    c->arch = MHE_ARCH_DECODER;
    if (!imp_int(I, "vocab_size", 1, 1 << 24, -1, &c->vocab_size) || !imp_int(I, "n_embd", 1, 1 << 16, -1, &c->d_model)
        || !imp_int(I, "n_head", 1, 4096, -1, &c->n_heads) || !imp_int(I, "n_layer", 1, MHE_MAX_LAYERS, -1, &c->n_layers)
        || !imp_int(I, "n_positions", 1, 1 << 20, -1, &c->max_seq_len) || !imp_int(I, "n_ctx", 1, 1 << 20, c->max_seq_len, &n_ctx)
        || !imp_activation(I, "activation_function", "gelu_new", &c->activation) || !imp_float(I, "layer_norm_epsilon", 1e-5, &c->norm_eps)
        || !imp_bool_is(I, "scale_attn_weights", 1, 1, "mhe scales attention logits by 1/sqrt(d_head)")
        || !imp_bool_is(I, "scale_attn_by_inverse_layer_idx", 0, 0, "mhe has no per-layer attention scale")
        || !imp_bool_is(I, "add_cross_attention", 0, 0, "a GPT-2 with cross-attention is not a decoder-only model")
        || !imp_bool(I, "tie_word_embeddings", 1, &tie) || !imp_common(I))
        return 0;
    /* GPT2Model is causal whatever is_decoder says (PretrainedConfig writes false) */
    if (imp_key(I, "is_decoder") && imp_key(I, "is_decoder")->type != IJ_BOOL) { snprintf(I->err, sizeof I->err, "config.json: 'is_decoder' must be true or false"); return 0; }
    if (n_ctx != c->max_seq_len) { snprintf(I->err, sizeof I->err, "config.json: 'n_ctx' = %d differs from 'n_positions' = %d", n_ctx, c->max_seq_len); return 0; }
    if ((ni = imp_key(I, "n_inner")) != NULL && ni->type != IJ_NULL) {
        if (ni->type != IJ_NUM || !ni->is_int || ni->num < 1 || ni->num > (1 << 20)) { snprintf(I->err, sizeof I->err, "config.json: 'n_inner' must be null or a positive integer"); return 0; }
        inner = (int)ni->num;
    }
    if (c->d_model % c->n_heads) { snprintf(I->err, sizeof I->err, "config.json: 'n_embd' = %d is not a multiple of 'n_head' = %d", c->d_model, c->n_heads); return 0; }
    c->d_ff = inner ? inner : 4 * c->d_model;
    c->tie_embeddings = tie;
    c->norm = MHE_NORM_LAYERNORM; c->post_norm = 0; c->bias = 1;
    for (l = 0; l < c->n_layers; l++) c->attn[l] = MHE_ATTN_MHA;
    return imp_leftover(I, "GPT-2");
}

static int imp_gpt2_tensors(imp_src *S, mhe_model *m) {
    const mhe_config *c = &m->cfg;
    int C = c->d_model, F = mhe_config_d_ff(c), V = c->vocab_size, l;
    char nm[MHE_NAME_LEN];
    if (!imp_put(S, m->tok_emb, "wte.weight", IMP_COPY, V, C, 0) || !imp_put(S, m->pos_emb, "wpe.weight", IMP_COPY, c->max_seq_len, C, 0)) return 0;
    for (l = 0; l < c->n_layers; l++) {
        mhe_layer *y = &m->layers[l];
#define IMP_P(dst, suffix, mode, a, b, col) (snprintf(nm, sizeof nm, "h.%d.%s", l, suffix), imp_put(S, dst, nm, mode, a, b, col))
        /* Conv1D stores [in, out] (y = x W + b); c_attn's out is Q | K | V */
        if (!IMP_P(y->norm1_w, "ln_1.weight", IMP_COPY, C, 0, 0) || !IMP_P(y->norm1_b, "ln_1.bias", IMP_COPY, C, 0, 0)
            || !IMP_P(y->attn.wq, "attn.c_attn.weight", IMP_T_COLS, C, 3 * C, 0) || !IMP_P(y->attn.wk, "attn.c_attn.weight", IMP_T_COLS, C, 3 * C, C)
            || !IMP_P(y->attn.wv, "attn.c_attn.weight", IMP_T_COLS, C, 3 * C, 2 * C)
            || !IMP_P(y->attn.bq, "attn.c_attn.bias", IMP_COLS1, 3 * C, 0, 0) || !IMP_P(y->attn.bk, "attn.c_attn.bias", IMP_COLS1, 3 * C, 0, C)
            || !IMP_P(y->attn.bv, "attn.c_attn.bias", IMP_COLS1, 3 * C, 0, 2 * C)
            || !IMP_P(y->attn.wo, "attn.c_proj.weight", IMP_T_COLS, C, C, 0) || !IMP_P(y->attn.bo, "attn.c_proj.bias", IMP_COPY, C, 0, 0)
            || !IMP_P(y->norm2_w, "ln_2.weight", IMP_COPY, C, 0, 0) || !IMP_P(y->norm2_b, "ln_2.bias", IMP_COPY, C, 0, 0)
            || !IMP_P(y->fc1_w, "mlp.c_fc.weight", IMP_T_COLS, C, F, 0) || !IMP_P(y->fc1_b, "mlp.c_fc.bias", IMP_COPY, F, 0, 0)
            || !IMP_P(y->fc2_w, "mlp.c_proj.weight", IMP_T_COLS, F, C, 0) || !IMP_P(y->fc2_b, "mlp.c_proj.bias", IMP_COPY, C, 0, 0))
            return 0;
#undef IMP_P
    }
    if (!imp_put(S, m->lnf_w, "ln_f.weight", IMP_COPY, C, 0, 0) || !imp_put(S, m->lnf_b, "ln_f.bias", IMP_COPY, C, 0, 0)) return 0;
    if (c->tie_embeddings) { if (!imp_tied(S, "/lm_head.weight", m->tok_emb)) return 0; }
    else if (!imp_put(S, m->lm_head, "/lm_head.weight", IMP_COPY, V, C, 0)) return 0;
    imp_mask_buffers(S, c->n_layers);
    return imp_extra(S);
}

/* a buffer BertEmbeddings saves beside its weights: position_ids [1, P]
   = 0 .. P-1, token_type_ids [1, P] = 0; accepted only as exactly that */
static int imp_bert_buffer(imp_src *S, const char *name, int P, int arange) {
    char full[MHE_NAME_LEN * 2];
    const mhe_st_tensor *t;
    int64_t i;
    snprintf(full, sizeof full, "%s%s", S->prefix, name);
    if (!(t = mhe_st_find(S->st, full))) return 1;
    if (t->dtype != MHE_DTYPE_I64 || t->ndim != 2 || t->shape[0] != 1 || t->shape[1] > P) {
        snprintf(S->err, sizeof S->err, "model.safetensors: buffer '%.150s' is not an I64 [1, <= %d] tensor", full, P); return 0;
    }
    for (i = 0; i < t->size; i++) {
        uint64_t q = 0;
        int k;
        for (k = 7; k >= 0; k--) q = q << 8 | t->data[8 * i + k];
        if (q != (uint64_t)(arange ? i : 0)) {
            snprintf(S->err, sizeof S->err, "model.safetensors: buffer '%.150s' holds %s other than %s: another position or type scheme",
                     full, arange ? "positions" : "types", arange ? "0, 1, 2, ..." : "0");
            return 0;
        }
    }
    S->used[(int)(t - S->st->tensors)] = 1;
    return 1;
}

static int imp_has(const imp_src *S, const char *name) {
    char full[MHE_NAME_LEN * 2];
    snprintf(full, sizeof full, "%s%s", name[0] == '/' ? "" : S->prefix, name[0] == '/' ? name + 1 : name);
    return mhe_st_find(S->st, full) != NULL;
}

/* BertForMaskedLM (the MLM head: transform and output bias) or
   BertForSequenceClassification (pooler and classifier), told apart by the
   tensors the file holds */
static int imp_bert_config(imp_cfg *I, imp_src *S, mhe_config *c) {
    int tie = 1, l, types = 2;
    const ij_node *pe;
    int mlm = imp_has(S, "/cls.predictions.bias"), cls = imp_has(S, "/classifier.weight");
    c->arch = MHE_ARCH_ENCODER;
    if (!imp_int(I, "vocab_size", 1, 1 << 24, -1, &c->vocab_size) || !imp_int(I, "hidden_size", 1, 1 << 16, -1, &c->d_model)
        || !imp_int(I, "num_attention_heads", 1, 4096, -1, &c->n_heads) || !imp_int(I, "num_hidden_layers", 1, MHE_MAX_LAYERS, -1, &c->n_layers)
        || !imp_int(I, "intermediate_size", 1, 1 << 20, -1, &c->d_ff) || !imp_int(I, "max_position_embeddings", 1, 1 << 20, 512, &c->max_seq_len)
        || !imp_int(I, "type_vocab_size", 0, 65536, 2, &types)
        || !imp_activation(I, "hidden_act", "gelu", &c->activation) || !imp_float(I, "layer_norm_eps", 1e-12, &c->norm_eps)
        || !imp_bool_is(I, "is_decoder", 0, 0, "mhe imports BERT as an encoder")
        || !imp_bool_is(I, "add_cross_attention", 0, 0, "a BERT with cross-attention is not an encoder-only model")
        || !imp_bool(I, "tie_word_embeddings", 1, &tie) || !imp_common(I))
        return 0;
    if ((pe = imp_key(I, "position_embedding_type")) != NULL && (pe->type != IJ_STR || strcmp(pe->str, "absolute") != 0)) {
        snprintf(I->err, sizeof I->err, "config.json: 'position_embedding_type' = %s%.40s%s is not supported (absolute: learned positions)",
                 pe->type == IJ_STR ? "\"" : "", pe->type == IJ_STR ? pe->str : "a non-string", pe->type == IJ_STR ? "\"" : "");
        return 0;
    }
    if (c->d_model % c->n_heads) { snprintf(I->err, sizeof I->err, "config.json: 'hidden_size' = %d is not a multiple of 'num_attention_heads' = %d", c->d_model, c->n_heads); return 0; }
    if (mlm == cls) {
        snprintf(I->err, sizeof I->err, "model.safetensors: %s", mlm ? "both an MLM head (cls.predictions) and a classifier: import BertForMaskedLM or BertForSequenceClassification"
                                                                     : "no head (cls.predictions.* or classifier.*): import a BertForMaskedLM or BertForSequenceClassification checkpoint");
        return 0;
    }
    if (cls && S->drop_nsp) { snprintf(I->err, sizeof I->err, "--drop-nsp is for a pre-training checkpoint imported as a masked LM; this one has a classifier"); return 0; }
    if (cls) {
        if (!imp_labels(I, &c->n_classes)) return 0;
        if (!imp_has(S, "pooler.dense.weight")) { snprintf(I->err, sizeof I->err, "model.safetensors: tensor '%spooler.dense.weight' is missing (the classifier reads the pooler)", S->prefix); return 0; }
        c->cls_pool = MHE_POOL_FIRST;
    } else {
        c->head_transform = 1; c->head_bias = 1;
    }
    c->tie_embeddings = tie;
    c->type_vocab = types;
    c->emb_norm = 1;
    c->norm = MHE_NORM_LAYERNORM; c->post_norm = 1; c->bias = 1;
    for (l = 0; l < c->n_layers; l++) c->attn[l] = MHE_ATTN_MHA;
    return imp_leftover(I, "BERT");
}

static int imp_bert_tensors(imp_src *S, mhe_model *m) {
    const mhe_config *c = &m->cfg;
    int C = c->d_model, F = mhe_config_d_ff(c), V = c->vocab_size, l;
    char nm[MHE_NAME_LEN];
    if (!imp_put(S, m->tok_emb, "embeddings.word_embeddings.weight", IMP_COPY, V, C, 0)
        || !imp_put(S, m->pos_emb, "embeddings.position_embeddings.weight", IMP_COPY, c->max_seq_len, C, 0)
        || (c->type_vocab && !imp_put(S, m->type_emb, "embeddings.token_type_embeddings.weight", IMP_COPY, c->type_vocab, C, 0))
        || !imp_put(S, m->emb_norm_w, "embeddings.LayerNorm.weight", IMP_COPY, C, 0, 0)
        || !imp_put(S, m->emb_norm_b, "embeddings.LayerNorm.bias", IMP_COPY, C, 0, 0)
        || !imp_bert_buffer(S, "embeddings.position_ids", c->max_seq_len, 1) || !imp_bert_buffer(S, "embeddings.token_type_ids", c->max_seq_len, 0))
        return 0;
    for (l = 0; l < c->n_layers; l++) {
        mhe_layer *y = &m->layers[l];
        /* nn.Linear [out, in], as mhe; the post-norm after attention is norm1, after the MLP norm2 */
#define IMP_B(dst, suffix, a, b) (snprintf(nm, sizeof nm, "encoder.layer.%d.%s", l, suffix), imp_put(S, dst, nm, IMP_COPY, a, b, 0))
        if (!IMP_B(y->attn.wq, "attention.self.query.weight", C, C) || !IMP_B(y->attn.bq, "attention.self.query.bias", C, 0)
            || !IMP_B(y->attn.wk, "attention.self.key.weight", C, C) || !IMP_B(y->attn.bk, "attention.self.key.bias", C, 0)
            || !IMP_B(y->attn.wv, "attention.self.value.weight", C, C) || !IMP_B(y->attn.bv, "attention.self.value.bias", C, 0)
            || !IMP_B(y->attn.wo, "attention.output.dense.weight", C, C) || !IMP_B(y->attn.bo, "attention.output.dense.bias", C, 0)
            || !IMP_B(y->norm1_w, "attention.output.LayerNorm.weight", C, 0) || !IMP_B(y->norm1_b, "attention.output.LayerNorm.bias", C, 0)
            || !IMP_B(y->fc1_w, "intermediate.dense.weight", F, C) || !IMP_B(y->fc1_b, "intermediate.dense.bias", F, 0)
            || !IMP_B(y->fc2_w, "output.dense.weight", C, F) || !IMP_B(y->fc2_b, "output.dense.bias", C, 0)
            || !IMP_B(y->norm2_w, "output.LayerNorm.weight", C, 0) || !IMP_B(y->norm2_b, "output.LayerNorm.bias", C, 0))
            return 0;
#undef IMP_B
    }
    if (c->head_transform) {
        if (!imp_put(S, m->head_w, "/cls.predictions.transform.dense.weight", IMP_COPY, C, C, 0)
            || !imp_put(S, m->head_b, "/cls.predictions.transform.dense.bias", IMP_COPY, C, 0, 0)
            || !imp_put(S, m->head_norm_w, "/cls.predictions.transform.LayerNorm.weight", IMP_COPY, C, 0, 0)
            || !imp_put(S, m->head_norm_b, "/cls.predictions.transform.LayerNorm.bias", IMP_COPY, C, 0, 0))
            return 0;
        /* transformers 4.x makes decoder.bias the head's bias; 5.x ties the two
           only with the embeddings, and an untied decoder adds its own bias,
           the head's then being a parameter that forward never reads */
        if (!c->tie_embeddings && imp_has(S, "/cls.predictions.decoder.bias")) {
            int idx;
            if (!imp_put(S, m->lm_b, "/cls.predictions.decoder.bias", IMP_COPY, V, 0, 0) || !imp_find(S, "/cls.predictions.bias", &idx)) return 0;
            S->used[idx] = 1;
        } else if (!imp_put(S, m->lm_b, "/cls.predictions.bias", IMP_COPY, V, 0, 0) || !imp_tied(S, "/cls.predictions.decoder.bias", m->lm_b))
            return 0;
        if (c->tie_embeddings) { if (!imp_tied(S, "/cls.predictions.decoder.weight", m->tok_emb)) return 0; }
        else if (!imp_put(S, m->lm_head, "/cls.predictions.decoder.weight", IMP_COPY, V, C, 0)) return 0;
        if (S->drop_nsp) {   /* as BertForMaskedLM.from_pretrained does with a pre-training checkpoint */
            static const char *const nsp[] = { "/cls.seq_relationship.weight", "/cls.seq_relationship.bias", "pooler.dense.weight", "pooler.dense.bias" };
            size_t k;
            for (k = 0; k < sizeof nsp / sizeof nsp[0]; k++) {
                char full[MHE_NAME_LEN * 2];
                const mhe_st_tensor *t;
                snprintf(full, sizeof full, "%s%s", nsp[k][0] == '/' ? "" : S->prefix, nsp[k][0] == '/' ? nsp[k] + 1 : nsp[k]);
                if ((t = mhe_st_find(S->st, full)) != NULL) S->used[(int)(t - S->st->tensors)] = 1;
            }
        }
    } else if (!imp_put(S, m->pooler_w, "pooler.dense.weight", IMP_COPY, C, C, 0) || !imp_put(S, m->pooler_b, "pooler.dense.bias", IMP_COPY, C, 0, 0)
               || !imp_put(S, m->cls_w, "/classifier.weight", IMP_COPY, c->n_classes, C, 0) || !imp_put(S, m->cls_b, "/classifier.bias", IMP_COPY, c->n_classes, 0, 0)) {
        return 0;
    }
    return imp_extra(S);
}

/* ---- mhe import ----------------------------------------------------------- */

typedef struct {
    int (*config)(imp_cfg *, imp_src *, mhe_config *);
    int (*tensors)(imp_src *, mhe_model *);
} imp_arch;

/* DIR/tokenizer.json, when there is one, attached to the model: a byte-level
   BPE (GPT-2's) or a WordPiece (BERT's), read by mhe_bpe_load_hf, with the
   model's vocab_size tokens. A file that is neither, or a broken one, is an
   error (nothing is written). Returns 1, or 0 with err. */
static int imp_tokenizer(const char *path, mhe_model *m, char *note, char *err) {
    void *buf = NULL;
    size_t len = 0;
    mhe_bpe b;
    int ok = 0;
#ifndef _WIN32
    struct stat sb;
    note[0] = 0;
    /* only no entry at all means no tokenizer: a symlink to nowhere, a loop, a FIFO or a directory is refused by mhe_read_file */
    if (lstat(path, &sb) != 0 && errno == ENOENT) { snprintf(note, MHE_ERR_LEN, "no tokenizer.json: the model takes token ids (--ids)"); return 1; }
#else
    struct _stat64 sb;
    note[0] = 0;
    if (_stat64(path, &sb) != 0 && errno == ENOENT) { snprintf(note, MHE_ERR_LEN, "no tokenizer.json: the model takes token ids (--ids)"); return 1; }
#endif
    if (mhe_read_file(path, &buf, &len, NULL, err) != MHE_OK) return 0;
    mhe_bpe_init(&b, NULL);
    if (mhe_bpe_load_hf(&b, (const char *)buf, len) != MHE_OK) snprintf(err, MHE_ERR_LEN, "%.240s", b.err);
    else if (b.n_tokens != m->cfg.vocab_size)
        snprintf(err, MHE_ERR_LEN, "tokenizer.json has %d tokens, config.json's vocab_size is %d", b.n_tokens, m->cfg.vocab_size);
    else if (mhe_model_set_bpe(m, &b) != MHE_OK) snprintf(err, MHE_ERR_LEN, "tokenizer.json: %.200s", m->err);
    else {
        snprintf(note, MHE_ERR_LEN, "tokenizer.json attached (%s, %d tokens): eval, generate and train read text",
                 b.model == MHE_TOK_WORDPIECE ? "WordPiece" : "byte-level BPE", b.n_tokens);
        ok = 1;
    }
    mhe_bpe_free(&b);
    free(buf);
    return ok;
}

/* Reads DIR/config.json and DIR/model.safetensors (and DIR/tokenizer.json,
   when there is one: imp_tokenizer), builds the model and saves it to out
   (atomically). Returns 1, or 0 with err set; note says what became of the
   tokenizer. */
static int imp_run(const char *dir, const char *out, int mask_token, int drop_nsp, char *note, char *err) {
    char path[MHE_PATH_LEN + 32];
    void *cbuf = NULL, *wbuf = NULL;
    size_t clen = 0, wlen = 0;
    ij_node root;
    imp_cfg I;
    imp_src S;
    mhe_safetensors st;
    mhe_config c = mhe_config_default();
    mhe_model m;
    const ij_node *mt;
    int ok = 0, have_root = 0, have_st = 0, have_m = 0;
    const char *probe = NULL;
    imp_arch A;
    memset(&I, 0, sizeof I); memset(&S, 0, sizeof S); memset(&st, 0, sizeof st); memset(&A, 0, sizeof A);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (mhe_read_file(path, &cbuf, &clen, NULL, err) != MHE_OK) goto done;
    if (!ij_parse((const char *)cbuf, clen, &root, err)) goto done;
    have_root = 1;
    if (root.type != IJ_OBJ) { snprintf(err, MHE_ERR_LEN, "config.json: the top level is not an object"); goto done; }
    I.root = &root;
    if (!(I.used = (char *)calloc((size_t)root.n_kids + 1, 1))) { snprintf(err, MHE_ERR_LEN, "out of memory"); goto done; }
    mt = imp_key(&I, "model_type");
    if (!mt || mt->type != IJ_STR) { snprintf(err, MHE_ERR_LEN, "config.json: 'model_type' is missing (gpt2 or bert)"); goto done; }
    if (strcmp(mt->str, "gpt2") == 0) { A.config = imp_gpt2_config; A.tensors = imp_gpt2_tensors; S.prefix = "transformer."; probe = "wte.weight"; }
    else if (strcmp(mt->str, "bert") == 0) { A.config = imp_bert_config; A.tensors = imp_bert_tensors; S.prefix = "bert."; probe = "embeddings.word_embeddings.weight"; }
    else { snprintf(err, MHE_ERR_LEN, "config.json: 'model_type' = \"%.40s\" is not supported (gpt2, bert)", mt->str); goto done; }
    if (drop_nsp && A.config != imp_bert_config) { snprintf(err, MHE_ERR_LEN, "--drop-nsp is for BERT pre-training checkpoints; this is a %.20s", mt->str); goto done; }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (mhe_read_file(path, &wbuf, &wlen, NULL, err) != MHE_OK) goto done;
    if (mhe_st_parse(&st, wbuf, wlen, NULL) != MHE_OK) { snprintf(err, MHE_ERR_LEN, "model.safetensors: %.200s", st.err); goto done; }
    have_st = 1;
    S.st = &st;
    S.drop_nsp = drop_nsp;
    if (!(S.used = (char *)calloc((size_t)st.n_tensors + 1, 1))) { snprintf(err, MHE_ERR_LEN, "out of memory"); goto done; }
    {   /* a bare *Model checkpoint has no prefix, a *LMHeadModel / *ForMaskedLM one has */
        char full[64];
        snprintf(full, sizeof full, "%s%s", S.prefix, probe);
        if (!mhe_st_find(&st, full)) S.prefix = "";
    }
    c.dropout = 0; c.attn_dropout = 0;
    if (!A.config(&I, &S, &c)) { memcpy(err, I.err[0] ? I.err : S.err, MHE_ERR_LEN); goto done; }
    if (mask_token >= 0 && c.arch != MHE_ARCH_ENCODER) {   /* a decoder never masks: the id would be stored and do nothing */
        snprintf(err, MHE_ERR_LEN, "--mask-token is the [MASK] id of a BERT's masked LM; a %.20s decoder has no use for it", mt->str);
        goto done;
    }
    if (mask_token >= 0) c.mask_token = mask_token;
    if (mhe_config_validate(&c, err) != MHE_OK) {
        char why[MHE_ERR_LEN];
        memcpy(why, err, MHE_ERR_LEN);
        snprintf(err, MHE_ERR_LEN, "config.json: not an mhe model: %.200s", why);
        goto done;
    }
    if (mhe_model_init(&m, &c, 1, NULL) != MHE_OK) { snprintf(err, MHE_ERR_LEN, "%s", m.err); goto done; }
    have_m = 1;
    if (!A.tensors(&S, &m)) { memcpy(err, S.err, MHE_ERR_LEN); goto done; }
    if (mhe_model_check_finite(&m) != MHE_OK) { snprintf(err, MHE_ERR_LEN, "model.safetensors: %.200s", m.err); goto done; }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!imp_tokenizer(path, &m, note, err)) goto done;
    if (I.gen[0]) {
        size_t n = strlen(note);
        snprintf(note + n, IMP_NOTE_LEN - n, "\nconfig.json's generate() settings (%.120s) are not part of the model: mhe generate takes its own flags", I.gen);
    }
    if (mhe_checkpoint_save(&m, NULL, out) != MHE_OK) { snprintf(err, MHE_ERR_LEN, "%s", m.err); goto done; }
    ok = 1;
done:
    if (have_m) mhe_model_free(&m);
    if (have_st) mhe_st_free(&st);
    if (have_root) ij_free(&root);
    free(I.used); free(S.used);
    free(cbuf); free(wbuf);
    return ok;
}
#endif /* MHE_IMPORT_H */
