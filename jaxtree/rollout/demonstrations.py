"""Oracle demonstrations for the warm start, with a rate ε of random actions.

A demonstration is framed exactly like a rollout (`conversation`), so the warm-started policy sees
the same tokens at training and rollout time. With probability ε a turn plays a uniformly random
legal action instead of the oracle's: the demonstrations, and the policy imitating them, are
decent but far from perfect, as the instruct models the papers start from are.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from environments.base import TextEnv
from jaxtree.rollout import conversation
from jaxtree.tokenizers import Tokenizer


@dataclasses.dataclass
class Demonstration:
    tokens: list[int]
    loss_mask: list[bool]   # True on the demonstrated actions' tokens (end-of-turn included)
    success: bool
    num_turns: int


def demonstrate(env: TextEnv, tokenizer: Tokenizer, seed: int, epsilon: float,
                rng: np.random.Generator, max_tokens: int) -> Demonstration:
    """Plays the task `seed` with the ε-noisy oracle, stopping before `max_tokens` is exceeded."""
    env.reset(seed)
    tokens = conversation.first_turn_tokens(tokenizer, env)
    mask = [False] * len(tokens)
    success, turns = False, 0
    while not env.done:
        action = env.random_action(rng) if rng.random() < epsilon else env.oracle_action()
        text = env.answer_text(action)
        answer = conversation.action_tokens(tokenizer, text)
        if len(tokens) + len(answer) > max_tokens:
            break
        tokens += answer
        mask += [True] * len(answer)
        observation, _, done, info = env.step(text)
        turns += 1
        success = bool(info["success"])
        if not done:
            following = conversation.next_turn_tokens(tokenizer, observation)
            if len(tokens) + len(following) > max_tokens:
                break
            tokens += following
            mask += [False] * len(following)
    return Demonstration(tokens, mask, success, turns)
