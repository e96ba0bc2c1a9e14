#!/bin/sh
# tests/fuzz/run.sh TARGET [SECONDS] - runs build/fuzz/fuzz_TARGET for SECONDS
# (default 60) from the committed seeds plus the working corpus it grows in
# build/fuzz/corpus/TARGET; prints the executions; on a crash or a violated
# invariant it fails and leaves the input in build/fuzz/crashes/ (commit it
# under tests/fuzz/regress/TARGET/ so that make test replays it).
t=$1; secs=${2:-60}
cd "$(dirname "$0")/../.." || exit 2
case $t in
  safetensors) seeds="safetensors checkpoint trainer"; dict=safetensors.dict ;;
  checkpoint)  seeds="checkpoint trainer"; dict=safetensors.dict ;;
  trainer)     seeds="trainer"; dict=safetensors.dict ;;
  config)      seeds="config"; dict=config.dict ;;
  corpus)      seeds="corpus"; dict= ;;
  *) echo "unknown fuzz target '$t'"; exit 2 ;;
esac
dirs=""
for s in $seeds; do dirs="$dirs tests/fuzz/seeds/$s"; done
mkdir -p "build/fuzz/corpus/$t" build/fuzz/crashes
log="build/fuzz/$t.log"
# shellcheck disable=SC2086
"build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    ${dict:+-dict=tests/fuzz/$dict} -artifact_prefix="build/fuzz/crashes/$t-" "build/fuzz/corpus/$t" $dirs >"$log" 2>&1
rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
echo "fuzz $t: ${execs:-?} executions in $secs s (${rate:-?}/s), $cov, corpus $(ls "build/fuzz/corpus/$t" | wc -l) inputs"
if [ "$rc" -ne 0 ]; then
    grep -v '^#' "$log" | tail -n 40
    echo "fuzz $t: FAILED (exit $rc); the input is in build/fuzz/crashes/, commit it under tests/fuzz/regress/$t/"
    exit 1
fi
