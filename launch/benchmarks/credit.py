"""Cost of the turn-level credit estimators against an update step of the same batch.

RTMC's statistics table (`jaxtree.advantages.rtmc`), GiGPO's anchor-state groups and VPR's
turn-level normalisation run once per training step on the whole batch. This benchmark times
them on a batch of `rows` trajectories x `turns` turns (groups of `group_size` rollouts whose
signatures are drawn from a few states and actions per turn, so that the table pools), split
into the host part (signature strings -> integer keys, once per batch) and the jitted device
part, and compares each with one update step of the tiny model on the same number of rows
(`seq_len` tokens each, micro-batches of `micro_batch` rows), timed in the same run. Medians of
`repeats` calls after a compiling warm-up.
"""

from __future__ import annotations

import types

import jax
import numpy as np

from jaxtree import models
from jaxtree.advantages import gigpo, rtmc, vpr
from jaxtree.losses import LossConfig
from jaxtree.parallel.mesh import make_mesh
from jaxtree.train.update import Updater, make_optimizer, make_schedule
from jaxtree.utils import print_table
from launch.benchmarks.common import machine_info, median_seconds, write_json
from launch.benchmarks.train import _batch

STATES_PER_TURN = 3
ACTIONS = 4


def synthetic_batch(rows: int, turns: int, group_size: int, seed: int = 0):
    """The fields the estimators read, as a namespace: ragged turn counts, recurring states."""
    rng = np.random.default_rng(seed)
    num_turns = rng.integers(turns // 2, turns + 1, rows).astype(np.int32)
    num_turns[0] = turns
    played = np.arange(turns)[None, :] < num_turns[:, None]
    states = np.empty((rows, turns), object)
    actions = np.empty((rows, turns), object)
    anchors = np.empty((rows, turns), object)
    for i in range(rows):
        for t in range(num_turns[i]):
            board = int(rng.integers(STATES_PER_TURN))
            states[i, t] = f"{t}|{board}"
            anchors[i, t] = f"{board}"
            actions[i, t] = str(int(rng.integers(ACTIONS)))
    labels = {"state_signature": states, "action_signature": actions, "anchor_state": anchors}
    return types.SimpleNamespace(
        group_ids=(np.arange(rows) // group_size).astype(np.int32), num_turns=num_turns,
        labels=labels, label=labels.__getitem__,
        played=played, success=rng.random(rows) < 0.5,
        turn_rewards=np.where(played, rng.choice([0.005, -0.005], (rows, turns)), 0.0)
        .astype(np.float32),
        outcome=(rng.random(rows) < 0.5).astype(np.float32))


def _update_seconds(rows: int, seq_len: int, micro_batch: int, repeats: int) -> float:
    config = models.get_preset("tiny")
    params = models.init_params(config, jax.random.key(0))
    updater = Updater(config, make_optimizer(make_schedule(1e-4)), LossConfig(kl_coef=0.001),
                      micro_batch, make_mesh(), params)
    state = [updater.init_state(params)]
    placed = jax.device_put(_batch(config, rows, seq_len), updater.batch_sharding)

    def step():
        state[0], metrics = updater._step(state[0], placed)
        jax.block_until_ready(metrics)

    return median_seconds(step, repeats)[0]


def run(rows: int, turns: int, group_size: int, seq_len: int, micro_batch: int, repeats: int,
        output: str) -> None:
    b = synthetic_batch(rows, turns, group_size)
    groups = b.group_ids
    valid = np.ones(rows, bool)
    timings = {}

    def device(fn, *args):
        def call():
            jax.block_until_ready(fn(*args))
        return median_seconds(call, repeats)[0]

    timings["rtmc host: signature_ids"] = median_seconds(lambda: rtmc.signature_ids(b),
                                                         repeats)[0]
    state_ids, action_ids = rtmc.signature_ids(b)
    timings["rtmc device: table advantages"] = device(
        rtmc._table_advantages_jit, state_ids, action_ids, b.turn_rewards, b.outcome,
        b.num_turns, groups, b.success, valid, rtmc.GAMMA, rtmc.N_PRIOR, False, True)
    timings["gigpo host: anchor_ids"] = median_seconds(lambda: gigpo.anchor_ids(b), repeats)[0]
    anchors = gigpo.anchor_ids(b)
    timings["gigpo device: advantages"] = device(
        gigpo._gigpo_jit, anchors, b.turn_rewards, b.outcome, b.num_turns, groups, valid,
        gigpo.GAMMA, gigpo.STEP_WEIGHT, True, gigpo.EPSILON)
    vpr_jit = jax.jit(vpr.vpr_turn_advantages)
    timings["vpr device: turn normalisation"] = device(vpr_jit, b.turn_rewards, b.played)
    update = _update_seconds(rows, seq_len, micro_batch, repeats)

    table, results = [], []
    for name, seconds in timings.items():
        share = seconds / update
        table.append([name, f"{1e3 * seconds:.2f}", f"{100 * share:.3f}%"])
        results.append({"part": name, "seconds": seconds, "share_of_update_step": share})
    rtmc_total = (timings["rtmc host: signature_ids"] + timings["rtmc device: table advantages"])
    table.append(["rtmc total (host + device)", f"{1e3 * rtmc_total:.2f}",
                  f"{100 * rtmc_total / update:.3f}%"])
    table.append(["baseline: tiny update step", f"{1e3 * update:.0f}", "100%"])
    print(f"\ncredit estimators: {rows} rows x {turns} turns (groups of {group_size}); update "
          f"step: {rows} rows x {seq_len} tokens, micro-batch {micro_batch}; median of {repeats}")
    print_table(["part", "ms", "of update step"], table)
    write_json(output, {"benchmark": "credit", "machine": machine_info(), "rows": rows,
                        "turns": turns, "group_size": group_size, "seq_len": seq_len,
                        "micro_batch": micro_batch, "update_step_seconds": update,
                        "rtmc_total_seconds": rtmc_total, "results": results})
