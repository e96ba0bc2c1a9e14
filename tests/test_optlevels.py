"""The same program at different optimisation levels gives the same numbers.

Builds tests/probes/optlevel_probe.c (20 training steps of a small model with
dropout and the mha, mhe-mul and mhe-add kinds, then the weights' checksum and
one forward's logits) with the C compiler at several settings and compares the
printed values:

  * bit for bit: -O2 -march=native and -O3 -march=native (the same SIMD
    kernels; the library's own exp and fixed-lane sums keep vectorised loops
    exact), -O0 and -O2 for the portable target, and OpenMP builds at 1 and 2
    threads against the build without OpenMP (every sum has one order);
  * within 1e-4 relative (losses, logits) and 1e-3 (weights checksum after 20
    steps): the portable build against the -march=native one, whose FMA
    instructions round differently, and clang against gcc where both exist.
Needs a C compiler; skips (and says so) without one."""
import concurrent.futures
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, build_dir, check, finish, rel_err, skip, tmpdir  # noqa: E402

PROBE = os.path.join(REPO, "tests", "probes", "optlevel_probe.c")


def exe_path(cc, flags, d):
    return os.path.join(d, "probe_%s_%s" % (os.path.basename(cc), "_".join(f.strip("-").replace("=", "") for f in flags)))


def build(cc, flags, d):
    """the probe built with cc and flags: (path, "") or (None, the compiler's complaint)"""
    exe = exe_path(cc, flags, d)
    p = subprocess.run([cc] + flags + ["-std=c99", "-o", exe, PROBE, "-lm"], capture_output=True, text=True)
    return (exe, "") if p.returncode == 0 else (None, p.stderr[-500:])


def run(exe, env=None):
    """the probe's printed values: (text, "") or (None, why not)"""
    r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=300)
    return (r.stdout, "") if r.returncode == 0 else (None, r.stdout[-300:] + r.stderr[-300:])


def build_run(job):
    cc, flags, d, env = job
    exe, err = build(cc, flags, d)
    return run(exe, env) if exe else (None, err)


def values(out):
    v = {}
    for line in out.splitlines():
        parts = line.split()
        v[" ".join(parts[:-1])] = float(parts[-1])
    return v


def close(a, b, what):
    va, vb = values(a), values(b)
    worst = 0.0
    for k in va:
        tol = 1e-3 if k == "weights" else 1e-4
        err = rel_err(va[k], vb.get(k, float("nan")), 1e-3)   # a missing key: NaN, which max() passes over
        worst = max(worst, err / tol)
    check(set(va) == set(vb) and worst <= 1.0, "%s: within tolerance (worst %.3g of the limit)" % (what, worst))


def main():
    if build_dir() != "build":
        # the probe is compiled here, independent of the suite's build: once is enough
        return skip("test_optlevels.py", "runs in the main suite (make test) only")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        return skip("test_optlevels.py", "no C compiler")
    d = tmpdir("mhe_opt_")
    # each build and run is one process: two at a time (the suite's two cores), the OpenMP
    # build run again at 1 and 2 threads
    env1, env2 = dict(os.environ, OMP_NUM_THREADS="1"), dict(os.environ, OMP_NUM_THREADS="2")
    jobs = [("O0", cc, ["-O0"], None), ("O2", cc, ["-O2"], None), ("O2n", cc, ["-O2", "-march=native"], None),
            ("O3n", cc, ["-O3", "-march=native"], None), ("O2n-omp", cc, ["-O2", "-march=native", "-fopenmp"], None)]
    clang = shutil.which("clang")
    if clang and os.path.basename(cc) != "clang":
        jobs.append(("clang", clang, ["-O2", "-march=native"], None))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip([j[0] for j in jobs], pool.map(build_run, [(c, f, d, e) for _, c, f, e in jobs])))
    omp_exe = exe_path(cc, ["-O2", "-march=native", "-fopenmp"], d) if done["O2n-omp"][0] else None
    o1, _ = run(omp_exe, env1) if omp_exe else (None, "")
    o2, _ = run(omp_exe, env2) if omp_exe else (None, "")
    runs = {}
    for name, c, flags, _ in jobs:
        if name == "clang":
            continue
        out, err = done[name]
        check(out is not None, "%s %s builds and runs: %s" % (c, " ".join(flags), err))
        runs[name] = out
    if all(runs.values()) and o1 and o2:
        check(runs["O2n"] == runs["O3n"], "-O2 -march=native and -O3 -march=native agree bit for bit")
        check(runs["O0"] == runs["O2"], "-O0 and -O2 (portable) agree bit for bit")
        check(runs["O2n"] == o1 == o2, "OpenMP at 1 and 2 threads equals the build without OpenMP bit for bit")
        close(runs["O2"], runs["O2n"], "portable vs -march=native")
        if "clang" in done:
            out, err = done["clang"]
            check(out is not None, "clang builds the probe: %s" % err)
            if out:
                close(out, runs["O2n"], "clang vs %s" % cc)
        for name, out in runs.items():
            print("%-8s %s" % (name, " ".join(out.split()[-2:])))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
