#!/usr/bin/env python3
"""Microseconds per generated token of a GPT decode loop with a KV cache in PyTorch 2 (CPU,
float32): the yardstick for mhe's decoding benchmark, tools/bench/bench_decode.c, which runs this
script with the interpreter it picked and reads its JSON lines.

    python tools/bench/bench_decode_torch.py --kind mhe-mul --threads 1 --contexts 128,1024,2048
    python tools/bench/bench_decode_torch.py --kind gqa --kv_groups 2 --d_model 256 --max_len 512
    python tools/bench/bench_decode_torch.py --check M.safetensors --tokens 5,9,200,... --logits L.f32

Model, as mhe builds it by default: byte vocabulary, learned positions, pre-norm blocks with
LayerNorm (eps 1e-5), GELU (tanh approximation) MLP of width 4C, final LayerNorm, LM head
tied to the token embedding, a bias on every other Linear. Weights N(0, 0.02), biases 0,
norm gains 1 (timing does not depend on the values); --check loads mhe's instead.

The decode step, as a PyTorch user writes it: torch.inference_mode(), Q/K/V in one Linear,
a cache [layers, 1, kv_heads, max_len, d_h] for K and one for V, allocated once and written
in place at the token's position, then F.scaled_dot_product_attention of the token's queries
against the cached rows 0..pos (no mask: one query position sees every cached key). The n
query heads are laid out as [1, kv_heads, n / kv_heads, d_h], so each K/V head meets the
queries of its group in one product and nothing is copied or expanded:
  mha      n K/V heads, one query each;
  gqa      kv_groups K/V heads, n / kv_groups queries each (query head h uses group
           h // (n / kv_groups), as mhe);
  mqa      one K/V head, all n queries;
  mhe-mul  one seed head of Q, K and V (MHE paper eq. 6: head i uses Q*(1+e_i^Q), K*(1+e_i^K),
           V*(1+e_i^V)); the cache holds the seed K and V, which is MHE's saving. The score
           (q*(1+e_i^Q)).(k*(1+e_i^K)) = (q*w_i).k with w_i = (1+e_i^Q)(1+e_i^K), so the n
           queries q*w_i meet the one cached K; softmax(.) (V*(1+e_i^V)) = (softmax(.) V)*(1+e_i^V),
           so the value map scales each head's output once. mhe's decode (mhe__attn_one) uses
           the same query map w_i and applies 1+e_i^V to each value row it reads.
  mhe-add  head i uses Q+e_i^Q, K+e_i^K, V+e_i^V; (q+e_i^Q).e_i^K is the same for every key, so
           softmax drops it: the n queries q+e_i^Q meet the one cached K and e_i^V is added to
           each head's output once (mhe's decode adds e_i^K and e_i^V to each row it reads).

Timing, identical in bench_decode.c: the context L of a measurement is the number of keys the
last timed token attends to. The first L - k tokens (k = min(--window, L)) are prefilled (not
timed; here one batched causal forward, in mhe token by token), then the k tokens at positions
L-k .. L-1 are decoded one by one, each step computing the next-token logits; the time of the
k steps over k is one repeat. One untimed repeat first, then --repeats timed ones, each
rewinding to position L-k (the rows it overwrites get the same values); the median is the
result. Tokens are random bytes (seed 0) fed in order, no sampling. --cpu-time times the
process's CPU time instead of the wall clock, as bench_decode --cpu-time does on its side.

Threads: OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS are set to --threads
before torch is imported (its OpenMP and BLAS pools read them when they load), and
torch.set_num_threads(--threads) after.

Output: a header (torch version, BLAS, threads), then one line per context
    JSON {"kind":..., "threads":..., "context":..., "us_per_token":..., "kv_bytes":..., ...}
--check: loads the mhe checkpoint with tools/python/mhe_torch.py's load_checkpoint, prefills all
but the last --steps tokens of --tokens, decodes those, and compares each step's logits with
the float32 rows of --logits (mhe_decode_step's, written by bench_decode --check) and with the
PyTorch twin's full forward; prints JSON {"check": ..., "ok": ...}, exit status 1 on failure.
Needs torch >= 2 (scaled_dot_product_attention) and, for --check, numpy.
"""
import argparse
import os
import re
import statistics
import sys
import time

KINDS = ("mha", "mqa", "gqa", "mhe-mul", "mhe-add")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Time a GPT decode loop with a KV cache in PyTorch 2.")
    ap.add_argument("--kind", choices=KINDS, default="mha")
    ap.add_argument("--d_model", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--max_len", type=int, default=2048, help="positions and KV-cache capacity")
    ap.add_argument("--kv_groups", type=int, default=2, help="gqa's K/V heads (mhe's default 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="128,1024,max", help="comma-separated; 'max' is --max_len")
    ap.add_argument("--window", type=int, default=32, help="tokens timed per repeat (k)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats (median)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU time, not the wall clock (one-thread runs on a busy machine)")
    ap.add_argument("--check", metavar="CKPT", help="compare with mhe's logits on this checkpoint")
    ap.add_argument("--tokens", help="--check: the comma-separated prefix")
    ap.add_argument("--logits", help="--check: float32 file, [steps, vocab] of mhe's logits")
    ap.add_argument("--steps", type=int, default=4, help="--check: decoded (not prefilled) tokens")
    ap.add_argument("--tol", type=float, default=1e-4, help="--check: max abs logit difference")
    a = ap.parse_args(argv)
    if a.threads < 1 or a.window < 1 or a.repeats < 1:
        ap.error("--threads, --window and --repeats must be >= 1")
    if a.d_model % a.heads:
        ap.error("--d_model must be a multiple of --heads")
    if a.kind == "gqa" and (a.kv_groups < 1 or a.heads % a.kv_groups):
        ap.error("--heads must be a multiple of --kv_groups")
    a.context_list = []
    for c in a.contexts.split(","):
        L = a.max_len if c.strip() == "max" else int(c)
        if not 1 <= L <= a.max_len:
            ap.error("context %d is outside [1, --max_len]" % L)
        a.context_list.append(L)
    if a.check and (not a.tokens or not a.logits):
        ap.error("--check needs --tokens and --logits")
    return a


def set_thread_env(threads):
    """before torch is imported: its OpenMP and BLAS pools read these when they load"""
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[k] = str(threads)


class DecodeModel:
    """The GPT's weights, its KV cache and two passes: prefill (a batched causal forward that
    fills the cache) and step (one token through the cache). Weights are plain tensors; the
    per-layer tensors are in self.layers, a list of dicts."""

    def __init__(self, torch, kind, d_model, heads, layers, max_len, kv_groups=2, vocab=256, eps=1e-5):
        self.torch, self.F = torch, torch.nn.functional
        self.kind, self.C, self.n, self.L, self.T, self.V, self.eps = kind, d_model, heads, layers, max_len, vocab, eps
        self.dh = d_model // heads
        self.kvh = {"mha": heads, "gqa": kv_groups}.get(kind, 1)     # K/V heads cached
        self.q_w = self.dh if kind.startswith("mhe") else d_model      # query width projected
        self.kv_w = self.kvh * self.dh
        self.layers = []
        shape = (layers, 1, self.kvh, max_len, self.dh)
        self.k_cache = torch.zeros(shape)
        self.v_cache = torch.zeros(shape)

    # ---- weights
    @classmethod
    def random(cls, torch, kind, d_model, heads, layers, max_len, kv_groups=2, seed=0):
        """N(0, 0.02) weights and head embeddings, zero biases, unit norm gains"""
        m = cls(torch, kind, d_model, heads, layers, max_len, kv_groups)
        g = torch.Generator().manual_seed(seed)
        C = m.C

        def normal(*shape):
            return torch.randn(*shape, generator=g) * 0.02

        m.tok_emb, m.pos_emb = normal(m.V, C), normal(max_len, C)
        m.lnf_w, m.lnf_b = torch.ones(C), torch.zeros(C)
        for _ in range(layers):
            w = dict(ln1_w=torch.ones(C), ln1_b=torch.zeros(C), ln2_w=torch.ones(C), ln2_b=torch.zeros(C),
                     qkv_w=normal(m.q_w + 2 * m.kv_w, C), qkv_b=torch.zeros(m.q_w + 2 * m.kv_w),
                     wo_w=normal(C, C), wo_b=torch.zeros(C), fc1_w=normal(4 * C, C), fc1_b=torch.zeros(4 * C),
                     fc2_w=normal(C, 4 * C), fc2_b=torch.zeros(C))
            if kind.startswith("mhe"):
                w["eq"], w["ek"], w["ev"] = normal(heads, m.dh), normal(heads, m.dh), normal(heads, m.dh)
            m.layers.append(m._head_maps(w))
        return m

    @classmethod
    def from_twin(cls, torch, twin):
        """the weights of tools/python/mhe_torch.py's MheModel (an mhe checkpoint), by mhe's tensor names"""
        r = twin.r
        kinds = set(r["attn"])
        if len(kinds) != 1 or r["arch"] != "decoder" or r["norm"] != "layernorm" or r["post_norm"] \
                or r["activation"] != "gelu" or r["bias"] != 1 or not r["tie_embeddings"] or r["admin"] \
                or r["embedding"] != "vocab" or r["d_ff"] != 4 * r["d_model"] \
                or r["d_head"] * r["n_heads"] != r["d_model"]:
            raise ValueError("the decode loop takes a pre-norm LayerNorm GELU decoder with biases, tied head, "
                             "d_ff 4C, d_head C / heads and one attention kind")
        kind = kinds.pop()
        if kind not in KINDS:
            raise ValueError("attention kind %s has no PyTorch decode loop here" % kind)
        m = cls(torch, kind, r["d_model"], r["n_heads"], r["n_layers"], r["max_seq_len"], r["kv_groups"],
                r["vocab_size"], r["norm_eps"])
        p = lambda name: twin.param(name).detach().clone()
        m.tok_emb, m.pos_emb = p("tok_emb.weight"), p("pos_emb.weight")
        m.lnf_w, m.lnf_b = p("ln_f.weight"), p("ln_f.bias")
        for l in range(m.L):
            a = "layers.%d." % l
            w = dict(ln1_w=p(a + "norm1.weight"), ln1_b=p(a + "norm1.bias"),
                     ln2_w=p(a + "norm2.weight"), ln2_b=p(a + "norm2.bias"),
                     qkv_w=torch.cat([p(a + "attn.w%s.weight" % x) for x in "qkv"]),
                     qkv_b=torch.cat([p(a + "attn.w%s.bias" % x) for x in "qkv"]),
                     wo_w=p(a + "attn.wo.weight"), wo_b=p(a + "attn.wo.bias"),
                     fc1_w=p(a + "mlp.fc1.weight"), fc1_b=p(a + "mlp.fc1.bias"),
                     fc2_w=p(a + "mlp.fc2.weight"), fc2_b=p(a + "mlp.fc2.bias"))
            if kind.startswith("mhe"):
                w["eq"], w["ek"], w["ev"] = p(a + "attn.eq"), p(a + "attn.ek"), p(a + "attn.ev")
            m.layers.append(m._head_maps(w))
        return m

    def _head_maps(self, w):
        """MHE's per-head maps, computed once: the query map and the output map, [n, d_h]"""
        if self.kind == "mhe-mul":
            w["q_map"], w["o_map"] = (1 + w["eq"]) * (1 + w["ek"]), 1 + w["ev"]
        elif self.kind == "mhe-add":       # e^K drops out of the softmax (see the docstring)
            w["q_map"], w["o_map"] = w["eq"], w["ev"]
        return w

    def kv_bytes(self):
        return sum(t.numel() * t.element_size() for t in (self.k_cache, self.v_cache))

    # ---- the passes
    def _mlp(self, x, w):
        F = self.F
        h = F.layer_norm(x, (self.C,), w["ln2_w"], w["ln2_b"], self.eps)
        return x + F.linear(F.gelu(F.linear(h, w["fc1_w"], w["fc1_b"]), approximate="tanh"), w["fc2_w"], w["fc2_b"])

    def _logits(self, x):
        F = self.F
        return F.linear(F.layer_norm(x, (self.C,), self.lnf_w, self.lnf_b, self.eps), self.tok_emb)

    def prefill(self, tokens):
        """a batched causal forward over tokens at positions 0.. that writes their K and V into
        the cache; returns the logits [T, V]"""
        torch, F = self.torch, self.F
        T, n, dh, kvh = len(tokens), self.n, self.dh, self.kvh
        x = (self.tok_emb[torch.as_tensor(tokens)] + self.pos_emb[:T]).unsqueeze(0)   # [1, T, C]
        for l, w in enumerate(self.layers):
            h = F.layer_norm(x, (self.C,), w["ln1_w"], w["ln1_b"], self.eps)
            q, k, v = F.linear(h, w["qkv_w"], w["qkv_b"]).split([self.q_w, self.kv_w, self.kv_w], dim=-1)
            self.k_cache[l, :, :, :T] = k.view(1, T, kvh, dh).transpose(1, 2)
            self.v_cache[l, :, :, :T] = v.view(1, T, kvh, dh).transpose(1, 2)
            K = self.k_cache[l, :, :, :T].repeat_interleave(n // kvh, dim=1)   # [1, n, T, dh]: untimed
            V = self.v_cache[l, :, :, :T].repeat_interleave(n // kvh, dim=1)
            if self.kind == "mhe-mul":
                q = q.view(1, 1, T, dh) * w["q_map"].view(1, n, 1, dh)
            elif self.kind == "mhe-add":
                q = q.view(1, 1, T, dh) + w["q_map"].view(1, n, 1, dh)
            else:
                q = q.view(1, T, n, dh).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, K, V, is_causal=True)        # [1, n, T, dh]
            if self.kind == "mhe-mul":
                o = o * w["o_map"].view(1, n, 1, dh)
            elif self.kind == "mhe-add":
                o = o + w["o_map"].view(1, n, 1, dh)
            x = x + F.linear(o.transpose(1, 2).reshape(1, T, self.C), w["wo_w"], w["wo_b"])
            x = self._mlp(x, w)
        return self._logits(x)[0]

    def step(self, token, pos):
        """one token at position pos through the cache (rows 0..pos-1 filled); its logits [V]"""
        F = self.F
        n, dh, kvh, group = self.n, self.dh, self.kvh, self.n // self.kvh
        x = (self.tok_emb[token] + self.pos_emb[pos]).view(1, 1, self.C)
        for l, w in enumerate(self.layers):
            h = F.layer_norm(x, (self.C,), w["ln1_w"], w["ln1_b"], self.eps)
            q, k, v = F.linear(h, w["qkv_w"], w["qkv_b"]).split([self.q_w, self.kv_w, self.kv_w], dim=-1)
            self.k_cache[l, 0, :, pos] = k.view(kvh, dh)
            self.v_cache[l, 0, :, pos] = v.view(kvh, dh)
            K, V = self.k_cache[l, :, :, :pos + 1], self.v_cache[l, :, :, :pos + 1]   # [1, kvh, pos+1, dh] views
            if self.kind == "mhe-mul":
                q = q.view(1, 1, 1, dh) * w["q_map"].view(1, 1, n, dh)
            elif self.kind == "mhe-add":
                q = q.view(1, 1, 1, dh) + w["q_map"].view(1, 1, n, dh)
            else:
                q = q.view(1, kvh, group, dh)          # the queries of K/V head g: rows g*group ..
            o = F.scaled_dot_product_attention(q, K, V)                             # [1, kvh, group, dh]
            if self.kind == "mhe-mul":
                o = o * w["o_map"].view(1, 1, n, dh)
            elif self.kind == "mhe-add":
                o = o + w["o_map"].view(1, 1, n, dh)
            x = x + F.linear(o.reshape(1, 1, self.C), w["wo_w"], w["wo_b"])
            x = self._mlp(x, w)
        return self._logits(x).view(-1)


def blas_name(torch):
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "unknown"


def time_contexts(torch, a):
    """per context: (median, min) microseconds per token over the repeats"""
    model = DecodeModel.random(torch, a.kind, a.d_model, a.heads, a.layers, a.max_len, a.kv_groups)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.V, (a.max_len,), generator=g).tolist()
    clock = time.process_time if a.cpu_time else time.perf_counter
    results = []
    for L in a.context_list:
        k = min(a.window, L)
        start = L - k
        if start:
            model.prefill(tokens[:start])
        per_token = []
        for rep in range(a.repeats + 1):          # repeat 0 warms up
            t0 = clock()
            for pos in range(start, L):
                model.step(tokens[pos], pos)
            dt = (clock() - t0) / k * 1e6
            if rep:
                per_token.append(dt)
        results.append((L, k, statistics.median(per_token), min(per_token)))
    return model, results


def check(torch, a):
    """mhe's logits (bench_decode --check) against this loop's and the twin's on mhe's weights"""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import mhe_torch
    twin, _, _ = mhe_torch.load_checkpoint(a.check)
    twin.eval()
    model = DecodeModel.from_twin(torch, twin)
    tokens = [int(t) for t in a.tokens.split(",")]
    steps = min(a.steps, len(tokens))
    start = len(tokens) - steps
    ref = torch.from_numpy(np.fromfile(a.logits, dtype="<f4").reshape(steps, model.V).copy())
    if start:
        model.prefill(tokens[:start])
    ours = torch.stack([model.step(tokens[p], p) for p in range(start, len(tokens))])
    full = twin.logits(torch.tensor([tokens]))[0, start:].detach()
    d_ours = float((ours - ref).abs().max())
    d_twin = float((full - ref).abs().max())
    ok = d_ours <= a.tol
    out = {"check": model.kind, "tokens": len(tokens), "decoded": steps, "max_abs_diff": d_ours,
           "twin_max_abs_diff": d_twin, "max_abs_logit": float(ref.abs().max()), "tol": a.tol, "ok": ok}
    print("check %s: decode loop vs mhe_decode_step max |diff| %.3g, twin forward vs mhe %.3g (tol %g): %s"
          % (model.kind, d_ours, d_twin, a.tol, "ok" if ok else "FAILED"))
    print("JSON " + json_line(out), flush=True)
    return 0 if ok else 1


def json_line(d):
    import json
    return json.dumps(d, separators=(", ", ": "))


def main(argv=None):
    a = parse_args(argv)
    set_thread_env(a.threads)
    import torch
    if int(torch.__version__.split(".")[0]) < 2:
        sys.exit("bench_decode_torch: needs torch >= 2 (scaled_dot_product_attention); %s has %s"
                 % (sys.executable, torch.__version__))
    torch.set_num_threads(a.threads)
    print("torch %s, BLAS %s, %s, threads %d" % (torch.__version__, blas_name(torch), sys.executable,
                                                torch.get_num_threads()), flush=True)
    with torch.inference_mode():
        if a.check:
            return check(torch, a)
        model, results = time_contexts(torch, a)
    for L, k, med, mn in results:
        out = {"kind": a.kind, "d_model": a.d_model, "heads": a.heads, "layers": a.layers, "max_len": a.max_len,
               "threads": a.threads, "context": L, "window": k, "repeats": a.repeats,
               "us_per_token": round(med, 1), "us_min": round(mn, 1), "kv_bytes": model.kv_bytes(),
               "kv_bytes_per_token": model.kv_bytes() // a.max_len, "torch": torch.__version__,
               "blas": blas_name(torch)}
        print("JSON " + json_line(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
