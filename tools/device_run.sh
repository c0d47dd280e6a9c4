#!/usr/bin/env bash
# One device-machine session's worth of work, logs to $OUT (the device tool brings them back), a
# short table printed last. Run from the repository root. Uses the build in $DSA_BUILD_DIR (default
# ./build) when its binaries run on this machine (built on the dev machine and carried), else
# builds ./build-dev here with ninja.
# Usage: tools/device_run.sh [test|python|bench|attn|scores|compare|v3|dev|all|sanitize [tool...]] [extra dsa-bench args...]
#   test      both GPU test programs (test_gpu, test_gpu_garbage)
#   python    the Python package's tests (pytest, GPU part included) and examples/decode_layer.py
#   bench     dsa-bench glm --check --json
#   attn      dsa-bench attn (attention alone): FP8 and bf16 KV, hot with --check, then --cold
#   all       test, python, then bench
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck, initcheck (or the tools named) over
#             both GPU test programs; one summary line per tool
#   v3        the v3 attention checks: every MLA case with v3 forced and with the library's choice,
#             the garbage attention cases, racecheck on the 128-head cases, dsa-bench attn --check
#             (every attention row, both KV formats)
#   scores    the indexer scorers v1 (mma.sync) and v2 (FP8 wgmma) side by side: the indexer cases on
#             v2, QGMMA count, glm scores at 8k / 128k / 1M on each (SCORES_NCU=1: ncu stalls of v2)
#   compare   builds side by side (branches built here and carried): DSA_COMPARE="label=dir:kernel ..."
#             (kernel: a DSA_INDEXER_KERNEL value, or "-" for the library's choice); for each entry the
#             indexer cases with that kernel, its SASS counts (QGMMA, HGMMA, UTMALDG, UBLKCP), then
#             dsa-bench glm (extra args appended, default --sizes 8k,128k,1M) --check; one table of
#             scores / top-k ms per row and entry, logs and JSON in $OUT
#   dev       the development aids: dsa-sm90-microbench, dsa-trace-mla, dsa-mla-v3-modes, and the
#             attention crossover (dsa-bench attn --batches at 16 / 64 / 128 heads, each kernel forced)
set -uo pipefail
OUT=${OUT:-/tmp/dsa-out}
mkdir -p "$OUT"
what=${1:-all}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

B=${DSA_BUILD_DIR:-build}
# compare runs each entry's own carried binaries: nothing to build (a build here took 1-2 minutes of
# device time for nothing)
if [ "$what" != compare ] && { ! "$B/dsa-bench" --help >/dev/null 2>&1 || [ ! -x "$B/test_gpu_garbage" ]; }; then
  B=build-dev
  echo "building in $B"
  (cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$OUT/cmake.log" 2>&1 &&
    cmake --build "$B" -j >>"$OUT/cmake.log" 2>&1) || { tail -n 30 "$OUT/cmake.log"; exit 1; }
fi

rc=0
run_tests() {
  local r=0
  "$B/test_gpu" >"$OUT/test_gpu.log" 2>&1 || r=$?
  grep -E "^FAIL|passed" "$OUT/test_gpu.log" | tail -n 30
  "$B/test_gpu_garbage" >"$OUT/test_gpu_garbage.log" 2>&1 || r=$?
  grep -E "^FAIL|passed" "$OUT/test_gpu_garbage.log" | tail -n 30
  return $r
}

if [ "$what" = test ] || [ "$what" = all ]; then
  run_tests || rc=$?
fi

if [ "$what" = python ] || [ "$what" = all ]; then
  export PYTHONPATH="$PWD/python" DSA_LIBRARY="$PWD/$B/libdsa.so" DSA_ABI_DUMP="$PWD/$B/dsa_abi_dump" PYTHONDONTWRITEBYTECODE=1
  python3 -m pytest -q -p no:cacheprovider python/tests >"$OUT/pytest.log" 2>&1 || rc=1
  tail -n 15 "$OUT/pytest.log"
  for shape in "--batch 1 --context 131072" "--batch 64 --context 32768"; do
    python3 examples/decode_layer.py $shape >>"$OUT/decode_layer.log" 2>&1 || rc=1
  done
  tail -n 8 "$OUT/decode_layer.log"
fi

if [ "$what" = sanitize ]; then
  tools=("$@")
  [ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck initcheck)
  set --
  summary=()
  for tool in "${tools[@]}"; do
    line="$tool:"
    for prog in test_gpu test_gpu_garbage; do
      log="$OUT/san-$tool-$prog.log"
      start=$(date +%s)
      # test_gpu_garbage leaves out its 16 GiB store and its planted API error under a sanitizer.
      DSA_TEST_UNDER_SANITIZER=1 timeout "${SAN_TIMEOUT:-1200}" compute-sanitizer --tool "$tool" --print-limit 20 "$B/$prog" >"$log" 2>&1
      prc=$?
      # "ERROR SUMMARY: N errors" (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ... (N errors, ...)".
      errs=$(grep -Eo "ERROR SUMMARY: [0-9]+|RACECHECK SUMMARY: .*\([0-9]+ errors" "$log" | tail -n 1 | grep -Eo "[0-9]+( errors)?$" | grep -Eo "^[0-9]+")
      res=$(grep -E "passed, [0-9]+ failed" "$log" | tail -n 1)
      line="$line $prog ${errs:-?} errors (${res:-no result}, exit $prc, $(( $(date +%s) - start )) s);"
      { [ "${errs:-1}" = 0 ] && [ $prc = 0 ]; } || rc=1
    done
    summary+=("$line")
    echo "$line"
  done
  printf '%s\n' "${summary[@]}" >"$OUT/sanitize-summary.txt"
fi

if [ "$what" = dev ]; then
  "$B/dsa-sm90-microbench" >"$OUT/microbench.log" 2>&1 || rc=$?
  tail -n 4 "$OUT/microbench.log"
  "$B/dsa-trace-mla" >"$OUT/trace-mla.log" 2>&1 || rc=$?
  timeout 120 "$B/dsa-mla-v3-modes" >"$OUT/mla-v3-modes.log" 2>&1 || rc=$?
  cat "$OUT/mla-v3-modes.log"
  # attention crossover: decode batches, each kernel forced, FP8 KV, 16 / 64 / 128 heads
  for h in 16 64 128; do
    for k in v1 v2 v3; do
      DSA_MLA_KERNEL=$k timeout 120 "$B/dsa-bench" attn --kv fp8 --heads $h --batches 1,2,4,8,16,32,64,128,256 \
        --json "$OUT/attn-crossover-h$h-$k.json" >"$OUT/attn-crossover-h$h-$k.log" 2>&1 || rc=$?
      sed -n '/== sparse/,$p' "$OUT/attn-crossover-h$h-$k.log" | grep -v "^%" | grep "decode" | awk -v k=$k '{print k, $0}'
    done
  done
fi

if [ "$what" = v3 ]; then
  DSA_MLA_KERNEL=v3 DSA_TEST_ONLY=MLA timeout 60 "$B/test_gpu" >"$OUT/v3-forced.log" 2>&1 || rc=1
  echo "test_gpu MLA, v3 forced: $(grep passed "$OUT/v3-forced.log" | tail -1)"; grep "^FAIL" "$OUT/v3-forced.log" | head -5
  DSA_TEST_ONLY=MLA timeout 60 "$B/test_gpu" >"$OUT/v3-auto.log" 2>&1 || rc=1
  echo "test_gpu MLA, library choice: $(grep passed "$OUT/v3-auto.log" | tail -1)"; grep "^FAIL" "$OUT/v3-auto.log" | head -5
  DSA_MLA_KERNEL=v3 DSA_TEST_ONLY=attention timeout 60 "$B/test_gpu_garbage" >"$OUT/v3-garbage.log" 2>&1 || rc=1
  echo "test_gpu_garbage attention, v3: $(grep passed "$OUT/v3-garbage.log" | tail -1)"
  DSA_MLA_KERNEL=v3 DSA_TEST_ONLY="MLA H128" DSA_TEST_UNDER_SANITIZER=1 timeout 120 compute-sanitizer --tool racecheck \
    --print-limit 5 "$B/test_gpu" >"$OUT/v3-racecheck.log" 2>&1 || rc=1
  echo "racecheck, 128-head cases (v3 forced): $(grep -E 'RACECHECK SUMMARY' "$OUT/v3-racecheck.log" | tail -1)"
  for kv in fp8 bf16; do
    timeout 90 "$B/dsa-bench" attn --kv $kv --check --json "$OUT/v3-attn-$kv.json" >"$OUT/v3-attn-$kv.log" 2>&1 || rc=1
    sed -n '/== sparse/,$p' "$OUT/v3-attn-$kv.log" | grep -v "^%"
  done
fi

if [ "$what" = compare ]; then
  bench_args=("$@")
  [ ${#bench_args[@]} -eq 0 ] && bench_args=(--sizes 8k,128k,1M)
  labels=()
  for entry in ${DSA_COMPARE:-}; do
    label=${entry%%=*}; rest=${entry#*=}; dir=${rest%%:*}; kern=${rest#*:}
    labels+=("$label")
    envk=(); [ "$kern" != "-" ] && envk=(DSA_INDEXER_KERNEL="$kern")
    env "${envk[@]}" DSA_TEST_ONLY=indexer timeout 150 "$dir/test_gpu" >"$OUT/cmp-$label-tests.log" 2>&1 || rc=1
    sass=$(cuobjdump --dump-sass "$dir/test_gpu" 2>/dev/null)
    echo "$label ($dir, kernel $kern): indexer cases $(grep -E 'passed' "$OUT/cmp-$label-tests.log" | tail -1);" \
      "SASS QGMMA $(grep -c QGMMA <<<"$sass") HGMMA $(grep -c HGMMA <<<"$sass") UTMALDG $(grep -c UTMALDG <<<"$sass") UBLKCP $(grep -c UBLKCP <<<"$sass")"
    grep "^FAIL" "$OUT/cmp-$label-tests.log" | head -5
    env "${envk[@]}" timeout 200 "$dir/dsa-bench" glm "${bench_args[@]}" --check --json "$OUT/cmp-$label.json" \
      >"$OUT/cmp-$label.log" 2>&1 || rc=1
  done
  python3 - "$OUT" "${labels[@]}" <<'PY'
import json, os, sys
out, labels = sys.argv[1], sys.argv[2:]
runs = {}
for l in labels:
    try: runs[l] = {(r["table"], r["S"]): r for r in json.load(open(os.path.join(out, "cmp-%s.json" % l)))["rows"]}
    except Exception: runs[l] = {}
keys = sorted({k for r in runs.values() for k in r}, key=lambda k: (k[0], k[1]))
f = lambda v: "%.4f" % v if isinstance(v, (int, float)) else "  -   "
print("table      S        " + "  ".join("%-22s" % (l + " scores/top-k") for l in labels))
for k in keys:
    cells = []
    for l in labels:
        r = runs[l].get(k)
        cells.append("%-22s" % ((f(r["scores_ms"]) + "/" + f(r["topk_ms"]) + " " + r["check"]) if r else "-"))
    print("%-8s %8d  " % k + "  ".join(cells))
PY
fi

if [ "$what" = scores ]; then
  # the two indexer scorers side by side: the indexer cases on v2, QGMMA in the SASS, then glm
  # decode / prefill scores at 8k / 128k / 1M (--check) on each, one table; SCORES_NCU=1 adds an ncu
  # warp-state profile of v2 at prefill 1M (top stall lines to $OUT/scores-v2-ncu.txt)
  DSA_INDEXER_KERNEL=v2 DSA_TEST_ONLY=indexer timeout 90 "$B/test_gpu" >"$OUT/scores-v2-tests.log" 2>&1 || rc=1
  echo "indexer cases on v2: $(grep -E 'passed' "$OUT/scores-v2-tests.log" | tail -1)"
  grep "^FAIL" "$OUT/scores-v2-tests.log" | head -5
  echo "QGMMA instructions in libdsa: $(cuobjdump --dump-sass "$B/libdsa.so" 2>/dev/null | grep -c QGMMA)"
  DSA_INDEXER_KERNEL=v3 DSA_TEST_ONLY=indexer timeout 90 "$B/test_gpu" >"$OUT/scores-v3-tests.log" 2>&1 || rc=1
  echo "indexer cases on v3: $(grep -E 'passed' "$OUT/scores-v3-tests.log" | tail -1)"
  grep "^FAIL" "$OUT/scores-v3-tests.log" | head -5
  for k in v1 v2 v3; do
    DSA_INDEXER_KERNEL=$k timeout 120 "$B/dsa-bench" glm --sizes 8k,128k,1M --check --json "$OUT/scores-$k.json" \
      >"$OUT/scores-$k.log" 2>&1 || rc=1
  done
  python3 - "$OUT/scores-v1.json" "$OUT/scores-v2.json" "$OUT/scores-v3.json" <<'PY'
import json, sys
runs = [json.load(open(f)) for f in sys.argv[1:]]
key = lambda r: (r["table"], r["S"])
by = [{key(r): r for r in d["rows"]} for d in runs]
print("table      S   scores ms: v1      v2      v3   checks")
for k, r in by[0].items():
    rs = [b.get(k) for b in by]
    print(f"{k[0]:8s} {k[1]:8d}  " + "  ".join(f"{x['scores_ms']:.4f}" if x else "   -  " for x in rs) +
          "  " + "/".join(x["check"] if x else "-" for x in rs))
PY
  if [ -n "${SCORES_NCU:-}" ]; then
    DSA_INDEXER_KERNEL=v2 timeout 200 ncu --clock-control none --warp-sampling-interval 0 -k regex:indexer_scores_v2 \
      --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters --import-source yes \
      -o "$OUT/scores-v2" "$B/dsa-bench" glm --only prefill --sizes 1M --iters 2 --warmup 1 >/dev/null 2>&1
    ncu -i "$OUT/scores-v2.ncu-rep" --page source --csv --print-source sass >"$OUT/scores-v2-src.csv" 2>/dev/null
    rm -f "$OUT/scores-v2.ncu-rep"
    python3 - "$OUT/scores-v2-src.csv" <<'PY' | tee "$OUT/scores-v2-ncu.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h = rows[1]
w, src = h.index("Warp Stall Sampling (All Samples)"), h.index("Source")
data = sorted(((float(r[w] or 0), r[src]) for r in rows[2:] if len(r) > w), reverse=True)
tot = sum(d[0] for d in data) or 1
for v, t in data[:25]:
    print(f"{100 * v / tot:5.1f}%  {t[:100]}")
PY
    rm -f "$OUT/scores-v2-src.csv"
  fi
fi

if [ "$what" = attn ]; then
  for kv in fp8 bf16; do
    "$B/dsa-bench" attn --kv $kv --check --json "$OUT/attn-$kv-hot.json" "$@" >"$OUT/attn-$kv-hot.log" 2>&1 || rc=$?
    "$B/dsa-bench" attn --kv $kv --cold --json "$OUT/attn-$kv-cold.json" "$@" >"$OUT/attn-$kv-cold.log" 2>&1 || rc=$?
    sed -n '/== sparse/,$p' "$OUT/attn-$kv-hot.log" "$OUT/attn-$kv-cold.log" | grep -v "^%"
  done
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  "$B/dsa-bench" glm --check --json "$OUT/bench.json" "$@" >"$OUT/bench.log" 2>&1 || rc=$?
  tail -n 45 "$OUT/bench.log"
fi
# The device tool brings back only a few files: many logs travel as one archive.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz -- * && find . -maxdepth 1 -type f ! -name logs.tgz -delete)
fi
exit $rc
