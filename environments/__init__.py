"""Host-side text environments for agent training (plain Python and numpy; importing them never
imports JAX). Each environment renders observations as text, parses the model's action text, and
carries what the tree-rollout methods need: oracle actions, verifiers, process scores and state
signatures."""
