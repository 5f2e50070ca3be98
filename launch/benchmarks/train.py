"""Update-step throughput and memory: tokens/s, achieved FLOP/s against this machine's matmul
ceiling, and the step's temporary memory under each training-memory mode.

For each model (a preset at random init, or any policy `load_policy` reads, e.g.
smollm2-135m-instruct), micro-batch size and memory mode (`none`, `remat`, `remat:attention`,
`chunk:N`, `remat+chunk:N`: `jaxtree.models.token_scores`), one jitted update step (`jaxtree.train.update`: forward,
backward, clipped surrogate with a KL term, accumulation under `lax.scan`, AdamW) on a minibatch of
`rows` random sequences of `seq_len` tokens, half of each row marked as action tokens. Timed as the
median of `repeats` calls after a compiling warm-up.

FLOPs per step are XLA's own count (`cost_analysis`) for the same step compiled with one
micro-batch holding all rows (XLA counts a loop body once, not once per iteration, so the
accumulating step itself would under-report by its number of micro-batches); attention, the
vocabulary projection and the optimizer are included. The ceiling is a large float32 matmul timed
in the same run (`common.matmul_flops`), the best this machine does on the op the step is made of.
Memory is XLA's own accounting of the compiled step (`memory_analysis`): the temporaries live
at its peak beside the arguments (parameters, optimizer state, batch); the first mode listed is
the baseline of the ratios.

`run_lengths` (`python -m launch.benchmark update_lengths`) times the update on a minibatch of
mixed lengths, fused against micro-batches grouped by length (`jaxtree.train.update`).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxtree import losses, models
from jaxtree.models.token_scores import TrainingMemory
from jaxtree.parallel.mesh import make_mesh
from jaxtree.policy import load_policy
from jaxtree.losses import LossConfig
from jaxtree.train.update import Updater, make_optimizer, make_schedule
from jaxtree.utils import print_table
from launch.benchmarks.common import (interleaved_median_seconds, machine_info, matmul_flops,
                                      median_seconds, write_json)


def _batch(config, rows: int, seq_len: int, seed: int = 0) -> losses.Minibatch:
    """A random minibatch: the second half of every row is its action."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, min(config.vocab_size, 256), (rows, seq_len)).astype(np.int32)
    mask = np.zeros((rows, seq_len), bool)
    mask[:, seq_len // 2:] = True
    old = np.where(mask, -rng.uniform(0.1, 3.0, (rows, seq_len)), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32)
    return losses.minibatch(tokens, mask, old, advantages, old, LossConfig(), 0.0)


def parse_memory_mode(mode: str) -> TrainingMemory:
    """'none', 'remat', 'remat:attention', 'chunk:N' or 'remat[:attention]+chunk:N' ->
    TrainingMemory (ValueError otherwise)."""
    remat, policy, chunk = False, "everything", 0
    for part in mode.split("+"):
        if part in ("remat", "remat:attention"):
            remat, policy = True, part[6:] or "everything"
        elif part.startswith("chunk:") and part[6:].isdigit() and int(part[6:]) > 0:
            chunk = int(part[6:])
        elif part != "none":
            raise ValueError(f"memory mode {mode!r}: expected none, remat, remat:attention, "
                             "chunk:N or remat[:attention]+chunk:N")
    return TrainingMemory(remat=remat, remat_policy=policy, logits_chunk=chunk)


def _updater(config, params, micro: int, memory: TrainingMemory, kl: bool = True,
             lora_rank: int = 0) -> Updater:
    """The benchmarks' update step: AdamW, GRPO's loss with the KL term (`kl`), micro-batches of
    `micro` rows, full fine-tuning or LoRA adapters of `lora_rank` on every projection."""
    from jaxtree.models.lora import LoraConfig  # noqa: PLC0415

    return Updater(config, make_optimizer(make_schedule(1e-4)),
                   LossConfig(kl_coef=0.01 if kl else 0.0), micro, make_mesh(), params, memory,
                   lora=LoraConfig(rank=lora_rank) if lora_rank else None)


def _flops(updater: Updater, params, batch) -> float:
    """XLA's FLOP count of `updater`'s step on `batch` (compiled from shapes, not run)."""
    state = jax.eval_shape(updater.init_state, params)
    placed = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype),
                          updater.loss_input(batch))
    return float(updater._step.lower(state, placed).compile().cost_analysis()["flops"])


def _step_flops(config, params, batch, rows: int, kl: bool = True, lora_rank: int = 0,
                action_only: bool = True) -> float:
    """The FLOPs of one update step (forward, backward, AdamW) of the whole minibatch in one
    micro-batch without remat or chunking (XLA counts a loop body once, so neither the
    micro-batch scan nor remat's scan over the blocks may hide work): what the step must
    compute, the floor under its time whatever the machine."""
    return _flops(_updater(config, params, rows, TrainingMemory(action_only=action_only), kl,
                           lora_rank), params, batch)


def run(model_names, rows: int, seq_len: int, micro_batches, repeats: int, output: str,
        memory_modes=("none",), with_flops: bool = True, ceiling_size: int = 2048) -> None:
    modes = {mode: parse_memory_mode(mode) for mode in memory_modes}
    ceiling = matmul_flops(ceiling_size)
    results, table = [], []
    for name in model_names:
        policy = load_policy(name)
        config, params = policy.config, policy.params
        batch = _batch(config, rows, seq_len)
        flops = _step_flops(config, params, batch, rows) if with_flops else float("nan")
        for micro in micro_batches:
            base = None
            for mode, memory in modes.items():
                updater = _updater(config, params, micro, memory)
                state = [updater.init_state(params)]
                placed = jax.device_put(updater.loss_input(batch), updater.batch_sharding)
                compiled = updater._step.lower(state[0], placed).compile()
                temp = int(compiled.memory_analysis().temp_size_in_bytes)

                def step():
                    state[0], metrics = compiled(state[0], placed)
                    jax.block_until_ready(metrics)

                seconds, times = median_seconds(step, repeats)
                base = base or (seconds, temp)
                tokens_per_s = rows * seq_len / seconds
                achieved = flops / seconds
                results.append({"model": name, "params": models.num_params(params),
                                "rows": rows, "seq_len": seq_len, "micro_batch_size": micro,
                                "memory_mode": mode, "temp_bytes": temp,
                                "seconds": seconds, "times": times, "flops_per_step": flops,
                                "tokens_per_s": tokens_per_s, "flops_per_s": achieved,
                                "fraction_of_matmul_ceiling": achieved / ceiling})
                table.append([name, micro, mode, f"{temp / 2**20:,.0f}",
                              f"{temp / base[1]:.2f}", f"{seconds:.2f}",
                              f"{seconds / base[0]:.2f}", f"{tokens_per_s:,.0f}",
                              f"{flops / 1e9:.1f}", f"{achieved / 1e9:.1f}",
                              f"{100 * achieved / ceiling:.0f}%"])
                print(f"  {name} micro-batch {micro} {mode}: done", flush=True)
    print(f"\nupdate step: {rows} rows x {seq_len} tokens, median of {repeats}; matmul ceiling "
          f"{ceiling / 1e9:.0f} GFLOP/s; ratios against the first mode ({memory_modes[0]})")
    print_table(["model", "micro-batch", "memory mode", "temp MiB", "temp ratio", "seconds",
                 "time ratio", "tokens/s", "GFLOP/step", "GFLOP/s", "of matmul ceiling"], table)
    write_json(output, {"benchmark": "train", "machine": machine_info(),
                        "matmul_ceiling_flops_per_s": ceiling, "results": results})


def lengths_batch(config, rows: int, long_rows: int, seq_len: int, short_len: int,
                  seed: int = 0) -> losses.Minibatch:
    """A minibatch of `rows` random sequences `seq_len` wide in which the first `long_rows` rows
    have action tokens up to the end and the others only up to `short_len` (one multi-turn episode
    among one-turn ones: the whole minibatch is as wide as its longest row)."""
    batch = _batch(config, rows, seq_len, seed)
    mask = np.zeros((rows, seq_len), bool)
    mask[:long_rows, seq_len // 2:] = True
    mask[long_rows:, short_len // 2:short_len] = True
    masked = lambda x: np.where(mask, x, 0).astype(np.float32)  # noqa: E731
    return losses.minibatch(batch.tokens, mask, masked(batch.old_logprobs),
                            masked(batch.advantages), masked(batch.ref_logprobs), LossConfig(),
                            0.0)


def run_lengths(model_names, rows: int, long_rows: int, seq_len: int, short_len: int,
                micro_batches, repeats: int, output: str, width_multiple: int = 64) -> None:
    """The update step on a minibatch of mixed lengths (`lengths_batch`): fused (every
    micro-batch padded to the longest row) against micro-batches grouped by length
    (`Updater.step(..., by_length=True)`, the trainer's default), plus the reference log-probs
    both ways; timed in turn (median of `repeats` after a compiling warm-up), from the same
    state, with the parameters' largest difference as a check that both compute one update."""
    from jaxtree.train.update import length_groups, needed_widths  # noqa: PLC0415

    results, table = [], []
    for name in model_names:
        policy = load_policy(name)
        config, params = policy.config, policy.params
        batch = lengths_batch(config, rows, long_rows, seq_len, short_len)
        widths = needed_widths(batch.action_mask, batch.weights)
        for micro in micro_batches:
            updater = Updater(config, make_optimizer(make_schedule(1e-4)),
                              LossConfig(kl_coef=0.01), micro, make_mesh(), params,
                              width_multiple=width_multiple)
            placed = updater.place_params(params)
            start = updater.init_state(params)
            states = {}

            def step(by_length):
                # a fresh copy of the same start each call (the step donates its state)
                state, metrics = updater.step(jax.tree_util.tree_map(jax.numpy.copy, start),
                                              batch, by_length)
                jax.block_until_ready(metrics)
                states[by_length] = state

            timed = interleaved_median_seconds({
                "fused": lambda: step(False), "by length": lambda: step(True),
                "reference fused": lambda: jax.block_until_ready(
                    updater.logprobs(placed, batch.tokens)),
                "reference by length": lambda: jax.block_until_ready(
                    updater.logprobs(placed, batch.tokens, widths))}, repeats)
            diff = max(float(np.abs(np.asarray(a) - np.asarray(b)).max()) for a, b in zip(
                jax.tree_util.tree_leaves(states[False].params),
                jax.tree_util.tree_leaves(states[True].params)))
            computed = sum(width for _, width in length_groups(widths, micro, width_multiple))
            padded = rows // micro * seq_len
            fused, grouped = timed["fused"][0], timed["by length"][0]
            ref_fused, ref_grouped = timed["reference fused"][0], timed["reference by length"][0]
            results.append({"model": name, "rows": rows, "long_rows": long_rows,
                            "seq_len": seq_len, "short_len": short_len,
                            "micro_batch_size": micro, "fused_seconds": fused,
                            "by_length_seconds": grouped, "reference_fused_seconds": ref_fused,
                            "reference_by_length_seconds": ref_grouped,
                            "columns_fused": padded * micro, "columns_by_length": computed * micro,
                            "max_param_difference": diff,
                            "times": {k: v[1] for k, v in timed.items()}})
            table.append([name, micro, f"{fused:.2f}", f"{grouped:.2f}",
                          f"{fused / grouped:.2f}", f"{ref_fused:.2f}", f"{ref_grouped:.2f}",
                          f"{ref_fused / ref_grouped:.2f}", f"{padded / computed:.2f}",
                          f"{diff:.1e}"])
            print(f"  {name} micro-batch {micro}: done", flush=True)
    print(f"\nupdate step on {rows} rows, {long_rows} of them {seq_len} tokens wide, the others "
          f"{short_len}; median of {repeats}; speed-ups are fused / by length")
    print_table(["model", "micro-batch", "fused s", "by length s", "speed-up",
                 "reference fused s", "reference by length s", "speed-up",
                 "columns fused / by length", "max param diff"], table)
    write_json(output, {"benchmark": "update_lengths", "machine": machine_info(),
                        "results": results})


# ----------------------------------------------------------------------------- LoRA, action-only

# Batch shapes of `run_lora`: (prompt, observation, action tokens per turn, turns). Each row is a
# chat prompt, then turns of an observation and an action; only the actions have a loss.
SHAPES = {
    # configs/frozen_lake_smollm2.py: a ~250-token chat prompt, ~150-token board observations,
    # actions of at most 48 tokens (~30 used), 6 turns: 1,330 positions, 14% of them actions
    "frozen_lake_chat": (250, 150, 30, 6),
    # configs/mini_swe_smollm2.py: a ~385-token prompt, tool output up to 800 characters
    # (~200 tokens), edits of at most 128 tokens (~90 used), 4 turns: 1,545 positions, 23%
    "mini_swe": (385, 200, 90, 4),
    # a smoke-test shape for the tiny models (tests)
    "toy": (10, 6, 4, 2),
}


def shaped_batch(config, rows: int, shape: str, seed: int = 0) -> losses.Minibatch:
    """A random minibatch of `rows` rows laid out as SHAPES[shape] says (every row alike)."""
    prompt, observation, action, turns = SHAPES[shape]
    seq_len = prompt + turns * (observation + action)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, min(config.vocab_size, 32000), (rows, seq_len)).astype(np.int32)
    mask = np.zeros((rows, seq_len), bool)
    for turn in range(turns):
        start = prompt + turn * (observation + action) + observation
        mask[:, start:start + action] = True
    old = np.where(mask, -rng.uniform(0.1, 3.0, (rows, seq_len)), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32)
    return losses.minibatch(tokens, mask, old, advantages, old, LossConfig(), 0.0)


def lora_case(name: str, shape: str, rows: int, micro: int, rank: int, kl: bool,
              action_only: bool, memory_mode: str, repeats: int, flops: bool = True) -> dict:
    """One configuration of `run_lora` in this process: the update step (fused, AdamW) of
    full fine-tuning (rank 0) or LoRA adapters of `rank` on every projection, with the KL term
    and its reference forward (the base, or a copy of the whole model) or without either; with
    `flops`, also the step's FLOP count (`_step_flops`, NaN without)."""
    import resource  # noqa: PLC0415

    from jaxtree.parallel import distributed  # noqa: PLC0415

    policy = load_policy(name, param_dtype="float32")
    config, params = policy.config, policy.params
    batch = shaped_batch(config, rows, shape)
    memory = dataclasses.replace(parse_memory_mode(memory_mode), action_only=action_only)
    updater = _updater(config, params, micro, memory, kl, rank)
    state = [updater.init_state(params)]
    trainable = models.num_params(state[0].params)
    placed = distributed.put(updater.loss_input(batch), updater.batch_sharding)
    compiled = updater._step.lower(state[0], placed).compile()
    temp = int(compiled.memory_analysis().temp_size_in_bytes)
    if not flops:
        step_flops = float("nan")
    elif micro == rows and memory == TrainingMemory(action_only=action_only):
        step_flops = float(compiled.cost_analysis()["flops"])  # already the counted program
    else:
        step_flops = _step_flops(config, params, batch, rows, kl, rank, action_only)

    def step():
        state[0], metrics = updater._step(state[0], placed)
        jax.block_until_ready(metrics)

    timed = {"update": step}
    if kl:
        reference = updater.reference_params(params)  # LoRA: the base itself; else a copy
        timed["reference"] = lambda: jax.block_until_ready(
            updater.logprobs(reference, batch.tokens))
    timed = interleaved_median_seconds(timed, repeats)
    update = timed["update"][0]
    reference_s = timed["reference"][0] if kl else 0.0
    tokens = rows * batch.tokens.shape[1]
    return {"model": name, "shape": shape, "rows": rows, "seq_len": int(batch.tokens.shape[1]),
            "action_fraction": float(np.asarray(batch.action_mask).mean()),
            "micro_batch_size": micro, "lora_rank": rank, "kl": kl, "action_logits": action_only,
            "memory_mode": memory_mode, "trainable_params": trainable,
            "params": models.num_params(params), "update_seconds": update,
            "reference_seconds": reference_s, "step_seconds": update + reference_s,
            "tokens_per_s": tokens / (update + reference_s), "temp_bytes": temp,
            "update_flops": step_flops,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "times": {k: v[1] for k, v in timed.items()}}


class CaseFailed(RuntimeError):
    """A benchmark case's process ended without a result; `how` says how (signal, status)."""

    def __init__(self, how: str, message: str):
        super().__init__(message)
        self.how = how


def _isolated_case(kwargs: dict) -> dict:
    """`lora_case(**kwargs)` in a process of its own, so that its peak RSS is its own."""
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import json, sys; from launch.benchmarks.train import lora_case; "
            "print('RESULT ' + json.dumps(lora_case(**json.loads(sys.stdin.read()))))")
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(kwargs),
                          capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        how = ("killed by SIGKILL (most likely the out-of-memory killer)"
               if proc.returncode == -9 else f"killed by signal {-proc.returncode}"
               if proc.returncode < 0 else f"exit status {proc.returncode}")
        raise CaseFailed(how, f"benchmark case {kwargs} failed ({how}): {proc.stderr[-2000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_lora(model_names, shapes, ranks, kls, action_modes, rows: int, micro: int,
             memory_mode: str, repeats: int, output: str, isolate: bool = True,
             with_flops: bool = True) -> None:
    """Full fine-tuning (rank 0) against LoRA ranks, with and without the KL term (and its
    reference forward), with the vocabulary projection at every position or at the action
    tokens only, on chat-shaped batches (SHAPES): update-step time, the reference forward's,
    tokens/s, XLA's temporaries of the step and the peak RSS (each case in a process of its own
    with `isolate`; else the peak so far of this process), and with `with_flops` the update
    step's FLOP count without remat (`_step_flops`): its ratio is the time ratio a machine
    that ran every FLOP at one rate would reach. Ratios are against the first case of the same
    shape and KL setting (full fine-tuning with every position's logits, as the flags order
    them by default)."""
    results, table = [], []
    for name in model_names:
        for shape in shapes:
            for kl in kls:
                base = None
                for action_only in action_modes:
                    for rank in ranks:
                        kwargs = dict(name=name, shape=shape, rows=rows, micro=micro, rank=rank,
                                      kl=kl, action_only=action_only, memory_mode=memory_mode,
                                      repeats=repeats, flops=with_flops)
                        try:
                            r = _isolated_case(kwargs) if isolate else lora_case(**kwargs)
                        except CaseFailed as failure:  # e.g. out of memory: the others still run
                            results.append({**kwargs, "failed": str(failure)})
                            table.append([name, shape, "on" if kl else "off",
                                          "on" if action_only else "off", rank or "full",
                                          f"failed: {failure.how}", *[""] * 10])
                            print(f"  {name} {shape} kl={kl} action_only={action_only} "
                                  f"rank={rank}: {failure.how}", flush=True)
                            continue
                        results.append(r)
                        base = base or r
                        table.append([
                            name, shape, "on" if kl else "off",
                            "on" if action_only else "off", rank or "full",
                            f"{r['trainable_params']:,}", f"{r['update_seconds']:.2f}",
                            f"{r['reference_seconds']:.2f}",
                            f"{r['step_seconds'] / base['step_seconds']:.2f}",
                            f"{r['update_seconds'] / base['update_seconds']:.2f}",
                            f"{r['update_flops'] / 1e9:,.1f}",
                            f"{r['update_flops'] / base['update_flops']:.2f}",
                            f"{r['tokens_per_s']:,.0f}", f"{r['temp_bytes'] / 2**20:,.0f}",
                            f"{r['peak_rss_bytes'] / 2**20:,.0f}",
                            f"{r['peak_rss_bytes'] / base['peak_rss_bytes']:.2f}"])
                        print(f"  {name} {shape} kl={kl} action_only={action_only} "
                              f"rank={rank}: done", flush=True)
    print(f"\nupdate step (fused, AdamW): {rows} rows per minibatch, micro-batches of {micro}, "
          f"memory mode {memory_mode}, median of {repeats}; ratios against the first case of "
          "each shape and KL setting" + ("" if isolate else " (RSS: this process's peak so far)"))
    print_table(["model", "shape", "KL + ref", "action logits", "LoRA rank", "trainable",
                 "update s", "reference s", "time ratio", "update ratio", "update GFLOP",
                 "FLOP ratio", "tokens/s", "temp MiB", "peak RSS MiB", "RSS ratio"], table)
    write_json(output, {"benchmark": "train_lora", "machine": machine_info(),
                        "results": results})
