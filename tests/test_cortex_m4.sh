#!/bin/sh
# The q8 tiny LM on a Cortex-M4 (qemu-system-arm, board mps2-an386, FPU on):
# examples/embedded.c built by arm-none-eabi-gcc with the model in flash must
# produce the same tokens as the x86 build of the same program and model, and
# as `mhe generate` on the q8 file, under greedy decoding; plus its argmax
# after every prompt byte. Prints the footprint, qemu's instruction count per
# token (-icount shift=0: one instruction per virtual ns; not cycles) and the
# decode speed under qemu. Skips when the ARM compiler or qemu is missing.
# Usage: sh tests/test_cortex_m4.sh [BUILD_DIR]   (make test-cortex-m4)
cd "$(dirname "$0")/.." || exit 2
B=${1:-build}
QEMU=${QEMU_SYSTEM_ARM:-qemu-system-arm}
for tool in arm-none-eabi-gcc arm-none-eabi-size "$QEMU"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP test_cortex_m4: $tool not found (Debian: gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm)"
        echo "RESULT: 0 passed, 0 failed, 1 skipped"; exit 0
    fi
done
${MAKE:-make} -s B="$B" "$B/m4/embedded_q8.elf" "$B/m4/embedded_q8_host" "$B/q8/tiny_lm_q8.safetensors" || exit 1
ELF=$B/m4/embedded_q8.elf
pass=0; fail=0
check() {   # check NAME CONDITION-RESULT(0/1) [detail]
    if [ "$2" -eq 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1${3:+: $3}"; fi
}
# semihosting on (output, exit status); no serial port or monitor on stdio
run_m4() { timeout 120 "$QEMU" -M mps2-an386 -nographic -monitor none -serial none \
               -semihosting-config enable=on,target=native "$@" -kernel "$ELF"; }

x86=$("$B/m4/embedded_q8_host"); rc=$?
check "x86 build runs" $rc
t0=$(date +%s%N)
m4=$(run_m4 -icount shift=0); rc=$?
t1=$(date +%s%N)
check "Cortex-M4 run exits 0 under qemu" $rc "exit $rc; output: $m4"

# line 4: the prompt and the generated text; then the argmax after each prompt byte
text_x86=$(printf '%s\n' "$x86" | sed -n '4p');   text_m4=$(printf '%s\n' "$m4" | sed -n '4p')
arg_x86=$(printf '%s\n' "$x86" | grep '^argmax');  arg_m4=$(printf '%s\n' "$m4" | grep '^argmax')
[ -n "$text_x86" ] && [ "$text_x86" = "$text_m4" ]; check "generated tokens: Cortex-M4 = x86" $? "x86 '$text_x86' vs M4 '$text_m4'"
[ -n "$arg_x86" ] && [ "$arg_x86" = "$arg_m4" ]; check "argmax after each prompt byte: Cortex-M4 = x86" $? "x86 '$arg_x86' vs M4 '$arg_m4'"
n_prompt=$(printf '%s\n' "$arg_x86" | awk '{print NF - 5}')   # "argmax after each prompt byte:" is 5 words
prompt=$(printf '%s' "$text_x86" | head -c "$n_prompt")
gen=$("$B/mhe" generate --model "$B/q8/tiny_lm_q8.safetensors" --prompt "$prompt" --temperature 0 \
      --n $((64 - n_prompt)) --threads 1 2>/dev/null)
[ "$gen" = "$text_x86" ]; check "mhe generate --temperature 0 on the q8 file gives the same text" $? "'$gen'"
case "$m4" in *"no other allocation"*) r=0 ;; *) r=1 ;; esac; check "model loads in place into the static arena" $r

# footprint: flash holds code, constants (the model) and .data's initial image
set -- $(arm-none-eabi-size -A "$ELF" | awk '$1==".text"||$1==".ARM.exidx"{f+=$2} $1==".data"{d=$2} $1==".bss"{b=$2} $1==".stack"{s=$2}
                                         END{print f+d, d, b, s}')
flash=$1; data=$2; bss=$3; stack=$4
arena=$(grep '#define tiny_lm_ARENA_BYTES ' "$B/q8/tiny_lm_model.h" | awk '{print $3}')
decode=$(printf '%s\n' "$m4" | grep '^decode:')
tokens=$(echo "$decode" | sed 's/decode: \([0-9]*\) tokens.*/\1/')
ticks=$(echo "$decode" | sed 's/.* in \([0-9]*\) SysTick.*/\1/')
used=$(echo "$decode" | sed 's/.*stack used: \([0-9]*\) bytes.*/\1/')
heap=$(echo "$decode" | sed 's/.*heap (newlib stdio): \([0-9]*\) bytes.*/\1/')
[ -n "$decode" ]; check "the run reports its clock, stack and heap" $?
# a high-water mark at the reservation means the stack ran into .bss (the SysTick count, the arena)
[ -n "$used" ] && [ "$used" -lt "$stack" ] 2>/dev/null; check "the stack stays inside its reservation ($used of $stack bytes)" $?
model=$(wc -c < "$B/q8/tiny_lm_q8.safetensors")   # the bytes mhe export puts in the image's array
echo "flash: $flash bytes (.text+.rodata with the $model-byte q8 model, .data image $data)"
echo "RAM:   $((data + bss + stack)) bytes (.data $data + .bss $bss, of which the arena $arena, + stack $stack reserved; $used used; newlib's stdio took $heap bytes of its 2 KB heap pool)"
if [ -n "$ticks" ] && [ "$tokens" -gt 0 ] 2>/dev/null; then
    # SysTick runs at the 25 MHz core clock; -icount shift=0 makes a virtual ns one instruction
    echo "qemu -icount: $((ticks * 40 / tokens)) instructions per token (mean of $tokens decode steps; an instruction count, not cycles)"
fi
m4t=$(run_m4 | grep '^decode:'); ticks_rt=$(echo "$m4t" | sed 's/.* in \([0-9]*\) SysTick.*/\1/')
if [ -n "$ticks_rt" ] && [ "$ticks_rt" -gt 0 ] 2>/dev/null; then
    cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
    echo "qemu, no -icount: $((tokens * 25000000 / ticks_rt)) tokens/s emulated on ${cpu:-this host}; one qemu run $(( (t1 - t0) / 1000000 )) ms"
fi
echo "RESULT: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
