"""make gpu-check (tools/scripts/gpu_check.py) on a machine without a GPU.

The real run needs an NVIDIA GPU; what can be checked here is checked here:
  - without a GPU (no nvidia-smi, one that fails, one that lists nothing) it
    says so in one line, exits 3 and builds nothing; make gpu-check too
  - --dry-run: the whole step machinery with stub commands: every step, its
    log, the parsers, the loss-curve comparison, the markdown and JSON report
    (json.tool must accept it); then with steps that fail, hang past their
    limit, a failed build retried, curves that drift: exit 1, each failure
    reported with its log tail, the later steps still run, the hung step's
    processes gone
  - a time budget that runs out: the rest skipped, exit 1
  - a run stopped by SIGTERM: the report says interrupted; while a step runs,
    the report on disk already lists the steps done and the one running
  - the parsers against the programs' own printf formats (bench_cuda.cu,
    test_cuda.cpp) and a real CPU `mhe train` run with its batch dump
  - the curve comparison's bounds on synthetic curves: each can fail
  - what comes back: OUT holds four files, the archive of every log written
    after each step (a killed run's too, with the running step's lines)
  - prebuilt binaries: --probe refuses a folder without a stamp or of other
    sources; make gpu-check-build's binaries (where built) start, exit with
    their "no GPU" status, and are what --prebuilt finds; a failed probe
    falls back to the build; make gpu-check passes BUDGET, ONLY, BENCH, PREBUILT
"""
import tarfile
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import mhetest  # noqa: E402
from mhetest import check  # noqa: E402

REPO = mhetest.REPO
SCRIPT = os.path.join(REPO, "tools", "scripts", "gpu_check.py")
sys.path.insert(0, os.path.join(REPO, "tools", "scripts"))
import gpu_check  # noqa: E402

TMP = mhetest.tmpdir("mhe_gpu_check_")


def run(args, env=None, timeout=120, wrapper=False):
    e = dict(os.environ)
    for k in ("GPU_CHECK_STUB_FAIL", "GPU_CHECK_STUB_HANG", "GPU_CHECK_STUB_DRIFT", "GPU_CHECK_STUB_TIMEOUT",
              "GPU_CHECK_STUB_HANG_S"):
        e.pop(k, None)
    e.update(env or {})
    cmd = (["sh", os.path.join(REPO, "tools", "scripts", "gpu_check.sh")] if wrapper else [sys.executable, SCRIPT]) + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout, cwd=REPO)
    return p.returncode, p.stdout, p.stderr


def fake_smi(name, body):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def load(out):
    with open(os.path.join(out, "gpu-check.json")) as f:
        return json.load(f)


def json_tool_ok(out):
    p = subprocess.run([sys.executable, "-m", "json.tool", os.path.join(out, "gpu-check.json")], capture_output=True)
    return p.returncode == 0


def logs_of(out):
    """the archive's members: {logs/KEY.log: text}"""
    with tarfile.open(os.path.join(out, gpu_check.ARCHIVE)) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def steps(rep):
    return {s["key"]: s for s in rep["steps"]}


def procs_with(text):
    """pids whose command line mentions text (the stubs name the run's directory)"""
    found = []
    if not os.path.isdir("/proc"):
        return found
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def no_gpu():
    missing = os.path.join(TMP, "no-such-nvidia-smi")
    cases = [("no nvidia-smi", missing, "nvidia-smi: not found"),
             ("nvidia-smi fails", fake_smi("smi_fail", "echo \"NVIDIA-SMI has failed because it couldn't "
                                           "communicate with the NVIDIA driver.\"; exit 9"),
              "couldn't communicate with the NVIDIA driver"),
             ("nvidia-smi lists nothing", fake_smi("smi_empty", "exit 0"), "no GPU listed")]
    for i, (what, smi, says) in enumerate(cases):
        out = os.path.join(TMP, "nogpu%d" % i)
        for wrapper in (False, True):
            rc, so, se = run([out], {"MHE_NVIDIA_SMI": smi}, wrapper=wrapper)
            lines = so.splitlines()
            how = "tools/scripts/gpu_check.sh" if wrapper else "gpu_check.py"
            check(rc == gpu_check.NO_GPU, "%s, %s: exit %d (want 3): %s %s" % (what, how, rc, so, se))
            check(len(lines) == 1 and lines[0].startswith("gpu-check: no NVIDIA GPU here (") and says in lines[0]
                  and lines[0].endswith("nothing run") and not se,
                  "%s, %s: one line naming the cause: %r %r" % (what, how, so, se))
        check(not os.path.exists(os.path.join(out, "logs")), "%s: nothing run (no logs)" % what)
        rep = load(out)
        check(rep["status"] == "no-gpu" and says in rep["reason"], "%s: the report says no-gpu: %s" % (what, rep))
    # a fake nvidia-smi that does list a GPU is not "no GPU" (the check would start): --only with no step
    ok = fake_smi("smi_ok", "echo 'NVIDIA H100 80GB HBM3, 9.0, 580.65.06, 81559 MiB'")
    gpu = None
    os.environ["MHE_NVIDIA_SMI"] = ok
    try:
        gpu = gpu_check.query_gpu()
    finally:
        del os.environ["MHE_NVIDIA_SMI"]
    check(gpu and gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["compute_capability"] == "9.0"
          and gpu["driver"] == "580.65.06", "nvidia-smi's line read: %s" % gpu)
    if subprocess.run(["make", "--version"], capture_output=True).returncode == 0:
        out = os.path.join(TMP, "nogpu_make")
        e = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        e["MHE_NVIDIA_SMI"] = missing
        p = subprocess.run(["make", "-s", "gpu-check", "OUT=" + out], capture_output=True, text=True, env=e, cwd=REPO,
                           timeout=60)
        check(p.returncode != 0 and p.stdout.startswith("gpu-check: no NVIDIA GPU here") and
              len(p.stdout.splitlines()) == 1 and "Error 3" in p.stderr,
              "make gpu-check without a GPU: the line, and make names status 3: %r %r" % (p.stdout, p.stderr))


def dry_run_pass():
    out = os.path.join(TMP, "dry")
    rc, so, se = run(["--dry-run", out])
    check(rc == 0, "dry run: exit %d\n%s%s" % (rc, so[-2000:], se[-2000:]))
    check(json_tool_ok(out), "dry run: python3 -m json.tool accepts gpu-check.json")
    rep = load(out)
    st = steps(rep)
    # newest first: what never ran on a GPU (bf16, the pipelined tile, tensor-core flash, the graph), then the
    # rest, the sanitizers last
    want = ["environment", "build", "build-relaxed", "train-cpu", "test_cuda-bf16", "test_cuda-tf32", "test_cuda-gemm",
            "test_attn", "test_cuda-train", "test_cuda-curve", "train-gpu-bf16", "train-gpu-tf32", "train-gpu",
            "train-compare", "large", "bench", "test_cuda-norm", "test_cuda-elementwise", "test_cuda-model",
            "test_cuda-kinds", "test_cuda-decode", "test_cuda-prefill", "test_cuda-eval", "test_cuda-errors",
            "test_cuda-features", "test_cuda-encdec", "test_cuda-hash", "cli", "budget",
            "memcheck-test_attn", "memcheck-test_cuda", "racecheck-test_attn", "racecheck-test_cuda",
            "synccheck-test_attn", "synccheck-test_cuda"]
    check(list(st) == want, "dry run: the steps in order: %s" % list(st))
    check(sorted(os.listdir(out)) == sorted(["dry-run-build", "gpu-check.json", "gpu-check.md", gpu_check.ARCHIVE,
                                             "train_losses.csv"]),
          "dry run: OUT holds the four files (and the dry run's build): %s" % sorted(os.listdir(out)))
    logs = logs_of(out)
    check(sorted(logs) == sorted(s["log"] for k, s in st.items() if k != "build-relaxed") and
          all(logs[s["log"]].startswith("$ ") and len(logs[s["log"]]) > 60 for k, s in st.items() if k != "build-relaxed"),
          "dry run: the archive holds every step's whole log: %s" % sorted(logs))
    check(all(s["timeout_s"] <= 60 for k, s in st.items() if k not in ("build", "build-relaxed", "train-cpu", "bench")),
          "dry run: a hung step costs at most a minute: %s" % {k: s["timeout_s"] for k, s in st.items()})
    n = [st[k]["numbers"] for k in ("train-gpu", "train-gpu-tf32", "train-gpu-bf16")]
    check(all(x.get("graph_builds") == 1 and x.get("graph_launches") == gpu_check.TRAIN_STEPS - 1 for x in n) and
          "train-cpu" in st and "graph_launches" not in st["train-cpu"]["numbers"] and
          "--dump-batches" in st["train-gpu"]["command"] and "graph: 1 built" in st["train-gpu"]["summary"],
          "dry run: the device runs' graph counters: %s" % n)
    check(rep["status"] == "pass" and rep["failed"] == [], "dry run: status pass: %s %s" % (rep["status"],
                                                                                            rep["failed"]))
    check(all(s["status"] == "pass" for k, s in st.items() if k != "build-relaxed") and
          st["build-relaxed"]["status"] == "not needed", "dry run: every step passed")
    check(all(os.path.getsize(os.path.join(out, "dry-run-build", s["log"])) > 0 for k, s in st.items()
              if k != "build-relaxed"), "dry run: every step has a log")
    n = st["large"]["numbers"]
    check(n.get("T") == 256 and n.get("fp32_kinds") == 9 and n.get("tf32_kinds") == 9 and n.get("bf16_kinds") == 9 and
          abs(n.get("tf32_max_logits", 0) - 4.8e-4) < 1e-9 and abs(n.get("bf16_max_logits", 0) - 4.1e-3) < 1e-9,
          "dry run: large's numbers: %s" % n)
    n = st["bench"]["numbers"]
    check(n.get("gemm_best_tf32_tflops") == 80.11 and n.get("gemm_best_bf16_tflops") == 160.4 and
          n.get("attn_L512_mha_ms") == [0.41, 1.22] and
          n.get("train_mhe_mul_tokens_per_s") == 655000 and n.get("decode_mhe_mul_us") == 190.2,
          "dry run: bench's numbers: %s" % n)
    n = st["train-compare"]["numbers"]
    check(n.get("fp32_final_rel", 1) < 1e-4 and n.get("tf32_final_rel", 1) < 1e-3 and
          n.get("bf16_final_rel", 1) < 1e-2 and "fp32_final_cpu" in n,
          "dry run: curve numbers: %s" % n)
    check(st["test_cuda-gemm"]["numbers"] == {"passed": 40, "failed": 0}, "dry run: test counts")
    check(st["train-cpu"]["started_s"] <= st["test_cuda-gemm"]["started_s"] < st["train-gpu"]["started_s"],
          "dry run: the CPU's training starts beside the GPU tests, right after the build")
    with open(os.path.join(out, "gpu-check.md")) as f:
        md = f.read()
    check("**PASS" in md and md.count("\n| ") >= len(want) + 10 and "## Training, CPU against GPU" in md and
          "## Failures" not in md, "dry run: the markdown report")
    with open(os.path.join(out, "train_losses.csv")) as f:
        rows = f.read().splitlines()
    check(rows[0] == "step,cpu,gpu_fp32,gpu_tf32,gpu_bf16" and len(rows) == gpu_check.TRAIN_STEPS + 1,
          "dry run: train_losses.csv, %d rows" % len(rows))


def dry_run_failures():
    out = os.path.join(TMP, "dryfail")
    env = {"GPU_CHECK_STUB_FAIL": "build,test_cuda-tf32,large,memcheck-test_attn", "GPU_CHECK_STUB_HANG": "bench",
           "GPU_CHECK_STUB_TIMEOUT": "2", "GPU_CHECK_STUB_HANG_S": "30", "GPU_CHECK_STUB_DRIFT": "0.05"}
    t0 = time.monotonic()
    rc, so, se = run(["--dry-run", out], env)
    secs = time.monotonic() - t0
    check(rc == 1, "failures: exit %d (want 1)\n%s%s" % (rc, so[-2000:], se[-2000:]))
    check(json_tool_ok(out), "failures: json.tool accepts the report")
    rep = load(out)
    st = steps(rep)
    want = {"build": "fail", "build-relaxed": "pass", "budget": "pass", "test_cuda-gemm": "pass",
            "test_cuda-tf32": "fail", "large": "fail", "train-compare": "fail", "bench": "timeout",
            "memcheck-test_attn": "fail", "memcheck-test_cuda": "pass", "synccheck-test_cuda": "pass"}
    got = {k: st[k]["status"] for k in want}
    check(got == want, "failures: statuses %s" % got)
    check(rep["status"] == "fail" and set(rep["failed"]) == {k for k, v in want.items() if v not in ("pass",)},
          "failures: the failed list %s" % rep["failed"])
    check("rel err 0.5" in st["test_cuda-tf32"]["summary"], "failures: the FAIL line in the summary: %s" %
          st["test_cuda-tf32"]["summary"])
    check("FAIL fp32: " in st["train-compare"]["summary"] and st["train-compare"]["numbers"]["fp32_max_rel"] > 0.04,
          "failures: curve drift named: %s" % st["train-compare"]["summary"])
    check(1.5 <= st["bench"]["seconds"] < 10 and secs < 120, "failures: the hung step stopped at its limit (%.1f s)" %
          st["bench"]["seconds"])
    check(not procs_with(out), "failures: no process of the run is left")
    with open(os.path.join(out, "gpu-check.md")) as f:
        md = f.read()
    check("**FAIL: " in md and "## Failures" in md and "### test_cuda tf32 (pipelined tile, epilogues): fail" in md and
          "FAIL tests/cuda/test_cuda.cpp:101: tf32 stub" in md and "### bench_cuda --quick beside PyTorch CUDA: timeout" in md,
          "failures: the markdown names each failure with its log tail")


def budget_and_signal():
    out = os.path.join(TMP, "budget")
    rc, so, se = run(["--dry-run", "--budget", "11", "--only", "environment,build,test_cuda-gemm,test_attn", out],
                     {"GPU_CHECK_STUB_HANG": "environment", "GPU_CHECK_STUB_HANG_S": "30"})
    st = steps(load(out))
    check(rc == 1 and st["environment"]["status"] == "timeout" and st["build"]["status"] == "skipped" and
          "no time left" in st["build"]["summary"] and st["build-relaxed"]["status"] == "not needed" and
          st["test_attn"]["status"] == "skipped", "budget: the rest skipped, exit %d: %s" %
          (rc, {k: (v["status"], v["summary"]) for k, v in st.items()}))

    out = os.path.join(TMP, "signal")
    env = dict(os.environ, GPU_CHECK_STUB_HANG="test_cuda-model", GPU_CHECK_STUB_HANG_S="30",
               GPU_CHECK_STUB_TIMEOUT="60")
    p = subprocess.Popen([sys.executable, SCRIPT, "--dry-run", "--only", "environment,test_cuda-model,test_cuda-kinds", out],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    running = None
    for _ in range(300):  # the report says running, and the stub has started
        try:
            st = steps(load(out))
            with open(os.path.join(out, "dry-run-build", "logs", "test_cuda-model.log")) as f:
                started = "hanging" in f.read()
            if st["test_cuda-model"]["status"] == "running" and started:
                running = st
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    with open(os.path.join(out, "gpu-check.md")) as f:
        md = f.read()
    check(running is not None and running["environment"]["status"] == "pass" and
          running["test_cuda-kinds"]["status"] == "pending" and "INCOMPLETE" in md and "| test_cuda model | running |" in md,
          "while a step runs, the report on disk says so")
    p.send_signal(signal.SIGTERM)
    try:
        so = p.communicate(timeout=30)[0].decode()
    except subprocess.TimeoutExpired:
        p.kill()
        so = p.communicate()[0].decode()
    rep = load(out)
    st = steps(rep)
    check(p.returncode == 1 and rep["status"] == "interrupted" and st["test_cuda-model"]["status"] == "interrupted"
          and "stopped by signal" in so, "SIGTERM: exit %s, report %s" % (p.returncode, rep["status"]))
    logs = logs_of(out)
    check(sorted(logs) == ["logs/environment.log", "logs/test_cuda-model.log"] and
          "hanging" in logs["logs/test_cuda-model.log"],
          "SIGTERM: the archive holds the logs so far, the running step's lines too: %s" % sorted(logs))
    time.sleep(0.2)
    check(not procs_with(out), "SIGTERM: the running step's processes are gone")


def prebuilt():
    """--probe, --prebuilt in a dry run, the real binaries of make gpu-check-build, make's flags"""
    d = os.path.join(TMP, "pre")
    os.makedirs(os.path.join(d, "cuda"), exist_ok=True)
    rc, so, se = run(["--probe", d])
    check(rc == 1 and "FAIL" in so and "no stamp" in so, "probe: a folder without a stamp is refused: %s" % so)
    for b in gpu_check.PREBUILT_BINS:
        with open(os.path.join(d, b), "w") as f:
            f.write("#!/bin/sh\necho \"$0: no CUDA device found\"; exit 3\n")
        os.chmod(os.path.join(d, b), 0o755)
    rc, so, se = run(["--stamp", d])
    check(rc == 0, "stamp: %s %s" % (so, se))
    with open(os.path.join(d, gpu_check.STAMP)) as f:
        stamp = f.read()
    with open(os.path.join(d, gpu_check.STAMP), "w") as f:
        f.write(stamp.replace("sources ", "sources 0"))
    rc, so, se = run(["--probe", d])
    check(rc == 1 and "built from other sources" in so, "probe: binaries of other sources are refused: %s" % so)
    with open(os.path.join(d, gpu_check.STAMP), "w") as f:
        f.write(stamp)
    rc, so, se = run(["--probe", d])
    check(rc == gpu_check.NO_GPU and so.count("no-gpu ") == 5, "probe: binaries that start and find no GPU: exit 3: %s" % so)
    os.chmod(os.path.join(d, "cuda", "test_attn"), 0o644)
    rc, so, se = run(["--probe", d])
    check(rc == 1 and "FAIL cuda/test_attn" in so, "probe: a binary that cannot start fails: %s" % so)

    # dry runs: a passing probe hands its folder to every later step; a failing one, the build
    out = os.path.join(TMP, "dry_pre")
    rel = os.path.relpath(d, REPO)   # --prebuilt takes the folder relative to the repository, as make passes it
    rc, so, se = run(["--dry-run", "--prebuilt=" + rel, "--only",
                      "environment,prebuilt,build,test_cuda-bf16,train-gpu", out])
    st = steps(load(out))
    check(rc == 0 and st["prebuilt"]["status"] == "pass" and st["build"]["status"] == "not needed" and
          rel + "/cuda/test_cuda bf16" in st["test_cuda-bf16"]["command"] and
          rel + "/cuda/mhe train" in st["train-gpu"]["command"],
          "dry run --prebuilt: the probe passes, no build, the steps run its binaries: %s" %
          {k: (v["status"], v["command"][-60:]) for k, v in st.items()})
    rc, so, se = run(["--dry-run", "--prebuilt=" + os.path.relpath(d, REPO), "--only",
                      "environment,prebuilt,build,test_cuda-bf16", out], {"GPU_CHECK_STUB_FAIL": "prebuilt"})
    st = steps(load(out))
    check(rc == 1 and st["prebuilt"]["status"] == "fail" and "building" in st["prebuilt"]["summary"] and
          st["build"]["status"] == "pass" and "dry-run-build/cuda/test_cuda bf16" in st["test_cuda-bf16"]["command"],
          "dry run --prebuilt: a failed probe falls back to the build: %s" %
          {k: (v["status"], v["summary"][:60]) for k, v in st.items()})
    rc, so, se = run(["--dry-run", "--prebuilt=no/such/dir", out])
    check(rc == 2 and "no folder no/such/dir" in so, "--prebuilt of a missing folder: %s" % so)
    for bad in (["--budget", "0"], ["--budget", "nan"], ["--bench", "slow"]):
        rc, so, se = run(["--dry-run"] + bad + [out])
        check(rc == 2 and bad[0] in so, "%s refused: %s" % (" ".join(bad), so))

    # make gpu-check-build's own binaries (CI builds them before make test): they start, say there is no
    # GPU, exit 3, and --prebuilt finds them (a fake nvidia-smi that lists a GPU lets the check start)
    pre = os.path.join(REPO, gpu_check.PREBUILT_DIR)
    try:
        with open(os.path.join(pre, gpu_check.STAMP)) as f:
            current = "sources %s\n" % gpu_check.sources_hash(gpu_check.BIN_SOURCES) in f.read()
    except OSError:
        current = False
    if not current:  # CI builds them just before; elsewhere they may be older than the tree
        mhetest.RESULTS.skipped += 1
        print("SKIP prebuilt binaries: none of this tree's sources in %s (make gpu-check-build)" % gpu_check.PREBUILT_DIR)
    else:
        rc, so, se = run(["--probe", pre], timeout=200)
        check(rc in (0, gpu_check.NO_GPU) and "ok mhe starts" in so and "ok cuda/bench_cuda starts" in so and
              (rc == 0 or so.count("no-gpu ") == 3), "make gpu-check-build's binaries start (exit 3 without a GPU): %s" % so)
        out = os.path.join(TMP, "real_pre")
        smi = fake_smi("smi_pre", "echo 'NVIDIA H200, 9.0, 580.159.04, 143771 MiB'")
        rc, so, se = run(["--prebuilt", "--only", "prebuilt", out], {"MHE_NVIDIA_SMI": smi}, timeout=200)
        st = steps(load(out))
        check(list(st) == ["prebuilt"] and st["prebuilt"]["status"] in ("pass", "fail") and
              (st["prebuilt"]["status"] == "pass" or "find no CUDA device" in st["prebuilt"]["summary"]),
              "gpu-check --prebuilt finds them: %s" % st.get("prebuilt"))
    # gpu_results.py --save keeps real runs only: a dry run and a run without a GPU are refused
    results = os.path.join(REPO, "tools", "scripts", "gpu_results.py")
    for what, o in (("a dry run", os.path.join(TMP, "dry_pre")), ("a run without a GPU", os.path.join(TMP, "nogpu0"))):
        p = subprocess.run([sys.executable, results, "--save", o], capture_output=True, text=True)
        check(p.returncode == 1 and ("is %s: not kept" % what) in p.stdout, "--save refuses %s: %s" % (what, p.stdout))
    if subprocess.run(["make", "--version"], capture_output=True).returncode == 0:
        e = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        p = subprocess.run(["make", "-n", "gpu-check", "OUT=x", "BUDGET=300", "ONLY=test_cuda,bench", "BENCH=full",
                            "PREBUILT=1"], capture_output=True, text=True, env=e, cwd=REPO)
        check("--budget 300 --only test_cuda,bench --bench full --prebuilt x" in " ".join(p.stdout.split()),
              "make gpu-check passes BUDGET, ONLY, BENCH and PREBUILT: %r" % p.stdout)


def parsers_match_the_programs():
    """the regular expressions against the printf formats in the sources (Python's % takes them as C's)"""
    with open(os.path.join(REPO, "tools", "bench", "bench_cuda.cu")) as f:
        src = f.read()
    fmts = re.findall(r'printf\("((?:[^"\\]|\\.)*)"', src)
    gemm = [x for x in fmts if "(%d x %d x %d)" in x]
    attn = [x for x in fmts if "(%.2fx)" in x]
    train = [x for x in fmts if "tokens/s" in x and "ms/step" in x]
    decode = [x for x in fmts if "us/token" in x]
    check(len(gemm) == 1 and len(attn) == 1 and len(train) == 1 and len(decode) == 1,
          "bench_cuda.cu's four result formats found")
    if len(decode) == 1:
        text = decode[0].replace("\\n", "\n").replace("%zu", "%d") % ("mhe-mul", 123.45, 256)
        n = gpu_check.parse_bench(text, 0)[1]
        check(n.get("decode_mhe_mul_us") == 123.5, "bench parser on bench_cuda.cu's decoding format: %s" % n)
    if len(gemm) == len(attn) == len(train) == 1:
        un = lambda s: s.replace("\\n", "\n")  # noqa: E731
        text = un(gemm[0]) % ("C=768 weight gradient (A^T)", 12.5, 123.25, 240.5, 768, 3072, 1024)
        text += un(gemm[0]) % ("C=768 LM head (32000)", 14.0, 99.0, 250.0, 1024, 32000, 768)
        text += un(attn[0]) % (512, 0.4, 1.2, 0.3, 1.0, 0.81, 0.35, 1.1, 0.92)
        text += un(attn[0]) % (1024, 1234.5, 2345.25, 1000.0, 2000.0, 0.85, 1100.0, 2100.0, 0.9)
        for k in ("mha", "mhe-mul", "mhe-add"):
            text += un(train[0]) % (k, 512000.0, 2.0, 40.5, 30.25, 1.25)
        # bench_cuda --bf16 --attn-only's table, after the float32 one: its rows are the bf16 core's
        with open(os.path.join(REPO, "tools", "bench", "bench_cuda.cu")) as f:
            cu = f.read()
        check('tokens%s: forward' in cu and '", bf16 tensor cores"' in cu and
              gpu_check.ATTN16_HEAD == ", bf16 tensor cores:", "bench_cuda.cu prints the bf16 attention header the parser cuts at")
        text16 = text + "\nattention, causal, 12 heads of 64, B*L = 8192 tokens, bf16 tensor cores: forward | backward ms\n"
        text16 += un(attn[0]) % (1024, 200.5, 400.25, 150.0, 300.0, 0.75, 160.0, 320.0, 0.8)
        n16 = gpu_check.parse_bench(text16, 0)[1]
        check(n16.get("attn_L1024_mha_ms") == [1234.5, 2345.25] and n16.get("attn_L1024_mha_bf16_ms") == [200.5, 400.25],
              "bench parser: the bf16 attention table apart from the float32 one: %s" % n16)
        ok, n, summary = gpu_check.parse_bench(text, 0)
        check(ok and n["gemm_best_tf32_tflops"] == 123.25 and n["gemm_best_simt_tflops"] == 14.0 and
              n["gemm_best_bf16_tflops"] == 250.0 and n["attn_L1024_mha_ms"] == [1234.5, 2345.25] and n["attn_L512_mhe_add_ratio"] == 0.92 and
              n["train_mhe_add_tokens_per_s"] == 512000 and n.get("train_mhe_add_graph_x") == 1.25,
              "bench parser on bench_cuda.cu's formats: %s %s" % (ok, n))
        # bench_torch_cuda.py's rows follow in the same log (the bench step runs both): its GEMM rows
        # (three numbers) must not count as bench_cuda's, its side-by-side ratios are read
        with open(os.path.join(REPO, "tools", "bench", "bench_torch_cuda.py")) as f:
            py = f.read()
        tgemm = [x for x in re.findall(r'"([^"]*\(%d x %d x %d\))"', py) if x.count("%8.2f") == 3]
        side_attn = re.findall(r'"(L=%-5d[^"]*)"', py)
        side_train = [x for x in re.findall(r'"(%-8s %19s[^"]*)"', py)]
        check(len(tgemm) == 1 and len(side_attn) == 1 and len(side_train) == 1,
              "bench_torch_cuda.py's GEMM and side-by-side formats found")
        if len(tgemm) == len(side_attn) == len(side_train) == 1:
            both = text + tgemm[0] % ("C=768 LM head (32000)", 45.5, 256.5, 460.0, 1024, 32000, 768) + "\n"
            both += side_attn[0] % (2048, 5.3, 3.58, "0.68x", "0.61", 0.52, "0.85x", 6.04, 5.24) + "\n"
            both += side_train[0] % ("mha", "105234", "145827", "0.72x", "70172", "176940", "0.40x", "150000",
                                     "236539", "0.63x") + "\n"
            ok, n, summary = gpu_check.parse_bench(both, 0)
            check(ok and n["gemm_best_simt_tflops"] == 14.0 and n["gemm_best_tf32_tflops"] == 123.25 and
                  n["gemm_best_bf16_tflops"] == 250.0 and
                  n.get("attn_L2048_mha_vs_sdpa") == 0.68 and n.get("attn_L2048_mha_bf16_vs_sdpa") == 0.85 and
                  n.get("train_mha_vs_torch") == 0.72,
                  "bench parser with bench_torch_cuda's rows after bench_cuda's: %s" % n)
        check(not gpu_check.parse_bench(text, 1)[0], "bench parser: a nonzero exit fails")
        check(not gpu_check.parse_bench("bench_cuda: no CUDA device (x): nothing to measure\n", 0)[0],
              "bench parser: no device fails")
    with open(os.path.join(REPO, "tests", "cuda", "test_cuda.cpp")) as f:
        src = f.read()
    fmt = [x for x in re.findall(r'printf\("((?:[^"\\]|\\.)*)"', src) if "; bounds" in x]
    check(len(fmt) == 1, "test_cuda.cpp's summary format found")
    if fmt:
        text = ""
        for kind in ("mha", "mhe-mul"):
            for prec, e in (("fp32", 1e-6), ("tf32", 1e-3), ("bf16", 8e-3)):
                what = "large %s B=2 T=256 d_model=256 %s" % (kind, prec)
                text += fmt[0].replace("\\n", "\n") % (what, e / 10, e, e * (3 if kind == "mhe-mul" else 1),
                                                       "layers.0.attn.wq.weight", 1e-5, 1e-5, 4e-4)
        text += "RESULT: 40 passed, 0 failed\n"
        ok, n, summary = gpu_check.parse_large(text, 0)
        check(ok and n["tf32_max_gradient"] == 3e-3 and n["tf32_max_gradient_kind"] == "mhe-mul" and
              n["fp32_kinds"] == 2 and n["d_model"] == 256, "large parser on test_cuda.cpp's format: %s %s" % (ok, n))
        check(not gpu_check.parse_large(text.replace("RESULT: 40 passed, 0 failed", "RESULT: 39 passed, 1 failed"),
                                        1)[0], "large parser: a failed check fails")
    log = ("device: NVIDIA H200 (compute capability 9.0)\nstep    200/200  loss 2.2715  lr 1.00e-03   60000 tok/s     "
           "3 ms/step  left    0s\nfinal train loss 2.2715\n")
    ok, n, summary = gpu_check.parse_train(log + "device graph: 1 built, 199 steps launched as one, 1393 nodes patched\n", 0)
    check(ok and n["graph_launches"] == 199 and n["graph_patches"] == 1393, "train parser: the graph's counters: %s" % n)
    ok, n, summary = gpu_check.parse_train(log, 0)
    check(not ok and "did not run as a CUDA graph" in summary, "train parser: a device run without the graph fails")
    with open(os.path.join(REPO, "tools", "cli", "mhe.c")) as f:
        src = f.read()
    fmt = re.findall(r'"(device graph: [^"]*)"', src)
    check(len(fmt) == 1 and gpu_check.parse_train(log + fmt[0].replace("\\n", "\n").replace("%ld", "%d") % (1, 9, 3), 0)[0],
          "train parser on mhe.c's graph line: %s" % fmt)
    ok, n, summary = gpu_check.parse_test("test_cuda: no CUDA device: driver too old; nothing run\n", 3)
    check(not ok and "no CUDA device" in summary, "test parser: no device is a failure on a GPU machine: " + summary)
    check(not gpu_check.parse_test("test_cuda: device X\nok\n", -6)[0], "test parser: no RESULT line (abort) fails")
    ok, n, summary = gpu_check.parse_sanitizer("RESULT: 5 passed, 0 failed\n========= RACECHECK SUMMARY: 2 hazards "
                                               "displayed (1 error, 1 warning)\n", 9)
    check(not ok and n["hazards"] == 2 and n["errors"] == 1, "sanitizer parser: racecheck hazards: %s" % n)
    ok, n, summary = gpu_check.parse_sanitizer("RESULT: 5 passed, 0 failed\n========= ERROR SUMMARY: 0 errors\n", 0)
    check(ok and n["errors"] == 0, "sanitizer parser: a clean memcheck passes")


def curve(n, f):
    return [(s, f(s), 1e-3, 0.5, bytes([s % 256]) * 8) for s in range(n)]


def curves():
    base = curve(200, lambda s: 2.0 + 3.5 * math.exp(-s / 60.0))
    lines = []

    def bad(dev, prec="fp32"):
        lines.clear()
        return gpu_check.compare_curves(base, dev, prec, lines.append)

    check(bad(list(base)) == 0, "curves: identical curves pass: %s" % lines)
    check(bad(curve(200, lambda s: base[s][1] * (1 + 5e-4 * math.sin(s)))) == 0, "curves: 5e-4 noise after step 1 "
          "passes fp32: %s" % lines)
    check(bad(curve(200, lambda s: base[s][1] * (1 + 1e-4))) > 0 and any("step 1" in x for x in lines),
          "curves: a first step off by 1e-4 fails fp32")
    check(bad(curve(200, lambda s: base[s][1] * (1 + 1e-4)), "tf32") == 0, "curves: ... and passes TF32")
    check(bad(curve(200, lambda s: base[s][1] * (1 + 0.03 * s / 200)), "tf32") > 0 and
          bad(curve(200, lambda s: base[s][1] * (1 + 0.03 * s / 200)), "bf16") == 0,
          "curves: a drift to 3%% fails TF32 and passes bf16 (8 times its bounds): %s" % lines)
    check(bad(curve(200, lambda s: base[s][1] * (1 + 0.2 * s / 200)), "bf16") > 0, "curves: a drift to 20%% fails bf16")
    check(bad(curve(200, lambda s: base[s][1] * (1 + 0.03 * s / 200))) > 0 and any("all steps" in x for x in lines),
          "curves: a drift to 3%% fails")
    check(bad(curve(200, lambda s: base[s][1] * (1 + 0.004 * (s > 100)))) > 0 and
          any("last 20" in x for x in lines) and not any("all steps" in x for x in lines),
          "curves: a lasting 4e-3 offset fails on the tail mean only: %s" % lines)
    other = [(s, l, lr, g, b"x" * 8) for s, l, lr, g, _ in base]
    check(bad(other) > 0 and any("batches differ" in x for x in lines), "curves: other batches fail")
    check(bad(curve(200, lambda s: float("nan") if s == 150 else base[s][1])) > 0 and
          any("not finite" in x for x in lines), "curves: a NaN fails")
    check(bad(curve(200, lambda s: 5.5)) > 0 and any("does not learn" in x for x in lines),
          "curves: a GPU that does not learn fails")
    check(bad(base[:150]) > 0, "curves: a short run fails")


def real_dump():
    """the CPU mhe's own batch dump and progress lines, read as the check reads them"""
    why = mhetest.mhe_missing()
    if why:
        mhetest.RESULTS.skipped += 1
        print("SKIP real dump: " + why)
        return
    dump = os.path.join(TMP, "cpu.batches")
    rc, so, se = mhetest.run_mhe("train", "--data", "examples/data/train.txt", "--out", os.path.join(TMP, "m.st"),
                                 "--dump-batches", dump, "--steps", "30", "--batch", "4", "--seq_len", "16",
                                 "--d_model", "32", "--n_heads", "2", "--n_layers", "1", "--log_every", "5",
                                 "--lr", "1e-2", "--warmup", "1", "--threads", "1", cwd=REPO)
    check(rc == 0, "mhe train with a dump: %s" % se)
    if rc:
        return
    head, recs = gpu_check.read_dump(dump)
    ok, n, summary = gpu_check.parse_train(so, rc)
    check(head["batch"] == "4" and head["seq_len"] == "16" and len(recs) == 30 and
          [r[0] for r in recs] == list(range(30)) and all(len(r[4]) == 4 * 16 * 4 for r in recs),
          "the dump read: %s, %d records" % (head.get("batch"), len(recs)))
    check(ok and abs(n["final_loss"] - recs[-1][1]) < 1e-4 and n["tokens_per_s"] > 0,
          "train parser: final loss %s = the dump's last %.4f" % (n.get("final_loss"), recs[-1][1]))
    lines = []
    check(gpu_check.compare_curves(recs, recs, "fp32", lines.append) == 0, "a real dump against itself: %s" % lines)
    lines = []
    check(gpu_check.compare_curves(recs, recs[:1] + recs[2:] + recs[-1:], "fp32", lines.append) > 0 and
          any("batches differ" in x for x in lines), "a real dump against itself one step off: %s" % lines)
    with open(dump, "rb") as f:
        data = f.read()
    with open(dump + ".cut", "wb") as f:
        f.write(data[:-7])
    try:
        gpu_check.read_dump(dump + ".cut")
        check(False, "a cut dump is refused")
    except ValueError:
        check(True, "a cut dump is refused")


def main():
    no_gpu()
    dry_run_pass()
    dry_run_failures()
    budget_and_signal()
    prebuilt()
    parsers_match_the_programs()
    curves()
    real_dump()
    return mhetest.finish()


if __name__ == "__main__":
    sys.exit(main())
