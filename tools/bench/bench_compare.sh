#!/bin/sh
# bench_compare.sh - mhe compare on the bundled corpus, the runs two at a time
# (--jobs 2, one thread each) against one at a time on two threads (--jobs 1
# --threads 2): wall seconds of each and their ratio. The numbers of both are
# the same (the kernels sum in a fixed order whatever the threads); only the
# time differs. Quote a figure with its machine, and measure on idle cores.
#   sh tools/bench/bench_compare.sh [MHE] [STEPS] [KINDS] [SEEDS]
set -e
MHE=${1:-build/mhe}
STEPS=${2:-100}
KINDS=${3:-mha,sha,mhe-add,mhe-mul}
SEEDS=${4:-2}
[ -x "$MHE" ] || { echo "bench_compare: no $MHE (make)"; exit 2; }
DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench_compare.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
# the model of make reproduce, STEPS steps a run
study() {
    "$MHE" compare --data examples/data/train.txt --valid examples/data/valid.txt --kinds "$KINDS" --seeds "$SEEDS" \
        --seed 5 --init-seed 42 --d_model 128 --n_heads 8 --n_layers 4 --kv_groups 2 --max_seq_len 128 --seq_len 128 \
        --batch 16 --steps "$STEPS" --lr 2e-3 --min_lr 2e-4 --warmup 5 --eval_every 0 --batches 8 --quiet "$@"
}
now() { date +%s.%N; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
echo "mhe compare, $KINDS x $SEEDS seeds, $STEPS steps a run of d_model 128 / 4 layers / 16 x 128 bytes"
echo "cpu: ${cpu:-unknown}, $(nproc 2>/dev/null || echo '?') logical cores; load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
t0=$(now); study --jobs 1 --threads 2 --out "$DIR/one"; t1=$(now)
study --jobs 2 --threads 2 --out "$DIR/two"; t2=$(now)
cmp -s "$DIR/one/report.json" "$DIR/two/report.json" 2>/dev/null || \
    python3 -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); k=lambda r:[{x:y for x,y in d.items() if x!='seconds'} for d in r['kinds']]; sys.exit(k(a)!=k(b))" \
        "$DIR/one/report.json" "$DIR/two/report.json" || { echo "bench_compare: the two reports differ"; exit 1; }
awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
    one = b - a; two = c - b
    printf "--jobs 1 --threads 2: %.1f s\n--jobs 2 (1 thread each): %.1f s\nratio (jobs 1 / jobs 2): %.2f (above 1: --jobs 2 is faster)\n", one, two, one / two }'
