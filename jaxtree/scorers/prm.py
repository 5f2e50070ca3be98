"""PATR's pretrained-PRM process scorer (§4.2, Eq. 7; App. A "Process scoring details").

A process reward model (PRM) is a jaxtree transformer backbone with a linear score head on its
final hidden states (after the final norm): hidden [D] -> logits [N]. With N = 1 label the step
score is sigmoid(logit) (Skywork-PRM's value head); with N = 2 it is the softmax probability of
label 1 (a two-class token classifier). Checkpoints: `jaxtree.scorers.prm_io`.

Serialization of a partial trajectory (PATR §4.2: "problem-response format"): the problem is the
task prompt as the policy saw it (the environment's instructions and first observation,
`env.prompt()`); the response is the most recent `recent_steps` steps (App. A: 10), each one text
block ending with the fixed separator:

    <bos>{task prompt}\\n\\n
    Step 4: Right\\n{observation after it}\\nReward: 0\\n\\n
    Step 5: Down\\n{observation after it}\\nReward: 1\\n\\n

The step score c_l is read at the last token of step l's block (the separator's last token), so
a causal model scores step l from the task and the steps up to l only. Each piece is tokenized on
its own, so the positions are exact for any tokenizer. An input longer than `max_tokens` drops its
oldest steps first and keeps the task prompt and the most recent steps; should the prompt and the
last step alone not fit, the prompt keeps its start and the step its end (its score token).

The branch score is f_agg(c_1, ..., c_L) over the serialized steps (Eq. 7): `last` (the paper's
choice), `mean`, `max`, `min`, or `last_mean` = w * c_L + (1 - w) * mean. A branch with no step
yet is scored at the end of its task prompt.

Live branches carry their actions and rewards (`TurnRecord`) but not the observations between
them, so the scorer rebuilds them by replaying the recorded actions on a fresh environment of the
task (reset with the task's seed once per task and call, ~1.5 ms for FrozenLake; then a copy per
branch and microseconds per replayed step). The replay is checked against the
record (each reward and validity, and the final state against the live environment's); an
environment whose replay diverges, e.g. one drawing randomness the replay consumes differently,
gets the observation `OBSERVATION_UNKNOWN` for every step but the last, whose observation is the
live environment's current one.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from environments.base import TextEnv
from jaxtree.models.config import ModelConfig
from jaxtree.models.transformer import Transformer
from jaxtree.rollout.episode import Episode
from jaxtree.sampling.sampler import bucket_length
from jaxtree.tokenizers import Tokenizer

SEPARATOR = "\n\n"
OBSERVATION_UNKNOWN = "(observation not recorded)"
AGGREGATIONS = ("last", "mean", "max", "min", "last_mean")
LABEL_COUNTS = (1, 2)


@dataclasses.dataclass
class ProcessRewardModel:
    """A PRM: backbone architecture, parameters and tokenizer.

    Attributes:
      config: the backbone's architecture.
      params: {'backbone': the transformer's parameters (no output projection needed),
        'head': {'kernel': float32[D, N], 'bias': float32[N]}} with N = 1 or 2 labels.
      tokenizer: the tokenizer the PRM reads.
      source: where it came from (a directory, or 'new head on ...').
      tokenizer_spec: 'byte' or the directory of a Hugging Face tokenizer.
    """

    config: ModelConfig
    params: dict
    tokenizer: Tokenizer
    source: str
    tokenizer_spec: str = "byte"

    @property
    def num_labels(self) -> int:
        return int(self.params["head"]["kernel"].shape[1])


def new_head(hidden_size: int, rng: jax.Array, num_labels: int = 1) -> dict:
    """A fresh linear head: kernel normal(0.02) [D, N] (transformers' initializer range), zero
    bias [N]."""
    kernel = 0.02 * jax.random.normal(rng, (hidden_size, num_labels), jnp.float32)
    return {"kernel": kernel, "bias": jnp.zeros((num_labels,), jnp.float32)}


def backbone_of(params: dict) -> dict:
    """A policy's parameters without the language-model output projection."""
    return {k: v for k, v in params.items() if k != "lm_head"}


# ----------------------------------------------------------------------------- the forward

def head_logits(config: ModelConfig, params: dict, tokens: jax.Array,
                positions: jax.Array) -> jax.Array:
    """The head's logits at chosen positions (pure; differentiable for training).

    Args:
      tokens: int32[B, T], right-padded rows starting at position 0.
      positions: int32[B, P], positions whose hidden state is scored (any value in [0, T) for
        padding entries).

    Returns:
      float32[B, P, N].
    """
    hidden, _ = Transformer(config).apply({"params": params["backbone"]}, tokens,
                                          return_hidden=True)
    picked = jnp.take_along_axis(hidden, positions[..., None], axis=1).astype(jnp.float32)
    head = params["head"]
    return picked @ head["kernel"].astype(jnp.float32) + head["bias"].astype(jnp.float32)


def score_logits(logits: jax.Array) -> jax.Array:
    """[..., N] head logits -> [...] logit of the step score: the logit itself for N = 1,
    logit(label 1) - logit(label 0) for N = 2 (softmax p(1) = sigmoid of that difference)."""
    return logits[..., 0] if logits.shape[-1] == 1 else logits[..., 1] - logits[..., 0]


@functools.partial(jax.jit, static_argnames=("config",))
def step_scores_at(config: ModelConfig, params: dict, tokens: jax.Array,
                   positions: jax.Array) -> jax.Array:
    """float32[B, P] step scores in [0, 1] at `positions` (shapes as `head_logits`)."""
    return jax.nn.sigmoid(score_logits(head_logits(config, params, tokens, positions)))


# ----------------------------------------------------------------------------- serialization

@dataclasses.dataclass(frozen=True)
class Step:
    """One interaction step as the PRM reads it."""

    action: str        # the action's canonical text ("<invalid>" for malformed text)
    observation: str   # the observation after it
    reward: float      # the environment's reward for it


@dataclasses.dataclass
class Serialized:
    """A partial trajectory as PRM input: tokens, and the position of each serialized step's
    score token (the last token of its block); `first_step` numbers the first serialized step."""

    tokens: list[int]
    positions: list[int]
    first_step: int


def step_block(number: int, step: Step) -> str:
    """The text of one step, separator included."""
    return (f"Step {number}: {step.action}\n{step.observation}\nReward: {step.reward:g}"
            f"{SEPARATOR}")


def serialize(tokenizer: Tokenizer, problem: str, steps: Sequence[Step], first_number: int,
              max_tokens: int) -> Serialized:
    """The PRM input of a task prompt and its steps (module docstring).

    Args:
      problem: the task prompt.
      steps: the steps to show, oldest first (already the recent ones).
      first_number: the episode's number of `steps[0]` (1 for the first turn).
      max_tokens: the longest input; the oldest steps are dropped first.
    """
    head = tokenizer.encode(problem + SEPARATOR, add_bos=True)
    blocks = [tokenizer.encode(step_block(first_number + i, s)) for i, s in enumerate(steps)]
    if not blocks:
        head = head[:max_tokens]
        return Serialized(head, [len(head) - 1], first_number)
    keep, used = 0, len(head)
    for block in reversed(blocks):
        if keep and used + len(block) > max_tokens:
            break
        keep, used = keep + 1, used + len(block)
    blocks = blocks[len(blocks) - keep:]
    if used > max_tokens:  # the prompt and the last step alone are too long
        head = head[:max(max_tokens - len(blocks[0]), max_tokens // 2)]
        blocks[0] = blocks[0][-(max_tokens - len(head)):]
    tokens, positions = list(head), []
    for block in blocks:
        tokens += block
        positions.append(len(tokens) - 1)
    return Serialized(tokens, positions, first_number + len(steps) - keep)


def aggregate(scores: Sequence[float], aggregation: str, last_weight: float = 0.5) -> float:
    """f_agg of PATR Eq. 7 over step scores c_1..c_L (L >= 1)."""
    c = np.asarray(scores, np.float64)
    if c.size == 0:
        raise ValueError("aggregate: no step scores")
    if aggregation == "last":
        return float(c[-1])
    if aggregation == "mean":
        return float(c.mean())
    if aggregation == "max":
        return float(c.max())
    if aggregation == "min":
        return float(c.min())
    if aggregation == "last_mean":
        return float(last_weight * c[-1] + (1 - last_weight) * c.mean())
    raise ValueError(f"aggregation={aggregation!r}: expected one of {AGGREGATIONS}")


# ----------------------------------------------------------------------------- episodes

def task_start(episode: Episode) -> TextEnv:
    """A fresh environment of the episode's task: a clone of its live one, reset with the task's
    seed (the clone carries the environment's options)."""
    env = episode.env.clone()
    env.reset(episode.task_id)
    return env


def replayed_steps(episode: Episode, start: TextEnv) -> tuple[str, list[Step]]:
    """(task prompt, every step of the episode) by replaying its recorded actions on a copy of
    `start` (module docstring: a replay that diverges from the record keeps only the current
    observation)."""
    env = start.clone()
    problem = env.prompt()
    steps, consistent = [], True
    for turn in episode.turns:
        observation, reward, _, info = env.step(turn.action_signature)
        consistent = consistent and reward == turn.reward and bool(info["valid"]) == turn.valid
        steps.append(Step(turn.action_signature, observation, turn.reward))
    if steps and not (consistent and env.canonical_state() == episode.env.canonical_state()):
        steps = [dataclasses.replace(s, observation=OBSERVATION_UNKNOWN) for s in steps[:-1]]
        last = episode.turns[-1]
        steps.append(Step(last.action_signature, episode.env.render(), last.reward))
    return problem, steps


# ----------------------------------------------------------------------------- batched scoring

def batch_step_scores(prm: ProcessRewardModel, rows: Sequence[Serialized],
                      max_positions: int) -> list[np.ndarray]:
    """Step scores of each serialized row (float64[len(row.positions)] each), one jitted forward
    over all rows. Rows and widths are bucketed to powers of two and the positions padded to
    `max_positions`, so a run compiles few shapes."""
    if not rows:
        return []
    width = bucket_length(max(len(r.tokens) for r in rows), 32)
    count = bucket_length(len(rows), 8)
    tokens = np.full((count, width), prm.tokenizer.pad_id, np.int32)
    positions = np.zeros((count, max_positions), np.int32)
    for i, row in enumerate(rows):
        if len(row.positions) > max_positions:
            raise ValueError(f"a row has {len(row.positions)} step positions, more than "
                             f"max_positions={max_positions}")
        tokens[i, :len(row.tokens)] = row.tokens
        positions[i, :len(row.positions)] = row.positions
    scores = np.asarray(jax.device_get(step_scores_at(
        prm.config, prm.params, jnp.asarray(tokens), jnp.asarray(positions))), np.float64)
    return [scores[i, :len(row.positions)] for i, row in enumerate(rows)]


class PrmScorer:
    """PATR-PRM: scores live branches (module docstring); call it with episodes."""

    def __init__(self, prm: ProcessRewardModel, aggregation: str = "last",
                 last_weight: float = 0.5, recent_steps: int = 10, max_tokens: int = 1024):
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation={aggregation!r}: expected one of {AGGREGATIONS}")
        if recent_steps < 1 or max_tokens < 2:
            raise ValueError(f"recent_steps={recent_steps} and max_tokens={max_tokens} must be "
                             "at least 1 and 2")
        self.prm = prm
        self.aggregation = aggregation
        self.last_weight = last_weight
        self.recent_steps = recent_steps
        self.max_tokens = max_tokens

    def serialize_episode(self, episode: Episode, start: TextEnv) -> Serialized:
        """The PRM input of a live branch; `start` is a fresh environment of its task."""
        problem, steps = replayed_steps(episode, start)
        recent = steps[-self.recent_steps:]
        return serialize(self.prm.tokenizer, problem, recent, len(steps) - len(recent) + 1,
                         self.max_tokens)

    def step_scores(self, episodes: Sequence[Episode]) -> list[np.ndarray]:
        """c_1..c_L of each branch's serialized steps (one value for a branch with no step)."""
        starts: dict[int, TextEnv] = {}  # one reset per task and call: branches share it
        rows = []
        for episode in episodes:
            if episode.task_id not in starts:
                starts[episode.task_id] = task_start(episode)
            rows.append(self.serialize_episode(episode, starts[episode.task_id]))
        return batch_step_scores(self.prm, rows, self.recent_steps)

    def __call__(self, episodes: Sequence[Episode]) -> np.ndarray:
        """s_i = f_agg(c_1..c_L) of each branch (float64[n], in [0, 1])."""
        return np.asarray([aggregate(c, self.aggregation, self.last_weight)
                           for c in self.step_scores(episodes)], np.float64)
