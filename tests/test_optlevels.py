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
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from mhetest import REPO, build_dir, check, finish, rel_err, skip, tmpdir  # noqa: E402

PROBE = os.path.join(REPO, "tests", "probes", "optlevel_probe.c")


def build_run(cc, flags, d, env=None):
    exe = os.path.join(d, "probe_%d" % abs(hash((cc,) + tuple(flags))))
    p = subprocess.run([cc] + flags + ["-std=c99", "-o", exe, PROBE, "-lm"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr[-500:]
    r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        return None, r.stdout[-300:] + r.stderr[-300:]
    return r.stdout, ""


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
    runs = {}
    for name, flags in [("O0", ["-O0"]), ("O2", ["-O2"]), ("O2n", ["-O2", "-march=native"]),
                        ("O3n", ["-O3", "-march=native"]), ("O2n-omp", ["-O2", "-march=native", "-fopenmp"])]:
        out, err = build_run(cc, flags, d)
        check(out is not None, "%s %s builds and runs: %s" % (cc, " ".join(flags), err))
        runs[name] = out
    env1, env2 = dict(os.environ, OMP_NUM_THREADS="1"), dict(os.environ, OMP_NUM_THREADS="2")
    o1, _ = build_run(cc, ["-O2", "-march=native", "-fopenmp"], d, env1)
    o2, _ = build_run(cc, ["-O2", "-march=native", "-fopenmp"], d, env2)
    if all(runs.values()) and o1 and o2:
        check(runs["O2n"] == runs["O3n"], "-O2 -march=native and -O3 -march=native agree bit for bit")
        check(runs["O0"] == runs["O2"], "-O0 and -O2 (portable) agree bit for bit")
        check(runs["O2n"] == o1 == o2, "OpenMP at 1 and 2 threads equals the build without OpenMP bit for bit")
        close(runs["O2"], runs["O2n"], "portable vs -march=native")
        clang = shutil.which("clang")
        if clang and os.path.basename(cc) != "clang":
            out, err = build_run(clang, ["-O2", "-march=native"], d)
            check(out is not None, "clang builds the probe: %s" % err)
            if out:
                close(out, runs["O2n"], "clang vs %s" % cc)
        for name, out in runs.items():
            print("%-8s %s" % (name, " ".join(out.split()[-2:])))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
