"""jaxtree: reinforcement learning of LLM agents with tree-structured rollouts, in JAX/Flax."""

__version__ = "0.1.0"
