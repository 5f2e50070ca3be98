#!/usr/bin/env bash
# The accelerator check: one script, one machine with one accelerator (also runs on a CPU),
# meant to end within 8 minutes on an H100: each stage has a time cap and the whole run a budget
# (465 s). The caps are estimates; only quick-mode CPU runs have checked the script so far.
#
#   bash launch/gpu_check.sh OUT_DIR            # the full check (on the accelerator)
#   bash launch/gpu_check.sh OUT_DIR --quick    # every stage shrunk: a 2-core CPU in minutes
#   QUICK=1 bash launch/gpu_check.sh OUT_DIR    # the same
#
# Stages (each one's JSON and log go to OUT_DIR; a stage that fails or runs out of time is
# recorded in OUT_DIR/status.txt and the next one runs):
#   device        OUT_DIR/device.txt: `nvidia-smi -L`, `jax.devices()`, versions, torch.cuda,
#                 which of the Python packages the jobs import are present
#   sampler       python -m launch.benchmark sampler --models=tiny,small-25m[,smollm2-135m-instruct]
#                 --batches=1,16,64 --dtype=bfloat16 --floor_batch=64 --repeats=3
#                 -> sampler.json, sampler.log
#   latr_smollm2  python -m launch.latr_sampling (configs/countdown_latr.py) with
#                 --config.model.name=smollm2-135m-instruct --config.env.options.style=chat
#                 --config.rollout.context_length=1024 --config.rollout.max_action_tokens=256
#                 --config.rollout.num_slots=256 --tasks=128 --seeds=0,1,2
#                 --methods=independent,latr,hybrid -> latr_sampling.json, latr_sampling.log
#   rl_step       python -m launch.train --config=configs/countdown_grpo.py
#                 --workdir=OUT_DIR/rl_step --config.train.steps=1 --config.train.init=model
#                 --overwrite, with SmolLM2 (chat style, context 1024, 256-token answers,
#                 256 slots) when present, else the tiny preset (its config as it is); held-out
#                 evaluation at step 0 and 1 (100 tasks x 2, the config's) -> rl_step/
#                 (metrics.jsonl holds time/rollout, time/update, time/step; its checkpoints/,
#                 ~1.4 GB for SmolLM2, is deleted afterwards unless KEEP_CHECKPOINTS=1), rl_step.log
#   latr_tiny     the LATR study on the `tiny` preset (random weights; the config's compact
#                 style, 128-token context, 32-token answers): the fallback comparison point,
#                 last because it matters least -> latr_sampling_tiny.json, latr_sampling_tiny.log
#
# SmolLM2 is the file SmolLM2-135M-Instruct.Q4_1.gguf in the model folder ($JAXTREE_MODEL_DIR,
# default ~/.cache/jaxtree/models; jaxtree/models/named.py). When it is absent (or the `gguf`
# package that reads it is missing) the SmolLM2 parts are skipped with a message saying so, and
# the tiny-model versions run.
#
# Notes on what the numbers mean:
#   * transformers' baseline in the sampler benchmark runs on the GPU when torch has CUDA (else
#     on the CPU): "speedup" then compares the two on the same accelerator.
#   * Its "of bandwidth floor" / "of roofline" columns use the HOST's memory copy bandwidth
#     (numpy) and the default JAX device's float32 matmul rate; on a GPU the floor is therefore not
#     the GPU's HBM floor, so read those two columns on CPU runs only.
#   * In the LATR study the independent method runs in the slot engine (256 slots here; the
#     config's default 64 would take 16 waves for 1,024 rollouts); the LATR kernel holds all
#     128 x 8 rows at once. s/group compares those two, as configured.
#
# Installs nothing. The target machine has jax (CUDA), flax, optax, orbax, chex, transformers and
# torch. Of this project's install_requires (setup.py), these are NOT in that list:
#   tokenizers, safetensors, numpy, tqdm  - arrive with transformers
#   ml_dtypes                             - arrives with jax
#   absl-py                               - arrives with chex / optax / orbax
#   ml_collections                        - NEEDED by every job here: carry its wheel (PyYAML,
#                                           its other dependency, arrives with transformers)
#   tensorboardX                          - optional here: launch.train writes metrics.jsonl only
#                                           without it (it needs protobuf)
#   gymnasium                             - not used by these Countdown jobs (FrozenLake only)
#   matplotlib                            - not used here (launch.plot, grids' plots)
# and one that install_requires lists for the GGUF reader (jaxtree.models.gguf_io):
#   gguf                                  - NEEDED for SmolLM2 (pure Python; numpy, PyYAML, tqdm;
#                                           it also declares requests, not imported to read)
# So carry ml_collections and gguf wheels (tensorboardX + protobuf optional), e.g. from
# `pip download --no-deps ml_collections gguf -d wheels/`, and run with WHEELS_DIR=wheels: when
# WHEELS_DIR is set, `pip install --no-index --no-deps $WHEELS_DIR/*.whl` runs first.
#
# Environment: QUICK=1 (= --quick); WHEELS_DIR; PYTHON (default python); JAXTREE_MODEL_DIR;
# LATR_TOKENS (SmolLM2 answer tokens in the LATR study and the RL step, default 256; 512 if the
# time allows); BUDGET_S (seconds for the whole run, default 465; each stage has its own cap,
# cut to what is left, and a stage with under 20 s left is skipped); SAMPLER_BASELINE=0 (skip
# the transformers baseline, --nobaseline); JAX_COMPILATION_CACHE_DIR (default
# /tmp/jaxtree_gpu_check_xla_cache: a second run on the same machine skips most compilation;
# timed calls never include compilation either way, only the stage wall times change).

set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -* ]]; then
    echo "usage: bash launch/gpu_check.sh OUT_DIR [--quick]" >&2
    exit 2
fi
QUICK="${QUICK:-0}"
if [[ $# -eq 2 ]]; then
    if [[ "$2" == "--quick" ]]; then QUICK=1; else
        echo "unknown argument: $2 (expected --quick)" >&2; exit 2; fi
fi
[[ "$QUICK" == "1" ]] || QUICK=0

mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
PYTHON="${PYTHON:-python}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/jaxtree_gpu_check_xla_cache}"

START=$SECONDS
if [[ $QUICK == 1 ]]; then BUDGET_S="${BUDGET_S:-3600}"; else BUDGET_S="${BUDGET_S:-465}"; fi
DEADLINE=$((START + BUDGET_S))
STATUS="$OUT/status.txt"
: > "$STATUS"
FAILED=0

# run_stage NAME CAP_S LOG CMD...: runs CMD with its output in LOG under a time limit of
# min(CAP_S, what is left of the budget); records the exit status in status.txt (124: timed out).
run_stage() {
    local name=$1 cap=$2 log=$3
    shift 3
    local left=$((DEADLINE - SECONDS)) limit=$cap
    ((left < limit)) && limit=$left
    if ((limit < 20)); then
        echo "== $name: SKIPPED, ${left}s left of the ${BUDGET_S}s budget"
        echo "$name status=skipped reason=time_budget" >> "$STATUS"
        return 0
    fi
    echo "== $name (limit ${limit}s): $*"
    echo "+ $*" > "$log"
    local t0=$SECONDS rc=0
    set +e
    if command -v timeout > /dev/null; then
        timeout -k 10 "$limit" "$@" >> "$log" 2>&1
    else
        "$@" >> "$log" 2>&1
    fi
    rc=$?
    set -e
    local wall=$((SECONDS - t0)) note=""
    ((rc == 124 || rc == 137)) && note=" (timed out after ${limit}s)"
    ((rc != 0)) && FAILED=1
    echo "$name status=$rc wall_s=$wall$note" >> "$STATUS"
    tail -n "${TAIL_LINES:-20}" "$log" | sed 's/^/    /'
    echo "== $name: exit $rc, ${wall}s$note (log: $log)"
}

skip_stage() {  # skip_stage NAME REASON
    echo "== $1: SKIPPED: $2"
    echo "$1 status=skipped reason=$2" >> "$STATUS"
}

# ----------------------------------------------------------------------------- wheels

if [[ -n "${WHEELS_DIR:-}" ]]; then
    run_stage wheels 300 "$OUT/wheels.log" \
        bash -c '"$0" -m pip install --no-index --no-deps "$1"/*.whl' "$PYTHON" "$WHEELS_DIR"
fi

# ----------------------------------------------------------------------------- device

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)  quick: $QUICK"
    echo "cpus: $(nproc 2> /dev/null || echo ?)"
    echo "git: $(git -C "$REPO" rev-parse --short HEAD 2> /dev/null || echo ?)" \
        "($(git -C "$REPO" status --porcelain 2> /dev/null | wc -l) changed files)"
    echo "--- nvidia-smi -L"
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi -L 2>&1 || echo "(nvidia-smi -L: exit $?)"
    else
        echo "(nvidia-smi: not found)"
    fi
    echo "--- python -c 'import jax; print(jax.devices())'"
    "$PYTHON" -c 'import jax; print(jax.devices())' 2>&1 || echo "(exit $?)"
    echo "--- versions and packages"
    "$PYTHON" - << 'EOF' 2>&1 || echo "(exit $?)"
import importlib
import sys
print("python", sys.version.split()[0])
for name in ("jax", "jaxlib", "flax", "optax", "orbax.checkpoint", "chex", "transformers",
             "torch", "tokenizers", "safetensors", "numpy", "ml_dtypes", "absl", "ml_collections",
             "gguf", "tensorboardX", "gymnasium", "matplotlib"):
    try:
        module = importlib.import_module(name)
        print(f"  {name}: {getattr(module, '__version__', 'present')}")
    except Exception as e:  # noqa: BLE001
        print(f"  {name}: MISSING ({type(e).__name__}: {e})")
try:
    import jax
    print("jax backend:", jax.default_backend())
except Exception:  # noqa: BLE001
    pass
try:
    import torch
    print("torch.cuda.is_available():", torch.cuda.is_available())
except Exception:  # noqa: BLE001
    pass
EOF
} > "$OUT/device.txt" 2>&1 || true
echo "== device ($((SECONDS - START))s):"
sed 's/^/    /' "$OUT/device.txt"

# ----------------------------------------------------------------------------- SmolLM2?

# The model folder as jaxtree resolves it (named.py is loaded alone: no jax import).
SMOL_PATH="$("$PYTHON" - << 'EOF' 2> /dev/null || true
import importlib.util
import os
import sys
spec = importlib.util.spec_from_file_location("_jaxtree_named", "jaxtree/models/named.py")
named = sys.modules["_jaxtree_named"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(named)
print(os.path.join(named.model_dir(), named.NAMED_MODELS["smollm2-135m-instruct"].filename))
EOF
)"
SMOL=0
if [[ -z "$SMOL_PATH" ]]; then
    SMOL_REASON="could not resolve the model folder (jaxtree/models/named.py)"
elif [[ ! -f "$SMOL_PATH" ]]; then
    SMOL_REASON="no SmolLM2 file at $SMOL_PATH"
elif ! "$PYTHON" -c 'import gguf' 2> /dev/null; then
    SMOL_REASON="the gguf package (reads $SMOL_PATH) is not installed: carry its wheel"
else
    SMOL=1
fi
if [[ $SMOL == 1 ]]; then
    echo "== SmolLM2: $SMOL_PATH"
else
    echo "== SmolLM2 parts SKIPPED: $SMOL_REASON; running the tiny-model versions"
    echo "smollm2 status=skipped reason=$SMOL_REASON" >> "$STATUS"
fi

# ----------------------------------------------------------------------------- sizes

LATR_TOKENS="${LATR_TOKENS:-256}"
if [[ $QUICK == 1 ]]; then
    SAMPLER_SIZE=(--batches=2 --new_tokens=8 --prompt_len=8 --floor_batch=2 --repeats=1)
    STUDY_SIZE=(--tasks=2 --seeds=0 --k=4)
    TINY_STUDY_SIZE=(--tasks=4 --seeds=0 --k=4)
    SMOL_SHAPE=(--config.rollout.context_length=192 --config.rollout.max_action_tokens=24
                --config.rollout.num_slots=8)
    RL_SIZE=(--config.rollout.groups_per_step=2 --config.rollout.group_size=2
             --config.train.micro_batch_size=4 --config.eval.num_tasks=2
             --config.eval.samples_per_task=1 --config.eval.transcripts=1)
    CAP_SAMPLER=1800 CAP_LATR=1800 CAP_RL=1800 CAP_LATR_TINY=1800
else
    SAMPLER_SIZE=(--batches=1,16,64 --floor_batch=64 --repeats=3)
    STUDY_SIZE=(--tasks=128 --seeds=0,1,2)
    TINY_STUDY_SIZE=(--tasks=128 --seeds=0,1,2)
    SMOL_SHAPE=(--config.rollout.context_length=1024
                --config.rollout.max_action_tokens="$LATR_TOKENS" --config.rollout.num_slots=256)
    RL_SIZE=()
    CAP_SAMPLER=150 CAP_LATR=150 CAP_RL=120 CAP_LATR_TINY=40
fi
SMOL_CONFIG=(--config.model.name=smollm2-135m-instruct --config.env.options.style=chat
             "${SMOL_SHAPE[@]}")

# ----------------------------------------------------------------------------- 1. sampler

MODELS=tiny,small-25m
[[ $SMOL == 1 ]] && MODELS=$MODELS,smollm2-135m-instruct
BASELINE=--baseline
[[ "${SAMPLER_BASELINE:-1}" == 0 ]] && BASELINE=--nobaseline
run_stage sampler "$CAP_SAMPLER" "$OUT/sampler.log" \
    "$PYTHON" -m launch.benchmark sampler --models="$MODELS" --dtype=bfloat16 "$BASELINE" \
    "${SAMPLER_SIZE[@]}" --output="$OUT/sampler.json"

# ----------------------------------------------------------------------------- 2. LATR (SmolLM2)

if [[ $SMOL == 1 ]]; then
    run_stage latr_smollm2 "$CAP_LATR" "$OUT/latr_sampling.log" \
        "$PYTHON" -m launch.latr_sampling --config=configs/countdown_latr.py "${SMOL_CONFIG[@]}" \
        "${STUDY_SIZE[@]}" --methods=independent,latr,hybrid --output="$OUT/latr_sampling.json"
else
    skip_stage latr_smollm2 "$SMOL_REASON"
fi

# ----------------------------------------------------------------------------- 3. RL step

if [[ $SMOL == 1 ]]; then RL_MODEL=("${SMOL_CONFIG[@]}"); else RL_MODEL=(--config.model.name=tiny); fi
run_stage rl_step "$CAP_RL" "$OUT/rl_step.log" \
    "$PYTHON" -m launch.train --config=configs/countdown_grpo.py --workdir="$OUT/rl_step" \
    --config.train.steps=1 --config.train.init=model "${RL_MODEL[@]}" ${RL_SIZE[@]+"${RL_SIZE[@]}"} \
    --overwrite
if [[ -f "$OUT/rl_step/metrics.jsonl" ]]; then
    "$PYTHON" - "$OUT/rl_step/metrics.jsonl" << 'EOF' || true
import json
import sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "time/step" in m:
        print("    rl_step step {}: {}".format(m.get("step"), ", ".join(
            f"{k} {m[k]:.1f}s" for k in ("time/rollout", "time/update", "time/step") if k in m)))
EOF
fi
# SmolLM2's checkpoint (parameters and optimizer state, ~1.4 GB) is not worth carrying back.
if [[ "${KEEP_CHECKPOINTS:-0}" != 1 && -d "$OUT/rl_step/checkpoints" ]]; then
    rm -rf "$OUT/rl_step/checkpoints"
    echo "    removed $OUT/rl_step/checkpoints (KEEP_CHECKPOINTS=1 keeps it)"
fi

# ----------------------------------------------------------------------------- 4. LATR (tiny)

run_stage latr_tiny "$CAP_LATR_TINY" "$OUT/latr_sampling_tiny.log" \
    "$PYTHON" -m launch.latr_sampling --config=configs/countdown_latr.py \
    --config.model.name=tiny "${TINY_STUDY_SIZE[@]}" --methods=independent,latr,hybrid \
    --output="$OUT/latr_sampling_tiny.json"

# ----------------------------------------------------------------------------- summary

TOTAL=$((SECONDS - START))
echo "total status=$FAILED wall_s=$TOTAL quick=$QUICK" >> "$STATUS"
echo "== done in ${TOTAL}s; $STATUS:"
sed 's/^/    /' "$STATUS"
exit "$FAILED"
