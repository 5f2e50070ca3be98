"""Host-side text environments for agent training (plain Python and numpy; importing them never
imports JAX). Each environment renders observations as text, parses the model's action text, and
carries what the tree-rollout methods need: oracle actions, verifiers, process scores and state
signatures. The protocol is documented in `environments/base.py` and `environments/README.md`.

    import environments
    env = environments.make("frozen_lake", size=4, style="compact")
"""

from environments.base import STYLES, EnvNotResetError, TextEnv, extract_answer
from environments.registry import env_class, make, names, register

__all__ = ["STYLES", "EnvNotResetError", "TextEnv", "env_class", "extract_answer", "make", "names",
           "register"]
