"""Benchmarks: `python -m launch.benchmark <name> [--flags]`.

    python -m launch.benchmark sampler                      # the full table (several minutes)
    python -m launch.benchmark sampler --models=tiny --batches=1,16 --repeats=3
    python -m launch.benchmark envs --episodes=50
    python -m launch.benchmark rollout --slots=64,256 --rollout_episodes=512
    python -m launch.benchmark train --models=tiny,small-25m --micro_batches=8,32
    python -m launch.benchmark train --models=smollm2-135m-instruct --train_rows=1 \
        --seq_len=1024 --micro_batches=1 --memory_modes=none,remat,chunk:256,remat+chunk:256
    python -m launch.benchmark train --models=smollm2-135m-instruct --lora=0,8,16,64 \
        --train_rows=4 --micro_batches=2 --memory_modes=remat+chunk:256 --repeats=2
    python -m launch.benchmark update_lengths --models=tiny --train_rows=64 --long_rows=1 \
        --seq_len=1024 --short_len=256 --micro_batches=8
    python -m launch.benchmark latr --lengths=128,256 --prompts=8,32
    python -m launch.benchmark credit --rows=4096 --turns=16
    python -m launch.benchmark mc_values --policy=/tmp/tictactoe_sft --env=tictactoe --continuations=4
    python -m launch.benchmark trees --policy=/tmp/fl_sft --env=frozen_lake
    python -m launch.benchmark prefix_update --batch_files=/tmp/fl_run/batches/step_1.npz
    python -m launch.benchmark prefix_update --synthetic=configs/frozen_lake_grpo.py

Each benchmark prints a Markdown table comparing against a baseline measured in the same run and
writes the raw numbers (every repeat, machine description) as JSON.
"""

from __future__ import annotations

import json

from absl import flags

from launch.common import fail, run_app

_BENCHMARKS = ("sampler", "envs", "rollout", "train", "update_lengths", "latr", "credit",
               "mc_values", "trees", "prefix_update")

_MODELS = flags.DEFINE_list("models", ["tiny", "small-25m"],
                            "Model presets (random init) or policies to benchmark, e.g. "
                            "smollm2-135m-instruct.")
_BATCHES = flags.DEFINE_list("batches", ["1", "16", "64", "256"], "Batch sizes.")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 128, "Tokens generated per row.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 16, "Prompt tokens per row.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repeats after one warm-up call (median).")
_FLOOR_BATCH = flags.DEFINE_integer("floor_batch", 64,
                                    "Batch size compared with the memory-bandwidth floor.")
_DTYPE = flags.DEFINE_enum("dtype", "", ["", "float32", "bfloat16"],
                           "sampler: computation dtype ('' = float32 on CPU, bfloat16 on "
                           "accelerators).")
_BASELINE = flags.DEFINE_boolean("baseline", True, "Also time the transformers baseline.")
_EPISODES = flags.DEFINE_integer("episodes", 50, "envs: oracle-played episodes timed per environment.")
_POLICY_SEEDS = flags.DEFINE_integer("policy_seeds", 200,
                                     "envs: seeds for the oracle and random success rates.")
_SLOTS = flags.DEFINE_list("slots", ["64", "256"], "rollout: slot counts.")
_ROLLOUT_EPISODES = flags.DEFINE_integer("rollout_episodes", 512, "rollout: episodes per run.")
_ENV = flags.DEFINE_string("env", "frozen_lake", "rollout: environment.")
_ACTION_TOKENS = flags.DEFINE_integer("action_tokens", 8, "rollout: tokens per action.")
_LABEL_SETS = flags.DEFINE_list("labels", ["read"], "rollout: per-turn labels recorded, 'read' "
                                "(none: a GRPO experiment's) and/or 'every' (the six every turn "
                                "recorded before labels were declared).")
_ENV_OPTIONS = flags.DEFINE_string("env_options", '{"style": "compact"}',
                                   "mc_values, trees: the environment's options (JSON object).")
_TRAIN_ROWS = flags.DEFINE_integer("train_rows", 64, "train: sequences per minibatch.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 384, "train: tokens per sequence.")
_MICRO_BATCHES = flags.DEFINE_list("micro_batches", ["8", "32"], "train: micro-batch sizes.")
_MEMORY_MODES = flags.DEFINE_list("memory_modes", ["none"],
                                  "train: training-memory modes (none, remat, "
                                  "remat:attention, chunk:N, remat[:attention]+chunk:N); the "
                                  "first is the baseline.")
_FLOPS = flags.DEFINE_boolean("flops", True, "train: also count the step's FLOPs (one more "
                              "compilation, of the whole minibatch in one micro-batch).")
_LORA = flags.DEFINE_list("lora", [], "train: LoRA ranks to compare (0 = full fine-tuning), "
                          "e.g. 0,8,16,64: the update step on chat-shaped batches (--shapes) "
                          "with and without the KL term (--kl) and action-only logits "
                          "(--action_logits), under the first of --memory_modes; empty: the "
                          "memory-mode benchmark.")
_SHAPES = flags.DEFINE_list("shapes", ["frozen_lake_chat", "mini_swe"],
                            "train --lora: batch shapes (prompt, observation and action "
                            "tokens per turn): frozen_lake_chat, mini_swe, toy.")
_KL = flags.DEFINE_list("kl", ["off", "on"], "train --lora: without / with the KL term and its "
                        "reference forward.")
_ACTION_LOGITS = flags.DEFINE_list("action_logits", ["off", "on"], "train --lora: vocabulary "
                                   "projection at every position / at action tokens only.")
_ISOLATE = flags.DEFINE_boolean("isolate", True, "train --lora: each case in a process of its "
                                "own (its own peak RSS).")
_LONG_ROWS = flags.DEFINE_integer("long_rows", 1, "update_lengths: rows --seq_len wide; the "
                                  "others are --short_len wide.")
_SHORT_LEN = flags.DEFINE_integer("short_len", 256, "update_lengths: tokens of the short rows.")
_LENGTHS = flags.DEFINE_list("lengths", ["128", "256"], "latr: tokens per rollout.")
_PROMPTS = flags.DEFINE_list("prompts", ["8", "32"], "latr: prompt groups.")
_K = flags.DEFINE_integer("k", 8, "latr: rollouts per prompt.")
_PYTHON_ANCHOR = flags.DEFINE_boolean("python_anchor", True,
                                      "latr: also time the per-row Python bookkeeping variant.")
_ROWS = flags.DEFINE_integer("rows", 4096, "credit: trajectories in the batch.")
_TURNS = flags.DEFINE_integer("turns", 16, "credit: turns per trajectory (the longest).")
_GROUP_SIZE = flags.DEFINE_integer("group_size", 8, "credit: rollouts per group.")
_CREDIT_SEQ_LEN = flags.DEFINE_integer("credit_seq_len", 128,
                                       "credit: tokens per row of the update step compared with.")
_CREDIT_MICRO_BATCH = flags.DEFINE_integer("credit_micro_batch", 256,
                                           "credit: micro-batch of the update step.")
_POLICY = flags.DEFINE_string("policy", "tiny", "rollout, mc_values, trees: a preset name (random "
                              "init) or a checkpoint.")
_CONTINUATIONS = flags.DEFINE_list("continuations", ["4"], "mc_values: values of m to time.")
_GROUPS = flags.DEFINE_integer("groups", 8, "mc_values: tasks per step.")
_MC_CONTEXT = flags.DEFINE_integer("mc_context_length", 384, "mc_values: tokens per slot.")
_TREE_SLOTS = flags.DEFINE_integer("tree_slots", 256, "trees: engine slots.")
_TREE_CONTEXT = flags.DEFINE_integer("tree_context_length", 512, "trees: tokens per slot.")
_TREE_TURNS = flags.DEFINE_integer("tree_max_turns", 10, "trees: turns per episode (PATR: 10).")
_TREE_INTERVAL = flags.DEFINE_integer("tree_interval", 5, "trees: PATR's K (FrozenLake: 5).")
_SAVED_BATCHES = flags.DEFINE_list("batch_files", [], "prefix_update: batches the trainer "
                                   "saved (train.save_batches: <workdir>/batches/step_<n>.npz).")
_SYNTHETIC = flags.DEFINE_string("synthetic", None, "prefix_update: instead of saved batches, "
                                 "random groups sharing a prompt on this config file's model "
                                 "(the break-even of train.prefix_sharing='auto').")
_OVERRIDES = flags.DEFINE_string("overrides", "{}", "prefix_update: JSON of dotted config "
                                 "fields -> values, set on the saved batches' configs or the "
                                 "--synthetic config (e.g. '{\"model.cpu_library_fusions\": false}').")
_PROMPT_SHARES = flags.DEFINE_list("prompt_shares", ["0", "0.25", "0.5", "0.75", "0.9"],
                                   "prefix_update --synthetic: shares of each row that are "
                                   "its group's prompt.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path (default "
                              "benchmark_results/<name>.json).")


def _env_options() -> dict:
    """--env_options parsed, or a one-line failure naming the flag."""
    try:
        options = json.loads(_ENV_OPTIONS.value)
    except json.JSONDecodeError as e:
        fail(f"--env_options: not JSON ({e})")
    if not isinstance(options, dict):
        fail(f"--env_options: expected a JSON object, got {_ENV_OPTIONS.value!r}")
    return options


def main(argv):
    if len(argv) != 2 or argv[1] not in _BENCHMARKS:
        fail(f"usage: python -m launch.benchmark {{{'|'.join(_BENCHMARKS)}}} [--flags]")
    name = argv[1]
    output = _OUTPUT.value or f"benchmark_results/{name}.json"
    if name == "sampler":
        from launch.benchmarks import sampler  # noqa: PLC0415

        sampler.run([m for m in _MODELS.value], [int(b) for b in _BATCHES.value],
                    _NEW_TOKENS.value, _PROMPT_LEN.value, _REPEATS.value, _FLOOR_BATCH.value,
                    output, with_hf=_BASELINE.value, dtype=_DTYPE.value or None)
    elif name == "envs":
        from launch.benchmarks import envs  # noqa: PLC0415

        envs.run(_EPISODES.value, _POLICY_SEEDS.value, output)
    elif name == "rollout":
        from launch.benchmarks import rollout  # noqa: PLC0415

        unknown = [name for name in _LABEL_SETS.value if name not in rollout.LABEL_SETS]
        if unknown:
            fail(f"--labels: {unknown[0]!r} is not one of {tuple(rollout.LABEL_SETS)}")
        rollout.run([int(s) for s in _SLOTS.value], _ROLLOUT_EPISODES.value, _ENV.value,
                    _ACTION_TOKENS.value, output, _LABEL_SETS.value, _REPEATS.value,
                    _POLICY.value)
    elif name == "train":
        from launch.benchmarks import train  # noqa: PLC0415

        try:  # every mode checked before any model loads
            for mode in _MEMORY_MODES.value:
                train.parse_memory_mode(mode)
        except ValueError as e:
            fail(f"--memory_modes: {e}")
        if _LORA.value:
            _train_lora(train, output)
            return
        train.run(list(_MODELS.value), _TRAIN_ROWS.value, _SEQ_LEN.value,
                  [int(m) for m in _MICRO_BATCHES.value], _REPEATS.value, output,
                  memory_modes=tuple(_MEMORY_MODES.value), with_flops=_FLOPS.value)
    elif name == "update_lengths":
        from launch.benchmarks import train  # noqa: PLC0415

        if not 0 <= _LONG_ROWS.value <= _TRAIN_ROWS.value:
            fail(f"--long_rows={_LONG_ROWS.value}: expected 0..--train_rows={_TRAIN_ROWS.value}")
        if not 2 <= _SHORT_LEN.value <= _SEQ_LEN.value:
            fail(f"--short_len={_SHORT_LEN.value}: expected 2..--seq_len={_SEQ_LEN.value}")
        train.run_lengths(list(_MODELS.value), _TRAIN_ROWS.value, _LONG_ROWS.value,
                          _SEQ_LEN.value, _SHORT_LEN.value,
                          [int(m) for m in _MICRO_BATCHES.value], _REPEATS.value, output)
    elif name == "latr":
        from launch.benchmarks import latr  # noqa: PLC0415

        latr.run([int(n) for n in _LENGTHS.value], [int(p) for p in _PROMPTS.value], _K.value,
                 _REPEATS.value, output, with_python=_PYTHON_ANCHOR.value)
    elif name == "credit":
        from launch.benchmarks import credit  # noqa: PLC0415

        credit.run(_ROWS.value, _TURNS.value, _GROUP_SIZE.value, _CREDIT_SEQ_LEN.value,
                   _CREDIT_MICRO_BATCH.value, _REPEATS.value, output)
    elif name == "mc_values":
        from launch.benchmarks import mc_values  # noqa: PLC0415

        mc_values.run(_POLICY.value, _ENV.value, _env_options(),
                      [int(m) for m in _CONTINUATIONS.value], _GROUPS.value, _GROUP_SIZE.value,
                      _MC_CONTEXT.value, _ACTION_TOKENS.value, _REPEATS.value, output)
    elif name == "trees":
        from launch.benchmarks import trees  # noqa: PLC0415

        trees.run(_POLICY.value, _ENV.value, _env_options(), _GROUPS.value,
                  _GROUP_SIZE.value, _TREE_SLOTS.value, _TREE_CONTEXT.value, _ACTION_TOKENS.value,
                  _TREE_TURNS.value, _TREE_INTERVAL.value, _REPEATS.value, output)

    elif name == "prefix_update":
        _prefix_update(output)


def _on_off(flag) -> list[bool]:
    values = [v.strip().lower() for v in flag.value]
    if not values or any(v not in ("on", "off") for v in values):
        fail(f"--{flag.name}: expected a list of on, off; got {','.join(flag.value)!r}")
    return [v == "on" for v in values]


def _train_lora(train, output: str) -> None:
    try:
        ranks = [int(r) for r in _LORA.value]
        mode = _MEMORY_MODES.value[0] if _MEMORY_MODES.value else "none"
        train.parse_memory_mode(mode)
        micro = int(_MICRO_BATCHES.value[0])
    except ValueError as e:
        fail(f"--lora / --memory_modes / --micro_batches: {e}")
    if any(r < 0 for r in ranks):
        fail(f"--lora: ranks are >= 0 (0 = full fine-tuning), got {ranks}")
    unknown = [s for s in _SHAPES.value if s not in train.SHAPES]
    if unknown or not _SHAPES.value:
        fail(f"--shapes: {unknown[0] if unknown else ''!r} is not one of {tuple(train.SHAPES)}")
    if micro <= 0 or _TRAIN_ROWS.value % micro:
        fail(f"--train_rows={_TRAIN_ROWS.value} is not a multiple of --micro_batches={micro}")
    train.run_lora(list(_MODELS.value), list(_SHAPES.value), ranks, _on_off(_KL),
                   _on_off(_ACTION_LOGITS), _TRAIN_ROWS.value, micro, mode, _REPEATS.value,
                   output, isolate=_ISOLATE.value, with_flops=_FLOPS.value)


def _prefix_update(output: str) -> None:
    import os  # noqa: PLC0415

    from jaxtree.compare.grid import import_file  # noqa: PLC0415
    from jaxtree.config import ConfigError  # noqa: PLC0415
    from launch.benchmarks import prefix_update  # noqa: PLC0415

    try:
        overrides = json.loads(_OVERRIDES.value)
    except ValueError as e:
        fail(f"--overrides: {e}")
    if not isinstance(overrides, dict):
        fail("--overrides: expected a JSON object of dotted fields -> values")

    if _SYNTHETIC.value:
        try:
            shares = [float(s) for s in _PROMPT_SHARES.value]
        except ValueError as e:
            fail(f"--prompt_shares: {e}")
        try:
            prefix_update.config_with(import_file(_SYNTHETIC.value, "_jaxtree_benchmark_config")
                                      .get_config().to_dict(), overrides)
        except ConfigError as e:
            fail(f"--overrides on {_SYNTHETIC.value}: {e}")
        if not all(0 <= s < 1 for s in shares):
            fail(f"--prompt_shares: each in [0, 1), got {shares}")
        prefix_update.run_synthetic(_SYNTHETIC.value, overrides, shares, _GROUPS.value,
                                    _GROUP_SIZE.value, _SEQ_LEN.value, _REPEATS.value, output)
        return
    if not _SAVED_BATCHES.value:
        fail("prefix_update: pass --batch_files=PATH[,PATH...] (saved by train.save_batches) or "
             "--synthetic=CONFIG_FILE")
    for path in _SAVED_BATCHES.value:
        if not os.path.isfile(path):
            fail(f"--batch_files: no file {path}")
        try:
            prefix_update.check_batch(path, overrides)
        except ConfigError as e:
            fail(f"--overrides on {path}: {e}")
        except ValueError as e:
            fail(f"--batch_files: {e}")
    prefix_update.run(_SAVED_BATCHES.value, _REPEATS.value, output, overrides)


if __name__ == "__main__":
    run_app(main, compilation_cache=False)  # they time compilation as well
