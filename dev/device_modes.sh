#!/usr/bin/env bash
# dev/device_modes.sh — development runs on the GPU machine (the user-facing check is
# tools/gpu_check.sh). Run from the repository root; logs to $OUT, a short table printed last.
# Uses the build in $DSA_BUILD_DIR (default ./build) when it holds the dev tools, else builds
# ./build-dev with ninja.
# Usage: dev/device_modes.sh MODE [extra dsa-bench args...]
#   tools      the dev/ tools: sm90 microbench, the mma_split and rows_as_m traces, the heads_as_m
#              modes, the plain wgmma scorer against the library
#   crossover  attention over decode batches 1..256 at 16 / 64 / 128 heads, FP8 KV, each kernel
#              forced (DSA_KERNEL=attention:...) and the library's choice: where the table's rows
#              should change
#   scores     dsa-bench glm --check at 8k / 128k / 1M with each scorer forced and the choice; the
#              QGMMA / UTMALDG counts of libdsa
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
if [ "$mode" != compare ] && [ ! -x "$B/dev/dsa-dev-sm90-microbench" ]; then
  B=build-dev
  echo "building in $B"
  { cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSA_BUILD_DEV=ON && cmake --build "$B" -j; } \
    >"$OUT/cmake.log" 2>&1 || { tail -n 30 "$OUT/cmake.log"; exit 1; }
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
tools)
  for t in sm90-microbench attention-mma-split-trace attention-rows-as-m-trace attention-heads-as-m-modes \
    scores-wgmma-plain; do
    timeout 120 "$B/dev/dsa-dev-$t" >"$OUT/$t.log" 2>&1 || { echo "dsa-dev-$t: exit $?"; rc=1; }
    echo "== dsa-dev-$t"
    tail -n 12 "$OUT/$t.log"
  done
  ;;
crossover)
  for h in 16 64 128; do
    for k in choice mma_split rows_as_m heads_as_m; do
      envk=(); [ $k != choice ] && envk=(DSA_KERNEL=attention:$k)
      env "${envk[@]}" timeout 120 "$B/dsa-bench" attn --kv fp8 --heads $h --batches 1,2,4,8,16,32,64,128,256 \
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
*)
  echo "device_modes: unknown mode '$mode' (tools, crossover, scores, compare)" >&2
  exit 2
  ;;
esac
# The device tool brings back only a few files: many logs travel as one archive.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 6 ]; then
  (cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz -- * && find . -maxdepth 1 -type f ! -name logs.tgz -delete)
fi
exit $rc
