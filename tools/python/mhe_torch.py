#!/usr/bin/env python3
"""The PyTorch twin of mhe: the same models, checkpoints, loss and optimizer step.

Import it by path (it has no side effects on import), or run it as a script:

    python3 tools/python/mhe_torch.py eval --model M.safetensors --tokens TOKENS.txt
    python3 tools/python/mhe_torch.py roundtrip --model IN.safetensors --out OUT.safetensors
    python3 tools/python/mhe_torch.py replay --model M0.safetensors --batches RUN.batches [--data TEXT]
    python3 tools/python/mhe_torch.py strided --model M.safetensors --data TEXT --seq_len T --stride S
    python3 tools/python/mhe_torch.py train-own --data TEXT --out M.safetensors --seed S --set KEY=VALUE ...
    torchrun --nproc_per_node N tools/python/mhe_torch.py train --data TEXT --out CKPT.safetensors
             [--model M | --resume CKPT | --config CFG] [--set KEY=VALUE ...] [--steps S]
             [--save_every K] [--task lm|cls|sr] [--fsdp] [--amp bf16|fp16] [--timeout SECONDS]

What it holds
-------------
MheModel(cfg, dtype=torch.float32, seed=None)
                           a torch.nn.Module for every model mhe builds (cfg: mhe's config
                           fields, strings or values; missing ones take mhe's defaults; seed:
                           mhe init's weights, bit for bit). Parameters live in model.params,
                           a ParameterDict keyed by the mhe name with '.' -> '__'; by mhe name:
                           model.param(NAME), model.has(NAME), model.names (memory order),
                           model.shapes, model.decay (AdamW's decay set), model.r (resolved
                           config), model.meta (config strings), named_mhe_parameters(),
                           mhe_state_dict(), load_mhe_state_dict(d), init_weights(seed),
                           admin_init(batch...), skip_attn (eval --skip's layers).
  model(tokens, targets=None, lengths=None, src=None, src_lengths=None, labels=None, feats=None)
                           the loss as mhe_model_forward_batch computes it when targets (lm, sr)
                           or labels (cls) are given, else the logits; model.loss,
                           model.cls_loss, model.logits, model.hidden, model.embed.
load_checkpoint(path, dtype=torch.float32) -> (model, cfg, AdamWState or None)
save_checkpoint(path, model, cfg=None, opt_state=None, step=None)
                           safetensors files mhe reads unchanged (build/mhe eval, generate,
                           train --resume): the metadata keys and tensor names, order and F32
                           dtype mhe writes, optim.m.NAME / optim.v.NAME moments, "step",
                           "rng", "train.KEY", the I32 word state; written to PATH.tmp and
                           renamed. A round trip is byte for byte mhe's file. A file the twin
                           cannot take raises CheckpointError (a ValueError) naming the key,
                           kind, tensor or shape.
AdamWState(model, train=None, step=0, rng=None), lr_at(tc, step), clip_grad_norm_(grads, max),
adamw_update_(p, g, m, v, lr, beta1, beta2, eps, weight_decay, t),
train_step(model, opt, tokens, targets=None, lengths=None, src=None, src_lengths=None,
           labels=None, feats=None) -> (loss, grad norm, lr)
                           mhe's trainer step (mhe__trainer_update): Admin profiling on the
                           first step, forward, backward, global-norm clipping, the learning
                           rate of the step, AdamW on every tensor in mhe's memory order, with
                           mhe's float32 constants and operation order.
lm_batch(model, opt, data), cls_batch(model, opt, examples), sr_batch(model, opt, data, n_types)
                           the batch mhe's trainer draws next for --task lm (decoder, encoder
                           masked LM, encoder-decoder), cls and sr, advancing opt.rng as mhe
                           does: with them the twin trains in lockstep with `mhe train` (to
                           ~1e-5 of the loss per step over 30 steps of small models of every
                           kind; tests/test_twin.py checks lm, cls and sr).
evaluate(model, data, batch=16, seq_len=128, max_batches=50, src_len=0)
                           `mhe eval`'s mean loss over consecutive windows (mhe_evaluate_s2s).
read_words(text), read_text_set(text), md5_features(r, word), word_feats(model, types)
                           mhe's word corpora (word rule, first-appearance type ids, </s> per
                           line), `label<TAB>text` sets, and MD5/HMAC-MD5 features of types.
resolve_config(meta), config_meta(cfg), param_layout(r), Xoshiro(seed)
                           mhe's config (defaults, KIND@LAYOUT), its tensor layout (names,
                           shapes, init, decay set), its RNG.
read_batch_dump(path), replay(model_path, dump_path, dtype, corpus_path=None, log=None)
                           `mhe train --dump-batches FILE`'s batches, and the twin trained on
                           them from the checkpoint mhe started from -> (twin losses, mhe's
                           losses, model, opt); a dump of another model or corpus, or a
                           truncated one, raises CheckpointError naming the mismatch.
write_curve(prefix, ours, theirs, title)
                           a lockstep run as PREFIX.csv and PREFIX.svg (`replay --curve`).
strided_loss(model, data, seq_len, stride, batch=16)
                           strided perplexity (MHE paper sec. 4.5) from its definition, as
                           `mhe eval --stride` computes it -> (mean loss, tokens scored).
init_own(model, seed), train_own(cfg, train, corpus, seed, ...)
                           the twin on its own: mhe's init distributions (init_residual
                           included) drawn from torch's generator, batches at offsets
                           from torch's generator, mhe's schedule and AdamW.
parse_config_text(text)    an mhe config file (mhe_config_parse's rules) -> {model field: value}
main(argv)                 the script's subcommands: eval, roundtrip, replay, strided,
                           train-own, train (COMMANDS takes more).

train: mhe's trainer data-parallel. Every rank draws the same global batch with mhe's sampler
and RNG (the batch stream of `mhe train`) and takes its B/world rows; its loss is its targets'
summed loss * world / (the global target count), so DDP's gradient average is the global mean
loss's gradient even when ranks hold different counts (masked LM); then mhe's clipping and
AdamW on every rank. One process in float32 (no torchrun) is exactly train_step. --fsdp
(PyTorch 2; use_orig_params, one FSDP unit: the parameters are gathered whole for the
forward, gradients and AdamW moments stay sharded; the clipping norm is all-reduced; rank 0
saves the gathered state). --amp bf16 (autocast, CPU or GPU) or fp16 (CUDA, GradScaler): not
bit-equal to mhe. Tasks: lm (bytes: decoder, masked-LM encoder, encoder-decoder), cls (byte
`label<TAB>text` lines), sr (hash-embedding word models with md5 features); not word
vocabularies, LSH features or dropout. Checkpoints: rank 0, PATH.tmp + fsync + rename.
Debian's torch 1.13 under Python 3.11: torchrun's default --redirects/--tee "0" fails (an
enum change); `--redirects 9:1 --tee 9:1` (a rank that does not exist) works around it.

Losses, as mhe computes them: lm (next token, or masked LM for encoders; mean cross-entropy
over the targets that are not -1 and not padding), cls (mean of each sequence's real tokens,
cls_head, mean cross-entropy over the sequences), sr (the 3-way Shuffle+Random head per
token). Dropout is never applied: the twin is deterministic.

Coverage, per attention kind (self-attention of decoders and encoders, encoder self-attention
and cross-attention of encdec, pre- and post-norm, Admin's omega; every kind is checked
against mhe's loss and gradients by tests/torch_crosscheck.py):
  mha, sha, mqa, gqa, skv, el-att       covered (Vaswani et al. 2017; Shazeer 2019; Ainslie
                                        et al. 2023; the MHE paper's baselines)
  mhe-add, mhe-mul                      covered (MHE paper eq. 5-6: head i uses the seed
                                        projection psi(A, e_i) = A + e_i or A * (1 + e_i));
                                        fused_attention 0/1 is the same function here
  collab                                covered (Cordonnier et al. 2020 eq. 13)
  mlp, taylor, nonapprox                covered (thesis ch. 4, eq. 4.5, 4.6, 4.7-4.8)
  rndemb-qk, fixedseq-qk, staticemb-qk  covered (thesis eq. 4.9-4.13; the fixed stream runs the
                                        model's own blocks; rndemb-qk's eps drawn with mhe's
                                        xoshiro256** from fixed_seed)
  fnet, linear                          covered (FNet, Lee-Thorp et al. 2022; encoders only)
  layout / KIND@LAYOUT hybrids          covered (thesis Table 4.11, resolved as mhe does)
Embeddings: vocab (bytes or a word vocabulary: token ids are rows), hash-emb, hash-pool,
hash-add, hash-proj (thesis eq. 2.12, 2.1, 2.2, 2.3) given per-type features (buckets or bits);
word_feats computes MD5 features (hashlib/hmac); LSH features come from `mhe hash`.
Heads: the LM head (tied or lm_head), cls_head, sr_head.

Not covered: dropout (mhe's per-site dropout streams are not reproduced: the twin runs with
dropout off, so a lockstep run needs dropout=0 and attn_dropout=0, mhe's defaults); KV-cache
decoding and generation (the twin scores whole sequences); LSH word features (take them from
`mhe hash`); a word vocabulary's rows for --task sr/cls (feats: the tok_emb row of each type,
the caller's); mhe's built-in fixedseq-qk text (give fixed_seq); batches of a model with an
sr head but no words. init_weights is exact but slow in Python for large models (several
seconds per million parameters). Speed: Debian's python3-torch 1.13 uses the generic BLAS
(~2 GFLOP/s a core), so the issue's default model (d_model 256, 4 layers, 16 x 128 tokens)
takes ~15 s a training step here: lockstep runs use small models.
"""
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

FORMAT = "mhe-1"

# mhe's config fields in the order mhe writes them, with mhe_config_default's values
# (keys added after the first format are absent from old files: the default holds)
CONFIG_DEFAULTS = [
    ("arch", "decoder"), ("vocab_size", "256"), ("d_model", "128"), ("n_heads", "4"), ("d_head", "0"),
    ("n_layers", "4"), ("d_ff", "0"), ("max_seq_len", "256"), ("attn", "mha"), ("kv_groups", "2"),
    ("norm", "layernorm"), ("norm_eps", "9.99999975e-06"), ("norm_position", "pre"), ("activation", "gelu"),
    ("bias", "1"), ("tie_embeddings", "1"), ("dropout", "0"), ("attn_dropout", "0"),
    ("init_std", "0.0199999996"), ("fused_attention", "1"), ("mask_token", "-1"), ("n_classes", "0"),
    ("head_init_std", "-1"), ("enc_layers", "0"), ("enc_attn", "mha"), ("cross_attn", "mha"), ("admin", "0"),
    ("embedding", "vocab"), ("hash", "md5"), ("hash_bits", "128"), ("hash_buckets", "1024"),
    ("hash_chunk", "10"), ("hash_key", "1"), ("lsh_features", "hashed"), ("lsh_dim", "50000"),
    ("lsh_eta", "0"), ("lsh_pad", "0"), ("lsh_nmin", "1"), ("lsh_nmax", "4"), ("lsh_seed", "42"),
    ("token_head", "lm"), ("layout", "none"), ("fixed_seed", "1"), ("fixed_std", "-1"), ("fixed_seq", ""),
    ("collab_dim", "0"), ("collab_mix_std", "0.200000003"), ("init_residual", "plain"),
    ("emb_norm", "0"), ("type_vocab", "0"), ("head_transform", "0"), ("head_bias", "0"), ("cls_pool", "mean"),
]
CONFIG_KEYS = [k for k, _ in CONFIG_DEFAULTS]
# fields every mhe checkpoint holds (the rest were added later: mhe keeps the default)
CONFIG_REQUIRED = CONFIG_KEYS[:CONFIG_KEYS.index("enc_layers")]
TRAIN_DEFAULTS = [
    ("steps", "1000"), ("batch", "16"), ("seq_len", "128"), ("lr", "0.00100000005"), ("min_lr", "9.99999975e-05"),
    ("warmup", "100"), ("schedule", "cosine"), ("cycles", "1"), ("beta1", "0.899999976"), ("beta2", "0.949999988"),
    ("eps", "9.99999994e-09"), ("weight_decay", "0.100000001"), ("clip", "1"), ("seed", "1337"),
    ("eval_every", "200"), ("eval_batches", "8"), ("save_every", "0"), ("log_every", "10"),
    ("mlm_prob", "0.150000006"), ("src_len", "0"), ("sr_prob", "0.100000001"),
]
TRAIN_KEYS = [k for k, _ in TRAIN_DEFAULTS]
_ENUMS = {"arch": ("decoder", "encoder", "encdec"), "norm": ("layernorm", "rmsnorm"),
          "norm_position": ("pre", "post"), "activation": ("gelu", "relu", "silu", "gelu-erf"),
          "embedding": ("vocab", "hash-emb", "hash-pool", "hash-add", "hash-proj"), "hash": ("md5", "lsh"),
          "lsh_features": ("hashed", "table"), "token_head": ("lm", "sr"),
          "init_residual": ("plain", "scaled"), "cls_pool": ("mean", "first"),
          "layout": ("none", "even", "odd", "top", "middle", "bottom", "25%", "first", "last", "bilateral")}
_FLOATS = {"norm_eps", "dropout", "attn_dropout", "init_std", "head_init_std", "fixed_std", "collab_mix_std"}
_TEXT = {"attn", "enc_attn", "cross_attn", "fixed_seq"} | set(_ENUMS)

ATTN_KINDS = ("mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul", "mlp", "taylor", "nonapprox",
              "rndemb-qk", "fixedseq-qk", "staticemb-qk", "fnet", "linear", "collab")
# thesis ch. 4 ("deconstructing attention") and FNet's mixing kinds
DECON_KINDS = ("mlp", "taylor", "nonapprox", "rndemb-qk", "fixedseq-qk", "staticemb-qk", "fnet", "linear")
N_SPECIAL = 4               # <pad> <unk> <s> </s>: rows of special_emb (or tok_emb) below the words
SR_CLASSES = 3              # Shuffle+Random: original, shuffled, random


class CheckpointError(ValueError):
    """A checkpoint the twin cannot take: says which key, kind, tensor or shape is wrong."""


# --------------------------------------------------------------------------
# config rules: the ranges come from mhe.h's own field tables (mhe__config_fields,
# mhe__train_fields), read from the header beside tools/, so both refuse the same values
# --------------------------------------------------------------------------

def _read_field_tables(path=None):
    """{'config'|'train': {key: (type, lo, hi, enum names)}} parsed from mhe.h's tables; None
    when the header is not beside tools/ (the twin copied elsewhere: cross-field rules only)"""
    import re
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mhe.h")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    consts = {k: float(v) for k, v in re.findall(r"#define (MHE_[A-Z0-9_]+) (\d+)\b", text)}

    def num(x):
        x = x.strip()
        m = re.fullmatch(r"([A-Z0-9_]+)\s*-\s*(\d+)", x)
        if m and m.group(1) in consts:
            return consts[m.group(1)] - float(m.group(2))
        return consts[x] if x in consts else float(x)
    out = {}
    for table, name in (("config", "mhe__config_fields"), ("train", "mhe__train_fields")):
        body = text.split("static const mhe__field %s[] = {" % name, 1)[1].split("\n};", 1)[0]
        rows = {}
        for m in re.finditer(r'\{ "([a-z_0-9]+)", MHE__F_([A-Z0-9]+), MHE__[CT]F\([a-z_0-9]+\), ([^,]+), ([^,]+), ("[^"]*"|0)', body):
            key, typ, lo, hi, names = m.groups()
            rows[key] = (typ, num(lo), num(hi), names.strip('"').split("|") if names != "0" else None)
        out[table] = rows
    return out


_FIELD_TABLES = _read_field_tables()
_MAX_D_HEAD, _MAX_LAYERS = 256, 64


def _check_value(table, key, value):
    """one field's text as mhe's checked parser takes it; ValueError names the field"""
    rule = (_FIELD_TABLES or {}).get(table, {}).get(key)
    if rule is None:
        return
    typ, lo, hi, names = rule
    v = str(value).strip()
    if typ == "INT":
        if not re.fullmatch(r"[-+]?[0-9]+", v):
            raise ValueError("%s field '%s': '%s' is not an integer" % (table, key, v))
        x = int(v, 10)
        if not lo <= x <= hi:
            raise ValueError("%s field '%s': %d is out of range [%.0f, %.0f]" % (table, key, x, lo, hi))
    elif typ == "U64":
        if not v.isdigit() or int(v) >= 1 << 64:
            raise ValueError("%s field '%s': '%s' is not an unsigned 64-bit integer" % (table, key, v))
    elif typ == "FLOAT":
        try:
            x = float(v)
        except ValueError:
            raise ValueError("%s field '%s': '%s' is not a number" % (table, key, v))
        with np.errstate(over="ignore"):
            xf = float(np.float32(x))
        if not (math.isfinite(x) and float(np.float32(lo)) <= xf <= float(np.float32(hi))):
            raise ValueError("%s field '%s': %s is out of range [%g, %g]" % (table, key, v, lo, hi))
    elif typ == "ENUM" and v not in names:
        raise ValueError("%s field '%s': '%s' is not one of %s" % (table, key, v, "|".join(names)))


def validate_train(train):
    """train fields (strings) as mhe_train_config_set takes them; ValueError names the first bad one"""
    for k, v in train.items():
        if k not in dict(TRAIN_DEFAULTS):
            raise ValueError("unknown train field '%s'" % k)
        _check_value("train", k, v)


def validate_config(cfg):
    """a model config (strings) as mhe_config_validate judges it: every field in its table range,
    then the rules between fields. ValueError (one line) names the first field that is wrong."""
    for k, v in cfg.items():
        if k not in dict(CONFIG_DEFAULTS):
            raise ValueError("unknown model field '%s'" % k)
        _check_value("config", k, v)
    raw = dict(CONFIG_DEFAULTS)
    raw.update({k: str(v) for k, v in cfg.items()})
    C, n, dh0 = int(raw["d_model"]), int(raw["n_heads"]), int(raw["d_head"])
    if dh0 == 0 and C % n:
        raise ValueError("d_model %d is not divisible by n_heads %d (set d_head explicitly)" % (C, n))
    dh = dh0 or C // n
    if not 1 <= dh <= _MAX_D_HEAD:
        raise ValueError("head size %d is out of range [1, %d]" % (dh, _MAX_D_HEAD))
    L, E, arch = int(raw["n_layers"]), int(raw["enc_layers"]), raw["arch"]
    if arch == "encdec":
        if E < 1:
            raise ValueError("arch=encdec needs enc_layers >= 1 (encoder blocks)")
        if E + L > _MAX_LAYERS:
            raise ValueError("enc_layers %d + n_layers %d exceed %d blocks" % (E, L, _MAX_LAYERS))
    elif E:
        raise ValueError("enc_layers %d: only arch=encdec has an encoder stack" % E)
    V = int(raw["vocab_size"])
    if int(raw["mask_token"]) >= V:
        raise ValueError("mask_token %s is outside the vocabulary [0, %d)" % (raw["mask_token"], V))
    if int(raw["admin"]) and raw["norm_position"] != "post":
        raise ValueError("admin=1 scales the residual of post-norm blocks: it needs norm_position=post")
    if int(raw["n_classes"]) > 0 and arch != "encoder":
        raise ValueError("n_classes %s: the classification head needs arch=encoder" % raw["n_classes"])
    if n * dh > 1048576 or V * C > 2 ** 31 - 1 or int(raw["max_seq_len"]) * C > 2 ** 31 - 1 or \
            (int(raw["d_ff"]) or 4 * C) * C > 2 ** 31 - 1:
        raise ValueError("model too large: a tensor would exceed 2^31 elements")
    try:
        resolve_config(raw)     # the kinds, KIND@LAYOUT and the kinds' own geometry
    except CheckpointError as e:
        raise ValueError(str(e))


# --------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------

def f32(x):
    """x rounded to float32, as a Python float (mhe's config and train fields are floats)"""
    return float(np.float32(float(x)))


def layout_standard(layout, i, n):
    """thesis Table 4.11: does layer i (0-based) of n keep standard attention (mha)?"""
    k = i + 1
    return {"none": False, "even": k % 2 == 0, "odd": k % 2 == 1, "top": k <= n // 2,
            "middle": k <= n // 4 or k > n - n // 4, "bottom": k > n // 2, "25%": k % 4 == 0,
            "first": k == 1, "last": k == n, "bilateral": k in (1, n)}[layout]


def _kinds(text, count, key):
    kinds = [k.strip() for k in text.split(",")]
    for k in kinds:
        if k not in ATTN_KINDS:
            raise CheckpointError("config %s: unknown attention kind '%s' (the twin knows %s; a kind a C program "
                                  "registered with mhe_attn_kind_register has no twin)" % (key, k, ", ".join(ATTN_KINDS)))
    if len(kinds) == 1:
        kinds = kinds * count
    if len(kinds) != count:
        raise CheckpointError("config %s lists %d kinds for %d layers" % (key, len(kinds), count))
    return kinds


def resolve_config(meta):
    """mhe's config strings (a checkpoint's metadata, missing keys taking mhe's defaults)
    -> a dict of typed values with d_head, d_ff, collab_dim and the per-layer kinds resolved
    (attn=KIND@LAYOUT and the layout key as mhe applies them)."""
    raw = dict(CONFIG_DEFAULTS)
    raw.update({k: str(v) for k, v in meta.items() if k in raw})
    r = {}
    for k, v in raw.items():
        if k in _ENUMS:
            if v not in _ENUMS[k]:
                raise CheckpointError("config %s: unknown value '%s' (one of %s)" % (k, v, "|".join(_ENUMS[k])))
            r[k] = v
        elif k in _TEXT:
            r[k] = v
        elif k in _FLOATS:
            r[k] = f32(v)
        else:
            try:
                r[k] = int(v)
            except ValueError:
                raise CheckpointError("config %s: '%s' is not an integer" % (k, v))
    C, n = r["d_model"], r["n_heads"]
    r["d_head"] = r["d_head"] or C // n
    r["d_ff"] = r["d_ff"] or 4 * C
    r["collab_dim"] = r["collab_dim"] or n * r["d_head"]
    a, layout = r["attn"], r["layout"]
    if "@" in a:
        a, layout = a.split("@", 1)
        if layout not in _ENUMS["layout"]:
            raise CheckpointError("config attn: unknown layout '%s'" % layout)
    L = r["n_layers"]
    r["attn"] = ["mha" if layout_standard(layout, i, L) else k for i, k in enumerate(_kinds(a, L, "attn"))]
    E = r["enc_layers"] if r["arch"] == "encdec" else 0
    r["enc_layers"] = E
    r["enc_attn"] = _kinds(r["enc_attn"], E, "enc_attn") if E else []
    r["cross_attn"] = _kinds(r["cross_attn"], L, "cross_attn") if E else []
    for where, kinds in (("layer", r["attn"]), ("encoder layer", r["enc_attn"]), ("cross-attention of layer", r["cross_attn"])):
        for i, k in enumerate(kinds):
            if k == "gqa" and n % r["kv_groups"]:
                raise CheckpointError("%s %d is gqa: kv_groups %d does not divide n_heads %d" % (where, i, r["kv_groups"], n))
            if k == "el-att" and n * r["d_head"] != C:
                raise CheckpointError("%s %d is el-att: n_heads * d_head = %d is not d_model %d" % (where, i, n * r["d_head"], C))
    r["post_norm"] = r["norm_position"] == "post"
    if r["admin"] and not r["post_norm"]:
        raise CheckpointError("config admin=1 needs norm_position=post")
    if r["mask_token"] < 0:
        r["mask_token"] = r["vocab_size"] - 1
    # BERT's pieces of `mhe import`: mhe computes them, the twin does not (refused, never ignored)
    for k, off in (("emb_norm", 0), ("type_vocab", 0), ("head_transform", 0), ("head_bias", 0), ("cls_pool", "mean")):
        if r[k] != off:
            raise CheckpointError("config %s=%s: the twin does not implement BERT's %s (mhe import); it runs in mhe only"
                                  % (k, r[k], {"emb_norm": "embedding norm", "type_vocab": "token-type embeddings",
                                               "head_transform": "MLM head transform", "head_bias": "LM head bias",
                                               "cls_pool": "pooler"}[k]))
    return r


def config_meta(cfg):
    """A config dict (strings, or Python values) -> mhe's metadata strings in mhe's order."""
    out = {}
    given = dict(cfg)
    for k, d in CONFIG_DEFAULTS:
        v = given.get(k, d)
        if isinstance(v, bool):
            v = int(v)
        if k in _FLOATS or isinstance(v, float):    # mhe prints its float fields as %.9g of the float
            v = "%.9g" % f32(v)
        out[k] = str(v)
    return out


# --------------------------------------------------------------------------
# mhe's RNG (xoshiro256** seeded through splitmix64) and its Box-Muller normal
# --------------------------------------------------------------------------

_M64 = (1 << 64) - 1


class Xoshiro:
    """mhe_rng: xoshiro256** (Blackman and Vigna 2018) seeded through splitmix64"""

    def __init__(self, seed=0, state=None):
        if state is not None:
            self.s = list(state)
            return
        self.s, x = [], seed & _M64
        for _ in range(4):
            x = (x + 0x9e3779b97f4a7c15) & _M64
            z = x
            z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & _M64
            z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & _M64
            self.s.append(z ^ (z >> 31))

    def u64(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & _M64
        result = (rotl((s[1] * 5) & _M64, 7) * 9) & _M64
        t = (s[1] << 17) & _M64
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        """mhe_rng_uniform: 24 random bits in [0, 1), a float32"""
        return float(np.float32(self.u64() >> 40) * np.float32(1.0 / 16777216.0))

    def normal(self):
        """mhe_rng_normal: Box-Muller with u1 in (0, 1], rounded to float32"""
        u1 = ((self.u64() >> 11) + 1.0) * (1.0 / 9007199254740992.0)
        u2 = (self.u64() >> 11) * (1.0 / 9007199254740992.0)
        return f32(math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2))

    def hex(self):
        """the state as mhe's checkpoint metadata "rng" holds it"""
        return "".join("%016x" % v for v in self.s)

    @classmethod
    def from_hex(cls, text):
        if len(text) != 64:
            raise CheckpointError("bad rng state '%s'" % text[:80])
        try:
            return cls(state=[int(text[16 * i:16 * i + 16], 16) for i in range(4)])
        except ValueError:
            raise CheckpointError("bad rng state '%s'" % text[:80])


def fixed_eps(r):
    """rndemb-qk's fixed random embeddings [max_seq_len, C] as mhe__fixed_init draws them:
    N(0, fixed_std^2) (init_std when negative) from fixed_seed, float32"""
    g = Xoshiro(r["fixed_seed"])
    std = np.float32(r["fixed_std"] if r["fixed_std"] >= 0 else r["init_std"])
    n = r["max_seq_len"] * r["d_model"]
    return np.array([std * np.float32(g.normal()) for _ in range(n)], dtype=np.float32).reshape(r["max_seq_len"], -1)


def fixed_tokens(r):
    """fixedseq-qk's tokens cycled to max_seq_len: "ids:..." or the bytes of the text"""
    t = r["fixed_seq"]
    if not t:
        raise CheckpointError("fixedseq-qk with mhe's built-in text: the twin needs fixed_seq in the config")
    ids = [int(v) for v in t[4:].replace(",", " ").split()] if t.startswith("ids:") else list(t.encode())
    return [ids[i % len(ids)] for i in range(r["max_seq_len"])]


def md5_features(r, word):
    """A word's (bucket, bits) under hash=md5 (thesis sec. 2.3, the authors' code): the digest
    of HMAC-MD5 with key "en" (plain MD5 with hash_key=0) of the word's bytes; bucket = the
    digest as a big-endian integer mod hash_buckets (hash-emb), bits = its first hash_bits
    bits, most significant first (hash-pool/add/proj). r: resolve_config's dict."""
    import hashlib
    import hmac
    d = hmac.new(b"en", word, hashlib.md5).digest() if r["hash_key"] else hashlib.md5(word).digest()
    T = r["hash_bits"]
    return int.from_bytes(d, "big") % r["hash_buckets"], [(d[t // 8] >> (7 - t % 8)) & 1 for t in range(T)]


def word_feats(model, words):
    """the feats argument of MheModel for word types (bytes, as mhe's splitter gives them,
    lower-cased) under hash=md5: buckets (hash-emb) or bits (the others)"""
    r = model.r
    if r["embedding"] == "vocab" or r["hash"] != "md5":
        raise ValueError("word_feats computes md5 features; embedding=%s hash=%s needs `mhe hash`"
                         % (r["embedding"], r["hash"]))
    pairs = [md5_features(r, w) for w in words]
    if r["embedding"] == "hash-emb":
        return torch.tensor([p[0] for p in pairs], dtype=torch.long)
    return torch.tensor([p[1] for p in pairs], dtype=torch.long).reshape(len(words), r["hash_bits"])


# --------------------------------------------------------------------------
# the parameter layout: names, shapes, init and the decay set, in mhe's memory order
# --------------------------------------------------------------------------

def mlp_width(n, dh):
    """thesis eq. 4.5's gated MLP in attention's place: 3 F d_m weights ~ MHA's 4 d_m n d_h"""
    return (4 * n * dh + 1) // 3


def param_layout(r):
    """[(name, shape, decay, init, std)] of mhe__layout_walk, in memory order. init: "normal",
    "zero", "one" or "blocks" (collab's mixing with collab_mix_std 0). decay: AdamW's weight
    decay applies (the weight matrices, embeddings and regular_emb; not biases, norm gains,
    MHE head embeddings, collab's mixing, Admin's omega, hash-pool's logits, hash-proj's axes)."""
    out = []
    C, n, dh, L, Fd = r["d_model"], r["n_heads"], r["d_head"], r["n_layers"], r["d_ff"]
    H, bias, ln, std = n * dh, r["bias"] == 1, r["norm"] == "layernorm", r["init_std"]
    hstd = r["head_init_std"] if r["head_init_std"] >= 0 else std
    E = r["enc_layers"]

    def p(name, shape, decay, init, sd=0.0):
        out.append((name, tuple(shape), decay, init, sd))

    def attention(pre, kind, res_std):
        if kind == "mlp":
            Fm = mlp_width(n, dh)
            p(pre + "gate.weight", (Fm, C), 1, "normal", std)
            p(pre + "up.weight", (Fm, C), 1, "normal", std)
            if bias:
                p(pre + "gate.bias", (Fm,), 0, "zero")
                p(pre + "up.bias", (Fm,), 0, "zero")
            p(pre + "down.weight", (C, Fm), 1, "normal", res_std)
            if bias:
                p(pre + "down.bias", (C,), 0, "zero")
            return
        if kind == "fnet":
            return
        if kind == "linear":
            p(pre + "hidden.weight", (C, C), 1, "normal", std)
            p(pre + "seq.weight", (r["max_seq_len"], r["max_seq_len"]), 1, "normal", std)
            return
        if kind == "collab":
            D = r["collab_dim"]
            p(pre + "wq.weight", (D, C), 1, "normal", std)
            p(pre + "wk.weight", (D, C), 1, "normal", std)
            p(pre + "content_bias.weight", (n, C), 1, "normal", std)
            p(pre + "wv.weight", (H, C), 1, "normal", std)
            if bias:
                p(pre + "wv.bias", (H,), 0, "zero")
            mix = r["collab_mix_std"]
            p(pre + "mixing", (n, D), 0, "normal" if mix > 0 else "blocks", mix)
            p(pre + "wo.weight", (C, H), 1, "normal", res_std)
            if bias:
                p(pre + "wo.bias", (C,), 0, "zero")
            return
        qw, kw, vw, mhe = H, H, H, False
        if kind == "mqa":
            kw = vw = dh
        elif kind == "gqa":
            kw = vw = r["kv_groups"] * dh
        elif kind == "skv":
            vw = 0
        elif kind == "el-att":
            kw = vw = 0
        elif kind == "sha":
            qw = kw = vw = dh
        elif kind in ("mhe-add", "mhe-mul"):
            qw = kw = vw = dh
            mhe = True
        kname = "wkv" if kind == "skv" else "wk"
        p(pre + "wq.weight", (qw, C), 1, "normal", std)
        if kw:
            p(pre + kname + ".weight", (kw, C), 1, "normal", std)
        if vw:
            p(pre + "wv.weight", (vw, C), 1, "normal", std)
        if bias:
            p(pre + "wq.bias", (qw,), 0, "zero")
            if kw:
                p(pre + kname + ".bias", (kw,), 0, "zero")
            if vw:
                p(pre + "wv.bias", (vw,), 0, "zero")
        if mhe:
            for e in ("eq", "ek", "ev"):
                p(pre + e, (n, dh), 0, "normal", hstd)
        p(pre + "wo.weight", (C, H), 1, "normal", res_std)
        if bias:
            p(pre + "wo.bias", (C,), 0, "zero")

    def norm(name):
        p(name + ".weight", (C,), 0, "one")
        if ln:
            p(name + ".bias", (C,), 0, "zero")

    # embeddings (thesis sec. 2.3)
    emb, T = r["embedding"], r["hash_bits"]
    if emb == "vocab":
        p("tok_emb.weight", (r["vocab_size"], C), 1, "normal", std)
    else:
        p("special_emb.weight", (N_SPECIAL, C), 1, "normal", std)
        if emb == "hash-emb":
            p("tok_emb.weight", (r["hash_buckets"], C), 1, "normal", std)
        else:
            if emb == "hash-pool":
                k = r["hash_chunk"]
                p("pool.codebook.weight", ((1 << k) + 1, C), 1, "normal", std)
                p("pool.weight", (-(-T // k), C), 0, "normal", std)
            elif emb == "hash-add":
                p("add.books", (T, 2, C), 1, "normal", std)
            else:
                p("proj.weight", (C, T), 0, "normal", std)
            p("regular_emb.weight", (C,), 1, "normal", std)
    p("pos_emb.weight", (r["max_seq_len"], C), 1, "normal", std)
    if E:
        p("enc.pos_emb.weight", (r["max_seq_len"], C), 1, "normal", std)
    # init_residual=scaled (GPT-2): residual-output projections get init_std / sqrt(residual branches)
    for l in range(E + L):
        enc = l < E
        idx = l if enc else l - E
        cross = E > 0 and not enc
        res_std = std if r["init_residual"] == "plain" else \
            f32(np.float32(std) / np.sqrt(np.float32(2 * E if enc else (3 if cross else 2) * L)))
        pre = ("enc.layers.%d." if enc else "layers.%d.") % idx
        norm(pre + "norm1")
        attention(pre + "attn.", r["enc_attn"][idx] if enc else r["attn"][idx], res_std)
        if cross:
            norm(pre + "norm3")
            attention(pre + "cross.", r["cross_attn"][idx], res_std)
        norm(pre + "norm2")
        p(pre + "mlp.fc1.weight", (Fd, C), 1, "normal", std)
        if bias:
            p(pre + "mlp.fc1.bias", (Fd,), 0, "zero")
        p(pre + "mlp.fc2.weight", (C, Fd), 1, "normal", res_std)
        if bias:
            p(pre + "mlp.fc2.bias", (C,), 0, "zero")
        if r["admin"]:
            p(pre + "omega1", (C,), 0, "one")
            if cross:
                p(pre + "omega3", (C,), 0, "one")
            p(pre + "omega2", (C,), 0, "one")
        if enc and l == E - 1 and not r["post_norm"]:
            norm("enc.ln_f")
    if not r["post_norm"]:
        norm("ln_f")
    if r["token_head"] == "lm" and not r["tie_embeddings"]:
        p("lm_head.weight", (r["vocab_size"], C), 1, "normal", std)
    if r["n_classes"] > 0:
        p("cls_head.weight", (r["n_classes"], C), 1, "normal", std)
        if bias:
            p("cls_head.bias", (r["n_classes"],), 0, "zero")
    if r["token_head"] == "sr":
        p("sr_head.weight", (SR_CLASSES, C), 1, "normal", std)
        if bias:
            p("sr_head.bias", (SR_CLASSES,), 0, "zero")
    return out


def _key(name):
    """an mhe tensor name as a ParameterDict key (which may not hold '.')"""
    return name.replace(".", "__")


# --------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------

class MheModel(torch.nn.Module):
    """Every model mhe builds, as one Module. Parameters live in self.params (a ParameterDict
    keyed by the mhe name with '.' -> '__'); model.param("layers.0.attn.wq.weight") reads one
    by its mhe name, model.names lists them in mhe's memory order, model.decay[name] says
    whether AdamW decays it.

    forward(tokens, targets=None, ...) -> loss when targets or labels are given, else logits.
    """

    def __init__(self, cfg, dtype=torch.float32, seed=None):
        """cfg: mhe's config (metadata strings, or values; missing keys take mhe's defaults).
        seed: None leaves the weights at zero (a checkpoint fills them), else mhe's init."""
        super().__init__()
        if dtype not in (torch.float32, torch.float64):
            raise ValueError("dtype must be torch.float32 or torch.float64, not %s" % dtype)
        self.meta = config_meta(cfg)
        self.r = resolve_config(self.meta)
        self.dtype = dtype
        self.layout = param_layout(self.r)
        self.names = [x[0] for x in self.layout]
        self.shapes = {x[0]: x[1] for x in self.layout}
        self.decay = {x[0]: bool(x[2]) for x in self.layout}
        self.params = torch.nn.ParameterDict()
        for name, shape, _, _, _ in self.layout:
            self.params[_key(name)] = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        self.extra_i32 = {}         # word state mhe keeps in I32 tensors (vocab.words, lsh.ngrams)
        self.skip_attn = set()      # layers whose self-attention is the identity (mhe eval --skip)
        self.taps = None            # a dict: mhe-add layers leave their per-head keys here (crosscheck)
        self._admin = None          # Admin profiling: the running output scale per stack
        self._fixed_eps = None
        if seed is not None:
            self.init_weights(seed)

    # ---- parameters by mhe name
    def param(self, name):
        try:
            return self.params[_key(name)]
        except KeyError:
            raise KeyError("the model has no tensor '%s'" % name)

    def has(self, name):
        return _key(name) in self.params

    def named_mhe_parameters(self):
        """(mhe name, Parameter) in mhe's memory order"""
        return [(n, self.params[_key(n)]) for n in self.names]

    def mhe_state_dict(self):
        """{mhe name: tensor (detached)} in mhe's memory order"""
        return {n: p.detach() for n, p in self.named_mhe_parameters()}

    @torch.no_grad()
    def load_mhe_state_dict(self, tensors):
        """copies {mhe name: array or tensor} into the parameters; every name must be the
        model's and every tensor of the model must be given, with its shape"""
        extra = [n for n in tensors if not self.has(n)]
        missing = [n for n in self.names if n not in tensors]
        if extra or missing:
            raise CheckpointError("tensors: %s%s" % ("unknown %s " % extra[:5] if extra else "",
                                                     "missing %s" % missing[:5] if missing else ""))
        for n in self.names:
            t = torch.as_tensor(np.asarray(tensors[n]) if not torch.is_tensor(tensors[n]) else tensors[n])
            if tuple(t.shape) != self.shapes[n]:
                raise CheckpointError("tensor '%s' has shape %s, the model expects %s" % (n, list(t.shape), list(self.shapes[n])))
            self.param(n).copy_(t.to(self.dtype))

    def _p(self, name):
        k = _key(name)
        return self.params[k] if k in self.params else None

    @torch.no_grad()
    def init_weights(self, seed):
        """mhe__init_weights: every tensor in memory order from one xoshiro256** stream
        (weights N(0, std), biases 0, norm gains and omega 1, collab's blocks of ones)"""
        g = Xoshiro(seed)
        for name, shape, _, init, std in self.layout:
            p = self.param(name)
            size = int(np.prod(shape))
            if init == "normal":
                s = np.float32(std)
                vals = np.array([s * np.float32(g.normal()) for _ in range(size)], dtype=np.float32)
                p.copy_(torch.from_numpy(vals.reshape(shape)).to(self.dtype))
            elif init == "blocks":      # row i is 1 on columns [i b, (i+1) b), b = ceil(W / n)
                nr, W = shape
                b = (W + nr - 1) // nr
                m = torch.zeros(shape, dtype=self.dtype)
                for i in range(nr):
                    m[i, i * b:min((i + 1) * b, W)] = 1
                p.copy_(m)
            else:
                p.fill_(1.0 if init == "one" else 0.0)

    # ---- pieces
    def _norm(self, x, name):
        r = self.r
        w = self.param(name + ".weight")
        if r["norm"] == "layernorm":
            return F.layer_norm(x, (r["d_model"],), w, self.param(name + ".bias"), r["norm_eps"])
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + r["norm_eps"]) * w

    def _linear(self, x, name):
        return F.linear(x, self.param(name + ".weight"), self._p(name + ".bias"))

    def _act(self, x):
        a = self.r["activation"]
        if a == "gelu":             # mhe's GELU is the tanh approximation (Hendrycks and Gimpel 2016)
            return F.gelu(x, approximate="tanh")
        if a == "gelu-erf":         # the exact x * Phi(x), nn.GELU's default
            return F.gelu(x)
        return F.relu(x) if a == "relu" else F.silu(x)

    @staticmethod
    def _blocked(B, Tq, Tk, lens, causal):
        """[B, 1, Tq, Tk]: True where query t may not see key j (a decoder's future; the
        padding of sequence b, keys j >= lens[b])"""
        m = torch.zeros(B, 1, Tq, Tk, dtype=torch.bool)
        if causal:
            m = m | torch.ones(Tq, Tk, dtype=torch.bool).triu(1)
        if lens is not None:
            pad = torch.arange(Tk)[None, :] >= torch.as_tensor(lens).reshape(-1)[:, None]
            m = m | pad[:, None, None, :]
        return m

    def _heads(self, t, k):
        """[B, L, k*dh] -> [B, k, L, dh]"""
        return t.reshape(t.shape[0], t.shape[1], k, self.r["d_head"]).transpose(1, 2)

    def _core(self, q, k, v, mask):
        """softmax attention (Vaswani et al. 2017 eq. 1); q [B, h, Tq, dh] -> [B, Tq, h*dh]"""
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.r["d_head"])
        o = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        return o.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    def _per_seq(self, x, lens, fn):
        """fn applied to the real tokens of each sequence, zeros on the padding"""
        B, T = x.shape[0], x.shape[1]
        lens = [T] * B if lens is None else [int(v) for v in lens]
        rows = []
        for b in range(B):
            yb = fn(x[b, :lens[b]], lens[b])
            rows.append(torch.cat([yb, x.new_zeros(T - lens[b], yb.shape[-1])], 0))
        return torch.stack(rows)

    def _decon(self, xq, xkv, p, kind, mask, ctx):
        """thesis ch. 4's kinds and FNet's mixing"""
        r, n, dh = self.r, self.r["n_heads"], self.r["d_head"]
        B = xq.shape[0]
        if kind == "mlp":           # eq. 4.5: FC_Dn(SiLU(FC_Gt(H)) * FC_Up(H))
            return self._linear(F.silu(self._linear(xq, p + ".gate")) * self._linear(xq, p + ".up"), p + ".down")
        if kind == "fnet":          # FNet: Re of the 2-D DFT over each sequence's real tokens
            cplx = torch.complex128 if self.dtype == torch.float64 else torch.complex64
            return self._per_seq(xq, ctx["lens"], lambda xb, Lb: torch.fft.fft2(xb.to(cplx)).real.to(xq.dtype))
        if kind == "linear":        # W_seq[:L, :L] (X W_hidden^T) per sequence, no bias
            z = xq @ self.param(p + ".hidden.weight").t()
            W = self.param(p + ".seq.weight")
            return self._per_seq(z, ctx["lens"], lambda zb, Lb: W[:Lb, :Lb] @ zb)
        if kind in ("rndemb-qk", "fixedseq-qk") and not ctx["fixed"]:
            fu = ctx["fixed_u"][ctx["layer"]]           # [1, T, C]: the same Q, K for every sequence
            q = self._heads(self._linear(fu, p + ".wq").expand(B, -1, -1), n)
            k = self._heads(self._linear(fu, p + ".wk").expand(B, -1, -1), n)
        elif kind == "staticemb-qk":
            # eq. 4.13: Q, K from the static embeddings, through the sublayer's input norm
            # (pre-norm: norm1, or norm3 for cross-attention; post-norm: as they are)
            nm = p.rsplit(".", 1)[0] + (".norm3" if ctx["cross"] else ".norm1")
            sn = (lambda e: self._norm(e, nm)) if not r["post_norm"] else (lambda e: e)
            q = self._heads(self._linear(sn(ctx["emb"]), p + ".wq"), n)
            k = self._heads(self._linear(sn(ctx["mem_emb"] if ctx["cross"] else ctx["emb"]), p + ".wk"), n)
        else:
            q = self._heads(self._linear(xq, p + ".wq"), n)
            k = self._heads(self._linear(xkv, p + ".wk"), n)
        v = self._heads(self._linear(xkv, p + ".wv"), n)
        if kind == "taylor":        # eq. 4.6 with Based's one normaliser: w = 1 + s + s^2/2
            s = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            a = (1 + s + 0.5 * s * s).masked_fill(mask, 0.0)
            a = a / a.sum(dim=-1, keepdim=True)
        elif kind == "nonapprox":   # eq. 4.7-4.8: one score per key position, softmax over time
            sc = (F.silu(q) * k).sum(-1) / math.sqrt(dh)              # [B, h, T]
            s = sc[:, :, None, :].expand(-1, -1, q.shape[2], -1)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        o = (a @ v).transpose(1, 2).reshape(B, q.shape[2], -1)
        return self._linear(o, p + ".wo")

    def _attn(self, xq, xkv, p, kind, mask, ctx):
        """one attention sublayer: Q from xq, K and V from xkv (the same for self-attention)"""
        r, n, dh = self.r, self.r["n_heads"], self.r["d_head"]
        if kind in DECON_KINDS:
            return self._decon(xq, xkv, p, kind, mask, ctx)
        if kind in ("mhe-add", "mhe-mul"):
            # MHE paper eq. 5-6: seed Q, K, V of width dh; head i uses psi(seed, e[i])
            def psi(a, e):
                a = a.unsqueeze(1)                                      # [B, 1, L, dh]
                e = self.param(p + "." + e).view(1, n, 1, dh)           # [1, n, 1, dh]
                return a + e if kind == "mhe-add" else a * (1 + e)
            q = self._linear(xq, p + ".wq")
            k = psi(self._linear(xkv, p + ".wk"), "ek")
            v = self._linear(xkv, p + ".wv")
            if self.taps is not None and kind == "mhe-add" and k.requires_grad:
                k.retain_grad()
                self.taps[p + ".ek"] = k
            o = self._core(psi(q, "eq"), k, psi(v, "ev"), mask)
        elif kind == "collab":
            # Cordonnier et al. 2020 eq. 13: head i scores x_q W~_Q diag(m_i) W~_K^T x_k + v_i . x_k,
            # scaled by 1/sqrt(d_h) as the layer it replaces; only W^V has a bias
            q, k = self._linear(xq, p + ".wq"), self._linear(xkv, p + ".wk")
            s = torch.einsum("bqd,hd,bkd->bhqk", q, self.param(p + ".mixing"), k)
            s = s + (xkv @ self.param(p + ".content_bias.weight").t()).transpose(1, 2)[:, :, None, :]
            a = torch.softmax((s / math.sqrt(dh)).masked_fill(mask, float("-inf")), dim=-1)
            o = (a @ self._heads(self._linear(xkv, p + ".wv"), n)).transpose(1, 2).reshape(xq.shape[0], xq.shape[1], -1)
        elif kind == "sha":
            q = self._heads(self._linear(xq, p + ".wq"), 1)
            k, v = self._heads(self._linear(xkv, p + ".wk"), 1), self._heads(self._linear(xkv, p + ".wv"), 1)
            o = self._core(q, k, v, mask).repeat(1, 1, n)               # n copies of the one head
        else:
            q = self._heads(self._linear(xq, p + ".wq"), n)
            if kind == "mha":
                k, v = self._heads(self._linear(xkv, p + ".wk"), n), self._heads(self._linear(xkv, p + ".wv"), n)
            elif kind in ("mqa", "gqa"):
                g = 1 if kind == "mqa" else r["kv_groups"]
                # query head h uses K/V head h // (n / g) (Ainslie et al. 2023)
                k = self._heads(self._linear(xkv, p + ".wk"), g).repeat_interleave(n // g, dim=1)
                v = self._heads(self._linear(xkv, p + ".wv"), g).repeat_interleave(n // g, dim=1)
            elif kind == "skv":
                k = v = self._heads(self._linear(xkv, p + ".wkv"), n)
            elif kind == "el-att":      # K = V = the attention input split into heads
                k = v = self._heads(xkv, n)
            else:
                raise CheckpointError("unknown attention kind '%s'" % kind)
            o = self._core(q, k, v, mask)
        return self._linear(o, p + ".wo")

    def _mlp(self, x, p):
        return self._linear(self._act(self._linear(x, p + ".fc1")), p + ".fc2")

    def _residual(self, h, branch, p, omega, stack):
        """omega * h + branch (Admin, Liu et al. 2020 eq. 5; omega = 1 without it). While
        profiling (admin_init), omega_i is set to the running scale r first, then
        r = sqrt(Var[omega_i h] + Var[f_i(h)]) (their Algorithm 1, as mhe__sub_leave)."""
        if not self.r["admin"]:
            return h + branch
        om = self.param(p + omega)
        if self._admin is not None:
            with torch.no_grad():
                rr = self._admin[stack]
                om.fill_(rr)
                scaled = (torch.tensor(rr, dtype=h.dtype) * h).double()
                br = branch.double()
                var = lambda t: float((t * t).mean() - t.mean() ** 2)
                self._admin[stack] = f32(math.sqrt(var(scaled) + var(br)))
        return om * h + branch

    def _block(self, x, p, kind, mask, cross=None, ctx=None, stack=0):
        """one block: self-attention, cross-attention (encdec decoder: cross = (encoder output,
        kind, mask)), MLP. Pre-norm: h + f(N(h)); post-norm: N(omega h + f(h))."""
        ctx = dict(ctx or {})
        xctx = dict(ctx, cross=True, lens=ctx.get("mem_lens"))
        ctx["cross"] = False
        skip = stack == 0 and ctx.get("layer") in self.skip_attn
        if not self.r["post_norm"]:
            u = self._norm(x, p + "norm1")
            if "us" in ctx:
                ctx["us"].append(u)
            if not skip:
                x = x + self._attn(u, u, p + "attn", kind, mask, ctx)
            if cross:
                x = x + self._attn(self._norm(x, p + "norm3"), cross[0], p + "cross", cross[1], cross[2], xctx)
            return x + self._mlp(self._norm(x, p + "norm2"), p + "mlp")
        if "us" in ctx:
            ctx["us"].append(x)
        if not skip:
            x = self._norm(self._residual(x, self._attn(x, x, p + "attn", kind, mask, ctx), p, "omega1", stack),
                           p + "norm1")
        if cross:
            x = self._norm(self._residual(x, self._attn(x, cross[0], p + "cross", cross[1], cross[2], xctx), p,
                                          "omega3", stack), p + "norm3")
        return self._norm(self._residual(x, self._mlp(x, p + "mlp"), p, "omega2", stack), p + "norm2")

    def embed(self, tokens, feats=None):
        """token embeddings [B, T, C]: vocabulary rows, or a word model's hash embedding of the
        word types (token id >= 4 is type id - 4 of feats; ids < 4 are the special tokens).
        feats: hash-emb: bucket per type [n_types]; hash-pool/add/proj: bits [n_types, T]."""
        r = self.r
        emb = r["embedding"]
        if emb == "vocab":         # bytes, or a word vocabulary (feats: the row of each word type)
            if feats is not None:
                rows = torch.as_tensor(feats).long()
                tokens = torch.where(tokens < N_SPECIAL, tokens, rows[(tokens - N_SPECIAL).clamp(min=0, max=max(len(rows) - 1, 0))])
            return self.param("tok_emb.weight")[tokens]
        if feats is None:
            raise ValueError("embedding=%s: give feats, the hash features of the word types" % emb)
        feats = torch.as_tensor(feats)
        special = tokens < N_SPECIAL
        types = (tokens - N_SPECIAL).clamp(min=0)
        if emb == "hash-emb":       # thesis eq. 2.12: a table of N buckets
            e = self.param("tok_emb.weight")[feats.long()]
        else:
            T = r["hash_bits"]
            bits = feats.long()[:, :T]
            if emb == "hash-pool":  # eq. 2.1: one codebook, softmax over the chunks per dimension
                k = r["hash_chunk"]
                idx = []
                for c in range(-(-T // k)):
                    chunk = bits[:, c * k:(c + 1) * k]
                    w = 2 ** torch.arange(chunk.shape[1] - 1, -1, -1)
                    idx.append((chunk * w).sum(1) + 1)               # row 0 is reserved
                idx = torch.stack(idx, 1)                            # [n_types, chunks]
                e = (torch.softmax(self.param("pool.weight"), dim=0)[None] * self.param("pool.codebook.weight")[idx]).sum(1)
            elif emb == "hash-add":  # eq. 2.2: T two-row codebooks, gamma = sqrt(T)
                books = self.param("add.books")
                e = books[torch.arange(T)[None, :], bits].sum(1) / math.sqrt(T)
            else:                   # eq. 2.3: Pearson correlation of the bits with each axis
                tau = bits.to(self.dtype)
                tau = tau - tau.mean(dim=1, keepdim=True)
                w = self.param("proj.weight")
                w = w - w.mean(dim=1, keepdim=True)
                e = (tau @ w.t()) / (torch.clamp(tau.norm(dim=1, keepdim=True), min=1e-8) *
                                     torch.clamp(w.norm(dim=1), min=1e-8)[None, :])
            e = e + self.param("regular_emb.weight")
        words = e[types.clamp(max=e.shape[0] - 1)] if e.shape[0] else e.new_zeros(tokens.shape + (r["d_model"],))
        sp = self.param("special_emb.weight")[tokens.clamp(max=N_SPECIAL - 1)]
        return torch.where(special[..., None], sp, words)

    def hidden(self, tokens, lengths=None, src=None, src_lengths=None, feats=None):
        """the final hidden states [B, T, C] (after ln_f for pre-norm)"""
        r = self.r
        tokens = torch.as_tensor(tokens).long()
        B, T = tokens.shape
        mem, src_emb, cmask = None, None, None
        if r["arch"] == "encdec":
            if src is None:
                raise ValueError("an encoder-decoder model needs a source (src)")
            src = torch.as_tensor(src).long()
            Ts = src.shape[1]
            e = src_emb = self.param("tok_emb.weight")[src] + self.param("enc.pos_emb.weight")[:Ts]
            emask = self._blocked(B, Ts, Ts, src_lengths, False)
            for l in range(r["enc_layers"]):
                e = self._block(e, "enc.layers.%d." % l, r["enc_attn"][l], emask,
                                ctx={"lens": src_lengths, "emb": src_emb, "fixed": False, "layer": l}, stack=1)
            mem = self._norm(e, "enc.ln_f") if not r["post_norm"] else e
            cmask = self._blocked(B, T, Ts, src_lengths, False)
        # the input embeddings (staticemb-qk's static embeddings too)
        x = x_emb = self.embed(tokens, feats) + self.param("pos_emb.weight")[:T]
        causal = r["arch"] != "encoder"
        mask = self._blocked(B, T, T, lengths, causal)
        fixed_u = None
        fixed_kinds = [k for k in r["attn"] if k in ("rndemb-qk", "fixedseq-qk")]
        if fixed_kinds and r["arch"] != "encdec":
            # eq. 4.9 / 4.11: the model's own blocks on a fixed input (one sequence, no padding)
            top = max(l for l, k in enumerate(r["attn"]) if k in fixed_kinds) + 1
            if fixed_kinds[0] == "rndemb-qk":
                if self._fixed_eps is None:
                    self._fixed_eps = torch.from_numpy(fixed_eps(r))
                f = self._fixed_eps[:T].to(self.dtype)[None]
            else:
                ts = torch.tensor(fixed_tokens(r)[:T], dtype=torch.long)[None]
                f = self.param("tok_emb.weight")[ts] + self.param("pos_emb.weight")[:T]
            fctx = {"lens": None, "emb": f, "fixed": True, "us": []}
            fmask = self._blocked(1, T, T, None, causal)
            for l in range(top):
                f = self._block(f, "layers.%d." % l, r["attn"][l], fmask, ctx=dict(fctx, layer=l))
            fixed_u = fctx["us"]
        for l in range(r["n_layers"]):
            x = self._block(x, "layers.%d." % l, r["attn"][l], mask,
                            (mem, r["cross_attn"][l], cmask) if mem is not None else None,
                            ctx={"lens": lengths, "mem_lens": src_lengths, "emb": x_emb, "mem_emb": src_emb,
                                 "fixed": False, "fixed_u": fixed_u, "layer": l})
        if not r["post_norm"]:
            x = self._norm(x, "ln_f")
        return x

    def logits(self, tokens, lengths=None, src=None, src_lengths=None, feats=None):
        """per-token logits of the token head: [B, T, vocab_size], or [B, T, 3] (sr)"""
        x = self.hidden(tokens, lengths, src, src_lengths, feats)
        if self.r["token_head"] == "sr":
            return F.linear(x, self.param("sr_head.weight"), self._p("sr_head.bias"))
        W = self.param("lm_head.weight") if self.has("lm_head.weight") else self.param("tok_emb.weight")
        return x @ W.t()

    def forward(self, tokens, targets=None, lengths=None, src=None, src_lengths=None, labels=None, feats=None,
                reduction="mean"):
        """loss as mhe_model_forward_batch computes it when targets (per token, -1 ignored;
        padding beyond lengths ignored) or labels (per sequence: the classification head) are
        given; else the logits. reduction "sum": the sum over the targets (a data-parallel
        rank's share, 0 when it holds none)"""
        if labels is not None:
            return self.cls_loss(tokens, labels, lengths, feats, reduction)
        if targets is None:
            return self.logits(tokens, lengths, src, src_lengths, feats)
        return self.loss(tokens, targets, lengths, src, src_lengths, feats, reduction)

    def loss(self, tokens, targets, lengths=None, src=None, src_lengths=None, feats=None, reduction="mean"):
        """lm / sr: mean (or sum) cross-entropy of the token head over the targets that are
        not -1 (and within each sequence's length)"""
        lg = self.logits(tokens, lengths, src, src_lengths, feats)
        B, T, V = lg.shape
        targets = torch.as_tensor(targets).long()
        if lengths is not None:
            keep = torch.arange(T)[None, :] < torch.as_tensor(lengths).reshape(-1)[:, None]
            targets = torch.where(keep, targets, torch.full_like(targets, -1))
        return F.cross_entropy(lg.reshape(B * T, V), targets.reshape(B * T).to(lg.device), ignore_index=-1,
                               reduction=reduction)

    def cls_loss(self, tokens, labels, lengths=None, feats=None, reduction="mean"):
        """cls: mean over each sequence's real tokens, cls_head, mean cross-entropy over the
        sequences (mhe__forward_batch with labels)"""
        if self.r["n_classes"] < 1:
            raise ValueError("the model has no classification head (n_classes=0)")
        x = self.hidden(tokens, lengths, feats=feats)
        B, T, _ = x.shape
        lens = torch.as_tensor(lengths if lengths is not None else [T] * B).reshape(-1)
        keep = (torch.arange(T)[None, :] < lens[:, None]).to(x.dtype)
        pooled = (x * keep[..., None]).sum(1) / lens[:, None].to(x.dtype)
        lg = F.linear(pooled, self.param("cls_head.weight"), self._p("cls_head.bias"))
        return F.cross_entropy(lg, torch.as_tensor(labels).long().reshape(-1).to(lg.device), ignore_index=-1,
                               reduction=reduction)

    @torch.no_grad()
    def admin_init(self, tokens, targets=None, lengths=None, src=None, src_lengths=None, labels=None, feats=None):
        """Admin's profiling pass (Liu et al. 2020, Algorithm 1; mhe_model_admin_init): one forward
        on the first batch sets every omega to the output scale of the sublayers before it,
        per stack (decoder/main 0, encoder 1)"""
        if not self.r["admin"]:
            raise ValueError("Admin initialisation needs a model with admin=1")
        self._admin = [1.0, 1.0]
        try:
            self.forward(tokens, targets, lengths, src, src_lengths, labels, feats)
        finally:
            self._admin = None


# --------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------

def read_safetensors(path):
    """-> (tensors {name: np array (float32 or int32)}, metadata {str: str}, names in file order)"""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise CheckpointError("%s: %d bytes, shorter than the 8-byte header length" % (path, len(buf)))
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise CheckpointError("%s: header length %d runs past the end of the file" % (path, n))
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("%s: bad JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise CheckpointError("%s: the header is not a JSON object" % path)
    meta = header.pop("__metadata__", {}) or {}
    base, size = 8 + n, len(buf) - 8 - n
    tensors, order = {}, []
    for name, info in header.items():
        try:
            dt, shape, (b, e) = info["dtype"], [int(d) for d in info["shape"]], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise CheckpointError("%s: tensor '%s': bad entry %r" % (path, name, info))
        if dt not in ("F32", "I32"):
            raise CheckpointError("%s: tensor '%s' has dtype %s; mhe writes F32 (and I32 word state)"
                                  % (path, name, dt))
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= b <= e <= size) or e - b != 4 * count:
            raise CheckpointError("%s: tensor '%s': data_offsets %r do not hold shape %r" % (path, name, [b, e], shape))
        arr = np.frombuffer(buf, dtype="<f4" if dt == "F32" else "<i4", count=count, offset=base + b)
        tensors[name] = arr.reshape(shape).astype(np.float32 if dt == "F32" else np.int32)
        order.append(name)
    return tensors, {str(k): str(v) for k, v in meta.items()}, order


def write_safetensors(path, items, meta):
    """items: [(name, np array float32 or int32)] in file order; written to path.tmp, then renamed
    (as mhe_st_save_file: a file already at path is replaced only by a complete new one)"""
    header = {"__metadata__": dict(meta)} if meta else {}
    blobs, off = [], 0
    for name, arr in items:
        a = np.asarray(arr)
        dt = "I32" if a.dtype.kind in "iu" else "F32"
        raw = np.ascontiguousarray(a, dtype="<i4" if dt == "I32" else "<f4").tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(hb)))
            f.write(hb)
            for raw in blobs:
                f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:       # a failed or interrupted save leaves no partial file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------

WORD_STATE = ("lsh.ngrams", "vocab.words")


def load_checkpoint(path, dtype=torch.float32):
    """An mhe checkpoint -> (MheModel, cfg, AdamWState or None). cfg: the config fields of the
    metadata as mhe wrote them (strings). The optimizer state is there when the file is a
    trainer checkpoint (optim.m.*, optim.v.*, step, rng, train.*). Raises CheckpointError
    naming the problem: not mhe's format, a missing config key, an unknown attention kind, a
    missing, unknown or misshapen tensor."""
    tensors, meta, _ = read_safetensors(path)
    fmt = meta.get("format")
    if fmt != FORMAT:
        raise CheckpointError("%s: not an mhe checkpoint: metadata format is %r, want %r" % (path, fmt, FORMAT))
    missing = [k for k in CONFIG_REQUIRED if k not in meta]
    if missing:
        raise CheckpointError("%s: metadata lacks config field(s) %s" % (path, ", ".join(missing)))
    # mhe writes every config field it has: a key the twin does not know may change the model
    unknown = [k for k in meta if k not in CONFIG_KEYS and k not in ("format", "step", "rng", "task")
               and not (k.startswith("train.") and k[6:] in TRAIN_KEYS)]
    if unknown:
        raise CheckpointError("%s: metadata key(s) %s are not config fields the twin knows (a newer mhe?)"
                              % (path, ", ".join(unknown)))
    cfg = {k: meta[k] for k in CONFIG_KEYS if k in meta}
    try:
        model = MheModel(cfg, dtype)
    except CheckpointError as e:
        raise CheckpointError("%s: %s" % (path, e))
    for name in model.names:
        if name not in tensors:
            raise CheckpointError("%s: checkpoint has no tensor '%s'" % (path, name))
        a = tensors[name]
        if tuple(a.shape) != model.shapes[name] or a.dtype != np.float32:
            raise CheckpointError("%s: tensor '%s' has shape %s (%s), the model expects %s (F32)"
                                  % (path, name, list(a.shape), a.dtype, list(model.shapes[name])))
    known = set(model.names)
    for name in tensors:
        base = name[8:] if name.startswith(("optim.m.", "optim.v.")) else name
        if base not in known and name not in WORD_STATE:
            raise CheckpointError("%s: checkpoint has tensor '%s' that this model does not" % (path, name))
    with torch.no_grad():
        for name in model.names:
            model.param(name).copy_(torch.from_numpy(tensors[name]).to(dtype))
    model.extra_i32 = {k: tensors[k] for k in WORD_STATE if k in tensors}
    opt = None
    if "step" in meta or any(k.startswith("optim.") for k in tensors):
        if "step" not in meta or "rng" not in meta:
            raise CheckpointError("%s: not a trainer checkpoint: metadata 'step' or 'rng' missing" % path)
        try:
            step = int(meta["step"])
        except ValueError:
            raise CheckpointError("%s: bad step '%s'" % (path, meta["step"]))
        train = dict(TRAIN_DEFAULTS)
        train.update({k[6:]: v for k, v in meta.items() if k.startswith("train.") and k[6:] in train})
        opt = AdamWState(model, train, step=step, rng=Xoshiro.from_hex(meta["rng"]).hex(), task=meta.get("task"))
        for name in model.names:
            for which, store in (("m", opt.m), ("v", opt.v)):
                key = "optim.%s.%s" % (which, name)
                if key not in tensors:
                    raise CheckpointError("%s: checkpoint has no tensor '%s'" % (path, key))
                if tuple(tensors[key].shape) != model.shapes[name]:
                    raise CheckpointError("%s: tensor '%s' has shape %s, the model expects %s"
                                          % (path, key, list(tensors[key].shape), list(model.shapes[name])))
                store[name] = torch.from_numpy(tensors[key].copy()).to(dtype)
    return model, cfg, opt


def save_checkpoint(path, model, cfg=None, opt_state=None, step=None):
    """Writes an mhe checkpoint of model (and of the trainer when opt_state is given): the
    metadata keys, tensor names, order and dtypes mhe writes, to path.tmp then renamed.
    cfg: the config fields (default: the model's own). step: overrides opt_state.step."""
    meta = {"format": FORMAT}
    meta.update(config_meta(cfg if cfg is not None else model.meta))
    if cfg is not None:
        want = [(x[0], x[1]) for x in param_layout(resolve_config(meta))]
        if want != [(x[0], x[1]) for x in model.layout]:
            raise CheckpointError("save_checkpoint: cfg describes other tensors than the model holds")
    items = []
    for name in model.names:
        items.append((name, model.param(name).detach().to(torch.float32).cpu().numpy()))
        if opt_state is not None:
            items.append(("optim.m." + name, opt_state.m[name].to(torch.float32).cpu().numpy()))
            items.append(("optim.v." + name, opt_state.v[name].to(torch.float32).cpu().numpy()))
    for k in WORD_STATE:
        if k in model.extra_i32:
            items.append((k, model.extra_i32[k]))
    if opt_state is not None:
        meta["step"] = str(int(opt_state.step if step is None else step))
        meta["rng"] = opt_state.rng
        if getattr(opt_state, "task", None):
            meta["task"] = opt_state.task
        for k in TRAIN_KEYS:
            meta["train." + k] = str(opt_state.train.get(k, dict(TRAIN_DEFAULTS)[k]))
    write_safetensors(path, items, meta)


# --------------------------------------------------------------------------
# the optimizer: mhe's trainer step
# --------------------------------------------------------------------------

class AdamWState:
    """What mhe's trainer keeps: AdamW moments m, v per tensor (by mhe name), the steps done,
    the batch RNG's state (hex, as in the checkpoint; the twin does not draw batches), and
    the train config (train.KEY strings)."""

    def __init__(self, model, train=None, step=0, rng=None, task=None):
        self.task = task    # the checkpoint's "task" metadata (mhe train --task): None when it has none
        self.train = dict(TRAIN_DEFAULTS)
        self.train.update({k: str(v) for k, v in (train or {}).items()})
        self.m = {n: torch.zeros(model.shapes[n], dtype=model.dtype) for n in model.names}
        self.v = {n: torch.zeros(model.shapes[n], dtype=model.dtype) for n in model.names}
        self.step = step
        # a fresh trainer seeds its RNG from the train seed (mhe__trainer_alloc)
        self.rng = rng or Xoshiro(int(self.train["seed"])).hex()
        self.last_loss = self.last_grad_norm = self.last_lr = None

    def tc(self):
        """the train config as mhe holds it: float32 floats, ints, the schedule name"""
        t = {}
        for k, v in self.train.items():
            if k == "schedule":
                t[k] = v
            elif k in ("lr", "min_lr", "beta1", "beta2", "eps", "weight_decay", "clip", "mlm_prob", "sr_prob"):
                t[k] = f32(v)
            else:
                t[k] = int(v)
        return t


def lr_at(tc, step):
    """mhe_lr_at: the learning rate at step (0-based), computed in double, rounded to float32.
    Linear warm-up from 0 over `warmup` steps; then constant, linear or cosine to min_lr at
    `steps` (cosine: min_lr + (lr - min_lr)(1 + cos(pi p))/2, Loshchilov and Hutter 2017),
    invsqrt (Vaswani et al. 2017 eq. 3's shape), or cosine with `cycles` hard restarts."""
    lr, lo = tc["lr"], tc["min_lr"]
    warm, sched = tc["warmup"], tc["schedule"]
    decay_steps = tc["steps"] - warm
    if warm > 0 and step < warm:
        return f32(lr * (step + 1) / warm)
    if sched == "constant":
        return f32(lr)
    if sched == "invsqrt":
        w = warm if warm > 0 else 1
        s1 = float(step) + 1
        return f32(lr * math.sqrt(w / (s1 if s1 > w else w)))
    p = (step - warm) / decay_steps if decay_steps > 0 else 1.0
    p = min(max(p, 0.0), 1.0)
    if sched == "linear":
        return f32(lr + (lo - lr) * p)
    if sched == "cosine-restarts":
        if p >= 1:
            return f32(lo)
        q = math.fmod(p * tc["cycles"], 1.0)
        return f32(lo + (lr - lo) * 0.5 * (1 + math.cos(3.141592653589793 * q)))
    return f32(lo + (lr - lo) * 0.5 * (1 + math.cos(3.141592653589793 * p)))


@torch.no_grad()
def clip_grad_norm_(grads, max_norm, reduce=None):
    """mhe_clip_grad_norm: the global L2 norm of all gradients (a double sum of float squares,
    rounded to float32); when above max_norm > 0 (and finite) every gradient is scaled by
    max_norm / (norm + 1e-6) in float32. Returns the norm before clipping. reduce: maps the
    local sum of squares to the global one (sharded gradients: an all-reduce)."""
    total = 0.0
    for g in grads:
        total += float((g.double() * g.double()).sum())
    if reduce is not None:
        total = reduce(total)
    norm = f32(math.sqrt(total))
    if max_norm > 0 and norm > max_norm and math.isfinite(norm):
        s = np.float32(max_norm) / (np.float32(norm) + np.float32(1e-6))
        for g in grads:
            g.mul_(torch.tensor(float(s), dtype=g.dtype))
    return norm


@torch.no_grad()
def adamw_update_(p, g, m, v, lr, beta1, beta2, eps, weight_decay, t):
    """mhe_adamw_update, one tensor (Loshchilov and Hutter 2019, Algorithm 2, in PyTorch's
    order): the constants in float32 as mhe computes them, then per element
        m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
        p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
    with bc1 = 1 - b1^t, bc2 = 1 - b2^t (bias corrections; eps outside the square root, after
    the correction); weight_decay is 0 for tensors outside the decay set."""
    one, b1, b2 = np.float32(1), np.float32(beta1), np.float32(beta2)
    lr32, wd = np.float32(lr), np.float32(weight_decay)
    bc1 = one - np.power(b1, np.float32(t))
    bc2 = one - np.power(b2, np.float32(t))
    step, bc2_sqrt, decay = lr32 / bc1, np.sqrt(bc2), one - lr32 * wd
    c = lambda x: torch.tensor(float(x), dtype=p.dtype)
    m.mul_(c(b1)).add_(g * c(one - b1))
    v.mul_(c(b2)).add_(g * c(one - b2) * g)
    p.mul_(c(decay)).sub_((m * c(step)) / (v.sqrt() / c(bc2_sqrt) + c(np.float32(eps))))


def train_step(model, opt, tokens, targets=None, lengths=None, src=None, src_lengths=None, labels=None,
               feats=None, loss_fn=None, params=None, sq_reduce=None, after_backward=None):
    """One step of mhe's trainer (mhe__trainer_update) on a given batch: Admin profiling on a
    fresh run's first step, forward and backward (no dropout), global-norm clipping, the step's
    learning rate, AdamW on every tensor in mhe's memory order (weight decay on the decay set
    only), step + 1. Returns (loss, grad norm before clipping, lr).
    Data-parallel use (the train command): the batch arguments are the global batch (Admin
    profiles it); loss_fn() -> (the tensor to differentiate, the step's loss as a float), e.g.
    a DDP rank's share; params: [(mhe name, Parameter)] AdamW updates (default the model's;
    FSDP: the local shards, with opt.m / opt.v holding the same shards); sq_reduce: the
    global sum of squared gradients from the local one (sharded gradients); after_backward(grads)
    -> False skips the update (fp16 loss scaling found an overflow; the step still counts)."""
    tc = opt.tc()
    if model.r["admin"] and opt.step == 0:
        model.admin_init(tokens, targets, lengths, src, src_lengths, labels, feats)
    params = model.named_mhe_parameters() if params is None else params
    for _, p in params:
        p.grad = None
    if loss_fn is None:
        loss = model(tokens, targets, lengths, src, src_lengths, labels, feats)
        report = None
    else:
        loss, report = loss_fn()
    loss.backward()
    grads = []
    for _, p in params:
        if p.grad is None:      # a tensor the loss does not use: its gradient is zero
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    if after_backward is not None and not after_backward(grads):
        opt.last_loss, opt.last_grad_norm, opt.last_lr = report, float("nan"), lr_at(tc, opt.step)
        opt.step += 1
        return opt.last_loss, opt.last_grad_norm, opt.last_lr
    norm = clip_grad_norm_(grads, tc["clip"], sq_reduce)
    opt.last_loss, opt.last_grad_norm = float(loss.detach()) if report is None else report, norm
    if not math.isfinite(norm):
        raise FloatingPointError("gradient norm is %g at step %d; no update made" % (norm, opt.step))
    lr = lr_at(tc, opt.step)
    opt.last_lr = lr
    for name, p in params:
        adamw_update_(p.data, p.grad, opt.m[name], opt.v[name], lr, tc["beta1"], tc["beta2"], tc["eps"],
                      tc["weight_decay"] if model.decay[name] else 0.0, opt.step + 1)
    opt.step += 1
    return opt.last_loss, norm, lr


def _lm_row(r, w, T, Ts, prob, g, tok, tgt, src):
    """mhe__lm_row: one row of a language-model batch from the window w (appended to tok, tgt,
    src). Encoders: masked LM (mhe_mlm_mask: each position a target with prob, its input then
    [MASK] 80 %, a random token 10 %, itself 10 %; Devlin et al. 2019) drawing from g."""
    if r["arch"] == "encoder":
        prob, V = np.float32(prob), r["vocab_size"]
        ti, tt = [], []
        for x in w[:T]:
            inp, y = x, -1
            if g.uniform() < prob:
                u = g.uniform()
                y = x
                if u < np.float32(0.8):
                    inp = r["mask_token"]
                elif u < np.float32(0.9):
                    inp = ((g.u64() >> 32) * V) >> 32
            ti.append(inp)
            tt.append(y)
        tok.append(ti)
        tgt.append(tt)
        return
    if r["arch"] == "encdec":
        src.append(list(w[:Ts]))
        w = w[Ts - 1:]              # the decoder's first input is the last source token
    tok.append(list(w[:T]))
    tgt.append(list(w[1:T + 1]))


def evaluate(model, data, batch=16, seq_len=128, max_batches=50, src_len=0):
    """mhe_evaluate(_s2s), as `mhe eval` scores a text: consecutive windows seq_len apart (every
    target scored once), in batches, up to max_batches (<= 0: all); encoders with fixed masks
    (15 %, from the seed 0x6d6c6d). -> the mean loss over the scored tokens (a float)"""
    r = model.r
    T = min(seq_len, r["max_seq_len"])
    Ts = min(src_len or T, r["max_seq_len"])
    need = Ts + T if r["arch"] == "encdec" else T if r["arch"] == "encoder" else T + 1
    if len(data) < need:
        raise ValueError("evaluation data has %d tokens, needs at least %d" % (len(data), need))
    windows = (len(data) - need) // T + 1
    g = Xoshiro(0x6d6c6d)
    total, count, w, nb = 0.0, 0, 0, 0
    while w < windows and (max_batches <= 0 or nb < max_batches):
        tok, tgt, src = [], [], []
        for _ in range(min(batch, windows - w)):
            _lm_row(r, data[w * T:w * T + need], T, Ts, f32(0.15), g, tok, tgt, src)
            w += 1
        tgt = torch.tensor(tgt, dtype=torch.long)
        with torch.no_grad():
            loss = float(model.loss(torch.tensor(tok, dtype=torch.long), tgt,
                                    src=torch.tensor(src, dtype=torch.long) if src else None))
        c = int((tgt != -1).sum())
        if c:
            total += f32(loss) * c  # mhe sums the float32 batch means in double
        count += c
        nb += 1
    return f32(total / count) if count else 0.0


def lm_batch(model, opt, data, batch=None, seq_len=None):
    """The next language-model batch of mhe's trainer (mhe__lm_batch): tc.batch windows of
    data (token ids) at offsets drawn with the trainer's RNG; a decoder predicts the next
    token, an encoder-decoder's decoder continues the source, an encoder learns masked LM
    (mhe_mlm_mask: each position is a target with mlm_prob, its input then [MASK] 80 %, a
    random token 10 %, itself 10 %; Devlin et al. 2019). opt.rng advances as mhe's does,
    including the dropout seed mhe__trainer_update draws after the batch.
    -> dict(tokens, targets[, src])."""
    r, tc = model.r, opt.tc()
    B, T = batch or tc["batch"], seq_len or tc["seq_len"]
    Ts = tc["src_len"] or T
    if r["token_head"] == "sr":
        raise ValueError("the model has a Shuffle+Random head: lm_batch draws language-model batches only")
    for what, v in (("seq_len", T), ("src_len", Ts)):
        if v > r["max_seq_len"]:
            raise ValueError("%s %d exceeds the model's max_seq_len %d" % (what, v, r["max_seq_len"]))
    need = Ts + T if r["arch"] == "encdec" else T if r["arch"] == "encoder" else T + 1
    n = len(data)
    if n < need:
        raise ValueError("training data has %d tokens, a batch row needs %d" % (n, need))
    g = Xoshiro.from_hex(opt.rng)
    tok, tgt, src = [], [], []
    for _ in range(B):
        span = n - need + 1
        off = g.u64() % span if span > 0xFFFFFFFF else ((g.u64() >> 32) * span) >> 32
        _lm_row(r, data[off:off + need], T, Ts, tc["mlm_prob"], g, tok, tgt, src)
    g.u64()                         # the step's dropout seed
    opt.rng = g.hex()
    out = {"tokens": torch.tensor(tok, dtype=torch.long), "targets": torch.tensor(tgt, dtype=torch.long)}
    if src:
        out["src"] = torch.tensor(src, dtype=torch.long)
    return out


def _word_class(c):
    """mhe's word rule per byte: 1 word ([A-Za-z0-9_] and bytes >= 0x80), 0 space, 2 punctuation"""
    if c >= 0x80 or 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95:
        return 1
    return 0 if c == 32 or 9 <= c <= 13 or 0x1c <= c <= 0x1f else 2


def _words(text):
    """[(start, end)] of the words of text (bytes): maximal runs of one non-space class"""
    out, p, n = [], 0, len(text)
    while p < n:
        while p < n and _word_class(text[p]) == 0:
            p += 1
        if p == n:
            break
        b, cls = p, _word_class(text[p])
        while p < n and _word_class(text[p]) == cls:
            p += 1
        out.append((b, p))
    return out


def read_words(text, types=None):
    """A word corpus as mhe_words_parse reads it: every word (lower-cased ASCII) is
    4 + its type's index (types in order of first appearance, appended to `types`), and a
    line break after a word ends its line with </s> (3), as does the end of the text.
    -> (tokens, types: list of bytes)"""
    types = [] if types is None else types
    index = {w: i for i, w in enumerate(types)}
    out, prev, pending = [], 0, False
    for b, e in _words(text):
        if pending and b"\n" in text[prev:b]:
            out.append(3)
        w = text[b:e].lower()
        if w not in index:
            index[w] = len(types)
            types.append(w)
        out.append(N_SPECIAL + index[w])
        pending, prev = True, e
    if pending:
        out.append(3)
    return out, types


def read_text_set(text, types=None):
    """`label<TAB>text` lines (mhe_text_set_parse): [(label, tokens)]; tokens are the bytes of
    the text, or word tokens (4 + type index, as read_words) when types is a list"""
    out = []
    for line in text.split(b"\n"):
        line = line[:-1] if line.endswith(b"\r") else line
        if not line:
            continue
        lab, _, t = line.partition(b"\t")
        if types is None:
            toks = list(t)
        else:
            index = {w: i for i, w in enumerate(types)}
            toks = []
            for b, e in _words(t):
                w = t[b:e].lower()
                if w not in index:
                    index[w] = len(types)
                    types.append(w)
                toks.append(N_SPECIAL + index[w])
        out.append((int(lab), toks))
    return out


def cls_batch(model, opt, examples):
    """The next batch of mhe_trainer_step_cls: tc.batch examples drawn with the trainer's RNG
    (with replacement), each cut to seq_len. examples: [(label, tokens)] (read_text_set).
    -> dict(tokens, lengths, labels)"""
    tc = opt.tc()
    B, T = tc["batch"], tc["seq_len"]
    g = Xoshiro.from_hex(opt.rng)
    tok, lens, labs = [], [], []
    for _ in range(B):
        lab, t = examples[((g.u64() >> 32) * len(examples)) >> 32]
        t = list(t[:T])
        lens.append(len(t))
        labs.append(lab)
        tok.append(t + [0] * (T - len(t)))
    g.u64()                         # the step's dropout seed
    opt.rng = g.hex()
    return {"tokens": torch.tensor(tok, dtype=torch.long), "lengths": lens, "labels": labs}


def sr_batch(model, opt, data, n_types):
    """The next batch of mhe_trainer_step_sr: tc.batch windows of seq_len word tokens, then
    mhe_sr_corrupt (the authors' Shuffle+Random task, thesis sec. 2.4): one permutation pi of
    the positions per batch; each word token (id >= 4) is shuffled with sr_prob (takes the word
    at pi(t) when that is another word: label 1), else replaced with sr_prob by a random word
    type of the n_types (up to 8 draws for one that differs: label 2), else kept (label 0);
    special tokens get label -1. -> dict(tokens, targets)"""
    tc = opt.tc()
    B, T, prob = tc["batch"], tc["seq_len"], np.float32(tc["sr_prob"])
    if len(data) < T:
        raise ValueError("training data has %d tokens, a window needs %d" % (len(data), T))
    g = Xoshiro.from_hex(opt.rng)
    below = lambda k: g.u64() % k if k > 0xFFFFFFFF else ((g.u64() >> 32) * k) >> 32
    rows = [list(data[o:o + T]) for o in [below(len(data) - T + 1) for _ in range(B)]]
    perm = list(range(T))
    for t in range(T - 1, 0, -1):   # Fisher-Yates, as mhe draws it
        j = below(t + 1)
        perm[t], perm[j] = perm[j], perm[t]
    first = N_SPECIAL
    tok, lab = [], []
    for row in rows:
        ti, tl = [], []
        for t in range(T):
            p, x = perm[t], row[t]
            inp, y = x, -1
            if x >= first:
                y = 0
                if g.uniform() < prob:
                    if row[p] >= first and row[p] != x:
                        inp, y = row[p], 1
                elif g.uniform() < prob and n_types > 0:
                    for _ in range(8):
                        w = first + below(n_types)
                        if w != x:
                            inp, y = w, 2
                            break
            ti.append(inp)
            tl.append(y)
        tok.append(ti)
        lab.append(tl)
    g.u64()                         # the step's dropout seed
    opt.rng = g.hex()
    return {"tokens": torch.tensor(tok, dtype=torch.long), "targets": torch.tensor(lab, dtype=torch.long)}


# --------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------

def read_token_file(path):
    """`mhe grad`'s token file (decoder/encoder lines of T+1 ids, `.` padding at the end;
    encdec `SOURCE | DECODER`) -> dict(tokens, targets, lengths, src, src_lengths)"""
    rows, srcs = [], []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            if "|" in line:
                s, d = line.split("|", 1)
                srcs.append(s.split())
            else:
                d = line
            rows.append(d.split())
    T = len(rows[0]) - 1
    tok = [[0 if v == "." else int(v) for v in r[:T]] for r in rows]
    tgt = [[-1 if v == "." else int(v) for v in r[1:]] for r in rows]
    lens = [min(sum(1 for v in r if v != "."), T) for r in rows]
    out = {"tokens": torch.tensor(tok), "targets": torch.tensor(tgt), "lengths": lens if min(lens) < T else None}
    if srcs:
        Ts = len(srcs[0])
        out["src"] = torch.tensor([[0 if v == "." else int(v) for v in s] for s in srcs])
        sl = [sum(1 for v in s if v != ".") for s in srcs]
        out["src_lengths"] = sl if min(sl) < Ts else None
    assert all(len(r) == T + 1 for r in rows), "every line needs the same number of ids"
    return out


def _cmd_eval(args):
    model, _, _ = load_checkpoint(args.model, torch.float64 if args.float64 else torch.float32)
    b = read_token_file(args.tokens)
    with torch.no_grad():
        loss = model.loss(b["tokens"], b["targets"], b["lengths"], b.get("src"), b.get("src_lengths"))
    print("loss %.6f" % float(loss))
    return 0


def _cmd_roundtrip(args):
    model, cfg, opt = load_checkpoint(args.model)
    save_checkpoint(args.out, model, cfg, opt)
    print("wrote %s (%d tensors%s)" % (args.out, len(model.names), ", optimizer state" if opt else ""))
    return 0


def main(argv=None):
    """Subcommands: eval (the loss of `mhe grad`'s token file), roundtrip (load and save a
    checkpoint). Others add theirs to COMMANDS."""
    import argparse
    ap = argparse.ArgumentParser(prog="mhe_torch.py", description="The PyTorch twin of mhe.")
    sub = ap.add_subparsers(dest="cmd")
    e = sub.add_parser("eval", help="loss of a token file (as `mhe grad` reads it)")
    e.add_argument("--model", required=True)
    e.add_argument("--tokens", required=True)
    e.add_argument("--float64", action="store_true")
    rt = sub.add_parser("roundtrip", help="load a checkpoint and save it again")
    rt.add_argument("--model", required=True)
    rt.add_argument("--out", required=True)
    for name, (setup, _) in COMMANDS.items():
        setup(sub.add_parser(name))
    a = ap.parse_args(argv)
    if not a.cmd:
        ap.print_help()
        return 2
    fn = {"eval": _cmd_eval, "roundtrip": _cmd_roundtrip}.get(a.cmd) or COMMANDS[a.cmd][1]
    try:
        return fn(a)
    except CheckpointError as ex:
        sys.stderr.write("mhe_torch: %s\n" % ex)
        return 1


# more subcommands: name -> (add the arguments to a parser, run(args) -> exit status)
COMMANDS = {}


# --------------------------------------------------------------------------
# lockstep replay of `mhe train --dump-batches`, strided perplexity, and
# training with the twin's own seeds
# --------------------------------------------------------------------------

def fnv1a64_tokens(tokens):
    """FNV-1a 64 of token ids as int32 little-endian bytes (the dump's corpus_fnv1a64)"""
    h, mask = 1469598103934665603, (1 << 64) - 1
    for b in np.asarray(tokens, dtype="<i4").tobytes():
        h = ((h ^ b) * 1099511628211) & mask
    return h


def read_corpus(path):
    """a text file as mhe reads a byte-level corpus: one token per byte"""
    with open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)


def read_batch_dump(path):
    """`mhe train --dump-batches FILE` -> (header, records). header: batch, seq_len, src_len,
    steps, first_step, corpus_tokens (ints), corpus_fnv1a64 (int), model and train (dicts of
    mhe's field strings). records: step [S], loss, lr, grad_norm [S] (what mhe computed),
    tokens, targets [S, B, T], src [S, B, Ts] or None. Raises CheckpointError on a file that is
    not a dump, a truncated one or one of another format version."""
    with open(path, "rb") as f:
        raw = f.read()
    end = raw.find(b"\nend\n")
    if not raw.startswith(b"mhe-batches ") or end < 0:
        raise CheckpointError("%s: not a batch dump of mhe train --dump-batches" % path)
    lines = raw[:end].decode("utf-8", "replace").split("\n")
    if lines[0] != "mhe-batches 1":
        raise CheckpointError("%s: batch dump format '%s', this twin reads 'mhe-batches 1'" % (path, lines[0]))
    h = {"model": {}, "train": {}}
    for ln in lines[1:]:
        if ln.startswith(("model.", "train.")):
            k, _, v = ln.partition("=")
            sect, _, key = k.partition(".")
            h[sect][key] = v
        else:
            k, _, v = ln.partition(" ")
            h[k] = int(v, 16) if k == "corpus_fnv1a64" else int(v)
    for k in ("batch", "seq_len", "src_len", "steps", "first_step", "corpus_tokens", "corpus_fnv1a64"):
        if k not in h:
            raise CheckpointError("%s: batch dump header lacks '%s'" % (path, k))
    B, T, Ts, S = h["batch"], h["seq_len"], h["src_len"], h["steps"]
    words = 4 + 2 * B * T + B * Ts
    body = raw[end + 5:]
    if len(body) != 4 * words * S:
        raise CheckpointError("%s: %d bytes of records, %d steps of %d x %d need %d (truncated?)"
                              % (path, len(body), S, B, T, 4 * words * S))
    a = np.frombuffer(body, dtype="<i4").reshape(S, words)
    f = a[:, 1:4].copy().view("<f4")
    rec = {"step": a[:, 0].copy(), "loss": f[:, 0], "lr": f[:, 1], "grad_norm": f[:, 2],
           "tokens": a[:, 4:4 + B * T].reshape(S, B, T).astype(np.int64),
           "targets": a[:, 4 + B * T:4 + 2 * B * T].reshape(S, B, T).astype(np.int64),
           "src": a[:, 4 + 2 * B * T:].reshape(S, B, Ts).astype(np.int64) if Ts else None}
    return h, rec


def check_dump_matches(h, model, dump_path, model_path, corpus=None, corpus_path=None):
    """Refuses a dump of another model (a config field differs) or of another corpus."""
    want = model.meta
    for k, v in h["model"].items():
        if k in want and want[k] != v:
            raise CheckpointError("%s was written for another model: %s=%s there, %s=%s in %s"
                                  % (dump_path, k, v, k, want[k], model_path))
    if corpus is not None:
        if len(corpus) != h["corpus_tokens"] or fnv1a64_tokens(corpus) != h["corpus_fnv1a64"]:
            raise CheckpointError("%s was drawn from another corpus: %d tokens (FNV-1a %016x), %s has %d (%016x)"
                                  % (dump_path, h["corpus_tokens"], h["corpus_fnv1a64"], corpus_path,
                                     len(corpus), fnv1a64_tokens(corpus)))


def replay(model_path, dump_path, dtype=torch.float32, corpus_path=None, log=None):
    """Trains the checkpoint at model_path (the one `mhe train --model` started from, or the
    trainer checkpoint `--resume` continued) on the batches of dump_path, step for step, with
    the dump's train settings. -> (twin losses, mhe losses, model, opt). Dropout must be 0."""
    model, _, opt = load_checkpoint(model_path, dtype)
    h, rec = read_batch_dump(dump_path)
    corpus = read_corpus(corpus_path) if corpus_path else None
    check_dump_matches(h, model, dump_path, model_path, corpus, corpus_path)
    if model.r["dropout"] > 0 or model.r["attn_dropout"] > 0:
        raise CheckpointError("%s: dropout is on; the twin replays dropout-free training only" % model_path)
    if h["first_step"] > 0:
        if opt is None or opt.step != h["first_step"]:
            raise CheckpointError("%s continues step %d: give the trainer checkpoint of that step, not %s"
                                  % (dump_path, h["first_step"], model_path))
        opt.train.update(h["train"])
    else:
        opt = AdamWState(model, h["train"], task="lm")   # a dump records --task lm
    ours = []
    for i in range(h["steps"]):
        src = torch.from_numpy(rec["src"][i]) if rec["src"] is not None else None
        loss, _, _ = train_step(model, opt, torch.from_numpy(rec["tokens"][i]), torch.from_numpy(rec["targets"][i]),
                                src=src)
        ours.append(loss)
        if log:
            log(i, loss, float(rec["loss"][i]))
    return np.array(ours), rec["loss"].astype(np.float64), model, opt


def write_curve(prefix, ours, theirs, title):
    """A lockstep run as PREFIX.csv (step, twin loss, mhe loss, relative difference) and
    PREFIX.svg: both losses against the step (they overlap when the two agree) above the
    relative difference on a log axis. Plain SVG, no plotting library."""
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    rel = np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-12)
    with open(prefix + ".csv", "w") as f:
        f.write("step,twin_loss,mhe_loss,rel_diff\n")
        for i in range(len(ours)):
            f.write("%d,%.7g,%.7g,%.3e\n" % (i + 1, ours[i], theirs[i], rel[i]))
    n, W, x0, pw, ph = len(ours), 640, 70, 540, 200
    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def xs(i):
        return x0 + pw * (i / max(n - 1, 1))

    def panel(y0, vals, lo, hi, log_axis, ticks, colors_labels):
        f = lambda v: y0 + ph - ph * ((math.log10(v) - lo) / (hi - lo) if log_axis else (v - lo) / (hi - lo))
        out = ['<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (x0, y0, pw, ph)]
        for t in ticks:
            y = f(t)
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (x0, x0 + pw, y, y))
            out.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>'
                       % (x0 - 4, y + 4, ("%.0e" % t) if log_axis else ("%.2f" % t)))
        for (v, dash), (color, label) in zip(vals, colors_labels):
            pts = " ".join("%.1f,%.1f" % (xs(i), f(min(max(v[i], 10 ** lo if log_axis else lo), 10 ** hi if log_axis else hi)))
                           for i in range(n))
            out.append('<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>'
                       % (color, ' stroke-dasharray="5,4"' if dash else "", pts))
        for k, (color, label) in enumerate(colors_labels):     # legends above the panel
            out.append('<text x="%d" y="%d" font-size="12" fill="%s">%s</text>' % (x0 + 260 * k, y0 - 6, color, esc(label)))
        return out
    lo, hi = float(min(ours.min(), theirs.min())), float(max(ours.max(), theirs.max()))
    lo, hi = math.floor(lo * 4) / 4, math.ceil(hi * 4) / 4
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, 2 * ph + 130),
           '<text x="%d" y="20" font-size="14">%s</text>' % (x0, esc(title))]
    svg += panel(50, [(theirs, False), (ours, True)], lo, hi, False, np.linspace(lo, hi, 5),
                 [("#1b9e77", "mhe (training loss)"), ("#d95f02", "twin, replayed (dashed)")])
    pos = rel[rel > 0]
    rlo = math.floor(math.log10(pos.min())) if len(pos) else -9
    rhi = max(math.ceil(math.log10(pos.max())) if len(pos) else -8, rlo + 1)
    svg += panel(ph + 85, [(np.where(rel > 0, rel, 10.0 ** rlo), False)], rlo, rhi, True,
                 [10.0 ** e for e in range(rlo, rhi + 1)], [("#7570b3", "|twin - mhe| / mhe")])
    svg.append('<text x="%d" y="%d" font-size="12" text-anchor="middle">step (1 .. %d)</text>' % (x0 + pw // 2, 2 * ph + 120, n))
    svg.append("</svg>")
    with open(prefix + ".svg", "w") as f:
        f.write("\n".join(svg) + "\n")


@torch.no_grad()
def strided_loss(model, data, seq_len, stride, batch=16):
    """Strided perplexity (MHE paper sec. 4.5), as mhe_evaluate_strided defines it: windows of
    seq_len tokens stride apart; the first scores all its targets, each later one those past
    the previous window's end, a last window ending at the text's end scores the rest.
    -> (mean loss over every scored target, count). Every target after the first is scored
    once; written from the definition (start of each target's window), not from mhe's loop."""
    n, T, s = len(data), seq_len, stride
    if not 1 <= s <= T or n < T + 1:
        raise ValueError("stride %d must be in 1..%d and the text longer than %d tokens" % (s, T, T))
    last = n - 1 - T
    begins, scored_from = [0], [1]          # window start, first target it scores
    j = T + 1                               # the first target the first window leaves
    while j <= n - 1:
        k = -(-(j - T) // s)                # ceil((j - T) / s): target j's window
        b = min(k * s, last)
        begins.append(b)
        scored_from.append(j)
        j = b + T + 1
    total, count = 0.0, 0
    d = torch.as_tensor(np.asarray(data), dtype=torch.long)
    for i in range(0, len(begins), batch):
        bs = begins[i:i + batch]
        tok = torch.stack([d[b:b + T] for b in bs])
        tgt = torch.stack([d[b + 1:b + T + 1] for b in bs]).clone()
        for r, (b, f) in enumerate(zip(bs, scored_from[i:i + batch])):
            tgt[r, :f - b - 1] = -1
        logits = model.logits(tok).to(torch.float64)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-1,
                                       reduction="sum"))
        count += int((tgt >= 0).sum())
    return total / count, count


@torch.no_grad()
def init_own(model, seed):
    """The twin's own initialisation: mhe's distributions (weights N(0, std) with mhe's
    per-tensor std, init_residual included; biases 0; gains 1) drawn from torch's generator."""
    g = torch.Generator().manual_seed(seed)
    for name, shape, _, init, std in model.layout:
        p = model.param(name)
        if init == "normal":
            p.copy_((torch.randn(shape, generator=g, dtype=torch.float64) * std).to(model.dtype))
        elif init == "blocks":
            nr, W = shape
            b = (W + nr - 1) // nr
            p.zero_()
            for i in range(nr):
                p[i, i * b:min((i + 1) * b, W)] = 1
        else:
            p.fill_(1.0 if init == "one" else 0.0)


def train_own(cfg, train, corpus, seed, dtype=torch.float32, log=None, log_every=100):
    """Trains a decoder LM from scratch with the twin's own seeds (torch's generator for the
    init and for the batch offsets) and mhe's schedule, clipping and AdamW. -> (model, opt)"""
    model = MheModel(cfg, dtype)
    init_own(model, seed)
    opt = AdamWState(model, train)
    tc = opt.tc()
    B, T = tc["batch"], tc["seq_len"]
    d = torch.as_tensor(np.asarray(corpus), dtype=torch.long)
    g = torch.Generator().manual_seed(seed + 1)
    while opt.step < tc["steps"]:
        off = torch.randint(0, len(d) - T, (B,), generator=g)
        tok = torch.stack([d[o:o + T] for o in off.tolist()])
        tgt = torch.stack([d[o + 1:o + T + 1] for o in off.tolist()])
        loss, _, lr = train_step(model, opt, tok, tgt)
        if log and (opt.step % log_every == 0 or opt.step == tc["steps"]):
            log(opt.step, loss, lr)
    return model, opt


def _setup_replay(p):
    p.add_argument("--model", required=True, help="the checkpoint mhe train started from (--model / --resume)")
    p.add_argument("--batches", required=True, help="the file of mhe train --dump-batches")
    p.add_argument("--data", help="the training corpus: refuse a dump drawn from another")
    p.add_argument("--float64", action="store_true")
    p.add_argument("--out", help="write the twin's final checkpoint here")
    p.add_argument("--curve", metavar="PREFIX", help="write PREFIX.csv and PREFIX.svg: both losses per step")


def _cmd_replay(a):
    worst = [0.0]

    def log(i, ours, theirs):
        rel = abs(ours - theirs) / max(abs(theirs), 1e-12)
        worst[0] = max(worst[0], rel)
        print("step %5d  twin %.6f  mhe %.6f  rel %.2e" % (i + 1, ours, theirs, rel))
    ours, theirs, model, opt = replay(a.model, a.batches, torch.float64 if a.float64 else torch.float32, a.data, log)
    print("%d steps: worst relative loss difference %.2e" % (len(ours), worst[0]))
    if a.curve:
        write_curve(a.curve, ours, theirs, "lockstep: %s on %s, %d steps" % (a.model, a.batches, len(ours)))
        print("wrote %s.csv and %s.svg" % (a.curve, a.curve))
    if a.out:
        save_checkpoint(a.out, model, None, opt)
        print("wrote %s" % a.out)
    return 0


def _setup_strided(p):
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--seq_len", type=int, default=128)
    p.add_argument("--stride", type=int, required=True)
    p.add_argument("--batch", type=int, default=16)


def _cmd_strided(a):
    model, _, _ = load_checkpoint(a.model)
    T = min(a.seq_len, model.r["max_seq_len"])
    loss, count = strided_loss(model, read_corpus(a.data), T, a.stride, a.batch)
    print("stride %d, window %d: %d bytes scored" % (a.stride, T, count))
    print("loss %.4f  perplexity %.3f  bits/byte %.4f" % (loss, math.exp(loss), loss / math.log(2)))
    return 0


def _setup_train_own(p):
    p.add_argument("--data", required=True, help="a byte-level training text")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a model or train field (mhe's names), e.g. --set d_model=256 --set init_residual=scaled")


def _cmd_train_own(a):
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg, train = {}, {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k in dict(CONFIG_DEFAULTS):
            cfg[k] = v
        elif k in dict(TRAIN_DEFAULTS):
            train[k] = v
        else:
            raise CheckpointError("--set %s: not a model or train field" % k)
    train.setdefault("seed", str(a.seed))
    try:
        validate_train(train)
        validate_config(cfg)
    except ValueError as e:
        raise CheckpointError(str(e))
    corpus = read_corpus(a.data)
    import time
    t0 = time.time()

    def log(step, loss, lr):
        print("step %6d  loss %.4f  lr %.2e  %.0f ms/step" % (step, loss, lr, 1e3 * (time.time() - t0) / step))
        sys.stdout.flush()
    model, opt = train_own(cfg, train, corpus, a.seed, log=log)
    save_checkpoint(a.out, model, None, opt)
    print("wrote %s" % a.out)
    return 0


# --------------------------------------------------------------------------
# train: mhe's trainer data-parallel under torchrun (DDP; FSDP and AMP optional)
# --------------------------------------------------------------------------

class TrainError(Exception):
    """bad input to the train command: one line on stderr, exit status 1"""


class _Stopped(Exception):
    """SIGTERM (torchrun stopping the other ranks after one failed)"""


def parse_config_text(text, where="config"):
    """A config file as mhe_config_parse reads it: `key=value` lines, '#' starts a comment,
    blank lines ignored, spaces around key and value trimmed, a key set twice refused, only
    model fields. -> {key: value}; TrainError names the line."""
    out, first = {}, {}
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for i, raw in enumerate(lines, 1):
        if len(raw) >= 512:
            raise TrainError("%s: line %d: longer than 511 characters" % (where, i))
        if b"\0" in raw:
            raise TrainError("%s: line %d: contains a NUL byte" % (where, i))
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TrainError("%s: line %d: not UTF-8" % (where, i))
        line = line.split("#", 1)[0].strip(" \t\r\n")
        if not line:
            continue
        if "=" not in line:
            raise TrainError("%s: line %d: expected key=value, got '%s'" % (where, i, line))
        k, _, v = line.partition("=")
        k, v = k.strip(" \t\r\n"), v.strip(" \t\r\n")
        if k in first:
            raise TrainError("%s: line %d: key '%s' was already set on line %d" % (where, i, k, first[k]))
        first[k] = i
        if k not in CONFIG_KEYS:
            extra = " (a train field: give it with --set %s=...)" % k if k in TRAIN_KEYS else ""
            raise TrainError("%s: line %d: unknown model field '%s'%s" % (where, i, k, extra))
        out[k] = v
    return out


def _check_train(t):
    """the train fields as mhe's trainer needs them; TrainError names a bad one"""
    holder = AdamWState.__new__(AdamWState)
    holder.train = t
    try:
        tc = holder.tc()
    except ValueError as e:
        raise TrainError("train config: %s" % e)
    if t["schedule"] not in ("constant", "linear", "cosine", "invsqrt", "cosine-restarts"):
        raise TrainError("train config: schedule '%s' is not constant, linear, cosine, invsqrt or cosine-restarts"
                         % t["schedule"])
    for k in ("steps", "batch", "seq_len"):
        if tc[k] < 1:
            raise TrainError("train config: %s must be >= 1, not %d" % (k, tc[k]))
    return tc


class _Dist:
    """the process group of a torchrun launch (world 1 without torchrun's variables)"""

    def __init__(self):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.on = False

    def start(self, backend, timeout):
        import datetime
        import torch.distributed as dist
        if self.world > 1:
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
            self.on = True

    def sum(self, values):
        """element-wise sum over the ranks of a list of floats (float64)"""
        if not self.on:
            return list(values)
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()


def _train_data(a, model, opt):
    """the task's corpus -> (draw(): the next global batch as a dict, count(batch): its targets)"""
    r = model.r
    with open(a.data, "rb") as f:
        text = f.read()
    words = bool(model.extra_i32) or r["embedding"] != "vocab"
    if a.task == "sr":
        if r["token_head"] != "sr" or r["embedding"] == "vocab":
            raise TrainError("--task sr: the twin trains hash-embedding word models with token_head=sr "
                             "(a word vocabulary's rows are not supported)")
        if r["hash"] != "md5":
            raise TrainError("--task sr: hash=lsh features come from `mhe hash`; the twin computes md5 features only")
        toks, types = read_words(text)
        feats = word_feats(model, types)
        if len(toks) < opt.tc()["seq_len"]:
            raise TrainError("%s: %d word tokens, a window needs %d" % (a.data, len(toks), opt.tc()["seq_len"]))
        return (lambda: dict(sr_batch(model, opt, toks, len(types)), feats=feats),
                lambda b: int((b["targets"] != -1).sum()))
    if words:
        raise TrainError("--task %s: the model takes words (%s); the twin trains word models with --task sr only"
                         % (a.task, "a word vocabulary" if model.extra_i32 else r["embedding"]))
    if a.task == "cls":
        if r["n_classes"] < 1:
            raise TrainError("--task cls needs a model with a classification head (arch=encoder, n_classes > 0)")
        try:
            examples = read_text_set(text)
        except ValueError:
            raise TrainError("%s: not `label<TAB>text` lines with integer labels" % a.data)
        bad = [lab for lab, _ in examples if not 0 <= lab < r["n_classes"]]
        if not examples or bad:
            raise TrainError("%s: %s" % (a.data, "no examples" if not examples else
                                         "label %d outside 0..%d" % (bad[0], r["n_classes"] - 1)))
        return lambda: cls_batch(model, opt, examples), lambda b: len(b["labels"])
    if r["token_head"] == "sr":
        raise TrainError("the model has a Shuffle+Random head: train it with --task sr")
    data = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    if len(data) and int(data.max()) >= r["vocab_size"]:
        raise TrainError("%s: byte %d is outside the model's vocab_size %d" % (a.data, int(data.max()), r["vocab_size"]))
    tc = opt.tc()
    T, Ts = tc["seq_len"], tc["src_len"] or tc["seq_len"]
    for what, v in (("seq_len", T), ("src_len", Ts)):
        if v > r["max_seq_len"]:
            raise TrainError("%s %d exceeds the model's max_seq_len %d" % (what, v, r["max_seq_len"]))
    need = Ts + T if r["arch"] == "encdec" else T if r["arch"] == "encoder" else T + 1
    if len(data) < need:
        raise TrainError("%s: corpus has %d bytes, a training window needs %d" % (a.data, len(data), need))
    return lambda: lm_batch(model, opt, data), lambda b: int((b["targets"] != -1).sum())


def _train_model(a):
    """-> (model, opt, where it came from) from --resume, --model, or --config/--set (a new model)"""
    cfg, train = {}, {}
    if a.config:
        with open(a.config, "rb") as f:
            cfg.update(parse_config_text(f.read(), a.config))
    for kv in a.set:
        k, eq, v = kv.partition("=")
        if not eq:
            raise TrainError("--set %s: expected KEY=VALUE" % kv)
        if k in CONFIG_KEYS:
            cfg[k] = v
        elif k in TRAIN_KEYS:
            train[k] = v
        else:
            raise TrainError("--set %s: not a model or train field" % k)
    for k, v in (("steps", a.steps), ("save_every", a.save_every)):
        if v is not None:
            train[k] = str(v)
    try:                    # mhe's rules, before any file is read or step taken
        validate_train(train)
        if cfg:
            validate_config(cfg)
    except ValueError as e:
        raise TrainError(str(e))
    if a.resume and a.model:
        raise TrainError("give --model or --resume, not both")
    src = a.resume or a.model
    if src and cfg:
        raise TrainError("%s sets a new model's fields, but %s %s brings its own config: refused"
                         % ("--config" if a.config else "--set " + sorted(cfg)[0], "--resume" if a.resume else "--model", src))
    if src:
        model, _, opt = load_checkpoint(src)
        if a.resume:
            if opt is None:
                raise TrainError("--resume %s: a weights-only file (no optimizer state, step or RNG); to train these "
                                 "weights further, give --model %s" % (src, src))
            opt.train.update(train)     # flags override the saved train settings, as in mhe
            if opt.task and a.task and a.task != opt.task:
                raise TrainError("--task %s, but --resume %s continues a --task %s run: refused" % (a.task, src, opt.task))
            if not a.task and not opt.task:     # an older file: its head says, as mhe assumes
                a.task = "cls" if model.r["n_classes"] > 0 else "sr" if model.r["token_head"] == "sr" else "lm"
            a.task = a.task or opt.task
        else:
            opt = AdamWState(model, train)
    else:
        t = dict(TRAIN_DEFAULTS)
        t.update(train)
        try:
            model = MheModel(cfg, seed=int(t["seed"]))   # mhe train seeds a new model's init with the train seed
        except ValueError as e:
            raise TrainError("config: %s" % e)
        opt = AdamWState(model, train)
    if model.r["dropout"] > 0 or model.r["attn_dropout"] > 0:
        raise TrainError("the model has dropout on; the twin does not reproduce mhe's dropout (give dropout=0 and "
                         "attn_dropout=0)")
    a.task = a.task or "lm"
    opt.task = a.task
    tc = _check_train(opt.train)
    if opt.step >= tc["steps"]:
        raise TrainError("--resume %s is at step %d and steps is %d: nothing to train (give --steps above %d)"
                         % (src, opt.step, tc["steps"], opt.step))
    return model, opt, src or "a new model"


def _shard_ranges(net, model):
    """FSDP (use_orig_params): {mhe name: (local Parameter, first, last + 1 element of the full
    tensor it holds)} from the flat parameter's shard metadata"""
    out = {}
    for h in net._all_handles if hasattr(net, "_all_handles") else [net._handle]:
        fp = h.flat_param
        for fqn, info in zip(fp._fqns, fp._shard_param_infos):
            name = fqn.split("params.", 1)[-1].replace("__", ".")
            p = model.param(name)
            out[name] = (p, info.intra_param_start_idx, info.intra_param_end_idx + 1) if info.in_shard else (p, 0, 0)
    return out


def _cmd_train(a):
    d = _Dist()
    say = (lambda *x: None) if d.rank else (lambda m: (print(m), sys.stdout.flush()))
    try:
        return _train(a, d, say)
    except (TrainError, CheckpointError, OSError) as e:
        if d.rank == 0:
            sys.stderr.write("mhe_torch: %s\n" % e)
        return 1


def _train(a, d, say):
    import signal
    import time
    import torch.distributed as dist
    if a.threads:
        torch.set_num_threads(a.threads)
    cuda = torch.cuda.is_available() if a.device == "auto" else a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise TrainError("--device cuda: no CUDA device is available to this PyTorch")
    if a.amp == "fp16" and not cuda:
        raise TrainError("--amp fp16 needs a CUDA device (it scales the loss for float16 gradients); "
                         "on the CPU use --amp bf16")
    major = int(torch.__version__.split(".")[0])
    if a.fsdp and major < 2:
        raise TrainError("--fsdp needs PyTorch 2 (use_orig_params); this is PyTorch %s" % torch.__version__)
    if a.fsdp and d.world == 1:
        raise TrainError("--fsdp shards over the processes of a torchrun launch; one process has nothing to shard")
    out_dir = os.path.dirname(os.path.abspath(a.out))
    if not os.path.isdir(out_dir) or os.path.isdir(a.out):
        raise TrainError("--out %s: %s" % (a.out, "is a directory" if os.path.isdir(a.out) else "no such directory"))
    model, opt, origin = _train_model(a)
    tc = opt.tc()
    B = tc["batch"]
    if B % d.world:
        raise TrainError("batch %d is not divisible by the world size %d: every rank takes B/world rows of the "
                         "global batch" % (B, d.world))
    if a.fsdp and model.r["admin"] and opt.step == 0:
        raise TrainError("--fsdp: Admin's profiling pass needs the whole model on one rank; start from a "
                         "checkpoint past step 0, or train without --fsdp")
    draw, count = _train_data(a, model, opt)
    dev = torch.device("cuda", d.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    d.start("nccl" if cuda else "gloo", a.timeout)
    Bl, lo = B // d.world, d.rank * (B // d.world)
    die = os.environ.get("MHE_TORCH_TEST_EXIT", "")         # test hook "RANK:STEP": that rank dies there
    die = tuple(int(x) for x in die.split(":")) if die else None

    model.to(dev)
    for st in (opt.m, opt.v):
        for k in st:
            st[k] = st[k].to(dev)
    net, params, sq_reduce, shards = model, None, None, None
    if a.fsdp:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        try:
            net = FSDP(model, use_orig_params=True, device_id=dev)
            shards = _shard_ranges(net, model)
        except (RuntimeError, ValueError, AttributeError, AssertionError) as e:
            raise TrainError("--fsdp: this PyTorch cannot shard the model here (%s): %s"
                             % ("CUDA" if cuda else "CPU, gloo", str(e).splitlines()[0] if str(e) else type(e).__name__))
        for name, (p, i, j) in shards.items():
            for st in (opt.m, opt.v):
                st[name] = st[name].reshape(-1)[i:j].clone()
        params = [(n, shards[n][0]) for n in model.names]

        def sq_reduce(x):
            t = torch.tensor([x], dtype=torch.float64, device=dev)
            dist.all_reduce(t)
            return float(t.item())
    elif d.on:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # DDP must be told of tensors the loss does not use (cls: an LM head): a probe step on one
        # row of the first batch, the RNG put back, finds them
        rng = opt.rng
        pb = draw()
        opt.rng = rng
        sl = slice(0, 1)
        probe = model(pb["tokens"][sl].to(dev), pb["targets"][sl].to(dev) if "targets" in pb else None,
                      pb["lengths"][sl] if pb.get("lengths") else None, pb["src"][sl].to(dev) if "src" in pb else None,
                      None, pb["labels"][sl] if "labels" in pb else None, pb.get("feats"), reduction="sum")
        probe.backward()
        unused = any(p.grad is None for _, p in model.named_mhe_parameters())
        model.zero_grad(set_to_none=True)
        net = DDP(model, device_ids=[dev.index] if cuda else None, find_unused_parameters=unused)
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.amp]
    autocast = (lambda: torch.autocast(dev.type, dtype=amp)) if amp else None
    scaler = after_backward = None
    if a.amp == "fp16":
        scaler = torch.cuda.amp.GradScaler()
        proxy = torch.optim.SGD([p for _, p in (params or model.named_mhe_parameters())], lr=0.0)

        def after_backward(grads):
            scaler.unscale_(proxy)
            ok = all(bool(torch.isfinite(g).all()) for g in grads)
            scaler.update()
            return ok

    def save(path):
        """every rank gathers FSDP shards; rank 0 writes (atomically: PATH.tmp, fsync, rename)"""
        if shards is not None:
            full = {}
            with torch.no_grad():
                for name in model.names:
                    p, i, j = shards[name]
                    for key, loc in (("p", p.detach().reshape(-1)), ("m", opt.m[name]), ("v", opt.v[name])):
                        t = torch.zeros(int(np.prod(model.shapes[name])), dtype=torch.float32, device=dev)
                        t[i:j] = loc
                        if d.on:    # the shards do not overlap: a sum puts each element in place
                            dist.all_reduce(t)
                        full[(key, name)] = t.reshape(model.shapes[name]).cpu()
            if d.rank == 0:
                host = MheModel(model.meta)
                host.extra_i32 = model.extra_i32
                with torch.no_grad():
                    for name in model.names:
                        host.param(name).copy_(full[("p", name)])
                st = AdamWState(host, opt.train, opt.step, opt.rng, opt.task)
                st.m = {n: full[("m", n)] for n in model.names}
                st.v = {n: full[("v", n)] for n in model.names}
                save_checkpoint(path, host, None, st)
        elif d.rank == 0:
            save_checkpoint(path, model, None, opt)

    say("%s: %s, %d tensors, %d parameters; %d process%s (%s%s%s)" % (
        "resumed at step %d" % opt.step if a.resume else "training", origin, len(model.names),
        sum(int(np.prod(s)) for s in model.shapes.values()), d.world, "es" if d.world > 1 else "",
        "FSDP" if a.fsdp else "DDP" if d.on else "one process", ", " + dev.type, ", amp " + a.amp if amp else ""))
    say("training %d steps of %d x %d tokens%s" % (tc["steps"], B, tc["seq_len"],
                                                 " (%d rows per rank)" % Bl if d.world > 1 else ""))
    first, t0 = opt.step, time.time()
    plain = net is model and autocast is None

    def on_term(sig, frame):
        raise _Stopped()
    if d.on:
        signal.signal(signal.SIGTERM, on_term)
    try:
        while opt.step < tc["steps"]:
            if die and die[0] == d.rank and die[1] == opt.step:
                os._exit(17)
            b = draw()
            G = count(b)
            tok, tgt = b["tokens"].to(dev), b.get("targets")
            tgt = tgt.to(dev) if tgt is not None else None
            src = b["src"].to(dev) if "src" in b else None
            lens, labels, feats = b.get("lengths"), b.get("labels"), b.get("feats")
            if plain:       # one process in float32: exactly mhe's step
                train_step(model, opt, tok, tgt, lens, src, None, labels, feats)
            else:
                sl = slice(lo, lo + Bl)

                def loss_fn():
                    args = (tok[sl], tgt[sl] if tgt is not None else None, lens[sl] if lens else None,
                            src[sl] if src is not None else None, None,
                            labels[sl] if labels is not None else None, feats)
                    if autocast:
                        with autocast():
                            s = net(*args, reduction="sum")
                    else:
                        s = net(*args, reduction="sum")
                    s = s.float()
                    total = d.sum([float(s.detach())])[0]
                    # DDP/FSDP average the ranks' gradients: world * (local sum) / G averages to the
                    # gradient of the global mean, whatever each rank's share of the G targets
                    loss = s * (d.world / G) if G else s * 0.0
                    if scaler is not None:
                        loss = scaler.scale(loss)
                    return loss, f32(total / G) if G else 0.0
                train_step(model, opt, tok, tgt, lens, src, None, labels, feats, loss_fn=loss_fn, params=params,
                           sq_reduce=sq_reduce, after_backward=after_backward)
            if opt.step % tc["log_every"] == 0 or opt.step == tc["steps"]:
                el = time.time() - t0
                per = el / (opt.step - first)
                say("step %6d/%d  loss %.4f  lr %.2e  %7.0f tok/s  %5.0f ms/step  left %4.0fs"
                    % (opt.step, tc["steps"], opt.last_loss, opt.last_lr, (opt.step - first) * B * tc["seq_len"] / el,
                       per * 1e3, per * (tc["steps"] - opt.step)))
            if tc["save_every"] > 0 and opt.step % tc["save_every"] == 0 and opt.step < tc["steps"]:
                save(a.out)
        save(a.out)
    except FloatingPointError as e:
        raise TrainError(str(e))
    except _Stopped:
        sys.stderr.write("mhe_torch: rank %d stopped by SIGTERM at step %d (torchrun ends the run when a rank "
                         "fails)\n" % (d.rank, opt.step))
        return 1
    except RuntimeError as e:
        if not d.on:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        sys.stderr.write("mhe_torch: rank %d noticed at step %d: a collective failed (another rank died or the "
                         "%gs timeout passed): %s\n" % (d.rank, opt.step, a.timeout, msg))
        os._exit(1)         # the process group is broken: no orderly shutdown to wait for
    say("wrote %s (step %d)" % (a.out, opt.step))
    if d.on:
        dist.destroy_process_group()
    return 0


def _setup_train(p):
    p.add_argument("--data", required=True, help="training text: bytes (--task lm), `label<TAB>text` lines (cls), "
                   "words (sr)")
    p.add_argument("--out", required=True, help="the checkpoint to write (rank 0; atomically)")
    p.add_argument("--task", choices=("lm", "cls", "sr"), default=None,
                   help="default lm; --resume continues the checkpoint's task (another is refused)")
    p.add_argument("--model", help="start from this mhe checkpoint's weights")
    p.add_argument("--resume", help="continue this trainer checkpoint (weights, AdamW moments, step, batch RNG)")
    p.add_argument("--config", help="key=value lines of model fields for a new model (mhe's rules)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a model field (new model) or train field (mhe's names)")
    p.add_argument("--steps", type=int, help="train until this step (train field steps)")
    p.add_argument("--save_every", type=int, help="also save every N steps (train field save_every)")
    p.add_argument("--fsdp", action="store_true", help="shard parameters, gradients and moments (PyTorch 2)")
    p.add_argument("--amp", choices=("off", "bf16", "fp16"), default="off",
                   help="autocast (bf16: CPU or GPU; fp16: CUDA, with loss scaling); off = float32, equal to mhe")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a collective may wait for the other ranks")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: torch's default)")


COMMANDS["train"] = (_setup_train, _cmd_train)
COMMANDS["replay"] = (_setup_replay, _cmd_replay)
COMMANDS["strided"] = (_setup_strided, _cmd_strided)
COMMANDS["train-own"] = (_setup_train_own, _cmd_train_own)

if __name__ == "__main__":
    sys.exit(main())
