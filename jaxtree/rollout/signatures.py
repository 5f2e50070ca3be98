"""State signatures: how a turn's state is named in tables that pool rollouts (RTMC, VPR's state
groups).

A signature function maps the environment before the action, and the episode's turns so far, to
a string; equal strings are the same state:

    signature_fn(env, history) -> str        # history: the episode's earlier TurnRecords

`config.rollout.signature` picks one by name; a rollout whose experiment reads the
`state_signature` label records it for every turn (`jaxtree.rollout.labels`). Task-specific or
learned signatures (RTMC §4's SWE signatures) register here, with the labels of the history
they read:

    @SIGNATURES.register("my_signature", reads=("action_signature",))
    def my_signature(settings: None):
        return lambda env, history: ...

Built-ins:
  env       the environment's own `state_signature()`: the step index and the canonical state,
            so a signature occurs at most once per episode while equal states at equal depth
            match across rollouts (first visit by construction).
  state     the canonical state alone: equal states match at any depth, and a state an episode
            returns to repeats within it (RTMC enforces first visit itself).
  history   the canonical texts of the actions taken so far: every node of the rollout tree is
            its own state (RTMC then reduces to a prefix tree of action sequences).
"""

from __future__ import annotations

from typing import Callable, Sequence

from environments.base import TextEnv
from jaxtree.config import Registry
from jaxtree.rollout.trajectory import TurnRecord

SIGNATURES = Registry("state signature")

SignatureFn = Callable[[TextEnv, Sequence[TurnRecord]], str]


@SIGNATURES.register("env")
def env_signature(settings: None) -> SignatureFn:
    """The environment's state_signature(): step index and canonical state."""
    del settings
    return lambda env, history: env.state_signature()


@SIGNATURES.register("state")
def state_signature(settings: None) -> SignatureFn:
    """The canonical state without the step index (equal states match at any depth)."""
    del settings
    return lambda env, history: env.canonical_state()


@SIGNATURES.register("history", reads=("action_signature",))
def history_signature(settings: None) -> SignatureFn:
    """The actions taken so far (each tree node its own state)."""
    del settings
    return lambda env, history: "|".join(turn.action_signature for turn in history)


def signature_function(name: str) -> SignatureFn:
    """The registered signature function `name`."""
    return SIGNATURES.build(name, None)
