"""MC-PR's process reward: the temporal difference of Monte-Carlo state values.

VPR §3.1's MC-PR baseline "estimates intermediate state values using ... Monte Carlo rollouts
with the policy model ... and defines the process reward as the temporal difference between
consecutive state values":

    r_t = V(s_{t+1}) - V(s_t),   V(s_T) = the episode's own return (its final state's value),

with V(s_t) the mean return of the continuations the `mc_values` rollout strategy played from
s_t (the `mc_value` label, which only that strategy produces: the term declares it reads it, so
a config without that strategy fails at launch). The rewards telescope: sum_t r_t = return - V(s_0).
Pair it with the advantage estimator VPR uses for its own turn rewards (`advantage.name=vpr`),
so that MC-PR and VPR differ only in where the turn rewards come from.
"""

from __future__ import annotations

import numpy as np

from jaxtree.rewards.base import REWARDS, zero_rewards
from jaxtree.scorers.probe import ORACLE, RANDOM, pairwise_auc
from jaxtree.rollout.trajectory import TrajectoryBatch


def mc_process_rewards(batch: TrajectoryBatch) -> np.ndarray:
    """float32[N, K]: V(s_{t+1}) - V(s_t) on played turns, 0 after.

    Raises:
      ValueError: a played turn has no value estimate (the rollout was not `mc_values`).
    """
    values = np.asarray(batch.label("mc_value"), np.float32)
    played = batch.played
    missing = played & np.isnan(values)
    if missing.any():
        row, turn = (int(x) for x in np.argwhere(missing)[0])
        raise ValueError(f"the mc_value label is NaN on played turn {turn} of row {row}: the "
                         f"mc_process reward needs rollout.strategy='mc_values'")
    n, k = values.shape
    following = np.empty((n, k), np.float32)
    following[:, :-1] = values[:, 1:]
    last = np.arange(k)[None, :] == batch.num_turns[:, None] - 1
    following = np.where(last, np.asarray(batch.outcome_reward, np.float32)[:, None], following)
    return np.where(played, following - values, 0.0).astype(np.float32)


# A reward counts as positive / negative beyond this magnitude (the values are means of float32
# returns, so equal values can differ in the last bits).
SIGN_TOLERANCE = 1e-6

MOVE_KINDS = ("verified", "legal, not verified", "illegal")


def reward_auc(first: np.ndarray, second: np.ndarray) -> float:
    """P(x > y) + P(x = y) / 2 for x from `first`, y from `second` (NaN if either is empty)."""
    labels = np.r_[np.full(len(first), ORACLE), np.full(len(second), RANDOM)]
    return pairwise_auc(np.r_[first, second].astype(np.float64), labels)


def _sign_share(x: np.ndarray, sign: float) -> float:
    """Share of `x` beyond SIGN_TOLERANCE on the side of `sign` (+1 or -1; NaN if empty)."""
    return float(np.mean(sign * x > SIGN_TOLERANCE)) if len(x) else float("nan")


def label_agreement(rewards: np.ndarray, verified: np.ndarray, valid: np.ndarray,
                    played: np.ndarray) -> dict:
    """MC-PR's turn rewards grouped by what the environment says of each move (what
    `python -m launch.mc_labels` reports: does r_t separate verified moves from the rest?).

    Args:
      rewards: float[N, K], r_t of every turn (0 after the last played one).
      verified: float or bool[N, K], the verifier's label (> 0.5: accepted).
      valid: bool[N, K], the move was legal and parsed.
      played: bool[N, K], the turn was played.
    Returns {"moves", "positive", "kinds": {kind: {"count", "share", "mean", "positive",
    "negative"}}, "auc": {name: value}} over the played turns.
    """
    played = np.asarray(played, bool)
    r = np.asarray(rewards, np.float64)[played]
    accepted = np.asarray(verified, np.float64)[played] > 0.5
    legal = np.asarray(valid, bool)[played]
    masks = dict(zip(MOVE_KINDS, (accepted, legal & ~accepted, ~legal & ~accepted)))
    kinds = {}
    for name, mask in masks.items():
        x = r[mask]
        kinds[name] = {"count": int(mask.sum()), "share": float(mask.mean()) if len(r) else 0.0,
                       "mean": float(x.mean()) if len(x) else float("nan"),
                       "positive": _sign_share(x, 1.0), "negative": _sign_share(x, -1.0)}
    unverified_legal, illegal = masks[MOVE_KINDS[1]], masks[MOVE_KINDS[2]]
    aucs = {"verified vs rest": reward_auc(r[accepted], r[~accepted]),
            "legal vs illegal": reward_auc(r[unverified_legal], r[illegal]),
            "verified vs legal unverified": reward_auc(r[accepted], r[unverified_legal])}
    return {"moves": int(len(r)), "positive": _sign_share(r, 1.0) if len(r) else 0.0,
            "kinds": kinds, "auc": aucs}


@REWARDS.register("mc_process", reads=("mc_value",))
def mc_process(settings: None):
    """turn += V(s_{t+1}) - V(s_t) from the mc_values rollout's Monte-Carlo values (VPR's MC-PR
    baseline; outcome untouched)."""
    del settings
    return lambda batch: zero_rewards(batch)._replace(turn=mc_process_rewards(batch))
