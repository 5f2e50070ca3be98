"""What MC-PR's process rewards reward: r_t = V(s_{t+1}) - V(s_t) against the verifier's labels.

    python -m launch.mc_labels --config=configs/sudoku4_grpo.py --checkpoint=<policy> \
        [--config.rollout.mc_values.continuations=4] [--output=labels.json]

Rolls out one training step's batch (`rollout.groups_per_step` held-out tasks x
`rollout.group_size` episodes) with the `mc_values` strategy (m continuations forked at every
visited state), turns the values into MC-PR's turn rewards (`reward.mc_process`) and sets each
move's reward beside what the environment says of the same move: the verifier's label
(the `verified` label, VPR's r_t) and its legality (`turn_valid`). Moves fall into three kinds:
verified, legal but not verified, illegal (or malformed). The table gives each kind's share, its
mean reward and sign shares, and three AUCs, the probability that a move of one kind gets a
larger r_t than a move of the other (ties count half): verified vs the rest, legal-unverified vs
illegal, verified vs legal-unverified. An AUC near 0.5 says MC-PR's reward does not tell the two
kinds apart; VPR's own labels separate verified moves from the rest by construction.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
from absl import flags
from ml_collections import config_flags

from jaxtree.experiment import Experiment
from jaxtree.rewards.mc_process import label_agreement, mc_process_rewards
from jaxtree.rollout.engine import SlotEngine
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.strategies.mc_values import sample_with_values
from jaxtree.tasks import eval_seeds
from jaxtree.utils import print_table
from launch.common import fail, load_named_policy, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file (its env, "
                                          "rollout shape and rollout.mc_values.continuations).",
                                          lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Policy whose moves are labelled "
                                  "(default: config.model.name).")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path (default: none).")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed of the rollouts.")


def run(config, checkpoint: str | None, output: str | None, seed: int) -> dict:
    exp = Experiment.from_config(config)
    stage = exp.rollout
    m = stage.part_settings("mc_values").continuations
    tasks = eval_seeds(stage.groups_per_step)
    episodes = stage.groups_per_step * stage.group_size
    policy = load_named_policy("--checkpoint", lambda: exp.model.load(checkpoint))
    engine = SlotEngine(policy.config, policy.tokenizer, exp.env.factory(), dataclasses.replace(
        stage.engine(), num_slots=episodes * (1 + m)), TurnLabeler(("verified",)))
    start = time.perf_counter()
    batch, cost = sample_with_values(engine, policy.params, jax.random.key(seed), tasks,
                                     stage.group_size, m)
    seconds = time.perf_counter() - start
    result = label_agreement(mc_process_rewards(batch), batch.label("verified"), batch.turn_valid,
                             batch.played)
    print(f"MC-PR turn rewards of {policy.source} on {exp.env.name}: {len(tasks)} held-out tasks "
          f"x {stage.group_size} episodes, m = {m} continuations ({seconds:.0f}s; "
          f"{cost['mc/continuation_steps']:.0f} continuation moves for "
          f"{cost['mc/main_steps']:.0f} policy moves); {result['moves']} moves, "
          f"{result['positive']:.1%} with r_t > 0")
    print_table(["move", "count", "share", "mean r_t", "r_t > 0", "r_t < 0"],
                [[name, str(k["count"]), f"{k['share']:.3f}", f"{k['mean']:+.4f}",
                  f"{k['positive']:.3f}", f"{k['negative']:.3f}"]
                 for name, k in result["kinds"].items()])
    print_table(["AUC of r_t", "value"], [[name, f"{v:.3f}"] for name, v in
                                          result["auc"].items()])
    result.update({"checkpoint": policy.source, "env": exp.env.to_dict(), "continuations": m,
                   "tasks": len(tasks), "group_size": stage.group_size, "seed": seed,
                   "seconds": seconds, **cost})
    if output is not None:
        with open(output, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {output}")
    return result


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    run(_CONFIG.value, _CHECKPOINT.value, _OUTPUT.value, _SEED.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
