"""The update of one step's batch: reference log-probs, the sampler-agreement check and
`epochs` x `num_minibatches` optimizer steps, per trajectory or over prefix forests.

    update = BatchUpdate(updater, train_config, pad_id)
    inputs = update.inputs(tokens, action_mask, behaviour_logprobs, advantages, group_ids)
    shared = update.shares_prefixes(inputs)            # train.prefix_sharing, unique fraction
    ref = update.reference_logprobs(reference, inputs, shared)  # [B, W]; 0s if kl_coef = 0
    state, metrics = update.optimizer_steps(state, inputs, ref, shared, step)

The trainer runs it on every step's batch (`jaxtree.train.trainer`); `launch.benchmark
prefix_update` times the same calls on batches the trainer saved (`save_batch`), both ways.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxtree.parallel import distributed
from jaxtree.train.config import TrainConfig
from jaxtree.train.forest_update import ForestSteps
from jaxtree.train.prefix_forest import group_trees, unique_fraction
from jaxtree.train.update import Updater, needed_widths
from jaxtree.utils import round_up

# A recomputed action log-prob further than this from the sampler's counts as a disagreement.
LOGPROB_GAP_TOLERANCE = 1e-3


def logprob_gaps(recomputed: np.ndarray, behaviour: np.ndarray,
                 action_mask: np.ndarray) -> dict[str, float]:
    """How far the update's log-probs of the action tokens are from the sampler's under the same
    parameters: max and mean |difference| and the share of tokens over LOGPROB_GAP_TOLERANCE."""
    gap = np.abs(np.asarray(recomputed, np.float64) - behaviour)[np.asarray(action_mask, bool)]
    if not gap.size:
        return {"logprob_gap_max": 0.0, "logprob_gap_mean": 0.0, "logprob_gap_over": 0.0}
    return {"logprob_gap_max": float(gap.max()), "logprob_gap_mean": float(gap.mean()),
            "logprob_gap_over": float(np.mean(gap > LOGPROB_GAP_TOLERANCE))}


class UpdateInputs(NamedTuple):
    """A step's batch padded for the update (host arrays; B = `real` rows + empty ones, W the
    width rounded up to the updater's multiple)."""

    tokens: np.ndarray        # int32[B, W]
    action_mask: np.ndarray   # bool[B, W]
    old_logprobs: np.ndarray  # float32[B, W], the sampler's log-probs of the action tokens
    advantages: np.ndarray    # float32[B, W]
    groups: np.ndarray        # int[B], -1 for an empty row
    widths: np.ndarray        # int[B], each row up to its last action token
    real: int                 # rows of the batch
    rows: int                 # rows of every minibatch
    unique_fraction: float    # unique tokens / all tokens of the batch (prefix_forest)


class BatchUpdate:
    """The update of a step's batch with `updater` (optimizer, loss, mesh) under the `train`
    section's epochs, minibatches and prefix sharing; `pad_id` fills empty rows."""

    def __init__(self, updater: Updater, train: TrainConfig, pad_id: int):
        self.updater = updater
        self.train = train
        self.pad_id = pad_id
        self.forest = ForestSteps(updater, train.prefix_block)

    def inputs(self, tokens, action_mask, behaviour_logprobs, advantages,
               group_ids) -> UpdateInputs:
        """The batch padded: enough empty rows (no action token, so no loss) to pad any
        minibatch and give the reference pass a row count it can split, and the width rounded
        up to the updater's multiple."""
        u = self.updater
        real = len(tokens)
        chunk = -(-real // self.train.num_minibatches)  # ceil: the largest shuffled chunk
        rows = round_up(chunk, u.row_multiple)
        total = round_up(real + rows, u.row_multiple)
        width = round_up(np.shape(tokens)[1], u.width_multiple)

        def pad(x, fill):
            x = np.asarray(x)
            return np.pad(x, ((0, total - real), (0, width - x.shape[1])), constant_values=fill)
        action_mask = pad(action_mask, False)
        tokens = pad(tokens, self.pad_id)
        widths = needed_widths(action_mask)
        groups = np.pad(np.asarray(group_ids), (0, total - real), constant_values=-1)
        fraction = unique_fraction(group_trees(tokens, widths, groups, self.train.prefix_block),
                                   widths)
        return UpdateInputs(tokens, action_mask, pad(behaviour_logprobs, 0.0),
                            pad(advantages, 0.0), groups, widths, real, rows, fraction)

    def shares_prefixes(self, inputs: UpdateInputs) -> bool:
        """Whether `train.prefix_sharing` puts this batch through the prefix forest."""
        t = self.train
        return t.prefix_sharing == "on" or (t.prefix_sharing == "auto"
                                            and inputs.unique_fraction < t.prefix_break_even)

    def reference_logprobs(self, reference, inputs: UpdateInputs, shared: bool) -> np.ndarray:
        """The reference policy's log-probs for the KL term; zeros without a forward when
        `loss.kl_coef` = 0 (the loss then neither uses nor reports the KL)."""
        if self.updater.loss_config.kl_coef == 0:
            return np.zeros(inputs.tokens.shape, np.float32)
        return self.logprobs(reference, inputs, shared)

    def logprobs(self, params, inputs: UpdateInputs, shared: bool) -> np.ndarray:
        """float32[B, W] log-probs of every row's tokens up to its width, on the host."""
        if shared:
            return self.forest.logprobs(params, inputs.tokens, inputs.widths, inputs.groups)
        by_length = self.train.micro_batches_by_length
        return distributed.host_array(self.updater.logprobs(
            params, inputs.tokens, inputs.widths if by_length else None))

    def optimizer_steps(self, state, inputs: UpdateInputs, ref_logprobs: np.ndarray,
                        shared: bool, step: int):
        """`epochs` x `num_minibatches` optimizer steps on shuffled minibatches (shuffles from
        (train.seed, step)); returns (state, the list of each step's metrics on the host)."""
        t, u = self.train, self.updater
        rng = np.random.default_rng([t.seed, step])
        collected = []
        for _ in range(t.epochs):
            for chunk in np.array_split(rng.permutation(inputs.real), t.num_minibatches):
                index = np.concatenate([chunk, np.arange(inputs.real,
                                                         inputs.real + inputs.rows - len(chunk))])
                mb = u.minibatch(inputs.tokens[index], inputs.action_mask[index],
                                 inputs.old_logprobs[index], inputs.advantages[index],
                                 ref_logprobs[index])
                if shared:
                    plan = self.forest.plan(mb, inputs.groups[index])
                    state, metrics = self.forest.step(state, [fmb for fmb, _ in plan])
                else:
                    state, metrics = u.step(state, mb, t.micro_batches_by_length)
                collected.append(jax.device_get(metrics))
        return state, collected


# ---------------------------------------------------------------------- saved batches

BATCHES_DIR = "batches"
_ARRAYS = ("tokens", "action_mask", "behaviour_logprobs", "advantages", "group_ids")


@dataclasses.dataclass(frozen=True)
class SavedBatch:
    """A step's batch as the update received it, with the experiment that made it."""

    tokens: np.ndarray              # int32[N, T]
    action_mask: np.ndarray         # bool[N, T]
    behaviour_logprobs: np.ndarray  # float32[N, T]
    advantages: np.ndarray          # float32[N, T]
    group_ids: np.ndarray           # int[N]
    config: dict[str, Any]          # Experiment.to_dict() of the run
    step: int


def batch_path(workdir: str, step: int) -> str:
    return os.path.join(workdir, BATCHES_DIR, f"step_{step}.npz")


def save_batch(path: str, batch: SavedBatch) -> None:
    """Writes `batch` to `path` (.npz; written whole or not at all)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez_compressed(tmp, **{name: getattr(batch, name) for name in _ARRAYS},
                        config=np.array(json.dumps(batch.config)), step=np.array(batch.step))
    os.replace(tmp, path)


def load_batch(path: str) -> SavedBatch:
    """The batch `save_batch` wrote; ValueError naming the file when it is not one."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return SavedBatch(**{name: data[name] for name in _ARRAYS},
                              config=json.loads(str(data["config"])), step=int(data["step"]))
    except (OSError, KeyError, ValueError, EOFError) as e:
        raise ValueError(f"{path} is not a saved batch ({type(e).__name__}: {e})") from None
