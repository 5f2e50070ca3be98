#!/usr/bin/env bash
# Runs one jaxtree job as N processes on this machine, as a pod would run it on N hosts.
#
#   launch/cloud/local_multiprocess.sh N -- python -m launch.train --config=... --workdir=...
#
# Process i runs the command with --coordinator_address=127.0.0.1:<free port>
# --num_processes=N --process_id=i appended. Process 0 writes to this terminal; process i > 0
# writes to $JAXTREE_PROCESS_LOGS/process_<i>.log (default: a new directory under /tmp, named
# at the start). The script waits for all of them; when one fails, it stops the others and exits
# with that process's status, so it exits 0 only when every process did.
#
# On CPU, XLA_FLAGS=--xla_force_host_platform_device_count=K gives each process K devices
# (the job's mesh then has N x K devices). On one machine with several GPUs, give each process
# its own: JAX_LOCAL_DEVICE_IDS is read by every process, so start them yourself with
# different values, or use launch/cloud/slurm_gpu.sbatch.
set -u

usage() {
  echo "usage: $0 N -- command ..." >&2
  exit 2
}
[ $# -ge 3 ] || usage
count=$1
shift
[[ "$count" =~ ^[1-9][0-9]*$ ]] || { echo "error: N: '$count' is not a positive integer" >&2; exit 2; }
[ "$1" = "--" ] || usage
shift

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
logs=${JAXTREE_PROCESS_LOGS:-$(mktemp -d /tmp/jaxtree-processes-XXXXXX)}
mkdir -p "$logs"
[ "$count" -gt 1 ] && echo "local_multiprocess: $count processes, coordinator 127.0.0.1:$port; logs of processes 1..$((count - 1)) in $logs" >&2

pids=()
signal_all() {
  for pid in "${pids[@]}"; do
    kill "-$1" "$pid" 2>/dev/null
  done
}
# A signal to this script goes to every process (SIGTERM: each saves a checkpoint at the step
# they agree on, then exits).
trap 'signal_all TERM' INT TERM

for ((i = 0; i < count; i++)); do
  flags=(--coordinator_address="127.0.0.1:$port" --num_processes="$count" --process_id="$i")
  if [ "$i" -eq 0 ]; then
    "$@" "${flags[@]}" &
  else
    "$@" "${flags[@]}" >"$logs/process_$i.log" 2>&1 &
  fi
  pids+=($!)
done

status=0
declare -A live
for ((i = 0; i < count; i++)); do live[${pids[$i]}]=$i; done
# Polled rather than `wait -n PID...`: bash reaps children as they exit, and `wait -n` given a
# pid it has already reaped answers "no such job" without saying which one finished, so a loop
# on it can spin forever. `wait PID` returns a reaped child's saved status.
while [ "${#live[@]}" -gt 0 ]; do
  for pid in "${!live[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    code=$?
    index=${live[$pid]}
    unset "live[$pid]"
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$code
      # The others cannot finish a step without it (every update is a collective of all
      # processes), so they are killed rather than left to JAX's heartbeat timeout.
      echo "local_multiprocess: process $index exited with status $code; stopping the others" >&2
      signal_all KILL
    fi
  done
  [ "${#live[@]}" -gt 0 ] && sleep 0.1
done
exit "$status"
