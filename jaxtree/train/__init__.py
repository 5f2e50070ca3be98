"""Training: the RL update step, the trainer loop, the supervised warm start, metrics, plots."""
