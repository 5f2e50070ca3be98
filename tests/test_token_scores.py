"""Per-token scores for the losses: every memory trade-off (remat, chunked logits) gives the
full forward's numbers and gradients, and actually lowers the compiled program's memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtree import models
from jaxtree.config import ConfigError
from jaxtree.models.token_scores import TrainingMemory, token_scores
from jaxtree.policy import ModelSpec

# each knob alone (chunks of 5 over 23 positions: a ragged last chunk) and both together, with
# each remat policy
MODES = (TrainingMemory(logits_chunk=5), TrainingMemory(remat=True, logits_chunk=7),
         TrainingMemory(remat=True, remat_policy="attention", logits_chunk=7))

def _reference(config, params, tokens):
    """log-prob, entropy and greedy hit of each token, in float64 from the full forward's
    logits at the position before it."""
    logits = np.asarray(models.forward(config, params, jnp.asarray(tokens)), np.float64)
    rows, width = tokens.shape
    logprobs, entropy, greedy = (np.zeros((rows, width)), np.zeros((rows, width)),
                                 np.zeros((rows, width), bool))
    for b in range(rows):
        for t in range(1, width):
            row = logits[b, t - 1]
            logp = row - row.max() - np.log(np.exp(row - row.max()).sum())
            logprobs[b, t] = logp[tokens[b, t]]
            entropy[b, t] = -(np.exp(logp) * logp).sum()
            greedy[b, t] = tokens[b, t] == row.argmax()
    return logprobs, entropy, greedy


@pytest.fixture(scope="module", params=["tied", "untied"])
def model(request, tiny):
    config, params = tiny
    if request.param == "untied":
        config = config.replace(tie_word_embeddings=False)
        params = models.init_params(config, jax.random.key(1))
    return config, params


def test_every_memory_mode_gives_the_full_forwards_scores_and_gradients(model):
    config, params = model
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (3, 24)).astype(np.int32)  # 23 positions: ragged chunks
    # make some tokens the greedy ones, so the hit is exercised both ways
    logits = np.asarray(models.forward(config, params, jnp.asarray(tokens)))
    tokens[:, 1::3] = logits[:, 0:-1:3].argmax(-1)
    ref_logprobs, ref_entropy, ref_greedy = _reference(config, params, tokens)
    weights = jnp.asarray(rng.normal(size=tokens.shape), jnp.float32)

    def objective(p, memory):
        scores = token_scores(config, p, jnp.asarray(tokens), memory)
        logprobs, entropy, _ = scores
        return (weights * logprobs).sum() + (weights * entropy).sum(), scores

    # one program per mode gives its scores (the forward's values) and gradients
    grad = jax.jit(jax.grad(objective, has_aux=True), static_argnums=1)
    base = None
    # the untied head only needs its own projection checked: both knobs together
    modes = MODES if config.tie_word_embeddings else MODES[-1:]
    for memory in (TrainingMemory(),) + modes:
        grads, (logprobs, entropy, greedy) = grad(params, memory)
        np.testing.assert_allclose(logprobs, ref_logprobs, atol=2e-5, err_msg=str(memory))
        np.testing.assert_allclose(entropy, ref_entropy, atol=2e-5, err_msg=str(memory))
        np.testing.assert_array_equal(greedy, ref_greedy, err_msg=str(memory))
        assert greedy[:, 1:].any() and not greedy.all()
        if base is None:
            base = grads
            continue
        for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(base)):
            np.testing.assert_allclose(a, b, atol=2e-5, err_msg=str(memory))


def test_chunked_logits_and_remat_lower_the_compiled_memory():
    """XLA's own accounting of the backward pass's temporaries (`memory_analysis`): chunking
    the vocabulary projection removes the [B, T, V] logits and their gradient; remat removes the
    per-layer activations (a deep, narrow model with a small vocabulary shows it)."""

    def temp_bytes(config, memory, width):
        params = jax.eval_shape(lambda key: models.init_params(config, key), jax.random.key(0))
        tokens = jax.ShapeDtypeStruct((2, width), jnp.int32)
        fn = jax.jit(jax.grad(lambda p, t: token_scores(config, p, t, memory)[0].sum()))
        return fn.lower(params, tokens).compile().memory_analysis().temp_size_in_bytes

    wide = models.get_preset("tiny").replace(vocab_size=4096, num_layers=1)
    assert (temp_bytes(wide, TrainingMemory(logits_chunk=32), 128)
            < 0.6 * temp_bytes(wide, TrainingMemory(), 128))
    deep = models.get_preset("tiny").replace(num_layers=6)
    everything = temp_bytes(deep, TrainingMemory(remat=True), 256)
    full = temp_bytes(deep, TrainingMemory(), 256)
    assert everything < 0.6 * full
    # keeping the projections costs memory, less than keeping the attention's probabilities too
    assert everything < temp_bytes(deep, TrainingMemory(remat=True, remat_policy="attention"),
                                   256) < 0.7 * full


def test_the_model_section_carries_the_memory_knobs():
    spec = ModelSpec(remat=True, logits_chunk=256)
    assert spec.training_memory() == TrainingMemory(remat=True, logits_chunk=256)
    assert ModelSpec(remat=True, remat_policy="attention").training_memory().remat_policy == \
        "attention"
    with pytest.raises(ConfigError, match="remat_policy"):
        ModelSpec(remat_policy="some")
    with pytest.raises(ValueError, match="remat_policy"):
        TrainingMemory(remat_policy="some")
    with pytest.raises(ConfigError, match="logits_chunk"):
        ModelSpec(logits_chunk=-1)


def test_the_trainer_updates_with_the_model_sections_memory_knobs(tmp_path):
    from jaxtree.experiment import Experiment
    from jaxtree.train.trainer import Trainer
    from toy_run import toy_config
    exp = Experiment.from_config(toy_config(model__remat=True, model__logits_chunk=16))
    from jaxtree.train.pipeline import build_pipeline
    policy = exp.model.load()
    trainer = Trainer(exp, build_pipeline(exp, policy), str(tmp_path), policy, {})
    assert trainer.updater.memory == TrainingMemory(remat=True, logits_chunk=16)
