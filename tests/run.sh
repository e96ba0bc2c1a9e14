#!/bin/sh
# Runs every test program in build/tests (and the Python cross-checks), adds up
# their "RESULT: N passed, N failed" lines and ends with the total line.
# A program that crashes or prints no RESULT line counts as one failure.
cd "$(dirname "$0")/.." || exit 2
BUILD=${MHE_TEST_BUILD:-build}
# MHE_TEST_RUNNER runs foreign binaries (e.g. qemu-aarch64-static); MHE_BIN may name a wrapper
RUNNER=${MHE_TEST_RUNNER:-}
export MHE_BIN="${MHE_BIN:-$BUILD/mhe}"
pass=0; fail=0; skip=0
# MHE_TEST_ONLY (make test T=...): only the tests whose name, with or without
# its extension, matches this shell pattern, e.g. test_q8, 'test_cli*', test_twin.py
only() {
    [ -z "${MHE_TEST_ONLY:-}" ] && return 0
    n=$(basename "$1"); base=${n%.*}
    # shellcheck disable=SC2254
    case $n in $MHE_TEST_ONLY) return 0 ;; esac
    case $base in $MHE_TEST_ONLY) return 0 ;; esac
    return 1
}
# MHE_TEST_JOBS=N (the single-threaded flavour builds: N = 2) runs N test
# programs at a time, each into its own file; the totals below read them in
# order, so the report is the same as one at a time
JOBS=${MHE_TEST_JOBS:-1}
DONE=$(mktemp -d) || exit 2
trap 'rm -rf "$DONE"' EXIT
if [ "$JOBS" -gt 1 ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] && only "$t" && echo "$t"
    done | RUNNER="$RUNNER" DONE="$DONE" xargs -P "$JOBS" -I{} sh -c \
        't0=$(date +%s); f="$DONE/$(basename "$1")"; $RUNNER "$1" > "$f.out" 2>&1; echo $? > "$f.rc"; echo $(($(date +%s) - t0)) > "$f.secs"' _ {}
fi
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    only "$t" || continue
    if [ "$JOBS" -gt 1 ]; then
        f="$DONE/$(basename "$t")"
        out=$(cat "$f.out" 2>/dev/null); rc=$(cat "$f.rc" 2>/dev/null || echo 127); secs=$(cat "$f.secs" 2>/dev/null || echo 0)
    else
        t0=$(date +%s)
        out=$($RUNNER "$t" 2>&1); rc=$?
        secs=$(($(date +%s) - t0))
    fi
    line=$(printf '%s\n' "$out" | grep '^RESULT:' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "CRASH $t (exit $rc, no RESULT line)"; fail=$((fail + 1)); continue
    fi
    p=$(echo "$line" | sed 's/RESULT: \([0-9]*\) passed.*/\1/')
    f=$(echo "$line" | sed 's/.* \([0-9]*\) failed.*/\1/')
    s=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    [ "$f" -ne 0 ] || [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -E 'FAIL|error' | head -n 30
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    echo "$t: $p passed, $f failed${s:+, $s skipped} ($secs s)"
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${s:-0}))
done
# The Python scripts: which run (below), then MHE_TEST_PY_JOBS (default 2) at a
# time, each into its own file, and those that time signals, timeouts or
# resumes of their child processes one at a time after them; the report
# keeps the scripts' order. Most scripts spend their time waiting on one mhe
# process at a time, so two at once nearly halve this part on two cores.
ALONE="test_cli_signals.py test_compare.py test_gpu_check.py test_bench_decode.py"
: > "$DONE/py.list"
for py in tests/*.py; do
    [ -f "$py" ] || continue
    only "$py" || continue
    # MHE_TEST_PYTHON=0: the build's mhe cannot run them (the Windows build under wine);
    # =sanitize: every suite that runs mhe (make test runs the rest);
    # =flavour (the 32-bit, fast-math and aarch64 builds): only the suites whose
    # results depend on how mhe was built (the CLI scripts, the PyTorch
    # cross-check, the calculators, the examples); the rest (the twin, lockstep,
    # docs, gpu-check) run once, in make test and under the sanitizers
    case ${MHE_TEST_PYTHON:-1} in
    0) echo "SKIP $py: MHE_TEST_PYTHON=0"; skip=$((skip + 1)); continue ;;
    flavour)
        case $(basename "$py") in
        # under an emulator (qemu) the signal tests time qemu's own signal
        # delivery; they run natively in make test, the sanitizer, fast-math and 32-bit suites
        test_cli_signals.py) [ -n "$RUNNER" ] && continue ;;
        test_cli*.py | torch_crosscheck.py | test_params.py | test_hash_params.py | test_compare.py | test_decon.py) ;;
        *) continue ;;
        esac ;;
    sanitize)   # all but the scripts that never run the build's mhe (they read sources or stubs,
                # or build their own: the browser page)
        case $(basename "$py") in
        test_docs.py | test_guide.py | test_kinds.py | test_gpu_check.py | test_web.py) continue ;;
        esac ;;
    esac
    echo "$py" >> "$DONE/py.list"
done
# one script into $DONE/<name>.out, .rc, .secs
PY_ONE='f="$DONE/$(basename "$1")"; t0=$(date +%s); sh tests/python.sh "$1" > "$f.out" 2>&1; echo $? > "$f.rc"; echo $(($(date +%s) - t0)) > "$f.secs"'
export DONE
while read -r py; do
    case " $ALONE " in *" $(basename "$py") "*) continue ;; esac
    echo "$py"
done < "$DONE/py.list" | xargs -P "${MHE_TEST_PY_JOBS:-2}" -I{} sh -c "$PY_ONE" _ {}
while read -r py; do
    case " $ALONE " in *" $(basename "$py") "*) sh -c "$PY_ONE" _ "$py" ;; esac
done < "$DONE/py.list"
while read -r py; do
    f="$DONE/$(basename "$py")"
    out=$(cat "$f.out" 2>/dev/null); secs=$(cat "$f.secs" 2>/dev/null || echo 0)
    line=$(printf '%s\n' "$out" | grep '^RESULT:' | tail -n 1)
    if [ -z "$line" ]; then printf '%s\n' "$out" | tail -n 20; echo "CRASH $py"; fail=$((fail + 1)); continue; fi
    printf '%s\n' "$out" | grep -E '^(SKIP|FAIL)' | head -n 30
    p=$(echo "$line" | sed 's/RESULT: \([0-9]*\) passed.*/\1/')
    f=$(echo "$line" | sed 's/.* \([0-9]*\) failed.*/\1/')
    s=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    echo "$py: $p passed, $f failed${s:+, $s skipped} ($secs s)"
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + ${s:-0}))
done < "$DONE/py.list"
if [ $((pass + fail + skip)) -eq 0 ] && [ -n "${MHE_TEST_ONLY:-}" ]; then
    echo "no test matches '$MHE_TEST_ONLY'"; fail=1
fi
if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
[ "$fail" -eq 0 ]
