"""How an episode becomes tokens: the same framing for rollouts and for demonstrations.

Turn 0 is the chat-templated first prompt (system message in chat style only); every later turn
appends `tokenizer.continue_chat(observation)`; an action is the policy's tokens up to and including
its end-of-turn token. Warm-start demonstrations use these functions too, so the tokens a policy is
trained on are exactly the tokens it sees and produces in rollouts.
"""

from __future__ import annotations

from typing import Callable, Sequence

from environments.base import TextEnv
from jaxtree.config import ConfigError
from jaxtree.tokenizers import Tokenizer


def first_turn_tokens(tokenizer: Tokenizer, env: TextEnv) -> list[int]:
    """The templated first prompt: instructions and initial observation, ready for the reply."""
    messages = [{"role": "user", "content": env.prompt()}]
    if env.style == "chat" and env.system_prompt:
        messages.insert(0, {"role": "system", "content": env.system_prompt})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)


def next_turn_tokens(tokenizer: Tokenizer, observation: str, close_turn: bool = False) -> list[int]:
    """Tokens appended after an action: the observation as a new user turn, then the opening of
    the next reply. close_turn prepends the end-of-turn token, for an action that was cut off by
    the token limit before the policy ended its turn."""
    closing = [tokenizer.end_of_turn_id] if close_turn else []
    return closing + tokenizer.continue_chat(observation)


def action_tokens(tokenizer: Tokenizer, text: str) -> list[int]:
    """A demonstrated action as the policy would write it: the text, then end-of-turn."""
    return tokenizer.encode(text) + [tokenizer.end_of_turn_id]


def action_text(tokenizer: Tokenizer, tokens: list[int], ended: bool) -> str:
    """The text of generated action tokens; `ended`: the last token is a stop token to drop."""
    return tokenizer.decode(tokens[:-1] if ended and tokens else tokens)


def check_prompts_fit(make_env: Callable[[], TextEnv], tokenizer: Tokenizer, context_length: int,
                      max_action_tokens: int, seeds: Sequence[int]) -> int:
    """Raises ConfigError naming `rollout.context_length` when the first prompt of a task (of
    `seeds`) leaves no room for one action of `max_action_tokens` tokens: every rollout would
    end before its first action and a warm start would train on nothing. Returns the longest
    prompt's length. A check at launch, before any work."""
    env = make_env()
    longest = 0
    for seed in seeds:
        env.reset(seed)
        longest = max(longest, len(first_turn_tokens(tokenizer, env)))
    if longest + max_action_tokens > context_length:
        raise ConfigError("rollout.context_length",
                          f"{context_length} is too short: the environment's first prompt takes "
                          f"{longest} tokens, plus rollout.max_action_tokens={max_action_tokens} "
                          f"for one action needs at least {longest + max_action_tokens}")
    return longest
