"""PATR's adaptive tree rollout (Alg. 1) and Tree-Random: the decision rule against a plain-Python
transcription of the paper, and the tree the slot engine grows against the decisions it logged."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import environments
from jaxtree.advantages import build_advantage
from jaxtree.config import ConfigError
from jaxtree.experiment import Experiment, default_config, set_path
from jaxtree.rewards import build_rewards
from jaxtree.rollout import RolloutConfig, SlotEngine
from jaxtree.rollout.strategies import build_strategy
from jaxtree.rollout.labels import TurnLabeler
from jaxtree.rollout.strategies.patr import (PatrConfig, expand_and_prune, sample_patr,
                                             trailing_repeats)
from jaxtree.rollout.trajectory import NO_PARENT, PRUNED
from jaxtree.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
LABELER = TurnLabeler(("action_signature",))


def reference_decide(scores, repeats, k, alpha, theta):
    """PATR Alg. 1 lines 7-8, written from the paper: E = the k highest scores (earlier branch
    first on ties); L = the branches outside E whose score is below the median of all active
    scores minus alpha (Eq. 5) or that repeated one action theta times."""
    n = len(scores)
    remaining = list(range(n))
    expand = []
    for _ in range(min(k, n)):
        best = remaining[0]
        for i in remaining:
            if scores[i] > scores[best]:
                best = i
        expand.append(best)
        remaining.remove(best)
    ordered = sorted(scores)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    prune = [i for i in range(n) if i not in expand
             and (scores[i] < median - alpha or repeats[i] >= theta)]
    return expand, prune


def test_trailing_repeats():
    assert trailing_repeats([]) == 0
    assert trailing_repeats(["a"]) == 1
    assert trailing_repeats(["a", "b", "b", "b"]) == 3
    assert trailing_repeats(["b", "b", "a"]) == 1


def test_expand_and_prune_on_a_hand_checked_case():
    # median of (0.9, 0.2, 0.6, 0.0, 0.6) is 0.6; with alpha 0.5 the floor is 0.1: only 0.0 is
    # below it. Top-2: 0.9 (branch 0), then the older of the two 0.6 (branch 2). Branch 4
    # repeated its action 3 times (theta 3) and is pruned too; branch 1 survives.
    settings = PatrConfig(expand_top_k=2, prune_margin=0.5, repeat_limit=3)
    expand, prune = expand_and_prune([0.9, 0.2, 0.6, 0.0, 0.6], [1, 1, 2, 1, 3], settings,
                           np.random.default_rng(0))
    assert expand == [0, 2] and prune == [3, 4]


def test_expand_and_prune_equals_the_plain_python_transcription_on_random_inputs():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 9))
        # coarse scores make ties common
        scores = list(rng.integers(0, 5, n) / 4.0)
        repeats = list(rng.integers(0, 5, n))
        k, alpha, theta = int(rng.integers(0, 4)), float(rng.choice([0.0, 0.25, 0.5])), 3
        settings = PatrConfig(expand_top_k=k, prune_margin=alpha, repeat_limit=theta)
        got = expand_and_prune(scores, repeats, settings, np.random.default_rng(1))
        assert got == reference_decide(scores, repeats, k, alpha, theta), (scores, repeats, k)


def test_tree_random_expands_uniformly_and_prunes_only_repeats():
    settings = PatrConfig(expand_top_k=2, repeat_limit=3, selection="random")
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(2000):
        # scores would prune branch 3 and expand 0 and 1 under PATR; Tree-Random ignores them
        expand, prune = expand_and_prune([1.0, 1.0, 0.5, 0.0], [1, 1, 1, 3], settings, rng)
        assert len(set(expand)) == 2 and prune == ([3] if 3 not in expand else [])
        counts[expand] += 1
    np.testing.assert_allclose(counts / 2000, 0.5, atol=0.05)


@pytest.fixture(scope="module")
def engine(tiny):
    config, _ = tiny
    # tests/test_rollout.py's engine shapes (shared compilations).
    return SlotEngine(config, TOK, lambda: environments.make("frozen_lake", style="compact"),
                      RolloutConfig(num_slots=16, context_length=256, max_action_tokens=6,
                                    max_turns=6), TurnLabeler(("action_signature",)))


def episode_scorer(episodes):
    """A fixed pseudo-random score per (branch, turn): varied, reproducible, no model needed."""
    return np.array([(e.episode_id * 7919 + e.num_turns * 104729) % 97 / 96 for e in episodes])


@pytest.mark.parametrize("group", ["keep_all", "best_n"])
def test_the_tree_follows_its_logged_decisions(tiny, engine, group):
    """Every scoring point decides as the transcription does; every accepted expansion adds M - 1
    children forked at that turn with the parent's history; every pruned branch ends there,
    PRUNED, and stays in the group only under keep_all; the tree never exceeds its budget."""
    _, params = tiny
    settings = PatrConfig(initial_branches=3, children=3, expand_top_k=1, interval=2,
                          prune_margin=0.1, repeat_limit=3, max_branches=6, group=group)
    decisions = []
    batch, metrics = sample_patr(engine, params, jax.random.key(3), [5, 9], settings,
                                 episode_scorer, decisions)
    rows = {int(e): i for i, e in enumerate(batch.episode_ids)}
    children_of, pruned = {}, set()
    for d in decisions:
        assert d["turn"] % settings.interval == 0
        index = {e: i for i, e in enumerate(d["branches"])}
        expand, prune = reference_decide(d["scores"], d["repeats"], 1, 0.1, 3)
        assert d["expanded"] == [d["branches"][i] for i in expand]
        assert d["pruned"] == [d["branches"][i] for i in prune]
        for e in d["branches"]:
            if e in rows:   # the logged repeats are the branch's recorded actions
                signatures = list(batch.labels["action_signature"][rows[e], :d["turn"]])
                assert d["repeats"][index[e]] == trailing_repeats(signatures)
        for e in d["pruned"]:
            pruned.add(e)
            if group == "keep_all":
                assert batch.end_reason[rows[e]] == PRUNED
                assert batch.num_turns[rows[e]] == d["turn"]
            else:
                assert e not in rows
        for e in d["expanded"]:
            if e not in d["refused"]:
                children_of[(e, d["turn"])] = []
    for i in range(len(batch)):
        if batch.parent_ids[i] != NO_PARENT:
            key = (int(batch.parent_ids[i]), int(batch.fork_turns[i]))
            assert key in children_of
            children_of[key].append(i)
            parent = rows.get(key[0])
            if parent is not None:  # the child's history up to the fork is its parent's
                np.testing.assert_array_equal(batch.labels["action_signature"][i, :key[1]],
                                              batch.labels["action_signature"][parent, :key[1]])
    if group == "keep_all":
        assert all(len(c) == settings.children - 1 for c in children_of.values())
    sizes = np.bincount(batch.group_ids)
    assert sizes.max() <= settings.max_branches
    if group == "keep_all":
        np.testing.assert_array_equal(
            sizes, [3 + 2 * sum(1 for d in decisions if d["group"] == g
                                for e in d["expanded"] if e not in d["refused"])
                    for g in range(2)])
        assert sum(batch.end_reason == PRUNED) == len(pruned)
    else:
        assert not (batch.end_reason == PRUNED).any()
    # the case exercises every path: accepted and refused expansions, both pruning rules
    assert metrics["patr/expanded"] == len(children_of) > 0 and metrics["patr/refused"] > 0
    assert metrics["patr/pruned_score"] > 0 and metrics["patr/pruned_repeat"] > 0
    assert not engine.records and not engine.slots


def test_arpo_engine_tree_follows_the_policy_entropy(tiny, engine):
    """On the tiny model: each branching point's H is the surprisal of the first k tokens of the
    action just sampled, as the batch records their behaviour log-probs; dH is against the
    root's first action; every fork adds a child at that turn with its parent's history; each
    group holds its budget N."""
    from jaxtree.rollout.strategies.arpo import ArpoConfig, sample_arpo
    config, params = tiny
    settings = ArpoConfig(initial_branches=3, max_branches=6, entropy_tokens=4,
                          entropy_weight=0.5)
    decisions = []
    batch, metrics = sample_arpo(engine, params, jax.random.key(2), [5, 9], settings,
                                 config.vocab_size, decisions)
    rows = {int(e): i for i, e in enumerate(batch.episode_ids)}

    def first_tokens_entropy(row, turn):
        mask = batch.action_mask[row] & (batch.turn_index[row] == turn)
        return -batch.behaviour_logprobs[row][mask][:4].astype(np.float64).sum() / math.log(
            config.vocab_size)

    def root_of(row):
        while batch.parent_ids[row] != NO_PARENT:
            row = rows[int(batch.parent_ids[row])]
        return row

    forked_at = {}
    for d in decisions:
        row = rows[d["episode"]]
        assert d["entropy"] == pytest.approx(first_tokens_entropy(row, d["turn"] - 1), abs=1e-5)
        assert d["delta"] == pytest.approx(d["entropy"] - first_tokens_entropy(root_of(row), 0),
                                           abs=1e-5)
        for child in d["children"]:
            forked_at[child] = (d["episode"], d["turn"])
    assert forked_at and metrics["arpo/forks"] == len(forked_at)
    for i in range(len(batch)):
        if batch.parent_ids[i] == NO_PARENT:
            continue
        parent, turn = forked_at[int(batch.episode_ids[i])]
        assert (int(batch.parent_ids[i]), int(batch.fork_turns[i])) == (parent, turn)
        np.testing.assert_array_equal(batch.labels["action_signature"][i, :turn],
                                      batch.labels["action_signature"][rows[parent], :turn])
    np.testing.assert_array_equal(np.bincount(batch.group_ids), [6, 6])
    assert not engine.records and not engine.slots


def test_too_few_slots_for_the_initial_branches_is_a_clear_error(tiny, engine):
    _, params = tiny
    with pytest.raises(ValueError, match="num_slots=16 cannot start 4 branches for each of 5"):
        sample_patr(engine, params, jax.random.key(0), [1, 2, 3, 4, 5], PatrConfig(),
                    episode_scorer)


def test_bad_settings_fail_at_launch_naming_the_field():
    from jaxtree.train.pipeline import check_experiment
    config = default_config()
    set_path(config, "rollout.strategy", "patr")
    set_path(config, "rollout.patr.max_branches", 2)
    with pytest.raises(ConfigError, match=r"rollout\.patr\.max_branches: 2 is below"):
        Experiment.from_config(config)
    set_path(config, "rollout.patr.max_branches", 8)
    set_path(config, "rollout.groups_per_step", 8)
    set_path(config, "rollout.num_slots", 16)
    with pytest.raises(ConfigError, match=r"rollout\.num_slots: 16 is too few for "
                       r"rollout\.strategy='patr': it needs at least 32"):
        check_experiment(Experiment.from_config(config))
    set_path(config, "rollout.num_slots", 32)
    check_experiment(Experiment.from_config(config))


def test_patr_composes_with_process_credit_by_config_only(tiny):
    """A PATR tree with VPR's verifier rewards and with RTMC's table: the strategy the config
    names builds the batch, and the configured rewards and advantages read it."""
    from jaxtree.train.pipeline import rollout_labels
    model_config, params = tiny
    exps = []
    for reward, advantage in [(("verifier",), "vpr"), (("outcome", "step_validity"), "rtmc")]:
        config = default_config()
        for path, value in {"env.name": "frozen_lake", "env.options": {"style": "compact"},
                            "rollout.strategy": "patr", "rollout.num_slots": 16,
                            "rollout.context_length": 256, "rollout.max_action_tokens": 6,
                            "rollout.max_turns": 6, "rollout.patr.interval": 2,
                            "rollout.patr.max_branches": 6, "reward.terms": reward,
                            "advantage.name": advantage,
                            # the in-process judge (a tiny random model) scores the branches
                            "rollout.patr.scorer": "judge",
                            "rollout.patr.judge": {"max_prompt_tokens": 256}}.items():
            set_path(config, path, value)
        exps.append(Experiment.from_config(config))
    # one tree serves both (with the labels both read): only the reward and advantage differ
    labels = {label for exp in exps for label in rollout_labels(exp)}
    assert {"verified", "state_signature", "action_signature"} <= labels
    strategy = build_strategy(exps[0].rollout, model_config, TOK, exps[0].env.factory(), labels)
    batch, metrics = strategy.sample(params, jax.random.key(1), [2, 4], step=0)
    assert metrics["patr/branches"] >= 4
    for exp in exps:
        rewards = build_rewards(exp.reward)(batch)
        advantages = build_advantage(exp.advantage)(batch, rewards)
        assert advantages.shape == batch.tokens.shape and np.isfinite(advantages).all()
        assert (advantages[~batch.action_mask] == 0).all()


def test_group_metrics_of_variable_size_groups():
    """Tree groups differ in size: pass@group is logged under one name at every step, pass@k
    only when all groups have k rows."""
    import dataclasses
    from test_mc_values import make_batch
    from jaxtree.train.trainer import group_diversity
    batch = make_batch([[0.0]] * 5, [1.0, 0.0, 0.0, 0.0, 0.0])   # success: row 0 only
    varied = dataclasses.replace(batch, group_ids=np.array([0, 0, 0, 1, 1], np.int32))
    metrics = group_diversity(varied)
    assert metrics["rollout/pass@group"] == 0.5 and metrics["rollout/group_size"] == 2.5
    assert not any(k.startswith("rollout/pass@") and k[-1].isdigit() and k != "rollout/pass@1"
                   for k in metrics)
    even = dataclasses.replace(batch.select([0, 1, 2, 3]),
                               group_ids=np.array([0, 0, 1, 1], np.int32))
    metrics = group_diversity(even)
    assert metrics["rollout/pass@2"] == metrics["rollout/pass@group"] == 0.5
    assert "rollout/group_size" not in metrics


# ----------------------------------------------------------------------------- the judge


def played_episode(moves, task=4, episode_id=0):
    """A FrozenLake episode that played `moves` oracle moves, as the engine records it."""
    from jaxtree.rollout.episode import Episode
    episode = Episode(episode_id, task, 0)
    episode.start(lambda: environments.make("frozen_lake", style="compact"), TOK)
    for i in range(moves):
        text = episode.env.answer_text(episode.env.oracle_action())
        episode.play(TOK, TOK.encode(text) + [TOK.end_of_turn_id], True, None, i, LABELER)
    return episode


def test_judge_phase_follows_the_recent_actions():
    from jaxtree.scorers.judge import phase_of
    assert phase_of(["grep -rn foo .", "cat a.py"]) == "diagnosis"
    assert phase_of(["cat a.py", "sed -i s/a/b/ a.py"]) == "editing"
    assert phase_of(["sed -i s/a/b/ a.py", "pytest tests/test_a.py"]) == "verification"
    assert phase_of(["Right", "Down"]) == "default"


def test_judge_reads_the_expected_score_from_the_digit_probabilities(tiny):
    """Batched and padded as the scorer runs it, each branch's judge score equals the formula
    evaluated on unpadded single-row forwards; the blend with the heuristic is Eq. 8."""
    from jaxtree.models import forward
    from jaxtree.policy import Policy
    from jaxtree.scorers.judge import JudgeScorer
    config, params = tiny
    policy = Policy(config, params, TOK, "tiny")
    judge = JudgeScorer(policy, weight=0.7, recent_turns=2, max_prompt_tokens=400)
    episodes = [played_episode(moves, episode_id=i) for i, moves in enumerate([0, 3])]
    got = judge.judge_scores(episodes)
    digits = [TOK.encode(str(d))[0] for d in range(10)]
    for score, episode in zip(got, episodes):
        head = judge.prompt_tokens(episode)
        assert len(head) <= 400
        rows = [head, head + TOK.encode("0.")]
        probs = []
        for row in rows:
            logits = np.asarray(jax.jit(forward, static_argnums=0)(
                config, params, np.asarray([row], np.int32)))[0, -1]
            p = np.exp(logits[digits] - logits[digits].max())
            probs.append(p)
        p01 = probs[0][:2] / probs[0][:2].sum()
        expected = p01[1] + p01[0] * (probs[1] / probs[1].sum()) @ np.arange(10) / 10
        assert score == pytest.approx(expected, abs=1e-5) and 0 <= score <= 1
    heuristic = np.array([e.env.process_score() for e in episodes])
    np.testing.assert_allclose(judge(episodes), 0.7 * got + 0.3 * heuristic, atol=1e-12)
    # only the recent turns are shown; the state is always there
    text = TOK.decode(judge.prompt_tokens(episodes[1]))
    assert "step 2: " in text and "step 3: " in text and "step 1:" not in text
    assert "invalid" not in text and "current state:" in text


def test_judge_scorer_is_configured_under_the_patr_section():
    config = default_config()
    set_path(config, "rollout.strategy", "patr")
    set_path(config, "rollout.patr.scorer", "judge")
    set_path(config, "rollout.patr.judge", {"weight": 0.5, "recent_turns": 4})
    exp = Experiment.from_config(config)
    settings = exp.rollout.part_settings("patr").part_settings("judge")
    assert settings.weight == 0.5 and settings.recent_turns == 4
    set_path(config, "rollout.patr.judge", {"wieght": 0.5})
    with pytest.raises(ConfigError, match=r"rollout\.patr\.judge\.wieght: unknown field"):
        Experiment.from_config(config)


# ----------------------------------------------------------------------------- scripted policy

MOVES = ("Left", "Down", "Right", "Up")


def scripted_move(episode_id, turn, seed=0):
    """The scripted policy: hand-set move probabilities (mostly Right and Down, the way to the
    goal; Up rarely), drawn from a generator keyed by (seed, episode, turn) like the engine's."""
    rng = np.random.default_rng((seed, episode_id, turn))
    return MOVES[rng.choice(4, p=[0.1, 0.4, 0.4, 0.1])]


class ScriptedEngine:
    """The slot engine's interface for tree controllers (begin, add_episode, start_queued, live,
    has_work, free_slots, play_turn, fork, stop, discard, collect) over a scripted policy and
    real environments; token arrays are placeholders."""

    def __init__(self, num_slots):
        self.rollout = RolloutConfig(num_slots=num_slots, max_turns=10)
        self.held = set()

    def _logprobs(self, episode):
        """The log-probs of the episode's next action (none: a subclass may script them)."""
        return None

    def begin(self, params, rng):
        from jaxtree.rollout.episode import Episode
        self._episode = Episode
        self.episodes, self.order, self.records, self.finished = {}, [], {}, []

    def add_episode(self, task_id, group_id=0):
        e = self._episode(len(self.episodes), task_id, group_id)
        self.episodes[e.episode_id] = e
        self.order.append(e.episode_id)
        return e.episode_id

    def start_queued(self):
        for e in self.episodes.values():
            if e.env is None:
                e.start(lambda: environments.make("frozen_lake", style="compact"), TOK)

    @property
    def live(self):
        return [self.episodes[i] for i in self.order]

    @property
    def has_work(self):
        return bool(self.order)

    @property
    def free_slots(self):
        return self.rollout.num_slots - len(self.order)

    def _retire(self, e):
        self.order.remove(e.episode_id)
        n = 2 * e.num_turns
        self.records[e.episode_id] = e.record(
            np.ones(n, np.int32), np.tile([False, True], e.num_turns), np.zeros(n, np.float32),
            np.repeat(np.arange(e.num_turns), 2).astype(np.int32))
        self.finished.append(e.episode_id)

    def play_turn(self):
        done = []
        for e in self.live:
            text = scripted_move(e.episode_id, e.num_turns)
            over, _ = e.play(TOK, TOK.encode(text) + [TOK.end_of_turn_id], True, 10,
                             1000 * e.episode_id + e.num_turns, LABELER, self._logprobs(e))
            if over:
                self._retire(e)
                done.append(e.episode_id)
        return done

    def fork(self, episode_id, n):
        parent = self.episodes[episode_id]
        if n > self.free_slots:
            raise ValueError("no room")
        ids = []
        for _ in range(n):
            child = parent.fork(len(self.episodes))
            self.episodes[child.episode_id] = child
            self.order.append(child.episode_id)
            ids.append(child.episode_id)
        return ids

    def stop(self, episode_id):
        e = self.episodes[episode_id]
        e.end(PRUNED)
        self._retire(e)

    def discard(self, episode_id):
        self.finished.remove(episode_id)
        return self.records.pop(episode_id)

    def collect(self):
        from jaxtree.rollout.trajectory import assemble
        records = [self.records.pop(e) for e in sorted(self.finished)]
        self.finished = []
        return assemble(records, TOK.pad_id, LABELER.names)


def reference_patr(task, b0, m, k, interval, alpha, theta, budget, slots):
    """PATR Alg. 1 in plain Python over the scripted policy: returns {branch id: (parent,
    fork turn, moves, how it ended)} of the group C. Branch ids count up in creation order (the
    B0 roots, then each expansion's M - 1 new children; an expanded branch continues as its own
    first child)."""
    env_of, moves, origin = {}, {}, {}
    for b in range(b0):
        env = environments.make("frozen_lake", style="compact")
        env.reset(task)
        env_of[b], moves[b], origin[b] = env, [], (-1, -1)
    active, completed, ended = list(range(b0)), [], {}
    while active:
        for _ in range(interval):                      # line 3: advance up to K turns
            for b in list(active):
                move = scripted_move(b, len(moves[b]))
                _, _, done, info = env_of[b].step(move)
                moves[b].append(move)
                if done or len(moves[b]) >= 10:        # line 4: terminated -> C
                    active.remove(b)
                    completed.append(b)
                    ended[b] = "truncated" if info.get("truncated") or not done else "done"
            if not active:
                break
        if not active:
            break
        scores = [env_of[b].process_score() for b in active]            # line 6
        order = sorted(range(len(active)), key=lambda i: (-scores[i], i))
        expand = [active[i] for i in order[:k]]                          # line 7
        ordered = sorted(scores)
        n = len(scores)
        median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
        low = []
        for i, b in enumerate(active):                                   # line 8
            repeats = 0
            for mv in reversed(moves[b]):
                if mv != moves[b][-1]:
                    break
                repeats += 1
            if b not in expand and (scores[i] < median - alpha or repeats >= theta):
                low.append(b)
        for b in expand:                                                 # lines 9-10
            if len(env_of) + m - 1 > budget or slots - len(active) < m - 1:
                continue                                  # no room: the branch survives
            for _ in range(m - 1):
                c = len(env_of)
                env_of[c], moves[c] = env_of[b].clone(), list(moves[b])
                origin[c] = (b, len(moves[b]))
                active.append(c)
        for b in low:
            active.remove(b)
            completed.append(b)
            ended[b] = "pruned"
    return {b: (origin[b][0], origin[b][1], moves[b], ended[b]) for b in completed}


SCRIPTED_CASES = [(5, 12), (11, 9), (23, 7)]   # (task, max_branches)


def scripted_patr(task, budget):
    settings = PatrConfig(initial_branches=4, children=2, expand_top_k=2, interval=2,
                          prune_margin=0.2, repeat_limit=3, max_branches=budget)
    return sample_patr(ScriptedEngine(num_slots=10), None, jax.random.key(0), [task], settings,
                       lambda eps: np.array([e.env.process_score() for e in eps]))


@pytest.mark.parametrize("task,budget", SCRIPTED_CASES)
def test_patr_on_a_scripted_policy_grows_the_tree_alg1_describes(task, budget):
    """The whole rollout against PATR Alg. 1 run in plain Python with the same scripted policy
    and environments: the same branches, parents, fork turns, moves and endings."""
    batch, _ = scripted_patr(task, budget)
    want = reference_patr(task, 4, 2, 2, 2, 0.2, 3, budget=budget, slots=10)
    got = {int(batch.episode_ids[i]): (
        int(batch.parent_ids[i]), int(batch.fork_turns[i]),
        [str(a).capitalize() for a in batch.labels["action_signature"][i, :batch.num_turns[i]]],
        {0: "done", 1: "truncated", 2: "pruned"}[int(batch.end_reason[i])])
        for i in range(len(batch))}
    assert got == want


def test_the_scripted_cases_cover_every_decision():
    """Together the scripted cases expand, refuse over the budget, and prune by score and by
    repeats, so the comparison above covers every path of Alg. 1."""
    runs = [scripted_patr(*case)[1] for case in SCRIPTED_CASES]
    totals = {k: sum(m[k] for m in runs) for k in ("patr/expanded", "patr/refused",
                                                   "patr/pruned_score", "patr/pruned_repeat")}
    assert all(v > 0 for v in totals.values()), totals


class RepeatingEngine(ScriptedEngine):
    """The scripted engine whose every branch plays "Up" (staying on the top row): each branch
    repeats one action from its first turn on."""

    def play_turn(self):
        done = []
        for e in self.live:
            over, _ = e.play(TOK, TOK.encode("Up") + [TOK.end_of_turn_id], True, 10,
                             1000 * e.episode_id + e.num_turns, LABELER)
            if over:
                self._retire(e)
                done.append(e.episode_id)
        return done


@pytest.mark.parametrize("selection", ["score", "random"])
def test_a_best_n_tree_whose_every_branch_is_pruned_is_an_empty_group(selection):
    """Alg. 1 with k = 0 and Best-n: when the repeat rule prunes every branch, the group C is
    empty; the rollout returns it (no error) and the step goes on."""
    settings = PatrConfig(initial_branches=3, expand_top_k=0, interval=2, repeat_limit=2,
                          group="best_n", selection=selection)
    batch, metrics = sample_patr(RepeatingEngine(num_slots=10), None, jax.random.key(0), [5, 9],
                                 settings, lambda eps: np.full(len(eps), 0.5))
    assert len(batch) == 0 and batch.label("action_signature").shape == (0, 1)
    assert metrics["patr/pruned_repeat"] == 6 and metrics["patr/group_size_max"] == 0


def test_a_training_step_goes_on_when_every_group_is_empty(tmp_path):
    """The tiny random model repeats one malformed action: with k = 0, Θ = 2 and Best-n every
    branch is pruned at turn 2, every group is empty, and the step is counted and skipped."""
    from jaxtree.train import jobs
    from jaxtree.train.metrics import read_metrics
    from toy_run import toy_config
    config = toy_config(steps=1, rollout__strategy="patr", eval__every=1, rollout__patr={
        "initial_branches": 2, "expand_top_k": 0, "interval": 2, "repeat_limit": 2,
        "group": "best_n"})
    assert jobs.train_job(config, str(tmp_path))["step"] == 1
    record = read_metrics(str(tmp_path))[1]
    assert record["rollout/episodes"] == 0 and record["rollout/empty_groups"] == 2
    assert record["train/skipped"] == 1
