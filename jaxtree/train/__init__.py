"""Training: supervised warm start, checkpoints (the RL update step joins here)."""
