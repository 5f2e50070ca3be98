#!/usr/bin/env bash
# Runs a grid's unfinished runs in parallel, one `launch.compare` lane per variant x seed, into one
# output directory, then aggregates it: what `python -m launch.compare --grid=GRID --out=OUT` does
# one run at a time, for a machine with many cores (and one accelerator the lanes share).
#
#   bash launch/grid_lanes.sh GRID OUT [DEADLINE_S]
#
# launch.compare holds one lock per output directory, so each lane gets its own directory
# OUT/lanes/<variant>_seed<s> whose runs/, warm_starts/ and artifacts/ link to OUT's: every run lands in
# OUT/runs/<variant>/seed_<s> as the serial command puts it, and the serial command resumes or
# aggregates the same OUT. The first lane builds the grid's warm start; the others start once it
# is complete. Runs start seed by seed (every variant of a seed, then the next seed). Grids whose
# runs share one warm start only, with their artifacts (a trained PRM) already built (refused
# otherwise: launch.compare builds them).
# DEADLINE_S (seconds from the start, 0 = none): the lanes then get SIGTERM, which launch.train
# answers by saving a checkpoint; running the same command again resumes them.
#
# Environment: RECORDS (a directory of finished runs' records, launch.compare --records: the runs
# it holds are restored, not run, and each lane saves its run's record there once finished, so a
# grid whose machine is wiped between sessions resumes from a committed RECORDS); PYTHON (default
# python); LANES (most lanes at once, default: all); PIN=1 runs each lane on a CPU of its own
# (`taskset -c`; at most one lane per CPU the script may use; the warm start builds on every CPU,
# then its lane is pinned: two lanes' update steps on two cores ran 1.2x faster pinned,
# docs/benchmarks.md); POLL_S (how often the lanes are looked at, default 5 seconds);
# XLA_PYTHON_CLIENT_PREALLOCATE defaults to false so that the lanes can share one GPU;
# MALLOC_ARENA_MAX to 2: glibc's per-thread malloc arenas let a lane's resident memory grow
# beyond what it uses (a SmolLM2 full fine-tuning lane reached 13.9-14.5 GB by its fifth step
# without the cap). Even so, two SmolLM2 lanes did not fit in 24 GB: with the cap, a FrozenLake
# chat lane reached 13.8 GB over ten steps and its evaluations, and a Countdown lane beside it was
# killed by the OOM killer at 12.1 GB. Size LANES by memory as well as by CPUs.

# The body is one function, called on the last line: bash reads a script as it runs it, so an edit
# to this file while a grid runs would otherwise change (or break) the commands it has yet to run.
main() {
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: bash launch/grid_lanes.sh GRID OUT [DEADLINE_S]" >&2
  exit 2
fi
GRID=$1
OUT=$2
DEADLINE_S=${3:-0}
PYTHON=${PYTHON:-python}
POLL_S=${POLL_S:-5}
PIN=${PIN:-0}
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
export MALLOC_ARENA_MAX=${MALLOC_ARENA_MAX:-2}
START=$(date +%s)
RECORDS_ARG=()
[[ -n ${RECORDS:-} ]] && RECORDS_ARG=(--records="$RECORDS")
mkdir -p "$OUT/lanes" "$OUT/runs" "$OUT/warm_starts" "$OUT/artifacts" || exit 2

PLAN=$("$PYTHON" -m launch.compare --grid="$GRID" --out="$OUT" "${RECORDS_ARG[@]}" --dry_run \
       2>/dev/null) || {
  echo "launch.compare --dry_run refused the grid:" >&2
  "$PYTHON" -m launch.compare --grid="$GRID" --out="$OUT" "${RECORDS_ARG[@]}" --dry_run >&2
  exit 2
}
if [[ $(grep -c '^# warm start ' <<<"$PLAN") -gt 1 ]]; then
  echo "grid_lanes.sh: $GRID has more than one warm start; run it with launch.compare" >&2
  exit 2
fi
if grep -q '^# artifact .*: to build' <<<"$PLAN"; then
  echo "grid_lanes.sh: $GRID needs artifacts that are not built; build them with launch.compare" >&2
  exit 2
fi
# "# variant=NAME seed=S: STATE" for every run; the finished ones are skipped. Seed by seed (the
# grid's variant order within a seed): a grid stopped part-way holds every variant of its first
# seeds, a paired comparison, rather than every seed of its first variants.
mapfile -t PENDING < <(sed -n '/: finished/!s/^# variant=\([^ ]*\) seed=\([0-9]*\): .*/\1 \2/p' \
                       <<<"$PLAN" | sort -s -n -k2,2)
echo "grid_lanes.sh: ${#PENDING[@]} runs to go"

cpu_list() {  # the CPUs this script may run on, one per line ("0-3,6" -> 0 1 2 3 6)
  local part parts
  IFS=, read -ra parts <<<"$(taskset -pc $$ | sed 's/.*: *//')"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
CPUS=()
if [[ $PIN == 1 ]]; then
  command -v taskset > /dev/null || { echo "grid_lanes.sh: PIN=1 needs taskset" >&2; exit 2; }
  mapfile -t CPUS < <(cpu_list)
fi

PIDS=()
LANE_CPUS=()  # with PIN=1, the CPU of each lane in PIDS
free_cpu() {  # a CPU that no running lane holds
  local c i held
  for c in "${CPUS[@]}"; do
    held=0
    for i in "${!PIDS[@]}"; do
      [[ ${LANE_CPUS[$i]} == "$c" ]] && kill -0 "${PIDS[$i]}" 2>/dev/null && held=1
    done
    [[ $held == 0 ]] && { echo "$c"; return; }
  done
}
lane() {  # lane VARIANT SEED: one launch.compare on its own output directory
  local dir="$OUT/lanes/$1_seed$2" cpu="" pin=()
  mkdir -p "$dir"
  ln -sfn "$(realpath "$OUT/runs")" "$dir/runs"
  ln -sfn "$(realpath "$OUT/warm_starts")" "$dir/warm_starts"
  ln -sfn "$(realpath "$OUT/artifacts")" "$dir/artifacts"
  if [[ $PIN == 1 ]]; then
    cpu=$(free_cpu)
    # The lane that builds the warm start has every CPU until it is built (pin_tree below).
    [[ $WARMING == 1 ]] || pin=(taskset -c "$cpu")
  fi
  "${pin[@]}" "$PYTHON" -m launch.compare --grid="$GRID" --out="$dir" --only="$1" --seeds="$2" \
    "${RECORDS_ARG[@]}" > "$dir/compare.log" 2>&1 &
  PIDS+=($!)
  LANE_CPUS+=("$cpu")
  echo "grid_lanes.sh: lane $1 seed $2 started${cpu:+ on CPU $cpu} (log $dir/compare.log)"
}
pin_tree() {  # pin_tree PID CPU: the process, its threads and its descendants onto CPU
  local child
  taskset -a -pc "$2" "$1" > /dev/null 2>&1
  for child in $(pgrep -P "$1"); do pin_tree "$child" "$2"; done
}
running_lanes() {  # how many lanes are still running
  local p n=0
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
  echo "$n"
}
past_deadline() {
  [[ $DEADLINE_S -gt 0 && $(( $(date +%s) - START )) -ge $DEADLINE_S ]]
}
stop_lanes() {
  echo "grid_lanes.sh: stopping the lanes (checkpoints are saved)"
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait
}
trap 'stop_lanes; exit 130' INT TERM

warm_built() {  # the only warm start, if any, is complete
  local f
  for f in "$OUT"/warm_starts/*/warm_start.json; do
    [[ -e $f ]] || return 1
    grep -q '"complete": true' "$f" || return 1
  done
  return 0
}

NEXT=0
WARMING=0
if [[ ${#PENDING[@]} -gt 0 ]] && grep -q '^# warm start .*to build' <<<"$PLAN"; then
  WARMING=1
  lane ${PENDING[0]}
  NEXT=1
  until warm_built; do
    if ! kill -0 "${PIDS[0]}" 2>/dev/null; then
      warm_built || { echo "grid_lanes.sh: the warm start failed (see its log.txt)" >&2; exit 1; }
    fi
    past_deadline && { stop_lanes; exit 124; }
    sleep "$POLL_S"
  done
  WARMING=0
  [[ $PIN == 1 ]] && pin_tree "${PIDS[0]}" "${LANE_CPUS[0]}"
fi
MAX=${LANES:-${#PENDING[@]}}
[[ $PIN == 1 && $MAX -gt ${#CPUS[@]} ]] && MAX=${#CPUS[@]}
while [[ $NEXT -lt ${#PENDING[@]} ]]; do
  if [[ $(running_lanes) -lt $MAX ]]; then
    lane ${PENDING[$NEXT]}
    NEXT=$((NEXT + 1))
  else
    past_deadline && break
    sleep "$POLL_S"
  fi
done
status=0
while true; do
  [[ $(running_lanes) -eq 0 ]] && break
  if past_deadline; then stop_lanes; status=124; break; fi
  sleep "$POLL_S"
done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || { [[ $status -eq 0 ]] && status=1; }; done
"$PYTHON" -m launch.compare --grid="$GRID" --out="$OUT" "${RECORDS_ARG[@]}" --aggregate_only \
  || status=1
exit $status
}

main "$@"
