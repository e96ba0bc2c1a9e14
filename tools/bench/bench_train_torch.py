#!/usr/bin/env python3
"""Times one training step of mhe's GPT in PyTorch (CPU, float32): the yardstick
for the C library's own step-time benchmark (tools/bench/bench_train.c). Runs under
any Python whose torch is >= 2 (the peer users run: PyPI's wheel, MKL sgemm,
oneDNN, fused scaled_dot_product_attention) or Debian's torch 1.13:

    python3 -m venv .venv && .venv/bin/pip install torch numpy
    .venv/bin/python tools/bench/bench_train_torch.py --config C1 --threads 1
    .venv/bin/python tools/bench/bench_train_torch.py --config C2 --threads 2 --steps 10 --warmup 3
    /usr/bin/python3 tools/bench/bench_train_torch.py --config C1 --attn mhe-mul --seq 512 --batch 2

Model: byte vocabulary, learned positions, pre-norm blocks with LayerNorm,
multi-head attention (Q, K, V projections fused into one Linear, which is the
same function as three), GELU (tanh approximation) MLP of width 4C, final
LayerNorm, LM head tied to the token embedding, biases on every other Linear,
weights N(0, 0.02). --attn picks the kind as a PyTorch user would write it:
mqa projects one K and V head and expands it over the query heads; mhe-add and
mhe-mul project one seed head of Q, K, V and broadcast it against the [n, d_h]
head embeddings (Q + e^Q or Q * (1 + e^Q), ...), which materialises every
head's Q, K and V as MHA does. The attention core is
torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
where torch has it (>= 2.0: a fused kernel that, like mhe's, skips the
masked half of the score tiles); torch 1.13 has none, so there it is written
out (q k^T * scale, causal mask with masked_fill(-inf), softmax, @ v).

One step = zero_grad(set_to_none=True) + forward + cross-entropy + backward +
AdamW(lr 3e-4, betas (0.9, 0.95), weight_decay 0.1 on every parameter). The
optimizer is torch's default implementation, the one a user gets without
options: for CPU parameters both 1.13 and 2.x resolve foreach=None to the
single-tensor loop (foreach and fused kernels are chosen by default only on
GPU-like devices; fused=True on CPU is opt-in since 2.4), so the step is the
same on both columns and matches what mhe is compared with in practice.
The batch is one fixed random byte batch (seed 0).

Threads: Debian's torch sends matmuls to the system OpenBLAS, whose thread
pool ignores torch.set_num_threads, and torch's OpenMP workers spin between
regions and steal the cores the BLAS needs; MKL reads MKL_NUM_THREADS. So
before torch is imported this script makes sure OPENBLAS_NUM_THREADS=N,
OMP_NUM_THREADS=N, MKL_NUM_THREADS=N and OMP_WAIT_POLICY=PASSIVE are in the
environment, re-executing itself with them if they are not. The running
interpreter is kept whenever it has torch; only one without torch is swapped
for Debian's /usr/bin/python3.

Output: human-readable lines (the torch version and its BLAS among them), then
one last line
    JSON {"config":..., "threads":..., "ms_median":..., "ms_min":..., "tokens_per_s":..., "peak_rss_mb":...,
          "torch_version":..., "blas":..., "attention_core":..., ...}
"""
import argparse
import importlib.util
import ctypes
import json
import os
import re
import resource
import statistics
import sys
import time

CONFIGS = {
    "C1": dict(vocab=256, d_model=256, n_heads=8, n_layers=4, seq=128, batch=8),
    "C2": dict(vocab=256, d_model=512, n_heads=8, n_layers=6, seq=256, batch=4),
}
DEFAULT_STEPS = {"C1": (20, 5), "C2": (10, 3)}   # (timed steps, warm-up steps)
DEBIAN_PY = "/usr/bin/python3"


def parse_args():
    ap = argparse.ArgumentParser(description="Time one GPT training step in PyTorch (CPU, float32).")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="C1")
    ap.add_argument("--threads", type=int, default=1, help="threads for torch and OpenBLAS (default 1)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default C1: 20, C2: 10)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default C1: 5, C2: 3)")
    ap.add_argument("--attn", choices=["mha", "mqa", "mhe-add", "mhe-mul"], default="mha")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default: the config's)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the config's)")
    a = ap.parse_args()
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    steps, warmup = DEFAULT_STEPS[a.config]
    a.steps = steps if a.steps is None else a.steps
    a.warmup = warmup if a.warmup is None else a.warmup
    if a.steps < 1 or a.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    return a


def ensure_environment(threads):
    """Re-exec with the thread variables set (and with Debian's python if this one
    lacks torch). They must be in the environment before torch and its BLAS load."""
    want = {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    python = sys.executable
    if importlib.util.find_spec("torch") is None:
        # a venv made from Debian's python is the same binary, but without its site-packages
        same = os.path.realpath(DEBIAN_PY) == os.path.realpath(python) and sys.prefix == sys.base_prefix
        if os.path.exists(DEBIAN_PY) and not same:
            python = DEBIAN_PY
        else:
            sys.exit("bench_train_torch: PyTorch is not installed for %s "
                     "(python3 -m venv .venv && .venv/bin/pip install torch numpy; or apt-get install python3-torch)" % python)
    if python == sys.executable and all(os.environ.get(k) == v for k, v in want.items()):
        return
    if os.environ.get("MHE_BENCH_REEXEC") == "1":
        sys.exit("bench_train_torch: re-exec did not take effect")
    env = dict(os.environ)
    env.update(want)
    env["MHE_BENCH_REEXEC"] = "1"
    os.execve(python, [python, os.path.abspath(__file__)] + sys.argv[1:], env)


def has_sdpa(torch):
    return hasattr(torch.nn.functional, "scaled_dot_product_attention")


def loaded_blas():
    """The BLAS library mapped into this process, for a torch built against the
    system libblas (Debian's): OpenBLAS describes itself (openblas_get_config);
    Debian's netlib reference BLAS lives in .../blas/ and is named so, since
    it is many times slower and changes what the column means."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "blas" in line.rsplit("/", 1)[-1]})
    except OSError:
        return None
    for path in paths:
        try:
            get = ctypes.CDLL(path).openblas_get_config
        except (OSError, AttributeError):
            continue
        get.restype = ctypes.c_char_p
        return get().decode().split(" DYNAMIC_ARCH")[0] + " (" + os.path.basename(path) + ")"
    for path in paths:
        if os.path.basename(os.path.dirname(path)) == "blas":
            return "netlib reference BLAS (" + path + ")"
    return os.path.basename(paths[0]) if paths else None


def blas_name(torch):
    """BLAS and oneDNN, from torch.__config__.show(): e.g. 'MKL 2024.2, oneDNN v3.13.3'
    or 'OpenBLAS 0.3.21 (libblas.so.3), oneDNN v2.6.3' (BLAS_INFO=generic: the system
    libblas, which needs a matmul to have run to be mapped)."""
    show = torch.__config__.show()
    info = re.search(r"BLAS_INFO=([^,\s]+)", show)
    info = info.group(1) if info else "unknown"
    mkl = re.search(r"Math Kernel Library Version ([0-9.]+)", show)
    dnn = re.search(r"MKL-DNN (v[0-9.]+)", show)
    if mkl and info == "mkl":
        name = "MKL " + mkl.group(1)
    else:
        name = (info == "generic" and loaded_blas()) or "BLAS_INFO=" + info
    return name + (", oneDNN " + dnn.group(1) if dnn else "")


def build_model(torch, cfg, kind="mha"):
    nn = torch.nn
    F = torch.nn.functional
    V, C, n, L, Tmax = cfg["vocab"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["seq"]
    dh = C // n
    HAS_SDPA = has_sdpa(torch)
    width = {"mha": 3 * C, "mqa": C + 2 * dh, "mhe-add": 3 * dh, "mhe-mul": 3 * dh}[kind]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, width)
            if kind.startswith("mhe"):
                self.eq = nn.Parameter(torch.zeros(n, 1, dh))
                self.ek = nn.Parameter(torch.zeros(n, 1, dh))
                self.ev = nn.Parameter(torch.zeros(n, 1, dh))
            self.proj = nn.Linear(C, C)
            if not HAS_SDPA:
                self.register_buffer("mask", torch.ones(Tmax, Tmax, dtype=torch.bool).triu(1),
                                     persistent=False)
            self.scale = dh ** -0.5

        def forward(self, x):
            B, T, _ = x.shape
            if kind == "mha":
                q, k, v = self.qkv(x).split(C, dim=2)
                q = q.view(B, T, n, dh).transpose(1, 2)
                k = k.view(B, T, n, dh).transpose(1, 2)
                v = v.view(B, T, n, dh).transpose(1, 2)
            elif kind == "mqa":
                q, k, v = self.qkv(x).split([C, dh, dh], dim=2)
                q = q.view(B, T, n, dh).transpose(1, 2)
                k = k.unsqueeze(1).expand(B, n, T, dh)
                v = v.unsqueeze(1).expand(B, n, T, dh)
            else:
                q, k, v = (t.unsqueeze(1) for t in self.qkv(x).split(dh, dim=2))   # [B, 1, T, dh]
                if kind == "mhe-add":
                    q, k, v = q + self.eq, k + self.ek, v + self.ev
                else:
                    q, k, v = q * (1 + self.eq), k * (1 + self.ek), v * (1 + self.ev)
            if HAS_SDPA:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * self.scale
                att = att.masked_fill(self.mask[:T, :T], float("-inf"))
                att = torch.softmax(att, dim=-1)
                y = att @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(C)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(C)
            self.fc1 = nn.Linear(C, 4 * C)
            self.fc2 = nn.Linear(4 * C, C)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(V, C)
            self.pos_emb = nn.Embedding(Tmax, C)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)
            for mod in self.modules():
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(mod.weight, mean=0.0, std=0.02)
                    if getattr(mod, "bias", None) is not None:
                        nn.init.zeros_(mod.bias)

        def forward(self, idx, targets):
            B, T = idx.shape
            x = self.tok_emb(idx) + self.pos_emb.weight[:T]
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln_f(x) @ self.tok_emb.weight.t()     # tied LM head, no bias
            return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))

    return GPT()


def model_flops(cfg, kind):
    """FLOPs of one step, counted as tools/bench/bench_train.c counts them: 2 per
    multiply-add of every matmul of the forward pass (Q/K/V or their seed head,
    W^O, fc1, fc2, LM head; the attention core's q k^T and p v over the T(T+1)/2
    causal query-key pairs that a fused kernel computes), backward twice the
    forward; elementwise work is not counted."""
    C, n, L, T, B, V = cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["seq"], cfg["batch"], cfg["vocab"]
    dh = C // n
    qkv = {"mha": 3 * C, "mqa": C + 2 * dh, "mhe-add": 3 * dh, "mhe-mul": 3 * dh}[kind]
    rows = B * T
    linear = L * 2 * rows * C * (qkv + C + 4 * C + 4 * C) + 2 * rows * C * V
    core = L * 2 * (2 * B * n * dh * (T * (T + 1) // 2))
    return 3 * (linear + core)


def main():
    a = parse_args()
    ensure_environment(a.threads)
    import torch

    torch.set_num_threads(a.threads)
    cfg = dict(CONFIGS[a.config])
    if a.seq:
        cfg["seq"] = a.seq
    if a.batch:
        cfg["batch"] = a.batch
    torch.manual_seed(0)
    model = build_model(torch, cfg, a.attn)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    # torch's default implementation (on CPU: the single-tensor loop), see the docstring
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    torch.ones(2, 2) @ torch.ones(2, 2)   # loads the BLAS, so that blas_name can see which
    blas = blas_name(torch)
    core = "scaled_dot_product_attention" if has_sdpa(torch) else "written out (softmax)"

    print("bench_train_torch: config %s attn %s %s" % (a.config, a.attn, " ".join("%s=%d" % kv for kv in cfg.items())))
    print("torch %s, %s, torch threads %d, OPENBLAS_NUM_THREADS=%s, MKL_NUM_THREADS=%s, OMP_WAIT_POLICY=%s"
          % (torch.__version__, sys.executable, torch.get_num_threads(), os.environ.get("OPENBLAS_NUM_THREADS"),
             os.environ.get("MKL_NUM_THREADS"), os.environ.get("OMP_WAIT_POLICY")))
    print("BLAS: %s; attention core: %s" % (blas, core))
    print("parameters %d (tied head counted once); %d tokens/step; %d warm-up + %d timed steps"
          % (n_params, cfg["batch"] * cfg["seq"], a.warmup, a.steps), flush=True)

    t_step, t_fwd, t_bwd, t_opt, losses = [], [], [], [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        losses.append(loss.item())
        if i >= a.warmup:
            t_step.append((t3 - t0) * 1e3)
            t_fwd.append((t1 - t0) * 1e3)
            t_bwd.append((t2 - t1) * 1e3)
            t_opt.append((t3 - t2) * 1e3)

    med = statistics.median(t_step)
    tokens = cfg["batch"] * cfg["seq"]
    flops = model_flops(cfg, a.attn)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux: KiB
    print("loss: first step %.4f, last step %.4f (same batch every step)" % (losses[0], losses[-1]))
    print("step ms: median %.1f, min %.1f, max %.1f" % (med, min(t_step), max(t_step)))
    print("  forward+loss %.1f, backward %.1f, AdamW %.1f (medians, ms)"
          % (statistics.median(t_fwd), statistics.median(t_bwd), statistics.median(t_opt)))
    print("tokens/s %.0f; model %.2f GFLOP/step -> %.1f GFLOP/s; peak RSS %.0f MB"
          % (tokens / (med / 1e3), flops / 1e9, flops / 1e9 / (med / 1e3), rss_mb))
    out = {
        "config": a.config, "threads": a.threads, "attn": a.attn, "seq": cfg["seq"], "batch": cfg["batch"],
        "ms_median": round(med, 3), "ms_min": round(min(t_step), 3),
        "tokens_per_s": round(tokens / (med / 1e3), 1), "peak_rss_mb": round(rss_mb, 1),
        "ms_max": round(max(t_step), 3), "ms_fwd": round(statistics.median(t_fwd), 3),
        "ms_bwd": round(statistics.median(t_bwd), 3), "ms_opt": round(statistics.median(t_opt), 3),
        "steps": a.steps, "warmup": a.warmup, "params": n_params,
        "gflop_per_step": round(flops / 1e9, 3), "torch_version": torch.__version__,
        "blas": blas, "attention_core": core,
    }
    print("JSON " + json.dumps(out, separators=(", ", ": ")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
