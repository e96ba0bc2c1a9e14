#!/usr/bin/env python3
"""bench_torch_cuda.py - the PyTorch CUDA side of bench_cuda, at the same shapes.

usage: bench_torch_cuda.py [--quick] [--mhe PATH] [--bench-cuda PATH]
                           [--gemm-only | --attn-only | --train-only | --decode-only]

Rows match tools/bench/bench_cuda.cu's so the two outputs read side by side on one GPU:
  GEMM       torch.matmul (cuBLAS) TFLOP/s in float32, TF32 and bf16, 4096 tokens at
             C = 768 and 1024 (--quick: 1024 tokens, C = 768)
  attention  scaled_dot_product_attention, causal, 12 heads of 64, B*L = 8192 tokens,
             forward | backward ms, float32 and bf16 (bf16 reaches the flash backend)
  training   the PyTorch twin (tools/python/mhe_torch.py) of bench_cuda's byte-level GPT
             (d_model 512, 8 layers, 8 heads, T 512, batch 8; --quick 128/2/128; without
             --quick also the 124M-class d_model 768, 12 layers, 12 heads, T 1024), one
             step = forward, backward, fused torch AdamW, in float32, TF32 and bf16
             autocast; the model comes from `mhe init` (--mhe, default build/mhe), so both
             sides start from the same weights.
  decoding   the twin's weights in a PyTorch decode loop with a KV cache (preallocated K/V;
             the MHE kinds cache one head and apply the head maps to it each step, as mhe
             does), SDPA over the cache, greedy with .item() per token as mhe's host
             sampling: microseconds per token after the same prompt as bench_cuda (checked
             against the twin's full forward pass).
Inputs are random (never zeros: they time faster than data); each time is the median of
CUDA-event timings after a warm-up. Without a GPU it says so and exits 0.

--bench-cuda PATH runs mhe's bench_cuda first (printing its output as it is, then its
TF32 and bf16 training rows) and ends with one table per section, both sides on one row
and the ratio of mhe's speed to PyTorch's (above 1: mhe faster); mhe's bf16 rounds the
GEMMs' inputs as autocast does but keeps float32 activations. The exit status is
bench_cuda's.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def median_ms(torch, f, reps):
    f()  # warm-up
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def bench_gemm(torch, quick):
    """{(C, what): [fp32, tf32, bf16] TFLOP/s}"""
    res = {}
    tokens, Cs = (1024, [768]) if quick else (4096, [768, 1024])
    print("\nGEMM, TFLOP/s, torch.matmul (cuBLAS), %d tokens" % tokens)
    print("cuBLAS %-28s %8s %8s %8s" % ("shape (M x N x K)", "fp32", "tf32", "bf16"))
    for C in Cs:
        shapes = [("QKV projection", 0, tokens, 3 * C, C), ("W^O", 0, tokens, C, C), ("MLP up", 0, tokens, 4 * C, C),
                  ("MLP down", 0, tokens, C, 4 * C), ("weight gradient (A^T)", 1, C, 4 * C, tokens),
                  ("LM head (32000)", 0, tokens, 32000, C)]
        for what, ta, M, N, K in shapes:
            row = []
            for prec in ("fp32", "tf32", "bf16"):
                dt = torch.bfloat16 if prec == "bf16" else torch.float32
                torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
                A = torch.randn((K, M) if ta else (M, K), device="cuda", dtype=dt)
                B = torch.randn(K, N, device="cuda", dtype=dt)
                f = (lambda: A.t() @ B) if ta else (lambda: A @ B)
                ms = median_ms(torch, f, 3 if quick else 9)
                row.append(2.0 * M * N * K / ms / 1e9)
            torch.backends.cuda.matmul.allow_tf32 = False
            res[(C, what)] = row
            # "cuBLAS" first: bench_cuda's rows (three numbers too) start with "C=", and the GPU check reads those
            print("cuBLAS %-28s %8.2f %8.2f %8.2f   (%d x %d x %d)" % ("C=%d %s" % (C, what), row[0], row[1], row[2],
                                                                         M, N, K))
    return res


def bench_attn(torch, quick):
    """{L: [(fwd, bwd) fp32, (fwd, bwd) bf16] ms}"""
    import torch.nn.functional as F
    res = {}
    n, dh = 12, 64
    print("\nattention, scaled_dot_product_attention, causal, %d heads of %d, B*L = 8192 tokens: "
          "forward | backward ms" % (n, dh))
    print("%6s %20s %20s" % ("L", "fp32", "bf16"))
    for L in ([512, 1024] if quick else [512, 1024, 2048, 4096, 8192]):
        B = max(1, 8192 // L)
        cells = []
        for dt in (torch.float32, torch.bfloat16):
            q, k, v = (torch.randn(B, n, L, dh, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
            go = torch.randn(B, n, L, dh, device="cuda", dtype=dt)
            out = {}

            def fwd():
                out["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def bwd():
                q.grad = k.grad = v.grad = None
                out["o"].backward(go, retain_graph=True)

            tf = median_ms(torch, fwd, 3 if quick else 5)
            fwd()
            tb = median_ms(torch, bwd, 3 if quick else 5)
            cells.append((tf, tb))
        res[L] = cells
        print("%6d %20s %20s" % (L, "%8.2f | %8.2f" % cells[0], "%8.2f | %8.2f" % cells[1]))
    return res


def bench_train(torch, quick, mhe):
    """{kind: [fp32, tf32, bf16] tokens/s (None: failed)}"""
    res = {}
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch
    batch = 8
    tmp = tempfile.mkdtemp(prefix="bench_torch_")
    for d, layers, heads, T, suffix, kind in [s + (k,) for s in GPT_SIZES["quick" if quick else "full"]
                                              for k in ("mha", "mhe-mul", "mhe-add")]:
        if kind == "mha":
            print("\ntraining the PyTorch twin of bench_cuda's byte-level GPT (d_model %d, %d layers, %d heads, T %d, "
                  "batch %d): tokens/s" % (d, layers, heads, T, batch))
            print("%-8s %14s %14s %14s" % ("kind", "fp32", "tf32", "bf16 autocast"))
        path = os.path.join(tmp, kind + suffix + ".safetensors")
        kind += suffix
        try:
            mhe_init(mhe, path, kind[:-len(suffix)] if suffix else kind, d, layers, heads, T)
        except (OSError, subprocess.CalledProcessError) as e:
            print("%-8s mhe init failed: %s" % (kind, e))
            continue
        cells, rates = [], []
        for prec in ("fp32", "tf32", "bf16"):
            rates.append(None)
            try:
                torch.set_default_device("cuda")  # the twin makes its masks and tables with torch.* factories
                model, _, _ = mhe_torch.load_checkpoint(path)
                model = model.cuda()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
                tok = torch.randint(0, 256, (batch, T), device="cuda")
                tgt = torch.randint(0, 256, (batch, T), device="cuda")
                torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
                        loss = model(tok, tgt)
                    loss.backward()
                    opt.step()

                ms = median_ms(torch, step, 3 if quick else 9)
                rates[-1] = batch * T / (ms / 1e3)
                cells.append("%14.0f" % rates[-1])
            except Exception as e:  # one failed cell says why and the table goes on
                cells.append("%14s" % "failed")
                print("%s %s: %s: %s" % (kind, prec, type(e).__name__, str(e).splitlines()[0][:200]))
            finally:
                torch.set_default_device("cpu")
                torch.backends.cuda.matmul.allow_tf32 = False
        res[kind] = rates
        print("%-8s %s" % (kind, " ".join(cells)))
    return res


GPT_SIZES = {"quick": [(128, 2, 8, 128, "")], "full": [(512, 8, 8, 512, ""), (768, 12, 12, 1024, "-124M")]}


def mhe_init(mhe, path, kind, d, layers, heads, T):
    subprocess.run([mhe, "init", "--out", path, "--d_model", str(d), "--n_heads", str(heads), "--n_layers",
                    str(layers), "--max_seq_len", str(T), "--attn", kind], check=True, stdout=subprocess.DEVNULL)


def decode_loop(torch, model, P, N, prompt, device="cuda"):
    """greedy decoding with a KV cache in PyTorch from the twin's weights (pre-norm decoder,
    mha / mhe-mul / mhe-add); returns (microseconds per new token, the tokens, the last logits).
    tests/test_bench_decode.py runs it on the CPU against the twin's full forward pass."""
    F = torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None) or (  # PyTorch < 2.0: the same, spelt out
        lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    r = model.r
    n, dh, L = r["n_heads"], r["d_head"], r["n_layers"]
    cap = P + N
    K = [torch.zeros(1, n if r["attn"][l] == "mha" else 1, cap, dh, device=device) for l in range(L)]
    V = [torch.zeros_like(k) for k in K]
    W = model.param("lm_head.weight") if model.has("lm_head.weight") else model.param("tok_emb.weight")

    def step(tok, pos):
        x = (model.param("tok_emb.weight")[tok] + model.param("pos_emb.weight")[pos]).view(1, 1, -1)
        for l in range(L):
            p, kind = "layers.%d." % l, r["attn"][l]
            a = p + "attn"
            u = model._norm(x, p + "norm1")
            q, k, v = (model._heads(model._linear(u, a + w), 1 if kind != "mha" else n) for w in (".wq", ".wk", ".wv"))
            K[l][:, :, pos] = k[:, :, 0]
            V[l][:, :, pos] = v[:, :, 0]
            kk, vv = K[l][:, :, :pos + 1], V[l][:, :, :pos + 1]
            if kind != "mha":  # MHE paper eq. 5-6: head i is psi(seed, e_i), here over the cached seed rows
                def psi(t, e):
                    e = model.param(a + "." + e).view(1, n, 1, dh)
                    return t + e if kind == "mhe-add" else t * (1 + e)
                q, kk, vv = psi(q, "eq"), psi(kk, "ek"), psi(vv, "ev")
            o = sdpa(q, kk, vv)
            x = x + model._linear(o.transpose(1, 2).reshape(1, 1, -1), a + ".wo")
            x = x + model._mlp(model._norm(x, p + "norm2"), p + "mlp")
        return model._norm(x, "ln_f")[0, 0] @ W.t()

    import time
    with torch.no_grad():
        for i, t in enumerate(prompt):
            logits = step(t, i)
        toks = []
        sync()
        t0 = time.perf_counter()
        for i in range(N):
            nxt = int(logits.argmax().item())
            toks.append(nxt)
            logits = step(nxt, P + i)
        sync()
        return 1e6 * (time.perf_counter() - t0) / N, toks, logits


def bench_decode(torch, quick, mhe):
    """{kind: microseconds per token (None: failed)}"""
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    import mhe_torch
    import random
    d, layers, heads, T, _ = GPT_SIZES["quick" if quick else "full"][0]
    P, N = (32, 32) if quick else (128, 256)
    rng = random.Random(3)
    prompt = [rng.randrange(256) for _ in range(P)]
    print("\ndecoding, a PyTorch loop with a KV cache over the twin's weights (d_model %d, %d layers, %d heads, "
          "prompt %d, %d new tokens, float32)" % (d, layers, heads, P, N))
    res = {}
    tmp = tempfile.mkdtemp(prefix="bench_torch_")
    for kind in ("mha", "mhe-mul", "mhe-add"):
        res[kind] = None
        try:
            path = os.path.join(tmp, kind + ".safetensors")
            mhe_init(mhe, path, kind, d, layers, heads, T)
            torch.set_default_device("cuda")
            model, _, _ = mhe_torch.load_checkpoint(path)
            model = model.cuda().eval()
            torch.backends.cuda.matmul.allow_tf32 = False
            runs = [decode_loop(torch, model, P, N, prompt) for _ in range(3)]
            us, toks, last = sorted(runs, key=lambda x: x[0])[1]
            with torch.no_grad():  # the cached loop against the full forward pass over the same tokens
                full = model.logits(torch.tensor([prompt + toks], device="cuda"))[0, -1]
            gap = float((full - last).abs().max() / full.abs().max())
            res[kind] = us
            print("decode %-8s %9.1f us/token  (logits within %.1e of the full forward pass)" % (kind, us, gap))
            if gap > 1e-3:
                print("bench_torch_cuda: %s: the cached decoding differs from the full forward pass" % kind)
        except Exception as e:  # one failed row says why and the table goes on
            print("decode %-8s failed: %s: %s" % (kind, type(e).__name__, str(e).splitlines()[0][:200]))
        finally:
            torch.set_default_device("cpu")
    return res


def run_bench_cuda(exe, quick, only):
    """bench_cuda's output (printed as it is), then its TF32 and bf16 training rows; (texts, exit status).
    only: one section's flag (--gemm-only, ...) or None"""
    args = [exe] + (["--quick"] if quick else [])
    texts, rc = [], 0
    runs = [[only] if only else []]
    if only in (None, "--train-only"):
        runs += [["--tf32", "--train-only"], ["--bf16", "--train-only"]]
    if only in (None, "--attn-only"):
        runs += [["--bf16", "--attn-only"]]  # the tiled core on the tensor cores, against SDPA in bf16
    for extra in runs:
        try:
            p = subprocess.run(args + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, errors="replace")
        except OSError as e:
            print("bench_torch_cuda: cannot run %s: %s" % (exe, e))
            return "", 1
        sys.stdout.write(p.stdout)
        sys.stdout.flush()
        texts.append(p.stdout)
        rc = rc or p.returncode
    return texts, rc


def ratio(a, b):
    return "%.2fx" % (a / b) if a and b else "-"


def side_by_side(gpu, texts, gemm, attn, train, decode):
    """mhe's bench_cuda rows beside PyTorch's on the same GPU, with mhe / PyTorch ratios
    (speed: above 1 is mhe faster)"""
    sys.path.insert(0, os.path.join(REPO, "tools", "scripts"))
    from gpu_check import ATTN_RE, GEMM_RE, TRAIN_RE
    print("\n== side by side on %s: mhe (bench_cuda) against PyTorch; ratio = mhe speed / PyTorch speed" % gpu)
    from gpu_check import DECODE_RE
    rows = GEMM_RE.findall(texts[0])
    if rows and gemm:
        print("\n%-40s %8s %8s %6s %8s %8s %6s %8s %8s %6s" % ("GEMM TFLOP/s", "mhe fp32", "cuBLAS", "ratio",
                                                                  "mhe tf32", "cuBLAS", "ratio", "mhe bf16", "cuBLAS",
                                                                  "ratio"))
        for C, what, simt, tf32, bf16, M, N, K in rows:
            t = gemm.get((int(C), what))
            if t:
                print("C=%-5s %-32s %8s %8.1f %6s %8s %8.1f %6s %8s %8.1f %6s" % (
                    C, what, simt, t[0], ratio(float(simt), t[0]), tf32, t[1], ratio(float(tf32), t[1]), bf16, t[2],
                    ratio(float(bf16), t[2])))
    rows = ATTN_RE.findall(texts[0])
    text_bf16 = next((t for t in texts[1:] if "bf16 tensor cores" in t), "")
    bf16_rows = {int(r[0]): float(r[1]) + float(r[2]) for r in ATTN_RE.findall(text_bf16)}
    if rows and attn:
        print("\nattention fwd+bwd ms, causal, 12 heads of 64   mha fp32 | SDPA fp32  ratio | mha bf16 | SDPA bf16  "
              "ratio | mhe-mul fp32 | mhe-add fp32")
        for r in rows:
            L = int(r[0])
            if L in attn:
                mine, (f32, b16) = float(r[1]) + float(r[2]), attn[L]
                m16 = bf16_rows.get(L)
                print("L=%-5d %47.2f | %9.2f %6s | %8s | %9.2f %6s | %12.2f | %12.2f" % (
                    L, mine, sum(f32), ratio(sum(f32), mine), "%.2f" % m16 if m16 else "-", sum(b16),
                    ratio(sum(b16), m16), float(r[3]) + float(r[4]), float(r[6]) + float(r[7])))
    fp32 = {k: float(v) for k, v, _, _ in TRAIN_RE.findall(texts[0])}
    tf32 = {k: float(v) for k, v, _, _ in TRAIN_RE.findall(texts[1])} if len(texts) > 1 else {}
    bf16 = {k: float(v) for k, v, _, _ in TRAIN_RE.findall(texts[2])} if len(texts) > 2 else {}
    if fp32 and train:
        print("\ntraining tokens/s   mhe fp32 | twin fp32  ratio | mhe tf32 | twin tf32  ratio | mhe bf16 | "
              "twin bf16 autocast  ratio")
        num = lambda x: "%.0f" % x if x else "-"  # noqa: E731
        for kind, t in train.items():
            m32, m19, m16 = fp32.get(kind), tf32.get(kind), bf16.get(kind)
            print("%-8s %19s | %9s %6s | %8s | %9s %6s | %8s | %18s %6s" % (
                kind, num(m32), num(t[0]), ratio(m32, t[0]), num(m19), num(t[1]), ratio(m19, t[1]), num(m16),
                num(t[2]), ratio(m16, t[2])))
    mine = {k: float(us) for k, us, _ in DECODE_RE.findall(texts[0])}
    if mine and decode:
        print("\ndecoding us/token         mhe | PyTorch loop  ratio")
        for kind, us in decode.items():
            m = mine.get(kind)
            print("decode %-8s %10s | %12s %6s" % (kind, "%.1f" % m if m else "-", "%.1f" % us if us else "-",
                                                    ratio(us, m)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mhe", default=os.path.join(REPO, "build", "mhe"), help="the CPU mhe tool (for mhe init)")
    ap.add_argument("--bench-cuda", metavar="PATH", help="run this bench_cuda first (with --tf32 --train-only "
                    "and --bf16 --train-only again) and print the two sides together with ratios")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--gemm-only", action="store_true")
    g.add_argument("--attn-only", action="store_true")
    g.add_argument("--train-only", action="store_true")
    g.add_argument("--decode-only", action="store_true")
    a = ap.parse_args()
    only = next(("--%s-only" % k for k in ("gemm", "attn", "train", "decode") if getattr(a, k + "_only")), None)
    texts, rc = run_bench_cuda(a.bench_cuda, a.quick, only) if a.bench_cuda else ([], 0)
    try:
        import torch
    except ImportError:
        print("bench_torch_cuda: PyTorch is not installed; nothing measured")
        return rc
    if not torch.cuda.is_available():
        print("bench_torch_cuda: no CUDA device; nothing measured")
        return rc
    print("bench_torch_cuda: %s, PyTorch %s, CUDA %s" % (torch.cuda.get_device_name(0), torch.__version__,
                                                         torch.version.cuda))
    every = not (a.gemm_only or a.attn_only or a.train_only or a.decode_only)
    gemm = bench_gemm(torch, a.quick) if every or a.gemm_only else {}
    attn = bench_attn(torch, a.quick) if every or a.attn_only else {}
    train = bench_train(torch, a.quick, a.mhe) if every or a.train_only else {}
    decode = bench_decode(torch, a.quick, a.mhe) if every or a.decode_only else {}
    if texts:
        side_by_side(torch.cuda.get_device_name(0), texts, gemm, attn, train, decode)
    return rc


if __name__ == "__main__":
    sys.exit(main())
