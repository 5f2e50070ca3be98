"""The update step: accumulation, the loss against a direct transcription, skipping, sharding."""

import pickle
import textwrap

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fake_devices import run_script
from jaxtree import losses, models
from jaxtree.parallel import mesh as mesh_lib
from jaxtree.losses import LossConfig
from jaxtree.train.update import (Updater, accumulation_calls, cpu_compiler_options,
                                  length_groups, make_optimizer, make_schedule, needed_widths,
                                  take_micro_batch, update_step)


def one_layer_config():
    """The tiny preset with one decoder block instead of four: nothing these checks compare
    depends on the model's depth, and each of the file's programs compiles about three times
    faster."""
    return models.get_preset("tiny").replace(num_layers=1)


@pytest.fixture(scope="module")
def model():
    """(config, params) of `one_layer_config`, random init."""
    config = one_layer_config()
    return config, models.init_params(config, jax.random.key(0))


def _random_batch(config, rows=8, width=24, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, (rows, width)).astype(np.int32)
    mask = np.zeros((rows, width), bool)
    for i in range(rows - 1):  # the last row is padding: no action token
        start = rng.integers(2, width - 4)
        mask[i, start:start + rng.integers(1, width - start)] = True
    old = np.where(mask, -rng.uniform(0.5, 4.0, (rows, width)), 0).astype(np.float32)
    ref = np.where(mask, -rng.uniform(0.5, 4.0, (rows, width)), 0).astype(np.float32)
    adv = np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32)
    return {"tokens": tokens, "action_mask": mask, "old_logprobs": old, "advantages": adv,
            "ref_logprobs": ref}


def _with_weights(batch, mode="seq-mean-token-mean", norm_constant=None):
    """The minibatch of `batch` (a dict of its arrays, or a Minibatch whose weights are
    recomputed) with the aggregation weights of `mode`."""
    fields = batch._asdict() if isinstance(batch, losses.Minibatch) else dict(batch)
    fields["weights"] = np.asarray(losses.aggregation_weights(
        jnp.asarray(fields["action_mask"]), mode, norm_constant))
    return losses.Minibatch(**fields)


def _direct_loss(config, params, batch, eps_low, eps_high, kl_coef, entropy_coef):
    """GRPO's objective (PATR Eq. 2 plus LATR Eq. 2's KL) and an entropy bonus written out row by
    row: the policy's log-prob of token t (and the entropy there) comes from the logits at
    position t - 1 of a full forward."""
    from jaxtree.models import forward
    batch = batch._asdict()
    logits = forward(config, params, jnp.asarray(batch["tokens"]))
    logp = jax.nn.log_softmax(logits, axis=-1)
    rows = []
    for i in range(batch["tokens"].shape[0]):
        positions = np.flatnonzero(batch["action_mask"][i])
        if not len(positions):
            continue
        row_logp = logp[i, positions - 1]                           # [tokens of the row, V]
        lp = row_logp[np.arange(len(positions)), batch["tokens"][i, positions]]
        entropy = -(jnp.exp(row_logp) * row_logp).sum(-1)
        ratio = jnp.exp(lp - batch["old_logprobs"][i, positions])
        a = batch["advantages"][i, positions]
        surrogate = jnp.minimum(ratio * a, jnp.clip(ratio, 1 - eps_low, 1 + eps_high) * a)
        x = batch["ref_logprobs"][i, positions] - lp
        terms = -surrogate + kl_coef * (jnp.exp(x) - x - 1) - entropy_coef * entropy
        rows.append(terms.mean())
    return sum(rows) / len(rows)


# One jitted update step for the whole file (model config, optimizer, loss config and micro-batch
# size static): the tests below use one optimizer and one loss config (every term on, clip-higher)
# and the aggregation modes differ only in the weights, so a micro-batch size compiles once.
_update_step = jax.jit(update_step, static_argnums=(0, 1, 2, 3))
# plain SGD with rate 1: the update is exactly minus the gradient (Adam's first step would turn
# float noise in near-zero gradient entries into full-size steps); one object, so one cache key
SGD = optax.sgd(1.0)
EPS_LOW, EPS_HIGH, KL_COEF, ENTROPY_COEF = 0.2, 0.28, 0.05, 0.01
LOSS = LossConfig(eps_low=EPS_LOW, eps_high=EPS_HIGH, kl_coef=KL_COEF, entropy_coef=ENTROPY_COEF)


def _state(updater_like_params, optimizer):
    from jaxtree.train.update import TrainState
    return TrainState(jnp.zeros((), jnp.int32), updater_like_params,
                      optimizer.init(updater_like_params))


def test_update_step_equals_optax_on_the_directly_written_objective(model):
    config, params = model
    batch = _with_weights(_random_batch(config))
    optimizer = SGD
    # two micro-batches of 4 rows
    state, metrics = _update_step(config, optimizer, LOSS, 4, _state(params, optimizer), batch)

    direct = jax.jit(jax.value_and_grad(lambda p: _direct_loss(
        config, p, batch, EPS_LOW, EPS_HIGH, KL_COEF, ENTROPY_COEF)))
    loss, grads = jax.device_get(direct(params))
    # on the host: eager JAX would compile a program per parameter shape
    expected = jax.tree_util.tree_map(lambda p, g: np.asarray(p) - g, params, grads)
    grad_norm = np.sqrt(sum(np.sum(np.square(g, dtype=np.float64))
                            for g in jax.tree_util.tree_leaves(grads)))
    np.testing.assert_allclose(metrics["loss"], loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["grad_norm"], grad_norm, rtol=1e-4)
    chex.assert_trees_all_close(state.params, expected, atol=1e-6, rtol=0)
    assert int(state.step) == 1 and int(metrics["skipped"]) == 0
    assert metrics["tokens"] == batch.action_mask.sum()


@pytest.mark.parametrize("mode", losses.AGGREGATIONS)
def test_micro_batch_accumulation_equals_one_big_batch(model, mode):
    config, params = model
    batch = _with_weights(_random_batch(config, rows=8, seed=1), mode, 40.0)
    optimizer = SGD  # params move by exactly the accumulated gradient
    results = [_update_step(config, optimizer, LOSS, size, _state(params, optimizer), batch)
               for size in (1, 4, 8)]
    for state, metrics in results[1:]:
        # equal up to float32 summation order: a few ulp of parameters of magnitude ~1 (one of
        # 33,792 embedding entries differed by 1.07e-6 at 1.3 with this machine's packages)
        chex.assert_trees_all_close(state.params, results[0][0].params, atol=1e-6, rtol=1e-6)
        for key in ("loss", "clip_fraction", "kl", "entropy", "grad_norm"):
            np.testing.assert_allclose(metrics[key], results[0][1][key], rtol=1e-5, atol=1e-7)


def test_length_groups_sort_rows_by_the_width_they_need():
    mask = np.zeros((5, 12), bool)
    mask[0, 1:3] = True                     # needs 3 columns
    mask[2, 4:10] = True                    # 10
    mask[3, [2, 6]] = True                  # 7
    mask[4, 5:7] = True                     # 7; row 1 has no action token
    assert needed_widths(mask).tolist() == [3, 0, 10, 7, 7]
    weights = np.zeros((5, 12), np.float32)
    weights[1, 4] = 0.5                     # a weight without a mask bit counts as well
    assert needed_widths(mask, weights).tolist() == [3, 5, 10, 7, 7]
    groups = length_groups(needed_widths(mask), rows=2, width_multiple=4)
    # longest first, ties by row index, the empty row left out, a filler (-1) at the end
    assert [(index.tolist(), width) for index, width in groups] == [([2, 3], 12), ([4, 0], 8)]
    groups = length_groups(needed_widths(mask), rows=3, width_multiple=8)
    assert [(index.tolist(), width) for index, width in groups] == [([2, 3, 4], 16),
                                                                   ([0, -1, -1], 8)]
    # one scan call per run of equal widths, in power-of-two counts, largest first
    widths = np.array([9, 9, 9, 9, 9, 9, 9, 3, 3, 3])  # seven micro-batches of 1 row at 16
    calls = accumulation_calls(length_groups(widths, rows=1, width_multiple=8))
    assert [([i.tolist() for i in indices], w) for indices, w in calls] == [
        ([[0], [1], [2], [3]], 16), ([[4], [5]], 16), ([[6]], 16), ([[7], [8]], 8), ([[9]], 8)]
    batch = _with_weights(dict(_random_batch(None, rows=5, width=12), action_mask=mask))
    mb = take_micro_batch(batch, np.array([0, -1, -1]), 8)
    assert mb.tokens.shape == (3, 8) and np.array_equal(mb.tokens[0], batch.tokens[0, :8])
    for key in ("action_mask", "weights", "advantages", "old_logprobs", "ref_logprobs"):
        assert not getattr(mb, key)[1:].any(), key  # fillers carry no loss


def test_micro_batches_by_length_equal_the_fused_step(model):
    """Rows grouped by length, each micro-batch cut to its own width, give the fused step's
    parameters and metrics; reference log-probs by length equal the full-width ones wherever
    a row needs them."""
    config, params = model
    batch = _with_weights(_random_batch(config, rows=8, width=40, seed=5))
    batch.action_mask[1] = False             # a second row without action tokens
    batch.action_mask[2, :] = False
    batch.action_mask[2, 3:5] = True         # and a short one among long ones
    batch = _with_weights(batch)
    updater = Updater(config, SGD, LOSS, 2, mesh_lib.make_mesh(), params, width_multiple=8)
    widths = needed_widths(batch.action_mask, batch.weights)
    assert len({w for _, w in length_groups(widths, 2, 8)}) > 1  # several widths compiled
    fused, fused_metrics = updater.step(updater.init_state(params), batch)
    grouped, grouped_metrics = updater.step(updater.init_state(params), batch, by_length=True)
    # SGD at rate 1 on gradients of norm ~90: float reassociation shows at ~4e-6
    chex.assert_trees_all_close(grouped.params, fused.params, atol=2e-5, rtol=1e-5)
    for key in ("loss", "clip_fraction", "kl", "entropy", "grad_norm", "tokens", "update_norm"):
        np.testing.assert_allclose(grouped_metrics[key], fused_metrics[key], rtol=1e-5,
                                   atol=1e-7)
    assert int(grouped.step) == 1 and int(grouped_metrics["skipped"]) == 0
    placed = updater.place_params(params)
    full = np.asarray(updater.logprobs(placed, batch.tokens))
    cut = np.asarray(updater.logprobs(placed, batch.tokens, widths))
    for i, w in enumerate(widths):
        np.testing.assert_allclose(cut[i, :w], full[i, :w], atol=1e-5)
        assert not cut[i, w:].any()
    # a minibatch without any action token: no update, nothing non-finite
    empty = batch._replace(action_mask=np.zeros_like(batch.action_mask),
                           weights=np.zeros_like(batch.weights))
    state, metrics = updater.step(updater.init_state(params), empty, by_length=True)
    assert float(metrics["tokens"]) == 0 and float(metrics["grad_norm"]) == 0
    assert int(metrics["skipped"]) == 0


def test_an_update_compiled_without_cpu_library_fusions_computes_the_same(model):
    """`model.cpu_library_fusions` false compiles the update's programs with other XLA:CPU
    options (another program) that compute the default's update and log-probs up to float
    rounding."""
    config, params = model
    batch = _with_weights(_random_batch(config, rows=4, width=24, seed=6))
    options = cpu_compiler_options(False)
    assert cpu_compiler_options(True) is None and options
    updaters = [Updater(config, SGD, LOSS, 2, mesh_lib.make_mesh(), params, width_multiple=8,
                        compiler_options=o) for o in (None, options)]
    (default, default_metrics), (other, other_metrics) = (
        u.step(u.init_state(params), batch, by_length=True) for u in updaters)
    chex.assert_trees_all_close(other.params, default.params, atol=2e-5, rtol=1e-5)
    for key in ("loss", "kl", "entropy", "grad_norm", "update_norm"):
        np.testing.assert_allclose(other_metrics[key], default_metrics[key], rtol=1e-5)
    placed = [u.place_params(params) for u in updaters]
    logprobs = [np.asarray(u.logprobs(p, batch.tokens)) for u, p in zip(updaters, placed)]
    np.testing.assert_allclose(logprobs[1], logprobs[0], atol=1e-5)
    programs = [u._logprobs.lower(p, batch.tokens).compile().as_text()
                for u, p in zip(updaters, placed)]
    assert programs[0] != programs[1]


def test_a_non_finite_loss_skips_the_update_and_says_so(model):
    config, params = model
    batch = _with_weights(_random_batch(config, seed=2))
    batch = batch._replace(advantages=batch.advantages.copy())
    batch.advantages[0, batch.action_mask[0]] = np.nan
    optimizer = SGD  # the step compiled for the accumulation test
    state, metrics = _update_step(config, optimizer, LOSS, 4, _state(params, optimizer), batch)
    assert int(metrics["skipped"]) == 1
    chex.assert_trees_all_equal(state.params, params)
    assert int(state.step) == 1


def test_schedules_warm_up_then_hold_or_decay():
    constant = make_schedule(1e-3, warmup_steps=4, total_steps=20, schedule="constant")
    cosine = make_schedule(1e-3, warmup_steps=4, total_steps=20, schedule="cosine")
    assert float(constant(0)) == 0.0 and float(constant(2)) == pytest.approx(5e-4)
    assert float(constant(4)) == pytest.approx(1e-3) and float(constant(19)) == pytest.approx(1e-3)
    assert float(cosine(4)) == pytest.approx(1e-3) and float(cosine(20)) == pytest.approx(1e-4)
    assert float(cosine(12)) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5), rel=1e-4)
    with pytest.raises(ValueError, match="schedule"):
        make_schedule(1e-3, schedule="linear")


def test_parameter_shardings_follow_the_logical_rules(model):
    config, params = model
    mesh = mesh_lib.make_mesh(1, 1, 1)
    shardings = mesh_lib.param_shardings(params, mesh)
    q = shardings["layers_0"]["attn"]["q_proj"]["kernel"].spec
    down = shardings["layers_0"]["mlp"]["down_proj"]["kernel"].spec
    assert tuple(q) == ("fsdp", "tensor") and tuple(down) == ("tensor", "fsdp")
    assert tuple(shardings["final_norm"]["scale"].spec) == (None,)
    with pytest.raises(ValueError, match="needs 4 devices"):
        mesh_lib.make_mesh(2, 2, 1)


_SHARDED_SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"  # XLA_FLAGS: 8 fake devices (fake_devices.run_script)
    import pickle
    import chex, jax, jax.numpy as jnp, numpy as np
    sys.path.insert(0, {tests!r})
    from test_train import _random_batch, _with_weights, one_layer_config
    from jaxtree.parallel.mesh import make_mesh
    import optax
    from jaxtree.losses import LossConfig
    from jaxtree.train.update import Updater
    assert len(jax.devices()) == 8
    config = one_layer_config()
    with open(sys.argv[1], "rb") as f:  # the test's `model`: no initialisation compiled here
        params = pickle.load(f)
    batch = _with_weights(_random_batch(config, rows=16, width=40, seed=3))
    results = {{}}
    for shape in [(1, 1, 1), (2, 2, 2)]:  # (data, fsdp, tensor): every axis split at once
        devices = jax.devices()[:int(np.prod(shape))]
        # SGD: the new params are the gradient itself, compared at 1e-5 (Adam's first step,
        # lr * g / |g|, would magnify float noise in near-zero gradient entries)
        updater = Updater(config, optax.sgd(1.0),
                          LossConfig(kl_coef=0.01), 8,
                          make_mesh(*shape, devices=devices), params)
        state = updater.init_state(params)
        for by_length in (False, True):
            state = updater.init_state(params)
            for _ in range(2):
                state, metrics = updater.step(state, batch, by_length)
            kernel = state.params["layers_0"]["mlp"]["up_proj"]["kernel"]
            print(shape, "up_proj shard", kernel.sharding.shard_shape(kernel.shape))
            results[shape, by_length] = jax.device_get(state.params)
    for key in [((2, 2, 2), False), ((1, 1, 1), True), ((2, 2, 2), True)]:
        chex.assert_trees_all_close(results[key], results[(1, 1, 1), False], atol=1e-5, rtol=0)
    print("SHARDED_MATCH")
""")


def test_update_on_eight_fake_devices_equals_one_device(model, tmp_path):
    """data=2 x fsdp=2 x tensor=2 gives the 1-device parameters (atol 1e-5), fused and with
    micro-batches grouped by length."""
    path = tmp_path / "params.pkl"
    with open(path, "wb") as f:
        pickle.dump(jax.device_get(model[1]), f)
    stdout = run_script(_SHARDED_SCRIPT, "SHARDED_MATCH", args=[str(path)])
    # parameters really were split: fsdp halves the model dimension, tensor the MLP width
    assert "(2, 2, 2) up_proj shard (64, 256)" in stdout


def test_updater_pads_nothing_and_reports_reference_logprobs(model):
    """Updater.logprobs equals a direct log-softmax gather of a full forward."""
    from jaxtree.models import forward
    config, params = model
    updater = Updater(config, make_optimizer(make_schedule(1e-3)),
                      LossConfig(), 2, mesh_lib.make_mesh(), params)
    tokens = _random_batch(config, rows=4, width=16, seed=4)["tokens"]
    got = np.asarray(updater.logprobs(updater.place_params(params), tokens))
    # on the host: each eager index of a device array would be a device call of its own
    logp = np.asarray(jax.nn.log_softmax(forward(config, params, jnp.asarray(tokens)), axis=-1))
    for i in range(4):
        for t in range(1, 16):
            assert got[i, t] == pytest.approx(float(logp[i, t - 1, tokens[i, t]]), abs=1e-5)
    assert np.all(got[:, 0] == 0)
