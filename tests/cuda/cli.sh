#!/bin/sh
# tests/cuda/cli.sh MHE - `mhe eval` and `mhe generate --device cuda` of
# tools/cli/mhe.c built against the emulation (tests/cuda/run.sh builds MHE),
# each compared with the CPU path of the same binary: the same loss within
# float32 rounding, the same text greedy and sampled (models with dropout,
# off when evaluating, and Admin's residual scales too); `mhe train --device
# cuda` of S+R word models, classifiers (over every padding-reading kind) and
# an encoder-decoder with dropout and Admin against the CPU's run; a model the
# device cannot run (collab_dim past 256) is refused with mhe_cuda_supports's
# message and nothing runs on the CPU; `mhe compare --device cuda` against the
# CPU study and against mhe train --device cuda, and its refusals. Ends with
# "RESULT: N passed, M failed".
set -u
MHE=$1
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
passed=0
failed=0
# check WHAT RC OK: passes when the command's exit status RC is 0 and the test's status OK is 0
check() {
    if [ "$2" -eq 0 ] && [ "$3" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok: $1"
    else
        failed=$((failed + 1))
        echo "FAILED: $1 (exit $2)"
    fi
}
# loss FILE: the number after "loss" on eval's result line
loss() { sed -n 's/^loss \([0-9.]*\) .*/\1/p' "$1"; }
# close A B: equal within the 4 printed decimals (one unit of the last for rounding)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= 1.5e-4 && d >= -1.5e-4) }'; }

TINY=examples/data/tiny_lm.safetensors # a trained 2-layer mhe-mul byte LM, max_seq_len 64
head -c 900 examples/data/valid.txt > "$D/valid.txt"
"$MHE" init --out "$D/gqa.st" --attn gqa --kv_groups 2 --d_model 32 --n_heads 4 --n_layers 2 --max_seq_len 40 \
    --norm rmsnorm --activation silu > /dev/null
"$MHE" init --out "$D/taylor.st" --attn taylor --d_model 32 --n_heads 4 --n_layers 1 --max_seq_len 40 > /dev/null
# dropout (off in eval and generate) and Admin (post-norm, residual scales omega)
"$MHE" init --out "$D/dropout.st" --dropout 0.1 --attn_dropout 0.1 --d_model 32 --n_heads 4 --n_layers 1 \
    --max_seq_len 40 > /dev/null
"$MHE" init --out "$D/admin.st" --admin 1 --norm_position post --attn sha --d_model 32 --n_heads 4 --n_layers 3 \
    --max_seq_len 40 > /dev/null
# a config the device does not run: collab's shared query/key width past the device's attention limit (256)
"$MHE" init --out "$D/collab_wide.st" --attn collab --collab_dim 260 --d_model 32 --n_heads 4 --n_layers 1 \
    --max_seq_len 40 > /dev/null
# an encoder-decoder: a taylor encoder, causal mha, cross-attention mhe-add
"$MHE" init --out "$D/encdec.st" --arch encdec --enc_layers 1 --enc_attn taylor --n_layers 1 --attn mha \
    --cross_attn mhe-add --d_model 32 --n_heads 4 --max_seq_len 40 > /dev/null
# dropout in an encoder-decoder (off in eval and generate)
"$MHE" init --out "$D/encdec_drop.st" --arch encdec --enc_layers 1 --n_layers 1 --dropout 0.1 --d_model 32 --n_heads 4 \
    --max_seq_len 40 > /dev/null

# eval: consecutive windows (a partial last batch), then strided
for m in "$TINY 64" "$D/gqa.st 40" "$D/taylor.st 40" "$D/dropout.st 40" "$D/admin.st 40"; do
    set -- $m
    for how in "--batches 0 --batch 4" "--batch 3 --stride 30"; do
        # shellcheck disable=SC2086
        "$MHE" eval --model "$1" --data "$D/valid.txt" --seq_len "$2" $how > "$D/cpu.txt" 2>&1
        # shellcheck disable=SC2086
        "$MHE" eval --model "$1" --data "$D/valid.txt" --seq_len "$2" $how --device cuda > "$D/dev.txt" 2>&1
        rc=$?
        a=$(loss "$D/cpu.txt")
        b=$(loss "$D/dev.txt")
        close "$a" "$b"
        ok=$?
        check "eval ${1##*/} $how: device loss $b, CPU $a" $rc $ok
    done
done
grep -q "^device: " "$D/dev.txt"
check "eval --device cuda names the device" 0 $?
# --tf32 1 and --precision bf16: the tensor cores' rounding (10- and 7-bit mantissas), looser bounds
"$MHE" eval --model "$TINY" --data "$D/valid.txt" --seq_len 64 --batch 4 > "$D/cpu.txt" 2>&1
for how in "--tf32 1:5e-3:TF32" "--precision bf16:4e-2:bf16"; do
    flags=${how%%:*} bound=${how#*:} says=${bound#*:} bound=${bound%%:*}
    # shellcheck disable=SC2086
    "$MHE" eval --model "$TINY" --data "$D/valid.txt" --seq_len 64 --batch 4 --device cuda $flags > "$D/dev.txt" 2>&1
    rc=$?
    a=$(loss "$D/cpu.txt")
    b=$(loss "$D/dev.txt")
    awk -v a="$a" -v b="$b" -v e="$bound" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d <= e && d >= -e) }' &&
        grep -q "$says GEMMs" "$D/dev.txt"
    check "eval $flags: device loss $b, CPU $a (within $bound)" $rc $?
done

# generate: a 40-byte prompt (prefill over two 32-key tiles), then decode steps; greedy and sampled
P="And God said, Let there be light: and th"
for how in "--temperature 0" "--temperature 0.8 --top-k 20 --seed 3" "--temperature 1.5 --top-k 0 --seed 11"; do
    # shellcheck disable=SC2086
    "$MHE" generate --model "$TINY" --prompt "$P" --n 24 $how > "$D/cpu.txt" 2> /dev/null
    # shellcheck disable=SC2086
    "$MHE" generate --model "$TINY" --prompt "$P" --n 24 $how --device cuda > "$D/dev.txt" 2> "$D/err.txt"
    rc=$?
    cmp -s "$D/cpu.txt" "$D/dev.txt"
    ok=$?
    check "generate $how: device '$(tail -c 25 "$D/dev.txt" | tr '\n' ' ')', the CPU's the same" $rc $ok
done
grep -q "^device KV cache: 63 tokens" "$D/err.txt"
check "generate --device cuda sizes the device KV cache (prompt + n - 1)" 0 $?
"$MHE" generate --model "$TINY" --prompt "x" --n 64 --temperature 0 --device cuda > "$D/dev.txt" 2> /dev/null
rc=$?
"$MHE" generate --model "$TINY" --prompt "x" --n 64 --temperature 0 > "$D/cpu.txt" 2> /dev/null
cmp -s "$D/cpu.txt" "$D/dev.txt"
check "generate: a 1-byte prompt, then steps to max_seq_len, as the CPU" $rc $?

# a taylor model: its recurrent state steps through the prompt inside the one prefill; dropout
# (off) and Admin models decode as on the CPU
for m in taylor dropout admin; do
    "$MHE" generate --model "$D/$m.st" --prompt "${P%%:*}" --n 8 --temperature 0 > "$D/cpu.txt" 2> /dev/null
    "$MHE" generate --model "$D/$m.st" --prompt "${P%%:*}" --n 8 --temperature 0 --device cuda > "$D/dev.txt" 2> /dev/null
    rc=$?
    cmp -s "$D/cpu.txt" "$D/dev.txt"
    check "generate a $m model greedy: the CPU's text" $rc $?
done

# the encoder-decoder: eval windows of a 24-byte source and 16 bytes of continuation; generate
# encodes --source once (the cross-attention K|V in the device cache), then prefill and steps
"$MHE" eval --model "$D/encdec.st" --data "$D/valid.txt" --src_len 24 --seq_len 16 --batch 4 > "$D/cpu.txt" 2>&1
"$MHE" eval --model "$D/encdec.st" --data "$D/valid.txt" --src_len 24 --seq_len 16 --batch 4 --device cuda > "$D/dev.txt" 2>&1
rc=$?
a=$(loss "$D/cpu.txt")
b=$(loss "$D/dev.txt")
close "$a" "$b"
check "eval encdec --src_len 24: device loss $b, CPU $a" $rc $?
for how in "--temperature 0" "--temperature 0.9 --top-k 10 --seed 5"; do
    # shellcheck disable=SC2086
    "$MHE" generate --model "$D/encdec.st" --source "In the beginning God created" --prompt " the" --n 10 $how > "$D/cpu.txt" 2> /dev/null
    # shellcheck disable=SC2086
    "$MHE" generate --model "$D/encdec.st" --source "In the beginning God created" --prompt " the" --n 10 $how --device cuda \
        > "$D/dev.txt" 2> "$D/err.txt"
    rc=$?
    cmp -s "$D/cpu.txt" "$D/dev.txt" && grep -q "^device cross-attention cache: 28 source tokens" "$D/err.txt"
    check "generate encdec $how: device '$(tr '\n' ' ' < "$D/dev.txt")', the CPU's the same" $rc $?
done
"$MHE" eval --model "$D/encdec_drop.st" --data "$D/valid.txt" --src_len 24 --seq_len 16 --batch 4 > "$D/cpu.txt" 2>&1
"$MHE" eval --model "$D/encdec_drop.st" --data "$D/valid.txt" --src_len 24 --seq_len 16 --batch 4 --device cuda > "$D/dev.txt" 2>&1
rc=$?
a=$(loss "$D/cpu.txt")
b=$(loss "$D/dev.txt")
close "$a" "$b"
check "eval an encdec model with dropout (off): device loss $b, CPU $a" $rc $?
"$MHE" generate --model "$D/encdec_drop.st" --source "Let there be" --prompt " l" --n 8 --temperature 0 > "$D/cpu.txt" 2> /dev/null
"$MHE" generate --model "$D/encdec_drop.st" --source "Let there be" --prompt " l" --n 8 --temperature 0 --device cuda \
    > "$D/dev.txt" 2> /dev/null
rc=$?
cmp -s "$D/cpu.txt" "$D/dev.txt"
check "generate an encdec model with dropout (off) greedy: the CPU's text" $rc $?

# an encoder-decoder trained with dropout, attention dropout (the source's embedding and the
# cross-attention's sites) and Admin (post-norm; the first step profiles omega on the device):
# the same batches, masks and losses as the CPU's
head -c 6000 examples/data/train.txt > "$D/train.txt"
for dev in cpu cuda; do
    "$MHE" train --arch encdec --enc_layers 1 --n_layers 2 --cross_attn mhe-add --norm_position post --admin 1 \
        --dropout 0.1 --attn_dropout 0.1 --d_model 32 --n_heads 4 --max_seq_len 40 --data "$D/train.txt" \
        --out "$D/s2s_$dev.st" --steps 6 --batch 2 --src_len 16 --seq_len 12 --warmup 1 --lr 3e-3 --eval_every 0 \
        --log_every 3 --device $dev > "$D/s2s_$dev.txt" 2>&1
done
rc=$?
a=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/s2s_cpu.txt")
b=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/s2s_cuda.txt")
close "$a" "$b" && grep -q "^device memory" "$D/s2s_cuda.txt"
check "train encdec --admin 1 --dropout 0.1 --attn_dropout 0.1 --device cuda: step 6 loss $b, CPU $a" $rc $?

# S+R pre-training of a hash-emb word model (64 buckets): the same batches and losses on the device
head -c 4000 examples/data/train.txt > "$D/words.txt"
for dev in cpu cuda; do
    "$MHE" train --task sr --embedding hash-emb --hash_buckets 64 --d_model 32 --n_heads 4 --n_layers 1 --max_seq_len 40 \
        --data "$D/words.txt" --out "$D/sr_$dev.st" --steps 6 --batch 2 --seq_len 16 --warmup 1 --lr 3e-3 --eval_every 0 \
        --log_every 3 --device $dev > "$D/sr_$dev.txt" 2>&1
done
rc=$?
a=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/sr_cpu.txt")
b=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/sr_cuda.txt")
close "$a" "$b" && grep -q "^device memory" "$D/sr_cuda.txt"
check "train --task sr hash-emb --device cuda: step 6 loss $b, CPU $a" $rc $?
"$MHE" eval --task sr --model "$D/sr_cpu.st" --data "$D/words.txt" --seq_len 16 --batch 3 > "$D/cpu.txt" 2>&1
"$MHE" eval --task sr --model "$D/sr_cpu.st" --data "$D/words.txt" --seq_len 16 --batch 3 --device cuda > "$D/dev.txt" 2>&1
rc=$?
grep "S+R loss" "$D/cpu.txt" > "$D/cpu_sr.txt" && grep "S+R loss" "$D/dev.txt" | cmp -s - "$D/cpu_sr.txt"
check "eval --task sr --device cuda: $(grep "S+R loss" "$D/dev.txt"), the CPU's the same" $rc $?

# the same with hash-pool (eq. 2.1: 24 MD5 bits, chunks of 5) and hash-proj (eq. 2.3), then the evaluation
for emb in hash-pool hash-proj; do
    for dev in cpu cuda; do
        "$MHE" train --task sr --embedding $emb --hash_bits 24 --hash_chunk 5 --d_model 32 --n_heads 4 --n_layers 1 \
            --max_seq_len 40 --data "$D/words.txt" --out "$D/sr_$dev.st" --steps 6 --batch 2 --seq_len 16 --warmup 1 \
            --lr 3e-3 --eval_every 0 --log_every 3 --device $dev > "$D/sr_$dev.txt" 2>&1
    done
    rc=$?
    a=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/sr_cpu.txt")
    b=$(sed -n 's/^step *6\/6  loss \([0-9.]*\) .*/\1/p' "$D/sr_cuda.txt")
    close "$a" "$b" && grep -q "^device memory" "$D/sr_cuda.txt"
    check "train --task sr $emb --device cuda: step 6 loss $b, CPU $a" $rc $?
    "$MHE" eval --task sr --model "$D/sr_cpu.st" --data "$D/words.txt" --seq_len 16 --batch 3 > "$D/cpu.txt" 2>&1
    "$MHE" eval --task sr --model "$D/sr_cpu.st" --data "$D/words.txt" --seq_len 16 --batch 3 --device cuda > "$D/dev.txt" 2>&1
    rc=$?
    grep "S+R loss" "$D/cpu.txt" > "$D/cpu_sr.txt" && grep "S+R loss" "$D/dev.txt" | cmp -s - "$D/cpu_sr.txt"
    check "eval --task sr $emb --device cuda: $(grep "S+R loss" "$D/dev.txt"), the CPU's the same" $rc $?
done

# a classifier trained 6 steps (dropout on) on the device and on the CPU: the same model within
# rounding; each evaluated on both (--task cls: loss and accuracy). Over mhe-add, then over the
# kinds whose cores read the padding themselves (nonapprox's scan, fnet's DFT, linear's W_seq)
printf '0\tthe cat sat on the mat\n1\tdogs run\n0\ta cat\n1\tthe dog ran far away\n0\tcats nap\n1\tdog\n' > "$D/cls.tsv"
metrics() { sed -n 's/^ *loss \([0-9.]*\)  accuracy \([0-9.]*\).*/\1 \2/p' "$1"; }
for stack in "mhe-add 2" "nonapprox,fnet,linear 3"; do
    set -- $stack
    attn=$1 layers=$2
    for dev in cpu cuda; do
        flag=
        [ $dev = cuda ] && flag="--device cuda"
        # shellcheck disable=SC2086
        "$MHE" train --task cls --data "$D/cls.tsv" --out "$D/cls_$dev.st" --arch encoder --attn $attn --n_classes 2 \
            --d_model 32 --n_heads 4 --n_layers $layers --max_seq_len 24 --seq_len 24 --dropout 0.1 --attn_dropout 0.1 \
            --steps 6 --batch 4 --seed 3 --lr 0.01 --warmup 1 --quiet $flag > "$D/out.txt" 2>&1
        check "train --task cls --attn $attn $flag, 6 steps $(cat "$D/out.txt")" $? 0
        "$MHE" eval --task cls --model "$D/cls_$dev.st" --data "$D/cls.tsv" --seq_len 24 > "$D/cpu_$dev.txt" 2>&1
        "$MHE" eval --task cls --model "$D/cls_$dev.st" --data "$D/cls.tsv" --seq_len 24 --device cuda > "$D/dev.txt" 2>&1
        rc=$?
        set -- $(metrics "$D/cpu_$dev.txt") x x
        a=$1 acc=$2
        set -- $(metrics "$D/dev.txt") y y
        close "$a" "$1" && [ "$acc" = "$2" ]
        check "eval --task cls --device cuda of the $dev-trained $attn classifier: loss $1 accuracy $2, CPU $a $acc" $rc $?
    done
    a=$(metrics "$D/cpu_cpu.txt" | cut -d' ' -f1)
    b=$(metrics "$D/cpu_cuda.txt" | cut -d' ' -f1)
    close "$a" "$b"
    check "train --task cls --attn $attn --device cuda: the CPU-trained classifier's loss ($b vs $a)" 0 $?
done

# refusals: a status, the reason, and no result computed elsewhere
"$MHE" eval --data "$D/valid.txt" --model "$D/collab_wide.st" --device cuda > "$D/out.txt" 2> "$D/err.txt"
rc=$?
grep -q "collab_dim 260 exceeds the device attention limit 256" "$D/err.txt" && ! grep -q "loss" "$D/out.txt"
check "eval --device cuda of collab with collab_dim 260: refused: $(cat "$D/err.txt")" $((rc == 0)) $?
"$MHE" eval --model "$TINY" --data "$D/valid.txt" --indicators "$D/ind" --device cuda > /dev/null 2> "$D/err.txt"
rc=$?
grep -q "without --device cuda" "$D/err.txt" && [ ! -e "$D/ind.csv" ]
check "eval --indicators --device cuda: refused" $((rc == 0)) $?
"$MHE" generate --model "$TINY" --prompt "$P" --n 30 --device cuda > /dev/null 2> "$D/err.txt"
rc=$?
grep -q "room for 25 new tokens" "$D/err.txt"
check "generate --device cuda past max_seq_len: refused as on the CPU" $((rc == 0)) $?

# mhe compare --device cuda: a study of 2 kinds x 1 seed, each run on the device with mhe train's
# trainer: every run's final loss and validation curve within rounding of the CPU study's; the
# mhe-mul run's weights and moments byte for byte those of mhe init + mhe train --device cuda
# (the emulation is deterministic); then what the device path refuses
STUDY="compare --data $D/train.txt --valid $D/valid.txt --seeds 1 --seed 9 --init-seed 4 --d_model 32
    --n_heads 4 --n_layers 1 --max_seq_len 40 --steps 6 --batch 2 --seq_len 16 --warmup 1 --lr 3e-3 --eval_every 3
    --batches 4 --quiet"
for dev in cpu cuda; do
    # shellcheck disable=SC2086
    "$MHE" $STUDY --kinds mha,mhe-mul --out "$D/study_$dev" --device $dev > "$D/study_$dev.txt" 2>&1
done
rc=$?
for k in mha mhe-mul; do
    a=$(sed -n 's/^loss //p' "$D/study_cpu/runs/$k-s0/result.txt")
    b=$(sed -n 's/^loss //p' "$D/study_cuda/runs/$k-s0/result.txt")
    close "$a" "$b"
    check "compare --device cuda: $k's final validation loss $b, the CPU study's $a" $rc $?
done
# the curves: kind,seed,step,val_loss rows in the same order
paste -d, "$D/study_cpu/curves.csv" "$D/study_cuda/curves.csv" | awk -F, 'NR > 1 { n++; d = $4 - $8; if ($1 != $5 || $3 != $7 || d > 1.5e-4 || d < -1.5e-4) bad = 1 }
    END { exit !(n == 4 && !bad) }'
check "compare --device cuda: the validation curves within rounding of the CPU study's ($(tr '\n' ' ' < "$D/study_cuda/curves.csv"))" $rc $?
"$MHE" init --out "$D/sep_init.st" --attn mhe-mul --seed 4 --d_model 32 --n_heads 4 --n_layers 1 --max_seq_len 40 > /dev/null
"$MHE" train --model "$D/sep_init.st" --data "$D/train.txt" --valid "$D/valid.txt" --seed 9 --out "$D/sep.st" --steps 6 --batch 2 \
    --seq_len 16 --warmup 1 --lr 3e-3 --eval_every 3 --device cuda --quiet > /dev/null 2>&1
rc=$?
# the tensors after the header (its metadata differs: mhe train records the task)
body() { n=$(od -An -t u8 -N8 "$1" | tr -d ' '); tail -c +$((n + 9)) "$1"; }
body "$D/sep.st" > "$D/sep.body"
body "$D/study_cuda/runs/mhe-mul-s0/checkpoint.safetensors" > "$D/study.body"
[ -s "$D/sep.body" ] && cmp -s "$D/sep.body" "$D/study.body"
check "compare --device cuda: mhe-mul seed 0 trains as mhe init --seed 4 + mhe train --seed 9 --device cuda (same bytes)" $rc $?
# shellcheck disable=SC2086
"$MHE" $STUDY --kinds mha,mhe-mul --out "$D/study_jobs" --device cuda --jobs 2 > /dev/null 2> "$D/err.txt"
rc=$?
grep -q "^mhe: compare: --jobs 2: runs on --device cuda go one at a time" "$D/err.txt" && [ ! -e "$D/study_jobs" ]
check "compare --device cuda --jobs 2: refused: $(cat "$D/err.txt")" $((rc != 2)) $?
# shellcheck disable=SC2086
"$MHE" $STUDY --kinds mha,collab --collab_dim 260 --out "$D/study_collab" --device cuda > /dev/null 2> "$D/err.txt"
rc=$?
grep -q "^mhe: compare: --kinds collab: --device cuda: collab_dim 260 exceeds the device attention limit 256" "$D/err.txt" &&
    [ ! -e "$D/study_collab" ]
check "compare --device cuda of a kind the device cannot run: refused before anything trains: $(cat "$D/err.txt")" $((rc != 2)) $?
# shellcheck disable=SC2086
"$MHE" $STUDY --kinds mha,mhe-mul --out "$D/study_cpu" --device cuda > /dev/null 2> "$D/err.txt"
rc=$?
grep -q "device was 'cpu', now 'cuda'" "$D/err.txt"
check "compare --device cuda over a CPU study's folder: refused naming --device" $((rc == 0)) $?

echo "RESULT: $passed passed, $failed failed"
[ $failed -eq 0 ]
