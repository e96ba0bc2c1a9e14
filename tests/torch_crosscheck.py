#!/usr/bin/env python3
"""Cross-checks the C model against its PyTorch twin (tools/python/mhe_torch.py) in float64.

For each of several small configs it runs

    $MHE_BIN init --config CFG.txt --seed S --out M.safetensors
    $MHE_BIN grad --model M.safetensors --tokens TOK.txt --out G.safetensors

builds the twin (MheModel, float64) of the config that was asked for, loads the
parameters into it by mhe's tensor names, and compares the loss and the gradient
of every parameter. The twin is the repository's one PyTorch model; the names and
shapes are checked against a spec written here (expected_params), independently.
Each config is checked twice: with the parameters exactly as `mhe init` made
them, and with every parameter perturbed (norm weights away from 1, biases
away from 0, MHE head embeddings eq/ev by N(0, 0.2) so the heads differ),
written back into a copy of the model file with the same header.

The reference covers every attention kind (config key `attn`: one kind for all
layers or one per layer, comma-separated): mha, sha, mqa, gqa (`kv_groups`
K/V heads, default 2; query head h uses K/V head h // (n/g)), skv (`wkv`: K = V),
el-att (K = V = the attention input split into heads), mhe-add and mhe-mul (seed
wq/wk/wv of width d_head and head embeddings eq/ek/ev [n, d_head]; head i uses
A + e[i] or A * (1 + e[i])). Configs run each kind in pre and post norm, with and
without biases, per-layer hybrids, and the MHE kinds with fused_attention=1 (fast
path) and =0 (reference path: the literal per-head expansion) -- the twin has one
path, so both of mhe's paths are checked against it.

Encoders (config key `arch=encoder`, default `decoder`) are the same model with
bidirectional self-attention: no causal mask, every query sees every key of its
sequence, for every attention kind. `mhe grad` scores them with the same loss as a
decoder (inputs = the first T ids of a line, targets = the last T, mean cross-entropy
of the LM head). Encoder configs may have `n_classes` > 0: a classification head
cls_head.weight [n_classes, C] (+ cls_head.bias [n_classes] when bias=1) that takes no
part in that loss, so its gradients must be exactly zero. `mask_token` (default -1)
and `n_classes` (default 0) are config keys the metadata must hold.

Encoder-decoder models (`arch=encdec`, `enc_layers`, `enc_attn`, `cross_attn`) have an
encoder stack (enc.layers.{i}, enc.pos_emb, enc.ln_f for pre-norm) over a source, and
decoder blocks with a cross-attention sublayer between self-attention and MLP
(layers.{i}.norm3, layers.{i}.cross.*: Q from the decoder, K and V from the encoder
output, every kind). Their token file lines read `SOURCE IDS | DECODER IDS`. Configs
with `pad` end the last line (and its source) with `.` ids: padding, which no query
attends to and the loss ignores.

The kinds of thesis ch. 4 ("deconstructing attention") and FNet are referenced too:
mlp (gate/up/down, SiLU), taylor (weights 1 + s + s^2/2 with one normaliser), nonapprox
(softmax over the keys of SiLU(q_j).k_j / sqrt(d_head), one score per position),
rndemb-qk and fixedseq-qk (Q, K from the model's own blocks run on a fixed input: random
embeddings drawn here with mhe's xoshiro256** and Box-Muller from fixed_seed, or the
fixed_seq tokens embedded with positions), staticemb-qk (Q, K from the block-0 input),
fnet (Re of torch.fft.fft2 over each sequence's real tokens) and linear (W_seq[:L, :L]
(X W_hidden^T)); attn=KIND@LAYOUT and the layout key (thesis Table 4.11) are expanded.

Checks (each one counts as one pass or fail):
  * the model's metadata holds format=mhe-1 and the config that was asked for;
  * the model holds exactly the expected parameter names, with their shapes;
  * per variant: `loss` has shape [1] and relative error <= 1e-4;
  * per variant: gradient names == parameter names, with the same shapes;
  * per variant and parameter: max|g_c - g_t| / max(max|g_t|, 1e-6) <= 1e-4.
    Exceptions, gradients that are exactly zero in exact arithmetic, so both sides
    hold only rounding noise (softmax ignores a per-query constant on the scores):
      - attn.wk.bias (q.b_k): divided by max|g_t| of attn.wk.weight instead;
      - attn.ek of mhe-add layers (q_i.ek[i]): it is the sum over the tokens of
        dL/dK_i, so it is divided by the largest absolute sum of those terms;
  * per variant and cls_head parameter (encoders with n_classes > 0): the gradient
    is exactly zero (the head is not part of the LM loss);
  * per invalid config (gqa with kv_groups not dividing n_heads, el-att with
    n_heads*d_head != d_model, an unknown kind, n_classes > 0 on a decoder,
    mask_token >= vocab_size): `mhe init` exits non-zero (not a crash), says what is
    wrong, and writes no model file.

Word models (WORD_CONFIGS, names words-*): the HashFormers embeddings hash-emb,
hash-pool, hash-add, hash-proj, each with hash=md5 and hash=lsh, and the word
vocabulary baseline, with the Shuffle+Random head (sr_head) and its 3-way loss on
labels given in the token file (`LABELS | TEXT` lines); pre/post norm, encoder and
decoder, padding, LSH table mode. MD5/HMAC-MD5 buckets and bits are computed by the twin
with hashlib/hmac and must equal `mhe hash`; see the section "word models" below.
Invalid word configs (an LM head on a hash embedding, k > 24, N = 0, T > 128 for
MD5) must fail at `mhe init`.

Usage (from anywhere; the tool runs from the repository root):
  python3 tests/torch_crosscheck.py [--verbose] [--keep DIR] [--only NAME] [--list]
MHE_BIN selects the binary (default $MHE_TEST_BUILD/mhe, else build/mhe; a relative
path is taken from the repo root).
Without PyTorch/numpy, or without the binary, it prints a SKIP line and
"RESULT: 0 passed, 0 failed, 1 skipped" and exits 0.

Output: "FAIL ..." lines, an "ok ..." summary line per config and variant,
then "RESULT: N passed, N failed"; exit status 1 if anything failed.

--selftest replaces the C tool by a stand-in (the twin in float32) and checks that the
faults MHE_FAKE_BUG injects into it (a wrong GQA map, a causal encoder, a dropped or
scaled gradient, ...) are caught.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, Results, mhe_bin, mhe_missing, rel_err, torch_missing  # noqa: E402
from mhetest import skip as skip_script  # noqa: E402

SCRIPT = os.path.abspath(__file__)

LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-4
GRAD_FLOOR = 1e-6
CMD_TIMEOUT = 300

# The config keys of the spec, in the order they are written to CFG.txt.
SPEC_KEYS = ["arch", "vocab_size", "d_model", "n_heads", "d_head", "n_layers", "d_ff",
             "max_seq_len", "attn", "norm", "norm_eps", "norm_position", "activation",
             "bias", "tie_embeddings", "dropout", "attn_dropout", "init_std"]
INT_KEYS = {"vocab_size", "d_model", "n_heads", "d_head", "n_layers", "d_ff", "max_seq_len",
            "bias", "tie_embeddings", "fused_attention", "kv_groups", "mask_token", "n_classes",
            "enc_layers", "admin", "fixed_seed", "collab_dim"}
# Optional config keys: sent only when a config names them (the tool's default otherwise).
OPT_DEFAULTS = {"kv_groups": "2", "fused_attention": "1", "mask_token": "-1", "n_classes": "0"}
# Keys the metadata of an encoder must hold (a tool that knows encoders knows them).
ENCODER_META_KEYS = ["mask_token", "n_classes"]
ARCHS = ["decoder", "encoder", "encdec"]
ATTN_KINDS = ["mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul"]
# thesis ch. 4 ("deconstructing attention") and FNet's baselines
DECON_KINDS = ["mlp", "taylor", "nonapprox", "rndemb-qk", "fixedseq-qk", "staticemb-qk", "fnet", "linear"]
FLOAT_KEYS = {"norm_eps", "dropout", "attn_dropout", "init_std", "fixed_std", "collab_mix_std"}
LAYOUTS = ["none", "even", "odd", "top", "middle", "bottom", "25%", "first", "last", "bilateral"]

BASE = {"arch": "decoder", "d_head": "0", "d_ff": "0", "attn": "mha", "norm_eps": "1e-5",
        "dropout": "0", "attn_dropout": "0", "init_std": "0.02"}


def _cfg(name, B, T, extra=None, Ts=0, pad=False, **kw):
    """Ts: source tokens per sequence (encdec); pad: the last sequence of the batch (and
    its source) is shorter than the others, padded with `.` in the token file."""
    c = dict(BASE)
    c.update({k: str(v) for k, v in kw.items()})
    return {"name": name, "B": B, "T": T, "Ts": Ts, "pad": pad, "cfg": c, "extra": dict(extra or {})}


# Small configs covering: pre/post norm, layernorm/rmsnorm, gelu/relu/silu,
# bias 0/1, tied/untied, d_head != C/n, d_ff explicit or 4C, T < max_seq_len
# and T == max_seq_len, 1..8 layers, per-layer attn lists, every attention kind,
# kv_groups 1, 2 (default), 3 and n_heads.
# "extra" keys are sent only when the tool's metadata shows it knows them.
CONFIGS = [
    _cfg("pre-ln-gelu-bias-tied", 2, 12, vocab_size=37, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=16, norm="layernorm", norm_position="pre", activation="gelu",
         bias=1, tie_embeddings=1),
    _cfg("pre-rms-relu-nobias-untied-dh16", 3, 16, vocab_size=50, d_model=48, n_heads=4,
         d_head=16, n_layers=2, d_ff=80, max_seq_len=16, norm="rmsnorm", norm_position="pre",
         activation="relu", bias=0, tie_embeddings=0),
    _cfg("post-ln-silu-bias-untied", 2, 7, vocab_size=29, d_model=24, n_heads=3, n_layers=3,
         max_seq_len=20, norm="layernorm", norm_position="post", activation="silu",
         bias=1, tie_embeddings=0),
    _cfg("post-rms-gelu-erf-nobias-tied-dh16", 3, 5, vocab_size=61, d_model=48, n_heads=4,
         d_head=16, n_layers=1, max_seq_len=12, norm="rmsnorm", norm_position="post",
         activation="gelu-erf", bias=0, tie_embeddings=1, norm_eps="1e-6"),
    _cfg("pre-ln-silu-nobias-tied-1head", 2, 9, vocab_size=23, d_model=16, n_heads=1,
         n_layers=2, d_ff=24, max_seq_len=9, norm="layernorm", norm_position="pre",
         activation="silu", bias=0, tie_embeddings=1),
    _cfg("pre-rms-gelu-bias-untied-dh6", 2, 10, vocab_size=40, d_model=20, n_heads=5,
         d_head=6, n_layers=2, d_ff=36, max_seq_len=24, norm="rmsnorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=0, init_std="0.05"),
    _cfg("post-ln-relu-bias-tied-attnlist", 2, 8, vocab_size=31, d_model=32, n_heads=2,
         n_layers=3, max_seq_len=10, attn="mha,mha,mha", norm="layernorm",
         norm_position="post", activation="relu", bias=1, tie_embeddings=1),
    _cfg("pre-ln-gelu-bias-untied-v256", 2, 16, vocab_size=256, d_model=64, n_heads=8,
         n_layers=2, max_seq_len=32, norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=0),
    _cfg("pre-ln-gelu-bias-tied-refcore", 2, 11, {"fused_attention": "0"}, vocab_size=37,
         d_model=32, n_heads=4, d_head=12, n_layers=2, max_seq_len=16, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1),
    _cfg("post-rms-silu-bias-untied-refcore", 3, 6, {"fused_attention": "0"}, vocab_size=19,
         d_model=24, n_heads=2, n_layers=2, max_seq_len=8, norm="rmsnorm",
         norm_position="post", activation="silu", bias=1, tie_embeddings=0),
    # ---- the other attention kinds: each in pre and post norm, with and without biases
    _cfg("pre-ln-gelu-bias-tied-sha", 2, 12, vocab_size=37, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=16, attn="sha", norm="layernorm", norm_position="pre", activation="gelu",
         bias=1, tie_embeddings=1, init_std="0.05"),
    _cfg("post-rms-relu-nobias-untied-sha-dh12", 2, 8, vocab_size=29, d_model=24, n_heads=3,
         d_head=12, n_layers=2, max_seq_len=10, attn="sha", norm="rmsnorm", norm_position="post",
         activation="relu", bias=0, tie_embeddings=0),
    _cfg("pre-rms-silu-nobias-untied-mqa-dh6", 2, 9, vocab_size=41, d_model=20, n_heads=5,
         d_head=6, n_layers=2, d_ff=36, max_seq_len=12, attn="mqa", norm="rmsnorm",
         norm_position="pre", activation="silu", bias=0, tie_embeddings=0, init_std="0.05"),
    _cfg("post-ln-gelu-bias-tied-mqa", 2, 10, vocab_size=31, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=10, attn="mqa", norm="layernorm", norm_position="post", activation="gelu",
         bias=1, tie_embeddings=1),
    # kv_groups not sent: the tool's default (2) must be what the metadata holds
    _cfg("pre-ln-gelu-bias-untied-gqa-default", 2, 11, vocab_size=37, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=16, attn="gqa", norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=0, init_std="0.05"),
    _cfg("post-rms-silu-nobias-tied-gqa3-dh8", 2, 9, vocab_size=27, d_model=36, n_heads=6,
         d_head=8, n_layers=2, d_ff=40, max_seq_len=12, attn="gqa", kv_groups=3, norm="rmsnorm",
         norm_position="post", activation="silu", bias=0, tie_embeddings=1),
    _cfg("pre-rms-gelu-nobias-tied-skv", 2, 10, vocab_size=33, d_model=24, n_heads=4,
         n_layers=2, max_seq_len=12, attn="skv", norm="rmsnorm", norm_position="pre",
         activation="gelu", bias=0, tie_embeddings=1, init_std="0.05"),
    _cfg("post-ln-relu-bias-untied-skv-dh10", 2, 8, vocab_size=25, d_model=32, n_heads=2,
         d_head=10, n_layers=2, max_seq_len=8, attn="skv", norm="layernorm", norm_position="post",
         activation="relu", bias=1, tie_embeddings=0),
    _cfg("pre-ln-silu-bias-untied-elatt", 2, 10, vocab_size=35, d_model=24, n_heads=3,
         n_layers=2, max_seq_len=12, attn="el-att", norm="layernorm", norm_position="pre",
         activation="silu", bias=1, tie_embeddings=0, init_std="0.05"),
    _cfg("post-rms-gelu-nobias-tied-elatt-dh8", 2, 9, vocab_size=30, d_model=32, n_heads=4,
         d_head=8, n_layers=2, max_seq_len=9, attn="el-att", norm="rmsnorm", norm_position="post",
         activation="gelu", bias=0, tie_embeddings=1),
    # MHE kinds, each on the fast path and on the reference path (literal per-head expansion)
    _cfg("pre-ln-gelu-bias-tied-mheadd", 2, 12, vocab_size=37, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=16, attn="mhe-add", norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=1, init_std="0.05"),
    _cfg("pre-ln-gelu-bias-tied-mheadd-refcore", 2, 12, {"fused_attention": "0"}, vocab_size=37,
         d_model=32, n_heads=4, n_layers=2, max_seq_len=16, attn="mhe-add", norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1, init_std="0.05"),
    _cfg("post-rms-silu-nobias-untied-mheadd-dh12", 2, 9, vocab_size=29, d_model=24, n_heads=3,
         d_head=12, n_layers=2, max_seq_len=10, attn="mhe-add", norm="rmsnorm",
         norm_position="post", activation="silu", bias=0, tie_embeddings=0),
    _cfg("post-rms-silu-nobias-untied-mheadd-dh12-refcore", 2, 9, {"fused_attention": "0"},
         vocab_size=29, d_model=24, n_heads=3, d_head=12, n_layers=2, max_seq_len=10,
         attn="mhe-add", norm="rmsnorm", norm_position="post", activation="silu", bias=0,
         tie_embeddings=0),
    _cfg("pre-rms-relu-nobias-untied-mhemul-dh12", 2, 11, vocab_size=41, d_model=32, n_heads=4,
         d_head=12, n_layers=2, max_seq_len=12, attn="mhe-mul", norm="rmsnorm",
         norm_position="pre", activation="relu", bias=0, tie_embeddings=0, init_std="0.05"),
    _cfg("pre-rms-relu-nobias-untied-mhemul-dh12-refcore", 2, 11, {"fused_attention": "0"},
         vocab_size=41, d_model=32, n_heads=4, d_head=12, n_layers=2, max_seq_len=12,
         attn="mhe-mul", norm="rmsnorm", norm_position="pre", activation="relu", bias=0,
         tie_embeddings=0, init_std="0.05"),
    _cfg("post-ln-gelu-bias-tied-mhemul", 3, 7, vocab_size=23, d_model=24, n_heads=4,
         n_layers=2, max_seq_len=8, attn="mhe-mul", norm="layernorm", norm_position="post",
         activation="gelu", bias=1, tie_embeddings=1),
    _cfg("post-ln-gelu-bias-tied-mhemul-refcore", 3, 7, {"fused_attention": "0"}, vocab_size=23,
         d_model=24, n_heads=4, n_layers=2, max_seq_len=8, attn="mhe-mul", norm="layernorm",
         norm_position="post", activation="gelu", bias=1, tie_embeddings=1),
    # hybrids: a per-layer list of kinds
    _cfg("pre-ln-gelu-bias-untied-hybrid", 2, 12, vocab_size=37, d_model=32, n_heads=4,
         n_layers=3, max_seq_len=16, attn="mhe-mul,mha,gqa", kv_groups=2, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=0, init_std="0.05"),
    _cfg("post-rms-silu-nobias-tied-hybrid-kv1", 2, 10, vocab_size=31, d_model=24, n_heads=4,
         d_head=8, n_layers=4, max_seq_len=12, attn="mhe-add,mqa,skv,gqa", kv_groups=1,
         norm="rmsnorm", norm_position="post", activation="silu", bias=0, tie_embeddings=1),
    _cfg("pre-ln-gelu-bias-tied-allkinds", 2, 10, vocab_size=29, d_model=24, n_heads=4,
         d_head=6, n_layers=8, max_seq_len=12, attn="sha,mqa,gqa,skv,el-att,mhe-add,mhe-mul,mha",
         kv_groups=2, norm="layernorm", norm_position="pre", activation="gelu", bias=1,
         tie_embeddings=1, init_std="0.05"),
    _cfg("post-rms-relu-nobias-untied-allkinds-refcore", 2, 9, {"fused_attention": "0"},
         vocab_size=27, d_model=24, n_heads=4, n_layers=8, max_seq_len=9,
         attn="mha,mhe-mul,mhe-add,el-att,skv,gqa,mqa,sha", kv_groups=4, norm="rmsnorm",
         norm_position="post", activation="relu", bias=0, tie_embeddings=0),
    # ---- encoders (arch=encoder): bidirectional attention, same LM loss as a decoder
    _cfg("enc-pre-ln-gelu-bias-tied-mha", 2, 12, vocab_size=37, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=16, arch="encoder", mask_token=36, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1, init_std="0.05"),
    # post-norm, T == max_seq_len, a classification head without bias (n_classes=2)
    _cfg("enc-post-rms-silu-nobias-untied-mhemul-dh12-ncls2", 2, 9, vocab_size=29, d_model=24,
         n_heads=3, d_head=12, n_layers=2, max_seq_len=9, arch="encoder", n_classes=2,
         attn="mhe-mul", norm="rmsnorm", norm_position="post", activation="silu", bias=0,
         tie_embeddings=0),
    # mhe-add on the fast path (sent explicitly) and on the reference path
    _cfg("enc-pre-ln-gelu-bias-tied-mheadd", 2, 12, {"fused_attention": "1"}, vocab_size=37,
         d_model=32, n_heads=4, n_layers=2, max_seq_len=16, arch="encoder", attn="mhe-add",
         norm="layernorm", norm_position="pre", activation="gelu", bias=1, tie_embeddings=1,
         init_std="0.05"),
    _cfg("enc-pre-ln-gelu-bias-tied-mheadd-refcore", 2, 12, {"fused_attention": "0"},
         vocab_size=37, d_model=32, n_heads=4, n_layers=2, max_seq_len=16, arch="encoder",
         attn="mhe-add", norm="layernorm", norm_position="pre", activation="gelu", bias=1,
         tie_embeddings=1, init_std="0.05"),
    _cfg("enc-pre-rms-gelu-bias-untied-hybrid-gqa-elatt-skv", 2, 10, vocab_size=31, d_model=24,
         n_heads=4, d_head=6, n_layers=3, max_seq_len=12, arch="encoder", attn="gqa,el-att,skv",
         kv_groups=2, norm="rmsnorm", norm_position="pre", activation="gelu", bias=1,
         tie_embeddings=0, init_std="0.05"),
    # the classification head with bias (n_classes=3); sha and mqa layers
    _cfg("enc-post-ln-relu-bias-untied-sha-mqa-ncls3", 3, 8, vocab_size=27, d_model=24,
         n_heads=4, n_layers=2, max_seq_len=10, arch="encoder", n_classes=3, mask_token=0,
         attn="sha,mqa", norm="layernorm", norm_position="post", activation="relu", bias=1,
         tie_embeddings=0),
    # ---- padded batches (`.` in the token file): masked keys, ignored targets
    _cfg("pad-pre-ln-gelu-bias-tied-mha", 3, 9, pad=True, vocab_size=31, d_model=24, n_heads=4,
         n_layers=2, max_seq_len=12, norm="layernorm", norm_position="pre", activation="gelu",
         bias=1, tie_embeddings=1, init_std="0.05"),
    _cfg("pad-enc-post-rms-silu-nobias-mhemul-mheadd-ncls2", 2, 10, pad=True, vocab_size=29,
         d_model=24, n_heads=3, n_layers=2, max_seq_len=12, arch="encoder", n_classes=2,
         attn="mhe-mul,mhe-add", norm="rmsnorm", norm_position="post", activation="silu", bias=0,
         tie_embeddings=0, init_std="0.05"),
    _cfg("pad-enc-pre-ln-gelu-bias-elatt-gqa-refcore", 2, 8, {"fused_attention": "0"}, pad=True,
         vocab_size=27, d_model=24, n_heads=4, n_layers=2, max_seq_len=8, arch="encoder",
         attn="el-att,gqa", kv_groups=2, norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=1, init_std="0.05"),
    # ---- encoder-decoder (arch=encdec): every kind as encoder self-attention, decoder
    # self-attention and cross-attention (Q from the decoder, K and V from the encoder output)
    _cfg("s2s-pre-ln-gelu-bias-tied-mha", 2, 8, enc_layers=1, Ts=7, vocab_size=31, d_model=24,
         n_heads=4, n_layers=2, max_seq_len=10, arch="encdec", norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1, init_std="0.05"),
    _cfg("s2s-post-rms-silu-nobias-untied-mhe", 2, 7,
         enc_layers="2", enc_attn="mhe-mul,mhe-add", cross_attn="mhe-add,mhe-mul", Ts=9,
         pad=True, vocab_size=29, d_model=24, n_heads=3, d_head=8, n_layers=2,
         max_seq_len=10, arch="encdec", attn="mhe-mul,mhe-add", norm="rmsnorm",
         norm_position="post", activation="silu", bias=0, tie_embeddings=0, init_std="0.05"),
    _cfg("s2s-post-rms-silu-nobias-untied-mhe-refcore", 2, 7,
         {"fused_attention": "0"}, enc_layers="2", enc_attn="mhe-mul,mhe-add",
         cross_attn="mhe-add,mhe-mul", Ts=9, pad=True, vocab_size=29, d_model=24, n_heads=3,
         d_head=8, n_layers=2,
         max_seq_len=10, arch="encdec", attn="mhe-mul,mhe-add", norm="rmsnorm",
         norm_position="post", activation="silu", bias=0, tie_embeddings=0, init_std="0.05"),
    _cfg("s2s-pre-ln-relu-bias-untied-kinds", 2, 6,
         enc_layers="3", enc_attn="sha,el-att,gqa", cross_attn="el-att,skv,mqa,gqa",
         kv_groups="2", Ts=8, pad=True, vocab_size=23, d_model=24, n_heads=4, n_layers=4,
         max_seq_len=9,
         arch="encdec", attn="skv,mqa,sha,mha", norm="layernorm", norm_position="pre",
         activation="relu", bias=1, tie_embeddings=0, init_std="0.05"),
    # Admin residual scales omega (perturbed away from 1 in the second variant)
    _cfg("admin-post-ln-gelu-bias-tied", 2, 9, vocab_size=29, d_model=24, n_heads=4, n_layers=3,
         max_seq_len=10, norm="layernorm", norm_position="post", activation="gelu", bias=1,
         tie_embeddings=1, admin=1),
    _cfg("admin-s2s-post-rms-silu-mhemul", 2, 7, enc_layers=2, cross_attn="mhe-mul", Ts=6, pad=True,
         vocab_size=23, d_model=24, n_heads=3, n_layers=2, max_seq_len=9, arch="encdec",
         norm="rmsnorm", norm_position="post", activation="silu", bias=0, tie_embeddings=0,
         admin=1),
    _cfg("s2s-post-ln-gelu-bias-tied-sha-mqa-refcore", 3, 5,
         {"fused_attention": "0"}, enc_layers="1", enc_attn="mqa", cross_attn="sha", Ts=6,
         vocab_size=19, d_model=16, n_heads=2, n_layers=1, max_seq_len=8, arch="encdec",
         attn="el-att", norm="layernorm", norm_position="post", activation="gelu", bias=1,
         tie_embeddings=1),
]

# ---- thesis ch. 4 ("deconstructing attention") and FNet's baselines: every kind as a
# decoder, encoder and encoder-decoder layer where it makes sense, hybrids by list and by
# layout (Table 4.11), the fixed stream of rndemb-qk / fixedseq-qk, padded batches, and the
# Taylor / Non-approximate kinds on their linear-time (fused) and reference paths
_D = dict(vocab_size=29, d_model=24, n_heads=4, max_seq_len=12, norm="layernorm", norm_position="pre",
          activation="gelu", bias=1, tie_embeddings=1, init_std="0.05")


def _dcfg(name, B, T, extra=None, Ts=0, pad=False, **kw):
    c = dict(_D)
    c.update(kw)
    return _cfg(name, B, T, extra, Ts, pad, **c)


CONFIGS += [
    _dcfg("decon-pre-ln-mlp", 2, 10, n_layers=2, attn="mlp"),
    _dcfg("decon-post-rms-nobias-mlp-taylor", 2, 9, n_layers=2, attn="mlp,taylor", norm="rmsnorm",
          norm_position="post", bias=0, tie_embeddings=0, activation="silu"),
    _dcfg("decon-pre-ln-taylor", 2, 11, n_layers=2, attn="taylor"),
    _dcfg("decon-pre-ln-taylor-refcore", 2, 11, {"fused_attention": "0"}, n_layers=2, attn="taylor"),
    _dcfg("decon-pre-rms-nonapprox-dh5", 2, 10, n_layers=2, attn="nonapprox", d_head=5, norm="rmsnorm"),
    _dcfg("decon-post-ln-nonapprox-refcore", 2, 10, {"fused_attention": "0"}, n_layers=2, attn="nonapprox",
          norm_position="post"),
    _dcfg("decon-pre-ln-rndemb", 2, 10, n_layers=3, attn="mha,rndemb-qk,rndemb-qk", fixed_seed=7,
          fixed_std="0.5"),
    _dcfg("decon-post-rms-fixedseq-taylor", 2, 9, n_layers=3, attn="fixedseq-qk,taylor,fixedseq-qk",
          fixed_seq="ids:3 1 4 1 5 9 2 6 5 3", norm="rmsnorm", norm_position="post", tie_embeddings=0),
    _dcfg("decon-pre-ln-fixedseq-text-v128", 2, 10, n_layers=2, attn="fixedseq-qk", vocab_size=128,
          fixed_seq="to be fixed"),
    _dcfg("decon-pre-ln-staticemb", 2, 10, n_layers=2, attn="staticemb-qk,mha", bias=0),
    _dcfg("decon-pre-ln-nonapprox-at-even", 2, 8, n_layers=4, attn="nonapprox@even"),
    _dcfg("decon-post-ln-rndemb-layout-bilateral", 2, 8, n_layers=3, attn="rndemb-qk", layout="bilateral",
          norm_position="post"),
    _dcfg("decon-pad-pre-ln-all-causal", 3, 9, pad=True, n_layers=6, fixed_seq="ids:1 2 3 4",
          attn="mlp,taylor,nonapprox,fixedseq-qk,staticemb-qk,mha"),
    _dcfg("decon-enc-pad-pre-ln-fnet-linear", 2, 10, pad=True, arch="encoder", n_layers=2,
          attn="fnet,linear"),
    _dcfg("decon-enc-pad-post-rms-taylor-nonapprox", 2, 9, pad=True, arch="encoder", n_layers=2,
          attn="taylor,nonapprox", norm="rmsnorm", norm_position="post"),
    _dcfg("decon-enc-pad-taylor-nonapprox-refcore", 2, 9, {"fused_attention": "0"}, pad=True,
          arch="encoder", n_layers=2, attn="nonapprox,taylor"),
    _dcfg("decon-enc-pad-rndemb-staticemb-mlp-linear", 2, 8, pad=True, arch="encoder", n_layers=4,
          attn="rndemb-qk,staticemb-qk,mlp,linear", n_classes=2),
    _dcfg("decon-s2s-pad-fnet-linear-taylor-staticemb", 2, 7, pad=True, Ts=9, arch="encdec",
          enc_layers="2", enc_attn="fnet,linear", n_layers=2, attn="taylor,staticemb-qk",
          cross_attn="taylor,staticemb-qk"),
    _dcfg("decon-s2s-post-staticemb-nonapprox-mlp-refcore", 2, 6, {"fused_attention": "0"}, Ts=7,
          arch="encdec", enc_layers="1", enc_attn="staticemb-qk", n_layers=2, attn="nonapprox,mlp",
          cross_attn="staticemb-qk,taylor", norm_position="post"),
]

# ---- collaborative attention (Cordonnier et al. 2020): D~ exact, compressed and wider than
# n d_h, blocks-of-ones and random M, biases on and off, the reference core, every role of encdec
CONFIGS += [
    _dcfg("collab-pre-ln", 2, 10, n_layers=2, attn="collab"),
    _dcfg("collab-post-rms-nobias-d5-blocks", 2, 9, n_layers=2, collab_dim=5, collab_mix_std="0",
          attn="collab,mha", norm="rmsnorm", norm_position="post", bias=0, tie_embeddings=0),
    _dcfg("collab-pre-ln-d40-refcore", 2, 9, {"fused_attention": "0"}, n_layers=2, collab_dim=40,
          attn="collab"),
    _dcfg("collab-enc-pad-d12-ncls2", 2, 10, pad=True, collab_dim=12, arch="encoder", n_layers=2,
          attn="collab,mhe-mul", n_classes=2),
    _dcfg("collab-s2s-pad-d7", 2, 7, pad=True, collab_dim=7, Ts=9, arch="encdec", enc_layers="2",
          enc_attn="collab,mha", n_layers=2, attn="mha,collab", cross_attn="collab,collab"),
]

# Configs `mhe init` must refuse: non-zero exit, a message on stderr that contains
# every string of "want", and no model file. Checked once each (one pass or fail).
INVALID = [
    _cfg("invalid-gqa-kv_groups-3-of-4", 1, 1, vocab_size=20, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=8, attn="gqa", kv_groups=3, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1),
    _cfg("invalid-elatt-4x6-ne-32", 1, 1, vocab_size=20, d_model=32, n_heads=4, d_head=6,
         n_layers=2, max_seq_len=8, attn="mha,el-att", norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=1),
    _cfg("invalid-unknown-kind", 1, 1, vocab_size=20, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=8, attn="mha,mhe-pow", norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=1),
    # a classification head needs an encoder
    _cfg("invalid-ncls3-decoder", 1, 1, vocab_size=20, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=8, arch="decoder", n_classes=3, norm="layernorm", norm_position="pre",
         activation="gelu", bias=1, tie_embeddings=1),
    # mask_token must be a token id: == vocab_size and far beyond it
    _cfg("invalid-mask_token-eq-vocab", 1, 1, vocab_size=20, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=8, arch="encoder", mask_token=20, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1),
    _cfg("invalid-mask_token-gt-vocab", 1, 1, vocab_size=20, d_model=32, n_heads=4,
         n_layers=2, max_seq_len=8, arch="encoder", mask_token=1000, norm="layernorm",
         norm_position="pre", activation="gelu", bias=1, tie_embeddings=1),
]
INVALID += [
    # encdec without an encoder, and cross-attention el-att whose K = V = the encoder
    # output (d_model 32) does not split into n_heads * d_head = 4 * 6
    _cfg("invalid-encdec-no-enc_layers", 1, 1, vocab_size=20, d_model=32, n_heads=4, n_layers=2,
         max_seq_len=8, arch="encdec", norm="layernorm", norm_position="pre", activation="gelu",
         bias=1, tie_embeddings=1),
    _cfg("invalid-encdec-cross-elatt-width", 1, 1, vocab_size=20, d_model=32, n_heads=4,
         d_head=6, n_layers=1, max_seq_len=8, arch="encdec", enc_layers=1, cross_attn="el-att",
         norm="layernorm", norm_position="pre", activation="gelu", bias=1, tie_embeddings=1),
]
INVALID[0]["want"] = ["kv_groups"]
INVALID[1]["want"] = ["el-att"]
INVALID[2]["want"] = ["mhe-pow"]
INVALID[3]["want"] = ["n_classes"]
INVALID[4]["want"] = ["mask_token"]
INVALID[5]["want"] = ["mask_token"]
INVALID[6]["want"] = ["enc_layers"]
INVALID[7]["want"] = ["el-att", "encoder output"]
# word models: a hash embedding has no vocabulary softmax; sizes the hash cannot give
for _name, _kw, _want in [("invalid-hash-add-lm-head", dict(embedding="hash-add"), ["token_head=sr"]),
                          ("invalid-hash-pool-k25", dict(embedding="hash-pool", hash_chunk=25, token_head="sr"), ["hash_chunk"]),
                          ("invalid-hash-emb-N0", dict(embedding="hash-emb", hash_buckets=0, token_head="sr"), ["hash_buckets"]),
                          ("invalid-hash-proj-md5-T200", dict(embedding="hash-proj", hash_bits=200, token_head="sr"), ["128"])]:
    INVALID.append(_cfg(_name, 1, 1, vocab_size=20, d_model=32, n_heads=4, n_layers=2, max_seq_len=8,
                        arch="encoder", norm="layernorm", norm_position="pre", activation="gelu", bias=1,
                        tie_embeddings=1, **_kw))
    INVALID[-1]["want"] = _want
    INVALID[-1]["words"] = True
# thesis ch. 4 and FNet: mixing kinds asked to be causal, cross-attention that makes no
# sense, a hybrid list of the wrong length, a fixed sequence longer than max_seq_len
INVALID += [
    _dcfg("invalid-decon-fnet-decoder", 1, 1, n_layers=2, attn="mha,fnet"),
    _dcfg("invalid-decon-linear-at-odd-decoder", 1, 1, n_layers=2, attn="linear@odd"),
    _dcfg("invalid-decon-cross-linear", 1, 1, n_layers=1, arch="encdec", enc_layers=1, cross_attn="linear"),
    _dcfg("invalid-decon-hybrid-3-of-2", 1, 1, n_layers=2, attn="mlp,taylor,nonapprox"),
    _dcfg("invalid-decon-fixedseq-longer", 1, 1, n_layers=1, attn="fixedseq-qk", max_seq_len=4,
          fixed_seq="ids:1 2 3 4 5"),
]
INVALID[-5]["want"] = ["fnet", "causal"]
INVALID[-4]["want"] = ["linear", "causal"]
INVALID[-3]["want"] = ["cross-attention", "linear"]
INVALID[-2]["want"] = ["attn", "n_layers"]
INVALID[-1]["want"] = ["fixed_seq", "max_seq_len"]


# --------------------------------------------------------------------------
# safetensors, by hand (numpy only)
# --------------------------------------------------------------------------

def st_read(path, ints=None):
    """-> (tensors {name: np.float32 array}, metadata {str: str}, header dict, data offset).
    I32 tensors (a word model's n-gram table or word vocabulary) go to `ints` when it is
    a dict, and are an error otherwise. Raises ValueError on anything malformed."""
    import numpy as np
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError("%s: %d bytes, shorter than the 8-byte header length" % (path, len(buf)))
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError("%s: header length %d runs past the end of the file (%d bytes)"
                         % (path, n, len(buf)))
    try:
        header = json.loads(buf[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("%s: bad JSON header: %s" % (path, e))
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    base = 8 + n
    data_len = len(buf) - base
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise ValueError("%s: __metadata__ is not a {string: string} object" % path)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s: tensor %r: bad entry %r" % (path, name, info))
        if dtype != "F32" and not (dtype == "I32" and ints is not None):
            raise ValueError("%s: tensor %r has dtype %r, expected F32" % (path, name, dtype))
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError("%s: tensor %r: bad shape %r" % (path, name, shape))
        count = 1
        for d in shape:
            count *= d
        if not (isinstance(b, int) and isinstance(e, int) and 0 <= b <= e <= data_len):
            raise ValueError("%s: tensor %r: data_offsets %r outside the %d data bytes"
                             % (path, name, [b, e], data_len))
        if e - b != 4 * count:
            raise ValueError("%s: tensor %r: shape %r needs %d bytes, offsets give %d"
                             % (path, name, shape, 4 * count, e - b))
        if dtype == "I32":
            ints[name] = np.frombuffer(buf, dtype="<i4", count=count, offset=base + b).reshape(shape).copy()
            continue
        arr = np.frombuffer(buf, dtype="<f4", count=count, offset=base + b).reshape(shape)
        tensors[name] = arr.astype(np.float32)
    return tensors, meta, header, base


def st_write(path, tensors, meta):
    """tensors: list of (name, np array) written as F32 in that order."""
    import numpy as np
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        a = np.ascontiguousarray(np.asarray(arr, dtype="<f4"))
        raw = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = dict(meta)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)


def st_rewrite_data(src, dst, new_tensors):
    """Copy src to dst with the data of the given tensors replaced, header bytes untouched
    (so a reader that is picky about layout sees exactly what the tool wrote)."""
    import numpy as np
    _, _, header, base = st_read(src, {})
    with open(src, "rb") as f:
        buf = bytearray(f.read())
    for name, arr in new_tensors.items():
        b, e = header[name]["data_offsets"]
        raw = np.ascontiguousarray(np.asarray(arr, dtype="<f4")).tobytes()
        assert len(raw) == e - b, name
        buf[base + b:base + e] = raw
    with open(dst, "wb") as f:
        f.write(bytes(buf))


# --------------------------------------------------------------------------
# the model per the spec
# --------------------------------------------------------------------------

def resolved(cfg):
    """config strings -> dict of python values with d_head / d_ff / attn resolved."""
    r = {}
    for k, v in cfg.items():
        if k in INT_KEYS:
            r[k] = int(v)
        elif k in FLOAT_KEYS:
            r[k] = float(v)
        else:
            r[k] = v
    C, n = r["d_model"], r["n_heads"]
    r["d_head"] = r["d_head"] or C // n
    r["d_ff"] = r["d_ff"] or 4 * C
    r["attn"] = attn_list(cfg)
    for k, v in OPT_DEFAULTS.items():
        r.setdefault(k, int(v))
    r["enc_layers"] = int(r.get("enc_layers", 0))
    r["collab_dim"] = int(r.get("collab_dim", 0)) or n * r["d_head"]
    r["admin"] = int(r.get("admin", 0))
    for key, count in (("enc_attn", r["enc_layers"]), ("cross_attn", r["n_layers"])):
        kinds = [a.strip() for a in r.get(key, "mha").split(",")]
        r[key] = kinds * count if len(kinds) == 1 else kinds
    return r


def layout_standard(layout, i, n):
    """thesis Table 4.11: does layer i (0-based) of n keep standard attention (mha)?"""
    k = i + 1
    return {"none": False, "even": k % 2 == 0, "odd": k % 2 == 1, "top": k <= n // 2,
            "middle": k <= n // 4 or k > n - n // 4, "bottom": k > n // 2, "25%": k % 4 == 0,
            "first": k == 1, "last": k == n, "bilateral": k in (1, n)}[layout]


def attn_list(cfg):
    """the per-layer kinds of the main stack: `attn` (one kind, or a list; KIND@LAYOUT)
    with the `layout` key's layers (Table 4.11) turned into mha"""
    a, layout = cfg["attn"], cfg.get("layout", "none")
    if "@" in a:
        a, layout = a.split("@", 1)
    n = int(cfg["n_layers"])
    kinds = [k.strip() for k in a.split(",")]
    kinds = kinds * n if len(kinds) == 1 else kinds
    return ["mha" if layout_standard(layout, i, n) else k for i, k in enumerate(kinds)]


def mlp_width(n, dh):
    """the gated MLP that replaces attention: 3 F x d_m matrices against MHA's 4 d_m x n d_h"""
    return (4 * n * dh + 1) // 3


def attn_shapes(kind, C, n, dh, g, D=0):
    """[(suffix under layers.{l}.attn., shape, is_linear)] of one attention sublayer of
    `kind` before wo, in spec order: linear weights are [out, in] and carry a bias of
    [out] when bias=1; the MHE head embeddings never do."""
    H = n * dh
    if kind == "mha":
        return [("wq", (H, C), True), ("wk", (H, C), True), ("wv", (H, C), True)]
    if kind == "mqa":
        return [("wq", (H, C), True), ("wk", (dh, C), True), ("wv", (dh, C), True)]
    if kind == "gqa":
        return [("wq", (H, C), True), ("wk", (g * dh, C), True), ("wv", (g * dh, C), True)]
    if kind == "skv":
        return [("wq", (H, C), True), ("wkv", (H, C), True)]
    if kind == "el-att":
        return [("wq", (H, C), True)]
    if kind == "sha":
        return [("wq", (dh, C), True), ("wk", (dh, C), True), ("wv", (dh, C), True)]
    if kind in ("mhe-add", "mhe-mul"):
        return [("wq", (dh, C), True), ("wk", (dh, C), True), ("wv", (dh, C), True),
                ("eq", (n, dh), False), ("ek", (n, dh), False), ("ev", (n, dh), False)]
    if kind in ("taylor", "nonapprox", "rndemb-qk", "fixedseq-qk", "staticemb-qk"):
        return [("wq", (H, C), True), ("wk", (H, C), True), ("wv", (H, C), True)]
    if kind == "collab":            # Cordonnier et al. 2020: only W^V has a bias; M [n, D~]
        return [("wq.weight", (D, C), False), ("wk.weight", (D, C), False),
                ("content_bias.weight", (n, C), False), ("wv", (H, C), True), ("mixing", (n, D), False)]
    raise ValueError("unknown attn kind %r" % kind)


def expected_params(cfg):
    """[(name, shape)] of the spec, in a canonical order."""
    r = resolved(cfg)
    V, C, L, F = r["vocab_size"], r["d_model"], r["n_layers"], r["d_ff"]
    H = r["n_heads"] * r["d_head"]
    ln, bias = r["norm"] == "layernorm", r["bias"] == 1
    out = [("tok_emb.weight", (V, C)), ("pos_emb.weight", (r["max_seq_len"], C))]

    def lin(p, o, i):
        out.append((p + ".weight", (o, i)))
        if bias:
            out.append((p + ".bias", (o,)))

    def norm(p):
        out.append((p + ".weight", (C,)))
        if ln:
            out.append((p + ".bias", (C,)))

    def attention(p, kind):
        if kind == "mlp":           # gate, up [F, C]; down [C, F] (in W^O's place)
            F = mlp_width(r["n_heads"], r["d_head"])
            lin(p + "gate", F, C)
            lin(p + "up", F, C)
            lin(p + "down", C, F)
            return
        if kind == "fnet":          # no parameters
            return
        if kind == "linear":        # Y = W_seq (X W_hidden^T); no bias, no W^O
            out.append((p + "hidden.weight", (C, C)))
            out.append((p + "seq.weight", (r["max_seq_len"], r["max_seq_len"])))
            return
        for suffix, shape, is_lin in attn_shapes(kind, C, r["n_heads"], r["d_head"], r["kv_groups"], r["collab_dim"]):
            if is_lin:
                lin(p + suffix, *shape)
            else:
                out.append((p + suffix, shape))
        lin(p + "wo", C, H)

    def block(p, kind, cross_kind):
        norm(p + "norm1")
        attention(p + "attn.", kind)
        if cross_kind:
            norm(p + "norm3")
            attention(p + "cross.", cross_kind)
        norm(p + "norm2")
        lin(p + "mlp.fc1", F, C)
        lin(p + "mlp.fc2", C, F)
        if r["admin"]:
            out.append((p + "omega1", (C,)))
            if cross_kind:
                out.append((p + "omega3", (C,)))
            out.append((p + "omega2", (C,)))

    encdec = r["arch"] == "encdec"
    if encdec:
        out.append(("enc.pos_emb.weight", (r["max_seq_len"], C)))
        for l in range(r["enc_layers"]):
            block("enc.layers.%d." % l, r["enc_attn"][l], None)
        if r["norm_position"] == "pre":
            norm("enc.ln_f")
    for l in range(L):
        block("layers.%d." % l, r["attn"][l], r["cross_attn"][l] if encdec else None)
    if r["norm_position"] == "pre":
        norm("ln_f")
    if r["tie_embeddings"] == 0:
        out.append(("lm_head.weight", (V, C)))
    if r["n_classes"] > 0:
        # encoder sequence-classification head: not part of the LM loss
        out.append(("cls_head.weight", (r["n_classes"], C)))
        if bias:
            out.append(("cls_head.bias", (r["n_classes"],)))
    return out


# --------------------------------------------------------------------------
# the reference: the PyTorch twin (tools/python/mhe_torch.py) in float64
# --------------------------------------------------------------------------

def twin():
    """tools/python/mhe_torch.py, imported by path from the repository root (it needs torch:
    call only after torch_missing())"""
    tools = os.path.join(REPO, "tools", "python")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import mhe_torch
    return mhe_torch


def reference_model(cfg, params_np, dtype=None, cls=None):
    """The twin of the config that was asked for (not of the file's metadata, which
    check_meta judges), holding the parameters params_np {name: array}. Raises ValueError
    when the twin's tensors are not exactly the file's."""
    import numpy as np
    import torch
    mt = twin()
    model = (cls or mt.MheModel)(cfg, dtype or torch.float64)
    missing = [n for n in model.names if n not in params_np]
    extra = [n for n in params_np if not model.has(n)]
    if missing or extra:
        raise ValueError("the twin's tensors differ from the file's: missing %s, unexpected %s"
                         % (missing[:5], extra[:5]))
    with torch.no_grad():
        for n in model.names:
            model.param(n).copy_(torch.from_numpy(np.asarray(params_np[n], dtype=np.float32)).to(model.dtype))
    return model


def reference_grads(torch, cfg, params_np, inputs_np, targets_np, lengths=None, src_np=None,
                    src_lengths=None, feats=None):
    """-> (loss, {name: gradient}, {ek name: noise scale}) of the twin in float64.
    lengths / src_lengths: real tokens per sequence (the rest is padding: no query attends
    to it; targets there are -1). feats: a word model's per-type features. The taps give,
    per mhe-add sublayer, its per-head keys K_i = K + ek[i]: the gradient of ek is the sum
    over the tokens of dL/dK_i, and the absolute sum of those terms is what float32
    rounding noise is relative to."""
    import numpy as np
    model = reference_model(cfg, params_np)
    model.taps = {}
    src = torch.as_tensor(src_np, dtype=torch.long) if src_np is not None else None
    loss = model.loss(torch.as_tensor(inputs_np, dtype=torch.long), torch.as_tensor(targets_np, dtype=torch.long),
                      lengths, src, src_lengths, feats)
    loss.backward()
    l1 = {k: float(t.grad.abs().sum(dim=(0, 2)).max()) for k, t in model.taps.items()}
    # parameters the loss does not use (cls_head) get no .grad: their gradient is zero
    g = {n: (p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape)))
         for n, p in model.named_mhe_parameters()}
    return float(loss.item()), g, l1


# --------------------------------------------------------------------------
# stand-in for the C tool (only for --selftest): the twin in float32, with the
# faults MHE_FAKE_BUG injects, so the checks can be shown to catch them
# --------------------------------------------------------------------------

def _fake_model(torch, cfg):
    mt = twin()
    F = torch.nn.functional
    bug = os.environ.get("MHE_FAKE_BUG", "")

    class Fake(mt.MheModel):
        def _attn(self, xq, xkv, p, kind, mask, ctx):
            n, dh = self.r["n_heads"], self.r["d_head"]
            if kind == "gqa" and bug == "gqa-map":
                g = self.r["kv_groups"]           # the fault: query head h uses K/V head h % g
                q = self._heads(self._linear(xq, p + ".wq"), n)
                k = self._heads(self._linear(xkv, p + ".wk"), g).repeat(1, n // g, 1, 1)
                v = self._heads(self._linear(xkv, p + ".wv"), g).repeat(1, n // g, 1, 1)
                return self._linear(self._core(q, k, v, mask), p + ".wo")
            if kind == "sha" and bug == "sha-copies":
                q = self._heads(self._linear(xq, p + ".wq"), 1)
                k, v = self._heads(self._linear(xkv, p + ".wk"), 1), self._heads(self._linear(xkv, p + ".wv"), 1)
                o = self._core(q, k, v, mask)     # the fault: heads 1.. get zeros, not copies
                o = torch.cat([o, o.new_zeros(o.shape[0], o.shape[1], (n - 1) * dh)], -1)
                return self._linear(o, p + ".wo")
            return super()._attn(xq, xkv, p, kind, mask, ctx)

        def loss(self, tokens, targets, *args, **kw):
            loss = super().loss(tokens, targets, *args, **kw)
            if self.r["n_classes"] > 0 and bug == "cls-grad":
                # the fault: the head leaks a tiny term into the LM loss
                x = self.hidden(tokens)
                loss = loss + 1e-6 * F.linear(x[:, 0], self.param("cls_head.weight"), self._p("cls_head.bias")).sum()
            return loss

    m = Fake(cfg, torch.float32)
    if bug == "encoder-causal" and m.r["arch"] == "encoder":
        m.r["arch"] = "decoder"                 # the fault: an encoder with the causal mask
    return m


# the config keys the stand-in takes (it writes them all into its metadata)
FAKE_KEYS = SPEC_KEYS + list(OPT_DEFAULTS) + ["admin"]


def fake_mhe(argv):
    """Plays `mhe init` / `mhe grad` for --selftest. MHE_FAKE_BUG injects a fault."""
    import numpy as np
    import torch
    bug = os.environ.get("MHE_FAKE_BUG", "")

    def opt(name):
        i = argv.index(name)
        return argv[i + 1]

    if bug == "fail":
        sys.stderr.write("mhe: injected failure\n")
        return 3
    if argv[0] == "init":
        cfg = {}
        with open(opt("--config")) as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    k, v = line.split("=", 1)
                    if k not in FAKE_KEYS:
                        sys.stderr.write("mhe: unknown config key '%s'\n" % k)
                        return 2
                    cfg[k.strip()] = v.strip()
        for k, v in OPT_DEFAULTS.items():
            cfg.setdefault(k, v)        # like the C tool: every field in the metadata
        r = resolved(cfg)
        why = None
        if r["arch"] not in ARCHS:
            why = "unknown arch '%s'" % r["arch"]
        elif r["n_classes"] > 0 and r["arch"] != "encoder":
            why = "n_classes %d needs arch=encoder" % r["n_classes"]
        elif r["mask_token"] >= r["vocab_size"]:
            why = "mask_token %d is outside the vocabulary" % r["mask_token"]
        if why and bug != "accept-bad":
            sys.stderr.write("mhe: init: %s\n" % why)
            return 1
        if why:
            return 0
        for l, kind in enumerate(r["attn"][:r["n_layers"]]):
            why = None
            if kind not in ATTN_KINDS:
                why = "unknown attention kind '%s'" % kind
            elif kind == "gqa" and r["n_heads"] % r["kv_groups"]:
                why = "layer %d is gqa: kv_groups %d must divide n_heads %d" % (
                    l, r["kv_groups"], r["n_heads"])
            elif kind == "el-att" and r["n_heads"] * r["d_head"] != r["d_model"]:
                why = "layer %d is el-att: needs n_heads * d_head = d_model" % l
            if why and bug != "accept-bad":
                sys.stderr.write("mhe: init: %s\n" % why)
                return 1
            if why:
                return 0        # the injected fault: accepts it and writes nothing
        torch.manual_seed(int(opt("--seed")))
        m = _fake_model(torch, cfg)
        std = float(cfg["init_std"])
        out = []
        for name, shape in expected_params(cfg):
            t = m.param(name)
            if name.endswith(".bias"):
                v = torch.zeros(shape)
            elif ".norm" in name or name.startswith("ln_f.") or ".omega" in name:
                v = torch.ones(shape)
            else:
                v = torch.randn(shape) * std
            assert tuple(t.shape) == tuple(shape), name
            out.append((name, v.numpy()))
        meta = {"format": "mhe-1"}
        if bug != "nometa":
            meta.update(cfg)
            meta["d_head"] = str(resolved(cfg)["d_head"])       # a tool may store resolved values
            meta["norm_eps"] = repr(float(np.float32(float(cfg["norm_eps"]))))
        if bug == "no-enc-keys":
            for k in ENCODER_META_KEYS:
                meta.pop(k, None)
        if bug == "dropparam":
            out = out[1:]
        st_write(opt("--out"), out, meta)
        return 0
    if argv[0] == "grad":
        params, meta, _, _ = st_read(opt("--model"))
        cfg = {k: meta[k] for k in FAKE_KEYS if k in meta}
        m = _fake_model(torch, cfg)
        with torch.no_grad():
            for k, v in params.items():
                m.param(k).copy_(torch.from_numpy(v.copy()))
        rows = []
        with open(opt("--tokens")) as f:
            for line in f:
                if line.strip():
                    rows.append([int(t) for t in line.split()])
        tok = torch.tensor(rows, dtype=torch.long)
        loss = m(tok[:, :-1], tok[:, 1:])
        loss.backward()
        g = {k: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
             for k, p in m.named_mhe_parameters()}
        if "tok_emb.weight" not in g:
            raise RuntimeError("no tok_emb grad")
        names = [name for name, _ in expected_params(cfg)]
        lv = float(loss.item())
        if bug == "loss":
            lv *= 1.001
        out = [("loss", np.array([lv], dtype=np.float32))]
        for name in names:
            a = g[name]
            if bug == "drop" and name == names[-1]:
                continue
            if bug == "scale" and name == names[2]:
                a = a * 1.001
            if (bug == "perturb-only" and name.endswith(".weight") and ("norm" in name or "ln_f" in name)
                    and abs(params[name] - 1).max() > 0):
                a = a * 0.99    # wrong only when norm weights differ from 1
            if bug == "shape" and a.ndim == 2 and name.endswith("fc1.weight"):
                a = a.T
            if bug == "ek-noise" and name.endswith(".attn.ek") and zero_ek(cfg, name):
                # an error of 1e-3 of eq's gradient: small, yet far above the rounding
                # noise that the zero-gradient rule for ek allows
                a = a + 1e-3 * np.abs(g[name[:-2] + "eq"]).max()
            out.append((name, a))
        if bug == "extra":
            out.append(("bogus.weight", np.zeros(3, dtype=np.float32)))
        st_write(opt("--out"), out, {})
        return 0
    sys.stderr.write("mhe: unknown command %s\n" % argv[0])
    return 2


# --------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------

def run_tool(tool, args, res, what):
    cmd = tool + args
    try:
        p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        res.check(False, "%s: `%s` timed out after %d s" % (what, " ".join(cmd), CMD_TIMEOUT))
        return False
    except OSError as e:
        res.check(False, "%s: `%s` could not run: %s" % (what, " ".join(cmd), e))
        return False
    if p.returncode != 0:
        err = (p.stderr.decode("utf-8", "replace").strip() or
               p.stdout.decode("utf-8", "replace").strip())
        res.check(False, "%s: `%s` exited with %d: %s" % (what, " ".join(cmd), p.returncode,
                                                         err[-2000:] or "(no output)"))
        return False
    return True


def meta_matches(key, want, got, cfg):
    """Is the metadata value `got` the config value `want` (allowing resolved defaults)?"""
    if key in ("d_head", "d_ff"):
        return int(got) in (int(want), resolved(cfg)[key])
    if key in INT_KEYS:
        s = got.strip().lower()
        s = {"true": "1", "false": "0"}.get(s, s)
        return int(s) == int(want)
    if key in FLOAT_KEYS:
        a, b = float(got), float(want)
        return abs(a - b) <= 1e-6 * max(abs(b), 1e-30)
    if key == "attn":
        # KIND@LAYOUT and the layout key: the model stores the per-layer list
        g = [s.strip() for s in got.split(",")]
        n = int(cfg["n_layers"])
        return (g * n if len(g) == 1 else g) == attn_list(cfg)
    if key in ("attn", "enc_attn", "cross_attn"):
        n = int(cfg.get("enc_layers", 0)) if key == "enc_attn" else int(cfg["n_layers"])
        g = [s.strip() for s in got.split(",")]
        w = [s.strip() for s in want.split(",")]
        return (g * n if len(g) == 1 else g) == (w * n if len(w) == 1 else w)
    return got.strip() == want.strip()


def check_meta(meta, cfg, res, tag):
    bad = []
    if meta.get("format") != "mhe-1":
        bad.append("format=%r (want 'mhe-1')" % meta.get("format"))
    for k, v in cfg.items():
        if k not in meta:
            bad.append("%s missing" % k)
            continue
        try:
            ok = meta_matches(k, v, meta[k], cfg)
        except ValueError:
            ok = False
        if not ok:
            bad.append("%s=%r (want %r)" % (k, meta[k], v))
    if cfg.get("arch") == "encoder":
        # a tool that makes encoders writes their keys, set or not
        bad.extend("%s missing (an encoder's metadata must hold it)" % k
                   for k in ENCODER_META_KEYS if k not in meta and k not in cfg)
    for k, v in OPT_DEFAULTS.items():
        # a key the config left out must hold the default the reference model assumes
        if k not in cfg and k in meta and not meta_matches(k, v, meta[k], cfg):
            bad.append("%s=%r (want the default %r)" % (k, meta[k], v))
    return res.check(not bad, "%s: model metadata: %s" % (tag, "; ".join(bad)))


def check_names(tensors, exp, res, tag, what):
    exp_d = dict(exp)
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    missing = sorted(set(exp_d) - set(got))
    extra = sorted(set(got) - set(exp_d))
    wrong = ["%s %s (want %s)" % (k, list(got[k]), list(exp_d[k]))
             for k in sorted(set(got) & set(exp_d)) if got[k] != tuple(exp_d[k])]
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("unexpected " + ", ".join(extra))
    if wrong:
        parts.append("wrong shape " + ", ".join(wrong))
    return res.check(not parts, "%s: %s names/shapes: %s" % (tag, what, "; ".join(parts)))


def perturbed(params, cfg, rng):
    import numpy as np
    std = float(cfg["init_std"])
    out = {}
    for k, v in params.items():
        s = 0.1 if v.ndim == 1 else max(std, 0.02)
        if k.rsplit(".", 1)[-1] in ("eq", "ev"):
            # MHE head embeddings: make the n heads clearly different. Not ek: for mhe-mul
            # eq already does that (the scores see (1+eq)(1+ek)); for mhe-add ek only adds
            # a row constant q.ek[i] to the scores, which softmax removes, and a large one
            # just swamps the informative part q.k in float32 (a layer-0 post-norm K, from
            # the raw embeddings, is ~1e-3), so the test would measure conditioning.
            s = 0.2
        out[k] = (v.astype(np.float64) + s * rng.standard_normal(v.shape)).astype(np.float32)
    return out


def zero_ek(cfg, pname):
    """Is pname (layers.{l}.attn.ek) the head-key embedding of an mhe-add layer?"""
    return resolved(cfg)["attn"][int(pname.split(".")[1])] == "mhe-add"


def check_invalid(c, tool, workdir, res):
    """`mhe init` on a config it must refuse: non-zero exit (not a signal), a message
    that names the problem, and no model file. One pass or fail."""
    name = c["name"]
    os.makedirs(workdir, exist_ok=True)
    cfg_path = os.path.join(workdir, "config.txt")
    out = os.path.join(workdir, "model.safetensors")
    with open(cfg_path, "w") as f:
        for k in SPEC_KEYS:
            f.write("%s=%s\n" % (k, c["cfg"][k]))
        for k in sorted(set(c["cfg"]) - set(SPEC_KEYS)):
            f.write("%s=%s\n" % (k, c["cfg"][k]))
    cmd = tool + ["init", "--config", cfg_path, "--seed", "1", "--out", out]
    try:
        p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=CMD_TIMEOUT)
    except (subprocess.TimeoutExpired, OSError) as e:
        return res.check(False, "%s: `%s` did not finish: %s" % (name, " ".join(cmd), e))
    msg = (p.stderr.decode("utf-8", "replace") + p.stdout.decode("utf-8", "replace")).strip()
    bad = []
    if p.returncode == 0:
        bad.append("exit status 0")
    elif p.returncode < 0 or p.returncode > 125:
        bad.append("exit status %d (a crash, not a clean refusal)" % p.returncode)
    missing = [w for w in c["want"] if w.lower() not in msg.lower()]
    if missing:
        bad.append("message %r does not mention %s" % (msg[-300:], ", ".join(map(repr, missing))))
    if os.path.exists(out):
        bad.append("it wrote %s anyway" % out)
    ok = res.check(not bad, "%s: `mhe init` must refuse arch=%s attn=%s%s: %s"
                   % (name, c["cfg"]["arch"], c["cfg"]["attn"],
                      "".join(" %s=%s" % (k, c["cfg"][k]) for k in
                              ("kv_groups", "d_head", "vocab_size", "mask_token", "n_classes")
                              if k in c["cfg"] and (k != "vocab_size" or "mask_token" in c["cfg"])),
                      "; ".join(bad)))
    if ok:
        res.say("ok %s: refused, rc %d: %s" % (name, p.returncode, msg.splitlines()[-1][:150]))
    return ok


def check_config(c, tool, workdir, seed, res, verbose, known_keys):
    import numpy as np
    import torch
    name, B, T = c["name"], c["B"], c["T"]
    cfg = dict(c["cfg"])
    sent = dict(cfg)
    for k, v in c["extra"].items():
        if k in known_keys:
            sent[k] = v
        else:
            res.say("note %s: not sending %s=%s (the tool's metadata does not list %s)"
                    % (name, k, v, k))
    os.makedirs(workdir, exist_ok=True)
    cfg_path = os.path.join(workdir, "config.txt")
    with open(cfg_path, "w") as f:
        for k in SPEC_KEYS:
            f.write("%s=%s\n" % (k, sent[k]))
        for k in sorted(set(sent) - set(SPEC_KEYS)):
            f.write("%s=%s\n" % (k, sent[k]))
    model_path = os.path.join(workdir, "model.safetensors")
    if not run_tool(tool, ["init", "--config", cfg_path, "--seed", str(seed), "--out", model_path],
                    res, name + ": init"):
        return None
    try:
        params, meta, _, _ = st_read(model_path)
    except (ValueError, OSError) as e:
        res.check(False, "%s: cannot read the model: %s" % (name, e))
        return None
    check_meta(meta, sent, res, name)
    exp = expected_params(cfg)
    if not check_names(params, exp, res, name, "model parameter"):
        return meta

    V = int(cfg["vocab_size"])
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, V, size=(B, T + 1))
    Ts = c.get("Ts", 0)
    src = rng.randint(0, V, size=(B, Ts)) if Ts else None
    # padding: the last line's ids stop at `real` (its source at `src_real`), then `.`
    real, src_real = [T + 1] * B, [Ts] * B
    if c.get("pad"):
        real[-1], src_real[-1] = T - 2, max(Ts - 2, 1)
    lengths = [min(q, T) for q in real] if c.get("pad") else None
    src_lengths = src_real if (c.get("pad") and Ts) else None
    inputs = np.where(np.arange(T)[None, :] < np.array(real)[:, None], tokens[:, :-1], 0)
    targets = np.where(np.arange(1, T + 1)[None, :] < np.array(real)[:, None], tokens[:, 1:], -1)
    tok_path = os.path.join(workdir, "tokens.txt")
    with open(tok_path, "w") as f:
        for b, row in enumerate(tokens):
            ids = [str(int(t)) if j < real[b] else "." for j, t in enumerate(row)]
            if Ts:
                ids = [str(int(t)) if j < src_real[b] else "." for j, t in enumerate(src[b])] + ["|"] + ids
            f.write(" ".join(ids) + "\n")

    pert_path = os.path.join(workdir, "model_perturbed.safetensors")
    st_rewrite_data(model_path, pert_path, perturbed(params, cfg, rng))

    for variant, mpath in (("init", model_path), ("perturbed", pert_path)):
        tag = "%s [%s]" % (name, variant)
        failed_before = res.failed
        gpath = os.path.join(workdir, "grads_%s.safetensors" % variant)
        if not run_tool(tool, ["grad", "--model", mpath, "--tokens", tok_path, "--out", gpath],
                        res, tag + ": grad"):
            continue
        try:
            grads, _, _, _ = st_read(gpath)
            model_now, _, _, _ = st_read(mpath)
        except (ValueError, OSError) as e:
            res.check(False, "%s: cannot read the gradients: %s" % (tag, e))
            continue
        try:
            loss_ref, g_ref, l1_ref = reference_grads(torch, cfg, model_now, inputs, targets, lengths,
                                                      src, src_lengths)
        except ValueError as e:
            res.check(False, "%s: the twin cannot take the model: %s" % (tag, e))
            continue
        if "loss" not in grads:
            res.check(False, "%s: no `loss` tensor in the gradient file" % tag)
            loss_err = float("nan")
        else:
            lc = grads.pop("loss")
            ok_shape = tuple(lc.shape) == (1,)
            lval = float(lc.reshape(-1)[0]) if lc.size else float("nan")
            loss_err = rel_err(lval, loss_ref, 1e-12)
            res.check(ok_shape and loss_err <= LOSS_RTOL,
                      "%s: loss %s shape %s, torch %.8f, rel err %.3g (limit %g)"
                      % (tag, repr(lval), list(lc.shape), loss_ref, loss_err, LOSS_RTOL))
        check_names(grads, exp, res, tag, "gradient")
        worst, worst_name = compare_grads(tag, exp, grads, g_ref, l1_ref, res, verbose)
        res.say("%s %s: loss %.6f rel err %.2g; worst grad %s err %.2g"
                % ("ok" if res.failed == failed_before else "BAD", tag, loss_ref, loss_err,
                   worst_name, worst))
    return meta


def compare_grads(tag, exp, grads, g_ref, l1_ref, res, verbose):
    """Every gradient of `exp` from the tool against torch's; -> (worst error, its name)."""
    import numpy as np
    worst, worst_name = -1.0, "-"
    for pname, _ in exp:
        if pname not in grads or grads[pname].shape != g_ref[pname].shape:
            continue            # already reported by check_names
        gc = grads[pname].astype(np.float64)
        gt = g_ref[pname]
        if pname.startswith("cls_head."):
            # the classification head takes no part in the LM loss: exactly zero
            # (torch gives no gradient at all), not merely small
            nz = int(np.count_nonzero(gc)) if np.all(np.isfinite(gc)) else gc.size
            if verbose:
                res.say("  %s %-28s max|g_c| %.3g (must be exactly 0)"
                        % (tag, pname, float(np.abs(gc).max()) if gc.size else 0.0))
            res.check(nz == 0 and not np.any(gt), "%s: grad %s: %d of %d entries are not "
                      "exactly zero (max|g_c| %.3g); the head is not part of the LM loss"
                      % (tag, pname, nz, gc.size, float(np.abs(gc).max()) if gc.size else 0.0))
            continue
        scale = max(float(np.abs(gt).max()) if gt.size else 0.0, GRAD_FLOOR)
        if pname.endswith(".attn.wk.bias") or pname.endswith(".cross.wk.bias"):
            # Exactly zero in exact arithmetic for every kind with a wk (the bias adds
            # q_h.b_k -- or q_h.(b_k*(1+ek_h)) for mhe-mul -- to a whole row of scores,
            # which softmax ignores), so both sides hold only rounding noise: measure it
            # against the gradient of the same projection's weight.
            sib = g_ref[pname[:-len("bias")] + "weight"]
            scale = max(scale, float(np.abs(sib).max()))
        elif pname in l1_ref:
            # mhe-add: K_i = K + ek[i] adds q_i.ek[i] to a whole row of head i's scores,
            # which softmax ignores, so the gradient of ek is exactly zero and both sides
            # hold rounding noise. It is the sum over all B*T tokens of dL/dK_i, terms
            # that cancel exactly: measure the noise against the absolute sum of those
            # terms (max over heads and columns, from torch). Not against a sibling
            # gradient: eq's can be far smaller (a layer-0 post-norm K is ~1e-3, and
            # deq_i scales with K while the terms of dek_i scale with Q + eq[i]).
            scale = max(scale, l1_ref[pname])
        err = float(np.abs(gc - gt).max()) / scale if gt.size else 0.0
        if not np.all(np.isfinite(gc)):
            err = float("inf")
        if verbose:
            res.say("  %s %-28s err %.3g  (max|g_t| %.3g)" % (tag, pname, err, scale))
        if err > worst:
            worst, worst_name = err, pname
        res.check(err <= GRAD_RTOL, "%s: grad %s: max|g_c-g_t|/max|g_t| = %.3g (limit %g, "
                  "max|g_t| %.3g)" % (tag, pname, err, GRAD_RTOL, scale))
    return worst, worst_name


# --------------------------------------------------------------------------
# word models: the HashFormers embeddings (thesis ch. 2) and the word vocabulary
# --------------------------------------------------------------------------
#
# A word model (config key `embedding`: vocab with a word vocabulary, hash-emb,
# hash-pool, hash-add, hash-proj; `hash`: md5 or lsh) embeds words, not ids. Its
# token file lines read `LABELS | TEXT`: T targets of the Shuffle+Random head
# sr_head (0 original, 1 shuffled, 2 random, -1 ignored, `.` padding at the end)
# and a text of as many words (lower-cased runs of [A-Za-z0-9_] or bytes >= 0x80,
# or of punctuation; the items <pad> <unk> <s> </s> are the special tokens 0..3).
# The reference embeds each position as
#   special token s      special_emb.weight[s]                  (vocab: tok_emb row s)
#   vocab word           tok_emb.weight[4 + its index in the model's I32 vocab.words] (1 if absent)
#   hash-emb             tok_emb.weight[bucket]
#   hash-pool            regular + sum_c softmax_c(pool.weight)[c] * pool.codebook.weight[chunk_c + 1]
#   hash-add             regular + sum_t add.books[t, bit_t] / sqrt(T)
#   hash-proj            regular + Pearson correlation of the bits with each row of proj.weight
# with bucket = HMAC-MD5 (key "en"; plain MD5 with hash_key=0) of the word as a
# big-endian integer mod N, and bits = the digest's first T bits, MSB first, both
# computed by the twin (md5_features) with hashlib/hmac and checked against `mhe hash`; LSH buckets and
# bits come from `mhe hash` (the LSH itself is checked against an explicit
# hyperplane matrix in tests/test_hash.c).

N_SPECIAL = 4
SPECIAL_ITEMS = ["<pad>", "<unk>", "<s>", "</s>"]
WORD_CORPUS = ("In the beginning God created the heaven and the earth. And the earth was without "
               "form, and void; and darkness was upon the face of the deep. Walking walked walks, "
               "played plays!\n") * 3
WORD_POOL = ["in", "the", "beginning", "God", "created", ",", "walking", "walked", "zebra",
             "quantum", "!", "x_1", "earth", "VOID", ";", "played", "42", "</s>", "<s>", "<unk>",
             "deep", "caf\u00e9"]
WORD_KEYS = ["embedding", "hash", "hash_bits", "hash_buckets", "hash_chunk", "hash_key",
             "lsh_features", "lsh_dim", "lsh_pad", "token_head"]


def _wcfg(name, B, T, pad=False, **kw):
    base = dict(vocab_size=256, d_model=24, n_heads=4, n_layers=2, max_seq_len=12, arch="encoder",
                norm="layernorm", norm_position="pre", activation="gelu", bias=1, tie_embeddings=1,
                token_head="sr", init_std="0.05")
    base.update(kw)
    c = _cfg(name, B, T, pad=pad, **base)
    c["words"] = True
    return c


WORD_CONFIGS = [
    _wcfg("words-vocab-pre-ln", 2, 8, vocab_size=20),
    _wcfg("words-hashemb-md5-pre-ln", 2, 9, embedding="hash-emb", hash_buckets=37),
    _wcfg("words-hashemb-md5-post-rms-ncls2", 2, 8, embedding="hash-emb", hash_buckets=16, norm="rmsnorm",
          norm_position="post", n_classes=2, bias=0),
    _wcfg("words-hashemb-lsh-post-rms", 2, 8, embedding="hash-emb", hash="lsh", hash_buckets=32, lsh_dim=64,
          norm="rmsnorm", norm_position="post", activation="silu"),
    _wcfg("words-pool-md5-post-ln", 2, 8, embedding="hash-pool", hash_bits=23, hash_chunk=5,
          norm_position="post"),
    _wcfg("words-pool-lsh-table-pre-rms-pad", 3, 8, pad=True, embedding="hash-pool", hash="lsh",
          lsh_features="table", lsh_dim=40, hash_bits=24, hash_chunk=6, norm="rmsnorm"),
    _wcfg("words-add-md5-plain-pre-ln", 2, 9, embedding="hash-add", hash_bits=20, hash_key=0,
          attn="mhe-mul"),
    _wcfg("words-add-lsh-post-ln", 2, 8, embedding="hash-add", hash="lsh", hash_bits=32, lsh_dim=64,
          norm_position="post", lsh_pad=1),
    _wcfg("words-proj-md5-pre-ln-nobias-pad", 3, 8, pad=True, embedding="hash-proj", hash_bits=128,
          bias=0, attn="mhe-add"),
    _wcfg("words-proj-lsh-post-rms-decoder", 2, 8, embedding="hash-proj", hash="lsh", hash_bits=16,
          lsh_dim=64, norm="rmsnorm", norm_position="post", arch="decoder"),
]


def py_words(item):
    """The word splitter on bytes, written from its definition (see mhe_word_next)."""
    b = item.encode("utf-8")

    def kind(c):
        if c in b" \t\n\x0b\x0c\r" or 0x1c <= c <= 0x1f:
            return 0
        if 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95 or c >= 0x80:
            return 1
        return 2
    out, i = [], 0
    while i < len(b):
        k = kind(b[i])
        if k == 0:
            i += 1
            continue
        j = i
        while j < len(b) and kind(b[j]) == k:
            j += 1
        out.append(b[i:j].lower())
        i = j
    return out


def tool_hash(tool, model, words, res, tag):
    """`mhe hash` on each word: {word: ('id'|'bucket', n) or ('bits', [0/1 ...])}"""
    cmd = tool + ["hash", "--model", model] + [w.decode("utf-8") for w in words]
    try:
        p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CMD_TIMEOUT)
    except (subprocess.TimeoutExpired, OSError) as e:
        res.check(False, "%s: `mhe hash` did not run: %s" % (tag, e))
        return None
    lines = p.stdout.split(b"\n")[:-1]
    if p.returncode != 0 or len(lines) != len(words):
        res.check(False, "%s: `mhe hash` gave rc %d and %d lines for %d words: %s" % (
            tag, p.returncode, len(lines), len(words), p.stderr.decode("utf-8", "replace")[-300:]))
        return None
    out = {}
    for w, line in zip(words, lines):
        word, val = line.split(b"\t")
        k, v = val.decode().split(" ")
        if word != w:
            res.check(False, "%s: `mhe hash` printed word %r for %r" % (tag, word, w))
            return None
        if k == "bits":
            raw = bytes.fromhex(v)
            out[w] = ("bits", [(raw[t // 8] >> (7 - t % 8)) & 1 for t in range(8 * len(raw))])
        else:
            out[w] = (k, int(v))
    return out


def expected_word_params(cfg):
    r = resolved(cfg)
    C, emb = r["d_model"], r.get("embedding", "vocab")
    T, k = int(r.get("hash_bits", 128)), int(r.get("hash_chunk", 10))
    out = [(n, s) for n, s in expected_params(cfg) if n not in ("tok_emb.weight", "lm_head.weight")]
    if emb == "vocab":
        out.append(("tok_emb.weight", (r["vocab_size"], C)))
    else:
        out.append(("special_emb.weight", (N_SPECIAL, C)))
        if emb == "hash-emb":
            out.append(("tok_emb.weight", (int(r.get("hash_buckets", 1024)), C)))
        else:
            out.append(("regular_emb.weight", (C,)))
            if emb == "hash-pool":
                out += [("pool.codebook.weight", (2 ** k + 1, C)), ("pool.weight", (-(-T // k), C))]
            elif emb == "hash-add":
                out.append(("add.books", (T, 2, C)))
            else:
                out.append(("proj.weight", (C, T)))
    out.append(("sr_head.weight", (3, C)))
    if r["bias"] == 1:
        out.append(("sr_head.bias", (3,)))
    return out


def check_word_config(c, tool, workdir, seed, res, verbose):
    import numpy as np
    import torch
    name, B, T, cfg = c["name"], c["B"], c["T"], dict(c["cfg"])
    r = resolved(cfg)
    emb = r.get("embedding", "vocab")
    os.makedirs(workdir, exist_ok=True)
    cfg_path, model_path = os.path.join(workdir, "config.txt"), os.path.join(workdir, "model.safetensors")
    corpus = os.path.join(workdir, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(WORD_CORPUS)
    with open(cfg_path, "w") as f:
        for key in SPEC_KEYS:
            f.write("%s=%s\n" % (key, cfg[key]))
        for key in sorted(set(cfg) - set(SPEC_KEYS)):
            f.write("%s=%s\n" % (key, cfg[key]))
    # mhe init reads --data only for a word vocabulary or an LSH n-gram table (and refuses it otherwise)
    reads_data = emb == "vocab" or (r.get("hash") == "lsh" and r.get("lsh_features") == "table")
    extra = (["--data", corpus] if reads_data else []) + (["--words", "1"] if emb == "vocab" else [])
    if not run_tool(tool, ["init", "--config", cfg_path, "--seed", str(seed), "--out", model_path] + extra,
                    res, name + ": init"):
        return
    ints = {}
    try:
        params, meta, _, _ = st_read(model_path, ints)
    except (ValueError, OSError) as e:
        res.check(False, "%s: cannot read the model: %s" % (name, e))
        return
    check_meta(meta, cfg, res, name)
    exp = expected_word_params(cfg)
    if not check_names(params, exp, res, name, "model parameter"):
        return
    want_ints = ({"vocab.words"} if emb == "vocab" else set()) | (
        {"lsh.ngrams"} if r.get("lsh_features") == "table" else set())
    res.check(set(ints) == want_ints, "%s: I32 word state %s, want %s" % (name, sorted(ints), sorted(want_ints)))

    # the token file: LABELS | TEXT, the last line padded when c["pad"]
    rng = np.random.RandomState(seed)
    rows_items, labels, lengths = [], [], []
    for b in range(B):
        n = T - 3 if (c.get("pad") and b == B - 1) else T
        items = [WORD_POOL[i] for i in rng.randint(0, len(WORD_POOL), size=n)]
        lab = [int(v) for v in rng.randint(-1, 3, size=n)]
        lab[0] = 1
        rows_items.append(items)
        labels.append(lab + [-1] * (T - n))
        lengths.append(n)
    tok_path = os.path.join(workdir, "tokens.txt")
    with open(tok_path, "w") as f:
        for b in range(B):
            f.write(" ".join([str(v) for v in labels[b][:lengths[b]]] + ["."] * (T - lengths[b])) + " | " +
                    " ".join(rows_items[b]) + "\n")
    # word types in order of first appearance, as the tool interns them
    types, rows = [], []
    for b in range(B):
        row = []
        for it in rows_items[b]:
            if it in SPECIAL_ITEMS:
                row.append(SPECIAL_ITEMS.index(it))
                continue
            w, = py_words(it)
            if w not in types:
                types.append(w)
            row.append(N_SPECIAL + types.index(w))
        rows.append(row + [0] * (T - len(row)))
    hashed = tool_hash(tool, model_path, types, res, name)
    if hashed is None:
        return
    # the features: computed here where an independent definition exists, checked against the tool's
    if emb == "vocab":
        vocab = bytes(ints["vocab.words"].astype(np.uint8)).split(b"\n")[:-1]
        feat = [N_SPECIAL + vocab.index(w) if w in vocab else 1 for w in types]
        mine = [("id", v) for v in feat]
    elif r.get("hash", "md5") == "md5":
        pairs = [twin().md5_features(twin().resolve_config(cfg), w) for w in types]
        feat = [p[0] if emb == "hash-emb" else p[1] for p in pairs]
        mine = [("bucket", p[0]) if emb == "hash-emb" else ("bits", p[1] + [0] * (-len(p[1]) % 8)) for p in pairs]
    else:
        feat = [hashed[w][1] if emb == "hash-emb" else hashed[w][1][:int(r.get("hash_bits", 128))] for w in types]
        mine = None
    if mine is not None:
        bad = [w for w, m in zip(types, mine) if hashed[w] != m]
        res.check(not bad, "%s: `mhe hash` differs from hashlib/hmac (or the vocabulary) for %s" % (name, bad[:5]))
    pert_path = os.path.join(workdir, "model_perturbed.safetensors")
    st_rewrite_data(model_path, pert_path, perturbed(params, cfg, rng))
    targets = torch.tensor(labels, dtype=torch.long)
    inputs = torch.tensor(rows, dtype=torch.long)
    for variant, mpath in (("init", model_path), ("perturbed", pert_path)):
        tag = "%s [%s]" % (name, variant)
        failed_before = res.failed
        gpath = os.path.join(workdir, "grads_%s.safetensors" % variant)
        if not run_tool(tool, ["grad", "--model", mpath, "--tokens", tok_path, "--out", gpath], res, tag + ": grad"):
            continue
        try:
            grads, _, _, _ = st_read(gpath)
            model_now, _, _, _ = st_read(mpath, {})
        except (ValueError, OSError) as e:
            res.check(False, "%s: cannot read the gradients: %s" % (tag, e))
            continue
        # the twin embeds each word type from its features: vocabulary rows, buckets or bits
        try:
            loss_ref, g_ref, l1 = reference_grads(torch, cfg, model_now, inputs, targets,
                                                  lengths if c.get("pad") else None, feats=feat)
        except ValueError as e:
            res.check(False, "%s: the twin cannot take the model: %s" % (tag, e))
            continue
        lc = grads.pop("loss", None)
        loss_err = rel_err(float(lc.reshape(-1)[0]), loss_ref, 1e-12) if lc is not None else float("nan")
        res.check(lc is not None and loss_err <= LOSS_RTOL, "%s: S+R loss rel err %.3g (torch %.8f)" % (tag, loss_err, loss_ref))
        check_names(grads, exp, res, tag, "gradient")
        worst, worst_name = compare_grads(tag, exp, grads, g_ref, l1, res, verbose)
        res.say("%s %s: loss %.6f rel err %.2g; worst grad %s err %.2g"
                % ("ok" if res.failed == failed_before else "BAD", tag, loss_ref, loss_err, worst_name, worst))


def probe_keys(tool, root):
    """Config keys the tool writes into its metadata (from a throw-away init of the
    first config), or an empty set if that fails (the real run reports it)."""
    d = os.path.join(root, "_probe")
    os.makedirs(d, exist_ok=True)
    cfg_path, out = os.path.join(d, "config.txt"), os.path.join(d, "model.safetensors")
    with open(cfg_path, "w") as f:
        for k in SPEC_KEYS:
            f.write("%s=%s\n" % (k, CONFIGS[0]["cfg"][k]))
    if not run_tool(tool, ["init", "--config", cfg_path, "--seed", "1", "--out", out],
                    Results(quiet=True), "probe"):
        return set()
    try:
        return set(st_read(out)[1])
    except (ValueError, OSError):
        return set()


def run_all(configs, tool, keep, seed, res, verbose):
    tmp = None
    root = keep
    if keep:
        os.makedirs(keep, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="mhe_crosscheck_")
        root = tmp
    try:
        known = probe_keys(tool, root) if any(c["extra"] for c in configs) else set()
        for c in configs:
            if "want" in c:
                check_invalid(c, tool, os.path.join(root, c["name"]), res)
                continue
            if c.get("words"):
                check_word_config(c, tool, os.path.join(root, c["name"]), seed + 500 + WORD_CONFIGS.index(c), res,
                                  verbose)
                continue
            check_config(c, tool, os.path.join(root, c["name"]), seed + CONFIGS.index(c), res,
                         verbose, known)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def selftest(configs, seed, verbose):
    """Runs the whole check against the Python stand-in, then checks that injected
    faults are caught. Counts: stand-in checks + one per fault."""
    tool = [sys.executable, SCRIPT, "--as-mhe"]
    res = Results()
    # the stand-in knows neither padding nor encoder-decoder models, nor thesis ch. 4's kinds
    configs = [c for c in configs if not c.get("pad") and c["cfg"].get("arch") != "encdec"
               and "encdec" not in c["name"] and not c.get("words")
               and "decon" not in c["name"] and "collab" not in c["name"]]
    print("selftest: the C tool is replaced by a Python float32 stand-in", flush=True)
    os.environ.pop("MHE_FAKE_BUG", None)
    run_all(configs, tool, None, seed, res, verbose)
    # (fault, the config it runs on: the first whose name contains this)
    faults = [(b, "") for b in ["fail", "nometa", "dropparam", "loss", "drop", "extra", "scale",
                                "shape", "perturb-only"]]
    faults += [("gqa-map", "gqa3"), ("sha-copies", "sha"), ("ek-noise", "mheadd"),
               ("accept-bad", "invalid-"), ("encoder-causal", "enc-pre-ln-gelu-bias-tied-mha"),
               ("encoder-causal", "enc-pre-ln-gelu-bias-tied-mheadd-refcore"),
               ("cls-grad", "ncls3"), ("accept-bad", "invalid-ncls3-decoder"),
               ("accept-bad", "invalid-mask_token-eq"), ("no-enc-keys", "enc-")]
    for bug, where in faults:
        pick = [c for c in CONFIGS + INVALID if where in c["name"]][:1]
        os.environ["MHE_FAKE_BUG"] = bug
        sub = Results(quiet=True)
        run_all(pick, tool, None, seed, sub, False)
        first = next((l for l in sub.lines if l.startswith("FAIL")), "(none)")
        res.check(sub.failed > 0, "selftest: injected fault '%s' was not detected" % bug)
        print("selftest: fault %-12s -> %d FAIL line(s), first: %s" % (bug, sub.failed, first[:160]))
    os.environ.pop("MHE_FAKE_BUG", None)
    return res


def skip(reason):
    return skip_script("torch_crosscheck", reason)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--as-mhe":
        return fake_mhe(sys.argv[2:])
    ap = argparse.ArgumentParser(description="Cross-check mhe's loss and gradients against PyTorch.")
    ap.add_argument("--keep", metavar="DIR", help="write (and keep) every file under DIR")
    ap.add_argument("--verbose", action="store_true", help="print every tensor's error")
    ap.add_argument("--only", metavar="NAME", action="append",
                    help="run only configs whose name contains NAME (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the configs and exit")
    ap.add_argument("--seed", type=int, default=1234, help="base seed (default 1234)")
    ap.add_argument("--selftest", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()

    configs = CONFIGS + INVALID + WORD_CONFIGS
    if a.only:
        configs = [c for c in configs if any(s in c["name"] for s in a.only)]
    if a.list:
        for c in configs:
            print("%-48s B=%d T=%d %s %s" % (c["name"], c["B"], c["T"],
                                              " ".join("%s=%s" % kv for kv in c["cfg"].items()),
                                              " ".join("%s=%s" % kv for kv in c["extra"].items())))
        return 0
    why = torch_missing()
    if why:
        return skip(why)
    import torch
    torch.set_num_threads(1)
    if not configs:
        print("FAIL no config matches --only")
        print("RESULT: 0 passed, 1 failed")
        return 1
    if a.selftest:
        return selftest(configs, a.seed, a.verbose).finish()

    why = mhe_missing()
    if why:
        return skip(why)
    res = Results()
    run_all(configs, [mhe_bin()], a.keep, a.seed, res, a.verbose)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
