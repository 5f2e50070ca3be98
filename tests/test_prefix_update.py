"""Prefix-shared updates: a batch's prefix forest against a brute-force reading of its rows, and
the forest update against the per-trajectory one on random forests of every shape."""

import textwrap

import chex
import jax
import numpy as np
import optax
import pytest

from fake_devices import run_script
from jaxtree import losses, models
from jaxtree.losses import LossConfig
from jaxtree.parallel import mesh as mesh_lib
from jaxtree.train.batch_update import BatchUpdate, SavedBatch, load_batch, save_batch
from jaxtree.train.config import TrainConfig
from jaxtree.train.forest_update import ForestSteps, ancestor_classes
from jaxtree.train.prefix_forest import group_trees, pack_forest, unique_fraction
from jaxtree.train.update import Updater, needed_widths


def random_batch(shape: str, seed: int = 0, width: int = 48):
    """(tokens int32[N, W], action mask, group ids) of rows sharing prefixes the way `shape`
    says: 'branches' (random branching points, ragged lengths, a duplicated row and a
    one-row group), 'latr' (k rows leaving one trunk at many token positions), 'turns' (PATR /
    beam trees: rows diverging at turn boundaries, actions after each observation), 'prompt'
    (a GRPO group: only the prompt is shared)."""
    rng = np.random.default_rng(seed)
    rows, groups, masks = [], [], []
    for g in range(3):
        base = rng.integers(3, 250, width)
        prompt = int(rng.integers(6, 14))
        count = 1 if (shape == "branches" and g == 2) else int(rng.integers(3, 6))
        for j in range(count):
            seq = base.copy()
            if shape == "prompt":
                cut = prompt
            elif shape == "turns":
                cut = prompt + 8 * int(rng.integers(0, 4))
            else:
                cut = int(rng.integers(prompt, width))
            seq[cut:] = rng.integers(3, 250, width - cut)
            length = int(rng.integers(max(cut, prompt + 2), width + 1))
            mask = np.zeros(width, bool)
            if shape == "turns":     # 4-token actions after 4-token observations
                for start in range(prompt, length, 8):
                    mask[start + 4:min(start + 8, length)] = True
            else:
                mask[prompt:length] = True
            seq[length:] = 0
            rows.append(seq)
            masks.append(mask)
            groups.append(g)
    if shape == "branches":   # a duplicated whole trajectory
        rows.append(rows[0].copy())
        masks.append(masks[0].copy())
        groups.append(groups[0])
    return np.asarray(rows, np.int32), np.asarray(masks), np.asarray(groups)


SHAPES = ("branches", "latr", "turns", "prompt")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("block", [4, 16])
def test_every_token_sees_exactly_its_prefix(shape, block):
    """Through its block's causal part and its ancestor blocks, each token of each row sees the
    row's tokens before it, each at its own position, and nothing else; its predictor is the
    token before it; the unique tokens are the rows' distinct prefixes."""
    tokens, mask, groups = random_batch(shape, seed=block)
    widths = needed_widths(mask)
    trees = group_trees(tokens, widths, groups, block)
    prefixes = {(g, tuple(tokens[i, :d + 1].tolist()))
                for i, g in enumerate(groups) for d in range(widths[i])}
    assert sum(t.unique_tokens for t in trees) == len(prefixes)
    assert unique_fraction(trees, widths) == len(prefixes) / widths.sum()
    for tree in trees:
        for k, i in enumerate(tree.rows):
            for d in range(widths[i]):
                b, o = divmod(int(tree.token_index[k, d]), block)
                assert tree.block_tokens[b, o] == tokens[i, d]
                assert tree.block_positions[b, o] == d
                seen = [(int(tree.block_positions[a, x]), int(tree.block_tokens[a, x]))
                        for a in tree.ancestors[b] for x in range(tree.block_lengths[a])]
                seen += [(int(tree.block_positions[b, x]), int(tree.block_tokens[b, x]))
                         for x in range(o + 1)]
                assert sorted(seen) == list(enumerate(tokens[i, :d + 1].tolist()))
                want = tree.token_index[k, d - 1] if d else -1
                assert tree.predictor[b, o] == want


def test_ancestor_classes_give_every_block_the_slots_it_needs():
    """Hand-checked: 16 blocks with up to 40 ancestors; then on random counts, the classes hold
    every block, their slots increase to the deepest block's, and in every row the blocks
    needing more than a class's slots fit in the classes above it."""
    counts = np.array([[0, 1, 2, 3, 5, 9, 17, 17, 20, 25, 33, 40, 0, 0, 0, 0]])
    # bounds 16, 24, 32, 40 (40 / 4 steps in buckets of 8); 6 blocks need > 16, 3 > 24, 2 > 32:
    # each rounded up to a multiple of 8
    assert ancestor_classes(counts, 40) == ((8, 16), (8, 40))
    assert ancestor_classes(counts[:, :12], 40, most=1) == ((12, 40),)
    rng = np.random.default_rng(0)
    for _ in range(50):
        rows, blocks, slots = rng.integers(1, 4), 8 * rng.integers(1, 30), rng.integers(1, 60)
        counts = rng.integers(0, slots + 1, (rows, blocks))
        classes = ancestor_classes(counts, slots)
        assert sum(n for n, _ in classes) == blocks
        assert [a for _, a in classes] == sorted({a for _, a in classes})
        assert classes[-1][1] >= counts.max()
        for c, (_, bound) in enumerate(classes):
            above = sum(n for n, _ in classes[c + 1:])
            assert ((counts > bound).sum(-1) <= above).all()


@pytest.mark.parametrize("shape", SHAPES)
def test_blocks_ordered_into_ancestor_classes_keep_every_prefix(shape):
    """Packed in ancestor classes (each row's blocks permuted, every block index following),
    each trajectory slot's columns still read its row's tokens, each token's ancestors through
    its class's slots and its own block are exactly its prefix, and its predictor the token
    before it."""
    tokens, mask, groups = random_batch(shape, seed=7)
    widths = needed_widths(mask)
    block = 4
    trees = group_trees(tokens, widths, groups, block)
    blocks = -(-sum(t.num_blocks for t in trees) // 8) * 8
    deepest = max(len(a) for t in trees for a in t.ancestors)
    counts = np.zeros((1, blocks), int)
    counts[0, :sum(t.num_blocks for t in trees)] = [len(a) for t in trees for a in t.ancestors]
    classes = ancestor_classes(counts, deepest)
    assert len(classes) > 1
    packed = pack_forest(trees, 1, blocks, len(tokens), deepest, block, tokens.shape[1], classes)
    ancestors = np.concatenate([np.pad(a[0], ((0, 0), (0, deepest - a.shape[2])),
                                       constant_values=-1) for a in packed.ancestors])
    flat_tokens, flat_positions = packed.tokens[0].reshape(-1), packed.positions[0].reshape(-1)
    for slot, i in enumerate(packed.slots[0]):
        if i < 0:
            continue
        for d in range(widths[i]):
            index = int(packed.token_index[0, slot, d])
            b, o = divmod(index, block)
            assert flat_tokens[index] == tokens[i, d] and flat_positions[index] == d
            seen = [(int(packed.positions[0, a, x]), int(packed.tokens[0, a, x]))
                    for a in ancestors[b] if a >= 0 for x in range(block)
                    if packed.valid[0, a, x]]
            seen += [(int(packed.positions[0, b, x]), int(packed.tokens[0, b, x]))
                     for x in range(o + 1)]
            assert sorted(seen) == list(enumerate(tokens[i, :d + 1].tolist()))
            want = packed.token_index[0, slot, d - 1] if d else -1
            assert packed.predictor[0, b, o] == want


@pytest.fixture(scope="module")
def two_blocks():
    """(config, params) of the tiny preset with two decoder blocks (random init): the second
    block attends over what the first block's tree attention computed, which is all depth
    adds, at half the four-block model's compile time."""
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init_params(config, jax.random.key(0))


@pytest.fixture(scope="module")
def updater(two_blocks):
    config, params = two_blocks
    loss = LossConfig(kl_coef=0.05, entropy_coef=0.01, eps_low=0.2, eps_high=0.28)
    return Updater(config, optax.sgd(1.0), loss, 4, mesh_lib.make_mesh(), params,
                   width_multiple=16)


def minibatch_of(updater, shape, mode, seed):
    tokens, mask, groups = random_batch(shape, seed)
    rng = np.random.default_rng(seed + 1)
    old = np.where(mask, -rng.uniform(0.2, 3.0, mask.shape), 0).astype(np.float32)
    ref = np.where(mask, -rng.uniform(0.2, 3.0, mask.shape), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(len(mask), 1)), 0).astype(np.float32)
    rows = -(-len(mask) // 4) * 4
    pad = lambda x, fill=0: np.pad(x, ((0, rows - len(x)), (0, 0)), constant_values=fill)
    mb = losses.minibatch(pad(tokens), pad(mask, False), pad(old), pad(advantages), pad(ref),
                          LossConfig(aggregation=mode), 40.0)
    return mb, np.pad(groups, (0, rows - len(groups)), constant_values=-1)


@pytest.mark.parametrize("shape,mode", [("branches", "seq-mean-token-mean"),
                                        ("latr", "token-mean"), ("turns", "seq-sum"),
                                        ("prompt", "seq-mean-token-mean")])
def test_the_forest_update_equals_the_per_trajectory_update(two_blocks, updater, shape, mode):
    """Loss, every metric and the parameters after one optimizer step, for every forest shape
    and every aggregation, with the KL and entropy terms on."""
    _, params = two_blocks
    mb, groups = minibatch_of(updater, shape, mode, seed=len(shape))
    per_trajectory, metrics = updater.step(updater.init_state(params), mb, by_length=True)
    forest = ForestSteps(updater, block=8)
    shared, shared_metrics = forest.step(updater.init_state(params),
                                         [f for f, _ in forest.plan(mb, groups)])
    chex.assert_trees_all_close(shared.params, per_trajectory.params, atol=2e-5, rtol=1e-5)
    for key in metrics:
        np.testing.assert_allclose(shared_metrics[key], metrics[key], rtol=2e-5, atol=1e-6,
                                   err_msg=key)


def test_forest_logprobs_equal_each_rows_forward(two_blocks, updater):
    """The reference log-probs through the forest equal every row's own forward up to its
    width, and are 0 past it."""
    _, params = two_blocks
    mb, groups = minibatch_of(updater, "branches", "token-mean", seed=3)
    widths = needed_widths(mb.action_mask)
    placed = updater.place_params(params)
    full = np.asarray(updater.logprobs(placed, mb.tokens, widths))
    shared = ForestSteps(updater, block=8).logprobs(placed, mb.tokens, widths, groups)
    np.testing.assert_allclose(shared, full, atol=1e-5)
    assert not shared[np.arange(shared.shape[1])[None, :] >= widths[:, None]].any()


_MESH_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import chex, jax, numpy as np, optax
    sys.path.insert(0, {tests!r})
    from test_prefix_update import minibatch_of
    from jaxtree import models
    from jaxtree.losses import LossConfig
    from jaxtree.parallel.mesh import make_mesh
    from jaxtree.train.forest_update import ForestSteps
    from jaxtree.train.update import Updater
    assert len(jax.devices()) == 8
    # one block: what crosses the mesh is the same for each (the depth is the single-device
    # tests'), and each further block is traced and compiled again on the mesh
    config = models.get_preset("tiny").replace(num_layers=1)
    params = models.init_params(config, jax.random.key(0))
    loss = LossConfig(kl_coef=0.05, entropy_coef=0.01)

    def updater_on(shape):
        devices = jax.devices()[:int(np.prod(shape))]
        return Updater(config, optax.sgd(1.0), loss, 4, make_mesh(*shape, devices=devices),
                       params, width_multiple=16)

    # the forest on the 2x2x2 mesh against the per-trajectory step on one device (the
    # per-trajectory step's own mesh equivalence is tests/test_train.py's)
    updater = updater_on((2, 2, 2))
    mb, groups = minibatch_of(updater, "turns", "seq-mean-token-mean", seed=5)
    forest = ForestSteps(updater, block=8)
    state, _ = forest.step(updater.init_state(params), [f for f, _ in forest.plan(mb, groups)])
    on_mesh = jax.device_get(state.params)
    updater = updater_on((1, 1, 1))
    state, _ = updater.step(updater.init_state(params), mb, True)
    chex.assert_trees_all_close(on_mesh, jax.device_get(state.params), atol=2e-5, rtol=1e-5)
    print("FOREST_MESH_MATCH")
""")


def test_the_forest_update_on_a_2x2x2_mesh_equals_one_device():
    run_script(_MESH_SCRIPT, "FOREST_MESH_MATCH")


def test_a_saved_batch_updates_the_same_both_ways(two_blocks, updater, tmp_path):
    """A batch saved as the trainer saves it (train.save_batches) loads back unchanged, and the
    trainer's whole update of it (reference log-probs, two epochs of two shuffled minibatches)
    ends at the same parameters per trajectory and through the prefix forest; a file that is
    not a saved batch is refused naming it."""
    _, params = two_blocks
    tokens, mask, groups = random_batch("turns", seed=11)
    rng = np.random.default_rng(12)
    old = np.where(mask, -rng.uniform(0.2, 3.0, mask.shape), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(len(mask), 1)), 0).astype(np.float32)
    path = str(tmp_path / "batches" / "step_3.npz")
    save_batch(path, SavedBatch(tokens, mask, old, advantages, groups, {"train": {"seed": 1}}, 3))
    saved = load_batch(path)
    for loaded, written in [(saved.tokens, tokens), (saved.action_mask, mask),
                            (saved.behaviour_logprobs, old), (saved.advantages, advantages),
                            (saved.group_ids, groups)]:
        np.testing.assert_array_equal(loaded, written)
        assert loaded.dtype == written.dtype
    assert saved.config == {"train": {"seed": 1}} and saved.step == 3
    train = TrainConfig(epochs=2, num_minibatches=2, micro_batch_size=4)
    update = BatchUpdate(updater, train, pad_id=0)
    inputs = update.inputs(saved.tokens, saved.action_mask, saved.behaviour_logprobs,
                           saved.advantages, saved.group_ids)
    assert 0 < inputs.unique_fraction < 1
    placed = updater.place_params(params)
    ends = {}
    for shared in (False, True):
        ref = update.logprobs(placed, inputs, shared)
        state, collected = update.optimizer_steps(updater.init_state(params), inputs, ref,
                                                  shared, saved.step)
        assert len(collected) == 4
        ends[shared] = (ref, state.params)
    np.testing.assert_allclose(ends[True][0], ends[False][0], atol=1e-5)
    chex.assert_trees_all_close(ends[True][1], ends[False][1], atol=2e-5, rtol=1e-5)
    (tmp_path / "not_a_batch.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not_a_batch.npz is not a saved batch"):
        load_batch(str(tmp_path / "not_a_batch.npz"))
