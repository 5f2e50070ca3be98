#!/usr/bin/env bash
# The accelerator check: one script, one machine with one accelerator (also runs on a CPU),
# meant to end within 9 minutes on an H100/H200: each stage has a time cap and the whole run a
# budget (BUDGET_S, default 520 s). The caps are estimates, cut to what is left of the budget.
#
#   bash launch/gpu_check.sh OUT_DIR            # the full check (on the accelerator)
#   bash launch/gpu_check.sh OUT_DIR --quick    # every stage shrunk: a 2-core CPU in ~30 minutes
#   QUICK=1 bash launch/gpu_check.sh OUT_DIR    # the same
#
# Stages, most important first (each one's JSON and log go to OUT_DIR; a stage that fails or
# runs out of time is recorded in OUT_DIR/status.txt and the next one runs):
#   device        OUT_DIR/device.txt: `nvidia-smi -L`, `jax.devices()`, versions, torch.cuda,
#                 which of the Python packages the jobs import are present
#   base_rows     SmolLM2 at zero shot (docs/results.md's "Base" row): python -m launch.evaluate
#                 --config=configs/<env>_sft.py --checkpoint=smollm2-135m-instruct, chat prompts,
#                 context 2,048, 96-token actions, 32 tasks x 1, for Sudoku 4x4 and Minesweeper at
#                 temperature 1 and FrozenLake, Tic-Tac-Toe, Sokoban, Sudoku 4x4, Minesweeper at
#                 temperature 0; seven processes in the background from here until after the LATR
#                 study -> base_rows/<env>_t<T>/eval.json, log.txt, transcripts
#   sft_smollm2   python -m launch.sft --config=configs/countdown_smollm2.py (SmolLM2's warm start
#                 on Countdown demonstrations that reason before answering; 400-token answers)
#                 -> countdown_smollm2_sft/ (sft_metrics.jsonl), sft_smollm2.log
#   latr_smollm2  python -m launch.latr_sampling --config=configs/countdown_smollm2.py
#                 --checkpoint=<that warm start> --tasks=128 --methods=independent,latr,hybrid
#                 --config.rollout.num_slots=256, one process per seed (0, 1, 2), then --merge
#                 -> latr_sampling_seed<N>.json, latr_sampling.json, latr_sampling.log
#   rl_step       python -m launch.train --config=configs/countdown_smollm2.py
#                 --config.train.init=model --config.model.name=<the warm start>
#                 --config.train.steps=2: two GRPO steps with
#                 LATR rollouts (the second one compilation-free), held-out evaluation at step 0
#                 and 2 (the tiny preset's one step when SmolLM2 is absent) -> rl_step/
#                 (metrics.jsonl holds time/rollout, time/update, time/step), rl_step.log. The
#                 SmolLM2 checkpoints (~1.4 GB each) are deleted afterwards unless KEEP_CHECKPOINTS=1
#   sampler       python -m launch.benchmark sampler --models=tiny,small-25m[,smollm2-135m-instruct]
#                 --batches=1,16,64 --dtype=bfloat16 --floor_batch=64 --repeats=3
#                 -> sampler.json, sampler.log
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
#   * The base rows overlap the warm start and the LATR study on the same GPU: their walls, and
#     the study's seconds/group, are shared-machine figures; status.txt says when each ended.
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
# LATR_TOKENS (SmolLM2 answer tokens in the warm start, the LATR study and the RL step, default
# 400, the config's); STAGES (comma-separated stage names: run only these, e.g. a second call
# that redoes the ones a first call did not finish; default all); BUDGET_S (seconds for the
# whole run, default 520; each stage has its own cap,
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
if [[ $QUICK == 1 ]]; then BUDGET_S="${BUDGET_S:-3600}"; else BUDGET_S="${BUDGET_S:-520}"; fi
DEADLINE=$((START + BUDGET_S))
STATUS="$OUT/status.txt"
: > "$STATUS"
FAILED=0

# run_stage NAME CAP_S LOG CMD...: runs CMD with its output in LOG under a time limit of
# min(CAP_S, what is left of the budget); records the exit status in status.txt (124: timed out).
run_stage() {
    local name=$1 cap=$2 log=$3
    shift 3
    wanted "$name" || return 0
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

wanted() {  # wanted NAME: the stage is in $STAGES (or STAGES is unset); records a skip if not
    if [[ -z "${STAGES:-}" || ",$STAGES," == *",$1,"* ]]; then return 0; fi
    echo "== $1: SKIPPED: not in STAGES=$STAGES"
    echo "$1 status=skipped reason=not_in_STAGES" >> "$STATUS"
    return 1
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

LATR_TOKENS="${LATR_TOKENS:-400}"
if [[ $QUICK == 1 ]]; then
    SAMPLER_SIZE=(--batches=2 --new_tokens=8 --prompt_len=8 --floor_batch=2 --repeats=1)
    STUDY_SIZE=(--tasks=2 --k=4) STUDY_SEEDS=0,1
    TINY_STUDY_SIZE=(--tasks=4 --seeds=0 --k=4)
    # Countdown's chat prompt with its reasoning instructions fits 320 positions with a few answer
    # tokens.
    SMOL_SHAPE=(--config.rollout.context_length=320 --config.rollout.max_action_tokens=24
                --config.rollout.num_slots=8)
    SFT_SIZE=(--config.sft.num_episodes=4 --config.sft.steps=2 --config.sft.batch_size=2
              --config.sft.warmup_steps=1 --config.sft.checkpoint_every=0)
    RL_SIZE=(--config.rollout.groups_per_step=1 --config.rollout.group_size=2
             --config.train.micro_batch_size=2 --config.eval.num_tasks=2
             --config.eval.transcripts=1)
    BASE_SIZE=(--config.eval.num_tasks=1 --config.rollout.num_slots=2
               --config.rollout.max_action_tokens=8)
    CAP_SAMPLER=1800 CAP_SFT=1800 CAP_LATR=1800 CAP_RL=1800 CAP_LATR_TINY=1800 CAP_BASE=1800
else
    SAMPLER_SIZE=(--batches=1,16,64 --floor_batch=64 --repeats=3)
    STUDY_SIZE=(--tasks=128) STUDY_SEEDS=0,1,2
    TINY_STUDY_SIZE=(--tasks=128 --seeds=0,1,2)
    SMOL_SHAPE=(--config.rollout.max_action_tokens="$LATR_TOKENS" --config.rollout.num_slots=256)
    SFT_SIZE=()
    RL_SIZE=()
    BASE_SIZE=(--config.eval.num_tasks=32 --config.rollout.num_slots=16
               --config.rollout.max_action_tokens=96)
    CAP_SAMPLER=80 CAP_SFT=150 CAP_LATR=280 CAP_RL=100 CAP_LATR_TINY=40 CAP_BASE=180
fi
SFT_DIR="$OUT/countdown_smollm2_sft"
export STUDY_SEEDS

# ----------------------------------------------------------------------------- 1. base rows

# SmolLM2 at zero shot on the environments docs/results.md's "Base" row still lacks (Sudoku 4x4
# and Minesweeper at temperature 1; every environment but Countdown greedily), one evaluation
# process each, all at once in the background beside the warm start (the GPU has room for all;
# their wall times are therefore shared ones). Each writes base_rows/<env>_t<T>/.
BASE_PIDS=()
if ! wanted base_rows; then
    :
elif [[ $SMOL == 1 ]]; then
    mkdir -p "$OUT/base_rows"
    left=$((DEADLINE - SECONDS)); cap=$CAP_BASE; ((left < cap)) && cap=$left
    echo "== base_rows (background, limit ${cap}s each)"
    for row in sudoku4:1.0 minesweeper:1.0 frozen_lake:0.0 tictactoe:0.0 sokoban:0.0 \
               sudoku4:0.0 minesweeper:0.0; do
        env=${row%%:*} temp=${row##*:}
        name="${env}_t${temp}"
        mkdir -p "$OUT/base_rows/$name"
        (
            t0=$SECONDS
            set +e
            timeout -k 10 "$cap" "$PYTHON" -m launch.evaluate --config="configs/${env}_sft.py" \
                --checkpoint=smollm2-135m-instruct --config.env.options.style=chat \
                --config.eval.samples_per_task=1 --config.eval.temperature="$temp" \
                --config.eval.transcripts=2 --config.rollout.context_length=2048 \
                "${BASE_SIZE[@]}" --output="$OUT/base_rows/$name/eval.json" \
                > "$OUT/base_rows/$name/log.txt" 2>&1
            echo "base_rows/$name status=$? wall_s=$((SECONDS - t0))" >> "$STATUS"
        ) &
        BASE_PIDS+=($!)
        # a 2-core CPU has no room for seven 135M models at once (3-5 GB each): one at a time
        if [[ $QUICK == 1 ]]; then wait "$!" || true; fi
    done
else
    skip_stage base_rows "$SMOL_REASON"
fi

# ----------------------------------------------------------------------------- 2. warm start

# SmolLM2 on Countdown (3 numbers, reasoning before the answer): configs/countdown_smollm2.py's
# warm start on oracle demonstrations; LATR's sampling study and the RL step start from it.
if [[ $SMOL == 1 ]]; then
    run_stage sft_smollm2 "$CAP_SFT" "$OUT/sft_smollm2.log" \
        "$PYTHON" -m launch.sft --config=configs/countdown_smollm2.py --workdir="$SFT_DIR" \
        "${SMOL_SHAPE[@]}" ${SFT_SIZE[@]+"${SFT_SIZE[@]}"} --overwrite
else
    skip_stage sft_smollm2 "$SMOL_REASON"
fi

# ----------------------------------------------------------------------------- 3. LATR (SmolLM2)

if [[ $SMOL == 1 && -d "$SFT_DIR/checkpoints" ]]; then
    # one process per seed, so that the seeds done survive a stage that runs out of time (the
    # compilation cache spares the later ones most compilation); joined by --merge afterwards
    run_stage latr_smollm2 "$CAP_LATR" "$OUT/latr_sampling.log" bash -c '
        for seed in ${STUDY_SEEDS//,/ }; do
            "$0" -m launch.latr_sampling --config=configs/countdown_smollm2.py \
                --checkpoint="$1" --seeds="$seed" --output="$2/latr_sampling_seed$seed.json" \
                --methods=independent,latr,hybrid "${@:3}" || exit
        done
        "$0" -m launch.latr_sampling --merge="$(ls "$2"/latr_sampling_seed*.json | paste -sd,)" \
            --output="$2/latr_sampling.json"' \
        "$PYTHON" "$SFT_DIR" "$OUT" "${SMOL_SHAPE[@]}" "${STUDY_SIZE[@]}"
else
    skip_stage latr_smollm2 "no SmolLM2 warm start"
fi
if ((${#BASE_PIDS[@]})); then
    wait "${BASE_PIDS[@]}" || true
    echo "== base_rows done ($((SECONDS - START))s since the start)"
fi

# ----------------------------------------------------------------------------- 4. RL step

# Two GRPO steps with LATR rollouts from the warm start (the second one's time is compilation-
# free), held-out evaluation at step 0 and 2; the tiny preset when SmolLM2 is absent.
if [[ $SMOL == 1 && -d "$SFT_DIR/checkpoints" ]]; then
    RL_JOB=(--config=configs/countdown_smollm2.py --config.train.init=model
            --config.model.name="$SFT_DIR"
            "${SMOL_SHAPE[@]}" --config.train.steps=2 --config.eval.every=2)
else
    RL_JOB=(--config=configs/countdown_grpo.py --config.model.name=tiny --config.train.init=model
            --config.train.steps=1)
fi
run_stage rl_step "$CAP_RL" "$OUT/rl_step.log" \
    "$PYTHON" -m launch.train --workdir="$OUT/rl_step" "${RL_JOB[@]}" \
    ${RL_SIZE[@]+"${RL_SIZE[@]}"} --overwrite
if [[ -f "$OUT/rl_step/metrics.jsonl" ]]; then
    "$PYTHON" - "$OUT/rl_step/metrics.jsonl" << 'PYEOF' || true
import json
import sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "time/step" in m:
        print("    rl_step step {}: {}".format(m.get("step"), ", ".join(
            f"{k} {m[k]:.1f}s" for k in ("time/rollout", "time/update", "time/step") if k in m)))
PYEOF
fi
# SmolLM2's checkpoints (parameters and optimizer state, ~1.4 GB) are not worth carrying back.
if [[ "${KEEP_CHECKPOINTS:-0}" != 1 ]]; then
    for d in "$OUT/rl_step/checkpoints" "$SFT_DIR/checkpoints"; do
        [[ -d "$d" ]] && rm -rf "$d" && echo "    removed $d (KEEP_CHECKPOINTS=1 keeps it)"
    done
fi

# ----------------------------------------------------------------------------- 5. sampler

MODELS=tiny,small-25m
[[ $SMOL == 1 ]] && MODELS=$MODELS,smollm2-135m-instruct
BASELINE=--baseline
[[ "${SAMPLER_BASELINE:-1}" == 0 ]] && BASELINE=--nobaseline
run_stage sampler "$CAP_SAMPLER" "$OUT/sampler.log" \
    "$PYTHON" -m launch.benchmark sampler --models="$MODELS" --dtype=bfloat16 "$BASELINE" \
    "${SAMPLER_SIZE[@]}" --output="$OUT/sampler.json"

# ----------------------------------------------------------------------------- 6. LATR (tiny)

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
