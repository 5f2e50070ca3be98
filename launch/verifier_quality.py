"""Label quality of the Tic-Tac-Toe verifiers (VPR Table 5's oracles): exact minimax vs MCTS-N.

    python -m launch.verifier_quality [--states=150] [--simulations=100,1000,10000] [--repeats=5]

States: the agent's turn after 0-3 uniformly random moves from held-out games (more than one
legal move). Every legal move of each state is labelled by each verifier. Prints, per verifier:
the moves accepted per state; the share of accepted moves that are minimax-optimal (keep the
game-theoretic value); and, for MCTS, how often the same state labelled under `--repeats`
different episode seeds gets the same accepted set (the search is seeded by the episode, so two
rollouts of a group can disagree about one state).
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
from absl import flags

import environments
from jaxtree.tasks import eval_seeds
from jaxtree.utils import print_table
from launch.common import fail, run_app

_STATES = flags.DEFINE_integer("states", 150, "States to label.", lower_bound=1)
_SIMULATIONS = flags.DEFINE_list("simulations", ["100", "1000", "10000"],
                                 "MCTS simulation budgets N to compare with the exact verifier.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Episode seeds per state for the agreement column.",
                                lower_bound=2)
_AGREEMENT_STATES = 60   # the agreement column labels each state repeats x: fewer states


def sample_states(count: int, rng: np.random.Generator) -> list:
    """Environments at the agent's turn after 0-3 random moves (>1 legal move)."""
    states = []
    for seed in eval_seeds(50 * count):
        if len(states) == count:
            break
        env = environments.make("tictactoe", style="compact")
        env.reset(seed)
        done = False
        for _ in range(int(rng.integers(0, 4))):
            _, _, done, _ = env.step(env.answer_text(env.random_action(rng)))
            if done:
                break
        if not done and len(env.legal_actions()) > 1:
            states.append(env)
    return states


def accepted(state, oracle: str, simulations: int, seed: int | None = None) -> frozenset:
    """The legal moves `state` accepts under the verifier (oracle, simulations[, episode seed])."""
    env = state.clone()
    env.oracle, env.oracle_simulations = oracle, simulations
    if seed is not None:
        env.seed = seed
    return frozenset(a for a in state.legal_actions() if env.verify(a))


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    try:
        budgets = [int(n) for n in _SIMULATIONS.value]
    except ValueError:
        fail(f"--simulations must be integers, got {','.join(_SIMULATIONS.value)}")
    states = sample_states(_STATES.value, np.random.default_rng(0))
    optimal = [accepted(s, "minimax", 1) for s in states]
    rows = []
    for oracle, n in [("minimax", 1)] + [("mcts", n) for n in budgets]:
        start = time.perf_counter()
        labels = [accepted(s, oracle, n) for s in states]
        sizes = [len(x) for x in labels]
        good = sum(len(x & o) for x, o in zip(labels, optimal)) / max(sum(sizes), 1)
        agreement = 1.0
        if oracle == "mcts":
            shares = []
            for s in states[:_AGREEMENT_STATES]:
                sets = Counter(accepted(s, oracle, n, 10_000 + 17 * k)
                               for k in range(_REPEATS.value))
                shares.append(max(sets.values()) / _REPEATS.value)
            agreement = float(np.mean(shares))
        rows.append(["exact (minimax)" if oracle == "minimax" else f"MCTS N={n}",
                     f"{np.mean(sizes):.2f}", f"{good:.3f}", f"{agreement:.3f}",
                     f"{time.perf_counter() - start:.0f}"])
    print(f"{len(states)} states of the agent's turn after 0-3 random moves")
    print_table(["verifier", "accepted per state", "accepted that are optimal",
                 f"agreement over {_REPEATS.value} seeds", "seconds"], rows)


if __name__ == "__main__":
    run_app(main)
