#!/bin/sh
# tests/cuda/run.sh - make test-cuda: the CUDA kernels executed on the CPU.
# Each test program is built three ways from the same source through
# tests/cuda/emu.h and run four times:
#   fibers      one fiber per CUDA thread, threads run in forward order, then
#               again in reversed order (MHE_EMU_ORDER=reverse)
#   tsan        one pthread per CUDA thread under ThreadSanitizer (races,
#               missing barriers)
#   asan        one pthread per CUDA thread under AddressSanitizer + UBSan
#               (shared memory sized too small, out-of-bounds indexing)
# Then the harness's own teeth: the kernels rebuilt with MHE_CUDA_FAULT=1
# (a missing barrier), 2 (a shared buffer one float short) and 3 (two mma
# fragment registers swapped) must each be caught. Ends with
# "RESULT: N passed, M failed".
set -u
B=${B:-build/emu}
EMU_CXX=${EMU_CXX:-clang++}
EMU_FLAGS=${EMU_FLAGS:--std=c++20 -g -I. -DMHE_CUDA_EMULATE -include tests/cuda/emu.h -Wall -Wextra -Werror}
LIBS="-lm -lpthread"
mkdir -p "$B"
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

# build NAME MODE [extra flags]: $B/NAME.MODE
build() {
    name=$1 mode=$2
    shift 2
    case $mode in
    fibers) flags="-O1" ;;
    tsan) flags="-O1 -DMHE_EMU_THREADS -fsanitize=thread" ;;
    asan) flags="-O1 -DMHE_EMU_THREADS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" ;;
    esac
    # shellcheck disable=SC2086
    $EMU_CXX $EMU_FLAGS $flags "$@" -o "$B/$name.$mode" "tests/cuda/$name.cpp" $LIBS
}

# run LABEL CMD...: the program's own RESULT line (if any) is added to the totals
run() {
    label=$1
    shift
    start=$(date +%s)
    out=$("$@" 2>&1)
    rc=$?
    secs=$(($(date +%s) - start))
    # the last "N passed, M failed" line (RESULT: of tests/test.h, or test_emu's "emu:")
    p=$(printf '%s\n' "$out" | sed -n 's/^[A-Za-z]*: \([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' | tail -n 1)
    f=$(printf '%s\n' "$out" | sed -n 's/^[A-Za-z]*: \([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' | tail -n 1)
    if [ $rc -eq 0 ] && ! printf '%s\n' "$out" | grep -q 'Sanitizer'; then
        echo "$label: ${p:-?} checks passed (${secs} s)"
        passed=$((passed + ${p:-1}))
    else
        printf '%s\n' "$out" | grep -v '^ok' | tail -n 40
        echo "$label: FAILED (exit $rc, ${secs} s)"
        passed=$((passed + ${p:-0}))
        failed=$((failed + ${f:-0} + 1))
    fi
}

# caught LABEL PATTERN CMD...: the broken build must fail, and say PATTERN
caught() {
    label=$1 pattern=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q "$pattern"; then
        ok "$label (exit $rc, '$pattern')"
    else
        printf '%s\n' "$out" | tail -n 15
        bad "$label was not caught (exit $rc, no '$pattern')"
    fi
}

for prog in test_emu test_attn test_cuda; do
    for mode in fibers tsan asan; do
        if ! build $prog $mode; then
            bad "build $prog ($mode)"
            continue
        fi
    done
    [ -x "$B/$prog.fibers" ] && run "$prog fibers" env MHE_EMU_ORDER=forward "$B/$prog.fibers"
    [ -x "$B/$prog.fibers" ] && run "$prog fibers, reversed order" env MHE_EMU_ORDER=reverse "$B/$prog.fibers"
    # the sanitizer runs skip the long training, decoding and per-kind groups: their kernels are those of the
    # model group (whose two hybrids run every kernel of the ch. 4 and FNet kinds, decoding included) and test_attn
    if [ $prog = test_cuda ]; then
        groups="gemm tf32 norm elementwise model errors"  # decoding's core (Tq = 1) is in test_attn
    else
        groups=""
    fi
    if [ -z "$groups" ]; then
        [ -x "$B/$prog.tsan" ] && run "$prog ThreadSanitizer" env TSAN_OPTIONS=halt_on_error=1 "$B/$prog.tsan"
        [ -x "$B/$prog.asan" ] && run "$prog ASan+UBSan" "$B/$prog.asan"
    else
        for g in $groups; do
            [ -x "$B/$prog.tsan" ] && run "$prog $g ThreadSanitizer" env TSAN_OPTIONS=halt_on_error=1 "$B/$prog.tsan" $g
            [ -x "$B/$prog.asan" ] && run "$prog $g ASan+UBSan" "$B/$prog.asan" $g
        done
    fi
done

# the harness catches broken kernels
echo "== broken variants (each must be caught)"
$EMU_CXX $EMU_FLAGS -O1 -DMHE_CUDA_FAULT=1 -o "$B/fault1.fibers" tests/cuda/test_cuda.cpp $LIBS &&
    caught "missing barrier, fibers in both orders" "FAIL" sh -c "MHE_EMU_ORDER=forward $B/fault1.fibers gemm && MHE_EMU_ORDER=reverse $B/fault1.fibers gemm"
$EMU_CXX $EMU_FLAGS -O1 -DMHE_EMU_THREADS -fsanitize=thread -DMHE_CUDA_FAULT=1 -o "$B/fault1.tsan" tests/cuda/test_cuda.cpp $LIBS &&
    caught "missing barrier, ThreadSanitizer" "ThreadSanitizer: data race" env TSAN_OPTIONS=halt_on_error=1 "$B/fault1.tsan" gemm
$EMU_CXX $EMU_FLAGS -O1 -DMHE_EMU_THREADS -fsanitize=address,undefined -fno-sanitize-recover=all -DMHE_CUDA_FAULT=2 \
    -o "$B/fault2.asan" tests/cuda/test_cuda.cpp $LIBS &&
    caught "shared buffer one float short, AddressSanitizer" "AddressSanitizer: heap-buffer-overflow" "$B/fault2.asan" norm
$EMU_CXX $EMU_FLAGS -O1 -DMHE_CUDA_FAULT=3 -o "$B/fault3.fibers" tests/cuda/test_cuda.cpp $LIBS &&
    caught "swapped mma fragment" "FAIL.*tf32 gemm" "$B/fault3.fibers" tf32

echo "RESULT: $passed passed, $failed failed"
[ $failed -eq 0 ]
