"""Evaluation metrics of a policy on held-out tasks, with the oracle and random reference rows.

Every row is computed from per-episode summaries, so the policy (rolled out by the slot engine)
and the host-only reference policies (oracle, uniformly random legal actions) report the same
metrics the same way:

  success_rate          fraction of episodes solved
  pass@1, pass@k        unbiased estimate over the k samples of each task (Chen et al., 2021):
                        1 - C(n - c, k) / C(n, k) with c successes among n samples
  mean_turns            actions per episode
  response_tokens       generated tokens per action (the policy row only)
  invalid_rate          actions that did not parse to a legal move / all actions
  verified_rate         actions the environment's verifier accepts (`env.verify`, VPR's
                        V(s_t, a_t)) / all actions: the process accuracy that VPR's turn rewards
                        train, next to the outcome metrics that it is meant to improve
  environment metrics   the mean of every numeric metric the environment reports at the end of an
                        episode (e.g. completion_rate for Sudoku and Minesweeper), and for
                        Tic-Tac-Toe the return and the verified rate as first and as second
                        mover

`Evaluator(model_config, tokenizer, make_env, rollout, config)` is the evaluation a training run
holds: its own slot engine sampling at `eval.temperature` and recording the per-turn labels the
metrics read (`EVAL_LABELS`: the verifier's verdict). `evaluate` also returns a few episodes as
transcripts (the prompt, each action and the
environment's reply, decoded from the episode's tokens), which `write_transcripts` saves as JSONL
and as readable text.

In a multi-process job every process plays a contiguous share of the held-out tasks (keyed as
they would be in one process) and the shares are exchanged, so every process computes the same
metrics from all of the episodes (`jaxtree.parallel.distributed`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import defaultdict
from typing import Callable, Sequence

import jax
import numpy as np
from tqdm import tqdm

from environments.base import TextEnv
from jaxtree.config import Section, non_negative, option, positive
from jaxtree.parallel import distributed
from jaxtree.rollout.engine import RolloutConfig, SlotEngine
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.strategies.independent import sample_independent
from jaxtree.rollout.trajectory import END_REASONS, TrajectoryBatch, join_shares
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.tasks import eval_seeds
from jaxtree.tokenizers import Tokenizer

@dataclasses.dataclass(frozen=True)
class EvalConfig(Section):
    """Config section `eval`: held-out evaluation, the same for `launch.evaluate` and for the
    evaluations during training."""

    num_tasks: int = option(200, "held-out tasks (fixed seeds, disjoint from training seeds)",
                            check=positive())
    samples_per_task: int = option(4, "episodes per task (k of pass@k)", check=positive())
    temperature: float = option(1.0, "sampling temperature of the evaluated policy",
                                check=non_negative())
    seed: int = option(0, "sampling seed (the same every evaluation: common random numbers)")
    every: int = option(10, "training steps between evaluations (also at step 0 and the end)",
                        check=positive())
    transcripts: int = option(4, "episodes per evaluation written as transcripts (0: none)",
                              check=non_negative())


# The per-turn labels the evaluation metrics read (verified_rate).
EVAL_LABELS = ("verified",)

# Protocol bookkeeping in `info`, not environment metrics.
_PROTOCOL_KEYS = {"valid", "success", "truncated", "action", "num_steps", "num_invalid",
                  "context_full", "error"}


@dataclasses.dataclass
class EpisodeSummary:
    task_id: int
    success: bool
    num_turns: int
    num_invalid: int
    info: dict
    response_tokens: int | None = None  # None for policies that do not generate tokens
    num_verified: int | None = None     # actions the verifier accepted (None: not recorded)


def summaries_from_batch(batch: TrajectoryBatch) -> list[EpisodeSummary]:
    """Every episode's summary; `num_verified` where the batch holds the `verified` label."""
    verified = [None] * len(batch)
    if "verified" in batch.labels:
        # 1/0 on played turns and NaN past each episode's last one
        verified = np.nansum(np.asarray(batch.labels["verified"], np.float64), axis=1)
    return [EpisodeSummary(int(batch.task_ids[i]), bool(batch.success[i]),
                           int(batch.num_turns[i]), int(batch.num_invalid[i]), batch.infos[i],
                           int(batch.response_lengths[i]),
                           None if verified[i] is None else int(verified[i]))
            for i in range(len(batch))]


def play_reference(make_env: Callable[[], TextEnv], task_ids: Sequence[int], policy: str,
                   samples_per_task: int, seed: int = 0) -> list[EpisodeSummary]:
    """Episodes of the environment's oracle or of uniformly random legal actions."""
    if policy not in ("oracle", "random"):
        raise ValueError(f"policy={policy!r}: expected 'oracle' or 'random'")
    rng = np.random.default_rng(seed)
    env = make_env()
    out = []
    for task in task_ids:
        for _ in range(samples_per_task):
            env.reset(task)
            info = {"success": False}
            verified = 0
            while not env.done:
                action = env.oracle_action() if policy == "oracle" else env.random_action(rng)
                verified += env.verify(action)
                _, _, _, info = env.step(env.answer_text(action))
            out.append(EpisodeSummary(int(task), bool(info["success"]), env.num_steps,
                                      env.num_invalid, info, num_verified=verified))
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def metrics(episodes: Sequence[EpisodeSummary], k: int) -> dict[str, float]:
    """The metrics of the module docstring over `episodes` (k samples per task); `episodes`, a
    count, is an int."""
    if not episodes:
        raise ValueError("no episodes to evaluate")
    by_task: dict[int, list[bool]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e.success)
    turns = sum(e.num_turns for e in episodes)
    out = {
        "episodes": len(episodes),
        "success_rate": float(np.mean([e.success for e in episodes])),
        "pass@1": float(np.mean([pass_at_k(len(s), sum(s), 1) for s in by_task.values()])),
        f"pass@{k}": float(np.mean([pass_at_k(len(s), sum(s), min(k, len(s)))
                                    for s in by_task.values()])),
        "mean_turns": turns / len(episodes),
        "invalid_rate": sum(e.num_invalid for e in episodes) / max(turns, 1),
    }
    if all(e.response_tokens is not None for e in episodes):
        out["response_tokens"] = sum(e.response_tokens for e in episodes) / max(turns, 1)
    if all(e.num_verified is not None for e in episodes):
        out["verified_rate"] = sum(e.num_verified for e in episodes) / max(turns, 1)
    numeric = defaultdict(list)
    for e in episodes:
        for key, value in e.info.items():
            if key not in _PROTOCOL_KEYS and isinstance(value, (bool, int, float)):
                numeric[key].append(float(value))
    for key, values in sorted(numeric.items()):
        if key != "first_mover" and len(values) == len(episodes):
            out[key] = float(np.mean(values))
    if "first_mover" in numeric and len(numeric["first_mover"]) == len(episodes):
        for mover, name in ((1.0, "first_mover"), (0.0, "second_mover")):
            side = [e for e, m in zip(episodes, numeric["first_mover"]) if m == mover]
            if not side:
                continue
            if len(numeric.get("return", ())) == len(episodes):
                out[f"return_{name}"] = float(np.mean([e.info["return"] for e in side]))
            if "verified_rate" in out:
                out[f"verified_rate_{name}"] = (sum(e.num_verified for e in side)
                                                / max(sum(e.num_turns for e in side), 1))
    return out


@dataclasses.dataclass
class Transcript:
    """One episode as text: what the policy read and wrote, turn by turn.

    Texts are decoded without special tokens, so chat-template markers are dropped (role names a
    template writes as plain text stay). The environment's reply to the last action is not part
    of the episode's tokens; `success`, `episode_return` and `end_reason` tell how it ended.
    """

    task_id: int
    sample: int              # which of the task's samples (0 .. samples_per_task - 1)
    success: bool
    episode_return: float
    num_turns: int
    end_reason: str          # 'done', 'truncated', ... (trajectory.END_REASONS)
    prompt: str              # the first observation, instructions included
    turns: list[dict]        # per action: {'action': text, 'reply': the next observation, or
                             # None after the last action}


@dataclasses.dataclass
class EvalResult:
    """What `evaluate` returns."""

    metrics: dict[str, float]     # the metrics of the module docstring
    transcripts: list[Transcript]


def transcript(batch: TrajectoryBatch, row: int, sample: int, tokenizer: Tokenizer) -> Transcript:
    """Episode `row` of `batch` as text. Turn t's tokens are its observation (the prompt for
    t = 0, else the reply to action t - 1) followed by its action (`action_mask`)."""
    n = int(batch.lengths[row])
    tokens, is_action = batch.tokens[row, :n], batch.action_mask[row, :n]
    turn_of = batch.turn_index[row, :n]
    num_turns = int(batch.num_turns[row])

    def text(turn: int, action: bool) -> str:
        return tokenizer.decode(tokens[(turn_of == turn) & (is_action == action)].tolist())

    turns = [{"action": text(t, True), "reply": text(t + 1, False) if t + 1 < num_turns else None}
             for t in range(num_turns)]
    return Transcript(int(batch.task_ids[row]), sample, bool(batch.success[row]),
                      float(batch.outcome_reward[row]), num_turns,
                      END_REASONS[int(batch.end_reason[row])], text(0, False), turns)


def sample_indices(task_ids: Sequence[int]) -> list[int]:
    """For each episode, how many episodes of its task come before it (its sample index)."""
    seen: dict[int, int] = defaultdict(int)
    out = []
    for task in task_ids:
        out.append(seen[int(task)])
        seen[int(task)] += 1
    return out


def pick_transcripts(batch: TrajectoryBatch, tokenizer: Tokenizer, count: int) -> list[Transcript]:
    """`count` episodes of a task-ordered batch: the first sample of every task in task order,
    then the second ones, and so on (as many different tasks as possible, the same every
    evaluation)."""
    samples = sample_indices(batch.task_ids)
    rows = sorted(range(len(batch)), key=lambda i: (samples[i], i))[:count]
    return [transcript(batch, i, samples[i], tokenizer) for i in rows]


def roll_out(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
             samples_per_task: int, first_task: int = 0) -> TrajectoryBatch:
    """`samples_per_task` episodes of every task, ordered by task, with a progress bar over the
    episodes (on stderr, and only on a terminal); `first_task` is the index of task_ids[0] among
    all the tasks evaluated (a process's share: its episodes keep their keys)."""
    with tqdm(total=len(task_ids) * samples_per_task, desc="eval", unit="episode", disable=None,
              leave=False) as bar:
        return sample_independent(engine, params, rng, task_ids, samples_per_task, bar.update,
                                  first_task)


def roll_out_shared(engine: SlotEngine, params, rng: jax.Array, task_ids: Sequence[int],
                    samples_per_task: int) -> TrajectoryBatch:
    """`roll_out` of all `task_ids`; in a multi-process job each process plays its share of the
    tasks and every process returns the joined batch (the same on all, ordered by task)."""
    if not distributed.is_multiprocess():
        return roll_out(engine, params, rng, task_ids, samples_per_task)
    blocks = distributed.shares(len(task_ids))
    mine = blocks[jax.process_index()]
    batch = roll_out(engine, params, rng, list(task_ids)[mine.start:mine.stop],
                     samples_per_task, mine.start)
    return join_shares(distributed.allgather_objects(batch), [b.start for b in blocks],
                       engine.tokenizer.pad_id)


def evaluate(engine: SlotEngine, params, config: EvalConfig) -> EvalResult:
    """The metrics of the policy `params` on the held-out tasks of `config` (`num_tasks` fixed
    seeds x `samples_per_task` episodes, sampled with key(`config.seed`)), rolled out by `engine`
    (whose sampling config should carry `config.temperature`), and `config.transcripts` of its
    episodes as text (`pick_transcripts`)."""
    batch = roll_out_shared(engine, params, jax.random.key(config.seed),
                            eval_seeds(config.num_tasks), config.samples_per_task)
    return EvalResult(metrics(summaries_from_batch(batch), config.samples_per_task),
                      pick_transcripts(batch, engine.tokenizer, config.transcripts))


def evaluation_engine(model_config, tokenizer: Tokenizer, make_env: Callable[[], TextEnv],
                      rollout: RolloutConfig, config: EvalConfig) -> SlotEngine:
    """A slot engine for held-out evaluation: `rollout`'s settings sampling at
    `config.temperature`, recording the labels the metrics read (EVAL_LABELS)."""
    sampling = SamplingConfig(config.temperature, rollout.sampling.top_k, rollout.sampling.top_p)
    return SlotEngine(model_config, tokenizer, make_env,
                      dataclasses.replace(rollout, sampling=sampling), TurnLabeler(EVAL_LABELS))


class Evaluator:
    """The held-out evaluation of a run: `evaluator(params)` -> EvalResult (`evaluate` on its
    own engine, `evaluation_engine`)."""

    def __init__(self, model_config, tokenizer: Tokenizer, make_env: Callable[[], TextEnv],
                 rollout: RolloutConfig, config: EvalConfig):
        self.config = config
        self.engine = evaluation_engine(model_config, tokenizer, make_env, rollout, config)

    def __call__(self, params) -> EvalResult:
        return evaluate(self.engine, params, self.config)


def _printable(text: str) -> str:
    """`text` with control characters escaped: a sampling policy can write any byte, and raw
    control bytes garble terminals and editors."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def transcript_text(t: Transcript) -> str:
    """A header line, then the prompt and every action and reply."""
    lines = [f"=== task {t.task_id} sample {t.sample}: {'success' if t.success else 'failure'}, "
             f"return {t.episode_return:g}, {t.num_turns} turns, ended {t.end_reason}",
             "--- prompt", _printable(t.prompt)]
    for number, turn in enumerate(t.turns, 1):
        lines += [f"--- action {number}", _printable(turn["action"])]
        if turn["reply"] is not None:
            lines += [f"--- reply {number}", _printable(turn["reply"])]
    return "\n".join(lines) + "\n"


def write_transcripts(directory: str, name: str,
                      transcripts: Sequence[Transcript]) -> tuple[str, str]:
    """Writes `<directory>/<name>.jsonl` (one JSON object per episode) and `<directory>/<name>.txt`
    (readable); returns their paths."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, name)
    with open(base + ".jsonl", "w") as f:
        for t in transcripts:
            f.write(json.dumps(dataclasses.asdict(t)) + "\n")
    with open(base + ".txt", "w") as f:
        f.write("\n".join(transcript_text(t) for t in transcripts))
    return base + ".jsonl", base + ".txt"
