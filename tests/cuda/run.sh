#!/bin/sh
# tests/cuda/run.sh - make test-cuda: the CUDA kernels executed on the CPU.
# Each test program is built in some of four ways from the same source
# through tests/cuda/emu.h:
#   fibers      one fiber per CUDA thread, blocks one after another; run in
#               forward order, then in reversed order (MHE_EMU_ORDER=reverse:
#               threads and blocks last to first)
#   blocks      several blocks at once on 4 threads (fibers on each) under
#               ThreadSanitizer, which sees each warp as a thread: races
#               between blocks (a missing atomic) and between warps (a
#               missing barrier); run in shuffled block orders (MHE_EMU_SEED)
#   tsan        one pthread per CUDA thread under ThreadSanitizer: races
#               inside a warp too, but slow, so on test_cuda's small groups
#   asan        one pthread per CUDA thread under AddressSanitizer + UBSan
#               (shared memory sized too small, out-of-bounds indexing)
# test_cuda's large group (the model at T = 80, three key tiles, float32,
# TF32 and bf16) and its curve group (200 training steps per precision
# against the CPU's losses) run once, in fibers. Then tools/cli/mhe.c built on the emulation: `mhe
# eval` and `mhe generate --device cuda` against the same binary's CPU path
# (tests/cuda/cli.sh). Then the programs' own failure paths: without a device
# one line and exit status 3 (MHE_EMU_DEVICES=0), out of device memory the
# failed call named (MHE_EMU_MEM_LIMIT). Then the harness's own teeth: the
# kernels' broken variants, chosen at start-up by MHE_CUDA_FAULT=1 (a missing
# barrier), 2 (a shared buffer one float short), 3 (two mma fragment
# registers swapped) and 4 (a plain += for an atomicAdd: a race between
# blocks that only the blocks mode sees) must each be caught. The runs go
# EMU_JOBS (default 2) at a time. Ends with "RESULT: N passed, M failed".
# shellcheck disable=SC2086  # the flag lists are split into words on purpose
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

# The blocks mode's TSan builds without function entry/exit hooks: the
# threads of a warp share one TSan call stack, which a report would print
# in full. Its reports then give the racing lines only (clang or gcc flag).
if echo 'int x;' | $EMU_CXX -fsanitize=thread -fno-sanitize-thread-func-entry-exit -x c++ -c -o /dev/null - 2>/dev/null; then
    NO_FUNC_HOOKS=-fno-sanitize-thread-func-entry-exit
else
    NO_FUNC_HOOKS=--param=tsan-instrument-func-entry-exit=0
fi
BLOCKS_FLAGS="-O1 -DMHE_EMU_BLOCKS -fsanitize=thread $NO_FUNC_HOOKS"
TSAN_FLAGS="-O1 -DMHE_EMU_THREADS -fsanitize=thread"
ASAN_FLAGS="-O1 -DMHE_EMU_THREADS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

# build OUT SRC MODE [extra flags]: $B/OUT.MODE from tests/cuda/SRC.cpp (SRC
# mhe: the command-line tool, tools/cli/mhe.c with --device cuda)
build() {
    out=$1 src=$2 mode=$3
    shift 3
    case $mode in
    fibers) flags="-O1" ;;
    blocks) flags=$BLOCKS_FLAGS ;;
    tsan) flags=$TSAN_FLAGS ;;
    asan) flags=$ASAN_FLAGS ;;
    esac
    rm -f "$B/$out.$mode"  # no stale binary if the build fails
    if [ "$src" = mhe ]; then
        $EMU_CXX $EMU_FLAGS $flags "$@" -DMHE_CUDA -x c++ -o "$B/$out.$mode" tools/cli/mhe.c tools/cli/mhe_params.c $LIBS
    else  # one file each: MHE_STATIC drops the library functions it does not call (as the C tests)
        $EMU_CXX $EMU_FLAGS $flags -DMHE_STATIC "$@" -o "$B/$out.$mode" "tests/cuda/$src.cpp" $LIBS
    fi
}
# sh tests/cuda/run.sh --build OUT SRC MODE [flags]: one build (the parallel builds below)
if [ "${1:-}" = --build ]; then
    shift
    build "$@"
    exit $?
fi
# sh tests/cuda/run.sh --run-one N CMD...: one queued run (run_queued below)
run_one() {   # N CMD: out, status and seconds of queued run N into $B/run.N.*
    n=$1
    shift
    start=$(date +%s)
    "$@" > "$B/run.$n.out" 2>&1
    echo $? > "$B/run.$n.rc"
    echo $(($(date +%s) - start)) > "$B/run.$n.secs"
}
if [ "${1:-}" = --run-one ]; then
    shift
    run_one "$@"
    exit 0
fi

# every program, in every mode, built first, EMU_JOBS at a time (default 2:
# most of the suite's time was these compilations, one after another); the
# deliberately broken variants are the same binaries run with MHE_CUDA_FAULT=N
# (tests/cuda/emu.h reads it when the program starts)
modes_of() {
    case $1 in
    test_attn) echo "fibers blocks asan" ;;
    *) echo "fibers blocks tsan asan" ;;
    esac
}
{
    for prog in test_emu test_attn test_cuda; do
        for mode in $(modes_of $prog); do echo "$prog $prog $mode"; done
    done
    echo "mhe mhe fibers"
} | B="$B" EMU_CXX="$EMU_CXX" EMU_FLAGS="$EMU_FLAGS" xargs -P "${EMU_JOBS:-2}" -L 1 sh "$0" --build

# built NAME MODE: true if MODE is one of $modes and NAME was built in it
built() {
    case " $modes " in
    *" $2 "*) [ -x "$B/$1.$2" ] ;;
    *) false ;;
    esac
}

# run LABEL CMD...: queued (CMD's words have no spaces); run_queued runs the
# queue EMU_JOBS at a time (each program is one thread, the blocks mode's
# runners aside, and they are independent), then reports each in queue order:
# the program's own RESULT line (if any) is added to the totals
queue=$B/queue
: > "$queue"
run() {
    label=$1
    shift
    n=$(($(wc -l < "$queue") + 1))
    printf '%s\t%s\t%s\n' "$n" "$label" "$*" >> "$queue"
}
run_queued() {
    rm -f "$B"/run.*.out "$B"/run.*.rc "$B"/run.*.secs
    cut -f 1,3 "$queue" | tr '\t' ' ' | B="$B" xargs -P "${EMU_JOBS:-2}" -L 1 sh "$0" --run-one
    while IFS="$(printf '\t')" read -r n label cmd; do
        report "$label" "$(cat "$B/run.$n.out" 2>/dev/null)" "$(cat "$B/run.$n.rc" 2>/dev/null || echo 127)" \
            "$(cat "$B/run.$n.secs" 2>/dev/null || echo 0)"
    done < "$queue"
    : > "$queue"
}
report() {   # LABEL OUTPUT STATUS SECONDS
    label=$1 out=$2 rc=$3 secs=$4
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

TSAN="env TSAN_OPTIONS=halt_on_error=1"
# the longest runs first (test_cuda's), so the last ones to finish are short
for prog in test_cuda test_attn test_emu; do
    # The blocks mode replaces the threads mode under TSan where that was
    # slow (test_attn, test_cuda's model group: most of its time).
    modes=$(modes_of $prog)
    for mode in $modes; do
        [ -x "$B/$prog.$mode" ] || bad "build $prog ($mode)"
    done
    built $prog fibers && run "$prog fibers" env MHE_EMU_ORDER=forward "$B/$prog.fibers"
    # reversed, test_cuda leaves out its train group (a quarter of its time): the lockstep runs
    # repeat kernels the other groups run in both orders
    reversed_groups=
    [ $prog = test_cuda ] && reversed_groups=gemm,tf32,bf16,norm,elementwise,model,kinds,decode,prefill,eval,errors,features,encdec,hash
    built $prog fibers && run "$prog fibers, reversed order" env MHE_EMU_ORDER=reverse "$B/$prog.fibers" $reversed_groups
    # the model at T = 80 (three key tiles), float32 and TF32: once, it takes seconds
    [ $prog = test_cuda ] && built $prog fibers && run "$prog large, fibers" "$B/$prog.fibers" large
    # 200 training steps in each precision against the CPU's loss curve: once, it takes most of a minute
    [ $prog = test_cuda ] && built $prog fibers && run "$prog curve, fibers" "$B/$prog.fibers" curve
    if [ $prog != test_cuda ]; then
        built $prog blocks && run "$prog blocks, ThreadSanitizer" $TSAN MHE_EMU_SEED=1 "$B/$prog.blocks"
        built $prog tsan && run "$prog ThreadSanitizer" $TSAN "$B/$prog.tsan"
        # test_attn's quick cases under ASan: every kind, path and width (the 256-column head's
        # opt-in shared memory too) with a thread per CUDA thread is most of this script's time
        if [ $prog = test_attn ]; then
            built $prog asan && run "$prog quick, ASan+UBSan" "$B/$prog.asan" quick
        else
            built $prog asan && run "$prog ASan+UBSan" "$B/$prog.asan"
        fi
        continue
    fi
    # The sanitizer runs skip the long training, decoding and per-kind
    # groups: their kernels are those of the model group (whose two hybrids
    # run every kernel of the ch. 4 and FNet kinds, decoding included) and
    # test_attn (decoding's core, Tq = 1). Each group in another block order.
    seed=2
    for g in gemm tf32 bf16 norm elementwise model errors; do
        built $prog blocks && run "$prog $g blocks, ThreadSanitizer" $TSAN MHE_EMU_SEED=$seed "$B/$prog.blocks" $g
        seed=$((seed + 1))
        built $prog tsan && [ $g != model ] && run "$prog $g ThreadSanitizer" $TSAN "$B/$prog.tsan" $g
        built $prog asan && run "$prog $g ASan+UBSan" "$B/$prog.asan" $g
    done
done

# the command-line tool on the emulation (fibers, forward order: its kernels are the model's)
echo "== mhe --device cuda on the emulation"
if [ -x "$B/mhe.fibers" ]; then
    run "mhe eval, generate --device cuda vs the CPU" sh tests/cuda/cli.sh "$B/mhe.fibers"
else
    bad "build tools/cli/mhe.c on the emulation"
fi
echo "== the runs above, ${EMU_JOBS:-2} at a time, reported in order"
run_queued

# the programs' own failures: no device is one line and status 3 (a GPU
# machine's check tells it from a failure); a failed allocation names itself
echo "== no device, failed allocation"
for prog in test_cuda test_attn; do
    [ -x "$B/$prog.fibers" ] || continue
    out=$(MHE_EMU_DEVICES=0 "$B/$prog.fibers" 2>&1)
    rc=$?
    if [ $rc -eq 3 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] && printf '%s\n' "$out" | grep -q "^$prog: no CUDA device"; then
        ok "$prog without a device: one line, exit 3"
    else
        printf '%s\n' "$out" | tail -n 5
        bad "$prog without a device (exit $rc)"
    fi
    out=$(MHE_EMU_MEM_LIMIT=1000 "$B/$prog.fibers" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q "^FAIL $prog: cudaMalloc of [0-9]* bytes: out of memory" &&
        printf '%s\n' "$out" | grep -q '^RESULT:'; then
        ok "$prog out of device memory: the call named, exit 1"
    else
        printf '%s\n' "$out" | tail -n 5
        bad "$prog out of device memory was not reported (exit $rc)"
    fi
done

# the harness catches broken kernels
echo "== broken variants (each must be caught)"
# (the binaries the variants run are test_cuda's, built above; a missing one was reported there)
F=$B/test_cuda
[ -x "$F.fibers" ] && caught "missing barrier, fibers in both orders" "FAIL" \
        sh -c "MHE_CUDA_FAULT=1 MHE_EMU_ORDER=forward $F.fibers gemm && MHE_CUDA_FAULT=1 MHE_EMU_ORDER=reverse $F.fibers gemm"
[ -x "$F.tsan" ] && caught "missing barrier, ThreadSanitizer" "ThreadSanitizer: data race" \
        env MHE_CUDA_FAULT=1 $TSAN "$F.tsan" gemm
[ -x "$F.blocks" ] && caught "missing barrier, blocks under ThreadSanitizer" "ThreadSanitizer: data race" \
        env MHE_CUDA_FAULT=1 $TSAN "$F.blocks" gemm
[ -x "$F.asan" ] && caught "shared buffer one float short, AddressSanitizer" "AddressSanitizer: heap-buffer-overflow" \
        env MHE_CUDA_FAULT=2 "$F.asan" norm
[ -x "$F.fibers" ] && caught "swapped mma fragment" "FAIL.*tf32 gemm" env MHE_CUDA_FAULT=3 "$F.fibers" tf32
# The fiber and threads modes pass this one: they run one block at a time.
[ -x "$F.blocks" ] && caught "plain += for atomicAdd (embedding backward), blocks under ThreadSanitizer" "ThreadSanitizer: data race" \
        env MHE_CUDA_FAULT=4 $TSAN "$F.blocks" elementwise

echo "RESULT: $passed passed, $failed failed"
[ $failed -eq 0 ]
