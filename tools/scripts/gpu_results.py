#!/usr/bin/env python3
"""gpu_results.py - what docs/cuda.md and the README say about the last real GPU run,
written from that run's own report, so the claims cannot disagree with it or each other.

usage: gpu_results.py                 print the three blocks
       gpu_results.py --write         rewrite them between their markers (make docs)
       gpu_results.py --check         exit 1 when a file's copy is stale (tests/test_guide.py)
       gpu_results.py --save OUT      keep a real run's report (make gpu-check OUT=...) as the latest

The data is docs/gpu/: gpu-check.json and gpu-check-logs.tar.gz, the latest run of
the checks (the tests, training against the CPU, sanitizers), and gpu-bench.json and
gpu-bench-logs.tar.gz, the latest benchmark of every size (make gpu-check
BENCH=full ONLY=environment,prebuilt,bench). --save files a run under the one it is
(a run with the full bench and no tests is a benchmark; one with tests, a check;
one with both, each), refusing dry runs, runs without a GPU and interrupted ones.
The blocks:
  docs/cuda.md  <!-- gpu-check:start/end -->  the GPU, driver, compiler, date, commit, and
                one row per step with its numbers
  docs/cuda.md  <!-- gpu-speed:start/end -->  the speed targets against PyTorch on the same
                card, measured or not met, and the side-by-side tables of the run
  README.md     <!-- gpu-claim:start/end -->  the README's one paragraph on the GPU
"""
import json
import os
import re
import shutil
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gpu_check  # noqa: E402
from generated_block import update  # noqa: E402

DATA = os.path.join(REPO, "docs", "gpu")
CHECK, BENCH = "gpu-check", "gpu-bench"
# the speed targets the project holds itself to (ratio = mhe's speed over PyTorch's on the same card)
TARGETS = [("gemm", "bf16 GEMM ≥ 0.60× cuBLAS bf16, every shape", 0.60),
           ("attn", "attention forward + backward in bf16 ≥ 0.50× SDPA (flash), every length", 0.50),
           ("train", "a training step ≥ 0.8× the twin's tokens/s at the same precision, every kind and size", 0.80),
           ("mul", "MHE-MUL's step time ≤ 0.8× MHA's, every precision and size", 0.80),
           ("decode", "decoding time per token ≤ 1.0× PyTorch's, every kind", 1.0)]


def load(name):
    """(report, {log name: text}) of docs/gpu/NAME.json and its archive; (None, {}) when absent"""
    path = os.path.join(DATA, name + ".json")
    if not os.path.isfile(path):
        return None, {}
    with open(path, encoding="utf-8") as f:
        rep = json.load(f)
    logs = {}
    arc = os.path.join(DATA, name + "-logs.tar.gz")
    if os.path.isfile(arc):
        with tarfile.open(arc) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    logs[m.name] = tar.extractfile(m).read().decode("utf-8", "replace")
    return rep, logs


def step(rep, key):
    return next((s for s in rep["steps"] if s["key"] == key), None) if rep else None


def who(rep):
    """the GPU, its software, the date and the commit of a report, in one phrase"""
    g = rep["gpu"]
    return "%s (compute capability %s, %s, driver %s; nvcc %s), %s, commit %s" % (
        g["name"], g["compute_capability"], g["memory"], g["driver"], rep["nvcc"], rep["date"][:10], rep["commit"])


def fmt(x):
    return "%.2g" % x if x < 1e-2 else "%.3g" % x


def span(vals):
    lo, hi = min(vals), max(vals)
    return "%.2f×" % lo if abs(hi - lo) < 5e-3 else "%.2f–%.2f×" % (lo, hi)


# ---- the check ------------------------------------------------------------------------

def check_block(rep):
    steps = rep["steps"]
    passed = sum(s["status"] in ("pass", "not needed") for s in steps)
    head = ("`make gpu-check` on an NVIDIA %s: **%s** in %s s of a %g s budget." % (
        who(rep).replace("NVIDIA ", "", 1), "all %d steps passed" % len(steps) if passed == len(steps) else
        "%d of %d steps passed (not: %s)" % (passed, len(steps), ", ".join(rep["failed"])), rep["elapsed_s"],
        rep["budget_s"]))
    pre = step(rep, "prebuilt")
    if pre and pre["status"] == "pass":
        head += " The binaries were `make gpu-check-build`'s, built without a GPU and sent with the tree."
    lines = ["<!-- gpu-check:start -->", head, "", "| step | status | seconds | numbers |", "| --- | --- | ---: | --- |"]
    for s in steps:
        lines.append("| %s | %s | %s | %s |" % (s["title"], s["status"], "" if s["seconds"] is None else
                                               "%.1f" % s["seconds"], (s["summary"] or "").replace("|", "\\|")))
    n = sum(s["numbers"].get("passed", 0) for s in steps if s["key"] != "prebuilt")
    lines += ["", "%s checks passed in all. Data: [docs/gpu/gpu-check.json](gpu/gpu-check.json), every log in "
              "docs/gpu/gpu-check-logs.tar.gz." % format(n, ","), "<!-- gpu-check:end -->"]
    return "\n".join(lines)


# ---- the speed ------------------------------------------------------------------------

def speed_facts(rep, logs):
    """{target key: (ratios, phrase)}, the PyTorch version, the side-by-side text"""
    b = step(rep, "bench")
    n = b["numbers"]
    log = logs.get("logs/bench.log", "")
    m = re.search(r"^bench_torch_cuda: .*?, PyTorch (\S+), CUDA (\S+)$", log, re.M)
    torch = "PyTorch %s (CUDA %s)" % m.groups() if m else "PyTorch"
    facts = {}
    g = n.get("gemm_side", {})
    if g:
        r = {k: v["bf16"][0] / v["bf16"][1] for k, v in g.items()}
        lo = min(r, key=r.get)
        facts["gemm"] = (list(r.values()), "%s (lowest: %s)" % (span(r.values()), lo))
    a = {int(k.split("_")[1][1:]): v for k, v in n.items() if re.match(r"attn_L\d+_mha_bf16_vs_sdpa$", k)}
    if a:
        f32 = [v for k, v in n.items() if re.match(r"attn_L\d+_mha_vs_sdpa$", k)]
        facts["attn"] = (list(a.values()), "%s for L = %d–%d (float32 against SDPA float32: %s)" % (
            span(a.values()), min(a), max(a), span(f32)))
    t = n.get("train_side", {})
    if t:
        per = {}
        for kind, precs in t.items():
            size = "124M" if kind.endswith("-124M") else "d_model 512"
            for p, (mine, twin) in precs.items():
                if mine and twin:
                    per.setdefault((p, size), []).append(mine / twin)
        parts = ["%s %s %s" % (p if p != "fp32" else "float32", size, span(v)) for (p, size), v in sorted(
            per.items(), key=lambda x: (gpu_check.PRECISIONS.index(x[0][0]), x[0][1] != "d_model 512"))]
        facts["train"] = ([x for v in per.values() for x in v], "; ".join(parts), per)
        mul = []
        for suffix in ("", "-124M"):
            for p in gpu_check.PRECISIONS:
                mha, mm = t.get("mha" + suffix, {}).get(p, [None])[0], t.get("mhe-mul" + suffix, {}).get(p, [None])[0]
                if mha and mm:
                    mul.append(mha / mm)  # step time ratio: MHA's tokens/s over MHE-MUL's
        if mul:
            facts["mul"] = (mul, "%s MHA's time" % span(mul))
    d = {k[len("decode_"):-len("_vs_torch")].replace("_", "-"): v for k, v in n.items()
         if k.startswith("decode_") and k.endswith("_vs_torch")}
    if d:  # speed ratios; time ratio = 1 / speed ratio
        facts["decode"] = ([1 / v for v in d.values()], ", ".join("%s %.2f×" % (k, 1 / v) for k, v in d.items()) +
                           " PyTorch's time per token")
    i = log.find("== side by side")
    return facts, torch, log[i:].strip() if i >= 0 else ""


def speed_block(rep, logs):
    facts, torch, side = speed_facts(rep, logs)
    lines = ["<!-- gpu-speed:start -->",
             "`bench_cuda` beside `tools/bench/bench_torch_cuda.py` (%s, the same card), `make gpu-check BENCH=full` "
             "on an NVIDIA %s. Ratios are mhe's speed over PyTorch's (above 1: mhe faster) except where a time is "
             "compared." % (torch, who(rep).replace("NVIDIA ", "", 1)), "",
             "| target | measured | met |", "| --- | --- | --- |"]
    for key, what, bound in TARGETS:
        if key not in facts:
            lines.append("| %s | not measured | — |" % what)
            continue
        vals, phrase = facts[key][:2]
        ok = all(v <= bound for v in vals) if key in ("mul", "decode") else all(v >= bound for v in vals)
        lines.append("| %s | %s | %s |" % (what, phrase, "yes" if ok else "no"))
    lines += ["", "The run's side-by-side tables (training: d_model 512, 8 layers, T 512 and the 124M-class d_model "
              "768, 12 layers, T 1024, batch 8, bytes; every figure in docs/gpu/gpu-bench.json and its logs):", "",
              "```", side, "```", "<!-- gpu-speed:end -->"]
    return "\n".join(lines)


# ---- the README -----------------------------------------------------------------------

def claim_block(check, bench, logs):
    steps = check["steps"]
    passed = sum(s["status"] in ("pass", "not needed") for s in steps)
    cmp_ = step(check, "train-compare")
    worst = ""
    if cmp_ and cmp_["status"] == "pass":
        c = cmp_["numbers"]
        worst = ", 200 training steps through the CUDA graph within %s (float32), %s (TF32) and %s (bf16) of the " \
                "CPU's losses" % tuple(fmt(c["%s_max_rel" % p]) for p in gpu_check.PRECISIONS)
    san = [s for s in steps if s["key"].split("-")[0] in ("memcheck", "racecheck", "synccheck")]
    text = ("- CUDA on a real GPU: on an NVIDIA %s, `make gpu-check` %s: every test against the CPU (bf16 GEMMs, the pipelined "
            "tensor-core GEMM, FlashAttention-2 on the tensor cores and the deferred trainer's CUDA graph "
            "included)%s%s." % (
                who(check).replace("NVIDIA ", "", 1),
                "passed all %d steps" % len(steps) if passed == len(steps) else "passed %d of %d steps (not: %s)" % (
                    passed, len(steps), ", ".join(check["failed"])), worst,
                ", compute-sanitizer clean" if san and all(s["status"] == "pass" for s in san) else ""))
    if bench:
        facts, torch, _ = speed_facts(bench, logs)
        part = []
        if "train" in facts:
            per = facts["train"][2]
            part.append("a training step %s the PyTorch twin" % ", ".join(
                "%s %s" % ({"fp32": "float32", "tf32": "TF32"}.get(p, p), span(
                    [x for (q, _), v in per.items() if q == p for x in v])) for p in gpu_check.PRECISIONS
                if any(q == p for q, _ in per)))
        if "gemm" in facts:
            part.append("bf16 GEMMs %s cuBLAS" % span(facts["gemm"][0]))
        if "attn" in facts:
            part.append("bf16 attention forward + backward %s SDPA's flash kernel" % span(facts["attn"][0]))
        if "mul" in facts:
            part.append("MHE-MUL's step %s MHA's time" % span(facts["mul"][0]))
        if "decode" in facts:
            part.append("decoding %s PyTorch's time per token" % span(facts["decode"][0]))
        met = sum(1 for key, _, bound in TARGETS if key in facts and (
            all(v <= bound for v in facts[key][0]) if key in ("mul", "decode") else
            all(v >= bound for v in facts[key][0])))
        text += (" Speed against %s on the same card (%s, commit %s; mhe's speed over PyTorch's): %s; %d of the "
                 "%d speed targets met" % (torch, bench["date"][:10], bench["commit"], "; ".join(part), met,
                                           len(TARGETS)))
    text += " ([measured](docs/cuda.md#results-of-the-last-real-run))."
    return "<!-- gpu-claim:start -->\n" + text + "\n<!-- gpu-claim:end -->"


# ---- keeping a run ---------------------------------------------------------------------

def save(out):
    path = os.path.join(out, "gpu-check.json")
    try:
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
    except (OSError, ValueError) as e:
        print("gpu_results: %s: %s" % (path, e))
        return 1
    why = ("a dry run" if rep.get("dry_run") else "a run without a GPU" if rep.get("status") == "no-gpu" else
           "an interrupted or unfinished run" if rep.get("status") in ("interrupted", "running") else None)
    if why:
        print("gpu_results: %s is %s: not kept" % (path, why))
        return 1
    keys = {s["key"] for s in rep["steps"]}
    names = []
    if rep.get("bench") == "full" and "bench" in keys:
        names.append(BENCH)
    if any(k.startswith("test_") for k in keys):
        names.append(CHECK)
    if not names:
        print("gpu_results: %s has neither the tests nor the full bench: not kept" % path)
        return 1
    for name in names:
        shutil.copyfile(path, os.path.join(DATA, name + ".json"))
        shutil.copyfile(os.path.join(out, gpu_check.ARCHIVE), os.path.join(DATA, name + "-logs.tar.gz"))
        print("gpu_results: kept as docs/gpu/%s.json" % name)
    if CHECK in names and os.path.isfile(os.path.join(out, "train_losses.csv")):
        shutil.copyfile(os.path.join(out, "train_losses.csv"), os.path.join(DATA, "train_losses.csv"))
    print("gpu_results: now make docs")
    return 0


def main(argv):
    if argv[1:2] == ["--save"]:
        return save(argv[2]) if len(argv) == 3 else 2
    check, _ = load(CHECK)
    bench, blogs = load(BENCH)
    if check is None:
        print("gpu_results: no docs/gpu/%s.json: nothing to write" % CHECK)
        return 1
    doc = __doc__.splitlines()[2]
    rc = 0
    cuda = os.path.join(REPO, "docs", "cuda.md")
    for path, start, end, text in [
            (cuda, "<!-- gpu-check:start -->", "<!-- gpu-check:end -->", check_block(check)),
            (cuda, "<!-- gpu-speed:start -->", "<!-- gpu-speed:end -->",
             speed_block(bench, blogs) if bench else "<!-- gpu-speed:start -->\nNo benchmark of every size yet."
             "\n<!-- gpu-speed:end -->"),
            (os.path.join(REPO, "README.md"), "<!-- gpu-claim:start -->", "<!-- gpu-claim:end -->",
             claim_block(check, bench, blogs))]:
        rc |= update(path, start, end, text, argv, doc,
                     "%s is stale against docs/gpu/: python3 tools/scripts/gpu_results.py --write" %
                     os.path.relpath(path, REPO))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
