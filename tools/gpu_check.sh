#!/usr/bin/env bash
# tools/gpu_check.sh — check dsa on your H100 / H200: build, the GPU tests, the Python package,
# compute-sanitizer, the benchmark. Run from the repository root on a machine with an sm_90 GPU and
# the CUDA 13.0 toolkit. Logs go to $OUT (default ./gpu-check); one summary table is printed last;
# the exit status is 0 only if every step that ran passed.
#
# Usage: tools/gpu_check.sh [STEP...]
#   tests     every GPU test program (test_gpu_indexer, _topk, _attention, _cache, _api, _garbage,
#             _cp) with the library's kernel choice, then the indexer, top-k and attention programs
#             once with each other kernel forced (DSA_KERNEL, README "Choosing kernels")
#   python    the Python package's tests (pytest), examples/decode_layer.py and dev/python_overhead.py
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck and initcheck over the GPU test
#             programs (slow: tens of minutes; SANITIZE_TOOLS="memcheck racecheck" picks some)
#   bench     dsa-bench glm, serve, attn (FP8 and bf16 KV) and merge with --check, JSON records in $OUT
#   all       tests, python, bench (the default)
# Environment: DSA_BUILD_DIR (default ./build; built here with CMake if it has no test programs),
#   OUT, SANITIZE_TOOLS, SAN_TIMEOUT (seconds a sanitizer run, default 1800).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-check}
B=${DSA_BUILD_DIR:-build}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(all)
[ "${steps[*]}" = all ] && steps=(tests python bench)

summary=()
rc=0
note() { # note NAME STATUS DETAIL
  summary+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || [ "$2" = skip ] || rc=1
}
passed_line() { grep -E "passed, [0-9]+ failed|passed" "$1" 2>/dev/null | tail -n 1; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 || {
  echo "gpu_check: nvidia-smi found no GPU" >&2
  exit 2
}
echo "GPU: $(head -n 1 "$OUT/gpu.txt")"

if [ ! -x "$B/test_gpu_indexer" ] || ! "$B/dsa-bench" --help >/dev/null 2>&1; then
  echo "building in $B (log: $OUT/build.log)"
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  { cmake -S . -B "$B" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release && cmake --build "$B" -j; } >"$OUT/build.log" 2>&1 || {
    tail -n 30 "$OUT/build.log"
    echo "gpu_check: build failed" >&2
    exit 1
  }
fi

GPU_TESTS=(test_gpu_indexer test_gpu_topk test_gpu_attention test_gpu_cache test_gpu_api test_gpu_garbage test_gpu_cp)
# program | DSA_KERNEL values other than the library's choice that the program's cases run on
FORCED=(
  "test_gpu_indexer|scores:mma scores:wgmma scores:wgmma_tma indexer:separate indexer:fused indexer:fused,scores:wgmma"
  "test_gpu_api|indexer:separate indexer:fused"
  "test_gpu_topk|topk:registers topk:slices topk:chain"
  "test_gpu_attention|attention:mma_split attention:rows_as_m attention:heads_as_m attention:seesaw"
  "test_gpu_cp|merge:runs merge:select merge:tree"
)

run_test() { # run_test PROGRAM LABEL [ENV...]
  local prog=$1 label=$2
  shift 2
  local log="$OUT/$label.log"
  env "$@" "$B/$prog" >"$log" 2>&1
  local r=$? res
  res=$(passed_line "$log")
  if [ $r -eq 0 ]; then note "$label" ok "${res:-exit 0}"
  elif [ $r -eq 77 ]; then note "$label" skip "$(tail -n 1 "$log")"
  else note "$label" FAIL "${res:-exit $r} ($log)"; fi
}

for step in "${steps[@]}"; do
  case $step in
  tests)
    for prog in "${GPU_TESTS[@]}"; do run_test "$prog" "$prog"; done
    for entry in "${FORCED[@]}"; do
      prog=${entry%%|*}
      for k in ${entry#*|}; do run_test "$prog" "$prog-${k//[:,]/-}" DSA_KERNEL="$k"; done
    done
    ;;
  python)
    export PYTHONPATH="$PWD/python" DSA_LIBRARY="$PWD/$B/libdsa.so" DSA_ABI_DUMP="$PWD/$B/dsa_abi_dump" PYTHONDONTWRITEBYTECODE=1
    [ -f "$B/_fastcall.abi3.so" ] && export DSA_FASTCALL="$PWD/$B/_fastcall.abi3.so" # the extension, as the wheel has it
    if python3 -m pytest -q -p no:cacheprovider python/tests >"$OUT/pytest.log" 2>&1; then
      note pytest ok "$(tail -n 1 "$OUT/pytest.log")"
    else
      note pytest FAIL "$(tail -n 1 "$OUT/pytest.log") ($OUT/pytest.log)"
    fi
    if python3 examples/decode_layer.py --batch 1 --context 131072 >"$OUT/decode_layer.log" 2>&1; then
      note decode_layer.py ok "$(grep -i graph "$OUT/decode_layer.log" | tail -n 1)"
    else
      note decode_layer.py FAIL "$OUT/decode_layer.log"
    fi
    # the host cost a call against torch.add's (issue 23; README and docs/PERF.md quote this log)
    if python3 dev/python_overhead.py >"$OUT/python-overhead.log" 2>&1; then
      note python_overhead.py ok "$OUT/python-overhead.log"
    else
      note python_overhead.py FAIL "$OUT/python-overhead.log"
    fi
    ;;
  sanitize)
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
      for prog in "${GPU_TESTS[@]}"; do
        log="$OUT/san-$tool-$prog.log"
        # test_gpu_garbage leaves out its 16 GiB store and its planted API error under a sanitizer
        DSA_TEST_UNDER_SANITIZER=1 timeout "${SAN_TIMEOUT:-1800}" compute-sanitizer --tool "$tool" --print-limit 20 \
          "$B/$prog" >"$log" 2>&1
        r=$?
        # "ERROR SUMMARY: N errors" (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ... (N errors"
        errs=$(grep -Eo "ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\([0-9]+ errors" "$log" | tail -n 1 |
          grep -Eo "[0-9]+( errors)?$" | grep -Eo "^[0-9]+")
        if [ "${errs:-x}" = 0 ] && [ $r -eq 0 ]; then note "$tool $prog" ok "0 errors, $(passed_line "$log")"
        elif [ $r -eq 77 ]; then note "$tool $prog" skip "no GPU"
        else note "$tool $prog" FAIL "${errs:-?} errors, exit $r ($log)"; fi
      done
    done
    ;;
  bench)
    for mode in "glm" "serve" "attn --kv fp8" "attn --kv bf16" "merge"; do
      name=${mode// /}; name=${name//--kv/-}
      "$B/dsa-bench" $mode --check --json "$OUT/bench-$name.json" >"$OUT/bench-$name.log" 2>&1
      r=$?
      if [ $r -eq 0 ]; then note "dsa-bench $mode" ok "$OUT/bench-$name.json"
      else note "dsa-bench $mode" FAIL "exit $r ($OUT/bench-$name.log)"; fi
    done
    ;;
  *)
    echo "gpu_check: unknown step '$step' (tests, python, sanitize, bench, all)" >&2
    exit 2
    ;;
  esac
done

echo
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
[ $rc -eq 0 ] && echo "gpu_check: all passed" || echo "gpu_check: FAILURES above (logs in $OUT)"
exit $rc
