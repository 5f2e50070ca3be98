"""LoRA adapters (jaxtree.models.lora): the unmerged forward against an independent merge in
numpy for every family, zero-init adapters bit for bit, an update that trains the adapters
alone, the base as the KL reference, no reference forward without the KL term, the warm start,
and a toy run's exact resume and its refusal of another base."""

import copy
import json
import os
import shutil

import chex
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxtree import losses, models
from jaxtree.config import ConfigError
from jaxtree.losses import LossConfig
from jaxtree.models.lora import (TARGETS, LoraConfig, LoraParams, init_adapters, merge)
from jaxtree.models.token_scores import TrainingMemory, token_scores
from jaxtree.parallel import mesh as mesh_lib
from jaxtree.train.update import Updater
from toy_run import one_layer_policy, toy_config

TINY = models.get_preset("tiny")
# The families' checks at two blocks: adapters are per block, and a second block sees what the
# first one's adapters changed; four would only compile longer.
TWO_BLOCKS = TINY.replace(num_layers=2)
FAMILIES = {
    "llama": TWO_BLOCKS,
    "qwen2": TWO_BLOCKS.replace(model_type="qwen2", qkv_bias=True),
    "qwen3": TWO_BLOCKS.replace(model_type="qwen3", qk_norm=True),
}
LORA = LoraConfig(rank=4, alpha=8.0)
TOKENS = np.random.default_rng(0).integers(0, 256, (2, 12)).astype(np.int32)


def _random_adapters(base, lora=LORA, seed=1):
    """Adapters with nonzero A and B (a fresh adapter's B is 0, which would hide B's path)."""
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda x: rng.normal(0, 0.1, x.shape).astype(np.float32),
                                  init_adapters(lora, base))


def _with_random_biases(config, params):
    """Qwen2's q/k/v biases set to random values (their init is zero)."""
    if not config.qkv_bias:
        return params
    rng = np.random.default_rng(2)
    out = jax.tree_util.tree_map(np.asarray, params)
    for layer in (k for k in out if k.startswith("layers_")):
        for proj in ("q_proj", "k_proj", "v_proj"):
            bias = out[layer]["attn"][proj]["bias"]
            out[layer]["attn"][proj]["bias"] = rng.normal(0, 0.1, bias.shape).astype(np.float32)
    return out


def _merged_in_numpy(base, adapters, scale):
    """W + scale * A @ B for every adapted kernel, in float64 then float32: an independent
    transcription of the merge."""
    out = jax.tree_util.tree_map(np.asarray, base)
    for layer, blocks in adapters.items():
        for block, targets in blocks.items():
            for target, ab in targets.items():
                proj = TARGETS[target][1]
                w = np.asarray(out[layer][block][proj]["kernel"], np.float64)
                delta = np.asarray(ab["a"], np.float64) @ np.asarray(ab["b"], np.float64)
                out[layer][block][proj] = {**out[layer][block][proj],
                                           "kernel": (w + scale * delta).astype(np.float32)}
    return out


@pytest.fixture(scope="module")
def families():
    """{family: (config, base params, random adapters)}."""
    out = {}
    for name, config in FAMILIES.items():
        base = _with_random_biases(config, models.init_params(config, jax.random.key(0)))
        out[name] = (config, base, _random_adapters(base))
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_unmerged_forward_equals_the_merged_models(families, family):
    config, base, adapters = families[family]
    unmerged = np.asarray(models.forward(config, LoraParams(base, adapters, LORA.scale), TOKENS))
    reference = np.asarray(models.forward(config, _merged_in_numpy(base, adapters, LORA.scale),
                                          TOKENS))
    plain = np.asarray(models.forward(config, base, TOKENS))
    assert np.abs(reference - plain).max() > 0.1  # the adapters do change the model
    np.testing.assert_allclose(unmerged, reference, atol=2e-5, rtol=0)
    # jaxtree's own merge (what the samplers get) agrees as well
    ours = np.asarray(models.forward(config, merge(LoraParams(base, adapters, LORA.scale)),
                                     TOKENS))
    np.testing.assert_allclose(ours, reference, atol=2e-5, rtol=0)


def test_rematerialized_and_cached_forwards_apply_the_adapters(families):
    """The training forward with remat (a scan over stacked blocks) and the samplers' cache
    extension see the adapters too."""
    config, base, adapters = families["llama"]
    lora_params = LoraParams(base, adapters, LORA.scale)
    merged = _merged_in_numpy(base, adapters, LORA.scale)
    expected = np.asarray(token_scores(config, merged, TOKENS)[0])
    remat = np.asarray(token_scores(config, lora_params, TOKENS, TrainingMemory(remat=True))[0])
    np.testing.assert_allclose(remat, expected, atol=2e-5)
    cache = models.init_cache(config, 2, 16)
    logits, _ = models.extend_cache(config, lora_params, cache, TOKENS,
                                    jnp.full((2,), 12, jnp.int32))
    np.testing.assert_allclose(np.asarray(logits),
                               np.asarray(models.forward(config, merged, TOKENS)), atol=2e-5)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fresh_adapters_reproduce_the_base_bit_for_bit(families, family):
    config, base, _ = families[family]
    fresh = init_adapters(LORA, base)
    assert all(not np.asarray(x["b"]).any() for blocks in fresh.values()
               for targets in blocks.values() for x in targets.values())
    assert all(np.asarray(x["a"]).std() > 0 for blocks in fresh.values()
               for targets in blocks.values() for x in targets.values())
    np.testing.assert_array_equal(
        np.asarray(models.forward(config, LoraParams(base, fresh, LORA.scale), TOKENS)),
        np.asarray(models.forward(config, base, TOKENS)))


def test_adapters_cover_the_chosen_targets_only(families):
    config, base, _ = families["llama"]
    adapters = init_adapters(LoraConfig(rank=2, targets=("q", "v", "down")), base)
    assert set(adapters) == {f"layers_{i}" for i in range(config.num_layers)}
    assert {b: set(t) for b, t in adapters["layers_0"].items()} == {"attn": {"q", "v"},
                                                                    "mlp": {"down"}}
    v = adapters["layers_0"]["attn"]["v"]
    assert v["a"].shape == (128, 2) and v["b"].shape == (2, 64)  # D -> K x Dh
    with pytest.raises(ConfigError, match="targets"):
        LoraConfig(rank=2, targets=("q", "w"))
    with pytest.raises(ConfigError, match="targets"):
        LoraConfig(rank=2, targets=())


# ----------------------------------------------------------------------------- the update

def _minibatch(loss_config, rows=4, width=16, seed=3):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, (rows, width)).astype(np.int32)
    mask = np.zeros((rows, width), bool)
    mask[:, width // 2:] = True
    return losses.minibatch(tokens, mask, (-2.0 * mask).astype(np.float32),
                            (rng.normal(size=(rows, width)) * mask).astype(np.float32),
                            (-2.5 * mask).astype(np.float32), loss_config, 1.0)


@pytest.fixture(scope="module")
def lora_updater(families):
    """An Updater training LoRA adapters with SGD at rate 1 (the step is minus the gradient)."""
    config, base, _ = families["llama"]
    loss = LossConfig(kl_coef=0.05, entropy_coef=0.01)
    return Updater(config, optax.sgd(1.0), loss, 2, mesh_lib.make_mesh(), base,
                   TrainingMemory(action_only=False), width_multiple=8, lora=LORA)


@pytest.mark.parametrize("by_length", [True, False])
def test_an_update_trains_the_adapters_alone(families, lora_updater, by_length):
    config, base, _ = families["llama"]
    u = lora_updater
    before = jax.tree_util.tree_map(np.array, base)
    state = u.init_state(base)
    adapters = jax.tree_util.tree_map(np.array, state.params)
    # the optimizer state covers the adapters only (SGD: an empty state; Adam's moments below)
    assert not jax.tree_util.tree_leaves(state.opt_state)
    mb = _minibatch(u.loss_config)
    state, metrics = u.step(state, mb, by_length=by_length)
    assert int(metrics["skipped"]) == 0
    chex.assert_trees_all_equal(jax.tree_util.tree_map(np.asarray, u.base), before)
    chex.assert_trees_all_equal(jax.tree_util.tree_map(np.asarray, base), before)

    def direct(a):
        return losses.minibatch_loss(config, u.loss_config, u.memory,
                                     LoraParams(before, a, LORA.scale),
                                     jax.tree_util.tree_map(jnp.asarray, mb))[0]
    grads = jax.jit(jax.grad(direct))(adapters)
    expected = jax.tree_util.tree_map(lambda a, g: a - np.asarray(g), adapters, grads)
    chex.assert_trees_all_close(jax.device_get(state.params), expected, atol=1e-6)
    assert any(np.abs(np.asarray(g)).max() > 0 for g in jax.tree_util.tree_leaves(grads))


def test_adam_state_has_the_adapters_shapes_only(families):
    config, base, _ = families["llama"]
    updater = Updater(config, optax.adam(1e-3), LossConfig(), 2, mesh_lib.make_mesh(), base,
                      width_multiple=8, lora=LORA)
    state = updater.init_state(base)
    adapter_shapes = {x.shape for x in jax.tree_util.tree_leaves(state.params)}
    moment_shapes = {x.shape for x in jax.tree_util.tree_leaves(state.opt_state) if x.ndim}
    assert moment_shapes == adapter_shapes
    n_adapter = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
    n_moments = sum(x.size for x in jax.tree_util.tree_leaves(state.opt_state))
    assert n_moments == 2 * n_adapter + 1  # mu and nu per adapter leaf, and Adam's step count


def _output_shapes_of_dots(jaxpr) -> set:
    """The output shapes of every dot_general in `jaxpr` and its sub-jaxprs (scans, remat)."""
    shapes = {tuple(eqn.outvars[0].aval.shape) for eqn in jaxpr.eqns
              if eqn.primitive.name == "dot_general"}
    for sub in jax.extend.core.subjaxprs(jaxpr):
        shapes |= _output_shapes_of_dots(getattr(sub, "jaxpr", sub))
    return shapes


def test_the_adapters_gradient_computes_no_weight_gradient_of_the_base(families):
    """No dot of the adapters' backward pass has the shape of a base kernel (a dense weight
    gradient), while full fine-tuning's does."""
    config, base, adapters = families["llama"]
    kernels = {tuple(x.shape) for path, x in jax.tree_util.tree_flatten_with_path(base)[0]
               if jax.tree_util.keystr(path).endswith("['kernel']")}
    loss = lambda p: token_scores(config, p, TOKENS)[0].sum()  # noqa: E731
    lora_grad = jax.make_jaxpr(jax.grad(lambda a: loss(LoraParams(base, a, LORA.scale))))(
        adapters)
    full_grad = jax.make_jaxpr(jax.grad(loss))(base)
    # a weight gradient may come out of its dot transposed
    lora_dots, full_dots = (_output_shapes_of_dots(g.jaxpr) for g in (lora_grad, full_grad))
    assert all(shape not in lora_dots and shape[::-1] not in lora_dots for shape in kernels)
    assert all(shape in full_dots or shape[::-1] in full_dots for shape in kernels)


def test_the_reference_is_the_base_and_kl_off_runs_no_reference_forward(families,
                                                                       lora_updater,
                                                                       monkeypatch):
    """With LoRA the KL reference is the base itself, adapters off; with kl_coef = 0 (with or
    without LoRA) the reference log-probs are zeros computed without a forward, and the KL is
    reported as 0."""
    from jaxtree.train.batch_update import BatchUpdate
    from jaxtree.train.config import TrainConfig
    config, base, adapters = families["llama"]
    u = lora_updater
    reference = u.reference_params(base)
    assert reference is u.base
    mb = _minibatch(u.loss_config)
    expected = np.asarray(token_scores(config, base, jnp.asarray(mb.tokens))[0])
    np.testing.assert_allclose(np.asarray(u.logprobs(reference, mb.tokens)), expected, atol=1e-6)
    adapted = np.asarray(u.logprobs(u.policy_params(adapters), mb.tokens))
    assert np.abs(adapted - expected).max() > 1e-3

    no_kl = LossConfig(kl_coef=0.0)
    cases = [(u, 1), (Updater(config, optax.sgd(1.0), no_kl, 2, mesh_lib.make_mesh(), base,
                              width_multiple=8, lora=LORA), 0),
             (Updater(config, optax.sgd(1.0), no_kl, 2, mesh_lib.make_mesh(), base,
                      width_multiple=8), 0)]
    for updater, forwards in cases:
        calls = []
        logprobs = updater.logprobs
        monkeypatch.setattr(updater, "logprobs",
                            lambda *a, **k: calls.append(a[0]) or logprobs(*a, **k))
        update = BatchUpdate(updater, TrainConfig(prefix_sharing="off"), 256)
        inputs = update.inputs(mb.tokens, mb.action_mask, mb.old_logprobs, mb.advantages,
                               np.arange(len(mb.tokens)))
        ref = update.reference_logprobs(reference, inputs, False)
        assert len(calls) == forwards and all(params is u.base for params in calls)
        assert bool(ref.any()) == bool(forwards)
    # the KL is not measured without its term: 0, not k3 against the zero log-probs
    updater = cases[1][0]
    _, collected = BatchUpdate(updater, TrainConfig(prefix_sharing="off"), 256).optimizer_steps(
        updater.init_state(base), inputs, ref, False, 1)
    assert collected[0]["kl"] == 0.0 and collected[0]["kl_loss"] == 0.0


# ----------------------------------------------------------------------------- jobs

@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A toy LoRA run of 2 steps after a LoRA warm start (checkpoints at both steps) of the
    one-block tiny model (`one_layer_policy`), and a copy of its workdir cut back to step 1 and
    resumed: (config, straight, resumed)."""
    from jaxtree.train import jobs
    root = tmp_path_factory.mktemp("lora_run")
    config = toy_config(steps=2, model__name=one_layer_policy(str(root / "model")),
                        model__lora__rank=4, train__init="sft", sft__num_episodes=8,
                        sft__steps=2, sft__warmup_steps=1, sft__batch_size=2)
    straight, resumed = str(root / "straight"), str(root / "resumed")
    jobs.train_job(config, straight)
    shutil.copytree(straight, resumed)
    shutil.rmtree(os.path.join(resumed, "checkpoints", "2"))
    assert jobs.train_job(config, resumed)["step"] == 2
    return config, straight, resumed


def test_a_lora_warm_start_saves_adapters_and_loads_merged(lora_run):
    """The warm start's checkpoint holds adapters and names the model it adapts; loading it
    gives base + adapters merged, which the RL run then adapts in turn."""
    from jaxtree.checkpoints import load_policy_checkpoint
    from jaxtree.policy import load_policy
    config, straight, _ = lora_run
    sft = os.path.join(straight, "sft")
    _, adapters, _, metadata = load_policy_checkpoint(sft)
    assert metadata["lora"]["base"]["name"] == config.model.name
    assert metadata["lora"]["rank"] == 4 and set(adapters) == {"layers_0"}
    assert any(np.abs(np.asarray(x["b"])).max() > 0 for blocks in adapters.values()
               for targets in blocks.values() for x in targets.values())
    base = load_policy(config.model.name, param_dtype="float32").params
    expected = _merged_in_numpy(base, adapters, 16.0 / 4)  # the default alpha over rank 4
    chex.assert_trees_all_close(jax.device_get(load_policy(sft).params), expected, atol=1e-6)
    rl_base = load_policy_checkpoint(straight)[3]["lora"]["base"]
    assert rl_base["name"].startswith(os.path.join(sft, "checkpoints"))


def test_a_lora_run_checkpoints_adapters_and_resumes_bit_exactly(lora_run):
    from jaxtree.checkpoints import load_policy_checkpoint
    from jaxtree.rollout.stats import TIMING_METRICS
    from jaxtree.train.metrics import read_metrics
    _, straight, resumed = lora_run
    a, b = (load_policy_checkpoint(w) for w in (straight, resumed))
    chex.assert_trees_all_equal(a[1], b[1])
    # the checkpoint holds the adapters alone (trained: B moved off zero)
    assert set(a[1]) == {"layers_0"}
    assert np.abs(np.asarray(a[1]["layers_0"]["mlp"]["down"]["b"])).max() > 0
    assert len(a[3]["lora"]["base"]["sha256"]) == 64
    timing = lambda r: {k: v for k, v in r.items()  # noqa: E731
                        if not k.startswith("time/") and k not in TIMING_METRICS}
    records = [timing(r) for r in read_metrics(straight)]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records == [timing(r) for r in read_metrics(resumed)]
    # the sampler (merged adapters) and the update (unmerged) agree on the log-probs
    assert records[-1]["train/skipped"] == 0 and records[-1]["update/logprob_gap_max"] < 1e-4


def test_resuming_a_lora_run_on_another_base_is_refused_naming_it(lora_run, tmp_path):
    from jaxtree.train import jobs
    config, _, resumed = lora_run
    other = copy.deepcopy(config)
    other.train.steps, other.train.init = 3, "model"
    other.model.name = one_layer_policy(str(tmp_path / "other"), seed=1)
    with pytest.raises(ConfigError) as error:
        jobs.train_job(other, resumed, allow_config_change=True)
    message = str(error.value)
    assert message.startswith("config.model.name: the checkpoints in ")
    assert f"), not for {other.model.name} (sha256 " in message and "\n" not in message


# ----------------------------------------------------------------------------- export

def _torch_logits(model, tokens):
    import torch
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(tokens, np.int64))).logits.numpy()


def _check_export(out, adapter_dir, base_dir, base, adapters, config, lora):
    """The merged export in transformers and the adapter in peft over the base directory give
    jaxtree's logits of base + adapters (unmerged); the adapter has PEFT's names and shapes."""
    import torch
    import transformers
    from peft import PeftModel
    from safetensors.numpy import load_file
    ours = np.asarray(models.forward(config, LoraParams(base, adapters, lora.scale), TOKENS))
    assert np.abs(ours - np.asarray(models.forward(config, base, TOKENS))).max() > 1e-3
    merged = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    np.testing.assert_allclose(_torch_logits(merged, TOKENS), ours, atol=1e-4)
    peft_config = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert peft_config["base_model_name_or_path"] == base_dir
    assert (peft_config["r"], peft_config["lora_alpha"]) == (lora.rank, lora.alpha)
    assert sorted(peft_config["target_modules"]) == sorted(TARGETS[t][1] for t in lora.targets)
    tensors = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    last = config.num_layers - 1
    a = adapters[f"layers_{last}"]["attn"]["q"]
    prefix = f"base_model.model.model.layers.{last}.self_attn.q_proj"
    np.testing.assert_array_equal(tensors[f"{prefix}.lora_A.weight"], a["a"].T)
    np.testing.assert_array_equal(tensors[f"{prefix}.lora_B.weight"], a["b"].T)
    assert len(tensors) == 2 * config.num_layers * len(lora.targets)
    hf_base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    np.testing.assert_allclose(_torch_logits(hf_base.eval(), TOKENS),
                               np.asarray(models.forward(config, base, TOKENS)), atol=1e-4)
    adapted = PeftModel.from_pretrained(hf_base, adapter_dir).eval()
    np.testing.assert_allclose(_torch_logits(adapted, TOKENS), ours, atol=1e-4)
    umask = os.umask(0)
    os.umask(umask)
    for path in (os.path.join(out, "model.safetensors"),
                 os.path.join(adapter_dir, "adapter_model.safetensors")):
        assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask  # as the other files (not 0600)


def test_a_lora_run_exports_merged_and_as_a_peft_adapter_over_its_base(lora_run, tmp_path):
    """The toy run's base is its LoRA warm start (base + warm-start adapters merged, a jaxtree
    checkpoint): the export writes it as a Hugging Face directory beside the adapter."""
    from jaxtree.checkpoints import load_policy_checkpoint
    from jaxtree.policy import export_lora_adapter, export_policy, load_policy
    _, straight, _ = lora_run
    out = str(tmp_path / "hf")
    export_policy(load_policy(straight), out)
    adapter_dir = export_lora_adapter(straight, out)
    config, adapters, _, metadata = load_policy_checkpoint(straight)
    base = load_policy(metadata["lora"]["base"]["name"]).params
    _check_export(out, adapter_dir, os.path.join(out, "base"), base, adapters, config,
                  LoraConfig(rank=4))


def test_a_lora_checkpoint_over_a_hugging_face_base_points_peft_at_it(families, tmp_path):
    """A base that is a Hugging Face directory (random Qwen2-shaped: q/k/v biases) is not
    copied: the adapter config names it."""
    from jaxtree.checkpoints import save_policy
    from jaxtree.policy import Policy, export_lora_adapter, export_policy, load_policy
    from jaxtree.tokenizers import ByteTokenizer
    config, base, adapters = families["qwen2"]
    hf_dir = str(tmp_path / "base_hf")
    export_policy(Policy(config, base, ByteTokenizer(), "test"), hf_dir)
    base_policy = load_policy(hf_dir)
    lora = LoraConfig(rank=4, alpha=8.0)
    work = str(tmp_path / "run")
    save_policy(work, 1, adapters, config, "byte",
                {"lora": dict(rank=4, alpha=8.0, targets=list(lora.targets),
                              base=base_policy.base_record())})
    out = str(tmp_path / "out")
    export_policy(load_policy(work), out)
    adapter_dir = export_lora_adapter(work, out)
    assert not os.path.exists(os.path.join(out, "base"))
    _check_export(out, adapter_dir, os.path.abspath(hf_dir), base, adapters, config, lora)


# ----------------------------------------------------------------------------- action-only logits

def _action_batch(loss_config, rows=4, width=24, seed=5):
    """Rows with ragged action spans (several per row, one at column 0, one row without any)."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 256, (rows, width)).astype(np.int32)
    mask = np.zeros((rows, width), bool)
    mask[0, 0:3] = mask[0, 10:14] = True
    mask[1, 20:24] = True
    mask[2, 5:7] = mask[2, 12:13] = mask[2, 18:21] = True
    old = np.where(mask, -rng.uniform(0.2, 3.0, mask.shape), 0).astype(np.float32)
    ref = np.where(mask, -rng.uniform(0.2, 3.0, mask.shape), 0).astype(np.float32)
    advantages = np.where(mask, rng.normal(size=(rows, 1)), 0).astype(np.float32)
    return losses.minibatch(tokens, mask, old, advantages, ref, loss_config, 1.0)


def test_action_only_scores_equal_the_full_scores_and_their_gradients(families):
    """Scores at the action slots equal the whole-row scores at those columns, and a loss of
    them has the same gradient, for the whole model and for adapters (and with the
    vocabulary projection in chunks)."""
    config, base, adapters = families["llama"]
    mb = _action_batch(LossConfig())
    amb = losses.take_action_slots(mb, losses.action_slot_count(mb))
    assert amb.positions.shape == (4, 8)  # 7 action tokens at most: 8 slots
    valid = amb.positions >= 0
    np.testing.assert_array_equal(amb.positions[2, :6], [5, 6, 12, 18, 19, 20])
    assert not valid[3].any() and (amb.positions[0, :7] == [0, 1, 2, 10, 11, 12, 13]).all()
    columns = jnp.asarray(np.maximum(amb.positions, 0))
    weights = jnp.asarray(np.where(valid, np.random.default_rng(0).normal(size=valid.shape), 0))
    tokens, positions = jnp.asarray(mb.tokens), jnp.asarray(amb.positions)

    def full(params):
        return [jnp.take_along_axis(x, columns, axis=1)
                for x in token_scores(config, params, tokens)]

    def sliced(params, memory=TrainingMemory()):
        return token_scores(config, params, tokens, memory, positions)

    def loss(scores):
        return (weights * (scores[0] + 0.3 * scores[1])).sum()

    for params, wrt in ((base, lambda p: p),
                        (adapters, lambda a: LoraParams(base, a, LORA.scale))):
        @jax.jit
        def both(p):
            return [(f(wrt(p)), jax.grad(lambda q: loss(f(wrt(q))))(p))
                    for f in (full, sliced)]
        (expected, expected_grad), (ours, grad) = both(params)
        for e, o in zip(expected, ours):
            np.testing.assert_allclose(np.where(valid, e, 0), o, atol=2e-6)
        assert max(float(np.abs(g).max()) for g in jax.tree_util.tree_leaves(grad)) > 1e-3
        chex.assert_trees_all_close(grad, expected_grad, atol=2e-6, rtol=1e-5)
    chunked = jax.jit(lambda p: sliced(p, TrainingMemory(logits_chunk=3)))(base)
    for e, o in zip(jax.jit(full)(base), chunked):
        np.testing.assert_allclose(np.where(valid, e, 0), o, atol=2e-6)


def test_an_action_only_update_equals_the_full_one_by_length_and_through_the_forest(
        families, lora_updater):
    """One LoRA step (KL and entropy on) with action-only logits (the default), by length and
    through the prefix forest, equals the full-logits step by length."""
    from jaxtree.train.forest_update import ForestSteps
    config, base, _ = families["llama"]
    u = lora_updater
    action_only = Updater(config, optax.sgd(1.0), u.loss_config, 2, mesh_lib.make_mesh(), base,
                          TrainingMemory(action_only=True), width_multiple=8, lora=LORA)
    mb = _action_batch(u.loss_config)
    tokens = mb.tokens.copy()  # groups {0, 1} and {2, 3}, sharing their first 10 and 5 tokens
    tokens[1, :10], tokens[3, :5] = tokens[0, :10], tokens[2, :5]
    mb, groups = mb._replace(tokens=tokens), np.asarray([0, 0, 1, 1])
    expected, metrics = u.step(u.init_state(base), mb, by_length=True)
    by_length, by_length_metrics = action_only.step(action_only.init_state(base), mb,
                                                    by_length=True)
    forest = ForestSteps(action_only, block=8)
    plan = forest.plan(mb, groups)
    assert all(fmb.score_index is not None for fmb, _ in plan)
    shared, shared_metrics = forest.step(action_only.init_state(base), [f for f, _ in plan])
    for state, got in ((by_length, by_length_metrics), (shared, shared_metrics)):
        chex.assert_trees_all_close(state.params, expected.params, atol=2e-6, rtol=1e-5)
        for key in metrics:
            np.testing.assert_allclose(got[key], metrics[key], rtol=2e-5, atol=1e-6,
                                       err_msg=key)
