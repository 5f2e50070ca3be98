"""Update-step throughput and memory: tokens/s, achieved FLOP/s against this machine's matmul
ceiling, and the step's temporary memory under each training-memory mode.

For each model (a preset at random init, or any policy `load_policy` reads, e.g.
smollm2-135m-instruct), micro-batch size and memory mode (`none`, `remat`, `chunk:N`,
`remat+chunk:N`: `jaxtree.models.token_scores`), one jitted update step (`jaxtree.train.update`: forward,
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
"""

from __future__ import annotations

import jax
import numpy as np

from jaxtree import losses, models
from jaxtree.models.token_scores import TrainingMemory
from jaxtree.parallel.mesh import make_mesh
from jaxtree.policy import load_policy
from jaxtree.losses import LossConfig
from jaxtree.train.update import Updater, make_optimizer, make_schedule
from jaxtree.utils import print_table
from launch.benchmarks.common import machine_info, matmul_flops, median_seconds, write_json


def _batch(config, rows: int, seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, min(config.vocab_size, 256), (rows, seq_len)).astype(np.int32)
    mask = np.zeros((rows, seq_len), bool)
    mask[:, seq_len // 2:] = True
    old = np.where(mask, -rng.uniform(0.1, 3.0, (rows, seq_len)), 0).astype(np.float32)
    batch = {"tokens": tokens, "action_mask": mask, "old_logprobs": old,
             "advantages": np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32),
             "ref_logprobs": old}
    batch["weights"] = np.asarray(losses.aggregation_weights(mask, "seq-mean-token-mean"))
    return batch


def parse_memory_mode(mode: str) -> TrainingMemory:
    """'none', 'remat', 'chunk:N' or 'remat+chunk:N' -> TrainingMemory (ValueError otherwise)."""
    remat, chunk = False, 0
    for part in mode.split("+"):
        if part == "remat":
            remat = True
        elif part.startswith("chunk:") and part[6:].isdigit() and int(part[6:]) > 0:
            chunk = int(part[6:])
        elif part != "none":
            raise ValueError(f"memory mode {mode!r}: expected none, remat, chunk:N or "
                             "remat+chunk:N")
    return TrainingMemory(remat=remat, logits_chunk=chunk)


def _updater(config, params, micro: int, memory: TrainingMemory) -> Updater:
    return Updater(config, make_optimizer(make_schedule(1e-4)), LossConfig(kl_coef=0.01), micro,
                   make_mesh(), params, memory)


def _step_flops(config, params, batch, rows: int) -> float:
    updater = _updater(config, params, rows, TrainingMemory())
    state = jax.eval_shape(updater.init_state, params)
    placed = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in batch.items()}
    return float(updater._step.lower(state, placed).compile().cost_analysis()["flops"])


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
                placed = {k: jax.device_put(v, updater.batch_sharding) for k, v in batch.items()}
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
