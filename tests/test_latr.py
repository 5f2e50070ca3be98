"""The LATR kernel against a plain-Python Algorithm 1, descendant removal, completion, sharding."""

import collections
import functools
import pickle
import textwrap
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fake_devices import run_script
from latr_reference import allocate, latr_tree_reference
from jaxtree import models
from jaxtree.sampling.latr import (DUPLICATE, FRESH, PLAIN, TREE, LatrConfig, latr_generate_jit)
from jaxtree.sampling.logits_processing import SamplingConfig

EOS = 258


@pytest.fixture(scope="module")
def peaky():
    """The tiny architecture with an untied output layer scaled up: distributions peaky enough
    that a few percent of steps have two or three plausible tokens, so trees branch (and prune)
    within a few tokens."""
    return peaky_model()


def peaky_config():
    return models.get_preset("tiny").replace(tie_word_embeddings=False)


def peaky_model():
    config = peaky_config()
    params = models.init_params(config, jax.random.key(3))
    return config, dict(params, lm_head={"kernel": params["lm_head"]["kernel"] * 12.0})


FAN = list(range(100, 106))


@pytest.fixture(scope="module")
def fan(peaky):
    """The peaky model with six tokens (FAN) whose output-layer columns are one shared direction
    plus a little noise: where the hidden state points that way, the six share most of the mass
    nearly evenly, so a slot has up to five tokens besides c* with p > 0.1 at once."""
    config, params = peaky
    kernel = np.array(params["lm_head"]["kernel"])
    hidden = kernel.shape[0]
    rng = np.random.default_rng(0)
    shared = rng.normal(size=(hidden, 1)) / np.sqrt(hidden)
    noise = rng.normal(size=(hidden, len(FAN))) / np.sqrt(hidden)
    kernel[:, FAN] = 12.0 * (4.0 * shared + 0.03 * noise)
    return config, dict(params, lm_head={"kernel": jnp.asarray(kernel)})


def _prompts(groups, seed, width=6):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, width + 1, groups).astype(np.int32)
    tokens = np.zeros((groups, width), np.int32)
    for g in range(groups):
        tokens[g, :lengths[g]] = rng.integers(0, 256, lengths[g])
    return tokens, lengths


def _run(config, params, latr, k, prompts, lengths, n, k_tree=None, seed=0,
         sampling=SamplingConfig(temperature=1.0), eos=EOS, group_ids=None):
    groups = prompts.shape[0]
    group_ids = np.arange(groups) if group_ids is None else group_ids
    return jax.device_get(latr_generate_jit(
        config, latr, sampling, k, n, 256, params, jnp.asarray(prompts), jnp.asarray(lengths),
        jnp.asarray(group_ids, jnp.int32), jnp.int32(k if k_tree is None else k_tree),
        jax.random.key(seed), jnp.asarray([eos], jnp.int32)))


REFERENCE_WIDTH = 32  # prompt + generated tokens of every reference call, padded: one compilation


@functools.partial(jax.jit, static_argnums=0)
def _probs_at(config, params, tokens, position):
    """softmax of the logits after tokens[:position + 1] (a full forward, no cache)."""
    return jax.nn.softmax(models.forward(config, params, tokens[None])[0, position])


# {id(params): (params, {sequence: next-token probabilities})}: the reference trees of the
# settings and tests share many of their sequences (every tree follows the greedy path of its
# prompt; a quarter of the calls repeat one), each computed once
_PROBS_CACHE = {}


def _next_probs_fn(config, params, prompt, n):
    assert len(prompt) + n <= REFERENCE_WIDTH
    _, cache = _PROBS_CACHE.setdefault(id(params), (params, {}))

    def next_probs(generated):
        seq = tuple(prompt) + tuple(generated)
        if seq not in cache:
            padded = np.zeros(REFERENCE_WIDTH, np.int32)
            padded[:len(seq)] = seq
            probs = np.array(_probs_at(config, params, jnp.asarray(padded), len(seq) - 1))
            probs.setflags(write=False)  # shared: nobody may change it
            cache[seq] = probs
        return cache[seq]
    return next_probs


class Setting(NamedTuple):
    k: int
    tau_abs: float
    tau_rel: float
    tau_ed: float
    windows: tuple
    n: int
    # How a group whose tree ends short of k is completed. Completion follows the tree phase
    # (which every setting checks against Algorithm 1), so each setting's compiled kernel also
    # serves one completion test.
    completion: str


SETTINGS = [
    Setting(4, 0.2, 0.3, 0.6, (3, 5), 16, "duplicate"),
    Setting(4, 0.15, 0.5, 0.8, (2, 4, 6), 18, "restart"),
    Setting(6, 0.1, 0.6, 0.5, (4,), 14, "fresh"),
]


def _latr(setting):
    return LatrConfig(tau_abs=setting.tau_abs, tau_rel=setting.tau_rel, tau_ed=setting.tau_ed,
                      windows=setting.windows, completion=setting.completion)


def _assert_tree_matches_reference(config, params, setting, out, g, prompt, eos=EOS):
    """Group g of the kernel's output has the reference's tree: tree end, branch and prune
    events, and each slot alive at the end of the tree phase (origin, parent, birth, tokens).
    Returns the reference's result."""
    k, tau_abs, tau_rel, tau_ed, windows, n, _ = setting
    ref = latr_tree_reference(_next_probs_fn(config, params, prompt, n), k, n, tau_abs, tau_rel,
                              tau_ed, windows, {eos})
    end = ref["tree_end"]
    assert out.tree_end_step[g] == end
    nb, np_ = int(out.num_branches[g]), int(out.num_prunes[g])
    assert nb == len(ref["branches"]) and np_ == len(ref["prunes"])
    got_branches = list(zip(out.branch_step[g, :nb].tolist(), out.branch_parent[g, :nb].tolist(),
                            out.branch_slot[g, :nb].tolist(), out.branch_token[g, :nb].tolist()))
    assert got_branches == ref["branches"]
    got_prunes = sorted(zip(out.prune_step[g, :np_].tolist(), out.prune_slot[g, :np_].tolist(),
                            out.prune_window[g, :np_].tolist()))
    assert got_prunes == sorted(ref["prunes"])
    for j, s in enumerate(ref["slots"]):
        if s is None:
            continue  # a slot free at the end of the tree phase: completed afterwards
        assert out.origin[g, j] == TREE
        assert out.parent[g, j] == s["parent"] and out.birth[g, j] == s["birth"]
        upto = min(end, len(s["tokens"]))
        assert out.tokens[g, j, :upto].tolist() == s["tokens"][:upto]
    return ref


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("seed", [0])
def test_tree_phase_equals_plain_python_algorithm_1(peaky, setting, seed):
    config, params = peaky
    k, n = setting.k, setting.n
    prompts, lengths = _prompts(3, seed)
    out = _run(config, params, _latr(setting), k, prompts, lengths, n, seed=seed)
    for g in range(3):
        _assert_tree_matches_reference(config, params, setting, out, g,
                                       prompts[g, :lengths[g]].tolist())
    # the settings are chosen so the trees really branch
    assert out.num_branches.sum() > 0


def test_every_candidate_passing_eq5_can_branch(fan):
    """Alg. 1 line 11 takes every c != c* passing Eq. 5, not only the two next most likely: with
    six near-tied tokens, slots spawn three or more children in one step (τ_abs = 0.1 allows
    eight candidates beside c*, five of which a group of 6 can take), as in the reference."""
    config, params = fan
    setting = SETTINGS[2]
    k, n = setting.k, setting.n
    prompts, lengths = _prompts(3, 0)
    out = _run(config, params, _latr(setting), k, prompts, lengths, n)
    widest = 0
    for g in range(3):
        ref = _assert_tree_matches_reference(config, params, setting, out, g,
                                             prompts[g, :lengths[g]].tolist())
        children = collections.Counter((step, parent) for step, parent, _, _ in ref["branches"])
        widest = max([widest, *children.values()])
    assert widest >= 3


def test_candidate_count_is_the_most_tokens_that_can_pass():
    """m tokens with p > τ_abs need m·τ_abs < 1: m <= ceil(1/τ_abs) - 1, also when 1/τ_abs is
    an integer (τ_abs as the float32 the kernel compares with). At most k - 1 candidates are
    considered (a group has at most k - 1 free slots), at least one column."""
    from fractions import Fraction

    from jaxtree.sampling.latr.branch import max_passing, num_candidates
    assert [max_passing(t) for t in (0.5, 0.4, 1 / 3, 0.3, 0.25, 0.2, 0.15, 0.1, 1.0)] == \
        [1, 2, 2, 3, 3, 4, 6, 9, 0]
    assert max_passing(0.0) is None
    for tau in (0.25, 0.2, 0.15, 0.1, 0.07, 0.3, 1 / 3, 0.45):
        m, threshold = max_passing(tau), Fraction(float(np.float32(tau)))
        assert Fraction(1, m) > threshold          # tight: m tokens at 1/m each pass
        assert (m + 1) * threshold >= 1             # m + 1 tokens above it would hold > 1
    assert [num_candidates(0.25, 8), num_candidates(0.2, 8), num_candidates(0.1, 6),
            num_candidates(0.1, 4), num_candidates(0.0, 5), num_candidates(0.5, 8),
            num_candidates(0.1, 1)] == [2, 3, 5, 3, 4, 1, 1]


BRANCH_GROUPS, BRANCH_K, BRANCH_VOCAB = 32, 6, 8  # the branch-step tests' shapes


@functools.partial(jax.jit, static_argnums=(0, 1))
def _branch_step(tau_abs, tau_rel, probs, tree_mode, free):
    """The kernel's branch step: top tokens, Eq. 5, slot assignment, for BRANCH_GROUPS groups of
    BRANCH_K slots (probs float32[P·k, V], tree_mode, free bool[P·k])."""
    from jaxtree.sampling.latr.branch import (allocate_children, branch_candidates,
                                              num_candidates, top_tokens)
    from jaxtree.sampling.latr.state import row_layout
    latr = LatrConfig(tau_abs=tau_abs, tau_rel=tau_rel)
    top_p, top_tok = top_tokens(probs, 1 + num_candidates(tau_abs, BRANCH_K))
    candidates = branch_candidates(latr, top_p, top_tok, tree_mode)
    layout = row_layout(BRANCH_GROUPS, BRANCH_K, jnp.int32(BRANCH_K))
    return allocate_children(layout, candidates, free), candidates.token, top_tok[:, 0]


def _allocate_births(tau_abs, tau_rel, probs, tree_mode, free):
    """`_branch_step` on the first groups (probs float32[g·BRANCH_K, V], g <= BRANCH_GROUPS; the
    rest padded with idle groups, so every call has one shape). Returns per group
    [(parent slot, child slot, token), ...] in birth order and the argmax per row."""
    rows, k = probs.shape[0], BRANCH_K
    pad = BRANCH_GROUPS * k - rows
    (dst, src, col, ok), token, top = jax.device_get(_branch_step(
        tau_abs, tau_rel, jnp.asarray(np.pad(probs, ((0, pad), (0, 0)))),
        jnp.asarray(np.pad(tree_mode, (0, pad))), jnp.asarray(np.pad(free, (0, pad)))))
    token = token.reshape(BRANCH_GROUPS, k, -1)
    births = [[(int(src[g, i]), int(dst[g, i]), int(token[g, src[g, i], col[g, i]]))
               for i in range(k) if ok[g, i]] for g in range(rows // k)]
    return births, top[:rows]


def test_branch_step_hand_checked():
    # τ_abs 0.15, τ_rel 0.3: the 2nd, 3rd and 4th tokens of the root all pass (0.13 does not)
    probs = np.zeros((6, BRANCH_VOCAB), np.float32)
    probs[0, :5] = [0.24, 0.22, 0.21, 0.2, 0.13]
    tree_mode = np.arange(6) == 0
    births, top = _allocate_births(0.15, 0.3, probs, tree_mode, ~tree_mode)
    assert births == [[(0, 1, 1), (0, 2, 2), (0, 3, 3)]] and top[0] == 0
    # parents in slots 0 and 2, slot 4 finished, slots 1, 3, 5 free: candidates
    # (p, parent, token) in order (.3, 2, 6), (.25, 0, 1), (.25, 0, 2), (.25, 2, 7), (.2, 0, 3)
    # (equal p: the lower parent slot, then its higher-ranked token) take the free slots in
    # ascending order
    probs = np.zeros((6, BRANCH_VOCAB), np.float32)
    probs[0, :4] = [0.3, 0.25, 0.25, 0.2]
    probs[2, 5:8] = [0.45, 0.3, 0.25]
    probs[4, 0] = 1.0
    tree_mode = np.isin(np.arange(6), [0, 2])
    free = np.isin(np.arange(6), [1, 3, 5])
    births, top = _allocate_births(0.15, 0.3, probs, tree_mode, free)
    assert births == [[(2, 1, 6), (0, 3, 1), (0, 5, 2)]] and top[[0, 2]].tolist() == [0, 5]


@pytest.mark.parametrize("tau_abs, tau_rel", [(0.1, 0.6), (0.15, 0.3), (0.25, 0.15)])
def test_branch_step_equals_algorithm_1_on_random_distributions(tau_abs, tau_rel):
    """Distributions over 8 tokens in multiples of 1/64 (exact in float32, with many ties),
    random alive and free slots: the kernel's births and argmax equal the reference's."""
    rng = np.random.default_rng(int(tau_abs * 100))
    groups, k, vocab = BRANCH_GROUPS, BRANCH_K, BRANCH_VOCAB
    counts = np.stack([rng.multinomial(64, rng.dirichlet(np.ones(vocab)))
                       for _ in range(groups * k)])
    probs = (counts / 64).astype(np.float32)
    alive = rng.random(groups * k) < 0.4
    alive[::k] = True                                # every group has a branch
    tree_mode = alive & (rng.random(groups * k) < 0.8)
    births, top = _allocate_births(tau_abs, tau_rel, probs, tree_mode, ~alive)
    most = 0
    for g in range(groups):
        rows = range(g * k, (g + 1) * k)
        slot_probs = {r - g * k: probs[r] for r in rows if tree_mode[r]}
        free = [r - g * k for r in rows if not alive[r]]
        tops, expected = allocate(slot_probs, free, tau_abs, tau_rel)
        assert births[g] == expected
        assert all(top[g * k + i] == c for i, c in tops.items())
        most = max([most, *collections.Counter(i for i, _, _ in expected).values()])
    # some slot has three children at once (at τ_abs = 0.25 no slot can have more than two)
    assert most >= 3 or tau_abs == 0.25


# (setting, prompt set, prompt, EOS): the prompt's greedy continuation emits the EOS within a
# few steps, so its tree ends by every branch finishing, with a lookahead check still due (the
# first case) or a young child that would later have let the tree saturate (the second)
EARLY_EOS = [(SETTINGS[1], 0, 2, 71), (SETTINGS[0], 0, 0, 200)]


@pytest.mark.parametrize("setting, seed, x, eos", EARLY_EOS)
def test_a_prompts_tree_does_not_depend_on_its_batch(peaky, setting, seed, x, eos):
    """Once every branch of a group has finished, nothing of its tree changes (no late prune, no
    later tree end), so a prompt gives the same output alone as in a batch whose other prompts
    keep the loop running longer. "Alone" is three copies of the prompt with its group id: they
    compute the same rows, so the loop ends when the prompt's rows end, as in a batch of one
    (which would compile the kernel again)."""
    config, params = peaky
    k, n = setting.k, setting.n
    prompts, lengths = _prompts(3, seed)
    others = [g for g in range(3) if g != x]
    alone = _run(config, params, _latr(setting), k, prompts[[x] * 3], lengths[[x] * 3], n,
                 eos=eos, group_ids=[0, 0, 0])
    mixed = _run(config, params, _latr(setting), k, prompts[[x] + others],
                 lengths[[x] + others], n, eos=eos, group_ids=[0, 1, 2])
    # the case: the tree branched and ended early, and the other prompts ran on after it
    assert alone.num_branches[0] > 0 and alone.tree_end_step[0] < n
    assert mixed.lengths[1:].max() > alone.lengths[0].max()
    for name, a, b in zip(alone._fields, alone, mixed):
        if np.issubdtype(np.asarray(a).dtype, np.floating):
            np.testing.assert_allclose(a[0], b[0], atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(a[0], b[0], err_msg=name)
    _assert_tree_matches_reference(config, params, setting, mixed, 0,
                                   prompts[x, :lengths[x]].tolist(), eos)


def test_settings_exercise_branching_and_pruning(peaky):
    config, params = peaky
    branches = prunes = 0
    for setting in SETTINGS:
        for seed in (0, 1):
            out = _run(config, params, _latr(setting), setting.k, *_prompts(3, seed), setting.n,
                       seed=seed)
            branches += int(out.num_branches.sum())
            prunes += int(out.num_prunes.sum())
    assert branches >= 5 and prunes >= 2


# (setting, prompt set): prunes leave slots that no later branch refills, so groups end short of
# k and get completed, one completion per setting
COMPLETION_CASES = [(SETTINGS[2], 1), (SETTINGS[1], 0), (SETTINGS[0], 0)]


@pytest.mark.parametrize("setting, seed", COMPLETION_CASES,
                         ids=[s.completion for s, _ in COMPLETION_CASES])
def test_every_group_returns_exactly_k_sequences(peaky, setting, seed):
    config, params = peaky
    k, n, completion = setting.k, setting.n, setting.completion
    prompts, lengths = _prompts(3, seed)
    out = _run(config, params, _latr(setting), k, prompts, lengths, n, seed=seed)
    assert out.tokens.shape == (3, k, n)
    assert np.all(out.lengths >= 1)
    np.testing.assert_array_equal(out.mask, np.arange(n)[None, None] < out.lengths[..., None])
    completed = DUPLICATE if completion == "duplicate" else FRESH
    assert np.all(np.isin(out.origin, [TREE, completed]))
    assert np.any(out.origin == completed)
    for g, j in zip(*np.nonzero(out.origin == DUPLICATE)):
        source = out.parent[g, j]
        assert out.origin[g, source] == TREE
        np.testing.assert_array_equal(out.tokens[g, j], out.tokens[g, source])
    for g, j in zip(*np.nonzero(out.origin == FRESH)):
        assert out.birth[g, j] == -1
        source, position = out.parent[g, j], out.fork_position[g, j]
        assert (source == -1) == (position == -1)
        if completion == "restart":
            assert source == -1                      # independent samples from the prompt
        elif (source >= 0 and out.origin[g, source] == FRESH
              and out.fork_position[g, source] == -1):
            # continued a copy of a sample from the prompt that stayed in its slot: the two
            # share the tokens before the fork
            np.testing.assert_array_equal(out.tokens[g, j, :position],
                                          out.tokens[g, source, :position])
    if completion == "fresh":
        assert np.any(out.fork_position >= 0)        # the setting really forks freed slots
    if completion != "restart":
        # within plain sampling's budget: at most n - 1 fed tokens per slot
        assert np.all(out.forwards <= k * (n - 1))
    # each sequence ends at EOS or at n
    for g in range(3):
        for j in range(k):
            length = out.lengths[g, j]
            assert out.finished[g, j] == (out.tokens[g, j, length - 1] == EOS)
            assert out.finished[g, j] or length == n


# One hybrid kernel program (k = 4 slots per group, 8 groups, n = 12, sampling at temperature 0.8
# with top-p) serves the log-prob test (3 tree slots), the no-tree-slot tests (k_tree is an
# argument, not a compile-time constant) and the one-device side of the sharding test.
HYBRID_LATR = LatrConfig(tau_abs=0.15, tau_rel=0.5, tau_ed=0.6, windows=(2, 4))
HYBRID_SAMPLING = SamplingConfig(temperature=0.8, top_p=0.9)
HYBRID_K, HYBRID_N, HYBRID_GROUPS = 4, 12, 8


def hybrid_run(config, params, k_tree, seed):
    prompts, lengths = _prompts(HYBRID_GROUPS, 11)
    return _run(config, params, HYBRID_LATR, HYBRID_K, prompts, lengths, HYBRID_N,
                k_tree=k_tree, seed=seed, sampling=HYBRID_SAMPLING)


@pytest.fixture(scope="module")
def hybrid(peaky):
    """The hybrid run with 3 tree slots and 1 plain slot per group."""
    return hybrid_run(*peaky, k_tree=3, seed=5)


@functools.partial(jax.jit, static_argnums=0)
def _log_softmax_at(config, params, tokens):
    """log-softmax of the logits at every position (a full forward, no cache)."""
    return jax.nn.log_softmax(models.forward(config, params, tokens[None])[0], axis=-1)


def test_logprobs_are_the_policy_logprobs_of_the_returned_tokens(peaky, hybrid):
    """Every returned token's log-prob (tree, branch, stochastic, fresh and forked) equals a
    teacher-forced full forward at temperature 1."""
    config, params = peaky
    out = hybrid
    prompts, lengths = _prompts(HYBRID_GROUPS, 11)
    assert np.all(out.origin[:, 3] == PLAIN)
    assert int((out.fork_position >= 0).sum()) > 0  # a slot freed by a prune continued a copy
    for g in range(HYBRID_GROUPS):
        prompt = prompts[g, :lengths[g]].tolist()
        for j in range(HYBRID_K):
            gen = out.tokens[g, j, :out.lengths[g, j]].tolist()
            seq = np.zeros(REFERENCE_WIDTH, np.int32)
            seq[:len(prompt) + len(gen)] = prompt + gen
            logp = np.asarray(_log_softmax_at(config, params, jnp.asarray(seq)))
            expected = logp[np.arange(len(prompt) - 1, len(prompt) - 1 + len(gen)), gen]
            np.testing.assert_allclose(out.logprobs[g, j, :len(gen)], expected, atol=1e-4)


def test_descendants_of_a_pruned_branch_are_removed():
    """Hand-built trees (two groups of 5 slots, rows 0-4 and 5-9). Group 0 is a chain
    0 <- 1 <- 2 <- 3 plus 4 <- 0; group 1 has root 5 with children 6 and 8, and 7 <- 6, 9 <- 8."""
    from jaxtree.sampling.latr import with_descendants
    parent = np.array([-1, 0, 1, 2, 0, -1, 5, 6, 5, 8])
    is_child = jnp.asarray(parent >= 0)
    parent_row = jnp.asarray([0, 0, 1, 2, 0, 5, 5, 6, 5, 8])

    def removed(*direct):
        mask = np.zeros(10, bool)
        mask[list(direct)] = True
        out = np.asarray(with_descendants(jnp.asarray(mask), parent_row, is_child, 5))
        return sorted(np.flatnonzero(out).tolist())

    assert removed(1) == [1, 2, 3]              # the chain below 1, not its sibling 4
    assert removed(2) == [2, 3]
    assert removed(3) == [3]
    assert removed(4) == [4]
    assert removed(6) == [6, 7]                 # the other group is untouched by group 0
    assert removed(8, 2) == [2, 3, 8, 9]
    assert removed(6, 8) == [6, 7, 8, 9]        # the root itself is never a child
    assert removed() == []


def test_kernel_removes_descendants_of_a_pruned_branch(peaky):
    """In the kernel's own runs: after a prune at step l, no alive slot descends from the pruned
    slot, and children of pruned slots never reach the output."""
    config, params = peaky
    setting = SETTINGS[2]
    k, n = setting.k, setting.n
    found = False
    for seed in (0, 1):
        out = _run(config, params, _latr(setting), k, *_prompts(3, seed), n, seed=seed)
        for g in range(3):
            nb = int(out.num_branches[g])
            births = {(int(s), int(sl)): int(p) for s, p, sl in zip(
                out.branch_step[g, :nb], out.branch_parent[g, :nb], out.branch_slot[g, :nb])}
            for step, slot in zip(out.prune_step[g, :int(out.num_prunes[g])],
                                  out.prune_slot[g, :int(out.num_prunes[g])]):
                # every child born from the pruned slot before the prune is gone from the output
                for (b_step, b_slot), b_parent in births.items():
                    if b_parent == slot and b_step < step:
                        found = True
                        assert not (out.origin[g, b_slot] == TREE and out.birth[g, b_slot] == b_step
                                    and out.parent[g, b_slot] == slot)
    assert found, "no run pruned a branch that had children; adjust the thresholds"


def test_hybrid_zero_tree_slots_is_the_samplers_decode(peaky):
    """With no tree slots the kernel is plain sampling: no tree, and the sampler's decode loop on
    the kernel's row keys (fold_in(fold_in(rng, group), slot)): the same tokens, the same
    log-probs."""
    from jaxtree.models.kv_cache import init_cache
    from jaxtree.sampling import randomness
    from jaxtree.sampling.sampler import decode_jit
    config, params = peaky
    k, n, groups = HYBRID_K, HYBRID_N, HYBRID_GROUPS
    out = hybrid_run(config, params, k_tree=0, seed=2)
    assert np.all(out.origin == PLAIN) and np.all(out.num_branches == 0)
    assert np.all(out.tree_end_step == 0)
    prompts, lengths = _prompts(groups, 11)
    rows = np.repeat(prompts, k, axis=0)
    keys = randomness.row_keys(jax.random.key(2), jnp.repeat(jnp.arange(groups), k),
                               jnp.tile(jnp.arange(k), groups))
    logits, cache = models.extend_cache(config, params, init_cache(config, groups * k, 6 + n),
                                        jnp.asarray(rows), jnp.asarray(np.repeat(lengths, k)),
                                        last_only=True)
    _, ref = jax.device_get(decode_jit(
        config, HYBRID_SAMPLING, n, 256, params, cache, logits, keys,
        jnp.full((groups * k,), n, jnp.int32), jnp.full((groups * k, 1, 1), -1, jnp.int32),
        jnp.asarray([EOS], jnp.int32)))
    np.testing.assert_array_equal(out.lengths.reshape(-1), ref.num_generated)
    np.testing.assert_array_equal(out.tokens.reshape(groups * k, n), ref.tokens)
    np.testing.assert_allclose(out.logprobs.reshape(groups * k, n), ref.policy_logprobs,
                               atol=1e-5)
    # a plain row feeds every token but its last
    np.testing.assert_array_equal(out.forwards,
                                  (ref.num_generated - 1).reshape(groups, k).sum(axis=1))


def test_config_is_a_validated_hashable_section():
    from jaxtree.config import ConfigError
    latr = LatrConfig.from_config({"tau_ed": 1, "windows": [4, 2]}, "latr")
    assert latr.tau_ed == 1.0 and latr.windows == (4, 2) and latr.max_window == 4
    assert hash(latr) == hash(LatrConfig(tau_ed=1.0, windows=(4, 2)))
    for bad, field in [(dict(tau_abs=1.5), "tau_abs"), (dict(tau_rel=-0.1), "tau_rel"),
                       (dict(tau_ed=2), "tau_ed"), (dict(windows=()), "windows"),
                       (dict(windows=(3, 0)), "windows"), (dict(completion="copy"), "completion"),
                       (dict(max_events=0), "max_events"), (dict(k=4), "k")]:
        with pytest.raises(ConfigError, match=rf"latr\.{field}"):
            LatrConfig.from_config(bad, "latr")
    with pytest.raises(ValueError, match="k=0"):
        _run(*peaky_model(), LatrConfig(), 0, *_prompts(1, 0), 4)


_SHARDED = textwrap.dedent("""
    import os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"  # XLA_FLAGS: 8 fake devices (fake_devices.run_script)
    sys.path.insert(0, {tests!r})
    import jax, jax.numpy as jnp, numpy as np
    from jaxtree.sampling.latr import latr_generate_sharded
    from jaxtree.parallel.mesh import make_mesh
    import pickle
    from test_latr import (HYBRID_GROUPS, HYBRID_K, HYBRID_LATR, HYBRID_N, HYBRID_SAMPLING,
                           _prompts, peaky_config)
    config = peaky_config()
    with open(sys.argv[2], "rb") as f:  # the test's peaky params: no initialisation compiled
        params = pickle.load(f)
    prompts, lengths = _prompts(HYBRID_GROUPS, 11)
    args = (params, jnp.asarray(prompts), jnp.asarray(lengths),
            jnp.arange(HYBRID_GROUPS, dtype=jnp.int32), jnp.int32(3), jax.random.key(5),
            jnp.asarray([258], jnp.int32))
    one = np.load(sys.argv[1])  # the same call on one device, by the test process
    mesh = make_mesh(8, 1, 1)
    many = jax.device_get(latr_generate_sharded(mesh, config, HYBRID_LATR, HYBRID_SAMPLING,
                                                HYBRID_K, HYBRID_N, 256, *args))
    for name, b in zip(many._fields, many):
        a = one[name]
        if np.issubdtype(np.asarray(a).dtype, np.floating):  # matmuls of another batch size
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)
        else:  # tokens, tree structure, events: identical
            np.testing.assert_array_equal(a, b, err_msg=name)
    print("SHARDED_LATR_MATCH", int(one["num_branches"].sum()))
""")


def test_sharded_over_eight_fake_devices_equals_one_device(peaky, hybrid, tmp_path):
    """The kernel sharded over 8 devices (one group each) returns the one-device hybrid run."""
    path = tmp_path / "one_device.npz"
    np.savez(path, **hybrid._asdict())
    params = tmp_path / "params.pkl"
    with open(params, "wb") as f:
        pickle.dump(jax.device_get(peaky[1]), f)
    run_script(_SHARDED, "SHARDED_LATR_MATCH", args=[str(path), str(params)])
