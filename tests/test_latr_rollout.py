"""LATR as a rollout strategy: hybrid schedules, trajectory batches from trees, validation."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import environments
from jaxtree import models
from jaxtree.rollout import RolloutConfig, conversation
from jaxtree.rollout.strategies import (STRATEGIES, LatrRolloutConfig, RolloutContext, eta_at,
                                        num_tree_slots, sample_latr)
from jaxtree.sampling.latr import FRESH, TREE
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.tokenizers import ByteTokenizer
from test_latr import peaky_model

REFERENCE_SCHEDULE = ((0, 1.0), (10, 0.75), (20, 0.5), (80, 0.25), (200, 0.0))


def test_eta_schedules_and_tree_slot_counts():
    assert [eta_at(s, schedule=REFERENCE_SCHEDULE) for s in (0, 9, 10, 19, 20, 79, 80, 199, 200,
                                                              5000)] == \
        [1.0, 1.0, 0.75, 0.75, 0.5, 0.5, 0.25, 0.25, 0.0, 0.0]
    assert eta_at(0, 1.0, 0.985) == 1.0
    assert eta_at(100, 1.0, 0.985) == pytest.approx(0.985 ** 100)
    # Eq. 9: round to the nearest integer
    assert [num_tree_slots(e, 8) for e in (1.0, 0.75, 0.5, 0.25, 0.0, 0.22, 0.19)] == \
        [8, 6, 4, 2, 0, 2, 2]


def test_latr_rollouts_become_a_consistent_trajectory_batch():
    config, params = peaky_model()
    tokenizer = ByteTokenizer()
    make_env = lambda: environments.make("countdown", style="compact")  # noqa: E731
    settings = LatrRolloutConfig(tau_abs=0.15, tau_rel=0.5, tau_ed=0.6, windows=(2, 4))
    context = RolloutContext(config, tokenizer, make_env, RolloutConfig(
        context_length=64, max_action_tokens=16, sampling=SamplingConfig(temperature=1.0)), 4)
    tasks = [11, 12, 13]
    batch, stats = sample_latr(context, settings, params, jax.random.key(0), tasks, 3)
    assert len(batch) == 12
    chex.assert_shape([batch.tokens, batch.action_mask, batch.behaviour_logprobs],
                      (12, batch.tokens.shape[1]))
    chex.assert_shape([batch.turn_verified, batch.state_signatures, batch.node_ids], (12, 1))
    assert batch.group_ids.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert batch.task_ids.tolist() == [t for t in tasks for _ in range(4)]
    assert stats["latr/tree_slots"] == 3 and stats["latr/branches_per_group"] > 0
    env = make_env()
    for i in range(len(batch)):
        env.reset(int(batch.task_ids[i]))
        prompt = conversation.first_turn_tokens(tokenizer, env)
        tokens = batch.tokens[i, :batch.lengths[i]]
        assert tokens[:len(prompt)].tolist() == prompt
        mask = batch.action_mask[i, :batch.lengths[i]]
        assert not mask[:len(prompt)].any() and mask[len(prompt):].all()
        # the reward is the environment's verdict on the decoded action
        action = tokens[len(prompt):].tolist()
        ended = action[-1] in (s[0] for s in tokenizer.assistant_stop_sequences)
        _, reward, _, info = env.step(conversation.action_text(tokenizer, action, ended))
        assert batch.outcome_reward[i] == pytest.approx(reward)
        assert batch.success[i] == info["success"]
        # the verifier label and signatures are recorded as for the slot engine's episodes
        assert batch.num_turns[i] == 1 and not np.isnan(batch.turn_verified[i, 0])
        assert batch.state_signatures[i, 0] is not None
        # behaviour log-probs are the policy's (teacher-forced, temperature 1)
        logp = jax.nn.log_softmax(models.forward(config, params, jnp.asarray(tokens[None]))[0],
                                  axis=-1)
        for t in np.flatnonzero(mask):
            assert batch.behaviour_logprobs[i, t] == pytest.approx(
                float(logp[t - 1, tokens[t]]), abs=1e-4)
        # tree metadata: a branch points at an episode of its own group
        if batch.parent_ids[i] >= 0:
            parent = int(batch.parent_ids[i])
            assert batch.group_ids[parent] == batch.group_ids[i]
            assert batch.infos[i]["latr_origin"] == TREE and batch.fork_turns[i] == 0
            assert batch.infos[i]["latr_birth"] >= 0
            assert batch.depth[i] == batch.depth[parent] + 1
        else:
            assert batch.depth[i] == 0
        if batch.infos[i]["latr_origin"] == FRESH:
            # a completion (even one continuing a copy of another sample) is not a tree branch
            assert batch.parent_ids[i] == -1 and batch.infos[i]["latr_birth"] == -1
    assert stats["latr/forked_rows"] == sum(info["latr_fork_position"] >= 0
                                            for info in batch.infos)


def test_latr_strategy_needs_a_single_turn_environment():
    from jaxtree.config import ConfigError
    from jaxtree.experiment import Experiment, rl_config, sibling_config
    from jaxtree.rollout.strategies import build_strategy
    from test_trainer import CONFIG_FILE
    config, _ = peaky_model()

    def build(name, **overrides):
        cfg = rl_config(sibling_config(CONFIG_FILE, name), "grpo",
                        {"rollout.strategy": "latr", **overrides})
        exp = Experiment.from_config(cfg)
        return build_strategy(exp.rollout, config, ByteTokenizer(), exp.env.factory())

    with pytest.raises(ConfigError, match=r"rollout\.strategy: 'latr' branches inside one"):
        build("frozen_lake_sft")
    assert isinstance(build("countdown_sft"), STRATEGIES.part("latr").build)
    with pytest.raises(ConfigError, match=r"rollout\.latr\.completion: 'copy' is not one of"):
        build("countdown_sft", **{"rollout.latr.completion": "copy"})
