#!/usr/bin/env bash
# Nsight Compute profile of one attention kernel per implementation, same benchmark row for all:
# ours and the peers of benchmarks/kernel_bench.py side by side (tensor-pipe and issue use,
# instruction counts, warp stalls, memory traffic), to see what a gap in the kernel table is made of.
#
#   bash tools/device/ncu_attention.sh fwd "--seqlens 32768 --masks document" flashmask fa4varlen cudnnflex
#   bash tools/device/ncu_attention.sh bwd "--seqlens 8192 --masks causal_document" flashmask fa4varlen
#
# Arguments: the direction (fwd | bwd), kernel_bench.py arguments choosing the row (head dim, dtype
# and heads default to kernel_bench's), then the implementations. Needs ncu, torch with CUDA,
# FLASHMASK_LIB (or a build) and, for the peers, the packages kernel_bench.py imports for them.
# Per implementation $OUT (default ./ncu_out) gets <impl>_<dir>.txt (ncu's details page of the
# profiled kernels), <impl>_<dir>_raw.csv (every collected metric) and <impl>_<dir>.log (the
# benchmark's own output); a summary is printed (the tensor pipes, the share of the kernel's cycles
# the SMs were busy, where a persistent kernel's last wave shows, and the top warp stalls).
# Which kernel is profiled: ours by its mangled name (sm90 fwd_kernel / bwd_kernel); a peer by
# "AttentionForward" / "AttentionBackward" in its kernel name (FlashAttention-4's and
# cuDNN-frontend's CuTe kernels are named after their classes, FlashAttentionForwardSm90,
# FlexAttentionForwardSm90, ...; a bare "Forward" also matched cuDNN-frontend's mask-plan kernels,
# ForwardSchedulePlan), the third matching launch (warm: after the compile call and one warm-up),
# up to three kernels.
# SOURCE=1 also collects per-instruction warp-stall samples (SourceCounters) and prints the 25 SASS
# instructions with the most samples per implementation, from <impl>_<dir>_sass.csv (ncu's source
# page): where in the kernel the time goes, for two kernels of the same design.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 3 ] || { sed -n 2,20p "$0"; exit 2; }
DIR=$1 ROW=$2; shift 2
case "$DIR" in fwd) PEER_RE='regex:AttentionForward'; OURS_RE='regex:sm9010fwd_kernel' ;;
               bwd) PEER_RE='regex:AttentionBackward'; OURS_RE='regex:sm9010bwd_kernel' ;;
               *) echo "direction must be fwd or bwd, got $DIR"; exit 2 ;; esac
OUT=${OUT:-$PWD/ncu_out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
SECTIONS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section WarpStateStats --section SchedulerStats --section InstructionStats --section LaunchStats
          --section Occupancy"
[ "${SOURCE:-0}" = 1 ] && SECTIONS="$SECTIONS --section SourceCounters"
# Each SM's active cycles against the kernel's: what a persistent kernel's last wave leaves idle.
SECTIONS="$SECTIONS --metrics sm__cycles_active.avg,sm__cycles_active.min,sm__cycles_elapsed.max"
STATUS=0
for impl in "$@"; do
  re=$PEER_RE; [ "$impl" = flashmask ] && re=$OURS_RE
  rep=/tmp/ncu_${impl}_${DIR}
  # shellcheck disable=SC2086
  timeout 300 "$NCU" --kernel-name-base mangled --kernel-name "$re" --launch-skip 2 --launch-count 3 \
    --clock-control none $SECTIONS -o "$rep" -f \
    python3 benchmarks/kernel_bench.py --impls "$impl" $ROW --reps 1 --warmup 1 --warmup-s 0 \
    --json /tmp/ncu_${impl}_${DIR}.json > "$OUT/${impl}_${DIR}.log" 2>&1 || STATUS=1
  if [ -f "$rep.ncu-rep" ]; then
    "$NCU" --import "$rep.ncu-rep" --page details > "$OUT/${impl}_${DIR}.txt" 2>&1
    "$NCU" --import "$rep.ncu-rep" --page raw --csv > "$OUT/${impl}_${DIR}_raw.csv" 2>&1
    if [ "${SOURCE:-0}" = 1 ]; then
      "$NCU" --import "$rep.ncu-rep" --page source --print-source sass --csv > "$OUT/${impl}_${DIR}_sass.csv" 2>&1
      python3 - "$OUT/${impl}_${DIR}_sass.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next((i for i, r in enumerate(rows) if any("Sampling" in c for c in r)), None)
if head is None:
    sys.exit(print("    (no warp-stall sampling columns in the source page)"))
names = rows[head]
sampling = [i for i, c in enumerate(names) if "Sampling" in c]
col = next((i for i in sampling if "All" in names[i]), sampling[0])  # all samples, not only not-issued
src = next((i for i, c in enumerate(names) if c.strip().lower() in ("source", "sass")), 1)
body = [r for r in rows[head + 1:] if len(r) == len(names) and r[col].replace(".", "", 1).isdigit()]
total = sum(float(r[col]) for r in body) or 1.0
print(f"    top SASS by {names[col]} ({int(total)} samples):")
for r in sorted(body, key=lambda r: -float(r[col]))[:25]:
    print(f"    {100 * float(r[col]) / total:5.1f}%  {r[0][:10]:10s} {r[src][:90]}")
PY
    fi
    rm -f "$rep.ncu-rep"
    echo "== $impl $DIR ($ROW)"
    grep -E "^  [^ ].*\(|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Executed Instructions  |Warp Cycles Per Issued|Registers Per Thread|Achieved Occupancy|L2 Hit Rate|DRAM Throughput" \
      "$OUT/${impl}_${DIR}.txt" | head -n 40
    # Tensor-pipe activity, how busy the SMs were over the kernel's cycles, and the top stall reasons
    # per kernel, from the raw metrics.
    python3 - "$OUT/${impl}_${DIR}_raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if head is None:
    sys.exit(0)
names = rows[head]
for r in rows[head + 2:]:
    if len(r) != len(names):
        continue
    m = dict(zip(names, r))
    pipes = {k: v for k, v in m.items() if "pipe_tensor" in k and "pct" in k}
    stalls = sorted(((float(v), k) for k, v in m.items()
                     if "issue_stalled_" in k and k.endswith(".ratio") and v.replace(".", "", 1).isdigit()),
                    reverse=True)[:6]
    print(f"  {m['Kernel Name'][:90]}")
    for k, v in pipes.items():
        print(f"    {k}: {v}")
    try:
        active, least, elapsed = (float(m[k].replace(",", "")) for k in
                                  ("sm__cycles_active.avg", "sm__cycles_active.min", "sm__cycles_elapsed.max"))
        print(f"    SMs busy {100 * active / elapsed:.1f}% of the kernel's cycles on average, the least busy "
              f"{100 * least / elapsed:.1f}% (the rest: waiting for the first tile and idle after the last)")
    except (KeyError, ValueError, ZeroDivisionError):
        pass
    for v, k in stalls:
        print(f"    stall {k.split('stalled_')[1].split('_per_')[0].split('.')[0]}: {v:.2f} ({k})")
PY
  else
    echo "== $impl $DIR: no report (see $OUT/${impl}_${DIR}.log)"; tail -n 5 "$OUT/${impl}_${DIR}.log"; STATUS=1
  fi
done
exit $STATUS
