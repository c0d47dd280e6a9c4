#!/usr/bin/env bash
# One device-machine session's worth of work: GPU tests, then the GLM benchmark with --check.
# Run from the repository root with a build carried in ./build (built on the dev machine).
# Logs go to $OUT (the device tool brings them back); a short table is printed last.
# Usage: tools/device_run.sh [test|bench|all|sanitize] [extra dsa-bench args...]
set -uo pipefail
OUT=${OUT:-/tmp/dsa-out}
mkdir -p "$OUT"
what=${1:-all}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
if [ "$what" = test ] || [ "$what" = all ]; then
  ./build/test_gpu >"$OUT/test_gpu.log" 2>&1; rc=$?
  grep -E "FAIL|passed" "$OUT/test_gpu.log" | tail -n 40
fi
if [ "$what" = sanitize ]; then
  compute-sanitizer --tool memcheck ./build/test_gpu >"$OUT/sanitize.log" 2>&1; rc=$?
  tail -n 30 "$OUT/sanitize.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  ./build/dsa-bench glm --check --json "$OUT/bench.json" "$@" >"$OUT/bench.log" 2>&1 || rc=$?
  tail -n 45 "$OUT/bench.log"
fi
exit $rc
