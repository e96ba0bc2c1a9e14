#!/usr/bin/env python3
"""The generated tables of the documentation, made from mhe.h: the kind table
in README.md (one row per kind, read from mhe__kinds[] in section 5), the
kind facts in docs/kinds.md (the same rows' memory, decoding and q8 columns,
and whether mhe_cuda.cuh's mhe__cu_kind_ok runs the kind) and the
reading guide in docs/kinds.md (every paper equation the library computes,
the function that computes it and its line range, and for each fast path the
identity that makes it equal to the equation and the test that proves it).

    python3 tools/scripts/reading_guide.py            print both (Markdown)
    python3 tools/scripts/reading_guide.py --write    rewrite them in their files, between their markers
                                              (--update is the same; `make docs` runs it)
    python3 tools/scripts/reading_guide.py --check    exit 1 when a file's copy is stale

tests/test_guide.py runs --check, so a change to mhe.h that moves code or
changes a kind needs `make docs` (the line ranges are the guide's point)."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (file under the repository, start marker, end marker, maker): every generated block
GUIDE = ("docs/kinds.md", "<!-- reading-guide:start -->", "<!-- reading-guide:end -->")
KINDS = ("README.md", "<!-- kinds-table:start -->", "<!-- kinds-table:end -->")
FACTS = ("docs/kinds.md", "<!-- kind-facts:start -->", "<!-- kind-facts:end -->")

# (where, what it computes, functions) - the equations, in the papers' order
EQUATIONS = [
    ("Vaswani et al. 2017, eq. 1", "scaled dot-product attention, literally (probabilities kept)",
     ["mhe_attn_ref_fwd", "mhe_attn_ref_bwd"]),
    ("MHE paper eq. 1-2", "multi-head attention: per-head Q, K, V in one GEMM, heads concatenated into W^O",
     ["mhe__attn_project", "mhe__qkv_branch_fwd"]),
    ("MHE paper eq. 5, psi = add / mul", "per-head Q_i, K_i, V_i from one seed head and head embeddings (reference path)",
     ["mhe__mhe_expand", "mhe__mhe_expand_bwd"]),
    ("MHE paper eq. 6", "the n heads of MHE through W^O", ["mhe__mhe_core_fwd", "mhe__mhe_core_bwd"]),
    ("Cordonnier et al. 2020, eq. 13", "collaborative heads: Q~ * m_i against K~, content bias v_i . x_k (reference)",
     ["mhe__collab_expand", "mhe__collab_dims", "mhe__collab_vbias"]),
    ("Cordonnier et al. 2020, eq. 12 and sec. 3.3", "reparametrisation of mha by a CP decomposition",
     ["mhe_collab_from_mha", "mhe_cp_als", "mhe_model_reparam_collab"]),
    ("Vaswani et al. 2017; Xiong et al. 2020", "pre-norm and post-norm residual sublayers (training and decoding)",
     ["mhe__sub_enter", "mhe__sub_leave", "mhe__sub_fwd", "mhe__sub_bwd"]),
    ("Liu et al. 2020 (Admin), eq. 5 and profiling", "residual scales omega, set from the output variance",
     ["mhe__sub_leave", "mhe__residual", "mhe_model_admin_init"]),
    ("thesis eq. 4.4-4.5", "mlp kind: down(SiLU(gate x) * up x)", ["mhe__gated_fwd", "mhe__gated_bwd"]),
    ("thesis eq. 4.6", "taylor: exp(s) ~ 1 + s + s^2/2 (reference)", ["mhe__taylor_ref_fwd", "mhe__taylor_ref_bwd"]),
    ("thesis eq. 4.7-4.8", "nonapprox: softmax over time of SiLU(Q) * K / sqrt(d_h) (reference)",
     ["mhe__nonapprox_ref_fwd", "mhe__nonapprox_ref_bwd"]),
    ("thesis eq. 4.9-4.12", "rndemb-qk, fixedseq-qk: Q, K from the fixed stream through the same blocks",
     ["mhe__fixed_fwd", "mhe__fixed_bwd", "mhe__decon_qkv_fwd"]),
    ("thesis eq. 4.13", "staticemb-qk: Q, K from the static embeddings", ["mhe__static_in", "mhe__decon_qkv_fwd"]),
    ("thesis sec. 4.15-4.16, eq. 4.18", "decoding: recurrent states and precomputed maps",
     ["mhe__decon_decode", "mhe__decode_state_reset", "mhe__decode_maps"]),
    ("Lee-Thorp et al. 2022 (FNet)", "Re(F_L X F_C) by FFT; linear mixing W_seq X W_hidden^T",
     ["mhe__fnet_apply", "mhe_fft", "mhe__linear_mix_fwd", "mhe__linear_mix_bwd"]),
    ("HashFormers, thesis eq. 2.1-2.3", "hash embeddings: Pool, Add, Proj (Pearson correlation)",
     ["mhe_hash_pool_fwd", "mhe_hash_add_fwd", "mhe_hash_proj_fwd"]),
    ("RFC 1321, RFC 2104", "MD5 and HMAC-MD5 of words", ["mhe_md5"]),
    ("Ba et al. 2016; Zhang and Sennrich 2019", "LayerNorm, RMSNorm", ["mhe_layernorm_fwd", "mhe_rmsnorm_fwd"]),
    ("Loshchilov and Hutter 2019", "AdamW (PyTorch's ordering), clipping, schedules",
     ["mhe_adamw_update", "mhe_clip_grad_norm", "mhe_lr_at"]),
]

# (fast path, functions, the identity, the test that proves it equal to the reference)
FAST_PATHS = [
    ("fused attention", ["mhe_attn_fused_fwd", "mhe_attn_fused_bwd", "mhe__online_row"],
     "online softmax: exp(s - m) = exp(s - m') exp(m' - m), so a row's sum and output rescale when the running max "
     "moves; the backward recomputes P = exp(S - lse) and uses D = rowsum(dO * O)",
     "test_attention (fused = reference, fwd + bwd, dropout, shared K/V); test_model fused_equals_reference"),
    ("MHE-MUL, heads stacked", ["mhe__mul_maps", "mhe__attn_mul_fwd", "mhe__attn_mul_bwd"],
     "(Q*(1+e_i^Q)) . (K*(1+e_i^K)) = (Q*w_i) . K with w_i = (1+e_i^Q)(1+e_i^K), and "
     "A_i (V*(1+e_i^V)) = (A_i V)*(1+e_i^V): one seed K, V for all heads, n heads in one GEMM",
     "test_model fused_equals_reference (attn=mhe-mul, with dropout); torch_crosscheck.py both paths"),
    ("MHE-ADD, shared scores", ["mhe__attn_add_fwd", "mhe__attn_add_bwd"],
     "(q+e_i^Q) . (k_j+e_i^K) = q.k_j + e_i^Q.k_j + (terms constant in j, which the softmax cancels), so "
     "S_i = QK^T + 1 (K e_i^Q)^T; A_i (V + 1 e_i^V^T) = A_i V + (row sums of A_i) e_i^V",
     "test_model fused_equals_reference (attn=mhe-add; n_heads=65 past the shared-score limit); torch_crosscheck.py"),
    ("collab, heads stacked", ["mhe__collab_dims", "mhe__attn_mul_fwd"],
     "(x W~_Q * m_i) . (x_k W~_K) = (Q~ * m_i) . K~: MHE-MUL's stacked core with the mixing rows as query maps, "
     "the content bias as a per-head key bias inside the logits, one value head per query head",
     "test_model fused_equals_reference (attn=collab, and the non-stacking fallback); torch_crosscheck.py"),
    ("taylor, linear time", ["mhe__taylor_lin_fwd", "mhe__taylor_lin_bwd"],
     "1 + s + s^2/2 = phi(q) . phi(k) with phi(x) = [1, a x, a^2 x_i^2 / sqrt 2, a^2 x_i x_j (i < j)], a = "
     "scale^(1/2) (`mhe__taylor_phi`): the state S = sum_j phi(k_j) v_j^T moves across chunks by GEMMs, a chunk's own "
     "keys are weighed directly",
     "test_decon fused_equals_reference and long_cores (several chunks, causal, padded)"),
    ("nonapprox, linear time", ["mhe__nonapprox_lin_fwd", "mhe__nonapprox_lin_bwd"],
     "one score per position: a running max, sum and numerator over time (eq. 4.18)",
     "test_decon fused_equals_reference, nonapprox_recurrence"),
    ("decoding, one query", ["mhe__attn_one_pass", "mhe__attn_one", "mhe__attn_branch_decode"],
     "the per-head maps leave the key loop (MHE-ADD's key map is a constant of the scores, a value map applies "
     "to the output); up to 8 query heads of a K/V group meet each tile of 64 cached rows together, one "
     "online-softmax step per tile (`mhe__one_scores_shared`, `mhe__one_pv_shared`: 8-lane kernels); a long lone "
     "sequence splits its keys in halves merged in a fixed order; cached K, V are the rows training computes",
     "test_decode (every kind, decoder and encdec, pre/post-norm, Admin profiled); test_attention one_vs_ref "
     "(maps, collab, spans, splits, 1 = 2 threads); test_decon decode_equals_forward"),
]

FAMILY = {"MHE__FAM_SOFTMAX": "softmax", "MHE__FAM_MHE": "MHE", "MHE__FAM_COLLAB": "collab",
          "MHE__FAM_DECON_QKV": "ch. 4 (Q, K, V)", "MHE__FAM_GATED": "ch. 4 (no mixing)", "MHE__FAM_MIXING": "FNet"}
CACHE = {"MHE__CACHE_KV": "K/V rows", "MHE__CACHE_TAYLOR": "recurrent state", "MHE__CACHE_SCAN": "recurrent state",
         "MHE__CACHE_MAPS": "V rows + maps", "MHE__CACHE_NONE": "none"}
# what decoding keeps per layer, as mhe__decode_state_floats and the cache size it
STATE = {"MHE__CACHE_KV": "K and V rows per token (`mhe_attn_cache_bytes`)",
         "MHE__CACHE_TAYLOR": "per head S [F, d_h] and z [F], F = 1 + d_h + d_h(d_h+1)/2: n(F d_h + F) floats, fixed",
         "MHE__CACHE_SCAN": "per head a running max, sum and numerator [d_h]: n(d_h + 2) floats, fixed",
         "MHE__CACHE_MAPS": "V rows per token; the fixed stream's maps n L(L+1)/2 floats, shared by all sequences",
         "MHE__CACHE_NONE": "nothing (mlp: no token mixing; fnet, linear: encoders only)"}
# the kind's own activation buffer (mhe__ext_floats), beside Q|K|V, the core output and its statistics
EXT = {"MHE__EXT_NONE": "none", "MHE__EXT_TAYLOR": "the fused core's block states (fused_attention=1)",
       "MHE__EXT_DFT": "the DFT's work rows, 2 x forward", "MHE__EXT_MIX": "X W_hiddenᵀ [B T C]",
       "MHE__EXT_STATIC": "N(e) [rows, C + 2] (self; + the source's rows as cross)"}


def definitions(text):
    """name -> (first line, last line) of each function defined in the implementation half"""
    lines = text.split("\n")
    impl = next(i for i, l in enumerate(lines) if l.startswith("#ifdef MHE_IMPLEMENTATION"))
    out = {}
    i = impl
    head = re.compile(r"^(?:static|MHEDEF)\b[^;{=]*?\b(\w+)\(")
    while i < len(lines):
        m = head.match(lines[i])
        if m:
            j, depth, seen = i, 0, False
            while j < len(lines):
                # braces inside character and string literals ('{' in the JSON reader) do not count
                s = re.sub(r'"(?:\\.|[^"\\])*"', '""', re.sub(r"'(?:\\.|[^'\\])'", "''", lines[j]))
                if not seen and ";" in s and "{" not in s and depth == 0 and s.rstrip().endswith(";"):
                    break   # a prototype
                depth += s.count("{") - s.count("}")
                seen = seen or "{" in s
                if seen and depth == 0:
                    out.setdefault(m.group(1), (i + 1, j + 1))
                    break
                j += 1
            i = j + 1 if m.group(1) in out and out[m.group(1)][0] == i + 1 else i + 1
        else:
            i += 1
    return out


def where(defs, names):
    parts = []
    for n in names:
        if n not in defs:
            raise SystemExit("reading_guide: %s is not defined in mhe.h" % n)
        a, b = defs[n]
        parts.append("`%s` %d-%d" % (n, a, b))
    return "<br>".join(parts)


def table_rows(text):
    body = text[text.index("static const mhe__kind_info mhe__kinds[MHE_ATTN_KIND_COUNT] = {"):]
    body = body[:body.index("\n};")]
    # any field may start a new line in mhe.h: whitespace after every comma
    rows = re.findall(r'\{ "([^"]+)",\s*"([^"]+)",\s*(MHE__FAM_\w+),\s*(MHE__CACHE_\w+),\s*(\d),\s*(\d),\s*'
                      r'(NULL|"[^"]*"),\s*(\d),\s*"([^"]*)",\s*(MHE__EXT_\w+),\s*"([^"]*)",\s*MHE__QK_\w+,'
                      r'[^}]*\}', body, re.S)
    if len(rows) != body.count('{ "'):
        sys.exit("reading_guide.py: read %d of the %d rows of mhe__kinds[]" % (len(rows), body.count('{ "')))
    return rows


def kind_rows(text):
    out = []
    for name, src, fam, cache, causal, encdec, nocross, fast, tensors, ext, q8 in table_rows(text):
        rules = []
        if causal == "0":
            rules.append("encoder only")
        if encdec == "0":
            rules.append("not in encdec")
        rules.append("self only: " + nocross.strip('"') if nocross != "NULL" else "self and cross")
        out.append("| `%s` | %s | %s | %s | %s | %s | `%s` |" % (
            name, src, FAMILY[fam], CACHE[cache], "; ".join(rules), "yes" if fast == "1" else "no", tensors))
    return out


def guide(text):
    defs = definitions(text)
    out = [GUIDE[1], "",
           "Line numbers are mhe.h's as of this page (`make docs` renews them;",
           "`tests/test_guide.py` fails when they are stale).", "",
           "**Equations → code.**", "",
           "| source | what | function, lines |", "|---|---|---|"]
    for src, what, names in EQUATIONS:
        out.append("| %s | %s | %s |" % (src, what, where(defs, names)))
    out += ["", "**Fast paths**: each is the equation rearranged; the identity, and the test that compares it with "
            "the reference path.", "",
            "| fast path | functions, lines | identity | proved by |", "|---|---|---|---|"]
    for name, names, identity, test in FAST_PATHS:
        out.append("| %s | %s | %s | %s |" % (name, where(defs, names), identity, test))
    return "\n".join(out + ["", GUIDE[2]])


def kinds_table(text):
    out = [KINDS[1], "",
           "| kind | source | family | decoding cache | rules | fast path | tensors under `layers.N.attn.` |",
           "|---|---|---|---|---|---|---|"] + kind_rows(text) + ["", KINDS[2]]
    return "\n".join(out)


def device_kinds(cuda):
    """the kinds the CUDA companion runs: the rows of its kind table mhe__cu_kinds[]"""
    body = cuda[cuda.index("mhe__cu_kinds[MHE_ATTN_KIND_COUNT] = {"):]
    body = body[:body.index("\n};")]
    return set(re.findall(r"\{(MHE_ATTN_\w+),", body))


def facts_table(text, cuda):
    on_device = device_kinds(cuda)
    out = [FACTS[1], "",
           "| kind | what decoding keeps per layer | its own activation buffer (`mhe__ext_floats`) | int8 in a q8 checkpoint "
           "| on the GPU (`mhe_cuda.cuh`) |",
           "|---|---|---|---|---|"]
    for name, src, fam, cache, causal, encdec, nocross, fast, tensors, ext, q8 in table_rows(text):
        enum = "MHE_ATTN_" + name.upper().replace("-", "_")
        out.append("| `%s` | %s | %s | %s | %s |" % (name, STATE[cache], EXT[ext], "`%s`" % q8 if q8 != "(none)" else "none",
                                                 "train, evaluate" + (", decode" if causal == "1" else "")
                                                 if enum in on_device else "no"))
    return "\n".join(out + ["", FACTS[2]])


def replace_block(where, block):
    """(path, old text, new text) of a file with its generated block replaced"""
    path = os.path.join(ROOT, where[0])
    text = open(path, encoding="utf-8").read()
    if text.count(where[1]) != 1 or text.count(where[2]) != 1:
        raise SystemExit("reading_guide: %s needs one %s and one %s marker" % (where[0], where[1], where[2]))
    a, b = text.index(where[1]), text.index(where[2]) + len(where[2])
    return path, text, text[:a] + block + text[b:]


def main():
    header = open(os.path.join(ROOT, "mhe.h"), encoding="utf-8").read()
    cuda = open(os.path.join(ROOT, "mhe_cuda.cuh"), encoding="utf-8").read()
    blocks = [(KINDS, kinds_table(header)), (FACTS, facts_table(header, cuda)), (GUIDE, guide(header))]
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--write", "--update", "--check"):
        print(__doc__)
        return 2
    if not mode:
        print("\n\n".join(b for _, b in blocks))
        return 0
    stale = 0
    for where, block in blocks:
        path, old, new = replace_block(where, block)
        if new == old:
            continue
        if mode == "--check":
            print("%s: its generated block (%s) is stale: run make docs" % (where[0], where[1]))
            stale = 1
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print("reading_guide: rewrote %s" % where[0])
    return stale


if __name__ == "__main__":
    sys.exit(main())
