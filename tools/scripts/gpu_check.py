#!/usr/bin/env python3
"""gpu_check.py - the CUDA companion checked on a real NVIDIA GPU (make gpu-check).

usage: gpu_check.py [--dry-run] [--prebuilt[=DIR]] [--bench quick|full] [--only STEP,...]
                    [--budget SECONDS] OUT
       gpu_check.py --stamp DIR     (make gpu-check-build: DIR's binaries are of this tree)
       gpu_check.py --probe DIR     (do DIR's binaries start here? exit 0 yes, 3 no GPU, 1 no)

--only takes step keys (the JSON's "key": build, test_cuda-model, large, ...)
or their first part (test_cuda, train, memcheck, ...); a step whose build is
not in the run assumes an earlier run built it.

Run from the repository root on a machine with an NVIDIA GPU, nvcc and
compute-sanitizer. With --prebuilt it first checks that the binaries `make
gpu-check-build` made on a machine without a GPU (build/gpu-check/prebuilt/,
sent with the tree) are of this tree's sources and start on this GPU, and
builds only when they do not; else it builds everything it runs
(build/gpu-check/sm_XY/, for the GPU's own architecture). Then it runs one
step after another, each with its own time limit, a failed one never
stopping the later ones, the kernels that have never passed on a GPU first:

  environment   nvidia-smi, nvcc, compute-sanitizer, host compiler versions
  prebuilt      (--prebuilt) the binaries' source stamp, and each one started
  build         make -j: test_cuda, test_attn, mhe and bench_cuda by nvcc, the
                CPU mhe (a failed build is retried without warnings as errors,
                so the tests still run; the check fails either way)
  test_cuda *   every group of tests/cuda/test_cuda.cpp, against the CPU library:
                bf16 and TF32 GEMMs (the pipelined tile) first
  test_attn     the attention cores against the CPU's (tensor-core flash too)
  train *       mhe train, 200 steps, on the CPU (started right after the build,
                beside the GPU steps), on the GPU in bf16, TF32 and float32 as
                `mhe train --device cuda` runs by default (deferred, one CUDA graph
                launch a step; the graph's counters reported), then the loss
                curves compared (train-compare)
  large         the device model at T = 256, d_model = 256, every device kind,
                float32, TF32 and bf16 (test_cuda large)
  bench         bench_cuda (--bench quick: the small shapes; full: every size), then
                tools/bench/bench_torch_cuda.py at the same shapes (cuBLAS, SDPA,
                the PyTorch twin) and the two side by side
  budget        the kernels' registers against tools/scripts/cuda_budget.txt
  memcheck, racecheck, synccheck *   compute-sanitizer on test_attn quick and
                on test_cuda's kernel groups (10-100x slower than plain runs), last

OUT gets four files, so that they all come back from a machine that returns
only a few: gpu-check.md and gpu-check.json (the report), gpu-check-logs.tar.gz
(every step's full log, logs/KEY.log) and train_losses.csv. The report and the
archive are rewritten before and after every step, so a run killed at its
time limit still leaves both, with every line a step printed (the test
programs write line by line). The logs themselves are in build/gpu-check/logs/.
The steps share one time budget (--budget, default 450 s): a step never gets
more than what is left, and steps that find no time are reported as skipped;
give the command an outer limit above the budget (docs/cuda.md). Exit status:
0 every step passed, 1 a step failed, timed out or was skipped, 2 usage, 3 no
NVIDIA GPU here (one line; nothing built or run).

--dry-run runs the same machinery (steps, time limits, logs, parsers, curve
comparison, report) with stub commands in place of the GPU programs: what
tests/test_gpu_check.py checks on machines without a GPU. The stubs print in
the real programs' formats; GPU_CHECK_STUB_FAIL=KEY,... makes those steps
fail, GPU_CHECK_STUB_HANG=KEY,... makes them hang (for the time limits),
GPU_CHECK_STUB_DRIFT=x makes the GPU curves drift by x. MHE_NVIDIA_SMI names
the nvidia-smi to ask (tests point it at fakes); MHE_COMMIT names the commit
when the copy has no .git.

Loss curves: the GPU sums in another order than the CPU (tiles, atomics,
warp reductions), so float32 losses differ by rounding from the first step
on and the difference grows slowly as training amplifies it. Bounds, relative
to the CPU's loss at each step: step 1 (same weights, a forward only) 1e-5,
steps 1-50 1e-3, all 200 steps 5e-3, the mean of the last 20 steps 3e-3. TF32
rounds GEMM inputs to 10 mantissa bits (u = 2^-11 = 4.9e-4): step 1 4u, steps
1-50 5e-3, all 2e-2, the last 20 1e-2. bf16 keeps 7 (u = 2^-8): TF32's bounds
times the ratio of the units, 8. Both runs must draw the same batches
(the dumps' tokens are compared) and learn (the last 10 losses below the
first by 0.5 nats).
"""
import datetime
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SELF = os.path.abspath(__file__)
NO_GPU = 3
DEFAULT_BUDGET = 450.0

# the training run every device is compared on: 4 layers of 4 kinds, the bundled text
TRAIN_STEPS = 200
TRAIN_ARGS = ["--data", "examples/data/train.txt", "--steps", str(TRAIN_STEPS), "--batch", "8", "--seq_len", "128",
              "--d_model", "128", "--n_heads", "4", "--n_layers", "4", "--attn", "mha,mhe-mul,mhe-add,gqa",
              "--lr", "1e-3", "--warmup", "20", "--seed", "7", "--log_every", "10"]
U_TF32, U_BF16 = 2.0 ** -11, 2.0 ** -8
CURVE_TOL = {  # first step, steps 1-50, all steps, mean of the last 20 (see the docstring)
    "fp32": {"first": 1e-5, "early": 1e-3, "all": 5e-3, "tail": 3e-3},
    "tf32": {"first": 4 * U_TF32, "early": 5e-3, "all": 2e-2, "tail": 1e-2},
}
CURVE_TOL["bf16"] = {k: v * U_BF16 / U_TF32 for k, v in CURVE_TOL["tf32"].items()}
PRECISIONS = ("fp32", "tf32", "bf16")


def now():
    return time.monotonic()


def say(msg):
    try:
        print("gpu-check: " + msg, flush=True)
    except OSError:  # nobody reads stdout any more: the report files still get written
        pass


def run_quiet(cmd, timeout=20):
    """(exit status, output) of a short command; (None, why) when it cannot run"""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           universal_newlines=True, errors="replace")
        return p.returncode, p.stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, str(e)


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---- the GPU, or the one line that says there is none --------------------------------

class NoGPU(Exception):
    pass


def query_gpu():
    """{name, compute_capability, driver, memory} of the first GPU nvidia-smi lists; NoGPU(why) else"""
    smi = os.environ.get("MHE_NVIDIA_SMI", "nvidia-smi")
    if not shutil.which(smi):
        raise NoGPU("nvidia-smi: not found")
    fields = ["name", "compute_cap", "driver_version", "memory.total"]
    rc, out = run_quiet([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader"])
    if rc != 0:  # an older nvidia-smi has no compute_cap: ask without it, build with -arch=native
        rc2, out2 = run_quiet([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        if rc2 != 0:
            raise NoGPU("nvidia-smi: %s" % (first_line(out) or "exit status %s" % rc))
        rows = [[x.strip() for x in line.split(",")] for line in out2.splitlines() if line.strip()]
        rows = [[r[0], "", r[1], r[2]] for r in rows if len(r) >= 3]
    else:
        rows = [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.strip()]
        rows = [r for r in rows if len(r) >= 4]
    if not rows:
        raise NoGPU("nvidia-smi: no GPU listed%s" % (": " + first_line(out) if first_line(out) else ""))
    r = rows[0]
    return {"name": r[0], "compute_capability": r[1], "driver": r[2], "memory": r[3], "count": len(rows)}


def tool_path(name, env):
    """a CUDA tool from $env, PATH, $CUDA_HOME/bin or /usr/local/cuda/bin; None when absent"""
    if os.environ.get(env):
        return os.environ[env]
    for cand in [shutil.which(name), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name),
                 os.path.join("/usr/local/cuda/bin", name)]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def tool_version(path, pattern):
    if not path:
        return "not found"
    rc, out = run_quiet([path, "--version"])
    m = re.search(pattern, out or "")
    return m.group(1) if m else (first_line(out) or "unknown")


# what the binaries are built from: a prebuilt folder whose stamp differs is of another tree
BIN_SOURCES = ["Makefile", "mhe.h", "mhe_cuda.cuh", "tests/test.h", "tools/bench/bench_cuda.cu", "tools/cli",
               "tests/cuda"]


def sources_hash(paths):
    h = hashlib.sha256()
    files = []
    for f in paths:
        d = os.path.join(REPO, f)
        files += sorted(os.path.join(f, x) for x in os.listdir(d)) if os.path.isdir(d) else [f]
    for f in files:
        p = os.path.join(REPO, f)
        if os.path.isfile(p):
            h.update(f.encode() + b"\0")
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()[:16]


def tree_identity():
    """the commit (when the tree has its .git) and a hash of the sources the check builds"""
    rc, out = run_quiet(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"])
    commit = out.strip() if rc == 0 else None
    if commit:
        rc, st = run_quiet(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"])
        if rc == 0 and st.strip():
            commit += " (with uncommitted changes)"
    return (commit or os.environ.get("MHE_COMMIT") or "unknown (no .git in this copy)",
            sources_hash(["Makefile", "mhe.h", "mhe_cuda.cuh", "tools/cli", "tools/bench", "tools/scripts",
                          "tests/cuda"]))


# ---- prebuilt binaries: made where there is no GPU, checked where there is one ----------

PREBUILT_DIR = "build/gpu-check/prebuilt"
PREBUILT_BINS = ["mhe", "cuda/mhe", "cuda/test_cuda", "cuda/test_attn", "cuda/bench_cuda"]
STAMP = "sources.txt"


def stamp_main(args):
    """--stamp DIR: records the hash of the binaries' sources beside them (make gpu-check-build)"""
    if len(args) != 1:
        print("usage: gpu_check.py --stamp DIR")
        return 2
    missing = [b for b in PREBUILT_BINS if not os.path.isfile(os.path.join(args[0], b))]
    if missing:
        print("gpu-check: %s: no %s: nothing stamped" % (args[0], ", ".join(missing)))
        return 1
    commit, _ = tree_identity()
    write_atomic(os.path.join(args[0], STAMP), "sources %s\ncommit %s\n" % (sources_hash(BIN_SOURCES), commit))
    say("%s: binaries of sources %s (commit %s)" % (args[0], sources_hash(BIN_SOURCES), commit))
    return 0


def probe_main(args):
    """--probe DIR: are DIR's binaries of this tree, and do they start here? One line per check;
    exit 0 every one did, 3 they started and found no CUDA device, 1 otherwise"""
    if len(args) != 1:
        print("usage: gpu_check.py --probe DIR")
        return 2
    d, bad, no_gpu = args[0], 0, 0
    try:
        with open(os.path.join(d, STAMP), encoding="utf-8") as f:
            got = dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)
    except OSError as e:
        print("FAIL %s: no stamp (%s): make gpu-check-build stamps what it builds" % (d, e.strerror))
        return 1
    want = sources_hash(BIN_SOURCES)
    if got.get("sources") != want:
        print("FAIL %s: built from other sources (%s, commit %s; this tree's are %s): make gpu-check-build again" %
              (d, got.get("sources"), got.get("commit", "?").strip(), want))
        return 1
    print("ok %s: binaries of this tree's sources %s (commit %s)" % (d, want, got.get("commit", "?").strip()))
    tiny = "examples/data/tiny_lm.safetensors"
    runs = [("mhe", ["generate", "--model", tiny, "--prompt", "The ", "--n", "8", "--temperature", "0"]),
            ("cuda/mhe", ["generate", "--model", tiny, "--prompt", "The ", "--n", "8", "--temperature", "0",
                          "--device", "cuda"]),
            ("cuda/test_cuda", ["errors"]), ("cuda/test_attn", ["quick"]), ("cuda/bench_cuda", ["--help"])]
    for name, argv in runs:
        exe = os.path.join(d, name)
        rc, out = run_quiet([exe] + argv, timeout=40)
        line = first_line(out) if rc is None else last_error_line(out) if out.strip() else "no output"
        if rc == 0:
            print("ok %s starts: %s" % (name, " ".join(argv)))
        elif re.search(r"no CUDA device", out or ""):
            no_gpu += 1
            print("no-gpu %s starts and finds no CUDA device (exit %s)" % (name, rc))
        else:
            bad += 1
            print("FAIL %s %s: exit %s: %s" % (name, " ".join(argv), rc, line))
    print("RESULT: %d passed, %d failed" % (len(runs) - bad - no_gpu, bad))
    return 1 if bad else NO_GPU if no_gpu else 0


# ---- parsers: a step's log -> (ok, numbers, summary) ---------------------------------

def parse_result(text):
    """the last RESULT line of tests/test.h: (passed, failed) or None"""
    found = re.findall(r"^RESULT: (\d+) passed, (\d+) failed", text, re.M)
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def parse_test(text, rc):
    res = parse_result(text)
    fails = [line for line in text.splitlines() if line.startswith("FAIL")]
    m = re.search(r"^(test_\w+): (no CUDA device.*)$", text, re.M)
    if m:
        return False, {}, "%s: %s" % (m.group(1), m.group(2))
    if res is None:
        return False, {}, "no RESULT line (exit %s): the program died" % rc
    nums = {"passed": res[0], "failed": res[1]}
    summary = "%d passed, %d failed" % res
    if fails:
        summary += "; first: " + fails[0][:160]
    return rc == 0 and res[1] == 0, nums, summary


LARGE_RE = re.compile(r"^large (\S+) B=\d+ T=(\d+) d_model=(\d+) (fp32|tf32|bf16): loss (\S+) logits (\S+) gradient (\S+) "
                      r"\(([^)]*)\); bounds (\S+) (\S+) (\S+)$", re.M)


def parse_large(text, rc):
    ok, nums, summary = parse_test(text, rc)
    rows = LARGE_RE.findall(text)
    if not rows:
        return False, nums, summary + "; no summary lines"
    parts = []
    for prec in PRECISIONS:
        mine = [r for r in rows if r[3] == prec]
        if not mine:
            ok = False
            parts.append("%s: no lines" % prec)
            continue
        worst = {}
        for name, i in (("loss", 4), ("logits", 5), ("gradient", 6)):
            vals = [(float(r[i]), r[0]) for r in mine]
            v, kind = max(vals)
            worst[name] = v
            nums["%s_max_%s" % (prec, name)] = v
            nums["%s_max_%s_kind" % (prec, name)] = kind
        nums["%s_kinds" % prec] = len(mine)
        nums["%s_bounds" % prec] = [float(mine[0][8]), float(mine[0][9]), float(mine[0][10])]
        parts.append("%s max: loss %.2g, logits %.2g, gradient %.2g (%d kinds)" %
                     (prec, worst["loss"], worst["logits"], worst["gradient"], len(mine)))
    nums["T"], nums["d_model"] = int(rows[0][1]), int(rows[0][2])
    return ok, nums, "T=%d d_model=%d; %s; %s" % (nums["T"], nums["d_model"], "; ".join(parts), summary)


def parse_sanitizer(text, rc):
    ok, nums, summary = parse_test(text, rc)
    m = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
    r = re.findall(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
    if r:
        nums["hazards"], nums["errors"], nums["warnings"] = int(r[-1][0]), int(r[-1][1]), int(r[-1][2])
    elif m:
        nums["errors"] = int(m[-1])
    else:
        return False, nums, "no sanitizer summary (exit %s); %s" % (rc, summary)
    ok = ok and nums["errors"] == 0
    extra = ", %d hazards" % nums["hazards"] if "hazards" in nums else ""
    return ok, nums, "%d sanitizer errors%s; %s" % (nums["errors"], extra, summary)


def parse_build(text, rc):
    return rc == 0, {}, "ok" if rc == 0 else "failed (exit %s): %s" % (rc, last_error_line(text))


def last_error_line(text):
    """the line of a log that best says why it failed (never the command line the log starts with)"""
    lines = [x.strip() for x in text.splitlines() if x.strip() and not x.startswith("$ ")]
    for pat in (r"^FAIL", r"\berror\b|Error", r"^(mhe|bench_cuda|test_\w+|make): "):
        hits = [x for x in lines if re.search(pat, x)]
        if hits:
            return hits[0][:200]
    return lines[-1][:200] if lines else "no output"


def parse_budget(text, rc):
    m = re.search(r"cuda_budget: (\d+) kernel builds checked, (\d+) over budget", text)
    if not m:
        return False, {}, "no budget summary (exit %s)" % rc
    return rc == 0, {"kernels": int(m.group(1)), "over": int(m.group(2))}, m.group(0)


def parse_probe(text, rc):
    fails = [x for x in text.splitlines() if x.startswith("FAIL")]
    if rc == 0:
        return True, {}, "of this tree, every binary started"
    if rc == NO_GPU and not fails:
        return False, {}, "they start and find no CUDA device (exit 3)"
    return False, {}, (fails[0][5:205] if fails else "exit %s: %s" % (rc, last_error_line(text))) + "; building"


def parse_env(text, rc):
    return rc == 0, {}, "versions and nvidia-smi in the log"


def parse_train(text, rc):
    nums = {}
    m = re.findall(r"^final train loss (\S+)", text, re.M)
    if m:
        nums["final_loss"] = float(m[-1])
    t = re.findall(r"^step\s+(\d+)/(\d+)\s+loss (\S+)\s+lr \S+\s+(\d+) tok/s\s+(\d+) ms/step", text, re.M)
    if t:
        nums["tokens_per_s"], nums["ms_per_step"] = float(t[-1][3]), float(t[-1][4])
    d = re.search(r"^device: (.*)$", text, re.M)
    if d:
        nums["device"] = d.group(1)
    g = re.search(r"^device graph: (\d+) built, (\d+) steps launched as one, (\d+) nodes patched", text, re.M)
    if g:
        nums["graph_builds"], nums["graph_launches"], nums["graph_patches"] = (int(x) for x in g.groups())
    ok = rc == 0 and "final_loss" in nums
    summary = "final loss %.4f, %.0f tok/s" % (nums["final_loss"], nums.get("tokens_per_s", 0)) if ok else \
        "failed (exit %s): %s" % (rc, last_error_line(text))
    if ok and "device" in nums:  # the device's default path: one graph launch a step
        if not nums.get("graph_launches"):
            ok = False
            summary += "; the steps did not run as a CUDA graph: %s" % (
                last_error_line(text) if "refused" in text else "no 'device graph:' line")
        else:
            summary += "; graph: %d built, %d of %d steps as one launch, %d nodes patched" % (
                nums["graph_builds"], nums["graph_launches"], TRAIN_STEPS, nums["graph_patches"])
    return ok, nums, summary


def parse_compare(text, rc):
    nums = {}
    for prec, key, val in re.findall(r"^(fp32|tf32|bf16) (\w+) (\S+)$", text, re.M):
        try:
            nums["%s_%s" % (prec, key)] = float(val)
        except ValueError:
            nums["%s_%s" % (prec, key)] = val
    fails = [x for x in text.splitlines() if x.startswith("FAIL")]
    parts = []
    if "fp32_final_cpu" in nums:
        parts.append("step %d loss CPU %.4f" % (TRAIN_STEPS, nums["fp32_final_cpu"]))
    for prec in PRECISIONS:
        if "%s_final_gpu" % prec in nums:
            parts.append("GPU %s %.4f (rel %.2g, worst step %.2g)" % (prec, nums["%s_final_gpu" % prec],
                                                                      nums["%s_final_rel" % prec],
                                                                      nums["%s_max_rel" % prec]))
    summary = ", ".join(parts) or "no comparison"
    if fails:
        summary += "; " + fails[0][:160]
    return rc == 0 and not fails and bool(parts), nums, summary


# the shape's name ends in neither a digit nor a space; bench_torch_cuda's rows start with "cuBLAS", never match
GEMM_RE = re.compile(r"^C=(\d+) (\S.*?[^\d\s])\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\((\d+) x (\d+) x (\d+)\)$",
                     re.M)
ATTN_RE = re.compile(r"^\s*(\d+)\s+([\d.]+) \|\s+([\d.]+)\s+([\d.]+) \|\s+([\d.]+) \(([\d.]+)x\)\s+([\d.]+) \|\s+"
                     r"([\d.]+) \(([\d.]+)x\)\s*$", re.M)
TRAIN_RE = re.compile(r"^(\S+)\s+(\d+) tokens/s\s+([\d.]+) ms/step\s+device memory ([\d.]+) MB", re.M)
TRAIN_GRAPH_RE = re.compile(r"^(\S+)\s+\d+ tokens/s\s.*\s+graph ([\d.]+)x$", re.M)  # the graph's speed-up
DECODE_RE = re.compile(r"^decode (\S+)\s+([\d.]+) us/token\s+KV cache (\d+) bytes/token$", re.M)
# tools/bench/bench_torch_cuda.py's side-by-side rows: mhe / PyTorch speed ratios
SIDE_ATTN_RE = re.compile(r"^L=(\d+)\s+[\d.]+ \|\s+[\d.]+\s+([\d.]+)x", re.M)
# the same row's bf16 pair: mhe's tiled core on the tensor cores against SDPA in bf16
SIDE_ATTN16_RE = re.compile(r"^L=(\d+)\s+[\d.]+ \|\s+[\d.]+\s+[\d.]+x \|\s+[\d.]+ \|\s+[\d.]+\s+([\d.]+)x", re.M)
ATTN16_HEAD = ", bf16 tensor cores:"  # bench_cuda --bf16 --attn-only's table follows this
SIDE_TRAIN_RE = re.compile(r"^(mha|mhe-mul|mhe-add)\s+\d+ \|\s+\d+\s+([\d.]+)x", re.M)
# every precision of a side-by-side training row (mhe | twin ratio, three times; "-" where a side has none)
SIDE_TRAIN3_RE = re.compile(r"^((?:mha|mhe-mul|mhe-add)(?:-124M)?)\s+(\S+) \|\s+(\S+)\s+\S+ \|\s+(\S+) \|\s+(\S+)\s+\S+ \|"
                            r"\s+(\S+) \|\s+(\S+)\s+\S+$", re.M)
# a side-by-side GEMM row: mhe, cuBLAS and the ratio in float32, TF32 and bf16
SIDE_GEMM_RE = re.compile(r"^C=(\d+)\s+(\S.*?\S)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\s+"
                          r"([\d.]+)\s+([\d.]+)\s+[\d.]+x$", re.M)
SIDE_DECODE_RE = re.compile(r"^decode (mha|mhe-mul|mhe-add)\s+[\d.]+ \|\s+[\d.]+\s+([\d.]+)x", re.M)


def parse_bench(text, rc):
    nums = {}
    if re.search(r"no CUDA device", text):
        return False, nums, "bench_cuda found no device"
    g = GEMM_RE.findall(text)
    if g:
        nums["gemm_best_simt_tflops"] = max(float(x[2]) for x in g)
        nums["gemm_best_tf32_tflops"] = max(float(x[3]) for x in g)
        nums["gemm_best_bf16_tflops"] = max(float(x[4]) for x in g)
    cut = text.find(ATTN16_HEAD)  # the float32 table comes first; the bf16 one (if run) after it
    a = ATTN_RE.findall(text if cut < 0 else text[:cut])
    for row in a:
        L = row[0]
        nums["attn_L%s_mha_ms" % L] = [float(row[1]), float(row[2])]
        nums["attn_L%s_mhe_mul_ratio" % L] = float(row[5])
        nums["attn_L%s_mhe_add_ratio" % L] = float(row[8])
    for row in ATTN_RE.findall(text[cut:]) if cut >= 0 else []:
        nums["attn_L%s_mha_bf16_ms" % row[0]] = [float(row[1]), float(row[2])]
    for kind, tps, ms, mem in TRAIN_RE.findall(text):
        nums["train_%s_tokens_per_s" % kind.replace("-", "_")] = float(tps)
    for kind, ratio in TRAIN_GRAPH_RE.findall(text):
        nums["train_%s_graph_x" % kind.replace("-", "_")] = float(ratio)
    for L, ratio in SIDE_ATTN_RE.findall(text):
        nums["attn_L%s_mha_vs_sdpa" % L] = float(ratio)
    for L, ratio in SIDE_ATTN16_RE.findall(text):
        nums["attn_L%s_mha_bf16_vs_sdpa" % L] = float(ratio)
    for kind, ratio in SIDE_TRAIN_RE.findall(text):
        nums["train_%s_vs_torch" % kind.replace("-", "_")] = float(ratio)
    for kind, us, kv in DECODE_RE.findall(text):
        nums["decode_%s_us" % kind.replace("-", "_")] = float(us)
    for kind, ratio in SIDE_DECODE_RE.findall(text):
        nums["decode_%s_vs_torch" % kind.replace("-", "_")] = float(ratio)
    num = lambda x: float(x) if re.match(r"^[\d.]+$", x) else None  # noqa: E731
    side = {}
    for row in SIDE_GEMM_RE.findall(text):  # [mhe, cuBLAS] TFLOP/s per precision
        side["C=%s %s" % row[:2]] = {p: [float(row[2 + 2 * i]), float(row[3 + 2 * i])] for i, p in enumerate(PRECISIONS)}
    if side:
        nums["gemm_side"] = side
    side = {}
    for row in SIDE_TRAIN3_RE.findall(text):  # [mhe, twin] tokens/s per precision
        side[row[0]] = {p: [num(row[1 + 2 * i]), num(row[2 + 2 * i])] for i, p in enumerate(PRECISIONS)}
    if side:
        nums["train_side"] = side
    ok = rc == 0 and bool(g) and bool(a) and len(TRAIN_RE.findall(text)) >= 3
    parts = []
    if g:
        parts.append("GEMM best %.1f TFLOP/s simt, %.1f tf32, %.1f bf16" % (
            nums["gemm_best_simt_tflops"], nums["gemm_best_tf32_tflops"], nums["gemm_best_bf16_tflops"]))
    if a:
        parts.append("attention L=%s fwd|bwd mha %s|%s ms, mhe-mul %sx, mhe-add %sx" % (a[0][0], a[0][1], a[0][2],
                                                                                       a[0][5], a[0][8]))
    t = TRAIN_RE.findall(text)[:3]
    if t:
        parts.append("training " + ", ".join("%s %s tok/s" % (k, v) for k, v, _, _ in t))
    side = SIDE_ATTN_RE.findall(text)
    if side:
        parts.append("against PyTorch: attention L=%s %sx SDPA" % side[-1])
    side = SIDE_TRAIN_RE.findall(text)
    if side:
        parts.append("training mha %sx the twin" % side[0][1])
    d = DECODE_RE.findall(text)
    if d:
        parts.append("decoding " + ", ".join("%s %s us/token" % (k, us) for k, us, _ in d[:3]))
    return ok, nums, "; ".join(parts) or "no numbers (exit %s)" % rc


PARSERS = {"env": parse_env, "probe": parse_probe, "build": parse_build, "budget": parse_budget, "test": parse_test,
           "large": parse_large, "sanitizer": parse_sanitizer, "train": parse_train, "compare": parse_compare,
           "bench": parse_bench}


# ---- the training comparison -----------------------------------------------------------

def read_dump(path):
    """mhe train --dump-batches FILE: (header dict, [(step, loss, lr, grad_norm, tokens bytes)])"""
    with open(path, "rb") as f:
        data = f.read()
    end = data.find(b"\nend\n")
    if not data.startswith(b"mhe-batches 1\n") or end < 0:
        raise ValueError("%s: not an mhe batch dump" % path)
    head = {}
    for line in data[:end].decode("utf-8", "replace").splitlines()[1:]:
        k, _, v = line.partition(" ") if " " in line and "=" not in line.split(" ")[0] else line.partition("=")
        head[k] = v
    bt = int(head["batch"]) * int(head["seq_len"])
    bts = int(head["batch"]) * int(head["src_len"])
    size = 16 + 8 * bt + 4 * bts
    recs, pos = [], end + 5
    while pos + size <= len(data):
        step, loss, lr, gn = struct.unpack_from("<ifff", data, pos)
        recs.append((step, loss, lr, gn, data[pos + 16:pos + 16 + 4 * bt]))
        pos += size
    if pos != len(data):
        raise ValueError("%s: %d bytes after the last whole record" % (path, len(data) - pos))
    return head, recs


def compare_curves(cpu, dev, prec, out):
    """checks dev's loss curve against cpu's with CURVE_TOL[prec]; prints and returns the failure count"""
    tol = CURVE_TOL[prec]
    bad = 0

    def check(ok, what):
        nonlocal bad
        if not ok:
            bad += 1
            out("FAIL %s: %s" % (prec, what))
        return ok

    if not check(len(cpu) == len(dev) and len(cpu) > 0, "%d GPU steps against %d CPU steps" % (len(dev), len(cpu))):
        return bad
    check(all(a[0] == b[0] for a, b in zip(cpu, dev)), "the step numbers differ")
    same = sum(a[4] == b[4] for a, b in zip(cpu, dev))
    check(same == len(cpu), "the batches differ at %d of %d steps (another RNG stream)" % (len(cpu) - same, len(cpu)))
    check(all(a[2] == b[2] for a, b in zip(cpu, dev)), "the learning rates differ")
    finite = all(math.isfinite(r[1]) for r in cpu + dev)
    if not check(finite, "a loss is not finite"):
        return bad
    rel = [abs(b[1] - a[1]) / abs(a[1]) for a, b in zip(cpu, dev)]
    early = rel[:50]
    tail = rel[-20:]
    gn = max(abs(b[3] - a[3]) / max(abs(a[3]), 1e-12) for a, b in zip(cpu, dev))
    out("%s first_rel %.3g" % (prec, rel[0]))
    out("%s early_max_rel %.3g" % (prec, max(early)))
    out("%s max_rel %.3g" % (prec, max(rel)))
    out("%s max_rel_step %d" % (prec, dev[rel.index(max(rel))][0] + 1))
    out("%s tail_mean_rel %.3g" % (prec, sum(tail) / len(tail)))
    out("%s grad_norm_max_rel %.3g" % (prec, gn))
    out("%s final_cpu %.6f" % (prec, cpu[-1][1]))
    out("%s final_gpu %.6f" % (prec, dev[-1][1]))
    out("%s final_rel %.3g" % (prec, rel[-1]))
    check(rel[0] <= tol["first"], "step 1 (same weights) rel %.3g > %.3g" % (rel[0], tol["first"]))
    check(max(early) <= tol["early"], "steps 1-%d max rel %.3g > %.3g" % (len(early), max(early), tol["early"]))
    check(max(rel) <= tol["all"], "all steps max rel %.3g > %.3g" % (max(rel), tol["all"]))
    check(sum(tail) / len(tail) <= tol["tail"], "last %d steps mean rel %.3g > %.3g" %
          (len(tail), sum(tail) / len(tail), tol["tail"]))
    for name, curve in (("CPU", cpu), ("GPU", dev)):
        last = sum(r[1] for r in curve[-10:]) / len(curve[-10:])
        check(last < curve[0][1] - 0.5, "%s does not learn: %.4f -> %.4f" % (name, curve[0][1], last))
    return bad


def compare_main(args):
    """--compare-train CSV CPU GPU [TF32 [BF16]]: the curves against the CPU's; writes CSV (step, losses)"""
    if len(args) < 3:
        print("usage: gpu_check.py --compare-train CSV CPU.batches GPU.batches [TF32.batches [BF16.batches]]")
        return 2
    csv_path, paths = args[0], args[1:]
    curves, names = [], []  # the CPU's, then each GPU precision that finished
    for i, p in enumerate(paths):
        prec = PRECISIONS[i - 1] if 0 < i <= len(PRECISIONS) else None
        if i >= 2 and not os.path.exists(p):  # that run failed: its own step says so
            print("%s: not compared (no %s: the %s run did not finish)" % (prec, p, prec.upper()))
            continue
        try:
            curves.append(read_dump(p)[1])
            names.append(prec)
        except (OSError, ValueError, KeyError, struct.error) as e:
            print("FAIL cannot read %s: %s" % (p, e))
            return 1
    print("tolerances (relative to the CPU's loss): %s" % json.dumps(CURVE_TOL, sort_keys=True))
    bad = 0
    for prec, c in zip(names[1:], curves[1:]):
        bad += compare_curves(curves[0], c, prec, print)
    with open(csv_path, "w", encoding="utf-8") as f:
        f.write("step,cpu,%s\n" % ",".join("gpu_" + n for n in names[1:]))
        for i, r in enumerate(curves[0]):
            f.write("%d,%s\n" % (r[0] + 1, ",".join("%.7g" % c[i][1] if i < len(c) else "" for c in curves)))
    for i in (0, 9, 49, 99, 149, len(curves[0]) - 1):
        if i < len(curves[0]):
            print("step %4d  loss CPU %.5f  %s" % (curves[0][i][0] + 1, curves[0][i][1], "  ".join(
                "%s %.5f" % ("GPU" if n == "fp32" else n.upper(), c[i][1]) for n, c in zip(names[1:], curves[1:])
                if i < len(c))))
    print("RESULT: curve comparison, %d failed" % bad)
    return 1 if bad else 0


# ---- stubs for --dry-run ---------------------------------------------------------------

def stub_test_output(prog, group, fail):
    lines = ["%s: device stub GPU (compute capability 9.0)" % prog]
    n = {"gemm": 40, "tf32": 40, "bf16": 40, "norm": 27, "elementwise": 9, "model": 55, "train": 17, "decode": 19,
         "kinds": 120, "prefill": 30, "eval": 8, "errors": 8, "quick": 86, "attention": 243}.get(group, 20)
    if fail:
        lines.append("FAIL tests/cuda/%s.cpp:101: %s stub: rel err 0.5" % (prog, group))
    lines.append("RESULT: %d passed, %d failed" % (n - fail, fail))
    return "\n".join(lines) + "\n"


def stub_large_output(fail):
    lines = ["test_cuda: device stub GPU (compute capability 9.0)"]
    for kind in ("mha", "sha", "mqa", "gqa", "skv", "el-att", "mhe-add", "mhe-mul", "collab"):
        lines.append("large %s B=2 T=256 d_model=256 fp32: loss 1.2e-07 logits 3.5e-07 gradient 2.1e-06 "
                     "(layers.0.attn.wq.weight); bounds 1e-05 1e-05 0.0004" % kind)
        lines.append("large %s B=2 T=256 d_model=256 tf32: loss 1e-06 logits %s gradient 0.0015 "
                     "(layers.0.norm1.weight); bounds 0.00049 0.0039 0.016" % (kind, "0.02" if fail else "0.00048"))
        lines.append("large %s B=2 T=256 d_model=256 bf16: loss 8e-06 logits 0.0041 gradient 0.012 "
                     "(layers.0.norm1.weight); bounds 0.0039 0.031 0.12" % kind)
    if fail:
        lines.append("FAIL tests/cuda/test_cuda.cpp:300: large mha tf32: logits rel err 0.02 (bound 0.0039)")
    lines.append("RESULT: %d passed, %d failed" % (91 - fail, fail))
    return "\n".join(lines) + "\n"


def stub_bench_output():
    return """device: stub GPU (compute capability 9.0)

GEMM, TFLOP/s (float32 SIMT | TF32 and bf16 mma.sync), 1024 tokens
shape (M x N x K)                simt     tf32     bf16
C=768 QKV projection            14.21    61.30   120.50   (1024 x 2304 x 768)
C=768 W^O                       12.02    48.77    97.10   (1024 x 768 x 768)
C=768 MLP up                    15.10    70.02   140.25   (1024 x 3072 x 768)
C=768 MLP down                  13.33    55.41   110.00   (1024 x 768 x 3072)
C=768 weight gradient (A^T)     11.85    44.90    90.75   (768 x 3072 x 1024)
C=768 LM head (32000)           16.02    80.11   160.40   (1024 x 32000 x 768)

attention, causal, 12 heads of 64, B*L = 8192 tokens: forward | backward ms (ratio to mha)
     L                  mha                      mhe-mul                      mhe-add
   512      0.41 |     1.22      0.35 |   1.01 (0.83x)      0.38 |   1.10 (0.91x)
  1024      0.80 |     2.40      0.66 |   1.95 (0.82x)      0.74 |   2.15 (0.90x)
attention activations kept per token and layer: mha Q,K,V 2304 floats; mhe-mul/mhe-add 192 (1/12)

training a byte-level GPT (random bytes): tokens/s and device memory
mha        612000 tokens/s      1.7 ms/step  device memory 40.1 MB (library 30.2 MB)
mhe-mul    655000 tokens/s      1.6 ms/step  device memory 36.0 MB (library 27.9 MB)
mhe-add    640000 tokens/s      1.6 ms/step  device memory 36.2 MB (library 28.0 MB)

decoding with the KV cache, d_model 128, 2 layers, 8 heads, prompt 32, 32 new tokens, batch 1
decode mha          210.5 us/token  KV cache 2048 bytes/token
decode mhe-mul      190.2 us/token  KV cache 256 bytes/token
decode mhe-add      195.0 us/token  KV cache 256 bytes/token

== side by side on stub GPU: mhe (bench_cuda) against PyTorch; ratio = mhe speed / PyTorch speed

attention fwd+bwd ms, causal, 12 heads of 64   mha fp32 | SDPA fp32  ratio | SDPA bf16 | mhe-mul fp32 | mhe-add fp32
L=512                                              1.63 |      1.37  0.84x |      0.29 |         1.36 |         1.48
L=1024                                             3.20 |      1.91  0.60x |      0.33 |         2.61 |         2.89

training tokens/s   mhe fp32 | twin fp32  ratio | mhe tf32 | twin tf32  ratio | mhe bf16 | twin bf16 autocast  ratio
mha                   612000 |    500000  1.22x |        - |    480000      - |        - |             700000      -
"""


def stub_write_dump(path, gpu, prec, drift):
    """a batch dump as mhe train writes it: a falling curve, the GPU's a little off the CPU's"""
    B, T = 2, 4
    with open(path, "wb") as f:
        f.write(("mhe-batches 1\nbatch %d\nseq_len %d\nsrc_len 0\nsteps %d\nfirst_step 0\ncorpus_tokens 100\n"
                 "corpus_fnv1a64 0000000000000000\nmodel.d_model=128\ntrain.steps=%d\nend\n" %
                 (B, T, TRAIN_STEPS, TRAIN_STEPS)).encode())
        for s in range(TRAIN_STEPS):
            loss = 2.0 + 3.5 * math.exp(-s / 60.0)
            off = {"fp32": 1e-6, "tf32": 1e-4, "bf16": 8e-4}[prec] * math.sin(s) * (1 + s / 50.0) if gpu else 0.0
            loss *= 1 + off + (drift * s / TRAIN_STEPS if gpu else 0.0)
            lr = 1e-3 * min(1.0, (s + 1) / 20.0)
            f.write(struct.pack("<ifff", s, loss, lr, 0.5 + 0.1 * math.cos(s)))
            f.write(struct.pack("<%di" % (2 * B * T), *[(s * 7 + i) % 256 for i in range(2 * B * T)]))


def stub_main(args):
    """--stub KEY KIND -- CMD...: prints what CMD would (fails or hangs when asked) instead of running it"""
    key, kind, cmd = args[0], args[1], args[3:]
    fail = key in os.environ.get("GPU_CHECK_STUB_FAIL", "").split(",")
    if key in os.environ.get("GPU_CHECK_STUB_HANG", "").split(","):
        print("stub %s: hanging" % key, flush=True)
        time.sleep(float(os.environ.get("GPU_CHECK_STUB_HANG_S", "60")))
        return 0
    if kind == "env":
        print("stub environment: no nvidia-smi asked")
    elif kind == "probe":
        if fail:
            print("FAIL %s: built from other sources (stub)" % cmd[-1])
            return 1
        print("ok %s: binaries of this tree's sources (stub)" % cmd[-1])
        print("RESULT: 5 passed, 0 failed")
    elif kind == "build":
        print("make: stub build of %s" % " ".join(a for a in cmd[3:] if "/" in a))
        if fail:
            print("tests/cuda/test_cuda.cpp(12): error: stub failure")
            return 2
    elif kind == "budget":
        print("cuda_budget: 30 kernel builds checked, %d over budget" % fail)
        return 1 if fail else 0
    elif kind in ("test", "sanitizer"):
        hits = [i for i, a in enumerate(cmd) if os.path.basename(a).startswith("test_")]
        if hits:
            prog = os.path.basename(cmd[hits[0]])
            group = cmd[hits[0] + 1] if hits[0] + 1 < len(cmd) else "attention"
        else:  # a script (tests/cuda/cli.sh)
            prog, group = os.path.basename(cmd[1] if len(cmd) > 1 else cmd[0]), "cli"
        text = stub_test_output(prog, group, 1 if fail and kind == "test" else 0)
        if kind == "sanitizer":
            tool = cmd[cmd.index("--tool") + 1]
            text = "========= COMPUTE-SANITIZER\n" + text
            errs = 1 if fail else 0
            if tool == "racecheck":
                text += "========= RACECHECK SUMMARY: %d hazards displayed (%d errors, 0 warnings)\n" % (errs, errs)
            else:
                text += "========= ERROR SUMMARY: %d errors\n" % errs
            sys.stdout.write(text)
            return 9 if fail else 0
        sys.stdout.write(text)
        return 1 if fail else 0
    elif kind == "large":
        sys.stdout.write(stub_large_output(1 if fail else 0))
        return 1 if fail else 0
    elif kind == "train":
        dump = cmd[cmd.index("--dump-batches") + 1]
        gpu = "cuda" in cmd
        prec = cmd[cmd.index("--precision") + 1] if "--precision" in cmd else "fp32"
        if gpu:
            print("device: stub GPU (compute capability 9.0)%s" % {"fp32": "", "tf32": ", TF32 GEMMs",
                                                                   "bf16": ", bf16 GEMMs"}[prec])
        if fail:
            print("mhe: step 3: stub failure")
            return 1
        drift = float(os.environ.get("GPU_CHECK_STUB_DRIFT", "0")) if gpu else 0.0
        stub_write_dump(dump, gpu, prec, drift)
        for s in range(10, TRAIN_STEPS + 1, 10):
            print("step %6d/%d  loss %.4f  lr 1.00e-03    50000 tok/s     20 ms/step  left    1s" %
                  (s, TRAIN_STEPS, 2.0 + 3.5 * math.exp(-s / 60.0)))
        print("final train loss %.4f" % (2.0 + 3.5 * math.exp(-(TRAIN_STEPS - 1) / 60.0)))
        if gpu:
            print("device graph: 1 built, %d steps launched as one, %d nodes patched" % (TRAIN_STEPS - 1,
                                                                                           7 * (TRAIN_STEPS - 2)))
    elif kind == "compare":
        return compare_main(cmd[cmd.index("--compare-train") + 1:])
    elif kind == "bench":
        sys.stdout.write(stub_bench_output())
        if fail:
            print("bench_cuda: stub failure")
            return 1
    return 0


# ---- steps ----------------------------------------------------------------------------

class Step:
    def __init__(self, key, title, cmd, timeout, kind, needs=None, env=None, only_after_failed=None,
                 background=False):
        self.key, self.title, self.cmd, self.timeout, self.kind = key, title, cmd, timeout, kind
        self.background = background  # starts as soon as its needs are met, runs beside the steps before it
        self.needs = needs or []   # lists of keys: one of each list must have passed (when in the plan)
        self.env = env or {}
        self.only_after_failed = only_after_failed  # a key: run only when that step ran and did not pass
        self.rec = {"key": key, "title": title, "command": " ".join(shlex.quote(c) for c in cmd), "status": "pending",
                    "exit": None, "seconds": None, "timeout_s": timeout, "started_s": None, "numbers": {},
                    "summary": "",
                    "log": "logs/%s.log" % key}


def plan(bdir, arch_flag, gpu_arch, ncpu, relaxed_flags, sanitizer, only, prebuilt, bench):
    """the steps, in the order they run: what has never passed on a GPU first, the sanitizers last.
    BIN/ in a command is the binaries' folder, known once the prebuilt check or the build is done."""
    cu = "BIN/cuda"
    test_cuda, test_attn = cu + "/test_cuda", cu + "/test_attn"
    targets = [os.path.join(bdir, "cuda", x) for x in ("test_cuda", "test_attn", "mhe", "bench_cuda")] + \
        [os.path.join(bdir, "mhe")]
    make = ["make", "-j%d" % ncpu, "B=" + bdir, "CUDA_ARCH=" + arch_flag]
    if os.environ.get("NVCC"):
        make.append("NVCC=" + os.environ["NVCC"])
    built = [["prebuilt", "build", "build-relaxed"]]
    env_cmd = ("echo '== nvidia-smi'; ${MHE_NVIDIA_SMI:-nvidia-smi}; echo '== nvcc'; ${NVCC:-nvcc} --version; "
               "echo '== compute-sanitizer'; %s --version; echo '== host'; uname -a; nproc; "
               "${CXX:-g++} --version | head -n 1; python3 --version" % shlex.quote(sanitizer or "compute-sanitizer"))
    s = [Step("environment", "environment", ["sh", "-c", env_cmd], 30, "env")]
    if prebuilt:
        s.append(Step("prebuilt", "prebuilt binaries (%s): of this tree, start here" % prebuilt,
                      ["python3", SELF, "--probe", prebuilt], 60, "probe"))
    s += [Step("build", "build for %s (make -j%d)" % (gpu_arch, ncpu), make + targets, 240, "build",
               only_after_failed="prebuilt" if prebuilt else None),
          Step("build-relaxed", "build again, warnings allowed", make + ["NVFLAGS=" + relaxed_flags] + targets, 240,
               "build", only_after_failed="build")]
    tdir = os.path.join(bdir, "train")
    runs = [("train-cpu", "mhe train, CPU, %d steps" % TRAIN_STEPS, "BIN/mhe", []),
            ("train-gpu-bf16", "mhe train --device cuda --precision bf16 (graph), %d steps" % TRAIN_STEPS,
             cu + "/mhe", ["--device", "cuda", "--precision", "bf16"]),
            ("train-gpu-tf32", "mhe train --device cuda --precision tf32 (graph), %d steps" % TRAIN_STEPS,
             cu + "/mhe", ["--device", "cuda", "--precision", "tf32"]),
            ("train-gpu", "mhe train --device cuda (graph), %d steps" % TRAIN_STEPS, cu + "/mhe",
             ["--device", "cuda"])]
    train = []
    for key, title, exe, extra in runs:
        cmd = [exe, "train"] + TRAIN_ARGS + extra + ["--out", os.path.join(tdir, key + ".safetensors"),
                                                     "--dump-batches", os.path.join(tdir, key + ".batches")]
        cpu = key == "train-cpu"  # beside the GPU tests, leaving them two cores for their CPU references
        train.append(Step(key, title, cmd, 300 if cpu else 45, "train", built,
                          {"OMP_NUM_THREADS": str(max(1, ncpu - 2))} if cpu else {}, background=cpu))
    s.append(train[0])
    tc = lambda g, title=None: Step("test_cuda-" + g, title or "test_cuda " + g, [test_cuda, g], 45, "test", built)  # noqa: E731
    # never passed on a GPU: bf16 GEMMs, the pipelined tensor-core tile (TF32 and bf16, its epilogues),
    # the tensor-core flash core (test_attn), the deferred trainer and the graph (train, curve, mhe train)
    s += [tc("bf16", "test_cuda bf16 (bf16 mma, pipelined tile, epilogues)"),
          tc("tf32", "test_cuda tf32 (pipelined tile, epilogues)"), tc("gemm"),
          Step("test_attn", "test_attn (every case; TF32/bf16 tensor-core flash)", [test_attn], 45, "test", built),
          tc("train", "test_cuda train (deferred trainer, graph bit for bit)"),
          tc("curve", "test_cuda curve (200 steps per precision, graph)")]
    s += train[1:]
    s.append(Step("train-compare", "loss curves: GPU bf16, TF32 and fp32 (graph) against the CPU",
                  ["python3", SELF, "--compare-train", "OUT/train_losses.csv"] +
                  [os.path.join(tdir, k + ".batches") for k in ("train-cpu", "train-gpu", "train-gpu-tf32",
                                                                "train-gpu-bf16")],
                  30, "compare", [["train-cpu"], ["train-gpu"]]))
    s.append(Step("large", "model at T=256, d_model=256, fp32, TF32 and bf16", [test_cuda, "large"], 60, "large",
                  built))
    # bench_cuda, then the same shapes through PyTorch CUDA beside it (tools/bench/bench_torch_cuda.py;
    # without PyTorch it prints bench_cuda's rows alone)
    s.append(Step("bench", "bench_cuda%s beside PyTorch CUDA" % (" --quick" if bench == "quick" else " (every size)"),
                  ["python3", "tools/bench/bench_torch_cuda.py"] + (["--quick"] if bench == "quick" else []) +
                  ["--bench-cuda", cu + "/bench_cuda", "--mhe", "BIN/mhe"], 120 if bench == "quick" else 420, "bench",
                  built))
    # what passed on the H200 before
    for g in ("norm", "elementwise", "model", "kinds", "decode", "prefill", "eval", "errors", "features", "encdec",
              "hash"):
        s.append(tc(g))
    s.append(Step("cli", "mhe eval, generate --device cuda against the CPU path", ["sh", "tests/cuda/cli.sh",
                                                                                    cu + "/mhe"], 45, "test", built))
    if gpu_arch in ("sm_80", "sm_90"):
        s.append(Step("budget", "kernel registers within tools/scripts/cuda_budget.txt",
                      ["python3", "tools/scripts/cuda_budget.py", cu + "/ptxas.log", "tools/scripts/cuda_budget.txt"],
                      30, "budget", built))
    san = sanitizer or "compute-sanitizer"
    for tool, groups in (("memcheck", "gemm,tf32,bf16,norm,elementwise,model"),
                         ("racecheck", "gemm,tf32,bf16,norm,elementwise"), ("synccheck", "gemm,tf32,bf16,norm,elementwise")):
        base = [san, "--tool", tool, "--error-exitcode", "9"]
        s.append(Step("%s-test_attn" % tool, "%s: test_attn quick" % tool, base + [test_attn, "quick"], 45,
                      "sanitizer", built))
        s.append(Step("%s-test_cuda" % tool, "%s: test_cuda %s" % (tool, groups), base + [test_cuda, groups], 45,
                      "sanitizer", built))
    if only:
        s = [x for x in s if x.key in only or x.key.split("-")[0] in only]
    return s


# ---- the report ------------------------------------------------------------------------

def clean(x):
    """JSON without NaN or infinity (json.tool refuses them)"""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


def tail(path, n=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return "(no log: %s)" % e
    return "\n".join(lines[-n:])


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Report:
    """OUT/gpu-check.md, .json and the archive of every log so far, written together"""

    def __init__(self, out, info, steps, work):
        self.out, self.info, self.steps, self.work = out, info, steps, work

    def status(self):
        recs = [s.rec for s in self.steps]
        if self.info.get("interrupted"):
            return "interrupted"
        if any(r["status"] in ("pending", "running") for r in recs):
            return "running"
        return "pass" if all(r["status"] == "pass" or r["status"] == "not needed" for r in recs) else "fail"

    def failed(self):
        return [s.rec for s in self.steps if s.rec["status"] not in ("pass", "not needed", "pending", "running")]

    def write(self):
        st = self.status()
        info = dict(self.info)
        info["status"] = st
        info["elapsed_s"] = round(now() - info.pop("t0"), 1) if "t0" in info else None
        info["steps"] = [s.rec for s in self.steps]
        info["failed"] = [r["key"] for r in self.failed()]
        write_atomic(os.path.join(self.out, "gpu-check.json"), json.dumps(clean(info), indent=1, sort_keys=True) + "\n")
        write_atomic(os.path.join(self.out, "gpu-check.md"), self.markdown(info))
        self.archive()

    def archive(self):
        """OUT/gpu-check-logs.tar.gz: logs/KEY.log of every step started (a step still running: what it printed)"""
        tmp = os.path.join(self.out, ARCHIVE + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for st in self.steps:
                path = os.path.join(self.work, st.rec["log"])
                if st.rec["status"] not in ("pending", "skipped", "not needed") and os.path.isfile(path):
                    tar.add(path, arcname=st.rec["log"])
        os.replace(tmp, os.path.join(self.out, ARCHIVE))

    def markdown(self, info):
        gpu = info.get("gpu", {})
        st = info["status"]
        recs = info["steps"]
        head = {"pass": "PASS: every step passed", "fail": "FAIL: %d of %d steps did not pass (%s)" %
                (len(info["failed"]), len(recs), ", ".join(info["failed"])),
                "running": "INCOMPLETE: the run stopped or is still going (the last step marked running did not "
                           "finish)",
                "interrupted": "INTERRUPTED: the run was stopped by a signal"}.get(st, st)
        lines = ["# mhe GPU check%s" % (" (dry run: stub commands, no GPU)" if info.get("dry_run") else ""), "",
                 "**%s**" % head, "", "| | |", "| --- | --- |",
                 "| GPU | %s |" % (gpu.get("name", "?") + (" (%d GPUs, the first checked)" % gpu["count"]
                                                          if gpu.get("count", 1) > 1 else "")),
                 "| compute capability | %s (built for %s) |" % (gpu.get("compute_capability") or "?",
                                                                info.get("arch", "?")),
                 "| memory | %s |" % gpu.get("memory", "?"),
                 "| driver | %s |" % gpu.get("driver", "?"),
                 "| nvcc | %s |" % info.get("nvcc", "?"),
                 "| compute-sanitizer | %s |" % info.get("sanitizer", "?"),
                 "| host | %s |" % info.get("host", "?"),
                 "| date | %s |" % info.get("date", "?"),
                 "| commit | %s (sources %s) |" % (info.get("commit", "?"), info.get("sources", "?")),
                 "| time | %s s of a %s s budget |" % (info.get("elapsed_s"), info.get("budget_s")),
                 "", "## Steps", "", "| step | status | seconds | key numbers |", "| --- | --- | ---: | --- |"]
        for r in recs:
            secs = "" if r["seconds"] is None else "%.1f" % r["seconds"]
            lines.append("| %s | %s | %s | %s |" % (r["title"], r["status"], secs,
                                                   (r["summary"] or "").replace("|", "\\|")))
        curve = os.path.join(self.out, "train_losses.csv")
        if os.path.isfile(curve):
            lines += ["", "## Training, CPU against GPU", "",
                      "Losses of the same %d steps (same weights, same batches); tolerances in "
                      "tools/scripts/gpu_check.py. All steps: train_losses.csv." % TRAIN_STEPS, ""]
            with open(curve, encoding="utf-8") as f:
                rows = [x.strip().split(",") for x in f if x.strip()]
            lines.append("| " + " | ".join(rows[0]) + " |")
            lines.append("|" + " ---: |" * len(rows[0]))
            for r in rows[1:]:
                if r[0] in ("1", "10", "50", "100", "150", str(TRAIN_STEPS)):
                    lines.append("| " + " | ".join(r) + " |")
        bad = self.failed()
        if bad:
            lines += ["", "## Failures"]
            for r in bad:
                if r["seconds"] is None:  # never started: no log
                    lines += ["", "### %s: %s" % (r["title"], r["status"]), "", r["summary"] or ""]
                    continue
                lines += ["", "### %s: %s (exit %s, %s s)" % (r["title"], r["status"], r["exit"], r["seconds"]), "",
                          "`%s`" % r["command"], "", r["summary"] or "", "", "Last lines of %s:" % r["log"], "",
                          "```", tail(os.path.join(self.work, r["log"])), "```"]
        lines += ["", "Logs of every step: %s (and %s). Data: gpu-check.json." % (ARCHIVE, os.path.join(
            os.path.relpath(self.work, REPO), "logs")), ""]
        return "\n".join(lines)


ARCHIVE = "gpu-check-logs.tar.gz"


def write_no_gpu(out, why):
    """the one line, also where only OUT comes back"""
    try:
        os.makedirs(out, exist_ok=True)
        write_atomic(os.path.join(out, "gpu-check.json"), json.dumps(
            {"tool": "mhe gpu-check", "version": 1, "status": "no-gpu", "reason": why, "steps": []}, indent=1) + "\n")
        write_atomic(os.path.join(out, "gpu-check.md"), "# mhe GPU check\n\n**NO GPU: %s; nothing run**\n" % why)
    except OSError:
        pass


# ---- running -------------------------------------------------------------------------

class Runner:
    """starts and finishes steps; a step is a process group of its own, so a limit or a signal
    stops everything it started"""

    def __init__(self, out, dry_run, budget, report, work, bin_dir):
        self.out, self.dry_run, self.budget, self.report = out, dry_run, budget, report
        self.work = work            # the logs are in work/logs
        self.bin = bin_dir          # BIN/ in a command: the prebuilt binaries once they pass, else the build
        self.t0 = now()
        self.live = {}              # key -> (Popen, log file, start, limit) of the steps running
        self.starting = False       # inside Popen: a signal waits until the child is known
        self.pending_signal = None
        self.on_signal = None

    def left(self):
        return self.budget - (now() - self.t0)

    def unmet(self, step, done):
        """why step cannot run; a need none of whose steps is in the plan (--only) counts as met"""
        planned = {s.key for s in self.report.steps}
        for alts in step.needs:
            if any(k in planned for k in alts) and not any(done.get(k) == "pass" for k in alts):
                return "needs %s to pass" % " or ".join(alts)
        return None

    def start(self, step, done):
        """starts step; False when it does not run (its record says why)"""
        rec = step.rec
        first = step.only_after_failed
        if first and done.get(first) not in ("fail", "timeout"):
            rec["status"] = "not needed"
            rec["summary"] = "%s %s" % (first, done.get(first) or "not in this run")
            return False
        why = self.unmet(step, done)
        if why:
            rec["status"], rec["summary"] = "skipped", why
            return False
        left = self.left() - 5  # a moment for the final report
        if left < 5:
            rec["status"], rec["summary"] = "skipped", "no time left in the %g s budget" % self.budget
            return False
        limit = min(step.timeout, left)
        cmd = [x.replace("OUT/", self.out + "/").replace("BIN/", self.bin + "/") for x in step.cmd]
        rec["command"] = " ".join(shlex.quote(c) for c in cmd)
        if self.dry_run:
            cmd = [sys.executable, SELF, "--stub", step.key, step.kind, "--"] + cmd
            limit = min(limit, float(os.environ.get("GPU_CHECK_STUB_TIMEOUT", "10")))
        rec["status"], rec["timeout_s"], rec["started_s"] = "running", round(limit, 1), round(now() - self.t0, 1)
        self.report.write()
        f = open(os.path.join(self.work, rec["log"]), "w", encoding="utf-8")
        f.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        f.flush()
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", **step.env)
        self.starting = True
        try:
            child = subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        except OSError as e:
            f.write("cannot run %s: %s\n" % (cmd[0], e))
            f.close()
            rec["status"], rec["summary"] = "fail", "cannot run %s: %s" % (cmd[0], e)
            return False
        finally:
            self.starting = False
        self.live[step.key] = (child, f, now(), limit)
        if self.pending_signal:
            self.on_signal(self.pending_signal, None)
        return True

    def finish(self, step):
        """waits for a started step (to its limit), then parses its log into its record"""
        rec = step.rec
        child, f, start, limit = self.live[step.key]
        timed_out = False
        try:
            rc = child.wait(timeout=max(0.0, limit - (now() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.stop(child)
            rc = child.returncode
        del self.live[step.key]
        secs = now() - start
        if timed_out:
            f.write("\ngpu-check: stopped after %.0f s (the step's limit)\n" % limit)
        f.close()
        with open(os.path.join(self.work, rec["log"]), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        rec["exit"], rec["seconds"] = rc, round(secs, 1)
        ok, nums, summary = PARSERS[step.kind](text, rc)
        rec["numbers"], rec["summary"] = nums, summary
        if timed_out:
            rec["status"], rec["summary"] = "timeout", "stopped at its %.0f s limit; %s" % (limit, summary)
        else:
            rec["status"] = "pass" if ok else "fail"
        if step.kind == "probe" and ok:  # every later step runs the prebuilt binaries
            self.bin = step.cmd[-1]

    def run(self, step, done):
        if step.key in self.live or self.start(step, done):
            self.finish(step)

    @staticmethod
    def stop(child):
        """a step's process group: TERM, then KILL"""
        if child.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(child.pid, sig)
            except OSError:
                pass
            try:
                child.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def stop_all(self):
        for child, _, _, _ in list(self.live.values()):
            self.stop(child)


def main(argv):
    if argv[:1] == ["--stub"]:
        return stub_main(argv[1:])
    if argv[:1] == ["--compare-train"]:
        return compare_main(argv[1:])
    if argv[:1] == ["--stamp"]:
        return stamp_main(argv[1:])
    if argv[:1] == ["--probe"]:
        return probe_main(argv[1:])
    dry_run, only, budget, prebuilt, bench, rest = False, None, DEFAULT_BUDGET, None, "quick", []
    usage = ("usage: gpu_check.py [--dry-run] [--prebuilt[=DIR]] [--bench quick|full] [--only STEP,...] "
             "[--budget SECONDS] OUT")
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--dry-run":
            dry_run = True
        elif a == "--prebuilt" or a.startswith("--prebuilt="):
            prebuilt = a.partition("=")[2] or PREBUILT_DIR
        elif a in ("--only", "--budget", "--bench") and i + 1 < len(argv):
            i += 1
            if a == "--only":
                only = set(x for x in argv[i].split(",") if x)
            elif a == "--bench":
                if argv[i] not in ("quick", "full"):
                    print("gpu-check: --bench takes quick or full, not %r" % argv[i])
                    return 2
                bench = argv[i]
            else:
                try:
                    budget = float(argv[i])
                    if not (math.isfinite(budget) and budget > 0):
                        raise ValueError
                except ValueError:
                    print("gpu-check: --budget takes seconds above 0, not %r" % argv[i])
                    return 2
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            rest.append(a)
        i += 1
    if len(rest) != 1 or rest[0].startswith("-"):
        print(usage)
        return 2
    out = os.path.abspath(rest[0])
    if prebuilt and not os.path.isdir(os.path.join(REPO, prebuilt)):
        print("gpu-check: --prebuilt: no folder %s (make gpu-check-build makes it, on any machine with nvcc)" % prebuilt)
        return 2

    if dry_run:
        gpu = {"name": "none (dry run)", "compute_capability": "9.0", "driver": "-", "memory": "-", "count": 1}
    else:
        try:
            gpu = query_gpu()
        except NoGPU as e:
            say("no NVIDIA GPU here (%s); nothing run" % e)
            write_no_gpu(out, str(e))
            return NO_GPU
    cc = gpu["compute_capability"].replace(".", "")
    arch = "sm_" + cc if cc.isdigit() else "native"
    arch_flag = "-gencode arch=compute_%s,code=sm_%s" % (cc, cc) if cc.isdigit() else "-arch=native"
    relaxed = "-std=c++17 -O2 -I. -DMHE_CUDA %s -Xptxas -v" % arch_flag
    nvcc = tool_path("nvcc", "NVCC")
    sanitizer = tool_path("compute-sanitizer", "COMPUTE_SANITIZER")
    ncpu = os.cpu_count() or 2
    bdir = os.path.join(out, "dry-run-build") if dry_run else "build/gpu-check/" + arch
    work = os.path.join(REPO, os.path.dirname(bdir) if not dry_run else bdir)
    logs = os.path.join(work, "logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    # an earlier run's files would pass for this run's
    for old in [os.path.join(logs, f) for f in os.listdir(logs) if f.endswith(".log")] + \
            [os.path.join(out, f) for f in ("train_losses.csv", ARCHIVE)]:
        if os.path.isfile(old):
            os.remove(old)
    os.makedirs(os.path.join(REPO, bdir, "train"), exist_ok=True)
    for f in os.listdir(os.path.join(REPO, bdir, "train")):  # a dump left by an earlier run is never compared
        if f.endswith(".batches"):
            os.remove(os.path.join(REPO, bdir, "train", f))
    if nvcc and not dry_run and not os.environ.get("NVCC") and not shutil.which("nvcc"):
        os.environ["NVCC"] = nvcc  # make's default is nvcc on PATH
    commit, sources = tree_identity()
    steps = plan(bdir, arch_flag, arch, ncpu, relaxed, sanitizer, only, prebuilt, bench)
    info = {"tool": "mhe gpu-check", "version": 1, "dry_run": dry_run, "gpu": gpu, "arch": arch,
            "nvcc": "stub" if dry_run else tool_version(nvcc, r"release [\d.]+, V([\d.]+)"),
            "sanitizer": "stub" if dry_run else tool_version(sanitizer, r"Version ([\w.\-() ]+)"),
            "host": "%s, %d CPUs, %s" % (platform.node() or "?", ncpu, platform.platform()),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "commit": commit, "sources": sources, "budget_s": budget, "build_dir": bdir, "prebuilt": prebuilt,
            "bench": bench,
            "curve_tolerances": CURVE_TOL, "t0": now()}
    report = Report(out, info, steps, work)
    # the prebuilt binaries once their check passes; without the check in this run (--only), as an earlier run found them
    probing = any(st.key == "prebuilt" for st in steps)
    runner = Runner(out, dry_run, budget, report, work, prebuilt if prebuilt and not probing else bdir)

    def interrupted(sig, frame):
        if runner.starting:  # the step's process is being started: stop it once it has a pid
            runner.pending_signal = sig
            return
        runner.stop_all()
        info["interrupted"] = "signal %d" % sig
        for s in steps:
            if s.rec["status"] == "running":
                s.rec["status"], s.rec["summary"] = "interrupted", "stopped by signal %d" % sig
        report.write()
        say("stopped by signal %d; report in %s" % (sig, out))
        os._exit(1)

    runner.on_signal = interrupted
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    say("%s, compute capability %s, driver %s; nvcc %s; building for %s into %s; report in %s" %
        (gpu["name"], gpu["compute_capability"] or "?", gpu["driver"], info["nvcc"], arch, bdir, out))
    report.write()
    done = {}
    for i, step in enumerate(steps):
        runner.run(step, done)
        done[step.key] = step.rec["status"]
        say("[%5.0f s] %-44s %s  %s" % (now() - runner.t0, step.title[:44], step.rec["status"],
                                        step.rec["summary"][:150]))
        for later in steps[i + 1:]:  # the CPU's training runs beside the GPU steps once it can
            if later.background and later.rec["status"] == "pending" and not runner.unmet(later, done):
                runner.start(later, done)
        report.write()
    status = report.status()
    say("%s; %s/gpu-check.md" % ("all %d steps passed" % len(steps) if status == "pass" else
                                 "FAILED: %s" % ", ".join(r["key"] for r in report.failed()), out))
    return 0 if status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
