#!/usr/bin/env bash
# dev/device_modes.sh — development runs on the GPU machine (the user-facing check is
# tools/gpu_check.sh). Run from the repository root; logs to $OUT, a short table printed last.
# Uses the build in $DSA_BUILD_DIR (default ./build) when it holds the dev tools, else builds
# ./build-dev with ninja.
# Usage: dev/device_modes.sh MODE [extra dsa-bench args...]
#   tools      the dev/ tools: sm90 microbench, the mma_split and rows_as_m traces, the heads_as_m
#              modes, the plain wgmma scorer against the library
#   crossover  attention over decode batches 1..256 at 16 / 32 / 64 / 128 heads (16 and 32 heads on to
#              4096, the GLM chunk's token count), FP8 KV, each kernel forced
#              (DSA_KERNEL=attention:...) and the library's choice: where the table's rows should change
#   scores     dsa-bench glm --check at 8k / 128k / 1M with each scorer forced and the choice; the
#              QGMMA / UTMALDG counts of libdsa
#   prefill    the fused prefill indexer: test_gpu_indexer with the library's choice, and it, _api and
#              _garbage with indexer:fused; memcheck and racecheck over fused cases; dsa-bench glm
#              --only prefill --check at 8k / 128k / 1M, fused and separate, and the 4096-token chunk
#              at 128k and 1M (the library's choice, and 128k separate); one table of scores / indexer
#              ms and the indexer's workspace.
#              PREFILL_STEPS picks some of "tests sanitize bench chunk" (default all)
#   wheel      the wheel as a user gets it (issue 23): .whl/dsa-*.whl, built and repaired here by
#              .ci/run's steps and carried (`carry: [".whl"]`), installed with pip --target (the
#              machine installs nothing from the network), then python/tests' GPU tests and
#              torch.ops.dsa's (test_gpu.py, test_ops.py) against that install, and the host cost a
#              call against torch.add's (dev/python_overhead.py; again with DSA_TORCH_OPS=python for
#              torch.ops.dsa's Python kernels)
#   barriers   the sanitizers' model of named barriers: dsa-dev-racecheck-named-barrier's three modes
#              under racecheck and synccheck, and synccheck over heads_as_m's 128-head case (it reports
#              "divergent threads" at heads_as_m's consumer barriers: the tool's, or real?)
#   merge      context parallelism's merge (issue 24): test_gpu_cp with each merge kernel forced
#              (DSA_KERNEL=merge:select / merge:runs), memcheck / racecheck / synccheck over the merge
#              cases on runs, dsa-bench merge --check (W = 2 / 4 / 8 lists, 1 / 64 / 4096 tokens, both
#              kernels; extra args passed on), ncu of both kernels at one token x 8 lists
#   seesaw     the seesaw attention consumers (issue 22): test_gpu_attention, test_gpu_api and
#              test_gpu_garbage under DSA_KERNEL=attention:seesaw, memcheck / racecheck / synccheck over
#              bf16 and FP8 (converted rows) cases, then dsa-bench attn --check with heads_as_m and with
#              seesaw forced: bf16 KV at every shape, FP8 at the prefill shapes (two tables)
#   cp         several GPUs (issue 24; the nvidia-h200-x4 / -x8 kinds): test_cp_nccl at every W the host
#              has (2, 4, 8), on the table's merge and on each forced, then for W = 4 and 8 dsa-bench cp
#              --check: decode batch 1 and 8 at 1M / 2M / 4M / 8M (round robin and blocks), the same in
#              CUDA graphs at 1M and 8M, prefill 4096 tokens at 1M; NCCL_NVLS_ENABLE=0 throughout.
#              CP_STEPS picks some of "tests decode graph prefill" (default all)
#   compare    builds side by side, carried to the machine: DSA_COMPARE="label=dir[:DSA_KERNEL value]
#              ..."; per entry the indexer, top-k and attention test programs and dsa-bench glm
#              (extra args, default --sizes 8k,128k,1M) --check; one table of scores / top-k ms
set -uo pipefail
OUT=${OUT:-/tmp/dsa-out}
mkdir -p "$OUT"
mode=${1:-tools}
shift || true
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

B=${DSA_BUILD_DIR:-build}
# The programs a mode runs, built with ninja in ./build-dev when $B lacks them ("all": the whole
# tree with the dev tools; compare and wheel carry their own).
case $mode in
prefill) targets="test_gpu_indexer test_gpu_api test_gpu_garbage dsa-bench" ;;
seesaw) targets="test_gpu_attention test_gpu_api test_gpu_garbage dsa-bench" ;;
cp) targets="test_cp_nccl dsa-bench" ;;
merge) targets="test_gpu_cp dsa-bench" ;;
compare | wheel) targets="" ;;
*) targets="all" ;;
esac
first=${targets%% *}
[ "$first" = all ] && first=dev/dsa-dev-sm90-microbench
if [ -n "$targets" ] && [ ! -x "$B/$first" ]; then
  B=build-dev
  echo "building in $B"
  if [ "$targets" = all ]; then
    { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSA_BUILD_DEV=ON && cmake --build "$B" -j; } \
      >"$OUT/cmake.log" 2>&1 || { tail -n 30 "$OUT/cmake.log"; exit 1; }
  else
    # shellcheck disable=SC2086 # the targets, one word each
    { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSA_BUILD_DEV=OFF -DDSA_BUILD_EXAMPLES=OFF &&
      cmake --build "$B" -j --target $targets; } >"$OUT/cmake.log" 2>&1 || { tail -n 30 "$OUT/cmake.log"; exit 1; }
  fi
fi

rc=0
# glm_table JSON... : scores / top-k ms per (table, S), one column per file
glm_table() {
  python3 - "$@" <<'PY'
import json, os, sys
runs = {}
for f in sys.argv[1:]:
    try: runs[f] = {(r["table"], r["S"]): r for r in json.load(open(f))["rows"]}
    except Exception: runs[f] = {}
keys = sorted({k for r in runs.values() for k in r})
print("table      S        " + "  ".join("%-24s" % os.path.basename(f)[:24] for f in runs))
for k in keys:
    cells = []
    for f in runs:
        r = runs[f].get(k)
        cells.append("%-24s" % (("%.4f/%.4f %s" % (r["scores_ms"], r["topk_ms"], r["check"])) if r else "-"))
    print("%-8s %8d  " % k + "  ".join(cells))
PY
}

case $mode in
barriers)
  for tool in racecheck synccheck; do
    for m in 0 1 2; do
      timeout 120 compute-sanitizer --tool $tool "$B/dev/dsa-dev-racecheck-named-barrier" $m >"$OUT/$tool-$m.log" 2>&1
      echo "$tool mode $m: exit $? $(grep -E 'SUMMARY' "$OUT/$tool-$m.log" | head -n 1)"
    done
  done
  DSA_TEST_ONLY="H128 fp8 (random bytes) T40" timeout 300 compute-sanitizer --tool synccheck --print-limit 3 \
    "$B/test_gpu_attention" >"$OUT/synccheck-heads_as_m.log" 2>&1
  echo "synccheck heads_as_m: exit $? $(grep -E 'SUMMARY' "$OUT/synccheck-heads_as_m.log" | head -n 1)"
  ;;
seesaw)
  for prog in test_gpu_attention test_gpu_api test_gpu_garbage; do
    DSA_KERNEL=attention:seesaw timeout 400 "$B/$prog" >"$OUT/$prog-seesaw.log" 2>&1 || rc=1
    echo "$prog, attention:seesaw: $(tail -n 1 "$OUT/$prog-seesaw.log")"
  done
  for tool in memcheck racecheck synccheck; do
    for only in "H64 bf16 kv_stride 640, T80" "H16 bf16 kv_stride 576, T1 topk2048" "H128 fp8 (random bytes) T40"; do
      DSA_KERNEL=attention:seesaw DSA_TEST_ONLY="$only" timeout 300 compute-sanitizer --tool $tool --print-limit 5 \
        "$B/test_gpu_attention" >"$OUT/$tool-${only//[^A-Za-z0-9]/_}.log" 2>&1
      echo "$tool ($only): exit $? $(grep -E 'SUMMARY' "$OUT/$tool-${only//[^A-Za-z0-9]/_}.log" | head -n 1)"
    done
  done
  # bf16 KV at every shape; packed FP8 (the seesaw converts every slot first) at the prefill shapes,
  # whose pool is one 16k context
  for k in heads_as_m seesaw; do
    DSA_KERNEL=attention:$k timeout 500 "$B/dsa-bench" attn --kv bf16 --check --json "$OUT/attn-bf16-$k.json" "$@" \
      >"$OUT/attn-bf16-$k.log" 2>&1 || rc=1
    DSA_KERNEL=attention:$k timeout 500 "$B/dsa-bench" attn --kv fp8 --shape prefill --check \
      --json "$OUT/attn-fp8-$k.json" "$@" >"$OUT/attn-fp8-$k.log" 2>&1 || rc=1
  done
  for kv in bf16 fp8; do
    python3 - "$kv" "$OUT/attn-$kv-heads_as_m.json" "$OUT/attn-$kv-seesaw.json" <<'PY'
import json, sys
runs = []
for f in sys.argv[2:]:
    try: runs.append({r.get("shape"): r for r in json.load(open(f))["rows"]})
    except (OSError, ValueError): runs.append({})
print("%-22s %14s %14s" % ("shape (%s KV, us)" % sys.argv[1], "heads_as_m", "seesaw"))
for shape in runs[0]:
    cells = []
    for run in runs:
        r = run.get(shape)
        cells.append("%8.1f %-5s" % (1e3 * r["attn_ms"], r.get("check", "")) if r else "-")
    print("%-22s %14s %14s" % (shape, *cells))
PY
  done
  ;;
cp)
  export NCCL_NVLS_ENABLE=0
  steps=${CP_STEPS:-tests decode graph prefill}
  ngpu=$(nvidia-smi -L | wc -l)
  if [[ " $steps " == *" tests "* ]]; then
    for k in "" merge:runs merge:select; do
      label=${k:-default}
      log="$OUT/test-cp-nccl-${label#merge:}.log"
      DSA_KERNEL=$k timeout 590 "$B/test_cp_nccl" >"$log" 2>&1 || rc=1
      echo "test_cp_nccl, merge $label: $(grep -c '^ok' "$log") ok, $(grep -c '^FAIL' "$log") failed;" \
        "$(grep '^skip' "$log" | tr '\n' ' ')"
    done
  fi
  for W in 4 8; do
    [ "$W" -le "$ngpu" ] || { echo "W = $W: $ngpu GPUs here"; continue; }
    if [[ " $steps " == *" decode "* ]]; then
      for layout in rr blocks; do
        timeout 590 "$B/dsa-bench" cp --gpus $W --layout $layout --sizes 1M,2M,4M,8M --batches 1,8 --check \
          --json "$OUT/cp-${W}gpu-$layout.json" "$@" | tee "$OUT/cp-${W}gpu-$layout.log" || rc=1
      done
    fi
    if [[ " $steps " == *" graph "* ]]; then
      timeout 590 "$B/dsa-bench" cp --gpus $W --graph --sizes 1M,8M --batches 1,8 --check \
        --json "$OUT/cp-${W}gpu-graph.json" "$@" | tee "$OUT/cp-${W}gpu-graph.log" || rc=1
    fi
    if [[ " $steps " == *" prefill "* ]]; then
      timeout 590 "$B/dsa-bench" cp --gpus $W --prefill 4096 --sizes 1M --check \
        --json "$OUT/cp-${W}gpu-prefill.json" "$@" | tee "$OUT/cp-${W}gpu-prefill.log" || rc=1
    fi
  done
  ;;
merge)
  for k in select runs; do
    DSA_KERNEL=merge:$k timeout 300 "$B/test_gpu_cp" >"$OUT/test-cp-$k.log" 2>&1 || rc=1
    echo "test_gpu_cp, merge:$k: $(grep -cE '^ok' "$OUT/test-cp-$k.log") ok; $(tail -n 1 "$OUT/test-cp-$k.log")"
  done
  for tool in memcheck racecheck synccheck; do
    DSA_KERNEL=merge:runs DSA_TEST_ONLY=merge timeout 300 compute-sanitizer --tool $tool --print-limit 5 \
      "$B/test_gpu_cp" >"$OUT/$tool-runs.log" 2>&1
    echo "$tool, merge:runs: exit $? $(grep -E 'SUMMARY' "$OUT/$tool-runs.log" | head -n 1)"
  done
  for k in select runs; do
    timeout 120 ncu --clock-control none --kernel-name regex:topk_merge --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section WarpStateStats --section SchedulerStats \
      "$B/dsa-bench" merge --lists 8 --tokens 1 --iters 1 --kernels $k >"$OUT/ncu-merge-$k.log" 2>&1
    echo "ncu, merge:$k, 1 token x 8 lists:"
    grep -E "Duration|Warp Cycles Per Issued|Registers Per|Issued Warp" "$OUT/ncu-merge-$k.log" | head -n 6
  done
  timeout 400 "$B/dsa-bench" merge --check --json "$OUT/merge.json" "$@" | tee "$OUT/merge-bench.log" || rc=1
  ;;
tools)
  for t in sm90-microbench attention-mma-split-trace attention-rows-as-m-trace attention-heads-as-m-modes \
    scores-wgmma-plain; do
    timeout 120 "$B/dev/dsa-dev-$t" >"$OUT/$t.log" 2>&1 || { echo "dsa-dev-$t: exit $?"; rc=1; }
    echo "== dsa-dev-$t"
    tail -n 12 "$OUT/$t.log"
  done
  ;;
crossover)
  for h in 16 32 64 128; do
    batches=1,2,4,8,16,32,64,128,256
    [ $h -le 32 ] && batches=$batches,512,1024,2048,4096
    for k in choice mma_split rows_as_m heads_as_m; do
      envk=(); [ $k != choice ] && envk=(DSA_KERNEL=attention:$k)
      env "${envk[@]}" timeout 240 "$B/dsa-bench" attn --kv fp8 --heads $h --batches $batches \
        --json "$OUT/crossover-h$h-$k.json" >"$OUT/crossover-h$h-$k.log" 2>&1 || rc=1
      sed -n '/== sparse/,$p' "$OUT/crossover-h$h-$k.log" | grep -v "^%" | grep decode | awk -v k=$k '{print k, $0}'
    done
  done
  ;;
scores)
  sass=$(cuobjdump --dump-sass "$B/libdsa.so" 2>/dev/null)
  echo "libdsa SASS: QGMMA $(grep -c QGMMA <<<"$sass") HGMMA $(grep -c HGMMA <<<"$sass") UTMALDG $(grep -c UTMALDG <<<"$sass") UBLKCP $(grep -c UBLKCP <<<"$sass")"
  files=()
  for k in choice mma wgmma wgmma_tma; do
    envk=(); [ $k != choice ] && envk=(DSA_KERNEL=scores:$k)
    env "${envk[@]}" timeout 150 "$B/dsa-bench" glm --sizes 8k,128k,1M --check --json "$OUT/scores-$k.json" "$@" \
      >"$OUT/scores-$k.log" 2>&1 || rc=1
    files+=("$OUT/scores-$k.json")
  done
  glm_table "${files[@]}"
  ;;
prefill)
  steps=" ${PREFILL_STEPS:-tests sanitize bench chunk} "
  [[ $steps == *" tests "* ]] && for run in "test_gpu_indexer|" "test_gpu_indexer|indexer:fused" "test_gpu_api|indexer:fused" \
    "test_gpu_garbage|indexer:fused"; do
    prog=${run%%|*}; k=${run#*|}; label=$prog${k:+-${k//:/-}}
    envk=(); [ -n "$k" ] && envk=(DSA_KERNEL="$k")
    env "${envk[@]}" timeout 240 "$B/$prog" >"$OUT/$label.log" 2>&1 || rc=1
    echo "$label: $(grep -E 'passed' "$OUT/$label.log" | tail -1)"
    grep -E "^FAIL" "$OUT/$label.log" | head -5
  done
  if [[ $steps == *" sanitize "* ]]; then
    for tc in "memcheck|fused: four" "memcheck|fused: small" "racecheck|fused: small"; do
      tool=${tc%%|*}; only=${tc#*|}
      DSA_KERNEL=indexer:fused DSA_TEST_ONLY="$only" timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 \
        "$B/test_gpu_indexer" >"$OUT/$tool-${only//[: ]/_}.log" 2>&1 || rc=1
      echo "$tool ($only): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed' "$OUT/$tool-${only//[: ]/_}.log" | tr '\n' ' ')"
    done
  fi
  files=()
  [[ $steps == *" bench "* ]] && for run in "fused|indexer:fused" "separate|indexer:separate"; do
    label=${run%%|*}; k=${run#*|}
    envk=(); [ -n "$k" ] && envk=(DSA_KERNEL="$k")
    env "${envk[@]}" timeout 200 "$B/dsa-bench" glm --only prefill --sizes 8k,128k,1M --check \
      --json "$OUT/prefill-$label.json" "$@" >"$OUT/prefill-$label.log" 2>&1 || rc=1
    files+=("$OUT/prefill-$label.json")
  done
  [[ $steps == *" chunk "* ]] && for run in "default-p4096|" "separate-p4096|indexer:separate"; do
    label=${run%%|*}; k=${run#*|}
    envk=(); [ -n "$k" ] && envk=(DSA_KERNEL="$k")
    sizes=128k; [ "$label" = default-p4096 ] && sizes=128k,1M
    env "${envk[@]}" timeout 200 "$B/dsa-bench" glm --only prefill --prefill-tokens 4096 --sizes $sizes --iters 5 \
      --warmup 1 --json "$OUT/prefill-$label.json" >"$OUT/prefill-$label.log" 2>&1 || rc=1
    files+=("$OUT/prefill-$label.json")
  done
  python3 - "${files[@]}" <<'PY'
import json, os, sys
print("%-16s %6s %8s %10s %10s %9s %s" % ("run", "tokens", "S", "scores_ms", "indexer_ms", "ws_MiB", "check"))
for f in sys.argv[1:]:
    try: rows = json.load(open(f))["rows"]
    except Exception as e: print(os.path.basename(f), "no record:", e); continue
    for r in rows:
        print("%-16s %6d %8d %10.4f %10.4f %9.1f %s" % (os.path.basename(f)[8:-5], r["tokens"], r["S"], r["scores_ms"] or 0,
              r["indexer_ms"] or 0, (r.get("indexer_workspace_bytes") or 0) / 2**20, r["check"]))
PY
  ;;
compare)
  bench_args=("$@")
  [ ${#bench_args[@]} -eq 0 ] && bench_args=(--sizes 8k,128k,1M)
  files=()
  for entry in ${DSA_COMPARE:-}; do
    label=${entry%%=*}; rest=${entry#*=}; dir=${rest%%:*}; kern=""; [ "$rest" != "$dir" ] && kern=${rest#*:}
    envk=(); [ -n "$kern" ] && envk=(DSA_KERNEL="$kern")
    for prog in test_gpu_indexer test_gpu_topk test_gpu_attention; do
      [ -x "$dir/$prog" ] || continue
      env "${envk[@]}" timeout 150 "$dir/$prog" >"$OUT/cmp-$label-$prog.log" 2>&1 || rc=1
      echo "$label $prog: $(grep -E 'passed' "$OUT/cmp-$label-$prog.log" | tail -1)"
    done
    env "${envk[@]}" timeout 200 "$dir/dsa-bench" glm "${bench_args[@]}" --check --json "$OUT/cmp-$label.json" \
      >"$OUT/cmp-$label.log" 2>&1 || rc=1
    files+=("$OUT/cmp-$label.json")
  done
  glm_table "${files[@]}"
  ;;
wheel)
  whl=$(ls .whl/dsa-*-manylinux_*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || { echo "wheel: no .whl/dsa-*-manylinux_*.whl carried" >&2; exit 1; }
  rm -rf /tmp/dsa-site && python3 -m pip install -q --no-index --no-deps --target /tmp/dsa-site "$whl" ||
    { echo "wheel: pip install failed" >&2; exit 1; }
  echo "installed $(basename "$whl") with $(python3 --version) (torch $(python3 -c 'import torch; print(torch.__version__)'))"
  PYTHONPATH=/tmp/dsa-site timeout 500 python3 -m pytest -q -p no:cacheprovider --import-mode=importlib \
    python/tests/test_gpu.py python/tests/test_ops.py >"$OUT/wheel-pytest.log" 2>&1 || rc=1
  PYTHONPATH=/tmp/dsa-site python3 -c "import dsa, dsa.ops; from dsa import _fast; print('dsa', dsa.version(), 'from', dsa.__file__, 'fast path:', _fast._ext, 'torch.ops C kernels:', dsa.ops._C_KERNELS)"
  PYTHONPATH=/tmp/dsa-site timeout 120 python3 dev/python_overhead.py >"$OUT/python-overhead.log" 2>&1 || rc=1
  # torch.ops.dsa with its Python kernels, for the C kernels' gain on this machine
  DSA_TORCH_OPS=python PYTHONPATH=/tmp/dsa-site timeout 120 python3 dev/python_overhead.py \
    >"$OUT/python-overhead-python-kernels.log" 2>&1 || rc=1
  tail -n 15 "$OUT/wheel-pytest.log"
  cat "$OUT/python-overhead.log"
  grep "torch.ops" "$OUT/python-overhead-python-kernels.log"
  ;;
*)
  echo "device_modes: unknown mode '$mode' (tools, barriers, crossover, scores, prefill, merge, seesaw, cp, compare, wheel)" >&2
  exit 2
  ;;
esac
# The device tool brings back only a few files: many logs travel as one archive.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz -- * && find . -maxdepth 1 -type f ! -name logs.tgz -delete)
fi
exit $rc
