"""LATR as a rollout strategy for single-turn tasks (Countdown): one tree per task, on device.

Each task's first prompt (the same framing as the slot engine's, `conversation.first_turn_tokens`)
is one LATR group of k = group_size slots; `num_tree_slots` of them run the tree and the rest plain
sampling (hybrid rollout, LATR §3.3). Every returned row is played as the episode's single action
and assembled into the usual TrajectoryBatch, so advantages, losses and the trainer need nothing
LATR-specific. Tree metadata: a branch's `parent_ids` is the episode id of its parent slot and
`fork_turns` is 0 (LATR forks inside the first action); the token step of the branch, the row's
origin (tree / plain / fresh / duplicate) and, for a fresh row that continued a copy of another
sample, the position of its first own token are in its `info`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from environments.base import TextEnv
from jaxtree.models.config import ModelConfig
from jaxtree.rollout import conversation
from jaxtree.rollout.trajectory import EpisodeRecord, TrajectoryBatch, assemble
from jaxtree.sampling.latr import FRESH, LatrConfig, latr_generate_jit
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.tokenizers import Tokenizer

PROMPT_MULTIPLE = 32  # prompt widths are padded to a multiple of this: few compiled shapes


def num_tree_slots(eta: float, k: int) -> int:
    """LATR Eq. 9: k_LATR = round(η·k) (to the nearest integer), clipped to [0, k]."""
    return int(min(max(round(eta * k), 0), k))


def eta_at(step: int, eta0: float = 1.0, gamma: float = 1.0,
           schedule: Sequence[tuple[int, float]] = ()) -> float:
    """η at a training step: a piecewise-constant schedule {from_step: η} when given (the
    reference code's Countdown schedule is {0: 1, 10: 0.75, 20: 0.5, 80: 0.25, 200: 0}), else
    LATR Eq. 10, η0·γ^step."""
    if schedule:
        value = schedule[0][1]
        for start, eta in sorted(schedule):
            if step >= start:
                value = eta
        return float(value)
    return float(eta0 * gamma ** step)


def sample_latr(model_config: ModelConfig, tokenizer: Tokenizer, make_env: Callable[[], TextEnv],
                params, rng: jax.Array, task_ids: Sequence[int], latr: LatrConfig,
                tree_slots: int, sampling: SamplingConfig,
                max_new_tokens: int) -> tuple[TrajectoryBatch, dict[str, float]]:
    """k = latr.k rollouts of each task (group g = task_ids[g]); returns (batch, tree stats)."""
    stops = tokenizer.assistant_stop_sequences
    if any(len(s) != 1 for s in stops):
        raise ValueError("LATR rollouts need single-token stop sequences (the tree ends a branch "
                         f"on a token); this tokenizer's are {stops}")
    envs, prompts = [], []
    for task in task_ids:
        env = make_env()
        env.reset(task)
        envs.append(env)
        prompts.append(conversation.first_turn_tokens(tokenizer, env))
    width = -(-max(len(p) for p in prompts) // PROMPT_MULTIPLE) * PROMPT_MULTIPLE
    prompt_tokens = np.full((len(prompts), width), tokenizer.pad_id, np.int32)
    for g, p in enumerate(prompts):
        prompt_tokens[g, :len(p)] = p
    out = jax.device_get(latr_generate_jit(
        model_config, latr, sampling, max_new_tokens, tokenizer.pad_id, params,
        jnp.asarray(prompt_tokens), jnp.asarray([len(p) for p in prompts], jnp.int32),
        jnp.arange(len(prompts), dtype=jnp.int32), jnp.int32(tree_slots), rng,
        jnp.asarray([s[0] for s in stops], jnp.int32)))

    k = latr.k
    records = []
    for g, (task, env, prompt) in enumerate(zip(task_ids, envs, prompts)):
        for j in range(k):
            n = int(out.lengths[g, j])
            action = out.tokens[g, j, :n].tolist()
            ended = bool(out.finished[g, j])
            play = env.clone()
            _, reward, done, info = play.step(conversation.action_text(tokenizer, action, ended))
            parent = int(out.parent[g, j])
            origin = int(out.origin[g, j])
            info = dict(info, latr_origin=origin, latr_birth=int(out.birth[g, j]),
                        latr_fork_position=int(out.fork_position[g, j]))
            tree_child = parent >= 0 and origin != FRESH and out.birth[g, j] >= 0
            records.append(EpisodeRecord(
                tokens=np.asarray(prompt + action, np.int32),
                action_mask=np.asarray([False] * len(prompt) + [True] * n),
                logprobs=np.concatenate([np.zeros(len(prompt), np.float32),
                                         out.logprobs[g, j, :n]]).astype(np.float32),
                turn_index=np.zeros(len(prompt) + n, np.int32), rewards=[float(reward)],
                valid=[bool(info["valid"])], verified=[float("nan")],
                success=bool(info.get("success", False)),
                truncated=bool(info.get("truncated")) or not done,
                num_invalid=int(not info["valid"]), task_id=int(task), group_id=g,
                episode_id=g * k + j, parent_id=g * k + parent if tree_child else -1,
                fork_turn=0 if tree_child else -1, info=info))
    generated = max(int(out.mask.sum()), 1)
    stats = {
        "latr/tree_slots": tree_slots,
        "latr/saturation_length": float(out.tree_end_step.mean()),
        "latr/branching_ratio": float(out.num_branches.sum()) / generated,
        "latr/branches_per_group": float(out.num_branches.mean()),
        "latr/prunes_per_group": float(out.num_prunes.mean()),
        "latr/completed_rows": int((out.origin >= FRESH).sum()),
        "latr/forked_rows": int((out.fork_position >= 0).sum()),
        "latr/forwards": int(out.forwards.sum()),
    }
    return assemble(records, tokenizer.pad_id), stats
