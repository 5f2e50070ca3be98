"""Fitting a process reward model on the environment's own labelled partial trajectories
(`launch.train_prm`), for PATR's PRM scorer (`rollout.patr.scorer=prm`).

Data. Episodes of training seeds are played on the host by a behaviour policy that takes the
environment's oracle action, or with probability `epsilon` a uniformly random one (so good and bad
prefixes both appear; no policy model is needed). Each step l gets a label in [0, 1]:

  * `mc`: Monte-Carlo success: the fraction of `continuations` rollouts of the same ε-oracle,
    each from a copy of the environment after step l, that solve the task (the behaviour
    policy's value of the state; a soft label);
  * `oracle`: whether the oracle alone still solves the task from the state after step l: the
    fraction of `continuations` oracle-only rollouts from copies of that state that succeed. On a
    deterministic environment every rollout agrees, so the label is exactly 0 or 1; on a
    stochastic one (slippery FrozenLake) it is the Monte-Carlo estimate of the oracle's success
    probability, a soft label, rather than a thresholded one: an oracle that succeeds on a fifth
    of slippery lakes would make a thresholded label almost always 0.

A step that ends the episode is labelled by its outcome (1 solved, 0 failed or out of turns).
Each copy's dynamics RNG (`env.rng`) is reseeded from the labelling generator: a clone carries its
parent's RNG state, so unseeded copies would all slip the same way.

Model. The PRM is `model.name`'s backbone (the `tiny` preset's random initialisation, or a
warm-start policy checkpoint) with a new linear head (one label, sigmoid). Inputs are serialized
exactly as the scorer serializes live branches (`jaxtree.scorers.prm`); an episode longer than
`recent_steps` gives several windows of at most `recent_steps` steps, the last one ending at its
last step. The loss is binary cross-entropy (soft labels) at the step-boundary positions only,
AdamW with warm-up and cosine decay.

Metrics (log and <workdir>/prm_metrics.json): BCE, accuracy (score and label on the same side
of 0.5) and ROC AUC of the step scores against the labels thresholded at 0.5, on training
episodes and on held-out ones (the evaluation seeds, disjoint from the training seeds); with the
environment's own heuristic `process_score` AUC on the held-out steps as a baseline. The PRM is
saved to <workdir>/prm (`jaxtree.scorers.prm_io`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from environments.base import TextEnv
from jaxtree.config import Section, between, one_of, option, positive, require
from jaxtree.models.config import ModelConfig
from jaxtree.policy import Policy
from jaxtree.scorers.prm import (ProcessRewardModel, Serialized, Step, backbone_of,
                                 batch_step_scores, head_logits, new_head, score_logits,
                                 serialize)
from jaxtree.scorers.prm_io import save_prm
from jaxtree.tasks import eval_seeds, train_seeds
from jaxtree.utils import report, round_up

LABELS = ("mc", "oracle")
PRM_DIR = "prm"
METRICS_FILE = "prm_metrics.json"
LOG_FILE = "prm_train_metrics.jsonl"
EVAL_ROWS = 32   # rows per scoring forward in the evaluations


@dataclasses.dataclass(frozen=True)
class PrmTrainConfig(Section):
    """Config section `prm` of `launch.train_prm`: the labelled data and the fit."""

    labels: str = option("mc", "step labels: 'mc' (success rate of ε-oracle continuations) or "
                         "'oracle' (the oracle alone still succeeds)", check=one_of(LABELS))
    epsilon: float = option(0.3, "rate of random actions of the behaviour policy (and of the "
                            "'mc' continuations)", check=between(0, 1))
    continuations: int = option(8, "rollouts per step label", check=positive())
    num_episodes: int = option(512, "training episodes (training seeds)", check=positive())
    eval_episodes: int = option(128, "held-out episodes (evaluation seeds), and training "
                                "episodes the training metrics are measured on",
                                check=positive())
    steps: int = option(200, "optimizer steps", check=positive())
    batch_size: int = option(8, "serialized windows per step", check=positive())
    learning_rate: float = option(2e-3, "peak learning rate (warm-up, then cosine to 10%)",
                                  check=positive())
    warmup_steps: int = option(20, "linear warm-up steps", check=between(0))
    weight_decay: float = option(0.01, "AdamW weight decay", check=between(0))
    max_grad_norm: float = option(1.0, "global gradient-norm clip", check=positive())
    recent_steps: int = option(10, "steps per serialized window (the scorer's "
                               "rollout.patr.prm.recent_steps)", check=positive())
    max_tokens: int = option(1024, "longest serialized window (the scorer's "
                             "rollout.patr.prm.max_tokens)", check=between(16))
    seed: int = option(0, "seed of the episodes, labels, head and batches")
    log_every: int = option(25, "steps between log records", check=positive())

    def check(self):
        require(self.warmup_steps <= self.steps, "warmup_steps",
                f"{self.warmup_steps} is not in [0, prm.steps={self.steps}]")


# ----------------------------------------------------------------------------- labelled data

@dataclasses.dataclass
class LabelledEpisode:
    """One behaviour episode: its task prompt, steps, a label and the environment's heuristic
    process score after each step."""

    task_id: int
    problem: str
    steps: list[Step]
    labels: list[float]
    heuristic: list[float]
    success: bool


def behaviour_action(env: TextEnv, epsilon: float, rng: np.random.Generator):
    """The ε-oracle: a uniformly random action with probability ε, else the oracle's."""
    return env.random_action(rng) if epsilon and rng.random() < epsilon else env.oracle_action()


def play_out(env: TextEnv, epsilon: float, rng: np.random.Generator) -> bool:
    """Plays the ε-oracle on `env` (changed in place) to the end; whether it solved the task."""
    info = {"success": env.success}
    while not env.done:
        _, _, _, info = env.step(env.answer_text(behaviour_action(env, epsilon, rng)))
    return bool(info["success"])


def continuation_success(env: TextEnv, epsilon: float, count: int,
                         rng: np.random.Generator) -> float:
    """Success rate of `count` ε-oracle rollouts, each from a copy of `env` whose dynamics RNG
    is reseeded (module docstring)."""
    wins = 0
    for _ in range(count):
        copy = env.clone()
        copy.rng = np.random.default_rng(int(rng.integers(2**63)))
        wins += play_out(copy, epsilon, rng)
    return wins / count


def step_label(env: TextEnv, success: bool, labels: str, epsilon: float, continuations: int,
               rng: np.random.Generator) -> float:
    """The label of the state `env` is in after a step (module docstring); `success`: that step
    solved the task."""
    if env.done:
        return float(success)
    policy_epsilon = epsilon if labels == "mc" else 0.0
    return continuation_success(env, policy_epsilon, continuations, rng)


def labelled_episode(env: TextEnv, seed: int, settings: PrmTrainConfig,
                     rng: np.random.Generator) -> LabelledEpisode:
    """Plays task `seed` with the behaviour policy, labelling every step."""
    env.reset(seed)
    problem, steps, labels, heuristic, success = env.prompt(), [], [], [], False
    while not env.done:
        action = behaviour_action(env, settings.epsilon, rng)
        observation, reward, _, info = env.step(env.answer_text(action))
        success = bool(info["success"])
        steps.append(Step(env.action_signature(action), observation, reward))
        labels.append(step_label(env, success, settings.labels, settings.epsilon,
                                 settings.continuations, rng))
        heuristic.append(env.process_score())
    return LabelledEpisode(seed, problem, steps, labels, heuristic, success)


# ----------------------------------------------------------------------------- examples

@dataclasses.dataclass
class Example:
    """A serialized window with the labels of its step positions."""

    row: Serialized
    labels: list[float]
    heuristic: list[float]


def episode_examples(tokenizer, episode: LabelledEpisode, recent_steps: int,
                     max_tokens: int) -> list[Example]:
    """The episode's windows of at most `recent_steps` steps, ending at its last step and every
    `recent_steps` before it, so every step is labelled once."""
    out = []
    for end in range(len(episode.steps), 0, -recent_steps):
        start = max(0, end - recent_steps)
        row = serialize(tokenizer, episode.problem, episode.steps[start:end], start + 1,
                        max_tokens)
        kept = slice(end - len(row.positions), end)   # max_tokens may drop the oldest steps
        out.append(Example(row, episode.labels[kept], episode.heuristic[kept]))
    return out


def padded_batch(examples: Sequence[Example], pad_id: int, max_positions: int,
                 width: int | None = None):
    """tokens int32[B, T], positions int32[B, P], labels float32[B, P], mask float32[B, P] (1 on
    real step positions), P = max_positions; T = `width`, by default the longest example
    rounded up to a multiple of 64."""
    width = width or round_up(max(len(e.row.tokens) for e in examples), 64)
    tokens = np.full((len(examples), width), pad_id, np.int32)
    positions = np.zeros((len(examples), max_positions), np.int32)
    labels = np.zeros((len(examples), max_positions), np.float32)
    mask = np.zeros((len(examples), max_positions), np.float32)
    for i, e in enumerate(examples):
        n = len(e.row.positions)
        tokens[i, :len(e.row.tokens)] = e.row.tokens
        positions[i, :n], labels[i, :n], mask[i, :n] = e.row.positions, e.labels, 1.0
    return tokens, positions, labels, mask


# ----------------------------------------------------------------------------- the fit

def bce_loss(config: ModelConfig, params, tokens, positions, labels, mask):
    """Mean binary cross-entropy (soft labels) over the masked step positions.

    Args:
      tokens: int32[B, T]; positions, labels, mask: [B, P] (padded_batch).

    Returns:
      (loss float32[], metrics {'loss', 'accuracy'}).
    """
    logits = score_logits(head_logits(config, params, tokens, positions))
    losses = optax.sigmoid_binary_cross_entropy(logits, labels)
    count = jnp.maximum(mask.sum(), 1.0)
    loss = (losses * mask).sum() / count
    agree = ((logits > 0) == (labels > 0.5)).astype(jnp.float32)
    return loss, {"loss": loss, "accuracy": (agree * mask).sum() / count}


@functools.partial(jax.jit, static_argnames=("config", "optimizer"),
                   donate_argnames=("params", "opt_state"))
def train_step(config: ModelConfig, optimizer: optax.GradientTransformation, params, opt_state,
               tokens, positions, labels, mask):
    """One AdamW step on the BCE of a batch; returns (params, opt_state, metrics)."""
    (_, metrics), grads = jax.value_and_grad(bce_loss, argnums=1, has_aux=True)(
        config, params, tokens, positions, labels, mask)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, dict(metrics, grad_norm=optax.tree.norm(grads))


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve (the Mann-Whitney statistic, ties counted half); None when only
    one class is present."""
    scores, positive = np.asarray(scores, np.float64), np.asarray(positive, bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if not n_pos or not n_neg:
        return None
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):  # average ranks over ties
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def score_metrics(scores: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """BCE, accuracy and AUC of step scores against (soft) labels."""
    p = np.clip(scores, 1e-7, 1 - 1e-7)
    bce = -np.mean(labels * np.log(p) + (1 - labels) * np.log1p(-p))
    return {"bce": float(bce), "accuracy": float(np.mean((scores > 0.5) == (labels > 0.5))),
            "auc": roc_auc(scores, labels > 0.5), "steps": int(len(labels)),
            "label_mean": float(np.mean(labels)), "positive_rate": float(np.mean(labels > 0.5))}


def evaluate(prm: ProcessRewardModel, examples: Sequence[Example],
             max_positions: int) -> dict[str, Any]:
    """score_metrics of the PRM on every step position of `examples`, plus the environment
    heuristic's AUC on the same steps."""
    scores = []
    for start in range(0, len(examples), EVAL_ROWS):
        chunk = examples[start:start + EVAL_ROWS]
        scores += batch_step_scores(prm, [e.row for e in chunk], max_positions)
    labels = np.concatenate([e.labels for e in examples])
    heuristic = np.concatenate([e.heuristic for e in examples])
    metrics = score_metrics(np.concatenate(scores), labels)
    metrics["heuristic_auc"] = roc_auc(heuristic, labels > 0.5)
    return metrics


def new_prm(policy: Policy, seed: int) -> ProcessRewardModel:
    """The policy's backbone with a new one-label head."""
    head = new_head(policy.config.hidden_size, jax.random.key(seed))
    return ProcessRewardModel(policy.config, {"backbone": backbone_of(policy.params),
                                              "head": head},
                              policy.tokenizer, f"new head on {policy.source}",
                              policy.tokenizer_spec)


def label_episodes(make_env: Callable[[], TextEnv], seeds: Sequence[int],
                   settings: PrmTrainConfig, rng: np.random.Generator) -> list[LabelledEpisode]:
    env = make_env()
    return [labelled_episode(env, seed, settings, rng) for seed in seeds]


def fit_prm(settings: PrmTrainConfig, policy: Policy, make_env: Callable[[], TextEnv],
            workdir: str, optimizer: optax.GradientTransformation) -> dict[str, Any]:
    """Labels episodes, trains the PRM with `optimizer` (the job's AdamW schedule of the
    settings' learning rate, warm-up and steps), evaluates it, saves it to <workdir>/prm and its
    metrics to <workdir>/prm_metrics.json; returns the metrics."""
    s = settings
    start = time.perf_counter()
    rng = np.random.default_rng(s.seed)
    train = label_episodes(make_env, train_seeds(rng, s.num_episodes), s, rng)
    heldout = label_episodes(make_env, eval_seeds(s.eval_episodes), s, rng)
    label_seconds = time.perf_counter() - start
    examples = lambda eps: [x for e in eps
                            for x in episode_examples(policy.tokenizer, e, s.recent_steps,
                                                      s.max_tokens)]
    train_examples, heldout_examples = examples(train), examples(heldout)
    report(f"train_prm: {len(train)} + {len(heldout)} held-out episodes labelled ('{s.labels}') "
           f"in {label_seconds:.0f}s; {sum(len(e.labels) for e in train_examples)} training steps, "
           f"label mean {np.mean([l for e in train for l in e.labels]):.3f}")

    prm = new_prm(policy, s.seed)
    params, opt_state = prm.params, optimizer.init(prm.params)
    # One width for every batch: one compilation (a random batch's longest window is near the
    # longest of all anyway).
    width = round_up(max(len(e.row.tokens) for e in train_examples), 64)
    log = []
    with open(os.path.join(workdir, LOG_FILE), "w") as f:
        for step in tqdm(range(1, s.steps + 1), desc="train_prm", unit="step"):
            batch = [train_examples[i] for i in rng.integers(0, len(train_examples),
                                                             s.batch_size)]
            params, opt_state, metrics = train_step(
                prm.config, optimizer, params, opt_state,
                *padded_batch(batch, policy.tokenizer.pad_id, s.recent_steps, width))
            log.append(metrics)
            if step % s.log_every == 0 or step == s.steps:
                values = jax.device_get(log)
                record = {"step": step, **{k: float(np.mean([m[k] for m in values]))
                                           for k in values[0]}}
                f.write(json.dumps(record) + "\n")
                f.flush()
                log = []
    prm = dataclasses.replace(prm, params=params)
    results = {
        "labels": s.labels, "steps": s.steps,
        "train": evaluate(prm, examples(train[:s.eval_episodes]), s.recent_steps),
        "heldout": evaluate(prm, heldout_examples, s.recent_steps),
        "episode_success": {"train": float(np.mean([e.success for e in train])),
                            "heldout": float(np.mean([e.success for e in heldout]))},
        "label_seconds": label_seconds,
    }
    save_prm(os.path.join(workdir, PRM_DIR), prm)
    results["seconds"] = time.perf_counter() - start
    with open(os.path.join(workdir, METRICS_FILE) + ".tmp", "w") as f:
        json.dump(results, f, indent=2)
    os.replace(os.path.join(workdir, METRICS_FILE) + ".tmp", os.path.join(workdir, METRICS_FILE))
    return results
