#!/usr/bin/env bash
# Runs launch.train on every host of a Cloud TPU VM pod slice: one process per host, all running
# the same command (JAX's multi-controller runtime; `--distributed` reads the slice's hosts and
# this host's index from the TPU VM metadata).
#
#   export TPU_NAME=my-v5e-64 ZONE=us-west4-a PROJECT=my-project   # the slice, created beforehand
#   export WORKDIR=/mnt/shared/runs/fl_grpo      # a directory every host sees (see below)
#   launch/cloud/tpu_pod.sh setup                # clone + `pip install -e '.[tpu]'` on every host
#   launch/cloud/tpu_pod.sh train --config=configs/frozen_lake_grpo.py --config.mesh.fsdp=4
#   launch/cloud/tpu_pod.sh log                  # follow process 0's output
#   launch/cloud/tpu_pod.sh stop                 # SIGTERM everywhere: checkpoint, then exit
#
# Variables: REPO (git URL to clone; default: this checkout's `origin`), BRANCH (default: the
# current branch), SRC (directory on the hosts; default ~/jaxtree), MOUNT (a command run on every
# host by `setup` to mount the shared filesystem, e.g. an NFS mount of a Filestore instance).
#
# The workdir must be one directory that every host reads and writes (Filestore / NFS mounted at
# the same path everywhere): every process writes its shards of each orbax checkpoint there and
# process 0 its metrics, config record and lock. Each host's own output goes to
# $SRC/logs/train_<host>.log on that host.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
SRC=${SRC:-'~/jaxtree'}
REPO=${REPO:-$(git -C "$(dirname "$0")" remote get-url origin 2>/dev/null || true)}
BRANCH=${BRANCH:-$(git -C "$(dirname "$0")" rev-parse --abbrev-ref HEAD 2>/dev/null || echo main)}

on_all() {  # runs a shell command on every host of the slice
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" ${PROJECT:+--project="$PROJECT"} \
    --worker=all --command="$1"
}

on_first() {  # runs a shell command on host 0
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" ${PROJECT:+--project="$PROJECT"} \
    --worker=0 --command="$1"
}

command=${1:-}
[ -n "$command" ] && shift
case "$command" in
  setup)
    : "${REPO:?set REPO (no git origin to default to)}"
    on_all "set -e; ${MOUNT:+$MOUNT;} if [ -d $SRC/.git ]; then git -C $SRC fetch -q origin && \
git -C $SRC checkout -q $BRANCH && git -C $SRC pull -q; else git clone -q -b $BRANCH $REPO $SRC; fi; \
cd $SRC && pip install -q -e '.[tpu]' && python -c 'import jax; print(jax.process_count(), jax.device_count())'"
    ;;
  train)
    : "${WORKDIR:?set WORKDIR (a directory every host sees)}"
    args=$(printf ' %q' "$@")
    # nohup: the job outlives the ssh sessions; the pid file is what `stop` signals.
    on_all "cd $SRC && mkdir -p logs && nohup python -m launch.train --distributed \
--workdir=$(printf %q "$WORKDIR")$args > logs/train_\$(hostname).log 2>&1 & echo \$! > logs/train.pid; \
echo \"\$(hostname): started pid \$(cat logs/train.pid)\""
    ;;
  log)
    on_first "tail -n 50 -f $SRC/logs/train_\$(hostname).log"
    ;;
  stop)
    on_all "kill -TERM \$(cat $SRC/logs/train.pid) && echo \"\$(hostname): SIGTERM sent\""
    ;;
  *)
    echo "usage: $0 setup | train [launch.train flags] | log | stop" >&2
    exit 2
    ;;
esac
